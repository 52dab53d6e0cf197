"""The manifest: the commit marker of a derivative set, written last under its prefix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

from mediajobs.domain.jobs import JobSpec, ObjectRef, OutputInput, OutputRecord
from mediajobs.domain.recipes import CONTENT_TYPES, M4A_CONTENT_TYPE, MP4_CONTENT_TYPE
from mediajobs.domain.text import shortened

MANIFEST_SCHEMA_VERSION: Final = 1
MANIFEST_NAME: Final = "manifest.json"
#: The manifest's MIME type.
MANIFEST_CONTENT_TYPE: Final = "application/json"
#: Every MIME type a derivative set holds: the images' formats (:data:`CONTENT_TYPES`: WebP,
#: AVIF, JPEG -- posters too -- and PNG), MP4 renditions and promos, M4A audio parts, and
#: the manifest. What renders under ``derivatives/`` is one of these; an object there of
#: another type was not written by a recipe.
DERIVATIVE_CONTENT_TYPES: Final = frozenset(
    {*CONTENT_TYPES.values(), MP4_CONTENT_TYPE, M4A_CONTENT_TYPE, MANIFEST_CONTENT_TYPE}
)
#: Longest text a decision keeps, in characters. Decisions quote the input (an ICC
#: profile's description, container tags), and the manifest is staged in a DynamoDB item
#: (400 KB at most, DynamoDB developer guide "Service quotas"): an input must not be able
#: to make it unstageable.
MAX_DECISION_TEXT: Final = 200


def bounded_text(value: Any) -> Any:
    """``value`` (JSON data) with every string cut to :data:`MAX_DECISION_TEXT` characters
    (the cut ones end with ``…``). Pure."""
    if isinstance(value, str):
        return shortened(value, MAX_DECISION_TEXT)
    if isinstance(value, dict):
        return {k: bounded_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bounded_text(v) for v in value]
    return value


class Decisions(Protocol):
    """What a renderer decided (:class:`RenderDecisions` for images,
    :class:`mediajobs.domain.video.VideoDecisions` for videos)."""

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RenderDecisions:
    """What the renderer decided for one original; recorded in the manifest.

    Attributes
    ----------
    source_format: detected from the bytes (``JPEG``, ``PNG``, ``HEIF`` ...).
    source_width, source_height: stored pixel size before orientation.
    orientation: the orientation applied to the pixels, as an EXIF orientation value
        (1 = none, 2-8 transposed as EXIF 2.32 tag 0x0112 says). For HEIF and AVIF it is
        the file's irot (anti-clockwise quarter turns) and imir (axis 0 exchanges top and
        bottom, 1 left and right) applied in order: irot 1, 2, 3 give 8, 3, 6; imir 0 and 1
        give 4 and 2; irot 1 then imir 0 gives 5 (transpose), irot 1 then imir 1 gives 7.
        Their EXIF orientation is ignored (MIAF 7.3.6.7), and so is an XMP
        ``tiff:Orientation`` in any format (browsers ignore it).
    crop: the clean aperture (HEIF/AVIF ``clap``) kept, as [left, top, width, height] in
        pixels of the stored image (before rotation), or ``None``.
    colour: the colour conversion applied (``icc->srgb``, ``cmyk->srgb``, ``none``).
    icc_profile: description of the embedded ICC profile, if any.
    mode: pixel-mode conversion (``I;16->L (scaled 1/257)``, ``P->RGBA`` ...).
    alpha: whether the outputs carry an alpha channel.
    animated: whether the original had more than one frame.
    frames: number of frames (or pages) in the original; ``None`` when not counted
        because a frame was over the pixel budget.
    duration_ms: total animation duration in milliseconds (0 for stills, ``None`` when not
        measured because frames x pixels exceeded the decode budget).
    frames_dropped: frames not rendered (variants are of the first frame); ``None`` when unknown.
    quality_search: for each variant with a perceptual target (``web-image@2``), what the
        quality search decided (:meth:`mediajobs.domain.quality_search.SearchResult.to_json`:
        the chosen quality, the score reached, every encode tried); ``None`` (and left out
        of the JSON) when every variant has a fixed quality, so ``web-image@1``'s decisions
        are as they were.
    """

    source_format: str
    source_width: int
    source_height: int
    orientation: int = 1
    crop: list[int] | None = None
    colour: str = "none"
    icc_profile: str | None = None
    mode: str = ""
    alpha: bool = False
    animated: bool = False
    frames: int | None = 1
    duration_ms: int | None = 0
    frames_dropped: int | None = 0
    quality_search: dict[str, dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain dict for JSON (``quality_search`` only when there is one)."""
        data = asdict(self)
        if data["quality_search"] is None:
            del data["quality_search"]
        return data


def derivative_prefix(derivatives_prefix: str, job_key: str) -> str:
    """``derivatives/<job key>/`` for a job (``derivatives_prefix`` ends with ``/``)."""
    return f"{derivatives_prefix}{job_key}/"


def build_manifest(
    *,
    job_key: str,
    source: ObjectRef,
    input_sha256: str,
    input_bytes: int,
    recipe_id: str,
    recipe_version: int,
    recipe_sha256: str,
    policy_version: str,
    outputs: list[OutputRecord],
    decisions: Mapping[str, Any],
    created_at: str,
    inputs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Build the manifest document for a committed job.

    Parameters
    ----------
    created_at:
        ISO 8601 UTC timestamp of the commit.
    inputs:
        The job's inputs with what they came from (:func:`inputs_of`), listed as
        ``inputs`` when given (an album's promo: its provenance, never cut); ``None``
        leaves the manifest as every other job's.

    Returns
    -------
    dict
        JSON-ready manifest (schema version :data:`MANIFEST_SCHEMA_VERSION`).
    """
    return {
        "schema": MANIFEST_SCHEMA_VERSION,
        "job_key": job_key,
        "source": {
            "bucket": source.bucket,
            "key": source.key,
            "version_id": source.version_id,
            "sha256": input_sha256,
            "bytes": input_bytes,
        },
        "recipe": {"id": recipe_id, "version": recipe_version, "sha256": recipe_sha256},
        "policy": {"version": policy_version},
        "outputs": [o.to_json() for o in outputs],
        "decisions": bounded_text(dict(decisions)),
        "created_at": created_at,
        **({"inputs": inputs} if inputs is not None else {}),
    }


def inputs_of(spec: JobSpec) -> list[dict[str, Any]]:
    """A job's inputs as its manifest lists them, by name: ``{"name", "job_key",
    "output", "asset_key"}`` for another job's output (``asset_key``: what
    :attr:`~mediajobs.domain.jobs.JobSpec.about` says it came from, else ``None``), ``{"name",
    "sha256"}`` for an original's content. Pure."""
    listed: list[dict[str, Any]] = []
    for name in sorted(spec.inputs):
        wanted = spec.inputs[name]
        if isinstance(wanted, OutputInput):
            listed.append(
                {"name": name, "job_key": wanted.job_key, "output": wanted.output, "asset_key": spec.about.get(name)}
            )
        else:
            listed.append({"name": name, "sha256": wanted.sha256})
    return listed
