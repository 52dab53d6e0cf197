"""Notifications end to end on the embedded AWS: an upload's asset ends ready, its
transaction puts one outbox item, the stream feeds the real dispatcher, and a receiver on
127.0.0.1 and the bus each get the notification once, under the one id; delivering the
upload again sends nothing new."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from standardwebhooks import Webhook

from mediajobs.local.notifications import failures, local_dispatcher, new_webhook_secret, seen_events
from tests.conftest import REPO

PHOTO = REPO / "tests" / "media" / "photos" / "canon-40d-small.jpg"


class Receiver(http.server.ThreadingHTTPServer):
    """Verifies each POST with the Standard Webhooks library; answers from ``answers``
    (the last one repeats), keeping (time, id, payload) of each verified delivery."""

    def __init__(self, secret: str, answers: list[tuple[int, dict[str, str]]]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.webhook = Webhook(secret)
        self.answers = answers
        self.deliveries: list[tuple[str, dict]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/mediajobs"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the standard library's name
        body = self.rfile.read(int(self.headers["content-length"]))
        payload = self.server.webhook.verify(body, dict(self.headers.items()))
        self.server.deliveries.append((self.headers["webhook-id"], payload))
        status, headers = self.server.answers.pop(0) if len(self.server.answers) > 1 else self.server.answers[0]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def receiver() -> Iterator[tuple[Receiver, str]]:
    secret = new_webhook_secret()
    server = Receiver(secret, [(200, {})])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, secret
    server.shutdown()
    server.server_close()


def test_a_ready_upload_is_told_once_to_the_webhook_and_the_bus(local_session, receiver):
    server, secret = receiver
    stack = local_session.stack
    seen_events(stack)  # what earlier tests of the module put on the bus
    dispatcher = local_dispatcher(stack, webhook_url=server.url, webhook_secret=secret)
    dispatcher.mapping.drain()  # earlier tests' notifications: delivered before this one's
    server.deliveries.clear()
    seen_events(stack)

    local_session.upload(PHOTO, "originals/notify/one.jpg")
    local_session.run()
    dispatcher.mapping.drain()

    ((nid, payload),) = server.deliveries
    assert payload["id"] == nid and payload["type"] == "Asset Ready"
    assert (payload["asset"]["key"], payload["asset"]["state"]) == ("originals/notify/one.jpg", "ready")
    assert set(payload["asset"]["recipes"]) == {"web-image@1", "image-placeholder@1"}
    (event,) = seen_events(stack)
    assert (event["source"], event["detail-type"], event["detail"]["id"]) == ("mediajobs", "Asset Ready", nid)
    item = stack.outbox_model().get(nid, consistent_read=True)
    assert set(item.deliveries.as_dict()) == {"eventbridge", "webhook"} and item.expires_at_s is not None

    # Every event delivered again: the asset is ready already, no new notification.
    local_session.redeliver(local_session.esm.stats.bodies[-1:])
    local_session.run()
    dispatcher.mapping.drain()
    assert [n for n, _ in server.deliveries] == [nid]
    assert seen_events(stack) == [] and failures(stack) == []
