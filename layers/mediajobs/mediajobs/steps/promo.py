"""The ``promo.slideshow`` step: an album's promo (:mod:`mediajobs.domain.promo`).

Its inputs are the album's renditions (``card-<i>``) and the moderation decisions they
were rendered under (``decision-<i>``). For each rendition, in order:

1. it is decoded as every image is (:class:`~mediajobs.adapters.imaging.PillowRenderer`:
   the same limits), upright, flattened on white;
2. the centred crop with the frame's aspect ratio (:func:`~mediajobs.domain.promo.crop_box`)
   is scaled to the frame: **that crop is what is shown**;
3. under a policy, the crop is judged like an image (:func:`~mediajobs.domain.moderation.judged`:
   its difference hash and the label source's labels; the exact-hash rule on the
   rendition's bytes), since a crop can show what the whole did not -- a crop the policy
   does not accept is left out, with its decision;
4. it is written as a PPM picture.

Each crossfade's pictures are blended here (Pillow, linearly, as ffmpeg's ``xfade`` fade),
and ffmpeg encodes the list of pictures into ``promo.mp4`` through one input, the concat
demuxer (:func:`~mediajobs.domain.promo.slideshow_argv`: argv only, the ``file`` protocol,
``-safe 1`` and the PPM demuxers only), verified as a rendition is. One ``xfade`` per card
instead held every later card's frames in memory: 2.5 GB for 60 cards (measured), over a
worker's memory; this way ffmpeg stays near 100 MB whatever the album. The
decisions (``decisions.promo``) list every frame -- its input, when it shows, and its
crop's decision -- and every rendition left out, with why: what the pixels were judged,
public in the manifest. Which asset, rendition and decision each input is lies in the
manifest's provenance (:func:`~mediajobs.domain.manifest.inputs_of`), and in the album's
record, which only the stack reads. A promo whose every crop is refused fails ``rejected``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from PIL import Image

from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.adapters.perceptual import dhash
from mediajobs.domain.errors import REJECTED, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.moderation import ACCEPTED, NO_POLICY, Sample, judged, moderation_of
from mediajobs.domain.promo import (
    PROMO_OUTPUT,
    concat_list,
    crop_box,
    slideshow_argv,
    slideshow_seconds,
    slideshow_timeline,
)
from mediajobs.domain.recipes import PromoParams, fit_within
from mediajobs.service_layer.ports import LabelSource, StepResult
from mediajobs.steps.moderation import flattened, jpeg_of, policy_for

if TYPE_CHECKING:
    from mediajobs.adapters.video import FfmpegRenderer

#: The folder, beside the job's output folder, the pictures and their concat list are
#: written to (removed after the encode; never committed: only the step's listed files are).
FRAMES_SUFFIX: Final = "-frames"


class PromoSlideshow:
    """The ``promo.slideshow`` step (module docstring).

    Parameters
    ----------
    labels: the label source each crop is judged with.
    make_video: builds the ffmpeg renderer (:func:`mediajobs.bootstrap.video_renderer`)
        at the first promo.
    max_pixels: the decode limit of each rendition (``MAX_PIXELS``).
    """

    name: ClassVar[str] = "promo.slideshow"
    params_model: ClassVar[type[PromoParams]] = PromoParams

    def __init__(self, labels: LabelSource, make_video: Callable[[], FfmpegRenderer], max_pixels: int) -> None:
        self._labels = labels
        self._make_video = make_video
        self._video: FfmpegRenderer | None = None
        self._images = PillowRenderer(max_pixels)

    def run(self, source: Path, params: PromoParams, context: RenderContext, out_dir: Path) -> StepResult:
        """Make the promo of the renditions among ``context.inputs`` into ``out_dir``.

        Raises
        ------
        PermanentFailure
            ``rejected`` when the policy refuses every crop; a rendition's decode failure
            (``corrupt_image`` ...); ``invalid_output`` from the encode's verification.
        TransientFailure
            The label source or ffmpeg failed (``DeadlineReached`` at the invocation's end).
        """
        size = (params.width_px, params.height_px)
        policy = None if context.policy_version in (None, NO_POLICY) else policy_for(context)
        frames_dir = out_dir.parent / f"{out_dir.name}{FRAMES_SUFFIX}"
        frames_dir.mkdir(exist_ok=True)
        cards = sorted(name for name in context.inputs if name.startswith("card-"))
        shown: list[dict[str, Any]] = []
        left_out: list[dict[str, Any]] = []
        paths: list[Path] = []
        models: set[str] = set()
        for name in cards:
            context.check()
            decision_name = name.replace("card-", "decision-", 1)
            entry: dict[str, Any] = {"input": name}  # its asset, rendition and decision: the provenance's
            gate = _decision(context.inputs.get(decision_name))
            if gate is not None and gate.get("outcome") != ACCEPTED:  # never rendered then: kept out all the same
                left_out.append({**entry, "why": f"its decision is {gate.get('outcome')}"})
                continue
            path = context.inputs[name]
            frame = self._frame(path, size)
            if policy is not None:
                crop = _fitted(frame, params.box_px)
                found = self._labels.detect(jpeg_of(crop), min_confidence=params.min_confidence)
                if found.model_version:
                    models.add(found.model_version)
                sample = Sample(None, dhash(crop), found.labels)
                verdict = judged(policy, sha256=_sha256(path), samples=[sample])
                entry["crop"] = {
                    "outcome": verdict.outcome,
                    "rule": verdict.rule,
                    "evidence": verdict.evidence,
                    "perceptual": f"{sample.perceptual:016x}",
                    "labels": [{"name": x.name, "parent": x.parent, "confidence": x.confidence} for x in found.labels],
                }
                if verdict.outcome != ACCEPTED:
                    left_out.append({**entry, "why": f"its crop is {verdict.outcome} (rule {verdict.rule})"})
                    continue
            entry["from_s"] = round(len(paths) * (params.seconds_per_card - params.crossfade_s), 3)
            frame_path = frames_dir / f"card-{len(paths):04d}.ppm"
            frame.save(frame_path, "PPM")
            paths.append(frame_path)
            shown.append(entry)
        decisions: dict[str, Any] = {
            "promo": {
                "frames": shown,
                "left_out": left_out,
                "size": list(size),
                "seconds_per_card": params.seconds_per_card,
                "crossfade_s": params.crossfade_s,
                "policy": None if policy is None else policy.ref,
                "label_source": None if policy is None else self._labels.name,
                "model_version": ",".join(sorted(models)) or None,
            }
        }
        if not paths:
            why = "; ".join(f"{x['input']}: {x['why']}" for x in left_out) or "no rendition"
            raise PermanentFailure(REJECTED, f"the policy accepts no frame of the promo: {why}")
        duration = slideshow_seconds(len(paths), params.seconds_per_card, params.crossfade_s)
        if self._video is None:
            self._video = self._make_video()
        try:
            listed = self._timeline(paths, params, frames_dir, context)
            argv_of = functools.partial(
                slideshow_argv,
                concat_file=str(listed),
                output=str(out_dir / f"{PROMO_OUTPUT}.mp4"),
                seconds=duration,
                fps=params.fps,
                crf=params.crf,
                preset=params.preset,
            )
            rendered = self._video.slideshow(
                out_dir / f"{PROMO_OUTPUT}.mp4", size=size, duration_s=duration, argv_of=argv_of, context=context
            )
        finally:
            shutil.rmtree(frames_dir, ignore_errors=True)
        decisions["promo"]["duration_s"] = round(duration, 3)
        context.progress(("promo",), duration, duration)
        return StepResult(files=[rendered], decisions=decisions)

    @staticmethod
    def _timeline(paths: list[Path], params: PromoParams, folder: Path, context: RenderContext) -> Path:
        """Write the crossfades' pictures (each card blended into the next) beside the
        cards' and the concat list naming them all with their durations
        (:func:`~mediajobs.domain.promo.slideshow_timeline`); returns the list's path.

        Raises
        ------
        TransientFailure
            The folder's disk cannot hold the pictures (about 1 MB each at 800 x 450).
        """
        timeline = slideshow_timeline(len(paths), params.seconds_per_card, params.crossfade_s, params.fps)
        needed = sum(1 for f in timeline if f.alpha) * params.width_px * params.height_px * 3
        free = shutil.disk_usage(folder).free
        if needed > free:
            raise TransientFailure(f"the promo's crossfades need {needed:,} bytes, {free:,} are free")
        listed: list[tuple[str, float]] = []
        pair: tuple[int, Image.Image, Image.Image] | None = None
        for n, frame in enumerate(timeline):
            if not frame.alpha:
                listed.append((paths[frame.card].name, frame.duration_s))
                continue
            if pair is None or pair[0] != frame.card:
                context.check()
                pair = (frame.card, Image.open(paths[frame.card]), Image.open(paths[frame.card + 1]))
            name = f"fade-{n:05d}.ppm"
            Image.blend(pair[1], pair[2], frame.alpha).save(folder / name, "PPM")
            listed.append((name, frame.duration_s))
        path = folder / "slideshow.ffconcat"
        path.write_text(concat_list(listed), encoding="utf-8")
        return path

    def _frame(self, path: Path, size: tuple[int, int]) -> Image.Image:
        """The rendition at ``path`` decoded (every image's limits), upright, flattened on
        white, its centred crop scaled to ``size``."""
        image, _, _ = self._images.decode(path, max(size))
        image = flattened(image)
        box = crop_box(image.width, image.height, *size)
        return image.crop(box).resize(size, Image.Resampling.LANCZOS)


def _fitted(image: Image.Image, box_px: int) -> Image.Image:
    """``image`` fitted inside ``box_px`` (never enlarged): what the label source is sent."""
    fitted = fit_within(image.width, image.height, box_px)
    return image if fitted == image.size else image.resize(fitted, Image.Resampling.LANCZOS)


def _decision(path: Path | None) -> dict[str, Any] | None:
    """The moderation decision in a ``decision-<i>`` input's JSON file, or ``None``."""
    if path is None:
        return None
    return moderation_of(json.loads(path.read_text(encoding="utf-8")))


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


__all__ = ["PromoSlideshow"]
