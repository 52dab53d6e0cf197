"""Benchmark: the bounded image render (a child process under the decode memory budget)
against the in-process renderer, for peak memory. What it costs in CPU per image:
``benchmarks/isolation_overhead.py``.

* **Peak memory.** Each input is rendered once per mode in a fresh worker process that
  imports what the Lambda worker imports (``mediajobs.bootstrap``): ``in-process``
  (``PillowRenderer``) and ``bounded`` (``bootstrap.steps``' bounded ``image.variants``: the production
  renderer, ``DECODE_MEMORY_MB`` = the settings' default unless ``--budget-mb``). The
  worker's peak is its ``VmHWM``; the child's peak RSS and address space are what the child
  reports (``VmHWM``, ``VmPeak``), or, for a child that died without a report, the worker's
  ``RUSAGE_CHILDREN`` ``ru_maxrss`` once the zygote is reaped (an upper bound: Linux starts a forked child's count
  at its parent's peak). Inputs: photos of ``tests/media/photos/``, a generated 50 MP WebP
  (the largest legitimate render measured), the crafted cases of the case registry named in
  :data:`CRAFTED_CASES` (skipped, with a message, while absent), and two bombs built here:
  an AVIF whose ``ispe`` says 64x64 over a 16384x16384 AV1 frame, and a 0.3 MB 16-bit grey
  PNG of 13000x13000 (about 1.7 GB to render) with ``max_pixels`` raised to 10^9, standing
  for any file a header check lets through.

It is a benchmark, not a test: it always exits 0. The bombs need about 5.5 GB while the
AVIF is encoded and 2.5 GB for the PNG rendered in-process (a child process each).

    .venv/bin/python benchmarks/peak_memory.py [--budget-mb 1536] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
PHOTOS = REPO_ROOT / "tests" / "media" / "photos"
CASES_DIR = REPO_ROOT / "tests" / "media"
#: Crafted cases of the registry (tests/media/cases_*.py) whose headers lie about the size.
CRAFTED_CASES = ("B01", "B02", "B03")
PEAK_PHOTOS = ("phone-jolla.jpg", "iphone-13-pro-max.heic")
DEFAULT_MAX_PIXELS = 50_000_000
BOMB_MAX_PIXELS = 1_000_000_000
MB = 1024 * 1024


# --- inputs ---------------------------------------------------------------------------


def make_png_bomb(dest: Path, side_px: int = 13000) -> None:
    """A ``side_px`` square 16-bit grey PNG of zeros, written row by row (nothing held in
    memory). 13000x13000 = 169 MP stays under twice Pillow's ``MAX_IMAGE_PIXELS`` (which
    would refuse it before any decode); its decode and the renderer's 16-to-8-bit scaling
    (``I;16`` -> ``I`` -> ``L``) need about 1.7 GB."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer = zlib.compressobj(9)
    row = b"\x00" * (1 + 2 * side_px)  # filter type 0, then the row's samples
    with open(dest, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side_px, side_px, 16, 0, 0, 0, 0)))
        body = b"".join(packer.compress(row) for _ in range(side_px)) + packer.flush()
        f.write(chunk(b"IDAT", body) + chunk(b"IEND", b""))


