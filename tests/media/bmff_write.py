"""Reads and writes HEIF / AVIF files item by item, for the makers of ``cases_heif.py`` and
the tests that inject properties.

A file is read into a :class:`Heif` (brands, primary item, items with their data and
associated property boxes, references), changed, and written again with :func:`write_heif`:
one ``meta`` (``hdlr``, ``pitm``, ``iinf``, ``iref``, ``iprp``, ``iloc``) and one ``mdat``
holding every item's data. Box layouts from ISO/IEC 14496-12 (``iloc`` 8.11.3, ``iinf``/``infe``
8.11.6, ``iref`` 8.11.12, ``clap`` 12.1.4) and ISO/IEC 23008-12 (``ipma``/``ipco`` 9.3, ``ispe``
6.5.3, ``irot`` 6.5.10, ``imir`` 6.5.12, ``grid`` 6.6.2.3, ``iovl`` 6.6.2.2). It is written
here for the tests, independently of the product's reader (``mediajobs.domain.inspections.heif_items``),
so a bug in one does not hide in the other.

Not a case module (``make_cases`` loads ``cases_*.py`` only); nothing here reads outside the
repository.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace

#: Container boxes whose children are boxes, and the bytes before the first child.
_CONTAINERS = {b"meta": 4, b"iprp": 0, b"ipco": 0, b"dinf": 0}


def box(kind: str, *payload: bytes) -> bytes:
    """A box: 32-bit size, type, payload."""
    body = b"".join(payload)
    return struct.pack(">I4s", 8 + len(body), kind.encode("latin-1")) + body


def full_box(kind: str, version: int, flags: int, *payload: bytes) -> bytes:
    """A full box: a box whose payload starts with version (8 bits) and flags (24 bits)."""
    return box(kind, struct.pack(">I", (version << 24) | flags), *payload)


def boxes(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[str, bytes]]:
    """(type, payload) of the boxes between ``start`` and ``end``, in order."""
    end = len(data) if end is None else end
    found, pos = [], start
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[pos + 8 : pos + 16])[0], 16
        elif size == 0:
            size = end - pos
        if size < header or pos + size > end:
            raise ValueError(f"bad box {kind!r} at {pos}")
        found.append((kind.decode("latin-1"), data[pos + header : pos + size]))
        pos += size
    return found


# --- properties -------------------------------------------------------------------------


def ispe(width_px: int, height_px: int) -> bytes:
    """ImageSpatialExtentsProperty: the item's width and height in pixels."""
    return full_box("ispe", 0, 0, struct.pack(">II", width_px, height_px))


def irot(quarter_turns: int) -> bytes:
    """ImageRotation: rotate ``quarter_turns`` x 90 degrees anti-clockwise (0-3)."""
    return box("irot", bytes([quarter_turns & 3]))


def imir(axis: int) -> bytes:
    """ImageMirror: ``axis`` 0 exchanges top and bottom, 1 exchanges left and right
    (ISO/IEC 23008-12:2022 6.5.12, where the field is called ``mode``)."""
    return box("imir", bytes([axis & 1]))


def clap(width_px: int, height_px: int, horiz_off_twice: int, vert_off_twice: int) -> bytes:
    """CleanApertureBox of a ``width_px`` x ``height_px`` aperture whose centre is offset by
    ``horiz_off_twice / 2`` and ``vert_off_twice / 2`` pixels from the image's centre."""
    return box("clap", struct.pack(">IIIIiIiI", width_px, 1, height_px, 1, horiz_off_twice, 2, vert_off_twice, 2))


def clap_for(image_w_px: int, image_h_px: int, left: int, top: int, width_px: int, height_px: int) -> bytes:
    """The ``clap`` that crops the rectangle (left, top, width, height) out of an image."""
    # centre of the aperture minus centre of the image, doubled to stay whole
    horiz = (2 * left + width_px - 1) - (image_w_px - 1)
    vert = (2 * top + height_px - 1) - (image_h_px - 1)
    return clap(width_px, height_px, horiz, vert)


def grid_descriptor(rows: int, columns: int, output_w_px: int, output_h_px: int) -> bytes:
    """The item data of a ``grid`` derived image (32-bit output sizes when needed)."""
    wide = output_w_px > 0xFFFF or output_h_px > 0xFFFF
    size = ">II" if wide else ">HH"
    return bytes([0, int(wide), rows - 1, columns - 1]) + struct.pack(size, output_w_px, output_h_px)


