"""The embedded AWS creates what template.yaml declares, and the code agrees with it."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import tomllib
import uuid

import pytest
from PIL import Image

from mediajobs.adapters.ledger import JobModel
from mediajobs.adapters.sources import SourceModel
from mediajobs.bootstrap import (
    active_recipes,
    build_service,
    default_adapters,
    function_metrics,
    powertools_logger,
    steps,
)
from mediajobs.entrypoints import worker
from mediajobs.local.events import object_created_body
from mediajobs.local.runner import LocalLambdaContext, sqs_event
from mediajobs.local.template import load_template
from mediajobs.settings import _ENV_NAMES, Settings
from tests.conftest import REPO
from tests.fakes import planned_key

TEMPLATE = load_template(REPO / "template.yaml")
RESOURCES = TEMPLATE["Resources"]
REGION = "us-east-1"


def model_key_schema(model=JobModel) -> list[dict[str, str]]:
    return [
        {"AttributeName": attr.attr_name, "KeyType": "HASH" if attr.is_hash_key else "RANGE"}
        for attr in model.get_attributes().values()
        if attr.is_hash_key or attr.is_range_key
    ]


def test_template_declares_the_pieces():
    types = {name: r["Type"] for name, r in RESOURCES.items()}
    assert types["MediaBucket"] == "AWS::S3::Bucket"
    assert types["OriginalEventsRule"] == "AWS::Events::Rule"
    assert types["JobsQueue"] == types["DeadLetterQueue"] == types["EventsDeadLetterQueue"] == "AWS::SQS::Queue"
    assert types["JobsTable"] == "AWS::DynamoDB::Table"
    assert types["WorkerFunction"] == "AWS::Serverless::Function"


def test_table_keys_equal_the_model(local_session):
    declared = RESOURCES["JobsTable"]["Properties"]["KeySchema"]
    assert declared == model_key_schema() == [{"AttributeName": "job_key", "KeyType": "HASH"}]
    table = local_session._aws.client("dynamodb").describe_table(TableName=local_session.stack.table_name)["Table"]
    assert table["KeySchema"] == declared
    assert table["AttributeDefinitions"] == RESOURCES["JobsTable"]["Properties"]["AttributeDefinitions"]


def test_source_index_keys_and_ttl_equal_the_model(local_session):
    props = RESOURCES["SourcesTable"]["Properties"]
    assert props["KeySchema"] == model_key_schema(SourceModel) == [{"AttributeName": "source_id", "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at_s", "Enabled": True}
    assert "expires_at_s" in SourceModel.get_attributes()
    table = local_session._aws.client("dynamodb").describe_table(TableName=local_session.stack.sources_table_name)
    assert table["Table"]["KeySchema"] == props["KeySchema"]


def test_lease_attempts_and_receive_count_agree():
    """The ledger's attempts cap ends a failing job before SQS dead-letters its message,
    and a lease renewed every third of itself fits in the function's timeout."""
    env = RESOURCES["WorkerFunction"]["Properties"]["Environment"]["Variables"]
    max_receive = RESOURCES["JobsQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"]
    assert int(env["MAX_RECEIVE_COUNT"]) == max_receive == 5
    assert int(env["MAX_ATTEMPTS"]) < max_receive
    assert int(env["LEASE_SECONDS"]) <= RESOURCES["WorkerFunction"]["Properties"]["Timeout"]


def test_rule_has_the_templates_event_pattern(local_session):
    rule = local_session._aws.client("events").describe_rule(Name=local_session.stack.rule_name)
    expected = json.loads(json.dumps(RESOURCES["OriginalEventsRule"]["Properties"]["EventPattern"]))
    expected["detail"]["bucket"]["name"] = [local_session.stack.bucket]
    assert json.loads(rule["EventPattern"]) == expected
    assert expected["detail"]["object"]["key"] == [{"prefix": "originals/"}]
    targets = local_session._aws.client("events").list_targets_by_rule(Rule=local_session.stack.rule_name)["Targets"]
    assert [t["Arn"] for t in targets] == [local_session.stack.queue_arn]
    [declared] = RESOURCES["OriginalEventsRule"]["Properties"]["Targets"]
    assert targets[0]["RetryPolicy"] == declared["RetryPolicy"]
    assert targets[0]["DeadLetterConfig"] == {"Arn": local_session.stack.events_dlq_arn}


