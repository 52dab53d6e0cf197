"""domain/parts.py: a split job's parts, their keys and records, the parent's row change and
its progress."""

from __future__ import annotations

import dataclasses

import pytest

from mediajobs.domain.jobs import JobSpec, JobState
from mediajobs.domain.keys import ORIGINAL_INPUT, UNKEYED, inputs_job_key, part_job_key
from mediajobs.domain.parts import (
    AUDIO_PART,
    Part,
    Split,
    parent_key,
    part_spec,
    part_specs,
    progress_of,
    split_changes,
)
from mediajobs.settings import Settings
from tests.fakes import TEST_KEY_SECRET, TEST_KEYS

#: The stack's scheme of each key algorithm (the tests' secret).
KEYS_FOR = Settings(key_secret=TEST_KEY_SECRET).keys_for

SHA = "ab" * 32
RECIPE = "cd" * 32


def parent() -> JobSpec:
    key = inputs_job_key({ORIGINAL_INPUT: {"sha256": SHA}}, RECIPE, "none", keys=TEST_KEYS)
    spec = JobSpec(key, SHA, "web-video", 2, RECIPE, "none", f"derivatives/{key}/", "media", "originals/a.mp4")
    return dataclasses.replace(spec, key_algorithm=TEST_KEYS.algorithm)


def split() -> Split:
    return Split(
        (
            Part("segment/v1/0-2000000", 0.0, 2.0, 2.0, 2.0),
            Part("segment/v1/2000000-6000000", 2.0, None, 4.0, 4.0),
            Part(AUDIO_PART, 0.0, None, 6.0),
        ),
        0.0,
        {"version": 1, "count": 2},
    )


def test_each_part_is_keyed_by_the_content_its_range_the_recipe_and_the_policy():
    specs = part_specs(parent(), split(), "derivatives/", KEYS_FOR)
    assert [s.job_key for s in specs] == [
        part_job_key(SHA, p.identity, RECIPE, "none", keys=TEST_KEYS) for p in split().parts
    ]
    assert len({s.job_key for s in specs} | {parent().job_key}) == 4
    for spec, part in zip(specs, split().parts, strict=True):
        assert spec.output_prefix == f"derivatives/{spec.job_key}/"
        assert spec.waiting == frozenset({parent().job_key}) and spec.part == part
        assert (spec.input_sha256, spec.recipe_sha256, spec.source_key) == (SHA, RECIPE, "originals/a.mp4")
        assert parent_key(spec, KEYS_FOR) == parent().job_key


def test_a_part_is_keyed_under_its_parents_key_algorithm_whatever_the_workers_is():
    """A video split before a key rollout keeps its parts' keys after it: a worker of the
    keyed algorithm derives an unkeyed parent's parts, and finds that parent from a part,
    under algorithm 1 (the parent's row records it)."""
    key = inputs_job_key({ORIGINAL_INPUT: {"sha256": SHA}}, RECIPE, "none", keys=UNKEYED)
    old = dataclasses.replace(parent(), job_key=key, output_prefix=f"derivatives/{key}/", key_algorithm=1)
    specs = part_specs(old, split(), "derivatives/", KEYS_FOR)
    assert [s.job_key for s in specs] == [
        part_job_key(SHA, p.identity, RECIPE, "none", keys=UNKEYED) for p in split().parts
    ]
    assert {s.key_algorithm for s in specs} == {1}
    assert {parent_key(s, KEYS_FOR) for s in specs} == {key}
    assert [s.job_key for s in part_specs(parent(), split(), "derivatives/", KEYS_FOR)] != [s.job_key for s in specs]


def test_another_policy_gives_other_part_keys():
    other = part_spec(
        JobSpec(**{**parent().__dict__, "policy_version": "p2"}), split().parts[0], "derivatives/", KEYS_FOR
    )
    assert other.job_key != part_spec(parent(), split().parts[0], "derivatives/", KEYS_FOR).job_key


def test_a_split_is_recorded_and_read_back_whole():
    assert Split.from_json(split().to_json()) == split()
    assert split().audio == split().parts[2] and split().segments == split().parts[:2]


@pytest.mark.parametrize(
    "bad",
    [
        {"identity": "segment/v1/5-5", "seek_s": 0, "length_s": 1, "weight_s": 1},  # empty range
        {"identity": "../etc", "seek_s": 0, "length_s": 1, "weight_s": 1},
        {"identity": AUDIO_PART, "seek_s": -1, "length_s": None, "weight_s": 1},
        {"identity": AUDIO_PART, "seek_s": 0, "length_s": 0, "weight_s": 1},
        {"identity": AUDIO_PART, "seek_s": 0, "length_s": None, "weight_s": float("nan")},
        {"identity": AUDIO_PART, "seek_s": 0},
    ],
)
def test_a_malformed_part_is_refused(bad):
    with pytest.raises(ValueError):
        Part.from_json(bad)


