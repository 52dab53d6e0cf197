"""The embedded AWS's SigV4 check (``mediajobs.local.authentication``) on requests built here,
against AWS's own worked example, and where a served stack's credentials are kept
(``mediajobs.local.credentials``)."""

from __future__ import annotations

import calendar
import io
import stat
import time

import pytest

from mediajobs.local.authentication import (
    ANSWERS,
    Failure,
    Received,
    Refusal,
    Style,
    answer,
    refusal_of,
    style_of,
)
from mediajobs.local.credentials import (
    credentials_file,
    new_credentials,
    read_credentials_file,
    remove_credentials_file,
    write_credentials_file,
)

# -- AWS's worked example of a chunked upload (S3 API reference, "Signature Calculations for
# the Authorization Header: Transferring Payload in Multiple Chunks", Example: PUT Object):
# its credentials, time, headers, and the seed and chunk signatures it prints.

EXAMPLE_KEYS = {
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}
EXAMPLE_NOW_S = calendar.timegm(time.strptime("20130524T000000Z", "%Y%m%dT%H%M%SZ"))
SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
CHUNK_SIGNATURES = [
    (65536, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"),
    (1024, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"),
    (0, "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"),
]


def example(body: bytes, seed: str = SEED) -> Received:
    signed = ";".join(
        ["content-encoding", "content-length", "host", "x-amz-content-sha256", "x-amz-date"]
        + ["x-amz-decoded-content-length", "x-amz-storage-class"]
    )
    return Received(
        method="PUT",
        path="/examplebucket/chunkObject.txt",
        query="",
        headers={
            "host": "s3.amazonaws.com",
            "x-amz-date": "20130524T000000Z",
            "x-amz-storage-class": "REDUCED_REDUNDANCY",
            "authorization": "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            f"SignedHeaders={signed},Signature={seed}",
            "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            "content-encoding": "aws-chunked",
            "x-amz-decoded-content-length": "66560",
            "content-length": "66824",
        },
        body=io.BytesIO(body),
    )


def chunked(signatures: list[tuple[int, str]], byte: bytes = b"a") -> bytes:
    return b"".join(f"{size:x};chunk-signature={sig}\r\n".encode() + byte * size + b"\r\n" for size, sig in signatures)


def test_aws_s_worked_example_of_a_chunked_upload_is_accepted():
    body = chunked(CHUNK_SIGNATURES)
    assert len(body) == 66824  # the example's Content-Length
    assert refusal_of(example(body), EXAMPLE_KEYS, EXAMPLE_NOW_S) is None


def test_a_chunk_changed_a_chunk_signature_changed_or_another_seed_is_refused():
    tampered = bytearray(chunked(CHUNK_SIGNATURES))
    tampered[100] = ord("b")
    assert refusal_of(example(bytes(tampered)), EXAMPLE_KEYS, EXAMPLE_NOW_S) == Refusal(Failure.MISMATCH, "", "s3")
    swapped = [CHUNK_SIGNATURES[0], (1024, CHUNK_SIGNATURES[2][1]), (0, CHUNK_SIGNATURES[2][1])]
    assert refusal_of(example(chunked(swapped)), EXAMPLE_KEYS, EXAMPLE_NOW_S).failure is Failure.MISMATCH
    other_seed = example(chunked(CHUNK_SIGNATURES), seed="0" * 64)
    assert refusal_of(other_seed, EXAMPLE_KEYS, EXAMPLE_NOW_S).failure is Failure.MISMATCH


def test_a_chunked_body_cut_short_or_with_more_after_its_last_chunk_is_incomplete():
    body = chunked(CHUNK_SIGNATURES)
    for broken in (body[:66000], body[:-2], body + b"more\r\n", body.replace(b";chunk-signature=", b";x=", 1)):
        assert refusal_of(example(broken), EXAMPLE_KEYS, EXAMPLE_NOW_S).failure is Failure.BODY_MALFORMED
    assert ANSWERS[Style.S3][Failure.BODY_MALFORMED] == (400, "IncompleteBody")


def test_the_example_is_refused_with_other_keys_and_outside_its_15_minutes():
    request = example(chunked(CHUNK_SIGNATURES))
    other = {**EXAMPLE_KEYS, "aws_access_key_id": "LOCALOTHER"}
    assert refusal_of(request, other, EXAMPLE_NOW_S).failure is Failure.UNKNOWN_KEY
    assert refusal_of(request, EXAMPLE_KEYS, EXAMPLE_NOW_S + 15 * 60) is None
    assert refusal_of(request, EXAMPLE_KEYS, EXAMPLE_NOW_S + 15 * 60 + 1).failure is Failure.SKEWED
    assert refusal_of(request, EXAMPLE_KEYS, EXAMPLE_NOW_S - 15 * 60 - 1).failure is Failure.SKEWED


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, Style.S3),
        ({"x-amz-target": "DynamoDB_20120810.PutItem"}, Style.JSON),
        ({"x-amz-target": "AmazonSQS.SendMessage"}, Style.SQS_JSON),
        ({"content-type": "application/x-www-form-urlencoded"}, Style.QUERY),
    ],
)
def test_an_unsigned_request_is_refused_in_the_shape_its_form_says(headers, expected):
    body = b"Action=SendMessage&MessageBody=x" if "content-type" in headers else b"{}"
    received = Received("POST", "/123456789012/q", "", headers, io.BytesIO(body))
    refusal = refusal_of(received, EXAMPLE_KEYS, EXAMPLE_NOW_S)
    assert refusal == Refusal(Failure.MISSING) and style_of(received, refusal.service) is expected


