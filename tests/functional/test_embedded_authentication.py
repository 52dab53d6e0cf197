"""The embedded AWS refuses what AWS refuses, from any caller on the machine: a request not
signed with the stack's credentials -- unsigned, signed with other keys or another secret,
a cross-site form, a tampered presigned URL, a body other than the one signed, an old
signature -- is answered as the service answers it, and moto never sees it
(``mediajobs.local.authentication``). What the stack's clients send still works."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.auth
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from mediajobs.adapters.clients import with_s3_signing
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from tests.conftest import REPO
from tests.functional.signing import send, signed

EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-auth") as running:
        yield running


def other_client(stack: LocalStack, service: str, key_id: str, secret: str) -> Any:
    """A client of the stack's endpoint signing with ``key_id`` and ``secret``."""
    return boto3.client(
        service,
        endpoint_url=stack.endpoint_url,
        region_name=stack.region,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=with_s3_signing(service),
    )


def stored(stack: LocalStack, key: str) -> bytes | None:
    """The object's bytes, read with the stack's credentials; ``None`` when there is none."""
    try:
        return bytes(stack.client("s3").get_object(Bucket=stack.bucket, Key=key)["Body"].read())
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "NoSuchKey"
        return None


def raw(url: str, *, method: str = "GET", data: bytes | None = None, headers: dict | None = None) -> Any:
    """An unsigned request (urllib sends a body as a form unless ``headers`` give its type)."""
    return urllib.request.Request(url, data=data, method=method, headers=headers or {})


def forged_signature(stack: LocalStack, service: str) -> dict[str, str]:
    """The headers of a SigV4 signature a page could make up (a page can send any headers
    once a preflight admits them): a key id the stack does not have, any signature."""
    now = datetime.datetime.now(datetime.UTC)
    scope = f"forged/{now:%Y%m%d}/{stack.region}/{service}/aws4_request"
    return {
        "X-Amz-Date": f"{now:%Y%m%dT%H%M%SZ}",
        "Authorization": f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host;x-amz-date, Signature={'0' * 64}",
    }


def code_of(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    error = exc.value.response
    return error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Code"]


def test_an_unsigned_put_is_refused_as_an_anonymous_write_and_stores_nothing(stack):
    key = f"derivatives/{uuid.uuid4().hex}/anon.html"
    url = f"{stack.endpoint_url}/{stack.bucket}/{key}"
    status, body = send(
        raw(url, method="PUT", data=b"<script>alert(1)</script>", headers={"Content-Type": "text/html"})
    )
    assert (status, b"<Code>AccessDenied</Code>" in body) == (403, True)
    assert stored(stack, key) is None
    # The same PUT, signed with the stack's credentials, is stored.
    mine = signed(url, stack.credentials, method="PUT", data=b"<p>mine</p>", headers={"Content-Type": "text/html"})
    assert send(mine)[0] == 200
    assert stored(stack, key) == b"<p>mine</p>"


def test_an_unsigned_body_of_any_size_is_refused_before_it_is_read(stack):
    """A page in the browser can send an unsigned POST of any length to 127.0.0.1: it is
    refused from its headers, without waiting for (or holding) its body -- here a
    Content-Length of 1 GiB with 5 bytes sent, answered at once."""
    from tests.conftest import send_raw

    key = f"derivatives/{uuid.uuid4().hex}/huge.bin"
    host = urllib.parse.urlsplit(stack.endpoint_url).netloc
    head = f"PUT /{stack.bucket}/{key} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {2**30}"
    status, body = send_raw(stack.endpoint_url, head, b"hello")
    assert (status, b"<Code>AccessDenied</Code>" in body) == (403, True)
    other = "AWS4-HMAC-SHA256 Credential=LOCALNOTTHISSTACK000/20260101/us-east-1/s3/aws4_request"
    head += f"\r\nX-Amz-Date: 20260101T000000Z\r\nAuthorization: {other}, SignedHeaders=host, Signature={'0' * 64}"
    status, body = send_raw(stack.endpoint_url, head, b"hello")
    assert (status, b"<Code>InvalidAccessKeyId</Code>" in body) == (403, True)
    assert stored(stack, key) is None


def test_a_put_signed_with_other_keys_is_invalid_access_key_id(stack):
    key = f"derivatives/{uuid.uuid4().hex}/other.html"
    s3 = other_client(stack, "s3", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=stack.bucket, Key=key, Body=b"x")
    assert code_of(refused) == (403, "InvalidAccessKeyId")
    assert stored(stack, key) is None


def test_a_put_signed_with_the_key_id_and_another_secret_is_signature_does_not_match(stack):
    key = f"derivatives/{uuid.uuid4().hex}/guessed.html"
    s3 = other_client(stack, "s3", stack.credentials["aws_access_key_id"], "not-the-secret")
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=stack.bucket, Key=key, Body=b"x")
    assert code_of(refused) == (403, "SignatureDoesNotMatch")
    assert stored(stack, key) is None
    stack.client("s3").put_object(Bucket=stack.bucket, Key=key, Body=b"x")  # the right secret
    assert stored(stack, key) == b"x"


