"""The HEIF / AVIF cases (B01-B16): small files whose item structure is written box by box
(``bmff_write.py``) around pictures coded by Pillow's AVIF encoder (libaom) and
pillow-heif's HEVC encoder (x265, a test-only dependency: the worker reads HEIF with pi-heif),
plus the trailing-bytes MP4s (ffmpeg) and the XMP-orientation JPEGs.

Each stands for a way a HEIF's structure can make a renderer do the wrong thing: headers
that lie about the size (B01-B03), transformative properties (B04, B05), several images in
one file (B06, B07, B09), an overlay the decoder cannot compose (B08), bytes after the last
box and cuts at a box boundary (B10-B13), orientation a browser would not apply (B14, B15),
a grid short of a tile (B16).

Deterministic: no randomness, no timestamps; Pillow and pillow-heif encode the same bytes
for the same pictures (x265 without its thread pool, one frame thread).

Pipeline assumptions behind the expected values: variants fit an N x N box (thumb 320 WebP,
card 800 WebP, full 1600 AVIF), never upscaled.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

from bmff_write import (
    Heif,
    Item,
    clap_for,
    grid_descriptor,
    imir,
    irot,
    ispe,
    overlay_descriptor,
    read_heif,
    resize_av1_sequence_header,
    write_heif,
)
from make_cases import Case, Tools
from PIL import Image

RED = (220, 30, 30)
GREEN = (30, 160, 60)
BLUE = (40, 60, 200)
YELLOW = (230, 200, 40)
WHITE = (255, 255, 255)
#: x265 as the makers run it: its thread pool off, one frame thread (deterministic), ultrafast.
X265_PARAMS = {"preset": "ultrafast", "x265:pools": "none", "x265:frame-threads": "1"}


def quadrants(width_px: int, height_px: int) -> Image.Image:
    """Quadrants TL red, TR green, BL blue, BR yellow: each of the 8 orientations of it differs."""
    image = Image.new("RGB", (width_px, height_px))
    half_w, half_h = width_px // 2, height_px // 2
    image.paste(RED, (0, 0, half_w, half_h))
    image.paste(GREEN, (half_w, 0, width_px, half_h))
    image.paste(BLUE, (0, half_h, half_w, height_px))
    image.paste(YELLOW, (half_w, half_h, width_px, height_px))
    return image


def avif_bytes(image: Image.Image, **params: object) -> bytes:
    """``image`` as Pillow's AVIF encoder (libaom) writes it: one ``av01`` item, no transformations."""
    out = io.BytesIO()
    image.save(out, format="AVIF", **params)
    return out.getvalue()


def heic_bytes(image: Image.Image, **params: object) -> bytes:
    """``image`` as pillow-heif (libheif + x265) writes it; not registered with Pillow."""
    import pillow_heif

    out = io.BytesIO()
    pillow_heif.from_pillow(image).save(out, enc_params=dict(X265_PARAMS), **params)
    return out.getvalue()


def coded_item(data: bytes, item_id: int, *, hidden: bool = False) -> Item:
    """The primary item of the one-image file ``data``, renumbered."""
    heif = read_heif(data)
    item = heif.item(heif.primary)
    item.id, item.hidden, item.refs = item_id, hidden, []
    return item


# --- B01-B03: headers that lie about the size -------------------------------------------

B01 = "B01_avif_ispe_64_over_16384_frame.avif"
#: The AV1 frame size the sequence header declares, pixels (268 MP).
B01_FRAME_PX = 16384


def make_b01(folder: Path, tools: Tools | None) -> None:
    """A 64x64 AVIF whose AV1 sequence header (max_frame_width/height, AV1 5.5.1) is rewritten
    to 16384x16384 while its ``ispe`` still says 64x64: a decoder sizes its frame from the
    sequence header. 321 bytes; the frame data no longer matches, so only a check before
    decoding can give the right reason."""
    heif = read_heif(avif_bytes(Image.new("RGB", (64, 64), (90, 120, 200)), quality=30, speed=8))
    item = heif.item(heif.primary)
    item.data = resize_av1_sequence_header(item.data, B01_FRAME_PX, B01_FRAME_PX)
    (folder / B01).write_bytes(write_heif(heif))


