"""The commit protocol without reading derivatives back, against the embedded AWS: the
real pipeline (S3, ledger, Pillow) with workers stopped at step boundaries, late writes of
lost holders, stale listings, lost DynamoDB answers and inputs that try to make the staged
manifest too big. Time moves by each worker's clock, never by sleeping."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import struct
import time
import uuid

import pytest
from botocore.awsrequest import AWSResponse
from botocore.httpsession import URLLib3Session
from PIL import Image, ImageCms

from mediajobs.bootstrap import build_service, default_adapters, load_recipe
from mediajobs.domain.errors import OUTPUT_CONFLICT, Superseded
from mediajobs.domain.jobs import ObjectRef
from mediajobs.domain.keys import job_key, sha256_hex
from mediajobs.domain.manifest import MAX_DECISION_TEXT
from mediajobs.local.session import Collector
from mediajobs.settings import Settings
from tests.fakes import Wrapping
from tests.functional.test_crash_points import Crash, CrashAt
from tests.functional.test_worker import unique_png


@pytest.fixture()
def settings(local_session) -> Settings:
    local_session.run()  # nothing of an earlier test in flight
    return Settings.from_env()


def upload(session, data: bytes) -> ObjectRef:
    """Store an original; its event is consumed here (these tests call the pipeline)."""
    key = f"originals/commit/{uuid.uuid4().hex}.png"
    session.s3.put_object(Bucket=session.stack.bucket, Key=key, Body=data)
    while messages := session.sqs.receive_message(QueueUrl=session.stack.queue_url, MaxNumberOfMessages=10).get(
        "Messages", []
    ):
        for m in messages:
            session.sqs.delete_message(QueueUrl=session.stack.queue_url, ReceiptHandle=m["ReceiptHandle"])
    return ObjectRef(session.stack.bucket, key)


def worker(session, settings: Settings, observer, attempt: int, *, store=None, ledger=None, steps=None):
    """A pipeline whose clock is ``attempt`` leases (plus a minute) in the future.

    ``store``, ``ledger``, ``steps``: functions of the real adapter (the steps by name)
    returning the one the pipeline is given (a :class:`~tests.fakes.Wrapping` that injects
    a fault or counts).
    """
    skew = attempt * (settings.lease_s + 60)
    adapters = default_adapters(settings, clients=session.stack.clients())
    changes: dict[str, object] = {"clock": lambda: time.time() + skew}
    for name, wrap in (("store", store), ("ledger", ledger), ("steps", steps)):
        if wrap is not None:
            changes[name] = wrap(getattr(adapters, name))
    adapters = dataclasses.replace(adapters, **changes)
    return build_service(settings, adapters=adapters, observer=observer, recipes=ONE_JOB)


#: The commit of one job, web-image@1's (each other active recipe is a job of its own,
#: committed the same way): the request counts below are one job's.
ONE_JOB = {"image": [load_recipe("web-image", 1)]}


def row_of(session, key: str):
    model = session.stack.job_model()
    return model.get(key, consistent_read=True)


def stored(session, key: str) -> bytes:
    return session.s3.get_object(Bucket=session.stack.bucket, Key=key)["Body"].read()


def image_job(data: bytes, settings: Settings) -> str:
    return job_key(sha256_hex(data), ONE_JOB["image"][0].sha256, settings.policy_version, keys=settings.keys)


def test_a_staged_manifest_is_committed_even_when_the_attempts_are_used_up(local_session, settings):
    """Three holders die after their claim, the fourth after writing the manifest: the next
    delivery commits that manifest instead of ending the job attempts_exhausted."""
    data = unique_png(320, 240)
    ref, key = upload(local_session, data), image_job(data, local_session.stack.settings())
    points = ["claimed"] * (settings.max_attempts - 1) + ["manifest_stored"]
    for attempt, point in enumerate(points):
        with pytest.raises(Crash):
            worker(local_session, settings, CrashAt(point), attempt).process(ref)
    row = row_of(local_session, key)
    assert (row.state, int(row.attempts), row.staged_manifest is not None) == ("running", settings.max_attempts, True)
    last = Collector()
    result = worker(local_session, settings, last, len(points)).process(ref)
    row = row_of(local_session, key)
    manifest = json.loads(stored(local_session, f"derivatives/{key}/manifest.json"))
    assert (result.state, row.state, last.renders) == ("done", "done", [])
    assert row.outputs == manifest["outputs"] and row.staged_manifest is None


def _icc_with_description(text: str) -> bytes:
    """An sRGB ICC profile whose 'desc' tag is ``text`` (an mluc record)."""
    base = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    (count,) = struct.unpack(">I", base[128:132])
    encoded = text.encode("utf-16-be")
    mluc = b"mluc" + b"\0" * 4 + struct.pack(">II", 1, 12) + b"enUS" + struct.pack(">II", len(encoded), 28) + encoded
    while len(base) % 4:
        base += b"\0"
    offset = len(base)
    for i in range(count):
        pos = 132 + 12 * i
        if base[pos : pos + 4] == b"desc":
            base[pos + 4 : pos + 12] = struct.pack(">II", offset, len(mluc))
    base += mluc
    base[0:4] = struct.pack(">I", len(base))
    base[84:100] = b"\0" * 16  # profile id: no longer valid
    return bytes(base)


def test_an_input_cannot_make_the_manifest_too_big_to_stage(local_session, settings):
    """A 70,000-character ICC description would make a 420 KB manifest (JSON escapes each
    character to 6 bytes), over DynamoDB's 400 KB item: decisions keep 200 characters."""
    icc = _icc_with_description("\u00e9" * 70_000)
    out = io.BytesIO()
    Image.open(io.BytesIO(unique_png(320, 240))).save(out, format="PNG", icc_profile=icc)
    data = out.getvalue()
    ref, key = upload(local_session, data), image_job(data, local_session.stack.settings())
    result = worker(local_session, settings, Collector(), 0).process(ref)
    assert result.state == "done"
    manifest = stored(local_session, f"derivatives/{key}/manifest.json")
    description = json.loads(manifest)["decisions"]["icc_profile"]
    assert len(description) == MAX_DECISION_TEXT and description.startswith("\u00e9\u00e9") and len(manifest) < 10_000


