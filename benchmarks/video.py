"""Benchmark: the ``web-video@1`` renditions, one decode against two runs, and our pipeline
against the bare ffmpeg commands, on a generated 60 s 1080p source.

The source (``testsrc2`` with grain and a 440 Hz tone, H.264 High at 15 Mbit/s + AAC,
1920x1080 at 30 fps, 60 s: see :func:`generate_source`) is generated once into a temporary
folder and deleted afterwards. In one run:

* ``one decode``: one ffmpeg that decodes once and encodes 720p and 360p (``split``) --
  :func:`mediajobs.domain.video.renditions_argv`, run bare with ``subprocess.run``;
* ``two runs``: the same rungs, one ffmpeg each (each decodes the source);
* ``bare``: the one-decode command plus the poster command, run bare;
* ``ours``: ``FfmpegRenderer.render`` -- probe, plan, budget, the same two commands with the
  progress pipe read and the lease callback, then ffprobe on every output.

Each variant runs ``--repeat`` times (default 3) interleaved, and the median wall time counts.
Ratios: one decode / two runs (aim <= 0.8) and ours / bare (aim <= 1.05). It also prints the
measured speed factor (seconds of work per second of 1080p source) for ``VIDEO_SPEED_FACTOR``.

    .venv/bin/python benchmarks/video.py [--seconds 60] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mediajobs.adapters import ffmpeg
from mediajobs.adapters.video import FfmpegRenderer
from mediajobs.domain.recipes import VideoRenditionsParams, load_recipe
from mediajobs.domain.video import RenditionPlan, plan_renditions, poster_argv, renditions_argv


def generate_source(path: Path, seconds: int, binaries: ffmpeg.Binaries) -> None:
    """A 1920x1080 30 fps H.264 High + AAC MP4 of ``seconds`` seconds, like a phone's recording:
    a moving test pattern with temporal grain, CABAC at 15 Mbit/s (phones record 1080p30 at
    about 15-17 Mbit/s). A low-rate ``ultrafast`` source decodes too cheaply to stand for one."""
    subprocess.run(
        [
            binaries.ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
            "-f", "lavfi", "-i", f"testsrc2=size=1920x1080:rate=30:duration={seconds},noise=alls=10:allf=t",
            "-f", "lavfi", "-i", f"sine=frequency=440:sample_rate=48000:duration={seconds}",
            "-c:v", "libx264", "-preset", "veryfast", "-b:v", "15M", "-maxrate", "15M", "-bufsize", "30M",
            "-pix_fmt", "yuv420p",
            "-c:a", "aac", "-b:a", "128k", "-movflags", "+faststart", "-f", "mp4", str(path),
        ],
        check=True,
    )  # fmt: skip


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def bare(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def single_rung(plan: RenditionPlan, index: int) -> RenditionPlan:
    return RenditionPlan((plan.renditions[index],), plan.skipped, plan.poster_size, plan.poster_at_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60, help="length of the generated source (default 60)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant (default 3)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()

    binaries = ffmpeg.find_binaries()
    recipe = load_recipe("web-video", 1)
    params = recipe.params
    assert isinstance(params, VideoRenditionsParams)
    renderer = FfmpegRenderer(speed_factor=1.0, max_duration_s=7200, invocation_s=3600, margin_s=10, binaries=binaries)
    work = Path(tempfile.mkdtemp(prefix="mediajobs-bench-"))
    try:
        source = work / "original"
        print(f"generating a {args.seconds} s 1080p source with {binaries.ffmpeg} ...", file=sys.stderr)
        generate_source(source, args.seconds, binaries)
        probe = renderer.probe(source)
        plan = plan_renditions(probe, params)

        def out(name: str) -> Path:
            folder = work / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            return folder

        def one_decode() -> None:
            bare(renditions_argv(binaries.ffmpeg, str(source), probe, plan, params, str(out("one"))))

        def two_runs() -> None:
            folder = out("two")
            for i in range(len(plan.renditions)):
                bare(renditions_argv(binaries.ffmpeg, str(source), probe, single_rung(plan, i), params, str(folder)))

        def bare_pipeline() -> None:
            folder = out("bare")
            bare(renditions_argv(binaries.ffmpeg, str(source), probe, plan, params, str(folder)))
            bare(poster_argv(binaries.ffmpeg, str(source), probe, plan, params, str(folder / "poster.jpg")))

        def ours() -> None:
            renderer.render(source, params, out("ours"))

        variants = {"one decode": one_decode, "two runs": two_runs, "bare": bare_pipeline, "ours": ours}
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeat):
            for name, action in variants.items():
                times[name].append(timed(action))
        median = {name: statistics.median(values) for name, values in times.items()}
        result = {
            "ffmpeg": ffmpeg.version(binaries.ffmpeg),
            "binaries": binaries.origin,
            "cpus": os.cpu_count(),
            "source_seconds": args.seconds,
            "repeat": args.repeat,
            "median_s": {k: round(v, 3) for k, v in median.items()},
            "one_decode_vs_two_runs": round(median["one decode"] / median["two runs"], 3),
            "ours_vs_bare": round(median["ours"] / median["bare"], 3),
            "speed_factor": round(median["ours"] / args.seconds, 3),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['ffmpeg']} ({result['binaries']}), {result['cpus']} CPUs, {args.seconds} s 1080p source, "
          f"median of {args.repeat}")  # fmt: skip
    print(f"{'variant':<12} {'wall s':>8}  runs")
    for name, values in times.items():
        print(f"{name:<12} {median[name]:>8.2f}  {' '.join(f'{v:.2f}' for v in values)}")
    print(f"\none decode / two runs: {result['one_decode_vs_two_runs']:.3f}  (aim <= 0.80)")
    print(f"ours / bare ffmpeg:    {result['ours_vs_bare']:.3f}  (aim <= 1.05)")
    print(f"speed factor:          {result['speed_factor']:.3f} s of work per s of 1080p source")
    return 0


if __name__ == "__main__":
    sys.exit(main())
