"""A storm's worker process: the real handler behind an event source mapping, built from
the settings and the stack it is given, with crashes, byte and request counts injected by
wrapping adapters, the observer and the handler's ``on_record`` (nothing in the pipeline is
replaced). It writes what happened to a JSON-lines log of its own, flushed per line, so a
crash loses nothing written before it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from pynamodb.signals import pre_dynamodb_send

from mediajobs.bootstrap import build_service
from mediajobs.local.runner import EventSourceMapping
from mediajobs.local.session import configure_worker_logs, local_adapters, local_handler
from mediajobs.service_layer.delivery import HANDOVERS_ATTRIBUTE
from mediajobs.service_layer.observer import PipelineObserver

if TYPE_CHECKING:
    from mediajobs.domain.jobs import Claim, Downloaded, ObjectHead, ObjectRef, SourceResult
    from mediajobs.local.embedded import LocalStack
    from mediajobs.local.storm.config import StormConfig
    from mediajobs.service_layer.ports import ObjectStore
    from mediajobs.settings import Settings

#: Where a simulated worker can die, in the order a job reaches them.
CRASH_POINTS: Final = ("claimed", "output_stored", "manifest_stored", "done", "before_ack")
#: Where it can die after an asset write (the pipeline observer's asset points).
ASSET_CRASH_POINTS: Final = ("asset_current", "asset_recorded", "asset_deleted")
#: The DynamoDB operations that write (a record's count of them: ``accounting._finishers``).
DDB_WRITES: Final = frozenset(("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"))
#: Exit status of a worker that crashed on purpose.
CRASH_EXIT: Final = 70
#: How much lower the backfill lane's workers run (``os.nice``): see :func:`worker_main`.
LANE_NICENESS: Final = 10


def worker_work_dir(folder: Path, slot: int) -> Path:
    """The work folder (``WORK_DIR``) of the workers of ``slot``, under the storm's ``folder``.

    One per slot: a worker empties its work folder when it starts, so workers running at
    once must not share one. A worker that replaces a crashed one takes its slot's folder,
    as a Lambda sandbox keeps its ``/tmp`` when its runtime restarts, and so removes what
    the dead one left.
    """
    return folder / f"workdir-{slot:02d}"


def crash_point(seed: int, job_key: str, attempt: int, crash_rate: float) -> str | None:
    """Where the worker holding a claim dies, or ``None``: a pure function of the storm's
    ``seed`` and the claim (``job_key``, its ``attempt`` number), so two runs with one seed
    choose the same crash points for the same claims, whichever worker process holds them.

    Parameters
    ----------
    crash_rate: probability of a crash per claim, 0 to 1.

    Returns
    -------
    str or None
        One of :data:`CRASH_POINTS`, chosen uniformly, with probability ``crash_rate``.
    """
    rng = random.Random(f"{seed}-crash-{job_key}-{attempt}")
    if rng.random() < crash_rate:
        return rng.choice(CRASH_POINTS)
    return None


def asset_crash_point(seed: int, asset: str, delivery: str, crash_rate: float) -> str | None:
    """Where a delivery dies after an asset write of ``asset`` (its id), or ``None``: one of
    :data:`ASSET_CRASH_POINTS` with probability ``crash_rate`` per delivery, a pure function
    of the storm's seed, the asset and the ``delivery`` (its hand-overs and receive count:
    every redelivery and every fresh copy decides afresh, so no crash repeats for ever)."""
    rng = random.Random(f"{seed}-asset-{asset}-{delivery}")
    if rng.random() < crash_rate:
        return rng.choice(ASSET_CRASH_POINTS)
    return None


class CountingStore:
    """An :class:`~mediajobs.service_layer.ports.ObjectStore` that counts the bytes it
    downloads (``bytes_read``) and passes every call on to ``inner``."""

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        #: Bytes of originals downloaded so far.
        self.bytes_read = 0

    def head(self, ref: ObjectRef) -> ObjectHead:
        """As ``inner.head``."""
        return self._inner.head(ref)

    def download(self, ref: ObjectRef, dest: Path, *, etag: str | None = None) -> Downloaded:
        """As ``inner.download``, counting the bytes."""
        downloaded = self._inner.download(ref, dest, etag=etag)
        self.bytes_read += downloaded.size_bytes
        return downloaded

    def presigned_get(self, ref: ObjectRef, *, expires_s: int) -> str:
        """As ``inner.presigned_get`` (what ffmpeg reads through the URL is not counted)."""
        return self._inner.presigned_get(ref, expires_s=expires_s)

    def put_file_if_absent(self, bucket: str, key: str, path: Path, *, content_type: str) -> bool:
        """As ``inner.put_file_if_absent``."""
        return self._inner.put_file_if_absent(bucket, key, path, content_type=content_type)

    def put_if_absent(self, bucket: str, key: str, body: bytes, *, content_type: str) -> bool:
        """As ``inner.put_if_absent``."""
        return self._inner.put_if_absent(bucket, key, body, content_type=content_type)

    def listing(self, bucket: str, prefix: str) -> dict[str, str]:
        """As ``inner.listing``."""
        return self._inner.listing(bucket, prefix)

    def keys(self, bucket: str, prefix: str, *, limit: int) -> list[str]:
        """As ``inner.keys``."""
        return self._inner.keys(bucket, prefix, limit=limit)

    def delete_prefix(self, bucket: str, prefix: str, *, first: str | None = None) -> int:
        """As ``inner.delete_prefix``."""
        return self._inner.delete_prefix(bucket, prefix, first=first)


class _EventLog:
    """The worker's JSON-lines log, line-buffered for the whole process life: one event a
    line (``event``, ``t`` in Unix seconds, ``pid``, its fields)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole process life
        self._pid = os.getpid()

    def emit(self, event: str, **fields: Any) -> None:
        """Write one event with its ``fields``."""
        self._file.write(json.dumps({"event": event, "t": time.time(), "pid": self._pid, **fields}) + "\n")

    def crash(self, point: str, job_key: str) -> NoReturn:
        """Log the crash, then die at once (``os._exit``: nothing unwinds)."""
        self.emit("crash", point=point, job_key=job_key)
        self._file.flush()
        os._exit(CRASH_EXIT)

    def close(self) -> None:
        """Close the log (the worker stops)."""
        self._file.close()


