"""The item structure of a HEIF or AVIF file, read before any decoder sees it.

A HEIF file (ISO/IEC 23008-12; AVIF is a HEIF profile over AV1) keeps its images as items
in a top-level ``meta`` box: ``iinf`` names them, ``iloc`` says where their bytes are,
``iprp`` (``ipco`` + ``ipma``) attaches properties such as the declared size (``ispe``) and
the codec configuration (``av1C``, ``hvcC``), ``iref`` links derived images (a ``grid`` of
tiles, an ``iovl`` overlay) to their inputs, and ``pitm`` names the primary image, the one a
viewer shows.

Decoders size their buffers from what the coded data says, not from ``ispe``: an AVIF whose
``ispe`` says 64x64 over a 16384x16384 AV1 frame decodes 268 MP, and a grid's canvas comes
from its own descriptor, however small its ``ispe``. So :func:`primary_image` walks every
item that decoding the primary image will decode and reads the sizes that the decoders will
actually allocate:

* an AV1 item (``av01``): ``max_frame_width_minus_1``/``max_frame_height_minus_1`` of each
  sequence header OBU in its ``av1C`` and at the start of its data (AV1 specification,
  5.5.1-5.5.2); no frame of the sequence can be larger;
* an HEVC item (``hvc1``): ``pic_width_in_luma_samples`` x ``pic_height_in_luma_samples`` of
  each sequence parameter set in its ``hvcC`` and at the start of its data (H.265 7.3.2.2.1),
  cropped by the conformance window for the comparison with ``ispe``;
* a ``grid``: its descriptor's output size and rows x columns (ISO/IEC 23008-12 6.6.2.3),
  the number and size of its tiles;
* an ``iovl`` (version 0): its canvas and its inputs, each placed at a signed offset that may
  put part of it outside the canvas (ISO/IEC 23008-12, ImageOverlay); an ``iden``: its single input;
* the primary's alpha plane (an ``auxl`` item), which both decoders decode with it.

Each canvas and each coded picture must fit ``max_pixels`` (``too_many_pixels``), and so
must fit the ``ispe`` it declares: data that decodes wider or taller than its ``ispe`` is
``too_many_pixels`` too, whatever ``max_pixels`` (the declared size is what every check
before decoding saw). A structure that otherwise contradicts itself is ``corrupt_image``:
an ``ispe`` larger than the size the coded data gives, a grid whose tile count is not rows
x columns, tiles of different sizes,
tiles that leave part of the output uncovered or lie a whole row or column outside it
(HEIF 6.6.2.3.1 only trims the last row and column; libavif's avifAreGridDimensionsValid
refuses the same). The tiles' total area is not
compared with ``max_pixels``: a 48 MP phone photo (8064x6048 in 512x512 tiles) covers
8192x6144 = 50.3 MP of tiles, and the canvas plus one tile is what a decoder holds.

An overlay whose inputs reach left of or above its canvas is one libheif (up to 1.23 at
least) composes wrongly: it drops such an input when the offsets are 16-bit and cuts rows
off it when they are 32-bit. For a decoder that does (:attr:`Decoder.misplaces_negative_offsets`),
:func:`primary_image` says how to hand it the same overlay on a canvas grown left and up so
that no input lies there (:class:`Recomposition`); the caller cuts the original canvas out.

The primary's transformative properties (``clap``, ``irot``, ``imir``; 6.5.9-6.5.12, the
clean aperture from ISO/IEC 14496-12 12.1.4) are returned in the order ``ipma`` lists them,
the order in which HEIF says a reader applies them (MIAF requires clap, irot, imir).

Pure parsing over ``bytes`` or an ``mmap``: no decoder, no AWS. Every loop is bounded
(:data:`MAX_ITEMS`, :data:`MAX_PROPERTIES`, :data:`MAX_EXTENTS`, :data:`CODE_SCAN_BYTES`).
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

from mediajobs.domain.errors import (
    CORRUPT_IMAGE,
    PIXELS,
    TOO_MANY_PIXELS,
    TRUNCATED_IMAGE,
    UNSUPPORTED_FEATURE,
    PermanentFailure,
)

Data = bytes | mmap.mmap

#: Most items a file may have. A 48 MP phone HEIC has about 250 (tiles, thumbnail, depth,
#: gain map); libheif refuses more than 1,000 by default.
MAX_ITEMS: Final = 10_000
#: Most property boxes in ``ipco`` and associations of one item.
MAX_PROPERTIES: Final = 10_000
#: Most extents of one item in ``iloc``.
MAX_EXTENTS: Final = 1_000
#: Deepest chain of derived images (a grid of tiles is depth 1).
MAX_DERIVATION_DEPTH: Final = 4
#: How far into an item's data the sequence header (AV1) or parameter sets (HEVC) are looked for.
CODE_SCAN_BYTES: Final = 64 * 1024

#: ``auxC`` types of an alpha plane (ISO/IEC 23008-12 Annex; MIAF 7.3.5.1).
ALPHA_AUX_TYPES: Final = frozenset({"urn:mpeg:mpegB:cicp:systems:auxiliary:alpha", "urn:mpeg:hevc:2015:auxid:1"})


def _corrupt(detail: str) -> PermanentFailure:
    return PermanentFailure(CORRUPT_IMAGE, detail)


class _Short(Exception):
    """A field runs past the end of its box."""


class _Fields:
    """Big-endian fields read one after another from ``data[pos:end]``."""

    def __init__(self, data: Data, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def take(self, n: int) -> bytes:
        if self.pos + n > self.end:
            raise _Short
        value = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return value

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big") if n else 0

    def cstring(self) -> str:
        at = self.pos
        while at < self.end and self.data[at] != 0:
            at += 1
        text = bytes(self.data[self.pos : at]).decode("utf-8", "replace")
        self.pos = min(at + 1, self.end)
        return text


@dataclass(frozen=True)
class Box:
    """A box: its type and where its payload lies in the file (``start`` after the header)."""

    kind: str
    start: int
    end: int


def child_boxes(data: Data, start: int, end: int, parent: str) -> Iterator[Box]:
    """The boxes in ``data[start:end]`` (ISO/IEC 14496-12, 4.2).

    Raises
    ------
    PermanentFailure
        ``corrupt_image`` when a box has an impossible size or runs past its parent.
    """
    pos = start
    while pos + 8 <= end:
        size, kind_bytes = struct.unpack(">I4s", bytes(data[pos : pos + 8]))
        header = 8
        if size == 1:
            if pos + 16 > end:
                raise _corrupt(f"box in {parent!r} at byte {pos} is cut")
            size = struct.unpack(">Q", bytes(data[pos + 8 : pos + 16]))[0]
            header = 16
        elif size == 0:
            size = end - pos
        kind = kind_bytes.decode("latin-1")
        if size < header or pos + size > end:
            raise _corrupt(f"box {kind!r} at byte {pos} does not fit in {parent!r}")
        yield Box(kind, pos + header, pos + size)
        pos += size


def top_level_meta(data: Data) -> Box | None:
    """The first top-level ``meta`` box of an ISO BMFF file, or ``None`` (none before the
    first box that runs past the end of the file or the end of the walk)."""
    n, pos = len(data), 0
    while pos + 8 <= n:
        size, kind = struct.unpack(">I4s", bytes(data[pos : pos + 8]))
        header = 8
        if size == 1 and pos + 16 <= n:
            size, header = struct.unpack(">Q", bytes(data[pos + 8 : pos + 16]))[0], 16
        elif size == 0:
            size = n - pos
        if size < header or pos + size > n:
            return None
        if kind == b"meta":
            return Box("meta", pos + header, pos + size)
        pos += size
    return None


# --- the structure ----------------------------------------------------------------------


@dataclass
class Item:
    """One item: ``type`` is its four-character code (``hvc1``, ``av01``, ``grid``, ``Exif`` ...).

    ``extents`` are (offset, length) pairs: absolute file offsets for construction method 0,
    offsets into ``idat`` for method 1; a length of 0 means "to the end" (8.11.3.3).
    ``properties`` are (index into :attr:`HeifStructure.properties`, essential) in ``ipma``
    order, and ``associations`` where each of them is written: (file offset, size in bytes)
    of its entry in ``ipma``; ``refs`` maps a reference type (``dimg``, ``auxl``, ``thmb`` ...)
    to the items this item refers to, in order.
    """

    id: int
    type: str
    hidden: bool = False
    construction_method: int = 0
    data_reference_index: int = 0
    extents: tuple[tuple[int, int], ...] = ()
    properties: list[tuple[int, bool]] = field(default_factory=list)
    associations: list[tuple[int, int]] = field(default_factory=list)
    refs: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class HeifStructure:
    """What ``meta`` says: the brands, the primary item id, the items, the property boxes
    (``ipco`` order) and the ``idat`` payload, over the file's bytes ``data``."""

    data: Data
    brands: tuple[str, ...]
    primary_id: int | None
    items: dict[int, Item]
    properties: list[Box]
    idat: Box | None

    def property_boxes(self, item: Item, kind: str) -> list[Box]:
        """The property boxes of type ``kind`` associated with ``item``, in ``ipma`` order."""
        return [self.properties[i] for i, _ in item.properties if self.properties[i].kind == kind]

    def item_bytes(self, item: Item, limit: int) -> bytes:
        """The first ``limit`` bytes of ``item``'s data (fewer when it is shorter or cut by
        the end of the file). Construction method 2 (data from other items) gives none."""
        return b"".join(bytes(self.data[start:end]) for start, end in self.item_runs(item, limit))

    def item_runs(self, item: Item, limit: int) -> list[tuple[int, int]]:
        """Where the first ``limit`` bytes of ``item``'s data lie in the file: ``(start, end)``
        byte ranges in data order (as :meth:`item_bytes` reads them)."""
        runs: list[tuple[int, int]] = []
        left = limit
        for offset, length in item.extents:
            if left <= 0:
                break
            if item.construction_method == 0:
                start, end = offset, len(self.data) if length == 0 else offset + length
            elif item.construction_method == 1 and self.idat is not None:
                start = self.idat.start + offset
                end = self.idat.end if length == 0 else min(start + length, self.idat.end)
            else:
                break
            end = min(end, start + left, len(self.data))
            if start < end:
                runs.append((start, end))
                left -= end - start
        return runs