def _other_webp(data: bytes, quality: int) -> bytes:
    """thumb.webp as another build would render it: same name, other bytes."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    im.thumbnail((320, 320))
    out = io.BytesIO()
    im.save(out, format="WEBP", quality=quality)
    return out.getvalue()


def test_bytes_no_holder_registered_end_the_job_output_conflict(local_session, settings):
    """A holder of a version without registration stored thumb.webp and died: the stored
    bytes cannot be described without reading them, so the job fails and says why,
    rather than committing a manifest that describes other bytes."""
    data = unique_png(320, 240)
    ref, key = upload(local_session, data), image_job(data, local_session.stack.settings())
    with pytest.raises(Crash):
        worker(local_session, settings, CrashAt("claimed"), 0).process(ref)
    thumb = f"derivatives/{key}/thumb.webp"
    local_session.s3.put_object(Bucket=ref.bucket, Key=thumb, Body=_other_webp(data, 40))
    result = worker(local_session, settings, Collector(), 1).process(ref)
    (job,) = result.jobs
    assert (job.state, job.reason) == ("permanent_failure", OUTPUT_CONFLICT)
    assert thumb in job.detail
    listed = local_session.s3.list_objects_v2(Bucket=ref.bucket, Prefix=f"derivatives/{key}/")
    assert f"derivatives/{key}/manifest.json" not in [o["Key"] for o in listed.get("Contents", [])]
    assert row_of(local_session, key).failure_reason == OUTPUT_CONFLICT


def test_a_lost_holders_write_landing_after_the_listing_is_still_identified(local_session, settings):
    """Holder A (another build: other bytes) registered its outputs, stored thumb.webp and
    lost its lease; its card.webp write lands just after B listed the prefix at B's first
    412. B lists again and the manifest describes A's card, as stored."""
    data = unique_png(640, 480)
    ref, key = upload(local_session, data), image_job(data, local_session.stack.settings())
    a_files: dict[str, bytes] = {}

    def another_build(steps):
        image_step = steps["image.variants"]

        def run(source, params, context, out_dir):
            variants = tuple(v.model_copy(update={"quality": v.quality - 7}) for v in params.variants)
            result = image_step.run(source, params.model_copy(update={"variants": variants}), context, out_dir)
            a_files.update({f.path.name: f.path.read_bytes() for f in result.files})
            return result

        return {**steps, "image.variants": Wrapping(image_step, run=run)}

    a = worker(local_session, settings, CrashAt("output_stored"), 0, steps=another_build)
    with pytest.raises(Crash):
        a.process(ref)
    listings = []

    def late_write_at_the_first_listing(store):
        def listing(bucket, prefix):
            found = store.listing(bucket, prefix)
            if not listings:  # A's card.webp, in flight when A lost its lease, lands now
                local_session.s3.put_object(Bucket=bucket, Key=prefix + "card.webp", Body=a_files["card.webp"])
            listings.append(prefix)
            return found

        return Wrapping(store, listing=listing)

    b = worker(local_session, settings, Collector(), 1, store=late_write_at_the_first_listing)
    result = b.process(ref)
    assert result.state == "done" and len(listings) == 2
    manifest = json.loads(stored(local_session, f"derivatives/{key}/manifest.json"))
    for output in manifest["outputs"]:
        body = stored(local_session, output["key"])
        assert (output["sha256"], output["bytes"]) == (hashlib.sha256(body).hexdigest(), len(body)), output["name"]
    described = {o["name"]: o["sha256"] for o in manifest["outputs"]}
    assert described["card"] == sha256_hex(a_files["card.webp"])  # A's bytes, not B's


