"""The embedded AWS authenticates every request as AWS does: :class:`Authentication`.

moto (5.x) verifies no signature: an unsigned ``PUT``, a ``PUT`` signed with other keys, a
cross-site form ``POST`` and an unsigned ``ListObjectsV2`` all succeed against its server,
and ``POST /moto-api/reset`` empties it. A web page the user visits can send any of them to
127.0.0.1. AWS refuses every request that is not signed (Signature Version 4: "Authenticating
Requests (AWS Signature Version 4)" in the S3 API reference; "Signing AWS API requests" in
the IAM user guide) by keys it knows, and so does the embedded AWS, before moto sees it:

* a SigV4 ``Authorization`` header, or SigV4 query parameters (a presigned URL), whose
  signature is the one botocore's own signer computes for the request as it was received
  (its method, path and query, the headers it names as signed, its payload) with the
  embedded AWS's secret key (:func:`refusal_of`);
* the request's time within :data:`MAX_SKEW_S` of the server's, a presigned URL not past
  its ``X-Amz-Expires`` (at most :data:`MAX_EXPIRES_S`);
* the payload: for S3 the ``x-amz-content-sha256`` header's value is what is signed --
  a SHA-256 (hex) that must be the body's, ``UNSIGNED-PAYLOAD``,
  ``STREAMING-UNSIGNED-PAYLOAD-TRAILER``, or ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]``
  whose chunk signatures are checked in turn (S3 API reference, "Signature Calculations for
  the Authorization Header: Transferring Payload in Multiple Chunks" and "... Including
  Trailing Headers"); every ``x-amz-*`` header of an S3 request must be signed. Other
  services sign the body's SHA-256.

A refusal is answered as the service would answer it, in its protocol's error shape
(:class:`Style`; the codes: :data:`ANSWERS`): S3's XML (403 ``AccessDenied`` for an
anonymous request, ``InvalidAccessKeyId``, ``SignatureDoesNotMatch``,
``RequestTimeTooSkewed``; 400 ``XAmzContentSHA256Mismatch``), the JSON services'
``UnrecognizedClientException``, ``InvalidSignatureException``,
``MissingAuthenticationTokenException`` (DynamoDB, EventBridge, Secrets Manager, Firehose),
SQS's ``InvalidClientTokenId``, ``SignatureDoesNotMatch``, ``MissingAuthenticationToken``.
A CORS preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) carries
no signature, and S3 answers it unsigned: so does the embedded AWS. moto's own routes
(``/moto-api/...``) need a signature too.

Not checked: a session token (``X-Amz-Security-Token`` is signed like any header, its value
is not looked at: the embedded AWS's keys are long-term keys), the region a signature
names (moto keeps each region apart; the stack lives in ``us-east-1``), and IAM policies.
A browser-form ``POST`` upload with a signed policy (S3's ``POST Object``) is refused as
unsigned: the project never uploads so.
"""

from __future__ import annotations

import calendar
import dataclasses
import email.utils
import enum
import functools
import hashlib
import hmac
import io
import json
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from xml.sax.saxutils import escape

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials
from werkzeug.wsgi import get_content_length, get_input_stream

from mediajobs.local.cors import answer_preflight
from mediajobs.local.guards import BodyTooLarge

#: The one signing algorithm accepted (SigV4 with HMAC-SHA256).
ALGORITHM: Final = "AWS4-HMAC-SHA256"
#: How far a signed request's time may be from the server's, either way, seconds (SigV4:
#: "the request time ... within 15 minutes"; S3's ``RequestTimeTooSkewed``).
MAX_SKEW_S: Final = 15 * 60
#: The longest ``X-Amz-Expires`` a presigned URL may carry, seconds (S3: 7 days).
MAX_EXPIRES_S: Final = 7 * 24 * 3600
#: What ``x-amz-content-sha256`` may say instead of the body's SHA-256 (S3 API reference,
#: "Authenticating Requests: Using the Authorization Header").
UNSIGNED_PAYLOAD: Final = "UNSIGNED-PAYLOAD"
STREAMING_UNSIGNED_TRAILER: Final = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING_SIGNED: Final = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER: Final = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
_PAYLOAD_WORDS: Final = frozenset(
    {UNSIGNED_PAYLOAD, STREAMING_UNSIGNED_TRAILER, STREAMING_SIGNED, STREAMING_SIGNED_TRAILER}
)
_SHA256_HEX: Final = re.compile(r"[0-9a-f]{64}")
_HEX: Final = re.compile(rb"[0-9a-fA-F]{1,16}")
_EMPTY_SHA256: Final = hashlib.sha256(b"").hexdigest()
_TIMESTAMP: Final = "%Y%m%dT%H%M%SZ"

