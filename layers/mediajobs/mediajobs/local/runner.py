"""Drives a handler with SQS batches the way Lambda's SQS event source mapping does.

Receive up to ``BatchSize`` messages, build the Lambda SQS event (:mod:`mediajobs.local.events`), invoke the handler
with a context whose remaining time counts down from the function's Timeout, then delete
every record not listed in ``batchItemFailures``. As in Lambda, a failed record's
visibility is left as the handler set it (the handler chooses when each comes back);
the redrive to the dead-letter queue after ``maxReceiveCount`` receives applies because
moto counts receives.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from mediajobs.local.events import ACCOUNT_ID, REGION, sqs_event

__all__ = [
    "AckHook",
    "DeliveryStats",
    "EventSourceMapping",
    "HandlerFn",
    "LocalLambdaContext",
    "QUEUE_DEPTH_ATTRIBUTES",
    "sqs_event",
]

#: The queue attributes whose sum is every message a queue holds (SQS API reference,
#: GetQueueAttributes): visible, received and not deleted, delayed.
QUEUE_DEPTH_ATTRIBUTES: Final = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)

HandlerFn = Callable[[dict[str, Any], Any], dict[str, Any]]
#: Called with the messages about to be deleted; returns those to delete (a simulation
#: drops some, as a lost acknowledgement would, or stops the process there).
AckHook = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


@dataclass
class LocalLambdaContext:
    """The subset of the Lambda context object that Powertools and the pipeline read.

    Attributes
    ----------
    timeout_s: the function's Timeout, seconds; sets the deadline.
    """

    function_name: str = "mediajobs-worker"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 2048
    timeout_s: int = 900
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:mediajobs-worker"
    log_group_name: str = "/aws/lambda/mediajobs-worker"
    log_stream_name: str = "local"
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the (simulated) timeout."""
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@dataclass
class DeliveryStats:
    """What the event source mapping did.

    Attributes
    ----------
    invocations: handler calls.
    received: records delivered (redeliveries included).
    deleted: records deleted after success.
    failed: records reported in ``batchItemFailures``.
    bodies: the body of every message delivered for the first time, in order.
    """

    invocations: int = 0
    received: int = 0
    deleted: int = 0
    failed: int = 0
    bodies: list[str] = field(default_factory=list)


class EventSourceMapping:
    """SQS -> handler, as Lambda's event source mapping with ``ReportBatchItemFailures``.

    Parameters
    ----------
    sqs: a boto3 SQS client; queue_url, queue_arn: the source queue.
    handler: the Lambda handler (``event, context -> response``).
    batch_size: records per invocation (the template's BatchSize, at most 10 per receive).
    timeout_s: the function's Timeout, for the context's remaining time.
    before_ack: see :data:`AckHook`.
    """

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        queue_arn: str,
        handler: HandlerFn,
        *,
        batch_size: int = 10,
        timeout_s: int = 900,
        region: str = REGION,
        before_ack: AckHook | None = None,
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._queue_arn = queue_arn
        self._handler = handler
        self._batch_size = max(1, min(10, batch_size))
        self._timeout_s = timeout_s
        self._region = region
        self._before_ack = before_ack
        self.stats = DeliveryStats()
        #: The messages of the batch being handled (receipt handles included), so a test
        #: can make them visible again after stopping the handler mid-batch.
        self.current_batch: list[dict[str, Any]] = []

    def poll_once(self, wait_s: int = 0) -> int:
        """Receive one batch and invoke the handler on it; returns the records received."""
        response = self._sqs.receive_message(
            QueueUrl=self._queue_url,
            MaxNumberOfMessages=self._batch_size,
            WaitTimeSeconds=wait_s,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = response.get("Messages", [])
        if not messages:
            return 0
        for m in messages:
            if m.get("Attributes", {}).get("ApproximateReceiveCount", "1") == "1":
                self.stats.bodies.append(m["Body"])
        self.current_batch = messages
        result = self._handler(
            sqs_event(messages, self._queue_arn, self._region), LocalLambdaContext(timeout_s=self._timeout_s)
        )
        failed_ids = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
        self.stats.invocations += 1
        self.stats.received += len(messages)
        done = [m for m in messages if m["MessageId"] not in failed_ids]
        failed = len(messages) - len(done)
        if self._before_ack is not None:
            done = self._before_ack(done)
        if done:
            self._sqs.delete_message_batch(
                QueueUrl=self._queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        self.current_batch = []
        self.stats.deleted += len(done)
        self.stats.failed += failed
        return len(messages)

    def expire(self, messages: list[dict[str, Any]]) -> None:
        """Make ``messages`` visible now, as if their visibility timeout had run out."""
        for m in messages:
            self._sqs.change_message_visibility(
                QueueUrl=self._queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
            )

    def in_flight(self) -> int:
        """Messages in the queue: visible, in flight (received, not deleted) or delayed
        (sent with ``DelaySeconds``, as a hand-over's fresh copy is). SQS reports the three
        apart (``ApproximateNumberOfMessages``, ``...NotVisible``, ``...Delayed``; SQS API
        reference, GetQueueAttributes) and moto counts a delayed message in neither of the
        first two."""
        attrs = self._sqs.get_queue_attributes(QueueUrl=self._queue_url, AttributeNames=list(QUEUE_DEPTH_ATTRIBUTES))[
            "Attributes"
        ]
        return sum(int(attrs.get(name, 0)) for name in QUEUE_DEPTH_ATTRIBUTES)

    def drain(self, max_seconds: float = 600) -> DeliveryStats:
        """Poll until the queue holds nothing (or ``max_seconds`` pass); returns the stats.

        Raises
        ------
        TimeoutError
            If messages remain after ``max_seconds``.
        """
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline:
            if self.poll_once(wait_s=0):
                continue
            if self.in_flight() == 0:
                return self.stats
            self.poll_once(wait_s=1)  # long-poll until a failed record becomes visible again
        raise TimeoutError(f"queue not drained after {max_seconds} s")
