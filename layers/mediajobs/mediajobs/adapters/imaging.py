"""Image rendering with Pillow (+ pi-heif for HEIC/HEIF).

Importing this module registers pi-heif's HEIF opener with Pillow (pi-heif is the pillow-heif
project's decoder-only build: the same API, without the HEVC encoder the worker never
calls). The worker imports it at INIT (:mod:`mediajobs.bootstrap`): every original is detected with it.

Order of operations for one original, chosen so that bad input fails before any pixel
is decoded and good input is decoded once:

1. Identify the type from the bytes, among an allow-list of formats (never from the name
   or Content-Type). Formats outside it (EPS, which runs Ghostscript; PSD; ...) are
   ``unsupported_format``.
2. Walk the container's structure before any decoder reads it
   (:mod:`mediajobs.domain.inspections.jpeg_markers`, :mod:`mediajobs.domain.inspections.containers`):
   decoders hide damage (libjpeg skips corrupt data, libheif paints missing tiles green)
   and some structures are bombs on their own (fill bytes, chunk and comment floods).
   For HEIF and AVIF, read what decoding the primary image will decode
   (:mod:`mediajobs.domain.inspections.heif_items`: every coded picture's size from its AV1 sequence
   header or HEVC parameter set, grid and overlay canvases, tile counts), since the
   declared size (``ispe``) can lie: more than ``max_pixels`` is ``too_many_pixels``, an
   overlay libavif cannot compose is ``unsupported_feature``, before any decoder parses it.
   An overlay with inputs left of or above its canvas, which libheif misplaces, is handed
   to pi-heif recomposed on a grown canvas (its own size checked the same way) and cut back.
3. Read width x height from the header and refuse more than ``max_pixels`` as
   ``too_many_pixels``. Pillow's own ``MAX_IMAGE_PIXELS`` only warns between its limit and
   twice its limit (DecompressionBombWarning), so it is not relied on.
4. For JPEG, ask the decoder for a DCT-domain reduced decode (``Image.draft``) no smaller
   than the largest variant. Count frames on a separate handle, within limits.
5. Decode the primary image (never another frame: a HEIF's primary need not be its
   first image; when libheif will not read the primary item, pi-heif opens another image,
   which is refused as ``unsupported_feature``). Orient it once: HEIF and AVIF by their
   clap, irot and imir, in that order
   (libheif applies them while decoding; libavif applies none, so they are applied here),
   their EXIF orientation ignored as MIAF says; other formats by EXIF orientation 2-8 only
   (an XMP ``tiff:Orientation`` is ignored, as browsers ignore it). Normalise the
   pixel mode (16-bit scaled, not clipped; palette/LA/PA with alpha kept) and convert to
   sRGB from any embedded ICC profile (CMYK included; Pillow's JPEG decoder already undoes
   Adobe's inverted CMYK).
6. Resize largest variant first, each from the previous (cascade), Lanczos; release the
   decoded image.
7. Encode without ``info``: no EXIF, XMP or ICC reaches an output (Pillow's
   AVIF and PNG encoders would otherwise copy ``info["icc_profile"]``).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import logging
import math
import mmap
import re
import struct
import warnings
from pathlib import Path
from typing import Any, Final, cast

import pi_heif
from PIL import Image, ImageCms, ImageFile, ImageOps, UnidentifiedImageError

from mediajobs.adapters.ssimulacra2 import Ssimulacra2
from mediajobs.domain.errors import (
    CORRUPT_IMAGE,
    FRAMES,
    MEMORY_LIMIT_EXCEEDED,
    PIXELS,
    SCANS,
    TOO_MANY_FRAMES,
    TOO_MANY_PIXELS,
    TOO_MANY_SCANS,
    TRUNCATED_IMAGE,
    UNSUPPORTED_FEATURE,
    UNSUPPORTED_FORMAT,
    PermanentFailure,
)
from mediajobs.domain.inspections.containers import container_problem, top_level_boxes
from mediajobs.domain.inspections.heif_items import (
    CleanAperture,
    Decoder,
    PrimaryImage,
    Recomposition,
    Rotation,
    exif_orientation,
    primary_image,
    read_structure,
)
from mediajobs.domain.inspections.jpeg_markers import JpegReport, inspect_jpeg_file
from mediajobs.domain.jobs import RenderContext, RenderedFile
from mediajobs.domain.manifest import RenderDecisions
from mediajobs.domain.quality_search import (
    OTHER_FORMAT_CARRY,
    SAME_FORMAT_CARRY,
    SLOPES,
    SearchResult,
    Try,
    predicted_quality,
    search,
)
from mediajobs.domain.recipes import CONTENT_TYPES, EXTENSIONS, FORMATS_WITH_ALPHA, ImageVariant, fit_within

log = logging.getLogger(__name__)

pi_heif.register_heif_opener()  # HEIC/HEIF for every Image.open in the process, from this import on
# A truncated file must fail, never decode into a half-grey picture.
ImageFile.LOAD_TRUNCATED_IMAGES = False

#: Formats Pillow may open. Anything else is ``unsupported_format``.
ALLOWED_FORMATS: Final = ("JPEG", "PNG", "WEBP", "GIF", "TIFF", "HEIF", "AVIF")
_ORIENTATION_TAG: Final = 0x0112
#: Frames x pixels an animation may have for its duration to be measured, in units of max_pixels.
ANIMATION_BUDGET_FACTOR: Final = 4
_SRGB: Final = ImageCms.createProfile("sRGB")
#: What Pillow's plugins raise on damaged data, wherever it is met (open, n_frames, seek, load).
_DECODE_ERRORS: Final = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    KeyError,
    TypeError,
    struct.error,
    ZeroDivisionError,
    RuntimeError,  # pi-heif and Pillow's AVIF plugin report decoder failures this way
)
#: Default of the most frames (or pages) an image may have (``Settings.max_frames``). Pillow
#: walks them one by one (TIFF pages in quadratic time), so millions of 1x1 frames in a few
#: MB would take minutes to count.
MAX_FRAMES: Final = 10_000
#: Formats whose extra frames are an animation (others hold pages or auxiliary images).
ANIMATED_FORMATS: Final = frozenset({"GIF", "WEBP", "PNG", "AVIF"})
#: JPEG and MPO (a JPEG with more images appended, as phones write "Ultra HDR").
JPEG_FORMATS: Final = frozenset({"JPEG", "MPO"})
#: libwebp's method (effort, 0-6) when a variant names none: 4, as ``web-image@1`` was made.
WEBP_METHOD: Final = 4
#: Default of the most scans a progressive JPEG may have (``Settings.max_jpeg_scans``).
#: Encoders write about 10 (mozjpeg up to ~20); each scan is a pass over the whole image, so
#: thousands are a CPU bomb in a small file.
MAX_JPEG_SCANS: Final = 100


def _open(path: Path, recomposed: Recomposition | None = None) -> Image.Image:
    """Open lazily (header only), allow-listed formats only, with the plugin
    :func:`_heif_format` names for an ISO BMFF file; with ``recomposed``, the HEIF at
    ``path`` with its patches applied, in memory (pi-heif reads the whole file anyway)."""
    formats: tuple[str, ...] = ALLOWED_FORMATS
    if _heif_format(path) == "AVIF":  # a mif1 file with the avif brand: libavif, not pi-heif
        formats = tuple(f for f in ALLOWED_FORMATS if f != "HEIF")
    source: Path | io.BytesIO = path
    if recomposed is not None:
        formats, source = ("HEIF",), io.BytesIO(recomposed.applied_to(path.read_bytes()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(source, formats=formats)
    except UnidentifiedImageError as exc:
        raise PermanentFailure(UNSUPPORTED_FORMAT, "not an image in an accepted format") from exc
    except Image.DecompressionBombError as exc:
        raise PermanentFailure(TOO_MANY_PIXELS, PIXELS.detail(str(exc).rstrip("."))) from exc
    except _DECODE_ERRORS as exc:
        raise PermanentFailure(CORRUPT_IMAGE, f"unreadable header: {exc}") from exc


def identify(path: Path) -> str | None:
    """The detected image format (``JPEG``, ``HEIF`` ...), or ``None`` when not an accepted image.

    Reads only the header. A JPEG is recognised by its signature alone, as Pillow's own
    plugin does, so a pathological one (megabytes of fill bytes, millions of segments)
    never reaches Pillow's reader here; the render job walks its markers once and refuses
    it with its reason. So is a HEIF or AVIF its decoder refuses to open (by its brand: a
    grid short of a tile): it is an image, and the render job says what is wrong with it.
    """
    with open(path, "rb") as f:
        if f.read(3) == b"\xff\xd8\xff":
            return "JPEG"
    try:
        with _open(path) as im:
            return str(im.format)
    except PermanentFailure as failure:
        if failure.reason == UNSUPPORTED_FORMAT:
            return _heif_format(path)  # a HEIF its decoder refuses is still an image: the job says why
        return "unknown"


def _frames(
    source: Path, max_pixels: int, budget_pixels: int, max_frames: int = MAX_FRAMES
) -> tuple[int | None, int | None]:
    """(frame count, total duration in ms) of a multi-frame image, read through its own handle.

    Frames are walked one by one (never ``n_frames``, which walks the whole file), at most
    ``max_frames``. For animations each frame is decoded to read its duration (WebP and
    AVIF set it only when a frame is loaded) and to find a file cut inside its last frame,
    so the walk stops, with count and duration ``None`` (unknown), before a frame over
    ``max_pixels`` or once frames x pixels exceed ``budget_pixels``. The image that is
    rendered is never touched: Pillow may grow a GIF's canvas for a larger later frame.

    Raises
    ------
    PermanentFailure
        ``too_many_frames`` past ``max_frames``; decoder errors propagate to the caller.
    """
    with _open(source) as im:
        if not getattr(im, "is_animated", False):  # read from the header or one cheap step
            return 1, 0
        animated = im.format in ANIMATED_FORMATS
        count, total_ms, spent = 0, 0, 0
        while True:
            if count:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                        im.seek(count)  # GIF: decodes the previous frame, already within budget
                except EOFError:
                    break
                except Image.DecompressionBombError:
                    return None, None
            count += 1
            if count > max_frames:
                raise PermanentFailure(TOO_MANY_FRAMES, FRAMES.detail(f"more than {max_frames:,} frames"))
            if not animated:
                continue
            spent += im.width * im.height
            if im.width * im.height > max_pixels or spent > budget_pixels:
                return None, None
            im.load()
            total_ms += int(im.info.get("duration", 0) or 0)
        return count, (total_ms if animated else 0)


def _jpeg_failure(path: Path, max_scans: int = MAX_JPEG_SCANS) -> PermanentFailure | None:
    """The marker walk's verdict on a JPEG (``None`` for other data or a sound JPEG)."""
    with open(path, "rb") as f:
        if f.read(2) != b"\xff\xd8":
            return None
    report: JpegReport = inspect_jpeg_file(path)
    if report.corruption:
        return PermanentFailure(CORRUPT_IMAGE, report.corruption)
    if report.scans > max_scans:
        return PermanentFailure(TOO_MANY_SCANS, SCANS.detail(f"{report.scans} scans", f"{max_scans}"))
    return None


