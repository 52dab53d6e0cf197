"""The ports: what the service layer needs of the world, as Protocols.

Adapters (``mediajobs.adapters``) implement them with AWS SDKs, Pillow and ffmpeg; tests
implement them with fakes (``tests/fakes.py``); the composition root
(``mediajobs.bootstrap``) chooses which. Nothing here imports an SDK.

* :class:`ObjectStore` -- S3: the original and the derivatives.
* :class:`Ledger` -- DynamoDB: one row per job key, claims and commits.
* :class:`Sources` -- DynamoDB: what is known of a source version or a content before
  reading it.
* :class:`Queue` -- SQS: every operation on the queue a record came from (visibility,
  hand-over, delete, return).
* :class:`Step` -- one recipe step (``image.variants``, ``video.renditions`` ...): turns an
  original into files and decisions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

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


class ObjectStore(Protocol):
    """What the pipeline needs of S3 (see :class:`mediajobs.adapters.s3.S3Store`)."""

    def head(self, ref: ObjectRef) -> ObjectHead: ...
    def download(self, ref: ObjectRef, dest: Path, *, etag: str | None = None) -> Downloaded: ...
    def put_file_if_absent(self, bucket: str, key: str, path: Path, *, content_type: str) -> bool: ...
    def put_if_absent(self, bucket: str, key: str, body: bytes, *, content_type: str) -> bool: ...
    def listing(self, bucket: str, prefix: str) -> dict[str, str]: ...


class LeaseLedger(Protocol):
    """What the heartbeat needs of the ledger."""

    def renew(self, job_key: str, token: str, *, lease_until_s: int, now_s: int) -> None: ...
    def release_transient(self, job_key: str, token: str, *, detail: str, now_s: int) -> None: ...


class Ledger(LeaseLedger, Protocol):
    """What the pipeline needs of the job ledger (see :class:`mediajobs.adapters.ledger.DynamoLedger`)."""

    def find(self, job_keys: list[str]) -> dict[str, JobView]: ...
    def claim(self, spec: JobSpec, *, now_s: int, lease_until_s: int, seen: JobView | None = None) -> Claim: ...
    def register_outputs(
        self, job_key: str, token: str, candidates: list[OutputCandidate], *, now_s: int
    ) -> frozenset[OutputCandidate]: ...
    def stage_manifest(self, job_key: str, token: str, body: str, *, now_s: int) -> str: ...
    def complete(
        self, job_key: str, token: str, *, manifest_key: str, outputs: list[OutputRecord], now_s: int
    ) -> None: ...
    def fail_permanently(self, job_key: str, token: str, *, reason: str, detail: str, now_s: int) -> None: ...


class Sources(Protocol):
    """What the pipeline needs of the source index (see :class:`mediajobs.adapters.sources.SourceIndex`).

    An entry is :class:`~mediajobs.domain.jobs.KnownSource` (hash, size and media type
    remembered), :class:`~mediajobs.domain.jobs.Reading` (another delivery is reading the
    bytes now, until its lease ends) or ``None`` (nothing known).
    """

    def lookup(self, source_id: str, *, now_s: int) -> KnownSource | Reading | None: ...
    def begin_reading(
        self, source_id: str, token: str, *, now_s: int, lease_until_s: int
    ) -> KnownSource | Reading | None: ...
    def remember(self, source_ids: list[str], known: KnownSource, *, now_s: int) -> None: ...
    def abandon(self, source_id: str, token: str) -> None: ...


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
    """

    files: list[RenderedFile] = field(default_factory=list)
    decisions: Mapping[str, Any] = field(default_factory=dict)


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
