"""Job keys: golden values, order independence and sensitivity to every input."""

from __future__ import annotations

import pytest

from mediajobs.domain.keys import KEY_ALGORITHM_VERSION, canonical_json, job_key, recipe_hash, sha256_hex
from mediajobs.domain.recipes import load_recipe

EMPTY_SHA = sha256_hex(b"")
HELLO_SHA = sha256_hex(b"hello")
PARAMS = {"variants": [{"name": "thumb", "box_px": 320, "format": "webp", "quality": 72}]}


def test_canonical_json_sorts_keys_and_has_no_whitespace():
    assert canonical_json({"b": 1, "a": [1, {"d": "é", "c": None}]}) == '{"a":[1,{"c":null,"d":"é"}],"b":1}'.encode()


def test_canonical_json_rejects_nan():
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_golden_recipe_hash():
    assert recipe_hash("web-image", 1, "image.variants", PARAMS) == (
        "c1bd902f38ea5b37d725225e2f1ed5a31fde04fb3f127e263d3f919aa36faefc"
    )


def test_golden_job_keys():
    rh = recipe_hash("web-image", 1, "image.variants", PARAMS)
    assert KEY_ALGORITHM_VERSION == 1
    assert job_key(EMPTY_SHA, rh) == "e3b122807c677f96c3a77a5f9affcf89a89519ae9679f84efe637f2933da7b79"
    assert job_key(HELLO_SHA, rh, "none") == "804116bf53525dce769626ddc3cc4efafbf822bff6dc6268a617fec4bbfc248e"
    assert (
        job_key(HELLO_SHA, rh, "policy-2026-01") == "b11a68a06616c2b597c4277dd31ed0b7fad7175fdcb8880eacfcd827fc553998"
    )


def test_golden_web_image_v1_recipe_hash():
    """The shipped recipe's hash: changing web-image.v1.json without a version bump fails here."""
    assert load_recipe("web-image", 1).sha256 == "e367c8290d2fe6172691d759eb4f2b2dcb6f1247e2b38a40a0172d76b1f8f9fa"


def test_reordered_parameters_give_the_same_key():
    reordered = {"variants": [{"quality": 72, "format": "webp", "box_px": 320, "name": "thumb"}]}
    assert recipe_hash("web-image", 1, "image.variants", PARAMS) == recipe_hash(
        "web-image", 1, "image.variants", reordered
    )


@pytest.mark.parametrize(
    "change",
    ["input", "parameter", "recipe_version", "recipe_id", "step", "policy", "algorithm"],
)
def test_any_change_gives_a_different_key(change):
    def key(
        input_bytes=b"hello",
        params=PARAMS,
        version=1,
        rid="web-image",
        step="image.variants",
        policy="none",
        algorithm=KEY_ALGORITHM_VERSION,
    ):
        return job_key(sha256_hex(input_bytes), recipe_hash(rid, version, step, params), policy, algorithm)

    base = key()
    changed = {
        "input": key(input_bytes=b"hellp"),
        "parameter": key(params={"variants": [{**PARAMS["variants"][0], "quality": 73}]}),
        "recipe_version": key(version=2),
        "recipe_id": key(rid="web-image-2"),
        "step": key(step="image.other"),
        "policy": key(policy="policy-1"),
        "algorithm": key(algorithm=KEY_ALGORITHM_VERSION + 1),
    }[change]
    assert changed != base


def test_job_key_rejects_malformed_hashes():
    with pytest.raises(ValueError):
        job_key("ABC", EMPTY_SHA)
