"""Contract tests of what moderation and the decision log deploy: the Firehose stream, its
bucket and lifecycle, the Glue table, the Athena named queries (the SQL files, verbatim),
the Rekognition permission (the worker's role only, DetectModerationLabels only), the
review route's IAM, and the settings the functions read."""

from __future__ import annotations

from typing import Any

from mediajobs.local.decisions import COLUMNS, query_text
from mediajobs.local.template import load_template
from mediajobs.settings import _ENV_NAMES
from tests.conftest import REPO

TEMPLATE = load_template(REPO / "template.yaml")
RESOURCES = TEMPLATE["Resources"]
PARAMETERS = TEMPLATE["Parameters"]


def statements(role: str) -> list[dict[str, Any]]:
    policies = RESOURCES[role]["Properties"]["Policies"]
    return [st for p in policies for st in p["PolicyDocument"]["Statement"] if "Fn::If" not in st]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_decision_stream_writes_json_lines_under_decisions_of_its_own_bucket():
    stream = RESOURCES["DecisionStream"]
    assert stream["Type"] == "AWS::KinesisFirehose::DeliveryStream"
    props = stream["Properties"]
    assert props["DeliveryStreamType"] == "DirectPut"
    assert props["DeliveryStreamEncryptionConfigurationInput"] == {"KeyType": "AWS_OWNED_CMK"}
    destination = props["ExtendedS3DestinationConfiguration"]
    assert destination["BucketARN"] == {"Fn::GetAtt": ["DecisionsBucket", "Arn"]}  # not the media bucket
    # No expression in the prefix: Firehose appends YYYY/MM/DD/HH/, the table's projection.
    assert destination["Prefix"] == "decisions/" and "!{" not in destination["Prefix"]
    assert destination["ErrorOutputPrefix"].startswith("errors/")
    assert destination["CompressionFormat"] == "UNCOMPRESSED"
    assert destination["RoleARN"] == {"Fn::GetAtt": ["DecisionStreamRole", "Arn"]}
    (write,) = statements("DecisionStreamRole")
    # What Firehose's S3 destination needs ("Grant Firehose access to an Amazon S3
    # destination"), nothing that reads or deletes a record.
    assert sorted(write["Action"]) == [
        "s3:AbortMultipartUpload",
        "s3:GetBucketLocation",
        "s3:ListBucket",
        "s3:ListBucketMultipartUploads",
        "s3:PutObject",
    ]
    assert write["Resource"] == [{"Fn::GetAtt": ["DecisionsBucket", "Arn"]}, {"Fn::Sub": "${DecisionsBucket.Arn}/*"}]
    trust = RESOURCES["DecisionStreamRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "firehose.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"sts:ExternalId": {"Ref": "AWS::AccountId"}}}


