"""Status Lambda entry point (``GET /assets?key=...`` behind its function URL); the code
lives in the shared ``mediajobs`` layer."""

from mediajobs.entrypoints.status import lambda_handler

__all__ = ["lambda_handler"]