#: An overlay's canvas_fill_value for white, opaque: 16-bit R, G, B, A.
WHITE_FILL = (0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF)


def overlay_descriptor(
    output_w_px: int,
    output_h_px: int,
    offsets: list[tuple[int, int]],
    *,
    fill_rgba: tuple[int, int, int, int] = WHITE_FILL,
    wide: bool = False,
    version: int = 0,
) -> bytes:
    """The item data of an ``iovl`` derived image: version, flags (bit 0: 32-bit fields),
    canvas_fill_value (4 x 16 bits, RGBA), output width and height (unsigned), then each
    input's horizontal and vertical offset (signed, may be negative), 16-bit fields unless
    ``wide``."""
    size, offset = (">II", ">ii") if wide else (">HH", ">hh")
    placed = b"".join(struct.pack(offset, x, y) for x, y in offsets)
    return (
        bytes([version, int(wide)])
        + struct.pack(">4H", *fill_rgba)
        + struct.pack(size, output_w_px, output_h_px)
        + placed
    )


# --- items ------------------------------------------------------------------------------


@dataclass
class Item:
    """One item of a HEIF file.

    ``properties`` are whole property boxes with their ``essential`` flag, in association
    order; ``refs`` are (reference type, to item ids) from this item; ``data_of`` makes the
    item's single extent the bytes of another item (no copy: both point at the same bytes);
    ``in_idat`` keeps its data in the ``meta`` box's ``idat`` (construction method 1), where
    libheif writes a derived image's descriptor.
    """

    id: int
    type: str
    data: bytes = b""
    properties: list[tuple[bytes, bool]] = field(default_factory=list)
    hidden: bool = False
    refs: list[tuple[str, list[int]]] = field(default_factory=list)
    name: str = ""
    data_of: int | None = None
    in_idat: bool = False

    def property(self, kind: str) -> bytes | None:
        """The first associated property box of type ``kind``, or ``None``."""
        return next((p for p, _ in self.properties if p[4:8] == kind.encode()), None)

    def without(self, *kinds: str) -> Item:
        """A copy without the properties of the given types."""
        keep = [(p, e) for p, e in self.properties if p[4:8].decode("latin-1") not in kinds]
        return replace(self, properties=keep)


@dataclass
class Heif:
    """A HEIF file as items: ``brands`` (major first), ``primary`` item id, ``items``."""

    brands: tuple[str, ...]
    primary: int
    items: list[Item]

    def item(self, item_id: int) -> Item:
        return next(i for i in self.items if i.id == item_id)


def _iloc(payload: bytes, data: bytes, idat: bytes) -> dict[int, bytes]:
    version = payload[0]
    pos = 4
    offset_size, length_size = payload[pos] >> 4, payload[pos] & 15
    base_size, index_size = payload[pos + 1] >> 4, payload[pos + 1] & 15 if version else 0
    pos += 2
    count_fmt, id_fmt = (">I", ">I") if version == 2 else (">H", ">H")
    count = struct.unpack_from(count_fmt, payload, pos)[0]
    pos += struct.calcsize(count_fmt)

    def number(size: int) -> int:
        nonlocal pos
        value = int.from_bytes(payload[pos : pos + size], "big")
        pos += size
        return value

    found = {}
    for _ in range(count):
        item_id = struct.unpack_from(id_fmt, payload, pos)[0]
        pos += struct.calcsize(id_fmt)
        method = number(2) & 15 if version else 0
        number(2)  # data_reference_index
        base = number(base_size)
        chunks = []
        for _ in range(number(2)):
            number(index_size)
            offset, length = number(offset_size), number(length_size)
            source = idat if method == 1 else data
            chunks.append(source[base + offset : base + offset + length])
        found[item_id] = b"".join(chunks)
    return found


