"""Recipes are data: web-image@1's values, strict loading, and the fit rule."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest

from mediajobs.domain.recipes import RecipeError, fit_within, load_recipe, parse_recipe

RAW = json.loads(resources.files("mediajobs.recipes").joinpath("web-image.v1.json").read_text())


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
