"""The one event factory of the local tools and tests: S3's "Object Created" and "Object
Deleted" events as EventBridge puts them in SQS, and the Lambda SQS event a batch of
messages becomes. The embedded AWS builds the events its S3 sends here too
(:class:`mediajobs.local.moto_s3.S3EventsAsAws`).

Used by the local event source mapping (:mod:`mediajobs.local.runner` turns received
messages into records here), ``simulate`` (duplicated events), the tests, and the sample
files under ``events/`` (:data:`SAMPLE_EVENTS`, written by :func:`write_samples`; a test
regenerates each file and compares).

Every event made here spells the object key as S3 does: URL-encoded
(:func:`mediajobs.domain.keys.encode_event_key`). Shapes: Amazon S3 user guide,
"EventBridge event message structure" (its examples "Object created", "Object deleted
(using DeleteObject)", "Object deleted (using lifecycle expiration)" and the detail
field's ``reason`` and ``deletion-type``).
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypedDict, Unpack

from mediajobs.domain.keys import encode_event_key

#: moto's default account, the embedded AWS's.
ACCOUNT_ID: Final = "123456789012"
#: The embedded AWS's region.
REGION: Final = "us-east-1"

#: The sequencer of an event made without one (a hand-made event, the sample files): real
#: looking (S3's are hex strings of 16 to 20 digits, leading zeros included). Two events
#: made with it have the same sequencer: the same event again, for the assets. Lower than
#: every sequencer the embedded S3 sends (:class:`Sequencers`).
DEFAULT_SEQUENCER: Final = "00674A3B2C1D0E0F00"

#: ``reason`` of an "Object Created" event of ``PutObject``; of an "Object Deleted" event
#: of ``DeleteObject``/``DeleteObjects`` (AWS sends ``DeleteObject`` for both) and of an
#: S3 Lifecycle expiration (S3 user guide, "EventBridge event message structure").
PUT_OBJECT: Final = "PutObject"
DELETE_OBJECT: Final = "DeleteObject"
LIFECYCLE_EXPIRATION: Final = "Lifecycle Expiration"
#: ``deletion-type`` values (the same as :class:`mediajobs.domain.assets.Deletion`).
DELETE_MARKER_CREATED: Final = "Delete Marker Created"
PERMANENTLY_DELETED: Final = "Permanently Deleted"
#: ``requester`` of the events of S3 Lifecycle actions (they have no ``source-ip-address``).
LIFECYCLE_REQUESTER: Final = "s3.amazonaws.com"
#: The ETag S3 puts in the event of a delete marker: the MD5 of no bytes (S3 user guide,
#: the "Object deleted" examples).
DELETE_MARKER_ETAG: Final = "d41d8cd98f00b204e9800998ecf8427e"


class Sequencers:
    """S3-like event sequencers: hex strings whose values increase with every call, and
    whose lengths vary (16, 20 or 18 digits, left-padded with zeros), as S3's do, so that a
    consumer comparing them as strings instead of as hex numbers (S3 user guide, "Event
    message structure": left-pad the shorter with zeros, then compare) is caught: the
    20-digit ``"0000692F08299329D18A"`` is greater than the 16-digit ``"692F08299329D189"``
    before it. Thread-safe; one instance per process gives every key increasing sequencers.

    Parameters
    ----------
    start: the first value. The default is greater than :data:`DEFAULT_SEQUENCER` and the
        sample files' sequencers: a hand-made event (a duplicate ``simulate`` sends, a
        test's replay) is then never newer than a real one, so it can never hide a later
        overwrite or delete of its key.
    """

    #: The lengths, hex digits, that successive sequencers cycle through.
    WIDTHS: Final = (16, 20, 18)

    def __init__(self, start: int = 0x692F08299329D189) -> None:
        self._values = itertools.count(start)
        self._lock = threading.Lock()

    def next(self) -> str:
        """The next sequencer: upper-case hex, greater than every one before it."""
        with self._lock:
            value = next(self._values)
        width = self.WIDTHS[value % len(self.WIDTHS)]
        return f"{value:0{width}X}"


class EventOrigin(TypedDict, total=False):
    """Where and when an S3 event comes from: the same fields in every event S3 sends,
    each optional.

    Attributes
    ----------
    region: the bucket's region (default :data:`REGION`).
    event_id, time, request_id: fixed values (the sample files); by default a fresh UUID,
        now (``YYYY-MM-DDTHH:MM:SSZ``), and random hex of S3's length.
    sequencer: the event's sequencer (S3's orders the events of one key), by default
        :data:`DEFAULT_SEQUENCER`.
    source_ip: the requester's address (``source-ip-address``), left out when ``None``.
    """

    region: str
    event_id: str | None
    time: str | None
    sequencer: str | None
    request_id: str | None
    source_ip: str | None


def object_created_event(
    bucket: str,
    key: str,
    *,
    size: int,
    etag: str = "",
    version_id: str | None = None,
    reason: str = PUT_OBJECT,
    **origin: Unpack[EventOrigin],
) -> dict[str, Any]:
    """The EventBridge event S3 sends when ``key`` is created in ``bucket`` (S3 user guide,
    "EventBridge event message structure", "Object created").

    Parameters
    ----------
    bucket: the bucket's name.
    key: the object's real key; the event carries it URL-encoded, as S3's do.
    size: the object's size, bytes.
    etag: its ETag (quotes are removed), ``""`` when unknown.
    version_id: its version id, ``None`` for an unversioned bucket (the event then has no
        ``version-id``).
    reason: the API that created the object: ``PutObject``, ``POST Object``,
        ``CopyObject`` or ``CompleteMultipartUpload``.
    origin: :class:`EventOrigin` (``region``, ``event_id``, ``time``, ``sequencer``,
        ``request_id``, ``source_ip``).

    Raises
    ------
    UnicodeEncodeError
        If ``key`` is not valid Unicode text (no S3 key is).
    """
    obj = {"key": encode_event_key(key), "size": size, "etag": etag.strip('"')}
    return _s3_event("Object Created", bucket, obj, version_id, ACCOUNT_ID, {"reason": reason}, origin)


def object_deleted_event(
    bucket: str,
    key: str,
    *,
    deletion_type: str,
    version_id: str | None = None,
    etag: str = DELETE_MARKER_ETAG,
    reason: str = DELETE_OBJECT,
    **origin: Unpack[EventOrigin],
) -> dict[str, Any]:
    """The EventBridge event S3 sends when ``key`` is deleted from ``bucket`` (S3 user
    guide, "EventBridge event message structure": "Object deleted (using DeleteObject)",
    "Object deleted (using lifecycle expiration)", and the detail field).

    Parameters
    ----------
    bucket: the bucket's name.
    key: the object's real key; the event carries it URL-encoded, as S3's do.
    deletion_type: :data:`DELETE_MARKER_CREATED` (a ``DeleteObject`` without a version on
        a versioned bucket) or :data:`PERMANENTLY_DELETED` (a version deleted, or any
        object of an unversioned bucket).
    version_id: the delete marker's id (Delete Marker Created), the version deleted
        (Permanently Deleted), ``None`` on an unversioned bucket (no ``version-id``).
    etag: the ETag of what was deleted: :data:`DELETE_MARKER_ETAG` for a delete marker
        (as AWS's examples), the version's for a version. The event has no ``size``.
    reason: :data:`DELETE_OBJECT` or :data:`LIFECYCLE_EXPIRATION`. A lifecycle event's
        requester is :data:`LIFECYCLE_REQUESTER` and it has no ``source-ip-address``.
    origin: :class:`EventOrigin`; its ``source_ip`` is left out of a lifecycle event.

    Raises
    ------
    ValueError
        If ``deletion_type`` or ``reason`` is not one S3 sends.
    UnicodeEncodeError
        If ``key`` is not valid Unicode text.
    """
    if deletion_type not in (DELETE_MARKER_CREATED, PERMANENTLY_DELETED):
        raise ValueError(f"not an S3 deletion-type: {deletion_type!r}")
    if reason not in (DELETE_OBJECT, LIFECYCLE_EXPIRATION):
        raise ValueError(f"not the reason of an S3 Object Deleted event: {reason!r}")
    lifecycle = reason == LIFECYCLE_EXPIRATION
    if lifecycle:
        origin = {**origin, "source_ip": None}
    obj = {"key": encode_event_key(key), "etag": etag.strip('"')}
    requester = LIFECYCLE_REQUESTER if lifecycle else ACCOUNT_ID
    last = {"reason": reason, "deletion-type": deletion_type}
    return _s3_event("Object Deleted", bucket, obj, version_id, requester, last, origin)


def _s3_event(
    detail_type: str,
    bucket: str,
    obj: dict[str, Any],
    version_id: str | None,
    requester: str,
    last: dict[str, str],
    origin: EventOrigin,
) -> dict[str, Any]:
    """An S3 event in its EventBridge envelope: ``obj`` (the object's fields before its
    version and sequencer), ``requester``, and the ``last`` fields of its detail, in the
    order of S3's examples."""
    if version_id:
        obj["version-id"] = version_id
    obj["sequencer"] = origin.get("sequencer") or DEFAULT_SEQUENCER
    detail: dict[str, Any] = {
        "version": "0",
        "bucket": {"name": bucket},
        "object": obj,
        "request-id": origin.get("request_id") or uuid.uuid4().hex[:16].upper(),
        "requester": requester,
    }
    source_ip = origin.get("source_ip")
    if source_ip is not None:
        detail["source-ip-address"] = source_ip
    detail.update(last)
    return {
        "version": "0",
        "id": origin.get("event_id") or str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": "aws.s3",
        "account": ACCOUNT_ID,
        "time": origin.get("time") or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": origin.get("region", REGION),
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": detail,
    }


def object_created_body(bucket: str, key: str, **fields: Any) -> str:
    """:func:`object_created_event` as the JSON text of an SQS message body (what the
    rule's target puts in the jobs queue); ``fields`` are its keyword parameters (``size``
    is required)."""
    return json.dumps(object_created_event(bucket, key, **fields))


def object_deleted_body(bucket: str, key: str, **fields: Any) -> str:
    """:func:`object_deleted_event` as the JSON text of an SQS message body; ``fields`` are
    its keyword parameters (``deletion_type`` is required).

    Raises
    ------
    ValueError
        If ``deletion_type`` or ``reason`` is not one S3 sends.
    """
    return json.dumps(object_deleted_event(bucket, key, **fields))


def sqs_record(message: Mapping[str, Any], queue_arn: str, region: str = REGION) -> dict[str, Any]:
    """The Lambda SQS event record of one message (Lambda developer guide, "Using Lambda
    with Amazon SQS", example event).

    Parameters
    ----------
    message: a message as ``ReceiveMessage`` returns it (``MessageId``, ``ReceiptHandle``,
        ``Body``, optional ``Attributes``, ``MessageAttributes``, ``MD5OfBody``).
    queue_arn: the source queue (``eventSourceARN``); region: its region (``awsRegion``).

    Returns
    -------
    dict
        ``messageId``, ``receiptHandle``, ``body``, ``attributes`` (with
        ``ApproximateReceiveCount``, ``"1"`` when the message has none), ``messageAttributes``
        (Lambda's lower-case spelling), ``md5OfBody``, ``eventSource``, ``eventSourceARN``,
        ``awsRegion``.

    Raises
    ------
    KeyError
        If ``message`` lacks ``MessageId``, ``ReceiptHandle`` or ``Body``.
    """
    attrs = message.get("Attributes", {})
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            "ApproximateReceiveCount": attrs.get("ApproximateReceiveCount", "1"),
            "SentTimestamp": attrs.get("SentTimestamp", "0"),
            "SenderId": attrs.get("SenderId", "local"),
            "ApproximateFirstReceiveTimestamp": attrs.get("ApproximateFirstReceiveTimestamp", "0"),
        },
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def sqs_event(messages: Sequence[Mapping[str, Any]], queue_arn: str, region: str = REGION) -> dict[str, Any]:
    """The Lambda event for a batch of messages from ``ReceiveMessage``: ``{"Records":
    [sqs_record(m), ...]}`` (:func:`sqs_record`)."""
    return {"Records": [sqs_record(m, queue_arn, region) for m in messages]}


