"""In-memory fakes of the service layer's ports (``mediajobs.service_layer.ports``), for the
unit tests: no AWS, no Pillow, no ffmpeg.

Each fake records what it was asked in a shared ``log`` (a list of tuples such as
``("put", key)``), so a test can assert the order of operations across adapters. Faults
are injected by wrapping a fake (or a real adapter) with :class:`Wrapping`, never by
replacing methods on it.

* :class:`FakeStore` -- S3 (:class:`~mediajobs.service_layer.ports.ObjectStore`).
* :class:`FakeLedger` -- the job ledger; its writes apply the domain's row transitions
  (:mod:`mediajobs.domain.jobs`) under the DynamoDB ledger's conditions: no rule is copied.
* :class:`FakeSources` -- the source index.
* :class:`FakeAssets` -- the asset records, references and collection candidates; its
  changes are the domain's plans (:func:`~mediajobs.domain.assets.plan_current` ...).
* :class:`FakeQueue` -- the SQS queue (every operation of the ``Queue`` port, recorded;
  failing on demand).
* :class:`FakeImageStep`, :class:`FakeVideoStep` -- recipe steps (the ``Step`` port) writing
  small files.
* :class:`FakeClock` -- a clock that moves only when told.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from mediajobs.domain.assets import (
    FAILED_PREFIX,
    AssetJobState,
    AssetView,
    Candidate,
    plan_current,
    plan_delete,
    plan_next,
    plan_record,
    plan_upgrade,
)
from mediajobs.domain.errors import SOURCE_MISSING, DeliveryLost, PermanentFailure, Superseded, TransientFailure
from mediajobs.domain.jobs import (
    AWAITING,
    HELD_ANY,
    HELD_COLLECTING,
    HELD_RENDERING,
    Claim,
    ClaimOutcome,
    Decision,
    Delivery,
    Downloaded,
    Fence,
    JobState,
    JobView,
    KnownSource,
    ObjectHead,
    Reading,
    RenderedFile,
    collecting,
    collection_ended,
    completed,
    decide,
    failed,
    held_for_review,
    holds,
    input_failed,
    new_row,
    ready,
    released,
    renewed,
    requested,
    reviewed,
    standing_claim,
    taken_over,
    waiting_again,
)
from mediajobs.domain.keys import KEY_ALGORITHM_VERSION, KeyScheme, sha256_hex
from mediajobs.domain.manifest import RenderDecisions
from mediajobs.domain.notifications import Notification, notification_for
from mediajobs.domain.parts import split_changes
from mediajobs.domain.recipes import ImageVariantsParams, VideoRenditionsParams
from mediajobs.service_layer.ports import StepResult

#: The job keys' secret of the tests' settings (``Settings(key_secret=TEST_KEY_SECRET)``):
#: a test's own, never a stack's -- a deployed stack's is made at deploy, a local one's at start.
TEST_KEY_SECRET = "tests-only-job-key-secret-of-at-least-32-bytes"
#: The key scheme of those settings.
TEST_KEYS = KeyScheme(KEY_ALGORITHM_VERSION, TEST_KEY_SECRET.encode())


def atomic(cls):
    """Make each public method of the fake ``cls`` one atomic step: it runs under a re-entrant
    lock of its instance. The ports' real adapters are atomic per call (one DynamoDB or S3
    request), and the backfill's scan segments call them from threads: without the lock, two
    ``FakeBackfills.advance`` calls could each read the backfill, add their segment, and write
    it back, losing one (a CI run ended a backfill's test ``running``: a segment's end lost)."""
    for name, member in list(vars(cls).items()):
        if callable(member) and not name.startswith("_") and not isinstance(member, (staticmethod, classmethod, type)):
            setattr(cls, name, _locked(member))
    return cls


def _locked(method):
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self.__dict__.setdefault("_atomic_lock", threading.RLock()):  # dict.setdefault is atomic
            return method(self, *args, **kwargs)

    return locked


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


@atomic
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
        if ref.key not in self.objects:
            raise PermanentFailure(SOURCE_MISSING, f"s3://{ref.bucket}/{ref.key} is gone")
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

    def keys(self, bucket, prefix, *, limit):
        self.log.append(("keys", prefix))
        return sorted(k for k in self.objects if k.startswith(prefix))[:limit]

    def delete_prefix(self, bucket, prefix, *, first=None):
        self.log.append(("delete_prefix", prefix))
        doomed = ([first] if first in self.objects else []) + sorted(
            k for k in self.objects if k.startswith(prefix) and k != first
        )
        for key in doomed:
            del self.objects[key]
        return len(doomed) + (1 if first is not None and first not in doomed else 0)


@atomic
class FakeLedger:
    """The job ledger in a dict of :class:`JobView` rows. Every write applies the domain's
    row transitions (:func:`~mediajobs.domain.jobs.taken_over`, :func:`~mediajobs.domain.jobs.completed`
    ...) under the conditions the DynamoDB ledger writes (a fence, a holder's token), so
    no rule is copied here; tokens are ``t1``, ``t2`` ... by attempt (``t1r1``, ``t1r2`` ...
    for the first attempt of each render again after a collection). The collection's
    methods (``CollectionLedger``) are here too: a collector passes its own token."""

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

    def get(self, job_key):
        return self._view(job_key) if job_key in self.rows else None

    def _view(self, key):
        """The row as read: with the manifest staged in it, if any."""
        return dataclasses.replace(self.rows[key], staged_manifest=self.staged.get(key))

    def _apply(self, key, changes):
        """Write ``changes`` (a domain transition's) to the row."""
        fields = {f.name for f in dataclasses.fields(JobView)}
        for name, value in changes.items():
            if name == "staged_manifest":
                self.staged.pop(key, None) if value is None else self.staged.__setitem__(key, value)
            elif name == "output_candidates":
                self.candidates.pop(key, None)
        kept = {k: (v if v is not None else _EMPTY.get(k)) for k, v in changes.items() if k in fields}
        kept.pop("staged_manifest", None)
        self.rows[key] = dataclasses.replace(self.rows[key], **kept)
        return self._view(key)

    def _write_new(self, spec, changes):
        """A job's first row: its spec, and the domain's new row."""
        self.rows[spec.job_key] = JobView(
            spec.job_key, "", None, 0, 0, spec.recipe_id, source_bucket=spec.source_bucket,
            output_prefix=spec.output_prefix, waiting=spec.waiting, spec=spec,
        )  # fmt: skip
        self._apply(spec.job_key, changes)

    def claim(self, spec, *, now_s, lease_until_s, seen=None):
        key = spec.job_key
        self.log.append(("claim", key))
        if key not in self.rows:
            changes = new_row(spec, token="t1", lease_until_s=lease_until_s, now_s=now_s, pending=frozenset())
            self._write_new(spec, changes)
            return Claim(ClaimOutcome.RUN, key, lease_token="t1", lease_expires_at_s=lease_until_s, attempts=1)
        row = self._view(key)
        decision = decide(row, now_s=now_s, max_attempts=self.max_attempts)
        if decision not in (Decision.TAKE_OVER, Decision.EXHAUST):
            return standing_claim(row)
        if row.state in (JobState.COLLECTING, JobState.COLLECTED):
            self.restarts += 1
            token = f"t1r{self.restarts}"
        else:
            token = f"t{row.attempts + 1}"
        changes, claim = taken_over(row, decision, token, lease_until_s=lease_until_s, now_s=now_s)
        self._apply(key, changes)
        return claim

    def _held(self, job_key, token, states, changes):
        row = self.rows[job_key]
        if not holds(row, token, states):
            raise Superseded(job_key)
        return self._apply(job_key, changes)

    def renew(self, job_key, token, *, lease_until_s, now_s):
        self._held(job_key, token, HELD_ANY, renewed(lease_until_s, now_s))

    def begin_collection(self, job_key, token, *, lease_until_s, now_s, seen):
        self.log.append(("begin_collection", job_key))
        row = self.rows.get(job_key)
        if row is None or not Fence.of(seen).holds(self._view(job_key)):
            return False
        self._apply(job_key, collecting(token, lease_until_s=lease_until_s, now_s=now_s))
        return True

    def end_collection(self, job_key, token, *, collected, now_s):
        self.log.append(("end_collection", job_key, collected))
        self._held(job_key, token, HELD_COLLECTING, collection_ended(collected=collected, now_s=now_s))

    def mark_swept(self, job_key, *, now_s):
        self.log.append(("mark_swept", job_key))
        row = self.rows.get(job_key)
        if row is not None and row.state == JobState.PERMANENT_FAILURE:
            self.rows[job_key] = dataclasses.replace(row, collected_at_s=now_s)

    def register_outputs(self, job_key, token, candidates, *, now_s):
        self.log.append(("register", len(candidates)))
        self._held(job_key, token, HELD_RENDERING, {})
        self.candidates.setdefault(job_key, set()).update(candidates)
        return frozenset(self.candidates[job_key])

    def stage_manifest(self, job_key, token, body, *, now_s):
        self.log.append(("stage", job_key))
        self._held(job_key, token, HELD_RENDERING, {})
        return self.staged.setdefault(job_key, body)

    def complete(self, job_key, token, *, manifest_key, outputs, now_s, decisions=None, provenance=None):
        self.log.append(("complete", job_key))
        changes = completed(manifest_key, outputs, decisions, now_s, provenance)
        return self._held(job_key, token, HELD_RENDERING, changes)

    def fail_permanently(self, job_key, token, *, reason, detail, now_s, decisions=None):
        self.log.append(("fail", reason))
        return self._held(job_key, token, HELD_RENDERING, failed(reason, detail, now_s, decisions))

    def hold(self, job_key, token, decisions, *, now_s):
        self.log.append(("hold", job_key))
        return self._held(job_key, token, HELD_RENDERING, held_for_review(decisions, now_s))

    def wait_again(self, job_key, token, pending, *, now_s):
        self.log.append(("wait_again", job_key, tuple(sorted(pending))))
        return self._held(job_key, token, HELD_RENDERING, waiting_again(pending, now_s))

    def review(self, job_key, review, *, now_s):
        self.log.append(("review", job_key, review.get("outcome")))
        row = self.rows.get(job_key)
        if row is None or row.state != JobState.REVIEW:
            return None
        return self._apply(job_key, reviewed(review, now_s))

    def release(self, job_key, token, *, detail, now_s):
        self.log.append(("release", detail))
        self._held(job_key, token, HELD_RENDERING, released(detail, now_s))

    # -- jobs in steps

    def wait(self, spec, pending, *, now_s):
        self.log.append(("wait", spec.job_key, tuple(sorted(pending))))
        if spec.job_key in self.rows:
            return False
        self._write_new(spec, new_row(spec, token=None, lease_until_s=0, now_s=now_s, pending=pending))
        return True

    def split(self, job_key, token, pending, split, *, now_s, requests_until_s):
        self.log.append(("split", job_key, len(split.parts)))
        return self._held(job_key, token, HELD_RENDERING, split_changes(pending, split, now_s, requests_until_s))

    def requests_sent(self, job_key, requests_until_s, *, now_s):
        self.log.append(("requests_sent", job_key))
        row = self.rows.get(job_key)
        if row is not None and row.state == JobState.WAITING and row.lease_expires_at_s == requests_until_s:
            self.rows[job_key] = dataclasses.replace(row, lease_expires_at_s=0)

    def register(self, input_key, waiter_key, *, now_s):
        self.log.append(("register_waiter", input_key, waiter_key))
        row = self.rows.get(input_key)
        if row is None or row.state in (JobState.DONE, JobState.PERMANENT_FAILURE):
            return False
        self.rows[input_key] = dataclasses.replace(row, waiting=row.waiting | {waiter_key})
        return True

    def input_done(self, waiter_key, input_key, *, now_s):
        self.log.append(("input_done", waiter_key, input_key))
        row = self.rows.get(waiter_key)
        if row is None:
            return None, False
        self.rows[waiter_key] = dataclasses.replace(row, pending=row.pending - {input_key})
        if not ready(self._view(waiter_key)):
            return self._view(waiter_key), False
        return self._apply(waiter_key, requested(now_s)), True

    def input_failed(self, waiter_key, input_key, reason, detail, *, now_s):
        self.log.append(("input_failed", waiter_key, input_key))
        row = self.rows.get(waiter_key)
        if row is None or row.state not in AWAITING:
            return False
        self._apply(waiter_key, input_failed(input_key, reason, detail, now_s))
        return True

    def told(self, input_key, waiter_keys, *, now_s):
        self.log.append(("told", input_key, tuple(sorted(waiter_keys))))
        row = self.rows[input_key]
        self.rows[input_key] = dataclasses.replace(row, waiting=row.waiting - set(waiter_keys))


#: What a removed field reads back as on a :class:`JobView`.
_EMPTY: dict[str, Any] = {"outputs": (), "waiting": frozenset(), "pending": frozenset(), "split": None}


@atomic
class FakeSources:
    """The source index in a dict: ``rows`` holds :class:`KnownSource` or :class:`Reading`
    (a reading mark, its lease fenced on its token as the DynamoDB index's)."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.rows: dict[str, KnownSource | Reading] = {}

    def lookup(self, source_id, *, now_s):
        self.log.append(("lookup", source_id))
        found = self.rows.get(source_id)
        return None if isinstance(found, Reading) and found.lease_expires_at_s <= now_s else found

    def begin_reading(self, source_id, token, *, now_s, lease_until_s):
        self.log.append(("begin_reading", source_id))
        found = self.rows.get(source_id)
        if isinstance(found, KnownSource) or (isinstance(found, Reading) and found.lease_expires_at_s > now_s):
            return found
        self.rows[source_id] = Reading(lease_until_s, token)
        return None

    def renew(self, source_id, token, *, lease_until_s, now_s):
        found = self.rows.get(source_id)
        if not isinstance(found, Reading) or found.lease_token != token:
            raise Superseded(source_id)
        self.rows[source_id] = Reading(lease_until_s, token)

    def release(self, source_id, token, *, detail="", now_s=0):
        self.log.append(("release_mark", source_id))
        found = self.rows.get(source_id)
        if isinstance(found, Reading) and found.lease_token == token:
            del self.rows[source_id]

    def remember(self, source_ids, known, *, now_s):
        self.log.append(("remember", tuple(source_ids)))
        for i in source_ids:
            self.rows[i] = known


@atomic
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


@atomic
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
        self.holds: dict[tuple[str, str], int] = {}

    def _write(self, old, change, now_s, failed=()):
        """Apply a change the domain planned, as one transaction: the asset, its references,
        the candidates of the jobs released (and of those failed without a manifest), and
        the notification it owes, put once."""
        new = change.view
        told = notification_for(old, new)
        if told is not None:
            self.outbox.setdefault(told.id, told)
        self.assets[(new.bucket, new.key)] = new
        for job_key in change.add:
            self.refs.setdefault(job_key, set()).add((new.bucket, new.key))
        for job_key in change.drop:
            self.refs.get(job_key, set()).discard((new.bucket, new.key))
        for c in change.candidates:
            self.candidate_rows[(c.job_key, c.released_by)] = c.released_at_s
            self.holds[(c.job_key, c.released_by)] = c.not_before_s
        for job_key in failed:
            self.candidate_rows.setdefault((job_key, FAILED_PREFIX), now_s)
        return new

    def get(self, bucket, key):
        return self.assets.get((bucket, key))

    def make_current(self, bucket, key, version, *, sha256, media, jobs, now_s):
        self.log.append(("make_current", key, version.sequencer.lstrip("0")))
        old = self.assets.get((bucket, key))
        change = plan_current(old, bucket, key, version, sha256=sha256, media=media, jobs=jobs, now_s=now_s)
        if change is None:
            return old if old is not None and old.version.sequencer == version.sequencer else None
        return self._write(old, change, now_s)

    def record(self, bucket, key, sequencer, jobs, *, now_s, failure=None, placeholder=None):
        self.log.append(("record", key, tuple(str(j.state) for j in jobs)))
        old = self.assets.get((bucket, key))
        planned = plan_record(old, sequencer, jobs, now_s=now_s, failure=failure, placeholder=placeholder)
        if planned is None:
            return None
        change, failed = planned
        return self._write(old, change, now_s, failed)

    def upgrade(self, bucket, key, sequencer, wanted, *, now_s, grace_s):
        old = self.assets.get((bucket, key))
        change = plan_upgrade(old, sequencer, wanted, now_s=now_s, grace_s=grace_s)
        return None if change is None else self._write(old, change, now_s)

    def record_next(self, bucket, key, jobs, *, now_s):
        old = self.assets.get((bucket, key))
        change = plan_next(old, jobs, now_s=now_s)
        return None if change is None else self._write(old, change, now_s)

    def get_many(self, bucket, keys):
        self.log.append(("asset_get_many", len(keys)))
        return {k: self.assets[(bucket, k)] for k in keys if (bucket, k) in self.assets}

    def referrers(self, job_key):
        return sorted(self.refs.get(job_key, ()))

    def scan(self, segment, segments, cursor, *, limit):
        keys = sorted(k for k in self.assets if zlib.crc32("/".join(k).encode()) % segments == segment)
        start = 0 if cursor is None else keys.index(tuple(cursor["at"])) + 1
        page = keys[start : start + limit]
        nxt = {"at": list(page[-1])} if page and start + limit < len(keys) else None
        return [self.assets[k] for k in page], nxt

    def progress(self, bucket, key, sequencer, job_key, fraction, *, now_s):
        old = self.assets.get((bucket, key))
        if old is None or old.version.sequencer != sequencer:
            return
        jobs = tuple(
            dataclasses.replace(j, progress=fraction)
            if j.job_key == job_key
            and j.state == AssetJobState.PROCESSING
            and (j.progress is None or j.progress < fraction)  # never back
            else j
            for j in old.jobs
        )
        self.assets[(bucket, key)] = dataclasses.replace(old, jobs=jobs, updated_at_s=now_s)

    def delete(self, bucket, key, version, *, now_s):
        self.log.append(("delete", key, version.sequencer.lstrip("0")))
        old = self.assets.get((bucket, key))
        change = plan_delete(old, bucket, key, version, now_s=now_s)
        return None if change is None else self._write(old, change, now_s)

    def referenced(self, job_key):
        return bool(self.refs.get(job_key))

    def references(self, job_key):
        return len(self.refs.get(job_key, ()))

    def candidates(self, *, released_before_s, limit, now_s=None):
        rows = sorted(self.candidate_rows.items(), key=lambda item: item[0])
        found = [Candidate(j, by, at, self.holds.get((j, by), 0)) for (j, by), at in rows if at < released_before_s]
        found = [c for c in found if now_s is None or c.not_before_s <= now_s]
        return found[:limit]

    def candidates_of(self, job_key):
        rows = sorted(self.candidate_rows.items())
        return [Candidate(j, by, at, self.holds.get((j, by), 0)) for (j, by), at in rows if j == job_key]

    def drop_candidate(self, candidate):
        if self.candidate_rows.get((candidate.job_key, candidate.released_by)) == candidate.released_at_s:
            del self.candidate_rows[(candidate.job_key, candidate.released_by)]

    def release(self, job_keys, released_by, *, now_s):
        for job_key in job_keys:
            self.candidate_rows.setdefault((job_key, released_by), now_s)


def pipeline_on(
    settings: Any,
    *,
    store: Any,
    ledger: Any,
    sources: Any,
    steps: Any,
    recipes: Any,
    detect_media: Any,
    clock: Callable[[], float] = lambda: 1000.0,
    observer: Any = None,
    disk_usage: Any = None,
    assets: Any = None,
    queue: Any = None,
) -> Any:
    """A pipeline on these adapters (fakes, or fakes wrapped), wired by the composition root
    (:func:`mediajobs.bootstrap.build_service`) as the real one is."""
    import shutil

    from mediajobs.bootstrap import Adapters, build_service

    adapters = Adapters(
        store=store, ledger=ledger, sources=sources, queue=queue, steps=steps, clock=clock, assets=assets
    )
    return build_service(
        settings,
        adapters=adapters,
        observer=observer,
        recipes=recipes,
        disk_usage=disk_usage or shutil.disk_usage,
        detect=detect_media,
    )


class TextParams(BaseModel):
    """Parameters of the test step ``test.text``: the prefix of its one output."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix: str


class TextStep:
    """The test step ``test.text``: one output ``out`` (``out.txt``), its ``prefix`` then each
    input's bytes in input-name order -- a job that takes two jobs' outputs joins them.
    ``runs``: the inputs of each run, by name (their bytes)."""

    name = "test.text"
    params_model = TextParams

    def __init__(self) -> None:
        self.runs: list[dict[str, bytes]] = []

    def run(self, source, params, context, out_dir):
        read = {name: path.read_bytes() for name, path in sorted(context.inputs.items())}
        self.runs.append(read)
        data = params.prefix.encode() + b"|" + b"|".join(read.values())
        path = out_dir / "out.txt"
        path.write_bytes(data)
        file = RenderedFile("out", "txt", path, 1, 1, len(data), sha256_hex(data), "text/plain")
        return StepResult([file], {"inputs": sorted(read)})


def text_recipes(*recipes: tuple[str, str, dict[str, str]]) -> dict[str, list[Any]]:
    """Image recipes of :class:`TextStep`, each ``(id, prefix, {input name: "<id>@1"})``
    at version 1: an empty mapping takes the original; otherwise each input is that
    recipe's output ``out`` (jobs in steps on fakes)."""
    from mediajobs.domain.recipes import parse_recipe

    models = {TextStep.name: TextParams}
    parsed = []
    for recipe_id, prefix, inputs in recipes:
        wanted = {name: {"recipe": ref, "output": "out"} for name, ref in inputs.items()}
        document = {
            "id": recipe_id,
            "version": 1,
            "media": "image",
            "step": TextStep.name,
            "params": {"prefix": prefix},
        }
        parsed.append(parse_recipe({**document, "inputs": wanted}, models))
    return {"image": parsed}


def pair_recipes() -> dict[str, list[Any]]:
    """``left@1`` and ``right@1`` take the original, ``pair@1`` takes their outputs ``out``
    (a job with two inputs that are other jobs' outputs)."""
    return text_recipes(("left", "L", {}), ("right", "R", {}), ("pair", "P", {"left": "left@1", "right": "right@1"}))


def chain_recipes() -> dict[str, list[Any]]:
    """``a@1`` takes the original, ``b@1`` takes ``a@1``'s output, ``c@1`` takes ``b@1``'s
    (a failure told down two steps)."""
    return text_recipes(("a", "A", {}), ("b", "B", {"x": "a@1"}), ("c", "C", {"x": "b@1"}))


def diamond_recipes() -> dict[str, list[Any]]:
    """``a@1`` takes the original, ``b@1`` and ``c@1`` take ``a@1``'s output, ``d@1`` takes
    ``b@1``'s and ``c@1``'s."""
    return text_recipes(
        ("a", "A", {}), ("b", "B", {"x": "a@1"}), ("c", "C", {"x": "a@1"}), ("d", "D", {"x": "b@1", "y": "c@1"})
    )


@atomic
class FakeBackfills:
    """The ``Backfills`` port in dicts, with its semantics: each method is one atomic step,
    each count written with what it counts (:class:`mediajobs.adapters.backfills.DynamoBackfills`
    is the real one; ``tests/functional/test_backfill_store.py`` runs it)."""

    def __init__(self) -> None:
        self.backfills: dict[str, Any] = {}
        self.changes: dict[str, tuple[str, int]] = {}
        self.cursors: dict[tuple[str, int], tuple[Any, bool]] = {}
        self.marks: dict[tuple[str, str], str] = {}
        self.later_rows: dict[tuple[str, tuple[str, str]], None] = {}

    def _add(self, backfill_id: str, **counts: int) -> None:
        b = self.backfills[backfill_id]
        c = dataclasses.replace(b.counts, **{k: getattr(b.counts, k) + v for k, v in counts.items()})
        self.backfills[backfill_id] = dataclasses.replace(b, counts=c)

    def get(self, backfill_id):
        return self.backfills.get(backfill_id)

    def of_change(self, change):
        found = self.changes.get(change)
        return self.backfills[found[0]] if found else None

    def all(self):
        return sorted(self.backfills.values(), key=lambda b: (b.created_at_s, b.id))

    def cursor(self, backfill_id, segment):
        return self.cursors.get((backfill_id, segment), (None, False))

    def later(self, backfill_id, limit):
        return [asset for (b, asset) in self.later_rows if b == backfill_id][:limit]

    def enqueued(self, backfill_id, limit):
        return [k for (b, k), state in sorted(self.marks.items()) if b == backfill_id and state == "enqueued"][:limit]

    def mark(self, backfill_id, job_key):
        return self.marks.get((backfill_id, job_key))

    def reopen(self, backfill_id, job_key, *, now_s):
        if self.marks.get((backfill_id, job_key)) != "dropped":
            return False
        self.marks[(backfill_id, job_key)] = "enqueued"
        self._add(backfill_id, dropped=-1)
        return True

    def create(self, backfill, *, after):
        if self.changes.get(backfill.change, ("", 0))[1] != after or backfill.id in self.backfills:
            return False
        self.changes[backfill.change] = (backfill.id, backfill.generation)
        self.backfills[backfill.id] = backfill
        return True

    def move(self, backfill_id, to, *, now_s):
        from mediajobs.domain.backfill import MOVES, BackfillState

        b = self.backfills.get(backfill_id)
        if b is None or to not in MOVES[b.state] or (to == BackfillState.DONE and not b.finished()):
            return b if b is not None and b.state == to else None
        final = to in (BackfillState.DONE, BackfillState.CANCELLED)
        self.backfills[backfill_id] = dataclasses.replace(
            b, state=to, updated_at_s=now_s, finished_at_s=now_s if final else b.finished_at_s
        )
        return self.backfills[backfill_id]

    def advance(self, backfill_id, segment, old, new, *, scanned, now_s):
        if self.cursor(backfill_id, segment) != (old, False):
            return False
        self.cursors[(backfill_id, segment)] = (new, new is None)
        self._add(backfill_id, assets_scanned=scanned)
        if new is None:
            b = self.backfills[backfill_id]
            self.backfills[backfill_id] = dataclasses.replace(b, scanned=b.scanned + 1)
        return True

    def count(self, backfill_id, job_key, state, *, now_s):
        if (backfill_id, job_key) in self.marks:
            return False
        self.marks[(backfill_id, job_key)] = state
        self._add(backfill_id, total=1, **{state: 1})
        return True

    def end(self, backfill_id, job_key, state, *, now_s):
        if self.marks.get((backfill_id, job_key)) != "enqueued":
            return False
        self.marks[(backfill_id, job_key)] = state
        self._add(backfill_id, **{state: 1})
        return True

    def keep_for_later(self, backfill_id, bucket, key):
        if (backfill_id, (bucket, key)) in self.later_rows:
            return False
        self.later_rows[(backfill_id, (bucket, key))] = None
        self._add(backfill_id, later=1)
        return True

    def looked_again(self, backfill_id, bucket, key):
        if self.later_rows.pop((backfill_id, (bucket, key)), 0) is not None:
            return False
        self._add(backfill_id, later=-1)
        return True


def planned_key(data: bytes | str, recipe_id: str, settings=None, media: str = "image") -> str:
    """The job key of ``recipe_id``'s job on ``data`` (bytes, or their SHA-256 hex) as the
    active recipes plan it under ``settings``' policy (a rendition's key hashes its
    moderation job's: never a bare ``job_key`` of the content and recipe)."""
    from mediajobs.bootstrap import active_recipes
    from mediajobs.domain.plan import Where, plan_jobs
    from mediajobs.settings import Settings

    settings = settings or Settings(key_secret=TEST_KEY_SECRET)
    where = Where("bucket", "originals/x", settings.derivatives_prefix, settings.policy_version, settings.keys)
    sha256 = data if isinstance(data, str) else sha256_hex(data)
    jobs = plan_jobs(sha256, media, active_recipes(), where)
    return next(job.key for job in jobs if job.recipe.id == recipe_id)


def job_of(result, recipe_id: str):
    """The entry of ``recipe_id``'s job (``web-image``) among ``result.jobs`` (a source
    result's, or an asset's): its jobs start with the moderation job under a policy."""
    return next(job for job in result.jobs if job.recipe.split("@")[0] == recipe_id)


class FakePromoRecords:
    """The ``PromoRecords`` port in a dict by (bucket, prefix), with the DynamoDB adapter's
    semantics: a put is conditional on the record read (its revision), and moves the album's
    reference (``assets.refs``) from the previous job to the new one, releasing the previous
    (``assets.candidate_rows``), as one step."""

    def __init__(self, assets: FakeAssets) -> None:
        self.records: dict[tuple[str, str], Any] = {}
        self.assets = assets
        self.puts = 0

    def get(self, bucket, prefix):
        return self.records.get((bucket, prefix))

    def all(self):
        return [self.records[k] for k in sorted(self.records)]

    def put(self, record, *, previous, now_s):
        import dataclasses

        from mediajobs.domain.assets import reference_id
        from mediajobs.domain.promo import holder_key

        current = self.records.get((record.bucket, record.prefix))
        if (current is None) != (previous is None) or (current and current.revision != previous.revision):
            return False
        revision = (previous.revision if previous else 0) + 1
        self.records[(record.bucket, record.prefix)] = dataclasses.replace(record, revision=revision)
        holder = (record.bucket, holder_key(record.prefix))
        if record.job_key is not None:
            self.assets.refs.setdefault(record.job_key, set()).add(holder)
        if previous is not None and previous.job_key is not None and previous.job_key != record.job_key:
            self.assets.refs.get(previous.job_key, set()).discard(holder)
            self.assets.candidate_rows[(previous.job_key, reference_id(*holder))] = now_s
        self.puts += 1
        return True
