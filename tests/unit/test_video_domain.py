"""Video decisions without ffmpeg: probe parsing, the plan, argv, classification, budget, checks."""

from __future__ import annotations

import pytest

from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import PermanentFailure, TransientFailure
from mediajobs.domain.video import (
    FORMAT_WHITELIST,
    Budget,
    Expected,
    VideoProbe,
    check_budget,
    classify,
    decisions_for,
    estimated_seconds,
    expected_output_bytes,
    ffprobe_argv,
    fit_level,
    media_duration_s,
    packets_end_s,
    parse_probe,
    plan_renditions,
    playlist_problem,
    poster_argv,
    progress_seconds,
    rendition_failure,
    rendition_problems,
    renditions_argv,
    scaled_width,
    tonemap_filter,
)

PARAMS = load_recipe("web-video", 2).params  # the active recipe
#: Version 1: no frame rate cap (still valid for the job keys made with it).
V1_PARAMS = load_recipe("web-video", 1).params
MP4 = "mov,mp4,m4a,3gp,3g2,mj2"


def probe_doc(streams: list[dict], format_name: str = MP4, duration: str = "2.000000") -> dict:
    return {"format": {"format_name": format_name, "duration": duration}, "streams": streams}


def video(width: int = 1280, height: int = 720, **extra: object) -> dict:
    return {
        "codec_type": "video",
        "codec_name": "h264",
        "width": width,
        "height": height,
        "pix_fmt": "yuv420p",
        **extra,
    }


AUDIO = {"codec_type": "audio", "codec_name": "aac"}


def test_the_recipe_is_data_with_the_issues_ladder() -> None:
    recipe = load_recipe("web-video", 1)
    assert recipe.media == "video" and recipe.step == "video.renditions"
    rungs = {r.name: (r.height_px, r.crf, r.maxrate_kbps, r.bufsize_kbps, r.audio_kbps) for r in PARAMS.rungs}
    assert rungs == {"720p": (720, 23, 2500, 5000, 128), "360p": (360, 26, 800, 1600, 96)}
    enc = PARAMS.encoding
    assert (enc.codec, enc.preset, enc.profile, enc.level, enc.pix_fmt, enc.faststart) == (
        "libx264", "veryfast", "high", "4.0", "yuv420p", True,
    )  # fmt: skip
    assert (PARAMS.poster.at_fraction, PARAMS.poster.box_px) == (0.1, 1280)


def test_a_display_matrix_of_minus_90_makes_the_picture_portrait() -> None:
    probe = parse_probe(probe_doc([video(side_data_list=[{"rotation": -90}]), AUDIO]))
    assert probe.rotation == 90 and probe.display_size == (720, 1280) and probe.has_audio


def test_cover_art_is_not_a_video_stream() -> None:
    art = video(disposition={"attached_pic": 1}) | {"codec_name": "mjpeg"}
    with pytest.raises(PermanentFailure) as caught:
        parse_probe(probe_doc([AUDIO, art]))
    assert caught.value.reason == "no_video_stream"


@pytest.mark.parametrize("format_name", ["hls", "concat", "mpegts", "image2", "mov,mp4,m4a,3gp,3g2,mj2,hls", ""])
def test_only_allow_listed_demuxers_are_accepted(format_name: str) -> None:
    with pytest.raises(PermanentFailure) as caught:
        parse_probe(probe_doc([video()], format_name=format_name))
    assert caught.value.reason == "unsupported_container"


def test_matroska_and_webm_are_accepted() -> None:
    assert parse_probe(probe_doc([video()], format_name="matroska,webm")).format_name == "matroska,webm"


def test_a_codec_outside_the_list_is_refused() -> None:
    with pytest.raises(PermanentFailure) as caught:
        parse_probe(probe_doc([video(codec_name="cinepak")]))
    assert caught.value.reason == "unsupported_codec"


def test_no_duration_is_invalid_media() -> None:
    with pytest.raises(PermanentFailure) as caught:
        parse_probe(probe_doc([video()], duration="N/A"))
    assert caught.value.reason == "invalid_media"


