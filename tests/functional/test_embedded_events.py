"""The embedded AWS's S3 sends the events AWS's S3 sends (S3 user guide, "EventBridge event
message structure"), where moto's differ: a sequencer per event that orders the events of
one key (hex numbers of varying length), "Object Deleted" with its ``deletion-type``,
``reason`` and ``version-id`` for a delete marker, a version deleted, ``DeleteObjects``
and an unversioned bucket, the key URL-encoded in every event, and lifecycle expirations
of noncurrent versions on demand. Each body is read with Powertools' model, as the worker
reads it."""

from __future__ import annotations

import functools
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel

from mediajobs.domain.assets import compare_sequencers
from mediajobs.domain.keys import encode_event_key
from mediajobs.local.embedded import AtomicWrites, EmbeddedAws, LocalStack
from mediajobs.local.events import (
    DEFAULT_SEQUENCER,
    DELETE_MARKER_ETAG,
    LIFECYCLE_REQUESTER,
    SAMPLE_EVENTS,
    Sequencers,
    object_created_event,
    object_deleted_event,
)

#: Every sequencer of this module's events, by bucket and key: checked at the end for
#: strictly increasing values and at least two lengths.
SEEN: dict[tuple[str, str], list[str]] = {}


@pytest.fixture(scope="module")
def embedded() -> Iterator[tuple[EmbeddedAws, LocalStack]]:
    aws = EmbeddedAws(name=f"events-{uuid.uuid4().hex[:8]}")
    with aws as stack:
        yield aws, stack


@pytest.fixture()
def stack(embedded) -> LocalStack:
    aws, stack = embedded
    drain(stack)  # nothing of an earlier test left in the queue
    return stack


def drain(stack: LocalStack) -> list[S3EventNotificationEventBridgeModel]:
    """Every event in the jobs queue (removed), read with Powertools' model, in the order
    of their sequencers per key; each key's sequencers recorded in :data:`SEEN`."""
    sqs = stack.client("sqs")
    events: list[S3EventNotificationEventBridgeModel] = []
    while messages := sqs.receive_message(QueueUrl=stack.queue_url, MaxNumberOfMessages=10).get("Messages", []):
        for message in messages:
            events.append(S3EventNotificationEventBridgeModel.model_validate_json(message["Body"]))
            sqs.delete_message(QueueUrl=stack.queue_url, ReceiptHandle=message["ReceiptHandle"])
    events.sort(
        key=functools.cmp_to_key(lambda a, b: compare_sequencers(a.detail.object.sequencer, b.detail.object.sequencer))
    )
    for event in events:
        SEEN.setdefault((event.detail.bucket.name, event.detail.object.key), []).append(event.detail.object.sequencer)
    return events


def shape(event: S3EventNotificationEventBridgeModel) -> tuple[Any, ...]:
    """What a test checks of an event: detail-type, encoded key, version-id, reason,
    deletion-type, size."""
    detail = event.detail
    return (
        event.detail_type,
        detail.object.key,
        detail.object.version_id,
        detail.reason,
        detail.deletion_type,
        detail.object.size,
    )


def unique_key(name: str, folder: str | None = None) -> str:
    return f"{folder or unique_folder()}{name}"


def unique_folder() -> str:
    return f"originals/events-test/{uuid.uuid4().hex[:8]}/"


def test_put_twice_then_delete_gives_two_created_and_a_delete_marker(stack):
    s3 = stack.client("s3")
    key = unique_key("photo.jpg")
    v1 = s3.put_object(Bucket=stack.bucket, Key=key, Body=b"first")["VersionId"]
    v2 = s3.put_object(Bucket=stack.bucket, Key=key, Body=b"second!")["VersionId"]
    marker = s3.delete_object(Bucket=stack.bucket, Key=key)
    assert marker["DeleteMarker"] is True

    events = drain(stack)

    assert [shape(e) for e in events] == [
        ("Object Created", key, v1, "PutObject", None, 5),
        ("Object Created", key, v2, "PutObject", None, 7),
        ("Object Deleted", key, marker["VersionId"], "DeleteObject", "Delete Marker Created", None),
    ]
    created, _, deleted = events
    assert created.detail.object.etag == s3.head_object(Bucket=stack.bucket, Key=key, VersionId=v1)["ETag"].strip('"')
    assert deleted.detail.object.etag == DELETE_MARKER_ETAG
    assert deleted.detail.requester == created.detail.requester != LIFECYCLE_REQUESTER
    assert deleted.source == "aws.s3" and deleted.resources == [f"arn:aws:s3:::{stack.bucket}"]