def make_lying_avif(dest: Path, side_px: int = 16384) -> None:
    """A flat ``side_px`` square AVIF (Pillow, libaom) whose ``ispe`` is rewritten to 64x64."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (side_px, side_px), (90, 120, 150)).save(out, format="AVIF", quality=30, speed=10)
    data = bytearray(out.getvalue())
    at = data.index(b"ispe") + 8  # after the box type, version and flags
    assert struct.unpack(">II", data[at : at + 8]) == (side_px, side_px)
    data[at : at + 8] = struct.pack(">II", 64, 64)
    dest.write_bytes(bytes(data))


def make_webp_50mp(dest: Path) -> None:
    """A photo-like 8000x6250 (50 MP, the default pixel limit) WebP: gradients and noise."""
    from PIL import Image

    size = (8000, 6250)
    ramp = Image.linear_gradient("L").resize(size)
    noise = Image.effect_noise(size, 40)
    Image.merge("RGB", (ramp, noise, ramp.transpose(Image.Transpose.ROTATE_180))).save(
        dest, format="WEBP", quality=50, method=0
    )


BUILT = {"png_bomb": make_png_bomb, "lying_avif": make_lying_avif, "webp_50mp": make_webp_50mp}
FILE_NAMES = {"png_bomb": "bomb.png", "lying_avif": "lying.avif", "webp_50mp": "50mp.webp"}


def crafted_cases(ids: tuple[str, ...]) -> tuple[list[tuple[str, Path]], list[str]]:
    """The files of the registry's cases ``ids`` (built on first use), and messages for the absent."""
    sys.path.insert(0, str(CASES_DIR))
    try:
        import make_cases
    finally:
        sys.path.remove(str(CASES_DIR))
    known = {case.id: case for case in make_cases.all_cases()}
    found, missing = [], []
    for case_id in ids:
        case = known.get(case_id)
        if case is None:
            missing.append(f"skipped: no case {case_id} in tests/media/cases_*.py (yet)")
            continue
        for name in case.files:
            found.append((f"{case_id} {name}", make_cases.case_path(name)))
    return found, missing


# --- workers (fresh processes) --------------------------------------------------------


def vm_status_mb(field: str) -> float:
    """A ``/proc/self/status`` field (``VmHWM``, ``VmPeak``) in MB; ``ru_maxrss`` without /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class ChildPeaks(logging.Handler):
    """Keeps the peaks the render child reports (the adapter logs them at INFO)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.peak: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "peak_rss_mb"):
            fields = {"rss_mb": "peak_rss_mb", "vm_mb": "peak_vm_mb", "baseline_mb": "baseline_mb"}
            self.peak = {key: getattr(record, name, None) for key, name in {**fields, "limit_mb": "limit_mb"}.items()}


class BoundedRenderer:
    """The production ``image.variants`` step (bounded, in its child), called as a renderer."""

    def __init__(self, settings: Any) -> None:
        from mediajobs.bootstrap import load_recipe, steps

        self.step = steps(settings)["image.variants"]
        self.params = load_recipe("web-image", 1).params

    def render(self, source: Path, variants: Any, out_dir: Path) -> tuple[list[Any], Any]:
        from mediajobs.domain.jobs import RenderContext

        result = self.step.run(source, self.params, RenderContext(), out_dir)
        return result.files, result.decisions


def worker_peak(mode: str, source: Path, max_pixels: int, budget_mb: int) -> dict[str, Any]:
    """Render once; the outcome, this process's peak and the child's."""
    from mediajobs.adapters.imaging import PillowRenderer
    from mediajobs.adapters.isolated import close_zygote
    from mediajobs.bootstrap import load_recipe
    from mediajobs.settings import Settings

    peaks = ChildPeaks()
    logging.getLogger("mediajobs.adapters.isolated").addHandler(peaks)
    logging.getLogger("mediajobs.adapters.isolated").setLevel(logging.INFO)
    variants = load_recipe("web-image", 1).params.variants
    settings = Settings(max_pixels=max_pixels, decode_memory_mb=budget_mb)
    renderer = BoundedRenderer(settings) if mode == "bounded" else PillowRenderer(max_pixels)
    baseline = vm_status_mb("VmHWM")
    with tempfile.TemporaryDirectory(prefix="mj-peak-") as out:
        start = time.perf_counter()
        try:
            files, _ = renderer.render(source, variants, Path(out))
            outcome = "done " + "/".join(f"{f.width}x{f.height}" for f in files[-1:])
        except Exception as exc:  # noqa: BLE001 - reported
            outcome = str(getattr(exc, "reason", type(exc).__name__))
        ms = (time.perf_counter() - start) * 1000
    close_zygote()  # reaped, the zygote's peak (and its render child's) is in RUSAGE_CHILDREN
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "outcome": outcome,
        "ms": round(ms),
        "worker_baseline_mb": round(baseline, 1),
        "worker_peak_mb": round(vm_status_mb("VmHWM"), 1),
        "child_rss_mb": peaks.peak.get("rss_mb", round(child, 1) if mode == "bounded" else None),
        "child_rss_reported": bool(peaks.peak),
        "child_vm_mb": peaks.peak.get("vm_mb"),
        "child_baseline_vm_mb": peaks.peak.get("baseline_mb"),
        "child_limit_vm_mb": peaks.peak.get("limit_mb"),
    }


