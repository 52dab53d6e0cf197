"""The use case: what happens to one original, in order.

For each event's object under ``originals/``:

1. Refuse what is certainly bad before reading it (0 bytes, over the size limit).
2. Stream it to a fresh work folder while hashing it (SHA-256).
3. Detect the media type from the bytes; pick the recipes for that type.
4. Per recipe: derive the job key, claim it in the ledger (one conditional write), and
   only when this worker holds the claim, render, write each derivative with
   ``If-None-Match: *``, write ``manifest.json`` last (the commit marker), then mark the
   job done -- conditional on still holding the claim.
5. Remove the work folder, whatever happened.

The caller (the Lambda handler) acknowledges the SQS message only after this returns:
nothing is acknowledged before its commit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from mediajobs.domain.errors import (
    EMPTY_FILE,
    TOO_LARGE,
    UNSUPPORTED_FORMAT,
    JobBusy,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    Downloaded,
    JobResult,
    JobSpec,
    JobState,
    ObjectRef,
    OutputRecord,
    RenderedFile,
    SourceResult,
)
from mediajobs.domain.keys import job_key
from mediajobs.domain.manifest import MANIFEST_NAME, RenderDecisions, build_manifest, derivative_prefix
from mediajobs.domain.recipes import ImageVariant, Recipe
from mediajobs.settings import Settings

log = logging.getLogger(__name__)


class ObjectStore(Protocol):
    """What the pipeline needs of S3 (see :class:`mediajobs.adapters.s3.S3Store`)."""

    def download(self, ref: ObjectRef, dest: Path) -> Downloaded: ...
    def put_file_if_absent(self, bucket: str, key: str, path: Path, *, content_type: str) -> bool: ...
    def put_if_absent(self, bucket: str, key: str, body: bytes, *, content_type: str) -> bool: ...
    def existing_digest(self, bucket: str, key: str) -> tuple[str | None, int]: ...
    def read_bytes(self, bucket: str, key: str) -> bytes: ...


class Ledger(Protocol):
    """What the pipeline needs of the job ledger (see :class:`mediajobs.adapters.ledger.DynamoLedger`)."""

    def claim(self, spec: JobSpec, *, now_s: int) -> Claim: ...
    def complete(
        self, job_key: str, token: str, *, manifest_key: str, outputs: list[OutputRecord], now_s: int
    ) -> None: ...
    def fail_permanently(self, job_key: str, token: str, *, reason: str, detail: str, now_s: int) -> None: ...
    def release_transient(self, job_key: str, token: str, *, detail: str, now_s: int) -> None: ...


class ImageRenderer(Protocol):
    """What the pipeline needs of an image renderer (see :class:`mediajobs.adapters.imaging.PillowRenderer`)."""

    def render(
        self, source: Path, variants: tuple[ImageVariant, ...], out_dir: Path
    ) -> tuple[list[RenderedFile], RenderDecisions]: ...


class PipelineObserver:
    """Hooks for callers that want to watch the pipeline (the CLI, tests). No-ops by default."""

    def render_started(self, job_key: str, source: ObjectRef) -> None:
        """Called when this worker starts rendering a job it holds the claim of."""

    def source_finished(self, result: SourceResult) -> None:
        """Called with each original's result (not for busy or transient outcomes, which raise)."""


