"""In-memory fakes of the service layer's ports (``mediajobs.service_layer.ports``), for the
unit tests: no AWS, no Pillow, no ffmpeg.

Each fake records what it was asked in a shared ``log`` (a list of tuples such as
``("put", key)``), so a test can assert the order of operations across adapters. Faults
are injected by wrapping a fake (or a real adapter) with :class:`Wrapping`, never by
replacing methods on it.

* :class:`FakeStore` -- S3 (:class:`~mediajobs.service_layer.ports.ObjectStore`).
* :class:`FakeLedger` -- the job ledger; its claims follow :func:`mediajobs.domain.jobs.decide`
  (the one takeover rule), not a copy of it.
* :class:`FakeSources` -- the source index.
* :class:`FakeAssets` -- the asset records, references and collection candidates.
* :class:`FakeQueue` -- the SQS queue (every operation of the ``Queue`` port, recorded;
  failing on demand).
* :class:`FakeImageStep`, :class:`FakeVideoStep` -- recipe steps (the ``Step`` port) writing
  small files.
* :class:`FakeClock` -- a clock that moves only when told.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediajobs.domain.assets import (
    FAILED_PREFIX,
    AssetJobState,
    AssetState,
    AssetView,
    Candidate,
    recorded,
    reference_id,
    same_version,
)
from mediajobs.domain.errors import (
    ATTEMPTS_EXHAUSTED,
    OUTPUT_CONFLICT,
    SOURCE_MISSING,
    DeliveryLost,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    Decision,
    Delivery,
    Downloaded,
    JobState,
    JobView,
    KnownSource,
    ObjectHead,
    Reading,
    RenderedFile,
    decide,
    standing_claim,
)
from mediajobs.domain.keys import sha256_hex
from mediajobs.domain.manifest import RenderDecisions
from mediajobs.domain.notifications import Notification, notification_for
from mediajobs.domain.recipes import ImageVariantsParams, VideoRenditionsParams
from mediajobs.service_layer.ports import StepResult


class Wrapping:
    """An adapter wrapped: each call goes to ``inner``, unless ``overrides`` names the
    method (``Wrapping(store, download=broken)``); ``inner`` stays reachable as ``.inner``."""

    def __init__(self, inner: Any, **overrides: Callable[..., Any]) -> None:
        self.inner = inner
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self.inner, name)


class FakeClock:
    """Unix time in seconds that moves only by :meth:`advance` (or by setting ``now``)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeStore:
    """S3 in a dict: ``objects`` by key. ``checksums``: ``HeadObject`` reports a full-object
    SHA-256. ETags in listings are the MD5 of the bytes (a single-part SSE-S3 upload)."""

    def __init__(self, objects: dict[str, bytes], log: list, checksums: bool = False) -> None:
        self.objects = dict(objects)
        self.log = log
        self.checksums = checksums

    def head(self, ref):
        self.log.append(("head", ref.key))
        if ref.key not in self.objects:
            raise PermanentFailure(SOURCE_MISSING, f"s3://{ref.bucket}/{ref.key} is gone")
        data = self.objects[ref.key]
        return ObjectHead("v1", "etag-" + sha256_hex(data)[:8], len(data), sha256_hex(data) if self.checksums else None)

    def download(self, ref, dest: Path, *, etag=None):
        data = self.objects[ref.key]
        dest.write_bytes(data)
        self.log.append(("download", ref.key))
        return Downloaded(sha256_hex(data), len(data), "v1")

    def put_if_absent(self, bucket, key, body, *, content_type):
        data = body if isinstance(body, bytes) else body.read()
        self.log.append(("put", key))
        if key in self.objects:
            return False
        self.objects[key] = data
        return True

    def put_file_if_absent(self, bucket, key, path, *, content_type):
        return self.put_if_absent(bucket, key, Path(path).read_bytes(), content_type=content_type)

    def listing(self, bucket, prefix):
        self.log.append(("list", prefix))
        return {k: hashlib.md5(v).hexdigest() for k, v in self.objects.items() if k.startswith(prefix)}

    def delete_prefix(self, bucket, prefix, *, first=None):
        self.log.append(("delete_prefix", prefix))
        doomed = ([first] if first in self.objects else []) + sorted(
            k for k in self.objects if k.startswith(prefix) and k != first
        )
        for key in doomed:
            del self.objects[key]
        return len(doomed) + (1 if first is not None and first not in doomed else 0)


