"""Jobs in steps: jobs that take other jobs' outputs, and job requests that are not S3 events.

A job whose inputs include other jobs' outputs (a join of segments, a render gated by a
moderation decision) is written ``waiting`` for the inputs not done yet (its ``pending``
set), and each such input names it among the jobs ``waiting`` for it (:meth:`JobRequests.wait`).
When an input ends, each waiting job is **told** (:meth:`JobRequests.tell`): the input
leaves its ``pending`` set, and the one writer that finds the set empty makes it
``requested`` -- a conditional write, so exactly one, however many inputs end at once,
however often a delivery is redelivered. A failed input fails the jobs waiting for it, with
its reason. The input forgets a waiting job only once it was told, so a teller that dies
half-way is finished by the next delivery of the input (:meth:`~mediajobs.service_layer.claims.Claims.settle_or_claim`).

A ``requested`` job is claimed like any other: by the delivery whose plan holds it (it runs
it right after its inputs), or, when no plan of this delivery holds it, by the **job request**
sent for it on the jobs queue (:func:`request_body`). Its claim makes it run once; the
request itself may be delivered more than once (SQS delivers at least once, and a teller
that died after making it requested is finished by sending it again), like any message.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from mediajobs.domain.errors import ATTEMPTS_EXHAUSTED, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    Decision,
    Delivery,
    JobSpec,
    JobState,
    JobView,
    decide,
    standing_claim,
)
from mediajobs.domain.parts import Split, part_specs
from mediajobs.service_layer.ports import Ledger, Queue
from mediajobs.settings import Settings

log = logging.getLogger(__name__)

#: The ``mediajobs`` field of a job request message (the delivery policy and the worker's
#: record parser tell it from an S3 event by it).
JOB_REQUEST: Final = "job"
_JOB_KEY: Final = re.compile(r"[0-9a-f]{64}")
#: The states of a part that a split job's (re)split requests: not run yet, given back, or
#: collected after an earlier join (a video rendered again after its own collection).
_TO_REQUEST: Final = frozenset(
    {JobState.REQUESTED, JobState.TRANSIENT_FAILURE, JobState.COLLECTING, JobState.COLLECTED}
)
#: How deep a failure is told along jobs waiting for jobs waiting for it.
_MAX_DEPTH: Final = 16


def request_body(job_key: str) -> str:
    """The body of the job request message of ``job_key``: ``{"mediajobs": "job",
    "job_key": <64 hex>}``. The worker runs the job from its row (:meth:`JobView.spec`): a
    message names a job, it never defines one."""
    return json.dumps({"mediajobs": JOB_REQUEST, "job_key": job_key}, separators=(",", ":"), sort_keys=True)


def job_key_of(body: Mapping[str, Any]) -> str | None:
    """The job key a job request message's body names, or ``None`` when it is not one."""
    key = body.get("job_key")
    if body.get("mediajobs") != JOB_REQUEST or not isinstance(key, str) or not _JOB_KEY.fullmatch(key):
        return None
    return key


