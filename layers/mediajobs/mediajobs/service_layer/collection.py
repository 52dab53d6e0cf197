"""The collection: deletes the derivatives of jobs no asset references any more.

One run (:meth:`Collector.run`) looks at a bounded batch of candidates
(:class:`~mediajobs.domain.assets.Candidate`, written when an asset drops its reference
to a job, or when a job fails leaving outputs without a manifest) and follows the
protocol of docs/assets.md, "Collection", in its order:

1. A candidate younger than the grace period waits, as does one held past it (a job a
   backfill's switch retired is kept ``RETIRE_GRACE_SECONDS``: its ``not_before_s``). So
   does an older one whose job has a younger candidate too (released again since: the
   grace runs from its last release),
   as far as one bounded page of the newest candidates shows (the ``Assets`` port has no
   query by job).
2. A job still referenced (a re-upload of the same bytes revived it) keeps its
   derivatives: the candidate is dropped.
3. Otherwise the job row goes ``done`` -> ``collecting`` under the collector's lease; the
   references are looked at again (strongly consistent) and, if one came meanwhile, the
   row goes back to ``done``.
4. The manifest is deleted first (no reader meets a set without it), then the rest of
   ``derivatives/<job key>/``; the row goes ``collected``; the candidates are dropped.

A worker adds its reference *before* it reads the job rows, so a re-upload racing this is
seen at step 3, or finds the job ``collecting`` (busy: it waits) or ``collected`` (it
renders again). A collection whose collector died leaves the row ``collecting``: its
candidates are still there, and a later run takes the expired lease over and finishes it
(never back to ``done``: the manifest may be gone already). A render may take it over
too, and then deletes what is left before rendering (:attr:`~mediajobs.domain.jobs.Claim.sweep`).

A failed job (``permanent_failure``) has no manifest: its prefix is swept whoever still
names it, and its row records ``collected_at_s``. A job a render holds (``running``,
``transient_failure``: a render of a version since replaced) keeps its candidate for a
later run.

Never on the upload path: the worker function runs it on a schedule
(:mod:`mediajobs.entrypoints.collector`).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable

from mediajobs.domain.assets import Candidate
from mediajobs.domain.errors import Superseded, TransientFailure
from mediajobs.domain.jobs import JobState, JobView, collectable
from mediajobs.domain.manifest import derivative_prefix
from mediajobs.service_layer.lease import Lease
from mediajobs.service_layer.ports import Assets, CollectionLedger, ObjectStore
from mediajobs.settings import Settings

log = logging.getLogger(__name__)


@dataclasses.dataclass
class CollectionReport:
    """What one collection run did, counted by job (one job may have several candidates).

    Attributes
    ----------
    looked: jobs whose candidates were past the grace period.
    waiting: jobs with a candidate past the grace period left alone because another asset
        released them later, within it (the grace runs from the last release).
    revived: jobs still referenced: their candidates dropped, nothing deleted.
    collected: jobs whose prefix was deleted and whose row is now ``collected``.
    resumed: of ``collected``, those finished after a collector that died mid-way.
    abandoned: of ``collected``, renders nothing references any more that no delivery will
        finish (a ``running`` row whose lease expired, a ``transient_failure``): their
        manifest-less prefix deleted.
    swept_failed: failed jobs whose manifest-less prefix was deleted.
    busy: jobs a render holds (or another collector): kept for a later run.
    already_gone: jobs collected already, or with no row: candidates dropped.
    lost: collections taken over by a render while this run held them: stopped, not
        marked collected (the render deletes what is left).
    errors: jobs a transient failure stopped (kept for a later run).
    deleted_objects: objects deleted, in all.
    """

    looked: int = 0
    waiting: int = 0
    revived: int = 0
    collected: int = 0
    resumed: int = 0
    abandoned: int = 0
    swept_failed: int = 0
    busy: int = 0
    already_gone: int = 0
    lost: int = 0
    errors: int = 0
    deleted_objects: int = 0

    def to_json(self) -> dict[str, int]:
        """The counts as a plain dict (logs, ``mediajobs collect --json``)."""
        return dataclasses.asdict(self)


class Collector:
    """Runs the collection against the ports it is given.

    Parameters
    ----------
    assets: the asset records: references and candidates.
    ledger: the job ledger's collection operations.
    store: S3, where the derivatives are.
    settings: ``collect_grace_s`` (default grace), ``collect_batch_jobs`` (default batch),
        ``lease_s`` (the collector's lease on a job), ``derivatives_prefix``.
    clock: Unix time in seconds.
    """

    def __init__(
        self,
        assets: Assets,
        ledger: CollectionLedger,
        store: ObjectStore,
        settings: Settings,
        clock: Callable[[], float],
    ) -> None:
        self._assets = assets
        self._ledger = ledger
        self._store = store
        self._settings = settings
        self._clock = clock

    def run(self, *, limit: int | None = None, grace_s: int | None = None) -> CollectionReport:
        """One collection run.

        Parameters
        ----------
        limit: most candidates looked at (default ``settings.collect_batch_jobs``).
        grace_s: how long a released job waits, seconds (default ``settings.collect_grace_s``;
            the storm and the demo pass a short one).

        Returns
        -------
        CollectionReport
            The counts.

        Raises
        ------
        TransientFailure
            The candidates or the job rows could not be read (nothing was changed). A
            failure while one job is collected is counted (``errors``) and the run goes
            on with the next job.
        """
        limit = self._settings.collect_batch_jobs if limit is None else limit
        grace_s = self._settings.collect_grace_s if grace_s is None else grace_s
        now_s = int(self._clock())
        report = CollectionReport()
        # Due once ``grace_s`` whole seconds have passed since the release (so a grace of 0
        # takes what was released this very second too).
        due = self._assets.candidates(released_before_s=now_s - grace_s + 1, limit=limit, now_s=now_s)
        by_job: dict[str, list[Candidate]] = {}
        for candidate in due:
            by_job[candidate.job_key] = []
        # A job is released when its last reference goes: one released again since waits
        # too. Its candidates are read whole (a page of them would miss the young ones).
        young = set()
        for job_key in by_job:
            by_job[job_key] = self._assets.candidates_of(job_key)
            if any(c.released_at_s > now_s - grace_s or c.not_before_s > now_s for c in by_job[job_key]):
                young.add(job_key)
        report.waiting = len(young)
        ready = [job_key for job_key in by_job if job_key not in young]
        report.looked = len(ready)
        rows = self._ledger.find(ready) if ready else {}
        for job_key in ready:
            try:
                self._one(job_key, rows.get(job_key), by_job[job_key], report)
            except TransientFailure as exc:
                report.errors += 1
                log.warning("collection of a job failed: kept for later", extra={"job_key": job_key, "error": str(exc)})
        log.info("collection run", extra=report.to_json())
        return report

    def _one(self, job_key: str, row: JobView | None, candidates: list[Candidate], report: CollectionReport) -> None:
        """Steps 2-4 for one job."""
        if row is None or row.state == JobState.COLLECTED:
            report.already_gone += 1
            self._drop(candidates)
        elif row.state == JobState.PERMANENT_FAILURE:
            if row.collected_at_s is not None:
                report.already_gone += 1
            else:
                self._sweep_failed(row, report)
            self._drop(candidates)
        elif row.state == JobState.DONE:
            if self._assets.referenced(job_key):
                report.revived += 1
                self._drop(candidates)
            else:
                self._collect(row, candidates, report, resumed=False)
        elif row.state == JobState.COLLECTING and row.lease_expires_at_s <= int(self._clock()):
            self._collect(row, candidates, report, resumed=True)
        elif self._assets.referenced(job_key):
            # A render (or a live collection) holds it, and an asset uses it: whoever
            # releases that reference writes a new candidate.
            report.revived += 1
            self._drop(candidates)
        elif collectable(row, now_s=int(self._clock())) and row.state != JobState.COLLECTING:
            # An abandoned render: the event that wanted it was superseded or deleted since,
            # so no delivery will finish it. Collected like a dead collection (finished
            # whatever references it by then: a reference that comes meanwhile waits, and
            # renders it again once it is collected).
            report.abandoned += 1
            self._collect(row, candidates, report, resumed=False, look_again=False)
        else:
            report.busy += 1

    def _collect(
        self,
        row: JobView,
        candidates: list[Candidate],
        report: CollectionReport,
        *,
        resumed: bool,
        look_again: bool | None = None,
    ) -> None:
        """Steps 3 and 4: under the collector's lease, look again, delete, mark collected."""
        job_key, lease_s = row.job_key, self._settings.lease_s
        began_s = int(self._clock())
        token = uuid.uuid4().hex
        if not collectable(row, now_s=began_s) or not self._ledger.begin_collection(
            job_key, token, lease_until_s=began_s + lease_s, now_s=began_s, seen=row
        ):
            report.busy += 1  # a render or another collector got there since the row was read
            return
        lease = Lease(_CollectionRows(self._ledger), job_key, token, began_s + lease_s, clock=self._clock)
        if (not resumed) if look_again is None else look_again:
            try:
                referenced = self._assets.referenced(job_key)
            except TransientFailure:
                self._give_back(lease, "the references could not be read", report)  # nothing deleted yet
                raise
            if referenced:
                # A reference came between the first look and the lease: nothing was deleted.
                self._give_back(lease, "referenced again", report)
                report.revived += 1
                self._drop(candidates)
                return
        # A resumed collection is finished whatever references it now: the collector that
        # died may have deleted the manifest, so the set must not be ``done`` again (a
        # reference that came meanwhile renders it again once it is ``collected``).
        try:
            now_s = int(self._clock())
            if now_s - began_s >= lease_s / 3:
                lease.renew(now_s + lease_s)
            bucket, prefix = self._where(row)
            report.deleted_objects += self._store.delete_prefix(bucket, prefix, first=row.manifest_key)
            self._ledger.end_collection(job_key, token, collected=True, now_s=int(self._clock()))
            lease.forget()
        except Superseded:
            report.lost += 1
            log.warning("collection taken over by a render: stopped", extra={"job_key": job_key})
            return
        report.collected += 1
        report.resumed += resumed
        self._drop(candidates)
        log.info("collected", extra={"job_key": job_key, "resumed": resumed})

    @staticmethod
    def _give_back(lease: Lease, why: str, report: CollectionReport) -> None:
        """Give the collection back (the job ``done`` again); one a render took over is lost."""
        if not lease.release(why):
            report.lost += 1

    def _sweep_failed(self, row: JobView, report: CollectionReport) -> None:
        """A failed job's prefix (outputs without a manifest) deleted; the row keeps its
        failure and records ``collected_at_s``."""
        bucket, prefix = self._where(row)
        report.deleted_objects += self._store.delete_prefix(bucket, prefix, first=row.manifest_key)
        self._ledger.mark_swept(row.job_key, now_s=int(self._clock()))
        report.swept_failed += 1
        log.info("swept a failed job's outputs", extra={"job_key": row.job_key, "reason": row.failure_reason})

    def _where(self, row: JobView) -> tuple[str, str]:
        """The bucket and prefix of a job's derivatives, from its row.

        Raises
        ------
        TransientFailure
            The row names no bucket (kept for later: nothing is guessed).
        """
        if not row.source_bucket:
            raise TransientFailure(f"job {row.job_key[:12]} names no bucket")
        return row.source_bucket, row.output_prefix or derivative_prefix(self._settings.derivatives_prefix, row.job_key)

    def _drop(self, candidates: list[Candidate]) -> None:
        for candidate in candidates:
            self._assets.drop_candidate(candidate)


class _CollectionRows:
    """The lease writes of a collection (``LeaseRows``): renewed as any lease on a job row;
    given back, the job is ``done`` again (:meth:`CollectionLedger.end_collection`)."""

    def __init__(self, ledger: CollectionLedger) -> None:
        self._ledger = ledger

    def renew(self, key: str, token: str, *, lease_until_s: int, now_s: int) -> None:
        self._ledger.renew(key, token, lease_until_s=lease_until_s, now_s=now_s)

    def release(self, key: str, token: str, *, detail: str, now_s: int) -> None:
        log.info("collection given back: %s", detail, extra={"job_key": key})
        self._ledger.end_collection(key, token, collected=False, now_s=now_s)
