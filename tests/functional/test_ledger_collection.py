"""The DynamoDB ledger's collection states against the moto server: ``done`` ->
``collecting`` -> ``collected`` or back to ``done``, each write fenced on the collector's
token; a failed job swept; claims on what a collection leaves (render again from attempt
1, sweep after an interrupted collection, busy while a collection runs); races."""

from __future__ import annotations

import uuid

import pytest

from mediajobs.adapters.ledger import DynamoLedger
from mediajobs.domain.errors import Superseded
from mediajobs.domain.jobs import ClaimOutcome, JobSpec, JobState, OutputRecord, collectable
from tests.functional.together import run_together

LEASE_S = 60
MAX_ATTEMPTS = 3
NOW_S = 10_000


@pytest.fixture()
def ledger(local_session) -> DynamoLedger:
    stack = local_session.stack
    return stack.ledger(max_attempts=MAX_ATTEMPTS)


def spec(key: str) -> JobSpec:
    return JobSpec(key, "a" * 64, "web-image", 1, "b" * 64, "none", f"derivatives/{key}/", "media", "originals/x.jpg")


def done_job(ledger: DynamoLedger, *, attempts: int = 1) -> str:
    """A job committed after ``attempts`` claims."""
    key = uuid.uuid4().hex * 2
    claim = ledger.claim(spec(key), now_s=NOW_S - 500, lease_until_s=NOW_S - 500 + LEASE_S)
    for n in range(1, attempts):
        claim = ledger.claim(spec(key), now_s=NOW_S - 400 + n * 100, lease_until_s=NOW_S - 400 + n * 100 + 1)
    out = OutputRecord("thumb", f"derivatives/{key}/thumb.webp", "webp", 32, 32, 10, "0" * 64, "image/webp")
    ledger.complete(
        key,
        str(claim.lease_token),
        manifest_key=f"derivatives/{key}/manifest.json",
        outputs=[out],
        now_s=NOW_S - 100,
        decisions={"placeholder": {"hash": "x"}},
    )
    return key


def view(ledger: DynamoLedger, key: str):
    return ledger.find([key])[key]


def begin(ledger: DynamoLedger, key: str, token: str, *, lease_until_s: int, now_s: int) -> bool:
    """What a collector does to start: read the row, take it only if the domain says it is
    collectable (:func:`~mediajobs.domain.jobs.collectable`), fenced on the row it read."""
    seen = ledger.find([key]).get(key)
    if seen is None or not collectable(seen, now_s=now_s):
        return False
    return ledger.begin_collection(key, token, lease_until_s=lease_until_s, now_s=now_s, seen=seen)


