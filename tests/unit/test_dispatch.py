"""The dispatcher and the webhook destination on fakes: every destination delivered and
marked once, a refusal kept and never retried, a Retry-After waited for (and noted on the
item when the invocation cannot wait), a backoff after a 5xx, nothing retried forever."""

from __future__ import annotations

import dataclasses

import pytest

from mediajobs.domain.notifications import Notification, NotificationType
from mediajobs.domain.webhook_targets import WebhookTargetRefused, target_refusal
from mediajobs.service_layer.dispatch import (
    DeliveryRefused,
    Dispatcher,
    NotYet,
    OutboxRecord,
    Timing,
    WebhookAnswer,
    WebhookDestination,
    WebhookPolicy,
)

NID = "a" * 64
NOTE = Notification(NID, NotificationType.READY, "media", "originals/a.jpg", {"id": NID, "type": "Asset Ready"})


class FakeOutbox:
    def __init__(self, record: OutboxRecord | None):
        self.record = record
        self.calls: list[tuple] = []

    def get(self, notification_id):
        return self.record

    def mark(self, notification_id, destination, mark, *, now_s, last):
        self.calls.append(("mark", destination, last))
        if destination in self.record.deliveries:
            return False
        self.record = dataclasses.replace(
            self.record, deliveries={**self.record.deliveries, destination: {**mark, "at_s": now_s}}
        )
        return True

    def defer(self, notification_id, destination, *, not_before_s):
        self.calls.append(("defer", destination, not_before_s))
        self.record = dataclasses.replace(
            self.record, not_before_s={**self.record.not_before_s, destination: not_before_s}
        )


class FakeFailures:
    def __init__(self):
        self.kept: list[dict] = []

    def keep(self, failure):
        self.kept.append(dict(failure))


class Recording:
    """A destination that answers from a list: a mark, or an exception to raise."""

    def __init__(self, name, *answers):
        self.name = name
        self.answers = list(answers)
        self.sent = 0

    def deliver(self, notification, *, remaining_s):
        self.sent += 1
        answer = self.answers.pop(0) if self.answers else {"ok": True}
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self, now=1000.0):
        self.now = now
        self.slept: list[float] = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def dispatcher(outbox, *destinations, clock=None):
    clock = clock or Clock()
    return Dispatcher(outbox, destinations, FakeFailures(), clock=clock, sleep=clock.sleep), clock


def test_every_destination_is_delivered_and_marked_once_the_last_letting_it_expire():
    outbox = FakeOutbox(OutboxRecord(NOTE))
    bus, hook = Recording("eventbridge", {"event_id": "e-1"}), Recording("webhook", {"status": 200})
    d, _ = dispatcher(outbox, bus, hook)
    done = d.dispatch(NID)
    assert (done.delivered, done.already, done.refused) == (["eventbridge", "webhook"], [], [])
    assert outbox.calls == [("mark", "eventbridge", False), ("mark", "webhook", True)]
    again = d.dispatch(NID)  # the stream record retried: nothing is sent again
    assert (again.delivered, again.already, bus.sent, hook.sent) == ([], ["eventbridge", "webhook"], 1, 1)


def test_a_dispatcher_that_died_before_marking_sends_again_only_what_is_unmarked():
    outbox = FakeOutbox(OutboxRecord(NOTE, deliveries={"eventbridge": {"event_id": "e-1", "at_s": 5}}))
    bus, hook = Recording("eventbridge"), Recording("webhook", {"status": 200})
    done, _ = dispatcher(outbox, bus, hook)
    result = done.dispatch(NID)
    assert (result.delivered, result.already, bus.sent, hook.sent) == (["webhook"], ["eventbridge"], 0, 1)
    assert outbox.calls == [("mark", "webhook", True)]


