"""Job keys: golden values, order independence and sensitivity to every input. Source
version ids: a fixed length whatever the key. Event keys: URL-encoded as S3 does, decoded
by the worker."""

from __future__ import annotations

from urllib.parse import unquote_plus

import pytest

from mediajobs.bootstrap import load_recipe
from mediajobs.domain.jobs import ContentInput
from mediajobs.domain.keys import (
    KEY_ALGORITHM_VERSION,
    NO_POLICY,
    ORIGINAL_INPUT,
    UNKEYED,
    KeyScheme,
    canonical_json,
    content_id,
    encode_event_key,
    event_key_candidates,
    inputs_job_key,
    job_key,
    recipe_hash,
    sha256_hex,
    source_version_document,
    source_version_id,
)
from mediajobs.domain.plan import Where, plan_jobs

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
    """Algorithm 1's keys, as every key was before the keyed algorithm: unchanged."""
    rh = recipe_hash("web-image", 1, "image.variants", PARAMS)
    assert UNKEYED.algorithm == 1
    assert job_key(EMPTY_SHA, rh, keys=UNKEYED) == "e3b122807c677f96c3a77a5f9affcf89a89519ae9679f84efe637f2933da7b79"
    assert (
        job_key(HELLO_SHA, rh, "none", keys=UNKEYED)
        == "804116bf53525dce769626ddc3cc4efafbf822bff6dc6268a617fec4bbfc248e"
    )
    assert (
        job_key(HELLO_SHA, rh, "policy-2026-01", keys=UNKEYED)
        == "b11a68a06616c2b597c4277dd31ed0b7fad7175fdcb8880eacfcd827fc553998"
    )


#: A key secret of the golden keyed keys (a test's, never a stack's).
GOLDEN_SECRET = b"golden-key-secret-0123456789abcdef"


def test_golden_keyed_job_keys_are_the_hmac_sha256_of_the_document_under_the_secret():
    """Algorithm 2 (the default): HMAC-SHA256 (RFC 2104) of the canonical document, whose
    ``algorithm`` is 2, under the stack's secret."""
    import hashlib
    import hmac

    rh = recipe_hash("web-image", 1, "image.variants", PARAMS)
    keys = KeyScheme(2, GOLDEN_SECRET)
    assert KEY_ALGORITHM_VERSION == 2
    document = canonical_json({"algorithm": 2, "input_sha256": HELLO_SHA, "policy_version": "1", "recipe_sha256": rh})
    expected = hmac.new(GOLDEN_SECRET, document, hashlib.sha256).hexdigest()
    assert job_key(HELLO_SHA, rh, "1", keys=keys) == expected
    assert expected == "b26eab3acd2e7d88acc3158311390d5cd674c21f2ea08635fcaae05f77eb0a10"
    inputs = {"original": {"sha256": HELLO_SHA}, "moderation": {"job_key": "c" * 64, "output": "decisions"}}
    document = canonical_json({"algorithm": 2, "inputs": inputs, "policy_version": "1", "recipe_sha256": rh})
    assert inputs_job_key(inputs, rh, "1", keys=keys) == hmac.new(GOLDEN_SECRET, document, hashlib.sha256).hexdigest()


def test_a_keyed_key_cannot_be_computed_from_the_bytes_and_the_public_recipe():
    """The confirmation-of-file attack: from the content's SHA-256 and the recipe's hash
    alone (both public), every key anyone can compute -- algorithm 1's, or algorithm 2's
    under any other secret -- differs from the stack's; the stack's is one key per content."""
    rh = recipe_hash("web-image", 1, "image.variants", PARAMS)
    stack = KeyScheme(2, GOLDEN_SECRET)
    theirs = job_key(HELLO_SHA, rh, "1", keys=stack)
    assert theirs == job_key(HELLO_SHA, rh, "1", keys=KeyScheme(2, GOLDEN_SECRET))  # dedup holds in the stack
    guesses = {job_key(HELLO_SHA, rh, "1", keys=UNKEYED)}
    guesses |= {job_key(HELLO_SHA, rh, "1", keys=KeyScheme(2, s)) for s in (b"x" * 32, GOLDEN_SECRET + b"!")}
    assert theirs not in guesses


def test_a_key_scheme_refuses_what_cannot_key_and_never_shows_its_secret():
    with pytest.raises(ValueError, match="at least 32 bytes"):
        KeyScheme(2, b"short")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        KeyScheme()
    with pytest.raises(ValueError, match="takes no secret"):
        KeyScheme(1, GOLDEN_SECRET)
    with pytest.raises(ValueError, match="not one of"):
        KeyScheme(3, GOLDEN_SECRET)
    keys = KeyScheme(2, GOLDEN_SECRET)
    assert GOLDEN_SECRET.decode() not in repr(keys) and "secret" not in repr(keys)
    assert UNKEYED.id == "1" and keys.id.startswith("2:") and len(keys.id) == 14
    assert GOLDEN_SECRET.hex()[:12] not in keys.id and keys.id != KeyScheme(2, b"y" * 32).id


