"""The records the worker receives, parsed with Powertools' models: SQS messages whose body
is an EventBridge S3 event ("Object Created" or "Object Deleted") or a job request
(:func:`~mediajobs.service_layer.requests.request_body`), and what the service needs of
them (:func:`request_of`, :func:`delivery_of`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel, SqsRecordModel
from pydantic import BaseModel, ConfigDict, Field, Json, ValidationError

from mediajobs.domain.assets import Deleted
from mediajobs.domain.jobs import Delivery, JobRequest, ObjectRef
from mediajobs.domain.keys import event_key_candidates

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


#: The ``detail-type`` of the events the worker takes (the template's rules send no other).
OBJECT_CREATED: Final = "Object Created"
OBJECT_DELETED: Final = "Object Deleted"


class S3ObjectEvent(S3EventNotificationEventBridgeModel):
    """An EventBridge S3 event of an object created or deleted (S3 user guide, "EventBridge
    event message structure"): any other ``detail-type`` does not parse."""

    detail_type: Literal["Object Created", "Object Deleted"] = Field(alias="detail-type")  # type: ignore[assignment]


class JobRequestBody(BaseModel):
    """A job request's body: ``{"mediajobs": "job", "job_key": <64 hex>}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mediajobs: Literal["job"]
    job_key: str = Field(pattern=r"^[0-9a-f]{64}$")


class ObjectEventRecord(SqsRecordModel):
    """An SQS record whose body is an EventBridge S3 "Object Created" or "Object Deleted"
    event, or a job request."""

    body: Json[S3ObjectEvent | JobRequestBody]  # type: ignore[assignment]


#: The name this model had while the worker took "Object Created" events only.
ObjectCreatedRecord = ObjectEventRecord


def parses(raw: Mapping[str, Any]) -> bool:
    """Whether a raw record of the event parses as an :class:`ObjectEventRecord` (one that
    does not is the batch processor's to report as failed)."""
    try:
        ObjectEventRecord.model_validate(raw)
    except ValidationError:
        return False
    return True


def is_deleted(record: ObjectEventRecord) -> bool:
    """Whether ``record`` is an "Object Deleted" event."""
    return isinstance(record.body, S3ObjectEvent) and record.body.detail_type == OBJECT_DELETED


def request_of(record: ObjectEventRecord) -> ObjectRef | Deleted | JobRequest:
    """What ``record`` asks: the original an "Object Created" event names
    (:func:`to_object_ref`), the deletion of an "Object Deleted" one (:func:`to_deleted`),
    or the job a job request names."""
    if isinstance(record.body, JobRequestBody):
        return JobRequest(record.body.job_key)
    return to_deleted(record) if is_deleted(record) else to_object_ref(record)


def correlation_id(record: ObjectEventRecord) -> str:
    """What the logs of ``record`` are correlated by: the S3 event's id, or the job key."""
    return record.body.job_key if isinstance(record.body, JobRequestBody) else record.body.id


def delivery_of(record: ObjectEventRecord, context: LambdaContext | None) -> Delivery:
    """The SQS delivery ``record`` came with, and the invocation's clock (900 s without a
    Lambda context: a replayed event)."""
    remaining = (lambda: context.get_remaining_time_in_millis() / 1000) if context is not None else (lambda: 900.0)
    return Delivery(
        queue_arn=record.eventSourceARN,
        receipt_handle=record.receiptHandle,
        receive_count=int(record.attributes.ApproximateReceiveCount or 1),
        remaining_s=remaining,
        correlation=_correlation(record),
    )


def _correlation(record: ObjectEventRecord) -> str:
    """The decision log's correlation id of ``record``: the S3 event's ``request-id`` (the
    request that wrote or deleted the object: every duplicate of its event shares it), or
    ``job:<key prefix>`` for a job request."""
    if isinstance(record.body, JobRequestBody):
        return f"job:{record.body.job_key[:16]}"
    request_id = getattr(record.body.detail, "request_id", None)
    return str(request_id or record.body.id)


def _named(record: ObjectEventRecord) -> tuple[Any, str, list[str], str | None]:
    """An S3 event's detail, the key it names decoded, the key as received when that
    differs (:func:`~mediajobs.domain.keys.event_key_candidates`), and its version id
    (``None`` for S3's ``"null"`` of an unversioned object)."""
    assert isinstance(record.body, S3ObjectEvent), "an S3 event names an object"
    detail = record.body.detail
    version = detail.object.version_id
    decoded, *as_received = event_key_candidates(detail.object.key)
    return detail, decoded, as_received, None if version in (None, "", "null") else version


def to_object_ref(record: ObjectEventRecord) -> ObjectRef:
    """The object an event names. S3 URL-encodes the key in its events (Powertools' parser
    model passes it on as received): ``key`` is the key decoded, ``raw_key`` the key as
    received when that differs (:func:`~mediajobs.domain.keys.event_key_candidates`). S3
    reports ``"null"`` as the version of unversioned objects. ``sequencer`` as sent."""
    detail, decoded, as_received, version_id = _named(record)
    return ObjectRef(
        bucket=detail.bucket.name,
        key=decoded,
        version_id=version_id,
        size_bytes=None if detail.object.size is None else int(detail.object.size),
        etag=detail.object.etag,
        raw_key=as_received[0] if as_received else None,
        sequencer=detail.object.sequencer,
    )


def to_deleted(record: ObjectEventRecord) -> Deleted:
    """The deletion an "Object Deleted" event reports: the key URL-decoded as in
    :func:`to_object_ref` (no object is left to try the key as received on), the version
    deleted or the delete marker's id (``"null"``: ``None``), S3's ``deletion-type``
    (``Delete Marker Created``, ``Permanently Deleted``; ``None`` when absent, as moto's)
    and ``reason`` (``DeleteObject``, ``Lifecycle Expiration``)."""
    detail, decoded, _, version_id = _named(record)
    return Deleted(
        bucket=detail.bucket.name,
        key=decoded,
        version_id=version_id,
        deletion_type=detail.deletion_type,
        sequencer=detail.object.sequencer,
        reason=detail.reason,
    )
