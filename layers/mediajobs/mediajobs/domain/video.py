"""Video decisions as pure functions: what ffprobe found, what to render, how to call ffmpeg,
what its failures mean, whether a job fits, and whether an output is right.

Nothing here runs a process or touches AWS; :mod:`mediajobs.adapters.ffmpeg` runs the
argv lists built here and :mod:`mediajobs.adapters.video` strings the steps together.

Rules that come from outside:

* Demuxers are allow-listed (:data:`ALLOWED_DEMUXERS`) and every call passes
  ``-format_whitelist`` and ``-protocol_whitelist file``: ffmpeg picks the HLS or ffconcat
  demuxer from a file's *content*, whatever its name, and those then open the files or
  URLs they list (HackerOne 242831; case V09 in ``tests/media/cases_video.py``).
* ``scale=-2:H`` gives the width ``round(H * w / h / 2) * 2`` (libavfilter ``scale_eval.c``,
  ``av_rescale`` rounds half away from zero): libx264 with yuv420p needs even sizes.
* ``-progress`` reports ``out_time_us`` and, under the misleading name ``out_time_ms``,
  the same value in microseconds (ffmpeg ``fftools/ffmpeg.c``, ``print_report``).
* The work of a job is counted in frames, not seconds: ffmpeg decodes every packet of the
  video stream and encodes every frame that reaches each output, and a frame costs time and
  bytes whatever its size (a 20 s 16x16 clip at 50,000 fps is a million frames). ffprobe's
  ``r_frame_rate`` is not a frame rate: it is the timestamp grid ("the lowest framerate with
  which all timestamps can be represented accurately"), which falls back to the time base
  (``90000/1`` for a 30 fps phone clip, rosenbjerg/FFMpegCore#300; 600 for a 52 fps drone
  clip, shaka-project/shaka-streamer#90). ``avg_frame_rate`` and ``nb_frames`` are what the
  container declares (Matroska stores no count; its rate comes from ``DefaultDuration``, and
  a sparse recording with 3 frames in 60 s declares 25 fps). So the frames are counted:
  ``-count_packets`` (:func:`ffprobe_argv`) makes ffprobe demux the whole file, 0.1 s for a
  114 MB 1080p MP4 or 100,000 packets here (:func:`stream_frames`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Final

from mediajobs.domain.errors import (
    DISK_BYTES,
    INVALID_MEDIA,
    INVALID_OUTPUT,
    NO_VIDEO_STREAM,
    SOURCE_FPS,
    TOO_LARGE,
    TOO_LONG,
    TOO_MANY_FRAMES,
    UNSUPPORTED_CODEC,
    UNSUPPORTED_CONTAINER,
    VIDEO_SECONDS,
    WORK_SECONDS,
    PermanentFailure,
    TransientFailure,
    in_bytes,
)
from mediajobs.domain.recipes import VideoEncoding, VideoRenditionsParams, VideoRung, fit_within
from mediajobs.domain.segments import SegmentPlan, plan_segments

#: Demuxers ffprobe/ffmpeg may use, as ``-format_whitelist`` takes them. The mov family
#: (MP4, MOV, M4V, 3GP, the MJ2 and M4A brands share one demuxer) and Matroska/WebM are what
#: phones, cameras and browsers record. Nothing that names other files (HLS, DASH,
#: ffconcat, image sequences) is ever allowed.
ALLOWED_DEMUXERS: Final = ("mov", "mp4", "m4a", "3gp", "3g2", "mj2", "matroska", "webm")
FORMAT_WHITELIST: Final = ",".join(ALLOWED_DEMUXERS)
#: Only the local file protocol: no http(s), tcp, concat, subfile, data or pipe.
PROTOCOL_WHITELIST: Final = "file"

#: Video decoders accepted. Anything else (ProRes RAW, a codec the build lacks, an image
#: track posing as video) is refused before an encoder starts.
ALLOWED_VIDEO_CODECS: Final = frozenset(
    {"h264", "hevc", "vp8", "vp9", "av1", "mpeg4", "mpeg2video", "prores", "mjpeg", "h263", "theora"}
)

#: Transfer characteristics that mark HDR (ITU-T H.273): PQ (SMPTE ST 2084) and HLG (ARIB STD-B67).
HDR_TRANSFERS: Final = frozenset({"smpte2084", "arib-std-b67"})

#: Tone mapping to 8-bit BT.709 through zscale (zimg): linear light at 100 nits nominal peak,
#: BT.709 primaries, Mobius curve (keeps the in-range colours, rolls off highlights),
#: then back to BT.709 transfer and limited-range 4:2:0. A bare ``format=yuv420p`` would
#: read HLG/PQ code values as BT.709 and wash colours out (case V06 in ``tests/media/cases_video.py``).
#: ``{source}`` names the input's colour explicitly (:func:`tonemap_filter`): with a tag
#: missing, zscale fails with "no path between colorspaces" on every try.
TONEMAP_FILTER: Final = (
    "zscale={source}:t=linear:npl=100,format=gbrpf32le,zscale=p=bt709,"
    "tonemap=tonemap=mobius:desat=0,zscale=t=bt709:m=bt709:r=tv,format=yuv420p"
)

#: ffprobe's colour names (ITU-T H.273, as libavutil spells them) -> zscale's.
_ZSCALE_TRANSFER: Final = {
    "smpte2084": "smpte2084", "arib-std-b67": "arib-std-b67", "bt709": "709", "bt2020-10": "2020_10",
    "bt2020-12": "2020_12", "smpte170m": "601", "bt470bg": "601", "linear": "linear",
    "iec61966-2-1": "iec61966-2-1",
}  # fmt: skip
_ZSCALE_PRIMARIES: Final = {"bt2020": "2020", "bt709": "709", "smpte170m": "170m", "bt470bg": "470bg"}
_ZSCALE_MATRIX: Final = {
    "bt2020nc": "2020_ncl", "bt2020c": "2020_cl", "bt709": "709", "smpte170m": "170m", "bt470bg": "470bg",
}  # fmt: skip


def tonemap_filter(probe: VideoProbe) -> str:
    """:data:`TONEMAP_FILTER` with the source's colour named in full. A missing tag gets the
    value that goes with the others: transfer BT.709 (SDR); primaries BT.2020 for an HDR
    transfer, else BT.709; matrix BT.2020 non-constant with BT.2020 primaries, else BT.709."""
    transfer = _ZSCALE_TRANSFER.get(probe.color_transfer or "", "709")
    hdr = transfer in ("smpte2084", "arib-std-b67")
    primaries = _ZSCALE_PRIMARIES.get(probe.color_primaries or "", "2020" if hdr else "709")
    matrix = _ZSCALE_MATRIX.get(probe.color_space or "", "2020_ncl" if primaries == "2020" else "709")
    colour_range = "full" if probe.color_range == "pc" else "limited"
    # Named on the way in and kept on the way out (p, m): otherwise frames after the first
    # leave the first zscale with "unknown" primaries and the next one finds no path.
    source = f"tin={transfer}:pin={primaries}:min={matrix}:rin={colour_range}:p={primaries}:m={matrix}"
    return TONEMAP_FILTER.format(source=source)


#: Largest error allowed between an output's duration and the source's, seconds.
DURATION_TOLERANCE_S: Final = 0.1

#: The frame rate assumed when ffprobe neither counted nor declared one (a document without
#: ``-count_packets``), frames per second: the speed factor's reference rate.
REFERENCE_FPS: Final = 30

STDERR_TAIL_BYTES: Final = 8 * 1024


# --- probe ---------------------------------------------------------------------------------

#: Leading bytes of text formats that name other files or URLs: playlists, manifests and
#: scripts posing as video. They are refused before ffprobe runs, whatever ffmpeg version
#: would make of them (5.1 opens the HLS segments it lists; 6+ refuses an HLS playlist
#: without an ``.m3u8`` name as "Invalid data").
PLAYLIST_SIGNATURES: Final = (
    (b"#EXTM3U", "an HLS/M3U playlist"),
    (b"#EXT-X-", "an HLS playlist"),
    (b"ffconcat version", "an ffmpeg concat script"),
    (b"<MPD", "a DASH manifest"),
    (b"[playlist]", "a PLS playlist"),
    (b"<ASX", "an ASX playlist"),
    (b"#EXTINF", "an M3U playlist"),
)


def playlist_problem(head: bytes) -> PermanentFailure | None:
    """``unsupported_container`` when ``head`` (the first bytes of a file) is a playlist,
    manifest or script that names other files, else ``None``. Leading whitespace, a UTF-8
    byte-order mark and an XML declaration are skipped."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"<?xml"):
        text = text[text.find(b"?>") + 2 :].lstrip() if b"?>" in text else text
    for signature, kind in PLAYLIST_SIGNATURES:
        if text[: len(signature)].upper() == signature.upper():
            return PermanentFailure(UNSUPPORTED_CONTAINER, f"{kind}, not a media file")
    return None


