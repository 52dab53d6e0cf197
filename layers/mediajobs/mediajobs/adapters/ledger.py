"""The job ledger in DynamoDB, through PynamoDB.

One row per job key. A claim is one conditional put; a takeover (expired lease or
transient failure) is one conditional update fenced on the previous lease token;
finishing is conditional on still holding the claim (same token, state ``running``).
A lost race is recognised by ``ConditionalCheckFailedException``, never by message text.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from typing import Any

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import GetError, PutError, UpdateError
from pynamodb.models import Model

from mediajobs.domain.errors import Superseded, TransientFailure
from mediajobs.domain.jobs import Claim, ClaimOutcome, JobSpec, JobState, OutputRecord

log = logging.getLogger(__name__)

_CONDITION_FAILED = "ConditionalCheckFailedException"


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
    failure_reason = UnicodeAttribute(null=True)
    failure_detail = UnicodeAttribute(null=True)
    source_bucket = UnicodeAttribute(null=True)
    source_key = UnicodeAttribute(null=True)
    created_at_s = NumberAttribute()
    updated_at_s = NumberAttribute()
    finished_at_s = NumberAttribute(null=True)


@functools.cache
def bound_job_model(table_name: str, region: str, host: str | None) -> type[JobModel]:
    """A :class:`JobModel` subclass bound to one table and endpoint.

    Parameters
    ----------
    table_name: DynamoDB table name.
    region: AWS region.
    host: endpoint URL (the embedded moto server), or ``None`` for AWS.
    """
    meta_attrs: dict[str, Any] = {"table_name": table_name, "region": region}
    if host:
        meta_attrs["host"] = host
    meta = type("Meta", (), meta_attrs)
    return type(f"JobModel_{table_name}", (JobModel,), {"Meta": meta})  # type: ignore[return-value]


def _lost_race(exc: PutError | UpdateError) -> bool:
    return exc.cause_response_code == _CONDITION_FAILED


class DynamoLedger:
    """Claims, takeovers and state changes of jobs.

    Parameters
    ----------
    model: a bound job model (see :func:`bound_job_model`).
    lease_s: lease length in seconds.
    """

    def __init__(self, model: type[JobModel], lease_s: int) -> None:
        self._model = model
        self._lease_s = lease_s

    def claim(self, spec: JobSpec, *, now_s: int) -> Claim:
        """Claim a job, or report what holds it.

        One conditional put (``attribute_not_exists(job_key)``); when the row exists, one
        consistent read and, if the job can be taken over (expired lease or transient
        failure), one conditional update fenced on the previous token.

        Raises
        ------
        TransientFailure
            When DynamoDB fails for another reason than a lost race (the SDK's retry
            mode has already retried throttling).
        """
        token = uuid.uuid4().hex
        expires = now_s + self._lease_s
        job_key = spec.job_key
        row = self._model(
            state=JobState.RUNNING.value,
            lease_token=token,
            lease_expires_at_s=expires,
            attempts=1,
            created_at_s=now_s,
            updated_at_s=now_s,
            **dataclasses.asdict(spec),
        )
        try:
            row.save(condition=self._model.job_key.does_not_exist())
            return Claim(ClaimOutcome.RUN, job_key, lease_token=token, lease_expires_at_s=expires, attempts=1)
        except PutError as exc:
            if not _lost_race(exc):
                raise TransientFailure(f"ledger put failed: {exc.cause_response_code}") from exc
        existing = self._get(job_key)
        if existing is None:  # deleted between the put and the read: let SQS bring it back
            raise TransientFailure(f"job {job_key[:12]} vanished during claim")
        if existing.lease_token == token:
            # The SDK retried a put whose first attempt succeeded but whose answer was lost:
            # the row is ours.
            return Claim(ClaimOutcome.RUN, job_key, lease_token=token, lease_expires_at_s=expires, attempts=1)
        outcome = self._outcome(existing, now_s)
        if outcome is not None:
            return outcome
        return self._take_over(existing, token, now_s)

    def _take_over(self, existing: JobModel, token: str, now_s: int) -> Claim:
        model = self._model
        expires = now_s + self._lease_s
        takeable = (model.state == JobState.TRANSIENT_FAILURE.value) | (
            (model.state == JobState.RUNNING.value) & (model.lease_expires_at_s <= now_s)
        )
        fence = (
            model.lease_token == existing.lease_token
            if existing.lease_token is not None
            else model.lease_token.does_not_exist()
        )
        try:
            existing.update(
                actions=[
                    model.state.set(JobState.RUNNING.value),
                    model.lease_token.set(token),
                    model.lease_expires_at_s.set(expires),
                    model.attempts.add(1),
                    model.updated_at_s.set(now_s),
                ],
                condition=fence & takeable,
            )
        except UpdateError as exc:
            if not _lost_race(exc):
                raise TransientFailure(f"ledger update failed: {exc.cause_response_code}") from exc
            # Someone else took it over (or finished it) first.
            latest = self._get(existing.job_key)
            if latest is not None:
                outcome = self._outcome(latest, now_s)
                if outcome is not None:
                    return outcome
            return Claim(ClaimOutcome.BUSY, existing.job_key, lease_expires_at_s=now_s)
        log.info("took over job", extra={"job_key": existing.job_key, "attempts": int(existing.attempts)})
        return Claim(
            ClaimOutcome.RUN,
            existing.job_key,
            lease_token=token,
            lease_expires_at_s=expires,
            attempts=int(existing.attempts),
            took_over=True,
        )

    @staticmethod
    def _outcome(row: JobModel, now_s: int) -> Claim | None:
        """The claim outcome a row implies, or ``None`` when it can be taken over."""
        if row.state == JobState.DONE.value:
            outputs = tuple(OutputRecord.from_json(o) for o in (row.outputs or []))
            return Claim(ClaimOutcome.DONE, row.job_key, manifest_key=row.manifest_key, outputs=outputs)
        if row.state == JobState.PERMANENT_FAILURE.value:
            return Claim(ClaimOutcome.FAILED, row.job_key, failure_reason=row.failure_reason)
        if row.state == JobState.RUNNING.value and int(row.lease_expires_at_s) > now_s:
            return Claim(ClaimOutcome.BUSY, row.job_key, lease_expires_at_s=int(row.lease_expires_at_s))
        return None

    def _get(self, job_key: str) -> JobModel | None:
        try:
            return self._model.get(job_key, consistent_read=True)
        except self._model.DoesNotExist:
            return None
        except GetError as exc:
            raise TransientFailure(f"ledger read failed: {exc.cause_response_code}") from exc

    def get(self, job_key: str) -> JobModel | None:
        """The job's row (consistent read), or ``None``."""
        return self._get(job_key)

    def _finish(self, job_key: str, token: str, actions: list[Any]) -> None:
        model = self._model
        try:
            model(job_key).update(
                actions=actions,
                condition=(model.state == JobState.RUNNING.value) & (model.lease_token == token),
            )
        except UpdateError as exc:
            if _lost_race(exc):
                raise Superseded(job_key) from exc
            raise TransientFailure(f"ledger update failed: {exc.cause_response_code}") from exc

    def complete(self, job_key: str, token: str, *, manifest_key: str, outputs: list[OutputRecord], now_s: int) -> None:
        """Mark the job done; only the holder of ``token`` can.

        Raises
        ------
        Superseded
            If the claim was taken over.
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
                m.updated_at_s.set(now_s),
                m.finished_at_s.set(now_s),
            ],
        )

    def fail_permanently(self, job_key: str, token: str, *, reason: str, detail: str, now_s: int) -> None:
        """Record a permanent failure with its reason code; only the holder of ``token`` can.

        Raises
        ------
        Superseded, TransientFailure
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
            ],
        )

    def release_transient(self, job_key: str, token: str, *, detail: str, now_s: int) -> None:
        """Give the claim back after a transient failure so the next delivery can take over.

        The token stays on the row: the next claim's takeover is fenced on it.

        Raises
        ------
        Superseded, TransientFailure
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
