"""The dispatcher's Lambda entry point: the outbox table's DynamoDB stream, in batches.

Thin: each ``INSERT`` record names an outbox item (key ``id``) the
:class:`~mediajobs.service_layer.dispatch.Dispatcher` delivers to every destination not
marked on it; a record whose dispatch raised is a batch item failure, retried from by the
event source mapping (``MaximumRetryAttempts`` 3, bisected, then its on-failure queue).
``MODIFY`` (the dispatcher's marks) and ``REMOVE`` (TTL) records are not even sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord, DynamoDBRecordEventName

from mediajobs.adapters.metrics import FunctionMetrics
from mediajobs.service_layer.dispatch import Destination, Dispatched, Dispatcher, FailureSink, Outbox


@dataclass(frozen=True)
class DispatcherAdapters:
    """What the dispatcher is built from (:func:`mediajobs.bootstrap.dispatcher_adapters`)."""

    outbox: Outbox
    destinations: tuple[Destination, ...]
    failures: FailureSink
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


def notification_id_of(record: DynamoDBRecord) -> str | None:
    """The outbox item an ``INSERT`` record names (its key ``id``), else ``None``."""
    if record.event_name is not DynamoDBRecordEventName.INSERT or record.dynamodb is None:
        return None
    keys: Mapping[str, Any] = record.dynamodb.keys or {}
    value = keys.get("id")
    return str(value) if value is not None else None


def make_handler(
    dispatcher: Dispatcher,
    *,
    logger: Logger | None = None,
    metrics: FunctionMetrics | None = None,
    on_dispatched: Callable[[Dispatched], None] | None = None,
) -> Callable[[dict[str, Any], Any], Any]:
    """The Lambda handler over ``dispatcher``: a DynamoDB stream batch in, partial batch failures
    out (by sequence number); ``on_dispatched`` is told each record's outcome (local tools)."""

    logger = logger or Logger(service="mediajobs")

    def handler(event: dict[str, Any], context: Any) -> Any:
        def remaining_s() -> float | None:
            millis = getattr(context, "get_remaining_time_in_millis", None)
            return float(millis()) / 1000 if millis is not None else None

        def handle(record: DynamoDBRecord) -> None:
            notification_id = notification_id_of(record)
            if notification_id is None:
                return
            done = dispatcher.dispatch(notification_id, remaining_s=remaining_s)
            counts = {"delivered": len(done.delivered), "refused": len(done.refused), "raced": len(done.raced)}
            if metrics is not None:
                metrics.dispatched(counts)
            if done.delivered or done.refused:
                extra = {"notification_id": notification_id, "delivered": done.delivered, "refused": done.refused}
                logger.info("notification dispatched", extra=extra)
            if on_dispatched is not None:
                on_dispatched(done)

        processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
        return process_partial_response(event=event, record_handler=handle, processor=processor, context=context)

    handler = logger.inject_lambda_context(handler)
    return metrics.around(handler) if metrics is not None else handler
