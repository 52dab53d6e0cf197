"""Contract tests of what template.yaml serves and keeps: the status function's URL and role,
the CloudFront distribution over derivatives/ (origin access control, the bucket policy's
statement for it, the cache policy), and the lifecycle rules of originals and derivatives.
The template is also linted (cfn-lint in-process; ``sam validate --lint`` where a SAM CLI
is installed, as ``.ci/run`` installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mediajobs.adapters.s3 import IMMUTABLE_CACHE_CONTROL
from mediajobs.local.template import load_template
from tests.conftest import REPO

TEMPLATE = load_template(REPO / "template.yaml")
RESOURCES = TEMPLATE["Resources"]
PARAMETERS = TEMPLATE["Parameters"]
#: CloudFront's managed cache policy "CachingOptimized" (CloudFront developer guide,
#: "Use managed cache policies"): TTL min 1 s, default 1 day, max 1 year; honours the
#: origin's Cache-Control within them; no query string, header or cookie in the key.
CACHING_OPTIMIZED = "658327ea-f89d-4fab-a63d-7e88639e58f6"


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _statements(role: str) -> list[dict[str, Any]]:
    """The role's statements, a conditional one (``Fn::If``) as it is when its condition holds."""
    statements = [st for p in RESOURCES[role]["Properties"]["Policies"] for st in p["PolicyDocument"]["Statement"]]
    return [st["Fn::If"][1] if "Fn::If" in st else st for st in statements]


@pytest.fixture(scope="module")
def deployed() -> dict[str, Any]:
    """The template's resources as SAM transforms them (no managed policy is known, so
    none can be added)."""
    samtranslator = pytest.importorskip("samtranslator.translator.transform")
    from samtranslator.yaml_helper import yaml_parse

    template = yaml_parse((REPO / "template.yaml").read_text())
    for resource in template["Resources"].values():
        for uri in ("CodeUri", "ContentUri"):  # what `sam package` puts there
            if uri in resource.get("Properties", {}):
                resource["Properties"][uri] = "s3://artifacts/code.zip"

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        resources: dict[str, Any] = samtranslator.transform(template, {}, NoManagedPolicies())["Resources"]
    return resources


# The status function.


def test_the_status_function_url_is_signed_with_iam_and_nobody_is_granted_it_publicly(deployed):
    function = RESOURCES["StatusFunction"]["Properties"]
    assert function["FunctionUrlConfig"] == {"AuthType": "AWS_IAM"}
    resources = deployed
    urls = {name: r["Properties"] for name, r in resources.items() if r["Type"] == "AWS::Lambda::Url"}
    assert list(urls) == ["StatusFunctionUrl"]
    assert urls["StatusFunctionUrl"]["AuthType"] == "AWS_IAM"
    assert urls["StatusFunctionUrl"]["TargetFunctionArn"] == {"Ref": "StatusFunction"}
    # No resource policy: callers of this account need lambda:InvokeFunctionUrl (and
    # lambda:InvokeFunction) in their own policies.
    assert [n for n, r in resources.items() if r["Type"] == "AWS::Lambda::Permission"] == []
    assert TEMPLATE["Outputs"]["StatusUrl"]["Value"] == {"Fn::GetAtt": ["StatusFunctionUrl", "FunctionUrl"]}


def test_the_status_function_is_small_and_has_the_layer_and_its_own_log_group():
    function = RESOURCES["StatusFunction"]["Properties"]
    assert function["Layers"] == [{"Ref": "MediaJobsLayer"}]  # no ffmpeg
    assert function["MemorySize"] <= 512 and function["Timeout"] <= 30
    assert function["Role"] == {"Fn::GetAtt": ["StatusRole", "Arn"]}
    assert function["LoggingConfig"] == {"LogGroup": {"Ref": "StatusLogGroup"}}
    group = RESOURCES["StatusLogGroup"]["Properties"]
    assert group["RetentionInDays"] == 30 and group["LogGroupName"] == {
        "Fn::Sub": "/aws/lambda/${AWS::StackName}-status"
    }


