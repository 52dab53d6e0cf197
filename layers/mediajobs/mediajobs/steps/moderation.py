"""The moderation steps: what a content's moderation job decides, before any rendition.

Each step judges one content by the policy its job's key carries
(:func:`mediajobs.domain.moderation.judged`) and returns the decision as the manifest's
``decisions.moderation`` (:func:`mediajobs.domain.moderation.decision_document`); it writes
no file. The service layer acts on the outcome (``service_layer/runner.py``): ``accepted``
commits, ``rejected`` fails the job ``rejected``, ``review`` holds it for a person.

* ``moderation.image``: the upright sRGB picture, decoded as the renditions decode it (in
  production inside the bounded render child: :class:`ImageSample`), fitted inside
  ``box_px``, is encoded as a JPEG (quality 90) and sent to the label source, and its
  difference hash (:func:`mediajobs.adapters.perceptual.dhash`) computed. A picture with
  transparency is judged as a page would show it on white **and** on black (two samples):
  its renditions keep the alpha channel, so a picture hidden in it (white pixels, the
  content in their alpha) must not pass as blank.
* ``moderation.video``: the poster frame (``web-video``'s, at 10 % of the duration) and a
  frame every ``video_frame_every_s`` of the policy (:func:`frame_times`), each taken by
  ffmpeg already scaled (the same input allow-list as every video read), then as an image.

Nothing of the content but those JPEGs leaves the worker, and they are never stored: the
decision keeps hashes, labels and confidences only.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Final

from PIL import Image

from mediajobs.adapters.imaging import MAX_FRAMES, MAX_JPEG_SCANS, PillowRenderer
from mediajobs.adapters.perceptual import dhash
from mediajobs.domain.errors import DeadlineReached, TransientFailure
from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.moderation import (
    NO_POLICY,
    Label,
    PolicyDocument,
    PolicyError,
    Sample,
    decision_document,
    judged,
    policy_of,
)
from mediajobs.domain.recipes import ModerationParams, fit_within
from mediajobs.service_layer.ports import LabelsFound, LabelSource, Step, StepResult
from mediajobs.steps.placeholder import FrameSource

#: JPEG quality of the pictures sent to the label source (Pillow's scale): high enough that
#: compression adds nothing a classifier would see, small enough to stay far below 5 MB.
SAMPLE_JPEG_QUALITY: Final = 90
#: The files the image samples are written to in the step's folder (removed once read):
#: the picture on white, and -- for a picture with transparency -- on black.
SAMPLE_FILE: Final = "moderation-sample.jpg"
SAMPLE_DARK_FILE: Final = "moderation-sample-dark.jpg"
#: Where a video's poster frame is, as a fraction of its duration (``web-video``'s poster).
POSTER_AT_FRACTION: Final = 0.1


def flattened(image: Image.Image, background: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    """``image`` as ``RGB``, its transparent pixels shown over ``background`` as a page would."""
    if image.mode in ("RGBA", "LA", "P", "PA"):
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, background)
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return image if image.mode == "RGB" else image.convert("RGB")


def has_transparency(image: Image.Image) -> bool:
    """Whether any pixel of ``image`` is not fully opaque."""
    if image.mode not in ("RGBA", "LA", "P", "PA"):
        return False
    low, _ = image.convert("RGBA").getchannel("A").getextrema()  # one band: (min, max)
    return bool(int(low) < 255)  # type: ignore[arg-type]


def jpeg_of(image: Image.Image) -> bytes:
    """``image`` as JPEG bytes (quality :data:`SAMPLE_JPEG_QUALITY`), flattened on white
    when it has alpha (JPEG has none; :func:`flattened`)."""
    out = io.BytesIO()
    flattened(image).save(out, "JPEG", quality=SAMPLE_JPEG_QUALITY)
    return out.getvalue()


def frame_times(duration_s: float, every_s: float, max_frames: int) -> list[float]:
    """The times, seconds, a video of ``duration_s`` is sampled at: its poster
    (:data:`POSTER_AT_FRACTION` of the duration) first, then 0, ``every_s``, 2 x ``every_s`` ...
    before the end -- at most ``max_frames`` in all, the interval widened evenly when the
    video is longer than ``every_s`` x (``max_frames`` - 1). Pure.

    Raises
    ------
    ValueError
        When ``every_s`` is not positive or ``max_frames`` is below 1.
    """
    if every_s <= 0 or max_frames < 1:
        raise ValueError(f"every_s must be > 0 and max_frames >= 1, got {every_s}, {max_frames}")
    poster = round(max(duration_s, 0.0) * POSTER_AT_FRACTION, 3)
    count = max(1, math.ceil(max(duration_s, 0.0) / every_s))
    step = every_s if count <= max_frames - 1 else duration_s / max(max_frames - 1, 1)
    times = [poster]
    t = 0.0
    while len(times) < max_frames and t < max(duration_s, 1e-9):
        if abs(t - poster) > 1e-3:
            times.append(round(t, 3))
        t += step
    return times


class ImageSample:
    """The ``moderation.sample`` child step: decodes an image as the renditions do (the same
    limits) and writes the pictures the label source is sent, fitted in ``box_px``: on white
    (:data:`SAMPLE_FILE`) and, when it has transparency, on black
    (:data:`SAMPLE_DARK_FILE`); its decisions carry each one's difference hash as 16 hex
    digits (``{"perceptual": [...]}``, in that order). Run inside the bounded render child in
    production."""

    name: ClassVar[str] = "moderation.sample"
    params_model: ClassVar[type[ModerationParams]] = ModerationParams

    def __init__(self, max_pixels: int, max_frames: int = MAX_FRAMES, max_jpeg_scans: int = MAX_JPEG_SCANS) -> None:
        self._renderer = PillowRenderer(max_pixels, max_frames=max_frames, max_jpeg_scans=max_jpeg_scans)

    def run(self, source: Path, params: ModerationParams, context: RenderContext, out_dir: Path) -> StepResult:
        """Decode ``source``, write :data:`SAMPLE_FILE` into ``out_dir``, hash it.

        Raises
        ------
        PermanentFailure
            As :meth:`PillowRenderer.decode <mediajobs.adapters.imaging.PillowRenderer.decode>`.
        """
        image, _, display = self._renderer.decode(source, params.box_px)
        size = fit_within(display[0], display[1], params.box_px)
        if image.size != size:
            image = image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
        backgrounds = [(SAMPLE_FILE, (255, 255, 255))]
        if has_transparency(image):
            backgrounds.append((SAMPLE_DARK_FILE, (0, 0, 0)))
        hashes = []
        for name, background in backgrounds:
            shown = flattened(image, background)
            (out_dir / name).write_bytes(jpeg_of(shown))
            hashes.append(f"{dhash(shown):016x}")
        return StepResult(files=[], decisions={"perceptual": hashes})


@functools.cache
def _policy(policy_version: str) -> PolicyDocument:
    policy = policy_of(policy_version)
    if policy is None:
        raise PolicyError(f"POLICY_VERSION {policy_version!r} moderates nothing")
    return policy


def policy_for(context: RenderContext) -> PolicyDocument:
    """The policy the job's key carries (``context.policy_version``), loaded once.

    Raises
    ------
    TransientFailure
        The job carries no policy, or one this deployment does not have (the deployment's
        fault, not the content's: redelivered, then dead-lettered and alarmed on).
    """
    try:
        return _policy(context.policy_version or NO_POLICY)
    except PolicyError as exc:
        raise TransientFailure(f"moderation policy: {exc}") from exc


class _Judge:
    """What both moderation steps share: the label source, and the decision."""

    def __init__(self, labels: LabelSource) -> None:
        self.labels = labels

    def decide(self, context: RenderContext, samples: list[Sample], found: list[LabelsFound]) -> StepResult:
        if context.content_sha256 is None:
            raise TransientFailure("a moderation job runs with its content's SHA-256")
        policy = policy_for(context)
        versions = sorted({f.model_version for f in found if f.model_version})
        loops = [f.human_loop for f in found if f.human_loop is not None]
        outcome = judged(policy, sha256=context.content_sha256, samples=samples)
        decisions = decision_document(
            policy,
            outcome,
            samples,
            model_version=",".join(versions) or None,
            label_source=self.labels.name,
            human_loop=loops[0] if len(loops) == 1 else (loops or None),
        )
        return StepResult(files=[], decisions=decisions)


class ModerationImage(_Judge):
    """The ``moderation.image`` step (module docstring).

    Parameters
    ----------
    labels: the label source (Rekognition's ``DetectModerationLabels``).
    sample: the ``moderation.sample`` step (:class:`ImageSample`), bounded in production.
    """

    name: ClassVar[str] = "moderation.image"
    params_model: ClassVar[type[ModerationParams]] = ModerationParams

    def __init__(self, labels: LabelSource, sample: Step) -> None:
        super().__init__(labels)
        self._sample = sample

    def run(self, source: Path, params: ModerationParams, context: RenderContext, out_dir: Path) -> StepResult:
        """Judge the image at ``source``.

        Raises
        ------
        PermanentFailure
            As the image's decode (``unsupported_format``, ``corrupt_image`` ...).
        TransientFailure
            The label source failed (throttled, unreachable): the job is retried.
        """
        sampled = self._sample.run(source, params, context, out_dir)
        samples: list[Sample] = []
        found: list[LabelsFound] = []
        for name, perceptual in zip((SAMPLE_FILE, SAMPLE_DARK_FILE), sampled.decisions["perceptual"], strict=False):
            path = out_dir / name
            labels = self.labels.detect(path.read_bytes(), min_confidence=params.min_confidence)
            path.unlink()
            samples.append(Sample(None, int(str(perceptual), 16), labels.labels))
            found.append(labels)
        return self.decide(context, samples, found)


class ModerationVideo(_Judge):
    """The ``moderation.video`` step (module docstring).

    Parameters
    ----------
    labels: the label source.
    make_source: builds the video adapter (:func:`mediajobs.bootstrap.video_renderer`) at
        the first video.
    """

    name: ClassVar[str] = "moderation.video"
    params_model: ClassVar[type[ModerationParams]] = ModerationParams

    def __init__(self, labels: LabelSource, make_source: Callable[[], FrameSource]) -> None:
        super().__init__(labels)
        self._make_source = make_source
        self._source: FrameSource | None = None

    def run(self, source: Path, params: ModerationParams, context: RenderContext, out_dir: Path) -> StepResult:
        """Judge the video at ``source`` (or at ``context.source_url``) on its sampled frames.

        Raises
        ------
        PermanentFailure
            From the probe (``invalid_media``, ``no_video_stream`` ...) or ``too_long``, as
            the video's renditions would.
        DeadlineReached
            No time left in the invocation.
        TransientFailure
            The label source or ffmpeg failed otherwise.
        """
        from mediajobs.domain.errors import TOO_LONG, VIDEO_SECONDS, PermanentFailure

        if self._source is None:
            self._source = self._make_source()
        video = self._source
        probe = video.probe(source)
        if probe.duration_s > video.max_duration_s:
            raise PermanentFailure(
                TOO_LONG, VIDEO_SECONDS.detail(f"{probe.duration_s:.1f} s", f"{video.max_duration_s:.0f} s")
            )
        display = probe.display_size
        size = fit_within(display[0], display[1], params.box_px)
        samples: list[Sample] = []
        found: list[LabelsFound] = []
        every_s = policy_for(context).video_frame_every_s
        for at_s in frame_times(probe.duration_s, every_s, params.max_frames):
            context.check()
            remaining = context.remaining_s()
            timeout_s = video.invocation_s if remaining is None else remaining - video.margin_s
            if timeout_s <= 0:
                raise DeadlineReached("no time left to sample the video's frames for moderation")
            rgb, taken_at_s = video.frame_rgb(source, probe, at_s, size, timeout_s)
            frame = Image.frombytes("RGB", size, rgb)
            labels = self.labels.detect(jpeg_of(frame), min_confidence=params.min_confidence)
            samples.append(Sample(round(taken_at_s, 3), dhash(frame), labels.labels))
            found.append(labels)
        return self.decide(context, samples, found)


__all__ = ["ImageSample", "Label", "ModerationImage", "ModerationVideo", "frame_times", "jpeg_of"]
