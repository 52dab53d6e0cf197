"""The collection (service_layer/collection.py) against the fakes: the protocol of
docs/assets.md, "Collection", step by step, and the claims a render makes on the rows the
collection leaves."""

from __future__ import annotations

import dataclasses

import pytest

from mediajobs.domain.assets import FAILED_PREFIX, Candidate
from mediajobs.domain.errors import ATTEMPTS_EXHAUSTED, TransientFailure
from mediajobs.domain.jobs import ClaimOutcome, JobSpec, JobState, JobView
from mediajobs.service_layer.collection import Collector
from mediajobs.settings import Settings
from tests.fakes import FakeAssets, FakeClock, FakeLedger, FakeStore, Wrapping

NOW_S = 100_000
GRACE_S = 1_000
LEASE_S = 120
BUCKET = "media"
SETTINGS = Settings(lease_s=LEASE_S, collect_grace_s=GRACE_S, collect_batch_jobs=10)


def key_of(n: int) -> str:
    return f"{n:x}" * 64 if n < 16 else f"{n:064x}"


def prefix(job_key: str) -> str:
    return f"derivatives/{job_key}/"


def manifest(job_key: str) -> str:
    return prefix(job_key) + "manifest.json"


@dataclasses.dataclass
class World:
    log: list
    assets: FakeAssets
    ledger: FakeLedger
    store: FakeStore
    clock: FakeClock

    def collector(self, *, assets=None, ledger=None, store=None) -> Collector:
        return Collector(assets or self.assets, ledger or self.ledger, store or self.store, SETTINGS, clock=self.clock)

    def job(self, job_key: str, state: JobState = JobState.DONE, **fields) -> None:
        """A job row and its files: a manifest and two outputs for a done one, two outputs
        without a manifest otherwise."""
        done = state in (JobState.DONE, JobState.COLLECTING)
        row = {"manifest_key": manifest(job_key)} if done else {}
        row.update(fields)
        self.ledger.rows[job_key] = JobView(
            job_key,
            state,
            "t1",
            row.pop("lease_expires_at_s", NOW_S - 5_000),
            row.pop("attempts", 1),
            "web-image",
            source_bucket=BUCKET,
            output_prefix=prefix(job_key),
            **row,
        )
        files = ["manifest.json", "thumb.webp", "large.webp"] if done else ["thumb.webp", "large.webp"]
        for name in files:
            self.store.objects[prefix(job_key) + name] = name.encode()

    def release(self, job_key: str, by: str = "asset-a", *, age_s: int = GRACE_S + 10) -> Candidate:
        self.assets.candidate_rows[(job_key, by)] = NOW_S - age_s
        return Candidate(job_key, by, NOW_S - age_s)

    def reference(self, job_key: str, key: str = "originals/b.jpg") -> None:
        self.assets.refs.setdefault(job_key, set()).add((BUCKET, key))

    def files(self, job_key: str) -> set[str]:
        return {k.rsplit("/", 1)[1] for k in self.store.objects if k.startswith(prefix(job_key))}


@pytest.fixture()
def world() -> World:
    log: list = []
    return World(log, FakeAssets(log), FakeLedger(log), FakeStore({}, log), FakeClock(NOW_S))


def spec(job_key: str) -> JobSpec:
    return JobSpec(job_key, "a" * 64, "web-image", 1, "b" * 64, "none", prefix(job_key), BUCKET, "originals/a.jpg")


def test_a_candidate_within_the_grace_period_waits(world):
    job = key_of(1)
    world.job(job)
    world.release(job, age_s=GRACE_S - 10)
    report = world.collector().run()
    assert (report.waiting, report.looked, report.collected) == (0, 0, 0)  # not due: not looked at
    assert world.files(job) == {"manifest.json", "thumb.webp", "large.webp"}
    assert world.assets.candidate_rows and world.ledger.rows[job].state == JobState.DONE


@pytest.mark.parametrize(("age_s", "collected"), [(GRACE_S - 1, 0), (GRACE_S, 1)])
def test_a_job_is_due_once_the_whole_grace_period_has_passed(world, age_s, collected):
    job = key_of(1)
    world.job(job)
    world.release(job, age_s=age_s)
    assert world.collector().run().collected == collected


def test_a_grace_of_zero_takes_a_job_released_this_very_second(world):
    job = key_of(1)
    world.job(job)
    world.release(job, age_s=0)
    assert world.collector().run(grace_s=0).collected == 1


def test_a_job_released_again_within_the_grace_period_waits_for_its_last_release(world):
    job = key_of(1)
    world.job(job)
    world.release(job, "asset-a")
    world.release(job, "asset-b", age_s=10)
    report = world.collector().run()
    assert (report.waiting, report.looked, report.collected) == (1, 0, 0)
    assert len(world.assets.candidate_rows) == 2 and world.files(job) == {"manifest.json", "thumb.webp", "large.webp"}


