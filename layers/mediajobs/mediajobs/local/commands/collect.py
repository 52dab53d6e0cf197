"""``mediajobs collect``: one collection run against a running ``mediajobs serve``: the
derivatives no asset references deleted once their grace is over."""

from __future__ import annotations

import argparse
import dataclasses
import json

from mediajobs.local.arguments import non_negative_seconds
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.served import add_endpoint, served_assets, served_stack
from mediajobs.local.session import AdapterWrapper


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs collect`` (its ``run``: :func:`run`)."""
    collect = subparsers.add_parser(
        "collect",
        help=SUMMARIES["collect"],
    )
    collect.add_argument(
        "--grace-seconds",
        type=non_negative_seconds,
        default=None,
        help="collect jobs released at least this long ago (default: the stack's CollectGraceSeconds)",
    )
    add_endpoint(collect)
    collect.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    collect.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None) -> int:
    """One collection run against a running ``mediajobs serve``; prints its counts; exit 1
    when a job could not be collected (it is kept for the next run).

    Raises
    ------
    InternalError
        If nothing answers at ``--endpoint`` or it holds no stack.
    """
    from mediajobs.bootstrap import build_collector
    from mediajobs.local.session import configure_worker_logs, local_adapters

    configure_worker_logs(args.log_level)  # stderr: stdout is the counts
    stack = served_stack(args.endpoint)
    settings = stack.settings()
    assets = served_assets(stack)
    adapters = dataclasses.replace(local_adapters(stack, settings), assets=assets)
    report = build_collector(settings, adapters).run(grace_s=args.grace_seconds)
    counts = report.to_json()
    if args.json:
        print(json.dumps(counts), flush=True)
    else:
        grace = settings.collect_grace_s if args.grace_seconds is None else args.grace_seconds
        print(f"collection at {args.endpoint} (grace {grace} s):")
        for name, value in counts.items():
            print(f"  {name.replace('_', ' '):<16} {value}")
    return 1 if report.errors else 0
