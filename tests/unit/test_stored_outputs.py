"""Which bytes a 412'd output holds, decided without reading S3 (pure)."""

from __future__ import annotations

import pytest

from mediajobs.domain.jobs import OutputCandidate, identify_stored

OWN = OutputCandidate("thumb.webp", "a" * 32, "1" * 64, 100)
OLDER = OutputCandidate("thumb.webp", "b" * 32, "2" * 64, 90)
OTHER_FILE = OutputCandidate("card.webp", "c" * 32, "3" * 64, 80)


def test_an_etag_equal_to_our_md5_means_our_bytes():
    assert identify_stored(OWN, f'"{OWN.md5}"', frozenset({OWN, OLDER})) == OWN


def test_an_etag_equal_to_an_earlier_holders_md5_means_its_bytes():
    assert identify_stored(OWN, OLDER.md5, frozenset({OWN, OLDER, OTHER_FILE})) == OLDER


def test_a_candidate_of_another_file_with_that_md5_does_not_count():
    stray = OutputCandidate("card.webp", "d" * 32, "4" * 64, 70)
    assert identify_stored(OWN, stray.md5, frozenset({OWN, OLDER, stray})) is None


@pytest.mark.parametrize("etag", [None, "0123456789abcdef0123456789abcdef-1", "kms-etag"])
def test_without_a_matching_etag_agreeing_candidates_still_identify_the_bytes(etag):
    """An SSE-KMS bucket's ETag is no MD5; deterministic renders still agree."""
    same = OutputCandidate("thumb.webp", "e" * 32, OWN.sha256, OWN.bytes)
    assert identify_stored(OWN, etag, frozenset({OWN, same, OTHER_FILE})) == OWN


def test_disagreeing_candidates_without_a_matching_etag_are_not_guessed():
    assert identify_stored(OWN, "kms-etag", frozenset({OWN, OLDER})) is None


@pytest.mark.parametrize("candidate", [OWN, OLDER, OTHER_FILE])
def test_candidates_survive_the_ledgers_string_encoding(candidate):
    assert OutputCandidate.decode(candidate.encode()) == candidate
