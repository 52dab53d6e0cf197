"""The template's contract for uploads (``POST <StatusUrl>uploads``): the route is the status
function's, its role may write originals only, the limits it checks are the worker's, and the
media bucket's CORS rule admits the ``AppOrigins`` parameter's pages only, for PUT with the
signed headers."""

from __future__ import annotations

from mediajobs.local.template import load_template
from mediajobs.settings import _ENV_NAMES
from tests.conftest import REPO

TEMPLATE = load_template(REPO / "template.yaml")
RESOURCES = TEMPLATE["Resources"]
PARAMETERS = TEMPLATE["Parameters"]


def _statements(role: str) -> list[dict]:
    """The role's statements (a conditional one, ``Fn::If``, is its KMS grant: left out)."""
    return [
        st for p in RESOURCES[role]["Properties"]["Policies"] for st in p["PolicyDocument"]["Statement"] if "Sid" in st
    ]


def test_the_upload_route_is_the_status_functions_behind_iam_with_the_workers_limits():
    function = RESOURCES["StatusFunction"]["Properties"]
    assert function["FunctionUrlConfig"] == {"AuthType": "AWS_IAM"}
    env = function["Environment"]["Variables"]
    assert env["MAX_INPUT_BYTES"] == {"Ref": "MaxInputBytes"}  # the limit the worker refuses above
    assert env["MULTIPART_ABOVE_BYTES"] == {"Ref": "MultipartAboveBytes"}
    assert env["MEDIA_BUCKET"] == {"Ref": "MediaBucket"}
    assert set(env) <= set(_ENV_NAMES.values())
    assert PARAMETERS["MultipartAboveBytes"]["Default"] == 100 * 2**20
    assert PARAMETERS["MultipartAboveBytes"]["MinValue"] == 5 * 2**20  # S3's smallest part
    assert PARAMETERS["MultipartAboveBytes"]["MaxValue"] == 5 * 2**30  # S3's largest single PUT


def test_the_status_role_may_put_originals_and_no_other_object():
    puts = [st for st in _statements("StatusRole") if "s3:PutObject" in str(st["Action"])]
    assert puts == [
        {
            "Sid": "UploadOriginals",
            "Effect": "Allow",
            "Action": "s3:PutObject",
            "Resource": {"Fn::Sub": "${MediaBucket.Arn}/originals/*"},
        }
    ]
    writes = {
        a
        for st in _statements("StatusRole")
        for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
    }
    assert not {a for a in writes if a.startswith("s3:") and a not in ("s3:PutObject", "s3:ListBucket")}


def test_the_buckets_cors_rule_admits_the_app_origins_for_a_signed_put_only():
    assert PARAMETERS["AppOrigins"]["Default"] == ""
    assert TEMPLATE["Conditions"]["HasAppOrigins"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "AppOrigins"}, ""]}]}
    cors = RESOURCES["MediaBucket"]["Properties"]["CorsConfiguration"]
    condition, rules, otherwise = cors["Fn::If"]
    assert (condition, otherwise) == ("HasAppOrigins", {"Ref": "AWS::NoValue"})  # none without origins
    [rule] = rules["CorsRules"]
    assert rule["AllowedMethods"] == ["PUT"]
    assert rule["AllowedOrigins"] == {"Fn::Split": [",", {"Ref": "AppOrigins"}]}
    assert rule["AllowedHeaders"] == [
        "content-type",
        "x-amz-checksum-sha256",
    ]  # what the PUT signs (length: the browser's)
    assert rule["ExposedHeaders"] == ["ETag", "x-amz-checksum-sha256"]  # a part's ETag completes a multipart upload


def test_a_single_put_is_never_planned_above_s3s_5_gib():
    import pytest

    from mediajobs.settings import Settings

    assert Settings(multipart_above_bytes=5 * 2**30).multipart_above_bytes == 5 * 2**30
    with pytest.raises(ValueError, match="at most 5 GiB"):
        Settings(multipart_above_bytes=5 * 2**30 + 1)
