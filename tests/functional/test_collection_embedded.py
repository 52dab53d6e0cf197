"""The collector with the real adapters on the embedded AWS: a job nothing references
loses its manifest first, then the rest of its prefix, and nothing outside
``derivatives/<job key>/`` is touched; its row is ``collected`` and a new reference
renders it again; a set two originals share stays until the second is deleted;
``mediajobs collect`` runs one collection against the served AWS."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Any

import pytest

from mediajobs.adapters.assets import DynamoAssets
from mediajobs.adapters.ledger import DynamoLedger
from mediajobs.adapters.s3 import S3Store
from mediajobs.domain.assets import AssetJob, AssetVersion, sequencer_order
from mediajobs.domain.jobs import ClaimOutcome, JobSpec, JobState
from mediajobs.local.cli import main
from mediajobs.service_layer.collection import Collector
from mediajobs.settings import Settings
from tests.fakes import FakeAssets, FakeClock
from tests.functional.test_cli import CLI

NOW_S = 2_000_000_000
GRACE_S = 600


@pytest.fixture()
def world(local_session):
    stack = local_session.stack
    s3 = stack.client("s3")
    calls: list[tuple[str, dict[str, Any]]] = []
    s3.meta.events.register(
        "before-parameter-build.s3.*", lambda model, params, **_: calls.append((model.name, params))
    )
    ledger = stack.ledger(max_attempts=4)
    return stack, s3, calls, ledger


def spec(job_key: str, bucket: str) -> JobSpec:
    return JobSpec(
        job_key, "a" * 64, "web-image", 1, "b" * 64, "none", f"derivatives/{job_key}/", bucket, "originals/a.jpg"
    )


def test_an_unreferenced_job_is_collected_manifest_first_and_nothing_else_is_touched(world):
    stack, s3, calls, ledger = world
    job_key = uuid.uuid4().hex * 2
    prefix = f"derivatives/{job_key}/"
    claim = ledger.claim(spec(job_key, stack.bucket), now_s=NOW_S - 5000, lease_until_s=NOW_S - 4900)
    for name in ("manifest.json", "thumb.webp", "large.webp"):
        s3.put_object(Bucket=stack.bucket, Key=prefix + name, Body=name.encode())
    s3.put_object(Bucket=stack.bucket, Key=f"originals/{job_key}.jpg", Body=b"original")
    other_end = "1" if job_key.endswith("0") else "0"  # never the job's own key (1 in 16 random keys end in 0)
    neighbour = f"derivatives/{job_key[:-1]}{other_end}/thumb.webp"  # another job's prefix, sharing all but the end
    s3.put_object(Bucket=stack.bucket, Key=neighbour, Body=b"other")
    ledger.complete(
        job_key, str(claim.lease_token), manifest_key=prefix + "manifest.json", outputs=[], now_s=NOW_S - 4950
    )
    assets = FakeAssets()
    assets.candidate_rows[(job_key, "asset-a")] = NOW_S - GRACE_S - 1
    settings = Settings(collect_grace_s=GRACE_S)
    calls.clear()

    report = Collector(assets, ledger, S3Store(s3), settings, FakeClock(NOW_S)).run()

    assert (report.collected, report.deleted_objects) == (1, 3)
    operations = [name for name, _ in calls]
    assert operations[0] == "DeleteObject" and calls[0][1]["Key"] == prefix + "manifest.json"
    assert set(operations) <= {"DeleteObject", "ListObjectsV2", "DeleteObjects"}
    touched = [params.get("Key") or params.get("Prefix") for _, params in calls]
    touched += [o["Key"] for name, params in calls if name == "DeleteObjects" for o in params["Delete"]["Objects"]]
    assert all(key.startswith(prefix) for key in touched if key)
    # Every page: the session's bucket holds the other tests' objects too (one page is 1,000).
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket)
    left = {o["Key"] for page in pages for o in page.get("Contents", ())}
    assert not any(key.startswith(prefix) for key in left)
    assert {f"originals/{job_key}.jpg", neighbour} <= left
    row = ledger.find([job_key])[job_key]
    assert (row.state, row.collected_at_s, row.manifest_key) == (JobState.COLLECTED, NOW_S, None)
    assert assets.candidate_rows == {}

    again = ledger.claim(spec(job_key, stack.bucket), now_s=NOW_S + 1, lease_until_s=NOW_S + 121, seen=row)
    assert (again.outcome, again.attempts, again.sweep) == (ClaimOutcome.RUN, 1, False)


def shared_job(stack, s3, ledger: DynamoLedger, assets: DynamoAssets, keys: list[str]) -> str:
    """A done job with its three files, made current for each original of ``keys`` (same bytes)."""
    job_key = uuid.uuid4().hex * 2
    prefix = f"derivatives/{job_key}/"
    claim = ledger.claim(spec(job_key, stack.bucket), now_s=NOW_S - 9000, lease_until_s=NOW_S - 8900)
    for name in ("manifest.json", "thumb.webp", "large.webp"):
        s3.put_object(Bucket=stack.bucket, Key=prefix + name, Body=name.encode())
    ledger.complete(
        job_key, str(claim.lease_token), manifest_key=prefix + "manifest.json", outputs=[], now_s=NOW_S - 8950
    )
    for key in keys:
        made = assets.make_current(
            stack.bucket,
            key,
            AssetVersion("v1", "e1", 10, sequencer_order("10")),
            sha256="c" * 64,
            media="image",
            jobs=[AssetJob("web-image@1", job_key)],
            now_s=NOW_S - 8000,
        )
        assert made is not None
    return job_key


def delete(stack, assets: DynamoAssets, key: str, now_s: int) -> None:
    assert assets.delete(stack.bucket, key, AssetVersion("d1", "", None, sequencer_order("20")), now_s=now_s)


def test_a_shared_set_stays_until_its_last_original_goes_then_the_collection_takes_it(world):
    stack, s3, _, ledger = world
    assets = stack.assets(writer=True, sleep=lambda _: None)
    one, two = f"originals/{uuid.uuid4().hex}/a.jpg", f"originals/{uuid.uuid4().hex}/b.jpg"
    job_key = shared_job(stack, s3, ledger, assets, [one, two])
    collector = Collector(assets, ledger, S3Store(s3), Settings(collect_grace_s=GRACE_S), FakeClock(NOW_S))
    delete(stack, assets, one, NOW_S - GRACE_S - 100)

    first = collector.run(limit=1000)
    assert first.revived >= 1 and assets.referenced(job_key)
    assert ledger.find([job_key])[job_key].state == JobState.DONE

    delete(stack, assets, two, NOW_S - GRACE_S - 50)
    second = collector.run(limit=1000)
    assert second.collected >= 1
    assert ledger.find([job_key])[job_key].state == JobState.COLLECTED
    assert s3.list_objects_v2(Bucket=stack.bucket, Prefix=f"derivatives/{job_key}/")["KeyCount"] == 0
    assert [c for c in assets.candidates(released_before_s=NOW_S + 1, limit=1000) if c.job_key == job_key] == []


def test_mediajobs_collect_runs_one_collection_against_the_served_aws(world, capsys):
    stack, s3, _, ledger = world
    assets = stack.assets(writer=True, sleep=lambda _: None)
    key = f"originals/{uuid.uuid4().hex}/a.jpg"
    job_key = shared_job(stack, s3, ledger, assets, [key])
    delete(stack, assets, key, int(time.time()) - 100)  # the command runs on the real clock

    assert main(["collect", "--endpoint", stack.endpoint_url, "--grace-seconds", "0", "--json"]) == 0
    out = capsys.readouterr().out
    counts = json.loads(out)  # one JSON object: the collection's logs go to stderr
    assert counts["collected"] >= 1 and counts["errors"] == 0
    assert ledger.find([job_key])[job_key].state == JobState.COLLECTED


def test_mediajobs_collect_prints_one_json_object_on_stdout(world):
    """The command as a user runs it (a process of its own): its logs go to stderr, so its
    stdout parses as one JSON object (the collection's INFO lines once came first)."""
    stack, s3, _, ledger = world
    assets = stack.assets(writer=True, sleep=lambda _: None)
    key = f"originals/{uuid.uuid4().hex}/a.jpg"
    job_key = shared_job(stack, s3, ledger, assets, [key])
    delete(stack, assets, key, int(time.time()) - 100)
    done = subprocess.run(
        [*CLI, "--log-level", "INFO", "collect", "--endpoint", stack.endpoint_url, "--grace-seconds", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts["collected"] >= 1 and "collection run" in done.stderr
    assert ledger.find([job_key])[job_key].state == JobState.COLLECTED
