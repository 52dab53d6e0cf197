"""The dispatcher's role in template.yaml allows every AWS call the dispatcher and its
stream mapping make, and no more: the calls of real dispatches (delivered, refused) are
recorded at botocore and each is checked against ``DispatcherRole``'s statements."""

from __future__ import annotations

import fnmatch
import uuid
from collections.abc import Iterator
from typing import Any

import botocore.client
import pytest

from mediajobs.local.notifications import failures, local_dispatcher, new_webhook_secret, seen_events
from mediajobs.local.receiver import Answer, WebhookReceiver
from mediajobs.local.session import LocalSession
from mediajobs.local.template import load_template
from tests.conftest import REPO

TEMPLATE = load_template(REPO / "template.yaml")
STATEMENTS = []
for policy in TEMPLATE["Resources"]["DispatcherRole"]["Properties"]["Policies"]:
    for st in policy["PolicyDocument"]["Statement"]:
        STATEMENTS.append(st["Fn::If"][1] if "Fn::If" in st else st)
PHOTO = REPO / "tests" / "media" / "photos" / "canon-40d-small.jpg"

#: IAM action of each operation (the streams API's actions are dynamodb:...).
_ACTIONS = {"dynamodbstreams": "dynamodb", "events": "events", "sqs": "sqs", "secretsmanager": "secretsmanager"}


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


@pytest.fixture(scope="module")
def local_session() -> Iterator[LocalSession]:
    """A stack of its own: moto's state is the process's, and the shared session's outbox
    holds other modules' notifications, which this module's receiver would be sent."""
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-iam") as session:
        yield session


def test_every_call_of_the_dispatcher_is_allowed_by_its_role(local_session, monkeypatch):
    stack = local_session.stack
    secret = new_webhook_secret()
    receiver = WebhookReceiver(secret, answers=[Answer(200), Answer(400)]).start()
    calls: list[tuple[str, str]] = []
    recording = [False]
    real = botocore.client.BaseClient._make_api_call

    def record(client, operation, params):
        service = client.meta.service_model.service_name
        if recording[0] and service != "s3":
            if service in ("dynamodb", "dynamodbstreams"):
                where = params.get("StreamArn") or f"table/{params.get('TableName', '?')}"
                if "ShardIterator" in params:
                    where = "stream"
                calls.append((f"dynamodb:{operation}", where))
            elif service == "events":
                calls.append(("events:PutEvents", ",".join(e["EventBusName"] for e in params["Entries"])))
            elif service == "sqs":
                calls.append((f"sqs:{operation}", params.get("QueueUrl", "?")))
            elif service == "secretsmanager":
                calls.append((f"secretsmanager:{operation}", params.get("SecretId", "?")))
            else:
                calls.append((f"{service}:{operation}", "?"))
        return real(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", record)
    try:
        previous = local_dispatcher(stack)
        previous.mapping.drain()  # what earlier tests left
        for n in range(2):
            local_session.upload(
                PHOTO if n == 0 else REPO / "tests/media/photos/camera-gps-nikon.jpg",
                f"originals/iam/{uuid.uuid4().hex}.jpg",
            )
        local_session.run()
        recording[0] = True
        dispatcher = local_dispatcher(stack, webhook_url=receiver.url, webhook_secret=secret)
        secret_arn = next(w for a, w in calls if a == "secretsmanager:GetSecretValue")
        dispatcher.mapping.drain()
    finally:
        recording[0] = False
        receiver.stop()
    assert len(failures(stack)) == 1 and seen_events(stack)  # one refused, both on the bus

    stream_arn = stack.outbox_stream_arn()
    resources = {
        "OutboxTable.StreamArn": stream_arn,
        "OutboxTable.Arn": f"table/{stack.outbox_table_name}",
        "NotificationBus.Arn": stack.notification_bus_name,
        "NotificationFailuresQueue.Arn": stack.notification_failures_queue_url,
        "WebhookSecret": secret_arn,
        "DispatcherLogGroup.Arn": "log-group",
    }

    def allowed(action: str, where: str) -> bool:
        for st in STATEMENTS:
            if action not in _as_list(st["Action"]):
                continue
            for resource in _as_list(st["Resource"]):
                name = ".".join(resource["Fn::GetAtt"]) if "Fn::GetAtt" in resource else resource.get("Ref")
                target = resources[name]
                if where == "stream" and name == "OutboxTable.StreamArn":
                    return True  # GetRecords names a shard iterator of that stream
                if fnmatch.fnmatchcase(where, target):
                    return True
        return False

    assert {a for a, _ in calls} >= {
        "dynamodb:DescribeStream",
        "dynamodb:GetShardIterator",
        "dynamodb:GetRecords",
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        "events:PutEvents",
        "sqs:SendMessage",
        "secretsmanager:GetSecretValue",
    }
    # The local harness's own calls: the template makes the secret, the mapping knows its stream.
    harness = {"secretsmanager:CreateSecret", "dynamodb:DescribeTable"}
    denied = sorted({(a, w) for a, w in calls if a not in harness and not allowed(a, w)})
    assert denied == [], denied
