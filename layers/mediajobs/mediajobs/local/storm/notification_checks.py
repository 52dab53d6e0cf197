"""What the storm told, checked against what it owed: every asset version's end told
exactly once, at the webhook and on the bus (:func:`notification_checks`), read from a
stream the assets table is given for the storm (:func:`watch_asset_writes`)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, Final

from mediajobs.adapters.assets import asset_of_image
from mediajobs.domain.notifications import notification_for, version_identity
from mediajobs.local.embedded import LocalStack
from mediajobs.local.notifications import failures
from mediajobs.local.streams import stream_records

if TYPE_CHECKING:
    from mediajobs.local.notifications import LocalNotifications


def watch_asset_writes(stack: LocalStack) -> None:
    """Give the assets table a stream of its own (``NEW_AND_OLD_IMAGES``; the template's
    table has none): from then on it says what each asset write owes an app, and
    :func:`notification_checks` compares that with what was told."""
    stack.client("dynamodb").update_table(
        TableName=stack.assets_table_name,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )


#: The state of an asset not seen yet in the stream (as no state: a ``deleted`` first seen owes nothing).
_UNSEEN: Final = ("unseen", "", "")


def _serving(state: str, jobs: list[str]) -> str:
    """The jobs (their keys) a ``ready`` asset serves, as the checks group by them (a
    backfill's switch to a new set -- new recipes, a new policy, a new key algorithm -- is
    an episode of its own); empty for other states."""
    return "+".join(sorted(jobs)) if state == "ready" else ""


def _served_keys(asset: dict[str, Any]) -> list[str]:
    """The job keys a status document's serving jobs have."""
    return [str(job.get("job_key")) for job in (asset.get("recipes") or {}).values() if job.get("serving", True)]


def _s3_version(version: dict[str, Any]) -> str:
    """An S3 version as the storm groups notifications by it: its version id, or its ETag
    and size on an unversioned bucket (never the sequencer)."""
    if version.get("version_id"):
        return str(version["version_id"])
    return f"{version.get('etag')}/{version.get('size_bytes')}"


def notification_checks(stack: LocalStack, told: LocalNotifications) -> tuple[dict[str, int], dict[str, Any]]:
    """Whether every asset version's end was told exactly once, counted (0 each when it
    holds), and what was told.

    What is owed comes from the assets table's own stream (every write of an asset item,
    old and new image): each change the worker committed owes
    :func:`~mediajobs.domain.notifications.notification_for` of it. Then:

    * ``versions_not_told_once``: episodes -- an asset entering ``ready``, ``failed`` or
      ``rejected`` for
      an S3 version (its version id; ETag and size unversioned), or ``deleted`` from
      anything but ``deleted`` -- read from the same stream without ``notification_for``,
      whose distinct ids at the receiver are not exactly one each (an episode whose
      sequencer moved is still one);
    * ``notifications_untold``: owed ids the outbox lacks (the outbox item was not in the
      asset's transaction), and outbox ids nothing owed;
    * ``notifications_missing``: owed ids the receiver never verified, or the bus never had;
    * ``notifications_duplicated``: asset versions (key, version, type) told under more than
      one id at the receiver, and ids put on the bus more than once;
    * ``outbox_outstanding``: outbox items a destination has not marked delivered;
    * ``notification_failures``: messages in the dispatcher's on-failure queue, and
      deliveries refused.
    """
    model = stack.asset_models().asset
    owed: dict[str, tuple[str, str, str]] = {}
    # Independently of notification_for: each time an asset enters ready, failed or rejected for an
    # S3 version, or deleted from anything but deleted (an unknown key's tombstone owes
    # nothing), is one episode, which owes exactly one id; a later event that moves only
    # the sequencer, or a progress write, is the same episode.
    episodes: Counter[tuple[str, str, str, str]] = Counter()
    run_of: dict[str, tuple[str, str, str] | None] = {}
    streams = stack.client("dynamodbstreams")
    arn = stack.client("dynamodb").describe_table(TableName=stack.assets_table_name)["Table"]["LatestStreamArn"]
    for record in stream_records(streams, arn):
        new = asset_of_image(model, record["dynamodb"].get("NewImage"))
        if new is None:
            continue
        notification = notification_for(asset_of_image(model, record["dynamodb"].get("OldImage")), new)
        if notification is not None:
            version = json.dumps(version_identity(new.version), sort_keys=True)
            owed[notification.id] = (new.key, version, str(notification.type))
        state = str(new.state)
        run = None
        if state in ("ready", "failed", "rejected", "deleted"):
            version = "" if state == "deleted" else _s3_version(dataclasses.asdict(new.version))
            run = (state, version, _serving(state, [job.job_key for job in new.jobs]))
        previous = run_of.get(new.key, _UNSEEN)
        if run is not None and run != previous and not (state == "deleted" and previous is _UNSEEN):
            episodes[(new.key, *run)] += 1
        run_of[new.key] = run
    outbox: dict[str, dict[str, Any]] = {}
    for item in stack.outbox_model().scan(consistent_read=True):
        outbox[item.id] = item.deliveries.as_dict() if item.deliveries is not None else {}
    received = told.receiver.received
    at_receiver = set(received.ids())
    bus = Counter(e.get("detail", {}).get("id") for e in told.bus_events)
    ids_of_episode: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for delivery in received.deliveries:
        asset = delivery.payload.get("asset", {})
        state = str(asset.get("state"))
        version = "" if state == "deleted" else _s3_version(asset.get("version") or {})
        serving = _serving(state, _served_keys(asset))
        ids_of_episode[(str(asset.get("key")), state, version, serving)].add(delivery.id)
    ids_of_version: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for delivery in received.deliveries:
        asset = delivery.payload.get("asset", {})
        version = json.dumps(asset.get("version"), sort_keys=True)
        kind = str(delivery.payload.get("type"))
        serving = _serving(str(asset.get("state")), _served_keys(asset))
        ids_of_version[(str(asset.get("key")), version, kind, serving)].add(delivery.id)
    destinations = ("eventbridge", "webhook")
    checks = {
        # Every episode told under exactly one id (more: a second logical notification).
        "versions_not_told_once": sum(
            1 for group in set(episodes) | set(ids_of_episode) if len(ids_of_episode[group]) != episodes[group]
        ),
        "notifications_untold": len(set(owed) - set(outbox)) + len(set(outbox) - set(owed)),
        "notifications_missing": sum(1 for nid in owed if nid not in at_receiver or bus[nid] == 0),
        "notifications_duplicated": sum(1 for ids in ids_of_version.values() if len(ids) > 1)
        + sum(1 for count in bus.values() if count > 1),
        "outbox_outstanding": sum(1 for marks in outbox.values() if any(d not in marks for d in destinations)),
        "notification_failures": len(failures(stack))
        + sum(1 for marks in outbox.values() for mark in marks.values() if dict(mark).get("refused")),
    }
    counts = {
        "owed": len(owed),
        "outbox": len(outbox),
        "webhook_ids": len(at_receiver),
        "webhook_deliveries": len(received.deliveries),
        "webhook_repeats": received.repeats(),
        "webhook_unverified": received.unverified,
        "bus_events": sum(bus.values()),
        "by_type": dict(sorted(Counter(t for _, _, t in owed.values()).items())),
        "dispatch_runs_failed": told.failed_runs,
        # for a post-mortem: the first asset versions told under more than one id
        "duplicated": [
            {"key": key, "type": kind, "ids": sorted(ids), "serving": serving.split("+") if serving else []}
            for (key, _, kind, serving), ids in ids_of_version.items()
            if len(ids) > 1
        ][:5],
    }
    return checks, counts