class FakeLedger:
    """The job ledger in a dict of :class:`JobView` rows. A claim on an existing row does
    what :func:`decide` says (the rule the DynamoDB ledger's conditions implement); tokens
    are ``t1``, ``t2`` ... by attempt (``t1r1``, ``t1r2`` ... for the first attempt of each
    render again after a collection). The collection's methods (``CollectionLedger``) are
    here too: a collector passes its own token."""

    def __init__(self, log: list, max_attempts: int = 4) -> None:
        self.log = log
        self.rows: dict[str, JobView] = {}
        self.max_attempts = max_attempts
        self.candidates: dict[str, set] = {}
        self.staged: dict[str, str] = {}
        self.restarts = 0

    def find(self, job_keys):
        self.log.append(("find", len(job_keys)))
        return {k: self._view(k) for k in job_keys if k in self.rows}

    def _view(self, key):
        """The row as read: with the manifest staged in it, if any."""
        return dataclasses.replace(self.rows[key], staged_manifest=self.staged.get(key))

    def claim(self, spec, *, now_s, lease_until_s, seen=None):
        key = spec.job_key
        self.log.append(("claim", key))
        row = self.rows.get(key)
        if row is None:
            self.rows[key] = JobView(
                key,
                JobState.RUNNING,
                "t1",
                lease_until_s,
                1,
                spec.recipe_id,
                source_bucket=spec.source_bucket,
                output_prefix=spec.output_prefix,
            )
            return Claim(ClaimOutcome.RUN, key, lease_token="t1", lease_expires_at_s=lease_until_s, attempts=1)
        row = self._view(key)
        decision = decide(row, now_s=now_s, max_attempts=self.max_attempts)
        if decision in (Decision.DONE, Decision.FAILED, Decision.BUSY):
            return standing_claim(row)
        if decision is Decision.EXHAUST:
            self.rows[key] = dataclasses.replace(
                row, state=JobState.PERMANENT_FAILURE, failure_reason=ATTEMPTS_EXHAUSTED, staged_manifest=None
            )
            return Claim(ClaimOutcome.FAILED, key, failure_reason=ATTEMPTS_EXHAUSTED, failed_now=True)
        if row.state in (JobState.COLLECTING, JobState.COLLECTED):
            self.restarts += 1
            token = f"t1r{self.restarts}"
            self.rows[key] = dataclasses.replace(
                row,
                state=JobState.RUNNING,
                lease_token=token,
                lease_expires_at_s=lease_until_s,
                attempts=1,
                manifest_key=None,
                outputs=(),
                decisions=None,
                collected_at_s=None,
            )
            self.staged.pop(key, None)
            self.candidates.pop(key, None)
            return Claim(
                ClaimOutcome.RUN,
                key,
                lease_token=token,
                lease_expires_at_s=lease_until_s,
                attempts=1,
                took_over=True,
                sweep=row.state == JobState.COLLECTING,
            )
        token = f"t{row.attempts + 1}"
        self.rows[key] = dataclasses.replace(
            row, state=JobState.RUNNING, lease_token=token, lease_expires_at_s=lease_until_s, attempts=row.attempts + 1
        )
        return Claim(
            ClaimOutcome.RUN,
            key,
            lease_token=token,
            lease_expires_at_s=lease_until_s,
            attempts=row.attempts + 1,
            took_over=True,
            staged_manifest=self.staged.get(key),
        )

    def _finish(self, job_key, token, **changes):
        row = self.rows[job_key]
        if row.state != JobState.RUNNING or row.lease_token != token:
            raise Superseded(job_key)
        self.rows[job_key] = dataclasses.replace(row, **changes)

    def renew(self, job_key, token, *, lease_until_s, now_s):
        row = self.rows[job_key]
        if row.state not in (JobState.RUNNING, JobState.COLLECTING) or row.lease_token != token:
            raise Superseded(job_key)
        self.rows[job_key] = dataclasses.replace(row, lease_expires_at_s=lease_until_s)

    def begin_collection(self, job_key, token, *, lease_until_s, now_s, seen=None):
        self.log.append(("begin_collection", job_key))
        row = self.rows.get(job_key)
        if seen is not None and row is not None and (row.state, row.lease_token) != (seen.state, seen.lease_token):
            return False
        startable = row is not None and (
            row.state in (JobState.DONE, JobState.TRANSIENT_FAILURE)
            or (row.state in (JobState.COLLECTING, JobState.RUNNING) and row.lease_expires_at_s <= now_s)
        )
        if startable:
            self.rows[job_key] = dataclasses.replace(
                row, state=JobState.COLLECTING, lease_token=token, lease_expires_at_s=lease_until_s
            )
        return startable

    def end_collection(self, job_key, token, *, collected, now_s):
        self.log.append(("end_collection", job_key, collected))
        row = self.rows[job_key]
        if row.state != JobState.COLLECTING or row.lease_token != token:
            raise Superseded(job_key)
        if collected:
            self.rows[job_key] = dataclasses.replace(
                row, state=JobState.COLLECTED, collected_at_s=now_s, manifest_key=None, outputs=(), decisions=None
            )
        else:
            self.rows[job_key] = dataclasses.replace(row, state=JobState.DONE)

    def mark_swept(self, job_key, *, now_s):
        self.log.append(("mark_swept", job_key))
        row = self.rows.get(job_key)
        if row is not None and row.state == JobState.PERMANENT_FAILURE:
            self.rows[job_key] = dataclasses.replace(row, collected_at_s=now_s)

    def register_outputs(self, job_key, token, candidates, *, now_s):
        self.log.append(("register", len(candidates)))
        self._finish(job_key, token)
        self.candidates.setdefault(job_key, set()).update(candidates)
        return frozenset(self.candidates[job_key])

    def stage_manifest(self, job_key, token, body, *, now_s):
        self.log.append(("stage", job_key))
        self._finish(job_key, token)
        return self.staged.setdefault(job_key, body)

    def complete(self, job_key, token, *, manifest_key, outputs, now_s, decisions=None):
        self.log.append(("complete", job_key))
        self._finish(
            job_key,
            token,
            state=JobState.DONE,
            manifest_key=manifest_key,
            outputs=tuple(outputs),
            decisions=dict(decisions or {}),
        )
        self.candidates.pop(job_key, None)
        self.staged.pop(job_key, None)

    def fail_permanently(self, job_key, token, *, reason, detail, now_s):
        self.log.append(("fail", reason))
        self._finish(job_key, token, state=JobState.PERMANENT_FAILURE, failure_reason=reason)

    def release_transient(self, job_key, token, *, detail, now_s):
        self.log.append(("release", detail))
        self._finish(job_key, token, state=JobState.TRANSIENT_FAILURE, failure_detail=detail)