B02 = "B02_heic_grid_bomb_32768.heic"
#: One coded HEVC tile (4:4:4, flat), its size in pixels, and the grid's rows and columns.
B02_TILE_PX = 4096
B02_TILES_PER_SIDE = 8


def make_b02(folder: Path, tools: Tools | None) -> None:
    """A 7 KB HEIC: an 8x8 ``grid`` (output 32768x32768, 1.07 G pixels) whose 64 tile items
    all point at the same 4 KB of HEVC (one flat 4096x4096 4:4:4 picture), with an ``ispe``
    that says 64x64. Decoded unchecked, libheif 1.23 allocates the whole 4:4:4 canvas and
    fails only afterwards ("Decoded image does not have the size signaled"): about 3.6 GB
    peak RSS. The file for the decode memory benchmark."""
    tile_data = heic_bytes(Image.new("RGB", (B02_TILE_PX, B02_TILE_PX), (90, 120, 200)), quality=10, chroma=444)
    template = read_heif(tile_data)
    tile = coded_item(tile_data, 2, hidden=True)
    count = B02_TILES_PER_SIDE**2
    tiles = [tile] + [Item(3 + k, "hvc1", properties=tile.properties, hidden=True, data_of=2) for k in range(count - 1)]
    side = B02_TILE_PX * B02_TILES_PER_SIDE
    grid = Item(
        1,
        "grid",
        grid_descriptor(B02_TILES_PER_SIDE, B02_TILES_PER_SIDE, side, side),
        [(ispe(64, 64), False)],
        refs=[("dimg", [t.id for t in tiles])],
    )
    (folder / B02).write_bytes(write_heif(Heif(template.brands, 1, [grid, *tiles])))


B03 = "B03_avif_ispe_64_over_2000x1500.avif"
B03_FRAME_PX = (2000, 1500)


def make_b03(folder: Path, tools: Tools | None) -> None:
    """A real 2000x1500 AV1 picture (flat blue) whose ``ispe`` says 64x64: every check that
    reads the declared size sees 4,096 pixels; libavif decodes 3 MP and Pillow hands back a
    64x64 image of its corner."""
    heif = read_heif(avif_bytes(Image.new("RGB", B03_FRAME_PX, (90, 120, 200)), quality=30, speed=10))
    item = heif.item(heif.primary)
    item.properties = [((ispe(64, 64) if p[4:8] == b"ispe" else p), e) for p, e in item.properties]
    (folder / B03).write_bytes(write_heif(heif))


# --- B04, B05: transformative properties ------------------------------------------------

#: The stored picture of the transformation cases, pixels.
TRANSFORM_SOURCE_PX = (96, 64)
#: A clean aperture across the quadrant boundaries, off centre: (left, top, width, height).
TRANSFORM_CROP = (8, 4, 56, 40)
#: Each case's transformative properties, in the order they are associated (MIAF order:
#: clap, irot, imir): ("clap", None) crops :data:`TRANSFORM_CROP`, ("irot", n) rotates n x 90
#: degrees anti-clockwise, ("imir", 0) exchanges top and bottom, ("imir", 1) left and right.
TRANSFORMS: dict[str, tuple[tuple[str, int | None], ...]] = {
    "irot0": (("irot", 0),),
    "irot90": (("irot", 1),),
    "irot180": (("irot", 2),),
    "irot270": (("irot", 3),),
    "imir0": (("imir", 0),),
    "imir1": (("imir", 1),),
    "clap": (("clap", None),),
    "irot90_imir0": (("irot", 1), ("imir", 0)),
    "irot90_imir1": (("irot", 1), ("imir", 1)),
    "irot270_imir0": (("irot", 3), ("imir", 0)),
    "clap_irot90": (("clap", None), ("irot", 1)),
    "clap_irot270_imir1": (("clap", None), ("irot", 3), ("imir", 1)),
}


