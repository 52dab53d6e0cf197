"""Review: a person decides an asset its moderation policy held for review.

The order of operations (``docs/moderation.md``, "Review"):

1. Find the asset's moderation job held ``review`` (the asset's job in state ``review``).
2. Write the decision on the job's row, conditional on it still being ``review``
   (:meth:`~mediajobs.service_layer.ports.Ledger.review`): ``requested`` again, with
   ``{"outcome", "by", "at_s"}``. One decision lands; a second finds it decided.
3. Send the job's request. The worker's run of it commits the decision (accepted: the
   renditions waiting for it are requested, the asset ends ``ready``) or fails the job
   ``rejected`` (the asset ends ``rejected`` and is told ``Asset Rejected``).

A request lost between 2 and 3 is sent again by deciding again: the row is ``requested``
with the same person's decision, which :meth:`Reviews.decide` sends again, writing nothing.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mediajobs.domain.assets import AssetJobState
from mediajobs.domain.jobs import JobState
from mediajobs.domain.moderation import ACCEPTED, REJECTED
from mediajobs.service_layer.ports import Assets, Ledger
from mediajobs.service_layer.requests import JobRequests

log = logging.getLogger(__name__)

#: The outcomes a person can give.
OUTCOMES: Final = (ACCEPTED, REJECTED)


class ReviewState(enum.StrEnum):
    """What a review request came to."""

    DECIDED = "decided"  #: the decision is written and the job requested
    ALREADY = "already_decided"  #: a decision was made before (this one changed nothing)
    NOT_HELD = "not_held"  #: the asset has no moderation job held for review
    UNKNOWN = "unknown"  #: no asset for the key


@dataclass(frozen=True)
class ReviewAnswer:
    """The answer to one review request.

    Attributes
    ----------
    state: a :class:`ReviewState`.
    key: the original's key.
    job_key: the moderation job's key, when one was found.
    outcome, by: the decision on record (this request's, or the earlier one's).
    asset_state: the asset's state when read.
    """

    state: ReviewState
    key: str
    job_key: str | None = None
    outcome: str | None = None
    by: str | None = None
    asset_state: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON a caller gets (``POST /review``, ``mediajobs review --json``)."""
        return {
            "state": str(self.state),
            "key": self.key,
            "job_key": self.job_key,
            "outcome": self.outcome,
            "by": self.by,
            "asset_state": self.asset_state,
        }


class Reviews:
    """Decide assets held for review (module docstring).

    Parameters
    ----------
    ledger: the job ledger.
    assets: the asset records.
    requests: sends the moderation job's request.
    bucket: the stack's bucket (the originals').
    clock: Unix time, seconds.
    """

    def __init__(
        self, ledger: Ledger, assets: Assets, requests: JobRequests, *, bucket: str, clock: Callable[[], float]
    ) -> None:
        self._ledger = ledger
        self._assets = assets
        self._requests = requests
        self._bucket = bucket
        self._clock = clock

    def decide(self, key: str, outcome: str, by: str) -> ReviewAnswer:
        """Record ``by``'s decision ``outcome`` (``accepted`` or ``rejected``) on the asset of
        the original ``key`` held for review, and request its moderation job.

        Raises
        ------
        ValueError
            ``outcome`` is not one of :data:`OUTCOMES`, or ``by`` is empty.
        TransientFailure
            DynamoDB or SQS failed (deciding again is safe).
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"a review decides {' or '.join(OUTCOMES)}, not {outcome!r}")
        if not by.strip():
            raise ValueError("a review names who decided")
        view = self._assets.get(self._bucket, key)
        if view is None:
            return ReviewAnswer(ReviewState.UNKNOWN, key)
        held = [job for job in view.jobs if job.state == AssetJobState.REVIEW]
        if not held:
            return self._earlier(key, view.state, [job.job_key for job in view.jobs])
        job_key = held[0].job_key
        who = by.strip()[:256]
        review = {"outcome": outcome, "by": who, "at_s": int(self._clock())}
        row = self._ledger.review(job_key, review, now_s=int(self._clock()))
        if row is None:  # decided meanwhile (or by an earlier request whose job request was lost)
            return self._earlier(key, view.state, [job_key])
        log.info("review decided", extra={"job_key": job_key, "source_key": key, "outcome": outcome})
        self._requests.request_one(job_key)
        return ReviewAnswer(ReviewState.DECIDED, key, job_key, outcome, who, str(view.state))

    def _earlier(self, key: str, asset_state: str, job_keys: list[str]) -> ReviewAnswer:
        """The answer for an asset whose job is not (or no longer) held: the decision made
        before, if one was -- its job's request sent again while it is still ``requested``
        (an earlier request lost after its write)."""
        for job_key in job_keys:
            row = self._ledger.get(job_key)
            if row is None or row.review is None:
                continue
            if row.state == JobState.REQUESTED:
                self._requests.request_one(job_key)
            return ReviewAnswer(
                ReviewState.ALREADY,
                key,
                job_key,
                str(row.review.get("outcome")),
                str(row.review.get("by")),
                str(asset_state),
            )
        return ReviewAnswer(ReviewState.NOT_HELD, key, asset_state=str(asset_state))