#: The WSGI environ key the middleware sets once it has read the request's body whole into
#: ``wsgi.input`` (an ``io.BytesIO``): a later middleware need not read it again.
BODY_READ: Final = "mediajobs.body_read"


class Failure(enum.Enum):
    """Why a request is refused (each service names it its own way: :data:`ANSWERS`)."""

    MISSING = "no signature"
    UNSUPPORTED = "a signing scheme other than SigV4 (HMAC-SHA256)"
    MALFORMED = "an Authorization header SigV4 does not read"
    MALFORMED_QUERY = "query parameters SigV4 does not read"
    UNKNOWN_KEY = "an access key id the embedded AWS does not have"
    MISMATCH = "a signature its secret key does not make"
    SKEWED = "signed more than 15 minutes from now"
    EXPIRED = "a presigned URL past its expiry"
    UNSIGNED_HEADERS = "x-amz-* headers that are not signed (S3)"
    PAYLOAD_MISSING = "no x-amz-content-sha256 (S3)"
    PAYLOAD_INVALID = "an x-amz-content-sha256 that is neither a SHA-256 nor a known word (S3)"
    PAYLOAD_MISMATCH = "a body whose SHA-256 is not its x-amz-content-sha256 (S3)"
    BODY_MALFORMED = "an aws-chunked body that is not one (S3)"
    TOO_LARGE = "a body over what the service takes (not S3)"


@dataclass(frozen=True)
class Refusal:
    """A request refused: why, and the message when it is not the code's usual one."""

    failure: Failure
    message: str = ""
    #: The service the request's signature names (``None``: it names none).
    service: str | None = None


class Style(enum.Enum):
    """The error shape of a service's protocol (botocore's ``protocol`` of its model)."""

    S3 = "rest-xml"  #: S3: ``<Error><Code>``
    QUERY = "query"  #: SQS's query protocol: ``<ErrorResponse><Error><Type>Sender</Type><Code>``
    SQS_JSON = "json (query-compatible)"  #: SQS's JSON protocol: ``__type`` and ``x-amzn-query-error``
    JSON = "json"  #: DynamoDB, EventBridge, Secrets Manager, Firehose ...: ``__type``
    REST_JSON = "rest-json"  #: Lambda, moto's own routes: ``x-amzn-ErrorType``


_JSON_CODES: Final = {
    Failure.MISSING: "MissingAuthenticationTokenException",
    Failure.UNSUPPORTED: "IncompleteSignatureException",
    Failure.MALFORMED: "IncompleteSignatureException",
    Failure.MALFORMED_QUERY: "IncompleteSignatureException",
    Failure.UNKNOWN_KEY: "UnrecognizedClientException",
}
_QUERY_ANSWERS: Final = {
    Failure.MISSING: (403, "MissingAuthenticationToken"),
    Failure.UNSUPPORTED: (400, "IncompleteSignature"),
    Failure.MALFORMED: (400, "IncompleteSignature"),
    Failure.MALFORMED_QUERY: (400, "IncompleteSignature"),
    Failure.UNKNOWN_KEY: (403, "InvalidClientTokenId"),
}

#: What each service style answers each failure with: (HTTP status, error code). S3: its
#: API reference's "Error responses" list; the JSON services (DynamoDB, EventBridge ...:
#: 400; Lambda: 403) and SQS: their API references' "Common Errors".
ANSWERS: Final[dict[Style, dict[Failure, tuple[int, str]]]] = {
    Style.S3: {
        Failure.MISSING: (403, "AccessDenied"),
        Failure.UNSUPPORTED: (400, "InvalidRequest"),
        Failure.MALFORMED: (400, "AuthorizationHeaderMalformed"),
        Failure.MALFORMED_QUERY: (400, "AuthorizationQueryParametersError"),
        Failure.UNKNOWN_KEY: (403, "InvalidAccessKeyId"),
        Failure.MISMATCH: (403, "SignatureDoesNotMatch"),
        Failure.SKEWED: (403, "RequestTimeTooSkewed"),
        Failure.EXPIRED: (403, "AccessDenied"),
        Failure.UNSIGNED_HEADERS: (403, "AccessDenied"),
        Failure.PAYLOAD_MISSING: (400, "InvalidRequest"),
        Failure.PAYLOAD_INVALID: (400, "InvalidArgument"),
        Failure.PAYLOAD_MISMATCH: (400, "XAmzContentSHA256Mismatch"),
        Failure.BODY_MALFORMED: (400, "IncompleteBody"),
    },
    Style.JSON: {f: (400, _JSON_CODES.get(f, "InvalidSignatureException")) for f in Failure},
    Style.REST_JSON: {f: (403, _JSON_CODES.get(f, "InvalidSignatureException")) for f in Failure},
    Style.QUERY: {f: _QUERY_ANSWERS.get(f, (403, "SignatureDoesNotMatch")) for f in Failure},
    Style.SQS_JSON: {f: _QUERY_ANSWERS.get(f, (403, "SignatureDoesNotMatch")) for f in Failure},
}