def read_structure(data: Data) -> HeifStructure | None:
    """The item structure of the HEIF/AVIF file ``data``, or ``None`` when it has no
    top-level ``meta`` box (an MP4, or not an ISO BMFF file).

    Raises
    ------
    PermanentFailure
        ``corrupt_image`` when ``meta`` or one of its boxes is malformed, or past the limits
        (:data:`MAX_ITEMS`, :data:`MAX_PROPERTIES`, :data:`MAX_EXTENTS`).
    """
    meta = top_level_meta(data)
    if meta is None or bytes(data[4:8]) != b"ftyp":
        return None
    size = int.from_bytes(bytes(data[0:4]), "big")
    brands = tuple(bytes(data[at : at + 4]).decode("latin-1") for at in (8, *range(16, min(size, 8 + 4 * 64), 4)))
    try:
        return _read_meta(data, meta, brands)
    except _Short as exc:
        raise _corrupt("a box inside 'meta' is shorter than its fields") from exc


def _read_meta(data: Data, meta: Box, brands: tuple[str, ...]) -> HeifStructure:
    children: dict[str, Box] = {}
    for child in child_boxes(data, meta.start + 4, meta.end, "meta"):  # meta is a full box
        children.setdefault(child.kind, child)
    items: dict[int, Item] = {}
    if "iinf" in children:
        _read_iinf(data, children["iinf"], items)
    primary_id = None
    if "pitm" in children:
        pitm = children["pitm"]
        fields = _Fields(data, pitm.start, pitm.end)
        version = fields.uint(1)
        fields.uint(3)
        primary_id = fields.uint(2 if version == 0 else 4)
    if "iloc" in children:
        _read_iloc(data, children["iloc"], items)
    properties: list[Box] = []
    if "iprp" in children:
        properties = _read_iprp(data, children["iprp"], items)
    if "iref" in children:
        _read_iref(data, children["iref"], items)
    return HeifStructure(data, brands, primary_id, items, properties, children.get("idat"))


def _read_iinf(data: Data, iinf: Box, items: dict[int, Item]) -> None:
    """ItemInfoBox (ISO/IEC 14496-12 8.11.6): ``infe`` versions 2 and 3 carry the item type."""
    fields = _Fields(data, iinf.start, iinf.end)
    version = fields.uint(1)
    fields.uint(3)
    count = fields.uint(2 if version == 0 else 4)
    if count > MAX_ITEMS:
        raise _corrupt(f"{count} items > {MAX_ITEMS}")
    for infe in child_boxes(data, fields.pos, iinf.end, "iinf"):
        if infe.kind != "infe":
            continue
        if len(items) >= MAX_ITEMS:
            raise _corrupt(f"more than {MAX_ITEMS} items")
        entry = _Fields(data, infe.start, infe.end)
        infe_version = entry.uint(1)
        flags = entry.uint(3)
        if infe_version < 2:  # no item type: not an image item (14496-12 8.11.6.2)
            item_id = entry.uint(2)
            items[item_id] = Item(item_id, "", hidden=bool(flags & 1))
            continue
        item_id = entry.uint(2 if infe_version == 2 else 4)
        entry.uint(2)  # item_protection_index
        item_type = entry.take(4).decode("latin-1")
        if item_id in items:
            raise _corrupt(f"item {item_id} is declared twice")
        items[item_id] = Item(item_id, item_type, hidden=bool(flags & 1))