def test_queue_has_the_templates_redrive_policy_and_visibility(local_session):
    attrs = local_session.sqs.get_queue_attributes(QueueUrl=local_session.stack.queue_url, AttributeNames=["All"])[
        "Attributes"
    ]
    declared = RESOURCES["JobsQueue"]["Properties"]
    assert json.loads(attrs["RedrivePolicy"]) == {
        "deadLetterTargetArn": local_session.stack.dlq_arn,
        "maxReceiveCount": declared["RedrivePolicy"]["maxReceiveCount"],
    }
    assert int(attrs["VisibilityTimeout"]) == declared["VisibilityTimeout"]
    assert int(attrs["MessageRetentionPeriod"]) == declared["MessageRetentionPeriod"]


def test_only_originals_reach_the_queue(local_session):
    local_session.run()
    s3, bucket = local_session.s3, local_session.stack.bucket
    s3.put_object(Bucket=bucket, Key="derivatives/contract/x.webp", Body=b"x")
    assert local_session.esm.in_flight() == 0
    s3.put_object(Bucket=bucket, Key="originals/contract/x.jpg", Body=b"x")
    assert local_session.esm.in_flight() == 1
    local_session.run()


def test_worker_environment_names_are_settings(local_session):
    env = local_session.stack.function_env
    settings_vars = set(_ENV_NAMES.values())
    ours = {k for k in env if not k.startswith("POWERTOOLS_")}
    assert ours <= settings_vars, ours - settings_vars
    assert env["JOBS_TABLE_NAME"] == local_session.stack.table_name
    handler = RESOURCES["WorkerFunction"]["Properties"]["Handler"]
    assert handler == "app.lambda_handler" and (REPO / "functions" / "worker" / "app.py").is_file()


def test_the_worker_has_the_ffmpeg_layer_and_its_timeout_in_the_environment():
    worker = RESOURCES["WorkerFunction"]["Properties"]
    env = worker["Environment"]["Variables"]
    assert int(env["WORKER_TIMEOUT_SECONDS"]) == worker["Timeout"]
    assert float(env["VIDEO_SPEED_FACTOR"]) > 0 and int(env["MAX_VIDEO_SECONDS"]) > 0
    layer = RESOURCES["FfmpegLayer"]
    assert layer["Properties"]["ContentUri"] == "layers/ffmpeg"
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert (REPO / "layers" / "ffmpeg" / "Makefile").read_text().count("build-FfmpegLayer:") == 1
    assert {"Ref": "FfmpegLayer"} in worker["Layers"]


def test_the_mediajobs_layer_is_built_by_its_makefile_for_the_functions_runtime():
    # layers/mediajobs/Makefile: the lock, mediajobs without local/, CPython 3.12 bytecode
    # (tests/functional/test_layer_build.py builds it and checks what it holds).
    layer = RESOURCES["MediaJobsLayer"]
    assert layer["Properties"]["ContentUri"] == "layers/mediajobs"
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert layer["Properties"]["CompatibleRuntimes"] == [TEMPLATE["Globals"]["Function"]["Runtime"]] == ["python3.12"]
    makefile = (REPO / "layers" / "mediajobs" / "Makefile").read_text()
    assert makefile.count("build-MediaJobsLayer:") == 1
    assert "--python-version 3.12" in makefile and "--invalidation-mode unchecked-hash" in makefile


