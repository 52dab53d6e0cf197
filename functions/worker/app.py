"""Worker Lambda entry point; the code lives in the shared ``mediajobs`` layer.

One function, two triggers: the schedule's collection request goes to the collection, an
SQS batch to the worker's handler (:func:`mediajobs.bootstrap.worker_function`, built at the
first invocation).
"""

from mediajobs.bootstrap import worker_function

lambda_handler = worker_function()

__all__ = ["lambda_handler"]
