"""Benchmark: ``PillowRenderer`` against a naive Pillow pipeline, on the recipe ``web-image@1``.

Inputs: a generated 24 MP photo-like JPEG (6000x4000, q90, in a temporary folder, deleted
afterwards) and a real phone photo. Pipelines:

* ``naive``: ``Image.open``, full decode (``convert("RGB")``), one Lanczos resize per variant
  from the full-size image, same encoder settings as ours.
* ``ours``: ``PillowRenderer(max_pixels=50_000_000).render(...)`` (JPEG ``draft``, resize cascade).

Every run is a fresh process (the script re-invokes itself with hidden arguments); wall time
covers open to last file written; figures are the median time and max peak RSS of 3 runs.
Peak RSS is ``VmHWM`` from ``/proc/self/status``: Linux carries ``ru_maxrss`` over ``execve``,
so a child of ``subprocess`` (vfork + exec) would report its parent's peak; ``ru_maxrss`` is
the fallback where ``/proc`` is missing. Then an AVIF speed table (speeds 4-8, in-process).

    .venv/bin/python benchmarks/images.py                       # both tables
    .venv/bin/python benchmarks/images.py --input FILE --json   # ours only, one JSON object
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.recipes import EXTENSIONS, ImageVariant, ImageVariantsParams, fit_within, load_recipe

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_PHOTO = REPO_ROOT / "tests" / "media" / "photos" / "phone-jolla.jpg"
# The step's parameters model alone: the composition root would import boto3 into the
# process whose peak RSS is measured.
RECIPE = load_recipe("web-image", 1, {"image.variants": ImageVariantsParams})
MAX_PIXELS = 50_000_000
REPEATS = 3
AVIF_REPEATS = 5  # encode times at speeds 7-8 are short and noisy
AIM_TIME_RATIO = 0.75
AIM_PEAK_MB = 130.0
AVIF_SPEEDS = (4, 5, 6, 7, 8)
REFERENCE_SPEED = 6
Renderer = Callable[[Path, tuple[ImageVariant, ...], Path], list[dict[str, Any]]]


def peak_rss_mb() -> float:
    """Peak resident set size of this process, in MB (see the module docstring)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def encode(im: Image.Image, variant: ImageVariant, dest: Path) -> None:
    """Encode exactly as ``mediajobs.adapters.imaging`` does for WebP and AVIF."""
    if variant.format == "webp":
        im.save(dest, format="WEBP", quality=variant.quality, method=4)
    elif variant.format == "avif":
        speed = 6 if variant.speed is None else variant.speed
        im.save(dest, format="AVIF", quality=variant.quality, speed=speed)
    else:
        raise ValueError(f"naive pipeline does not encode {variant.format}")


def render_naive(source: Path, variants: tuple[ImageVariant, ...], out_dir: Path) -> list[dict[str, Any]]:
    """Full decode, then one Lanczos resize per variant from the full-size image."""
    with Image.open(source) as im:
        full = im.convert("RGB")
    outputs = []
    for variant in variants:
        size = fit_within(full.width, full.height, variant.box_px)
        small = full.resize(size, Image.Resampling.LANCZOS)
        small.info = {}  # like ours: no ICC/EXIF in the outputs, so the bytes compare
        dest = out_dir / f"{variant.name}.{EXTENSIONS[variant.format]}"
        encode(small, variant, dest)
        outputs.append({"name": variant.name, "width": size[0], "height": size[1], "bytes": dest.stat().st_size})
    return outputs


def render_ours(source: Path, variants: tuple[ImageVariant, ...], out_dir: Path) -> list[dict[str, Any]]:
    """The production renderer."""
    files, _ = PillowRenderer(max_pixels=MAX_PIXELS).render(source, variants, out_dir)
    return [{"name": f.name, "width": f.width, "height": f.height, "bytes": f.bytes} for f in files]


PIPELINES: dict[str, Renderer] = {"naive": render_naive, "ours": render_ours}


