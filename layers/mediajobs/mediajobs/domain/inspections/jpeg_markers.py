"""A structural check of a JPEG stream's markers, without decoding pixels.

libjpeg recovers from corrupt entropy-coded data with a warning ("Corrupt JPEG data:
N extraneous bytes before marker 0x9f") and Pillow's decoder discards those warnings
(its libjpeg error manager has an empty ``output_message``), so a damaged photo decodes
"successfully" into shifted or smeared blocks. Walking the marker structure finds the
damage: inside entropy-coded data 0xFF may only be followed by 0x00 (stuffing), RST0-7
(D0-D7), more 0xFF fill bytes, or a real marker; codes 0x02-0xBF are never markers
(ITU-T T.81, table B.1).
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from pathlib import Path

_SOI = b"\xff\xd8"
_NOT_FILL = re.compile(rb"[^\xff]")
#: Fill bytes (0xFF) allowed before one marker. T.81 allows any number; encoders write a
#: handful, and Pillow's reader walks them one byte at a time (20 MB of fill: 8 s per open).
MAX_FILL_BYTES = 4096
#: Marker segments allowed before the first scan (APPn, COM, DQT, DHT ...): real files have
#: tens; millions of empty COM segments only cost the reader memory.
MAX_HEADER_SEGMENTS = 1000
_EOI = 0xD9
_SOS = 0xDA


def _is_invalid_code(code: int) -> bool:
    return code == 0x00 or 0x02 <= code <= 0xBF


@dataclass(frozen=True)
class JpegReport:
    """What the marker walk found.

    Attributes
    ----------
    scans: number of SOS segments before EOI (progressive JPEGs have several; each one
        costs a pass over the whole image when decoding).
    corruption: the first structural corruption, or ``None``.
    """

    scans: int
    corruption: str | None


def find_jpeg_corruption(data: bytes | mmap.mmap) -> str | None:
    """Describe the first structural corruption of a JPEG stream, or ``None`` (see :func:`inspect_jpeg`)."""
    return inspect_jpeg(data).corruption


def inspect_jpeg(data: bytes | mmap.mmap) -> JpegReport:
    """Walk a JPEG stream's markers: count its scans and find the first structural corruption.

    A stream that simply ends early (no EOI) is not reported here: the decoder reports
    truncation itself. Data that does not start with SOI is not examined.

    Parameters
    ----------
    data: the whole file (bytes or a read-only mmap).

    Returns
    -------
    JpegReport
        ``corruption`` is e.g. ``"invalid marker 0xFF9F at byte 229382"``.
    """
    n = len(data)
    scans = segments = 0
    if n < 4 or data[:2] != _SOI:
        return JpegReport(0, None)
    pos = 2
    while pos < n:
        if data[pos] != 0xFF:
            return JpegReport(scans, f"expected a marker at byte {pos}, found 0x{data[pos]:02X}")
        found = _NOT_FILL.search(data, pos)  # skip fill bytes at C speed
        if found is None:
            break
        if found.start() - pos > MAX_FILL_BYTES:
            return JpegReport(scans, f"{found.start() - pos} fill bytes at byte {pos}")
        pos = found.start()
        code = data[pos]
        marker_at = pos - 1
        pos += 1
        if code == _EOI:
            break
        if _is_invalid_code(code):
            return JpegReport(scans, f"invalid marker 0xFF{code:02X} at byte {marker_at}")
        if code == 0x01 or 0xD0 <= code <= 0xD7:  # TEM and RSTn stand alone
            continue
        if pos + 2 > n:
            break
        length = int.from_bytes(data[pos : pos + 2], "big")
        if length < 2:
            return JpegReport(scans, f"segment 0xFF{code:02X} at byte {marker_at} has length {length}")
        pos += length
        segments += 1
        if scans == 0 and segments > MAX_HEADER_SEGMENTS:
            return JpegReport(scans, f"more than {MAX_HEADER_SEGMENTS} segments before the first scan")
        if code != _SOS:
            continue
        scans += 1
        while True:  # entropy-coded data
            pos = data.find(b"\xff", pos)
            if pos < 0 or pos + 1 >= n:
                return JpegReport(scans, None)
            following = data[pos + 1]
            if following == 0x00 or 0xD0 <= following <= 0xD7:
                pos += 2
                continue
            break  # a marker (or fill bytes before one): the outer loop reads it
    return JpegReport(scans, None)


def inspect_jpeg_file(path: Path) -> JpegReport:
    """:func:`inspect_jpeg` on a file, memory-mapped (no copy into Python memory)."""
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return JpegReport(0, None)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return inspect_jpeg(m)
