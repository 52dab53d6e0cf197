"""``mediajobs simulate``: a storm of uploads, duplicates, redeliveries and crashes
against the embedded AWS, and the numbers that show whether exactly-once held.

The parent process starts the moto server with the stack of ``template.yaml``, uploads
the originals (small real JPEGs, a share of them byte-identical copies under other keys),
sends a share of their events twice, and runs ``workers`` worker processes. Each worker
runs the real handler behind an emulated event source mapping, with short leases, built
from the settings and the stack it is given as arguments (nothing goes through the
environment). A worker dies (``os._exit``) with probability ``crash_rate`` per job it
claims, at one step boundary chosen at random: after the claim, after an output, after the manifest,
after done, or after the handler returned but before the acknowledgement. A dead worker
is replaced, as Lambda starts a new execution environment. A share of successful
records is not acknowledged in time and comes back (a redelivery after the visibility
timeout). Nothing in the pipeline is replaced: crashes come from the observer, byte
counts from a wrapped store (:class:`CountingStore`), per-record figures from the
handler's ``on_record``; the renders are real, of small images. One ``--seed`` fixes
every random choice, crash points included (:func:`crash_point`).

Every worker writes what happened to a JSON-lines log of its own (flushed per line, so
a crash loses nothing written before it); the parent reads them at the end and checks
the bucket, the ledger and the queues.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import multiprocessing
import os
import random
import shutil
import tempfile
import threading
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from mediajobs.local.arguments import positive_integer, positive_seconds, share

if TYPE_CHECKING:
    from mediajobs.domain.jobs import Downloaded, ObjectHead, ObjectRef
    from mediajobs.local.embedded import LocalStack
    from mediajobs.local.notifications import LocalNotifications
    from mediajobs.service_layer.ports import ObjectStore
    from mediajobs.settings import Settings

#: Where a simulated worker can die, in the order a job reaches them.
CRASH_POINTS: Final = ("claimed", "output_stored", "manifest_stored", "done", "before_ack")
#: Where it can die after an asset write (the pipeline observer's asset points).
ASSET_CRASH_POINTS: Final = ("asset_current", "asset_recorded", "asset_deleted")
#: Exit status of a worker that crashed on purpose.
CRASH_EXIT: Final = 70
#: Uploads are sent in waves of FEED_WAVE while at most BACKLOG messages wait visible.
FEED_WAVE: Final = 20
BACKLOG: Final = 40


#: The key of a field's :class:`Flag` in its ``dataclasses.field`` metadata.
FLAG: Final = "flag"
_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Flag:
    """How a :class:`StormConfig` field is given on ``mediajobs simulate``'s command line.

    Attributes
    ----------
    name: the flag, ``--uploads``.
    parse: argparse's ``type``: the flag's text to the field's value (or a usage error,
        :mod:`mediajobs.local.arguments`).
    help: the flag's help; ``{default}`` stands for the field's default (format specs
        allowed: ``{default:g}``).
    """

    name: str
    parse: Callable[[str], Any]
    help: str

    @property
    def dest(self) -> str:
        """The flag's attribute in argparse's namespace (``--lease-seconds``: ``lease_seconds``)."""
        return self.name.removeprefix("--").replace("-", "_")

    def help_for(self, default: Any) -> str:
        """The help text with the field's ``default`` in its place."""
        return self.help.format(default=default)


def flagged(default: _T, name: str, parse: Callable[[str], _T], help_text: str) -> _T:
    """A :class:`StormConfig` field whose value ``mediajobs simulate`` takes as the flag
    ``name``: its ``default``, and its :class:`Flag` in the field's metadata.

    Parameters
    ----------
    parse: the flag's text to a value (argparse's ``type``).
    help_text: the flag's help, ``{default}`` standing for ``default`` (:meth:`Flag.help_for`).
    """
    return dataclasses.field(default=default, metadata={FLAG: Flag(name, parse, help_text)})


