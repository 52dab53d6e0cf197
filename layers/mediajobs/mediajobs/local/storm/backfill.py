"""The storm's backfill: after N writes of the plan, a deployment -- of an active set with
``web-image@2`` (:data:`NEW_IMAGE_SET`, ``mediajobs simulate --backfill-at N``), or of the
keyed key algorithm to workers that started on algorithm 1 (``--key-change-at N``) --, its
backfill started and scanned by the schedule's code in the parent, its jobs rendered by
worker processes on the backfill lane, while uploads, overwrites, deletes and crashes go on;
then the checks of what must hold (:func:`backfill_checks`).

The deployment is what Lambda does: new workers start with the new set (the
``ACTIVE_RECIPES`` setting), the old ones finish the batch they hold. The lane's workers
(``cfg.backfill_workers``, its ``MaximumConcurrency``) run at a lower CPU priority: on Lambda
they are sandboxes of their own, here they share two cores with the upload workers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import statistics
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Final

from mediajobs.adapters.assets import asset_of_image
from mediajobs.domain.assets import FINAL_STATES, AssetState
from mediajobs.domain.backfill import BackfillState, document
from mediajobs.domain.keys import KEY_ALGORITHM_VERSION
from mediajobs.local.embedded import LocalStack
from mediajobs.local.storm.accounting import duplicate_renders, rerenders_after_collection
from mediajobs.local.storm.checks import asset_views
from mediajobs.local.storm.config import StormConfig
from mediajobs.local.storm.plan import is_video, planned_keys
from mediajobs.local.storm.pool import WorkerPool
from mediajobs.local.streams import stream_records
from mediajobs.settings import Settings

log = logging.getLogger(__name__)

#: The image recipes the storm's deployment makes active.
NEW_IMAGE_SET: Final = ("moderation-image@1", "web-image@2", "image-placeholder@1")
#: ``RETIRE_GRACE_SECONDS`` in the storm: the old sets are collected this long after a switch.
RETIRE_S: Final = 2
#: The checks :func:`backfill_checks` adds to a storm's (each 0 when it holds).
BACKFILL_CHECKS: Final = (
    "backfill_not_done",
    "assets_not_on_new_set",
    "new_set_duplicate_renders",
    "old_sets_left",
    "assets_without_ready_outputs",
    "new_set_not_told_ready",
    "backfill_counts_wrong",
)
#: Seconds between two runs of the backfill's scan (the schedule's ``rate(1 minute)``, sooner).
SCAN_EVERY_S: Final = 1.0


def new_active_document() -> str:
    """The active set the storm deploys: today's, its image recipes :data:`NEW_IMAGE_SET`."""
    from mediajobs.bootstrap import active_recipes

    active = {media: [r.ref for r in recipes] for media, recipes in active_recipes().items()}
    active["image"] = list(NEW_IMAGE_SET)
    return json.dumps(active, sort_keys=True)


def deployed_settings(settings: Settings, cfg: StormConfig) -> Settings:
    """What the storm's deployment changes in the workers' ``settings``: the active set
    (``--backfill-at``) or the key algorithm, from 1 to the keyed one (``--key-change-at``)."""
    if cfg.key_change_at:
        return dataclasses.replace(settings, key_algorithm=KEY_ALGORITHM_VERSION)
    return dataclasses.replace(settings, active_recipes=new_active_document())


