"""The pure rules of albums' promos (``domain/promo.py``): which assets an album's promo
shows and in what order, what its key hashes (and what it does not), the crop a frame
shows, and the ffmpeg argv of the slideshow."""

from __future__ import annotations

import copy

import pytest

from mediajobs.bootstrap import active_recipes, params_models, steps
from mediajobs.domain.assets import AssetJob, AssetJobState, AssetState, AssetVersion, AssetView
from mediajobs.domain.jobs import OutputInput, OutputRecord
from mediajobs.domain.plan import Where, plan_jobs
from mediajobs.domain.promo import (
    AlbumFrame,
    album_frames,
    card_input,
    concat_list,
    crop_box,
    decision_input,
    promo_spec,
    slideshow_argv,
    slideshow_seconds,
    slideshow_timeline,
    valid_prefix,
)
from mediajobs.domain.recipes import ALBUM, RecipeError, parse_recipe
from mediajobs.settings import Settings
from tests.fakes import TEST_KEY_SECRET, TEST_KEYS

PROMO = active_recipes()[ALBUM][0]
RAW = {
    "id": "promo",
    "version": 9,
    "media": "album",
    "step": "promo.slideshow",
    "params": PROMO.params.model_dump(mode="json"),
}


def key(n: int) -> str:
    return f"{n:064x}"


def card(job_key: str) -> OutputRecord:
    return OutputRecord("card", f"derivatives/{job_key}/card.webp", "webp", 800, 533, 10, "0" * 64, "image/webp")


def ready(name: str, card_job: str, *, state: AssetState = AssetState.READY, media: str = "image") -> AssetView:
    jobs = (
        AssetJob("moderation-image@1", key(999), AssetJobState.DONE),
        AssetJob("web-image@1", card_job, AssetJobState.DONE, outputs=(card(card_job),)),
    )
    return AssetView("media", f"originals/a/{name}", state, AssetVersion("v", "e", 1, "1"), media=media, jobs=jobs)


def spec_of(frames: list[AlbumFrame], policy: str = "1", recipe=PROMO, prefix: str = "originals/a/"):
    return promo_spec(
        recipe,
        frames,
        bucket="media",
        prefix=prefix,
        policy_version=policy,
        derivatives_prefix="derivatives/",
        rendition="card",
        keys=TEST_KEYS,
    )


@pytest.mark.parametrize(
    ("prefix", "problem"),
    [
        ("originals/party/", None),
        ("originals/2026/party/", None),
        ("originals/", "a folder under originals/"),
        ("photos/party/", "a folder under originals/"),
        ("originals/party", "ends with '/'"),
        ("originals/a//b/", "no empty"),
        ("originals/../x/", "no empty"),
        ("originals/a\nb/", "no control character"),
        ("originals/" + "x" * 900 + "/", "at most 900 bytes"),
    ],
)
def test_an_album_is_a_folder_under_originals(prefix, problem):
    found = valid_prefix(prefix, "originals/")
    assert (found is None) if problem is None else (problem in (found or ""))


def test_the_promo_shows_ready_assets_renditions_in_key_order_once_each_and_says_why_others_are_left_out():
    views = [
        ready("c.jpg", key(3)),
        ready("a.jpg", key(1)),
        ready("b-copy.jpg", key(1)),  # the same bytes as a.jpg: one rendition
        ready("d.png", key(4), state=AssetState.REJECTED),
        ready("e.png", key(5), state=AssetState.REVIEW),
        AssetView("media", "originals/a/f.mp4", AssetState.READY, AssetVersion("v", "e", 1, "1"), media="video"),
        ready("g.jpg", key(7)),  # its rendition's row is not done (collected since)
    ]
    decided = {key(1): key(101), key(3): key(103), key(4): key(104), key(5): key(105)}
    frames, left = album_frames(views, "card", decided, max_cards=60)
    assert [(f.asset_key, f.rendition_job_key, f.decision_id) for f in frames] == [
        ("originals/a/a.jpg", key(1), key(101)),
        ("originals/a/c.jpg", key(3), key(103)),
    ]
    assert [(x.asset_key, x.state, x.why) for x in left] == [
        ("originals/a/b-copy.jpg", "ready", "the same picture as originals/a/a.jpg"),
        ("originals/a/d.png", "rejected", "rejected by the moderation policy"),
        ("originals/a/e.png", "review", "held for review"),
        ("originals/a/f.mp4", "ready", "no 'card' rendition (video)"),
        ("originals/a/g.jpg", "ready", "its 'card' rendition is not done now"),
    ]
    frames, left = album_frames(views, "card", decided, max_cards=1)
    assert [f.asset_key for f in frames] == ["originals/a/a.jpg"]
    assert ("originals/a/c.jpg", "beyond the recipe's 1 cards") in [(x.asset_key, x.why) for x in left]


