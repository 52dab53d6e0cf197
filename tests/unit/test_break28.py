"""Break-it pass 28: the segment plan (domain/segments.py), the join list and the source
frame-rate bound (domain/video.py), part job keys (domain/keys.py) and the quality search
(domain/quality_search.py). Each test states the behaviour the contract asks for and fails
on the code as it was found. Tests marked DEBATABLE pin a reading of the contract that the
maintainers may decide otherwise."""

from __future__ import annotations

import math

import pytest

from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.keys import part_job_key
from mediajobs.domain.quality_search import Try, next_quality, search
from mediajobs.domain.segments import plan_segments, should_split, to_us
from mediajobs.domain.video import Budget, check_budget, join_list, media_duration_s, parse_probe, plan_renditions
from tests.fakes import TEST_KEYS

SHA, RECIPE = "a" * 64, "b" * 64


def _covers(plan, duration_s: float) -> None:
    s = plan.segments
    assert s[0].start_us == 0 and s[-1].end_us == to_us(duration_s)
    assert all(a.end_us == b.start_us for a, b in zip(s, s[1:], strict=False))
    assert all(x.end_us > x.start_us for x in s), [(x.start_us, x.end_us) for x in s]


# --- segments.py ---------------------------------------------------------------------------


def test_a_positive_duration_under_half_a_microsecond_never_gives_an_empty_segment():
    # 4e-7 s is positive (accepted) but rounds to 0 us: the plan was one segment [0, 0).
    try:
        plan = plan_segments(4e-7, [0.0], 60.0)
    except ValueError:
        return
    _covers(plan, 4e-7)


@pytest.mark.parametrize("segment_s", [math.inf, 1e308])
def test_an_infinite_or_huge_segment_length_is_a_value_error_or_one_segment(segment_s):
    # _check lets inf through (inf >= 1); to_us(0.25 * inf) then raised OverflowError.
    try:
        plan = plan_segments(10.0, [0.0], segment_s)
    except ValueError:
        return
    assert [(s.start_us, s.end_us) for s in plan.segments] == [(0, 10_000_000)]


@pytest.mark.parametrize("duration_s", [1.5, 1.9])
def test_when_should_split_says_split_the_plan_has_two_segments(duration_s):
    # DEBATABLE. should_split's docstring: "lasts at least 1.5 segments (round gives two or
    # more)"; plan_segments': "at least 2 once split". With segment_s = 1.0 (the minimum
    # allowed) and 1.5 <= duration < 2, no cut can leave both sides MIN_SEGMENT_SECONDS long.
    if should_split(1e9, duration_s, 240.0, 1.0):
        assert len(plan_segments(duration_s, [0.0], 1.0).segments) >= 2


def test_the_plan_is_a_function_of_the_microsecond_duration():
    # DEBATABLE. The module says times are whole microseconds so that plans compare exactly;
    # but the count is rounded from the float. A stream starting at 214.134157 s lasting
    # 150.000000 s gives media_duration_s 149.99999999999997 (150_000_000 us, like 150.0):
    # 2 segments of 75 s instead of 3 of 50 s.
    natural = media_duration_s({}, [{"start_time": "214.134157", "duration": "150.000000"}])
    assert natural is not None and to_us(natural) == to_us(150.0)
    assert plan_segments(natural, [0.0], 60.0) == plan_segments(150.0, [0.0], 60.0)
    late = media_duration_s({}, [{"start_time": "2046.968325", "duration": "90.000000"}])
    assert late is not None and to_us(late) == to_us(90.0)
    assert should_split(1e9, late, 240.0, 60.0) == should_split(1e9, 90.0, 240.0, 60.0)


def test_with_known_frames_no_segment_starts_after_the_last_frame():
    # DEBATABLE (the last assertion of test_segment_plan.py's
    # test_an_exact_cut_falls_on_the_first_frame_at_or_after_its_ideal_time pins the
    # opposite). 4 s of 30 fps video with 12 s of audio (duration 12 s), 4.5 s segments:
    # the cuts at 4 and 8 s fall past the last frame, and two of the three segment jobs
    # encode no frame at all (seen with the real ffmpeg: empty segment MP4s).
    frames = [round(i / 30, 6) for i in range(120)]
    plan = plan_segments(12.0, [0.0, 2.0], 4.5, frames_s=frames)
    _covers(plan, 12.0)
    for s in plan.segments:
        assert any(s.start_us <= to_us(f) < s.end_us for f in frames), (s.start_us, s.end_us)


