"""``mediajobs simulate``: the storm (:func:`mediajobs.local.storm.run.run_storm`), its flags
built from :class:`~mediajobs.local.storm.config.StormConfig`'s fields, its summary printed
as one JSON object and judged (:func:`storm_failures`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Final

from mediajobs.local.commands import SUMMARIES
from mediajobs.local.session import AdapterWrapper
from mediajobs.local.storm.config import StormConfig, storm_flags

#: The storm's bound on the mean DynamoDB requests of a duplicate delivery (see :func:`storm_failures`).
MAX_DDB_REQUESTS_PER_DUPLICATE: Final = 3.0
#: With ``--backfill-at``: the most the upload-to-ready p95 during the backfill may be, as a
#: multiple of the same run's p95 before it (new uploads keep their priority).
MAX_BACKFILL_P95_RATIO: Final = 1.5


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs simulate`` (its ``run``: :func:`run`): a flag per flagged field
    of :class:`StormConfig` (:func:`add_storm_flags`), then ``--events-log`` and ``--json``."""
    sim = subparsers.add_parser(
        "simulate",
        help=SUMMARIES["simulate"],
        description="Upload N originals to the embedded AWS and process them with M worker processes running "
        "the real handler, with duplicated events, lost acknowledgements and crashes at every step boundary. "
        "Exit 1 when something was lost, dead-lettered or rendered twice, a check failed or a duplicate cost "
        "more than its bound (each reason on stderr).",
    )
    add_storm_flags(sim)
    sim.add_argument(
        "--events-log",
        type=Path,
        metavar="FILE",
        help="also write every event the workers and the collection logged to FILE, one JSON object per "
        "line in time order (to find out why a check failed)",
    )
    sim.add_argument("--json", action="store_true", help="print the JSON object on one line")
    sim.set_defaults(run=run)


def add_storm_flags(parser: argparse.ArgumentParser) -> None:
    """Add a flag for each field of :class:`StormConfig` that declares one, in the fields'
    order: its name, type and help as the field's :class:`~mediajobs.local.storm.config.Flag`
    says, its default the field's."""
    for field, flag in storm_flags():
        parser.add_argument(flag.name, type=flag.parse, default=field.default, help=flag.help_for(field.default))


def storm_config(args: argparse.Namespace) -> StormConfig:
    """The :class:`StormConfig` that ``simulate``'s parsed flags (and the command's
    ``--log-level``) describe."""
    given = {field.name: getattr(args, flag.dest) for field, flag in storm_flags()}
    return StormConfig(**given, log_level=args.log_level)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None) -> int:
    """Run the storm; print one JSON object; exit 1 when an exactly-once check fails (each
    reason a ``simulate:`` line on stderr)."""
    from mediajobs.local.storm.run import run_storm

    cfg = storm_config(args)
    if cfg.backfill_at and cfg.key_change_at:
        parser.error("--backfill-at and --key-change-at are two deployments: give one")
    summary = run_storm(cfg, events_log=args.events_log)
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2), flush=True)
    failed = storm_failures(summary, cfg)
    for reason in failed:
        print(f"simulate: {reason}", file=sys.stderr)
    if not failed:  # the verdict in words, beside the JSON on stdout
        print(f"simulate: every check held ({len(summary['checks'])} checks, 0 each)", file=sys.stderr)
    return 1 if failed else 0


def storm_failures(summary: dict[str, Any], cfg: StormConfig) -> list[str]:
    """Why a storm's summary fails (``mediajobs simulate`` then exits 1), one line each;
    empty when everything held. Pure."""
    changes = cfg.overwrite_rate > 0 or cfg.delete_rate > 0
    failed = [f"check {name} is {value}" for name, value in summary["checks"].items() if value != 0]
    # Without overwrites or deletes, every content's jobs are committed exactly once (a
    # backfill's new set has checks of its own).
    deployed = cfg.backfill_at or cfg.key_change_at
    if not changes and not deployed and summary["renders_committed"] != summary["unique_jobs"]:
        failed.append(f"renders_committed {summary['renders_committed']} != unique_jobs {summary['unique_jobs']}")
    if summary["s3_bytes_read_for_duplicates"] != 0:
        failed.append(f"s3_bytes_read_for_duplicates is {summary['s3_bytes_read_for_duplicates']}, not 0")
    # 2 (the asset's read, the jobs' read), and 2 more for a redelivery that records the
    # asset a crash left unrecorded (after a commit, or after an asset write): at most 4
    # each, so a mean of 3 means half the duplicates came after such a crash. Measured:
    # 2.0 without crashes, 2.15 to 2.52 at crash rates of 0.15 to 0.25.
    if summary["ddb_requests_per_duplicate"] > MAX_DDB_REQUESTS_PER_DUPLICATE:
        failed.append(
            f"ddb_requests_per_duplicate {summary['ddb_requests_per_duplicate']} > {MAX_DDB_REQUESTS_PER_DUPLICATE}"
        )
    ratio = (summary.get("backfill") or {}).get("p95_ratio")
    if cfg.backfill_at and (ratio is None or ratio > MAX_BACKFILL_P95_RATIO):
        failed.append(f"upload-to-ready p95 during the backfill is {ratio} x before it, over {MAX_BACKFILL_P95_RATIO}")
    if summary["timed_out"]:
        failed.append(f"timed out after --max-seconds {cfg.max_seconds:g}")
    return failed
