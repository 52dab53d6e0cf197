"""``mediajobs backfill``: the backfill of the active recipe set on a running ``mediajobs serve``
(``docs/backfill.md``).

* ``start``: start the backfill of the served stack's active set (``recipes/active.json``,
  or ``ACTIVE_RECIPES``), or answer with the one it has (a second start starts nothing);
  the served worker (``serve --worker``) goes on with its scan as the deployed schedule
  does, and renders its jobs from the backfill lane. ``--scan`` also runs the scan here,
  until it is over.
* ``status [ID]``: where it is (the latest without an id), as ``GET <StatusUrl>backfills/<id>``
  answers (``--json``: that document); ``--watch`` redraws a progress bar until it ends.
* ``pause ID``, ``resume ID``, ``cancel ID``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from mediajobs.domain.backfill import Backfill, BackfillState, document
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.served import add_endpoint, served_stack

#: What each verb moves a backfill to.
_MOVES = {"pause": BackfillState.PAUSED, "resume": BackfillState.RUNNING, "cancel": BackfillState.CANCELLED}
#: Seconds between two redraws of ``status --watch``.
WATCH_EVERY_S = 1.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs backfill`` and its verbs (``run``: :func:`run`)."""
    backfill = subparsers.add_parser("backfill", help=SUMMARIES["backfill"])
    verbs = backfill.add_subparsers(dest="verb", metavar="VERB", required=True)
    start = verbs.add_parser("start", help="start the backfill of the active recipe set (or answer with it)")
    start.add_argument("--scan", action="store_true", help="also run its scan here until it is over")
    status = verbs.add_parser("status", help="where a backfill is (the latest without an id)")
    status.add_argument("id", nargs="?", metavar="ID", help="the backfill's id (bf-...); default: the latest")
    status.add_argument("--watch", action="store_true", help="redraw a progress bar until it ends")
    for verb, to in _MOVES.items():
        moved = verbs.add_parser(verb, help=f"make a backfill {to}")
        moved.add_argument("id", metavar="ID", help="the backfill's id (bf-...)")
    for sub in verbs.choices.values():
        sub.add_argument("--json", action="store_true", help="print the backfill's status document")
        add_endpoint(sub)
    backfill.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: Any = None) -> int:
    """Carry out the verb on the served stack; exit 1 when there is no such backfill or it
    cannot move so, 0 otherwise.

    Raises
    ------
    InternalError
        If nothing answers at ``--endpoint`` or it holds no stack.
    """
    from mediajobs.bootstrap import build_backfiller
    from mediajobs.local.session import configure_worker_logs, local_adapters

    configure_worker_logs(getattr(args, "log_level", "WARNING"))
    from mediajobs.local.commands.serve import LOCAL_DEPLOY_OVER_S

    stack = served_stack(args.endpoint)
    settings = stack.settings()
    adapters = dataclasses.replace(
        local_adapters(stack, settings), assets=stack.assets(writer=True), backfills=stack.backfills()
    )
    # As serve --worker's scan: locally the previous set's invocations are over at once.
    backfiller = build_backfiller(dataclasses.replace(settings, worker_timeout_s=LOCAL_DEPLOY_OVER_S), adapters)
    found: Backfill | None
    if args.verb == "start":
        found, created = backfiller.start()
        if not args.json:
            print(f"backfill {found.id}: {'started' if created else f'already {found.state}'}", flush=True)
        if args.scan:
            started = found.id
            while (found := backfiller.status(started)) is not None and found.state == BackfillState.RUNNING:
                if found.scan_over and found.counts.later == 0:
                    break
                backfiller.tick(budget_s=5.0)
    elif args.verb == "status":
        try:
            found = backfiller.status(args.id)
        except ValueError as exc:
            parser.error(str(exc))
        if args.id is None and (found is None or found.change != backfiller.change):
            # The active set (recipes/active.json) has no backfill yet: serve --worker starts
            # one within seconds of the edit; --watch waits for it.
            found = _wait_for_change(backfiller) if args.watch else found
            if found is None or found.change != backfiller.change:
                print(
                    "the active recipe set has no backfill yet (serve --worker starts it within 5 s)", file=sys.stderr
                )
        if found is not None and args.watch:
            found = _watch(backfiller, found)
    else:
        found = backfiller.move(args.id, _MOVES[args.verb])
        if found is None:
            try:
                there = backfiller.status(args.id)
            except ValueError as exc:
                print(f"mediajobs backfill {args.verb}: {exc}", file=sys.stderr)
                return 1
            why = f"it is {there.state}" if there is not None else "there is no such backfill"
            print(f"backfill {args.id} cannot be made {_MOVES[args.verb]}: {why}", file=sys.stderr)
            return 1
    if found is None:
        print("no backfill" + (f" {args.id}" if getattr(args, "id", None) else " yet"), file=sys.stderr)
        return 1
    doc = document(found, now_s=time.time())
    if args.json:
        print(json.dumps(doc), flush=True)
    elif args.verb != "start" or args.scan:
        _print(doc)
    return 0


