"""domain/moderation.py: the moderation policy as strictly validated data, and its verdict
on a content (known hashes, perceptual hashes within a distance, label thresholds by
Rekognition's top-level categories); adapters/perceptual.py's difference hash."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from mediajobs.adapters.perceptual import dhash
from mediajobs.domain.moderation import (
    ACCEPTED,
    CATEGORIES,
    REJECTED,
    REVIEW,
    Label,
    PolicyError,
    hamming,
    load_policy,
    parse_policy,
    verdict,
)
from tests.conftest import media_file

BAD = "ab" * 32


def policy(**changes):
    document = {
        "id": "moderation-policy",
        "version": 3,
        "known": [
            {"sha256": [BAD], "perceptual": [{"hash": "00000000ffffffff", "max_distance": 4}], "outcome": "rejected"}
        ],
        "labels": [
            {"category": "Violence", "min_confidence": 80, "outcome": "review"},
            {"category": "Explicit", "min_confidence": 90, "outcome": "rejected"},
        ],
        "video_frame_every_s": 5,
        **changes,
    }
    return parse_policy(document)


def test_the_first_policy_loads_and_names_only_rekognitions_categories():
    first = load_policy(1)
    assert first.version == 1 and first.labels
    assert {rule.category for rule in first.labels} <= set(CATEGORIES)
    with pytest.raises(PolicyError, match="no moderation policy 999"):
        load_policy(999)


@pytest.mark.parametrize(
    "changes",
    [
        {"unknown": 1},  # a typo never loosens a policy
        {"labels": [{"category": "Nudity", "min_confidence": 80, "outcome": "review"}]},  # model 6.1's name
        {"labels": [{"category": "Violence", "min_confidence": 101, "outcome": "review"}]},
        {"labels": [{"category": "Violence", "min_confidence": 80, "outcome": "accepted"}]},
        {"labels": [{"category": "Violence", "min_confidence": 80, "outcome": "review", "extra": 1}]},
        {"known": [{"sha256": ["AB" * 32], "outcome": "rejected"}]},  # uppercase hex
        {"known": [{"sha256": [BAD, BAD], "outcome": "rejected"}]},
        {"known": [{"perceptual": [{"hash": "xyz", "max_distance": 1}], "outcome": "rejected"}]},
        {"known": [{"perceptual": [{"hash": "00000000ffffffff", "max_distance": 17}], "outcome": "rejected"}]},
        {"video_frame_every_s": 0},
        {"id": "web-image"},
        {"version": 0},
    ],
)
def test_a_malformed_policy_is_refused(changes):
    with pytest.raises(PolicyError):
        policy(**changes)


def test_nothing_fires_and_the_content_is_accepted():
    assert verdict(policy(), sha256="cd" * 32, perceptual=None).outcome == ACCEPTED
    quiet = [Label("Violence", "", 79.9), Label("Explicit", "", 89.0)]
    assert verdict(policy(), sha256="cd" * 32, perceptual=0xFFFFFFFF00000000, labels=quiet).outcome == ACCEPTED


def test_known_content_is_rejected_by_its_exact_hash_or_a_near_perceptual_hash():
    exact = verdict(policy(), sha256=BAD, perceptual=None)
    assert (exact.outcome, exact.rule) == (REJECTED, "sha256")
    near = verdict(policy(), sha256="cd" * 32, perceptual=0x00000000FFFFFFF0)  # 4 bits away
    assert (near.outcome, near.rule, near.evidence) == (REJECTED, "perceptual:00000000ffffffff", "distance 4 <= 4")
    assert verdict(policy(), sha256="cd" * 32, perceptual=0x00000000FFFFFF00).outcome == ACCEPTED  # 8 bits away


def test_a_label_or_its_parent_fires_its_categorys_rule_and_the_strictest_outcome_wins():
    child = [Label("Weapon Violence", "Violence", 85.0)]  # an L2 label under the rule's L1 category
    review = verdict(policy(), sha256="cd" * 32, perceptual=None, labels=child)
    assert (review.outcome, review.rule, review.evidence) == (REVIEW, "label:Violence>=80", "Weapon Violence 85.0")
    both = [*child, Label("Explicit", "", 95.0)]
    strict = verdict(policy(), sha256="cd" * 32, perceptual=None, labels=both)
    assert (strict.outcome, strict.rule) == (REJECTED, "label:Explicit>=90")
    known_and_label = verdict(policy(), sha256=BAD, perceptual=None, labels=both)
    assert known_and_label.rule == "sha256"  # among equals, the first rule in the file


def test_a_difference_hash_survives_a_re_encode_and_a_resize_but_not_another_picture():
    first = Image.open(media_file("photos", "canon-40d-small.jpg"))
    second = Image.open(media_file("photos", "camera-gps-nikon.jpg"))
    smaller = first.resize((first.width // 2, first.height // 2))
    out = io.BytesIO()
    smaller.convert("RGB").save(out, "JPEG", quality=60)
    again = Image.open(io.BytesIO(out.getvalue()))
    assert hamming(dhash(first), dhash(again)) <= 6
    assert hamming(dhash(first), dhash(second)) > 16
    assert 0 <= dhash(first) < 2**64


def test_a_policys_hash_ignores_its_comment_but_not_a_rule():
    assert policy(comment="why").sha256 == policy().sha256
    stricter = policy(labels=[{"category": "Violence", "min_confidence": 70, "outcome": "review"}])
    assert stricter.sha256 != policy().sha256 and policy().ref == "moderation-policy@3"
