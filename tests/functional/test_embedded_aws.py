"""The embedded AWS keeps AWS's atomic conditional writes: moto checks a condition and
writes without a lock, so the server serialises DynamoDB requests and S3 writes."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from werkzeug.test import EnvironBuilder

from mediajobs.adapters.clients import with_s3_signing
from mediajobs.local.embedded import AtomicWrites, EmbeddedAws, EmbeddedServer, LocalStack
from mediajobs.local.notifications import local_dispatcher, new_webhook_secret, seen_events
from mediajobs.local.receiver import WebhookReceiver
from mediajobs.local.runner import EventSourceMapping
from mediajobs.local.session import LocalSession
from tests.conftest import REPO, media_file
from tests.functional.signing import send, signed
from tests.functional.together import run_together

BUCKET = "atomic-writes"
TABLE = "atomic-writes"


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    running = EmbeddedServer("127.0.0.1", 0)
    running.start()
    yield running
    running.stop()


def client(server: EmbeddedServer, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=f"http://127.0.0.1:{server.port}",
        region_name="us-east-1",
        config=with_s3_signing(service),
        **server.credentials,
    )


@pytest.fixture(scope="module")
def stack(server: EmbeddedServer) -> dict[str, Any]:
    client(server, "s3").create_bucket(Bucket=BUCKET)
    client(server, "dynamodb").create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    queue_url = client(server, "sqs").create_queue(QueueName="atomic-writes")["QueueUrl"]
    return {"queue_url": queue_url}


LOCKS = {"dynamodb": AtomicWrites.DYNAMODB, "s3": AtomicWrites.S3_WRITES}


def held() -> str:
    return "+".join(name for name, lock in LOCKS.items() if lock.locked()) or "none"


def locks_held_during(server: EmbeddedServer, call: Any) -> list[str]:
    """Run ``call``; for each request it made, which of the locks were held while moto
    answered it."""
    middleware = server.writes
    seen: list[str] = []
    route = middleware.route

    def recording_route(environ: dict[str, Any]) -> Any:
        app, lock = route(environ)

        def recording_app(environ: dict[str, Any], start_response: Any) -> Any:
            seen.append(held())
            return app(environ, start_response)

        return recording_app, lock

    middleware.route = recording_route  # type: ignore[method-assign]
    try:
        call()
    finally:
        del middleware.route
    return seen


def test_dynamodb_requests_and_s3_writes_run_under_their_lock_and_nothing_else_does(server, stack):
    dynamodb, s3, sqs = client(server, "dynamodb"), client(server, "s3"), client(server, "sqs")
    item = {"k": {"S": "a"}}
    assert locks_held_during(server, lambda: dynamodb.put_item(TableName=TABLE, Item=item)) == ["dynamodb"]
    assert locks_held_during(server, lambda: dynamodb.get_item(TableName=TABLE, Key=item)) == ["dynamodb"]
    assert locks_held_during(server, lambda: s3.put_object(Bucket=BUCKET, Key="x", Body=b"x")) == ["s3"]
    assert locks_held_during(server, lambda: s3.delete_object(Bucket=BUCKET, Key="x")) == ["s3"]
    assert locks_held_during(server, lambda: s3.list_objects_v2(Bucket=BUCKET)) == ["none"]
    receive = lambda: sqs.receive_message(QueueUrl=stack["queue_url"], WaitTimeSeconds=0)  # noqa: E731
    assert locks_held_during(server, receive) == ["none"]


def test_a_presigned_s3_write_runs_under_the_s3_lock(server, stack):
    """No Authorization header: the signature is in the query string."""
    url = client(server, "s3").generate_presigned_url(
        "put_object", Params={"Bucket": BUCKET, "Key": "presigned"}, ExpiresIn=60
    )
    request = urllib.request.Request(url, data=b"body", method="PUT", headers={"Content-Type": "image/jpeg"})
    assert locks_held_during(server, lambda: urllib.request.urlopen(request).close()) == ["s3"]
    assert client(server, "s3").get_object(Bucket=BUCKET, Key="presigned")["Body"].read() == b"body"


def test_a_request_body_is_read_before_any_lock_is_taken(server, stack):
    """A client that stops half-way through its body must not hold up other writers."""
    reads: list[str] = []

    class Body(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            reads.append(held())
            return super().read(size)

        def readinto(self, buffer: Any) -> int:
            reads.append(held())
            return super().readinto(buffer)

    environ = EnvironBuilder(
        method="POST",
        headers={
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
            "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20261129/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0",
        },
        content_type="application/x-amz-json-1.0",
        data=b"{}",
    ).get_environ()
    environ["wsgi.input"] = Body(b"{}")
    statuses: list[str] = []
    # The middleware behind the authentication (which reads the body too, holding no lock).
    body = b"".join(server.writes(environ, lambda status, headers: statuses.append(status)))
    assert (reads[0], statuses, TABLE in json.loads(body)["TableNames"]) == ("none", ["200 OK"], True)


def test_s3_metadata_names_with_underscores_survive(server, stack):
    """moto's request handler keeps header names with "_" that werkzeug's drops."""
    s3 = client(server, "s3")
    s3.put_object(Bucket=BUCKET, Key="meta", Body=b"x", Metadata={"source_sha256": "abc", "plain": "1"})
    assert s3.head_object(Bucket=BUCKET, Key="meta")["Metadata"] == {"source_sha256": "abc", "plain": "1"}


def test_ten_conditional_updates_of_one_item_give_one_winner(server, stack):
    dynamodb = client(server, "dynamodb")

    def take_over(key: dict[str, Any], n: int) -> bool:
        try:
            dynamodb.update_item(
                TableName=TABLE,
                Key=key,
                UpdateExpression="SET holder = :new",
                ConditionExpression="holder = :old",
                ExpressionAttributeValues={":new": {"S": f"worker-{n}"}, ":old": {"S": "old"}},
            )
            return True
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
            return False

    for round_ in range(20):
        key = {"k": {"S": f"update-{round_}"}}
        dynamodb.put_item(TableName=TABLE, Item={**key, "holder": {"S": "old"}})
        assert run_together(functools.partial(take_over, key)).count(True) == 1


def test_ten_if_none_match_puts_of_one_key_give_one_winner(server, stack):
    s3 = client(server, "s3")

    def put(key: str, n: int) -> bool:
        try:
            s3.put_object(Bucket=BUCKET, Key=key, Body=bytes([n]) * 1000, IfNoneMatch="*")
            return True
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "PreconditionFailed"
            return False

    for round_ in range(20):
        assert run_together(functools.partial(put, f"put-{round_}")).count(True) == 1


def test_a_serialised_response_is_read_whole_then_closed(server):
    """PEP 3333: whoever calls a WSGI application closes the iterable it returns."""

    class Body:
        closed = False

        def __iter__(self) -> Iterator[bytes]:
            return iter([b"a", b"b"])

        def close(self) -> None:
            Body.closed = True

    middleware = AtomicWrites(server.writes.dispatcher)
    middleware.route = lambda environ: (lambda environ, start_response: Body(), AtomicWrites.DYNAMODB)  # type: ignore
    assert (middleware(EnvironBuilder(method="POST").get_environ(), None), Body.closed) == ([b"a", b"b"], True)


def test_in_flight_counts_a_delayed_message(server):
    """A hand-over's fresh copy is sent with DelaySeconds: moto counts it in neither the
    visible nor the not-visible count, only in ApproximateNumberOfMessagesDelayed, and a
    drain that ignored it would stop with the request still queued."""
    sqs = client(server, "sqs")
    url = sqs.create_queue(QueueName="in-flight-delayed")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    esm = EventSourceMapping(sqs, url, arn, lambda event, context: {"batchItemFailures": []})
    assert esm.in_flight() == 0
    sqs.send_message(QueueUrl=url, MessageBody="{}", DelaySeconds=900)
    assert esm.in_flight() == 1


def test_a_local_session_neither_writes_nor_needs_the_environment(tmp_path, monkeypatch):
    """Endpoint, credentials, region and the function's environment reach the worker as
    data (``LocalStack``), never through ``os.environ``: a session leaves the environment
    as it found it, and works where no AWS credentials are configured at all -- the
    dispatcher too, reading its webhook secret and putting on its bus."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    before = dict(os.environ)
    with LocalSession(template_path=REPO / "template.yaml") as session:
        assert dict(os.environ) == before
        assert session.settings.endpoint_url == session.stack.endpoint_url
        assert session.settings.jobs_table_name == session.stack.table_name
        session.upload(media_file("photos", "canon-40d-small.jpg"), "originals/env/photo.jpg")
        session.run()
        [result] = session.collector.results["originals/env/photo.jpg"]
        assert result.state == "done"
        secret = new_webhook_secret()
        receiver = WebhookReceiver(secret).start()
        try:
            local_dispatcher(session.stack, webhook_url=receiver.url, webhook_secret=secret).mapping.drain()
        finally:
            receiver.stop()
        # (the module's server is open too and shares moto's state: only this key is looked at)
        key = "originals/env/photo.jpg"
        told = [d.payload["type"] for d in receiver.received.deliveries if d.payload["asset"]["key"] == key]
        assert told == ["Asset Ready"]
        on_bus = [e["detail-type"] for e in seen_events(session.stack) if e["detail"]["asset"]["key"] == key]
        assert on_bus == ["Asset Ready"]
        assert dict(os.environ) == before
    assert dict(os.environ) == before