def test_the_bucket_is_encrypted_private_tls_only_and_drops_abandoned_uploads():
    bucket = RESOURCES["MediaBucket"]["Properties"]
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True,
    }  # fmt: skip
    (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    # SSE-S3: ETags are MD5s, which identify a stored output without reading it back.
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    rules = {rule["Id"]: rule for rule in bucket["LifecycleConfiguration"]["Rules"]}
    lifecycle = rules["abort-incomplete-multipart-uploads"]
    assert lifecycle["Status"] == "Enabled" and lifecycle["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 7
    policy = RESOURCES["MediaBucketPolicy"]["Properties"]
    assert policy["Bucket"] == {"Ref": "MediaBucket"}
    # The other statement, CloudFront's read of derivatives/: test_template_serving.py.
    (deny,) = [st for st in policy["PolicyDocument"]["Statement"] if st.get("Effect") == "Deny"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "s3:*")
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_the_embedded_aws_creates_the_rules_dead_letter_queue_as_declared(local_session):
    attrs = local_session.sqs.get_queue_attributes(QueueUrl=local_session.stack.events_dlq_url, AttributeNames=["All"])[
        "Attributes"
    ]
    assert attrs["QueueArn"] == local_session.stack.events_dlq_arn != local_session.stack.dlq_arn
    declared = RESOURCES["EventsDeadLetterQueue"]["Properties"]
    assert int(attrs["MessageRetentionPeriod"]) == declared["MessageRetentionPeriod"]
    assert "RedrivePolicy" not in attrs


def test_every_queue_is_encrypted_and_keeps_messages_14_days():
    queues = [name for name, r in RESOURCES.items() if r["Type"] == "AWS::SQS::Queue"]
    assert set(queues) >= {"JobsQueue", "DeadLetterQueue", "EventsDeadLetterQueue", "NotificationFailuresQueue"}
    for name in queues:
        props = RESOURCES[name]["Properties"]
        # SSE-SQS (which EventBridge sends to without a key policy), or the customer-managed key.
        no_value = {"Ref": "AWS::NoValue"}
        assert props["SqsManagedSseEnabled"] == {"Fn::If": ["HasKmsKey", no_value, True]}, name
        assert props["KmsMasterKeyId"] == {"Fn::If": ["HasKmsKey", {"Ref": "KmsKeyArn"}, no_value]}, name
        assert props["MessageRetentionPeriod"] == 14 * 24 * 3600, name


def test_tables_are_on_demand_with_point_in_time_recovery():
    for name in ("JobsTable", "SourcesTable"):
        props = RESOURCES[name]["Properties"]
        assert props["BillingMode"] == "PAY_PER_REQUEST", name
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, name


def _alarm(metric: str, of: str | None = None) -> dict:
    """The alarm on ``metric`` (of the resource ``of``, when several alarms watch it)."""
    (alarm,) = [
        r["Properties"]
        for r in RESOURCES.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and r["Properties"]["MetricName"] == metric
        and (of is None or of in json.dumps(r["Properties"]["Dimensions"]))
    ]
    return alarm


def test_alarms_watch_the_dead_letters_the_oldest_message_errors_and_throttles():
    dlq = _alarm("ApproximateNumberOfMessagesVisible", of='"DeadLetterQueue"')
    assert dlq["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}}]
    assert (dlq["Threshold"], dlq["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    age = _alarm("ApproximateAgeOfOldestMessage")
    assert age["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["JobsQueue", "QueueName"]}}]
    assert age["Threshold"] == {"Ref": "OldestMessageAgeAlarmSeconds"}
    assert age["ComparisonOperator"] == "GreaterThanThreshold"
    for metric in ("Errors", "Throttles"):
        alarm = _alarm(metric, of='"WorkerFunction"')  # the dispatcher's own: test_template_notifications
        assert alarm["Namespace"] == "AWS/Lambda"
        assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "WorkerFunction"}}]
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    for metric in ("ApproximateAgeOfOldestMessage", "Errors", "Throttles"):
        assert _alarm(metric, of='"WorkerFunction"' if metric != "ApproximateAgeOfOldestMessage" else None)[
            "AlarmActions"
        ] == [{"Ref": "AlarmTopic"}], metric
    assert dlq["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_the_rule_retries_for_a_day_then_dead_letters_what_it_cannot_deliver():
    [target] = RESOURCES["OriginalEventsRule"]["Properties"]["Targets"]
    # EventBridge's limits (EventBridge API reference, RetryPolicy): 0-185 tries, 60-86,400 s.
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}}
    # The rule's dead-letter queue is its own: nothing redrives into it or out of it.
    assert "RedrivePolicy" not in RESOURCES["EventsDeadLetterQueue"]["Properties"]


def test_only_the_rule_may_send_to_its_dead_letter_queue():
    policy = RESOURCES["EventsDeadLetterQueuePolicy"]["Properties"]
    assert policy["Queues"] == [{"Ref": "EventsDeadLetterQueue"}]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert (statement["Effect"], statement["Principal"], statement["Action"]) == (
        "Allow",
        {"Service": "events.amazonaws.com"},
        "sqs:SendMessage",
    )
    assert statement["Resource"] == {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["OriginalEventsRule", "Arn"]}}}


