"""Notifications end to end on the embedded AWS, the acceptance test the outbox exists
for: with a verifying receiver on 127.0.0.1, the same upload delivered twice, a worker
killed after its commit and before its acknowledgement, a dispatcher killed after the
POST and before its mark -- the receiver sees exactly one notification id per asset
version (repeats carry the same id); a 429 with ``Retry-After: 2`` is retried no sooner
than 2 s later; a 400 lands in the failures queue and is not retried; two dispatchers
racing one record send it at most twice and mark it once."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator

import pytest

from mediajobs.local.notifications import LocalDispatcher, failures, local_dispatcher, new_webhook_secret, seen_events
from mediajobs.local.receiver import Answer, WebhookReceiver
from mediajobs.local.session import LocalSession
from tests.conftest import NOT_IN_STACK_ENVIRONMENT, REPO, stack_environment

PHOTO = REPO / "tests" / "media" / "photos" / "canon-40d-small.jpg"
OTHER = REPO / "tests" / "media" / "photos" / "camera-gps-nikon.jpg"


@pytest.fixture(scope="module")
def local_session() -> Iterator[LocalSession]:
    """A stack of its own: moto's state is the process's, and the shared session's outbox
    holds other modules' notifications."""
    with (
        LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-told") as session,
        pytest.MonkeyPatch.context() as env,
    ):
        for name, value in stack_environment(session.stack).items():
            env.setenv(name, value)  # the killed worker below is built from the environment
        for name in NOT_IN_STACK_ENVIRONMENT:
            env.delenv(name, raising=False)
        yield session


@pytest.fixture()
def secret() -> str:
    return new_webhook_secret()


@pytest.fixture()
def receiver(secret) -> Iterator[WebhookReceiver]:
    server = WebhookReceiver(secret).start()
    yield server
    server.stop()


def fresh(local_session, receiver, secret, **settings) -> LocalDispatcher:
    """A dispatcher on the module's stack, with what earlier tests left delivered first."""
    stack = local_session.stack
    dispatcher = local_dispatcher(stack, webhook_url=receiver.url, webhook_secret=secret, **settings)
    dispatcher.mapping.drain()
    receiver.received.deliveries.clear()
    seen_events(stack)
    failures(stack)
    return dispatcher


def upload(local_session, path=PHOTO) -> str:
    key = f"originals/notify/{uuid.uuid4().hex}.jpg"
    local_session.upload(path, key)
    return key


def test_a_ready_upload_delivered_twice_is_told_once_to_the_webhook_and_the_bus(local_session, receiver, secret):
    dispatcher = fresh(local_session, receiver, secret)
    stack = local_session.stack
    key = upload(local_session)
    local_session.run()
    dispatcher.mapping.drain()

    (delivery,) = receiver.received.deliveries
    assert delivery.payload["id"] == delivery.id and delivery.payload["type"] == "Asset Ready"
    assert (delivery.payload["asset"]["key"], delivery.payload["asset"]["state"]) == (key, "ready")
    assert set(delivery.payload["asset"]["recipes"]) == {"moderation-image@1", "web-image@1", "image-placeholder@1"}
    (event,) = seen_events(stack)
    assert (event["source"], event["detail-type"], event["detail"]["id"]) == ("mediajobs", "Asset Ready", delivery.id)
    item = stack.outbox_model().get(delivery.id, consistent_read=True)
    assert set(item.deliveries.as_dict()) == {"eventbridge", "webhook"} and item.expires_at_s is not None

    local_session.redeliver(local_session.esm.stats.bodies[-1:])  # the same upload event again
    local_session.run()
    dispatcher.mapping.drain()
    assert receiver.received.ids() == [delivery.id] and receiver.received.repeats() == 0
    assert seen_events(stack) == [] and failures(stack) == []


def test_a_dispatcher_killed_after_the_post_sends_again_under_the_same_id_and_marks_once(
    local_session, receiver, secret
):
    killed: list[str] = []

    class DiesBeforeMarking:
        def __init__(self, outbox):
            self._outbox = outbox

        def __getattr__(self, name):
            return getattr(self._outbox, name)

        def mark(self, notification_id, destination, mark, *, now_s, last):
            if destination == "webhook" and not killed:
                killed.append(notification_id)
                raise RuntimeError("killed after the POST, before the mark")
            return self._outbox.mark(notification_id, destination, mark, now_s=now_s, last=last)

    dispatcher = fresh(local_session, receiver, secret)
    wrapped = local_dispatcher(
        local_session.stack,
        webhook_url=receiver.url,
        webhook_secret=secret,
        wrap=lambda a: dataclasses.replace(a, outbox=DiesBeforeMarking(a.outbox)),
    )
    upload(local_session)
    local_session.run()
    wrapped.mapping.drain()
    assert wrapped.mapping.stats.retried == 1  # the record came back
    deliveries = receiver.received.deliveries
    assert [d.id for d in deliveries] == [killed[0], killed[0]]  # sent again, the same id
    assert receiver.received.ids() == killed and receiver.received.repeats() == 1
    item = local_session.stack.outbox_model().get(killed[0], consistent_read=True)
    assert set(item.deliveries.as_dict()) == {"eventbridge", "webhook"}
    assert len(seen_events(local_session.stack)) == 1  # marked before the kill: not sent again
    dispatcher.mapping.drain()  # the first dispatcher, reading the same records: nothing left to send
    assert len(receiver.received.deliveries) == 2


