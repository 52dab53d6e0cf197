"""The pipeline keeps each event's asset (``docs/assets.md``), on fakes: states forward only,
overwrites in sequencer order, deletes as S3 sends them, refusals and failures with their
reason, the reference in place before the job rows are read."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from mediajobs.adapters.records import ObjectEventRecord, is_deleted, parses, to_deleted, to_object_ref
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.assets import (
    AssetJobState,
    AssetState,
    AssetVersion,
    Deleted,
    reference_id,
    sequencer_order,
)
from mediajobs.domain.errors import EMPTY_FILE, TOO_MANY_PIXELS, UNSUPPORTED_FORMAT, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import ClaimOutcome, ObjectRef, SourceState
from mediajobs.domain.keys import encode_event_key, job_key, sha256_hex
from mediajobs.entrypoints.worker import make_handler
from mediajobs.local.events import object_created_event, sqs_event
from mediajobs.local.runner import LocalLambdaContext
from mediajobs.service_layer.assets import AssetKeeper
from mediajobs.service_layer.delivery import Acknowledge, Outcome, Policy, decide, outcome_of_result
from mediajobs.service_layer.pipeline import Pipeline
from mediajobs.service_layer.ports import StepResult
from mediajobs.settings import Settings
from tests.fakes import (
    TEST_KEY_SECRET,
    FakeAssets,
    FakeClock,
    FakeImageStep,
    FakeLedger,
    FakeSources,
    FakeStore,
    FakeVideoStep,
    Wrapping,
    pipeline_on,
)

pytestmark = pytest.mark.unit

WEB = load_recipe("web-image", 1)
PLACEHOLDER = load_recipe("image-placeholder", 1)
VIDEO = load_recipe("web-video", 2)
BUCKET, KEY = "bucket", "originals/a.jpg"
#: Real-looking S3 sequencers of one key, in order: the shorter one is the earlier (they
#: compare as hexadecimal numbers, not as strings).
FIRST, SECOND, THIRD = "5DCFB0F4FC0E8B", "0062E99A88DC407460", "0062E99A88DC4074A0"
THUMBHASH = {"placeholder": "thumbhash", "thumbhash": "1QcSHQRnh493V4dIh4eXh1h4kJUI", "color": "#7f6a55"}


class PlaceholderStep:
    """The ``image.placeholder`` step: no files, the placeholder in its decisions."""

    name = "image.placeholder"
    params_model = PLACEHOLDER.params.__class__

    def run(self, source, params, context, out_dir):
        return StepResult([], dict(THUMBHASH))


class VersionedStore(FakeStore):
    """:class:`FakeStore` whose ``HeadObject`` reports ``versions[key]`` (``v1`` by default)."""

    def __init__(self, objects, log, checksums=False):
        super().__init__(objects, log, checksums)
        self.versions: dict[str, str] = {}

    def head(self, ref):
        head = super().head(ref)
        return dataclasses.replace(head, version_id=self.versions.get(ref.key, "v1"))


@dataclasses.dataclass
class Rig:
    pipeline: Pipeline
    store: VersionedStore
    ledger: FakeLedger
    assets: FakeAssets
    image_step: FakeImageStep
    log: list
    clock: FakeClock

    def created(self, sequencer: str, data: bytes | None = None, version_id: str = "v1"):
        """Put ``data`` (if given) as the key's current version, and process its event."""
        if data is not None:
            self.store.objects[KEY] = data
            self.store.versions[KEY] = version_id
        size = len(self.store.objects[KEY])
        return self.pipeline.process(ObjectRef(BUCKET, KEY, version_id, size, sequencer=sequencer))

    def view(self):
        return self.assets.get(BUCKET, KEY)

    def asset_calls(self):
        return [e for e in self.log if e[0] in ("make_current", "record", "delete")]