# --- video.py: join_list, MAX_SOURCE_FPS ----------------------------------------------------


@pytest.mark.parametrize("duration_s", [math.nan, math.inf, -1.0, 0.0, 1e-7])
def test_a_join_list_refuses_a_duration_that_is_not_a_positive_number(duration_s):
    # The list was written with "duration nan", "duration inf", "duration -1.000000" or
    # "duration 0.000000": ffmpeg refuses the first two, and the others start the next
    # segment before (or at) the previous one's start: overlapping, out of order.
    with pytest.raises(ValueError):
        join_list([("segment-0/720p.mp4", duration_s), ("segment-1/720p.mp4", 4.0)])


def test_a_join_list_of_no_segment_is_refused():
    with pytest.raises(ValueError):
        join_list([])


def test_a_long_audio_track_does_not_dilute_the_source_frame_rate_bound():
    # DEBATABLE (README: "counted over its duration"). The clip, 20 s of 16x16 at
    # 50,000 fps (1,000,000 frames), with 200 s of audio appended: the duration becomes
    # 220 s, the rate 4,545 a second, and the clip the rule was made to refuse renders.
    params = load_recipe("web-video", 2).params
    document = {
        "format": {"format_name": "mov,mp4,m4a,3gp,3g2,mj2", "duration": "220.000000"},
        "streams": [
            {"codec_type": "video", "codec_name": "h264", "width": 16, "height": 16, "pix_fmt": "yuv420p",
             "start_time": "0.000000", "duration": "20.000000", "nb_read_packets": "1000000"},
            {"codec_type": "audio", "codec_name": "aac", "start_time": "0.000000", "duration": "220.000000"},
        ],
    }  # fmt: skip
    probe = parse_probe(document)
    budget = Budget(speed_factor=1.0, max_duration_s=1800, invocation_s=880, free_bytes=10**10, capacity_bytes=10**10)
    with pytest.raises(PermanentFailure) as caught:
        check_budget(probe, plan_renditions(probe, params), budget)
    assert caught.value.reason == "too_many_frames"


# --- keys.py ----------------------------------------------------------------------------------


@pytest.mark.parametrize("other", ["segment/v1/00-60000000", "segment/v01/0-60000000", "segment/v1/0-060000000"])
def test_one_range_has_one_spelling_and_one_job_key(other):
    # The commit's own reason for fullmatch: "'a'*64+newline gave another key for the same
    # content". Leading zeros give another key for the same part.
    assert len(part_job_key(SHA, "segment/v1/0-60000000", RECIPE, keys=TEST_KEYS)) == 64
    with pytest.raises(ValueError):  # one spelling: leading zeros are refused
        part_job_key(SHA, other, RECIPE, keys=TEST_KEYS)


@pytest.mark.parametrize("part", ["segment/v1/5-5", "segment/v1/60000000-0"])
def test_an_empty_or_reversed_range_is_not_a_part(part):
    with pytest.raises(ValueError):
        part_job_key(SHA, part, RECIPE, keys=TEST_KEYS)


# --- quality_search.py --------------------------------------------------------------------


def test_a_nan_slope_is_refused_even_when_the_first_try_is_in_the_window():
    # "Raises ValueError if ... slope is not positive": NaN passed `slope <= 0`.
    with pytest.raises(ValueError, match="slope"):
        next_quality([Try(50, 71.0, 1)], 70.0, 2.0, math.nan)


def test_a_non_finite_tolerance_is_a_value_error_not_an_overflow():
    # search() checks only `tolerance < 0`: inf passed and math.ceil(inf) raised OverflowError.
    with pytest.raises(ValueError):
        search(lambda q: Try(q, 60.0, 1), 50, 70.0, math.inf, 0.9)


def test_no_quality_is_tried_outside_the_highest_miss_and_the_lowest_reach():
    # DEBATABLE (unreachable through search() with MAX_ENCODES = 3). next_quality's
    # docstring: it stops "when no untried quality is left between the highest that misses
    # and the lowest that reaches". q50 missed and q40 reached (scores are not monotone near
    # the top): nothing lies between, yet 51 was returned.
    assert next_quality([Try(50, 69.0, 1), Try(40, 75.0, 2)], 70.0, 1.0, 0.9) is None
