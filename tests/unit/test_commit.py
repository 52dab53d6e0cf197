"""The commit of one job (``service_layer/commit.py``) on its own, with in-memory fakes:
the order of its writes, the 412 handling, and the adoption of a staged manifest."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

from mediajobs.domain.errors import OUTPUT_CONFLICT, PermanentFailure, Superseded
from mediajobs.domain.jobs import JobSpec, ObjectRef, OutputRecord, RenderContext
from mediajobs.domain.keys import sha256_hex
from mediajobs.domain.manifest import public_body
from mediajobs.service_layer.commit import Commit
from mediajobs.service_layer.lease import Lease, LeaseKeeper
from tests.fakes import FakeClock, FakeImageStep, FakeLedger, FakeStore

KEY = "a" * 64
DECISIONS = {"decoder": "JPEG", "width": 10, "height": 10}
PREFIX = f"derivatives/{KEY}/"
SOURCE = ObjectRef("bucket", "originals/a.jpg", "v1")
SPEC = JobSpec(KEY, "b" * 64, "web-image", 1, "c" * 64, "p1", PREFIX, "bucket", "originals/a.jpg")


class Variant:
    def __init__(self, name: str) -> None:
        self.name, self.format = name, "webp"


def held(tmp_path, objects=None):
    """A job claimed by token ``t1``, its commit, and what every fake was asked."""
    log: list = []
    store, ledger, clock = FakeStore(objects or {}, log), FakeLedger(log), FakeClock()
    claim = ledger.claim(SPEC, now_s=1000, lease_until_s=1300)
    lease = Lease(ledger, KEY, claim.lease_token, 1300, clock=clock)
    keeper = LeaseKeeper(lease, queue=None, delivery=None, lease_s=300, margin_s=10)
    steps: list[str] = []
    commit = Commit(store, ledger, SOURCE, SPEC, claim.lease_token, keeper, clock, lambda p, k: steps.append(p))
    params = types.SimpleNamespace(variants=[Variant("thumb"), Variant("card")])
    files = FakeImageStep().run(tmp_path / "original", params, RenderContext(), tmp_path).files
    return commit, files, store, ledger, log, steps


def test_registers_writes_stages_writes_the_manifest_last_then_completes(tmp_path):
    commit, files, store, ledger, log, steps = held(tmp_path)
    outputs = commit.rendered(files, DECISIONS, input_bytes=5)
    assert [e[0] for e in log if e[0] != "claim"] == ["register", "put", "put", "stage", "put", "complete"]
    assert [e[1] for e in log if e[0] == "put"] == [
        PREFIX + "thumb.webp",
        PREFIX + "card.webp",
        PREFIX + "manifest.json",
    ]
    assert steps == ["output_stored", "output_stored", "manifest_stored"]
    manifest = json.loads(store.objects[PREFIX + "manifest.json"])
    assert [o["key"] for o in manifest["outputs"]] == [o.key for o in outputs]
    assert ledger.rows[KEY].state == "done" and ledger.rows[KEY].outputs == tuple(outputs)


def test_a_commit_with_no_files_still_writes_its_manifest(tmp_path):
    """A step whose result is data only (a placeholder) commits a manifest and nothing else."""
    commit, _, store, ledger, log, _ = held(tmp_path)
    assert commit.rendered([], DECISIONS, input_bytes=5) == []
    assert [e[1] for e in log if e[0] == "put"] == [PREFIX + "manifest.json"]
    assert ledger.rows[KEY].state == "done"


def test_a_key_holding_bytes_no_holder_registered_is_an_output_conflict(tmp_path):
    commit, files, store, ledger, log, _ = held(tmp_path, {PREFIX + "thumb.webp": b"someone else's"})
    with pytest.raises(PermanentFailure) as refused:
        commit.rendered(files, DECISIONS, input_bytes=5)
    assert refused.value.reason == OUTPUT_CONFLICT and PREFIX + "thumb.webp" in refused.value.detail
    assert PREFIX + "manifest.json" not in store.objects and ledger.rows[KEY].state == "running"


def test_adopting_a_staged_manifest_writes_only_it_and_completes(tmp_path):
    commit, _, store, ledger, log, steps = held(tmp_path)
    out = OutputRecord("thumb", PREFIX + "thumb.webp", "webp", 1, 1, 1, sha256_hex(b"t"), "image/webp")
    staged = json.dumps({"outputs": [out.to_json()]})
    assert commit.adopt(staged) == [out]
    assert [e for e in log if e[0] in ("register", "stage", "put", "list")] == [("put", PREFIX + "manifest.json")]
    assert store.objects[PREFIX + "manifest.json"] == public_body(staged).encode() and steps == []
    assert ledger.rows[KEY].state == "done" and ledger.rows[KEY].outputs == (out,)


def test_a_manifest_staged_by_a_holder_of_the_first_schema_is_written_without_what_names_an_upload(tmp_path):
    """A takeover after a deploy adopts a manifest an earlier build staged, whose public
    face named the original (``source``) and an album's assets (``inputs``, each frame's
    ``asset_key``): ``manifest.json`` gets none of them; the row keeps them as provenance."""
    commit, _, store, ledger, _, _ = held(tmp_path)
    out = OutputRecord("promo", PREFIX + "promo.mp4", "mp4", 800, 450, 9, sha256_hex(b"p"), "video/mp4")
    source = {"bucket": "media", "key": "originals/users/alice/private.png", "version_id": "v1", "sha256": "a" * 64}
    inputs = [{"name": "card-0000", "job_key": "b" * 64, "output": "card", "asset_key": "originals/users/alice/x.png"}]
    frame = {"input": "card-0000", "asset_key": "originals/users/alice/x.png", "rendition_job_key": "b" * 64}
    staged = json.dumps(
        {"schema": 1, "job_key": KEY, "source": source, "inputs": inputs, "outputs": [out.to_json()],
         "decisions": {"promo": {"frames": [frame], "left_out": []}}, "recipe": {}, "policy": {}, "created_at": "t"}
    )  # fmt: skip
    commit.adopt(staged)
    written = store.objects[PREFIX + "manifest.json"]
    assert b"originals/" not in written and b"b" * 64 not in written
    assert json.loads(written)["decisions"]["promo"]["frames"] == [{"input": "card-0000"}]
    assert ledger.rows[KEY].provenance == {"source": source, "inputs": inputs}


def test_a_superseded_holder_writes_nothing(tmp_path):
    """Another holder took the job over: the first fenced write (registration) fails, and
    nothing is written."""
    commit, files, store, ledger, _, _ = held(tmp_path)
    ledger.rows[KEY] = dataclasses.replace(ledger.rows[KEY], lease_token="t2")
    with pytest.raises(Superseded):
        commit.rendered(files, DECISIONS, input_bytes=5)
    assert not [k for k in store.objects if k.startswith(PREFIX)]
