"""Run one call on many threads at once, for races against the embedded AWS."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def run_together(call: Callable[[int], T], threads: int = 10) -> list[T]:
    """``call(n)`` for n in ``range(threads)``, each on its own thread, all released by one
    barrier; the results in the order of n. An exception in any call is raised here."""
    barrier = threading.Barrier(threads)

    def released(n: int) -> T:
        barrier.wait()
        return call(n)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(released, range(threads)))
