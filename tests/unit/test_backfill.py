"""Backfills on fakes: the real pipeline and the real backfiller (through the composition
root) over in-memory adapters. A deploy adds a recipe (``b@1``) to the active set; every
live asset gets its job once per content, keeps serving its old set until the new one is
done, then switches with a new ``Asset Ready``; a killed scan resumes from its cursors; a
second start answers with the first backfill; the counts match the ledger.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from mediajobs.bootstrap import Adapters, build_backfiller
from mediajobs.domain.assets import AssetJobState, AssetState, AssetVersion, plan_current, sequencer_order
from mediajobs.domain.backfill import BackfillState, document
from mediajobs.domain.jobs import JobState, ObjectRef, SourceState
from mediajobs.domain.notifications import NotificationType
from mediajobs.settings import Settings
from tests.fakes import (
    TEST_KEY_SECRET,
    FakeAssets,
    FakeBackfills,
    FakeClock,
    FakeLedger,
    FakeQueue,
    FakeSources,
    FakeStore,
    TextStep,
    Wrapping,
    pipeline_on,
    text_recipes,
)

BUCKET = "bucket"
JOBS, LANE = "arn:aws:sqs:us-east-1:123456789012:jobs", "arn:aws:sqs:us-east-1:123456789012:backfill"
OLD = text_recipes(("a", "A", {}))
NEW = text_recipes(("a", "A", {}), ("b", "B", {}))


class Crash(Exception):
    """A backfill's scanner dying."""


class Rig:
    """``n`` originals sharing ``contents`` contents, processed on the old set; then the new
    set deployed: a pipeline and a backfiller on it, over the same stores."""

    def __init__(self, tmp_path, n: int, contents: int, *, segments: int = 4) -> None:
        self.keys = [f"originals/{i:04d}.jpg" for i in range(n)]
        self.data = {key: f"content-{i % contents}".encode() for i, key in enumerate(self.keys)}
        self.store = FakeStore(dict(self.data), [])
        self.ledger, self.sources, self.assets = FakeLedger([]), FakeSources([]), FakeAssets()
        self.queue, self.backfills, self.clock = FakeQueue(), FakeBackfills(), FakeClock()
        self.step = TextStep()
        self.settings = Settings(
            key_secret=TEST_KEY_SECRET,
            work_dir=str(tmp_path), jobs_queue_arn=JOBS, backfill_queue_arn=LANE, backfill_segments=segments,
            backfill_rate_per_s=1e9, retire_grace_s=3600,
        )  # fmt: skip
        old = self.pipeline(OLD)
        for i, key in enumerate(self.keys):
            assert old.process(ObjectRef(BUCKET, key, None, len(self.data[key]), sequencer=f"{i + 1:x}")).state == (
                SourceState.DONE
            )
        self.step.runs.clear()
        self.new = self.pipeline(NEW)

    def pipeline(self, recipes):
        return pipeline_on(
            self.settings, clock=self.clock, store=self.store, ledger=self.ledger, sources=self.sources,
            steps={TextStep.name: self.step}, recipes=recipes, detect_media=lambda path, key: "image",
            assets=self.assets, queue=self.queue,
        )  # fmt: skip

    def backfiller(self, backfills=None, assets=None):
        adapters = Adapters(
            store=self.store, ledger=self.ledger, sources=self.sources, queue=self.queue, steps={},
            clock=self.clock, assets=assets or self.assets, backfills=backfills or self.backfills,
        )  # fmt: skip
        return build_backfiller(self.settings, adapters, recipes=NEW)

    def drain_lane(self) -> int:
        """Deliver every job request sent to the lane (the worker behind its mapping)."""
        sent = [json.loads(body)["job_key"] for arn, body, _, _ in self.queue.resent if arn == LANE]
        self.queue.resent = [r for r in self.queue.resent if r[0] != LANE]
        for job_key in sent:
            assert self.new.run_request(job_key).state == SourceState.DONE
        return len(sent)

    def b_jobs(self) -> set[str]:
        return {k for k, row in self.ledger.rows.items() if row.recipe_id == "b"}


