"""The status function: ``GET /assets?key=<original key>`` behind a Lambda function URL.

Thin: Powertools' :class:`~aws_lambda_powertools.event_handler.LambdaFunctionUrlResolver`
routes the request (payload format 2.0; another method or path gets Powertools' own 404),
:func:`answer` maps the key and the asset to a status code and a JSON body, and the body
of a known asset is :func:`mediajobs.domain.assets.status_document`. The asset is read
through the :class:`~mediajobs.service_layer.ports.Assets` port's ``get`` (one strongly
consistent ``GetItem``), and only for a key the bucket's originals can have.

============  ===========================================================================
status        when
============  ===========================================================================
200           the asset is known, whatever its state (``deleted`` included): the document
400           no ``key``, more than one, an empty one, one over S3's 1,024 bytes, or one
              outside ``originals/`` (the table is not read)
404           no asset was ever recorded for the key
============  ===========================================================================

The key is taken from ``rawQueryString``, percent-decoded once as a query string is
(``+`` is a space; an app's SDK signing the request with SigV4 sends ``%2B`` for a ``+``
and ``%20`` for a space): ``queryStringParameters`` joins repeated values with commas, so
a key with a comma could not be told from two keys.

The function URL's ``AuthType: AWS_IAM`` makes Lambda check the caller's SigV4 signature
and its ``lambda:InvokeFunctionUrl`` permission before the function runs
(``requestContext.authorizer.iam`` names the caller); the handler does not check again.
"""

from __future__ import annotations

import functools
import os
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response, content_types

from mediajobs.domain.assets import AssetView, status_document
from mediajobs.settings import Settings

if TYPE_CHECKING:
    from mediajobs.service_layer.ports import Assets

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mediajobs"))

#: Longest S3 object key, bytes of its UTF-8 ("Naming Amazon S3 objects", S3 user guide).
MAX_KEY_BYTES: Final = 1024
#: The route (the function URL's path; its query names the original).
ASSETS_PATH: Final = "/assets"
#: A status changes while a job runs: no cache between the app and the function keeps it.
_HEADERS: Final = {"Cache-Control": "no-store"}


def key_of(raw_query_string: str) -> list[str]:
    """The values of ``key`` in a raw query string, percent-decoded (``+`` a space), in order;
    blank values kept (``key=`` gives ``[""]``)."""
    return [v for k, v in urllib.parse.parse_qsl(raw_query_string, keep_blank_values=True) if k == "key"]


def answer(
    keys: list[str], get: Callable[[str], AssetView | None], originals_prefix: str
) -> tuple[int, dict[str, Any]]:
    """The status code and JSON body for a request naming ``keys`` (see the module docstring).

    Parameters
    ----------
    keys: the ``key`` values of the query (:func:`key_of`).
    get: reads the asset of one original key of the stack's bucket (``None``: never seen);
        called only for a key that passed the checks.
    originals_prefix: the prefix every original's key starts with (``originals/``).

    Returns
    -------
    (status, body)
        200 and :func:`~mediajobs.domain.assets.status_document`; 400 or 404 and
        ``{"message": str, "key": str | None}``.
    """
    if len(keys) != 1:
        message = "give the original's key: GET /assets?key=originals/..." if not keys else "give one key"
        return HTTPStatus.BAD_REQUEST, {"message": message, "key": None}
    (key,) = keys
    if not key.startswith(originals_prefix) or len(key) == len(originals_prefix):
        return HTTPStatus.BAD_REQUEST, {"message": f"not an original: keys start with {originals_prefix}", "key": key}
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return HTTPStatus.BAD_REQUEST, {"message": f"not an S3 key: over {MAX_KEY_BYTES} bytes", "key": key}
    view = get(key)
    if view is None:
        return HTTPStatus.NOT_FOUND, {"message": "no asset for this key", "key": key}
    return HTTPStatus.OK, status_document(view)


def make_status_app(assets: Assets, settings: Settings) -> LambdaFunctionUrlResolver:
    """The resolver of the status function, reading ``assets`` of ``settings.media_bucket``.

    Parameters
    ----------
    assets: the :class:`~mediajobs.service_layer.ports.Assets` port (only ``get`` is called).
    settings: ``media_bucket`` (env ``MEDIA_BUCKET``) and ``originals_prefix``.

    Returns
    -------
    LambdaFunctionUrlResolver
        ``app.resolve(event, context)`` answers a function URL event (payload 2.0).

    Raises
    ------
    ValueError
        If ``settings.media_bucket`` is empty.
    """
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

    return app


def default_assets(settings: Settings) -> Assets:
    """The real asset records: the DynamoDB adapter on ``settings.assets_table_name``
    (imported here, so that tests which inject an ``Assets`` never load it)."""
    from mediajobs.adapters.assets import DynamoAssets, asset_models

    return DynamoAssets(asset_models(settings.assets_table_name, settings.region, settings.endpoint_url))


@functools.cache
def _default_app() -> LambdaFunctionUrlResolver:
    settings = Settings.from_env()
    return make_status_app(default_assets(settings), settings)


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The status function's handler: a function URL event (payload 2.0) in, its response
    (``statusCode``, ``headers``, ``body``) out. The resolver and its adapter are built on
    the first call of the execution environment, from the environment."""
    return _default_app().resolve(event, context)
