"""Which bytes a 412'd output holds, decided without reading S3 (pure)."""

from __future__ import annotations

import pytest

from mediajobs.domain.jobs import Decision, JobView, OutputCandidate, decide, identify_stored

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


@pytest.mark.parametrize("etag", [None, "", "0123456789abcdef0123456789abcdef-1", "f" * 32])
def test_an_etag_no_candidate_has_is_never_guessed_even_when_the_renders_agree(etag):
    """An SSE-KMS ETag (no MD5), a multipart one, or bytes nobody registered: renders of
    one job can differ (AVIF and x264 depend on the CPU count), so agreement proves nothing
    about what is stored."""
    same = OutputCandidate("thumb.webp", "e" * 32, OWN.sha256, OWN.bytes)
    assert identify_stored(OWN, etag, frozenset({OWN, same, OTHER_FILE})) is None


@pytest.mark.parametrize("candidate", [OWN, OLDER, OTHER_FILE])
def test_candidates_survive_the_ledgers_string_encoding(candidate):
    assert OutputCandidate.decode(candidate.encode()) == candidate


@pytest.mark.parametrize(
    ("state", "staged", "expected"),
    [
        ("transient_failure", None, Decision.EXHAUST),
        ("running", None, Decision.EXHAUST),
        ("transient_failure", '{"outputs": []}', Decision.TAKE_OVER),
        ("running", '{"outputs": []}', Decision.TAKE_OVER),
    ],
)
def test_past_the_attempts_cap_only_a_job_without_a_staged_manifest_is_exhausted(state, staged, expected):
    """A staged manifest means every output is stored: committing it needs no render."""
    row = JobView("k" * 64, state, "t4", lease_expires_at_s=100, attempts=4, staged_manifest=staged)
    assert decide(row, now_s=1000, max_attempts=4) is expected