def test_a_cross_site_form_post_is_refused_and_stores_nothing(stack):
    """What any web page can send to 127.0.0.1: S3's browser-form upload, unsigned."""
    key = f"derivatives/evil-{uuid.uuid4().hex}/chain.html"
    boundary = "----mediajobs" + uuid.uuid4().hex
    fields = [("key", key), ("Content-Type", "text/html")]
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{n}"\r\n\r\n{v}\r\n' for n, v in fields]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="chain.html"\r\n'
        "Content-Type: text/html\r\n\r\n<script>fetch('/steal')</script>\r\n"
        f"--{boundary}--\r\n"
    )
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Origin": EVIL}
    status, body = send(
        raw(f"{stack.endpoint_url}/{stack.bucket}", method="POST", data="".join(parts).encode(), headers=headers)
    )
    assert (status, b"<Code>AccessDenied</Code>" in body) == (403, True)
    assert stored(stack, key) is None


def test_an_unsigned_list_objects_v2_is_refused(stack):
    key = f"derivatives/{uuid.uuid4().hex}/listed.txt"
    stack.client("s3").put_object(Bucket=stack.bucket, Key=key, Body=b"x")
    url = f"{stack.endpoint_url}/{stack.bucket}?list-type=2&prefix={urllib.parse.quote(key, safe='')}"
    status, body = send(raw(url, headers={"Origin": EVIL}))
    assert (status, b"<Code>AccessDenied</Code>" in body, key.encode() in body) == (403, True, False)
    status, body = send(signed(url, stack.credentials))
    assert (status, key.encode() in body) == (200, True)


def test_an_unsigned_or_forged_sqs_send_message_is_refused_and_sends_nothing(stack):
    sqs = stack.client("sqs")
    queue_url = sqs.create_queue(QueueName=f"auth-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    form = urllib.parse.urlencode({"Action": "SendMessage", "MessageBody": "evil", "Version": "2012-11-05"}).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": EVIL}
    status, body = send(raw(queue_url, method="POST", data=form, headers=headers))  # a page's form POST
    assert (status, b"<Code>MissingAuthenticationToken</Code>" in body) == (403, True)
    forged = {**headers, **forged_signature(stack, "sqs")}
    status, body = send(raw(queue_url, method="POST", data=form, headers=forged))
    assert (status, b"<Code>InvalidClientTokenId</Code>" in body) == (403, True)
    as_json = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"}
    payload = json.dumps({"QueueUrl": queue_url, "MessageBody": "evil"}).encode()
    request = raw(stack.endpoint_url + "/", method="POST", data=payload, headers=as_json)
    try:
        urllib.request.urlopen(request, timeout=30)  # noqa: S310 - the embedded AWS's URL
        raise AssertionError("an unsigned SQS JSON call was answered")
    except urllib.error.HTTPError as refused:
        assert (refused.code, refused.headers["x-amzn-query-error"]) == (403, "MissingAuthenticationToken;Sender")
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0)
    # The same form POST, signed with the stack's credentials, is sent.
    assert (
        send(signed(queue_url, stack.credentials, method="POST", data=form, headers=headers, service="sqs"))[0] == 200
    )
    [message] = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0)["Messages"]
    assert message["Body"] == "evil"


