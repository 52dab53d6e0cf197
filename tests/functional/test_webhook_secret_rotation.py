"""The webhook's signing secret, rotated in Secrets Manager, is the one the dispatcher signs
with once Powertools' cache of it has expired (``max_age`` 300 s): a warm dispatcher must
not keep the secret it read at its cold start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aws_lambda_powertools.utilities.parameters.base import BaseProvider
from standardwebhooks import Webhook

from mediajobs.adapters.outbox import outbox_item
from mediajobs.domain.notifications import Notification, NotificationType
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from mediajobs.local.notifications import failures, local_dispatcher, new_webhook_secret
from mediajobs.local.receiver import WebhookReceiver
from tests.conftest import REPO


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-secret-rotation") as stack:
        yield stack


def put(stack: LocalStack, n: int) -> str:
    nid = f"{n:064x}"
    payload = {"id": nid, "type": "Asset Ready", "asset": {"key": f"originals/{n}.jpg", "state": "ready"}}
    note = Notification(nid, NotificationType.READY, stack.bucket, f"originals/{n}.jpg", payload)
    outbox_item(stack.outbox_model(), note, now_s=1).save()
    return nid


def test_a_rotated_secret_signs_once_the_cached_one_has_expired(stack, monkeypatch):
    old, new = new_webhook_secret(), new_webhook_secret()
    receiver = WebhookReceiver(old).start()
    try:
        sm = stack.client("secretsmanager")
        before = {s["ARN"] for s in sm.list_secrets()["SecretList"]}  # moto's state is the process's
        dispatcher = local_dispatcher(stack, webhook_url=receiver.url, webhook_secret=old)
        first = put(stack, 1)
        dispatcher.mapping.drain()
        assert receiver.received.ids() == [first]

        (arn,) = {s["ARN"] for s in sm.list_secrets()["SecretList"]} - before  # the dispatcher's own
        sm.put_secret_value(SecretId=arn, SecretString=new)  # rotated; receivers now verify with it
        receiver.webhook = Webhook(new)
        # Powertools' cache of the secret has expired (300 s later).
        monkeypatch.setattr(BaseProvider, "has_not_expired_in_cache", lambda self, key: False)

        second = put(stack, 2)
        dispatcher.mapping.drain()
        refused = failures(stack)
        assert receiver.received.ids() == [first, second], (
            f"still signed with the secret read at the cold start: {receiver.received.unverified} unverified, "
            f"failures {[(f.get('status'), f.get('notification_id', '')[-4:]) for f in refused]}"
        )
    finally:
        receiver.stop()