class StormBackfill:
    """The deployment at ``cfg.backfill_at`` (or ``cfg.key_change_at``) writes and the
    backfill after it.

    Attributes
    ----------
    old_settings: the workers' settings before the deployment.
    settings: the deployed workers' (and the scan's) settings.
    backfill_id: the backfill's id, once started.
    deployed_at, done_at: Unix seconds of the deployment and of the backfill's end (``deployed``,
        when given, is set at the deployment: the feeder's writes held for it go on).
    lane: the lane's worker pool, once deployed.
    failed_scans: runs of the scan that raised (the next run goes on).
    """

    def __init__(
        self,
        stack: LocalStack,
        settings: Settings,
        cfg: StormConfig,
        workers: WorkerPool,
        folder: Path,
        *,
        deployed: threading.Event | None = None,
    ):
        self._stack, self._cfg, self._workers, self._folder = stack, cfg, workers, folder
        self._deployed = deployed
        self.old_settings = settings
        self.settings = dataclasses.replace(
            deployed_settings(settings, cfg),
            backfill_queue_arn=stack.backfill_queue_arn,
            retire_grace_s=RETIRE_S,
            backfill_rate_per_s=100.0,
            worker_timeout_s=cfg.timeout_s,  # the old workers' batches are over by then
        )
        self.backfill_id: str | None = None
        self.deployed_at: float | None = None
        self.done_at: float | None = None
        self.lane: WorkerPool | None = None
        self.failed_scans = 0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._backfiller: Any = None

    def maybe_deploy(self, sent: int, feeding: bool, backlog: int) -> None:
        """Deploy once ``sent`` writes were made (or the plan is over). A key change waits
        until no event is left for the old workers to pick up (``backlog``: the jobs queue's
        visible messages; those in flight cross the deployment), so that sets under the old
        keys exist for its backfill to move."""
        if self.deployed_at is not None:
            return
        due = sent >= (self._cfg.backfill_at or self._cfg.key_change_at) or not feeding
        if due and (not self._cfg.key_change_at or backlog == 0):
            self._deploy()

    def _deploy(self) -> None:
        from mediajobs.bootstrap import build_backfiller
        from mediajobs.local.session import local_adapters

        self._workers.redeploy(self.settings)
        self.lane = WorkerPool(
            self._stack, self.settings, self._cfg, self._folder, lane=True, count=self._cfg.backfill_workers
        )
        adapters = dataclasses.replace(
            local_adapters(self._stack, self.settings),
            assets=self._stack.assets(writer=True),
            backfills=self._stack.backfills(),
        )
        self._backfiller = build_backfiller(self.settings, adapters)
        started, _ = self._backfiller.start()
        self.backfill_id = started.id
        self.deployed_at = time.time()
        if self._deployed is not None:
            self._deployed.set()  # the writes held for the deployment go on
        self._thread = threading.Thread(target=self._scan, name="backfill", daemon=True)
        self._thread.start()

    def _scan(self) -> None:
        while not self._stopped.wait(SCAN_EVERY_S):
            self.tick()

    def tick(self) -> None:
        """One run of the scan (the schedule's); counts a failure and goes on."""
        try:
            for b in self._backfiller.tick(budget_s=SCAN_EVERY_S):
                if b.id == self.backfill_id and b.state == BackfillState.DONE and self.done_at is None:
                    self.done_at = time.time()
        except Exception:  # noqa: BLE001 - counted: the next run goes on, the checks judge
            log.exception("a backfill scan failed")
            self.failed_scans += 1

    def settled(self) -> bool:
        """Whether nothing of the backfill is left: deployed, and done."""
        return self.deployed_at is not None and self.done_at is not None

    def replace_dead(self) -> None:
        """Replace the lane's workers that died."""
        if self.lane is not None:
            self.lane.replace_dead()

    def stop(self) -> None:
        """Stop the scan and the lane's workers."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self.lane is not None:
            self.lane.stop()

    def status(self) -> dict[str, Any] | None:
        """The backfill's status document, once started."""
        if self.backfill_id is None:
            return None
        found = self._backfiller.status(self.backfill_id)
        return document(found, now_s=time.time()) if found is not None else None

    @property
    def spawned(self) -> int:
        """The lane's worker processes started, replacements included."""
        return self.lane.spawned if self.lane is not None else 0


def _all_keys(contents: list[bytes], settings: Settings) -> set[str]:
    """Every job key ``settings`` (their active set, policy and key scheme) plan for ``contents``."""
    from mediajobs.bootstrap import active_recipes

    planned = planned_keys(contents, active_recipes(settings.active_recipes), settings)
    return {key for keys in planned.values() for key in keys}


def new_set_keys(contents: list[bytes], backfill: StormBackfill) -> set[str]:
    """The keys of the jobs the deployment added: planned after it, not before (the new
    recipe's jobs; every job, after a key change)."""
    return _all_keys(contents, backfill.settings) - _all_keys(contents, backfill.old_settings)


def old_set_keys(contents: list[bytes], backfill: StormBackfill) -> set[str]:
    """The keys of the jobs the deployment retired: planned before it, not after."""
    return _all_keys(contents, backfill.old_settings) - _all_keys(contents, backfill.settings)


