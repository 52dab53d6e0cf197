"""Backfills on the embedded AWS under what a break-it review found (each failed on the code
before its fix): the DynamoDB adapter's pause under a busy scan, overlapping scheduled runs,
and the storm's own checks."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from mediajobs.domain.backfill import Backfill, BackfillState, backfill_id, document
from mediajobs.domain.errors import TransientFailure
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from tests.conftest import REPO


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-backfill-break") as stack:
        yield stack


def _running(stack: LocalStack, change_hex: str) -> Backfill:
    backfills = stack.backfills()
    new = Backfill(
        id=backfill_id(change_hex, 1), change=change_hex, generation=1, state=BackfillState.RUNNING,
        active={"image": ("a@1", "b@1")}, policy_version="none", segments=4, created_at_s=1, updated_at_s=1,
    )  # fmt: skip
    assert backfills.create(new, after=0)
    return new


def test_a_pause_or_cancel_is_not_lost_to_a_busy_scans_counts(stack):
    """``DynamoBackfills.move`` is conditional on ``total``, ``later`` and ``scanned`` being as
    read -- needed for ``done``, not for ``paused`` or ``cancelled``. While the scan counts
    (``reused`` counts are not paced at all: a content done already costs one transaction), every
    round of the operator's move loses to a count landing between its read and its write; after
    ``RetryConfig.rounds`` the verb fails with ``TransientFailure``: the backfill cannot be
    paused or cancelled while it is busiest."""
    backfills = stack.backfills()
    started = _running(stack, "a1" * 32)
    read = backfills.get
    job = itertools.count()

    def get(id_: str):
        found = read(id_)
        # a scanner's count lands between the move's read and its write (one per round)
        backfills.count(id_, f"{next(job):064x}", "reused", now_s=2)
        return found

    backfills.get = get  # type: ignore[method-assign]
    try:
        moved = backfills.move(started.id, BackfillState.PAUSED, now_s=3)
    except TransientFailure as lost:
        pytest.fail(f"the pause was lost to the scan's counts: {lost}")
    assert moved is not None and moved.state == BackfillState.PAUSED


def test_the_storms_checks_see_counts_that_do_not_match_the_ledger(stack):
    """``backfill_checks`` reports the backfill's counts as figures and never checks them --
    not against the ledger, not against the marks, not even against each other. A backfill
    that ends ``done`` with counts that cannot be (3 jobs ``done`` of 0 found, none of them in
    the ledger) passes every check; so does one whose count was lost between its request and
    its count (``tests/unit/test_backfill_break.py``, the second test), and one that did nothing
    at all (a storm run here ended with ``total`` 0 beside 39 new-set renders, every
    count-related check at 0)."""
    from mediajobs.domain.backfill import Counts
    from mediajobs.local.storm.backfill import backfill_checks, new_active_document
    from mediajobs.local.storm.notification_checks import watch_asset_writes

    watch_asset_writes(stack)  # as the storm does: the assets table's stream

    class Ran:
        deployed_at, done_at, spawned, failed_scans = time.time() - 10, time.time(), 2, 0
        old_settings = stack.settings()
        settings = stack.settings(active_recipes=new_active_document())

        def status(self):
            b = Backfill(
                id=backfill_id("b2" * 32, 1), change="b2" * 32, generation=1, state=BackfillState.DONE,
                active={"image": ("web-image@2", "image-placeholder@1")}, policy_version="none", segments=4,
                created_at_s=int(self.deployed_at), finished_at_s=int(self.done_at), scanned=8,
                counts=Counts(total=0, enqueued=0, done=3),
            )  # fmt: skip
            return document(b, now_s=time.time())

    checks, figures = backfill_checks(stack, Ran(), live_keys=set(), contents=[], events=[], put_at={})
    assert figures["counts"] == {"total": 0, "enqueued": 0, "done": 3, "reused": 0, "failed": 0, "dropped": 0}
    assert any(checks.values()), checks


def test_overlapping_schedule_runs_do_not_multiply_the_lane_requests(stack):
    """The schedule starts a scan every minute (``BackfillSchedule``, ``rate(1 minute)``) and
    each runs up to ``MOST_S`` (240 s): four invocations scan at once as a matter of course.
    They read the same cursors, work the same pages in lock step (each segment's loser of
    ``advance`` reads the winner's cursor and joins it on the next page), and each sends a
    page's jobs before either counts them (``counted`` then ``lane`` then ``count``): every job
    goes to the lane about once per overlapping run, and each run keeps
    ``BackfillRatePerSecond`` on its own. (Measured here with three runs over 300 contents:
    857 lane messages for 300 jobs.)"""
    import dataclasses
    import threading

    from mediajobs.bootstrap import Adapters, build_backfiller
    from tests.fakes import FakeQueue
    from tests.functional.test_backfill_store import NEW, seeded

    seeded(stack, 60, 60)  # 15 a segment: every run works the same page of each
    queue = FakeQueue()
    settings = dataclasses.replace(
        stack.settings(), backfill_queue_arn="arn:lane", backfill_segments=4, backfill_rate_per_s=1e9
    )

    def invocation():
        adapters = Adapters(
            store=None, ledger=stack.ledger(), sources=stack.sources(), queue=queue, steps={},  # type: ignore[arg-type]
            assets=stack.assets(writer=True), backfills=stack.backfills(),
        )  # fmt: skip
        return build_backfiller(settings, adapters, recipes=NEW)

    started, _ = invocation().start()
    runs = [threading.Thread(target=lambda: invocation().tick(budget_s=120)) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    after = stack.backfills().get(started.id)
    sent = [body for arn, body, _, _ in queue.resent if arn == "arn:lane"]
    assert after.counts.enqueued == len(set(sent))
    assert len(sent) <= 1.1 * len(set(sent)), f"{len(sent)} lane requests for {len(set(sent))} jobs"