class _Tally:
    """What the worker process did so far (DynamoDB requests, bytes read, renders, claims,
    reading marks), and what a record cost: the change since the previous mark (records of
    a batch are handled one after the other)."""

    def __init__(self, store: CountingStore) -> None:
        self.store = store
        self.ddb_requests = 0
        self.ddb_writes = 0
        self.renders = 0
        self.claims = 0  # claims held: work a delivery did, even when a takeover stopped it
        self.readings = 0  # reading marks held: the delivery was the one to read an original
        self._mark = {"ddb": 0, "ddb_writes": 0, "s3_bytes": 0, "renders": 0, "claims": 0, "readings": 0}

    def count_request(self, *args: Any, operation_name: str = "", **kwargs: Any) -> None:
        """PynamoDB's ``pre_dynamodb_send`` receiver: one request more (a write, for
        ``operation_name`` in :data:`DDB_WRITES`)."""
        self.ddb_requests += 1
        self.ddb_writes += operation_name in DDB_WRITES

    def take_mark(self) -> dict[str, int]:
        """The counts' change since the previous mark; marks now."""
        now = {
            "ddb": self.ddb_requests,
            "ddb_writes": self.ddb_writes,
            "s3_bytes": self.store.bytes_read,
            "renders": self.renders,
            "claims": self.claims,
            "readings": self.readings,
        }
        spent = {k: now[k] - self._mark[k] for k in now}
        self._mark.update(now)
        return spent


