"""The dispatcher on the embedded AWS: the real handler with the real adapters, fed by
the outbox stream as Lambda would (:class:`~mediajobs.local.streams.StreamEventSourceMapping`),
what the bus was given (:func:`seen_events`), and the demo's and the storm's view of both
with a webhook receiver (:class:`LocalNotifications`)."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mediajobs.bootstrap import build_dispatcher, dispatcher_adapters
from mediajobs.domain.webhook_targets import LOOPBACK_NETWORKS
from mediajobs.entrypoints.dispatcher import DispatcherAdapters, make_handler
from mediajobs.local.embedded import LocalStack
from mediajobs.local.receiver import Delivery, WebhookReceiver
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
    webhook_allow_networks: str = LOOPBACK_NETWORKS,
    wrap: Callable[[DispatcherAdapters], DispatcherAdapters] | None = None,
    **settings: Any,
) -> LocalDispatcher:
    """The dispatcher of ``stack``: EventBridge to its bus, and a webhook to
    ``webhook_url`` signed with ``webhook_secret`` (stored in the embedded Secrets Manager,
    as the template's ``WebhookSecret``) when given, admitting the networks of
    ``webhook_allow_networks`` (comma-separated CIDRs; default loopback, for a receiver on
    this machine) despite the rule of :mod:`mediajobs.domain.webhook_targets`.

    ``wrap``: returns the adapters to use in place of the real ones (tests and tools inject
    faults there); ``settings``: overrides (``webhook_attempts``, ...).

    Raises
    ------
    ValueError
        A webhook URL that is not one, or whose host is a literal address the rule refuses
        (``WebhookTargetRefused``); an allow list that is not CIDRs.
    """
    extra: dict[str, Any] = {"webhook_allow_networks": webhook_allow_networks, **settings}
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


class LocalNotifications:
    """The dispatcher and a webhook receiver on one stack, as the demo and the storm watch
    them: a verifying receiver on 127.0.0.1 answering 200
    (:class:`~mediajobs.local.receiver.WebhookReceiver`, listening from construction on),
    and the real dispatcher on the outbox stream (:func:`local_dispatcher`) posting to it,
    signed with a fresh secret. Each :meth:`dispatch` delivers what the stream holds and
    reads what the bus was given; :meth:`new_deliveries` says what reached the receiver
    since the last call.

    Use as a context manager, or call :meth:`close`.

    Attributes
    ----------
    receiver: the webhook receiver (its ``received``: every delivery, in order).
    bus_events: every event the bus was given, in order (:func:`seen_events`).
    failed_runs: the runs of :meth:`run` that raised.
    """

    def __init__(self, stack: LocalStack) -> None:
        secret = new_webhook_secret()
        self._stack = stack
        self.receiver = WebhookReceiver(secret).start()
        self._dispatcher = local_dispatcher(stack, webhook_url=self.receiver.url, webhook_secret=secret)
        self.bus_events: list[dict[str, Any]] = []
        self.failed_runs = 0
        self._seen = 0

    def __enter__(self) -> LocalNotifications:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the receiver."""
        self.receiver.stop()

    def dispatch(self) -> list[dict[str, Any]]:
        """Run the dispatcher on what the outbox stream holds, to the end.

        Returns
        -------
        list of dict
            The events the bus was given since the last call (also added to :attr:`bus_events`).
        """
        self._dispatcher.mapping.drain()
        events = seen_events(self._stack)
        self.bus_events.extend(events)
        return events

    def run(self) -> None:
        """:meth:`dispatch`, a failing run counted (:attr:`failed_runs`), not raised: the
        storm goes on, and its end checks judge what was delivered."""
        try:
            self.dispatch()
        except Exception:  # noqa: BLE001 - counted: the end checks judge what was delivered
            self.failed_runs += 1

    def new_deliveries(self) -> tuple[list[Delivery], list[Delivery]]:
        """The deliveries at the receiver since the last call, and those of them whose id
        no earlier call's delivery had (a repeat of one is the transport's)."""
        received = self.receiver.received.deliveries
        deliveries = received[self._seen :]
        self._seen = len(received)
        known = {d.id for d in received[: self._seen - len(deliveries)]}
        return deliveries, [d for d in deliveries if d.id not in known]


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