class JobRequests:
    """Jobs in steps (see the module docstring).

    Parameters
    ----------
    settings: ``jobs_queue_arn`` (where a job request goes when no delivery names a
        queue), ``max_attempts``.
    ledger: the job ledger.
    queue: the jobs queue (``None``: no request can be sent; a requested job then waits
        for a delivery whose plan holds it).
    clock: Unix time in seconds.
    """

    def __init__(self, settings: Settings, *, ledger: Ledger, queue: Queue | None, clock: Callable[[], float]) -> None:
        self._settings = settings
        self._ledger = ledger
        self._queue = queue
        self._clock = clock

    def wait(
        self, spec: JobSpec, views: Mapping[str, JobView], held: Mapping[str, Claim], *, lease_until_s: int
    ) -> Claim:
        """Make sure the job ``spec`` is written, waiting for its inputs not done yet (the
        rows ``views`` read, the claims ``held`` just made), and each of those names it; the
        claim it stands for: ``WAITING``, or -- every input done -- ``RUN`` (claimed now),
        or what a row written before holds.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's.
        """
        now = int(self._clock())
        seen = self._written(spec, views, held)
        if seen is None:
            return Claim(ClaimOutcome.WAITING, spec.job_key, lease_expires_at_s=lease_until_s)
        decision = decide(seen, now_s=now, max_attempts=self._settings.max_attempts)
        if decision in (Decision.TAKE_OVER, Decision.EXHAUST):
            return self._ledger.claim(spec, now_s=now, lease_until_s=lease_until_s, seen=seen)
        if decision is Decision.WAIT:
            return Claim(ClaimOutcome.WAITING, spec.job_key, lease_expires_at_s=lease_until_s)
        return standing_claim(seen)

    def _written(self, spec: JobSpec, views: Mapping[str, JobView], held: Mapping[str, Claim]) -> JobView | None:
        """The job's row, written first when ``views`` has none: ``waiting`` for its inputs
        not done (each told to name it), or ``requested`` when none is pending."""
        seen = views.get(spec.job_key)
        if seen is not None:
            return seen
        now = int(self._clock())
        pending = frozenset(u for u in spec.upstream if not _done(u, views, held))
        if self._ledger.wait(spec, pending, now_s=now):
            log.info("job written", extra={"job_key": spec.job_key, "pending": len(pending)})
        for upstream in sorted(pending):
            self._link(upstream, spec.job_key)
        return self._ledger.get(spec.job_key)

    def wait_again(self, spec: JobSpec, token: str, pending: frozenset[str]) -> JobView:
        """The held job ``spec`` waits for its inputs ``pending`` again (a job taken over from
        collection whose moderation job is held, or runs elsewhere): its row ``waiting``,
        and named among each input's waiting jobs -- or told at once, an input having ended
        meanwhile. Returns its row as it is then.

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As the ledger's.
        """
        row = self._ledger.wait_again(spec.job_key, token, pending, now_s=int(self._clock()))
        for upstream in sorted(pending):
            self._link(upstream, spec.job_key)
        log.info("job waits for its inputs again", extra={"job_key": spec.job_key, "pending": len(pending)})
        return self._ledger.get(spec.job_key) or row

    def _link(self, upstream: str, waiter: str) -> None:
        """Name ``waiter`` among the jobs waiting for ``upstream``, or -- ``upstream`` ended
        meanwhile -- tell it now (both idempotent)."""
        if not self._ledger.register(upstream, waiter, now_s=int(self._clock())):
            ended = self._ledger.get(upstream)  # it ended since (or has no row yet)
            if ended is not None and ended.state in (JobState.DONE, JobState.PERMANENT_FAILURE):
                self._tell_one(waiter, ended)

    def finish(
        self, views: Mapping[str, JobView], *, delivery: Delivery | None = None, in_plan: frozenset[str] = frozenset()
    ) -> bool:
        """Finish, from the rows ``views`` read, what a delivery that died or was throttled
        half-way left: the parts of a split job still ``requested`` are requested again
        (:meth:`resume`), once its splitter's time to send them is over; the jobs
        waiting for an ended job are told (:meth:`tell`); a
        ``waiting`` job that an input of ``views`` does not name (its registration lost
        between the waiting row's write and the input's) is named there again, or told,
        that input having ended. Whether anything was told or named (the rows are then to
        be read again); no request when nothing was left.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`tell`.
        """
        changed = False
        now = int(self._clock())
        for view in views.values():
            if view.split is not None and view.state == JobState.WAITING and view.lease_expires_at_s <= now:
                changed |= self.resume(view, delivery) > 0  # its parts' requests, lost with a delivery
            if view.waiting and view.state in (JobState.DONE, JobState.PERMANENT_FAILURE):
                self.tell(view, delivery=delivery, in_plan=in_plan)
                changed = True
        for view in views.values():
            if view.state != JobState.WAITING:
                continue
            for upstream in sorted(view.pending):
                seen = views.get(upstream)
                if seen is not None and view.job_key not in seen.waiting:
                    self._link(upstream, view.job_key)
                    changed = True
        return changed

    def request(self, specs: Sequence[JobSpec], delivery: Delivery | None = None) -> list[str]:
        """Request jobs that no S3 event causes (a backfill, a fan-out), each after the jobs
        whose outputs it takes: each written unless it is (``requested``, or ``waiting`` for
        its inputs not done), and a job request sent for each that is ``requested`` now.

        Returns
        -------
        list[str]
            The job keys a request was sent for.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's; ``TransientFailure`` too when SQS refused a request (call
            again: a job written ``requested`` is sent its request again).
        """
        views = self._ledger.find([spec.job_key for spec in specs])
        sent: list[str] = []
        for spec in specs:
            row = self._written(spec, views, {})
            if row is not None:
                views = {**views, spec.job_key: row}
            if row is not None and row.state == JobState.REQUESTED and self.request_one(spec.job_key, delivery):
                sent.append(spec.job_key)
        return sent

    def tell(
        self,
        ended: JobView,
        *,
        delivery: Delivery | None = None,
        in_plan: frozenset[str] = frozenset(),
        again: bool = True,
        depth: int = 0,
    ) -> None:
        """Tell every job waiting for ``ended`` (a row ``done`` or ``permanent_failure``)
        that it ended, then forget them on its row.

        A job made ``requested`` by this call gets a job request (:func:`request_body`)
        unless ``in_plan`` holds it (this delivery runs it next); with ``again`` (telling
        again what an earlier delivery may not have finished), so does one found
        ``requested``. A failure fails the jobs waiting for it, and theirs in turn -- a
        waiting job found failed already too (a teller that died between failing it and
        telling its own waiting jobs), down to :data:`_MAX_DEPTH`.

        A waiting job whose request SQS refused is not forgotten: the others are, then
        ``TransientFailure`` is raised, and the next delivery of ``ended``'s message tells
        it again (``again``: the request is sent then).

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's (the next delivery of ``ended`` tells again), or a job request
            not sent.
        """
        if not ended.waiting or ended.state not in (JobState.DONE, JobState.PERMANENT_FAILURE):
            return
        unsent: list[str] = []
        for waiter in sorted(ended.waiting):
            view, made = self._tell_one(waiter, ended)
            if view is None:
                continue
            if view.state == JobState.PERMANENT_FAILURE and view.waiting and depth < _MAX_DEPTH:
                self.tell(view, delivery=delivery, in_plan=in_plan, again=again, depth=depth + 1)
            elif view.state == JobState.REQUESTED and (made or again) and waiter not in in_plan:
                lane = self._settings.video_queue_arn or None if view.split is not None else None  # a join
                try:
                    self.request_one(waiter, delivery, queue_arn=lane)
                except TransientFailure:
                    unsent.append(waiter)
        self._ledger.told(ended.job_key, ended.waiting - frozenset(unsent), now_s=int(self._clock()))
        if unsent:
            raise TransientFailure(
                f"{len(unsent)} job request(s) not sent for the jobs waiting for {ended.job_key[:12]}"
            )

    def _tell_one(self, waiter: str, ended: JobView) -> tuple[JobView | None, bool]:
        """Tell ``waiter`` that its input ``ended`` ended: its row after, and whether this
        call changed its state (made it ``requested``, or failed it)."""
        now = int(self._clock())
        if ended.state == JobState.DONE:
            return self._ledger.input_done(waiter, ended.job_key, now_s=now)
        failed = self._ledger.input_failed(waiter, ended.job_key, ended.failure_reason, ended.failure_detail, now_s=now)
        return self._ledger.get(waiter), failed

    def fan_out(self, parent: JobSpec, token: str, split: Split, delivery: Delivery | None = None) -> JobView:
        """Split the running job ``parent``, held by ``token``, into ``split``'s parts
        (:mod:`mediajobs.domain.parts`), in this order, each step idempotent:

        1. each part's row is written ``requested``, naming the parent among the jobs
           waiting for it (a row an earlier attempt wrote is kept, and made to name it);
        2. the parent turns ``waiting`` for the parts not done (``requested`` when none is),
           with the split recorded, conditional on ``token`` still holding it: a lost
           holder splits nothing, and a split parent is never split again;
        3. a job request is sent for each part still ``requested`` (on the video lane,
           ``video_queue_arn``, when there is one), and for the parent when it is
           ``requested`` already;
        4. the parent's window for those requests is closed (``requests_sent``): until then
           a copy or a redelivery of its original is busy, after it answered at once.

        No request goes out before step 2, so no part can end before the parent waits for
        it; a part ended by an earlier attempt is not waited for. A delivery that dies
        between 1 and 2 leaves rows that its takeover finds (the plan is the same, so the
        keys are); one that dies in 3 leaves the parent waiting for parts whose requests are
        lost -- the original's next delivery sends them again (:meth:`resume`).

        Returns
        -------
        JobView
            The parent's row as step 2 stored it.

        Raises
        ------
        Superseded
            ``token`` no longer holds the parent.
        PermanentFailure
            A part failed for good already (its reason is the parent's).
        TransientFailure
            As the ledger's, or SQS refused a request.
        """
        specs = part_specs(parent, split, self._settings.derivatives_prefix, self._settings.keys_for)
        keys = [spec.job_key for spec in specs]
        now = int(self._clock())
        views = self._ledger.find(keys)
        for spec in specs:
            if spec.job_key not in views:
                self._ledger.wait(spec, frozenset(), now_s=now)
            elif parent.job_key not in views[spec.job_key].waiting:
                self._ledger.register(spec.job_key, parent.job_key, now_s=now)
        views = self._ledger.find(keys)
        failed = next((v for v in views.values() if v.state == JobState.PERMANENT_FAILURE), None)
        if failed is not None:
            raise PermanentFailure(
                failed.failure_reason or ATTEMPTS_EXHAUSTED,
                f"part {failed.job_key[:12]} failed: {failed.failure_detail or ''}".strip(),
            )
        pending = frozenset(k for k in keys if k not in views or views[k].state != JobState.DONE)
        until = now + self._settings.lease_s
        row = self._ledger.split(parent.job_key, token, pending, split, now_s=now, requests_until_s=until)
        log.info("job split into parts", extra={"job_key": parent.job_key, "parts": len(keys), "pending": len(pending)})
        self.resume(row, delivery)
        if row.state == JobState.WAITING:  # every request sent: a copy or a redelivery need not wait
            self._ledger.requests_sent(parent.job_key, until, now_s=int(self._clock()))
        return row

    def resume(self, parent: JobView, delivery: Delivery | None = None) -> int:
        """Send a job request for each part of the split ``parent`` still ``requested``
        (or given back, or collected after an earlier join: :data:`_TO_REQUEST`), and for
        ``parent`` itself when it is
        ``requested``: what a delivery that died after the split left unsent. Idempotent: a
        part's claim makes it run once however often it is requested. Returns how many were
        sent.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's, or SQS refused a request.
        """
        if parent.split is None or parent.spec is None:
            return 0
        lane = self._settings.video_queue_arn or None
        sent = 0
        if parent.state == JobState.REQUESTED:
            return int(self.request_one(parent.job_key, delivery, queue_arn=lane))
        if parent.state != JobState.WAITING:
            return 0
        keys = [
            spec.job_key
            for spec in part_specs(
                parent.spec, parent.split, self._settings.derivatives_prefix, self._settings.keys_for
            )
        ]
        views = self._ledger.find(keys)
        for key in keys:
            view = views.get(key)
            if view is not None and view.state == JobState.DONE and key in parent.pending:
                _, made = self._tell_one(parent.job_key, view)  # ended between a find and the split
                if made:
                    sent += int(self.request_one(parent.job_key, delivery, queue_arn=lane))
            elif view is not None and view.state in _TO_REQUEST:
                sent += int(self.request_one(key, delivery, queue_arn=lane))
        return sent

    def lane(self, specs: Sequence[JobSpec], queue_arn: str) -> dict[str, JobView]:
        """Request ``specs`` on the queue ``queue_arn`` (a backfill's lane): each written
        unless it is (``requested``, or ``waiting`` for its inputs not done), and a job
        request sent for each not ``done`` -- whoever wrote its row: a job an upload claimed
        first ends on its own delivery, and this request then finds it done and tells the
        assets waiting for it (:meth:`~mediajobs.service_layer.pipeline.Pipeline.run_request`).
        A ``waiting`` job is sent none: its last input requests it. Returns the rows.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's; ``TransientFailure`` too when SQS refused a request.
        """
        views = dict(self._ledger.find([spec.job_key for spec in specs]))
        for spec in specs:
            row = self._written(spec, views, {})
            if row is None:
                continue
            views[spec.job_key] = row
            if row.state not in (JobState.DONE, JobState.WAITING) and self._queue is not None:
                self._queue.resend(queue_arn, request_body(spec.job_key), 0)
                log.info("job requested on the lane", extra={"job_key": spec.job_key})
        return views

    def resend(self, job_key: str, queue_arn: str) -> None:
        """Send the job request of ``job_key`` to ``queue_arn`` again (a backfill's job
        whose claim was given back without its message coming again).

        Raises
        ------
        TransientFailure
            SQS refused it.
        """
        if self._queue is not None:
            self._queue.resend(queue_arn, request_body(job_key), 0)
            log.info("job requested again on the lane", extra={"job_key": job_key})

    def request_one(self, job_key: str, delivery: Delivery | None = None, *, queue_arn: str | None = None) -> bool:
        """Send the job request of ``job_key`` to ``queue_arn`` when given, else the jobs
        queue (the settings' ``jobs_queue_arn``, else the queue ``delivery`` came from).
        Returns whether it was sent: ``False`` when
        there is no queue to send it to (the job stays ``requested`` for a delivery whose
        plan holds it: the local CLI runs every job of its plan itself).

        Raises
        ------
        TransientFailure
            SQS refused it (the caller's message is redelivered, and sends it again).
        """
        queue_arn = queue_arn or self._settings.jobs_queue_arn or (delivery.queue_arn if delivery is not None else "")
        if self._queue is None or not queue_arn:
            log.warning("a requested job has no queue to go to", extra={"job_key": job_key})
            return False
        try:
            self._queue.resend(queue_arn, request_body(job_key), 0)
        except TransientFailure as exc:
            log.warning("could not send a job request: %s", exc, extra={"job_key": job_key})
            raise
        log.info("job requested", extra={"job_key": job_key})
        return True


def _done(job_key: str, views: Mapping[str, JobView], held: Mapping[str, Claim]) -> bool:
    """Whether the input ``job_key`` is done, as this delivery knows it."""
    claim = held.get(job_key)
    if claim is not None:
        return claim.outcome is ClaimOutcome.DONE
    view = views.get(job_key)
    return view is not None and view.state == JobState.DONE
