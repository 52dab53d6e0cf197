"""The integration tier: every test here is marked ``integration`` (see ``tests/tiers.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.tiers import forbid_unmarked_children, mark_tier

#: Tests that start a child process, by module: () is every test of it.
CHILDREN: dict[str, tuple[str, ...]] = {
    "test_bounded_decode.py": (),  # the bounded render child
    "test_video_cases.py": (),  # ffmpeg and ffprobe
    "test_case_build.py": (),  # the video makers run ffmpeg
}

__all__ = ["forbid_unmarked_children"]


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent, "integration", CHILDREN)
