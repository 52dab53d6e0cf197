"""The storm's worker processes, in the parent: one per slot, started with the ``spawn``
method (nothing inherited: each is given its settings, the stack and the storm's shape), a
dead one replaced in its slot as Lambda starts a new execution environment, all told to
stop at the end by a file beside each one's log."""

from __future__ import annotations

import dataclasses
import multiprocessing
from pathlib import Path
from typing import Any

from mediajobs.local.embedded import LocalStack
from mediajobs.local.storm.config import StormConfig
from mediajobs.local.storm.worker import worker_main, worker_work_dir
from mediajobs.settings import Settings


class WorkerPool:
    """``count`` worker processes (default ``cfg.workers``;
    :func:`~mediajobs.local.storm.worker.worker_main`), started at construction, each
    logging to ``folder/<name>-<slot>-<spawn>.jsonl`` and working in its slot's folder
    (:func:`~mediajobs.local.storm.worker.worker_work_dir`).

    Parameters
    ----------
    lane: the workers poll the backfill lane instead of the jobs queue (the worker
        function's second event source mapping, ``BackfillLane``).

    Attributes
    ----------
    spawned: worker processes started so far, replacements included.
    killed: workers :meth:`stop` had to kill (they may have died holding a claim).
    """

    def __init__(
        self,
        stack: LocalStack,
        settings: Settings,
        cfg: StormConfig,
        folder: Path,
        *,
        lane: bool = False,
        count: int | None = None,
    ) -> None:
        self._stack = stack
        self._settings = settings
        self._cfg = cfg
        self._folder = folder
        self._lane = lane
        self._name = "lane" if lane else "worker"
        self._count = cfg.workers if count is None else count
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: dict[int, tuple[Any, str]] = {}
        self._retired: list[tuple[Any, str]] = []
        self._deploys = 0
        self.spawned = 0
        self.killed = 0
        for slot in range(self._count):
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        self.spawned += 1
        path = str(self._folder / f"{self._name}-{slot:02d}-{self.spawned:04d}.jsonl")
        # A folder per slot and deployment: a new deployment's workers start while the old
        # ones finish (each empties its own folder when it starts).
        work_dir = worker_work_dir(self._folder, slot + 100 * self._deploys + (50 if self._lane else 0))
        work_dir.mkdir(exist_ok=True)
        settings = dataclasses.replace(self._settings, work_dir=str(work_dir))
        p = self._ctx.Process(
            target=worker_main,
            args=(slot, self.spawned, settings, self._stack, self._cfg, path, self._lane),
            daemon=True,
        )
        p.start()
        self._procs[slot] = (p, path)

    def redeploy(self, settings: Settings) -> None:
        """A deployment: new workers with ``settings`` start in every slot, and the old ones
        are told to stop after their poll (they finish the batch they hold, as Lambda lets
        an old version's invocations finish)."""
        for _, path in self._procs.values():
            Path(path).with_suffix(".stop").touch()
        self._retired.extend(self._procs.values())
        self._procs = {}
        self._settings = settings
        self._deploys += 1
        for slot in range(self._count):
            self._spawn(slot)

    def replace_dead(self) -> None:
        """Start a new worker in the slot of each one that is no longer alive (a crash)."""
        for slot, (p, _) in list(self._procs.items()):
            if not p.is_alive():
                self._spawn(slot)  # a crashed worker is replaced, as Lambda would

    def stop(self, timeout_s: float = 30) -> None:
        """Tell every worker to stop after its poll; wait ``timeout_s`` for each, then kill it."""
        for _, path in self._procs.values():
            Path(path).with_suffix(".stop").touch()
        for p, _ in [*self._retired, *self._procs.values()]:
            p.join(timeout=timeout_s)
            if p.is_alive():
                p.kill()
                self.killed += 1
