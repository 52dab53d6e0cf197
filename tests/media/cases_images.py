"""The image cases (I01-I18): small synthetic files made with Pillow (and numpy), each
standing for a kind of image upload that has broken real media pipelines.

Every :class:`Case` names the public report it stands for and the outcome a correct
pipeline gives; its maker writes the files from nothing but this module (no reads outside
the repository), deterministically: no unseeded randomness, no timestamps (Pillow writes no
PNG ``tIME`` and no GIF/JPEG dates; the one EXIF ``DateTime`` is a fixed value), so two
builds give the same bytes for the same Pillow.

Pipeline assumptions behind the expected values: variants fit an N x N box (thumb 320 WebP,
card 800 WebP, full 1600 AVIF), never upscaled, EXIF orientation applied, ICC converted to
sRGB, no EXIF/XMP/GPS in any output.
"""

from __future__ import annotations

import hashlib
import io
import struct
from pathlib import Path

import numpy as np
from make_cases import Case, Tools
from PIL import Image, TiffImagePlugin

# Four quadrant colours (sRGB) used by the orientation case, as the displayed picture shows them.
RED = (220, 30, 30)
GREEN = (30, 160, 60)
BLUE = (40, 60, 200)
YELLOW = (230, 200, 40)
WHITE = (255, 255, 255)


# --- I01: EXIF orientation 5-8 --------------------------------------------------------

