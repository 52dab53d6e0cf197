"""The worker Lambda: an SQS batch of EventBridge "Object Created" and "Object Deleted"
events (the service's :meth:`~mediajobs.service_layer.pipeline.Pipeline.process` and
:meth:`~mediajobs.service_layer.pipeline.Pipeline.remove`).

Thin: parse each record (Powertools parser model), hand over the records whose receives
run low, process the batch (``process_partial_response``), return the failed records with
the visibility chosen for each. What becomes of each outcome -- acknowledge, return after
N s, hand over -- is the delivery policy's (:mod:`mediajobs.service_layer.delivery`, whose
docstring gives the rules); its per-batch state is a :class:`~mediajobs.service_layer.delivery.Batch`
created per invocation.

``raise_on_entire_batch_failure=False``: when every record of a batch failed (busy ones
whose hand-over failed, transient ones), reporting them all as item failures has the same
effect on SQS as raising, but does not turn an expected outcome ("come back later") into a
function error that trips the Errors alarm, and Lambda does not back off the whole event
source mapping.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from mediajobs.bootstrap import build_service
from mediajobs.domain.errors import JobBusy
from mediajobs.domain.jobs import SourceResult, SourceState
from mediajobs.entrypoints.records import (
    ObjectEventRecord,
    delivery_of,
    is_deleted,
    parses,
    to_deleted,
    to_object_ref,
)
from mediajobs.service_layer.delivery import (
    Acknowledge,
    Batch,
    HandOver,
    Outcome,
    Policy,
    ReturnAfter,
    outcome_of,
    outcome_of_result,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from mediajobs.service_layer.pipeline import Pipeline

    Handler = Callable[[dict[str, Any], Any], PartialItemFailureResponse]

# The template sets POWERTOOLS_SERVICE_NAME and POWERTOOLS_METRICS_NAMESPACE; these are the fallbacks.
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mediajobs"))
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "mediajobs"))
copy_config_to_registered_loggers(source_logger=logger, include={"mediajobs"})

#: What the log says of a record going back, by outcome (busy and unexpected ones aside).
_RETURNING: Mapping[Outcome, str] = MappingProxyType(
    {
        Outcome.DELIVERY_LOST: "delivery lost: abandoning the work",
        Outcome.DEADLINE: "deadline: redelivering at once",
        Outcome.TRANSIENT: "transient failure: redelivering",
        Outcome.SUPERSEDED: "transient failure: redelivering",
    }
)


def make_handler(service: Pipeline, *, on_record: Callable[[str, int, str], None] | None = None) -> Handler:
    """A Lambda handler bound to ``service`` (the local tools and tests build their own).

    Parameters
    ----------
    service: the pipeline records are processed by.
    on_record: called after each record with its message id, its receive count and its
        outcome: the source's state (``done``, ``permanent_failure``, ``ignored``,
        ``superseded``, ``deleted``), ``handed_over``, ``busy_resent``, or the class name of the exception that sent it
        back (``JobBusy``, ``TransientFailure`` ...).

    Returns
    -------
    handler(event, context) -> {"batchItemFailures": [...]}, as :func:`lambda_handler`.
    """
    policy, rng = Policy.from_settings(service.settings), random.Random()

    @metrics.log_metrics
    @logger.inject_lambda_context
    def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
        batch = Batch(event.get("Records", []), queue=service.queue, policy=policy, clock=time.time, rng=rng)
        for made in batch.hand_over_running_low(parses):
            logger.info("receives running low: handed over to a fresh copy", extra={"handovers": made.handovers})

        def record_handler(record: ObjectEventRecord, lambda_context: LambdaContext | None = None) -> dict[str, Any]:
            outcome = "error"
            try:
                result = _work(service, batch, record, lambda_context)
                outcome = str(result["state"])
                return result
            except Exception as exc:
                outcome = type(exc).__name__
                raise
            finally:
                if on_record is not None:
                    on_record(record.messageId, int(record.attributes.ApproximateReceiveCount or 1), outcome)

        # A processor per invocation: it holds the batch's state, so invocations never share it.
        processor = BatchProcessor(
            event_type=EventType.SQS, model=ObjectEventRecord, raise_on_entire_batch_failure=False
        )
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
        batch.return_failed(str(f["itemIdentifier"]) for f in response.get("batchItemFailures", []))
        return response

    return handler


@functools.cache
def default_handler() -> Handler:
    """The handler of this execution environment: bound to the service built from the
    environment (:func:`~mediajobs.bootstrap.build_service`) on first use, then kept."""
    return make_handler(build_service())


def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Entry point: returns ``{"batchItemFailures": [{"itemIdentifier": <messageId>}, ...]}``."""
    return default_handler()(event, context)


