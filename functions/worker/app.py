"""Worker Lambda entry point; the code lives in the shared ``mediajobs`` layer.

One function, two triggers: the schedule's collection request goes to the collector, an
SQS batch to the worker's handler.
"""

from typing import Any

from mediajobs.entrypoints import collector, worker


def lambda_handler(event: Any, context: Any) -> Any:
    """Dispatch: :func:`mediajobs.entrypoints.collector.is_collection_request` or a batch."""
    handler = collector.lambda_handler if collector.is_collection_request(event) else worker.lambda_handler
    return handler(event, context)


__all__ = ["lambda_handler"]