def test_deleting_a_version_is_permanently_deleted_of_that_version(stack):
    s3 = stack.client("s3")
    key = unique_key("photo.jpg")
    v1 = s3.put_object(Bucket=stack.bucket, Key=key, Body=b"first")["VersionId"]
    v2 = s3.put_object(Bucket=stack.bucket, Key=key, Body=b"second")["VersionId"]
    etag1 = s3.head_object(Bucket=stack.bucket, Key=key, VersionId=v1)["ETag"].strip('"')
    drain(stack)

    s3.delete_object(Bucket=stack.bucket, Key=key, VersionId=v1)  # noncurrent
    s3.delete_object(Bucket=stack.bucket, Key=key, VersionId=v2)  # current, and the last

    deleted_v1, deleted_v2 = drain(stack)
    assert shape(deleted_v1) == ("Object Deleted", key, v1, "DeleteObject", "Permanently Deleted", None)
    assert shape(deleted_v2) == ("Object Deleted", key, v2, "DeleteObject", "Permanently Deleted", None)
    assert deleted_v1.detail.object.etag == etag1


def test_deleting_the_delete_marker_is_permanently_deleted_of_the_marker(stack):
    s3 = stack.client("s3")
    key = unique_key("photo.jpg")
    s3.put_object(Bucket=stack.bucket, Key=key, Body=b"first")
    marker = s3.delete_object(Bucket=stack.bucket, Key=key)["VersionId"]
    drain(stack)

    s3.delete_object(Bucket=stack.bucket, Key=key, VersionId=marker)  # an undelete

    [event] = drain(stack)
    assert shape(event) == ("Object Deleted", key, marker, "DeleteObject", "Permanently Deleted", None)
    assert event.detail.object.etag == DELETE_MARKER_ETAG


def test_deleting_what_is_not_there_sends_nothing(stack):
    s3 = stack.client("s3")
    key = unique_key("photo.jpg")
    v1 = s3.put_object(Bucket=stack.bucket, Key=key, Body=b"first")["VersionId"]
    s3.delete_object(Bucket=stack.bucket, Key=key, VersionId=v1)
    drain(stack)

    s3.delete_object(Bucket=stack.bucket, Key=key, VersionId=v1)  # gone already

    assert drain(stack) == []


def test_delete_objects_sends_one_event_per_object_as_delete_object_does(stack):
    s3 = stack.client("s3")
    a, b = unique_key("a.jpg"), unique_key("b.jpg")
    va = s3.put_object(Bucket=stack.bucket, Key=a, Body=b"a")["VersionId"]
    vb1 = s3.put_object(Bucket=stack.bucket, Key=b, Body=b"b1")["VersionId"]
    s3.put_object(Bucket=stack.bucket, Key=b, Body=b"b2")
    drain(stack)

    answer = s3.delete_objects(Bucket=stack.bucket, Delete={"Objects": [{"Key": a}, {"Key": b, "VersionId": vb1}]})

    marker = next(d["DeleteMarkerVersionId"] for d in answer["Deleted"] if d["Key"] == a)
    events = {e.detail.object.key: e for e in drain(stack)}
    assert shape(events[a]) == ("Object Deleted", a, marker, "DeleteObject", "Delete Marker Created", None)
    assert shape(events[b]) == ("Object Deleted", b, vb1, "DeleteObject", "Permanently Deleted", None)
    assert marker != va