def test_the_users_settings_reach_the_worker_but_not_over_the_stacks_names(tmp_path):
    """As a worker on Lambda sees the function's environment: a setting the template does
    not set (DECODE_MEMORY_MB) and a limit the user may tune (MAX_PIXELS) come from the
    user's environment; the stack's own names (table, endpoint, region) never do."""
    environ = {
        "DECODE_MEMORY_MB": "60",
        "MAX_PIXELS": "1000",
        "JOBS_TABLE_NAME": "not-this-one",
        "AWS_ENDPOINT_URL": "http://example.invalid",
        "AWS_REGION": "eu-west-3",
        "WORK_DIR": str(tmp_path),
        "UNRELATED": "x",
    }
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-user-env", environ=environ) as stack:
        settings = stack.settings()
        assert (settings.decode_memory_mb, settings.max_pixels) == (60, 1000)
        assert (settings.jobs_table_name, settings.endpoint_url) == (stack.table_name, stack.endpoint_url)
        assert settings.region == "us-east-1" and settings.retry_base_s == 1  # LOCAL_DEFAULTS
        assert Path(settings.work_dir).parent == tmp_path
        assert "UNRELATED" not in stack.worker_env


def test_local_sessions_share_one_service_model_loader():
    """A fresh boto3 session parses a service's model again for its first client (0.7 to
    1 s here); the stack's sessions share one loader, whose search paths stay as they are."""
    required = [
        f.name
        for f in dataclasses.fields(LocalStack)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    given = ("function_env", "batch_size", "timeout_s", "credentials")
    names = {name: "unused" for name in required if name not in given}
    names["endpoint_url"] = "http://127.0.0.1:9"  # nothing listens: no request is made
    keys = {"aws_access_key_id": "LOCALUNUSED", "aws_secret_access_key": "unused"}
    stack = LocalStack(**names, function_env={}, batch_size=1, timeout_s=1, credentials=keys)  # type: ignore[arg-type]
    first, second = stack.boto_session(), stack.boto_session()
    assert first is not second and first.get_credentials().access_key == "LOCALUNUSED"
    loader = first._session.get_component("data_loader")
    paths = list(loader.search_paths)
    assert second._session.get_component("data_loader") is loader
    for service in ("sqs", "dynamodb"):
        stack.client(service)
    assert loader.search_paths == paths and len(set(paths)) == len(paths)


def test_connections_that_send_nothing_hold_up_no_other_request():
    """The server answers connections from a pool of threads that grows with the
    connections open at once: 100 clients that connected and sent nothing (or long polls)
    leave a thread for the next request (a pool of 64 threads left none: found by trying
    to break it)."""
    import socket

    with EmbeddedServer("127.0.0.1", 0) as server:
        silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(100)]
        try:
            # The timeout only stops a hang from hanging the suite.
            assert send(signed(server.endpoint_url + "/moto-api/", server.credentials))[0] == 200
        finally:
            for connection in silent:
                connection.close()