def test_a_done_job_is_collected_under_the_collectors_token(ledger):
    key = done_job(ledger)
    assert begin(ledger, key, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
    seen = view(ledger, key)
    assert (seen.state, seen.lease_token, seen.lease_expires_at_s) == ("collecting", "c1", NOW_S + LEASE_S)
    assert (seen.source_bucket, seen.output_prefix) == ("media", f"derivatives/{key}/")
    ledger.renew(key, "c1", lease_until_s=NOW_S + 2 * LEASE_S, now_s=NOW_S + 30)
    assert view(ledger, key).lease_expires_at_s == NOW_S + 2 * LEASE_S
    ledger.end_collection(key, "c1", collected=True, now_s=NOW_S + 40)
    seen = view(ledger, key)
    assert (seen.state, seen.collected_at_s) == ("collected", NOW_S + 40)
    assert (seen.manifest_key, seen.outputs, seen.decisions) == (None, (), None)


def test_a_collection_that_found_a_reference_goes_back_to_done_with_its_result(ledger):
    key = done_job(ledger)
    before = view(ledger, key)
    assert begin(ledger, key, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
    ledger.end_collection(key, "c1", collected=False, now_s=NOW_S + 1)
    after = view(ledger, key)
    assert after.state == "done" and after.collected_at_s is None
    assert (after.manifest_key, after.outputs, after.decisions) == (
        before.manifest_key,
        before.outputs,
        before.decisions,
    )
    assert ledger.claim(spec(key), now_s=NOW_S + 2, lease_until_s=NOW_S + 62).outcome is ClaimOutcome.DONE


def test_only_a_done_row_or_an_expired_collection_can_be_begun(ledger):
    running = uuid.uuid4().hex * 2
    ledger.claim(spec(running), now_s=NOW_S, lease_until_s=NOW_S + LEASE_S)
    assert not begin(ledger, running, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
    assert not begin(ledger, uuid.uuid4().hex * 2, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
    key = done_job(ledger)
    assert begin(ledger, key, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
    assert not begin(ledger, key, "c2", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S + 1)
    # The first collector died: a later run takes its expired lease over and finishes.
    assert begin(ledger, key, "c2", lease_until_s=NOW_S + 2 * LEASE_S, now_s=NOW_S + LEASE_S)
    with pytest.raises(Superseded):
        ledger.end_collection(key, "c1", collected=True, now_s=NOW_S + LEASE_S + 1)
    ledger.end_collection(key, "c2", collected=True, now_s=NOW_S + LEASE_S + 1)
    assert not begin(ledger, key, "c3", lease_until_s=NOW_S + 9 * LEASE_S, now_s=NOW_S + 8 * LEASE_S)
    assert view(ledger, key).state == "collected"


def test_a_render_of_a_collected_job_starts_again_from_attempt_1(ledger):
    key = done_job(ledger, attempts=2)
    assert view(ledger, key).attempts == 2
    begin(ledger, key, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
    ledger.end_collection(key, "c1", collected=True, now_s=NOW_S + 1)
    claim = ledger.claim(spec(key), now_s=NOW_S + 2, lease_until_s=NOW_S + 2 + LEASE_S, seen=view(ledger, key))
    assert (claim.outcome, claim.attempts, claim.took_over, claim.sweep) == (ClaimOutcome.RUN, 1, True, False)
    seen = view(ledger, key)
    assert (seen.state, seen.attempts, seen.lease_token, seen.collected_at_s) == (
        "running",
        1,
        claim.lease_token,
        None,
    )
    ledger.complete(key, str(claim.lease_token), manifest_key="m", outputs=[], now_s=NOW_S + 3)
    assert view(ledger, key).state == "done"


def test_a_live_collection_keeps_renders_away_and_an_expired_one_is_swept_and_rendered(ledger):
    key = done_job(ledger)
    begin(ledger, key, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
    busy = ledger.claim(spec(key), now_s=NOW_S + 1, lease_until_s=NOW_S + 1 + LEASE_S)
    assert (busy.outcome, busy.lease_expires_at_s) == (ClaimOutcome.BUSY, NOW_S + LEASE_S)
    later = NOW_S + LEASE_S
    claim = ledger.claim(spec(key), now_s=later, lease_until_s=later + LEASE_S)
    assert (claim.outcome, claim.attempts, claim.sweep) == (ClaimOutcome.RUN, 1, True)
    seen = view(ledger, key)
    assert (seen.state, seen.manifest_key, seen.outputs) == ("running", None, ())
    # The collector that lost its lease can neither renew nor end it.
    with pytest.raises(Superseded):
        ledger.renew(key, "c1", lease_until_s=later + 99, now_s=later)
    with pytest.raises(Superseded):
        ledger.end_collection(key, "c1", collected=True, now_s=later + 1)
    assert view(ledger, key).state == "running"


def test_a_failed_jobs_sweep_is_recorded_on_the_failed_row_only(ledger):
    failed = uuid.uuid4().hex * 2
    claim = ledger.claim(spec(failed), now_s=NOW_S, lease_until_s=NOW_S + LEASE_S)
    ledger.fail_permanently(failed, str(claim.lease_token), reason="output_conflict", detail="x", now_s=NOW_S)
    ledger.mark_swept(failed, now_s=NOW_S + 5)
    seen = view(ledger, failed)
    assert (seen.state, seen.failure_reason, seen.collected_at_s) == ("permanent_failure", "output_conflict", NOW_S + 5)
    key = done_job(ledger)
    ledger.mark_swept(key, now_s=NOW_S + 5)
    assert view(ledger, key).collected_at_s is None


def test_ten_collectors_racing_one_expired_collection_give_one_winner(ledger):
    for _ in range(3):
        key = done_job(ledger)
        begin(ledger, key, "dead", lease_until_s=NOW_S, now_s=NOW_S - 1)
        won = run_together(lambda n, key=key: begin(ledger, key, f"c{n}", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S))
        assert sorted(won) == [False] * 9 + [True]


def test_a_render_and_a_collector_racing_an_expired_collection_give_one_winner(ledger):
    for _ in range(5):
        key = done_job(ledger)
        begin(ledger, key, "dead", lease_until_s=NOW_S, now_s=NOW_S - 1)

        def one(n, key=key):
            if n % 2:
                return begin(ledger, key, f"c{n}", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
            return ledger.claim(spec(key), now_s=NOW_S, lease_until_s=NOW_S + LEASE_S).outcome is ClaimOutcome.RUN

        assert sorted(run_together(one, 6)) == [False] * 5 + [True]
        assert view(ledger, key).state in (JobState.RUNNING, JobState.COLLECTING)


def test_an_abandoned_render_is_taken_for_collection_once_its_lease_ended_and_its_holder_is_fenced(ledger):
    key = uuid.uuid4().hex * 2
    claim = ledger.claim(spec(key), now_s=NOW_S - 100, lease_until_s=NOW_S + 20)
    assert not begin(ledger, key, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)  # lease running
    assert begin(ledger, key, "c1", lease_until_s=NOW_S + 30 + LEASE_S, now_s=NOW_S + 30)
    with pytest.raises(Superseded):  # the holder that came back finds its claim gone
        ledger.renew(key, str(claim.lease_token), lease_until_s=NOW_S + 200, now_s=NOW_S + 31)
    ledger.end_collection(key, "c1", collected=True, now_s=NOW_S + 40)
    assert view(ledger, key).state == JobState.COLLECTED


def test_a_job_given_back_after_a_transient_failure_is_taken_for_collection(ledger):
    key = uuid.uuid4().hex * 2
    claim = ledger.claim(spec(key), now_s=NOW_S - 100, lease_until_s=NOW_S + 20)
    ledger.release(key, str(claim.lease_token), detail="S3 500", now_s=NOW_S - 50)
    assert begin(ledger, key, "c1", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
    assert view(ledger, key).state == JobState.COLLECTING
