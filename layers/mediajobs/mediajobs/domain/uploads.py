"""Uploads an app's backend asks for (``POST <StatusUrl>uploads``): the request's rules, the
original's key and the upload's plan. Pure.

**The hash travels with the bytes.** The caller gives the file's SHA-256 (base64, as S3
spells ``x-amz-checksum-sha256``), its size and content type; the answer's presigned PUT
signs all three as headers, so S3 refuses a body whose hash differs (400 ``BadDigest``) or
whose length or type differs (403, the signature): the checksum S3 then keeps is the
content's SHA-256, which the worker reads with ``HeadObject`` instead of reading the bytes to
hash them (S3 user guide, "Checking object integrity"; a checksum put in the URL's query
string instead is not enforced by S3: aws-sdk-go-v2#2610).

**Above a size, a multipart plan** (``Settings.multipart_above_bytes``): the caller gives
each part's size and SHA-256 (5 MiB at least but the last, 10,000 parts at most: S3's
limits), and gets one presigned ``UploadPart`` per part, each signing its checksum, then
completes the upload through ``POST uploads/complete``. S3's checksum of a multipart object
is composite (per part), never the whole object's SHA-256: the worker hashes such an
original itself.

**The key** is date-partitioned: ``originals/<prefix>/<yyyy>/<mm>/<dd>/<id>/<safe name>``.
S3 scales its request rate per prefix (S3 user guide, "Best practices design patterns:
optimizing Amazon S3 performance"), and a backfill reads by date. The prefix is the
caller's (validated), the id random, the name made safe (:func:`safe_name`).
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mediajobs.domain.errors import EMPTY_FILE, TOO_LARGE, UNSUPPORTED_FORMAT, in_bytes

#: A request that is not one (a missing or malformed field): 400 with this reason code.
INVALID_REQUEST: Final = "invalid_request"
#: A file above ``multipart_above_bytes`` asked for without its parts.
PARTS_NEEDED: Final = "parts_needed"
#: Every reason code an upload request can be refused with (400).
UPLOAD_REFUSALS: Final = frozenset({INVALID_REQUEST, PARTS_NEEDED, TOO_LARGE, EMPTY_FILE, UNSUPPORTED_FORMAT})

#: The content types an upload may declare, by the media type whose recipes take it: what
#: the worker decodes (Pillow with pi-heif; ffmpeg's demuxers the video path allows).
CONTENT_TYPES: Final[Mapping[str, frozenset[str]]] = {
    "image": frozenset(
        {"image/jpeg", "image/png", "image/webp", "image/avif", "image/heic", "image/heif", "image/gif", "image/tiff"}
    ),
    "video": frozenset({"video/mp4", "video/quicktime", "video/webm", "video/x-matroska", "video/x-m4v"}),
}
#: S3's multipart limits (S3 user guide, "Amazon S3 multipart upload limits").
MIN_PART_BYTES: Final = 5 * 2**20
MAX_PART_BYTES: Final = 5 * 2**30
MAX_PARTS: Final = 10_000
#: The part size an answer suggests when the parts are needed: 16 MiB, or more so that the
#: file fits in 10,000 parts.
SUGGESTED_PART_BYTES: Final = 16 * 2**20
#: Longest prefix (bytes) and name (characters) an upload's key takes: the key stays far
#: under S3's 1,024 bytes.
MAX_PREFIX_BYTES: Final = 200
MAX_NAME_CHARS: Final = 100
_SEGMENT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")


class UploadRefused(ValueError):
    """An upload request refused before anything is signed: ``reason`` (one of
    :data:`UPLOAD_REFUSALS`) and ``detail`` in words; ``extra``: fields the answer adds
    (the suggested part size for :data:`PARTS_NEEDED`)."""

    def __init__(self, reason: str, detail: str, **extra: Any) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.extra = extra


@dataclass(frozen=True)
class PartAsked:
    """One part of a multipart upload as the caller hashed it: ``size_bytes`` and
    ``sha256`` (base64)."""

    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class UploadAsked:
    """A valid upload request.

    Attributes
    ----------
    name: the file's name (made safe for the key).
    content_type: its MIME type (one :data:`CONTENT_TYPES` accepts).
    size_bytes: its size, bytes.
    sha256: its SHA-256, base64 of the 32 bytes (S3's spelling).
    prefix: the caller's prefix under ``originals/`` (``users/42``).
    parts: each part's size and SHA-256, for a multipart upload (empty otherwise).
    """

    name: str
    content_type: str
    size_bytes: int
    sha256: str
    prefix: str
    parts: tuple[PartAsked, ...] = ()

    @property
    def sha256_hex(self) -> str:
        """The SHA-256 as 64 hex digits (the content hash the job keys take)."""
        return base64.b64decode(self.sha256).hex()


def _sha256_b64(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise UploadRefused(INVALID_REQUEST, f"{what} is the SHA-256 in base64 (44 characters)")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32 or base64.b64encode(raw).decode("ascii") != value:  # canonical: S3 compares the text
        raise UploadRefused(INVALID_REQUEST, f"{what} is the SHA-256 in base64 (44 characters), not {value[:60]!r}")
    return value


def valid_prefix(prefix: Any) -> str:
    """The caller's prefix, checked: 1 to 8 segments of ``[A-Za-z0-9][A-Za-z0-9_.-]``
    (no ``..``, no empty segment), at most :data:`MAX_PREFIX_BYTES` bytes, no leading or
    trailing ``/``.

    Raises
    ------
    UploadRefused
        ``invalid_request`` naming what is wrong.
    """
    if not isinstance(prefix, str) or not prefix:
        raise UploadRefused(INVALID_REQUEST, "prefix is a folder of yours under originals/: users/42")
    segments = prefix.split("/")
    if (
        len(prefix.encode("utf-8")) > MAX_PREFIX_BYTES
        or len(segments) > 8
        or any(not _SEGMENT.fullmatch(s) or s.strip(".") == "" or ".." in s for s in segments)
    ):
        raise UploadRefused(
            INVALID_REQUEST,
            f"prefix {prefix[:80]!r}: 1-8 segments of letters, digits, '_', '.', '-' (each starting with a "
            f"letter or digit, no '..'), at most {MAX_PREFIX_BYTES} bytes",
        )
    return prefix


def safe_name(name: str) -> str:
    """``name`` as the key's last segment: its last path component, every run of other
    characters than ``A-Za-z0-9._-`` one ``-``, no leading ``.`` or ``-``, the extension
    lower-cased, at most :data:`MAX_NAME_CHARS` characters (the extension kept); ``upload``
    when nothing is left. Pure."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, ext = base.rpartition(".")
    if not dot:
        stem, ext = base, ""
    stem = _UNSAFE.sub("-", stem).strip(".-") or "upload"
    ext = _UNSAFE.sub("", ext).lower()[:10]
    stem = stem[: MAX_NAME_CHARS - len(ext) - 1] if ext else stem[:MAX_NAME_CHARS]
    return f"{stem}.{ext}" if ext else stem


def upload_key(originals_prefix: str, prefix: str, now_s: float, upload_id: str, name: str) -> str:
    """``<originals_prefix><prefix>/<yyyy>/<mm>/<dd>/<upload_id>/<safe name>`` (UTC date)."""
    day = time.strftime("%Y/%m/%d", time.gmtime(now_s))
    return f"{originals_prefix}{prefix}/{day}/{upload_id}/{safe_name(name)}"


def parse_upload(body: Any, *, max_input_bytes: int, multipart_above_bytes: int, media: Sequence[str]) -> UploadAsked:
    """The upload request ``body`` (JSON already parsed), checked before anything is signed.

    Fields: ``name``, ``content_type``, ``size_bytes``, ``sha256`` (base64), ``prefix``; and,
    for a file above ``multipart_above_bytes``, ``parts`` (``[{"size_bytes", "sha256"}]``).

    Parameters
    ----------
    max_input_bytes: the largest original the worker takes (``MaxInputBytes``).
    multipart_above_bytes: above it, a multipart plan (its parts asked for).
    media: the media types with active recipes (a content type of another is refused).

    Raises
    ------
    UploadRefused
        ``invalid_request``, ``empty_file``, ``too_large``, ``unsupported_format`` or
        ``parts_needed`` (with ``part_size_bytes``, the size to cut it in), naming why.
    """
    if not isinstance(body, Mapping):
        raise UploadRefused(
            INVALID_REQUEST, "the body is a JSON object: name, content_type, size_bytes, sha256, prefix"
        )
    unknown = sorted(set(body) - {"name", "content_type", "size_bytes", "sha256", "prefix", "parts"})
    if unknown:
        raise UploadRefused(INVALID_REQUEST, f"unknown fields {unknown}")
    name, content_type, size = body.get("name"), body.get("content_type"), body.get("size_bytes")
    if not isinstance(name, str) or not name.strip() or len(name) > 1024:
        raise UploadRefused(INVALID_REQUEST, "name is the file's name (1-1,024 characters)")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise UploadRefused(INVALID_REQUEST, "size_bytes is the file's size in bytes (an integer)")
    if size == 0:
        raise UploadRefused(EMPTY_FILE, "the file is empty (0 bytes)")
    if size > max_input_bytes:
        raise UploadRefused(
            TOO_LARGE, f"{in_bytes(size)} > {in_bytes(max_input_bytes)}: the limit is MaxInputBytes (MAX_INPUT_BYTES)"
        )
    accepted = sorted(t for m in media for t in CONTENT_TYPES.get(m, ()))
    if not isinstance(content_type, str) or content_type.split(";")[0].strip().lower() not in accepted:
        raise UploadRefused(UNSUPPORTED_FORMAT, f"content_type {str(content_type)[:80]!r} is not one of {accepted}")
    sha256 = _sha256_b64(body.get("sha256"), "sha256")
    prefix = valid_prefix(body.get("prefix"))
    parts = _parts(body.get("parts"), size, multipart_above_bytes)
    return UploadAsked(name, content_type.split(";")[0].strip().lower(), size, sha256, prefix, parts)


def suggested_part_bytes(size_bytes: int) -> int:
    """The part size to cut a file of ``size_bytes`` in: :data:`SUGGESTED_PART_BYTES`, or
    the next MiB that fits it in :data:`MAX_PARTS` parts."""
    per_part = -(-size_bytes // MAX_PARTS)
    return max(SUGGESTED_PART_BYTES, -(-per_part // 2**20) * 2**20)


def _parts(value: Any, size: int, multipart_above_bytes: int) -> tuple[PartAsked, ...]:
    if size <= multipart_above_bytes:
        if value not in (None, []):
            raise UploadRefused(INVALID_REQUEST, f"parts are for files above {in_bytes(multipart_above_bytes)}")
        return ()
    if not value:
        raise UploadRefused(
            PARTS_NEEDED,
            f"{in_bytes(size)} > {in_bytes(multipart_above_bytes)}: give parts, each part's size_bytes and sha256 "
            f"(base64), in order, {in_bytes(suggested_part_bytes(size))} each but the last",
            part_size_bytes=suggested_part_bytes(size),
        )
    if not isinstance(value, list) or len(value) > MAX_PARTS:
        raise UploadRefused(INVALID_REQUEST, f"parts is a list of at most {MAX_PARTS:,} parts")
    parts = []
    for i, part in enumerate(value, start=1):
        if not isinstance(part, Mapping) or set(part) != {"size_bytes", "sha256"}:
            raise UploadRefused(INVALID_REQUEST, f"part {i} is {{size_bytes, sha256}}")
        n = part["size_bytes"]
        last = i == len(value)
        if (
            not isinstance(n, int)
            or isinstance(n, bool)
            or n < 1
            or n > MAX_PART_BYTES
            or (n < MIN_PART_BYTES and not last)
        ):
            raise UploadRefused(
                INVALID_REQUEST,
                f"part {i}: {n!r} bytes; a part is {in_bytes(MIN_PART_BYTES)} to {in_bytes(MAX_PART_BYTES)}, "
                "the last one at least 1 byte (S3's multipart limits)",
            )
        parts.append(PartAsked(n, _sha256_b64(part["sha256"], f"part {i}'s sha256")))
    if sum(p.size_bytes for p in parts) != size:
        raise UploadRefused(
            INVALID_REQUEST, f"the parts add up to {sum(p.size_bytes for p in parts):,} bytes, not {size:,}"
        )
    return tuple(parts)
