"""The heartbeat, beat by beat (no threads, no sleeps: the tests call ``beat``)."""

from __future__ import annotations

import pytest

from mediajobs.domain.errors import DeadlineReached, DeliveryLost, Superseded, TransientFailure
from mediajobs.domain.jobs import Delivery
from mediajobs.service_layer.lease import Lease, LeaseKeeper, lease_until
from tests.fakes import FakeQueue


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeLedger:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.lost = False

    def renew(self, job_key, token, *, lease_until_s, now_s):
        self.calls.append(("renew", lease_until_s))
        if self.lost:
            raise Superseded(job_key)

    def release(self, job_key, token, *, detail, now_s):
        self.calls.append(("release", detail))


def keeper(clock, ledger, queue, remaining, lease_s=60, margin_s=10):
    delivery = Delivery("arn:aws:sqs:us-east-1:1:q", "rh", 1, lambda: remaining[0])
    lease = Lease(ledger, "k" * 64, "t", int(clock()) + lease_s, clock=clock)
    return LeaseKeeper(lease, queue=queue, delivery=delivery, lease_s=lease_s, margin_s=margin_s)


def test_the_lease_never_outlives_the_invocation():
    delivery = Delivery("arn", "rh", 1, lambda: 30.0)
    assert lease_until(1000.0, 900, delivery) == 1031
    assert lease_until(1000.0, 20, delivery) == 1020
    assert lease_until(1000.0, 900, None) == 1900


def test_renews_the_lease_and_the_visibility_every_third_of_a_lease():
    clock, ledger, queue, remaining = Clock(), FakeLedger(), FakeQueue(), [600.0]
    k = keeper(clock, ledger, queue, remaining)
    k._extend_visibility(clock())  # what entering does
    assert queue.visibility == [60 + 10]
    clock.now += 5
    k.beat()
    assert ledger.calls == []  # not due yet
    clock.now += 20
    k.beat()
    assert ledger.calls == [("renew", 1085)] and queue.visibility[-1] == 60 + 10
    k.check()  # nothing wrong


def test_a_takeover_found_by_the_heartbeat_stops_the_next_write():
    clock, ledger, queue, remaining = Clock(), FakeLedger(), FakeQueue(), [600.0]
    k = keeper(clock, ledger, queue, remaining)
    ledger.lost = True
    clock.now += 30
    k.beat()
    with pytest.raises(Superseded):
        k.check()
    assert [c[0] for c in ledger.calls] == ["renew"]  # a lost claim is not released


def test_the_deadline_releases_the_claim_at_once():
    clock, ledger, queue, remaining = Clock(), FakeLedger(), FakeQueue(), [600.0]
    k = keeper(clock, ledger, queue, remaining)
    remaining[0] = 9.5
    with pytest.raises(DeadlineReached):
        k.check()  # checks the deadline itself, without waiting for a tick
    assert ledger.calls[-1][0] == "release" and "9.5 s left" in ledger.calls[-1][1]


def test_an_invalid_receipt_handle_aborts_and_releases():
    clock, ledger, queue, remaining = Clock(), FakeLedger(), FakeQueue(), [600.0]
    k = keeper(clock, ledger, queue, remaining)
    queue.gone = True
    clock.now += 30
    k.beat()
    with pytest.raises(DeliveryLost):
        k.check()
    assert ledger.calls[-1][0] == "release"


def test_a_replayed_event_is_worked_on_without_a_message():
    """``sam local invoke -e``: the receipt handle was never valid; the work goes on."""
    clock, ledger, queue, remaining = Clock(), FakeLedger(), FakeQueue(), [600.0]
    queue.gone = True
    with keeper(clock, ledger, queue, remaining) as k:
        clock.now += 30
        k.beat()
        k.check()
    assert ledger.calls == [("renew", 1090)]