@pytest.mark.parametrize(
    ("size", "height", "width"),
    [((720, 1280), 720, 406), ((720, 1280), 360, 202), ((1279, 721), 720, 1278), ((1279, 721), 360, 638),
     ((1920, 1080), 720, 1280), ((640, 272), 272, 640), ((100, 60), 60, 100)],
)  # fmt: skip
def test_scaled_width_is_what_scale_minus_2_gives(size: tuple[int, int], height: int, width: int) -> None:
    assert scaled_width(*size, height) == width


def test_rungs_taller_than_the_source_are_skipped() -> None:
    plan = plan_renditions(parse_probe(probe_doc([video(640, 360)])), PARAMS)
    assert [(r.name, r.width, r.height) for r in plan.renditions] == [("360p", 640, 360)]
    assert plan.skipped == ("720p",)


def test_a_source_shorter_than_every_rung_gets_one_source_rendition_at_even_height() -> None:
    plan = plan_renditions(parse_probe(probe_doc([video(177, 145)])), PARAMS)
    assert [(r.name, r.width, r.height) for r in plan.renditions] == [("source", 176, 144)]
    assert plan.skipped == ("720p", "360p")
    assert plan.renditions[0].rung.name == "360p"  # the smallest rung's settings


def test_the_poster_fits_1280_and_is_taken_at_a_tenth() -> None:
    plan = plan_renditions(parse_probe(probe_doc([video(3840, 2160)], duration="600.0")), PARAMS)
    assert plan.poster_size == (1280, 720) and plan.poster_at_s == 60.0


def _probe(**kw: object) -> VideoProbe:
    """A probe of 2 s of 1280x720 H.264 at 30 fps unless told otherwise (frames follow the duration)."""
    base: dict = {"format_name": MP4, "duration_s": 2.0, "codec": "h264", "coded_width": 1280, "coded_height": 720}
    base["frames"] = round(30 * float(kw.get("duration_s", base["duration_s"])))  # type: ignore[arg-type]
    return VideoProbe(**(base | kw))


def test_the_renditions_argv_is_one_decode_with_split_and_the_inputs_guard() -> None:
    probe = _probe(audio_codec="aac")
    plan = plan_renditions(probe, PARAMS)
    argv = renditions_argv("/opt/bin/ffmpeg", "/tmp/w/original", probe, plan, PARAMS, "/tmp/w/out")
    assert argv[0] == "/opt/bin/ffmpeg" and all(isinstance(a, str) for a in argv)
    for flag in ("-nostdin", "-hide_banner"):
        assert flag in argv
    assert argv[argv.index("-progress") + 1] == "pipe:1"
    assert argv[argv.index("-format_whitelist") + 1] == FORMAT_WHITELIST
    assert argv[argv.index("-protocol_whitelist") + 1] == "file"
    assert argv.index("-format_whitelist") < argv.index("-i") and argv.count("-i") == 1
    graph = argv[argv.index("-filter_complex") + 1]
    assert "split=2[s0][s1]" in graph and "scale=1280:720,setsar=1" in graph and "scale=640:360,setsar=1" in graph
    assert argv.count("+faststart") == 2 and argv.count("0:a:0?") == 2
    assert argv[-1] == "/tmp/w/out/360p.mp4" and "/tmp/w/out/720p.mp4" in argv
    assert "-map_metadata" in argv  # no location or device tags copied


def test_hdr_sources_are_tone_mapped_and_tagged_bt709() -> None:
    probe = _probe(color_transfer="arib-std-b67", color_primaries="bt2020", pix_fmt="yuv420p10le", bit_depth=10)
    plan = plan_renditions(probe, PARAMS)
    argv = renditions_argv("ffmpeg", "in", probe, plan, PARAMS, "out")
    graph = argv[argv.index("-filter_complex") + 1]
    source = "zscale=tin=arib-std-b67:pin=2020:min=2020_ncl:rin=limited:p=2020:m=2020_ncl:t=linear"
    assert source in graph and "tonemap=" in graph
    assert argv[argv.index("-color_trc") + 1] == "bt709" and argv[argv.index("-colorspace") + 1] == "bt709"
    poster = poster_argv("ffmpeg", "in", probe, plan, PARAMS, "out/poster.jpg")
    assert "tonemap=tonemap=mobius" in poster[poster.index("-vf") + 1]


