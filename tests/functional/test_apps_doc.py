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
from mediajobs.local.stack import CREDENTIALS
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


def test_the_backend_snippet_asks_for_an_upload_the_put_stores_it_and_the_asset_is_ready(session, status_url):
    code = blocks()
    credentials = boto3.Session(region_name=session.stack.region, **CREDENTIALS)
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
