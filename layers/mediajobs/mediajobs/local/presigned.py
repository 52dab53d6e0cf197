"""The embedded S3 checks a presigned URL's signature as S3 does: :class:`PresignedAsS3`.

moto (5.2.5) does not verify SigV4 at all, so a PUT through a presigned URL with another
``Content-Type``, another length, or without the ``x-amz-checksum-sha256`` its URL signed
is stored. S3 refuses it: the signature covers every header ``X-Amz-SignedHeaders`` names
(403 ``SignatureDoesNotMatch``), an ``x-amz-*`` header the URL did not sign (403
``AccessDenied``, "There were headers present in the request which were not signed"), and
an expired URL (403 ``AccessDenied``, "Request has expired") -- S3 API reference,
"Authenticating Requests: Using Query Parameters (AWS Signature Version 4)". Uploads rely
on exactly that (``POST uploads`` signs the type, the length and the checksum), so here a
presigned S3 request is checked before moto sees it: the canonical request is rebuilt from
the request as it came (its signed headers' values, its query without the signature,
``UNSIGNED-PAYLOAD``) with botocore's own SigV4 code, signed with the embedded AWS's
credentials, and compared.
"""

from __future__ import annotations

import calendar
import hmac
import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any, Final

from botocore.auth import S3SigV4QueryAuth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from mediajobs.local.stack import CREDENTIALS

#: The error document S3 answers with (its ``Code`` and ``Message``).
_ERROR: Final = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>'


def _refused(start_response: Callable[..., Any], code: str, message: str) -> Iterable[bytes]:
    body = _ERROR.format(code=code, message=message).encode()
    start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


def signature_of(signer: SigV4Auth, request: AWSRequest, timestamp: str) -> str:
    """The SigV4 signature ``signer`` (botocore's header or query signer) makes of
    ``request`` at ``timestamp`` (``X-Amz-Date``): what a request received must carry."""
    request.context["timestamp"] = timestamp
    return str(signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request))


def problem(environ: dict[str, Any], now_s: float) -> tuple[str, str] | None:
    """What S3 would refuse a presigned S3 request for, as ``(code, message)``; ``None``
    for a good one, or a request that is not a presigned S3 one."""
    query = urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    params = dict(query)
    if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" or "/s3/aws4_request" not in params.get(
        "X-Amz-Credential", ""
    ):
        return None
    signed = params.get("X-Amz-SignedHeaders", "").split(";")
    headers = {key[5:].replace("_", "-").lower(): value for key, value in environ.items() if key.startswith("HTTP_")}
    headers["host"] = environ.get("HTTP_HOST", "")
    for special in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(special):
            headers[special.replace("_", "-").lower()] = environ[special]
    unsigned = sorted(h for h in headers if h.startswith("x-amz-") and h not in signed)
    if unsigned:
        return "AccessDenied", f"There were headers present in the request which were not signed: {', '.join(unsigned)}"
    date = params.get("X-Amz-Date", "")
    try:
        issued = calendar.timegm(time.strptime(date, "%Y%m%dT%H%M%SZ"))
        expires = int(params.get("X-Amz-Expires", "0"))
    except ValueError:
        return "AccessDenied", "the request's date or expiry is not one"
    if now_s > issued + expires:
        return "AccessDenied", "Request has expired"
    region = params["X-Amz-Credential"].split("/")[2]
    # The path and query exactly as sent (S3 signs the path as it is in the URL, never
    # normalised): the query without its signature.
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
    path, _, raw_query = raw.partition("?")
    kept = "&".join(p for p in raw_query.split("&") if not p.startswith("X-Amz-Signature="))
    url = f"http://{headers['host']}{path}?{kept}"
    request = AWSRequest(
        method=environ.get("REQUEST_METHOD", "GET"), url=url, headers={h: headers.get(h, "") for h in signed}
    )
    credentials = Credentials(CREDENTIALS["aws_access_key_id"], CREDENTIALS["aws_secret_access_key"])
    expected = signature_of(S3SigV4QueryAuth(credentials, "s3", region), request, date)
    if not hmac.compare_digest(expected, params.get("X-Amz-Signature", "")):
        return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
    return None


class PresignedAsS3:
    """What S3 refuses of a presigned S3 request, for the embedded server's middleware
    (:class:`~mediajobs.local.server.AtomicWrites` calls :meth:`refusal` with each request
    before moto sees it; module docstring)."""

    clock: Callable[[], float] = time.time

    @classmethod
    def refusal(cls, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes] | None:
        """The 403 response S3 would answer ``environ`` with (``start_response`` called), or
        ``None``: not a presigned S3 request, a CORS preflight (which carries no
        signature to check), or a good one."""
        if environ.get("REQUEST_METHOD") == "OPTIONS":
            return None
        found = problem(environ, cls.clock())
        return None if found is None else _refused(start_response, *found)
