"""Races on the DynamoDB assets adapter: ten workers (threads, each its own
``DynamoAssets`` and connection) apply one key's overwrites and deletes, delivered in
shuffled orders, against the embedded AWS; at the end the current version is the one of the
greatest sequencer and every job's references are exactly the assets whose current
version uses it. And many keys sharing one content (hot content) racing."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from mediajobs.adapters.assets import DynamoAssets
from mediajobs.domain.assets import AssetJob, AssetState, AssetVersion, sequencer_order
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from tests.conftest import REPO
from tests.functional.together import run_together

BUCKET = "media"
WORKERS = 10
ROUNDS = 24
#: A real-looking S3 sequencer (16 hex digits today); events of one key count up from it.
BASE_SEQUENCER = 0x66C8A1F2B3D4E5F6


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-assets-races") as stack:
        yield stack


def worker(stack: LocalStack) -> DynamoAssets:
    """A worker's adapter: its own models, connection and backoff."""
    return stack.assets(writer=True)


@pytest.fixture(scope="module")
def workers(stack) -> list[DynamoAssets]:
    """Ten workers, their connections made once (a botocore client each) for every round."""
    made = [worker(stack) for _ in range(WORKERS)]
    for assets in made:
        assets.get(BUCKET, "originals/warm-up.jpg")
        assets.referenced("0" * 64)
    return made


def raw_sequencer(n: int, rng: random.Random) -> str:
    """The ``n``-th event's sequencer as S3 might spell it: leading zeros of any count (16
    to 20 digits), so string order and numeric order differ."""
    digits = f"{BASE_SEQUENCER + n:X}"
    return digits.rjust(len(digits) + rng.randrange(5), "0")


def content_jobs(content: str) -> list[AssetJob]:
    """The jobs of one content: an image job and a placeholder job, keys derived from it."""
    return [AssetJob("web-image@1", content.ljust(64, "0")), AssetJob("placeholder@1", content.ljust(64, "1"))]


@dataclass(frozen=True)
class Event:
    n: int  # order of the event at S3 (its sequencer counts up with it)
    sequencer: str  # as sent
    content: str | None  # None: a delete
    attach_later: bool = False  # the content becomes known after a first call

    def apply(self, assets: DynamoAssets, key: str):
        seq = sequencer_order(self.sequencer)
        if self.content is None:
            return assets.delete(BUCKET, key, AssetVersion(f"dm{self.n}", "", None, seq), now_s=1000 + self.n)
        version = AssetVersion(f"v{self.n}", f"e{self.n}", 100 + self.n, seq)
        bare = self.attach_later and assets.make_current(
            BUCKET, key, version, sha256=None, media=None, jobs=None, now_s=1000
        )
        if bare is None:
            return None
        return assets.make_current(
            BUCKET, key, version, sha256=self.content, media="image", jobs=content_jobs(self.content), now_s=1000
        )


def events_of(rng: random.Random, count: int) -> list[Event]:
    """``count`` events of one key: overwrites with distinct contents, about one in three a
    delete, some attaching their jobs in a second call."""
    events = []
    for n in range(count):
        content = None if rng.random() < 1 / 3 else uuid.uuid4().hex[:16]
        events.append(Event(n, raw_sequencer(n, rng), content, attach_later=content is not None and rng.random() < 0.3))
    return events


@pytest.mark.parametrize("seed", range(ROUNDS))
def test_ten_workers_on_one_keys_overwrites_and_deletes_leave_the_last_and_exact_references(stack, workers, seed):
    rng = random.Random(seed)
    key = f"originals/race/{seed}-{uuid.uuid4().hex}.jpg"
    events = events_of(rng, WORKERS)
    order = list(range(WORKERS))
    rng.shuffle(order)
    # In some rounds another key already uses one of the contents (identical bytes).
    sharer = None
    contents = [e.content for e in events if e.content is not None]
    if contents and seed % 2:
        sharer = (f"originals/race/{seed}-other.jpg", rng.choice(contents))
        workers[0].make_current(
            BUCKET,
            sharer[0],
            AssetVersion("o1", "o", 1, sequencer_order("1")),
            sha256=sharer[1],
            media="image",
            jobs=content_jobs(sharer[1]),
            now_s=900,
        )
    adapters = workers

    results = run_together(lambda n: events[order[n]].apply(adapters[n], key), threads=WORKERS)

    last = events[-1]
    asset = adapters[0].get(BUCKET, key)
    assert asset is not None
    assert asset.version.sequencer == sequencer_order(last.sequencer)
    assert asset.state == (AssetState.DELETED if last.content is None else AssetState.PENDING)
    # The last event's delivery got the asset it wrote (or found current); every earlier
    # one that did not win wrote nothing the end shows.
    assert results[order.index(last.n)] == asset
    for event in events:
        if event.content is None:
            continue
        expected = int(event is last) + int(sharer is not None and sharer[1] == event.content)
        for job in content_jobs(event.content):
            assert adapters[0].references(job.job_key) == expected, (event, job)
    # Every job released by the key has a candidate of it (nothing referenced is lost
    # without one): the jobs of every content made current and then replaced.
    candidates = {c.job_key for c in adapters[0].candidates(released_before_s=10**9, limit=10_000)}
    for event, result in zip([events[i] for i in order], results, strict=True):
        if event.content is not None and result is not None and result.jobs and event is not last:
            assert {j.job_key for j in content_jobs(event.content)} <= candidates, event


def test_hot_content_many_keys_racing_count_exactly_the_live_assets(workers):
    """Twenty keys upload the same bytes at once (ten workers, two each), then half of them
    are deleted and a quarter overwritten with other bytes, racing too."""
    rng = random.Random(7)
    meme = uuid.uuid4().hex[:16]
    keys = [f"originals/hot/{uuid.uuid4().hex}.jpg" for _ in range(20)]
    adapters = workers
    image_job, placeholder_job = (j.job_key for j in content_jobs(meme))

    def upload(n: int) -> None:
        for key in keys[n::WORKERS]:
            version = AssetVersion(f"v-{key}", "e", 10, sequencer_order("10"))
            adapters[n].make_current(BUCKET, key, version, sha256=meme, media="image", jobs=content_jobs(meme), now_s=1)

    run_together(upload, threads=WORKERS)
    assert adapters[0].references(image_job) == adapters[0].references(placeholder_job) == 20

    shuffled = keys[:]
    rng.shuffle(shuffled)
    deleted, overwritten = set(shuffled[:10]), set(shuffled[10:15])
    other = uuid.uuid4().hex[:16]

    def change(n: int) -> None:
        for key in shuffled[n::WORKERS]:
            if key in deleted:
                adapters[n].delete(BUCKET, key, AssetVersion("dm", "", None, sequencer_order("20")), now_s=2)
            elif key in overwritten:
                version = AssetVersion("v2", "e2", 11, sequencer_order("20"))
                adapters[n].make_current(
                    BUCKET, key, version, sha256=other, media="image", jobs=content_jobs(other), now_s=2
                )

    run_together(change, threads=WORKERS)
    assert adapters[0].references(image_job) == adapters[0].references(placeholder_job) == 5
    assert adapters[0].references(content_jobs(other)[0].job_key) == 5
    assert adapters[0].referenced(image_job)
    states = [adapters[0].get(BUCKET, key).state for key in keys]
    assert states.count(AssetState.DELETED) == 10
