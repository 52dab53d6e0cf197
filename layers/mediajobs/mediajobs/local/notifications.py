"""The dispatcher on the embedded AWS: the real handler with the real adapters, fed by
the outbox stream as Lambda would (:class:`~mediajobs.local.streams.StreamEventSourceMapping`),
and what the bus was given (:func:`seen_events`)."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mediajobs.bootstrap import build_dispatcher, dispatcher_adapters
from mediajobs.entrypoints.dispatcher import DispatcherAdapters, make_handler
from mediajobs.local.embedded import LocalStack
from mediajobs.local.session import local_handler
from mediajobs.local.streams import StreamEventSourceMapping, sqs_failure_sink
from mediajobs.service_layer.dispatch import Dispatched


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class LocalDispatcher:
    """The dispatcher's handler and its stream mapping on one stack."""

    handler: Callable[[dict[str, Any], Any], dict[str, Any]]
    mapping: StreamEventSourceMapping
    dispatched: list[Dispatched]


def local_dispatcher(
    stack: LocalStack,
    *,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
    wrap: Callable[[DispatcherAdapters], DispatcherAdapters] | None = None,
    **settings: Any,
) -> LocalDispatcher:
    """The dispatcher of ``stack``: EventBridge to its bus, and a webhook to
    ``webhook_url`` signed with ``webhook_secret`` (stored in the embedded Secrets Manager,
    as the template's ``WebhookSecret``) when given.

    ``wrap``: returns the adapters to use in place of the real ones (tests and tools inject
    faults there); ``settings``: overrides (``webhook_attempts``, ...).
    """
    extra: dict[str, Any] = dict(settings)
    if webhook_url:
        secret = webhook_secret or new_webhook_secret()
        name = f"mediajobs-webhook-{secrets.token_hex(4)}"
        arn = stack.client("secretsmanager").create_secret(Name=name, SecretString=secret)["ARN"]
        extra.update(webhook_url=webhook_url, webhook_secret_arn=arn)
    adapters = dispatcher_adapters(stack.dispatcher_settings(**extra), clients=stack.clients())
    if wrap is not None:
        adapters = wrap(adapters)
    dispatched: list[Dispatched] = []
    # Its metrics' EMF documents are dropped: stdout is the CLI's (simulate's one JSON object).
    handler = local_handler(make_handler(build_dispatcher(adapters), on_dispatched=dispatched.append))
    mapping = StreamEventSourceMapping(
        stack.client("dynamodbstreams"),
        stack.outbox_stream_arn(),
        handler,
        on_failure=sqs_failure_sink(stack.client("sqs"), stack.notification_failures_queue_url),
    )
    return LocalDispatcher(handler, mapping, dispatched)


def seen_events(stack: LocalStack) -> list[dict[str, Any]]:
    """Every event the notification bus was given since the last call (the local rule's
    copies), as EventBridge delivers them (``id``, ``detail-type``, ``source``, ``detail``)."""
    return _drain(stack.client("sqs"), stack.notifications_seen_queue_url)


def failures(stack: LocalStack) -> list[dict[str, Any]]:
    """The messages of the dispatcher's failures queue (received and deleted)."""
    return _drain(stack.client("sqs"), stack.notification_failures_queue_url)


def _drain(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Receive and delete every message of ``queue_url``; their JSON bodies, in order."""
    found: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return found
        found.extend(json.loads(m["Body"]) for m in messages)
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
        )
