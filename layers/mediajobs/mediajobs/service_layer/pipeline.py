"""The use case: one delivery, in order (:meth:`Pipeline.process`).

0. **Order** (:class:`~mediajobs.service_layer.assets.AssetKeeper`): the asset of the key is
   read. An event whose sequencer is lower than the stored one is superseded: acknowledged
   with nothing read, rendered or counted. The same event again, for a version that ended
   (``ready``, or failed for good), is answered from that one read.
1. **Identify** the original without reading it (:mod:`~mediajobs.service_layer.identify`).
2. **Plan** its jobs and 3. **settle or claim** them (:mod:`~mediajobs.service_layer.claims`):
   a duplicate is answered from the ledger; otherwise every job is claimed before reading.
4. **Read** the original when a job needs it (:mod:`~mediajobs.service_layer.reading`).
5. **Run** each job under its lease and 6. **commit** it (:mod:`~mediajobs.service_layer.runner`,
   :mod:`~mediajobs.service_layer.commit`); a job whose inputs this delivery just ended is
   claimed and run after them, and the jobs waiting for a job are told it ended
   (:mod:`~mediajobs.service_layer.requests`).
7. **Report**: the asset records each job's end, the observer is told.

A refusal (bad input found before any job exists) is a value a step returns, which ends
the delivery; the asset's version fails with its reason. ``Object Deleted`` events go to
:meth:`Pipeline.remove`, job requests (not S3 events) to :meth:`Pipeline.run_request`.

The caller (the Lambda handler) acknowledges the SQS message only after this returns:
nothing is acknowledged before its commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from mediajobs.domain.assets import JOINED_PART, Deleted, DeletionEffect
from mediajobs.domain.errors import (
    REJECTED,
    DeadlineReached,
    DeliveryLost,
    JobBusy,
    MediaJobsError,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    ContentInput,
    Delivery,
    JobResult,
    JobState,
    JobView,
    ObjectRef,
    SourceResult,
    SourceState,
    refused,
)
from mediajobs.domain.parts import parent_key
from mediajobs.domain.plan import PlannedJob
from mediajobs.service_layer.assets import AssetKeeper, EventSuperseded, KeptAsset
from mediajobs.service_layer.claims import Claimed, Claims
from mediajobs.service_layer.decisions import DecisionRecorder
from mediajobs.service_layer.identify import Identify
from mediajobs.service_layer.observer import PipelineObserver
from mediajobs.service_layer.ports import Queue
from mediajobs.service_layer.reading import Reader, Work
from mediajobs.service_layer.runner import JobRunner
from mediajobs.settings import Settings

log = logging.getLogger(__name__)


class Pipeline:
    """Processes the originals S3 events name, and the jobs requests name.

    Parameters
    ----------
    identify, claims, reader, runner: the steps of a delivery.
    assets: the asset records' keeper.
    observer: hooks (``source_finished``; the steps have their own).
    decisions: the decision log's writer (default: records dropped).
    """

    def __init__(
        self,
        *,
        identify: Identify,
        claims: Claims,
        reader: Reader,
        runner: JobRunner,
        assets: AssetKeeper,
        observer: PipelineObserver,
        decisions: DecisionRecorder | None = None,
    ) -> None:
        self._decisions = decisions or DecisionRecorder(None, time.time)
        self._identify = identify
        self._claims = claims
        self._reader = reader
        self._runner = runner
        self._assets = assets
        self.observer = observer

    @property
    def settings(self) -> Settings:
        """The settings the worker runs with."""
        return self._identify.settings

    @property
    def queue(self) -> Queue | None:
        """The queue its records come from (the delivery policy hands over and returns them)."""
        return self._runner.queue

    def process(self, ref: ObjectRef, delivery: Delivery | None = None) -> SourceResult:
        """Process the original an ``Object Created`` event names (the module's order):
        ``done``, ``permanent_failure`` (with its reason), ``ignored`` (not an original),
        ``superseded`` (a greater sequencer of its key is current: nothing read or rendered)
        or ``split`` (a long video's job waits for its parts, every one requested: the join
        ends the asset; ``docs/video.md``).

        Raises ``JobBusy`` (another worker holds a job, or the first read: redeliver after
        its lease), ``TransientFailure`` (redeliver; ``DeadlineReached``: at once) or
        ``Superseded`` (this worker's claim was taken over while it worked).
        """
        if not self._identify.ours(ref):
            return SourceResult(ref, SourceState.IGNORED)
        asset: KeptAsset | None = None
        try:
            asset = self._assets.track(ref)  # 0. order: a late event reads nothing
            if (answer := asset.answer(ref)) is not None:  # a finished version's duplicate: one read
                return self._told(answer)
            original = self._identify(ref, delivery, asset)  # 1. identify
            if isinstance(original, SourceResult):
                return self._ended(asset, original)
            try:
                known = self._claims.known(original, delivery, asset)  # 2-3. plan, settle or claim
            except JobBusy as busy:
                self._decisions.waited(None, busy.job_key, ref, delivery)
                raise
            if isinstance(known, SourceResult):
                return self._ended(asset, known)
            if known.settled:  # nothing needs the bytes
                return self._ended(asset, self._run(known, delivery, None, asset))
            with self._reader.read(original, known, delivery, asset) as read:  # 4. read
                if isinstance(read, SourceResult):
                    return self._ended(asset, read)
                return self._ended(asset, self._run(read.claimed, delivery, read.work, asset))  # 5-7.
        except EventSuperseded as superseded:
            log.info("superseded: %s", superseded, extra={"source_key": ref.key})
            self._decisions.superseded(ref, delivery)
            return self._told(SourceResult(ref, SourceState.SUPERSEDED))
        except PermanentFailure as failure:  # the ledger or the index refused a value derived
            return self._ended(asset, refused(ref, failure.reason, failure.detail))  # from the input

    def _run(self, claimed: Claimed, delivery: Delivery | None, work: Work | None, asset: KeptAsset) -> SourceResult:
        """Run each job of ``claimed`` in its plan's order, record their ends in the asset,
        and summarise: the first failed job's reason is the original's.

        One job's transient failure, lost claim or busy holder does not hold up the others
        (their claims are taken): each runs, and the first such outcome is raised after
        them -- unless the invocation's time or the message is gone, when the claims left
        are given back at once instead.
        """
        plan = claimed.plan
        assert plan is not None, "a delivery runs the jobs of a plan"
        source = plan.original.ref
        result = SourceResult(
            source,
            SourceState.DONE,
            media=plan.media,
            sha256=plan.sha256,
            size_bytes=plan.size_bytes,
            bytes_read=work.size_bytes if work is not None else 0,
        )
        produced: dict[str, JobResult] = {}
        in_plan = frozenset(job.key for job in plan.jobs)
        interrupted: MediaJobsError | None = None
        for job, claim in zip(plan.jobs, claimed.claims, strict=True):
            if isinstance(interrupted, DeadlineReached | DeliveryLost):
                self._claims.release_all([claim], interrupted)
                continue
            try:
                if claim.outcome is ClaimOutcome.WAITING and _held(job, produced):
                    # its moderation job waits for a person: so does it (told when decided)
                    result.jobs.append(JobResult(job.recipe.ref, job.key, JobState.WAITING, reused=True))
                    continue
                if claim.outcome is ClaimOutcome.WAITING:  # its inputs may have ended just now
                    claim = self._claims.claim(job, delivery, source=source)
                    asset.claimed([claim])
                elif not claimed.logged:  # a settled delivery's claims are made as its jobs run
                    self._decisions.claimed(job.spec, claim, source, delivery)
                ended = self._runner.run(job, claim, source, delivery, work, asset, produced)
                self._decisions.ended(job.spec, ended, source, delivery)
                produced[job.key] = ended
                self._joined(claim, ended)
                self._claims.ended(ended, delivery, in_plan)  # told before the asset records it:
                result.jobs.append(ended)  # else a redelivery is answered from the asset, untold
            except (TransientFailure, Superseded, JobBusy) as exc:
                if interrupted is None or isinstance(exc, DeadlineReached | DeliveryLost):
                    interrupted = exc
        asset.finished([j for j in result.jobs if j.state != JobState.WAITING])  # a split one: processing
        if interrupted is not None:
            raise interrupted
        failed = [j for j in result.jobs if j.state not in (JobState.DONE, JobState.WAITING, JobState.REVIEW)]
        if failed:
            rejected = failed[0].reason == REJECTED
            result.state = SourceState.REJECTED if rejected else SourceState.PERMANENT_FAILURE
            result.reason, result.detail = failed[0].reason, failed[0].detail
        elif any(j.state == JobState.REVIEW for j in result.jobs):
            result.state = SourceState.REVIEW
        elif any(j.state == JobState.WAITING for j in result.jobs):
            result.state = SourceState.SPLIT
        return result

    def _ended(self, asset: KeptAsset | None, result: SourceResult) -> SourceResult:
        """Report a delivery's result; a refusal before any job fails the asset's version
        with its reason (an asset that cannot be stored is logged: the refusal stands; a
        greater sequencer current meanwhile makes the event superseded).

        A permanent failure raised outside a job's own handling -- the ledger or the source
        index refusing a value derived from the input, ``unstorable_input`` -- is such a
        refusal too: retrying cannot help."""
        if asset is not None and result.state is SourceState.PERMANENT_FAILURE and not result.jobs:
            log.warning(
                "permanent failure before any job: %s (%s)",
                result.reason,
                result.detail,
                extra={"source_key": result.source.key},
            )
            source = result.source
            try:
                asset.refused(
                    source.version_id, source.etag, source.size_bytes, reason=result.reason or "", detail=result.detail
                )
            except PermanentFailure as failure:
                log.warning("the refusal is not recorded in the asset: %s", failure, extra={"source_key": source.key})
            except EventSuperseded as superseded:
                log.info("superseded: %s", superseded, extra={"source_key": source.key})
                result = SourceResult(source, SourceState.SUPERSEDED)
        return self._told(result)

    def _joined(self, claim: Claim, ended: JobResult) -> None:
        """A split job this delivery joined (or failed joining): its parts are wanted by
        nothing now, and are released to the collection
        (:meth:`~mediajobs.service_layer.assets.AssetKeeper.parts_joined`)."""
        if claim.split is not None and ended.row is not None and not ended.reused:
            self._assets.parts_joined(self._claims.part_keys(ended.row))

    def _release_parts_again(self, parent: JobView) -> None:
        """Release the parts of an ended split job unless its join did (its last part has a
        ``joined`` candidate, or was collected already): one ``Query``, and a ``GetItem``
        when it has none, so that a duplicate request of a join writes nothing."""
        keys = self._claims.part_keys(parent)
        if not keys or self._assets.released(keys[-1], JOINED_PART):
            return
        last = self._claims.row(keys[-1])
        if last is None or last.state in (JobState.COLLECTING, JobState.COLLECTED):
            return
        self._assets.parts_joined(keys)

    def _told(self, result: SourceResult) -> SourceResult:
        self.observer.source_finished(result)
        return result

    def remove(self, deleted: Deleted, delivery: Delivery | None = None) -> SourceResult:
        """Apply an ``Object Deleted`` event to its asset (``docs/assets.md``, "Deletes as
        S3 sends them"; :func:`~mediajobs.domain.assets.deletion_effect` decides).

        A delete marker, or the object of an unversioned bucket deleted, makes the asset
        ``deleted`` (its references dropped in one transaction). A version deleted for good
        -- noncurrent, current, or a delete marker -- has the key looked at again
        (``HeadObject`` without a version: the asset cannot tell which it was) and what S3
        serves now processed as if created by this event: the version current already
        (only the sequencer moves), or the previous one (its jobs exist: no render); with
        nothing left, the asset is ``deleted``.

        Returns
        -------
        SourceResult
            ``deleted``, ``superseded`` (a greater sequencer is current), ``ignored``
            (outside ``originals/``), or -- a previous version made current again -- what
            :meth:`process` returns for it.

        Raises
        ------
        TransientFailure
            As :meth:`process` (the asset transaction, ``HeadObject``).
        """
        ref = ObjectRef(deleted.bucket, deleted.key, deleted.version_id, sequencer=deleted.sequencer)
        if not self._identify.ours(ref):
            return SourceResult(ref, SourceState.IGNORED)
        effect, _ = self._assets.deletion(deleted)
        extra = {"source_key": ref.key, "deletion_type": deleted.deletion_type, "effect": str(effect)}
        log.info("object deleted: %s", effect, extra=extra)
        state = SourceState.DELETED
        if effect is DeletionEffect.SUPERSEDED:
            state = SourceState.SUPERSEDED
        elif effect is DeletionEffect.LOOK_AGAIN and (head := self._identify.current(ref)) is not None:
            again = ObjectRef(
                ref.bucket, ref.key, head.version_id, head.size_bytes, head.etag, sequencer=deleted.sequencer
            )
            return self.process(again, delivery)
        elif effect in (DeletionEffect.DELETED, DeletionEffect.LOOK_AGAIN) and not self._assets.delete(deleted):
            state = SourceState.SUPERSEDED
        return self._told(SourceResult(ref, state))

    def _served(self, ref: ObjectRef) -> bool:
        """Whether S3 serves ``ref``'s version as the key's current one (a ``HeadObject``)."""
        head = self._identify.current(ref)
        return head is not None and (ref.version_id is None or head.version_id in (None, ref.version_id))

    def request(self, jobs: Sequence[PlannedJob], delivery: Delivery | None = None) -> list[str]:
        """Request jobs that no S3 event causes (a backfill, the segments of a long video):
        each is written (``requested``, or ``waiting`` for its inputs) unless it exists, and
        a job request is sent for each requested now; the job keys sent for. Each runs once,
        by :meth:`run_request`, however often its request is delivered.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ledger's.
        """
        return self._claims.request(jobs, delivery)

    def run_request(self, job_key: str, delivery: Delivery | None = None) -> SourceResult:
        """Run the job a job request names (:func:`~mediajobs.service_layer.requests.request_body`),
        from its row: claim it, read its inputs, render, commit, tell the jobs waiting for it.

        A split video's part runs only while its video waits for it (:meth:`Claims.wanted`),
        reads the original by byte ranges, and sets its video's assets' progress; a video's
        job split by this run ends ``split``; its join releases the parts to the collection.

        Returns
        -------
        SourceResult
            ``done`` or ``permanent_failure`` with the job's result; ``split`` for a job this
            run split; ``ignored`` for a job with no row, one still waiting for its inputs
            (its last input requests it again), or a part no video waits for; a job whose
            original is gone or changed is given back and ends ``permanent_failure``
            ``source_missing`` for this request only.

        Raises
        ------
        JobBusy, TransientFailure, Superseded
            As :meth:`process`; ``JobBusy`` too for a split job whose splitter may still be
            requesting its parts (its window closes at its ``lease_expires_at_s``).
        """
        view = self._claims.row(job_key)
        if view is None or view.spec is None:
            log.warning("a job request names no job", extra={"job_key": job_key})
            return self._told(SourceResult(ObjectRef("", ""), SourceState.IGNORED))
        spec = view.spec
        content = next((i for i in spec.inputs.values() if isinstance(i, ContentInput)), None)
        source = ObjectRef(spec.source_bucket, spec.source_key)
        if view.waiting and view.state in (JobState.DONE, JobState.PERMANENT_FAILURE):
            self._claims.tell(view, delivery)  # a teller that died half-way is finished
        if view.split is not None and view.state in (JobState.DONE, JobState.PERMANENT_FAILURE):
            self._release_parts_again(view)  # a joiner that died before releasing them
        if not self._claims.is_active(spec) and not self._assets.referenced(job_key):
            # A superseded backfill's job no asset wants any more: acknowledged, not retried
            # into the dead-letter queue (one an asset still wants is this deployment's fault).
            log.info("a job request of an inactive recipe nothing references", extra={"job_key": job_key})
            return self._told(SourceResult(source, SourceState.IGNORED))
        if spec.part is not None and view.state != JobState.DONE and not self._claims.wanted(spec):
            log.info("a job request of a part its video no longer waits for", extra={"job_key": job_key})
            return self._told(SourceResult(source, SourceState.IGNORED))
        job = PlannedJob(self._claims.recipe(spec), spec)
        claim = self._claims.claim(job, delivery, seen=view)
        if claim.outcome is ClaimOutcome.WAITING:
            if view.split is not None and claim.lease_expires_at_s > self._claims.now_s():
                raise JobBusy(job_key, claim.lease_expires_at_s)  # its splitter may still be requesting
            if view.split is not None:  # a splitter that died before requesting its parts is finished
                self._claims.finish_split(view, delivery)
            return self._told(SourceResult(source, SourceState.IGNORED))
        if content is not None and claim.outcome is ClaimOutcome.RUN:  # the bytes are needed:
            # a copy an asset holds and S3 still serves (HeadObject), only now
            via = (
                parent_key(spec, self.settings.keys_for) if spec.part is not None else None
            )  # a part: its video's assets
            source = next((ref for ref in self._assets.sources_for(spec, via) if self._served(ref)), source)
        ranged = spec.part is not None or claim.split is not None  # a split video's part, or its join
        with self._reader.fetch(source, content, claim, delivery, ranged=ranged) as work:
            if isinstance(work, SourceResult):
                return self._told(work)
            ended = self._runner.run(job, claim, source, delivery, work, None, {})
        self._decisions.ended(spec, ended, source, delivery)
        if ended.state == JobState.WAITING:  # split: its parts request it again when they end
            return self._told(SourceResult(source, SourceState.SPLIT, sha256=spec.input_sha256, jobs=[ended]))
        self._claims.ended(ended, delivery, frozenset())
        if spec.part is None:
            self._assets.rolled(ended)  # the assets waiting for it; a backfill's switch when it was the last
        elif not ended.reused:  # no asset references a part: its video's assets get the progress
            parents = self._claims.parents(spec)
            self._assets.parts_ended(parents)
            for parent, _ in parents:  # failed by this part: its other parts are wanted by nothing
                if parent.state == JobState.PERMANENT_FAILURE:
                    self._release_parts_again(parent)
        self._joined(claim, ended)
        state = source_state_of(ended)
        result = SourceResult(
            source, state, sha256=spec.input_sha256, jobs=[ended], reason=ended.reason, detail=ended.detail
        )
        return self._told(result)


def _held(job: PlannedJob, produced: Mapping[str, JobResult]) -> bool:
    """Whether a job waits for an input this delivery found held for review."""
    return any((ended := produced.get(u)) is not None and ended.state == JobState.REVIEW for u in job.spec.upstream)


def source_state_of(ended: JobResult) -> SourceState:
    """What one job a request ran makes of its original's result: ``done``, ``review`` (a
    moderation job held), ``rejected`` (refused) or ``permanent_failure``."""
    if ended.state == JobState.DONE:
        return SourceState.DONE
    if ended.state == JobState.REVIEW:
        return SourceState.REVIEW
    return SourceState.REJECTED if ended.reason == REJECTED else SourceState.PERMANENT_FAILURE
