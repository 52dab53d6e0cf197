"""Races the asset records must survive, through the real service on the embedded AWS (its
S3 sends sequencers and deletes as AWS does): ten workers on one key's interleaved
overwrites and deletes delivered in every order, and a re-upload racing the collection of
its job. Steps run in process (no render child): these are the service's races, not the
renderer's."""

from __future__ import annotations

import collections
import dataclasses
import io
import itertools
import json
import random
import threading
from collections.abc import Callable

import pytest
from PIL import Image

from mediajobs.adapters.records import ObjectEventRecord, is_deleted, to_deleted, to_object_ref
from mediajobs.bootstrap import Adapters, build_service, steps
from mediajobs.domain.assets import AssetState
from mediajobs.domain.errors import JobBusy, Superseded, TransientFailure
from mediajobs.local.embedded import listen_to_s3_events
from mediajobs.local.events import sqs_record
from mediajobs.local.session import local_adapters
from mediajobs.service_layer.collection import Collector
from mediajobs.service_layer.pipeline import Pipeline
from tests.fakes import Wrapping

WORKERS = 10


def jpeg(seed: int) -> bytes:
    rng = random.Random(seed)
    out = io.BytesIO()
    Image.frombytes("RGB", (48, 32), rng.randbytes(48 * 32 * 3)).save(out, "JPEG", quality=80)
    return out.getvalue()


def adapters_of(session, wrap: Callable[[Adapters], Adapters] | None = None) -> Adapters:
    settings = session.stack.settings()
    adapters = dataclasses.replace(local_adapters(session.stack, settings), steps=steps(settings, in_process=True))
    return wrap(adapters) if wrap is not None else adapters


def services(session, count: int) -> list[Pipeline]:
    """``count`` services with their own clients, built before any works (building one
    empties the work folder)."""
    settings = session.stack.settings()
    return [build_service(settings, adapters=adapters_of(session)) for _ in range(count)]


