"""Jobs with inputs under faults, on fakes: whatever dies or fails between an input's end
and the telling of the jobs waiting for it, every waiting job ends -- it runs once, or it
fails with its input's reason -- and no message is sent back busy for a job that nothing
else will end.

The faults: a teller that dies (or is throttled) after its input committed; an input that
fails transiently on every try (ended ``attempts_exhausted`` by a claim, on the original's
path and on the job-request path); a failure told down a chain whose teller died between
two steps; SQS refusing the job request of a job made ``requested``; a waiting job whose
registration on an input was lost; and every telling of a diamond dying, on both paths.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from mediajobs.domain.errors import ATTEMPTS_EXHAUSTED, CORRUPT_IMAGE, JobBusy, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import JobState, OutputInput, SourceState
from mediajobs.domain.keys import inputs_job_key
from mediajobs.domain.plan import PlannedJob
from mediajobs.settings import Settings
from tests.fakes import (
    TEST_KEY_SECRET,
    TEST_KEYS,
    FakeAssets,
    FakeSources,
    TextStep,
    chain_recipes,
    diamond_recipes,
    pair_recipes,
    pipeline_on,
)
from tests.unit.test_jobs_with_inputs import QUEUE_ARN, REF, Crash, Rig

MAX_ATTEMPTS = 4  # Settings' default


class FailingStep(TextStep):
    """Fails the recipes whose prefix is in ``failing`` with ``error``: on every run, or on
    the first ``times``."""

    def __init__(self, failing: str, error: Exception, times: int | None = None) -> None:
        super().__init__()
        self.failing, self.error, self.times = failing, error, times

    def run(self, source, params, context, out_dir):
        if params.prefix in self.failing and (self.times is None or self.times > 0):
            self.times = None if self.times is None else self.times - 1
            raise self.error
        return super().run(source, params, context, out_dir)


def deliver(rig: Rig, times: int) -> list[object]:
    """The original's message delivered until acknowledged (at most ``times``, the clock
    past every lease between two): each delivery's outcome, ``"busy"`` or ``"transient"``
    for one sent back."""
    outcomes: list[object] = []
    for _ in range(times):
        try:
            result = rig.pipeline.process(REF)
        except JobBusy:
            outcomes.append("busy")
            rig.clock.advance(1000)
            continue
        except (TransientFailure, Crash):
            outcomes.append("transient")
            rig.clock.advance(1000)
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


def test_a_waiting_job_whose_registration_on_an_input_was_lost_is_named_again_and_runs(tmp_path):
    rig = Rig(tmp_path)
    before = pipeline_on(  # before pair@1 was active: right's row is written with no job waiting
        Settings(key_secret=TEST_KEY_SECRET, work_dir=str(tmp_path), jobs_queue_arn=QUEUE_ARN),
        store=rig.store,
        ledger=rig.ledger,
        sources=FakeSources(rig.log),
        steps={TextStep.name: FailingStep("R", TransientFailure("render child killed"), times=1)},
        recipes={"image": pair_recipes()["image"][:2]},
        detect_media=lambda path, key: "image",
        assets=FakeAssets(rig.log),
        queue=rig.queue,
    )
    with pytest.raises(TransientFailure):
        before.process(REF)
    register, throttled = rig.ledger.register, []

    def throttled_once(input_key, waiter_key, *, now_s):
        if not throttled:  # the pair's row is written, naming it on right's is throttled
            throttled.append(input_key)
            raise TransientFailure("ProvisionedThroughputExceededException")
        return register(input_key, waiter_key, now_s=now_s)

    rig.ledger.register = throttled_once
    assert deliver(rig, 4) == ["transient", (SourceState.DONE, None)]
    assert rig.ledger.rows[rig.pair].state == JobState.DONE
    assert sum(e[0] == "complete" and e[1] == rig.pair for e in rig.log) == 1


def test_a_job_waiting_for_an_input_running_elsewhere_is_busy_until_the_holders_lease_ends(tmp_path):
    rig = Rig(tmp_path)
    rig.die_telling.add(rig.left)  # the delivery dies after committing left, holding right's claim
    with pytest.raises(Crash):
        rig.pipeline.process(REF)
    right = rig.ledger.rows[rig.right]
    assert right.state == JobState.RUNNING
    with pytest.raises(JobBusy) as busy:  # the pair waits for right: its row has no lease
        rig.pipeline.process(REF)
    assert (busy.value.job_key, busy.value.lease_expires_at_s) == (rig.right, right.lease_expires_at_s)


def test_a_job_outside_the_plan_whose_request_sqs_refused_is_requested_by_the_originals_redelivery(tmp_path):
    rig = Rig(tmp_path, step=FailingStep("L", TransientFailure("render child killed"), times=1))
    with pytest.raises(TransientFailure):
        rig.pipeline.process(REF)  # left fails once: the original's version is not ready
    pair = rig.jobs[2]  # a job no plan holds (a join a backfill requests, say) takes left's output
    inputs = {"left": OutputInput(rig.left, "out"), "right": OutputInput(rig.left, "out")}
    key = inputs_job_key(
        {n: i.identity() for n, i in inputs.items()}, pair.recipe.sha256, pair.spec.policy_version, keys=TEST_KEYS
    )
    spec = dataclasses.replace(pair.spec, job_key=key, inputs=inputs, output_prefix=f"derivatives/{key}/")
    assert rig.pipeline.request([PlannedJob(pair.recipe, dataclasses.replace(spec, waiting=frozenset()))]) == []
    rig.queue.refuse_resend = True  # its request, once left commits, is refused
    with pytest.raises(TransientFailure):
        rig.pipeline.process(REF)
    rig.queue.refuse_resend = False
    assert rig.pipeline.process(REF).state == SourceState.DONE  # not answered from the asset
    assert rig.ledger.rows[key].state == JobState.REQUESTED and rig.sent(key) == 1


def run_requests(rig: Rig, limit: int = 60) -> None:
    """Deliver the job requests the queue holds, each sent back on a raise, until none is left."""
    queued = [json.loads(body)["job_key"] for _, body, _, _ in rig.queue.resent]
    seen = len(rig.queue.resent)
    for _ in range(limit):
        if not queued:
            return
        job_key = queued.pop(0)
        try:
            rig.pipeline.run_request(job_key)
        except (Crash, TransientFailure, JobBusy):
            queued.append(job_key)
            rig.clock.advance(1000)
        queued += [json.loads(body)["job_key"] for _, body, _, _ in rig.queue.resent[seen:]]
        seen = len(rig.queue.resent)
    raise AssertionError(f"job requests still queued after {limit} deliveries: {queued}")


@pytest.mark.parametrize("path", ["original", "requests"])
@pytest.mark.parametrize("failing", ["", "A", "B", "BC", "D"])
@pytest.mark.parametrize("die_at", ["a", "b", "bc", "abc"])
@pytest.mark.parametrize("dies", [Crash, TransientFailure], ids=["died", "throttled"])
def test_a_diamond_ends_whichever_telling_dies(tmp_path, path, failing, die_at, dies):
    step = FailingStep(failing, PermanentFailure(CORRUPT_IMAGE, "unreadable")) if failing else TextStep()
    rig = Rig(tmp_path, step=step, recipes=diamond_recipes(), dies=dies)
    named = dict(zip("abcd", rig.keys, strict=True))
    rig.die_telling.update(named[n] for n in die_at)
    if path == "original":
        assert deliver(rig, 12)[-1] not in ("busy", "transient")
    else:
        rig.pipeline.request(rig.jobs)
        run_requests(rig)
    rows = [rig.ledger.rows[k] for k in rig.keys]
    assert all(row.state in (JobState.DONE, JobState.PERMANENT_FAILURE) for row in rows)
    assert rows[3].state == (JobState.PERMANENT_FAILURE if failing else JobState.DONE)
    committed = [e[1] for e in rig.log if e[0] == "complete"]
    assert len(committed) == len(set(committed))
    if not failing:
        assert rig.output(named["d"]) == b"D|" + rig.output(named["b"]) + b"|" + rig.output(named["c"])
