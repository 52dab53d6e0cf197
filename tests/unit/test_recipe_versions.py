"""A recipe's version is part of every key of its jobs: a recipe file edited in place (its
parameters, its step) without a new version would give the old keys to new outputs, or new
keys to an unchanged recipe. Each recipe file's hash (``Recipe.sha256``: id, version, step
and parameters; a comment may change freely) is pinned here; a change fails with what to do:
a new file ``<id>.v<N+1>.json``, the old one kept as it was (its jobs' keys are in use)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mediajobs.bootstrap import load_recipe
from mediajobs.domain.moderation import load_policy

RECIPES = Path(__file__).resolve().parents[2] / "layers" / "mediajobs" / "mediajobs" / "recipes"

#: ``Recipe.sha256`` of each recipe file, as released. Add a new file's here; never edit one.
GOLDEN = {
    "moderation-policy.v1.json": "49dd2e786a9ee65b775c1a25a4c54c72438344939fc58052014674f7acbb8244",
    "moderation-image.v1.json": "dbb66de60daf240a3845898b63b6b2092ce2680f5820f57fbc46501bf2790a71",
    "moderation-video.v1.json": "5c54ee2d4084254067f6ff67f5494c1b62877e2545c31f1a9a569536a8350bf9",
    "image-placeholder.v1.json": "b380f3fb1e0ce5788bf53294f9034e7bdeb0bdae51b7c26905c46f20a02b063f",
    "video-placeholder.v1.json": "e1a36618e3246c269b0fd030342ddd13f31db119108201b34bc2c3f727403891",
    "web-image.v1.json": "e367c8290d2fe6172691d759eb4f2b2dcb6f1247e2b38a40a0172d76b1f8f9fa",
    "web-image.v2.json": "42c889636f3908372a9f56f2a4439864f35d9abdeaa809d1a02bce2489a3a7d9",
    "web-video.v1.json": "4c3d8284a577ac6aae17eb81706fa916b06dde30cc140e6f7e9c06226a4ce65a",
    "web-video.v2.json": "68fea602470e187d7e2c241372a25d6272a1c926ccfcb3a8474143e9e7e8b114",
    "promo.v1.json": "d9462e61f2b796b0c9e0f01ce5e6b7f67d152b6221ac44cdd0f4caaed8fadf40",
}

FILES = sorted(p.name for p in RECIPES.glob("*.v*.json"))


def _hash(name: str) -> str:
    match = re.fullmatch(r"(.+)\.v(\d+)\.json", name)
    assert match, f"{name}: a recipe file is <id>.v<version>.json"
    if match[1] == "moderation-policy":  # a policy's version is in the keys too
        return load_policy(int(match[2])).sha256
    return load_recipe(match[1], int(match[2])).sha256


@pytest.mark.parametrize("name", FILES)
def test_a_recipe_file_is_never_edited_in_place(name):
    found = _hash(name)
    if name not in GOLDEN:
        pytest.fail(f"{name} is a new recipe file: add its hash to GOLDEN in {Path(__file__).name}: {found!r}")
    recipe_id, version = re.fullmatch(r"(.+)\.v(\d+)\.json", name).groups()  # type: ignore[union-attr]
    assert found == GOLDEN[name], (
        f"{name} changed without a version bump (its hash is now {found}, released as {GOLDEN[name]}): "
        f"its version is in the keys of the jobs it made. Put the change in {recipe_id}.v{int(version) + 1}.json "
        f"(and recipes/active.json), and restore {name} as it was."
    )


def test_no_released_recipe_file_is_removed():
    """Its jobs' keys are in use (a backfill or a duplicate still names them)."""
    assert sorted(set(GOLDEN) - set(FILES)) == []