def read_heif(data: bytes) -> Heif:
    """The items of a HEIF/AVIF file (one ``meta``, data by ``iloc`` methods 0 and 1).

    Raises
    ------
    ValueError
        On a structure this reader does not know.
    """
    top = dict(boxes(data))
    ftyp = top["ftyp"]
    brands = (ftyp[:4].decode(), *(ftyp[i : i + 4].decode() for i in range(8, len(ftyp), 4)))
    meta = dict(boxes(top["meta"], 4))
    pitm = meta["pitm"]
    primary = struct.unpack(">H" if pitm[0] == 0 else ">I", pitm[4:])[0]
    iinf = meta["iinf"]
    first = 6 if iinf[0] == 0 else 8
    items: dict[int, Item] = {}
    for kind, infe in boxes(iinf, first):
        assert kind == "infe" and infe[0] in (2, 3), "infe version 2 or 3"
        id_size = 2 if infe[0] == 2 else 4
        item_id = int.from_bytes(infe[4 : 4 + id_size], "big")
        at = 4 + id_size + 2
        item_type = infe[at : at + 4].decode("latin-1")
        name = infe[at + 4 :].split(b"\0", 1)[0].decode("utf-8")
        items[item_id] = Item(item_id, item_type, hidden=bool(infe[3] & 1), name=name)
    idat = meta.get("idat", b"")
    for item_id, payload in _iloc(meta["iloc"], data, idat).items():
        items[item_id].data = payload
    iprp = meta["iprp"]
    properties = [whole for whole in _whole_boxes(dict(boxes(iprp))["ipco"])]
    ipma = dict(boxes(iprp))["ipma"]
    version, flags = ipma[0], int.from_bytes(ipma[1:4], "big")
    pos, (entries,) = 8, struct.unpack(">I", ipma[4:8])
    for _ in range(entries):
        item_id = int.from_bytes(ipma[pos : pos + (2 if version == 0 else 4)], "big")
        pos += 2 if version == 0 else 4
        count = ipma[pos]
        pos += 1
        for _ in range(count):
            if flags & 1:
                value, width = struct.unpack(">H", ipma[pos : pos + 2])[0], 15
                pos += 2
            else:
                value, width = ipma[pos], 7
                pos += 1
            index = value & ((1 << width) - 1)
            items[item_id].properties.append((properties[index - 1], bool(value >> width)))
    if "iref" in meta:
        iref = meta["iref"]
        id_size = 2 if iref[0] == 0 else 4
        for kind, ref in boxes(iref, 4):
            from_id = int.from_bytes(ref[:id_size], "big")
            count = int.from_bytes(ref[id_size : id_size + 2], "big")
            at = id_size + 2
            to = [int.from_bytes(ref[at + i * id_size : at + (i + 1) * id_size], "big") for i in range(count)]
            items[from_id].refs.append((kind, to))
    return Heif(brands=brands, primary=primary, items=list(items.values()))


def _whole_boxes(payload: bytes) -> list[bytes]:
    """Each child box of ``payload``, header included."""
    whole, pos = [], 0
    while pos + 8 <= len(payload):
        size = struct.unpack(">I", payload[pos : pos + 4])[0]
        whole.append(payload[pos : pos + size])
        pos += size
    return whole


