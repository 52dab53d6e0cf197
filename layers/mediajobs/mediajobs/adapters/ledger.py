"""The job ledger in DynamoDB, through PynamoDB.

One row per job key. A claim is one conditional put; a takeover (expired lease or
transient failure) is one conditional update fenced on the previous lease token;
renewing the lease (the heartbeat) and finishing are conditional on still holding the
claim (same token, state ``running``). A lost race is recognised by
``ConditionalCheckFailedException``, never by message text.

The collection (:mod:`mediajobs.service_layer.collection`) moves a ``done`` row to
``collecting`` under its own lease (:meth:`DynamoLedger.begin_collection`), then to
``collected`` or back to ``done`` (:meth:`DynamoLedger.end_collection`), each write
conditional on the collector's token; a claim takes a ``collected`` row, or a
``collecting`` one whose lease expired, over to render it afresh.

Duplicates are cheap: :meth:`DynamoLedger.find` reads every job of an original in one
``BatchGetItem`` (strongly consistent), and :meth:`DynamoLedger.claim` given what was
found writes nothing for a job that is done, failed or busy.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.exceptions import GetError, PutError, PynamoDBException, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.models import Model

from mediajobs.domain.errors import (
    ATTEMPTS_EXHAUSTED,
    UNSTORABLE_INPUT,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    Decision,
    JobSpec,
    JobState,
    JobView,
    OutputCandidate,
    OutputRecord,
    decide,
    standing_claim,
)

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Model)

_CONDITION_FAILED = "ConditionalCheckFailedException"
_VALIDATION = "ValidationException"


class JobModel(Model):
    """A job row. The hash key is the job key; there is no range key.

    The table name, region and endpoint are bound at runtime by :func:`bound_job_model`;
    ``template.yaml`` declares the same key schema (a contract test holds them together).
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


@functools.cache
def bind_model(model: type[M], table_name: str, region: str, host: str | None) -> type[M]:
    """A subclass of a PynamoDB ``model`` bound to one table and endpoint (cached, so the
    model's connection is made once per table).

    Parameters
    ----------
    model: the model class (:class:`JobModel`, ``SourceModel``).
    table_name: DynamoDB table name.
    region: AWS region.
    host: endpoint URL (the embedded moto server), or ``None`` for AWS.
    """
    meta_attrs: dict[str, Any] = {"table_name": table_name, "region": region}
    if host:
        meta_attrs["host"] = host
    meta = type("Meta", (), meta_attrs)
    return type(f"{model.__name__}_{table_name}", (model,), {"Meta": meta})


def bound_job_model(table_name: str, region: str, host: str | None) -> type[JobModel]:
    """:func:`bind_model` for :class:`JobModel`."""
    return bind_model(JobModel, table_name, region, host)


def _lost_race(exc: PutError | UpdateError) -> bool:
    return exc.cause_response_code == _CONDITION_FAILED


#: What DynamoDB's ``ValidationException`` says when a value is over a size limit: "Size of
#: hashkey has exceeded the maximum size limit of 2048 bytes", "Item size has exceeded the
#: maximum allowed size", "Aggregated size of all range keys has exceeded the size limit of
#: 1024 bytes" (DynamoDB's answers, and moto's; the error code alone does not tell them from
#: a request that does not match the table's schema).
_SIZE_LIMIT: Final = re.compile(r"size\b.*\bexceeded|exceeded.*\bsize", re.IGNORECASE)


