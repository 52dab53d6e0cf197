"""Benchmark: a long video encoded in segments and joined, against the single pass, on a
generated source (``benchmarks/video.py``'s generator: 1080p30 test pattern with grain and a
440 Hz tone, H.264 High at 15 Mbit/s + AAC, deterministic), 10 minutes by default.

Every job runs as its own ffmpeg or ffprobe process, one after another, pinned to one core
(``taskset -c CORE``), so a job's CPU (user + system of the child) and its wall time are
measured apart:

* **single pass**: :func:`~mediajobs.domain.video.renditions_argv`, every rung and the audio
  in one ffmpeg, as a video under ``SPLIT_ABOVE_SECONDS`` is rendered;
* **segmented**: the split (ffprobe's packet listing, :func:`~mediajobs.domain.video.keyframes_argv`,
  and :func:`~mediajobs.domain.segments.plan_segments`), each segment
  (:func:`~mediajobs.domain.video.segment_argv`), the audio once
  (:func:`~mediajobs.domain.video.audio_argv`) and each rung's join
  (:func:`~mediajobs.domain.video.join_argv`).

It prints:

1. the segmented total CPU against the single pass's (aim <= 1.15);
2. the critical path, split + the longest of (every segment, the audio) + the joins, against
   the single pass's wall time (aim <= 0.15 for 60 s segments): what the segments' fan-out
   across invocations would take if each ran on a core of its own;
3. the mean per-frame SSIM of the joined 720p against the single pass's 720p (aim >= 0.99),
   and the lowest SSIM of a segment's first frame against the median (aim: no boundary frame
   more than 0.02 below it): what resetting rate control and the VBV at every segment costs;
4. a projection for 1 hour of 1080p (assumptions printed with it; aim <= 120 s).

    .venv/bin/python benchmarks/video_segments.py [--minutes 10] [--segment-seconds 60] [--core 1] [--json FILE]

It is a benchmark, not a test: it exits 0 whether the aims are met or not.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from video import generate_source  # noqa: E402  (benchmarks/video.py)

from mediajobs.adapters import ffmpeg  # noqa: E402
from mediajobs.adapters.video import FfmpegRenderer  # noqa: E402
from mediajobs.bootstrap import load_recipe  # noqa: E402
from mediajobs.domain.recipes import VideoRenditionsParams  # noqa: E402
from mediajobs.domain.segments import to_s  # noqa: E402
from mediajobs.domain.video import (  # noqa: E402
    audio_argv,
    join_argv,
    join_list,
    keyframes_argv,
    plan_renditions,
    plan_split,
    renditions_argv,
    segment_argv,
)

AIM_CPU = 1.15
AIM_CRITICAL = 0.15
AIM_SSIM = 0.99
AIM_BOUNDARY_DROP = 0.02
AIM_HOUR_S = 120.0
PEER_HOUR_S = 230.0  # bnusunny/serverless-video-transcoder: 1 h of 1080p->720p in 3 min 50 s

#: The projection's assumptions. A video function of 3,538 MB has 2 vCPUs (Lambda gives one
#: vCPU per 1,769 MB: AWS Lambda Developer Guide, "Memory and computing power"), the cores a
#: segment is measured on here; S3 reads and writes at 85 MB/s a connection (AWS's "Performance
#: design patterns for Amazon S3": 85-90 MB/s per request); the source at 15 Mbit/s; a cold
#: start of 1 s; MaximumConcurrency 100 (every one of 60 segments at once).
VIDEO_MEMORY_MB = 3538
VCPUS = 2
S3_MB_PER_S = 85.0
SOURCE_MBIT_PER_S = 15.0
COLD_START_S = 1.0
MAXIMUM_CONCURRENCY = 100


def pinned(cores: str) -> list[str]:
    return ["taskset", "-c", cores] if shutil.which("taskset") else []


def job(argv: list[str], cores: str, cwd: Path | None = None) -> tuple[float, float, str]:
    """Run one job pinned to ``cores``: (CPU seconds of the child, wall seconds, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run([*pinned(cores), *argv], capture_output=True, text=True, check=True, cwd=cwd).stdout
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall, out


def ssim_frames(ffmpeg_bin: str, a: Path, b: Path, stats: Path) -> list[float]:
    """Per-frame SSIM (``All``) of ``a`` against ``b`` (ffmpeg's ``ssim`` filter)."""
    subprocess.run(
        [ffmpeg_bin, "-nostdin", "-v", "error", "-i", str(a), "-i", str(b), "-lavfi",
         f"[0:v][1:v]ssim=stats_file={stats}", "-f", "null", "-"],
        check=True,
    )  # fmt: skip
    return [float(line.split("All:")[1].split()[0]) for line in stats.read_text().splitlines() if "All:" in line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the generated source (default 10)")
    parser.add_argument("--segment-seconds", type=float, default=60.0, help="SEGMENT_SECONDS (default 60)")
    parser.add_argument("--core", default="1", help="the core every job is pinned to (default 1)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    binaries = ffmpeg.find_binaries()
    params = load_recipe("web-video", 2).params
    assert isinstance(params, VideoRenditionsParams)
    work = Path(tempfile.mkdtemp(prefix="mediajobs-segments-"))
    try:
        source = work / "original"
        seconds = round(args.minutes * 60)
        print(f"generating {seconds} s of 1080p30 with audio ...", file=sys.stderr, flush=True)
        generate_source(source, seconds, binaries)
        renderer = FfmpegRenderer(speed_factor=1.0, max_duration_s=10800, invocation_s=10800, margin_s=10)
        probe = renderer.probe(source)
        renditions = plan_renditions(probe, params)
        (work / "single").mkdir()
        print("single pass ...", file=sys.stderr, flush=True)
        single_cpu, single_wall, _ = job(
            renditions_argv(binaries.ffmpeg, str(source), probe, renditions, params, str(work / "single")), args.core
        )
        print("segmented ...", file=sys.stderr, flush=True)
        split_cpu, split_wall, listing = job(
            keyframes_argv(binaries.ffprobe, str(source), probe.stream_index), args.core
        )
        plan = plan_split(probe, renditions, listing, args.segment_seconds)
        segments: list[dict[str, Any]] = []
        for segment in plan.segments:
            folder = work / f"segment-{segment.index}"
            folder.mkdir()
            start, length = plan.encode_range(segment)
            argv_ = segment_argv(binaries.ffmpeg, str(source), probe, renditions, params, start, length, str(folder))
            cpu, wall, _ = job(argv_, args.core)
            segments.append({**segment.to_json(), "cpu_s": round(cpu, 3), "wall_s": round(wall, 3)})
            print(
                f"  segment {segment.index}: {segment.duration_s:.1f} s of source, {cpu:.1f} s CPU",
                file=sys.stderr,
                flush=True,
            )
        (work / "audio").mkdir()
        audio_job = audio_argv(binaries.ffmpeg, str(source), renditions, params, str(work / "audio"))
        audio_cpu, audio_wall, _ = job(audio_job, args.core)
        join_cpu = join_wall = 0.0
        for r in renditions.renditions:
            names = [f"segment-{s.index}/{r.name}.mp4" for s in plan.segments]
            (work / f"{r.name}.ffconcat").write_text(join_list(list(zip(names, plan.join_durations(), strict=True))))
            out = str(work / f"{r.name}.mp4")
            cpu, wall, _ = job(
                join_argv(binaries.ffmpeg, f"{r.name}.ffconcat", f"audio/{r.name}.m4a", out, to_s(plan.video_start_us)),
                args.core,
                cwd=work,
            )
            join_cpu, join_wall = join_cpu + cpu, join_wall + wall
        # one segment again on both cores: the projection's 2-vCPU segment time
        both = ",".join(sorted({args.core, "0" if args.core != "0" else "1"}))
        longest = max(plan.segments, key=lambda s: s.end_us - s.start_us)
        (work / "again").mkdir()
        again = segment_argv(binaries.ffmpeg, str(source), probe, renditions, params, to_s(longest.start_us),
                             to_s(longest.end_us - longest.start_us), str(work / "again"))  # fmt: skip
        _, two_core_wall, _ = job(again, both)
        print("SSIM ...", file=sys.stderr, flush=True)
        top = renditions.renditions[0].name
        ssim = ssim_frames(binaries.ffmpeg, work / f"{top}.mp4", work / "single" / f"{top}.mp4", work / "ssim.log")
        frames = [int(s) for s in _segment_frames(binaries.ffprobe, work, plan, top)]
        firsts = [sum(frames[:i]) for i in range(len(frames))]
        result = summarise(
            args, probe.duration_s, plan.to_json(), segments, single_cpu, single_wall, split_cpu, split_wall,
            audio_cpu, audio_wall, join_cpu, join_wall, ssim, firsts, two_core_wall, longest.duration_s, top,
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


def _segment_frames(ffprobe_bin: str, work: Path, plan: Any, rung: str) -> list[str]:
    """Each segment's frame count of ``rung`` (ffprobe's ``nb_frames``)."""
    counts = []
    for s in plan.segments:
        out = subprocess.run(
            [ffprobe_bin, "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=nb_frames", "-of",
             "csv=p=0", str(work / f"segment-{s.index}" / f"{rung}.mp4")],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        counts.append(out)
    return counts


def summarise(
    args: argparse.Namespace,
    duration_s: float,
    plan: dict[str, Any],
    segments: list[dict[str, Any]],
    single_cpu: float,
    single_wall: float,
    split_cpu: float,
    split_wall: float,
    audio_cpu: float,
    audio_wall: float,
    join_cpu: float,
    join_wall: float,
    ssim: list[float],
    firsts: list[int],
    two_core_wall: float,
    longest_s: float,
    rung: str,
) -> dict[str, Any]:
    """Print the four figures and their aims; return every figure."""
    verdict = {True: "PASS", False: "MISS"}
    seg_cpu = sum(s["cpu_s"] for s in segments)
    total = split_cpu + seg_cpu + audio_cpu + join_cpu
    critical = split_wall + max(max(s["wall_s"] for s in segments), audio_wall) + join_wall
    median = statistics.median(ssim)
    boundary = [ssim[i] for i in firsts if i < len(ssim)]
    drop = median - min(boundary)
    # projection: 1 h at this source's rate, SEGMENT_SECONDS segments, all at once
    hour_s = 3600.0
    count = math.ceil(hour_s / args.segment_seconds)
    per_segment = two_core_wall * args.segment_seconds / longest_s
    read_s = SOURCE_MBIT_PER_S / 8 * args.segment_seconds / S3_MB_PER_S
    out_mb = 3.3 / 8 * args.segment_seconds  # both rungs' caps, 2.5 + 0.8 Mbit/s
    write_s = out_mb / S3_MB_PER_S
    waves = math.ceil(count / MAXIMUM_CONCURRENCY)
    audio_hour = audio_wall * hour_s / duration_s
    join_hour = join_wall * hour_s / duration_s + 2 * (3.3 / 8 * hour_s) / S3_MB_PER_S  # read segments, write
    split_hour = split_wall * hour_s / duration_s
    segment_leg = waves * (COLD_START_S + read_s + per_segment + write_s)
    projection = split_hour + COLD_START_S + max(segment_leg, audio_hour) + join_hour
    figures = {
        "source_s": duration_s,
        "segments": len(segments),
        "exact_cuts": plan["exact_cuts"],
        "cpu_s": {"single": single_cpu, "split": split_cpu, "segments": seg_cpu, "audio": audio_cpu, "join": join_cpu},
        "cpu_ratio": total / single_cpu,
        "wall_s": {
            "single": single_wall,
            "split": split_wall,
            "longest_segment": max(s["wall_s"] for s in segments),
            "audio": audio_wall,
            "join": join_wall,
        },  # fmt: skip
        "critical_ratio": critical / single_wall,
        "ssim_mean": statistics.fmean(ssim),
        "ssim_median": median,
        "ssim_lowest_boundary": min(boundary),
        "ssim_boundary_drop": drop,
        "projection_hour_s": projection,
        "projection_parts_s": {
            "split": split_hour,
            "segment_leg": segment_leg,
            "audio": audio_hour,
            "join": join_hour,
            "per_segment_compute": per_segment,
            "read": read_s,
            "write": write_s,
        },  # fmt: skip
        "plan": plan,
        "segment_jobs": segments,
    }
    print(f"source: {duration_s:.1f} s of 1080p30 + AAC; {len(segments)} segments of about {args.segment_seconds:g} s"
          f" ({plan['exact_cuts']} exact cuts); one core ({args.core}) a job")  # fmt: skip
    print(f"CPU: segmented {total:.1f} s (split {split_cpu:.1f}, segments {seg_cpu:.1f}, audio {audio_cpu:.1f},"
          f" join {join_cpu:.1f}) against the single pass's {single_cpu:.1f} s: {figures['cpu_ratio']:.3f}"
          f" (aim <= {AIM_CPU}: {verdict[figures['cpu_ratio'] <= AIM_CPU]})")  # fmt: skip
    print(f"critical path: {critical:.1f} s (split {split_wall:.1f} + longest of segments"
          f" {max(s['wall_s'] for s in segments):.1f} and audio {audio_wall:.1f} + joins {join_wall:.1f}) against the"
          f" single pass's {single_wall:.1f} s: {figures['critical_ratio']:.3f}"
          f" (aim <= {AIM_CRITICAL}: {verdict[figures['critical_ratio'] <= AIM_CRITICAL]})")  # fmt: skip
    print(f"SSIM of the joined {rung} against the single pass's, per frame: mean {figures['ssim_mean']:.4f}"
          f" (aim >= {AIM_SSIM}: {verdict[figures['ssim_mean'] >= AIM_SSIM]}), median {median:.4f}; lowest segment"
          f" start {min(boundary):.4f}, {drop:.4f} below the median"
          f" (aim <= {AIM_BOUNDARY_DROP}: {verdict[drop <= AIM_BOUNDARY_DROP]})")  # fmt: skip
    print(f"projection, 1 h of 1080p: {projection:.0f} s (aim <= {AIM_HOUR_S:.0f}:"
          f" {verdict[projection <= AIM_HOUR_S]}; the peer's {PEER_HOUR_S:.0f} s). Assumed: a {VIDEO_MEMORY_MB} MB"
          f" video function ({VCPUS} vCPUs, one per 1,769 MB), {count} segments at MaximumConcurrency"
          f" {MAXIMUM_CONCURRENCY} ({waves} wave), a segment's compute {per_segment:.1f} s (measured here on 2 cores,"
          f" scaled to {args.segment_seconds:g} s), S3 at {S3_MB_PER_S:g} MB/s a connection (read {read_s:.1f} s,"
          f" write {write_s:.1f} s), {COLD_START_S:g} s cold starts, the split {split_hour:.1f} s, the audio"
          f" {audio_hour:.1f} s and the joins {join_hour:.1f} s scaled from this source")  # fmt: skip
    return figures


if __name__ == "__main__":
    sys.exit(main())