def test_the_status_role_may_read_one_asset_item_decide_a_review_request_a_promo_and_write_its_logs_only(deployed):
    granted = {
        (action, str(r))
        for st in _statements("StatusRole")
        for action in _as_list(st["Action"])
        for r in _as_list(st["Resource"])
    }
    assert all(st["Effect"] == "Allow" for st in _statements("StatusRole"))
    assert granted == {
        ("dynamodb:GetItem", str({"Fn::GetAtt": ["AssetsTable", "Arn"]})),
        # The latest backfill (GET backfills/latest): a Query of the backfills' partition.
        ("dynamodb:Query", str({"Fn::GetAtt": ["AssetsTable", "Arn"]})),
        ("dynamodb:BatchGetItem", str({"Fn::GetAtt": ["AssetsTable", "Arn"]})),  # an album's assets
        # POST /review (REVIEWER_ARNS only): the held job's row, and its job request.
        ("dynamodb:GetItem", str({"Fn::GetAtt": ["JobsTable", "Arn"]})),
        ("dynamodb:UpdateItem", str({"Fn::GetAtt": ["JobsTable", "Arn"]})),
        ("sqs:SendMessage", str({"Fn::GetAtt": ["JobsQueue", "Arn"]})),
        ("sqs:GetQueueUrl", str({"Fn::GetAtt": ["JobsQueue", "Arn"]})),  # the queue's URL from its ARN
        # POST /promos: the album listed (originals/* only, a condition), its renditions'
        # rows read, the promo's row written, its record, reference and candidate written
        # (promo, job#, collect# partitions only: test_template_decisions.py).
        ("s3:ListBucket", str({"Fn::GetAtt": ["MediaBucket", "Arn"]})),
        ("dynamodb:BatchGetItem", str({"Fn::GetAtt": ["JobsTable", "Arn"]})),
        ("dynamodb:PutItem", str({"Fn::GetAtt": ["JobsTable", "Arn"]})),
        ("dynamodb:PutItem", str({"Fn::GetAtt": ["AssetsTable", "Arn"]})),
        ("dynamodb:DeleteItem", str({"Fn::GetAtt": ["AssetsTable", "Arn"]})),
        # POST /uploads: the URLs it signs write originals, nothing else.
        ("s3:PutObject", str({"Fn::Sub": "${MediaBucket.Arn}/originals/*"})),
        # POST /promos: the promo's job key is derived with the stack's key secret.
        ("secretsmanager:GetSecretValue", str({"Ref": "JobKeySecret"})),
        ("logs:CreateLogStream", str({"Fn::GetAtt": ["StatusLogGroup", "Arn"]})),
        ("logs:PutLogEvents", str({"Fn::GetAtt": ["StatusLogGroup", "Arn"]})),
        # With KmsKeyArn only (HasKmsKey): its environment is decrypted under that key, and a
        # review's job request is encrypted under it on the jobs queue.
        ("kms:Decrypt", str({"Ref": "KmsKeyArn"})),
        ("kms:GenerateDataKey", str({"Ref": "KmsKeyArn"})),
    }
    conditional = [
        st["Fn::If"]
        for p in RESOURCES["StatusRole"]["Properties"]["Policies"]
        for st in p["PolicyDocument"]["Statement"]
        if "Fn::If" in st
    ]
    assert [(c[0], c[1]["Sid"], c[2]) for c in conditional] == [("HasKmsKey", "Kms", {"Ref": "AWS::NoValue"})]
    trust = RESOURCES["StatusRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust == [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]
    roles = {name: r["Properties"] for name, r in deployed.items() if r["Type"] == "AWS::IAM::Role"}
    assert "ManagedPolicyArns" not in roles["StatusRole"]


# CloudFront over derivatives/.


def test_the_cdn_is_a_parameter_on_by_default():
    assert PARAMETERS["EnableCdn"]["Default"] == "true"
    assert PARAMETERS["EnableCdn"]["AllowedValues"] == ["true", "false"]
    assert TEMPLATE["Conditions"]["CdnEnabled"] == {"Fn::Equals": [{"Ref": "EnableCdn"}, "true"]}
    for name in ("DerivativesOriginAccessControl", "DerivativesDistribution", "DerivativesOnlyFunction"):
        assert RESOURCES[name]["Condition"] == "CdnEnabled", name
    assert TEMPLATE["Outputs"]["DerivativesDomainName"]["Condition"] == "CdnEnabled"


def test_the_distribution_reads_the_bucket_with_origin_access_control():
    oac = RESOURCES["DerivativesOriginAccessControl"]["Properties"]["OriginAccessControlConfig"]
    assert (oac["OriginAccessControlOriginType"], oac["SigningBehavior"], oac["SigningProtocol"]) == (
        "s3",
        "always",
        "sigv4",
    )
    (origin,) = RESOURCES["DerivativesDistribution"]["Properties"]["DistributionConfig"]["Origins"]
    assert origin["DomainName"] == {"Fn::GetAtt": ["MediaBucket", "RegionalDomainName"]}
    assert origin["OriginAccessControlId"] == {"Fn::GetAtt": ["DerivativesOriginAccessControl", "Id"]}
    assert origin["S3OriginConfig"] == {"OriginAccessIdentity": ""}  # no legacy identity
    assert "OriginPath" not in origin  # URLs are the keys: /derivatives/<job key>/<file>


def test_only_derivatives_are_served_over_https_with_the_origins_cache_control():
    config = RESOURCES["DerivativesDistribution"]["Properties"]["DistributionConfig"]
    (derivatives,) = config["CacheBehaviors"]
    assert derivatives["PathPattern"] == "derivatives/*"
    assert derivatives["ViewerProtocolPolicy"] == "redirect-to-https"
    assert derivatives["AllowedMethods"] == ["GET", "HEAD"]
    assert derivatives["CachePolicyId"] == CACHING_OPTIMIZED
    assert "FunctionAssociations" not in derivatives
    # Derivatives are written to stay a year: within CachingOptimized's maximum TTL.
    assert "max-age=31536000" in IMMUTABLE_CACHE_CONTROL and "immutable" in IMMUTABLE_CACHE_CONTROL
    default = config["DefaultCacheBehavior"]
    assert default["ViewerProtocolPolicy"] == "redirect-to-https"
    assert default["AllowedMethods"] == ["GET", "HEAD"]
    (association,) = default["FunctionAssociations"]
    assert association == {
        "EventType": "viewer-request",
        "FunctionARN": {"Fn::GetAtt": ["DerivativesOnlyFunction", "FunctionARN"]},
    }


def test_anything_outside_derivatives_is_answered_404_at_the_edge():
    function = RESOURCES["DerivativesOnlyFunction"]["Properties"]
    assert function["FunctionConfig"]["Runtime"] == "cloudfront-js-2.0" and function["AutoPublish"] is True
    code = function["FunctionCode"]
    assert "statusCode: 404" in code and "event.request" not in code  # whatever the request


def test_the_bucket_policy_lets_this_distribution_read_derivatives_only():
    statements = RESOURCES["MediaBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    (conditional,) = [st for st in statements if "Fn::If" in st]
    condition, statement, otherwise = conditional["Fn::If"]
    assert (condition, otherwise) == ("CdnEnabled", {"Ref": "AWS::NoValue"})
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "cloudfront.amazonaws.com"}
    assert statement["Action"] == "s3:GetObject"  # not ListBucket: a missing key is 403, no listing
    assert statement["Resource"] == {"Fn::Sub": "${MediaBucket.Arn}/derivatives/*"}
    assert statement["Condition"] == {
        "StringEquals": {
            "AWS:SourceArn": {
                "Fn::Sub": "arn:${AWS::Partition}:cloudfront::${AWS::AccountId}:distribution/${DerivativesDistribution}"
            }
        }
    }
    # The bucket stays private: Block Public Access stays on (a policy for one distribution is not public).
    access = RESOURCES["MediaBucket"]["Properties"]["PublicAccessBlockConfiguration"]
    assert all(
        access[k] is True for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")
    )


# Retention.


def _lifecycle() -> dict[str, dict[str, Any]]:
    rules = RESOURCES["MediaBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    return {rule["Id"]: rule for rule in rules}


def test_originals_move_to_glacier_instant_retrieval_after_the_parameters_days():
    rule = _lifecycle()["originals-to-instant-retrieval"]
    assert (rule["Status"], rule["Prefix"]) == ("Enabled", "originals/")
    assert rule["Transitions"] == [
        {"StorageClass": "GLACIER_IR", "TransitionInDays": {"Ref": "OriginalsInstantRetrievalDays"}}
    ]
    assert PARAMETERS["OriginalsInstantRetrievalDays"]["Default"] == 30


def test_noncurrent_originals_expire_after_the_parameters_days():
    rule = _lifecycle()["expire-noncurrent-originals"]
    assert (rule["Status"], rule["Prefix"]) == ("Enabled", "originals/")
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": {"Ref": "NoncurrentOriginalsDays"}}
    assert "ExpirationInDays" not in rule  # a current original is never expired
    assert PARAMETERS["NoncurrentOriginalsDays"]["Default"] == 30


def test_collected_derivatives_lose_their_noncurrent_versions_and_markers():
    rule = _lifecycle()["expire-collected-derivatives"]
    assert (rule["Status"], rule["Prefix"]) == ("Enabled", "derivatives/")
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert rule["ExpiredObjectDeleteMarker"] is True
    assert "Transitions" not in rule  # served often: they stay in S3 Standard


def test_expirations_of_originals_reach_the_worker_as_deletes():
    pattern = RESOURCES["OriginalEventsRule"]["Properties"]["EventPattern"]
    assert "Object Deleted" in pattern["detail-type"]
    assert pattern["detail"]["object"]["key"] == [{"prefix": "originals/"}]


# Linting.


def test_cfn_lint_finds_nothing():
    from cfnlint.api import ManualArgs, lint_file

    matches = lint_file(REPO / "template.yaml", config=ManualArgs())
    assert [str(m) for m in matches] == []


def _sam() -> Path | None:
    for candidate in (REPO / ".ci-sam" / "bin" / "sam", REPO / ".venv" / "bin" / "sam"):
        if candidate.is_file():
            return candidate
    found = shutil.which("sam")
    return Path(found) if found else None


@pytest.mark.subprocess
def test_sam_validate_lint_passes():
    sam = _sam()
    if sam is None:
        pytest.skip("no SAM CLI installed (.ci/run installs one in .ci-sam)")
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
    result = subprocess.run(
        [str(sam), "validate", "--lint", "--template-file", str(REPO / "template.yaml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