def test_an_unsigned_or_forged_dynamodb_call_is_refused_and_writes_nothing(stack):
    item = {"pk": {"S": f"auth#{uuid.uuid4().hex}"}, "sk": {"S": "x"}}
    payload = json.dumps({"TableName": stack.assets_table_name, "Item": item}).encode()
    headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "DynamoDB_20120810.PutItem"}
    status, body = send(raw(stack.endpoint_url + "/", method="POST", data=payload, headers=headers))
    assert (status, json.loads(body)["__type"]) == (400, "com.amazon.coral.service#MissingAuthenticationTokenException")
    forged = {**headers, **forged_signature(stack, "dynamodb")}
    status, body = send(raw(stack.endpoint_url + "/", method="POST", data=payload, headers=forged))
    assert (status, json.loads(body)["__type"]) == (400, "com.amazon.coral.service#UnrecognizedClientException")
    guessed = other_client(stack, "dynamodb", stack.credentials["aws_access_key_id"], "not-the-secret")
    with pytest.raises(ClientError) as refused:
        guessed.put_item(TableName=stack.assets_table_name, Item=item)
    assert code_of(refused) == (400, "InvalidSignatureException")
    dynamodb = stack.client("dynamodb")
    key = {"pk": item["pk"], "sk": item["sk"]}
    assert "Item" not in dynamodb.get_item(TableName=stack.assets_table_name, Key=key, ConsistentRead=True)
    dynamodb.put_item(TableName=stack.assets_table_name, Item=item)
    assert dynamodb.get_item(TableName=stack.assets_table_name, Key=key, ConsistentRead=True)["Item"] == item


def test_every_service_of_the_stack_refuses_other_keys(stack):
    """EventBridge, Secrets Manager, Firehose, DynamoDB Streams: each as its protocol answers."""
    calls = {
        "events": lambda c: c.list_event_buses(),
        "secretsmanager": lambda c: c.list_secrets(),
        "firehose": lambda c: c.list_delivery_streams(),
        "dynamodbstreams": lambda c: c.list_streams(),
        "sqs": lambda c: c.list_queues(),
    }
    for service, call in calls.items():
        call(stack.client(service))  # the stack's credentials
        with pytest.raises(ClientError) as refused:
            call(other_client(stack, service, "forged", "forged"))
        expected = (403, "InvalidClientTokenId") if service == "sqs" else (400, "UnrecognizedClientException")
        assert code_of(refused) == expected, service


def test_an_unsigned_moto_api_reset_is_refused_and_the_state_stays(stack):
    key = f"derivatives/{uuid.uuid4().hex}/kept.txt"
    stack.client("s3").put_object(Bucket=stack.bucket, Key=key, Body=b"kept")
    status, _ = send(raw(stack.endpoint_url + "/moto-api/reset", method="POST", data=b"", headers={"Origin": EVIL}))
    assert status == 403
    assert stored(stack, key) == b"kept"
    assert send(raw(stack.endpoint_url + "/moto-api/data.json"))[0] == 403  # moto's state, unsigned
    status, body = send(signed(stack.endpoint_url + "/moto-api/data.json", stack.credentials))
    assert (status, "s3" in json.loads(body)) == (200, True)


def test_a_presigned_url_with_a_tampered_signature_is_refused(stack):
    key = f"derivatives/{uuid.uuid4().hex}/presigned.txt"
    s3 = stack.client("s3")
    s3.put_object(Bucket=stack.bucket, Key=key, Body=b"shared")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": stack.bucket, "Key": key}, ExpiresIn=60)
    assert send(raw(url)) == (200, b"shared")
    signature = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["X-Amz-Signature"][0]
    tampered = url.replace(signature, ("0" if signature[0] != "0" else "1") + signature[1:])
    status, body = send(raw(tampered))
    assert (status, b"<Code>SignatureDoesNotMatch</Code>" in body) == (403, True)
    put_key = f"derivatives/{uuid.uuid4().hex}/presigned-put.txt"
    put = s3.generate_presigned_url("put_object", Params={"Bucket": stack.bucket, "Key": put_key}, ExpiresIn=60)
    other_key = put.replace(put_key, put_key.replace("presigned-put", "elsewhere"))
    assert send(raw(other_key, method="PUT", data=b"x"))[0] == 403  # the key is signed
    assert stored(stack, put_key.replace("presigned-put", "elsewhere")) is None
    assert send(raw(put, method="PUT", data=b"x", headers={"Content-Type": "text/plain"}))[0] == 200
    assert stored(stack, put_key) == b"x"


