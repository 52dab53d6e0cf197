"""The one event factory of the local tools and tests: S3 "Object Created" events as
EventBridge puts them in SQS, and the Lambda SQS event a batch of messages becomes.

Used by the local event source mapping (:mod:`mediajobs.local.runner` turns received
messages into records here), ``simulate`` (duplicated events), the tests, and the sample
files under ``events/`` (:data:`SAMPLE_EVENTS`, written by :func:`write_samples`; a test
regenerates each file and compares).

Every event made here spells the object key as S3 does: URL-encoded
(:func:`mediajobs.domain.keys.encode_event_key`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from mediajobs.domain.keys import encode_event_key

#: moto's default account, the embedded AWS's.
ACCOUNT_ID: Final = "123456789012"
#: The embedded AWS's region.
REGION: Final = "us-east-1"


def object_created_event(
    bucket: str,
    key: str,
    *,
    size: int,
    etag: str = "",
    version_id: str | None = None,
    region: str = REGION,
    event_id: str | None = None,
    time: str | None = None,
    sequencer: str | None = None,
    request_id: str | None = None,
    source_ip: str | None = None,
) -> dict[str, Any]:
    """The EventBridge event S3 sends when ``key`` is created in ``bucket`` (S3 user guide,
    "EventBridge event message structure", "Object created").

    Parameters
    ----------
    bucket: the bucket's name.
    key: the object's real key; the event carries it URL-encoded, as S3's do.
    size: the object's size, bytes.
    etag: its ETag (quotes are removed), ``""`` when unknown.
    version_id: its version id, ``None`` for an unversioned bucket.
    region: the bucket's region.
    event_id, time, sequencer, request_id: fixed values (the sample files); by default a
        fresh UUID, now (``YYYY-MM-DDTHH:MM:SSZ``), and random hex of S3's lengths.
    source_ip: the requester's address (``source-ip-address``), left out when ``None``.

    Raises
    ------
    UnicodeEncodeError
        If ``key`` is not valid Unicode text (no S3 key is).
    """
    obj: dict[str, Any] = {
        "key": encode_event_key(key),
        "size": size,
        "etag": etag.strip('"'),
        "sequencer": sequencer or uuid.uuid4().hex[:18].upper(),
    }
    if version_id:
        obj["version-id"] = version_id
    detail: dict[str, Any] = {
        "version": "0",
        "bucket": {"name": bucket},
        "object": obj,
        "request-id": request_id or uuid.uuid4().hex[:16].upper(),
        "requester": ACCOUNT_ID,
    }
    if source_ip is not None:
        detail["source-ip-address"] = source_ip
    detail["reason"] = "PutObject"
    return {
        "version": "0",
        "id": event_id or str(uuid.uuid4()),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": ACCOUNT_ID,
        "time": time or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": detail,
    }


def object_created_body(bucket: str, key: str, *, size: int, etag: str = "", version_id: str | None = None) -> str:
    """:func:`object_created_event` as the JSON text of an SQS message body (what the
    rule's target puts in the jobs queue)."""
    return json.dumps(object_created_event(bucket, key, size=size, etag=etag, version_id=version_id))


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
    key: the object's real key; size_bytes: its size.
    """

    message_id: str
    event_id: str
    key: str
    size_bytes: int


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
}


def sample_event(name: str) -> dict[str, Any]:
    """The Lambda SQS event of the sample file ``events/<name>``: fixed ids, time, sequencer
    and request id, so the file can be regenerated byte for byte.

    Raises
    ------
    KeyError
        If ``name`` is not in :data:`SAMPLE_EVENTS`.
    """
    messages = []
    for record in SAMPLE_EVENTS[name]:
        event = object_created_event(
            SAMPLE_BUCKET,
            record.key,
            size=record.size_bytes,
            event_id=record.event_id,
            time="2026-11-29T10:00:00Z",
            sequencer="00674A3B2C1D0E0F00",
            request_id="N4N7GDK58NMKJ12R",
            source_ip="203.0.113.10",
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
    """Write every sample file into ``folder`` (``python -m mediajobs.local.events events``);
    returns the paths written."""
    written = []
    for name in SAMPLE_EVENTS:
        path = folder / name
        path.write_text(sample_text(name), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    import sys

    for written_path in write_samples(Path(sys.argv[1] if len(sys.argv) > 1 else "events")):
        print(written_path)
