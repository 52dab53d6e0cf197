"""The moderation policy as data, and its verdict on one content. Pure.

A policy is a versioned JSON file, ``mediajobs/recipes/moderation-policy.v<N>.json``,
validated as strictly as a recipe (an unknown field anywhere is an error: a typo can never
loosen what is refused). Its rules, in the order they are applied (:func:`verdict`):

1. **Known content**: exact SHA-256s, and perceptual hashes (64-bit difference hashes:
   :func:`mediajobs.adapters.perceptual.dhash`) within a Hamming distance, each list with
   the outcome it gives.
2. **Labels**: thresholds by moderation category, in Rekognition's taxonomy (its top-level
   categories, :data:`CATEGORIES`, "Label Categories" of the Rekognition developer guide,
   content moderation model 7), with ``MinConfidence`` (0-100, as Rekognition reports
   ``Confidence``) and the outcome each gives.
3. Otherwise the content is ``accepted``.

An outcome is ``accepted`` (its renditions run), ``rejected`` (the asset ends ``rejected``
with the rule that fired, renders and publishes nothing) or ``review`` (held until a person
decides). When several rules fire, the strictest outcome wins: ``rejected`` before
``review``; among equals, the first rule in the file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mediajobs.domain.keys import NO_POLICY, canonical_json, sha256_hex

#: Rekognition's top-level (L1) moderation categories, content moderation model 7 (the
#: developer guide's "Label Categories" table). A label rule names one of them.
CATEGORIES: Final = (
    "Explicit",
    "Non-Explicit Nudity of Intimate parts and Kissing",
    "Swimwear or Underwear",
    "Violence",
    "Visually Disturbing",
    "Drugs & Tobacco",
    "Alcohol",
    "Rude Gestures",
    "Gambling",
    "Hate Symbols",
)

#: The outcomes, strictest first.
ACCEPTED: Final = "accepted"
REVIEW: Final = "review"
REJECTED: Final = "rejected"
_STRICTNESS: Final = {REJECTED: 2, REVIEW: 1, ACCEPTED: 0}

#: Bits of a perceptual hash (:func:`mediajobs.adapters.perceptual.dhash`).
PERCEPTUAL_BITS: Final = 64

Outcome = Literal["rejected", "review"]


class PolicyError(ValueError):
    """A policy file is missing, malformed or holds unknown fields."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PerceptualHash(_Strict):
    """A known picture: its 64-bit difference hash (16 hex digits) and the largest Hamming
    distance at which another picture counts as it (a re-encode, a resize)."""

    hash: str = Field(pattern=r"^[0-9a-f]{16}$")
    max_distance: int = Field(ge=0, le=PERCEPTUAL_BITS // 4)


class KnownContent(_Strict):
    """Known-bad content: exact SHA-256s (hex) and perceptual hashes, and what they give."""

    sha256: tuple[str, ...] = ()
    perceptual: tuple[PerceptualHash, ...] = ()
    outcome: Outcome

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not re.fullmatch(r"[0-9a-f]{64}", v)]
        if bad:
            raise ValueError(f"not SHA-256 hex (64 lowercase hex digits): {bad[:3]}")
        if len(set(value)) != len(value):
            raise ValueError("a SHA-256 is listed twice")
        return value


class LabelRule(_Strict):
    """A moderation category (:data:`CATEGORIES`), the confidence from which it fires
    (Rekognition's ``Confidence``, 0-100) and what it gives."""

    category: str
    min_confidence: float = Field(ge=0, le=100)
    outcome: Outcome

    @field_validator("category")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in CATEGORIES:
            raise ValueError(f"not a top-level moderation category: {value!r} (known: {list(CATEGORIES)})")
        return value


class PolicyDocument(_Strict):
    """A policy file, as it is written.

    Attributes
    ----------
    id: ``"moderation-policy"``; version: 1 and up (the keys carry it).
    known: known-bad content lists, in order.
    labels: the label rules, in order.
    video_frame_every_s: a video is moderated on its poster and a frame this often, seconds.
    """

    id: Literal["moderation-policy"]
    version: int = Field(ge=1)
    comment: str = ""
    known: tuple[KnownContent, ...] = ()
    labels: tuple[LabelRule, ...] = ()
    video_frame_every_s: float = Field(gt=0, le=3600)

    @property
    def ref(self) -> str:
        """``"moderation-policy@<version>"``."""
        return f"{self.id}@{self.version}"

    @property
    def sha256(self) -> str:
        """SHA-256 hex of the policy's canonical JSON, its comment left out: what a
        released version may never change (its version is in the keys of the jobs it decided)."""
        return sha256_hex(canonical_json(self.model_dump(mode="json", exclude={"comment"})))


