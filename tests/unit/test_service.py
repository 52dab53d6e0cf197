"""The pipeline's order of operations and error classification, with in-memory fakes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import (
    SOURCE_MISSING,
    TOO_MANY_PIXELS,
    UNSTORABLE_INPUT,
    DeadlineReached,
    JobBusy,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.domain.jobs import Delivery, JobView, KnownSource, ObjectRef, OutputCandidate, OutputRecord, Reading
from mediajobs.domain.keys import job_key, sha256_hex, source_version_id
from mediajobs.domain.manifest import public_body
from mediajobs.service_layer.observer import PipelineObserver
from mediajobs.service_layer.pipeline import Pipeline
from mediajobs.settings import Settings
from tests.fakes import (
    TEST_KEY_SECRET,
    FakeImageStep,
    FakeLedger,
    FakeSources,
    FakeStore,
    FakeVideoStep,
    Wrapping,
    pipeline_on,
)

RECIPE = load_recipe("web-image", 1)


@dataclasses.dataclass
class Rig:
    """A pipeline on fakes, and the fakes (``log``: what every fake was asked, in order).
    Unpacks as ``pipeline, store, ledger, image_step, log``."""

    pipeline: Pipeline
    store: FakeStore
    ledger: FakeLedger
    sources: FakeSources
    image_step: FakeImageStep
    log: list

    def __iter__(self):
        return iter((self.pipeline, self.store, self.ledger, self.image_step, self.log))


def make(
    tmp_path,
    *,
    data=b"photo",
    error=None,
    media="image",
    checksums=False,
    clock=lambda: 1000.0,
    recipes=None,
    wrap_store=None,
    wrap_ledger=None,
    wrap_sources=None,
    image_step=None,
    disk_usage=shutil.disk_usage,
    observer=None,
):
    """``wrap_*``: a function of the fake returning the adapter the pipeline is given (a
    :class:`~tests.fakes.Wrapping` that injects a fault); the rig holds the fake itself."""
    log: list = []
    store = FakeStore({"originals/a.jpg": data}, log, checksums)
    ledger = FakeLedger(log)
    sources = FakeSources(log)
    image_step = image_step or FakeImageStep(error)
    pipeline = pipeline_on(
        Settings(key_secret=TEST_KEY_SECRET, work_dir=str(tmp_path)),
        store=wrap_store(store) if wrap_store else store,
        ledger=wrap_ledger(ledger) if wrap_ledger else ledger,
        sources=wrap_sources(sources) if wrap_sources else sources,
        steps={"image.variants": image_step, "video.renditions": FakeVideoStep()},
        recipes=recipes or {"image": [RECIPE]},
        detect_media=lambda p, k: media,
        clock=clock,
        observer=observer or PipelineObserver(),
        disk_usage=disk_usage,
    )
    return Rig(pipeline, store, ledger, sources, image_step, log)


REF = ObjectRef("bucket", "originals/a.jpg", None, 5)
#: The source index's id of REF's object as FakeStore describes it (version v1).
SOURCE_ID = source_version_id("bucket", "originals/a.jpg", version_id="v1", etag="", size_bytes=5)


def test_outputs_then_manifest_then_done(tmp_path):
    pipeline, store, ledger, _, log = make(tmp_path)
    result = pipeline.process(REF)
    job = result.jobs[0]
    prefix = f"derivatives/{job.job_key}/"
    assert [e for e in log if e[0] in ("claim", "put", "complete")] == [
        ("claim", job.job_key),
        ("put", prefix + "thumb.webp"),
        ("put", prefix + "card.webp"),
        ("put", prefix + "full.avif"),
        ("put", prefix + "manifest.json"),
        ("complete", job.job_key),
    ]
    manifest = json.loads(store.objects[prefix + "manifest.json"])
    # What the set was made from is its provenance, in the job's row: the public manifest,
    # shared by every upload of these bytes, names no original.
    assert ledger.get(job.job_key).provenance == {
        "source": {
            "bucket": "bucket",
            "key": "originals/a.jpg",
            "version_id": "v1",
            "sha256": sha256_hex(b"photo"),
            "bytes": 5,
        },
        "inputs": None,
    }
    assert sorted(manifest) == ["created_at", "decisions", "job_key", "outputs", "policy", "recipe", "schema"]
    assert manifest["schema"] == 2 and b"originals/" not in store.objects[prefix + "manifest.json"]
    assert [o["name"] for o in manifest["outputs"]] == ["thumb", "card", "full"]
    assert (result.state, job.reused, job.state) == ("done", False, "done")


def test_work_folder_is_removed(tmp_path):
    pipeline, *_ = make(tmp_path)
    pipeline.process(REF)
    assert list(tmp_path.iterdir()) == []


def test_keys_outside_originals_are_ignored(tmp_path):
    pipeline, _, _, renderer, log = make(tmp_path)
    assert pipeline.process(ObjectRef("bucket", "derivatives/x/thumb.webp")).state == "ignored"
    assert log == [] and renderer.calls == 0


def test_empty_object_fails_before_download(tmp_path):
    pipeline, _, _, _, log = make(tmp_path)
    result = pipeline.process(ObjectRef("bucket", "originals/a.jpg", None, 0))
    assert (result.state, result.reason, result.jobs) == ("permanent_failure", "empty_file", [])
    assert log == []


def test_unknown_content_fails_without_a_job(tmp_path):
    pipeline, _, _, renderer, log = make(tmp_path, media=None)
    result = pipeline.process(REF)
    assert (result.state, result.reason, result.jobs) == ("permanent_failure", "unsupported_format", [])
    assert renderer.calls == 0 and ("claim" not in [e[0] for e in log])


def test_permanent_render_failure_is_recorded_and_nothing_is_written(tmp_path):
    pipeline, store, _, _, log = make(tmp_path, error=PermanentFailure(TOO_MANY_PIXELS, "60 MP"))
    result = pipeline.process(REF)
    assert (result.state, result.reason) == ("permanent_failure", TOO_MANY_PIXELS)
    assert ("fail", TOO_MANY_PIXELS) in log
    assert [k for k in store.objects if k.startswith("derivatives/")] == []


def test_transient_failure_releases_the_claim_and_raises(tmp_path):
    pipeline, _, _, _, log = make(tmp_path, error=ConnectionError("reset"))
    with pytest.raises(TransientFailure):
        pipeline.process(REF)
    assert log[-1] == ("release", "ConnectionError('reset')")


def _key(pipeline) -> str:
    return job_key(sha256_hex(b"photo"), RECIPE.sha256, pipeline.settings.policy_version, keys=pipeline.settings.keys)


def _preload(pipeline, ledger, **row) -> str:
    key = _key(pipeline)
    ledger.rows[key] = JobView(key, lease_token="t0", recipe_id="web-image", **row)
    return key


def test_busy_raises_with_the_lease_expiry(tmp_path):
    pipeline, _, ledger, renderer, _ = make(tmp_path)
    _preload(pipeline, ledger, state="running", lease_expires_at_s=1234, attempts=1)
    with pytest.raises(JobBusy) as caught:
        pipeline.process(REF)
    assert caught.value.lease_expires_at_s == 1234 and renderer.calls == 0


def test_done_job_is_reused_without_rendering(tmp_path):
    pipeline, _, ledger, renderer, _ = make(tmp_path)
    out = OutputRecord("thumb", "k", "webp", 1, 1, 1, "0" * 64, "image/webp")
    _preload(pipeline, ledger, state="done", lease_expires_at_s=0, attempts=1, manifest_key="m", outputs=(out,))
    result = pipeline.process(REF)
    assert (result.state, result.jobs[0].reused, result.jobs[0].outputs, renderer.calls) == ("done", True, (out,), 0)


def test_failed_job_reports_the_stored_reason(tmp_path):
    pipeline, _, ledger, renderer, _ = make(tmp_path)
    _preload(
        pipeline, ledger, state="permanent_failure", lease_expires_at_s=0, attempts=1, failure_reason=TOO_MANY_PIXELS
    )
    result = pipeline.process(REF)
    assert (result.state, result.reason, result.jobs[0].reused, renderer.calls) == (
        "permanent_failure",
        TOO_MANY_PIXELS,
        True,
        0,
    )


def test_a_redelivery_is_answered_from_the_source_index_and_the_ledger_without_reading(tmp_path):
    pipeline, _, _, renderer, log = make(tmp_path)
    first = pipeline.process(REF)
    log.clear()
    again = pipeline.process(REF)
    assert [e[0] for e in log] == ["head", "lookup", "find"]
    assert (again.jobs[0].reused, again.jobs[0].outputs, again.bytes_read, first.bytes_read) == (
        True,
        first.jobs[0].outputs,
        0,
        5,
    )
    assert renderer.calls == 1


def test_a_full_object_checksum_names_the_content_without_the_index(tmp_path):
    """A byte-identical copy under another key: the checksum gives the hash, the ledger the result."""
    pipeline, store, _, renderer, log = make(tmp_path, checksums=True)
    pipeline.process(REF)
    store.objects["originals/copy.jpg"] = store.objects["originals/a.jpg"]
    log.clear()
    copy = pipeline.process(ObjectRef("bucket", "originals/copy.jpg"))
    assert [e[0] for e in log] == ["head", "find"]
    assert (copy.state, copy.jobs[0].reused, copy.bytes_read, renderer.calls) == ("done", True, 0, 1)


def test_a_duplicate_arriving_while_the_first_reads_the_source_comes_back_later(tmp_path):
    rig = make(tmp_path)
    pipeline, _, _, renderer, log = rig
    rig.sources.rows[SOURCE_ID] = Reading(1300)
    with pytest.raises(JobBusy) as caught:
        pipeline.process(REF)
    assert caught.value.lease_expires_at_s == 1300
    assert "download" not in [e[0] for e in log] and renderer.calls == 0


def test_content_remembered_while_this_delivery_marks_it_is_claimed_before_reading(tmp_path):
    """Another delivery read and remembered the content between this one's lookup and its
    reading mark, and the job is up for takeover: this delivery claims before reading, so
    losing the claim to a third delivery reads nothing (it used to read, then find the job
    claimed)."""

    def claimed_first(spec, **_):
        raise JobBusy(spec.job_key, 1300)

    rig = make(
        tmp_path,
        wrap_sources=lambda sources: Wrapping(sources, lookup=lambda *_, **__: None),  # not there yet
        wrap_ledger=lambda ledger: Wrapping(ledger, claim=claimed_first),
    )
    _preload(rig.pipeline, rig.ledger, state="running", lease_expires_at_s=900, attempts=1)  # expired at 1000
    rig.sources.rows[SOURCE_ID] = KnownSource(sha256_hex(b"photo"), 5, "image")  # what begin_reading finds
    with pytest.raises(JobBusy):
        rig.pipeline.process(REF)
    assert [e[0] for e in rig.log if e[0] in ("begin_reading", "download")] == ["begin_reading"]
    assert rig.image_step.calls == 0


def test_the_observer_is_told_when_this_delivery_holds_the_reading_mark(tmp_path):
    told = []

    class Observer(PipelineObserver):
        def reading(self, source):
            told.append(source.key)

    rig = make(tmp_path, observer=Observer())
    rig.pipeline.process(REF)
    rig.pipeline.process(REF)  # a redelivery: answered from the index, no mark
    assert told == ["originals/a.jpg"]


def test_a_failed_read_gives_up_its_reading_marker(tmp_path):
    def broken(ref, dest, etag=None):
        raise TransientFailure("S3 GetObject failed: InternalError")

    rig = make(tmp_path, wrap_store=lambda store: Wrapping(store, download=broken))
    with pytest.raises(TransientFailure):
        rig.pipeline.process(REF)
    assert [e[0] for e in rig.log if e[0] in ("begin_reading", "release_mark")] == ["begin_reading", "release_mark"]
    assert rig.sources.rows == {}


def test_past_the_attempts_cap_a_redelivery_ends_the_job_without_reading(tmp_path):
    rig = make(tmp_path)
    pipeline, _, ledger, renderer, log = rig
    key = _preload(pipeline, ledger, state="transient_failure", lease_expires_at_s=0, attempts=4)
    rig.sources.rows[SOURCE_ID] = KnownSource(sha256_hex(b"photo"), 5, "image")
    result = pipeline.process(REF)
    assert (result.state, result.reason, result.jobs[0].reused) == ("permanent_failure", "attempts_exhausted", False)
    assert ledger.rows[key].state == "permanent_failure"
    assert "download" not in [e[0] for e in log] and renderer.calls == 0


def test_a_superseded_worker_cannot_mark_the_job_done(tmp_path):
    """Another worker took the job over while this one rendered. Its writes are
    conditional (``If-None-Match``), so they cannot replace anything stored; marking the
    job done is fenced on the token, so it reports itself superseded."""

    class Observer(PipelineObserver):
        def step(self, point, job_key):
            if point == "output_stored" and ledger.rows[job_key].lease_token == "t1":
                ledger.rows[job_key] = dataclasses.replace(ledger.rows[job_key], lease_token="someone-else")

    pipeline, store, ledger, _, _ = make(tmp_path, observer=Observer())
    with pytest.raises(Superseded):
        pipeline.process(REF)
    row = ledger.rows[_key(pipeline)]
    assert (row.state, row.lease_token) == ("running", "someone-else")


@pytest.mark.parametrize("already_written", [False, True])
def test_a_takeover_adopts_the_manifest_its_lost_holder_staged_without_rendering_or_reading(tmp_path, already_written):
    pipeline, store, ledger, renderer, log = make(tmp_path)
    key = _preload(pipeline, ledger, state="running", lease_expires_at_s=900, attempts=1)  # expired at 1000
    out = OutputRecord("thumb", f"derivatives/{key}/thumb.webp", "webp", 1, 1, 1, "0" * 64, "image/webp")
    staged = json.dumps({"outputs": [out.to_json()]})
    ledger.staged[key] = staged
    if already_written:  # the holder died after writing it, before marking the job done
        store.objects[f"derivatives/{key}/manifest.json"] = public_body(staged).encode()
    result = pipeline.process(REF)
    assert (result.state, result.jobs[0].reused, result.jobs[0].outputs, renderer.calls) == ("done", False, (out,), 0)
    assert ledger.rows[key].state == "done" and ledger.rows[key].outputs == (out,) and key not in ledger.staged
    assert store.objects[f"derivatives/{key}/manifest.json"] == public_body(staged).encode()
    assert [e for e in log if e[0] in ("put", "list")] == [("put", f"derivatives/{key}/manifest.json")]


def test_a_manifest_staged_by_a_lost_holder_wins_over_this_render(tmp_path):
    """The takeover's claim did not carry the staged body (an SDK-retried takeover): the
    stage step returns the earlier body, and that is what is written and recorded."""
    key = job_key(
        sha256_hex(b"photo"),
        RECIPE.sha256,
        Settings(key_secret=TEST_KEY_SECRET).policy_version,
        keys=Settings(key_secret=TEST_KEY_SECRET).keys,
    )
    out = OutputRecord("thumb", f"derivatives/{key}/thumb.webp", "webp", 10, 10, 5, "1" * 64, "image/webp")
    earlier = json.dumps({"outputs": [out.to_json()]})
    pipeline, store, ledger, renderer, _ = make(
        tmp_path, wrap_ledger=lambda ledger: Wrapping(ledger, stage_manifest=lambda *_, **__: earlier)
    )
    result = pipeline.process(REF)
    assert (result.state, result.jobs[0].outputs, renderer.calls) == ("done", (out,), 1)
    assert store.objects[f"derivatives/{key}/manifest.json"] == public_body(earlier).encode()


def test_an_output_a_lost_holder_stored_with_other_bytes_is_described_as_stored(tmp_path):
    """A 412 on an output whose bytes an earlier holder rendered differently: the listing's
    ETag (MD5) names the earlier holder's registered candidate, without reading S3."""
    pipeline, store, ledger, renderer, log = make(tmp_path)
    key = _preload(pipeline, ledger, state="running", lease_expires_at_s=900, attempts=1)
    earlier = b"thumb rendered by an older build"
    store.objects[f"derivatives/{key}/thumb.webp"] = earlier
    ledger.candidates[key] = {
        OutputCandidate("thumb.webp", hashlib.md5(earlier).hexdigest(), sha256_hex(earlier), len(earlier))
    }
    result = pipeline.process(REF)
    thumb, *others = result.jobs[0].outputs
    assert (thumb.name, thumb.sha256, thumb.bytes) == ("thumb", sha256_hex(earlier), len(earlier))
    assert all(o.sha256 == sha256_hex(o.name.encode()) for o in others)
    manifest = json.loads(store.objects[f"derivatives/{key}/manifest.json"])
    assert manifest["outputs"][0]["sha256"] == sha256_hex(earlier)
    assert [e for e in log if e[0] == "list"] == [("list", f"derivatives/{key}/")]  # one listing, at the first 412