def make(tmp_path, *, data=b"photo", checksums=False, media="image", error=None, recipes=None, wrap=None):
    log: list = []
    clock = FakeClock()
    store = VersionedStore({KEY: data}, log, checksums)
    ledger, sources, assets = FakeLedger(log), FakeSources(log), FakeAssets(log)
    image_step = FakeImageStep(error)
    adapters = {"store": store, "ledger": ledger, "sources": sources, "assets": assets}
    if wrap:
        adapters = {name: wrap.get(name, lambda a: a)(adapter) for name, adapter in adapters.items()}
    pipeline = pipeline_on(
        Settings(key_secret=TEST_KEY_SECRET, work_dir=str(tmp_path)),
        store=adapters["store"],
        ledger=adapters["ledger"],
        sources=adapters["sources"],
        assets=adapters["assets"],
        steps={
            "image.variants": image_step,
            "image.placeholder": PlaceholderStep(),
            "video.renditions": FakeVideoStep(),
        },
        recipes=recipes or {"image": [WEB, PLACEHOLDER]},
        detect_media=lambda p, k: media,
        clock=clock,
        disk_usage=shutil.disk_usage,
    )
    return Rig(pipeline, store, ledger, assets, image_step, log, clock)


def states_of(assets: FakeAssets):
    """A wrapper of ``assets`` and the list of (call, asset state) it appends to."""
    seen: list[tuple[str, str | None]] = []

    def watching(name):
        def call(*args, **kwargs):
            view = getattr(assets, name)(*args, **kwargs)
            seen.append((name, None if view is None else str(view.state)))
            return view

        return call

    return Wrapping(assets, make_current=watching("make_current"), record=watching("record")), seen


def test_a_new_upload_goes_pending_then_processing_then_ready_with_outputs_and_placeholder(tmp_path):
    assets = FakeAssets()
    wrapped, seen = states_of(assets)
    rig = make(tmp_path, wrap={"assets": lambda _: wrapped})
    rig.assets = assets
    result = rig.created(FIRST)
    assert result.state == SourceState.DONE
    # pending (the hash unknown), then the jobs attached, processing once claimed, ready.
    assert seen == [
        ("make_current", "pending"),
        ("make_current", "pending"),
        ("record", "processing"),
        ("record", "ready"),
    ]
    view = rig.view()
    assert view.state == AssetState.READY and view.reason is None
    assert view.version == AssetVersion("v1", "etag-" + sha256_hex(b"photo")[:8], 5, sequencer_order(FIRST))
    assert (view.sha256, view.media) == (sha256_hex(b"photo"), "image")
    web, placeholder = view.jobs
    assert (web.recipe, placeholder.recipe) == ("web-image@1", "image-placeholder@1")
    assert [o.name for o in web.outputs] == ["thumb", "card", "full"]
    assert web.manifest_key == f"derivatives/{web.job_key}/manifest.json" and web.state == AssetJobState.DONE
    assert view.placeholder == THUMBHASH
    assert {rig.assets.references(j.job_key) for j in view.jobs} == {1}


def test_the_reference_is_in_place_before_the_job_rows_are_read(tmp_path):
    rig = make(tmp_path, checksums=True)
    rig.created(FIRST)
    rig.store.objects["originals/b.jpg"] = b"photo"  # the same bytes under another key
    del rig.log[:]
    rig.pipeline.process(ObjectRef(BUCKET, "originals/b.jpg", "v1", 5, sequencer=FIRST))
    calls = [e[0] for e in rig.log if e[0] in ("make_current", "find")]
    # The media type is learnt from the rows: the rows are read again once the reference is there.
    assert calls == ["find", "make_current", "find"]
    assert rig.assets.get(BUCKET, "originals/b.jpg").state == AssetState.READY
    assert rig.image_step.calls == 1


@pytest.mark.parametrize("checksums", [True, False], ids=["checksum", "no-checksum"])
def test_a_duplicate_of_a_ready_asset_writes_nothing_and_costs_one_read(tmp_path, checksums):
    reads: list[str] = []
    rig = make(
        tmp_path,
        checksums=checksums,
        wrap={"assets": lambda a: Wrapping(a, get=lambda b, k: reads.append("get") or a.get(b, k))},
    )
    rig.created(FIRST)
    before, renders = rig.view(), rig.image_step.calls
    del rig.log[:], reads[:]
    result = rig.created(FIRST)
    assert result.state == SourceState.DONE and all(j.reused for j in result.jobs)
    assert rig.view() == before and rig.image_step.calls == renders
    assert rig.asset_calls() == []  # nothing moves it back, nothing is written
    # One DynamoDB request, the asset's read: it holds what the answer needs (the version
    # ended, every job final). No HeadObject, no job row, no byte of S3.
    assert reads == ["get"] and rig.log == []
    assert result.bytes_read == 0 and {j.job_key for j in result.jobs} == {j.job_key for j in before.jobs}


