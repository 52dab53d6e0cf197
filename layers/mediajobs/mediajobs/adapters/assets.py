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
``revision``, or its absence). A lost race (``ConditionalCheckFailed``) reads again and
retries; so do ``TransactionConflict`` and throttling, a bounded number of times.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeVar

from pynamodb.attributes import JSONAttribute, MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import (
    DeleteError,
    DoesNotExist,
    GetError,
    PutError,
    PynamoDBException,
    QueryError,
    TransactWriteError,
    UpdateError,
)
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from mediajobs.adapters.ledger import _SIZE_LIMIT, bind_model, dynamo_failure
from mediajobs.adapters.outbox import OutboxModel, outbox_item, outbox_model
from mediajobs.domain.assets import (
    FAILED_PREFIX,
    AssetJob,
    AssetJobState,
    AssetState,
    AssetVersion,
    AssetView,
    Candidate,
    asset_id,
    recorded,
    reference_id,
    same_version,
)
from mediajobs.domain.errors import (
    ATTEMPTS_EXHAUSTED,
    OUTPUT_CONFLICT,
    UNSTORABLE_INPUT,
    PermanentFailure,
    TransientFailure,
)
from mediajobs.domain.jobs import OutputRecord
from mediajobs.domain.notifications import Notification, notification_for

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Model)
T = TypeVar("T")

