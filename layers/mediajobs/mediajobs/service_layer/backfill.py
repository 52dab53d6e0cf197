"""Backfills, in order (``docs/backfill.md``): what a change of the active recipe set (or of
the policy version) owes the assets already there.

1. **Start** (:meth:`Backfiller.start`): the change is the active set and the policy version
   (:func:`~mediajobs.domain.backfill.change_of`); its backfill is created once, by a
   conditional write, so a second start -- a second deploy of the same set, a second
   ``mediajobs backfill start`` -- answers with the one there. A backfill of another change
   still running is cancelled: the newer set supersedes it.
2. **Scan** (:meth:`Backfiller.tick`): each parallel scan segment goes on from its cursor
   in DynamoDB, a page at a time, at most ``backfill_rate_per_s`` jobs enqueued per second;
   a second pass follows once the old deployment's invocations are over
   (:data:`~mediajobs.domain.backfill.PASSES`).
   For each asset that the set would serve otherwise (:func:`~mediajobs.domain.backfill.wanted`):
   a. the set's jobs are planned for its content and read from the ledger;
   b. the asset gets them as its ``next`` set with their references, in one transaction
      (:meth:`~mediajobs.service_layer.ports.Assets.upgrade`; it keeps serving its old set);
   c. each job the content lacks is counted once per content: ``reused`` when done
      already (no render), else requested on the **backfill lane** (a queue of its own)
      and counted ``enqueued``;
   d. the jobs not done at (a) are read again: one that ended meanwhile, before the
      asset's reference was there to be found, is recorded in the asset now.
   The page's cursor moves only after its assets, so a crash redoes a page (every step is
   idempotent), never skips one.
3. **Ends**: a lane job ends in the worker like any job request, which records it in the
   ``next`` set of every asset referencing it; the asset switches when it was the last
   (:meth:`~mediajobs.service_layer.assets.AssetKeeper.rolled`). The tick counts the ends
   from the ledger (``done``, ``failed``), and marks the backfill ``done`` once the scan is
   over, no asset is left to look at again and no job remains -- after requesting again
   the promo of every album made under another policy or recipe
   (:meth:`~mediajobs.service_layer.promo.Promos.regenerate`).

Nothing here is an S3 event, and its outputs are derivatives: a backfill never causes
another.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from mediajobs.domain.assets import JOINED_PART, AssetJob, AssetJobState, AssetState, AssetView
from mediajobs.domain.backfill import (
    BACKFILL_ID,
    Backfill,
    BackfillState,
    backfill_id,
    change_of,
    unsettled,
)
from mediajobs.domain.errors import TransientFailure
from mediajobs.domain.jobs import JobState, JobView
from mediajobs.domain.plan import PlannedJob, Where, plan_jobs
from mediajobs.domain.recipes import Recipe
from mediajobs.service_layer.claims import Claims
from mediajobs.service_layer.ports import Assets, Backfills
from mediajobs.service_layer.promo import Promos
from mediajobs.settings import Settings

log = logging.getLogger(__name__)

#: Assets read per scan page (a ``Scan`` ``Limit``): small enough that a page's work fits
#: well inside an invocation, large enough that the cursor write is a small share.
PAGE_ASSETS: Final = 100
#: Assets looked at again, and enqueued jobs checked for their end, per tick.
SWEEP: Final = 500
#: Job states of a row no worker holds: a lane request claims it again (a waiting job is
#: requested by its inputs); with no asset referencing it any more, it is dropped.
_IDLE: Final = frozenset({JobState.TRANSIENT_FAILURE, JobState.COLLECTED, JobState.WAITING})


def entry_of(recipe: str, job_key: str, row: JobView | None) -> AssetJob:
    """The asset's entry of a job as its ledger row has it: ``done`` with its outputs,
    ``failed`` with its reason, else ``pending``."""
    if row is not None and row.state == JobState.DONE:
        return AssetJob(recipe, job_key, AssetJobState.DONE, manifest_key=row.manifest_key, outputs=row.outputs)
    if row is not None and row.state == JobState.PERMANENT_FAILURE:
        return AssetJob(
            recipe, job_key, AssetJobState.FAILED, reason=row.failure_reason, detail=row.failure_detail or ""
        )
    return AssetJob(recipe, job_key)


class Backfiller:
    """Starts, continues, pauses, resumes and cancels backfills (the module's order).

    Parameters
    ----------
    settings: ``backfill_queue_arn`` (else ``jobs_queue_arn``), ``backfill_rate_per_s``,
        ``backfill_segments``, ``retire_grace_s``, ``policy_version``,
        ``derivatives_prefix``.
    backfills: where backfills are kept.
    assets: the asset records.
    claims: the job ledger's requests (plan rows, the lane).
    recipes: the active recipes by media type (the set a backfill rolls out).
    clock: Unix time, seconds.
    sleep: how the rate is kept (``time.sleep``; tests pass their own).
    promos: albums' promos: once the backfill is finished, every album whose promo carries
        another policy or recipe is requested again, before it is marked ``done``
        (``None``: no promo is kept).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        backfills: Backfills,
        assets: Assets,
        claims: Claims,
        recipes: Mapping[str, Sequence[Recipe]],
        clock: Callable[[], float],
        sleep: Callable[[float], None] = time.sleep,
        promos: Promos | None = None,
    ) -> None:
        self._settings = settings
        self._backfills = backfills
        self._assets = assets
        self._claims = claims
        self._recipes = {media: {r.ref: r for r in rs} for media, rs in recipes.items()}
        self._active = {media: tuple(r.ref for r in rs) for media, rs in recipes.items()}
        self._clock = clock
        self._sleep = sleep
        self._promos = promos
        self.change = change_of(self._active, settings.policy_version)
        self._sending = threading.Lock()

    # -- the operator's verbs ------------------------------------------------------------

    def start(self, *, scheduled: bool = False) -> tuple[Backfill, bool]:
        """Start the backfill of this deployment's change, or find it: ``(backfill,
        created)``. Its latest backfill is answered with, unless another change's backfill
        was started after it (a rollback to this set: its assets moved on since) or -- on
        an operator's start, not ``scheduled`` -- it was cancelled: then a new generation.
        Starting one cancels a running or paused backfill of another change (superseded).

        Raises
        ------
        TransientFailure
            Every round lost to concurrent starts, or a failed request.
        """
        for _ in range(5):
            found = self._backfills.of_change(self.change)
            if found is not None:
                newer = any(
                    b.change != self.change and (b.created_at_s, b.id) > (found.created_at_s, found.id)
                    for b in self._backfills.all()
                )
                cancelled = found.state == BackfillState.CANCELLED
                if not newer and (not cancelled or scheduled):
                    return found, False
            generation = found.generation + 1 if found is not None else 1
            now = int(self._clock())
            new = Backfill(
                id=backfill_id(self.change, generation),
                change=self.change,
                generation=generation,
                state=BackfillState.RUNNING,
                active=self._active,
                policy_version=self._settings.policy_version,
                segments=self._settings.backfill_segments,
                created_at_s=now,
                updated_at_s=now,
            )
            if self._backfills.create(new, after=found.generation if found is not None else 0):
                log.info("backfill started", extra={"backfill_id": new.id, "change": self.change})
                for other in self._backfills.all():
                    if other.change != self.change and other.state in (BackfillState.RUNNING, BackfillState.PAUSED):
                        self._backfills.move(other.id, BackfillState.CANCELLED, now_s=now)
                        log.info("backfill superseded", extra={"backfill_id": other.id, "by": new.id})
                return new, True
        raise TransientFailure("backfill start: lost every round to concurrent starts")

    def status(self, backfill_id_: str | None = None) -> Backfill | None:
        """The backfill ``backfill_id_``, or the latest one; ``None`` when there is none.

        Raises
        ------
        ValueError
            ``backfill_id_`` is not a backfill id (``bf-<12 hex>-<n>``).
        """
        if backfill_id_ is None:
            every = self._backfills.all()
            return every[-1] if every else None
        if not BACKFILL_ID.fullmatch(backfill_id_):
            raise ValueError(f"not a backfill id (bf-<12 hex>-<n>): {backfill_id_!r}")
        return self._backfills.get(backfill_id_)

    def move(self, backfill_id_: str, to: BackfillState) -> Backfill | None:
        """Pause (``paused``), resume (``running``) or cancel (``cancelled``) a backfill: the
        backfill after, or ``None`` when there is no such backfill or it cannot move so
        (``done`` and ``cancelled`` are final)."""
        return self._backfills.move(backfill_id_, to, now_s=int(self._clock()))

    # -- the scan ------------------------------------------------------------------------

    def tick(self, *, budget_s: float, auto_start: bool = False) -> list[Backfill]:
        """Continue every ``running`` backfill of this deployment's change for about
        ``budget_s`` seconds (its segments in parallel), then count the ends of its jobs and
        mark it ``done`` when finished. ``auto_start``: start this change's backfill first
        when it has none (the scheduled tick: a deploy that changes the active set starts
        its backfill within one schedule period). Returns the backfills as they are after.

        A running backfill of another change (an older deployment's) is left alone: the
        worker cannot render a set it does not have.

        Raises
        ------
        TransientFailure
            A request failed; every step done before it stands (the next tick goes on).
        """
        if auto_start:
            self.start(scheduled=True)  # a cancel holds: the schedule starts no new generation
        deadline = time.monotonic() + budget_s
        after = []
        for backfill in self._backfills.all():
            if backfill.change != self.change:
                continue
            if backfill.state == BackfillState.CANCELLED and backfill.counts.remaining:
                self._count_ends(backfill)  # its jobs on the lane still run: their ends, and resends
                continue
            if backfill.state != BackfillState.RUNNING:
                continue
            self._scan(backfill, deadline)
            if time.monotonic() < deadline:
                self._look_again(backfill)
            self._count_ends(backfill)
            now = self._backfills.get(backfill.id)
            if now is not None and now.state == BackfillState.RUNNING and now.finished():
                if self._promos is not None:  # its assets serve the new set: their albums' promos follow
                    self._promos.regenerate()
                now = self._backfills.move(backfill.id, BackfillState.DONE, now_s=int(self._clock())) or now
                log.info("backfill done", extra={"backfill_id": backfill.id})
            if now is not None:
                after.append(now)
        return after

    def _scan(self, backfill: Backfill, deadline: float) -> None:
        """The first pass, then -- once it is over and the old deployment's invocations are
        (``worker_timeout_s`` after the backfill started) -- the second: every segment from
        its cursor until its end or ``deadline``, in parallel."""
        self._pass(backfill, deadline, 0)
        now = self._backfills.get(backfill.id)
        old_code_over = self._clock() >= backfill.created_at_s + self._settings.worker_timeout_s
        if now is not None and now.first_pass_over and old_code_over and time.monotonic() < deadline:
            self._pass(backfill, deadline, 1)

    def _pass(self, backfill: Backfill, deadline: float, pass_: int) -> None:
        """One pass's segments (cursors ``pass_ * segments + n``) in parallel."""
        started, enqueued, pacing = time.monotonic(), [0], threading.Lock()

        def pace(n: int) -> bool:
            """At most ``backfill_rate_per_s`` jobs enqueued per second: sleep until the
            rate allows the next; ``False`` when that is past the deadline (the page in
            progress is left, its cursor unmoved: the next run redoes it)."""
            with pacing:
                enqueued[0] += n
                ahead_s = enqueued[0] / self._settings.backfill_rate_per_s - (time.monotonic() - started)
            if ahead_s <= 0:
                return True
            if time.monotonic() + ahead_s > deadline:
                return False
            self._sleep(ahead_s)
            return True

        def segment(n: int) -> None:
            while time.monotonic() < deadline:
                state = self._backfills.get(backfill.id)
                if state is None or state.state != BackfillState.RUNNING:
                    return
                slot = pass_ * backfill.segments + n
                cursor, ended = self._backfills.cursor(backfill.id, slot)
                if ended:
                    return
                views, next_cursor = self._assets.scan(n, backfill.segments, cursor, limit=PAGE_ASSETS)
                for view in views:
                    if not pace(self.asset(backfill, view)):
                        return
                self._backfills.advance(
                    backfill.id, slot, cursor, next_cursor, scanned=len(views), now_s=int(self._clock())
                )

        with ThreadPoolExecutor(max_workers=backfill.segments, thread_name_prefix="backfill-segment") as pool:
            for done in [pool.submit(segment, n) for n in range(backfill.segments)]:
                done.result()

    def asset(self, backfill: Backfill, view: AssetView) -> int:
        """Give one asset the jobs ``backfill`` owes it (the module's steps a-d); how many
        jobs were enqueued. An asset whose content is not known yet is kept to look at
        again after the scan.

        The jobs are compared by key (recipe and policy version): an asset served by them
        owes nothing; one whose ``next`` set they are already still has its jobs requested
        (a scan that died between the two is redone whole). The reference comes before the
        job rows are read -- the collection's rule: a job read ``done`` cannot be collected
        under the asset -- and the jobs found ended are recorded after, switching the asset
        when that makes its set whole."""
        if view.state == AssetState.DELETED or view.sha256 is None or view.media is None:
            if unsettled(view):
                self._backfills.keep_for_later(backfill.id, view.bucket, view.key)
            return 0
        refs = backfill.active.get(view.media, ())
        recipes = self._recipes.get(view.media, {})
        if not refs:
            return 0
        if any(ref not in recipes for ref in refs):  # never: a backfill of another change is left alone
            raise TransientFailure(f"backfill {backfill.id}: this worker lacks recipes of {refs}")
        where = Where(
            view.bucket, view.key, self._settings.derivatives_prefix, backfill.policy_version, self._settings.keys
        )
        jobs = plan_jobs(view.sha256, view.media, {view.media: [recipes[r] for r in refs]}, where)
        keys = [job.key for job in jobs]
        if keys == [job.job_key for job in view.jobs]:
            if view.next:  # a rollback: the set of a superseded backfill it was waiting for goes
                self._assets.upgrade(
                    view.bucket,
                    view.key,
                    view.version.sequencer,
                    [AssetJob(job.recipe.ref, job.key) for job in jobs],
                    now_s=int(self._clock()),
                    grace_s=self._settings.retire_grace_s,
                )
            return 0  # served by the set already
        now = int(self._clock())
        if keys != [job.job_key for job in view.next]:  # b. the reference first
            wanted_jobs = [AssetJob(job.recipe.ref, job.key) for job in jobs]
            upgraded = self._assets.upgrade(
                view.bucket,
                view.key,
                view.version.sequencer,
                wanted_jobs,
                now_s=now,
                grace_s=self._settings.retire_grace_s,
            )
            if upgraded is None:
                return 0  # the asset moved on meanwhile (a newer version plans the active set itself)
        rows = self._claims.find(keys)  # a. the rows, read after the reference
        serving = {job.job_key for job in view.jobs}
        sent = self._request(backfill, [job for job in jobs if job.key not in serving], rows, now)  # c.
        ended = [entry_of(job.recipe.ref, job.key, rows.get(job.key)) for job in jobs]
        ended = [e for e in ended if e.state in (AssetJobState.DONE, AssetJobState.FAILED)]
        if ended:  # d. what the rows say ended, recorded (the switch when whole)
            self._assets.record_next(view.bucket, view.key, ended, now_s=now)
        return sent

    def _request(self, backfill: Backfill, jobs: Sequence[PlannedJob], rows: Mapping[str, JobView], now: int) -> int:
        """Step c: each job counted once per content, requested on the lane unless done
        (the request is sent before it is counted: a crash between them sends it again,
        which its claim makes harmless; counted first, it could be lost). Two scanners at
        once may both send one: the claim makes that harmless too."""
        lane = self._settings.backfill_queue_arn or self._settings.jobs_queue_arn
        sent = 0
        for job in jobs:
            row = rows.get(job.key)
            if row is not None and row.state == JobState.DONE:
                if self._backfills.mark(backfill.id, job.key) is None:
                    self._backfills.count(backfill.id, job.key, "reused", now_s=now)
                continue
            with self._sending:  # this scanner's segments send a content's job once
                mark = self._backfills.mark(backfill.id, job.key)
                if mark not in (None, "dropped"):
                    continue  # another asset of the content had it requested (or it ended)
                self._claims.lane([job], lane)
                if mark is None and self._backfills.count(backfill.id, job.key, "enqueued", now_s=now):
                    sent += 1
                elif mark == "dropped" and self._backfills.reopen(backfill.id, job.key, now_s=now):
                    sent += 1  # dropped when no asset wanted it; this one does
        return sent

    def _look_again(self, backfill: Backfill) -> None:
        """Once the scan is over: the assets whose content was not known when scanned."""
        current = self._backfills.get(backfill.id)
        if current is None or not current.scan_over:
            return
        old_code_over = self._clock() >= backfill.created_at_s + self._settings.worker_timeout_s
        for bucket, key in self._backfills.later(backfill.id, SWEEP):
            view = self._assets.get(bucket, key)
            if view is not None and unsettled(view) and not old_code_over:
                continue  # still in flight: the next tick looks again
            # Settled, gone, or -- the old deployment's invocations over -- left to the workers
            # of this one, which plan the active set when its event comes (a message in the
            # dead-letter queue is redriven to them).
            if view is not None:
                self.asset(current, view)
            self._backfills.looked_again(backfill.id, bucket, key)

    def _count_ends(self, backfill: Backfill) -> None:
        """Count the ends of enqueued jobs from their ledger rows, once each whoever ran
        them: ``done``, ``failed``, or ``dropped`` -- not running, and no asset references
        it any more (each that wanted it was overwritten or deleted). One whose claim was
        given back (``transient_failure``, ``collected``; its lease over) while assets still
        want it is requested on the lane again: its message may have been acknowledged (a
        copy the request found changed), and a second one costs only a claim's read.

        Before an ended job is counted, its end is recorded in the ``next`` set of every
        asset referencing it (:meth:`_record_end`): a job no worker ran -- failed because an
        input failed (a new policy's, or a new key's, moderation job refusing the content)
        -- is recorded by nothing else, and its asset would wait for it for ever. A dropped
        job that was split (a video whose every asset went while its parts ran) releases its
        parts to the collection: no join will, and they would stay for ever."""
        keys = self._backfills.enqueued(backfill.id, SWEEP)
        rows = self._claims.find(keys) if keys else {}
        now = int(self._clock())
        lane = self._settings.backfill_queue_arn or self._settings.jobs_queue_arn
        for key in keys:
            row = rows.get(key)
            if row is not None and row.state == JobState.DONE:
                self._record_end(key, row, now)
                self._backfills.end(backfill.id, key, "done", now_s=now)
            elif row is not None and row.state == JobState.PERMANENT_FAILURE:
                self._record_end(key, row, now)
                self._backfills.end(backfill.id, key, "failed", now_s=now)
            elif row is None or row.state in _IDLE and row.lease_expires_at_s <= now:
                if not self._assets.referenced(key):
                    if row is not None:  # a video split before nothing wanted it: its parts join nothing
                        self._release_parts(row, now)
                    self._backfills.end(backfill.id, key, "dropped", now_s=now)
                elif row is not None and row.state != JobState.WAITING:  # a waiting job: its inputs request it
                    self._claims.resend(key, lane)

    def _record_end(self, key: str, row: JobView, now: int) -> None:
        """Record the ended job ``key`` (its ledger ``row``) in the ``next`` set of every asset
        referencing it (a no-op where it is recorded already, or not in a ``next`` set)."""
        if row.spec is None:
            return
        entry = entry_of(row.spec.recipe_ref, key, row)
        for bucket, asset_key in self._assets.referrers(key):
            self._assets.record_next(bucket, asset_key, [entry], now_s=now)

    def _release_parts(self, row: JobView, now: int) -> None:
        """Give the parts of the split job ``row`` collection candidates (as its join would,
        :data:`~mediajobs.domain.assets.JOINED_PART`): it is dropped, nothing joins them."""
        keys = self._claims.part_keys(row)
        if keys:
            self._assets.release(keys, JOINED_PART, now_s=now)
