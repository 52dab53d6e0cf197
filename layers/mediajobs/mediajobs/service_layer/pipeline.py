"""The use case: what happens to one original, in order.

For each event's object under ``originals/``:

1. Refuse what is certainly bad before reading it (0 bytes, over the size limit), from
   the event and then from ``HeadObject``.
2. Learn the content's SHA-256 without reading it when possible: from the object's
   full-object SHA-256 checksum, or from the source index (remembered the first time
   this source version was hashed). Then read every job of the content in one
   ``BatchGetItem``: when all are done (or failed), the duplicate is answered from the
   ledger -- at most 2 DynamoDB requests and 0 bytes read from S3.
3. Otherwise mark the source as being read (duplicates meanwhile come back later),
   stream it to a fresh work folder while hashing it, detect the media type from the
   bytes, and remember hash and type in the source index.
4. Per recipe: derive the job key, claim it (one conditional write), and only when this
   worker holds the claim -- with a heartbeat renewing the lease and the message's
   visibility -- render, register what will be written in the job's row, write each
   derivative with ``If-None-Match: *`` (a 412 is identified by the listing's ETag among
   the registered candidates: derivatives are never read back), stage the manifest in
   the row, write ``manifest.json`` last (the commit marker), then mark the job done,
   conditional on still holding the claim. A takeover that finds a staged manifest
   writes it and marks the job done, without the original. Before every write the
   heartbeat's findings are checked: a superseded worker stops; one whose invocation is
   ending has already released the claim.
5. Remove the work folder, whatever happened.

The caller (the Lambda handler) acknowledges the SQS message only after this returns:
nothing is acknowledged before its commit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from mediajobs.domain.errors import (
    EMPTY_FILE,
    OUTPUT_CONFLICT,
    SOURCE_MISSING,
    TOO_LARGE,
    UNSUPPORTED_FORMAT,
    DeadlineReached,
    DeliveryLost,
    JobBusy,
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
    OutputCandidate,
    OutputRecord,
    RenderContext,
    RenderedFile,
    SourceResult,
    decide,
    identify_stored,
    standing_claim,
)
from mediajobs.domain.keys import content_id, job_key, source_version_id
from mediajobs.domain.manifest import MANIFEST_NAME, build_manifest, derivative_prefix
from mediajobs.domain.recipes import Recipe
from mediajobs.service_layer.lease import LeaseKeeper, lease_until
from mediajobs.service_layer.ports import Ledger, ObjectStore, Queue, Sources, Step, StepResult
from mediajobs.settings import Settings

log = logging.getLogger(__name__)


#: Progress of a long render is logged at most this often, seconds (Lambda's logs are the
#: only progress bar there).
PROGRESS_LOG_EVERY_S = 10.0


class PipelineObserver:
    """Hooks for callers that want to watch the pipeline (the CLI, tests). No-ops by default."""

    def claimed(self, claim: Claim, source: ObjectRef) -> None:
        """Called when this worker holds a job's claim (``claim.took_over`` for takeovers)."""

    def render_started(self, job_key: str, source: ObjectRef) -> None:
        """Called when this worker starts rendering a job it holds the claim of."""

    def step(self, point: str, job_key: str) -> None:
        """Called at each step boundary of a claimed job, after the step is durable:
        ``claimed``, ``output_stored`` (after each derivative), ``manifest_stored``,
        ``done``. Crash injection hooks here (``mediajobs simulate``, crash-point tests)."""

    def source_finished(self, result: SourceResult) -> None:
        """Called with each original's result (not for busy or transient outcomes, which raise)."""

    def progress(self, job_key: str, names: tuple[str, ...], done_s: float, total_s: float) -> None:
        """Called as a video job's outputs ``names`` grow: ``done_s`` of ``total_s`` seconds written."""


