"""A local session: the embedded AWS, the real handler behind an emulated event source
mapping, and helpers to upload originals and fetch their derivatives."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from mediajobs.bootstrap import Adapters, build_service, default_adapters, powertools_logger
from mediajobs.domain.errors import TOO_LARGE
from mediajobs.domain.jobs import Claim, JobResult, ObjectRef, SourceResult, refused, size_refusal
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from mediajobs.local.progress import ProgressBars
from mediajobs.local.runner import DeliveryStats, EventSourceMapping
from mediajobs.service_layer.observer import PipelineObserver
from mediajobs.service_layer.pipeline import Pipeline
from mediajobs.settings import Settings


class Collector(PipelineObserver):
    """Counts claims and renders, keeps every result by source key in delivery order, and
    passes video progress to ``bars`` (when given)."""

    def __init__(self, bars: ProgressBars | None = None) -> None:
        self.claims: list[Claim] = []
        self.renders: list[str] = []
        self.results: dict[str, list[SourceResult]] = {}
        self.bars = bars

    def progress(self, job_key: str, names: tuple[str, ...], done_s: float, total_s: float) -> None:
        """Pass a video job's progress (seconds of media done of ``total_s``) to the bars."""
        if self.bars is not None:
            self.bars.update(job_key, names, done_s, total_s)

    def claimed(self, claim: Claim, source: ObjectRef) -> None:
        """Keep the claim."""
        self.claims.append(claim)

    def render_started(self, job_key: str, source: ObjectRef) -> None:
        """Count the render (its job key)."""
        self.renders.append(job_key)

    def source_finished(self, result: SourceResult) -> None:
        """Keep the result under its source's key."""
        self.results.setdefault(result.source.key, []).append(result)


class _Discard(io.TextIOBase):
    """A text sink that keeps nothing."""

    def write(self, text: str) -> int:
        return len(text)


def local_handler(handler: Any) -> Any:
    """``handler`` (a Lambda handler) for local runs: what it prints to stdout is dropped.

    On Lambda, Powertools publishes metrics by printing EMF documents to stdout; locally
    stdout is the CLI's (``process --json``, ``simulate --json``), so whatever a handler
    prints is discarded (stdout is redirected while it runs). Local handlers are built
    without metrics (``make_handler(..., metrics=None)``); a handler built with them holds
    none after an invocation (:meth:`~mediajobs.adapters.metrics.FunctionMetrics.around`).
    """

    def run(event: dict[str, Any], context: Any) -> Any:
        with contextlib.redirect_stdout(_Discard()):
            return handler(event, context)

    return run


