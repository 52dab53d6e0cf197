"""The pipeline's observer: hooks for callers that watch a delivery (the CLI, the storm,
tests, the worker's metrics)."""

from __future__ import annotations

from typing import Protocol

from mediajobs.domain.jobs import Claim, ObjectRef, SourceResult


class PipelineObserver:
    """Hooks for callers that want to watch the pipeline (the CLI, tests). No-ops by default."""

    def claimed(self, claim: Claim, source: ObjectRef) -> None:
        """Called when this worker holds a job's claim (``claim.took_over`` for takeovers)."""

    def reading(self, source: ObjectRef) -> None:
        """Called when this delivery holds the reading mark of an original whose media type
        is unknown, before reading it: duplicates meanwhile wait (:class:`~mediajobs.service_layer.reading.Reader`)."""

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


class NoObserver(PipelineObserver):
    """The observer of a pipeline nobody watches."""


class DeliveryObserver(Protocol):
    """What the worker's handler reports of each record (the metrics:
    :class:`~mediajobs.adapters.metrics.FunctionMetrics`)."""

    def record(self, result: SourceResult) -> None:
        """The record was acknowledged with ``result``."""
        ...

    def busy(self) -> None:
        """The record came back busy (another worker holds a job)."""
        ...

    def transient(self) -> None:
        """The record goes back after a transient failure."""
        ...


class Unobserved:
    """A :class:`DeliveryObserver` that reports nothing."""

    def record(self, result: SourceResult) -> None:
        """Nothing."""

    def busy(self) -> None:
        """Nothing."""

    def transient(self) -> None:
        """Nothing."""
