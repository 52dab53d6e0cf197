"""S3 access: stream an original to disk while hashing it; write derivatives once.

Writes use ``If-None-Match: *`` (S3 conditional writes): a 412 ``PreconditionFailed``
means an object already exists under the key, which for content-addressed derivatives
means the bytes are already there -- success. Under concurrent writes S3 may also answer
409 ``ConditionalRequestConflict``; that is retried after a backoff with full jitter
(:func:`mediajobs.domain.retry.conflict_backoff_s`) a few times, then reported transient.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from mediajobs.domain.errors import SOURCE_MISSING, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import Downloaded, ObjectHead, ObjectRef
from mediajobs.domain.retry import CONFLICT_ATTEMPTS, conflict_backoff_s

log = logging.getLogger(__name__)

KB: Final = 1024
MB: Final = 1024 * KB
CHUNK_BYTES: Final = 1 * MB
IMMUTABLE_CACHE_CONTROL: Final = "public, max-age=31536000, immutable"
_MISSING_CODES: Final = frozenset({"NoSuchKey", "NoSuchVersion", "404", "NotFound"})


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


class S3Store:
    """One bucket's originals and derivatives.

    Parameters
    ----------
    client: a boto3 S3 client (its retry mode handles throttling and SlowDown).
    sleep: waits a number of seconds between tries of a write that met a 409 (tests pass a
        recorder, so they never sleep).
    rng: the jitter of those waits.
    """

    def __init__(
        self, client: Any, *, sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None
    ) -> None:
        self._s3 = client
        self._sleep = sleep
        self._rng = rng or random.Random()

    def head(self, ref: ObjectRef) -> ObjectHead:
        """Size, version, ETag and (when the object has one) full-object SHA-256 of
        ``ref``, without reading its bytes (``HeadObject`` with ``ChecksumMode=ENABLED``).

        A checksum is a content hash only when it covers the whole object: S3 marks
        multipart checksums ``COMPOSITE`` and suffixes them ``-<parts>`` (S3 user guide,
        "Checking object integrity"); those are ignored.

        Raises
        ------
        PermanentFailure
            ``source_missing`` when the object or version no longer exists.
        TransientFailure
            On any other S3 or network error.
        """
        params: dict[str, Any] = {"Bucket": ref.bucket, "Key": ref.key, "ChecksumMode": "ENABLED"}
        if ref.version_id:
            params["VersionId"] = ref.version_id
        try:
            head = self._s3.head_object(**params)
        except ClientError as exc:
            if _code(exc) in _MISSING_CODES or _status(exc) == 404:
                raise PermanentFailure(SOURCE_MISSING, f"s3://{ref.bucket}/{ref.key} is gone") from exc
            raise TransientFailure(f"S3 HeadObject failed: {_code(exc)}") from exc
        except BotoCoreError as exc:
            raise TransientFailure(f"S3 HeadObject failed: {exc}") from exc
        checksum = head.get("ChecksumSHA256")
        full_object = checksum and "-" not in checksum and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT"
        version = head.get("VersionId")
        return ObjectHead(
            version_id=None if version in (None, "null") else version,
            etag=str(head.get("ETag", "")).strip('"'),
            size_bytes=int(head["ContentLength"]),
            sha256=base64.b64decode(checksum).hex() if full_object else None,
        )

    def download(self, ref: ObjectRef, dest: Path, *, etag: str | None = None) -> Downloaded:
        """Stream ``ref`` to ``dest`` in 1 MiB chunks, hashing as it goes.

        ``etag`` (from :meth:`head`) makes the read conditional (``If-Match``), so the bytes
        are the ones ``HeadObject`` described even when versioning is off and the key is
        overwritten meanwhile; a version id already pins them.

        Returns
        -------
        Downloaded
            SHA-256, size and the version actually read (S3's answer, when the event
            named none).

        Raises
        ------
        PermanentFailure
            ``source_missing`` when the object or version no longer exists.
        TransientFailure
            On any other S3 or network error.
        """
        params: dict[str, Any] = {"Bucket": ref.bucket, "Key": ref.key}
        if ref.version_id:
            params["VersionId"] = ref.version_id
        elif etag:
            params["IfMatch"] = f'"{etag}"'
        digest = hashlib.sha256()
        size = 0
        try:
            response = self._s3.get_object(**params)
            with open(dest, "wb") as out:
                for chunk in response["Body"].iter_chunks(CHUNK_BYTES):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
        except ClientError as exc:
            if _code(exc) in _MISSING_CODES:
                raise PermanentFailure(SOURCE_MISSING, f"s3://{ref.bucket}/{ref.key} is gone") from exc
            if _code(exc) == "PreconditionFailed" or _status(exc) == 412:
                raise TransientFailure(f"s3://{ref.bucket}/{ref.key} changed while being read") from exc
            raise TransientFailure(f"S3 GetObject failed: {_code(exc)}") from exc
        except BotoCoreError as exc:
            raise TransientFailure(f"S3 GetObject failed: {exc}") from exc
        version = response.get("VersionId")
        return Downloaded(digest.hexdigest(), size, None if version in (None, "null") else version)

    def presigned_get(self, ref: ObjectRef, *, expires_s: int) -> str:
        """A URL that reads ``ref`` (its version, when it names one) for ``expires_s``
        seconds, signed with this client's credentials (SigV4 query parameters: "Sharing
        objects with presigned URLs", S3 user guide): ffmpeg reads a split video's part
        through it by byte ranges, never the whole original. Made locally: no request.

        Raises
        ------
        TransientFailure
            When the client cannot sign (no credentials).
        """
        params: dict[str, Any] = {"Bucket": ref.bucket, "Key": ref.key}
        if ref.version_id:
            params["VersionId"] = ref.version_id
        try:
            url: str = self._s3.generate_presigned_url("get_object", Params=params, ExpiresIn=expires_s)
        except BotoCoreError as exc:
            raise TransientFailure(f"cannot presign s3://{ref.bucket}/{ref.key}: {exc}") from exc
        return url

    def put_if_absent(self, bucket: str, key: str, body: bytes | IO[bytes], *, content_type: str) -> bool:
        """Write an immutable object unless the key exists (``If-None-Match: *``).

        The object gets ``Content-Type``, ``Cache-Control: public, max-age=31536000,
        immutable`` and an S3-verified SHA-256 checksum.

        Returns
        -------
        bool
            ``True`` if this call created the object, ``False`` if it was already there.

        A 409 ``ConditionalRequestConflict`` is tried again after
        :func:`~mediajobs.domain.retry.conflict_backoff_s`, at most
        :data:`~mediajobs.domain.retry.CONFLICT_ATTEMPTS` tries in all.

        Raises
        ------
        TransientFailure
            On a 409 at every try, or any other error.
        """
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            if hasattr(body, "seek"):
                body.seek(0)
            try:
                self._s3.put_object(
                    Bucket=bucket,
                    Key=key,
                    Body=body,
                    ContentType=content_type,
                    CacheControl=IMMUTABLE_CACHE_CONTROL,
                    IfNoneMatch="*",
                    ChecksumAlgorithm="SHA256",
                )
                return True
            except ClientError as exc:
                if _code(exc) == "PreconditionFailed" or _status(exc) == 412:
                    log.info("object already present", extra={"key": key})
                    return False
                if _code(exc) == "ConditionalRequestConflict" or _status(exc) == 409:
                    if attempt == CONFLICT_ATTEMPTS:
                        break
                    delay_s = conflict_backoff_s(attempt, rng=self._rng)
                    log.warning(
                        "conditional write conflict, retrying",
                        extra={"key": key, "attempt": attempt, "delay_s": round(delay_s, 3)},
                    )
                    self._sleep(delay_s)
                    continue
                raise TransientFailure(f"S3 PutObject {key} failed: {_code(exc)}") from exc
            except BotoCoreError as exc:
                raise TransientFailure(f"S3 PutObject {key} failed: {exc}") from exc
        raise TransientFailure(f"S3 PutObject {key}: {CONFLICT_ATTEMPTS} conditional write conflicts")

    def put_file_if_absent(self, bucket: str, key: str, path: Path, *, content_type: str) -> bool:
        """:meth:`put_if_absent` with the body read from ``path``."""
        with open(path, "rb") as body:
            return self.put_if_absent(bucket, key, body, content_type=content_type)

    def listing(self, bucket: str, prefix: str) -> dict[str, str]:
        """ETag of every object under ``prefix``, by key (``ListObjectsV2``, paginated by
        boto3's paginator; needs ``s3:ListBucket``, never ``s3:GetObject``).

        Used when a conditional write found an output already there: the ETag of a
        single-part upload to an SSE-S3 bucket is the MD5 of its bytes, which names the
        candidate that was stored (:func:`mediajobs.domain.jobs.identify_stored`).

        Raises
        ------
        TransientFailure
            On any S3 error.
        """
        found: dict[str, str] = {}
        try:
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Contents", ()):
                    found[item["Key"]] = str(item.get("ETag", "")).strip('"')
        except (ClientError, BotoCoreError) as exc:
            raise TransientFailure(f"S3 ListObjectsV2 {prefix} failed: {exc}") from exc
        return found

    def keys(self, bucket: str, prefix: str, *, limit: int) -> list[str]:
        """Up to ``limit`` keys under ``prefix``, in UTF-8 binary order (``ListObjectsV2``
        pages, stopped once ``limit`` are read; ``s3:ListBucket``).

        Raises
        ------
        TransientFailure
            On any S3 error.
        """
        found: list[str] = []
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix, PaginationConfig={"MaxItems": limit, "PageSize": min(limit, 1000)}
            )
            for page in pages:
                found.extend(item["Key"] for item in page.get("Contents", ()))
        except (ClientError, BotoCoreError) as exc:
            raise TransientFailure(f"S3 ListObjectsV2 {prefix} failed: {exc}") from exc
        return found[:limit]

    def delete_prefix(self, bucket: str, prefix: str, *, first: str | None = None) -> int:
        """Delete every object under ``prefix``, the key ``first`` (the manifest) alone and
        before the others; returns how many keys were deleted. The rest go by
        ``DeleteObjects`` in batches of at most 1,000 keys (the API's limit; S3 API
        reference, DeleteObjects), which needs ``s3:DeleteObject``. On a versioned bucket
        each delete creates a delete marker. Deleting a key that is not there succeeds.

        Raises
        ------
        TransientFailure
            On any S3 error, or a key the batch reports not deleted (deleting again is
            harmless).
        """
        deleted = 0
        try:
            if first is not None:
                self._s3.delete_object(Bucket=bucket, Key=first)
                deleted += 1
            rest = [k for k in self.listing(bucket, prefix) if k != first]
            for start in range(0, len(rest), 1000):
                batch = rest[start : start + 1000]
                answer = self._s3.delete_objects(
                    Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
                if answer.get("Errors"):
                    error = answer["Errors"][0]
                    raise TransientFailure(f"S3 DeleteObjects {error.get('Key')}: {error.get('Code')}")
                deleted += len(batch)
        except (ClientError, BotoCoreError) as exc:
            raise TransientFailure(f"S3 delete under {prefix} failed: {exc}") from exc
        return deleted

    def download_file(self, bucket: str, key: str, dest: Path) -> None:
        """Copy an object to a local file (the CLI's output folder), via a temporary name."""
        tmp = dest.with_name(dest.name + ".part")
        self._s3.download_file(bucket, key, str(tmp))
        os.replace(tmp, dest)