def test_a_refusal_is_kept_with_its_status_and_marked_so_it_is_never_retried():
    outbox = FakeOutbox(OutboxRecord(NOTE))
    hook = Recording("webhook", DeliveryRefused(400, "bad request: no such tenant"))
    d, _ = dispatcher(outbox, hook)
    done = d.dispatch(NID)
    assert done.refused == ["webhook"]
    assert d._failures.kept == [
        {
            "notification_id": NID,
            "destination": "webhook",
            "type": "Asset Ready",
            "key": "originals/a.jpg",
            "reason": "webhook_refused",
            "status": 400,
            "detail": "bad request: no such tenant",
        }
    ]
    assert outbox.record.deliveries["webhook"]["refused"] is True
    assert outbox.record.deliveries["webhook"]["reason"] == "webhook_refused"
    d.dispatch(NID)
    assert hook.sent == 1


def test_a_destination_not_delivered_yet_is_deferred_and_raised_for_the_record_to_come_back():
    outbox = FakeOutbox(OutboxRecord(NOTE))
    hook = Recording("webhook", NotYet("503", not_before_s=1040.0), {"status": 200})
    d, clock = dispatcher(outbox, hook)
    with pytest.raises(NotYet):
        d.dispatch(NID, remaining_s=lambda: 20.0)
    assert outbox.calls == [("defer", "webhook", 1040.0)]
    # The mapping retries at once: the next try waits for the noted time when it can ...
    done = d.dispatch(NID, remaining_s=lambda: 100.0)
    assert (clock.slept, done.delivered, hook.sent) == ([40.0], ["webhook"], 2)


def test_a_retry_the_invocation_cannot_wait_for_comes_back_without_sending():
    outbox = FakeOutbox(OutboxRecord(NOTE, not_before_s={"webhook": 1050.0}))
    hook = Recording("webhook")
    d, clock = dispatcher(outbox, hook)
    with pytest.raises(NotYet):
        d.dispatch(NID, remaining_s=lambda: 30.0)
    assert (hook.sent, clock.slept) == (0, [])


# --------------------------------------------------------------------------- webhooks


class Receiver:
    """A webhook transport answering from a list of (status, headers)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.posts: list[tuple[float, dict, bytes]] = []
        self.clock = None

    def post(self, url, body, headers, *, timeout_s):
        self.posts.append((self.clock.now if self.clock else 0.0, dict(headers), body))
        status, extra = self.answers.pop(0)
        return WebhookAnswer(status, extra, b"x" * 2000 if status and status >= 300 else b"")


class Signer:
    def signature(self, msg_id, timestamp_s, body):
        return f"v1,{msg_id[:4]}.{timestamp_s}.{len(body)}"


def webhook(receiver, policy=None):
    clock = Clock()
    receiver.clock = clock
    dest = WebhookDestination(
        "https://example.test/hook",
        receiver,
        Signer(),
        policy=policy or WebhookPolicy(),
        timing=Timing(clock, clock.sleep, lambda: 0.5),
    )
    return dest, clock


def test_a_webhook_is_posted_with_the_standard_webhooks_headers():
    receiver = Receiver((204, {}))
    dest, _ = webhook(receiver)
    assert dest.deliver(NOTE, remaining_s=lambda: 60.0) == {"status": 204, "attempts": 1}
    ((_, headers, body),) = receiver.posts
    assert headers == {
        "content-type": "application/json",
        "webhook-id": NID,
        "webhook-timestamp": "1000",
        "webhook-signature": f"v1,aaaa.1000.{len(body)}",
    }
    assert body == b'{"id":"' + NID.encode() + b'","type":"Asset Ready"}'


def test_a_429_with_retry_after_is_tried_again_no_sooner_than_it_says():
    receiver = Receiver((429, {"Retry-After": "2"}), (200, {}))
    dest, clock = webhook(receiver)
    assert dest.deliver(NOTE, remaining_s=lambda: 60.0)["attempts"] == 2
    assert [t for t, _, _ in receiver.posts] == [1000.0, 1002.0]
    assert [h["webhook-id"] for _, h, _ in receiver.posts] == [NID, NID]


def test_a_retry_after_over_the_cap_waits_the_cap():
    receiver = Receiver((503, {"Retry-After": "86400"}), (200, {}))
    dest, clock = webhook(receiver, WebhookPolicy(retry_after_cap_s=60.0))
    dest.deliver(NOTE, remaining_s=lambda: 300.0)
    assert clock.slept == [60.0]


def test_5xx_and_timeouts_back_off_with_jitter_and_give_up_after_the_attempts():
    receiver = Receiver((500, {}), (None, {}), (502, {}))
    dest, clock = webhook(receiver, WebhookPolicy(attempts=3, backoff_base_s=1.0))
    with pytest.raises(NotYet) as raised:
        dest.deliver(NOTE, remaining_s=lambda: 300.0)
    assert clock.slept == [0.5, 1.0]  # jitter 0.5 of 1 s, then of 2 s
    assert raised.value.not_before_s == clock.now + 2.0  # the third backoff, noted for the next try
    assert len(receiver.posts) == 3


def test_a_wait_the_invocation_cannot_afford_is_noted_instead():
    receiver = Receiver((429, {"Retry-After": "30"}))
    dest, clock = webhook(receiver)
    with pytest.raises(NotYet) as raised:
        dest.deliver(NOTE, remaining_s=lambda: 20.0)
    assert (raised.value.not_before_s, clock.slept, len(receiver.posts)) == (1030.0, [], 1)


@pytest.mark.parametrize("status", [400, 401, 404, 410, 301])
def test_other_answers_are_refused_with_the_first_bytes_of_the_answer(status):
    receiver = Receiver((status, {"Retry-After": "1"}))
    dest, _ = webhook(receiver, WebhookPolicy(detail_bytes=512))
    with pytest.raises(DeliveryRefused) as refused:
        dest.deliver(NOTE, remaining_s=lambda: 60.0)
    assert (refused.value.status, refused.value.detail) == (status, "x" * 512)
    assert len(receiver.posts) == 1


class RefusedTarget:
    """A transport whose URL's host resolved to a private address: it refuses, sends nothing."""

    def __init__(self):
        self.calls = 0

    def post(self, url, body, headers, *, timeout_s):
        self.calls += 1
        raise WebhookTargetRefused("hooks.example.test", target_refusal("10.0.0.7"), resolved=True)