def test_alarms_watch_events_that_did_not_reach_the_queue():
    dead = _alarm("ApproximateNumberOfMessagesVisible", of='"EventsDeadLetterQueue"')
    assert dead["Namespace"] == "AWS/SQS"
    assert dead["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": ["EventsDeadLetterQueue", "QueueName"]}}
    ]
    lost = _alarm("InvocationsFailedToBeSentToDlq")
    assert lost["Namespace"] == "AWS/Events"
    assert lost["Dimensions"] == [{"Name": "RuleName", "Value": {"Ref": "OriginalEventsRule"}}]
    for alarm in (dead, lost):
        assert (alarm["Threshold"], alarm["ComparisonOperator"], alarm["EvaluationPeriods"]) == (
            0,
            "GreaterThanThreshold",
            1,
        )
        assert alarm["TreatMissingData"] == "notBreaching"
        assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": "AlarmTopic"}]


def test_alarm_mail_is_subscribed_only_when_an_address_is_given():
    params = TEMPLATE["Parameters"]
    assert params["AlarmEmail"]["Default"] == ""
    assert "OldestMessageAgeAlarmSeconds" in params
    subscription = RESOURCES["AlarmEmailSubscription"]
    assert subscription["Condition"] == "HasAlarmEmail"
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == {"Ref": "AlarmEmail"}


def test_the_worker_logs_to_its_own_log_group_with_a_retention():
    group = RESOURCES["WorkerLogGroup"]["Properties"]
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${AWS::StackName}-worker"}
    assert 1 <= group["RetentionInDays"] <= 365
    worker = RESOURCES["WorkerFunction"]["Properties"]
    assert worker["LoggingConfig"] == {"LogGroup": {"Ref": "WorkerLogGroup"}}


def test_parameters_and_globals():
    params = TEMPLATE["Parameters"]
    assert params["Stage"]["Type"] == "String"
    assert (params["Architecture"]["Default"], params["Architecture"]["AllowedValues"]) == (
        "arm64",
        ["arm64", "x86_64"],
    )
    for name in ("AlarmEmail", "OldestMessageAgeAlarmSeconds", "MaxPixels", "MaxInputBytes"):
        assert name in params, name
    function = TEMPLATE["Globals"]["Function"]
    assert function["Runtime"] == "python3.12"
    assert function["Architectures"] == [{"Ref": "Architecture"}]
    env = function["Environment"]["Variables"]
    assert {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL"} <= set(env)
    for layer in ("MediaJobsLayer", "FfmpegLayer"):
        props = RESOURCES[layer]["Properties"]
        assert props["CompatibleArchitectures"] == [{"Ref": "Architecture"}], layer
        assert RESOURCES[layer]["Metadata"]["BuildArchitecture"] == {"Ref": "Architecture"}, layer


def test_the_bucket_is_versioned_and_notifies_eventbridge():
    bucket = RESOURCES["MediaBucket"]["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["NotificationConfiguration"]["EventBridgeConfiguration"] == {"EventBridgeEnabled": True}


def test_the_rule_takes_every_object_created_or_deleted_under_originals_of_this_bucket_to_the_queue():
    rule = RESOURCES["OriginalEventsRule"]["Properties"]
    assert rule["EventPattern"] == {
        "source": ["aws.s3"],
        # Every creation path (PUT, POST, COPY, multipart) and every deletion (delete
        # markers, versions deleted, lifecycle expirations).
        "detail-type": ["Object Created", "Object Deleted"],
        "detail": {"bucket": {"name": [{"Ref": "MediaBucket"}]}, "object": {"key": [{"prefix": "originals/"}]}},
    }
    assert [t["Arn"] for t in rule["Targets"]] == [{"Fn::GetAtt": ["JobsQueue", "Arn"]}]


def test_only_the_rule_may_send_to_the_queue():
    policy = RESOURCES["JobsQueuePolicy"]["Properties"]
    assert policy["Queues"] == [{"Ref": "JobsQueue"}]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Action"] == "sqs:SendMessage"
    assert statement["Resource"] == {"Fn::GetAtt": ["JobsQueue", "Arn"]}
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["OriginalEventsRule", "Arn"]}}}


