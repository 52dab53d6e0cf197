"""The functional tier: every test here is marked ``functional`` (see ``tests/tiers.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.tiers import forbid_unmarked_children, mark_tier

#: Tests that start a child process, by module: () is every test of it. The embedded
#: session renders images in the bounded render child and videos with ffmpeg, so every
#: test that runs an upload through it is here.
CHILDREN: dict[str, tuple[str, ...]] = {
    "test_cli.py": (),  # the CLI end to end
    "test_serve_credentials.py": (),  # `mediajobs serve` and the commands that reach it
    "test_simulate.py": (),  # the storm
    "test_layer_build.py": (),  # pip, compileall
    "test_ffmpeg_layer.py": (),  # the layer's ffmpeg and ffprobe
    "test_ffmpeg_stop.py": (),  # a child killed by a stop deferred while it started
    "test_without_ffmpeg.py": (),
    "test_video_pipeline.py": (),
    "test_pipeline_cases.py": (),
    "test_commit_without_reads.py": (),
    "test_concurrency.py": (),
    "test_crash_points.py": (),
    "test_least_privilege.py": (),
    "test_worker.py": (),
    "test_event_keys.py": (),
    "test_events.py": (),
    "test_unstorable_input.py": (),
    "test_work_folders.py": (),
    "test_template_contract.py": ("test_only_originals_reach_the_queue",),
    "test_embedded_aws.py": ("test_a_local_session_neither_writes_nor_needs_the_environment",),
    "test_placeholder.py": (),
    "test_collection_embedded.py": ("test_mediajobs_collect_prints_one_json_object_on_stdout",),
    "test_notifications_embedded.py": (),  # uploads rendered end to end
    "test_dispatcher_privilege.py": (),
    "test_storm_notification_checks.py": (),  # uploads rendered end to end
    "test_storm_end_checks.py": (),  # uploads rendered end to end
    "test_public_paths.py": (),  # uploads rendered end to end
}

__all__ = ["forbid_unmarked_children"]


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent, "functional", CHILDREN)
