"""The webhook adapters against a receiver on 127.0.0.1: the signature verifies with the
Standard Webhooks library, answers are read whole (status, Retry-After, first bytes), a
timeout or a refused connection is an answer with no status, a redirect is not followed,
and only https (or http to a loopback host) is ever opened. Each POST resolves its host
once (an injected resolver: no real DNS here), refuses it if any address is one no webhook
is sent to -- before any connection -- and connects to the checked address itself, while
TLS verifies the certificate for the name and sends it as SNI."""

from __future__ import annotations

import base64
import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from standardwebhooks import Webhook

from mediajobs.adapters.webhooks import HttpTransport, StandardWebhooksSigner, open_socket
from mediajobs.domain.notifications import Notification, NotificationType
from mediajobs.domain.webhook_targets import LOOPBACK_NETWORKS, WebhookTargetRefused, parse_networks
from mediajobs.service_layer.dispatch import DeliveryRefused, WebhookDestination

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
LOOPBACK = parse_networks(LOOPBACK_NETWORKS)


def local_transport(**kwargs) -> HttpTransport:
    """A transport admitting loopback, as ``mediajobs serve`` does for a local receiver."""
    return HttpTransport(allowed=LOOPBACK, **kwargs)


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
    dest = WebhookDestination(receiver.url, local_transport(), StandardWebhooksSigner(SECRET))
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
    transport = local_transport()
    first = transport.post(receiver.url, b"{}", {"content-type": "application/json"}, timeout_s=5)
    assert (first.status, first.headers.get("Retry-After"), first.body_head) == (429, "2", b"slow down")
    second = transport.post(receiver.url, b"{}", {}, timeout_s=5)
    assert (second.status, len(second.body_head)) == (400, 4096)


@pytest.mark.parametrize("receiver", [[(200, {}, b"", 3)]], indirect=True)
def test_a_receiver_slower_than_the_timeout_is_an_answer_without_status(receiver):
    assert local_transport().post(receiver.url, b"{}", {}, timeout_s=0.5).status is None


def test_a_refused_connection_is_an_answer_without_status():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once it is closed
    assert local_transport().post(f"http://127.0.0.1:{port}/", b"{}", {}, timeout_s=2).status is None


@pytest.mark.parametrize(
    "receiver",
    [
        [(status, {"Location": "http://169.254.169.254/latest/meta-data/"}, b"", 0)]
        for status in (301, 302, 303, 307, 308)
    ],
    indirect=True,
    ids=["301", "302", "303", "307", "308"],
)
def test_a_redirect_is_an_answer_not_followed(receiver):
    status = receiver.answers[0][0]
    assert local_transport().post(receiver.url, b"{}", {}, timeout_s=2).status == status
    assert len(receiver.received) == 1


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "http://example.com/hook", ""])
def test_the_transport_opens_only_https_or_http_to_a_loopback_name(url):
    with pytest.raises(ValueError, match="webhook URL"):
        local_transport().post(url, b"{}", {}, timeout_s=1)


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
        answer = local_transport().post(trickler.url, b"{}", {}, timeout_s=0.5)
        took = time.monotonic() - started
    finally:
        trickler.close()
    assert took < 2.0, f"a POST with timeout_s=0.5 took {took:.1f} s (answer {answer.status})"
    assert answer.status is None


# --------------------------------------------------------------------------- addresses checked at send time


class Resolver:
    """An injected resolver: ``host -> addresses`` for each call in turn (the last repeats);
    records what it was asked."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class NoConnection:
    """A connector that records every connection asked of it, and opens none."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def __call__(self, address, port, timeout_s):
        self.asked.append((str(address), port))
        raise AssertionError(f"a connection to {address}:{port} was opened")


@pytest.mark.parametrize(
    ("addresses", "said"),
    [
        (["10.0.0.7"], "hooks.example.com resolves to 10.0.0.7, which is a private network (RFC 1918; 10.0.0.0/8)"),
        (["93.184.215.14", "192.168.1.20"], "resolves to 192.168.1.20, which is a private network"),
        (["169.254.169.254"], "instance metadata service"),
        (["::ffff:172.16.0.5"], "carrying IPv4 172.16.0.5"),
        (["127.0.0.1"], "loopback"),
    ],
    ids=["private", "one-of-two-private", "metadata", "mapped-ipv6", "loopback-not-admitted"],
)
def test_a_name_resolving_to_a_refused_address_is_refused_for_good_before_any_connection(addresses, said):
    resolver, connector = Resolver(addresses), NoConnection()
    transport = HttpTransport(resolver=resolver, connect=connector)
    with pytest.raises(WebhookTargetRefused) as refused:
        transport.post("https://hooks.example.com/hook", b"{}", {}, timeout_s=2)
    assert said in str(refused.value)
    dest = WebhookDestination("https://hooks.example.com/hook", transport, StandardWebhooksSigner(SECRET))
    with pytest.raises(DeliveryRefused) as permanent:
        dest.deliver(NOTE, remaining_s=lambda: 60.0)
    assert (permanent.value.reason, permanent.value.status) == ("webhook_target_refused", None)
    assert said in permanent.value.detail
    assert connector.asked == [] and resolver.asked == [("hooks.example.com", 443)] * 2


