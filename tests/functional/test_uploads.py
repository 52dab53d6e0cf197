"""Uploads through the status function's ``POST /uploads`` on the embedded AWS with the real
worker: the key layout, the presigned PUT whose signed headers are the type, the length and
the checksum, S3's refusal of a body whose checksum differs (the embedded AWS refuses as S3
does: 400 ``BadDigest``, nothing stored -- moto alone stores it), the multipart plan and its
completion, and a duplicate upload ready with 0 bytes of the original read."""

from __future__ import annotations

import base64
import calendar
import hashlib
import io
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import botocore.exceptions
import pytest

from mediajobs.bootstrap import build_uploads
from mediajobs.domain.assets import status_document
from mediajobs.entrypoints.status import make_status_app
from mediajobs.local.function_events import function_url_event
from mediajobs.local.session import LocalSession
from tests.conftest import REPO, media_file

pytestmark = pytest.mark.subprocess

KEY = re.compile(r"originals/users/42/(\d{4})/(\d{2})/(\d{2})/([0-9a-f]{16})/([A-Za-z0-9._-]+)")


@pytest.fixture(scope="module")
def session():
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-uploads") as s:
        yield s


def b64sha(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")


def app_of(session: LocalSession, **overrides: Any):
    stack = session.stack
    settings = stack.settings(media_bucket=stack.bucket, **overrides)
    return make_status_app(stack.assets(), settings, uploads=build_uploads(settings, stack.clients()))


def post(app, path: str, body: Any) -> tuple[int, dict]:
    event = function_url_event("", path=path, method="POST", body=json.dumps(body))
    response = app.resolve(event, None)
    return response["statusCode"], json.loads(response["body"])


def send(signed: dict, data: bytes, headers: dict | None = None) -> tuple[int, str, dict]:
    request = urllib.request.Request(signed["url"], data=data, method=signed["method"])
    # urllib sends a body as a form (application/x-www-form-urlencoded) unless told: a part's
    # type is not signed, and a browser sends a Blob slice's (none) or octet-stream.
    request.add_header("Content-Type", "application/octet-stream")
    for name, value in (headers if headers is not None else signed["headers"]).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - the embedded AWS's URL
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(), dict(refused.headers)


def asked(data: bytes, name: str = "My Photo (1).JPG", content_type: str = "image/jpeg", **extra: Any) -> dict:
    return {
        "name": name, "content_type": content_type, "size_bytes": len(data), "sha256": b64sha(data),
        "prefix": "users/42", **extra,
    }  # fmt: skip


def listed(session: LocalSession, prefix: str) -> list[str]:
    found = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=prefix)
    return [o["Key"] for o in found.get("Contents", [])]


