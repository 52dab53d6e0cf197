"""Jobs with inputs under faults, on fakes: whatever dies or fails between an input's end
and the telling of the jobs waiting for it, every waiting job ends -- it runs once, or it
fails with its input's reason -- and no message is sent back busy for a job that nothing
else will end.

The faults: a teller that dies (or is throttled) after its input committed; an input that
fails transiently on every try (ended ``attempts_exhausted`` by a claim, on the original's
path and on the job-request path); a failure told down a chain whose teller died between
two steps; SQS refusing the job request of a job made ``requested``.
"""

from __future__ import annotations

import pytest

from mediajobs.domain.errors import ATTEMPTS_EXHAUSTED, CORRUPT_IMAGE, JobBusy, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import JobState, SourceState
from tests.fakes import TextStep, chain_recipes
from tests.unit.test_jobs_with_inputs import REF, Crash, Rig

MAX_ATTEMPTS = 4  # Settings' default


class FailingStep(TextStep):
    """Fails the recipes whose prefix is in ``failing`` with ``error`` on every run."""

    def __init__(self, failing: str, error: Exception) -> None:
        super().__init__()
        self.failing, self.error = failing, error

    def run(self, source, params, context, out_dir):
        if params.prefix in self.failing:
            raise self.error
        return super().run(source, params, context, out_dir)


def deliver(rig: Rig, times: int) -> list[object]:
    """The original's message delivered until acknowledged (at most ``times``): each
    delivery's outcome, ``"busy"`` or ``"transient"`` for one sent back."""
    outcomes: list[object] = []
    for _ in range(times):
        try:
            result = rig.pipeline.process(REF)
        except JobBusy:
            outcomes.append("busy")
            continue
        except (TransientFailure, Crash):
            outcomes.append("transient")
            continue
        outcomes.append((result.state, result.reason))
        break
    return outcomes


@pytest.mark.parametrize("dies", [Crash, TransientFailure], ids=["worker-died", "throttled"])
def test_the_originals_redelivery_after_its_teller_died_runs_the_pair_once(tmp_path, dies):
    rig = Rig(tmp_path, dies=dies)
    rig.die_telling.add(rig.right)
    with pytest.raises(dies):  # right is committed, the pair not told
        rig.pipeline.process(REF)
    assert rig.ledger.rows[rig.right].state == JobState.DONE and rig.ledger.rows[rig.right].waiting == {rig.pair}
    assert deliver(rig, 3) == [(SourceState.DONE, None)]  # the next delivery tells it, then runs it
    assert rig.requested == [rig.pair] and rig.queue.resent == []  # in its plan: no request needed
    assert sum(e[0] == "complete" and e[1] == rig.pair for e in rig.log) == 1
    assert rig.output(rig.pair) == b"P|" + rig.output(rig.left) + b"|" + rig.output(rig.right)
    assert rig.ledger.rows[rig.right].waiting == frozenset()


def test_an_input_failing_transiently_on_every_try_ends_exhausted_and_fails_the_pair(tmp_path):
    rig = Rig(tmp_path, step=FailingStep("R", TransientFailure("render child killed")))
    outcomes = deliver(rig, 10)
    assert outcomes == ["transient"] * MAX_ATTEMPTS + [(SourceState.PERMANENT_FAILURE, ATTEMPTS_EXHAUSTED)]
    right, pair = rig.ledger.rows[rig.right], rig.ledger.rows[rig.pair]
    assert (right.state, right.failure_reason, right.waiting) == (JobState.PERMANENT_FAILURE, ATTEMPTS_EXHAUSTED, set())
    assert (pair.state, pair.failure_reason) == (JobState.PERMANENT_FAILURE, ATTEMPTS_EXHAUSTED)
    assert rig.ledger.rows[rig.left].state == JobState.DONE


