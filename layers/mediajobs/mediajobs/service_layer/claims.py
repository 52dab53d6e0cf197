"""Plan, settle or claim: steps 2 and 3 of a delivery, the claim boundary.

**Plan** the jobs of a content whose hash is known (:func:`mediajobs.domain.plan.plan_jobs`),
make the version its asset's current one *with those jobs* (their references), then read
their rows in one ``BatchGetItem`` -- the reference is in place before the rows are read,
so a re-upload racing the collection of a job is safe.

**Settle** what the ledger already knows: when every job is done or failed, the duplicate
is answered without reading a byte; a job running elsewhere sends the message back until
its lease ends. Otherwise **claim** every job (one conditional write each) before reading,
so a delivery that loses a claim reads nothing. A job that takes other jobs' outputs is
written ``waiting`` for them instead (:class:`~mediajobs.service_layer.requests.JobRequests`),
and claimed once they are done.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from mediajobs.domain.errors import (
    DISK_BYTES,
    TOO_LARGE,
    DeadlineReached,
    JobBusy,
    PermanentFailure,
    Superseded,
    TransientFailure,
    in_bytes,
)
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    Decision,
    Delivery,
    JobResult,
    JobSpec,
    JobState,
    JobView,
    ObjectRef,
    SourceResult,
    decide,
    refused,
    standing_claim,
)
from mediajobs.domain.parts import parent_key, part_specs, progress_of
from mediajobs.domain.plan import PlannedJob, Where, media_of_rows, plan_jobs
from mediajobs.domain.recipes import Recipe
from mediajobs.service_layer.assets import EventSuperseded, KeptAsset
from mediajobs.service_layer.decisions import DecisionRecorder
from mediajobs.service_layer.identify import Identified
from mediajobs.service_layer.lease import lease_until
from mediajobs.service_layer.ports import Ledger
from mediajobs.service_layer.requests import JobRequests
from mediajobs.settings import Settings

log = logging.getLogger(__name__)


class DiskUsage(Protocol):
    """What the claims read of :func:`shutil.disk_usage`: sizes in bytes."""

    @property
    def total(self) -> int: ...
    @property
    def free(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class Plan:
    """The jobs of one content, and what the ledger knows of them.

    Attributes
    ----------
    original: the original identified.
    sha256: the content's SHA-256.
    media: its media type; ``None`` while unknown (``jobs`` then holds every media type's).
    size_bytes: its size, bytes (``HeadObject``'s before reading, the bytes read after).
    jobs: one per active recipe, each after the jobs whose outputs it takes.
    views: the rows the ledger holds of ``jobs``, by job key (read once).
    """

    original: Identified
    sha256: str
    media: str | None
    size_bytes: int
    jobs: tuple[PlannedJob, ...]
    views: Mapping[str, JobView]


@dataclasses.dataclass(frozen=True)
class Claimed:
    """What the claim boundary found for a content.

    Attributes
    ----------
    plan: its jobs (``None`` while the content is unknown: its bytes are needed first).
    claims: one per job of the plan, in its order (lazy when settled: a claim that ends
        an exhausted job is made just before its job is reported).
    settled: no claim needs the original's bytes (every job settled elsewhere, or a staged
        manifest to adopt).
    logged: the claims were appended to the decision log as they were made
        (:meth:`Claims.claim_all`), not as their jobs run (a settled delivery's).
    """

    plan: Plan | None
    claims: Iterable[Claim] = ()
    settled: bool = False
    logged: bool = False


def needs_original(claim: Claim) -> bool:
    """Whether running ``claim`` reads the original: held, with no staged manifest to adopt."""
    return claim.outcome is ClaimOutcome.RUN and claim.staged_manifest is None


class Claims:
    """Steps 2 and 3 of a delivery (see the module docstring).

    Parameters
    ----------
    settings: lease, attempts, image job time, work folder, prefixes, policy version.
    ledger: the job ledger.
    recipes: the active recipes by media type.
    requests: jobs in steps: waiting jobs written, their inputs' ends told.
    clock: Unix time in seconds.
    disk_usage: sizes of the disk holding a folder (:func:`shutil.disk_usage`).
    decisions: the decision log's writer: each claim is appended as soon as it is written,
        before anything else the delivery does (default: records dropped).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        ledger: Ledger,
        recipes: Mapping[str, Sequence[Recipe]],
        requests: JobRequests,
        clock: Callable[[], float],
        disk_usage: Callable[[str], DiskUsage] = shutil.disk_usage,
        decisions: DecisionRecorder | None = None,
    ) -> None:
        self._decisions = decisions or DecisionRecorder(None, clock)
        self._settings = settings
        self._ledger = ledger
        self.recipes = recipes
        self._requests = requests
        self.clock = clock
        self._disk_usage = disk_usage

    # -- plan ------------------------------------------------------------------------------

    def known(self, original: Identified, delivery: Delivery | None, asset: KeptAsset) -> Claimed | SourceResult:
        """Plan, then settle or claim, when the content is known before reading: the plan's
        version made current (``pending`` without jobs when the content is unknown).

        Returns
        -------
        Claimed | SourceResult
            What was found (with no plan: the bytes are needed to know the content), or a
            refusal (``too_large`` for the work folder's disk).

        Raises
        ------
        JobBusy
            A job runs elsewhere, or another delivery claimed it first.
        EventSuperseded
            A greater sequencer of the key is current.
        TransientFailure
            No room on the work folder's disk now.
        """
        plan = self.plan(original, original.sha256, original.media, asset)
        if not asset.attached:  # the version is pending (its jobs attached once its bytes are known)
            self.current(original, asset)
        if plan is None or plan.media is None:
            return self._space(original, plan) or Claimed(plan)
        return self.settle_or_claim(plan, delivery, asset)

    def plan(self, original: Identified, sha256: str | None, media: str | None, asset: KeptAsset) -> Plan | None:
        """The jobs of a content whose hash is known, and their rows (one ``BatchGetItem``);
        an unknown media type is learnt from the asset, else from a row's recipe. ``None``
        without a hash.

        The asset's version is made current with the jobs before their rows are read (the
        reference in place first: ``docs/assets.md``, "Collection"); when the media type
        is learnt from the rows, the rows are read again after that.

        Raises
        ------
        EventSuperseded
            A greater sequencer of the key is current.
        """
        if sha256 is None:
            return None
        media = media or asset.media_of(sha256)
        size = original.head.size_bytes
        jobs = self.jobs(original, sha256, media)
        if media is not None:
            self.current(original, asset, Plan(original, sha256, media, size, jobs, {}))
        views = self._ledger.find([job.key for job in jobs])
        if media is None:
            media = media_of_rows(views, self.recipes)
            jobs = self.jobs(original, sha256, media)
            if media is not None and self.current(original, asset, Plan(original, sha256, media, size, jobs, {})):
                views = self._ledger.find([job.key for job in jobs])  # after the reference
        return Plan(original, sha256, media, size, jobs, views)

    def jobs(self, original: Identified, sha256: str, media: str | None) -> tuple[PlannedJob, ...]:
        """The jobs of the content ``sha256`` (:func:`~mediajobs.domain.plan.plan_jobs`)."""
        s = self._settings
        where = Where(original.ref.bucket, original.ref.key, s.derivatives_prefix, s.policy_version, s.keys)
        return plan_jobs(sha256, media, self.recipes, where)

    def current(
        self, original: Identified, asset: KeptAsset, plan: Plan | None = None, claims: Iterable[Claim] = ()
    ) -> bool:
        """Make the original's version its asset's current one, with ``plan``'s jobs
        (``None``: the content not known yet); whether the jobs were attached by this call.

        Raises
        ------
        EventSuperseded
            A greater sequencer is current (``claims`` held are given back first).
        """
        head = original.head
        jobs = None if plan is None else [(job.recipe.ref, job.key) for job in plan.jobs]
        try:
            return asset.current(
                head.version_id,
                head.etag,
                head.size_bytes,
                sha256=plan.sha256 if plan is not None else None,
                media=plan.media if plan is not None else None,
                jobs=jobs,
                checksum_sha256=head.sha256 is not None,
            )
        except EventSuperseded as superseded:
            self.release_all(claims, superseded)
            raise

    # -- settle or claim ---------------------------------------------------------------------

    def settle_or_claim(self, plan: Plan, delivery: Delivery | None, asset: KeptAsset) -> Claimed | SourceResult:
        """For a content whose jobs are known: answer from the ledger (:meth:`settle`), else
        (the disk checked) claim every job before reading, so that a delivery that loses a
        claim reads nothing.

        Raises
        ------
        JobBusy
            A job is running elsewhere, or another delivery claimed it first.
        """
        plan = self.finish_telling(plan, delivery)
        settled = self.settle(plan, delivery)
        if settled is not None:
            return settled
        refusal = self._space(plan.original, plan)
        if refusal is not None:
            return refusal
        claims = self.claim_all(plan, delivery, asset)
        return Claimed(plan, claims, settled=not any(needs_original(claim) for claim in claims), logged=True)

    def finish_telling(self, plan: Plan, delivery: Delivery | None) -> Plan:
        """Finish what a delivery that died or was throttled half-way through the plan's
        jobs in steps left (:meth:`JobRequests.finish`: the jobs of the plan need no request,
        this delivery runs them), and read the rows again. ``plan`` as it is when nothing
        was left (no request).

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's, or a job request not sent.
        """
        in_plan = frozenset(job.key for job in plan.jobs)
        if not self._requests.finish(plan.views, delivery=delivery, in_plan=in_plan):
            return plan
        return dataclasses.replace(plan, views=self._ledger.find([job.key for job in plan.jobs]))

    def settle(self, plan: Plan, delivery: Delivery | None) -> Claimed | None:
        """Answer a duplicate from the ledger alone, when none of its jobs needs the bytes.

        Returns ``None`` when some job must run (missing, or can be taken over). A job past
        its attempts ends with one conditional write, unless its holder staged the manifest
        meanwhile: then the claim runs, to adopt it; the jobs waiting for it are then told
        it failed (:meth:`ended`).

        Raises
        ------
        JobBusy
            When a job is running elsewhere, or waits for an input that is (the earliest
            lease end is reported). A job waiting for inputs that this delivery ends (past
            their attempts) is not busy: no other delivery would end them.
        """
        now = int(self.clock())
        decisions: dict[str, Decision] = {}
        for job in plan.jobs:
            view = plan.views.get(job.key)
            if view is None:
                return None
            decisions[job.key] = decide(view, now_s=now, max_attempts=self._settings.max_attempts)
        if any(d is Decision.TAKE_OVER for d in decisions.values()):
            return None
        busy: dict[str, JobView] = {}
        for job in plan.jobs:  # in the plan's order: a job after the jobs whose outputs it takes
            view = plan.views[job.key]
            if decisions[job.key] is Decision.BUSY or (
                decisions[job.key] is Decision.WAIT
                and (  # a split job's parts end it: busy only while its splitter sends their requests
                    view.lease_expires_at_s > now
                    if view.split is not None
                    else any(u in busy or u not in decisions for u in view.pending)
                )
            ):
                busy[job.key] = view
        if busy:  # the earliest lease of a job running elsewhere (or of a split's requests)
            holders = [v for k, v in busy.items() if decisions[k] is Decision.BUSY or v.split is not None] or list(
                busy.values()
            )
            first = min(holders, key=lambda v: v.lease_expires_at_s)
            log.info("job is running elsewhere", extra={"job_key": first.job_key, "source_key": plan.original.ref.key})
            raise JobBusy(first.job_key, first.lease_expires_at_s)
        claims = (  # lazily: each claim is made just before its job runs
            self._ledger.claim(job.spec, now_s=now, lease_until_s=self.lease_until(delivery), seen=view)
            if decisions[job.key] is Decision.EXHAUST
            else standing_claim(view)
            for job in plan.jobs
            for view in [plan.views[job.key]]
        )
        return Claimed(plan, claims, settled=True)

    def claim_all(self, plan: Plan, delivery: Delivery | None, asset: KeptAsset) -> list[Claim]:
        """Claim every job of a content (none is started without time for all of them) --
        a job that takes other jobs' outputs is written waiting for them instead -- and
        record what the claims found in the asset (held: ``processing``).

        When one claim fails, the claims made before it are given back first, so none waits
        for its lease to end.

        Raises
        ------
        DeadlineReached
            Too little of the invocation is left for the jobs.
        PermanentFailure, TransientFailure
            As the ledger's.
        """
        needed_s = self._settings.image_job_s * len(plan.jobs) + self._settings.deadline_margin_s
        if delivery is not None and delivery.remaining_s() < needed_s:
            raise DeadlineReached(f"{delivery.remaining_s():.1f} s left, the jobs need {needed_s} s")
        now, until = int(self.clock()), self.lease_until(delivery)
        claims: list[Claim] = []
        try:
            for job in plan.jobs:
                seen = plan.views.get(job.key)
                if job.spec.upstream:  # written waiting for its inputs, claimed once they are done
                    held = {claim.job_key: claim for claim in claims}
                    claims.append(self._requests.wait(job.spec, plan.views, held, lease_until_s=until))
                else:
                    claims.append(self._ledger.claim(job.spec, now_s=now, lease_until_s=until, seen=seen))
            made = [(job.spec, claim) for job, claim in zip(plan.jobs, claims, strict=True)]
            self._decisions.claimed_all(made, plan.original.ref, delivery)  # before anything can die
            asset.claimed(claims)
        except (PermanentFailure, TransientFailure) as exc:
            self.release_all(claims, exc)
            raise
        return claims

    def claim(
        self,
        job: PlannedJob,
        delivery: Delivery | None,
        *,
        seen: JobView | None = None,
        source: ObjectRef | None = None,
    ) -> Claim:
        """Claim one job now (its row read first, unless ``seen``): a job whose inputs a
        delivery just ended, or one a job request names; logged for ``source`` (default: the
        original its spec names).

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's.
        """
        seen = seen if seen is not None else self._ledger.get(job.key)
        claim = self._ledger.claim(job.spec, now_s=self.now_s(), lease_until_s=self.lease_until(delivery), seen=seen)
        where = source or ObjectRef(job.spec.source_bucket, job.spec.source_key)
        self._decisions.claimed(job.spec, claim, where, delivery)
        return claim

    def row(self, job_key: str) -> JobView | None:
        """The job's row (a consistent read), or ``None``."""
        return self._ledger.get(job_key)

    def is_active(self, spec: JobSpec) -> bool:
        """Whether the recipe (id and version) a job's row names is among the active ones."""
        return any(
            (r.id, r.version) == (spec.recipe_id, spec.recipe_version) for rs in self.recipes.values() for r in rs
        )

    def recipe(self, spec: JobSpec) -> Recipe:
        """The recipe a job's row names, among the active ones.

        Raises
        ------
        TransientFailure
            No active recipe is it, or one of its id and version hashes otherwise (the
            deployment's fault, not the input's: the request is redelivered, then
            dead-lettered and alarmed on).
        """
        for recipe in (r for rs in self.recipes.values() for r in rs):
            if (recipe.id, recipe.version) == (spec.recipe_id, spec.recipe_version):
                if recipe.sha256 != spec.recipe_sha256:
                    raise TransientFailure(f"recipe {spec.recipe_ref} changed without a new version")
                return recipe
        raise TransientFailure(f"recipe {spec.recipe_ref} is not active here")

    def ended(self, result: JobResult, delivery: Delivery | None, in_plan: frozenset[str]) -> None:
        """A job this delivery ended: tell the jobs waiting for it (``in_plan``: the jobs this
        delivery runs next itself, which need no request). A job this delivery's claim ended
        past its attempts carries no row: it is read (one ``GetItem``) for them.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`JobRequests.tell`.
        """
        row = result.row
        if row is None and result.state == JobState.PERMANENT_FAILURE and not result.reused:
            row = self._ledger.get(result.job_key)  # ended by this delivery's claim
        if row is not None and row.waiting:
            self._requests.tell(row, delivery=delivery, in_plan=in_plan, again=False)

    def request(self, jobs: Sequence[PlannedJob], delivery: Delivery | None = None) -> list[str]:
        """Request ``jobs`` (no S3 event causes them): :meth:`JobRequests.request`."""
        return self._requests.request([job.spec for job in jobs], delivery)

    def lane(self, jobs: Sequence[PlannedJob], queue_arn: str) -> dict[str, JobView]:
        """Request ``jobs`` on a backfill's lane: :meth:`JobRequests.lane`."""
        return self._requests.lane([job.spec for job in jobs], queue_arn)

    def resend(self, job_key: str, queue_arn: str) -> None:
        """Send a job's request to ``queue_arn`` again: :meth:`JobRequests.resend`."""
        self._requests.resend(job_key, queue_arn)

    def find(self, job_keys: Sequence[str]) -> Mapping[str, JobView]:
        """The rows of ``job_keys`` that exist (strongly consistent)."""
        return self._ledger.find(list(job_keys))

    def finish_split(self, row: JobView, delivery: Delivery | None) -> None:
        """Send again the requests of the parts of the waiting split job ``row`` still
        ``requested``, once its splitter's time to send them is over
        (:meth:`JobRequests.finish`): a split job a job request ran (a backfill's) has no
        original's delivery to do it.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`JobRequests.resume`.
        """
        self._requests.finish({row.job_key: row}, delivery=delivery)

    def part_keys(self, row: JobView) -> list[str]:
        """The job keys of the parts the split job ``row`` was split into (none when it
        was not)."""
        if row.split is None or row.spec is None:
            return []
        return [
            spec.job_key
            for spec in part_specs(row.spec, row.split, self._settings.derivatives_prefix, self._settings.keys_for)
        ]

    def wanted(self, part: JobSpec) -> bool:
        """Whether the split job ``part`` is a part of still waits for it (one ``GetItem``):
        a request for a part its video no longer waits for -- joined, failed, or redelivered
        after the part was collected -- renders nothing."""
        parent = self._ledger.get(parent_key(part, self._settings.keys_for))
        return parent is not None and parent.state == JobState.WAITING and part.job_key in parent.pending

    def parents(self, part: JobSpec) -> list[tuple[JobView, float]]:
        """The split job ``part`` is a part of, as its row stands, with its progress (the
        share of its parts' seconds done: :func:`~mediajobs.domain.parts.progress_of`);
        empty when it has no row or was never split.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's.
        """
        parent = self._ledger.get(parent_key(part, self._settings.keys_for))
        if parent is None or parent.split is None or parent.spec is None:
            return []
        specs = part_specs(parent.spec, parent.split, self._settings.derivatives_prefix, self._settings.keys_for)
        rows = self._ledger.find([spec.job_key for spec in specs])
        done = [spec.job_key in rows and rows[spec.job_key].state == JobState.DONE for spec in specs]
        return [(parent, progress_of(parent.split, done))]

    def tell(self, row: JobView, delivery: Delivery | None) -> None:
        """Tell the jobs still waiting for ``row`` (an ended job) again: a teller that died
        half-way is finished."""
        self._requests.tell(row, delivery=delivery)

    def release_all(self, claims: Iterable[Claim], why: Exception) -> None:
        """Give back every claim this delivery holds (the next delivery takes them over)."""
        for claim in claims:
            if claim.outcome is ClaimOutcome.RUN and claim.lease_token:
                self.release(claim.job_key, claim.lease_token, why)

    def release(self, job_key: str, token: str, why: Exception) -> None:
        """Give back one claim (failures are logged: the lease runs out by itself)."""
        log.warning("transient failure: %r", why, extra={"job_key": job_key})
        try:
            self._ledger.release(job_key, token, detail=repr(why), now_s=int(self.clock()))
        except (PermanentFailure, TransientFailure, Superseded) as release_error:
            log.warning("could not release the claim: %r", release_error, extra={"job_key": job_key})

    def now_s(self) -> int:
        """The clock, whole Unix seconds."""
        return int(self.clock())

    def lease_until(self, delivery: Delivery | None) -> int:
        """When a lease taken now ends (:func:`~mediajobs.service_layer.lease.lease_until`)."""
        return lease_until(self.clock(), self._settings.lease_s, delivery)

    def _space(self, original: Identified, plan: Plan | None) -> SourceResult | None:
        """Refuse an original larger than the work folder's whole disk (Lambda's ``/tmp``,
        ``EphemeralStorage``): its download would fail on every try.

        Raises
        ------
        TransientFailure
            When it fits the disk but not its free space now.
        """
        size, work_dir = original.head.size_bytes, self._settings.work_dir
        disk = self._disk_usage(work_dir)
        if size > disk.total:
            detail = DISK_BYTES.detail(in_bytes(size), f"the {in_bytes(disk.total)} of the disk of {work_dir}")
            media = plan.media if plan is not None else None
            return refused(original.ref, TOO_LARGE, detail, sha256=original.sha256, size_bytes=size, media=media)
        if size > disk.free:
            raise TransientFailure(f"{size} bytes > {disk.free} bytes free in {work_dir} now")
        return None
