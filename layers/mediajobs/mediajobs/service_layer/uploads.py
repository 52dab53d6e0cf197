"""Uploads, in order (``POST <StatusUrl>uploads``, ``POST <StatusUrl>uploads/complete``).

1. **Check** the request before anything is signed (:func:`~mediajobs.domain.uploads.parse_upload`):
   its size within ``MaxInputBytes``, a content type the active recipes take, the SHA-256,
   the caller's prefix; a refusal is 400 with its reason code.
2. **The key**: ``originals/<prefix>/<yyyy>/<mm>/<dd>/<id>/<safe name>``, the id random
   (:func:`~mediajobs.domain.uploads.upload_key`).
3. **Sign**: one presigned ``PutObject`` whose signed headers are the type, the length and
   the checksum; or, above ``multipart_above_bytes``, ``CreateMultipartUpload`` and one
   presigned ``UploadPart`` per part, each signing its own checksum.
4. A multipart upload is **completed** by the app's second call, with each part's ETag and
   checksum (:meth:`Uploads.complete`).

Nothing is written but the multipart upload's start: an answer never used costs nothing (a
lifecycle rule aborts incomplete multipart uploads). The original's "Object Created" event
does the rest, as for any upload.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mediajobs.domain.uploads import (
    INVALID_REQUEST,
    MAX_PARTS,
    UploadRefused,
    parse_upload,
    upload_key,
)
from mediajobs.service_layer.ports import UploadSigner
from mediajobs.settings import Settings


class Uploads:
    """Answers upload requests (the module's order).

    Parameters
    ----------
    settings: ``media_bucket``, ``originals_prefix``, ``max_input_bytes``,
        ``multipart_above_bytes``, ``upload_url_s``.
    signer: presigns (S3).
    media: the media types with active recipes.
    clock: Unix time, seconds (the key's date, the answer's expiry).
    new_id: a fresh upload id (default: 16 random hex digits).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        signer: UploadSigner,
        media: Sequence[str],
        clock: Callable[[], float],
        new_id: Callable[[], str] = lambda: secrets.token_hex(8),
    ) -> None:
        self._settings = settings
        self._signer = signer
        self._media = tuple(media)
        self._clock = clock
        self._new_id = new_id

    def ask(self, body: Any) -> dict[str, Any]:
        """The answer to an upload request (the module's steps 1-3)::

            {"key", "bucket", "path": "single"|"multipart", "sha256", "size_bytes",
             "content_type", "expires_at_s",
             "put": {"method", "url", "headers"}                      # single
             "upload_id", "parts": [{"part_number", "size_bytes", "method", "url", "headers"}],
             "complete": {"route": "uploads/complete", "body": {...}}}  # multipart

        Raises
        ------
        UploadRefused
            The request is refused (its reason code and words).
        TransientFailure
            S3 failed to start a multipart upload.
        """
        asked = parse_upload(
            body,
            max_input_bytes=self._settings.max_input_bytes,
            multipart_above_bytes=self._settings.multipart_above_bytes,
            media=self._media,
        )
        now = self._clock()
        bucket = self._settings.media_bucket
        key = upload_key(self._settings.originals_prefix, asked.prefix, now, self._new_id(), asked.name)
        expires = self._settings.upload_url_s
        answer: dict[str, Any] = {
            "key": key,
            "bucket": bucket,
            "sha256": asked.sha256,
            "size_bytes": asked.size_bytes,
            "content_type": asked.content_type,
            "expires_at_s": int(now) + expires,
        }
        if not asked.parts:
            put = self._signer.presigned_put(
                bucket,
                key,
                content_type=asked.content_type,
                size_bytes=asked.size_bytes,
                sha256=asked.sha256,
                expires_s=expires,
            )
            return {**answer, "path": "single", "put": put.to_json()}
        upload_id = self._signer.start_multipart(bucket, key, content_type=asked.content_type)
        parts = []
        for number, part in enumerate(asked.parts, start=1):
            signed = self._signer.presigned_part(
                bucket, key, upload_id, number, size_bytes=part.size_bytes, sha256=part.sha256, expires_s=expires
            )
            parts.append({"part_number": number, "size_bytes": part.size_bytes, **signed.to_json()})
        template = {"key": key, "upload_id": upload_id, "parts": [{"part_number": 1, "etag": "...", "sha256": "..."}]}
        return {
            **answer,
            "path": "multipart",
            "upload_id": upload_id,
            "parts": parts,
            "complete": {"route": "uploads/complete", "body": template},
        }

    def complete(self, body: Any) -> dict[str, Any]:
        """Complete a multipart upload: ``{"key", "upload_id", "parts": [{"part_number",
        "etag", "sha256"}]}`` (each part's ETag from its PUT's answer, its SHA-256 as asked).
        Answers ``{"key", "completed": true}``.

        Raises
        ------
        UploadRefused
            ``invalid_request``: a malformed body, or a key outside ``originals/``.
        PermanentFailure
            S3 does not know the upload (``source_missing``) or refused its parts
            (``invalid_request``).
        TransientFailure
            S3 failed otherwise.
        """
        if not isinstance(body, Mapping) or set(body) != {"key", "upload_id", "parts"}:
            raise UploadRefused(INVALID_REQUEST, "the body is {key, upload_id, parts: [{part_number, etag, sha256}]}")
        key, upload_id, parts = body["key"], body["upload_id"], body["parts"]
        if not isinstance(key, str) or not key.startswith(self._settings.originals_prefix) or key.endswith("/"):
            raise UploadRefused(INVALID_REQUEST, f"key is the upload's key under {self._settings.originals_prefix}")
        if not isinstance(upload_id, str) or not upload_id or len(upload_id) > 1024:
            raise UploadRefused(INVALID_REQUEST, "upload_id is the one the upload's answer gave")
        listed: list[tuple[int, str, str]] = []
        if not isinstance(parts, list) or not parts:
            raise UploadRefused(INVALID_REQUEST, "parts lists every part: part_number, etag, sha256")
        for part in parts:
            if (
                not isinstance(part, Mapping)
                or set(part) != {"part_number", "etag", "sha256"}
                or not isinstance(part["part_number"], int)
                or isinstance(part["part_number"], bool)
                or not 1 <= part["part_number"] <= MAX_PARTS
                or not all(isinstance(part[f], str) and part[f] for f in ("etag", "sha256"))
            ):
                raise UploadRefused(INVALID_REQUEST, "each part is {part_number (1-10,000), etag, sha256}")
            listed.append((part["part_number"], part["etag"], part["sha256"]))
        numbers = [n for n, _, _ in listed]
        if numbers != sorted(set(numbers)):
            raise UploadRefused(INVALID_REQUEST, "the parts are listed once each, by part_number ascending")
        self._signer.complete(self._settings.media_bucket, key, upload_id, listed)
        return {"key": key, "completed": True}