def _check_tiff_tiles(im: Image.Image, max_pixels: int) -> None:
    """libtiff allocates a whole tile, whatever the image size: a 64x64 TIFF may declare a
    26000x26000 tile (TIFF 6.0 tags 322/323)."""
    tags = getattr(im, "tag_v2", {})
    tile_w, tile_h = int(tags.get(322, 0) or 0), int(tags.get(323, 0) or 0)
    if tile_w * tile_h > max_pixels:
        raise PermanentFailure(
            TOO_MANY_PIXELS, PIXELS.detail(f"a TIFF tile of {tile_w}x{tile_h}", f"{max_pixels} pixels")
        )


#: TIFF tags that mark a camera raw: DNGVersion (tag 50706, Adobe's DNG specification),
#: SubIFDs (330, Adobe's TIFF Technical Notes of 1995), NewSubFileType (254, TIFF 6.0; bit 0:
#: a reduced-resolution version of another image), PhotometricInterpretation (262) values
#: 32803 (CFA, TIFF/EP, ISO 12234-2) and 34892 (LinearRaw, DNG).
_DNG_VERSION_TAG: Final = 50706
_SUB_IFDS_TAG: Final = 330
_NEW_SUBFILE_TYPE_TAG: Final = 254
_PHOTOMETRIC_TAG: Final = 262
_RAW_PHOTOMETRICS: Final = {32803: "CFA", 34892: "LinearRaw"}


