"""The worker's role in template.yaml allows every AWS call the worker makes, and no more
than the issue grants: the calls of real deliveries (a first one, a duplicate, takeovers
after crashes that leave outputs and a staged manifest behind, a deleted original) are
recorded at botocore and each is checked against the role's statements.

The role is also checked as SAM deploys it (``samtranslator``): no managed policy, no
statement with ``Resource: "*"``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import time
import uuid
from collections.abc import Iterator
from typing import Any

import botocore.client
import pytest

from mediajobs.bootstrap import build_collector, build_service
from mediajobs.domain.assets import AssetJob, AssetJobState, AssetVersion, sequencer_order
from mediajobs.domain.errors import OUTPUT_CONFLICT
from mediajobs.domain.jobs import JobSpec
from mediajobs.local.session import Collector, local_adapters
from mediajobs.local.template import load_template
from tests.conftest import REPO
from tests.fakes import FakeClock, planned_key
from tests.functional.test_crash_points import Crash, CrashAt, derivative_keys, esm_for
from tests.functional.test_worker import unique_png

TEMPLATE = load_template(REPO / "template.yaml")
ROLE = TEMPLATE["Resources"]["WorkerRole"]["Properties"]
#: The role's statements, a conditional one (``Fn::If``) as it is when its condition holds.
STATEMENTS = [
    st["Fn::If"][1] if "Fn::If" in st else st
    for policy in ROLE["Policies"]
    for st in policy["PolicyDocument"]["Statement"]
]

#: IAM action of each S3 and SQS operation the code may call (S3 API reference, "Permissions").
_S3_ACTIONS = {
    "PutObject": "s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
}
_SQS_ACTIONS = {
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}

#: IAM action of each kind of item of a TransactWriteItems.
_TRANSACT_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


class Recorder:
    """Every botocore call made while :attr:`on`, as (IAM action, resource ARN)."""

    def __init__(self, session) -> None:
        stack = session.stack
        self.stack = stack
        self.on = False
        self.calls: list[tuple[str, str]] = []
        self.tables = {
            stack.table_name: "JobsTable",
            stack.sources_table_name: "SourcesTable",
            stack.assets_table_name: "AssetsTable",
            stack.outbox_table_name: "OutboxTable",
        }

    def record(self, client: Any, operation: str, params: dict[str, Any]) -> None:
        if not self.on:
            return
        service = client.meta.service_model.service_name
        if service == "s3" and operation == "DeleteObjects":
            # One s3:DeleteObject per key; there is no s3:DeleteObjects action (S3 API
            # reference, DeleteObjects).
            for item in params["Delete"]["Objects"]:
                self.calls.append(("s3:DeleteObject", f"arn:aws:s3:::{params['Bucket']}/{item['Key']}"))
            return
        if service == "s3":
            key = params.get("Key")
            if key is None:
                self.calls.append((_S3_ACTIONS.get(operation, f"s3:{operation}"), f"arn:aws:s3:::{params['Bucket']}"))
                return
            action = _S3_ACTIONS.get(operation) or (
                "s3:GetObjectVersion" if params.get("VersionId") else "s3:GetObject"
            )
            self.calls.append((action, f"arn:aws:s3:::{params['Bucket']}/{key}"))
        elif service == "dynamodb" and operation == "TransactWriteItems":
            # Each item needs its own action on its table ("Using IAM with DynamoDB
            # transactions", DynamoDB developer guide); there is no TransactWriteItems action.
            for item in params["TransactItems"]:
                [(kind, body)] = item.items()
                self.calls.append((_TRANSACT_ACTIONS[kind], f"table/{body['TableName']}"))
        elif service == "dynamodb":
            tables = params["RequestItems"].keys() if "RequestItems" in params else [params["TableName"]]
            for table in tables:
                self.calls.append((f"dynamodb:{operation}", f"table/{table}"))
        elif service == "firehose":
            self.calls.append((f"firehose:{operation}", f"deliverystream/{params['DeliveryStreamName']}"))
        elif service == "sqs":
            queue = params.get("QueueUrl") or params.get("QueueName", "?")
            arn = (
                self.stack.queue_arn
                if self.stack.queue_arn.endswith(":" + queue.rsplit("/", 1)[-1])
                else f"other:{queue}"
            )
            self.calls.append((_SQS_ACTIONS.get(operation, f"sqs:{operation}"), arn))
        else:
            self.calls.append((f"{service}:{operation}", "?"))

    def resource(self, value: Any) -> str:
        """A statement's resource as an ARN pattern of the local stack."""
        bucket_arn = f"arn:aws:s3:::{self.stack.bucket}"
        if isinstance(value, dict) and "Fn::Sub" in value:
            return str(value["Fn::Sub"]).replace("${MediaBucket.Arn}", bucket_arn)
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            name = value["Fn::GetAtt"][0]
            return {
                "MediaBucket": bucket_arn,
                "JobsTable": f"table/{self.stack.table_name}",
                "SourcesTable": f"table/{self.stack.sources_table_name}",
                "AssetsTable": f"table/{self.stack.assets_table_name}",
                "OutboxTable": f"table/{self.stack.outbox_table_name}",
                "DecisionStream": f"deliverystream/{self.stack.decision_stream_name}",
                "JobsQueue": self.stack.queue_arn,
                "WorkerLogGroup": "log-group",
            }[name]
        return str(value)

    def allowed(self, action: str, arn: str) -> bool:
        return any(
            st["Effect"] == "Allow"
            and action in _as_list(st["Action"])
            and any(fnmatch.fnmatchcase(arn, self.resource(r)) for r in _as_list(st["Resource"]))
            for st in STATEMENTS
        )