def test_outputs_are_registered_before_any_is_written_and_the_manifest_staged_before_it_is(tmp_path):
    pipeline, store, ledger, _, log = make(tmp_path)
    pipeline.process(REF)
    steps = [e[0] for e in log if e[0] in ("register", "put", "stage", "complete")]
    assert steps == ["register", "put", "put", "put", "stage", "put", "complete"]


VIDEO_RECIPE = load_recipe("web-video", 1)


class ProgressSeen(PipelineObserver):
    def __init__(self):
        self.seen = []

    def progress(self, job_key, names, done_s, total_s):
        self.seen.append((names, done_s, total_s))


def make_video(tmp_path, video_renderer, clock=lambda: 1000.0):
    log: list = []
    observer = ProgressSeen()
    pipeline = pipeline_on(
        Settings(key_secret=TEST_KEY_SECRET, work_dir=str(tmp_path)),
        store=FakeStore({"originals/a.jpg": b"video"}, log, False),
        ledger=FakeLedger(log),
        sources=FakeSources(log),
        steps={"image.variants": FakeImageStep(None), "video.renditions": video_renderer},
        recipes={"image": [RECIPE], "video": [VIDEO_RECIPE]},
        detect_media=lambda p, k: "video",
        observer=observer,
        clock=clock,
    )
    return pipeline, log, observer


