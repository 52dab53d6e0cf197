"""Jobs with inputs, on fakes: a job that takes two other jobs' outputs (``pair@1`` takes
``left@1``'s and ``right@1``'s ``out``) is requested exactly once, whichever input ends
last, and committed once -- in one delivery of its original, through job requests in
either order, and when the delivery that ended an input died before telling it.

"Requested exactly once" is the ledger's transition ``waiting`` -> ``requested``: one
conditional write, counted here through the fake ledger's answers. The job request that
follows may be sent again only by a delivery finishing what a dead one left (it is a
message: SQS delivers at least once anyway); the claim makes the job run once.
"""

from __future__ import annotations

import json

import pytest

from mediajobs.domain.errors import CORRUPT_IMAGE, PermanentFailure
from mediajobs.domain.jobs import JobState, ObjectRef, SourceState
from mediajobs.domain.keys import sha256_hex
from mediajobs.domain.plan import Where, plan_jobs
from mediajobs.settings import Settings
from tests.fakes import (
    TEST_KEY_SECRET,
    FakeAssets,
    FakeClock,
    FakeLedger,
    FakeQueue,
    FakeSources,
    FakeStore,
    TextStep,
    Wrapping,
    pair_recipes,
    pipeline_on,
)

BUCKET, KEY, DATA = "bucket", "originals/a.jpg", b"photo"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:jobs"
REF = ObjectRef(BUCKET, KEY, None, len(DATA), sequencer="1")


class Crash(Exception):
    """A worker dying at a step boundary."""


class Rig:
    """A pipeline of the three recipes on fakes; counts the ledger's ``requested`` transitions."""

    def __init__(self, tmp_path, observer=None, step=None, recipes=None, dies=Crash, clock=None) -> None:
        self.log: list = []
        self.store = FakeStore({KEY: DATA}, self.log)
        self.ledger = FakeLedger(self.log)
        self.queue = FakeQueue()
        self.step = step or TextStep()
        self.requested: list[str] = []
        self.die_telling: set[str] = set()  # inputs whose first telling dies (raises ``dies``)
        self.dies = dies
        ledger = Wrapping(self.ledger, input_done=self._input_done, input_failed=self._input_failed)
        self.recipes = recipes or pair_recipes()
        self.clock = clock or FakeClock()
        self.pipeline = pipeline_on(
            Settings(key_secret=TEST_KEY_SECRET, work_dir=str(tmp_path), jobs_queue_arn=QUEUE_ARN),
            clock=self.clock,
            store=self.store,
            ledger=ledger,
            sources=FakeSources(self.log),
            steps={TextStep.name: self.step},
            recipes=self.recipes,
            detect_media=lambda path, key: "image",
            observer=observer,
            assets=FakeAssets(self.log),
            queue=self.queue,
        )
        self.jobs = plan_jobs(
            sha256_hex(DATA),
            "image",
            self.recipes,
            Where(
                BUCKET,
                KEY,
                "derivatives/",
                Settings(key_secret=TEST_KEY_SECRET).policy_version,
                Settings(key_secret=TEST_KEY_SECRET).keys,
            ),
        )
        self.keys = [job.key for job in self.jobs]
        self.left, self.right, self.pair = (self.keys + ["", "", ""])[:3]  # pair_recipes' names

    def _input_done(self, waiter, input_key, *, now_s):
        if input_key in self.die_telling:
            self.die_telling.discard(input_key)
            raise self.dies(f"died telling {waiter[:8]} that {input_key[:8]} ended")
        view, made = self.ledger.input_done(waiter, input_key, now_s=now_s)
        if made:
            self.requested.append(waiter)
        return view, made

    def _input_failed(self, waiter, input_key, reason, detail, *, now_s):
        if input_key in self.die_telling:
            self.die_telling.discard(input_key)
            raise self.dies(f"died telling {waiter[:8]} that {input_key[:8]} failed")
        return self.ledger.input_failed(waiter, input_key, reason, detail, now_s=now_s)

    def sent(self, job_key: str) -> int:
        """Job requests sent for ``job_key``."""
        return sum(json.loads(body).get("job_key") == job_key for _, body, _, _ in self.queue.resent)

    def output(self, job_key: str) -> bytes:
        return self.store.objects[f"derivatives/{job_key}/out.txt"]


def test_the_plan_names_the_jobs_waiting_for_each_input(tmp_path):
    rig = Rig(tmp_path)
    left, right, pair = rig.jobs
    assert [j.recipe.ref for j in rig.jobs] == ["left@1", "right@1", "pair@1"]
    assert left.spec.waiting == right.spec.waiting == {rig.pair} and pair.spec.waiting == frozenset()
    assert pair.spec.upstream == {rig.left, rig.right}


