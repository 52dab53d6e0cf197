"""Run: steps 5 and 6 of a delivery, one job at a time, whatever caused it (an S3 event,
a backfill, another job's completion).

A held job runs **under its lease** (:class:`~mediajobs.service_layer.lease.LeaseKeeper`:
a heartbeat renewing the lease and the message's visibility): its step renders its inputs
-- the original, or other jobs' named outputs, taken from this delivery's work folder when
it rendered them and from S3 otherwise -- then it **commits**
(:mod:`mediajobs.service_layer.commit`: register -> write with ``If-None-Match`` -> stage
the manifest -> write ``manifest.json`` -> done). A takeover that finds a staged manifest
only adopts it. A permanent failure is recorded in the job's row; anything else gives the
claim back and is raised.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from mediajobs.domain.errors import (
    INVALID_OUTPUT,
    SOURCE_MISSING,
    TOO_LONG,
    ContentRejected,
    DeadlineReached,
    DeliveryLost,
    HeldForReview,
    JobBusy,
    PermanentFailure,
    Superseded,
    TransientFailure,
)
from mediajobs.domain.jobs import (
    DECISIONS_OUTPUT,
    Claim,
    ClaimOutcome,
    ContentInput,
    Delivery,
    InputsPending,
    JobResult,
    JobState,
    JobView,
    ObjectRef,
    OutputInput,
    OutputRecord,
    RenderContext,
)
from mediajobs.domain.moderation import REJECTED, REVIEW, is_moderation, moderation_of, with_review
from mediajobs.domain.parts import Split, SplitNeeded, parent_key, part_specs
from mediajobs.domain.plan import PlannedJob
from mediajobs.service_layer.assets import KeptAsset
from mediajobs.service_layer.commit import Commit
from mediajobs.service_layer.lease import Heartbeats
from mediajobs.service_layer.observer import PipelineObserver
from mediajobs.service_layer.ports import Ledger, ObjectStore, Queue, Step
from mediajobs.service_layer.reading import Work
from mediajobs.service_layer.requests import JobRequests
from mediajobs.service_layer.work import work_folder
from mediajobs.settings import Settings

log = logging.getLogger(__name__)

#: Progress of a long render is logged at most this often, seconds (Lambda's logs are the
#: only progress bar there).
PROGRESS_LOG_EVERY_S = 10.0

#: What a held job's work returns: the outputs committed and the decisions of its manifest.
_Committed = tuple[list[OutputRecord], Mapping[str, Any] | None]


class JobRunner:
    """Runs one job of a delivery (see the module docstring).

    Parameters
    ----------
    settings: the work folder.
    store: S3: the derivatives, and the inputs that are other jobs' outputs.
    ledger: the job ledger (the commit, failures).
    steps: the recipe steps by name.
    heartbeats: the lease and heartbeat of each claim (and the clock).
    observer: hooks (``claimed``, ``render_started``, ``step``, ``progress``).
    requests: jobs in steps: a step that asks for its job to be split
        (:class:`~mediajobs.domain.parts.SplitNeeded`) fans out through it (``None``: such
        a job fails ``too_long``, nothing can run its parts).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ObjectStore,
        ledger: Ledger,
        steps: Mapping[str, Step],
        heartbeats: Heartbeats,
        observer: PipelineObserver,
        requests: JobRequests | None = None,
    ) -> None:
        self._settings = settings
        self._requests = requests
        self._store = store
        self._ledger = ledger
        self._steps = steps
        self._heartbeats = heartbeats
        self._observer = observer
        self._clock = heartbeats.clock

    @property
    def queue(self) -> Queue | None:
        """The queue the records come from."""
        return self._heartbeats.queue

    def run(
        self,
        job: PlannedJob,
        claim: Claim,
        source: ObjectRef,
        delivery: Delivery | None,
        work: Work | None,
        asset: KeptAsset | None,
        produced: Mapping[str, JobResult],
    ) -> JobResult:
        """One job: what its claim found, or -- held -- adopt its staged manifest, or run its
        step on its inputs and commit.

        Parameters
        ----------
        job, claim: the job and its claim.
        source: the original the job's plan started from (its bucket holds the derivatives).
        delivery: the SQS delivery, or ``None``.
        work: the original read into this delivery's work folder, or ``None``.
        asset: the asset whose progress a long render reports, or ``None``.
        produced: what this delivery ended so far, by job key (a job's inputs that are other
            jobs' outputs are taken from its work folder when they were rendered there).

        Raises
        ------
        JobBusy
            The job runs elsewhere, or still waits for its inputs.
        Superseded
            This worker's claim was taken over while it worked.
        TransientFailure
            Anything that may pass (the claim given back first).
        """
        if claim.outcome is not ClaimOutcome.RUN:
            return settled(job, claim, now_s=int(self._clock()))
        assert claim.lease_token is not None, "a held claim carries its token"
        extra = {"job_key": job.key, "source_key": source.key, "recipe": job.recipe.ref}
        self._observer.claimed(claim, source)
        keeper = self._heartbeats.keep(job.key, claim.lease_token, claim.lease_expires_at_s, delivery)
        commit = Commit(
            self._store, self._ledger, source, job.spec, claim.lease_token, keeper, self._clock, self._observer.step
        )
        staged = claim.staged_manifest
        spent: dict[str, float] = {"child_cpu_s": 0.0, "bytes_in": 0}
        if staged is not None:
            return self._under_lease(job, commit, extra, functools.partial(_adopt, commit, staged, extra), spent=spent)
        render = functools.partial(self._render_and_commit, job, commit, claim, delivery, work, asset, produced, spent)
        return self._under_lease(job, commit, extra, render, delivery, spent=spent)

    def _render_and_commit(
        self,
        job: PlannedJob,
        commit: Commit,
        claim: Claim,
        delivery: Delivery | None,
        work: Work | None,
        asset: KeptAsset | None,
        produced: Mapping[str, JobResult],
        spent: dict[str, float],
    ) -> _Committed:
        """Run the recipe's step on the job's inputs into its folder (a bounded step stops
        its child at the invocation's deadline: ``DeadlineReached``), then commit its files.

        When the claim took over an interrupted collection (``claim.sweep``), what is left
        under the job's prefix (its old manifest first) is deleted before the render. A job
        that was split (``claim.split``) finds its parts' outputs among its inputs."""
        key, source = job.key, commit.source
        extra = {"job_key": key, "source_key": source.key, "recipe": job.recipe.ref}
        if claim.review is not None and claim.decisions is not None:  # a person decided: no step
            log.info("committing the decision of a review", extra=extra)
            size = work.size_bytes if work is not None else 0
            return self._moderated(commit, with_review(claim.decisions, claim.review), extra, size)
        with self._folder(work) as folder:
            inputs = self._inputs(job, work, folder, produced)
            split = claim.split
            if split is not None:
                inputs.update(self._part_outputs(job, claim, folder))
            elif job.spec.part is not None:  # a part reads its parent's split (the probe is there)
                split = self._parent_split(job)
            if claim.sweep:
                removed = self._store.delete_prefix(source.bucket, job.spec.output_prefix, first=commit.manifest_key)
                log.info("swept %d objects an interrupted collection left", removed, extra=extra)
            log.info("processing started", extra=extra)
            self._observer.render_started(key, source)
            out_dir = folder / key
            out_dir.mkdir()
            context = RenderContext(
                check=commit.keeper.check,
                remaining_s=(delivery.remaining_s if delivery is not None else lambda: None),
                progress=self._progress_sink(key, source, asset),
                inputs=inputs,
                part=job.spec.part,
                split=split,
                source_url=work.url if work is not None else None,
                content_sha256=job.spec.input_sha256,
                policy_version=job.spec.policy_version,
                input_jobs={n: i.job_key for n, i in job.spec.inputs.items() if isinstance(i, OutputInput)},
                about=job.spec.about,
            )
            main = next(iter(inputs.values()))
            step = self._steps[job.recipe.step].run(main, job.recipe.params, context, out_dir)
            size = work.size_bytes if work is not None and main == work.original else main.stat().st_size
            spent["child_cpu_s"], spent["bytes_in"] = step.cpu_s or 0.0, size
            if is_moderation(job.recipe.step):
                decisions = step.decisions if claim.review is None else with_review(step.decisions, claim.review)
                return self._moderated(commit, decisions, extra, size)
            return commit.rendered(step.files, step.decisions, input_bytes=size), step.decisions

    def _moderated(
        self, commit: Commit, decisions: Mapping[str, Any], extra: dict[str, str], input_bytes: int
    ) -> _Committed:
        """A moderation job's decision acted on: ``accepted`` commits it (a manifest with the
        decision, no file); ``rejected`` fails the job ``rejected`` with the rule that fired;
        ``review`` holds it for a person.

        Raises
        ------
        ContentRejected
            The policy (or a person) rejected the content.
        HeldForReview
            The policy says a person decides.
        """
        decision = moderation_of(decisions) or {}
        outcome = decision.get("outcome")
        log.info("moderation: %s (%s)", outcome, decision.get("rule"), extra=extra)
        if outcome == REJECTED:
            review = decision.get("review")
            why = (  # who decided stays in the ledger and the decision log, not in what apps read
                "rejected by a person in review"
                if isinstance(review, dict)
                else f"rule {decision.get('rule')}: {decision.get('evidence')}"
            )
            raise ContentRejected(f"{why} (policy {decision.get('policy')})", decisions)
        if outcome == REVIEW:
            raise HeldForReview(decisions)
        return commit.rendered([], decisions, input_bytes=input_bytes), decisions

    @contextlib.contextmanager
    def _folder(self, work: Work | None) -> Iterator[Path]:
        """The delivery's work folder, or one of the job's own when no original was read."""
        if work is not None:
            yield work.folder
            return
        with work_folder(self._settings.work_dir) as folder:
            yield folder

    def _inputs(
        self, job: PlannedJob, work: Work | None, folder: Path, produced: Mapping[str, JobResult]
    ) -> dict[str, Path]:
        """The job's inputs as files, by name.

        Raises
        ------
        TransientFailure
            The original was not read by this delivery (only a staged manifest commits
            without it: the claim is given back and the message redelivered), or an input
            read from S3 is not the bytes its job committed.
        PermanentFailure
            ``invalid_output``: an input names an output its job did not commit;
            ``source_missing``: an input job of a job made from no original (an album's) was
            collected since (nothing renders it again; the album is requested anew).
        """
        paths: dict[str, Path] = {}
        planned = any(isinstance(i, ContentInput) for i in job.spec.inputs.values())
        for name, wanted in job.spec.inputs.items():
            if isinstance(wanted, ContentInput):
                if work is None or work.sha256 != wanted.sha256:
                    raise TransientFailure("the original was not read: only a staged manifest commits without it")
                paths[name] = work.original
            elif wanted.output == DECISIONS_OUTPUT:
                paths[name] = self._decisions_file(wanted, folder, produced, planned=planned)
            else:
                paths[name] = self._output_file(wanted, folder, produced, job.spec.source_bucket, planned=planned)
        return paths

    def _parent_split(self, job: PlannedJob) -> Split:
        """What the parent of the part ``job`` was split into (its row, one ``GetItem``).

        Raises
        ------
        TransientFailure
            The parent has no split on its row (it cannot have requested this part then:
            the row is read again at the next delivery).
        """
        parent = self._ledger.get(parent_key(job.spec, self._settings.keys_for))
        if parent is None or parent.split is None:
            raise TransientFailure(f"the parent of part {job.key[:12]} holds no split")
        return parent.split

    def _part_outputs(self, job: PlannedJob, claim: Claim, folder: Path) -> dict[str, Path]:
        """The outputs of every part of a split job, as files named ``"<part index>/<output
        name>"`` (each read from S3 and checked against its committed hash).

        Raises
        ------
        SplitNeeded
            A part is not done: collected since its video's earlier join (the video, collected
            too and uploaded again, split again while its parts were released). The job
            waits for its parts again, which render again.
        TransientFailure
            A part's output is gone meanwhile (the next attempt finds it collected), or its
            bytes are not the ones it committed.
        """
        assert claim.split is not None
        specs = part_specs(job.spec, claim.split, self._settings.derivatives_prefix, self._settings.keys_for)
        rows = self._ledger.find([spec.job_key for spec in specs])
        ended: dict[str, JobResult] = {}
        for spec in specs:
            row = rows.get(spec.job_key)
            if row is None or row.state != JobState.DONE:  # collected since (a video split again):
                raise SplitNeeded(claim.split)  # wait for it again, rendered again
            ended[spec.job_key] = JobResult(job.recipe.ref, spec.job_key, JobState.DONE, True, outputs=row.outputs)
        files: dict[str, Path] = {}
        for i, spec in enumerate(specs):
            for out in ended[spec.job_key].outputs:
                wanted = OutputInput(spec.job_key, out.name)
                try:
                    files[f"{i}/{out.name}"] = self._output_file(wanted, folder, ended, job.spec.source_bucket)
                except PermanentFailure as gone:  # deleted by a collection racing this join
                    raise TransientFailure(f"part {spec.job_key[:12]}'s output is gone: {gone}") from gone
        return files

    def _decisions_file(
        self, wanted: OutputInput, folder: Path, produced: Mapping[str, JobResult], *, planned: bool = True
    ) -> Path:
        """Another job's committed decisions (a moderation job's) as a JSON file: from this
        delivery's end of it, or its row.

        Raises
        ------
        TransientFailure
            The job is not done (a job waiting for it is requested only once it is).
        """
        ended = produced.get(wanted.job_key)
        if ended is not None and ended.state == JobState.DONE:
            decisions = ended.decisions
        else:
            row = self._ledger.get(wanted.job_key)
            if row is None or row.state != JobState.DONE:
                raise _not_done(wanted.job_key, row, planned=planned)
            decisions = row.decisions
        dest = folder / "inputs" / wanted.job_key / f"{DECISIONS_OUTPUT}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(dict(decisions or {}), sort_keys=True), encoding="utf-8")
        return dest

    def _output_file(
        self,
        wanted: OutputInput,
        folder: Path,
        produced: Mapping[str, JobResult],
        bucket: str,
        *,
        planned: bool = True,
    ) -> Path:
        """Another job's committed output as a file: the one this delivery rendered when
        its bytes are the committed ones, else read from S3 (and checked). ``planned``: the
        job taking it is planned from an original, whose delivery renders a collected
        input again (else a collected input is gone for good: :func:`_not_done`)."""
        ended = produced.get(wanted.job_key)
        outputs = ended.outputs if ended is not None else ()
        if not outputs:
            row = self._ledger.get(wanted.job_key)
            if row is None or row.state != JobState.DONE:
                raise _not_done(wanted.job_key, row, planned=planned)
            outputs, bucket = row.outputs, row.source_bucket or bucket
        record = next((o for o in outputs if o.name == wanted.output), None)
        if record is None:
            names = sorted(o.name for o in outputs)
            raise PermanentFailure(
                INVALID_OUTPUT, f"input job {wanted.job_key[:12]} has no output {wanted.output!r} ({names})"
            )
        local = folder / wanted.job_key / PurePosixPath(record.key).name
        if local.is_file() and _sha256(local) == record.sha256:
            return local
        dest = folder / "inputs" / wanted.job_key / PurePosixPath(record.key).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        downloaded = self._store.download(ObjectRef(bucket, record.key), dest)
        if downloaded.sha256 != record.sha256:
            raise TransientFailure(f"{record.key} is not the bytes its job committed")
        return dest

    def _under_lease(
        self,
        job: PlannedJob,
        commit: Commit,
        extra: dict[str, str],
        work: Callable[[], _Committed],
        delivery: Delivery | None = None,
        *,
        spent: dict[str, float],
    ) -> JobResult:
        """Do a held job's ``work`` (which ends with its commit) with its heartbeat running,
        and classify what went wrong: a permanent failure is recorded in the job's row; any
        other failure gives the claim back (unless the heartbeat did) and is raised. A step
        that asks for its job to be split has it fanned out (:meth:`JobRequests.fan_out`):
        the job is then ``waiting`` for its parts."""
        key, keeper = job.key, commit.keeper
        lease = keeper.lease
        started = time.monotonic()
        cpu_started = _cpu_s()

        def stopped(state: JobState, step: str, row: JobView, decisions: Mapping[str, Any] | None = None) -> JobResult:
            """The result of held work that ended without a commit: waiting, held, split."""
            lease.forget()
            self._observer.step(step, key)
            return JobResult(
                job.recipe.ref,
                key,
                state,
                reused=False,
                seconds=time.monotonic() - started,
                decisions=decisions,
                row=row,
                **cpu(),
            )

        def cpu() -> dict[str, Any]:
            return {"cpu_s": _cpu_s() - cpu_started + spent["child_cpu_s"], "bytes_in": int(spent["bytes_in"])}

        split: Split | None = None
        held: Mapping[str, Any] | None = None
        pending: frozenset[str] | None = None
        try:
            self._observer.step("claimed", key)
            with keeper:
                # A claim made with the others of its content can run down while the jobs
                # before it run: entering renewed it, or found it taken over -- then this
                # worker stops here, before any work, not at its first write.
                keeper.check()
                try:
                    outputs, decisions = work()
                except HeldForReview as review:
                    keeper.check()
                    held = review.decisions
                except InputsPending as inputs:
                    keeper.check()
                    pending = inputs.pending
                except SplitNeeded as needed:
                    if self._requests is None:
                        raise PermanentFailure(
                            TOO_LONG, f"needs splitting, nothing here runs parts: {needed}"
                        ) from None
                    keeper.check()
                    split = needed.split
            if pending is not None:
                assert self._requests is not None, "a job with inputs is built with its requests"
                return stopped(JobState.WAITING, "waiting", self._requests.wait_again(job.spec, commit.token, pending))
            if held is not None:
                row = self._ledger.hold(key, commit.token, held, now_s=int(self._clock()))
                return stopped(JobState.REVIEW, "review", row, held)
            if split is not None:
                assert self._requests is not None
                row = self._requests.fan_out(job.spec, commit.token, split, delivery)
                log.info("split into %d parts", len(split.parts), extra=extra)
                return stopped(JobState.WAITING, "split", row)
            self._observer.step("done", key)
        except PermanentFailure as failure:
            log.warning("permanent failure: %s (%s)", failure.reason, failure.detail, extra=extra)
            now = int(self._clock())
            kept = failure.decisions if isinstance(failure, ContentRejected) else None
            row = self._ledger.fail_permanently(
                key, commit.token, reason=failure.reason, detail=failure.detail, now_s=now, decisions=kept
            )
            lease.forget()
            seconds = time.monotonic() - started
            return JobResult(
                job.recipe.ref,
                key,
                JobState.PERMANENT_FAILURE,
                reused=False,
                reason=failure.reason,
                detail=failure.detail,
                seconds=seconds,
                decisions=kept,
                row=row,
                **cpu(),
            )
        except (Superseded, JobBusy):
            raise
        except (DeadlineReached, DeliveryLost) as exc:
            if keeper.problem is not exc:  # else the heartbeat already gave the claim back
                log.warning("transient failure: %r", exc, extra=extra)
                lease.release(exc)
            raise
        except TransientFailure as exc:
            log.warning("transient failure: %r", exc, extra=extra)
            lease.release(exc)
            raise
        except Exception as exc:
            log.warning("transient failure: %r", exc, extra=extra)
            lease.release(exc)
            raise TransientFailure(f"{type(exc).__name__}: {exc}") from exc
        lease.forget()
        seconds = time.monotonic() - started
        log.info("processing committed in %.3f s", seconds, extra=extra)
        return JobResult(
            job.recipe.ref,
            key,
            JobState.DONE,
            reused=False,
            manifest_key=commit.manifest_key,
            outputs=tuple(outputs),
            seconds=seconds,
            decisions=decisions,
            row=commit.row,
            **cpu(),
        )

    def _progress_sink(
        self, key: str, ref: ObjectRef, asset: KeptAsset | None
    ) -> Callable[[tuple[str, ...], float, float], None]:
        """Passes progress to the observer and the asset (at most every
        :data:`~mediajobs.service_layer.assets.PROGRESS_EVERY_S`), and logs it at most every
        :data:`PROGRESS_LOG_EVERY_S`."""
        last_logged = [self._clock()]
        to_asset = asset.progress_sink(key) if asset is not None else (lambda done_s, total_s: None)

        def sink(names: tuple[str, ...], done_s: float, total_s: float) -> None:
            self._observer.progress(key, names, done_s, total_s)
            to_asset(done_s, total_s)
            now = self._clock()
            if now - last_logged[0] >= PROGRESS_LOG_EVERY_S:
                last_logged[0] = now
                log.info(
                    "rendering %s: %.0f%% (%.1f of %.1f s)",
                    "+".join(names),
                    100 * done_s / total_s if total_s else 100.0,
                    done_s,
                    total_s,
                    extra={"job_key": key, "source_key": ref.key},
                )

        return sink


