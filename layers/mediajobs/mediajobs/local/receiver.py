"""A webhook receiver on this machine: ``mediajobs webhook listen``, the demo's, the storm's
and the acceptance test's.

It verifies each POST with the Standard Webhooks library (the secret, ``whsec_`` +
base64), answers the statuses it is told to (``429:2`` is a 429 with ``Retry-After: 2``;
the last answer repeats), and keeps every delivery: its id, time, status answered, and the
payload. A repeat of an id is the transport's (counted, one effect); a POST that does not
verify is answered 401 and kept apart.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from standardwebhooks import Webhook

#: The largest body read (the dispatcher's payloads are a few KB).
MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Answer:
    """A status to answer, with ``Retry-After`` seconds when given."""

    status: int
    retry_after_s: int | None = None

    @classmethod
    def parse(cls, text: str) -> Answer:
        """``200``, ``429:2`` (a 429 with ``Retry-After: 2``).

        Raises
        ------
        ValueError
            Anything else, or a status outside 100-599.
        """
        status, _, after = text.strip().partition(":")
        answer = cls(int(status), int(after) if after else None)
        if not 100 <= answer.status <= 599 or (answer.retry_after_s is not None and answer.retry_after_s < 0):
            raise ValueError(f"not an answer: {text!r} (a status, or status:retry-after-seconds)")
        return answer


def parse_answers(text: str) -> list[Answer]:
    """``429:2,200`` -> the answers in order (the last repeats)."""
    answers = [Answer.parse(part) for part in text.split(",") if part.strip()]
    if not answers:
        raise ValueError("no answer given")
    return answers


@dataclass(frozen=True)
class Delivery:
    """One verified POST: ``id`` (``webhook-id``), ``at_s`` (when it came, Unix seconds),
    ``status`` answered, ``payload``."""

    id: str
    at_s: float
    status: int
    payload: dict[str, Any]


@dataclass
class Received:
    """Everything a receiver was sent."""

    deliveries: list[Delivery] = field(default_factory=list)
    unverified: int = 0

    def ids(self) -> list[str]:
        """Each notification id once, in the order first seen."""
        return list(dict.fromkeys(d.id for d in self.deliveries))

    def repeats(self) -> int:
        """Deliveries of an id already seen (the transport's duplicates)."""
        return len(self.deliveries) - len(self.ids())


class WebhookReceiver(http.server.ThreadingHTTPServer):
    """Listen on ``host:port`` (0: a free port) until :meth:`stop`.

    Parameters
    ----------
    secret: the Standard Webhooks secret (``whsec_...``).
    answers: what to answer, in order; the last repeats (default: 200).
    on_delivery: called with each verified :class:`Delivery` (the CLI prints it).
    clock: Unix time, seconds.
    """

    daemon_threads = True

    def __init__(
        self,
        secret: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        answers: list[Answer] | None = None,
        on_delivery: Callable[[Delivery], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__((host, port), _Handler)
        self.webhook = Webhook(secret)
        self.answers = list(answers or [Answer(200)])
        self.received = Received()
        self.on_delivery = on_delivery
        self.clock = clock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where to send (``http://127.0.0.1:<port>/``)."""
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://{name}:{port}/"

    def start(self) -> WebhookReceiver:
        """Serve on a thread of this process."""
        self._thread = threading.Thread(target=self.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.shutdown()
        self.server_close()

    def next_answer(self) -> Answer:
        """The answer for the next verified POST."""
        with self._lock:
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def keep(self, delivery: Delivery) -> None:
        """Keep a verified delivery in :attr:`received`, then tell ``on_delivery`` (if any)."""
        with self._lock:
            self.received.deliveries.append(delivery)
        if self.on_delivery is not None:
            self.on_delivery(delivery)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: WebhookReceiver

    def do_POST(self) -> None:  # noqa: N802 - the standard library's name
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(min(length, MAX_BODY_BYTES))
        try:
            payload = self.server.webhook.verify(body, dict(self.headers.items()))
        except Exception:  # noqa: BLE001 - the library raises its own for every bad signature
            with self.server._lock:
                self.server.received.unverified += 1
            self._answer(401)
            return
        answer = self.server.next_answer()
        at_s = self.server.clock()
        self.server.keep(Delivery(str(self.headers.get("webhook-id")), at_s, answer.status, payload))
        self._answer(answer.status, answer.retry_after_s)

    def _answer(self, status: int, retry_after_s: int | None = None) -> None:
        body = json.dumps({"status": status}).encode()
        self.send_response(status)
        if retry_after_s is not None:
            self.send_header("Retry-After", str(retry_after_s))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass
