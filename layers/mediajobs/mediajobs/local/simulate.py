"""``mediajobs simulate``'s storm, by the names tests, benchmarks and scripts import:
its parts live in :mod:`mediajobs.local.storm` (see its docstring)."""

from __future__ import annotations

from mediajobs.local.storm.accounting import copy_deliveries, duplicate_deliveries, duplicate_renders
from mediajobs.local.storm.checks import end_checks
from mediajobs.local.storm.config import StormConfig
from mediajobs.local.storm.feeder import BACKLOG, FEED_WAVE
from mediajobs.local.storm.notification_checks import notification_checks, watch_asset_writes
from mediajobs.local.storm.plan import Upload, plan
from mediajobs.local.storm.run import run_storm
from mediajobs.local.storm.worker import (
    ASSET_CRASH_POINTS,
    CRASH_EXIT,
    CRASH_POINTS,
    CountingStore,
    asset_crash_point,
    crash_point,
    worker_work_dir,
)

__all__ = [
    "ASSET_CRASH_POINTS",
    "BACKLOG",
    "CRASH_EXIT",
    "CRASH_POINTS",
    "FEED_WAVE",
    "CountingStore",
    "StormConfig",
    "Upload",
    "asset_crash_point",
    "copy_deliveries",
    "crash_point",
    "duplicate_deliveries",
    "duplicate_renders",
    "end_checks",
    "notification_checks",
    "plan",
    "run_storm",
    "watch_asset_writes",
    "worker_work_dir",
]