@dataclass(frozen=True)
class Label:
    """One moderation label as Rekognition reports it (``ModerationLabels[]``): ``Name``,
    ``ParentName`` (``""`` at the top level), ``Confidence`` (0-100)."""

    name: str
    parent: str
    confidence: float


@dataclass(frozen=True)
class Verdict:
    """What a policy decides of one content.

    Attributes
    ----------
    outcome: ``accepted``, ``review`` or ``rejected``.
    rule: the rule that fired (``"sha256"``, ``"perceptual:<hash>"``,
        ``"label:<category>>=<min_confidence>"``), ``None`` when accepted.
    evidence: what made it fire (the distance, the label and its confidence), ``""`` when accepted.
    """

    outcome: str
    rule: str | None = None
    evidence: str = ""


def parse_policy(document: Any) -> PolicyDocument:
    """Validate a policy document.

    Raises
    ------
    PolicyError
        On unknown fields, wrong types or out-of-range values.
    """
    try:
        return PolicyDocument.model_validate(document)
    except ValidationError as exc:
        raise PolicyError(f"invalid moderation policy: {exc}") from exc


def load_policy(version: int) -> PolicyDocument:
    """Load ``mediajobs/recipes/moderation-policy.v<version>.json``.

    Raises
    ------
    PolicyError
        If the file does not exist, is not JSON, does not validate, or declares another version.
    """
    name = f"moderation-policy.v{version}.json"
    try:
        text = resources.files("mediajobs.recipes").joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PolicyError(f"no moderation policy {version}") from exc
    try:
        policy = parse_policy(json.loads(text))
    except json.JSONDecodeError as exc:
        raise PolicyError(f"{name} is not JSON: {exc}") from exc
    if policy.version != version:
        raise PolicyError(f"{name} declares version {policy.version}")
    return policy


#: The steps of moderation recipes: a recipe of one of them is its media type's gate
#: (:func:`mediajobs.domain.plan.plan_jobs`).
MODERATION_STEPS: Final = frozenset({"moderation.image", "moderation.video"})

#: The name of the input every rendition takes from its content's moderation job (its
#: decisions: :data:`mediajobs.domain.jobs.DECISIONS_OUTPUT`).
MODERATION_INPUT: Final = "moderation"


def is_moderation(step: str) -> bool:
    """Whether a recipe of ``step`` is a moderation job (a gate before the renditions)."""
    return step in MODERATION_STEPS


def policy_of(policy_version: str) -> PolicyDocument | None:
    """The policy ``POLICY_VERSION`` names: ``None`` for :data:`NO_POLICY`, else
    ``moderation-policy.v<N>.json`` for the whole number ``N``.

    Raises
    ------
    PolicyError
        For any other value, or a policy that does not load (:func:`load_policy`).
    """
    if policy_version == NO_POLICY:
        return None
    if not policy_version.isdigit() or int(policy_version) < 1:
        raise PolicyError(f"POLICY_VERSION must be {NO_POLICY!r} or a policy version 1, 2 ...: {policy_version!r}")
    return load_policy(int(policy_version))


def hamming(a: int, b: int) -> int:
    """Bits that differ between two perceptual hashes."""
    return (a ^ b).bit_count()


def verdict(policy: PolicyDocument, *, sha256: str, perceptual: int | None, labels: Sequence[Label] = ()) -> Verdict:
    """The policy's outcome for a content (module docstring): its SHA-256 (hex), its
    perceptual hash (``None``: not a picture, or none computed) and its moderation labels.

    A label fires a rule when its name or its parent is the rule's category and its
    confidence is at least the rule's ``min_confidence``.
    """
    fired: list[Verdict] = []
    for known in policy.known:
        if sha256 in known.sha256:
            fired.append(Verdict(known.outcome, "sha256", f"sha256 {sha256[:12]}"))
        if perceptual is not None:
            for entry in known.perceptual:
                distance = hamming(perceptual, int(entry.hash, 16))
                if distance <= entry.max_distance:
                    evidence = f"distance {distance} <= {entry.max_distance}"
                    fired.append(Verdict(known.outcome, f"perceptual:{entry.hash}", evidence))
    for rule in policy.labels:
        for label in labels:
            confident = math.isfinite(label.confidence) and label.confidence >= rule.min_confidence
            if rule.category in (label.name, label.parent) and confident:
                rule_id = f"label:{rule.category}>={rule.min_confidence:g}"
                fired.append(Verdict(rule.outcome, rule_id, f"{label.name} {label.confidence:.1f}"))
                break
    if not fired:
        return Verdict(ACCEPTED)
    strictest = max(_STRICTNESS[v.outcome] for v in fired)
    return next(v for v in fired if _STRICTNESS[v.outcome] == strictest)


