"""``mediajobs review accept|reject KEY``: a person's decision on an asset held for review,
on a running ``mediajobs serve`` -- what the status function's ``POST /review`` does
deployed (:class:`~mediajobs.service_layer.review.Reviews`), recorded with ``--by`` (default:
the local user) as who decided. ``mediajobs review list`` names the assets held.
"""

from __future__ import annotations

import argparse
import getpass
import json
import time
from typing import Any

from mediajobs.domain.assets import AssetState
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.served import add_endpoint, served_stack


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs review`` (its ``run``: :func:`run`)."""
    parser = subparsers.add_parser("review", help=SUMMARIES["review"])
    parser.add_argument("action", choices=("accept", "reject", "list"), help="the decision, or list the held assets")
    parser.add_argument("key", metavar="KEY", nargs="?", help="the original's key (originals/...)")
    parser.add_argument("--by", default=None, help="who decides (default: the local user, local:<name>)")
    parser.add_argument("--json", action="store_true", help="print the answer's JSON")
    add_endpoint(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: Any = None) -> int:
    """Decide (or list) on the served stack; exit 1 when the asset is unknown or not held."""
    from mediajobs.bootstrap import build_reviews

    stack = served_stack(args.endpoint)
    assets = stack.assets()
    if args.action == "list":
        from mediajobs.local.storm.checks import asset_views

        held = [(view.key, view.detail) for view in asset_views(stack).values() if view.state == AssetState.REVIEW]
        if args.json:
            print(json.dumps([{"key": key, "detail": detail} for key, detail in held]))
        else:
            print("\n".join(f"{key}  {detail}" for key, detail in held) or "no asset is held for review")
        return 0
    if not args.key:
        parser.error("review accept|reject needs the original's KEY")
    settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket)
    reviews = build_reviews(settings, stack.clients(), assets, clock=time.time)
    outcome = "accepted" if args.action == "accept" else "rejected"
    answer = reviews.decide(args.key, outcome, args.by or f"local:{getpass.getuser()}")
    if args.json:
        print(json.dumps(answer.to_json()))
    else:
        if answer.asset_state is None:
            print(f"{args.key}: no asset for this key")
        elif answer.outcome is None:
            print(f"{args.key}: {answer.state} (the asset is {answer.asset_state})")
        else:
            print(f"{args.key}: {answer.state} ({answer.outcome} by {answer.by}; the asset was {answer.asset_state})")
    return 0 if answer.state in ("decided", "already_decided") else 1
