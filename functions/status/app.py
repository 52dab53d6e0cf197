"""Status Lambda entry point (``GET /assets?key=...`` behind its function URL); the code
lives in the shared ``mediajobs`` layer (:func:`mediajobs.bootstrap.status_function`)."""

from mediajobs.bootstrap import status_function

lambda_handler = status_function()

__all__ = ["lambda_handler"]