def run_worker(pipeline: str, source: Path | None) -> int:
    """Render once and print one JSON line; ``baseline`` only measures the imports."""
    outputs: list[dict[str, Any]] = []
    ms = 0.0
    if pipeline != "baseline":
        assert source is not None
        with tempfile.TemporaryDirectory(prefix="mj-bench-") as tmp:
            start = time.perf_counter()
            try:
                outputs = PIPELINES[pipeline](source, RECIPE.params.variants, Path(tmp))
            except PermanentFailure as failure:
                print(f"cannot render {source}: {failure.reason} ({failure.detail})", file=sys.stderr)
                return 2
            ms = (time.perf_counter() - start) * 1000
    print(json.dumps({"ms": round(ms, 1), "peak_rss_mb": round(peak_rss_mb(), 1), "outputs": outputs}))
    return 0


def spawn(pipeline: str, source: Path | None = None) -> dict[str, Any]:
    """Run one worker in a fresh interpreter and return its JSON result (CalledProcessError if it fails)."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--_worker", pipeline]
    if source is not None:
        argv += ["--input", str(source)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(source: Path) -> dict[str, dict[str, float]]:
    """Median ms, max peak RSS and output bytes of each pipeline, runs interleaved."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PIPELINES}
    for _ in range(REPEATS):
        for name in PIPELINES:
            runs[name].append(spawn(name, source))
    return {
        name: {
            "ms": statistics.median(r["ms"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            "bytes": sum(o["bytes"] for o in results[0]["outputs"]),
        }
        for name, results in runs.items()
    }


def make_photo(dest: Path, width: int = 6000, height: int = 4000, seed: int = 24) -> None:
    """A deterministic photo-like JPEG: smooth colour gradients, mid-scale texture and grain."""
    import numpy as np  # only the parent needs it; keeps the workers' RSS free of numpy

    rng = np.random.default_rng(seed)

    def smooth(rows: int, cols: int, scale: float) -> Any:
        field = Image.fromarray((rng.standard_normal((rows, cols)) * scale).astype(np.float32), "F")
        return np.asarray(field.resize((width, height), Image.Resampling.BICUBIC))

    luma = 128 + smooth(6, 9, 45) + smooth(120, 180, 14) + smooth(600, 900, 6)
    luma += rng.standard_normal((height, width), dtype=np.float32) * 3
    bands = [np.clip(luma + smooth(5, 7, 25), 0, 255).astype(np.uint8) for _ in range(3)]
    Image.merge("RGB", [Image.fromarray(b, "L") for b in bands]).save(dest, "JPEG", quality=90)


def real_photo() -> Path:
    """phone-jolla.jpg from tests/media/photos, else scikit-image's rocket.jpg (not imported)."""
    if REAL_PHOTO.is_file():
        return REAL_PHOTO
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"neither {REAL_PHOTO} nor scikit-image's data/rocket.jpg is available")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "rocket.jpg"


def describe(path: Path, label: str) -> str:
    with Image.open(path) as im:
        return f"{label} {im.width}x{im.height} ({path.stat().st_size / 1e6:.1f} MB)"


def print_comparison(inputs: list[tuple[str, Path]]) -> None:
    """The naive/ours table; aims are judged on the first (24 MP) input."""
    print(f"worker baseline (interpreter + imports only): {spawn('baseline')['peak_rss_mb']:.0f} MB peak RSS\n")
    print(f"{'input':<42} {'pipeline':<8} {'ms':>8} {'peak RSS MB':>12} {'output bytes':>13}")
    for index, (label, path) in enumerate(inputs):
        result = measure(path)
        for name, row in result.items():
            print(
                f"{label if name == 'naive' else '':<42} {name:<8} {row['ms']:>8.0f} "
                f"{row['peak_rss_mb']:>12.1f} {row['bytes']:>13,}"
            )
        ours, naive = result["ours"], result["naive"]
        ratio = ours["ms"] / naive["ms"]
        print(
            f"  ours/naive time = {ratio:.2f}, peak RSS = {ours['peak_rss_mb']:.0f} MB "
            f"(naive {naive['peak_rss_mb']:.0f} MB, ratio {ours['peak_rss_mb'] / naive['peak_rss_mb']:.2f})"
        )
        if index == 0:
            peak, verdict = ours["peak_rss_mb"], {True: "PASS", False: "MISS"}
            print(f"  aim: ours <= {AIM_TIME_RATIO}x naive time: {ratio:.2f} {verdict[ratio <= AIM_TIME_RATIO]}")
            print(f"  aim: ours <= {AIM_PEAK_MB:.0f} MB peak RSS: {peak:.0f} MB {verdict[peak <= AIM_PEAK_MB]}")
        print()


def print_avif_speeds(source: Path, label: str) -> None:
    """Bytes and encode time of the ``full`` variant at several AVIF speeds, in-process."""
    full = next(v for v in RECIPE.params.variants if v.name == "full")
    with Image.open(source) as im:
        size = fit_within(im.width, im.height, full.box_px)
        im.draft("RGB", size)
        fitted = im.convert("RGB").resize(size, Image.Resampling.LANCZOS)
    rows: dict[int, tuple[int, float]] = {}
    for speed in AVIF_SPEEDS:
        times = []
        for _ in range(AVIF_REPEATS):
            buffer = io.BytesIO()
            start = time.perf_counter()
            fitted.save(buffer, format="AVIF", quality=full.quality, speed=speed)
            times.append((time.perf_counter() - start) * 1000)
        rows[speed] = (buffer.tell(), statistics.median(times))
    print(
        f"AVIF speed table: {label} fitted to {size[0]}x{size[1]}, quality {full.quality}, "
        f"median of {AVIF_REPEATS} encodes"
    )
    ref = REFERENCE_SPEED
    print(f"{'speed':>5} {'bytes':>9} {'ms':>7} {f'bytes vs {ref}':>11} {f'time vs {ref}':>10}")
    ref_bytes, ref_ms = rows[ref]
    for speed, (size_bytes, ms) in rows.items():
        print(f"{speed:>5} {size_bytes:>9,} {ms:>7.0f} {size_bytes / ref_bytes:>11.2f} {ms / ref_ms:>10.2f}")
    print(
        f"note: {RECIPE.ref} encodes its '{full.name}' variant at AVIF speed "
        f"{6 if full.speed is None else full.speed} (quality {full.quality})."
    )


def run_default() -> int:
    variants = ", ".join(f"{v.name} {v.box_px}px {v.format} q{v.quality}" for v in RECIPE.params.variants)
    print(f"recipe {RECIPE.ref}: {variants}")
    print(f"each row: median wall time and max peak RSS of {REPEATS} runs, each in a fresh process\n")
    with tempfile.TemporaryDirectory(prefix="mj-bench-input-") as tmp:
        generated = Path(tmp) / "generated-24mp.jpg"
        make_photo(generated)
        photo = real_photo()
        inputs = [(describe(generated, "generated"), generated), (describe(photo, photo.name), photo)]
        print_comparison(inputs)
        print_avif_speeds(generated, "generated 24 MP input")
        print()
        print_avif_speeds(photo, f"real photo {photo.name}")
    return 0


def run_single(source: Path) -> int:
    """Render one file with our pipeline in a fresh process; print its JSON result."""
    if not source.is_file():
        print(f"{source}: no such file", file=sys.stderr)
        return 1
    print(json.dumps(spawn("ours", source.resolve())))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, help="render this one file with our pipeline only")
    parser.add_argument("--json", action="store_true", help="required with --input: print one JSON object")
    parser.add_argument("--_worker", choices=[*PIPELINES, "baseline"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._worker:
        return run_worker(args._worker, args.input)
    if (args.input is not None) != args.json:
        parser.error("--input FILE and --json go together")
    try:
        return run_single(args.input) if args.input else run_default()
    except subprocess.CalledProcessError as failure:  # a worker failed: show its message
        print(failure.stderr.strip() or failure, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
