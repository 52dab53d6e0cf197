"""The integration tier: every test here is marked ``integration`` (see ``tests/tiers.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.tiers import forbid_unmarked_children, mark_tier

#: Tests that start a child process, by module: () is every test of it.
CHILDREN: dict[str, tuple[str, ...]] = {
    "test_bounded_decode.py": (),  # the bounded render child
    "test_video_cases.py": (),  # ffmpeg and ffprobe
    "test_video_segments.py": (),  # ffmpeg and ffprobe
    "test_break28_video.py": (),  # ffmpeg and ffprobe
    "test_case_build.py": (),  # the video makers run ffmpeg
    "test_heif_cases.py": ("test_an_mp4_with_bytes_after_its_last_box_renders",),  # ffprobe
    "test_raw_and_unsupported_images.py": ("test_the_cases_end_the_same_in_the_bounded_render_child",),
}

__all__ = ["forbid_unmarked_children"]


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent, "integration", CHILDREN)