def test_an_upload_gets_a_date_partitioned_key_and_a_put_whose_type_length_and_checksum_are_signed(session):
    data = media_file("photos", "orientation-landscape-2.jpg").read_bytes()
    status, answer = post(app_of(session), "/uploads", asked(data))
    assert status == 200 and answer["path"] == "single" and answer["bucket"] == session.stack.bucket
    match = KEY.fullmatch(answer["key"])
    assert match and match[5] == "My-Photo-1.jpg"
    put = answer["put"]
    assert put["method"] == "PUT" and put["headers"] == {
        "Content-Type": "image/jpeg",
        "Content-Length": str(len(data)),
        "x-amz-checksum-sha256": b64sha(data),
    }
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(put["url"]).query)
    assert query["X-Amz-SignedHeaders"] == ["content-length;content-type;host;x-amz-checksum-sha256"]
    assert "x-amz-checksum-sha256" not in {k.lower() for k in query}  # a header, never the query
    assert query["X-Amz-Expires"] == ["900"]
    # Another body under the signed checksum: refused, nothing stored.
    wrong = bytearray(data)
    wrong[100] ^= 0xFF
    code, body, _ = send(put, bytes(wrong))
    assert code == 400 and "<Code>BadDigest</Code>" in body
    assert listed(session, answer["key"]) == []
    # The right one: stored with its checksum, which HeadObject returns.
    assert send(put, data)[0] == 200
    head = session.s3.head_object(Bucket=session.stack.bucket, Key=answer["key"], ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == b64sha(data) and head["ContentType"] == "image/jpeg"
    session.run()
    (result,) = session.collector.results[answer["key"]]
    assert result.state == "done" and result.sha256 == hashlib.sha256(data).hexdigest()
    document = status_document(session.stack.assets().get(session.stack.bucket, answer["key"]))
    assert document["version"]["checksum_sha256"] is True  # the path taken: S3 holds its SHA-256


def test_botocores_own_put_with_a_wrong_checksum_is_refused_bad_digest_and_stores_nothing(session):
    key = "originals/users/42/botocore.bin"
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        session.s3.put_object(Bucket=session.stack.bucket, Key=key, Body=b"abc", ChecksumSHA256=b64sha(b"abd"))
    error = refused.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == ("BadDigest", 400)
    assert listed(session, key) == []


def test_the_same_bytes_uploaded_again_through_the_route_are_ready_with_0_bytes_of_the_original_read(session):
    data = media_file("photos", "orientation-landscape-3.jpg").read_bytes()
    app = app_of(session)
    keys = []
    for name in ("first.jpg", "again.jpg"):
        _, answer = post(app, "/uploads", asked(data, name=name))
        assert send(answer["put"], data)[0] == 200
        session.run()
        keys.append(answer["key"])
    first, again = (session.collector.results[k][-1] for k in keys)
    assert (first.state, again.state) == ("done", "done")
    assert first.bytes_read == len(data)  # read once, to render
    assert again.bytes_read == 0  # known by its checksum: not a byte read to hash it
    assert all(job.reused for job in again.jobs)


def test_a_large_file_gets_a_multipart_plan_each_part_signing_its_checksum_and_the_worker_hashes_it(session):
    data = media_file("photos", "orientation-landscape-4.jpg").read_bytes()
    app = app_of(session, multipart_above_bytes=1024)
    status, needed = post(app, "/uploads", asked(data))
    assert status == 400 and needed["reason"] == "parts_needed" and needed["part_size_bytes"] == 16 * 2**20
    # One part (the last may be under 5 MiB): its size and checksum asked, each signed.
    status, answer = post(app, "/uploads", asked(data, parts=[{"size_bytes": len(data), "sha256": b64sha(data)}]))
    assert status == 200 and answer["path"] == "multipart" and len(answer["parts"]) == 1
    [part] = answer["parts"]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(part["url"]).query)
    assert query["partNumber"] == ["1"] and query["uploadId"] == [answer["upload_id"]]
    assert query["X-Amz-SignedHeaders"] == ["content-length;host;x-amz-checksum-sha256"]
    wrong = data[:-1] + bytes([data[-1] ^ 1])
    assert send(part, wrong)[0] == 400  # BadDigest: a part is checked as a PUT is
    code, text, headers = send(part, data)
    assert code == 200, text
    etag = {k.lower(): v for k, v in headers.items()}["etag"]
    completion = {"key": answer["key"], "upload_id": answer["upload_id"], "parts": [
        {"part_number": 1, "etag": etag, "sha256": b64sha(data)},
    ]}  # fmt: skip
    assert post(app, "/uploads/complete", completion) == (200, {"key": answer["key"], "completed": True})
    head = session.s3.head_object(Bucket=session.stack.bucket, Key=answer["key"], ChecksumMode="ENABLED")
    assert head.get("ChecksumSHA256", "").endswith("-1")  # composite: not the object's SHA-256
    session.run()
    (result,) = session.collector.results[answer["key"]]
    assert result.state == "done" and result.sha256 == hashlib.sha256(data).hexdigest()
    assert result.bytes_read == len(data)  # hashed by the worker
    document = status_document(session.stack.assets().get(session.stack.bucket, answer["key"]))
    assert document["version"]["checksum_sha256"] is False  # the path taken: a composite checksum
    assert post(app, "/uploads/complete", {**completion, "key": "elsewhere/x.jpg"})[0] == 400
    # Parts S3 refuses, or not listed once each in order: 400 invalid_request, never a crash.
    other_status, other = post(app, "/uploads", asked(data, parts=[{"size_bytes": len(data), "sha256": b64sha(data)}]))
    wrong_etag = {"key": other["key"], "upload_id": other["upload_id"], "parts": [
        {"part_number": 1, "etag": '"0123456789abcdef0123456789abcdef"', "sha256": b64sha(data)},
    ]}  # fmt: skip
    code, _, put_headers = send(other["parts"][0], data)
    assert code == 200
    other_etag = {k.lower(): v for k, v in put_headers.items()}["etag"]
    status, refused = post(app, "/uploads/complete", wrong_etag)
    assert (status, refused["reason"]) == (400, "invalid_request") and "InvalidPart" in refused["message"]
    for numbers in ([True], [0], [10_001], [2, 1], [1, 1]):
        listing = [{"part_number": n, "etag": etag, "sha256": b64sha(data)} for n in numbers]
        status, refused = post(app, "/uploads/complete", {**wrong_etag, "parts": listing})
        assert (status, refused["reason"]) == (400, "invalid_request"), numbers
    assert post(app, "/uploads", "[" * 50_000)[0] == 400  # JSON nested past Python's limit: refused, not a crash
    # As S3 answers (moto: a 500, or the object written at the upload's own key, or accepted):
    right = {**wrong_etag, "parts": [{"part_number": 1, "etag": other_etag, "sha256": b64sha(data)}]}
    elsewhere = {**right, "key": "originals/users/99/mine.jpg"}
    status, refused = post(app, "/uploads/complete", elsewhere)  # another key's upload id
    assert (status, refused["reason"]) == (404, "source_missing") and listed(session, elsewhere["key"]) == []
    assert post(app, "/uploads/complete", {**right, "upload_id": "no-such-upload"})[0] == 404
    forged = {**right, "parts": [{**right["parts"][0], "sha256": b64sha(b"other bytes")}]}
    status, refused = post(app, "/uploads/complete", forged)
    assert (status, refused["reason"]) == (400, "invalid_request") and "InvalidPart" in refused["message"]
    assert post(app, "/uploads/complete", right) == (200, {"key": other["key"], "completed": True})


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"size_bytes": 300 * 2**20}, "too_large"),
        ({"size_bytes": 0}, "empty_file"),
        ({"content_type": "application/pdf"}, "unsupported_format"),
        ({"sha256": "not base64"}, "invalid_request"),
        ({"prefix": "../etc"}, "invalid_request"),
        ({"prefix": "users//42"}, "invalid_request"),
        ({"name": ""}, "invalid_request"),
        ({"extra": 1}, "invalid_request"),
    ],
)
def test_an_upload_is_refused_with_its_reason_before_anything_is_signed(session, change, reason):
    body = {**asked(b"x" * 10), **change}
    status, answer = post(app_of(session), "/uploads", body)
    assert status == 400 and answer["reason"] == reason and answer["message"]
    assert "put" not in answer and "url" not in json.dumps(answer)


