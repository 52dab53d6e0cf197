"""Video renditions and the poster frame with ffmpeg: probe, plan, budget, encode, verify.

The decisions live in :mod:`mediajobs.domain.video`; this module runs them in order:

1. ffprobe (allow-listed demuxers, local file only, every packet counted) ->
   :class:`VideoProbe`, or a permanent failure (``unsupported_container``,
   ``no_video_stream``, ``invalid_media`` ...);
2. the plan (rungs not taller than the source, or one ``source`` rendition; the recipe's
   frame rate cap) and the budget (time from the frames to decode and encode, /tmp space)
   before any encoder starts;
3. one ffmpeg run that decodes once and encodes every rendition (``split``), its progress
   passed on and the job's lease checked at every ``-progress`` block;
4. the poster frame (``-ss`` before ``-i``);
5. every output probed again and checked against the plan before it is returned.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mediajobs.adapters import ffmpeg
from mediajobs.domain.errors import (
    INVALID_MEDIA,
    PIXELS,
    TOO_LONG,
    TOO_MANY_PIXELS,
    DeadlineReached,
    PermanentFailure,
    TransientFailure,
)
from mediajobs.domain.inspections.containers import container_problem, top_level_boxes
from mediajobs.domain.jobs import RenderContext, RenderedFile
from mediajobs.domain.parts import Split, SplitNeeded, split_of
from mediajobs.domain.recipes import CONTENT_TYPES, M4A_CONTENT_TYPE, MP4_CONTENT_TYPE, VideoRenditionsParams
from mediajobs.domain.segments import SEGMENT_SECONDS, should_split
from mediajobs.domain.video import (
    Budget,
    Expected,
    RenditionPlan,
    VideoDecisions,
    VideoProbe,
    audio_argv,
    av_alignment_problems,
    check_budget,
    classify,
    decisions_for,
    estimated_seconds,
    ffprobe_argv,
    ffprobe_output_argv,
    ffprobe_packets_argv,
    frame_argv,
    join_argv,
    join_list,
    keyframes_argv,
    media_duration_s,
    output_duration_s,
    packets_end_s,
    parse_probe,
    plan_renditions,
    plan_split,
    playlist_problem,
    poster_argv,
    poster_problems,
    progress_seconds,
    read_problem,
    rendition_failure,
    renditions_argv,
    segment_argv,
    stream_frames,
    verification_failure,
    video_duration_problem,
)

log = logging.getLogger(__name__)

#: Longest an ffprobe run may take, seconds (it reads headers and a few packets).
PROBE_TIMEOUT_S = 60


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _failure(tool: str, completed: ffmpeg.Completed) -> PermanentFailure | TransientFailure:
    """The permanent failure ``completed``'s stderr means, else a transient one quoting it."""
    permanent = classify(completed.stderr_tail)
    if permanent is not None:
        return permanent
    last = completed.stderr_tail.strip().splitlines()[-5:]
    return TransientFailure(f"{tool} exited {completed.returncode}: {' | '.join(last) or 'no message'}")


