"""Break-it pass 28, with the real ffmpeg: a long video planned (domain/segments.py), its
segments encoded apart and joined (domain/video.py's keyframes_argv, segment_argv,
audio_argv, join_list, join_argv) must give the single pass's frames at the single pass's
times, whatever the source's timeline looks like. Each test fails on the code as found."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from mediajobs.adapters.ffmpeg import find_binaries
from mediajobs.adapters.video import FfmpegRenderer
from mediajobs.domain.segments import to_s
from mediajobs.domain.video import (
    audio_argv,
    join_argv,
    join_list,
    keyframes_argv,
    parse_frame_times,
    parse_keyframes,
    plan_renditions,
    plan_split,
    renditions_argv,
    segment_argv,
)
from tests.integration.test_video_cases import _boxes
from tests.integration.test_video_segments import PARAMS, run


def make(path: Path, *args: str) -> Path:
    run([find_binaries().ffmpeg, "-nostdin", "-v", "error", "-y", *args, str(path)])
    return path


def packet_times(path: Path, stream: str = "v:0") -> list[float]:
    out = run([find_binaries().ffprobe, "-v", "error", "-select_streams", stream, "-show_entries",
               "packet=pts_time", "-of", "csv=p=0", str(path)])  # fmt: skip
    return sorted(float(line.split(",")[0]) for line in out.split())


def probe_of(path: Path):
    return FfmpegRenderer(speed_factor=1.0, max_duration_s=1800, invocation_s=880, margin_s=10).probe(path)


def joined_and_single(clip: Path, segment_s: float, work: Path) -> tuple[list[float], list[float], object]:
    """The last rung's packet times, joined from segments and from the single pass; and the plan."""
    ffmpeg, ffprobe = find_binaries().ffmpeg, find_binaries().ffprobe
    probe = probe_of(clip)
    renditions = plan_renditions(probe, PARAMS)
    listing = run(keyframes_argv(ffprobe, str(clip), probe.stream_index))
    plan = plan_split(probe, renditions, listing, segment_s)
    for segment in plan.segments:
        folder = work / f"segment-{segment.index}"
        folder.mkdir(parents=True)
        start, length = plan.encode_range(segment)
        run(segment_argv(ffmpeg, str(clip), probe, renditions, PARAMS, start, length, str(folder)))
    rung = renditions.renditions[-1]
    audio = None
    if probe.has_audio:
        (work / "audio").mkdir()
        run(audio_argv(ffmpeg, str(clip), renditions, PARAMS, str(work / "audio")))
        audio = f"audio/{rung.name}.m4a"
    names = [f"segment-{s.index}/{rung.name}.mp4" for s in plan.segments]
    (work / "list.ffconcat").write_text(join_list(list(zip(names, plan.join_durations(), strict=True))))
    offset = to_s(plan.video_start_us)
    run(join_argv(ffmpeg, "list.ffconcat", audio, str(work / "joined.mp4"), offset), cwd=work)
    (work / "single").mkdir()
    run(renditions_argv(ffmpeg, str(clip), probe, renditions, PARAMS, str(work / "single")))
    return packet_times(work / "joined.mp4"), packet_times(work / "single" / f"{rung.name}.mp4"), plan


def assert_same_frames(joined: list[float], single: list[float]) -> None:
    assert len(joined) == len(single), (len(joined), len(single))
    worst = max(abs(a - b) for a, b in zip(joined, single, strict=True))
    assert worst < 0.001, worst


def test_a_source_whose_timestamps_start_after_zero_joins_at_the_single_passs_times(tmp_path: Path) -> None:
    # A Matroska file whose first frame is at 0.010 s (recordings cut from a stream keep their
    # timestamps): ffprobe's packet times are absolute, -ss is relative to the file's start,
    # so the plan's "frame-exact" cuts fall 10 ms after a frame and every frame of the later
    # segments moved 23 ms (the existing test's bound is 1 ms). At a 10.01 s start the plan
    # is also 10 s + 2 s for 4.5 s segments.
    clip = make(tmp_path / "original", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=12",
                "-c:v", "libx264", "-g", "60", "-output_ts_offset", "0.01", "-f", "matroska")  # fmt: skip
    joined, single, _ = joined_and_single(clip, 4.5, tmp_path / "work")
    assert_same_frames(joined, single)


