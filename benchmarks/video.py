"""Benchmark: the ``web-video@2`` renditions, one decode against two runs, and our pipeline
against the bare ffmpeg commands, on a generated 60 s 1080p source; then how close the budget's
estimates (:func:`~mediajobs.domain.video.estimated_seconds`,
:func:`~mediajobs.domain.video.expected_output_bytes`) come to what the render takes, for that
source and for a clip of tiny frames at a huge rate.

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
measured speed factor (seconds of work per second of 1080p30 source) for ``VIDEO_SPEED_FACTOR``.

The accuracy table renders, ``--repeat`` times each: the 1080p source (``ours`` above), and
a high-rate clip (:func:`generate_high_rate`: 16x16 at ``--high-rate-fps``, default 4,000 --
above 5,000 a source is refused, ``MAX_SOURCE_FPS`` -- for ``--high-rate-seconds``, default
2) with ``web-video@1`` (every frame encoded) and ``web-video@2`` (capped at 60 fps). For
each it prints the frames decoded and encoded, the median wall time against
:func:`estimated_seconds` at the speed factor just measured (and against the estimate of
duration x pixels that counted no frames), and the renditions' bytes against
:func:`expected_output_bytes`. Last, it times the issue's clip, 16x16 at 50,000 fps for
``--refused-seconds`` (default 20), from ``render`` to its ``too_many_frames`` refusal.

    .venv/bin/python benchmarks/video.py [--seconds 60] [--repeat 3] [--high-rate-seconds 2]
                                         [--high-rate-fps 4000] [--refused-seconds 20] [--json]

Before the rate bound (``MAX_SOURCE_FPS``), measured on 2 vCPUs with ffmpeg 7.0.2 (the
layer's x86_64 build), with other work on the machine (the speed factor moved between 0.47
and 1.04 over the afternoon), once with ``--seconds 20 --repeat 1 --high-rate-seconds 20``
(the issue's clip; speed factor 0.692):

    source                 recipe        decoded  encoded  wall s   est s  dur x px     bytes  est bytes
    1080p30 20 s           web-video@2       600     1200   13.85   13.92     13.85   5325000    9848400
    16x16 50000 fps 20 s   web-video@1   1000000  1000000   61.90  129.78      3.46  24734193   35000000
    16x16 50000 fps 20 s   web-video@2   1000000     1231   34.01   93.78      3.46     32070    3039392

and with ``--seconds 20 --repeat 3`` (speed factor 0.469):

    1080p30 20 s           web-video@2       600     1200    9.38    9.43      9.38   5335893    9848400
    16x16 50000 fps 2 s    web-video@1    100000   100000    4.46    8.79      1.00   2482537    4400000
    16x16 50000 fps 2 s    web-video@2    100000      151    5.35    6.35      1.00      4675    1204832

For 2 s the cap saves no time here: decoding 100,000 frames dominates, and the ``fps``
filter's hand-overs cost about what the encodes saved.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
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
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.recipes import VideoRenditionsParams
from mediajobs.domain.video import (
    RenditionPlan,
    VideoProbe,
    estimated_seconds,
    expected_output_bytes,
    plan_renditions,
    poster_argv,
    renditions_argv,
)

#: The recipe timed: the active one (``recipes/active.json``); for a 30 fps source its
#: outputs are those of version 1.
RECIPE_VERSION = 2


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


def generate_high_rate(path: Path, seconds: float, fps: int, binaries: ffmpeg.Binaries) -> None:
    """A 16x16 H.264 MP4 at ``fps`` frames per second for ``seconds``, no audio (``testsrc``:
    each frame differs, so x264 cannot skip them all)."""
    subprocess.run(
        [
            binaries.ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
            "-f", "lavfi", "-i", f"testsrc=size=16x16:rate={fps}:duration={seconds}",
            "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-f", "mp4", str(path),
        ],
        check=True,
    )  # fmt: skip


def time_to_refusal(
    renderer: FfmpegRenderer, clip: Path, params: VideoRenditionsParams, out: Path
) -> dict[str, object]:
    """Wall seconds from ``render`` to its refusal of ``clip`` (probe, plan, budget), with the reason and detail.

    Raises
    ------
    AssertionError
        If the clip is rendered instead.
    """
    out.mkdir()
    started = time.perf_counter()
    try:
        renderer.render(clip, params, out)
    except PermanentFailure as failure:
        return {"reason": failure.reason, "detail": failure.detail, "wall_s": round(time.perf_counter() - started, 3)}
    raise AssertionError(f"{clip} was rendered, not refused")


def pixels_estimate_s(probe: VideoProbe, speed_factor: float) -> float:
    """The estimate before frames were counted: duration x speed factor x pixels relative to
    1080p (at least a quarter), at least 1 s."""
    width, height = probe.display_size
    return max(1.0, probe.duration_s * speed_factor * max(0.25, width * height / (1920 * 1080)))


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def bare(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def single_rung(plan: RenditionPlan, index: int) -> RenditionPlan:
    return dataclasses.replace(plan, renditions=(plan.renditions[index],))


def mp4_bytes(folder: Path) -> int:
    """Bytes of the renditions in ``folder`` (the MP4s; the poster is in the estimate's 1 MB)."""
    return sum(f.stat().st_size for f in folder.glob("*.mp4"))


def row(
    source: str, probe: VideoProbe, plan: RenditionPlan, version: int, wall_s: float, size: int, speed_factor: float
) -> dict:
    """One line of the accuracy table: frames, wall time and bytes against the estimates."""
    return {
        "source": source,
        "recipe": f"web-video@{version}",
        "frames_decoded": probe.frames,
        "frames_encoded": plan.frames_out * len(plan.renditions),
        "wall_s": round(wall_s, 2),
        "estimated_s": round(estimated_seconds(probe, plan, speed_factor), 2),
        "pixels_estimate_s": round(pixels_estimate_s(probe, speed_factor), 2),
        "bytes": size,
        "estimated_bytes": expected_output_bytes(probe, plan),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60, help="length of the generated source (default 60)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant (default 3)")
    parser.add_argument("--high-rate-seconds", type=float, default=2, help="length of the high-rate clip (default 2)")
    parser.add_argument("--high-rate-fps", type=int, default=4_000, help="its frame rate (default 4000)")
    parser.add_argument(
        "--refused-seconds", type=float, default=20, help="length of the 50,000 fps clip timed to its refusal (0: none)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()

    binaries = ffmpeg.find_binaries()
    recipe = load_recipe("web-video", RECIPE_VERSION)
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
        speed_factor = median["ours"] / args.seconds
        accuracy = [
            row(f"1080p30 {args.seconds} s", probe, plan, RECIPE_VERSION, median["ours"], mp4_bytes(work / "ours"),
                speed_factor)
        ]  # fmt: skip
        high = work / "high-rate"
        print(f"generating {args.high_rate_seconds} s of 16x16 at {args.high_rate_fps} fps ...", file=sys.stderr)
        generate_high_rate(high, args.high_rate_seconds, args.high_rate_fps, binaries)
        high_probe = renderer.probe(high)
        for version in (1, 2):
            high_params = load_recipe("web-video", version).params
            assert isinstance(high_params, VideoRenditionsParams)
            high_plan = plan_renditions(high_probe, high_params)
            folder = work / f"high-v{version}"
            runs = []
            for _ in range(args.repeat):
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                runs.append(timed(functools.partial(renderer.render, high, high_params, folder)))
            label = f"16x16 {args.high_rate_fps} fps {args.high_rate_seconds:g} s"
            wall = statistics.median(runs)
            accuracy.append(row(label, high_probe, high_plan, version, wall, mp4_bytes(folder), speed_factor))
        refused = None
        if args.refused_seconds:
            clip = work / "refused-rate"
            print(f"generating {args.refused_seconds:g} s of 16x16 at 50000 fps ...", file=sys.stderr)
            generate_high_rate(clip, args.refused_seconds, 50_000, binaries)
            refused = time_to_refusal(renderer, clip, params, work / "refused-out")
        result = {
            "ffmpeg": ffmpeg.version(binaries.ffmpeg),
            "binaries": binaries.origin,
            "cpus": os.cpu_count(),
            "source_seconds": args.seconds,
            "repeat": args.repeat,
            "median_s": {k: round(v, 3) for k, v in median.items()},
            "one_decode_vs_two_runs": round(median["one decode"] / median["two runs"], 3),
            "ours_vs_bare": round(median["ours"] / median["bare"], 3),
            "speed_factor": round(speed_factor, 3),
            "accuracy": accuracy,
            "refused": refused,
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
    print(f"\nestimates at speed factor {result['speed_factor']:.3f} against the render (median of {args.repeat})")
    print(f"{'source':<26} {'recipe':<13} {'decoded':>8} {'encoded':>8} {'wall s':>7} {'est s':>7} "
          f"{'dur x px':>8} {'bytes':>10} {'est bytes':>10}")  # fmt: skip
    for entry in accuracy:
        print(f"{entry['source']:<26} {entry['recipe']:<13} {entry['frames_decoded']:>8} {entry['frames_encoded']:>8} "
              f"{entry['wall_s']:>7.2f} {entry['estimated_s']:>7.2f} {entry['pixels_estimate_s']:>8.2f} "
              f"{entry['bytes']:>10} {entry['estimated_bytes']:>10}")  # fmt: skip
    if refused:
        print(f"\n16x16 at 50000 fps for {args.refused_seconds:g} s: {refused['reason']}"
              f" after {refused['wall_s']:.2f} s ({refused['detail']})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
