"""One takeover rule, ``domain/jobs.decide()``, and a write fenced on the row as read.

Each row is written as it is to the moto table (no condition) and claimed through the
ledger: the claim does exactly what ``decide`` says of the row -- a takeover for
``TAKE_OVER``, an exhaustion for ``EXHAUST``, no write for a done, failed, busy or waiting
row. A takeover of a ``collecting`` (lease over) or ``collected`` row restarts the job:
attempt 1, the old result forgotten, ``sweep`` set when it was ``collecting``. The write is
fenced on the row as read (:class:`~mediajobs.domain.jobs.Fence`): a row changed since --
renewed, staged, taken over, ended -- is not written, so a decision taken on a stale read
never lands.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from mediajobs.domain.errors import ATTEMPTS_EXHAUSTED
from mediajobs.domain.jobs import ClaimOutcome, Decision, JobSpec, JobState, JobView, decide, taken_over

NOW_S = 1_000_000
LEASE_S = 60
MAX_ATTEMPTS = 3

#: (name, state, lease_expires_at_s): every state, a running and a collecting lease on
#: each side of now.
STATES = [
    ("running-lease-in-the-future", JobState.RUNNING, NOW_S + 1),
    ("running-lease-ends-now", JobState.RUNNING, NOW_S),
    ("running-lease-past", JobState.RUNNING, NOW_S - 1),
    ("transient_failure", JobState.TRANSIENT_FAILURE, NOW_S + 30),  # a released claim's lease no longer counts
    ("done", JobState.DONE, NOW_S - 1),
    ("permanent_failure", JobState.PERMANENT_FAILURE, NOW_S - 1),
    ("collecting-lease-in-the-future", JobState.COLLECTING, NOW_S + 1),
    ("collecting-lease-ends-now", JobState.COLLECTING, NOW_S),
    ("collecting-lease-past", JobState.COLLECTING, NOW_S - 1),
    ("collected", JobState.COLLECTED, NOW_S - 1),
    ("waiting", JobState.WAITING, 0),
    ("requested", JobState.REQUESTED, 0),
    ("review", JobState.REVIEW, 0),  # a moderation job held for a person
]
RESTARTS = (JobState.COLLECTING, JobState.COLLECTED)
ATTEMPTS = [("under-max", MAX_ATTEMPTS - 1), ("at-max", MAX_ATTEMPTS), ("over-max", MAX_ATTEMPTS + 1)]
STAGED = [("staged", '{"manifest": "staged"}'), ("unstaged", None)]
TOKENS = [("token", "t-old"), ("no-token", None)]

ROWS = [
    pytest.param(state, lease, attempts, staged, token, id="/".join((s, a, m, t)))
    for (s, state, lease), (a, attempts), (m, staged), (t, token) in itertools.product(STATES, ATTEMPTS, STAGED, TOKENS)
]


@pytest.fixture(scope="module")
def model(local_session):
    stack = local_session.stack
    return stack.job_model()


def write_row(model, *, state, lease_expires_at_s, attempts, staged_manifest, lease_token) -> str:
    """Write a job row exactly as given (no condition); its key. A ``collecting`` row keeps
    its result (manifest, outputs) as ``done`` left it."""
    key = uuid.uuid4().hex * 2
    kept = {"manifest_key": f"derivatives/{key}/manifest.json", "outputs": []} if state is JobState.COLLECTING else {}
    collected = {"collected_at_s": NOW_S - 10} if state is JobState.COLLECTED else {}
    model(
        key,
        state=state.value,
        lease_token=lease_token,
        lease_expires_at_s=lease_expires_at_s,
        attempts=attempts,
        staged_manifest=staged_manifest,
        input_sha256="a" * 64,
        recipe_id="web-image",
        recipe_version=1,
        recipe_sha256="b" * 64,
        policy_version="none",
        output_prefix=f"derivatives/{key}/",
        created_at_s=NOW_S - 100,
        updated_at_s=NOW_S - 100,
        **kept,
        **collected,
    ).save()
    return key


def spec(key: str) -> JobSpec:
    return JobSpec(key, "a" * 64, "web-image", 1, "b" * 64, "none", f"derivatives/{key}/", "bucket", "originals/x")


@pytest.mark.parametrize(("state", "lease_expires_at_s", "attempts", "staged_manifest", "lease_token"), ROWS)
def test_a_claim_does_what_decide_says_of_the_row(
    local_session, model, state, lease_expires_at_s, attempts, staged_manifest, lease_token
):
    ledger = local_session.stack.ledger(max_attempts=MAX_ATTEMPTS)
    row = {
        "state": state,
        "lease_expires_at_s": lease_expires_at_s,
        "attempts": attempts,
        "staged_manifest": staged_manifest,
        "lease_token": lease_token,
    }
    key = write_row(model, **row)
    [seen] = ledger.find([key]).values()
    decision = decide(seen, now_s=NOW_S, max_attempts=MAX_ATTEMPTS)
    claim = ledger.claim(spec(key), now_s=NOW_S, lease_until_s=NOW_S + LEASE_S, seen=seen)
    stored = model.get(key, consistent_read=True)
    if decision not in (Decision.TAKE_OVER, Decision.EXHAUST):  # nothing written
        assert (stored.state, stored.lease_token, stored.attempts) == (state.value, lease_token, attempts)
        assert claim.outcome is not ClaimOutcome.RUN and claim.lease_token is None
    elif decision is Decision.TAKE_OVER and state in RESTARTS:
        assert (claim.outcome, claim.attempts, claim.staged_manifest) == (ClaimOutcome.RUN, 1, None)
        assert claim.sweep is (state is JobState.COLLECTING)
        assert (stored.state, stored.lease_token, stored.attempts) == ("running", claim.lease_token, 1)
        assert (stored.manifest_key, stored.outputs, stored.collected_at_s, stored.staged_manifest) == (
            None,
            None,
            None,
            None,
        )
    elif decision is Decision.TAKE_OVER:
        assert claim.outcome is ClaimOutcome.RUN and claim.staged_manifest == staged_manifest
        assert not claim.sweep and claim.took_over is (state is not JobState.REQUESTED)
        assert (stored.state, stored.lease_token, stored.attempts) == ("running", claim.lease_token, attempts + 1)
    else:
        assert (claim.outcome, claim.failure_reason) == (ClaimOutcome.FAILED, ATTEMPTS_EXHAUSTED)
        assert (stored.state, stored.failure_reason) == ("permanent_failure", ATTEMPTS_EXHAUSTED)


#: What another writer may have done to a row since it was read: each changes a field the
#: fence holds, and each must make a takeover decided on the stale read lose.
CHANGES = {
    "lease renewed": {"lease_expires_at_s": NOW_S + LEASE_S},
    "manifest staged": {"staged_manifest": '{"manifest": "staged"}'},
    "taken over": {"lease_token": "t-other", "attempts": 2},
    "ended": {"state": JobState.DONE.value},
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_takeover_decided_on_a_row_that_changed_since_is_not_written(local_session, model, change):
    ledger = local_session.stack.ledger(max_attempts=MAX_ATTEMPTS)
    key = write_row(
        model,
        state=JobState.RUNNING,
        lease_expires_at_s=NOW_S - 1,
        attempts=1,
        staged_manifest=None,
        lease_token="t-old",
    )
    [seen] = ledger.find([key]).values()
    assert decide(seen, now_s=NOW_S, max_attempts=MAX_ATTEMPTS) is Decision.TAKE_OVER
    row = model.get(key, consistent_read=True)
    for name, value in CHANGES[change].items():
        setattr(row, name, value)
    row.save()
    assert ledger.take_over(seen, "t-new", Decision.TAKE_OVER, now_s=NOW_S, lease_until_s=NOW_S + LEASE_S) is None
    assert model.get(key, consistent_read=True).lease_token != "t-new"


def test_the_rows_cover_every_decision():
    """The shapes above reach each of decide's answers (else the agreement proves less)."""
    seen = {
        decide(
            JobView("k", state.value, token, lease, attempts, staged_manifest=staged),
            now_s=NOW_S,
            max_attempts=MAX_ATTEMPTS,
        )
        for (_, state, lease), (_, attempts), (_, staged), (_, token) in itertools.product(
            STATES, ATTEMPTS, STAGED, TOKENS
        )
    }
    assert seen == set(Decision)


@pytest.mark.parametrize("decision", [Decision.DONE, Decision.FAILED, Decision.BUSY, Decision.WAIT, Decision.HELD])
def test_a_final_busy_or_waiting_row_is_never_written(decision):
    seen = JobView("k", JobState.DONE.value, "t-old", NOW_S, 1)
    with pytest.raises(ValueError, match="no write for"):
        taken_over(seen, decision, "t-new", lease_until_s=NOW_S + LEASE_S, now_s=NOW_S)
