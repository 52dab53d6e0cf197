"""web-image@2's variants name a perceptual target instead of a fixed quality: the schema
(either quality or target, never both; bad values refused when the recipe loads), and
web-image@1 still loads as it was."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest

from mediajobs.bootstrap import load_recipe, params_models, steps
from mediajobs.domain import recipes as domain_recipes
from mediajobs.domain.recipes import QualityTarget, RecipeError
from mediajobs.settings import Settings

MODELS = params_models(steps(Settings()))
V2 = json.loads(resources.files("mediajobs.recipes").joinpath("web-image.v2.json").read_text())
TARGET = {"metric": "ssimulacra2", "score": 70, "tolerance": 4, "start_quality": 58}


def with_variant(**changes):
    document = copy.deepcopy(V2)
    document["params"]["variants"][2] = {**document["params"]["variants"][2], **changes}
    for key, value in list(document["params"]["variants"][2].items()):
        if value is None:
            del document["params"]["variants"][2][key]
    return document


def test_web_image_v2_has_v1s_variants_each_with_a_target():
    v1, v2 = load_recipe("web-image", 1), load_recipe("web-image", 2)
    shape = [(v.name, v.box_px, v.format) for v in v1.params.variants]
    assert shape == [(v.name, v.box_px, v.format) for v in v2.params.variants]
    assert shape == [("thumb", 320, "webp"), ("card", 800, "webp"), ("full", 1600, "avif")]
    assert all(v.quality is None and v.target is not None for v in v2.params.variants)
    assert [v.target.score for v in v2.params.variants] == [70.0, 70.0, 70.5]  # full: half a point for libjxl's
    assert v2.params.variants[2].target == QualityTarget(**{**TARGET, "score": 70.5, "tolerance": 3.5})


def test_web_image_v1_still_loads_with_fixed_qualities_and_its_hash():
    v1 = load_recipe("web-image", 1)
    assert [(v.quality, v.target) for v in v1.params.variants] == [(72, None), (78, None), (50, None)]
    assert v1.sha256 == "e367c8290d2fe6172691d759eb4f2b2dcb6f1247e2b38a40a0172d76b1f8f9fa"
    assert "target" not in json.dumps(v1.params.model_dump(mode="json", exclude_unset=True))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"quality": 50}, "either quality or target"),
        ({"target": None}, "either quality or target"),
        ({"format": "png"}, "png is lossless"),
        ({"target": {**TARGET, "metric": "butteraugli"}}, "metric"),
        ({"target": {**TARGET, "score": 29}}, "score"),
        ({"target": {**TARGET, "score": 96}}, "score"),
        ({"target": {**TARGET, "score": "NaN"}}, "score"),
        ({"target": {**TARGET, "tolerance": 0}}, "tolerance"),
        ({"target": {**TARGET, "tolerance": 11}}, "tolerance"),
        ({"target": {**TARGET, "start_quality": 0}}, "start_quality"),
        ({"target": {**TARGET, "start_quality": 56.5}}, "start_quality"),
        ({"target": {**TARGET, "start_quality": True}}, "start_quality"),
        ({"target": {k: v for k, v in TARGET.items() if k != "tolerance"}}, "tolerance"),
        ({"target": {**TARGET, "quality": 50}}, "quality"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else str(v),
)
def test_a_bad_target_is_refused_when_the_recipe_loads(changes, match):
    with pytest.raises(RecipeError, match=match):
        domain_recipes.parse_recipe(with_variant(**changes), MODELS)


def test_a_fixed_quality_variant_still_validates_beside_targeted_ones():
    recipe = domain_recipes.parse_recipe(with_variant(target=None, quality=50), MODELS)
    assert recipe.params.variants[2].quality == 50 and recipe.params.variants[2].target is None


def test_web_image_v2s_webp_variants_use_method_6_and_v1_names_none():
    v1, v2 = load_recipe("web-image", 1), load_recipe("web-image", 2)
    assert [v.method for v in v2.params.variants] == [6, 6, None]
    assert all(v.method is None for v in v1.params.variants)
    assert [v.chroma for v in v2.params.variants] == [None, None, "4:4:4"]
    assert all(v.chroma is None for v in v1.params.variants)  # libavif's 4:2:0, as v1 always was


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"method": 6}, "method is a WebP setting, not avif's"),
        ({"format": "webp", "speed": None, "method": 7}, "less than or equal to 6"),
        ({"format": "webp", "speed": None, "method": "6"}, "valid integer"),
        ({"format": "webp", "speed": None, "chroma": "4:4:4"}, "chroma is an AVIF setting, not webp's"),
        ({"chroma": "4:2:2"}, "'4:2:0' or '4:4:4'"),
    ],
)
def test_a_webp_method_or_avif_chroma_is_refused_elsewhere_or_out_of_range(changes, message):
    with pytest.raises(RecipeError, match=message):
        domain_recipes.parse_recipe(with_variant(**changes), MODELS)