def test_an_unversioned_bucket_sends_no_version_and_deletes_permanently(embedded):
    aws, stack = embedded
    s3 = stack.client("s3")
    bucket = f"{aws.name}-unversioned"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}})
    events_client = stack.client("events")
    rule = f"{aws.name}-unversioned"
    pattern = {
        "source": ["aws.s3"],
        "detail-type": ["Object Created", "Object Deleted"],
        "detail": {"bucket": {"name": [bucket]}},
    }
    events_client.put_rule(Name=rule, EventPattern=json.dumps(pattern))
    events_client.put_targets(Rule=rule, Targets=[{"Id": "jobs", "Arn": stack.queue_arn}])
    drain(stack)
    key = unique_key("photo.jpg")

    s3.put_object(Bucket=bucket, Key=key, Body=b"bytes")
    s3.delete_object(Bucket=bucket, Key=key)
    s3.put_object(Bucket=bucket, Key=key, Body=b"again")
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key}]})

    assert [shape(e) for e in drain(stack)] == [
        ("Object Created", key, None, "PutObject", None, 5),
        ("Object Deleted", key, None, "DeleteObject", "Permanently Deleted", None),
        ("Object Created", key, None, "PutObject", None, 5),
        ("Object Deleted", key, None, "DeleteObject", "Permanently Deleted", None),
    ]


def test_keys_are_url_encoded_in_created_and_deleted_events(stack):
    s3 = stack.client("s3")
    key = unique_key("My Photo (1) café+日本.jpg")
    version = s3.put_object(Bucket=stack.bucket, Key=key, Body=b"first")["VersionId"]
    s3.put_object(Bucket=stack.bucket, Key=key, Body=b"second")
    marker = s3.delete_object(Bucket=stack.bucket, Key=key)["VersionId"]
    s3.delete_objects(Bucket=stack.bucket, Delete={"Objects": [{"Key": key, "VersionId": version}]})
    s3.delete_object(Bucket=stack.bucket, Key=key, VersionId=marker)

    events = drain(stack)

    # Powertools' model passes the key on as received: S3's spelling.
    assert [e.detail.object.key for e in events] == [encode_event_key(key)] * 5
    assert encode_event_key(key) != key and "+" in encode_event_key(key)
    assert [e.detail.deletion_type for e in events] == [
        None,
        None,
        "Delete Marker Created",
        "Permanently Deleted",
        "Permanently Deleted",
    ]