def test_a_backfill_over_1000_assets_sharing_100_contents_renders_100_and_switches_each_once(tmp_path):
    rig = Rig(tmp_path, 1000, 100)
    backfiller = rig.backfiller()
    started, created = backfiller.start()
    assert created and started.state == BackfillState.RUNNING
    rig.clock.advance(rig.settings.worker_timeout_s)  # the old code's invocations are over: both passes
    [during] = backfiller.tick(budget_s=60)
    assert during.scan_over and during.counts.total == during.counts.enqueued == 100
    # Before its jobs run, every asset still serves its old set, ready, with the new one listed.
    view = rig.assets.get(BUCKET, rig.keys[0])
    assert view.state == AssetState.READY and [j.recipe for j in view.jobs] == ["a@1"]
    assert [(j.recipe, j.state) for j in view.next] == [("a@1", AssetJobState.DONE), ("b@1", AssetJobState.PENDING)]
    assert rig.drain_lane() == 100
    [after] = backfiller.tick(budget_s=60)
    assert after.state == BackfillState.DONE
    assert len(rig.step.runs) == 100  # one render per (content, new recipe): none per asset
    counts = document(after, now_s=rig.clock())
    assert {k: counts[k] for k in ("total", "enqueued", "done", "reused", "failed", "remaining")} == {
        "total": 100, "enqueued": 100, "done": 100, "reused": 0, "failed": 0, "remaining": 0,
    }  # fmt: skip
    assert counts["done"] == sum(rig.ledger.rows[k].state == JobState.DONE for k in rig.b_jobs())
    ready = [n for n in rig.assets.outbox.values() if n.type == NotificationType.READY]
    for key in rig.keys:
        view = rig.assets.get(BUCKET, key)
        assert view.state == AssetState.READY and [j.recipe for j in view.jobs] == ["a@1", "b@1"] and not view.next
        assert sum(n.key == key for n in ready) == 2  # the old set's, then the new set's (another id)


def test_a_job_failed_without_running_is_recorded_and_a_failed_asset_moves_to_its_new_set(tmp_path):
    """A job of the new set can end without any worker running it: failed because an input
    failed (a new policy's, or a new key's, moderation job refusing the content). Nothing
    but the backfill sees that end: it records it in the assets referencing the job before
    counting it, so an asset that ended failed (no ready set to keep) moves to the new set
    and none is left waiting for it -- however late the failure came after the scan."""
    rig = Rig(tmp_path, 1, 1)
    [key] = rig.keys
    rig.assets.assets[(BUCKET, key)] = dataclasses.replace(rig.assets.get(BUCKET, key), state=AssetState.FAILED)
    backfiller = rig.backfiller()
    backfiller.start()
    rig.clock.advance(rig.settings.worker_timeout_s)
    [during] = backfiller.tick(budget_s=60)
    assert during.scan_over and during.counts.enqueued == 1
    [job] = rig.b_jobs()
    rig.queue.resent.clear()  # its request never runs: its input fails it
    row = rig.ledger.rows[job]
    rig.ledger.rows[job] = dataclasses.replace(
        row, state=JobState.PERMANENT_FAILURE, failure_reason="rejected", failure_detail="its input was refused"
    )
    [after] = backfiller.tick(budget_s=60)
    assert after.state == BackfillState.DONE and after.counts.failed == 1
    view = rig.assets.get(BUCKET, key)
    assert [j.recipe for j in view.jobs] == ["a@1", "b@1"] and not view.next
    assert (view.state, view.reason) == (AssetState.REJECTED, "rejected")  # refused, at its new keys


def test_a_dropped_job_that_was_split_releases_its_parts_to_the_collection(tmp_path):
    """A lane job split into parts (a long video) whose every asset went while the parts ran
    is dropped, never joined: its parts, done and referenced by nothing, get the candidates
    their join would have given them, so the collection takes them."""
    from mediajobs.domain.parts import AUDIO_PART, Part, Split

    rig = Rig(tmp_path, 1, 1)
    [key] = rig.keys
    backfiller = rig.backfiller()
    backfiller.start()
    rig.clock.advance(rig.settings.worker_timeout_s)
    backfiller.tick(budget_s=60)
    [job] = rig.b_jobs()
    split = Split((Part("segment/v1/0-2000000", 0.0, None, 2.0, 2.0), Part(AUDIO_PART, 0.0, None, 2.0)), 0.0, {}, {})
    row = rig.ledger.rows[job]
    rig.ledger.rows[job] = dataclasses.replace(row, state=JobState.TRANSIENT_FAILURE, split=split, lease_expires_at_s=0)
    for refs in rig.assets.refs.values():  # every asset that wanted it went
        refs.clear()
    [after] = backfiller.tick(budget_s=60)
    assert after.counts.dropped == 1
    parts = rig.backfiller()._claims.part_keys(rig.ledger.get(job))
    assert len(parts) == 2 and all(rig.assets.candidates_of(p) for p in parts)
    assert rig.assets.get(BUCKET, key) is not None


def test_a_content_done_already_is_reused_and_its_assets_switch_at_once(tmp_path):
    rig = Rig(tmp_path, 20, 4)
    key = rig.keys[0]
    assert rig.new.process(ObjectRef(BUCKET, "originals/again.jpg", None, 9, sequencer="ff")).state  # another key
    rig.store.objects["originals/again.jpg"] = rig.data[key]
    rig.new.process(ObjectRef(BUCKET, "originals/again.jpg", None, len(rig.data[key]), sequencer="100"))
    rendered = len(rig.step.runs)
    [after] = rig.backfiller().tick(budget_s=60, auto_start=True)
    assert (after.counts.reused, after.counts.enqueued) == (1, 3)
    assert [j.recipe for j in rig.assets.get(BUCKET, key).jobs] == ["a@1", "b@1"]  # switched with no render
    assert len(rig.step.runs) == rendered