#: Characters of the progress bar ``status`` prints.
BAR_WIDTH = 30


def progress_bar(doc: dict[str, Any], width: int = BAR_WIDTH) -> str:
    """``[#########.....]  62% of 812 jobs`` for a status document: jobs ended (done,
    reused, failed, dropped) of those found; a finished backfill is 100 %. Pure."""
    total = doc["total"]
    ended = total - doc["remaining"]
    share = (
        1.0 if doc["state"] in ("done", "cancelled") and doc["remaining"] == 0 else (ended / total if total else 0.0)
    )
    filled = round(share * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {share:4.0%} of {total} jobs"


def _print(doc: dict[str, Any]) -> None:
    """The status document as lines a person reads, a progress bar first."""
    print(f"backfill {doc['id']}: {doc['state']}")
    print(f"  {progress_bar(doc)}")
    sets = ", ".join(f"{media}: {' + '.join(refs)}" for media, refs in doc["active"].items())
    print(f"  rolls out      {sets}")
    for name in ("total", "enqueued", "done", "reused", "failed", "remaining"):
        print(f"  {name:<14} {doc[name]}")
    over = f"{doc['segments_scanned']}/{doc['segments'] * doc['passes']} segments of {doc['passes']} passes over"
    print(f"  assets scanned {doc['assets_scanned']} ({over})")
    eta = "-" if doc["eta_s"] is None else f"{doc['eta_s']:.0f} s"
    print(f"  rate           {doc['rate_per_s']:.2f} jobs/s, ETA {eta}")


#: Longest ``status --watch`` waits for the active set's backfill to be started, seconds.
WAIT_FOR_START_S = 30.0


def _wait_for_change(backfiller: Any) -> Backfill | None:
    """The backfill of the active set, once started (up to :data:`WAIT_FOR_START_S`), else
    the latest one."""
    deadline = time.monotonic() + WAIT_FOR_START_S
    while True:
        latest = backfiller.status(None)
        if (latest is not None and latest.change == backfiller.change) or time.monotonic() >= deadline:
            return latest
        time.sleep(WATCH_EVERY_S)


def _watch(backfiller: Any, found: Backfill) -> Backfill:
    """Redraw a progress bar (jobs ended of those found) until the backfill is ``done`` or
    ``cancelled`` (stderr; tqdm draws only on a terminal)."""
    from tqdm import tqdm

    bar_format = "{desc} {percentage:3.0f}%|{bar}| {n}/{total} jobs, {postfix}"
    with tqdm(total=0, unit="job", file=sys.stderr, desc=found.id, bar_format=bar_format) as bar:
        while True:
            doc = document(found, now_s=time.time())
            bar.total = doc["total"]
            bar.n = doc["done"] + doc["reused"] + doc["failed"]
            bar.set_postfix_str(f"{doc['state']}, {doc['remaining']} left")
            bar.refresh()
            if found.state in (BackfillState.DONE, BackfillState.CANCELLED):
                return found
            time.sleep(WATCH_EVERY_S)
            found = backfiller.status(found.id) or found