@dataclasses.dataclass
class _Batch:
    """What the worker knows of the batch it handles: per poll, the crash point armed for
    each claim and the armed ``before_ack`` jobs committed; per invocation, each record's
    delivery (asset id -> ``"<hand-overs>.<receive count>"``) and detail-type (message id
    -> ``"Object Created"``, ``"Object Deleted"``) and original's key (message id -> key,
    for a record the pipeline raised on: busy, say); the original of the record being
    handled, once it is answered."""

    armed: dict[str, str] = dataclasses.field(default_factory=dict)
    done_before_ack: list[str] = dataclasses.field(default_factory=list)
    deliveries: dict[str, str] = dataclasses.field(default_factory=dict)
    detail_types: dict[str, str] = dataclasses.field(default_factory=dict)
    keys: dict[str, str] = dataclasses.field(default_factory=dict)
    finished_key: str | None = None

    def read(self, event: dict[str, Any]) -> None:
        """Keep the deliveries and detail-types of the records of the SQS ``event``."""
        self.deliveries.clear()
        self.detail_types.clear()
        self.keys.clear()
        for record in event.get("Records", ()):
            with contextlib.suppress(KeyError, TypeError, ValueError):
                body = json.loads(record["body"])
                self.detail_types[record["messageId"]] = str(body.get("detail-type"))
                detail = body["detail"]
                key = urllib.parse.unquote_plus(detail["object"]["key"])
                self.keys[record["messageId"]] = key
                asset = f"{detail['bucket']['name']}/{key}"
                handovers = (record.get("messageAttributes") or {}).get(HANDOVERS_ATTRIBUTE, {}).get("stringValue", "0")
                self.deliveries[asset] = f"{handovers}.{record['attributes']['ApproximateReceiveCount']}"


class StormObserver(PipelineObserver):
    """The pipeline observer of a storm's worker: it counts into ``tally``, logs, and
    crashes the process where :func:`crash_point` (armed per claim, in ``batch``) and
    :func:`asset_crash_point` (per delivery) say."""

    def __init__(self, cfg: StormConfig, log: _EventLog, tally: _Tally, batch: _Batch) -> None:
        self._cfg = cfg
        self._log = log
        self._tally = tally
        self._batch = batch

    def claimed(self, claim: Claim, source: ObjectRef) -> None:
        """Count and log the claim; arm its crash point, if it has one."""
        self._tally.claims += 1
        self._log.emit("claimed", job_key=claim.job_key, took_over=claim.took_over, attempts=claim.attempts)
        point = crash_point(self._cfg.seed, claim.job_key, claim.attempts, self._cfg.crash_rate)
        if point is not None:
            self._batch.armed[claim.job_key] = point

    def reading(self, source: ObjectRef) -> None:
        """Count the reading mark held."""
        self._tally.readings += 1

    def source_finished(self, result: SourceResult) -> None:
        """Keep the original of the record being answered."""
        self._batch.finished_key = result.source.key

    def render_started(self, job_key: str, source: ObjectRef) -> None:
        """Count and log the render."""
        self._tally.renders += 1
        self._log.emit("render_started", job_key=job_key)

    def step(self, point: str, job_key: str) -> None:
        """Crash at ``point`` when it is the one armed (or drawn, after an asset write);
        count and log a commit (``done``)."""
        if point in ASSET_CRASH_POINTS:
            # ``job_key`` is the asset's id here; the record's delivery decides.
            delivery = self._batch.deliveries.get(job_key, "0.1")
            if asset_crash_point(self._cfg.seed, job_key, delivery, self._cfg.crash_rate) == point:
                self._log.crash(point, job_key)
            return
        if point == "done":
            self._tally.renders += 1  # committed work (a takeover may adopt a manifest without rendering)
            self._log.emit("committed", job_key=job_key)
            if self._batch.armed.get(job_key) == "before_ack":
                self._batch.done_before_ack.append(job_key)
                return
        if self._batch.armed.get(job_key) == point:
            self._log.crash(point, job_key)


