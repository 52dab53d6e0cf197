"""Contract tests of the notifications in template.yaml: the outbox table and its stream,
the dispatcher's event source mapping (partial batch failures, bounded retries, bisect,
the on-failure queue, INSERT only), its role (its stream, its table, its bus, its secret,
its queue, its logs: nothing of the worker's), the worker's one outbox action, the bus,
the webhook secret and parameter, the alarms and the dashboard."""

from __future__ import annotations

import json
from typing import Any

from mediajobs.local.template import load_template
from mediajobs.settings import _ENV_NAMES, Settings
from tests.conftest import REPO

TEMPLATE = load_template(REPO / "template.yaml")
RESOURCES = TEMPLATE["Resources"]


def _statements(role: str) -> dict[str, dict[str, Any]]:
    found = {}
    for policy in RESOURCES[role]["Properties"]["Policies"]:
        for st in policy["PolicyDocument"]["Statement"]:
            if isinstance(st, dict) and "Fn::If" in st:
                st = st["Fn::If"][1]
            found[st["Sid"]] = st
    return found


def _actions(st: dict[str, Any]) -> set[str]:
    a = st["Action"]
    return set(a if isinstance(a, list) else [a])


def test_the_outbox_streams_new_images_and_expires_delivered_items():
    props = RESOURCES["OutboxTable"]["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert props["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at_s", "Enabled": True}


def test_the_dispatcher_mapping_reports_partial_failures_retries_a_bounded_number_of_times_and_keeps_the_rest():
    (event,) = RESOURCES["DispatcherFunction"]["Properties"]["Events"].values()
    assert event["Type"] == "DynamoDB"
    props = event["Properties"]
    assert props["Stream"] == {"Fn::GetAtt": ["OutboxTable", "StreamArn"]}
    assert props["StartingPosition"] == "TRIM_HORIZON"
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BisectBatchOnFunctionError"] is True
    assert 0 < props["MaximumRetryAttempts"] <= 10
    assert props["DestinationConfig"] == {
        "OnFailure": {"Type": "SQS", "Destination": {"Fn::GetAtt": ["NotificationFailuresQueue", "Arn"]}}
    }
    (pattern,) = props["FilterCriteria"]["Filters"]
    assert json.loads(pattern["Pattern"]) == {"eventName": ["INSERT"]}


def test_the_local_stream_mapping_runs_with_the_templates_settings():
    from mediajobs.local.streams import StreamMappingSettings

    (event,) = RESOURCES["DispatcherFunction"]["Properties"]["Events"].values()
    defaults = StreamMappingSettings()  # what StreamEventSourceMapping runs with unless told
    props = event["Properties"]
    assert defaults.batch_size == props["BatchSize"]
    assert defaults.max_retries == props["MaximumRetryAttempts"]
    assert defaults.bisect is props["BisectBatchOnFunctionError"]
    assert defaults.timeout_s == RESOURCES["DispatcherFunction"]["Properties"]["Timeout"]


def test_the_dispatcher_role_holds_its_own_resources_only():
    statements = _statements("DispatcherRole")
    assert {sid: (_actions(st), st["Resource"]) for sid, st in statements.items()} == {
        "OutboxStream": (
            {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"},
            {"Fn::GetAtt": ["OutboxTable", "StreamArn"]},
        ),
        "Outbox": ({"dynamodb:GetItem", "dynamodb:UpdateItem"}, {"Fn::GetAtt": ["OutboxTable", "Arn"]}),
        "Bus": ({"events:PutEvents"}, {"Fn::GetAtt": ["NotificationBus", "Arn"]}),
        "Failures": ({"sqs:SendMessage"}, {"Fn::GetAtt": ["NotificationFailuresQueue", "Arn"]}),
        "Logs": ({"logs:CreateLogStream", "logs:PutLogEvents"}, {"Fn::GetAtt": ["DispatcherLogGroup", "Arn"]}),
        "WebhookSecret": ({"secretsmanager:GetSecretValue"}, {"Ref": "WebhookSecret"}),
        # With KmsKeyArn only: failures sent, the secret and the environment read under that key.
        "Kms": ({"kms:Decrypt", "kms:GenerateDataKey"}, {"Ref": "KmsKeyArn"}),
    }
    assert "ManagedPolicyArns" not in RESOURCES["DispatcherRole"]["Properties"]


def test_the_worker_may_only_put_into_the_outbox():
    worker = _statements("WorkerRole")
    on_outbox = {sid: _actions(st) for sid, st in worker.items() if "OutboxTable" in json.dumps(st["Resource"])}
    assert on_outbox == {"Outbox": {"dynamodb:PutItem"}}
    assert not any(
        name in json.dumps(st["Resource"])
        for st in worker.values()
        for name in ("NotificationBus", "WebhookSecret", "NotificationFailuresQueue")
    )


def test_the_bus_the_webhook_and_its_secret():
    params = TEMPLATE["Parameters"]
    assert params["EnableEventBridgeNotifications"]["Default"] == "true"
    assert params["WebhookUrl"]["Default"] == ""
    assert RESOURCES["NotificationBus"]["Type"] == "AWS::Events::EventBus"
    secret = RESOURCES["WebhookSecret"]
    assert (secret["Type"], secret["Condition"]) == ("AWS::SecretsManager::Secret", "HasWebhook")
    generated = secret["Properties"]["GenerateSecretString"]
    # Base64's alphabet only, a multiple of 4 characters: the signer decodes it as base64.
    assert generated["ExcludePunctuation"] is True and generated["PasswordLength"] % 4 == 0
    env = RESOURCES["DispatcherFunction"]["Properties"]["Environment"]["Variables"]
    assert env["WEBHOOK_URL"] == {"Ref": "WebhookUrl"}
    assert env["WEBHOOK_SECRET_ARN"] == {"Fn::If": ["HasWebhook", {"Ref": "WebhookSecret"}, ""]}
    assert env["NOTIFICATION_FAILURES_QUEUE_URL"] == {"Ref": "NotificationFailuresQueue"}
    assert set(env) <= set(_ENV_NAMES.values())
    assert int(env["WEBHOOK_RETRY_AFTER_CAP_SECONDS"]) == Settings.webhook_retry_after_cap_s
    # A Retry-After at the cap and a POST at its timeout fit in one invocation.
    timeout_s = RESOURCES["DispatcherFunction"]["Properties"]["Timeout"]
    assert int(env["WEBHOOK_RETRY_AFTER_CAP_SECONDS"]) + 2 * int(env["WEBHOOK_TIMEOUT_SECONDS"]) < timeout_s


def test_the_dispatchers_errors_and_the_failures_queue_are_alarmed_and_on_the_dashboard():
    errors = RESOURCES["DispatcherErrorsAlarm"]["Properties"]
    assert (errors["Namespace"], errors["MetricName"]) == ("AWS/Lambda", "Errors")
    assert errors["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "DispatcherFunction"}}]
    depth = RESOURCES["NotificationFailuresAlarm"]["Properties"]
    assert (depth["Namespace"], depth["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert depth["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": ["NotificationFailuresQueue", "QueueName"]}}
    ]
    for alarm in (errors, depth):
        assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}] and alarm["Threshold"] == 0
    body = RESOURCES["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    assert "${DispatcherFunction}" in body and "${NotificationFailuresQueue.QueueName}" in body
