"""The segment plan (domain/segments.py): when a video is split, where it is cut, and what
the manifest records. Pure: keyframe lists stand for ffprobe's."""

from __future__ import annotations

import json

import pytest

from mediajobs.domain.segments import (
    PLAN_VERSION,
    SEGMENT_SECONDS,
    SPLIT_ABOVE_SECONDS,
    plan_segments,
    should_split,
    to_us,
)
from mediajobs.domain.video import keyframes_argv, parse_frame_times, parse_keyframes
from tests.fakes import TEST_KEYS


def every(step_s: float, until_s: float, start_s: float = 0.0) -> list[float]:
    """Keyframe times every ``step_s`` from ``start_s`` to before ``until_s``."""
    out, t = [], start_s
    while t < until_s:
        out.append(round(t, 6))
        t += step_s
    return out


def starts(plan) -> list[float]:
    return [s.start_us / 1e6 for s in plan.segments]


def test_defaults_are_the_issues():
    assert (SPLIT_ABOVE_SECONDS, SEGMENT_SECONDS) == (240.0, 60.0)


def test_ten_minutes_with_a_keyframe_every_2_s_is_ten_segments_cut_on_keyframes():
    plan = plan_segments(600.0, every(2.0, 600.0), 60.0)
    assert starts(plan) == [0, 60, 120, 180, 240, 300, 360, 420, 480, 540]
    assert plan.segments[-1].end_us == to_us(600.0)
    assert plan.exact_cuts == 0 and all(s.on_keyframe for s in plan.segments)


def test_segments_are_contiguous_and_cover_the_whole_source():
    plan = plan_segments(3601.37, every(2.002, 3601.37, 0.033), 60.0)
    assert plan.segments[0].start_us == 0 and plan.segments[-1].end_us == to_us(3601.37)
    assert all(a.end_us == b.start_us for a, b in zip(plan.segments, plan.segments[1:], strict=False))
    assert [s.index for s in plan.segments] == list(range(60))


def test_a_cut_moves_to_the_nearest_keyframe_within_a_quarter_of_the_segment():
    # keyframes every 7 s: the ideal cut at 60 s has 56 and 63 near it; 56 is 4 s off, 63 is 3 s
    plan = plan_segments(180.0, every(7.0, 180.0), 60.0)
    assert starts(plan) == [0, 63, 119]  # 119 = 17 x 7, 1 s from 120
    assert plan.exact_cuts == 0


def test_a_keyframe_further_than_a_quarter_is_not_used_and_the_cut_is_exact():
    # keyframes at 0 and 44 (16 s before the ideal cut: more than 15 s away) and 200 (far after)
    plan = plan_segments(120.0, [0.0, 44.0, 200.0], 60.0)
    (first, second) = plan.segments
    assert (second.start_us, second.decode_from_us, second.on_keyframe) == (to_us(60), to_us(44), False)
    assert first.on_keyframe and plan.exact_cuts == 1
    # 15 s away is within a quarter of 60: cut there
    assert starts(plan_segments(120.0, [0.0, 45.0], 60.0)) == [0, 45]


def test_a_screen_recording_with_one_keyframe_is_cut_at_exact_times_decoding_from_the_start():
    plan = plan_segments(300.0, [0.0], 60.0)
    assert starts(plan) == [0, 60, 120, 180, 240]
    assert [s.decode_from_us for s in plan.segments] == [0] * 5
    assert plan.exact_cuts == 4


def test_sparse_keyframes_mix_snapped_and_exact_cuts_each_decoding_from_the_keyframe_before():
    plan = plan_segments(600.0, [0.0, 300.5], 60.0)
    assert starts(plan) == [0, 60, 120, 180, 240, 300.5, 360, 420, 480, 540]
    assert [s.decode_from_us / 1e6 for s in plan.segments] == [0, 0, 0, 0, 0, 300.5, 300.5, 300.5, 300.5, 300.5]


