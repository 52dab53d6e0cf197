"""Benchmark: ``web-image@2`` (quality-targeted) against sharp 0.34 at the settings
``web-image@1`` started from, at equal SSIMULACRA2.

sharp's side: ``rotate()``, thumb 320 px WebP q72, card 800 px WebP q78, full 1600 px AVIF
q50 effort 4, ``withoutEnlargement`` (benchmarks/sharp/web_image.js; sharp is installed with
npm into build/bench-sharp/ on first run). Both sides run pinned to one core (``taskset -c``,
``UV_THREADPOOL_SIZE=1`` and ``sharp.concurrency(1)``), each job in a fresh process; CPU is
the process's user + system time from its first pixel to its last byte written (imports and
``require`` excluded on both sides).

Equal quality: every output of both sides is scored with a reference SSIMULACRA2 against one
reference per variant: the original decoded at full size, upright, resized with Lanczos to the
output's size. The reference is libjxl's ``ssimulacra2`` tool, given by ``--ssimulacra2 PATH``
(built from libjxl's source with ``-DJPEGXL_ENABLE_DEVTOOLS=ON``: no package registry this
project reaches ships it; Debian 12's libjxl-tools 0.7 has no such tool and the PyPI port
disagrees with it by 6 points on average, benchmarks/README.md). Without it the worker's own
metric scores both sides, which is printed as such: it is not an independent reference.
sharp's bytes at our score are interpolated (log-bytes, linear in score) over a quality sweep
of that variant; the ratio is ours over that, and its geometric mean over the corpus is reported per variant.

    .venv/bin/python benchmarks/web_image_vs_sharp.py [--ssimulacra2 PATH] [--core 1] [--json FILE]

Prints, per input, CPU and each variant's quality, encodes, bytes, score and ratio; then the
geometric mean of the bytes ratio per variant, ``full``'s score spread, the CPU ratio (of the
corpus's totals, and per image) and how far the worker's own scores (its decisions) are from
the reference's on the same outputs.

It is a benchmark, not a test: it exits 0 whether the aims are met or not.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

REPO = Path(__file__).resolve().parents[1]
SHARP_DIR = REPO / "build" / "bench-sharp"
SHARP_SCRIPT = REPO / "benchmarks" / "sharp" / "web_image.js"
SHARP_VERSION = "0.34"
VARIANTS = (("thumb", 320, "webp"), ("card", 800, "webp"), ("full", 1600, "avif"))
SWEEPS = {"webp": (30, 45, 55, 65, 72, 78, 85, 92, 98), "avif": (20, 30, 40, 50, 60, 70, 80, 90)}
SKIMAGE_PHOTOS = (
    "hubble_deep_field.jpg",
    "retina.jpg",
    "rocket.jpg",
    "coffee.png",
    "astronaut.png",
    "chelsea.png",
    "motorcycle_left.png",
)
AIM_BYTES_RATIO = 0.95
AIM_FULL_SPREAD = 5.0
HEIC_NOTE = "sharp's prebuilt libheif reads no HEVC: sharp gets a PNG of the decoded picture"
AIM_CPU_RATIO = 0.35


def corpus(work: Path) -> list[tuple[str, Path, str]]:
    """(label, file, note) of each real photo; the 24 MP JPEG and the PNG screenshot are made here."""
    photos = REPO / "tests" / "media" / "photos"
    items = [
        ("phone-jolla.jpg 3264x2448", photos / "phone-jolla.jpg", ""),
        ("iphone-hdr.jpg 3264x2448", photos / "iphone-hdr.jpg", ""),
        ("orientation-landscape-6.jpg 1800x1200 EXIF 6", photos / "orientation-landscape-6.jpg", ""),
        ("camera-gps-nikon.jpg 640x480", photos / "camera-gps-nikon.jpg", ""),
        ("iphone-13-pro-max.heic 3024x4032", photos / "iphone-13-pro-max.heic", HEIC_NOTE),
    ]  # fmt: skip
    spec = importlib.util.find_spec("skimage")
    if spec and spec.submodule_search_locations:
        data = Path(next(iter(spec.submodule_search_locations))) / "data"
        for name in SKIMAGE_PHOTOS:
            if (data / name).is_file():
                items.append((f"skimage {name}", data / name, ""))
    big = work / "jolla-24mp.jpg"
    with Image.open(photos / "phone-jolla.jpg") as im:
        ImageOps.exif_transpose(im.convert("RGB")).resize((5657, 4243), Image.Resampling.LANCZOS).save(big, quality=92)
    items.append(("24 MP JPEG 5657x4243 (phone-jolla upscaled: no real 24 MP photo here)", big, "stand-in"))
    shot = screenshot(work)
    if shot is not None:
        items.append(("PNG screenshot 1440x900 (headless Chromium)", shot, ""))
    return items


def screenshot(work: Path) -> Path | None:
    """A real browser screenshot (Debian's chromium, headless) of a page of text, a table and a photo."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no chromium: the PNG screenshot is missing from the corpus", file=sys.stderr)
        return None
    thumb = work / "page-photo.jpg"
    with Image.open(REPO / "tests" / "media" / "photos" / "orientation-landscape-1.jpg") as im:
        im.convert("RGB").resize((480, 320)).save(thumb)
    readme = (REPO / "docs" / "images.md").read_text().replace("&", "&amp;").replace("<", "&lt;")
    page = work / "page.html"
    page.write_text(
        "<html><body style='font-family:sans-serif;margin:24px;background:#f6f7f9'>"
        "<div style='background:#24292f;color:#fff;padding:12px 20px;font-size:20px'>mediajobs - docs/images.md</div>"
        f"<img src='{thumb.name}' style='float:right;margin:16px;border-radius:8px'>"
        f"<pre style='white-space:pre-wrap;font-size:14px;color:#1f2328'>{readme[:6000]}</pre></body></html>"
    )
    out = work / "screenshot.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={out}",
         "--window-size=1440,900", page.as_uri()],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    return out if out.is_file() else None


