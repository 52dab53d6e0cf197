"""docs/apps.md's Python blocks, run as written against the embedded AWS with the real worker:
the backend's signed ``POST uploads`` through a local function URL (``AuthType: AWS_IAM``: an
unsigned request is refused), the PUT of the bytes with the signed headers, the asset ready,
a second upload of the same bytes ready with 0 bytes of it read, and the webhook receiver's
verification."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import re
import time
import urllib.error
import urllib.request
from typing import Any

import boto3
import pytest

from mediajobs.local.session import LocalSession
from tests.conftest import REPO, media_file

pytestmark = pytest.mark.subprocess

PAGE = REPO / "docs" / "apps.md"


def blocks() -> dict[str, Any]:
    """The page's Python blocks marked ``# apps.md: <name>``, run in one namespace."""
    namespace: dict[str, Any] = {}
    found = re.findall(r"```python\n(# apps\.md: (\w+)\n.*?)```", PAGE.read_text(), flags=re.S)
    assert [name for _, name in found] == ["backend", "put", "webhook"]
    for code, _ in found:
        exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102 - the documentation's own code
    return namespace


@pytest.fixture(scope="module")
def session():
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-apps-doc") as s:
        yield s


@pytest.fixture(scope="module")
def status_url(session):
    """The status function's local URL, as ``mediajobs serve --worker`` serves it."""
    from mediajobs.local.commands.serve import status_url as served

    with served(session.stack) as url:
        yield url.url


@pytest.fixture(scope="module")
def keys(session) -> dict[str, str]:
    """The embedded AWS's credentials (new at each start)."""
    return session.stack.credentials


def test_the_backend_snippet_asks_for_an_upload_the_put_stores_it_and_the_asset_is_ready(session, status_url):
    code = blocks()
    credentials = boto3.Session(region_name=session.stack.region, **session.stack.credentials)
    data = media_file("photos", "orientation-landscape-5.jpg").read_bytes()
    sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
    keys = []
    for name in ("party.jpg", "same-bytes.jpg"):
        answer = code["ask_upload"](status_url, name, "image/jpeg", len(data), sha, "users/42", session=credentials)
        assert answer["path"] == "single" and answer["key"].endswith(f"/{name}")
        assert code["put_file"](answer, data) == 200
        session.run()
        keys.append(answer["key"])
    first, again = (session.collector.results[k][-1] for k in keys)
    assert (first.state, again.state) == ("done", "done")
    assert (first.bytes_read, again.bytes_read) == (len(data), 0)  # the second known by its hash
    refused = code["ask_upload"](status_url, "x.pdf", "application/pdf", 10, sha, "users/42", session=credentials)
    assert (refused["status"], refused["reason"]) == (400, "unsupported_format")
    other = code["ask_upload"](status_url, "b.jpg", "image/jpeg", len(data), sha, "users/42", session=credentials)
    assert code["put_file"](other, data[:-1] + b"\0") == 400  # not the bytes hashed: BadDigest


def test_the_function_url_refuses_an_unsigned_or_wrongly_signed_request(status_url):
    unsigned = urllib.request.Request(status_url + "uploads", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(unsigned)  # noqa: S310 - the local function URL
    assert refused.value.code == 403
    code = blocks()
    wrong = boto3.Session(region_name="us-east-1", aws_access_key_id="other", aws_secret_access_key="other")
    answer = code["ask_upload"](status_url, "a.jpg", "image/jpeg", 1, "x", "users/42", session=wrong)
    assert answer["status"] == 403


def test_the_webhook_snippet_verifies_a_signed_notification_and_refuses_a_forged_one():
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    code = blocks()
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    payload = json.dumps({"id": "n1", "type": "Asset Ready", "asset": {"state": "ready"}})
    now = int(time.time())
    signature = Webhook(secret).sign("n1", datetime.datetime.fromtimestamp(now, tz=datetime.UTC), payload)
    headers = {"webhook-id": "n1", "webhook-timestamp": str(now), "webhook-signature": signature}
    assert code["verified_notification"](secret, payload, headers)["type"] == "Asset Ready"
    with pytest.raises(WebhookVerificationError):
        code["verified_notification"](secret, payload.replace("ready", "failed"), headers)


def _signed(
    status_url: str, keys: dict[str, str], body: bytes, *, date: str | None = None, content_sha: str | None = None
):
    """A signed POST uploads request, its headers as botocore makes them (or with the
    ``X-Amz-Date`` and ``X-Amz-Content-SHA256`` given)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    headers = {"Content-Type": "application/json"}
    if content_sha is not None:
        headers["X-Amz-Content-SHA256"] = content_sha
    request = AWSRequest("POST", status_url + "uploads", data=body, headers=headers)
    signer = SigV4Auth(Credentials(keys["aws_access_key_id"], keys["aws_secret_access_key"]), "lambda", "us-east-1")
    if date is None:
        signer.add_auth(request)
    else:
        request.context["timestamp"] = date
        request.headers["X-Amz-Date"] = date
        signer._inject_signature_to_request(
            request, signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
        )  # noqa: SLF001
    return dict(request.prepare().headers)


def _post(url: str, body: bytes, headers: dict) -> int:
    sent = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(sent) as answer:  # noqa: S310 - the local function URL
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_the_function_url_refuses_another_body_than_signed_an_old_signature_and_a_malformed_one(status_url, keys):
    body = json.dumps({"name": "a.jpg"}).encode()
    tampered = json.dumps({"name": "b.jpg"}).encode()
    declared = _signed(status_url, keys, body, content_sha=hashlib.sha256(body).hexdigest())
    assert _post(status_url + "uploads", body, declared) == 400  # signed: the route answers (a refusal)
    assert _post(status_url + "uploads", tampered, declared) == 403  # another body than the signed hash
    assert _post(status_url + "uploads", body, _signed(status_url, keys, body, content_sha="UNSIGNED-PAYLOAD")) == 403
    assert _post(status_url + "uploads", body, _signed(status_url, keys, body, date="20200101T000000Z")) == 403
    malformed = {**declared, "Authorization": "AWS4-HMAC-SHA256 x/lambda/aws4_request"}
    assert _post(status_url + "uploads", body, malformed) == 403
    binary = b"\xff\xfe\x00"
    assert _post(status_url + "uploads", binary, _signed(status_url, keys, binary)) == 400  # not JSON: refused