@dataclasses.dataclass(frozen=True)
class StormConfig:
    """The storm's shape. The fields with a flag come in the order ``mediajobs simulate
    --help`` lists them.

    Attributes
    ----------
    uploads: originals uploaded.
    workers: worker processes running at once.
    crash_rate: probability that a worker dies while holding a claim (per claim).
    identical_share: share of uploads that are byte-identical copies under another key.
    overwrite_rate: share of uploads whose key is written again later with other bytes.
    late_share: share of overwrites whose replaced version's event is delivered again after
        the new version's (out of order: the late one must be superseded).
    delete_rate: share of uploads deleted later (a delete marker), originals whose bytes
        another key shares first.
    reupload_share: share of deletes followed by an upload of the same bytes under another
        key (during the grace period: the job revives without a render).
    grace_s: the collection's grace period in the storm, seconds (the parent runs a
        collection every ``collect_every_s``, and a last one with no grace at the end).
    collect_every_s: how often the parent runs a collection, seconds.
    dispatch_every_s: how often the parent runs the dispatcher on the outbox stream, seconds
        (its webhook goes to a verifying receiver in the parent:
        :class:`~mediajobs.local.notifications.LocalNotifications`).
    conflict_hold_ms: when above 0, the embedded DynamoDB has transaction conflicts, each
        transaction holding its items this long (:mod:`mediajobs.local.conflicts`); the
        summary then counts the conflicts and the writes of the hottest item. With
        ``identical_share`` near 1 this is the hot-content storm: many workers uploading
        the same bytes under distinct keys at once.
    duplicate_share: share of uploads whose event is delivered twice.
    redelivery_share: share of successful records whose acknowledgement is lost, so
        SQS delivers them again after their visibility timeout.
    checksum_share: share of uploads sent with a full-object SHA-256 checksum.
    lease_s: the workers' lease, seconds.
    timeout_s: the simulated function timeout, seconds.
    visibility_s: the queue's visibility timeout, seconds (how long the unstarted
        records of a crashed worker's batch stay hidden).
    seed: fixes every random choice the storm makes: contents, copies, duplicated events,
        crash points (:func:`crash_point`) and lost
        acknowledgements.
    max_seconds: give up after this long.
    log_level: the workers' log level (their logs go to stderr; the command's ``--log-level``).
    """

    uploads: int = flagged(200, "--uploads", positive_integer, "originals uploaded (default {default})")
    workers: int = flagged(4, "--workers", positive_integer, "worker processes (default {default})")
    crash_rate: float = flagged(
        0.05, "--crash-rate", share, "probability a worker dies while holding a claim (default {default})"
    )
    identical_share: float = flagged(
        0.09, "--identical-share", share, "byte-identical copies under other keys (default {default})"
    )
    overwrite_rate: float = flagged(
        0.0,
        "--overwrite-rate",
        share,
        "uploads written again later with other bytes, some events out of order (default {default})",
    )
    late_share: float = 0.5
    delete_rate: float = flagged(
        0.0, "--delete-rate", share, "uploads deleted later, shared bytes first, some re-uploaded (default {default})"
    )
    reupload_share: float = 0.5
    grace_s: int = flagged(
        3, "--grace-seconds", int, "the storm's collection grace period, seconds (default {default})"
    )
    collect_every_s: float = 2.0
    dispatch_every_s: float = 2.0
    conflict_hold_ms: float = flagged(
        0.0,
        "--conflict-hold-ms",
        float,
        "emulate DynamoDB's transaction conflicts, each transaction holding its items this long "
        "(0: off; default {default:g})",
    )
    duplicate_share: float = flagged(0.05, "--duplicate-share", share, "events delivered twice (default {default})")
    redelivery_share: float = flagged(
        0.08,
        "--redelivery-share",
        share,
        "records whose acknowledgement is lost, redelivered after the visibility timeout (default {default})",
    )
    checksum_share: float = flagged(
        1.0, "--checksum-share", share, "uploads sent with a full-object SHA-256 checksum (default {default})"
    )
    lease_s: int = flagged(4, "--lease-seconds", positive_integer, "the workers' lease (default {default})")
    timeout_s: int = 30
    visibility_s: int = flagged(
        20,
        "--visibility-seconds",
        positive_integer,
        "the queue's visibility timeout: how long a crashed batch's other records stay hidden (default {default})",
    )
    seed: int = flagged(1, "--seed", int, "random seed (default {default})")
    # A guard against a hang, not a budget: 2,000 uploads of two jobs each took 1,269 s on
    # a loaded 2-core machine before assets; with them every record also writes its asset.
    max_seconds: float = flagged(
        7200.0, "--max-seconds", positive_seconds, "give up after this long (default {default:g})"
    )
    log_level: str = "ERROR"


def storm_flags() -> Iterator[tuple[dataclasses.Field[Any], Flag]]:
    """The fields of :class:`StormConfig` that are flags, each with its :class:`Flag`, in
    the order of the fields."""
    for field in dataclasses.fields(StormConfig):
        if FLAG in field.metadata:
            yield field, field.metadata[FLAG]


