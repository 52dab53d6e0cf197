"""How far the worker's SSIMULACRA2 (``mediajobs.adapters.ssimulacra2``, Pillow only) is from
reference implementations, on the test corpus.

Pictures: every photo of tests/media/photos (the nine orientation copies count once), the
photographs scikit-image's wheel ships, and ../shared/media/photos when it is there; each
decoded upright by the worker's renderer and fitted in an 800 px box (the ``card`` variant),
then encoded as WebP and AVIF at qualities 20, 40, 60, 80 and 95. Each pair (picture,
encode) is scored by the worker's metric and by the references:

- the ``ssimulacra2`` package from PyPI, when installed (a NumPy/SciPy port; ``pip install ssimulacra2``);
- libjxl's ``ssimulacra2`` tool, when ``--libjxl PATH`` names one (build it from libjxl's
  source with ``-DJPEGXL_ENABLE_DEVTOOLS=ON``, target ``ssimulacra2``; Debian 12's
  libjxl-tools 0.7 does not ship it).

Prints, per reference: mean and largest absolute difference, mean signed difference, and
Pearson's correlation.

    .venv/bin/python benchmarks/ssimulacra2_agreement.py [--libjxl PATH] [--box 800]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

from mediajobs.adapters.imaging import PillowRenderer, _resize_all
from mediajobs.adapters.ssimulacra2 import Ssimulacra2
from mediajobs.domain.recipes import ImageVariant

REPO = Path(__file__).resolve().parents[1]
QUALITIES = (20, 40, 60, 80, 95)
FORMATS = ("WEBP", "AVIF")


def pictures() -> list[Path]:
    photos = sorted(p for p in (REPO / "tests" / "media" / "photos").iterdir() if p.suffix != ".md")
    photos = [p for p in photos if not p.name.startswith("orientation-landscape-") or p.name.endswith("-1.jpg")]
    spec = importlib.util.find_spec("skimage")
    if spec and spec.submodule_search_locations:
        data = Path(next(iter(spec.submodule_search_locations))) / "data"
        photos += [data / n for n in ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "retina.jpg",
                                      "hubble_deep_field.jpg", "motorcycle_left.png")]  # fmt: skip
    shared = REPO.parent / "shared" / "media" / "photos"
    known = {p.name for p in photos}
    if shared.is_dir():
        photos += [p for p in sorted(shared.iterdir()) if p.name not in known and not p.name.startswith("orientation")]
    return [p for p in photos if p.is_file()]


def pearson(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return cov / math.sqrt(sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libjxl", help="libjxl's ssimulacra2 tool")
    parser.add_argument("--box", type=int, default=800, help="fit each picture in this box, px")
    args = parser.parse_args(argv)
    try:
        from ssimulacra2 import compute_ssimulacra2  # the PyPI port: numpy + scipy, benchmark only
    except ImportError:
        compute_ssimulacra2 = None
        print("the ssimulacra2 package is not installed: compared with libjxl's tool only", file=sys.stderr)

    renderer = PillowRenderer(50_000_000)
    variant = ImageVariant(name="card", box_px=args.box, format="webp", quality=78)
    ours: list[float] = []
    refs: dict[str, list[float]] = {}
    if compute_ssimulacra2 is not None:
        refs["ssimulacra2 (PyPI 0.3.0)"] = []
    if args.libjxl:
        refs["libjxl tools/ssimulacra2"] = []
    ours_s = 0.0
    with tempfile.TemporaryDirectory(prefix="mj-ssim2-") as tmp:
        ref_png, dist_png = Path(tmp) / "ref.png", Path(tmp) / "dist.png"
        for source in pictures():
            base, _, size = renderer.decode(source, args.box)
            picture = _resize_all(base, size, (variant,))["card"].convert("RGB")
            picture.save(ref_png)
            metric = Ssimulacra2(picture)
            line = []
            for fmt in FORMATS:
                for quality in QUALITIES:
                    buffer = io.BytesIO()
                    picture.save(buffer, format=fmt, quality=quality)
                    buffer.seek(0)
                    with Image.open(buffer) as decoded:
                        distorted = decoded.convert("RGB")
                    distorted.save(dist_png)
                    start = time.process_time()
                    ours.append(metric.score(distorted))
                    ours_s += time.process_time() - start
                    if compute_ssimulacra2 is not None:
                        refs["ssimulacra2 (PyPI 0.3.0)"].append(float(compute_ssimulacra2(str(ref_png), str(dist_png))))
                    if args.libjxl:
                        out = subprocess.run([args.libjxl, str(ref_png), str(dist_png)], capture_output=True, text=True)
                        refs["libjxl tools/ssimulacra2"].append(float(out.stdout.split()[-1]))
                    line.append(f"{fmt[0]}{quality} {ours[-1]:.1f}/" + "/".join(f"{r[-1]:.1f}" for r in refs.values()))
            print(f"{source.name} {picture.width}x{picture.height}: " + "  ".join(line), flush=True)
    picture_count = len(ours) // (len(FORMATS) * len(QUALITIES))
    per_score_ms = 1000 * ours_s / len(ours)
    print(f"\n{len(ours)} pairs from {picture_count} pictures, box {args.box} px;"
          f" the worker's metric took {per_score_ms:.0f} ms CPU a score (reference half excluded)")  # fmt: skip
    for name, values in refs.items():
        diffs = [o - r for o, r in zip(ours, values, strict=True)]
        print(
            f"against {name}: mean |diff| {statistics.fmean(abs(d) for d in diffs):.2f}, max |diff|"
            f" {max(abs(d) for d in diffs):.2f}, mean diff {statistics.fmean(diffs):+.2f},"
            f" Pearson r {pearson(ours, values):.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
