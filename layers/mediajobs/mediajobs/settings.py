"""One frozen settings object, read from the environment once.

Explicit arguments win over the environment (``Settings.from_env(max_pixels=...)``).
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field, fields
from typing import Any, Final

from mediajobs.domain.keys import KEY_ALGORITHM_VERSION, KEY_ALGORITHMS, UNKEYED, UNKEYED_ALGORITHM, KeyScheme
from mediajobs.domain.segments import MAX_SEGMENT_SECONDS, MIN_SEGMENT_SECONDS
from mediajobs.domain.webhook_targets import IPNetwork, checked_webhook_url, parse_networks

MB: Final = 1024 * 1024

_ENV_NAMES: Final = {
    "jobs_table_name": "JOBS_TABLE_NAME",
    "sources_table_name": "SOURCES_TABLE_NAME",
    "assets_table_name": "ASSETS_TABLE_NAME",
    "outbox_table_name": "OUTBOX_TABLE_NAME",
    "jobs_queue_arn": "JOBS_QUEUE_ARN",
    "media_bucket": "MEDIA_BUCKET",
    "region": "AWS_REGION",
    "endpoint_url": "AWS_ENDPOINT_URL",
    "originals_prefix": "ORIGINALS_PREFIX",
    "derivatives_prefix": "DERIVATIVES_PREFIX",
    "policy_version": "POLICY_VERSION",
    "key_algorithm": "KEY_ALGORITHM_VERSION",
    "key_secret_arn": "KEY_SECRET_ARN",
    "key_secret": "KEY_SECRET",
    "max_pixels": "MAX_PIXELS",
    "decode_memory_mb": "DECODE_MEMORY_MB",
    "max_input_bytes": "MAX_INPUT_BYTES",
    "lease_s": "LEASE_SECONDS",
    "max_attempts": "MAX_ATTEMPTS",
    "max_receive_count": "MAX_RECEIVE_COUNT",
    "deadline_margin_s": "DEADLINE_MARGIN_SECONDS",
    "image_job_s": "IMAGE_JOB_SECONDS",
    "worker_timeout_s": "WORKER_TIMEOUT_SECONDS",
    "video_speed_factor": "VIDEO_SPEED_FACTOR",
    "max_video_s": "MAX_VIDEO_SECONDS",
    "split_above_s": "SPLIT_ABOVE_SECONDS",
    "segment_s": "SEGMENT_SECONDS",
    "video_queue_arn": "VIDEO_QUEUE_ARN",
    "retry_base_s": "RETRY_BASE_SECONDS",
    "work_dir": "WORK_DIR",
    "collect_grace_s": "COLLECT_GRACE_SECONDS",
    "collect_batch_jobs": "COLLECT_BATCH_JOBS",
    "notification_bus_name": "NOTIFICATION_BUS_NAME",
    "notification_failures_queue_url": "NOTIFICATION_FAILURES_QUEUE_URL",
    "webhook_url": "WEBHOOK_URL",
    "webhook_secret_arn": "WEBHOOK_SECRET_ARN",
    "webhook_timeout_s": "WEBHOOK_TIMEOUT_SECONDS",
    "webhook_attempts": "WEBHOOK_ATTEMPTS",
    "webhook_retry_after_cap_s": "WEBHOOK_RETRY_AFTER_CAP_SECONDS",
    "webhook_allow_networks": "WEBHOOK_ALLOW_NETWORKS",
    "backfill_queue_arn": "BACKFILL_QUEUE_ARN",
    "backfill_rate_per_s": "BACKFILL_RATE_PER_SECOND",
    "backfill_segments": "BACKFILL_SEGMENTS",
    "retire_grace_s": "RETIRE_GRACE_SECONDS",
    "active_recipes": "ACTIVE_RECIPES",
    "reviewer_arns": "REVIEWER_ARNS",
    "decision_stream_name": "DECISION_STREAM_NAME",
    "multipart_above_bytes": "MULTIPART_ABOVE_BYTES",
    "upload_url_s": "UPLOAD_URL_SECONDS",
}


#: The function's memory, MB, that Lambda sets in every execution environment ("Defined
#: runtime environment variables", AWS Lambda developer guide).
LAMBDA_MEMORY_ENV = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
#: Share of the function's memory an image render may add to its child's baseline when
#: ``DECODE_MEMORY_MB`` is not set: 1,536 of 2,048 MB leaves the handler (75 MB), the
#: child's baseline (60 MB) and about 380 MB for transfers and the page cache.
DECODE_MEMORY_SHARE = 0.75


def decode_budget_mb(function_memory_mb: int) -> int:
    """The default decode memory budget, MB, for a function of ``function_memory_mb``:
    :data:`DECODE_MEMORY_SHARE` of it (1536 for 2048, 768 for 1024), at least 64."""
    return max(64, int(function_memory_mb * DECODE_MEMORY_SHARE))


@dataclass(frozen=True)
class Settings:
    """Runtime settings of the pipeline.

    Attributes
    ----------
    jobs_table_name: DynamoDB table of the job ledger (env ``JOBS_TABLE_NAME``).
    sources_table_name: DynamoDB table of the source index (env ``SOURCES_TABLE_NAME``).
    assets_table_name: DynamoDB table of the assets, their references and the collection
        candidates (env ``ASSETS_TABLE_NAME``).
    outbox_table_name: DynamoDB table of the notifications the asset writes owe, whose
        stream feeds the dispatcher (env ``OUTBOX_TABLE_NAME``).
    jobs_queue_arn: the jobs queue, where a job request goes (env ``JOBS_QUEUE_ARN``;
        empty: the queue of the record being worked on).
    media_bucket: the stack's bucket, whose assets the status function answers for (env
        ``MEDIA_BUCKET``; empty when unset: the worker takes the bucket from each event).
    region: AWS region (env ``AWS_REGION``).
    endpoint_url: override endpoint for every AWS client, e.g. the embedded moto server
        (env ``AWS_ENDPOINT_URL``); ``None`` in AWS.
    originals_prefix: only keys under it are processed (``originals/``).
    derivatives_prefix: outputs go under it (``derivatives/``).
    policy_version: the moderation policy every job is judged by (``recipes/moderation-policy.v<N>.json``),
        part of every job key: ``1``; ``none`` moderates nothing (no moderation job planned).
    key_algorithm: how job keys are derived (:class:`~mediajobs.domain.keys.KeyScheme`):
        ``2``, the keyed one (default), or ``1``, the SHA-256 of public inputs that a stack
        keeps until it rolls 2 out (``docs/operations.md``).
    key_secret_arn: the Secrets Manager secret holding the key secret (deployed; the
        composition root reads it once per execution environment into ``key_secret``).
    key_secret: the key secret itself, at least 32 bytes of text (a local stack's, made
        at start); never in a ``repr``.
    max_pixels: largest accepted width x height, checked from the header before decoding
        (default 50,000,000).
    max_frames: most frames (or pages) an image may have (``too_many_frames``; default
        10,000).
    max_jpeg_scans: most scans a progressive JPEG may have (``too_many_scans``; default
        100: libjpeg-turbo's own advice against scan bombs, and no encoder writes more than
        about a dozen).
    max_input_bytes: largest accepted original in bytes (default 200 MiB).
    decode_memory_mb: address space, MiB, that rendering one image (decode, resize, encode)
        may take on top of the render child's baseline, its interpreter and imports
        (:mod:`mediajobs.adapters.isolated`); past it the job ends ``memory_limit_exceeded``,
        whatever the header said (default 1536). Source: the template's ``MemorySize``,
        2,048 MB, less the handler process (75 MB, template.yaml) and the child's baseline
        (60 MB), leaves about 380 MB for S3 transfers and the page cache; the largest
        legitimate render measured, a 50 MP WebP, takes 804 MB of it
        (``benchmarks/peak_memory.py``). Unset on Lambda, it follows ``MemorySize``:
        :func:`decode_budget_mb` of ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``.
    lease_s: how long a claim is held, unless renewed by the heartbeat (every third of
        it), before another worker may take over, seconds: how long a crashed worker's
        job waits, and how long a busy duplicate stays away (default 120).
    max_attempts: claims a job may have; the next one ends it ``attempts_exhausted``.
        Keep it below the queue's ``maxReceiveCount`` so the ledger, not the
        dead-letter queue, ends a job that keeps failing (default 4, against 5).
    max_receive_count: the queue's redrive ``maxReceiveCount`` (default 5): a record
        that reaches its last receive but one is handed over to a fresh copy (at most
        :data:`mediajobs.service_layer.delivery.MAX_HANDOVERS` times) before any work, so
        receives lost to other records' crashes or to lost acknowledgements do not
        dead-letter it.
    deadline_margin_s: seconds of invocation time kept to release a claim and report;
        the heartbeat releases the claim when less is left (default 10).
    image_job_s: time an image job is allowed to need; none starts with less than this
        plus the margin left in the invocation (default 20).
    worker_timeout_s: the worker function's timeout, seconds (env ``WORKER_TIMEOUT_SECONDS``,
        the template's ``Timeout``; default 900, Lambda's maximum). A video whose estimated
        time exceeds it less the margin ends ``too_long`` instead of timing out on every try.
    video_speed_factor: seconds of work per second of a 1080p video at 30 fps for every
        rendition and the poster (default 1.0; ``benchmarks/video.py`` measures it); the
        estimate scales it by the frames decoded and encoded and their pixels, plus a cost
        per frame (:func:`mediajobs.domain.video.estimated_seconds`).
    max_video_s: longest accepted video, seconds (default 10,800: 3 h); longer ones end
        ``too_long``.
    split_above_s: a video whose single-invocation estimate exceeds this many seconds of
        work is split into segments encoded by parallel jobs (default 240;
        :mod:`mediajobs.domain.segments`).
    segment_s: the length of source a segment covers, seconds (default 60; 1-86,400).
    video_queue_arn: the video lane, where the job requests of a split video's parts go
        (env ``VIDEO_QUEUE_ARN``; empty: the jobs queue).
    retry_base_s: first backoff after a transient failure, seconds; it doubles per
        receive up to 900 (default 5).
    work_dir: parent of the per-record work folders (``/tmp`` in Lambda).
    collect_grace_s: how long a job nothing references keeps its derivatives before the
        collector deletes them, seconds (default 86,400: a re-upload of the same bytes
        within a day is ready at once, with no render).
    collect_batch_jobs: most candidates one collection run looks at (default 100; the
        schedule runs it again).
    notification_bus_name: the EventBridge bus the dispatcher puts notifications on
        (empty: no EventBridge destination).
    notification_failures_queue_url: the dispatcher's on-failure queue (refusals, and
        records the event source mapping gave up on).
    webhook_url: where the dispatcher POSTs notifications (empty: no webhook destination):
        ``https://`` (``http://`` only to a loopback name), its host no address the rule of
        :mod:`mediajobs.domain.webhook_targets` refuses -- a literal one is refused here,
        a name's addresses at each POST.
    webhook_secret_arn: the Secrets Manager secret holding the webhook's signing secret.
    webhook_timeout_s: one POST's timeout, seconds (default 10).
    webhook_attempts: POSTs of one notification per invocation (default 5; the event
        source mapping retries the record 3 times after that).
    webhook_retry_after_cap_s: the longest ``Retry-After`` honoured, seconds (default 60).
    webhook_allow_networks: networks a webhook may reach although the rule refuses them
        (private, loopback, link-local ...; never a metadata endpoint), comma-separated CIDRs
        (env ``WEBHOOK_ALLOW_NETWORKS``; default empty: none; ``mediajobs serve`` admits
        loopback, ``127.0.0.0/8,::1/128``).
    backfill_queue_arn: the backfill lane, where a backfill's job requests go (env
        ``BACKFILL_QUEUE_ARN``; empty: the jobs queue).
    backfill_rate_per_s: most jobs a backfill enqueues per second (default 10; the lane's
        ``MaximumConcurrency`` bounds how many run at once).
    backfill_segments: parallel scan segments of a new backfill (default 4, at most 64).
    retire_grace_s: how long the derivatives a backfill's switch retired are kept after
        it, seconds (default 604,800: a week, so caches and apps holding old URLs drain).
    active_recipes: the active recipe list as JSON, in ``recipes/active.json``'s shape
        (empty: that file). The local storm's ``--backfill-at`` deploys its new set so.
    reviewer_arns: the IAM principals the status function's ``POST /review`` accepts a
        decision from, comma-separated ARN patterns (``*`` any run of characters; empty:
        nobody, the route answers 403).
    decision_stream_name: the Firehose stream the decision records go to (empty: they are
        logged only).
    multipart_above_bytes: ``POST uploads`` answers a file above this size, bytes, with a
        multipart plan (default 100 MiB; S3 takes a single PUT of up to 5 GiB).
    upload_url_s: how long an upload's presigned URLs are valid, seconds (default 900).
    """

    jobs_table_name: str = "mediajobs-jobs"
    sources_table_name: str = "mediajobs-sources"
    assets_table_name: str = "mediajobs-assets"
    outbox_table_name: str = "mediajobs-outbox"
    jobs_queue_arn: str = ""
    media_bucket: str = ""
    region: str = "us-east-1"
    endpoint_url: str | None = None
    originals_prefix: str = "originals/"
    derivatives_prefix: str = "derivatives/"
    policy_version: str = "1"
    key_algorithm: int = KEY_ALGORITHM_VERSION
    key_secret_arn: str = ""
    key_secret: str = field(default="", repr=False)
    max_pixels: int = 50_000_000
    max_frames: int = 10_000
    max_jpeg_scans: int = 100
    max_input_bytes: int = 200 * MB
    decode_memory_mb: int = 1536
    lease_s: int = 120
    max_attempts: int = 4
    max_receive_count: int = 5
    deadline_margin_s: int = 10
    image_job_s: int = 20
    worker_timeout_s: int = 900
    video_speed_factor: float = 1.0
    max_video_s: int = 10_800
    split_above_s: float = 240.0
    segment_s: float = 60.0
    video_queue_arn: str = ""
    retry_base_s: int = 5
    retry_cap_s: int = 900
    work_dir: str = tempfile.gettempdir()
    collect_grace_s: int = 86_400
    collect_batch_jobs: int = 100
    notification_bus_name: str = ""
    notification_failures_queue_url: str = ""
    webhook_url: str = ""
    webhook_secret_arn: str = ""
    webhook_timeout_s: float = 10.0
    webhook_attempts: int = 5
    webhook_retry_after_cap_s: float = 60.0
    webhook_allow_networks: str = ""
    backfill_queue_arn: str = ""
    backfill_rate_per_s: float = 10.0
    backfill_segments: int = 4
    retire_grace_s: int = 604_800
    reviewer_arns: str = ""
    decision_stream_name: str = ""
    active_recipes: str = ""
    multipart_above_bytes: int = 100 * MB
    upload_url_s: int = 900

    def __post_init__(self) -> None:
        if not self.originals_prefix.endswith("/") or not self.derivatives_prefix.endswith("/"):
            raise ValueError("prefixes must end with '/'")
        if self.derivatives_prefix.startswith(self.originals_prefix):
            raise ValueError("derivatives must not be written under the originals prefix")
        for name in (
            "max_pixels",
            "max_frames",
            "max_jpeg_scans",
            "max_input_bytes",
            "decode_memory_mb",
            "lease_s",
            "max_attempts",
            "max_receive_count",
            "retry_base_s",
            "worker_timeout_s",
            "video_speed_factor",
            "max_video_s",
            "split_above_s",
            "segment_s",
            "collect_batch_jobs",
            "webhook_timeout_s",
            "webhook_attempts",
            "webhook_retry_after_cap_s",
            "backfill_rate_per_s",
            "backfill_segments",
            "multipart_above_bytes",
            "upload_url_s",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number, got {value}")
        if self.multipart_above_bytes > 5 * 2**30:  # S3's largest single PUT (S3 user guide, "Uploading objects")
            raise ValueError(f"multipart_above_bytes must be at most 5 GiB, got {self.multipart_above_bytes}")
        if self.collect_grace_s < 0:
            raise ValueError(f"collect_grace_s must be 0 or more, got {self.collect_grace_s}")
        if self.retire_grace_s < 0:
            raise ValueError(f"retire_grace_s must be 0 or more, got {self.retire_grace_s}")
        if not MIN_SEGMENT_SECONDS <= self.segment_s <= MAX_SEGMENT_SECONDS:
            raise ValueError(
                f"segment_s must be {MIN_SEGMENT_SECONDS:g}-{MAX_SEGMENT_SECONDS:g} seconds, got {self.segment_s}"
            )
        if self.backfill_segments > 64:
            raise ValueError(f"backfill_segments must be at most 64, got {self.backfill_segments}")
        if self.key_algorithm not in KEY_ALGORITHMS:
            raise ValueError(f"KEY_ALGORITHM_VERSION must be one of {sorted(KEY_ALGORITHMS)}, got {self.key_algorithm}")
        if self.key_secret:
            self.keys  # noqa: B018 -- a secret given is checked now, not at the first key
        try:
            networks = self.webhook_networks
        except ValueError as exc:
            raise ValueError(f"webhook_allow_networks: {exc}") from None
        if self.webhook_url:
            checked_webhook_url(self.webhook_url, allowed=networks)  # a literal address refused: ValueError

    @property
    def keys(self) -> KeyScheme:
        """The job keys' :class:`~mediajobs.domain.keys.KeyScheme`.

        Raises
        ------
        ValueError
            Algorithm 2 and no ``key_secret`` (``key_secret_arn`` not read yet: the
            composition root's :func:`mediajobs.bootstrap.with_key_secret` reads it), or one
            under 32 bytes.
        """
        return self.keys_for(self.key_algorithm)

    def keys_for(self, algorithm: int) -> KeyScheme:
        """The scheme of key algorithm ``algorithm`` with this stack's secret: how a job
        recorded under it (:attr:`~mediajobs.domain.jobs.JobSpec.key_algorithm`) derives its
        parts' keys, whatever :attr:`keys` is now.

        Raises
        ------
        ValueError
            As :attr:`keys`, or an unknown algorithm.
        """
        if algorithm == UNKEYED_ALGORITHM:  # the stack's secret exists; algorithm 1 ignores it
            return UNKEYED
        return KeyScheme(algorithm, self.key_secret.encode("utf-8"))

    @property
    def webhook_networks(self) -> tuple[IPNetwork, ...]:
        """:attr:`webhook_allow_networks` parsed (:func:`~mediajobs.domain.webhook_targets.parse_networks`)."""
        return parse_networks(self.webhook_allow_networks)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``environ`` (default ``os.environ``); ``overrides`` win.

        Raises
        ------
        ValueError
            If a numeric variable is not an integer or a value is out of range, a webhook
            URL that is not one (its form, or a literal address no webhook is sent to:
            ``WebhookTargetRefused``, which names it and why), or an allow list that is not
            CIDRs.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(cls)}
        for name, var in _ENV_NAMES.items():
            raw = env.get(var)
            if raw is None or raw == "":
                continue
            if types[name] in ("int", "float"):
                kind = int if types[name] == "int" else float
                try:
                    values[name] = kind(raw)
                except ValueError:
                    raise ValueError(f"{var} must be a number ({types[name]}), got {raw!r}") from None
            else:
                values[name] = raw
        if "region" not in values and env.get("AWS_DEFAULT_REGION"):
            values["region"] = env["AWS_DEFAULT_REGION"]
        if "decode_memory_mb" not in values and env.get(LAMBDA_MEMORY_ENV, "").isdigit():
            values["decode_memory_mb"] = decode_budget_mb(int(env[LAMBDA_MEMORY_ENV]))
        values.update(overrides)
        return cls(**values)