def test_an_overwrite_with_other_bytes_makes_the_new_version_current_and_the_old_jobs_unreferenced(tmp_path):
    rig = make(tmp_path)
    rig.created(FIRST)
    old = rig.view()
    rig.clock.advance(60)
    result = rig.created(SECOND, b"other photo", version_id="v2")
    assert result.state == SourceState.DONE
    new = rig.view()
    assert (new.state, new.version.version_id, new.sha256) == (AssetState.READY, "v2", sha256_hex(b"other photo"))
    assert new.version.sequencer == sequencer_order(SECOND)
    for job in old.jobs:
        assert rig.assets.references(job.job_key) == 0
        assert rig.assets.candidate_rows[(job.job_key, reference_id(BUCKET, KEY))] == 1060
    assert {rig.assets.references(j.job_key) for j in new.jobs} == {1}


def test_a_late_event_of_the_older_version_is_superseded_with_nothing_read_rendered_or_counted(tmp_path):
    rig = make(tmp_path)
    rig.created(FIRST)
    rig.created(SECOND, b"other photo", version_id="v2")
    current, renders = rig.view(), rig.image_step.calls
    del rig.log[:]
    result = rig.pipeline.process(ObjectRef(BUCKET, KEY, "v1", 5, sequencer=FIRST))  # delivered late
    assert result.state == SourceState.SUPERSEDED and result.jobs == []
    assert rig.log == [] and rig.image_step.calls == renders and rig.view() == current
    assert (
        decide(
            outcome_of_result(result.state),
            receive_count=1,
            handovers=0,
            policy=Policy(5, 5, 900, 120),
            now_s=0,
            rng=None,
        )
        == Acknowledge()
    )


def test_a_delete_marker_makes_the_asset_deleted_and_drops_its_references(tmp_path):
    rig = make(tmp_path)
    rig.created(FIRST)
    jobs = rig.view().jobs
    result = rig.pipeline.remove(Deleted(BUCKET, KEY, "marker-1", "Delete Marker Created", SECOND, "DeleteObject"))
    assert result.state == SourceState.DELETED
    view = rig.view()
    assert (view.state, view.version.version_id, view.version.sequencer) == (
        AssetState.DELETED,
        "marker-1",
        sequencer_order(SECOND),
    )
    assert [rig.assets.references(j.job_key) for j in jobs] == [0, 0]
    # A late Object Created of the deleted version is superseded by the delete.
    assert rig.created(FIRST).state == SourceState.SUPERSEDED


def test_a_noncurrent_version_deleted_changes_nothing_visible(tmp_path):
    """A lifecycle expiration of an old version: the key is looked at again (the asset
    cannot know the version was not current: events come out of order), its current
    version stays current and ready, only the sequencer moves; nothing is rendered."""
    rig = make(tmp_path)
    rig.created(SECOND, b"photo", version_id="v2")
    before, renders = rig.view(), rig.image_step.calls
    result = rig.pipeline.remove(Deleted(BUCKET, KEY, "v1", "Permanently Deleted", THIRD, "Lifecycle Expiration"))
    after = rig.view()
    assert result.state == SourceState.DONE and rig.image_step.calls == renders
    assert (after.state, after.version.version_id, after.jobs) == (before.state, "v2", before.jobs)
    assert after.version.sequencer == sequencer_order(THIRD)


def test_an_older_delete_is_superseded(tmp_path):
    rig = make(tmp_path)
    rig.created(SECOND)
    before = rig.view()
    result = rig.pipeline.remove(Deleted(BUCKET, KEY, "m", "Delete Marker Created", FIRST, "DeleteObject"))
    assert result.state == SourceState.SUPERSEDED and rig.view() == before