def _read_iloc(data: Data, iloc: Box, items: dict[int, Item]) -> None:
    """ItemLocationBox (ISO/IEC 14496-12 8.11.3), versions 0-2."""
    fields = _Fields(data, iloc.start, iloc.end)
    version = fields.uint(1)
    fields.uint(3)
    sizes = fields.uint(1)
    offset_size, length_size = sizes >> 4, sizes & 15
    sizes = fields.uint(1)
    base_offset_size, index_size = sizes >> 4, (sizes & 15) if version in (1, 2) else 0
    if {offset_size, length_size, base_offset_size, index_size} - {0, 4, 8}:
        raise _corrupt("iloc field sizes other than 0, 4 or 8 bytes")
    count = fields.uint(2 if version < 2 else 4)
    if count > MAX_ITEMS:
        raise _corrupt(f"iloc lists {count} items > {MAX_ITEMS}")
    for _ in range(count):
        item_id = fields.uint(2 if version < 2 else 4)
        method = fields.uint(2) & 15 if version in (1, 2) else 0
        reference = fields.uint(2)
        base = fields.uint(base_offset_size)
        extent_count = fields.uint(2)
        if extent_count > MAX_EXTENTS:
            raise _corrupt(f"item {item_id} has {extent_count} extents > {MAX_EXTENTS}")
        extents = []
        for _ in range(extent_count):
            fields.uint(index_size)
            offset = fields.uint(offset_size)
            extents.append((base + offset, fields.uint(length_size)))
        item = items.setdefault(item_id, Item(item_id, ""))
        item.construction_method, item.data_reference_index, item.extents = method, reference, tuple(extents)


def _read_iprp(data: Data, iprp: Box, items: dict[int, Item]) -> list[Box]:
    """ItemPropertiesBox (ISO/IEC 23008-12 9.3): ``ipco`` boxes, then ``ipma`` associations."""
    properties: list[Box] = []
    associations: list[Box] = []
    for child in child_boxes(data, iprp.start, iprp.end, "iprp"):
        if child.kind == "ipco" and not properties:
            for prop in child_boxes(data, child.start, child.end, "ipco"):
                properties.append(prop)
                if len(properties) > MAX_PROPERTIES:
                    raise _corrupt(f"more than {MAX_PROPERTIES} properties")
        elif child.kind == "ipma":
            associations.append(child)
    for ipma in associations:
        fields = _Fields(data, ipma.start, ipma.end)
        version = fields.uint(1)
        flags = fields.uint(3)
        count = fields.uint(4)
        if count > MAX_ITEMS:
            raise _corrupt(f"ipma lists {count} items > {MAX_ITEMS}")
        for _ in range(count):
            item_id = fields.uint(2 if version == 0 else 4)
            item = items.setdefault(item_id, Item(item_id, ""))
            for _ in range(fields.uint(1)):
                at = fields.pos
                value, bits = (fields.uint(2), 15) if flags & 1 else (fields.uint(1), 7)
                index = value & ((1 << bits) - 1)
                if index == 0:
                    continue  # "no property"
                if index > len(properties):
                    raise _corrupt(f"item {item_id} is associated with property {index} of {len(properties)}")
                item.properties.append((index - 1, bool(value >> bits)))
                item.associations.append((at, fields.pos - at))
            if len(item.properties) > MAX_PROPERTIES:
                raise _corrupt(f"item {item_id} has more than {MAX_PROPERTIES} properties")
    return properties


def _read_iref(data: Data, iref: Box, items: dict[int, Item]) -> None:
    """ItemReferenceBox (ISO/IEC 14496-12 8.11.12): 16-bit ids in version 0, 32-bit in 1."""
    fields = _Fields(data, iref.start, iref.end)
    version = fields.uint(1)
    fields.uint(3)
    id_size = 2 if version == 0 else 4
    total = 0
    for ref in child_boxes(data, fields.pos, iref.end, "iref"):
        entry = _Fields(data, ref.start, ref.end)
        from_id = entry.uint(id_size)
        count = entry.uint(2)
        total += count
        if total > MAX_ITEMS * 8:
            raise _corrupt(f"more than {MAX_ITEMS * 8} item references")
        to = [entry.uint(id_size) for _ in range(count)]
        item = items.setdefault(from_id, Item(from_id, ""))
        item.refs.setdefault(ref.kind, []).extend(to)


def extent_problem(structure: HeifStructure, data_end: int) -> PermanentFailure | None:
    """Whether an item's data lies past ``data_end`` (``truncated_image``; the end of the
    file's last complete box) or outside ``idat`` (``corrupt_image``); ``None`` when every
    extent is there. A length of 0 ("to the end of the file") is always there.

    Only items in this file (data reference 0) and construction methods 0 (file) and 1
    (``idat``) are checked: method 2 points at other items, which are checked themselves.
    """
    for item in structure.items.values():
        if item.data_reference_index != 0:
            continue
        for offset, length in item.extents:
            end = offset + length
            if item.construction_method == 0 and (offset > data_end or end > data_end):
                return PermanentFailure(
                    TRUNCATED_IMAGE,
                    f"item {item.id} ({item.type or 'data'}) needs bytes {offset}..{end}, the data ends at {data_end}",
                )
            if item.construction_method == 1 and length:
                idat_size = 0 if structure.idat is None else structure.idat.end - structure.idat.start
                if end > idat_size:
                    return _corrupt(f"item {item.id} needs bytes {offset}..{end} of idat, which has {idat_size}")
    return None


# --- codec headers ----------------------------------------------------------------------


