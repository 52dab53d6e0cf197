"""The fakes are atomic per call, as the real adapters are: the backfill's scan segments call
them from threads (tests/fakes.py, ``atomic``)."""

from __future__ import annotations

import sys
import threading

from mediajobs.domain.backfill import Backfill, BackfillState, Counts
from tests.fakes import FakeBackfills


def test_counts_written_from_many_threads_at_once_are_all_kept():
    backfills = FakeBackfills()
    backfill = Backfill(
        id="b1", change="c", generation=1, state=BackfillState.RUNNING, active={}, policy_version="none",
        segments=8, created_at_s=0, updated_at_s=0, counts=Counts(),
    )  # fmt: skip
    assert backfills.create(backfill, after=0)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    try:
        threads = [
            threading.Thread(
                target=lambda n=n: [backfills.count("b1", f"{n}-{i}", "enqueued", now_s=1) for i in range(400)]
            )
            for n in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    counts = backfills.get("b1").counts
    assert (counts.total, counts.enqueued) == (3200, 3200)
