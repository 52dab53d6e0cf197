"""The asset records in DynamoDB, through PynamoDB: :class:`DynamoAssets`, the ``Assets`` port.

One table (``AssetsTable``: keys ``pk`` and ``sk``, strings; ``docs/assets.md``, "The
table") holds three kinds of items, one model each:

* :class:`AssetModel` -- ``asset#<bucket>/<key>``, ``asset``: the asset (its version, state
  and jobs, as :class:`~mediajobs.domain.assets.AssetView` has them);
* :class:`ReferenceModel` -- ``job#<job key>``, ``ref#<reference_id>``: that the asset's
  current version uses the job;
* :class:`CandidateModel` -- ``collect#<first hex digit of the job key>``, ``<job key>#<released_by>``:
  that the job may have nothing left referencing it since ``released_at_s``.

Every change of the current version (:meth:`DynamoAssets.make_current`,
:meth:`DynamoAssets.delete`) reads the asset (strongly consistent), computes what to write
with pure code (:func:`plan_current`, :func:`plan_delete`), then writes the asset, the
reference rows it adds and deletes and the candidates of the jobs it releases in ONE
``TransactWriteItems``, the asset's put conditional on the item being the one read (its
``revision``, or its absence), with the notification the change owes collected by the
unit of work (:mod:`mediajobs.adapters.dynamo`), which puts it in the outbox in the same
transaction. A lost race (a failed condition, a conflict, throttling) reads again and
decides anew, in the unit of work's rounds. The first round of a change starts from the
asset as this adapter last read or wrote it, when it has (a delivery reads its asset
first, then writes it up to three times): the condition on the revision makes a stale
start a lost round, never a wrong write, and saves a read per write otherwise; a decision
taken on it to write nothing is taken again on a fresh read. The rules of each change are the domain's
(:func:`~mediajobs.domain.assets.plan_current`, :func:`~mediajobs.domain.assets.plan_delete`,
:func:`~mediajobs.domain.assets.plan_record`).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeVar

from pynamodb.attributes import BooleanAttribute, JSONAttribute, MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from mediajobs.adapters.dynamo import Lost, UnitOfWork
from mediajobs.domain.assets import (
    FAILED_PREFIX,
    AssetChange,
    AssetJob,
    AssetJobState,
    AssetState,
    AssetVersion,
    AssetView,
    Candidate,
    asset_id,
    plan_current,
    plan_delete,
    plan_next,
    plan_record,
    plan_upgrade,
    reference_id,
)
from mediajobs.domain.errors import PermanentFailure, TransientFailure
from mediajobs.domain.jobs import OutputRecord
from mediajobs.domain.notifications import notification_for

log = logging.getLogger(__name__)


#: Partitions of the candidates: the first hex digit of the job key.
CANDIDATE_PARTITIONS: Final = tuple("0123456789abcdef")
ASSET_SK: Final = "asset"


class AssetModel(Model):
    """The asset item: ``pk`` ``asset#<bucket>/<key>``, ``sk`` ``asset``.

    ``sequencer`` is stored in :func:`~mediajobs.domain.assets.sequencer_order` form (so a
    string comparison is a numeric one); ``jobs`` is a JSON list of the jobs (recipe,
    job_key, state, reason, detail, manifest_key, outputs as ``OutputRecord.to_json``
    dicts, progress); ``next_jobs`` and ``next_grace_s`` are a backfill's ``next`` set
    (:attr:`~mediajobs.domain.assets.AssetView.next`), absent without one;
    ``progress_by_job`` maps a job key to the fraction the heartbeat last
    reported (one cheap ``UpdateItem``; it wins over ``jobs``' progress while the job is
    ``processing``). ``revision`` counts every write, progress too: every write but
    progress's is conditional on the revision read, so a write that started from an item
    read (or remembered) before a progress write loses its round and reads again, rather
    than put back the progress it read.
    """

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    bucket = UnicodeAttribute()
    object_key = UnicodeAttribute(attr_name="key")
    state = UnicodeAttribute()
    version_id = UnicodeAttribute(null=True)
    etag = UnicodeAttribute(null=True)
    size_bytes = NumberAttribute(null=True)
    sequencer = UnicodeAttribute()
    checksum_sha256 = BooleanAttribute(null=True)
    sha256 = UnicodeAttribute(null=True)
    media = UnicodeAttribute(null=True)
    jobs = JSONAttribute(null=True)
    progress_by_job = MapAttribute[str, Any](null=True)
    reason = UnicodeAttribute(null=True)
    detail = UnicodeAttribute(null=True)
    placeholder = JSONAttribute(null=True)
    updated_at_s = NumberAttribute(default=0)
    revision = NumberAttribute(default=0)
    next_jobs = JSONAttribute(null=True)
    next_grace_s = NumberAttribute(null=True)


class ReferenceModel(Model):
    """A reference row: ``pk`` ``job#<job key>``, ``sk`` ``ref#<reference_id(bucket, key)>``."""

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    bucket = UnicodeAttribute()
    object_key = UnicodeAttribute(attr_name="key")


