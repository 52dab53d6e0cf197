"""The webhook adapters against a receiver on 127.0.0.1: the signature verifies with the
Standard Webhooks library, answers are read whole (status, Retry-After, first bytes), a
timeout or a refused connection is an answer with no status, a redirect is not followed,
and only https (or http to a loopback host) is ever opened."""

from __future__ import annotations

import base64
import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from standardwebhooks import Webhook

from mediajobs.adapters.webhooks import StandardWebhooksSigner, UrllibTransport, checked_webhook_url
from mediajobs.domain.notifications import Notification, NotificationType
from mediajobs.service_layer.dispatch import WebhookDestination

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


class Receiver(http.server.ThreadingHTTPServer):
    """Answers each POST with the next of ``answers`` ((status, headers, body, delay_s)),
    keeping what it received."""

    def __init__(self, answers):
        super().__init__(("127.0.0.1", 0), Handler)
        self.answers = list(answers)
        self.received: list[tuple[dict, bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the standard library's name
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.received.append((dict(self.headers.items()), body))
        status, headers, answer, delay_s = self.server.answers.pop(0)
        if delay_s:
            time.sleep(delay_s)  # the receiver is slow: what the transport's timeout is for
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture()
def receiver(request) -> Iterator[Receiver]:
    server = Receiver(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


NID = "c" * 64
NOTE = Notification(
    NID, NotificationType.READY, "media", "originals/é.jpg", {"id": NID, "type": "Asset Ready", "n": "é"}
)


@pytest.mark.parametrize("receiver", [[(204, {}, b"", 0)]], indirect=True)
def test_a_delivery_verifies_with_the_standard_webhooks_library(receiver):
    dest = WebhookDestination(receiver.url, UrllibTransport(), StandardWebhooksSigner(SECRET))
    assert dest.deliver(NOTE, remaining_s=lambda: 60.0) == {"status": 204, "attempts": 1}
    ((headers, body),) = receiver.received
    assert Webhook(SECRET).verify(body, headers) == NOTE.payload
    named = {k.lower(): v for k, v in headers.items()}
    assert (named["webhook-id"], named["content-type"]) == (NID, "application/json")
    tampered = body.replace(b"Ready", b"Gone!")
    with pytest.raises(Exception, match="signature"):
        Webhook(SECRET).verify(tampered, headers)


@pytest.mark.parametrize(
    "receiver", [[(429, {"Retry-After": "2"}, b"slow down", 0), (400, {}, b"x" * 10_000, 0)]], indirect=True
)
def test_answers_are_read_with_their_headers_and_first_bytes(receiver):
    transport = UrllibTransport()
    first = transport.post(receiver.url, b"{}", {"content-type": "application/json"}, timeout_s=5)
    assert (first.status, first.headers.get("Retry-After"), first.body_head) == (429, "2", b"slow down")
    second = transport.post(receiver.url, b"{}", {}, timeout_s=5)
    assert (second.status, len(second.body_head)) == (400, 4096)


@pytest.mark.parametrize("receiver", [[(200, {}, b"", 3)]], indirect=True)
def test_a_receiver_slower_than_the_timeout_is_an_answer_without_status(receiver):
    assert UrllibTransport().post(receiver.url, b"{}", {}, timeout_s=0.5).status is None


def test_a_refused_connection_is_an_answer_without_status():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once it is closed
    assert UrllibTransport().post(f"http://127.0.0.1:{port}/", b"{}", {}, timeout_s=2).status is None


@pytest.mark.parametrize("receiver", [[(302, {"Location": "http://127.0.0.1:1/elsewhere"}, b"", 0)]], indirect=True)
def test_a_redirect_is_an_answer_not_followed(receiver):
    assert UrllibTransport().post(receiver.url, b"{}", {}, timeout_s=2).status == 302
    assert len(receiver.received) == 1


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.com/x", "http://example.com/hook", "gopher://127.0.0.1/", "https:///x", ""],
)
def test_only_https_or_a_loopback_receiver_is_opened(url):
    with pytest.raises(ValueError, match="webhook URL"):
        checked_webhook_url(url)
    with pytest.raises(ValueError):
        UrllibTransport().post(url, b"{}", {}, timeout_s=1)


@pytest.mark.parametrize("url", ["https://hooks.example.com/a?b=c", "http://127.0.0.1:8080/", "http://localhost/x"])
def test_https_and_loopback_receivers_are_allowed(url):
    assert checked_webhook_url(url) == url


def test_a_secret_that_is_not_a_standard_webhooks_secret_is_refused():
    with pytest.raises(ValueError, match="Standard Webhooks asks for 24 to 64"):
        StandardWebhooksSigner("")


def test_the_signature_is_the_specs_hmac_over_id_timestamp_body():
    import hashlib
    import hmac

    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{NID}.1700000000.{{}}".encode(), hashlib.sha256).digest()).decode()
    assert StandardWebhooksSigner(SECRET).signature(NID, 1_700_000_000, "{}") == f"v1,{expected}"


class Trickler:
    """A receiver on 127.0.0.1 that reads the request, then answers one byte every
    ``gap_s`` seconds: each read is quick, the answer as a whole is not."""

    def __init__(self, gap_s: float) -> None:
        self._gap_s = gap_s
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}/hook"

    def _serve(self) -> None:
        conn, _ = self._server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nx-padding: " + b"p" * 200 + b"\r\n\r\n":
                if self._stop.wait(self._gap_s):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def close(self) -> None:
        self._stop.set()
        self._server.close()


def test_a_receiver_that_trickles_its_answer_is_cut_at_the_timeout():
    """The timeout bounds the POST, not each read: a receiver sending a byte every 0.1 s
    would otherwise hold the dispatcher for 25 s past a 0.5 s timeout (and the invocation
    past what WebhookDestination counted on: timeout_s per POST)."""
    trickler = Trickler(gap_s=0.1)
    try:
        started = time.monotonic()
        answer = UrllibTransport().post(trickler.url, b"{}", {}, timeout_s=0.5)
        took = time.monotonic() - started
    finally:
        trickler.close()
    assert took < 2.0, f"a POST with timeout_s=0.5 took {took:.1f} s (answer {answer.status})"
    assert answer.status is None
