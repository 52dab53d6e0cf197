"""The functions' metrics: CloudWatch embedded metric format through Powertools' ``Metrics``,
as observers of what the functions did (the only module that publishes metrics).

The worker's handler tells :class:`FunctionMetrics` what each record came to
(:meth:`~FunctionMetrics.record`, :meth:`~FunctionMetrics.busy`,
:meth:`~FunctionMetrics.transient`), the dispatcher what each notification did
(:meth:`~FunctionMetrics.dispatched`), the collector what a run did
(:meth:`~FunctionMetrics.collected`); the metrics of an invocation are published when it
ends (:meth:`~FunctionMetrics.around`). The metric names are the template's alarms' and
dashboard's (``tests/functional/test_template_contract.py`` holds them together).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from mediajobs.domain.jobs import SourceResult, SourceState

F = TypeVar("F", bound=Callable[..., Any])

#: The metric each count of a collection report is published as.
COLLECTION_METRICS: Final[Mapping[str, str]] = {
    "collected": "Collected",
    "revived": "Revived",
    "swept_failed": "SweptFailed",
    "waiting": "CollectionWaiting",
    "busy": "CollectionBusy",
    "lost": "CollectionLost",
    "errors": "CollectionErrors",
    "deleted_objects": "DerivativesDeleted",
}
#: The metric each outcome of a notification's dispatch is counted as.
DISPATCH_METRICS: Final[Mapping[str, str]] = {
    "delivered": "NotificationsDelivered",
    "refused": "NotificationsRefused",
    "raced": "NotificationsMarkedElsewhere",
}


#: The backfill's metrics, by the status document's field they publish.
BACKFILL_METRICS: Final = {
    "remaining": "BackfillRemaining",
    "done": "BackfillDone",
    "reused": "BackfillReused",
    "failed": "BackfillFailed",
}


class FunctionMetrics:
    """One function's metrics.

    Parameters
    ----------
    metrics: Powertools' ``Metrics`` (namespace and service from the template's
        ``POWERTOOLS_METRICS_NAMESPACE`` and ``POWERTOOLS_SERVICE_NAME``).
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def around(self, handler: F) -> F:
        """``handler`` publishing the invocation's metrics when it returns (``log_metrics``),
        and holding none afterwards: when ``POWERTOOLS_METRICS_DISABLED`` is set (tests, local
        runs), Powertools (3.x) neither prints nor clears them, so they would pile up from one
        invocation into the next -- its ``Metrics`` instances share one set -- and at 100
        values ``add_metric`` prints them anyway."""
        logged = self.metrics.log_metrics(handler)

        @functools.wraps(handler)
        def publishing(*args: Any, **kwargs: Any) -> Any:
            try:
                return logged(*args, **kwargs)
            finally:
                self.metrics.clear_metrics()

        return publishing  # type: ignore[return-value]

    def _count(self, name: str, value: float = 1, unit: MetricUnit = MetricUnit.Count) -> None:
        self.metrics.add_metric(name=name, unit=unit, value=value)

    def record(self, result: SourceResult) -> None:
        """A record the worker acknowledged with ``result``: ``EventsSuperseded``,
        ``OriginalsDeleted``, per job ``JobsReused`` or ``JobsClaimed`` and
        ``ProcessingSeconds``; a new permanent failure ``JobsFailed`` and
        ``JobsFailedByReason`` (dimension ``reason``: its own EMF document)."""
        if result.state is SourceState.SUPERSEDED:
            self._count("EventsSuperseded")
        elif result.state is SourceState.DELETED:
            self._count("OriginalsDeleted")
        for job in result.jobs:
            if job.reused:
                self._count("JobsReused")
            else:
                self._count("JobsClaimed")
                self._count("ProcessingSeconds", job.seconds, MetricUnit.Seconds)
        newly_failed = not result.jobs or not all(job.reused for job in result.jobs)
        if result.state is SourceState.PERMANENT_FAILURE and newly_failed:  # a reused failure was counted once
            self._count("JobsFailed")
            by_reason = EphemeralMetrics(namespace=self.metrics.namespace, service=self.metrics.service)
            by_reason.add_dimension(name="reason", value=str(result.reason))
            by_reason.add_metric(name="JobsFailedByReason", unit=MetricUnit.Count, value=1)
            by_reason.flush_metrics()

    def busy(self) -> None:
        """A record came back busy (``JobsBusy``)."""
        self._count("JobsBusy")

    def transient(self) -> None:
        """A record goes back after a transient failure (``JobsTransient``)."""
        self._count("JobsTransient")

    def dispatched(self, counts: Mapping[str, int]) -> None:
        """A notification's dispatch: ``delivered``, ``refused`` and ``raced`` destinations."""
        for outcome, name in DISPATCH_METRICS.items():
            if counts.get(outcome):
                self._count(name, counts[outcome])

    def collected(self, counts: Mapping[str, int]) -> None:
        """A collection run's report (:class:`~mediajobs.service_layer.collection.CollectionReport`)."""
        for field, name in COLLECTION_METRICS.items():
            self._count(name, counts[field])

    def backfill(self, status: Mapping[str, Any]) -> None:
        """A running backfill's place (:func:`~mediajobs.domain.backfill.document`): its
        ``BackfillRemaining``, ``BackfillDone``, ``BackfillReused`` and ``BackfillFailed``
        jobs, as gauges the dashboard draws (the latest value is the state)."""
        for field, name in BACKFILL_METRICS.items():
            self._count(name, float(status[field]))