def _check_tiff_raw(im: Image.Image, source: Path) -> None:
    """Refuse camera raw files. A TIFF reader reads their first IFD, which holds a small
    preview (a DNG's or a NEF's 160x120 would be rendered as the ``full`` variant).

    Refused: a DNGVersion tag; a first IFD of CFA or LinearRaw pixels (Pillow identifies
    none today, so they end ``unsupported_format`` before any job; this keeps them out
    should it learn to); a first IFD that is a
    reduced-resolution image (NewSubFileType bit 0) with SubIFDs, where TIFF/EP raws (NEF,
    PEF, ARW) keep the full image; Canon's CR2 (``CR`` and major version 2 after the TIFF
    header). Rendering a raw needs demosaicing and the camera's colour matrices (LibRaw),
    which this renderer does not do.

    Raises
    ------
    PermanentFailure
        ``unsupported_format``, the detail naming the kind of raw.
    """
    tags = getattr(im, "tag_v2", {})
    with open(source, "rb") as f:
        header = f.read(11)
    kind = None
    if _DNG_VERSION_TAG in tags:
        version = tags.get(_DNG_VERSION_TAG)  # BYTE[4]: Pillow gives bytes (or a tuple)
        kind = "DNG" + (f" {'.'.join(str(int(v)) for v in version)}" if isinstance(version, bytes | tuple) else "")
    elif header[8:11] == b"CR\x02":
        kind = "Canon CR2"
    elif int(tags.get(_PHOTOMETRIC_TAG, 0) or 0) in _RAW_PHOTOMETRICS:
        kind = f"{_RAW_PHOTOMETRICS[int(tags[_PHOTOMETRIC_TAG])]} pixels (TIFF/EP)"
    elif int(tags.get(_NEW_SUBFILE_TYPE_TAG, 0) or 0) & 1 and _SUB_IFDS_TAG in tags:
        kind = "a reduced-resolution preview with the full image in a SubIFD (TIFF/EP)"
    if kind is not None:
        raise PermanentFailure(UNSUPPORTED_FORMAT, f"a camera raw image ({kind}): raw formats are not rendered")


#: What decoders say when they cannot allocate (Pillow's codec status -9 "out of memory",
#: libavif's AVIF_RESULT_OUT_OF_MEMORY "Out of memory", libheif's
#: heif_error_Memory_allocation_error "Memory allocation error", strerror(ENOMEM)), lower case.
_ALLOCATION_FAILURES: Final = ("out of memory", "memory allocation error", "cannot allocate memory", "bad_alloc")
#: What decoders say of a valid file using something they do not implement, lower case:
#: libavif's AVIF_RESULT_NOT_IMPLEMENTED "Not implemented" and AVIF_RESULT_REFORMAT_FAILED
#: "Reformat failed" (avifImageYUVToRGB has no conversion for these matrix coefficients,
#: range or depth: BT.2020 constant luminance, SMPTE 2085, ICtCp ...); libheif's
#: heif_error_Unsupported_feature, heif_error_Unsupported_filetype ("Unsupported file-type")
#: and a missing decoder ("Support for this compression format has not been built in", "No
#: decoding plugin installed for this compression format"); a Pillow codec that was not
#: compiled in ("decoder tiff_... not available").
_UNSUPPORTED_FEATURES: Final = (
    "not implemented",
    "reformat failed",
    "unsupported feature",
    "unsupported file-type",
    "has not been built in",
    "no decoding plugin installed",
)