def test_a_429_with_retry_after_is_retried_no_sooner_than_it_says(local_session, receiver, secret):
    dispatcher = fresh(local_session, receiver, secret)
    receiver.answers = [Answer(429, 2), Answer(200)]
    upload(local_session)
    local_session.run()
    dispatcher.mapping.drain()
    first, second = receiver.received.deliveries
    assert (first.id, first.status, second.status) == (second.id, 429, 200)
    assert second.at_s - first.at_s >= 2.0


def test_a_400_lands_in_the_failures_queue_and_is_not_retried(local_session, receiver, secret):
    dispatcher = fresh(local_session, receiver, secret)
    receiver.answers = [Answer(400)]
    upload(local_session, OTHER)
    local_session.run()
    dispatcher.mapping.drain()
    (refused,) = receiver.received.deliveries
    (kept,) = failures(local_session.stack)
    assert (kept["notification_id"], kept["destination"], kept["status"]) == (refused.id, "webhook", 400)
    assert kept["detail"] == '{"status": 400}'
    dispatcher.mapping.drain()
    assert len(receiver.received.deliveries) == 1
    item = local_session.stack.outbox_model().get(refused.id, consistent_read=True)
    assert item.deliveries.as_dict()["webhook"]["refused"] is True


def test_a_webhook_host_resolving_to_a_refused_address_is_kept_in_the_failures_queue_once(
    local_session, receiver, secret
):
    """As deployed (no network admitted), a URL naming ``localhost``: its name resolves to
    loopback when the dispatcher POSTs, so nothing is sent, the notification lands in the
    failures queue with reason ``webhook_target_refused`` naming the address, the item is
    marked refused, and the stream record is not retried -- no loop, no crash of the batch."""
    stack = local_session.stack
    port = receiver.url.rsplit(":", 1)[1].split("/")[0]
    refusing = local_dispatcher(
        stack, webhook_url=f"http://localhost:{port}/", webhook_secret=secret, webhook_allow_networks=""
    )
    refusing.mapping.drain()  # what earlier tests left
    failures(stack)
    key = upload(local_session, OTHER)
    local_session.run()
    refusing.mapping.drain()
    assert receiver.received.deliveries == []
    (kept,) = failures(stack)
    assert (kept["key"], kept["destination"], kept["reason"], kept["status"]) == (
        key, "webhook", "webhook_target_refused", None,
    )  # fmt: skip
    assert "the webhook URL's host localhost resolves to" in kept["detail"] and "loopback" in kept["detail"]
    mark = stack.outbox_model().get(kept["notification_id"], consistent_read=True).deliveries.as_dict()["webhook"]
    assert (mark["refused"], mark["reason"], "status" in mark) == (True, "webhook_target_refused", False)
    refusing.mapping.drain()
    assert (receiver.received.deliveries, failures(stack)) == ([], [])


def test_two_dispatchers_racing_one_record_send_it_at_most_twice_and_mark_it_once(local_session, receiver, secret):
    first = fresh(local_session, receiver, secret)
    second = local_dispatcher(local_session.stack, webhook_url=receiver.url, webhook_secret=secret)
    second.mapping.drain()
    receiver.received.deliveries.clear()
    seen_events(local_session.stack)
    upload(local_session)
    local_session.run()
    # Both read the same record before either marks it: each delivers, one mark wins.
    record_one, record_two = first.mapping, second.mapping
    go = threading.Barrier(2)
    threads = [threading.Thread(target=lambda m=m: (go.wait(), m.drain())) for m in (record_one, record_two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = receiver.received.ids()
    assert len(ids) == 1 and len(receiver.received.deliveries) <= 2
    raced = [d for d in first.dispatched + second.dispatched if d.notification_id == ids[0]]
    marked = sum("webhook" in d.delivered and "webhook" not in d.raced for d in raced)
    assert marked == 1


class Crash(BaseException):
    """The worker process dies here (escapes every ``except Exception``)."""


def test_a_worker_killed_after_its_commit_and_before_its_ack_is_told_once(local_session, receiver, secret):
    """The first delivery commits the jobs and the asset (with its notification) and dies
    before its acknowledgement; the redelivery finds the asset ready: one id."""
    from mediajobs.bootstrap import build_service, default_adapters
    from mediajobs.entrypoints import worker
    from mediajobs.local.runner import EventSourceMapping
    from mediajobs.settings import Settings

    dispatcher = fresh(local_session, receiver, secret)
    before = local_session.run().received  # the session's counts are its whole life's
    stack = local_session.stack
    settings = Settings.from_env()
    service = build_service(settings, adapters=default_adapters(settings, clients=local_session.stack.clients()))

    def die_before_ack(messages):
        raise Crash("before_ack")

    dying = EventSourceMapping(
        local_session.sqs, stack.queue_url, stack.queue_arn, worker.make_handler(service), before_ack=die_before_ack
    )
    upload(local_session)
    with pytest.raises(Crash):
        dying.poll_once()
    dispatcher.mapping.drain()
    (told,) = receiver.received.ids()  # committed with the asset, before the acknowledgement
    dying.expire(dying.current_batch)  # its visibility timeout ran out: delivered again
    assert local_session.run().received - before == 1
    dispatcher.mapping.drain()
    assert receiver.received.ids() == [told] and receiver.received.repeats() == 0
    assert [e["detail"]["id"] for e in seen_events(stack)] == [told]