def test_the_queue_outlasts_six_worker_timeouts_and_dead_letters_after_five_receives():
    queue = RESOURCES["JobsQueue"]["Properties"]
    timeout = RESOURCES["WorkerFunction"]["Properties"]["Timeout"]
    assert queue["VisibilityTimeout"] >= 6 * timeout
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]},
        "maxReceiveCount": 5,
    }


def test_the_worker_is_driven_by_the_queue_with_partial_batch_failures_and_bounded_concurrency():
    worker = RESOURCES["WorkerFunction"]["Properties"]
    assert worker["Layers"] == [{"Ref": "MediaJobsLayer"}, {"Ref": "FfmpegLayer"}]
    assert worker["EphemeralStorage"]["Size"] >= 2048
    event = worker["Events"]["Jobs"]
    props = event["Properties"]
    assert event["Type"] == "SQS" and props["Queue"] == {"Fn::GetAtt": ["JobsQueue", "Arn"]}
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "MaxConcurrency"}}
    concurrency = TEMPLATE["Parameters"]["MaxConcurrency"]
    assert (concurrency["Default"], concurrency["MinValue"], concurrency["MaxValue"]) == (10, 2, 1000)
    assert 1 <= props["BatchSize"] <= 10 and props["MaximumBatchingWindowInSeconds"] >= 0


def test_outputs_name_the_bucket_queues_tables_and_dashboard():
    outputs = TEMPLATE["Outputs"]
    assert outputs["BucketName"]["Value"] == {"Ref": "MediaBucket"}
    assert outputs["JobsQueueUrl"]["Value"] == {"Ref": "JobsQueue"}
    assert outputs["DeadLetterQueueUrl"]["Value"] == {"Ref": "DeadLetterQueue"}
    assert outputs["EventsDeadLetterQueueUrl"]["Value"] == {"Ref": "EventsDeadLetterQueue"}
    assert outputs["JobsTableName"]["Value"] == {"Ref": "JobsTable"}
    assert outputs["SourcesTableName"]["Value"] == {"Ref": "SourcesTable"}
    assert "#dashboards:name=${Dashboard}" in outputs["DashboardUrl"]["Value"]["Fn::Sub"]


def test_samconfig_has_a_default_and_a_prod_environment():
    config = tomllib.loads((REPO / "samconfig.toml").read_text())
    assert {"default", "prod"} <= set(config)
    for env in ("default", "prod"):
        assert "deploy" in config[env], env
    assert "Stage=prod" in str(config["prod"]["deploy"]["parameters"]["parameter_overrides"])


@pytest.fixture()
def package_logs(caplog):
    """The package's log records at INFO and above. caplog's handler sits on the root
    logger; a logger Powertools configured may not propagate there
    (``copy_config_to_registered_loggers`` turns propagation off), so the handler is put on
    every such logger directly -- once, so no record is captured twice."""
    loggers = [logging.getLogger("mediajobs"), logging.getLogger(powertools_logger().name)]
    added = [logger for logger in set(loggers) if not _reaches_root(logger)]
    for logger in added:
        logger.addHandler(caplog.handler)
    for logger in loggers:
        caplog.set_level(logging.INFO, logger=logger.name)  # restored after the test
    yield caplog
    for logger in added:
        logger.removeHandler(caplog.handler)