def test_one_delivery_runs_the_inputs_then_the_job_that_takes_them(tmp_path):
    rig = Rig(tmp_path)
    result = rig.pipeline.process(REF)
    assert result.state == SourceState.DONE
    assert [(j.recipe, j.state) for j in result.jobs] == [("left@1", "done"), ("right@1", "done"), ("pair@1", "done")]
    assert rig.requested == [rig.pair] and rig.queue.resent == []  # this delivery ran it next
    assert rig.output(rig.pair) == b"P|" + rig.output(rig.left) + b"|" + rig.output(rig.right)
    assert rig.ledger.rows[rig.left].waiting == frozenset()  # told, forgotten


def test_a_duplicate_of_the_delivery_renders_nothing(tmp_path):
    rig = Rig(tmp_path)
    rig.pipeline.process(REF)
    runs = len(rig.step.runs)
    again = rig.pipeline.process(REF)
    assert again.state == SourceState.DONE and all(j.reused for j in again.jobs)
    assert len(rig.step.runs) == runs and rig.requested == [rig.pair]


@pytest.mark.parametrize("order", ["left-first", "right-first"])
def test_through_job_requests_in_either_order_the_pair_is_requested_once_and_runs_once(tmp_path, order):
    rig = Rig(tmp_path)
    sent = rig.pipeline.request(rig.jobs)
    assert sorted(sent) == sorted([rig.left, rig.right])  # the pair waits for both
    assert rig.ledger.rows[rig.pair].state == JobState.WAITING
    first, second = (rig.left, rig.right) if order == "left-first" else (rig.right, rig.left)
    assert rig.pipeline.run_request(first).state == SourceState.DONE
    assert rig.ledger.rows[rig.pair].state == JobState.WAITING and rig.sent(rig.pair) == 0
    assert rig.pipeline.run_request(second).state == SourceState.DONE
    assert rig.requested == [rig.pair] and rig.sent(rig.pair) == 1
    done = rig.pipeline.run_request(rig.pair)
    assert (done.state, done.jobs[0].state, done.jobs[0].reused) == (SourceState.DONE, "done", False)
    assert rig.output(rig.pair) == b"P|" + rig.output(rig.left) + b"|" + rig.output(rig.right)
    again = rig.pipeline.run_request(rig.pair)  # the request delivered twice
    assert again.jobs[0].reused and sum(e[0] == "complete" and e[1] == rig.pair for e in rig.log) == 1


def test_an_inputs_redelivery_after_its_teller_died_requests_the_pair_once(tmp_path):
    rig = Rig(tmp_path)
    rig.die_telling.add(rig.right)
    rig.pipeline.request(rig.jobs)
    rig.pipeline.run_request(rig.left)
    with pytest.raises(Crash):  # right is committed; the pair is not told yet
        rig.pipeline.run_request(rig.right)
    assert rig.ledger.rows[rig.right].state == JobState.DONE and rig.requested == []
    assert rig.ledger.rows[rig.right].waiting == {rig.pair}  # still to be told
    again = rig.pipeline.run_request(rig.right)  # SQS delivers right's request again
    assert again.jobs[0].reused
    assert rig.requested == [rig.pair] and rig.sent(rig.pair) == 1
    rig.pipeline.run_request(rig.pair)
    rig.pipeline.run_request(rig.right)  # once more: nothing left to tell
    assert rig.requested == [rig.pair] and rig.sent(rig.pair) == 1
    assert sum(e[0] == "complete" and e[1] == rig.pair for e in rig.log) == 1


def test_an_input_failed_for_good_fails_the_job_waiting_for_it_with_its_reason(tmp_path):
    class FailingLeft(TextStep):
        def run(self, source, params, context, out_dir):
            if params.prefix == "L":
                raise PermanentFailure(CORRUPT_IMAGE, "left cannot read it")
            return super().run(source, params, context, out_dir)

    rig = Rig(tmp_path, step=FailingLeft())
    result = rig.pipeline.process(REF)
    assert (result.state, result.reason) == (SourceState.PERMANENT_FAILURE, CORRUPT_IMAGE)
    pair = rig.ledger.rows[rig.pair]
    assert (pair.state, pair.failure_reason) == (JobState.PERMANENT_FAILURE, CORRUPT_IMAGE)
    assert rig.requested == [] and rig.queue.resent == []
