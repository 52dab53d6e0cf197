"""The composition root: builds the service from settings with the real adapters, and
registers the recipe steps (:func:`steps`, one line each).

Tests and the local tools pass their own settings, adapters (real ones wrapped, or fakes)
or observer (:func:`build_service`); nothing else in the package constructs adapters.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from pydantic import BaseModel

from mediajobs.adapters.imaging import identify
from mediajobs.adapters.isolated import IsolatedStep, StepSpec
from mediajobs.adapters.ledger import DynamoLedger, bind_model, bound_job_model
from mediajobs.adapters.s3 import S3Store
from mediajobs.adapters.sources import SourceIndex, SourceModel
from mediajobs.adapters.sqs import SqsQueue
from mediajobs.domain import recipes as domain_recipes
from mediajobs.domain.inspections.containers import looks_like_video
from mediajobs.domain.recipes import Recipe
from mediajobs.service_layer.pipeline import Pipeline, PipelineObserver, remove_work_folders
from mediajobs.service_layer.ports import Assets, Ledger, ObjectStore, Queue, Sources, Step
from mediajobs.settings import Settings
from mediajobs.steps.image_variants import ImageVariantsStep
from mediajobs.steps.placeholder import ImagePlaceholder, VideoPlaceholder
from mediajobs.steps.video_renditions import VideoRenditionsStep

if TYPE_CHECKING:
    from mediajobs.adapters.video import FfmpegRenderer

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


def video_renderer(settings: Settings) -> FfmpegRenderer:
    """The ffmpeg renderer for ``settings``, imported here (the video path only)."""
    from mediajobs.adapters.video import FfmpegRenderer

    return FfmpegRenderer(
        speed_factor=settings.video_speed_factor,
        max_duration_s=settings.max_video_s,
        invocation_s=settings.worker_timeout_s - settings.deadline_margin_s,
        margin_s=settings.deadline_margin_s,
        max_pixels=settings.max_pixels,
    )


def bounded(settings: Settings, step: type[Any], **options: Any) -> IsolatedStep:
    """``step(**options)`` run in the bounded render child
    (:class:`~mediajobs.adapters.isolated.IsolatedStep`): its address space bounded by
    ``settings.decode_memory_mb``, its time by the invocation's less the margin. For every
    step that decodes untrusted images."""
    return IsolatedStep(
        StepSpec(f"{step.__module__}:{step.__qualname__}", options),
        memory_budget_mb=settings.decode_memory_mb,
        timeout_s=settings.worker_timeout_s - settings.deadline_margin_s,
        margin_s=settings.deadline_margin_s,
    )


def image_limits(settings: Settings) -> dict[str, int]:
    """The image limits of ``settings``, as the image steps take them."""
    return {
        "max_pixels": settings.max_pixels,
        "max_frames": settings.max_frames,
        "max_jpeg_scans": settings.max_jpeg_scans,
    }


def steps(settings: Settings, *, in_process: bool = False) -> dict[str, Step]:
    """The registered recipe steps by name: one line per step.

    Parameters
    ----------
    settings: limits and timeouts.
    in_process: run the image steps in this process instead of the bounded render child
        (tests and benchmarks that measure the rendering itself; never production).
    """
    isolate = (lambda step, **options: step(**options)) if in_process else functools.partial(bounded, settings)
    registered: list[Step] = [
        isolate(ImageVariantsStep, **image_limits(settings)),
        isolate(ImagePlaceholder, **image_limits(settings)),
        VideoRenditionsStep(functools.partial(video_renderer, settings)),
        VideoPlaceholder(functools.partial(video_renderer, settings)),
    ]
    return {step.name: step for step in registered}


def params_models(registry: Mapping[str, Step]) -> dict[str, type[BaseModel]]:
    """The parameters model of each registered step, by step name (what recipes are validated with)."""
    return {name: step.params_model for name, step in registry.items()}


def load_recipe(recipe_id: str, version: int) -> Recipe:
    """``recipes/<recipe_id>.v<version>.json`` validated through the registered steps
    (:func:`mediajobs.domain.recipes.load_recipe`).

    Raises
    ------
    RecipeError
        If it does not exist, does not validate, or names a step that is not registered.
    """
    return domain_recipes.load_recipe(recipe_id, version, params_models(steps(Settings())))


@functools.cache
def active_recipes() -> dict[str, list[Recipe]]:
    """The recipes ``recipes/active.json`` makes active, by media type, loaded and validated
    through the registered steps once."""
    return domain_recipes.load_active(params_models(steps(Settings())))


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
    steps: the recipe steps by name (:func:`steps`).
    clock: Unix time in seconds.
    assets: the asset records (DynamoDB; ``None``: no asset kept).
    """

    store: ObjectStore
    ledger: Ledger
    sources: Sources
    queue: Queue | None
    steps: Mapping[str, Step]
    clock: Callable[[], float] = time.time
    assets: Assets | None = None


def default_adapters(settings: Settings, *, s3: Any = None) -> Adapters:
    """The real adapters for ``settings`` (``s3``: a boto3 S3 client to use instead of a new one)."""
    from mediajobs.adapters.assets import DynamoAssets, asset_models

    jobs = bound_job_model(settings.jobs_table_name, settings.region, settings.endpoint_url)
    sources = bind_model(SourceModel, settings.sources_table_name, settings.region, settings.endpoint_url)
    return Adapters(
        store=S3Store(s3 or s3_client(settings)),
        ledger=DynamoLedger(jobs, max_attempts=settings.max_attempts),
        sources=SourceIndex(sources),
        queue=SqsQueue(sqs_client(settings)),
        steps=steps(settings),
        assets=DynamoAssets(
            asset_models(
                settings.assets_table_name, settings.region, settings.endpoint_url, settings.outbox_table_name
            )
        ),
    )


def build_service(
    settings: Settings | None = None,
    *,
    adapters: Adapters | None = None,
    observer: PipelineObserver | None = None,
    recipes: Mapping[str, list[Recipe]] | None = None,
) -> Pipeline:
    """Build the service.

    Parameters
    ----------
    settings: defaults to :meth:`Settings.from_env`.
    adapters: defaults to :func:`default_adapters` for ``settings``.
    observer: hooks for the CLI and tests.
    recipes: the recipes to apply by media type; defaults to the active ones
        (:func:`active_recipes`, ``recipes/active.json``).
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
        steps=adapters.steps,
        queue=adapters.queue,
        recipes=dict(recipes) if recipes is not None else active_recipes(),
        detect_media=detect_media,
        observer=observer,
        clock=adapters.clock,
        assets=adapters.assets,
    )