class CandidateModel(Model):
    """A collection candidate: ``pk`` ``collect#<job_key[0]>``, ``sk`` ``<job key>#<released_by>``."""

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    job_key = UnicodeAttribute()
    released_by = UnicodeAttribute()
    released_at_s = NumberAttribute()
    not_before_s = NumberAttribute(null=True)


class AssetModels(NamedTuple):
    """The three models of the assets table, bound to one table and endpoint (the client
    factory binds them: :meth:`mediajobs.adapters.clients.ClientFactory.asset_models`)."""

    asset: type[AssetModel]
    reference: type[ReferenceModel]
    candidate: type[CandidateModel]


def asset_pk(bucket: str, key: str) -> str:
    """The asset item's partition key: ``asset#<bucket>/<key>``."""
    return f"asset#{asset_id(bucket, key)}"


def reference_pk(job_key: str) -> str:
    """The partition of a job's reference rows: ``job#<job key>``."""
    return f"job#{job_key}"


def reference_sk(bucket: str, key: str) -> str:
    """A reference row's sort key: ``ref#<reference_id(bucket, key)>``."""
    return f"ref#{reference_id(bucket, key)}"


def candidate_pk(job_key: str) -> str:
    """A candidate's partition: ``collect#<first hex digit of the job key>``."""
    return f"collect#{job_key[0]}"


def candidate_sk(job_key: str, released_by: str) -> str:
    """A candidate's sort key: ``<job key>#<released_by>``."""
    return f"{job_key}#{released_by}"


# -- Items <-> views ---------------------------------------------------------------------


def _candidate(row: CandidateModel) -> Candidate:
    return Candidate(row.job_key, row.released_by, int(row.released_at_s), int(row.not_before_s or 0))


def _job_json(job: AssetJob) -> dict[str, Any]:
    return {
        "recipe": job.recipe,
        "job_key": job.job_key,
        "state": str(job.state),
        "reason": job.reason,
        "detail": job.detail,
        "manifest_key": job.manifest_key,
        "outputs": [o.to_json() for o in job.outputs],
        "progress": job.progress,
    }


def _job_of(data: Mapping[str, Any], progress: Mapping[str, Any]) -> AssetJob:
    state = AssetJobState(data["state"])
    fraction = data.get("progress")
    if state == AssetJobState.PROCESSING and data["job_key"] in progress:
        fraction = float(progress[data["job_key"]])
    return AssetJob(
        recipe=data["recipe"],
        job_key=data["job_key"],
        state=state,
        reason=data.get("reason"),
        detail=data.get("detail") or "",
        manifest_key=data.get("manifest_key"),
        outputs=tuple(OutputRecord.from_json(o) for o in data.get("outputs") or ()),
        progress=fraction,
    )


def _view(item: AssetModel) -> AssetView:
    progress = item.progress_by_job.as_dict() if item.progress_by_job is not None else {}
    size = item.size_bytes
    return AssetView(
        bucket=item.bucket,
        key=item.object_key,
        state=AssetState(item.state),
        version=AssetVersion(
            version_id=item.version_id,
            etag=item.etag or "",
            size_bytes=int(size) if size is not None else None,
            sequencer=item.sequencer,
            checksum_sha256=bool(item.checksum_sha256),
        ),
        sha256=item.sha256,
        media=item.media,
        jobs=tuple(_job_of(j, progress) for j in item.jobs or ()),
        reason=item.reason,
        detail=item.detail or "",
        placeholder=item.placeholder,
        updated_at_s=int(item.updated_at_s or 0),
        next=tuple(_job_of(j, {}) for j in item.next_jobs or ()),
        next_grace_s=int(item.next_grace_s or 0),
    )


