"""Recipes are data: web-image@1's and web-video@2's values, strict loading, and the fit rule."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest

from mediajobs.bootstrap import active_recipes, load_recipe, params_models, steps
from mediajobs.domain import recipes as domain_recipes
from mediajobs.domain.recipes import RecipeError, fit_within
from mediajobs.settings import Settings

#: The parameters models of the registered steps: recipes are validated through the registry.
MODELS = params_models(steps(Settings()))


def parse_recipe(document):
    return domain_recipes.parse_recipe(document, MODELS)


RAW = json.loads(resources.files("mediajobs.recipes").joinpath("web-image.v1.json").read_text())
VIDEO_V2 = json.loads(resources.files("mediajobs.recipes").joinpath("web-video.v2.json").read_text())


def test_web_image_v1_variants():
    recipe = load_recipe("web-image", 1)
    assert recipe.ref == "web-image@1"
    got = [(v.name, v.box_px, v.format, v.quality) for v in recipe.params.variants]
    assert got == [("thumb", 320, "webp", 72), ("card", 800, "webp", 78), ("full", 1600, "avif", 50)]


@pytest.mark.parametrize("where", ["top", "params", "variant"])
def test_unknown_fields_are_rejected(where):
    document = copy.deepcopy(RAW)
    target = {"top": document, "params": document["params"], "variant": document["params"]["variants"][0]}[where]
    target["qualty"] = 80
    with pytest.raises(RecipeError, match="qualty"):
        parse_recipe(document)


def test_duplicate_variant_names_are_rejected():
    document = copy.deepcopy(RAW)
    document["params"]["variants"][1]["name"] = "thumb"
    with pytest.raises(RecipeError, match="duplicate"):
        parse_recipe(document)


def test_unknown_recipe_is_an_error():
    with pytest.raises(RecipeError):
        load_recipe("web-image", 99)


def test_comment_is_not_part_of_the_hash():
    document = copy.deepcopy(RAW)
    document["comment"] = "something else"
    assert parse_recipe(document).sha256 == load_recipe("web-image", 1).sha256


@pytest.mark.parametrize(
    ("size", "box", "expected"),
    [
        ((1800, 1200), 320, (320, 213)),
        ((1200, 1800), 800, (533, 800)),
        ((300, 200), 1600, (300, 200)),  # never enlarged
        ((320, 320), 320, (320, 320)),
        ((8000, 2), 320, (320, 1)),  # short side clamped to 1 px
        ((2, 6000), 1600, (1, 1600)),
        ((1279, 721), 800, (800, 451)),
    ],
)
def test_fit_within(size, box, expected):
    assert fit_within(*size, box) == expected


def test_fit_within_rejects_empty_sizes():
    with pytest.raises(ValueError):
        fit_within(0, 10, 320)


def test_web_video_v2_is_v1_with_a_60_fps_cap():
    v1, v2 = load_recipe("web-video", 1), load_recipe("web-video", 2)
    assert v2.ref == "web-video@2" and v2.params.encoding.max_fps == 60
    assert v1.params.encoding.max_fps is None  # version 1 keeps every frame
    assert v2.params.model_copy(update={"encoding": v1.params.encoding}) == v1.params
    assert v2.sha256 != v1.sha256


def test_web_video_v1_keeps_its_hash_and_so_its_job_keys():
    # max_fps is unset in v1: the new optional field is not part of its hash.
    assert load_recipe("web-video", 1).sha256 == "4c3d8284a577ac6aae17eb81706fa916b06dde30cc140e6f7e9c06226a4ce65a"


def test_the_active_recipes_are_moderation_web_image_1_web_video_2_their_placeholders_and_promo_1():
    active = {media: [r.ref for r in recipes] for media, recipes in active_recipes().items()}
    assert active == {
        "image": ["moderation-image@1", "web-image@1", "image-placeholder@1"],
        "video": ["moderation-video@1", "web-video@2", "video-placeholder@1"],
        "album": ["promo@1"],
    }


def test_the_active_recipes_are_data_beside_the_recipes():
    active = json.loads(resources.files("mediajobs.recipes").joinpath("active.json").read_text())
    assert {media: [r.ref for r in recipes] for media, recipes in active_recipes().items()} == active


def test_a_recipe_naming_an_unregistered_step_is_rejected():
    document = copy.deepcopy(RAW)
    document["step"] = "image.sepia"
    with pytest.raises(RecipeError, match="no step 'image.sepia' is registered"):
        parse_recipe(document)


def test_params_are_validated_by_the_steps_own_model():
    document = copy.deepcopy(RAW)
    document["step"] = "video.renditions"  # image variants are no video renditions' params
    with pytest.raises(RecipeError, match="invalid params for video.renditions"):
        parse_recipe(document)


@pytest.mark.parametrize(
    ("active", "match"),
    [
        ({"image": ["web-video@2"]}, "made for another media type"),
        ({"image": ["web-image@1", "web-image@1"]}, "twice"),
        ({"image": ["web-image"]}, "not a recipe reference"),
        ({"image": "web-image@1"}, "must map each media type"),
        ({"image": ["web-image@1", "web-image@01"]}, "twice"),
        ({"image": []}, "lists no recipe"),
        ({"vidoe": ["web-video@2"]}, "no media type 'vidoe'"),
        ({"image": ["web-image@9"]}, "no recipe web-image@9"),
    ],
)
def test_a_wrong_active_list_is_rejected(active, match):
    with pytest.raises(RecipeError, match=match):
        domain_recipes.parse_active(active, MODELS)


@pytest.mark.parametrize("max_fps", [0, 241, 59.94, "60", True, -30])
def test_max_fps_must_be_a_whole_rate_from_1_to_240(max_fps):
    document = copy.deepcopy(VIDEO_V2)
    document["params"]["encoding"]["max_fps"] = max_fps
    with pytest.raises(RecipeError, match="max_fps"):
        parse_recipe(document)


def test_a_service_whose_recipes_name_an_unregistered_step_is_refused_when_built():
    from tests.fakes import pipeline_on

    with pytest.raises(ValueError, match=r"not registered: \['image.variants'\]"):
        pipeline_on(
            Settings(),
            store=None,
            ledger=None,
            sources=None,
            steps={},
            recipes={"image": [load_recipe("web-image", 1)]},
            detect_media=lambda path, key: None,
        )
