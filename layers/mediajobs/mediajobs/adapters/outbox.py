"""The outbox in DynamoDB, through PynamoDB: the notifications the asset writes owe, and
their delivery per destination.

One table (``OutboxTable``: key ``id``, a string; its stream, ``NEW_IMAGE``, feeds the
dispatcher) holds one item per notification (:class:`OutboxModel`). The worker puts it in
the asset's own ``TransactWriteItems``, conditional on the id not being there
(:func:`outbox_put`); the dispatcher reads it (strongly consistent) and marks each
destination once it has delivered (:class:`DynamoOutbox`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from pynamodb.attributes import MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, GetError, UpdateError
from pynamodb.models import Model

from mediajobs.adapters.ledger import bind_model, dynamo_failure
from mediajobs.domain.notifications import Notification, NotificationType
from mediajobs.service_layer.dispatch import OutboxRecord

log = logging.getLogger(__name__)

_CONDITION_FAILED: Final = "ConditionalCheckFailedException"
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


def outbox_model(table_name: str, region: str, host: str | None) -> type[OutboxModel]:
    """:func:`~mediajobs.adapters.ledger.bind_model` for :class:`OutboxModel`."""
    return bind_model(OutboxModel, table_name, region, host)


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
    model: the bound model (:func:`outbox_model`).
    """

    def __init__(self, model: type[OutboxModel]) -> None:
        self._model = model

    def get(self, notification_id: str) -> OutboxRecord | None:
        """The item (strongly consistent read), or ``None`` when there is none.

        Raises
        ------
        TransientFailure
            DynamoDB failed.
        """
        try:
            return _record(self._model.get(notification_id, consistent_read=True))
        except DoesNotExist:
            return None
        except GetError as exc:
            raise dynamo_failure(exc, "outbox get") from exc

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
        try:
            model(notification_id).update(
                actions=actions, condition=model.id.exists() & model.deliveries[destination].does_not_exist()
            )
        except UpdateError as exc:
            if exc.cause_response_code == _CONDITION_FAILED:
                return False
            raise dynamo_failure(exc, "outbox mark") from exc
        return True

    def defer(self, notification_id: str, destination: str, *, not_before_s: float) -> None:
        """Note the earliest next try of ``destination``: one ``UpdateItem`` of
        ``not_before_s.<destination>`` (the item is put with the map, empty).

        Raises
        ------
        TransientFailure
            DynamoDB failed.
        """
        model = self._model
        try:
            model(notification_id).update(
                actions=[model.not_before_s[destination].set(float(not_before_s))], condition=model.id.exists()
            )
        except UpdateError as exc:
            if exc.cause_response_code == _CONDITION_FAILED:
                return  # gone (expired): nothing to defer
            raise dynamo_failure(exc, "outbox defer") from exc