def test_golden_web_image_v1_recipe_hash():
    """The shipped recipe's hash: changing web-image.v1.json without a version bump fails here."""
    assert load_recipe("web-image", 1).sha256 == "e367c8290d2fe6172691d759eb4f2b2dcb6f1247e2b38a40a0172d76b1f8f9fa"


# The keys jobs of the shipped recipes had before jobs took inputs (``job_key`` of the
# content, the recipe's hash and policy ``none``; computed on 3044034): (content, key).
SHIPPED_KEYS = {
    ("web-image", 1): (
        (
            "d99048a07ee0f1ff37a2ba172a3b9f2f9f71f67a0ce3954ea78ac80adcc22ded",
            "e5bc56951264a11e7aa5d4f70609979ab829c56b27a38b66197f14e4233101a8",
        )
    ),
    ("image-placeholder", 1): (
        (
            "084040be159fbca2cc258444260e9f013c3bd1fa9c3e87b68605c092f6340295",
            "76f4db288cbd73c6a108b03539870b952e7516901ef0b8532a5c49f42d8f6c88",
        )
    ),
    ("web-video", 1): (
        (
            "cb3e9b8de59148aed60f249ca6d2d71379cd342aa17261d1ff87fec7e6a1f1a8",
            "4a21f0fd008dd267e1971f7697b33590a72d86298baadb18d4034cf998a03a88",
        )
    ),
    ("web-video", 2): (
        (
            "47f8918d19f90bf384eb53ca6aade0a631b98c142b686f55366da4b5769d8bc3",
            "9e842636486d884dd978674428c5a07f5597e65423d583a7a9619eb894e9636b",
        )
    ),
    ("video-placeholder", 1): (
        (
            "078ae3a84c4bd7780a3aadf9c6d692888e58e97c48709810b311a761fcc52e1d",
            "7fa528d58fcda609b9e9d9b11f96a9b079bf5e79ff0ac8044683ff14b2757bc9",
        )
    ),
}


@pytest.mark.parametrize("ref", sorted(SHIPPED_KEYS), ids=lambda r: f"{r[0]}@{r[1]}")
def test_the_plan_gives_the_shipped_recipes_their_keys_byte_for_byte(ref):
    """A recipe whose one input is the original keeps the key it had before jobs took inputs:
    the plan's key (:func:`~mediajobs.domain.keys.inputs_job_key`) of the content's SHA-256,
    for the empty content and for ``hello``."""
    recipe = load_recipe(*ref)
    where = Where("bucket", "originals/a.png", "derivatives/", NO_POLICY, UNKEYED)
    for content, expected in zip((EMPTY_SHA, HELLO_SHA), SHIPPED_KEYS[ref], strict=True):
        (planned,) = plan_jobs(content, recipe.media, {recipe.media: [recipe]}, where)
        assert planned.key == expected == job_key(content, recipe.sha256, keys=UNKEYED)
        assert planned.spec.inputs == {ORIGINAL_INPUT: ContentInput(content)}


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
        keys=UNKEYED,
    ):
        return job_key(sha256_hex(input_bytes), recipe_hash(rid, version, step, params), policy, keys=keys)

    base = key()
    changed = {
        "input": key(input_bytes=b"hellp"),
        "parameter": key(params={"variants": [{**PARAMS["variants"][0], "quality": 73}]}),
        "recipe_version": key(version=2),
        "recipe_id": key(rid="web-image-2"),
        "step": key(step="image.other"),
        "policy": key(policy="policy-1"),
        "algorithm": key(keys=KeyScheme(KEY_ALGORITHM_VERSION, GOLDEN_SECRET)),
    }[change]
    assert changed != base


def test_job_key_rejects_malformed_hashes():
    with pytest.raises(ValueError):
        job_key("ABC", EMPTY_SHA, keys=UNKEYED)


#: DynamoDB's largest partition key, bytes (DynamoDB developer guide, "Service, account, and
#: table quotas").
PARTITION_KEY_MAX_BYTES = 2048


def test_golden_source_version_ids():
    """The SHA-256 of what was the id before (the canonical JSON), pinned."""
    assert source_version_document("b", "originals/a.jpg", version_id="v1", etag="e", size_bytes=5) == (
        '["s3","b","originals/a.jpg","version","v1"]'
    )
    assert source_version_id("b", "originals/a.jpg", version_id="v1", etag="e", size_bytes=5) == (
        "79e3bc33c8e2b35dff1cc96fe72d4963e15e7e19c578e41616937b7b480a817c"
    )
    assert source_version_id("b", "originals/a.jpg", version_id=None, etag='"e"', size_bytes=5) == (
        "33ea0f538d87439dc0d4c49bdda85f1a142e47cdf14d8dbb4d9586f04b47f28e"
    )
    assert source_version_id("b", "originals/a.jpg", version_id=None, etag="", size_bytes=5) is None