def dynamo_failure(exc: PynamoDBException, what: str) -> PermanentFailure | TransientFailure:
    """The pipeline's error for a DynamoDB request that failed other than by a lost race.

    A ``ValidationException`` over a size limit is DynamoDB refusing a value derived from the
    input -- a key over 2,048 bytes, an item over 400 KB (DynamoDB developer guide, "Service,
    account, and table quotas"): retrying can never help, so it is ``unstorable_input``, with
    DynamoDB's message as the detail. Any other ``ValidationException`` (a key that does not
    match the table's schema: a table name pointing at the wrong table) is the deployment's,
    not the input's: transient, so the message is redelivered, dead-lettered and alarmed on
    rather than acknowledged as a failure of every upload. Anything else (throttling the SDK
    gave up on, a network error) may pass: transient.

    Parameters
    ----------
    exc: PynamoDB's error; its botocore cause carries the code.
    what: the request, for the message (``"ledger put"``).
    """
    message = exc.cause_response_message or ""
    if exc.cause_response_code == _VALIDATION and _SIZE_LIMIT.search(message):
        return PermanentFailure(UNSTORABLE_INPUT, f"{what} refused by DynamoDB: {message}")
    if exc.cause_response_code == _VALIDATION:
        return TransientFailure(f"{what} refused by DynamoDB (not the input's values): {message}")
    return TransientFailure(f"{what} failed: {exc.cause_response_code or exc}")


def _view(row: JobModel) -> JobView:
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
    )


#: States a render takes over to start afresh: the job was done and its derivatives are
#: gone, or going (:func:`mediajobs.domain.jobs.decide`).
_RESTARTS: Final = frozenset({JobState.COLLECTING, JobState.COLLECTED})


def _as_seen(model: type[JobModel], seen: JobView | None) -> Condition:
    """The row is still in ``seen``'s state under ``seen``'s token (true when ``seen`` is
    ``None``)."""
    if seen is None:
        return model.job_key.exists()
    token = model.lease_token.does_not_exist() if seen.lease_token is None else model.lease_token == seen.lease_token
    return (model.state == str(seen.state)) & token


def takeover_condition(
    model: type[JobModel], seen: JobView, decision: Decision, *, now_s: int, max_attempts: int
) -> Condition:
    """:func:`mediajobs.domain.jobs.decide` spelled as a DynamoDB condition: true exactly
    when the stored row is still the one ``seen`` read (the fence) and ``decide`` on it
    gives ``decision`` at ``now_s``.

    The clauses, named as in ``decide``:

    * ``fence``: the row carries ``seen``'s lease token (or, as ``seen``, none), so no other
      claim took the job since it was read;
    * ``lease_over``: ``transient_failure``, or ``running`` with ``lease_expires_at_s <=
      now_s`` (``done`` and ``permanent_failure`` are final; an unexpired lease is busy);
    * ``used_up``: ``attempts >= max_attempts``;
    * ``staged``: a holder staged the manifest (``staged_manifest`` exists);
    * ``collection_over``: ``collected``, or ``collecting`` with ``lease_expires_at_s <=
      now_s`` (a live collection is busy). The job was done: its attempts start again,
      so ``used_up`` does not apply.

    For a ``seen`` row in ``running`` or ``transient_failure``: ``TAKE_OVER`` is ``fence &
    lease_over & (not used_up | staged)``; ``EXHAUST`` is ``fence & lease_over & used_up &
    not staged`` -- so a manifest staged since ``seen`` was read turns an exhaustion into a
    lost race (the re-read then takes the job over to commit it). For a ``seen`` row in
    ``collecting`` or ``collected``: ``TAKE_OVER`` is ``fence & collection_over`` (its
    update restarts the attempts, so it must not meet a row of the other kind) and
    ``EXHAUST`` is never true. On any other ``seen`` row, both are the first kind's (and
    false on the stored row: a final or busy row is not written).
    ``tests/functional/test_takeover_rule.py`` holds this against ``decide`` row shape by
    row shape.

    Parameters
    ----------
    model: the bound job model.
    seen: the row as read (its token is the fence).
    decision: ``Decision.TAKE_OVER`` or ``Decision.EXHAUST``.
    now_s: Unix epoch seconds.
    max_attempts: claims a job may have.

    Raises
    ------
    ValueError
        For any other decision: a final or busy row is never written.
    """
    if decision not in (Decision.TAKE_OVER, Decision.EXHAUST):
        raise ValueError(f"no takeover condition for {decision}")
    fence = (
        model.lease_token == seen.lease_token if seen.lease_token is not None else model.lease_token.does_not_exist()
    )
    lease_over = (model.state == JobState.TRANSIENT_FAILURE.value) | (
        (model.state == JobState.RUNNING.value) & (model.lease_expires_at_s <= now_s)
    )
    used_up = model.attempts >= max_attempts
    staged = model.staged_manifest.exists()
    if seen.state in _RESTARTS:
        collection_over = (model.state == JobState.COLLECTED.value) | (
            (model.state == JobState.COLLECTING.value) & (model.lease_expires_at_s <= now_s)
        )
        # EXHAUST: a condition no row meets (a restart never exhausts).
        return fence & collection_over if decision is Decision.TAKE_OVER else fence & model.job_key.does_not_exist()
    if decision is Decision.TAKE_OVER:
        return fence & lease_over & (~used_up | staged)
    return fence & lease_over & used_up & model.staged_manifest.does_not_exist()


