"""The backfill's Lambda entry point: the worker function's scheduled backfill request.

EventBridge Scheduler invokes the worker function with the template's ``Backfill`` event
``Input``, ``{"mediajobs": "backfill"}`` (:data:`BACKFILL_REQUEST`), every
``BackfillSchedule`` period. Thin: start the backfill of the deployed recipe set when it
has none (so a deploy that changes the set starts its backfill within one period), continue
the running one from its cursors for the invocation's time less a margin, log and tell the
metrics where it is (:class:`~mediajobs.service_layer.backfill.Backfiller`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from aws_lambda_powertools import Logger

from mediajobs.adapters.metrics import FunctionMetrics
from mediajobs.domain.backfill import document
from mediajobs.service_layer.backfill import Backfiller

#: The event the schedule sends (template.yaml, ``WorkerFunction`` ``Backfill`` ``Input``).
BACKFILL_REQUEST: Final[Mapping[str, str]] = {"mediajobs": "backfill"}
#: Seconds of the invocation kept for the counts and the log after the scan stops.
MARGIN_S: Final = 30.0
#: Longest scan of one invocation, seconds: under the schedule's period (``rate(1 minute)``),
#: so that two runs do not scan the same pages at once (the schedule runs it again).
MOST_S: Final = 45.0


def is_backfill_request(event: Any) -> bool:
    """Whether ``event`` is the schedule's backfill request (and not an SQS batch)."""
    return isinstance(event, Mapping) and event.get("mediajobs") == BACKFILL_REQUEST["mediajobs"]


def make_handler(
    backfiller: Backfiller, *, logger: Logger | None = None, metrics: FunctionMetrics | None = None
) -> Callable[[dict[str, Any], Any], list[dict[str, Any]]]:
    """A handler of backfill requests bound to ``backfiller``: ``(event, context) -> the
    running backfills' status documents`` (which the schedule ignores)."""
    logger = logger or Logger(service="mediajobs")

    def handler(event: dict[str, Any], context: Any) -> list[dict[str, Any]]:
        left_s = context.get_remaining_time_in_millis() / 1000 if context is not None else MOST_S + MARGIN_S
        budget_s = max(1.0, min(MOST_S, left_s - MARGIN_S))
        now = backfiller.tick(budget_s=budget_s, auto_start=True)
        docs = [document(b, now_s=time.time()) for b in now]
        for doc in docs:
            if metrics is not None:
                metrics.backfill(doc)
            logger.info("backfill", extra=doc)
        return docs

    handler = logger.inject_lambda_context(handler)
    return metrics.around(handler) if metrics is not None else handler
