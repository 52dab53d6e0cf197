"""The pipeline's asset keeping: its phases turned into writes of the asset record
(``docs/assets.md``; the :class:`~mediajobs.service_layer.ports.Assets` port).

:class:`AssetKeeper` is the pipeline's collaborator; :meth:`AssetKeeper.track` starts one
event's :class:`KeptAsset`, which the pipeline tells what it found, in order:

1. **the pre-check** (:meth:`AssetKeeper.track`, before ``HeadObject``): a greater
   sequencer stored for the key supersedes the event (:class:`EventSuperseded`: nothing
   read, rendered or counted). The asset read there stands in for :meth:`KeptAsset.current`
   when it already shows the event's sequencer with its jobs attached (a duplicate).
2. **current** (:meth:`KeptAsset.current`): the version made current -- with its jobs when
   the content is known, and always before the job rows are read (the reference is in
   place before the worker reads the rows, so a re-upload racing the collection is safe);
   a lost race raises :class:`EventSuperseded`.
3. **claimed** and **finished** (:meth:`KeptAsset.claimed`, :meth:`KeptAsset.finished`):
   the job states, forward only, written only when they change what is stored (a ready
   asset's duplicate writes nothing).
4. **refused** (:meth:`KeptAsset.refused`): a refusal before any job fails the version
   itself with its reason.

Without an ``Assets`` adapter (``None``) every method does nothing: the pipeline then
keeps jobs only, as before assets existed.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from mediajobs.domain.assets import (
    JOINED_PART,
    AssetJob,
    AssetJobState,
    AssetState,
    AssetVersion,
    AssetView,
    Deleted,
    DeletionEffect,
    answered,
    asset_id,
    deletion_effect,
    may_move,
    merge_jobs,
    placeholder_of,
    same_version,
    sequencer_order,
    summarize,
)
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    JobResult,
    JobSpec,
    JobState,
    JobView,
    ObjectRef,
    SourceResult,
    SourceState,
)
from mediajobs.domain.moderation import moderation_of
from mediajobs.service_layer.ports import Assets

log = logging.getLogger(__name__)

#: A job's progress is written to its asset at most this often, seconds (it is advice: an
#: app polling the status sees it move; a write per ffmpeg report would cost more than it tells).
PROGRESS_EVERY_S: Final = 5.0
#: A job's states in an asset that no later write of its job changes.
_ENDED: Final = frozenset({AssetJobState.DONE, AssetJobState.FAILED})


class EventSuperseded(Exception):
    """A greater sequencer of the event's key is current: the event renders nothing,
    changes no reference and is acknowledged.

    Attributes
    ----------
    bucket, key: the original.
    sequencer: the event's, in :func:`~mediajobs.domain.assets.sequencer_order` form.
    """

    def __init__(self, bucket: str, key: str, sequencer: str) -> None:
        super().__init__(f"s3://{bucket}/{key}: a greater sequencer than {sequencer.lstrip('0') or '0'} is current")
        self.bucket = bucket
        self.key = key
        self.sequencer = sequencer


class AssetKeeper:
    """Keeps the asset records as the pipeline processes events.

    Parameters
    ----------
    assets: the asset records, or ``None`` to keep none.
    clock: Unix time in seconds.
    progress_every_s: least seconds between two progress writes of one job.
    retire_grace_s: how long the jobs an asset's switch to another recipe set retired are
        kept (``Settings.retire_grace_s``; :meth:`KeptAsset.current`).
    on_write: called with (point, asset id) after each durable asset write: ``asset_current``
        (a version made current or its jobs attached), ``asset_recorded`` (job states),
        ``asset_deleted`` (the pipeline observer's ``step``: crash injection hooks there).
    """

    def __init__(
        self,
        assets: Assets | None,
        clock: Callable[[], float],
        *,
        progress_every_s: float = PROGRESS_EVERY_S,
        on_write: Callable[[str, str], None] = lambda point, asset: None,
        retire_grace_s: int = 0,
    ) -> None:
        self.assets = assets
        self.retire_grace_s = retire_grace_s
        self._clock = clock
        self._progress_every_s = progress_every_s
        self.on_write = on_write

    def track(self, ref: ObjectRef) -> KeptAsset:
        """Start keeping the asset of an ``Object Created`` event: the pre-check (one
        strongly consistent read).

        Raises
        ------
        EventSuperseded
            A greater sequencer is stored for the key (a newer version, or a delete).
        ValueError
            If the event's sequencer is not hexadecimal.
        """
        kept = KeptAsset(self, ref.bucket, ref.key, sequencer_order(ref.sequencer))
        if self.assets is not None:
            kept.view = self.assets.get(ref.bucket, ref.key)
            kept.check()
        return kept

    def deletion(self, deleted: Deleted) -> tuple[DeletionEffect, str]:
        """What an ``Object Deleted`` event does to its asset
        (:func:`~mediajobs.domain.assets.deletion_effect`; one strongly consistent read),
        with the event's sequencer in :func:`~mediajobs.domain.assets.sequencer_order`
        form. Without assets kept: ``DELETED``.

        A live asset at this very sequencer is a previous version this event made current
        again (a delivery that did not finish: busy, crashed): ``LOOK_AGAIN``, so that it
        is finished, not acknowledged as superseded half done.

        Raises
        ------
        ValueError
            If the event's sequencer is not hexadecimal.
        """
        sequencer = sequencer_order(deleted.sequencer)
        if self.assets is None:
            return DeletionEffect.DELETED, sequencer
        view = self.assets.get(deleted.bucket, deleted.key)
        if view is not None and view.version.sequencer == sequencer and view.state != AssetState.DELETED:
            return DeletionEffect.LOOK_AGAIN, sequencer
        effect = deletion_effect(
            view, version_id=deleted.version_id, deletion_type=deleted.deletion_type, sequencer=sequencer
        )
        return effect, sequencer

    def delete(self, deleted: Deleted) -> bool:
        """Record the asset ``deleted`` by ``deleted`` (its references dropped, in one
        transaction); ``False`` when a greater sequencer was current (nothing written)."""
        if self.assets is None:
            return True
        version = AssetVersion(deleted.version_id, "", None, sequencer_order(deleted.sequencer))
        written = self.assets.delete(deleted.bucket, deleted.key, version, now_s=self.now_s()) is not None
        if written:
            self.on_write("asset_deleted", asset_id(deleted.bucket, deleted.key))
        return written

    def now_s(self) -> int:
        """The clock, whole Unix seconds."""
        return int(self._clock())

    def referenced(self, job_key: str) -> bool:
        """Whether any asset references the job (``True`` when no assets are kept: nothing
        says it is unwanted)."""
        return self.assets is None or self.assets.referenced(job_key)

    def sources_for(self, spec: JobSpec, via: str | None = None) -> Iterator[ObjectRef]:
        """Where a requested job may read its original, best first: the version its row
        names (the first original seen with the bytes) while that asset still holds the
        content, then the current version of each other asset referencing the job that
        does -- an original overwritten or deleted since the request (a backfill's jobs
        wait on a lane) leaves the others of its content with a copy to read. Without
        assets kept, the row's original only. Lazy: each asset is read when asked for.
        ``via``: the job whose referrers to look at, when not ``spec``'s own (a split
        video's part: no asset references it, its video's job is).

        Raises
        ------
        TransientFailure
            As the port's reads.
        """
        if self.assets is None:
            yield ObjectRef(spec.source_bucket, spec.source_key)
            return
        named = (spec.source_bucket, spec.source_key)
        seen = {named}
        candidates: Iterator[tuple[str, str]] = iter([named])
        referrers = self._referrers(via or spec.job_key)
        for bucket, key in itertools.chain(candidates, (r for r in referrers if r not in seen)):
            view = self.assets.get(bucket, key)
            if view is not None and view.state != AssetState.DELETED and view.sha256 == spec.input_sha256:
                yield ObjectRef(bucket, key, view.version.version_id)

    def _referrers(self, job_key: str) -> Iterator[tuple[str, str]]:
        assert self.assets is not None
        yield from self.assets.referrers(job_key)

    def rolled(self, result: JobResult) -> None:
        """Record a job ended by a job request (no asset's delivery) in every asset
        referencing it: in its ``next`` set (:meth:`~mediajobs.service_layer.ports.Assets.record_next`:
        an asset a backfill gave the job switches to its new set when this was the last
        one), and in its current set where the job is not ended there yet (a split video's
        join: the asset is ``ready`` or ``failed`` by it, and tells so). A job no asset awaits
        writes nothing (one ``Query`` of its references, one read of each).

        Raises
        ------
        TransientFailure
            As the port's (the request is redelivered and tells again).
        """
        if self.assets is None or result.state not in (JobState.DONE, JobState.PERMANENT_FAILURE, JobState.REVIEW):
            return
        entry = _finished(result)
        for bucket, key in self.assets.referrers(result.job_key):
            if self.assets.record_next(bucket, key, [entry], now_s=self.now_s()) is not None:
                self.on_write("asset_recorded", asset_id(bucket, key))
            view = self.assets.get(bucket, key)
            if view is None or not _awaits(view, result.job_key):
                continue
            if self.assets.record(bucket, key, view.version.sequencer, [entry], now_s=self.now_s()) is not None:
                self.on_write("asset_recorded", asset_id(bucket, key))

    def released(self, job_key: str, released_by: str) -> bool:
        """Whether ``job_key`` has a candidate released by ``released_by`` (one ``Query``;
        ``True`` when no assets are kept: nothing to release to)."""
        if self.assets is None:
            return True
        return any(c.released_by == released_by for c in self.assets.candidates_of(job_key))

    def parts_joined(self, part_keys: Sequence[str]) -> None:
        """A split video's join committed: its parts' outputs are referenced by nothing, so
        each part gets a collection candidate (:data:`~mediajobs.domain.assets.JOINED_PART`),
        and the collection deletes them after its grace like any unreferenced set.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the port's (the join's request is redelivered and releases them again).
        """
        if self.assets is not None and part_keys:
            self.assets.release(part_keys, JOINED_PART, now_s=self.now_s())

    def parts_ended(self, parents: Sequence[tuple[JobView, float]]) -> None:
        """A part of each split job in ``parents`` (its row, its progress 0-1) ended: a
        job its parts ended (one failed: it fails with that reason) is recorded in its
        assets (:meth:`rolled`); one still waiting has its progress set in each asset
        awaiting it (advice: failures are logged, never raised).

        Raises
        ------
        TransientFailure
            As :meth:`rolled`.
        """
        if self.assets is None:
            return
        for parent, fraction in parents:
            if parent.state in (JobState.DONE, JobState.PERMANENT_FAILURE):
                self.rolled(_result_of(parent))
                continue
            for bucket, key in self.assets.referrers(parent.job_key):
                view = self.assets.get(bucket, key)
                if view is None or not _awaits(view, parent.job_key):
                    continue
                try:
                    sequencer = view.version.sequencer
                    self.assets.progress(bucket, key, sequencer, parent.job_key, fraction, now_s=self.now_s())
                except Exception as exc:  # advice only
                    log.warning("could not record progress: %r", exc, extra={"job_key": parent.job_key})


class KeptAsset:
    """One ``Object Created`` event's asset, as far as this delivery knows it.

    Attributes
    ----------
    bucket, key: the original.
    sequencer: the event's, in :func:`~mediajobs.domain.assets.sequencer_order` form.
    view: the asset as last read or written by this delivery (``None``: never seen, or
        no assets kept).
    attached: whether the version is current with its jobs (and their references).
    """

    def __init__(self, keeper: AssetKeeper, bucket: str, key: str, sequencer: str) -> None:
        self._keeper = keeper
        self._assets = keeper.assets
        self.bucket = bucket
        self.key = key
        self.sequencer = sequencer
        self.view: AssetView | None = None
        self.attached = False

    def rekey(self, key: str) -> None:
        """Keep the asset of ``key`` instead: the object the event names is under the key as
        the event spelled it, not the URL-decoded one (the pipeline's ``_head`` fallback).
        Read and checked as :meth:`AssetKeeper.track` does.

        Raises
        ------
        EventSuperseded
            A greater sequencer is stored for ``key``.
        """
        self.key, self.view, self.attached = key, None, False
        if self._assets is not None:
            self.view = self._assets.get(self.bucket, key)
            self.check()

    def check(self) -> None:
        """Raise :class:`EventSuperseded` when :attr:`view` holds a greater sequencer; note
        a view of this very event with its jobs attached (a duplicate)."""
        view = self.view
        if view is None:
            return
        if view.version.sequencer > self.sequencer:
            raise EventSuperseded(self.bucket, self.key, self.sequencer)
        if view.version.sequencer == self.sequencer and view.state != AssetState.DELETED and view.jobs:
            self.attached = True

    def answer(self, ref: ObjectRef) -> SourceResult | None:
        """The result of the event ``ref`` when the asset alone answers it
        (:func:`~mediajobs.domain.assets.answered`: the same event again, for a version that
        ended with every job final): each job reused, no other request made, no byte read.
        ``None`` otherwise (or without assets kept)."""
        view = self.view
        if self._assets is None or view is None or not answered(view, self.sequencer):
            return None
        jobs = [
            JobResult(
                job.recipe,
                job.job_key,
                JobState.DONE if job.state == AssetJobState.DONE else JobState.PERMANENT_FAILURE,
                reused=True,
                reason=job.reason,
                detail=job.detail,
                manifest_key=job.manifest_key,
                outputs=job.outputs,
            )
            for job in view.jobs
        ]
        version = view.version
        source = dataclasses.replace(ref, version_id=version.version_id, etag=version.etag or ref.etag)
        state = {AssetState.READY: SourceState.DONE, AssetState.REJECTED: SourceState.REJECTED}.get(
            view.state, SourceState.PERMANENT_FAILURE
        )
        log.info("answered from the asset: its version ended", extra={"source_key": ref.key, "state": str(view.state)})
        return SourceResult(
            source,
            state,
            media=view.media,
            sha256=view.sha256,
            size_bytes=version.size_bytes,
            reason=view.reason,
            detail=view.detail,
            jobs=jobs,
        )

    def content_of(self, version_id: str | None, etag: str, size_bytes: int | None) -> tuple[str | None, str | None]:
        """The SHA-256 and media type the stored asset knows of this object version
        (:func:`~mediajobs.domain.assets.same_version`), or ``(None, None)``."""
        view = self.view
        if view is None or view.sha256 is None or view.state == AssetState.DELETED:
            return None, None
        if not same_version(view.version, AssetVersion(version_id, etag, size_bytes, self.sequencer)):
            return None, None
        return view.sha256, view.media

    def media_of(self, sha256: str) -> str | None:
        """The media type the stored asset knows for content ``sha256`` (``None``: unknown)."""
        view = self.view
        return view.media if view is not None and view.sha256 == sha256 else None

    def current(
        self,
        version_id: str | None,
        etag: str,
        size_bytes: int | None,
        *,
        sha256: str | None = None,
        media: str | None = None,
        jobs: Sequence[tuple[str, str]] | None = None,
        checksum_sha256: bool = False,
    ) -> bool:
        """Make the version current (``jobs``: its ``(recipe ref, job key)`` pairs when the
        content is known, ``None`` before), unless this delivery knows it is already.
        ``checksum_sha256``: S3 holds the version's whole SHA-256 (the status document says
        so: the content known without reading it).

        Returns
        -------
        bool
            Whether this call attached the jobs (their references were not in place
            before: job rows read before it must be read again).

        Raises
        ------
        EventSuperseded
            A greater sequencer is current (nothing was written).
        """
        if self._assets is None:
            return False
        if self.attached:
            if jobs is not None and self.view is not None and not {k for _, k in jobs} <= self.view.job_keys:
                self._upgrade(self.view, sha256, jobs)
            return False
        view = self.view
        if jobs is None and view is not None and view.version.sequencer == self.sequencer:
            return False  # current already, the jobs not known yet
        stored = self._assets.make_current(
            self.bucket,
            self.key,
            AssetVersion(version_id, etag, size_bytes, self.sequencer, checksum_sha256),
            sha256=sha256,
            media=media,
            jobs=None if jobs is None else [AssetJob(recipe, job_key) for recipe, job_key in jobs],
            now_s=self._keeper.now_s(),
        )
        if stored is None:
            raise EventSuperseded(self.bucket, self.key, self.sequencer)
        self.view = stored
        self._keeper.on_write("asset_current", asset_id(self.bucket, self.key))
        if jobs is None:
            return False
        self.attached = True
        if not {job_key for _, job_key in jobs} <= stored.job_keys:
            self._upgrade(stored, sha256, jobs)
        return True

    def _upgrade(self, stored: AssetView, sha256: str | None, jobs: Sequence[tuple[str, str]]) -> None:
        """The version was made current with another recipe set of the same content (by a
        worker of the previous deployment): this delivery's set becomes its ``next`` one
        (:meth:`~mediajobs.service_layer.ports.Assets.upgrade`), to which it switches once
        this delivery's jobs are done, as a backfill's would. Jobs of other content are
        not recorded (logged)."""
        assert self._assets is not None
        if sha256 is None or stored.sha256 != sha256:
            log.warning(
                "the asset's version at this sequencer holds other jobs: job states are not recorded",
                extra={"source_key": self.key, "sequencer": self.sequencer.lstrip("0")},
            )
            return
        upgraded = self._assets.upgrade(
            self.bucket,
            self.key,
            self.sequencer,
            [AssetJob(recipe, job_key) for recipe, job_key in jobs],
            now_s=self._keeper.now_s(),
            grace_s=self._keeper.retire_grace_s,
        )
        if upgraded is not None:
            self.view = upgraded
            self._keeper.on_write("asset_current", asset_id(self.bucket, self.key))

    def claimed(self, claims: Iterable[Claim]) -> None:
        """The jobs' claims were made: held ones are ``processing``, settled ones ``done``
        or ``failed`` (a busy one is left as it is)."""
        updates = [job for job in (_claimed(claim) for claim in claims) if job is not None]
        self._record(updates)

    def finished(self, results: Iterable[JobResult]) -> None:
        """The jobs' final states (with manifest and outputs, or the reason), and the
        placeholder among their decisions."""
        results = list(results)
        updates = [_finished(result) for result in results]
        placeholder = next((p for r in results if (p := placeholder_of(r.decisions)) is not None), None)
        self._record(updates, placeholder=placeholder)

    def refused(self, version_id: str | None, etag: str, size_bytes: int | None, *, reason: str, detail: str) -> None:
        """The original was refused before any job (``empty_file``, ``unsupported_format``
        ...): its version, current with no jobs unless it has some, fails with ``reason``.

        Raises
        ------
        EventSuperseded
            A greater sequencer is current.
        """
        if self._assets is None:
            return
        if self.view is None or self.view.version.sequencer != self.sequencer:
            self.current(version_id, etag, size_bytes, jobs=())
        view = self.view
        if view is None or (view.state == AssetState.FAILED and view.reason == reason):
            return
        self._write([], failure=(reason, detail))

    def progress_sink(self, job_key: str) -> Callable[[float, float], None]:
        """A sink of a job's progress (``done_s`` of ``total_s`` seconds) that writes the
        fraction at most every ``progress_every_s``; failures are logged, never raised."""
        last_s = [-math.inf]

        def sink(done_s: float, total_s: float) -> None:
            if self._assets is None or total_s <= 0:
                return
            now = self._keeper._clock()
            if now - last_s[0] < self._keeper._progress_every_s:
                return
            last_s[0] = now
            try:
                self._assets.progress(
                    self.bucket, self.key, self.sequencer, job_key, min(1.0, done_s / total_s), now_s=int(now)
                )
            except Exception as exc:  # advice only: never stops the job
                log.warning("could not record progress: %r", exc, extra={"job_key": job_key, "source_key": self.key})

        return sink

    def _record(self, updates: Sequence[AssetJob], placeholder: Mapping[str, Any] | None = None) -> None:
        """Write ``updates`` (and ``placeholder``) unless the stored asset holds them already."""
        if self._assets is None or self.view is None or not self.attached:
            return
        view = self.view
        merged = merge_jobs(view.jobs, updates)
        state, _, _ = summarize(merged)
        moves = state != view.state and may_move(view.state, state)
        new_placeholder = placeholder is not None and dict(placeholder) != dict(view.placeholder or {})
        next_moves = bool(view.next) and merge_jobs(view.next, updates) != view.next
        if merged == view.jobs and not moves and not new_placeholder and not next_moves:
            return
        self._write(updates, placeholder=placeholder)

    def _write(
        self,
        updates: Sequence[AssetJob],
        *,
        failure: tuple[str, str] | None = None,
        placeholder: Mapping[str, Any] | None = None,
    ) -> None:
        assert self._assets is not None
        stored = self._assets.record(
            self.bucket,
            self.key,
            self.sequencer,
            updates,
            now_s=self._keeper.now_s(),
            failure=failure,
            placeholder=placeholder,
        )
        if stored is None:
            # Superseded meanwhile: a committed job stays (its reference is gone with the
            # version; the collection takes it).
            log.info("the asset moved on meanwhile: job states not recorded", extra={"source_key": self.key})
            return
        self._keeper.on_write("asset_recorded", asset_id(self.bucket, self.key))
        self.view = stored


def _claimed(claim: Claim) -> AssetJob | None:
    """The asset's entry of a job as its claim found it (``None``: busy, left as stored)."""
    match claim.outcome:
        case ClaimOutcome.RUN:
            return AssetJob("", claim.job_key, AssetJobState.PROCESSING)
        case ClaimOutcome.DONE:
            return AssetJob(
                "", claim.job_key, AssetJobState.DONE, manifest_key=claim.manifest_key, outputs=claim.outputs
            )
        case ClaimOutcome.HELD:
            return AssetJob("", claim.job_key, AssetJobState.REVIEW, detail=held_because(claim.decisions))
        case ClaimOutcome.FAILED:
            return AssetJob(
                "",
                claim.job_key,
                AssetJobState.FAILED,
                reason=claim.failure_reason,
                detail=claim.failure_detail or "",
            )
    return None