#: How often a claim re-reads and retries after losing a race to another claim.
_CLAIM_ROUNDS = 3


class DynamoLedger:
    """Claims, takeovers, lease renewals and state changes of jobs.

    Parameters
    ----------
    model: a bound job model (see :func:`bound_job_model`).
    max_attempts: claims a job may have (first claim plus takeovers); the next claim
        ends it ``attempts_exhausted``.
    """

    def __init__(self, model: type[JobModel], *, max_attempts: int) -> None:
        self._model = model
        self._max_attempts = max_attempts

    def find(self, job_keys: list[str]) -> dict[str, JobView]:
        """The rows of ``job_keys`` that exist, by key: one strongly consistent
        ``BatchGetItem`` (PynamoDB retries unprocessed keys itself).

        Raises
        ------
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the request (see :func:`dynamo_failure`).
        TransientFailure
            On any other DynamoDB error.
        """
        if not job_keys:
            return {}
        try:
            rows = list(self._model.batch_get(sorted(set(job_keys)), consistent_read=True))
        except PynamoDBException as exc:
            raise dynamo_failure(exc, "ledger batch read") from exc
        return {row.job_key: _view(row) for row in rows}

    def claim(self, spec: JobSpec, *, now_s: int, lease_until_s: int, seen: JobView | None = None) -> Claim:
        """Claim a job, or report what holds it.

        Parameters
        ----------
        spec: the job.
        now_s: Unix epoch seconds.
        lease_until_s: when the lease ends unless renewed (epoch seconds).
        seen: the row :meth:`find` returned, or ``None`` when it found none.

        With ``seen`` ``None``: one conditional put (``attribute_not_exists(job_key)``);
        after a lost race, one consistent read. A row that is done, failed or busy costs
        no write. A takeover (expired lease or transient failure) is one conditional
        update fenced on the previous token; past ``max_attempts`` the same update
        ends the job ``attempts_exhausted`` instead.

        Raises
        ------
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the row (see :func:`dynamo_failure`).
        TransientFailure
            When DynamoDB fails for another reason than a lost race (the SDK's retry
            mode has already retried throttling).
        """
        token = uuid.uuid4().hex
        if seen is None:
            row = self._model(
                state=JobState.RUNNING.value,
                lease_token=token,
                lease_expires_at_s=lease_until_s,
                attempts=1,
                created_at_s=now_s,
                updated_at_s=now_s,
                **dataclasses.asdict(spec),
            )
            try:
                row.save(condition=self._model.job_key.does_not_exist())
                return self._ran(spec.job_key, token, lease_until_s)
            except PutError as exc:
                if not _lost_race(exc):
                    raise dynamo_failure(exc, "ledger put") from exc
            seen = self._read(spec.job_key)
            if seen.lease_token == token:
                # The SDK retried a put whose first attempt succeeded but whose answer was
                # lost: the row is ours.
                return self._ran(spec.job_key, token, lease_until_s)
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
            if decision in (Decision.DONE, Decision.FAILED, Decision.BUSY):
                return standing_claim(seen)
            won = self.take_over(seen, token, decision, now_s=now_s, lease_until_s=lease_until_s)
            if won is not None:
                return won
            seen = self._read(seen.job_key)
        # Lost every round: someone else is actively claiming it.
        return Claim(ClaimOutcome.BUSY, spec.job_key, lease_expires_at_s=now_s)

    @staticmethod
    def _ran(job_key: str, token: str, lease_until_s: int) -> Claim:
        return Claim(ClaimOutcome.RUN, job_key, lease_token=token, lease_expires_at_s=lease_until_s, attempts=1)

    def take_over(
        self, seen: JobView, token: str, decision: Decision, *, now_s: int, lease_until_s: int
    ) -> Claim | None:
        """Act on ``decision`` for the row ``seen``: one update conditioned on
        :func:`takeover_condition` (fenced on ``seen``'s token).

        Parameters
        ----------
        seen: the row as read.
        token: this claim's fencing token (``TAKE_OVER`` sets it on the row).
        decision: ``Decision.TAKE_OVER`` (the row becomes ``running`` under ``token`` until
            ``lease_until_s``, one more attempt; from ``collecting`` or ``collected``, attempt
            1 of a fresh render, the old result forgotten and, from ``collecting``,
            :attr:`Claim.sweep` set) or ``Decision.EXHAUST`` (the job ends
            ``attempts_exhausted``).
        now_s: Unix epoch seconds; lease_until_s: the new lease's end (epoch seconds).

        Returns
        -------
        Claim | None
            ``RUN`` (taken over) or ``FAILED`` (exhausted now); ``None`` when the condition
            failed: the row is not as ``seen`` any more, or ``decision`` is not ``decide``'s.

        Raises
        ------
        ValueError
            For a decision other than ``TAKE_OVER`` or ``EXHAUST``.
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        model = self._model
        exhaust = decision is Decision.EXHAUST
        restart = seen.state in _RESTARTS
        condition = takeover_condition(model, seen, decision, now_s=now_s, max_attempts=self._max_attempts)
        actions: list[Action]
        if restart and not exhaust:
            actions = [
                model.state.set(JobState.RUNNING.value),
                model.lease_token.set(token),
                model.lease_expires_at_s.set(lease_until_s),
                model.attempts.set(1),
                model.updated_at_s.set(now_s),
                model.manifest_key.remove(),
                model.outputs.remove(),
                model.decisions.remove(),
                model.finished_at_s.remove(),
                model.collected_at_s.remove(),
                model.output_candidates.remove(),
                model.staged_manifest.remove(),
            ]
        elif exhaust:
            detail = f"{seen.attempts} attempts; last: {seen.failure_detail or 'lease expired (worker lost)'}"
            actions = [
                model.state.set(JobState.PERMANENT_FAILURE.value),
                model.failure_reason.set(ATTEMPTS_EXHAUSTED),
                model.failure_detail.set(detail[:1000]),
                model.updated_at_s.set(now_s),
                model.finished_at_s.set(now_s),
                model.output_candidates.remove(),
                model.staged_manifest.remove(),
            ]
        else:
            actions = [
                model.state.set(JobState.RUNNING.value),
                model.lease_token.set(token),
                model.lease_expires_at_s.set(lease_until_s),
                model.attempts.add(1),
                model.updated_at_s.set(now_s),
            ]
        row = model(seen.job_key)
        try:
            row.update(actions=actions, condition=condition)
        except UpdateError as exc:
            if not _lost_race(exc):
                raise dynamo_failure(exc, "ledger update") from exc
            return None
        if exhaust:
            log.warning("attempts exhausted", extra={"job_key": seen.job_key, "attempts": seen.attempts})
            return Claim(
                ClaimOutcome.FAILED,
                seen.job_key,
                failure_reason=ATTEMPTS_EXHAUSTED,
                failure_detail=detail[:1000],
                failed_now=True,
            )
        if restart:
            log.info("rendering a collected job again", extra={"job_key": seen.job_key, "from": seen.state})
            return Claim(
                ClaimOutcome.RUN,
                seen.job_key,
                lease_token=token,
                lease_expires_at_s=lease_until_s,
                attempts=1,
                took_over=True,
                sweep=seen.state == JobState.COLLECTING,
            )
        log.info("took over job", extra={"job_key": seen.job_key, "attempts": seen.attempts + 1})
        return Claim(
            ClaimOutcome.RUN,
            seen.job_key,
            lease_token=token,
            lease_expires_at_s=lease_until_s,
            attempts=seen.attempts + 1,
            took_over=True,
            staged_manifest=row.staged_manifest,
        )

    def _read(self, job_key: str) -> JobView:
        row = self._get(job_key)
        if row is None:  # deleted between the write and the read: let SQS bring it back
            raise TransientFailure(f"job {job_key[:12]} vanished during claim")
        return _view(row)

    def _get(self, job_key: str) -> JobModel | None:
        try:
            return self._model.get(job_key, consistent_read=True)
        except self._model.DoesNotExist:
            return None
        except GetError as exc:
            raise dynamo_failure(exc, "ledger read") from exc

    def get(self, job_key: str) -> JobModel | None:
        """The job's whole row (consistent read), or ``None``."""
        return self._get(job_key)

    def _finish(self, job_key: str, token: str, actions: list[Any], *, state: Condition | None = None) -> JobModel:
        """One update conditional on holding the claim (``state``: the states it may be
        held in, default ``running``); the row as it is afterwards."""
        model = self._model
        row = model(job_key)
        held_in = state if state is not None else model.state == JobState.RUNNING.value
        try:
            row.update(actions=actions, condition=held_in & (model.lease_token == token))
        except UpdateError as exc:
            if _lost_race(exc):
                raise Superseded(job_key) from exc
            raise dynamo_failure(exc, "ledger update") from exc
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
        m = self._model
        if not candidates:
            return frozenset()
        row = self._finish(
            job_key,
            token,
            [m.output_candidates.add({c.encode() for c in candidates}), m.updated_at_s.set(now_s)],
        )
        return frozenset(OutputCandidate.decode(text) for text in (row.output_candidates or ()))

    def stage_manifest(self, job_key: str, token: str, body: str, *, now_s: int) -> str:
        """Keep the manifest body in the row before writing it to S3, unless a body is
        staged already (``if_not_exists``); conditional on holding the claim.

        A takeover then re-writes the staged body instead of reading S3 (the worker has
        no read access to derivatives), and every manifest write of the job carries the
        same bytes.

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
        row = self._finish(job_key, token, [m.staged_manifest.set(m.staged_manifest | body), m.updated_at_s.set(now_s)])
        return str(row.staged_manifest)

    def renew(self, job_key: str, token: str, *, lease_until_s: int, now_s: int) -> None:
        """Extend the lease to ``lease_until_s`` (the heartbeat); only the holder can: a
        render's (``running``) or a collector's (``collecting``).

        Raises
        ------
        Superseded
            If the claim was taken over or released.
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        self._finish(
            job_key,
            token,
            [m.lease_expires_at_s.set(lease_until_s), m.updated_at_s.set(now_s)],
            state=m.state.is_in(JobState.RUNNING.value, JobState.COLLECTING.value),
        )

    def complete(
        self,
        job_key: str,
        token: str,
        *,
        manifest_key: str,
        outputs: list[OutputRecord],
        now_s: int,
        decisions: Mapping[str, Any] | None = None,
    ) -> None:
        """Mark the job done, with its outputs and its manifest's ``decisions``; only the
        holder of ``token`` can.

        Raises
        ------
        Superseded
            If the claim was taken over.
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the update (see :func:`dynamo_failure`).
        TransientFailure
            On any other DynamoDB error.
        """
        m = self._model
        self._finish(
            job_key,
            token,
            [
                m.state.set(JobState.DONE.value),
                m.manifest_key.set(manifest_key),
                m.outputs.set([o.to_json() for o in outputs]),
                m.decisions.set(dict(decisions or {})),
                m.updated_at_s.set(now_s),
                m.finished_at_s.set(now_s),
                m.output_candidates.remove(),
                m.staged_manifest.remove(),
            ],
        )

    def fail_permanently(self, job_key: str, token: str, *, reason: str, detail: str, now_s: int) -> None:
        """Record a permanent failure with its reason code; only the holder of ``token`` can.

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        self._finish(
            job_key,
            token,
            [
                m.state.set(JobState.PERMANENT_FAILURE.value),
                m.failure_reason.set(reason),
                m.failure_detail.set(detail[:1000] or reason),
                m.updated_at_s.set(now_s),
                m.finished_at_s.set(now_s),
                m.output_candidates.remove(),
                m.staged_manifest.remove(),
            ],
        )

    def release_transient(self, job_key: str, token: str, *, detail: str, now_s: int) -> None:
        """Give the claim back after a transient failure so the next delivery can take over.

        The token stays on the row: the next claim's takeover is fenced on it.

        Raises
        ------
        Superseded, PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        self._finish(
            job_key,
            token,
            [
                m.state.set(JobState.TRANSIENT_FAILURE.value),
                m.failure_detail.set(detail[:1000] or "transient"),
                m.updated_at_s.set(now_s),
            ],
        )

    def begin_collection(
        self, job_key: str, token: str, *, lease_until_s: int, now_s: int, seen: JobView | None = None
    ) -> bool:
        """Start collecting a job: ``done`` -> ``collecting`` held by ``token`` until
        ``lease_until_s``. A ``collecting`` row whose lease expired (a collector that died
        mid-way) is taken over the same way, to be finished; so is an abandoned render (a
        ``running`` row whose lease expired, a ``transient_failure``: nothing references
        the job, so no delivery will finish it, and its prefix may hold outputs without a
        manifest). One update, conditional on ``state = done OR (state IN (collecting,
        running) AND lease_expires_at_s <= now_s) OR state = transient_failure``.

        Parameters
        ----------
        job_key: 64 hex characters.
        token: the collector's fencing token (every later write of the collection is
            conditional on it).
        lease_until_s, now_s: Unix epoch seconds.
        seen: the row the collector decided on: the update is then also conditional on
            ``state`` and ``lease_token`` being still what it read (fenced, as a takeover
            is), so a row that changed since -- a render that ended ``done`` meanwhile,
            taken up by a path that does not look at the references again -- is left.

        Returns
        -------
        bool
            ``False`` when the condition failed: a render holds the job, another collector
            does, it is collected already, failed, or gone.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        startable = (
            (m.state == JobState.DONE.value)
            | (m.state.is_in(JobState.COLLECTING.value, JobState.RUNNING.value) & (m.lease_expires_at_s <= now_s))
            | (m.state == JobState.TRANSIENT_FAILURE.value)
        )
        try:
            m(job_key).update(
                actions=[
                    m.state.set(JobState.COLLECTING.value),
                    m.lease_token.set(token),
                    m.lease_expires_at_s.set(lease_until_s),
                    m.updated_at_s.set(now_s),
                ],
                condition=m.job_key.exists() & startable & _as_seen(m, seen),
            )
        except UpdateError as exc:
            if _lost_race(exc):
                return False
            raise dynamo_failure(exc, "ledger update") from exc
        return True

    def end_collection(self, job_key: str, token: str, *, collected: bool, now_s: int) -> None:
        """End the collection ``token`` holds: ``collected`` (``collected_at_s`` set; the
        manifest key, outputs and decisions removed) or, when ``collected`` is false, back
        to ``done`` with its result as it was. Conditional on ``state = collecting`` and
        the token.

        Raises
        ------
        Superseded
            ``token`` no longer holds the collection (a render took it over).
        PermanentFailure, TransientFailure
            As :meth:`complete`.
        """
        m = self._model
        actions: list[Any]
        if collected:
            actions = [
                m.state.set(JobState.COLLECTED.value),
                m.collected_at_s.set(now_s),
                m.updated_at_s.set(now_s),
                m.manifest_key.remove(),
                m.outputs.remove(),
                m.decisions.remove(),
            ]
        else:
            actions = [m.state.set(JobState.DONE.value), m.updated_at_s.set(now_s)]
        self._finish(job_key, token, actions, state=m.state == JobState.COLLECTING.value)
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
        try:
            m(job_key).update(
                actions=[m.collected_at_s.set(now_s), m.updated_at_s.set(now_s)],
                condition=m.state == JobState.PERMANENT_FAILURE.value,
            )
        except UpdateError as exc:
            if not _lost_race(exc):
                raise dynamo_failure(exc, "ledger update") from exc