def test_the_count_rounds_so_no_segment_is_a_sliver():
    assert len(plan_segments(150.0, [0.0], 60.0).segments) == 3  # 50 s each, not 60 + 60 + 30
    assert len(plan_segments(125.0, [0.0], 60.0).segments) == 2  # 62.5 s each, not 60 + 60 + 5
    assert len(plan_segments(89.0, [0.0], 60.0).segments) == 1


def test_the_first_frame_counts_as_a_keyframe_and_keyframes_outside_the_source_are_ignored():
    plan = plan_segments(120.0, [-1.0, 130.0, float("nan")], 60.0)
    assert [s.decode_from_us for s in plan.segments] == [0, 0]


def test_the_plan_is_deterministic_and_its_record_is_json_in_microsecond_precision():
    keys = every(1.001, 400.0, 0.0)
    one, two = plan_segments(400.0, keys, 60.0), plan_segments(400.0, list(reversed(keys)), 60.0)
    assert one == two and json.dumps(one.to_json()) == json.dumps(two.to_json())
    record = one.to_json()
    assert record["version"] == PLAN_VERSION and record["count"] == 7 and record["exact_cuts"] == 0
    assert record["segments"][1] == {
        "index": 1, "start_s": 57.057, "end_s": 114.114, "decode_from_s": 57.057, "on_keyframe": True,
    }  # fmt: skip


def test_a_segments_identity_names_the_plan_version_and_its_range():
    segment = plan_segments(120.0, [0.0, 60.06], 60.0).segments[1]
    assert segment.identity() == f"segment/v{PLAN_VERSION}/60060000-120000000"


@pytest.mark.parametrize(
    ("estimated_s", "duration_s", "split"),
    [(241.0, 120.0, True), (240.0, 120.0, False), (900.0, 89.0, False), (900.0, 90.0, True)],
)
def test_a_video_is_split_when_its_estimate_exceeds_the_threshold_and_it_makes_two_segments(
    estimated_s, duration_s, split
):
    assert should_split(estimated_s, duration_s, 240.0, 60.0) is split


@pytest.mark.parametrize(
    "call",
    [
        lambda: plan_segments(0.0, [0.0], 60.0),
        lambda: plan_segments(float("inf"), [0.0], 60.0),
        lambda: plan_segments(10.0, [0.0], 0.5),
        lambda: should_split(1.0, 1.0, 0.0, 60.0),
    ],
)
def test_bad_arguments_are_refused(call):
    with pytest.raises(ValueError):
        call()


def test_keyframes_are_read_from_ffprobes_packet_flags_with_the_input_guard():
    text = "0.000000,K__\n0.033367,___\n2.002000,K_\nN/A,K__\n4.004000,KD_\n\n1.001000,__\n"
    assert parse_keyframes(text) == (0.0, 2.002, 4.004)
    argv = keyframes_argv("ffprobe", "original", 1)
    assert argv[-2:] == ["-i", "original"]
    assert "-protocol_whitelist" in argv and argv[argv.index("-protocol_whitelist") + 1] == "file"
    assert argv[argv.index("-show_entries") + 1] == "packet=pts_time,flags"
    assert argv[argv.index("-select_streams") + 1] == "1"  # the probed stream, not v:0 (cover art may be)


def test_an_exact_cut_falls_on_the_first_frame_at_or_after_its_ideal_time():
    frames = [round(i * 1001 / 30000, 6) for i in range(300)]  # 29.97 fps for 10 s, one keyframe
    plan = plan_segments(10.01, [0.0], 5.0, frames_s=frames)
    assert [s.start_us for s in plan.segments] == [0, 5_005_000]  # frame 150, not 5.0 between frames
    assert plan.segments[1].decode_from_us == 0
    # past the last frame there is none to fall on: no cut (a segment with no frame would be empty)
    assert [s.start_us for s in plan_segments(10.0, [0.0], 5.0, frames_s=[0.0, 1.0]).segments] == [0]
    # no frame known: the ideal time stays
    assert [s.start_us for s in plan_segments(10.0, [0.0], 5.0).segments] == [0, 5_000_000]


