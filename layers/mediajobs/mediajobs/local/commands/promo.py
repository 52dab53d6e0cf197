"""``mediajobs promo PREFIX``: request the promo of the album ``PREFIX`` (the assets under
``originals/<album>/``) on a running ``mediajobs serve --worker`` -- what the status
function's ``POST /promos?prefix=...`` does deployed
(:class:`~mediajobs.service_layer.promo.Promos`) -- and print what it shows, with its
provenance: each frame's asset key, rendition job key and decision id, and every asset
left out with why. ``--status`` reads the album's latest promo without requesting one;
``--wait S`` waits up to S seconds for it to be done. Exit 0 when requested or done, 1 when
it failed or the album has nothing to show, 2 for a prefix that is not an album's.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.served import add_endpoint, served_stack

#: How often ``--wait`` reads the promo again, seconds.
WAIT_POLL_S = 0.5


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs promo`` (its ``run``: :func:`run`)."""
    parser = subparsers.add_parser("promo", help=SUMMARIES["promo"])
    parser.add_argument("prefix", metavar="PREFIX", help="the album: originals/<album>/ (a trailing / is added)")
    parser.add_argument("--status", action="store_true", help="read the album's latest promo, request nothing")
    parser.add_argument("--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds for it to be done")
    parser.add_argument("--json", action="store_true", help="print the answer's JSON")
    add_endpoint(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: Any = None) -> int:
    """Request (or read) the album's promo on the served stack."""
    from mediajobs.bootstrap import promos_over

    prefix = args.prefix if args.prefix.endswith("/") else f"{args.prefix}/"
    stack = served_stack(args.endpoint)
    settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket)
    promos = promos_over(settings, stack.clients(), stack.assets())
    if promos is None:
        parser.error("this stack keeps no promos")
    answer = promos.status(prefix) if args.status else promos.request(prefix)
    deadline = time.monotonic() + max(args.wait, 0.0)
    while answer.state == "requested" and time.monotonic() < deadline:
        time.sleep(WAIT_POLL_S)  # a person waiting on a served worker: no event to wait on here
        answer = promos.status(prefix)
    document = answer.to_json()
    print(json.dumps(document) if args.json else format_promo(document), flush=True)
    if answer.state == "invalid":
        return 2
    return 0 if answer.state in ("requested", "done") else 1


def format_promo(document: dict[str, Any]) -> str:
    """A promo answer as lines a person reads: its state, its output, each frame's
    provenance and what was left out."""
    lines = [f"promo of {document['prefix']}: {document['state']}"]
    if document.get("message"):
        lines.append(f"  {document['message']}")
    if document.get("job_key"):
        lines.append(f"  job {document['job_key']}  ({document['recipe']}, policy {document['policy_version']})")
    for output in document.get("outputs") or []:
        lines.append(f"  {output['key']}  {output.get('width')}x{output.get('height')}  {output['bytes']:,} bytes")
    if any(x.get("why") == "not ready yet" for x in document.get("left_out") or []):
        lines.append("  (an asset not ready yet is left out: ask again once it is, for a promo with it)")
    if document.get("frames"):
        frames = len(document["frames"])
        lines.append(f"  {frames} frames (asset key <- rendition job key, decision id: its moderation job's key):")
        for frame in document["frames"]:
            decision = (frame.get("decision_id") or "none")[:16]
            lines.append(f"    {frame['asset_key']}  <- {frame['rendition_job_key'][:16]}, decision {decision}")
    left_out = document.get("left_out") or []
    for left in left_out:
        lines.append(f"  left out: {left['asset_key']}: {left['why']}")
    more = int(document.get("left_out_total") or 0) - len(left_out)
    if more > 0:
        lines.append(f"  left out: {more} more")
    return "\n".join(lines)