def transform_file(fmt: str, name: str) -> str:
    """The file of transformation case ``name`` (a key of :data:`TRANSFORMS`) in ``avif`` or ``heic``."""
    return f"{'B04' if fmt == 'avif' else 'B05'}_{fmt}_{name}.{fmt}"


def _with_transforms(data: bytes, steps: tuple[tuple[str, int | None], ...]) -> bytes:
    heif = read_heif(data)
    item = heif.item(heif.primary)
    width, height = TRANSFORM_SOURCE_PX
    for kind, value in steps:
        if kind == "clap":
            prop = clap_for(width, height, *TRANSFORM_CROP)
        elif kind == "irot":
            prop = irot(int(value or 0))
        else:
            prop = imir(int(value or 0))
        item.properties.append((prop, True))  # transformative properties are essential (MIAF 7.3.6.7)
    return write_heif(heif)


def make_b04(folder: Path, tools: Tools | None) -> None:
    """The 96x64 quadrant picture as AVIF (4:4:4, quality 95) with each set of :data:`TRANSFORMS`
    associated with its item after ispe/av1C/colr."""
    data = avif_bytes(quadrants(*TRANSFORM_SOURCE_PX), quality=95, subsampling="4:4:4")
    for name, steps in TRANSFORMS.items():
        (folder / transform_file("avif", name)).write_bytes(_with_transforms(data, steps))


def make_b05(folder: Path, tools: Tools | None) -> None:
    """The same as HEIC (HEVC 4:4:4, quality 95; 96x64 needs no padding, so no clap of its own)."""
    data = heic_bytes(quadrants(*TRANSFORM_SOURCE_PX), quality=95, chroma=444)
    for name, steps in TRANSFORMS.items():
        (folder / transform_file("heic", name)).write_bytes(_with_transforms(data, steps))


# --- B06, B07: every variant from the primary image -------------------------------------

B06 = "B06_heic_primary_listed_second.heic"
#: The primary picture and the other one, pixels.
PRIMARY_PX = (960, 640)
OTHER_PX = (480, 320)


def _other_picture() -> Image.Image:
    """Not the primary: the quadrants mirrored left-right (TL green)."""
    return quadrants(*OTHER_PX).transpose(Image.Transpose.FLIP_LEFT_RIGHT)


def make_b06(folder: Path, tools: Tools | None) -> None:
    """Two top-level images, as a burst or a stereo pair: item 1 is a 480x320 picture
    (quadrants mirrored), item 2 the 960x640 primary (quadrants). pi-heif lists both as
    frames, the primary second."""
    other = coded_item(heic_bytes(_other_picture(), quality=80), 1)
    primary = coded_item(heic_bytes(quadrants(*PRIMARY_PX), quality=80), 2)
    brands = read_heif(heic_bytes(Image.new("RGB", (8, 8)), quality=50)).brands
    (folder / B06).write_bytes(write_heif(Heif(brands, 2, [other, primary])))


B07 = "B07_heic_grid_tiles_listed.heic"


def make_b07(folder: Path, tools: Tools | None) -> None:
    """A 960x640 primary ``grid`` (item 5, listed last) of four 480x320 tiles (items 1-4, the
    quadrant picture's quarters) that are not hidden, so pi-heif lists them as frames
    before the grid."""
    picture = quadrants(*PRIMARY_PX)
    tile_w, tile_h = OTHER_PX
    tiles = []
    for n, (x, y) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1)), start=1):
        crop = picture.crop((x * tile_w, y * tile_h, (x + 1) * tile_w, (y + 1) * tile_h))
        tiles.append(coded_item(heic_bytes(crop, quality=80), n))
    grid = Item(
        5, "grid", grid_descriptor(2, 2, *PRIMARY_PX), [(ispe(*PRIMARY_PX), False)], refs=[("dimg", [1, 2, 3, 4])]
    )
    brands = read_heif(heic_bytes(Image.new("RGB", (8, 8)), quality=50)).brands
    (folder / B07).write_bytes(write_heif(Heif(brands, 5, [*tiles, grid])))


