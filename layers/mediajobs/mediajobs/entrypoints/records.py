"""The records the worker receives: SQS messages whose body is an EventBridge S3 event,
parsed with Powertools' models, and what the service needs of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel, SqsRecordModel
from pydantic import Json, ValidationError

from mediajobs.domain.jobs import Delivery, ObjectRef
from mediajobs.domain.keys import event_key_candidates

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class ObjectCreatedRecord(SqsRecordModel):
    """An SQS record whose body is an EventBridge S3 "Object Created" event."""

    body: Json[S3EventNotificationEventBridgeModel]  # type: ignore[assignment]


def parses(raw: Mapping[str, Any]) -> bool:
    """Whether a raw record of the event parses as an :class:`ObjectCreatedRecord` (one that
    does not is the batch processor's to report as failed)."""
    try:
        ObjectCreatedRecord.model_validate(raw)
    except ValidationError:
        return False
    return True


def delivery_of(record: ObjectCreatedRecord, context: LambdaContext | None) -> Delivery:
    """The SQS delivery ``record`` came with, and the invocation's clock (900 s without a
    Lambda context: a replayed event)."""
    remaining = (lambda: context.get_remaining_time_in_millis() / 1000) if context is not None else (lambda: 900.0)
    return Delivery(
        queue_arn=record.eventSourceARN,
        receipt_handle=record.receiptHandle,
        receive_count=int(record.attributes.ApproximateReceiveCount or 1),
        remaining_s=remaining,
    )


def to_object_ref(record: ObjectCreatedRecord) -> ObjectRef:
    """The object an event names. S3 URL-encodes the key in its events (Powertools' parser
    model passes it on as received): ``key`` is the key decoded, ``raw_key`` the key as
    received when that differs (:func:`~mediajobs.domain.keys.event_key_candidates`). S3
    reports ``"null"`` as the version of unversioned objects."""
    detail = record.body.detail
    version = detail.object.version_id
    decoded, *as_received = event_key_candidates(detail.object.key)
    return ObjectRef(
        bucket=detail.bucket.name,
        key=decoded,
        version_id=None if version in (None, "", "null") else version,
        size_bytes=None if detail.object.size is None else int(detail.object.size),
        etag=detail.object.etag,
        raw_key=as_received[0] if as_received else None,
    )
