"""The decision log: its records (domain/decisions.py) and the cost-spike query
(queries/spikes.sql, run by DuckDB as ``mediajobs decisions`` runs it), classifying a
seeded scenario of each of the four causes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mediajobs.domain.decisions import CAUSES, asset_hash, record
from mediajobs.domain.keys import KEY_ALGORITHM_VERSION
from mediajobs.local.commands.decisions import first_day
from mediajobs.local.decisions import COLUMNS, query_text, run_query

HOUR = 3600
NOW = 1_796_000_000


def start(asset: str, content: str, *, action: str = "process", recipe_hash: str = "r" * 64, policy: str = "1",
          job: str | None = None, t: int = NOW, corr: str = "req-1", **extra) -> dict:  # fmt: skip
    """A processing start of ``web-image@1`` (its job key standing for the full identity)."""
    job = job or f"{content[:4]}{recipe_hash[:4]}{policy}".ljust(64, "0")
    return record(t=t, corr=corr, action=action, asset=asset, content=content, job=job, recipe="web-image",
                  recipe_v=1, recipe_hash=recipe_hash, policy=policy, prior="none", **extra)  # fmt: skip


def write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "00000000.json").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def spikes(folder: Path, since: int = NOW - 24 * HOUR) -> list[dict]:
    return run_query(folder, query_text("spikes"), [first_day(since), since]).dicts()


def test_a_record_keeps_prefixes_and_never_a_key():
    r = record(t=NOW, corr="R1", action="process", asset=asset_hash("b", "originals/Me at the beach.jpg"),
               content="c" * 64, job="j" * 64, recipe="web-image", recipe_v=1, recipe_hash="h" * 64, policy="1",
               key_v=KEY_ALGORITHM_VERSION, prior=None, cpu_s=0.12345, bytes_in=10, state=None)  # fmt: skip
    assert r == {
        "t": NOW, "corr": "R1", "action": "process", "asset": asset_hash("b", "originals/Me at the beach.jpg"),
        "content": "c" * 16, "job": "j" * 16, "recipe": "web-image", "recipe_v": 1, "recipe_hash": "h" * 16,
        "policy": "1", "key_v": KEY_ALGORITHM_VERSION, "prior": "none", "cpu_s": 0.123, "bytes_in": 10,
    }  # fmt: skip
    assert "beach" not in json.dumps(r) and len(r["asset"]) == 16
    with pytest.raises(ValueError, match="not a decision action"):
        record(t=NOW, corr="x", action="rendered")
    with pytest.raises(ValueError, match="not decision record fields"):
        record(t=NOW, corr="x", action="process", filename="a.jpg")


def test_the_spike_query_classifies_each_of_the_four_causes(tmp_path):
    """One seeded asset per cause, and one healthy asset whose duplicates were reused."""
    seeded = [
        # 1. The same identity started twice: the claim boundary failed.
        start("a-boundary", "c1" * 32, corr="req-1"),
        start("a-boundary", "c1" * 32, corr="req-1-again"),
        # 2. One asset key re-uploaded with other bytes.
        start("a-bytes", "c2" * 32),
        start("a-bytes", "c3" * 32),
        # 3. One recipe version whose config changed without a version bump.
        start("a-recipe", "c4" * 32, recipe_hash="r1" * 32),
        start("a-recipe", "c4" * 32, recipe_hash="r2" * 32),
        # 4. A policy change: its intended coverage.
        start("a-policy", "c5" * 32, policy="1"),
        start("a-policy", "c5" * 32, policy="2"),
        # Healthy: started once, its duplicates reused; a takeover after a crash is no spike.
        start("a-fine", "c6" * 32),
        start("a-fine", "c6" * 32, action="reuse"),
        start("a-fine", "c6" * 32, action="reuse"),
        start("a-crash", "c7" * 32),
        start("a-crash", "c7" * 32, action="takeover"),
        # Outside the window: not counted.
        start("a-old", "c8" * 32, t=NOW - 48 * HOUR),
        start("a-old", "c8" * 32, t=NOW - 47 * HOUR),
    ]
    groups = spikes(write(tmp_path / "log", seeded))
    found = {(g["cause"], g["asset"]): (g["differing"], g["least"], g["greatest"], g["starts"]) for g in groups}
    assert found == {
        ("claim_boundary", "a-boundary"): ("correlations", "2", "c1c1c1c1c1c1c1c1", 2),
        ("same_key_different_bytes", "a-bytes"): ("content", "c2c2c2c2c2c2c2c2", "c3c3c3c3c3c3c3c3", 2),
        ("recipe_changed_without_version", "a-recipe"): ("recipe_hash", "r1r1r1r1r1r1r1r1", "r2r2r2r2r2r2r2r2", 2),
        ("policy_change", "a-policy"): ("policy", "1", "2", 2),
    }
    assert set(CAUSES) == {cause for cause, _ in found}


def test_top_cpu_and_affected_read_the_same_records(tmp_path):
    ended = [
        start("a1", "d1" * 32, action="ended", cpu_s=2.5, bytes_out=100, state="done"),
        start("a1", "d1" * 32, action="ended", cpu_s=1.0, bytes_out=50, state="done"),
        start("a2", "d2" * 32, action="ended", cpu_s=0.5, bytes_out=10, state="done"),
        start("a3", "d3" * 32, action="rejected", rule="perceptual:9a4771cbd85a5a35"),
        start("a4", "d4" * 32, action="review", t=NOW),
        start("a4", "d4" * 32, action="accepted", reviewer="arn:aws:iam::1:role/mod", t=NOW + 5),
        start("a5", "d5" * 32, action="accepted", policy="2"),
    ]
    folder = write(tmp_path / "log", ended)
    top = run_query(folder, query_text("top_cpu"), ["1970/01/01", 0]).dicts()
    assert [(r["content"], r["renders"], r["cpu_s"], r["bytes_out"]) for r in top] == [
        ("d1d1d1d1d1d1d1d1", 2, 3.5, 150),
        ("d2d2d2d2d2d2d2d2", 1, 0.5, 10),
    ]
    affected = run_query(folder, query_text("affected"), ["1"]).dicts()
    assert [(r["asset"], r["outcome"]) for r in affected] == [("a3", "rejected"), ("a4", "accepted")]


def test_an_empty_log_answers_no_group(tmp_path):
    (tmp_path / "empty").mkdir()
    assert spikes(tmp_path / "empty") == []


def test_the_local_table_has_the_glue_tables_columns():
    from mediajobs.local.template import load_template
    from tests.conftest import REPO

    table = load_template(REPO / "template.yaml")["Resources"]["DecisionsTable"]["Properties"]["TableInput"]
    columns = [c["Name"] for c in table["StorageDescriptor"]["Columns"]]
    assert columns == list(COLUMNS)


def test_the_window_reads_its_day_partitions_only(tmp_path):
    """Athena prunes by ``day``: a start in an earlier day's partition is not read, whatever
    its ``t`` (the local view derives ``day`` from ``t`` as Firehose files it)."""
    day = 24 * HOUR
    folder = write(tmp_path / "log", [start("a", "e1" * 32, t=NOW - 2 * day), start("a", "e1" * 32, t=NOW - 2 * day)])
    assert spikes(folder, since=NOW - 3 * day) != [] and spikes(folder, since=NOW - day) == []
    assert first_day(NOW) == time.strftime("%Y/%m/%d", time.gmtime(NOW - HOUR))