def test_the_parent_waits_for_the_parts_not_done_with_its_lease_given_up():
    changes = split_changes(frozenset({"k1"}), split(), 100, 220)
    assert changes["state"] == JobState.WAITING and changes["pending"] == frozenset({"k1"})
    assert (changes["lease_token"], changes["lease_expires_at_s"], changes["split"]) == (None, 220, split())
    assert split_changes(frozenset(), split(), 100, 220)["state"] == JobState.REQUESTED  # every part done already


def test_progress_is_the_share_of_the_parts_seconds_done():
    assert progress_of(split(), [False, False, False]) == 0.0
    assert progress_of(split(), [True, False, False]) == pytest.approx(2 / 12)
    assert progress_of(split(), [True, True, False]) == pytest.approx(6 / 12)
    assert progress_of(split(), [True, True, True]) == 1.0


def test_the_parts_and_the_join_are_requested_on_the_video_lane_once_the_parent_waits():
    """JobRequests.fan_out with the in-memory ledger and queue: the parts are written
    requested and named waiting for the parent before it turns waiting, their requests go to
    the video lane after; the last part's end makes the parent requested there, once."""
    from mediajobs.domain.jobs import Claim, ClaimOutcome, OutputRecord, completed
    from mediajobs.service_layer.requests import JobRequests
    from mediajobs.settings import Settings
    from tests.fakes import FakeLedger, FakeQueue

    log: list = []
    ledger, queue = FakeLedger(log), FakeQueue()
    settings = Settings(key_secret=TEST_KEY_SECRET, jobs_queue_arn="arn:jobs", video_queue_arn="arn:video")
    requests = JobRequests(settings, ledger=ledger, queue=queue, clock=lambda: 1000.0)
    claim = ledger.claim(parent(), now_s=1000, lease_until_s=1120)
    assert claim == Claim(ClaimOutcome.RUN, parent().job_key, "t1", 1120, attempts=1)

    row = requests.fan_out(parent(), "t1", split(), None)
    keys = [s.job_key for s in part_specs(parent(), split(), "derivatives/", KEYS_FOR)]
    assert (row.state, row.pending, row.split, row.lease_token) == (JobState.WAITING, frozenset(keys), split(), None)
    assert row.lease_expires_at_s == 1000 + settings.lease_s  # a redelivery is busy while the requests go out
    assert ledger.get(parent().job_key).lease_expires_at_s == 0  # and answered at once once they are sent
    writes = [entry[0] for entry in log if entry[0] in ("wait", "split")]
    assert writes == ["wait", "wait", "wait", "split"]  # every part written before the parent waits
    assert [(arn, body) for arn, body, _, _ in queue.resent] == [
        ("arn:video", f'{{"job_key":"{k}","mediajobs":"job"}}') for k in keys
    ]
    assert ledger.get(keys[0]).waiting == frozenset({parent().job_key})

    queue.resent.clear()
    out = OutputRecord("source", "derivatives/x/source.mp4", "mp4", 16, 16, 1, "00" * 32, "video/mp4")
    for key in keys:  # each part commits and tells the parent
        ledger.rows[key] = dataclasses.replace(ledger.rows[key], state="running", lease_token="p")
        ended = ledger._held(key, "p", frozenset({JobState.RUNNING}), completed("m", [out], {}, 1001))
        requests.tell(ended)
    assert ledger.get(parent().job_key).state == JobState.REQUESTED
    assert [(arn, body) for arn, body, _, _ in queue.resent] == [
        ("arn:video", f'{{"job_key":"{parent().job_key}","mediajobs":"job"}}')
    ]


@pytest.mark.parametrize(
    ("source", "protocols"),
    [
        ("/w/original", "file"),
        ("original", "file"),
        ("https://bucket.s3.amazonaws.com/originals/a.mp4?versionId=v&X-Amz-Signature=s", "https,tls,tcp"),
        ("http://127.0.0.1:5000/bucket/originals/a.mp4?X-Amz-Signature=s", "http,tcp"),
    ],
)
def test_a_part_reads_its_presigned_url_with_exactly_that_urls_protocols(source, protocols):
    from mediajobs.bootstrap import load_recipe
    from mediajobs.domain.video import VideoProbe, audio_argv, input_protocols, plan_renditions, segment_argv

    assert input_protocols(source) == protocols
    params = load_recipe("web-video", 2).params
    probe = VideoProbe(format_name="mov,mp4", duration_s=6.0, codec="h264", coded_width=640, coded_height=360,
                       frames=180, audio_codec="aac")  # fmt: skip
    plan = plan_renditions(probe, params)
    for argv in (
        segment_argv("ffmpeg", source, probe, plan, params, 2.0, 2.0, "out"),
        audio_argv("ffmpeg", source, plan, params, "out"),
    ):
        assert argv[argv.index("-protocol_whitelist") + 1] == protocols
        assert argv[argv.index("-format_whitelist") + 1] == "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm"
        assert argv[argv.index("-i") + 1] == source