def test_a_video_starting_after_its_audio_is_joined_without_repeated_frames(tmp_path: Path) -> None:
    # Video from 0.523 s, audio from 0: segment 0 is [0, 4.523) but ffmpeg's input -t counts
    # from the first decoded frame, so it ran to 5.05 s and its last 16 frames were segment 1's
    # first 16 again (376 frames for 360), and the joined video started at 0. Now the first
    # segment's -t and join length count from the video's start, and the join is moved there.
    video = make(tmp_path / "video.mkv", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=12",
                 "-c:v", "libx264", "-g", "60")  # fmt: skip
    audio = make(tmp_path / "audio.m4a", "-f", "lavfi", "-i", "sine=duration=12.5", "-c:a", "aac")
    clip = make(tmp_path / "original", "-itsoffset", "0.5", "-i", str(video), "-i", str(audio),
                "-map", "0:v", "-map", "1:a", "-c", "copy", "-f", "matroska")  # fmt: skip
    joined, single, _ = joined_and_single(clip, 4.5, tmp_path / "work")
    source = packet_times(clip)
    assert len(source) == len(single) == len(joined) == 360
    # Against the source's own times: the single pass itself lands 10 ms late here (0.533 for
    # the source's 0.523: its MP4 muxer's rounding of a Matroska millisecond timeline), the
    # joined rendition within 1.4 ms, a twentieth of a frame.
    assert max(abs(a - b) for a, b in zip(joined, source, strict=True)) < 0.002
    assert max(abs(a - b) for a, b in zip(single, source, strict=True)) < 1 / 30


def test_a_source_above_max_fps_stays_capped_across_the_joins(tmp_path: Path) -> None:
    # 120 fps (web-video@2 caps at 60): the exact cut at 4.008333 s is on a source frame but
    # off the 60 fps grid, and each segment's fps filter starts its own grid: the joined
    # rendition has frames at 4.0 and 4.008333 (8 ms apart, 120 fps), 723 frames for 722.
    clip = make(tmp_path / "original", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=120:duration=12.025",
                "-c:v", "libx264", "-g", "1000", "-f", "mp4")  # fmt: skip
    joined, single, _ = joined_and_single(clip, 4.5, tmp_path / "work")
    gaps = [b - a for a, b in zip(joined, joined[1:], strict=False)]
    assert min(gaps) >= 1 / 60 - 0.001, min(gaps)
    assert_same_frames(joined, single)


def test_a_last_frame_at_the_containers_duration_is_kept(tmp_path: Path) -> None:
    # ffmpeg's own variable-rate MP4: the stream's duration ends at its last frame's time
    # (12.466667). The last segment is [start, duration) on the input's -t: that frame is
    # dropped, where the single pass (-t duration + slack) keeps it: 355 frames for 356.
    clip = make(tmp_path / "original", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=12",
                "-vf", "setpts='(N/30+0.5*gte(N,100))/TB'", "-fps_mode", "vfr", "-c:v", "libx264", "-g", "60",
                "-f", "mp4")  # fmt: skip
    joined, single, _ = joined_and_single(clip, 4.5, tmp_path / "work")
    assert len(single) == len(packet_times(clip))
    assert_same_frames(joined, single)


def test_the_keyframe_listing_reads_the_probed_stream_not_the_cover_art(tmp_path: Path) -> None:
    # test_video_cases.py's cover art stored before the video (stream 0, attached_pic): the
    # probe and segment_argv use the video's index, keyframes_argv "-select_streams v:0" lists
    # the cover's one packet ("N/A,K__"): no keyframe, no frame, every cut exact and every
    # segment "decoding from 0".
    cover = tmp_path / "cover.jpg"
    Image.new("RGB", (240, 240), (0, 0, 255)).save(cover)
    video = make(tmp_path / "video.mp4", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=6",
                 "-c:v", "libx264", "-g", "60")  # fmt: skip
    tagged = make(tmp_path / "tagged.mp4", "-i", str(video), "-i", str(cover), "-map", "0", "-map", "1",
                  "-c", "copy", "-disposition:v:1", "attached_pic")  # fmt: skip
    rebuilt = b""
    data = tagged.read_bytes()
    for kind, box in _boxes(data, 0, len(data)):
        if kind == b"moov":
            children = sorted(_boxes(box, 8, len(box)), key=lambda c: {b"mvhd": 0, b"udta": 1}.get(c[0], 2))
            box = box[:8] + b"".join(b for _, b in children)
        rebuilt += box
    original = tmp_path / "original"
    original.write_bytes(rebuilt)
    probe = probe_of(original)
    assert probe.stream_index == 1
    listing = run(keyframes_argv(find_binaries().ffprobe, str(original), probe.stream_index))
    assert len(parse_frame_times(listing)) == probe.frames == 180
    assert parse_keyframes(listing) == (0.0, 2.0, 4.0)