def settled(job: PlannedJob, claim: Claim, *, now_s: int = 0) -> JobResult:
    """The result of a job this delivery found finished (or just ended exhausted), or
    waiting for the parts it was split into (``waiting``: the parts end it) once its
    splitter's time to request them (its ``lease_expires_at_s``) is over at ``now_s``.

    Raises
    ------
    JobBusy
        When the claim found the job running elsewhere, or waiting for its inputs.
    """
    extra = {"job_key": claim.job_key, "recipe": job.recipe.ref}
    if claim.outcome is ClaimOutcome.DONE:
        log.info("job already done: reusing its outputs", extra=extra)
        return JobResult(
            job.recipe.ref,
            claim.job_key,
            JobState.DONE,
            reused=True,
            manifest_key=claim.manifest_key,
            outputs=claim.outputs,
            decisions=claim.decisions,
        )
    if claim.outcome is ClaimOutcome.HELD:
        log.info("job is held for review", extra=extra)
        return JobResult(job.recipe.ref, claim.job_key, JobState.REVIEW, reused=True, decisions=claim.decisions)
    if claim.outcome is ClaimOutcome.WAITING and claim.split is not None and claim.lease_expires_at_s <= now_s:
        log.info("job was split: its parts run as job requests", extra=extra)
        return JobResult(job.recipe.ref, claim.job_key, JobState.WAITING, reused=True)
    if claim.outcome is ClaimOutcome.FAILED:
        log.info("job failed permanently: %s", claim.failure_reason, extra=extra)
        return JobResult(
            job.recipe.ref,
            claim.job_key,
            JobState.PERMANENT_FAILURE,
            reused=not claim.failed_now,
            reason=claim.failure_reason,
            detail=claim.failure_detail or "",
        )
    log.info(
        "job is running elsewhere" if claim.outcome is ClaimOutcome.BUSY else "job waits for its inputs", extra=extra
    )
    raise JobBusy(claim.job_key, claim.lease_expires_at_s)


