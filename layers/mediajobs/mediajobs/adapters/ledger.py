"""The job ledger in DynamoDB: one row per job key (:class:`JobModel`).

This adapter expresses rows only. What each write changes is decided by the domain's row
transitions (:mod:`mediajobs.domain.jobs`: :func:`~mediajobs.domain.jobs.new_row`,
:func:`~mediajobs.domain.jobs.taken_over`, :func:`~mediajobs.domain.jobs.completed` ...),
and every request goes through the unit of work (:mod:`mediajobs.adapters.dynamo`), which
answers a conditional write with won or lost. The conditions, spelled here:

* a claim of a new job: the row does not exist (one ``PutItem``);
* a takeover or an exhaustion of a row read before: the row is unchanged since
  (:class:`~mediajobs.domain.jobs.Fence`: state, token, lease end, attempts, whether a
  manifest is staged), so the decision taken on the read row still holds;
* a holder's write (renew, register, stage, complete, fail, release; a collector's end):
  the holder's token, in the states it holds (:func:`~mediajobs.domain.jobs.holds`);
* a collection's start: the row is unchanged since the collector read it.

Duplicates are cheap: :meth:`DynamoLedger.find` reads every job of an original in one
``BatchGetItem`` (strongly consistent), and :meth:`DynamoLedger.claim` given what was
found writes nothing for a job that is done, failed or busy.

Jobs in steps: a job waiting for other jobs' outputs is written ``waiting`` with its
``pending`` inputs (:meth:`DynamoLedger.wait`); each input names the jobs waiting for it in
its ``waiting`` set (written with its spec, or added by :meth:`DynamoLedger.register`). When
an input ends, each job waiting for it is told (:meth:`DynamoLedger.input_done`): the input
leaves its ``pending`` set, and the one writer that finds it empty makes the job
``requested`` (conditional on ``waiting`` with nothing pending: exactly one).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.models import Model

from mediajobs.adapters.dynamo import UnitOfWork
from mediajobs.domain.errors import Superseded, TransientFailure
from mediajobs.domain.jobs import (
    AWAITING,
    HELD_ANY,
    HELD_COLLECTING,
    HELD_RENDERING,
    Changes,
    Claim,
    ClaimOutcome,
    Decision,
    Fence,
    JobSpec,
    JobState,
    JobView,
    OutputCandidate,
    OutputRecord,
    collecting,
    collection_ended,
    completed,
    decide,
    failed,
    held_for_review,
    input_failed,
    input_of,
    new_row,
    ready,
    released,
    renewed,
    requested,
    reviewed,
    standing_claim,
    taken_over,
    waiting_again,
)
from mediajobs.domain.keys import ORIGINAL_INPUT, UNKEYED_ALGORITHM
from mediajobs.domain.parts import Part, Split, split_changes

log = logging.getLogger(__name__)


class JobModel(Model):
    """A job row. The hash key is the job key; there is no range key.

    The table name, region and endpoint are bound by the client factory
    (:mod:`mediajobs.adapters.clients`); ``template.yaml`` declares the same key schema (a
    contract test holds them together).
    """

    class Meta:
        table_name = "mediajobs-jobs"
        region = "us-east-1"

    job_key = UnicodeAttribute(hash_key=True)
    state = UnicodeAttribute()
    lease_token = UnicodeAttribute(null=True)
    lease_expires_at_s = NumberAttribute(default=0)
    attempts = NumberAttribute(default=0)
    input_sha256 = UnicodeAttribute()
    recipe_id = UnicodeAttribute()
    recipe_version = NumberAttribute()
    recipe_sha256 = UnicodeAttribute()
    policy_version = UnicodeAttribute()
    output_prefix = UnicodeAttribute()
    manifest_key = UnicodeAttribute(null=True)
    outputs = JSONAttribute(null=True)
    # The committed manifest's decisions (the placeholder recipe's hash is there).
    decisions = JSONAttribute(null=True)
    failure_reason = UnicodeAttribute(null=True)
    failure_detail = UnicodeAttribute(null=True)
    source_bucket = UnicodeAttribute(null=True)
    source_key = UnicodeAttribute(null=True)
    created_at_s = NumberAttribute()
    updated_at_s = NumberAttribute()
    finished_at_s = NumberAttribute(null=True)
    # While the job runs: what its holders are about to write (OutputCandidate.encode),
    # and the manifest body staged before it is written. Removed when the job ends.
    output_candidates = UnicodeSetAttribute(null=True)
    staged_manifest = UnicodeAttribute(null=True)
    # When the collector deleted the job's prefix (collected, or a failed job swept).
    collected_at_s = NumberAttribute(null=True)
    # Jobs in steps: the inputs when they are not the original alone (name -> identity),
    # the jobs waiting for this one and not told yet, and the inputs a waiting job waits for.
    inputs = JSONAttribute(null=True)
    waiting = UnicodeSetAttribute(null=True)
    pending = UnicodeSetAttribute(null=True)
    # A split job: a part's range (domain/parts.py Part), and on the parent what it was
    # split into (Split), which its run joins.
    part = JSONAttribute(null=True)
    split = JSONAttribute(null=True)
    # A moderation job held for review: a person's decision ({"outcome", "by", "at_s"}).
    review = JSONAttribute(null=True)
    #: What the manifest came from (domain/manifest.py): private, never in manifest.json.
    provenance = JSONAttribute(null=True)
    # What an album's inputs came from (input name -> asset key): not identity.
    about = JSONAttribute(null=True)
    key_algorithm = NumberAttribute(null=True)


#: How often a claim re-reads and decides again after losing a race to another claim.
_CLAIM_ROUNDS: Final = 3
#: The states a job can no longer be waited for in.
_FINAL: Final = (JobState.DONE.value, JobState.PERMANENT_FAILURE.value)


def _stored(name: str, value: Any) -> Any:
    """A changed field's value as the row stores it."""
    if name == "outputs":
        return [o.to_json() for o in value]
    if name in ("waiting", "pending", "output_candidates"):
        return set(value)
    if name == "split":
        return value.to_json()
    return value