def test_the_poster_seeks_before_the_input() -> None:
    probe = _probe(duration_s=10.0)
    argv = poster_argv("ffmpeg", "in", probe, plan_renditions(probe, PARAMS), PARAMS, "out/poster.jpg")
    assert argv.index("-ss") < argv.index("-i") and argv[argv.index("-ss") + 1] == "1.000"
    assert argv[argv.index("-protocol_whitelist") + 1] == "file"


def test_the_probe_argv_is_guarded_too() -> None:
    argv = ffprobe_argv("ffprobe", "in")
    assert argv[argv.index("-format_whitelist") + 1] == FORMAT_WHITELIST and "-protocol_whitelist" in argv


def test_out_time_ms_is_microseconds() -> None:
    assert progress_seconds({"out_time_ms": "2500000"}) == 2.5
    assert progress_seconds({"out_time_us": "1000000", "out_time_ms": "1000000"}) == 1.0
    assert progress_seconds({"out_time_us": "N/A"}) is None


@pytest.mark.parametrize(
    ("stderr", "reason"),
    [
        ("[mov,mp4 @ 0x1] moov atom not found\nin: Invalid data found when processing input", "invalid_media"),
        ("in: Invalid data found when processing input", "invalid_media"),
        ("[hls @ 0x1] Format not on whitelist 'mov,mp4'", "unsupported_container"),
        ("[tcp @ 0x1] Protocol not on whitelist 'file'!", "unsupported_container"),
        ("Decoder (codec vp6) not found for input stream #0:0", "unsupported_codec"),
        ("Stream map '0:v:0' matches no streams.", "no_video_stream"),
        ("Output file #0 does not contain any stream", "no_video_stream"),
    ],
)
def test_classification_names_permanent_reasons(stderr: str, reason: str) -> None:
    failure = classify(stderr)
    assert failure is not None and failure.reason == reason


@pytest.mark.parametrize("stderr", ["", "Killed", "No space left on device", "Conversion failed!"])
def test_anything_else_is_transient(stderr: str) -> None:
    assert classify(stderr) is None


def test_moov_detail_names_the_atom() -> None:
    failure = classify("[mov,mp4 @ 0x1] moov atom not found\nx: Invalid data found when processing input")
    assert failure is not None and failure.detail == "moov atom not found"


BUDGET = Budget(speed_factor=1.0, max_duration_s=1800, invocation_s=880, free_bytes=10**10, capacity_bytes=10**10)


def test_a_video_longer_than_the_limit_is_too_long() -> None:
    probe = _probe(duration_s=3600.0)
    with pytest.raises(PermanentFailure) as caught:
        check_budget(probe, plan_renditions(probe, PARAMS), BUDGET)
    assert caught.value.reason == "too_long"


def test_a_video_whose_estimate_exceeds_an_invocation_is_too_long() -> None:
    probe = _probe(duration_s=1000.0, coded_width=1920, coded_height=1080)
    with pytest.raises(PermanentFailure) as caught:
        check_budget(probe, plan_renditions(probe, PARAMS), BUDGET)
    assert caught.value.reason == "too_long" and "880" in caught.value.detail


def test_outputs_that_cannot_fit_the_disk_are_too_large() -> None:
    probe = _probe(duration_s=600.0)
    small_disk = Budget(1.0, 1800, 880, free_bytes=100_000_000, capacity_bytes=100_000_000)
    with pytest.raises(PermanentFailure) as caught:
        check_budget(probe, plan_renditions(probe, PARAMS), small_disk)
    assert caught.value.reason == "too_large"


def test_outputs_that_fit_the_disk_but_not_its_free_space_now_are_transient() -> None:
    probe = _probe(duration_s=600.0)
    crowded = Budget(1.0, 1800, 880, free_bytes=100_000_000, capacity_bytes=2_000_000_000)
    with pytest.raises(TransientFailure):
        check_budget(probe, plan_renditions(probe, PARAMS), crowded)


def test_a_video_that_fits_passes() -> None:
    probe = _probe(duration_s=60.0)
    check_budget(probe, plan_renditions(probe, PARAMS), BUDGET)