class _Bits:
    """Bits read most significant first (AV1 f(n), H.265 u(n) and ue(v))."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int) -> int:
        if self.pos + n > len(self.data) * 8:
            raise _Short
        value = 0
        for _ in range(n):
            value = (value << 1) | ((self.data[self.pos >> 3] >> (7 - (self.pos & 7))) & 1)
            self.pos += 1
        return value

    def skip(self, n: int) -> None:
        if self.pos + n > len(self.data) * 8:
            raise _Short
        self.pos += n

    def uvlc(self) -> int:
        """AV1 uvlc() (4.10.3)."""
        zeros = 0
        while not self.read(1):
            zeros += 1
            if zeros >= 32:
                return (1 << 32) - 1
        return self.read(zeros) + (1 << zeros) - 1

    def ue(self) -> int:
        """H.265 ue(v), Exp-Golomb (9.2)."""
        zeros = 0
        while not self.read(1):
            zeros += 1
            if zeros > 31:
                raise _Short
        return self.read(zeros) + (1 << zeros) - 1


def av1_sequence_header_size(payload: bytes) -> tuple[int, int]:
    """(max_frame_width, max_frame_height) in pixels from an AV1 sequence header OBU's
    payload (AV1 specification 5.5.1 sequence_header_obu, up to max_frame_height_minus_1).

    Raises
    ------
    ValueError
        When the payload ends before those fields.
    """
    bits = _Bits(payload)
    try:
        bits.skip(3)  # seq_profile
        bits.skip(1)  # still_picture
        reduced = bits.read(1)
        if reduced:
            bits.skip(5)  # seq_level_idx[0]
        else:
            timing_info_present = bits.read(1)
            decoder_model_info_present = 0
            buffer_delay_length = 0
            if timing_info_present:
                bits.skip(64)  # num_units_in_display_tick, time_scale
                if bits.read(1):  # equal_picture_interval
                    bits.uvlc()  # num_ticks_per_picture_minus_1
                decoder_model_info_present = bits.read(1)
                if decoder_model_info_present:
                    buffer_delay_length = bits.read(5) + 1
                    bits.skip(32 + 5 + 5)
            initial_display_delay_present = bits.read(1)
            for _ in range(bits.read(5) + 1):  # operating_points_cnt_minus_1
                bits.skip(12)  # operating_point_idc
                if bits.read(5) > 7:  # seq_level_idx
                    bits.skip(1)  # seq_tier
                if decoder_model_info_present and bits.read(1):
                    bits.skip(2 * buffer_delay_length + 1)  # operating_parameters_info
                if initial_display_delay_present and bits.read(1):
                    bits.skip(4)
        width_bits, height_bits = bits.read(4) + 1, bits.read(4) + 1
        return bits.read(width_bits) + 1, bits.read(height_bits) + 1
    except _Short as exc:
        raise ValueError("sequence header ends early") from exc


def _leb128(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        if pos >= len(data):
            raise ValueError("leb128 runs past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos
    raise ValueError("leb128 longer than 8 bytes")


#: OBU types (AV1 6.2.2): sequence header; frame header, tile group, frame (a picture follows).
_OBU_SEQUENCE_HEADER: Final = 1
_OBU_PICTURE: Final = frozenset({3, 4, 6})


def av1_frame_sizes(obus: bytes) -> list[tuple[int, int]]:
    """The max frame size of every sequence header among the OBUs ``obus`` (low-overhead
    format, AV1 5.2), read until the first picture OBU or the end of ``obus``.

    Raises
    ------
    ValueError
        On an OBU that cannot be read.
    """
    sizes: list[tuple[int, int]] = []
    pos = 0
    while pos < len(obus):
        header = obus[pos]
        if header & 0x80:
            raise ValueError(f"OBU at byte {pos} has its forbidden bit set")
        kind, extension, has_size = (header >> 3) & 15, (header >> 2) & 1, (header >> 1) & 1
        pos += 1 + extension
        if has_size:
            size, pos = _leb128(obus, pos)
        else:
            size = len(obus) - pos
        if kind in _OBU_PICTURE:
            break
        if kind == _OBU_SEQUENCE_HEADER:
            if pos + size > len(obus):
                break  # cut by the scan window: what was read so far stands
            sizes.append(av1_sequence_header_size(obus[pos : pos + size]))
        pos += size
    return sizes


def _unescape(nal: bytes) -> bytes:
    """An H.265 NAL unit's RBSP: emulation prevention bytes (0x000003) removed (7.4.2)."""
    return nal.replace(b"\x00\x00\x03", b"\x00\x00")


def hevc_sps_size(nal: bytes) -> tuple[int, int, int, int]:
    """(coded width, coded height, cropped width, cropped height) in pixels from an H.265
    sequence parameter set NAL unit with its 2-byte header (7.3.2.2.1, profile_tier_level
    7.3.3, conformance window 7.4.3.2.1).

    Raises
    ------
    ValueError
        When the NAL unit ends before those fields or the window is larger than the picture.
    """
    bits = _Bits(_unescape(nal[2:]))
    try:
        bits.skip(4)  # sps_video_parameter_set_id
        max_sub_layers_minus1 = bits.read(3)
        bits.skip(1)  # sps_temporal_id_nesting_flag
        bits.skip(96)  # general profile (88 bits) and general_level_idc
        present = [(bits.read(1), bits.read(1)) for _ in range(max_sub_layers_minus1)]
        if max_sub_layers_minus1 > 0:
            bits.skip(2 * (8 - max_sub_layers_minus1))
        for profile_present, level_present in present:
            bits.skip(88 * profile_present + 8 * level_present)
        bits.ue()  # sps_seq_parameter_set_id
        chroma_format_idc = bits.ue()
        separate_planes = bits.read(1) if chroma_format_idc == 3 else 0
        width, height = bits.ue(), bits.ue()
        left = right = top = bottom = 0
        if bits.read(1):  # conformance_window_flag
            left, right, top, bottom = bits.ue(), bits.ue(), bits.ue(), bits.ue()
    except _Short as exc:
        raise ValueError("sequence parameter set ends early") from exc
    sub_w = 2 if chroma_format_idc in (1, 2) and not separate_planes else 1
    sub_h = 2 if chroma_format_idc == 1 and not separate_planes else 1
    cropped_w, cropped_h = width - sub_w * (left + right), height - sub_h * (top + bottom)
    if cropped_w <= 0 or cropped_h <= 0:
        raise ValueError(f"conformance window larger than the {width}x{height} picture")
    return width, height, cropped_w, cropped_h


_HEVC_SPS: Final = 33


def _hvcc_nal_units(payload: bytes) -> tuple[list[bytes], int]:
    """(parameter set NAL units, NAL length size in bytes) of an HEVCDecoderConfigurationRecord
    (ISO/IEC 14496-15 8.3.3.1)."""
    if len(payload) < 23:
        raise ValueError("hvcC shorter than its 23-byte header")
    length_size = (payload[21] & 3) + 1
    pos, units = 23, []
    for _ in range(payload[22]):
        if pos + 3 > len(payload):
            raise ValueError("hvcC array cut")
        count = int.from_bytes(payload[pos + 1 : pos + 3], "big")
        pos += 3
        for _ in range(count):
            size = int.from_bytes(payload[pos : pos + 2], "big")
            if pos + 2 + size > len(payload):
                raise ValueError("hvcC NAL unit cut")
            units.append(payload[pos + 2 : pos + 2 + size])
            pos += 2 + size
    return units, length_size


def _length_prefixed(data: bytes, length_size: int) -> list[bytes]:
    """The whole NAL units at the start of ``data`` (each prefixed by its length)."""
    units, pos = [], 0
    while pos + length_size <= len(data):
        size = int.from_bytes(data[pos : pos + length_size], "big")
        pos += length_size
        if size == 0 or pos + size > len(data):
            break
        units.append(data[pos : pos + size])
        pos += size
    return units


# --- transformations --------------------------------------------------------------------


@dataclass(frozen=True)
class CleanAperture:
    """``clap``: keep the rectangle ``left, top, width, height`` (pixels) of the image it
    applies to."""

    left: int
    top: int
    width: int
    height: int


@dataclass(frozen=True)
class Rotation:
    """``irot``: rotate ``quarter_turns`` x 90 degrees anti-clockwise (1-3)."""

    quarter_turns: int


