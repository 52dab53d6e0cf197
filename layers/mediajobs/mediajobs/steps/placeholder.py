"""The placeholder steps: what a page shows before an image or a video's poster has loaded.

From the decoded, upright sRGB picture fitted inside a 100 px box, each step records (in the
manifest's ``decisions``; it writes no file):

* ``thumbhash``: the picture's ThumbHash (Evan Wallace's format, github.com/evanw/thumbhash),
  standard base64, about 25-35 characters. ThumbHash rather than BlurHash because the hash
  itself carries the aspect ratio, the alpha channel and the average colour, and holds more
  detail in fewer bytes; a BlurHash needs its component counts chosen per image and has no
  alpha. Encoded by the ``thash`` package (pure Python, MIT, maintained in 2026; the older
  ``thumbhash-python`` pins Pillow < 11) with its pure-Python backend, so the hash is the same
  whether or not NumPy is installed. Against the reference encoder (``thumbhash.js`` 0.1.1 on
  npm, by the format's author) ``thash`` agrees byte for byte except where a quantised value
  falls exactly half-way: Python's ``round`` goes to even, JavaScript's ``Math.round`` up, so
  one field differs by one step (a 2:1 image with alpha gets 5x2 luminance terms instead of
  5x3; a flat colour's AC nibbles are 7 instead of 8). Either hash is a valid ThumbHash that
  every decoder reads; ``tests/unit/test_placeholder.py`` pins both cases.
* ``dominant_colour``: ``#rrggbb``, the alpha-weighted mean of the sRGB values of the 100 px
  picture (the mean of the encoded values, not of linear light): the colour ThumbHash stores
  as its DC terms, before their 6-bit quantisation turns a flat grey ``#808080`` into
  ``#857f7f``. A picture with no opaque pixel at all gives the plain mean of its colours.
* ``display_width_px``, ``display_height_px``: the size of the full-resolution upright
  picture (after EXIF orientation or HEIF irot/imir/clap; a video's square-pixel display
  size), so that a page can reserve the box before anything loads.

Importing this module imports Pillow and the domain only (what a cold start already has):
``thash`` is imported at the first hash (with NumPy installed, as in development, it imports
NumPy), the video plans at the first video.

Cost: a separate job, so one more decode of the original; a JPEG is decoded at 1/8 scale in
the DCT domain (``Image.draft``), which is what makes it cheap (``benchmarks/placeholder.py``).
Images are decoded by :class:`mediajobs.adapters.imaging.PillowRenderer` as ``web-image``'s
variants are, so in production inside the bounded render child
(:mod:`mediajobs.adapters.isolated`); videos take one frame with ffmpeg at the poster's
``at_fraction`` (:func:`mediajobs.domain.video.frame_argv`: the same input allow-list, argv
only, no shell).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol

from PIL import Image

from mediajobs.adapters.imaging import MAX_FRAMES, MAX_JPEG_SCANS, PillowRenderer
from mediajobs.domain.errors import TOO_LONG, VIDEO_SECONDS, DeadlineReached, PermanentFailure
from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.recipes import ImagePlaceholderParams, VideoPlaceholderParams, fit_within
from mediajobs.service_layer.ports import StepResult

if TYPE_CHECKING:
    from mediajobs.domain.video import VideoProbe

#: Longest side of the picture a ThumbHash is computed from, pixels: the format's limit
#: (``rgbaToThumbHash`` refuses more than 100x100: "Encoding an image larger than 100x100 is
#: slow with no benefit").
THUMBHASH_MAX_PX: Final = 100


@dataclass(frozen=True)
class Placeholder:
    """A placeholder's values (see the module docstring).

    Attributes
    ----------
    thumbhash: the ThumbHash, standard base64 with padding.
    dominant_colour: ``#rrggbb``, lower case.
    display_width_px, display_height_px: the upright full-resolution size, pixels.
    """

    thumbhash: str
    dominant_colour: str
    display_width_px: int
    display_height_px: int

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``decisions``."""
        return {
            "placeholder": "thumbhash",
            "thumbhash": self.thumbhash,
            "dominant_colour": self.dominant_colour,
            "display_width_px": self.display_width_px,
            "display_height_px": self.display_height_px,
        }


