"""Raw HTTP requests to the embedded AWS, signed as an AWS SDK signs them (botocore's SigV4
signers), for tests that send what no boto3 call sends: the embedded AWS refuses anything
unsigned (:mod:`mediajobs.local.authentication`)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def signed(
    url: str,
    credentials: Mapping[str, str],
    *,
    method: str = "GET",
    data: bytes = b"",
    headers: Mapping[str, str] | None = None,
    service: str = "s3",
    region: str = "us-east-1",
) -> urllib.request.Request:
    """A ``urllib`` request of ``method`` to ``url`` with ``data`` and ``headers``, signed
    for ``service`` (S3's signer for ``"s3"``: it signs ``x-amz-content-sha256``) with
    ``credentials`` (``aws_access_key_id``, ``aws_secret_access_key``)."""
    request = AWSRequest(method=method, url=url, data=data, headers=dict(headers or {}))
    keys = Credentials(credentials["aws_access_key_id"], credentials["aws_secret_access_key"])
    (S3SigV4Auth if service == "s3" else SigV4Auth)(keys, service, region).add_auth(request)
    prepared = request.prepare()
    return urllib.request.Request(prepared.url, data=data or None, headers=dict(prepared.headers), method=method)


def send(request: urllib.request.Request) -> tuple[int, bytes]:
    """Send ``request``: its status and body, a refusal's too."""
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - the embedded AWS's URL
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()
