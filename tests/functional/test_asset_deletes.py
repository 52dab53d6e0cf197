"""Deletes and collections delivered out of order, as a reviewer found them breaking the
asset: a permanent delete of the current version before the create it undoes, an undelete
whose marker's event comes after it, two markers removed, a resumed collection that meets a
render finished meanwhile, and the key-as-received fallback. Each holds S3's truth."""

from __future__ import annotations

from mediajobs.domain.assets import AssetState
from mediajobs.service_layer.collection import Collector
from tests.fakes import Wrapping
from tests.functional.test_asset_races import Events, adapters_of, deliver, jpeg, purge, services, written
from tests.functional.test_ledger_collection import begin


def put(session, key: str, body: bytes) -> dict:
    return session.s3.put_object(Bucket=session.stack.bucket, Key=key, Body=body, ChecksumAlgorithm="SHA256")


def _events(local_session, write):
    with Events() as ev:
        write()
    purge(local_session)
    return [e for sent in ev.by_key.values() for e in sent]


def test_out_of_order_permanent_delete_of_the_current_version(local_session):
    """put v1 (s1), put v2 (s2), permanently delete v2 (s3): S3 serves v1.
    Delivered s1, s3, s2 (SQS standard queues do not keep order)."""
    s3, bucket = local_session.s3, local_session.stack.bucket
    key = "originals/break/ooo.jpg"
    (worker,) = services(local_session, 1)
    v = {}

    def write():
        s3.put_object(Bucket=bucket, Key=key, Body=jpeg(1), ChecksumAlgorithm="SHA256")
        v["v2"] = s3.put_object(Bucket=bucket, Key=key, Body=jpeg(2), ChecksumAlgorithm="SHA256")["VersionId"]
        s3.delete_object(Bucket=bucket, Key=key, VersionId=v["v2"])

    e1, e2, e3 = _events(local_session, write)
    arn = local_session.stack.queue_arn
    [deliver(worker, e, arn) for e in (e1, e3, e2)]
    view = adapters_of(local_session).assets.get(bucket, key)
    head = s3.head_object(Bucket=bucket, Key=key)
    assert view.state == AssetState.READY and view.version.version_id == head["VersionId"], view


def test_two_delete_markers_then_undelete(local_session):
    """put v1, delete (marker m1), delete again (marker m2); then undelete: permanently
    delete m2 (m1 current: still deleted), then m1 (v1 current again). In order."""
    s3, bucket = local_session.s3, local_session.stack.bucket
    key = "originals/break/undelete.jpg"
    (worker,) = services(local_session, 1)
    written(local_session, [worker], lambda: put(local_session, key, jpeg(3)))
    m = {}

    def deletes():
        m["m1"] = s3.delete_object(Bucket=bucket, Key=key)["VersionId"]
        m["m2"] = s3.delete_object(Bucket=bucket, Key=key)["VersionId"]

    written(local_session, [worker], deletes)
    written(local_session, [worker], lambda: s3.delete_object(Bucket=bucket, Key=key, VersionId=m["m2"]))
    written(local_session, [worker], lambda: s3.delete_object(Bucket=bucket, Key=key, VersionId=m["m1"]))
    head = s3.head_object(Bucket=bucket, Key=key)
    view = adapters_of(local_session).assets.get(bucket, key)
    assert view.state == AssetState.READY and view.version.version_id == head["VersionId"], view


def test_resumed_collection_of_a_job_a_render_finished_meanwhile(local_session):
    """A collector died after its collecting mark (lease expired). The next run reads the
    rows; before it reaches the job, a re-upload of the same bytes takes the job over,
    renders it and is ready. The run then 'resumes' the collection."""
    s3, bucket = local_session.s3, local_session.stack.bucket
    content = jpeg(77)
    first, second = "originals/break/r-first.jpg", "originals/break/r-second.jpg"
    (worker,) = services(local_session, 1)
    arn = local_session.stack.queue_arn
    written(
        local_session,
        [worker],
        lambda: put(local_session, first, content),
    )
    plain = adapters_of(local_session)
    mine = plain.assets.get(bucket, first).job_keys
    written(local_session, [worker], lambda: s3.delete_object(Bucket=bucket, Key=first))
    now = int(plain.clock())
    for job in mine:  # a collector that died right after its mark; its lease is over
        assert begin(plain.ledger, job, "dead", lease_until_s=now, now_s=now)
    (event,) = _events(local_session, lambda: put(local_session, second, content))
    outcomes = []

    def find(keys):
        rows = plain.ledger.find(keys)
        if not outcomes and set(keys) & mine:
            outcomes.append(deliver(worker, event, arn))  # the re-upload, whole
        return rows

    ledger = Wrapping(plain.ledger, find=find)
    Collector(plain.assets, ledger, plain.store, local_session.stack.settings(), clock=plain.clock).run(grace_s=0)
    view = plain.assets.get(bucket, second)
    assert view.state == AssetState.READY
    for job in view.jobs:
        s3.head_object(Bucket=bucket, Key=job.manifest_key)  # raises when the manifest is gone


def test_key_as_received_fallback_records_the_asset_under_the_decoded_key(local_session):
    """The pipeline's own fallback: an event whose key is not URL-encoded
    (originals/break/c++ notes.jpg sent as is: the decoded key names no object)."""
    _s3, bucket = local_session.s3, local_session.stack.bucket
    key = "originals/break/c++.jpg"
    (worker,) = services(local_session, 1)
    (event,) = _events(local_session, lambda: put(local_session, key, jpeg(5)))
    event["detail"]["object"]["key"] = key  # as received, unencoded
    deliver(worker, event, local_session.stack.queue_arn)
    assets = adapters_of(local_session).assets
    view = assets.get(bucket, key)
    assert view is not None and view.state == AssetState.READY
    assert assets.get(bucket, "originals/break/c  .jpg") is None  # not under the decoded key


def test_undelete_whose_marker_event_is_redelivered_after_the_undelete(local_session):
    """put v1 (s1); delete (marker m1, s2); undelete: permanently delete m1 (s3).
    S3 serves v1. The s2 delivery failed transiently and comes back after s3's."""
    s3, bucket = local_session.s3, local_session.stack.bucket
    key = "originals/break/undo.jpg"
    (worker,) = services(local_session, 1)
    arn = local_session.stack.queue_arn
    written(local_session, [worker], lambda: put(local_session, key, jpeg(9)))

    def write():
        m1 = s3.delete_object(Bucket=bucket, Key=key)["VersionId"]
        s3.delete_object(Bucket=bucket, Key=key, VersionId=m1)

    e2, e3 = _events(local_session, write)
    [deliver(worker, e, arn) for e in (e3, e2)]
    view = adapters_of(local_session).assets.get(bucket, key)
    assert view.state == AssetState.READY, view
    assert view.version.version_id == s3.head_object(Bucket=bucket, Key=key)["VersionId"]
