"""The ``Assets`` port, case by case, against the reference (``tests/fakes.py``
``FakeAssets``) and the DynamoDB adapter (``DynamoAssets`` on the embedded AWS): the same
cases, the same right values."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Iterator

import pytest
from pynamodb.signals import pre_dynamodb_send

from mediajobs.adapters.assets import AssetModel, CandidateModel, DynamoAssets, ReferenceModel
from mediajobs.domain.assets import (
    FAILED_PREFIX,
    AssetJob,
    AssetJobState,
    AssetState,
    AssetVersion,
    Candidate,
    reference_id,
    sequencer_order,
)
from mediajobs.domain.errors import UNSTORABLE_INPUT, PermanentFailure
from mediajobs.domain.jobs import OutputRecord
from mediajobs.domain.notifications import Notification, NotificationType, notification_id
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from mediajobs.local.template import load_template
from tests.conftest import REPO
from tests.fakes import FakeAssets

BUCKET = "media"
IMAGE, PLACEHOLDER = "web-image@1", "placeholder@1"


def jk(c: str) -> str:
    """A job key of 64 hex digits starting (and so partitioned) by ``c``."""
    return c * 64


def version(seq: str, vid: str | None = None, etag: str | None = None, size: int = 100) -> AssetVersion:
    return AssetVersion(
        vid if vid is not None else f"v{seq}", etag if etag is not None else f"e{seq}", size, sequencer_order(seq)
    )


def jobs_of(*keys: str) -> list[AssetJob]:
    recipes = (IMAGE, PLACEHOLDER)
    return [AssetJob(recipes[i], key) for i, key in enumerate(keys)]


def out(key: str) -> OutputRecord:
    return OutputRecord("thumb", f"derivatives/{key}/thumb.webp", "webp", 320, 213, 1000, "0" * 64, "image/webp")


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-assets-port") as stack:
        yield stack


def fresh_table(stack: LocalStack) -> str:
    """A new assets table (keys ``pk`` and ``sk``, as the template's) on the embedded
    server: candidates are listed table-wide, so each test gets its own."""
    name = f"assets-{uuid.uuid4().hex[:12]}"
    stack.model(AssetModel, name).create_table(billing_mode="PAY_PER_REQUEST", wait=True)
    return name


@pytest.fixture(params=["fake", "dynamo"])
def assets(request, stack):
    if request.param == "fake":
        return FakeAssets()
    name = fresh_table(stack)
    clients = stack.clients()
    uow = clients.unit_of_work(stack.outbox_table_name, sleep=lambda s: None)
    dynamo = DynamoAssets(uow, clients.asset_models(name))
    dynamo.outbox_model = stack.outbox_model()  # type: ignore[attr-defined]  # what the tests read told from
    return dynamo


def key() -> str:
    return f"originals/{uuid.uuid4().hex}.jpg"


def told(assets, k: str) -> list[tuple[str, str, str]]:
    """The outbox's notifications of the key ``k``: (type, id, the payload's asset state)."""
    if isinstance(assets, FakeAssets):
        found = [(str(n.type), n.id, n.payload["asset"]["state"]) for n in assets.outbox.values() if n.key == k]
    else:
        model = assets.outbox_model
        found = [
            (item.type, item.id, json.loads(item.payload)["asset"]["state"])
            for item in model.scan(model.object_key == k, consistent_read=True)
        ]
    return sorted(found)


def refs(assets, *job_keys: str) -> list[int]:
    return [assets.references(k) for k in job_keys]


def test_a_new_asset_is_pending_with_its_jobs_referenced(assets):
    k = key()
    made = assets.make_current(
        BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a"), jk("b")), now_s=100
    )
    assert (made.state, made.sha256, made.media, made.updated_at_s) == (AssetState.PENDING, "s1", "image", 100)
    assert [(j.recipe, j.job_key, j.state) for j in made.jobs] == [
        (IMAGE, jk("a"), AssetJobState.PENDING),
        (PLACEHOLDER, jk("b"), AssetJobState.PENDING),
    ]
    assert assets.get(BUCKET, k) == made
    assert refs(assets, jk("a"), jk("b")) == [1, 1]
    assert (assets.referenced(jk("a")), assets.referenced(jk("c"))) == (True, False)
    assert assets.get(BUCKET, "originals/never.jpg") is None
    assert assets.candidates(released_before_s=10**9, limit=10) == []


def test_the_same_event_again_returns_the_stored_asset_unchanged(assets):
    k = key()
    first = assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    again = assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=200)
    assert again == first == assets.get(BUCKET, k)
    assert refs(assets, jk("a")) == [1]


def test_jobs_attach_to_the_version_later_with_their_references(assets):
    k = key()
    bare = assets.make_current(BUCKET, k, version("10"), sha256=None, media=None, jobs=None, now_s=100)
    assert (bare.state, bare.jobs, bare.sha256) == (AssetState.PENDING, (), None)
    assert refs(assets, jk("a")) == [0]
    attached = assets.make_current(
        BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=110
    )
    assert ([j.job_key for j in attached.jobs], attached.sha256, attached.media, attached.updated_at_s) == (
        [jk("a")],
        "s1",
        "image",
        110,
    )
    assert refs(assets, jk("a")) == [1]
    # Attached once: a later call with other jobs for the same event changes nothing.
    assert (
        assets.make_current(BUCKET, k, version("10"), sha256="s2", media="image", jobs=jobs_of(jk("c")), now_s=120)
        == attached
    )
    assert refs(assets, jk("a"), jk("c")) == [1, 0]


def test_an_overwrite_with_other_bytes_moves_the_references_and_releases_the_old_jobs(assets):
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a"), jk("b")), now_s=100)
    assets.record(BUCKET, k, sequencer_order("10"), [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)], now_s=105)
    # The placeholder's job is shared by both versions (same bytes for that recipe here).
    new = assets.make_current(
        BUCKET, k, version("2F"), sha256="s2", media="image", jobs=jobs_of(jk("c"), jk("b")), now_s=200
    )
    assert (new.state, new.version.sequencer, [j.job_key for j in new.jobs]) == (
        AssetState.PENDING,
        sequencer_order("2F"),
        [jk("c"), jk("b")],
    )
    assert all(j.state == AssetJobState.PENDING for j in new.jobs)
    assert refs(assets, jk("a"), jk("b"), jk("c")) == [0, 1, 1]
    assert assets.candidates(released_before_s=10**9, limit=10) == [Candidate(jk("a"), reference_id(BUCKET, k), 200)]


def test_an_overwrite_with_the_same_content_restarts_the_version_and_keeps_the_references(assets):
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    assets.record(BUCKET, k, sequencer_order("10"), [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)], now_s=105)
    new = assets.make_current(BUCKET, k, version("11"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=200)
    assert (new.state, new.version.version_id, new.jobs[0].state) == (AssetState.PENDING, "v11", AssetJobState.PENDING)
    assert refs(assets, jk("a")) == [1]
    assert assets.candidates(released_before_s=10**9, limit=10) == []


def test_a_later_event_naming_the_current_version_moves_only_the_sequencer(assets):
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    ready = assets.record(BUCKET, k, sequencer_order("10"), [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)], now_s=105)
    same = version("12", vid="v10", etag="e10")
    moved = assets.make_current(BUCKET, k, same, sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=200)
    assert (moved.state, moved.version, moved.jobs, moved.updated_at_s) == (AssetState.READY, same, ready.jobs, 200)
    assert refs(assets, jk("a")) == [1]


def test_a_late_event_with_a_lower_sequencer_is_superseded_and_writes_nothing(assets):
    k = key()
    # Real-looking sequencers of different lengths: the longer is greater as a number.
    newer = assets.make_current(
        BUCKET, k, version("0066C8A1F2B3D4E5F6"), sha256="s2", media="image", jobs=jobs_of(jk("c")), now_s=100
    )
    late = version("66C8A1F2B3D4E5F5")
    assert assets.make_current(BUCKET, k, late, sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=200) is None
    assert assets.get(BUCKET, k) == newer
    assert refs(assets, jk("a"), jk("c")) == [0, 1]
    assert assets.candidates(released_before_s=10**9, limit=10) == []


def test_a_delete_drops_every_reference_and_releases_the_jobs(assets):
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a"), jk("b")), now_s=100)
    marker = version("20", vid="dm1", etag="", size=0)
    gone = assets.delete(BUCKET, k, marker, now_s=300)
    assert (gone.state, gone.version, gone.jobs, gone.job_keys) == (AssetState.DELETED, marker, (), frozenset())
    assert assets.get(BUCKET, k) == gone
    assert refs(assets, jk("a"), jk("b")) == [0, 0]
    by = reference_id(BUCKET, k)
    assert assets.candidates(released_before_s=10**9, limit=10) == [
        Candidate(jk("a"), by, 300),
        Candidate(jk("b"), by, 300),
    ]
    # The same delete again, and an older one, are superseded.
    assert assets.delete(BUCKET, k, marker, now_s=301) is None
    assert assets.delete(BUCKET, k, version("15"), now_s=302) is None
    # A late create of an older version too; a newer one makes the asset live again.
    assert (
        assets.make_current(BUCKET, k, version("18"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=303)
        is None
    )
    back = assets.make_current(BUCKET, k, version("21"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=304)
    assert (back.state, refs(assets, jk("a"))) == (AssetState.PENDING, [1])


def test_a_delete_of_an_unknown_asset_leaves_a_tombstone_that_supersedes_a_late_create(assets):
    k = key()
    tomb = assets.delete(BUCKET, k, version("20", vid=None, etag="", size=None), now_s=100)
    assert (tomb.state, tomb.version.sequencer) == (AssetState.DELETED, sequencer_order("20"))
    assert assets.get(BUCKET, k) == tomb
    assert (
        assets.make_current(BUCKET, k, version("1F"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=101)
        is None
    )
    assert refs(assets, jk("a")) == [0]
    assert assets.candidates(released_before_s=10**9, limit=10) == []
    # Record on a deleted asset writes nothing.
    assert assets.record(BUCKET, k, sequencer_order("20"), [], now_s=102) is None


def test_record_moves_forward_only(assets):
    k = key()
    seq = sequencer_order("10")
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a"), jk("b")), now_s=100)
    running = assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING)], now_s=101)
    assert (running.state, running.jobs[0].state, running.jobs[1].state) == (
        AssetState.PROCESSING,
        AssetJobState.PROCESSING,
        AssetJobState.PENDING,
    )
    done = [
        AssetJob(
            IMAGE,
            jk("a"),
            AssetJobState.DONE,
            manifest_key=f"derivatives/{jk('a')}/manifest.json",
            outputs=(out(jk("a")),),
        )
    ]
    half = assets.record(BUCKET, k, seq, done, now_s=102)
    assert half.state == AssetState.PROCESSING
    ready = assets.record(
        BUCKET,
        k,
        seq,
        [AssetJob(PLACEHOLDER, jk("b"), AssetJobState.DONE)],
        now_s=103,
        placeholder={"placeholder": "thumbhash", "hash": "abc"},
    )
    assert (ready.state, ready.jobs[0].outputs, ready.jobs[0].manifest_key, ready.placeholder) == (
        AssetState.READY,
        (out(jk("a")),),
        f"derivatives/{jk('a')}/manifest.json",
        {"placeholder": "thumbhash", "hash": "abc"},
    )
    # A late "processing" (a duplicate delivery) never turns ready back; a job key of no
    # job of this version is ignored.
    late = assets.record(
        BUCKET,
        k,
        seq,
        [
            AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING),
            AssetJob(IMAGE, jk("f"), AssetJobState.FAILED, reason="x"),
        ],
        now_s=104,
    )
    assert (late.state, late.jobs, late.placeholder) == (AssetState.READY, ready.jobs, ready.placeholder)
    assert assets.get(BUCKET, k) == late


def test_record_of_a_version_no_longer_current_returns_none(assets):
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    current = assets.make_current(
        BUCKET, k, version("11"), sha256="s2", media="image", jobs=jobs_of(jk("c")), now_s=101
    )
    assert (
        assets.record(BUCKET, k, sequencer_order("10"), [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)], now_s=102)
        is None
    )
    assert assets.record(BUCKET, "originals/unknown.jpg", sequencer_order("10"), [], now_s=102) is None
    assert assets.get(BUCKET, k) == current


def test_a_failure_of_the_version_itself_fails_the_asset(assets):
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256=None, media=None, jobs=None, now_s=100)
    failed = assets.record(BUCKET, k, sequencer_order("10"), [], now_s=101, failure=("empty_file", "0 bytes"))
    assert (failed.state, failed.reason, failed.detail) == (AssetState.FAILED, "empty_file", "0 bytes")
    assert assets.candidates(released_before_s=10**9, limit=10) == []


def test_jobs_failed_without_a_manifest_get_a_failed_candidate_once(assets):
    k = key()
    seq = sequencer_order("10")
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a"), jk("b")), now_s=100)
    failed = assets.record(
        BUCKET,
        k,
        seq,
        [AssetJob(IMAGE, jk("a"), AssetJobState.FAILED, reason="attempts_exhausted", detail="3 claims")],
        now_s=101,
    )
    assert (failed.state, failed.reason, failed.detail) == (AssetState.FAILED, "attempts_exhausted", "3 claims")
    # Recorded again later: the first time stays.
    assets.record(
        BUCKET, k, seq, [AssetJob(PLACEHOLDER, jk("b"), AssetJobState.FAILED, reason="output_conflict")], now_s=150
    )
    assert assets.candidates(released_before_s=10**9, limit=10) == [
        Candidate(jk("a"), FAILED_PREFIX, 101),
        Candidate(jk("b"), FAILED_PREFIX, 150),
    ]
    # A failure that leaves nothing behind (a refused input) gets none.
    other = key()
    assets.make_current(BUCKET, other, version("10"), sha256="s3", media="image", jobs=jobs_of(jk("c")), now_s=100)
    assets.record(
        BUCKET, other, seq, [AssetJob(IMAGE, jk("c"), AssetJobState.FAILED, reason="truncated_image")], now_s=160
    )
    assert [c.job_key for c in assets.candidates(released_before_s=10**9, limit=10)] == [jk("a"), jk("b")]


def test_progress_is_set_on_a_processing_job_of_the_current_version_only(assets):
    k = key()
    seq = sequencer_order("10")
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="video", jobs=jobs_of(jk("a"), jk("b")), now_s=100)
    assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING)], now_s=101)
    assets.progress(BUCKET, k, seq, jk("a"), 0.25, now_s=102)
    assets.progress(BUCKET, k, seq, jk("b"), 0.5, now_s=103)  # pending: not shown
    assets.progress(BUCKET, k, sequencer_order("9"), jk("a"), 0.9, now_s=104)  # not current: ignored
    assets.progress(BUCKET, "originals/unknown.mp4", seq, jk("a"), 0.9, now_s=104)  # never raises
    view = assets.get(BUCKET, k)
    assert [(j.state, j.progress) for j in view.jobs] == [
        (AssetJobState.PROCESSING, 0.25),
        (AssetJobState.PENDING, None),
    ]
    assert view.updated_at_s == 103
    # A later "processing" without progress keeps it; one with progress sets it; done ends it.
    kept = assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING)], now_s=105)
    assert kept.jobs[0].progress == 0.25
    moved = assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING, progress=0.5)], now_s=106)
    assert moved.jobs[0].progress == 0.5 == assets.get(BUCKET, k).jobs[0].progress
    assets.progress(BUCKET, k, seq, jk("a"), 0.75, now_s=107)
    assert assets.get(BUCKET, k).jobs[0].progress == 0.75
    assets.progress(BUCKET, k, seq, jk("a"), 0.6, now_s=107)  # a writer racing behind: never back
    assert assets.get(BUCKET, k).jobs[0].progress == 0.75
    done = assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)], now_s=108)
    assets.progress(BUCKET, k, seq, jk("a"), 0.9, now_s=109)
    assert assets.get(BUCKET, k).jobs[0] == done.jobs[0]
    assert done.jobs[0].progress is None


def test_references_count_every_asset_using_a_job(assets):
    keys = [key() for _ in range(3)]
    for i, k in enumerate(keys):
        assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("d")), now_s=100 + i)
    assert refs(assets, jk("d")) == [3]
    assets.delete(BUCKET, keys[0], version("11"), now_s=200)
    assert (refs(assets, jk("d")), assets.referenced(jk("d"))) == ([2], True)
    assets.make_current(BUCKET, keys[1], version("12"), sha256="s2", media="image", jobs=jobs_of(jk("e")), now_s=201)
    assets.delete(BUCKET, keys[2], version("12"), now_s=202)
    assert (refs(assets, jk("d"), jk("e")), assets.referenced(jk("d"))) == ([0, 1], False)


def test_candidates_are_bounded_filtered_by_time_and_dropped_only_when_unchanged(assets):
    k = key()
    digits = "0123456789abcdef"
    for i, d in enumerate(digits):
        s = f"{i + 1:X}"
        assets.make_current(BUCKET, k, version(s), sha256=d, media="image", jobs=jobs_of(jk(d)), now_s=100 + i)
    # Versions 1..16 made current in turn: the jobs of 0..e were released at 101..115.
    by = reference_id(BUCKET, k)
    every = assets.candidates(released_before_s=10**9, limit=100)
    assert every == [Candidate(jk(d), by, 101 + i) for i, d in enumerate(digits[:15])]
    assert assets.candidates(released_before_s=10**9, limit=4) == every[:4]
    assert assets.candidates(released_before_s=105, limit=100) == every[:4]
    assert assets.candidates(released_before_s=101, limit=100) == []
    # Released again (the same content made current once more, then replaced): the stale
    # candidate is not dropped, the current one is.
    stale = every[0]
    assets.make_current(BUCKET, k, version("20"), sha256="0", media="image", jobs=jobs_of(jk("0")), now_s=300)
    assets.make_current(BUCKET, k, version("21"), sha256="1", media="image", jobs=jobs_of(jk("1")), now_s=301)
    fresh = Candidate(jk("0"), by, 301)
    assets.drop_candidate(stale)
    assert assets.candidates(released_before_s=10**9, limit=1) == [fresh]
    assets.drop_candidate(fresh)
    assert jk("0") not in {c.job_key for c in assets.candidates(released_before_s=10**9, limit=100)}


def test_an_asset_item_over_dynamodbs_limit_is_unstorable_input(stack):
    assets = stack.assets(writer=True, sleep=lambda _: None)
    k = key()
    seq = sequencer_order("10")
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    many = tuple(
        OutputRecord(f"o{i}", f"derivatives/{'x' * 900}/{i}", "webp", 1, 1, 1, "0" * 64, "image/webp")
        for i in range(500)
    )
    for reason in (None, "attempts_exhausted"):  # a put, and a transaction with a candidate
        state = AssetJobState.FAILED if reason else AssetJobState.DONE
        with pytest.raises(PermanentFailure) as info:
            assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), state, reason=reason, outputs=many)], now_s=101)
        assert info.value.reason == UNSTORABLE_INPUT
    assert assets.get(BUCKET, k).state == AssetState.PENDING


def test_the_three_models_have_the_assets_tables_keys(stack):
    """The template's AssetsTable, the table the embedded AWS made, and each model agree:
    ``pk`` (hash) and ``sk`` (range), strings."""
    props = load_template(REPO / "template.yaml")["Resources"]["AssetsTable"]["Properties"]
    schema = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
    assert props["KeySchema"] == schema
    assert sorted(d["AttributeName"] for d in props["AttributeDefinitions"] if d["AttributeType"] == "S") == [
        "pk",
        "sk",
    ]
    for model in (AssetModel, ReferenceModel, CandidateModel):
        keys = [
            {"AttributeName": a.attr_name, "KeyType": "HASH" if a.is_hash_key else "RANGE"}
            for a in model.get_attributes().values()
            if a.is_hash_key or a.is_range_key
        ]
        assert sorted(keys, key=lambda k: k["KeyType"]) == schema, model
    table = stack.client("dynamodb").describe_table(TableName=stack.assets_table_name)["Table"]
    assert table["KeySchema"] == schema


# --------------------------------------------------------------------------- the outbox


def test_an_asset_that_ends_ready_puts_one_notification_in_its_transaction(assets):
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    seq = sequencer_order("10")
    assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING)], now_s=101)
    assert told(assets, k) == []
    done = [AssetJob(IMAGE, jk("a"), AssetJobState.DONE, manifest_key=f"derivatives/{jk('a')}/manifest.json")]
    assets.record(BUCKET, k, seq, done, now_s=102)
    assets.record(BUCKET, k, seq, done, now_s=103)  # a duplicate's record: nothing more
    expected = notification_id(BUCKET, k, version("10"), NotificationType.READY, [IMAGE])
    assert told(assets, k) == [("Asset Ready", expected, "ready")]


def test_a_failed_version_and_a_deleted_asset_are_told_once_each(assets):
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    assets.record(BUCKET, k, sequencer_order("10"), [], now_s=101, failure=("corrupt_input", "no image"))
    assets.delete(BUCKET, k, version("20"), now_s=102)
    assets.delete(BUCKET, k, version("20"), now_s=103)
    assert [(t, state) for t, _, state in told(assets, k)] == [("Asset Deleted", "deleted"), ("Asset Failed", "failed")]
    assert told(assets, f"originals/{uuid.uuid4().hex}.jpg") == []
    unknown = key()
    assets.delete(BUCKET, unknown, version("20"), now_s=104)  # a tombstone: nothing was ever told
    assert told(assets, unknown) == []


def test_a_notification_already_in_the_outbox_does_not_block_the_assets_write(assets):
    """The transition's id is there already (the conditional put fails): the asset is
    written all the same, and the outbox keeps the one item."""
    k = key()
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    nid = notification_id(BUCKET, k, version("10"), NotificationType.READY, [IMAGE])
    if isinstance(assets, FakeAssets):
        assets.outbox[nid] = Notification(nid, NotificationType.READY, BUCKET, k, {"asset": {"state": "x"}})
    else:
        item = {"type": "Asset Ready", "bucket": BUCKET, "object_key": k, "created_at_s": 1}
        assets.outbox_model(nid, payload='{"asset":{"state":"x"}}', **item).save()
    ready = assets.record(BUCKET, k, sequencer_order("10"), [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)], now_s=102)
    assert ready is not None and ready.state == AssetState.READY
    assert assets.get(BUCKET, k).state == AssetState.READY
    assert told(assets, k) == [("Asset Ready", nid, "x")]  # the item there is kept, not replaced


def test_a_ready_version_named_again_by_a_later_event_is_not_told_again(assets):
    """A noncurrent version deleted for good (the key looked at again) or identical bytes
    re-put on an unversioned bucket: the same version is made current with a greater
    sequencer, and only the sequencer moves -- the asset stays ``ready``, nothing changed
    for the app, so no second notification (issue 15: one notification id per asset
    version)."""
    k = key()
    v10 = version("10")
    assets.make_current(BUCKET, k, v10, sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    done = [AssetJob(IMAGE, jk("a"), AssetJobState.DONE, manifest_key=f"derivatives/{jk('a')}/manifest.json")]
    assets.record(BUCKET, k, sequencer_order("10"), done, now_s=101)
    again = AssetVersion(v10.version_id, v10.etag, v10.size_bytes, sequencer_order("30"))
    still = assets.make_current(BUCKET, k, again, sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=102)
    assert still is not None and still.state == AssetState.READY
    found = told(assets, k)
    assert [t for t, _, _ in found] == ["Asset Ready"], f"one version's ready told under {len(found)} ids: {found}"


@contextlib.contextmanager
def reads_of(table: str) -> Iterator[list[str]]:
    """The ``GetItem`` requests PynamoDB sends to ``table`` while the block runs."""
    seen: list[str] = []

    def count(sender: object, operation_name: str, table_name: str | None, req_uuid: str) -> None:
        if operation_name == "GetItem" and table_name == table:
            seen.append(operation_name)

    pre_dynamodb_send.connect(count)
    try:
        yield seen
    finally:
        pre_dynamodb_send.disconnect(count)


def dynamo_assets(stack: LocalStack, table: str) -> DynamoAssets:
    clients = stack.clients()
    return DynamoAssets(
        clients.unit_of_work(stack.outbox_table_name, sleep=lambda s: None), clients.asset_models(table)
    )


def test_a_change_starts_from_the_asset_as_last_read_or_written_without_reading_it_again(stack):
    table = fresh_table(stack)
    assets, k, seq = dynamo_assets(stack, table), key(), sequencer_order("10")
    with reads_of(table) as reads:
        assert assets.get(BUCKET, k) is None
        assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
        assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING)], now_s=101)
        ready = assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)], now_s=102)
    assert len(reads) == 1  # the first get: every write after it started from what it wrote
    assert ready.state == AssetState.READY and dynamo_assets(stack, table).get(BUCKET, k) == ready


def test_a_remembered_asset_another_writer_changed_loses_a_round_then_decides_on_the_stored_one(stack):
    table = fresh_table(stack)
    mine, theirs, k = dynamo_assets(stack, table), dynamo_assets(stack, table), key()
    mine.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    newer = theirs.make_current(BUCKET, k, version("20"), sha256="s2", media="image", jobs=jobs_of(jk("b")), now_s=101)
    with reads_of(table) as reads:
        # What ``mine`` remembers is stale: its first round loses, the next reads version 20.
        done = [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)]
        assert mine.record(BUCKET, k, sequencer_order("10"), done, now_s=102) is None
    assert len(reads) == 1
    assert mine.get(BUCKET, k) == newer
    assert refs(mine, jk("a"), jk("b")) == [0, 1]


def test_a_progress_write_makes_the_next_change_read_the_asset_again(stack):
    table = fresh_table(stack)
    assets, k, seq = dynamo_assets(stack, table), key(), sequencer_order("10")
    assets.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING)], now_s=101)
    assets.progress(BUCKET, k, seq, jk("a"), 0.5, now_s=102)
    with reads_of(table) as reads:
        kept = assets.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING)], now_s=103)
    assert len(reads) == 1  # the progress write changed the item: what was remembered is stale
    assert kept.jobs[0].progress == 0.5


def test_a_remembered_asset_is_not_enough_to_decide_to_write_nothing(stack):
    """What was remembered is checked against the stored revision only by a write: a
    decision taken on it to write nothing (superseded, unchanged) is taken again on the
    stored asset. Found by trying to break the remembered asset: ``record`` of the version
    current now returned ``None``, and ``make_current`` answered for an asset deleted since."""
    table = fresh_table(stack)
    mine, theirs, k = dynamo_assets(stack, table), dynamo_assets(stack, table), key()
    mine.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    theirs.make_current(BUCKET, k, version("20"), sha256="s2", media="image", jobs=jobs_of(jk("b")), now_s=101)
    done = [AssetJob(IMAGE, jk("b"), AssetJobState.DONE)]
    recorded = mine.record(BUCKET, k, sequencer_order("20"), done, now_s=102)
    assert recorded is not None and recorded.state == AssetState.READY

    other = key()
    mine.make_current(BUCKET, other, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    theirs.delete(BUCKET, other, version("20"), now_s=101)
    again = mine.make_current(
        BUCKET, other, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=102
    )
    assert again is None  # superseded by the delete
    assert dynamo_assets(stack, table).get(BUCKET, other).state == AssetState.DELETED


def test_a_read_answered_before_a_later_write_does_not_replace_what_that_write_remembered(stack):
    """Two threads sharing one adapter: a read whose answer is remembered after the other
    thread's later write must not make the next change start from the older item."""
    table = fresh_table(stack)
    shared, k = dynamo_assets(stack, table), key()
    shared.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a")), now_s=100)
    real_get = shared._uow.get
    answered, written = threading.Event(), threading.Event()

    def slow_get(*args, **kwargs):
        item = real_get(*args, **kwargs)
        if threading.current_thread().name == "late-read":
            answered.set()
            written.wait(5)  # the answer is in hand; remembering it comes after the write
        return item

    shared._uow.get = slow_get
    reader = threading.Thread(target=lambda: shared.get(BUCKET, k), name="late-read")
    reader.start()
    assert answered.wait(5)
    shared.make_current(BUCKET, k, version("20"), sha256="s2", media="image", jobs=jobs_of(jk("b")), now_s=101)
    written.set()
    reader.join()
    shared._uow.get = real_get
    with reads_of(table) as reads:
        done = [AssetJob(IMAGE, jk("b"), AssetJobState.DONE)]
        recorded = shared.record(BUCKET, k, sequencer_order("20"), done, now_s=102)
    assert recorded is not None and recorded.state == AssetState.READY
    assert len(reads) == 0  # it started from its own write, the newer item


def test_a_progress_write_by_another_worker_is_not_put_back_by_a_remembered_asset(stack):
    table = fresh_table(stack)
    mine, theirs, k, seq = dynamo_assets(stack, table), dynamo_assets(stack, table), key(), sequencer_order("10")
    jobs = [
        AssetJob(IMAGE, jk("a"), AssetJobState.PROCESSING),
        AssetJob(PLACEHOLDER, jk("b"), AssetJobState.PROCESSING),
    ]
    mine.make_current(BUCKET, k, version("10"), sha256="s1", media="image", jobs=jobs_of(jk("a"), jk("b")), now_s=100)
    mine.record(BUCKET, k, seq, jobs, now_s=101)
    theirs.progress(BUCKET, k, seq, jk("b"), 0.5, now_s=102)  # another worker, rendering job b
    recorded = mine.record(BUCKET, k, seq, [AssetJob(IMAGE, jk("a"), AssetJobState.DONE)], now_s=103)
    assert [(j.job_key, j.state, j.progress) for j in recorded.jobs][1] == (jk("b"), AssetJobState.PROCESSING, 0.5)
