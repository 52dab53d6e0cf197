"""The app page's server beside a browser (issue 39), on the embedded AWS: what ``GET
/api/file`` shows inline and what it hands over as a sandboxed attachment; the headers every
answer carries (``nosniff``, the page's Content Security Policy); a foreign ``Host`` (DNS
rebinding) and a cross-site request refused before anything is signed; the listing bounded
in count and in each name; a JSON body over its bound refused without being read."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import urllib.parse
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import pytest

from mediajobs.domain.manifest import DERIVATIVE_CONTENT_TYPES
from mediajobs.domain.uploads import MAX_PARTS
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from mediajobs.local.page import (
    MAX_JSON_BODY_BYTES,
    MAX_LISTED,
    MAX_SHOWN_MESSAGE_CHARS,
    MAX_SHOWN_NAME_CHARS,
    AppPage,
    page_for,
)
from tests.conftest import ANSWER_WITHIN_S, REPO, send_raw

SHA = base64.b64encode(bytes(32)).decode()
ASK = {"name": "a.jpg", "content_type": "image/jpeg", "size_bytes": 10, "sha256": SHA}


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-page-trust") as stack:
        yield stack


@pytest.fixture
def page(stack: LocalStack) -> Iterator[AppPage]:
    with page_for(stack) as page:
        yield page


def send(
    page: AppPage, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """``method path`` to the page (``Host`` as http.client names the URL unless given);
    the status, headers and body of its answer."""
    where = urllib.parse.urlsplit(page.url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=ANSWER_WITHIN_S)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        connection.close()


def post_json(page: AppPage, path: str, body: Any, **headers: str) -> tuple[int, http.client.HTTPMessage, bytes]:
    return send(page, "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json", **headers})


def policy(headers: http.client.HTTPMessage) -> dict[str, list[str]]:
    """The Content-Security-Policy header as directive -> sources."""
    directives = [d.split() for d in headers.get("Content-Security-Policy", "").split(";") if d.strip()]
    return {d[0]: d[1:] for d in directives}


# -- /api/file ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stored", ["text/html", "text/html; charset=utf-8", "image/svg+xml", "application/xhtml+xml", "TEXT/HTML"]
)
def test_a_derivative_of_a_type_no_recipe_writes_is_a_sandboxed_attachment_never_its_type(page, stack, stored):
    script = b"<html><script>fetch('/api/uploads').then(r => r.text()).then(alert)</script></html>"
    key = f"derivatives/trust/{hashlib.sha256(stored.encode()).hexdigest()[:8]}/card.html"
    stack.client("s3").put_object(Bucket=stack.bucket, Key=key, Body=script, ContentType=stored)
    status, headers, body = send(page, "GET", f"/api/file?key={key}")
    assert status == 200 and body == script  # handed over, not shown
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"] == "attachment"
    assert "sandbox" in policy(headers) and policy(headers)["default-src"] == ["'none'"]
    assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("stored", sorted(DERIVATIVE_CONTENT_TYPES))
def test_a_derivative_of_a_type_a_recipe_writes_is_shown_inline_with_that_type(page, stack, stored):
    assert {"image/webp", "image/avif", "image/jpeg", "video/mp4", "application/json"} <= DERIVATIVE_CONTENT_TYPES
    key = f"derivatives/trust/inline/{stored.replace('/', '-')}"
    stack.client("s3").put_object(Bucket=stack.bucket, Key=key, Body=b"bytes", ContentType=stored)
    status, headers, body = send(page, "GET", f"/api/file?key={key}")
    assert (status, body) == (200, b"bytes")
    assert headers["Content-Type"] == stored
    assert "Content-Disposition" not in headers and "sandbox" not in policy(headers)
    assert headers["X-Content-Type-Options"] == "nosniff"


# -- every answer ------------------------------------------------------------------------------


def test_every_answer_carries_nosniff_and_the_pages_policy(page, stack):
    stack.client("s3").put_object(
        Bucket=stack.bucket, Key="derivatives/trust/every/card.webp", Body=b"x", ContentType="image/webp"
    )
    asks = [
        ("GET", "/", None),
        ("GET", "/app.js", None),
        ("GET", "/app.css", None),
        ("GET", "/vendor/sha256.min.js", None),
        ("GET", "/api/config", None),
        ("GET", "/api/uploads", None),
        ("GET", "/api/file?key=derivatives/trust/every/card.webp", None),
        ("GET", "/api/file?key=derivatives/trust/none.webp", None),  # 404
        ("GET", "/nothing-here", None),  # 404
        ("POST", "/api/uploads", b"{}"),  # 415: no JSON type
    ]
    for method, path, body in asks:
        status, headers, _ = send(page, method, path, body)
        assert headers["X-Content-Type-Options"] == "nosniff", path
        assert headers["Referrer-Policy"] == "no-referrer", path
        assert headers["Cross-Origin-Resource-Policy"] == "same-origin", path
        assert policy(headers)["frame-ancestors"] == ["'none'"], path
    status, headers, _ = send(page, "GET", "/api/events", headers={"Host": "evil.example"})
    assert status == 421 and headers["X-Content-Type-Options"] == "nosniff"  # refusals too
    where = urllib.parse.urlsplit(page.url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=ANSWER_WITHIN_S)
    try:  # the event stream never ends: its headers only
        connection.request("GET", "/api/events")
        events = connection.getresponse()
        assert events.status == 200 and events.headers["X-Content-Type-Options"] == "nosniff"
    finally:
        connection.close()


def test_the_page_runs_its_own_scripts_only_and_connects_to_itself_and_the_embedded_s3_only(page, stack):
    status, headers, html = send(page, "GET", "/")
    assert status == 200
    directives = policy(headers)
    assert directives["default-src"] == ["'none'"]
    assert directives["script-src"] == ["'self'"] and directives["style-src"] == ["'self'"]  # nothing inline
    assert directives["img-src"] == ["'self'", "data:"]  # the placeholder is a data: URL
    assert directives["frame-ancestors"] == ["'none'"] and directives["base-uri"] == ["'none'"]
    # connect-src: itself, and exactly the origin the page PUTs the bytes to.
    status, _, answer = post_json(page, "/api/uploads", ASK)
    assert status == 200
    put = urllib.parse.urlsplit(json.loads(answer)["put"]["url"])
    assert directives["connect-src"] == ["'self'", f"{put.scheme}://{put.netloc}"]
    assert f"{put.scheme}://{put.netloc}" == stack.endpoint_url

    class Inline(HTMLParser):  # what the policy would block: inline script, style, handlers
        def __init__(self) -> None:
            super().__init__()
            self.found: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            names = {name for name, _ in attrs}
            if (tag == "script" and "src" not in names) or tag == "style" or "style" in names:
                self.found.append(tag)
            self.found.extend(name for name in names if name.startswith("on"))

    parser = Inline()
    parser.feed(html.decode())
    assert parser.found == []


# -- Host and Origin ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "127.0.0.1.evil.example:{port}"]
)
def test_a_foreign_host_is_refused_421_on_every_route(page, host):
    port = urllib.parse.urlsplit(page.url).port
    named = host.format(port=port)
    for method, path in (("GET", "/"), ("GET", "/api/uploads"), ("GET", "/api/config")):
        status, headers, body = send(page, method, path, headers={"Host": named})
        assert status == 421 and "message" in json.loads(body), path
        assert headers["Content-Type"] == "application/json"
    # DNS rebinding: the browser names the attacker's host in Origin and Host alike.
    rebound = {"Host": named, "Origin": f"http://{named}"}
    status, _, _ = post_json(page, "/api/uploads", ASK, **rebound)
    assert status == 421 and page.made() == []  # nothing signed


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "[::1]"])
def test_the_loopback_names_of_its_port_are_served(page, name):
    port = urllib.parse.urlsplit(page.url).port
    status, _, _ = send(page, "GET", "/api/config", headers={"Host": f"{name}:{port}"})
    assert status == 200
    status, _, _ = post_json(page, "/api/uploads", ASK, Host=f"{name}:{port}", Origin=f"http://{name}:{port}")
    assert status == 200


@pytest.mark.parametrize("path", ["/api/uploads", "/api/uploads/complete"])
@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://localhost:1", "https://127.0.0.1:{port}"])
def test_a_state_changing_request_from_another_origin_is_refused_403_and_nothing_is_signed(page, path, origin):
    port = urllib.parse.urlsplit(page.url).port
    status, _, body = post_json(page, path, ASK, Origin=origin.format(port=port))
    assert status == 403 and "message" in json.loads(body)
    assert page.made() == []


@pytest.mark.parametrize("path", ["/api/uploads", "/api/uploads/complete"])
@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
def test_a_json_route_takes_application_json_only_so_a_simple_request_cannot_reach_it(page, path, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    status, _, body = send(page, "POST", path, json.dumps(ASK).encode(), headers)
    assert status == 415 and "message" in json.loads(body)
    assert page.made() == []  # nothing signed
    origin = page.origin  # the page's own origin, the JSON type: it is answered
    status, _, _ = post_json(page, "/api/uploads", ASK, Origin=origin)
    assert status == 200 and len(page.made()) == 1


def test_the_exact_cross_site_request_of_the_review_is_refused(page):
    """``POST /api/uploads`` as ``text/plain`` from ``http://evil.example`` with ``Host:
    evil.example`` was signed (200)."""
    headers = {"Content-Type": "text/plain", "Origin": "http://evil.example", "Host": "evil.example"}
    status, _, _ = send(page, "POST", "/api/uploads", json.dumps(ASK).encode(), headers)
    assert status in (421, 403, 415) and page.made() == []


# -- bounds ------------------------------------------------------------------------------------


def test_the_listing_keeps_the_latest_200_refused_included_and_cuts_every_name(page):
    for i in range(210):
        ask = {**ASK, "name": f"{i:03d}-" + "\U0001f600" * 1_000, "content_type": "application/pdf"}
        status, _, body = post_json(page, "/api/uploads", ask)
        assert status == 400 and json.loads(body)["reason"] == "unsupported_format"
    status, _, body = send(page, "GET", "/api/uploads")
    assert len(json.loads(body)["uploads"]) == MAX_LISTED  # refused asks are kept within the bound too
    assert post_json(page, "/api/uploads", {**ASK, "name": "kept.jpg"})[0] == 200
    status, _, body = send(page, "GET", "/api/uploads")
    listed = json.loads(body)["uploads"]
    assert len(listed) == MAX_LISTED
    assert [u["name"][:3] for u in listed[:2]] == ["011", "012"] and listed[-1]["name"] == "kept.jpg"
    assert len({u["key"] for u in listed}) == MAX_LISTED  # each its own key
    for shown in listed:
        assert len(shown["name"]) <= MAX_SHOWN_NAME_CHARS
        assert shown["name"] == "kept.jpg" or shown["name"].endswith("\u2026")
        assert len((shown.get("refused") or {}).get("message", "")) <= MAX_SHOWN_MESSAGE_CHARS
    # The stated bound: each listed refusal at most 12 bytes a character (JSON's escape of
    # a character outside the BMP) of its name and words, and 512 of the rest.
    assert len(body) <= MAX_LISTED * (12 * (MAX_SHOWN_NAME_CHARS + MAX_SHOWN_MESSAGE_CHARS) + 512)


def test_a_refusals_words_are_cut_too(page):
    ask = {**ASK, "parts": None, "unknown-" + "u" * 100_000: 1}  # the refusal names the unknown field
    status, _, body = post_json(page, "/api/uploads", ask)
    assert status == 400
    assert len(json.loads(body)["message"]) <= MAX_SHOWN_MESSAGE_CHARS
    assert len(page.made()[-1]["refused"]["message"]) <= MAX_SHOWN_MESSAGE_CHARS


@pytest.mark.parametrize("path", ["/api/uploads", "/api/uploads/complete"])
def test_a_json_body_over_its_bound_is_refused_413_before_it_is_read(page, path):
    host = urllib.parse.urlsplit(page.url).netloc
    declared = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {MAX_JSON_BODY_BYTES + 1}"
    )
    status, body = send_raw(page.url, declared, b"{}")  # 2 bytes sent of the length declared: not waited for
    assert status == 413 and "message" in json.loads(body)
    chunk = b" " * (MAX_JSON_BODY_BYTES + 1)
    chunked = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
    status, _ = send_raw(page.url, chunked, f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n0\r\n\r\n")
    assert status == 413
    assert page.made() == []


def test_the_largest_completion_the_page_sends_is_within_the_bound(page):
    etag = '"' + "0" * 32 + '"'
    parts = [{"part_number": n, "etag": etag, "sha256": SHA} for n in range(1, MAX_PARTS + 1)]
    body = {"key": "originals/page/" + "k" * 200, "upload_id": "u" * 200, "parts": parts}
    assert len(json.dumps(body, separators=(",", ":"))) <= MAX_JSON_BODY_BYTES
    status, _, _ = post_json(page, "/api/uploads/complete", body)
    assert status != 413  # answered by the route (no such upload)


def test_the_bucket_admits_the_page_from_each_name_it_is_served_at(page, stack):
    rules = stack.client("s3").get_bucket_cors(Bucket=stack.bucket)["CORSRules"]
    port = urllib.parse.urlsplit(page.url).port
    assert sorted(rules[0]["AllowedOrigins"]) == sorted(
        f"http://{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")
    )
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", page.origin)


def test_the_page_completes_only_an_upload_it_asked_for(page):
    """Another's multipart upload (its id learnt somehow) under another prefix is no upload of
    the page's: completing it is refused before S3 is asked."""
    body = {"key": "originals/alice/2026/big-video.mp4", "upload_id": "their-upload", "parts": []}
    status, _, answer = post_json(page, "/api/uploads/complete", body)
    assert (status, json.loads(answer)["message"]) == (400, "not an upload this page asked for")


def test_event_streams_are_bounded(page, monkeypatch):
    """Each stream reads every listed upload's status about every second: at most
    MAX_EVENT_STREAMS at once, one more is 429; a stream that ends frees its slot."""
    from mediajobs.local import page as page_module

    monkeypatch.setattr(page_module, "MAX_EVENT_STREAMS", 2)
    where = urllib.parse.urlsplit(page.url)
    streams = []
    try:
        for _ in range(2):
            connection = http.client.HTTPConnection(where.hostname, where.port, timeout=ANSWER_WITHIN_S)
            connection.request("GET", "/api/events")
            answer = connection.getresponse()
            assert answer.status == 200 and answer.readline() == b"retry: 1000\n"
            streams.append((connection, answer))
        status, _, _ = send(page, "GET", "/api/events")
        assert status == 429
    finally:
        for connection, _ in streams:
            connection.close()