# A body too large for any service but S3's is answered the same whatever the protocol.
for _answers in ANSWERS.values():
    _answers[Failure.TOO_LARGE] = (413, "RequestEntityTooLarge")

#: Each code's usual message (the services' own words).
MESSAGES: Final = {
    "RequestEntityTooLarge": "Request entity too large",
    "AccessDenied": "Access Denied",
    "InvalidRequest": "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
    "AuthorizationHeaderMalformed": "The authorization header is malformed.",
    "AuthorizationQueryParametersError": (
        "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
        "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
    ),
    "InvalidAccessKeyId": "The AWS Access Key Id you provided does not exist in our records.",
    "SignatureDoesNotMatch": (
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method."
    ),
    "RequestTimeTooSkewed": "The difference between the request time and the current time is too large.",
    "InvalidArgument": (
        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a valid sha256 value."
    ),
    "XAmzContentSHA256Mismatch": "The provided 'x-amz-content-sha256' header does not match what was computed.",
    "IncompleteBody": "The request body terminated unexpectedly",
    "MissingAuthenticationTokenException": "Request is missing Authentication Token",
    "IncompleteSignatureException": "The request signature does not conform to AWS standards.",
    "UnrecognizedClientException": "The security token included in the request is invalid.",
    "InvalidSignatureException": (
        "The request signature we calculated does not match the signature you provided. Check your AWS "
        "Secret Access Key and signing method. Consult the service documentation for details."
    ),
    "MissingAuthenticationToken": (
        "The request must contain either a valid (registered) AWS access key ID or X.509 certificate."
    ),
    "IncompleteSignature": "The request signature does not conform to AWS standards.",
    "InvalidClientTokenId": "The security token included in the request is invalid.",
}


def _unlatin(text: str) -> str:
    """A WSGI string (bytes decoded as Latin-1, PEP 3333) as the UTF-8 text it was sent as."""
    try:
        return text.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return text


@dataclass(frozen=True)
class Received:
    """A request as the server received it.

    Attributes
    ----------
    method: ``GET``, ``PUT`` ...; path: the path as sent (percent-encoded, undecoded);
    query: the query string as sent (without ``?``); headers: by lower-case name;
    body: the whole body, read (position anywhere: it is read from the start and put back).
    """

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: io.BytesIO

    @classmethod
    def from_environ(cls, environ: Mapping[str, Any], body: io.BytesIO | None = None) -> Received:
        """The request of a WSGI ``environ`` (werkzeug's: ``RAW_URI`` is the request target
        as sent); ``body`` default: the environ's ``wsgi.input`` when it is a ``BytesIO``,
        else none."""
        names: Mapping[str, str] = environ.get("moto.preserved_header_names") or {}
        headers: dict[str, str] = {}
        for key, value in environ.items():
            if key.startswith("HTTP_"):
                name = names.get(key) or key[5:].replace("_", "-")
            elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                name = key.replace("_", "-")
            else:
                continue
            if value != "" or key.startswith("HTTP_"):
                headers[name.lower()] = _unlatin(str(value))
        raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or "")
        if raw.startswith(("http://", "https://")):  # an absolute request target
            split = urllib.parse.urlsplit(raw)
            raw = split.path + ("?" + split.query if split.query else "")
        path, _, query = raw.partition("?")
        if not raw:
            path, query = str(environ.get("PATH_INFO", "/")), str(environ.get("QUERY_STRING", ""))
        given = environ.get("wsgi.input") if body is None else body
        return cls(
            method=str(environ.get("REQUEST_METHOD", "GET")).upper(),
            path=_unlatin(path) or "/",
            query=_unlatin(query),
            headers=headers,
            body=given if isinstance(given, io.BytesIO) else io.BytesIO(),
        )

    @functools.cached_property
    def body_sha256(self) -> str:
        """The SHA-256 of the body, hex (computed once)."""
        with self.body.getbuffer() as view:
            return hashlib.sha256(view).hexdigest()

    def query_pairs(self) -> list[tuple[str, str]]:
        """The query's parameters, decoded, in their order (``a&b=`` gives ``("a", "")``)."""
        pairs = []
        for part in self.query.split("&"):
            if part:
                key, _, value = part.partition("=")
                pairs.append((urllib.parse.unquote(key), urllib.parse.unquote(value)))
        return pairs