class Events:
    """The events the embedded S3 sends while open, by key."""

    def __init__(self) -> None:
        self.by_key: dict[str, list[dict]] = collections.defaultdict(list)

    def __enter__(self) -> Events:
        self._stop = listen_to_s3_events(
            lambda e: self.by_key[e["detail"]["object"]["key"]].append(json.loads(json.dumps(e)))
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()


def deliver(service: Pipeline, event: dict, queue_arn: str) -> str:
    """One delivery of ``event`` as the worker takes it: ``busy`` when it must come back."""
    message = {"MessageId": "m", "ReceiptHandle": "r", "Body": json.dumps(event)}
    record = ObjectEventRecord.model_validate(sqs_record(message, queue_arn))
    try:
        if is_deleted(record):
            return str(service.remove(to_deleted(record)).state)
        return str(service.process(to_object_ref(record)).state)
    except (JobBusy, TransientFailure, Superseded):
        return "busy"


def purge(session) -> None:
    """Drop what the rule queued: these tests deliver the events they kept themselves
    (received and deleted: SQS allows one PurgeQueue a minute)."""
    url = session.stack.queue_url
    while messages := session.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        for m in messages:
            session.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def written(session, pipelines: list[Pipeline], write: Callable[[], object]) -> collections.Counter[str]:
    """Do ``write`` (S3 writes), then deliver every event it made to ``pipelines``."""
    with Events() as events:
        write()
    purge(session)
    work = [e for sent in events.by_key.values() for e in sent]
    return drain(pipelines, work, session.stack.queue_arn)


def drain(pipelines: list[Pipeline], work: list[dict], queue_arn: str) -> collections.Counter[str]:
    """Ten workers take ``work`` in its order from one queue; what must come back goes to
    its end (as SQS redelivers it)."""
    queue = collections.deque(work)
    lock = threading.Lock()
    outcomes: collections.Counter[str] = collections.Counter()

    def worker(n: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                event = queue.popleft()
            outcome = deliver(pipelines[n], event, queue_arn)
            with lock:
                outcomes[outcome] += 1
                if outcome == "busy":
                    queue.append(event)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(len(pipelines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_ten_workers_on_overwrites_and_deletes_in_every_order_keep_the_last_write_and_exact_counts(local_session):
    """Per key: put A, put B, delete (a marker), put C -- its four real events delivered in
    one of the 24 orders (a key per order), all keys' events interleaved among ten workers,
    each event twice. The last write (C) is current and ready on every key; the jobs of A
    and B have no reference left, C's one per key."""
    s3, bucket = local_session.s3, local_session.stack.bucket
    a, b, c = jpeg(1001), jpeg(1002), jpeg(1003)
    orders = list(itertools.permutations(range(4)))
    keys = [f"originals/races/order-{i:02d} é.jpg" for i in range(len(orders))]
    with Events() as events:
        for key in keys:
            s3.put_object(Bucket=bucket, Key=key, Body=a, ChecksumAlgorithm="SHA256")
            s3.put_object(Bucket=bucket, Key=key, Body=b, ChecksumAlgorithm="SHA256")
            s3.delete_object(Bucket=bucket, Key=key)
            s3.put_object(Bucket=bucket, Key=key, Body=c, ChecksumAlgorithm="SHA256")
    purge(local_session)
    work = []
    for key, order in zip(keys, orders, strict=True):
        sent = events.by_key[key.replace(" ", "+").replace("é", "%C3%A9")]
        assert [e["detail-type"] for e in sent] == ["Object Created"] * 2 + ["Object Deleted", "Object Created"]
        work.extend(sent[i] for i in order)
    rng = random.Random(14)
    work = work + rng.sample(work, len(work))  # every event twice, the copies in another order
    pipelines = services(local_session, WORKERS)
    outcomes = drain(pipelines, work, local_session.stack.queue_arn)
    assert set(outcomes) <= {"done", "superseded", "deleted", "busy"}

    assets = adapters_of(local_session).assets
    assert assets is not None
    current = {}
    for key in keys:
        view = assets.get(bucket, key)
        head = s3.head_object(Bucket=bucket, Key=key)
        assert view is not None and view.state == AssetState.READY, (key, view)
        assert view.version.version_id == head["VersionId"]
        current[key] = view.job_keys
    (c_jobs,) = set(current.values())
    jobs_of = {}

    def probes() -> None:
        for name, data in (("a", a), ("b", b)):
            s3.put_object(Bucket=bucket, Key=f"originals/races/probe-{name}.jpg", Body=data, ChecksumAlgorithm="SHA256")

    written(local_session, pipelines[:1], probes)
    for name in ("a", "b"):
        jobs_of[name] = assets.get(bucket, f"originals/races/probe-{name}.jpg").job_keys
    for job in c_jobs:
        assert assets.references(job) == len(keys)
    for name in ("a", "b"):
        for job in jobs_of[name]:
            assert assets.references(job) == 1  # the probe alone


def _reupload_race(local_session, content: bytes, name: str, interleave: str) -> None:
    """Key ``first`` holds ``content`` and is deleted (nothing references its jobs); then a
    re-upload of the same bytes under ``second`` races the collection, at ``interleave``:

    * ``before_the_mark``: the re-upload is delivered whole (its reference added, the job
      found ``done``, the asset ``ready``) between the collector's first look at the
      references and its ``collecting`` mark: the second look finds the reference and the
      collection stops;
    * ``during_the_second_look``: delivered after the mark (it finds the job collecting
      and comes back; the collection stops or goes on, the redelivery renders again);
    * ``while_deleting``: the re-upload comes while the prefix is being deleted (it finds
      the job collecting, waits, and renders again after);
    * ``after``: once the job is collected (it renders again).

    Whatever the interleaving, the re-upload ends ``ready`` and every job it references
    has its manifest."""
    s3, bucket = local_session.s3, local_session.stack.bucket
    first, second = f"originals/collect-race/{name}-first.jpg", f"originals/collect-race/{name}-second.jpg"
    (worker,) = services(local_session, 1)
    written(
        local_session,
        [worker],
        lambda: s3.put_object(Bucket=bucket, Key=first, Body=content, ChecksumAlgorithm="SHA256"),
    )
    plain = adapters_of(local_session)
    assert plain.assets is not None
    mine = plain.assets.get(bucket, first).job_keys  # the interleavings are placed on these jobs
    written(local_session, [worker], lambda: s3.delete_object(Bucket=bucket, Key=first))
    with Events() as events:
        s3.put_object(Bucket=bucket, Key=second, Body=content, ChecksumAlgorithm="SHA256")
    purge(local_session)
    (event,) = events.by_key[second]
    outcomes: list[str] = []

    def reupload() -> None:
        """The re-upload's delivery (once; a busy one comes back after the collection)."""
        if not outcomes:
            outcomes.append(deliver(worker, event, local_session.stack.queue_arn))

    assets, store, ledger = plain.assets, plain.store, plain.ledger
    if interleave == "before_the_mark":

        def begin_collection(job_key, token, **kwargs):
            if job_key in mine:
                reupload()
            return plain.ledger.begin_collection(job_key, token, **kwargs)

        ledger = Wrapping(ledger, begin_collection=begin_collection)
    elif interleave == "during_the_second_look":
        looks = []

        def referenced(job_key):
            looks.extend([job_key] if job_key in mine else [])
            if len(looks) == 2:  # the second look at one of mine, after its collecting mark
                reupload()
            return plain.assets.referenced(job_key)

        assets = Wrapping(assets, referenced=referenced)
    elif interleave == "while_deleting":

        def delete_prefix(bucket_, prefix, *, first=None):
            if any(job in prefix for job in mine):
                reupload()
            return plain.store.delete_prefix(bucket_, prefix, first=first)

        store = Wrapping(store, delete_prefix=delete_prefix)
    settings = local_session.stack.settings()
    Collector(assets, ledger, store, settings, clock=plain.clock).run(grace_s=0)
    assert outcomes or interleave == "after", "the interleaving was not reached"
    reupload()  # "after" (a no-op when it ran during the collection)
    if outcomes == ["busy"]:  # it found the job collecting: it comes back, as SQS redelivers it
        outcomes.append(deliver(worker, event, local_session.stack.queue_arn))
    print("OUTCOMES", interleave, outcomes)
    assert outcomes[-1] == "done", outcomes
    view = plain.assets.get(bucket, second)
    assert view is not None and view.state == AssetState.READY, (interleave, view)
    for job in view.jobs:
        s3.head_object(Bucket=bucket, Key=job.manifest_key)  # raises when the manifest is gone
        assert plain.assets.referenced(job.job_key)


@pytest.mark.parametrize("interleave", ["before_the_mark", "during_the_second_look", "while_deleting", "after"])
def test_a_reupload_racing_the_collection_of_its_job_never_leaves_a_ready_asset_without_its_manifest(
    local_session, interleave
):
    _reupload_race(local_session, jpeg(2000 + len(interleave)), interleave, interleave)