def actions_of(model: type[JobModel], changes: Changes) -> list[Action]:
    """The update actions of ``changes`` (a field set, or removed when ``None``)."""
    return [
        getattr(model, name).remove() if value is None else getattr(model, name).set(_stored(name, value))
        for name, value in changes.items()
    ]


def _fenced(model: type[JobModel], fence: Fence) -> Condition:
    """The row is still the one ``fence`` was taken of."""
    m = model
    token = m.lease_token.does_not_exist() if fence.lease_token is None else m.lease_token == fence.lease_token
    staged = m.staged_manifest.exists() if fence.staged else m.staged_manifest.does_not_exist()
    return (
        (m.state == fence.state)
        & token
        & (m.lease_expires_at_s == fence.lease_expires_at_s)
        & (m.attempts == fence.attempts)
        & staged
    )


def _held(model: type[JobModel], token: str, states: frozenset[JobState]) -> Condition:
    """The holder of ``token`` still holds the row, in one of ``states``."""
    return model.state.is_in(*sorted(str(s) for s in states)) & (model.lease_token == token)


def view_of(row: JobModel) -> JobView:
    """The :class:`~mediajobs.domain.jobs.JobView` of a stored row."""
    stored = row.inputs
    inputs = (
        {name: input_of(identity) for name, identity in stored.items()}
        if stored
        else {ORIGINAL_INPUT: input_of({"sha256": row.input_sha256})}
    )
    spec = JobSpec(
        job_key=row.job_key,
        input_sha256=row.input_sha256,
        recipe_id=row.recipe_id,
        recipe_version=int(row.recipe_version),
        recipe_sha256=row.recipe_sha256,
        policy_version=row.policy_version,
        output_prefix=row.output_prefix,
        source_bucket=row.source_bucket or "",
        source_key=row.source_key or "",
        inputs=inputs,
        waiting=frozenset(row.waiting or ()),
        part=None if row.part is None else Part.from_json(row.part),
        about=dict(row.about or {}),
        key_algorithm=int(row.key_algorithm or UNKEYED_ALGORITHM),
    )
    return JobView(
        job_key=row.job_key,
        state=row.state,
        lease_token=row.lease_token,
        lease_expires_at_s=int(row.lease_expires_at_s or 0),
        attempts=int(row.attempts or 0),
        recipe_id=row.recipe_id,
        manifest_key=row.manifest_key,
        outputs=tuple(OutputRecord.from_json(o) for o in (row.outputs or [])),
        failure_reason=row.failure_reason,
        failure_detail=row.failure_detail,
        staged_manifest=row.staged_manifest,
        decisions=row.decisions,
        collected_at_s=None if row.collected_at_s is None else int(row.collected_at_s),
        source_bucket=row.source_bucket,
        output_prefix=row.output_prefix,
        waiting=frozenset(row.waiting or ()),
        pending=frozenset(row.pending or ()),
        spec=spec,
        split=None if row.split is None else Split.from_json(row.split),
        review=row.review,
        provenance=row.provenance,
    )


