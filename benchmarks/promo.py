"""The promo's encode (``steps/promo.py``): one concat input with the crossfades blended
by the worker, against the baseline it replaced -- one looped input per card chained by
ffmpeg's ``xfade`` -- on the same cards, in the same run.

Prints one JSON object: for each method, ffmpeg's wall seconds, CPU seconds and peak RSS
(each run in its own ffmpeg process, measured by ``wait4``'s rusage), the output's duration;
and the ratios. A benchmark, not a test: it always exits 0.

    .venv/bin/python benchmarks/promo.py [--cards 60]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layers" / "mediajobs"))

from mediajobs.adapters.ffmpeg import find_binaries  # noqa: E402
from mediajobs.bootstrap import active_recipes  # noqa: E402
from mediajobs.domain.promo import concat_list, slideshow_argv, slideshow_seconds, slideshow_timeline  # noqa: E402


def _cards(folder: Path, n: int, size: tuple[int, int]) -> list[Path]:
    """``n`` photo-like frames of ``size`` (noise over a flat colour, fixed seed) as PPM."""
    rng = random.Random(28)
    paths = []
    for i in range(n):
        noise = Image.effect_noise(size, 40).convert("RGB")
        flat = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
        path = folder / f"card-{i:04d}.ppm"
        Image.blend(noise, flat, 0.6).save(path, "PPM")
        paths.append(path)
    return paths


def _measured(argv: list[str], cwd: Path) -> dict[str, float]:
    """Run ``argv``; its wall and CPU seconds and peak RSS (MB) from ``wait4``."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL)  # noqa: S603 - argv list
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"ffmpeg exited {proc.returncode}")
    return {
        "wall_s": round(time.monotonic() - started, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
    }


def _duration(ffprobe: str, path: Path) -> float:
    out = subprocess.run(  # noqa: S603 - argv list
        [ffprobe, "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


def _xfade_argv(ffmpeg: str, cards: list[Path], output: str, d: float, c: float, fps: int) -> list[str]:
    """The baseline: one ``-loop 1 -t d`` input per card, chained by ``xfade`` at ``k (d - c)``."""
    argv = [ffmpeg, "-hide_banner", "-nostdin", "-y", "-loglevel", "error"]
    for card in cards:
        argv += ["-loop", "1", "-framerate", str(fps), "-t", f"{d:g}", "-i", str(card)]
    chains = [f"[{i}:v]settb=AVTB,setsar=1,format=yuv420p[s{i}]" for i in range(len(cards))]
    last = "s0"
    for k in range(1, len(cards)):
        chains.append(f"[{last}][s{k}]xfade=transition=fade:duration={c:g}:offset={k * (d - c):g}[x{k}]")
        last = f"x{k}"
    argv += ["-filter_complex", ";".join(chains), "-map", f"[{last}]"]
    return argv + ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-pix_fmt", "yuv420p", "-an", output]


def main() -> int:
    """Run both methods on the same cards; print the JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=60, help="cards in the album (default 60: promo@1's max)")
    args = parser.parse_args()
    params = active_recipes()["album"][0].params
    size, d, c, fps = (params.width_px, params.height_px), params.seconds_per_card, params.crossfade_s, params.fps
    binaries = find_binaries()
    with tempfile.TemporaryDirectory(prefix="mediajobs-promo-bench-") as tmp:
        folder = Path(tmp)
        cards = _cards(folder, args.cards, size)
        blended_at = time.monotonic()
        listed: list[tuple[str, float]] = []
        for n, frame in enumerate(slideshow_timeline(len(cards), d, c, fps)):
            if not frame.alpha:
                listed.append((cards[frame.card].name, frame.duration_s))
                continue
            name = f"fade-{n:05d}.ppm"
            a, b = Image.open(cards[frame.card]), Image.open(cards[frame.card + 1])
            Image.blend(a, b, frame.alpha).save(folder / name, "PPM")
            listed.append((name, frame.duration_s))
        (folder / "slideshow.ffconcat").write_text(concat_list(listed), encoding="utf-8")
        blend_s = time.monotonic() - blended_at
        seconds = slideshow_seconds(len(cards), d, c)
        ours_argv = slideshow_argv(
            binaries.ffmpeg, "slideshow.ffconcat", "ours.mp4", seconds=seconds, fps=fps, crf=23, preset="veryfast"
        )
        ours = _measured(ours_argv, folder)
        ours["blend_wall_s"] = round(blend_s, 2)
        ours["duration_s"] = _duration(binaries.ffprobe, folder / "ours.mp4")
        base = _measured(_xfade_argv(binaries.ffmpeg, cards, "xfade.mp4", d, c, fps), folder)
        base["duration_s"] = _duration(binaries.ffprobe, folder / "xfade.mp4")
    print(
        json.dumps(
            {
                "cards": args.cards,
                "expected_duration_s": seconds,
                "concat_of_blended_pictures": ours,
                "xfade_chain_baseline": base,
                "peak_rss_ratio": round(ours["peak_rss_mb"] / base["peak_rss_mb"], 3),
                "cpu_ratio_with_blending_wall": round((ours["cpu_s"] + blend_s) / base["cpu_s"], 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