@pytest.mark.parametrize(
    "key",
    [
        "originals/" + '"' * 1014,  # JSON escapes each quote in 2 bytes
        "originals/" + "\x01" * 1014,  # and each control character in 6
        "originals/" + "\\" * 1014,
    ],
    ids=["quotes", "control-characters", "backslashes"],
)
def test_a_source_version_id_fits_a_partition_key_whatever_the_key(key):
    assert len(key.encode()) == 1024  # S3's longest key
    document = source_version_document("mediajobs-local-media", key, version_id="v" * 32, etag="", size_bytes=1)
    assert document is not None and len(document.encode()) > PARTITION_KEY_MAX_BYTES  # the id it was
    sid = source_version_id("mediajobs-local-media", key, version_id="v" * 32, etag="", size_bytes=1)
    assert sid is not None and len(sid) == 64 and set(sid) <= set("0123456789abcdef")


def test_source_version_ids_differ_by_every_part_and_never_meet_a_content_id():
    base = {"version_id": "v1", "etag": "e", "size_bytes": 5}
    ids = {
        source_version_id("b", "originals/a.jpg", **base),
        source_version_id("c", "originals/a.jpg", **base),
        source_version_id("b", "originals/b.jpg", **base),
        source_version_id("b", "originals/a.jpg", **{**base, "version_id": "v2"}),
        source_version_id("b", "originals/a.jpg", version_id=None, etag="e", size_bytes=5),
        source_version_id("b", "originals/a.jpg", version_id=None, etag="e", size_bytes=6),
    }
    assert len(ids) == 6
    assert not any(i.startswith("sha256:") for i in ids if i) and content_id("ab").startswith("sha256:")


@pytest.mark.parametrize(
    ("key", "encoded"),
    [
        ("red flower.jpg", "red+flower.jpg"),  # AWS's own example (S3 user guide, "Event message structure")
        ("originals/My Photo (1).jpg", "originals/My+Photo+%281%29.jpg"),
        ("originals/a+b.jpg", "originals/a%2Bb.jpg"),
        ("originals/100%.jpg", "originals/100%25.jpg"),
        ("originals/café.jpg", "originals/caf%C3%A9.jpg"),
        ("originals/日本/写真.heic", "originals/%E6%97%A5%E6%9C%AC/%E5%86%99%E7%9C%9F.heic"),
        ("originals/a-b_c.d*e~f.jpg", "originals/a-b_c.d*e%7Ef.jpg"),
        ('originals/"q"\x01=&?#.jpg', "originals/%22q%22%01%3D%26%3F%23.jpg"),
    ],
)
def test_event_keys_are_url_encoded_as_s3_does_with_slashes_kept(key, encoded):
    assert encode_event_key(key) == encoded
    assert event_key_candidates(encoded)[0] == key == unquote_plus(encoded)


def test_a_key_s3_would_encode_is_decoded_first_then_tried_as_received():
    assert event_key_candidates("originals/a%2Bb+c.jpg") == ("originals/a+b c.jpg", "originals/a%2Bb+c.jpg")
    assert event_key_candidates("originals/a+b.jpg") == ("originals/a b.jpg", "originals/a+b.jpg")
    assert event_key_candidates("originals/100%.jpg") == ("originals/100%.jpg",)  # no escape: one key
    assert event_key_candidates("originals/plain.jpg") == ("originals/plain.jpg",)


def test_a_key_that_is_not_unicode_text_cannot_be_encoded():
    with pytest.raises(UnicodeEncodeError):
        encode_event_key("originals/\ud800.jpg")


def test_escapes_that_are_not_utf8_give_only_the_key_as_received():
    """No decoding of ``%C3`` names a key S3 could hold; a U+FFFD would name one never sent."""
    from mediajobs.domain.keys import event_key_candidates

    assert event_key_candidates("originals/a%C3.jpg") == ("originals/a%C3.jpg",)
    assert event_key_candidates("originals/%ED%A0%80") == ("originals/%ED%A0%80",)
    assert event_key_candidates("originals/caf%C3%A9.jpg") == ("originals/café.jpg", "originals/caf%C3%A9.jpg")


@pytest.mark.parametrize(
    "call",
    [
        lambda: job_key("a" * 64 + "\n", "b" * 64, keys=UNKEYED),
        lambda: inputs_job_key({"original\n": {"sha256": "a" * 64}}, "b" * 64, keys=UNKEYED),
        lambda: inputs_job_key({"frames": {"job_key": "a" * 64, "output": "thumb\n"}}, "b" * 64, keys=UNKEYED),
        lambda: inputs_job_key({"frames": {"job_key": "a" * 64 + "\n", "output": "thumb"}}, "b" * 64, keys=UNKEYED),
        lambda: inputs_job_key({"original": {"sha256": "a" * 64, "part": "audio/v1\n"}}, "b" * 64, keys=UNKEYED),
        lambda: inputs_job_key({"frames": {"job_key": "a" * 64, "output": "thumb"}}, "b" * 64 + "\n", keys=UNKEYED),
    ],
)
def test_a_trailing_newline_never_passes_for_a_hash_or_a_name(call):
    # re's "$" matches before a final newline: a key or a name with one must not pass as the
    # same hash (it would be another job key for the same content).
    with pytest.raises(ValueError):
        call()