def test_a_video_job_goes_to_the_video_renderer_and_commits_its_manifest_last(tmp_path):
    videos = FakeVideoStep()
    pipeline, log, observer = make_video(tmp_path, videos)
    result = pipeline.process(REF)
    (job,) = result.jobs
    assert (result.media, job.recipe, job.state) == ("video", "web-video@1", "done")
    prefix = f"derivatives/{job.job_key}/"
    assert [e[1] for e in log if e[0] == "put"] == [
        prefix + n for n in ("720p.mp4", "360p.mp4", "poster.jpg", "manifest.json")
    ]
    assert observer.seen == [(("720p", "360p"), 1.0, 2.0)]
    assert videos.contexts[0].remaining_s() is None  # no delivery: no invocation deadline


def test_a_lost_lease_during_a_video_render_commits_nothing(tmp_path):
    videos = FakeVideoStep(error=Superseded("k" * 64))
    pipeline, log, _ = make_video(tmp_path, videos)
    with pytest.raises(Superseded):
        pipeline.process(REF)
    assert not [e for e in log if e[0] in ("put", "complete")]


def test_a_permanent_video_failure_is_recorded_with_its_reason(tmp_path):
    videos = FakeVideoStep(error=PermanentFailure("no_video_stream", "1 streams, none of them video"))
    pipeline, log, _ = make_video(tmp_path, videos)
    result = pipeline.process(REF)
    assert (result.state, result.reason) == ("permanent_failure", "no_video_stream")
    assert not [e for e in log if e[0] == "put"]