def worker_main(
    slot: int,
    spawn_index: int,
    settings: Settings,
    stack: LocalStack,
    cfg: StormConfig,
    log_path: str,
    lane: bool = False,
) -> None:
    """One worker process: the real handler behind an event source mapping, until the file
    ``log_path`` with the suffix ``.stop`` exists. Everything it needs comes as arguments
    (``settings`` with its own ``work_dir``, the ``stack`` with endpoint and credentials);
    it reads and writes no environment. Its events go to ``log_path`` (JSON lines).

    ``lane``: it polls the backfill lane, at a lower CPU priority (:data:`LANE_NICENESS`):
    on Lambda the lane's invocations run in sandboxes of their own, and here every process
    shares two cores, so the lane must not take the upload workers' CPU.
    """
    from mediajobs.entrypoints import worker

    if lane:
        os.nice(LANE_NICENESS)
    queue_url, queue_arn = (
        (stack.backfill_queue_url, stack.backfill_queue_arn) if lane else (stack.queue_url, stack.queue_arn)
    )

    logger = configure_worker_logs(cfg.log_level)
    # Lost acknowledgements: a stream of its own per worker process, fixed by the seed.
    rng = random.Random(f"{cfg.seed}-acks-{slot}-{spawn_index}")
    log = _EventLog(log_path)
    adapters = local_adapters(stack, settings)
    tally = _Tally(CountingStore(adapters.store))
    # PynamoDB's own signal, sent before each request it makes (this process only).
    pre_dynamodb_send.connect(tally.count_request, weak=False)
    batch = _Batch()
    service = build_service(
        settings,
        adapters=dataclasses.replace(adapters, store=tally.store),
        observer=StormObserver(cfg, log, tally, batch),
    )

    def on_record(message_id: str, receive_count: int, outcome: str) -> None:
        spent = tally.take_mark()
        log.emit(
            "record",
            message_id=message_id,
            receive_count=receive_count,
            outcome=outcome,
            rendered=spent["renders"] > 0,  # started a render or committed a job
            claimed=spent["claims"] > 0,  # held a job's claim (it read the bytes for it)
            read_for_work=spent["readings"] > 0,  # held an original's reading mark
            ddb_requests=spent["ddb"],
            ddb_writes=spent["ddb_writes"],
            s3_bytes=spent["s3_bytes"],
            key=batch.finished_key or batch.keys.get(message_id),
            detail_type=batch.detail_types.get(message_id),
        )
        batch.finished_key = None

    handler = local_handler(worker.make_handler(service, logger=logger, on_record=on_record))

    def marked_handler(event: dict[str, Any], context: Any) -> Any:
        tally.take_mark()
        batch.read(event)
        return handler(event, context)

    sqs = stack.client("sqs")

    def before_ack(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if batch.done_before_ack:
            log.crash("before_ack", batch.done_before_ack[0])
        kept = []
        for m in messages:
            if rng.random() < cfg.redelivery_share:
                # The acknowledgement is lost: SQS delivers it again when its visibility ends.
                log.emit("ack_lost", message_id=m["MessageId"])
                # (ReceiptHandleIsInvalid: already received again, the redelivery is under way.)
                with contextlib.suppress(sqs.exceptions.ReceiptHandleIsInvalid):
                    sqs.change_message_visibility(
                        QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=1
                    )
            else:
                kept.append(m)
        return kept

    esm = EventSourceMapping(
        sqs,
        queue_url,
        queue_arn,
        marked_handler,
        batch_size=stack.batch_size,
        timeout_s=cfg.timeout_s,
        region=stack.region,
        before_ack=before_ack,
    )
    log.emit("started", index=slot)
    stop_file = Path(log_path).with_suffix(".stop")
    while not stop_file.exists():
        batch.armed.clear()
        batch.done_before_ack.clear()
        esm.poll_once(wait_s=1)
    log.emit("stopped", index=slot)
    log.close()
