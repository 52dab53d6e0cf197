"""The ports: what the service layer needs of the world, as Protocols.

Adapters (``mediajobs.adapters``) implement them with AWS SDKs, Pillow and ffmpeg; tests
implement them with fakes (``tests/fakes.py``); the composition root
(``mediajobs.bootstrap``) chooses which. Nothing here imports an SDK.

* :class:`ObjectStore` -- S3: the original and the derivatives.
* :class:`LeaseRows` -- the writes a table offers the leases held on its rows.
* :class:`Ledger` -- DynamoDB: one row per job key, claims, commits, jobs in steps.
* :class:`Sources` -- DynamoDB: what is known of a source version or a content before
  reading it.
* :class:`Assets` -- DynamoDB: the asset records (what an app asks), the references each
  job has, and the collection candidates.
* :class:`PromoRecords` -- DynamoDB: each album's latest promo request.
* :class:`UploadSigner` -- S3: presigned uploads whose headers are signed.
* :class:`Queue` -- SQS: every operation on the queue a record came from (visibility,
  hand-over, delete, return).
* :class:`Step` -- one recipe step (``image.variants``, ``video.renditions`` ...): turns an
  original into files and decisions.
* :class:`LabelSource` -- Rekognition's ``DetectModerationLabels``: the moderation labels
  of a picture.
* :class:`DecisionLog` -- Firehose: the decisions as data, one record each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from mediajobs.domain.assets import AssetJob, AssetVersion, AssetView, Candidate
from mediajobs.domain.backfill import Backfill, BackfillState
from mediajobs.domain.jobs import (
    Claim,
    Delivery,
    Downloaded,
    JobSpec,
    JobView,
    KnownSource,
    ObjectHead,
    ObjectRef,
    OutputCandidate,
    OutputRecord,
    Reading,
    RenderContext,
    RenderedFile,
)
from mediajobs.domain.moderation import Label
from mediajobs.domain.parts import Split
from mediajobs.domain.promo import PromoRecord


class ObjectStore(Protocol):
    """What the pipeline needs of S3 (see :class:`mediajobs.adapters.s3.S3Store`)."""

    def head(self, ref: ObjectRef) -> ObjectHead: ...
    def download(self, ref: ObjectRef, dest: Path, *, etag: str | None = None) -> Downloaded: ...
    def presigned_get(self, ref: ObjectRef, *, expires_s: int) -> str: ...
    def put_file_if_absent(self, bucket: str, key: str, path: Path, *, content_type: str) -> bool: ...
    def put_if_absent(self, bucket: str, key: str, body: bytes, *, content_type: str) -> bool: ...
    def listing(self, bucket: str, prefix: str) -> dict[str, str]: ...
    def keys(self, bucket: str, prefix: str, *, limit: int) -> list[str]:
        """Up to ``limit`` keys under ``prefix``, in UTF-8 binary order (``ListObjectsV2``).

        Raises
        ------
        TransientFailure
            The listing failed.
        """
        ...

    def delete_prefix(self, bucket: str, prefix: str, *, first: str | None = None) -> int:
        """Delete every object under ``prefix`` (the key ``first`` before the others: the
        manifest, so that no reader meets a set without it); returns how many were deleted.
        On a versioned bucket this creates delete markers (a lifecycle rule expires the
        noncurrent versions).

        Raises
        ------
        TransientFailure
            A delete or listing failed (deleting again is harmless).
        """
        ...


class LeaseRows(Protocol):
    """The writes a table offers the leases held on its rows
    (:class:`~mediajobs.service_layer.lease.Lease`): each conditioned on the holder's token."""

    def renew(self, key: str, token: str, *, lease_until_s: int, now_s: int) -> None:
        """Extend the lease ``token`` holds on ``key`` to ``lease_until_s``.

        Raises
        ------
        Superseded
            ``token`` holds the row no more.
        TransientFailure
            The write failed.
        """
        ...

    def release(self, key: str, token: str, *, detail: str, now_s: int) -> None:
        """Give back the lease ``token`` holds on ``key`` (``detail``: why).

        Raises
        ------
        Superseded
            ``token`` holds the row no more (a lease that is not ours is left alone).
        TransientFailure
            The write failed.
        """
        ...


