"""Assets: the original as an app sees it, keyed by (bucket, original key). Pure.

An app asks one question after an upload: is ``originals/users/42/avatar.jpg`` ready, and
where are its derivatives? The job ledger cannot answer it (it is keyed by content and
recipe, and one job serves every original with the same bytes). The asset record can: its
current version, the S3 event ``sequencer`` that made it current, its SHA-256 and media
type, and per active recipe the job key, the job's state and its outputs.

* **States** (:class:`AssetState`): ``pending`` (event seen, no claim yet) ->
  ``processing`` (a job is claimed; ``progress`` where a step reports one) -> ``ready``
  (every active recipe's job is done) or ``failed`` (a job or the original failed for
  good, with its reason); ``deleted`` once the object is gone. Under a moderation policy,
  ``review`` (its moderation job is held for a person: nothing renders meanwhile) and
  ``rejected`` (the policy or a person refused it, with the rule: nothing rendered, a final
  state like ``failed``). For one version a state
  only moves forward (:func:`may_move`): a duplicate or late event never turns ``ready``
  back into ``processing``.
* **Order** (:func:`sequencer_order`): a new version (or a delete) replaces the current
  one only if its sequencer is greater. S3's sequencers of one key are hexadecimal strings
  of varying length, compared as numbers ("Event message structure", Amazon S3 user
  guide: "compare the sequencer values as hexadecimal ... left-pad the shorter with
  zeros"). An event whose sequencer is lower is *superseded*: it renders nothing, changes
  no reference and is acknowledged. An equal sequencer is the same event again.
* **References**: each job key is referenced by the assets whose current version uses
  it (a reference row per asset under the job: ``docs/assets.md`` says why not a
  counter). A job nothing references any more is collected after a grace period
  (:mod:`mediajobs.service_layer.collection`).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from mediajobs.domain.errors import ATTEMPTS_EXHAUSTED, OUTPUT_CONFLICT, REJECTED
from mediajobs.domain.jobs import OutputRecord


class AssetState(enum.StrEnum):
    """What an app is told of an asset's current version (see the module docstring)."""

    PENDING = "pending"
    PROCESSING = "processing"
    REVIEW = "review"
    READY = "ready"
    FAILED = "failed"
    REJECTED = "rejected"
    DELETED = "deleted"


class AssetJobState(enum.StrEnum):
    """One recipe's job as the asset records it: ``pending`` (not claimed yet),
    ``processing`` (claimed), ``review`` (a moderation job held for a person), ``done``,
    ``failed`` (with the job's reason code; ``rejected`` for a refused content)."""

    PENDING = "pending"
    PROCESSING = "processing"
    REVIEW = "review"
    DONE = "done"
    FAILED = "failed"


#: The asset states a version ends in (every job final): nothing moves it on but a new
#: version or a delete.
FINAL_STATES: Final = frozenset({AssetState.READY, AssetState.FAILED, AssetState.REJECTED})
#: The final states with no set an app is shown: a backfill's set ending in failures
#: replaces them all the same (:func:`promoted`).
_NOTHING_SERVED: Final = frozenset({AssetState.FAILED, AssetState.REJECTED})

_ASSET_RANK: Final = {
    AssetState.PENDING: 0,
    AssetState.PROCESSING: 1,
    AssetState.REVIEW: 2,
    AssetState.READY: 3,
    AssetState.FAILED: 3,
    AssetState.REJECTED: 3,
    AssetState.DELETED: 4,
}
_JOB_RANK: Final = {
    AssetJobState.PENDING: 0,
    AssetJobState.PROCESSING: 1,
    AssetJobState.REVIEW: 2,
    AssetJobState.DONE: 3,
    AssetJobState.FAILED: 3,
}