class _Body:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_):
        yield self.body


def test_a_takeover_retried_after_its_answer_was_lost_still_adopts_the_staged_manifest(local_session, settings):
    """The takeover's UpdateItem is applied but its answer lost (a 500); the SDK's retry
    fails the condition, the claim reads the row: it must still carry the staged body."""
    data = unique_png(320, 240)
    ref = upload(local_session, data)
    with pytest.raises(Crash):
        worker(local_session, settings, CrashAt("manifest_stored"), 0).process(ref)
    armed = [True]

    def lose_answer(request, **_):
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        if armed[0] and '"attempts"' in body:  # the takeover's update (fenced on the attempts seen)
            armed[0] = False
            URLLib3Session().send(request)  # applied by DynamoDB ...
            error = b'{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"lost"}'
            return AWSResponse(request.url, 500, {"x-amzn-RequestId": "lost"}, _Body(error))  # ... answer lost
        return None

    def losing_answers(ledger):
        """The worker's own ledger, its DynamoDB client losing the takeover's answer."""
        client = ledger._model._get_connection().connection.client
        client.meta.events.register("before-send.dynamodb.UpdateItem", lose_answer)
        return ledger

    collector = Collector()
    result = worker(local_session, settings, collector, 1, ledger=losing_answers).process(ref)
    assert not armed[0] and result.state == "done"
    assert [(c.took_over, c.staged_manifest is not None) for c in collector.claims] == [(True, True)]
    assert collector.renders == []


def _crash_before_the_manifest_is_written(store) -> Wrapping:
    """``store`` whose holder dies after staging the manifest, before its PutObject."""

    def put(bucket, key, body, *, content_type):
        if key.endswith("/manifest.json"):
            raise Crash("staged, not written")
        return store.put_if_absent(bucket, key, body, content_type=content_type)

    return Wrapping(store, put_if_absent=put)


def _counting_reads(reads: list[str]):
    """A wrap of the S3 adapter recording in ``reads`` the keys it reads (HeadObject and
    GetObject of the original)."""

    def wrap(store) -> Wrapping:
        def head(ref):
            reads.append("head " + ref.key)
            return store.head(ref)

        def download(ref, dest, *, etag=None):
            reads.append("get " + ref.key)
            return store.download(ref, dest, etag=etag)

        return Wrapping(store, head=head, download=download)

    return wrap


def _all_but_one_attempt_used(session, settings: Settings, data: bytes) -> tuple[ObjectRef, str]:
    """Upload ``data``; holders then die after their claims until one attempt is left."""
    ref, key = upload(session, data), image_job(data, session.stack.settings())
    for attempt in range(settings.max_attempts - 1):
        with pytest.raises(Crash):
            worker(session, settings, CrashAt("claimed"), attempt).process(ref)
    return ref, key


