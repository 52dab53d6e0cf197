"""Webhooks: one HTTPS POST (:class:`UrllibTransport`, the standard library's client) and
its Standard Webhooks signature (:class:`StandardWebhooksSigner`, the ``standardwebhooks``
package: ``webhook-signature`` = ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``
under the secret, https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md).
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import logging
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Final

from standardwebhooks import Webhook

from mediajobs.domain.notifications import webhook_key
from mediajobs.service_layer.dispatch import WebhookAnswer

log = logging.getLogger(__name__)

#: How much of an answer's body is read (the on-failure destination keeps the first bytes).
ANSWER_BYTES: Final = 4096
#: Hosts a plain-HTTP webhook may name: a receiver on this machine (``mediajobs webhook listen``).
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})


def checked_webhook_url(url: str) -> str:
    """``url`` if a webhook may be sent there: ``https://``, or ``http://`` to a loopback
    host (a local receiver); never ``file:`` or another scheme ``urllib`` would open.

    Raises
    ------
    ValueError
        Any other URL.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return url
    raise ValueError(f"a webhook URL is https:// (or http:// to 127.0.0.1), not {url!r}")


class UrllibTransport:
    """POST with ``urllib.request``; every answer (and a timeout or a refused connection)
    is a :class:`~mediajobs.service_layer.dispatch.WebhookAnswer`, never an exception.
    Redirects are not followed (a 3xx is an answer: refused). ``timeout_s`` bounds the
    whole POST: urllib's own timeout bounds each socket operation only, so a receiver
    that trickles its answer a byte at a time is cut at the deadline (its connection shut
    down), an answer without status."""

    def post(self, url: str, body: bytes, headers: Mapping[str, str], *, timeout_s: float) -> WebhookAnswer:
        """POST ``body`` to ``url`` with ``headers``, waiting at most ``timeout_s`` seconds.

        Raises
        ------
        ValueError
            A URL :func:`checked_webhook_url` refuses (settings are checked when built).
        """
        # Checked: https, or http to a loopback host -- never file: or a custom scheme.
        request = urllib.request.Request(checked_webhook_url(url), data=body, headers=dict(headers), method="POST")  # noqa: S310
        deadline = _Deadline(timeout_s)
        opener = urllib.request.build_opener(_NoRedirects(), _HttpHandler(deadline), _HttpsHandler(deadline))
        try:
            with opener.open(request, timeout=timeout_s) as answer:
                return WebhookAnswer(answer.status, dict(answer.headers.items()), answer.read(ANSWER_BYTES))
        except urllib.error.HTTPError as exc:
            with exc:
                return WebhookAnswer(exc.code, dict(exc.headers.items()), exc.read(ANSWER_BYTES))
        except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets, TLS errors
            log.warning("webhook POST failed%s: %s", " (past its timeout)" if deadline.expired else "", exc)
            return WebhookAnswer(None)
        finally:
            deadline.cancel()


class _Deadline:
    """Shuts down the connections of one POST ``timeout_s`` after it started (a timer),
    waking whatever read is blocked on them."""

    def __init__(self, timeout_s: float) -> None:
        self.expired = False
        self._connections: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def track(self, http_class: Callable[..., http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
        def connect(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
            connection = http_class(*args, **kwargs)
            with self._lock:
                self._connections.append(connection)
                if self.expired:
                    connection.close()
            return connection

        return connect

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


class _UnderDeadline(urllib.request.AbstractHTTPHandler):
    """Opens its connections through :meth:`_Deadline.track`."""

    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        return super().do_open(self._deadline.track(http_class), req, **kwargs)


class _HttpHandler(_UnderDeadline, urllib.request.HTTPHandler):
    pass


class _HttpsHandler(_UnderDeadline, urllib.request.HTTPSHandler):
    pass


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


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