def mean_colour(rgba: bytes) -> str:
    """``#rrggbb``: the alpha-weighted mean of the colours of ``rgba`` (flat 8-bit RGBA
    samples), each channel rounded half up; the unweighted mean when every pixel is fully
    transparent. Pure.

    Raises
    ------
    ValueError
        When ``rgba`` is empty or not a whole number of pixels.
    """
    if not rgba or len(rgba) % 4:
        raise ValueError(f"{len(rgba)} bytes are not RGBA pixels")
    alpha = rgba[3::4]
    weight = sum(alpha)
    channels = (rgba[0::4], rgba[1::4], rgba[2::4])
    if weight:
        means = [sum(c * a for c, a in zip(channel, alpha, strict=True)) / weight for channel in channels]
    else:
        means = [sum(channel) / len(channel) for channel in channels]
    return "#" + "".join(f"{int(m + 0.5):02x}" for m in means)


def placeholder_of(image: Image.Image, display_size: tuple[int, int], box_px: int = THUMBHASH_MAX_PX) -> Placeholder:
    """The placeholder of an upright sRGB picture.

    Parameters
    ----------
    image: the picture, any Pillow mode (``RGB`` and ``RGBA`` as decoded; others are
        converted to ``RGBA``), with the shape of ``display_size``, any size: it is resized
        to ``display_size`` fitted inside ``box_px`` (never larger than the display size),
        with Lanczos as the variants are (Pillow premultiplies alpha while resizing).
    display_size: (width, height) of the full-resolution upright picture, pixels.
    box_px: side of the box the hash is computed in, 1 to :data:`THUMBHASH_MAX_PX` pixels.

    Raises
    ------
    ValueError
        When a size is not positive or ``box_px`` is over :data:`THUMBHASH_MAX_PX`.
    """
    from thash import rgba_to_thumb_hash_pure  # here: with NumPy installed, importing thash imports it

    if not 0 < box_px <= THUMBHASH_MAX_PX:
        raise ValueError(f"box_px must be 1 to {THUMBHASH_MAX_PX}, got {box_px}")
    width, height = display_size
    target = fit_within(width, height, box_px)
    small = image if image.mode == "RGBA" else image.convert("RGBA")
    if small.size != target:
        small = small.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
    rgba = small.tobytes()
    hashed = bytes(rgba_to_thumb_hash_pure(small.width, small.height, list(rgba)))
    return Placeholder(
        thumbhash=base64.b64encode(hashed).decode("ascii"),
        dominant_colour=mean_colour(rgba),
        display_width_px=width,
        display_height_px=height,
    )


class ImagePlaceholder:
    """The ``image.placeholder`` step (the :class:`~mediajobs.service_layer.ports.Step` port):
    decodes the original as ``image.variants`` does, for a 100 px box, and returns the
    placeholder as decisions, no files.

    Parameters
    ----------
    max_pixels, max_frames, max_jpeg_scans: the image limits, as ``image.variants`` takes them
        (``Settings.max_pixels``, ``max_frames``, ``max_jpeg_scans``).
    """

    name: ClassVar[str] = "image.placeholder"
    params_model: ClassVar[type[ImagePlaceholderParams]] = ImagePlaceholderParams
    #: Imported by the bounded render child's zygote before it forks (code, not input), so
    #: that no render child pays for them or counts them against its budget.
    child_imports: ClassVar[tuple[str, ...]] = ("thash",)

    def __init__(self, max_pixels: int, max_frames: int = MAX_FRAMES, max_jpeg_scans: int = MAX_JPEG_SCANS) -> None:
        self._renderer = PillowRenderer(max_pixels, max_frames=max_frames, max_jpeg_scans=max_jpeg_scans)

    def run(self, source: Path, params: ImagePlaceholderParams, context: RenderContext, out_dir: Path) -> StepResult:
        """The placeholder of the image at ``source`` (``params.box_px``: the box it is
        computed in, at most :data:`THUMBHASH_MAX_PX`). ``context`` and ``out_dir`` are not
        used: a decode at 100 px is short, and nothing is written.

        Raises
        ------
        PermanentFailure
            As :meth:`PillowRenderer.decode <mediajobs.adapters.imaging.PillowRenderer.decode>`.
        """
        image, _, display_size = self._renderer.decode(source, params.box_px)
        return StepResult(files=[], decisions=placeholder_of(image, display_size, params.box_px).to_json())


