"""``mediajobs decisions``: the decision log of a running ``mediajobs serve``, queried with
the stack's own Athena queries' SQL (:mod:`mediajobs.local.decisions`).

* ``spikes --since 24h``: the processing starts grouped by full identity and by asset, each
  group with more than one classified into its cause (``claim_boundary``,
  ``same_key_different_bytes``, ``recipe_changed_without_version``, ``policy_change``), then
  the identities that spent the most CPU.
* ``affected --policy N``: the assets and the albums' promos (their key hashes, and the
  keys and album prefixes the stack knows) decided under policy N: what a backfill of its
  successor regenerates.
* ``count``: the records by action.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

from mediajobs.domain.decisions import CAUSES, asset_hash
from mediajobs.domain.promo import PROMO_RECIPE
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.common import InternalError
from mediajobs.local.commands.served import add_endpoint, credentials_refused, refused_credentials, served_view

_SINCE = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since_seconds(text: str) -> int:
    """``24h`` -> 86,400: a duration in seconds, minutes, hours or days.

    Raises
    ------
    ValueError
        For anything else.
    """
    match = _SINCE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"a duration is a number and s, m, h or d (24h, 90m): {text!r}")
    return int(match[1]) * _UNIT_S[match[2]]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs decisions`` (its ``run``: :func:`run`)."""
    parser = subparsers.add_parser("decisions", help=SUMMARIES["decisions"])
    queries = parser.add_subparsers(dest="query", required=True, metavar="QUERY")
    spikes = queries.add_parser("spikes", help="repeated processing starts, by cause; and the top CPU identities")
    spikes.add_argument("--since", default="24h", help="how far back: 24h, 90m, 7d (default 24h)")
    spikes.add_argument("--json", action="store_true", help="print one JSON object")
    affected = queries.add_parser("affected", help="the assets decided under a policy version")
    affected.add_argument("--policy", required=True, help="the policy version (1, 2 ...)")
    affected.add_argument("--json", action="store_true", help="print one JSON object")
    count = queries.add_parser("count", help="the records by action")
    count.add_argument("--json", action="store_true", help="print one JSON object")
    for sub in (spikes, affected, count):
        add_endpoint(sub)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: Any = None) -> int:
    """``mediajobs decisions QUERY`` against the served stack's decision log."""
    from mediajobs.local.decisions import DecisionLogReader

    stack = served_view(args.endpoint)
    reader = DecisionLogReader(stack.client("s3"), stack.decisions_bucket)
    try:
        if args.query == "spikes":
            try:
                since = since_seconds(args.since)
            except ValueError as exc:
                parser.error(str(exc))
            report = spikes_report(reader, int(time.time()) - since)
            print(json.dumps(report) if args.json else format_spikes(report, args.since), flush=True)
        elif args.query == "affected":
            keys = _known_keys(stack)
            report = affected_report(reader, args.policy, keys, _current_promos(stack))
            print(json.dumps(report) if args.json else format_affected(report), flush=True)
        else:
            counts = reader.count()
            print(json.dumps(counts) if args.json else "\n".join(f"{a:10} {n}" for a, n in counts.items()))
    except Exception as exc:  # the served stack is not there, or holds no decision log
        if refused_credentials(exc):
            raise credentials_refused(stack) from exc
        if type(exc).__module__.startswith(("botocore", "urllib3")):
            raise InternalError(f"could not read the decision log at {args.endpoint}: {exc}") from exc
        raise
    return 0


def first_day(since_s: int) -> str:
    """The first day partition (``yyyy/MM/dd``, UTC) a window from ``since_s`` reads: the day
    of an hour before it, since Firehose files a record by its arrival, a buffer later."""
    return time.strftime("%Y/%m/%d", time.gmtime(max(0, since_s - 3600)))


def spikes_report(reader: Any, since_s: int) -> dict[str, Any]:
    """The spikes query's groups and the top CPU identities since ``since_s`` (Unix s)."""
    params = [first_day(since_s), since_s]
    groups = reader.run("spikes", params).dicts()
    top = reader.run("top_cpu", params).dicts()
    return {"since_s": since_s, "groups": groups, "top_cpu": top}