# --------------------------------------------------------------------------- events/ files

#: The bucket and jobs queue of the embedded AWS under its default name (``mediajobs-local``).
SAMPLE_BUCKET: Final = "mediajobs-local-media"
SAMPLE_QUEUE_ARN: Final = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:mediajobs-local-jobs"
#: The size of ``tests/media/photos/orientation-landscape-1.jpg``, the photo the samples name.
SAMPLE_PHOTO_BYTES: Final = 347327


@dataclass(frozen=True)
class SampleRecord:
    """One record of a sample file: its message id, and the event's id and object.

    Attributes
    ----------
    message_id: the SQS message id (the receipt handle is ``AQEB-<message_id>``).
    event_id: the EventBridge event id.
    key: the object's real key; size_bytes: its size (not in an "Object Deleted" event).
    deletion_type: ``None`` for "Object Created", else the "Object Deleted" event's
        ``deletion-type``.
    version_id: the version the event names (``None``: none, as an unversioned bucket's).
    etag: the ETag the event carries ("Object Deleted" only).
    sequencer: the event's sequencer.
    """

    message_id: str
    event_id: str
    key: str
    size_bytes: int
    deletion_type: str | None = None
    version_id: str | None = None
    etag: str = DELETE_MARKER_ETAG
    sequencer: str = DEFAULT_SEQUENCER