def _out(**stream: object) -> dict:
    v = {"codec_type": "video", "codec_name": "h264", "profile": "High", "pix_fmt": "yuv420p", "width": 406,
         "height": 720} | stream  # fmt: skip
    return {"format": {"duration": "2.030"}, "streams": [v, {"codec_type": "audio", "codec_name": "aac"}]}


def test_a_right_output_has_no_problems() -> None:
    assert rendition_problems(_out(), Expected(406, 720, 2.0, audio=True), moov_first=True) == []


def test_each_check_finds_its_fault() -> None:
    expected = Expected(406, 720, 2.0, audio=True)
    assert rendition_problems(_out(profile="High 4:4:4 Predictive"), expected, moov_first=True)
    assert rendition_problems(_out(width=720, height=406), expected, moov_first=True)
    assert rendition_problems(_out(side_data_list=[{"rotation": -90}]), expected, moov_first=True)
    assert rendition_problems(_out(), Expected(406, 720, 2.2, audio=True), moov_first=True)
    assert rendition_problems(_out(), Expected(406, 720, 2.0, audio=False), moov_first=True)
    assert rendition_problems(_out(), expected, moov_first=False) == ["moov atom after mdat"]


@pytest.mark.parametrize(
    "head",
    [b"#EXTM3U\n#EXT-X-VERSION:3\n", b"\xef\xbb\xbf#EXTM3U\n", b"  \n#EXT-X-TARGETDURATION:2",
     b"ffconcat version 1.0\n", b'<?xml version="1.0"?>\n<MPD xmlns="urn:mpeg:dash:schema:mpd:2011">', b"#extm3u\n"],
)  # fmt: skip
def test_playlists_and_scripts_are_refused_from_their_first_bytes(head: bytes) -> None:
    problem = playlist_problem(head)
    assert problem is not None and problem.reason == "unsupported_container"


def test_media_bytes_are_not_playlists() -> None:
    assert playlist_problem(b"\x00\x00\x00\x20ftypisom") is None
    assert playlist_problem(b'<?xml version="1.0"?><Error><Code>AccessDenied</Code></Error>') is None


def test_an_output_that_ends_early_means_the_source_was_cut() -> None:
    expected = Expected(406, 720, 4.0, audio=True)
    failure = rendition_failure("720p", _out(), expected, moov_first=True)  # 2.03 s of 4 s
    assert failure is not None and failure.reason == "invalid_media"
    failure = rendition_failure("720p", _out(pix_fmt="yuv444p"), expected, moov_first=True)
    assert failure is not None and failure.reason == "invalid_output" and failure.detail.startswith("720p: ")
    assert rendition_failure("720p", _out(), Expected(406, 720, 2.0, audio=True), moov_first=True) is None


def test_a_thin_strip_gets_its_planned_even_size_not_scale_minus_2() -> None:
    probe = _probe(coded_width=2, coded_height=1000)
    plan = plan_renditions(probe, PARAMS)
    assert [(r.name, r.width, r.height) for r in plan.renditions] == [("720p", 2, 720), ("360p", 2, 360)]
    graph = renditions_argv("ffmpeg", "in", probe, plan, PARAMS, "out")
    graph_text = graph[graph.index("-filter_complex") + 1]
    assert "scale=2:720,setsar=1" in graph_text and "scale=-2" not in graph_text


def test_a_one_pixel_high_source_is_never_widened() -> None:
    plan = plan_renditions(_probe(coded_width=1000, coded_height=1), PARAMS)
    assert [(r.name, r.width, r.height) for r in plan.renditions] == [("source", 1000, 2)]


def test_cover_art_before_the_video_is_not_what_gets_encoded() -> None:
    art = video(320, 320, codec_name="mjpeg", index=0, disposition={"attached_pic": 1})
    probe = parse_probe(probe_doc([art, video(640, 360, index=1), AUDIO | {"index": 2}]))
    assert probe.stream_index == 1 and probe.display_size == (640, 360)
    plan = plan_renditions(probe, PARAMS)
    argv = renditions_argv("ffmpeg", "in", probe, plan, PARAMS, "out")
    assert argv[argv.index("-filter_complex") + 1].startswith("[0:1]")
    poster = poster_argv("ffmpeg", "in", probe, plan, PARAMS, "out/poster.jpg")
    assert poster[poster.index("-map") + 1] == "0:1"


