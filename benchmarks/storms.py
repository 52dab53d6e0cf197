"""The long storms of ``mediajobs simulate``: the figures docs quote, and the invariants the
suite's small storm (``tests/functional/test_simulate.py``) checks, held at a size the suite
cannot afford.

Each storm runs ``.venv/bin/mediajobs simulate ... --json`` in a temporary folder, as a user
would. ``simulate`` itself exits 1 when an end check is not 0, a job is lost or rendered
twice, a duplicate read S3 bytes or cost more DynamoDB requests than it may
(``mediajobs.local.cli.storm_failures``); this script adds what each storm was written to
show (crashes and takeovers happened, every kind of change happened, every version was told
once) and prints one row per storm: wall seconds, the duplicates' DynamoDB requests, the
counts.

    .venv/bin/python benchmarks/storms.py                  # every storm below (10 to 15 min here)
    .venv/bin/python benchmarks/storms.py --only issue-24  # one of them
    .venv/bin/python benchmarks/storms.py --json           # one JSON object per storm

Unlike the other benchmarks it exits 1 when a storm breaks an invariant: those are the
product's guarantees, not aims. Its seconds are figures to compare within one machine and
one run (``farm-bench`` pairs two checkouts), never a pass mark.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLI = [str(REPO / ".venv" / "bin" / "mediajobs")]

Summary = dict[str, Any]


def _crashed(s: Summary) -> list[str]:
    """Workers died holding claims, and their jobs were taken over."""
    return [] if s["crashes"] > 0 and s["takeovers"] > 0 else ["no crash or no takeover"]


def _crash_heavy(s: Summary) -> list[str]:
    """Twice the production crash rate: crashes and takeovers happened, every job rendered once."""
    problems = _crashed(s)
    if s["renders_committed"] != s["unique_jobs"]:
        problems.append(f"{s['renders_committed']} renders committed for {s['unique_jobs']} jobs")
    return problems


def _every_change(s: Summary) -> list[str]:
    """Overwrites (late events too), deletes, re-uploads, collections: each happened and was told once."""
    problems = []
    for field in ("overwrites", "deletes", "reuploads", "late_events", "superseded"):
        if s[field] <= 0:
            problems.append(f"no {field}")
    if s["collections"]["collected"] <= 0:
        problems.append("nothing collected")
    told = s["notifications"]
    if not told["owed"] == told["outbox"] == told["webhook_ids"] == told["bus_events"] > 0:
        problems.append(f"told {told}")
    return problems


def _backfilled(s: Summary) -> list[str]:
    """The backfill ran its lane and rendered the new set's jobs (simulate checks the rest)."""
    b = s.get("backfill") or {}
    wrong = [] if b.get("state") == "done" else [f"the backfill ended {b.get('state')}"]
    if not b.get("counts", {}).get("total"):
        wrong.append("the backfill found nothing to do: the deployment came after every asset was ready?")
    return wrong


def _videos_split(s: Summary) -> list[str]:
    """Videos were uploaded and each was split (every part and join once: simulate's checks)."""
    missing = []
    if not s.get("videos"):
        missing.append("no video uploaded")
    if s.get("splits", 0) < s.get("videos", 0):
        missing.append(f"{s.get('splits')} splits for {s.get('videos')} videos")
    return missing


def _moderated(s: Summary) -> list[str]:
    """Contents were refused and each was told Asset Rejected (simulate checks that each
    renders nothing, is told once, and that every claim has its decision record)."""
    told = s["notifications"]["by_type"].get("Asset Rejected", 0)
    return [] if s.get("rejected_contents") and told else [f"{s.get('rejected_contents')} refused, {told} told"]


def _no_checksums(s: Summary) -> list[str]:
    """Without checksums a duplicate of a ready version still costs one read, no S3 byte."""
    if s["busy_resent"] == 0 and s["ddb_requests_per_duplicate"] != 1.0:
        return [f"ddb_requests_per_duplicate {s['ddb_requests_per_duplicate']} != 1.0 with no busy copy"]
    return []


@dataclass(frozen=True)
class Storm:
    """One storm: its ``simulate`` flags and what it must show beyond ``simulate``'s own checks."""

    name: str
    flags: tuple[str, ...]
    shows: Callable[[Summary], list[str]]