class FakeSources:
    """The source index in a dict: ``rows`` holds :class:`KnownSource` or :class:`Reading`."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.rows: dict[str, KnownSource | Reading] = {}

    def lookup(self, source_id, *, now_s):
        self.log.append(("lookup", source_id))
        return self.rows.get(source_id)

    def begin_reading(self, source_id, token, *, now_s, lease_until_s):
        self.log.append(("begin_reading", source_id))
        if source_id in self.rows:
            return self.rows[source_id]
        self.rows[source_id] = Reading(lease_until_s)
        return None

    def remember(self, source_ids, known, *, now_s):
        self.log.append(("remember", tuple(source_ids)))
        for i in source_ids:
            self.rows[i] = known

    def abandon(self, source_id, token):
        self.log.append(("abandon", source_id))
        self.rows.pop(source_id, None)


class FakeQueue:
    """The ``Queue`` port in memory.

    Attributes
    ----------
    visibility: the seconds of every ``set_visibility``, in order.
    resent: ``(queue ARN, body, delay_s, handovers)`` of every copy queued.
    deleted: ``(queue ARN, receipt handle)`` of every delete.
    returned: ``(queue ARN, receipt handle, seconds)`` of every record returned.
    gone: ``set_visibility`` raises :class:`DeliveryLost` (the message is no longer ours).
    refuse_resend: ``resend`` raises :class:`TransientFailure` (SQS refused the copy).
    """

    def __init__(self, *, gone: bool = False, refuse_resend: bool = False) -> None:
        self.visibility: list[int] = []
        self.resent: list[tuple[str, str, int, int]] = []
        self.deleted: list[tuple[str, str]] = []
        self.returned: list[tuple[str, str, int]] = []
        self.gone = gone
        self.refuse_resend = refuse_resend

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        if self.gone:
            raise DeliveryLost("ReceiptHandleIsInvalid")
        self.visibility.append(seconds)

    def resend(self, queue_arn: str, body: str, delay_s: int, *, handovers: int = 0) -> None:
        if self.refuse_resend:
            raise TransientFailure("SQS SendMessage failed: throttled")
        self.resent.append((queue_arn, body, delay_s, handovers))

    def delete(self, queue_arn: str, receipt_handle: str) -> None:
        self.deleted.append((queue_arn, receipt_handle))

    def return_later(self, queue_arn: str, delays: list[tuple[str, int]]) -> None:
        self.returned.extend((queue_arn, handle, seconds) for handle, seconds in delays)


def _rendered(out_dir: Path, name: str, fmt: str, content_type: str, size_px: int) -> RenderedFile:
    path = out_dir / f"{name}.{fmt}"
    path.write_bytes(name.encode())
    return RenderedFile(
        name, fmt, path, size_px, size_px, path.stat().st_size, sha256_hex(path.read_bytes()), content_type
    )


class FakeImageStep:
    """The ``image.variants`` step: one file per variant holding the variant's name;
    ``error`` is raised instead. ``calls``: how many runs; ``contexts``: each run's context."""

    name = "image.variants"
    params_model = ImageVariantsParams

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls = 0
        self.contexts: list[Any] = []

    def run(self, source, params, context, out_dir):
        self.calls += 1
        self.contexts.append(context)
        if self.error:
            raise self.error
        files = [_rendered(out_dir, v.name, v.format, f"image/{v.format}", 10) for v in params.variants]
        return StepResult(files, RenderDecisions("JPEG", 10, 10).to_json())


