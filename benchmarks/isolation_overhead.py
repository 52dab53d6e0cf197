"""Benchmark: what the bounded render adds per image, in CPU, over rendering in-process.

One run, one worker process, the ``web-image`` variants of ``--images`` photos (the JPEGs
of ``tests/media/photos/`` up to ``--max-kb``, in turn: by default the 100x68 one, so that
the render is small beside what the isolation adds) per mode, the modes interleaved in
``--rounds`` rounds:

* ``in-process``: ``ImageVariantsStep`` run in this process (warmed once before: a worker
  has imported it at its cold start);
* ``forked``: ``IsolatedStep`` as production runs it, each render in a child forked from
  the thread's zygote; the zygote is started inside the measure (its interpreter start and
  imports are spread over the round's images) and stopped at the round's end;
* ``one-shot``: ``IsolatedStep(zygote=False)``: a fresh interpreter per image (the render
  child before the zygote).

CPU is this process's own (``RUSAGE_SELF``) plus its reaped children's (``RUSAGE_CHILDREN``,
which holds a zygote's render children once the zygote is reaped: ``getrusage(2)``). The
table gives, per mode, the median over the rounds of CPU ms and wall ms per image, and the
overhead over in-process (ms of CPU per image, and the CPU ratio to in-process).

It is a benchmark, not a test: it always exits 0.

    .venv/bin/python benchmarks/isolation_overhead.py [--images 30] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
ALL_PHOTOS = sorted((REPO_ROOT / "tests" / "media" / "photos").glob("*.jpg"))
IMAGE_VARIANTS = "mediajobs.steps.image_variants:ImageVariantsStep"
MODES = ("in-process", "forked", "one-shot")


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _steps() -> dict[str, Any]:
    from mediajobs.adapters.isolated import IsolatedStep, StepSpec
    from mediajobs.bootstrap import image_limits
    from mediajobs.settings import Settings
    from mediajobs.steps.image_variants import ImageVariantsStep

    settings = Settings()
    limits = image_limits(settings)
    bounded = {"memory_budget_mb": settings.decode_memory_mb, "timeout_s": 300}
    return {
        "in-process": ImageVariantsStep(**limits),
        "forked": IsolatedStep(StepSpec(IMAGE_VARIANTS, limits), **bounded),
        "one-shot": IsolatedStep(StepSpec(IMAGE_VARIANTS, limits), zygote=False, **bounded),
    }


def _round(step: Any, images: int, params: Any, photos: list[Path]) -> tuple[float, float]:
    """CPU s and wall s for ``images`` renders with ``step`` (its zygote stopped after)."""
    from mediajobs.adapters.isolated import close_zygote
    from mediajobs.domain.jobs import RenderContext

    cpu, start = _cpu_s(), time.perf_counter()
    for n in range(images):
        with tempfile.TemporaryDirectory(prefix="mj-overhead-") as out:
            step.run(photos[n % len(photos)], params, RenderContext(), Path(out))
    wall = time.perf_counter() - start
    close_zygote()  # reaped: its render children's CPU is now in RUSAGE_CHILDREN
    return _cpu_s() - cpu, wall


def measure(images: int, rounds: int, max_kb: int) -> dict[str, Any]:
    from mediajobs.bootstrap import load_recipe

    photos = [p for p in ALL_PHOTOS if p.stat().st_size <= max_kb * 1024]
    params = load_recipe("web-image", 1).params
    steps = _steps()
    _round(steps["in-process"], 1, params, photos)  # the worker's own imports, paid at its cold start
    taken: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            taken[mode].append(_round(steps[mode], images, params, photos))
    per_image = {
        mode: {
            "cpu_ms": round(statistics.median(c for c, _ in runs) * 1000 / images, 1),
            "wall_ms": round(statistics.median(w for _, w in runs) * 1000 / images, 1),
        }
        for mode, runs in taken.items()
    }
    base = per_image["in-process"]["cpu_ms"]
    for mode in MODES[1:]:
        cpu = per_image[mode]["cpu_ms"]
        per_image[mode]["cpu_added_ms"] = round(cpu - base, 1)
        per_image[mode]["cpu_ratio"] = round(cpu / base, 2) if base else None
    return {"images": images, "rounds": rounds, "photos": [p.name for p in photos], "per_image": per_image}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=30, help="renders per mode and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (modes interleaved); medians are given")
    parser.add_argument("--max-kb", type=int, default=100, help="largest photo taken, KiB")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.images, args.rounds, args.max_kb)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    photos = ", ".join(result["photos"])
    print(f"per image, ms (median of {args.rounds} rounds of {args.images} renders of {photos})")
    print(f"{'mode':<12} {'cpu':>8} {'wall':>8} {'cpu added':>10} {'cpu ratio':>10}")
    for mode, row in result["per_image"].items():
        added, ratio = row.get("cpu_added_ms", ""), row.get("cpu_ratio", "")
        print(f"{mode:<12} {row['cpu_ms']:>8} {row['wall_ms']:>8} {added:>10} {ratio:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
