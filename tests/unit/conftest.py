"""The unit tier: every test here is marked ``unit`` (see ``tests/tiers.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.tiers import forbid_unmarked_children, mark_tier

#: Tests that start a child process, by module: () is every test of it.
CHILDREN: dict[str, tuple[str, ...]] = {
    "test_ffmpeg_runner.py": (),  # the runner's process group, timeouts and kills: real children
    "test_ffmpeg_unpack.py": (),  # runs the unpacked ffprobe
    "test_worker_imports.py": (),  # imports the worker in a fresh interpreter
    "test_bounded_decode.py": (),  # the bounded render child
}

__all__ = ["forbid_unmarked_children"]


def pytest_collection_modifyitems(items):
    mark_tier(items, Path(__file__).parent, "unit", CHILDREN)