def test_the_sequencers_of_one_key_increase_in_the_order_of_the_writes(stack):
    """Ten threads write one key at once: the current version is the one whose event has
    the greatest sequencer (the event is built inside the write, under the server's lock
    of S3 writes), and no two events share a sequencer."""
    s3 = stack.client("s3")
    key = unique_key("raced.jpg")
    start = threading.Barrier(10)

    def write(i: int) -> None:
        start.wait()
        for j in range(3):
            s3.put_object(Bucket=stack.bucket, Key=key, Body=f"{i}-{j}".encode())

    threads = [threading.Thread(target=write, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    events = drain(stack)
    assert len(events) == 30
    assert len({e.detail.object.sequencer for e in events}) == 30
    listed = s3.list_object_versions(Bucket=stack.bucket, Prefix=key)["Versions"]  # newest first
    assert [e.detail.object.version_id for e in reversed(events)] == [v["VersionId"] for v in listed]
    assert listed[0]["IsLatest"] and events[-1].detail.object.version_id == listed[0]["VersionId"]


def test_the_server_runs_s3_writes_under_one_lock():
    """The order of writes is the order of sequencers only because a write (and the event
    built inside it) holds this lock."""
    assert AtomicWrites.lock_for("s3", "PUT") is AtomicWrites.S3_WRITES
    assert AtomicWrites.lock_for("s3", "DELETE") is AtomicWrites.S3_WRITES
    assert AtomicWrites.lock_for("s3", "POST") is AtomicWrites.S3_WRITES  # DeleteObjects


def test_lifecycle_expiration_permanently_deletes_noncurrent_versions_only(embedded):
    aws, stack = embedded
    drain(stack)
    s3 = stack.client("s3")
    folder = unique_folder()
    overwritten, deleted, single = (unique_key(n, folder) for n in ("overwritten.jpg", "deleted.jpg", "single.jpg"))
    old = s3.put_object(Bucket=stack.bucket, Key=overwritten, Body=b"old")["VersionId"]
    current = s3.put_object(Bucket=stack.bucket, Key=overwritten, Body=b"new")["VersionId"]
    gone = s3.put_object(Bucket=stack.bucket, Key=deleted, Body=b"gone")["VersionId"]
    marker = s3.delete_object(Bucket=stack.bucket, Key=deleted)["VersionId"]
    s3.put_object(Bucket=stack.bucket, Key=single, Body=b"only")
    drain(stack)

    # Under the rule's own age (30 days by default), nothing is old enough yet.
    assert aws.expire_noncurrent(folder) == []
    assert aws.noncurrent_expirations()["originals/"] == 30
    expired = aws.expire_noncurrent(folder, noncurrent_older_than_s=0)

    assert sorted(expired) == sorted([(overwritten, old), (deleted, gone)])
    events = {e.detail.object.key: e for e in drain(stack)}
    assert sorted(events) == sorted([overwritten, deleted])
    for key, version in ((overwritten, old), (deleted, gone)):
        event = events[key]
        assert shape(event) == ("Object Deleted", key, version, "Lifecycle Expiration", "Permanently Deleted", None)
        assert event.detail.requester == LIFECYCLE_REQUESTER and event.detail.source_ip_address is None
    left = s3.list_object_versions(Bucket=stack.bucket, Prefix=folder)
    versions = {(v["Key"], v["VersionId"]) for v in left.get("Versions", [])}
    assert (overwritten, current) in versions and (overwritten, old) not in versions and (deleted, gone) not in versions
    assert (deleted, marker) in {(m["Key"], m["VersionId"]) for m in left.get("DeleteMarkers", [])}


def test_lifecycle_expiration_measures_from_when_a_version_became_noncurrent(embedded):
    aws, stack = embedded
    s3 = stack.client("s3")
    folder = unique_folder()
    key = unique_key("aged.jpg", folder)
    old = s3.put_object(Bucket=stack.bucket, Key=key, Body=b"old")["VersionId"]
    s3.put_object(Bucket=stack.bucket, Key=key, Body=b"new")  # old is noncurrent from now
    drain(stack)
    days_29 = datetime.now(UTC) + timedelta(days=29)

    assert aws.expire_noncurrent(folder, now=days_29) == []  # the rule's 30 days
    assert aws.expire_noncurrent(folder, now=days_29 + timedelta(days=1, minutes=1)) == [(key, old)]
    [event] = drain(stack)
    assert (event.detail.object.version_id, event.detail.reason) == (old, "Lifecycle Expiration")


def test_a_prefix_no_lifecycle_rule_covers_is_refused(embedded):
    aws, _ = embedded
    with pytest.raises(KeyError):
        aws.expire_noncurrent("uploads/")


def test_a_copy_is_created_by_copy_object_and_every_event_has_its_own_id_and_an_iso_time(stack):
    s3 = stack.client("s3")
    source, copy = unique_key("source.jpg"), unique_key("copy.jpg")
    s3.put_object(Bucket=stack.bucket, Key=source, Body=b"bytes")
    version = s3.copy_object(Bucket=stack.bucket, Key=copy, CopySource={"Bucket": stack.bucket, "Key": source})[
        "VersionId"
    ]

    put, copied = drain(stack)
    assert shape(copied) == ("Object Created", copy, version, "CopyObject", None, 5)
    assert put.id != copied.id
    assert copied.time.tzinfo is not None  # ISO 8601 with its Z, as AWS's (moto: Unix seconds)


def test_a_multipart_upload_gives_one_event_of_complete_multipart_upload(stack):
    s3 = stack.client("s3")
    key = unique_key("big.jpg")
    upload = s3.create_multipart_upload(Bucket=stack.bucket, Key=key)["UploadId"]
    part = s3.upload_part(Bucket=stack.bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 1024)
    done = s3.complete_multipart_upload(
        Bucket=stack.bucket,
        Key=key,
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )

    [event] = drain(stack)
    assert shape(event) == ("Object Created", key, done["VersionId"], "CompleteMultipartUpload", None, 1024)


def test_tag_events_and_derivatives_stay_out_of_the_jobs_queue(stack):
    """moto sends "Object Tags Added" on every put; the template's rule takes only Object
    Created and Object Deleted under originals/."""
    s3 = stack.client("s3")
    key = unique_key("tagged.jpg")
    s3.put_object(Bucket=stack.bucket, Key=key, Body=b"x", Tagging="a=b")
    s3.put_object_tagging(Bucket=stack.bucket, Key=key, Tagging={"TagSet": [{"Key": "c", "Value": "d"}]})
    s3.put_object(Bucket=stack.bucket, Key="derivatives/events-test/x.webp", Body=b"x")
    s3.delete_object(Bucket=stack.bucket, Key="derivatives/events-test/x.webp")

    assert [e.detail_type for e in drain(stack)] == ["Object Created"]


def test_sequencers_compare_as_numbers_not_as_strings():
    sequencers = Sequencers()
    made = [sequencers.next() for _ in range(9)]
    assert {len(s) for s in made} == {16, 18, 20}
    assert all(compare_sequencers(a, b) < 0 for a, b in zip(made, made[1:], strict=False))
    assert made != sorted(made)  # as strings they would be out of order


def test_hand_made_and_sample_events_are_older_than_every_event_the_embedded_s3_sends():
    first = Sequencers().next()
    samples = [r.sequencer for records in SAMPLE_EVENTS.values() for r in records]
    assert all(compare_sequencers(s, first) < 0 for s in [DEFAULT_SEQUENCER, *samples])


def test_factory_deleted_events_parse_with_powertools_and_default_to_a_fixed_sequencer():
    marker = object_deleted_event("b", "originals/a b.jpg", deletion_type="Delete Marker Created", version_id="m1")
    model = S3EventNotificationEventBridgeModel.model_validate(marker)
    assert (model.detail.object.key, model.detail.object.size, model.detail.object.etag) == (
        "originals/a+b.jpg",
        None,
        DELETE_MARKER_ETAG,
    )
    expired = object_deleted_event(
        "b", "originals/a.jpg", deletion_type="Permanently Deleted", version_id="v1", reason="Lifecycle Expiration"
    )
    assert expired["detail"]["requester"] == LIFECYCLE_REQUESTER and "source-ip-address" not in expired["detail"]
    created = object_created_event("b", "originals/a.jpg", size=1)
    assert created["detail"]["object"]["sequencer"] == marker["detail"]["object"]["sequencer"]
    with pytest.raises(ValueError):
        object_deleted_event("b", "originals/a.jpg", deletion_type="Deleted")


def test_every_key_of_the_module_got_strictly_increasing_sequencers_of_several_lengths(stack):
    """Over every event this module's tests received in this process (with several
    workers, the others may have run elsewhere), nine of its own included."""
    s3 = stack.client("s3")
    for version in range(3):
        for key in ("originals/seq-a.jpg", "originals/seq-b.jpg", "originals/seq-c.jpg"):
            s3.put_object(Bucket=stack.bucket, Key=key, Body=b"v%d" % version)
    assert len(drain(stack)) == 9
    lengths = set()
    for (_bucket, key), sequencers in SEEN.items():
        assert all(compare_sequencers(a, b) < 0 for a, b in zip(sequencers, sequencers[1:], strict=False)), key
        lengths.update(len(s) for s in sequencers)
    assert len(lengths) >= 2