@dataclass(frozen=True)
class Mirror:
    """``imir``: ``axis`` 0 exchanges top and bottom, 1 exchanges left and right
    (ISO/IEC 23008-12:2022 6.5.12, where the field is named ``mode``; libheif and libavif agree)."""

    axis: int


Transform = CleanAperture | Rotation | Mirror

#: Each transformation as a matrix on (x, y) pixel coordinates about the centre, y down.
_ROTATE_CCW: Final[tuple[tuple[int, int], tuple[int, int]]] = ((0, 1), (-1, 0))
_FLIP_TOP_BOTTOM: Final[tuple[tuple[int, int], tuple[int, int]]] = ((1, 0), (0, -1))
_FLIP_LEFT_RIGHT: Final[tuple[tuple[int, int], tuple[int, int]]] = ((-1, 0), (0, 1))
#: The matrix that turns the stored picture into the displayed one, for each EXIF orientation
#: (TIFF 6.0 / EXIF 2.32 tag 0x0112; what ``PIL.ImageOps.exif_transpose`` applies).
_EXIF_MATRICES: Final = {
    ((1, 0), (0, 1)): 1,
    ((-1, 0), (0, 1)): 2,  # mirror left-right
    ((-1, 0), (0, -1)): 3,  # rotate 180
    ((1, 0), (0, -1)): 4,  # mirror top-bottom
    ((0, 1), (1, 0)): 5,  # transpose
    ((0, -1), (1, 0)): 6,  # rotate 90 clockwise
    ((0, -1), (-1, 0)): 7,  # transverse
    ((0, 1), (-1, 0)): 8,  # rotate 90 anti-clockwise
}


_Matrix = tuple[tuple[int, int], tuple[int, int]]


def _times(a: _Matrix, b: _Matrix) -> _Matrix:
    (a00, a01), (a10, a11) = a
    (b00, b01), (b10, b11) = b
    return ((a00 * b00 + a01 * b10, a00 * b01 + a01 * b11), (a10 * b00 + a11 * b10, a10 * b01 + a11 * b11))


def exif_orientation(transforms: tuple[Transform, ...]) -> int:
    """The EXIF orientation (1-8) whose display transform equals the rotations and mirrors of
    ``transforms`` applied in order; a clean aperture does not change it.

    irot 1/2/3 (anti-clockwise) map to 8/3/6, imir axis 0 to 4 and axis 1 to 2; irot then
    imir compose, e.g. irot 1 then imir 0 is 5 (transpose), as libavif maps them.
    """
    matrix: _Matrix = ((1, 0), (0, 1))
    for step in transforms:
        if isinstance(step, Rotation):
            for _ in range(step.quarter_turns % 4):
                matrix = _times(_ROTATE_CCW, matrix)
        elif isinstance(step, Mirror):
            matrix = _times(_FLIP_TOP_BOTTOM if step.axis == 0 else _FLIP_LEFT_RIGHT, matrix)
    return _EXIF_MATRICES[matrix]


def _round_half_up(value: Fraction) -> int:
    return math.floor(value + Fraction(1, 2))


def clean_aperture(payload: bytes, width_px: int, height_px: int) -> CleanAperture:
    """The whole-pixel rectangle a ``clap`` (ISO/IEC 14496-12 12.1.4) keeps of a
    ``width_px`` x ``height_px`` image.

    The aperture is centred at ((width - 1) / 2 + horizOff, (height - 1) / 2 + vertOff).
    MIAF requires whole pixels inside the image; other values are rounded and clamped as
    libheif does (left rounded down, the others to nearest, then clamped to the image), so
    that AVIF, cropped here, and HEIC, cropped by libheif, agree.

    Raises
    ------
    PermanentFailure
        ``corrupt_image`` when a denominator is zero or nothing of the image is left.
    """
    if len(payload) < 32:
        raise _corrupt("clap shorter than its 32 bytes")
    w_n, w_d, h_n, h_d, x_n, x_d, y_n, y_d = struct.unpack(">IIIIiIiI", payload[:32])
    if 0 in (w_d, h_d, x_d, y_d):
        raise _corrupt("clap with a zero denominator")
    aperture_w, aperture_h = Fraction(w_n, w_d), Fraction(h_n, h_d)
    left_exact = Fraction(x_n, x_d) + Fraction(width_px - 1, 2) - (aperture_w - 1) / 2
    top_exact = Fraction(y_n, y_d) + Fraction(height_px - 1, 2) - (aperture_h - 1) / 2
    left = math.trunc(left_exact)
    right = _round_half_up(aperture_w - 1 + left)
    top = _round_half_up(top_exact)
    bottom = _round_half_up(aperture_h - 1 + top)
    left, top = max(left, 0), max(top, 0)
    right, bottom = min(right, width_px - 1), min(bottom, height_px - 1)
    if left > right or top > bottom:
        raise _corrupt(
            f"clap {float(aperture_w):g}x{float(aperture_h):g} lies outside the {width_px}x{height_px} image"
        )
    return CleanAperture(left, top, right - left + 1, bottom - top + 1)


def _transforms(
    structure: HeifStructure, item: Item, size: tuple[int, int]
) -> tuple[tuple[Transform, ...], tuple[int, int]]:
    """``item``'s transformations in ``ipma`` order, and its size after them."""
    steps: list[Transform] = []
    width, height = size
    for index, _ in item.properties:
        prop = structure.properties[index]
        if prop.kind not in ("clap", "irot", "imir"):
            continue
        payload = bytes(structure.data[prop.start : prop.end])
        if not payload:
            raise _corrupt(f"empty {prop.kind} of item {item.id}")
        if prop.kind == "clap":
            crop = clean_aperture(payload, width, height)
            steps.append(crop)
            width, height = crop.width, crop.height
        elif prop.kind == "irot":
            turns = payload[0] & 3
            if turns:
                steps.append(Rotation(turns))
                if turns % 2:
                    width, height = height, width
        else:
            steps.append(Mirror(payload[0] & 1))
    return tuple(steps), (width, height)


# --- the primary image ------------------------------------------------------------------


#: The derived image types this module reads (ISO/IEC 23008-12 6.6.2).
_DERIVED: Final = frozenset({"grid", "iovl", "iden"})


@dataclass(frozen=True)
class Decoder:
    """What a decoder can decode: coded item types (``hvc1``, ``av01``) and derived image
    types (``grid``, ``iovl``, ``iden``), the most items it reads in one file (``None``: no
    limit of its own), and its name for messages.

    ``misplaces_negative_offsets``: the decoder composes an overlay input placed left of or
    above the canvas (a negative offset) wrongly, so such an overlay is handed to it
    recomposed (:class:`Recomposition`). libheif does, up to 1.23 at least: its
    ``readvec_signed`` reads a negative 16-bit offset as about -2^31, so the input is dropped,
    and ``HeifPixelImage::overlay`` copies an input cut by the top edge |offset| rows short.
    """

    name: str
    coded: frozenset[str]
    derived: frozenset[str]
    max_items: int | None = None
    misplaces_negative_offsets: bool = False