@dataclass(frozen=True)
class Sample:
    """One picture a content was judged on: the image itself, or a video's frame.

    Attributes
    ----------
    at_s: the frame's time, seconds (``None`` for an image).
    perceptual: its 64-bit difference hash.
    labels: the moderation labels the label source found in it.
    """

    at_s: float | None
    perceptual: int
    labels: tuple[Label, ...] = ()


def judged(policy: PolicyDocument, *, sha256: str, samples: Sequence[Sample]) -> Verdict:
    """The policy's outcome for a content judged on ``samples`` (an image's one picture, a
    video's frames): :func:`verdict` of each, the strictest wins (the earliest among
    equals), a frame's evidence prefixed with its time. With no sample, the exact-hash
    rule alone. Pure."""
    verdicts = [verdict(policy, sha256=sha256, perceptual=None)]
    for sample in samples:
        found = verdict(policy, sha256=sha256, perceptual=sample.perceptual, labels=sample.labels)
        if sample.at_s is not None and found.rule is not None and found.rule != "sha256":
            found = Verdict(found.outcome, found.rule, f"frame at {sample.at_s:.1f} s: {found.evidence}")
        verdicts.append(found)
    strictest = max(_STRICTNESS[v.outcome] for v in verdicts)
    return next(v for v in verdicts if _STRICTNESS[v.outcome] == strictest)


def decision_document(
    policy: PolicyDocument,
    found: Verdict,
    samples: Sequence[Sample],
    *,
    model_version: str | None,
    label_source: str,
    human_loop: Any = None,
) -> dict[str, Any]:
    """The moderation job's manifest ``decisions``: ``{"moderation": {...}}`` with the policy
    (reference and hash), the outcome, the rule that fired and its evidence, each sample's
    perceptual hash and labels (name, parent, confidence), the label source and its
    ``ModerationModelVersion`` (a decision without it cannot be re-read: Rekognition renamed
    labels from model 6.1 to 7 in 2024), and Rekognition's ``HumanLoopActivationOutput``
    when it sent one. Never the image's bytes. Pure."""
    return {
        "moderation": {
            "policy": policy.ref,
            "policy_sha256": policy.sha256,
            "outcome": found.outcome,
            "rule": found.rule,
            "evidence": found.evidence,
            "label_source": label_source,
            "model_version": model_version,
            "human_loop": human_loop,
            "samples": [
                {
                    "at_s": sample.at_s,
                    "perceptual": f"{sample.perceptual:016x}",
                    "labels": [
                        {"name": label.name, "parent": label.parent, "confidence": round(label.confidence, 3)}
                        for label in sample.labels
                    ],
                }
                for sample in samples
            ],
        }
    }


def moderation_of(decisions: Any) -> dict[str, Any] | None:
    """The ``moderation`` decision in a job's decisions, or ``None``."""
    if isinstance(decisions, dict) and isinstance(decisions.get("moderation"), dict):
        return dict(decisions["moderation"])
    return None


def with_review(decisions: Any, review: Any) -> dict[str, Any]:
    """A held job's decisions once a person decided: the machine's decision kept, the
    person's (``{"outcome", "by", "at_s"}``) under ``review``, and ``outcome`` the
    person's. Pure.

    Raises
    ------
    ValueError
        When ``decisions`` hold no moderation decision, or ``review`` has no valid outcome.
    """
    held = moderation_of(decisions)
    if held is None:
        raise ValueError("no moderation decision to review")
    if not isinstance(review, dict) or review.get("outcome") not in (ACCEPTED, REJECTED):
        raise ValueError(f"a review decides accepted or rejected: {review!r}")
    return {**decisions, "moderation": {**held, "outcome": review["outcome"], "review": dict(review)}}