@dataclasses.dataclass(frozen=True)
class _Work:
    """One delivery's original, read into its work folder."""

    ref: ObjectRef
    original: Path
    size_bytes: int
    delivery: Delivery | None
    folder: Path


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


def _utc_iso(now_s: float) -> str:
    return datetime.fromtimestamp(now_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    ) -> None:
        self.settings = settings
        self._store = store
        self._ledger = ledger
        self._sources = sources
        self._steps = steps
        self._recipes = recipes
        self._detect_media = detect_media
        self.queue = queue
        self._clock = clock
        self.observer = observer or PipelineObserver()
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
            ``done``, ``permanent_failure`` (with its reason) or ``ignored``.

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
            return SourceResult(ref, "ignored")
        try:
            result = self._process(ref, delivery)
        except PermanentFailure as failure:
            # Raised outside a job's own handling: the ledger or the source index refused a
            # value derived from this input (``unstorable_input``). Retrying cannot help.
            result = self._refuse(ref, failure.reason, failure.detail)
        self.observer.source_finished(result)
        return result

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

    def _refuse(
        self,
        ref: ObjectRef,
        reason: str,
        detail: str,
        *,
        sha256: str | None = None,
        size_bytes: int | None = None,
        media: str | None = None,
        bytes_read: int = 0,
    ) -> SourceResult:
        """A permanent failure found before any job exists (nothing to record in the ledger)."""
        log.warning("permanent failure before any job: %s (%s)", reason, detail, extra={"source_key": ref.key})
        return SourceResult(
            ref,
            JobState.PERMANENT_FAILURE.value,
            media=media,
            sha256=sha256,
            size_bytes=size_bytes,
            reason=reason,
            detail=detail,
            bytes_read=bytes_read,
        )

    def _size_problem(self, size: int) -> tuple[str, str] | None:
        if size == 0:
            return EMPTY_FILE, "the object has 0 bytes"
        if size > self.settings.max_input_bytes:
            return TOO_LARGE, f"{size} bytes > {self.settings.max_input_bytes}"
        return None

    def _space_problem(self, size: int) -> tuple[str, str] | None:
        """``too_large`` when the original is larger than the work folder's whole disk (Lambda's
        ``/tmp``, ``EphemeralStorage``): its download would fail on every try.

        Raises
        ------
        TransientFailure
            When it fits the disk but not its free space now.
        """
        disk = shutil.disk_usage(self.settings.work_dir)
        if size > disk.total:
            return TOO_LARGE, f"{size} bytes > the {disk.total} bytes of the disk of {self.settings.work_dir}"
        if size > disk.free:
            raise TransientFailure(f"{size} bytes > {disk.free} bytes free in {self.settings.work_dir} now")
        return None

    def _specs(self, ref: ObjectRef, sha256: str, media: str | None) -> list[tuple[Recipe, JobSpec]]:
        """The jobs of a content: for ``media``'s recipes, or every media type's when unknown."""
        settings = self.settings
        medias = [media] if media else list(self._recipes)
        specs = []
        for m in medias:
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
                specs.append((recipe, spec))
        return specs

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

    def _process(self, ref: ObjectRef, delivery: Delivery | None) -> SourceResult:
        if ref.size_bytes is not None and (problem := self._size_problem(ref.size_bytes)):
            return self._refuse(ref, *problem)
        self._ensure_time(delivery, 0)
        try:
            ref, head = self._head(ref)
        except PermanentFailure as failure:
            return self._refuse(ref, failure.reason, failure.detail)
        if ref.version_id is None and head.version_id:
            ref = dataclasses.replace(ref, version_id=head.version_id)
        if problem := self._size_problem(head.size_bytes):
            return self._refuse(ref, *problem, size_bytes=head.size_bytes)
        source_id = source_version_id(
            ref.bucket, ref.key, version_id=head.version_id, etag=head.etag, size_bytes=head.size_bytes
        )

        # What is known without reading a byte: the checksum, else the source index.
        sha256, media = head.sha256, None
        if sha256 is None and source_id is not None:
            entry = self._sources.lookup(source_id, now_s=self._now())
            if isinstance(entry, KnownSource):
                sha256, media = entry.sha256, entry.media
            elif entry is not None:  # another delivery is reading it right now
                raise JobBusy(source_id, getattr(entry, "lease_expires_at_s", self._now()))
        views: dict[str, JobView] = {}
        pre_claimed: list[Claim] = []
        if sha256 is not None:
            if media == "":
                return self._refuse(ref, UNSUPPORTED_FORMAT, "no recipe for this content (remembered)", sha256=sha256)
            views = self._ledger.find([spec.job_key for _, spec in self._specs(ref, sha256, media)])
            media = media or next((self._media_of_recipe.get(v.recipe_id) for v in views.values()), None)
            if media is not None:
                settled = self._settle_without_bytes(ref, sha256, head.size_bytes, media, views, delivery)
                if settled is not None:
                    return settled
                # Some job needs work: claim before reading, so a delivery that loses the
                # claim (another took it over first) reads nothing.
                if problem := self._space_problem(head.size_bytes):
                    return self._refuse(ref, *problem, sha256=sha256, size_bytes=head.size_bytes, media=media)
                known_specs = self._specs(ref, sha256, media)
                pre_claimed = self._claim_all(known_specs, views, delivery)
                if not any(c.outcome is ClaimOutcome.RUN and c.staged_manifest is None for c in pre_claimed):
                    # Nothing to render: jobs settled elsewhere, or staged manifests to commit.
                    result = SourceResult(
                        ref, JobState.DONE.value, media=media, sha256=sha256, size_bytes=head.size_bytes
                    )
                    for (recipe, spec), claim in zip(known_specs, pre_claimed, strict=True):
                        result.jobs.append(self._run_job(ref, delivery, None, recipe, spec, claim))
                    return self._summarise(result)

        # The bytes are needed: mark the source as being read, so duplicates wait.
        if not pre_claimed and (problem := self._space_problem(head.size_bytes)):
            return self._refuse(ref, *problem, sha256=sha256, size_bytes=head.size_bytes)
        marker = None
        if media is None:
            marker = content_id(sha256) if sha256 is not None else source_id
        token = uuid.uuid4().hex
        if marker is not None:
            found = self._sources.begin_reading(
                marker, token, now_s=self._now(), lease_until_s=self._lease_until(delivery)
            )
            if isinstance(found, KnownSource) and found.media == "":
                return self._refuse(ref, UNSUPPORTED_FORMAT, "no recipe for this content (remembered)", sha256=sha256)
            if found is not None and not isinstance(found, KnownSource):
                raise JobBusy(marker, getattr(found, "lease_expires_at_s", self._now()))
            if isinstance(found, KnownSource):
                # Another delivery read it meanwhile and claims its jobs right after
                # remembering it: look again before reading the same bytes.
                marker = None
                sha256, media = found.sha256, found.media
                views = self._ledger.find([spec.job_key for _, spec in self._specs(ref, sha256, media)])
                settled = self._settle_without_bytes(ref, sha256, head.size_bytes, media or "", views, delivery)
                if settled is not None:
                    return settled
        work_dir = Path(tempfile.mkdtemp(prefix=WORK_FOLDER_PREFIX, dir=self.settings.work_dir))
        (work_dir / WORK_FOLDER_MARKER).touch()
        remembered = False
        ids: list[str] = []
        try:
            original = work_dir / "original"
            try:
                downloaded = self._store.download(ref, original, etag=head.etag)
            except PermanentFailure as failure:
                # The job belongs to the content, not to this object: another copy may
                # still come. Give the claims back instead of failing the jobs.
                self._release_all(pre_claimed, failure)
                return self._refuse(ref, failure.reason, failure.detail)
            size = downloaded.size_bytes
            if sha256 is not None and downloaded.sha256 != sha256:
                log.warning(
                    "the bytes read do not match the known SHA-256; using the bytes",
                    extra={"source_key": ref.key, "known": sha256, "read": downloaded.sha256},
                )
                self._release_all(pre_claimed, TransientFailure("content changed"))  # claims on the wrong jobs
                views, media, pre_claimed = {}, None, []
            sha256 = downloaded.sha256
            if problem := self._size_problem(size):
                return self._refuse(ref, *problem, sha256=sha256, size_bytes=size, bytes_read=size)
            media = media or self._detect_media(original, ref.key)
            # Remember the hash under the ids it is true for: this source version, and the
            # content the bytes read are (a marker named after another hash is dropped).
            ids = [i for i in (source_id, content_id(sha256) if head.sha256 else None) if i]
            known = KnownSource(sha256, size, media or "")
            specs = self._specs(ref, sha256, media) if media in self._recipes else []
            if not specs:
                self._sources.remember(ids, known, now_s=self._now())
                remembered = True
                return self._refuse(
                    ref,
                    UNSUPPORTED_FORMAT,
                    f"no recipe for this content ({media or 'unknown type'})",
                    sha256=sha256,
                    size_bytes=size,
                    media=media,
                    bytes_read=size,
                )
            result = SourceResult(
                ref, JobState.DONE.value, media=media, sha256=sha256, size_bytes=size, bytes_read=size
            )
            # Claim every job before telling duplicates what the content is: one that learns
            # it from the index then finds the jobs claimed, and waits instead of reading.
            claims = pre_claimed or self._claim_all(specs, views, delivery)
            self._sources.remember(ids, known, now_s=self._now())
            remembered = True
            work = _Work(ref, original, size, delivery, work_dir)
            for (recipe, spec), claim in zip(specs, claims, strict=True):
                result.jobs.append(self._run_job(ref, delivery, work, recipe, spec, claim))
            return self._summarise(result)
        finally:
            if marker is not None and not (remembered and marker in ids):
                self._sources.abandon(marker, token)
            shutil.rmtree(work_dir, ignore_errors=True)

    def _release_all(self, claims: list[Claim], why: Exception) -> None:
        """Give back every claim this delivery holds (the next delivery takes them over)."""
        for claim in claims:
            if claim.outcome is ClaimOutcome.RUN and claim.lease_token:
                self._release(claim.job_key, claim.lease_token, why, {"job_key": claim.job_key})

    def _claim_all(
        self, specs: list[tuple[Recipe, JobSpec]], views: dict[str, JobView], delivery: Delivery | None
    ) -> list[Claim]:
        """Claim every job of a content (none is started without time for all of them).

        When one claim fails, the claims made before it are given back first, so none waits
        for its lease to end.
        """
        self._ensure_time(delivery, self.settings.image_job_s * len(specs))
        now, until = self._now(), self._lease_until(delivery)
        claims: list[Claim] = []
        try:
            for _, spec in specs:
                claims.append(self._ledger.claim(spec, now_s=now, lease_until_s=until, seen=views.get(spec.job_key)))
        except (PermanentFailure, TransientFailure) as exc:
            self._release_all(claims, exc)
            raise
        return claims

    @staticmethod
    def _summarise(result: SourceResult) -> SourceResult:
        failed = [j for j in result.jobs if j.state != JobState.DONE.value]
        if failed:
            result.state = JobState.PERMANENT_FAILURE.value
            result.reason, result.detail = failed[0].reason, failed[0].detail
        return result

    def _settle_without_bytes(
        self, ref: ObjectRef, sha256: str, size: int, media: str, views: dict[str, JobView], delivery: Delivery | None
    ) -> SourceResult | None:
        """Answer a duplicate from the ledger alone, when none of its jobs needs the bytes.

        Returns ``None`` when some job must run (missing, or can be taken over).

        Raises
        ------
        JobBusy
            When a job is running elsewhere (the earliest lease end is reported).
        """
        specs = self._specs(ref, sha256, media)
        now = self._now()
        decisions = {}
        for _, spec in specs:
            view = views.get(spec.job_key)
            if view is None:
                return None
            decisions[spec.job_key] = decide(view, now_s=now, max_attempts=self.settings.max_attempts)
        if any(d is Decision.TAKE_OVER for d in decisions.values()):
            return None
        busy = [views[k] for k, d in decisions.items() if d is Decision.BUSY]
        if busy:
            first = min(busy, key=lambda v: v.lease_expires_at_s)
            log.info("job is running elsewhere", extra={"job_key": first.job_key, "source_key": ref.key})
            raise JobBusy(first.job_key, first.lease_expires_at_s)
        result = SourceResult(ref, JobState.DONE.value, media=media, sha256=sha256, size_bytes=size)
        for recipe, spec in specs:
            view = views[spec.job_key]
            if decisions[spec.job_key] is Decision.EXHAUST:  # one conditional write ends it ...
                claim = self._ledger.claim(spec, now_s=now, lease_until_s=self._lease_until(delivery), seen=view)
            else:
                claim = standing_claim(view)
            # ... unless the holder staged its manifest meanwhile: then the claim runs, to commit it.
            result.jobs.append(self._run_job(ref, delivery, None, recipe, spec, claim))
        return self._summarise(result)

    def _settled(self, recipe: Recipe, claim: Claim) -> JobResult:
        """The result of a job this delivery found finished (or just ended exhausted)."""
        extra = {"job_key": claim.job_key, "recipe": recipe.ref}
        if claim.outcome is ClaimOutcome.DONE:
            log.info("job already done: reusing its outputs", extra=extra)
            return JobResult(
                recipe.ref,
                claim.job_key,
                JobState.DONE.value,
                reused=True,
                manifest_key=claim.manifest_key,
                outputs=claim.outputs,
            )
        if claim.outcome is ClaimOutcome.FAILED:
            log.info("job failed permanently: %s", claim.failure_reason, extra=extra)
            return JobResult(
                recipe.ref,
                claim.job_key,
                JobState.PERMANENT_FAILURE.value,
                reused=not claim.failed_now,
                reason=claim.failure_reason,
                detail=claim.failure_detail or "",
            )
        log.info("job is running elsewhere", extra=extra)
        raise JobBusy(claim.job_key, claim.lease_expires_at_s)

    def _run_job(
        self, ref: ObjectRef, delivery: Delivery | None, work: _Work | None, recipe: Recipe, spec: JobSpec, claim: Claim
    ) -> JobResult:
        """Render and commit a job this delivery claimed, or report what the claim found.

        ``work`` (the original, read) may be ``None`` only for a claim that carries a staged
        manifest: committing it needs no byte of the original.
        """
        if claim.outcome is not ClaimOutcome.RUN:
            return self._settled(recipe, claim)
        assert claim.lease_token is not None
        self.observer.claimed(claim, ref)
        keeper = LeaseKeeper(
            ledger=self._ledger,
            queue=self.queue,
            job_key=spec.job_key,
            token=claim.lease_token,
            expires_at_s=claim.lease_expires_at_s,
            delivery=delivery,
            lease_s=self.settings.lease_s,
            margin_s=self.settings.deadline_margin_s,
            clock=self._clock,
        )
        return self._render_and_commit(ref, work, recipe, spec, claim.lease_token, keeper, staged=claim.staged_manifest)

    def _render_and_commit(
        self,
        ref: ObjectRef,
        work: _Work | None,
        recipe: Recipe,
        spec: JobSpec,
        token: str,
        keeper: LeaseKeeper,
        *,
        staged: str | None,
    ) -> JobResult:
        key, prefix = spec.job_key, spec.output_prefix
        extra = {"job_key": key, "source_key": ref.key, "recipe": recipe.ref}
        started = time.monotonic()
        try:
            self.observer.step("claimed", key)
            with keeper:
                manifest_key = prefix + MANIFEST_NAME
                if staged is not None:
                    # A lost holder stored every output and staged the manifest: write
                    # that body (it may be there already) instead of rendering again.
                    log.info("adopting the manifest a lost holder staged", extra=extra)
                    outputs = self._commit_manifest(ref.bucket, manifest_key, staged)
                else:
                    assert work is not None, "only a staged manifest commits without the original"
                    outputs = self._write_set(work, recipe, spec, token, keeper, extra)
                with keeper.last_write():  # the heartbeat neither renews nor releases meanwhile
                    self._ledger.complete(key, token, manifest_key=manifest_key, outputs=outputs, now_s=self._now())
            self.observer.step("done", key)
        except PermanentFailure as failure:
            log.warning("permanent failure: %s (%s)", failure.reason, failure.detail, extra=extra)
            self._ledger.fail_permanently(key, token, reason=failure.reason, detail=failure.detail, now_s=self._now())
            return JobResult(
                recipe.ref,
                key,
                JobState.PERMANENT_FAILURE.value,
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
        except Exception as exc:
            self._release(key, token, exc, extra)
            if isinstance(exc, TransientFailure):
                raise
            raise TransientFailure(f"{type(exc).__name__}: {exc}") from exc
        seconds = time.monotonic() - started
        log.info("processing committed in %.3f s", seconds, extra=extra)
        return JobResult(
            recipe.ref,
            key,
            JobState.DONE.value,
            reused=False,
            manifest_key=manifest_key,
            outputs=tuple(outputs),
            seconds=seconds,
        )

    def _write_set(
        self, work: _Work, recipe: Recipe, spec: JobSpec, token: str, keeper: LeaseKeeper, extra: dict[str, str]
    ) -> list[OutputRecord]:
        """Render; register what will be written; write each output; stage the manifest in
        the ledger, then write it. The outputs as stored."""
        ref, key, prefix = work.ref, spec.job_key, spec.output_prefix
        log.info("processing started", extra=extra)
        self.observer.render_started(key, ref)
        out_dir = work.folder / key
        out_dir.mkdir()
        result = self._render(work, recipe, out_dir, keeper, key)
        files, decisions = result.files, result.decisions
        own = {rendered.path.name: _candidate(rendered) for rendered in files}
        keeper.check()
        registered = self._ledger.register_outputs(key, token, list(own.values()), now_s=self._now())
        listed: dict[str, str] = {}  # the prefix's ETags by key, listed at a 412
        outputs = []
        for rendered in files:
            keeper.check()
            record = _record(prefix, rendered)
            if not self._store.put_file_if_absent(
                ref.bucket, record.key, rendered.path, content_type=rendered.content_type
            ):
                record = self._stored_record(ref.bucket, prefix, record, own[rendered.path.name], registered, listed)
            outputs.append(record)
            self.observer.step("output_stored", key)
        manifest_key = prefix + MANIFEST_NAME
        manifest = build_manifest(
            job_key=key,
            source=ref,
            input_sha256=spec.input_sha256,
            input_bytes=work.size_bytes,
            recipe_id=spec.recipe_id,
            recipe_version=spec.recipe_version,
            recipe_sha256=spec.recipe_sha256,
            policy_version=spec.policy_version,
            outputs=outputs,
            decisions=decisions,
            created_at=_utc_iso(self._clock()),
        )
        body = json.dumps(manifest, indent=2, sort_keys=True)
        keeper.check()
        staged = self._ledger.stage_manifest(key, token, body, now_s=self._now())
        outputs = self._commit_manifest(ref.bucket, manifest_key, staged)
        self.observer.step("manifest_stored", key)
        return outputs

    def _commit_manifest(self, bucket: str, manifest_key: str, staged: str) -> list[OutputRecord]:
        """Write the staged manifest body (a 412 means it is there: every write of it
        carries these bytes); its outputs."""
        self._store.put_if_absent(bucket, manifest_key, staged.encode("utf-8"), content_type="application/json")
        return [OutputRecord.from_json(o) for o in json.loads(staged)["outputs"]]

    def _stored_record(
        self,
        bucket: str,
        prefix: str,
        record: OutputRecord,
        own: OutputCandidate,
        registered: frozenset[OutputCandidate],
        listed: dict[str, str],
    ) -> OutputRecord:
        """``record`` describing the bytes already stored under its key (a 412).

        ``listed`` caches the prefix's listing; it is listed again when it does not
        identify the key (a lost holder's write in flight may have landed since).

        Raises
        ------
        PermanentFailure
            ``output_conflict`` when the stored bytes are none of the registered
            candidates: written by something other than a holder of this job (a version
            before registration, a person, an SSE-KMS bucket whose ETags are no MD5).
        """
        listed_now = not listed
        if listed_now:
            listed.update(self._store.listing(bucket, prefix))
        stored = identify_stored(own, listed.get(record.key), registered)
        if stored is None and not listed_now:
            listed.clear()
            listed.update(self._store.listing(bucket, prefix))
            stored = identify_stored(own, listed.get(record.key), registered)
        if stored is None:
            raise PermanentFailure(
                OUTPUT_CONFLICT, f"{record.key} holds bytes no holder of this job wrote (ETag {listed.get(record.key)})"
            )
        return dataclasses.replace(record, bytes=stored.bytes, sha256=stored.sha256)

    def _render(self, work: _Work, recipe: Recipe, out_dir: Path, keeper: LeaseKeeper, key: str) -> StepResult:
        """Run the recipe's step on the original (a bounded step stops its child at the
        invocation's deadline: ``DeadlineReached``)."""
        delivery = work.delivery
        context = RenderContext(
            check=keeper.check,
            remaining_s=(delivery.remaining_s if delivery is not None else lambda: None),
            progress=self._progress_sink(key, work.ref),
        )
        return self._steps[recipe.step].run(work.original, recipe.params, context, out_dir)

    def _progress_sink(self, key: str, ref: ObjectRef) -> Callable[[tuple[str, ...], float, float], None]:
        """Passes progress to the observer, and logs it at most every :data:`PROGRESS_LOG_EVERY_S`."""
        last_logged = [self._clock()]

        def sink(names: tuple[str, ...], done_s: float, total_s: float) -> None:
            self.observer.progress(key, names, done_s, total_s)
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

    def _release(self, key: str, token: str, exc: Exception, extra: dict[str, str]) -> None:
        log.warning("transient failure: %r", exc, extra=extra)
        try:
            self._ledger.release_transient(key, token, detail=repr(exc), now_s=self._now())
        except (Superseded, PermanentFailure, TransientFailure) as release_error:
            log.warning("could not release the claim: %r", release_error, extra=extra)


def _record(prefix: str, rendered: RenderedFile) -> OutputRecord:
    """The manifest's record of ``rendered`` stored under ``prefix``."""
    return OutputRecord(
        name=rendered.name,
        key=prefix + rendered.path.name,
        format=rendered.format,
        width=rendered.width,
        height=rendered.height,
        bytes=rendered.bytes,
        sha256=rendered.sha256,
        content_type=rendered.content_type,
    )


def _candidate(rendered: RenderedFile) -> OutputCandidate:
    """What a holder registers before writing ``rendered`` (its MD5 read from the file)."""
    with open(rendered.path, "rb") as f:
        md5 = hashlib.file_digest(f, lambda: hashlib.md5(usedforsecurity=False)).hexdigest()
    return OutputCandidate(rendered.path.name, md5, rendered.sha256, rendered.bytes)