def test_frame_times_are_every_packets_time():
    assert parse_frame_times("0.000000,K__\n0.066733,___\n0.033367,___\nN/A,___\n") == (0.0, 0.033367, 0.066733)


def test_a_segment_is_seeked_and_bounded_on_the_input_video_only_with_closed_gops():
    from mediajobs.bootstrap import load_recipe
    from mediajobs.domain.video import VideoProbe, audio_argv, join_argv, plan_renditions, segment_argv

    params = load_recipe("web-video", 2).params
    probe = VideoProbe(format_name="mov,mp4", duration_s=600.0, codec="h264", coded_width=1920, coded_height=1080,
                       frames=18000, audio_codec="aac")  # fmt: skip
    plan = plan_renditions(probe, params)
    argv = segment_argv("ffmpeg", "/w/original", probe, plan, params, 60.06, 59.94, "/w/out")
    at = argv.index("-i")
    assert argv[at - 4 : at + 2] == ["-ss", "60.060000", "-t", "59.940000", "-i", "/w/original"]
    last = segment_argv("ffmpeg", "/w/original", probe, plan, params, 540.0, None, "/w/out")  # to its end
    assert "-t" not in last[: last.index("-i")]
    assert "-format_whitelist" in argv[:at] and argv[argv.index("-protocol_whitelist") + 1] == "file"
    assert argv.count("-an") == len(plan.renditions) and "-c:a" not in argv
    assert argv.count("open-gop=0") == len(plan.renditions)
    assert [a for a in argv if a.endswith(".mp4")] == ["/w/out/720p.mp4", "/w/out/360p.mp4"]
    audio = audio_argv("ffmpeg", "/w/original", plan, params, "/w/audio")
    assert [a for a in audio if a.endswith(".m4a")] == ["/w/audio/720p.m4a", "/w/audio/360p.m4a"]
    assert audio.count("-vn") == 2 and audio[audio.index("-b:a") + 1] == "128k"
    join = join_argv("ffmpeg", "720p.ffconcat", "audio/720p.m4a", "/w/720p.mp4")
    assert join[join.index("-f") + 1 : join.index("-f") + 5] == ["concat", "-safe", "1", "-i"]
    assert join.count("concat,mov,mp4,m4a") == 2
    assert join[join.index("-c") + 1] == "copy" and "+faststart" in join
    assert "-map" in join and join[join.index("1:a:0") - 1] == "-map"
    assert "1:a:0" not in join_argv("ffmpeg", "360p.ffconcat", None, "/w/360p.mp4")


def test_a_segments_job_key_is_its_content_recipe_range_and_plan_version():
    from mediajobs.domain.keys import inputs_job_key, job_key, part_job_key

    sha, recipe = "a" * 64, "b" * 64
    first, second = plan_segments(120.0, [0.0], 60.0).segments
    keys = {part_job_key(sha, s.identity(), recipe, "p1", keys=TEST_KEYS) for s in (first, second)}
    keys.add(part_job_key(sha, f"audio/v{PLAN_VERSION}", recipe, "p1", keys=TEST_KEYS))
    keys.add(job_key(sha, recipe, "p1", keys=TEST_KEYS))  # the whole content's job: the join's key
    assert len(keys) == 4 and all(len(k) == 64 for k in keys)
    assert part_job_key(sha, first.identity(), recipe, "p1", keys=TEST_KEYS) == part_job_key(
        sha, first.identity(), recipe, "p1", keys=TEST_KEYS
    )
    assert part_job_key(sha, first.identity(), recipe, "p1", keys=TEST_KEYS) != part_job_key(
        sha, first.identity(), recipe, "p2", keys=TEST_KEYS
    )
    assert part_job_key(sha, first.identity(), recipe, "p1", keys=TEST_KEYS) != part_job_key(
        sha, first.identity(), "c" * 64, "p1", keys=TEST_KEYS
    )
    assert part_job_key(sha, "segment/v1/0-60000000", recipe, keys=TEST_KEYS) != part_job_key(
        sha, "segment/v2/0-60000000", recipe, keys=TEST_KEYS
    )
    assert part_job_key(sha, "audio/v1", recipe, keys=TEST_KEYS) == inputs_job_key(
        {"original": {"sha256": sha, "part": "audio/v1"}}, recipe, keys=TEST_KEYS
    )
    for part in ("segment/v1/0-", "segment/1/0-5", "../x", "audio", "segment/v1/0-5\n"):
        with pytest.raises(ValueError, match="not a content, a part of one or a job's named output"):
            part_job_key(sha, part, recipe, keys=TEST_KEYS)