class Ledger(LeaseRows, Protocol):
    """What the pipeline needs of the job ledger (see :class:`mediajobs.adapters.ledger.DynamoLedger`).

    Its lease writes (``renew``, ``release``) are a job claim's: released, a job is a
    ``transient_failure`` the next claim takes over.
    """

    def find(self, job_keys: list[str]) -> dict[str, JobView]: ...
    def get(self, job_key: str) -> JobView | None: ...
    def claim(self, spec: JobSpec, *, now_s: int, lease_until_s: int, seen: JobView | None = None) -> Claim: ...
    def register_outputs(
        self, job_key: str, token: str, candidates: list[OutputCandidate], *, now_s: int
    ) -> frozenset[OutputCandidate]: ...
    def stage_manifest(self, job_key: str, token: str, body: str, *, now_s: int) -> str: ...
    def complete(
        self,
        job_key: str,
        token: str,
        *,
        manifest_key: str,
        outputs: Sequence[OutputRecord],
        now_s: int,
        decisions: Mapping[str, Any] | None = None,
        provenance: Mapping[str, Any] | None = None,
    ) -> JobView: ...
    def fail_permanently(
        self,
        job_key: str,
        token: str,
        *,
        reason: str,
        detail: str,
        now_s: int,
        decisions: Mapping[str, Any] | None = None,
    ) -> JobView: ...
    def hold(self, job_key: str, token: str, decisions: Mapping[str, Any], *, now_s: int) -> JobView: ...
    def wait_again(self, job_key: str, token: str, pending: frozenset[str], *, now_s: int) -> JobView: ...
    def review(self, job_key: str, review: Mapping[str, Any], *, now_s: int) -> JobView | None: ...
    def wait(self, spec: JobSpec, pending: frozenset[str], *, now_s: int) -> bool: ...
    def split(
        self, job_key: str, token: str, pending: frozenset[str], split: Split, *, now_s: int, requests_until_s: int
    ) -> JobView: ...
    def requests_sent(self, job_key: str, requests_until_s: int, *, now_s: int) -> None: ...
    def register(self, input_key: str, waiter_key: str, *, now_s: int) -> bool: ...
    def input_done(self, waiter_key: str, input_key: str, *, now_s: int) -> tuple[JobView | None, bool]: ...
    def input_failed(
        self, waiter_key: str, input_key: str, reason: str | None, detail: str | None, *, now_s: int
    ) -> bool: ...
    def told(self, input_key: str, waiter_keys: frozenset[str], *, now_s: int) -> None: ...


class CollectionLedger(Protocol):
    """What the collector needs of the job ledger.

    A ``done`` job goes ``collecting`` under the collector's lease (:meth:`begin_collection`),
    then ``collected`` or back to ``done`` (:meth:`end_collection`); every write after the
    first is conditional on the collector's token, so a render that took an expired
    collection over is never undone. A failed job's manifest-less prefix is swept without a
    state change (:meth:`mark_swept`).
    """

    def find(self, job_keys: list[str]) -> dict[str, JobView]: ...

    def renew(self, job_key: str, token: str, *, lease_until_s: int, now_s: int) -> None:
        """Extend the collector's lease (as :meth:`LeaseRows.renew`)."""
        ...

    def begin_collection(self, job_key: str, token: str, *, lease_until_s: int, now_s: int, seen: JobView) -> bool:
        """``seen`` (a row :func:`~mediajobs.domain.jobs.collectable` took) -> ``collecting``
        held by ``token`` until ``lease_until_s``, fenced on ``seen``; ``False`` when the row
        changed since it was read (a render finished, another collector got there ...)."""
        ...

    def end_collection(self, job_key: str, token: str, *, collected: bool, now_s: int) -> None:
        """``collecting`` -> ``collected`` (the manifest and outputs forgotten,
        ``collected_at_s`` set) or, when ``collected`` is false, back to ``done``.

        Raises
        ------
        Superseded
            ``token`` no longer holds the collection (a render took it over).
        """
        ...

    def mark_swept(self, job_key: str, *, now_s: int) -> None:
        """Record ``collected_at_s`` on a ``permanent_failure`` row whose prefix was swept
        (no-op on any other state)."""
        ...