def test_a_url_presigned_with_signature_version_2_is_refused_as_s3_refuses_it(stack):
    """botocore presigns S3 URLs with SigV2 in us-east-1 unless asked for s3v4, and S3
    refuses SigV2 for buckets made after June 2020: the stack's clients ask for s3v4."""
    key = f"derivatives/{uuid.uuid4().hex}/v2.txt"
    stack.client("s3").put_object(Bucket=stack.bucket, Key=key, Body=b"x")
    v2 = boto3.client("s3", endpoint_url=stack.endpoint_url, region_name=stack.region, **stack.credentials)
    url = v2.generate_presigned_url("get_object", Params={"Bucket": stack.bucket, "Key": key}, ExpiresIn=60)
    assert "Signature=" in url and "X-Amz-Signature" not in url
    status, body = send(raw(url))
    assert (status, b"<Code>InvalidRequest</Code>" in body) == (400, True)


def test_a_signature_more_than_15_minutes_old_is_refused(stack, monkeypatch):
    old = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(minutes=16)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: old)
    with pytest.raises(ClientError) as refused:
        stack.client("s3").head_bucket(Bucket=stack.bucket)
    assert code_of(refused)[0] == 403  # HEAD: no body, the status only
    with pytest.raises(ClientError) as refused:
        stack.client("s3").list_objects_v2(Bucket=stack.bucket, MaxKeys=1)
    assert code_of(refused) == (403, "RequestTimeTooSkewed")
    with pytest.raises(ClientError) as refused:
        stack.client("dynamodb").list_tables()
    assert code_of(refused) == (400, "InvalidSignatureException")
    assert "Signature expired" in refused.value.response["Error"]["Message"]


def test_a_body_other_than_its_signed_sha256_is_refused(stack):
    key = f"derivatives/{uuid.uuid4().hex}/swapped.txt"
    url = f"{stack.endpoint_url}/{stack.bucket}/{key}"
    request = signed(url, stack.credentials, method="PUT", data=b"the signed body")
    request.data = b"another body!!!"  # the same length: only the hash tells
    status, body = send(request)
    assert (status, b"<Code>XAmzContentSHA256Mismatch</Code>" in body) == (400, True)
    assert stored(stack, key) is None


def test_an_x_amz_header_that_is_not_signed_is_refused(stack):
    key = f"derivatives/{uuid.uuid4().hex}/headers.txt"
    request = signed(f"{stack.endpoint_url}/{stack.bucket}/{key}", stack.credentials, method="PUT", data=b"x")
    request.add_header("x-amz-website-redirect-location", EVIL)
    status, body = send(request)
    assert (status, b"which were not signed" in body) == (403, True)
    assert stored(stack, key) is None


def test_a_cors_preflight_is_answered_unsigned(stack):
    """A browser sends the preflight without credentials: S3 answers it from the bucket's
    CORS rules, and so does the embedded AWS (the app page's PUT depends on it)."""
    origin = "http://127.0.0.1:9"
    rule = {"AllowedOrigins": [origin], "AllowedMethods": ["PUT"], "AllowedHeaders": ["*"]}
    bucket = f"auth-cors-{uuid.uuid4().hex[:8]}"
    s3 = stack.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [rule]})
    preflight = raw(
        f"{stack.endpoint_url}/{bucket}/originals/a.jpg",
        method="OPTIONS",
        headers={"Origin": origin, "Access-Control-Request-Method": "PUT"},
    )
    with urllib.request.urlopen(preflight, timeout=30) as answer:  # noqa: S310 - the embedded AWS's URL
        assert (answer.status, answer.headers["Access-Control-Allow-Origin"]) == (200, origin)


def test_what_the_projects_clients_send_is_accepted(stack, tmp_path):
    """botocore as installed: a multipart upload with SHA-256 checksums (the parts' bodies
    hashed and signed), a PUT with a checksum, a ranged GET, a copy, a batch delete."""
    s3 = stack.client("s3")
    source = tmp_path / "big.bin"
    source.write_bytes(bytes(range(256)) * 24 * 1024)  # 6 MiB: two parts of 5 MiB at most
    key = f"originals/auth/{uuid.uuid4().hex}.bin"
    transfer = TransferConfig(multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20)
    s3.upload_file(str(source), stack.bucket, key, ExtraArgs={"ChecksumAlgorithm": "SHA256"}, Config=transfer)
    assert stored(stack, key) == source.read_bytes()
    s3.put_object(Bucket=stack.bucket, Key=key + ".small", Body=b"small", ChecksumAlgorithm="SHA256")
    assert s3.get_object(Bucket=stack.bucket, Key=key, Range="bytes=0-3")["Body"].read() == bytes(range(4))
    s3.copy_object(Bucket=stack.bucket, Key=key + ".copy", CopySource={"Bucket": stack.bucket, "Key": key})
    objects = [{"Key": k} for k in (key, key + ".small", key + ".copy")]
    assert len(s3.delete_objects(Bucket=stack.bucket, Delete={"Objects": objects})["Deleted"]) == 3


