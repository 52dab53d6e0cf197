"""Promos: a short slideshow made from an album, with provenance. Pure.

An **album** is the assets under a key prefix (``originals/<album>/``). Its promo takes,
in key order, the named rendition (``card``) of each asset that is ``ready`` -- accepted by
the moderation policy -- and shows each for a few seconds with a crossfade
(``steps/promo.py``). It is requested (``mediajobs promo PREFIX``, ``POST /promos``), never
planned for an upload.

**Its key** hashes its inputs' identities -- each rendition's job key and the decision
(the moderation job's key) it was rendered under -- with the recipe and the policy version
(:func:`~mediajobs.domain.keys.inputs_job_key`): an unchanged album requested again is the
same job, done once; a photo added, removed or re-rendered under a new policy is a new one.
The asset keys are **not** identity (filenames never are): they travel beside the inputs
(:attr:`~mediajobs.domain.jobs.JobSpec.about`) into the manifest's provenance, as they were
when the promo was first made.

The manifest's ``decisions.promo`` lists every frame -- its asset key, rendition job key,
decision id and the crop's own moderation decision -- and every asset of the album left
out, with why.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mediajobs.domain.assets import AssetJobState, AssetState, AssetView
from mediajobs.domain.jobs import DECISIONS_OUTPUT, JobInput, JobSpec, OutputInput
from mediajobs.domain.keys import inputs_job_key
from mediajobs.domain.manifest import derivative_prefix
from mediajobs.domain.recipes import Recipe

#: The promo recipe's id (every version's).
PROMO_RECIPE: Final = "promo"
#: The promo's one output: ``promo.mp4``.
PROMO_OUTPUT: Final = "promo"
#: Most keys an album's listing reads (ListObjectsV2 pages of 1,000): an album is a folder
#: of an event's photos, not a bucket.
MAX_ALBUM_KEYS: Final = 1000
#: Most left-out assets an album's record keeps (the first in key order): the record is one
#: DynamoDB item (400 KB at most, DynamoDB developer guide "Service quotas"), and a left-out
#: key may be 1,024 bytes long.
MAX_LEFT_OUT: Final = 100
#: Longest album prefix, bytes: the registry's sort key is ``<bucket>/<prefix>`` (DynamoDB
#: sort keys are at most 1,024 bytes; a bucket name at most 63).
MAX_PREFIX_BYTES: Final = 900


def card_input(index: int) -> str:
    """The input name of the ``index``-th frame's rendition: ``card-0000``."""
    return f"card-{index:04d}"


def decision_input(index: int) -> str:
    """The input name of the ``index``-th frame's moderation decision: ``decision-0000``."""
    return f"decision-{index:04d}"


@dataclass(frozen=True)
class AlbumFrame:
    """One frame of a promo: an accepted asset's rendition.

    Attributes
    ----------
    asset_key: the original's key (not identity).
    rendition_job_key: the job whose output the frame shows.
    rendition_recipe: that job's recipe (``web-image@1``).
    decision_id: the moderation job's key the rendition waited for (its decision), or
        ``None`` when the deployment moderates nothing.
    """

    asset_key: str
    rendition_job_key: str
    rendition_recipe: str
    decision_id: str | None

    def to_json(self) -> dict[str, Any]:
        """``{"asset_key", "rendition_job_key", "rendition_recipe", "decision_id"}``."""
        return {
            "asset_key": self.asset_key,
            "rendition_job_key": self.rendition_job_key,
            "rendition_recipe": self.rendition_recipe,
            "decision_id": self.decision_id,
        }


@dataclass(frozen=True)
class LeftOut:
    """An asset of the album the promo does not show, and why (``state``: the asset's; ``why``
    in words)."""

    asset_key: str
    state: str
    why: str

    def to_json(self) -> dict[str, str]:
        """``{"asset_key", "state", "why"}``."""
        return {"asset_key": self.asset_key, "state": self.state, "why": self.why}


def valid_prefix(prefix: str, originals_prefix: str) -> str | None:
    """What is wrong with an album prefix, or ``None``: it must lie under
    ``originals_prefix``, end with ``/``, hold no empty, ``.`` or ``..`` segment nor a
    control character, and be at most :data:`MAX_PREFIX_BYTES` bytes."""
    if not prefix.startswith(originals_prefix) or prefix == originals_prefix:
        return f"an album is a folder under {originals_prefix}: {originals_prefix}<album>/"
    if not prefix.endswith("/"):
        return "an album prefix ends with '/'"
    if len(prefix.encode("utf-8")) > MAX_PREFIX_BYTES:
        return f"an album prefix is at most {MAX_PREFIX_BYTES} bytes"
    if any(ord(c) < 32 or ord(c) == 127 for c in prefix):
        return "an album prefix holds no control character"
    if any(part in ("", ".", "..") for part in prefix[len(originals_prefix) : -1].split("/")):
        return "an album prefix has no empty, '.' or '..' segment"
    return None