def _awaits(view: AssetView, job_key: str) -> bool:
    """Whether ``view``'s current set holds ``job_key`` not ended yet."""
    return any(j.job_key == job_key and j.state not in _ENDED for j in view.jobs)


def _result_of(row: JobView) -> JobResult:
    """The result a job's ended row stands for (a split job its parts' failure ended)."""
    recipe = row.spec.recipe_ref if row.spec is not None else row.recipe_id
    return JobResult(
        recipe,
        row.job_key,
        JobState(row.state),
        reused=True,
        reason=row.failure_reason,
        detail=row.failure_detail or "",
        manifest_key=row.manifest_key,
        outputs=row.outputs,
        decisions=row.decisions,
    )


def _finished(result: JobResult) -> AssetJob:
    """The asset's entry of a job this delivery ended or found ended."""
    if result.state == JobState.DONE:
        return AssetJob(
            result.recipe,
            result.job_key,
            AssetJobState.DONE,
            manifest_key=result.manifest_key,
            outputs=tuple(result.outputs),
        )
    if result.state == JobState.REVIEW:
        return AssetJob(result.recipe, result.job_key, AssetJobState.REVIEW, detail=held_because(result.decisions))
    return AssetJob(result.recipe, result.job_key, AssetJobState.FAILED, reason=result.reason, detail=result.detail)


def held_because(decisions: Mapping[str, Any] | None) -> str:
    """Why a moderation job holds its asset for review, in words: the rule that fired and
    its evidence (what a reviewer reads in the status document's ``detail``)."""
    decision = moderation_of(decisions) or {}
    return f"held for review: rule {decision.get('rule')}: {decision.get('evidence')}"
