"""Object keys that S3 URL-encodes in its events, end to end through the embedded AWS: the
upload, the event as AWS spells it (the embedded AWS encodes moto's), the handler, the
render, and a manifest naming the real key. Also keys whose JSON is longer than a
DynamoDB partition key, which the source index once used as its key."""

from __future__ import annotations

import json

import pytest

from mediajobs.domain.keys import encode_event_key, source_version_document, source_version_id
from mediajobs.local.events import object_created_body
from mediajobs.local.runner import LocalLambdaContext, sqs_event
from tests.functional.test_worker import unique_png

#: DynamoDB's largest partition key, bytes.
PARTITION_KEY_MAX_BYTES = 2048

KEYS = {
    "space": "originals/keys/My Photo (1).png",
    "plus": "originals/keys/a+b.png",
    "percent": "originals/keys/100% of %41.png",  # "%41" must stay "%41", not become "A"
    "non-ascii": "originals/keys/café/日本の写真.png",
    "quotes-1000-bytes": "originals/" + '"' * 990,
    "control-characters": "originals/keys/" + "\x01\x1f" * 170,
}


def manifest(session, key: str) -> dict:
    return json.loads(session.s3.get_object(Bucket=session.stack.bucket, Key=key)["Body"].read())


def provenance(session, job_key: str) -> dict:
    """What the job's set was made from: its ledger row's (the public manifest names no original)."""
    return dict(session.stack.ledger().get(job_key).provenance)


@pytest.fixture(scope="module")
def delivered(local_session):
    """Every key of KEYS uploaded (different bytes each) and its event delivered through the
    queue; the body each event arrived with, by key."""
    local_session.run()  # nothing of an earlier test in flight
    before = len(local_session.esm.stats.bodies)
    local_session.collector.results.clear()
    for key in KEYS.values():
        local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=key, Body=unique_png(64, 48))
    local_session.run()
    bodies = [json.loads(b) for b in local_session.esm.stats.bodies[before:]]
    return {body["detail"]["object"]["key"]: body for body in bodies}


def test_the_long_keys_are_ones_the_old_source_index_key_could_not_hold(local_session):
    for name in ("quotes-1000-bytes", "control-characters"):
        document = source_version_document(
            local_session.stack.bucket, KEYS[name], version_id="v" * 32, etag="", size_bytes=1
        )
        assert document is not None and len(document.encode()) > PARTITION_KEY_MAX_BYTES, name
    assert len(KEYS["quotes-1000-bytes"].encode()) == 1000


@pytest.mark.parametrize("name", list(KEYS))
def test_the_event_carries_the_key_url_encoded_as_aws_does(delivered, name):
    encoded = encode_event_key(KEYS[name])
    assert encoded in delivered, sorted(delivered)
    assert "/" in encoded and encoded != KEYS[name]


@pytest.mark.parametrize("name", list(KEYS))
def test_an_upload_whose_key_needs_encoding_is_rendered_and_its_manifest_names_the_real_key(
    local_session, delivered, name
):
    key = KEYS[name]
    [result] = local_session.collector.results[key]
    assert (result.state, result.reason) == ("done", None), result.detail
    moderation, job, placeholder = result.jobs
    assert (moderation.recipe, job.recipe, placeholder.recipe) == (
        "moderation-image@1",
        "web-image@1",
        "image-placeholder@1",
    )
    assert manifest(local_session, moderation.manifest_key)["decisions"]["moderation"]["outcome"] == "accepted"
    assert [o.name for o in job.outputs] == ["thumb", "card", "full"]
    assert provenance(local_session, placeholder.job_key)["source"]["key"] == key
    source = provenance(local_session, job.job_key)["source"]
    assert source["key"] == key and source["bucket"] == local_session.stack.bucket
    assert "originals/" not in json.dumps(manifest(local_session, job.manifest_key))  # public: names no original
    version = source["version_id"]
    assert version == local_session.s3.head_object(Bucket=local_session.stack.bucket, Key=key)["VersionId"]


def test_a_redelivered_event_of_a_1000_byte_key_of_quotes_is_answered_from_the_source_index(local_session, delivered):
    key = KEYS["quotes-1000-bytes"]
    head = local_session.s3.head_object(Bucket=local_session.stack.bucket, Key=key)
    sid = source_version_id(local_session.stack.bucket, key, version_id=head["VersionId"], etag="", size_bytes=0)
    known = local_session.stack.sources().lookup(sid, now_s=0)
    assert known is not None and known.size_bytes == head["ContentLength"]
    local_session.collector.results.clear()
    local_session.redeliver([json.dumps(delivered[encode_event_key(key)])])
    local_session.run()
    [again] = local_session.collector.results[key]
    assert (again.state, again.bytes_read, again.jobs[0].reused) == ("done", 0, True)


def test_an_event_that_did_not_encode_the_key_is_served_from_the_key_as_received(local_session, caplog):
    """A hand-made event (or an older emulator) sends ``a+b c.png`` as it is: decoded, it
    names ``a b c.png``, which does not exist; the key as received does, and is used."""
    key = "originals/keys/unencoded a+b.png"
    data = unique_png(64, 48)
    local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=key, Body=data)
    body = json.loads(object_created_body(local_session.stack.bucket, key, size=len(data)))
    body["detail"]["object"]["key"] = key  # as received: not encoded
    event = sqs_event(
        [{"MessageId": "unencoded-1", "ReceiptHandle": "h", "Body": json.dumps(body)}],
        local_session.stack.queue_arn,
        "us-east-1",
    )
    local_session.collector.results.clear()
    with caplog.at_level("WARNING", logger="mediajobs.service_layer.pipeline"):
        assert local_session.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    [result] = local_session.collector.results[key]
    assert result.state == "done"
    assert provenance(local_session, result.jobs[0].job_key)["source"]["key"] == key
    assert any("as the event spelled it" in r.getMessage() for r in caplog.records)