def write_heif(heif: Heif) -> bytes:
    """The bytes of ``heif``: ``ftyp``, ``meta``, ``mdat`` (every item's data, once per
    item except those with :attr:`Item.data_of`).

    Property boxes equal byte for byte are stored once in ``ipco``.
    """
    brands = heif.brands
    ftyp = box("ftyp", brands[0].encode(), struct.pack(">I", 0), *(b.encode() for b in brands[1:]))
    hdlr = full_box("hdlr", 0, 0, struct.pack(">I", 0), b"pict", b"\0" * 12, b"\0")
    pitm = full_box("pitm", 0, 0, struct.pack(">H", heif.primary))
    infes = [
        full_box(
            "infe", 2, int(item.hidden), struct.pack(">HH", item.id, 0), item.type.encode(), item.name.encode() + b"\0"
        )
        for item in heif.items
    ]
    iinf = full_box("iinf", 0, 0, struct.pack(">H", len(infes)), *infes)
    references = [
        box(kind, struct.pack(">HH", item.id, len(to)), *(struct.pack(">H", t) for t in to))
        for item in heif.items
        for kind, to in item.refs
    ]
    iref = full_box("iref", 0, 0, *references) if references else b""
    unique: list[bytes] = []
    for item in heif.items:
        for prop, _ in item.properties:
            if prop not in unique:
                unique.append(prop)
    wide = len(unique) > 127
    associations = []
    for item in heif.items:
        if not item.properties:
            continue
        packed = b"".join(
            struct.pack(">H", (e << 15) | (unique.index(p) + 1)) if wide else bytes([(e << 7) | (unique.index(p) + 1)])
            for p, e in item.properties
        )
        associations.append(struct.pack(">HB", item.id, len(item.properties)) + packed)
    ipma = full_box("ipma", 0, int(wide), struct.pack(">I", len(associations)), *associations)
    iprp = box("iprp", box("ipco", *unique), ipma)

    # mdat layout: each item's data once, in item order (idat likewise for in_idat items)
    positions: dict[int, tuple[int, int]] = {}
    payload, idat = bytearray(), bytearray()
    for item in heif.items:
        if item.in_idat:
            positions[item.id] = (len(idat), len(item.data))
            idat += item.data
        elif item.data_of is None:
            positions[item.id] = (len(payload), len(item.data))
            payload += item.data
    for item in heif.items:
        if item.data_of is not None:
            positions[item.id] = positions[item.data_of]

    def meta_bytes(mdat_start: int) -> bytes:
        entries = [
            struct.pack(">HHHHII", item.id, 1, 0, 1, *positions[item.id])
            if item.in_idat
            else struct.pack(">HHHHII", item.id, 0, 0, 1, mdat_start + positions[item.id][0], positions[item.id][1])
            for item in heif.items
        ]
        # version 1: offset and length 4 bytes, no base offset, construction method 0 (file) or 1 (idat)
        iloc = full_box("iloc", 1, 0, bytes([0x44, 0x00]), struct.pack(">H", len(entries)), *entries)
        return full_box("meta", 0, 0, hdlr, pitm, iinf, iref, iprp, iloc, box("idat", bytes(idat)) if idat else b"")

    start = len(ftyp) + len(meta_bytes(0)) + 8
    return ftyp + meta_bytes(start) + box("mdat", bytes(payload))


# --- AV1 --------------------------------------------------------------------------------


class _Bits:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int) -> int:
        value = 0
        for _ in range(n):
            value = (value << 1) | ((self.data[self.pos >> 3] >> (7 - (self.pos & 7))) & 1)
            self.pos += 1
        return value


def _leb128(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _obus(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """(type, header byte(s), payload) of each OBU, all with size fields."""
    found, pos = [], 0
    while pos < len(data):
        header = data[pos]
        extension = (header >> 2) & 1
        assert header & 2, "obu_has_size_field"
        at = pos + 1 + extension
        size, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        found.append(((header >> 3) & 15, data[pos : pos + 1 + extension], data[at : at + size]))
        pos = at + size
    return found


def resize_av1_sequence_header(item_data: bytes, width_px: int, height_px: int) -> bytes:
    """``item_data`` (an AV1 temporal unit with a reduced still-picture sequence header, as
    libaom writes for an AVIF still) with the sequence header's max_frame_width/height set
    to ``width_px`` x ``height_px`` (AV1 5.5.1); every other bit kept. The frame that follows
    no longer matches: the file is for checks that must stop before decoding."""
    out = bytearray()
    for kind, header, payload in _obus(item_data):
        if kind == 1:
            bits = _Bits(payload)
            profile, still, reduced = bits.read(3), bits.read(1), bits.read(1)
            assert reduced == 1, "reduced_still_picture_header"
            level = bits.read(5)
            w_bits, h_bits = bits.read(4) + 1, bits.read(4) + 1
            bits.read(w_bits)
            bits.read(h_bits)
            rest = "".join(str(bits.read(1)) for _ in range(len(payload) * 8 - bits.pos)).rstrip("0")[:-1]
            new_w, new_h = max(1, (width_px - 1).bit_length()), max(1, (height_px - 1).bit_length())
            text = (
                f"{profile:03b}{still:01b}{reduced:01b}{level:05b}{new_w - 1:04b}{new_h - 1:04b}"
                f"{width_px - 1:0{new_w}b}{height_px - 1:0{new_h}b}{rest}1"
            )
            text += "0" * (-len(text) % 8)
            payload = int(text, 2).to_bytes(len(text) // 8, "big")
        out += header + _leb128(len(payload)) + payload
    return bytes(out)