def spawn(*argv: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"status {done.returncode}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- the run ----------------------------------------------------------------------------


def peak_table(inputs: list[tuple[str, Path, int]], budget_mb: int) -> list[dict[str, Any]]:
    rows = []
    for label, path, max_pixels in inputs:
        row: dict[str, Any] = {"input": label, "bytes": path.stat().st_size, "max_pixels": max_pixels}
        for mode in ("in-process", "bounded"):
            row[mode] = spawn("--_worker", "peak", mode, str(path), str(max_pixels), str(budget_mb))
        rows.append(row)
    return rows


def print_peaks(rows: list[dict[str, Any]], budget_mb: int) -> None:
    print(f"peak memory, MB (decode memory budget {budget_mb} MB; each cell a fresh worker process)")
    print(
        f"{'input':<44} {'in-process':<24} {'worker':>7} | {'bounded':<24} {'worker':>7} "
        f"{'child RSS':>10} {'child VM':>9}"
    )
    for row in rows:
        a, b = row["in-process"], row["bounded"]
        if "error" in a or "error" in b:
            print(f"{row['input']:<44} error: {a.get('error') or b.get('error')}")
            continue
        child = f"{'' if b['child_rss_reported'] else '<='}{b['child_rss_mb']}"
        print(
            f"{row['input']:<44} {a['outcome']:<24} {a['worker_peak_mb']:>7} | {b['outcome']:<24} "
            f"{b['worker_peak_mb']:>7} {child:>10} {b['child_vm_mb'] or '-':>9}"
        )
    first = rows[0]["bounded"] if rows else {}
    print(
        f"worker after its imports: {first.get('worker_baseline_mb')} MB; child address space after its imports:"
        f" {first.get('child_baseline_vm_mb')} MB, limit {first.get('child_limit_vm_mb')} MB;"
        " '<=': the child died without a report (ru_maxrss bound)\n"
    )


def run(budget_mb: int, as_json: bool) -> int:
    crafted, missing = crafted_cases(CRAFTED_CASES)
    with tempfile.TemporaryDirectory(prefix="mj-peak-inputs-") as tmp:
        built = {}
        for name in BUILT:
            built[name] = (
                Path(tmp) / {"png_bomb": "bomb.png", "lying_avif": "lying.avif", "webp_50mp": "50mp.webp"}[name]
            )
            made = spawn("--_make", name, str(built[name]))
            if "error" in made:
                print(f"could not build {name}: {made['error']}", file=sys.stderr)
                del built[name]
        inputs = [(name, PHOTOS / name, DEFAULT_MAX_PIXELS) for name in PEAK_PHOTOS]
        if "webp_50mp" in built:
            inputs.append(("generated 50 MP WebP", built["webp_50mp"], DEFAULT_MAX_PIXELS))
        inputs += [(label, path, DEFAULT_MAX_PIXELS) for label, path in crafted]
        if "lying_avif" in built:
            inputs.append(("own: AVIF ispe 64x64 over 16384x16384", built["lying_avif"], DEFAULT_MAX_PIXELS))
        if "png_bomb" in built:
            inputs.append(("own: PNG 13000x13000 16-bit, max_pixels 1e9", built["png_bomb"], BOMB_MAX_PIXELS))
        rows = peak_table(inputs, budget_mb)
    if as_json:
        print(json.dumps({"budget_mb": budget_mb, "peaks": rows, "skipped": missing}, indent=1))
        return 0
    for message in missing:
        print(message)
    print_peaks(rows, budget_mb)
    return 0


def main(argv: list[str] | None = None) -> int:
    from mediajobs.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-mb", type=int, default=Settings().decode_memory_mb)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--_worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--_make", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._make:
        BUILT[args._make[0]](Path(args._make[1]))
        print(json.dumps({"made": args._make[1]}))
        return 0
    if args._worker:
        _, mode, source, max_pixels, budget = args._worker
        print(json.dumps(worker_peak(mode, Path(source), int(max_pixels), int(budget))))
        return 0
    return run(args.budget_mb, args.json)


if __name__ == "__main__":
    sys.exit(main())