# --- B08, B09: overlays -----------------------------------------------------------------

B08 = "B08_avif_overlay.avif"
B09 = "B09_heic_overlay.heic"
#: The overlay's canvas, and where its two 480x320 inputs go: red top-left, yellow bottom-right.
OVERLAY_PX = (960, 640)
OVERLAY_OFFSETS = [(0, 0), (480, 320)]


def _overlay(inputs: list[Item], brands: tuple[str, ...]) -> bytes:
    overlay = Item(
        3,
        "iovl",
        overlay_descriptor(*OVERLAY_PX, OVERLAY_OFFSETS),
        [(ispe(*OVERLAY_PX), False)],
        refs=[("dimg", [i.id for i in inputs])],
    )
    return write_heif(Heif(brands, 3, [*inputs, overlay]))


def make_b08(folder: Path, tools: Tools | None) -> None:
    """An AVIF whose primary is an ``iovl`` (white canvas 960x640) of two hidden 480x320 AV1
    pictures, red and yellow: libavif cannot compose an overlay."""
    red = coded_item(avif_bytes(Image.new("RGB", OTHER_PX, RED), quality=60, speed=10), 1, hidden=True)
    yellow = coded_item(avif_bytes(Image.new("RGB", OTHER_PX, YELLOW), quality=60, speed=10), 2, hidden=True)
    brands = read_heif(avif_bytes(Image.new("RGB", (8, 8)), quality=50)).brands
    (folder / B08).write_bytes(_overlay([red, yellow], brands))


def make_b09(folder: Path, tools: Tools | None) -> None:
    """The same overlay in HEIC (HEVC inputs, not hidden): libheif composes it."""
    red = coded_item(heic_bytes(Image.new("RGB", OTHER_PX, RED), quality=60), 1)
    yellow = coded_item(heic_bytes(Image.new("RGB", OTHER_PX, YELLOW), quality=60), 2)
    brands = read_heif(heic_bytes(Image.new("RGB", (8, 8)), quality=50)).brands
    (folder / B09).write_bytes(_overlay([red, yellow], brands))


# --- B10-B13: trailing bytes and cuts at a box boundary ---------------------------------

B10_JUNK = "B10_heic_trailing_junk.heic"
B10_FREE = "B10_heic_trailing_cut_free_box.heic"
TRAILING_PICTURE_PX = (640, 480)
#: What an uploader or a broken copy appends: bytes that are no box, and a ``free`` box whose
#: size runs past the end of the file.
JUNK = bytes(range(7, 256, 3)) * 8
CUT_FREE = struct.pack(">I4s", 1_000_000, b"free") + b"\0" * 100


def make_b10(folder: Path, tools: Tools | None) -> None:
    """A 640x480 quadrant HEIC followed by :data:`JUNK` (664 bytes that are no box) and one
    followed by :data:`CUT_FREE` (a free box that claims 1 MB and has 100 bytes)."""
    data = heic_bytes(quadrants(*TRAILING_PICTURE_PX), quality=80)
    (folder / B10_JUNK).write_bytes(data + JUNK)
    (folder / B10_FREE).write_bytes(data + CUT_FREE)


B11 = "B11_mp4_trailing_junk.mp4"
B11_W_PX, B11_H_PX = 320, 240
B11_CLIP_S = 1


def _mp4(tools: Tools | None, path: Path, *flags: str) -> bytes:
    """A 1 s 320x240 H.264 MP4 (x264 veryfast, one thread, bit-exact) with ``flags``."""
    assert tools is not None, "the MP4 makers need ffmpeg"
    import subprocess

    argv = [
        tools.ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-filter_threads", "1",
        "-f", "lavfi", "-i", f"testsrc2=size={B11_W_PX}x{B11_H_PX}:rate=10:duration={B11_CLIP_S}",
        "-c:v", "libx264", "-preset", "veryfast", "-crf", "30", "-pix_fmt", "yuv420p", "-threads", "1",
        "-map_metadata", "-1", "-fflags", "+bitexact", "-flags:v", "+bitexact", *flags, "-f", "mp4", str(path),
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=120)  # noqa: S603
    try:
        return path.read_bytes()
    finally:
        path.unlink()


