"""The storm's summary: the one JSON object ``mediajobs simulate`` prints (docs/local.md,
docs/guarantees.md), its first fields those scripts rely on."""

from __future__ import annotations

import json
import time
from typing import Any

from mediajobs.bootstrap import active_recipes
from mediajobs.local.conflicts import TransactionConflicts
from mediajobs.local.storm.accounting import (
    copy_deliveries,
    duplicate_deliveries,
    duplicate_renders,
    rerenders_after_collection,
)
from mediajobs.local.storm.collection import Collections
from mediajobs.local.storm.feeder import Feeder
from mediajobs.local.storm.plan import VIDEO_PARTS, is_known_bad, is_video, planned_keys
from mediajobs.settings import Settings


def summarize(
    feeder: Feeder,
    collections: Collections,
    events: list[dict[str, Any]],
    *,
    end: tuple[dict[str, int], dict[str, int]],
    told: tuple[dict[str, int], dict[str, Any]],
    dlq: int,
    worker_processes: int,
    timed_out: bool,
    conflicts: TransactionConflicts | None,
    started: float,
    settings: Settings,
    backfill: tuple[dict[str, int], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The storm's summary.

    Parameters
    ----------
    feeder: what was uploaded and which events were sent again.
    collections: the collection runs' counts.
    events: every event of the workers and the collection, in time order.
    end: the end checks and the end states of the live assets' jobs
        (:func:`~mediajobs.local.storm.checks.end_checks`).
    told: the notification checks and counts
        (:func:`~mediajobs.local.storm.notification_checks.notification_checks`).
    dlq: messages in the dead-letter queue.
    worker_processes: worker processes started, replacements included.
    timed_out: whether the storm gave up at ``--max-seconds``.
    conflicts: the emulated transaction conflicts, when on.
    started: when the storm started, ``time.monotonic()`` seconds.
    settings: the upload workers' settings (the policy and key scheme ``unique_jobs`` is
        counted under: before a deployment).
    backfill: with ``--backfill-at``, the backfill's checks and figures
        (:func:`~mediajobs.local.storm.backfill.backfill_checks`).

    Returns
    -------
    dict
        The summary, its ``checks`` all 0 when everything held.
    """
    uploads = feeder.uploads
    checks, end_states = end
    told_checks, notifications = told
    # Every job of every content uploaded: one per active recipe of its media type, and for a
    # video its parts (a split job's segments and audio: VIDEO_PARTS each).
    recipes = active_recipes()
    videos = [c for c in feeder.contents if is_video(c)]
    # A content the policy refuses commits no job: its moderation job fails, its renditions never run.
    refused = [c for c in feeder.contents if is_known_bad(c)]
    accepted = [c for c in feeder.contents if not is_known_bad(c)]
    unique_keys = {key for keys in planned_keys(accepted, recipes, settings).values() for key in keys}
    lost = checks["assets_not_ready"]
    records = [e for e in events if e["event"] == "record"]
    copies = copy_deliveries(records, uploads)
    duplicates = duplicate_deliveries(records, copies)
    summary: dict[str, Any] = {
        "uploads": len(uploads),
        "unique_jobs": len(unique_keys) + VIDEO_PARTS * len(videos),
        "renders_started": sum(1 for e in events if e["event"] == "render_started"),
        "renders_committed": sum(1 for e in events if e["event"] == "committed"),
        "duplicate_renders": duplicate_renders(events),
        "crashes": sum(1 for e in events if e["event"] == "crash"),
        "takeovers": sum(1 for e in events if e["event"] == "claimed" and e.get("took_over")),
        "lost": lost,
        "dlq": dlq,
        "s3_bytes_read_for_duplicates": sum(r["s3_bytes"] for r in duplicates),
        "ddb_requests_per_duplicate": round(sum(r["ddb_requests"] for r in duplicates) / len(duplicates), 3)
        if duplicates
        else 0.0,
        "seconds": round(time.monotonic() - started, 1),
        # Beyond the contract: what the storm was made of.
        "rejected_contents": len(refused),
        "deliveries": len(records),
        "duplicate_deliveries": len(duplicates),
        # Duplicates that wrote: they came while the first delivery of their version was
        # still recording its end in the asset, and recorded it themselves.
        "duplicates_that_wrote": sum(1 for r in duplicates if r.get("ddb_writes", 0)),
        "duplicated_events": feeder.duplicated_events,
        "acks_lost": sum(1 for e in events if e["event"] == "ack_lost"),
        "busy_resent": sum(1 for r in records if r["outcome"] in ("busy_resent", "JobBusy")),
        "handed_over": sum(1 for r in records if r["outcome"] == "handed_over"),
        "worker_processes": worker_processes,
        "end_states": dict(sorted(end_states.items())),
        "timed_out": timed_out,
        "overwrites": sum(1 for u in uploads if u.kind == "overwrite"),
        "deletes": sum(1 for u in uploads if u.kind in ("delete", "delete_version")),
        "version_deletes": sum(1 for u in uploads if u.kind == "delete_version"),
        "noncurrent_deletes": sum(1 for u in uploads if u.kind == "delete_noncurrent"),
        "reuploads": sum(1 for u in uploads if u.kind == "reupload"),
        "videos": len(videos),
        "splits": sum(1 for r in records if r["outcome"] == "split"),
        "late_events": feeder.late_events,
        "superseded": sum(1 for r in records if r["outcome"] == "superseded"),
        "collections": collections.report,
        "rerenders_after_collection": rerenders_after_collection(events),
        # The first answer of a copy under another key: a new asset of content already
        # rendered (its asset written: made current, then recorded ready), not a duplicate.
        "ddb_requests_per_copy": round(sum(copies.values()) / len(copies), 3) if copies else 0.0,
    }
    if conflicts is not None:
        (table, item), writes = conflicts.hottest()
        summary["transaction_conflicts"] = conflicts.conflicts + conflicts.single_conflicts
        summary["hottest_item"] = {"table": table, "key": json.loads(item), "writes": writes}
    summary["notifications"] = notifications
    checks.update(told_checks)
    checks["dead_letters"] = dlq
    checks["duplicate_renders"] = summary["duplicate_renders"]
    checks["lost"] = lost
    if backfill is not None:
        backfill_checks, summary["backfill"] = backfill
        checks.update(backfill_checks)
    summary["checks"] = checks
    return summary
