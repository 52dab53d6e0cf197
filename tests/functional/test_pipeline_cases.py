"""Case files uploaded to the embedded AWS and delivered through SQS and the real handler:
permanent failures end with their reason, are not retried, and write nothing. (Videos go
through ffprobe; the cases' ffmpeg-level checks are in tests/integration/test_video_cases.py.)"""

from __future__ import annotations

import pytest

from tests.conftest import case_file, case_registry, media_file

#: Reasons decided from the object's size or first bytes, before any job exists.
BEFORE_ANY_JOB = {"empty_file", "unsupported_format"}
#: Cases the renderer refuses as ``unsupported_format`` once their job exists: camera raws,
#: which the type sniffing takes for the TIFF preview in their first IFD.
REFUSED_BY_THE_RENDERER = {"R01"}

#: (file, reason, whether a job exists): every synthetic case that declares a permanent
#: failure (tests/media/cases_*.py), and the real damaged JPEG.
CASES = [
    ((name,), case.reason, case.reason not in BEFORE_ANY_JOB or case.id in REFUSED_BY_THE_RENDERER)
    for case in case_registry()
    if case.reason is not None
    for name in case.files
] + [(("bad", "corrupted.jpg"), "corrupt_image", True)]


def test_the_cases_cover_every_kind_of_permanent_failure_named_here():
    reasons = {reason for _, reason, _ in CASES}
    assert reasons >= {
        "empty_file", "unsupported_format", "truncated_image", "too_many_pixels", "corrupt_image",
        "invalid_media", "no_video_stream", "unsupported_container",
    }  # fmt: skip


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
