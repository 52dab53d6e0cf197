"""The delivery policy, case by case: outcome, receive count and hand-overs in; acknowledge,
return after N s or hand over out. No AWS, no sleeps: the clock is a value and the jitter
an rng that picks the edge of its range."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from mediajobs.domain.errors import (
    UNSUPPORTED_FORMAT,
    DeadlineReached,
    DeliveryLost,
    JobBusy,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.service_layer.delivery import (
    HANDOVERS_ATTRIBUTE,
    MAX_HANDOVERS,
    Acknowledge,
    Batch,
    HandOver,
    Outcome,
    Policy,
    Received,
    ReturnAfter,
    before_work,
    decide,
    handovers_of,
    outcome_of,
)
from mediajobs.settings import Settings
from tests.fakes import FakeQueue

POLICY = Policy(max_receive_count=5, retry_base_s=5, retry_cap_s=900, lease_s=120)
NOW = 1_000.0
ARN = "arn:aws:sqs:us-east-1:123456789012:jobs"
OTHER_ARN = "arn:aws:sqs:us-east-1:123456789012:other"


class Edge(random.Random):
    """Jitter at the top (``high``) or the bottom of every range."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


HIGH, LOW = Edge(high=True), Edge(high=False)


@pytest.mark.parametrize(
    ("outcome", "receives", "handovers", "busy_until_s", "rng", "expected"),
    [
        # Settled: SQS deletes the record, whatever its receives or hand-overs.
        (Outcome.COMMITTED, 1, 0, None, HIGH, Acknowledge()),
        (Outcome.FAILED, 5, 2, None, HIGH, Acknowledge()),
        (Outcome.IGNORED, 1, 0, None, HIGH, Acknowledge()),
        # Busy: a fresh copy after the holder's lease left plus 1 s up to a tenth of the lease;
        # the hand-over count is carried on unchanged (waiting is not running low).
        (Outcome.BUSY, 1, 0, NOW + 30, HIGH, HandOver(delay_s=42, handovers=0)),
        (Outcome.BUSY, 3, 0, NOW + 30, LOW, HandOver(delay_s=31, handovers=0)),
        (Outcome.BUSY, 4, 1, NOW + 30, HIGH, HandOver(delay_s=42, handovers=1)),
        (Outcome.BUSY, 1, 0, NOW - 5, HIGH, HandOver(delay_s=12, handovers=0)),  # the lease ran out: jitter only
        (Outcome.BUSY, 1, 0, NOW + 50_000, LOW, HandOver(delay_s=43_200, handovers=0)),  # SQS's 12 h at most
        # The deadline: back at once. A lost delivery: nothing to set, the message is not ours.
        (Outcome.DEADLINE, 3, 0, None, HIGH, ReturnAfter(0)),
        (Outcome.DELIVERY_LOST, 2, 0, None, HIGH, ReturnAfter(None)),
        # Transient (superseded, unexpected): 5 s * 2**(receives-1), at most 900, equal jitter.
        (Outcome.TRANSIENT, 1, 0, None, HIGH, ReturnAfter(5)),
        (Outcome.TRANSIENT, 3, 0, None, HIGH, ReturnAfter(20)),
        (Outcome.TRANSIENT, 3, 0, None, LOW, ReturnAfter(10)),
        (Outcome.TRANSIENT, 10, 0, None, HIGH, ReturnAfter(900)),
        (Outcome.SUPERSEDED, 2, 0, None, HIGH, ReturnAfter(10)),
        (Outcome.UNEXPECTED, 4, 2, None, LOW, ReturnAfter(20)),
    ],
)
def test_decide(outcome, receives, handovers, busy_until_s, rng, expected):
    decision = decide(
        outcome,
        receive_count=receives,
        handovers=handovers,
        policy=POLICY,
        now_s=NOW,
        rng=rng,
        busy_until_s=busy_until_s,
    )
    assert decision == expected


def test_a_busy_outcome_needs_the_holders_lease():
    with pytest.raises(ValueError, match="busy_until_s"):
        decide(Outcome.BUSY, receive_count=1, handovers=0, policy=POLICY, now_s=NOW, rng=HIGH)


@pytest.mark.parametrize(
    ("receives", "handovers", "expected"),
    [
        (1, 0, None),
        (3, 0, None),  # not yet on its last receive but one
        (4, 0, HandOver(delay_s=0, handovers=1)),
        (5, 1, HandOver(delay_s=0, handovers=2)),
        (4, MAX_HANDOVERS, None),  # handed over enough: the dead-letter queue may have it
        (9, 3, None),
    ],
)
def test_before_work_hands_over_a_record_whose_receives_run_low(receives, handovers, expected):
    assert before_work(receive_count=receives, handovers=handovers, policy=POLICY) == expected


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (JobBusy("k" * 64, 1030), Outcome.BUSY),
        (DeliveryLost("ReceiptHandleIsInvalid"), Outcome.DELIVERY_LOST),
        (DeadlineReached("9.5 s left"), Outcome.DEADLINE),
        (Superseded("k" * 64), Outcome.SUPERSEDED),
        (TransientFailure("throttled"), Outcome.TRANSIENT),
        (ConnectionResetError("peer reset"), Outcome.UNEXPECTED),
        (PermanentFailure(UNSUPPORTED_FORMAT), Outcome.UNEXPECTED),  # the pipeline records those itself
    ],
)
def test_outcome_of_an_error(error, expected):
    assert outcome_of(error) is expected


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        (None, 0),
        ({"stringValue": "1", "dataType": "Number"}, 1),
        (SimpleNamespace(stringValue="2"), 2),
        ({"stringValue": ""}, 0),
        ({"stringValue": "many"}, MAX_HANDOVERS),  # not ours to trust: no more hand-overs
        ({"stringValue": "-1"}, MAX_HANDOVERS),
    ],
)
def test_the_handover_count_a_record_carries(attribute, expected):
    assert handovers_of(attribute) == expected