def test_anamorphic_pixels_are_made_square() -> None:
    probe = parse_probe(probe_doc([video(720, 576, sample_aspect_ratio="64:45")]))
    assert probe.display_size == (1024, 576)
    plan = plan_renditions(probe, PARAMS)
    assert [(r.name, r.width, r.height) for r in plan.renditions] == [("360p", 640, 360)]
    assert plan.poster_size == (1024, 576)


@pytest.mark.parametrize("sar", ["0:1", "1:0", "N/A", "1000:1", None])
def test_unknown_or_absurd_pixel_aspect_is_square(sar: str | None) -> None:
    assert parse_probe(probe_doc([video(720, 576, sample_aspect_ratio=sar)])).display_size == (720, 576)


def test_each_rendition_is_cut_just_past_the_declared_duration() -> None:
    probe = _probe(duration_s=1.0)
    argv = renditions_argv("ffmpeg", "in", probe, plan_renditions(probe, PARAMS), PARAMS, "out")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "-t"] == ["1.500", "1.500"]


def test_the_duration_runs_from_the_first_start_to_the_last_end() -> None:
    fmt = {"duration": "8.000", "start_time": "5.000"}
    assert media_duration_s(fmt, []) == 3.0  # Matroska stores the end time
    streams = [{"duration": "3.0", "start_time": "0.0"}, {"duration": "3.0", "start_time": "0.5"}]
    assert media_duration_s({"duration": "36000"}, streams) == 3.5  # tracks win over mvhd
    assert media_duration_s({"duration": "N/A"}, [{"duration": "N/A"}]) is None


def test_without_any_stored_duration_the_packets_give_it() -> None:
    assert packets_end_s("0.000000,0.033000\n1.000000,0.033000\nN/A,N/A\n3.967000,0.033000\n") == 4.0
    assert packets_end_s("") is None
    doc = probe_doc([video()], duration="N/A")
    assert parse_probe(doc, packets_duration_s=4.0).duration_s == 4.0


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        ({"color_primaries": "bt2020"}, "tin=709:pin=2020:min=2020_ncl:rin=limited"),
        ({"color_transfer": "smpte2084"}, "tin=smpte2084:pin=2020:min=2020_ncl:rin=limited"),
        ({"color_transfer": "arib-std-b67", "color_primaries": "bt2020", "color_space": "bt2020nc",
          "color_range": "pc"}, "tin=arib-std-b67:pin=2020:min=2020_ncl:rin=full"),
    ],
)  # fmt: skip
def test_partial_colour_tags_are_completed_for_zscale(tags: dict, expected: str) -> None:
    assert tonemap_filter(_probe(**tags)).startswith(f"zscale={expected}:")


def test_sizes_over_the_level_are_shrunk_to_fit_it() -> None:
    assert fit_level(1280, 720, "4.0") == (1280, 720)
    assert fit_level(9000, 16, "4.0") == (4096, 6)
    w, h = fit_level(5760, 360, "4.0")
    assert w <= 4096 and -(-w // 16) * -(-h // 16) <= 8192 and w % 2 == h % 2 == 0


def test_variable_frame_rate_is_kept() -> None:
    probe = _probe()
    argv = renditions_argv("ffmpeg", "in", probe, plan_renditions(probe, PARAMS), PARAMS, "out")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "-fps_mode"] == ["vfr", "vfr"]


@pytest.mark.parametrize(
    "stderr", ["original: End of file", "original: Input/output error", "code 3074: no path between colorspaces"]
)
def test_header_cuts_and_colour_dead_ends_are_invalid_media(stderr: str) -> None:
    failure = classify(stderr)
    assert failure is not None and failure.reason == "invalid_media"
    assert not failure.detail.startswith(":")


# --- frames: the budget counts them (issue 12) ---------------------------------------------


def tiny(duration: str, frames: int, **stream: object) -> VideoProbe:
    """A probe of 16x16 H.264 lasting ``duration`` seconds whose packets ffprobe counted."""
    return parse_probe(probe_doc([video(16, 16, nb_read_packets=str(frames), **stream)], duration=duration))


