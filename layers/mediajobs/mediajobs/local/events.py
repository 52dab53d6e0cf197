"""S3 "Object Created" events as EventBridge puts them in SQS, for the local tools and tests.

One builder, so every event made outside the embedded AWS's own notifications spells the
object key as S3 does: URL-encoded (:func:`mediajobs.domain.keys.encode_event_key`).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from mediajobs.domain.keys import encode_event_key

#: moto's default account, the embedded AWS's.
ACCOUNT_ID = "123456789012"


def object_created_event(
    bucket: str,
    key: str,
    *,
    size: int,
    etag: str = "",
    version_id: str | None = None,
    region: str = "us-east-1",
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

    Raises
    ------
    UnicodeEncodeError
        If ``key`` is not valid Unicode text (no S3 key is).
    """
    obj: dict[str, Any] = {
        "key": encode_event_key(key),
        "size": size,
        "etag": etag.strip('"'),
        "sequencer": uuid.uuid4().hex[:18].upper(),
    }
    if version_id:
        obj["version-id"] = version_id
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": ACCOUNT_ID,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": obj,
            "request-id": uuid.uuid4().hex[:16].upper(),
            "requester": ACCOUNT_ID,
            "reason": "PutObject",
        },
    }


def object_created_body(bucket: str, key: str, *, size: int, etag: str = "", version_id: str | None = None) -> str:
    """:func:`object_created_event` as the JSON text of an SQS message body (what the
    rule's target puts in the jobs queue)."""
    return json.dumps(object_created_event(bucket, key, size=size, etag=etag, version_id=version_id))
