"""The composition root: builds the four functions -- the worker (:func:`worker_function`,
which also runs the collection), the status function (:func:`status_function`), the
dispatcher (:func:`dispatcher_function`) -- from one client factory
(:class:`~mediajobs.adapters.clients.ClientFactory`: one endpoint, one retry configuration),
and registers the recipe steps (:func:`steps`, one line each).

Tests and the local tools pass their own settings, client factory, adapters (real ones
wrapped, or fakes) or observer (:func:`build_service`, :func:`default_adapters`); nothing
else in the package constructs a client, binds a model or builds an adapter.

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
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from pydantic import BaseModel

from mediajobs.adapters.assets import DynamoAssets
from mediajobs.adapters.backfills import DynamoBackfills
from mediajobs.adapters.clients import ClientFactory
from mediajobs.adapters.dynamo import UnitOfWork
from mediajobs.adapters.imaging import identify
from mediajobs.adapters.isolated import IsolatedStep, StepSpec
from mediajobs.adapters.ledger import DynamoLedger, JobModel
from mediajobs.adapters.metrics import FunctionMetrics
from mediajobs.adapters.promos import DynamoPromos, PromoModel
from mediajobs.adapters.rekognition import RekognitionLabels
from mediajobs.adapters.s3 import S3Store
from mediajobs.adapters.sources import SourceIndex, SourceModel
from mediajobs.adapters.sqs import SqsQueue
from mediajobs.domain import recipes as domain_recipes
from mediajobs.domain.inspections.containers import looks_like_video
from mediajobs.domain.keys import UNKEYED_ALGORITHM
from mediajobs.domain.recipes import Recipe
from mediajobs.entrypoints import backfill as backfill_entry
from mediajobs.entrypoints import collector as collector_entry
from mediajobs.entrypoints import worker as worker_entry
from mediajobs.service_layer.assets import AssetKeeper
from mediajobs.service_layer.backfill import Backfiller
from mediajobs.service_layer.claims import Claims, DiskUsage
from mediajobs.service_layer.collection import Collector
from mediajobs.service_layer.decisions import DecisionRecorder
from mediajobs.service_layer.identify import Identify
from mediajobs.service_layer.lease import Heartbeats
from mediajobs.service_layer.observer import PipelineObserver
from mediajobs.service_layer.pipeline import Pipeline
from mediajobs.service_layer.ports import (
    Assets,
    Backfills,
    DecisionLog,
    LabelSource,
    Ledger,
    ObjectStore,
    PromoRecords,
    Queue,
    Sources,
    Step,
)
from mediajobs.service_layer.promo import Promos
from mediajobs.service_layer.reading import Reader
from mediajobs.service_layer.requests import JobRequests
from mediajobs.service_layer.runner import JobRunner
from mediajobs.service_layer.uploads import Uploads
from mediajobs.service_layer.work import remove_work_folders
from mediajobs.settings import Settings
from mediajobs.steps.image_variants import ImageVariantsStep
from mediajobs.steps.moderation import ImageSample, ModerationImage, ModerationVideo
from mediajobs.steps.placeholder import ImagePlaceholder, VideoPlaceholder
from mediajobs.steps.promo import PromoSlideshow
from mediajobs.steps.video_renditions import VideoRenditionsStep

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver

    from mediajobs.adapters.video import FfmpegRenderer
    from mediajobs.entrypoints.dispatcher import DispatcherAdapters
    from mediajobs.service_layer.dispatch import Dispatcher
    from mediajobs.service_layer.review import Reviews

#: A Lambda handler: ``(event, context) -> response``.
Handler = Callable[[Any, Any], Any]

#: Extensions that send bytes no sniffing recognises to ffprobe, whose allow-list and
#: classification then name the failure (an S3 error page saved as ``.mp4`` is
#: ``invalid_media``, not ``unsupported_format``). Never used to accept anything.
VIDEO_EXTENSIONS: frozenset[str] = frozenset({".mp4", ".m4v", ".mov", ".qt", ".webm", ".mkv", ".3gp", ".3g2"})


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
        split_above_s=settings.split_above_s,
        segment_s=settings.segment_s,
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


def steps(settings: Settings, *, in_process: bool = False, labels: LabelSource | None = None) -> dict[str, Step]:
    """The registered recipe steps by name: one line per step.

    Parameters
    ----------
    settings: limits and timeouts.
    in_process: run the image steps in this process instead of the bounded render child
        (tests and benchmarks that measure the rendering itself; never production).
    labels: the moderation steps' label source (default: Rekognition through the
        settings' endpoint, its client made at the first request).
    """
    isolate = (lambda step, **options: step(**options)) if in_process else functools.partial(bounded, settings)
    labels = labels or RekognitionLabels(lambda: ClientFactory.for_settings(settings).client("rekognition"))
    registered: list[Step] = [
        isolate(ImageVariantsStep, **image_limits(settings)),
        isolate(ImagePlaceholder, **image_limits(settings)),
        VideoRenditionsStep(functools.partial(video_renderer, settings)),
        VideoPlaceholder(functools.partial(video_renderer, settings)),
        ModerationImage(labels, isolate(ImageSample, **image_limits(settings))),
        ModerationVideo(labels, functools.partial(video_renderer, settings)),
        PromoSlideshow(labels, functools.partial(video_renderer, settings), settings.max_pixels),
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


def active_file_text() -> str:
    """The text of ``recipes/active.json`` as it is now (read each call: ``mediajobs serve``
    takes an edit of it as a deployment)."""
    from importlib import resources

    return resources.files("mediajobs.recipes").joinpath(domain_recipes.ACTIVE_FILE).read_text(encoding="utf-8")


@functools.cache
def active_recipes(document: str = "") -> dict[str, list[Recipe]]:
    """The recipes ``recipes/active.json`` makes active -- or ``document``, a JSON list in its
    shape (``Settings.active_recipes``) -- by media type, loaded and validated through the
    registered steps once.

    Raises
    ------
    RecipeError
        As :func:`mediajobs.domain.recipes.parse_active` (``document`` not JSON too).
    """
    models = params_models(steps(Settings()))
    if not document:
        return domain_recipes.load_active(models)
    try:
        parsed = json.loads(document)
    except ValueError as exc:
        raise domain_recipes.RecipeError(f"ACTIVE_RECIPES is not JSON: {exc}") from None
    return domain_recipes.parse_active(parsed, models)


@dataclasses.dataclass(frozen=True)
class Adapters:
    """Every adapter the worker uses; :func:`default_adapters` builds the real ones.

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
    backfills: the backfills (DynamoDB, in the assets table; ``None``: none kept).
    decisions: the decision log (Firehose; ``None``: records dropped).
    promos: the promo registry (DynamoDB, in the assets table; ``None``: no promo made).
    """

    store: ObjectStore
    ledger: Ledger
    sources: Sources
    queue: Queue | None
    steps: Mapping[str, Step]
    clock: Callable[[], float] = time.time
    assets: Assets | None = None
    backfills: Backfills | None = None
    decisions: DecisionLog | None = None
    promos: PromoRecords | None = None


def default_adapters(settings: Settings, *, clients: ClientFactory | None = None) -> Adapters:
    """The real adapters for ``settings``, from ``clients`` (default: the function's own
    :meth:`ClientFactory.for_settings`): one unit of work for the three tables, the outbox
    its asset changes put their notifications in."""
    clients = clients or ClientFactory.for_settings(settings)
    uow = clients.unit_of_work(settings.outbox_table_name)
    return Adapters(
        store=S3Store(clients.client("s3")),
        ledger=DynamoLedger(uow, clients.model(JobModel, settings.jobs_table_name), max_attempts=settings.max_attempts),
        sources=SourceIndex(uow, clients.model(SourceModel, settings.sources_table_name)),
        queue=SqsQueue(clients.client("sqs")),
        steps=steps(settings, labels=RekognitionLabels(lambda: clients.client("rekognition"))),
        assets=DynamoAssets(uow, clients.asset_models(settings.assets_table_name)),
        backfills=DynamoBackfills(uow, clients.backfill_models(settings.assets_table_name)),
        decisions=decision_log(settings, clients),
        promos=promo_records(settings, clients, uow),
    )


def promo_records(settings: Settings, clients: ClientFactory, uow: UnitOfWork) -> DynamoPromos:
    """The promo registry in the assets table of ``settings``."""
    return DynamoPromos(
        uow, clients.model(PromoModel, settings.assets_table_name), clients.asset_models(settings.assets_table_name)
    )


def build_promos(
    settings: Settings, adapters: Adapters, *, recipes: Mapping[str, Sequence[Recipe]] | None = None
) -> Promos | None:
    """Albums' promos over ``adapters`` (store, assets, ledger, queue, promo registry), with
    the active promo recipe of ``recipes`` (default: the active ones); ``None`` when the
    adapters keep no assets or promos.
    """
    from mediajobs.domain.recipes import ALBUM

    if adapters.assets is None or adapters.promos is None:
        return None
    recipes = dict(recipes) if recipes is not None else active_recipes(settings.active_recipes)
    album = list(recipes.get(ALBUM, ()))
    return Promos(
        settings,
        store=adapters.store,
        assets=adapters.assets,
        ledger=adapters.ledger,
        requests=JobRequests(settings, ledger=adapters.ledger, queue=adapters.queue, clock=adapters.clock),
        records=adapters.promos,
        recipe=album[0] if album else None,
        active=frozenset(r.ref for rs in recipes.values() for r in rs),
        clock=adapters.clock,
    )


def decision_log(settings: Settings, clients: ClientFactory) -> DecisionLog | None:
    """The Firehose decision log of ``settings.decision_stream_name`` (``None`` without one)."""
    if not settings.decision_stream_name:
        return None
    from mediajobs.adapters.firehose import FirehoseDecisionLog

    return FirehoseDecisionLog(clients.client("firehose"), settings.decision_stream_name)


def build_service(
    settings: Settings | None = None,
    *,
    adapters: Adapters | None = None,
    observer: PipelineObserver | None = None,
    recipes: Mapping[str, list[Recipe]] | None = None,
    disk_usage: Callable[[str], DiskUsage] = shutil.disk_usage,
    detect: Callable[[Path, str], str | None] = detect_media,
) -> Pipeline:
    """Build the worker's service: the pipeline and each step of a delivery.

    Parameters
    ----------
    settings: defaults to :meth:`Settings.from_env`.
    adapters: defaults to :func:`default_adapters` for ``settings``.
    observer: hooks for the CLI and tests.
    recipes: the recipes to apply by media type; defaults to the active ones
        (:func:`active_recipes`, ``recipes/active.json``).
    disk_usage: sizes of the disk holding the work folder (tests pass a small one).
    detect: the media type of an original's bytes (:func:`detect_media`; tests pass their own).

    Raises
    ------
    ValueError
        If a recipe names a step that is not registered (every job of it would fail).
    """
    settings = settings or Settings.from_env()
    # Once per cold start: every work folder here was left by a worker that died in this sandbox.
    remove_work_folders(settings.work_dir)
    a = adapters or default_adapters(settings)
    observer = observer or PipelineObserver()
    recipes = dict(recipes) if recipes is not None else active_recipes(settings.active_recipes)
    missing = sorted({r.step for rs in recipes.values() for r in rs} - set(a.steps))
    if missing:
        raise ValueError(f"recipes name steps that are not registered: {missing}")
    requests = JobRequests(settings, ledger=a.ledger, queue=a.queue, clock=a.clock)
    decisions = DecisionRecorder(a.decisions, a.clock)
    claims = Claims(
        settings,
        ledger=a.ledger,
        recipes=recipes,
        requests=requests,
        clock=a.clock,
        disk_usage=disk_usage,
        decisions=decisions,
    )
    heartbeats = Heartbeats(
        a.ledger, a.queue, lease_s=settings.lease_s, margin_s=settings.deadline_margin_s, clock=a.clock
    )
    return Pipeline(
        identify=Identify(settings, store=a.store, sources=a.sources, clock=a.clock),
        claims=claims,
        reader=Reader(
            settings, store=a.store, sources=a.sources, claims=claims, detect_media=detect, observer=observer
        ),
        runner=JobRunner(
            settings,
            store=a.store,
            ledger=a.ledger,
            steps=a.steps,
            heartbeats=heartbeats,
            observer=observer,
            requests=requests,
        ),
        assets=AssetKeeper(a.assets, a.clock, on_write=observer.step, retire_grace_s=settings.retire_grace_s),
        observer=observer,
        decisions=decisions,
    )


def build_backfiller(
    settings: Settings, adapters: Adapters, *, recipes: Mapping[str, Sequence[Recipe]] | None = None
) -> Backfiller:
    """The backfills over ``adapters`` (its backfills, assets, ledger and queue), rolling out
    ``recipes`` (default: the active ones, :func:`active_recipes`).

    Raises
    ------
    ValueError
        When ``adapters`` carries no assets or backfills adapter.
    """
    if adapters.assets is None or adapters.backfills is None:
        raise ValueError("backfills need the assets and backfills adapters")
    recipes = dict(recipes) if recipes is not None else active_recipes(settings.active_recipes)
    requests = JobRequests(settings, ledger=adapters.ledger, queue=adapters.queue, clock=adapters.clock)
    claims = Claims(settings, ledger=adapters.ledger, recipes=recipes, requests=requests, clock=adapters.clock)
    return Backfiller(
        settings,
        backfills=adapters.backfills,
        assets=adapters.assets,
        claims=claims,
        recipes=recipes,
        clock=adapters.clock,
        promos=build_promos(settings, adapters, recipes=recipes),
    )


def build_collector(settings: Settings, adapters: Adapters) -> Collector:
    """The collection over ``adapters`` (its store, ledger, assets and clock).

    Raises
    ------
    ValueError
        When ``adapters`` carries no assets adapter.
    """
    if adapters.assets is None:
        raise ValueError("the collection needs the assets adapter")
    return Collector(adapters.assets, adapters.ledger, adapters.store, settings, clock=adapters.clock)  # type: ignore[arg-type]


def dispatcher_adapters(settings: Settings, *, clients: ClientFactory | None = None) -> DispatcherAdapters:
    """The dispatcher's real adapters: the outbox table, the bus (when
    ``notification_bus_name`` is set), the webhook (when ``webhook_url`` is set, its secret
    read through Powertools' parameters, cached 300 s, at each signature), the on-failure queue.

    The webhook's transport admits the networks of ``webhook_allow_networks`` and checks
    every address the URL's host resolves to at each POST (``adapters/webhooks.py``); the
    settings refused a literal address already.

    Raises
    ------
    ValueError
        No secret for the webhook.
    """
    from aws_lambda_powertools.utilities import parameters

    from mediajobs.adapters.notify import EventBridgeDestination, SqsFailureSink
    from mediajobs.adapters.outbox import DynamoOutbox, OutboxModel
    from mediajobs.adapters.webhooks import HttpTransport, StandardWebhooksSigner
    from mediajobs.entrypoints.dispatcher import DispatcherAdapters
    from mediajobs.service_layer.dispatch import Destination, WebhookDestination, WebhookPolicy

    clients = clients or ClientFactory.for_settings(settings)
    destinations: list[Destination] = []
    if settings.notification_bus_name:
        destinations.append(EventBridgeDestination(clients.client("events"), settings.notification_bus_name))
    if settings.webhook_url:
        if not settings.webhook_secret_arn:
            raise ValueError("WEBHOOK_URL is set without WEBHOOK_SECRET_ARN")
        provider = parameters.SecretsProvider(boto3_client=clients.client("secretsmanager"))
        secret_arn = settings.webhook_secret_arn

        def secret() -> str:  # cached 300 s by Powertools: a rotated secret is read then
            return str(provider.get(secret_arn, max_age=300))

        policy = WebhookPolicy(
            timeout_s=settings.webhook_timeout_s,
            attempts=settings.webhook_attempts,
            retry_after_cap_s=settings.webhook_retry_after_cap_s,
        )
        transport = HttpTransport(allowed=settings.webhook_networks)
        signer = StandardWebhooksSigner(secret)
        destinations.append(WebhookDestination(settings.webhook_url, transport, signer, policy=policy))
    outbox = DynamoOutbox(clients.unit_of_work(), clients.model(OutboxModel, settings.outbox_table_name))
    failures = SqsFailureSink(clients.client("sqs"), settings.notification_failures_queue_url)
    return DispatcherAdapters(outbox, tuple(destinations), failures)


def build_dispatcher(adapters: DispatcherAdapters) -> Dispatcher:
    """The dispatcher over ``adapters``."""
    from mediajobs.service_layer.dispatch import Dispatcher

    return Dispatcher(
        adapters.outbox, adapters.destinations, adapters.failures, clock=adapters.clock, sleep=adapters.sleep
    )


def status_app(
    settings: Settings,
    *,
    clients: ClientFactory | None = None,
    assets: Assets | None = None,
    logger: Logger | None = None,
) -> LambdaFunctionUrlResolver:
    """The status function's resolver: the asset records of ``settings.media_bucket``
    (read through a unit of work without the outbox), and reviews decided and promos
    requested on the jobs table and queue (when the settings name that queue)."""
    from mediajobs.entrypoints.status import make_status_app

    clients = clients or ClientFactory.for_settings(settings)
    uow = clients.unit_of_work()
    assets = assets or DynamoAssets(uow, clients.asset_models(settings.assets_table_name))
    backfills = DynamoBackfills(uow, clients.backfill_models(settings.assets_table_name))
    reviews = build_reviews(settings, clients, assets) if settings.jobs_queue_arn else None
    promos = promos_over(settings, clients, assets) if settings.jobs_queue_arn else None
    return make_status_app(
        assets,
        settings,
        backfills=backfills,
        reviews=reviews,
        promos=promos,
        uploads=build_uploads(settings, clients),
        logger=logger or powertools_logger(),
    )


def build_uploads(settings: Settings, clients: ClientFactory, *, clock: Callable[[], float] = time.time) -> Uploads:
    """Uploads signed for ``settings.media_bucket`` with the credentials of ``clients``'
    S3 client, for the media types the active recipes take
    (:class:`~mediajobs.service_layer.uploads.Uploads`)."""
    from mediajobs.adapters.uploads import S3Uploads
    from mediajobs.domain.recipes import UPLOAD_MEDIA

    media = [m for m in active_recipes(settings.active_recipes) if m in UPLOAD_MEDIA]
    return Uploads(settings, signer=S3Uploads(clients.client("s3")), media=media, clock=clock)


def promos_over(settings: Settings, clients: ClientFactory, assets: Assets) -> Promos | None:
    """Albums' promos over the bucket, tables and jobs queue of ``settings`` and the asset
    records ``assets`` (the status function's ``/promos``, ``mediajobs promo``)."""
    uow = clients.unit_of_work()
    adapters = Adapters(
        store=S3Store(clients.client("s3")),
        ledger=DynamoLedger(uow, clients.model(JobModel, settings.jobs_table_name), max_attempts=settings.max_attempts),
        sources=SourceIndex(uow, clients.model(SourceModel, settings.sources_table_name)),
        queue=SqsQueue(clients.client("sqs")),
        steps={},
        assets=assets,
        promos=promo_records(settings, clients, uow),
    )
    return build_promos(settings, adapters)


def build_reviews(
    settings: Settings, clients: ClientFactory, assets: Assets, *, clock: Callable[[], float] = time.time
) -> Reviews:
    """Reviews over the jobs table and queue of ``settings``
    (:class:`~mediajobs.service_layer.review.Reviews`)."""
    from mediajobs.service_layer.review import Reviews

    ledger = DynamoLedger(
        clients.unit_of_work(), clients.model(JobModel, settings.jobs_table_name), max_attempts=settings.max_attempts
    )
    requests = JobRequests(settings, ledger=ledger, queue=SqsQueue(clients.client("sqs")), clock=clock)
    return Reviews(ledger, assets, requests, bucket=settings.media_bucket, clock=clock)


# -- The functions as Lambda runs them ------------------------------------------------------


def powertools_logger() -> Logger:
    """The functions' logger (service from ``POWERTOOLS_SERVICE_NAME``, which the template
    sets), its configuration copied to the package's own loggers."""
    logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mediajobs"))
    copy_config_to_registered_loggers(source_logger=logger, include={"mediajobs"})
    return logger


def function_metrics() -> FunctionMetrics:
    """The functions' metrics (namespace from ``POWERTOOLS_METRICS_NAMESPACE``)."""
    namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "mediajobs")
    return FunctionMetrics(Metrics(namespace=namespace, service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mediajobs")))


class OnFirstCall:
    """A Lambda handler built at the first invocation of its execution environment, then
    kept for the environment's life (what Lambda's INIT imports builds nothing, reads no
    setting and makes no client).

    Parameters
    ----------
    build: builds the handler.
    """

    def __init__(self, build: Callable[[], Handler]) -> None:
        self._build = build
        self._handler: Handler | None = None

    def built(self) -> Handler:
        """The handler, built now if it was not yet (what the first invocation does)."""
        if self._handler is None:
            self._handler = self._build()
        return self._handler

    def __call__(self, event: Any, context: Any) -> Any:
        return self.built()(event, context)


def with_key_secret(settings: Settings, clients: ClientFactory | None = None) -> Settings:
    """``settings`` with the job keys' secret read from Secrets Manager (``key_secret_arn``,
    one ``GetSecretValue`` per execution environment, at the first invocation) when the key
    algorithm needs one and it is not given; as they are otherwise.

    Raises
    ------
    ValueError
        Algorithm 2 with neither ``KEY_SECRET`` nor ``KEY_SECRET_ARN``, or a secret under 32
        bytes: the function cannot derive a key, and says so at once rather than per job.
    botocore.exceptions.ClientError
        As Secrets Manager answers (the function's first invocation fails; its records come
        back to the queue).
    """
    if settings.key_algorithm == UNKEYED_ALGORITHM or settings.key_secret:
        return settings
    if not settings.key_secret_arn:
        raise ValueError(
            f"KEY_ALGORITHM_VERSION {settings.key_algorithm} derives job keys with the stack's secret:"
            " set KEY_SECRET_ARN (the template's JobKeySecret) or KEY_SECRET"
        )
    clients = clients or ClientFactory.for_settings(settings)
    answer = clients.client("secretsmanager").get_secret_value(SecretId=settings.key_secret_arn)
    keyed = dataclasses.replace(settings, key_secret=str(answer["SecretString"]))
    keyed.keys  # noqa: B018 -- a secret too short is refused here, not at the first key
    return keyed


def worker_function(settings: Settings | None = None, *, adapters: Adapters | None = None) -> OnFirstCall:
    """The worker function's handler: an SQS batch goes to the worker's handler, the
    schedule's collection request (:func:`mediajobs.entrypoints.collector.is_collection_request`)
    to the collection, its backfill request (:func:`mediajobs.entrypoints.backfill.is_backfill_request`)
    to the backfills (``adapters``: default :func:`default_adapters`)."""

    def build() -> Handler:
        s = with_key_secret(settings or Settings.from_env())
        logger, metrics = powertools_logger(), function_metrics()
        adapters_ = adapters or default_adapters(s)
        work = worker_entry.make_handler(build_service(s, adapters=adapters_), logger=logger, metrics=metrics)
        collect = collector_entry.make_handler(build_collector(s, adapters_), logger=logger, metrics=metrics)
        backfill = OnFirstCall(  # built at the first backfill request: an SQS batch needs none of it
            lambda: backfill_entry.make_handler(build_backfiller(s, adapters_), logger=logger, metrics=metrics)
        )

        def route(event: Any, context: Any) -> Any:
            if collector_entry.is_collection_request(event):
                return collect(event, context)
            if backfill_entry.is_backfill_request(event):
                return backfill(event, context)
            return work(event, context)

        return route

    return OnFirstCall(build)


def status_function(settings: Settings | None = None) -> OnFirstCall:
    """The status function's handler (``GET /assets?key=...`` behind its function URL)."""

    def build() -> Handler:
        logger = powertools_logger()
        app = status_app(with_key_secret(settings or Settings.from_env()), logger=logger)
        return logger.inject_lambda_context(app.resolve)  # type: ignore[no-any-return]

    return OnFirstCall(build)


def dispatcher_function(settings: Settings | None = None) -> OnFirstCall:
    """The dispatcher's handler (the outbox table's stream)."""

    def build() -> Handler:
        from mediajobs.entrypoints.dispatcher import make_handler

        s = settings or Settings.from_env()
        return make_handler(
            build_dispatcher(dispatcher_adapters(s)), logger=powertools_logger(), metrics=function_metrics()
        )

    return OnFirstCall(build)