def expected_jobs(contents: list[bytes], settings: Settings) -> dict[tuple[str, str], list[str]]:
    """What each content's asset serves under ``settings``: by (SHA-256, media), its job
    keys in the set's order."""
    from mediajobs.bootstrap import active_recipes
    from mediajobs.domain.keys import sha256_hex
    from mediajobs.domain.plan import Where, plan_jobs

    recipes = active_recipes(settings.active_recipes)
    where = Where("storm", "originals/storm", settings.derivatives_prefix, settings.policy_version, settings.keys)
    expected: dict[tuple[str, str], list[str]] = {}
    for content in contents:
        sha, media = sha256_hex(content), "video" if is_video(content) else "image"
        expected[(sha, media)] = [job.key for job in plan_jobs(sha, media, {media: recipes.get(media, [])}, where)]
    return expected


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def backfill_checks(
    stack: LocalStack,
    backfill: StormBackfill,
    *,
    live_keys: set[str],
    contents: list[bytes],
    events: list[dict[str, Any]],
    put_at: dict[tuple[str, str | None], float],
) -> tuple[dict[str, int], dict[str, Any]]:
    """What must hold once a storm with a backfill is over, counted (0 each when it holds),
    and its figures.

    * ``backfill_not_done``: 1 unless the backfill ended ``done``;
    * ``assets_not_on_new_set``: live assets that ended (``ready``, ``failed``, ``rejected``)
      without the jobs the deployed settings plan for their content (:data:`NEW_IMAGE_SET`'s; every job at its new key
      after a key change), or still holding a ``next`` set;
    * ``new_set_duplicate_renders``: commits of a new-set job beyond its first (renders
      equal the unique (content, new recipe) pairs);
    * ``old_sets_left``: derivative prefixes of the retired jobs (the old recipe's; every
      old key after a key change) still in the bucket after the last collection;
    * ``backfill_counts_wrong``: counts that cannot be (``total`` not ``enqueued + reused``,
      ``remaining`` not what is left of ``total``, or ``done`` with jobs remaining), or
      ``done`` beyond the new-set jobs the ledger has done;
    * ``assets_without_ready_outputs``: writes that took a ``ready`` version of an asset
      to another state for the same version (read from the assets table's stream);
    * ``new_set_not_told_ready``: live ``ready`` assets whose current version was never told
      ``Asset Ready`` with the new set (the outbox's notifications). That each episode --
      a version entering ``ready`` with a serving set, or made current again -- is told
      exactly once is the notification checks' ``versions_not_told_once``.

    The figures: renders and unique pairs of the new set, and upload-to-ready latency p50
    and p95 (seconds) of the uploads before the deployment and of those during the
    backfill, with ``p95_ratio`` = during / before.
    """
    checks = dict.fromkeys(BACKFILL_CHECKS, 0)
    status = backfill.status()
    checks["backfill_not_done"] = int(status is None or status["state"] != "done")
    if status is not None:
        c = status
        ended = c["done"] + c["reused"] + c["failed"] + c["dropped"]
        consistent = c["total"] == c["enqueued"] + c["reused"] and c["remaining"] == c["total"] - ended
        checks["backfill_counts_wrong"] = int(not consistent or (c["state"] == "done" and c["remaining"] != 0))
    model = stack.asset_models().asset
    views = asset_views(stack)
    expected = expected_jobs(contents, backfill.settings)
    for key in live_keys:
        view = views.get(key)
        if view is None or view.state not in FINAL_STATES or view.sha256 is None or view.media is None:
            continue
        if [j.job_key for j in view.jobs] != expected.get((view.sha256, view.media)) or view.next:
            checks["assets_not_on_new_set"] += 1
    new_keys = new_set_keys(contents, backfill)
    committed = Counter(e["job_key"] for e in events if e["event"] == "committed" and e.get("job_key") in new_keys)
    # As the storm counts them (accounting.duplicate_renders): a render of a job committed
    # already, or while another worker holds it; not a render again after its collection.
    of_new = [e for e in events if e.get("job_key") in new_keys or e["event"] in ("crash", "record")]
    checks["new_set_duplicate_renders"] = duplicate_renders(of_new)
    if status is not None:
        rows = stack.ledger().find(sorted(new_keys)) if new_keys else {}
        ledger_done = sum(1 for row in rows.values() if row.state == "done")
        checks["backfill_counts_wrong"] |= int(status["done"] > ledger_done)
    old_keys = old_set_keys(contents, backfill)
    s3 = stack.client("s3")
    left: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix="derivatives/"):
        left.update(item["Key"].split("/")[1] for item in page.get("Contents", ()))
    referenced = {j.job_key for v in views.values() if v.state != AssetState.DELETED for j in v.jobs}
    checks["old_sets_left"] = len((left & old_keys) - referenced)

    # The assets table's stream: gaps, and when each upload's version first became ready.
    streams = stack.client("dynamodbstreams")
    arn = stack.client("dynamodb").describe_table(TableName=stack.assets_table_name)["Table"]["LatestStreamArn"]
    ready_at: dict[tuple[str, str | None], float] = {}
    for record in stream_records(streams, arn):
        new = asset_of_image(model, record["dynamodb"].get("NewImage"))
        old = asset_of_image(model, record["dynamodb"].get("OldImage"))
        if new is None:
            continue
        unready = old is not None and old.state == AssetState.READY and new.state != AssetState.READY
        if unready and old is not None and new.state != AssetState.DELETED and new.version == old.version:
            checks["assets_without_ready_outputs"] += 1
        if new.state == AssetState.READY:
            when = record["dynamodb"]["ApproximateCreationDateTime"]
            ready_at.setdefault((new.key, new.version.version_id), when.timestamp())

    # Asset Ready of the set each live asset serves, per current version: from the outbox.
    told: dict[tuple[str, str], set[tuple[str, ...]]] = defaultdict(set)
    readies: dict[str, list[tuple[str, str]]] = defaultdict(list)  # every Ready of a key: version, set
    for item in stack.outbox_model().scan(consistent_read=True):
        body = json.loads(item.payload) if isinstance(item.payload, str) else dict(item.payload or {})
        asset = body.get("asset", {})
        serving = {r: j for r, j in (asset.get("recipes") or {}).items() if j.get("serving", True)}
        version = str((asset.get("version") or {}).get("version_id"))
        if body.get("type") == "Asset Ready":
            readies[str(asset.get("key"))].append((version, "+".join(sorted(serving))))
            told[(str(asset.get("key")), version)].add(tuple(sorted(str(j.get("job_key")) for j in serving.values())))
    wrong: list[dict[str, Any]] = []
    for key in sorted(live_keys):
        view = views.get(key)
        if view is None or view.state != AssetState.READY or view.sha256 is None or view.media is None:
            continue
        wanted = tuple(sorted(expected.get((view.sha256, view.media)) or ()))
        if wanted not in told[(key, str(view.version.version_id))]:
            checks["new_set_not_told_ready"] += 1
            wrong.append({"key": key, "version": view.version.version_id, "readies": readies[key]})

    deployed, done = backfill.deployed_at or 0.0, backfill.done_at or time.time()
    before: list[float] = []
    during: list[float] = []
    for (put_key, put_version), put in put_at.items():
        ready_s = ready_at.get((put_key, put_version))
        if ready_s is None:
            continue  # overwritten or deleted before it was ready
        if put < deployed:
            before.append(ready_s - put)
        elif put <= done:
            during.append(ready_s - put)
    p95_before, p95_during = _percentile(before, 95), _percentile(during, 95)
    figures = {
        "id": status["id"] if status else None,
        "state": status["state"] if status else None,
        "counts": {k: status[k] for k in ("total", "enqueued", "done", "reused", "failed", "dropped")}
        if status
        else {},
        "new_set_renders": sum(committed.values()),
        "new_set_unique_pairs": len(committed),
        # A job collected (every asset of it overwritten or deleted), then uploaded again.
        "new_set_rerenders_after_collection": rerenders_after_collection(of_new),
        "seconds": round(done - deployed, 1) if deployed else 0.0,
        "latency_s": {
            "before": {"uploads": len(before), "p50": round(_percentile(before, 50), 2), "p95": round(p95_before, 2)},
            "during": {"uploads": len(during), "p50": round(_percentile(during, 50), 2), "p95": round(p95_during, 2)},
        },
        "p95_ratio": round(p95_during / p95_before, 3) if p95_before > 0 and during else None,
        "lane_workers": backfill.spawned,
        "failed_scans": backfill.failed_scans,
        "new_set_not_told_ready": wrong[:5],  # for a post-mortem
    }
    return checks, figures