def may_move(old: AssetState, new: AssetState) -> bool:
    """Whether one version's asset may go from ``old`` to ``new``: forward or staying, never
    back, and never from one final state to the other (``ready`` <-> ``failed``) -- but from
    ``review`` to ``processing``: a person accepted it, its renditions run (the moderation
    job's entry moved on to ``done``, and job entries never move back, so ``review`` cannot
    come again)."""
    if old == new or (old, new) == (AssetState.REVIEW, AssetState.PROCESSING):
        return True
    return _ASSET_RANK[new] > _ASSET_RANK[old]


def job_may_move(old: AssetJobState, new: AssetJobState) -> bool:
    """As :func:`may_move`, for one recipe's job entry."""
    return old == new or _JOB_RANK[new] > _JOB_RANK[old]


#: Width, hex digits, that sequencers are left-padded to before they are compared or
#: stored (S3's are 16-20 today; 64 leaves room and keeps a string comparison exact).
SEQUENCER_WIDTH: Final = 64
_HEX = re.compile(r"[0-9A-Fa-f]{1,64}")


def sequencer_order(sequencer: str | None) -> str:
    """The sortable form of an S3 event ``sequencer``: upper-case hex, left-padded with zeros
    to :data:`SEQUENCER_WIDTH`, so that comparing two such strings compares the numbers
    (S3 user guide, "Event message structure"). ``None`` or ``""`` (an event that carries
    none, as a hand-written replay) sorts before every real sequencer.

    Raises
    ------
    ValueError
        If ``sequencer`` is not 1-64 hexadecimal digits.
    """
    if sequencer is None or sequencer == "":
        return "0" * SEQUENCER_WIDTH
    if not _HEX.fullmatch(sequencer):
        raise ValueError(f"not an S3 sequencer (1-64 hex digits): {sequencer!r}")
    return sequencer.upper().rjust(SEQUENCER_WIDTH, "0")


def compare_sequencers(a: str | None, b: str | None) -> int:
    """-1, 0 or 1 as ``a`` is lower than, equal to or greater than ``b`` (as hexadecimal
    numbers of any length; see :func:`sequencer_order`)."""
    x, y = sequencer_order(a), sequencer_order(b)
    return (x > y) - (x < y)


def asset_id(bucket: str, key: str) -> str:
    """The asset's id: ``<bucket>/<key>`` (at most 63 + 1 + 1,024 bytes: within DynamoDB's
    2,048-byte partition key)."""
    return f"{bucket}/{key}"


