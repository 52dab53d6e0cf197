"""A job split into parts: a long video's segments and its audio track, each a job of its
own, and the parent job that joins them. Pure.

The parent (the recipe's job of the original) probes the source and, when its single
invocation would take too long, plans the parts (:mod:`mediajobs.domain.segments`) and
raises :class:`SplitNeeded` instead of rendering. The service layer then writes one job per
part (:func:`part_spec`: its key is the original's content, the part's identity -- the
segment's range under the plan's version, or ``audio/v1`` --, the recipe and the policy:
:func:`~mediajobs.domain.keys.part_job_key`), each ``requested`` and naming the parent among
the jobs waiting for it, and turns the parent ``waiting`` for them, with the split's record
(:class:`Split`) on its row (:func:`split_changes`). The last part to commit makes the
parent ``requested`` (the backbone's :mod:`~mediajobs.service_layer.requests`); its run
finds the record and joins the parts' outputs instead of splitting again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mediajobs.domain.jobs import Changes, JobSpec, JobState
from mediajobs.domain.keys import ORIGINAL_INPUT, KeyScheme, inputs_job_key, is_part, part_job_key
from mediajobs.domain.manifest import derivative_prefix
from mediajobs.domain.segments import SegmentPlan, to_s

#: The audio part's identity: the whole first audio track, once per rung's bitrate.
AUDIO_PART: Final = "audio/v1"


@dataclass(frozen=True)
class Part:
    """One part of a split job.

    Attributes
    ----------
    identity: :data:`~mediajobs.domain.keys.PART` (``segment/v1/<start_us>-<end_us>`` or
        :data:`AUDIO_PART`): what the part's key hashes besides the content and the recipe.
    seek_s: where the part's input starts, seconds of the source (0 for the audio).
    length_s: how long it runs, seconds; ``None`` to the source's end.
    weight_s: the seconds of source it covers: its share of the asset's progress.
    join_s: for a segment, its length in the join's list (:meth:`SegmentPlan.join_durations
        <mediajobs.domain.segments.SegmentPlan.join_durations>`), seconds; 0 for the audio.
    """

    identity: str
    seek_s: float
    length_s: float | None
    weight_s: float
    join_s: float = 0.0

    def __post_init__(self) -> None:
        if not is_part(self.identity):
            raise ValueError(f"not a part: {self.identity!r}")
        for name in ("seek_s", "weight_s", "join_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds, not negative: {value!r}")
        if self.length_s is not None and not (math.isfinite(self.length_s) and self.length_s > 0):
            raise ValueError(f"length_s must be a positive number of seconds: {self.length_s!r}")

    @property
    def is_audio(self) -> bool:
        """Whether this is the audio part."""
        return self.identity == AUDIO_PART

    def to_json(self) -> dict[str, Any]:
        """``{"identity", "seek_s", "length_s", "weight_s", "join_s"}`` (as stored on rows)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Part:
        """The part :meth:`to_json` wrote.

        Raises
        ------
        ValueError
            If a field is missing or out of range.
        """
        try:
            length = data["length_s"]
            return cls(
                str(data["identity"]),
                float(data["seek_s"]),
                None if length is None else float(length),
                float(data["weight_s"]),
                float(data.get("join_s", 0.0)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a part: {dict(data)!r}") from exc


@dataclass(frozen=True)
class Split:
    """What a parent job was split into.

    Attributes
    ----------
    parts: the segments in order, then the audio part when the source has audio.
    offset_s: how much later than 0 the joined video starts (the plan's video start), seconds.
    plan: the plan's record for the manifest's ``decisions.segments``
        (:meth:`SegmentPlan.to_json <mediajobs.domain.segments.SegmentPlan.to_json>`).
    probe: what the parent's probe read of the source (ffprobe's document, and the
        packets' end when it declares no duration), so that every part and the join plan
        from the same facts without reading the whole original again; ``{}`` when unknown.
    """

    parts: tuple[Part, ...]
    offset_s: float
    plan: Mapping[str, Any]
    probe: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def segments(self) -> tuple[Part, ...]:
        """The video parts, in order."""
        return tuple(p for p in self.parts if not p.is_audio)

    @property
    def audio(self) -> Part | None:
        """The audio part, if any."""
        return next((p for p in self.parts if p.is_audio), None)

    def to_json(self) -> dict[str, Any]:
        """``{"parts": [...], "offset_s", "plan", "probe"}``: the record on the parent's row."""
        return {
            "parts": [p.to_json() for p in self.parts],
            "offset_s": self.offset_s,
            "plan": dict(self.plan),
            "probe": dict(self.probe),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Split:
        """The split :meth:`to_json` wrote.

        Raises
        ------
        ValueError
            If the record is malformed.
        """
        try:
            parts = tuple(Part.from_json(p) for p in data["parts"])
            return cls(parts, float(data["offset_s"]), dict(data["plan"]), dict(data.get("probe") or {}))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a split: {exc}") from exc


class SplitNeeded(Exception):  # noqa: N818 -- a signal, not an error
    """Raised by a step instead of rendering: the job is to be split into ``split``'s parts
    (the runner catches it: :meth:`~mediajobs.service_layer.requests.JobRequests.fan_out`)."""

    def __init__(self, split: Split) -> None:
        super().__init__(f"split into {len(split.parts)} parts")
        self.split = split


#: The stack's key scheme of a key algorithm (:meth:`mediajobs.settings.Settings.keys_for`).
KeysFor = Callable[[int], KeyScheme]


def part_spec(parent: JobSpec, part: Part, derivatives_prefix: str, keys_for: KeysFor) -> JobSpec:
    """The job of one part of ``parent``: the parent's content, recipe, policy and original,
    keyed by :func:`~mediajobs.domain.keys.part_job_key` under the scheme of the parent's
    ``key_algorithm`` (a key rollout while the video is split leaves its parts' keys as
    they were), its outputs under its own prefix, and the parent among the jobs waiting for it.

    Raises
    ------
    ValueError
        As :func:`~mediajobs.domain.keys.part_job_key`.
    """
    keys = keys_for(parent.key_algorithm)
    key = part_job_key(parent.input_sha256, part.identity, parent.recipe_sha256, parent.policy_version, keys=keys)
    return dataclasses.replace(
        parent,
        job_key=key,
        output_prefix=derivative_prefix(derivatives_prefix, key),
        waiting=frozenset({parent.job_key}),
        part=part,
    )


def split_of(plan: SegmentPlan, *, audio_s: float | None, probe: Mapping[str, Any]) -> Split:
    """The parts of a source cut as ``plan``: a part per segment (its range as the plan
    encodes and joins it, its seconds as its progress weight), then the audio track whole
    when the source has one (``audio_s``: its length, seconds; ``None``: no audio).
    ``probe``: what the probe read (:attr:`Split.probe`)."""
    parts = [
        Part(segment.identity(), *plan.encode_range(segment), segment.duration_s, join_s)
        for segment, join_s in zip(plan.segments, plan.join_durations(), strict=True)
    ]
    if audio_s is not None:
        parts.append(Part(AUDIO_PART, 0.0, None, audio_s))
    return Split(tuple(parts), to_s(plan.video_start_us), plan.to_json(), probe)


def parent_key(part: JobSpec, keys_for: KeysFor) -> str:
    """The key of the job ``part`` is a part of: the same inputs (a part keeps its parent's:
    the original whole, and its moderation job's decisions under a policy), recipe and
    policy (:func:`~mediajobs.domain.keys.inputs_job_key`), under the scheme of the part's
    ``key_algorithm``, which is its parent's."""
    identity = {name: wanted.identity() for name, wanted in part.inputs.items()} or {
        ORIGINAL_INPUT: {"sha256": part.input_sha256}
    }
    return inputs_job_key(identity, part.recipe_sha256, part.policy_version, keys=keys_for(part.key_algorithm))


def part_specs(parent: JobSpec, split: Split, derivatives_prefix: str, keys_for: KeysFor) -> list[JobSpec]:
    """:func:`part_spec` of each of ``split``'s parts, in order."""
    return [part_spec(parent, part, derivatives_prefix, keys_for) for part in split.parts]


def split_changes(pending: frozenset[str], split: Split, now_s: int, requests_until_s: int) -> Changes:
    """What the parent's row becomes when split: ``waiting`` for the parts not done
    (``requested`` when every one is), its lease token given up, the split recorded.

    Its ``lease_expires_at_s`` becomes ``requests_until_s``: until then the splitting
    delivery is sending the parts' requests, and a redelivery of the original is busy;
    after it, a redelivery sends again any still ``requested`` (the splitter may have died
    before sending them) and is acknowledged."""
    return {
        "state": str(JobState.WAITING if pending else JobState.REQUESTED),
        "lease_token": None,
        "lease_expires_at_s": requests_until_s,
        "pending": frozenset(pending) or None,
        "split": split,
        "updated_at_s": now_s,
    }


def progress_of(split: Split, done: Sequence[bool]) -> float:
    """The parent's progress: the share of its parts' seconds committed (``done``: one flag
    per part, in order), 0-1. The join is not counted: 1.0 waits for it."""
    total = sum(p.weight_s for p in split.parts)
    if total <= 0:
        return 0.0
    return sum(p.weight_s for p, d in zip(split.parts, done, strict=True) if d) / total