def test_a_shorter_grace_given_to_the_run_wins_over_the_settings(world):
    job = key_of(1)
    world.job(job)
    world.release(job, age_s=10)
    assert world.collector().run(grace_s=5).collected == 1


def test_a_referenced_job_is_revived_its_candidate_dropped_and_nothing_deleted(world):
    job = key_of(1)
    world.job(job)
    world.release(job)
    world.reference(job)
    report = world.collector().run()
    assert (report.looked, report.revived, report.collected, report.deleted_objects) == (1, 1, 0, 0)
    assert world.assets.candidate_rows == {}
    assert world.files(job) == {"manifest.json", "thumb.webp", "large.webp"}
    assert world.ledger.rows[job].state == JobState.DONE
    assert not any(entry[0] == "begin_collection" for entry in world.log)


def test_an_unreferenced_done_job_loses_its_manifest_first_then_the_rest_and_is_collected(world):
    job = key_of(1)
    world.job(job)
    world.release(job)
    firsts = []

    def delete_prefix(bucket, under, *, first=None):
        firsts.append((bucket, under, first))
        return world.store.delete_prefix(bucket, under, first=first)

    report = world.collector(store=Wrapping(world.store, delete_prefix=delete_prefix)).run()
    assert (report.looked, report.collected, report.deleted_objects) == (1, 1, 3)
    assert firsts == [(BUCKET, prefix(job), manifest(job))]
    assert world.files(job) == set()
    row = world.ledger.rows[job]
    assert (row.state, row.collected_at_s, row.manifest_key, row.outputs) == (JobState.COLLECTED, NOW_S, None, ())
    assert world.assets.candidate_rows == {}
    steps = [e[0] for e in world.log if e[0] in ("begin_collection", "delete_prefix", "end_collection")]
    assert steps == ["begin_collection", "delete_prefix", "end_collection"]


def test_a_reference_that_comes_during_the_collection_sends_the_job_back_to_done(world):
    job = key_of(1)
    world.job(job)
    world.release(job)

    def begin_collection(job_key, token, **kwargs):
        began = world.ledger.begin_collection(job_key, token, **kwargs)
        world.reference(job_key, "originals/re-upload.jpg")  # a re-upload of the same bytes
        return began

    report = world.collector(ledger=Wrapping(world.ledger, begin_collection=begin_collection)).run()
    assert (report.revived, report.collected, report.deleted_objects) == (1, 0, 0)
    assert world.ledger.rows[job].state == JobState.DONE
    assert world.files(job) == {"manifest.json", "thumb.webp", "large.webp"}
    assert world.assets.candidate_rows == {}


def test_a_failed_jobs_manifestless_prefix_is_swept_and_the_row_stays_failed(world):
    job = key_of(1)
    world.job(job, JobState.PERMANENT_FAILURE, failure_reason=ATTEMPTS_EXHAUSTED)
    world.release(job, FAILED_PREFIX)
    world.reference(job, "originals/failed.jpg")  # the failed asset still names it
    report = world.collector().run()
    assert (report.swept_failed, report.collected, report.deleted_objects) == (1, 0, 2)
    assert world.files(job) == set()
    row = world.ledger.rows[job]
    assert (row.state, row.failure_reason, row.collected_at_s) == (
        JobState.PERMANENT_FAILURE,
        ATTEMPTS_EXHAUSTED,
        NOW_S,
    )
    assert world.assets.candidate_rows == {}


def test_a_failed_job_swept_already_only_loses_its_candidate(world):
    job = key_of(1)
    world.job(job, JobState.PERMANENT_FAILURE, collected_at_s=NOW_S - 50)
    world.release(job, FAILED_PREFIX)
    report = world.collector().run()
    assert (report.already_gone, report.swept_failed, report.deleted_objects) == (1, 0, 0)
    assert world.assets.candidate_rows == {}


def test_a_job_a_render_holds_is_kept_for_a_later_run(world):
    job = key_of(1)
    world.job(job, JobState.RUNNING, lease_expires_at_s=NOW_S + 60)
    world.release(job)
    report = world.collector().run()
    assert (report.busy, report.collected, report.deleted_objects) == (1, 0, 0)
    assert len(world.assets.candidate_rows) == 1 and world.ledger.rows[job].state == JobState.RUNNING
    assert world.files(job) == {"thumb.webp", "large.webp"}