def _decode_failure(exc: BaseException) -> PermanentFailure:
    """The permanent failure a decoder error means.

    In this order: ``too_many_pixels`` for libheif's own size limits; ``memory_limit_exceeded``
    when an allocation failed (ENOMEM, or the decoder says so); ``unsupported_feature``
    when the decoder says it cannot handle something the file validly uses (the decoder's
    message is the detail); ``truncated_image`` when the data ends early; ``corrupt_image``
    otherwise.
    """
    text = f"{type(exc).__name__}: {exc}"
    message = str(exc).lower()
    if "security limit exceeded" in message:  # libheif's own size limits (e.g. an ispe that lies)
        return PermanentFailure(TOO_MANY_PIXELS, PIXELS.detail(text))
    if (isinstance(exc, OSError) and exc.errno == errno.ENOMEM) or any(w in message for w in _ALLOCATION_FAILURES):
        return PermanentFailure(MEMORY_LIMIT_EXCEEDED, text)
    if any(w in message for w in _UNSUPPORTED_FEATURES) or re.search(r"decoder \S+ not available", message):
        return PermanentFailure(UNSUPPORTED_FEATURE, text)
    truncated = isinstance(exc, EOFError | struct.error) or any(
        word in message for word in ("truncated", "broken data stream", "not enough data", "premature end")
    )
    return PermanentFailure(TRUNCATED_IMAGE if truncated else CORRUPT_IMAGE, text)


def _to_8bit_base(im: Image.Image) -> tuple[Image.Image, Image.Image | None, str]:
    """Split into an 8-bit colour base (``L``, ``RGB`` or ``CMYK``) and an optional alpha band."""
    mode = im.mode
    alpha: Image.Image | None = None
    if mode in ("P", "PA"):
        has_alpha = mode == "PA" or "transparency" in im.info
        im = im.convert("RGBA" if has_alpha else "RGB")
        note = f"{mode}->{im.mode}"
        mode = im.mode
    else:
        note = ""
    if mode in ("RGBA", "LA", "RGBa", "La"):
        if mode in ("RGBa", "La"):
            im = im.convert(mode[0:-1] + "A")
        alpha = im.getchannel("A")
        im = im.convert("RGB" if im.mode == "RGBA" else "L")
    elif mode in ("I;16", "I;16L", "I;16B", "I;16N"):
        # Pillow clips 16-bit values when converting to L; scale 0..65535 to 0..255.
        im = im.convert("I").point(lambda v: v * (1 / 257)).convert("L")
        note = f"{mode}->L (scaled 1/257)"
    elif mode in ("I", "F"):
        # 32-bit samples: 8-bit data stays, 16-bit data is scaled, anything wider is normalised.
        low, high = cast(tuple[float, float], im.getextrema())
        if not (math.isfinite(low) and math.isfinite(high)):
            raise PermanentFailure(CORRUPT_IMAGE, f"non-finite samples in a {mode} image ({low}..{high})")
        if mode == "I" and high <= 255 and low >= 0:
            scale, offset = 1.0, 0.0
        elif mode == "I" and high <= 65535 and low >= 0:
            scale, offset = 1 / 257, 0.0
        else:
            scale, offset = 255.0 / ((high - low) or 1.0), low
        im = im.point(lambda v: (v - offset) * scale).convert("L")
        note = f"{mode}->L (scaled {scale:.6g})"
    elif mode == "1":
        im = im.convert("L")
        note = "1->L"
    elif mode not in ("L", "RGB", "CMYK"):
        im = im.convert("RGB")
        note = f"{mode}->RGB"
    if alpha is not None and alpha.getextrema() == (255, 255):
        alpha = None  # fully opaque: no alpha channel needed
    return im, alpha, note


def _to_srgb(im: Image.Image, icc: bytes | None) -> tuple[Image.Image, str, str | None]:
    """Convert an ``L``/``RGB``/``CMYK`` base to sRGB ``RGB`` (or keep ``L``)."""
    description: str | None = None
    if icc:
        try:
            profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            description = (ImageCms.getProfileDescription(profile) or "").strip() or "unnamed"
            if im.mode == "RGB" and "srgb" in description.lower():
                return im, "none (already sRGB)", description
            if im.mode == "RGB":  # same mode: convert in place, no second full-size buffer
                ImageCms.profileToProfile(im, profile, _SRGB, outputMode="RGB", inPlace=True)
                return im, "icc->srgb (RGB)", description
            converted = ImageCms.profileToProfile(im, profile, _SRGB, outputMode="RGB")
            assert converted is not None
            return converted, f"icc->srgb ({im.mode})", description
        except (ImageCms.PyCMSError, OSError, ValueError) as exc:
            log.warning("ignoring unusable ICC profile: %s", exc)
            description = f"invalid ({exc})"
    if im.mode == "CMYK":
        return im.convert("RGB"), "cmyk->srgb (no profile)", description
    return im, "none", description