STORMS = (
    # The figure issue 24 asks for: 400 uploads, production-like crash, overwrite and delete rates.
    Storm(
        "issue-24",
        ("--uploads", "400", "--workers", "4", "--crash-rate", "0.05", "--overwrite-rate", "0.1")
        + ("--delete-rate", "0.1"),
        _every_change,
    ),
    # Issue 26's: the same storm, with a deployment of the set with web-image@2 half-way and
    # its backfill going on while uploads, overwrites, deletes and crashes do.
    Storm(
        "issue-26",
        ("--uploads", "400", "--workers", "4", "--crash-rate", "0.05", "--overwrite-rate", "0.1")
        + ("--delete-rate", "0.1", "--backfill-at", "200"),
        lambda s: _every_change(s) + _backfilled(s),
    ),
    # Issue 27's: a tenth of the uploads are small videos, each split into 3 segments and its
    # audio then joined, with crashes, overwrites and deletes going on.
    Storm(
        "issue-27",
        ("--uploads", "200", "--workers", "4", "--crash-rate", "0.05", "--overwrite-rate", "0.1")
        + ("--delete-rate", "0.1", "--video-rate", "0.1"),
        lambda s: _every_change(s) + _videos_split(s),
    ),
    # Issue 28's: moderation on (every storm's), a tenth of the image contents the policy's
    # known-bad test card, with crashes, overwrites and deletes going on.
    Storm(
        "issue-28",
        ("--uploads", "200", "--workers", "4", "--crash-rate", "0.05", "--overwrite-rate", "0.1")
        + ("--delete-rate", "0.1", "--reject-rate", "0.1"),
        lambda s: _every_change(s) + _moderated(s),
    ),
    # Issue 39's: a stack on the unkeyed key algorithm 1 rolls the keyed one out half-way,
    # with videos split, refused contents, crashes, overwrites and deletes going on: every
    # asset ends on its new keys, no set is left at an old one.
    Storm(
        "issue-39",
        ("--uploads", "400", "--workers", "4", "--crash-rate", "0.05", "--overwrite-rate", "0.1")
        + ("--delete-rate", "0.1", "--video-rate", "0.05", "--reject-rate", "0.05", "--key-change-at", "200"),
        lambda s: _every_change(s) + _backfilled(s),
    ),
    Storm(
        "crash-heavy",
        ("--uploads", "80", "--workers", "3", "--crash-rate", "0.25", "--identical-share", "0.2")
        + ("--seed", "7", "--visibility-seconds", "6"),
        _crash_heavy,
    ),
    Storm(
        "overwrites",
        ("--uploads", "60", "--workers", "3", "--crash-rate", "0.15", "--identical-share", "0.2")
        + ("--overwrite-rate", "0.2", "--delete-rate", "0.2", "--seed", "5", "--visibility-seconds", "6"),
        lambda s: _every_change(s) + _crashed(s),  # a job deleted before its render is never committed
    ),
    Storm(
        "no-checksums",
        ("--uploads", "40", "--workers", "2", "--crash-rate", "0", "--identical-share", "0")
        + ("--checksum-share", "0"),
        _no_checksums,
    ),
)


def run(storm: Storm) -> tuple[int, Summary, list[str]]:
    """Run ``storm``; its exit status, summary and what it failed to show (empty: it held)."""
    with tempfile.TemporaryDirectory(prefix="storm-bench-") as folder:
        done = subprocess.run(
            [*CLI, "simulate", *storm.flags, "--json"], capture_output=True, text=True, cwd=folder, check=False
        )
    lines = done.stdout.splitlines()
    if len(lines) != 1:
        return done.returncode, {}, [f"no summary: {done.stderr[-2000:]}"]
    summary = json.loads(lines[0])
    problems = [f"simulate exited {done.returncode}"] if done.returncode else []
    problems += [f"check {name} is {n}" for name, n in summary.get("checks", {}).items() if n]
    return done.returncode, summary, problems + storm.shows(summary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=[s.name for s in STORMS], action="append", help="run this storm (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per storm")
    args = parser.parse_args(argv)
    failed = 0
    for storm in STORMS:
        if args.only and storm.name not in args.only:
            continue
        code, summary, problems = run(storm)
        failed += bool(problems)
        if args.json:
            print(json.dumps({"storm": storm.name, "exit": code, "problems": problems, "summary": summary}))
        else:
            row = {k: summary.get(k) for k in ("seconds", "uploads", "unique_jobs", "crashes", "takeovers")}
            row["ddb_requests_per_duplicate"] = summary.get("ddb_requests_per_duplicate")
            print(f"{storm.name:13} {'held' if not problems else 'FAILED'} {json.dumps(row)}")
            for problem in problems:
                print(f"  {problem}")
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
