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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mediajobs.domain.assets import AssetJobState, AssetState, AssetView
from mediajobs.domain.jobs import DECISIONS_OUTPUT, JobInput, JobSpec, OutputInput
from mediajobs.domain.keys import UNKEYED, KeyScheme, inputs_job_key
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
    keys: KeyScheme,
) -> JobSpec:
    """The promo job of ``frames``: inputs ``card-<i>`` (each rendition's output) and
    ``decision-<i>`` (its moderation decision, when it has one), its key hashing them with
    the recipe and the policy version under ``keys``; ``about`` names each rendition input's asset key
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
    key = inputs_job_key({n: i.identity() for n, i in inputs.items()}, recipe.sha256, policy_version, keys=keys)
    content = album_content([f.rendition_job_key for f in frames])
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
        key_algorithm=keys.algorithm,
    )


def album_content(rendition_job_keys: Sequence[str]) -> str:
    """What a promo's job records as its content (``JobSpec.input_sha256``; the decision
    log's ``content``): the SHA-256 hex of its renditions' job keys in order, one per line."""
    return hashlib.sha256("\n".join(rendition_job_keys).encode("ascii")).hexdigest()


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


#: Demuxers the slideshow's ffmpeg may use: the concat list the worker wrote and the PPM
#: frames it names (written by the worker too: never an upload's bytes).
SLIDESHOW_FORMATS: Final = "concat,image2,ppm_pipe"
#: A frame's file name in the slideshow's list: what the concat demuxer's ``-safe 1``
#: accepts (ffmpeg's ``libavformat/concatdec.c``, ``safe_filename``), and nothing a list line
#: could be broken by.
_FRAME_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\.ppm")


@dataclass(frozen=True)
class SlideFrame:
    """One picture of a slideshow's timeline: the frame of card ``card`` -- blended with the
    next card's at ``alpha`` (0-1, the next card's weight) during a crossfade -- shown for
    ``duration_s`` seconds."""

    card: int
    duration_s: float
    alpha: float = 0.0


def slideshow_timeline(cards: int, seconds_per_card: float, crossfade_s: float, fps: int) -> list[SlideFrame]:
    """The pictures of a slideshow of ``cards`` cards, in order: each card held while it
    alone is on screen, then -- between two cards -- ``round(crossfade_s x fps)`` (at least
    one) pictures blending it into the next, linearly (ffmpeg's ``xfade=transition=fade``
    blend, done per picture: one input of ffmpeg instead of one per card, whose ``xfade``
    chain buffers every later card's frames -- 2.5 GB for 60 cards, measured). The
    durations add up to :func:`slideshow_seconds`. Pure.

    Raises
    ------
    ValueError
        With no card, or a crossfade not shorter than half a card.
    """
    if cards < 1:
        raise ValueError("a slideshow needs at least one frame")
    if crossfade_s * 2 >= seconds_per_card:
        raise ValueError("the crossfade must be shorter than half a card")
    steps = max(1, round(crossfade_s * fps)) if crossfade_s > 0 else 0
    timeline: list[SlideFrame] = []
    for card in range(cards):
        fades = (crossfade_s if card > 0 else 0.0) + (crossfade_s if card < cards - 1 else 0.0)
        timeline.append(SlideFrame(card, seconds_per_card - fades))
        if card < cards - 1:
            timeline.extend(SlideFrame(card, crossfade_s / steps, (j + 1) / (steps + 1)) for j in range(steps))
    return timeline


def concat_list(frames: Sequence[tuple[str, float]]) -> str:
    """The ffconcat list of ``frames`` (file name, seconds), the last file named again after
    its duration: the concat demuxer stops at the last file's start otherwise (measured:
    a three-card list lasts 4.56 s instead of 6.5).

    Raises
    ------
    ValueError
        When a name is not a plain frame file name (a list line must name one file).
    """
    lines = ["ffconcat version 1.0"]
    for name, seconds in frames:
        if not _FRAME_NAME.fullmatch(name):
            raise ValueError(f"not a frame file name: {name!r}")
        lines += [f"file {name}", f"duration {seconds:.6f}"]
    if frames:
        lines.append(f"file {frames[-1][0]}")
    return "\n".join(lines) + "\n"


def slideshow_argv(
    ffmpeg: str, concat_file: str, output: str, *, seconds: float, fps: int, crf: int, preset: str
) -> list[str]:
    """The ffmpeg argv encoding the slideshow ``concat_file`` lists (:func:`concat_list`, its
    frames already the output's size) into ``output``: H.264 High, yuv420p, ``fps`` frames
    per second (the ``fps`` filter), ``seconds`` long (``-t``: the repeated last file adds a
    frame), MP4 with ``+faststart``, no audio. The list is read with the ``file`` protocol,
    the concat demuxer's ``-safe 1`` and the PPM demuxers only. A list, never a shell line.
    """
    return [
        ffmpeg, "-hide_banner", "-nostdin", "-y", "-loglevel", "error",
        "-format_whitelist", SLIDESHOW_FORMATS, "-protocol_whitelist", "file",
        "-f", "concat", "-safe", "1", "-i", concat_file,
        "-vf", f"fps={fps},setsar=1,format=yuv420p", "-t", f"{seconds:.3f}",
        "-c:v", "libx264", "-preset", preset, "-crf", str(crf), "-profile:v", "high", "-pix_fmt", "yuv420p",
        "-movflags", "+faststart", "-an", output,
    ]  # fmt: skip


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
    job_key: the promo job its last request made (or found); ``None`` when the album had
        nothing to show then (its earlier promo retired: released to the collection).
    recipe: ``promo@<version>``.
    policy_version: the policy the key carries: a new policy's backfill requests the
        album again (:meth:`mediajobs.service_layer.promo.Promos.regenerate`).
    requested_at_s: Unix time, seconds, of the last request.
    frames, left_out: what the request found in the album (at most :data:`MAX_LEFT_OUT`
        of the assets left out: the first ones).
    left_out_total: how many assets were left out in all.
    truncated: whether the album holds more than :data:`MAX_ALBUM_KEYS` keys (only the
        first were looked at).
    revision: counts the writes (each conditional on the one read).
    keys: the :attr:`~mediajobs.domain.keys.KeyScheme.id` the promo's key was derived under
        (``"1"`` for a record written before it was kept): a new key algorithm's backfill
        requests the album again, so that no promo stays at an unkeyed path.
    """

    bucket: str
    prefix: str
    job_key: str | None
    recipe: str
    policy_version: str
    requested_at_s: int
    frames: tuple[AlbumFrame, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    revision: int = 0
    left_out_total: int = 0
    truncated: bool = False
    keys: str = UNKEYED.id

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
            "truncated": self.truncated,
        }
