"""One takeover rule: ``domain/jobs.decide()`` and the DynamoDB condition of the ledger's
takeover (``adapters/ledger.takeover_condition``) give the same answer on every row shape.

Each row is written as it is to the moto table (no condition), read back through the
ledger, given to ``decide()``, then given to the real conditional updates: the takeover
succeeds exactly when ``decide`` says ``TAKE_OVER``, the exhaustion exactly when it says
``EXHAUST``; a done, failed or busy row is never written. A takeover of a ``collecting``
(lease over) or ``collected`` row restarts the job: attempt 1, the old result forgotten,
``sweep`` set when it was ``collecting``.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from mediajobs.adapters.ledger import DynamoLedger, bound_job_model, takeover_condition
from mediajobs.domain.errors import ATTEMPTS_EXHAUSTED
from mediajobs.domain.jobs import ClaimOutcome, Decision, JobState, JobView, decide

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
    return bound_job_model(stack.table_name, "us-east-1", stack.endpoint_url)


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


@pytest.mark.parametrize(("state", "lease_expires_at_s", "attempts", "staged_manifest", "lease_token"), ROWS)
def test_decide_and_the_dynamodb_condition_agree(
    model, state, lease_expires_at_s, attempts, staged_manifest, lease_token
):
    ledger = DynamoLedger(model, max_attempts=MAX_ATTEMPTS)
    row = {
        "state": state,
        "lease_expires_at_s": lease_expires_at_s,
        "attempts": attempts,
        "staged_manifest": staged_manifest,
        "lease_token": lease_token,
    }
    wrote = {}
    for attempt in (Decision.TAKE_OVER, Decision.EXHAUST):
        key = write_row(model, **row)
        [seen] = ledger.find([key]).values()
        decision = decide(seen, now_s=NOW_S, max_attempts=MAX_ATTEMPTS)
        claim = ledger.take_over(seen, "t-new", attempt, now_s=NOW_S, lease_until_s=NOW_S + LEASE_S)
        wrote[attempt] = claim is not None
        stored = model.get(key, consistent_read=True)
        if claim is None:  # the condition failed: the row is as written
            assert (stored.state, stored.lease_token, stored.attempts) == (state.value, lease_token, attempts)
        elif attempt is Decision.TAKE_OVER and state in RESTARTS:
            assert (claim.outcome, claim.attempts, claim.staged_manifest) == (ClaimOutcome.RUN, 1, None)
            assert claim.sweep is (state is JobState.COLLECTING)
            assert (stored.state, stored.lease_token, stored.attempts) == ("running", "t-new", 1)
            assert (stored.manifest_key, stored.outputs, stored.collected_at_s, stored.staged_manifest) == (
                None,
                None,
                None,
                None,
            )
        elif attempt is Decision.TAKE_OVER:
            assert claim.outcome is ClaimOutcome.RUN and claim.staged_manifest == staged_manifest
            assert not claim.sweep
            assert (stored.state, stored.lease_token, stored.attempts) == ("running", "t-new", attempts + 1)
        else:
            assert (claim.outcome, claim.failure_reason) == (ClaimOutcome.FAILED, ATTEMPTS_EXHAUSTED)
            assert (stored.state, stored.failure_reason) == ("permanent_failure", ATTEMPTS_EXHAUSTED)
    assert wrote == {Decision.TAKE_OVER: decision is Decision.TAKE_OVER, Decision.EXHAUST: decision is Decision.EXHAUST}


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


@pytest.mark.parametrize("decision", [Decision.DONE, Decision.FAILED, Decision.BUSY])
def test_a_final_or_busy_row_has_no_takeover_condition(model, decision):
    seen = JobView("k", JobState.DONE.value, "t-old", NOW_S, 1)
    with pytest.raises(ValueError, match="no takeover condition"):
        takeover_condition(model, seen, decision, now_s=NOW_S, max_attempts=MAX_ATTEMPTS)
