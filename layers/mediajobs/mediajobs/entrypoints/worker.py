"""The worker Lambda: an SQS batch of EventBridge S3 events and job requests.

Thin: parse each record (:mod:`mediajobs.adapters.records`), hand over the records whose
receives run low, work on each (:func:`mediajobs.service_layer.delivery.handle`: what
becomes of each outcome is the delivery policy's) through Powertools'
``process_partial_response``, then return the failed records with the visibility chosen
for each. ``raise_on_entire_batch_failure=False``: a batch whose every record failed (busy
ones whose hand-over failed, transient ones) is reported record by record, which SQS takes
as raising, without turning "come back later" into a function error that trips the Errors
alarm and makes Lambda back off the whole event source mapping.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from mediajobs.adapters.metrics import FunctionMetrics
from mediajobs.adapters.records import ObjectEventRecord, correlation_id, delivery_of, parses, request_of
from mediajobs.service_layer.delivery import Batch, Policy, handle
from mediajobs.service_layer.observer import Unobserved
from mediajobs.service_layer.pipeline import Pipeline

#: Told after each record: its message id, its receive count and its outcome (the result's
#: state, ``handed_over``, ``busy_resent``, or the class name of what sent it back).
OnRecord = Callable[[str, int, str], None]


def make_handler(
    service: Pipeline,
    *,
    logger: Logger | None = None,
    metrics: FunctionMetrics | None = None,
    on_record: OnRecord | None = None,
) -> Callable[[dict[str, Any], Any], Any]:
    """A Lambda handler bound to ``service``: ``(event, context) -> {"batchItemFailures": [...]}``."""
    logger = logger or Logger(service="mediajobs")
    policy, rng = Policy.from_settings(service.settings), random.Random()
    observer = metrics if metrics is not None else Unobserved()

    def handler(event: dict[str, Any], context: Any) -> Any:
        batch = Batch(event.get("Records", []), queue=service.queue, policy=policy, clock=time.time, rng=rng)
        for made in batch.hand_over_running_low(parses):
            logger.info("receives running low: handed over to a fresh copy", extra={"handovers": made.handovers})

        def record_handler(record: ObjectEventRecord, lambda_context: Any = None) -> dict[str, Any]:
            outcome = "error"
            logger.set_correlation_id(correlation_id(record))
            try:
                request = request_of(record)
                logger.append_keys(source_key=getattr(request, "key", None), message_id=record.messageId)
                delivery = delivery_of(record, lambda_context)
                result = handle(service, batch, record.messageId, request, delivery, observer)
                outcome = str(result["state"])
                return result
            except Exception as exc:
                outcome = type(exc).__name__
                raise
            finally:
                if on_record is not None:
                    on_record(record.messageId, int(record.attributes.ApproximateReceiveCount or 1), outcome)
                logger.remove_keys(["source_key", "message_id"])

        # A processor per invocation: it holds the batch's state, so invocations never share it.
        processor = BatchProcessor(
            event_type=EventType.SQS, model=ObjectEventRecord, raise_on_entire_batch_failure=False
        )
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
        batch.return_failed(str(f["itemIdentifier"]) for f in response.get("batchItemFailures", []))
        return response

    handler = logger.inject_lambda_context(handler)
    return metrics.around(handler) if metrics is not None else handler