@pytest.fixture()
def recorder(local_session, monkeypatch) -> Iterator[Recorder]:
    rec = Recorder(local_session)
    real = botocore.client.BaseClient._make_api_call

    def recording(client, operation, params):
        rec.record(client, operation, params)
        return real(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    yield rec


def _poll(rec: Recorder, esm) -> None:
    """One poll of the event source mapping and the handler (both use the function's role)."""
    rec.on = True
    try:
        esm.poll_once()
    finally:
        rec.on = False


def test_every_call_of_real_deliveries_is_allowed_by_the_role(local_session, recorder):
    local_session.run()  # nothing of an earlier test in flight
    s3, bucket = local_session.s3, local_session.stack.bucket
    settings = local_session.settings

    def service(observer, **changes):
        adapters = dataclasses.replace(local_adapters(local_session.stack, settings), **changes)
        return build_service(settings, adapters=adapters, observer=observer)

    skew = settings.lease_s + 60
    keys = {}
    for point in ("output_stored", "manifest_stored"):
        data = unique_png(320, 240)
        s3.put_object(Bucket=bucket, Key=f"originals/iam/{point}.png", Body=data)
        keys[point] = planned_key(data, "web-image", settings)
        # Worker A dies there; worker B, past A's lease, takes over: after outputs it meets
        # 412s, after the staged manifest it adopts it.
        a = esm_for(local_session, service(CrashAt(point)))
        with pytest.raises(Crash):
            _poll(recorder, a)
        a.expire(a.current_batch)
        later = service(Collector(), clock=lambda: time.time() + 2 * skew)
        _poll(recorder, esm_for(local_session, later))
    # A duplicate of a done job, and an original deleted before its event is handled.
    again = s3.get_object(Bucket=bucket, Key="originals/iam/output_stored.png")["Body"].read()
    s3.put_object(Bucket=bucket, Key="originals/iam/copy.png", Body=again)
    s3.put_object(Bucket=bucket, Key="originals/iam/gone.png", Body=unique_png(64, 64))
    s3.delete_object(Bucket=bucket, Key="originals/iam/gone.png")
    b = esm_for(local_session, service(Collector()))
    while b.in_flight() or _visible(local_session):
        _poll(recorder, b)

    for point, key in keys.items():
        assert derivative_keys(local_session, key) == ["card.webp", "full.avif", "manifest.json", "thumb.webp"], point
    assert local_session.dead_letters() == 0
    denied = sorted({call for call in recorder.calls if not recorder.allowed(*call)})
    assert denied == []
    actions = {action for action, _ in recorder.calls}
    # The paths above did exercise what the role grants (a 412 listing, staging, hand-offs).
    assert {"s3:PutObject", "s3:ListBucket", "dynamodb:UpdateItem", "dynamodb:BatchGetItem"} <= actions
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= actions
    # Nothing under derivatives/ is read by these deliveries (their jobs take the original): only written, or listed.
    reads = [arn for action, arn in recorder.calls if action in ("s3:GetObject", "s3:GetObjectVersion")]
    assert reads and all(f":::{bucket}/originals/" in arn for arn in reads)


def test_every_call_of_the_assets_adapter_is_allowed_by_the_role(local_session, recorder):
    """Transactions (each item's action on its table), the reference queries, the
    candidates' queries and conditional deletes, the progress update."""
    assets = local_session.stack.assets(writer=True)
    bucket, key = local_session.stack.bucket, "originals/iam/asset.jpg"
    image, other = "a" * 64, "b" * 64
    recorder.on = True
    try:
        for n, job in enumerate((image, other)):
            version = AssetVersion(f"v{n}", f"e{n}", 10, sequencer_order(f"{n + 1:X}"))
            assets.make_current(bucket, key, version, sha256=job, media="image", jobs=None, now_s=1)
            assets.make_current(bucket, key, version, sha256=job, media="image", jobs=[AssetJob("r@1", job)], now_s=1)
        seq = sequencer_order("2")
        assets.record(bucket, key, seq, [AssetJob("r@1", other, AssetJobState.PROCESSING)], now_s=2)
        assets.progress(bucket, key, seq, other, 0.5, now_s=3)
        failed = AssetJob("r@1", other, AssetJobState.FAILED, reason="attempts_exhausted")
        assets.record(bucket, key, seq, [failed], now_s=4)
        assets.delete(bucket, key, AssetVersion("dm", "", None, sequencer_order("3")), now_s=5)
        assert (assets.referenced(image), assets.references(other)) == (False, 0)
        for candidate in assets.candidates(released_before_s=10, limit=10):
            assets.drop_candidate(candidate)
    finally:
        recorder.on = False
    assert sorted({call for call in recorder.calls if not recorder.allowed(*call)}) == []
    table = f"table/{local_session.stack.assets_table_name}"
    used = {action for action, arn in recorder.calls if arn == table}
    assert {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"} <= used
    assert "dynamodb:DeleteItem" in used


def test_every_call_of_the_collection_is_allowed_by_the_role(local_session, recorder):
    """A collected job (the manifest, then DeleteObjects of the rest) and a failed job's
    prefix swept: every call allowed, and deletes only under derivatives/."""
    stack, s3 = local_session.stack, local_session.s3
    settings = local_session.settings
    adapters = local_adapters(stack, settings)
    assets = stack.assets(writer=True, sleep=lambda _: None)
    now_s = int(time.time())
    for n, state in enumerate(["done", "failed"]):
        key = (str(n) + uuid.uuid4().hex * 2)[:64]
        prefix = f"derivatives/{key}/"
        spec = JobSpec(key, "a" * 64, "web-image", 1, "b" * 64, "none", prefix, stack.bucket, "originals/iam/c.png")
        token = str(adapters.ledger.claim(spec, now_s=now_s - 9000, lease_until_s=now_s - 8900).lease_token)
        for name in ("manifest.json", "thumb.webp") if state == "done" else ("thumb.webp",):
            s3.put_object(Bucket=stack.bucket, Key=prefix + name, Body=b"x")
        if state == "done":
            adapters.ledger.complete(key, token, manifest_key=prefix + "manifest.json", outputs=[], now_s=now_s - 8900)
        else:
            adapters.ledger.fail_permanently(key, token, reason=OUTPUT_CONFLICT, detail="", now_s=now_s - 8900)
        original = f"originals/iam/collect-{key[:8]}.png"
        jobs = [AssetJob("web-image@1", key)]
        assets.make_current(
            stack.bucket,
            original,
            AssetVersion("v1", "e", 1, sequencer_order("1")),
            sha256="a" * 64,
            media="image",
            jobs=jobs,
            now_s=now_s - 8000,
        )
        assets.delete(stack.bucket, original, AssetVersion("d", "", None, sequencer_order("2")), now_s=now_s - 7000)
    recorder.on = True
    try:
        collector = build_collector(settings, dataclasses.replace(adapters, clock=FakeClock(now_s), assets=assets))
        report = collector.run(grace_s=60, limit=1000)
    finally:
        recorder.on = False
    assert report.collected >= 1 and report.swept_failed >= 1 and report.errors == 0
    assert sorted({call for call in recorder.calls if not recorder.allowed(*call)}) == []
    deletes = [arn for action, arn in recorder.calls if action == "s3:DeleteObject"]
    assert deletes and all(f":::{stack.bucket}/derivatives/" in arn for arn in deletes)


def _visible(session) -> int:
    attrs = session.sqs.get_queue_attributes(
        QueueUrl=session.stack.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"])


def test_the_role_grants_s3_reads_on_originals_and_inputs_and_writes_on_derivatives_only():
    grants: dict[str, set[str]] = {}
    for st in STATEMENTS:
        for action in _as_list(st["Action"]):
            for resource in _as_list(st["Resource"]):
                if resource == "*":  # rekognition:DetectModerationLabels alone (the next test)
                    grants.setdefault(action, set()).add("*")
                    continue
                where = resource.get("Fn::Sub") or resource.get("Ref") or ".".join(resource["Fn::GetAtt"])
                grants.setdefault(action, set()).add(where)
    assert grants["s3:GetObjectVersion"] == {"${MediaBucket.Arn}/originals/*"}
    # Derivatives are read only as a job's inputs (other jobs' outputs), never by a commit.
    assert grants["s3:GetObject"] == {"${MediaBucket.Arn}/originals/*", "${MediaBucket.Arn}/derivatives/*"}
    assert grants["s3:PutObject"] == {"${MediaBucket.Arn}/derivatives/*"}
    assert grants["s3:ListBucket"] == {"MediaBucket.Arn"}
    sqs = {a for a in grants if a.startswith("sqs:")}
    # The event source mapping polls with this role; the worker sets visibility and hands over.
    assert sqs == {
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:ChangeMessageVisibility",
        "sqs:SendMessage",
        "sqs:GetQueueUrl",
    }
    # The jobs queue, the backfill lane (its scan sends there, the mapping polls it), and
    # the video lane (a split video's parts are requested there, the video function polls it).
    assert all(grants[a] == {"JobsQueue.Arn", "BackfillQueue.Arn", "VideoQueue.Arn"} for a in sqs)
    logs = {"WorkerLogGroup.Arn", "VideoWorkerLogGroup.Arn"}  # the role is the worker's and the video function's
    assert grants["logs:PutLogEvents"] == grants["logs:CreateLogStream"] == logs
    assert {a for a in grants if a.startswith("dynamodb:")} and all(
        grants[a] <= {"JobsTable.Arn", "SourcesTable.Arn", "AssetsTable.Arn", "OutboxTable.Arn"}
        for a in grants
        if a.startswith("dynamodb:")
    )
    # The outbox: the worker only puts the notification an asset's end owes (in its transaction).
    assert [a for a in grants if "OutboxTable.Arn" in grants[a]] == ["dynamodb:PutItem"]
    # The collection deletes derivative sets, nothing else.
    assert grants["s3:DeleteObject"] == {"${MediaBucket.Arn}/derivatives/*"}
    assert not any(a.endswith("*") for a in grants)  # no wildcard actions either
    # Rekognition: DetectModerationLabels alone, which has no resource-level permission.
    assert {a: grants[a] for a in grants if a.startswith("rekognition:")} == {
        "rekognition:DetectModerationLabels": {"*"}
    }
    assert [a for a in grants if "*" in grants[a]] == ["rekognition:DetectModerationLabels"]
    # The decision log: records put on its stream, nothing read.
    assert {a: grants[a] for a in grants if a.startswith("firehose:")} == {
        "firehose:PutRecordBatch": {"DecisionStream.Arn"}
    }
    # With KmsKeyArn only: the jobs queue's messages under the customer-managed key.
    assert {a: grants[a] for a in grants if a.startswith("kms:")} == {
        "kms:Decrypt": {"KmsKeyArn"},
        "kms:GenerateDataKey": {"KmsKeyArn"},
    }
    (kms,) = [st["Fn::If"] for p in ROLE["Policies"] for st in p["PolicyDocument"]["Statement"] if "Fn::If" in st]
    assert (kms[0], kms[2]) == ("HasKmsKey", {"Ref": "AWS::NoValue"})


def test_as_sam_deploys_it_no_role_statement_has_resource_star(monkeypatch):
    """SAM adds AWSLambdaBasicExecutionRole and AWSLambdaSQSQueueExecutionRole (Resource
    "*") to a role it makes; the worker brings its own, so the deployed template has none."""
    samtranslator = pytest.importorskip("samtranslator.translator.transform")
    from samtranslator.yaml_helper import yaml_parse

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    template = yaml_parse((REPO / "template.yaml").read_text())
    for resource in template["Resources"].values():
        for uri in ("CodeUri", "ContentUri"):  # what `sam package` puts there
            if uri in resource.get("Properties", {}):
                resource["Properties"][uri] = "s3://artifacts/code.zip"

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    deployed = samtranslator.transform(template, {}, NoManagedPolicies())["Resources"]
    roles = {name: r["Properties"] for name, r in deployed.items() if r["Type"] == "AWS::IAM::Role"}
    # SAM makes two more roles: EventBridge Scheduler's, for the collection's and the
    # backfill's schedules (ScheduleV2), which may invoke the worker and do nothing else.
    # StatusRole: test_status.py; DispatcherRole: test_template_notifications.py and below.
    assert sorted(roles) == [
        "DecisionStreamRole",
        "DispatcherRole",
        "StatusRole",
        "WorkerFunctionBackfillRole",
        "WorkerFunctionCollectRole",
        "WorkerRole",
    ]
    for name in ("WorkerFunctionCollectRole", "WorkerFunctionBackfillRole"):
        scheduler = roles[name]
        assert [st["Principal"] for st in scheduler["AssumeRolePolicyDocument"]["Statement"]] == [
            {"Service": ["scheduler.amazonaws.com"]}
        ]
        assert [
            (st["Effect"], st["Action"], st["Resource"])
            for p in scheduler["Policies"]
            for st in p["PolicyDocument"]["Statement"]
        ] == [("Allow", "lambda:InvokeFunction", {"Fn::GetAtt": ["WorkerFunction", "Arn"]})]
    assert not any("ManagedPolicyArns" in roles[r] for r in ("WorkerRole", "StatusRole", "DispatcherRole"))
    assert not [n for n, r in deployed.items() if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")]
    statements = [st for p in roles["WorkerRole"]["Policies"] for st in p["PolicyDocument"]["Statement"]]
    statements = [st["Fn::If"][1] if "Fn::If" in st else st for st in statements]  # the KMS grant, when a key is given
    # One statement names "*": DetectModerationLabels, which Rekognition authorises on no
    # resource ("Actions defined by Amazon Rekognition", Service Authorization Reference).
    starred = [st for st in statements if "*" in _as_list(st["Resource"])]
    assert [(st["Sid"], st["Action"]) for st in starred] == [("ModerationLabels", "rekognition:DetectModerationLabels")]
    assert deployed["WorkerFunction"]["Properties"]["Role"] == {"Fn::GetAtt": ["WorkerRole", "Arn"]}
    assert deployed["DispatcherFunction"]["Properties"]["Role"] == {"Fn::GetAtt": ["DispatcherRole", "Arn"]}


def test_the_rules_dead_letter_queue_takes_events_from_the_rule_alone_and_the_worker_has_no_access():
    """Undelivered events are for a person to look at and send on: the worker's role names
    no dead-letter queue, and only EventBridge, on behalf of this rule, may send there."""
    named = {
        r["Fn::GetAtt"][0]
        for st in STATEMENTS
        for r in _as_list(st["Resource"])
        if isinstance(r, dict) and "Fn::GetAtt" in r
    }
    assert not named & {"EventsDeadLetterQueue", "DeadLetterQueue"}
    policies = [
        r["Properties"]
        for r in TEMPLATE["Resources"].values()
        if r["Type"] == "AWS::SQS::QueuePolicy" and {"Ref": "EventsDeadLetterQueue"} in r["Properties"]["Queues"]
    ]
    [policy] = policies
    for statement in policy["PolicyDocument"]["Statement"]:
        assert statement["Principal"] == {"Service": "events.amazonaws.com"}
        assert _as_list(statement["Action"]) == ["sqs:SendMessage"]
        assert statement["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Fn::GetAtt": ["OriginalEventsRule", "Arn"]}
