"""Test tiers and the ``subprocess`` marker, shared by the tier conftests.

Every test carries the marker of the folder it is in (``unit``, ``functional``,
``integration``: see ``pyproject.toml``), given by :func:`mark_tier` from the tier's
``conftest.py``. Tests that start a child process -- the CLI run end to end, the storm,
layer builds, the bounded render child, ffmpeg and ffprobe -- also carry ``subprocess``;
``make test-fast`` leaves them out.

Which tests those are is decided by what a test does, and kept honest: while a test runs,
:func:`forbid_unmarked_children` fails it if it starts a child process without the marker
(``subprocess.Popen`` is what every child of the product and of the tests goes through:
the render zygote, the ffmpeg runner, the CLI runs, pip; and a render child forked from a
zygote that an earlier test started goes through ``Zygote.start``). The media makers
building the synthetic cases on first use are not the test's children.
"""

from __future__ import annotations

import subprocess
import traceback
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from mediajobs.adapters.isolated import Zygote

SUBPROCESS = "subprocess"
#: The synthetic media makers' folder.
MAKERS = Path(__file__).resolve().parent / "media"


def mark_tier(
    items: Iterable[pytest.Item], folder: Path, tier: str, children: Mapping[str, tuple[str, ...]] = {}
) -> None:
    """Mark every item under ``folder`` with ``tier``, and with ``subprocess`` when
    ``children`` names it.

    Parameters
    ----------
    items: the session's collected items (every folder's: the hook sees them all).
    folder: the tier's folder (its conftest's parent).
    tier: the marker name.
    children: module file name -> test names (without parameters) that start a child
        process; an empty tuple means every test of the module.
    """
    for item in items:
        path = Path(item.path)
        if folder not in path.parents:
            continue
        item.add_marker(getattr(pytest.mark, tier))
        names = children.get(path.name)
        if names is None:
            continue
        if not names or item.originalname in names:  # type: ignore[attr-defined]
            item.add_marker(getattr(pytest.mark, SUBPROCESS))


@pytest.fixture(autouse=True)
def forbid_unmarked_children(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that starts a child process without the ``subprocess`` marker (its
    fixtures of wider scope, set up before, may)."""
    if request.node.get_closest_marker(SUBPROCESS) is not None:
        yield
        return
    started: list[str] = []
    original = subprocess.Popen.__init__

    def record(self: subprocess.Popen[bytes], args: object, *rest: object, **kwargs: object) -> None:
        # The media makers (tests/media/, run by case_file on first use in a checkout, then
        # cached) build test data; the test itself starts nothing.
        if not any(MAKERS in Path(frame.filename).parents for frame in traceback.extract_stack()):
            started.append(str(args)[:120])
        original(self, args, *rest, **kwargs)  # type: ignore[arg-type]

    original_start = Zygote.start

    def record_fork(self: Zygote, factory: str, *rest: object, **kwargs: object) -> int:
        started.append(f"a render child of {factory} forked from the zygote")
        return original_start(self, factory, *rest, **kwargs)  # type: ignore[arg-type]

    subprocess.Popen.__init__ = record  # type: ignore[method-assign]
    Zygote.start = record_fork  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
        Zygote.start = original_start  # type: ignore[method-assign]
    if started:
        pytest.fail(
            f"{request.node.nodeid} started a child process ({started[0]}) but is not marked "
            f"'{SUBPROCESS}': add it to its tier's conftest.py",
            pytrace=False,
        )