def test_an_input_request_exhausted_by_its_claim_fails_the_pair(tmp_path):
    rig = Rig(tmp_path, step=FailingStep("R", TransientFailure("render child killed")))
    rig.pipeline.request(rig.jobs)
    rig.pipeline.run_request(rig.left)
    for _ in range(MAX_ATTEMPTS):
        with pytest.raises(TransientFailure):
            rig.pipeline.run_request(rig.right)
    ended = rig.pipeline.run_request(rig.right)  # the claim past the attempts ends it
    assert (ended.state, ended.jobs[0].reason) == (SourceState.PERMANENT_FAILURE, ATTEMPTS_EXHAUSTED)
    pair = rig.ledger.rows[rig.pair]
    assert (pair.state, pair.failure_reason) == (JobState.PERMANENT_FAILURE, ATTEMPTS_EXHAUSTED)
    assert rig.ledger.rows[rig.right].waiting == frozenset() and rig.sent(rig.pair) == 0


def chain(tmp_path) -> tuple[Rig, str, str, str]:
    """``a -> b -> c``, ``a`` failing for good, the telling of ``b``'s failure to ``c`` dying."""
    rig = Rig(tmp_path, recipes=chain_recipes(), step=FailingStep("A", PermanentFailure(CORRUPT_IMAGE, "unreadable")))
    a, b, c = (job.key for job in rig.jobs)
    rig.die_telling.add(b)
    return rig, a, b, c


def test_a_failure_told_down_a_chain_whose_teller_died_reaches_its_end_on_the_originals_path(tmp_path):
    rig, a, b, c = chain(tmp_path)
    with pytest.raises(Crash):
        rig.pipeline.process(REF)
    assert (rig.ledger.rows[b].state, rig.ledger.rows[c].state) == (JobState.PERMANENT_FAILURE, JobState.WAITING)
    assert deliver(rig, 3) == [(SourceState.PERMANENT_FAILURE, CORRUPT_IMAGE)]
    assert [(rig.ledger.rows[k].state, rig.ledger.rows[k].failure_reason) for k in (a, b, c)] == [
        (JobState.PERMANENT_FAILURE, CORRUPT_IMAGE)
    ] * 3


def test_a_failure_told_down_a_chain_whose_teller_died_reaches_its_end_on_the_request_path(tmp_path):
    rig, a, b, c = chain(tmp_path)
    assert rig.pipeline.request(rig.jobs) == [a]
    with pytest.raises(Crash):
        rig.pipeline.run_request(a)  # a fails, b is failed, telling c dies
    again = rig.pipeline.run_request(a)  # SQS delivers a's request again
    assert again.state == SourceState.PERMANENT_FAILURE
    assert (rig.ledger.rows[c].state, rig.ledger.rows[c].failure_reason) == (JobState.PERMANENT_FAILURE, CORRUPT_IMAGE)
    assert all(rig.ledger.rows[k].waiting == frozenset() for k in (a, b, c))


def test_a_job_request_sqs_refuses_is_sent_by_the_inputs_redelivery(tmp_path):
    rig = Rig(tmp_path)
    rig.pipeline.request(rig.jobs)
    rig.pipeline.run_request(rig.left)
    rig.queue.refuse_resend = True  # SendMessage of the pair's request is throttled
    with pytest.raises(TransientFailure):  # right's message is not acknowledged
        rig.pipeline.run_request(rig.right)
    rig.queue.refuse_resend = False
    assert rig.ledger.rows[rig.pair].state == JobState.REQUESTED
    assert rig.ledger.rows[rig.right].waiting == {rig.pair}  # not forgotten
    assert rig.pipeline.run_request(rig.right).state == SourceState.DONE  # redelivered
    assert rig.sent(rig.pair) == 1 and rig.ledger.rows[rig.right].waiting == frozenset()
    assert rig.pipeline.run_request(rig.pair).state == SourceState.DONE


def test_a_request_sqs_refuses_raises_and_is_sent_when_asked_again(tmp_path):
    rig = Rig(tmp_path)
    rig.queue.refuse_resend = True
    with pytest.raises(TransientFailure):
        rig.pipeline.request(rig.jobs)
    rig.queue.refuse_resend = False
    assert sorted(rig.pipeline.request(rig.jobs)) == sorted([rig.left, rig.right])
    assert rig.ledger.rows[rig.pair].state == JobState.WAITING