@pytest.mark.parametrize(
    ("state", "lease_expires_at_s"), [(JobState.RUNNING, NOW_S - 1), (JobState.TRANSIENT_FAILURE, NOW_S + 60)]
)
def test_an_abandoned_render_nothing_references_is_collected_with_its_manifestless_outputs(
    world, state, lease_expires_at_s
):
    """A render whose event was superseded or deleted since (its holder died, or gave the
    claim back): no delivery will ever finish it, and its outputs have no manifest."""
    job = key_of(1)
    world.job(job, state, lease_expires_at_s=lease_expires_at_s)
    world.release(job)
    report = world.collector().run()
    assert (report.abandoned, report.collected, report.deleted_objects) == (1, 1, 2)
    assert world.files(job) == set() and not world.assets.candidate_rows
    assert world.ledger.rows[job].state == JobState.COLLECTED


def test_an_abandoned_render_an_asset_references_again_is_left_to_that_delivery(world):
    job = key_of(1)
    world.job(job, JobState.TRANSIENT_FAILURE)
    world.release(job)
    world.reference(job)
    report = world.collector().run()
    assert (report.revived, report.collected, report.abandoned) == (1, 0, 0)
    assert world.files(job) == {"thumb.webp", "large.webp"}


def test_a_live_collection_elsewhere_is_left_alone(world):
    job = key_of(1)
    world.job(job, JobState.COLLECTING, lease_expires_at_s=NOW_S + 60)
    world.release(job)
    report = world.collector().run()
    assert (report.busy, report.collected) == (1, 0)
    assert len(world.assets.candidate_rows) == 1


def test_a_run_is_bounded_by_its_limit_and_by_the_settings(world):
    jobs = [key_of(n) for n in range(1, 4)]
    for job in jobs:
        world.job(job)
        world.release(job)
    assert world.collector().run(limit=2).collected == 2
    assert [row.state for row in world.ledger.rows.values()].count(JobState.COLLECTED) == 2
    assert len(world.assets.candidate_rows) == 1
    small = Settings(lease_s=LEASE_S, collect_grace_s=GRACE_S, collect_batch_jobs=1)
    world.job(key_of(4))
    world.release(key_of(4))
    assert Collector(world.assets, world.ledger, world.store, small, world.clock).run().looked == 1


def test_a_collector_whose_lease_was_taken_over_stops_before_deleting_and_marks_nothing(world):
    job = key_of(1)
    world.job(job)
    world.release(job)
    claims = []

    looks = []

    def referenced(job_key):
        looks.append(job_key)
        if len(looks) < 2:  # the first look, before the lease
            return world.assets.referenced(job_key)
        # The collector stalls past its lease; a render takes the job over.
        world.clock.advance(LEASE_S + 1)
        claims.append(
            world.ledger.claim(spec(job_key), now_s=int(world.clock()), lease_until_s=int(world.clock()) + 60)
        )
        return world.assets.referenced(job_key)

    report = world.collector(assets=Wrapping(world.assets, referenced=referenced)).run()
    assert (report.lost, report.collected, report.deleted_objects) == (1, 0, 0)
    assert (claims[0].outcome, claims[0].attempts, claims[0].sweep) == (ClaimOutcome.RUN, 1, True)
    row = world.ledger.rows[job]
    assert (row.state, row.lease_token, row.collected_at_s) == (JobState.RUNNING, claims[0].lease_token, None)
    assert world.files(job) == {"manifest.json", "thumb.webp", "large.webp"}
    assert len(world.assets.candidate_rows) == 1
    assert not any(entry[0] == "end_collection" for entry in world.log)