def test_a_clip_of_millions_of_tiny_frames_is_estimated_by_its_frames_and_refused_for_its_rate() -> None:
    # 100 s of 16x16 at 50,000 fps: 5 million frames, about 125 MB at the 25 bytes a frame
    # x264 writes. Duration x pixels called it 25 s of work; encoding every frame is 937 s,
    # and capped at 60 fps decoding them still is 677 s. Its rate refuses it first, from the probe.
    probe = tiny("100.000000", 5_000_000, avg_frame_rate="50000/1")
    assert estimated_seconds(probe, plan_renditions(probe, V1_PARAMS), 1.0) == pytest.approx(937, abs=0.5)
    assert estimated_seconds(probe, plan_renditions(probe, PARAMS), 1.0) == pytest.approx(677, abs=0.5)
    for params in (V1_PARAMS, PARAMS):
        with pytest.raises(PermanentFailure) as caught:
            check_budget(probe, plan_renditions(probe, params), BUDGET)
        assert caught.value.reason == "too_many_frames"
        assert caught.value.detail.startswith("5,000,000 frames in 100.0 s (50,000 a second) > 5,000 a second:")
        assert "MAX_SOURCE_FPS" in caught.value.detail


@pytest.mark.parametrize(
    ("duration", "frames", "refused"),
    [("20.000000", 1_000_000, True), ("2.000000", 6_000, False), ("10.000000", 50_000, False),
     ("10.000000", 50_010, True), ("60.000000", 57_600, False)],
)  # fmt: skip
def test_a_source_over_5000_frames_a_second_is_too_many_frames(duration: str, frames: int, refused: bool) -> None:
    # the issue's 20 s at 50,000 fps; case V10's 3,000 fps; exactly 5,000; just over; 960 fps slow motion
    probe = tiny(duration, frames)
    if not refused:
        check_budget(probe, plan_renditions(probe, PARAMS), BUDGET)
        return
    with pytest.raises(PermanentFailure) as caught:
        check_budget(probe, plan_renditions(probe, PARAMS), BUDGET)
    assert caught.value.reason == "too_many_frames"


def test_at_the_input_limit_even_decoding_the_tiny_frames_is_too_long() -> None:
    # 4,000 fps (under the rate bound) for 1,700 s: 6.8 million frames, decoding them alone
    # is estimated at 907 s, over the invocation's 880.
    probe = tiny("1700.000000", 6_800_000, avg_frame_rate="4000/1")
    with pytest.raises(PermanentFailure) as caught:
        check_budget(probe, plan_renditions(probe, PARAMS), BUDGET)
    assert caught.value.reason == "too_long" and "6800000 frames to decode" in caught.value.detail


def test_the_issues_clip_is_no_longer_estimated_at_5_seconds() -> None:
    # 20 s of 16x16 at 50,000 fps took about a minute to encode here (speed factor 0.45).
    probe = tiny("20.000000", 1_000_000, avg_frame_rate="50000/1")
    pixels = 0.5 * 256 / (1920 * 1080)  # DECODE_SHARE (and the rest) x pixels of 1080p
    decoded, encoded = pixels + 0.004, pixels + 0.0015  # plus DECODE_FRAME_COST, ENCODE_FRAME_COST
    uncapped = plan_renditions(probe, V1_PARAMS)
    assert estimated_seconds(probe, uncapped, 1.0) == pytest.approx(1_000_000 * (decoded + encoded) / 30)  # 187 s
    capped = plan_renditions(probe, PARAMS)
    assert (capped.fps_cap, capped.frames_out) == (60, 1231)  # ceil(60 x 20.5 s) + 1
    assert estimated_seconds(probe, capped, 1.0) == pytest.approx((1_000_000 * decoded + 1231 * encoded) / 30)  # 135 s


def test_the_estimate_scales_with_the_frames() -> None:
    estimates = [
        estimated_seconds(probe, plan_renditions(probe, V1_PARAMS), 1.0)
        for fps in (25_000, 50_000, 100_000)
        for probe in [tiny("20.000000", 20 * fps)]
    ]
    assert estimates[1] == pytest.approx(2 * estimates[0]) and estimates[2] == pytest.approx(2 * estimates[1])
    # and with the speed factor; 1080p at 30 fps is still duration x speed factor, plus the frames' cost
    hd = _probe(duration_s=60.0, coded_width=1920, coded_height=1080)
    assert estimated_seconds(hd, plan_renditions(hd, PARAMS), 0.5) == pytest.approx(0.5 * 60 * (1 + 0.004 + 0.0015))
    sixty = _probe(duration_s=60.0, coded_width=1920, coded_height=1080, frames=3600)  # twice the frames
    assert estimated_seconds(sixty, plan_renditions(sixty, PARAMS), 0.5) == pytest.approx(0.5 * 120 * 1.0055)