def test_a_loopback_receiver_gets_no_connection_unless_loopback_is_admitted():
    """Deployed (nothing admitted), a name resolving to 127.0.0.1 -- on Lambda, the Runtime
    API's address -- gets no TCP connection at all: the listener has nothing to accept."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        transport = HttpTransport(resolver=Resolver(["127.0.0.1"]))
        for url in (f"http://localhost:{port}/", f"http://127.0.0.1:{port}/"):
            with pytest.raises(WebhookTargetRefused, match="loopback"):
                transport.post(url, b"{}", {}, timeout_s=2)
        with pytest.raises(BlockingIOError):
            listener.accept()  # no connection came


@pytest.mark.parametrize("receiver", [[(204, {}, b"", 0)]], indirect=True)
def test_a_name_resolving_to_an_admitted_address_is_posted_to_with_the_name_as_host(receiver):
    port = receiver.server_address[1]
    resolver = Resolver(["127.0.0.1"])
    transport = HttpTransport(allowed=LOOPBACK, resolver=resolver)
    assert transport.post(f"http://localhost:{port}/hook?a=b", b"{}", {}, timeout_s=2).status == 204
    ((headers, _),) = receiver.received
    assert headers["Host"] == f"localhost:{port}" and resolver.asked == [("localhost", port)]


def test_a_name_that_does_not_resolve_is_an_answer_without_status():
    def unresolvable(host, port):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    assert HttpTransport(resolver=unresolvable).post("https://nowhere.example/", b"{}", {}, timeout_s=1).status is None


class TlsReceiver:
    """An HTTPS receiver on 127.0.0.1 whose certificate names ``cert_name`` (signed by a
    test CA, ``ca_pem``); it records the SNI each handshake sent and each request's
    headers, and answers 204."""

    def __init__(self, tmp_path, cert_name: str) -> None:
        import ssl

        self.ca_pem, cert_pem, key_pem = _certificates(cert_name)
        (tmp_path / "cert.pem").write_bytes(cert_pem)
        (tmp_path / "key.pem").write_bytes(key_pem)
        self.sni: list[str | None] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
        context.sni_callback = lambda sock, name, ctx: self.sni.append(name)
        self.server = Receiver([(204, {}, b"", 0)])
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def client_context(self):
        import ssl

        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        return context

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _certificates(name: str) -> tuple[bytes, bytes, bytes]:
    """A CA's certificate, and a certificate for ``name`` it signed with its key (PEM)."""
    datetime = pytest.importorskip("datetime")
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mediajobs test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), leaf.public_bytes(pem), key_pem


class ToReceiver:
    """A connector that records the address and port asked, and connects to the local
    receiver instead (the public address stands for it: this machine reaches no internet)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.asked: list[tuple[str, int]] = []

    def __call__(self, address, port, timeout_s):
        self.asked.append((str(address), port))
        return open_socket(type(address)("127.0.0.1"), self.port, timeout_s)


def test_a_name_resolving_to_a_public_address_is_connected_to_there_once_with_tls_for_the_name(tmp_path, monkeypatch):
    """One resolution per POST, no second lookup (socket.getaddrinfo is never asked for the
    name), the connection to exactly the address checked; the certificate verified for the
    name, the name sent as SNI and as the Host header."""
    looked_up: list[object] = []
    real_getaddrinfo = socket.getaddrinfo
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda host, *a, **k: looked_up.append(host) or real_getaddrinfo(host, *a, **k)
    )
    tls = TlsReceiver(tmp_path, "hooks.example.com")
    try:
        resolver, connector = Resolver(["93.184.215.14"]), ToReceiver(tls.port)
        transport = HttpTransport(resolver=resolver, connect=connector, context=tls.client_context())
        answer = transport.post("https://hooks.example.com/hook", b"{}", {}, timeout_s=5)
        assert answer.status == 204
        assert connector.asked == [("93.184.215.14", 443)]
        assert resolver.asked == [("hooks.example.com", 443)]
        assert "hooks.example.com" not in looked_up
        assert tls.sni == ["hooks.example.com"]
        ((headers, _),) = tls.server.received
        assert headers["Host"] == "hooks.example.com"
    finally:
        tls.close()


def test_the_certificate_is_verified_for_the_name_not_the_address(tmp_path):
    tls = TlsReceiver(tmp_path, "someone-else.example.com")
    try:
        transport = HttpTransport(
            resolver=Resolver(["93.184.215.14"]), connect=ToReceiver(tls.port), context=tls.client_context()
        )
        assert transport.post("https://hooks.example.com/hook", b"{}", {}, timeout_s=5).status is None
        assert tls.server.received == []
    finally:
        tls.close()


def test_each_post_checks_the_addresses_its_name_resolves_to_then(tmp_path):
    """DNS rebinding: the name resolved to a public address for the first POST and to the
    metadata service for the second; the second is refused, with no connection."""
    tls = TlsReceiver(tmp_path, "hooks.example.com")
    try:
        resolver, connector = Resolver(["93.184.215.14"], ["169.254.169.254"]), ToReceiver(tls.port)
        transport = HttpTransport(resolver=resolver, connect=connector, context=tls.client_context())
        assert transport.post("https://hooks.example.com/a", b"{}", {}, timeout_s=5).status == 204
        with pytest.raises(WebhookTargetRefused, match="resolves to 169.254.169.254, which is the instance metadata"):
            transport.post("https://hooks.example.com/a", b"{}", {}, timeout_s=5)
        assert connector.asked == [("93.184.215.14", 443)]
    finally:
        tls.close()
