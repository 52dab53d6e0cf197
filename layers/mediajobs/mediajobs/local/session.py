"""A local session: the embedded AWS, the real handler behind an emulated event source
mapping, and helpers to upload originals and fetch their derivatives."""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from mediajobs.bootstrap import build_pipeline
from mediajobs.domain.jobs import Claim, JobResult, ObjectRef, SourceResult
from mediajobs.local.embedded import REGION, EmbeddedAws, LocalStack
from mediajobs.local.progress import ProgressBars
from mediajobs.local.runner import DeliveryStats, EventSourceMapping
from mediajobs.service_layer.pipeline import PipelineObserver
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
        if self.bars is not None:
            self.bars.update(job_key, names, done_s, total_s)

    def claimed(self, claim: Claim, source: ObjectRef) -> None:
        self.claims.append(claim)

    def render_started(self, job_key: str, source: ObjectRef) -> None:
        self.renders.append(job_key)

    def source_finished(self, result: SourceResult) -> None:
        self.results.setdefault(result.source.key, []).append(result)


def local_handler(worker: Any, handler: Any = None) -> Any:
    """The worker's handler (``handler``, else ``worker.lambda_handler``), for local runs
    with metrics disabled.

    Powertools (3.x) neither prints nor clears metrics when ``POWERTOOLS_METRICS_DISABLED``
    is set, so they pile up across invocations, and at 100 values ``add_metric`` prints
    them anyway -- EMF documents on stdout in the middle of ``process --json``. Clearing
    them after each invocation keeps local runs quiet.
    """

    def quiet(event: dict[str, Any], context: Any) -> Any:
        try:
            return (handler or worker.lambda_handler)(event, context)
        finally:
            worker.metrics.clear_metrics()

    return quiet


class LocalSession:
    """Context manager around :class:`EmbeddedAws` that installs the real worker handler.

    Parameters
    ----------
    log_level: level of the worker's logs (written to stderr so stdout stays clean).
    template_path: the SAM template the embedded stack is built from.
    bars: progress bars for video renditions (``None``: none drawn).
    """

    def __init__(
        self, log_level: str = "WARNING", template_path: Path | None = None, bars: ProgressBars | None = None
    ) -> None:
        self._aws = EmbeddedAws(template_path)
        self._log_level = log_level
        self.collector = Collector(bars)
        self.stack: LocalStack
        self.esm: EventSourceMapping

    def __enter__(self) -> LocalSession:
        # Local runs flush metrics with none to publish on purpose; Pillow's notes on damaged
        # EXIF are not the user's concern (the EXIF is dropped). Keep stderr for what matters.
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        warnings.filterwarnings("ignore", message="Corrupt EXIF data")
        self.stack = self._aws.__enter__()
        os.environ["POWERTOOLS_LOG_LEVEL"] = self._log_level
        os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
        from mediajobs.entrypoints import worker  # the real handler, imported with the local environment

        self._worker = worker
        worker.logger.setLevel(self._log_level)
        for handler in logging.getLogger(worker.logger.name).handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(sys.stderr)
        self.s3 = self._aws.client("s3")
        self.sqs = self._aws.client("sqs")
        self.service = build_pipeline(Settings.from_env(), observer=self.collector, s3=self.s3)
        self.handler = worker.make_handler(self.service)
        self.esm = EventSourceMapping(
            self.sqs,
            self.stack.queue_url,
            self.stack.queue_arn,
            local_handler(worker, self.handler),
            batch_size=self.stack.batch_size,
            timeout_s=self.stack.timeout_s,
            region=REGION,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.collector.bars is not None:
            self.collector.bars.close()
        self._aws.__exit__(*exc)

    def upload(self, path: Path, key: str) -> str:
        """Put a local file under ``key`` (the bucket's EventBridge notification fires)."""
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
