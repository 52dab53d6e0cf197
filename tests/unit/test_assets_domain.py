"""The asset's pure rules: sequencer order, forward-only states, deletes as S3 sends them."""

from __future__ import annotations

import pytest

from mediajobs.domain.assets import (
    AssetJob,
    AssetJobState,
    AssetState,
    AssetVersion,
    AssetView,
    DeletionEffect,
    compare_sequencers,
    deletion_effect,
    may_move,
    merge_jobs,
    promoted,
    reference_id,
    sequencer_order,
    status_document,
    summarize,
)


def test_sequencers_of_different_lengths_compare_as_hexadecimal_numbers():
    # Real-looking S3 sequencers of one key: the 18-digit one is the later, although a
    # plain string comparison puts it first ("0055..." < "5D..." and "FF" > "1" as text).
    earlier, later = "5DCFB0F4FC0E8B", "0062E99A88DC407460"
    assert earlier > later  # as strings: wrong
    assert compare_sequencers(later, earlier) == 1
    assert compare_sequencers(earlier, later) == -1
    assert compare_sequencers("00FF", "ff") == 0
    assert compare_sequencers("1", "F") == -1 and compare_sequencers("10", "F") == 1
    assert sequencer_order("0062E99A88DC407460") > sequencer_order("5DCFB0F4FC0E8B")
    assert len(sequencer_order("A")) == 64 and sequencer_order("a") == sequencer_order("A")


def test_an_event_without_a_sequencer_sorts_first_and_a_malformed_one_is_refused():
    assert compare_sequencers(None, "0") == 0 and compare_sequencers("", "1") == -1
    for bad in ("xyz", "12 34", "G1", "1" * 65):
        with pytest.raises(ValueError):
            sequencer_order(bad)


def test_states_move_forward_only():
    assert may_move(AssetState.PENDING, AssetState.PROCESSING)
    assert may_move(AssetState.PROCESSING, AssetState.READY)
    assert not may_move(AssetState.READY, AssetState.PROCESSING)
    assert not may_move(AssetState.READY, AssetState.FAILED)
    assert not may_move(AssetState.FAILED, AssetState.READY)
    assert may_move(AssetState.READY, AssetState.READY)
    assert not may_move(AssetState.DELETED, AssetState.PENDING)


def _jobs(*states: AssetJobState) -> tuple[AssetJob, ...]:
    return tuple(AssetJob(f"r{i}@1", f"{i:064x}", s) for i, s in enumerate(states))


def test_an_asset_is_ready_when_every_job_is_done_and_failed_when_one_failed():
    D, P, F, W = AssetJobState.DONE, AssetJobState.PENDING, AssetJobState.FAILED, AssetJobState.PROCESSING
    assert summarize(_jobs(D, D))[0] == AssetState.READY
    assert summarize(_jobs(D, P))[0] == AssetState.PROCESSING
    assert summarize(_jobs(P, P))[0] == AssetState.PENDING
    assert summarize(_jobs(W, P))[0] == AssetState.PROCESSING
    assert summarize(())[0] == AssetState.PENDING
    failed = (AssetJob("a@1", "0" * 64, D), AssetJob("b@1", "1" * 64, F, reason="corrupt_input"))
    assert summarize(failed) == (AssetState.FAILED, "corrupt_input", "")


def test_a_late_update_never_moves_a_job_back():
    done = _jobs(AssetJobState.DONE)
    late = [AssetJob("r0@1", f"{0:064x}", AssetJobState.PROCESSING)]
    assert merge_jobs(done, late) == done
    stranger = [AssetJob("x@1", "f" * 64, AssetJobState.DONE)]
    assert merge_jobs(_jobs(AssetJobState.PENDING), stranger) == _jobs(AssetJobState.PENDING)


def _view(version_id: str | None, sequencer: str, state: AssetState = AssetState.READY) -> AssetView:
    return AssetView("b", "originals/a.jpg", state, AssetVersion(version_id, "e", 1, sequencer_order(sequencer)))


