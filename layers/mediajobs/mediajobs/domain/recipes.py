"""Recipes are data: versioned JSON files under ``mediajobs/recipes/``, and which of them are
active for each media type is data too (``recipes/active.json``).

A recipe names a step and its parameters. Loading validates the file strictly, the
parameters by the registered step's own model: an unknown field anywhere is an error, so a
typo can never silently change what is rendered. The parameters models of the steps live
here (pure data); the steps themselves are adapters (``mediajobs.steps``), registered in
the composition root.
Changing anything that affects the output requires a new ``version`` (and so new job keys).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mediajobs.domain.keys import recipe_hash
from mediajobs.domain.moderation import is_moderation

ImageFormat = Literal["webp", "avif", "jpeg", "png"]

#: Output formats that carry an alpha channel.
FORMATS_WITH_ALPHA: frozenset[str] = frozenset({"webp", "avif", "png"})

#: MIME type of each output format.
CONTENT_TYPES: dict[str, str] = {
    "webp": "image/webp",
    "avif": "image/avif",
    "jpeg": "image/jpeg",
    "png": "image/png",
}

#: File extension of each output format.
EXTENSIONS: dict[str, str] = {"webp": "webp", "avif": "avif", "jpeg": "jpg", "png": "png"}

#: MIME type of a video rendition, of a video's part and of a promo: MP4 (RFC 4337).
MP4_CONTENT_TYPE: Final = "video/mp4"
#: MIME type of a video's audio part: MP4 holding audio only, ``.m4a`` (RFC 4337).
M4A_CONTENT_TYPE: Final = "audio/mp4"


#: Highest ``max_fps`` a recipe may set, frames per second: the fastest rate phones record
#: (240 fps slow motion); above that a cap bounds nothing a player would show.
MAX_FPS = 240


class RecipeError(ValueError):
    """A recipe file is missing, malformed or holds unknown fields."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QualityTarget(_Strict):
    """A perceptual target instead of a fixed quality: the variant is encoded at the lowest
    quality found whose SSIMULACRA2 score against the resized picture (before encoding)
    reaches ``score`` (:mod:`mediajobs.domain.quality_search`).

    Attributes
    ----------
    metric:
        ``ssimulacra2`` (the only one): 90 visually lossless, 70 high, 50 medium, 30 low.
    score:
        The score to reach, 30-95 (below 30 is no longer a picture worth serving; above 95
        the lossy encoders stop reaching it before quality 100).
    tolerance:
        Score points above ``score`` that are close enough to stop searching, 0.5-10.
    start_quality:
        The quality tried first, 1-100, before what earlier variants needed moves it.
    """

    metric: Literal["ssimulacra2"]
    score: float = Field(ge=30, le=95, allow_inf_nan=False)
    tolerance: float = Field(ge=0.5, le=10, allow_inf_nan=False)
    start_quality: int = Field(ge=1, le=100, strict=True)


class ImageVariant(_Strict):
    """One image output: fit inside a ``box_px`` x ``box_px`` square, never enlarged.

    Attributes
    ----------
    name:
        Output name, also its file stem (``thumb`` -> ``thumb.webp``).
    box_px:
        Side of the bounding box in pixels; the longest edge is at most this.
    format:
        Encoder: ``webp``, ``avif``, ``jpeg`` or ``png``.
    quality:
        Encoder quality, 1-100: a fixed quality. A variant has either ``quality`` or
        ``target``, never both (``png`` is lossless and takes ``quality`` only).
    target:
        A perceptual target (:class:`QualityTarget`) the quality is searched for.
    speed:
        AVIF encoder speed, 0 (slowest, smallest) to 10; ignored by other formats.
    method:
        WebP encoder method (libwebp's effort), 0 (fastest) to 6 (smallest); ``webp`` only,
        4 when not given (sharp's and libwebp's ``cwebp`` default too).
    chroma:
        AVIF chroma subsampling, ``"4:2:0"`` (libavif's default, when not given) or
        ``"4:4:4"`` (full-resolution colour: about 3.5 % fewer bytes at equal SSIMULACRA2 on
        this project's photos for about 15 % more encoder CPU, benchmarks/README.md); ``avif``
        only.
    """

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")
    box_px: int = Field(gt=0, le=16384)
    format: ImageFormat
    quality: int | None = Field(default=None, ge=1, le=100)
    target: QualityTarget | None = None
    speed: int | None = Field(default=None, ge=0, le=10)
    method: int | None = Field(default=None, ge=0, le=6, strict=True)
    chroma: Literal["4:2:0", "4:4:4"] | None = None

    @model_validator(mode="after")
    def _quality_or_target(self) -> ImageVariant:
        if (self.quality is None) == (self.target is None):
            raise ValueError(f"variant {self.name!r}: give either quality or target, not both or neither")
        if self.target is not None and self.format == "png":
            raise ValueError(f"variant {self.name!r}: png is lossless, it takes no target")
        if self.method is not None and self.format != "webp":
            raise ValueError(f"variant {self.name!r}: method is a WebP setting, not {self.format}'s")
        if self.chroma is not None and self.format != "avif":
            raise ValueError(f"variant {self.name!r}: chroma is an AVIF setting, not {self.format}'s")
        return self


