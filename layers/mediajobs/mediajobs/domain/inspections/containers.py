"""Cheap structural checks of container formats, run before a decoder sees the file.

Decoders are lenient in ways that hurt a pipeline: libheif fills the missing tiles of a
truncated HEIC with green instead of failing, and Pillow keeps every ancillary PNG chunk
it reads. Walking the container's top-level structure (never the compressed data) finds
truncation and absurd structure in milliseconds, before any pixel is decoded.
"""

from __future__ import annotations

import array
import mmap
import struct
import sys
from pathlib import Path
from typing import Final

from mediajobs.domain.errors import CORRUPT_IMAGE, TRUNCATED_IMAGE, PermanentFailure
from mediajobs.domain.inspections.heif_items import Box, child_boxes, extent_problem, read_structure
from mediajobs.domain.video import playlist_problem

_PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
#: Most chunks a PNG may have. A 50 MP PNG split into 8 KiB IDATs has about 20,000;
#: millions of empty chunks only cost the reader memory.
MAX_PNG_CHUNKS: Final = 100_000


def _truncated(detail: str) -> PermanentFailure:
    return PermanentFailure(TRUNCATED_IMAGE, detail)


def _corrupt(detail: str) -> PermanentFailure:
    return PermanentFailure(CORRUPT_IMAGE, detail)


#: Top-level boxes a file cannot do without when they are there: the brands, the item or
#: movie structure, and the media data it points into (ISO/IEC 14496-12 4.3, 8.1.1, 8.2.1,
#: 8.8.4, 8.11.1). One of these running past the end of the file is a cut upload; any other
#: box that does (``free``, ``skip``, ``uuid``, ``udta``, bytes that are no box at all) is
#: trailing data that readers ignore.
NEEDED_BOXES: Final = frozenset({b"ftyp", b"meta", b"moov", b"mdat", b"moof"})


#: Bytes of a chunk offset table read at once (a multiple of 8), so the walk's memory does not
#: grow with the table.
_OFFSET_SLICE_BYTES: Final = 1 << 20


def _chunk_offsets(data: bytes | mmap.mmap, moov: Box) -> int | None:
    """The largest sample chunk offset of any track in ``moov`` (``stco``/``co64``,
    ISO/IEC 14496-12 8.7.5), or ``None`` when no track has samples or a track's boxes do
    not nest (left to ffprobe)."""
    largest: int | None = None
    path = ("trak", "mdia", "minf", "stbl")

    def walk(box: Box, depth: int) -> None:
        nonlocal largest
        for child in child_boxes(data, box.start, box.end, box.kind):
            if depth < len(path) and child.kind == path[depth]:
                walk(child, depth + 1)
            elif depth == len(path) and child.kind in ("stco", "co64"):
                width = 4 if child.kind == "stco" else 8
                count = int.from_bytes(bytes(data[child.start + 4 : child.start + 8]), "big")
                end = min(child.end, child.start + 8 + count * width)
                end -= (end - child.start - 8) % width
                # In slices: a table may hold tens of millions of entries, and the worker
                # reads the file outside the render child's memory limit.
                for at in range(child.start + 8, end, _OFFSET_SLICE_BYTES):
                    offsets = array.array("I" if width == 4 else "Q")
                    offsets.frombytes(bytes(data[at : min(end, at + _OFFSET_SLICE_BYTES)]))
                    if sys.byteorder == "little":
                        offsets.byteswap()
                    if offsets:
                        largest = max(largest or 0, max(offsets))

    try:
        walk(moov, 0)
    except PermanentFailure:  # a malformed track: ffprobe judges it
        return None
    return largest


def bmff_problem(data: bytes | mmap.mmap) -> PermanentFailure | None:
    """Truncation of an ISO base media file (HEIF, AVIF, MP4, MOV with ``ftyp``), or ``None``.

    Walks the top-level boxes (ISO/IEC 14496-12, 4.2). The file is truncated when a box it
    needs (:data:`NEEDED_BOXES`) runs past the end of the file, when an item's data
    (``iloc``) or a track's last chunk (``stco``/``co64``) lies past its end, or when the
    walk is cut before any ``meta`` or ``moov``. Bytes appended after the last complete box
    are ignored, as ffmpeg, libheif and libavif ignore them: an upload tool that pads or
    appends a trailer does not cut the file. Data that does not start with an ``ftyp`` box
    is not examined. Damage inside a box (flipped bytes in ``mdat``) is not found here:
    libheif decodes it without complaint.

    Returns
    -------
    PermanentFailure | None
        ``truncated_image`` (the caller may restate it, as the video step does as
        ``invalid_media``) or ``corrupt_image`` (an impossible size on a needed box, a
        malformed ``meta``).
    """
    n = len(data)
    if n < 8 or data[4:8] != b"ftyp":
        return None
    pos = 0
    complete: dict[bytes, Box] = {}  # the first complete box of each type
    trailing: PermanentFailure | None = None  # why the walk stopped before the end, if it did
    while pos < n:
        if pos + 8 > n:
            trailing = _truncated(f"truncated box header at byte {pos}")
            break
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        header = 8
        if size == 1:
            if pos + 16 > n:
                trailing = _truncated(f"truncated box header at byte {pos}")
                break
            size = struct.unpack(">Q", data[pos + 8 : pos + 16])[0]
            header = 16
        elif size == 0:  # the last box runs to the end of the file
            size = n - pos
        name = kind.decode("latin-1")
        if size < header:
            if kind in NEEDED_BOXES:
                return _corrupt(f"box {name!r} at byte {pos} has size {size}")
            trailing = _corrupt(f"box {name!r} at byte {pos} has size {size}")
            break
        if pos + size > n:
            problem = _truncated(f"box {name!r} at byte {pos} needs {size} bytes, {n - pos} left")
            if kind in NEEDED_BOXES:
                return problem
            trailing = problem
            break
        complete.setdefault(kind, Box(name, pos + header, pos + size))
        pos += size
    if b"meta" not in complete and b"moov" not in complete:
        return trailing
    if b"meta" in complete:
        try:
            structure = read_structure(data)
        except PermanentFailure as failure:
            return failure
        extents = None if structure is None else extent_problem(structure, pos)
        if extents is not None:
            return extents
    if b"moov" in complete:
        last_chunk = _chunk_offsets(data, complete[b"moov"])
        if last_chunk is not None and last_chunk >= pos:
            return _truncated(f"sample data at byte {last_chunk} is past the last complete box (byte {pos})")
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


