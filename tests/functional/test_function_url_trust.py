"""The local function URL beside a browser: a request naming another ``Host`` (DNS
rebinding: a page must not reach the function through a name it controls, whoever signs)
is refused before the function sees it, and a payload Lambda would refuse is answered 413 as
Lambda answers it, without its body being read."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from mediajobs.local.credentials import new_credentials
from mediajobs.local.function_url import MAX_PAYLOAD_BYTES, TOO_LARGE_MESSAGE, FunctionUrl
from tests.conftest import ANSWER_WITHIN_S, send_raw

CREDENTIALS = new_credentials()  # an embedded AWS's, as serve makes them
KEYS = Credentials(CREDENTIALS["aws_access_key_id"], CREDENTIALS["aws_secret_access_key"])
REGION = "us-east-1"


class Recorded:
    """A function that records the events it is invoked with and answers 200."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.events.append(event)
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{}"}


@pytest.fixture
def function() -> Recorded:
    return Recorded()


@pytest.fixture
def url(function: Recorded) -> Iterator[str]:
    with FunctionUrl(function, credentials=CREDENTIALS, region=REGION) as served:
        yield served.url


def signed(url: str, body: bytes, host: str | None = None) -> dict[str, str]:
    """The headers of ``POST <url>uploads`` signed with SigV4 for ``lambda``, for ``Host``
    ``host`` (default: the URL's), as an SDK signs it."""
    named = host or urllib.parse.urlsplit(url).netloc
    request = AWSRequest("POST", f"http://{named}/uploads", data=body)
    request.headers["Content-Type"] = "application/json"
    SigV4Auth(KEYS, "lambda", REGION).add_auth(request)
    return {**request.prepare().headers, "Host": named}


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    where = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=ANSWER_WITHIN_S)
    try:
        connection.request("POST", "/uploads", body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_a_request_signed_for_its_own_host_reaches_the_function(url, function):
    body = b'{"name": "a.jpg"}'
    assert post(url, body, signed(url, body)) == (200, b"{}")
    port = urllib.parse.urlsplit(url).port
    assert post(url, body, signed(url, body, host=f"localhost:{port}"))[0] == 200
    assert len(function.events) == 2


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "127.0.0.1.nip.io:{port}"])
def test_a_request_signed_for_another_host_is_refused_421_before_the_function(url, function, host):
    named = host.format(port=urllib.parse.urlsplit(url).port)
    body = b'{"name": "a.jpg"}'
    status, answer = post(url, body, signed(url, body, host=named))  # a valid signature, for that Host
    assert status == 421 and "Message" in json.loads(answer)
    assert function.events == []


def test_a_body_over_lambdas_payload_limit_is_refused_413_without_being_read(url, function):
    host = urllib.parse.urlsplit(url).netloc
    head = f"POST /uploads HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {8 * 2**20}"
    status, answer = send_raw(url, head, b"{}")  # 2 bytes of the 8 MiB declared: answered, not waited for
    assert (status, json.loads(answer)) == (413, {"Message": TOO_LARGE_MESSAGE})
    assert TOO_LARGE_MESSAGE == "Request must be smaller than 6291456 bytes for the InvokeFunction operation"
    assert function.events == []


def test_a_chunked_body_over_the_limit_is_read_only_up_to_it_and_refused(url, function):
    host = urllib.parse.urlsplit(url).netloc
    head = f"POST /uploads HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
    chunk = b" " * (MAX_PAYLOAD_BYTES + 1)
    status, answer = send_raw(url, head, f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n0\r\n\r\n")
    assert (status, json.loads(answer)) == (413, {"Message": TOO_LARGE_MESSAGE})
    assert function.events == []


def test_a_signed_8_mib_request_padded_with_spaces_is_refused_413(url, function):
    body = b'{"name": "a.jpg"}' + b" " * (8 * 2**20)
    status, _ = post(url, body, signed(url, body))
    assert status == 413 and function.events == []


def test_a_binary_body_under_the_limit_whose_base64_event_is_over_it_is_refused_413(url, function):
    body = b"\xff" * (5 * 2**20)  # not UTF-8: the event carries it in base64, a third larger
    status, _ = post(url, body, signed(url, body))
    assert status == 413 and function.events == []
    small = b"\xff" * 1024
    assert post(url, small, signed(url, small))[0] == 200
    assert function.events[0]["isBase64Encoded"] is True


def test_a_request_shaped_as_a_preflight_is_refused_unsigned_and_never_reaches_the_function(url, function):
    """An AWS_IAM function URL answers only what is signed: an OPTIONS with Origin and
    Access-Control-Request-Method is no exception."""
    where = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=ANSWER_WITHIN_S)
    try:
        connection.request(
            "OPTIONS",
            "/assets?key=originals/a.jpg",
            headers={"Origin": "http://x", "Access-Control-Request-Method": "GET"},
        )
        answer = connection.getresponse()
        assert (answer.status, json.loads(answer.read())) == (403, {"Message": "Forbidden"})
    finally:
        connection.close()
    assert function.events == []
