"""The status function: ``GET /assets?key=<original key>`` and ``GET /backfills/<id>``
(``latest`` for the latest) behind a Lambda function URL.

Thin: Powertools' :class:`~aws_lambda_powertools.event_handler.LambdaFunctionUrlResolver`
routes the request (payload format 2.0; another method or path gets Powertools' own 404),
:func:`mediajobs.domain.status.answer` maps the key and the asset to a status code and a
JSON body (the table says which), read through the ``Assets`` port's ``get`` (one strongly
consistent ``GetItem``), and only for a key the bucket's originals can have.

The function URL's ``AuthType: AWS_IAM`` makes Lambda check the caller's SigV4 signature
and its ``lambda:InvokeFunctionUrl`` permission before the function runs
(``requestContext.authorizer.iam`` names the caller); the handler does not check again.
"""

from __future__ import annotations

import time
from typing import Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response, content_types

from mediajobs.domain.backfill import Backfill
from mediajobs.domain.status import MAX_KEY_BYTES, answer, backfill_answer, key_of
from mediajobs.service_layer.ports import Assets, Backfills
from mediajobs.settings import Settings

__all__ = ["ASSETS_PATH", "BACKFILLS_PATH", "MAX_KEY_BYTES", "answer", "backfill_answer", "key_of", "make_status_app"]

#: The route (the function URL's path; its query names the original).
ASSETS_PATH: Final = "/assets"
#: A backfill's route: ``/backfills/<id>`` (``latest``: the latest one).
BACKFILLS_PATH: Final = "/backfills/<backfill_id>"
#: A status changes while a job runs: no cache between the app and the function keeps it.
_HEADERS: Final = {"Cache-Control": "no-store"}


def make_status_app(
    assets: Assets,
    settings: Settings,
    *,
    backfills: Backfills | None = None,
    logger: Logger | None = None,
) -> LambdaFunctionUrlResolver:
    """The resolver of the status function, reading ``assets`` of ``settings.media_bucket``
    (``settings.originals_prefix`` bounds the keys) and ``backfills`` (without them,
    ``/backfills/...`` answers 404): ``app.resolve(event, context)`` answers a function URL
    event (payload 2.0).

    Raises
    ------
    ValueError
        If ``settings.media_bucket`` (env ``MEDIA_BUCKET``) is empty.
    """
    logger = logger or Logger(service="mediajobs")
    if not settings.media_bucket:
        raise ValueError("the status function needs the stack's bucket (MEDIA_BUCKET)")
    app = LambdaFunctionUrlResolver()

    @app.get(ASSETS_PATH)
    def get_asset() -> Response:
        event = app.current_event
        status, body = answer(
            key_of(event.get("rawQueryString") or ""),
            lambda key: assets.get(settings.media_bucket, key),
            settings.originals_prefix,
        )
        logger.info("status", extra={"status": int(status), "key": body.get("key"), "state": body.get("state")})
        return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=_HEADERS)

    def read_backfill(backfill_id: str | None) -> Backfill | None:
        if backfills is None:
            return None
        if backfill_id is not None:
            return backfills.get(backfill_id)
        every = backfills.all()
        return every[-1] if every else None

    @app.get(BACKFILLS_PATH)
    def get_backfill(backfill_id: str) -> Response:
        status, body = backfill_answer(backfill_id, read_backfill, now_s=time.time())
        logger.info("backfill status", extra={"status": int(status), "id": body.get("id"), "state": body.get("state")})
        return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=_HEADERS)

    return app
