"""The DynamoDB ledger against the moto server: claim outcomes, takeover, fencing, lease
renewal, the attempts cap, the duplicate probe, races."""

from __future__ import annotations

import uuid

import pytest

from mediajobs.adapters.ledger import DynamoLedger
from mediajobs.domain.errors import Superseded
from mediajobs.domain.jobs import ClaimOutcome, JobSpec, OutputCandidate, OutputRecord
from tests.functional.together import run_together

LEASE_S = 60
MAX_ATTEMPTS = 3
OUT = OutputRecord("thumb", "derivatives/k/thumb.webp", "webp", 320, 213, 1000, "0" * 64, "image/webp")


@pytest.fixture()
def ledger(local_session) -> DynamoLedger:
    stack = local_session.stack
    return stack.ledger(max_attempts=MAX_ATTEMPTS)


def spec(key: str) -> JobSpec:
    return JobSpec(
        job_key=key,
        input_sha256="a" * 64,
        recipe_id="web-image",
        recipe_version=1,
        recipe_sha256="b" * 64,
        policy_version="none",
        output_prefix=f"derivatives/{key}/",
        source_bucket="b",
        source_key="originals/x.jpg",
    )


def claim(ledger: DynamoLedger, key: str, now_s: int, seen=None):
    return ledger.claim(spec(key), now_s=now_s, lease_until_s=now_s + LEASE_S, seen=seen)


def new_key() -> str:
    return uuid.uuid4().hex * 2


def test_first_claim_runs_then_duplicates_are_busy(ledger):
    key = new_key()
    first = claim(ledger, key, 1000)
    assert (first.outcome, first.attempts, first.lease_expires_at_s) == (ClaimOutcome.RUN, 1, 1000 + LEASE_S)
    second = claim(ledger, key, 1001)
    assert (second.outcome, second.lease_expires_at_s, second.lease_token) == (ClaimOutcome.BUSY, 1060, None)


def test_done_job_returns_the_stored_outcome(ledger):
    key = new_key()
    token = claim(ledger, key, 1000).lease_token
    ledger.complete(key, token, manifest_key=f"derivatives/{key}/manifest.json", outputs=[OUT], now_s=1001)
    again = claim(ledger, key, 5000)
    assert (again.outcome, again.manifest_key, again.outputs) == (
        ClaimOutcome.DONE,
        f"derivatives/{key}/manifest.json",
        (OUT,),
    )
    row = ledger._model.get(key, consistent_read=True)  # the stored row, whole
    assert (row.state, row.attempts, row.finished_at_s) == ("done", 1, 1001)


def test_permanent_failure_is_reported_with_its_reason(ledger):
    key = new_key()
    token = claim(ledger, key, 1000).lease_token
    ledger.fail_permanently(key, token, reason="truncated_image", detail="image file is truncated", now_s=1001)
    again = claim(ledger, key, 1002)
    assert (again.outcome, again.failure_reason) == (ClaimOutcome.FAILED, "truncated_image")


def test_expired_lease_is_taken_over_and_the_old_holder_is_fenced_out(ledger):
    key = new_key()
    old = claim(ledger, key, 1000)
    new = claim(ledger, key, 1000 + LEASE_S + 1)
    assert (new.outcome, new.took_over, new.attempts) == (ClaimOutcome.RUN, True, 2)
    assert new.lease_token != old.lease_token
    with pytest.raises(Superseded):
        ledger.complete(key, old.lease_token, manifest_key="m", outputs=[], now_s=1100)
    ledger.complete(key, new.lease_token, manifest_key="m", outputs=[], now_s=1100)
    assert ledger.get(key).state == "done"


def test_transient_failure_is_taken_over_at_once(ledger):
    key = new_key()
    first = claim(ledger, key, 1000)
    ledger.release(key, first.lease_token, detail="ConnectionError", now_s=1001)
    second = claim(ledger, key, 1002)
    assert (second.outcome, second.took_over, second.attempts) == (ClaimOutcome.RUN, True, 2)


def race(ledger: DynamoLedger, key: str, now_s: int, threads: int = 10) -> list[str]:
    """``threads`` claims of one key, released together; their outcomes, sorted."""
    return sorted(run_together(lambda _: claim(ledger, key, now_s).outcome.value, threads))


def test_ten_threads_racing_one_key_give_one_winner(ledger):
    for _ in range(5):
        assert race(ledger, new_key(), 1000) == ["busy"] * 9 + ["run"]


def test_ten_threads_racing_a_takeover_give_one_winner(ledger):
    for _ in range(10):
        key = new_key()
        claim(ledger, key, 1000)
        assert race(ledger, key, 1000 + LEASE_S + 5) == ["busy"] * 9 + ["run"]
        assert ledger.get(key).attempts == 2


def test_a_retried_put_that_had_succeeded_finds_its_own_claim(ledger, monkeypatch):
    """The SDK retries a PutItem whose answer was lost: the row exists with our token."""
    import mediajobs.adapters.ledger as ledger_module

    fixed = uuid.UUID(int=42)
    monkeypatch.setattr(ledger_module.uuid, "uuid4", lambda: fixed)
    key = new_key()
    first = claim(ledger, key, 1000)
    again = claim(ledger, key, 1000)
    assert (first.outcome, again.outcome, again.lease_token) == (ClaimOutcome.RUN, ClaimOutcome.RUN, fixed.hex)


