"""The pipeline's order of operations and error classification, with in-memory fakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mediajobs.domain.errors import TOO_MANY_PIXELS, JobBusy, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import Claim, ClaimOutcome, Downloaded, ObjectRef, OutputRecord, RenderedFile
from mediajobs.domain.keys import sha256_hex
from mediajobs.domain.manifest import RenderDecisions
from mediajobs.domain.recipes import load_recipe
from mediajobs.service import Pipeline, PipelineObserver
from mediajobs.settings import Settings

RECIPE = load_recipe("web-image", 1)


class FakeStore:
    def __init__(self, objects: dict[str, bytes], log: list) -> None:
        self.objects = dict(objects)
        self.log = log

    def download(self, ref, dest: Path):
        data = self.objects[ref.key]
        dest.write_bytes(data)
        self.log.append(("download", ref.key))
        return Downloaded(sha256_hex(data), len(data), None)

    def put_if_absent(self, bucket, key, body, *, content_type):
        data = body if isinstance(body, bytes) else body.read()
        self.log.append(("put", key))
        if key in self.objects:
            return False
        self.objects[key] = data
        return True

    def put_file_if_absent(self, bucket, key, path, *, content_type):
        return self.put_if_absent(bucket, key, Path(path).read_bytes(), content_type=content_type)

    def existing_digest(self, bucket, key):
        return sha256_hex(self.objects[key]), len(self.objects[key])

    def read_bytes(self, bucket, key):
        return self.objects[key]


class FakeLedger:
    def __init__(self, log: list, outcome: ClaimOutcome = ClaimOutcome.RUN) -> None:
        self.log = log
        self.outcome = outcome
        self.rows: dict[str, dict] = {}

    def claim(self, spec, *, now_s):
        job_key = spec.job_key
        self.log.append(("claim", job_key))
        if self.outcome is ClaimOutcome.RUN:
            return Claim(ClaimOutcome.RUN, job_key, lease_token="t1", lease_expires_at_s=100)
        if self.outcome is ClaimOutcome.BUSY:
            return Claim(ClaimOutcome.BUSY, job_key, lease_expires_at_s=1234)
        if self.outcome is ClaimOutcome.FAILED:
            return Claim(ClaimOutcome.FAILED, job_key, failure_reason=TOO_MANY_PIXELS)
        out = OutputRecord("thumb", "k", "webp", 1, 1, 1, "0" * 64, "image/webp")
        return Claim(ClaimOutcome.DONE, job_key, manifest_key="m", outputs=(out,))

    def complete(self, job_key, token, *, manifest_key, outputs, now_s):
        self.log.append(("complete", job_key))
        self.rows[job_key] = {"state": "done", "outputs": outputs}

    def fail_permanently(self, job_key, token, *, reason, detail, now_s):
        self.log.append(("fail", reason))

    def release_transient(self, job_key, token, *, detail, now_s):
        self.log.append(("release", detail))


class FakeRenderer:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls = 0

    def render(self, source, variants, out_dir):
        self.calls += 1
        if self.error:
            raise self.error
        files = []
        for v in variants:
            path = out_dir / f"{v.name}.{v.format}"
            path.write_bytes(v.name.encode())
            files.append(
                RenderedFile(
                    v.name,
                    v.format,
                    path,
                    10,
                    10,
                    path.stat().st_size,
                    sha256_hex(path.read_bytes()),
                    f"image/{v.format}",
                )
            )
        return files, RenderDecisions("JPEG", 10, 10)


def make(tmp_path, *, data=b"photo", outcome=ClaimOutcome.RUN, error=None, media="image"):
    log: list = []
    store = FakeStore({"originals/a.jpg": data}, log)
    ledger = FakeLedger(log, outcome)
    renderer = FakeRenderer(error)
    pipeline = Pipeline(
        Settings(work_dir=str(tmp_path)),
        store=store,
        ledger=ledger,
        renderer=renderer,
        recipes={"image": [RECIPE]},
        detect_media=lambda p: media,
        clock=lambda: 1000.0,
        observer=PipelineObserver(),
    )
    return pipeline, store, ledger, renderer, log


REF = ObjectRef("bucket", "originals/a.jpg", None, 5)


def test_outputs_then_manifest_then_done(tmp_path):
    pipeline, store, _, _, log = make(tmp_path)
    result = pipeline.process(REF)
    job = result.jobs[0]
    prefix = f"derivatives/{job.job_key}/"
    assert [e for e in log if e[0] != "download"] == [
        ("claim", job.job_key),
        ("put", prefix + "thumb.webp"),
        ("put", prefix + "card.webp"),
        ("put", prefix + "full.avif"),
        ("put", prefix + "manifest.json"),
        ("complete", job.job_key),
    ]
    manifest = json.loads(store.objects[prefix + "manifest.json"])
    assert manifest["source"] == {
        "bucket": "bucket",
        "key": "originals/a.jpg",
        "version_id": None,
        "sha256": sha256_hex(b"photo"),
        "bytes": 5,
    }
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


def test_busy_raises_with_the_lease_expiry(tmp_path):
    pipeline, _, _, renderer, _ = make(tmp_path, outcome=ClaimOutcome.BUSY)
    with pytest.raises(JobBusy) as caught:
        pipeline.process(REF)
    assert caught.value.lease_expires_at_s == 1234 and renderer.calls == 0


def test_done_job_is_reused_without_rendering(tmp_path):
    pipeline, _, _, renderer, _ = make(tmp_path, outcome=ClaimOutcome.DONE)
    result = pipeline.process(REF)
    assert (result.state, result.jobs[0].reused, renderer.calls) == ("done", True, 0)


def test_failed_job_reports_the_stored_reason(tmp_path):
    pipeline, _, _, renderer, _ = make(tmp_path, outcome=ClaimOutcome.FAILED)
    result = pipeline.process(REF)
    assert (result.state, result.reason, result.jobs[0].reused, renderer.calls) == (
        "permanent_failure",
        TOO_MANY_PIXELS,
        True,
        0,
    )


def test_existing_manifest_is_the_truth(tmp_path):
    """A worker that crashed after the manifest left it behind: the new worker commits what is stored."""
    pipeline, store, ledger, _, _ = make(tmp_path)
    first = pipeline.process(REF).jobs[0]
    prefix = f"derivatives/{first.job_key}/"
    stored = json.loads(store.objects[prefix + "manifest.json"])
    stored["outputs"][0]["bytes"] = 999
    store.objects[prefix + "manifest.json"] = json.dumps(stored).encode()
    second = pipeline.process(REF).jobs[0]
    assert second.outputs[0].bytes == 999
    assert ledger.rows[first.job_key]["outputs"][0].bytes == 999
