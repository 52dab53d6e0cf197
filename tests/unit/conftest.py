"""The unit tier: every test here is marked ``unit`` (see ``tests/tiers.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.tiers import forbid_unmarked_children, mark_tier

#: Tests that start a child process, by module: () is every test of it.
CHILDREN: dict[str, tuple[str, ...]] = {
    # The runner's process group, timeouts and kills: real children.
    "test_ffmpeg_runner.py": (
        "test_a_timeout_kills_the_whole_process_group",
        "test_an_exception_in_the_progress_sink_kills_the_run",
        "test_arguments_reach_the_program_verbatim",
        "test_only_the_last_8_kib_of_stderr_are_kept",
        "test_progress_blocks_are_passed_on_and_the_exit_code_kept",
        "test_stdin_is_closed",
        "test_stdout_is_collected_without_a_progress_sink",
    ),
    "test_ffmpeg_unpack.py": ("test_a_packed_ffprobe_is_unpacked_checked_and_runs",),  # runs what it unpacked
    "test_worker_imports.py": (),  # imports the worker in a fresh interpreter
}

__all__ = ["forbid_unmarked_children"]


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent, "unit", CHILDREN)
