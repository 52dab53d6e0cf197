"""The composition root: builds the pipeline from settings with the real adapters.

Tests and the local runner pass their own settings, clients or observer; nothing else
in the package constructs adapters.

What only videos need is imported where that path starts, not when the handler is
imported (Lambda's INIT, paid by every cold start): the video adapter (the ffmpeg runner
and the video plans) at the first video render. What every original needs stays at the
top: boto3, PynamoDB, the recipes, and the image adapter (Pillow, pi-heif and the
container walkers), since every original is detected with it, so that a layer whose
Pillow or pi-heif cannot be imported fails at INIT (``Runtime.ImportModuleError``), not
record by record as a transient failure. ``benchmarks/cold_start.py`` measures INIT.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from mediajobs.adapters.imaging import identify
from mediajobs.adapters.isolated import IsolatedRenderer, RendererSpec
from mediajobs.adapters.ledger import DynamoLedger, bind_model, bound_job_model
from mediajobs.adapters.s3 import S3Store
from mediajobs.adapters.sources import SourceIndex, SourceModel
from mediajobs.adapters.sqs import SqsQueue
from mediajobs.domain.inspections.containers import looks_like_video
from mediajobs.domain.recipes import Recipe, load_recipe
from mediajobs.service_layer.pipeline import (
    ImageRenderer,
    Pipeline,
    PipelineObserver,
    VideoRenderer,
    remove_work_folders,
)
from mediajobs.service_layer.ports import Ledger, ObjectStore, Queue, Sources
from mediajobs.settings import Settings

if TYPE_CHECKING:
    from mediajobs.domain.jobs import RenderContext, RenderedFile
    from mediajobs.domain.manifest import Decisions
    from mediajobs.domain.recipes import VideoRenditionsParams

#: Recipes applied to each media type, as (id, version).
ACTIVE_RECIPES: dict[str, list[tuple[str, int]]] = {"image": [("web-image", 1)], "video": [("web-video", 2)]}

#: Extensions that send bytes no sniffing recognises to ffprobe, whose allow-list and
#: classification then name the failure (an S3 error page saved as ``.mp4`` is
#: ``invalid_media``, not ``unsupported_format``). Never used to accept anything.
VIDEO_EXTENSIONS: frozenset[str] = frozenset({".mp4", ".m4v", ".mov", ".qt", ".webm", ".mkv", ".3gp", ".3g2"})

#: SDK retry mode: throttling and S3 SlowDown are retried by botocore, not by our code.
RETRY_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=60)


def detect_media(path: Path, key: str = "") -> str | None:
    """``"image"`` when the bytes are an accepted image format; ``"video"`` when they look like
    a media container or playlist (ffprobe's allow-list decides what is accepted), or when
    nothing recognises them and ``key`` has a video extension; else ``None``."""
    if identify(path) is not None:
        return "image"
    if looks_like_video(path) or Path(key).suffix.lower() in VIDEO_EXTENSIONS:
        return "video"
    return None


@functools.cache
def active_recipes() -> dict[str, list[Recipe]]:
    """The recipes of :data:`ACTIVE_RECIPES`, loaded and validated once."""
    return {media: [load_recipe(rid, ver) for rid, ver in refs] for media, refs in ACTIVE_RECIPES.items()}


class DeferredVideoRenderer:
    """A video renderer that ``make`` builds at the first render, so that its imports (the
    ffmpeg runner, the video plans) wait for the first video instead of Lambda's INIT.

    Parameters
    ----------
    make: builds the renderer (:func:`video_renderer`); called once.
    """

    def __init__(self, make: Callable[[], VideoRenderer]) -> None:
        self._make = make
        self._renderer: VideoRenderer | None = None

    def render(
        self, source: Path, params: VideoRenditionsParams, out_dir: Path, context: RenderContext | None = None
    ) -> tuple[list[RenderedFile], Decisions]:
        """Render the renditions ``params`` asks for into ``out_dir``
        (:meth:`FfmpegRenderer.render <mediajobs.adapters.video.FfmpegRenderer.render>`).

        Returns
        -------
        (files, decisions)
            The renditions and the poster, and what was decided about them.

        Raises
        ------
        PermanentFailure, TransientFailure
            As the renderer's ``render`` does.
        """
        if self._renderer is None:
            self._renderer = self._make()
        return self._renderer.render(source, params, out_dir, context)


def video_renderer(settings: Settings) -> VideoRenderer:
    """The ffmpeg renderer for ``settings``, imported here (the video path only)."""
    from mediajobs.adapters.video import FfmpegRenderer

    return FfmpegRenderer(
        speed_factor=settings.video_speed_factor,
        max_duration_s=settings.max_video_s,
        invocation_s=settings.worker_timeout_s - settings.deadline_margin_s,
        margin_s=settings.deadline_margin_s,
        max_pixels=settings.max_pixels,
    )


#: The inner image renderer, built in the render child (``module:name``).
IMAGE_RENDERER_FACTORY = "mediajobs.adapters.imaging:PillowRenderer"


def image_renderer(settings: Settings) -> ImageRenderer:
    """The image renderer of production: :class:`~mediajobs.adapters.imaging.PillowRenderer`
    run in a child process whose address space is bounded by ``settings.decode_memory_mb``
    (:class:`~mediajobs.adapters.isolated.IsolatedRenderer`), for at most the invocation's
    time less the margin. ``PillowRenderer(max_pixels)`` itself renders in-process (local
    tools, tests)."""
    return IsolatedRenderer(
        RendererSpec(IMAGE_RENDERER_FACTORY, {"max_pixels": settings.max_pixels}),
        memory_budget_mb=settings.decode_memory_mb,
        timeout_s=settings.worker_timeout_s - settings.deadline_margin_s,
        margin_s=settings.deadline_margin_s,
    )


def s3_client(settings: Settings) -> Any:
    """A boto3 S3 client for ``settings`` (endpoint, region, standard retries)."""
    return boto3.client("s3", region_name=settings.region, endpoint_url=settings.endpoint_url, config=RETRY_CONFIG)


def sqs_client(settings: Settings) -> Any:
    """A boto3 SQS client for ``settings``."""
    return boto3.client("sqs", region_name=settings.region, endpoint_url=settings.endpoint_url, config=RETRY_CONFIG)


@dataclasses.dataclass(frozen=True)
class Adapters:
    """Every adapter the service uses; :func:`default_adapters` builds the real ones.

    Tests and local tools take the defaults and replace or wrap some of them
    (``dataclasses.replace(default_adapters(settings), store=Counting(adapters.store))``)
    instead of patching classes.

    Attributes
    ----------
    store: S3 (originals and derivatives).
    ledger: the job ledger (DynamoDB).
    sources: the source index (DynamoDB).
    queue: the SQS queue records come from (``None``: no SQS delivery).
    renderer: renders images; video_renderer: renders videos.
    clock: Unix time in seconds.
    """

    store: ObjectStore
    ledger: Ledger
    sources: Sources
    queue: Queue | None
    renderer: ImageRenderer
    video_renderer: VideoRenderer | None
    clock: Callable[[], float] = time.time


def default_adapters(settings: Settings, *, s3: Any = None) -> Adapters:
    """The real adapters for ``settings`` (``s3``: a boto3 S3 client to use instead of a new one)."""
    jobs = bound_job_model(settings.jobs_table_name, settings.region, settings.endpoint_url)
    sources = bind_model(SourceModel, settings.sources_table_name, settings.region, settings.endpoint_url)
    return Adapters(
        store=S3Store(s3 or s3_client(settings)),
        ledger=DynamoLedger(jobs, max_attempts=settings.max_attempts),
        sources=SourceIndex(sources),
        queue=SqsQueue(sqs_client(settings)),
        renderer=image_renderer(settings),
        video_renderer=DeferredVideoRenderer(functools.partial(video_renderer, settings)),
    )


def build_service(
    settings: Settings | None = None,
    *,
    adapters: Adapters | None = None,
    observer: PipelineObserver | None = None,
) -> Pipeline:
    """Build the service.

    Parameters
    ----------
    settings: defaults to :meth:`Settings.from_env`.
    adapters: defaults to :func:`default_adapters` for ``settings``.
    observer: hooks for the CLI and tests.
    """
    settings = settings or Settings.from_env()
    # Once per cold start: every work folder here was left by a worker that died in this sandbox.
    remove_work_folders(settings.work_dir)
    adapters = adapters or default_adapters(settings)
    return Pipeline(
        settings,
        store=adapters.store,
        ledger=adapters.ledger,
        sources=adapters.sources,
        renderer=adapters.renderer,
        video_renderer=adapters.video_renderer,
        queue=adapters.queue,
        recipes=active_recipes(),
        detect_media=detect_media,
        observer=observer,
        clock=adapters.clock,
    )


def build_pipeline(
    settings: Settings | None = None,
    *,
    observer: PipelineObserver | None = None,
    s3: Any = None,
    clock: Any = None,
    renderer: ImageRenderer | None = None,
) -> Pipeline:
    """Deprecated spelling of :func:`build_service` (removed once every caller moved)."""
    settings = settings or Settings.from_env()
    adapters = default_adapters(settings, s3=s3)
    changes: dict[str, Any] = {}
    if clock is not None:
        changes["clock"] = clock
    if renderer is not None:
        changes["renderer"] = renderer
    return build_service(settings, adapters=dataclasses.replace(adapters, **changes), observer=observer)