def asset_of_image(model: type[AssetModel], image: Mapping[str, Any] | None) -> AssetView | None:
    """The asset an item image of the assets table holds (a stream record's ``NewImage`` or
    ``OldImage``, in DynamoDB JSON), or ``None``: no image, or a reference row's or a
    candidate's."""
    if not image or image.get("sk", {}).get("S") != ASSET_SK:
        return None
    return _view(model.from_raw_data(dict(image)))


def _item(model: type[AssetModel], view: AssetView, revision: int) -> AssetModel:
    version = view.version
    return model(
        asset_pk(view.bucket, view.key),
        ASSET_SK,
        bucket=view.bucket,
        object_key=view.key,
        state=str(view.state),
        version_id=version.version_id,
        etag=version.etag,
        size_bytes=version.size_bytes,
        sequencer=version.sequencer,
        checksum_sha256=version.checksum_sha256 or None,
        sha256=view.sha256,
        media=view.media,
        jobs=[_job_json(j) for j in view.jobs],
        # Reset on every write: the jobs written carry the progress read.
        progress_by_job={},
        reason=view.reason,
        detail=view.detail,
        placeholder=dict(view.placeholder) if view.placeholder is not None else None,
        updated_at_s=view.updated_at_s,
        revision=revision,
        next_jobs=[_job_json(j) for j in view.next] or None,
        next_grace_s=view.next_grace_s or None,
    )


class _Read(NamedTuple):
    view: AssetView | None
    revision: int | None


T = TypeVar("T")

#: How many assets :class:`DynamoAssets` remembers as last read or written (a worker
#: handles one record at a time: a batch's are at most 10).
_REMEMBERED: Final = 64