_CONDITION_FAILED: Final = "ConditionalCheckFailedException"
_CANCELED: Final = "TransactionCanceledException"
#: Cancellation reasons worth another round (DynamoDB API reference, TransactWriteItems):
#: a condition failed (another worker changed the asset: read again), a conflict with
#: another transaction or write on one of the items, throttling.
_RETRY_REASONS: Final = frozenset(
    {"ConditionalCheckFailed", "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
#: Request errors worth another round.
_RETRY_CODES: Final = frozenset(
    {
        _CONDITION_FAILED,
        "TransactionConflictException",
        "TransactionInProgressException",
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
    }
)
#: Jobs that end failed with outputs but no manifest: their prefix is collected too.
_MANIFESTLESS: Final = frozenset({ATTEMPTS_EXHAUSTED, OUTPUT_CONFLICT})
#: DynamoDB's limit of items in one ``TransactWriteItems`` (developer guide, "Service,
#: account, and table quotas").
MAX_TRANSACTION_ITEMS: Final = 100
#: Partitions of the candidates: the first hex digit of the job key.
CANDIDATE_PARTITIONS: Final = tuple("0123456789abcdef")
ASSET_SK: Final = "asset"


class AssetModel(Model):
    """The asset item: ``pk`` ``asset#<bucket>/<key>``, ``sk`` ``asset``.

    ``sequencer`` is stored in :func:`~mediajobs.domain.assets.sequencer_order` form (so a
    string comparison is a numeric one); ``jobs`` is a JSON list of the jobs (recipe,
    job_key, state, reason, detail, manifest_key, outputs as ``OutputRecord.to_json``
    dicts, progress); ``progress_by_job`` maps a job key to the fraction the heartbeat last
    reported (one cheap ``UpdateItem``; it wins over ``jobs``' progress while the job is
    ``processing``). ``revision`` counts the writes of everything but progress: every such
    write is conditional on the revision read.
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
    sha256 = UnicodeAttribute(null=True)
    media = UnicodeAttribute(null=True)
    jobs = JSONAttribute(null=True)
    progress_by_job = MapAttribute[str, Any](null=True)
    reason = UnicodeAttribute(null=True)
    detail = UnicodeAttribute(null=True)
    placeholder = JSONAttribute(null=True)
    updated_at_s = NumberAttribute(default=0)
    revision = NumberAttribute(default=0)


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


class AssetModels(NamedTuple):
    """The three models of the assets table, bound to one table and endpoint, and the
    outbox's (``None`` for a reader: an adapter without it cannot write an asset's end)."""

    asset: type[AssetModel]
    reference: type[ReferenceModel]
    candidate: type[CandidateModel]
    outbox: type[OutboxModel] | None = None


def asset_models(table_name: str, region: str, host: str | None, outbox_table_name: str | None = None) -> AssetModels:
    """The models of the assets table (:func:`mediajobs.adapters.ledger.bind_model` each).

    Parameters
    ----------
    table_name: DynamoDB table name (``settings.assets_table_name``).
    region: AWS region.
    host: endpoint URL (the embedded moto server), or ``None`` for AWS.
    outbox_table_name: the outbox table (``settings.outbox_table_name``), for a writer.
    """
    return AssetModels(
        bind_model(AssetModel, table_name, region, host),
        bind_model(ReferenceModel, table_name, region, host),
        bind_model(CandidateModel, table_name, region, host),
        outbox_model(outbox_table_name, region, host) if outbox_table_name else None,
    )


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


# -- The pure part: what a change writes ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
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


def _released(bucket: str, key: str, job_keys: frozenset[str], now_s: int) -> tuple[Candidate, ...]:
    by = reference_id(bucket, key)
    return tuple(Candidate(job_key, by, now_s) for job_key in sorted(job_keys))


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
) -> Plan | None:
    """What :meth:`DynamoAssets.make_current` writes, given the asset ``old`` as read: the
    rules of the ``Assets`` port (``service_layer/ports.py``). Pure.

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
        new = dataclasses.replace(old, sha256=sha256, media=media, jobs=tuple(jobs), updated_at_s=now_s)
        return Plan(new, add=new.job_keys)
    if old is not None and old.state != AssetState.DELETED and same_version(old.version, version):
        # The same version named by a later event: only the sequencer moves.
        return Plan(dataclasses.replace(old, version=version, updated_at_s=now_s))
    new = AssetView(
        bucket, key, AssetState.PENDING, version, sha256=sha256, media=media, jobs=tuple(jobs or ()), updated_at_s=now_s
    )
    before = old.job_keys if old is not None else frozenset()
    released = before - new.job_keys
    return Plan(new, add=new.job_keys - before, drop=released, candidates=_released(bucket, key, released, now_s))


def plan_delete(old: AssetView | None, bucket: str, key: str, version: AssetVersion, *, now_s: int) -> Plan | None:
    """What :meth:`DynamoAssets.delete` writes, given the asset ``old`` as read: ``None``
    when superseded (the stored sequencer is equal or greater); else the ``deleted`` asset
    (a tombstone when unknown), every reference dropped with its candidate. Pure."""
    if old is not None and version.sequencer <= old.version.sequencer:
        return None
    released = old.job_keys if old is not None else frozenset()
    new = AssetView(bucket, key, AssetState.DELETED, version, updated_at_s=now_s)
    return Plan(new, drop=released, candidates=_released(bucket, key, released, now_s))


def plan_record(
    old: AssetView | None,
    sequencer: str,
    jobs: Sequence[AssetJob],
    *,
    now_s: int,
    failure: tuple[str, str] | None = None,
    placeholder: Mapping[str, Any] | None = None,
) -> tuple[AssetView, tuple[str, ...]] | None:
    """What :meth:`DynamoAssets.record` writes: the asset with ``jobs`` merged forward only
    and its state summarised (never moving back), and the job keys that get a ``failed``
    candidate (failed ``attempts_exhausted`` or ``output_conflict``); ``None`` when
    ``sequencer`` is not the current one or the asset is deleted. Pure."""
    new = recorded(old, sequencer, jobs, now_s=now_s, failure=failure, placeholder=placeholder)
    if new is None:
        return None
    failed = tuple(j.job_key for j in new.jobs if j.state == AssetJobState.FAILED and j.reason in _MANIFESTLESS)
    return new, failed


# -- Items <-> views ---------------------------------------------------------------------


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
        ),
        sha256=item.sha256,
        media=item.media,
        jobs=tuple(_job_of(j, progress) for j in item.jobs or ()),
        reason=item.reason,
        detail=item.detail or "",
        placeholder=item.placeholder,
        updated_at_s=int(item.updated_at_s or 0),
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
    )


def _too_large(message: str | None) -> bool:
    return bool(_SIZE_LIMIT.search(message or ""))


class _Read(NamedTuple):
    view: AssetView | None
    revision: int | None


class _Retry(Exception):
    """A round lost a race or met a conflict: read again. ``condition_failed``: a
    condition failed (the asset's, or the outbox item's)."""

    def __init__(self, why: str, *, condition_failed: bool = False) -> None:
        super().__init__(why)
        self.condition_failed = condition_failed


