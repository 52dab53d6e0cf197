"""The segment plan of a long video: where to cut it so that segments can be encoded in
parallel and joined without re-encoding. Pure and deterministic: the same probe (duration
and keyframe times) gives the same plan, byte for byte, on every worker.

Rules:

* **When.** A video is split when its single-invocation estimate
  (:func:`mediajobs.domain.video.estimated_seconds`) exceeds ``split_above_s``
  (``SPLIT_ABOVE_SECONDS``, default :data:`SPLIT_ABOVE_SECONDS`) and it is long enough for
  two segments (:func:`should_split`).
* **How many.** ``n = round(duration / segment_s)`` segments (at least 2 once split), the
  ideal cuts evenly spaced at ``k * duration / n``: every segment is about ``segment_s``
  (``SEGMENT_SECONDS``, default :data:`SEGMENT_SECONDS`) and none is a sliver.
* **Where.** A cut moves to the source's keyframe nearest its ideal time when one lies within
  a quarter of ``segment_s`` (:data:`SNAP_FRACTION`): the segment then decodes from its own
  first frame. Otherwise (sparse keyframes: a screen recording, a surveillance stream) the
  cut stays at the ideal time, exact, and the segment decodes from the last keyframe before
  it (:attr:`Segment.decode_from_us`), throwing away the frames before its start; an exact
  cut falls on the first frame at or after the ideal time, when the frames' times are known.
* Times are whole microseconds (ffprobe prints six decimals), so that a plan written in one
  invocation and read in another compares and hashes exactly; a segment holds the source's
  frames whose presentation time is in ``[start, end)``, the last one to the end.

A plan's :data:`PLAN_VERSION` is part of each segment job's identity (the key also carries
the original's content and the recipe): a change of these rules is a new version, never the
same keys cut elsewhere.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

#: The version of these rules; in every segment job's identity and in the plan's record.
PLAN_VERSION: Final = 1
#: Default estimated work above which a video is split, seconds (``SPLIT_ABOVE_SECONDS``).
SPLIT_ABOVE_SECONDS: Final = 240.0
#: Default length of a segment of source, seconds (``SEGMENT_SECONDS``).
SEGMENT_SECONDS: Final = 60.0
#: How far from an ideal cut a keyframe may be and still be cut at, as a share of the
#: segment length (the issue: "within a quarter of SEGMENT_SECONDS").
SNAP_FRACTION: Final = 0.25
#: Shortest segment length accepted, seconds: below it a split gains nothing.
MIN_SEGMENT_SECONDS: Final = 1.0
#: How far from a grid point of the renditions' frame rate a time may be and count as on it,
#: microseconds (``plan_segments``' ``grid_s``).
GRID_TOLERANCE_US: Final = 1000
#: Longest segment length accepted, seconds: a day (``MAX_VIDEO_SECONDS`` is at most 3 h).
MAX_SEGMENT_SECONDS: Final = 86_400.0

_US: Final = 1_000_000


def to_us(seconds: float) -> int:
    """Seconds as whole microseconds (rounded half away from zero)."""
    return int(math.floor(seconds * _US + 0.5)) if seconds >= 0 else -int(math.floor(-seconds * _US + 0.5))


def to_s(us: int) -> float:
    """Microseconds as seconds."""
    return us / _US


@dataclass(frozen=True)
class Segment:
    """One segment of the source.

    Attributes
    ----------
    index: 0-based position in the plan.
    start_us, end_us: the source's presentation times the segment covers, ``[start, end)``
        (the last segment's end is the duration), microseconds.
    decode_from_us: the keyframe the segment's decode starts at (``<= start_us``),
        microseconds; equal to ``start_us`` when the cut is on a keyframe.
    """

    index: int
    start_us: int
    end_us: int
    decode_from_us: int

    @property
    def on_keyframe(self) -> bool:
        """Whether the segment starts on a keyframe of the source (no frame decoded and dropped)."""
        return self.decode_from_us == self.start_us

    @property
    def duration_s(self) -> float:
        """Length of source the segment covers, seconds."""
        return to_s(self.end_us - self.start_us)

    def identity(self) -> str:
        """The segment's part of its job's identity: ``"segment/v<PLAN_VERSION>/<start_us>-<end_us>"``."""
        return f"segment/v{PLAN_VERSION}/{self.start_us}-{self.end_us}"

    def to_json(self) -> dict[str, Any]:
        """``{"index", "start_s", "end_s", "decode_from_s", "on_keyframe"}``, seconds to 6 decimals."""
        return {
            "index": self.index,
            "start_s": round(to_s(self.start_us), 6),
            "end_s": round(to_s(self.end_us), 6),
            "decode_from_s": round(to_s(self.decode_from_us), 6),
            "on_keyframe": self.on_keyframe,
        }


@dataclass(frozen=True)
class SegmentPlan:
    """Where a source is cut.

    Attributes
    ----------
    version: :data:`PLAN_VERSION` of the rules that made it.
    segment_s: the segment length asked for, seconds.
    segments: in order, contiguous, covering ``[0, duration)``.
    video_start_us: the first frame's time when the frames are known (a video may start
        after its audio), else 0, microseconds.
    """

    version: int
    segment_s: float
    segments: tuple[Segment, ...]
    video_start_us: int = 0

    def _length_us(self, segment: Segment) -> int:
        """From the segment's first frame (the first segment's is :attr:`video_start_us`) to
        its end, microseconds."""
        return segment.end_us - max(segment.start_us, self.video_start_us)

    def encode_range(self, segment: Segment) -> tuple[float, float | None]:
        """``(seek_s, duration_s)`` for :func:`mediajobs.domain.video.segment_argv`: where
        the segment's ``-ss`` goes and how long its ``-t`` is, seconds; ``None`` for the last
        segment (to the end: a frame may sit exactly at the declared duration). ffmpeg's
        input ``-t`` counts from the first frame it decodes after the seek, so the first
        segment's length counts from :attr:`video_start_us` (counted from 0 it ran that far
        into the second segment: 16 repeated frames for a video starting 0.52 s late)."""
        last = segment.index == len(self.segments) - 1
        return to_s(segment.start_us), None if last else to_s(self._length_us(segment))

    def join_durations(self) -> list[float]:
        """Each segment's length as the join lists it (:func:`mediajobs.domain.video.join_list`),
        seconds: from its first frame (the first segment's is :attr:`video_start_us`) to the
        next segment's start; the joined video is then moved :attr:`video_start_us` later
        (:func:`mediajobs.domain.video.join_argv`'s ``offset_s``)."""
        return [to_s(self._length_us(s)) for s in self.segments]

    @property
    def exact_cuts(self) -> int:
        """How many segments start between keyframes (decoding frames they then drop)."""
        return sum(1 for s in self.segments if not s.on_keyframe)

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``decisions.segments``: version, segment length, how many cuts are
        exact, and every segment (:meth:`Segment.to_json`)."""
        return {
            "version": self.version,
            "segment_s": self.segment_s,
            "count": len(self.segments),
            "exact_cuts": self.exact_cuts,
            "segments": [s.to_json() for s in self.segments],
        }


def should_split(estimated_s: float, duration_s: float, split_above_s: float, segment_s: float) -> bool:
    """Whether a video is split: its single-invocation estimate (seconds of work) exceeds
    ``split_above_s`` and its plan (:func:`plan_segments`) has two segments or more.

    Raises
    ------
    ValueError
        As :func:`plan_segments`, or if ``split_above_s`` is not positive.
    """
    _check(segment_s, split_above_s)
    return estimated_s > split_above_s and len(plan_segments(duration_s, (), segment_s).segments) >= 2


def plan_segments(
    duration_s: float,
    keyframes_s: Iterable[float],
    segment_s: float,
    frames_s: Iterable[float] = (),
    grid_s: float | None = None,
) -> SegmentPlan:
    """Cut ``duration_s`` seconds of source into about ``segment_s``-second segments (module
    docstring), snapping each cut to the nearest of ``keyframes_s`` within
    ``SNAP_FRACTION * segment_s``.

    Parameters
    ----------
    duration_s: the source's duration, seconds (> 0).
    keyframes_s: presentation times of the video stream's keyframes, seconds, in any order
        (ffprobe's ``K`` packets: :func:`mediajobs.domain.video.parse_keyframes`); the first
        frame counts as one when none is at or before 0.
    segment_s: wanted segment length, seconds.
    frames_s: presentation times of every frame of the stream, seconds (ffprobe's packets),
        when known: an exact cut then moves to the first frame at or after its ideal time (and
        is dropped when no frame is left after it), so that every segment starts on a frame
        and its first frame keeps its time when the segments are joined (cut between frames,
        the join would move the segment's frames by the gap: 4 ms at 4.2 s of a 29.97 fps
        source, which put the renditions a frame off the source's timeline).
    grid_s: the renditions' frame interval when they are capped (``1 / fps_cap``), seconds:
        every cut then falls on that grid (within :data:`GRID_TOLERANCE_US`), a keyframe off
        it is not cut at, and an exact cut moves to the first frame at or after the first
        grid point at or after its ideal time. Each segment's ``fps`` filter starts its grid
        at the segment's first frame, so a cut off the single pass's grid would put two
        frames closer than the cap at the join (8 ms apart for a 120 fps source at 4.008 s).

    Raises
    ------
    ValueError
        If ``grid_s`` is given and not a positive finite number, if ``duration_s`` is not at
        least a microsecond, or ``segment_s`` is not within
        :data:`MIN_SEGMENT_SECONDS`-:data:`MAX_SEGMENT_SECONDS`.
    """
    _check(segment_s, 1.0)
    if not (duration_s > 0 and math.isfinite(duration_s)) or to_us(duration_s) < 1:
        raise ValueError(f"a duration must be at least a microsecond: {duration_s}")
    if grid_s is not None and not (grid_s > 0 and math.isfinite(grid_s)):
        raise ValueError(f"a grid must be a positive number of seconds: {grid_s}")
    end_us = to_us(duration_s)
    keys = sorted({k for k in (to_us(t) for t in keyframes_s if math.isfinite(t)) if 0 <= k < end_us} | {0})
    frames = sorted({f for f in (to_us(t) for t in frames_s if math.isfinite(t)) if 0 <= f < end_us})
    segment_us = to_us(segment_s)
    count = max(1, (2 * end_us + segment_us) // (2 * segment_us))  # round(duration / segment), in microseconds
    cut_keys = keys if grid_s is None else [0, *(k for k in keys if k and _on_grid(k, grid_s))]
    reach_us = to_us(SNAP_FRACTION * segment_s)
    min_us = to_us(MIN_SEGMENT_SECONDS)
    cuts = [0]
    for k in range(1, count):
        ideal = end_us * k // count
        nearest = _nearest(cut_keys, ideal, low=cuts[-1] + min_us, high=end_us - min_us)
        if nearest is not None and abs(nearest - ideal) <= reach_us:
            cuts.append(nearest)
        elif (
            exact := _frame_at_or_after(frames, ideal if grid_s is None else _grid_at_or_after(ideal, grid_s))
        ) is not None and cuts[-1] + min_us <= exact <= end_us - min_us:
            cuts.append(exact)
    bounds = [*cuts, end_us]
    pairs = zip(bounds, bounds[1:], strict=False)
    segments = tuple(Segment(i, start, stop, _at_or_before(keys, start)) for i, (start, stop) in enumerate(pairs))
    return SegmentPlan(PLAN_VERSION, segment_s, segments, frames[0] if frames else 0)


def _check(segment_s: float, split_above_s: float) -> None:
    if not (segment_s >= MIN_SEGMENT_SECONDS and math.isfinite(segment_s) and segment_s <= MAX_SEGMENT_SECONDS):
        raise ValueError(f"a segment must be {MIN_SEGMENT_SECONDS}-{MAX_SEGMENT_SECONDS} s: {segment_s}")
    if not split_above_s > 0:
        raise ValueError(f"the split threshold must be positive: {split_above_s}")


def _nearest(keys: Sequence[int], ideal: int, *, low: int, high: int) -> int | None:
    """The key in ``[low, high]`` nearest ``ideal`` (the earlier of two equally near)."""
    inside = [k for k in keys if low <= k <= high]
    return min(inside, key=lambda k: (abs(k - ideal), k)) if inside else None


def _on_grid(at_us: int, grid_s: float) -> bool:
    grid_us = grid_s * _US
    return abs(at_us - round(at_us / grid_us) * grid_us) <= GRID_TOLERANCE_US


def _grid_at_or_after(at_us: int, grid_s: float) -> int:
    """The first grid point at or after ``at_us``, less the tolerance (a frame a hair
    before it counts as on it), microseconds."""
    grid_us = grid_s * _US
    return max(0, round(math.ceil(at_us / grid_us - 1e-9) * grid_us) - GRID_TOLERANCE_US)


def _frame_at_or_after(frames: Sequence[int], at: int) -> int | None:
    """The first of ``frames`` at or after ``at``; ``at`` itself when no frame is known;
    ``None`` when frames are known and none is left (a cut there would start a segment with
    no frame: an audio track running on after the video)."""
    if not frames:
        return at
    index = bisect.bisect_left(frames, at)
    return frames[index] if index < len(frames) else None


def _at_or_before(keys: Sequence[int], at: int) -> int:
    """The last key at or before ``at`` (``keys``: sorted, holding 0)."""
    return keys[bisect.bisect_right(keys, at) - 1]