def test_the_heartbeat_stays_off_the_final_write():
    """While the job is marked done, no renewal or release can race it; afterwards the
    heartbeat does nothing (a deadline passing then releases nothing)."""
    clock, ledger, queue, remaining = Clock(), FakeLedger(), FakeQueue(), [600.0]
    k = keeper(clock, ledger, queue, remaining)
    with k.last_write():
        assert not k._lock.acquire(blocking=False)  # a beat would wait here
    remaining[0] = 1.0
    clock.now += 60
    k.beat()
    assert ledger.calls == [] and k.problem is None


def test_a_committed_record_stays_hidden_for_the_rest_of_the_invocation():
    """It is acknowledged only when the batch returns; until then a redelivery would count
    a receive against it."""
    clock, ledger, queue, remaining = Clock(), FakeLedger(), FakeQueue(), [600.0]
    k = keeper(clock, ledger, queue, remaining)
    with k.last_write():
        remaining[0] = 480.2
    assert queue.visibility[-1] == 481 + 10


def test_sqs_answers_for_a_receipt_handle_that_is_no_longer_ours():
    from botocore.exceptions import ClientError

    from mediajobs.adapters.sqs import SqsQueue

    class Stub:
        def __init__(self, code, message):
            self.error = ClientError({"Error": {"Code": code, "Message": message}}, "ChangeMessageVisibility")

        def get_queue_url(self, **_):
            return {"QueueUrl": "https://sqs/q"}

        def change_message_visibility(self, **_):
            raise self.error

    delivery = Delivery("arn:aws:sqs:us-east-1:1:q", "rh", 1, lambda: 60.0)
    stale = "Value rh for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available"
    for code, message in [
        ("ReceiptHandleIsInvalid", "The input receipt handle is invalid."),
        ("InvalidParameterValue", stale),
        ("InvalidParameterValue", "The receipt handle has expired."),
    ]:
        with pytest.raises(DeliveryLost):
            SqsQueue(Stub(code, message)).set_visibility(delivery, 10)
    with pytest.raises(TransientFailure):
        SqsQueue(Stub("InternalError", "try again")).set_visibility(delivery, 10)


def _claimed_earlier(clock, ledger, queue, held_s, lease_s=60, margin_s=10):
    """A keeper for a claim taken ``held_s`` seconds ago (an earlier job of the delivery ran meanwhile)."""
    delivery = Delivery("arn:aws:sqs:us-east-1:1:q", "rh", 1, lambda: 800.0)
    lease = Lease(ledger, "k" * 64, "t", int(clock()) - held_s + lease_s, clock=clock)
    return LeaseKeeper(lease, queue=queue, delivery=delivery, lease_s=lease_s, margin_s=margin_s)


@pytest.mark.parametrize("held_s", [20, 59, 75])
def test_a_claim_held_while_an_earlier_job_ran_is_renewed_before_its_message_is_hidden(held_s):
    """The second job of an original was claimed with the first: when it starts a third of
    its lease or more has passed (or all of it), so the lease is renewed first and the
    message hidden for the renewed lease plus the margin, never for 1 s from a lease that
    ran down (which let SQS redeliver the message while the job ran)."""
    clock, ledger, queue = Clock(), FakeLedger(), FakeQueue()
    with _claimed_earlier(clock, ledger, queue, held_s) as k:
        assert ledger.calls == [("renew", 1060)] and k.expires_at_s == 1060
    assert queue.visibility == [60 + 10]


def test_a_fresh_claim_is_not_renewed_at_the_start_of_its_job():
    clock, ledger, queue = Clock(), FakeLedger(), FakeQueue()
    with _claimed_earlier(clock, ledger, queue, held_s=5):
        assert ledger.calls == []
    assert queue.visibility == [55 + 10]


def test_a_claim_taken_over_while_an_earlier_job_ran_stops_before_any_write():
    clock, ledger, queue = Clock(), FakeLedger(), FakeQueue()
    ledger.lost = True
    with _claimed_earlier(clock, ledger, queue, held_s=75) as k, pytest.raises(Superseded):
        k.check()