#: Rounds a write makes (each re-reads the asset) before giving up with TransientFailure.
MAX_ROUNDS: Final = 10
#: Backoff between rounds: full jitter up to base * 2**round, capped (seconds).
BACKOFF_BASE_S: Final = 0.01
BACKOFF_CAP_S: Final = 0.2


class DynamoAssets:
    """The ``Assets`` port (``service_layer/ports.py``) on the assets table.

    Parameters
    ----------
    models: the bound models (:func:`asset_models`, or ``LocalStack.asset_models()``).
    sleep: how a retry waits (seconds); tests may pass a no-op.
    rounds: rounds a write makes before :class:`~mediajobs.domain.errors.TransientFailure`.
    """

    def __init__(
        self, models: AssetModels, *, sleep: Callable[[float], None] = time.sleep, rounds: int = MAX_ROUNDS
    ) -> None:
        self._models = models
        self._sleep = sleep
        self._rounds = rounds

    # -- reads ---------------------------------------------------------------------------

    def _read(self, bucket: str, key: str) -> _Read:
        try:
            item = self._models.asset.get(asset_pk(bucket, key), ASSET_SK, consistent_read=True)
        except DoesNotExist:
            return _Read(None, None)
        except GetError as exc:
            raise dynamo_failure(exc, "asset read") from exc
        return _Read(_view(item), int(item.revision or 0))

    def get(self, bucket: str, key: str) -> AssetView | None:
        """The asset (strongly consistent ``GetItem``), or ``None`` when never seen.

        Raises
        ------
        TransientFailure
            The read failed.
        """
        return self._read(bucket, key).view

    def referenced(self, job_key: str) -> bool:
        """Whether any reference row is under ``job_key``: one strongly consistent
        ``Query`` with ``Limit`` 1."""
        model = self._models.reference
        try:
            rows = model.query(
                reference_pk(job_key), model.sk.startswith("ref#"), consistent_read=True, limit=1, page_size=1
            )
            return next(iter(rows), None) is not None
        except QueryError as exc:
            raise dynamo_failure(exc, "references query") from exc

    def references(self, job_key: str) -> int:
        """How many reference rows are under ``job_key`` (a strongly consistent ``Query``
        with ``Select COUNT``, every page)."""
        model = self._models.reference
        try:
            return int(model.count(reference_pk(job_key), model.sk.startswith("ref#"), consistent_read=True))
        except QueryError as exc:
            raise dynamo_failure(exc, "references count") from exc

    def candidates(self, *, released_before_s: int, limit: int) -> list[Candidate]:
        """Up to ``limit`` candidates released before ``released_before_s``: the 16
        ``collect#<hex>`` partitions queried in order (a filter on ``released_at_s``), by
        job key and releaser within each."""
        model = self._models.candidate
        found: list[Candidate] = []
        try:
            for digit in CANDIDATE_PARTITIONS:
                if len(found) >= limit:
                    break
                rows = model.query(
                    f"collect#{digit}",
                    filter_condition=model.released_at_s < released_before_s,
                    consistent_read=True,
                    limit=limit - len(found),
                )
                found.extend(Candidate(r.job_key, r.released_by, int(r.released_at_s)) for r in rows)
        except QueryError as exc:
            raise dynamo_failure(exc, "candidates query") from exc
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
        try:
            rows = model.query(candidate_pk(job_key), model.sk.startswith(f"{job_key}#"), consistent_read=True)
            return [Candidate(r.job_key, r.released_by, int(r.released_at_s)) for r in rows]
        except QueryError as exc:
            raise dynamo_failure(exc, "candidates query") from exc

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
        try:
            row.delete(condition=model.released_at_s == candidate.released_at_s)
        except DeleteError as exc:
            if exc.cause_response_code != _CONDITION_FAILED:
                raise dynamo_failure(exc, "candidate delete") from exc

    # -- writes --------------------------------------------------------------------------

    def _rounds_of(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` until it does not raise :class:`_Retry`, at most ``rounds``
        times, with jittered exponential backoff between."""
        for round_ in range(self._rounds):
            try:
                return attempt()
            except _Retry as retry:
                last = retry
                if round_ + 1 < self._rounds:
                    self._sleep(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**round_)))
        raise TransientFailure(f"{what}: still losing races after {self._rounds} rounds ({last})")

    def _asset_condition(self, read: _Read) -> Any:
        model = self._models.asset
        if read.revision is None:
            return model.pk.does_not_exist()
        return model.revision == read.revision

    def _commit(self, read: _Read, plan: Plan, what: str, failed: Sequence[str] = (), now_s: int = 0) -> None:
        """Write ``plan`` (and a ``failed`` candidate per job key of ``failed``) in one
        ``TransactWriteItems``, the asset conditional on being the one ``read``; with the
        notification the change owes (:func:`~mediajobs.domain.notifications.notification_for`),
        put in the outbox conditional on its id not being there. When only that condition
        failed (the asset is still as read: the transition was told already), the change is
        written again without it.

        Raises
        ------
        _Retry
            A condition failed, or a conflict or throttling cancelled the transaction.
        PermanentFailure
            ``unstorable_input``: an item over DynamoDB's size limit.
        TransientFailure
            Anything else.
        """
        notification = notification_for(read.view, plan.view)
        if notification is not None and self._models.outbox is None:
            raise RuntimeError(f"{what}: an asset's end is written only with the outbox (AssetModels.outbox)")
        try:
            self._write(read, plan, what, failed, now_s, notification)
        except _Retry as retry:
            if notification is None or not retry.condition_failed or not self._told(read, notification):
                raise
            log.info("notification already in the outbox", extra={"notification_id": notification.id})
            self._write(read, plan, what, failed, now_s, None)

    def _told(self, read: _Read, notification: Notification) -> bool:
        """Whether a failed condition was the outbox item's: the asset is still as ``read``
        (its condition held), and no other item of the transaction has one. One read, made
        only after a failed condition; the outbox itself is never read (the worker may only
        put into it)."""
        return self._read(notification.bucket, notification.key).revision == read.revision

    def _write(
        self,
        read: _Read,
        plan: Plan,
        what: str,
        failed: Sequence[str],
        now_s: int,
        notification: Notification | None,
    ) -> None:
        models = self._models
        view = plan.view
        revision = (read.revision or 0) + 1
        item = _item(models.asset, view, revision)
        count = 1 + len(plan.add) + len(plan.drop) + len(plan.candidates) + len(failed) + (notification is not None)
        if count > MAX_TRANSACTION_ITEMS:  # a version has a few recipes: never near it
            raise TransientFailure(f"{what}: {count} items, over DynamoDB's {MAX_TRANSACTION_ITEMS}")
        if count == 1:
            try:
                item.save(condition=self._asset_condition(read))
            except PutError as exc:
                if exc.cause_response_code in _RETRY_CODES:
                    raise _Retry(
                        exc.cause_response_code, condition_failed=exc.cause_response_code == _CONDITION_FAILED
                    ) from exc
                raise dynamo_failure(exc, what) from exc
            return
        # The connection of the asset model: its region, endpoint and credentials (Meta).
        connection = models.asset._get_connection().connection
        try:
            with TransactWrite(connection=connection) as tx:
                tx.save(item, condition=self._asset_condition(read))
                if notification is not None:
                    assert models.outbox is not None
                    told = outbox_item(models.outbox, notification, now_s=view.updated_at_s or now_s)
                    tx.save(told, condition=models.outbox.id.does_not_exist())
                for job_key in sorted(plan.add):
                    ref_sk = reference_sk(view.bucket, view.key)
                    tx.save(models.reference(reference_pk(job_key), ref_sk, bucket=view.bucket, object_key=view.key))
                for job_key in sorted(plan.drop):
                    tx.delete(models.reference(reference_pk(job_key), reference_sk(view.bucket, view.key)))
                for c in plan.candidates:
                    tx.save(
                        models.candidate(
                            candidate_pk(c.job_key),
                            candidate_sk(c.job_key, c.released_by),
                            job_key=c.job_key,
                            released_by=c.released_by,
                            released_at_s=c.released_at_s,
                        )
                    )
                cand = models.candidate
                for job_key in failed:
                    # The first failure's time stays (if_not_exists).
                    tx.update(
                        cand(candidate_pk(job_key), candidate_sk(job_key, FAILED_PREFIX)),
                        actions=[
                            cand.job_key.set(job_key),
                            cand.released_by.set(FAILED_PREFIX),
                            cand.released_at_s.set(cand.released_at_s | now_s),
                        ],
                    )
        except TransactWriteError as exc:
            given = [r for r in exc.cancellation_reasons if r is not None]
            too_large = [r.message for r in given if r.code == "ValidationError" and _too_large(r.message)]
            if too_large:  # "An item size becomes too large (larger than 400 KB)" (TransactWriteItems)
                raise PermanentFailure(UNSTORABLE_INPUT, f"{what} refused by DynamoDB: {too_large[0]}") from exc
            reasons = {r.code for r in given}
            if exc.cause_response_code == _CANCELED and reasons and reasons <= _RETRY_REASONS:
                raise _Retry(",".join(sorted(reasons)), condition_failed="ConditionalCheckFailed" in reasons) from exc
            if exc.cause_response_code in _RETRY_CODES:
                raise _Retry(exc.cause_response_code or "") from exc
            raise dynamo_failure(exc, what) from exc

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
        """Make ``version`` current (the port's rules; :func:`plan_current`): read, plan,
        one transaction conditional on the asset read; a lost race reads again.

        Returns
        -------
        AssetView | None
            The asset as stored after the call; ``None`` when superseded.

        Raises
        ------
        TransientFailure
            Races, conflicts or throttling past :data:`MAX_ROUNDS` rounds, or a failed request.
        PermanentFailure
            ``unstorable_input``: the asset item over DynamoDB's 400 KB.
        """

        def attempt() -> AssetView | None:
            read = self._read(bucket, key)
            plan = plan_current(read.view, bucket, key, version, sha256=sha256, media=media, jobs=jobs, now_s=now_s)
            if plan is None:
                old = read.view
                return old if old is not None and old.version.sequencer == version.sequencer else None
            self._commit(read, plan, "asset make_current")
            return plan.view

        return self._rounds_of("asset make_current", attempt)

    def delete(self, bucket: str, key: str, version: AssetVersion, *, now_s: int) -> AssetView | None:
        """Record the asset ``deleted`` (:func:`plan_delete`): one transaction conditional
        on the asset read that drops every reference and writes their candidates; an
        unknown asset gets a tombstone.

        Returns the asset as stored, or ``None`` when superseded.

        Raises
        ------
        TransientFailure
            As :meth:`make_current`.
        """

        def attempt() -> AssetView | None:
            read = self._read(bucket, key)
            plan = plan_delete(read.view, bucket, key, version, now_s=now_s)
            if plan is None:
                return None
            self._commit(read, plan, "asset delete")
            return plan.view

        return self._rounds_of("asset delete", attempt)

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
        (:func:`plan_record`), conditional on the asset read; a ``failed`` candidate for
        each job failed without a manifest, in the same transaction.

        Returns the asset as stored, or ``None`` when ``sequencer`` is no longer current.

        Raises
        ------
        TransientFailure
            As :meth:`make_current`.
        """

        def attempt() -> AssetView | None:
            read = self._read(bucket, key)
            planned = plan_record(read.view, sequencer, jobs, now_s=now_s, failure=failure, placeholder=placeholder)
            if planned is None:
                return None
            view, failed = planned
            self._commit(read, Plan(view), "asset record", failed=failed, now_s=now_s)
            return view

        return self._rounds_of("asset record", attempt)

    def progress(self, bucket: str, key: str, sequencer: str, job_key: str, fraction: float, *, now_s: int) -> None:
        """Set a job's progress: one ``UpdateItem`` of ``progress_by_job.<job key>``,
        conditional on ``sequencer`` being current (read back only while the job is
        ``processing``). Never raises: failures are logged."""
        model = self._models.asset
        item = model(asset_pk(bucket, key), ASSET_SK)
        try:
            item.update(
                actions=[model.progress_by_job[job_key].set(float(fraction)), model.updated_at_s.set(now_s)],
                condition=(model.sequencer == sequencer) & model.progress_by_job.exists(),
            )
        except UpdateError as exc:
            if exc.cause_response_code != _CONDITION_FAILED:
                log.warning("asset progress not stored: %s", exc.cause_response_code or exc)
        except PynamoDBException as exc:  # progress is advice
            log.warning("asset progress not stored: %s", exc)