def album_frames(
    views: Sequence[AssetView], rendition: str, decision_of: Mapping[str, str | None], max_cards: int
) -> tuple[list[AlbumFrame], list[LeftOut]]:
    """The frames of an album's promo, and the assets left out, both in key order.

    An asset is shown when it is ``ready`` and a done job of its current set has an
    output named ``rendition`` whose decision ``decision_of`` knows (rendition job key ->
    the moderation job's key, ``None`` without a policy); the same rendition twice (the
    same photo uploaded twice) is shown once; at most ``max_cards``.

    Parameters
    ----------
    views: the album's assets.
    rendition: the output name (``card``).
    decision_of: rendition job key -> decision id, for the renditions whose ledger row is
        done (a job missing here is left out: collected or re-rendering meanwhile).
    max_cards: most frames.
    """
    frames: list[AlbumFrame] = []
    left: list[LeftOut] = []
    shown: dict[str, str] = {}
    for view in sorted(views, key=lambda v: v.key):
        if view.state != AssetState.READY:
            why = {
                AssetState.REJECTED: "rejected by the moderation policy",
                AssetState.REVIEW: "held for review",
                AssetState.FAILED: f"failed: {view.reason}",
                AssetState.DELETED: "deleted",
            }.get(view.state, "not ready yet")
            left.append(LeftOut(view.key, str(view.state), why))
            continue
        job = next(
            (j for j in view.jobs if j.state == AssetJobState.DONE and any(o.name == rendition for o in j.outputs)),
            None,
        )
        if job is None:
            left.append(LeftOut(view.key, str(view.state), f"no {rendition!r} rendition ({view.media})"))
        elif job.job_key not in decision_of:
            left.append(LeftOut(view.key, str(view.state), f"its {rendition!r} rendition is not done now"))
        elif job.job_key in shown:
            left.append(LeftOut(view.key, str(view.state), f"the same picture as {shown[job.job_key]}"))
        elif len(frames) >= max_cards:
            left.append(LeftOut(view.key, str(view.state), f"beyond the recipe's {max_cards} cards"))
        else:
            shown[job.job_key] = view.key
            frames.append(AlbumFrame(view.key, job.job_key, job.recipe, decision_of[job.job_key]))
    return frames, left


def promo_spec(
    recipe: Recipe,
    frames: Sequence[AlbumFrame],
    *,
    bucket: str,
    prefix: str,
    policy_version: str,
    derivatives_prefix: str,
    rendition: str,
) -> JobSpec:
    """The promo job of ``frames``: inputs ``card-<i>`` (each rendition's output) and
    ``decision-<i>`` (its moderation decision, when it has one), its key hashing them with
    the recipe and the policy version; ``about`` names each rendition input's asset key
    (once: the row and the staged manifest hold it, within DynamoDB's 400 KB item).

    ``input_sha256`` (no original) is the SHA-256 of the rendition job keys in order: what
    the decision log records as the job's content.

    Raises
    ------
    ValueError
        When ``frames`` is empty.
    """
    if not frames:
        raise ValueError("a promo needs at least one frame")
    inputs: dict[str, JobInput] = {}
    about: dict[str, str] = {}
    for i, frame in enumerate(frames):
        inputs[card_input(i)] = OutputInput(frame.rendition_job_key, rendition)
        about[card_input(i)] = frame.asset_key
        if frame.decision_id is not None:
            inputs[decision_input(i)] = OutputInput(frame.decision_id, DECISIONS_OUTPUT)
    key = inputs_job_key({n: i.identity() for n, i in inputs.items()}, recipe.sha256, policy_version)
    content = hashlib.sha256("\n".join(f.rendition_job_key for f in frames).encode("ascii")).hexdigest()
    return JobSpec(
        job_key=key,
        input_sha256=content,
        recipe_id=recipe.id,
        recipe_version=recipe.version,
        recipe_sha256=recipe.sha256,
        policy_version=policy_version,
        output_prefix=derivative_prefix(derivatives_prefix, key),
        source_bucket=bucket,
        source_key=prefix,
        inputs=inputs,
        about=about,
    )


def slideshow_seconds(frames: int, seconds_per_card: float, crossfade_s: float) -> float:
    """Length, seconds, of a slideshow of ``frames`` each ``seconds_per_card`` long, each
    next one faded in over ``crossfade_s`` (the fades overlap): ``n x d - (n - 1) x c``."""
    return frames * seconds_per_card - max(frames - 1, 0) * crossfade_s


