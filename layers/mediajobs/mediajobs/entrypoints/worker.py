"""The worker Lambda: an SQS batch of EventBridge "Object Created" events.

Thin: parse each record (Powertools parser model), call the pipeline, report.

* A record outside ``originals/``, a committed job and a permanent failure are successes
  for SQS: the message is deleted (the failure is in the ledger and the logs).
* A busy job, a transient failure, a superseded claim and a record that does not parse
  are reported in ``batchItemFailures``: only those messages come back.

``raise_on_entire_batch_failure=False``: when every record of a batch is busy or
transient, reporting them all as item failures has the same effect on SQS as raising,
but does not turn a normal outcome ("busy, come back later") into a function error that
trips the Errors alarm, and Lambda does not back off the whole event source mapping.
"""

from __future__ import annotations

import os
import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel, SqsRecordModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import Json

from mediajobs.bootstrap import build_pipeline
from mediajobs.domain.errors import JobBusy, Superseded, TransientFailure
from mediajobs.domain.jobs import ObjectRef, SourceResult
from mediajobs.service import Pipeline

# The template sets POWERTOOLS_SERVICE_NAME and POWERTOOLS_METRICS_NAMESPACE; these are the fallbacks.
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mediajobs"))
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "mediajobs"))
copy_config_to_registered_loggers(source_logger=logger, include={"mediajobs"})


class ObjectCreatedRecord(SqsRecordModel):
    """An SQS record whose body is an EventBridge S3 "Object Created" event."""

    body: Json[S3EventNotificationEventBridgeModel]  # type: ignore[assignment]


_pipeline: Pipeline | None = None


def get_pipeline() -> Pipeline:
    """The pipeline for this execution environment, built on first use."""
    global _pipeline
    if _pipeline is None:
        _pipeline = build_pipeline()
    return _pipeline


def set_pipeline(pipeline: Pipeline | None) -> None:
    """Replace the pipeline (the local runner and tests); ``None`` rebuilds from the environment."""
    global _pipeline
    _pipeline = pipeline


def to_object_ref(record: ObjectCreatedRecord) -> ObjectRef:
    """The object an event names. S3 reports ``"null"`` as the version of unversioned objects."""
    detail = record.body.detail
    version = detail.object.version_id
    return ObjectRef(
        bucket=detail.bucket.name,
        key=detail.object.key,
        version_id=None if version in (None, "", "null") else version,
        size_bytes=None if detail.object.size is None else int(detail.object.size),
        etag=detail.object.etag,
    )


def _report(result: SourceResult) -> None:
    for job in result.jobs:
        if job.reused:
            metrics.add_metric(name="JobsReused", unit=MetricUnit.Count, value=1)
        else:
            metrics.add_metric(name="JobsClaimed", unit=MetricUnit.Count, value=1)
            metrics.add_metric(name="ProcessingSeconds", unit=MetricUnit.Seconds, value=job.seconds)
    newly_failed = not result.jobs or not all(job.reused for job in result.jobs)
    if result.state == "permanent_failure" and newly_failed:  # a reused failure was counted once
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


def record_handler(record: ObjectCreatedRecord) -> dict[str, Any]:
    """Process one record; raising reports it as a batch item failure."""
    ref = to_object_ref(record)
    logger.set_correlation_id(record.body.id)
    logger.append_keys(source_key=ref.key, message_id=record.messageId)
    started = time.monotonic()
    try:
        result = get_pipeline().process(ref)
        _report(result)
        logger.info(
            "record done",
            extra={
                "state": result.state,
                "job_keys": [j.job_key for j in result.jobs],
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        return {"state": result.state}
    except JobBusy as busy:
        metrics.add_metric(name="JobsBusy", unit=MetricUnit.Count, value=1)
        logger.info("busy: redelivering later", extra={"job_key": busy.job_key})
        raise
    except (TransientFailure, Superseded) as exc:
        metrics.add_metric(name="JobsTransient", unit=MetricUnit.Count, value=1)
        logger.warning("transient failure: redelivering", extra={"error": str(exc)})
        raise
    except Exception:
        # A bug or an unclassified error: redelivered (and dead-lettered after maxReceiveCount),
        # never silent.
        metrics.add_metric(name="JobsTransient", unit=MetricUnit.Count, value=1)
        logger.exception("unexpected error: redelivering")
        raise
    finally:
        logger.remove_keys(["source_key", "message_id"])


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Entry point: returns ``{"batchItemFailures": [{"itemIdentifier": <messageId>}, ...]}``."""
    # A processor per invocation: it holds the batch's state, so invocations never share it.
    processor = BatchProcessor(event_type=EventType.SQS, model=ObjectCreatedRecord, raise_on_entire_batch_failure=False)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