class FrameSource(Protocol):
    """What :class:`VideoPlaceholder` needs of the video adapter
    (:class:`mediajobs.adapters.video.FfmpegRenderer`)."""

    invocation_s: float
    margin_s: float
    max_duration_s: float

    def probe(self, source: Path) -> VideoProbe: ...
    def frame_rgb(
        self, source: Path, probe: VideoProbe, at_s: float, size: tuple[int, int], timeout_s: float
    ) -> tuple[bytes, float]: ...


class VideoPlaceholder:
    """The ``video.placeholder`` step: the placeholder of a video's frame at
    ``params.at_fraction`` of its duration (``web-video``'s poster time), taken by ffmpeg
    already scaled to ``params.box_px``; decisions only, no files.

    Parameters
    ----------
    make_source: builds the video adapter (:func:`mediajobs.bootstrap.video_renderer`), called
        at the first run so that its imports wait for the first video.
    """

    name: ClassVar[str] = "video.placeholder"
    params_model: ClassVar[type[VideoPlaceholderParams]] = VideoPlaceholderParams

    def __init__(self, make_source: Callable[[], FrameSource]) -> None:
        self._make_source = make_source
        self._source: FrameSource | None = None

    def run(self, source: Path, params: VideoPlaceholderParams, context: RenderContext, out_dir: Path) -> StepResult:
        """The placeholder of the video at ``source``: probed (the adapter's allow-list and
        limits), one frame at ``params.at_fraction`` of its duration (0 s when there is
        none there), fitted inside ``params.box_px``. The decisions add ``frame_at_s``.

        Raises
        ------
        PermanentFailure
            From the probe (``unsupported_container``, ``invalid_media``, ``no_video_stream``,
            ``unsupported_codec``, ``too_many_pixels``), ``too_long`` past the adapter's
            ``max_duration_s`` (``MAX_VIDEO_SECONDS``, as for ``web-video``), or a classified
            ffmpeg failure.
        DeadlineReached
            When no time is left in the invocation.
        TransientFailure
            For any other ffmpeg failure or a timeout.
        """
        from mediajobs.domain.video import frame_at_s  # the video plans wait for the first video

        if self._source is None:
            self._source = self._make_source()
        video = self._source
        remaining = context.remaining_s()
        timeout_s = video.invocation_s if remaining is None else remaining - video.margin_s
        if timeout_s <= 0:
            raise DeadlineReached(f"no time left for a video placeholder ({timeout_s + video.margin_s:.1f} s left)")
        probe = video.probe(source)
        if probe.duration_s > video.max_duration_s:  # web-video's rule: such a source is refused
            raise PermanentFailure(
                TOO_LONG, VIDEO_SECONDS.detail(f"{probe.duration_s:.1f} s", f"{video.max_duration_s:.0f} s")
            )
        display = probe.display_size
        size = fit_within(display[0], display[1], params.box_px)
        rgb, taken_at_s = video.frame_rgb(source, probe, frame_at_s(probe, params.at_fraction), size, timeout_s)
        decisions = placeholder_of(Image.frombytes("RGB", size, rgb), display, params.box_px).to_json()
        return StepResult(files=[], decisions={**decisions, "frame_at_s": taken_at_s})
