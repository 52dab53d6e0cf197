"""Delivery policy: what becomes of an SQS record the worker received.

A record asks for one of three things: an original created or deleted (an EventBridge S3
event), or a job that no S3 event causes (a job request: its inputs ended, a backfill).
:func:`handle` works on it and carries out the policy; every outcome below is the same
whatever the record asked.

Lambda's SQS event source deletes the records a handler reports as successes and leaves
the others invisible until their visibility timeout ends (90 minutes in the template; it
never shortens it). Every receive counts toward the queue's ``maxReceiveCount``, after
which SQS moves the message to the dead-letter queue. So the worker decides, per record:

* **acknowledge** -- a committed job, a recorded permanent failure, an ignored key, an
  event superseded by a greater sequencer of its key, a deletion applied to its asset:
  the record is reported a success and SQS deletes it (:func:`outcome_of_result`);
* **return after N s** -- the record is reported failed and its visibility set to N s: a
  transient failure (a superseded claim, an unexpected error) after an exponential
  backoff on its receive count, a record stopped by the invocation's deadline at once
  (0 s); a record whose delivery was lost is returned with nothing set (``None``: the
  message is no longer ours);
* **hand over** -- a fresh copy of the body is queued (delayed, and carrying the hand-over
  count in the :data:`HANDOVERS_ATTRIBUTE` message attribute), then the received message
  deleted and the record reported a success. A busy duplicate is handed over delayed by
  the holder's remaining lease plus jitter (waiting is not failing: a fresh copy counts no
  receive); if the copy cannot be sent, it is returned after that delay instead. A record
  on its last receive but one (``>= max_receive_count - 1``) is handed over with no delay
  before any record of the batch is worked on, at most :data:`MAX_HANDOVERS` times:
  receives are lost to batch-mates' crashes and lost acknowledgements without the record's
  own work failing, and the dead-letter queue is for requests that keep failing.

A hand-over never drops a request (the copy is queued before the delete); it may duplicate
one (a send retried after a lost answer, a crash between send and delete), which the ledger
answers as any duplicate.

:func:`decide` and :func:`before_work` are pure: the clock value and the source of jitter
are arguments. :class:`Batch` holds one invocation's state (the bodies, who was handed over,
the visibility chosen for each record going back) and carries the decisions out through
the :class:`~mediajobs.service_layer.ports.Queue` port; the handler creates one per
invocation.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from mediajobs.domain.assets import Deleted
from mediajobs.domain.errors import DeadlineReached, DeliveryLost, JobBusy, Superseded, TransientFailure
from mediajobs.domain.jobs import Delivery, JobRequest, ObjectRef, SourceResult, SourceState
from mediajobs.domain.retry import busy_delay_s, transient_delay_s
from mediajobs.service_layer.observer import DeliveryObserver
from mediajobs.service_layer.ports import Queue
from mediajobs.settings import Settings

log = logging.getLogger(__name__)

#: How often one request is handed over to a fresh copy before SQS may dead-letter it.
MAX_HANDOVERS: Final = 2

#: Message attribute counting how often a record was handed over to a fresh copy after its
#: receives ran low (a ``Number``; a busy hand-over carries the count on unchanged).
HANDOVERS_ATTRIBUTE: Final = "mediajobs-handovers"


class Outcome(enum.StrEnum):
    """What working on a record came to."""

    COMMITTED = "committed"  #: the jobs are done (or were already)
    SPLIT = "split"  #: a job was split: its parts run as job requests, and the asset ends with them
    REVIEW = "review"  #: its moderation job is held for a person's decision (recorded in the ledger)
    REJECTED = "rejected"  #: the moderation policy (or a person) refused it, recorded in the ledger
    FAILED = "failed"  #: a permanent failure, recorded in the ledger
    IGNORED = "ignored"  #: not an original (outside the originals prefix)
    OUTDATED = "outdated"  #: the event was superseded: a greater sequencer of its key is current
    DELETED = "deleted"  #: an "Object Deleted" event, applied to its asset
    BUSY = "busy"  #: another worker holds the job's lease (until ``busy_until_s``)
    TRANSIENT = "transient"  #: a failure that may pass
    DEADLINE = "deadline"  #: the invocation's end came before the work did
    DELIVERY_LOST = "delivery_lost"  #: the message is no longer ours (receipt handle invalid)
    SUPERSEDED = "superseded"  #: the claim was taken over by another worker
    UNEXPECTED = "unexpected"  #: a bug or an unclassified error (and a record that does not parse)


@dataclass(frozen=True)
class Policy:
    """The numbers the delivery policy runs on.

    Attributes
    ----------
    max_receive_count: the queue's redrive ``maxReceiveCount``.
    retry_base_s, retry_cap_s: first and largest backoff after a transient failure, seconds.
    lease_s: a claim's lease, seconds (the jitter of a busy hand-over is up to a tenth of it).
    max_handovers: hand-overs for running low on receives, per request.
    """

    max_receive_count: int
    retry_base_s: int
    retry_cap_s: int
    lease_s: int
    max_handovers: int = MAX_HANDOVERS

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        """The policy of ``settings`` (``max_handovers`` is :data:`MAX_HANDOVERS`)."""
        return cls(
            max_receive_count=settings.max_receive_count,
            retry_base_s=settings.retry_base_s,
            retry_cap_s=settings.retry_cap_s,
            lease_s=settings.lease_s,
        )


@dataclass(frozen=True)
class Acknowledge:
    """Report the record a success: SQS deletes it."""


@dataclass(frozen=True)
class ReturnAfter:
    """Report the record failed; it comes back after ``seconds`` (0-43200), or, when
    ``None``, when its current visibility ends (the message is no longer ours to set)."""

    seconds: int | None


@dataclass(frozen=True)
class HandOver:
    """Queue a fresh copy delivered after ``delay_s`` carrying ``handovers``, then delete
    the received message and report the record a success."""

    delay_s: int
    handovers: int


Decision = Acknowledge | ReturnAfter | HandOver


def outcome_of(error: BaseException) -> Outcome:
    """The outcome an exception raised by the service stands for (subclasses first:
    :class:`DeadlineReached` and :class:`DeliveryLost` are transient failures)."""
    if isinstance(error, JobBusy):
        return Outcome.BUSY
    if isinstance(error, DeliveryLost):
        return Outcome.DELIVERY_LOST
    if isinstance(error, DeadlineReached):
        return Outcome.DEADLINE
    if isinstance(error, Superseded):
        return Outcome.SUPERSEDED
    if isinstance(error, TransientFailure):
        return Outcome.TRANSIENT
    return Outcome.UNEXPECTED


#: The outcome each state a processed record returns with stands for.
_RESULT_OUTCOMES: Final[Mapping[SourceState, Outcome]] = {
    SourceState.DONE: Outcome.COMMITTED,
    SourceState.SPLIT: Outcome.SPLIT,
    SourceState.REVIEW: Outcome.REVIEW,
    SourceState.REJECTED: Outcome.REJECTED,
    SourceState.PERMANENT_FAILURE: Outcome.FAILED,
    SourceState.IGNORED: Outcome.IGNORED,
    SourceState.SUPERSEDED: Outcome.OUTDATED,
    SourceState.DELETED: Outcome.DELETED,
}


def outcome_of_result(state: SourceState) -> Outcome:
    """The outcome of a record the service returned from with ``state`` (every one is
    acknowledged: :func:`decide`)."""
    return _RESULT_OUTCOMES[state]


def before_work(*, receive_count: int, handovers: int, policy: Policy) -> HandOver | None:
    """Before any record of a batch is worked on: hand over a record on its last receive
    but one (one more lost receive would dead-letter it, though its own work may never
    have failed), unless it was handed over ``policy.max_handovers`` times already.

    Parameters
    ----------
    receive_count: the record's ``ApproximateReceiveCount`` (1 on the first delivery).
    handovers: the hand-overs it carries (:func:`handovers_of`).
    policy: the numbers.

    Returns
    -------
    A hand-over with no delay and one more hand-over counted, or ``None`` (work on it).
    """
    if receive_count < policy.max_receive_count - 1 or handovers >= policy.max_handovers:
        return None
    return HandOver(delay_s=0, handovers=handovers + 1)


def decide(
    outcome: Outcome,
    *,
    receive_count: int,
    handovers: int,
    policy: Policy,
    now_s: float,
    rng: random.Random,
    busy_until_s: float | None = None,
) -> Decision:
    """What becomes of a record once worked on.

    Parameters
    ----------
    outcome: what the work came to.
    receive_count: the record's ``ApproximateReceiveCount`` (1 on the first delivery).
    handovers: the hand-overs it carries; a busy hand-over carries them on unchanged.
    policy: the numbers.
    now_s: the time, Unix seconds (the busy delay is the lease left from now).
    rng: the source of jitter (tests pass a seeded one).
    busy_until_s: when the holder's lease ends, Unix seconds (``BUSY`` only).

    Returns
    -------
    :class:`Acknowledge`, :class:`ReturnAfter` or :class:`HandOver`
        (:func:`~mediajobs.domain.retry.busy_delay_s`, :func:`~mediajobs.domain.retry.transient_delay_s`).

    Raises
    ------
    ValueError
        ``BUSY`` without ``busy_until_s``.
    """
    if outcome in (
        Outcome.COMMITTED,
        Outcome.SPLIT,
        Outcome.REVIEW,
        Outcome.REJECTED,
        Outcome.FAILED,
        Outcome.IGNORED,
        Outcome.OUTDATED,
        Outcome.DELETED,
    ):
        return Acknowledge()
    if outcome is Outcome.BUSY:
        if busy_until_s is None:
            raise ValueError("a busy outcome needs busy_until_s")
        return HandOver(
            delay_s=busy_delay_s(busy_until_s - now_s, lease_s=policy.lease_s, rng=rng), handovers=handovers
        )
    if outcome is Outcome.DELIVERY_LOST:
        return ReturnAfter(None)
    if outcome is Outcome.DEADLINE:
        return ReturnAfter(0)
    return ReturnAfter(transient_delay_s(receive_count, base_s=policy.retry_base_s, cap_s=policy.retry_cap_s, rng=rng))


def handovers_of(attribute: Any) -> int:
    """The hand-over count a record carries in :data:`HANDOVERS_ATTRIBUTE` (a Lambda
    record's ``{"stringValue": "1", ...}`` or a model with ``stringValue``): 0 when it has
    none, ``MAX_HANDOVERS`` when it is not a count (not ours to trust: no more hand-overs)."""
    if attribute is None:
        return 0
    value = attribute.get("stringValue") if isinstance(attribute, dict) else getattr(attribute, "stringValue", None)
    try:
        count = int(value or 0)
    except (TypeError, ValueError):
        return MAX_HANDOVERS
    return count if count >= 0 else MAX_HANDOVERS


@dataclass(frozen=True)
class Received:
    """One record of a Lambda SQS event, as far as delivery is concerned.

    Attributes
    ----------
    message_id, queue_arn, receipt_handle, body: the record's ``messageId``,
        ``eventSourceARN``, ``receiptHandle`` and raw ``body``.
    receive_count: ``ApproximateReceiveCount`` (1 when absent).
    handovers: :func:`handovers_of` its :data:`HANDOVERS_ATTRIBUTE`.
    """

    message_id: str
    queue_arn: str
    receipt_handle: str
    body: str
    receive_count: int
    handovers: int

    @classmethod
    def from_record(cls, raw: Mapping[str, Any]) -> Received:
        """From a record of the Lambda event (its JSON shape).

        Raises
        ------
        KeyError, TypeError, ValueError, AttributeError
            If the record lacks its ids or its receive count is not a number.
        """
        return cls(
            message_id=raw["messageId"],
            queue_arn=raw["eventSourceARN"],
            receipt_handle=raw["receiptHandle"],
            body=raw.get("body", ""),
            receive_count=int((raw.get("attributes") or {}).get("ApproximateReceiveCount", 1) or 1),
            handovers=handovers_of((raw.get("messageAttributes") or {}).get(HANDOVERS_ATTRIBUTE)),
        )


class Batch:
    """The delivery state of one invocation: created by the handler for each batch.

    Parameters
    ----------
    records: the event's ``Records`` (Lambda's JSON shape).
    queue: the queue they came from (``None``: nothing is handed over or returned).
    policy: the numbers.
    clock: Unix time in seconds (read when a busy record is settled).
    rng: the source of jitter.
    """

    def __init__(
        self,
        records: Iterable[Mapping[str, Any]],
        *,
        queue: Queue | None,
        policy: Policy,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self._records = list(records)
        self._by_id = {raw.get("messageId"): raw for raw in self._records}
        self._queue = queue
        self.policy = policy
        self._clock = clock
        self._rng = rng
        self._handed_over: set[str] = set()
        #: Visibility chosen for each record of the batch that goes back, by message id.
        self._return_after: dict[str, int | None] = {}

    def hand_over_running_low(self, parses: Callable[[Mapping[str, Any]], bool]) -> list[HandOver]:
        """Before any record is worked on: hand over every record :func:`before_work` says
        to (records for which ``parses`` is false are the batch processor's to report).

        Returns
        -------
        The hand-overs made (a record whose copy could not be sent is worked on instead).
        """
        made = []
        for raw in self._records:
            try:
                if not parses(raw):
                    continue
                received = Received.from_record(raw)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            decision = before_work(
                receive_count=received.receive_count, handovers=received.handovers, policy=self.policy
            )
            if decision is not None and self._hand_over(received, decision):
                self._handed_over.add(received.message_id)
                made.append(decision)
        return made

    def handed_over(self, message_id: str) -> bool:
        """Whether the record was handed over before the work (it is then a success)."""
        return message_id in self._handed_over

    def settle(self, message_id: str, outcome: Outcome, *, busy_until_s: float | None = None) -> Decision:
        """Decide what becomes of the worked-on record ``message_id`` (:func:`decide`) and
        carry out a hand-over; a record going back keeps its visibility for
        :meth:`return_failed`.

        Returns
        -------
        The decision carried out: a busy record whose copy could not be sent is returned
        after the hand-over's delay (:class:`ReturnAfter`) instead.

        Raises
        ------
        KeyError
            If ``message_id`` is not a record of the batch.
        """
        received = Received.from_record(self._by_id[message_id])
        decision = decide(
            outcome,
            receive_count=received.receive_count,
            handovers=received.handovers,
            policy=self.policy,
            now_s=self._clock(),
            rng=self._rng,
            busy_until_s=busy_until_s,
        )
        if isinstance(decision, HandOver) and not self._hand_over(received, decision):
            decision = ReturnAfter(decision.delay_s)
        if isinstance(decision, ReturnAfter):
            self._return_after[received.message_id] = decision.seconds
        return decision

    def return_failed(self, failed: Iterable[str]) -> dict[str, list[tuple[str, int]]]:
        """Set the visibility of every record reported failed (message ids ``failed``): the
        one :meth:`settle` chose, else (a record that did not parse) a transient backoff.
        One batch call per queue (``Queue.return_later``).

        Returns
        -------
        The visibilities set, ``{queue ARN: [(receipt handle, seconds), ...]}``.
        """
        failed = set(failed)
        by_queue: dict[str, list[tuple[str, int]]] = {}
        for raw in self._records:
            message_id = raw.get("messageId")
            if message_id not in failed:
                continue
            if message_id in self._return_after:
                seconds = self._return_after[message_id]
            else:
                receives = int((raw.get("attributes") or {}).get("ApproximateReceiveCount", 1) or 1)
                seconds = transient_delay_s(
                    receives, base_s=self.policy.retry_base_s, cap_s=self.policy.retry_cap_s, rng=self._rng
                )
            if seconds is None:
                continue
            by_queue.setdefault(raw.get("eventSourceARN", ""), []).append((raw["receiptHandle"], seconds))
        if self._queue is not None:
            for queue_arn, delays in by_queue.items():
                self._queue.return_later(queue_arn, delays)
        return by_queue

    def _hand_over(self, received: Received, decision: HandOver) -> bool:
        """Queue a fresh copy, then delete the received message at once (the request is
        durably queued again first, so nothing is dropped; deleting now means a crash of the
        rest of the batch cannot count another receive against it). False when the copy
        could not be sent."""
        if self._queue is None:
            return False
        try:
            self._queue.resend(received.queue_arn, received.body, decision.delay_s, handovers=decision.handovers)
        except TransientFailure as exc:
            log.warning("could not re-send the record: %s", exc)
            return False
        self._queue.delete(received.queue_arn, received.receipt_handle)
        return True


class Service(Protocol):
    """What a record is worked on by (:class:`~mediajobs.service_layer.pipeline.Pipeline`)."""

    def process(self, ref: ObjectRef, delivery: Delivery | None = None) -> SourceResult: ...
    def remove(self, deleted: Deleted, delivery: Delivery | None = None) -> SourceResult: ...
    def run_request(self, job_key: str, delivery: Delivery | None = None) -> SourceResult: ...


#: What the log says of a record going back, by outcome (busy and unexpected ones aside).
_RETURNING: Final[Mapping[Outcome, str]] = {
    Outcome.DELIVERY_LOST: "delivery lost: abandoning the work",
    Outcome.DEADLINE: "deadline: redelivering at once",
    Outcome.TRANSIENT: "transient failure: redelivering",
    Outcome.SUPERSEDED: "transient failure: redelivering",
}


def handle(
    service: Service,
    batch: Batch,
    message_id: str,
    request: ObjectRef | Deleted | JobRequest,
    delivery: Delivery,
    observer: DeliveryObserver,
) -> dict[str, Any]:
    """Work on one record of a batch and carry out what the policy decides of it.

    ``request`` is what the record asks: an original created (:meth:`Service.process`),
    one deleted (:meth:`Service.remove`), or a job (:meth:`Service.run_request`). Every
    result is acknowledged; a busy record is handed over to a fresh copy (waiting is not
    failing: a returned record would count a receive toward the dead-letter queue; a
    fresh copy, durably queued first, counts none); anything raised goes back after the
    delay the policy chose (:meth:`Batch.settle`) and is raised again for the batch
    processor to report.

    Returns
    -------
    ``{"state": <the result's state>}``, ``{"state": "handed_over"}`` (handed over before
    the work) or ``{"state": "busy_resent"}``.
    """
    if batch.handed_over(message_id):
        return {"state": "handed_over"}
    started = time.monotonic()
    try:
        if isinstance(request, Deleted):
            result = service.remove(request, delivery)
        elif isinstance(request, JobRequest):
            result = service.run_request(request.job_key, delivery)
        else:
            result = service.process(request, delivery)
        settled = batch.settle(message_id, outcome_of_result(result.state))
        assert isinstance(settled, Acknowledge), "every state a record returns with is acknowledged"
        observer.record(result)
        seconds = round(time.monotonic() - started, 3)
        job_keys = [j.job_key for j in result.jobs]
        extra = {"state": result.state, "job_keys": job_keys, "bytes_read": result.bytes_read, "seconds": seconds}
        log.info("record done", extra=extra)
        if result.state is SourceState.PERMANENT_FAILURE and (
            not result.jobs or not all(j.reused for j in result.jobs)
        ):
            log.warning(
                "permanent failure", extra={"reason": result.reason, "detail": result.detail, "job_keys": job_keys}
            )
        return {"state": result.state}
    except JobBusy as busy:
        observer.busy()
        match batch.settle(message_id, Outcome.BUSY, busy_until_s=busy.lease_expires_at_s):
            case HandOver(delay_s=delay):
                log.info(
                    "busy: re-sent to come back after the lease", extra={"job_key": busy.job_key, "delay_s": delay}
                )
                return {"state": "busy_resent"}
            case ReturnAfter(seconds=back_s):
                extra = {"job_key": busy.job_key, "return_after_s": back_s}
                log.info("busy: redelivering after the lease", extra=extra)
        raise
    except Exception as exc:
        # A bug or an unclassified error too: redelivered (and dead-lettered after
        # maxReceiveCount), never silent.
        observer.transient()
        outcome = outcome_of(exc)
        batch.settle(message_id, outcome)
        if outcome is Outcome.UNEXPECTED:
            log.exception("unexpected error: redelivering")
        else:
            log.warning(_RETURNING[outcome], extra={"error": str(exc)})
        raise