@pytest.mark.parametrize("source", ["ftp://host/a.mp4", "file:///etc/passwd", "concat:a|b", "data:,x"])
def test_no_other_url_is_read(source):
    from mediajobs.domain.video import input_protocols

    if "://" in source:
        with pytest.raises(ValueError):
            input_protocols(source)
    else:  # not a URL to ffmpeg's parsing here: a relative path, read with the file protocol only
        assert input_protocols(source) == "file"


def _doc(v_start: float, v_dur: float, a_start: float, a_dur: float) -> dict:
    return {
        "streams": [
            {"codec_type": "video", "start_time": f"{v_start:.6f}", "duration": f"{v_dur:.6f}"},
            {"codec_type": "audio", "start_time": f"{a_start:.6f}", "duration": f"{a_dur:.6f}"},
        ]
    }


def test_the_joined_audio_starts_and_ends_with_the_video_as_the_sources_does_within_a_frame():
    from mediajobs.domain.video import av_alignment_problems

    frame = 1 / 30
    source = _doc(0.0, 9.0, 0.0, 9.0)
    assert av_alignment_problems(_doc(0.0, 9.0, 0.0, 9.009), source, frame) == []  # AAC's last frame
    assert av_alignment_problems(_doc(0.0, 9.0, 0.0, 8.9), source, frame) == [
        "audio ends -100.0 ms from the video, the source's +0.0 ms"
    ]
    late = _doc(0.52, 8.48, 0.0, 9.0)  # a video that starts after its audio, kept so when joined
    assert av_alignment_problems(_doc(0.52, 8.48, 0.0, 9.009), late, frame) == []
    assert av_alignment_problems(_doc(0.0, 8.48, 0.0, 9.0), late, frame) == [
        "audio starts +0.0 ms from the video, the source's -520.0 ms",
        "audio ends +520.0 ms from the video, the source's +0.0 ms",
    ]
    assert av_alignment_problems({"streams": [{"codec_type": "video"}]}, source, frame) == []  # no audio


@pytest.mark.parametrize("segment_s", [0.5, 0.0, 86_401.0, float("nan")])
def test_a_segment_length_out_of_range_is_a_settings_error(segment_s):
    from mediajobs.settings import Settings

    with pytest.raises(ValueError, match="segment_s"):
        Settings(key_secret=TEST_KEY_SECRET, segment_s=segment_s)


def test_the_join_moves_the_video_and_the_audio_each_to_its_own_start():
    from mediajobs.domain.video import join_argv

    argv = join_argv("ffmpeg", "list.ffconcat", "a.m4a", "out.mp4", 0.5, 0.3)
    video, audio = argv.index("list.ffconcat"), argv.index("a.m4a")
    assert argv[argv.index("-itsoffset") + 1] == "0.500000" and argv.index("-itsoffset") < video
    assert argv[audio - 3 : audio + 1] == ["-itsoffset", "0.300000", "-i", "a.m4a"]
    assert "-itsoffset" not in join_argv("ffmpeg", "list.ffconcat", "a.m4a", "out.mp4")
    with pytest.raises(ValueError):
        join_argv("ffmpeg", "list.ffconcat", "a.m4a", "out.mp4", 0.0, -0.1)


def test_the_joined_video_lasts_as_long_as_the_sources_within_a_frame():
    from mediajobs.domain.video import video_duration_problem

    source = {"streams": [{"index": 1, "codec_type": "video", "duration": "6.000000"}]}
    joined = {"streams": [{"index": 0, "codec_type": "video", "duration": "6.010000"}]}
    assert video_duration_problem(joined, source, 1, 1 / 30) is None
    short = {"streams": [{"index": 0, "codec_type": "video", "duration": "5.900000"}]}
    assert video_duration_problem(short, source, 1, 1 / 30) == "video lasts 5.900 s, the source's 6.000 s"
    assert video_duration_problem(short, {"streams": [{"index": 1, "codec_type": "video"}]}, 1, 1 / 30) is None
