"""Dispatcher Lambda entry point (the outbox table's DynamoDB stream); the code lives in
the shared ``mediajobs`` layer."""

from mediajobs.entrypoints.dispatcher import lambda_handler

__all__ = ["lambda_handler"]
