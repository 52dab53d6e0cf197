"""Job states, claim outcomes and the results the pipeline reports. Pure data."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mediajobs.domain.errors import ATTEMPTS_EXHAUSTED, EMPTY_FILE, INPUT_BYTES, TOO_LARGE, in_bytes
from mediajobs.domain.keys import UNKEYED_ALGORITHM

if TYPE_CHECKING:
    from mediajobs.domain.parts import Part, Split


class JobState(enum.StrEnum):
    """States of a job row in the ledger.

    ``running`` -> ``done`` | ``permanent_failure`` | ``transient_failure``;
    ``transient_failure`` and an expired ``running`` lease can be taken over.
    ``done`` -> ``collecting`` (the collector holds a lease while it deletes the
    derivatives of a job nothing references) -> ``collected`` (gone; a new reference
    renders it again) or back to ``done`` (a reference came meanwhile). An expired
    ``collecting`` lease can be taken over by a render, which first deletes what is left
    under the prefix (:attr:`Claim.sweep`).

    A job with other jobs' outputs among its inputs starts ``waiting`` (its ``pending``
    inputs not done yet) and becomes ``requested`` when the last of them is
    (:func:`input_done`); a ``requested`` job is claimed like any other. A job whose input
    failed for good fails with that input's reason.

    A moderation job whose policy says ``review`` is held ``review`` (:func:`held_for_review`,
    its machine decision on the row) until a person decides (:func:`reviewed`): it is then
    ``requested`` again, with the person's decision on the row, and its next run commits
    that decision (accepted) or fails ``rejected``. The jobs waiting for it wait meanwhile.
    """

    WAITING = "waiting"
    REQUESTED = "requested"
    RUNNING = "running"
    DONE = "done"
    TRANSIENT_FAILURE = "transient_failure"
    PERMANENT_FAILURE = "permanent_failure"
    COLLECTING = "collecting"
    COLLECTED = "collected"
    REVIEW = "review"


class SourceState(enum.StrEnum):
    """Outcomes of one original in a delivery (:attr:`SourceResult.state`).

    ``done``: every job of it is committed (now or earlier); ``permanent_failure``: it, or
    one of its jobs, failed for good (the reason says why); ``ignored``: its key is
    outside ``originals/``; ``superseded``: a greater sequencer of its key is current (an
    older version's late event, or one deleted since): nothing was rendered or counted;
    ``deleted``: an ``Object Deleted`` event was applied to its asset; ``split``: a job of
    it was split into parts (a long video's segments and audio) that run as job requests,
    durably requested: the asset ends when the last of them and the join do; ``review``:
    its moderation job is held for a person's decision (the renditions wait for it);
    ``rejected``: the moderation policy (or a person) refused it, nothing was rendered.
    Busy and transient outcomes are raised, not returned.
    """

    DONE = "done"
    SPLIT = "split"
    REVIEW = "review"
    REJECTED = "rejected"
    PERMANENT_FAILURE = "permanent_failure"
    IGNORED = "ignored"
    SUPERSEDED = "superseded"
    DELETED = "deleted"


class ClaimOutcome(enum.StrEnum):
    """What a claim attempt found.

    * ``RUN``: this worker holds the claim and must do the work.
    * ``DONE``: the job is committed; reuse the stored outcome, do no work.
    * ``BUSY``: another worker holds an unexpired lease; come back later.
    * ``FAILED``: the job failed permanently; report the stored reason.
    * ``WAITING``: the job waits for its inputs (other jobs' outputs): it is claimed once
      they are done.
    * ``HELD``: a moderation job held for a person's review (its machine decision in
      ``decisions``): nothing runs until the review.
    """

    RUN = "run"
    DONE = "done"
    BUSY = "busy"
    FAILED = "failed"
    WAITING = "waiting"
    HELD = "held"


@dataclass(frozen=True)
class OutputRecord:
    """One committed derivative, as listed in the manifest.

    Attributes
    ----------
    name: variant name (``thumb``).
    key: S3 key (``derivatives/<job key>/thumb.webp``).
    format: encoder (``webp``).
    width, height: pixels.
    bytes: object size in bytes.
    sha256: SHA-256 hex of the object's bytes.
    content_type: MIME type.
    """

    name: str
    key: str
    format: str
    width: int
    height: int
    bytes: int
    sha256: str
    content_type: str

    def to_json(self) -> dict[str, Any]:
        """Plain dict for JSON (manifest and ledger)."""
        return {
            "name": self.name,
            "key": self.key,
            "format": self.format,
            "width": self.width,
            "height": self.height,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "content_type": self.content_type,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OutputRecord:
        """Inverse of :meth:`to_json`."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class OutputCandidate:
    """Bytes one holder of a job rendered for one output file, registered in the ledger
    before it writes them.

    The worker may not read derivatives back (its role has no ``s3:GetObject`` there), so
    when a conditional write finds the file already stored (412), the stored bytes are
    identified from the listing's ETag -- the MD5 of the bytes for a single-part upload
    to an SSE-S3 bucket (AWS S3 User Guide, "Checking object integrity") -- among the
    candidates every holder registered first.

    Attributes
    ----------
    file: file name under the job's prefix (``thumb.webp``).
    md5: MD5 hex of the bytes; sha256: SHA-256 hex; bytes: size in bytes.
    """

    file: str
    md5: str
    sha256: str
    bytes: int

    def encode(self) -> str:
        """One string for a DynamoDB string set: ``file md5 sha256 bytes``, space-separated
        (file names are the recipe's ``<name>.<ext>``, which hold no space)."""
        return f"{self.file} {self.md5} {self.sha256} {self.bytes}"

    @classmethod
    def decode(cls, text: str) -> OutputCandidate:
        """Inverse of :meth:`encode`.

        Raises
        ------
        ValueError
            If ``text`` is not four space-separated fields with a whole size.
        """
        file, md5, sha256, size = text.split(" ")
        return cls(file, md5, sha256, int(size))


def identify_stored(
    own: OutputCandidate, etag: str | None, registered: frozenset[OutputCandidate]
) -> OutputCandidate | None:
    """Which bytes a file already stored under the job's prefix holds, or ``None``.

    Parameters
    ----------
    own: what this holder rendered for the file.
    etag: the stored object's ETag from the listing (quotes allowed), ``None`` if unlisted.
    registered: every candidate the job's holders registered, ``own`` included. A holder
        registers before writing, and a takeover is fenced on the previous token, so no
        bytes can be stored under the prefix that are not among them.

    The ETag is this holder's MD5, or another candidate's for the same file; anything
    else (an ETag that is no MD5, as with SSE-KMS; bytes some other writer stored) is
    ``None``: never guessed, since renders of one job can differ (AVIF and x264 output
    depends on the CPU count).
    """
    tag = etag.strip('"') if etag else None
    if tag is None:
        return None
    if tag == own.md5:
        return own
    return next((c for c in registered if c.file == own.file and c.md5 == tag), None)


@dataclass(frozen=True)
class Claim:
    """Result of a claim attempt.

    Attributes
    ----------
    outcome: see :class:`ClaimOutcome`.
    job_key: 64 hex characters.
    lease_token: this worker's fencing token when ``outcome`` is ``RUN``, else ``None``.
    lease_expires_at_s: Unix epoch seconds when the current lease ends.
    attempts: how many times the job has been claimed, this claim included.
    failure_reason: stored reason when ``outcome`` is ``FAILED``; failure_detail: its words.
    manifest_key: stored manifest key when ``outcome`` is ``DONE``.
    outputs: stored outputs when ``outcome`` is ``DONE``.
    took_over: whether this claim replaced an expired lease or a transient failure.
    failed_now: whether this claim itself ended the job (``attempts_exhausted``).
    staged_manifest: on a takeover, the manifest body (JSON) a lost holder staged in the
        ledger before writing it: the set is adopted, not rendered again.
    decisions: the committed manifest's ``decisions`` when ``outcome`` is ``DONE`` (the
        placeholder recipe's hash is there).
    sweep: this claim took over an interrupted collection: whatever is left under the
        job's prefix (perhaps its old manifest) is deleted before the render.
    split: what the job was split into, when it was (its run joins the parts).
    review: a person's decision on a moderation job held for review
        (``{"outcome": "accepted"|"rejected", "by": ..., "at_s": ...}``): its run commits it
        (with the machine's decision held, in ``decisions``) instead of moderating again.
    prior: the state the row was in when the claim found it (``None``: no row yet).
    """

    outcome: ClaimOutcome
    job_key: str
    lease_token: str | None = None
    lease_expires_at_s: int = 0
    attempts: int = 0
    failure_reason: str | None = None
    failure_detail: str | None = None
    manifest_key: str | None = None
    outputs: tuple[OutputRecord, ...] = ()
    took_over: bool = False
    failed_now: bool = False
    staged_manifest: str | None = None
    decisions: Mapping[str, Any] | None = None
    sweep: bool = False
    split: Split | None = None
    review: Mapping[str, Any] | None = None
    prior: str | None = None


class Decision(enum.StrEnum):
    """What a claim must do with a job row it found (see :func:`decide`)."""

    DONE = "done"
    FAILED = "failed"
    BUSY = "busy"
    WAIT = "wait"
    TAKE_OVER = "take_over"
    EXHAUST = "exhaust"
    HELD = "held"


@dataclass(frozen=True)
class ContentInput:
    """A job's input that is an original's content: the SHA-256 (hex) of its bytes."""

    sha256: str

    def identity(self) -> dict[str, str]:
        """What the job key hashes of it (:func:`~mediajobs.domain.keys.inputs_job_key`)."""
        return {"sha256": self.sha256}


#: The output name an :class:`OutputInput` gives to take another job's manifest
#: ``decisions`` (a moderation job's decision: it writes no file) rather than a file: the
#: step finds them as a JSON file.
DECISIONS_OUTPUT: Final = "decisions"


@dataclass(frozen=True)
class OutputInput:
    """A job's input that is another job's named output (``output``: a variant or rendition
    name, as the manifest lists it, or :data:`DECISIONS_OUTPUT` for its decisions)."""

    job_key: str
    output: str

    def identity(self) -> dict[str, str]:
        """What the job key hashes of it (:func:`~mediajobs.domain.keys.inputs_job_key`)."""
        return {"job_key": self.job_key, "output": self.output}


JobInput = ContentInput | OutputInput


def input_of(identity: Mapping[str, str]) -> JobInput:
    """The input an identity names (the inverse of ``identity()``).

    Raises
    ------
    ValueError
        If ``identity`` is neither ``{"sha256"}`` nor ``{"job_key", "output"}``.
    """
    if set(identity) == {"sha256"}:
        return ContentInput(identity["sha256"])
    if set(identity) == {"job_key", "output"}:
        return OutputInput(identity["job_key"], identity["output"])
    raise ValueError(f"not a job input: {dict(identity)!r}")


@dataclass(frozen=True)
class JobView:
    """A job row as read from the ledger.

    Attributes
    ----------
    job_key: 64 hex characters.
    state: a :class:`JobState` value.
    lease_token: the current (or last) holder's fencing token.
    lease_expires_at_s: Unix epoch seconds when the holder's lease ends.
    attempts: claims so far (first claim and takeovers).
    recipe_id: the recipe the job applies (tells the media type of the input).
    manifest_key, outputs: the committed result when ``state`` is ``done``.
    failure_reason, failure_detail: the stored failure, if any.
    staged_manifest: the manifest body a holder staged before writing it, while the job
        is not finished.
    decisions: the committed manifest's ``decisions`` when ``done``.
    collected_at_s: when the collector deleted the job's prefix (a ``collected`` job, or a
        failed one whose manifest-less outputs were swept), Unix seconds; else ``None``.
    source_bucket: the bucket of the first original seen with these bytes, where the
        job's derivatives are (``None`` when unknown).
    output_prefix: ``derivatives/<job key>/`` as the row records it (``None`` when unknown).
    waiting: the jobs that wait for this one's outputs and have not been told it ended.
    pending: the inputs (job keys) a ``waiting`` job still waits for.
    spec: what the job is, as recorded when it was first written (``None`` for a row
        written before specs were read back: then only a planned job can run it).
    split: what the job was split into (:class:`~mediajobs.domain.parts.Split`), once it
        was: its run joins the parts' outputs.
    review: a person's decision on a moderation job once one was made (:func:`reviewed`).
    provenance: once ``done``, what its manifest came from -- the original (bucket, key,
        version, SHA-256, size) and each named input's asset -- which the public
        ``manifest.json`` never shows (:mod:`mediajobs.domain.manifest`); ``None`` for a row
        committed before it was kept.
    """

    job_key: str
    state: str
    lease_token: str | None
    lease_expires_at_s: int
    attempts: int
    recipe_id: str = ""
    manifest_key: str | None = None
    outputs: tuple[OutputRecord, ...] = ()
    failure_reason: str | None = None
    failure_detail: str | None = None
    staged_manifest: str | None = None
    decisions: Mapping[str, Any] | None = None
    collected_at_s: int | None = None
    source_bucket: str | None = None
    output_prefix: str | None = None
    waiting: frozenset[str] = frozenset()
    pending: frozenset[str] = frozenset()
    spec: JobSpec | None = None
    split: Split | None = None
    review: Mapping[str, Any] | None = None
    provenance: Mapping[str, Any] | None = None


def decide(view: JobView, *, now_s: int, max_attempts: int) -> Decision:
    """What a claim should do with an existing job row. Pure.

    ``done`` and ``permanent_failure`` are final. A ``running`` row whose lease has not
    expired is busy; a ``waiting`` one waits for its inputs. A ``requested`` row (its
    inputs done, never claimed), a ``transient_failure`` or an expired lease can be taken
    over -- unless ``max_attempts`` claims were already made, in which case the job ends
    ``attempts_exhausted`` (the cap lives in the ledger, across every message that names
    the job, so duplicates cannot multiply the retries) -- unless a holder staged the
    manifest: then every output is stored and the manifest may be written already, so the
    job is taken over to commit it (no render), never failed.

    A ``collecting`` row is busy while the collector's lease runs, and taken over (to
    render afresh, its attempts counted from zero) once it has expired; a ``collected``
    row is taken over the same way. A ``review`` row is held for a person: nothing runs it.
    """
    if view.state == JobState.DONE:
        return Decision.DONE
    if view.state == JobState.REVIEW:
        return Decision.HELD
    if view.state == JobState.PERMANENT_FAILURE:
        return Decision.FAILED
    if view.state == JobState.WAITING:
        return Decision.WAIT
    if view.state == JobState.COLLECTING:
        return Decision.BUSY if view.lease_expires_at_s > now_s else Decision.TAKE_OVER
    if view.state == JobState.COLLECTED:
        return Decision.TAKE_OVER
    if view.state == JobState.RUNNING and view.lease_expires_at_s > now_s:
        return Decision.BUSY
    if view.attempts >= max_attempts and view.staged_manifest is None:
        return Decision.EXHAUST
    return Decision.TAKE_OVER


def standing_claim(view: JobView) -> Claim:
    """The claim outcome a row stands for when it is not taken over: ``DONE`` with its
    outputs, ``FAILED`` with its reason, ``WAITING`` for its inputs (or its parts, with the
    split), or ``BUSY`` until its lease ends. Pure."""
    if view.state == JobState.DONE:
        return Claim(
            ClaimOutcome.DONE,
            view.job_key,
            manifest_key=view.manifest_key,
            outputs=view.outputs,
            decisions=view.decisions,
            prior=view.state,
        )
    if view.state == JobState.PERMANENT_FAILURE:
        return Claim(
            ClaimOutcome.FAILED,
            view.job_key,
            failure_reason=view.failure_reason,
            failure_detail=view.failure_detail,
            prior=view.state,
        )
    if view.state == JobState.WAITING:
        return Claim(
            ClaimOutcome.WAITING,
            view.job_key,
            lease_expires_at_s=view.lease_expires_at_s,
            split=view.split,
            prior=view.state,
        )
    if view.state == JobState.REVIEW:
        return Claim(ClaimOutcome.HELD, view.job_key, decisions=view.decisions, prior=view.state)
    return Claim(ClaimOutcome.BUSY, view.job_key, lease_expires_at_s=view.lease_expires_at_s, prior=view.state)


# -- Row transitions: what each write of a job row changes, decided here once -------------
#
# The ledger (``adapters/ledger.py``) writes these changes with a DynamoDB condition, the
# fake ledger (``tests/fakes.py``) applies them to a dict; neither decides anything.
# A change maps a row field to its new value, ``None`` removing it.

#: A row's changes: field name -> new value (``None``: removed).
Changes = dict[str, Any]

#: The fields a job's row keeps only while it runs (what its holders are about to write).
_WHILE_RUNNING: Final = ("output_candidates", "staged_manifest")


@dataclass(frozen=True)
class Fence:
    """What a row looked like when read: a write fenced on it lands only if no other write
    changed any of these since (a takeover, a renewal, a staged manifest), so the decision
    taken on the read row (:func:`decide`, :func:`collectable`) still holds.

    Attributes
    ----------
    state, lease_token, lease_expires_at_s, attempts: as read (``lease_token`` ``None``:
        the row has none).
    staged: whether a manifest was staged.
    """

    state: str
    lease_token: str | None
    lease_expires_at_s: int
    attempts: int
    staged: bool

    @classmethod
    def of(cls, seen: JobView) -> Fence:
        """The fence of the row ``seen``."""
        return cls(
            str(seen.state), seen.lease_token, seen.lease_expires_at_s, seen.attempts, seen.staged_manifest is not None
        )

    def holds(self, view: JobView) -> bool:
        """Whether ``view`` is still the row this fence was taken of."""
        return self == Fence.of(view)


#: The states a holder's writes require, by what it holds: a render's claim (``running``)
#: or a collection (``collecting``); its lease renewals take either.
HELD_RENDERING: Final = frozenset({JobState.RUNNING})
HELD_COLLECTING: Final = frozenset({JobState.COLLECTING})
HELD_ANY: Final = HELD_RENDERING | HELD_COLLECTING


def holds(view: JobView, token: str, states: frozenset[JobState]) -> bool:
    """Whether the holder of ``token`` still holds the row: its token, in one of ``states``."""
    return view.lease_token == token and view.state in states


def new_row(spec: JobSpec, *, token: str | None, lease_until_s: int, now_s: int, pending: frozenset[str]) -> Changes:
    """The row a job is first written as: ``running`` under ``token`` (a claim, attempt 1),
    or, with ``token`` ``None``, ``waiting`` for ``pending`` (``requested`` when none)."""
    state = JobState.RUNNING if token is not None else (JobState.WAITING if pending else JobState.REQUESTED)
    return {
        "state": str(state),
        "lease_token": token,
        "lease_expires_at_s": lease_until_s if token is not None else 0,
        "attempts": 1 if token is not None else 0,
        "pending": frozenset(pending) or None,
        "created_at_s": now_s,
        "updated_at_s": now_s,
    }


def taken_over(
    seen: JobView, decision: Decision, token: str, *, lease_until_s: int, now_s: int
) -> tuple[Changes, Claim]:
    """What acting on ``decision`` for the row ``seen`` writes (fenced on
    :meth:`Fence.of` ``seen``), and the claim it gives.

    * ``TAKE_OVER`` of a ``collecting`` or ``collected`` row: attempt 1 of a fresh render
      under ``token``, the old result forgotten; from ``collecting`` the claim sweeps
      what is left under the prefix (:attr:`Claim.sweep`).
    * ``TAKE_OVER`` otherwise (``requested``, ``transient_failure``, an expired lease): one
      more attempt under ``token``; a staged manifest is to be adopted.
    * ``EXHAUST``: the job ends ``attempts_exhausted``.

    Raises
    ------
    ValueError
        For any other decision: a final, busy or waiting row is never written.
    """
    if decision is Decision.EXHAUST:
        detail = f"{seen.attempts} attempts; last: {seen.failure_detail or 'lease expired (worker lost)'}"[:1000]
        changes = {**failed(ATTEMPTS_EXHAUSTED, detail, now_s)}
        return changes, Claim(
            ClaimOutcome.FAILED,
            seen.job_key,
            failure_reason=ATTEMPTS_EXHAUSTED,
            failure_detail=detail,
            failed_now=True,
            prior=seen.state,
        )
    if decision is not Decision.TAKE_OVER:
        raise ValueError(f"no write for {decision}")
    held = {"state": str(JobState.RUNNING), "lease_token": token, "lease_expires_at_s": lease_until_s}
    if seen.state in (JobState.COLLECTING, JobState.COLLECTED):
        # A split job rendered again splits again: its parts were collected after its join.
        forgotten = (
            "manifest_key",
            "outputs",
            "decisions",
            "finished_at_s",
            "collected_at_s",
            "split",
            *_WHILE_RUNNING,
        )
        changes = {**held, "attempts": 1, "updated_at_s": now_s, **dict.fromkeys(forgotten)}
        claim = Claim(
            ClaimOutcome.RUN,
            seen.job_key,
            lease_token=token,
            lease_expires_at_s=lease_until_s,
            attempts=1,
            took_over=True,
            sweep=seen.state == JobState.COLLECTING,
            review=seen.review,  # a person's decision stands for the content and policy
            prior=seen.state,
        )
        return changes, claim
    changes = {**held, "attempts": seen.attempts + 1, "updated_at_s": now_s}
    return changes, Claim(
        ClaimOutcome.RUN,
        seen.job_key,
        lease_token=token,
        lease_expires_at_s=lease_until_s,
        attempts=seen.attempts + 1,
        took_over=seen.state != JobState.REQUESTED,
        staged_manifest=seen.staged_manifest,
        split=seen.split,
        review=seen.review,
        decisions=seen.decisions if seen.review is not None else None,  # the machine's, held
        prior=seen.state,
    )


def completed(
    manifest_key: str,
    outputs: Sequence[OutputRecord],
    decisions: Mapping[str, Any] | None,
    now_s: int,
    provenance: Mapping[str, Any] | None = None,
) -> Changes:
    """A held job committed: ``done`` with its manifest, outputs, decisions and the
    manifest's provenance (:mod:`mediajobs.domain.manifest`: kept in the row, never public)."""
    return {
        "state": str(JobState.DONE),
        "manifest_key": manifest_key,
        "outputs": tuple(outputs),
        "decisions": dict(decisions or {}),
        **({"provenance": dict(provenance)} if provenance is not None else {}),
        "updated_at_s": now_s,
        "finished_at_s": now_s,
        **dict.fromkeys(_WHILE_RUNNING),
    }


def failed(reason: str, detail: str, now_s: int, decisions: Mapping[str, Any] | None = None) -> Changes:
    """A job failed for good with ``reason`` (a reason code) and ``detail`` (at most 1,000
    characters are kept); ``decisions``, when given, are kept on the row (a moderation
    job's decision that rejected its content)."""
    changes: Changes = {
        "state": str(JobState.PERMANENT_FAILURE),
        "failure_reason": reason,
        "failure_detail": detail[:1000] or reason,
        "updated_at_s": now_s,
        "finished_at_s": now_s,
        **dict.fromkeys(_WHILE_RUNNING),
    }
    if decisions is not None:
        changes["decisions"] = dict(decisions)
    return changes


class InputsPending(Exception):  # noqa: N818 -- a signal, not an error
    """Raised instead of running a held job whose inputs are not all done: a job taken over
    from collection whose input (its moderation job, rendered again) is held for review,
    or runs elsewhere. The job waits for them again (:func:`waiting_again`)."""

    def __init__(self, pending: frozenset[str]) -> None:
        super().__init__(f"waits for {len(pending)} input(s)")
        self.pending = pending


def waiting_again(pending: frozenset[str], now_s: int) -> Changes:
    """A held job whose inputs are not all done goes back to ``waiting`` for ``pending``,
    its lease given up (its inputs' ends request it, as for a job first written waiting)."""
    return {
        "state": str(JobState.WAITING),
        "pending": frozenset(pending),
        "lease_expires_at_s": 0,
        "updated_at_s": now_s,
        **dict.fromkeys(_WHILE_RUNNING),
    }


def held_for_review(decisions: Mapping[str, Any], now_s: int) -> Changes:
    """A held moderation job whose policy said ``review``: ``review`` with its machine
    decision (``decisions``), its lease given up; nothing runs it until :func:`reviewed`."""
    return {
        "state": str(JobState.REVIEW),
        "decisions": dict(decisions),
        "lease_expires_at_s": 0,
        "updated_at_s": now_s,
        **dict.fromkeys(_WHILE_RUNNING),
    }


def reviewed(review: Mapping[str, Any], now_s: int) -> Changes:
    """A person decided a job held ``review`` (written conditional on the row still being
    ``review``: one decision lands): ``requested`` again, the decision on the row, so that
    its next run commits it (:attr:`Claim.review`), its attempts counted afresh -- the
    claims the machine's moderation took are not the person's decision's to pay for."""
    return {"state": str(JobState.REQUESTED), "review": dict(review), "attempts": 0, "updated_at_s": now_s}


def released(detail: str, now_s: int) -> Changes:
    """A holder gave its claim back after a transient failure (the token stays: the next
    claim's takeover is fenced on it)."""
    state = str(JobState.TRANSIENT_FAILURE)
    return {"state": state, "failure_detail": detail[:1000] or "transient", "updated_at_s": now_s}


def renewed(lease_until_s: int, now_s: int) -> Changes:
    """A holder extended its lease to ``lease_until_s``."""
    return {"lease_expires_at_s": lease_until_s, "updated_at_s": now_s}


def collectable(view: JobView, *, now_s: int) -> bool:
    """Whether a collection may take the row: ``done``, a ``collecting`` one whose
    collector's lease ran out (to finish it), an abandoned render (``transient_failure``,
    or ``running`` with its lease run out: nothing references it, so no delivery will finish
    it, and its prefix may hold outputs without a manifest), or a job that waits for what
    nothing will bring now that nothing references it: one held for review, one waiting for
    its inputs (not a split video's, whose parts end it). Such a row holds no output."""
    if view.state in (JobState.DONE, JobState.TRANSIENT_FAILURE, JobState.REVIEW):
        return True
    if view.state == JobState.WAITING:
        return view.split is None
    return view.state in (JobState.COLLECTING, JobState.RUNNING) and view.lease_expires_at_s <= now_s


def collecting(token: str, *, lease_until_s: int, now_s: int) -> Changes:
    """A collector holds the row under ``token`` until ``lease_until_s``."""
    return {
        "state": str(JobState.COLLECTING),
        "lease_token": token,
        "lease_expires_at_s": lease_until_s,
        "updated_at_s": now_s,
    }


def collection_ended(*, collected: bool, now_s: int) -> Changes:
    """A collection ended: ``collected`` (the manifest, outputs and decisions forgotten) or
    back to ``done`` with its result as it was."""
    if not collected:
        return {"state": str(JobState.DONE), "updated_at_s": now_s}
    gone = dict.fromkeys(("manifest_key", "outputs", "decisions"))
    return {"state": str(JobState.COLLECTED), "collected_at_s": now_s, "updated_at_s": now_s, **gone}


def ready(view: JobView) -> bool:
    """Whether a ``waiting`` job has no input left to wait for: it may become ``requested``
    (:func:`requested`), once, by whichever writer sees it so first."""
    return view.state == JobState.WAITING and not view.pending


def requested(now_s: int) -> Changes:
    """A waiting job whose inputs are all done is requested (written conditional on still
    ``waiting`` with nothing pending: exactly one writer makes it)."""
    return {"state": str(JobState.REQUESTED), "updated_at_s": now_s}


#: The states of a job that waits for its inputs, or was requested once they were done:
#: an input that fails for good fails it (:func:`input_failed`).
AWAITING: Final = frozenset({JobState.WAITING, JobState.REQUESTED})


def input_failed(input_key: str, reason: str | None, detail: str | None, now_s: int) -> Changes:
    """What a job still :data:`AWAITING` its input ``input_key`` becomes when that input
    failed for good: failed with the input's reason (nothing can render it)."""
    because = f"input job {input_key[:12]} failed: {reason}: {detail or ''}".strip()
    return failed(reason or ATTEMPTS_EXHAUSTED, because, now_s)


@dataclass(frozen=True)
class Delivery:
    """The SQS delivery a record came with, and the invocation's clock.

    Attributes
    ----------
    queue_arn: ARN of the source queue (``eventSourceARN``).
    receipt_handle: handle of this receive of the message.
    receive_count: ``ApproximateReceiveCount`` (1 on the first delivery).
    remaining_s: seconds left before Lambda stops the invocation (from the context's
        ``get_remaining_time_in_millis``).
    correlation: what the decision log correlates its records by: the S3 event's request
        id, or ``job:<key prefix>`` for a job request (``""``: unknown).
    """

    queue_arn: str
    receipt_handle: str
    receive_count: int
    remaining_s: Callable[[], float]
    correlation: str = ""


@dataclass(frozen=True)
class ObjectHead:
    """What ``HeadObject`` says of an object version, read before any byte of it.

    Attributes
    ----------
    version_id: S3 version id (``None`` when versioning is off).
    etag: ETag without quotes.
    size_bytes: object size in bytes.
    sha256: hex SHA-256 of the whole object when it carries a full-object SHA-256
        checksum, else ``None`` (composite multipart checksums are not a content hash).
    """

    version_id: str | None
    etag: str
    size_bytes: int
    sha256: str | None


@dataclass(frozen=True)
class KnownSource:
    """What the source index remembers of a content: its hash, size and media type.

    ``media`` is ``""`` for content no recipe applies to; ``None`` while it is unknown.
    """

    sha256: str
    size_bytes: int
    media: str | None


@dataclass(frozen=True)
class Reading:
    """A source index entry: a delivery is reading this source (or content); its lease
    ends at ``lease_expires_at_s`` (Unix epoch seconds), and ``lease_token`` fences its
    takeover once it has (``None``: a row that names no token)."""

    lease_expires_at_s: int
    lease_token: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """What a job is: its key and what the key was derived from, recorded on the ledger
    row when the job is first written (a ``requested`` job is run from it).

    Attributes
    ----------
    job_key: 64 hex characters (:func:`~mediajobs.domain.keys.inputs_job_key` of
        ``inputs``, the recipe and the policy version).
    input_sha256: SHA-256 hex of the original's bytes the job derives from (for a job with
        other jobs' outputs as inputs, the original their plan started from).
    recipe_id, recipe_version, recipe_sha256: the recipe.
    policy_version: moderation policy version.
    output_prefix: ``derivatives/<job key>/``.
    source_bucket, source_key: the first original seen with these bytes (not identity):
        where the job's content input is read, and the bucket of its derivatives.
    inputs: the job's named inputs (``{"original": ContentInput(input_sha256)}`` for a
        recipe that declares none).
    waiting: the job keys of the jobs that wait for this one's outputs.
    part: for one part of a split job (a long video's segment or audio), which part and
        its range (:class:`~mediajobs.domain.parts.Part`); its key is then
        :func:`~mediajobs.domain.keys.part_job_key` of the content and the part's identity.
    about: what named inputs came from, by input name, **not identity** (the key never
        hashes it): an album's input names its asset's key (:mod:`mediajobs.domain.promo`),
        which its manifest's provenance lists. Empty for every other job.
    key_algorithm: the key algorithm the key was derived with
        (:class:`~mediajobs.domain.keys.KeyScheme`): a part's key, and its parent's found
        from it, are derived under the parent's, whatever the worker's is (a key rollout
        while a video is split). ``1`` for a row written before it was recorded.
    """

    job_key: str
    input_sha256: str
    recipe_id: str
    recipe_version: int
    recipe_sha256: str
    policy_version: str
    output_prefix: str
    source_bucket: str
    source_key: str
    inputs: Mapping[str, JobInput] = field(default_factory=dict)
    waiting: frozenset[str] = frozenset()
    part: Part | None = None
    about: Mapping[str, str] = field(default_factory=dict)
    key_algorithm: int = UNKEYED_ALGORITHM

    @property
    def recipe_ref(self) -> str:
        """``"<id>@<version>"``."""
        return f"{self.recipe_id}@{self.recipe_version}"

    @property
    def upstream(self) -> frozenset[str]:
        """The job keys whose outputs are among the inputs."""
        return frozenset(i.job_key for i in self.inputs.values() if isinstance(i, OutputInput))


@dataclass(frozen=True)
class JobRequest:
    """A request to run one job that no S3 event causes (its inputs ended, a backfill):
    the job named by its key, run from its ledger row."""

    job_key: str


@dataclass(frozen=True)
class ObjectRef:
    """An S3 object version named by an event.

    Attributes
    ----------
    bucket, key: where it is (an event's key URL-decoded: see
        :func:`mediajobs.domain.keys.event_key_candidates`).
    version_id: S3 version id, or ``None`` when versioning is off.
    size_bytes: size announced by the event (``None`` if unknown).
    etag: ETag announced by the event (may be empty).
    raw_key: the key as the event spelled it, when that differs from ``key``: the object
        it names is used only when ``key`` names none. ``None`` otherwise.
    sequencer: the event's ``sequencer`` as sent (orders the events of one key:
        :func:`mediajobs.domain.assets.sequencer_order`), ``None`` when it has none.
    """

    bucket: str
    key: str
    version_id: str | None = None
    size_bytes: int | None = None
    etag: str = ""
    raw_key: str | None = None
    sequencer: str | None = None


@dataclass
class JobResult:
    """Outcome of one (original, recipe) job in this delivery.

    ``reused`` is true when this delivery found the job already committed (or already
    failed permanently) and did no work. ``row``: the job's row as this delivery's end of
    it stored it (its ``waiting`` jobs are then told), ``None`` when it ended nothing.
    ``cpu_s``: CPU seconds its work spent here (the worker's process, its reaped children
    and the bounded render child's report); ``bytes_in``: bytes of input it read (the
    original's size, or its first input's).
    """

    recipe: str
    job_key: str
    state: JobState
    reused: bool
    reason: str | None = None
    detail: str = ""
    manifest_key: str | None = None
    outputs: tuple[OutputRecord, ...] = ()
    seconds: float = 0.0
    decisions: Mapping[str, Any] | None = None
    row: JobView | None = None
    cpu_s: float | None = None
    bytes_in: int = 0


@dataclass
class SourceResult:
    """Outcome of one event's original in this delivery.

    Attributes
    ----------
    source: the object.
    state: a :class:`SourceState` (``done``, ``permanent_failure`` or ``ignored``).
    media: ``image``, ``video`` or ``None`` when the type is unknown.
    sha256: SHA-256 hex of the original's bytes, when read.
    size_bytes: bytes read.
    reason: the failure's reason code, when ``state`` is ``permanent_failure``.
    jobs: one entry per recipe applied.
    bytes_read: bytes of the original read from S3 by this delivery (0 when the
        duplicate was recognised without reading it).
    """

    source: ObjectRef
    state: SourceState
    media: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None
    reason: str | None = None
    detail: str = ""
    jobs: list[JobResult] = field(default_factory=list)
    bytes_read: int = 0


@dataclass(frozen=True)
class Downloaded:
    """An original copied to the work folder: its SHA-256 (hex), size in bytes and S3 version id."""

    sha256: str
    size_bytes: int
    version_id: str | None


@dataclass(frozen=True)
class RenderedFile:
    """One encoded variant in the work folder.

    Attributes
    ----------
    name: variant name; format: encoder; path: the file; width, height: pixels;
    bytes: file size; sha256: hex digest of the file; content_type: MIME type.
    """

    name: str
    format: str
    path: Path
    width: int
    height: int
    bytes: int
    sha256: str
    content_type: str


def _no_progress(names: tuple[str, ...], done_s: float, total_s: float) -> None:
    """Default progress sink: ignore."""


def _no_check() -> None:
    """Default lease check: nothing to find."""


def _no_deadline() -> float | None:
    """Default remaining time: no invocation deadline (local runs)."""
    return None


@dataclass(frozen=True)
class RenderContext:
    """What a long-running renderer may ask of the job it renders for.

    Attributes
    ----------
    check: raises what the lease's heartbeat found (``Superseded``, ``DeadlineReached``,
        ``DeliveryLost``); call it often, and stop when it raises.
    remaining_s: seconds left in the invocation, or ``None`` without a deadline.
    progress: called with (output names, seconds of output written, total seconds).
    inputs: the job's inputs as files, by input name (the original is also the step's
        ``source``); a step that takes other jobs' outputs reads them here. A split job's
        join also finds its parts' outputs here, named ``"<part index>/<output name>"``.
    part: the part this job renders, for a part of a split job (else ``None``).
    split: what this job was split into, when its parts are done and it joins them; for a
        part, what its parent was split into (the parent's probe is there).
    source_url: when the original is read where it is, by byte ranges, rather than copied:
        a presigned URL of its version (the step's ``source`` then names no file).
    content_sha256: SHA-256 hex of the original's bytes the job derives from (a moderation
        policy's exact-hash rule compares it).
    policy_version: the moderation policy version the job's key carries (the policy a
        moderation job judges by).
    input_jobs: the job each input that is another job's output came from, by input name.
    about: what the inputs came from, by input name (:attr:`JobSpec.about`; not identity).
    """

    check: Callable[[], None] = _no_check
    remaining_s: Callable[[], float | None] = _no_deadline
    progress: Callable[[tuple[str, ...], float, float], None] = _no_progress
    inputs: Mapping[str, Path] = field(default_factory=dict)
    part: Part | None = None
    split: Split | None = None
    source_url: str | None = None
    content_sha256: str | None = None
    policy_version: str | None = None
    input_jobs: Mapping[str, str] = field(default_factory=dict)
    about: Mapping[str, str] = field(default_factory=dict)


def refused(
    ref: ObjectRef,
    reason: str,
    detail: str,
    *,
    sha256: str | None = None,
    size_bytes: int | None = None,
    media: str | None = None,
    bytes_read: int = 0,
) -> SourceResult:
    """An original refused before any job exists: a ``permanent_failure`` with ``reason``
    (a reason code) and no jobs -- the value a step of the delivery returns to end it."""
    return SourceResult(
        ref,
        SourceState.PERMANENT_FAILURE,
        media=media,
        sha256=sha256,
        size_bytes=size_bytes,
        reason=reason,
        detail=detail,
        bytes_read=bytes_read,
    )


#: What an app reads for a state whose word inside the worker differs (``process --json``,
#: the status document and notifications say ``failed`` for an end for good).
PUBLIC_STATE_WORDS: Final = {"permanent_failure": "failed"}


def public_state(state: str) -> str:
    """The word an app reads for ``state`` (a :class:`SourceState` or :class:`JobState`
    value): one vocabulary across ``process --json``, the status document (its
    ``AssetState`` and ``AssetJobState``) and notifications -- ``failed``, not
    ``permanent_failure``. Pure."""
    return PUBLIC_STATE_WORDS.get(str(state), str(state))


def size_refusal(size_bytes: int, max_input_bytes: int) -> tuple[str, str] | None:
    """Why an original of ``size_bytes`` is refused: ``empty_file`` at 0 bytes, ``too_large``
    over ``max_input_bytes`` (``MAX_INPUT_BYTES``); ``None`` when its size is accepted."""
    if size_bytes == 0:
        return EMPTY_FILE, "the object has 0 bytes"
    if size_bytes > max_input_bytes:
        return TOO_LARGE, INPUT_BYTES.detail(in_bytes(size_bytes), in_bytes(max_input_bytes))
    return None