class Assets(Protocol):
    """What the service needs of the asset records (see
    :class:`mediajobs.adapters.assets.DynamoAssets`).

    Every write that changes which version is current changes the asset item and the
    reference rows in one DynamoDB transaction conditional on the asset's stored
    sequencer (read just before; a lost race reads again and retries), so no interleaving
    of workers can lose or double a reference. Sequencers are in
    :func:`~mediajobs.domain.assets.sequencer_order` form.
    """

    def get(self, bucket: str, key: str) -> AssetView | None:
        """The asset (strongly consistent read), or ``None`` when never seen."""
        ...

    def get_many(self, bucket: str, keys: Sequence[str]) -> dict[str, AssetView]:
        """The assets of ``keys`` that exist, by key (strongly consistent ``BatchGetItem``
        requests of up to 100 keys)."""
        ...

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
        """Make ``version`` the asset's current version, or find it current already.

        Parameters
        ----------
        version: the version and the sequencer of the event naming it.
        sha256, media: its content, when known.
        jobs: its jobs (``pending``), when the content is known; ``None`` before (a later
            call with the jobs attaches them and their references).

        Returns
        -------
        AssetView | None
            The asset as stored after the call; ``None`` when a greater sequencer is
            current (the event is superseded: nothing was written).

        Same sequencer (the same event again): the stored asset is returned unchanged,
        except that jobs not attached yet are attached (with their references). Greater
        sequencer naming the version already current
        (:func:`~mediajobs.domain.assets.same_version`): only the sequencer is stored, the
        state stays. Greater sequencer otherwise: one transaction puts the asset (``pending``, or ``deleted`` history
        dropped), puts a reference row under each job it now uses, deletes those of the
        jobs the replaced version used and no longer does, and writes a
        :class:`~mediajobs.domain.assets.Candidate` for each job so released.

        Raises
        ------
        TransientFailure
            Transaction conflicts or throttling persisted past the adapter's retries.
        """
        ...

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
        """Apply job states to the version made current by ``sequencer``, forward only
        (:func:`~mediajobs.domain.assets.merge_jobs`), and set the asset's state from
        them (:func:`~mediajobs.domain.assets.summarize`); ``failure`` (reason, detail)
        fails the version itself (a refusal before any job); ``placeholder`` is stored
        when given. A job ending failed with outputs but no manifest
        (``attempts_exhausted``, ``output_conflict``) gets a ``failed`` candidate.

        Returns the asset as stored, or ``None`` when ``sequencer`` is no longer current
        (nothing written)."""
        ...

    def progress(self, bucket: str, key: str, sequencer: str, job_key: str, fraction: float, *, now_s: int) -> None:
        """Set a ``processing`` job's progress (0-1) if ``sequencer`` is still current;
        failures are logged, never raised (progress is advice)."""
        ...

    def delete(self, bucket: str, key: str, version: AssetVersion, *, now_s: int) -> AssetView | None:
        """Record the asset ``deleted`` by the event whose version and sequencer are
        ``version`` (the delete marker's version id, or the version deleted): one
        transaction conditional on the stored sequencer that drops every reference and
        writes their candidates. An unknown asset is recorded ``deleted`` (a tombstone:
        a late ``Object Created`` of an older version is then superseded).

        Returns the asset as stored, or ``None`` when superseded (nothing written).

        Raises
        ------
        TransientFailure
            As :meth:`make_current`.
        """
        ...

    def referenced(self, job_key: str) -> bool:
        """Whether any asset references ``job_key`` now (strongly consistent)."""
        ...

    def references(self, job_key: str) -> int:
        """How many assets reference ``job_key`` now (strongly consistent; for checks)."""
        ...

    def candidates(self, *, released_before_s: int, limit: int, now_s: int | None = None) -> list[Candidate]:
        """Up to ``limit`` collection candidates released before ``released_before_s`` and,
        with ``now_s``, not held past it (:attr:`~mediajobs.domain.assets.Candidate.not_before_s`)."""
        ...

    def candidates_of(self, job_key: str) -> list[Candidate]:
        """Every candidate of ``job_key`` (strongly consistent): the collection waits for the
        last release of a job, not the first."""
        ...

    def drop_candidate(self, candidate: Candidate) -> None:
        """Delete one candidate (conditional on its ``released_at_s``: a newer release of
        the same job by the same asset stays)."""
        ...

    def release(self, job_keys: Sequence[str], released_by: str, *, now_s: int) -> None:
        """Write a candidate for each of ``job_keys`` released by ``released_by`` (jobs no
        asset references: a split video's parts once joined), released at ``now_s`` unless
        one is there already (its time kept: idempotent)."""
        ...

    def upgrade(
        self, bucket: str, key: str, sequencer: str, wanted: Sequence[AssetJob], *, now_s: int, grace_s: int
    ) -> AssetView | None:
        """Give the version of ``sequencer`` a backfill's recipe set (its jobs ``wanted``,
        in the states the ledger has them): :func:`~mediajobs.domain.assets.plan_upgrade`,
        one transaction with the reference rows of the jobs it lacks. Returns the asset
        as stored, or ``None`` when nothing was written."""
        ...

    def record_next(self, bucket: str, key: str, jobs: Sequence[AssetJob], *, now_s: int) -> AssetView | None:
        """Record job ends in the asset's ``next`` set, switching to it when whole
        (:func:`~mediajobs.domain.assets.plan_next`). Returns the asset as stored, or
        ``None`` when nothing was written."""
        ...

    def referrers(self, job_key: str) -> list[tuple[str, str]]:
        """The (bucket, key) of every asset referencing ``job_key`` (strongly consistent)."""
        ...

    def scan(
        self, segment: int, segments: int, cursor: Mapping[str, Any] | None, *, limit: int
    ) -> tuple[list[AssetView], Mapping[str, Any] | None]:
        """One page (at most ``limit`` assets) of segment ``segment`` of a parallel scan of
        the assets from ``cursor`` (``None``: the start); the cursor to go on from, ``None``
        at the segment's end."""
        ...


