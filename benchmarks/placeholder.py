"""Benchmark: what the ``image.placeholder`` step costs, as a ratio to ``web-image@1``'s render
of the same original measured in the same run.

The placeholder is its own job, so it decodes the original again (the image job's decode is
not shared). Inputs: the generated 24 MP photo-like JPEG of ``images.py`` (in a temporary
folder, deleted afterwards), a real phone JPEG (``phone-jolla.jpg``), the iPhone HEIC and a
PNG made from the generated photo at 3000x2000 (PNG has no reduced decode). Pipelines, each
run in a fresh process (the script re-invokes itself), runs interleaved:

* ``web-image``: ``PillowRenderer(max_pixels).render(...)`` with ``web-image@1``'s variants;
* ``placeholder``: ``ImagePlaceholder(max_pixels).run(...)`` in a 100 px box: the same decode
  (a JPEG at 1/8 scale in the DCT domain: ``Image.draft``), a Lanczos resize to at most
  100x100, the ThumbHash (thash's pure-Python encoder) and the mean colour.

Figures are medians of 5 runs: wall time from the call to its return (imports excluded: in
production both run in the bounded render child, whose start costs both the same,
``peak_memory.py``), and the part of the placeholder's time spent after the decode (the
resize to 100 px, the ThumbHash and the mean colour: ``placeholder_of``).

Then both steps as production runs them (``bootstrap.steps``: each in the bounded render
child, which each pays to start), in this process.

    .venv/bin/python benchmarks/placeholder.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image

REPO_ROOT = Path(__file__).resolve().parents[1]
HEIC = REPO_ROOT / "tests" / "media" / "photos" / "iphone-13-pro-max.heic"
MAX_PIXELS = 50_000_000
REPEATS = 5
PIPELINES = ("web-image", "placeholder")


def _images_module() -> Any:
    """benchmarks/images.py (its generated photo and real photo), loaded from its path."""
    spec = importlib.util.spec_from_file_location("benchmark_images", Path(__file__).with_name("images.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_worker(pipeline: str, source: Path) -> int:
    """Run one pipeline once on ``source`` and print one JSON line (ms, and the hash's ms)."""
    from mediajobs.adapters.imaging import PillowRenderer
    from mediajobs.bootstrap import load_recipe
    from mediajobs.domain.jobs import RenderContext
    from mediajobs.steps import placeholder

    class Params:
        box_px = placeholder.THUMBHASH_MAX_PX

    hash_ms = 0.0
    with tempfile.TemporaryDirectory(prefix="mj-bench-") as tmp:
        if pipeline == "web-image":
            variants = load_recipe("web-image", 1).params.variants
            renderer = PillowRenderer(MAX_PIXELS)
            start = time.perf_counter()
            renderer.render(source, variants, Path(tmp))
        else:
            step = placeholder.ImagePlaceholder(MAX_PIXELS)
            real = placeholder.placeholder_of

            def timed(*args: Any) -> Any:
                nonlocal hash_ms
                begun = time.perf_counter()
                try:
                    return real(*args)
                finally:
                    hash_ms = (time.perf_counter() - begun) * 1000

            placeholder.placeholder_of = timed  # measured, not changed
            start = time.perf_counter()
            step.run(source, Params(), RenderContext(), Path(tmp))
        ms = (time.perf_counter() - start) * 1000
    print(json.dumps({"ms": round(ms, 1), "hash_ms": round(hash_ms, 1)}))
    return 0


def spawn(pipeline: str, source: Path) -> dict[str, Any]:
    """One worker in a fresh interpreter; its JSON result (CalledProcessError if it fails)."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--_worker", pipeline, "--input", str(source)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(source: Path) -> dict[str, dict[str, float]]:
    """Median ms of each pipeline (and the placeholder's hash ms), runs interleaved."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PIPELINES}
    for _ in range(REPEATS):
        for name in PIPELINES:
            runs[name].append(spawn(name, source))
    return {
        name: {"ms": statistics.median(r["ms"] for r in rs), "hash_ms": statistics.median(r["hash_ms"] for r in rs)}
        for name, rs in runs.items()
    }


def measure_bounded(sources: list[tuple[Path, str]]) -> None:
    """Both steps as production registers them (``bootstrap.steps``: each in the bounded render
    child, so each pays the child's start), median ms of :data:`REPEATS` runs in this process."""
    from mediajobs.bootstrap import load_recipe, steps
    from mediajobs.domain.jobs import RenderContext
    from mediajobs.settings import Settings

    registry = steps(Settings())
    recipes = [load_recipe("web-image", 1), load_recipe("image-placeholder", 1)]
    print(f"\nin the bounded render child (bootstrap.steps), median of {REPEATS} runs:")
    print(f"{'input':<44} {'web-image ms':>12} {'placeholder ms':>15} {'ratio':>6}")
    for path, label in sources:
        times: dict[str, list[float]] = {r.ref: [] for r in recipes}
        for _ in range(REPEATS):
            for recipe in recipes:
                with tempfile.TemporaryDirectory(prefix="mj-bench-") as tmp:
                    start = time.perf_counter()
                    registry[recipe.step].run(path, recipe.params, RenderContext(), Path(tmp))
                    times[recipe.ref].append((time.perf_counter() - start) * 1000)
        ours, hashed = (statistics.median(t) for t in times.values())
        print(f"{label:<44} {ours:>12.0f} {hashed:>15.0f} {hashed / ours:>6.2f}")


def run_default() -> int:
    images = _images_module()
    print(f"each figure: median of {REPEATS} runs, each in a fresh process; ratio = placeholder / web-image@1\n")
    print(f"{'input':<44} {'web-image ms':>12} {'placeholder ms':>15} {'resize+hash':>14} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="mj-bench-input-") as tmp:
        generated = Path(tmp) / "generated-24mp.jpg"
        images.make_photo(generated)
        png = Path(tmp) / "generated-6mp.png"
        with Image.open(generated) as im:
            im.draft("RGB", (3000, 2000))
            im.convert("RGB").save(png)
        photo = images.real_photo()
        inputs = [(generated, "generated"), (photo, photo.name), (HEIC, HEIC.name), (png, "generated")]
        inputs = [(path, label) for path, label in inputs if path.is_file()]
        for path, label in inputs:
            result = measure(path)
            ours, hashed = result["web-image"], result["placeholder"]
            print(
                f"{images.describe(path, label):<44} {ours['ms']:>12.0f} {hashed['ms']:>15.0f} "
                f"{hashed['hash_ms']:>14.0f} {hashed['ms'] / ours['ms']:>6.2f}"
            )
        measure_bounded([(path, images.describe(path, label)) for path, label in inputs])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--_worker", choices=PIPELINES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        return run_worker(args._worker, args.input) if args._worker else run_default()
    except subprocess.CalledProcessError as failure:
        print(failure.stderr.strip() or failure, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