def _adopt(commit: Commit, staged: str, extra: dict[str, str]) -> _Committed:
    """A lost holder stored every output and staged the manifest: write that body (it may be
    there already) instead of rendering again."""
    log.info("adopting the manifest a lost holder staged", extra=extra)
    return commit.adopt(staged), json.loads(staged).get("decisions")


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _cpu_s() -> float:
    """CPU seconds this process and its reaped children spent so far (``os.times``: user
    and system of each): what a job's work adds to it is the job's (ffmpeg's included)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _not_done(job_key: str, row: JobView | None, *, planned: bool = True) -> Exception:
    """What an input job that is not done means for the job taking its output: its failure
    for good fails the job with its reason (a rejected moderation job: rejected); held for
    review, waiting or running, the job waits for it again (:class:`InputsPending`); no row
    yet is transient. Collected, for a job not ``planned`` from an original (an album's: no
    delivery renders its inputs again), it is gone: ``source_missing``."""
    if row is None:
        return TransientFailure(f"input job {job_key[:12]} has no row")
    if not planned and row.state in (JobState.COLLECTED, JobState.COLLECTING):
        return PermanentFailure(
            SOURCE_MISSING, f"input job {job_key[:12]} was collected (its assets deleted): request the album again"
        )
    if row.state == JobState.PERMANENT_FAILURE:
        detail = f"input job {job_key[:12]} failed: {row.failure_reason}: {row.failure_detail or ''}"
        return PermanentFailure(row.failure_reason or INVALID_OUTPUT, detail.strip())
    return InputsPending(frozenset({job_key}))