def is_preflight(received: Received) -> bool:
    """Whether ``received`` is a CORS preflight (``OPTIONS`` with ``Origin`` and
    ``Access-Control-Request-Method``, Fetch standard): a browser sends it without
    credentials, and S3 answers it from the bucket's CORS rules."""
    return (
        received.method == "OPTIONS"
        and "origin" in received.headers
        and "access-control-request-method" in received.headers
    )


def _is_query_form(received: Received) -> bool:
    """A query-protocol call (``Action=...`` in a form body or the query string)."""
    if "Action=" in received.query:
        return True
    if not received.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return False
    with received.body.getbuffer() as view:
        return b"Action=" in view[:4096].tobytes()


def style_of(received: Received, service: str | None) -> Style:
    """The error shape to refuse ``received`` in: the service its signature names
    (``service``; ``None`` when it names none), else the one its form says (an
    ``X-Amz-Target``: a JSON service; an ``Action=``: the query protocol; moto's own
    ``/moto-api`` routes: REST JSON), else S3's."""
    if received.path.startswith("/moto-api"):
        return Style.REST_JSON
    if service == "s3":
        return Style.S3
    if target := received.headers.get("x-amz-target"):
        return Style.SQS_JSON if target.startswith("AmazonSQS.") else Style.JSON
    if _is_query_form(received):
        return Style.QUERY
    return Style.S3 if service is None else Style.REST_JSON


@dataclass(frozen=True)
class _Signature:
    """What a SigV4 request says of its signature."""

    key_id: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str
    timestamp: str  #: X-Amz-Date's form, ``20130524T000000Z``
    expires_s: int | None  #: query parameters' X-Amz-Expires; ``None`` for a header

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def _credential(value: str) -> tuple[str, str, str, str] | None:
    """``key/date/region/service/aws4_request`` as (key, date, region, service)."""
    parts = value.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request" or not all(parts):
        return None
    return parts[0], parts[1], parts[2], parts[3]


def _header_signature(received: Received, authorization: str) -> _Signature | Refusal:
    if not authorization.startswith(ALGORITHM + " "):
        return Refusal(Failure.UNSUPPORTED)
    fields: dict[str, str] = {}
    for part in authorization[len(ALGORITHM) + 1 :].split(","):
        name, sep, value = part.strip().partition("=")
        if sep:
            if name in fields:  # moto routes by the first one: each is named once, or none is read
                return Refusal(Failure.MALFORMED)
            fields[name] = value.strip()
    credential = _credential(fields.get("Credential", ""))
    if credential is None or not fields.get("SignedHeaders") or not fields.get("Signature"):
        return Refusal(Failure.MALFORMED)
    if "x-amz-date" in received.headers:
        timestamp = received.headers["x-amz-date"]
        try:
            time.strptime(timestamp, _TIMESTAMP)
        except ValueError:
            return Refusal(Failure.MALFORMED, f"X-Amz-Date must be in the ISO8601 Long Format: {timestamp!r}")
    else:
        try:
            parsed = email.utils.parsedate_to_datetime(received.headers.get("date", ""))
        except (TypeError, ValueError, IndexError):
            return Refusal(Failure.MALFORMED, "AWS authentication requires a valid Date or x-amz-date header")
        timestamp = parsed.strftime(_TIMESTAMP)
    key_id, date, region, service = credential
    signed = tuple(fields["SignedHeaders"].split(";"))
    return _Signature(key_id, date, region, service, signed, fields["Signature"], timestamp, None)


def _query_signature(params: Mapping[str, str]) -> _Signature | Refusal:
    if params.get("X-Amz-Algorithm") != ALGORITHM:
        return Refusal(Failure.MALFORMED_QUERY, 'X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"')
    credential = _credential(params.get("X-Amz-Credential", ""))
    needed = ("X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature")
    if credential is None or not all(params.get(name) for name in needed):
        return Refusal(Failure.MALFORMED_QUERY)
    try:
        time.strptime(params["X-Amz-Date"], _TIMESTAMP)
        expires_s = int(params["X-Amz-Expires"])
    except ValueError:
        return Refusal(Failure.MALFORMED_QUERY, "X-Amz-Date or X-Amz-Expires is not one")
    if not 0 <= expires_s <= MAX_EXPIRES_S:
        return Refusal(Failure.MALFORMED_QUERY, "X-Amz-Expires must be less than a week (in seconds) that is 604800")
    key_id, date, region, service = credential
    signed = tuple(params["X-Amz-SignedHeaders"].split(";"))
    return _Signature(key_id, date, region, service, signed, params["X-Amz-Signature"], params["X-Amz-Date"], expires_s)