def _chunked(data: bytes, chunk_bytes: int, url: str, keys: dict[str, str], *, tamper: bool = False) -> Any:
    """A PUT of ``data`` as S3's signed aws-chunked body (``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``:
    S3 API reference, "Transferring Payload in Multiple Chunks"), as the Java and .NET SDKs
    send it (botocore never does); ``tamper``: a byte of each chunk changed after signing."""
    chunks = [data[i : i + chunk_bytes] for i in range(0, len(data), chunk_bytes)] + [b""]
    framing = sum(len(f"{len(c):x};chunk-signature=") + 64 + 4 for c in chunks)
    timestamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    headers = {
        "Content-Encoding": "aws-chunked",
        "Content-Length": str(len(data) + framing),
        "Content-Type": "application/octet-stream",  # else urllib sends a form
        "X-Amz-Content-SHA256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "X-Amz-Date": timestamp,
        "X-Amz-Decoded-Content-Length": str(len(data)),
    }
    request = AWSRequest(method="PUT", url=url, headers=headers)
    request.context["timestamp"] = timestamp
    signer = S3SigV4Auth(Credentials(keys["aws_access_key_id"], keys["aws_secret_access_key"]), "s3", "us-east-1")
    seed = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    signer._inject_signature_to_request(request, seed)  # noqa: SLF001 - botocore's own Authorization
    key = ("AWS4" + keys["aws_secret_access_key"]).encode()
    for part in (timestamp[:8], "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    scope, previous, body = f"{timestamp[:8]}/us-east-1/s3/aws4_request", seed, b""
    for chunk in chunks:
        text = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", timestamp, scope, previous,
                          hashlib.sha256(b"").hexdigest(), hashlib.sha256(chunk).hexdigest()])  # fmt: skip
        previous = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
        sent = chunk[:-1] + b"!" if tamper and chunk else chunk
        body += f"{len(chunk):x};chunk-signature={previous}\r\n".encode() + sent + b"\r\n"
    return urllib.request.Request(url, data=body, headers=dict(request.prepare().headers), method="PUT")


def test_a_body_signed_chunk_by_chunk_is_checked_chunk_by_chunk(stack):
    data = bytes(range(256)) * 300
    key = f"originals/auth/{uuid.uuid4().hex}-chunked.bin"
    url = f"{stack.endpoint_url}/{stack.bucket}/{key}"
    status, body = send(_chunked(data, 8192, url, stack.credentials, tamper=True))
    assert (status, b"<Code>SignatureDoesNotMatch</Code>" in body) == (403, True)
    assert stored(stack, key) is None
    assert send(_chunked(data, 8192, url, stack.credentials))[0] == 200
    assert stored(stack, key) == data


def test_stacks_started_one_after_the_other_have_credentials_of_their_own(stack):
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-auth-second") as second:
        first_keys, second_keys = stack.credentials, second.credentials
        assert first_keys["aws_access_key_id"] != second_keys["aws_access_key_id"]
        assert first_keys["aws_secret_access_key"] != second_keys["aws_secret_access_key"]
        assert all(k["aws_access_key_id"].startswith("LOCAL") for k in (first_keys, second_keys))
        # One stack's credentials open no other.
        with pytest.raises(ClientError) as refused:
            other_client(
                second, "s3", first_keys["aws_access_key_id"], first_keys["aws_secret_access_key"]
            ).list_buckets()
        assert code_of(refused) == (403, "InvalidAccessKeyId")


def preflight(url: str, headers: dict | None = None, data: bytes | None = None) -> tuple[int, bytes]:
    """A request shaped as a browser's CORS preflight (``OPTIONS`` with ``Origin`` and
    ``Access-Control-Request-Method``), with whatever else ``headers`` and ``data`` add."""
    shaped = {"Origin": EVIL, "Access-Control-Request-Method": "POST", **(headers or {})}
    return send(raw(url, method="OPTIONS", data=data, headers=shaped))