def _flatten(im: Image.Image) -> Image.Image:
    background = Image.new("RGB", im.size, (255, 255, 255))
    background.paste(im.convert("RGB"), mask=im.getchannel("A"))
    return background


def _file_digest(path: Path) -> tuple[str, int]:
    """(SHA-256 hex, size in bytes) of the file at ``path``."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        return digest, f.tell()


#: What each plugin that reads HEIF files decodes: Pillow's AVIF plugin is libavif (AV1, grids;
#: no overlays), pi-heif is libheif with libde265 (HEVC, grids, overlays, identity images;
#: AV1 only if its build has a decoder for it).
#: Most items libheif reads in one file: its default security limit (``heif_security_limits``
#: ``max_items``, 1,000 since libheif 1.19); past it, it refuses the file.
LIBHEIF_MAX_ITEMS: Final = 1000
DECODERS: Final = {
    "AVIF": Decoder("libavif (Pillow's AVIF plugin)", frozenset({"av01"}), frozenset({"grid"})),
    "HEIF": Decoder(
        "libheif (pi-heif)",
        frozenset({"hvc1", *(["av01"] if pi_heif.libheif_info().get("AVIF") else [])}),
        frozenset({"grid", "iovl", "iden"}),
        max_items=LIBHEIF_MAX_ITEMS,
        misplaces_negative_offsets=True,  # libheif 1.23: see Decoder.misplaces_negative_offsets
    ),
}


#: The major brands each plugin claims: pi-heif's ``_is_supported_heif``, then
#: ``PIL.AvifImagePlugin._accept``. Both claim the generic ``mif1``/``msf1``.
_PLUGIN_BRANDS: Final = (
    ("HEIF", frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"})),
    ("AVIF", frozenset({b"avif", b"avis", b"mif1", b"msf1"})),
)
#: Compatible brands that say the file is an AVIF (AV1 Image File Format, 8.2: an AVIF
#: image lists ``avif``, an AVIF sequence ``avis``) or a HEVC HEIF (ISO/IEC 23008-12, Annex B).
_AVIF_BRANDS: Final = frozenset({b"avif", b"avis"})
_HEVC_BRANDS: Final = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs"})


def _heif_format(path: Path) -> str | None:
    """``HEIF`` or ``AVIF``: the plugin that opens the ISO BMFF file at ``path``; ``None`` for
    any other file.

    Chosen from the ``ftyp`` box (ISO/IEC 14496-12 4.3): the major brand, and for the generic
    ``mif1``/``msf1`` major brands the compatible brands, so that an AVIF whose major brand is
    ``mif1`` (libavif writes that for some files; MIAF allows it) goes to libavif rather than to
    pi-heif, which has no AV1 decoder.
    """
    with open(path, "rb") as f:
        head = f.read(256)
    if head[4:8] != b"ftyp":
        return None
    major = head[8:12]
    if major in (b"mif1", b"msf1"):
        box_end = min(len(head), int.from_bytes(head[0:4], "big"))
        compatible = {head[i : i + 4] for i in range(16, box_end - 3, 4)}
        if compatible & _AVIF_BRANDS and not compatible & _HEVC_BRANDS:
            return "AVIF"
    return next((name for name, brands in _PLUGIN_BRANDS if major in brands), None)


def _heif_primary(path: Path, source_format: str, max_pixels: int) -> PrimaryImage | None:
    """What decoding a HEIF/AVIF file's primary image will decode (:func:`primary_image`) with
    the plugin ``source_format``, checked against ``max_pixels`` before any decoder parses the
    file (with, for an overlay pi-heif would misplace inputs of, how to hand it over instead:
    its ``recomposition``); ``None`` for an AVIF image sequence (libavif decodes its track, not
    the primary item).

    Raises
    ------
    PermanentFailure
        ``too_many_pixels``, ``unsupported_feature`` (also for a HEIF image sequence with no
        still image: pi-heif reads items only) or ``corrupt_image``.
    """
    decoder = DECODERS[source_format]
    sequence = "moov" in top_level_boxes(path)
    if source_format == "AVIF" and sequence:
        return None
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        structure = read_structure(data)
        if structure is None and sequence:
            raise PermanentFailure(UNSUPPORTED_FEATURE, f"a {source_format} image sequence without a still image")
        if structure is None:
            raise PermanentFailure(CORRUPT_IMAGE, f"a {source_format} file without a meta box")
        if decoder.max_items is not None and len(structure.items) > decoder.max_items:
            raise PermanentFailure(
                UNSUPPORTED_FEATURE, f"{len(structure.items)} items: {decoder.name} reads at most {decoder.max_items}"
            )
        return primary_image(structure, max_pixels, decoder)  # reads the mapped file


def _transformed(im: Image.Image, heif: PrimaryImage, source_format: str) -> Image.Image:
    """The decoded primary image with its clap/irot/imir applied once, in order.

    libheif (pi-heif, ``HEIF``) applies them itself while decoding; libavif (Pillow's
    ``AVIF``) applies none (Pillow only turns irot/imir into an EXIF orientation, which is
    not used), so they are applied here. An overlay decoded recomposed
    (:class:`~mediajobs.domain.inspections.heif_items.Recomposition`: a grown canvas, its
    transformations detached) is cut back to its canvas first, and transformed here too.
    Either way the result must have the size the structure says, or the file is ``corrupt_image``.
    """
    picture = im
    moved = heif.recomposition
    if moved is not None:
        if picture.size != (moved.width_px, moved.height_px):
            raise PermanentFailure(
                CORRUPT_IMAGE,
                f"{source_format} decoded the recomposed overlay to {picture.width}x{picture.height}, "
                f"not {moved.width_px}x{moved.height_px}",
            )
        picture = picture.crop(
            (moved.left_px, moved.top_px, moved.left_px + heif.width_px, moved.top_px + heif.height_px)
        )
    if source_format == "AVIF" or moved is not None:
        for step in heif.transforms:
            if isinstance(step, CleanAperture):
                picture = picture.crop((step.left, step.top, step.left + step.width, step.top + step.height))
            elif isinstance(step, Rotation):
                picture = picture.transpose(_ROTATIONS[step.quarter_turns])
            else:
                picture = picture.transpose(_MIRRORS[step.axis])
    expected = (heif.display_width_px, heif.display_height_px)
    if picture.size != expected:
        raise PermanentFailure(
            CORRUPT_IMAGE,
            f"{source_format} decoded to {picture.width}x{picture.height}, "
            f"its structure says {expected[0]}x{expected[1]}",
        )
    return picture


#: irot (anti-clockwise quarter turns) and imir (0: top/bottom, 1: left/right) as Pillow transposes.
_ROTATIONS: Final = {1: Image.Transpose.ROTATE_90, 2: Image.Transpose.ROTATE_180, 3: Image.Transpose.ROTATE_270}
_MIRRORS: Final = {0: Image.Transpose.FLIP_TOP_BOTTOM, 1: Image.Transpose.FLIP_LEFT_RIGHT}
#: Where Pillow keeps an XMP packet (``info["xmp"]``; TIFF and older plugins use the other key).
_XMP_KEYS: Final = ("xmp", "XML:com.adobe.xmp")


def _exif_orientation(im: Image.Image) -> int:
    """The EXIF orientation tag (1-8; 1 when absent or out of range) of a non-HEIF image.

    Only EXIF counts: browsers ignore an XMP ``tiff:Orientation``, which Pillow's
    ``getexif`` (and so ``exif_transpose``) would otherwise use when EXIF has none. The XMP
    packets are dropped from ``info`` first (no output keeps metadata anyway).
    """
    for key in _XMP_KEYS:
        im.info.pop(key, None)
    with warnings.catch_warnings():  # "Corrupt EXIF data": the EXIF is dropped anyway
        warnings.simplefilter("ignore")
        orientation = int(im.getexif().get(_ORIENTATION_TAG, 1) or 1)
    return orientation if 2 <= orientation <= 8 else 1


class PillowRenderer:
    """Renders image variants in-process.

    Parameters
    ----------
    max_pixels: largest accepted width x height of the original (frame size).
    max_frames: most frames (or pages) an original may have.
    max_jpeg_scans: most scans a progressive JPEG may have.
    (``Settings.max_pixels``, ``max_frames``, ``max_jpeg_scans``.)
    """

    def __init__(self, max_pixels: int, *, max_frames: int = MAX_FRAMES, max_jpeg_scans: int = MAX_JPEG_SCANS) -> None:
        self._max_pixels = max_pixels
        self._max_frames = max_frames
        self._max_jpeg_scans = max_jpeg_scans

    def render(
        self, source: Path, variants: tuple[ImageVariant, ...], out_dir: Path, context: RenderContext | None = None
    ) -> tuple[list[RenderedFile], RenderDecisions]:
        """Render ``variants`` of the image at ``source`` into ``out_dir``, in this process.

        ``context`` is accepted for the pipeline's renderer port and not used: an image render
        in-process is not interrupted (the production default,
        :class:`mediajobs.adapters.isolated.IsolatedStep`, stops its child at the deadline).

        Peak memory is about one decoded (draft-reduced) image plus the variants: the
        decoded image is released before the first encode, since the AVIF encoder alone
        needs about 70 MB at 1600 px.

        Returns
        -------
        (files, decisions)
            One :class:`RenderedFile` per variant, in the recipe's order.

        Raises
        ------
        PermanentFailure
            ``unsupported_format``, ``too_many_pixels``, ``truncated_image``, ``corrupt_image``
            or ``unsupported_feature``.
        """
        largest_box = max(v.box_px for v in variants)
        base, decisions, display_size = self._decode(source, largest_box)
        sized = _resize_all(base, display_size, variants)
        del base  # only the variants stay alive while encoding
        files = []
        searches: dict[str, dict[str, Any]] = {}
        previous: tuple[str, float] | None = None  # (format, quality offset) of the last searched variant
        metrics: dict[int, tuple[Image.Image, Ssimulacra2]] = {}  # one reference half per picture
        for variant in variants:
            image = sized.pop(variant.name)
            if variant.target is None:
                files.append(_encode(image, variant, out_dir))
                continue
            first = predicted_quality(variant.target.start_quality, _carried(previous, variant.format))
            rendered, result = _encode_to_target(image, variant, out_dir, first, metrics)
            files.append(rendered)
            searches[variant.name] = result.to_json()
            previous = (variant.format, result.chosen.quality - variant.target.start_quality)
        if searches:
            decisions = dataclasses.replace(decisions, quality_search=searches)
        return files, decisions

    def decode(self, source: Path, box_px: int) -> tuple[Image.Image, RenderDecisions, tuple[int, int]]:
        """The image at ``source`` decoded once, upright, in sRGB, for outputs of at most
        ``box_px`` on their long side: steps 1-5 of the module docstring, as :meth:`render`
        decodes it (a JPEG is decoded at the smallest DCT scale still at least ``box_px``).

        Parameters
        ----------
        source: the original.
        box_px: the largest output's box side, pixels.

        Returns
        -------
        (image, decisions, display_size)
            An ``RGB`` or ``RGBA`` image of at least ``box_px`` on its long side (or the full
            size when smaller), not yet resized to the box; what was decided; and the
            full-resolution upright (display) size ``(width, height)`` in pixels, which the
            image has the shape of.

        Raises
        ------
        PermanentFailure
            As :meth:`render` (``unsupported_format``, ``too_many_pixels``,
            ``truncated_image``, ``corrupt_image``, ``unsupported_feature`` ...).
        """
        return self._decode(source, box_px)

    def _decode(self, source: Path, largest_box: int) -> tuple[Image.Image, RenderDecisions, tuple[int, int]]:
        """Decode once into an upright sRGB ``RGB``/``RGBA`` image, at least ``largest_box`` on its long
        side (or full size when smaller); also returns the full-resolution displayed size in pixels.

        Any decoder error, wherever a damaged file trips Pillow, is a permanent failure."""
        try:
            return self._decode_unchecked(source, largest_box)
        except PermanentFailure:
            raise
        except Image.DecompressionBombError as exc:
            raise PermanentFailure(TOO_MANY_PIXELS, PIXELS.detail(str(exc).rstrip("."))) from exc
        except _DECODE_ERRORS as exc:
            raise _decode_failure(exc) from exc

    def _decode_unchecked(self, source: Path, largest_box: int) -> tuple[Image.Image, RenderDecisions, tuple[int, int]]:
        problem = _jpeg_failure(source, self._max_jpeg_scans) or container_problem(source)  # before any decoder
        if problem is not None:
            raise problem
        heif_format = _heif_format(source)  # HEIF/AVIF: what decoding will decode, before a decoder parses it
        heif = None if heif_format is None else _heif_primary(source, heif_format, self._max_pixels)
        try:
            opened = _open(source, None if heif is None else heif.recomposition)
        except PermanentFailure as failure:
            if heif_format is None or failure.reason != UNSUPPORTED_FORMAT:
                raise
            # Its structure passed the check above (tiles, sizes, references), so what the
            # decoder refuses is a way of arranging it that the decoder does not implement
            # (libavif: a grid listed after its tiles, a grid of grids, a rotated tile).
            raise PermanentFailure(
                UNSUPPORTED_FEATURE,
                f"a {heif_format} file whose structure is sound that {DECODERS[heif_format].name} refuses to open",
            ) from failure
        with opened as im:
            if heif is not None and im.format == "HEIF" and not im.info.get("primary"):
                # pi-heif leaves out an image libheif will not read and then opens its first
                # other image: an overlay's input, the thumbnail. Never render that instead.
                raise PermanentFailure(
                    UNSUPPORTED_FEATURE,
                    f"{DECODERS['HEIF'].name} cannot read the primary item {heif.item_id} ({heif.item_type}), "
                    "whose structure is sound",
                )
            width, height = im.size
            if width * height > self._max_pixels:
                found = f"{width}x{height} = {width * height} pixels"
                raise PermanentFailure(TOO_MANY_PIXELS, PIXELS.detail(found, f"{self._max_pixels}"))
            source_format = str(im.format)
            if source_format == "TIFF":
                _check_tiff_raw(im, source)
                _check_tiff_tiles(im, self._max_pixels)
            if source_format in JPEG_FORMATS:
                im.draft(None, fit_within(width, height, largest_box))  # DCT-domain 1/2, 1/4, 1/8
            if source_format in DECODERS and source_format != heif_format:  # pi-heif refused it, libavif took it
                heif_format, heif = source_format, _heif_primary(source, source_format, self._max_pixels)
            budget = ANIMATION_BUDGET_FACTOR * self._max_pixels
            frames, duration_ms = _frames(source, self._max_pixels, budget, self._max_frames)
            im.load()
            crop: CleanAperture | None = None
            if heif is not None:
                # MIAF 7.3.6.7: irot/imir orient the image and EXIF orientation is ignored.
                picture = _transformed(im, heif, source_format)
                orientation = exif_orientation(heif.transforms)
                crop = next((t for t in heif.transforms if isinstance(t, CleanAperture)), None)
                width, height = heif.width_px, heif.height_px
            else:
                picture = im
                orientation = _exif_orientation(im)
                if orientation != 1:
                    ImageOps.exif_transpose(im, in_place=True)
            icc = picture.info.get("icc_profile")
            base, alpha, mode_note = _to_8bit_base(picture)
            base, colour, icc_description = _to_srgb(base, icc)
            if base is im and getattr(im, "n_frames", 1) > 1:
                # Still the file object: Pillow's AVIF encoder saves a multi-frame image from
                # its frame 0, which for a HEIF is not the primary image when that comes later.
                base = base.copy()
        if base.mode == "L":
            base = base.convert("RGB")
        if alpha is not None:
            base.putalpha(alpha)
        decisions = RenderDecisions(
            source_format=source_format,
            source_width=width,
            source_height=height,
            orientation=orientation,
            crop=None if crop is None else [crop.left, crop.top, crop.width, crop.height],
            colour=colour,
            icc_profile=icc_description,
            mode=mode_note,
            alpha=alpha is not None,
            animated=frames != 1 and source_format in ANIMATED_FORMATS,
            frames=frames,
            duration_ms=duration_ms,
            frames_dropped=None if frames is None else frames - 1,
        )
        # HEIF and AVIF are decoded at full size and turned upright above; EXIF 5-8 swap the sides.
        upright = (height, width) if orientation >= 5 else (width, height)
        return base, decisions, base.size if heif is not None else upright


def _resize_all(
    base: Image.Image, full_size: tuple[int, int], variants: tuple[ImageVariant, ...]
) -> dict[str, Image.Image]:
    """Each variant's image, largest first, each resized from the previous one (Lanczos)."""
    sized: dict[str, Image.Image] = {}
    current = base
    for variant in sorted(variants, key=lambda v: v.box_px, reverse=True):
        target = fit_within(full_size[0], full_size[1], variant.box_px)
        if current.size != target:
            current = current.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
        sized[variant.name] = current
    return sized


