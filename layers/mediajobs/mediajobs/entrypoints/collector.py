"""The collection's Lambda entry point: the worker function's scheduled event.

EventBridge Scheduler invokes the worker function with the template's ``Collect`` event
``Input``, ``{"mediajobs": "collect"}`` (:data:`COLLECT_REQUEST`): ``functions/worker/app.py``
sends such an event here (:func:`is_collection_request`) and anything else to the
worker's handler. Thin: build the collector, run one bounded batch
(:class:`~mediajobs.service_layer.collection.Collector`), log the report, emit its counts
as metrics.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from mediajobs.service_layer.collection import CollectionReport, Collector
from mediajobs.service_layer.ports import Assets, CollectionLedger
from mediajobs.settings import Settings

if TYPE_CHECKING:
    from mediajobs.bootstrap import Adapters

#: The event the schedule sends (template.yaml, ``WorkerFunction`` ``Collect`` ``Input``).
COLLECT_REQUEST: Final[Mapping[str, str]] = {"mediajobs": "collect"}

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mediajobs"))
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "mediajobs"))

#: The metric each count of the report is published as.
METRICS: Final[Mapping[str, str]] = {
    "collected": "Collected",
    "revived": "Revived",
    "swept_failed": "SweptFailed",
    "waiting": "CollectionWaiting",
    "busy": "CollectionBusy",
    "lost": "CollectionLost",
    "errors": "CollectionErrors",
    "deleted_objects": "DerivativesDeleted",
}


def is_collection_request(event: Any) -> bool:
    """Whether ``event`` is the schedule's collection request (and not an SQS batch)."""
    return isinstance(event, Mapping) and event.get("mediajobs") == COLLECT_REQUEST["mediajobs"]


def make_collector(settings: Settings, adapters: Adapters, *, assets: Assets | None = None) -> Collector:
    """The collector over ``adapters`` (its store, ledger and clock).

    Parameters
    ----------
    settings: the grace, the batch and the lease.
    adapters: the adapters the worker is built with; their ledger must also be a
        :class:`~mediajobs.service_layer.ports.CollectionLedger` (the DynamoDB ledger is).
    assets: the asset records, when ``adapters`` carries none.

    Raises
    ------
    ValueError
        When no assets adapter is given or carried.
    """
    found = assets if assets is not None else getattr(adapters, "assets", None)
    if found is None:
        raise ValueError("the collection needs the assets adapter")
    ledger = cast(CollectionLedger, adapters.ledger)
    return Collector(found, ledger, adapters.store, settings, clock=adapters.clock)


def run_collection(
    settings: Settings,
    adapters: Adapters,
    *,
    grace_s: int | None = None,
    limit: int | None = None,
    assets: Assets | None = None,
) -> CollectionReport:
    """One collection run in this process (the CLI, the demo, the storm).

    Parameters
    ----------
    grace_s, limit: as :meth:`Collector.run` (default: the settings').
    assets: as :func:`make_collector`.
    """
    return make_collector(settings, adapters, assets=assets).run(grace_s=grace_s, limit=limit)


@functools.cache
def default_collector() -> Collector:
    """The collector of this execution environment, built from the environment on first use."""
    from mediajobs.bootstrap import default_adapters

    settings = Settings.from_env()
    return make_collector(settings, default_adapters(settings))


def make_handler(collector: Collector) -> Any:
    """A handler of collection requests bound to ``collector`` (tests and local tools build their own).

    Returns
    -------
    handler(event, context) -> the report's counts (a dict), which the schedule ignores.
    """

    @metrics.log_metrics
    @logger.inject_lambda_context
    def handler(event: dict[str, Any], context: Any) -> dict[str, int]:
        report = collector.run()
        counts = report.to_json()
        for name, metric in METRICS.items():
            metrics.add_metric(name=metric, unit=MetricUnit.Count, value=counts[name])
        logger.info("collection done", extra=counts)
        return counts

    return handler


@functools.cache
def default_handler() -> Any:
    """The handler of this execution environment (:func:`default_collector`), kept."""
    return make_handler(default_collector())


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, int]:
    """Entry point of a collection request (see :func:`is_collection_request`)."""
    return cast(dict[str, int], default_handler()(event, context))
