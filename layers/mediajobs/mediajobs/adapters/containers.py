"""Cheap structural checks of container formats, run before a decoder sees the file.

Decoders are lenient in ways that hurt a pipeline: libheif fills the missing tiles of a
truncated HEIC with green instead of failing, and Pillow keeps every ancillary PNG chunk
it reads. Walking the container's top-level structure (never the compressed data) finds
truncation and absurd structure in milliseconds, before any pixel is decoded.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Final

from mediajobs.domain.errors import CORRUPT_IMAGE, TRUNCATED_IMAGE, PermanentFailure

_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
#: Most chunks a PNG may have. A 50 MP PNG split into 8 KiB IDATs has about 20,000;
#: millions of empty chunks only cost the reader memory.
MAX_PNG_CHUNKS: Final = 100_000


def _truncated(detail: str) -> PermanentFailure:
    return PermanentFailure(TRUNCATED_IMAGE, detail)


def _corrupt(detail: str) -> PermanentFailure:
    return PermanentFailure(CORRUPT_IMAGE, detail)


def bmff_problem(data: bytes | mmap.mmap) -> PermanentFailure | None:
    """Truncation of an ISO base media file (HEIF, AVIF; MP4 later), or ``None``.

    Walks the top-level boxes (ISO/IEC 14496-12, 4.2): a box whose declared size runs past
    the end of the file means the upload was cut. Data that does not start with an
    ``ftyp`` box is not examined. Damage inside a box (flipped bytes in ``mdat``) is not
    found here: libheif decodes it without complaint.
    """
    n = len(data)
    if n < 8 or data[4:8] != b"ftyp":
        return None
    pos = 0
    while pos < n:
        if pos + 8 > n:
            return _truncated(f"truncated box header at byte {pos}")
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        header = 8
        if size == 1:
            if pos + 16 > n:
                return _truncated(f"truncated box header at byte {pos}")
            size = struct.unpack(">Q", data[pos + 8 : pos + 16])[0]
            header = 16
        elif size == 0:  # the last box runs to the end of the file
            return None
        if size < header:
            return _corrupt(f"box {kind!r} at byte {pos} has size {size}")
        if pos + size > n:
            return _truncated(f"box {kind.decode('latin-1')!r} at byte {pos} needs {size} bytes, {n - pos} left")
        pos += size
    return None


def png_problem(data: bytes | mmap.mmap) -> PermanentFailure | None:
    """Truncation or a chunk flood in a PNG, or ``None`` (PNG spec, section 5.3)."""
    n = len(data)
    if data[:8] != _PNG_SIGNATURE:
        return None
    pos, chunks = 8, 0
    while pos < n:
        if pos + 8 > n:
            return _truncated(f"truncated chunk header at byte {pos}")
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunks += 1
        if chunks > MAX_PNG_CHUNKS:
            return _corrupt(f"more than {MAX_PNG_CHUNKS} chunks")
        end = pos + 12 + length
        if end > n:
            return _truncated(f"chunk {kind.decode('latin-1')!r} at byte {pos} needs {length} bytes")
        if kind == b"IEND":
            return None
        pos = end
    return _truncated("no IEND chunk")


def container_problem(path: Path) -> PermanentFailure | None:
    """Run :func:`bmff_problem` and :func:`png_problem` on a file, memory-mapped.

    Returns
    -------
    PermanentFailure | None
        ``truncated_image`` or ``corrupt_image`` with the detail, for the caller to raise.
    """
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return bmff_problem(m) or png_problem(m)