def _prepared(image: Image.Image, variant: ImageVariant) -> Image.Image:
    """The picture as it is encoded: flattened when the format has no alpha, and without
    ``info``, so no EXIF, XMP or ICC reaches an output (AVIF/PNG would copy icc_profile)."""
    if image.mode == "RGBA" and variant.format not in FORMATS_WITH_ALPHA:
        image = _flatten(image)
    image.info = {}
    return image


def _save(image: Image.Image, variant: ImageVariant, quality: int | None, dest: Path | io.BytesIO) -> None:
    """Encode ``image`` as ``variant.format`` at ``quality`` (ignored by PNG) into ``dest``."""
    if variant.format == "webp":
        image.save(
            dest, format="WEBP", quality=quality, method=WEBP_METHOD if variant.method is None else variant.method
        )
    elif variant.format == "avif":
        image.save(
            dest,
            format="AVIF",
            quality=quality,
            speed=6 if variant.speed is None else variant.speed,
            subsampling=variant.chroma or "4:2:0",
        )
    elif variant.format == "jpeg":
        image.save(dest, format="JPEG", quality=quality, optimize=True, progressive=True)
    else:
        image.save(dest, format="PNG", optimize=True)


def _carried(previous: tuple[str, float] | None, image_format: str) -> float:
    """The quality offset an earlier searched variant passes on to one in ``image_format``."""
    if previous is None:
        return 0.0
    earlier_format, offset = previous
    return offset * (SAME_FORMAT_CARRY if earlier_format == image_format else OTHER_FORMAT_CARRY)