class DynamoLedger:
    """Claims, takeovers, lease renewals and state changes of jobs.

    Parameters
    ----------
    uow: the unit of work every request goes through.
    model: the jobs table's bound model (:meth:`mediajobs.adapters.clients.ClientFactory.model`).
    max_attempts: claims a job may have (first claim plus takeovers); the next claim
        ends it ``attempts_exhausted``.
    """

    def __init__(self, uow: UnitOfWork, model: type[JobModel], *, max_attempts: int) -> None:
        self._uow = uow
        self._model = model
        self._max_attempts = max_attempts

    # -- reads -----------------------------------------------------------------------------

    def find(self, job_keys: list[str]) -> dict[str, JobView]:
        """The rows of ``job_keys`` that exist, by key: one strongly consistent ``BatchGetItem``.

        Raises
        ------
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses a key.
        TransientFailure
            On any other DynamoDB error.
        """
        rows = self._uow.batch_get(self._model, sorted(set(job_keys)), what="ledger batch read")
        return {row.job_key: view_of(row) for row in rows}

    def get(self, job_key: str) -> JobView | None:
        """The job's row (consistent read), or ``None``."""
        row = self._uow.get(self._model, job_key, what="ledger read")
        return None if row is None else view_of(row)

    def _read(self, job_key: str) -> JobView:
        view = self.get(job_key)
        if view is None:  # deleted between the write and the read: let SQS bring it back
            raise TransientFailure(f"job {job_key[:12]} vanished during claim")
        return view

    # -- claims ----------------------------------------------------------------------------

    def _new(self, spec: JobSpec, changes: Changes) -> JobModel:
        inputs = None
        if set(spec.inputs) != {ORIGINAL_INPUT}:
            inputs = {name: i.identity() for name, i in spec.inputs.items()}
        row = self._model(
            spec.job_key,
            input_sha256=spec.input_sha256,
            recipe_id=spec.recipe_id,
            recipe_version=spec.recipe_version,
            recipe_sha256=spec.recipe_sha256,
            policy_version=spec.policy_version,
            output_prefix=spec.output_prefix,
            source_bucket=spec.source_bucket,
            source_key=spec.source_key,
            inputs=inputs,
            waiting=set(spec.waiting) or None,
            part=None if spec.part is None else spec.part.to_json(),
            about=dict(spec.about) or None,
            key_algorithm=spec.key_algorithm,
        )
        for name, value in changes.items():
            setattr(row, name, None if value is None else _stored(name, value))
        return row

    def claim(self, spec: JobSpec, *, now_s: int, lease_until_s: int, seen: JobView | None = None) -> Claim:
        """Claim a job, or report what holds it.

        Parameters
        ----------
        spec: the job.
        now_s: Unix epoch seconds.
        lease_until_s: when the lease ends unless renewed (epoch seconds).
        seen: the row :meth:`find` returned, or ``None`` when it found none.

        With ``seen`` ``None``: one conditional put (the row does not exist); after a lost
        race, one consistent read. A row that is done, failed, busy or waiting costs no
        write. A takeover (a requested job, an expired lease, a transient failure) is one
        update fenced on the row read; past ``max_attempts`` the same update ends the job
        ``attempts_exhausted`` instead.

        Raises
        ------
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the row.
        TransientFailure
            When DynamoDB fails for another reason than a lost race.
        """
        token = uuid.uuid4().hex
        if seen is None:
            changes = new_row(spec, token=token, lease_until_s=lease_until_s, now_s=now_s, pending=frozenset())
            row = self._new(spec, changes)
            if self._uow.put(row, self._model.job_key.does_not_exist(), what="ledger put"):
                return Claim(ClaimOutcome.RUN, spec.job_key, token, lease_until_s, attempts=1)
            seen = self._read(spec.job_key)
            if seen.lease_token == token:
                # The SDK retried a put whose first attempt succeeded but whose answer was
                # lost: the row is ours.
                return Claim(ClaimOutcome.RUN, spec.job_key, token, lease_until_s, attempts=1)
        for _ in range(_CLAIM_ROUNDS):
            if seen.lease_token == token and seen.state == JobState.RUNNING:
                # Our own takeover, retried by the SDK after its answer was lost. Attempt 1
                # here is a restart of a collected or collecting job: whether it was
                # collecting is lost with the answer, so the prefix is swept (nothing of
                # ours is there yet).
                return Claim(
                    ClaimOutcome.RUN,
                    seen.job_key,
                    lease_token=token,
                    lease_expires_at_s=seen.lease_expires_at_s,
                    attempts=seen.attempts,
                    took_over=True,
                    staged_manifest=seen.staged_manifest,
                    sweep=seen.attempts == 1,
                )
            decision = decide(seen, now_s=now_s, max_attempts=self._max_attempts)
            if decision not in (Decision.TAKE_OVER, Decision.EXHAUST):
                return standing_claim(seen)
            won = self.take_over(seen, token, decision, now_s=now_s, lease_until_s=lease_until_s)
            if won is not None:
                return won
            seen = self._read(seen.job_key)
        # Lost every round: someone else is actively claiming it.
        return Claim(ClaimOutcome.BUSY, spec.job_key, lease_expires_at_s=now_s)

    def take_over(
        self, seen: JobView, token: str, decision: Decision, *, now_s: int, lease_until_s: int
    ) -> Claim | None:
        """Act on ``decision`` (``TAKE_OVER`` or ``EXHAUST``) for the row ``seen``: one
        update of :func:`~mediajobs.domain.jobs.taken_over`'s changes, fenced on ``seen``.

        Returns
        -------
        Claim | None
            ``RUN`` (taken over) or ``FAILED`` (exhausted now); ``None`` when the row is
            not as ``seen`` any more.

        Raises
        ------
        ValueError
            For a decision other than ``TAKE_OVER`` or ``EXHAUST``.
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        changes, claim = taken_over(seen, decision, token, lease_until_s=lease_until_s, now_s=now_s)
        row = self._model(seen.job_key)
        fence = _fenced(self._model, Fence.of(seen))
        if not self._uow.update(row, actions_of(self._model, changes), fence, what="ledger update"):
            return None
        if decision is Decision.EXHAUST:
            log.warning("attempts exhausted", extra={"job_key": seen.job_key, "attempts": seen.attempts})
        else:
            log.info("took over job", extra={"job_key": seen.job_key, "from": seen.state, "attempts": claim.attempts})
        return claim

    # -- a holder's writes ------------------------------------------------------------------

    def _holder_writes(
        self, job_key: str, token: str, changes: Changes | Sequence[Action], states: frozenset[JobState]
    ) -> JobModel:
        """One update conditional on the holder of ``token`` holding the row in ``states``;
        the row as stored afterwards.

        Raises
        ------
        Superseded
            The token no longer holds the row (taken over, released, collected).
        """
        actions = list(changes) if not isinstance(changes, dict) else actions_of(self._model, changes)
        row = self._model(job_key)
        if not self._uow.update(row, actions, _held(self._model, token, states), what="ledger update"):
            raise Superseded(job_key)
        return row

    def register_outputs(
        self, job_key: str, token: str, candidates: list[OutputCandidate], *, now_s: int
    ) -> frozenset[OutputCandidate]:
        """Record what this holder is about to write, before writing it (one ``ADD`` to a
        string set, conditional on holding the claim).

        Returns
        -------
        frozenset[OutputCandidate]
            Every candidate any holder of the job registered, these included: the bytes
            a 412 can have met (see :func:`mediajobs.domain.jobs.identify_stored`).

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        if not candidates:
            return frozenset()
        m = self._model
        add = [m.output_candidates.add({c.encode() for c in candidates}), m.updated_at_s.set(now_s)]
        row = self._holder_writes(job_key, token, add, HELD_RENDERING)
        return frozenset(OutputCandidate.decode(text) for text in (row.output_candidates or ()))

    def stage_manifest(self, job_key: str, token: str, body: str, *, now_s: int) -> str:
        """Keep the manifest body in the row before writing it to S3, unless a body is
        staged already (``if_not_exists``); conditional on holding the claim. A takeover
        then re-writes the staged body instead of reading S3 (the worker has no read
        access to derivatives), and every manifest write of the job carries the same bytes.

        Returns
        -------
        str
            The staged body: ``body``, or the one staged earlier.

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        stage = [m.staged_manifest.set(m.staged_manifest | body), m.updated_at_s.set(now_s)]
        return str(self._holder_writes(job_key, token, stage, HELD_RENDERING).staged_manifest)

    def renew(self, job_key: str, token: str, *, lease_until_s: int, now_s: int) -> None:
        """Extend the lease to ``lease_until_s``; only the holder can: a render's
        (``running``) or a collector's (``collecting``).

        Raises
        ------
        Superseded
            If the claim was taken over or released.
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        self._holder_writes(job_key, token, renewed(lease_until_s, now_s), HELD_ANY)

    def complete(
        self,
        job_key: str,
        token: str,
        *,
        manifest_key: str,
        outputs: Sequence[OutputRecord],
        now_s: int,
        decisions: Mapping[str, Any] | None = None,
        provenance: Mapping[str, Any] | None = None,
    ) -> JobView:
        """Mark the job done, with its outputs, its manifest's ``decisions`` and its
        ``provenance`` (kept in the row only); only the holder of ``token`` can.

        Returns
        -------
        JobView
            The row as stored after it: its ``waiting`` jobs are to be told.

        Raises
        ------
        Superseded
            If the claim was taken over.
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the update.
        TransientFailure
            On any other DynamoDB error.
        """
        changes = completed(manifest_key, outputs, decisions, now_s, provenance)
        return view_of(self._holder_writes(job_key, token, changes, HELD_RENDERING))

    def fail_permanently(
        self,
        job_key: str,
        token: str,
        *,
        reason: str,
        detail: str,
        now_s: int,
        decisions: Mapping[str, Any] | None = None,
    ) -> JobView:
        """Record a permanent failure with its reason code (and ``decisions``, a rejecting
        moderation decision); only the holder of ``token`` can. Returns the row as stored
        after it.

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        changes = failed(reason, detail, now_s, decisions)
        return view_of(self._holder_writes(job_key, token, changes, HELD_RENDERING))

    def hold(self, job_key: str, token: str, decisions: Mapping[str, Any], *, now_s: int) -> JobView:
        """Hold a moderation job for review with its machine ``decisions``
        (:func:`~mediajobs.domain.jobs.held_for_review`); only the holder of ``token`` can.
        Returns the row as stored after it.

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        return view_of(self._holder_writes(job_key, token, held_for_review(decisions, now_s), HELD_RENDERING))

    def wait_again(self, job_key: str, token: str, pending: frozenset[str], *, now_s: int) -> JobView:
        """A held job waits for its inputs ``pending`` again
        (:func:`~mediajobs.domain.jobs.waiting_again`); only the holder of ``token`` can.
        Returns the row as stored after it.

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        return view_of(self._holder_writes(job_key, token, waiting_again(pending, now_s), HELD_RENDERING))

    def review(self, job_key: str, review: Mapping[str, Any], *, now_s: int) -> JobView | None:
        """A person's decision on a job held ``review``: it becomes ``requested`` with the
        decision (:func:`~mediajobs.domain.jobs.reviewed`), conditional on still being
        ``review`` -- so one decision lands. Returns the row as stored, or ``None`` when the
        job was not held (decided already, or no such job).

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        row = m(job_key)
        condition = m.state == JobState.REVIEW.value
        if not self._uow.update(row, actions_of(m, reviewed(review, now_s)), condition, what="ledger update"):
            return None
        return self._read(job_key)

    def release(self, job_key: str, token: str, *, detail: str, now_s: int) -> None:
        """Give the claim back after a transient failure so the next delivery can take
        over (the token stays on the row: the next takeover is fenced on it).

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        self._holder_writes(job_key, token, released(detail, now_s), HELD_RENDERING)

    # -- the collection ---------------------------------------------------------------------

    def begin_collection(self, job_key: str, token: str, *, lease_until_s: int, now_s: int, seen: JobView) -> bool:
        """Start collecting the row ``seen`` (which the collector decided on,
        :func:`~mediajobs.domain.jobs.collectable`): ``collecting`` held by ``token`` until
        ``lease_until_s``; one update fenced on ``seen``, so a row that changed since -- a
        render that ended ``done`` meanwhile -- is left.

        Returns
        -------
        bool
            ``False`` when the row is not as ``seen`` any more.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        changes = collecting(token, lease_until_s=lease_until_s, now_s=now_s)
        row = self._model(job_key)
        fence = self._model.job_key.exists() & _fenced(self._model, Fence.of(seen))
        return self._uow.update(row, actions_of(self._model, changes), fence, what="ledger update")

    def end_collection(self, job_key: str, token: str, *, collected: bool, now_s: int) -> None:
        """End the collection ``token`` holds: ``collected`` or back to ``done``
        (:func:`~mediajobs.domain.jobs.collection_ended`).

        Raises
        ------
        Superseded
            ``token`` no longer holds the collection (a render took it over).
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        self._holder_writes(job_key, token, collection_ended(collected=collected, now_s=now_s), HELD_COLLECTING)
        log.info("collection ended", extra={"job_key": job_key, "collected": collected})

    def mark_swept(self, job_key: str, *, now_s: int) -> None:
        """Record ``collected_at_s`` on a ``permanent_failure`` row whose manifest-less
        prefix was swept; no write on any other state (the condition fails quietly).

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        actions = [m.collected_at_s.set(now_s), m.updated_at_s.set(now_s)]
        self._uow.update(m(job_key), actions, m.state == JobState.PERMANENT_FAILURE.value, what="ledger update")

    # -- jobs in steps ----------------------------------------------------------------------

    def wait(self, spec: JobSpec, pending: frozenset[str], *, now_s: int) -> bool:
        """Write the row of a job that takes other jobs' outputs: ``waiting`` for
        ``pending`` (``requested`` when nothing is pending), unless it exists.

        Returns ``True`` when written, ``False`` when the row existed.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        row = self._new(spec, new_row(spec, token=None, lease_until_s=0, now_s=now_s, pending=pending))
        return self._uow.put(row, self._model.job_key.does_not_exist(), what="ledger put")

    def split(
        self, job_key: str, token: str, pending: frozenset[str], split: Split, *, now_s: int, requests_until_s: int
    ) -> JobView:
        """Turn the running job ``job_key``, held by ``token``, ``waiting`` for its parts
        ``pending`` (``requested`` when none is), with ``split`` recorded
        (:func:`~mediajobs.domain.parts.split_changes`: until ``requests_until_s`` the
        parts' requests are being sent); its lease is given up. Returns the row as stored.

        Raises
        ------
        Superseded
            ``token`` no longer holds the job.
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        changes = split_changes(pending, split, now_s, requests_until_s)
        view = view_of(self._holder_writes(job_key, token, changes, HELD_RENDERING))
        log.info("job split", extra={"job_key": job_key, "parts": len(split.parts), "pending": len(pending)})
        return view

    def requests_sent(self, job_key: str, requests_until_s: int, *, now_s: int) -> None:
        """The split job ``job_key``'s parts were all requested: its ``lease_expires_at_s``
        (``requests_until_s``, the splitter's window) goes to 0, so a copy or a redelivery
        of its original is answered at once (conditional on the row still ``waiting`` with
        that window: a later write is left as it is).

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        condition = (m.state == JobState.WAITING.value) & (m.lease_expires_at_s == requests_until_s)
        self._uow.update(
            m(job_key), [m.lease_expires_at_s.set(0), m.updated_at_s.set(now_s)], condition, what="ledger update"
        )

    def register(self, input_key: str, waiter_key: str, *, now_s: int) -> bool:
        """Name ``waiter_key`` among the jobs waiting for ``input_key``, unless that job
        ended (or has no row): then ``False``, and its end is what the waiter reads.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        actions = [m.waiting.add({waiter_key}), m.updated_at_s.set(now_s)]
        alive = m.job_key.exists() & ~m.state.is_in(*_FINAL)
        return self._uow.update(m(input_key), actions, alive, what="ledger update")

    def input_done(self, waiter_key: str, input_key: str, *, now_s: int) -> tuple[JobView | None, bool]:
        """Tell the job ``waiter_key`` that its input ``input_key`` is done: the input
        leaves its ``pending`` set (idempotent); when that leaves none and the job is
        ``waiting``, it becomes ``requested`` (:func:`~mediajobs.domain.jobs.requested`),
        conditional on ``waiting`` with nothing pending, so exactly one writer makes it.

        Returns
        -------
        (JobView | None, bool)
            The waiting job's row as stored after it (``None``: no such row), and whether
            this call made it ``requested``.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        row = m(waiter_key)
        actions = [m.pending.delete({input_key}), m.updated_at_s.set(now_s)]
        if not self._uow.update(row, actions, m.job_key.exists(), what="ledger update"):
            return None, False
        view = view_of(row)
        if not ready(view):
            return view, False
        condition = (m.state == JobState.WAITING.value) & m.pending.does_not_exist()
        made = self._uow.update(row, actions_of(m, requested(now_s)), condition, what="ledger update")
        return (view_of(row) if made else self.get(waiter_key)), made

    def input_failed(
        self, waiter_key: str, input_key: str, reason: str | None, detail: str | None, *, now_s: int
    ) -> bool:
        """Fail the job ``waiter_key``, still waiting or requested, because its input
        ``input_key`` failed for good (:func:`~mediajobs.domain.jobs.input_failed`).
        Returns whether this call failed it.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        actions = actions_of(m, input_failed(input_key, reason, detail, now_s))
        condition = m.state.is_in(*sorted(str(s) for s in AWAITING))
        return self._uow.update(m(waiter_key), actions, condition, what="ledger update")

    def told(self, input_key: str, waiter_keys: frozenset[str], *, now_s: int) -> None:
        """Forget ``waiter_keys`` among the jobs waiting for ``input_key``: each was told
        how the input ended.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        if waiter_keys:
            m = self._model
            actions = [m.waiting.delete(set(waiter_keys)), m.updated_at_s.set(now_s)]
            self._uow.update(m(input_key), actions, m.job_key.exists(), what="ledger update")
