"""The storm's figures from its events (the workers' logs and the collection's): which
deliveries were duplicates and what they cost, which renders ran twice, which jobs were
rendered again after their collection."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mediajobs.local.storm.plan import Upload


def read_logs(folder: Path) -> Iterator[dict[str, Any]]:
    """Every event of the workers' logs in ``folder`` (``worker-*.jsonl``, and the backfill
    lane's ``lane-*.jsonl``), file by file; a line a crash cut mid-write is skipped."""
    for path in sorted([*folder.glob("worker-*.jsonl"), *folder.glob("lane-*.jsonl")]):
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:  # a line cut by a crash mid-write
                    continue


def copy_deliveries(records: list[dict[str, Any]], uploads: list[Upload]) -> dict[int, int]:
    """The first record of each key holding the same bytes as another upload's, when it did
    not render: a new asset of content rendered (or being rendered) for another key, which
    writes its own asset -- answered (``done``) or sent back while the render runs (busy) --
    as ``{id(record): its DynamoDB requests}``. Not duplicates: no one asked for it before."""
    puts = [u for u in uploads if u.kind not in ("delete", "delete_version")]
    shared: dict[int, int] = {}
    for u in puts:
        shared[u.data_index] = shared.get(u.data_index, 0) + 1
    copy_keys = {u.key for u in puts if shared[u.data_index] > 1}
    seen: set[str] = set()
    found: dict[int, int] = {}
    for r in sorted(records, key=lambda r: r["t"]):
        key = r.get("key")
        if key is None or key in seen:
            continue
        seen.add(key)
        if key in copy_keys and _settled_elsewhere(r):
            found[id(r)] = r["ddb_requests"]
    return found


def _settled_elsewhere(record: dict[str, Any]) -> bool:
    """Whether a record was answered (``done``) or sent back while another worker held the
    job (busy) without rendering or holding a claim or a reading mark of its own. A record
    that held a claim did work -- read the bytes for it -- even when another worker took
    the job over before it rendered; one that held an original's reading mark (its media
    type unknown) was the one to read it, even when its mark ran out while it read and
    another delivery, marking it after, claimed the jobs first."""
    return (
        not record["rendered"]
        and not record.get("claimed", False)
        and not record.get("read_for_work", False)
        and record["outcome"] in ("done", "JobBusy", "busy_resent")
        # A delete is its own event: a version deleted for good makes what S3 serves now
        # current (an asset write, and the jobs' read), whatever was rendered before.
        and record.get("detail_type") != "Object Deleted"
    )


def duplicate_deliveries(records: list[dict[str, Any]], copies: dict[int, int]) -> list[dict[str, Any]]:
    """The records that were duplicates: settled elsewhere (:func:`_settled_elsewhere`),
    not a copy's first record (:func:`copy_deliveries`), and not one finishing what a
    crashed delivery left (:func:`_finishers`)."""
    finishing = _finishers(records)
    return [r for r in records if _settled_elsewhere(r) and id(r) not in copies and id(r) not in finishing]


def _finishers(records: list[dict[str, Any]]) -> set[int]:
    """The records (their ``id``) that wrote to DynamoDB on a receive of their message
    after one that left no record -- the worker died holding it: they finished what that
    delivery left (the asset's record of jobs it committed just before dying), work a
    duplicate does not do. A write on any other receive stays a duplicate's cost."""
    logged: Counter[str] = Counter()
    found: set[int] = set()
    for r in sorted(records, key=lambda r: r.get("t", 0.0)):
        message = str(r.get("message_id"))
        if r.get("ddb_writes", 0) and int(r.get("receive_count", 1)) > logged[message] + 1:
            found.add(id(r))
        logged[message] += 1
    return found


def duplicate_renders(events: list[dict[str, Any]]) -> int:
    """Renders started for a key already committed, or while another worker held it alive.

    A worker holds a key from its ``render_started`` until it commits it, crashes, or
    finishes the record (a transient failure or a superseded claim ends there).
    """
    holders: dict[str, dict[int, float]] = defaultdict(dict)
    committed: set[str] = set()
    duplicates = 0
    for e in sorted(events, key=lambda e: e["t"]):
        kind, pid = e["event"], e["pid"]
        if kind == "render_started":
            key = e["job_key"]
            if key in committed or any(p != pid for p in holders[key]):
                duplicates += 1
            holders[key][pid] = e["t"]
        elif kind == "committed":
            committed.add(e["job_key"])
            holders[e["job_key"]].pop(pid, None)
        elif kind == "collected":  # its derivatives are gone: the next render is no duplicate
            committed.discard(e["job_key"])
        elif kind in ("crash", "record"):
            for held in holders.values():
                held.pop(pid, None)
    return duplicates


def rerenders_after_collection(events: list[dict[str, Any]]) -> int:
    """Commits of a job after its collection (a re-upload of its bytes once they were gone)."""
    collected: set[str] = set()
    again = 0
    for e in events:
        if e["event"] == "collected":
            collected.add(e["job_key"])
        elif e["event"] == "committed" and e["job_key"] in collected:
            again += 1
            collected.discard(e["job_key"])
    return again
