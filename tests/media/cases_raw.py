"""Files no decoder here renders as they are (R01-R03): camera raws, and valid files using
a feature the decoders do not implement. Small synthetic files made with struct and Pillow,
deterministically (fixed pixels, no timestamps, one encoder thread).

* R01: camera raws in TIFF clothing. A TIFF reader takes the first IFD, which a raw
  keeps for a small preview (DNG 1.4 section "IFD0": "a low-resolution preview"), so
  Pillow renders a 160x120 thumbnail as the ``full`` variant. The pipeline refuses them.
* R02: a conformant AVIF with HDR signalling (BT.2020 primaries, PQ transfer) whose
  matrix coefficients (BT.2020 constant luminance) libavif cannot convert to RGB.
* R03: a HEIF ('mif1') whose primary image is AV1, which pi-heif (HEVC only) cannot decode.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

from make_cases import Case, Tools
from PIL import Image

# --- R01: camera raws -----------------------------------------------------------------

PREVIEW_PX = (160, 120)
RAW_PX = (256, 192)
#: TIFF field types (TIFF 6.0 section 2): BYTE, ASCII, SHORT, LONG.
_BYTE, _ASCII, _SHORT, _LONG = 1, 2, 3, 4
_SIZES = {_BYTE: 1, _ASCII: 1, _SHORT: 2, _LONG: 4}
_FORMATS = {_BYTE: "B", _ASCII: "B", _SHORT: "H", _LONG: "I"}


def _tiff(ifds: list[list[tuple[int, int, object]]], data: list[bytes], *, header_extra: bytes = b"") -> bytes:
    """A little-endian TIFF: ``ifds[0]`` chained from the header, the others reached only as
    SubIFDs. A value ``("data", i)`` is the offset of ``data[i]``; ``("ifd", i)`` the offset of
    ``ifds[i]``. ``header_extra`` follows the 8-byte header (CR2 puts its signature there)."""
    head = 8 + len(header_extra)
    blobs_at, cursor = [], head
    for blob in data:
        blobs_at.append(cursor)
        cursor += len(blob) + len(blob) % 2
    ifd_at = []
    for entries in ifds:
        ifd_at.append(cursor)
        out_of_line = sum(
            len(values) * _SIZES[kind]
            for _, kind, values in entries
            if isinstance(values, tuple | bytes) and len(values) * _SIZES[kind] > 4
        )
        cursor += 2 + 12 * len(entries) + 4 + out_of_line + out_of_line % 2

    def resolve(value: object) -> object:
        if isinstance(value, list) and value[0] == "data":
            return blobs_at[value[1]]
        if isinstance(value, list) and value[0] == "ifd":
            return ifd_at[value[1]]
        return value

    out = bytearray(b"II*\x00" + struct.pack("<I", ifd_at[0]) + header_extra)
    for blob in data:
        out += blob + b"\x00" * (len(blob) % 2)
    for index, entries in enumerate(ifds):
        assert len(out) == ifd_at[index]
        extra_at = ifd_at[index] + 2 + 12 * len(entries) + 4
        table, extra = bytearray(struct.pack("<H", len(entries))), bytearray()
        for tag, kind, raw in sorted(entries, key=lambda e: e[0]):
            values = raw if isinstance(raw, tuple) else tuple(raw) if isinstance(raw, bytes) else (resolve(raw),)
            packed = struct.pack(f"<{len(values)}{_FORMATS[kind]}", *values)
            if len(packed) <= 4:
                field = packed.ljust(4, b"\x00")
            else:
                field = struct.pack("<I", extra_at + len(extra))
                extra += packed
            table += struct.pack("<HHI", tag, kind, len(values)) + field
        out += table + struct.pack("<I", 0) + extra + b"\x00" * (len(extra) % 2)
    return bytes(out)


def _preview_pixels() -> bytes:
    """The preview: a horizontal red ramp over a vertical blue one (what a wrong render shows)."""
    w, h = PREVIEW_PX
    return bytes(v for y in range(h) for x in range(w) for v in (x * 255 // (w - 1), 96, y * 255 // (h - 1)))


def _cfa_pixels() -> bytes:
    """A Bayer mosaic (RGGB) of a flat grey, 16-bit little-endian samples."""
    w, h = RAW_PX
    return b"".join(struct.pack("<H", (1200, 2400, 2400, 900)[(y % 2) * 2 + x % 2]) for y in range(h) for x in range(w))


def _preview_ifd(*, reduced: bool, extra: list[tuple[int, int, object]]) -> list[tuple[int, int, object]]:
    w, h = PREVIEW_PX
    return [
        (254, _LONG, 1 if reduced else 0),  # NewSubFileType: reduced-resolution version
        (256, _LONG, w),
        (257, _LONG, h),
        (258, _SHORT, (8, 8, 8)),
        (259, _SHORT, 1),  # no compression
        (262, _SHORT, 2),  # RGB
        (271, _ASCII, b"SyntheticCam\x00"),
        (272, _ASCII, b"Raw-1\x00"),
        (273, _LONG, ["data", 0]),
        (277, _SHORT, 3),
        (278, _LONG, h),
        (279, _LONG, w * h * 3),
        (284, _SHORT, 1),
        *extra,
    ]


def _cfa_ifd() -> list[tuple[int, int, object]]:
    w, h = RAW_PX
    return [
        (254, _LONG, 0),  # the full-resolution image
        (256, _LONG, w),
        (257, _LONG, h),
        (258, _SHORT, 16),
        (259, _SHORT, 1),
        (262, _SHORT, 32803),  # CFA (TIFF/EP)
        (273, _LONG, ["data", 1]),
        (277, _SHORT, 1),
        (278, _LONG, h),
        (279, _LONG, w * h * 2),
        (33421, _SHORT, (2, 2)),  # CFARepeatPatternDim
        (33422, _BYTE, (0, 1, 1, 2)),  # CFAPattern: R G / G B
    ]


def make_r01(folder: Path, tools: Tools | None) -> None:
    """R01_dng.dng (DNG 1.4: preview IFD0 + CFA SubIFD), R01_nef_like.nef (the same without
    DNG tags, as Nikon's NEF and other TIFF/EP raws are laid out) and R01_cr2_like.cr2
    (Canon's CR2 header: "CR", version 2.0 and the raw IFD's offset after the TIFF header)."""
    pixels = [_preview_pixels(), _cfa_pixels()]
    dng_tags = [
        (330, _LONG, ["ifd", 1]),  # SubIFDs
        (50706, _BYTE, (1, 4, 0, 0)),  # DNGVersion
        (50707, _BYTE, (1, 1, 0, 0)),  # DNGBackwardVersion
        (50708, _ASCII, b"SyntheticCam Raw-1\x00"),  # UniqueCameraModel
    ]
    (folder / "R01_dng.dng").write_bytes(_tiff([_preview_ifd(reduced=True, extra=dng_tags), _cfa_ifd()], pixels))
    nef = _tiff([_preview_ifd(reduced=True, extra=[(330, _LONG, ["ifd", 1])]), _cfa_ifd()], pixels)
    (folder / "R01_nef_like.nef").write_bytes(nef)
    # CR2: IFD0 is a full-size preview (here the small one, not reduced), the raw IFD follows.
    cr2_header = b"CR\x02\x00" + struct.pack("<I", 0)  # the raw IFD's offset is not read by the check
    cr2 = _tiff([_preview_ifd(reduced=False, extra=[])], pixels[:1], header_extra=cr2_header)
    (folder / "R01_cr2_like.cr2").write_bytes(cr2)


# --- R02, R03: valid files the decoders cannot handle -----------------------------------

#: colr 'nclx' of R02 (ITU-T H.273): BT.2020 primaries (9), PQ transfer (16, SMPTE ST 2084),
#: BT.2020 constant-luminance matrix (10), full range: the signalling of the HDR test file
#: in AOMediaCodec/libavif#324, which libavif's YUV-to-RGB conversion does not implement.
HDR_NCLX = (9, 16, 10, True)


def _small_avif() -> bytes:
    """A 96x64 AVIF of four colour blocks, encoded by Pillow (libaom) with one thread."""
    im = Image.new("RGB", (96, 64), (200, 60, 40))
    im.paste((40, 160, 70), (48, 0, 96, 32))
    im.paste((40, 60, 200), (0, 32, 48, 64))
    im.paste((230, 200, 40), (48, 32, 96, 64))
    out = io.BytesIO()
    im.save(out, format="AVIF", quality=80, speed=8, max_threads=1)
    return out.getvalue()


def make_r02(folder: Path, tools: Tools | None) -> None:
    """R02_hdr_bt2020cl.avif: Pillow's AVIF with its colr 'nclx' box rewritten to HDR_NCLX."""
    data = bytearray(_small_avif())
    at = data.index(b"colrnclx") + 8
    primaries, transfer, matrix, full = HDR_NCLX
    data[at : at + 7] = struct.pack(">HHHB", primaries, transfer, matrix, 0x80 if full else 0)
    (folder / "R02_hdr_bt2020cl.avif").write_bytes(bytes(data))


def make_r03(folder: Path, tools: Tools | None) -> None:
    """R03_heif_av1.heif: the same AV1 image under HEIF's generic brands only: ftyp
    'mif1' with compatible 'mif1', 'miaf' (no 'avif', so no AVIF reader claims it), padded
    with a 'free' box to its old size so that every offset stays valid."""
    data = _small_avif()
    size = struct.unpack(">I", data[:4])[0]
    assert data[4:8] == b"ftyp" and size >= 32
    ftyp = struct.pack(">I4s4sI4s4s", 24, b"ftyp", b"mif1", 0, b"mif1", b"miaf")
    free = struct.pack(">I4s", size - 24, b"free") + b"\x00" * (size - 32)
    (folder / "R03_heif_av1.heif").write_bytes(ftyp + free + data[size:])


CASES: tuple[Case, ...] = (
    Case(
        id="R01",
        title="Camera raws in TIFF clothing: DNG, a NEF-like TIFF/EP and a CR2 header",
        files=("R01_dng.dng", "R01_nef_like.nef", "R01_cr2_like.cr2"),
        make=make_r01,
        expected=(
            "permanent_failure, reason 'unsupported_format', detail naming a camera raw image (DNG 1.4.0.0;"
            " a reduced-resolution preview with the full image in a SubIFD; Canon CR2), decided before any pixel"
            " is decoded; never a 160x120 'full' variant of the preview; no retry, nothing written."
        ),
        reason="unsupported_format",
        source="python-pillow/Pillow#6482",
    ),
    Case(
        id="R02",
        title="AVIF with HDR signalling (BT.2020, PQ) and a matrix libavif cannot convert",
        files=("R02_hdr_bt2020cl.avif",),
        make=make_r02,
        expected=(
            "permanent_failure, reason 'unsupported_feature' (not 'corrupt_image'), the detail quoting libavif"
            " ('Conversion from YUV failed: Reformat failed'); no retry, nothing written."
        ),
        reason="unsupported_feature",
        source="AOMediaCodec/libavif#324",
    ),
    Case(
        id="R03",
        title="HEIF whose primary image is coded with a codec the HEIF decoder lacks (AV1)",
        files=("R03_heif_av1.heif",),
        make=make_r03,
        expected=(
            "permanent_failure, reason 'unsupported_feature' (not 'corrupt_image'), the detail quoting libheif"
            " ('Support for this compression format has not been built in'); no retry, nothing written."
        ),
        reason="unsupported_feature",
        source="strukturag/libheif#1501",
    ),
)