def _reaches_root(logger: logging.Logger) -> bool:
    node: logging.Logger | None = logger
    while node is not None and node.parent is not None:
        if not node.propagate:
            return False
        node = node.parent
    return True


def in_process_handler(local_session):
    """The real handler over a service that renders images in this process (no render
    child): the log records and metrics are the handler's and the pipeline's either way."""
    settings = Settings.from_env()
    adapters = dataclasses.replace(
        default_adapters(settings, clients=local_session.stack.clients()), steps=steps(settings, in_process=True)
    )
    return worker.make_handler(build_service(settings, adapters=adapters), metrics=function_metrics())


def truncated_upload(local_session, name: str) -> tuple[dict, list[str]]:
    """A truncated PNG no other test uploads, put under ``originals/``: (its SQS event, the
    job keys of its active image recipes, in their order)."""
    data = _noise_png()[:300]
    key = f"originals/contract/{name}.png"
    local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=key, Body=data)
    body = object_created_body(local_session.stack.bucket, key, size=len(data))
    event = sqs_event(
        [{"MessageId": str(uuid.uuid4()), "ReceiptHandle": "h", "Body": body}], local_session.stack.queue_arn, REGION
    )
    return event, [planned_key(data, recipe.id, local_session.stack.settings()) for recipe in active_recipes()["image"]]


def _noise_png() -> bytes:
    out = io.BytesIO()
    Image.frombytes("RGB", (64, 64), os.urandom(64 * 64 * 3)).save(out, format="PNG")
    return out.getvalue()


def test_saved_queries_find_repeated_starts_and_failures_by_reason_in_the_workers_logs(local_session, package_logs):
    starts = RESOURCES["ProcessingStartsQuery"]["Properties"]
    failures = RESOURCES["PermanentFailuresQuery"]["Properties"]
    for query in (starts, failures):
        assert query["LogGroupNames"] == [{"Ref": "WorkerLogGroup"}]
    assert 'filter message = "processing started"' in starts["QueryString"]
    assert "by job_key" in starts["QueryString"]
    assert 'filter message = "permanent failure"' in failures["QueryString"]
    assert "by reason" in failures["QueryString"]
    # The messages and fields the queries read are the ones the worker logs: a job that
    # starts and fails permanently logs both (Powertools puts extras beside "message").
    event, keys = truncated_upload(local_session, f"queries-{uuid.uuid4().hex}")
    assert in_process_handler(local_session)(event, LocalLambdaContext()) == {"batchItemFailures": []}
    records = package_logs.records
    started = [r for r in records if r.getMessage() == "processing started"]
    # One start per job that ran: the moderation job, first, which reads the picture; its
    # failure fails the renditions waiting for it, which never start.
    assert [getattr(r, "job_key", None) for r in started] == keys[:1]
    failed = [r for r in records if r.getMessage() == "permanent failure"]
    assert [getattr(r, "reason", None) for r in failed] == ["truncated_image"]


def emitted_metrics(capsys) -> set[str]:
    """Names of the metrics in the EMF documents printed since the last call."""
    names = set()
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            document = json.loads(line)
            for directive in document["_aws"]["CloudWatchMetrics"]:
                names.update(m["Name"] for m in directive["Metrics"])
    return names


