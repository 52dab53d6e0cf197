"""Backfills under interleavings and faults a break-it review found (each failed on the
code before its fix): every test states an invariant of the backfill and drives the real
pipeline and the real backfiller (through the composition root, as
``tests/unit/test_backfill.py`` does) over the fakes through the interleaving.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from mediajobs.bootstrap import Adapters, build_backfiller
from mediajobs.domain.assets import AssetJobState, AssetState
from mediajobs.domain.backfill import BackfillState
from mediajobs.domain.errors import TransientFailure
from mediajobs.domain.jobs import JobState, ObjectRef, SourceState
from mediajobs.domain.notifications import NotificationType
from mediajobs.settings import Settings
from tests.fakes import TEST_KEY_SECRET, TextStep, pipeline_on, text_recipes
from tests.unit.test_backfill import BUCKET, LANE, NEW, OLD, Rig


def backfiller_of(rig: Rig, recipes, *, settings=None, assets=None):
    adapters = Adapters(
        store=rig.store, ledger=rig.ledger, sources=rig.sources, queue=rig.queue, steps={},
        clock=rig.clock, assets=assets or rig.assets, backfills=rig.backfills,
    )  # fmt: skip
    return build_backfiller(settings or rig.settings, adapters, recipes=recipes)


def lane_keys(rig: Rig) -> list[str]:
    return [json.loads(body)["job_key"] for arn, body, _, _ in rig.queue.resent if arn == LANE]


def run_to_the_end(rig: Rig, backfiller, rounds: int = 6):
    """Ticks (both passes allowed) and lane drains until nothing moves; the backfill after."""
    rig.clock.advance(rig.settings.worker_timeout_s)
    for _ in range(rounds):
        backfiller.tick(budget_s=60)
        rig.drain_lane()
        rig.clock.advance(rig.settings.lease_s + 1)
    return rig.backfills.all()[-1]


# -- 1. a fault between the asset's upgrade and its job's request loses the job for good ------


def test_an_sqs_refusal_between_the_upgrade_and_the_lane_request_never_gives_the_asset_its_new_set(tmp_path):
    """``Backfiller.asset`` writes the ``next`` set (step b) before the lane request and the
    count (step c). When the request fails (SQS throttled; a crash; a lost
    ``TransactWriteItems`` race on the one backfill item), the page is redone -- but
    ``wanted()`` now finds ``next == the set`` and skips the asset: its job is never requested,
    never counted, and the backfill ends ``done`` with the asset still waiting."""
    rig = Rig(tmp_path, 1, 1)
    backfiller = rig.backfiller()
    backfiller.start()
    rig.queue.refuse_resend = True  # SQS SendMessage throttled for the first run
    with pytest.raises(TransientFailure):
        backfiller.tick(budget_s=60)
    rig.queue.refuse_resend = False
    done = run_to_the_end(rig, backfiller)
    view = rig.assets.get(BUCKET, rig.keys[0])
    assert done.state == BackfillState.DONE
    # The invariants: every live asset gets the set; the counts are the ledger's.
    assert [j.recipe for j in view.jobs] == ["a@1", "b@1"] and not view.next, (view.jobs, view.next)
    assert done.counts.total == 1, done.counts


def test_a_crash_between_the_lane_request_and_its_count_leaves_a_rendered_job_out_of_the_counts(tmp_path):
    """The same hole seen from the counts: the request went out, the count's transaction
    failed (rounds lost to the other segments' counts on the one backfill item). The redo skips
    the asset, so the job renders and the asset switches, but ``total``/``enqueued``/``done``
    never include it: the counts do not match the ledger."""
    rig = Rig(tmp_path, 1, 1)
    fails = {"n": 1}

    class Flaky:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def count(self, backfill_id, job_key, state, *, now_s):
            if fails["n"]:
                fails["n"] -= 1
                raise TransientFailure("backfill count: still losing races after 10 rounds")
            return self.inner.count(backfill_id, job_key, state, now_s=now_s)

    flaky = backfiller_of(rig, NEW)
    flaky._backfills = Flaky(rig.backfills)  # the backfiller's port, as the composition root gave it
    flaky.start()
    with pytest.raises(TransientFailure):
        flaky.tick(budget_s=60)
    done = run_to_the_end(rig, rig.backfiller())
    b_done = sum(rig.ledger.rows[k].state == JobState.DONE for k in rig.b_jobs())
    assert b_done == 1  # rendered by the request sent before the failed count
    assert (done.counts.total, done.counts.done) == (1, 1), done.counts


# -- 2. a job counted ``dropped`` is never requested again for another asset that wants it -----


def test_a_job_dropped_then_wanted_by_another_asset_of_its_content_is_never_requested(tmp_path):
    """X (content c) gets b(c) on the lane; X is deleted, the request finds no copy and the job
    is counted ``dropped``. Then the second pass finds Y, made current with the old set by an
    old-code invocation running at the deploy, with the same content c: ``upgrade`` gives Y the
    set, but ``_request`` sees b(c) already ``counted`` (its mark is ``dropped``) and sends
    nothing. No one ever requests b(c) again: Y waits for ever, the backfill says ``done``."""
    from tests.unit.test_backfill import _delete

    rig = Rig(tmp_path, 1, 1)
    backfiller = rig.backfiller()
    backfiller.start()
    [first] = backfiller.tick(budget_s=60)  # first pass only: the old code may still run
    assert first.counts.enqueued == 1 and not first.scan_over
    x = rig.keys[0]
    data = rig.data[x]
    _delete(rig, x)
    [job] = lane_keys(rig)
    rig.queue.resent.clear()
    assert rig.new.run_request(job).reason == "source_missing"
    rig.clock.advance(rig.settings.lease_s + 1)
    [dropped] = backfiller.tick(budget_s=60)
    assert dropped.counts.dropped == 1
    # An old-code invocation that was running at the deploy makes Y current, same bytes as X.
    y = "originals/y.jpg"
    rig.store.objects[y] = data
    assert rig.pipeline(OLD).process(ObjectRef(BUCKET, y, None, len(data), sequencer="ff")).state == SourceState.DONE
    done = run_to_the_end(rig, backfiller)
    view = rig.assets.get(BUCKET, y)
    assert done.state == BackfillState.DONE
    assert [j.recipe for j in view.jobs] == ["a@1", "b@1"] and not view.next, (view.jobs, view.next)


# -- 3. cancel, then start: the next generation skips what the first left unfinished ------------


def test_a_new_generation_after_a_cancel_never_requests_the_jobs_the_cancelled_one_left(tmp_path):
    """Generation 1 gives the asset its ``next`` set; its lane request is lost (here: SQS refused
    it, as in test 1; the same holds for a request given back after its message was
    acknowledged, which only the cancelled generation's ``_count_ends`` would resend). The
    operator cancels and starts again (the runbook's "cancel, then a new generation starts on
    the next schedule run"). Generation 2 skips the asset (``next`` is the set already) and
    ends ``done`` at once: the asset never switches."""
    rig = Rig(tmp_path, 1, 1)
    backfiller = rig.backfiller()
    first, _ = backfiller.start()
    rig.queue.refuse_resend = True
    with pytest.raises(TransientFailure):
        backfiller.tick(budget_s=60)
    rig.queue.refuse_resend = False
    backfiller.move(first.id, BackfillState.CANCELLED)
    second, created = backfiller.start()
    assert created and second.generation == 2
    done = run_to_the_end(rig, backfiller)
    view = rig.assets.get(BUCKET, rig.keys[0])
    assert done.id == second.id and done.state == BackfillState.DONE
    assert [j.recipe for j in view.jobs] == ["a@1", "b@1"] and not view.next, (view.jobs, view.next)


def test_a_cancel_is_undone_by_the_next_scheduled_run(tmp_path):
    """``cancel`` is documented as final, and the issue asks for a cancellable backfill. The
    schedule's tick (``auto_start=True``, every minute) finds the change's backfill
    ``cancelled`` and starts its next generation: a deployed backfill cannot be stopped by a
    cancel for more than one schedule period."""
    rig = Rig(tmp_path, 3, 3)
    backfiller = rig.backfiller()
    first, _ = backfiller.start()
    assert backfiller.move(first.id, BackfillState.CANCELLED).state == BackfillState.CANCELLED
    sent_before = len(lane_keys(rig))
    after = backfiller.tick(budget_s=60, auto_start=True)  # the schedule, one minute later
    running = [b for b in after if b.state == BackfillState.RUNNING]
    assert running == [] and len(lane_keys(rig)) == sent_before, [(b.id, b.state) for b in after]


# -- 4. a policy version change is a change, and the backfill does nothing for it ----------------


def test_a_new_policy_version_is_backfilled(tmp_path):
    """The change is the active set AND the policy version (``change_of``), and the policy
    version is part of every job key: deploying ``POLICY_VERSION=p2`` gives new uploads new
    jobs, and a backfill must give them to the assets already there. ``wanted()`` compares
    recipe references only (``refs == view.recipes`` -> ``None``): the backfill finds nothing,
    ends ``done`` with ``total`` 0, and every asset keeps its old-policy derivatives."""
    rig = Rig(tmp_path, 4, 4)
    p2 = dataclasses.replace(rig.settings, policy_version="p2")
    old_key = rig.assets.get(BUCKET, rig.keys[0]).jobs[0].job_key
    backfiller = backfiller_of(rig, OLD, settings=p2)
    started, created = backfiller.start()
    assert created  # a new change: the policy version is part of it
    done = run_to_the_end(rig, backfiller)
    new_upload = "originals/new.jpg"
    rig.store.objects[new_upload] = rig.data[rig.keys[0]]
    p2_pipeline = pipeline_on(
        p2, clock=rig.clock, store=rig.store, ledger=rig.ledger, sources=rig.sources,
        steps={TextStep.name: rig.step}, recipes=OLD, detect_media=lambda path, key: "image",
        assets=rig.assets, queue=rig.queue,
    )  # fmt: skip
    assert p2_pipeline.process(ObjectRef(BUCKET, new_upload, None, 9, sequencer="fff")).state == SourceState.DONE
    p2_key = rig.assets.get(BUCKET, new_upload).jobs[0].job_key
    assert p2_key != old_key  # the same content and recipe under p2 is another job
    assert done.counts.total == 4, done.counts  # 4 contents lack their p2 job
    assert rig.assets.get(BUCKET, rig.keys[0]).jobs[0].job_key == p2_key


# -- 5. a rollback to a set that had a backfill leaves the assets on the rolled-back set -------


def test_a_rollback_to_the_previous_set_brings_the_assets_back_and_stops_the_other_backfill(tmp_path):
    """Deploy A (its schedule starts A's backfill: nothing to do, ``done``), deploy B (B's
    backfill switches the assets), roll back to A. A's start finds A's backfill ``done`` and
    answers with it: no backfill runs, B's is never cancelled (it stays ``running`` for ever,
    and ``backfills/latest`` shows it), and the assets B switched keep serving B while the
    active set is A."""
    rig = Rig(tmp_path, 3, 3)
    on_a = backfiller_of(rig, OLD)
    [a] = on_a.tick(budget_s=60, auto_start=True)
    run_to_the_end(rig, on_a)
    assert rig.backfills.get(a.id).state == BackfillState.DONE
    on_b = rig.backfiller()
    on_b.tick(budget_s=60, auto_start=True)
    b_done = run_to_the_end(rig, on_b)
    assert [j.recipe for j in rig.assets.get(BUCKET, rig.keys[0]).jobs] == ["a@1", "b@1"]
    # Roll back: the deployment of A again; its schedule runs.
    run_to_the_end(rig, on_a)
    on_a.tick(budget_s=60, auto_start=True)
    run_to_the_end(rig, on_a)
    states = {b.id: b.state for b in rig.backfills.all()}
    on_set = [[j.recipe for j in rig.assets.get(BUCKET, k).jobs] for k in rig.keys]
    assert on_set == [["a@1"]] * 3, (on_set, states, b_done.state)


# -- 6. jobs in steps: a dropped input leaves its waiting job counted ``enqueued`` for ever -----


def test_a_waiting_job_whose_input_was_dropped_keeps_the_backfill_running_for_ever(tmp_path):
    """The new set adds ``b`` and ``c`` (``c`` takes ``b``'s output). The only asset of the
    content is deleted before ``b`` runs: ``b`` is counted ``dropped`` (no one needs it), but
    ``c`` is ``waiting`` for ``b`` -- never told, never requested, and ``_count_ends`` has no
    branch for a ``waiting`` row: it stays ``enqueued`` and the backfill never ends (the hang
    the storm found for plain jobs, for jobs in steps)."""
    from tests.unit.test_backfill import _delete

    steps = text_recipes(("a", "A", {}), ("b", "B", {}), ("c", "C", {"in": "b@1"}))
    rig = Rig(tmp_path, 1, 1)
    backfiller = backfiller_of(rig, steps)
    backfiller.start()
    rig.clock.advance(rig.settings.worker_timeout_s)
    [found] = backfiller.tick(budget_s=60)
    assert found.counts.enqueued == 2
    _delete(rig, rig.keys[0])
    rig.new = rig.pipeline(steps)
    for key in lane_keys(rig):
        rig.new.run_request(key)  # b: source_missing, given back
    rig.queue.resent.clear()
    for _ in range(5):
        rig.clock.advance(rig.settings.lease_s + 1)
        backfiller.tick(budget_s=60)
    after = rig.backfills.all()[-1]
    assert after.state == BackfillState.DONE, (after.state, after.counts)


# -- 7. a superseded backfill's queued jobs become a retry loop ------------------------------


def test_a_superseded_backfills_queued_jobs_are_not_a_retry_loop(tmp_path):
    """B's backfill has its jobs on the lane; a second deploy (set C) supersedes it. The lane
    is polled by C's workers, which do not have ``b@1``: ``Claims.recipe`` raises
    ``TransientFailure`` for every delivery, so each B message is redelivered until the lane's
    dead-letter queue takes it (and its alarm fires), though no asset will ever want it (C's
    scan replaces the ``next`` sets). Bad input ends in a clear permanent end, never a retry
    loop."""
    rig = Rig(tmp_path, 1, 1)
    rig.backfiller().tick(budget_s=60, auto_start=True)
    [b_job] = lane_keys(rig)
    c_set = text_recipes(("a", "A", {}), ("c", "C", {}))
    on_c = backfiller_of(rig, c_set)
    on_c.tick(budget_s=60, auto_start=True)
    c_pipeline = rig.pipeline(c_set)
    result = c_pipeline.run_request(b_job)  # raises TransientFailure: redelivered, up to the DLQ
    assert result.state in (SourceState.IGNORED, SourceState.PERMANENT_FAILURE)


# -- 8. the backfill reads the job rows before its reference is in place: the collection races it


def test_the_collection_between_the_backfills_row_read_and_its_upgrade_switches_the_asset_to_deleted_outputs(
    tmp_path,
):
    """The collection's protocol (``service_layer/collection.py``: "A worker adds its reference
    *before* it reads the job rows") is what makes a re-upload racing it safe. ``Backfiller.asset``
    does it the other way round: step (a) reads the rows (``b`` done), step (b) writes the
    ``next`` set with ``b`` already ``done`` and switches at once. A collection run between the
    two finds ``b`` unreferenced, deletes its manifest and outputs and marks it ``collected``; the
    upgrade then switches the asset to a set whose manifest is gone (and retires the old one)."""
    from mediajobs.service_layer.collection import Collector
    from tests.fakes import Wrapping
    from tests.unit.test_backfill import _delete

    rig = Rig(tmp_path, 1, 1)
    x = rig.keys[0]
    y = "originals/y.jpg"  # an upload after the deploy, same bytes: b(c) rendered, then y deleted
    rig.store.objects[y] = rig.data[x]
    assert rig.new.process(ObjectRef(BUCKET, y, None, len(rig.data[x]), sequencer="ff")).state == SourceState.DONE
    [b] = rig.b_jobs()
    _delete(rig, y)
    assert not rig.assets.referenced(b)
    collector = Collector(rig.assets, rig.ledger, rig.store, rig.settings, clock=rig.clock)

    def upgrade(*args, **kwargs):
        collector.run(grace_s=0)  # the Collect schedule's run, between the row read and the upgrade
        return rig.assets.upgrade(*args, **kwargs)

    backfiller = backfiller_of(rig, NEW, assets=Wrapping(rig.assets, upgrade=upgrade))
    backfiller.tick(budget_s=60, auto_start=True)
    view = rig.assets.get(BUCKET, x)
    serving = [(j.recipe, j.state, j.manifest_key in rig.store.objects) for j in view.jobs]
    assert all(there for _, state, there in serving if state == AssetJobState.DONE), (view.state, serving)


# -- 9. a cancelled backfill's job given back is never requested again ------------------------


def test_a_cancelled_backfills_job_given_back_leaves_the_assets_that_want_it_waiting_for_ever(tmp_path):
    """X and Y share content c; b(c)'s row names X. X's object is deleted in S3 (its event not
    processed yet): the lane request reads X, finds it gone, ends ``source_missing``
    "for this request only", gives the claim back and its message is acknowledged -- only the
    backfill's ``_count_ends`` would request it again for Y. The operator cancels (documented:
    "its jobs already on the lane still run, and their assets switch when done"): no tick
    looks at a cancelled backfill, so Y keeps a ``next`` set that never completes."""
    from mediajobs.domain.assets import AssetVersion, sequencer_order

    rig = Rig(tmp_path, 2, 1)
    backfiller = rig.backfiller()
    first, _ = backfiller.start()
    rig.clock.advance(rig.settings.worker_timeout_s)
    backfiller.tick(budget_s=60)
    x, y = rig.keys
    rig.store.objects.pop(x)  # X deleted in S3, its event still in flight
    [job] = lane_keys(rig)
    rig.queue.resent.clear()
    rig.new.run_request(job)  # reads Y's copy (S3 no longer serves X), or ends source_missing
    # X's event is processed now: X is deleted; Y is the content's only copy. (Without the
    # cancel, the next tick requests b(c) again and Y switches: a control of this test.)
    marker = AssetVersion("dm", "", None, sequencer_order("fff"))
    assert rig.assets.delete(BUCKET, x, marker, now_s=int(rig.clock())) is not None
    assert backfiller.move(first.id, BackfillState.CANCELLED).state == BackfillState.CANCELLED
    for _ in range(5):  # time passes; the schedule runs (a deployment that keeps the cancel)
        rig.clock.advance(rig.settings.lease_s + 1)
        backfiller.tick(budget_s=60)
        rig.drain_lane()
    view = rig.assets.get(BUCKET, y)
    assert [j.recipe for j in view.jobs] == ["a@1", "b@1"] and not view.next, (view.jobs, view.next)


# -- 10. an upload that never settles keeps the backfill running for ever ---------------------


def test_an_asset_whose_upload_never_settles_keeps_the_backfill_from_ever_ending(tmp_path):
    """An asset made current before its content was known (``pending``, no SHA-256) whose
    message then went to the dead-letter queue (timeouts, throttling: no refusal) stays
    ``pending`` for good. The scan keeps it "to look at again"; ``_look_again`` skips it while
    it is unsettled, so ``later`` never reaches 0 and the backfill is never ``done`` -- with no
    bound, no failure count and no reason shown."""
    from mediajobs.domain.assets import AssetVersion, sequencer_order

    rig = Rig(tmp_path, 3, 3)
    stuck = "originals/stuck.mov"
    version = AssetVersion("v1", "e", 10, sequencer_order("fff"))
    rig.assets.make_current(BUCKET, stuck, version, sha256=None, media=None, jobs=None, now_s=1)
    backfiller = rig.backfiller()
    backfiller.start()
    after = run_to_the_end(rig, backfiller, rounds=10)
    assert after.counts.remaining == 0 and after.scan_over
    assert after.state != BackfillState.RUNNING, (after.state, after.counts)


# -- 11. the rate: the end of every scan's budget is a burst ----------------------------------


def test_the_scan_keeps_its_rate_to_the_end_of_its_budget(tmp_path):
    """``pace`` sleeps ``min(ahead, deadline - now)``: once the budget is spent it sleeps 0,
    but the page being done is finished -- up to ``PAGE_ASSETS`` (100) requests per segment
    sent at once, whatever ``BackfillRatePerSecond`` says (and each overlapping scheduled
    invocation -- every minute, 240 s each -- keeps a rate of its own)."""
    import time

    rig = Rig(tmp_path, 100, 100, segments=1)
    rig.settings = dataclasses.replace(rig.settings, backfill_rate_per_s=10.0)
    backfiller = backfiller_of(rig, NEW)
    backfiller.start()
    began = time.monotonic()
    backfiller.tick(budget_s=0.5)
    took = time.monotonic() - began
    sent = len(lane_keys(rig))
    assert sent <= 10 * took + 2, (sent, round(took, 2))


# -- 12. a copy whose event is late burns the job's attempts: the content's job fails for good --


def test_a_named_copy_gone_from_s3_before_its_event_exhausts_the_job_though_another_copy_holds_the_bytes(
    tmp_path,
):
    """b(c)'s row names X; Y holds the same bytes. X's object is deleted from S3 and its event
    waits on the jobs queue (a backlog of uploads: they have the priority). ``source_for``
    trusts X's asset record (still content c), so every lane request reads X, finds it gone,
    and gives the claim back -- an attempt each; ``_count_ends`` requests it again every tick
    once the lease is over. After ``MAX_ATTEMPTS`` the ledger ends b(c) ``attempts_exhausted``:
    a permanent failure of the content's job, though Y's copy was readable all along. Y never
    switches, and every later asset of content c under the new set inherits the failure."""
    from mediajobs.domain.assets import AssetVersion, sequencer_order

    rig = Rig(tmp_path, 2, 1)
    backfiller = rig.backfiller()
    backfiller.start()
    rig.clock.advance(rig.settings.worker_timeout_s)
    backfiller.tick(budget_s=60)
    x, y = rig.keys
    rig.store.objects.pop(x)  # deleted in S3; its event is behind a backlog of uploads
    [job] = lane_keys(rig)
    for _ in range(rig.settings.max_attempts + 1):  # ten minutes of schedule runs
        for key in lane_keys(rig):
            rig.new.run_request(key)
        rig.queue.resent.clear()
        rig.clock.advance(rig.settings.lease_s + 1)
        backfiller.tick(budget_s=60)
    # X's event is processed at last.
    marker = AssetVersion("dm", "", None, sequencer_order("fff"))
    assert rig.assets.delete(BUCKET, x, marker, now_s=int(rig.clock())) is not None
    done = run_to_the_end(rig, backfiller)
    row = rig.ledger.rows[job]
    view = rig.assets.get(BUCKET, y)
    assert row.state == JobState.DONE, (row.state, row.failure_reason, done.counts)
    assert [j.recipe for j in view.jobs] == ["a@1", "b@1"] and not view.next


# -- 13. a switch to the same recipes under a new policy version is not told -------------------


def test_a_switch_to_new_jobs_of_the_same_recipes_is_told_under_a_new_id():
    """The switch is told with a new ``Asset Ready`` (another id) -- but ``notification_for``
    compares the serving *recipe references* (``old.recipes == new.recipes``), and
    ``notification_id`` hashes the references too. A switch whose jobs differ and whose
    references do not (a new policy version: every job key changes, no reference does; or a
    recipe file changed under the same version is refused, so this is the policy case) owes
    nothing, and would carry the old notification's id anyway (the outbox's conditional put
    drops it): the app is never told its derivatives moved."""
    from mediajobs.domain.assets import AssetJob, AssetVersion, AssetView, promoted, sequencer_order
    from mediajobs.domain.notifications import notification_for

    def done(key: str) -> AssetJob:
        return AssetJob("a@1", key, AssetJobState.DONE, manifest_key=f"derivatives/{key}/manifest.json")

    version = AssetVersion("v1", "e1", 10, sequencer_order("1"))
    old = AssetView(
        BUCKET, "originals/k.jpg", AssetState.READY, version, sha256="c" * 64, media="image",
        jobs=(done("1" * 64),), next=(done("2" * 64),), next_grace_s=60,
    )  # fmt: skip
    first = notification_for(None, dataclasses.replace(old, next=()))
    switched = promoted(old, now_s=5).view
    assert switched.jobs[0].job_key == "2" * 64  # the switch happened: other derivatives serve
    told = notification_for(old, switched)
    assert told is not None and told.type == NotificationType.READY
    assert told.id != first.id


def test_a_rollback_during_a_backfill_leaves_it_running_for_ever_and_the_assets_holding_its_next_set(tmp_path):
    """The same rollback while B's backfill runs: A's start answers with A's ``done`` backfill
    (``start`` only supersedes when it *creates* one), so B's stays ``running`` for ever (no
    deployment ticks a change it does not have; ``backfills/latest`` shows it), and every asset
    B reached keeps B's ``next`` set -- references that keep B's jobs from ever being collected,
    ``next_recipes`` in its status for good, and lane messages no worker of A can run."""
    rig = Rig(tmp_path, 3, 3)
    on_a = backfiller_of(rig, OLD)
    on_a.tick(budget_s=60, auto_start=True)
    run_to_the_end(rig, on_a)
    on_b = rig.backfiller()
    on_b.tick(budget_s=60, auto_start=True)  # B's first pass: every asset gets B as its next set
    # Roll back to A; its schedule runs for a while.
    for _ in range(3):
        on_a.tick(budget_s=60, auto_start=True)
        rig.clock.advance(rig.settings.worker_timeout_s)
    running = [(b.id, b.change == on_a.change) for b in rig.backfills.all() if b.state == BackfillState.RUNNING]
    nexts = [[j.recipe for j in rig.assets.get(BUCKET, k).next] for k in rig.keys]
    assert running == [] and nexts == [[]] * 3, (running, nexts)


# -- 14. after a backfill, the retired sets' held candidates stall the collection for a week ----


def test_the_retired_sets_held_candidates_do_not_stall_the_collection_of_a_deleted_assets_derivatives(tmp_path):
    """Every switch writes a candidate per retired job, held ``RETIRE_GRACE_SECONDS`` (a week).
    Past the collection's own grace (a day) they are "due": ``Assets.candidates`` returns the
    first ``collect_batch_jobs`` (100) due ones in key order, the run finds them held
    (``waiting``), and neither collects nor drops them -- so every run reads the same 100 and
    never reaches the candidates behind them. A deleted asset's derivatives, due a day after the
    delete, are kept until the week of holds is over (and a big backfill retires hundreds of
    thousands)."""
    from mediajobs.domain.keys import sha256_hex
    from mediajobs.domain.plan import Where, plan_jobs
    from mediajobs.service_layer.collection import Collector

    only_b = text_recipes(("b", "B", {}))
    rig = Rig(tmp_path, 150, 150)
    rig.settings = dataclasses.replace(rig.settings, retire_grace_s=604_800, collect_grace_s=86_400)  # the defaults
    backfiller = backfiller_of(rig, only_b)
    backfiller.tick(budget_s=60, auto_start=True)
    rig.new = rig.pipeline(only_b)
    run_to_the_end(rig, backfiller)
    assert all([j.recipe for j in v.jobs] == ["b@1"] for v in rig.assets.assets.values())
    held = sorted({job for job, _ in rig.assets.candidate_rows})
    assert len(held) == 150 and all(rig.assets.holds[c] > rig.clock() for c in rig.assets.candidate_rows)
    # An upload whose b job sorts after the 100th held candidate, then its delete.
    for i in range(10_000):
        data = f"deleted-later-{i}".encode()
        [job] = plan_jobs(
            sha256_hex(data),
            "image",
            only_b,
            Where(
                BUCKET,
                "originals/z.jpg",
                "derivatives/",
                Settings(key_secret=TEST_KEY_SECRET).policy_version,
                Settings(key_secret=TEST_KEY_SECRET).keys,
            ),
        )
        if job.key > held[99]:
            break
    z = "originals/z.jpg"
    rig.store.objects[z] = data
    assert rig.new.process(ObjectRef(BUCKET, z, None, len(data), sequencer="ff")).state == SourceState.DONE
    from tests.unit.test_backfill import _delete

    _delete(rig, z)  # the user deleted it: its derivatives are due after the collection's grace
    collector = Collector(rig.assets, rig.ledger, rig.store, rig.settings, clock=rig.clock)
    rig.clock.advance(rig.settings.collect_grace_s + 1)
    for _ in range(5):  # five runs of the Collect schedule
        collector.run()
    left = [k for k in rig.store.objects if k.startswith(f"derivatives/{job.key}/")]
    assert left == [], f"{len(left)} objects of the deleted asset's job kept behind {len(held)} held candidates"