#: Sub-blocks allowed in a GIF's extensions (comments, application data). Real files have a
#: few; Pillow joins every comment sub-block it reads (20 M one-byte blocks: 1.9 GB).
MAX_GIF_EXTENSION_BLOCKS: Final = 10_000


def _gif_sub_blocks(data: bytes | mmap.mmap, pos: int) -> tuple[int, int] | None:
    """Skip a chain of data sub-blocks; (position after the terminator, count) or ``None`` if cut."""
    n, count = len(data), 0
    while pos < n:
        size = data[pos]
        pos += 1 + size
        if size == 0:
            return pos, count
        count += 1
    return None


def gif_problem(data: bytes | mmap.mmap) -> PermanentFailure | None:
    """Truncation or an extension flood in a GIF, or ``None`` (GIF89a spec, sections 17-27)."""
    n = len(data)
    if data[:6] not in (b"GIF87a", b"GIF89a") or n < 13:
        return None
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    extension_blocks = 0
    while pos < n:
        block = data[pos]
        if block == 0x3B:  # trailer
            return None
        if block == 0x21:  # extension: label, then sub-blocks
            skipped = _gif_sub_blocks(data, pos + 2)
            if skipped is None:
                return _truncated(f"extension at byte {pos} is cut")
            label = data[pos + 1] if pos + 1 < n else 0
            pos, count = skipped
            if label != 0xF9:  # one graphic control block per frame is normal; frames are limited elsewhere
                extension_blocks += count
            if extension_blocks > MAX_GIF_EXTENSION_BLOCKS:
                return _corrupt(f"more than {MAX_GIF_EXTENSION_BLOCKS} extension sub-blocks")
        elif block == 0x2C:  # image: descriptor, optional local colour table, LZW code size, data
            if pos + 10 > n:
                return _truncated(f"image descriptor at byte {pos} is cut")
            local = data[pos + 9]
            pos += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0) + 1
            skipped = _gif_sub_blocks(data, pos)
            if skipped is None:
                return _truncated(f"image data at byte {pos} is cut")
            pos = skipped[0]
        else:
            return _corrupt(f"unknown GIF block 0x{block:02X} at byte {pos}")
    return _truncated("no trailer")


def container_problem(path: Path) -> PermanentFailure | None:
    """Run :func:`bmff_problem`, :func:`png_problem` and :func:`gif_problem` on a file, memory-mapped.

    Returns
    -------
    PermanentFailure | None
        ``truncated_image`` or ``corrupt_image`` with the detail, for the caller to raise.
    """
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return bmff_problem(m) or png_problem(m) or gif_problem(m)


def top_level_boxes(path: Path, limit: int = 64) -> list[str]:
    """Types of an ISO base media file's top-level boxes in file order (``['ftyp', 'moov', 'mdat']``).

    Reads only the box headers (ISO/IEC 14496-12, 4.2), at most ``limit`` of them; stops at a
    box that runs past the end of the file.
    """
    kinds: list[str] = []
    with open(path, "rb") as f:
        end = f.seek(0, 2)
        pos = 0
        while pos + 8 <= end and len(kinds) < limit:
            f.seek(pos)
            size, kind = struct.unpack(">I4s", f.read(8))
            if size == 1:
                size = struct.unpack(">Q", f.read(8))[0]
            elif size == 0:
                size = end - pos
            if size < 8:
                break
            kinds.append(kind.decode("latin-1"))
            pos += size
    return kinds


#: Leading bytes of media containers, as (offset, signature).
_VIDEO_SIGNATURES: Final = (
    (4, b"ftyp"),  # ISO BMFF: MP4, MOV, 3GP (HEIF/AVIF are recognised as images first)
    (4, b"moov"),  # QuickTime without ftyp
    (4, b"mdat"),
    (4, b"wide"),
    (0, b"\x1a\x45\xdf\xa3"),  # EBML: Matroska, WebM
    (0, b"RIFF"),  # AVI (WAV too: ffprobe refuses it)
    (0, b"FLV"),
    (0, b"\x00\x00\x01\xba"),  # MPEG program stream
    (0, b"\x30\x26\xb2\x75"),  # ASF / WMV
)


def looks_like_video(path: Path) -> bool:
    """Whether the first bytes of ``path`` look like a video container, an MPEG-TS stream, or
    a playlist (:func:`mediajobs.domain.video.playlist_problem`: the video step then refuses
    it as ``unsupported_container`` rather than a generic ``unsupported_format``); only the
    allow-listed ffprobe run decides whether a container is accepted."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if any(head[offset : offset + len(sig)] == sig for offset, sig in _VIDEO_SIGNATURES):
        return True
    if playlist_problem(head) is not None:
        return True
    # MPEG-TS: a sync byte every 188 bytes
    return len(head) >= 3 * 188 and all(head[i] == 0x47 for i in (0, 188, 376))
