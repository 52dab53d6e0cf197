"""Presigned uploads to S3 whose headers are signed: :class:`S3Uploads`, the ``UploadSigner``
port.

``generate_presigned_url("put_object", Params={"ChecksumSHA256": ...})`` puts the checksum in
the URL's query string, where S3 does not enforce it (aws-sdk-go-v2#2610, aws/aws-sdk#480).
Here the request is built with the headers the client must send -- ``Content-Type``,
``Content-Length`` and ``x-amz-checksum-sha256`` -- and signed with botocore's SigV4 query
signer (``S3SigV4QueryAuth``), which lists every one of them in ``X-Amz-SignedHeaders``: a
client that sends another length or type fails the signature (403), another body fails the
checksum (400 ``BadDigest``). The URL's address (virtual-hosted or path style, the endpoint)
is the client's own, taken from its presigned URL of the same operation.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError, ClientError

from mediajobs.domain.errors import SOURCE_MISSING, PermanentFailure, TransientFailure
from mediajobs.domain.uploads import INVALID_REQUEST, UploadRefused


@dataclass(frozen=True)
class SignedRequest:
    """A request a client sends as is: ``method``, ``url`` (the signature in its query) and
    the ``headers`` it must carry (each one signed)."""

    method: str
    url: str
    headers: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """``{"method", "url", "headers"}``."""
        return {"method": self.method, "url": self.url, "headers": dict(self.headers)}


class S3Uploads:
    """Presigned single and multipart uploads to S3 (module docstring).

    Parameters
    ----------
    s3: a boto3 S3 client; its credentials sign the URLs (the status function's role:
        ``s3:PutObject`` on ``originals/*``), its region and endpoint address them.
    """

    def __init__(self, s3: Any) -> None:
        self._s3 = s3

    def _signed(
        self, operation: str, params: dict[str, Any], query: dict[str, str], headers: dict[str, str], expires_s: int
    ) -> SignedRequest:
        base = self._s3.generate_presigned_url(operation, Params=params, ExpiresIn=expires_s)
        parts = urllib.parse.urlsplit(base)
        url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, urllib.parse.urlencode(query), ""))
        request = AWSRequest(method="PUT", url=url, headers=headers)
        credentials = self._s3._request_signer._credentials.get_frozen_credentials()
        S3SigV4QueryAuth(credentials, "s3", self._s3.meta.region_name, expires=expires_s).add_auth(request)
        return SignedRequest("PUT", request.url, headers)

    def presigned_put(
        self, bucket: str, key: str, *, content_type: str, size_bytes: int, sha256: str, expires_s: int
    ) -> SignedRequest:
        """A ``PutObject`` of ``key`` signing ``Content-Type``, ``Content-Length`` and
        ``x-amz-checksum-sha256`` (``sha256``: base64), valid ``expires_s`` seconds."""
        headers = {"Content-Type": content_type, "Content-Length": str(size_bytes), "x-amz-checksum-sha256": sha256}
        return self._signed("put_object", {"Bucket": bucket, "Key": key}, {}, headers, expires_s)

    def start_multipart(self, bucket: str, key: str, *, content_type: str) -> str:
        """``CreateMultipartUpload`` of ``key`` with SHA-256 part checksums; its upload id.

        Raises
        ------
        TransientFailure
            S3 refused or failed.
        """
        try:
            started = self._s3.create_multipart_upload(
                Bucket=bucket, Key=key, ContentType=content_type, ChecksumAlgorithm="SHA256"
            )
        except (ClientError, BotoCoreError) as exc:
            raise TransientFailure(f"S3 CreateMultipartUpload failed: {exc}") from exc
        return str(started["UploadId"])

    def presigned_part(
        self, bucket: str, key: str, upload_id: str, number: int, *, size_bytes: int, sha256: str, expires_s: int
    ) -> SignedRequest:
        """An ``UploadPart`` (part ``number``, 1-10,000) signing ``Content-Length`` and its
        ``x-amz-checksum-sha256``."""
        headers = {"Content-Length": str(size_bytes), "x-amz-checksum-sha256": sha256}
        params = {"Bucket": bucket, "Key": key, "UploadId": upload_id, "PartNumber": number}
        query = {"partNumber": str(number), "uploadId": upload_id}
        return self._signed("upload_part", params, query, headers, expires_s)

    def complete(self, bucket: str, key: str, upload_id: str, parts: Sequence[tuple[int, str, str]]) -> None:
        """``CompleteMultipartUpload`` with each part's ``(number, ETag, SHA-256 base64)``.

        Raises
        ------
        PermanentFailure
            ``source_missing`` for an upload S3 does not know (completed or aborted).
        UploadRefused
            ``invalid_request`` for parts S3 refuses (a wrong ETag or checksum, a part too
            small, out of order).
        TransientFailure
            Anything else.
        """
        listed = [{"PartNumber": n, "ETag": etag, "ChecksumSHA256": sha} for n, etag, sha in parts]
        try:
            self._s3.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed}
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code == "NoSuchUpload":
                raise PermanentFailure(SOURCE_MISSING, f"no upload {upload_id[:40]} of {key}") from exc
            if code in ("InvalidPart", "InvalidPartOrder", "EntityTooSmall", "BadDigest", "InvalidRequest"):
                raise UploadRefused(INVALID_REQUEST, f"S3 refused the parts: {code}") from exc
            raise TransientFailure(f"S3 CompleteMultipartUpload failed: {code}") from exc
        except BotoCoreError as exc:
            raise TransientFailure(f"S3 CompleteMultipartUpload failed: {exc}") from exc