@dataclass(frozen=True)
class Placement:
    """Where an overlay puts one input: its top-left corner at (``x_px``, ``y_px``) on the
    canvas (negative: left of or above it), ``width_px`` x ``height_px`` as placed (after the
    input's own transformations)."""

    item_id: int
    x_px: int
    y_px: int
    width_px: int
    height_px: int

    def overlaps(self, width_px: int, height_px: int) -> bool:
        """Whether any of it lies on a ``width_px`` x ``height_px`` canvas."""
        return (
            self.x_px < width_px
            and self.y_px < height_px
            and self.x_px + self.width_px > 0
            and self.y_px + self.height_px > 0
        )


@dataclass(frozen=True)
class Overlay:
    """An ``iovl`` derived image as its descriptor says (ISO/IEC 23008-12, ImageOverlay,
    version 0): a ``width_px`` x ``height_px`` canvas filled with ``fill_rgba`` (16-bit
    R, G, B, A; libheif fills with the top 8 bits of R, G, B), then each input drawn over it
    in ``placements`` order, the first at the bottom. Parts of an input outside the canvas
    are not drawn. ``wide``: its sizes and offsets are 32-bit fields (flags bit 0), not 16.
    """

    item_id: int
    width_px: int
    height_px: int
    fill_rgba: tuple[int, int, int, int]
    wide: bool
    placements: tuple[Placement, ...]

    def outside_left_top(self) -> tuple[int, int]:
        """(pixels, pixels) the inputs that show on the canvas reach past its left and top edges."""
        shown = [p for p in self.placements if p.overlaps(self.width_px, self.height_px)]
        return max([0, *(-p.x_px for p in shown)]), max([0, *(-p.y_px for p in shown)])


@dataclass(frozen=True)
class Recomposition:
    """The same overlay with no input left of or above its canvas, for a decoder that
    misplaces those (:attr:`Decoder.misplaces_negative_offsets`): the canvas grown by
    ``left_px`` and ``top_px`` to ``width_px`` x ``height_px``, every input moved by as much,
    and the overlay's own ``clap``/``irot``/``imir`` detached (they apply to the original
    canvas: the caller applies them, after cutting the original canvas back out at
    (``left_px``, ``top_px``)). Inputs are decoded and drawn as before, in the same order, so
    the cut-out is the overlay as the specification composes it.

    ``patches`` are (file offset, bytes) written over the original file, each the same length
    as what it replaces: the descriptor's sizes and offsets, the overlay's ``ispe``, and its
    ``ipma`` entries of the transformations (set to 0, "no property").
    """

    left_px: int
    top_px: int
    width_px: int
    height_px: int
    patches: tuple[tuple[int, bytes], ...]

    def applied_to(self, data: bytes) -> bytes:
        """The file ``data`` with :attr:`patches` written over it."""
        patched = bytearray(data)
        for offset, replacement in self.patches:
            patched[offset : offset + len(replacement)] = replacement
        return bytes(patched)


@dataclass(frozen=True)
class PrimaryImage:
    """The primary image as decoding will produce it.

    Attributes
    ----------
    item_id, item_type: the primary item.
    width_px, height_px: its size before its transformations (the stored size).
    transforms: its ``clap``/``irot``/``imir`` in application order.
    display_width_px, display_height_px: its size after them.
    coded_items: distinct coded pictures decoded for it (tiles, overlay inputs, alpha).
    largest_picture_px: the largest buffer, in pixels, one of them or a canvas needs.
    overlay: its descriptor, when it is an ``iovl``.
    recomposition: how to hand it to the decoder instead of the file as it is (an overlay
        with inputs left of or above its canvas, for a decoder that misplaces them), or ``None``.
    """

    item_id: int
    item_type: str
    width_px: int
    height_px: int
    transforms: tuple[Transform, ...]
    display_width_px: int
    display_height_px: int
    coded_items: int
    largest_picture_px: int
    overlay: Overlay | None = None
    recomposition: Recomposition | None = None


