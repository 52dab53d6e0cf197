"""The outbox in DynamoDB, through PynamoDB: the notifications the asset writes owe, and
their delivery per destination.

One table (``OutboxTable``: key ``id``, a string; its stream, ``NEW_IMAGE``, feeds the
dispatcher) holds one item per notification (:class:`OutboxModel`). The worker's asset
change tells the unit of work what it owes (:meth:`~mediajobs.adapters.dynamo.Transaction.tell`),
which puts the item in the asset's own ``TransactWriteItems``, conditional on the id not
being there (:func:`outbox_put`); the dispatcher reads it (strongly consistent) and marks
each destination once it has delivered (:class:`DynamoOutbox`). Every request goes through
the unit of work (:mod:`mediajobs.adapters.dynamo`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from pynamodb.attributes import MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.expressions.condition import Condition
from pynamodb.models import Model

from mediajobs.adapters.dynamo import UnitOfWork
from mediajobs.domain.notifications import Notification, NotificationType
from mediajobs.service_layer.dispatch import OutboxRecord

log = logging.getLogger(__name__)
#: How long an item stays once every destination is marked (seconds; DynamoDB TTL on
#: ``expires_at_s``). Until then it stays, however long delivery takes.
KEEP_DELIVERED_S: Final = 30 * 86_400


class OutboxModel(Model):
    """A notification: ``id`` (64 hex characters, :func:`~mediajobs.domain.notifications.notification_id`),
    ``type`` (``Asset Ready`` ...), the original, ``payload`` (the JSON an app receives, as
    a string), ``created_at_s``, and ``deliveries``: destination name -> what delivered it
    (``{"at_s": int, ...}``), a destination missing until it has; ``not_before_s``:
    destination name -> the earliest its next try may be. ``expires_at_s`` (TTL) is set
    once every destination is marked."""

    class Meta:
        table_name = "mediajobs-outbox"
        region = "us-east-1"

    id = UnicodeAttribute(hash_key=True)
    type = UnicodeAttribute()
    bucket = UnicodeAttribute()
    object_key = UnicodeAttribute(attr_name="key")
    payload = UnicodeAttribute()
    created_at_s = NumberAttribute()
    deliveries = MapAttribute[str, Any](default=dict)
    not_before_s = MapAttribute[str, Any](null=True)
    expires_at_s = NumberAttribute(null=True)


def outbox_item(model: type[OutboxModel], notification: Notification, *, now_s: int) -> OutboxModel:
    """The item of ``notification``, nothing delivered yet."""
    return model(
        notification.id,
        type=str(notification.type),
        bucket=notification.bucket,
        object_key=notification.key,
        payload=json.dumps(notification.payload, sort_keys=True, separators=(",", ":")),
        created_at_s=now_s,
        deliveries={},
        not_before_s={},
    )


def outbox_put(model: type[OutboxModel]) -> Callable[[Notification, int], tuple[OutboxModel, Condition]]:
    """What a unit of work puts for each notification a transaction owes: the item of
    the notification (:func:`outbox_item`) and its condition, the id not there yet (a
    transition told already is not told twice)."""

    def put(notification: Notification, now_s: int) -> tuple[OutboxModel, Condition]:
        return outbox_item(model, notification, now_s=now_s), model.id.does_not_exist()

    return put


def _record(item: OutboxModel) -> OutboxRecord:
    notification = Notification(
        item.id, NotificationType(item.type), item.bucket, item.object_key, json.loads(item.payload)
    )
    marks = item.deliveries.as_dict() if item.deliveries is not None else {}
    deliveries = {name: {k: _plain(v) for k, v in mark.items()} for name, mark in marks.items()}
    waits = item.not_before_s.as_dict() if item.not_before_s is not None else {}
    not_before = {name: float(at_s) for name, at_s in waits.items()}
    return OutboxRecord(notification, deliveries, not_before, int(item.created_at_s))


def _plain(value: Any) -> Any:
    """A number read back from a raw map is a ``Decimal``-free int or float."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class DynamoOutbox:
    """The dispatcher's side of the outbox (the ``Outbox`` port of
    ``service_layer/dispatch.py``): read an item, mark a destination done, defer one.

    Parameters
    ----------
    uow: the unit of work every request goes through.
    model: the outbox table's bound model.
    """

    def __init__(self, uow: UnitOfWork, model: type[OutboxModel]) -> None:
        self._uow = uow
        self._model = model

    def get(self, notification_id: str) -> OutboxRecord | None:
        """The item (strongly consistent read), or ``None`` when there is none.

        Raises
        ------
        TransientFailure
            DynamoDB failed.
        """
        item = self._uow.get(self._model, notification_id, what="outbox get")
        return None if item is None else _record(item)

    def mark(self, notification_id: str, destination: str, mark: Mapping[str, Any], *, now_s: int, last: bool) -> bool:
        """Record that ``destination`` delivered (or gave up on) the notification: one
        ``UpdateItem`` of ``deliveries.<destination>``, conditional on it not being set yet
        (two dispatchers racing one record mark it once). ``last``: every destination is
        marked with this one, so the item may expire (:data:`KEEP_DELIVERED_S`).

        Returns ``True`` when this call marked it, ``False`` when it was marked already.

        Raises
        ------
        TransientFailure
            DynamoDB failed.
        """
        model = self._model
        actions = [model.deliveries[destination].set({**mark, "at_s": now_s})]
        if last:
            actions.append(model.expires_at_s.set(now_s + KEEP_DELIVERED_S))
        condition = model.id.exists() & model.deliveries[destination].does_not_exist()
        return self._uow.update(model(notification_id), actions, condition, what="outbox mark")

    def defer(self, notification_id: str, destination: str, *, not_before_s: float) -> None:
        """Note the earliest next try of ``destination``: one ``UpdateItem`` of
        ``not_before_s.<destination>`` (the item is put with the map, empty); nothing when
        the item is gone (expired).

        Raises
        ------
        TransientFailure
            DynamoDB failed.
        """
        model = self._model
        actions = [model.not_before_s[destination].set(float(not_before_s))]
        self._uow.update(model(notification_id), actions, model.id.exists(), what="outbox defer")