def make_b11(folder: Path, tools: Tools | None) -> None:
    """A 1 s 320x240 H.264 MP4 (moov at the end, as ffmpeg writes it) followed by :data:`JUNK`."""
    (folder / B11).write_bytes(_mp4(tools, folder / f".{B11}.whole") + JUNK)


B12 = "B12_heic_cut_after_meta.heic"


def make_b12(folder: Path, tools: Tools | None) -> None:
    """A 640x480 HEIC cut right after its ``meta`` box: every top-level box is complete, but
    the ``mdat`` that ``iloc`` points into is gone (libheif decodes nothing, or green)."""
    data = heic_bytes(quadrants(*TRAILING_PICTURE_PX), quality=80)
    mdat = data.find(b"mdat") - 4
    (folder / B12).write_bytes(data[:mdat])


B13 = "B13_mp4_cut_after_moov.mp4"


def make_b13(folder: Path, tools: Tools | None) -> None:
    """A faststart MP4 (moov first) cut right after its ``moov``: complete boxes, no samples."""
    data = _mp4(tools, folder / f".{B13}.whole", "-movflags", "+faststart")
    mdat = data.find(b"mdat") - 4
    if data.find(b"moov") > mdat:
        raise RuntimeError("expected the moov before the mdat (+faststart)")
    (folder / B13).write_bytes(data[:mdat])


# --- B14, B15: orientation a browser does not apply -------------------------------------

B14_XMP_ONLY = "B14_jpeg_xmp_orientation_6_only.jpg"
B14_BOTH = "B14_jpeg_exif_6_xmp_3.jpg"
ORIENTATION_STORED_PX = (480, 320)


def _xmp_orientation(value: int) -> bytes:
    """An XMP packet with ``tiff:Orientation`` (as Lightroom writes it)."""
    return (
        b'<?xpacket begin="\xef\xbb\xbf" id="W5M0MpCehiHzreSzNTczkc9d"?>'
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
        b'<rdf:Description rdf:about="" xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="'
        + str(value).encode()
        + b'"/></rdf:RDF></x:xmpmeta><?xpacket end="w"?>'
    )


def make_b14(folder: Path, tools: Tools | None) -> None:
    """480x320 quadrant JPEGs: one with an XMP ``tiff:Orientation`` 6 and no EXIF orientation,
    one with EXIF orientation 6 and XMP ``tiff:Orientation`` 3 (they disagree)."""
    stored = quadrants(*ORIENTATION_STORED_PX)
    stored.save(folder / B14_XMP_ONLY, format="JPEG", quality=90, subsampling=0, xmp=_xmp_orientation(6))
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(folder / B14_BOTH, format="JPEG", quality=90, subsampling=0, exif=exif, xmp=_xmp_orientation(3))


B15 = "B15_heic_exif_orientation_6_without_irot.heic"