def test_the_key_hashes_renditions_decisions_recipe_and_policy_never_the_asset_keys():
    frames = [
        AlbumFrame("originals/a/1.jpg", key(1), "web-image@1", key(11)),
        AlbumFrame("originals/a/2.jpg", key(2), "web-image@1", key(12)),
    ]
    spec = spec_of(frames)
    assert spec.inputs == {
        card_input(0): OutputInput(key(1), "card"),
        decision_input(0): OutputInput(key(11), "decisions"),
        card_input(1): OutputInput(key(2), "card"),
        decision_input(1): OutputInput(key(12), "decisions"),
    }
    assert spec.about == {"card-0000": "originals/a/1.jpg", "card-0001": "originals/a/2.jpg"}
    assert (spec.source_key, spec.output_prefix) == ("originals/a/", f"derivatives/{spec.job_key}/")
    renamed = [
        AlbumFrame(f"originals/b/{i}.jpg", f.rendition_job_key, f.rendition_recipe, f.decision_id)
        for i, f in enumerate(frames)
    ]
    assert spec_of(renamed, prefix="originals/b/").job_key == spec.job_key  # names are never identity
    assert spec_of(frames[::-1]).job_key != spec.job_key  # the order is what is shown
    assert spec_of(frames[:1]).job_key != spec.job_key
    assert spec_of(frames, policy="2").job_key != spec.job_key
    other = parse_recipe(
        {**RAW, "params": {**RAW["params"], "seconds_per_card": 3.0}},
        params_models(steps(Settings(key_secret=TEST_KEY_SECRET))),
    )
    assert spec_of(frames, recipe=other).job_key != spec.job_key
    redecided = [AlbumFrame(f.asset_key, f.rendition_job_key, f.rendition_recipe, key(99)) for f in frames]
    assert spec_of(redecided).job_key != spec.job_key
    with pytest.raises(ValueError, match="at least one frame"):
        spec_of([])


def test_without_a_policy_a_frame_has_no_decision_input():
    spec = spec_of([AlbumFrame("originals/a/1.jpg", key(1), "web-image@1", None)], policy="none")
    assert spec.inputs == {card_input(0): OutputInput(key(1), "card")}


def test_an_upload_of_unknown_media_never_plans_an_albums_recipe():
    jobs = plan_jobs(key(1), None, active_recipes(), Where("media", "originals/x", "derivatives/", "1", TEST_KEYS))
    assert {j.recipe.media for j in jobs} == {"image", "video"}
    assert not [
        j
        for j in plan_jobs(key(1), "image", active_recipes(), Where("media", "k", "d/", "1", TEST_KEYS))
        if j.recipe.id == "promo"
    ]


@pytest.mark.parametrize(
    ("size", "frame", "box"),
    [
        ((800, 533), (800, 450), (0, 41, 800, 491)),  # a landscape card: top and bottom cut
        ((533, 800), (800, 450), (0, 250, 533, 550)),  # a portrait one: its middle band
        ((1600, 450), (800, 450), (400, 0, 1200, 450)),  # a panorama: its sides cut
        ((800, 450), (800, 450), (0, 0, 800, 450)),
    ],
)
def test_a_frame_shows_the_centred_crop_with_the_frames_aspect_ratio(size, frame, box):
    assert crop_box(*size, *frame) == box