def test_a_staged_manifest_not_yet_written_is_committed_without_reading_the_original(local_session, settings):
    """Holders die after their claims until the attempts are used up, the last after
    staging: the next delivery writes the staged manifest, past the cap, having read the
    original's HeadObject only (its hash comes from the source index)."""
    ref, key = _all_but_one_attempt_used(local_session, settings, unique_png(640, 480))
    last_holder = worker(
        local_session, settings, Collector(), settings.max_attempts - 1, store=_crash_before_the_manifest_is_written
    )
    with pytest.raises(Crash):
        last_holder.process(ref)
    row = row_of(local_session, key)
    assert (row.state, int(row.attempts), row.staged_manifest is not None) == ("running", settings.max_attempts, True)
    collector = Collector()
    reads: list[str] = []
    committer = worker(local_session, settings, collector, settings.max_attempts, store=_counting_reads(reads))
    result = committer.process(ref)
    row = row_of(local_session, key)
    assert (result.state, result.bytes_read, collector.renders, row.state) == ("done", 0, [], "done")
    assert reads == ["head " + ref.key]
    manifest = json.loads(stored(local_session, f"derivatives/{key}/manifest.json"))
    assert row.outputs == manifest["outputs"]
    for output in manifest["outputs"]:
        body = stored(local_session, output["key"])
        assert (output["sha256"], output["bytes"]) == (hashlib.sha256(body).hexdigest(), len(body))


def test_claims_are_given_back_when_the_original_is_gone_before_it_is_read(local_session, settings):
    """The job belongs to the content, not to this object: a copy may still come, so the
    claim taken before the read is released (not failed, not left running)."""
    data = unique_png(320, 240)
    ref, key = upload(local_session, data), image_job(data, local_session.stack.settings())
    with pytest.raises(Crash):
        worker(local_session, settings, CrashAt("claimed"), 0).process(ref)

    def version_deleted_first(store):
        def download(r, dest, *, etag=None):
            local_session.s3.delete_object(Bucket=r.bucket, Key=r.key, VersionId=r.version_id)
            return store.download(r, dest, etag=etag)

        return Wrapping(store, download=download)

    second = worker(local_session, settings, Collector(), 1, store=version_deleted_first)
    result = second.process(ref)
    row = row_of(local_session, key)
    assert (result.state, result.reason) == ("permanent_failure", "source_missing")
    assert (row.state, int(row.attempts)) == ("transient_failure", 2)
    # A copy of the content under another key takes the job over and commits it.
    copy = upload(local_session, data)
    assert worker(local_session, settings, Collector(), 2).process(copy).state == "done"
    assert row_of(local_session, key).state == "done"


def test_a_holder_staging_just_before_its_job_is_exhausted_gets_its_manifest_committed(local_session, settings):
    """A duplicate reads the row (attempts used up, lease expired, nothing staged) and
    goes to end it attempts_exhausted; in between the lost holder stages its manifest. The
    conditional exhaustion fails, the duplicate takes the job over and commits the staged
    manifest instead of reporting it busy."""
    ref, key = _all_but_one_attempt_used(local_session, settings, unique_png(320, 240))
    seen: dict[str, object] = {}

    def stage_while_a_duplicate_exhausts(slow_ledger):
        def stage(job_key, token, body, *, now_s):
            def staging_first(ledger):
                def claim(spec, **kwargs):
                    slow_ledger.stage_manifest(job_key, token, body, now_s=now_s)  # the slow holder stages just now
                    return ledger.claim(spec, **kwargs)

                return Wrapping(ledger, claim=claim)

            duplicate = worker(local_session, settings, Collector(), settings.max_attempts + 1, ledger=staging_first)
            seen["duplicate"] = duplicate.process(ref)
            return body

        return Wrapping(slow_ledger, stage_manifest=stage)

    slow = worker(
        local_session, settings, Collector(), settings.max_attempts - 1, ledger=stage_while_a_duplicate_exhausts
    )
    with pytest.raises(Superseded):  # the duplicate took the job over and committed it
        slow.process(ref)
    duplicate = seen["duplicate"]
    assert (duplicate.state, duplicate.jobs[0].reused) == ("done", False)
    row = row_of(local_session, key)
    assert (row.state, int(row.attempts)) == ("done", settings.max_attempts + 1)