def test_each_style_answers_in_its_own_shape():
    refusal = Refusal(Failure.UNKNOWN_KEY)
    status, headers, body = answer(refusal, Style.S3, "PUT")
    assert (status, b"<Code>InvalidAccessKeyId</Code>" in body) == ("403 Forbidden", True)
    assert answer(refusal, Style.S3, "HEAD")[2] == b""  # S3 answers a HEAD without a body
    status, headers, body = answer(refusal, Style.JSON, "POST")
    assert (status, b"com.amazon.coral.service#UnrecognizedClientException" in body) == ("400 Bad Request", True)
    status, headers, body = answer(refusal, Style.SQS_JSON, "POST")
    assert (status, dict(headers)["x-amzn-query-error"]) == ("403 Forbidden", "InvalidClientTokenId;Sender")
    status, headers, body = answer(refusal, Style.REST_JSON, "POST")
    assert (status, dict(headers)["x-amzn-ErrorType"]) == ("403 Forbidden", "UnrecognizedClientException")
    status, headers, body = answer(Refusal(Failure.MISSING), Style.QUERY, "POST")
    assert (status, b"<Code>MissingAuthenticationToken</Code>" in body) == ("403 Forbidden", True)


def test_a_cors_preflight_needs_no_signature_and_another_options_does():
    preflight = {"origin": "http://127.0.0.1:5001", "access-control-request-method": "PUT"}
    assert refusal_of(Received("OPTIONS", "/b/k", "", preflight, io.BytesIO()), EXAMPLE_KEYS, 0) is None
    bare = refusal_of(Received("OPTIONS", "/b/k", "", {"origin": "x"}, io.BytesIO()), EXAMPLE_KEYS, 0)
    assert bare == Refusal(Failure.MISSING)


# -- Credentials: new at each start, kept for the served commands by the user only.


def test_new_credentials_are_new_each_time_and_look_like_no_aws_key():
    made = [new_credentials() for _ in range(3)]
    assert len({m["aws_access_key_id"] for m in made}) == len({m["aws_secret_access_key"] for m in made}) == 3
    for m in made:
        assert set(m) == {"aws_access_key_id", "aws_secret_access_key"}  # long-term keys: no token
        assert m["aws_access_key_id"].startswith("LOCAL") and len(m["aws_access_key_id"]) == 20
        assert len(m["aws_secret_access_key"]) == 40 and m["aws_secret_access_key"].isalnum()


def test_the_credentials_file_is_the_users_alone_and_goes_when_its_serve_stops(tmp_path):
    environ = {"XDG_RUNTIME_DIR": str(tmp_path), "HOME": str(tmp_path / "home")}
    keys = new_credentials()
    path = write_credentials_file(5123, "http://127.0.0.1:5123", keys, environ)
    assert path == credentials_file(5123, environ) == tmp_path / "mediajobs" / "serve-5123.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_credentials_file(5123, environ) == keys
    assert read_credentials_file(5124, environ) is None  # another port: another serve
    later = new_credentials()  # a later serve on the port wrote its own: the first leaves it
    write_credentials_file(5123, "http://127.0.0.1:5123", later, environ)
    remove_credentials_file(path, keys)
    assert read_credentials_file(5123, environ) == later
    remove_credentials_file(path, later)
    assert not path.exists() and read_credentials_file(5123, environ) is None