def test_a_slideshow_lasts_each_card_less_the_overlapping_fades():
    assert slideshow_seconds(1, 2.5, 0.5) == 2.5
    assert slideshow_seconds(7, 2.5, 0.5) == pytest.approx(14.5)
    assert slideshow_seconds(3, 2.0, 0.0) == 6.0


def test_a_slideshows_timeline_holds_each_card_then_blends_it_into_the_next_and_lasts_its_length():
    timeline = slideshow_timeline(3, 2.5, 0.5, 25)
    holds = [f for f in timeline if f.alpha == 0]
    assert [(f.card, f.duration_s) for f in holds] == [(0, 2.0), (1, 1.5), (2, 2.0)]
    fades = [f for f in timeline if f.alpha > 0]
    assert len(fades) == 2 * 12 and {f.card for f in fades} == {0, 1}  # round(0.5 x 25) pictures each
    assert [round(f.alpha, 4) for f in fades[:12]] == [round((j + 1) / 13, 4) for j in range(12)]
    assert sum(f.duration_s for f in timeline) == pytest.approx(slideshow_seconds(3, 2.5, 0.5))
    assert [(f.card, f.duration_s) for f in slideshow_timeline(1, 2.5, 0.5, 25)] == [(0, 2.5)]
    assert [f.alpha for f in slideshow_timeline(2, 2.0, 0.0, 25)] == [0, 0]  # cuts
    assert len([f for f in slideshow_timeline(2, 2.0, 0.01, 25) if f.alpha]) == 1  # under a frame: one picture
    with pytest.raises(ValueError, match="at least one frame"):
        slideshow_timeline(0, 2.5, 0.5, 25)


def test_the_concat_list_names_only_frame_files_and_repeats_the_last():
    text = concat_list([("card-0000.ppm", 2.0), ("fade-00001.ppm", 0.04), ("card-0001.ppm", 2.0)])
    assert text.splitlines() == [
        "ffconcat version 1.0",
        "file card-0000.ppm", "duration 2.000000",
        "file fade-00001.ppm", "duration 0.040000",
        "file card-0001.ppm", "duration 2.000000",
        "file card-0001.ppm",
    ]  # fmt: skip
    for name in ("../x.ppm", "a b.ppm", "x.ppm\nfile /etc/passwd", "/abs.ppm", "x.png", "-x.ppm"):
        with pytest.raises(ValueError, match="not a frame file name"):
            concat_list([(name, 1.0)])


def test_the_slideshow_argv_reads_one_concat_list_with_the_file_protocol_and_ppm_demuxers_only():
    argv = slideshow_argv(
        "ffmpeg", "/w/slideshow.ffconcat", "/w/promo.mp4", seconds=4.5, fps=25, crf=23, preset="veryfast"
    )
    assert argv.count("-i") == 1 and argv[argv.index("-i") + 1] == "/w/slideshow.ffconcat"
    assert argv[argv.index("-format_whitelist") + 1] == "concat,image2,ppm_pipe"
    assert argv[argv.index("-protocol_whitelist") + 1] == "file"
    assert argv[argv.index("-f") + 1] == "concat" and argv[argv.index("-safe") + 1] == "1"
    assert argv.index("-format_whitelist") < argv.index("-i")  # input options, before the input
    assert argv[argv.index("-t") + 1] == "4.500" and argv[-1] == "/w/promo.mp4"
    assert argv[argv.index("-vf") + 1] == "fps=25,setsar=1,format=yuv420p"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"crossfade_s": 1.25}, "less than half"),
        ({"width_px": 801}, "multiple of 2"),
        ({"max_cards": 201}, "less than or equal to 200"),
        ({"transition": "wipe"}, "Extra inputs"),
    ],
)
def test_the_promo_recipes_params_are_validated_strictly(change, match):
    document = copy.deepcopy(RAW)
    document["params"].update(change)
    with pytest.raises(RecipeError, match=match):
        parse_recipe(document, params_models(steps(Settings(key_secret=TEST_KEY_SECRET))))