@pytest.mark.parametrize(
    ("view", "version_id", "deletion_type", "sequencer", "effect"),
    [
        (_view("v1", "10"), "m1", "Delete Marker Created", "11", DeletionEffect.DELETED),
        (_view("v1", "10"), "m1", "Delete Marker Created", "0F", DeletionEffect.SUPERSEDED),
        # A version the asset does not hold: noncurrent, or the one S3 served until now
        # (its create not delivered yet): only S3 can tell, so the key is looked at again.
        (_view("v2", "20"), "v1", "Permanently Deleted", "21", DeletionEffect.LOOK_AGAIN),
        (_view("v2", "20"), "v2", "Permanently Deleted", "21", DeletionEffect.LOOK_AGAIN),
        (_view("m1", "30", AssetState.DELETED), "m1", "Permanently Deleted", "31", DeletionEffect.LOOK_AGAIN),
        (_view(None, "10"), None, "Permanently Deleted", "11", DeletionEffect.DELETED),
        (None, "m1", "Delete Marker Created", "11", DeletionEffect.DELETED),
        (None, "v1", "Permanently Deleted", "11", DeletionEffect.LOOK_AGAIN),
        (_view("v1", "10"), "v1", None, "11", DeletionEffect.LOOK_AGAIN),
    ],
)
def test_deletes_as_s3_sends_them(view, version_id, deletion_type, sequencer, effect):
    got = deletion_effect(
        view, version_id=version_id, deletion_type=deletion_type, sequencer=sequencer_order(sequencer)
    )
    assert got == effect


def test_a_reference_id_fits_a_sort_key_whatever_the_key():
    assert len(reference_id("b" * 63, "originals/" + "é" * 507)) == 64


def test_the_status_document_names_each_recipe_with_its_outputs():
    view = _view("v1", "0062E99A88DC407460")
    doc = status_document(view)
    assert doc["state"] == "ready" and doc["version"]["sequencer"] == "62E99A88DC407460"
    assert doc["recipes"] == {}


def _with_next(state: AssetState, serving: AssetJobState, upcoming: tuple[AssetJobState, ...]) -> AssetView:
    """An asset in ``state`` serving one job in ``serving``, with a ``next`` set of jobs (other
    keys, the same recipes: a key algorithm's or a policy's backfill) in ``upcoming``."""
    jobs = (AssetJob("r0@1", "a" * 64, serving, reason="rejected" if serving == AssetJobState.FAILED else None),)
    upcoming_jobs = tuple(
        AssetJob(f"r{i}@1", f"{i + 11:064x}", s, reason="rejected" if s == AssetJobState.FAILED else None)
        for i, s in enumerate(upcoming)
    )
    view = _view("v1", "10", state)
    return AssetView(view.bucket, view.key, state, view.version, jobs=jobs, next=upcoming_jobs, next_grace_s=60)


def test_a_refused_asset_moves_to_its_new_sets_refusal_and_a_ready_one_never_to_a_failed_set():
    """A key algorithm's backfill gives every asset new keys. A ``rejected`` (or ``failed``)
    asset has no ready set to keep serving: once its new set has ended, failed or not, it
    is switched, its old jobs released (so no job of it stays at an old key); a ``ready``
    asset keeps serving its old set when the new one failed, and waits while it runs."""
    D, F, P = AssetJobState.DONE, AssetJobState.FAILED, AssetJobState.PENDING
    refused = promoted(_with_next(AssetState.REJECTED, F, (F, F)), now_s=100)
    assert [j.job_key for j in refused.view.jobs] == [f"{11:064x}", f"{12:064x}"] and not refused.view.next
    assert refused.view.state == AssetState.REJECTED and refused.drop == frozenset({"a" * 64})
    assert [c.job_key for c in refused.candidates] == ["a" * 64]
    fixed = promoted(_with_next(AssetState.FAILED, F, (D,)), now_s=100)
    assert fixed.view.state == AssetState.READY and not fixed.view.next
    waiting = promoted(_with_next(AssetState.REJECTED, F, (F, P)), now_s=100)
    assert waiting.view.next and waiting.drop == frozenset()
    kept = promoted(_with_next(AssetState.READY, D, (D, F)), now_s=100)
    assert kept.view.state == AssetState.READY and [j.job_key for j in kept.view.jobs] == ["a" * 64]
    assert kept.drop == frozenset()
