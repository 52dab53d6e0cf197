"""Decisions as data: one compact record for every decision at the claim boundary, every
moderation outcome and every review. Pure.

A record (:func:`record`) is one JSON object, one line of the decision log (Firehose to
S3 when deployed, the embedded AWS's Firehose locally; ``docs/moderation.md``):

============  ==============================================================================
field         what
============  ==============================================================================
``t``         Unix time, seconds
``corr``      correlation id: the S3 request id of the event, the backfill id, or the job
              request's (never a message id alone: a redelivery keeps its correlation)
``asset``     the asset key's hash (SHA-256 of ``<bucket>/<key>``, 16 hex digits): never
              the key, which may be a user's file name
``content``   the original's SHA-256, 16 hex digits
``job``       the job key, 16 hex digits
``recipe``    recipe id; ``recipe_v``: its version; ``recipe_hash``: its hash, 16 hex digits
``policy``    moderation policy version; ``key_v``: the key algorithm's version
``prior``     the job's state before the decision (``none`` for a job never written)
``action``    ``process``, ``takeover``, ``reuse``, ``wait``, ``superseded`` at the claim
              boundary; ``ended`` when a held job's work ended; ``accepted``, ``rejected``,
              ``review`` for a moderation outcome or a person's review
``state``     for ``ended``: ``done``, ``permanent_failure``, ``review`` or ``waiting``
``cpu_s``     CPU seconds the job's work spent (its process and its children), ``ended``
``bytes_in``  bytes of the original (or inputs) the work read; ``bytes_out``: bytes written
``rule``      the moderation rule that fired; ``model``: the label model's version;
              ``reviewer``: who decided a review
============  ==============================================================================

Nothing of an original's bytes and no file name is ever in a record.

A cost spike is then a query over repeated keys (``queries/spikes.sql``): the processing
starts (``process``, ``takeover``) grouped by the full identity, and by asset, fall apart
into four causes (:data:`CAUSES`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

#: Hex digits kept of each hash in a record: enough to tell contents apart at any scale
#: a stack reaches (64 bits), and no more.
PREFIX: Final = 16

#: The actions a record names.
ACTIONS: Final = (
    "process",
    "takeover",
    "reuse",
    "wait",
    "superseded",
    "ended",
    "accepted",
    "rejected",
    "review",
)

#: The processing starts: what a cost spike is made of.
STARTS: Final = ("process", "takeover")

#: The four causes of "the same photo ran twice" (``queries/spikes.sql``), each with what
#: tells it: the same identity started more than once (the claim boundary failed); one asset
#: key with different bytes; one recipe version with different hashes (its config changed
#: without a version bump); different policy versions (a policy change's intended coverage).
CAUSES: Final = {
    "claim_boundary": "the same identity started more than once: the claim boundary failed",
    "same_key_different_bytes": "the same asset key with different bytes (a re-upload)",
    "recipe_changed_without_version": "one recipe version with different hashes: its config changed without a bump",
    "policy_change": "different policy versions: a policy change's intended coverage",
}


def asset_hash(bucket: str, key: str) -> str:
    """The asset key's hash in a record: SHA-256 of ``<bucket>/<key>``, :data:`PREFIX` hex digits."""
    return hashlib.sha256(f"{bucket}/{key}".encode()).hexdigest()[:PREFIX]


def record(
    *,
    t: int,
    corr: str,
    action: str,
    asset: str | None = None,
    content: str | None = None,
    job: str | None = None,
    recipe: str | None = None,
    recipe_v: int | None = None,
    recipe_hash: str | None = None,
    policy: str | None = None,
    key_v: int | None = None,
    prior: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One decision record (module docstring); hashes cut to :data:`PREFIX` digits,
    ``key_v`` the key algorithm the job's key was derived with (``None`` for a record of
    no job), ``extra`` fields (``state``, ``cpu_s``,
    ``bytes_in``, ``bytes_out``, ``rule``, ``model``, ``reviewer``) kept when not ``None``.

    Raises
    ------
    ValueError
        For an action not in :data:`ACTIONS`, or an unknown extra field.
    """
    if action not in ACTIONS:
        raise ValueError(f"not a decision action: {action!r}")
    unknown = set(extra) - {"state", "cpu_s", "bytes_in", "bytes_out", "rule", "model", "reviewer"}
    if unknown:
        raise ValueError(f"not decision record fields: {sorted(unknown)}")
    out: dict[str, Any] = {
        "t": int(t),
        "corr": corr,
        "action": action,
        "asset": asset,
        "content": content[:PREFIX] if content else None,
        "job": job[:PREFIX] if job else None,
        "recipe": recipe,
        "recipe_v": recipe_v,
        "recipe_hash": recipe_hash[:PREFIX] if recipe_hash else None,
        "policy": policy,
        "key_v": key_v,
        "prior": prior or "none",
    }
    for name, value in extra.items():
        if value is not None:
            out[name] = round(value, 3) if isinstance(value, float) else value
    return out


def moderation_fields(decisions: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``rule``, ``model`` and ``reviewer`` of a moderation decision (``{}`` without one)."""
    moderation = decisions.get("moderation") if isinstance(decisions, Mapping) else None
    if not isinstance(moderation, Mapping):
        return {}
    review = moderation.get("review")
    return {
        "rule": moderation.get("rule"),
        "model": moderation.get("model_version"),
        "reviewer": review.get("by") if isinstance(review, Mapping) else None,
    }