def _signature_in(received: Received) -> _Signature | Refusal | None:
    """The request's signature as it states it; a :class:`Refusal` when it states it
    wrongly; ``None`` when it carries none."""
    authorization = received.headers.get("authorization")
    params = dict(received.query_pairs())
    in_query = "X-Amz-Signature" in params or "X-Amz-Credential" in params or "X-Amz-Algorithm" in params
    if authorization is not None and in_query:
        return Refusal(
            Failure.MALFORMED,
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
            "Signature query string parameter or the Authorization header should be specified",
        )
    if authorization is not None:
        return _header_signature(received, authorization)
    if in_query:
        return _query_signature(params)
    if "AWSAccessKeyId" in params and "Signature" in params:  # Signature Version 2
        return Refusal(Failure.UNSUPPORTED)
    return None


class _Recomputed(SigV4Auth):
    """botocore's SigV4 signer, computing the signature a request received must carry: its
    headers are exactly those it names as signed (botocore signs no ``User-Agent``, other
    SDKs may), its payload is the one given (``request.context["payload"]``), and an S3
    path is not normalised (botocore's S3 signers do not normalise it either)."""

    def __init__(self, credentials: Credentials, service: str, region: str) -> None:
        super().__init__(credentials, service, region)
        self._s3 = service == "s3"

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        headers = HTTPHeaders()
        for name, value in request.headers.items():
            headers[name.lower()] = value
        return headers

    def payload(self, request: AWSRequest) -> str:
        return str(request.context["payload"])

    def _normalize_url_path(self, path: str) -> str:
        return path if self._s3 else str(super()._normalize_url_path(path))


def signature_of(signer: SigV4Auth, request: AWSRequest, timestamp: str) -> str:
    """The SigV4 signature ``signer`` (botocore's header or query signer) makes of
    ``request`` at ``timestamp`` (``X-Amz-Date``): what a request received must carry."""
    request.context["timestamp"] = timestamp
    return str(signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request))


def _expected(received: Received, signature: _Signature, secret: str, payload: str) -> str:
    """The signature ``received`` must carry, by botocore's signer."""
    host = received.headers.get("host", "")
    # The path and query as SigV4 canonicalises them: each decoded and encoded again
    # (RFC 3986 unreserved characters only), whatever encoding the client chose.
    path = urllib.parse.quote(urllib.parse.unquote(received.path), safe="/~")
    params = [
        (k, v) for k, v in received.query_pairs() if not (signature.expires_s is not None and k == "X-Amz-Signature")
    ]
    headers = {name: received.headers.get(name, "") for name in signature.signed_headers}
    request = AWSRequest(method=received.method, url=f"http://{host}{path}", headers=headers, params=params)
    request.context["payload"] = payload
    signer = _Recomputed(Credentials(signature.key_id, secret), signature.service, signature.region)
    return signature_of(signer, request, signature.timestamp)