def _work(service: Pipeline, batch: Batch, record: ObjectEventRecord, context: LambdaContext | None) -> dict[str, Any]:
    """Process one record (an "Object Deleted" one with ``remove``); raising reports it as a
    batch item failure (after the delivery policy chose when it comes back)."""
    if batch.handed_over(record.messageId):
        return {"state": "handed_over"}
    deleted = to_deleted(record) if is_deleted(record) else None
    ref = to_object_ref(record)
    logger.set_correlation_id(record.body.id)
    logger.append_keys(source_key=ref.key, message_id=record.messageId)
    started = time.monotonic()
    try:
        delivery = delivery_of(record, context)
        result = service.remove(deleted, delivery) if deleted is not None else service.process(ref, delivery)
        # Every state a record returns with is acknowledged (superseded and deleted too).
        assert isinstance(batch.settle(record.messageId, outcome_of_result(result.state)), Acknowledge)
        _report(result)
        logger.info(
            "record done",
            extra={
                "state": result.state,
                "job_keys": [j.job_key for j in result.jobs],
                "bytes_read": result.bytes_read,
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        return {"state": result.state}
    except JobBusy as busy:
        metrics.add_metric(name="JobsBusy", unit=MetricUnit.Count, value=1)
        match batch.settle(record.messageId, Outcome.BUSY, busy_until_s=busy.lease_expires_at_s):
            case HandOver(delay_s=delay):
                # Waiting is not failing: a returned record would count a receive toward the
                # dead-letter queue; a fresh copy, durably queued first, counts none.
                logger.info(
                    "busy: re-sent to come back after the lease", extra={"job_key": busy.job_key, "delay_s": delay}
                )
                return {"state": "busy_resent"}
            case ReturnAfter(seconds=seconds):
                logger.info(
                    "busy: redelivering after the lease", extra={"job_key": busy.job_key, "return_after_s": seconds}
                )
        raise
    except Exception as exc:
        # A bug or an unclassified error too: redelivered (and dead-lettered after
        # maxReceiveCount), never silent.
        metrics.add_metric(name="JobsTransient", unit=MetricUnit.Count, value=1)
        outcome = outcome_of(exc)
        batch.settle(record.messageId, outcome)
        if outcome is Outcome.UNEXPECTED:
            logger.exception("unexpected error: redelivering")
        else:
            logger.warning(_RETURNING[outcome], extra={"error": str(exc)})
        raise
    finally:
        logger.remove_keys(["source_key", "message_id"])


def _report(result: SourceResult) -> None:
    if result.state is SourceState.SUPERSEDED:
        metrics.add_metric(name="EventsSuperseded", unit=MetricUnit.Count, value=1)
    elif result.state is SourceState.DELETED:
        metrics.add_metric(name="OriginalsDeleted", unit=MetricUnit.Count, value=1)
    for job in result.jobs:
        if job.reused:
            metrics.add_metric(name="JobsReused", unit=MetricUnit.Count, value=1)
        else:
            metrics.add_metric(name="JobsClaimed", unit=MetricUnit.Count, value=1)
            metrics.add_metric(name="ProcessingSeconds", unit=MetricUnit.Seconds, value=job.seconds)
    newly_failed = not result.jobs or not all(job.reused for job in result.jobs)
    if result.state is SourceState.PERMANENT_FAILURE and newly_failed:  # a reused failure was counted once
        metrics.add_metric(name="JobsFailed", unit=MetricUnit.Count, value=1)
        # A dimension per reason needs its own EMF document; EphemeralMetrics shares no state.
        by_reason = EphemeralMetrics(namespace=metrics.namespace, service=metrics.service)
        by_reason.add_dimension(name="reason", value=str(result.reason))
        by_reason.add_metric(name="JobsFailedByReason", unit=MetricUnit.Count, value=1)
        by_reason.flush_metrics()
        logger.warning(
            "permanent failure",
            extra={"reason": result.reason, "detail": result.detail, "job_keys": [j.job_key for j in result.jobs]},
        )
