"""Shared fixtures. Real media is read from ../shared (beside the repository), never copied."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEDIAJOBS_SHARED", REPO.parent / "shared"))
MEDIA = SHARED / "media"
CASES = SHARED / "cases"

os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
# Short leases, so a busy duplicate in a test comes back within seconds (deployed: 120 s).
os.environ.setdefault("LEASE_SECONDS", "3")


def shared_file(*parts: str) -> Path:
    """A file under ../shared; fails (never skips) when the shared folder is missing."""
    path = SHARED.joinpath(*parts)
    if not path.is_file():
        pytest.fail(f"missing shared media {path}: tests read ../shared beside the repository (or $MEDIAJOBS_SHARED)")
    return path


@pytest.fixture(scope="module")
def local_session() -> Iterator[object]:
    """The embedded AWS (moto server) with the stack of template.yaml and the real handler."""
    from mediajobs.local.session import LocalSession

    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml") as session:
        yield session
