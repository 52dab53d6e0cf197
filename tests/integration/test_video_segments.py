"""A long video's segments encoded apart and joined without re-encoding (domain/segments.py's
plan; domain/video.py's segment_argv, audio_argv, join_list, join_argv), with the real
ffmpeg on a generated clip: the joined rendition has the source's frames at the source's
times, one continuous audio track, and the single pass's picture."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mediajobs.adapters.ffmpeg import find_binaries
from mediajobs.adapters.video import FfmpegRenderer
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.recipes import VideoRenditionsParams
from mediajobs.domain.segments import plan_segments, to_s
from mediajobs.domain.video import (
    audio_argv,
    join_argv,
    join_list,
    keyframes_argv,
    plan_renditions,
    plan_split,
    renditions_argv,
    segment_argv,
)

PARAMS = load_recipe("web-video", 2).params
assert isinstance(PARAMS, VideoRenditionsParams)


def run(argv: list[str], cwd: Path | None = None) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, cwd=cwd).stdout


def video_stream(path: Path) -> dict:
    doc = json.loads(
        run([find_binaries().ffprobe, "-v", "error", "-count_frames", "-show_streams", "-of", "json", str(path)])
    )
    return {s["codec_type"]: s for s in doc["streams"]}


def packet_times(path: Path, stream: str = "v:0") -> list[float]:
    out = run([find_binaries().ffprobe, "-v", "error", "-select_streams", stream, "-show_entries",
               "packet=pts_time", "-of", "csv=p=0", str(path)])  # fmt: skip
    return sorted(float(line.split(",")[0]) for line in out.split())


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 s of 400x240 at 29.97 fps with a tone, a keyframe every 60 frames (2.002 s)."""
    path = tmp_path_factory.mktemp("clip") / "original"
    run([find_binaries().ffmpeg, "-nostdin", "-v", "error", "-f", "lavfi", "-i",
         "testsrc2=size=400x240:rate=30000/1001:duration=12", "-f", "lavfi", "-i", "sine=frequency=440:duration=12",
         "-c:v", "libx264", "-g", "60", "-keyint_min", "60", "-sc_threshold", "0", "-c:a", "aac", "-shortest",
         "-f", "mp4", str(path)])  # fmt: skip
    return path


@pytest.fixture(scope="module")
def joined(clip: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The clip planned in 4.5 s segments (some cuts exact, some on keyframes), each segment
    encoded apart, the audio once, each rung joined; and the single pass for comparison."""
    ffmpeg, ffprobe = find_binaries().ffmpeg, find_binaries().ffprobe
    work = tmp_path_factory.mktemp("joined")
    probe = FfmpegRenderer(speed_factor=1.0, max_duration_s=1800, invocation_s=880, margin_s=10).probe(clip)
    renditions = plan_renditions(probe, PARAMS)
    listing = run(keyframes_argv(ffprobe, str(clip), probe.stream_index))
    plan = plan_split(probe, renditions, listing, 4.5)
    for segment in plan.segments:
        folder = work / f"segment-{segment.index}"
        folder.mkdir()
        start, length = plan.encode_range(segment)
        run(segment_argv(ffmpeg, str(clip), probe, renditions, PARAMS, start, length, str(folder)))
    (work / "audio").mkdir()
    run(audio_argv(ffmpeg, str(clip), renditions, PARAMS, str(work / "audio")))
    outputs = {}
    for r in renditions.renditions:
        names = [f"segment-{s.index}/{r.name}.mp4" for s in plan.segments]
        (work / f"{r.name}.ffconcat").write_text(join_list(list(zip(names, plan.join_durations(), strict=True))))
        out = work / f"{r.name}.mp4"
        offset = to_s(plan.video_start_us)
        run(join_argv(ffmpeg, f"{r.name}.ffconcat", f"audio/{r.name}.m4a", str(out), offset), cwd=work)
        outputs[r.name] = out
    single = work / "single"
    single.mkdir()
    run(renditions_argv(ffmpeg, str(clip), probe, renditions, PARAMS, str(single)))
    return {"plan": plan, "outputs": outputs, "single": single, "probe": probe}


def test_the_plan_mixes_keyframe_and_exact_cuts(joined: dict) -> None:
    plan = joined["plan"]
    # ideal cuts at 4.0 and 8.0 (12 s / 3): keyframes at 4.004 and 8.008 are within 1.125 s
    assert [s.start_us for s in plan.segments] == [0, 4_004_000, 8_008_000]
    assert len(plan_segments(12.0, [0.0], 4.5, frames_s=[i * 1001 / 30000 for i in range(360)]).segments) == 3


def test_a_joined_rendition_has_the_sources_frames_at_the_sources_times(clip: Path, joined: dict) -> None:
    source_times = packet_times(clip)
    for name, out in joined["outputs"].items():
        times = packet_times(out)
        assert len(times) == len(source_times) == 359, name  # -shortest ended the clip at its 359th frame
        assert max(abs(a - b) for a, b in zip(times, source_times, strict=True)) < 0.001, name


def test_a_joined_rendition_is_h264_high_with_one_continuous_audio_track(clip: Path, joined: dict) -> None:
    source_s = float(video_stream(clip)["video"]["duration"])
    for name, out in joined["outputs"].items():
        streams = video_stream(out)
        video, audio = streams["video"], streams["audio"]
        assert (video["codec_name"], video["profile"], video["pix_fmt"]) == ("h264", "High", "yuv420p"), name
        frame_s = 1001 / 30000
        assert abs(float(video["duration"]) - source_s) < frame_s, name
        assert abs(float(audio["start_time"]) - float(video["start_time"])) < frame_s
        assert abs(float(audio["duration"]) - float(video["duration"])) < frame_s
        gaps = [b - a for a, b in zip(packet_times(out, "a:0"), packet_times(out, "a:0")[1:], strict=False)]
        assert max(gaps) <= 1024 / 44100 + 1e-4  # no gap larger than one AAC frame
        assert out.read_bytes()[4:8] == b"ftyp" and out.read_bytes().find(b"moov") < out.read_bytes().find(b"mdat")


def test_the_joined_picture_is_the_single_passs(joined: dict) -> None:
    ffmpeg = find_binaries().ffmpeg
    for name, out in joined["outputs"].items():
        single = joined["single"] / f"{name}.mp4"
        report = subprocess.run(
            [ffmpeg, "-nostdin", "-i", str(out), "-i", str(single), "-lavfi", "[0:v][1:v]ssim", "-f", "null", "-"],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
        mean = float(report.rsplit("All:", 1)[1].split()[0])
        assert mean >= 0.99, (name, mean)


def test_a_join_list_takes_only_plain_relative_paths() -> None:
    assert join_list([("segment-0/720p.mp4", 4.004), ("segment-1/720p.mp4", 3.0)]) == (
        "ffconcat version 1.0\nfile 'segment-0/720p.mp4'\nduration 4.004000\nfile 'segment-1/720p.mp4'\n"
    )
    for bad in ("/etc/passwd", "../x.mp4", "a'b.mp4", "x.mp4\nfile y", "x.mp4\n", ".hidden/x.mp4", "http://x/y.mp4"):
        with pytest.raises(ValueError, match="not a path of ours"):
            join_list([(bad, 1.0)])