def _utc_iso(now_s: float) -> str:
    return datetime.fromtimestamp(now_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Pipeline:
    """Processes originals named by S3 events.

    Parameters
    ----------
    settings: limits, prefixes and policy version.
    store, ledger, renderer: adapters (real or fakes).
    recipes: the recipes to apply, by media type (``{"image": [web-image@1]}``).
    detect_media: returns ``"image"``, ``"video"`` or ``None`` for a local file.
    clock: returns Unix time in seconds.
    observer: optional hooks.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ObjectStore,
        ledger: Ledger,
        renderer: ImageRenderer,
        recipes: dict[str, list[Recipe]],
        detect_media: Callable[[Path], str | None],
        clock: Callable[[], float] = time.time,
        observer: PipelineObserver | None = None,
    ) -> None:
        self.settings = settings
        self._store = store
        self._ledger = ledger
        self._renderer = renderer
        self._recipes = recipes
        self._detect_media = detect_media
        self._clock = clock
        self.observer = observer or PipelineObserver()

    def process(self, ref: ObjectRef) -> SourceResult:
        """Process one original.

        Returns
        -------
        SourceResult
            ``done``, ``permanent_failure`` (with its reason) or ``ignored``.

        Raises
        ------
        JobBusy
            Another worker holds a job of this original: redeliver later.
        TransientFailure
            Something that may pass failed: redeliver.
        Superseded
            This worker's claim was taken over while it worked.
        """
        if not ref.key.startswith(self.settings.originals_prefix):
            log.info("ignoring key outside %s", self.settings.originals_prefix, extra={"source_key": ref.key})
            return SourceResult(ref, "ignored")
        result = self._process(ref)
        self.observer.source_finished(result)
        return result

    def _refuse(
        self,
        ref: ObjectRef,
        reason: str,
        detail: str,
        *,
        sha256: str | None = None,
        size_bytes: int | None = None,
        media: str | None = None,
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
        )

    def _process(self, ref: ObjectRef) -> SourceResult:
        limit = self.settings.max_input_bytes
        if ref.size_bytes == 0:
            return self._refuse(ref, EMPTY_FILE, "the object has 0 bytes")
        if ref.size_bytes is not None and ref.size_bytes > limit:
            return self._refuse(ref, TOO_LARGE, f"{ref.size_bytes} bytes > {limit}")
        work_dir = Path(tempfile.mkdtemp(prefix="mediajobs-", dir=self.settings.work_dir))
        try:
            original = work_dir / "original"
            try:
                downloaded = self._store.download(ref, original)
            except PermanentFailure as failure:
                return self._refuse(ref, failure.reason, failure.detail)
            sha256, size = downloaded.sha256, downloaded.size_bytes
            if ref.version_id is None and downloaded.version_id:
                ref = dataclasses.replace(ref, version_id=downloaded.version_id)
            if size == 0:
                return self._refuse(ref, EMPTY_FILE, "the object has 0 bytes", sha256=sha256, size_bytes=0)
            if size > limit:
                return self._refuse(ref, TOO_LARGE, f"{size} bytes > {limit}", sha256=sha256, size_bytes=size)
            media = self._detect_media(original)
            recipes = self._recipes.get(media or "", [])
            if not recipes:
                return self._refuse(
                    ref,
                    UNSUPPORTED_FORMAT,
                    f"no recipe for this content ({media or 'unknown type'})",
                    sha256=sha256,
                    size_bytes=size,
                    media=media,
                )
            result = SourceResult(ref, JobState.DONE.value, media=media, sha256=sha256, size_bytes=size)
            for recipe in recipes:
                result.jobs.append(self._run_job(ref, original, sha256, size, recipe, work_dir))
            failed = [j for j in result.jobs if j.state != JobState.DONE.value]
            if failed:
                result.state = JobState.PERMANENT_FAILURE.value
                result.reason, result.detail = failed[0].reason, failed[0].detail
            return result
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)

    def _run_job(
        self, ref: ObjectRef, original: Path, sha256: str, size: int, recipe: Recipe, work_dir: Path
    ) -> JobResult:
        settings = self.settings
        key = job_key(sha256, recipe.sha256, settings.policy_version)
        prefix = derivative_prefix(settings.derivatives_prefix, key)
        extra = {"job_key": key, "source_key": ref.key, "recipe": recipe.ref}
        spec = JobSpec(
            job_key=key,
            input_sha256=sha256,
            recipe_id=recipe.id,
            recipe_version=recipe.version,
            recipe_sha256=recipe.sha256,
            policy_version=settings.policy_version,
            output_prefix=prefix,
            source_bucket=ref.bucket,
            source_key=ref.key,
        )
        claim = self._ledger.claim(spec, now_s=int(self._clock()))
        if claim.outcome is ClaimOutcome.DONE:
            log.info("job already done: reusing its outputs", extra=extra)
            return JobResult(
                recipe.ref,
                key,
                JobState.DONE.value,
                reused=True,
                manifest_key=claim.manifest_key,
                outputs=claim.outputs,
            )
        if claim.outcome is ClaimOutcome.FAILED:
            log.info("job already failed permanently: %s", claim.failure_reason, extra=extra)
            return JobResult(
                recipe.ref, key, JobState.PERMANENT_FAILURE.value, reused=True, reason=claim.failure_reason
            )
        if claim.outcome is ClaimOutcome.BUSY:
            log.info("job is running elsewhere", extra=extra)
            raise JobBusy(key, claim.lease_expires_at_s)
        assert claim.lease_token is not None
        return self._render_and_commit(ref, original, size, recipe, spec, claim.lease_token, work_dir)

    def _render_and_commit(
        self, ref: ObjectRef, original: Path, size: int, recipe: Recipe, spec: JobSpec, token: str, work_dir: Path
    ) -> JobResult:
        key, prefix = spec.job_key, spec.output_prefix
        extra = {"job_key": key, "source_key": ref.key, "recipe": recipe.ref}
        started = time.monotonic()
        log.info("processing started", extra=extra)
        self.observer.render_started(key, ref)
        out_dir = work_dir / key
        out_dir.mkdir()
        try:
            files, decisions = self._renderer.render(original, recipe.params.variants, out_dir)
            outputs = [self._store_output(ref.bucket, prefix, f) for f in files]
            manifest_key = prefix + MANIFEST_NAME
            manifest = build_manifest(
                job_key=key,
                source=ref,
                input_sha256=spec.input_sha256,
                input_bytes=size,
                recipe_id=spec.recipe_id,
                recipe_version=spec.recipe_version,
                recipe_sha256=spec.recipe_sha256,
                policy_version=spec.policy_version,
                outputs=outputs,
                decisions=decisions,
                created_at=_utc_iso(self._clock()),
            )
            body = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")
            if not self._store.put_if_absent(ref.bucket, manifest_key, body, content_type="application/json"):
                # An earlier worker committed the manifest and died before marking the job
                # done: its manifest is the truth about what is stored.
                stored = json.loads(self._store.read_bytes(ref.bucket, manifest_key))
                outputs = [OutputRecord.from_json(o) for o in stored["outputs"]]
            self._ledger.complete(key, token, manifest_key=manifest_key, outputs=outputs, now_s=int(self._clock()))
        except PermanentFailure as failure:
            log.warning("permanent failure: %s (%s)", failure.reason, failure.detail, extra=extra)
            self._ledger.fail_permanently(
                key, token, reason=failure.reason, detail=failure.detail, now_s=int(self._clock())
            )
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
        except Exception as exc:
            log.warning("transient failure: %r", exc, extra=extra)
            try:
                self._ledger.release_transient(key, token, detail=repr(exc), now_s=int(self._clock()))
            except (Superseded, TransientFailure) as release_error:
                log.warning("could not release the claim: %r", release_error, extra=extra)
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

    def _store_output(self, bucket: str, prefix: str, rendered: RenderedFile) -> OutputRecord:
        key = prefix + rendered.path.name
        sha, size = rendered.sha256, rendered.bytes
        if not self._store.put_file_if_absent(bucket, key, rendered.path, content_type=rendered.content_type):
            stored_sha, stored_size = self._store.existing_digest(bucket, key)
            sha, size = stored_sha or sha, stored_size
        return OutputRecord(
            name=rendered.name,
            key=key,
            format=rendered.format,
            width=rendered.width,
            height=rendered.height,
            bytes=size,
            sha256=sha,
            content_type=rendered.content_type,
        )
