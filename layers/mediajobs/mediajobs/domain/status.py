"""What the status function answers: a status code and a JSON body for the ``key`` values of
a ``GET /assets`` query (and for ``GET /backfills/<id>``: :func:`backfill_answer`). Pure
(the entry point: :mod:`mediajobs.entrypoints.status`).

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
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Final

from mediajobs.domain.assets import AssetView, status_document
from mediajobs.domain.backfill import BACKFILL_ID, Backfill, document
from mediajobs.domain.keys import is_original_key

#: Longest S3 object key, bytes of its UTF-8 ("Naming Amazon S3 objects", S3 user guide).
MAX_KEY_BYTES: Final = 1024


def key_of(raw_query_string: str, name: str = "key") -> list[str]:
    """The values of ``name`` (``key``; ``prefix`` for ``/promos``) in a raw query string,
    percent-decoded (``+`` a space), in order; blank values kept (``key=`` gives ``[""]``)."""
    return [v for k, v in urllib.parse.parse_qsl(raw_query_string, keep_blank_values=True) if k == name]


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
    if not is_original_key(key, originals_prefix):
        message = f"not an original: keys start with {originals_prefix} and name a file, not a folder"
        return HTTPStatus.BAD_REQUEST, {"message": message, "key": key}
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return HTTPStatus.BAD_REQUEST, {"message": f"not an S3 key: over {MAX_KEY_BYTES} bytes", "key": key}
    view = get(key)
    if view is None:
        return HTTPStatus.NOT_FOUND, {"message": "no asset for this key", "key": key}
    return HTTPStatus.OK, status_document(view)


#: The id ``GET /backfills/latest`` names: the latest backfill, whatever its id.
LATEST: Final = "latest"


def backfill_answer(
    backfill_id: str, get: Callable[[str | None], Backfill | None], *, now_s: float
) -> tuple[int, dict[str, Any]]:
    """The status code and JSON body of ``GET /backfills/<id>``: 200 and
    :func:`~mediajobs.domain.backfill.document`; 400 for an id that is neither a backfill
    id (``bf-<12 hex>-<n>``) nor ``latest`` (nothing is read); 404 when there is no such
    backfill (or none at all, for ``latest``). ``get`` reads one (``None``: the latest)."""
    if backfill_id != LATEST and not BACKFILL_ID.fullmatch(backfill_id):
        message = "not a backfill id: bf-<12 hex>-<n>, or latest"
        return HTTPStatus.BAD_REQUEST, {"message": message, "id": backfill_id[:80]}
    found = get(None if backfill_id == LATEST else backfill_id)
    if found is None:
        return HTTPStatus.NOT_FOUND, {"message": "no such backfill", "id": backfill_id}
    return HTTPStatus.OK, document(found, now_s=now_s)


#: A role session's ARN as IAM gives it to a function URL (``userArn``):
#: ``arn:<partition>:sts::<account>:assumed-role/<role name>/<session name>``.
_ASSUMED_ROLE: Final = re.compile(r"arn:([\w-]+):sts::(\d{12}):assumed-role/([^/]+)/[^/]+")

#: The longest body ``POST /review`` reads, characters (``{"outcome": "accepted"}`` is 23).
MAX_REVIEW_BODY: Final = 1024


def reviewer_allowed(caller_arn: str | None, patterns: str) -> bool:
    """Whether the IAM principal ``caller_arn`` (the function URL's
    ``requestContext.authorizer.iam.userArn``) may decide reviews: it -- or, for a role's
    session (``arn:aws:sts::<account>:assumed-role/<role>/<session>``), its role's ARN
    (``arn:aws:iam::<account>:role/<role>``, how an operator names a role) -- matches one of
    ``patterns`` (``REVIEWER_ARNS``: comma-separated; ``*`` any run of characters but ``/``,
    so that a pattern admits no other path; case sensitive as ARNs are). No caller, or no
    pattern, is refused. Pure."""
    if not caller_arn:
        return False
    names = [caller_arn]
    session = _ASSUMED_ROLE.fullmatch(caller_arn)
    if session is not None:
        names.append(f"arn:{session[1]}:iam::{session[2]}:role/{session[3]}")
    for pattern in (p.strip() for p in patterns.split(",")):
        if not pattern:
            continue
        regex = "[^/]*".join(re.escape(part) for part in pattern.split("*"))
        if any(re.fullmatch(regex, name) for name in names):
            return True
    return False


def review_request(
    query: str, body: str | None, originals_prefix: str = "originals/"
) -> tuple[str | None, str | None, str | None]:
    """The original's key (from the query, as :func:`key_of`, checked as ``GET /assets``
    checks it) and the outcome (the JSON body's ``outcome``) of ``POST /review?key=...``, or
    the message of a 400: ``(key, outcome, None)`` or ``(None, None, message)``. Pure."""
    keys = key_of(query)
    if len(keys) != 1:
        return None, None, 'give the original\'s key: POST /review?key=originals/... with {"outcome": ...}'
    if len(keys[0].encode("utf-8")) > MAX_KEY_BYTES or not is_original_key(keys[0], originals_prefix):
        return None, None, f"not an original: keys start with {originals_prefix}, name a file and are <= 1,024 bytes"
    if body is None or len(body) > MAX_REVIEW_BODY:
        return None, None, f'the body is JSON of at most {MAX_REVIEW_BODY} characters: {{"outcome": "accepted"}}'
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None, None, 'the body is JSON: {"outcome": "accepted"} or {"outcome": "rejected"}'
    outcome = document.get("outcome") if isinstance(document, dict) else None
    if outcome not in ("accepted", "rejected"):
        return None, None, 'the body\'s outcome is "accepted" or "rejected"'
    return keys[0], outcome, None