class Backfills(Protocol):
    """Where backfills, their scan cursors and their counts are kept (see
    :class:`mediajobs.adapters.backfills.DynamoBackfills`). Every count is written with
    what it counts, conditionally, so each job and each page is counted once."""

    def get(self, backfill_id: str) -> Backfill | None:
        """The backfill, or ``None``."""
        ...

    def of_change(self, change: str) -> Backfill | None:
        """The latest backfill of ``change``, or ``None``."""
        ...

    def all(self) -> list[Backfill]:
        """Every backfill, oldest first."""
        ...

    def cursor(self, backfill_id: str, segment: int) -> tuple[Mapping[str, Any] | None, bool]:
        """A segment's cursor and whether its scan ended."""
        ...

    def later(self, backfill_id: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` assets (bucket, key) to look at again."""
        ...

    def enqueued(self, backfill_id: str, limit: int) -> list[str]:
        """Up to ``limit`` job keys counted ``enqueued`` and not ended."""
        ...

    def mark(self, backfill_id: str, job_key: str) -> str | None:
        """How the job was counted (``enqueued``, ``reused``, ``done``, ``failed``,
        ``dropped``), or ``None``."""
        ...

    def reopen(self, backfill_id: str, job_key: str, *, now_s: int) -> bool:
        """A ``dropped`` job wanted again: back to ``enqueued`` (``dropped`` less 1), once."""
        ...

    def create(self, backfill: Backfill, *, after: int) -> bool:
        """Store a new backfill as its change's, if the change's generation is ``after``."""
        ...

    def move(self, backfill_id: str, to: BackfillState, *, now_s: int) -> Backfill | None:
        """Move the state (:data:`~mediajobs.domain.backfill.MOVES`); the backfill after, or
        ``None`` when the move is not allowed."""
        ...

    def advance(
        self,
        backfill_id: str,
        segment: int,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
        *,
        scanned: int,
        now_s: int,
    ) -> bool:
        """Move a segment's cursor from ``old`` to ``new`` counting ``scanned`` assets;
        ``False`` when it was moved already."""
        ...

    def count(self, backfill_id: str, job_key: str, state: str, *, now_s: int) -> bool:
        """Count a job once, ``enqueued`` or ``reused``; ``False`` when counted already."""
        ...

    def end(self, backfill_id: str, job_key: str, state: str, *, now_s: int) -> bool:
        """Count an ``enqueued`` job's end once, ``done`` or ``failed``."""
        ...

    def keep_for_later(self, backfill_id: str, bucket: str, key: str) -> bool:
        """Note an asset to look at again (once)."""
        ...

    def looked_again(self, backfill_id: str, bucket: str, key: str) -> bool:
        """Drop an asset from those to look at again (once)."""
        ...


class PromoRecords(Protocol):
    """The promo registry: each album's latest promo request (see
    :class:`mediajobs.adapters.promos.DynamoPromos`)."""

    def get(self, bucket: str, prefix: str) -> PromoRecord | None:
        """The album's record, or ``None``."""
        ...

    def all(self) -> list[PromoRecord]:
        """Every album's record."""
        ...

    def put(self, record: PromoRecord, *, previous: PromoRecord | None, now_s: int) -> bool:
        """Store the album's record if it is still ``previous``, with the job's reference
        (the previous job's released); ``False`` when another request wrote first."""
        ...


class SignedRequestLike(Protocol):
    """What a signer returns (:class:`mediajobs.adapters.uploads.SignedRequest`)."""

    def to_json(self) -> dict[str, Any]:
        """``{"method", "url", "headers"}``."""
        ...


class UploadSigner(Protocol):
    """Presigned uploads to S3 (see :class:`mediajobs.adapters.uploads.S3Uploads`)."""

    def presigned_put(
        self, bucket: str, key: str, *, content_type: str, size_bytes: int, sha256: str, expires_s: int
    ) -> SignedRequestLike:
        """A PUT signing the type, the length and the checksum."""
        ...

    def start_multipart(self, bucket: str, key: str, *, content_type: str) -> str:
        """A multipart upload's id."""
        ...

    def presigned_part(
        self, bucket: str, key: str, upload_id: str, number: int, *, size_bytes: int, sha256: str, expires_s: int
    ) -> SignedRequestLike:
        """An UploadPart signing the length and the checksum."""
        ...

    def complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[tuple[int, str, str]]) -> None:
        """Complete a multipart upload."""
        ...


class Sources(LeaseRows, Protocol):
    """What the pipeline needs of the source index (see :class:`mediajobs.adapters.sources.SourceIndex`).

    An entry is :class:`~mediajobs.domain.jobs.KnownSource` (hash, size and media type
    remembered), :class:`~mediajobs.domain.jobs.Reading` (a delivery is reading the
    bytes, under a lease) or ``None`` (nothing known). Its lease writes are a reading mark's.
    """

    def lookup(self, source_id: str, *, now_s: int) -> KnownSource | Reading | None: ...
    def begin_reading(
        self, source_id: str, token: str, *, now_s: int, lease_until_s: int
    ) -> KnownSource | Reading | None: ...
    def remember(self, source_ids: list[str], known: KnownSource, *, now_s: int) -> None: ...


class Queue(Protocol):
    """Every operation the worker makes on the queue its records come from (see
    :class:`mediajobs.adapters.sqs.SqsQueue`): the lease keeper keeps a record hidden while
    its job runs (:class:`~mediajobs.service_layer.lease.LeaseKeeper`), the delivery policy
    hands records over and returns the failed ones
    (:class:`~mediajobs.service_layer.delivery.Batch`)."""

    def set_visibility(self, delivery: Delivery, seconds: int) -> None:
        """Hide the message held by ``delivery`` for ``seconds`` (0-43200) from now.

        Raises
        ------
        DeliveryLost
            The receipt handle no longer names a receive of ours.
        TransientFailure
            Any other failure.
        """
        ...

    def resend(self, queue_arn: str, body: str, delay_s: int, *, handovers: int = 0) -> None:
        """Queue ``body`` again as a new message, delivered after ``delay_s`` (at most 900),
        carrying the hand-over count ``handovers``.

        Raises
        ------
        TransientFailure
            If it could not be sent (the record is then returned instead).
        """
        ...

    def delete(self, queue_arn: str, receipt_handle: str) -> None:
        """Delete a received message now; failures are logged, never raised."""
        ...

    def return_later(self, queue_arn: str, delays: list[tuple[str, int]]) -> None:
        """Set the visibility of records going back, ``(receipt handle, seconds)`` each;
        failures are logged, never raised (such a message comes back when its current
        visibility ends)."""
        ...


@dataclass(frozen=True)
class StepResult:
    """What a step made of one original.

    Attributes
    ----------
    files: the derivatives written into the step's ``out_dir`` (may be empty: a step whose
        result is data only, such as a placeholder, writes none).
    decisions: JSON data recorded in the manifest's ``decisions`` (what was decided about
        the outputs, or the step's values).
    cpu_s: CPU seconds a child process outside the worker's own accounting spent on it
        (the bounded render child's report), ``None`` when none did.
    """

    files: list[RenderedFile] = field(default_factory=list)
    decisions: Mapping[str, Any] = field(default_factory=dict)
    cpu_s: float | None = None


class Step(Protocol):
    """One recipe step, a plugin: registered by name in the composition root, chosen by a
    recipe's ``step``, its parameters validated by ``params_model`` when the recipe loads.

    Attributes
    ----------
    name: the step's name as recipes spell it (``image.variants``).
    params_model: the strict (``extra="forbid"``) pydantic model of its parameters.
    """

    @property
    def name(self) -> str: ...

    @property
    def params_model(self) -> type[BaseModel]: ...

    def run(self, source: Path, params: Any, context: RenderContext, out_dir: Path) -> StepResult:
        """Turn the original at ``source`` into ``out_dir``'s files and decisions.

        Raises
        ------
        PermanentFailure
            The input cannot be rendered (its reason code says why).
        TransientFailure
            Something that may pass failed (:class:`DeadlineReached` at the invocation's end).
        """
        ...


@dataclass(frozen=True)
class LabelsFound:
    """What a label source found in one picture.

    Attributes
    ----------
    labels: the moderation labels (name, parent, confidence 0-100), every level of the
        taxonomy the source returned.
    model_version: the source's model version (Rekognition's ``ModerationModelVersion``,
        ``"7.0"``): a decision is re-read against it, since labels were renamed between models.
    human_loop: Rekognition's ``HumanLoopActivationOutput`` when it sent one (a human
        review loop was configured and activated), else ``None``.
    """

    labels: tuple[Label, ...]
    model_version: str | None
    human_loop: Mapping[str, Any] | None = None


class LabelSource(Protocol):
    """Moderation labels of a picture (Rekognition's ``DetectModerationLabels`` when
    deployed; the embedded AWS answers it locally).

    Attributes
    ----------
    name: what the decision records as its label source (``"rekognition"``).
    """

    @property
    def name(self) -> str: ...

    def detect(self, jpeg: bytes, *, min_confidence: float) -> LabelsFound:
        """The labels of the JPEG ``jpeg`` (at most 5,242,880 bytes) of confidence at least
        ``min_confidence`` (0-100).

        Raises
        ------
        TransientFailure
            The source failed or throttled (the job is retried).
        PermanentFailure
            ``invalid_media`` when the source refuses the picture itself.
        """
        ...


class DecisionLog(Protocol):
    """Where every decision record goes (:mod:`mediajobs.domain.decisions`): Firehose when
    deployed, the embedded AWS's Firehose locally."""

    def append(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Append ``records`` (each one JSON object, one line of the log).

        Never raises: a record that cannot be sent is logged and counted
        (``DecisionsNotLogged``), since the decision itself is already in the ledger.
        """
        ...