def test_the_policy_of_the_settings():
    settings = Settings(max_receive_count=7, retry_base_s=3, retry_cap_s=60, lease_s=90)
    assert Policy.from_settings(settings) == Policy(7, 3, 60, 90, MAX_HANDOVERS)


def record(message_id: str, receives: int = 1, handovers: int | None = None, arn: str = ARN) -> dict:
    raw = {
        "messageId": message_id,
        "receiptHandle": f"rh-{message_id}",
        "body": f'{{"id": "{message_id}"}}',
        "attributes": {"ApproximateReceiveCount": str(receives)},
        "messageAttributes": {},
        "eventSourceARN": arn,
    }
    if handovers is not None:
        raw["messageAttributes"] = {HANDOVERS_ATTRIBUTE: {"stringValue": str(handovers), "dataType": "Number"}}
    return raw


def batch(records, queue, rng=HIGH) -> Batch:
    return Batch(records, queue=queue, policy=POLICY, clock=lambda: NOW, rng=rng)


def test_a_record_is_read_from_the_lambda_event():
    assert Received.from_record(record("m1", receives=4, handovers=1)) == Received(
        message_id="m1",
        queue_arn=ARN,
        receipt_handle="rh-m1",
        body='{"id": "m1"}',
        receive_count=4,
        handovers=1,
    )


def test_records_running_low_are_handed_over_before_any_work():
    queue = FakeQueue()
    low, fresh, unparsable = record("low", receives=4), record("fresh"), record("bad", receives=4)
    b = batch([low, fresh, unparsable], queue)
    made = b.hand_over_running_low(lambda raw: raw["messageId"] != "bad")
    assert made == [HandOver(delay_s=0, handovers=1)]
    assert queue.resent == [(ARN, '{"id": "low"}', 0, 1)]  # the copy first ...
    assert queue.deleted == [(ARN, "rh-low")]  # ... then the received message
    assert [b.handed_over(m) for m in ("low", "fresh", "bad")] == [True, False, False]


def test_a_record_whose_copy_cannot_be_sent_is_worked_on():
    queue = FakeQueue(refuse_resend=True)
    b = batch([record("low", receives=4)], queue)
    assert b.hand_over_running_low(lambda raw: True) == []
    assert not b.handed_over("low") and queue.deleted == []


def test_a_busy_record_is_handed_over_after_the_holders_lease():
    queue = FakeQueue()
    b = batch([record("busy", receives=2, handovers=1)], queue)
    assert b.settle("busy", Outcome.BUSY, busy_until_s=NOW + 30) == HandOver(delay_s=42, handovers=1)
    assert queue.resent == [(ARN, '{"id": "busy"}', 42, 1)] and queue.deleted == [(ARN, "rh-busy")]
    assert b.return_failed([]) == {} and queue.returned == []


def test_a_busy_record_whose_copy_cannot_be_sent_goes_back_after_the_lease():
    queue = FakeQueue(refuse_resend=True)
    b = batch([record("busy")], queue, rng=LOW)
    assert b.settle("busy", Outcome.BUSY, busy_until_s=NOW + 3) == ReturnAfter(4)
    assert queue.deleted == []
    b.return_failed(["busy"])
    assert queue.returned == [(ARN, "rh-busy", 4)]


def test_failed_records_go_back_with_the_visibility_chosen_for_each_one_call_per_queue():
    queue = FakeQueue()
    records = [
        record("deadline", receives=3),
        record("lost", receives=2),
        record("transient", receives=3),
        record("unparsable", receives=2, arn=OTHER_ARN),  # never reached the handler
        record("done"),
    ]
    b = batch(records, queue)
    b.settle("deadline", Outcome.DEADLINE)
    b.settle("lost", Outcome.DELIVERY_LOST)
    b.settle("transient", Outcome.TRANSIENT)
    assert b.settle("done", Outcome.COMMITTED) == Acknowledge()
    returned = b.return_failed(["deadline", "lost", "transient", "unparsable"])
    assert returned == {
        ARN: [("rh-deadline", 0), ("rh-transient", 20)],
        OTHER_ARN: [("rh-unparsable", 10)],  # a transient backoff on its receive count
    }
    assert queue.returned == [(ARN, "rh-deadline", 0), (ARN, "rh-transient", 20), (OTHER_ARN, "rh-unparsable", 10)]


def test_batches_share_no_state():
    """One invocation's choices never leak into the next (they were module globals)."""
    queue = FakeQueue()
    first = batch([record("m1", receives=4)], queue)
    first.hand_over_running_low(lambda raw: True)
    first.settle("m1", Outcome.DEADLINE)
    second = batch([record("m1", receives=1)], queue)
    assert not second.handed_over("m1")
    assert second.return_failed(["m1"]) == {ARN: [("rh-m1", 5)]}  # its own backoff, not the deadline's 0


def test_without_a_queue_nothing_is_handed_over_or_set():
    b = batch([record("low", receives=4), record("busy")], None)
    assert b.hand_over_running_low(lambda raw: True) == [] and not b.handed_over("low")
    assert b.settle("busy", Outcome.BUSY, busy_until_s=NOW + 30) == ReturnAfter(42)
    assert b.return_failed(["busy"]) == {ARN: [("rh-busy", 42)]}
