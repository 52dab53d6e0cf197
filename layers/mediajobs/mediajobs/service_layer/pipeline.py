"""The use case: what happens to one original, in order (:meth:`Pipeline.process`).

0. **Order**: the asset of the key is read (:mod:`mediajobs.service_layer.assets`): an
   event whose sequencer is lower than the stored one is *superseded* -- acknowledged with
   nothing read, rendered or counted.
1. **Identify** the original without reading it: refuse what is certainly bad (0 bytes,
   over the size limit) from the event, then from ``HeadObject`` (the URL-decoded key
   first, the key as the event spelled it only when that names no object); learn its
   SHA-256 from the object's full-object checksum, from its asset (the same version), or
   from the source index.
2. **Plan** its jobs: one :class:`~mediajobs.domain.jobs.JobSpec` per active recipe of its
   media type (job key = SHA-256 of the bytes + recipe hash + policy version); make the
   version its asset's current one *with those jobs* (their references), then read their
   rows in one ``BatchGetItem`` -- the reference is in place before the rows are read, so a
   re-upload racing the collection of a job is safe. Content not known yet: the version
   is made current (``pending``) now and its jobs attached once its bytes are read.
3. **Settle** what the ledger already knows: when every job is done or failed, the
   duplicate is answered without reading a byte (at most 2 DynamoDB requests); a job
   running elsewhere sends the message back until its lease ends.
4. **Claim** every job (one conditional write each) -- before reading when the hash is
   known, so a delivery that loses the claim reads nothing. A claim that finds a staged
   manifest only adopts it, without the original. Otherwise the source is marked as
   being read (duplicates meanwhile come back later), streamed into a fresh **work
   folder** while hashing it, its media type detected from the bytes, its jobs claimed,
   and only then are hash and type remembered in the source index.
5. Per job, **under its lease** (a heartbeat renewing the lease and the message's
   visibility): **run the step**, then **commit** (:mod:`mediajobs.service_layer.commit`:
   register -> write with ``If-None-Match`` -> stage the manifest -> write
   ``manifest.json`` -> done), the only code that writes derivatives. A permanent failure
   is recorded in the job's row; anything else gives the claim back and is raised.
6. The work folder is removed, whatever happened. The asset records each job's claim
   (``processing``, with a video's progress) and end (``done`` with its outputs and the
   placeholder, or ``failed`` with the reason), writing only what changes; a refusal before
   any job fails the version itself.

``Object Deleted`` events go to :meth:`Pipeline.remove`.

The caller (the Lambda handler) acknowledges the SQS message only after this returns:
nothing is acknowledged before its commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from mediajobs.domain.assets import Deleted, DeletionEffect
from mediajobs.domain.errors import (
    EMPTY_FILE,
    SOURCE_MISSING,
    TOO_LARGE,
    UNSUPPORTED_FORMAT,
    DeadlineReached,
    DeliveryLost,
    JobBusy,
    MediaJobsError,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    Decision,
    Delivery,
    JobResult,
    JobSpec,
    JobState,
    JobView,
    KnownSource,
    ObjectHead,
    ObjectRef,
    OutputRecord,
    Reading,
    RenderContext,
    SourceResult,
    SourceState,
    decide,
    standing_claim,
)
from mediajobs.domain.keys import content_id, job_key, source_version_id
from mediajobs.domain.manifest import derivative_prefix
from mediajobs.domain.recipes import Recipe
from mediajobs.service_layer.assets import AssetKeeper, EventSuperseded, KeptAsset
from mediajobs.service_layer.commit import Commit
from mediajobs.service_layer.lease import LeaseKeeper, lease_until
from mediajobs.service_layer.ports import Assets, Ledger, ObjectStore, Queue, Sources, Step
from mediajobs.settings import Settings

log = logging.getLogger(__name__)


#: What a held job's work returns: the outputs committed and the decisions of its manifest.
_Committed = tuple[list[OutputRecord], Mapping[str, Any] | None]

#: Progress of a long render is logged at most this often, seconds (Lambda's logs are the
#: only progress bar there).
PROGRESS_LOG_EVERY_S = 10.0


class PipelineObserver:
    """Hooks for callers that want to watch the pipeline (the CLI, tests). No-ops by default."""

    def claimed(self, claim: Claim, source: ObjectRef) -> None:
        """Called when this worker holds a job's claim (``claim.took_over`` for takeovers)."""

    def reading(self, source: ObjectRef) -> None:
        """Called when this delivery holds the reading mark of an original whose media type
        is unknown, before reading it: duplicates meanwhile wait (:meth:`Pipeline._mark_reading`)."""

    def render_started(self, job_key: str, source: ObjectRef) -> None:
        """Called when this worker starts rendering a job it holds the claim of."""

    def step(self, point: str, job_key: str) -> None:
        """Called at each step boundary of a claimed job, after the step is durable:
        ``claimed``, ``output_stored`` (after each derivative), ``manifest_stored``,
        ``done``; and after each asset write, with the asset's id
        (:func:`~mediajobs.domain.assets.asset_id`) for ``job_key``: ``asset_current``,
        ``asset_recorded``, ``asset_deleted``. Crash injection hooks here (``mediajobs
        simulate``, crash-point tests)."""

    def source_finished(self, result: SourceResult) -> None:
        """Called with each original's result (not for busy or transient outcomes, which raise)."""

    def progress(self, job_key: str, names: tuple[str, ...], done_s: float, total_s: float) -> None:
        """Called as a video job's outputs ``names`` grow: ``done_s`` of ``total_s`` seconds written."""