def _encode_to_target(
    image: Image.Image,
    variant: ImageVariant,
    out_dir: Path,
    first_quality: int,
    metrics: dict[int, tuple[Image.Image, Ssimulacra2]],
) -> tuple[RenderedFile, SearchResult]:
    """Encode one variant at the lowest quality found that reaches its target
    (:func:`mediajobs.domain.quality_search.search`: at most 3 encodes, each scored with
    SSIMULACRA2 against ``image`` as it is before encoding), write the chosen encode and
    describe it.

    ``metrics`` holds the reference half of the metric (:class:`Ssimulacra2`) of each
    picture already searched, by the picture's identity (kept alive beside it): two variants
    of one picture (``card`` and ``full`` of a source under 800 px are the same picture)
    share it instead of computing it twice."""
    assert variant.target is not None
    image = _prepared(image, variant)
    if id(image) not in metrics:
        metrics[id(image)] = (image, Ssimulacra2(image))  # the reference's half, once for every try
    metric = metrics[id(image)][1]
    encoded: dict[int, bytes] = {}

    def try_quality(quality: int) -> Try:
        buffer = io.BytesIO()
        _save(image, variant, quality, buffer)
        encoded[quality] = buffer.getvalue()
        with Image.open(io.BytesIO(encoded[quality])) as decoded:
            decoded.load()
            score = metric.score(decoded)
        return Try(quality, score, len(encoded[quality]))

    target = variant.target
    result = search(try_quality, first_quality, target.score, target.tolerance, SLOPES[variant.format])
    dest = out_dir / f"{variant.name}.{EXTENSIONS[variant.format]}"
    dest.write_bytes(encoded[result.chosen.quality])
    return _described(image, variant, dest), result


def _encode(image: Image.Image, variant: ImageVariant, out_dir: Path) -> RenderedFile:
    """Encode one variant at its fixed quality without any metadata and describe the file."""
    image = _prepared(image, variant)
    dest = out_dir / f"{variant.name}.{EXTENSIONS[variant.format]}"
    _save(image, variant, variant.quality, dest)
    return _described(image, variant, dest)


def _described(image: Image.Image, variant: ImageVariant, dest: Path) -> RenderedFile:
    """The :class:`RenderedFile` of ``image`` written to ``dest``."""
    sha, size = _file_digest(dest)
    return RenderedFile(
        name=variant.name,
        format=variant.format,
        path=dest,
        width=image.width,
        height=image.height,
        bytes=size,
        sha256=sha,
        content_type=CONTENT_TYPES[variant.format],
    )
