"""Leases: one fenced lease (:class:`Lease`) for every row a worker holds for a while --
a job's claim, an original's reading mark, a job's collection -- and the heartbeat of a
claim (:class:`LeaseKeeper`).

A lease is a token and an expiry written on a row. It is taken by a write conditioned on
the row having no holder, or on the previous holder's token with its lease over (so two
takers never both win), renewed and given back by writes conditioned on the token (so a
holder that was taken over can change nothing). The adapters write those conditions on
their rows (the ``LeaseRows`` port); :class:`Lease` is what the holder keeps.

The heartbeat keeps a claim's lease and its message while the work runs, and gives both
back when the invocation is about to end.

A background thread wakes every ``tick_s`` seconds and

* renews the lease in the ledger (conditional on the token) once a third of the lease
  has passed since the last renewal;
* sets the SQS message's visibility to the lease's remaining time plus a margin, so the
  message stays hidden while the job runs and comes back soon after a crash;
* releases the claim as transient when less than ``margin_s`` of the Lambda
  invocation is left, so another worker can take the job at once instead of waiting for
  the lease of a worker Lambda is about to stop mid-write.

``ReceiptHandleIsInvalid`` once the message was held (deleted, or its receive expired)
aborts the work and releases the claim. On the first extension it means the record was
never a message in flight (an event replayed with ``sam local invoke -e``): the work
goes on without one.

It never interrupts the work: it records what went wrong, and the pipeline calls
:meth:`LeaseKeeper.check` at every step boundary (before each write), which raises it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable, Iterator

from mediajobs.domain.errors import (
    DeadlineReached,
    DeliveryLost,
    MediaJobsError,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.domain.jobs import Delivery
from mediajobs.domain.retry import MAX_VISIBILITY_S
from mediajobs.service_layer.ports import LeaseRows, Queue

log = logging.getLogger(__name__)


def lease_until(now_s: float, lease_s: int, delivery: Delivery | None) -> int:
    """When a lease taken or renewed at ``now_s`` ends: ``lease_s`` later, but never after
    the invocation's end (plus 1 s) -- past it, the holder cannot be running, so a
    duplicate that waits for the lease waits exactly as long as the holder can live."""
    until = now_s + lease_s
    if delivery is not None:
        until = min(until, now_s + max(0.0, delivery.remaining_s()) + 1)
    return math.ceil(until)


class Lease:
    """A fenced lease this worker holds on one row.

    Parameters
    ----------
    rows: the table's lease writes (the ``LeaseRows`` port: the ledger for claims, its
        collection view for collections, the source index for reading marks).
    key: the row's key (a job key, a source id).
    token: this holder's fencing token.
    expires_at_s: when the lease ends unless renewed, Unix seconds.
    clock: Unix time in seconds.
    """

    def __init__(self, rows: LeaseRows, key: str, token: str, expires_at_s: int, *, clock: Callable[[], float]) -> None:
        self._rows = rows
        self.key = key
        self.token = token
        self.expires_at_s = expires_at_s
        self.clock = clock
        self.held = True

    def renew(self, until_s: int) -> None:
        """Extend the lease to ``until_s`` (Unix seconds).

        Raises
        ------
        Superseded
            The row is not this holder's any more.
        TransientFailure
            The write failed (the lease has slack: try again).
        """
        self._rows.renew(self.key, self.token, lease_until_s=until_s, now_s=int(self.clock()))
        self.expires_at_s = until_s

    def release(self, why: object) -> bool:
        """Give the lease back (``why``: the reason, for the row and the log), so the next
        taker need not wait for it to run out. Failures are logged, never raised; a lease
        already given back, forgotten or taken over is left. Returns whether it was given back."""
        if not self.held:
            return False
        self.held = False
        try:
            detail = repr(why) if isinstance(why, Exception) else str(why)
            self._rows.release(self.key, self.token, detail=detail, now_s=int(self.clock()))
        except (Superseded, PermanentFailure, TransientFailure) as exc:
            log.warning("could not give the lease back: %r", exc, extra={"lease_key": self.key})
            return False
        return True

    def forget(self) -> None:
        """The holder's own last write replaced the lease on the row (a job committed, a
        hash remembered over a reading mark): nothing is left to give back."""
        self.held = False


class LeaseKeeper:
    """Context manager around the work of one claim: its heartbeat.

    Parameters
    ----------
    lease: the claim's lease.
    queue: the queue its record came from (unused without a delivery): the queue port is
        the handler's too (:class:`~mediajobs.service_layer.ports.Queue`).
    delivery: the SQS record being worked on, or ``None`` (CLI, tests).
    lease_s: lease length, seconds.
    margin_s: seconds of invocation time kept to release the claim and report.
    """

    def __init__(
        self, lease: Lease, *, queue: Queue | None, delivery: Delivery | None, lease_s: int, margin_s: int
    ) -> None:
        self.lease = lease
        self._queue = queue
        self._delivery = delivery
        self._lease_s = lease_s
        self._margin_s = margin_s
        self._clock = lease.clock
        self._renewed_at = self._clock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._delivery_held = True
        self._finished = False
        self.problem: MediaJobsError | None = None
        self.renewals = 0

    @property
    def job_key(self) -> str:
        """The claimed job's key."""
        return self.lease.key

    @property
    def expires_at_s(self) -> int:
        """When the claim's lease ends unless renewed, Unix seconds."""
        return self.lease.expires_at_s

    @property
    def tick_s(self) -> float:
        """Seconds between beats: often enough to see the deadline coming and to renew
        three times per lease."""
        return max(0.05, min(self._lease_s / 3, self._margin_s / 2))

    def __enter__(self) -> LeaseKeeper:
        now = self._clock()
        if self._lease_s - (self.expires_at_s - now) >= self._lease_s / 3:
            # Claimed before an earlier job of the delivery ran: renew first (the heartbeat's
            # rule), so the message is not shown from a lease that has run down.
            self._renew_at_entry(now)
        try:
            self._extend_visibility(self._clock())
        except DeliveryLost:
            # Never in flight: an event replayed by hand (``sam local invoke -e``). The work
            # is idempotent; it goes on, without a message to keep.
            log.warning("the record's message is not in flight (a replayed event?)", extra={"job_key": self.job_key})
            self._delivery_held = False
        self._thread = threading.Thread(target=self._run, name=f"lease-{self.job_key[:8]}", daemon=True)
        self._thread.start()
        return self

    def _renew_at_entry(self, now: float) -> None:
        try:
            self.lease.renew(lease_until(now, self._lease_s, self._delivery))
        except Superseded as lost:  # raised by the check before the job's work starts
            log.warning("lease lost before the job started: taken over", extra={"job_key": self.job_key})
            self.problem = lost
        except TransientFailure as exc:  # the heartbeat tries again
            log.warning("could not renew the lease at the job's start: %s", exc, extra={"job_key": self.job_key})
        else:
            self._renewed_at = now
            self.renewals += 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.beat()
            if self.problem is not None or self._finished:
                return

    def beat(self) -> None:
        """One heartbeat (the thread calls it; tests call it directly)."""
        with self._lock:
            if self.problem is not None or self._finished:
                return
            now = self._clock()
            try:
                if self._delivery is not None and self._delivery.remaining_s() < self._margin_s:
                    self._give_back(DeadlineReached(f"{self._delivery.remaining_s():.1f} s left in the invocation"))
                    return
                if now - self._renewed_at >= self._lease_s / 3:
                    self.lease.renew(lease_until(now, self._lease_s, self._delivery))
                    self._renewed_at = now
                    self.renewals += 1
                    self._extend_visibility(now)
            except Superseded as lost:
                log.warning("lease lost: another worker took the job over", extra={"job_key": self.job_key})
                self.problem = lost
            except DeliveryLost as gone:
                self._give_back(gone)
            except TransientFailure as exc:  # the next beat tries again; the lease has slack
                log.warning("heartbeat failed: %s", exc, extra={"job_key": self.job_key})

    def _extend_visibility(self, now: float) -> None:
        """Keep the message hidden for the lease's remaining time plus the margin."""
        self._hide_for(self.expires_at_s - now)

    def _hide_for(self, seconds: float) -> None:
        """The one place the keeper sets its message's visibility: ``seconds`` (rounded
        up) plus the margin from now, at least 1 s and at most SQS's 12 hours; nothing
        without a message held.

        Raises
        ------
        DeliveryLost, TransientFailure
            As :meth:`Queue.set_visibility <mediajobs.service_layer.ports.Queue.set_visibility>`.
        """
        if self._delivery is None or self._queue is None or not self._delivery_held:
            return
        visibility_s = min(MAX_VISIBILITY_S, max(1, math.ceil(seconds) + self._margin_s))
        self._queue.set_visibility(self._delivery, visibility_s)

    def _give_back(self, problem: MediaJobsError) -> None:
        """Release the claim as transient so any delivery can take it over now."""
        self.problem = problem
        if self.lease.release(problem):
            log.warning("claim released: %s", problem, extra={"job_key": self.job_key})

    def check(self) -> None:
        """Raise what the heartbeat found (:class:`Superseded`, :class:`DeadlineReached`,
        :class:`DeliveryLost`); the pipeline calls it before every write."""
        if self.problem is None:
            self.beat_if_due()
        if self.problem is not None:
            raise self.problem

    @contextlib.contextmanager
    def last_write(self) -> Iterator[None]:
        """Around the write that finishes the job: raises what the heartbeat found, then
        holds the heartbeat off (no renewal or release races the commit) and stops it;
        after the commit, keeps the message hidden for the rest of the invocation."""
        self.check()
        with self._lock:
            yield
            self._finished = True
        # The record is acknowledged when the invocation returns: keep it hidden until then
        # (a redelivery now would find the job done, but would count a receive).
        if self._delivery is not None:
            try:
                self._hide_for(max(0.0, self._delivery.remaining_s()))
            except MediaJobsError as exc:
                log.warning("could not keep the committed record hidden: %s", exc, extra={"job_key": self.job_key})

    def beat_if_due(self) -> None:
        """Check the deadline now (cheap), without waiting for the next tick."""
        if self._delivery is not None and self._delivery.remaining_s() < self._margin_s:
            self.beat()


class Heartbeats:
    """Makes the lease and the heartbeat of each claim a delivery holds.

    Parameters
    ----------
    rows: the ledger (a claim's lease writes).
    queue: the queue records come from (``None``: no SQS delivery); the heartbeat keeps a
        running job's message hidden.
    lease_s: lease length, seconds.
    margin_s: seconds of invocation time kept to release a claim and report.
    clock: Unix time in seconds (the claims', their commits').
    """

    def __init__(
        self, rows: LeaseRows, queue: Queue | None, *, lease_s: int, margin_s: int, clock: Callable[[], float]
    ) -> None:
        self._rows = rows
        self.queue = queue
        self._lease_s = lease_s
        self._margin_s = margin_s
        self.clock = clock

    def keep(self, key: str, token: str, expires_at_s: int, delivery: Delivery | None) -> LeaseKeeper:
        """The heartbeat of the claim ``token`` holds on the job ``key`` until ``expires_at_s``."""
        lease = Lease(self._rows, key, token, expires_at_s, clock=self.clock)
        return LeaseKeeper(lease, queue=self.queue, delivery=delivery, lease_s=self._lease_s, margin_s=self._margin_s)
