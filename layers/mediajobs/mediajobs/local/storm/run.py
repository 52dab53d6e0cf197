"""The storm, start to end (:func:`run_storm`): the embedded AWS, the plan fed to the
bucket while worker processes run the real handler, the collection and the dispatcher
running beside them, and once all is settled the last collection and dispatch, the checks
and the summary."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediajobs.domain.keys import UNKEYED_ALGORITHM, sha256_hex
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from mediajobs.local.notifications import LocalNotifications
from mediajobs.local.runner import QUEUE_DEPTH_ATTRIBUTES
from mediajobs.local.storm.accounting import read_logs
from mediajobs.local.storm.backfill import RETIRE_S, StormBackfill, backfill_checks
from mediajobs.local.storm.checks import end_checks
from mediajobs.local.storm.collection import Collections
from mediajobs.local.storm.config import StormConfig
from mediajobs.local.storm.feeder import Feeder
from mediajobs.local.storm.notification_checks import notification_checks, watch_asset_writes
from mediajobs.local.storm.plan import is_known_bad, plan
from mediajobs.local.storm.pool import WorkerPool
from mediajobs.local.storm.summary import summarize

#: How long nothing may be in flight, once every upload is sent, for the storm to be settled.
SETTLED_S = 2


def run_storm(cfg: StormConfig, template_path: Path | None = None, events_log: Path | None = None) -> dict[str, Any]:
    """Run the storm; returns the summary (:func:`~mediajobs.local.storm.summary.summarize`;
    the package's docstring and docs/local.md say what it holds).

    Parameters
    ----------
    template_path: the SAM template the embedded stack is built from (default: the repository's).
    events_log: where to write every event the workers and the collection logged
        (``claimed``, ``render_started``, ``committed``, ``crash``, ``record``, ``collected``
        ...), one JSON object per line in time order, to find out why a check failed.
    """
    started = time.monotonic()
    hold_s = cfg.conflict_hold_ms / 1000 if cfg.conflict_hold_ms > 0 else None
    aws = EmbeddedAws(template_path, transaction_hold_s=hold_s)
    folder = Path(tempfile.mkdtemp(prefix="mediajobs.storm-"))  # never mediajobs-*, a work folder's name
    try:
        stack = aws.__enter__()
        # The workers' settings, passed to each as an argument (short leases and margins).
        settings = stack.settings(lease_s=cfg.lease_s, deadline_margin_s=2, image_job_s=2, retry_base_s=1)
        if cfg.video_rate:  # the storm's 3 s videos split in 1 s segments
            settings = dataclasses.replace(settings, segment_s=1.0, split_above_s=0.001)
        if cfg.key_change_at:  # a stack from before the keyed algorithm, until its deployment
            settings = dataclasses.replace(settings, key_algorithm=UNKEYED_ALGORITHM)
        sqs = stack.client("sqs")
        watch_asset_writes(stack)
        sqs.set_queue_attributes(QueueUrl=stack.queue_url, Attributes={"VisibilityTimeout": str(cfg.visibility_s)})
        if stack.backfill_queue_url:
            visibility = {"VisibilityTimeout": str(cfg.visibility_s)}
            sqs.set_queue_attributes(QueueUrl=stack.backfill_queue_url, Attributes=visibility)
        # A key change waits for the old workers to be idle: the writes after it wait for it.
        feeder = Feeder(stack, *plan(cfg), pause_at=cfg.key_change_at)  # hears S3's events from now on
        workers = WorkerPool(stack, settings, cfg, folder)
        deploys = cfg.backfill_at or cfg.key_change_at
        backfill = StormBackfill(stack, settings, cfg, workers, folder, deployed=feeder.resume) if deploys else None
        deadline = time.monotonic() + cfg.max_seconds
        feeder.start(deadline)
        collections = Collections(stack, settings, cfg)
        collecting = _Every(lambda: collections.run(grace_s=cfg.grace_s), cfg.collect_every_s, "collection")
        with LocalNotifications(stack) as told:
            dispatching = _Every(told.run, cfg.dispatch_every_s, "dispatch")
            _settle(sqs, stack, workers, feeder, deadline, backfill)
            timed_out = time.monotonic() >= deadline
            if backfill is not None:
                backfill.stop()
            workers.stop()
            collecting.stop(timeout_s=60)
            feeder.stop_listening()
            # Everything is settled: the last collection has no grace (nothing can revive now),
            # once the leases of workers that died holding a claim have run out (their renders
            # were abandoned: an unreferenced job whose lease is live is left for a later run).
            logged = list(read_logs(folder))
            pools = [workers] + ([backfill.lane] if backfill is not None and backfill.lane is not None else [])
            time.sleep(_until_leases_end_s(logged, pools, cfg.lease_s))
            if backfill is not None:  # the retired sets are held RETIRE_S after the last switch
                time.sleep(RETIRE_S + 1)
            collections.run(grace_s=0)
            dispatching.stop(timeout_s=120)
            told.run()  # everything committed is in the stream now: the last dispatch

            events = sorted([*logged, *collections.events], key=lambda e: e["t"])
            if events_log is not None:
                with open(events_log, "w", encoding="utf-8") as log_out:
                    log_out.writelines(json.dumps(e) + "\n" for e in events)
            refused = frozenset(sha256_hex(c) for c in feeder.contents if is_known_bad(c))
            end = end_checks(stack, {u.key for u in feeder.uploads}, videos_split=cfg.video_rate > 0, rejected=refused)
            told_checks = notification_checks(stack, told)
            backfilled = None
            if backfill is not None:
                live = {u.key for u in feeder.uploads} - _deleted_keys(stack)
                backfilled = backfill_checks(
                    stack, backfill, live_keys=live, contents=feeder.contents, events=events, put_at=feeder.put_at
                )
        summary = summarize(
            feeder,
            collections,
            events,
            end=end,
            told=told_checks,
            dlq=_messages(sqs, stack.dlq_url),
            worker_processes=workers.spawned,
            timed_out=timed_out,
            conflicts=aws.conflicts,
            started=started,
            settings=settings,
            backfill=backfilled,
        )
        return summary
    finally:
        aws.__exit__(None, None, None)
        shutil.rmtree(folder, ignore_errors=True)


def _settle(
    sqs: Any, stack: LocalStack, workers: WorkerPool, feeder: Feeder, deadline: float, backfill: StormBackfill | None
) -> None:
    """Replace the workers that die until every upload is sent and nothing has been in the
    queues for :data:`SETTLED_S` seconds (with a backfill: deployed when its time came, and
    done), or until ``deadline`` (``time.monotonic()``)."""
    empty_since = None
    while time.monotonic() < deadline:
        workers.replace_dead()
        settled = True
        if backfill is not None:
            backfill.maybe_deploy(feeder.sent, feeder.is_alive(), _messages(sqs, stack.queue_url))
            backfill.replace_dead()
            lane = _queue_depth(sqs, stack.backfill_queue_url) if stack.backfill_queue_url else 0
            settled = backfill.settled() and lane == 0
        if not feeder.is_alive() and settled and _queue_depth(sqs, stack.queue_url) == 0:
            empty_since = empty_since or time.monotonic()
            if time.monotonic() - empty_since > SETTLED_S:  # settled: nothing in flight for 2 s
                break
        else:
            empty_since = None
        time.sleep(0.5)


def _until_leases_end_s(logged: list[dict[str, Any]], pools: list[WorkerPool], lease_s: int) -> float:
    """Seconds from now until the leases of every worker (of ``pools``: the upload workers,
    the backfill lane's) that died holding a claim have run out (plus 1 s): ``lease_s``
    after the last crash the workers' logs show (a lease ends at most ``lease_s`` after its
    last renewal, before the crash). When a worker died without logging its crash, or was
    killed at the end, the whole ``lease_s`` + 1 from now."""
    crashes = [e["t"] for e in logged if e["event"] == "crash"]
    spawned = sum(pool.spawned for pool in pools)
    replaced = spawned - len({e["pid"] for e in logged if e["event"] == "stopped"})
    if any(pool.killed for pool in pools) or replaced > len(crashes):
        return lease_s + 1.0
    return max(0.0, max(crashes, default=0.0) + lease_s + 1 - time.time())


def _queue_depth(sqs: Any, queue_url: str) -> int:
    """Every message ``queue_url`` holds: visible, in flight and delayed."""
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(QUEUE_DEPTH_ATTRIBUTES))["Attributes"]
    return sum(int(attrs.get(name, 0)) for name in QUEUE_DEPTH_ATTRIBUTES)


def _messages(sqs: Any, queue_url: str) -> int:
    """The visible messages of ``queue_url`` (the dead-letter queue's: all it holds)."""
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attrs["Attributes"]["ApproximateNumberOfMessages"])


class _Every:
    """Calls ``run`` every ``period_s`` seconds, the first call ``period_s`` from now, from
    a daemon thread named ``name`` until :meth:`stop` (the storm's collections and
    dispatches while it goes on)."""

    def __init__(self, run: Callable[[], None], period_s: float, name: str) -> None:
        self._run = run
        self._period_s = period_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._period_s):
            self._run()

    def stop(self, timeout_s: float) -> None:
        """Make no further call; wait up to ``timeout_s`` for a call under way to end."""
        self._stopped.set()
        self._thread.join(timeout=timeout_s)


def _deleted_keys(stack: LocalStack) -> set[str]:
    """The keys S3 serves no current version of (deleted), under ``originals/``."""
    s3 = stack.client("s3")
    served: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix="originals/"):
        served.update(item["Key"] for item in page.get("Contents", ()))
    every: set[str] = set()
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=stack.bucket, Prefix="originals/"):
        every.update(v["Key"] for v in page.get("Versions", ()))
        every.update(m["Key"] for m in page.get("DeleteMarkers", ()))
    return every - served