#: The files under ``events/``, by name (their meaning: ``events/README.md``).
SAMPLE_EVENTS: Final[dict[str, tuple[SampleRecord, ...]]] = {
    "object-created.json": (
        SampleRecord(
            "0d4f5a9e-1111-4c1b-8d6e-000000000001",
            "5b1e0ae5-2c4a-4e4e-9a57-0c1d2e3f4a5b",
            "originals/events/photo.jpg",
            SAMPLE_PHOTO_BYTES,
        ),
    ),
    "object-created-encoded-key.json": (
        SampleRecord(
            "0d4f5a9e-1111-4c1b-8d6e-000000000005",
            "8e4b3d18-5f7d-4b7b-8d8a-3f4a5b6c7d8e",
            "originals/events/My Photo (1) café.jpg",
            SAMPLE_PHOTO_BYTES,
        ),
    ),
    "duplicate-in-batch.json": tuple(
        SampleRecord(
            f"0d4f5a9e-2222-4c1b-8d6e-00000000000{i}",
            "5b1e0ae5-2c4a-4e4e-9a57-0c1d2e3f4a5b",
            "originals/events/photo.jpg",
            SAMPLE_PHOTO_BYTES,
        )
        for i in (1, 2)
    ),
    "derivatives-key-ignored.json": (
        SampleRecord(
            "0d4f5a9e-3333-4c1b-8d6e-000000000001",
            "6c2f1bf6-3d5b-4f5f-8b68-1d2e3f4a5b6c",
            "derivatives/0123/thumb.webp",
            10342,
        ),
    ),
    "empty-object-permanent-failure.json": (
        SampleRecord(
            "0d4f5a9e-4444-4c1b-8d6e-000000000001",
            "7d3a2c07-4e6c-4a6a-9c79-2e3f4a5b6c7d",
            "originals/events/empty.jpg",
            0,
        ),
    ),
    # After object-created.json's photo: a greater sequencer, 16 digits against its 18.
    "object-deleted-marker.json": (
        SampleRecord(
            "0d4f5a9e-5555-4c1b-8d6e-000000000001",
            "2ee9cc15-d022-49ea-9fb8-1b1bac4850f9",
            "originals/events/photo.jpg",
            0,
            deletion_type=DELETE_MARKER_CREATED,
            version_id="1QW9g1Z99LUNbvaaYVpW9xDlOLU.qxgF",
            sequencer="674A3B2C1D0E2B00",
        ),
    ),
    "object-deleted-version.json": (
        SampleRecord(
            "0d4f5a9e-6666-4c1b-8d6e-000000000001",
            "ad1de317-e409-4ba2-9552-30113f8d88e3",
            "originals/events/photo.jpg",
            0,
            deletion_type=PERMANENTLY_DELETED,
            version_id="mtB0cV.jejK63XkRNceanNMC.qXPWLeK",
            etag="3858f62230ac3c915f300c664312c63f",
            sequencer="0000674A3B2C1D0E3C00",
        ),
    ),
}


