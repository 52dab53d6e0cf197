"""The video cases V01-V10: small files made with ffmpeg from its lavfi sources,
each standing for a kind of upload that has broken real video pipelines.

Every maker runs ``tools.ffmpeg`` (an argv list, never a shell; stdin closed; a timeout) and
writes only into the folder it is given. The outputs are deterministic for one ffmpeg build:
fixed durations, ``+bitexact`` muxers and encoders, no metadata, one encoder and filter
thread (x264, x265 and libvpx output depends on the thread count), x265 without its thread
pool. Different ffmpeg builds (the layer's static 7.0.2, Debian's 5.1) give different bytes
with the same properties; the build stamp records the ffmpeg version.

ffmpeg 5.1 and 7.x differ in one option used here: the display matrix of V01 is set with
``-display_rotation`` (an input option since ffmpeg 6.0) or, before 6.0, with the
``rotate`` stream tag that ffmpeg 7 no longer reads; :func:`_rotation_args` picks one from
``ffmpeg -version``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from make_cases import Case, Tools

#: Wall-clock limit of one ffmpeg run, seconds (each takes about a second here).
FFMPEG_TIMEOUT_S = 120

#: Length of every generated clip but V05's, seconds (as the reference files).
CLIP_S = 2
#: V05's voice memo, seconds.
AUDIO_ONLY_S = 3
FRAME_RATE_FPS = 30
#: The canary is a 25 fps segment, as ffmpeg's HLS muxer would cut one from PAL material.
CANARY_FRAME_RATE_FPS = 25
AUDIO_RATE_HZ = 48_000
TONE_HZ = 440

#: Options that keep the files free of anything but the streams: no metadata carried, no
#: library versions or random ids in the container (Matroska UIDs, encoder strings).
BITEXACT = ("-map_metadata", "-1", "-fflags", "+bitexact", "-flags:v", "+bitexact", "-flags:a", "+bitexact")
#: H.264 as a phone or screen recorder writes it (x264 veryfast, CRF 30, High, yuv420p).
X264 = ("-c:v", "libx264", "-preset", "veryfast", "-crf", "30", "-pix_fmt", "yuv420p", "-threads", "1")


def _aac(bitrate_kbps: int) -> tuple[str, ...]:
    """Mono AAC-LC at ``bitrate_kbps``, 48 kHz (ffmpeg's native encoder)."""
    return ("-c:a", "aac", "-b:a", f"{bitrate_kbps}k", "-ac", "1", "-ar", str(AUDIO_RATE_HZ))


def _tone(duration_s: float) -> tuple[str, ...]:
    """A lavfi input: a mono sine tone of ``duration_s``."""
    return ("-f", "lavfi", "-i", f"sine=frequency={TONE_HZ}:sample_rate={AUDIO_RATE_HZ}:duration={duration_s}")


def _ffmpeg(tools: Tools | None, *args: str | Path) -> None:
    """Run ffmpeg with ``args`` (quiet, no stdin, one filter thread, overwriting).

    Raises
    ------
    RuntimeError
        If ffmpeg fails or outlives :data:`FFMPEG_TIMEOUT_S`; the message holds its stderr.
    """
    assert tools is not None, "a video maker needs ffmpeg"
    argv = [tools.ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-filter_threads", "1"]
    argv += [str(a) for a in args]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=False)  # noqa: S603
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"ffmpeg ran over {FFMPEG_TIMEOUT_S} s: {argv}") from exc
    if done.returncode != 0:
        raise RuntimeError(f"ffmpeg exited {done.returncode}: {argv}\n{done.stderr.decode(errors='replace')}")