def format_spikes(report: dict[str, Any], since: str) -> str:
    """The report as lines a person reads."""
    lines = [f"processing starts since {since}: {len(report['groups'])} group(s) started more than once"]
    for group in report["groups"]:
        lines.append(
            f"  {group['cause']:32} asset {group['asset']}  {group['recipe']}@{group['recipe_v']}  "
            f"{group['starts']} starts; {group['differing']}: {group['least']} .. {group['greatest']}"
        )
        lines.append(f"  {'':32} {CAUSES[group['cause']]}")
    if not report["groups"]:
        lines.append("  none: every identity was processed once, its duplicates reused")
    lines.append("top identities by CPU (a job key names one; a long video's parts are jobs of one content):")
    for row in report["top_cpu"]:
        lines.append(
            f"  job {row['job']}  {row['recipe']}@{row['recipe_v']} policy {row['policy']} "
            f"(content {row['content']})  {row['cpu_s']:.2f} s CPU in {row['renders']} run(s)"
        )
    return "\n".join(lines)


def affected_report(
    reader: Any, policy: str, keys: dict[str, str], current: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The assets and the albums' promos decided under ``policy`` (a promo's rows are its
    recipe's, ``promo``), each with its key (an album's: its prefix) when ``keys`` (key hash
    -> original key or album prefix) knows it; a promo's row says whether it is its album's
    ``current`` one (``current``: the contents, 16 hex, of the albums' latest promos)."""
    rows = reader.run("affected", [policy]).dicts()
    for row in rows:
        row["key"] = keys.get(row["asset"])
    promos = [{**r, "current": r["content"] in current} for r in rows if r["recipe"] == PROMO_RECIPE]
    return {"policy": policy, "assets": [r for r in rows if r["recipe"] != PROMO_RECIPE], "promos": promos}


def format_affected(report: dict[str, Any]) -> str:
    """The report as lines a person reads."""
    lines = [f"assets decided under policy {report['policy']}: {len(report['assets'])}"]
    for row in report["assets"]:
        lines.append(f"  {row['outcome']:9} {row['recipe']:20} {row['key'] or row['asset']}")
    lines.append(f"promos made under policy {report['policy']}: {len(report.get('promos', []))}")
    for row in report.get("promos", []):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(row["decided_at"])))
        latest = "  (the album's current promo)" if row.get("current") else ""
        lines.append(
            f"  {row['outcome']:9} {row['recipe']:20} {row['key'] or row['asset']}  content {row['content']}"
            f"  {when} UTC{latest}"
        )
    return "\n".join(lines)


def _known_keys(stack: Any) -> dict[str, str]:
    """Key hash -> original key of every asset the served stack holds (a scan), and album
    prefix of every album with a promo (the registry's ``Query``)."""
    from mediajobs.local.storm.checks import asset_views

    try:
        keys = {asset_hash(stack.bucket, key): key for key in asset_views(stack)}
        for album in _promo_records(stack).all():
            keys[asset_hash(album.bucket, album.prefix)] = album.prefix
        return keys
    except Exception:  # noqa: BLE001 - the keys are a convenience; the hashes are the answer
        print("mediajobs: the asset keys could not be read; showing their hashes", file=sys.stderr)
        return {}


def _current_promos(stack: Any) -> frozenset[str]:
    """The contents (16 hex, as the log has them) of every album's latest promo."""
    from mediajobs.domain.decisions import PREFIX
    from mediajobs.domain.promo import album_content

    try:
        records = _promo_records(stack).all()
    except Exception:  # noqa: BLE001 - a convenience, as the keys
        return frozenset()
    return frozenset(album_content([f.rendition_job_key for f in r.frames])[:PREFIX] for r in records if r.job_key)


def _promo_records(stack: Any) -> Any:
    """The promo registry of the served stack."""
    from mediajobs.adapters.promos import DynamoPromos, PromoModel

    clients = stack.clients()
    model = clients.model(PromoModel, stack.assets_table_name)
    return DynamoPromos(clients.unit_of_work(), model, clients.asset_models(stack.assets_table_name))