def test_a_killed_scan_resumes_from_its_cursors_and_a_second_start_answers_with_the_running_backfill(tmp_path):
    rig = Rig(tmp_path, 300, 300, segments=2)
    starts: list = []
    scans = {"n": 0}

    def scan(segment, segments, cursor, *, limit):
        if cursor is None:
            starts.append(segment)
        elif segment == 0:
            scans["n"] += 1
            if scans["n"] == 1:  # segment 0's second page: its first is done and its cursor stored
                raise Crash("the scanner's invocation died")
        return rig.assets.scan(segment, segments, cursor, limit=limit)

    dying = rig.backfiller(assets=Wrapping(rig.assets, scan=scan))
    first, _ = dying.start()
    with pytest.raises(Crash):
        dying.tick(budget_s=60)
    again, created = rig.backfiller().start()
    assert (again.id, created) == (first.id, False)  # a second start (or a redeploy) starts nothing new
    [after] = rig.backfiller(assets=Wrapping(rig.assets, scan=scan)).tick(budget_s=60)
    assert sorted(starts) == [0, 1]  # each segment started once: the second run went on from its cursor
    assert after.first_pass_over and after.counts.assets_scanned == 300 and after.counts.total == 300
    rig.clock.advance(rig.settings.worker_timeout_s)
    rig.drain_lane()
    [done] = rig.backfiller().tick(budget_s=60)
    assert done.state == BackfillState.DONE and len(rig.step.runs) == 300


def test_a_cancelled_backfill_stops_and_a_new_start_is_its_next_generation(tmp_path):
    rig = Rig(tmp_path, 10, 10)
    backfiller = rig.backfiller()
    first, _ = backfiller.start()
    assert backfiller.move(first.id, BackfillState.PAUSED).state == BackfillState.PAUSED
    assert backfiller.tick(budget_s=60) == []  # paused: nothing scanned
    assert backfiller.move(first.id, BackfillState.CANCELLED).state == BackfillState.CANCELLED
    assert backfiller.move(first.id, BackfillState.RUNNING) is None  # final
    second, created = backfiller.start()
    assert created and second.generation == 2 and second.id.endswith("-2")


def test_an_overwrite_while_the_new_set_renders_drops_the_next_set_and_its_references(tmp_path):
    rig = Rig(tmp_path, 2, 2)
    rig.backfiller().tick(budget_s=60, auto_start=True)
    old = rig.assets.get(BUCKET, rig.keys[0])
    [b_key] = [j.job_key for j in old.next if j.recipe == "b@1"]
    assert b_key in old.job_keys  # referenced while it renders: the collection leaves it
    newer = AssetVersion("v2", "e2", 11, sequencer_order("ff"))
    change = plan_current(old, BUCKET, old.key, newer, sha256=None, media=None, jobs=None, now_s=5)
    assert b_key in change.drop and not change.view.next
    assert b_key in {c.job_key for c in change.candidates}


def test_the_retired_jobs_are_kept_for_the_retire_grace(tmp_path):
    rig = Rig(tmp_path, 1, 1)
    rig.settings = dataclasses.replace(rig.settings, retire_grace_s=3600)
    NEW_ONLY = text_recipes(("b", "B", {}))
    adapters = Adapters(
        store=rig.store, ledger=rig.ledger, sources=rig.sources, queue=rig.queue, steps={},
        clock=rig.clock, assets=rig.assets, backfills=rig.backfills,
    )  # fmt: skip
    backfiller = build_backfiller(rig.settings, adapters, recipes=NEW_ONLY)
    backfiller.tick(budget_s=60, auto_start=True)
    rig.new = rig.pipeline(NEW_ONLY)
    rig.drain_lane()
    [a_key] = [k for k, row in rig.ledger.rows.items() if row.recipe_id == "a"]
    assert not rig.assets.refs.get(a_key)
    [(candidate, hold)] = [(c, rig.assets.holds[c]) for c in rig.assets.candidate_rows if c[0] == a_key]
    assert hold == int(rig.clock()) + 3600