def test_the_decisions_bucket_keeps_them_the_retention_parameter_days_default_400():
    assert (PARAMETERS["DecisionRetentionDays"]["Default"], PARAMETERS["DecisionRetentionDays"]["MinValue"]) == (400, 1)
    bucket = RESOURCES["DecisionsBucket"]["Properties"]
    rules = {r["Id"]: r for r in bucket["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-decisions"]["Prefix"] == "decisions/"
    assert rules["expire-decisions"]["ExpirationInDays"] == {"Ref": "DecisionRetentionDays"}
    assert rules["expire-decisions"]["Status"] == "Enabled"
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert bucket["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    (deny,) = RESOURCES["DecisionsBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert (deny["Effect"], deny["Condition"]) == ("Deny", {"Bool": {"aws:SecureTransport": "false"}})


def test_the_glue_table_reads_the_records_by_day_with_the_local_columns():
    table = RESOURCES["DecisionsTable"]["Properties"]
    assert table["DatabaseName"] == {"Ref": "DecisionsDatabase"}
    inp = table["TableInput"]
    assert inp["Name"] == "decisions" and inp["PartitionKeys"] == [{"Name": "day", "Type": "string"}]
    params = inp["Parameters"]
    assert (params["projection.enabled"], params["projection.day.type"], params["projection.day.format"]) == (
        "true",
        "date",
        "yyyy/MM/dd",
    )
    assert params["storage.location.template"] == {"Fn::Sub": "s3://${DecisionsBucket}/decisions/${!day}/"}
    storage = inp["StorageDescriptor"]
    assert storage["SerdeInfo"]["SerializationLibrary"] == "org.openx.data.jsonserde.JsonSerDe"
    assert [c["Name"] for c in storage["Columns"]] == list(COLUMNS)


def test_the_athena_named_queries_are_the_sql_files_mediajobs_decisions_runs():
    for logical_id, name in (
        ("DecisionSpikesQuery", "spikes"),
        ("DecisionTopCpuQuery", "top_cpu"),
        ("DecisionAffectedQuery", "affected"),
    ):
        query = RESOURCES[logical_id]
        assert query["Type"] == "AWS::Athena::NamedQuery"
        assert query["Properties"]["Database"] == {"Ref": "DecisionsDatabase"}
        assert query["Properties"]["QueryString"] == query_text(name), logical_id


def test_rekognition_is_the_worker_roles_alone_and_only_detect_moderation_labels():
    found = {
        role: [st for st in statements(role) if any(str(a).startswith("rekognition:") for a in _list(st["Action"]))]
        for role, resource in RESOURCES.items()
        if resource["Type"] == "AWS::IAM::Role" and "Policies" in resource["Properties"]
    }
    assert {role: sts for role, sts in found.items() if sts} == {
        "WorkerRole": [
            {
                "Sid": "ModerationLabels",
                "Effect": "Allow",
                "Action": "rekognition:DetectModerationLabels",
                "Resource": "*",
            }
        ]
    }
    (put,) = [st for st in statements("WorkerRole") if st.get("Sid") == "DecisionLog"]
    assert (put["Action"], put["Resource"]) == ("firehose:PutRecordBatch", {"Fn::GetAtt": ["DecisionStream", "Arn"]})


def test_the_review_route_writes_one_job_row_and_sends_its_request_for_listed_reviewers_only():
    function = RESOURCES["StatusFunction"]["Properties"]
    assert function["FunctionUrlConfig"] == {"AuthType": "AWS_IAM"}
    env = function["Environment"]["Variables"]
    assert env["REVIEWER_ARNS"] == {"Ref": "ReviewerArns"} and PARAMETERS["ReviewerArns"]["Default"] == ""
    assert env["JOBS_TABLE_NAME"] == {"Ref": "JobsTable"}
    assert env["JOBS_QUEUE_ARN"] == {"Fn::GetAtt": ["JobsQueue", "Arn"]}
    assert set(env) <= set(_ENV_NAMES.values())
    granted = {st["Sid"]: (st["Action"], st["Resource"]) for st in statements("StatusRole")}
    assert granted["ReviewJob"] == (["dynamodb:GetItem", "dynamodb:UpdateItem"], {"Fn::GetAtt": ["JobsTable", "Arn"]})
    assert granted["ReviewRequest"] == (["sqs:SendMessage", "sqs:GetQueueUrl"], {"Fn::GetAtt": ["JobsQueue", "Arn"]})
    writes = [a for st in statements("StatusRole") for a in _list(st["Action"]) if a.startswith(("dynamodb:", "sqs:"))]
    assert sorted(writes) == [
        "dynamodb:BatchGetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:UpdateItem",
        "sqs:GetQueueUrl",
        "sqs:SendMessage",
    ]


def test_the_promo_route_lists_only_originals_and_writes_only_promo_records_references_and_candidates():
    env = RESOURCES["StatusFunction"]["Properties"]["Environment"]["Variables"]
    assert env["POLICY_VERSION"] == {"Ref": "PolicyVersion"}  # the key a promo carries: the worker's
    granted = {st["Sid"]: st for st in statements("StatusRole")}
    album = granted["PromoAlbum"]
    assert (album["Action"], album["Resource"]) == ("s3:ListBucket", {"Fn::GetAtt": ["MediaBucket", "Arn"]})
    assert album["Condition"] == {"StringLike": {"s3:prefix": "originals/*"}}
    job = granted["PromoJob"]
    assert (job["Action"], job["Resource"]) == (
        ["dynamodb:BatchGetItem", "dynamodb:PutItem"],
        {"Fn::GetAtt": ["JobsTable", "Arn"]},
    )
    record = granted["PromoRecord"]
    assert (record["Action"], record["Resource"]) == (
        ["dynamodb:PutItem", "dynamodb:DeleteItem"],
        {"Fn::GetAtt": ["AssetsTable", "Arn"]},
    )
    # Never an asset item (asset#...): the album's record, a job's reference rows, candidates.
    assert record["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["promo", "job#*", "collect#*"]}}
    s3 = {(a, str(st["Resource"])) for st in granted.values() for a in _list(st["Action"]) if a.startswith("s3:")}
    assert s3 == {  # the album's listing, and the uploads POST /uploads signs (test_template_uploads.py)
        ("s3:ListBucket", str({"Fn::GetAtt": ["MediaBucket", "Arn"]})),
        ("s3:PutObject", str({"Fn::Sub": "${MediaBucket.Arn}/originals/*"})),
    }


def test_the_workers_judge_by_the_policy_parameter_and_log_to_the_stream():
    assert PARAMETERS["PolicyVersion"]["Default"] == "1"
    for function in ("WorkerFunction", "VideoWorkerFunction"):
        env = RESOURCES[function]["Properties"]["Environment"]["Variables"]
        assert env["POLICY_VERSION"] == {"Ref": "PolicyVersion"}
        assert env["DECISION_STREAM_NAME"] == {"Ref": "DecisionStream"}
