"""Dispatcher Lambda entry point (the outbox table's DynamoDB stream); the code lives in the
shared ``mediajobs`` layer (:func:`mediajobs.bootstrap.dispatcher_function`)."""

from mediajobs.bootstrap import dispatcher_function

lambda_handler = dispatcher_function()

__all__ = ["lambda_handler"]
