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
import shutil
from pathlib import Path

from mediajobs.adapters import ffmpeg
from mediajobs.domain.errors import (
    INVALID_MEDIA,
    PIXELS,
    TOO_MANY_PIXELS,
    DeadlineReached,
    PermanentFailure,
    TransientFailure,
)
from mediajobs.domain.inspections.containers import container_problem, top_level_boxes
from mediajobs.domain.jobs import RenderContext, RenderedFile
from mediajobs.domain.recipes import VideoRenditionsParams
from mediajobs.domain.video import (
    Budget,
    Expected,
    RenditionPlan,
    VideoDecisions,
    VideoProbe,
    check_budget,
    classify,
    decisions_for,
    estimated_seconds,
    ffprobe_argv,
    ffprobe_output_argv,
    ffprobe_packets_argv,
    frame_argv,
    media_duration_s,
    packets_end_s,
    parse_probe,
    plan_renditions,
    playlist_problem,
    poster_argv,
    poster_problems,
    progress_seconds,
    rendition_failure,
    renditions_argv,
    verification_failure,
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
    ) -> None:
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
        probe = parse_probe(document, packets_duration_s=packets)
        if probe.coded_width * probe.coded_height > self.max_pixels:
            raise PermanentFailure(
                TOO_MANY_PIXELS,
                PIXELS.detail(f"{probe.coded_width}x{probe.coded_height} frames", f"{self.max_pixels} pixels"),
            )
        return probe

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
        """
        context = context or RenderContext()
        probe = self.probe(source)
        plan = plan_renditions(probe, params)
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
        poster = self._poster(source, probe, plan, params, out_dir, timeout)
        files = [self._verified(out_dir / f"{r.name}.mp4", r.name, probe, r.width, r.height) for r in plan.renditions]
        files.append(poster)
        return files, decisions_for(probe, plan, ffmpeg.version(binaries.ffmpeg))

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
        source: Path,
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
            argv = poster_argv(self.binaries.ffmpeg, str(source), probe, plan_at, params, str(path))
            completed = self._run(argv, timeout, out_dir)
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
        return self._rendered(path, params.poster.name, "jpeg", "image/jpeg", width, height)

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
        return self._rendered(path, name, "mp4", "video/mp4", width, height)

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


def _at_start(plan: RenditionPlan) -> RenditionPlan:
    return dataclasses.replace(plan, poster_at_s=0.0)