def crop_box(width_px: int, height_px: int, frame_w: int, frame_h: int) -> tuple[int, int, int, int]:
    """The centred box ``(left, top, right, bottom)`` of a ``width_px`` x ``height_px``
    picture with the frame's aspect ratio, as large as fits: what a frame shows of it.

    Raises
    ------
    ValueError
        If any dimension is not positive.
    """
    if min(width_px, height_px, frame_w, frame_h) <= 0:
        raise ValueError(f"dimensions must be positive: {width_px}x{height_px} into {frame_w}x{frame_h}")
    if width_px * frame_h > height_px * frame_w:  # wider than the frame: crop the sides
        w = max(1, round(height_px * frame_w / frame_h))
        left = (width_px - w) // 2
        return left, 0, left + w, height_px
    h = max(1, round(width_px * frame_h / frame_w))
    top = (height_px - h) // 2
    return 0, top, width_px, top + h


#: Demuxers the slideshow's inputs may be read with: the PNG frames the step wrote itself.
SLIDESHOW_FORMATS: Final = "image2,png_pipe"


def slideshow_argv(
    ffmpeg: str,
    frames: Sequence[str],
    output: str,
    *,
    seconds_per_card: float,
    crossfade_s: float,
    fps: int,
    crf: int,
    preset: str,
) -> list[str]:
    """The ffmpeg argv of a slideshow of ``frames`` (PNG files the step wrote, each already
    the output's size) into ``output`` (H.264 High, yuv420p, MP4 with ``+faststart``, no
    audio): each input looped for ``seconds_per_card`` (``-loop 1 -t``), chained by
    ``xfade=transition=fade`` at offsets ``k x (seconds_per_card - crossfade_s)``
    (ffmpeg's filter documentation, "xfade": each offset is relative to the first input's
    start); with ``crossfade_s`` 0 the inputs are concatenated. Every input is read with
    the ``file`` protocol and the PNG demuxers only. A list, never a shell line.

    Raises
    ------
    ValueError
        When ``frames`` is empty.
    """
    if not frames:
        raise ValueError("a slideshow needs at least one frame")
    argv = [ffmpeg, "-hide_banner", "-nostdin", "-y", "-loglevel", "error"]
    for frame in frames:
        argv += ["-format_whitelist", SLIDESHOW_FORMATS, "-protocol_whitelist", "file"]
        argv += ["-loop", "1", "-framerate", str(fps), "-t", f"{seconds_per_card:g}", "-i", frame]
    n = len(frames)
    chains = [f"[{i}:v]settb=AVTB,setsar=1,format=yuv420p[s{i}]" for i in range(n)]
    last = "s0"
    if n > 1 and crossfade_s > 0:
        for k in range(1, n):
            offset = k * (seconds_per_card - crossfade_s)
            chains.append(f"[{last}][s{k}]xfade=transition=fade:duration={crossfade_s:g}:offset={offset:g}[x{k}]")
            last = f"x{k}"
    elif n > 1:
        chains.append("".join(f"[s{i}]" for i in range(n)) + f"concat=n={n}:v=1:a=0[x]")
        last = "x"
    argv += ["-filter_complex", ";".join(chains), "-map", f"[{last}]"]
    argv += ["-c:v", "libx264", "-preset", preset, "-crf", str(crf), "-profile:v", "high", "-pix_fmt", "yuv420p"]
    argv += ["-r", str(fps), "-movflags", "+faststart", "-an", output]
    return argv


#: What a promo's reference row names as its holder's key (``promo:<album prefix>``): the
#: job is referenced like an asset's, so the collection keeps it while its album's record
#: points at it, and deletes it once every album moved on (``reference_id(bucket, key)``).
PROMO_HOLDER: Final = "promo:"


def holder_key(prefix: str) -> str:
    """The key a promo's reference row names: ``promo:<prefix>`` (never an original's key,
    which lies under ``originals/``)."""
    return f"{PROMO_HOLDER}{prefix}"


@dataclass(frozen=True)
class PromoRecord:
    """The registry's record of an album's latest promo request.

    Attributes
    ----------
    bucket, prefix: the album.
    job_key: the promo job its last request made (or found).
    recipe: ``promo@<version>``.
    policy_version: the policy the key carries: a new policy's backfill requests the
        album again (:meth:`mediajobs.service_layer.promo.Promos.regenerate`).
    requested_at_s: Unix time, seconds, of the last request.
    frames, left_out: what the request found in the album (at most :data:`MAX_LEFT_OUT`
        of the assets left out: the first ones).
    left_out_total: how many assets were left out in all.
    revision: counts the writes (each conditional on the one read).
    """

    bucket: str
    prefix: str
    job_key: str
    recipe: str
    policy_version: str
    requested_at_s: int
    frames: tuple[AlbumFrame, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    revision: int = 0
    left_out_total: int = 0

    def to_json(self) -> dict[str, Any]:
        """The record as the CLI and the status route show it."""
        return {
            "bucket": self.bucket,
            "prefix": self.prefix,
            "job_key": self.job_key,
            "recipe": self.recipe,
            "policy_version": self.policy_version,
            "requested_at_s": self.requested_at_s,
            "frames": [f.to_json() for f in self.frames],
            "left_out": [x.to_json() for x in self.left_out],
            "left_out_total": max(self.left_out_total, len(self.left_out)),
        }