class ImageVariantsParams(_Strict):
    """Parameters of the ``image.variants`` step: one or more variants with distinct names."""

    variants: tuple[ImageVariant, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_unique(self) -> ImageVariantsParams:
        _unique([v.name for v in self.variants])
        return self


class VideoRung(_Strict):
    """One H.264 rendition of a rung of the ladder: ``height_px`` high, even width (``scale=-2:H``).

    Attributes
    ----------
    name:
        Rendition name, also its file stem (``720p`` -> ``720p.mp4``).
    height_px:
        Height of the display-oriented picture, pixels (even). A source shorter than this
        skips the rung: nothing is upscaled.
    crf:
        libx264 constant rate factor, 0-51 (lower is better and larger).
    maxrate_kbps, bufsize_kbps:
        VBV cap and buffer, kbit/s and kbit, so the stream fits the connection it is for.
    audio_kbps:
        AAC bit rate, kbit/s (ignored when the source has no audio).
    """

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")
    height_px: int = Field(gt=0, le=4320, multiple_of=2)
    crf: int = Field(ge=0, le=51)
    maxrate_kbps: int = Field(gt=0)
    bufsize_kbps: int = Field(gt=0)
    audio_kbps: int = Field(gt=0, le=512)


class VideoEncoding(_Strict):
    """Encoder settings shared by every rung (libx264 + AAC in MP4).

    ``level`` 4.0 admits 1080p30 (ITU-T H.264 Annex A, table A-1), so every rung of up to
    720p at up to 60 fps plays on any H.264 High decoder of a browser or phone.

    Attributes
    ----------
    max_fps:
        Most frames per second a rendition may have, or ``None`` (unset) for the source's
        rate whatever it is. A source whose average rate is above it is rendered at exactly
        ``max_fps`` (ffmpeg's ``fps`` filter); one at or below it keeps every frame. 1 to
        :data:`MAX_FPS`, a JSON integer (not ``true``, ``"60"`` or ``59.94``). Setting it changes the
        outputs of fast sources: a new version.
    """

    codec: Literal["libx264"] = "libx264"
    preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow"]
    profile: Literal["high", "main", "baseline"]
    level: Literal["3.1", "4.0", "4.1", "4.2"]
    pix_fmt: Literal["yuv420p"]
    audio_codec: Literal["aac"] = "aac"
    faststart: bool
    max_fps: int | None = Field(default=None, ge=1, le=MAX_FPS, strict=True)


class PosterFrame(_Strict):
    """The poster frame: one JPEG of the display-oriented picture.

    Attributes
    ----------
    name: file stem (``poster`` -> ``poster.jpg``).
    at_fraction: where to take it, as a fraction of the container duration (0.1 = 10 %).
    box_px: longest side at most this many pixels; never enlarged.
    quality: ffmpeg's MJPEG ``-q:v``, 2 (best) to 31.
    """

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")
    at_fraction: float = Field(ge=0, lt=1)
    box_px: int = Field(gt=0, le=8192)
    quality: int = Field(ge=2, le=31)


class VideoRenditionsParams(_Strict):
    """Parameters of the ``video.renditions`` step: the ladder, its encoding and the poster."""

    rungs: tuple[VideoRung, ...] = Field(min_length=1)
    encoding: VideoEncoding
    poster: PosterFrame
    source_rendition: str = Field(default="source", pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")

    @model_validator(mode="after")
    def _names_unique(self) -> VideoRenditionsParams:
        _unique([r.name for r in self.rungs] + [self.source_rendition, self.poster.name])
        return self


class ImagePlaceholderParams(_Strict):
    """Parameters of the ``image.placeholder`` step: ``box_px``, the side of the box the
    upright picture is fitted in before it is hashed, 1 to 100 pixels (ThumbHash encodes at
    most 100x100)."""

    box_px: int = Field(gt=0, le=100)


class VideoPlaceholderParams(_Strict):
    """Parameters of the ``video.placeholder`` step: ``box_px`` as
    :class:`ImagePlaceholderParams`'s, and ``at_fraction``, where the frame is taken as a
    fraction of the container duration (``web-video``'s poster: 0.1)."""

    box_px: int = Field(gt=0, le=100)
    at_fraction: float = Field(ge=0, lt=1)


class ModerationParams(_Strict):
    """Parameters of the moderation steps (``moderation.image``, ``moderation.video``): what
    is sent to the label source. The policy the content is judged by is the one the job's
    key carries (``POLICY_VERSION``), not a parameter.

    Attributes
    ----------
    box_px:
        Longest side, pixels, of each JPEG sent to ``DetectModerationLabels`` (the picture,
        or each sampled frame, fitted inside it, never enlarged): 80 to 4,096. Rekognition
        takes JPEG or PNG bytes up to 5,242,880 (its API reference, ``Image.Bytes``); a
        1,024 px JPEG stays far below.
    min_confidence:
        ``MinConfidence`` of the request, 0-100: Rekognition returns no label below it (50
        when not given, its API reference). A policy rule below it could never fire: the
        composition root refuses such a pair.
    max_frames:
        At most this many frames of a video are sampled (the poster and one every
        ``video_frame_every_s`` of the policy, spaced wider when the video is longer), 1-600:
        each is one request (video only; ignored for images).
    """

    box_px: int = Field(ge=80, le=4096, strict=True)
    min_confidence: float = Field(ge=0, le=100)
    max_frames: int = Field(default=120, ge=1, le=600, strict=True)


class PromoParams(_Strict):
    """Parameters of the ``promo.slideshow`` step: a short H.264 slideshow of an album's
    renditions (:mod:`mediajobs.domain.promo`), each shown ``seconds_per_card``, the next
    faded in over ``crossfade_s`` (ffmpeg's ``xfade`` filter).

    Attributes
    ----------
    rendition:
        The output name taken from each asset (``card``: ``web-image``'s 800 px variant).
    width_px, height_px:
        The frame, pixels, even (H.264 4:2:0 halves both), 64 to 1,920. Each rendition is
        cropped to the frame's aspect ratio around its centre, then scaled to it: **the
        crop is what is shown, and what is moderated** (a crop can show what the whole did
        not).
    seconds_per_card:
        Seconds each rendition is on screen, crossfades included, 0.5 to 30.
    crossfade_s:
        Seconds of each crossfade, 0 (a cut) to less than half ``seconds_per_card``.
    fps:
        Frames per second of the output, 1 to 60.
    crf, preset:
        libx264's constant rate factor (0-51) and preset.
    max_cards:
        Most renditions one promo shows, 1 to 200 (the album's first ones in key order).
    box_px, min_confidence:
        What each crop's moderation sends to the label source, as
        :class:`ModerationParams`'.
    """

    rendition: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")
    width_px: int = Field(ge=64, le=1920, multiple_of=2, strict=True)
    height_px: int = Field(ge=64, le=1920, multiple_of=2, strict=True)
    seconds_per_card: float = Field(ge=0.5, le=30, allow_inf_nan=False)
    crossfade_s: float = Field(ge=0, allow_inf_nan=False)
    fps: int = Field(ge=1, le=60, strict=True)
    crf: int = Field(ge=0, le=51, strict=True)
    preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow"]
    max_cards: int = Field(ge=1, le=200, strict=True)
    box_px: int = Field(ge=80, le=4096, strict=True)
    min_confidence: float = Field(ge=0, le=100)

    @model_validator(mode="after")
    def _fade_inside(self) -> PromoParams:
        if self.crossfade_s * 2 >= self.seconds_per_card:
            raise ValueError("crossfade_s must be less than half of seconds_per_card")
        return self


def _unique(recipe_names: list[str]) -> None:
    if len(recipe_names) != len(set(recipe_names)):
        raise ValueError(f"duplicate output names {recipe_names}")


#: The media type of a recipe made from an album (several assets' renditions under a key
#: prefix, ``promo``) rather than from an original: requested by name, never planned for an
#: upload (:func:`mediajobs.domain.plan.plan_jobs` plans :data:`UPLOAD_MEDIA` only).
ALBUM: Final = "album"
#: The media types an original can be: what an upload's plan applies.
UPLOAD_MEDIA: Final = frozenset({"image", "video"})
#: The media types a recipe may apply to (``RecipeDocument.media``, ``active.json``'s keys).
MEDIA_TYPES: Final = UPLOAD_MEDIA | {ALBUM}


class RecipeInput(_Strict):
    """One named input of a recipe that takes another recipe's output instead of the
    original: the job of ``recipe`` (``<id>@<version>``, active for the same media type)
    on the same original, and its output named ``output``."""

    recipe: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}@[1-9][0-9]*$")
    output: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")


class RecipeDocument(_Strict):
    """A recipe file as written: its ``params`` still untyped (validated by its step's model).

    Attributes
    ----------
    id:
        Recipe name, e.g. ``web-image``.
    version:
        Positive integer; bump it whenever the output would change.
    media:
        Which originals it applies to: ``image`` or ``video``; ``album`` for a recipe made
        from several assets' renditions on request (``promo``).
    step:
        The name of the step that runs it (``image.variants``, ``video.renditions`` ...): a
        step registered in the composition root.
    params:
        The step's parameters, validated by the step's ``params_model``.
    comment:
        Free text for humans (why a parameter has its value); not part of the hash.
    inputs:
        Named inputs that are other recipes' outputs (:class:`RecipeInput`); empty (the
        default) for a recipe that takes the original. Not part of the recipe's hash: a
        job's key hashes its inputs' identities, which name their jobs.
    """

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    version: int = Field(gt=0)
    media: Literal["image", "video", "album"]
    step: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)*$")
    params: dict[str, Any]
    comment: str = ""
    inputs: dict[str, RecipeInput] = Field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """A versioned recipe, loaded and validated (:func:`parse_recipe`).

    Attributes
    ----------
    id, version, media, step, comment: as in :class:`RecipeDocument`.
    params: the step's parameters, an instance of its ``params_model``.
    inputs: input name -> the other recipe's output it takes (empty: the original).
    """

    id: str
    version: int
    media: str
    step: str
    params: Any
    comment: str = ""
    inputs: Mapping[str, RecipeInput] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        """``"<id>@<version>"``, as shown to users (``web-image@1``)."""
        return f"{self.id}@{self.version}"

    @property
    def sha256(self) -> str:
        """Hash of id, version, step and params (see :func:`mediajobs.domain.keys.recipe_hash`)."""
        return recipe_hash(self.id, self.version, self.step, self.params.model_dump(mode="json", exclude_unset=True))


