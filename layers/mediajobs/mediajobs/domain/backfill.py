"""Backfills: every live asset gets the jobs a change of the active recipe set (or of the
moderation policy version) makes it lack. Pure (``docs/backfill.md``).

* A **change** is the active set and the policy version as one hash (:func:`change_of`):
  the same deployed set is the same change, so a second start of it starts nothing new
  and answers with the backfill already there (:func:`backfill_id` of its generation; a
  cancelled one may be started again as the next generation).
* The scan pages the assets table in DynamoDB parallel scan **segments**, each with its
  own cursor (the ``LastEvaluatedKey`` of its last page, kept in DynamoDB), so a crash or
  a redeploy resumes each segment where it stopped and never starts over. It makes
  :data:`PASSES` passes: the second starts once the first is over and the old deployment's
  invocations are over too (``WORKER_TIMEOUT_SECONDS`` after the backfill started): an
  invocation of the old code that was running at the deploy may make an asset current
  with the old set after the first pass went by its key.
* What is counted is **jobs** -- one (content, recipe) pair, however many assets share
  the content (:class:`Counts`): ``total`` found missing, ``enqueued`` on the backfill
  lane, ``reused`` (done already: no render), ``done`` and ``failed`` as the lane ends
  them, ``remaining`` the rest. Each job is counted once, by a conditional write of its
  own mark, so the counts are exact under redeliveries and concurrent scanners.
* The **states** (:class:`BackfillState`): ``running`` -> ``done`` (every segment scanned,
  no asset left to look at again, no job remaining), or ``paused`` (and back), or
  ``cancelled`` (its scan stops; the jobs already on the lane still run).
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mediajobs.domain.assets import AssetState, AssetView

#: Version of :func:`change_of`'s document (a new one would make every change new).
CHANGE_VERSION: Final = 1
#: A backfill's id: ``bf-<12 hex of its change>-<generation>``.
BACKFILL_ID: Final = re.compile(r"bf-[0-9a-f]{12}-[1-9][0-9]{0,5}")
#: Passes of the scan (the module docstring says why two).
PASSES: Final = 2
#: DynamoDB's largest ``TotalSegments`` is 1,000,000 ("Parallel scan", DynamoDB developer
#: guide); beyond a few per scanner nothing is gained here.
MAX_SEGMENTS: Final = 64


class BackfillState(enum.StrEnum):
    """A backfill's state (the module docstring)."""

    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    CANCELLED = "cancelled"


#: The states a backfill may be moved to from each, by ``pause``, ``resume`` and ``cancel``
#: (``done`` is reached by the scanner alone).
MOVES: Final[Mapping[BackfillState, frozenset[BackfillState]]] = {
    BackfillState.RUNNING: frozenset({BackfillState.PAUSED, BackfillState.CANCELLED, BackfillState.DONE}),
    BackfillState.PAUSED: frozenset({BackfillState.RUNNING, BackfillState.CANCELLED}),
    BackfillState.DONE: frozenset(),
    BackfillState.CANCELLED: frozenset(),
}


