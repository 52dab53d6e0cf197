"""Webhooks: one HTTPS POST (:class:`HttpTransport`, the standard library's
``http.client``) to an address checked when the POST resolves its host, and its Standard
Webhooks signature (:class:`StandardWebhooksSigner`, the ``standardwebhooks`` package:
``webhook-signature`` = ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body`` under the
secret, https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import http.client
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from standardwebhooks import Webhook

from mediajobs.domain.notifications import webhook_key
from mediajobs.domain.webhook_targets import (
    IPAddress,
    IPNetwork,
    WebhookTargetRefused,
    checked_webhook_url,
    literal_address,
    parse_address,
    target_refusal,
)
from mediajobs.service_layer.dispatch import WebhookAnswer

log = logging.getLogger(__name__)

#: How much of an answer's body is read (the on-failure destination keeps the first bytes).
ANSWER_BYTES: Final = 4096

#: ``(host, port) -> addresses``: how a POST resolves its host (tests pass their own).
Resolver = Callable[[str, int], Sequence[str]]
#: ``(address, port, timeout_s) -> a connected socket``: how a POST opens its connection.
Connector = Callable[[IPAddress, int, float], socket.socket]


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to for a TCP connection to ``port``, in the
    resolver's order, once each (``socket.getaddrinfo``).

    Raises
    ------
    OSError
        It does not resolve (``socket.gaierror``).
    """
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in found))


def open_socket(address: IPAddress, port: int, timeout_s: float) -> socket.socket:
    """A TCP connection to ``address``:``port``, opened within ``timeout_s`` seconds; no
    name is resolved.

    Raises
    ------
    OSError
        Refused, unreachable, timed out.
    """
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect((str(address), port))
    except BaseException:
        sock.close()
        raise
    return sock


class HttpTransport:
    """POST with ``http.client`` to an address checked at send time; every answer (and a
    timeout, a refused connection, a name that does not resolve) is a
    :class:`~mediajobs.service_layer.dispatch.WebhookAnswer`, never an exception, but for a
    refused target.

    Each POST resolves the URL's host once (``resolver``), checks every address it got
    (:func:`~mediajobs.domain.webhook_targets.target_refusal` with ``allowed``: one refused
    address refuses the URL), and connects to a checked address itself (``connect``, the
    addresses in order until one answers): nothing resolves the name a second time, so a
    DNS answer that changes between the check and the connection (rebinding) reaches
    nothing unchecked. TLS verifies the certificate for the host name and sends it as SNI;
    the ``Host`` header is the name. No proxy is used, and redirects are never followed (a
    3xx is an answer: refused). ``timeout_s`` bounds the whole POST from its connection
    on: a receiver that trickles its answer a byte at a time is cut at the deadline (its
    connection shut down), an answer without status.

    Parameters
    ----------
    allowed: networks admitted despite the rule (``WEBHOOK_ALLOW_NETWORKS``; empty: none).
    resolver: ``(host, port) -> addresses`` (default :func:`resolve_host`).
    connect: ``(address, port, timeout_s) -> socket`` (default :func:`open_socket`).
    context: the TLS context (default ``ssl.create_default_context()``: the system's CAs,
        the host name checked).
    """

    def __init__(
        self,
        *,
        allowed: Iterable[IPNetwork] = (),
        resolver: Resolver = resolve_host,
        connect: Connector = open_socket,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self._allowed = tuple(allowed)
        self._resolver = resolver
        self._connect = connect
        self._context = context or ssl.create_default_context()

    def checked_addresses(self, url: str) -> list[IPAddress]:
        """The addresses a POST to ``url`` may connect to: its host's, literal or resolved,
        every one checked.

        Raises
        ------
        WebhookTargetRefused
            The host is, or resolves to, a refused address (it names the address and why).
        ValueError
            A URL :func:`~mediajobs.domain.webhook_targets.checked_webhook_url` refuses.
        OSError
            The name does not resolve, or to no address.
        """
        parts = urllib.parse.urlsplit(checked_webhook_url(url, allowed=self._allowed))
        host = parts.hostname
        assert host is not None  # checked_webhook_url refuses a URL without one
        literal = literal_address(host)
        if literal is not None:
            return [literal]
        addresses = [parse_address(a) for a in self._resolver(host, parts.port or _default_port(parts.scheme))]
        if not addresses:
            raise OSError(f"{host} resolves to no address")
        for address in addresses:
            if (refusal := target_refusal(address, self._allowed)) is not None:
                raise WebhookTargetRefused(host, refusal, resolved=True)
        return addresses

    def post(self, url: str, body: bytes, headers: Mapping[str, str], *, timeout_s: float) -> WebhookAnswer:
        """POST ``body`` to ``url`` with ``headers``, waiting at most ``timeout_s`` seconds.

        Raises
        ------
        WebhookTargetRefused
            The host is, or resolves to, a refused address: no connection was made.
        ValueError
            A URL :func:`~mediajobs.domain.webhook_targets.checked_webhook_url` refuses
            (settings are checked when built).
        """
        parts = urllib.parse.urlsplit(url)
        try:
            addresses = self.checked_addresses(url)
        except OSError as exc:  # a name that does not resolve (now): tried again
            log.warning("webhook host %s did not resolve: %s", parts.hostname, exc)
            return WebhookAnswer(None)
        deadline = _Deadline(timeout_s)
        connection = self._connection(parts, addresses, deadline, timeout_s)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            deadline.track(connection)
            connection.request("POST", target, body=body, headers=dict(headers))
            answer = connection.getresponse()
            return WebhookAnswer(answer.status, dict(answer.headers.items()), answer.read(ANSWER_BYTES))
        except (OSError, http.client.HTTPException) as exc:  # timeouts, refusals, resets, TLS errors
            log.warning("webhook POST failed%s: %s", " (past its timeout)" if deadline.expired else "", exc)
            return WebhookAnswer(None)
        finally:
            deadline.cancel()
            connection.close()

    def _connection(
        self, parts: urllib.parse.SplitResult, addresses: Sequence[IPAddress], deadline: _Deadline, timeout_s: float
    ) -> http.client.HTTPConnection:
        """A connection to ``parts``' host and port (its ``Host`` header, its TLS name)
        that opens its socket to one of ``addresses``."""
        host, port = parts.hostname or "", parts.port
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=self._context)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
        # http.client's own hook (what HTTPConnection.connect calls, HTTPSConnection's too,
        # before it wraps the socket for TLS with server_hostname = the host): the socket
        # goes to a checked address, never through a second resolution of the name.
        connection._create_connection = functools.partial(  # type: ignore[attr-defined]
            _connect_first, self._connect, addresses, deadline
        )
        return connection


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _connect_first(
    connect: Connector,
    addresses: Sequence[IPAddress],
    deadline: _Deadline,
    host_port: tuple[str, int],
    timeout_s: float,
    source_address: object = None,
) -> socket.socket:
    """The first of ``addresses`` that accepts a connection to ``host_port``'s port,
    within what is left of ``deadline`` (``http.client``'s ``_create_connection``)."""
    error: OSError = OSError("no address to connect to")
    for address in addresses:
        left_s = min(timeout_s, deadline.left_s())
        if left_s <= 0:
            raise TimeoutError("the webhook POST's timeout passed while connecting")
        try:
            return connect(address, host_port[1], left_s)
        except OSError as exc:
            error = exc
    raise error