ORIENTATION_STORED_PX = (960, 640)
#: The transpose that undoes each EXIF orientation (what ``ImageOps.exif_transpose`` applies).
_DISPLAY_FROM_STORED = {
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
#: Its inverse: how the camera stored the pixels of the upright picture.
_STORED_FROM_DISPLAY = {
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}
ORIENTATION_JPEG_QUALITY = 90
CAMERA_MAKE = "SyntheticCam"
CAMERA_MODEL = "Case-1"


def _quadrants(width_px: int, height_px: int) -> Image.Image:
    """An upright picture with quadrants TL red, TR green, BL blue, BR yellow."""
    image = Image.new("RGB", (width_px, height_px))
    half_w, half_h = width_px // 2, height_px // 2
    for colour, (x, y) in zip((RED, GREEN, BLUE, YELLOW), ((0, 0), (1, 0), (0, 1), (1, 1)), strict=True):
        image.paste(colour, (x * half_w, y * half_h, (x + 1) * half_w, (y + 1) * half_h))
    return image


def _camera_exif(orientation: int | None = None) -> Image.Exif:
    """A phone-like EXIF block (big-endian, as iPhones write it) naming a camera."""
    exif = Image.Exif()
    exif.endian = ">"
    exif[0x010F] = CAMERA_MAKE  # Make
    exif[0x0110] = CAMERA_MODEL  # Model
    if orientation is not None:
        exif[0x0112] = orientation  # Orientation
    return exif


def make_i01(folder: Path, tools: Tools | None) -> None:
    """I01_orientation_5..8.jpg: a portrait picture stored as 960x640 landscape pixels plus
    an EXIF Orientation tag 5-8 (transpose, rotate 90 CW, transverse, rotate 90 CCW), as
    phones write it. Displayed upright it is 640x960 with quadrants TL red, TR green, BL blue,
    BR yellow; code that ignores the tag or maps 5/7 wrongly shows it sideways or mirrored."""
    width_px, height_px = ORIENTATION_STORED_PX
    upright = _quadrants(height_px, width_px)
    for orientation, transpose in _STORED_FROM_DISPLAY.items():
        stored = upright.transpose(transpose)
        assert stored.size == ORIENTATION_STORED_PX
        assert stored.transpose(_DISPLAY_FROM_STORED[orientation]).tobytes() == upright.tobytes()
        stored.save(
            folder / f"I01_orientation_{orientation}.jpg",
            format="JPEG",
            quality=ORIENTATION_JPEG_QUALITY,
            subsampling=0,  # 4:4:4: flat quadrants, no chroma bleeding at the centre lines
            exif=_camera_exif(orientation),
        )


# --- I02: GPS in EXIF and XMP on a small image ----------------------------------------

GPS_IMAGE_PX = (300, 200)
#: 12 deg 34' 56.78" N, 65 deg 43' 21.09" E (EXIF rationals: degrees, minutes, 1/100 seconds).
GPS_LATITUDE = ((12, 1), (34, 1), (5678, 100))
GPS_LONGITUDE = ((65, 1), (43, 1), (2109, 100))
GPS_ALTITUDE_M = (3, 1)
PHOTO_DATETIME = "2024:01:01 12:00:00"  # fixed: a real camera's stamp, never the build's time
#: The same place in XMP (exif:GPSLatitude is "degrees,minutes.fraction" + N/S).
GPS_XMP = (
    b'<?xpacket begin="\xef\xbb\xbf" id="W5M0MpCehiHzreSzNTczkc9d"?>'
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
    b'<rdf:Description rdf:about="" xmlns:exif="http://ns.adobe.com/exif/1.0/" '
    b'exif:GPSLatitude="12,34.9463N" exif:GPSLongitude="65,43.3515E"/>'
    b'</rdf:RDF></x:xmpmeta><?xpacket end="w"?>'
)
GPS_JPEG_QUALITY = 90


def make_i02(folder: Path, tools: Tools | None) -> None:
    """I02_gps_small_300x200.jpg: a 300x200 JPEG (smaller than every variant) with a GPS IFD,
    Make/Model/DateTime in EXIF and the same coordinates in an XMP packet. A 'no resize
    needed' shortcut that copies or re-saves the original leaks the location; stripping only
    EXIF still leaks the XMP copy."""
    width_px, height_px = GPS_IMAGE_PX
    x = np.arange(width_px) * 255 // width_px
    y = np.arange(height_px) * 255 // height_px
    pixels = np.empty((height_px, width_px, 3), dtype=np.uint8)
    pixels[..., 0] = x[None, :]
    pixels[..., 1] = y[:, None]
    pixels[..., 2] = 255 - x[None, :]
    exif = _camera_exif()
    exif[0x0132] = PHOTO_DATETIME  # DateTime
    rational = TiffImagePlugin.IFDRational
    exif[0x8825] = {  # GPSInfo IFD
        0x0001: "N",
        0x0002: tuple(rational(n, d) for n, d in GPS_LATITUDE),
        0x0003: "E",
        0x0004: tuple(rational(n, d) for n, d in GPS_LONGITUDE),
        0x0005: b"\x00",  # altitude above sea level
        0x0006: rational(*GPS_ALTITUDE_M),
    }
    Image.fromarray(pixels).save(
        folder / "I02_gps_small_300x200.jpg",
        format="JPEG",
        quality=GPS_JPEG_QUALITY,
        exif=exif,
        xmp=GPS_XMP,
    )


# --- I03: Adobe CMYK JPEG -------------------------------------------------------------

CMYK_IMAGE_PX = (320, 240)
CMYK_BLOCK_HEIGHT_PX = 180
CMYK_RED = (0, 255, 255, 0)  # magenta + yellow ink
CMYK_BLUE = (255, 255, 0, 0)  # cyan + magenta ink
CMYK_GREY = (0, 0, 0, 128)  # half black ink
CMYK_JPEG_QUALITY = 92


def make_i03(folder: Path, tools: Tools | None) -> None:
    """I03_cmyk_adobe.jpg: a 320x240 four-component JPEG as print workflows write it - an
    Adobe APP14 segment (transform 0) and inverted CMYK samples (255 = no ink), which
    libjpeg writes for Pillow's CMYK mode. Left block red, right block blue, bottom strip
    50 % black; a non-inverting decoder shows them black, C,M,Y read as R,G,B shows cyan and
    yellow."""
    width_px, height_px = CMYK_IMAGE_PX
    image = Image.new("CMYK", CMYK_IMAGE_PX, CMYK_GREY)
    image.paste(CMYK_RED, (0, 0, width_px // 2, CMYK_BLOCK_HEIGHT_PX))
    image.paste(CMYK_BLUE, (width_px // 2, 0, width_px, CMYK_BLOCK_HEIGHT_PX))
    path = folder / "I03_cmyk_adobe.jpg"
    image.save(path, format="JPEG", quality=CMYK_JPEG_QUALITY)
    assert path.read_bytes()[2:11] == b"\xff\xee\x00\x0eAdobe"  # APP14 first, transform 0 follows


# --- I05: Display P3 ICC profile ------------------------------------------------------

#: CIE xy chromaticities of Display P3 (DCI-P3 primaries, D65 white; SMPTE EG 432-1).
P3_PRIMARIES_XY = ((0.680, 0.320), (0.265, 0.690), (0.150, 0.060))
SRGB_PRIMARIES_XY = ((0.640, 0.330), (0.300, 0.600), (0.150, 0.060))
D65_XY = (0.3127, 0.3290)
#: The ICC profile connection space's illuminant, D50 (ICC.1:2010, 7.2.16), as encoded.
D50_XYZ = (0x0000F6D6 / 65536, 1.0, 0x0000D32D / 65536)
#: Bradford cone response matrix (for adapting the D65 colorants to D50).
BRADFORD = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367], [0.0389, -0.0685, 1.0296]])
#: The sRGB transfer function as ICC parametric curve type 3: g, a, b, c, d (IEC 61966-2-1).
SRGB_TRC_PARAMS = (2.4, 1 / 1.055, 0.055 / 1.055, 1 / 12.92, 0.04045)
P3_PROFILE_DESCRIPTION = "Display P3 (mediajobs synthetic test profile)"
P3_PROFILE_COPYRIGHT = "No copyright, synthetic test profile"
#: A fixed creation date (the profile header has one; never the build's time).
P3_PROFILE_DATE = (2024, 1, 1, 0, 0, 0)
P3_PATCH_PX = 160
#: The six patches, left to right then top to bottom, as the sRGB colours they must show.
P3_PATCH_SRGB = ((220, 40, 40), (40, 180, 60), (40, 60, 200), (224, 172, 140), (240, 200, 40), (128, 128, 128))
P3_JPEG_QUALITY = 95


def _xy_to_xyz(xy: tuple[float, float]) -> np.ndarray:
    x, y = xy
    return np.array([x / y, 1.0, (1 - x - y) / y])


def _rgb_to_xyz_matrix(primaries_xy: tuple[tuple[float, float], ...], white_xy: tuple[float, float]) -> np.ndarray:
    """The linear RGB -> XYZ matrix of an RGB space (columns: the primaries' XYZ, white Y = 1)."""
    columns = np.stack([_xy_to_xyz(p) for p in primaries_xy], axis=1)
    scale = np.linalg.solve(columns, _xy_to_xyz(white_xy))
    return columns * scale


def _bradford(source_white_xyz: np.ndarray, target_white_xyz: np.ndarray) -> np.ndarray:
    """The Bradford chromatic adaptation matrix from one white to another."""
    ratio = (BRADFORD @ target_white_xyz) / (BRADFORD @ source_white_xyz)
    return np.linalg.inv(BRADFORD) @ np.diag(ratio) @ BRADFORD


def _s15f16(*values: float) -> bytes:
    """ICC s15Fixed16Number values, big-endian."""
    return b"".join(struct.pack(">i", round(v * 65536)) for v in values)


def _mluc(text: str) -> bytes:
    """An ICC multiLocalizedUnicodeType with one en-US record."""
    encoded = text.encode("utf-16-be")
    return b"mluc\0\0\0\0" + struct.pack(">II2s2sII", 1, 12, b"en", b"US", len(encoded), 28) + encoded


def display_p3_icc() -> bytes:
    """An ICC v4.3 RGB display profile for Display P3, built from its definition: matrix/TRC
    (D50-adapted P3 colorants, Bradford 'chad', sRGB parametric curves), the structure
    Apple's own Display P3 profile has, with our own description and no copied bytes. The
    header's profile ID is the MD5 the ICC spec asks for."""
    to_d50 = _bradford(_xy_to_xyz(D65_XY), np.array(D50_XYZ))
    colorants = to_d50 @ _rgb_to_xyz_matrix(P3_PRIMARIES_XY, D65_XY)
    curve = b"para\0\0\0\0" + struct.pack(">HH", 3, 0) + _s15f16(*SRGB_TRC_PARAMS)
    tags: list[tuple[bytes, bytes]] = [
        (b"desc", _mluc(P3_PROFILE_DESCRIPTION)),
        (b"cprt", _mluc(P3_PROFILE_COPYRIGHT)),
        (b"wtpt", b"XYZ \0\0\0\0" + _s15f16(*D50_XYZ)),
        (b"chad", b"sf32\0\0\0\0" + _s15f16(*to_d50.flatten())),
        (b"rXYZ", b"XYZ \0\0\0\0" + _s15f16(*colorants[:, 0])),
        (b"gXYZ", b"XYZ \0\0\0\0" + _s15f16(*colorants[:, 1])),
        (b"bXYZ", b"XYZ \0\0\0\0" + _s15f16(*colorants[:, 2])),
        (b"rTRC", curve),
        (b"gTRC", curve),
        (b"bTRC", curve),
    ]
    table_end = 128 + 4 + 12 * len(tags)
    table, body, placed = [], b"", {}
    for signature, data in tags:
        if data not in placed:  # the three TRCs share one curve, as usual
            offset = table_end + len(body)
            placed[data] = offset
            body += data + b"\0" * (-len(data) % 4)
        table.append(struct.pack(">4sII", signature, placed[data], len(data)))
    size = table_end + len(body)
    header = (
        struct.pack(">I4sI4s4s4s", size, b"\0\0\0\0", 0x04300000, b"mntr", b"RGB ", b"XYZ ")
        + struct.pack(">6H", *P3_PROFILE_DATE)
        + b"acsp"
        + b"\0" * 24  # platform, flags, manufacturer, model, attributes
        + struct.pack(">I", 0)  # rendering intent: perceptual
        + _s15f16(*D50_XYZ)
        + b"\0" * 4  # creator
    )
    profile = bytearray(header + b"\0" * 44 + struct.pack(">I", len(tags)) + b"".join(table) + body)
    assert len(profile) == size
    profile[84:100] = hashlib.md5(bytes(profile)).digest()  # flags, intent and ID are zero here
    return bytes(profile)


def _srgb_decode(encoded: np.ndarray) -> np.ndarray:
    return np.where(encoded <= 0.04045, encoded / 12.92, ((encoded + 0.055) / 1.055) ** 2.4)


def _srgb_encode(linear: np.ndarray) -> np.ndarray:
    linear = np.clip(linear, 0.0, 1.0)
    return np.where(linear <= 0.0031308, linear * 12.92, 1.055 * linear ** (1 / 2.4) - 0.055)


def srgb_to_display_p3(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """The 8-bit Display P3 encoding of an 8-bit sRGB colour (same white, same curve)."""
    to_p3 = np.linalg.inv(_rgb_to_xyz_matrix(P3_PRIMARIES_XY, D65_XY)) @ _rgb_to_xyz_matrix(SRGB_PRIMARIES_XY, D65_XY)
    red, green, blue = (int(v) for v in np.rint(_srgb_encode(to_p3 @ _srgb_decode(np.array(rgb) / 255)) * 255))
    return red, green, blue


def make_i05(folder: Path, tools: Tools | None) -> None:
    """I05_display_p3.jpg: a 480x320 JPEG whose six 160x160 patches are encoded in Display
    P3 and tagged with a Display P3 ICC profile, as iPhones save photos. Shown without the
    profile (or resized without converting) red, green and yellow shift by dE76 13-15."""
    columns = 3
    image = Image.new("RGB", (columns * P3_PATCH_PX, 2 * P3_PATCH_PX))
    for index, srgb in enumerate(P3_PATCH_SRGB):
        x, y = (index % columns) * P3_PATCH_PX, (index // columns) * P3_PATCH_PX
        image.paste(srgb_to_display_p3(srgb), (x, y, x + P3_PATCH_PX, y + P3_PATCH_PX))
    image.save(
        folder / "I05_display_p3.jpg",
        format="JPEG",
        quality=P3_JPEG_QUALITY,
        subsampling=0,
        icc_profile=display_p3_icc(),
    )


# --- I07: 16-bit grey PNG -------------------------------------------------------------

GREY16_IMAGE_PX = (512, 256)
GREY16_MAX = 65535


def make_i07(folder: Path, tools: Tools | None) -> None:
    """I07_gray16_ramp.png: a 512x256 16-bit greyscale PNG (Pillow mode I;16), a left-to-right
    ramp 0..65535. Pillow's convert('L'/'RGB') clips 16-bit samples instead of scaling them,
    turning almost every pixel white."""
    width_px, height_px = GREY16_IMAGE_PX
    row = np.rint(np.linspace(0, GREY16_MAX, width_px)).astype(np.uint16)
    image = Image.fromarray(np.tile(row, (height_px, 1)))
    assert image.mode == "I;16"
    image.save(folder / "I07_gray16_ramp.png", format="PNG")


# --- I08: palette PNG with tRNS -------------------------------------------------------

PALETTE_IMAGE_PX = 256
PALETTE_DISC_RADIUS_PX = 70
PALETTE_RING_OUTER_RADIUS_PX = 100
PALETTE_RED = (220, 30, 30)
#: Alpha of palette indexes 0 (black background), 1 (opaque red disc), 2 (half-transparent red ring).
PALETTE_ALPHAS = bytes([0, 255, 128])


def make_i08(folder: Path, tools: Tools | None) -> None:
    """I08_palette_trns.png: a 256x256 palette (mode P) PNG with a tRNS chunk - index 0 black
    with alpha 0 (background), 1 opaque red (disc, radius 70), 2 red with alpha 128 (ring
    70..100, so radius 85 is inside it). convert('RGB') turns the background black and the
    ring solid."""
    centre = PALETTE_IMAGE_PX / 2
    coordinates = np.arange(PALETTE_IMAGE_PX) + 0.5 - centre  # pixel centres
    distance = np.hypot(coordinates[None, :], coordinates[:, None])
    indexes = np.where(distance < PALETTE_DISC_RADIUS_PX, 1, np.where(distance < PALETTE_RING_OUTER_RADIUS_PX, 2, 0))
    image = Image.fromarray(indexes.astype(np.uint8), mode="P")
    image.putpalette((0, 0, 0, *PALETTE_RED, *PALETTE_RED))
    image.save(folder / "I08_palette_trns.png", format="PNG", transparency=PALETTE_ALPHAS)


# --- I10: animated GIF ----------------------------------------------------------------

GIF_IMAGE_PX = (240, 180)
GIF_BORDER_PX = 20
GIF_FRAME_COLOURS = (RED, GREEN, BLUE, WHITE)
GIF_FRAME_DURATIONS_MS = (100, 200, 300, 400)
GIF_TRANSPARENT_INDEX = len(GIF_FRAME_COLOURS)


def make_i10(folder: Path, tools: Tools | None) -> None:
    """I10_animated.gif: a 240x180 GIF with 4 frames (red, green, blue, white) of
    100/200/300/400 ms, looping forever; frame 0 has a 20 px transparent border. Pipelines
    drop the animation silently, pick a later or composited frame, or blacken the border."""
    width_px, height_px = GIF_IMAGE_PX
    palette = [channel for colour in GIF_FRAME_COLOURS for channel in colour] + [0, 0, 0]
    frames = []
    for index in range(len(GIF_FRAME_COLOURS)):
        frame = Image.new("P", GIF_IMAGE_PX, index)
        frame.putpalette(palette)
        frames.append(frame)
    border = Image.new("P", GIF_IMAGE_PX, GIF_TRANSPARENT_INDEX)
    border.putpalette(palette)
    border.paste(0, (GIF_BORDER_PX, GIF_BORDER_PX, width_px - GIF_BORDER_PX, height_px - GIF_BORDER_PX))
    frames[0] = border
    frames[0].save(
        folder / "I10_animated.gif",
        format="GIF",
        save_all=True,
        append_images=frames[1:],
        duration=list(GIF_FRAME_DURATIONS_MS),
        loop=0,  # forever
        disposal=2,  # restore to background: frame 0's border stays transparent
        transparency=GIF_TRANSPARENT_INDEX,
        optimize=False,
    )


# --- I12: truncated progressive JPEG --------------------------------------------------

PROGRESSIVE_IMAGE_PX = (1024, 768)
PROGRESSIVE_BLOCK_PX = 32
PROGRESSIVE_NOISE_LEVELS = 6  # per-pixel noise, +/- levels: puts 45 % in the middle of scan 6 (of 10)
PROGRESSIVE_SEED = 12
PROGRESSIVE_JPEG_QUALITY = 88
#: How much of the file an interrupted upload leaves.
TRUNCATED_FRACTION = 0.45
_SOS = b"\xff\xda"


def _scan_offsets(data: bytes) -> list[int]:
    """Byte offsets of every SOS marker of a JPEG (entropy data has every 0xFF stuffed)."""
    offsets, pos = [], 2
    while pos + 4 <= len(data):
        marker, length = data[pos : pos + 2], int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker == b"\xff\xd9":
            break
        end = pos + 2 + length
        if marker == _SOS:
            offsets.append(pos)
            while not (data[end] == 0xFF and data[end + 1] != 0x00 and not 0xD0 <= data[end + 1] <= 0xD7):
                end += 1
        pos = end
    return offsets


def make_i12(folder: Path, tools: Tools | None) -> None:
    """I12_progressive_truncated.jpg: a 1024x768 progressive JPEG (libjpeg's 10-scan script)
    cut to 45 % of its bytes, inside a later scan, with no EOI - what an interrupted upload
    leaves. With LOAD_TRUNCATED_IMAGES Pillow 'succeeds' with a half-refined picture."""
    width_px, height_px = PROGRESSIVE_IMAGE_PX
    rng = np.random.default_rng(PROGRESSIVE_SEED)
    blocks = rng.integers(0, 256, (height_px // PROGRESSIVE_BLOCK_PX, width_px // PROGRESSIVE_BLOCK_PX, 3))
    smooth = Image.fromarray(blocks.astype(np.uint8)).resize(PROGRESSIVE_IMAGE_PX, Image.Resampling.BILINEAR)
    noise = rng.integers(-PROGRESSIVE_NOISE_LEVELS, PROGRESSIVE_NOISE_LEVELS + 1, (height_px, width_px, 3))
    pixels = np.clip(np.asarray(smooth, dtype=int) + noise, 0, 255).astype(np.uint8)
    whole = io.BytesIO()
    Image.fromarray(pixels).save(whole, format="JPEG", quality=PROGRESSIVE_JPEG_QUALITY, progressive=True)
    data = whole.getvalue()
    cut = int(len(data) * TRUNCATED_FRACTION)
    scans = _scan_offsets(data)
    assert len(scans) >= 3 and data[-2:] == b"\xff\xd9"
    last_started = max(offset for offset in scans if offset < cut)
    assert last_started > scans[0] and cut > last_started + 16, "the cut must fall inside a later scan's data"
    (folder / "I12_progressive_truncated.jpg").write_bytes(data[:cut])


# --- I14: pixel bomb ------------------------------------------------------------------

BOMB_IMAGE_PX = (8000, 7500)  # 60,000,000 pixels: between 50 MP and 2 x 50 MP


def make_i14(folder: Path, tools: Tools | None) -> None:
    """I14_bomb_60mp_8000x7500.png: a valid 8000x7500 8-bit grey PNG of zeros, about 60 KB
    on disk and 60 MB decoded. With MAX_IMAGE_PIXELS = 50 MP Pillow only warns (it raises
    above twice the limit), so a limit enforced through it alone lets this through."""
    Image.new("L", BOMB_IMAGE_PX, 0).save(folder / "I14_bomb_60mp_8000x7500.png", format="PNG")


# --- I16: extreme aspect ratios -------------------------------------------------------

WIDE_IMAGE_PX = (8000, 2)
TALL_IMAGE_PX = (2, 6000)


def _ramp_along(length_px: int) -> np.ndarray:
    """length x 3 RGB samples: red 0..255 along the long side, green 128, blue 255..0."""
    red = np.arange(length_px) * 255 // (length_px - 1)
    return np.stack([red, np.full(length_px, 128), 255 - red], axis=1).astype(np.uint8)


def make_i16(folder: Path, tools: Tools | None) -> None:
    """I16_wide_8000x2.png and I16_tall_2x6000.png: separator/banner images whose short side
    becomes 0.08 px when the long side is fitted to 320; int() or round() yields 0 and the
    resize raises."""
    wide_w, wide_h = WIDE_IMAGE_PX
    tall_w, tall_h = TALL_IMAGE_PX
    wide = np.broadcast_to(_ramp_along(wide_w)[None, :, :], (wide_h, wide_w, 3))
    tall = np.broadcast_to(_ramp_along(tall_h)[:, None, :], (tall_h, tall_w, 3))
    Image.fromarray(np.ascontiguousarray(wide)).save(folder / "I16_wide_8000x2.png", format="PNG")
    Image.fromarray(np.ascontiguousarray(tall)).save(folder / "I16_tall_2x6000.png", format="PNG")


# --- I17: error pages under media names -----------------------------------------------

#: A CDN's 403 page, as a failed fetch stores it under the requested key.
HTML_ERROR_PAGE = (
    b"<!DOCTYPE html>\n"
    b'<html><head><meta charset="utf-8"><title>403 Forbidden</title></head>\n'
    b"<body><h1>403 Forbidden</h1><p>Request blocked. The request could not be satisfied.</p>\n"
    b"<p>Generated by a synthetic test case. Request ID: 0000000000000000</p></body></html>\n"
)
#: S3's AccessDenied error body (fixed ids).
S3_ERROR_XML = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
    b"<RequestId>0000000000000000</RequestId><HostId>synthetic-test-case</HostId></Error>\n"
)


def make_i17_html(folder: Path, tools: Tools | None) -> None:
    """I17_html_error_page.jpg: a CDN's HTML 403 page stored with a .jpg key. Routing by
    extension sends it to Pillow, whose generic error looks transient."""
    (folder / "I17_html_error_page.jpg").write_bytes(HTML_ERROR_PAGE)


def make_i17_xml(folder: Path, tools: Tools | None) -> None:
    """I17_s3_error.mp4: S3's AccessDenied XML stored with a .mp4 key. Routing by extension
    sends it to ffprobe, whose 'Invalid data found' must be read as permanent."""
    (folder / "I17_s3_error.mp4").write_bytes(S3_ERROR_XML)


# --- I18: empty uploads ---------------------------------------------------------------


def make_i18(folder: Path, tools: Tools | None) -> None:
    """I18_empty.jpg and I18_empty.mp4: zero-byte objects (an aborted upload, an S3 'folder'
    placeholder that still fires ObjectCreated)."""
    (folder / "I18_empty.jpg").write_bytes(b"")
    (folder / "I18_empty.mp4").write_bytes(b"")


CASES: tuple[Case, ...] = (
    Case(
        id="I01",
        title="EXIF orientation 5-8 (transpose/rotate/transverse)",
        files=tuple(f"I01_orientation_{o}.jpg" for o in _STORED_FROM_DISPLAY),
        make=make_i01,
        expected=(
            "Success for each file: thumb 213x320, card 533x800, full 640x960 (not upscaled); decisions.orientation"
            " is the file's tag (5-8). Displayed portrait with quadrants TL red, TR green, BL blue, BR yellow"
            " (sampled at the quadrant centres: red R>180 G,B<80; green G>150 R,B<80; blue B>180 R,G<80;"
            " yellow R,G>180 B<80). No Orientation tag in any output (or Orientation=1)."
        ),
        source="lovell/sharp#62",
    ),
    Case(
        id="I02",
        title="GPS in EXIF and XMP on an image smaller than every variant",
        files=("I02_gps_small_300x200.jpg",),
        make=make_i02,
        expected=(
            "Success: thumb, card and full all 300x200 (not upscaled), re-encoded as WebP, WebP, AVIF (not copies"
            " of the JPEG). No output has a GPS IFD (EXIF 0x8825), Make/Model/DateTime (0x010F/0x0110/0x0132),"
            " an EXIF block or an XMP packet; the coordinates 12 deg 34' and 65 deg 43' appear nowhere in the"
            " output bytes."
        ),
        source="own-pay/OwnPay#231",
    ),
    Case(
        id="I03",
        title="CMYK JPEG, Adobe APP14 (inverted CMYK, transform 0)",
        files=("I03_cmyk_adobe.jpg",),
        make=make_i03,
        expected=(
            "Success, RGB output; decisions.colour 'cmyk->srgb...'. In the thumb (320x240, not resized): left block"
            " red (R>=200, G<=70, B<=70), right block blue (B>=150, R<=80, G<=80), bottom strip mid grey"
            " (100..160 on all channels) - not black, not cyan/yellow. No CMYK ICC profile in any output."
        ),
        source="libvips/libvips#1313",
    ),
    Case(
        id="I05",
        title="Embedded Display P3 ICC profile (iPhone-style)",
        files=("I05_display_p3.jpg",),
        make=make_i05,
        expected=(
            "Success: thumb 320x213, card 480x320, full 480x320; decisions.colour 'icc->srgb...' with a profile"
            " description containing 'P3'. At each patch centre every output is within dE76 < 3 of the sRGB"
            " targets (220,40,40) (40,180,60) (40,60,200) / (224,172,140) (240,200,40) (128,128,128)."
            " Outputs carry no ICC profile or an sRGB one, never the P3 profile."
        ),
        source="photoprism/photoprism#1798",
    ),
    Case(
        id="I07",
        title="16-bit grayscale PNG (Pillow mode I;16)",
        files=("I07_gray16_ramp.png",),
        make=make_i07,
        expected=(
            "Success: thumb 320x160, card and full 512x256. Each output is a left-to-right grey ramp: mean of the"
            " left tenth <= 30, of the right tenth >= 225, centre column 128 +/- 12, R=G=B within 3, at most"
            " 15 % of pixels >= 250 (clipping gives ~99 % white)."
        ),
        source="python-pillow/Pillow#3011",
    ),
    Case(
        id="I08",
        title="Palette PNG with tRNS (partial transparency) to WebP/AVIF",
        files=("I08_palette_trns.png",),
        make=make_i08,
        expected=(
            "Success: thumb, card, full all 256x256 RGBA (WebP VP8X+ALPH, AVIF with alpha); decisions.alpha."
            " Corners alpha 0; centre alpha >= 250 and red (R >= 200, G,B <= 60); ring at radius 85 alpha"
            " 128 +/- 16 with un-premultiplied red (R >= 180); no near-black (all channels < 30) pixel with"
            " alpha > 0."
        ),
        source="python-pillow/Pillow#7288",
    ),
    Case(
        id="I10",
        title="Animated GIF (4 frames, transparent border on frame 0)",
        files=("I10_animated.gif",),
        make=make_i10,
        expected=(
            "Success (static variants): thumb, card, full single-frame 240x180 images of frame 0 - centre red"
            " (R >= 200, alpha >= 250), border alpha 0 - and the decisions record animated=true, frames=4,"
            " duration_ms=1000, frames_dropped=3. (If animation is ever supported: thumb/card animated WebP,"
            " 4 frames of 100/200/300/400 ms, loop 0.)"
        ),
        source="thumbor/thumbor#1889",
    ),
    Case(
        id="I12",
        title="Progressive JPEG truncated in the middle of a scan",
        files=("I12_progressive_truncated.jpg",),
        make=make_i12,
        expected=(
            "permanent_failure, reason 'truncated_image' (Pillow: OSError 'image file is truncated' / 'broken"
            " data stream'); no retry; no thumb/card/full written; ImageFile.LOAD_TRUNCATED_IMAGES stays False."
        ),
        reason="truncated_image",
        source="python-pillow/Pillow#2717",
    ),
    Case(
        id="I14",
        title="60-megapixel PNG bomb inside Pillow's warning-only band",
        files=("I14_bomb_60mp_8000x7500.png",),
        make=make_i14,
        expected=(
            "permanent_failure, reason 'too_many_pixels', detail naming 60000000 (> 50,000,000), decided from"
            " the header before any pixel is decoded; no retry; no variants."
        ),
        reason="too_many_pixels",
        source="python-pillow/Pillow#515",
    ),
    Case(
        id="I16",
        title="Extreme aspect ratios whose short side rounds to 0 px",
        files=("I16_wide_8000x2.png", "I16_tall_2x6000.png"),
        make=make_i16,
        expected=(
            "Success, no exception, short side clamped to >= 1 px. wide: thumb 320x1, card 800x1, full 1600x1."
            " tall: thumb 1x320, card 1x800, full 1x1600."
        ),
        source="thumbor/thumbor#1621",
    ),
    Case(
        id="I17",
        title="Error page saved under a media name: an HTML 403 page as .jpg",
        files=("I17_html_error_page.jpg",),
        make=make_i17_html,
        expected=(
            "permanent_failure, reason 'unsupported_format' (content sniffing finds text/html; Pillow raises"
            " UnidentifiedImageError), refused before any job; no retry, nothing written."
        ),
        reason="unsupported_format",
        source="python-pillow/Pillow#9094",
    ),
    Case(
        id="I17",
        title="Error page saved under a media name: S3's AccessDenied XML as .mp4",
        files=("I17_s3_error.mp4",),
        make=make_i17_xml,
        expected=(
            "permanent_failure, reason 'invalid_media' (ffprobe: 'moov atom not found' / 'Invalid data found"
            " when processing input'); no retry, nothing written."
        ),
        reason="invalid_media",
        source="python-pillow/Pillow#9094",
    ),
    Case(
        id="I18",
        title="Zero-length upload (.jpg and .mp4)",
        files=("I18_empty.jpg", "I18_empty.mp4"),
        make=make_i18,
        expected=(
            "permanent_failure, reason 'empty_file', decided from the object size (0 bytes) before any decoder"
            " or ffprobe runs; no job, no retry, nothing written."
        ),
        reason="empty_file",
        source="thumbor/thumbor#70",
    ),
)