class FfmpegRenderer:
    """Renders the ``video.renditions`` step with ffmpeg/ffprobe.

    Parameters
    ----------
    speed_factor: seconds of work per second of 1080p 30 fps source, measured
        (``benchmarks/video.py``); scaled by the actual frames and pixels
        (:func:`~mediajobs.domain.video.estimated_seconds`).
    max_duration_s: longest accepted source, seconds.
    invocation_s: time a whole invocation gives a job (function timeout minus margin), seconds.
    margin_s: seconds kept at the end of an invocation to release the claim.
    max_pixels: largest accepted frame, width x height (the images' ``MAX_PIXELS``).
    binaries: ffmpeg/ffprobe to run; found by :func:`mediajobs.adapters.ffmpeg.find_binaries`
        when ``None`` (at the first render, so image-only workers never look).
    split_above_s: a video whose estimate exceeds this many seconds of work is split into
        segments (``SPLIT_ABOVE_SECONDS``; ``None``: never split, the single pass or
        ``too_long``).
    segment_s: the length of source a segment covers, seconds (``SEGMENT_SECONDS``).
    """

    def __init__(
        self,
        *,
        speed_factor: float,
        max_duration_s: float,
        invocation_s: float,
        margin_s: float,
        max_pixels: int = 50_000_000,
        binaries: ffmpeg.Binaries | None = None,
        split_above_s: float | None = None,
        segment_s: float = SEGMENT_SECONDS,
    ) -> None:
        self.split_above_s = split_above_s
        self.segment_s = segment_s
        self._facts: dict[Path, dict[str, Any]] = {}
        self.speed_factor = speed_factor
        self.max_duration_s = max_duration_s
        self.invocation_s = invocation_s
        self.margin_s = margin_s
        self.max_pixels = max_pixels
        self._binaries = binaries

    @property
    def binaries(self) -> ffmpeg.Binaries:
        """The programs in use (raises :class:`~mediajobs.adapters.ffmpeg.FfmpegMissing`)."""
        if self._binaries is None:
            self._binaries = ffmpeg.find_binaries()
        return self._binaries

    def probe(self, source: Path) -> VideoProbe:
        """Probe ``source`` with the allow-list.

        A playlist or script (HLS, ffconcat, DASH ...) is refused from its first bytes,
        before ffprobe runs.

        Raises
        ------
        PermanentFailure
            ``unsupported_container``, ``invalid_media`` (also for an MP4/MOV whose last box
            is cut short), ``no_video_stream``, ``unsupported_codec``, ``too_many_pixels``.
        TransientFailure
            When ffprobe fails for a reason the classification does not know, or times out.
        """
        return self._probed(source)[0]

    def _probed(self, source: Path) -> tuple[VideoProbe, dict[str, Any]]:
        """:meth:`probe`, and what it read: ``{"document": <ffprobe's JSON>,
        "packets_duration_s": <float | None>}`` (:func:`_parsed` reads it again)."""
        with open(source, "rb") as f:
            if problem := playlist_problem(f.read(1024)):
                raise problem
        if truncated := container_problem(source):  # an ISO BMFF box runs past the end: a cut upload
            raise PermanentFailure(INVALID_MEDIA, f"truncated: {truncated.detail}")
        completed = self._run(ffprobe_argv(self.binaries.ffprobe, str(source)), PROBE_TIMEOUT_S, source.parent)
        if completed.returncode != 0:
            raise _failure("ffprobe", completed)
        try:
            document = json.loads(completed.stdout)
        except json.JSONDecodeError as exc:
            raise TransientFailure(f"ffprobe printed no JSON: {exc}") from exc
        packets = None
        if media_duration_s(document.get("format") or {}, document.get("streams") or []) is None:
            # No duration stored (a browser's MediaRecorder WebM): read the packets' times.
            listed = self._run(ffprobe_packets_argv(self.binaries.ffprobe, str(source)), PROBE_TIMEOUT_S, source.parent)
            if listed.returncode != 0:
                raise _failure("ffprobe", listed)
            packets = packets_end_s(listed.stdout.decode("utf-8", "replace"))
        facts = {"document": document, "packets_duration_s": packets}
        self._facts = {source: facts}  # the last source probed (one job at a time per renderer)
        return self._parsed(facts), facts

    def _parsed(self, facts: Mapping[str, Any]) -> VideoProbe:
        """The probe of what :meth:`_probed` read (a split's ``probe``).

        Raises
        ------
        PermanentFailure
            As :func:`~mediajobs.domain.video.parse_probe`; ``too_many_pixels``.
        """
        probe = parse_probe(dict(facts["document"]), packets_duration_s=facts.get("packets_duration_s"))
        if probe.coded_width * probe.coded_height > self.max_pixels:
            raise PermanentFailure(
                TOO_MANY_PIXELS,
                PIXELS.detail(f"{probe.coded_width}x{probe.coded_height} frames", f"{self.max_pixels} pixels"),
            )
        return probe

    def _split_probe(self, source: Path, context: RenderContext) -> tuple[VideoProbe, str]:
        """For a part or a join: the parent's probe from its split (else ``source`` probed
        again), and what ffmpeg reads: the presigned URL when there is one, else ``source``."""
        split = context.split
        probe = self._parsed(split.probe) if split is not None and split.probe else self.probe(source)
        return probe, context.source_url or str(source)

    def render(
        self, source: Path, params: VideoRenditionsParams, out_dir: Path, context: RenderContext | None = None
    ) -> tuple[list[RenderedFile], VideoDecisions]:
        """Render the renditions and the poster of the video at ``source`` into ``out_dir``.

        Returns
        -------
        (files, decisions)
            The renditions in ladder order, then the poster; what was decided.

        Raises
        ------
        PermanentFailure
            From :meth:`probe`; ``too_long`` / ``too_large`` from the budget; a classified
            ffmpeg failure; ``invalid_output`` when an output does not match its plan.
        DeadlineReached
            When the job fits an invocation but not what is left of this one.
        TransientFailure
            For any other ffmpeg failure or a timeout.
        SplitNeeded
            Instead of rendering: the estimate exceeds ``split_above_s`` and the source
            splits in two segments or more (:meth:`_split`).
        """
        context = context or RenderContext()
        probe = self.probe(source)
        facts = self._facts.get(source, {})  # what that probe read, for a split's record
        plan = plan_renditions(probe, params)
        if self._splits(probe, plan):
            check_budget(probe, plan, dataclasses.replace(self._budget(out_dir), invocation_s=math.inf))
            split = self._split(source, probe, plan, context, facts)
            if split is not None:
                raise SplitNeeded(split)
        check_budget(probe, plan, self._budget(out_dir))
        timeout = self._timeout(probe, plan, context)
        names = tuple(r.name for r in plan.renditions)

        def on_progress(block: dict[str, str]) -> None:
            context.check()
            done = progress_seconds(block)
            if done is not None:
                context.progress(names, min(done, probe.duration_s), probe.duration_s)

        binaries = self.binaries
        argv = renditions_argv(binaries.ffmpeg, str(source), probe, plan, params, str(out_dir))
        completed = self._run(argv, timeout, out_dir, on_progress)
        if completed.returncode != 0:
            raise _failure("ffmpeg", completed)
        context.progress(names, probe.duration_s, probe.duration_s)
        context.check()
        poster = self._poster(str(source), probe, plan, params, out_dir, timeout)
        files = [self._verified(out_dir / f"{r.name}.mp4", r.name, probe, r.width, r.height) for r in plan.renditions]
        files.append(poster)
        return files, decisions_for(probe, plan, ffmpeg.version(binaries.ffmpeg))

    # -- a long video in parts ----------------------------------------------------------

    def _splits(self, probe: VideoProbe, plan: RenditionPlan) -> bool:
        """Whether the single pass's estimate calls for a split (:func:`should_split`)."""
        if self.split_above_s is None or probe.duration_s > self.max_duration_s:
            return False
        needed = estimated_seconds(probe, plan, self.speed_factor)
        return should_split(needed, probe.duration_s, self.split_above_s, self.segment_s)

    def _split(
        self, source: Path, probe: VideoProbe, plan: RenditionPlan, context: RenderContext, facts: dict[str, Any]
    ) -> Split | None:
        """The parts of ``source``: its segments (:func:`plan_segments` on the keyframes and
        frame times ffprobe lists, on the renditions' frame grid when they are capped), then
        the audio track once when there is one. ``None`` when the plan has one segment
        only (no frame left for a second: the single pass runs).

        Raises
        ------
        PermanentFailure, TransientFailure
            As ffprobe's failures are classified, or a timeout.
        """
        listed = self._run(
            keyframes_argv(self.binaries.ffprobe, str(source), probe.stream_index),
            self._remaining(context),
            source.parent,
        )
        if listed.returncode != 0:
            raise _failure("ffprobe", listed)
        segments = plan_split(probe, plan, listed.stdout.decode("utf-8", "replace"), self.segment_s)
        if len(segments.segments) < 2:
            return None
        return split_of(segments, audio_s=probe.duration_s if probe.has_audio else None, probe=facts)

    def render_part(
        self, source: Path, params: VideoRenditionsParams, out_dir: Path, context: RenderContext
    ) -> tuple[list[RenderedFile], dict[str, Any]]:
        """Render one part of a split video into ``out_dir``: a segment's every rung, video
        only (:func:`~mediajobs.domain.video.segment_argv`: ``<rung>.mp4``), or the whole
        audio track at each rung's bitrate (:func:`~mediajobs.domain.video.audio_argv`:
        ``<rung>.m4a``). Each output is named after its rung.

        Returns
        -------
        (files, decisions)
            The outputs in ladder order; ``{"part": <identity>, "frames": {rung: n}}``.

        Raises
        ------
        PermanentFailure
            From :meth:`probe`; ``too_long`` when the part alone exceeds an invocation; a
            classified ffmpeg failure; ``invalid_output`` when an output is not its rung.
        TransientFailure
            For any other ffmpeg failure or a timeout.
        """
        part = context.part
        assert part is not None, "render_part renders a part"
        probe, src = self._split_probe(source, context)
        plan = plan_renditions(probe, params)
        check_budget(probe, plan, dataclasses.replace(self._budget(out_dir), invocation_s=math.inf))
        span_s = part.length_s if part.length_s is not None else max(probe.duration_s - part.seek_s, 0.0)
        timeout = self._remaining(context)
        names = tuple(r.name for r in plan.renditions)
        if part.is_audio:
            argv = audio_argv(self.binaries.ffmpeg, src, plan, params, str(out_dir))
        else:
            share = min(1.0, span_s / probe.duration_s) if probe.duration_s > 0 else 1.0
            needed = estimated_seconds(probe, plan, self.speed_factor) * share
            if needed > self.invocation_s:
                raise PermanentFailure(
                    TOO_LONG, f"a segment of {span_s:.1f} s needs about {needed:.0f} s; lower SEGMENT_SECONDS"
                )
            argv = segment_argv(
                self.binaries.ffmpeg, src, probe, plan, params, part.seek_s, part.length_s, str(out_dir)
            )

        def on_progress(block: dict[str, str]) -> None:
            context.check()
            done = progress_seconds(block)
            if done is not None:
                context.progress(names, min(done, span_s), span_s)

        completed = self._run(argv, timeout, out_dir, on_progress)
        _check_read(completed, context)
        if completed.returncode != 0:
            raise _failure("ffmpeg", completed)
        context.check()
        files, frames = [], {}
        for r in plan.renditions:
            if part.is_audio:
                path = out_dir / f"{r.name}.m4a"
                self._check_stream(path, r.name, "audio", None)
                files.append(self._rendered(path, r.name, "m4a", M4A_CONTENT_TYPE, 0, 0))
            else:
                path = out_dir / f"{r.name}.mp4"
                frames[r.name] = self._check_stream(path, r.name, "video", (r.width, r.height))
                files.append(self._rendered(path, r.name, "mp4", MP4_CONTENT_TYPE, r.width, r.height))
        return files, {"part": part.identity, "frames": frames}

    def join(
        self, source: Path, params: VideoRenditionsParams, out_dir: Path, context: RenderContext
    ) -> tuple[list[RenderedFile], dict[str, Any]]:
        """Join a split video's parts (found in ``context.inputs`` as ``"<part index>/<rung>"``)
        into each rung's rendition without re-encoding (:func:`~mediajobs.domain.video.join_argv`:
        the segments in order at their planned lengths, the audio muxed, the moov first),
        verify each as the single pass's are, its video's duration against the source's
        within a frame (:func:`~mediajobs.domain.video.video_duration_problem`), its frames
        against the segments' (a source
        whose damaged middle decodes fewer frames is what the single pass makes of it too),
        and its audio's start and end against the video's as the
        source has them, within a frame (:func:`~mediajobs.domain.video.av_alignment_problems`),
        then take the poster from the original.

        Returns
        -------
        (files, decisions)
            The renditions in ladder order, then the poster; the single pass's decisions
            with ``segments`` (the plan) added.

        Raises
        ------
        PermanentFailure
            ``invalid_output`` when a rendition is not what was planned or lost frames at
            the join; as :meth:`probe`.
        TransientFailure
            A part's output is missing (it is read again on the next attempt), any other
            ffmpeg failure, or a timeout.
        """
        split = context.split
        assert split is not None, "join joins a split job's parts"
        probe, src = self._split_probe(source, context)
        plan = plan_renditions(probe, params)
        timeout = self._remaining(context)
        audio_index = next((i for i, p in enumerate(split.parts) if p.is_audio), None)
        segments = [(i, p) for i, p in enumerate(split.parts) if not p.is_audio]
        folder = out_dir.with_name(out_dir.name + "-join")
        folder.mkdir(exist_ok=True)
        files = []
        for r in plan.renditions:
            listed = []
            for n, (i, part) in enumerate(segments):
                name = f"{r.name}-{n}.mp4"
                _link(_input(context.inputs, f"{i}/{r.name}"), folder / name)
                listed.append((name, part.join_s if n < len(segments) - 1 else max(part.join_s, 1e-6)))
            (folder / f"{r.name}.ffconcat").write_text(join_list(listed))
            audio, audio_offset_s = None, 0.0
            if audio_index is not None:
                audio = f"{r.name}.m4a"
                _link(_input(context.inputs, f"{audio_index}/{r.name}"), folder / audio)
                audio_offset_s = self._start_s(folder / audio)  # an audio track starting after the video
            out = out_dir / f"{r.name}.mp4"
            argv = join_argv(
                self.binaries.ffmpeg, f"{r.name}.ffconcat", audio, str(out), split.offset_s, audio_offset_s
            )
            completed = self._run(argv, timeout, folder)
            if completed.returncode != 0:
                raise _failure("ffmpeg join", completed)
            context.check()
            rendered = self._verified(out, r.name, probe, r.width, r.height)
            segment_frames = sum(self._frames(folder / name) for name, _ in listed)
            joined = self._frames(out)
            if joined != segment_frames:  # a frame lost or doubled at a boundary is ours to fix
                raise verification_failure(r.name, [f"{joined} frames joined, {segment_frames} in the segments"])
            document = self._probe_output(out)
            frame_s = output_duration_s(document) / joined if joined else 0.0
            original = dict(split.probe.get("document") or {})
            problems = av_alignment_problems(document, original, frame_s)
            if problem := video_duration_problem(document, original, probe.stream_index, frame_s):
                problems.append(problem)
            if problems:
                raise verification_failure(r.name, problems)
            files.append(rendered)
        shutil.rmtree(folder, ignore_errors=True)
        files.append(self._poster(src, probe, plan, params, out_dir, timeout))
        decisions = decisions_for(probe, plan, ffmpeg.version(self.binaries.ffmpeg)).to_json()
        return files, {**decisions, "segments": dict(split.plan)}

    def _remaining(self, context: RenderContext) -> float:
        """Seconds a tool may run: what is left of the invocation less the margin, or a
        whole invocation without a deadline."""
        remaining = context.remaining_s()
        return self.invocation_s if remaining is None else max(1.0, remaining - self.margin_s)

    def _check_stream(self, path: Path, name: str, kind: str, size: tuple[int, int] | None) -> int:
        """Check a part's output holds one ``kind`` stream (of ``size`` for video); its frames.

        Raises
        ------
        PermanentFailure
            ``invalid_output`` naming what differs.
        """
        if not path.exists():
            raise verification_failure(name, ["not written"])
        document = self._probe_output(path)
        streams = _streams(document)
        found = [s for s in streams if s.get("codec_type") == kind]
        if len(found) != 1 or len(streams) != 1:
            raise verification_failure(name, [f"{len(found)} {kind} streams of {len(streams)}"])
        if size is not None and (found[0].get("width"), found[0].get("height")) != size:
            got = f"{found[0].get('width')}x{found[0].get('height')}"
            raise verification_failure(name, [f"size {got}, planned {size[0]}x{size[1]}"])
        return stream_frames(found[0], 0.0)

    def _start_s(self, path: Path) -> float:
        """When the first stream of one of our files starts, seconds, at least 0."""
        streams = _streams(self._probe_output(path))
        try:
            start = float(streams[0]["start_time"]) if streams else 0.0
        except (KeyError, TypeError, ValueError):
            return 0.0
        return max(0.0, start) if math.isfinite(start) else 0.0

    def _frames(self, path: Path) -> int:
        """The video frames of one of our MP4s (its sample table's count)."""
        document = self._probe_output(path)
        streams = _streams(document)
        video = [s for s in streams if s.get("codec_type") == "video"]
        return stream_frames(video[0], 0.0) if video else 0

    def _budget(self, out_dir: Path) -> Budget:
        disk = shutil.disk_usage(out_dir)
        return Budget(
            speed_factor=self.speed_factor,
            max_duration_s=self.max_duration_s,
            invocation_s=self.invocation_s,
            free_bytes=disk.free,
            # An ffprobe unpacked from the layer into /tmp stays there: no job can use its space.
            capacity_bytes=disk.total - ffmpeg.unpacked_bytes_on(self.binaries, out_dir),
        )

    def _timeout(self, probe: VideoProbe, plan: RenditionPlan, context: RenderContext) -> float:
        """Seconds the encoder may run: what is left of the invocation, less the margin.

        Raises
        ------
        DeadlineReached
            When the estimate does not fit what is left (it fits a whole invocation: the
            budget check passed), so the record comes back in a fresh invocation.
        """
        remaining = context.remaining_s()
        if remaining is None:
            return self.invocation_s
        available = remaining - self.margin_s
        needed = estimated_seconds(probe, plan, self.speed_factor)
        if needed > available:
            raise DeadlineReached(f"{available:.0f} s left, the video needs about {needed:.0f} s")
        return available

    def _poster(
        self,
        source: str,
        probe: VideoProbe,
        plan: RenditionPlan,
        params: VideoRenditionsParams,
        out_dir: Path,
        timeout: float,
    ) -> RenderedFile:
        """The poster frame at ``plan.poster_at_s``; at 0 s when the seek lands past the last
        frame (a very short or sparse-keyframe file gives no frame there)."""
        path = out_dir / f"{params.poster.name}.jpg"
        for plan_at in (plan, _at_start(plan)):
            argv = poster_argv(self.binaries.ffmpeg, source, probe, plan_at, params, str(path))
            completed = self._run(argv, timeout, out_dir)
            if "://" in source and (problem := read_problem(completed.stderr_tail)):
                raise TransientFailure(f"reading the original was cut short: {problem}")
            if completed.returncode != 0:
                raise _failure("ffmpeg poster", completed)
            if path.exists() and path.stat().st_size > 0:
                break
        else:
            raise PermanentFailure(INVALID_MEDIA, "no frame could be decoded for the poster")
        document = self._probe_output(path)
        width, height = plan.poster_size
        if problems := poster_problems(document, width, height):
            raise verification_failure(params.poster.name, problems)
        return self._rendered(path, params.poster.name, "jpeg", CONTENT_TYPES["jpeg"], width, height)

    def frame_rgb(
        self, source: Path, probe: VideoProbe, at_s: float, size: tuple[int, int], timeout_s: float
    ) -> tuple[bytes, float]:
        """One display-oriented frame of ``source`` at ``at_s`` seconds, scaled to ``size``
        (width, height in pixels), with :func:`~mediajobs.domain.video.frame_argv`; the frame
        at 0 s when the seek lands past the last frame, as the poster does.

        Returns
        -------
        (rgb, taken_at_s)
            Raw RGB (``width * height * 3`` bytes, rows top to bottom) and the time it was
            taken at, seconds.

        Raises
        ------
        PermanentFailure
            A classified ffmpeg failure; ``invalid_media`` when no frame can be decoded.
        TransientFailure
            Any other ffmpeg failure, a timeout (``timeout_s``, seconds), or a frame of the
            wrong length.
        """
        width, height = size
        for at in (at_s, 0.0):
            argv = frame_argv(self.binaries.ffmpeg, str(source), probe, at, size)
            completed = self._run(argv, timeout_s, source.parent)
            if completed.returncode != 0:
                raise _failure("ffmpeg frame", completed)
            if completed.stdout:
                break
        else:
            raise PermanentFailure(INVALID_MEDIA, "no frame could be decoded for the placeholder")
        if len(completed.stdout) != width * height * 3:
            raise TransientFailure(f"ffmpeg wrote {len(completed.stdout)} bytes for a {width}x{height} RGB frame")
        return completed.stdout, at

    def _verified(self, path: Path, name: str, probe: VideoProbe, width: int, height: int) -> RenderedFile:
        """Check a rendition against its plan with ffprobe and its box order.

        Raises
        ------
        PermanentFailure
            ``invalid_output`` naming what differs; ``invalid_media`` when the source's
            streams end before its declared duration.
        """
        if not path.exists():
            raise verification_failure(name, ["not written"])
        document = self._probe_output(path)
        boxes = top_level_boxes(path)
        moov_first = "moov" in boxes and "mdat" in boxes and boxes.index("moov") < boxes.index("mdat")
        expected = Expected(width=width, height=height, duration_s=probe.duration_s, audio=probe.has_audio)
        if failure := rendition_failure(name, document, expected, moov_first=moov_first):
            raise failure
        return self._rendered(path, name, "mp4", MP4_CONTENT_TYPE, width, height)

    def slideshow(
        self,
        output: Path,
        *,
        size: tuple[int, int],
        duration_s: float,
        argv_of: Any,
        context: RenderContext,
    ) -> RenderedFile:
        """Encode a promo's slideshow (the pictures its concat list names, written by this
        worker, each ``size`` pixels) into ``output``, then verify it as a rendition: H.264
        High yuv420p at ``size``, ``duration_s`` long (within the tolerance), ``moov``
        first, no audio.

        Parameters
        ----------
        argv_of: ``(ffmpeg path) -> argv`` (:func:`mediajobs.domain.promo.slideshow_argv`
            bound to the list and the recipe; ``-progress pipe:1`` is added here).
        context: the lease's check and progress (``promo``), and the invocation's time left.

        Raises
        ------
        PermanentFailure
            ``invalid_output``: ffmpeg wrote something else.
        DeadlineReached
            No time left in the invocation.
        TransientFailure
            ffmpeg failed or timed out.
        """
        remaining = context.remaining_s()
        timeout = self.invocation_s if remaining is None else remaining - self.margin_s
        if timeout <= 0:
            raise DeadlineReached("no time left to encode the promo")
        argv: list[str] = argv_of(self.binaries.ffmpeg)
        argv[1:1] = ["-progress", "pipe:1", "-nostats"]

        def on_progress(block: dict[str, str]) -> None:
            context.check()
            done = progress_seconds(block)
            if done is not None:
                context.progress(("promo",), min(done, duration_s), duration_s)

        completed = self._run(argv, timeout, output.parent, on_progress)
        if completed.returncode != 0:
            raise _failure("ffmpeg", completed)
        document = self._probe_output(output)
        boxes = top_level_boxes(output)
        moov_first = "moov" in boxes and "mdat" in boxes and boxes.index("moov") < boxes.index("mdat")
        expected = Expected(width=size[0], height=size[1], duration_s=duration_s, audio=False)
        if failure := rendition_failure(output.stem, document, expected, moov_first=moov_first):
            raise failure
        return self._rendered(output, output.stem, "mp4", MP4_CONTENT_TYPE, size[0], size[1])

    def _probe_output(self, path: Path) -> dict[str, object]:
        completed = self._run(ffprobe_output_argv(self.binaries.ffprobe, str(path)), PROBE_TIMEOUT_S, path.parent)
        if completed.returncode != 0:
            raise verification_failure(path.name, [completed.stderr_tail.strip()[-300:] or "ffprobe failed"])
        document: dict[str, object] = json.loads(completed.stdout)
        return document

    @staticmethod
    def _rendered(path: Path, name: str, fmt: str, content_type: str, width: int, height: int) -> RenderedFile:
        return RenderedFile(
            name=name,
            format=fmt,
            path=path,
            width=width,
            height=height,
            bytes=path.stat().st_size,
            sha256=_sha256(path),
            content_type=content_type,
        )

    @staticmethod
    def _run(
        argv: list[str], timeout: float, cwd: Path, on_progress: ffmpeg.ProgressSink | None = None
    ) -> ffmpeg.Completed:
        try:
            return ffmpeg.run(argv, timeout_s=timeout, on_progress=on_progress, cwd=cwd)
        except ffmpeg.FfmpegTimeout as exc:
            raise TransientFailure(str(exc)) from exc