class _CurrentStderr:
    """``sys.stderr`` as it is when written to: a caller that replaces it for a while (a
    test's capture, later closed) leaves no handler holding a closed stream."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDERR: Final = _CurrentStderr()


def configure_worker_logs(level: str, stream: IO[str] | None = None) -> Logger:
    """The functions' Powertools logger (:func:`mediajobs.bootstrap.powertools_logger`: the
    one the handlers log with), its level and that of the package's loggers it configures set
    on the loggers (not through ``POWERTOOLS_LOG_LEVEL``), its records sent to ``stream``
    (default stderr, so stdout stays the CLI's).

    Parameters
    ----------
    level: a logging level name (``"WARNING"``).
    """
    logger = powertools_logger()
    logger.setLevel(level)
    for handler in logging.getLogger(logger.name).handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(stream or _STDERR)  # type: ignore[arg-type]  # a text stream's write and flush
    copy_config_to_registered_loggers(source_logger=logger, include={"mediajobs"}, log_level=level)
    return logger


#: Wraps the real adapters before the service is built (see :class:`LocalSession`).
AdapterWrapper = Callable[[Adapters], Adapters]


def local_adapters(stack: LocalStack, settings: Settings) -> Adapters:
    """The real adapters (:func:`~mediajobs.bootstrap.default_adapters`) from the stack's
    client factory (:meth:`LocalStack.clients`): every client and model signs with the
    stack's credentials and reaches its endpoint, so nothing reads the process environment."""
    return default_adapters(settings, clients=stack.clients())


class LocalSession:
    """Context manager around :class:`EmbeddedAws` that runs the real worker handler,
    built from the stack's settings and adapters, behind an emulated event source mapping.

    Parameters
    ----------
    log_level: level of the worker's logs (written to stderr so stdout stays clean).
    template_path: the SAM template the embedded stack is built from.
    bars: progress bars for video renditions (``None``: none drawn).
    wrap_adapters: the test hook: given the real adapters, returns those the service is
        built with, e.g. ``lambda a: dataclasses.replace(a, store=Flaky(a.store))`` to
        inject a fault by wrapping an adapter (never by replacing a class's method).
    environ: the user's environment, read for the limits a local run takes from it
        (default ``os.environ``; :class:`EmbeddedAws`).
    name: the stack's name, the prefix of its resources' names (:class:`EmbeddedAws`):
        sessions of one process share moto's state, so one that must see only its own
        items takes a name of its own.

    Attributes (while open)
    -----------------------
    stack: the :class:`LocalStack`; settings: the worker's settings; service: the
    pipeline; handler: the local Lambda handler; esm: the event source mapping.
    """

    def __init__(
        self,
        log_level: str = "WARNING",
        template_path: Path | None = None,
        bars: ProgressBars | None = None,
        *,
        wrap_adapters: AdapterWrapper | None = None,
        environ: Mapping[str, str] | None = None,
        name: str = "mediajobs-local",
    ) -> None:
        self._aws = EmbeddedAws(template_path, name=name, environ=environ)
        self._log_level = log_level
        self._wrap_adapters = wrap_adapters
        self.collector = Collector(bars)
        self.stack: LocalStack
        self.settings: Settings
        self.service: Pipeline
        self.handler: Any
        self.esm: EventSourceMapping

    def __enter__(self) -> LocalSession:
        # Local runs flush metrics with none to publish on purpose; Pillow's notes on damaged
        # EXIF are not the user's concern (the EXIF is dropped). Keep stderr for what matters.
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        warnings.filterwarnings("ignore", message="Corrupt EXIF data")
        self.stack = self._aws.__enter__()
        try:
            self.settings = self.stack.settings()
            from mediajobs.entrypoints import worker

            self._worker = worker
            logger = configure_worker_logs(self._log_level)
            self.s3 = self.stack.client("s3")
            self.sqs = self.stack.client("sqs")
            adapters = local_adapters(self.stack, self.settings)
            if self._wrap_adapters is not None:
                adapters = self._wrap_adapters(adapters)
            self.service = build_service(self.settings, adapters=adapters, observer=self.collector)
            self.handler = local_handler(worker.make_handler(self.service, logger=logger))
        except BaseException:
            self._aws.__exit__(None, None, None)
            raise
        self.esm = EventSourceMapping(
            self.sqs,
            self.stack.queue_url,
            self.stack.queue_arn,
            self.handler,
            batch_size=self.stack.batch_size,
            timeout_s=self.stack.timeout_s,
            region=self.stack.region,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.collector.bars is not None:
            self.collector.bars.close()
        self._aws.__exit__(*exc)

    def upload(self, path: Path, key: str) -> str:
        """Put a local file under ``key`` (the bucket's EventBridge notification fires).

        A file its size already rules out (over ``MAX_INPUT_BYTES``:
        :func:`~mediajobs.domain.jobs.size_refusal`) is neither read nor put: its refusal,
        ``too_large`` as the worker would answer it, is recorded as the key's result."""
        size = path.stat().st_size
        refusal = size_refusal(size, self.settings.max_input_bytes)
        if refusal is not None and refusal[0] == TOO_LARGE:
            ref = ObjectRef(self.stack.bucket, key, None, size)
            self.collector.results.setdefault(key, []).append(refused(ref, *refusal, size_bytes=size))
            return key
        with open(path, "rb") as body:
            self.s3.put_object(Bucket=self.stack.bucket, Key=key, Body=body)
        return key

    def run(self) -> DeliveryStats:
        """Deliver everything queued to the handler until the queue is empty."""
        return self.esm.drain()

    def redeliver(self, bodies: list[str]) -> None:
        """Send message bodies again, as a duplicated event or a redelivery would."""
        for body in bodies:
            self.sqs.send_message(QueueUrl=self.stack.queue_url, MessageBody=body)

    def dead_letters(self) -> int:
        """Messages in the dead-letter queue."""
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.stack.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"])

    def fetch(self, job: JobResult, dest: Path) -> dict[str, Any]:
        """Download a job's derivatives and manifest into ``dest``.

        Returns
        -------
        dict
            ``{"manifest": Path, "outputs": {name: Path}}``.
        """
        dest.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        for output in job.outputs:
            target = dest / output.key.rsplit("/", 1)[-1]
            self.s3.download_file(self.stack.bucket, output.key, str(target))
            paths[output.name] = target
        manifest_path = dest / "manifest.json"
        if job.manifest_key:
            body = self.s3.get_object(Bucket=self.stack.bucket, Key=job.manifest_key)["Body"].read()
            manifest_path.write_bytes(body)
            json.loads(body)  # a manifest that is not JSON is an internal error
        return {"manifest": manifest_path, "outputs": paths}