#: Parameters models by step name: what :func:`parse_recipe` validates ``params`` with
#: (the composition root builds it from the registered steps).
ParamsModels = Mapping[str, type[BaseModel]]


def parse_recipe(document: dict[str, Any], params_models: ParamsModels) -> Recipe:
    """Validate a recipe document against the registered steps' parameters models.

    Raises
    ------
    RecipeError
        On unknown fields, wrong types, out-of-range values, a step no model is registered
        for, or duplicate output names.
    """
    try:
        doc = RecipeDocument.model_validate(document)
    except ValidationError as exc:
        raise RecipeError(f"invalid recipe: {exc}") from exc
    ref = f"{doc.id}@{doc.version}"
    model = params_models.get(doc.step)
    if model is None:
        raise RecipeError(f"recipe {ref}: no step {doc.step!r} is registered (known: {sorted(params_models)})")
    try:
        params = model.model_validate(doc.params)
    except ValidationError as exc:
        raise RecipeError(f"recipe {ref}: invalid params for {doc.step}: {exc}") from exc
    bad = [name for name in doc.inputs if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", name)]
    if bad:
        raise RecipeError(f"recipe {ref}: input names must be [a-z0-9][a-z0-9_-]{{0,31}}: {bad}")
    return Recipe(doc.id, doc.version, doc.media, doc.step, params, doc.comment, dict(doc.inputs))


def _read_json(name: str, what: str) -> Any:
    resource = resources.files("mediajobs.recipes").joinpath(name)
    try:
        text = resource.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise RecipeError(f"no {what}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecipeError(f"{what} is not JSON: {exc}") from exc


def load_recipe(recipe_id: str, version: int, params_models: ParamsModels) -> Recipe:
    """Load ``mediajobs/recipes/<recipe_id>.v<version>.json``.

    Raises
    ------
    RecipeError
        If the file does not exist or does not validate.
    """
    document = _read_json(f"{recipe_id}.v{version}.json", f"recipe {recipe_id}@{version}")
    recipe = parse_recipe(document, params_models)
    if (recipe.id, recipe.version) != (recipe_id, version):
        raise RecipeError(f"file {recipe_id}.v{version}.json declares {recipe.ref}")
    return recipe


#: The data file naming the active recipes per media type, beside the recipes.
ACTIVE_FILE: Final = "active.json"


def parse_ref(ref: str) -> tuple[str, int]:
    """``"web-image@1"`` -> ``("web-image", 1)``.

    Raises
    ------
    RecipeError
        If ``ref`` is not ``<id>@<positive integer>``.
    """
    recipe_id, _, version = ref.partition("@")
    if not recipe_id or not version.isdigit() or int(version) < 1:
        raise RecipeError(f"not a recipe reference <id>@<version>: {ref!r}")
    return recipe_id, int(version)


def load_active(params_models: ParamsModels) -> dict[str, list[Recipe]]:
    """The active recipes by media type, as ``recipes/active.json`` lists them, loaded and
    validated (:func:`parse_active`).

    Raises
    ------
    RecipeError
        As :func:`parse_active`, or if the file is missing or not JSON.
    """
    return parse_active(_read_json(ACTIVE_FILE, f"active recipe list {ACTIVE_FILE}"), params_models)


def parse_active(document: Any, params_models: ParamsModels) -> dict[str, list[Recipe]]:
    """The recipes an active list names (``{"image": ["web-image@1"], "video": ["web-video@2"]}``),
    loaded from their files and validated.

    Raises
    ------
    RecipeError
        If ``document`` is not such a mapping, names a recipe that does not load, lists a
        recipe twice, or lists a recipe under a media type other than its own.
    """
    if not isinstance(document, dict) or not all(
        isinstance(refs, list) and all(isinstance(r, str) for r in refs) for refs in document.values()
    ):
        raise RecipeError(f"{ACTIVE_FILE} must map each media type to a list of '<id>@<version>'")
    active: dict[str, list[Recipe]] = {}
    for media, refs in document.items():
        if media not in MEDIA_TYPES:
            raise RecipeError(f"{ACTIVE_FILE}: no media type {media!r} (known: {sorted(MEDIA_TYPES)})")
        if not refs:
            raise RecipeError(f"{ACTIVE_FILE}: {media} lists no recipe (leave the media type out instead)")
        parsed = [parse_ref(ref) for ref in refs]
        if len(parsed) != len(set(parsed)):
            raise RecipeError(f"{ACTIVE_FILE}: {media} lists a recipe twice: {refs}")
        active[media] = [load_recipe(*ref, params_models) for ref in parsed]
        wrong = [r.ref for r in active[media] if r.media != media]
        if wrong:
            raise RecipeError(f"{ACTIVE_FILE}: {wrong} listed under {media} but made for another media type")
        gates = [r.ref for r in active[media] if is_moderation(r.step)]
        if len(gates) > 1:
            raise RecipeError(f"{ACTIVE_FILE}: {media} lists more than one moderation recipe: {gates}")
        in_order(active[media])
    return active


def in_order(recipes: list[Recipe]) -> list[Recipe]:
    """``recipes`` ordered so that each comes after the recipes whose outputs it takes
    (otherwise as given). Pure.

    Raises
    ------
    RecipeError
        If a recipe takes an output of a recipe not among ``recipes``, or inputs form a cycle.
    """
    by_ref = {r.ref: r for r in recipes}
    ordered: list[Recipe] = []
    placed: set[str] = set()
    visiting: list[str] = []

    def place(recipe: Recipe) -> None:
        if recipe.ref in placed:
            return
        if recipe.ref in visiting:
            raise RecipeError(f"recipe inputs form a cycle: {' -> '.join([*visiting, recipe.ref])}")
        visiting.append(recipe.ref)
        for name, wanted in recipe.inputs.items():
            if wanted.recipe not in by_ref:
                raise RecipeError(
                    f"recipe {recipe.ref}: input {name!r} takes {wanted.recipe}, which is not active with it"
                )
            place(by_ref[wanted.recipe])
        visiting.pop()
        placed.add(recipe.ref)
        ordered.append(recipe)

    for recipe in recipes:
        place(recipe)
    return ordered


def fit_within(width_px: int, height_px: int, box_px: int) -> tuple[int, int]:
    """Size of an image of ``width_px`` x ``height_px`` fitted inside a ``box_px`` square.

    The aspect ratio is kept, the image is never enlarged, and neither side drops below
    1 pixel (an 8000x2 banner fitted in 320 gives 320x1, not 320x0).

    Raises
    ------
    ValueError
        If any dimension is not positive.
    """
    if width_px <= 0 or height_px <= 0 or box_px <= 0:
        raise ValueError(f"dimensions must be positive: {width_px}x{height_px} in {box_px}")
    scale = min(1.0, box_px / width_px, box_px / height_px)
    if scale >= 1.0:
        return width_px, height_px
    return max(1, round(width_px * scale)), max(1, round(height_px * scale))
