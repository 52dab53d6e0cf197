"""The dispatcher's Lambda entry point: the outbox table's DynamoDB stream, in batches.

Thin: each ``INSERT`` record names an outbox item by its key (``id``); the
:class:`~mediajobs.service_layer.dispatch.Dispatcher` delivers it to every destination not
marked on it. Records are processed with Powertools' ``BatchProcessor`` for DynamoDB
streams: a record whose dispatch raised is reported in ``batchItemFailures`` (by its
sequence number), and the event source mapping retries from it (template.yaml:
``MaximumRetryAttempts`` 3, ``BisectBatchOnFunctionError``, the on-failure queue after).
``MODIFY`` records (the dispatcher's own marks) and ``REMOVE`` records (TTL) are skipped;
the template's filter does not even send them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
    DynamoDBRecord,
    DynamoDBRecordEventName,
)

from mediajobs.service_layer.dispatch import Destination, Dispatched, Dispatcher, FailureSink, Outbox
from mediajobs.settings import Settings

if TYPE_CHECKING:
    from mediajobs.adapters.outbox import OutboxModel

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mediajobs"))
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "mediajobs"))

#: The metric each outcome is counted as.
DELIVERED: Final = "NotificationsDelivered"
REFUSED: Final = "NotificationsRefused"
RACED: Final = "NotificationsMarkedElsewhere"


@dataclass(frozen=True)
class DispatcherAdapters:
    """What the dispatcher is built from (the composition root's arguments): the outbox,
    the destinations in the order they are tried, the on-failure sink, the clock."""

    outbox: Outbox
    destinations: tuple[Destination, ...]
    failures: FailureSink
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


def real_dispatcher_adapters(
    settings: Settings, *, session: Any = None, outbox_model_: type[OutboxModel] | None = None
) -> DispatcherAdapters:
    """The real adapters: the outbox table, the bus (when ``notification_bus_name`` is
    set), the webhook (when ``webhook_url`` is set, its secret read through Powertools'
    parameters, cached 300 s, at each signature), the on-failure queue.

    ``session``: the boto3 session the clients come from (default: the function's, from
    its environment); ``outbox_model_``: the outbox table's model (default: bound from the
    settings). The embedded AWS passes its own, signed with its credentials.

    Raises
    ------
    ValueError
        A webhook URL that is not https (or http to 127.0.0.1), or no secret for it.
    """
    import boto3

    from mediajobs.adapters.notify import EventBridgeDestination, SqsFailureSink
    from mediajobs.adapters.outbox import DynamoOutbox, outbox_model
    from mediajobs.adapters.webhooks import StandardWebhooksSigner, UrllibTransport, checked_webhook_url
    from mediajobs.service_layer.dispatch import WebhookDestination, WebhookPolicy

    session = session or boto3.session.Session(region_name=settings.region)
    endpoint = {"endpoint_url": settings.endpoint_url} if settings.endpoint_url else {}
    destinations: list[Destination] = []
    if settings.notification_bus_name:
        destinations.append(
            EventBridgeDestination(session.client("events", **endpoint), settings.notification_bus_name)
        )
    if settings.webhook_url:
        if not settings.webhook_secret_arn:
            raise ValueError("WEBHOOK_URL is set without WEBHOOK_SECRET_ARN")
        from aws_lambda_powertools.utilities import parameters

        provider = parameters.SecretsProvider(boto3_client=session.client("secretsmanager", **endpoint))
        secret_arn = settings.webhook_secret_arn

        def secret() -> str:  # cached 300 s by Powertools: a rotated secret is read then
            return str(provider.get(secret_arn, max_age=300))

        policy = WebhookPolicy(
            timeout_s=settings.webhook_timeout_s,
            attempts=settings.webhook_attempts,
            retry_after_cap_s=settings.webhook_retry_after_cap_s,
        )
        url = checked_webhook_url(settings.webhook_url)
        destinations.append(WebhookDestination(url, UrllibTransport(), StandardWebhooksSigner(secret), policy=policy))
    outbox = DynamoOutbox(
        outbox_model_ or outbox_model(settings.outbox_table_name, settings.region, settings.endpoint_url)
    )
    failures = SqsFailureSink(session.client("sqs", **endpoint), settings.notification_failures_queue_url)
    return DispatcherAdapters(outbox, tuple(destinations), failures)


def make_dispatcher(adapters: DispatcherAdapters) -> Dispatcher:
    """The dispatcher over ``adapters``."""
    return Dispatcher(
        adapters.outbox, adapters.destinations, adapters.failures, clock=adapters.clock, sleep=adapters.sleep
    )


def notification_id_of(record: DynamoDBRecord) -> str | None:
    """The outbox item an ``INSERT`` record names (its key ``id``), else ``None``."""
    if record.event_name is not DynamoDBRecordEventName.INSERT or record.dynamodb is None:
        return None
    keys: Mapping[str, Any] = record.dynamodb.keys or {}
    value = keys.get("id")
    return str(value) if value is not None else None


def make_handler(dispatcher: Dispatcher, *, on_dispatched: Callable[[Dispatched], None] | None = None) -> Any:
    """The Lambda handler over ``dispatcher``: a DynamoDB stream batch in, partial batch
    failures out (``{"batchItemFailures": [{"itemIdentifier": <sequence number>}]}``).

    ``on_dispatched``: called with each record's outcome (the local tools count them).
    """

    def handle(record: DynamoDBRecord, remaining_s: Callable[[], float | None]) -> None:
        notification_id = notification_id_of(record)
        if notification_id is None:
            return
        done = dispatcher.dispatch(notification_id, remaining_s=remaining_s)
        for name, count in ((DELIVERED, len(done.delivered)), (REFUSED, len(done.refused)), (RACED, len(done.raced))):
            if count:
                metrics.add_metric(name=name, unit=MetricUnit.Count, value=count)
        if done.delivered or done.refused:
            logger.info(
                "notification dispatched",
                extra={"notification_id": notification_id, "delivered": done.delivered, "refused": done.refused},
            )
        if on_dispatched is not None:
            on_dispatched(done)

    def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
        def remaining_s() -> float | None:
            if context is None or not hasattr(context, "get_remaining_time_in_millis"):
                return None
            return float(context.get_remaining_time_in_millis()) / 1000

        processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
        return process_partial_response(
            event=event,
            record_handler=lambda record: handle(record, remaining_s),
            processor=processor,
            context=context,
        )

    return handler


_handler: Any = None


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    """The deployed entry point: built once per execution environment from the environment."""
    global _handler
    if _handler is None:
        _handler = make_handler(make_dispatcher(real_dispatcher_adapters(Settings.from_env())))
    result: PartialItemFailureResponse = _handler(event, context)
    return result