def test_the_output_estimate_counts_a_minimum_per_frame() -> None:
    # Measured: 25 MB for the issue's clip, against 3 MB estimated from the VBV cap alone.
    probe = tiny("20.000000", 1_000_000, avg_frame_rate="50000/1")
    vbv = 800 * 1000 // 8 * 20  # the source rendition has the 360p rung's 800 kbit/s
    assert expected_output_bytes(probe, plan_renditions(probe, V1_PARAMS)) == vbv + 1_000_000 * 32 + 1_000_000
    assert expected_output_bytes(probe, plan_renditions(probe, PARAMS)) == vbv + 1231 * 32 + 1_000_000


def test_counted_packets_decide_the_frames_whatever_the_header_says() -> None:
    # A container that understates its rate: declares 30 fps, holds 100,000 frames in 2 s.
    assert tiny("2.000000", 100_000, avg_frame_rate="30/1", r_frame_rate="30/1").frames == 100_000
    # r_frame_rate is the timestamp grid (90000/1 for a 30 fps phone clip), never a count.
    phone = parse_probe(probe_doc([video(r_frame_rate="90000/1", avg_frame_rate="30/1", nb_read_packets="60")]))
    assert (phone.frames, phone.frame_rate_fps) == (60, 30.0)
    # The MP4 sample count when nothing was counted; then the declared average; then 30 fps.
    assert parse_probe(probe_doc([video(nb_frames="48", avg_frame_rate="30/1")])).frames == 48
    assert parse_probe(probe_doc([video(avg_frame_rate="25/1", r_frame_rate="1000/1")])).frames == 50
    assert parse_probe(probe_doc([video(avg_frame_rate="0/0", nb_frames="N/A")])).frames == 60


def test_only_a_source_above_max_fps_is_capped() -> None:
    at_cap = _probe(frames=120)  # 60 fps over 2 s
    assert (plan_renditions(at_cap, PARAMS).fps_cap, plan_renditions(at_cap, PARAMS).frames_out) == (None, 120)
    above = _probe(frames=122)  # 61 fps
    assert (plan_renditions(above, PARAMS).fps_cap, plan_renditions(above, PARAMS).frames_out) == (60, 151)
    assert plan_renditions(above, V1_PARAMS).fps_cap is None  # version 1 has no cap


def test_the_decoded_frames_stop_at_the_count_and_the_cap_is_an_fps_filter_before_the_split() -> None:
    above = _probe(frames=6000, audio_codec="aac")
    argv = renditions_argv("ffmpeg", "in", above, plan_renditions(above, PARAMS), PARAMS, "out")
    graph = argv[argv.index("-filter_complex") + 1]
    assert graph.startswith("[0:0]trim=end_frame=6000,fps=60,format=yuv420p,split=2[s0][s1];")
    # not -fpsmax (refused with -fps_mode vfr) nor -frames:v (it would cut the audio at the video's end)
    assert "-fpsmax" not in argv and "-r" not in argv and "-frames:v" not in argv
    kept = _probe(frames=60)
    argv = renditions_argv("ffmpeg", "in", kept, plan_renditions(kept, PARAMS), PARAMS, "out")
    assert argv[argv.index("-filter_complex") + 1].startswith("[0:0]trim=end_frame=60,format=yuv420p,split=2")


def test_the_probe_counts_every_packet() -> None:
    assert "-count_packets" in ffprobe_argv("ffprobe", "in")


def test_the_decisions_record_the_frames_and_the_cap() -> None:
    probe = tiny("2.000000", 6000)
    decisions = decisions_for(probe, plan_renditions(probe, PARAMS), "ffmpeg version 7.0.2").to_json()
    assert (decisions["source_frames"], decisions["fps_cap"]) == (6000, 60)