def reference_id(bucket: str, key: str) -> str:
    """The id of the asset under a job's references: SHA-256 hex of :func:`asset_id` (a
    sort key is at most 1,024 bytes, which a bucket and a 1,024-byte key exceed)."""
    return hashlib.sha256(asset_id(bucket, key).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class AssetVersion:
    """The object version an asset's state is about.

    Attributes
    ----------
    version_id: S3 version id; ``None`` on an unversioned bucket (then ``etag`` and
        ``size_bytes`` tell versions apart).
    etag: ETag without quotes (may be empty when unknown).
    size_bytes: size in bytes, when known.
    sequencer: :func:`sequencer_order` of the event that made it current.
    checksum_sha256: whether S3 holds the version's whole SHA-256 (a single PUT with
        ``x-amz-checksum-sha256``, as ``POST uploads`` signs it): its content was known
        without reading it; ``False`` for a multipart upload (S3's checksum is composite)
        or none: the worker hashed the bytes it read. Not identity (:func:`same_version`).
    """

    version_id: str | None
    etag: str
    size_bytes: int | None
    sequencer: str
    checksum_sha256: bool = False


def same_version(a: AssetVersion, b: AssetVersion) -> bool:
    """Whether two versions are the same object version (whatever event named them): the
    same version id, ETag and size (on an unversioned bucket, identical single-part bytes
    re-put are the same version for the asset: its derivatives do not change)."""
    return (a.version_id, a.etag, a.size_bytes) == (b.version_id, b.etag, b.size_bytes)


@dataclass(frozen=True)
class AssetJob:
    """One active recipe's job of an asset's current version.

    Attributes
    ----------
    recipe: the recipe's reference (``web-image@1``).
    job_key: 64 hex characters.
    state: an :class:`AssetJobState`.
    reason, detail: the job's reason code and detail when ``failed``.
    manifest_key: ``derivatives/<job key>/manifest.json`` when ``done``.
    outputs: the manifest's outputs when ``done``.
    progress: fraction 0-1 of the work done while ``processing``, where a step reports it.
    """

    recipe: str
    job_key: str
    state: AssetJobState = AssetJobState.PENDING
    reason: str | None = None
    detail: str = ""
    manifest_key: str | None = None
    outputs: tuple[OutputRecord, ...] = ()
    progress: float | None = None


@dataclass(frozen=True)
class AssetView:
    """An asset as stored.

    Attributes
    ----------
    bucket, key: the original.
    state: an :class:`AssetState`.
    version: the current version.
    sha256: its content's SHA-256 hex, once known.
    media: ``image`` or ``video``, once known.
    jobs: one per active recipe, once the content is known (empty before).
    reason, detail: why it ``failed`` (the first failed job's, or the original's own
        refusal: ``empty_file``, ``unsupported_format`` ...).
    placeholder: the placeholder recipe's decisions (``{"placeholder": "thumbhash", ...}``)
        once its job is done.
    updated_at_s: Unix time, seconds, of the last change.
    next: the jobs of the recipe set a backfill rolls out to this version (empty when
        none): they render while ``jobs`` keep serving, and replace them once every one is
        done (:func:`plan_upgrade`, ``docs/backfill.md``).
    next_grace_s: seconds the jobs ``next`` replaces are kept after the switch
        (``RETIRE_GRACE_SECONDS`` when the backfill reached the asset).
    """

    bucket: str
    key: str
    state: AssetState
    version: AssetVersion
    sha256: str | None = None
    media: str | None = None
    jobs: tuple[AssetJob, ...] = ()
    reason: str | None = None
    detail: str = ""
    placeholder: Mapping[str, Any] | None = None
    updated_at_s: int = 0
    next: tuple[AssetJob, ...] = ()
    next_grace_s: int = 0

    @property
    def job_keys(self) -> frozenset[str]:
        """The job keys this asset references: its serving jobs' and its ``next`` ones'
        (none once ``deleted``)."""
        if self.state == AssetState.DELETED:
            return frozenset()
        return frozenset(job.job_key for job in (*self.jobs, *self.next))

    @property
    def recipes(self) -> tuple[str, ...]:
        """The recipe references of the serving jobs (``web-image@1`` ...), in order."""
        return tuple(job.recipe for job in self.jobs)


def summarize(jobs: Sequence[AssetJob]) -> tuple[AssetState, str | None, str]:
    """The asset state its jobs make, with the reason and detail of a failure.

    ``failed`` when any job failed (the first one's reason) -- ``rejected`` when that reason
    is ``rejected`` --, ``review`` when a moderation job is held for a person, ``ready`` when
    every job is done (and there is at least one), ``processing`` when any job is claimed or
    done, ``pending`` otherwise.
    """
    for job in jobs:
        if job.state == AssetJobState.FAILED:
            state = AssetState.REJECTED if job.reason == REJECTED else AssetState.FAILED
            return state, job.reason, job.detail
    held = next((job for job in jobs if job.state == AssetJobState.REVIEW), None)
    if held is not None:
        return AssetState.REVIEW, None, held.detail
    if jobs and all(job.state == AssetJobState.DONE for job in jobs):
        return AssetState.READY, None, ""
    if any(job.state in (AssetJobState.PROCESSING, AssetJobState.DONE) for job in jobs):
        return AssetState.PROCESSING, None, ""
    return AssetState.PENDING, None, ""


def merge_jobs(current: Sequence[AssetJob], updates: Iterable[AssetJob]) -> tuple[AssetJob, ...]:
    """``current`` with ``updates`` applied by job key, each only where it moves forward
    (:func:`job_may_move`; a ``processing`` entry's progress may change). An update naming
    a job key the version does not use is ignored. Pure."""
    by_key = {job.job_key: job for job in updates}
    merged = []
    for job in current:
        new = by_key.get(job.job_key)
        if new is not None and job_may_move(job.state, new.state):
            if new.state == job.state == AssetJobState.PROCESSING and new.progress is None:
                new = replace(new, progress=job.progress)
            job = replace(new, recipe=job.recipe)
        merged.append(job)
    return tuple(merged)


def recorded(
    old: AssetView | None,
    sequencer: str,
    jobs: Sequence[AssetJob],
    *,
    now_s: int,
    failure: tuple[str, str] | None = None,
    placeholder: Mapping[str, Any] | None = None,
) -> AssetView | None:
    """The asset once job states ``jobs`` are recorded for the version ``sequencer`` made
    current: merged forward only (:func:`merge_jobs`), the state summarised
    (:func:`summarize`; ``failure``, a (reason, detail), fails the version itself) but
    never moved back (:func:`may_move`), ``placeholder`` kept when given. ``None`` when
    ``sequencer`` is not the current one or the asset is deleted: nothing to record. Pure;
    the one rule of the ``Assets`` port's ``record``."""
    if old is None or old.version.sequencer != sequencer or old.state == AssetState.DELETED:
        return None
    merged = merge_jobs(old.jobs, jobs)
    state, reason, detail = summarize(merged)
    if failure is not None:
        state, (reason, detail) = AssetState.FAILED, failure
    if not may_move(old.state, state):
        state, reason, detail = old.state, old.reason, old.detail
    return replace(
        old,
        state=state,
        jobs=merged,
        reason=reason,
        detail=detail,
        placeholder=placeholder if placeholder is not None else old.placeholder,
        updated_at_s=now_s,
    )


def answered(view: AssetView | None, sequencer: str) -> bool:
    """Whether an ``Object Created`` event with ``sequencer`` (:func:`sequencer_order` form)
    is answered by the asset alone: the event that made its version current came again
    (the same sequencer), and that version ended -- ``ready``, ``failed`` or ``rejected`` --
    with every job of it final (``done`` or ``failed``: a job still ``processing`` or
    ``pending`` of a failed version is its holder's to finish). Such a duplicate needs no
    other request and no byte of the original. Pure."""
    if view is None or view.version.sequencer != sequencer:
        return False
    if view.state not in FINAL_STATES:
        return False
    return all(job.state in (AssetJobState.DONE, AssetJobState.FAILED) for job in view.jobs)


def placeholder_of(decisions: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The placeholder in a job's decisions (``"placeholder": "thumbhash"``), or ``None``."""
    if isinstance(decisions, Mapping) and decisions.get("placeholder") == "thumbhash":
        return dict(decisions)
    return None


class Deletion(enum.StrEnum):
    """S3's ``deletion-type`` of an ``Object Deleted`` event (Amazon S3 user guide, "Using
    EventBridge", event detail): a ``DeleteObject`` without a version on a versioned bucket,
    and a lifecycle expiration of a current version there, create a delete marker; deleting
    a version (or any object of an unversioned bucket), and a lifecycle expiration of a
    noncurrent version, delete permanently."""

    DELETE_MARKER_CREATED = "Delete Marker Created"
    PERMANENTLY_DELETED = "Permanently Deleted"


class DeletionEffect(enum.StrEnum):
    """What an ``Object Deleted`` event does to an asset (:func:`deletion_effect`)."""

    #: A greater sequencer is current: nothing changes, the event is acknowledged.
    SUPERSEDED = "superseded"
    #: The current version is gone: the asset becomes ``deleted`` and drops its references.
    DELETED = "deleted"
    #: A version of a versioned bucket was deleted for good: if it was the current one (or
    #: the delete marker: an undelete), S3 now serves the previous version (no event says
    #: so); if not, nothing visible changes. Which it was, only S3 knows now -- the asset
    #: may not have seen every event before this one -- so the key is looked at again.
    LOOK_AGAIN = "look_again"


def deletion_effect(
    view: AssetView | None, *, version_id: str | None, deletion_type: str | None, sequencer: str
) -> DeletionEffect:
    """What an ``Object Deleted`` event with ``sequencer`` (:func:`sequencer_order` form)
    does to the asset ``view`` (``None``: unknown). Pure.

    A delete older than the current state is superseded. A delete marker, or the permanent
    deletion of an unversioned object, deletes the current version (an unknown asset is
    recorded ``deleted`` too, so that a late ``Object Created`` of an older version is then
    superseded). Permanently deleting a version of a versioned object is looked at again,
    whichever version it names: the asset cannot tell a noncurrent version from the
    current one -- events come out of order, so a version it does not hold may be the one
    S3 served until this delete (a create not delivered yet), and one it holds may have
    been replaced already. The key's current version is then made the asset's with this
    event's sequencer: for a noncurrent version that is the version already current (only
    the sequencer moves: nothing visible changes); after an undelete or the current
    version's deletion, the previous version; none left: ``deleted``. An event without
    ``deletion-type`` (moto sends none) is taken as a permanent deletion.
    """
    if view is not None and sequencer <= view.version.sequencer:
        return DeletionEffect.SUPERSEDED
    if deletion_type == Deletion.DELETE_MARKER_CREATED or version_id is None:
        return DeletionEffect.DELETED
    return DeletionEffect.LOOK_AGAIN


@dataclass(frozen=True)
class Candidate:
    """A job that may have nothing left referencing it: written when an asset drops its
    reference (``released_by`` is that asset's :func:`reference_id`) or when a job ends
    failed with outputs but no manifest (``released_by`` is ``"failed"``).

    Attributes
    ----------
    job_key: the job.
    released_by: who released it (one candidate per releasing asset: no two writers share
        an item on the upload path).
    released_at_s: Unix time, seconds; the job is collected no earlier than the grace
        period after it.
    not_before_s: Unix time, seconds, before which the job is never collected, whatever
        the grace (0: none). A job a backfill retired is kept ``RETIRE_GRACE_SECONDS``
        after the switch, the collection's grace being shorter.
    """

    job_key: str
    released_by: str
    released_at_s: int
    not_before_s: int = 0


#: ``released_by`` of a candidate written for a failed job's manifest-less prefix.
FAILED_PREFIX: Final = "failed"
#: ``released_by`` of a candidate written for a split video's part once its join committed
#: (no asset ever references a part: its outputs were the join's inputs).
JOINED_PART: Final = "joined"
#: Jobs that end failed with outputs but no manifest: their prefix is collected too.
MANIFESTLESS: Final = frozenset({ATTEMPTS_EXHAUSTED, OUTPUT_CONFLICT})


def status_document(view: AssetView) -> dict[str, Any]:
    """The JSON an app reads of an asset (``GET /assets?key=...``, ``mediajobs status --json``).

    Shape::

        {"bucket": str, "key": str, "state": "pending|processing|review|ready|failed|rejected|deleted",
         "reason": str|None, "detail": str,
         "version": {"version_id": str|None, "etag": str, "size_bytes": int|None, "sequencer": str,
                     "checksum_sha256": bool},
         "sha256": str|None, "media": str|None, "placeholder": {...}|None,
         "updated_at_s": int,
         "recipes": {"web-image@1": {"job_key": str, "state": str, "reason": str|None,
                     "progress": float|None, "manifest_key": str|None, "serving": bool,
                     "outputs": [{"key", "format", "width", "height", "bytes"}]}},
         "next_recipes": [str]}

    ``sequencer`` is given without its padding zeros. While a backfill rolls a new recipe
    set out to the asset, ``recipes`` holds both sets: the serving jobs (``"serving":
    true``, what the app shows) and the new set's others (``"serving": false``, with their
    states); ``next_recipes`` lists the new set (empty otherwise).
    """
    version = view.version
    return {
        "bucket": view.bucket,
        "key": view.key,
        "state": str(view.state),
        "reason": view.reason,
        "detail": view.detail,
        "version": {
            "version_id": version.version_id,
            "etag": version.etag,
            "size_bytes": version.size_bytes,
            "sequencer": version.sequencer.lstrip("0") or "0",
            "checksum_sha256": version.checksum_sha256,
        },
        "sha256": view.sha256,
        "media": view.media,
        "placeholder": dict(view.placeholder) if view.placeholder is not None else None,
        "updated_at_s": view.updated_at_s,
        "recipes": {
            job.recipe: {
                "job_key": job.job_key,
                "state": str(job.state),
                "reason": job.reason,
                "progress": job.progress,
                "manifest_key": job.manifest_key,
                "serving": serving,
                "outputs": [
                    {"key": o.key, "format": o.format, "width": o.width, "height": o.height, "bytes": o.bytes}
                    for o in job.outputs
                ],
            }
            for job, serving in _listed(view)
        },
        "next_recipes": [job.recipe for job in view.next],
    }


def _listed(view: AssetView) -> list[tuple[AssetJob, bool]]:
    """The jobs a status document lists: the serving ones, then the ``next`` set's others."""
    serving = {job.recipe for job in view.jobs}
    return [(job, True) for job in view.jobs] + [(job, False) for job in view.next if job.recipe not in serving]


@dataclass(frozen=True)
class Deleted:
    """An ``Object Deleted`` event as the service needs it.

    Attributes
    ----------
    bucket, key: the object (the key URL-decoded).
    version_id: the version deleted, or the delete marker's id (``Delete Marker Created``);
        ``None`` on an unversioned bucket.
    deletion_type: a :class:`Deletion` value, or ``None`` when the event has none.
    sequencer: the event's sequencer as sent.
    reason: S3's ``reason`` (``DeleteObject``, ``Lifecycle Expiration``), for the logs.
    """

    bucket: str
    key: str
    version_id: str | None
    deletion_type: str | None
    sequencer: str | None
    reason: str | None = None


# -- What a change of an asset writes (the rules of the ``Assets`` port) -------------------


@dataclass(frozen=True)
class AssetChange:
    """What one change of an asset writes, in one transaction.

    Attributes
    ----------
    view: the asset as it will be stored.
    add: job keys whose reference row is put.
    drop: job keys whose reference row is deleted.
    candidates: one per job released (``drop``), released by this asset.
    """

    view: AssetView
    add: frozenset[str] = frozenset()
    drop: frozenset[str] = frozenset()
    candidates: tuple[Candidate, ...] = ()


def _released(
    bucket: str, key: str, job_keys: frozenset[str], now_s: int, not_before_s: int = 0
) -> tuple[Candidate, ...]:
    by = reference_id(bucket, key)
    return tuple(Candidate(job_key, by, now_s, not_before_s) for job_key in sorted(job_keys))


def plan_current(
    old: AssetView | None,
    bucket: str,
    key: str,
    version: AssetVersion,
    *,
    sha256: str | None,
    media: str | None,
    jobs: Sequence[AssetJob] | None,
    now_s: int,
) -> AssetChange | None:
    """What making ``version`` current writes, given the asset ``old`` as read: the rules of
    the ``Assets`` port's ``make_current`` (``service_layer/ports.py``). Pure.

    Returns
    -------
    Plan | None
        ``None`` when nothing is written: a greater sequencer is current (superseded), or
        the same event again with nothing to attach (``old`` is the answer then).
    """
    if old is not None and version.sequencer < old.version.sequencer:
        return None
    if old is not None and version.sequencer == old.version.sequencer:
        if jobs is None or old.jobs or old.state == AssetState.DELETED:
            return None
        new = replace(old, sha256=sha256, media=media, jobs=tuple(jobs), updated_at_s=now_s)
        return AssetChange(new, add=new.job_keys)
    if old is not None and old.state != AssetState.DELETED and same_version(old.version, version):
        # The same version named by a later event: only the sequencer moves.
        return AssetChange(replace(old, version=version, updated_at_s=now_s))
    new = AssetView(
        bucket, key, AssetState.PENDING, version, sha256=sha256, media=media, jobs=tuple(jobs or ()), updated_at_s=now_s
    )
    before = old.job_keys if old is not None else frozenset()
    released = before - new.job_keys
    return AssetChange(
        new, add=new.job_keys - before, drop=released, candidates=_released(bucket, key, released, now_s)
    )


def plan_delete(
    old: AssetView | None, bucket: str, key: str, version: AssetVersion, *, now_s: int
) -> AssetChange | None:
    """What deleting the asset writes, given the asset ``old`` as read: ``None``
    when superseded (the stored sequencer is equal or greater); else the ``deleted`` asset
    (a tombstone when unknown), every reference dropped with its candidate. Pure."""
    if old is not None and version.sequencer <= old.version.sequencer:
        return None
    released = old.job_keys if old is not None else frozenset()
    new = AssetView(bucket, key, AssetState.DELETED, version, updated_at_s=now_s)
    return AssetChange(new, drop=released, candidates=_released(bucket, key, released, now_s))


def plan_record(
    old: AssetView | None,
    sequencer: str,
    jobs: Sequence[AssetJob],
    *,
    now_s: int,
    failure: tuple[str, str] | None = None,
    placeholder: Mapping[str, Any] | None = None,
) -> tuple[AssetChange, tuple[str, ...]] | None:
    """What recording job states writes: the asset with ``jobs`` merged forward only
    and its state summarised (never moving back), the same states merged into its ``next``
    set (a job both sets share), which is switched to when that makes it whole
    (:func:`promoted`), and the job keys that get a ``failed`` candidate (failed
    ``attempts_exhausted`` or ``output_conflict``); ``None`` when ``sequencer`` is not the
    current one or the asset is deleted. Pure."""
    new = recorded(old, sequencer, jobs, now_s=now_s, failure=failure, placeholder=placeholder)
    if new is None:
        return None
    change = AssetChange(new)
    if new.next:
        change = promoted(replace(new, next=merge_jobs(new.next, jobs)), now_s=now_s)
    failed = tuple(j.job_key for j in change.view.jobs if j.state == AssetJobState.FAILED and j.reason in MANIFESTLESS)
    return change, failed


# -- A backfill's rollout of a new recipe set (docs/backfill.md) ---------------------------


def _forward(a: AssetJob, b: AssetJob) -> AssetJob:
    """The further of two states of one job (``b`` when equal)."""
    return b if job_may_move(a.state, b.state) else a


def promoted(view: AssetView, *, now_s: int) -> AssetChange:
    """``view`` written, switched to its ``next`` set when every job of it is ``done`` --
    or, for an asset that ended ``failed`` or ``rejected`` (it has no ready set to keep
    serving), when every job of it has ended, ``done`` or ``failed``: the ``next`` jobs
    become the serving ones, the state is theirs (:func:`summarize`), and the jobs only the
    old set used lose this asset's reference, each with a candidate not collected before
    ``view.next_grace_s`` from now. Otherwise ``view`` as it is. The switch is one write of
    the asset: a reader sees the old set ready, or the new one, never neither. A ready asset
    whose new set failed keeps the old one. A refused asset moves to the new keys of its
    refusal (a key algorithm's backfill leaves no job at an old key), and a failed one is
    made ready by a new set that succeeds. Pure."""
    ended = (AssetJobState.DONE, AssetJobState.FAILED) if view.state in _NOTHING_SERVED else (AssetJobState.DONE,)
    if not view.next or not all(job.state in ended for job in view.next):
        return AssetChange(view)
    jobs = view.next
    state, reason, detail = summarize(jobs)
    new = replace(view, jobs=jobs, next=(), next_grace_s=0, state=state, reason=reason, detail=detail)
    retired = frozenset(j.job_key for j in view.jobs) - frozenset(j.job_key for j in jobs)
    hold = now_s + view.next_grace_s
    return AssetChange(new, drop=retired, candidates=_released(view.bucket, view.key, retired, now_s, hold))


def plan_upgrade(
    old: AssetView | None, sequencer: str, wanted: Sequence[AssetJob], *, now_s: int, grace_s: int
) -> AssetChange | None:
    """What a backfill writes to give the version of ``sequencer`` the recipe set whose
    jobs are ``wanted`` (in the set's order, each in the state the ledger has it). Pure.

    * ``None`` (nothing to write) when the version is no longer current, the asset is
      deleted, its serving jobs are that set already (with no ``next`` set), or its
      ``next`` set is, with nothing new to merge. Served by it already with another
      ``next`` set (a rollback during a backfill): that set is dropped, its jobs released.
    * Otherwise ``wanted`` becomes the asset's ``next`` set: a job the serving set shares
      keeps its further state, a job it lacks gets this asset's reference row (``add``: the
      collection never takes a job an asset waits for), and a different ``next`` set left
      by an earlier backfill is dropped (its jobs' references, with candidates). The
      serving jobs keep serving; when every ``next`` job is already done the switch
      happens in this same write (:func:`promoted`), and the retired jobs are kept
      ``grace_s`` seconds.
    """
    if old is None or old.state == AssetState.DELETED or old.version.sequencer != sequencer:
        return None
    keys = [job.job_key for job in wanted]
    if not keys:
        return None
    if keys == [job.job_key for job in old.jobs]:  # served by it already: a stale next set goes
        if not old.next:
            return None
        stale = frozenset(j.job_key for j in old.next) - frozenset(keys)
        new = replace(old, next=(), next_grace_s=0, updated_at_s=now_s)
        return AssetChange(new, drop=stale, candidates=_released(old.bucket, old.key, stale, now_s))
    serving = {job.job_key: job for job in old.jobs}
    if keys == [job.job_key for job in old.next]:
        merged = merge_jobs(old.next, wanted)
        if merged == old.next:
            return None
        return promoted(replace(old, next=merged, updated_at_s=now_s), now_s=now_s)
    next_jobs = tuple(_forward(serving[j.job_key], j) if j.job_key in serving else j for j in wanted)
    new = replace(old, next=next_jobs, next_grace_s=grace_s, updated_at_s=now_s)
    stale = frozenset(j.job_key for j in old.next) - frozenset(keys) - frozenset(serving)
    change = promoted(new, now_s=now_s)
    return replace(
        change,
        add=change.add | (frozenset(keys) - old.job_keys),
        drop=change.drop | stale,
        candidates=change.candidates + _released(old.bucket, old.key, stale, now_s),
    )


def plan_next(old: AssetView | None, jobs: Sequence[AssetJob], *, now_s: int) -> AssetChange | None:
    """What recording the end of jobs of an asset's ``next`` set writes (a backfill's job
    ended elsewhere): ``jobs`` merged forward into ``next``, switched to when whole
    (:func:`promoted`); ``None`` when the asset is deleted or its ``next`` set has none of
    them, or nothing moves. Pure."""
    if old is None or old.state == AssetState.DELETED or not old.next:
        return None
    merged = merge_jobs(old.next, jobs)
    if merged == old.next:
        return None
    return promoted(replace(old, next=merged, updated_at_s=now_s), now_s=now_s)