def test_the_current_version_deleted_for_good_makes_the_older_one_current_again_without_a_render(tmp_path):
    rig = make(tmp_path)
    rig.created(FIRST, b"old photo", version_id="v1")
    old_jobs = rig.view().jobs
    rig.created(SECOND, b"new photo", version_id="v2")
    new_jobs, renders = rig.view().jobs, rig.image_step.calls
    # S3 serves v1 again once v2 is deleted for good (no event says so).
    rig.store.objects[KEY], rig.store.versions[KEY] = b"old photo", "v1"
    result = rig.pipeline.remove(Deleted(BUCKET, KEY, "v2", "Permanently Deleted", THIRD, "DeleteObject"))
    assert result.state == SourceState.DONE and all(j.reused for j in result.jobs)
    view = rig.view()
    assert (view.state, view.version.version_id, view.sha256) == (AssetState.READY, "v1", sha256_hex(b"old photo"))
    assert view.version.sequencer == sequencer_order(THIRD)
    assert rig.image_step.calls == renders
    assert [rig.assets.references(j.job_key) for j in old_jobs + new_jobs] == [1, 1, 0, 0]


def test_the_last_version_deleted_for_good_makes_the_asset_deleted(tmp_path):
    rig = make(tmp_path)
    rig.created(FIRST)
    del rig.store.objects[KEY]
    result = rig.pipeline.remove(Deleted(BUCKET, KEY, "v1", "Permanently Deleted", SECOND, "DeleteObject"))
    assert result.state == SourceState.DELETED and rig.view().state == AssetState.DELETED


def test_an_empty_file_makes_the_asset_failed_with_empty_file(tmp_path):
    rig = make(tmp_path, data=b"")
    result = rig.pipeline.process(ObjectRef(BUCKET, KEY, "v1", 0, sequencer=FIRST))
    assert (result.state, result.reason) == (SourceState.PERMANENT_FAILURE, EMPTY_FILE)
    view = rig.view()
    assert (view.state, view.reason, view.jobs) == (AssetState.FAILED, EMPTY_FILE, ())
    del rig.log[:]
    rig.pipeline.process(ObjectRef(BUCKET, KEY, "v1", 0, sequencer=FIRST))  # its duplicate writes nothing
    assert rig.asset_calls() == []


@pytest.mark.parametrize("marker", ["originals/photos/", "originals/a/b/", "originals//"])
def test_a_folder_marker_is_no_upload_no_asset_no_notification(tmp_path, marker):
    """What the S3 console's "Create folder" writes: a zero-byte key ending in ``/``."""
    rig = make(tmp_path, data=b"")
    rig.store.objects[marker] = b""
    created = rig.pipeline.process(ObjectRef(BUCKET, marker, "v1", 0, sequencer=FIRST))
    deleted = rig.pipeline.remove(Deleted(BUCKET, marker, "m1", "Delete Marker Created", SECOND, "DeleteObject"))
    assert (created.state, deleted.state) == (SourceState.IGNORED, SourceState.IGNORED)
    assert rig.log == [] and rig.assets.get(BUCKET, marker) is None and rig.assets.outbox == {}


def test_content_no_recipe_applies_to_makes_the_asset_failed(tmp_path):
    rig = make(tmp_path, media=None)
    rig.created(FIRST)
    view = rig.view()
    assert (view.state, view.reason, view.jobs) == (AssetState.FAILED, UNSUPPORTED_FORMAT, ())


def test_a_job_failing_for_good_makes_the_asset_failed_with_its_reason(tmp_path):
    rig = make(tmp_path, error=PermanentFailure(TOO_MANY_PIXELS, "40000x40000"))
    result = rig.created(FIRST)
    assert result.state == SourceState.PERMANENT_FAILURE
    view = rig.view()
    assert (view.state, view.reason, view.detail) == (AssetState.FAILED, TOO_MANY_PIXELS, "40000x40000")
    web, placeholder = view.jobs
    assert (web.state, web.reason) == (AssetJobState.FAILED, TOO_MANY_PIXELS)
    assert placeholder.state == AssetJobState.DONE


def test_superseded_between_the_pending_version_and_its_jobs_renders_nothing(tmp_path):
    rig: Rig

    def download(ref, dest, *, etag=None):
        downloaded = rig.store.download(ref, dest, etag=etag)
        # Meanwhile, a newer version's event makes it current.
        newer = AssetVersion("v2", "e2", 9, sequencer_order(SECOND))
        rig.assets.make_current(BUCKET, KEY, newer, sha256=None, media=None, jobs=None, now_s=0)
        return downloaded

    rig = make(tmp_path, wrap={"store": lambda s: Wrapping(s, download=download)})
    result = rig.created(FIRST)
    assert result.state == SourceState.SUPERSEDED
    assert rig.image_step.calls == 0 and rig.ledger.rows == {}
    assert rig.view().version.version_id == "v2"


