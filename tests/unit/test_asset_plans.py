"""What each change of an asset writes (the reference rows added and deleted, the
candidates): the domain's plans, which the DynamoDB adapter and the fake both apply; and
the adapter's keys."""

from __future__ import annotations

from mediajobs.adapters.assets import candidate_pk, candidate_sk, reference_sk
from mediajobs.domain.assets import (
    AssetJob,
    AssetJobState,
    AssetState,
    AssetVersion,
    AssetView,
    Candidate,
    plan_current,
    plan_delete,
    plan_record,
    reference_id,
    sequencer_order,
)

A, B, C = "a" * 64, "b" * 64, "c" * 64


def v(seq: str, vid: str = "v") -> AssetVersion:
    return AssetVersion(vid + seq, "e" + seq, 10, sequencer_order(seq))


def live(seq: str, *keys: str, state: AssetState = AssetState.PENDING) -> AssetView:
    return AssetView("b", "k", state, v(seq), sha256="s", media="image", jobs=tuple(AssetJob("r@1", k) for k in keys))


def test_keys_of_the_items():
    assert reference_sk("b", "originals/x.jpg") == "ref#" + reference_id("b", "originals/x.jpg")
    assert (candidate_pk(A), candidate_sk(A, "failed")) == ("collect#a", A + "#failed")


def test_a_new_version_adds_what_it_uses_and_drops_and_releases_what_it_no_longer_does():
    plan = plan_current(
        live("1", A, B),
        "b",
        "k",
        v("2"),
        sha256="t",
        media="image",
        jobs=[AssetJob("r@1", C), AssetJob("p@1", B)],
        now_s=7,
    )
    assert (plan.add, plan.drop) == ({C}, {A})
    assert plan.candidates == (Candidate(A, reference_id("b", "k"), 7),)
    assert plan.view.state == AssetState.PENDING


def test_nothing_is_written_for_a_lower_or_the_same_event():
    old = live("5", A)
    assert plan_current(old, "b", "k", v("4"), sha256="s", media="image", jobs=[AssetJob("r@1", C)], now_s=7) is None
    assert plan_current(old, "b", "k", v("5"), sha256="s", media="image", jobs=[AssetJob("r@1", C)], now_s=7) is None


def test_a_delete_of_a_live_asset_drops_all_and_of_an_unknown_one_writes_a_tombstone_only():
    plan = plan_delete(live("1", A, B), "b", "k", v("2", "dm"), now_s=9)
    assert (plan.view.state, plan.add, plan.drop, len(plan.candidates)) == (AssetState.DELETED, set(), {A, B}, 2)
    tomb = plan_delete(None, "b", "k", v("2", "dm"), now_s=9)
    assert (tomb.view.state, tomb.drop, tomb.candidates) == (AssetState.DELETED, frozenset(), ())
    assert plan_delete(live("3", A), "b", "k", v("2", "dm"), now_s=9) is None


def test_record_names_the_jobs_failed_without_a_manifest():
    old = live("1", A, B, C)
    change, failed = plan_record(
        old,
        sequencer_order("1"),
        [
            AssetJob("r@1", A, AssetJobState.FAILED, reason="attempts_exhausted"),
            AssetJob("r@1", B, AssetJobState.FAILED, reason="output_conflict"),
            AssetJob("r@1", C, AssetJobState.FAILED, reason="truncated_image"),
        ],
        now_s=3,
    )
    assert (change.view.state, change.view.reason, failed) == (AssetState.FAILED, "attempts_exhausted", (A, B))
    assert plan_record(old, sequencer_order("2"), [], now_s=3) is None