def test_listed_times_are_made_relative_to_the_containers_start_as_ss_counts():
    text = "10.010000,K__\n10.043333,___\n12.010000,K__\n"
    assert parse_keyframes(text, 10.01) == (0.0, 2.0)
    assert parse_frame_times(text, 10.01) == (0.0, 0.033333, 2.0)


def test_a_capped_sources_cuts_fall_on_the_renditions_frame_grid():
    # 120 fps capped at 60: frames every 1/120 s, the renditions' grid every 1/60 s
    frames = [round(i / 120, 6) for i in range(1200)]  # 10 s
    keys = [0.0, 3.008333, 6.0]  # 3.008333 is frame 361: off the 60 fps grid
    plan = plan_segments(10.0, keys, 3.3, frames_s=frames, grid_s=1 / 60)
    starts_us = [s.start_us for s in plan.segments]
    assert starts_us == [0, 3_333_333, 6_000_000]  # 3.3333 s: the grid point after 3.333 s, on frame 400
    assert all(abs(t / 1e6 * 60 - round(t / 1e6 * 60)) < 0.06 for t in starts_us)  # within 1 ms of the grid
    assert plan.segments[1].decode_from_us == 3_008_333  # decoding still starts at the keyframe before
    unsnapped = plan_segments(10.0, keys, 3.3, frames_s=frames)
    assert [s.start_us for s in unsnapped.segments] == [0, 3_008_333, 6_000_000]  # without the grid: the keyframe
    with pytest.raises(ValueError, match="grid"):
        plan_segments(10.0, keys, 3.3, grid_s=0.0)


def test_a_video_starting_late_is_encoded_and_joined_from_its_first_frame():
    frames = [round(0.523 + i / 30, 6) for i in range(360)]  # video from 0.523 s; the container from 0
    plan = plan_segments(12.5, [0.523, 4.523, 8.523], 4.5, frames_s=frames)
    assert plan.video_start_us == 523_000
    assert [s.start_us for s in plan.segments] == [0, 4_523_000, 8_523_000]
    # ffmpeg's input -t counts from the first frame decoded: the first segment's from 0.523 s
    assert [plan.encode_range(s) for s in plan.segments] == [(0.0, 4.0), (4.523, 4.0), (8.523, None)]
    assert plan.join_durations() == [4.0, 4.0, 3.977]
    assert plan_segments(12.0, [0.0], 4.0).video_start_us == 0  # frames unknown: from 0
    from mediajobs.domain.video import join_argv

    argv = join_argv("ffmpeg", "l.ffconcat", None, "/w/o.mp4", 0.523)
    assert argv[argv.index("-itsoffset") + 1] == "0.523000" and argv.index("-itsoffset") < argv.index("concat")
    assert "-itsoffset" not in join_argv("ffmpeg", "l.ffconcat", None, "/w/o.mp4")
    with pytest.raises(ValueError, match="offset"):
        join_argv("ffmpeg", "l.ffconcat", None, "/w/o.mp4", -1.0)