def test_a_request_shaped_as_a_preflight_reads_and_changes_nothing(stack, tmp_path, monkeypatch):
    """A preflight is unsigned by nature, so nothing but a preflight's own answer may come of
    one: moto's own routes (its state dump, its recorder, a reset) are refused, and a
    "preflight" that names a service (a made-up Authorization) and an action (X-Amz-Target)
    reaches moto stripped of them -- no secret read, no queue made."""
    monkeypatch.chdir(tmp_path)  # where moto's recorder would write its file
    manager = stack.client("secretsmanager")
    secret = manager.get_secret_value(SecretId=f"{stack.bucket.removesuffix('-media')}-job-keys")["SecretString"]
    from tests.conftest import send_raw

    host = urllib.parse.urlsplit(stack.endpoint_url).netloc
    routes = ["/moto-api/data.json", "/moto-api/recorder/start-recording", "/moto-api/reset"]
    routes += ["/%6doto-api/data.json", "/%6Doto-api/recorder/start-recording", "/moto%2Dapi/data.json"]
    routes += ["//moto-api/data.json", f"http://{host}/%6doto-api/data.json", "%2Fmoto-api/data.json"]
    for route in routes:  # however moto's own routes are spelled, as the server decodes them
        head = f"OPTIONS {route} HTTP/1.1\r\nHost: {host}\r\nOrigin: {EVIL}\r\nAccess-Control-Request-Method: PUT"
        status, body = send_raw(stack.endpoint_url, head, b"")
        assert status in (400, 403) and secret.encode() not in body and b"secret_string" not in body, route
    assert not (tmp_path / "moto_recording").exists()
    scope = "AWS4-HMAC-SHA256 Credential=NOBODY/20000101/us-east-1/{service}/aws4_request, SignedHeaders=host"
    status, body = preflight(
        stack.endpoint_url + "/",
        {"Authorization": scope.format(service="secretsmanager") + ", Signature=0",
         "X-Amz-Target": "secretsmanager.GetSecretValue", "Content-Type": "application/x-amz-json-1.1"},
        json.dumps({"SecretId": f"{stack.bucket.removesuffix('-media')}-job-keys"}).encode(),
    )  # fmt: skip
    assert secret.encode() not in body
    name = f"attacker-{uuid.uuid4().hex[:8]}"
    preflight(
        f"{stack.endpoint_url}/?Action=CreateQueue&QueueName={name}",
        {"Authorization": scope.format(service="sqs") + ", Signature=0", "X-Amz-Target": "AmazonSQS.CreateQueue",
         "Content-Type": "application/x-amz-json-1.0"},
        json.dumps({"QueueName": name}).encode(),
    )  # fmt: skip
    assert not [u for u in stack.client("sqs").list_queues().get("QueueUrls", []) if name in u]
    assert stack.client("s3").head_bucket(Bucket=stack.bucket)  # the state is still there
    # and its body is never read: 1 GiB stated, 5 bytes sent, answered at once
    head = (
        f"OPTIONS /{stack.bucket}/x HTTP/1.1\r\nHost: {host}\r\nOrigin: {EVIL}\r\n"
        f"Access-Control-Request-Method: PUT\r\nContent-Length: {2**30}"
    )
    assert send_raw(stack.endpoint_url, head, b"hello")[0] in (200, 403)


def test_a_large_body_is_refused_from_its_headers_even_with_the_stacks_key_id(stack):
    """Any local process learns the stack's access key id (a presigned URL names it): a
    request naming it with a wrong S3 signature is refused from its headers (S3's signature
    covers the body's stated hash), and a body over what another service takes is refused
    from its length -- neither read (1 GiB stated, 5 bytes sent, answered at once)."""
    from tests.conftest import send_raw

    host = urllib.parse.urlsplit(stack.endpoint_url).netloc
    when = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    key_id = stack.credentials["aws_access_key_id"]
    for service, path, code in (("s3", f"/{stack.bucket}/derivatives/x/big.bin", b"SignatureDoesNotMatch"),
                                ("dynamodb", "/", b"too large")):  # fmt: skip
        authorization = (
            f"AWS4-HMAC-SHA256 Credential={key_id}/{when[:8]}/us-east-1/{service}/aws4_request, "
            f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={'0' * 64}"
        )
        head = (
            f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {2**30}\r\nX-Amz-Date: {when}\r\n"
            f"X-Amz-Content-SHA256: UNSIGNED-PAYLOAD\r\nAuthorization: {authorization}"
        )
        status, body = send_raw(stack.endpoint_url, head, b"hello")
        assert status in (403, 413) and code in body, (service, status, body)