def test_a_claim_taking_over_an_interrupted_collection_sweeps_the_prefix_before_rendering(tmp_path):
    def claim(spec, **kwargs):
        found = rig.ledger.claim(spec, **kwargs)
        return dataclasses.replace(found, sweep=True) if found.outcome is ClaimOutcome.RUN else found

    rig = make(tmp_path, wrap={"ledger": lambda ledger: Wrapping(ledger, claim=claim)})
    web_key = job_key(
        sha256_hex(b"photo"),
        WEB.sha256,
        Settings(key_secret=TEST_KEY_SECRET).policy_version,
        keys=Settings(key_secret=TEST_KEY_SECRET).keys,
    )
    prefix = f"derivatives/{web_key}/"
    rig.store.objects[prefix + "manifest.json"] = b'{"old": true}'
    rig.store.objects[prefix + "stale.webp"] = b"stale"
    rig.created(FIRST)
    sweep = rig.log.index(("delete_prefix", prefix))
    first_put = next(i for i, e in enumerate(rig.log) if e[0] == "put" and e[1].startswith(prefix))
    assert sweep < first_put
    assert prefix + "stale.webp" not in rig.store.objects
    assert json.loads(rig.store.objects[prefix + "manifest.json"])["outputs"]
    assert rig.view().state == AssetState.READY


def test_a_video_job_reports_its_progress_to_the_asset(tmp_path):
    progress: list[tuple[str, float]] = []

    def record_progress(bucket, key, sequencer, job_key, fraction, *, now_s):
        progress.append((job_key, fraction))

    rig = make(
        tmp_path,
        media="video",
        recipes={"video": [VIDEO]},
        wrap={"assets": lambda a: Wrapping(a, progress=record_progress)},
    )
    rig.created(FIRST)
    (job,) = rig.view().jobs
    assert progress == [(job.job_key, 0.5)]  # FakeVideoStep reports 1 s of 2


def test_progress_is_written_at_most_every_few_seconds_and_never_raises():
    calls: list[float] = []

    class Assets:
        def get(self, bucket, key):
            return None

        def progress(self, bucket, key, sequencer, job_key, fraction, *, now_s):
            calls.append(fraction)
            if fraction > 0.5:
                raise RuntimeError("throttled")

    clock = FakeClock(0.0)
    kept = AssetKeeper(Assets(), clock, progress_every_s=5.0).track(ObjectRef(BUCKET, KEY, sequencer=FIRST))
    sink = kept.progress_sink("k" * 64)
    for at_s, done_s in [(0, 1), (1, 2), (4.9, 3), (5, 6), (11, 9)]:
        clock.now = at_s
        sink(done_s, 10.0)
    assert calls == [0.1, 0.6, 0.9]


def test_superseded_and_deleted_records_are_acknowledged():
    policy = Policy(5, 5, 900, 120)
    for state, outcome in [(SourceState.SUPERSEDED, Outcome.OUTDATED), (SourceState.DELETED, Outcome.DELETED)]:
        assert outcome_of_result(state) is outcome
        assert decide(outcome, receive_count=5, handovers=0, policy=policy, now_s=0, rng=None) == Acknowledge()


def test_without_assets_nothing_is_kept_and_deletes_are_acknowledged(tmp_path):
    log: list = []
    store = FakeStore({KEY: b"photo"}, log)
    pipeline = pipeline_on(
        Settings(key_secret=TEST_KEY_SECRET, work_dir=str(tmp_path)),
        store=store,
        ledger=FakeLedger(log),
        sources=FakeSources(log),
        steps={"image.variants": FakeImageStep()},
        recipes={"image": [WEB]},
        detect_media=lambda p, k: "image",
    )
    assert pipeline.process(ObjectRef(BUCKET, KEY, None, 5, sequencer=FIRST)).state == SourceState.DONE
    calls = len(log)
    deleted = pipeline.remove(Deleted(BUCKET, KEY, None, "Permanently Deleted", SECOND))
    assert deleted.state == SourceState.DELETED and len(log) == calls


