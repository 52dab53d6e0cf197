"""The storm's collection, in the parent process: a run every ``collect_every_s`` with the
storm's short grace while uploads, overwrites and deletes go on, through the real collector
and adapters; each job it collects is an event (``collected``) for the duplicate-render
accounting (:func:`~mediajobs.local.storm.accounting.duplicate_renders`)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from mediajobs.local.embedded import LocalStack
from mediajobs.local.session import configure_worker_logs, local_adapters
from mediajobs.local.storm.config import StormConfig
from mediajobs.service_layer.ports import ObjectStore
from mediajobs.settings import Settings


class Collections:
    """The storm's collection runs on ``stack``.

    Attributes
    ----------
    events: a ``collected`` event per job collected (``job_key``, ``t`` Unix seconds, ``pid``).
    report: the runs' counts added up (``collected``, ``deleted_objects`` ...).
    failed_runs: runs that raised (counted; the next run goes on).
    """

    def __init__(self, stack: LocalStack, settings: Settings, cfg: StormConfig) -> None:
        configure_worker_logs(cfg.log_level)  # stderr: stdout holds the one JSON object

        self._settings = settings
        adapters = local_adapters(stack, settings)
        self._adapters = dataclasses.replace(adapters, store=_RecordingDeletes(adapters.store, self._collected))
        self.events: list[dict[str, Any]] = []
        self.report: dict[str, int] = defaultdict(int)
        self.failed_runs = 0

    def _collected(self, prefix: str) -> None:
        job = prefix.rstrip("/").rsplit("/", 1)[-1]
        self.events.append({"event": "collected", "job_key": job, "t": time.time(), "pid": os.getpid()})

    def run(self, *, grace_s: int) -> None:
        """One collection run, collecting what was released ``grace_s`` seconds ago or
        more; a transient failure is counted and the next run goes on."""
        from mediajobs.bootstrap import build_collector

        try:
            report = build_collector(self._settings, self._adapters).run(grace_s=grace_s, limit=10_000)
        except Exception:  # noqa: BLE001 - counted: the storm goes on, the end checks judge
            self.failed_runs += 1
            return
        for name, value in report.to_json().items():
            self.report[name] += value


class _RecordingDeletes:
    """An object store whose ``delete_prefix`` also tells ``on_delete`` the prefix."""

    def __init__(self, inner: ObjectStore, on_delete: Callable[[str], None]) -> None:
        self._inner = inner
        self._on_delete = on_delete

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def delete_prefix(self, bucket: str, prefix: str, *, first: str | None = None) -> int:
        """As ``inner.delete_prefix``; then ``on_delete(prefix)``."""
        deleted = self._inner.delete_prefix(bucket, prefix, first=first)
        self._on_delete(prefix)
        return deleted