def test_a_refused_target_is_a_permanent_refusal_naming_the_address_never_a_retry():
    """Bad input (a webhook host resolving to a private address) ends in one clear
    permanent failure: no second attempt, no NotYet, no crash of the batch; the on-failure
    message names the reason, the address and why, and the mark says so without a status."""
    transport = RefusedTarget()
    clock = Clock()
    hook = WebhookDestination(
        "https://hooks.example.test/", transport, Signer(), timing=Timing(clock, clock.sleep, lambda: 0.5)
    )
    outbox = FakeOutbox(OutboxRecord(NOTE))
    d, _ = dispatcher(outbox, hook, clock=clock)
    done = d.dispatch(NID, remaining_s=lambda: 60.0)
    assert (done.refused, transport.calls, clock.slept) == (["webhook"], 1, [])
    (kept,) = d._failures.kept
    assert (kept["reason"], kept["status"], kept["destination"]) == ("webhook_target_refused", None, "webhook")
    assert "hooks.example.test resolves to 10.0.0.7" in kept["detail"] and "private network" in kept["detail"]
    mark = outbox.record.deliveries["webhook"]
    assert (mark["refused"], mark["reason"], "status" in mark) == (True, "webhook_target_refused", False)
    d.dispatch(NID, remaining_s=lambda: 60.0)  # the stream record again: nothing is tried
    assert transport.calls == 1


def test_no_post_is_started_that_the_invocation_cannot_wait_out():
    """With less left than one POST's timeout and the margin, a slow receiver would run the
    invocation into the function's timeout (the whole batch failed, its partial response
    lost, DispatcherErrorsAlarm): the try is noted for the record's retry instead, at once."""
    receiver = Receiver((200, {}))
    dest, clock = webhook(receiver, WebhookPolicy(timeout_s=10.0))
    with pytest.raises(NotYet) as raised:
        dest.deliver(NOTE, remaining_s=lambda: 3.0)
    assert len(receiver.posts) == 0, f"a POST with a 10 s timeout started with 3 s left: {receiver.posts}"
    assert raised.value.not_before_s == clock.now
