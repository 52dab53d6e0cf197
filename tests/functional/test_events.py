"""Every file in events/ goes through the real handler against the embedded AWS, with the
outcome its name promises."""

from __future__ import annotations

import json
from urllib.parse import unquote_plus

import pytest

from mediajobs.domain.keys import encode_event_key
from mediajobs.local.events import SAMPLE_EVENTS, sample_text
from mediajobs.local.function_events import FUNCTION_SAMPLES
from mediajobs.local.runner import LocalLambdaContext
from tests.conftest import REPO, media_file
from tests.fakes import job_of

EVENTS = REPO / "events"


def load(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


def derivative_keys(session, job_key: str) -> list[str]:
    listed = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=f"derivatives/{job_key}/")
    return sorted(o["Key"].rsplit("/", 1)[-1] for o in listed.get("Contents", []))


@pytest.fixture()
def session(local_session):
    local_session.collector.renders.clear()
    local_session.collector.results.clear()
    local_session.upload(media_file("photos", "orientation-landscape-1.jpg"), "originals/events/photo.jpg")
    local_session.upload(media_file("photos", "orientation-landscape-1.jpg"), "originals/events/My Photo (1) café.jpg")
    local_session.s3.put_object(Bucket=local_session.stack.bucket, Key="originals/events/empty.jpg", Body=b"")
    return local_session


def test_every_event_file_is_covered():
    """The worker's SQS batches here; the other functions' samples in test_function_events.py."""
    assert sorted([*SAMPLE_EVENTS, *FUNCTION_SAMPLES]) == sorted(p.name for p in EVENTS.glob("*.json"))
    assert sorted(SAMPLE_EVENTS) == [
        "derivatives-key-ignored.json",
        "duplicate-in-batch.json",
        "empty-object-permanent-failure.json",
        "object-created-encoded-key.json",
        "object-created.json",
        "object-deleted-marker.json",
        "object-deleted-version.json",
    ]


@pytest.mark.parametrize("name", sorted(SAMPLE_EVENTS))
def test_every_event_file_is_what_the_event_factory_writes(name):
    """The files are the factory's output (``python -m mediajobs.local.events events``),
    so the files, the tests, ``simulate`` and the event source mapping spell one shape."""
    assert name in SAMPLE_EVENTS
    assert (EVENTS / name).read_text(encoding="utf-8") == sample_text(name)


@pytest.mark.parametrize("name", sorted(SAMPLE_EVENTS))
def test_every_event_file_spells_its_keys_as_s3_does(name):
    """URL-encoded: decoding then encoding again gives the key back unchanged."""
    for record in load(name)["Records"]:
        key = json.loads(record["body"])["detail"]["object"]["key"]
        assert encode_event_key(unquote_plus(key)) == key, key


def test_object_created_with_a_key_s3_encodes_renders_the_real_key(session):
    response = session.handler(load("object-created-encoded-key.json"), LocalLambdaContext())
    assert response == {"batchItemFailures": []}
    (result,) = session.collector.results["originals/events/My Photo (1) café.jpg"]
    assert (result.state, result.source.key) == ("done", "originals/events/My Photo (1) café.jpg")
    assert result.source.raw_key == "originals/events/My+Photo+%281%29+caf%C3%A9.jpg"


def test_object_created_renders_and_is_deleted(session):
    response = session.handler(load("object-created.json"), LocalLambdaContext())
    assert response == {"batchItemFailures": []}
    (result,) = session.collector.results["originals/events/photo.jpg"]
    assert result.state == "done"
    web = job_of(result, "web-image")
    assert derivative_keys(session, web.job_key) == ["card.webp", "full.avif", "manifest.json", "thumb.webp"]


def test_duplicate_in_batch_renders_once(session):
    response = session.handler(load("duplicate-in-batch.json"), LocalLambdaContext())
    assert response == {"batchItemFailures": []}
    results = session.collector.results["originals/events/photo.jpg"]
    assert len(results) == 2
    assert len(session.collector.renders) <= 1  # 0 when an earlier test already committed this photo
    assert results[1].jobs[0].reused is True


def test_derivatives_key_is_ignored(session):
    response = session.handler(load("derivatives-key-ignored.json"), LocalLambdaContext())
    assert response == {"batchItemFailures": []}
    assert session.collector.renders == [] and session.collector.results == {}


def test_empty_object_is_a_permanent_failure_and_not_retried(session):
    response = session.handler(load("empty-object-permanent-failure.json"), LocalLambdaContext())
    assert response == {"batchItemFailures": []}
    (result,) = session.collector.results["originals/events/empty.jpg"]
    assert (result.state, result.reason, result.jobs) == ("permanent_failure", "empty_file", [])