def _jpeg(seed: int, size: tuple[int, int] = (96, 64)) -> bytes:
    """A small unique real JPEG (noise from ``seed``)."""
    from PIL import Image

    rng = random.Random(seed)
    pixels = rng.randbytes(size[0] * size[1] * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", size, pixels).save(out, "JPEG", quality=85)
    return out.getvalue()


# --------------------------------------------------------------------------- worker side


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

    def put_file_if_absent(self, bucket: str, key: str, path: Path, *, content_type: str) -> bool:
        """As ``inner.put_file_if_absent``."""
        return self._inner.put_file_if_absent(bucket, key, path, content_type=content_type)

    def put_if_absent(self, bucket: str, key: str, body: bytes, *, content_type: str) -> bool:
        """As ``inner.put_if_absent``."""
        return self._inner.put_if_absent(bucket, key, body, content_type=content_type)

    def listing(self, bucket: str, prefix: str) -> dict[str, str]:
        """As ``inner.listing``."""
        return self._inner.listing(bucket, prefix)

    def delete_prefix(self, bucket: str, prefix: str, *, first: str | None = None) -> int:
        """As ``inner.delete_prefix``."""
        return self._inner.delete_prefix(bucket, prefix, first=first)


def _worker_main(
    slot: int, spawn_index: int, settings: Settings, stack: LocalStack, cfg: StormConfig, log_path: str
) -> None:
    """One worker process: the real handler behind an event source mapping, until told to
    stop. Everything it needs comes as arguments (``settings`` with its own ``work_dir``,
    the ``stack`` with endpoint and credentials); it reads and writes no environment.
    Crashes, byte and request counts are injected by wrapping adapters, the observer and
    the handler's ``on_record``."""
    from pynamodb.signals import pre_dynamodb_send

    from mediajobs.bootstrap import build_service
    from mediajobs.entrypoints import worker
    from mediajobs.local.runner import EventSourceMapping
    from mediajobs.local.session import configure_worker_logs, local_adapters, local_handler
    from mediajobs.service_layer.pipeline import PipelineObserver

    configure_worker_logs(worker, cfg.log_level)
    # Lost acknowledgements: a stream of its own per worker process, fixed by the seed.
    rng = random.Random(f"{cfg.seed}-acks-{slot}-{spawn_index}")
    log_file = open(log_path, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole process life
    pid = os.getpid()

    def emit(event: str, **fields: Any) -> None:
        log_file.write(json.dumps({"event": event, "t": time.time(), "pid": pid, **fields}) + "\n")

    ddb_requests = [0]
    # PynamoDB's own signal, sent before each request it makes (this process only).
    pre_dynamodb_send.connect(lambda *a, **k: ddb_requests.__setitem__(0, ddb_requests[0] + 1), weak=False)
    adapters = local_adapters(stack, settings)
    store = CountingStore(adapters.store)
    adapters = dataclasses.replace(adapters, store=store)

    renders = [0]
    claims = [0]  # claims held: work this delivery did, even when a takeover stopped it
    readings = [0]  # reading marks held: this delivery was the one to read an original
    finished_key: list[str | None] = [None]  # the original of the record being handled, once it is answered
    armed: dict[str, str] = {}  # job key -> the crash point chosen for this claim
    done_in_batch: list[str] = []

    def crash(point: str, job_key: str) -> None:
        emit("crash", point=point, job_key=job_key)
        log_file.flush()
        os._exit(CRASH_EXIT)

    class StormObserver(PipelineObserver):
        def claimed(self, claim: Any, source: Any) -> None:
            claims[0] += 1
            emit("claimed", job_key=claim.job_key, took_over=claim.took_over, attempts=claim.attempts)
            point = crash_point(cfg.seed, claim.job_key, claim.attempts, cfg.crash_rate)
            if point is not None:
                armed[claim.job_key] = point

        def reading(self, source: Any) -> None:
            readings[0] += 1

        def source_finished(self, result: Any) -> None:
            finished_key[0] = result.source.key

        def render_started(self, job_key: str, source: Any) -> None:
            renders[0] += 1
            emit("render_started", job_key=job_key)

        def step(self, point: str, job_key: str) -> None:
            if point in ASSET_CRASH_POINTS:
                # ``job_key`` is the asset's id here; the record's delivery decides.
                delivery = deliveries.get(job_key, "0.1")
                if asset_crash_point(cfg.seed, job_key, delivery, cfg.crash_rate) == point:
                    crash(point, job_key)
                return
            if point == "done":
                renders[0] += 1  # committed work (a takeover may adopt a manifest without rendering)
                emit("committed", job_key=job_key)
                if armed.get(job_key) == "before_ack":
                    done_in_batch.append(job_key)
                    return
            if armed.get(job_key) == point:
                crash(point, job_key)

    service = build_service(settings, adapters=adapters, observer=StormObserver())
    # What a record cost: the counters' change since the previous record of the batch
    # (records of a batch are handled one after the other).
    mark = {"ddb": 0, "s3_bytes": 0, "renders": 0, "claims": 0, "readings": 0}

    def take_mark() -> dict[str, int]:
        now = {
            "ddb": ddb_requests[0],
            "s3_bytes": store.bytes_read,
            "renders": renders[0],
            "claims": claims[0],
            "readings": readings[0],
        }
        spent = {k: now[k] - mark[k] for k in now}
        mark.update(now)
        return spent

    def on_record(message_id: str, receive_count: int, outcome: str) -> None:
        spent = take_mark()
        emit(
            "record",
            message_id=message_id,
            receive_count=receive_count,
            outcome=outcome,
            rendered=spent["renders"] > 0,  # started a render or committed a job
            claimed=spent["claims"] > 0,  # held a job's claim (it read the bytes for it)
            read_for_work=spent["readings"] > 0,  # held an original's reading mark
            ddb_requests=spent["ddb"],
            s3_bytes=spent["s3_bytes"],
            key=finished_key[0],
            detail_type=detail_types.get(message_id),
        )
        finished_key[0] = None

    handler = local_handler(worker.make_handler(service, on_record=on_record), worker.metrics)

    # Asset id -> "<hand-overs>.<receive count>" of the batch's record naming it.
    deliveries: dict[str, str] = {}
    # Message id -> the event's detail-type ("Object Created", "Object Deleted").
    detail_types: dict[str, str] = {}

    def marked_handler(event: dict[str, Any], context: Any) -> Any:
        from mediajobs.service_layer.delivery import HANDOVERS_ATTRIBUTE

        take_mark()
        deliveries.clear()
        detail_types.clear()
        for record in event.get("Records", ()):
            with contextlib.suppress(KeyError, TypeError, ValueError):
                body = json.loads(record["body"])
                detail_types[record["messageId"]] = str(body.get("detail-type"))
                detail = body["detail"]
                asset = f"{detail['bucket']['name']}/{urllib.parse.unquote_plus(detail['object']['key'])}"
                handovers = (record.get("messageAttributes") or {}).get(HANDOVERS_ATTRIBUTE, {}).get("stringValue", "0")
                deliveries[asset] = f"{handovers}.{record['attributes']['ApproximateReceiveCount']}"
        return handler(event, context)

    sqs = stack.client("sqs")

    def before_ack(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if done_in_batch:
            crash("before_ack", done_in_batch[0])
        kept = []
        for m in messages:
            if rng.random() < cfg.redelivery_share:
                # The acknowledgement is lost: SQS delivers it again when its visibility ends.
                emit("ack_lost", message_id=m["MessageId"])
                # (ReceiptHandleIsInvalid: already received again, the redelivery is under way.)
                with contextlib.suppress(sqs.exceptions.ReceiptHandleIsInvalid):
                    sqs.change_message_visibility(
                        QueueUrl=stack.queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=1
                    )
            else:
                kept.append(m)
        return kept

    esm = EventSourceMapping(
        sqs,
        stack.queue_url,
        stack.queue_arn,
        marked_handler,
        batch_size=stack.batch_size,
        timeout_s=cfg.timeout_s,
        region=stack.region,
        before_ack=before_ack,
    )
    emit("started", index=slot)
    stop_file = Path(log_path).with_suffix(".stop")
    while not stop_file.exists():
        armed.clear()
        done_in_batch.clear()
        esm.poll_once(wait_s=1)
    emit("stopped", index=slot)
    log_file.close()


# --------------------------------------------------------------------------- parent side


@dataclasses.dataclass
class _Upload:
    """One write of the storm: a put of ``contents[data_index]`` under ``key`` (``kind``
    ``put``, ``overwrite`` or ``reupload``), or a delete of ``key``: a delete marker
    (``delete``), its current version for good (``delete_version``), or its oldest
    noncurrent version for good (``delete_noncurrent``)."""

    key: str
    data_index: int
    checksum: bool
    #: Its event is sent a second time (the same event: same sequencer).
    twice: bool = False
    kind: str = "put"
    #: An overwrite whose replaced version's event is delivered again after its own.
    late: bool = False


def _plan(cfg: StormConfig) -> tuple[list[_Upload], list[bytes]]:
    """The uploads in order and the distinct contents, every choice drawn from ``cfg.seed``."""
    rng = random.Random(cfg.seed)
    copies = round(cfg.uploads * cfg.identical_share)
    uniques = max(1, cfg.uploads - copies)
    contents = [_jpeg(cfg.seed * 1_000_003 + i) for i in range(uniques)]
    uploads = [_Upload(f"originals/storm/{i:05d}.jpg", i, rng.random() < cfg.checksum_share) for i in range(uniques)]
    # Copies under names S3's events URL-encode (a space, parentheses, "+" and an accent),
    # which the worker must decode to find them.
    for j in range(cfg.uploads - uniques):
        position = rng.randrange(1, len(uploads) + 1)  # after at least one original
        source = rng.randrange(0, min(position, uniques))
        source_index = uploads[source].data_index
        copy = _Upload(f"originals/storm/copy {j:05d} (1)+é.jpg", source_index, rng.random() < cfg.checksum_share)
        uploads.insert(position, copy)
    # Chosen here, in upload order, not by the upload threads as they happen to run.
    duplicates = random.Random(cfg.seed + 7)
    for u in uploads:
        u.twice = duplicates.random() < cfg.duplicate_share
    _plan_changes(cfg, uploads, contents)
    return uploads, contents


def _plan_changes(cfg: StormConfig, uploads: list[_Upload], contents: list[bytes]) -> None:
    """Insert the overwrites, deletes and re-uploads into ``uploads``, each after the write
    it changes (new contents for overwrites appended to ``contents``)."""
    rng = random.Random(f"{cfg.seed}-changes")
    originals = [u for u in uploads if u.kind == "put"]
    overwrites = round(len(originals) * cfg.overwrite_rate)
    for i, target in enumerate(rng.sample(originals, min(overwrites, len(originals)))):
        contents.append(_jpeg(cfg.seed * 1_000_003 + 500_000 + i))
        change = _Upload(target.key, len(contents) - 1, target.checksum, kind="overwrite")
        change.late = rng.random() < cfg.late_share
        at = uploads.index(target)
        uploads.insert(rng.randrange(at + 1, len(uploads) + 1), change)
    # Deletes: first the originals whose bytes another key shares (the shared set must stay).
    shared = {u.data_index for u in originals if sum(v.data_index == u.data_index for v in originals) > 1}
    ordered = sorted(originals, key=lambda u: (u.data_index not in shared, rng.random()))
    for j, target in enumerate(ordered[: round(len(originals) * cfg.delete_rate)]):
        at = max(i for i, u in enumerate(uploads) if u.key == target.key)  # after its last write
        position = rng.randrange(at + 1, len(uploads) + 1)
        # A third delete the current version for good (S3 then serves the one before, if
        # any: no event says so); the others create a delete marker.
        kind = "delete_version" if rng.random() < 1 / 3 else "delete"
        uploads.insert(position, _Upload(target.key, target.data_index, target.checksum, kind=kind))
        if rng.random() < cfg.reupload_share:
            again = _Upload(f"originals/storm/again {j:05d}.jpg", target.data_index, target.checksum, kind="reupload")
            uploads.insert(position + 1, again)
    # Half the overwritten keys later lose their oldest noncurrent version for good (as a
    # lifecycle expiration does): a "Permanently Deleted" of a version the asset no longer
    # shows, which changes nothing an app sees and owes no notification. A generator of its
    # own keeps the other choices of a seed as they were.
    noncurrent = random.Random(f"{cfg.seed}-noncurrent")
    for change in [u for u in uploads if u.kind == "overwrite"]:
        if noncurrent.random() < 0.5:
            at = uploads.index(change)
            drop = _Upload(change.key, change.data_index, change.checksum, kind="delete_noncurrent")
            uploads.insert(noncurrent.randrange(at + 1, len(uploads) + 1), drop)


def _read_logs(folder: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(folder.glob("worker-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:  # a line cut by a crash mid-write
                    continue


def _copies(records: list[dict[str, Any]], uploads: list[_Upload]) -> dict[int, int]:
    """The first record of each key holding the same bytes as another upload's, when it did
    not render: a new asset of content rendered (or being rendered) for another key, which
    writes its own asset -- answered (``done``) or sent back while the render runs (busy) --
    as ``{id(record): its DynamoDB requests}``. Not duplicates: no one asked for it before."""
    puts = [u for u in uploads if u.kind not in ("delete", "delete_version")]
    shared: dict[int, int] = {}
    for u in puts:
        shared[u.data_index] = shared.get(u.data_index, 0) + 1
    copy_keys = {u.key for u in puts if shared[u.data_index] > 1}
    seen: set[str] = set()
    copies: dict[int, int] = {}
    for r in sorted(records, key=lambda r: r["t"]):
        key = r.get("key")
        if key is None or key in seen:
            continue
        seen.add(key)
        if key in copy_keys and _settled_elsewhere(r):
            copies[id(r)] = r["ddb_requests"]
    return copies


def _settled_elsewhere(record: dict[str, Any]) -> bool:
    """Whether a record was answered (``done``) or sent back while another worker held the
    job (busy) without rendering or holding a claim or a reading mark of its own. A record
    that held a claim did work -- read the bytes for it -- even when another worker took
    the job over before it rendered; one that held an original's reading mark (its media
    type unknown) was the one to read it, even when its mark ran out while it read and
    another delivery, marking it after, claimed the jobs first."""
    return (
        not record["rendered"]
        and not record.get("claimed", False)
        and not record.get("read_for_work", False)
        and record["outcome"] in ("done", "JobBusy", "busy_resent")
        # A delete is its own event: a version deleted for good makes what S3 serves now
        # current (an asset write, and the jobs' read), whatever was rendered before.
        and record.get("detail_type") != "Object Deleted"
    )


def _duplicate_deliveries(records: list[dict[str, Any]], copies: dict[int, int]) -> list[dict[str, Any]]:
    """The records that were duplicates: settled elsewhere (:func:`_settled_elsewhere`) and
    not a copy's first record (:func:`_copies`)."""
    return [r for r in records if _settled_elsewhere(r) and id(r) not in copies]


def _duplicate_renders(events: list[dict[str, Any]]) -> int:
    """Renders started for a key already committed, or while another worker held it alive.

    A worker holds a key from its ``render_started`` until it commits it, crashes, or
    finishes the record (a transient failure or a superseded claim ends there).
    """
    holders: dict[str, dict[int, float]] = defaultdict(dict)
    committed: set[str] = set()
    duplicates = 0
    for e in sorted(events, key=lambda e: e["t"]):
        kind, pid = e["event"], e["pid"]
        if kind == "render_started":
            key = e["job_key"]
            if key in committed or any(p != pid for p in holders[key]):
                duplicates += 1
            holders[key][pid] = e["t"]
        elif kind == "committed":
            committed.add(e["job_key"])
            holders[e["job_key"]].pop(pid, None)
        elif kind == "collected":  # its derivatives are gone: the next render is no duplicate
            committed.discard(e["job_key"])
        elif kind in ("crash", "record"):
            for held in holders.values():
                held.pop(pid, None)
    return duplicates


def _rerenders_after_collection(events: list[dict[str, Any]]) -> int:
    """Commits of a job after its collection (a re-upload of its bytes once they were gone)."""
    collected: set[str] = set()
    again = 0
    for e in events:
        if e["event"] == "collected":
            collected.add(e["job_key"])
        elif e["event"] == "committed" and e["job_key"] in collected:
            again += 1
            collected.discard(e["job_key"])
    return again


class _Collections:
    """The storm's collection: a run every ``collect_every_s`` with the storm's short grace
    while uploads, overwrites and deletes go on, in the parent process, through the real
    collector and adapters; each job it collects is an event (``collected``) for the
    duplicate-render accounting."""

    def __init__(self, stack: LocalStack, settings: Settings, cfg: StormConfig) -> None:
        from mediajobs.entrypoints import collector
        from mediajobs.local.session import configure_worker_logs, local_adapters

        configure_worker_logs(collector, cfg.log_level)  # stderr: stdout holds the one JSON object

        self._cfg = cfg
        self._settings = settings
        adapters = local_adapters(stack, settings)
        self._adapters = dataclasses.replace(adapters, store=_RecordingDeletes(adapters.store, self._collected))
        self._stopped = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.report: dict[str, int] = defaultdict(int)
        self.failed_runs = 0

    def _collected(self, prefix: str) -> None:
        job = prefix.rstrip("/").rsplit("/", 1)[-1]
        self.events.append({"event": "collected", "job_key": job, "t": time.time(), "pid": os.getpid()})

    def run(self, *, grace_s: int) -> None:
        """One collection run; a transient failure is counted and the next run goes on."""
        from mediajobs.entrypoints.collector import run_collection

        try:
            report = run_collection(self._settings, self._adapters, grace_s=grace_s, limit=10_000)
        except Exception:  # noqa: BLE001 - counted: the storm goes on, the end checks judge
            self.failed_runs += 1
            return
        for name, value in report.to_json().items():
            self.report[name] += value

    def every(self, period_s: float, feeder: threading.Thread) -> None:
        """Run every ``period_s`` until :meth:`stop`."""
        while not self._stopped.wait(period_s):
            self.run(grace_s=self._cfg.grace_s)

    def stop(self) -> None:
        self._stopped.set()


def watch_asset_writes(stack: LocalStack) -> None:
    """Give the assets table a stream of its own (``NEW_AND_OLD_IMAGES``; the template's
    table has none): from then on it says what each asset write owes an app, and
    :func:`notification_checks` compares that with what was told."""
    stack.client("dynamodb").update_table(
        TableName=stack.assets_table_name,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )


_UNSEEN: Final = ("unseen", "")


def _s3_version(version: dict[str, Any]) -> str:
    """An S3 version as the storm groups notifications by it: its version id, or its ETag
    and size on an unversioned bucket (never the sequencer)."""
    if version.get("version_id"):
        return str(version["version_id"])
    return f"{version.get('etag')}/{version.get('size_bytes')}"


def notification_checks(stack: LocalStack, told: LocalNotifications) -> tuple[dict[str, int], dict[str, Any]]:
    """Whether every asset version's end was told exactly once, counted (0 each when it
    holds), and what was told.

    What is owed comes from the assets table's own stream (every write of an asset item,
    old and new image): each change the worker committed owes
    :func:`~mediajobs.domain.notifications.notification_for` of it. Then:

    * ``versions_not_told_once``: episodes -- an asset entering ``ready`` or ``failed`` for
      an S3 version (its version id; ETag and size unversioned), or ``deleted`` from
      anything but ``deleted`` -- read from the same stream without ``notification_for``,
      whose distinct ids at the receiver are not exactly one each (an episode whose
      sequencer moved is still one);
    * ``notifications_untold``: owed ids the outbox lacks (the outbox item was not in the
      asset's transaction), and outbox ids nothing owed;
    * ``notifications_missing``: owed ids the receiver never verified, or the bus never had;
    * ``notifications_duplicated``: asset versions (key, version, type) told under more than
      one id at the receiver, and ids put on the bus more than once;
    * ``outbox_outstanding``: outbox items a destination has not marked delivered;
    * ``notification_failures``: messages in the dispatcher's on-failure queue, and
      deliveries refused.
    """
    from collections import Counter

    from mediajobs.adapters.assets import asset_of_image
    from mediajobs.domain.notifications import notification_for, version_identity
    from mediajobs.local.notifications import failures
    from mediajobs.local.streams import stream_records

    model = stack.asset_models().asset
    owed: dict[str, tuple[str, str, str]] = {}
    # Independently of notification_for: each time an asset enters ready or failed for an
    # S3 version, or deleted from anything but deleted (an unknown key's tombstone owes
    # nothing), is one episode, which owes exactly one id; a later event that moves only
    # the sequencer, or a progress write, is the same episode.
    episodes: Counter[tuple[str, str, str]] = Counter()
    run_of: dict[str, tuple[str, str] | None] = {}
    streams = stack.client("dynamodbstreams")
    arn = stack.client("dynamodb").describe_table(TableName=stack.assets_table_name)["Table"]["LatestStreamArn"]
    for record in stream_records(streams, arn):
        new = asset_of_image(model, record["dynamodb"].get("NewImage"))
        if new is None:
            continue
        notification = notification_for(asset_of_image(model, record["dynamodb"].get("OldImage")), new)
        if notification is not None:
            version = json.dumps(version_identity(new.version), sort_keys=True)
            owed[notification.id] = (new.key, version, str(notification.type))
        state = str(new.state)
        run = None
        if state in ("ready", "failed", "deleted"):
            run = (state, "" if state == "deleted" else _s3_version(dataclasses.asdict(new.version)))
        previous = run_of.get(new.key, _UNSEEN)
        if run is not None and run != previous and not (state == "deleted" and previous is _UNSEEN):
            episodes[(new.key, *run)] += 1
        run_of[new.key] = run
    outbox: dict[str, dict[str, Any]] = {}
    for item in stack.outbox_model().scan(consistent_read=True):
        outbox[item.id] = item.deliveries.as_dict() if item.deliveries is not None else {}
    received = told.receiver.received
    at_receiver = set(received.ids())
    bus = Counter(e.get("detail", {}).get("id") for e in told.bus_events)
    ids_of_episode: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for delivery in received.deliveries:
        asset = delivery.payload.get("asset", {})
        state = str(asset.get("state"))
        version = "" if state == "deleted" else _s3_version(asset.get("version") or {})
        ids_of_episode[(str(asset.get("key")), state, version)].add(delivery.id)
    ids_of_version: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for delivery in received.deliveries:
        asset = delivery.payload.get("asset", {})
        version = json.dumps(asset.get("version"), sort_keys=True)
        ids_of_version[(str(asset.get("key")), version, str(delivery.payload.get("type")))].add(delivery.id)
    destinations = ("eventbridge", "webhook")
    checks = {
        # Every episode told under exactly one id (more: a second logical notification).
        "versions_not_told_once": sum(
            1 for group in set(episodes) | set(ids_of_episode) if len(ids_of_episode[group]) != episodes[group]
        ),
        "notifications_untold": len(set(owed) - set(outbox)) + len(set(outbox) - set(owed)),
        "notifications_missing": sum(1 for nid in owed if nid not in at_receiver or bus[nid] == 0),
        "notifications_duplicated": sum(1 for ids in ids_of_version.values() if len(ids) > 1)
        + sum(1 for count in bus.values() if count > 1),
        "outbox_outstanding": sum(1 for marks in outbox.values() if any(d not in marks for d in destinations)),
        "notification_failures": len(failures(stack))
        + sum(1 for marks in outbox.values() for mark in marks.values() if dict(mark).get("refused")),
    }
    counts = {
        "owed": len(owed),
        "outbox": len(outbox),
        "webhook_ids": len(at_receiver),
        "webhook_deliveries": len(received.deliveries),
        "webhook_repeats": received.repeats(),
        "webhook_unverified": received.unverified,
        "bus_events": sum(bus.values()),
        "by_type": dict(sorted(Counter(t for _, _, t in owed.values()).items())),
        "dispatch_runs_failed": told.failed_runs,
    }
    return checks, counts


class _RecordingDeletes:
    """An object store whose ``delete_prefix`` also tells ``on_delete`` the prefix."""

    def __init__(self, inner: ObjectStore, on_delete: Any) -> None:
        self._inner = inner
        self._on_delete = on_delete

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def delete_prefix(self, bucket: str, prefix: str, *, first: str | None = None) -> int:
        deleted = self._inner.delete_prefix(bucket, prefix, first=first)
        self._on_delete(prefix)
        return deleted


def _end_checks(stack: LocalStack, keys: set[str]) -> tuple[dict[str, int], dict[str, int]]:
    """What must hold once the storm is over, counted (0 each when it holds), and the end
    state of every live asset's jobs:

    * ``assets_not_current``: live keys whose asset's version is not S3's current version;
    * ``assets_not_ready``: live keys whose asset is not ``ready``;
    * ``assets_not_deleted``: deleted keys whose asset is not ``deleted``;
    * ``missing_manifests``: jobs a live asset references whose manifest is not there;
    * ``count_mismatches``: jobs whose references differ from the live assets using them;
    * ``unreferenced_prefixes``: prefixes under ``derivatives/`` no live asset references
      (the last collection ran with no grace).
    """
    from collections import Counter

    from mediajobs.adapters.assets import DynamoAssets
    from mediajobs.domain.assets import AssetState

    s3 = stack.client("s3")
    assets = DynamoAssets(stack.asset_models())
    checks = dict.fromkeys(
        (
            "assets_not_current",
            "assets_not_ready",
            "assets_not_deleted",
            "missing_manifests",
            "count_mismatches",
            "unreferenced_prefixes",
        ),
        0,
    )
    end_states: dict[str, int] = defaultdict(int)
    used: Counter[str] = Counter()
    jobs = stack.job_model()
    for key in sorted(keys):
        view = assets.get(stack.bucket, key)
        try:
            head = s3.head_object(Bucket=stack.bucket, Key=key)
        except s3.exceptions.ClientError:
            checks["assets_not_deleted"] += view is None or view.state != AssetState.DELETED
            continue
        if view is None or view.version.version_id != head.get("VersionId"):
            checks["assets_not_current"] += 1
        if view is None or view.state != AssetState.READY:
            checks["assets_not_ready"] += 1
        for entry in view.jobs if view is not None else ():
            used[entry.job_key] += 1
            try:
                row = jobs.get(entry.job_key, consistent_read=True)
                end_states[str(row.failure_reason or row.state)] += 1
            except jobs.DoesNotExist:
                end_states["no_job"] += 1
    for job_key in used:
        try:
            s3.head_object(Bucket=stack.bucket, Key=f"derivatives/{job_key}/manifest.json")
        except s3.exceptions.ClientError:
            checks["missing_manifests"] += 1
    prefixes: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix="derivatives/"):
        prefixes.update(item["Key"].split("/")[1] for item in page.get("Contents", ()))
    # Every reference row, live asset or not, counted per job in one scan (a Query per job
    # is a scan of the whole table in moto: 4,000 of them took over ten minutes).
    references: Counter[str] = Counter()
    for page in (
        stack.client("dynamodb")
        .get_paginator("scan")
        .paginate(
            TableName=stack.assets_table_name,
            FilterExpression="begins_with(pk, :job) AND begins_with(sk, :ref)",
            ExpressionAttributeValues={":job": {"S": "job#"}, ":ref": {"S": "ref#"}},
            ProjectionExpression="pk",
            ConsistentRead=True,
        )
    ):
        references.update(item["pk"]["S"].removeprefix("job#") for item in page["Items"])
    for job_key in prefixes | set(used) | set(references):
        if references[job_key] != used[job_key]:
            checks["count_mismatches"] += 1
    checks["unreferenced_prefixes"] = len(prefixes - set(used))
    return checks, dict(sorted(end_states.items()))


def run_storm(cfg: StormConfig, template_path: Path | None = None, events_log: Path | None = None) -> dict[str, Any]:
    """Run the storm; returns the summary (see the module docstring and the README).

    ``events_log``: where to write every event the workers and the collection logged
    (``claimed``, ``render_started``, ``committed``, ``crash``, ``record``, ``collected``
    ...), one JSON object per line in time order, to find out why a check failed.
    """
    from mediajobs.bootstrap import active_recipes
    from mediajobs.domain.keys import encode_event_key, job_key, sha256_hex
    from mediajobs.local.embedded import EmbeddedAws, listen_to_s3_events
    from mediajobs.local.notifications import LocalNotifications
    from mediajobs.local.runner import QUEUE_DEPTH_ATTRIBUTES

    started = time.monotonic()
    hold_s = cfg.conflict_hold_ms / 1000 if cfg.conflict_hold_ms > 0 else None
    aws = EmbeddedAws(template_path, transaction_hold_s=hold_s)
    folder = Path(tempfile.mkdtemp(prefix="mediajobs.storm-"))  # never mediajobs-*, a work folder's name
    try:
        stack = aws.__enter__()
        # The workers' settings, passed to each as an argument (short leases and margins).
        settings = stack.settings(lease_s=cfg.lease_s, deadline_margin_s=2, image_job_s=2, retry_base_s=1)
        s3, sqs = stack.client("s3"), stack.client("sqs")
        watch_asset_writes(stack)
        sqs.set_queue_attributes(QueueUrl=stack.queue_url, Attributes={"VisibilityTimeout": str(cfg.visibility_s)})
        uploads, contents = _plan(cfg)
        duplicated_events = late_events = 0
        lock = threading.Lock()
        # The events S3 sent, by key, in the order sent: a duplicate is the same event
        # again (its sequencer too), a late event the replaced version's real one.
        sent: dict[str, list[dict[str, Any]]] = defaultdict(list)

        def keep(event: dict[str, Any]) -> None:
            if event.get("detail-type") == "Object Created":
                with lock:
                    sent[event["detail"]["object"]["key"]].append(json.loads(json.dumps(event)))

        stop_listening = listen_to_s3_events(keep)

        def created_events(key: str) -> list[dict[str, Any]]:
            with lock:
                return list(sent[encode_event_key(key)])

        def upload(u: _Upload) -> None:
            nonlocal duplicated_events, late_events
            if u.kind == "delete":
                s3.delete_object(Bucket=stack.bucket, Key=u.key)  # a delete marker
                return
            if u.kind == "delete_noncurrent":  # the oldest version S3 no longer serves, for good
                listed = s3.list_object_versions(Bucket=stack.bucket, Prefix=u.key).get("Versions", [])
                old = [v for v in listed if v["Key"] == u.key and not v["IsLatest"]]
                if old:
                    oldest = min(old, key=lambda v: v["LastModified"])
                    s3.delete_object(Bucket=stack.bucket, Key=u.key, VersionId=oldest["VersionId"])
                return
            if u.kind == "delete_version":  # the current version, for good
                with contextlib.suppress(s3.exceptions.ClientError):  # nothing current (a marker)
                    current = s3.head_object(Bucket=stack.bucket, Key=u.key)["VersionId"]
                    s3.delete_object(Bucket=stack.bucket, Key=u.key, VersionId=current)
                return
            data = contents[u.data_index]
            extra = {"ChecksumAlgorithm": "SHA256"} if u.checksum else {}
            put = s3.put_object(Bucket=stack.bucket, Key=u.key, Body=data, **extra)
            events_of_key = created_events(u.key)
            mine = [e for e in events_of_key if e["detail"]["object"].get("version-id") == put.get("VersionId")]
            if u.twice and mine:
                sqs.send_message(QueueUrl=stack.queue_url, MessageBody=json.dumps(mine[-1]))
                with lock:
                    duplicated_events += 1
            if u.late and mine:
                before = events_of_key[: events_of_key.index(mine[-1])]
                if before:  # the replaced version's event, delivered again after this one
                    sqs.send_message(QueueUrl=stack.queue_url, MessageBody=json.dumps(before[-1]))
                    with lock:
                        late_events += 1

        ctx = multiprocessing.get_context("spawn")
        procs: dict[int, Any] = {}
        spawned = 0

        def spawn(slot: int) -> None:
            nonlocal spawned
            spawned += 1
            path = str(folder / f"worker-{slot:02d}-{spawned:04d}.jsonl")
            work_dir = worker_work_dir(folder, slot)
            work_dir.mkdir(exist_ok=True)
            worker_settings = dataclasses.replace(settings, work_dir=str(work_dir))
            p = ctx.Process(target=_worker_main, args=(slot, spawned, worker_settings, stack, cfg, path), daemon=True)
            p.start()
            procs[slot] = (p, path)

        for slot in range(cfg.workers):
            spawn(slot)

        def backlog() -> int:
            attrs = sqs.get_queue_attributes(QueueUrl=stack.queue_url, AttributeNames=["ApproximateNumberOfMessages"])[
                "Attributes"
            ]
            return int(attrs["ApproximateNumberOfMessages"])

        def feed() -> None:
            # Uploads arrive while the workers run, in waves that keep the visible backlog
            # near BACKLOG messages (moto's ReceiveMessage scans the whole queue).
            with ThreadPoolExecutor(max_workers=4) as pool:
                for start in range(0, len(uploads), FEED_WAVE):
                    while backlog() > BACKLOG and time.monotonic() < deadline:
                        time.sleep(0.25)
                    list(pool.map(upload, uploads[start : start + FEED_WAVE]))

        deadline = time.monotonic() + cfg.max_seconds
        feeder = threading.Thread(target=feed, name="uploads", daemon=True)
        feeder.start()
        collections = _Collections(stack, settings, cfg)
        collector = threading.Thread(
            target=collections.every, args=(cfg.collect_every_s, feeder), name="collection", daemon=True
        )
        collector.start()
        told = LocalNotifications(stack)
        dispatching = threading.Event()

        def dispatch_every(period_s: float) -> None:
            while not dispatching.wait(period_s):
                told.run()

        dispatcher = threading.Thread(target=dispatch_every, args=(cfg.dispatch_every_s,), name="dispatch", daemon=True)
        dispatcher.start()

        def queue_depth() -> int:
            attrs = sqs.get_queue_attributes(QueueUrl=stack.queue_url, AttributeNames=list(QUEUE_DEPTH_ATTRIBUTES))[
                "Attributes"
            ]
            return sum(int(attrs.get(name, 0)) for name in QUEUE_DEPTH_ATTRIBUTES)

        empty_since = None
        while time.monotonic() < deadline:
            for slot, (p, _) in list(procs.items()):
                if not p.is_alive():
                    spawn(slot)  # a crashed worker is replaced, as Lambda would
            if not feeder.is_alive() and queue_depth() == 0:
                empty_since = empty_since or time.monotonic()
                if time.monotonic() - empty_since > 2:  # settled: nothing in flight for 2 s
                    break
            else:
                empty_since = None
            time.sleep(0.5)
        timed_out = time.monotonic() >= deadline
        for _, path in procs.values():
            Path(path).with_suffix(".stop").touch()
        for p, _ in procs.values():
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        collections.stop()
        collector.join(timeout=60)
        stop_listening()
        # Everything is settled: the last collection has no grace (nothing can revive now),
        # once the leases of workers that died holding a claim have run out (their renders
        # were abandoned: an unreferenced job whose lease is live is left for a later run).
        time.sleep(cfg.lease_s + 1)
        collections.run(grace_s=0)
        dispatching.set()
        dispatcher.join(timeout=120)
        told.run()  # everything committed is in the stream now: the last dispatch

        events = sorted([*_read_logs(folder), *collections.events], key=lambda e: e["t"])
        if events_log is not None:
            with open(events_log, "w", encoding="utf-8") as log_out:
                log_out.writelines(json.dumps(e) + "\n" for e in events)
        # Every job of every content uploaded: one per active image recipe.
        recipes = active_recipes()["image"]
        unique_keys = {job_key(sha256_hex(c), recipe.sha256) for c in contents for recipe in recipes}
        checks, end_states = _end_checks(stack, {u.key for u in uploads})
        told_checks, notifications = notification_checks(stack, told)
        told.close()
        lost = checks["assets_not_ready"]
        dlq = int(
            sqs.get_queue_attributes(QueueUrl=stack.dlq_url, AttributeNames=["ApproximateNumberOfMessages"])[
                "Attributes"
            ]["ApproximateNumberOfMessages"]
        )
        records = [e for e in events if e["event"] == "record"]
        copies = _copies(records, uploads)
        duplicates = _duplicate_deliveries(records, copies)
        summary: dict[str, Any] = {
            "uploads": len(uploads),
            "unique_jobs": len(unique_keys),
            "renders_started": sum(1 for e in events if e["event"] == "render_started"),
            "renders_committed": sum(1 for e in events if e["event"] == "committed"),
            "duplicate_renders": _duplicate_renders(events),
            "crashes": sum(1 for e in events if e["event"] == "crash"),
            "takeovers": sum(1 for e in events if e["event"] == "claimed" and e.get("took_over")),
            "lost": lost,
            "dlq": dlq,
            "s3_bytes_read_for_duplicates": sum(r["s3_bytes"] for r in duplicates),
            "ddb_requests_per_duplicate": round(sum(r["ddb_requests"] for r in duplicates) / len(duplicates), 3)
            if duplicates
            else 0.0,
            "seconds": round(time.monotonic() - started, 1),
            # Beyond the contract: what the storm was made of.
            "deliveries": len(records),
            "duplicate_deliveries": len(duplicates),
            "duplicated_events": duplicated_events,
            "acks_lost": sum(1 for e in events if e["event"] == "ack_lost"),
            "busy_resent": sum(1 for r in records if r["outcome"] in ("busy_resent", "JobBusy")),
            "handed_over": sum(1 for r in records if r["outcome"] == "handed_over"),
            "worker_processes": spawned,
            "end_states": dict(sorted(end_states.items())),
            "timed_out": timed_out,
            "overwrites": sum(1 for u in uploads if u.kind == "overwrite"),
            "deletes": sum(1 for u in uploads if u.kind in ("delete", "delete_version")),
            "version_deletes": sum(1 for u in uploads if u.kind == "delete_version"),
            "noncurrent_deletes": sum(1 for u in uploads if u.kind == "delete_noncurrent"),
            "reuploads": sum(1 for u in uploads if u.kind == "reupload"),
            "late_events": late_events,
            "superseded": sum(1 for r in records if r["outcome"] == "superseded"),
            "collections": collections.report,
            "rerenders_after_collection": _rerenders_after_collection(events),
            # The first answer of a copy under another key: a new asset of content already
            # rendered (its asset written: made current, then recorded ready), not a duplicate.
            "ddb_requests_per_copy": round(sum(copies.values()) / len(copies), 3) if copies else 0.0,
        }
        if aws.conflicts is not None:
            (table, item), writes = aws.conflicts.hottest()
            summary["transaction_conflicts"] = aws.conflicts.conflicts + aws.conflicts.single_conflicts
            summary["hottest_item"] = {"table": table, "key": json.loads(item), "writes": writes}
        summary["notifications"] = notifications
        checks.update(told_checks)
        checks["dead_letters"] = dlq
        checks["duplicate_renders"] = summary["duplicate_renders"]
        checks["lost"] = lost
        summary["checks"] = checks
        return summary
    finally:
        aws.__exit__(None, None, None)
        shutil.rmtree(folder, ignore_errors=True)
