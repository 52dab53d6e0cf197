"""The status function: ``GET /assets?key=<original key>``, ``GET /backfills/<id>``
(``latest`` for the latest) and ``POST /review?key=<original key>`` (a person's decision on
an asset held for review: ``{"outcome": "accepted"|"rejected"}``) behind a Lambda function
URL.

``POST /review`` is answered only for a caller whose IAM principal matches
``REVIEWER_ARNS`` (the ``ReviewerArns`` parameter; 403 otherwise): every caller of the
function URL may read statuses, not every one may decide. The decision is recorded with
that principal's ARN as who made it (:class:`~mediajobs.service_layer.review.Reviews`):
200 and the answer's JSON (``decided``, or ``already_decided`` with the earlier decision),
404 for no asset, 409 for an asset not held for review, 400 for a malformed request.

``POST /promos?prefix=originals/<album>/`` requests the album's promo
(:class:`~mediajobs.service_layer.promo.Promos`): 202 while it is made, 200 once done (its
manifest and outputs) or failed (its reason), 409 for an album with nothing to show, 400
for a prefix that is not an album's. ``GET`` the same route reads the album's latest promo
(404 when none was requested). Any caller the function URL admits may request one: it
renders only what the album's accepted assets are, once per distinct album.

``POST /uploads`` signs an upload an app's backend asks for (its body: ``name``,
``content_type``, ``size_bytes``, ``sha256`` base64, ``prefix``; ``parts`` above
``MULTIPART_ABOVE_BYTES``: :class:`~mediajobs.service_layer.uploads.Uploads`): 200 with the
original's key and a presigned PUT whose signed headers are the type, the length and the
checksum (or a multipart plan), 400 with a reason code before anything is signed.
``POST /uploads/complete`` completes a multipart upload. The same function as the status
route: an app's backend calls one IAM-authorised URL, and what the URLs it signs may write
is exactly what the route checked (key, size, type, SHA-256 are in their signatures).

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

import json
import time
from collections.abc import Callable
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response, content_types

from mediajobs.domain.backfill import Backfill
from mediajobs.domain.errors import PermanentFailure, TransientFailure
from mediajobs.domain.status import MAX_KEY_BYTES, answer, backfill_answer, key_of, review_request, reviewer_allowed
from mediajobs.domain.uploads import UploadRefused
from mediajobs.service_layer.ports import Assets, Backfills
from mediajobs.service_layer.promo import PromoAnswer, Promos, PromoState
from mediajobs.service_layer.review import Reviews, ReviewState
from mediajobs.service_layer.uploads import Uploads
from mediajobs.settings import Settings

__all__ = [
    "ASSETS_PATH",
    "BACKFILLS_PATH",
    "MAX_KEY_BYTES",
    "PROMOS_PATH",
    "REVIEW_PATH",
    "UPLOADS_COMPLETE_PATH",
    "UPLOADS_PATH",
    "answer",
    "backfill_answer",
    "key_of",
    "make_status_app",
]

#: The route (the function URL's path; its query names the original).
ASSETS_PATH: Final = "/assets"
#: A backfill's route: ``/backfills/<id>`` (``latest``: the latest one).
BACKFILLS_PATH: Final = "/backfills/<backfill_id>"
#: The review route (``POST``; its query names the original, its body the outcome).
REVIEW_PATH: Final = "/review"
#: The status code of each review answer.
_REVIEW_STATUS: Final = {
    ReviewState.DECIDED: 200,
    ReviewState.ALREADY: 200,
    ReviewState.NOT_HELD: 409,
    ReviewState.UNKNOWN: 404,
}
#: An album's promo: ``POST`` requests it, ``GET`` reads it (the query names the album's prefix).
PROMOS_PATH: Final = "/promos"
#: The status code of each promo answer, for a request (``POST``) and a read (``GET``).
_PROMO_STATUS: Final = {
    PromoState.REQUESTED: 202,
    PromoState.DONE: 200,
    PromoState.FAILED: 200,
    PromoState.EMPTY: 409,
    PromoState.INVALID: 400,
    PromoState.UNKNOWN: 404,
}
#: An upload (``POST``): the original's key and its presigned PUT (or multipart plan).
UPLOADS_PATH: Final = "/uploads"
#: A multipart upload's completion (``POST``).
UPLOADS_COMPLETE_PATH: Final = "/uploads/complete"
#: A status changes while a job runs: no cache between the app and the function keeps it.
_HEADERS: Final = {"Cache-Control": "no-store"}


def make_status_app(
    assets: Assets,
    settings: Settings,
    *,
    backfills: Backfills | None = None,
    reviews: Reviews | None = None,
    promos: Promos | None = None,
    uploads: Uploads | None = None,
    logger: Logger | None = None,
) -> LambdaFunctionUrlResolver:
    """The resolver of the status function, reading ``assets`` of ``settings.media_bucket``
    (``settings.originals_prefix`` bounds the keys) and ``backfills`` (without them,
    ``/backfills/...`` answers 404), deciding reviews with ``reviews`` (without them,
    ``POST /review`` answers 404), requesting and reading albums' promos with ``promos``
    (without them, ``/promos`` answers 404): ``app.resolve(event, context)`` answers a
    function URL event (payload 2.0).

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

    @app.post(REVIEW_PATH)
    def post_review() -> Response:
        event = app.current_event
        iam = (event.get("requestContext") or {}).get("authorizer", {}).get("iam") or {}
        caller = iam.get("userArn")
        if reviews is None:
            return _json(404, {"message": "reviews are not served here"})
        if not reviewer_allowed(caller, settings.reviewer_arns):
            logger.warning("review refused: not a reviewer", extra={"caller": caller})
            return _json(403, {"message": "this principal may not decide reviews (REVIEWER_ARNS)", "caller": caller})
        try:
            body: str | None = event.decoded_body
        except (ValueError, UnicodeDecodeError):  # a base64 body that is not base64 of UTF-8
            body = None
        key, outcome, problem = review_request(event.get("rawQueryString") or "", body, settings.originals_prefix)
        if problem is not None or key is None or outcome is None:
            return _json(400, {"message": problem})
        try:
            decided = reviews.decide(key, outcome, str(caller))
        except PermanentFailure as refused:  # DynamoDB refused a value of the request
            return _json(400, {"message": f"{refused.reason}: {refused.detail}"})
        logger.info("review", extra={"key": key, "state": str(decided.state), "outcome": decided.outcome})
        return _json(_REVIEW_STATUS[decided.state], decided.to_json())

    def promo_prefix() -> str | None:
        values = key_of(app.current_event.get("rawQueryString") or "", "prefix")
        return values[0] if len(values) == 1 else None

    @app.post(PROMOS_PATH)
    def post_promo() -> Response:
        return promo(lambda prefix: promos.request(prefix) if promos is not None else None)

    @app.get(PROMOS_PATH)
    def get_promo() -> Response:
        return promo(lambda prefix: promos.status(prefix) if promos is not None else None)

    def promo(act: Callable[[str], PromoAnswer | None]) -> Response:
        if promos is None:
            return _json(404, {"message": "promos are not made here"})
        prefix = promo_prefix()
        if prefix is None:
            return _json(400, {"message": "give one album prefix: /promos?prefix=originals/<album>/"})
        try:
            answered = act(prefix)
        except PermanentFailure as refused:  # DynamoDB refused a value of the request
            return _json(400, {"message": f"{refused.reason}: {refused.detail}"})
        assert answered is not None
        logger.info("promo", extra={"prefix": prefix, "state": str(answered.state), "job_key": answered.job_key})
        return _json(_PROMO_STATUS[answered.state], answered.to_json())

    def upload_body() -> Any:
        try:
            return json.loads(app.current_event.decoded_body or "")
        except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON, or nested past Python's limit
            return None

    @app.post(UPLOADS_PATH)
    def post_upload() -> Response:
        return upload(lambda body: uploads.ask(body) if uploads is not None else {})

    @app.post(UPLOADS_COMPLETE_PATH)
    def post_upload_complete() -> Response:
        return upload(lambda body: uploads.complete(body) if uploads is not None else {})

    def upload(act: Callable[[Any], dict[str, Any]]) -> Response:
        if uploads is None:
            return _json(404, {"message": "uploads are not signed here"})
        try:
            answered = act(upload_body())
        except UploadRefused as refused:
            logger.info("upload refused", extra={"reason": refused.reason})
            return _json(400, {"reason": refused.reason, "message": refused.detail, **refused.extra})
        except PermanentFailure as refused:
            status = 404 if refused.reason == "source_missing" else 400
            return _json(status, {"reason": refused.reason, "message": refused.detail})
        except TransientFailure as failed:  # S3 failed: the caller asks again
            logger.warning("upload not signed: %s", failed)
            return _json(503, {"reason": "unavailable", "message": str(failed)})
        logger.info("upload signed", extra={"key": answered.get("key"), "path": answered.get("path")})
        return _json(200, answered)

    return app


def _json(status: int, body: dict[str, object]) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=_HEADERS)