class DiskUsage(Protocol):
    """What the pipeline reads of :func:`shutil.disk_usage`: sizes in bytes."""

    @property
    def total(self) -> int: ...
    @property
    def free(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class Identified:
    """An original identified before reading a byte of it.

    Attributes
    ----------
    ref: the object: the key that names it (see :meth:`Pipeline._head`), with its version id.
    head: what ``HeadObject`` said of it.
    source_id: its id in the source index (``None`` when the object names no version).
    sha256: its content's SHA-256 when known without reading (checksum, source index).
    media: its media type when the source index remembers it.
    """

    ref: ObjectRef
    head: ObjectHead
    source_id: str | None
    sha256: str | None
    media: str | None


@dataclasses.dataclass(frozen=True)
class PlannedJob:
    """One job of a content: the recipe it applies and what it is."""

    recipe: Recipe
    spec: JobSpec


@dataclasses.dataclass(frozen=True)
class Plan:
    """The jobs of one content, and what the ledger knows of them.

    Attributes
    ----------
    ref: the original.
    sha256: the content's SHA-256.
    media: its media type; ``None`` while unknown (``jobs`` then holds every media type's).
    size_bytes: its size, bytes (``HeadObject``'s before reading, the bytes read after).
    jobs: one per active recipe.
    views: the rows the ledger holds of ``jobs``, by job key (read once).
    """

    ref: ObjectRef
    sha256: str
    media: str | None
    size_bytes: int
    jobs: tuple[PlannedJob, ...]
    views: Mapping[str, JobView]


@dataclasses.dataclass(frozen=True)
class _Work:
    """One delivery's original, read into its work folder (``sha256`` of the bytes read)."""

    ref: ObjectRef
    original: Path
    size_bytes: int
    sha256: str
    delivery: Delivery | None
    folder: Path


class _Refused(Exception):
    """The original ends as a permanent failure before any job exists: its result."""

    def __init__(self, result: SourceResult) -> None:
        super().__init__(result.reason)
        self.result = result


class _ReadingMark:
    """This delivery's "being read" entry in the source index, given up at the end unless
    the hash was remembered under its id (which replaces it)."""

    def __init__(self, sources: Sources, source_id: str, token: str) -> None:
        self._sources = sources
        self.source_id = source_id
        self._token = token
        self._replaced = False

    def remembered(self, ids: list[str]) -> None:
        """The hash was remembered under ``ids``."""
        self._replaced = self._replaced or self.source_id in ids

    def end(self) -> None:
        """Give the entry up, unless remembered over."""
        if not self._replaced:
            self._sources.abandon(self.source_id, self._token)


#: Prefix of the per-record work folders under ``settings.work_dir``. Nothing else the
#: worker or the local tools create is named so (the ffmpeg adapter's unpack folder is
#: ``mediajobs.bin``; the embedded AWS's and ``simulate``'s folders are ``mediajobs.*`` too).
WORK_FOLDER_PREFIX = "mediajobs-"
#: A file every work folder holds from its creation: :func:`remove_work_folders` removes
#: only folders that hold it, never a user's folder that happens to share the prefix.
WORK_FOLDER_MARKER = ".mediajobs-work-folder"


def remove_work_folders(work_dir: str) -> int:
    """Remove every work folder under ``work_dir``, whatever its age; returns how many.

    Called once, when the pipeline is built (Lambda's INIT). A Lambda execution environment
    runs one invocation at a time and a work folder lives no longer than its invocation, so
    any work folder there at INIT was left by a predecessor that died in that sandbox (a
    crash, a timeout or running out of memory skip the cleanup) and holds space the next
    originals need (``/tmp``, the function's ``EphemeralStorage``, survives a restart of the
    sandbox's runtime). Where several workers share a folder at once this does not hold --
    Lambda Managed Instances, or local runs -- so each needs a ``WORK_DIR`` of its own, as
    the local tools give every worker they run (``mediajobs.local``).

    Only folders named :data:`WORK_FOLDER_PREFIX` ``*`` directly under ``work_dir`` that
    hold the :data:`WORK_FOLDER_MARKER` file are removed (``mediajobs-out``, the demo's
    output folder, is not a work folder); errors are ignored (what cannot be removed is
    tried again at the next INIT).
    """
    removed = 0
    try:
        entries = list(Path(work_dir).glob(f"{WORK_FOLDER_PREFIX}*"))
    except OSError:
        return 0
    for folder in entries:
        try:
            marked = (folder / WORK_FOLDER_MARKER).is_file()
            if folder.is_dir() and not folder.is_symlink() and marked:
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        except OSError:
            continue
    return removed


class Pipeline:
    """Processes originals named by S3 events.

    Parameters
    ----------
    settings: limits, prefixes, lease and policy version.
    store, ledger, sources: adapters (real or fakes).
    steps: the recipe steps by name; a recipe's ``step`` chooses the one that runs it.
    queue: message visibility (``None`` where there is no SQS delivery).
    recipes: the recipes to apply, by media type (``{"image": [web-image@1]}``).
    detect_media: ``"image"``, ``"video"`` or ``None`` for a local file, given the file and
        the original's key (whose extension only routes bytes that no sniffing recognises).
    clock: returns Unix time in seconds.
    observer: optional hooks.
    disk_usage: sizes of the disk holding a folder (:func:`shutil.disk_usage`).
    assets: the asset records (``None``: none kept; :mod:`mediajobs.service_layer.assets`).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ObjectStore,
        ledger: Ledger,
        sources: Sources,
        steps: Mapping[str, Step],
        recipes: dict[str, list[Recipe]],
        detect_media: Callable[[Path, str], str | None],
        queue: Queue | None = None,
        clock: Callable[[], float] = time.time,
        observer: PipelineObserver | None = None,
        disk_usage: Callable[[str], DiskUsage] = shutil.disk_usage,
        assets: Assets | None = None,
    ) -> None:
        self.settings = settings
        self._store = store
        self._ledger = ledger
        self._sources = sources
        missing = sorted({r.step for rs in recipes.values() for r in rs} - set(steps))
        if missing:  # every job of such a recipe would fail, retried until attempts_exhausted
            raise ValueError(f"recipes name steps that are not registered: {missing}")
        self._steps = steps
        self._recipes = recipes
        self._detect_media = detect_media
        self.queue = queue
        self._clock = clock
        self.observer = observer or PipelineObserver()
        self._disk_usage = disk_usage
        self._assets = AssetKeeper(assets, clock, on_write=self.observer.step)
        self._media_of_recipe = {r.id: media for media, rs in recipes.items() for r in rs}

    def process(self, ref: ObjectRef, delivery: Delivery | None = None) -> SourceResult:
        """Process one original.

        Parameters
        ----------
        ref: the object version an event names.
        delivery: the SQS delivery it came with (heartbeat, deadline), or ``None``.

        Returns
        -------
        SourceResult
            ``done``, ``permanent_failure`` (with its reason), ``ignored``, or
            ``superseded`` (a greater sequencer of the key is current: nothing was read,
            rendered or counted).

        Raises
        ------
        JobBusy
            Another worker holds a job (or the first read) of this original: redeliver
            after ``lease_expires_at_s``.
        TransientFailure
            Something that may pass failed: redeliver (:class:`DeadlineReached`: at once).
        Superseded
            This worker's claim was taken over while it worked.
        """
        if not ref.key.startswith(self.settings.originals_prefix):
            log.info("ignoring key outside %s", self.settings.originals_prefix, extra={"source_key": ref.key})
            return SourceResult(ref, SourceState.IGNORED)
        try:
            asset = self._assets.track(ref)  # before HeadObject: a late event reads nothing
            try:
                result = self._process(ref, delivery, asset)
            except _Refused as refused:
                result = refused.result
            except PermanentFailure as failure:
                # Raised outside a job's own handling: the ledger or the source index refused a
                # value derived from this input (``unstorable_input``). Retrying cannot help.
                result = self._refusal(ref, failure.reason, failure.detail).result
            if result.state is SourceState.PERMANENT_FAILURE and not result.jobs:
                self._refused(asset, result)
        except EventSuperseded as superseded:
            log.info("superseded: %s", superseded, extra={"source_key": ref.key})
            result = SourceResult(ref, SourceState.SUPERSEDED)
        self.observer.source_finished(result)
        return result

    @staticmethod
    def _refused(asset: KeptAsset, result: SourceResult) -> None:
        """Fail the asset's version with the reason of a refusal before any job (an asset
        that cannot be stored is logged: the refusal stands)."""
        source = result.source
        try:
            asset.refused(
                source.version_id, source.etag, source.size_bytes, reason=result.reason or "", detail=result.detail
            )
        except PermanentFailure as failure:
            log.warning("the refusal is not recorded in the asset: %s", failure, extra={"source_key": source.key})

    def remove(self, deleted: Deleted, delivery: Delivery | None = None) -> SourceResult:
        """Apply an ``Object Deleted`` event to its asset (``docs/assets.md``, "Deletes as
        S3 sends them"; :func:`~mediajobs.domain.assets.deletion_effect` decides).

        A delete marker, or the object of an unversioned bucket deleted, makes the asset
        ``deleted`` (its references dropped in one transaction). A version deleted for good
        -- noncurrent, current, or a delete marker -- has the key looked at again
        (``HeadObject`` without a version: the asset cannot tell which it was) and what S3
        serves now processed as if created by this event: the version current already
        (only the sequencer moves), or the previous one (its jobs exist: no render); with
        nothing left, the asset is ``deleted``.

        Returns
        -------
        SourceResult
            ``deleted``, ``superseded`` (a greater sequencer is current), ``ignored``
            (outside ``originals/``), or -- a previous version made current again -- what
            :meth:`process` returns for it.

        Raises
        ------
        TransientFailure
            As :meth:`process` (the asset transaction, ``HeadObject``).
        """
        ref = ObjectRef(deleted.bucket, deleted.key, deleted.version_id, sequencer=deleted.sequencer)
        if not ref.key.startswith(self.settings.originals_prefix):
            return SourceResult(ref, SourceState.IGNORED)
        effect, _ = self._assets.deletion(deleted)
        extra = {"source_key": ref.key, "deletion_type": deleted.deletion_type, "effect": str(effect)}
        log.info("object deleted: %s", effect, extra=extra)
        state = SourceState.DELETED
        if effect is DeletionEffect.SUPERSEDED:
            state = SourceState.SUPERSEDED
        elif effect is DeletionEffect.LOOK_AGAIN and (head := self._head_current(ref)) is not None:
            again = ObjectRef(
                ref.bucket, ref.key, head.version_id, head.size_bytes, head.etag, sequencer=deleted.sequencer
            )
            return self.process(again, delivery)
        elif effect in (DeletionEffect.DELETED, DeletionEffect.LOOK_AGAIN) and not self._assets.delete(deleted):
            state = SourceState.SUPERSEDED
        result = SourceResult(ref, state)
        self.observer.source_finished(result)
        return result

    def _head_current(self, ref: ObjectRef) -> ObjectHead | None:
        """``HeadObject`` of the key without a version (what S3 serves now), ``None`` when
        nothing is there."""
        try:
            return self._store.head(ObjectRef(ref.bucket, ref.key))
        except PermanentFailure as missing:
            if missing.reason != SOURCE_MISSING:
                raise
            return None

    def _process(self, ref: ObjectRef, delivery: Delivery | None, asset: KeptAsset) -> SourceResult:
        """The order of operations (the module docstring's); a refusal raises
        :class:`_Refused`, a greater sequencer found current :class:`EventSuperseded`."""
        original = self._identify(ref, delivery, asset)
        plan = self._plan(original, original.sha256, original.media, asset)
        if not asset.attached:  # the version is pending (its jobs attached once its bytes are known)
            self._current(original, asset)
        claims: list[Claim] = []
        if plan is not None and plan.media is not None:
            settled, claims = self._settle_or_claim(original, plan, delivery, asset)
            if settled is not None:
                return settled
        else:
            self._ensure_space(original, plan)
        # The bytes are needed: mark the source as being read, so that duplicates wait.
        mark, found = self._mark_reading(original, plan, delivery)
        if found is not None:
            # Another delivery read it meanwhile (and claimed its jobs before remembering
            # it): look again, and claim before reading as when the media type was known.
            plan = self._plan(original, found.sha256, found.media, asset)
            if plan is not None and plan.media is not None:
                settled, claims = self._settle_or_claim(original, plan, delivery, asset)
                if settled is not None:
                    return settled
        try:
            with self._work_folder() as folder:
                work = self._read(original, folder, delivery, claims)
                if plan is not None and work.sha256 != plan.sha256:  # not the content the hash named
                    self._content_changed(plan, work, claims)
                    plan, claims = None, []
                self._check_size(work.ref, work.size_bytes, sha256=work.sha256, bytes_read=work.size_bytes)
                plan = self._plan_read(original, work, plan, mark)
                self._current(original, asset, plan, claims)  # the jobs attached before they are claimed
                # Claim every job before telling duplicates what the content is: one that
                # learns it from the index then finds the jobs claimed, and waits.
                claims = claims or self._claim_all(plan, delivery, asset)
                self._remember(original, work, plan.media, mark)
                return self._run_jobs(plan, claims, delivery, work, asset)
        finally:
            if mark is not None:
                mark.end()

    # ------------------------------------------------------------------ identify

    def _identify(self, ref: ObjectRef, delivery: Delivery | None, asset: KeptAsset) -> Identified:
        """Size checks, ``HeadObject`` (with the key fallback), and the hash when it is known
        without reading: the full-object checksum, else the asset (when its version is this
        one: a duplicate costs no lookup), else the source index.

        Raises
        ------
        _Refused
            Empty, too large, missing, or remembered as content no recipe applies to.
        JobBusy
            Another delivery is reading this source now.
        """
        if ref.size_bytes is not None:
            self._check_size(ref, ref.size_bytes, announced=True)
        self._ensure_time(delivery, 0)
        try:
            ref, head = self._head(ref)
        except PermanentFailure as failure:
            raise self._refusal(ref, failure.reason, failure.detail) from None
        if ref.key != asset.key:  # the key as the event spelled it names the object: its asset
            asset.rekey(ref.key)
        if ref.version_id is None and head.version_id:
            ref = dataclasses.replace(ref, version_id=head.version_id)
        self._check_size(ref, head.size_bytes)
        source_id = source_version_id(
            ref.bucket, ref.key, version_id=head.version_id, etag=head.etag, size_bytes=head.size_bytes
        )
        sha256, media = head.sha256, None
        if sha256 is None:
            sha256, media = asset.content_of(head.version_id, head.etag, head.size_bytes)
        if sha256 is None and source_id is not None:
            match self._sources.lookup(source_id, now_s=self._now()):
                case KnownSource() as known:
                    sha256, media = known.sha256, known.media
                case Reading() as reading:  # another delivery is reading it right now
                    raise JobBusy(source_id, reading.lease_expires_at_s)
        if media == "":
            raise self._refusal(ref, UNSUPPORTED_FORMAT, "no recipe for this content (remembered)", sha256=sha256)
        return Identified(ref, head, source_id, sha256, media)

    def _head(self, ref: ObjectRef) -> tuple[ObjectRef, ObjectHead]:
        """``HeadObject`` of the object an event names, and the ref with the key that names it.

        The key URL-decoded (``ref.key``) first; the key as the event spelled it
        (``ref.raw_key``) only when the decoded one names no object and it does. The key
        used is logged.

        Raises
        ------
        PermanentFailure
            ``source_missing`` (for the decoded key) when neither names an object.
        TransientFailure
            As :meth:`ObjectStore.head`.
        """
        try:
            head = self._store.head(ref)
        except PermanentFailure as missing:
            if missing.reason != SOURCE_MISSING or ref.raw_key is None:
                raise
            as_received = dataclasses.replace(ref, key=ref.raw_key, raw_key=None)
            try:
                head = self._store.head(as_received)
            except PermanentFailure:
                raise missing from None
            log.warning(
                "object key used as the event spelled it: the URL-decoded key names no object",
                extra={"source_key": as_received.key, "decoded_key": ref.key},
            )
            return as_received, head
        if ref.raw_key is not None:
            log.info("object key URL-decoded", extra={"source_key": ref.key, "event_key": ref.raw_key})
        return ref, head

    # ------------------------------------------------------------------ plan

    def _plan(self, original: Identified, sha256: str | None, media: str | None, asset: KeptAsset) -> Plan | None:
        """The jobs of a content whose hash is known, and their rows (one ``BatchGetItem``);
        an unknown media type is learnt from the asset, else from a row's recipe. ``None``
        without a hash.

        The asset's version is made current with the jobs before their rows are read (the
        reference in place first: ``docs/assets.md``, "Collection"); when the media type
        is learnt from the rows, the rows are read again after that.

        Raises
        ------
        EventSuperseded
            A greater sequencer of the key is current.
        """
        if sha256 is None:
            return None
        ref = original.ref
        media = media or asset.media_of(sha256)
        jobs = self._jobs(ref, sha256, media)
        if media is not None:
            self._current(original, asset, Plan(ref, sha256, media, original.head.size_bytes, jobs, {}))
        views = self._ledger.find([job.spec.job_key for job in jobs])
        if media is None:
            media = next((self._media_of_recipe.get(v.recipe_id) for v in views.values()), None)
            jobs = self._jobs(ref, sha256, media)
            learnt = Plan(ref, sha256, media, original.head.size_bytes, jobs, {})
            if media is not None and self._current(original, asset, learnt):
                views = self._ledger.find([job.spec.job_key for job in jobs])  # after the reference
        return Plan(ref, sha256, media, original.head.size_bytes, jobs, views)

    def _current(
        self, original: Identified, asset: KeptAsset, plan: Plan | None = None, claims: Iterable[Claim] = ()
    ) -> bool:
        """Make the original's version its asset's current one, with ``plan``'s jobs
        (``None``: the content not known yet); whether the jobs were attached by this call.

        Raises
        ------
        EventSuperseded
            A greater sequencer is current (``claims`` held are given back first).
        """
        head = original.head
        jobs = None if plan is None else [(job.recipe.ref, job.spec.job_key) for job in plan.jobs]
        try:
            return asset.current(
                head.version_id,
                head.etag,
                head.size_bytes,
                sha256=plan.sha256 if plan is not None else None,
                media=plan.media if plan is not None else None,
                jobs=jobs,
            )
        except EventSuperseded as superseded:
            self._release_all(claims, superseded)
            raise

    def _plan_read(self, original: Identified, work: _Work, plan: Plan | None, mark: _ReadingMark | None) -> Plan:
        """The jobs of the bytes read: their media type is the plan's, else detected from them.

        Raises
        ------
        _Refused
            ``unsupported_format`` when no recipe applies (remembered first, so that
            duplicates are refused without reading).
        """
        media = (plan.media if plan is not None else None) or self._detect_media(work.original, work.ref.key)
        jobs = self._jobs(work.ref, work.sha256, media) if media in self._recipes else ()
        if not jobs:
            self._remember(original, work, media, mark)
            raise self._refusal(
                work.ref,
                UNSUPPORTED_FORMAT,
                f"no recipe for this content ({media or 'unknown type'})",
                sha256=work.sha256,
                size_bytes=work.size_bytes,
                media=media,
                bytes_read=work.size_bytes,
            )
        views = plan.views if plan is not None else {}
        return Plan(work.ref, work.sha256, media, work.size_bytes, jobs, views)

    def _jobs(self, ref: ObjectRef, sha256: str, media: str | None) -> tuple[PlannedJob, ...]:
        """The jobs of a content: for ``media``'s recipes, or every media type's when unknown."""
        settings = self.settings
        jobs = []
        for m in [media] if media else list(self._recipes):
            for recipe in self._recipes.get(m, []):
                key = job_key(sha256, recipe.sha256, settings.policy_version)
                spec = JobSpec(
                    job_key=key,
                    input_sha256=sha256,
                    recipe_id=recipe.id,
                    recipe_version=recipe.version,
                    recipe_sha256=recipe.sha256,
                    policy_version=settings.policy_version,
                    output_prefix=derivative_prefix(settings.derivatives_prefix, key),
                    source_bucket=ref.bucket,
                    source_key=ref.key,
                )
                jobs.append(PlannedJob(recipe, spec))
        return tuple(jobs)

    # ------------------------------------------------------------------ settle

    def _settle(self, plan: Plan, delivery: Delivery | None, asset: KeptAsset) -> SourceResult | None:
        """Answer a duplicate from the ledger alone, when none of its jobs needs the bytes.

        Returns ``None`` when some job must run (missing, or can be taken over). A job past
        its attempts ends with one conditional write, unless its holder staged the manifest
        meanwhile: then the claim runs, to adopt it.

        Raises
        ------
        JobBusy
            When a job is running elsewhere (the earliest lease end is reported).
        """
        now = self._now()
        decisions: dict[str, Decision] = {}
        for job in plan.jobs:
            view = plan.views.get(job.spec.job_key)
            if view is None:
                return None
            decisions[job.spec.job_key] = decide(view, now_s=now, max_attempts=self.settings.max_attempts)
        if any(d is Decision.TAKE_OVER for d in decisions.values()):
            return None
        busy = [plan.views[k] for k, d in decisions.items() if d is Decision.BUSY]
        if busy:
            first = min(busy, key=lambda v: v.lease_expires_at_s)
            log.info("job is running elsewhere", extra={"job_key": first.job_key, "source_key": plan.ref.key})
            raise JobBusy(first.job_key, first.lease_expires_at_s)
        claims = (  # lazily: each claim is made just before its job runs
            self._ledger.claim(job.spec, now_s=now, lease_until_s=self._lease_until(delivery), seen=view)
            if decisions[job.spec.job_key] is Decision.EXHAUST
            else standing_claim(view)
            for job in plan.jobs
            for view in [plan.views[job.spec.job_key]]
        )
        return self._run_jobs(plan, claims, delivery, None, asset)

    def _settle_or_claim(
        self, original: Identified, plan: Plan, delivery: Delivery | None, asset: KeptAsset
    ) -> tuple[SourceResult | None, list[Claim]]:
        """For a content whose jobs are known: answer from the ledger (:meth:`_settle`), else
        (the disk checked) claim every job before reading, so that a delivery that loses a
        claim reads nothing.

        Returns the result when no job needs the bytes (settled elsewhere, or a staged
        manifest adopted), else ``(None, the claims held)``.

        Raises
        ------
        JobBusy
            A job is running elsewhere, or another delivery claimed it first.
        _Refused
            ``too_large`` (:meth:`_ensure_space`).
        """
        if (settled := self._settle(plan, delivery, asset)) is not None:
            return settled, []
        self._ensure_space(original, plan)
        claims = self._claim_all(plan, delivery, asset)
        if not any(_needs_original(claim) for claim in claims):
            return self._run_jobs(plan, claims, delivery, None, asset), claims
        return None, claims

    def _settled(self, recipe: Recipe, claim: Claim) -> JobResult:
        """The result of a job this delivery found finished (or just ended exhausted).

        Raises
        ------
        JobBusy
            When the claim found the job running elsewhere.
        """
        extra = {"job_key": claim.job_key, "recipe": recipe.ref}
        if claim.outcome is ClaimOutcome.DONE:
            log.info("job already done: reusing its outputs", extra=extra)
            return JobResult(
                recipe.ref,
                claim.job_key,
                JobState.DONE,
                reused=True,
                manifest_key=claim.manifest_key,
                outputs=claim.outputs,
                decisions=claim.decisions,
            )
        if claim.outcome is ClaimOutcome.FAILED:
            log.info("job failed permanently: %s", claim.failure_reason, extra=extra)
            return JobResult(
                recipe.ref,
                claim.job_key,
                JobState.PERMANENT_FAILURE,
                reused=not claim.failed_now,
                reason=claim.failure_reason,
                detail=claim.failure_detail or "",
            )
        log.info("job is running elsewhere", extra=extra)
        raise JobBusy(claim.job_key, claim.lease_expires_at_s)

    # ------------------------------------------------------------------ claim

    def _claim_all(self, plan: Plan, delivery: Delivery | None, asset: KeptAsset) -> list[Claim]:
        """Claim every job of a content (none is started without time for all of them), and
        record what the claims found in the asset (held: ``processing``).

        When one claim fails, the claims made before it are given back first, so none waits
        for its lease to end.
        """
        self._ensure_time(delivery, self.settings.image_job_s * len(plan.jobs))
        now, until = self._now(), self._lease_until(delivery)
        claims: list[Claim] = []
        try:
            for job in plan.jobs:
                seen = plan.views.get(job.spec.job_key)
                claims.append(self._ledger.claim(job.spec, now_s=now, lease_until_s=until, seen=seen))
            asset.claimed(claims)
        except (PermanentFailure, TransientFailure) as exc:
            self._release_all(claims, exc)
            raise
        return claims

    def _release_all(self, claims: Iterable[Claim], why: Exception) -> None:
        """Give back every claim this delivery holds (the next delivery takes them over)."""
        for claim in claims:
            if claim.outcome is ClaimOutcome.RUN and claim.lease_token:
                self._release(claim.job_key, claim.lease_token, why, {"job_key": claim.job_key})

    def _release(self, key: str, token: str, exc: Exception, extra: dict[str, str]) -> None:
        log.warning("transient failure: %r", exc, extra=extra)
        try:
            self._ledger.release_transient(key, token, detail=repr(exc), now_s=self._now())
        except (Superseded, PermanentFailure, TransientFailure) as release_error:
            log.warning("could not release the claim: %r", release_error, extra=extra)

    # ------------------------------------------------------------------ read

    def _mark_reading(
        self, original: Identified, plan: Plan | None, delivery: Delivery | None
    ) -> tuple[_ReadingMark | None, KnownSource | None]:
        """Mark the source (or its content, when the hash is known) as being read, when its
        media type is unknown: duplicates meanwhile wait instead of reading it too.

        Returns this delivery's mark (``None``: none was needed or taken), and what the
        index knows when another delivery remembered the content meanwhile.

        Raises
        ------
        JobBusy
            Another delivery is reading it now.
        _Refused
            Remembered meanwhile as content no recipe applies to.
        """
        if plan is not None and plan.media is not None:
            return None, None
        marker = content_id(original.sha256) if original.sha256 is not None else original.source_id
        if marker is None:
            return None, None
        token = uuid.uuid4().hex
        found = self._sources.begin_reading(marker, token, now_s=self._now(), lease_until_s=self._lease_until(delivery))
        match found:
            case None:
                self.observer.reading(original.ref)
                return _ReadingMark(self._sources, marker, token), None
            case KnownSource(media=""):
                raise self._refusal(
                    original.ref, UNSUPPORTED_FORMAT, "no recipe for this content (remembered)", sha256=original.sha256
                )
            case KnownSource():
                return None, found
            case Reading():
                raise JobBusy(marker, found.lease_expires_at_s)

    @contextlib.contextmanager
    def _work_folder(self) -> Iterator[Path]:
        """A fresh work folder under ``settings.work_dir`` (see :data:`WORK_FOLDER_MARKER`),
        removed whatever happens."""
        folder = Path(tempfile.mkdtemp(prefix=WORK_FOLDER_PREFIX, dir=self.settings.work_dir))
        try:
            (folder / WORK_FOLDER_MARKER).touch()
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _read(self, original: Identified, folder: Path, delivery: Delivery | None, claims: Iterable[Claim]) -> _Work:
        """Stream the original into ``folder`` while hashing it.

        Raises
        ------
        _Refused
            The object cannot be read (gone, changed): the claims are given back instead of
            failing the jobs -- they belong to the content, and another copy may come.
        """
        path = folder / "original"
        try:
            downloaded = self._store.download(original.ref, path, etag=original.head.etag)
        except PermanentFailure as failure:
            self._release_all(claims, failure)
            raise self._refusal(original.ref, failure.reason, failure.detail) from None
        return _Work(original.ref, path, downloaded.size_bytes, downloaded.sha256, delivery, folder)

    def _content_changed(self, plan: Plan, work: _Work, claims: Iterable[Claim]) -> None:
        """The bytes read are not the content the hash named: the claims (on the wrong jobs)
        are given back (the bytes read are then planned afresh)."""
        log.warning(
            "the bytes read do not match the known SHA-256; using the bytes",
            extra={"source_key": work.ref.key, "known": plan.sha256, "read": work.sha256},
        )
        self._release_all(claims, TransientFailure("content changed"))

    def _remember(self, original: Identified, work: _Work, media: str | None, mark: _ReadingMark | None) -> None:
        """Remember the hash and media type under the ids it is true for: this source
        version, and the content the bytes read are (a marker named after another hash is
        dropped)."""
        ids = [i for i in (original.source_id, content_id(work.sha256) if original.head.sha256 else None) if i]
        self._sources.remember(ids, KnownSource(work.sha256, work.size_bytes, media or ""), now_s=self._now())
        if mark is not None:
            mark.remembered(ids)

    # ------------------------------------------------------------------ run

    def _run_jobs(
        self, plan: Plan, claims: Iterable[Claim], delivery: Delivery | None, work: _Work | None, asset: KeptAsset
    ) -> SourceResult:
        """Run each claimed job (``work``: the original read, ``None`` when it was not),
        record their ends in the asset, and summarise: the first failed job's reason is the
        original's."""
        result = SourceResult(
            plan.ref,
            SourceState.DONE,
            media=plan.media,
            sha256=plan.sha256,
            size_bytes=plan.size_bytes,
            bytes_read=work.size_bytes if work is not None else 0,
        )
        # One job's transient failure, lost claim or busy holder does not hold up the others
        # (their claims are taken): each runs, and the first such outcome is raised after
        # them -- unless the invocation's time or the message is gone, when the claims left
        # are given back at once instead.
        interrupted: MediaJobsError | None = None
        for job, claim in zip(plan.jobs, claims, strict=True):
            if isinstance(interrupted, DeadlineReached | DeliveryLost):
                self._release_all([claim], interrupted)
                continue
            try:
                result.jobs.append(self._run_job(plan.ref, job, claim, delivery, work, asset))
            except (TransientFailure, Superseded, JobBusy) as exc:
                if interrupted is None or isinstance(exc, DeadlineReached | DeliveryLost):
                    interrupted = exc
        asset.finished(result.jobs)
        if interrupted is not None:
            raise interrupted
        failed = [j for j in result.jobs if j.state != JobState.DONE]
        if failed:
            result.state = SourceState.PERMANENT_FAILURE
            result.reason, result.detail = failed[0].reason, failed[0].detail
        return result

    def _run_job(
        self,
        ref: ObjectRef,
        job: PlannedJob,
        claim: Claim,
        delivery: Delivery | None,
        work: _Work | None,
        asset: KeptAsset,
    ) -> JobResult:
        """One job: what its claim found, or -- held -- adopt its staged manifest, or run its
        step on the original and commit."""
        if claim.outcome is not ClaimOutcome.RUN:
            return self._settled(job.recipe, claim)
        assert claim.lease_token is not None, "a held claim carries its token"
        key = job.spec.job_key
        extra = {"job_key": key, "source_key": ref.key, "recipe": job.recipe.ref}
        self.observer.claimed(claim, ref)
        keeper = LeaseKeeper(
            ledger=self._ledger,
            queue=self.queue,
            job_key=key,
            token=claim.lease_token,
            expires_at_s=claim.lease_expires_at_s,
            delivery=delivery,
            lease_s=self.settings.lease_s,
            margin_s=self.settings.deadline_margin_s,
            clock=self._clock,
        )
        commit = Commit(
            self._store, self._ledger, ref, job.spec, claim.lease_token, keeper, self._clock, self.observer.step
        )
        staged = claim.staged_manifest
        if staged is not None:
            return self._under_lease(job, commit, extra, lambda: self._adopt(commit, staged, extra))
        if work is None:
            return self._under_lease(job, commit, extra, _original_needed)
        render = functools.partial(self._render_and_commit, job, work, commit, extra, claim.sweep, asset)
        return self._under_lease(job, commit, extra, render)

    def _adopt(self, commit: Commit, staged: str, extra: dict[str, str]) -> _Committed:
        """A lost holder stored every output and staged the manifest: write that body (it
        may be there already) instead of rendering again."""
        log.info("adopting the manifest a lost holder staged", extra=extra)
        return commit.adopt(staged), json.loads(staged).get("decisions")

    def _render_and_commit(
        self, job: PlannedJob, work: _Work, commit: Commit, extra: dict[str, str], sweep: bool, asset: KeptAsset
    ) -> _Committed:
        """Run the recipe's step on the original into the job's folder (a bounded step stops its
        child at the invocation's deadline: ``DeadlineReached``), then commit its files.

        ``sweep``: the claim took over an interrupted collection: what is left under the
        job's prefix (its old manifest first) is deleted before the render."""
        key = job.spec.job_key
        if sweep:
            removed = self._store.delete_prefix(work.ref.bucket, job.spec.output_prefix, first=commit.manifest_key)
            log.info("swept %d objects an interrupted collection left", removed, extra=extra)
        log.info("processing started", extra=extra)
        self.observer.render_started(key, work.ref)
        out_dir = work.folder / key
        out_dir.mkdir()
        context = RenderContext(
            check=commit.keeper.check,
            remaining_s=(work.delivery.remaining_s if work.delivery is not None else lambda: None),
            progress=self._progress_sink(key, work.ref, asset),
        )
        step = self._steps[job.recipe.step].run(work.original, job.recipe.params, context, out_dir)
        return commit.rendered(step.files, step.decisions, input_bytes=work.size_bytes), step.decisions

    def _under_lease(
        self, job: PlannedJob, commit: Commit, extra: dict[str, str], work: Callable[[], _Committed]
    ) -> JobResult:
        """Do a held job's ``work`` (which ends with its commit) with its heartbeat running,
        and classify what went wrong: a permanent failure is recorded in the job's row; any
        other failure gives the claim back (unless the heartbeat did) and is raised."""
        key, token, keeper = job.spec.job_key, commit.token, commit.keeper
        started = time.monotonic()
        try:
            self.observer.step("claimed", key)
            with keeper:
                # A claim made with the others of its content can run down while the jobs
                # before it run: entering renewed it, or found it taken over -- then this
                # worker stops here, before any work, not at its first write.
                keeper.check()
                outputs, decisions = work()
            self.observer.step("done", key)
        except PermanentFailure as failure:
            log.warning("permanent failure: %s (%s)", failure.reason, failure.detail, extra=extra)
            self._ledger.fail_permanently(key, token, reason=failure.reason, detail=failure.detail, now_s=self._now())
            return JobResult(
                job.recipe.ref,
                key,
                JobState.PERMANENT_FAILURE,
                reused=False,
                reason=failure.reason,
                detail=failure.detail,
                seconds=time.monotonic() - started,
            )
        except (Superseded, JobBusy):
            raise
        except (DeadlineReached, DeliveryLost) as exc:
            if keeper.problem is exc:  # the heartbeat already gave the claim back
                raise
            self._release(key, token, exc, extra)
            raise
        except TransientFailure as exc:
            self._release(key, token, exc, extra)
            raise
        except Exception as exc:
            self._release(key, token, exc, extra)
            raise TransientFailure(f"{type(exc).__name__}: {exc}") from exc
        seconds = time.monotonic() - started
        log.info("processing committed in %.3f s", seconds, extra=extra)
        return JobResult(
            job.recipe.ref,
            key,
            JobState.DONE,
            reused=False,
            manifest_key=commit.manifest_key,
            outputs=tuple(outputs),
            seconds=seconds,
            decisions=decisions,
        )

    # ------------------------------------------------------------------ steps

    def _progress_sink(
        self, key: str, ref: ObjectRef, asset: KeptAsset
    ) -> Callable[[tuple[str, ...], float, float], None]:
        """Passes progress to the observer and the asset (at most every
        :data:`~mediajobs.service_layer.assets.PROGRESS_EVERY_S`), and logs it at most every
        :data:`PROGRESS_LOG_EVERY_S`."""
        last_logged = [self._clock()]
        to_asset = asset.progress_sink(key)

        def sink(names: tuple[str, ...], done_s: float, total_s: float) -> None:
            self.observer.progress(key, names, done_s, total_s)
            to_asset(done_s, total_s)
            now = self._clock()
            if now - last_logged[0] >= PROGRESS_LOG_EVERY_S:
                last_logged[0] = now
                log.info(
                    "rendering %s: %.0f%% (%.1f of %.1f s)",
                    "+".join(names),
                    100 * done_s / total_s if total_s else 100.0,
                    done_s,
                    total_s,
                    extra={"job_key": key, "source_key": ref.key},
                )

        return sink

    # ------------------------------------------------------------------ limits and refusals

    def _now(self) -> int:
        return int(self._clock())

    def _lease_until(self, delivery: Delivery | None) -> int:
        return lease_until(self._clock(), self.settings.lease_s, delivery)

    def _ensure_time(self, delivery: Delivery | None, needed_s: float) -> None:
        """Refuse to start work that cannot end before the invocation does."""
        if delivery is None:
            return
        remaining = delivery.remaining_s()
        if remaining < needed_s + self.settings.deadline_margin_s:
            raise DeadlineReached(f"{remaining:.1f} s left, a job needs {needed_s + self.settings.deadline_margin_s} s")

    def _check_size(
        self, ref: ObjectRef, size: int, *, announced: bool = False, sha256: str | None = None, bytes_read: int = 0
    ) -> None:
        """Refuse an original of 0 bytes or over ``max_input_bytes`` (``announced``: the
        event's size, not reported as the original's).

        Raises
        ------
        _Refused
            ``empty_file`` or ``too_large``.
        """
        facts: dict[str, Any] = {"sha256": sha256, "size_bytes": None if announced else size, "bytes_read": bytes_read}
        if size == 0:
            raise self._refusal(ref, EMPTY_FILE, "the object has 0 bytes", **facts)
        if size > self.settings.max_input_bytes:
            raise self._refusal(ref, TOO_LARGE, f"{size} bytes > {self.settings.max_input_bytes}", **facts)

    def _ensure_space(self, original: Identified, plan: Plan | None) -> None:
        """Refuse an original larger than the work folder's whole disk (Lambda's ``/tmp``,
        ``EphemeralStorage``): its download would fail on every try.

        Raises
        ------
        _Refused
            ``too_large``.
        TransientFailure
            When it fits the disk but not its free space now.
        """
        size, work_dir = original.head.size_bytes, self.settings.work_dir
        disk = self._disk_usage(work_dir)
        if size > disk.total:
            raise self._refusal(
                original.ref,
                TOO_LARGE,
                f"{size} bytes > the {disk.total} bytes of the disk of {work_dir}",
                sha256=original.sha256,
                size_bytes=size,
                media=plan.media if plan is not None else None,
            )
        if size > disk.free:
            raise TransientFailure(f"{size} bytes > {disk.free} bytes free in {work_dir} now")

    @staticmethod
    def _refusal(
        ref: ObjectRef,
        reason: str,
        detail: str,
        *,
        sha256: str | None = None,
        size_bytes: int | None = None,
        media: str | None = None,
        bytes_read: int = 0,
    ) -> _Refused:
        """A permanent failure found before any job exists (nothing to record in the ledger)."""
        log.warning("permanent failure before any job: %s (%s)", reason, detail, extra={"source_key": ref.key})
        return _Refused(
            SourceResult(
                ref,
                SourceState.PERMANENT_FAILURE,
                media=media,
                sha256=sha256,
                size_bytes=size_bytes,
                reason=reason,
                detail=detail,
                bytes_read=bytes_read,
            )
        )


def _needs_original(claim: Claim) -> bool:
    """Whether running ``claim`` reads the original: held, with no staged manifest to adopt."""
    return claim.outcome is ClaimOutcome.RUN and claim.staged_manifest is None


def _original_needed() -> _Committed:
    """The work of a held job whose original was not read (a claim that was to adopt a
    staged manifest found none): the claim is given back and the message redelivered."""
    raise TransientFailure("the original was not read: only a staged manifest commits without it")