def test_a_put_that_is_not_what_its_url_signed_is_refused_as_s3_refuses_it(session):
    """The embedded S3 checks a presigned URL's signature (moto checks none): another type,
    another length, a missing or unsigned checksum header, or an expired URL are 403."""
    from mediajobs.local.authentication import Failure, Received, Refusal, refusal_of

    data = media_file("photos", "orientation-landscape-7.jpg").read_bytes()
    _, answer = post(app_of(session), "/uploads", asked(data))
    put = answer["put"]
    signed = dict(put["headers"])
    other_type = {**signed, "Content-Type": "image/png"}
    code, body, _ = send(put, data, other_type)
    assert code == 403 and "<Code>SignatureDoesNotMatch</Code>" in body
    code, body, _ = send(put, data + b"more", {**signed, "Content-Length": str(len(data) + 4)})
    assert code == 403 and "<Code>SignatureDoesNotMatch</Code>" in body  # the length is signed
    without = {k: v for k, v in signed.items() if k != "x-amz-checksum-sha256"}
    assert send(put, data, without)[0] == 403
    code, body, _ = send(put, data, {**signed, "x-amz-meta-extra": "1"})
    assert code == 403 and "not signed" in body
    assert listed(session, answer["key"]) == []
    assert send(put, data)[0] == 200  # exactly as signed
    # Past its expiry (900 s), the same request is refused.
    split = urllib.parse.urlsplit(put["url"])
    environ = {
        "REQUEST_METHOD": "PUT", "QUERY_STRING": split.query, "RAW_URI": f"{split.path}?{split.query}",
        "HTTP_HOST": split.netloc, "CONTENT_TYPE": "image/jpeg", "CONTENT_LENGTH": str(len(data)),
        "HTTP_X_AMZ_CHECKSUM_SHA256": b64sha(data),
    }  # fmt: skip
    issued = urllib.parse.parse_qs(split.query)["X-Amz-Date"][0]
    at = calendar.timegm(time.strptime(issued, "%Y%m%dT%H%M%SZ"))
    received = Received.from_environ(environ, io.BytesIO(data))
    keys = session.stack.credentials
    assert refusal_of(received, keys, at + 10) is None
    assert refusal_of(received, keys, at + 901) == Refusal(Failure.EXPIRED, "Request has expired", "s3")