@dataclass(frozen=True)
class VideoProbe:
    """What ffprobe found in an original, reduced to what the pipeline decides on.

    Attributes
    ----------
    format_name: the demuxer's name list (``mov,mp4,m4a,3gp,3g2,mj2``).
    duration_s: container duration, seconds.
    codec: the first video stream's codec (``h264``).
    coded_width, coded_height: stored frame size, pixels.
    frames: the video stream's frames the demuxer delivers, each decoded once
        (:func:`stream_frames`: counted packets, or the stored count).
    rotation: clockwise degrees the display matrix turns the picture (0, 90, 180, 270).
    pix_fmt: pixel format (``yuv420p10le``); bit_depth: bits per component.
    color_transfer, color_primaries, color_space, color_range: as ffprobe names them
        (``arib-std-b67``, ``bt2020``, ``bt2020nc``, ``tv``).
    audio_codec: the first audio stream's codec, or ``None`` without audio.
    stream_index: the video stream's index in the file (cover art may come before it).
    sar: sample (pixel) aspect ratio as (num, den); (1, 1) for square pixels or unknown.
    video_duration_s: the video stream's own duration, seconds, when it declares one (an
        audio track may run on after the video ends).
    start_s: the container's start time, seconds (ffprobe's ``format.start_time``; 0 when
        absent): what ffmpeg's input ``-ss`` counts from (``fftools/ffmpeg_demux.c`` adds it
        to the seek position), so a time ffprobe lists is ``start_s`` after its ``-ss``.
    """

    format_name: str
    duration_s: float
    codec: str
    coded_width: int
    coded_height: int
    frames: int
    rotation: int = 0
    pix_fmt: str = "yuv420p"
    bit_depth: int = 8
    color_transfer: str | None = None
    color_primaries: str | None = None
    color_space: str | None = None
    color_range: str | None = None
    audio_codec: str | None = None
    stream_index: int = 0
    sar: tuple[int, int] = (1, 1)
    video_duration_s: float | None = None
    start_s: float = 0.0

    @property
    def display_size(self) -> tuple[int, int]:
        """(width, height) of the upright picture in square pixels: the width stretched by the
        pixel aspect ratio (anamorphic PAL 720x576 at 16:15 shows 768x576), then a quarter
        turn swaps the sides."""
        num, den = self.sar
        width = max(1, (self.coded_width * num * 2 + den) // (2 * den))
        if self.rotation in (90, 270):
            return self.coded_height, width
        return width, self.coded_height

    @property
    def frame_rate_fps(self) -> float:
        """The average frame rate over the whole duration, frames per second (:attr:`frames`
        over :attr:`duration_s`): the rate that decides the work, whatever the header says."""
        return self.frames / self.duration_s

    @property
    def video_rate_fps(self) -> float:
        """Frames per second of the video stream's own duration (the container's when the
        stream declares none, or one longer than the container's): the rate a decoder has to
        keep up with, which an audio track running on after the video cannot dilute."""
        own = self.video_duration_s
        return self.frames / (own if own is not None and 0 < own <= self.duration_s else self.duration_s)

    @property
    def has_audio(self) -> bool:
        """Whether the original has an audio stream."""
        return self.audio_codec is not None

    @property
    def hdr(self) -> bool:
        """Whether the picture is HDR (PQ or HLG transfer): it must be tone-mapped."""
        return self.color_transfer in HDR_TRANSFERS

    @property
    def needs_tonemap(self) -> bool:
        """HDR or BT.2020 wide gamut: tone-mapped to BT.709. (Any source, 10-bit included, is
        then reduced to 8-bit 4:2:0; a 10-bit BT.709 source needs no more than that.)"""
        return self.hdr or self.color_primaries == "bt2020"


def _sar(stream: dict[str, Any]) -> tuple[int, int]:
    """The stream's sample aspect ratio (``"64:45"``); (1, 1) when absent, unknown (``0:1``) or absurd."""
    match = re.fullmatch(r"(\d+):(\d+)", str(stream.get("sample_aspect_ratio") or ""))
    if not match:
        return (1, 1)
    num, den = int(match.group(1)), int(match.group(2))
    if num <= 0 or den <= 0 or not 0.1 <= num / den <= 10:
        return (1, 1)
    return (num, den)


def _bit_depth(pix_fmt: str) -> int:
    match = re.search(r"p(\d{2})(le|be)$", pix_fmt)
    return int(match.group(1)) if match else 8


def _rotation(stream: dict[str, Any]) -> int:
    """Clockwise rotation in degrees from a stream's display matrix (or legacy ``rotate`` tag).

    ffprobe reports the display matrix's rotation counter-clockwise (``-90`` for a phone
    held upright), so the picture is turned by ``-rotation`` degrees.
    """
    for side in stream.get("side_data_list") or []:
        if "rotation" in side:
            return int(-float(side["rotation"])) % 360
    tag = (stream.get("tags") or {}).get("rotate")
    if tag is not None:
        try:
            return int(float(tag)) % 360
        except ValueError:
            return 0
    return 0


def _float(value: Any) -> float | None:
    """A finite number from ffprobe (``"2.000000"``), else ``None`` (``N/A``, ``nan``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _seconds(value: Any) -> float | None:
    """A positive finite number of seconds from ffprobe (``"2.000000"``), else ``None`` (``N/A``)."""
    seconds = _float(value)
    return seconds if seconds is not None and seconds > 0 else None


def _number(value: Any) -> float:
    """A finite number from ffprobe, 0.0 for ``N/A`` or nothing."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _count(value: Any) -> int:
    """A non-negative count from ffprobe (``"1800"``), 0 for ``N/A``, nothing or nonsense."""
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _rate(value: Any) -> float:
    """A frame rate from ffprobe's ``"num/den"`` (``"30000/1001"``), frames per second; 0.0 when
    unknown (``"0/0"``) or not a fraction."""
    match = re.fullmatch(r"(\d+)/(\d+)", str(value or ""))
    if not match or int(match.group(2)) == 0:
        return 0.0
    return int(match.group(1)) / int(match.group(2))


def stream_frames(stream: dict[str, Any], duration_s: float) -> int:
    """How many frames of ``stream`` will be decoded: the upper of ffprobe's counted packets
    (``nb_read_packets``, from ``-count_packets``: what the demuxer really delivers) and the
    container's stored count (``nb_frames``: the MP4 sample table), at least 1.

    Without either (a document probed without ``-count_packets``, which :func:`ffprobe_argv`
    always passes), the declared ``avg_frame_rate`` over ``duration_s``, else
    :data:`REFERENCE_FPS`. ``r_frame_rate`` is never used: it is the timestamp grid, not a
    rate (the module's docstring), and would call a 30 fps phone clip 90,000 fps.
    """
    counted = max(_count(stream.get("nb_read_packets")), _count(stream.get("nb_frames")))
    if counted:
        return counted
    declared = _rate(stream.get("avg_frame_rate")) or REFERENCE_FPS
    return max(1, math.ceil(declared * duration_s))


def media_duration_s(fmt: dict[str, Any], streams: list[dict[str, Any]]) -> float | None:
    """How long the media plays, seconds, or ``None`` when nothing says.

    From the earliest start to the latest end of the given streams whose durations are known
    (MP4/MOV track durations; ffprobe 5.1 and 6 disagree on a format duration taken from
    ``mvhd``), else
    the container's duration less its start time (Matroska stores the end time: a file whose
    timestamps start at 5 s and run 3 s says 8 s).
    """
    spans = []
    for stream in streams:
        length = _seconds(stream.get("duration"))
        if length is not None:
            start = _number(stream.get("start_time"))
            spans.append((start, start + length))
    if spans:  # from the earliest start to the latest end (audio may start after the video)
        return max(end for _, end in spans) - min(start for start, _ in spans)
    duration = _seconds(fmt.get("duration"))
    if duration is None:
        return None
    start = _seconds(fmt.get("start_time")) or 0.0
    return duration - start if start < duration else duration


def packets_end_s(csv_text: str) -> float | None:
    """Duration from ffprobe's ``-show_entries packet=pts_time,duration_time -of csv=p=0``
    lines: the last packet's end less the first packet's start, seconds; ``None`` without
    timed packets. For files that store no duration at all (a WebM that a browser's
    MediaRecorder or a live encoder wrote: no ``Duration`` element)."""
    first, last = math.inf, -math.inf
    for line in csv_text.splitlines():
        fields = line.strip().split(",")
        try:
            pts = float(fields[0])
        except (ValueError, IndexError):
            continue
        if not math.isfinite(pts):
            continue
        length = _seconds(fields[1]) if len(fields) > 1 else None
        first, last = min(first, pts), max(last, pts + (length or 0.0))
    return last - first if last > first else None


def parse_probe(document: dict[str, Any], *, packets_duration_s: float | None = None) -> VideoProbe:
    """Turn ffprobe's ``-show_format -show_streams -of json`` document into a :class:`VideoProbe`.

    ``packets_duration_s`` (from :func:`packets_end_s`) is used when neither the streams nor
    the container give a duration.

    Raises
    ------
    PermanentFailure
        ``unsupported_container`` when the demuxer is not allow-listed;
        ``no_video_stream`` when no video stream (cover art excluded) is present;
        ``unsupported_codec`` for a video codec outside :data:`ALLOWED_VIDEO_CODECS`;
        ``invalid_media`` when the duration or frame size is missing or absurd.
    """
    fmt = document.get("format") or {}
    format_name = str(fmt.get("format_name") or "")
    if not format_name or not set(format_name.split(",")) <= set(ALLOWED_DEMUXERS):
        raise PermanentFailure(UNSUPPORTED_CONTAINER, f"container {format_name or 'unknown'} is not accepted")
    streams = document.get("streams") or []
    videos = [
        s for s in streams if s.get("codec_type") == "video" and not (s.get("disposition") or {}).get("attached_pic")
    ]
    audios = [s for s in streams if s.get("codec_type") == "audio"]
    if not videos:
        raise PermanentFailure(NO_VIDEO_STREAM, f"{len(streams)} streams, none of them video")
    video = videos[0]
    codec = str(video.get("codec_name") or "unknown")
    if codec not in ALLOWED_VIDEO_CODECS:
        raise PermanentFailure(UNSUPPORTED_CODEC, f"video codec {codec} is not accepted")
    try:
        width, height = int(video.get("width") or 0), int(video.get("height") or 0)
    except (TypeError, ValueError) as exc:
        raise PermanentFailure(INVALID_MEDIA, f"unreadable frame size: {exc}") from exc
    duration = media_duration_s(fmt, [video, *audios[:1]]) or packets_duration_s
    if duration is None:
        raise PermanentFailure(INVALID_MEDIA, "no duration: neither the container nor its packets give one")
    if width <= 0 or height <= 0:
        raise PermanentFailure(INVALID_MEDIA, f"frame size {width}x{height}")
    pix_fmt = str(video.get("pix_fmt") or "yuv420p")
    return VideoProbe(
        format_name=format_name,
        duration_s=duration,
        codec=codec,
        coded_width=width,
        coded_height=height,
        frames=stream_frames(video, duration),
        rotation=_rotation(video),
        pix_fmt=pix_fmt,
        bit_depth=_bit_depth(pix_fmt),
        color_transfer=video.get("color_transfer"),
        color_primaries=video.get("color_primaries"),
        color_space=video.get("color_space"),
        color_range=video.get("color_range"),
        audio_codec=str(audios[0].get("codec_name")) if audios else None,
        stream_index=int(video.get("index") or 0),
        sar=_sar(video),
        video_duration_s=_seconds(video.get("duration")),
        start_s=_finite(fmt.get("start_time")),
    )


# --- plan ----------------------------------------------------------------------------------


def scaled_width(display_width: int, display_height: int, height_px: int) -> int:
    """Width ``scale=-2:height_px`` gives for a ``display_width`` x ``display_height`` picture, pixels.

    ``av_rescale(h, w, ih * 2) * 2``, rounding half away from zero; at least 2.
    """
    den = display_height * 2
    return max(2, (height_px * display_width * 2 + den) // (2 * den) * 2)


@dataclass(frozen=True)
class PlannedRendition:
    """One rendition to encode: ``width`` x ``height`` pixels with ``rung``'s settings."""

    name: str
    rung: VideoRung
    width: int
    height: int


@dataclass(frozen=True)
class RenditionPlan:
    """The renditions of one original, the rungs skipped, and the poster's size and time.

    Attributes
    ----------
    fps_cap: frames per second every rendition is limited to (the recipe's ``max_fps``, when
        the source's average rate is above it), or ``None`` when the source's frames are kept.
    frames_out: the most frames any one rendition can get: the source's frames, or with a cap
        the cap's frames over :func:`output_limit_s`; what the budget counts as encoded.
    """

    renditions: tuple[PlannedRendition, ...]
    skipped: tuple[str, ...]
    poster_size: tuple[int, int]
    poster_at_s: float
    fps_cap: int | None
    frames_out: int


#: Largest frame of each H.264 level, in 16x16 macroblocks (ITU-T H.264 Annex A, table A-1,
#: MaxFS); no side may exceed sqrt(8 x MaxFS) macroblocks (A.3.1 item f).
LEVEL_MAX_FRAME_MBS: Final = {"3.1": 3600, "4.0": 8192, "4.1": 8192, "4.2": 8704}


def fit_level(width: int, height: int, level: str) -> tuple[int, int]:
    """The largest even size at most ``width`` x ``height``, same shape, that ``level`` allows,
    pixels (a 9000x16 panorama at level 4.0 becomes 4096x6)."""
    max_mbs = LEVEL_MAX_FRAME_MBS[level]
    max_side = math.isqrt(8 * max_mbs) * 16
    scale = min(1.0, max_side / width, max_side / height)
    while True:
        w, h = max(2, int(width * scale) // 2 * 2), max(2, int(height * scale) // 2 * 2)
        if math.ceil(w / 16) * math.ceil(h / 16) <= max_mbs or (w, h) == (2, 2):
            return w, h
        scale *= 0.98


def plan_renditions(probe: VideoProbe, params: VideoRenditionsParams) -> RenditionPlan:
    """Decide which rungs to encode at which size, and where to take the poster frame.

    A rung taller than the upright source is skipped (never upscaled). When every rung is,
    one rendition named ``params.source_rendition`` is made at the source's display height
    rounded down to even (at least 2), with the smallest rung's settings, so every video
    gets one playable H.264 rendition. A size over the recipe's H.264 level (a panorama
    wider than 4096 px at level 4.0) is shrunk to fit it (:func:`fit_level`).

    A source whose average frame rate (:attr:`VideoProbe.frame_rate_fps`, from its counted
    frames) is above the recipe's ``max_fps`` is capped to ``max_fps`` (:func:`output_frames`).
    """
    width, height = probe.display_size
    planned, skipped = [], []
    for rung in params.rungs:
        if rung.height_px > height:
            skipped.append(rung.name)
            continue
        planned.append(PlannedRendition(rung.name, rung, scaled_width(width, height, rung.height_px), rung.height_px))
    if not planned:
        even = max(2, height // 2 * 2)
        rung = min(params.rungs, key=lambda r: r.height_px)
        # Never wider than the source (a 1000x1 strip becomes 1000x2, not 2000x2).
        source_width = min(scaled_width(width, height, even), max(2, width // 2 * 2))
        planned.append(PlannedRendition(params.source_rendition, rung, source_width, even))
    level = params.encoding.level
    planned = [
        dataclasses.replace(p, width=w, height=h) for p in planned for w, h in [fit_level(p.width, p.height, level)]
    ]
    poster = fit_within(width, height, params.poster.box_px)
    fps_cap, frames_out = output_frames(probe, params.encoding.max_fps)
    return RenditionPlan(
        renditions=tuple(planned),
        skipped=tuple(skipped),
        poster_size=poster,
        poster_at_s=round(probe.duration_s * params.poster.at_fraction, 3),
        fps_cap=fps_cap,
        frames_out=frames_out,
    )


def output_frames(probe: VideoProbe, max_fps: int | None) -> tuple[int | None, int]:
    """(cap, frames): the frame rate the renditions are capped to and the most frames each
    can get.

    Without ``max_fps``, or for a source whose average rate is at most ``max_fps``: no cap
    (every frame is kept, variable rate stays variable) and the source's frames. Above it:
    ``max_fps``, and ``ceil(max_fps x output_limit_s) + 1`` frames (ffmpeg's ``fps`` filter
    emits a frame per 1/max_fps s, duplicating one across a gap, up to the ``-t`` cut).
    """
    if max_fps is None or probe.frame_rate_fps <= max_fps:
        return None, probe.frames
    return max_fps, math.ceil(max_fps * output_limit_s(probe)) + 1


# --- ffmpeg argv ---------------------------------------------------------------------------


#: Options every ffmpeg and ffprobe run starts with: no stdin, no banner, and the input
#: confined to the allow-listed demuxers on a local file.
def _input_guard(source: str) -> list[str]:
    guard = ["-format_whitelist", FORMAT_WHITELIST, "-protocol_whitelist", input_protocols(source)]
    if input_protocols(source) != PROTOCOL_WHITELIST:  # a presigned URL: a dropped connection resumes
        guard += [*_RECONNECT]
    return guard


#: ffmpeg's http options for a presigned URL: a connection dropped mid-read is opened again
#: at the offset it reached, a few times (ffmpeg's protocols documentation, "http":
#: ``reconnect``, ``reconnect_on_network_error``, ``reconnect_delay_max``); what still fails
#: is a transient failure of the job (:func:`read_problem`), never a short output committed.
_RECONNECT: Final = ("-reconnect", "1", "-reconnect_on_network_error", "1", "-reconnect_delay_max", "4")

#: What ffmpeg prints when reading its input failed part-way -- a network read through a
#: presigned URL -- even when it exits 0 with what it had read.
READ_ERRORS: Final = re.compile(
    r"Error during demuxing|Input/output error|Connection reset|Connection timed out|"
    r"Stream ends prematurely|Server returned 5\d\d|Failed to reconnect"
)


def read_problem(stderr_tail: str) -> str | None:
    """The line of ``stderr_tail`` saying that reading a remote input failed (a read cut
    short: :data:`READ_ERRORS`), or ``None``. Such a run's outputs are short: transient."""
    match = READ_ERRORS.search(stderr_tail)
    if match is None:
        return None
    start = stderr_tail.rfind("\n", 0, match.start()) + 1
    end = stderr_tail.find("\n", match.end())
    return stderr_tail[start : end if end >= 0 else None].strip()


def input_protocols(source: str) -> str:
    """The ``-protocol_whitelist`` for reading ``source``: :data:`PROTOCOL_WHITELIST` (the
    local file) for a path; for a presigned URL of the original (a split video's part reads
    only its range: :meth:`~mediajobs.service_layer.ports.ObjectStore.presigned_get`),
    exactly that URL's scheme and what it rides on -- ``https,tls,tcp`` (``http,tcp`` for
    the embedded S3) -- and nothing else: no ``file``, ``concat``, ``subfile``, ``data`` or
    playlist protocol (ffmpeg's protocols documentation: https is http over tls over tcp).

    Raises
    ------
    ValueError
        For a URL of any other scheme.
    """
    scheme = source.split("://", 1)[0].lower() if "://" in source else ""
    if not scheme:
        return PROTOCOL_WHITELIST
    if scheme == "https":
        return "https,tls,tcp"
    if scheme == "http":
        return "http,tcp"
    raise ValueError(f"not a source ffmpeg may read: {scheme}://")


def ffprobe_argv(ffprobe: str, source: str) -> list[str]:
    """argv to probe ``source`` (a path in the work folder) as JSON; never a shell string.

    ``-count_packets`` reads every packet (no decoding) and gives each stream its
    ``nb_read_packets``: the frames :func:`stream_frames` counts.
    """
    return [
        ffprobe, "-hide_banner", "-v", "error", *_input_guard(source),
        "-show_format", "-show_streams", "-count_packets", "-of", "json", "-i", source,
    ]  # fmt: skip


def ffprobe_packets_argv(ffprobe: str, source: str) -> list[str]:
    """argv listing every packet's time and length as CSV (for :func:`packets_end_s`)."""
    return [
        ffprobe, "-hide_banner", "-v", "error", *_input_guard(source),
        "-show_entries", "packet=pts_time,duration_time", "-of", "csv=p=0", "-i", source,
    ]  # fmt: skip


def keyframes_argv(ffprobe: str, source: str, stream_index: int) -> list[str]:
    """argv listing the packets of the stream ``stream_index`` (the probe's
    :attr:`VideoProbe.stream_index`: cover art may come first, and ``v:0`` would be it) as
    ``pts_time,flags`` CSV lines: demuxed, not decoded (a ``K`` in the flags marks a
    keyframe), with the input guard of every run (for :func:`parse_keyframes`; the segment
    plan's input, :mod:`mediajobs.domain.segments`)."""
    return [
        ffprobe, "-hide_banner", "-v", "error", *_input_guard(source), "-select_streams", str(int(stream_index)),
        "-show_entries", "packet=pts_time,flags", "-of", "csv=p=0", "-i", source,
    ]  # fmt: skip


def parse_keyframes(csv_text: str, origin_s: float = 0.0) -> tuple[float, ...]:
    """Keyframe times, seconds after ``origin_s`` (the probe's :attr:`VideoProbe.start_s`,
    so that they are what ``-ss`` takes), ascending, from :func:`keyframes_argv`'s output
    (lines ``1.234000,K__``; lines without a time or a ``K`` are skipped)."""
    return _packet_times(csv_text, keyframes_only=True, origin_s=origin_s)


def parse_frame_times(csv_text: str, origin_s: float = 0.0) -> tuple[float, ...]:
    """Every packet's (frame's) time, seconds after ``origin_s`` (as :func:`parse_keyframes`),
    ascending and distinct, from :func:`keyframes_argv`'s output."""
    return _packet_times(csv_text, keyframes_only=False, origin_s=origin_s)


def plan_split(probe: VideoProbe, renditions: RenditionPlan, listing: str, segment_s: float) -> SegmentPlan:
    """The segment plan of ``probe``'s source (:func:`~mediajobs.domain.segments.plan_segments`)
    from ffprobe's packet listing (:func:`keyframes_argv`): its keyframes and frame times,
    read from the container's start, cut on the renditions' frame grid when they are capped.

    Raises
    ------
    ValueError
        As :func:`~mediajobs.domain.segments.plan_segments`.
    """
    return plan_segments(
        probe.duration_s,
        parse_keyframes(listing, probe.start_s),
        segment_s,
        frames_s=parse_frame_times(listing, probe.start_s),
        grid_s=1 / renditions.fps_cap if renditions.fps_cap else None,
    )


def _finite(value: Any) -> float:
    """A finite number of seconds from ffprobe (negative allowed), else 0."""
    seconds = _float(value)
    return 0.0 if seconds is None else seconds


def _packet_times(csv_text: str, *, keyframes_only: bool, origin_s: float) -> tuple[float, ...]:
    times = set()
    for line in csv_text.splitlines():
        fields = line.strip().split(",")
        if len(fields) < 2 or (keyframes_only and "K" not in fields[1]):
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            times.add(round(value - origin_s, 6))
    return tuple(sorted(times))


def ffprobe_output_argv(ffprobe: str, path: str) -> list[str]:
    """argv to probe one of our own outputs (MP4 or JPEG) for verification."""
    return [
        ffprobe, "-hide_banner", "-v", "error", "-format_whitelist", "mov,mp4,m4a,3gp,3g2,mj2,image2,jpeg_pipe",
        "-protocol_whitelist", PROTOCOL_WHITELIST, "-show_format", "-show_streams", "-of", "json", "-i", path,
    ]  # fmt: skip


def _picture_filter(probe: VideoProbe) -> str:
    """Filters that make an 8-bit BT.709 4:2:0 picture (rotation is ffmpeg's autorotate)."""
    return tonemap_filter(probe) if probe.needs_tonemap else "format=yuv420p"


def _colour_tags(probe: VideoProbe) -> list[str]:
    if not probe.needs_tonemap:
        return []
    return ["-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709", "-color_range", "tv"]


def output_limit_s(probe: VideoProbe) -> float:
    """Longest a rendition may run, seconds: the declared duration plus slack. A file whose
    container understates its length cannot make the encoder run past its budget; its
    renditions then fail verification (longer than the source), permanently."""
    return probe.duration_s + 5 * DURATION_TOLERANCE_S


def _ladder_filter(probe: VideoProbe, plan: RenditionPlan, first: str = "") -> str:
    """The filter graph of every encode of the ladder (the single pass's and each segment's):
    the probed stream (by index: cover art may come first), ``first`` (a ``trim``), the cap
    when there is one, the conversion to 8-bit BT.709 4:2:0, split, and each rendition's
    planned size in square pixels, labelled ``[v<i>]``."""
    n = len(plan.renditions)
    cap = f"fps={plan.fps_cap}," if plan.fps_cap else ""
    chains = [
        f"[0:{probe.stream_index}]{first}{cap}{_picture_filter(probe)},split={n}" + "".join(f"[s{i}]" for i in range(n))
    ]
    # The planned size, not scale=-2:H: for a strip thinner than 1:180, -2 gives width 0.
    chains += [f"[s{i}]scale={r.width}:{r.height},setsar=1[v{i}]" for i, r in enumerate(plan.renditions)]
    return ";".join(chains)


def _video_encoding(enc: VideoEncoding, rung: VideoRung, probe: VideoProbe, *, closed_gop: bool = False) -> list[str]:
    """The video encoder's options of one rung, the same in the single pass and in every
    segment (``closed_gop`` says libx264's ``open-gop=0``, its default, explicitly)."""
    args = ["-c:v", enc.codec, "-preset", enc.preset, "-profile:v", enc.profile, "-level:v", enc.level]
    if closed_gop:
        args += ["-x264-params", "open-gop=0"]
    # Variable frame rate stays variable: a constant output rate would duplicate frames to
    # fill gaps (a 3-frame file declaring 25 minutes became 37,000 frames per rendition).
    # Only a source above the recipe's max_fps becomes constant, at the cap (fps filter).
    args += ["-fps_mode", "vfr", "-pix_fmt", enc.pix_fmt, "-crf", str(rung.crf)]
    args += ["-maxrate", f"{rung.maxrate_kbps}k", "-bufsize", f"{rung.bufsize_kbps}k"]
    return args + _colour_tags(probe)


def renditions_argv(
    ffmpeg: str, source: str, probe: VideoProbe, plan: RenditionPlan, params: VideoRenditionsParams, out_dir: str
) -> list[str]:
    """argv that decodes ``source`` once and encodes every planned rendition (``split``).

    The probed video stream (by index: cover art may come first) is decoded once, made upright
    (ffmpeg's autorotate), cut after its counted ``probe.frames`` (``trim=end_frame``: what
    :func:`output_limit_s` is to the duration, for frames), capped to ``plan.fps_cap`` frames
    per second when there is a cap (the ``fps`` filter, before the conversions, so that
    dropped frames are not converted), converted (:func:`tonemap_filter` or 8-bit 4:2:0),
    split, and scaled to each rendition's planned size in square pixels. Each output: libx264
    with the recipe's preset, profile, level, CRF and VBV; yuv420p; AAC from the first audio
    stream when there is one (``-map 0:a:0?``); no metadata or chapters copied (phones store
    the location in ``udta``); at most :func:`output_limit_s` long; ``+faststart`` puts the
    moov atom before mdat. Progress goes to stdout as ``key=value`` lines.

    The ``trim`` passes every frame of a file whose count is right (the outputs are the same
    bytes as without it); one whose count understates its frames cannot make the decoder and
    the encoders run past the budget: ffmpeg 7 stops decoding once the graph has its frames
    (2 s of 16x16 at 50,000 fps cut at 1,000 frames took 0.08 s), and the renditions, shorter
    than the source, fail verification, permanently. Not ``-frames:v``: with it ffmpeg 7 ends
    the whole output when the video ends, and a video whose audio runs on loses its audio.
    ``-fpsmax`` is not used for the cap: ffmpeg 7 refuses it with ``-fps_mode vfr`` ("One of
    -r/-fpsmax was specified together a non-CFR -vsync/-fps_mode"), and with a constant
    output rate it would fill a sparse file's gaps with duplicates.
    """
    enc = params.encoding
    argv = [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-loglevel", "error", "-progress", "pipe:1",
        *_input_guard(source), "-i", source,
        "-filter_complex", _ladder_filter(probe, plan, f"trim=end_frame={probe.frames},"),
    ]  # fmt: skip
    for i, r in enumerate(plan.renditions):
        argv += ["-map", f"[v{i}]", "-map", "0:a:0?", "-map_metadata", "-1", "-map_chapters", "-1"]
        argv += _video_encoding(enc, r.rung, probe)
        argv += ["-c:a", enc.audio_codec, "-b:a", f"{r.rung.audio_kbps}k"]
        argv += ["-t", f"{output_limit_s(probe):.3f}"]
        if enc.faststart:
            argv += ["-movflags", "+faststart"]
        argv += ["-f", "mp4", f"{out_dir}/{r.name}.mp4"]
    return argv


# --- segments: long videos encoded in parallel and joined (domain/segments.py) -------------

#: Demuxers the join reads: the concat demuxer over our own segment MP4s (listed by
#: :func:`join_list`, never a user's file) and the audio job's M4A.
JOIN_FORMAT_WHITELIST: Final = "concat,mov,mp4,m4a"
#: A path a join list may hold: relative, each component of letters, digits, ``_ . -`` and not
#: starting with a period: what the concat demuxer's ``-safe 1`` accepts (ffmpeg's
#: ``libavformat/concatdec.c``, ``safe_filename``), so no quote, newline or ``..`` either.
_SAFE_PATH: Final = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*$")


def segment_argv(
    ffmpeg: str,
    source: str,
    probe: VideoProbe,
    plan: RenditionPlan,
    params: VideoRenditionsParams,
    start_s: float,
    duration_s: float | None,
    out_dir: str,
) -> list[str]:
    """argv that encodes ``duration_s`` seconds of ``source`` from ``start_s`` (``None``: to
    its end, for the last segment, whose last frame may sit exactly at the declared
    duration), every planned rung, video only, into ``<out_dir>/<rung>.mp4``.

    ``-ss`` and ``-t`` are input options: ffmpeg seeks to the keyframe at or before
    ``start_s``, decodes from there and drops the frames before ``start_s`` (accurate seek,
    ffmpeg's default when transcoding), and stops at ``start_s + duration_s``: the segment
    holds the frames whose time is in ``[start, start + duration)``, its first at time 0.
    The picture chain and the encoder settings are :func:`renditions_argv`'s, the same in
    every segment; libx264 begins every output with an IDR frame and its GOPs are closed
    (``open-gop=0``, said explicitly), so the segments join without re-encoding
    (:func:`join_argv`). No audio (``-an``): one job encodes the whole track once
    (:func:`audio_argv`), so no boundary carries AAC priming samples."""
    argv = [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-loglevel", "error", "-progress", "pipe:1",
        *_input_guard(source), "-ss", f"{start_s:.6f}", *([] if duration_s is None else ["-t", f"{duration_s:.6f}"]),
        "-i", source, "-filter_complex", _ladder_filter(probe, plan),
    ]  # fmt: skip
    for i, r in enumerate(plan.renditions):
        argv += ["-map", f"[v{i}]", "-an", "-map_metadata", "-1", "-map_chapters", "-1"]
        argv += [
            *_video_encoding(params.encoding, r.rung, probe, closed_gop=True),
            "-f",
            "mp4",
            f"{out_dir}/{r.name}.mp4",
        ]
    return argv


def audio_argv(ffmpeg: str, source: str, plan: RenditionPlan, params: VideoRenditionsParams, out_dir: str) -> list[str]:
    """argv that encodes the first audio stream of ``source``, whole, once per rung at the
    rung's bitrate, into ``<out_dir>/<rung>.m4a`` (AAC, no video, no metadata): the one audio
    encode a segmented video has, so the joined renditions have one continuous track."""
    enc = params.encoding
    argv = [ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-loglevel", "error", *_input_guard(source), "-i", source]
    for r in plan.renditions:
        argv += ["-map", "0:a:0", "-vn", "-map_metadata", "-1", "-map_chapters", "-1"]
        argv += ["-c:a", enc.audio_codec, "-b:a", f"{r.rung.audio_kbps}k", "-f", "mp4", f"{out_dir}/{r.name}.m4a"]
    return argv


def join_list(segments: list[tuple[str, float]]) -> str:
    """The ffconcat script of one rung's segments: each file (a path of ours) with its planned
    duration, seconds, so that the concat demuxer starts segment ``k + 1`` exactly at segment
    ``k``'s planned end (the sum of the durations before it is its start on the source's
    timeline; the last segment runs to its own end).

    Raises
    ------
    ValueError
        If there is no segment, a path is not relative and plain (:data:`_SAFE_PATH`: what
        ``-safe 1`` accepts), or a duration is not a finite number of at least a microsecond.
    """
    if not segments:
        raise ValueError("a join needs at least one segment")
    lines = ["ffconcat version 1.0"]
    for i, (path, duration_s) in enumerate(segments):
        if not _SAFE_PATH.fullmatch(path):
            raise ValueError(f"not a path of ours: {path!r}")
        if not (math.isfinite(duration_s) and duration_s >= 1e-6):
            raise ValueError(f"a segment's duration must be at least a microsecond: {duration_s!r}")
        lines.append(f"file '{path}'")
        if i < len(segments) - 1:
            lines.append(f"duration {duration_s:.6f}")
    return "\n".join(lines) + "\n"


def join_argv(
    ffmpeg: str,
    list_path: str,
    audio_path: str | None,
    out_path: str,
    offset_s: float = 0.0,
    audio_offset_s: float = 0.0,
) -> list[str]:
    """argv that joins one rung's segments (:func:`join_list` at ``list_path``) without
    re-encoding, moved ``offset_s`` seconds later (the plan's video start: a video that
    starts after its audio keeps its place against it), muxes the audio job's track when
    there is one -- moved ``audio_offset_s`` later (an audio track that starts after the
    video keeps its place: the audio job's output starts at 0) -- and puts the moov first.

    The concat demuxer reads only the list's files (``-safe 1``: relative, plain paths; the
    local file protocol; :data:`JOIN_FORMAT_WHITELIST`).

    Raises
    ------
    ValueError
        If an offset is negative or not finite."""
    for offset in (offset_s, audio_offset_s):
        if not (math.isfinite(offset) and offset >= 0):
            raise ValueError(f"an offset must be a finite number of seconds, not negative: {offset!r}")
    argv = [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-loglevel", "error",
        "-format_whitelist", JOIN_FORMAT_WHITELIST, "-protocol_whitelist", PROTOCOL_WHITELIST,
        *(["-itsoffset", f"{offset_s:.6f}"] if offset_s else []), "-f", "concat", "-safe", "1", "-i", list_path,
    ]  # fmt: skip
    if audio_path is not None:
        argv += ["-format_whitelist", JOIN_FORMAT_WHITELIST, "-protocol_whitelist", PROTOCOL_WHITELIST]
        argv += [*(["-itsoffset", f"{audio_offset_s:.6f}"] if audio_offset_s else []), "-i", audio_path]
        argv += ["-map", "0:v:0", "-map", "1:a:0"]
    else:
        argv += ["-map", "0:v:0"]
    return [*argv, "-c", "copy", "-map_metadata", "-1", "-movflags", "+faststart", "-f", "mp4", out_path]


def poster_argv(
    ffmpeg: str, source: str, probe: VideoProbe, plan: RenditionPlan, params: VideoRenditionsParams, out_path: str
) -> list[str]:
    """argv for the poster: ``-ss`` before ``-i`` (seek by index: 0.2 s instead of 10 s on a
    10-minute file, measured with Debian ffmpeg 5.1), one display-oriented frame scaled to fit the box."""
    width, height = plan.poster_size
    return [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-loglevel", "error",
        *_input_guard(source), "-ss", f"{plan.poster_at_s:.3f}", "-i", source,
        "-map", f"0:{probe.stream_index}", "-frames:v", "1",
        "-vf", f"{_picture_filter(probe)},scale={width}:{height},setsar=1",
        "-map_metadata", "-1", "-q:v", str(params.poster.quality), "-update", "1", "-f", "image2", out_path,
    ]  # fmt: skip


def frame_at_s(probe: VideoProbe, at_fraction: float) -> float:
    """Where a frame taken at ``at_fraction`` of the duration is, seconds: the poster's time
    (:func:`plan_renditions` computes ``poster_at_s`` the same way)."""
    return round(probe.duration_s * at_fraction, 3)


def frame_argv(ffmpeg: str, source: str, probe: VideoProbe, at_s: float, size: tuple[int, int]) -> list[str]:
    """argv that writes one display-oriented frame at ``at_s`` seconds, scaled to ``size``
    (width, height in pixels), to stdout as raw ``rgb24``: ``width * height * 3`` bytes, rows
    top to bottom. The same input guard, seek (``-ss`` before ``-i``) and picture filters as
    :func:`poster_argv`; no file is written. Empty stdout: no frame at ``at_s``."""
    width, height = size
    return [
        ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-loglevel", "error",
        *_input_guard(source), "-ss", f"{at_s:.3f}", "-i", source,
        "-map", f"0:{probe.stream_index}", "-frames:v", "1",
        "-vf", f"{_picture_filter(probe)},scale={width}:{height},setsar=1,format=rgb24",
        "-map_metadata", "-1", "-f", "rawvideo", "pipe:1",
    ]  # fmt: skip


# --- progress ------------------------------------------------------------------------------


def progress_seconds(fields: dict[str, str]) -> float | None:
    """Seconds of output written, from one ``-progress`` block, or ``None`` when not known yet.

    ``out_time_us`` and ``out_time_ms`` are both microseconds; ``N/A`` before the first frame.
    """
    for name in ("out_time_us", "out_time_ms"):
        raw = fields.get(name, "")
        if raw.lstrip("-").isdigit():
            return max(0.0, int(raw) / 1_000_000)
    return None


# --- classification ------------------------------------------------------------------------

#: ffmpeg/ffprobe messages that mean the input can never succeed, in order: the first match
#: names the reason. The detail is the matched message. Anything else is transient.
CLASSIFICATION: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"(Format|Protocol) not on whitelist"), UNSUPPORTED_CONTAINER),
    (re.compile(r"Not detecting m3u8/hls with non standard extension"), UNSUPPORTED_CONTAINER),
    (re.compile(r"moov atom not found"), INVALID_MEDIA),
    (re.compile(r"EBML header parsing failed"), INVALID_MEDIA),
    (re.compile(r"partial file"), INVALID_MEDIA),
    (re.compile(r"Invalid data found when processing input"), INVALID_MEDIA),
    (re.compile(r"could not find codec parameters|Could not find codec parameters"), INVALID_MEDIA),
    (re.compile(r"Cannot determine format of input stream"), INVALID_MEDIA),
    (re.compile(r"no path between colorspaces"), INVALID_MEDIA),
    # ffprobe on a local file cut inside its header (a Matroska EBML header cut at 40 bytes).
    (re.compile(r"(?<=: )(End of file|Input/output error)$", re.MULTILINE), INVALID_MEDIA),
    (re.compile(r"Decoder \(codec [^)]*\) not found|[Uu]nsupported codec|Unknown decoder"), UNSUPPORTED_CODEC),
    (re.compile(r"Stream map '[^']*' matches no streams|does not contain any stream"), NO_VIDEO_STREAM),
)


def classify(stderr_tail: str) -> PermanentFailure | None:
    """The permanent failure an ffmpeg/ffprobe error message means, or ``None`` (transient).

    Only messages about the input are permanent; a crash, a kill, a full disk or an
    unknown message may pass and is retried until the attempts cap.
    """
    for pattern, reason in CLASSIFICATION:
        match = pattern.search(stderr_tail)
        if match:
            return PermanentFailure(reason, match.group(0))
    return None


# --- budget --------------------------------------------------------------------------------


#: The source the speed factor is measured on (``benchmarks/video.py``): 1080p at 30 fps.
REFERENCE_PIXELS: Final = 1920 * 1080

#: Share of a reference frame's work that decoding it takes, the rest being scaling and
#: encoding the ladder: decoding the benchmark's 60 s 1080p30 source alone took 13.1 s of
#: the job's 29.4 s here (0.45), rounded to a half.
DECODE_SHARE: Final = 0.5

#: What one frame costs whatever its size, decoded and encoded, as a fraction of a reference
#: frame's work (17 ms at speed factor 0.51): demuxing, the decoder's threads handing over
#: each frame, the filter graph, x264's per-frame work, the muxer. Measured on 2 vCPUs with
#: 16x16 at 50,000 fps (``benchmarks/video.py``, and bare ffmpeg): 37 to 64 us a frame
#: decoded and passed through the ``fps`` filter (0.0022 to 0.0038 of a reference frame; the
#: decoder's frame threads dominate, with more system time than user time), and 24 us more a
#: frame encoded (0.0014). Rounded up: an estimate that errs long refuses a pathological file
#: a little early; one that errs short burns invocations.
DECODE_FRAME_COST: Final = 0.004
ENCODE_FRAME_COST: Final = 0.0015

#: Least work per second of source, as a fraction of a reference second: the audio, the
#: process starts, the poster and the verification do not shrink with the picture.
MIN_WORK_PER_S: Final = 0.25

#: Least bytes one H.264 frame takes in an MP4, whatever the VBV allows: the NAL length and
#: header, a slice header and a skip run, its ``stsz`` and ``ctts`` entries. 24.8 bytes a frame
#: measured for 16x16 at 50,000 fps (2.48 MB for 2 s against a VBV budget of 0.2 MB).
FRAME_BYTES: Final = 32


#: Most frames a second of source may hold, averaged over the video stream's duration
#: (:attr:`VideoProbe.video_rate_fps`: an audio track running on cannot dilute it). Every
#: frame is decoded, whatever the ``max_fps`` cap keeps, and a frame's fixed cost
#: (:data:`DECODE_FRAME_COST`, 37-64 us here) does not shrink with its size: 20 s of 16x16
#: at 50,000 fps took 34-134 s to render for 1,231 frames kept. 5,000 keeps phones' and
#: action cameras' slow motion (240 fps, 960 fps) and case V10's 3,000 fps clip, and
#: bounds the per-frame part of the decode at about 0.7 s a second of source (speed factor
#: 1): a source above it is refused from its probe, ``too_many_frames``, before any
#: decoder starts.
MAX_SOURCE_FPS: Final = 5_000


@dataclass(frozen=True)
class Budget:
    """What a job may use.

    Attributes
    ----------
    speed_factor: seconds of work per second of a 1080p 30 fps source (both rungs and the
        poster, measured: see ``benchmarks/video.py``); :func:`estimated_seconds` scales it by
        the frames and pixels of the actual source.
    max_duration_s: longest accepted source, seconds.
    invocation_s: a whole invocation's time for the job (function timeout minus margin), seconds.
    free_bytes: free space where the outputs are written, bytes.
    capacity_bytes: the size of that disk (Lambda's ``EphemeralStorage``), bytes.
    """

    speed_factor: float
    max_duration_s: float
    invocation_s: float
    free_bytes: int
    capacity_bytes: int


def expected_output_bytes(probe: VideoProbe, plan: RenditionPlan) -> int:
    """Upper estimate of the renditions' size, bytes: every rung at its VBV cap plus audio for
    the duration, plus :data:`FRAME_BYTES` for each of its ``plan.frames_out`` frames (x264
    cannot make a frame smaller, so at thousands of frames a second the VBV cap is not a
    bound: 2 s of 16x16 at 50,000 fps took 2.48 MB against 0.2 MB of VBV), plus 1 MB."""
    kbps = sum(r.rung.maxrate_kbps + (r.rung.audio_kbps if probe.has_audio else 0) for r in plan.renditions)
    frames = len(plan.renditions) * plan.frames_out * FRAME_BYTES
    return int(kbps * 1000 / 8 * probe.duration_s) + frames + 1_000_000


def estimated_seconds(probe: VideoProbe, plan: RenditionPlan, speed_factor: float) -> float:
    """Estimated wall time of the job, seconds, at least 1 s.

    The work is counted in reference frames (a 1080p frame decoded and encoded to the ladder
    takes ``speed_factor / REFERENCE_FPS`` seconds): each of the source's ``probe.frames``
    is decoded, at :data:`DECODE_SHARE` of a reference frame scaled by its pixels plus
    :data:`DECODE_FRAME_COST`, and each of ``plan.frames_out`` is encoded, at the rest plus
    :data:`ENCODE_FRAME_COST`: tiny frames at huge rates are not free. 20 s of 16x16 at
    50,000 fps is about 187 s at speed factor 1 without a cap and 135 s capped at 60 fps,
    where duration x pixels said 5 s (measured: 60.4 s and 36.7 s at speed factor 0.513,
    estimated 96 s and 70 s). At least :data:`MIN_WORK_PER_S` of a reference second per
    second of source. For 1080p at 30 fps this is ``duration x speed_factor`` (plus 0.6 %).
    """
    width, height = probe.display_size
    scale = (width * height) / REFERENCE_PIXELS
    decode = probe.frames * (DECODE_SHARE * scale + DECODE_FRAME_COST)
    encode = plan.frames_out * ((1 - DECODE_SHARE) * scale + ENCODE_FRAME_COST)
    work_s = max(MIN_WORK_PER_S * probe.duration_s, (decode + encode) / REFERENCE_FPS)
    return max(1.0, speed_factor * work_s)


def check_budget(probe: VideoProbe, plan: RenditionPlan, budget: Budget) -> None:
    """Refuse a job that cannot fit, before any encoder starts.

    Raises
    ------
    PermanentFailure
        ``too_long`` when the source is longer than ``max_duration_s`` or its estimated time
        (:func:`estimated_seconds`: its frames, not only its seconds) exceeds a whole
        invocation; ``too_many_frames`` when it holds more than :data:`MAX_SOURCE_FPS`
        frames a second of source; ``too_large`` when twice the expected output exceeds the disk's whole size.
    TransientFailure
        When it fits the disk but not its free space now (another folder holds the rest).
    """
    if probe.duration_s > budget.max_duration_s:
        raise PermanentFailure(
            TOO_LONG, VIDEO_SECONDS.detail(f"{probe.duration_s:.1f} s", f"{budget.max_duration_s:.0f} s")
        )
    if probe.video_rate_fps > MAX_SOURCE_FPS:
        seconds = probe.frames / probe.video_rate_fps
        found = f"{probe.frames:,} frames in {seconds:.1f} s ({probe.video_rate_fps:,.0f} a second)"
        raise PermanentFailure(TOO_MANY_FRAMES, SOURCE_FPS.detail(found, f"{MAX_SOURCE_FPS:,} a second"))
    needed = estimated_seconds(probe, plan, budget.speed_factor)
    if needed > budget.invocation_s:
        frames = f"{probe.frames} frames to decode, {plan.frames_out} to encode per rendition"
        work = f"estimated {needed:.0f} s of work ({frames})"
        raise PermanentFailure(
            TOO_LONG, WORK_SECONDS.detail(work, f"the {budget.invocation_s:.0f} s an invocation allows")
        )
    space = 2 * expected_output_bytes(probe, plan)
    if space > budget.capacity_bytes:
        raise PermanentFailure(
            TOO_LARGE,
            DISK_BYTES.detail(f"outputs of up to {in_bytes(space)}", f"the disk's {in_bytes(budget.capacity_bytes)}"),
        )
    if space > budget.free_bytes:
        raise TransientFailure(f"outputs need up to {space} bytes, {budget.free_bytes} free now")


# --- verification --------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What one rendition must be: H.264 ``profile`` ``pix_fmt`` at ``width`` x ``height``,
    AAC when ``audio``, lasting ``duration_s`` (within :data:`DURATION_TOLERANCE_S`)."""

    width: int
    height: int
    duration_s: float
    audio: bool
    profile: str = "High"
    pix_fmt: str = "yuv420p"


def rendition_problems(document: dict[str, Any], expected: Expected, *, moov_first: bool) -> list[str]:
    """Differences between an output's ffprobe document and what was planned (empty when right)."""
    problems = []
    streams = document.get("streams") or []
    videos = [s for s in streams if s.get("codec_type") == "video"]
    audios = [s for s in streams if s.get("codec_type") == "audio"]
    if len(videos) != 1:
        return [f"{len(videos)} video streams"]
    v = videos[0]
    if v.get("codec_name") != "h264" or v.get("profile") != expected.profile:
        problems.append(f"video {v.get('codec_name')} {v.get('profile')}, not h264 {expected.profile}")
    if v.get("pix_fmt") != expected.pix_fmt:
        problems.append(f"pix_fmt {v.get('pix_fmt')}")
    if (v.get("width"), v.get("height")) != (expected.width, expected.height):
        problems.append(f"size {v.get('width')}x{v.get('height')}, planned {expected.width}x{expected.height}")
    if _rotation(v) != 0:
        problems.append(f"rotation {_rotation(v)} left on the output")
    want_audio = 1 if expected.audio else 0
    if len(audios) != want_audio or any(a.get("codec_name") != "aac" for a in audios):
        problems.append(f"audio {[a.get('codec_name') for a in audios]}, expected {'aac' if want_audio else 'none'}")
    duration = output_duration_s(document)
    if abs(duration - expected.duration_s) > DURATION_TOLERANCE_S:
        problems.append(f"duration {duration:.3f} s, source {expected.duration_s:.3f} s")
    if not moov_first:
        problems.append("moov atom after mdat")
    return problems


def output_duration_s(document: dict[str, Any]) -> float:
    """The container duration of an output's ffprobe document, seconds (0 when missing)."""
    try:
        return float((document.get("format") or {}).get("duration") or 0)
    except (TypeError, ValueError):
        return 0.0


def rendition_failure(
    name: str, document: dict[str, Any], expected: Expected, *, moov_first: bool
) -> PermanentFailure | None:
    """What is wrong with a rendition, or ``None``.

    When the only fault is an output shorter than the source, the source's streams end before
    the duration its container declares (a cut Matroska/WebM upload decodes without error up
    to the cut): ``invalid_media``. Any other fault is ``invalid_output`` naming it.
    """
    problems = rendition_problems(document, expected, moov_first=moov_first)
    if not problems:
        return None
    short = output_duration_s(document) < expected.duration_s - DURATION_TOLERANCE_S
    if short and len(problems) == 1:
        return PermanentFailure(
            INVALID_MEDIA,
            f"the streams end at {output_duration_s(document):.3f} s of the {expected.duration_s:.3f} s "
            "the container declares (truncated or damaged)",
        )
    return verification_failure(name, problems)


def video_duration_problem(
    output: dict[str, Any], source: dict[str, Any], stream_index: int, frame_s: float
) -> str | None:
    """Whether a joined rendition's video lasts as long as the source's video stream
    (``stream_index``), within ``frame_s`` (one frame, seconds); ``None`` when it does or a
    side does not say (a Matroska stream carries no duration of its own)."""

    def duration(document: dict[str, Any], index: int | None) -> float | None:
        streams = [x for x in document.get("streams") or [] if isinstance(x, dict)]
        stream = next(
            (x for x in streams if x.get("codec_type") == "video" and (index is None or x.get("index") == index)), None
        )
        try:
            value = float(stream["duration"]) if stream is not None else None
        except (KeyError, TypeError, ValueError):
            return None
        return value if value is not None and math.isfinite(value) else None

    joined, original = duration(output, None), duration(source, stream_index)
    if joined is None or original is None or abs(joined - original) <= frame_s:
        return None
    return f"video lasts {joined:.3f} s, the source's {original:.3f} s"


def av_alignment_problems(output: dict[str, Any], source: dict[str, Any], frame_s: float) -> list[str]:
    """Whether a joined rendition's audio starts and ends where its video does, as the
    source's do: the audio's start less the video's, and its end less the video's, may each
    differ from the source's by at most ``frame_s`` (one video frame, seconds). Both are
    ffprobe documents (``-show_streams``); a side without both streams, or without their
    times, is not compared (empty list)."""

    def edges(document: dict[str, Any]) -> tuple[float, float] | None:
        streams = [x for x in document.get("streams") or [] if isinstance(x, dict)]
        found: dict[str, tuple[float, float]] = {}
        for kind in ("video", "audio"):
            stream = next((x for x in streams if x.get("codec_type") == kind), None)
            if stream is None:
                return None
            try:
                start, length = float(stream["start_time"]), float(stream["duration"])
            except (KeyError, TypeError, ValueError):
                return None
            found[kind] = (start, start + length)
        (v_start, v_end), (a_start, a_end) = found["video"], found["audio"]
        return a_start - v_start, a_end - v_end

    out, src = edges(output), edges(source)
    if out is None or src is None:
        return []
    problems = []
    for what, joined, original in (("starts", out[0], src[0]), ("ends", out[1], src[1])):
        if abs(joined - original) > frame_s:
            problems.append(
                f"audio {what} {joined * 1000:+.1f} ms from the video, the source's {original * 1000:+.1f} ms"
            )
    return problems


def poster_problems(document: dict[str, Any], width: int, height: int) -> list[str]:
    """Differences between the poster's ffprobe document and its planned JPEG size."""
    streams = document.get("streams") or []
    if len(streams) != 1 or streams[0].get("codec_name") != "mjpeg":
        return [f"poster streams {[s.get('codec_name') for s in streams]}"]
    size = (streams[0].get("width"), streams[0].get("height"))
    return [] if size == (width, height) else [f"poster {size[0]}x{size[1]}, planned {width}x{height}"]


def verification_failure(name: str, problems: list[str]) -> PermanentFailure:
    """``invalid_output`` naming the output and what is wrong with it (deterministic: no retry)."""
    return PermanentFailure(INVALID_OUTPUT, f"{name}: " + "; ".join(problems))


# --- manifest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoDecisions:
    """What the video step decided for one original; recorded in the manifest's ``decisions``.

    Attributes
    ----------
    source_format: the demuxer (``mov,mp4,m4a,3gp,3g2,mj2``); source_codec: ``h264``, ``hevc`` ...
    source_width, source_height: coded frame size, pixels; rotation: degrees applied.
    display_width, display_height: the upright picture, pixels.
    duration_s: container duration, seconds; audio: whether renditions carry AAC.
    tonemapped: HDR / wide-gamut / 10-bit converted to 8-bit BT.709.
    renditions: names made; skipped: rungs taller than the source (never upscaled).
    poster_at_s: where the poster frame was taken, seconds.
    ffmpeg_version: first line of ``ffmpeg -version``.
    source_frames: the source's video frames (counted); fps_cap: the frame rate the renditions
        were capped to, or ``None`` when the source's frames were kept.
    """

    source_format: str
    source_codec: str
    source_width: int
    source_height: int
    rotation: int
    display_width: int
    display_height: int
    duration_s: float
    audio: bool
    tonemapped: bool
    renditions: tuple[str, ...]
    skipped: tuple[str, ...]
    poster_at_s: float
    ffmpeg_version: str = ""
    source_frames: int = 0
    fps_cap: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        data = asdict(self)
        data["renditions"], data["skipped"] = list(self.renditions), list(self.skipped)
        return data


def decisions_for(probe: VideoProbe, plan: RenditionPlan, ffmpeg_version: str) -> VideoDecisions:
    """The manifest's record of ``probe`` and ``plan``."""
    width, height = probe.display_size
    return VideoDecisions(
        source_format=probe.format_name,
        source_codec=probe.codec,
        source_width=probe.coded_width,
        source_height=probe.coded_height,
        rotation=probe.rotation,
        display_width=width,
        display_height=height,
        duration_s=probe.duration_s,
        audio=probe.has_audio,
        tonemapped=probe.needs_tonemap,
        renditions=tuple(r.name for r in plan.renditions),
        skipped=plan.skipped,
        poster_at_s=plan.poster_at_s,
        ffmpeg_version=ffmpeg_version,
        source_frames=probe.frames,
        fps_cap=plan.fps_cap,
    )