class DynamoAssets:
    """The ``Assets`` port (``service_layer/ports.py``) on the assets table.

    Parameters
    ----------
    uow: the unit of work every request goes through (with the outbox, for a writer: an
        asset's end owes a notification).
    models: the bound models (:class:`AssetModels`).
    """

    def __init__(self, uow: UnitOfWork, models: AssetModels) -> None:
        self._uow = uow
        self._models = models
        # The asset as last read or written here, by (bucket, key): where the first round
        # of the next change starts (the module's docstring).
        self._last: OrderedDict[tuple[str, str], _Read] = OrderedDict()
        self._last_lock = threading.Lock()

    # -- reads ---------------------------------------------------------------------------

    def _read(self, bucket: str, key: str) -> _Read:
        item = self._uow.get(self._models.asset, asset_pk(bucket, key), ASSET_SK, what="asset read")
        read = _Read(None, None) if item is None else _Read(_view(item), int(item.revision or 0))
        self._remember(bucket, key, read)
        return read

    def _remember(self, bucket: str, key: str, read: _Read | None) -> None:
        """Keep ``read`` as the asset's last known item (``None``: forget it)."""
        with self._last_lock:
            if read is None:
                self._last.pop((bucket, key), None)
                return
            kept = self._last.get((bucket, key))
            if kept is not None and (kept.revision or 0) > (read.revision or 0):
                return  # a read answered before a later write of this adapter's landed
            self._last[(bucket, key)] = read
            self._last.move_to_end((bucket, key))
            while len(self._last) > _REMEMBERED:
                self._last.popitem(last=False)

    def _rounds(self, what: str, bucket: str, key: str, change: Callable[[_Read], tuple[T, bool]]) -> T:
        """The unit of work's rounds of ``change`` (decide, and write conditional on the
        read it is given; it returns its answer and whether it wrote). The first round
        starts from the asset as last read or written here, if remembered; a decision
        taken on it to write nothing is taken again on the asset read now (only a write is
        checked against the stored revision); every other round reads it again."""
        with self._last_lock:
            known = self._last.pop((bucket, key), None)

        def attempt() -> T:
            nonlocal known
            if known is not None:
                remembered, known = known, None
                answer, wrote = change(remembered)
                if wrote:
                    return answer
            return change(self._read(bucket, key))[0]

        return self._uow.rounds(what, attempt)

    def get(self, bucket: str, key: str) -> AssetView | None:
        """The asset (strongly consistent ``GetItem``), or ``None`` when never seen.

        Raises
        ------
        TransientFailure
            The read failed.
        """
        return self._read(bucket, key).view

    def get_many(self, bucket: str, keys: Sequence[str]) -> dict[str, AssetView]:
        """The assets of ``keys`` that exist, by key: strongly consistent ``BatchGetItem``
        requests (PynamoDB sends 100 keys each, DynamoDB's limit, and retries unprocessed
        ones). An album's listing reads its assets so, not one ``GetItem`` each.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the unit of work's.
        """
        wanted = [(asset_pk(bucket, key), ASSET_SK) for key in dict.fromkeys(keys)]
        items = self._uow.batch_get(self._models.asset, wanted, what="assets batch read")
        return {item.object_key: _view(item) for item in items}

    def referenced(self, job_key: str) -> bool:
        """Whether any reference row is under ``job_key``: one strongly consistent
        ``Query`` with ``Limit`` 1."""
        model = self._models.reference
        rows = self._uow.query(model, reference_pk(job_key), model.sk.startswith("ref#"), limit=1, what="references")
        return bool(rows)

    def references(self, job_key: str) -> int:
        """How many reference rows are under ``job_key`` (a strongly consistent ``Query``
        with ``Select COUNT``, every page)."""
        model = self._models.reference
        return self._uow.count(model, reference_pk(job_key), model.sk.startswith("ref#"), what="references count")

    def candidates(self, *, released_before_s: int, limit: int, now_s: int | None = None) -> list[Candidate]:
        """Up to ``limit`` candidates released before ``released_before_s`` and, with
        ``now_s``, not held past it (``not_before_s``): the 16 ``collect#<hex>`` partitions
        queried in order (a filter on ``released_at_s`` and ``not_before_s``), by job key and
        releaser within each. Held candidates are filtered out by DynamoDB, so a week of a
        backfill's retired jobs never fills a run's page."""
        model = self._models.candidate
        found: list[Candidate] = []
        condition = model.released_at_s < released_before_s
        if now_s is not None:
            condition &= model.not_before_s.does_not_exist() | (model.not_before_s <= now_s)
        for digit in CANDIDATE_PARTITIONS:
            if len(found) >= limit:
                break
            rows = self._uow.query(
                model,
                f"collect#{digit}",
                filter_condition=condition,
                limit=limit - len(found),
                what="candidates query",
            )
            found.extend(_candidate(r) for r in rows)
        return found

    def candidates_of(self, job_key: str) -> list[Candidate]:
        """Every candidate of ``job_key``: one ``Query`` of its ``collect#<hex>`` partition
        for the sort keys beginning ``<job key>#`` (strongly consistent).

        Raises
        ------
        TransientFailure
            The query failed.
        """
        model = self._models.candidate
        rows = self._uow.query(
            model, candidate_pk(job_key), model.sk.startswith(f"{job_key}#"), what="candidates query"
        )
        return [_candidate(r) for r in rows]

    def drop_candidate(self, candidate: Candidate) -> None:
        """Delete the candidate if its ``released_at_s`` is still the one given (a newer
        release of the job by the same asset stays).

        Raises
        ------
        TransientFailure
            The delete failed other than by its condition.
        """
        model = self._models.candidate
        row = model(candidate_pk(candidate.job_key), candidate_sk(candidate.job_key, candidate.released_by))
        self._uow.delete(row, model.released_at_s == candidate.released_at_s, what="candidate delete")

    def release(self, job_keys: Sequence[str], released_by: str, *, now_s: int) -> None:
        """Write a candidate per job key released by ``released_by``; one there already
        keeps its time (``if_not_exists``): one ``UpdateItem`` each.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the unit of work's.
        """
        cand = self._models.candidate
        for job_key in job_keys:
            row = cand(candidate_pk(job_key), candidate_sk(job_key, released_by))
            actions = [
                cand.job_key.set(job_key),
                cand.released_by.set(released_by),
                cand.released_at_s.set(cand.released_at_s | now_s),
            ]
            self._uow.update(row, actions, what="candidate release")

    # -- writes --------------------------------------------------------------------------

    def _commit(self, read: _Read, change: AssetChange, what: str, failed: Sequence[str] = (), now_s: int = 0) -> None:
        """Write ``change`` (and a ``failed`` candidate per job key of ``failed``) in one
        transaction, the asset conditional on being the one ``read``, with the
        notification the change owes (:func:`~mediajobs.domain.notifications.notification_for`)
        told to the unit of work.

        Raises
        ------
        Lost
            A condition failed, or a conflict or throttling cancelled the transaction.
        PermanentFailure
            ``unstorable_input``: an item over DynamoDB's size limit.
        TransientFailure
            Anything else.
        """
        models, view = self._models, change.view
        asset = models.asset
        condition = asset.pk.does_not_exist() if read.revision is None else asset.revision == read.revision
        written = _item(asset, view, (read.revision or 0) + 1)
        tx = self._uow.transaction(what).put(written, condition)
        notification = notification_for(read.view, view)
        if notification is not None:
            tx.tell(notification, now_s=view.updated_at_s or now_s)
        ref_sk = reference_sk(view.bucket, view.key)
        for job_key in sorted(change.add):
            tx.put(models.reference(reference_pk(job_key), ref_sk, bucket=view.bucket, object_key=view.key))
        for job_key in sorted(change.drop):
            tx.delete(models.reference(reference_pk(job_key), ref_sk))
        for c in change.candidates:
            row = models.candidate(
                candidate_pk(c.job_key),
                candidate_sk(c.job_key, c.released_by),
                job_key=c.job_key,
                released_by=c.released_by,
                released_at_s=c.released_at_s,
                not_before_s=c.not_before_s or None,
            )
            tx.put(row)
        cand = models.candidate
        for job_key in failed:  # the first failure's time stays (if_not_exists)
            row = cand(candidate_pk(job_key), candidate_sk(job_key, FAILED_PREFIX))
            actions = [
                cand.job_key.set(job_key),
                cand.released_by.set(FAILED_PREFIX),
                cand.released_at_s.set(cand.released_at_s | now_s),
            ]
            tx.update(row, actions)
        if not tx.commit():
            self._remember(view.bucket, view.key, None)
            raise Lost(what)
        self._remember(view.bucket, view.key, _Read(_view(written), (read.revision or 0) + 1))

    def make_current(
        self,
        bucket: str,
        key: str,
        version: AssetVersion,
        *,
        sha256: str | None,
        media: str | None,
        jobs: Sequence[AssetJob] | None,
        now_s: int,
    ) -> AssetView | None:
        """Make ``version`` current (the port's rules; :func:`~mediajobs.domain.assets.plan_current`):
        read, plan, one transaction conditional on the asset read; a lost race reads again.

        Returns
        -------
        AssetView | None
            The asset as stored after the call; ``None`` when superseded.

        Raises
        ------
        TransientFailure
            Races, conflicts or throttling past the unit of work's rounds, or a failed request.
        PermanentFailure
            ``unstorable_input``: the asset item over DynamoDB's 400 KB.
        """

        def attempt(read: _Read) -> tuple[AssetView | None, bool]:
            change = plan_current(read.view, bucket, key, version, sha256=sha256, media=media, jobs=jobs, now_s=now_s)
            if change is None:
                old = read.view
                return (old if old is not None and old.version.sequencer == version.sequencer else None), False
            self._commit(read, change, "asset make_current")
            return change.view, True

        return self._rounds("asset make_current", bucket, key, attempt)

    def delete(self, bucket: str, key: str, version: AssetVersion, *, now_s: int) -> AssetView | None:
        """Record the asset ``deleted`` (:func:`~mediajobs.domain.assets.plan_delete`): one
        transaction conditional on the asset read that drops every reference and writes
        their candidates; an unknown asset gets a tombstone.

        Returns the asset as stored, or ``None`` when superseded.

        Raises
        ------
        TransientFailure
            As :meth:`make_current`.
        """

        def attempt(read: _Read) -> tuple[AssetView | None, bool]:
            change = plan_delete(read.view, bucket, key, version, now_s=now_s)
            if change is None:
                return None, False
            self._commit(read, change, "asset delete")
            return change.view, True

        return self._rounds("asset delete", bucket, key, attempt)

    def record(
        self,
        bucket: str,
        key: str,
        sequencer: str,
        jobs: Sequence[AssetJob],
        *,
        now_s: int,
        failure: tuple[str, str] | None = None,
        placeholder: Mapping[str, Any] | None = None,
    ) -> AssetView | None:
        """Apply job states forward only to the version of ``sequencer``
        (:func:`~mediajobs.domain.assets.plan_record`), conditional on the asset read; a
        ``failed`` candidate for each job failed without a manifest, in the same transaction.

        Returns the asset as stored, or ``None`` when ``sequencer`` is no longer current.

        Raises
        ------
        TransientFailure
            As :meth:`make_current`.
        """

        def attempt(read: _Read) -> tuple[AssetView | None, bool]:
            planned = plan_record(read.view, sequencer, jobs, now_s=now_s, failure=failure, placeholder=placeholder)
            if planned is None:
                return None, False
            change, failed = planned
            self._commit(read, change, "asset record", failed=failed, now_s=now_s)
            return change.view, True

        return self._rounds("asset record", bucket, key, attempt)

    def upgrade(
        self, bucket: str, key: str, sequencer: str, wanted: Sequence[AssetJob], *, now_s: int, grace_s: int
    ) -> AssetView | None:
        """Give the version of ``sequencer`` a backfill's recipe set, whose jobs are
        ``wanted`` (:func:`~mediajobs.domain.assets.plan_upgrade`): one transaction
        conditional on the asset read, with the reference rows of the jobs it lacks (and,
        when every one is done already, the switch). Returns the asset as stored, or
        ``None`` when nothing was written (not current, deleted, or on that set already).

        Raises
        ------
        TransientFailure
            As :meth:`make_current`.
        """

        def attempt(read: _Read) -> tuple[AssetView | None, bool]:
            change = plan_upgrade(read.view, sequencer, wanted, now_s=now_s, grace_s=grace_s)
            if change is None:
                return None, False
            self._commit(read, change, "asset upgrade", now_s=now_s)
            return change.view, True

        return self._rounds("asset upgrade", bucket, key, attempt)

    def record_next(self, bucket: str, key: str, jobs: Sequence[AssetJob], *, now_s: int) -> AssetView | None:
        """Record the ends of jobs of the asset's ``next`` set, switching to it when whole
        (:func:`~mediajobs.domain.assets.plan_next`), conditional on the asset read.
        Returns the asset as stored, or ``None`` when nothing was written.

        Raises
        ------
        TransientFailure
            As :meth:`make_current`.
        """

        def attempt(read: _Read) -> tuple[AssetView | None, bool]:
            change = plan_next(read.view, jobs, now_s=now_s)
            if change is None:
                return None, False
            self._commit(read, change, "asset next", now_s=now_s)
            return change.view, True

        return self._rounds("asset next", bucket, key, attempt)

    def referrers(self, job_key: str) -> list[tuple[str, str]]:
        """The (bucket, key) of every asset with a reference row under ``job_key``: one
        strongly consistent ``Query``, every page.

        Raises
        ------
        TransientFailure
            The query failed.
        """
        model = self._models.reference
        rows = self._uow.query(model, reference_pk(job_key), model.sk.startswith("ref#"), what="referrers")
        return [(r.bucket, r.object_key) for r in rows]

    def scan(
        self, segment: int, segments: int, cursor: Mapping[str, Any] | None, *, limit: int
    ) -> tuple[list[AssetView], Mapping[str, Any] | None]:
        """One page of a parallel scan of the asset items: segment ``segment`` of
        ``segments`` (DynamoDB developer guide, "Parallel scan"), from ``cursor`` (the
        ``LastEvaluatedKey`` the previous page ended at; ``None``: the segment's start), at
        most ``limit`` assets (reference rows, candidates and backfill items are filtered
        out by DynamoDB). Eventually consistent.

        Returns
        -------
        (assets, cursor)
            The cursor to go on from, ``None`` at the segment's end.

        Raises
        ------
        TransientFailure
            The scan failed.
        """
        model = self._models.asset
        items, last = self._uow.scan_page(
            model, segment, segments, cursor, limit=limit, filter_condition=model.sk == ASSET_SK, what="assets scan"
        )
        return [_view(item) for item in items], last

    def progress(self, bucket: str, key: str, sequencer: str, job_key: str, fraction: float, *, now_s: int) -> None:
        """Set a job's progress: one ``UpdateItem`` of ``progress_by_job.<job key>``,
        conditional on ``sequencer`` being current and on the fraction stored being lower
        (two writers racing -- a split video's parts ending together -- never move it
        back); read back only while the job is ``processing``. Never raises: failures
        are logged."""
        model = self._models.asset
        item = model(asset_pk(bucket, key), ASSET_SK)
        actions = [
            model.progress_by_job[job_key].set(float(fraction)),
            model.updated_at_s.set(now_s),
            model.revision.add(1),
        ]
        self._remember(bucket, key, None)
        try:
            stored = model.progress_by_job[job_key]
            forward = stored.does_not_exist() | (stored < float(fraction))
            condition = (model.sequencer == sequencer) & model.progress_by_job.exists() & forward
            self._uow.update(item, actions, condition, what="asset progress")
        except (PermanentFailure, TransientFailure) as exc:  # progress is advice
            log.warning("asset progress not stored: %s", exc)