def test_heartbeat_renewal_keeps_the_lease_and_only_the_holder_can_renew(ledger):
    key = new_key()
    holder = claim(ledger, key, 1000)
    ledger.renew(key, holder.lease_token, lease_until_s=1100, now_s=1040)
    assert claim(ledger, key, 1070).outcome is ClaimOutcome.BUSY  # past the first lease, inside the renewed one
    assert ledger.get(key).lease_expires_at_s == 1100
    with pytest.raises(Superseded):
        ledger.renew(key, "not-the-token", lease_until_s=2000, now_s=1041)
    taker = claim(ledger, key, 1101)
    assert taker.took_over
    with pytest.raises(Superseded):  # the old holder's heartbeat finds it lost the job
        ledger.renew(key, holder.lease_token, lease_until_s=1200, now_s=1102)


def test_past_the_attempts_cap_the_job_ends_attempts_exhausted(ledger):
    key = new_key()
    now = 1000
    for attempt in range(1, MAX_ATTEMPTS + 1):
        c = claim(ledger, key, now)
        assert (c.outcome, c.attempts) == (ClaimOutcome.RUN, attempt)
        ledger.release(key, c.lease_token, detail=f"ConnectionError #{attempt}", now_s=now + 1)
        now += 10
    final = claim(ledger, key, now)
    assert (final.outcome, final.failure_reason, final.failed_now) == (ClaimOutcome.FAILED, "attempts_exhausted", True)
    row = ledger.get(key)
    assert (row.state, row.failure_reason, row.attempts) == ("permanent_failure", "attempts_exhausted", MAX_ATTEMPTS)
    assert row.failure_detail == f"{MAX_ATTEMPTS} attempts; last: ConnectionError #{MAX_ATTEMPTS}"
    assert final.failure_detail == row.failure_detail  # the last error is reported, not only the code
    again = claim(ledger, key, now + 1)  # later duplicates only read the stored failure
    assert (again.outcome, again.failed_now) == (ClaimOutcome.FAILED, False)
    assert again.failure_detail == row.failure_detail


def test_find_reads_many_jobs_and_a_claim_given_the_row_writes_nothing_for_done(ledger, local_session):
    done, running, missing = new_key(), new_key(), new_key()
    token = claim(ledger, done, 1000).lease_token
    ledger.complete(done, token, manifest_key="m", outputs=[OUT], now_s=1001)
    claim(ledger, running, 1000)
    views = ledger.find([done, running, missing])
    assert set(views) == {done, running}
    assert (views[done].state, views[done].outputs, views[running].state) == ("done", (OUT,), "running")
    again = claim(ledger, done, 1002, seen=views[done])
    assert (again.outcome, again.manifest_key) == (ClaimOutcome.DONE, "m")
    busy = claim(ledger, running, 1002, seen=views[running])
    assert (busy.outcome, busy.lease_expires_at_s) == (ClaimOutcome.BUSY, 1000 + LEASE_S)


def test_a_stale_view_loses_the_takeover_race_to_the_fence(ledger):
    key = new_key()
    claim(ledger, key, 1000)
    stale = ledger.find([key])[key]
    winner = claim(ledger, key, 1000 + LEASE_S + 1)  # took over meanwhile
    late = claim(ledger, key, 1000 + LEASE_S + 2, seen=stale)
    assert winner.took_over and late.outcome is ClaimOutcome.BUSY
    assert ledger.get(key).attempts == 2


def test_candidates_accumulate_across_holders_and_a_takeover_carries_the_staged_manifest(ledger):
    key = new_key()
    a = OutputCandidate("thumb.webp", "a" * 32, "1" * 64, 10)
    b = OutputCandidate("thumb.webp", "b" * 32, "2" * 64, 11)
    first = claim(ledger, key, 1000)
    assert ledger.register_outputs(key, first.lease_token, [a], now_s=1001) == {a}
    assert ledger.stage_manifest(key, first.lease_token, '{"outputs": []}', now_s=1002) == '{"outputs": []}'
    later = claim(ledger, key, 1000 + LEASE_S + 1)  # the first holder's lease ran out
    assert (later.outcome, later.took_over, later.staged_manifest) == (ClaimOutcome.RUN, True, '{"outputs": []}')
    with pytest.raises(Superseded):
        ledger.register_outputs(key, first.lease_token, [b], now_s=1070)
    assert ledger.register_outputs(key, later.lease_token, [b], now_s=1071) == {a, b}
    # A second staging keeps the first body: every write of the manifest carries one body.
    assert ledger.stage_manifest(key, later.lease_token, '{"outputs": [1]}', now_s=1072) == '{"outputs": []}'
    ledger.complete(key, later.lease_token, manifest_key=f"derivatives/{key}/manifest.json", outputs=[], now_s=1073)
    row = ledger._model.get(key, consistent_read=True)  # the stored row, whole
    assert (row.state, row.output_candidates, row.staged_manifest) == ("done", None, None)


def test_a_takeover_of_a_job_that_staged_nothing_carries_no_manifest(ledger):
    key = new_key()
    first = claim(ledger, key, 1000)
    ledger.release(key, first.lease_token, detail="S3 503", now_s=1001)
    later = claim(ledger, key, 1002)
    assert (later.outcome, later.took_over, later.staged_manifest) == (ClaimOutcome.RUN, True, None)