def ensure_sharp() -> Path:
    """sharp 0.34 under build/bench-sharp/ (npm install on first use); its module path."""
    module = SHARP_DIR / "node_modules" / "sharp"
    if not module.is_dir():
        SHARP_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(SHARP_DIR), f"sharp@{SHARP_VERSION}"],
            check=True,
            capture_output=True,
        )
    return module


def pinned(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if shutil.which("taskset") else []


def run_sharp(core: int, module: Path, *args: str) -> dict[str, Any]:
    env = dict(os.environ, UV_THREADPOOL_SIZE="1", SHARP_MODULE=str(module))
    proc = subprocess.run(
        [*pinned(core), "node", str(SHARP_SCRIPT), *args], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_ours(core: int, source: Path, out: Path, version: int, max_encodes: int = 0) -> dict[str, Any]:
    proc = subprocess.run(
        [
            *pinned(core),
            sys.executable,
            str(Path(__file__).resolve()),
            "--_worker",
            str(source),
            str(out),
            str(version),
            str(max_encodes),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def worker(source: Path, out: Path, version: int, max_encodes: int = 0) -> int:
    """Render ``source`` with web-image@``version`` in this (fresh, pinned) process; print CPU and outputs.

    ``max_encodes`` > 0 caps the search's encodes per variant (the domain's ``MAX_ENCODES``):
    1 is web-image@2 with a perfect prediction, one encode and one score a variant, the least
    CPU any search that scores what it keeps can take."""
    from mediajobs.adapters.imaging import PillowRenderer
    from mediajobs.domain import quality_search
    from mediajobs.domain.recipes import ImageVariantsParams, load_recipe

    if max_encodes:
        quality_search.MAX_ENCODES = max_encodes  # type: ignore[misc]

    recipe = load_recipe("web-image", version, {"image.variants": ImageVariantsParams})
    renderer = PillowRenderer(max_pixels=50_000_000)
    start = resource.getrusage(resource.RUSAGE_SELF)
    files, decisions = renderer.render(source, recipe.params.variants, out)
    end = resource.getrusage(resource.RUSAGE_SELF)
    cpu_ms = (end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime) * 1000
    search = decisions.to_json().get("quality_search", {})
    outputs = [
        {"name": f.name, "bytes": f.bytes, "file": str(f.path), "width": f.width, "height": f.height,
         "quality": search.get(f.name, {}).get("quality"), "encodes": search.get(f.name, {}).get("encodes"),
         "own_score": search.get(f.name, {}).get("score")}
        for f in files
    ]  # fmt: skip
    print(json.dumps({"cpu_ms": cpu_ms, "results": outputs}))
    return 0


def upright(source: Path) -> Image.Image:
    """The original at full size, upright, RGB (pillow-heif for HEIC)."""
    import pillow_heif

    pillow_heif.register_heif_opener()
    with Image.open(source) as im:
        return ImageOps.exif_transpose(im).convert("RGB")


class Scorer:
    """Reference SSIMULACRA2: libjxl's tool, or (not independent) the worker's own metric."""

    def __init__(self, tool: str | None, work: Path) -> None:
        self.tool, self.work = tool, work
        self.name = f"libjxl {Path(tool).name}" if tool else "the worker's own metric (NOT an independent reference)"

    def __call__(self, reference: Path, distorted_file: Path) -> float:
        distorted = self.work / "distorted.png"
        with Image.open(distorted_file) as im:
            im.convert("RGB").save(distorted)
        if self.tool:
            out = subprocess.run(
                [self.tool, str(reference), str(distorted)], capture_output=True, text=True, check=True
            )
            return float(out.stdout.split()[-1])
        from mediajobs.adapters.ssimulacra2 import ssimulacra2

        with Image.open(reference) as ref, Image.open(distorted) as dist:
            return ssimulacra2(ref.convert("RGB"), dist.convert("RGB"))


def reference_for(original: Image.Image, size: tuple[int, int], work: Path, cache: dict[tuple[int, int], Path]) -> Path:
    if size not in cache:
        path = work / f"ref-{size[0]}x{size[1]}.png"
        (original if original.size == size else original.resize(size, Image.Resampling.LANCZOS)).save(path)
        cache[size] = path
    return cache[size]


def at_score(curve: list[tuple[float, int]], score: float) -> float:
    """Bytes at ``score`` on a (score, bytes) curve: log-bytes linear in score, extended at its ends."""
    points = sorted(curve)
    for (s0, b0), (s1, b1) in zip(points, points[1:], strict=False):
        if s0 <= score <= s1 or (score < s0 and (s0, b0) == points[0]) or (score > s1 and (s1, b1) == points[-1]):
            t = (score - s0) / (s1 - s0) if s1 != s0 else 0.0
            return math.exp(math.log(b0) + t * (math.log(b1) - math.log(b0)))
    return math.nan


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ssimulacra2", help="libjxl's ssimulacra2 tool (else the worker's own metric)")
    parser.add_argument("--core", type=int, default=1, help="the one CPU core both sides run on")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side per input; CPU is their median")
    parser.add_argument("--only", help="only the inputs whose label contains this")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--_worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._worker:
        return worker(Path(args._worker[0]), Path(args._worker[1]), int(args._worker[2]), int(args._worker[3]))
    module = ensure_sharp()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mj-vs-sharp-") as tmp:
        work = Path(tmp)
        score = Scorer(args.ssimulacra2, work)
        print(f"reference metric: {score.name}; one core: {args.core}; CPU: median of {args.repeat} runs\n")
        for label, source, note in corpus(work):
            if args.only and args.only not in label:
                continue
            started = time.monotonic()
            row = measure(label, source, note, work, score, module, args.core, args.repeat)
            rows.append(row)
            print(describe(row) + f"  [{time.monotonic() - started:.0f} s]", flush=True)
    summary = summarise(rows)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


def measure(
    label: str, source: Path, note: str, work: Path, score: Scorer, module: Path, core: int, repeat: int
) -> dict[str, Any]:
    """One input: both sides' jobs (CPU: the median of ``repeat`` runs), sharp's sweep per
    variant, every output scored by the reference against the neutral reference picture."""
    job = work / "job"
    shutil.rmtree(job, ignore_errors=True)
    for side in ("ours", "ours1", "floor", "sharp", "sweep"):
        (job / side).mkdir(parents=True)
    sharp_input = source
    if source.suffix.lower() == ".heic":
        sharp_input = job / "decoded.png"
        upright(source).save(sharp_input)
    runs = {
        "v2": [run_ours(core, source, job / "ours", 2) for _ in range(repeat)],
        "v1": [run_ours(core, source, job / "ours1", 1) for _ in range(repeat)],
        "floor": [run_ours(core, source, job / "floor", 2, max_encodes=1) for _ in range(repeat)],
        "sharp": [run_sharp(core, module, "job", str(sharp_input), str(job / "sharp")) for _ in range(repeat)],
    }
    ours, theirs_job = runs["v2"][-1], runs["sharp"][-1]
    original = upright(source)
    refs: dict[tuple[int, int], Path] = {}

    def scored(width: int, height: int, file: Path) -> float:
        return score(reference_for(original, (width, height), work, refs), file)

    cpu = {side: statistics.median(r["cpu_ms"] for r in side_runs) for side, side_runs in runs.items()}
    row: dict[str, Any] = {"input": label, "note": note, "cpu_ms": cpu, "variants": {}}
    for (name, box, fmt), mine, theirs in zip(VARIANTS, ours["results"], theirs_job["results"], strict=True):
        my_score = scored(mine["width"], mine["height"], Path(mine["file"]))
        qualities = ",".join(map(str, SWEEPS[fmt]))
        sweep_dir = str(job / "sweep")
        sweep = run_sharp(core, module, "sweep", str(sharp_input), sweep_dir, str(box), fmt, qualities)["results"]
        curve = [(scored(s["width"], s["height"], Path(s["file"])), s["bytes"]) for s in sweep]
        sharp_score = scored(theirs["width"], theirs["height"], job / "sharp" / f"{name}.{fmt}")
        equal = at_score(curve, my_score)
        row["variants"][name] = {
            "ours_quality": mine["quality"],
            "ours_encodes": mine["encodes"],
            "ours_bytes": mine["bytes"],
            "ours_score": my_score,
            "own_score": mine["own_score"],
            "sharp_bytes": theirs["bytes"],
            "sharp_score": sharp_score,
            "sharp_bytes_at_our_score": equal,
            "ratio": mine["bytes"] / equal,
            "sharp_curve": curve,
        }
    return row


def describe(row: dict[str, Any]) -> str:
    """One line per input: CPU of each side, then each variant's search and ratio."""
    cpu, v = row["cpu_ms"], row["variants"]
    parts = [
        f"{n} q{v[n]['ours_quality']}x{v[n]['ours_encodes']} {v[n]['ours_bytes']:,} B at {v[n]['ours_score']:.1f}"
        f" (own {v[n]['own_score']}; sharp {v[n]['sharp_bytes_at_our_score']:,.0f} B there; ratio {v[n]['ratio']:.3f})"
        for n in v
    ]
    return (
        f"{row['input']}: cpu v2 {cpu['v2']:.0f} ms, v1 {cpu['v1']:.0f}, floor {cpu['floor']:.0f},"
        f" sharp {cpu['sharp']:.0f}; " + "; ".join(parts)
    )


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Print and return the figures the aims are judged by."""
    verdict = {True: "PASS", False: "MISS"}
    summary: dict[str, Any] = {}
    print("\nper variant: geometric mean of bytes / sharp's bytes at the same score")
    for name, _box, _fmt in VARIANTS:
        ratios = [r["variants"][name]["ratio"] for r in rows if not math.isnan(r["variants"][name]["ratio"])]
        summary[name] = geomean(ratios)
        scores = [r["variants"][name]["ours_score"] for r in rows]
        print(
            f"  {name}: {summary[name]:.3f} (aim <= {AIM_BYTES_RATIO}: {verdict[summary[name] <= AIM_BYTES_RATIO]});"
            f" ratios {min(ratios):.3f}-{max(ratios):.3f}; our scores {min(scores):.1f}-{max(scores):.1f},"
            f" median {statistics.median(scores):.1f}"
        )
    full = [r["variants"]["full"]["ours_score"] for r in rows]
    summary["full_spread"] = max(full) - min(full)
    sharp_full = [r["variants"]["full"]["sharp_score"] for r in rows]
    spread_ok = verdict[summary["full_spread"] <= AIM_FULL_SPREAD]
    print(
        f"full's score spread: {summary['full_spread']:.1f} points ({min(full):.1f}-{max(full):.1f};"
        f" aim <= {AIM_FULL_SPREAD}: {spread_ok}); sharp q50 effort 4: {max(sharp_full) - min(sharp_full):.1f}"
    )
    cpu = {side: sum(r["cpu_ms"][side] for r in rows) for side in ("v2", "v1", "floor", "sharp")}
    summary["cpu_ratio"] = cpu["v2"] / cpu["sharp"]
    per_image = [r["cpu_ms"]["v2"] / r["cpu_ms"]["sharp"] for r in rows]
    summary["cpu_ratio_per_image_geomean"] = geomean(per_image)
    print(
        f"CPU, corpus total: v2 {cpu['v2']:.0f} ms, v1 {cpu['v1']:.0f} ms, sharp {cpu['sharp']:.0f} ms; v2/sharp"
        f" {summary['cpu_ratio']:.2f} (aim <= {AIM_CPU_RATIO}: {verdict[summary['cpu_ratio'] <= AIM_CPU_RATIO]});"
        f" per image {min(per_image):.2f}-{max(per_image):.2f}, geometric mean {geomean(per_image):.2f};"
        f" v1/sharp {cpu['v1'] / cpu['sharp']:.2f}"
    )
    summary["cpu_floor_ratio"] = cpu["floor"] / cpu["sharp"]
    print(
        f"CPU floor (web-image@2 with one encode and one score a variant: a perfect prediction):"
        f" {cpu['floor']:.0f} ms, {summary['cpu_floor_ratio']:.2f} of sharp's"
    )
    encodes = {name: [r["variants"][name]["ours_encodes"] for r in rows] for name, _b, _f in VARIANTS}
    summary["encodes"] = {name: statistics.fmean(e) for name, e in encodes.items()}
    print("encodes per variant (mean): " + ", ".join(f"{n} {statistics.fmean(e):.2f}" for n, e in encodes.items()))
    diffs = [
        v["own_score"] - v["ours_score"] for r in rows for v in r["variants"].values() if v["own_score"] is not None
    ]
    summary["own_minus_reference"] = {
        "mean_abs": statistics.fmean(abs(d) for d in diffs),
        "max_abs": max(map(abs, diffs)),
    }
    print(
        f"the worker's own scores against the reference's on the same {len(diffs)} outputs: mean |diff|"
        f" {summary['own_minus_reference']['mean_abs']:.2f}, max {summary['own_minus_reference']['max_abs']:.2f},"
        f" mean {statistics.fmean(diffs):+.2f}"
    )
    return summary


if __name__ == "__main__":
    sys.exit(main())