class FakeVideoStep:
    """The ``video.renditions`` step: one file per rendition and a poster; reports progress
    and checks the lease like ffmpeg's runner; ``error`` is raised after the check."""

    name = "video.renditions"
    params_model = VideoRenditionsParams

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.contexts: list[Any] = []

    def run(self, source, params, context, out_dir):
        self.contexts.append(context)
        context.progress(("720p", "360p"), 1.0, 2.0)
        context.check()
        if self.error:
            raise self.error
        renditions = (("720p", "mp4", "video/mp4"), ("360p", "mp4", "video/mp4"), ("poster", "jpg", "image/jpeg"))
        files = [_rendered(out_dir, name, fmt, ctype, 2) for name, fmt, ctype in renditions]
        return StepResult(files, RenderDecisions("mov,mp4", 2, 2).to_json())


class FakeAssets:
    """The asset records in dicts, with the semantics of the ``Assets`` port (the reference
    for :class:`mediajobs.adapters.assets.DynamoAssets`; ``tests/functional/test_assets_port.py``
    runs both through the same cases).

    ``assets`` maps ``(bucket, key)`` to :class:`AssetView`; ``refs`` maps a job key to the
    set of ``(bucket, key)`` referencing it; ``candidate_rows`` maps ``(job key,
    released_by)`` to ``released_at_s``; ``outbox`` maps a notification id to the
    :class:`~mediajobs.domain.notifications.Notification` a write owed (put once, as the
    conditional put in the transaction). Every method is one atomic step, as a
    transaction is.
    """

    def __init__(self, log: list | None = None) -> None:
        self.log = log if log is not None else []
        self.assets: dict[tuple[str, str], AssetView] = {}
        self.refs: dict[str, set[tuple[str, str]]] = {}
        self.candidate_rows: dict[tuple[str, str], int] = {}
        self.outbox: dict[str, Notification] = {}

    def _store(self, old, new):
        told = notification_for(old, new)
        if told is not None:
            self.outbox.setdefault(told.id, told)
        self.assets[(new.bucket, new.key)] = new

    def get(self, bucket, key):
        return self.assets.get((bucket, key))

    def _release(self, bucket, key, job_keys, now_s):
        for job_key in job_keys:
            self.refs.get(job_key, set()).discard((bucket, key))
            self.candidate_rows[(job_key, reference_id(bucket, key))] = now_s

    def _reference(self, bucket, key, job_keys):
        for job_key in job_keys:
            self.refs.setdefault(job_key, set()).add((bucket, key))

    def make_current(self, bucket, key, version, *, sha256, media, jobs, now_s):
        self.log.append(("make_current", key, version.sequencer.lstrip("0")))
        old = self.assets.get((bucket, key))
        if old is not None and version.sequencer < old.version.sequencer:
            return None
        if old is not None and version.sequencer == old.version.sequencer:
            if jobs is None or old.jobs or old.state == AssetState.DELETED:
                return old
            new = dataclasses.replace(old, sha256=sha256, media=media, jobs=tuple(jobs), updated_at_s=now_s)
            self._reference(bucket, key, new.job_keys)
            self._store(old, new)
            return new
        if old is not None and old.state != AssetState.DELETED and same_version(old.version, version):
            # The same version named by a later event (the key looked at again after a
            # delete): only the sequencer moves; the state stays.
            new = dataclasses.replace(old, version=version, updated_at_s=now_s)
            self._store(old, new)
            return new
        new = AssetView(
            bucket,
            key,
            AssetState.PENDING,
            version,
            sha256=sha256,
            media=media,
            jobs=tuple(jobs or ()),
            updated_at_s=now_s,
        )
        released = old.job_keys - new.job_keys if old is not None else frozenset()
        self._release(bucket, key, released, now_s)
        self._reference(bucket, key, new.job_keys)
        self._store(old, new)
        return new

    def record(self, bucket, key, sequencer, jobs, *, now_s, failure=None, placeholder=None):
        self.log.append(("record", key, tuple(str(j.state) for j in jobs)))
        old = self.assets.get((bucket, key))
        new = recorded(old, sequencer, jobs, now_s=now_s, failure=failure, placeholder=placeholder)
        if new is None:
            return None
        for job in new.jobs:
            if job.state == AssetJobState.FAILED and job.reason in (ATTEMPTS_EXHAUSTED, OUTPUT_CONFLICT):
                self.candidate_rows.setdefault((job.job_key, FAILED_PREFIX), now_s)
        self._store(old, new)
        return new

    def progress(self, bucket, key, sequencer, job_key, fraction, *, now_s):
        old = self.assets.get((bucket, key))
        if old is None or old.version.sequencer != sequencer:
            return
        jobs = tuple(
            dataclasses.replace(j, progress=fraction)
            if j.job_key == job_key and j.state == AssetJobState.PROCESSING
            else j
            for j in old.jobs
        )
        self.assets[(bucket, key)] = dataclasses.replace(old, jobs=jobs, updated_at_s=now_s)

    def delete(self, bucket, key, version, *, now_s):
        self.log.append(("delete", key, version.sequencer.lstrip("0")))
        old = self.assets.get((bucket, key))
        if old is not None and version.sequencer <= old.version.sequencer:
            return None
        if old is not None:
            self._release(bucket, key, old.job_keys, now_s)
        new = AssetView(bucket, key, AssetState.DELETED, version, updated_at_s=now_s)
        self._store(old, new)
        return new

    def referenced(self, job_key):
        return bool(self.refs.get(job_key))

    def references(self, job_key):
        return len(self.refs.get(job_key, ()))

    def candidates(self, *, released_before_s, limit):
        rows = sorted(self.candidate_rows.items(), key=lambda item: item[0])
        found = [Candidate(j, by, at) for (j, by), at in rows if at < released_before_s]
        return found[:limit]

    def candidates_of(self, job_key):
        return [Candidate(j, by, at) for (j, by), at in sorted(self.candidate_rows.items()) if j == job_key]

    def drop_candidate(self, candidate):
        if self.candidate_rows.get((candidate.job_key, candidate.released_by)) == candidate.released_at_s:
            del self.candidate_rows[(candidate.job_key, candidate.released_by)]