def change_of(active: Mapping[str, Sequence[str]], policy_version: str) -> str:
    """The change a deployment is: SHA-256 hex of the canonical JSON ``{"active": {media:
    [recipe references in order]}, "policy": policy_version, "v": CHANGE_VERSION}``."""
    document: dict[str, Any] = {
        "active": {m: list(refs) for m, refs in sorted(active.items())},
        "policy": policy_version,
        "v": CHANGE_VERSION,
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def backfill_id(change: str, generation: int) -> str:
    """The id of the ``generation``-th backfill (1, 2 ...) of ``change``."""
    return f"bf-{change[:12]}-{generation}"


def unsettled(view: AssetView) -> bool:
    """Whether the asset is live but its content is not known yet (an event in flight,
    planned by whichever recipe set its worker has): it is looked at again once the scan
    is over."""
    return view.state in (AssetState.PENDING, AssetState.PROCESSING) and (view.sha256 is None or view.media is None)


@dataclass(frozen=True)
class Counts:
    """A backfill's counts (the module docstring): jobs, and assets.

    Attributes
    ----------
    total, enqueued, reused, done, failed: jobs (distinct (content, recipe) pairs).
    dropped: enqueued jobs no asset needs any more (every asset that wanted one was
        overwritten or deleted before it ran): ended, not rendered.
    assets_scanned: asset items the scan read.
    later: assets waiting to be looked at again (content not known when scanned).
    """

    total: int = 0
    enqueued: int = 0
    reused: int = 0
    done: int = 0
    failed: int = 0
    dropped: int = 0
    assets_scanned: int = 0
    later: int = 0

    @property
    def remaining(self) -> int:
        """Jobs found and not ended: ``total - done - reused - failed - dropped``."""
        return max(0, self.total - self.done - self.reused - self.failed - self.dropped)


@dataclass(frozen=True)
class Backfill:
    """A backfill as stored.

    Attributes
    ----------
    id: :func:`backfill_id`.
    change: :func:`change_of` of what it rolls out.
    generation: 1 for a change's first backfill, one more for each started after a cancel.
    state: a :class:`BackfillState`.
    active: the recipe set it rolls out, by media type (references, in order).
    policy_version: the policy version it rolls out.
    segments: how many parallel scan segments.
    created_at_s, updated_at_s: Unix time, seconds.
    finished_at_s: when it became ``done`` or ``cancelled`` (0 before).
    counts: its :class:`Counts`.
    scanned: segments whose scan reached the table's end, over both passes.
    """

    id: str
    change: str
    generation: int
    state: BackfillState
    active: Mapping[str, tuple[str, ...]]
    policy_version: str
    segments: int
    created_at_s: int
    updated_at_s: int = 0
    finished_at_s: int = 0
    counts: Counts = field(default_factory=Counts)
    scanned: int = 0

    @property
    def first_pass_over(self) -> bool:
        """Whether every segment of the first pass reached the end of the table."""
        return self.scanned >= self.segments

    @property
    def scan_over(self) -> bool:
        """Whether every segment of every pass reached the end of the table."""
        return self.scanned >= self.segments * PASSES

    def finished(self) -> bool:
        """Whether a ``running`` backfill is done: the scan is over, no asset is left to look
        at again, and no job remains."""
        return self.scan_over and self.counts.later == 0 and self.counts.remaining == 0


def document(backfill: Backfill, *, now_s: float) -> dict[str, Any]:
    """The JSON ``GET <StatusUrl>backfills/<id>`` and ``mediajobs backfill status --json``
    answer with.

    Shape::

        {"id": str, "state": "running|paused|done|cancelled", "change": str,
         "active": {media: [recipe]}, "policy_version": str,
         "total": int, "enqueued": int, "done": int, "reused": int, "failed": int,
         "dropped": int, "remaining": int, "assets_scanned": int, "later": int,
         "segments": int, "passes": int, "segments_scanned": int,
         "rate_per_s": float, "eta_s": float|None,
         "created_at_s": int, "updated_at_s": int, "finished_at_s": int}

    ``rate_per_s`` is jobs ended (done, reused, failed) per second since the backfill was
    created (until it finished); ``eta_s`` is ``remaining / rate_per_s`` (``None`` with no
    rate yet, 0 once finished). While the scan runs, ``total`` counts the jobs found so
    far, so the ETA is for those.
    """
    c = backfill.counts
    end_s = backfill.finished_at_s or now_s
    elapsed = max(1e-9, end_s - backfill.created_at_s)
    ended = c.done + c.reused + c.failed + c.dropped
    rate = ended / elapsed if ended else 0.0
    eta: float | None
    if backfill.state in (BackfillState.DONE, BackfillState.CANCELLED):
        eta = 0.0
    else:
        eta = round(c.remaining / rate, 1) if rate > 0 else None
    return {
        "id": backfill.id,
        "state": str(backfill.state),
        "change": backfill.change,
        "active": {m: list(refs) for m, refs in backfill.active.items()},
        "policy_version": backfill.policy_version,
        "total": c.total,
        "enqueued": c.enqueued,
        "done": c.done,
        "reused": c.reused,
        "failed": c.failed,
        "dropped": c.dropped,
        "remaining": c.remaining,
        "assets_scanned": c.assets_scanned,
        "later": c.later,
        "segments": backfill.segments,
        "passes": PASSES,
        "segments_scanned": backfill.scanned,
        "rate_per_s": round(rate, 3),
        "eta_s": eta,
        "created_at_s": backfill.created_at_s,
        "updated_at_s": backfill.updated_at_s,
        "finished_at_s": backfill.finished_at_s,
    }