def sample_event(name: str) -> dict[str, Any]:
    """The Lambda SQS event of the sample file ``events/<name>`` ("Object Created", or
    "Object Deleted" for a record with a ``deletion_type``): fixed ids, time, sequencer and
    request id, so the file can be regenerated byte for byte.

    Raises
    ------
    KeyError
        If ``name`` is not in :data:`SAMPLE_EVENTS`.
    """
    messages = []
    for record in SAMPLE_EVENTS[name]:
        fixed: dict[str, Any] = {
            "event_id": record.event_id,
            "time": "2026-11-29T10:00:00Z",
            "sequencer": record.sequencer,
            "request_id": "N4N7GDK58NMKJ12R",
            "source_ip": "203.0.113.10",
        }
        if record.deletion_type is None:
            event = object_created_event(
                SAMPLE_BUCKET, record.key, size=record.size_bytes, version_id=record.version_id, **fixed
            )
        else:
            event = object_deleted_event(
                SAMPLE_BUCKET,
                record.key,
                deletion_type=record.deletion_type,
                version_id=record.version_id,
                etag=record.etag,
                **fixed,
            )
        messages.append(
            {
                "MessageId": record.message_id,
                "ReceiptHandle": f"AQEB-{record.message_id}",
                "Body": json.dumps(event),
                "Attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1796032800000",
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": "1796032800001",
                },
            }
        )
    return sqs_event(messages, SAMPLE_QUEUE_ARN)


def sample_text(name: str) -> str:
    """:func:`sample_event` as the text of its file (two-space indent, final newline)."""
    return json.dumps(sample_event(name), indent=2, ensure_ascii=False) + "\n"


def write_samples(folder: Path) -> list[Path]:
    """Write every sample file into ``folder`` (``python -m mediajobs.local.events events``),
    the other functions' too (:mod:`mediajobs.local.function_events`); the paths written."""
    from mediajobs.local.function_events import write_function_samples

    written = write_function_samples(folder)
    for name in SAMPLE_EVENTS:
        path = folder / name
        path.write_text(sample_text(name), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    import sys

    for written_path in write_samples(Path(sys.argv[1] if len(sys.argv) > 1 else "events")):
        print(written_path)
