"""The pure rules of ``POST uploads`` (``domain/uploads.py``): the key layout, a name made
safe, the prefix, and every refusal before anything is signed."""

from __future__ import annotations

import base64
import hashlib
import string

import pytest

from mediajobs.domain.uploads import (
    MIN_PART_BYTES,
    UploadRefused,
    parse_upload,
    safe_name,
    suggested_part_bytes,
    upload_key,
    valid_prefix,
)

SHA = base64.b64encode(hashlib.sha256(b"x").digest()).decode()
_B64 = string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/"
NON_CANONICAL = SHA[:-2] + _B64[_B64.index(SHA[-2]) ^ 1] + "="
assert base64.b64decode(NON_CANONICAL) == base64.b64decode(SHA) and NON_CANONICAL != SHA
LIMITS = {"max_input_bytes": 200 * 2**20, "multipart_above_bytes": 100 * 2**20, "media": ("image", "video")}


def body(**change):
    return {
        "name": "a.jpg",
        "content_type": "image/jpeg",
        "size_bytes": 10,
        "sha256": SHA,
        "prefix": "users/42",
        **change,
    }


def test_the_key_is_date_partitioned_under_the_callers_prefix_with_a_random_id_and_a_safe_name():
    at = 1_764_945_000  # 2025-12-05 UTC
    assert upload_key("originals/", "users/42", at, "0123456789abcdef", "Ünïcode photo (1).JPEG") == (
        "originals/users/42/2025/12/05/0123456789abcdef/n-code-photo-1.jpeg"
    )


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("IMG_0001.JPG", "IMG_0001.jpg"),
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\holiday.png", "holiday.png"),
        (".hidden", "upload.hidden"),  # a dot-file: all extension
        ("-rf.jpg", "rf.jpg"),
        ("a b\nc;$(x).heic", "a-b-c-x.heic"),
        ("日本語.jpg", "upload.jpg"),
        ("", "upload"),
        ("x" * 300 + ".jpg", "x" * 96 + ".jpg"),
    ],
)
def test_a_name_is_made_safe_for_the_key(name, safe):
    assert safe_name(name) == safe


@pytest.mark.parametrize("prefix", ["users/42", "a", "team.x/2026-q4/event_1"])
def test_a_prefix_of_plain_segments_is_taken(prefix):
    assert valid_prefix(prefix) == prefix


@pytest.mark.parametrize(
    "prefix", ["", "/users", "users/", "users//42", "../x", "a/../b", "a/./b", "...", "x" * 201, 42, "é/x"]
)
def test_any_other_prefix_is_refused(prefix):
    with pytest.raises(UploadRefused, match="prefix") as refused:
        valid_prefix(prefix)
    assert refused.value.reason == "invalid_request"


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        ({"size_bytes": 0}, "empty_file", "empty"),
        ({"size_bytes": 200 * 2**20 + 1}, "too_large", "MaxInputBytes"),
        ({"content_type": "image/svg+xml"}, "unsupported_format", "image/jpeg"),
        ({"content_type": "video/mp4"}, None, None),
        ({"content_type": "IMAGE/JPEG; charset=x"}, None, None),
        ({"sha256": hashlib.sha256(b"x").hexdigest()}, "invalid_request", "base64"),
        ({"sha256": base64.b64encode(b"short").decode()}, "invalid_request", "base64"),
        ({"sha256": NON_CANONICAL}, "invalid_request", "base64"),  # the same 32 bytes, a spare bit set
        ({"size_bytes": "10"}, "invalid_request", "integer"),
        ({"size_bytes": True}, "invalid_request", "integer"),
        ({"name": 3}, "invalid_request", "name"),
        ({"parts": [{"size_bytes": 10, "sha256": SHA}]}, "invalid_request", "above"),
        ({"unknown": 1}, "invalid_request", "unknown"),
    ],
)
def test_a_request_is_checked_before_anything_is_signed(change, reason, words):
    if reason is None:
        assert parse_upload(body(**change), **LIMITS).content_type in ("video/mp4", "image/jpeg")
        return
    with pytest.raises(UploadRefused) as refused:
        parse_upload(body(**change), **LIMITS)
    assert refused.value.reason == reason and words in refused.value.detail


def test_a_content_type_of_a_media_without_recipes_is_refused():
    with pytest.raises(UploadRefused, match="unsupported_format"):
        parse_upload(body(content_type="video/mp4"), **{**LIMITS, "media": ("image",)})


def test_above_the_threshold_the_parts_are_needed_each_checked_against_s3s_limits():
    size = 150 * 2**20
    with pytest.raises(UploadRefused) as refused:
        parse_upload(body(size_bytes=size), **LIMITS)
    assert refused.value.reason == "parts_needed" and refused.value.extra == {"part_size_bytes": 16 * 2**20}
    part = 16 * 2**20
    parts = [{"size_bytes": part, "sha256": SHA}] * 9 + [{"size_bytes": size - 9 * part, "sha256": SHA}]
    asked = parse_upload(body(size_bytes=size, parts=parts), **LIMITS)
    assert len(asked.parts) == 10 and sum(p.size_bytes for p in asked.parts) == size
    small = [
        {"size_bytes": MIN_PART_BYTES - 1, "sha256": SHA},
        {"size_bytes": size - MIN_PART_BYTES + 1, "sha256": SHA},
    ]
    with pytest.raises(UploadRefused, match="S3's multipart limits"):
        parse_upload(body(size_bytes=size, parts=small), **LIMITS)
    with pytest.raises(UploadRefused, match="add up"):
        parse_upload(body(size_bytes=size, parts=parts[:-1]), **LIMITS)


def test_the_suggested_part_size_fits_10000_parts():
    assert suggested_part_bytes(100 * 2**20) == 16 * 2**20
    assert suggested_part_bytes(500 * 2**30) == 52 * 2**20  # 500 GiB / 10,000, rounded up to a MiB
    assert -(-500 * 2**30 // suggested_part_bytes(500 * 2**30)) <= 10_000