def test_a_slow_collection_renews_its_lease_before_deleting(world):
    job = key_of(1)
    world.job(job)
    world.release(job)
    renewed = []

    looks = []

    def referenced(job_key):
        looks.append(job_key)
        if len(looks) == 2:  # the second look, under the lease, takes half of it
            world.clock.advance(LEASE_S // 2)
        return world.assets.referenced(job_key)

    def renew(job_key, token, *, lease_until_s, now_s):
        renewed.append(lease_until_s)
        world.ledger.renew(job_key, token, lease_until_s=lease_until_s, now_s=now_s)

    ledger = Wrapping(world.ledger, renew=renew)
    report = world.collector(assets=Wrapping(world.assets, referenced=referenced), ledger=ledger).run()
    assert report.collected == 1
    assert renewed == [NOW_S + LEASE_S // 2 + LEASE_S]


def test_a_collection_whose_collector_died_is_resumed_and_finished_even_if_referenced_since(world):
    job = key_of(1)
    world.job(job, JobState.COLLECTING, lease_expires_at_s=NOW_S - 1)
    del world.store.objects[manifest(job)]  # the dead collector got that far
    world.release(job)
    world.reference(job, "originals/re-upload.jpg")  # its worker found it collecting: it waits
    report = world.collector().run()
    assert (report.collected, report.resumed, report.revived, report.deleted_objects) == (1, 1, 0, 3)
    assert world.files(job) == set()
    assert world.ledger.rows[job].state == JobState.COLLECTED
    assert world.assets.candidate_rows == {}


def test_a_transient_failure_mid_collection_leaves_the_job_collecting_for_the_next_run(world):
    job = key_of(1)
    world.job(job)
    world.release(job)

    def broken(bucket, under, *, first=None):
        world.store.objects.pop(first)
        raise TransientFailure("S3 DeleteObjects throttled")

    report = world.collector(store=Wrapping(world.store, delete_prefix=broken)).run()
    assert (report.errors, report.collected) == (1, 0)
    assert world.ledger.rows[job].state == JobState.COLLECTING and len(world.assets.candidate_rows) == 1
    world.clock.advance(LEASE_S)
    again = world.collector().run()
    assert (again.collected, again.resumed) == (1, 1)
    assert world.files(job) == set() and world.ledger.rows[job].state == JobState.COLLECTED


@pytest.mark.parametrize("state", [JobState.COLLECTED, None])
def test_a_job_collected_already_or_without_a_row_only_loses_its_candidates(world, state):
    job = key_of(1)
    if state is not None:
        world.ledger.rows[job] = JobView(job, state, "c", NOW_S - 1, 1, collected_at_s=NOW_S - 10)
    world.release(job, "asset-a")
    world.release(job, "asset-b")
    report = world.collector().run()
    assert (report.looked, report.already_gone, report.deleted_objects) == (1, 1, 0)
    assert world.assets.candidate_rows == {}


def test_a_claim_on_a_collected_row_renders_again_from_attempt_1(world):
    job = key_of(1)
    world.job(job)
    world.release(job)
    world.collector().run()
    claim = world.ledger.claim(spec(job), now_s=NOW_S + 1, lease_until_s=NOW_S + 61)
    assert (claim.outcome, claim.attempts, claim.took_over, claim.sweep) == (ClaimOutcome.RUN, 1, True, False)
    assert world.ledger.rows[job].state == JobState.RUNNING


def test_a_claim_on_an_expired_collecting_row_renders_again_after_a_sweep(world):
    job = key_of(1)
    world.job(job, JobState.COLLECTING, lease_expires_at_s=NOW_S - 1, attempts=3)
    claim = world.ledger.claim(spec(job), now_s=NOW_S, lease_until_s=NOW_S + 60)
    assert (claim.outcome, claim.attempts, claim.sweep) == (ClaimOutcome.RUN, 1, True)
    row = world.ledger.rows[job]
    assert (row.state, row.attempts, row.manifest_key) == (JobState.RUNNING, 1, None)


def test_a_claim_on_a_live_collecting_row_is_busy_until_the_lease_ends(world):
    job = key_of(1)
    world.job(job, JobState.COLLECTING, lease_expires_at_s=NOW_S + 30)
    claim = world.ledger.claim(spec(job), now_s=NOW_S, lease_until_s=NOW_S + 60)
    assert (claim.outcome, claim.lease_expires_at_s, claim.lease_token) == (ClaimOutcome.BUSY, NOW_S + 30, None)
    assert world.ledger.rows[job].state == JobState.COLLECTING


def test_a_job_released_again_within_the_grace_waits_however_many_other_candidates_there_are(world):
    """The batch is full of other jobs' young candidates: the later release of this job is
    still seen (its candidates are read whole), so it waits for the grace from that one."""
    for n in range(1, 11):
        world.job(key_of(n))
        world.release(key_of(n), age_s=60)
    job = "f" * 64
    world.job(job)
    world.release(job, "asset-a", age_s=GRACE_S + 10)
    world.release(job, "asset-b", age_s=60)
    report = world.collector().run(limit=10)
    assert (report.waiting, report.collected) == (1, 0)
    assert world.ledger.rows[job].state == JobState.DONE and "manifest.json" in world.files(job)


def test_an_abandoned_render_that_finished_after_the_collector_read_its_row_is_not_collected(world):
    """The row read was transient_failure, nothing referencing it; right after the
    collector's look at the references, a re-upload references the job, takes it over and
    commits it. The mark is fenced on the row read: nothing is deleted."""
    job = key_of(3)
    world.job(job, JobState.TRANSIENT_FAILURE)
    world.release(job)

    def referenced(job_key):
        answer = world.assets.referenced(job_key)
        if job_key == job and world.ledger.rows[job].state == JobState.TRANSIENT_FAILURE:
            world.reference(job)  # the re-upload's asset, then its render and commit
            world.ledger.rows[job] = dataclasses.replace(
                world.ledger.rows[job], state=JobState.DONE, lease_token="t2", manifest_key=manifest(job)
            )
            world.store.objects[manifest(job)] = b"{}"
        return answer

    report = world.collector(assets=Wrapping(world.assets, referenced=referenced)).run()
    assert report.collected == 0 and "manifest.json" in world.files(job)
    assert world.ledger.rows[job].state == JobState.DONE
