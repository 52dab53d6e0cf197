"""The search for the lowest encoder quality that reaches a perceptual target. Pure: the
encoder and the metric come in as one function (``try_quality``).

A variant's recipe names a target score (SSIMULACRA2, :mod:`mediajobs.domain.ssimulacra2`)
and a tolerance above it. The search:

1. **predicts** a quality: the recipe's ``start_quality``, moved by what the previous
   variant of the same picture needed (:func:`predicted_quality`), and encodes at it;
2. stops as soon as a try scores within ``[target, target + tolerance]``; otherwise makes
   **at most two corrective encodes** (:data:`MAX_ENCODES` = 3 in all), each aimed at the
   middle of that window along a straight line: between a try below the aim and one above
   it, the secant through the nearest such pair (an interpolation); while every try is on
   one side, the format's typical slope near the target (:data:`SLOPES`) from the nearest
   try. A score's curve in quality is concave (flat at the top, steep lower down), so a
   secant through two tries on one side misjudges the distance: through two tries above the
   window it is too flat and overshoots downwards (retina's ``full``: 78.4 at q58 and 75.9
   at q51 sent the third try to q40, 66.7), and through two below it is too steep. A
   correction stays strictly between the highest quality known to miss and the lowest known
   to reach;
3. keeps the **lowest tried quality whose score reaches the target**; when none does, the
   try with the highest score, marked as not reached.

Why 1 + 2: encoding is most of an image job's CPU (AVIF at 1600 px, about 0.6 s a try at
speed 6 on one core), and a score is not free either (about 0.2 s at 1600 px). Scores grow
smoothly with quality, so a secant from two points lands within about one quality step of
the answer; a fourth try would gain about 1 % of the bytes for another full encode.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: Most encodes per variant: the prediction and at most two corrections.
MAX_ENCODES: Final = 3
MIN_QUALITY: Final = 1
MAX_QUALITY: Final = 100

#: Typical score points gained per quality step near a score of 70, by format (measured on
#: tests/media/photos and scikit-image's photographs with ``mediajobs.adapters.ssimulacra2``):
#: the slope of the first correction, before two tries give a secant.
SLOPES: Final[Mapping[str, float]] = {"avif": 0.9, "webp": 0.7, "jpeg": 0.8}
#: How much of a previous variant's quality offset (its quality less its start) carries to
#: the next variant's prediction: all of it within a format, half across formats (a WebP's
#: difficulty says less about the AVIF encoder's).
SAME_FORMAT_CARRY: Final = 1.0
OTHER_FORMAT_CARRY: Final = 0.5


@dataclass(frozen=True)
class Try:
    """One encode of the search: the quality given to the encoder (1-100), the score the
    result reached, and its size in bytes."""

    quality: int
    score: float
    size_bytes: int


@dataclass(frozen=True)
class SearchResult:
    """The outcome of a search.

    Attributes
    ----------
    chosen: the try kept (its bytes are the variant).
    tries: every try in the order made (1 to :data:`MAX_ENCODES`).
    target, tolerance: as asked.
    reached: whether ``chosen.score >= target``.
    """

    chosen: Try
    tries: tuple[Try, ...]
    target: float
    tolerance: float
    reached: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reached", self.chosen.score >= self.target)

    def to_json(self) -> dict[str, Any]:
        """The manifest's record: chosen quality, score reached (2 decimals), whether it
        reached the target, and every try as ``[quality, score, bytes]``."""
        return {
            "metric": "ssimulacra2",
            "target": self.target,
            "tolerance": self.tolerance,
            "quality": self.chosen.quality,
            "score": round(self.chosen.score, 2),
            "reached": self.reached,
            "encodes": len(self.tries),
            "tries": [[t.quality, round(t.score, 2), t.size_bytes] for t in self.tries],
        }


def predicted_quality(start_quality: int, carried_offset: float) -> int:
    """The first quality to try: ``start_quality`` moved by ``carried_offset`` (what an
    earlier variant of the same picture needed beyond its own start, already weighted by
    :data:`SAME_FORMAT_CARRY` or :data:`OTHER_FORMAT_CARRY`), rounded and clamped to 1-100."""
    return _clamp(round(start_quality + carried_offset))


def _clamp(quality: int) -> int:
    return max(MIN_QUALITY, min(MAX_QUALITY, quality))


def choose(tries: tuple[Try, ...] | list[Try], target: float, tolerance: float | None = None) -> Try:
    """The lowest-quality try whose score lands in ``[target, target + tolerance]`` (with a
    ``tolerance``: scores are not monotone in quality near the top of a curve, and a lower
    quality scoring above the window would widen the spread across pictures); else the
    lowest-quality try that reaches ``target``; when none does, the one with the highest
    score (the highest quality among equals).

    Raises
    ------
    ValueError
        If ``tries`` is empty.
    """
    if not tries:
        raise ValueError("no try to choose from")
    if tolerance is not None:
        within = [t for t in tries if target <= t.score <= target + tolerance]
        if within:
            return min(within, key=lambda t: t.quality)
    reaching = [t for t in tries if t.score >= target]
    if reaching:
        return min(reaching, key=lambda t: t.quality)
    return max(tries, key=lambda t: (t.score, t.quality))


def next_quality(tries: list[Try], target: float, tolerance: float, slope: float) -> int | None:
    """The next quality to try after ``tries``, or ``None`` to stop.

    Stops when a try scores within ``[target, target + tolerance]``, after
    :data:`MAX_ENCODES` tries, or when no untried quality is left between the highest that
    misses and the lowest that reaches (or beyond 1-100).

    Parameters
    ----------
    tries: the tries so far (at least one).
    target, tolerance: the window aimed at, score points.
    slope: score points per quality step assumed while only one try is known (> 0).

    Raises
    ------
    ValueError
        If ``tries`` is empty, ``slope`` is not a positive finite number, or ``target`` or
        ``tolerance`` is not finite (or the tolerance negative).
    """
    if not tries:
        raise ValueError("next_quality needs the first try")
    if not (slope > 0 and math.isfinite(slope)):
        raise ValueError(f"slope must be positive: {slope}")
    if not (math.isfinite(target) and tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"target and tolerance must be finite, the tolerance not negative: {target}, {tolerance}")
    if len(tries) >= MAX_ENCODES or any(target <= t.score <= target + tolerance for t in tries):
        return None
    missing = [t.quality for t in tries if t.score < target]
    reaching = [t.quality for t in tries if t.score >= target]
    floor = max(missing, default=MIN_QUALITY - 1)  # known to miss: try above it
    ceiling = min(reaching, default=MAX_QUALITY + 1)  # known to reach: try below it
    if floor + 1 >= ceiling:  # nothing untried between (scores are not monotone near the top)
        return None
    aim = target + tolerance / 2
    base, line_slope = min(tries, key=lambda t: abs(t.score - aim)), slope
    below = [t for t in tries if t.score < aim]
    above = [t for t in tries if t.score > aim]
    if below and above:  # the aim is bracketed: interpolate between the nearest pair
        low, high = max(below, key=lambda t: t.score), min(above, key=lambda t: t.score)
        if high.quality > low.quality:
            base, line_slope = low, (high.score - low.score) / (high.quality - low.quality)
    wanted = base.quality + (aim - base.score) / line_slope
    quality = math.ceil(wanted) if base.score < aim else math.floor(wanted)
    quality = max(floor + 1, min(ceiling - 1, quality))
    if quality > MAX_QUALITY or quality < MIN_QUALITY or quality in {t.quality for t in tries}:
        return None
    return quality


def search(
    try_quality: Callable[[int], Try], first_quality: int, target: float, tolerance: float, slope: float
) -> SearchResult:
    """Run the search: encode at ``first_quality``, then correct as :func:`next_quality`
    says, at most :data:`MAX_ENCODES` encodes in all.

    Parameters
    ----------
    try_quality:
        Encodes at a quality (1-100) and scores the result; called once per try.
    first_quality:
        The prediction (:func:`predicted_quality`), 1-100.
    target, tolerance:
        Score to reach and how far above it a try is good enough to stop, points.
    slope:
        Typical score points per quality step of the format (:data:`SLOPES`).

    Raises
    ------
    ValueError
        If ``first_quality`` is outside 1-100 or ``tolerance`` is negative; what
        ``try_quality`` raises propagates.
    """
    if not MIN_QUALITY <= first_quality <= MAX_QUALITY:
        raise ValueError(f"quality must be 1-100: {first_quality}")
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"tolerance must be finite and not negative: {tolerance}")
    tries = [try_quality(first_quality)]
    while (quality := next_quality(tries, target, tolerance, slope)) is not None:
        tries.append(try_quality(quality))
    return SearchResult(choose(tries, target, tolerance), tuple(tries), target, tolerance)