class SteppingRenderer(FakeVideoStep):
    """Reports progress at the given clock times."""

    def __init__(self, clock_box, times):
        super().__init__()
        self.clock_box, self.times = clock_box, times

    def run(self, source, params, context, out_dir):
        for t in self.times:
            self.clock_box[0] = t
            context.progress(("720p",), t - 1000.0, 60.0)
        return super().run(source, params, context, out_dir)


def test_video_progress_is_logged_at_most_every_10_seconds(tmp_path, caplog):
    now = [1000.0]
    renderer = SteppingRenderer(now, [1001.0, 1005.0, 1010.0, 1012.0, 1019.9, 1020.0, 1031.0])
    pipeline, _, _ = make_video(tmp_path, renderer, clock=lambda: now[0])
    with caplog.at_level("INFO", logger="mediajobs.service_layer.runner"):
        pipeline.process(REF)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rendering ")]
    assert logged == ["rendering 720p: 17% (10.0 of 60.0 s)", "rendering 720p: 33% (20.0 of 60.0 s)",
                      "rendering 720p: 52% (31.0 of 60.0 s)"]  # fmt: skip


def test_an_original_larger_than_the_disk_is_too_large_before_reading(tmp_path):
    pipeline, store, ledger, renderer, log = make(tmp_path, disk_usage=lambda path: shutil._ntuple_diskusage(4, 0, 4))
    result = pipeline.process(REF)  # 5 bytes, a 4-byte disk
    assert (result.state, result.reason, result.bytes_read) == ("permanent_failure", "too_large", 0)
    assert not [e for e in log if e[0] in ("claim", "download", "put")]


