"""The order of a promo request (``service_layer/promo.py``) on fakes: what it reads, the
job it writes and requests, the album's record, what is stale after a policy or recipe
change, and what an album too large for one record keeps."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mediajobs.bootstrap import active_recipes
from mediajobs.domain.assets import AssetJob, AssetJobState, AssetState, AssetVersion, AssetView
from mediajobs.domain.jobs import ContentInput, JobSpec, JobState, JobView, OutputInput, OutputRecord
from mediajobs.domain.promo import MAX_LEFT_OUT, holder_key
from mediajobs.domain.recipes import ALBUM
from mediajobs.service_layer.promo import Promos, PromoState
from mediajobs.service_layer.requests import JobRequests
from mediajobs.settings import Settings
from tests.fakes import TEST_KEY_SECRET, FakeAssets, FakeClock, FakeLedger, FakePromoRecords, FakeQueue, FakeStore

BUCKET = "media"
PREFIX = "originals/party/"
SETTINGS = Settings(
    key_secret=TEST_KEY_SECRET, media_bucket=BUCKET, jobs_queue_arn="arn:aws:sqs:us-east-1:123456789012:jobs"
)


def key(n: int) -> str:
    return f"{n:064x}"


class World:
    """A stack of fakes with an album: ``ready`` photos (each its card job done, decided by
    its moderation job) and ``rejected`` ones."""

    def __init__(self, ready: int, rejected: int = 0, settings: Settings = SETTINGS) -> None:
        self.log: list = []
        self.store = FakeStore({}, self.log)
        self.assets = FakeAssets(self.log)
        self.ledger = FakeLedger(self.log)
        self.queue = FakeQueue()
        self.records = FakePromoRecords(self.assets)
        self.clock = FakeClock(1_000)
        self.settings = settings
        for i in range(ready):
            self.photo(f"{i:03d}.jpg", key(1 + i), key(1001 + i))
        for i in range(rejected):
            name = f"z{i:03d}.png"
            self.store.objects[PREFIX + name] = b"x"
            version = AssetVersion("v", "e", 1, "1")
            self.assets.assets[(BUCKET, PREFIX + name)] = AssetView(BUCKET, PREFIX + name, AssetState.REJECTED, version)

    def photo(self, name: str, card_job: str, gate: str, policy: str = "1") -> None:
        self.store.objects[PREFIX + name] = b"x"
        card = OutputRecord("card", f"derivatives/{card_job}/card.webp", "webp", 800, 533, 9, "0" * 64, "image/webp")
        jobs = (
            AssetJob("moderation-image@1", gate, AssetJobState.DONE),
            AssetJob("web-image@1", card_job, AssetJobState.DONE, outputs=(card,)),
        )
        version = AssetVersion("v", "e", 1, "1")
        self.assets.assets[(BUCKET, PREFIX + name)] = AssetView(
            BUCKET, PREFIX + name, AssetState.READY, version, media="image", jobs=jobs
        )
        inputs = {"original": ContentInput(key(0)), "moderation": OutputInput(gate, "decisions")}
        spec = JobSpec(
            card_job, key(0), "web-image", 1, key(0), policy, f"derivatives/{card_job}/", BUCKET, "k", inputs
        )
        for job_key, row_spec in ((card_job, spec), (gate, None)):
            self.ledger.rows[job_key] = JobView(job_key, JobState.DONE, None, 0, 1, spec=row_spec, outputs=(card,))

    def promos(self, settings: Settings | None = None, recipes=None) -> Promos:
        recipes = recipes or active_recipes()
        settings = settings or self.settings
        return Promos(
            settings,
            store=self.store,
            assets=self.assets,
            ledger=self.ledger,
            requests=JobRequests(settings, ledger=self.ledger, queue=self.queue, clock=self.clock),
            records=self.records,
            recipe=recipes[ALBUM][0],
            active=frozenset(r.ref for rs in recipes.values() for r in rs),
            clock=self.clock,
        )


def test_a_request_writes_the_promo_job_requested_sends_its_request_and_records_the_album():
    world = World(ready=2, rejected=1)
    answer = world.promos().request(PREFIX)
    assert answer.state == PromoState.REQUESTED
    row = world.ledger.get(answer.job_key)
    assert row.state == JobState.REQUESTED and row.spec.about == {
        "card-0000": PREFIX + "000.jpg",
        "card-0001": PREFIX + "001.jpg",
    }
    assert [json.loads(body)["job_key"] for _, body, _, _ in world.queue.resent] == [answer.job_key]
    record = world.records.get(BUCKET, PREFIX)
    assert [(f.rendition_job_key, f.decision_id) for f in record.frames] == [(key(1), key(1001)), (key(2), key(1002))]
    assert world.assets.refs[answer.job_key] == {(BUCKET, holder_key(PREFIX))}
    assert answer.to_json()["left_out"] == [
        {"asset_key": PREFIX + "z000.png", "state": "rejected", "why": "rejected by the moderation policy"}
    ]


def test_an_album_with_more_left_out_than_a_record_holds_keeps_the_first_and_counts_them_all():
    world = World(ready=1, rejected=MAX_LEFT_OUT + 30)
    answer = world.promos().request(PREFIX).to_json()
    assert len(answer["left_out"]) == MAX_LEFT_OUT and answer["left_out_total"] == MAX_LEFT_OUT + 30
    assert answer["left_out"][0]["asset_key"] == PREFIX + "z000.png"


def test_an_album_with_nothing_to_show_requests_nothing_and_a_bad_prefix_reads_nothing():
    world = World(ready=0, rejected=2)
    empty = world.promos().request(PREFIX)
    assert empty.state == PromoState.EMPTY and empty.job_key is None and world.queue.resent == []
    assert world.records.all() == [] and len(empty.to_json()["left_out"]) == 2
    before = len(world.log)
    assert world.promos().request("originals/../x/").state == PromoState.INVALID
    assert world.promos().status("elsewhere/").state == PromoState.INVALID
    assert len(world.log) == before  # nothing listed, nothing read
    assert world.promos().status("originals/never/").state == PromoState.UNKNOWN


def test_a_rendition_whose_decision_is_not_done_is_left_out():
    world = World(ready=2)
    gate = world.ledger.rows[key(1002)]
    world.ledger.rows[key(1002)] = dataclasses.replace(gate, state=JobState.COLLECTED)
    record = world.promos().request(PREFIX).record
    assert [f.asset_key for f in record.frames] == [PREFIX + "000.jpg"]
    assert [x.why for x in record.left_out] == ["its 'card' rendition is not done now"]


def test_a_request_of_a_collected_promo_requests_it_again():
    world = World(ready=1)
    first = world.promos().request(PREFIX)
    row = world.ledger.rows[first.job_key]
    world.ledger.rows[first.job_key] = dataclasses.replace(row, state=JobState.COLLECTED, lease_expires_at_s=0)
    world.queue.resent.clear()
    again = world.promos().request(PREFIX)
    assert again.job_key == first.job_key
    assert [json.loads(body)["job_key"] for _, body, _, _ in world.queue.resent] == [first.job_key]


@pytest.mark.parametrize(
    ("change", "stale"),
    [
        ({}, False),
        ({"policy_version": "2"}, True),  # a new policy
        ({"key_secret": "another-stack-secret-of-at-least-32-bytes"}, True),  # another key scheme
        ({"key_algorithm": 1}, True),  # the key algorithm rolled back
    ],
)
def test_an_album_is_stale_under_another_policy_and_regenerated_once(change, stale):
    world = World(ready=1)
    world.promos().request(PREFIX)
    deployed = dataclasses.replace(SETTINGS, **change)
    later = world.promos(deployed)
    assert bool(later.stale()) == stale
    answers = later.regenerate()
    assert len(answers) == int(stale)
    assert later.stale() == [] and later.regenerate() == []
    if stale:
        assert answers[0].record.policy_version == deployed.policy_version
        assert answers[0].record.keys == deployed.keys.id and world.records.get(BUCKET, PREFIX).revision == 2


def test_an_album_showing_a_rendition_no_longer_active_is_stale():
    world = World(ready=1)
    world.promos().request(PREFIX)
    recipes = active_recipes()
    without = {**recipes, "image": [r for r in recipes["image"] if r.id != "web-image"]}
    assert [r.prefix for r in world.promos(recipes=without).stale()] == [PREFIX]


def test_regeneration_skips_an_album_with_nothing_left_and_one_dynamodb_refuses_and_goes_on():
    from mediajobs.domain.errors import UNSTORABLE_INPUT, PermanentFailure

    world = World(ready=1)
    world.promos().request(PREFIX)
    other = "originals/other/"
    world.records.records[(BUCKET, other)] = dataclasses.replace(world.records.get(BUCKET, PREFIX), prefix=other)
    refusing = world.records.put

    def put(record, *, previous, now_s):
        if record.prefix == PREFIX:
            raise PermanentFailure(UNSTORABLE_INPUT, "item too large")
        return refusing(record, previous=previous, now_s=now_s)

    world.records.put = put  # type: ignore[method-assign]
    later = world.promos(dataclasses.replace(SETTINGS, policy_version="2"))
    answers = later.regenerate()  # PREFIX refused; other (nothing under it) retired
    assert [a.state for a in answers] == [PromoState.EMPTY]
    retired = world.records.get(BUCKET, other)
    assert (retired.job_key, retired.policy_version) == (None, "2")
    assert [r.prefix for r in later.stale()] == [PREFIX]  # refused: asked again at the next end


def test_an_album_with_nothing_left_to_show_retires_its_promo_and_releases_it():
    world = World(ready=2)
    made = world.promos().request(PREFIX)
    for name in ("000.jpg", "001.jpg"):  # both deleted
        view = world.assets.assets[(BUCKET, PREFIX + name)]
        world.assets.assets[(BUCKET, PREFIX + name)] = dataclasses.replace(view, state=AssetState.DELETED)
    empty = world.promos().request(PREFIX)
    assert (empty.state, empty.job_key) == (PromoState.EMPTY, None)
    assert world.promos().status(PREFIX).state == PromoState.EMPTY  # GET: not the old promo
    assert world.assets.refs[made.job_key] == set()  # released to the collection
    assert [job for job, _ in world.assets.candidate_rows] == [made.job_key]
    assert world.promos(dataclasses.replace(SETTINGS, policy_version="2")).regenerate()[0].state == PromoState.EMPTY
    assert world.promos(dataclasses.replace(SETTINGS, policy_version="2")).stale() == []


def test_a_promo_collected_before_its_reference_was_written_is_requested_again():
    world = World(ready=1)
    made = world.promos().request(PREFIX)
    world.ledger.rows[made.job_key] = dataclasses.replace(world.ledger.rows[made.job_key], state=JobState.DONE)
    world.records.records.clear()  # the album moved on and back: unreferenced, found done
    putting = world.records.put

    def collected_first(record, *, previous, now_s):  # the collection ran between the read and the write
        row = world.ledger.rows[record.job_key]
        world.ledger.rows[record.job_key] = dataclasses.replace(row, state=JobState.COLLECTED)
        return putting(record, previous=previous, now_s=now_s)

    world.records.put = collected_first  # type: ignore[method-assign]
    world.queue.resent.clear()
    again = world.promos().request(PREFIX)
    assert again.state == PromoState.REQUESTED and again.to_json()["manifest_key"] is None
    assert [json.loads(body)["job_key"] for _, body, _, _ in world.queue.resent] == [made.job_key]


def test_an_album_of_more_keys_than_are_read_says_it_was_cut():
    world = World(ready=1)
    for i in range(1000):
        world.store.objects[f"{PREFIX}zz/{i:04d}.jpg"] = b"x"  # never uploaded as assets: no record
    answer = world.promos().request(PREFIX).to_json()
    assert answer["truncated"] is True and len(answer["frames"]) == 1
    assert ("asset_get_many", 1000) in world.log