def test_an_asset_the_old_code_makes_current_after_the_first_pass_is_caught_by_the_second(tmp_path):
    rig = Rig(tmp_path, 10, 10)
    backfiller = rig.backfiller()
    backfiller.start()
    [first] = backfiller.tick(budget_s=60)
    assert first.first_pass_over and not first.scan_over  # the old deployment may still be running
    # An invocation of the old code, running at the deploy, makes a new asset current with the old set.
    late = "originals/late.jpg"
    rig.store.objects[late] = b"late-content"
    old = rig.pipeline(OLD)
    assert old.process(ObjectRef(BUCKET, late, None, 12, sequencer="ff")).state == SourceState.DONE
    assert [j.recipe for j in rig.assets.get(BUCKET, late).jobs] == ["a@1"]
    rig.clock.advance(rig.settings.worker_timeout_s)
    [second] = backfiller.tick(budget_s=60)
    assert second.scan_over and second.counts.total == 11
    rig.drain_lane()
    [done] = backfiller.tick(budget_s=60)
    assert done.state == BackfillState.DONE
    assert [j.recipe for j in rig.assets.get(BUCKET, late).jobs] == ["a@1", "b@1"]


def test_a_version_the_old_code_attached_its_set_to_switches_to_the_new_set_its_redelivery_runs(tmp_path):
    from mediajobs.domain.assets import AssetJob
    from mediajobs.domain.keys import sha256_hex
    from mediajobs.domain.plan import Where, plan_jobs

    rig = Rig(tmp_path, 0, 1)
    key, data = "originals/crashed.jpg", b"crashed-content"
    rig.store.objects[key] = data
    sha = sha256_hex(data)
    # An old-code worker made the version current with its set, then died before any job.
    [a] = plan_jobs(
        sha,
        "image",
        OLD,
        Where(
            BUCKET,
            key,
            "derivatives/",
            Settings(key_secret=TEST_KEY_SECRET).policy_version,
            Settings(key_secret=TEST_KEY_SECRET).keys,
        ),
    )
    head = rig.store.head(ObjectRef(BUCKET, key))
    version = AssetVersion(head.version_id, head.etag, head.size_bytes, sequencer_order("7"))
    rig.assets.make_current(BUCKET, key, version, sha256=sha, media="image", jobs=[AssetJob("a@1", a.key)], now_s=1)
    # Its message is redelivered to a worker of the new deployment.
    ref = ObjectRef(BUCKET, key, head.version_id, len(data), head.etag, sequencer="7")
    assert rig.new.process(ref).state == SourceState.DONE
    view = rig.assets.get(BUCKET, key)
    assert view.state == AssetState.READY and [j.recipe for j in view.jobs] == ["a@1", "b@1"] and not view.next


def _delete(rig, key: str) -> None:
    """``key`` deleted (a delete marker): its object gone, its asset ``deleted``."""
    rig.store.objects.pop(key)
    marker = AssetVersion("dm", "", None, sequencer_order("fff"))
    assert rig.assets.delete(BUCKET, key, marker, now_s=int(rig.clock())) is not None


def test_a_lane_job_whose_named_original_is_gone_reads_another_asset_of_its_content(tmp_path):
    rig = Rig(tmp_path, 2, 1)  # one content, two keys: the job's row names the first
    backfiller = rig.backfiller()
    backfiller.start()
    rig.clock.advance(rig.settings.worker_timeout_s)
    backfiller.tick(budget_s=60)
    named, other = rig.keys
    _delete(rig, named)
    rig.drain_lane()
    [done] = backfiller.tick(budget_s=60)
    assert (done.state, done.counts.done, done.counts.dropped) == (BackfillState.DONE, 1, 0)
    assert [j.recipe for j in rig.assets.get(BUCKET, other).jobs] == ["a@1", "b@1"]


def test_a_lane_job_no_asset_needs_any_more_is_dropped_and_the_backfill_ends(tmp_path):
    rig = Rig(tmp_path, 1, 1)
    backfiller = rig.backfiller()
    backfiller.start()
    rig.clock.advance(rig.settings.worker_timeout_s)
    [found] = backfiller.tick(budget_s=60)
    assert found.counts.enqueued == 1
    _delete(rig, rig.keys[0])
    sent = [json.loads(body)["job_key"] for arn, body, _, _ in rig.queue.resent if arn == LANE]
    assert rig.new.run_request(sent[0]).reason == "source_missing"  # this request only
    rig.clock.advance(rig.settings.lease_s)
    [done] = backfiller.tick(budget_s=60)
    assert (done.state, done.counts.dropped, done.counts.remaining) == (BackfillState.DONE, 1, 0)
    assert len(rig.step.runs) == 0


def test_the_status_progress_bar_counts_the_ended_jobs_of_those_found():
    from mediajobs.local.commands.backfill import progress_bar

    doc = {"total": 10, "remaining": 4, "state": "running"}
    assert progress_bar(doc, width=10) == "[######....]  60% of 10 jobs"
    assert progress_bar({"total": 0, "remaining": 0, "state": "done"}, width=4) == "[####] 100% of 0 jobs"