def test_without_a_runtime_folder_the_credentials_go_to_the_users_cache(tmp_path):
    environ = {"HOME": str(tmp_path)}
    assert credentials_file(5000, environ) == tmp_path / ".cache" / "mediajobs" / "serve-5000.json"
    gone = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "not-there")}
    assert credentials_file(5000, gone) == tmp_path / ".cache" / "mediajobs" / "serve-5000.json"


def test_trailing_headers_signed_after_the_last_chunk_are_checked():
    """``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`` (S3 API reference, "... Including
    Trailing Headers"): the trailer's signature chains from the last chunk's, over its
    headers as ``name:value`` lines."""
    import hashlib
    import hmac

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    timestamp, scope = "20130524T000000Z", "20130524/us-east-1/s3/aws4_request"
    headers = {
        "Host": "s3.amazonaws.com",
        "X-Amz-Date": timestamp,
        "X-Amz-Content-SHA256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        "X-Amz-Trailer": "x-amz-checksum-crc32c",
        "X-Amz-Decoded-Content-Length": "3",
    }
    request = AWSRequest(method="PUT", url="http://s3.amazonaws.com/examplebucket/trailer.txt", headers=headers)
    request.context["timestamp"] = timestamp
    signer = S3SigV4Auth(Credentials(*EXAMPLE_KEYS.values()), "s3", "us-east-1")
    seed = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    key = ("AWS4" + EXAMPLE_KEYS["aws_secret_access_key"]).encode()
    for part in ("20130524", "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()

    def sign(*lines: str) -> str:
        return hmac.new(key, "\n".join(lines).encode(), hashlib.sha256).hexdigest()

    empty = hashlib.sha256(b"").hexdigest()
    first = sign("AWS4-HMAC-SHA256-PAYLOAD", timestamp, scope, seed, empty, hashlib.sha256(b"abc").hexdigest())
    last = sign("AWS4-HMAC-SHA256-PAYLOAD", timestamp, scope, first, empty, empty)
    trailer = "x-amz-checksum-crc32c:sOO8/Q==\n"
    trailer_signature = sign(
        "AWS4-HMAC-SHA256-TRAILER", timestamp, scope, last, hashlib.sha256(trailer.encode()).hexdigest()
    )

    def received(trailer_value: str) -> Received:
        body = (
            f"3;chunk-signature={first}\r\nabc\r\n0;chunk-signature={last}\r\n"
            f"x-amz-checksum-crc32c:{trailer_value}\r\nx-amz-trailer-signature:{trailer_signature}\r\n\r\n"
        ).encode()
        sent = {name.lower(): value for name, value in request.headers.items()}
        sent["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/{scope},"
            f"SignedHeaders={signer.signed_headers(signer.headers_to_sign(request))},Signature={seed}"
        )
        return Received("PUT", "/examplebucket/trailer.txt", "", sent, io.BytesIO(body))

    assert refusal_of(received("sOO8/Q=="), EXAMPLE_KEYS, EXAMPLE_NOW_S) is None
    assert refusal_of(received("AAAAAA=="), EXAMPLE_KEYS, EXAMPLE_NOW_S).failure is Failure.MISMATCH


def test_an_authorization_naming_a_field_twice_is_malformed():
    """moto routes a request by the first ``Credential=`` of its Authorization: a header
    naming one twice is refused as malformed, so the check and moto never read two."""
    from mediajobs.local.authentication import Failure, Received, refusal_of

    authorization = (
        "AWS4-HMAC-SHA256 Credential=X/20260101/us-east-1/dynamodb/aws4_request, "
        "Credential=LOCALKEY/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + "0" * 64
    )
    received = Received(
        "GET", "/b/k", "", {"host": "h", "authorization": authorization, "x-amz-date": "20260101T000000Z"}, io.BytesIO()
    )
    refusal = refusal_of(received, {"aws_access_key_id": "LOCALKEY", "aws_secret_access_key": "s"}, 0.0)
    assert refusal is not None and refusal.failure == Failure.MALFORMED