# --------------------------------------------------------------------------- the handler


def _deleted_event(key: str, *, version_id: str | None, deletion_type: str | None, sequencer: str) -> dict:
    """An EventBridge "Object Deleted" event as S3 sends it (S3 user guide, "EventBridge
    event message structure": no size or ETag; ``deletion-type``), built by hand."""
    obj = {"key": encode_event_key(key), "sequencer": sequencer}
    if version_id is not None:
        obj["version-id"] = version_id
    detail = {
        "version": "0",
        "bucket": {"name": BUCKET},
        "object": obj,
        "request-id": "N4N7GDK58NMKJ12R",
        "requester": "123456789012",
        "reason": "DeleteObject",
    }
    if deletion_type is not None:
        detail["deletion-type"] = deletion_type
    return {
        "version": "0",
        "id": "2ee9cc15-d022-99ea-1fb8-1b1bac4850f9",
        "detail-type": "Object Deleted",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-12-01T17:00:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:s3:::{BUCKET}"],
        "detail": detail,
    }


def _lambda_event(*bodies: dict) -> dict:
    messages = [{"MessageId": f"m{i}", "ReceiptHandle": f"h{i}", "Body": json.dumps(b)} for i, b in enumerate(bodies)]
    return sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:jobs")


def test_an_object_deleted_record_parses_with_its_deletion_type_and_the_key_decoded():
    event = _lambda_event(
        _deleted_event("originals/a b+c.jpg", version_id="null", deletion_type="Permanently Deleted", sequencer=SECOND)
    )
    record = ObjectEventRecord.model_validate(event["Records"][0])
    assert is_deleted(record)
    assert to_deleted(record) == Deleted(
        BUCKET, "originals/a b+c.jpg", None, "Permanently Deleted", SECOND, "DeleteObject"
    )
    assert to_object_ref(record).sequencer == SECOND


def test_an_event_of_another_detail_type_does_not_parse():
    body = {
        **_deleted_event(KEY, version_id=None, deletion_type=None, sequencer=FIRST),
        "detail-type": "Object Tags Added",
    }
    assert not parses(_lambda_event(body)["Records"][0])


def test_the_handler_routes_deletes_and_acknowledges_superseded_and_deleted_records(tmp_path):
    rig = make(tmp_path)
    rig.created(SECOND, b"photo", version_id="v2")
    seen: list[tuple[str, int, str]] = []
    handler = make_handler(rig.pipeline, on_record=lambda *args: seen.append(args))
    older = object_created_event(BUCKET, KEY, size=5, version_id="v1", sequencer=FIRST)
    marker = _deleted_event(KEY, version_id="marker-1", deletion_type="Delete Marker Created", sequencer=THIRD)
    assert handler(_lambda_event(older, marker), LocalLambdaContext()) == {"batchItemFailures": []}
    assert [outcome for _, _, outcome in seen] == ["superseded", "deleted"]
    assert rig.view().state == AssetState.DELETED


def test_a_delete_redelivered_after_it_made_the_older_version_current_finishes_that_version(tmp_path):
    throttled = [False]

    def find(job_keys):
        if throttled[0]:  # the first delivery of the delete stops after making v1 current
            throttled[0] = False
            raise TransientFailure("throttled")
        return rig.ledger.find(job_keys)

    rig = make(tmp_path, wrap={"ledger": lambda ledger: Wrapping(ledger, find=find)})
    rig.created(FIRST, b"old photo", version_id="v1")
    rig.created(SECOND, b"new photo", version_id="v2")
    rig.store.objects[KEY], rig.store.versions[KEY] = b"old photo", "v1"
    delete = Deleted(BUCKET, KEY, "v2", "Permanently Deleted", THIRD, "DeleteObject")
    throttled[0] = True
    with pytest.raises(TransientFailure):
        rig.pipeline.remove(delete)
    assert (rig.view().state, rig.view().version.version_id) == (AssetState.PENDING, "v1")
    assert rig.pipeline.remove(delete).state == SourceState.DONE  # redelivered: not superseded by itself
    assert (rig.view().state, rig.view().version.version_id) == (AssetState.READY, "v1")