@dataclass
class _Walk:
    structure: HeifStructure
    decoder: Decoder
    max_pixels: int
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)
    headers: dict[tuple[object, ...], tuple[int, int]] = field(default_factory=dict)
    coded: int = 0
    largest: int = 0
    overlays: dict[int, Overlay] = field(default_factory=dict)

    def fits(self, what: str, width: int, height: int) -> None:
        pixels = width * height
        if pixels > self.max_pixels:
            found = f"{what} is {width}x{height} = {pixels} pixels"
            raise PermanentFailure(TOO_MANY_PIXELS, PIXELS.detail(found, f"{self.max_pixels}"))
        self.largest = max(self.largest, pixels)

    def ispe(self, item: Item) -> tuple[int, int] | None:
        found = self.structure.property_boxes(item, "ispe")
        if not found:
            return None
        prop = found[0]
        payload = bytes(self.structure.data[prop.start : prop.end])
        if len(payload) < 12:
            raise _corrupt(f"ispe of item {item.id} is cut")
        width, height = struct.unpack(">II", payload[4:12])
        if width == 0 or height == 0:
            raise _corrupt(f"ispe of item {item.id} says {width}x{height}")
        return width, height

    def output_size(self, item_id: int, path: tuple[int, ...] = ()) -> tuple[int, int]:
        """The size of ``item_id``'s image as its user (a grid, the viewer) receives it,
        before its own transformations; checks it and everything it is made of."""
        if item_id in self.sizes:
            return self.sizes[item_id]
        if item_id in path:
            raise _corrupt(f"item {item_id} is derived from itself")
        if len(path) > MAX_DERIVATION_DEPTH:
            raise _corrupt(f"images derived more than {MAX_DERIVATION_DEPTH} levels deep")
        item = self.structure.items.get(item_id)
        if item is None or not item.type:
            raise _corrupt(f"item {item_id} is referred to but not declared")
        supported = item.type in self.decoder.coded or item.type in self.decoder.derived & _DERIVED
        if not supported and item.type == "iovl":
            count = len(item.refs.get("dimg", []))
            raise PermanentFailure(
                UNSUPPORTED_FEATURE,
                f"item {item_id} is an overlay (iovl) of {count} images: {self.decoder.name} cannot compose it",
            )
        if not supported:
            raise PermanentFailure(
                UNSUPPORTED_FEATURE, f"item {item_id} is a {item.type!r} image: {self.decoder.name} cannot decode it"
            )
        declared = self.ispe(item)
        if declared is not None:
            self.fits(f"{item.type} item {item_id} (ispe)", *declared)
        if item.type in self.decoder.coded:
            size = self._coded(item, declared)
        elif item.type == "grid":
            size = self._grid(item, path + (item_id,))
        elif item.type == "iovl":
            size = self._overlay(item, path + (item_id,))
        else:  # iden: one input, as it comes out of its own transformations
            inputs = item.refs.get("dimg", [])
            if len(inputs) != 1:
                raise _corrupt(f"iden item {item_id} has {len(inputs)} inputs, not 1")
            source = self.structure.items.get(inputs[0])
            if source is None:
                raise _corrupt(f"iden item {item_id} refers to missing item {inputs[0]}")
            _, size = _transforms(self.structure, source, self.output_size(inputs[0], path + (item_id,)))
        if declared is not None and declared != size:
            detail = f"{item.type} item {item_id}: ispe says {declared[0]}x{declared[1]}, its data {size[0]}x{size[1]}"
            if size[0] > declared[0] or size[1] > declared[1]:  # decodes more than it declares: a bomb's lie
                raise PermanentFailure(TOO_MANY_PIXELS, detail)
            raise _corrupt(detail)
        self.sizes[item_id] = size
        return size

    def _coded(self, item: Item, declared: tuple[int, int] | None) -> tuple[int, int]:
        """A coded picture's size from its codec headers (``declared`` when it has none we read).

        Items with the same type, configuration and data (a grid's tiles all pointing at one
        picture) are read once."""
        key = (item.type, item.construction_method, item.extents, tuple(i for i, _ in item.properties))
        if key in self.headers:
            self.coded += 1
            return self.headers[key]
        size = self._coded_headers(item, declared)
        self.headers[key] = size
        return size

    def _coded_headers(self, item: Item, declared: tuple[int, int] | None) -> tuple[int, int]:
        structure = self.structure
        coded: list[tuple[int, int, int, int]] = []  # (allocated w, h, shown w, h)
        try:
            if item.type == "av01":
                obus = b""
                for prop in structure.property_boxes(item, "av1C")[:1]:
                    obus += bytes(structure.data[prop.start + 4 : prop.end])  # configOBUs after 4 bytes
                found = av1_frame_sizes(obus) + av1_frame_sizes(structure.item_bytes(item, CODE_SCAN_BYTES))
                coded = [(w, h, w, h) for w, h in found]
                if not coded:
                    raise _corrupt(f"av01 item {item.id} has no sequence header")
            elif item.type == "hvc1":
                configs = structure.property_boxes(item, "hvcC")
                if not configs:
                    raise _corrupt(f"hvc1 item {item.id} has no hvcC")
                units, length_size = _hvcc_nal_units(bytes(structure.data[configs[0].start : configs[0].end]))
                units += _length_prefixed(structure.item_bytes(item, CODE_SCAN_BYTES), length_size)
                coded = [hevc_sps_size(u) for u in units if len(u) > 2 and (u[0] >> 1) & 63 == _HEVC_SPS]
                if not coded:
                    raise _corrupt(f"hvc1 item {item.id} has no sequence parameter set")
        except ValueError as exc:
            raise _corrupt(f"{item.type} item {item.id}: {exc}") from exc
        if not coded:
            if declared is None:
                raise _corrupt(f"{item.type} item {item.id} has no ispe")
            coded = [(declared[0], declared[1], declared[0], declared[1])]
        for width, height, _, _ in coded:
            self.fits(f"{item.type} item {item.id} (coded)", width, height)
        shown = {(w, h) for _, _, w, h in coded}
        if len(shown) > 1:
            raise _corrupt(f"{item.type} item {item.id} has headers of different sizes {sorted(shown)}")
        self.coded += 1
        return shown.pop()

    def _descriptor(self, item: Item, minimum: int) -> bytes:
        data = self.structure.item_bytes(item, 8 + minimum + 16 * 65536)
        if len(data) < minimum:
            raise _corrupt(f"{item.type} item {item.id} has {len(data)} bytes of descriptor, needs {minimum}")
        return data

    def _grid(self, item: Item, path: tuple[int, ...]) -> tuple[int, int]:
        """ImageGrid (ISO/IEC 23008-12 6.6.2.3)."""
        data = self._descriptor(item, 8)
        wide = data[1] & 1
        rows, columns = data[2] + 1, data[3] + 1
        fields_size = 8 if wide else 4
        if len(data) < 4 + fields_size:
            raise _corrupt(f"grid item {item.id} descriptor is cut")
        width, height = struct.unpack(">II" if wide else ">HH", data[4 : 4 + fields_size])
        self.fits(f"grid item {item.id} ({rows}x{columns} tiles)", width, height)
        tiles = item.refs.get("dimg", [])
        if len(tiles) != rows * columns:
            raise _corrupt(f"grid item {item.id} is {rows}x{columns} but has {len(tiles)} tiles")
        sizes = {self.output_size(tile, path) for tile in dict.fromkeys(tiles)}
        if len(sizes) != 1:
            raise _corrupt(f"grid item {item.id} has tiles of different sizes {sorted(sizes)}")
        tile_w, tile_h = sizes.pop()
        if columns * tile_w < width or rows * tile_h < height:
            raise _corrupt(
                f"grid item {item.id}: {rows}x{columns} tiles of {tile_w}x{tile_h} do not cover {width}x{height}"
            )
        if columns * tile_w - width >= tile_w or rows * tile_h - height >= tile_h:
            raise _corrupt(
                f"grid item {item.id}: {rows}x{columns} tiles of {tile_w}x{tile_h} "
                f"lie a whole tile outside {width}x{height}"
            )
        return width, height

    def _overlay(self, item: Item, path: tuple[int, ...]) -> tuple[int, int]:
        """ImageOverlay (ISO/IEC 23008-12, ``iovl``): version 0 (the only one defined; libheif
        refuses others), a canvas that is not empty and fits, an offset for each input; each
        input must fit too. Records the descriptor in :attr:`overlays`."""
        data = self._descriptor(item, 14)
        if data[0] != 0:
            raise PermanentFailure(
                UNSUPPORTED_FEATURE,
                f"iovl item {item.id} is version {data[0]}: only version 0 is defined, "
                f"{self.decoder.name} cannot compose it",
            )
        wide = bool(data[1] & 1)
        field_size = 4 if wide else 2
        if len(data) < 10 + 2 * field_size:
            raise _corrupt(f"iovl item {item.id} descriptor is cut")
        width = int.from_bytes(data[10 : 10 + field_size], "big")
        height = int.from_bytes(data[10 + field_size : 10 + 2 * field_size], "big")
        if width == 0 or height == 0:
            raise _corrupt(f"iovl item {item.id} has a {width}x{height} canvas")
        self.fits(f"iovl item {item.id} (canvas)", width, height)
        inputs = item.refs.get("dimg", [])
        if not inputs:
            raise _corrupt(f"iovl item {item.id} has no inputs")
        if len(data) < 10 + 2 * field_size + 2 * field_size * len(inputs):
            raise _corrupt(f"iovl item {item.id} places fewer than its {len(inputs)} inputs")
        shown = {}
        for source in dict.fromkeys(inputs):
            size = self.output_size(source, path)
            shown[source] = _transforms(self.structure, self.structure.items[source], size)[1]
        offsets = struct.unpack_from(f">{2 * len(inputs)}{'i' if wide else 'h'}", data, 10 + 2 * field_size)
        self.overlays[item.id] = Overlay(
            item.id,
            width,
            height,
            struct.unpack_from(">4H", data, 2),
            wide,
            tuple(
                Placement(source, offsets[2 * n], offsets[2 * n + 1], *shown[source]) for n, source in enumerate(inputs)
            ),
        )
        return width, height


