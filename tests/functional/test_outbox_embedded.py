"""The outbox adapter on the embedded AWS: the item an asset's end put is read back
whole, a destination is marked once however many dispatchers race to mark it, a deferred
try is noted, and the item expires only once its last destination is marked."""

from __future__ import annotations

import threading
import uuid

import pytest

from mediajobs.adapters.outbox import KEEP_DELIVERED_S, DynamoOutbox, outbox_item
from mediajobs.domain.notifications import Notification, NotificationType


@pytest.fixture()
def outbox(local_session):
    model = local_session.stack.outbox_model()
    return model, DynamoOutbox(local_session.stack.clients().unit_of_work(), model)


def notification() -> Notification:
    nid = uuid.uuid4().hex * 2
    payload = {"id": nid, "type": "Asset Ready", "asset": {"key": "originals/a b+é.jpg", "state": "ready"}}
    return Notification(nid, NotificationType.READY, "media", "originals/a b+é.jpg", payload)


def test_an_item_reads_back_whole_with_nothing_delivered(outbox):
    model, adapter = outbox
    n = notification()
    outbox_item(model, n, now_s=100).save()
    record = adapter.get(n.id)
    assert record is not None
    assert (record.notification, record.deliveries, record.not_before_s, record.created_at_s) == (n, {}, {}, 100)
    assert adapter.get("0" * 64) is None


def test_a_destination_is_marked_once_and_the_last_mark_lets_the_item_expire(outbox):
    model, adapter = outbox
    n = notification()
    outbox_item(model, n, now_s=100).save()
    assert adapter.mark(n.id, "eventbridge", {"event_id": "e-1"}, now_s=110, last=False) is True
    assert adapter.mark(n.id, "eventbridge", {"event_id": "e-2"}, now_s=111, last=False) is False
    assert model.get(n.id, consistent_read=True).expires_at_s is None
    adapter.defer(n.id, "webhook", not_before_s=130.5)
    assert adapter.get(n.id).not_before_s == {"webhook": 130.5}
    assert adapter.mark(n.id, "webhook", {"status": 200}, now_s=131, last=True) is True
    record = adapter.get(n.id)
    marks = {"eventbridge": {"event_id": "e-1", "at_s": 110}, "webhook": {"status": 200, "at_s": 131}}
    assert record.deliveries == marks
    assert model.get(n.id, consistent_read=True).expires_at_s == 131 + KEEP_DELIVERED_S


def test_racing_dispatchers_mark_a_destination_once(outbox):
    model, adapter = outbox
    n = notification()
    outbox_item(model, n, now_s=100).save()
    won: list[bool] = []
    start = threading.Barrier(8)

    def mark(i: int) -> None:
        start.wait()
        won.append(adapter.mark(n.id, "webhook", {"status": 200, "by": i}, now_s=120, last=True))

    threads = [threading.Thread(target=mark, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]


def test_marking_or_deferring_an_item_that_is_gone_changes_nothing(outbox):
    model, adapter = outbox
    assert adapter.mark("f" * 64, "webhook", {"status": 200}, now_s=1, last=True) is False
    adapter.defer("f" * 64, "webhook", not_before_s=5.0)
    assert adapter.get("f" * 64) is None