def test_an_original_that_fits_the_disk_but_not_its_free_space_now_comes_back(tmp_path):
    disk = shutil._ntuple_diskusage(100, 96, 4)
    pipeline, store, ledger, renderer, log = make(tmp_path, disk_usage=lambda path: disk)
    with pytest.raises(TransientFailure):
        pipeline.process(REF)  # 5 bytes, 4 free of 100
    assert not [e for e in log if e[0] in ("claim", "download", "put")]


def test_at_init_every_work_folder_is_a_dead_predecessors_and_is_removed_whatever_its_age(tmp_path):
    """One invocation at a time per Lambda sandbox: a folder there at INIT is nobody's."""
    import os
    import time

    from mediajobs.service_layer.work import WORK_FOLDER_MARKER, remove_work_folders

    just_died, long_dead, other = tmp_path / "mediajobs-a1", tmp_path / "mediajobs-b2", tmp_path / "someone-elses"
    for folder in (just_died, long_dead, other):
        (folder / "original").mkdir(parents=True)
        (folder / WORK_FOLDER_MARKER).touch()
    os.utime(long_dead, (1000, 1000))
    os.utime(just_died, (time.time(), time.time()))  # died a moment ago
    (tmp_path / "mediajobs-file").write_text("not a folder")
    assert remove_work_folders(str(tmp_path)) == 2
    assert not just_died.exists() and not long_dead.exists()
    assert other.exists() and (tmp_path / "mediajobs-file").exists()


