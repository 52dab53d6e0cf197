"""Case files uploaded to the embedded AWS and delivered through SQS and the real handler:
permanent failures end with their reason, are not retried, and write nothing. (Videos go
through ffprobe; the cases' ffmpeg-level checks are in tests/integration/test_video_cases.py.)"""

from __future__ import annotations

import pytest

from tests.conftest import case_file, media_file

CASES = [
    (("I18_empty.jpg",), "empty_file", False),
    (("I18_empty.mp4",), "empty_file", False),
    (("I17_html_error_page.jpg",), "unsupported_format", False),
    (("I12_progressive_truncated.jpg",), "truncated_image", True),
    (("I14_bomb_60mp_8000x7500.png",), "too_many_pixels", True),
    (("bad", "corrupted.jpg"), "corrupt_image", True),
    (("I17_s3_error.mp4",), "invalid_media", True),
    (("V05_audio_only.mp4",), "no_video_stream", True),
    (("V08_moov_missing.mov",), "invalid_media", True),
    (("V09_hls_playlist.mp4",), "unsupported_container", True),
    (("V09_hls_ssrf.mp4",), "unsupported_container", True),
]


@pytest.fixture(scope="module")
def outcomes(local_session):
    local_session.run()
    received_before = local_session.esm.stats.received
    keys = {}
    for parts, _, _ in CASES:
        key = f"originals/cases/{parts[-1]}"
        local_session.upload(media_file(*parts) if len(parts) > 1 else case_file(parts[0]), key)
        keys[parts[-1]] = key
    local_session.run()
    return local_session, keys, local_session.esm.stats.received - received_before


@pytest.mark.parametrize(("parts", "reason", "has_job"), CASES, ids=[c[0][-1] for c in CASES])
def test_permanent_failure_with_reason_and_nothing_written(outcomes, parts, reason, has_job):
    session, keys, _ = outcomes
    (result,) = session.collector.results[keys[parts[-1]]]
    assert (result.state, result.reason) == ("permanent_failure", reason)
    assert bool(result.jobs) is has_job
    for job in result.jobs:
        assert (job.state, job.reason) == ("permanent_failure", reason)
        listed = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=f"derivatives/{job.job_key}/")
        assert listed.get("KeyCount", 0) == 0


def test_no_failure_was_retried_or_dead_lettered(outcomes):
    session, _, received = outcomes
    assert received == len(CASES)  # each delivered once: no redelivery
    assert session.dead_letters() == 0