def _check_read(completed: ffmpeg.Completed, context: RenderContext) -> None:
    """A run that read the original through a presigned URL and says its read failed
    part-way (:func:`~mediajobs.domain.video.read_problem`) wrote short outputs, whatever
    its exit status: a transient failure (the next attempt reads again), checked before
    any classification (which would call a local file's I/O error bad media).

    Raises
    ------
    TransientFailure
        As above.
    """
    if context.source_url and (problem := read_problem(completed.stderr_tail)):
        raise TransientFailure(f"reading the original was cut short: {problem}")


def _streams(document: Mapping[str, object]) -> list[dict[str, Any]]:
    """The ``streams`` of an ffprobe document."""
    streams = document.get("streams")
    return [s for s in streams if isinstance(s, dict)] if isinstance(streams, list) else []


def _input(inputs: Mapping[str, Path], name: str) -> Path:
    """A part's output among a join's inputs.

    Raises
    ------
    TransientFailure
        When it is not there (the runner reads every committed output of every part).
    """
    path = inputs.get(name)
    if path is None or not path.is_file():
        raise TransientFailure(f"the join's input {name} is missing")
    return path


def _link(source: Path, dest: Path) -> None:
    """``dest`` names ``source``'s bytes: a hard link, else a copy (another filesystem)."""
    dest.unlink(missing_ok=True)
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)


def _at_start(plan: RenditionPlan) -> RenditionPlan:
    return dataclasses.replace(plan, poster_at_s=0.0)
