"""The manifest: the commit marker of a derivative set, written last under its prefix.

A manifest has two parts (``docs/security.md``, "Where each field is"):

* its **public face**, ``manifest.json`` under ``derivatives/<job key>/`` (:func:`public_manifest`),
  which the CDN serves to anyone holding the set's path: what the set is -- its outputs,
  the recipe, the policy, the decisions about the pixels -- and nothing of who uploaded
  what. A set is shared by every upload of its content (the same bytes uploaded by two
  people are one set), so a field naming the first upload would tell the second uploader,
  and anyone they share a link with, the first one's key, user id and file name.
* its **provenance** (:data:`PROVENANCE`): the original it was made from (bucket, key,
  version, SHA-256, size) and, for a job with named inputs, each input with the asset it
  came from (an album's promo). It is staged with the manifest in the job's ledger row and
  kept there when the job is done (:attr:`~mediajobs.domain.jobs.JobView.provenance`):
  only the stack's roles read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

from mediajobs.domain.jobs import JobSpec, ObjectRef, OutputInput, OutputRecord
from mediajobs.domain.recipes import CONTENT_TYPES, M4A_CONTENT_TYPE, MP4_CONTENT_TYPE
from mediajobs.domain.text import shortened

#: 2: the public face holds no ``source`` and no ``inputs`` (they are the provenance's).
MANIFEST_SCHEMA_VERSION: Final = 2
MANIFEST_NAME: Final = "manifest.json"
#: The staged document's private part (module docstring).
PROVENANCE: Final = "provenance"
#: The fields of the public face, in the staged document (every other one stays private).
PUBLIC_FIELDS: Final = ("schema", "job_key", "recipe", "policy", "outputs", "decisions", "created_at")
#: Fields a decision never shows publicly, at any depth: what names an upload (a promo's
#: frames named their asset, rendition and decision in schema 1). Kept from the public face
#: of a manifest a holder of the earlier schema staged (adopted by a takeover after a deploy).
PRIVATE_DECISION_FIELDS: Final = frozenset({"asset_key", "rendition_job_key", "decision_id"})
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
    """Build the manifest document a holder stages for a committed job: its public face
    (:data:`PUBLIC_FIELDS`) and its provenance (:data:`PROVENANCE`). Pure.

    Parameters
    ----------
    source:
        The original the job read (the first upload of its content: not identity).
    input_sha256, input_bytes:
        The content's SHA-256 (hex) and size in bytes.
    created_at:
        ISO 8601 UTC timestamp of the commit.
    inputs:
        The job's inputs with what they came from (:func:`inputs_of`), listed in the
        provenance when given (an album's promo, never cut); ``None`` for every other job.

    Returns
    -------
    dict
        ``{"schema": 2, "job_key", "recipe": {"id", "version", "sha256"}, "policy":
        {"version"}, "outputs": [...], "decisions": {...}, "created_at", "provenance":
        {"source": {"bucket", "key", "version_id", "sha256", "bytes"}, "inputs": [...]|None}}``.
        :func:`public_manifest` of it is what ``manifest.json`` holds.
    """
    return {
        "schema": MANIFEST_SCHEMA_VERSION,
        "job_key": job_key,
        "recipe": {"id": recipe_id, "version": recipe_version, "sha256": recipe_sha256},
        "policy": {"version": policy_version},
        "outputs": [o.to_json() for o in outputs],
        "decisions": bounded_text(dict(decisions)),
        "created_at": created_at,
        PROVENANCE: {
            "source": {
                "bucket": source.bucket,
                "key": source.key,
                "version_id": source.version_id,
                "sha256": input_sha256,
                "bytes": input_bytes,
            },
            "inputs": inputs,
        },
    }


def public_manifest(document: Mapping[str, Any]) -> dict[str, Any]:
    """The public face of a staged manifest ``document``: its :data:`PUBLIC_FIELDS` only,
    its decisions without :data:`PRIVATE_DECISION_FIELDS` at any depth. Pure and
    deterministic (every holder of a job writes the same bytes: :func:`public_body`)."""
    public = {name: document[name] for name in PUBLIC_FIELDS if name in document}
    if "decisions" in public:
        public["decisions"] = _without_private(public["decisions"])
    return public


def public_body(staged: str) -> str:
    """``manifest.json``'s text for the staged manifest body ``staged`` (JSON): its
    :func:`public_manifest`, indented 2, keys sorted."""
    return json.dumps(public_manifest(json.loads(staged)), indent=2, sort_keys=True)


def provenance_of(document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The provenance of a staged manifest ``document`` (:data:`PROVENANCE`); for one staged
    by a holder of schema 1 (public ``source`` and ``inputs``), those; ``None`` when it has
    neither."""
    if isinstance(document.get(PROVENANCE), Mapping):
        return dict(document[PROVENANCE])
    if "source" in document or "inputs" in document:
        return {"source": document.get("source"), "inputs": document.get("inputs")}
    return None


def _without_private(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_private(v) for k, v in value.items() if k not in PRIVATE_DECISION_FIELDS}
    if isinstance(value, list | tuple):
        return [_without_private(v) for v in value]
    return value


def inputs_of(spec: JobSpec) -> list[dict[str, Any]]:
    """A job's inputs as its manifest's provenance lists them, by name: ``{"name", "job_key",
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