def _signing_key(secret: str, signature: _Signature) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (signature.date, signature.region, signature.service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _chunks_refusal(received: Received, signature: _Signature, secret: str, *, trailer: bool) -> Refusal | None:
    """What S3 refuses an ``aws-chunked`` body signed chunk by chunk for (each chunk's
    ``chunk-signature`` chains from the previous one, the seed being the request's; the
    trailing headers' ``x-amz-trailer-signature`` from the last), or ``None``."""
    key = _signing_key(secret, signature)
    head = f"{signature.timestamp}\n{signature.scope}\n"
    previous, decoded = signature.signature, 0
    body = received.body
    body.seek(0)
    try:
        while True:
            line = body.readline()
            size_hex, _, extension = line.rstrip(b"\r\n").partition(b";")
            name, _, chunk_signature = extension.partition(b"=")
            if not line.endswith(b"\r\n") or name != b"chunk-signature":
                return Refusal(Failure.BODY_MALFORMED)
            if not _HEX.fullmatch(size_hex):
                return Refusal(Failure.BODY_MALFORMED)
            size = int(size_hex, 16)
            chunk = body.read(size)
            if len(chunk) < size:
                return Refusal(Failure.BODY_MALFORMED)
            text = f"AWS4-HMAC-SHA256-PAYLOAD\n{head}{previous}\n{_EMPTY_SHA256}\n{hashlib.sha256(chunk).hexdigest()}"
            expected = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
            if not _same(expected, chunk_signature.decode("ascii", "replace")):
                return Refusal(Failure.MISMATCH)
            previous, decoded = expected, decoded + size
            if size == 0:
                break
            if body.read(2) != b"\r\n":
                return Refusal(Failure.BODY_MALFORMED)
        rest = body.read()  # the last chunk's CRLF, or the trailing headers and their CRLF
        lines = [line.strip().decode("utf-8", "replace") for line in rest.split(b"\n")]
        fields = [line.partition(":") for line in lines if line]
        if not rest.endswith(b"\r\n") or any(not sep for _, sep, _ in fields):
            return Refusal(Failure.BODY_MALFORMED)
        if trailer:  # trailing headers "name:value" CRLF, signed as "name:value" LF each, sorted
            trailing = {name.strip().lower(): value.strip() for name, _, value in fields}
            trailer_signature = trailing.pop("x-amz-trailer-signature", "")
            canonical = "".join(f"{name}:{value}\n" for name, value in sorted(trailing.items()))
            text = f"AWS4-HMAC-SHA256-TRAILER\n{head}{previous}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
            expected = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
            if not _same(expected, trailer_signature):
                return Refusal(Failure.MISMATCH)
        elif fields:
            return Refusal(Failure.BODY_MALFORMED)
    finally:
        body.seek(0)
    declared = received.headers.get("x-amz-decoded-content-length")
    if declared is not None and declared != str(decoded):
        return Refusal(Failure.BODY_MALFORMED)
    return None


def _same(expected: str, given: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time (any text given)."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def _seconds(timestamp: str) -> int:
    return calendar.timegm(time.strptime(timestamp, _TIMESTAMP))


def refusal_of(
    received: Received,
    credentials: Mapping[str, str],
    now_s: float,
    *,
    service: str | None = None,
    region: str | None = None,
    body: bool = True,
) -> Refusal | None:
    """What AWS would refuse ``received`` for, checked against ``credentials`` (the
    embedded AWS's: ``aws_access_key_id``, ``aws_secret_access_key``) at ``now_s`` (Unix
    time, seconds); ``None`` for a request to let through (a good signature, or a CORS
    preflight).

    Parameters
    ----------
    service: the only service a signature may name (the local function URL: ``"lambda"``);
        ``None``: any.
    region: the only region a signature may name; ``None``: any (moto keeps regions apart).
    body: whether ``received`` holds its body; without it, what its request line and headers
        alone refuse: no signature, another key, another time, and for S3 the signature
        itself (it signs the body's stated hash, checked once the body is read). The other
        services sign the body's hash: their signature waits for it.

    Returns
    -------
    Refusal or None
        Its ``service`` is the one the signature names (``None`` when it names none).
    """
    if is_preflight(received):
        return None
    signature = _signature_in(received)
    if signature is None:
        return Refusal(Failure.MISSING)
    if isinstance(signature, Refusal):
        return signature
    found = _refusal_of_signed(received, signature, credentials, now_s, service, region, body)
    return None if found is None else dataclasses.replace(found, service=signature.service)


def signed_service(received: Received) -> str | None:
    """The service the request's signature names (``None``: it names none, or wrongly)."""
    signature = _signature_in(received)
    return signature.service if isinstance(signature, _Signature) else None


def _skew_message(signature: _Signature, now_s: float) -> str:
    """The JSON and query services' words for a signature out of the window (S3 has its own)."""
    if signature.service == "s3":
        return ""
    now, bound = time.strftime(_TIMESTAMP, time.gmtime(now_s)), MAX_SKEW_S // 60
    if _seconds(signature.timestamp) < now_s:
        earliest = time.strftime(_TIMESTAMP, time.gmtime(now_s - MAX_SKEW_S))
        return f"Signature expired: {signature.timestamp} is now earlier than {earliest} ({now} - {bound} min.)"
    latest = time.strftime(_TIMESTAMP, time.gmtime(now_s + MAX_SKEW_S))
    return f"Signature not yet current: {signature.timestamp} is still later than {latest} ({now} + {bound} min.)"


def _refusal_of_signed(
    received: Received,
    signature: _Signature,
    credentials: Mapping[str, str],
    now_s: float,
    service: str | None,
    region: str | None,
    body: bool = True,
) -> Refusal | None:
    """:func:`refusal_of` for a request that states a SigV4 signature: its key, then its
    time, then (S3) its headers and payload word, then the signature, then the payload
    (``body``: whether ``received`` holds it; :func:`refusal_of`)."""
    s3 = signature.service == "s3"
    if not _same(signature.key_id, credentials["aws_access_key_id"]):
        return Refusal(Failure.UNKNOWN_KEY)
    if service is not None and signature.service != service:
        return Refusal(Failure.MISMATCH, f"Credential should be scoped to correct service: '{service}'.")
    if region is not None and signature.region != region:
        return Refusal(Failure.MISMATCH, f"Credential should be scoped to a valid region, not '{signature.region}'.")
    signed_at = _seconds(signature.timestamp)
    if signature.expires_s is None or signed_at - now_s > MAX_SKEW_S:
        if abs(now_s - signed_at) > MAX_SKEW_S:
            return Refusal(Failure.SKEWED, _skew_message(signature, now_s))
    elif now_s > signed_at + signature.expires_s:
        return Refusal(Failure.EXPIRED, "Request has expired")
    declared = received.headers.get("x-amz-content-sha256")
    if s3:
        unsigned = sorted(h for h in received.headers if h.startswith("x-amz-") and h not in signature.signed_headers)
        if unsigned:
            message = f"There were headers present in the request which were not signed: {', '.join(unsigned)}"
            return Refusal(Failure.UNSIGNED_HEADERS, message)
        if declared is None and signature.expires_s is None:
            return Refusal(Failure.PAYLOAD_MISSING, "Missing required header for this request: x-amz-content-sha256")
        if declared is not None and declared not in _PAYLOAD_WORDS and not _SHA256_HEX.fullmatch(declared):
            return Refusal(Failure.PAYLOAD_INVALID)
        payload = UNSIGNED_PAYLOAD if declared is None else declared  # a presigned URL signs no payload
    else:
        if not body:
            return None  # the signature covers the body's hash: judged once it is read
        if declared is not None and declared != received.body_sha256:
            return Refusal(Failure.MISMATCH)  # the service hashes the body it received
        payload = received.body_sha256 if signature.expires_s is None else UNSIGNED_PAYLOAD
    secret = credentials["aws_secret_access_key"]
    if not _same(_expected(received, signature, secret, payload), signature.signature):
        return Refusal(Failure.MISMATCH)
    if not body:
        return None
    if s3 and _SHA256_HEX.fullmatch(payload) and payload != received.body_sha256:
        return Refusal(Failure.PAYLOAD_MISMATCH)
    if s3 and payload in (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER):
        return _chunks_refusal(received, signature, secret, trailer=payload == STREAMING_SIGNED_TRAILER)
    return None


def answer(refusal: Refusal, style: Style, method: str) -> tuple[str, list[tuple[str, str]], bytes]:
    """The response refusing a request (its status line, headers and body) as a service
    of ``style`` answers ``refusal``'s failure: :data:`ANSWERS`; a ``HEAD`` has no body,
    as S3 answers it."""
    status, code = ANSWERS[style][refusal.failure]
    message = refusal.message or MESSAGES[code]
    request_id = str(uuid.uuid4())
    headers = [("x-amzn-RequestId", request_id)]
    if style is Style.S3:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{escape(message)}</Message>"
            f"<RequestId>{request_id}</RequestId><HostId>{request_id}</HostId></Error>"
        ).encode()
        headers += [("Content-Type", "application/xml"), ("x-amz-request-id", request_id)]
    elif style is Style.QUERY:
        body = (
            '<?xml version="1.0"?><ErrorResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">'
            f"<Error><Type>Sender</Type><Code>{code}</Code><Message>{escape(message)}</Message><Detail/></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        ).encode()
        headers.append(("Content-Type", "text/xml"))
    elif style is Style.REST_JSON:
        body = json.dumps({"message": message}).encode()
        headers += [("Content-Type", "application/json"), ("x-amzn-ErrorType", code)]
    else:
        body = json.dumps({"__type": f"com.amazon.coral.service#{code}", "message": message}).encode()
        headers.append(("Content-Type", "application/x-amz-json-1.0"))
        if style is Style.SQS_JSON:
            headers.append(("x-amzn-query-error", f"{code};Sender"))
    if method == "HEAD":
        body = b""
    headers.append(("Content-Length", str(len(body))))
    return f"{status} {_REASONS[status]}", headers, body


_REASONS: Final = {400: "Bad Request", 403: "Forbidden", 413: "Request Entity Too Large"}


def read_body(environ: dict[str, Any], limit: int | None = None) -> io.BytesIO:
    """Read the request's body whole (bounded by its ``Content-Length``, or its chunked
    encoding's end) into ``environ["wsgi.input"]``, once: a later call returns what the
    first read. ``limit``: the most bytes it may have (``None``: any).

    Raises
    ------
    BodyTooLarge
        Over ``limit``: from its ``Content-Length`` before a byte is read, else once
        ``limit`` and a byte were read.
    """
    if environ.get(BODY_READ):
        body: io.BytesIO = environ["wsgi.input"]
        return body
    if limit is not None and (get_content_length(environ) or 0) > limit:
        raise BodyTooLarge(limit)
    data = get_input_stream(environ).read() if limit is None else get_input_stream(environ).read(limit + 1)
    if limit is not None and len(data) > limit:
        raise BodyTooLarge(limit)
    body = io.BytesIO(data)
    environ["wsgi.input"], environ[BODY_READ] = body, True
    return body


#: The largest body read before refusing a request its headers already refuse (the words of
#: a query-protocol refusal depend on its body); a larger one, or one of unknown length, is
#: refused unread. 64 KiB: a query-protocol call's form is far less but for a message's body.
READ_BEFORE_REFUSING_BYTES: Final = 64 * 2**10
#: The largest body a service other than S3 is sent, bytes: its signature covers the body's
#: hash, so it is read (into memory) before it is judged. 16 MiB: DynamoDB's largest request
#: ("Service, account, and table quotas": a BatchWriteItem of 16 MB), over every other's
#: (SQS 1 MiB, Firehose's PutRecordBatch 4 MiB, Secrets Manager 64 KiB).
MAX_SERVICE_BODY_BYTES: Final = 16 * 2**20


class Authentication:
    """WSGI middleware in front of the embedded AWS's server (module docstring): a
    request not signed with ``credentials`` is answered as AWS answers it, and moto never
    sees it.

    A CORS preflight is unsigned by nature: it never reaches moto (whose server runs a route
    for ``OPTIONS`` whatever the path, its own ``/moto-api`` however spelled), and is
    answered from the named bucket's CORS rules as S3 answers it
    (:func:`mediajobs.local.cors.answer_preflight`). A request refused by its request line and headers
    alone (no signature, another key, another time, an S3 signature that does not match)
    is answered without its body being read, unless that body is small
    (:data:`READ_BEFORE_REFUSING_BYTES`: the refusal's words may depend on it). A body to
    another service than S3 is read only up to :data:`MAX_SERVICE_BODY_BYTES`. Otherwise
    the body is read whole (:func:`read_body`; the server's next middleware,
    :class:`~mediajobs.local.server.AtomicWrites`, needs it read anyway), and hashed only
    when the signature covers it.

    Parameters
    ----------
    app: the WSGI application behind it.
    credentials: ``aws_access_key_id`` and ``aws_secret_access_key`` every request must be
        signed with.
    clock: Unix time, seconds.
    """

    def __init__(
        self,
        app: Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]],
        credentials: Mapping[str, str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.credentials = {k: credentials[k] for k in ("aws_access_key_id", "aws_secret_access_key")}
        self.clock = clock

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        received = Received.from_environ(environ, io.BytesIO())
        if is_preflight(received):
            status, headers, body = answer_preflight(environ)
            start_response(status, headers)
            return [body]
        refusal = refusal_of(received, self.credentials, self.clock(), body=False)
        length = get_content_length(environ)
        if refusal is None and signed_service(received) != "s3" and (length or 0) > MAX_SERVICE_BODY_BYTES:
            refusal = Refusal(Failure.TOO_LARGE, service=signed_service(received))
        if refusal is None or (length is not None and length <= READ_BEFORE_REFUSING_BYTES):
            # judged on the whole request (a small body is read even when its headers
            # suffice: a query-protocol refusal is worded from its body's Action)
            try:
                limit = None if signed_service(received) == "s3" else MAX_SERVICE_BODY_BYTES
                received = Received.from_environ(environ, read_body(environ, limit))
                refusal = refusal_of(received, self.credentials, self.clock())
            except BodyTooLarge:
                refusal = Refusal(Failure.TOO_LARGE, service=signed_service(received))
        if refusal is None:
            return self.app(environ, start_response)
        return self._refuse(received, refusal, start_response)

    @staticmethod
    def _refuse(received: Received, refusal: Refusal, start_response: Callable[..., Any]) -> Iterable[bytes]:
        style = style_of(received, refusal.service)
        status, headers, body = answer(refusal, style, received.method)
        start_response(status, headers)
        return [body]
