"""CORS preflights to the embedded AWS, answered as S3 answers them and by nothing else.

A preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) is sent by a
browser without credentials, so it is the one request the embedded AWS takes unsigned
(:mod:`mediajobs.local.authentication`). It never reaches moto: moto's server runs a route
for ``OPTIONS`` whatever the path names (its own ``/moto-api`` -- state dump, recorder,
reset -- however the path is spelled, or any service an ``X-Amz-Target`` names). It is
answered here from the named bucket's CORS rules, read from moto's S3 backend, as the S3
user guide says S3 evaluates them ("How does Amazon S3 evaluate the CORS configuration on a
bucket?"): the first rule whose ``AllowedOrigins`` match the ``Origin``, whose
``AllowedMethods`` hold the requested method, and whose ``AllowedHeaders`` match every header
of ``Access-Control-Request-Headers`` (one ``*`` wildcard in an origin or header) answers
200 with the ``Access-Control-Allow-*`` headers; none is 403 ``AccessForbidden``
("CORSResponse: This CORS request is not allowed..."), and so is a bucket that does not
exist or a path that names none.
"""

from __future__ import annotations

import fnmatch
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

#: S3's words for a preflight no rule allows.
NOT_ALLOWED: Final = (
    "CORSResponse: This CORS request is not allowed. This is usually because the evalution of Origin, "
    "request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted "
    "by the resource's CORS spec."
)
#: A bucket name (S3 user guide, "General purpose bucket naming rules"), for the path-style
#: request target's first segment.
_BUCKET: Final = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class Rule:
    """One CORS rule of a bucket (the S3 API's ``CORSRule``)."""

    allowed_origins: tuple[str, ...]
    allowed_methods: tuple[str, ...]
    allowed_headers: tuple[str, ...] = ()
    exposed_headers: tuple[str, ...] = ()
    max_age_seconds: int | None = None


def _matches(pattern: str, value: str) -> bool:
    """S3's wildcard match: ``*`` any run of characters, nothing else special; case-sensitive
    for origins (headers are compared lower-cased by the caller)."""
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]").replace("?", "[?]"))


def allowing_rule(rules: Sequence[Rule], origin: str, method: str, request_headers: Iterable[str]) -> Rule | None:
    """The first of ``rules`` that allows a preflight from ``origin`` for ``method`` with
    ``request_headers`` (lower-cased names), or ``None``. Pure."""
    wanted = [h for h in request_headers if h]
    for rule in rules:
        if not any(_matches(o, origin) for o in rule.allowed_origins) or method not in rule.allowed_methods:
            continue
        allowed = [h.lower() for h in rule.allowed_headers]
        if all(any(_matches(a, h) for a in allowed) for h in wanted):
            return rule
    return None


def preflight_answer(
    rules: Sequence[Rule] | None, origin: str, method: str, request_headers: str
) -> tuple[int, list[tuple[str, str]], bytes]:
    """The answer to a preflight from ``origin`` for ``method`` with the comma-separated
    ``request_headers``, given the bucket's CORS ``rules`` (``None``: no such bucket): its
    status, headers and body. Pure but for the request id."""
    wanted = [h.strip().lower() for h in request_headers.split(",") if h.strip()]
    rule = allowing_rule(rules or (), origin, method, wanted)
    vary = ("Vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method")
    if rule is None:
        request_id = uuid.uuid4().hex.upper()[:16]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessForbidden</Code>'
            f"<Message>{NOT_ALLOWED}</Message><Method>{method}</Method><ResourceType>OBJECT</ResourceType>"
            f"<RequestId>{request_id}</RequestId></Error>"
        ).encode()
        return 403, [("Content-Type", "application/xml"), ("Content-Length", str(len(body))), vary], body
    headers = [
        ("Access-Control-Allow-Origin", "*" if rule.allowed_origins == ("*",) else origin),
        ("Access-Control-Allow-Methods", ", ".join(rule.allowed_methods)),
        vary,
        ("Content-Length", "0"),
    ]
    if wanted:
        headers.append(("Access-Control-Allow-Headers", ", ".join(wanted)))
    if rule.exposed_headers:
        headers.append(("Access-Control-Expose-Headers", ", ".join(rule.exposed_headers)))
    if rule.max_age_seconds is not None:
        headers.append(("Access-Control-Max-Age", str(rule.max_age_seconds)))
    if rule.allowed_origins != ("*",):
        headers.append(("Access-Control-Allow-Credentials", "true"))
    return 200, headers, b""


def bucket_of(path_info: str) -> str | None:
    """The bucket a path-style request target names (its first segment, as the server
    decoded it), or ``None`` when that is no bucket name (``moto-api`` is none: no bucket
    is made by that name here)."""
    first = path_info.lstrip("/").split("/", 1)[0]
    return first if _BUCKET.fullmatch(first) and first != "moto-api" else None


def bucket_rules(bucket: str) -> list[Rule] | None:
    """The CORS rules moto's S3 backend holds for ``bucket`` (``[]`` when it has none),
    ``None`` when there is no such bucket (the embedded AWS runs moto in this process)."""
    from moto.s3.exceptions import MissingBucket
    from moto.s3.models import s3_backends

    from mediajobs.local.events import ACCOUNT_ID

    try:
        found: Any = s3_backends[ACCOUNT_ID]["aws"].get_bucket(bucket)
    except MissingBucket:
        return None
    return [
        Rule(
            tuple(r.allowed_origins or ()),
            tuple(r.allowed_methods or ()),
            tuple(r.allowed_headers or ()),
            tuple(r.exposed_headers or ()),
            None if r.max_age_seconds is None else int(r.max_age_seconds),
        )
        for r in found.cors or ()
    ]


def answer_preflight(environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """The embedded AWS's answer to the CORS preflight ``environ`` (a WSGI environ): its
    status line, headers and body, from the bucket its path names; nothing else is read,
    and nothing is changed."""
    bucket = bucket_of(str(environ.get("PATH_INFO", "")))
    rules = bucket_rules(bucket) if bucket is not None else None
    status, headers, body = preflight_answer(
        rules,
        str(environ.get("HTTP_ORIGIN", "")),
        str(environ.get("HTTP_ACCESS_CONTROL_REQUEST_METHOD", "")),
        str(environ.get("HTTP_ACCESS_CONTROL_REQUEST_HEADERS", "")),
    )
    return f"{status} {'OK' if status == 200 else 'Forbidden'}", headers, body
