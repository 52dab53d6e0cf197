"""The collection's Lambda entry point: the worker function's scheduled event.

EventBridge Scheduler invokes the worker function with the template's ``Collect`` event
``Input``, ``{"mediajobs": "collect"}`` (:data:`COLLECT_REQUEST`): the worker function's
handler (:func:`mediajobs.bootstrap.worker_function`) sends such an event here
(:func:`is_collection_request`) and anything else to the worker's handler. Thin: run one
bounded batch (:class:`~mediajobs.service_layer.collection.Collector`), log the report,
tell the metrics its counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from aws_lambda_powertools import Logger

from mediajobs.adapters.metrics import FunctionMetrics
from mediajobs.service_layer.collection import Collector

#: The event the schedule sends (template.yaml, ``WorkerFunction`` ``Collect`` ``Input``).
COLLECT_REQUEST: Final[Mapping[str, str]] = {"mediajobs": "collect"}


def is_collection_request(event: Any) -> bool:
    """Whether ``event`` is the schedule's collection request (and not an SQS batch)."""
    return isinstance(event, Mapping) and event.get("mediajobs") == COLLECT_REQUEST["mediajobs"]


def make_handler(
    collector: Collector, *, logger: Logger | None = None, metrics: FunctionMetrics | None = None
) -> Callable[[dict[str, Any], Any], dict[str, int]]:
    """A handler of collection requests bound to ``collector``: ``(event, context) -> the
    report's counts`` (a dict, which the schedule ignores)."""

    logger = logger or Logger(service="mediajobs")

    def handler(event: dict[str, Any], context: Any) -> dict[str, int]:
        counts = collector.run().to_json()
        if metrics is not None:
            metrics.collected(counts)
        logger.info("collection done", extra=counts)
        return counts

    handler = logger.inject_lambda_context(handler)
    return metrics.around(handler) if metrics is not None else handler