def test_the_dashboard_shows_queues_dead_letters_jobs_and_processing_time(local_session, capsys, monkeypatch):
    body = RESOURCES["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    queues = {
        "JobsQueue": "jobs",
        "DeadLetterQueue": "dlq",
        "EventsDeadLetterQueue": "events-dlq",
        "NotificationFailuresQueue": "notification-failures",
        "BackfillQueue": "backfill",
        "BackfillDeadLetterQueue": "backfill-dlq",
    }
    body = body.replace("${AWS::Region}", "x")
    for name, placeholder in queues.items():
        body = body.replace("${" + name + ".QueueName}", placeholder)
    widgets = json.loads(body)["widgets"]
    depths = {m[3] for w in widgets for m in w["properties"]["metrics"] if m[1] == "ApproximateNumberOfMessagesVisible"}
    assert depths == set(queues.values())  # both dead-letter queues and the dispatcher's failures are on it
    metrics = {(m[0], m[1]) for w in widgets for m in w["properties"]["metrics"]}
    namespace = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]
    assert metrics >= {
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
        ("AWS/SQS", "ApproximateAgeOfOldestMessage"),
        (namespace, "JobsClaimed"),
        (namespace, "JobsReused"),
        (namespace, "JobsFailed"),
        (namespace, "ProcessingSeconds"),
    }
    # The worker publishes each metric of its namespace the dashboard shows: a first
    # delivery claims, renders and fails a job; a second reuses it.
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    capsys.readouterr()
    event, _ = truncated_upload(local_session, f"dashboard-{uuid.uuid4().hex}")
    handler = in_process_handler(local_session)
    handler(event, LocalLambdaContext())
    handler(event, LocalLambdaContext())
    published = emitted_metrics(capsys)
    # The dispatcher's (adapters/metrics.py publishes them for it) beside the worker's.
    from mediajobs.adapters.metrics import BACKFILL_METRICS, DISPATCH_METRICS

    shown = {name for ns, name in metrics if ns == namespace}
    # The backfill's: tests/functional/test_backfill_store.py sees its handler publish them.
    assert shown - published <= set(DISPATCH_METRICS.values()) | set(BACKFILL_METRICS.values()), published
    outputs = TEMPLATE["Outputs"]
    assert "#dashboards:name=${Dashboard}" in outputs["DashboardUrl"]["Value"]["Fn::Sub"]
    assert {"BucketName", "JobsQueueUrl", "DeadLetterQueueUrl", "JobsTableName", "SourcesTableName"} <= set(outputs)


def test_the_video_lane_drives_the_video_function_with_its_own_memory_and_concurrency():
    """A split video's parts and join run on the video function: the worker's code, role and
    environment behind its own queue (redriven to its own alarmed dead-letter queue), with
    the memory (so the CPU) and /tmp a segment needs and a MaximumConcurrency of its own."""
    video = RESOURCES["VideoWorkerFunction"]["Properties"]
    worker = RESOURCES["WorkerFunction"]["Properties"]
    for same in ("CodeUri", "Handler", "Layers", "Role", "Timeout"):
        assert video[same] == worker[same], same
    assert video["MemorySize"] == {"Ref": "VideoMemorySize"}
    assert video["EphemeralStorage"]["Size"] == worker["EphemeralStorage"]["Size"] == 10240
    memory = TEMPLATE["Parameters"]["VideoMemorySize"]
    assert memory["Default"] == 3538 and memory["MinValue"] == 1769  # 2 vCPUs; at least one
    lane = video["Events"]["VideoLane"]["Properties"]
    assert lane["Queue"] == {"Fn::GetAtt": ["VideoQueue", "Arn"]} and lane["BatchSize"] == 1
    assert lane["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "VideoMaximumConcurrency"}}
    assert lane["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    queue = RESOURCES["VideoQueue"]["Properties"]
    assert queue["VisibilityTimeout"] >= 6 * video["Timeout"]
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["VideoDeadLetterQueue", "Arn"]},
        "maxReceiveCount": 5,
    }
    alarm = RESOURCES["VideoDeadLetterQueueAlarm"]["Properties"]
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": ["VideoDeadLetterQueue", "QueueName"]}}
    ]
    env = worker["Environment"]["Variables"]
    assert env["VIDEO_QUEUE_ARN"] == {"Fn::GetAtt": ["VideoQueue", "Arn"]}
    assert (env["SPLIT_ABOVE_SECONDS"], env["SEGMENT_SECONDS"], env["MAX_VIDEO_SECONDS"]) == ("240", "60", 10800)
    assert TEMPLATE["Parameters"]["MaxInputBytes"]["MaxValue"] == 10 * 1024**3