def _libavformat_major(tools: Tools) -> int:
    """libavformat's major version from ``ffmpeg -version`` (59: ffmpeg 5.1, 61: 7.0).

    The library version, not ffmpeg's, because git builds call themselves ``N-66595-g...``.
    """
    done = subprocess.run(  # noqa: S603
        [tools.ffmpeg, "-hide_banner", "-version"], capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=True
    )
    found = re.search(r"^libavformat\s+(\d+)\.", done.stdout.decode(errors="replace"), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no libavformat version in `{tools.ffmpeg} -version`")
    return int(found.group(1))


def _rotation_args(tools: Tools, rotation_deg: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(input options, output options) of a stream copy that gives the video stream a display
    matrix of ``rotation_deg`` counter-clockwise (ffprobe's ``rotation``, no translation).

    ffmpeg >= 6.0 (libavformat 60) sets it with the input option ``-display_rotation``; ffmpeg
    5.x has none, and turns the output option ``-metadata:s:v rotate=N`` into a matrix that its
    ffprobe reports as ``rotation`` N (``rotate=270`` gives -90: checked with Debian's 5.1),
    on a stream copy only (an encoded stream gets none); ffmpeg 7 ignores that tag.
    """
    if _libavformat_major(tools) >= 60:
        return ("-display_rotation:v:0", str(rotation_deg)), ()
    return (), ("-metadata:s:v:0", f"rotate={rotation_deg % 360}")


def _top_level_boxes(data: bytes) -> list[tuple[str, int, int]]:
    """(type, offset, size) of the top-level ISO BMFF boxes of ``data``."""
    boxes, pos = [], 0
    while pos + 8 <= len(data):
        size, kind = int.from_bytes(data[pos : pos + 4], "big"), data[pos + 4 : pos + 8].decode("latin-1")
        if size == 1:
            size = int.from_bytes(data[pos + 8 : pos + 16], "big")
        elif size == 0:
            size = len(data) - pos
        if size < 8:
            raise ValueError(f"bad box size {size} at {pos}")
        boxes.append((kind, pos, size))
        pos += size
    return boxes


# --- V01 ---------------------------------------------------------------------------------

V01 = "V01_portrait_rotation.mp4"
#: Coded (landscape) frame, pixels; displayed it is 720x1280.
V01_CODED_W_PX, V01_CODED_H_PX = 1280, 720
V01_SQUARE_PX = 240
#: The display matrix: -90 (counter-clockwise), i.e. turn 90 degrees clockwise to show it.
V01_ROTATION_DEG = -90


def make_v01(folder: Path, tools: Tools | None) -> None:
    """A phone's portrait clip: 1280x720 H.264 frames + AAC, display matrix -90.

    Turned 90 degrees clockwise for display, the coded bottom-left corner becomes the top
    left: the red square is drawn there so that it shows top-left only when the matrix is
    applied once. A smaller white square (coded right of centre, displayed low in the middle)
    makes a mirrored or double-rotated picture tell itself apart from a correct one. Encoded
    first, then copied with the matrix (:func:`_rotation_args`: the one way both ffmpeg 5.1
    and 7 set it).
    """
    assert tools is not None
    before_input, after_output = _rotation_args(tools, V01_ROTATION_DEG)
    square = V01_SQUARE_PX
    picture = (
        f"color=c=0x264FA0:size={V01_CODED_W_PX}x{V01_CODED_H_PX}:rate={FRAME_RATE_FPS}:duration={CLIP_S},"
        f"drawbox=x=0:y={V01_CODED_H_PX - square}:w={square}:h={square}:color=0xDC1E1E:t=fill,"
        f"drawbox=x=900:y=300:w={square // 2}:h={square // 2}:color=white:t=fill"
    )
    upright = folder / f".{V01}.unrotated"
    try:
        _ffmpeg(
            tools, "-f", "lavfi", "-i", picture, *_tone(CLIP_S), "-t", str(CLIP_S),
            *X264, "-g", str(FRAME_RATE_FPS), *_aac(64), *BITEXACT, "-f", "mp4", upright,
        )  # fmt: skip
        _ffmpeg(
            tools, *before_input, "-i", upright, "-map", "0", "-c", "copy", *BITEXACT, *after_output,
            "-f", "mp4", folder / V01,
        )  # fmt: skip
    finally:
        upright.unlink(missing_ok=True)
    _check_rotation(tools, folder / V01, V01_ROTATION_DEG)


def _check_rotation(tools: Tools, path: Path, rotation_deg: int) -> None:
    """Fail the build, not a test later, if ``path``'s video stream lacks the display matrix.

    Raises
    ------
    RuntimeError
        If ffprobe reports another rotation (an ffmpeg build that ignored the option).
    """
    done = subprocess.run(  # noqa: S603
        [tools.ffprobe, "-v", "error", "-select_streams", "v:0", "-show_entries", "stream_side_data=rotation",
         "-of", "csv=p=0", str(path)],
        capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=True, text=True,
    )  # fmt: skip
    if done.stdout.split() != [str(rotation_deg)]:
        raise RuntimeError(f"{path.name}: rotation {done.stdout.strip()!r}, wanted {rotation_deg} ({tools.ffmpeg})")


# --- V02 ---------------------------------------------------------------------------------

V02 = "V02_odd_1279x721.webm"
V02_W_PX, V02_H_PX = 1279, 721
#: A screen recorder's target bitrate (kbit/s): about 120 KB for the clip.
V02_VIDEO_KBPS = 400
#: testsrc2 drawn in 4:4:4, then subsampled by the encoder's -pix_fmt: ffmpeg 7 rounds a
#: subsampled testsrc2 (or crop) down to even sizes, which would lose the odd 1279x721.
V02_PICTURE = f"testsrc2=size={V02_W_PX}x{V02_H_PX}:rate={FRAME_RATE_FPS}:duration={CLIP_S},format=yuv444p"


def make_v02(folder: Path, tools: Tools | None) -> None:
    """A browser screen recording: VP9 at the odd size 1279x721 + Opus, in WebM.

    VP9 codes odd sizes; libx264 with yuv420p does not, so a pipeline must round the
    renditions' sizes to even numbers itself. libvpx realtime at a target bitrate, as a
    browser's MediaRecorder encodes; one thread, no row threading.
    """
    _ffmpeg(
        tools, "-f", "lavfi", "-i", V02_PICTURE, *_tone(CLIP_S), "-t", str(CLIP_S),
        "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", f"{V02_VIDEO_KBPS}k",
        "-pix_fmt", "yuv420p", "-threads", "1", "-row-mt", "0", "-tile-columns", "0",
        "-c:a", "libopus", "-b:a", "64k", "-ac", "1", "-ar", str(AUDIO_RATE_HZ),
        *BITEXACT, "-f", "webm", folder / V02,
    )  # fmt: skip


# --- V04 ---------------------------------------------------------------------------------

V04 = "V04_no_audio.mp4"
V04_W_PX, V04_H_PX = 640, 360


def make_v04(folder: Path, tools: Tools | None) -> None:
    """A screen recording without any audio stream: 640x360 H.264 only, in MP4.

    360 px tall, so the 720p rung is skipped too (never upscaled).
    """
    _ffmpeg(
        tools, "-f", "lavfi", "-i", f"testsrc2=size={V04_W_PX}x{V04_H_PX}:rate={FRAME_RATE_FPS}:duration={CLIP_S}",
        "-t", str(CLIP_S), *X264, "-an", *BITEXACT, "-f", "mp4", folder / V04,
    )  # fmt: skip


# --- V05 ---------------------------------------------------------------------------------

V05 = "V05_audio_only.mp4"


def make_v05(folder: Path, tools: Tools | None) -> None:
    """A voice memo exported as .mp4: one AAC track, no video track at all (3 s)."""
    _ffmpeg(
        tools, *_tone(AUDIO_ONLY_S), "-t", str(AUDIO_ONLY_S), "-vn", *_aac(96), *BITEXACT, "-f", "mp4", folder / V05
    )


# --- V06 ---------------------------------------------------------------------------------

V06 = "V06_hdr_hlg_10bit.mov"
V06_W_PX, V06_H_PX = 1280, 720
#: SDR BT.709 bars -> BT.2020 primaries, HLG transfer, BT.2020 non-constant matrix, limited
#: range, through linear light at 100 nits nominal peak (zimg). The bars' source tags are
#: spelled out: lavfi tags only the matrix, and zscale needs all of them.
V06_TO_HLG = (
    "zscale=tin=bt709:pin=bt709:min=bt709:rin=tv:t=arib-std-b67:p=bt2020:m=bt2020nc:r=tv:npl=100,format=yuv420p10le"
)


def make_v06(folder: Path, tools: Tools | None) -> None:
    """An iPhone-style HDR clip: HEVC Main10 (hvc1) + AAC in .mov, BT.2020/HLG/bt2020nc.

    SMPTE RP 219 HD bars (``smptehdbars``: the 75 % bars between the grey side pillars) are
    converted to BT.2020 and HLG by zscale, so that a correct tone mapping back to BT.709
    gives saturated bars and a bare pix_fmt change visibly does not. The colour tags are
    written both in the HEVC VUI and in the MOV ``colr`` box. x265 ultrafast, CRF 26, without
    its thread pool (one frame thread, no wavefront threads): deterministic.
    """
    _ffmpeg(
        tools, "-f", "lavfi", "-i", f"smptehdbars=size={V06_W_PX}x{V06_H_PX}:rate={FRAME_RATE_FPS}:duration={CLIP_S}",
        *_tone(CLIP_S), "-t", str(CLIP_S), "-vf", V06_TO_HLG,
        "-c:v", "libx265", "-preset", "ultrafast", "-crf", "26", "-pix_fmt", "yuv420p10le", "-tag:v", "hvc1",
        "-x265-params", "pools=none:frame-threads=1:wpp=0:log-level=error",
        "-color_primaries", "bt2020", "-color_trc", "arib-std-b67", "-colorspace", "bt2020nc", "-color_range", "tv",
        *_aac(64), *BITEXACT, "-movflags", "+write_colr", "-f", "mov", folder / V06,
    )  # fmt: skip


# --- V08 ---------------------------------------------------------------------------------

V08 = "V08_moov_missing.mov"


def make_v08(folder: Path, tools: Tools | None) -> None:
    """A recording cut off before its index: a MOV of ftyp + wide + mdat, no moov.

    ffmpeg writes a MOV's moov after the samples (no ``+faststart``); keeping only the bytes
    before the moov leaves every sample in place and a complete last box (the mdat ends at
    the end of the file), so the cut is found only by the missing index: ffprobe's "moov
    atom not found", not a box running past the end.
    """
    whole = folder / f".{V08}.whole"
    try:
        _ffmpeg(
            tools, "-f", "lavfi", "-i", f"testsrc2=size=640x360:rate={FRAME_RATE_FPS}:duration={CLIP_S}",
            *_tone(CLIP_S), "-t", str(CLIP_S), *X264, *_aac(64), *BITEXACT, "-f", "mov", whole,
        )  # fmt: skip
        data = whole.read_bytes()
    finally:
        whole.unlink(missing_ok=True)
    boxes = _top_level_boxes(data)
    kinds = [kind for kind, _, _ in boxes]
    if kinds[-2:] != ["mdat", "moov"]:
        raise RuntimeError(f"expected the moov after the mdat, got boxes {kinds}")
    (folder / V08).write_bytes(data[: boxes[-1][1]])


# --- V09 ---------------------------------------------------------------------------------

V09_PLAYLIST = "V09_hls_playlist.mp4"
V09_SSRF = "V09_hls_ssrf.mp4"
V09_CANARY = "V09_canary_segment.ts"
#: Port 9 (discard) on the loopback: nothing listens, and a fetch attempt is the finding.
V09_SSRF_SEGMENT_URL = "http://127.0.0.1:9/segment0.ts"
V09_CANARY_W_PX, V09_CANARY_H_PX = 320, 240


def _hls_playlist(segment: str) -> bytes:
    """A minimal complete HLS media playlist of one 2 s segment, ``segment``."""
    lines = [
        "#EXTM3U",
        "#EXT-X-VERSION:3",
        f"#EXT-X-TARGETDURATION:{CLIP_S}",
        "#EXT-X-MEDIA-SEQUENCE:0",
        f"#EXTINF:{CLIP_S:.1f},",
        segment,
        "#EXT-X-ENDLIST",
    ]
    return ("\n".join(lines) + "\n").encode("ascii")


def make_v09(folder: Path, tools: Tools | None) -> None:
    """Two HLS playlists named .mp4 and the canary the first one points at.

    ``V09_hls_playlist.mp4`` names the sibling ``V09_canary_segment.ts`` (a local file read),
    ``V09_hls_ssrf.mp4`` a segment on the loopback (SSRF). The canary is an ordinary MPEG-TS,
    magenta 320x240 H.264 for 2 s: magenta in any output of a playlist job would show that
    the canary was read.
    """
    (folder / V09_PLAYLIST).write_bytes(_hls_playlist(V09_CANARY))
    (folder / V09_SSRF).write_bytes(_hls_playlist(V09_SSRF_SEGMENT_URL))
    size = f"{V09_CANARY_W_PX}x{V09_CANARY_H_PX}"
    _ffmpeg(
        tools, "-f", "lavfi", "-i", f"color=c=magenta:size={size}:rate={CANARY_FRAME_RATE_FPS}:duration={CLIP_S}",
        "-t", str(CLIP_S), *X264, *BITEXACT, "-f", "mpegts", folder / V09_CANARY,
    )  # fmt: skip


# --- V10 ---------------------------------------------------------------------------------

V10 = "V10_high_frame_rate_16x16.mp4"
V10_SIDE_PX = 16
#: Frames per second: thousands, as a screen or game capture tool or a broken muxer writes
#: (IOL0ol1/EmguFFmpeg#8 got a 14,336 fps MP4). 2 s of it is 6,000 frames in 150 KB.
V10_FRAME_RATE_FPS = 3000
#: web-video@2's max_fps: what the renditions of V10 must have.
V10_CAPPED_FPS = 60


def make_v10(folder: Path, tools: Tools | None) -> None:
    """2 s of 16x16 H.264 at 3,000 fps, no audio, in MP4: tiny frames at a huge rate.

    A budget of duration x pixels calls it nearly free (2 s of 256-pixel frames); the work is
    its 6,000 frames, each decoded, and each encoded unless the recipe caps the rate.
    ``testsrc`` changes every frame, so the encoder cannot skip them.
    """
    size = f"{V10_SIDE_PX}x{V10_SIDE_PX}"
    _ffmpeg(
        tools, "-f", "lavfi", "-i", f"testsrc=size={size}:rate={V10_FRAME_RATE_FPS}:duration={CLIP_S}",
        "-t", str(CLIP_S), *X264, "-an", *BITEXACT, "-f", "mp4", folder / V10,
    )  # fmt: skip


CASES: tuple[Case, ...] = (
    Case(
        id="V01",
        title="Phone portrait video: landscape-coded frames + display-matrix rotation -90",
        files=(V01,),
        make=make_v01,
        expected=(
            "Success. H.264 coded 1280x720 + AAC, 2.0 s, display matrix -90 (ffprobe rotation=-90; the "
            "pipeline's decision: rotate 90 clockwise, display 720x1280). 720p rendition 406x720 and 360p "
            "rendition 202x360 (scale=-2:H on the upright frame), AAC audio, no display matrix or rotate "
            "tag left (rotation 0). Red square top-left in the renditions and in the poster, which is "
            "720x1280 (taken at 0.2 s)."
        ),
        reason=None,
        source="rosenbjerg/FFMpegCore#509",
        needs_ffmpeg=True,
    ),
    Case(
        id="V02",
        title="Odd frame size 1279x721 (VP9/WebM browser screen recording)",
        files=(V02,),
        make=make_v02,
        expected=(
            "Success. 720p rendition 1278x720 and 360p rendition 638x360, H.264 High (not High 4:4:4), "
            "yuv420p, AAC audio present, duration within 0.1 s of the source's (about 2.0 s)."
        ),
        reason=None,
        source="GCRC/nunaliit#734",
        needs_ffmpeg=True,
    ),
    Case(
        id="V04",
        title="Video with no audio stream",
        files=(V04,),
        make=make_v04,
        expected=(
            "Success. 640x360 source: the 720p rung is skipped (never upscaled); the 360p rendition is "
            "640x360 with exactly 1 video stream (H.264) and 0 audio streams (no silent track invented)."
        ),
        reason=None,
        source="Chocobozzz/PeerTube#4691",
        needs_ffmpeg=True,
    ),
    Case(
        id="V05",
        title="Audio-only MP4 (AAC, no video track) uploaded as a video",
        files=(V05,),
        make=make_v05,
        expected=(
            "permanent_failure, reason 'no_video_stream', decided from ffprobe (0 video streams) before "
            "any ffmpeg run; no retry; no renditions or poster."
        ),
        reason="no_video_stream",
        source="misskey-dev/misskey#9018",
        needs_ffmpeg=True,
    ),
    Case(
        id="V06",
        title="iPhone-style HDR: HEVC Main10, BT.2020 primaries, HLG transfer (.mov, hvc1)",
        files=(V06,),
        make=make_v06,
        expected=(
            "Success, tone-mapped. 720p 1280x720 and 360p 640x360 renditions are H.264 High 8-bit yuv420p "
            "tagged color_primaries=bt709, color_transfer=bt709, color_space=bt709 (never arib-std-b67 / "
            "bt2020), AAC audio. In the poster and in a rendition frame each of the six 75 % bars (yellow, "
            "cyan, green, magenta, red, blue) at y = 1/6 of the height has HSV saturation >= 0.70."
        ),
        reason=None,
        source="LibrePhotos/librephotos#455",
        needs_ffmpeg=True,
    ),
    Case(
        id="V08",
        title="MOV with no moov atom (recording cut off / partial upload)",
        files=(V08,),
        make=make_v08,
        expected=(
            "permanent_failure, reason 'invalid_media' with detail 'moov atom not found' (ffprobe also "
            "prints 'Invalid data found when processing input'); no retry, no renditions."
        ),
        reason="invalid_media",
        source="fluent-ffmpeg/node-fluent-ffmpeg#1022",
        needs_ffmpeg=True,
    ),
    Case(
        id="V09",
        title="Hostile HLS playlist uploaded as .mp4 (local file read, SSRF)",
        files=(V09_PLAYLIST, V09_SSRF, V09_CANARY),
        make=make_v09,
        expected=(
            "Both playlists: permanent_failure, reason 'unsupported_container' (hls is not in the "
            "allow-list mov,mp4,m4a,3gp,3g2,mj2,matroska,webm); no retry; nothing written; the canary is "
            "never opened (no magenta 320x240 frames in any output) and no connection to 127.0.0.1:9 is "
            "attempted. The canary on its own is a valid MPEG-TS (magenta, 320x240, 2 s); this pipeline "
            "refuses it too, as 'unsupported_container' (MPEG-TS is outside the allow-list)."
        ),
        reason="unsupported_container",
        source="swisskyrepo/PayloadsAllTheThings#5",
        needs_ffmpeg=True,
    ),
    Case(
        id="V10",
        title="Tiny frames at a huge rate: 16x16 H.264 at 3,000 fps for 2 s (6,000 frames)",
        files=(V10,),
        make=make_v10,
        expected=(
            "Success with web-video@2, capped at 60 fps. ffprobe counts 6,000 packets; the budget "
            "estimates from frames (6,000 decoded, at most 151 encoded: about 1 s at speed factor 1, "
            "well inside an invocation, so rendered, not too_long). Both rungs are skipped: one 16x16 "
            "'source' rendition, H.264 High yuv420p, no audio, 2.0 s, r_frame_rate and avg_frame_rate "
            "60/1 and 120 frames (ffprobe -count_frames), not 3,000 fps; 16x16 poster; the decisions "
            "record source_frames 6000 and fps_cap 60."
        ),
        reason=None,
        source="immich-app/immich#7168",
        needs_ffmpeg=True,
    ),
)
