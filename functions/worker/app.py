"""Worker Lambda entry point; the code lives in the shared ``mediajobs`` layer."""

from mediajobs.entrypoints.worker import lambda_handler

__all__ = ["lambda_handler"]
