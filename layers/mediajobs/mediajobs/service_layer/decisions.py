"""The decision log's writer: what the pipeline decided, as records
(:func:`mediajobs.domain.decisions.record`) appended to the :class:`~mediajobs.service_layer.ports.DecisionLog`.

Each decision at the claim boundary is recorded when the delivery acts on its claim (before
the work: a worker that dies while rendering has logged its start), each held job's end
when its work ended (with the CPU seconds and bytes it spent), each moderation outcome with
its rule and model version, each review with who made it. Appending never fails a
delivery: the ledger holds the decision itself; a record that cannot be sent is logged and
counted (the adapter's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mediajobs.domain.decisions import asset_hash, moderation_fields, record
from mediajobs.domain.jobs import Claim, ClaimOutcome, Delivery, JobResult, JobSpec, JobState, ObjectRef
from mediajobs.domain.moderation import ACCEPTED, moderation_of
from mediajobs.service_layer.ports import DecisionLog

#: The action each claim outcome stands for (``RUN``: ``process`` or ``takeover``).
_ACTIONS: dict[ClaimOutcome, str] = {
    ClaimOutcome.DONE: "reuse",
    ClaimOutcome.FAILED: "reuse",
    ClaimOutcome.BUSY: "wait",
    ClaimOutcome.WAITING: "wait",
    ClaimOutcome.HELD: "wait",
}


class DecisionRecorder:
    """Appends the pipeline's decisions to ``log`` (``None``: records are dropped).

    Parameters
    ----------
    log: the decision log (Firehose), or ``None``.
    clock: Unix time, seconds.
    """

    def __init__(self, log: DecisionLog | None, clock: Callable[[], float]) -> None:
        self._log = log
        self._clock = clock

    @property
    def enabled(self) -> bool:
        """Whether records go anywhere."""
        return self._log is not None

    def claimed_all(self, claims: list[tuple[JobSpec, Claim]], source: ObjectRef, delivery: Delivery | None) -> None:
        """Every claim of a plan made at once (:meth:`claimed` each), in one append."""
        self._append([self._claim_record(spec, claim, source, delivery) for spec, claim in claims])

    def claimed(self, spec: JobSpec, claim: Claim, source: ObjectRef, delivery: Delivery | None) -> None:
        """A claim acted on: ``process`` (a first claim), ``takeover`` (of an expired lease,
        a transient failure, a collected job; a split job's join), ``reuse`` (done or failed already),
        ``wait`` (busy, waiting for inputs, held for review) -- or, a claim that commits a
        person's review, that review's outcome (``accepted``, ``rejected``) with who made it."""
        self._append([self._claim_record(spec, claim, source, delivery)])

    def _claim_record(
        self, spec: JobSpec, claim: Claim, source: ObjectRef, delivery: Delivery | None
    ) -> dict[str, Any]:
        if claim.outcome is ClaimOutcome.RUN and claim.review is not None:
            # a person's decision committed: the review's outcome, not a processing start
            review = claim.review
            outcome, by = str(review.get("outcome")), str(review.get("by"))
            return self._of(spec, source, delivery, outcome, prior=claim.prior, reviewer=by)
        if claim.outcome is ClaimOutcome.RUN:  # a split job's join goes on with what its first run began
            action = "takeover" if claim.took_over or claim.split is not None else "process"
        else:
            action = _ACTIONS[claim.outcome]
        return self._of(spec, source, delivery, action, prior=claim.prior)

    def waited(self, spec: JobSpec | None, job_key: str, source: ObjectRef, delivery: Delivery | None) -> None:
        """A delivery that found a job running elsewhere (``wait``), its spec unknown when
        the claim boundary answered before planning."""
        if spec is not None:
            self._append([self._of(spec, source, delivery, "wait", prior="running")])
        else:
            self._append([self._bare(source, delivery, "wait", job=job_key, prior="running")])

    def superseded(self, source: ObjectRef, delivery: Delivery | None) -> None:
        """An event a greater sequencer superseded: nothing decided of any job."""
        self._append([self._bare(source, delivery, "superseded")])

    def ended(self, spec: JobSpec, result: JobResult, source: ObjectRef, delivery: Delivery | None) -> None:
        """A held job's work ended: ``ended`` with its state, CPU seconds and bytes; and, for
        a moderation job, its outcome (``accepted``, ``rejected``, ``review``) with the
        rule and the model version; for an album's promo made under a policy, ``accepted``
        (each frame's crop was judged: ``decisions.promo``)."""
        if result.reused:
            return
        bytes_out = sum(o.bytes for o in result.outputs)
        records = [
            self._of(
                spec,
                source,
                delivery,
                "ended",
                prior="running",
                state=str(result.state),
                cpu_s=result.cpu_s,
                bytes_in=result.bytes_in,
                bytes_out=bytes_out,
            )
        ]
        moderation = moderation_of(result.decisions)
        reviewed = moderation is not None and moderation.get("review") is not None  # told at its claim
        if (
            moderation is not None
            and not reviewed
            and result.state
            in (
                JobState.DONE,
                JobState.PERMANENT_FAILURE,
                JobState.REVIEW,
            )
        ):
            fields = moderation_fields(result.decisions)
            records.append(self._of(spec, source, delivery, str(moderation["outcome"]), prior="running", **fields))
        promo = result.decisions.get("promo") if isinstance(result.decisions, Mapping) else None
        if isinstance(promo, Mapping) and promo.get("policy") and result.state == JobState.DONE:
            # an album's promo: every frame's crop was judged under the policy (what
            # ``decisions affected`` lists with the assets, what its backfill regenerates)
            records.append(
                self._of(spec, source, delivery, ACCEPTED, prior="running", model=promo.get("model_version"))
            )
        self._append(records)

    def _of(
        self, spec: JobSpec, source: ObjectRef, delivery: Delivery | None, action: str, **extra: Any
    ) -> dict[str, Any]:
        return record(
            t=int(self._clock()),
            corr=_correlation(delivery, spec.job_key),
            action=action,
            asset=asset_hash(source.bucket, source.key) if source.key else None,
            content=spec.input_sha256,
            job=spec.job_key,
            recipe=spec.recipe_id,
            recipe_v=spec.recipe_version,
            recipe_hash=spec.recipe_sha256,
            policy=spec.policy_version,
            key_v=spec.key_algorithm,
            **extra,
        )

    def _bare(self, source: ObjectRef, delivery: Delivery | None, action: str, **extra: Any) -> dict[str, Any]:
        return record(
            t=int(self._clock()),
            corr=_correlation(delivery, ""),
            action=action,
            asset=asset_hash(source.bucket, source.key),
            **extra,
        )

    def _append(self, records: list[dict[str, Any]]) -> None:
        if self._log is not None:
            self._log.append(records)


def _correlation(delivery: Delivery | None, job_key: str) -> str:
    """The delivery's correlation id (the S3 request id, a backfill's id), else the job's."""
    if delivery is not None and delivery.correlation:
        return delivery.correlation
    return f"job:{job_key[:16]}" if job_key else "local"