def make_b15(folder: Path, tools: Tools | None) -> None:
    """A 480x320 quadrant HEIC with EXIF orientation 6 and no irot/imir (the EXIF tag is
    written after encoding: pillow-heif would turn it into an irot)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    heif = read_heif(heic_bytes(quadrants(*ORIENTATION_STORED_PX), quality=80))
    tiff = exif.tobytes()
    heif.items.append(Item(2, "Exif", struct.pack(">I", 0) + tiff, hidden=True, refs=[("cdsc", [heif.primary])]))
    (folder / B15).write_bytes(write_heif(heif))


# --- B16: a grid short of a tile --------------------------------------------------------

B16 = "B16_heic_grid_missing_tile.heic"


def make_b16(folder: Path, tools: Tools | None) -> None:
    """A 2x2 ``grid`` (960x640) that references three 480x320 tiles instead of four."""
    picture = quadrants(*PRIMARY_PX)
    tile_w, tile_h = OTHER_PX
    tiles = []
    for n, (x, y) in enumerate(((0, 0), (1, 0), (0, 1)), start=2):
        crop = picture.crop((x * tile_w, y * tile_h, (x + 1) * tile_w, (y + 1) * tile_h))
        tiles.append(coded_item(heic_bytes(crop, quality=80), n, hidden=True))
    grid = Item(1, "grid", grid_descriptor(2, 2, *PRIMARY_PX), [(ispe(*PRIMARY_PX), False)], refs=[("dimg", [2, 3, 4])])
    brands = read_heif(heic_bytes(Image.new("RGB", (8, 8)), quality=50)).brands
    (folder / B16).write_bytes(write_heif(Heif(brands, 1, [grid, *tiles])))


CASES: tuple[Case, ...] = (
    Case(
        id="B01",
        title="AVIF whose ispe says 64x64 over a 16384x16384 AV1 sequence header",
        files=(B01,),
        make=make_b01,
        expected=(
            "permanent_failure, reason 'too_many_pixels', detail naming the av01 item's coded 16384x16384 = "
            "268435456 pixels; decided from the sequence header before any decoder runs (no pixel decoded)."
        ),
        reason="too_many_pixels",
        source="strukturag/libheif#1220",
    ),
    Case(
        id="B02",
        title="7 KB HEIC grid bomb: 64 tiles sharing one 4096x4096 picture, 32768x32768 declared, ispe 64x64",
        files=(B02,),
        make=make_b02,
        expected=(
            "permanent_failure, reason 'too_many_pixels', detail naming the grid item (8x8 tiles) and its "
            "32768x32768 = 1073741824 pixels; decided from the grid descriptor before any decoder runs "
            "(unchecked, libheif peaks at about 3.6 GB before failing)."
        ),
        reason="too_many_pixels",
        source="libvips/libvips#5034",
    ),
    Case(
        id="B03",
        title="AVIF whose ispe says 64x64 over a real 2000x1500 AV1 picture",
        files=(B03,),
        make=make_b03,
        expected=(
            "permanent_failure, reason 'too_many_pixels' (the data decodes 2000x1500, more than the 64x64 it "
            "declares), before decoding; never a 'done' 64x64 rendering."
        ),
        reason="too_many_pixels",
        source="strukturag/libheif#1220",
    ),
    Case(
        id="B04",
        title="AVIF with clap / irot / imir and their combinations",
        files=tuple(transform_file("avif", name) for name in TRANSFORMS),
        make=make_b04,
        expected=(
            "Success for each file: every variant equals the 96x64 quadrant picture cropped to (8, 4, 56, 40) "
            "when clap is there, then rotated irot x 90 degrees anti-clockwise, then mirrored (imir 0: top and "
            "bottom exchanged, 1: left and right), each once; decisions.orientation is the EXIF value of the "
            "rotation and mirror (irot 90 -> 8, 180 -> 3, 270 -> 6, imir 0 -> 4, imir 1 -> 2, irot 90 + imir 0 "
            "-> 5, irot 90 + imir 1 -> 7, irot 270 + imir 0 -> 7), decisions.crop [8, 4, 56, 40] or None."
        ),
        source="AOMediaCodec/libavif#41",
    ),
    Case(
        id="B05",
        title="HEIC with clap / irot / imir and their combinations",
        files=tuple(transform_file("heic", name) for name in TRANSFORMS),
        make=make_b05,
        expected="Success for each file, with the same pixels and decisions as the AVIF files of B04.",
        source="strukturag/libheif#1131",
    ),
    Case(
        id="B06",
        title="HEIC with two top-level images, the 960x640 primary listed second",
        files=(B06,),
        make=make_b06,
        expected=(
            "Success: thumb 320x213, card 800x533, full 960x640, all of the primary (quadrants TL red, TR "
            "green); decisions.frames 2, frames_dropped 1, animated false. Never the 480x320 mirrored picture."
        ),
        source="drewnoakes/metadata-extractor#560",
    ),
    Case(
        id="B07",
        title="HEIC grid primary listed after its four tiles, which are not hidden",
        files=(B07,),
        make=make_b07,
        expected=(
            "Success: thumb 320x213, card 800x533, full 960x640, all of the whole grid (quadrants TL red, TR "
            "green, BL blue, BR yellow), never of one 480x320 tile."
        ),
        source="drewnoakes/metadata-extractor#373",
    ),
    Case(
        id="B08",
        title="AVIF whose primary image is an overlay (iovl) of two pictures",
        files=(B08,),
        make=make_b08,
        expected=(
            "permanent_failure, reason 'unsupported_feature', detail naming the overlay (iovl) and libavif, "
            "before decoding; never a rendering of one of its inputs."
        ),
        reason="unsupported_feature",
        source="AOMediaCodec/libavif#2313",
    ),
    Case(
        id="B09",
        title="HEIC whose primary image is an overlay (iovl) of two pictures",
        files=(B09,),
        make=make_b09,
        expected=(
            "Success, composed by libheif: 960x640 white canvas, red 480x320 at the top left, yellow 480x320 "
            "at the bottom right (thumb 320x213, card 800x533, full 960x640)."
        ),
        source="gpac/gpac#1653",
    ),
    Case(
        id="B10",
        title="HEIC with bytes after its last box (junk; a free box cut short)",
        files=(B10_JUNK, B10_FREE),
        make=make_b10,
        expected="Success for both: thumb 320x240, card and full 640x480, the quadrant picture.",
        source="strukturag/libheif#1010",
    ),
    Case(
        id="B11",
        title="MP4 with bytes after its last box",
        files=(B11,),
        make=make_b11,
        expected=(
            "Success: the 320x240 360p rendition and a 320x240 poster, 1 s; not 'invalid_media' "
            "'truncated' (ffmpeg reads the file)."
        ),
        source="mozilla/mp4parse-rust#393",
        needs_ffmpeg=True,
    ),
    Case(
        id="B12",
        title="HEIC cut right after its meta box (every box complete, mdat gone)",
        files=(B12,),
        make=make_b12,
        expected=(
            "permanent_failure, reason 'truncated_image', detail naming the item whose data lies past the "
            "end, before any decoder runs."
        ),
        reason="truncated_image",
        source="mattiasw/ExifReader#669",
    ),
    Case(
        id="B13",
        title="Faststart MP4 cut right after its moov box (samples gone)",
        files=(B13,),
        make=make_b13,
        expected=(
            "permanent_failure, reason 'invalid_media', detail 'truncated: sample data at byte ... is past the "
            "last complete box', before ffprobe runs."
        ),
        reason="invalid_media",
        source="anthwlock/untrunc#68",
        needs_ffmpeg=True,
    ),
    Case(
        id="B14",
        title="JPEG with an XMP tiff:Orientation (alone; against EXIF)",
        files=(B14_XMP_ONLY, B14_BOTH),
        make=make_b14,
        expected=(
            "Success, as a browser shows them: the XMP-only file is not rotated (thumb 320x213, "
            "decisions.orientation 1); the EXIF 6 + XMP 3 file is rotated by EXIF 6 only (90 degrees "
            "clockwise: thumb 213x320, TL blue, TR red; decisions.orientation 6)."
        ),
        source="python-pillow/Pillow#6462",
    ),
    Case(
        id="B15",
        title="HEIC with EXIF orientation 6 and no irot/imir",
        files=(B15,),
        make=make_b15,
        expected=(
            "Success, not rotated (MIAF: irot/imir orient a HEIF, its EXIF orientation is ignored): thumb "
            "320x213, TL red; decisions.orientation 1."
        ),
        source="strukturag/libheif#680",
    ),
    Case(
        id="B16",
        title="HEIC 2x2 grid that references three tiles",
        files=(B16,),
        make=make_b16,
        expected=(
            "permanent_failure, reason 'corrupt_image', detail 'grid item 1 is 2x2 but has 3 tiles', before "
            "any decoder runs."
        ),
        reason="corrupt_image",
        source="AOMediaCodec/libavif#262",
    ),
)
