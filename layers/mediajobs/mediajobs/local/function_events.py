"""The sample events of the functions other than the worker's SQS batches, under ``events/``:
what each function's event source delivers, written by :func:`write_function_samples`
(``python -m mediajobs.local.events events`` writes them with the SQS samples; a test
regenerates each file and compares).

- ``status-request.json``: ``StatusFunction``, ``GET /assets?key=originals/events/photo.jpg``
  as its function URL (``AuthType: AWS_IAM``) delivers it: payload format 2.0, the caller
  in ``requestContext.authorizer.iam`` (Lambda developer guide, "Invoking Lambda function
  URLs", "Request payload format"); the key quoted as an SDK signing with SigV4 sends it.
- ``outbox-insert.json``: ``DispatcherFunction``, one ``INSERT`` record of the outbox
  table's stream (``NEW_IMAGE``) as the DynamoDB event source mapping delivers it
  (Lambda developer guide, "Using AWS Lambda with Amazon DynamoDB"): an "Asset Ready"
  notification of ``object-created.json``'s photo, its id
  :func:`~mediajobs.domain.notifications.notification_id` of the version as that event
  names it (no version id). The dispatcher reads the item by that id: an id the outbox does
  not hold is answered as done (nothing to deliver); the id of an item a render put there
  (a versioned bucket's, named by its version id) is delivered.
- ``collect-schedule.json``: ``WorkerFunction``, what EventBridge Scheduler sends for the
  template's ``Collect`` schedule: its ``Input``, as it is
  (:data:`mediajobs.entrypoints.collector.COLLECT_REQUEST`).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from mediajobs.domain.assets import AssetVersion, sequencer_order
from mediajobs.domain.notifications import NotificationType, notification_id
from mediajobs.local.events import ACCOUNT_ID, REGION, SAMPLE_BUCKET, sample_event

#: The original the samples ask about and tell of: ``object-created.json``'s photo.
SAMPLE_KEY: Final = "originals/events/photo.jpg"
#: The recipes an image original's asset has (``web-image@1``, ``image-placeholder@1``).
SAMPLE_RECIPES: Final = ("image-placeholder@1", "web-image@1")
#: The function URL's host in the samples (``<url-id>.lambda-url.<region>.on.aws``).
_URL_ID: Final = "abcdefghij"
#: The time of the samples (what ``object-created.json`` says, a minute later).
_EPOCH_MS: Final = 1796032860000


def status_request(key: str = SAMPLE_KEY) -> dict[str, Any]:
    """The function URL event of ``GET /assets?key=<key>``, the key quoted as an SDK
    signing with SigV4 sends it (:func:`function_url_event`)."""
    return function_url_event("key=" + urllib.parse.quote(key, safe=""))


def function_url_event(
    raw_query_string: str,
    *,
    method: str = "GET",
    path: str = "/assets",
    query: dict[str, str] | None = None,
    body: str | None = None,
    caller_arn: str | None = None,
) -> dict[str, Any]:
    """A function URL request event (payload format 2.0) as Lambda sends it for
    ``AuthType: AWS_IAM``, the caller in ``requestContext.authorizer.iam``: the shape of
    AWS's documented sample (Lambda developer guide, "Request payload format").

    Parameters
    ----------
    raw_query_string: the query as sent (``key=originals%2Fa.jpg``).
    method, path: the request's.
    query: ``queryStringParameters`` (default: parsed from ``raw_query_string``, repeated
        values joined with commas as Lambda joins them; absent when empty).
    body: the request's body (a ``POST``'s JSON), as text.
    caller_arn: the signing principal's ARN (default: the sample user ``app``).
    """
    if query is None:
        query = {}
        for k, v in urllib.parse.parse_qsl(raw_query_string, keep_blank_values=True):
            query[k] = f"{query[k]},{v}" if k in query else v
    host = f"{_URL_ID}.lambda-url.{REGION}.on.aws"
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": raw_query_string,
        "headers": {
            "host": host,
            "x-amz-date": "20261129T100100Z",
            "x-amz-content-sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "authorization": "AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/20261129/us-east-1/lambda/aws4_request, ...",
            "x-forwarded-proto": "https",
            "user-agent": "app/1.0",
        },
        **({"queryStringParameters": query} if query else {}),
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": _URL_ID,
            "authorizer": {
                "iam": {
                    "accessKey": "AKIAEXAMPLE",
                    "accountId": ACCOUNT_ID,
                    "callerId": "AIDAEXAMPLE",
                    "cognitoIdentity": None,
                    "principalOrgId": None,
                    "userArn": caller_arn or f"arn:aws:iam::{ACCOUNT_ID}:user/app",
                    "userId": "AIDAEXAMPLE",
                }
            },
            "domainName": host,
            "domainPrefix": _URL_ID,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.7",
                "userAgent": "app/1.0",
            },
            "requestId": "c8a3f2e1-0000-4000-8000-000000000001",
            "routeKey": "$default",
            "stage": "$default",
            "time": "29/Nov/2026:10:01:00 +0000",
            "timeEpoch": _EPOCH_MS,
        },
        **({"body": body} if body is not None else {}),
        "isBase64Encoded": False,
    }


def sample_notification_id() -> str:
    """The id of an "Asset Ready" notification of ``object-created.json``'s photo, its
    version as that event names it (version id if any, ETag, size, sequencer)."""
    record = sample_event("object-created.json")["Records"][0]
    obj = json.loads(record["body"])["detail"]["object"]
    version = AssetVersion(obj.get("version-id"), obj["etag"], obj["size"], sequencer_order(obj["sequencer"]))
    return notification_id(SAMPLE_BUCKET, SAMPLE_KEY, version, NotificationType.READY, SAMPLE_RECIPES)


def outbox_insert(notification: str | None = None) -> dict[str, Any]:
    """The DynamoDB stream event of one ``INSERT`` of the outbox item ``notification``
    (default :func:`sample_notification_id`), ``NEW_IMAGE`` as the template's stream keeps."""
    item_id = notification or sample_notification_id()
    table = f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/mediajobs-local-outbox"
    return {
        "Records": [
            {
                "eventID": "c4ca4238a0b923820dcc509a6f75849b",
                "eventName": "INSERT",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": REGION,
                "dynamodb": {
                    "ApproximateCreationDateTime": _EPOCH_MS // 1000,
                    "Keys": {"id": {"S": item_id}},
                    "NewImage": {
                        "id": {"S": item_id},
                        "type": {"S": str(NotificationType.READY)},
                        "bucket": {"S": SAMPLE_BUCKET},
                        "key": {"S": SAMPLE_KEY},
                        "created_at_s": {"N": str(_EPOCH_MS // 1000)},
                        "deliveries": {"M": {}},
                    },
                    "SequenceNumber": "111100000000000000000001",
                    "SizeBytes": 220,
                    "StreamViewType": "NEW_IMAGE",
                },
                "eventSourceARN": f"{table}/stream/2026-11-29T10:00:00.000",
            }
        ]
    }


def collect_schedule() -> dict[str, Any]:
    """What EventBridge Scheduler sends the worker function for its ``Collect`` schedule:
    the schedule's ``Input`` (``{"mediajobs": "collect"}``), nothing around it."""
    from mediajobs.entrypoints.collector import COLLECT_REQUEST

    return dict(COLLECT_REQUEST)


#: Each sample file: the template's function it is for, and what makes its event.
FUNCTION_SAMPLES: Final[dict[str, tuple[str, Callable[[], dict[str, Any]]]]] = {
    "status-request.json": ("StatusFunction", status_request),
    "outbox-insert.json": ("DispatcherFunction", outbox_insert),
    "collect-schedule.json": ("WorkerFunction", collect_schedule),
}


def function_sample_text(name: str) -> str:
    """The text of the sample file ``events/<name>`` (two-space indent, final newline).

    Raises
    ------
    KeyError
        If ``name`` is not in :data:`FUNCTION_SAMPLES`.
    """
    return json.dumps(FUNCTION_SAMPLES[name][1](), indent=2, ensure_ascii=False) + "\n"


def write_function_samples(folder: Path) -> list[Path]:
    """Write every file of :data:`FUNCTION_SAMPLES` into ``folder``; the paths written."""
    written = []
    for name in FUNCTION_SAMPLES:
        path = folder / name
        path.write_text(function_sample_text(name), encoding="utf-8")
        written.append(path)
    return written
