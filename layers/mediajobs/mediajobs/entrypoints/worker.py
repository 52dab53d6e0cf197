"""The worker Lambda: an SQS batch of EventBridge "Object Created" events.

Thin: parse each record (Powertools parser model), call the pipeline, report.

* A record outside ``originals/``, a committed job and a permanent failure are successes
  for SQS: the message is deleted (the failure is in the ledger and the logs).
* A transient failure, a superseded claim and a record that does not parse are reported
  in ``batchItemFailures``: only those messages come back -- after the visibility the
  handler sets for each (Lambda leaves a failed record invisible until its visibility
  timeout ends; it never shortens it): a transient failure after an exponential backoff
  on its receive count, a record stopped by the invocation's deadline at once.
* A busy duplicate is handed over: a fresh copy is queued, delayed by the holder's
  remaining lease plus jitter (at most 900 s, SQS's DelaySeconds limit), then the
  received message is deleted and the record reported a success. Waiting must not count
  receives toward the dead-letter queue. If the send fails, the record is reported
  failed and comes back with that visibility instead.
* A record on its last receive but one (``>= MAX_RECEIVE_COUNT - 1``) is handed over the
  same way (no delay) before any record of the batch is worked on, at most
  ``MAX_HANDOVERS`` times: receives are lost to batch-mates' crashes and lost
  acknowledgements without the record's own work failing, and the dead-letter queue is
  for requests that keep failing.
* A hand-over never drops a request (the copy is queued before the delete); it may
  duplicate one (a send retried after a lost answer, a crash between send and delete),
  which the ledger answers as any duplicate.

``raise_on_entire_batch_failure=False``: when every record of a batch failed (busy ones
whose hand-over failed, transient ones), reporting them all as item failures has the same
effect on SQS as raising, but does not turn an expected outcome ("come back later") into a
function error that trips the Errors alarm, and Lambda does not back off the whole event
source mapping.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel, SqsRecordModel
from pydantic import Json

from mediajobs.adapters.sqs import HANDOVERS_ATTRIBUTE
from mediajobs.bootstrap import build_pipeline
from mediajobs.domain.errors import DeadlineReached, DeliveryLost, JobBusy, Superseded, TransientFailure
from mediajobs.domain.jobs import Delivery, ObjectRef, SourceResult
from mediajobs.domain.keys import event_key_candidates
from mediajobs.domain.retry import busy_delay_s, transient_delay_s

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from mediajobs.service_layer.pipeline import Pipeline

# The template sets POWERTOOLS_SERVICE_NAME and POWERTOOLS_METRICS_NAMESPACE; these are the fallbacks.
logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mediajobs"))
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "mediajobs"))
copy_config_to_registered_loggers(source_logger=logger, include={"mediajobs"})


class ObjectCreatedRecord(SqsRecordModel):
    """An SQS record whose body is an EventBridge S3 "Object Created" event."""

    body: Json[S3EventNotificationEventBridgeModel]  # type: ignore[assignment]


_pipeline: Pipeline | None = None
#: Visibility (seconds) chosen for each record of the current batch that goes back, by message id.
_return_after: dict[str, int] = {}
#: The raw bodies of the current batch, by message id (a busy record may be re-sent).
_bodies: dict[str, str] = {}
#: Message ids of the current batch handed over to fresh copies before processing.
_handed_over: set[str] = set()
_rng = random.Random()
#: How often one request is handed over to a fresh copy before SQS may dead-letter it.
MAX_HANDOVERS = 2


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


#: Called after each record with (message id, receive count, outcome): the local tools'
#: hook (see :func:`make_handler`). Temporary: the delivery rework removes the globals.
_on_record: list[Callable[[str, int, str], None] | None] = [None]


def make_handler(
    service: Pipeline, *, on_record: Callable[[str, int, str], None] | None = None
) -> Callable[[dict[str, Any], Any], PartialItemFailureResponse]:
    """A Lambda handler bound to ``service`` (the local tools and tests build their own).

    Parameters
    ----------
    service: the pipeline records are processed by.
    on_record: called after each record with its message id, its receive count and its
        outcome: the source's state (``done``, ``permanent_failure``, ``ignored``),
        ``handed_over``, ``busy_resent``, or the class name of the exception that sent it
        back (``JobBusy``, ``TransientFailure`` ...).

    Returns
    -------
    handler(event, context) -> {"batchItemFailures": [...]}, as :func:`lambda_handler`.
    """

    def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
        set_pipeline(service)
        _on_record[0] = on_record
        try:
            return lambda_handler(event, context)
        finally:
            _on_record[0] = None

    return handler


def to_object_ref(record: ObjectCreatedRecord) -> ObjectRef:
    """The object an event names. S3 URL-encodes the key in its events (Powertools' parser
    model passes it on as received): ``key`` is the key decoded, ``raw_key`` the key as
    received when that differs (:func:`~mediajobs.domain.keys.event_key_candidates`). S3
    reports ``"null"`` as the version of unversioned objects."""
    detail = record.body.detail
    version = detail.object.version_id
    decoded, *as_received = event_key_candidates(detail.object.key)
    return ObjectRef(
        bucket=detail.bucket.name,
        key=decoded,
        version_id=None if version in (None, "", "null") else version,
        size_bytes=None if detail.object.size is None else int(detail.object.size),
        etag=detail.object.etag,
        raw_key=as_received[0] if as_received else None,
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


def _delivery(record: ObjectCreatedRecord, context: LambdaContext | None) -> Delivery:
    remaining = (lambda: context.get_remaining_time_in_millis() / 1000) if context is not None else (lambda: 900.0)
    return Delivery(
        queue_arn=record.eventSourceARN,
        receipt_handle=record.receiptHandle,
        receive_count=int(record.attributes.ApproximateReceiveCount or 1),
        remaining_s=remaining,
    )


def record_handler(record: ObjectCreatedRecord, lambda_context: LambdaContext | None = None) -> dict[str, Any]:
    """Process one record; raising reports it as a batch item failure (after choosing
    when the message should come back)."""
    outcome = "error"
    try:
        result = _record_handler(record, lambda_context)
        outcome = str(result.get("state", "done"))
        return result
    except Exception as exc:
        outcome = type(exc).__name__
        raise
    finally:
        listener = _on_record[0]
        if listener is not None:
            listener(record.messageId, int(record.attributes.ApproximateReceiveCount or 1), outcome)


def _record_handler(record: ObjectCreatedRecord, lambda_context: LambdaContext | None = None) -> dict[str, Any]:
    if record.messageId in _handed_over:
        return {"state": "handed_over"}
    ref = to_object_ref(record)
    delivery = _delivery(record, lambda_context)
    logger.set_correlation_id(record.body.id)
    logger.append_keys(source_key=ref.key, message_id=record.messageId)
    started = time.monotonic()
    pipeline = get_pipeline()
    settings = pipeline.settings
    handovers = _handovers(record.messageAttributes.get(HANDOVERS_ATTRIBUTE))
    try:
        result = pipeline.process(ref, delivery)
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
        delay = busy_delay_s(busy.lease_expires_at_s - time.time(), lease_s=settings.lease_s, rng=_rng)
        if _hand_over(record.eventSourceARN, record.messageId, record.receiptHandle, delay, handovers=handovers):
            # Waiting is not failing: a returned record would count a receive toward the
            # dead-letter queue; a fresh copy, durably queued first, counts none.
            logger.info("busy: re-sent to come back after the lease", extra={"job_key": busy.job_key, "delay_s": delay})
            return {"state": "busy_resent"}
        _return_after[record.messageId] = delay
        logger.info("busy: redelivering after the lease", extra={"job_key": busy.job_key, "return_after_s": delay})
        raise
    except DeliveryLost as exc:
        # The message is not ours any more: nothing to set on it.
        metrics.add_metric(name="JobsTransient", unit=MetricUnit.Count, value=1)
        _return_after[record.messageId] = -1
        logger.warning("delivery lost: abandoning the work", extra={"error": str(exc)})
        raise
    except DeadlineReached as exc:
        metrics.add_metric(name="JobsTransient", unit=MetricUnit.Count, value=1)
        _return_after[record.messageId] = 0
        logger.warning("deadline: redelivering at once", extra={"error": str(exc)})
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


def _handovers(attribute: Any) -> int:
    """The handover count a record carries (0 when it has none)."""
    if attribute is None:
        return 0
    value = attribute.get("stringValue") if isinstance(attribute, dict) else getattr(attribute, "stringValue", None)
    try:
        count = int(value or 0)
    except (TypeError, ValueError):
        return MAX_HANDOVERS  # not ours to trust: no more handovers
    return count if count >= 0 else MAX_HANDOVERS


def _hand_over(queue_arn: str, message_id: str, receipt_handle: str, delay_s: int, *, handovers: int) -> bool:
    """Queue a fresh copy of a record, then delete the received one at once (the request
    is durably queued again first, so nothing is dropped; deleting now means a crash of
    the rest of the batch cannot count another receive against it)."""
    queue = get_pipeline().queue
    body = _bodies.get(message_id)
    if queue is None or body is None:
        return False
    try:
        queue.resend(queue_arn, body, delay_s, handovers=handovers)  # type: ignore[attr-defined]
    except TransientFailure as exc:
        logger.warning("could not re-send the record: %s", exc)
        return False
    queue.delete(queue_arn, receipt_handle)  # type: ignore[attr-defined]
    return True


def _hand_over_running_low(event: dict[str, Any]) -> None:
    """Before any record is processed: hand over every record on its last receive but
    one. One more lost receive would dead-letter it, though its own work may never have
    failed (a batch-mate's crash, a lost acknowledgement, a deadline)."""
    settings = get_pipeline().settings
    for raw in event.get("Records", []):
        try:
            ObjectCreatedRecord.model_validate(raw)  # one that does not parse is the processor's to report
            receives = int(raw.get("attributes", {}).get("ApproximateReceiveCount", 1) or 1)
            handovers = _handovers((raw.get("messageAttributes") or {}).get(HANDOVERS_ATTRIBUTE))
            if receives < settings.max_receive_count - 1 or handovers >= MAX_HANDOVERS:
                continue
            if _hand_over(raw["eventSourceARN"], raw["messageId"], raw["receiptHandle"], 0, handovers=handovers + 1):
                _handed_over.add(raw["messageId"])
                logger.info("receives running low: handed over to a fresh copy", extra={"handovers": handovers + 1})
        except (KeyError, TypeError, ValueError, AttributeError):
            continue


def _return_failed(event: dict[str, Any], response: PartialItemFailureResponse) -> None:
    """Set the visibility of every record reported as failed (one batch call per queue)."""
    failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
    if not failed:
        return
    pipeline = get_pipeline()
    settings = pipeline.settings
    by_queue: dict[str, list[tuple[str, int]]] = {}
    for raw in event.get("Records", []):
        message_id = raw.get("messageId")
        if message_id not in failed:
            continue
        seconds = _return_after.get(message_id)
        if seconds is None:  # transient, superseded, unexpected or unparsable: back off
            receives = int(raw.get("attributes", {}).get("ApproximateReceiveCount", 1) or 1)
            seconds = transient_delay_s(receives, base_s=settings.retry_base_s, cap_s=settings.retry_cap_s, rng=_rng)
        if seconds < 0:
            continue
        by_queue.setdefault(raw.get("eventSourceARN", ""), []).append((raw["receiptHandle"], seconds))
    if pipeline.queue is None:
        return
    for queue_arn, delays in by_queue.items():
        pipeline.queue.return_later(queue_arn, delays)  # type: ignore[attr-defined]


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Entry point: returns ``{"batchItemFailures": [{"itemIdentifier": <messageId>}, ...]}``."""
    # A processor per invocation: it holds the batch's state, so invocations never share it.
    processor = BatchProcessor(event_type=EventType.SQS, model=ObjectCreatedRecord, raise_on_entire_batch_failure=False)
    _return_after.clear()
    _bodies.clear()
    _bodies.update({r.get("messageId", ""): r.get("body", "") for r in event.get("Records", [])})
    _handed_over.clear()
    _hand_over_running_low(event)
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    _return_failed(event, response)
    _return_after.clear()
    _bodies.clear()
    _handed_over.clear()
    return response