def test_a_users_folder_named_like_a_work_folder_is_not_removed(tmp_path):
    """Only folders the pipeline made (they hold the marker) go: ``mediajobs-out`` is the
    demo's output folder, and a ``WORK_DIR`` may be a folder the user keeps things in."""
    from mediajobs.service_layer.work import remove_work_folders

    for name in ("mediajobs-out", "mediajobs-photos"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.html").write_text("precious")
    assert remove_work_folders(str(tmp_path)) == 0
    assert (tmp_path / "mediajobs-out" / "index.html").read_text() == "precious"
    assert (tmp_path / "mediajobs-photos" / "index.html").exists()


def test_a_live_worker_with_another_work_dir_keeps_its_folder(tmp_path):
    from mediajobs.service_layer.work import WORK_FOLDER_MARKER, remove_work_folders

    (live := tmp_path / "worker-1" / "mediajobs-live").mkdir(parents=True)
    (live / WORK_FOLDER_MARKER).touch()
    (tmp_path / "worker-2").mkdir()
    assert remove_work_folders(str(tmp_path / "worker-2")) == 0
    assert live.exists()


def test_a_work_folder_is_named_for_the_cleanup(tmp_path):
    """The folder a record is read into is one the INIT cleanup recognises."""
    from mediajobs.service_layer.work import WORK_FOLDER_MARKER, WORK_FOLDER_PREFIX

    seen, marked = [], []

    class Watching(FakeImageStep):
        def run(self, source, params, context, out_dir):
            seen.append(Path(source).parent)
            marked.append((Path(source).parent / WORK_FOLDER_MARKER).is_file())
            return super().run(source, params, context, out_dir)

    pipeline, *_ = make(tmp_path, image_step=Watching())
    pipeline.process(REF)
    [folder] = seen
    assert folder.parent == tmp_path and folder.name.startswith(WORK_FOLDER_PREFIX)
    assert marked == [True]


# --------------------------------------------------------------------------- event keys


def _encoded(key: str) -> ObjectRef:
    """The ref the handler makes of an event naming ``key`` (URL-encoded, as S3 sends it)."""
    from mediajobs.domain.keys import encode_event_key, event_key_candidates

    decoded, *raw = event_key_candidates(encode_event_key(key))
    return ObjectRef("bucket", decoded, None, 5, raw_key=raw[0] if raw else None)


def test_an_encoded_event_key_names_the_object_by_its_decoded_key(tmp_path):
    pipeline, store, ledger, *_, log = make(tmp_path)
    store.objects = {"originals/My Photo (1)+é.jpg": b"photo"}
    result = pipeline.process(_encoded("originals/My Photo (1)+é.jpg"))
    assert result.state == "done" and result.source.key == "originals/My Photo (1)+é.jpg"
    assert [e for e in log if e[0] == "head"] == [("head", "originals/My Photo (1)+é.jpg")]  # one HEAD
    assert ledger.get(result.jobs[0].job_key).provenance["source"]["key"] == "originals/My Photo (1)+é.jpg"


def test_a_key_sent_unencoded_is_used_as_received_only_when_the_decoded_one_is_missing(tmp_path, caplog):
    """An event from a producer that did not encode ``a+b.jpg``: its decoded form
    ``a b.jpg`` names nothing, the key as received names the object."""
    pipeline, store, ledger, *_, log = make(tmp_path)
    store.objects = {"originals/a+b.jpg": b"photo"}
    ref = ObjectRef("bucket", "originals/a b.jpg", None, 5, raw_key="originals/a+b.jpg")
    with caplog.at_level("WARNING", logger="mediajobs.service_layer.pipeline"):
        result = pipeline.process(ref)
    assert result.state == "done" and result.source.key == "originals/a+b.jpg"
    assert [e for e in log if e[0] in ("head", "download")] == [
        ("head", "originals/a b.jpg"),
        ("head", "originals/a+b.jpg"),
        ("download", "originals/a+b.jpg"),
    ]
    assert ledger.get(result.jobs[0].job_key).provenance["source"]["key"] == "originals/a+b.jpg"
    [record] = [r for r in caplog.records if "as the event spelled it" in r.getMessage()]
    assert (record.source_key, record.decoded_key) == ("originals/a+b.jpg", "originals/a b.jpg")


def test_when_both_keys_are_decodable_the_decoded_one_wins(tmp_path):
    pipeline, store, *_, log = make(tmp_path)
    store.objects = {"originals/a b.jpg": b"photo", "originals/a+b.jpg": b"other"}
    ref = ObjectRef("bucket", "originals/a b.jpg", None, 5, raw_key="originals/a+b.jpg")
    result = pipeline.process(ref)
    assert result.source.key == "originals/a b.jpg" and result.sha256 == sha256_hex(b"photo")
    assert ("head", "originals/a+b.jpg") not in log


def test_when_neither_key_names_an_object_the_decoded_one_is_reported_missing(tmp_path):
    pipeline, store, *_, log = make(tmp_path)
    store.objects = {}
    result = pipeline.process(ObjectRef("bucket", "originals/a b.jpg", None, 5, raw_key="originals/a+b.jpg"))
    assert (result.state, result.reason) == ("permanent_failure", SOURCE_MISSING)
    assert "originals/a b.jpg" in result.detail and "claim" not in [e[0] for e in log]


# --------------------------------------------------------------------------- unstorable input


def test_a_source_index_that_cannot_store_the_input_ends_it_permanently_without_a_job(tmp_path):
    def refuse(*args, **kwargs):
        raise PermanentFailure(UNSTORABLE_INPUT, "source index put refused by DynamoDB: key too long")

    pipeline, _, _, renderer, log = make(tmp_path, wrap_sources=lambda sources: Wrapping(sources, begin_reading=refuse))
    result = pipeline.process(REF)
    assert (result.state, result.reason, result.jobs) == ("permanent_failure", UNSTORABLE_INPUT, [])
    assert "key too long" in result.detail
    assert renderer.calls == 0 and "claim" not in [e[0] for e in log]


def test_a_claim_that_cannot_be_stored_gives_back_the_claims_made_before_it(tmp_path):
    """Two recipes: the second job's row is refused; the first job's claim is released at
    once instead of waiting out its lease, and nothing is rendered."""
    video = load_recipe("web-video", 1)

    def refusing_video_claims(ledger):
        def claim(spec, **kwargs):
            if spec.recipe_id == "web-video":
                raise PermanentFailure(UNSTORABLE_INPUT, "ledger put refused by DynamoDB: item too large")
            return ledger.claim(spec, **kwargs)

        return Wrapping(ledger, claim=claim)

    pipeline, _, ledger, renderer, log = make(
        tmp_path, recipes={"image": [RECIPE, video]}, wrap_ledger=refusing_video_claims
    )
    result = pipeline.process(REF)
    assert (result.state, result.reason) == ("permanent_failure", UNSTORABLE_INPUT)
    first = _key(pipeline)
    assert ledger.rows[first].state == "transient_failure" and renderer.calls == 0
    assert [e[0] for e in log if e[0] in ("claim", "release")] == ["claim", "release"]


def test_a_manifest_that_cannot_be_staged_fails_the_job_permanently(tmp_path):
    def refuse(*args, **kwargs):
        raise PermanentFailure(UNSTORABLE_INPUT, "ledger update refused by DynamoDB: item too large")

    pipeline, store, ledger, _, log = make(tmp_path, wrap_ledger=lambda ledger: Wrapping(ledger, stage_manifest=refuse))
    result = pipeline.process(REF)
    assert (result.state, result.reason) == ("permanent_failure", UNSTORABLE_INPUT)
    assert ("fail", UNSTORABLE_INPUT) in log
    assert not [k for k in store.objects if k.endswith("manifest.json")]


def test_the_image_render_is_given_the_invocations_remaining_time(tmp_path):
    """The bounded image renderer stops its child at the deadline only if it is told it."""
    pipeline, _, _, renderer, _ = make(tmp_path)
    delivery = Delivery("arn:aws:sqs:us-east-1:123456789012:q", "handle", 1, lambda: 321.0)
    assert pipeline.process(REF, delivery).state == "done"
    assert [context.remaining_s() for context in renderer.contexts] == [321.0]


def test_a_claim_to_run_found_where_the_original_was_not_read_is_given_back(tmp_path):
    """Only a staged manifest commits without the original: a claim on the ledger-only path
    that comes back held with nothing staged (a row changed between the read and the claim)
    is released and the record comes back, to be read then -- nothing is rendered or
    written from bytes never read."""
    from mediajobs.domain.jobs import Claim, ClaimOutcome, JobState

    def held_without_staging(ledger):
        def claim(spec, *, now_s, lease_until_s, seen=None):
            ledger.rows[spec.job_key] = dataclasses.replace(
                ledger.rows[spec.job_key], state=JobState.RUNNING, lease_token="t5", lease_expires_at_s=lease_until_s
            )
            return Claim(ClaimOutcome.RUN, spec.job_key, lease_token="t5", lease_expires_at_s=lease_until_s)

        return Wrapping(ledger, claim=claim)

    rig = make(tmp_path, wrap_ledger=held_without_staging)
    pipeline, store, ledger, renderer, log = rig
    key = _preload(pipeline, ledger, state="transient_failure", lease_expires_at_s=0, attempts=4)
    rig.sources.rows[SOURCE_ID] = KnownSource(sha256_hex(b"photo"), 5, "image")
    with pytest.raises(TransientFailure):
        pipeline.process(REF)
    assert ledger.rows[key].state == "transient_failure" and renderer.calls == 0
    assert not [e for e in log if e[0] in ("download", "put", "register")]


# --------------------------------------------------------------------------- several jobs


class FailingOnce(FakeImageStep):
    """Fails its first run with ``error``; runs as the fake after that."""

    def __init__(self, error):
        super().__init__()
        self.first_error = error

    def run(self, source, params, context, out_dir):
        if self.calls == 0:
            self.calls += 1
            raise self.first_error
        return super().run(source, params, context, out_dir)


TWO_JOBS = {"image": [RECIPE, dataclasses.replace(RECIPE, id="other-image")]}


@pytest.mark.parametrize(
    "error",
    [TransientFailure("S3 reset"), Superseded("k" * 64)],
    ids=["transient", "superseded"],
)
def test_one_jobs_failure_does_not_hold_up_the_other_jobs_it_claimed_with(tmp_path, error):
    """Both jobs of a content are claimed together: when the first fails in a way that
    comes back, the second still runs and commits (it would otherwise sit claimed until its
    lease ended, and an attempt would be spent without running it), then the failure is
    raised for the message to come back."""
    step = FailingOnce(error)
    pipeline, _, ledger, _, log = make(tmp_path, recipes=TWO_JOBS, image_step=step)
    with pytest.raises(type(error)):
        pipeline.process(REF)
    assert step.calls == 2
    states = {row.recipe_id: row.state for row in ledger.rows.values()}
    first = "transient_failure" if isinstance(error, TransientFailure) else "running"
    assert states == {"web-image": first, "other-image": "done"}


def test_at_the_deadline_the_jobs_left_are_given_back_not_run(tmp_path):
    step = FailingOnce(DeadlineReached("9.0 s left"))
    pipeline, _, ledger, _, _ = make(tmp_path, recipes=TWO_JOBS, image_step=step)
    with pytest.raises(DeadlineReached):
        pipeline.process(REF)
    assert step.calls == 1
    assert {row.recipe_id: row.state for row in ledger.rows.values()} == {
        "web-image": "transient_failure",
        "other-image": "transient_failure",
    }


class TakingOverTheNextJob(FakeImageStep):
    """While the first job renders, the clock passes its lease and another worker takes the
    content's second job over (its row's token changes): what a long first render on a
    slow worker meets."""

    def __init__(self, ledger, clock):
        super().__init__()
        self.ledger, self.clock = ledger, clock

    def run(self, source, params, context, out_dir):
        if self.calls == 0:
            self.clock[0] += 200  # past the lease of every claim made with this one
            for key, row in self.ledger.rows.items():
                if row.recipe_id == "other-image":
                    self.ledger.rows[key] = dataclasses.replace(row, lease_token="theirs", attempts=2)
        return super().run(source, params, context, out_dir)


def test_a_job_taken_over_while_the_jobs_before_it_ran_is_not_rendered(tmp_path):
    """The second job's claim ran down while the first rendered and another worker took it
    over: this worker stops before rendering it (the work would be fenced off at its first
    write anyway), and the job stays the other worker's."""
    now = [1000.0]
    started: list[str] = []
    step = TakingOverTheNextJob(None, now)

    class Watching(PipelineObserver):
        def render_started(self, job_key, source):
            started.append(job_key)

    rig = make(tmp_path, recipes=TWO_JOBS, clock=lambda: now[0], image_step=step, observer=Watching())
    step.ledger = rig.ledger
    with pytest.raises(Superseded):
        rig.pipeline.process(REF)
    rows = {row.recipe_id: row for row in rig.ledger.rows.values()}
    assert step.calls == 1 and started == [rows["web-image"].job_key]
    assert (rows["web-image"].state, rows["other-image"].state) == ("done", "running")
    assert rows["other-image"].lease_token == "theirs"
    assert not [e for e in rig.log if e[0] == "put" and rows["other-image"].job_key in str(e)]