def primary_image(structure: HeifStructure, max_pixels: int, decoder: Decoder) -> PrimaryImage:
    """Check what decoding ``structure``'s primary image will decode, before it is decoded.

    Parameters
    ----------
    max_pixels:
        Largest picture or canvas, in pixels, that may be decoded.
    decoder:
        What the decoder that will read the file supports.

    Returns
    -------
    PrimaryImage
        Its size, transformations and what decoding it costs.

    Raises
    ------
    PermanentFailure
        ``unsupported_feature`` for an item type ``decoder`` cannot decode or compose (an
        ``iovl`` for libavif), before its size is looked at; ``too_many_pixels`` when a coded
        picture or a canvas is larger than ``max_pixels`` or than the ``ispe`` it declares;
        ``corrupt_image`` when the structure otherwise contradicts itself (see the module's
        docstring) or there is no primary image. For a decoder that misplaces overlay inputs
        left of or above the canvas (:attr:`Decoder.misplaces_negative_offsets`), a primary
        overlay with such inputs gets a :class:`Recomposition` (``too_many_pixels`` when its
        grown canvas is over ``max_pixels``); ``unsupported_feature`` when it cannot have one
        (its detail says why) or the overlay is not the primary itself.
    """
    primary_id = structure.primary_id
    if primary_id is None:
        raise _corrupt("no primary item (pitm)")
    walk = _Walk(structure, decoder, max_pixels)
    width, height = walk.output_size(primary_id)
    primary = structure.items[primary_id]
    alpha = [
        item.id
        for item in structure.items.values()
        if primary_id in item.refs.get("auxl", []) and _aux_type(structure, item) in ALPHA_AUX_TYPES
    ]
    for item_id in alpha:  # its alpha plane is decoded with it
        walk.output_size(item_id)
    overlay = walk.overlays.get(primary_id)
    moved = None
    if decoder.misplaces_negative_offsets:
        for nested in walk.overlays.values():
            if nested is not overlay and any(nested.outside_left_top()):
                raise PermanentFailure(
                    UNSUPPORTED_FEATURE,
                    f"iovl item {nested.item_id} places inputs left of or above its canvas and is not the primary "
                    f"image: {decoder.name} misplaces them",
                )
        if overlay is not None and any(overlay.outside_left_top()):
            moved = _recomposition(structure, overlay, walk, decoder, with_alpha=bool(alpha))
    transforms, (display_w, display_h) = _transforms(structure, primary, (width, height))
    return PrimaryImage(
        item_id=primary_id,
        item_type=primary.type,
        width_px=width,
        height_px=height,
        transforms=transforms,
        display_width_px=display_w,
        display_height_px=display_h,
        coded_items=walk.coded,
        largest_picture_px=walk.largest,
        overlay=overlay,
        recomposition=moved,
    )


def _recomposition(
    structure: HeifStructure, overlay: Overlay, walk: _Walk, decoder: Decoder, *, with_alpha: bool = False
) -> Recomposition:
    """The :class:`Recomposition` of the primary ``overlay``: its canvas grown left and up by
    as much as its inputs that show on it reach past those edges (:meth:`Overlay.outside_left_top`).

    The grown canvas must fit ``max_pixels`` (checked by ``walk``): it is what the decoder
    allocates. Same-length patches only, so nothing else in the file moves.

    Raises
    ------
    PermanentFailure
        ``too_many_pixels`` when the grown canvas is over ``max_pixels``; ``unsupported_feature``
        when the overlay has an alpha plane (it would have to be grown too), when the grown canvas or
        the moved offsets do not fit the descriptor's 16-bit (or 32-bit) fields, or when its
        ``ispe`` box is shared with another item (patching it would change that item's size too).
    """
    item = structure.items[overlay.item_id]
    left, top = overlay.outside_left_top()
    width, height = overlay.width_px + left, overlay.height_px + top
    what = (
        f"iovl item {item.id} (inputs reach {left} px left of and {top} px above "
        f"its {overlay.width_px}x{overlay.height_px} canvas)"
    )
    walk.fits(f"{what} composed on a grown canvas", width, height)

    def unsupported(why: str) -> PermanentFailure:
        return PermanentFailure(UNSUPPORTED_FEATURE, f"{what}: {decoder.name} misplaces such inputs, and {why}")

    if with_alpha:
        raise unsupported("its alpha plane cannot be recomposed with it")
    bits = 32 if overlay.wide else 16
    offsets = [v for p in overlay.placements for v in (p.x_px + left, p.y_px + top)]
    if max(width, height) >= 1 << bits or not all(-(1 << (bits - 1)) <= v < 1 << (bits - 1) for v in offsets):
        raise unsupported(f"a canvas grown to {width}x{height} does not fit its {bits}-bit fields")
    kind = "I" if overlay.wide else "H"
    descriptor = struct.pack(f">2{kind}{len(offsets)}{kind.lower()}", width, height, *offsets)
    patches = _data_patches(structure, item, 10, descriptor)  # after version, flags and fill
    for (index, _), (at, size) in zip(item.properties, item.associations, strict=True):
        prop = structure.properties[index]
        if prop.kind == "ispe":
            if any(
                index in (i for i, _ in other.properties) for other in structure.items.values() if other is not item
            ):
                raise unsupported("its ispe is shared with another item")
            patches.append((prop.start + 4, struct.pack(">II", width, height)))
        elif prop.kind in ("clap", "irot", "imir"):
            patches.append((at, bytes(size)))  # property index 0: "no property" (ISO/IEC 23008-12 9.3)
    return Recomposition(left, top, width, height, tuple(patches))


def _data_patches(structure: HeifStructure, item: Item, start: int, replacement: bytes) -> list[tuple[int, bytes]]:
    """(file offset, bytes) that write ``replacement`` over ``item``'s data from byte ``start``,
    one per extent it spans."""
    patches: list[tuple[int, bytes]] = []
    end, pos = start + len(replacement), 0
    for run_start, run_end in structure.item_runs(item, end):
        low, high = max(start, pos), min(end, pos + run_end - run_start)
        if low < high:
            patches.append((run_start + low - pos, replacement[low - start : high - start]))
        pos += run_end - run_start
    if pos < end:
        raise _corrupt(f"{item.type} item {item.id} has {pos} bytes of data, needs {end}")
    return patches


def _aux_type(structure: HeifStructure, item: Item) -> str | None:
    for prop in structure.property_boxes(item, "auxC")[:1]:
        fields = _Fields(structure.data, prop.start + 4, prop.end)
        return fields.cstring()
    return None