class _Deadline:
    """Shuts down the connections of one POST ``timeout_s`` after it started (a timer),
    waking whatever read is blocked on them."""

    def __init__(self, timeout_s: float) -> None:
        self.expired = False
        self._ends_at = time.monotonic() + timeout_s
        self._connections: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left_s(self) -> float:
        """Seconds left before the deadline (0 or less: past it)."""
        return self._ends_at - time.monotonic()

    def track(self, connection: http.client.HTTPConnection) -> None:
        """Shut ``connection``'s socket down at the deadline (at once, if it passed)."""
        with self._lock:
            self._connections.append(connection)
            if self.expired:
                connection.close()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for connection in self._connections:
                sock = connection.sock
                if sock is not None:  # the plain socket's shutdown (an SSLSocket's drops its TLS state first)
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


class StandardWebhooksSigner:
    """Signs as the Standard Webhooks libraries verify.

    Parameters
    ----------
    secret: the signing secret, ``whsec_`` + base64 (as Standard Webhooks spells it), or
        the raw bytes; or a function returning it, asked at each signature (the deployed
        dispatcher's reads Secrets Manager through Powertools' cache, so a rotated secret
        is used once the cached one expires).

    Raises
    ------
    ValueError
        A secret that is not one (:func:`~mediajobs.domain.notifications.webhook_key`:
        base64 of 24 to 64 bytes, ``whsec_`` in front or not), checked when it is first
        read and whenever it changes.
    """

    def __init__(self, secret: str | bytes | Callable[[], str | bytes]) -> None:
        self._secret = secret if callable(secret) else (lambda: secret)
        self._key: str | bytes | None = None
        self._webhook = self._current()

    def _current(self) -> Webhook:
        secret = self._secret()
        if self._key is None or secret != self._key:
            if isinstance(secret, str):
                webhook_key(secret)  # the spec's form and length (ValueError, naming both forms)
            try:
                webhook = Webhook(secret.strip() if isinstance(secret, str) else secret)
            except Exception as exc:  # noqa: BLE001 - the library raises bare errors for a bad secret
                raise ValueError(f"the webhook secret is not a Standard Webhooks secret: {exc}") from exc
            self._key, self._webhook = secret, webhook
        return self._webhook

    def signature(self, msg_id: str, timestamp_s: int, body: str) -> str:
        """The ``webhook-signature`` header of ``body`` sent as ``msg_id`` at ``timestamp_s``."""
        when = datetime.datetime.fromtimestamp(timestamp_s, tz=datetime.UTC)
        return self._current().sign(msg_id=msg_id, timestamp=when, data=body)
