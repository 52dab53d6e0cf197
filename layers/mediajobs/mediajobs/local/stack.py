"""What a local stack is made of, as data: the names the embedded AWS gives its resources
(:func:`resource_names`), and what a worker needs to reach them (:class:`LocalStack`).

Nothing is written into ``os.environ``: what a worker needs (endpoint, credentials,
region, the function's environment from the template) is data on :class:`LocalStack`
(:attr:`LocalStack.worker_env`, :meth:`LocalStack.settings`, :meth:`LocalStack.boto_session`),
and every client is built with the endpoint and credentials explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import boto3
from pynamodb.models import Model

from mediajobs.adapters.assets import AssetModels, DynamoAssets
from mediajobs.adapters.backfills import DynamoBackfills
from mediajobs.adapters.clients import ClientFactory, with_s3_signing
from mediajobs.adapters.ledger import DynamoLedger, JobModel
from mediajobs.adapters.outbox import OutboxModel
from mediajobs.adapters.sessions import SESSIONS
from mediajobs.adapters.sources import SourceIndex, SourceModel
from mediajobs.local.events import REGION
from mediajobs.settings import _ENV_NAMES, Settings

M = TypeVar("M", bound=Model)

#: The name of a stack made without one (``mediajobs serve``'s, ``mediajobs demo``'s): the
#: prefix of its resources' names (:func:`resource_names`).
DEFAULT_NAME: Final = "mediajobs-local"

#: Settings a local run takes from the user's environment when set there (their
#: environment names are the settings': :data:`mediajobs.settings._ENV_NAMES`).
USER_TUNABLE: Final = frozenset(
    _ENV_NAMES[name]
    for name in (
        "max_pixels",
        "max_input_bytes",
        "lease_s",
        "policy_version",
        "key_algorithm",
        "max_attempts",
        "deadline_margin_s",
        "image_job_s",
        "retry_base_s",
        "worker_timeout_s",
        "video_speed_factor",
        "max_video_s",
        "split_above_s",
        "segment_s",
    )
)

#: Local differences from the deployed function: a transient failure comes back after
#: about 1, 2, 4, 8 s instead of 5, 10, 20, 40 s, so a local run with a failing input ends soon;
#: and a split video's parts go to the jobs queue, which a local worker polls alone (deployed,
#: the video lane has a function of its own).
LOCAL_DEFAULTS: Final[dict[str, str]] = {_ENV_NAMES["retry_base_s"]: "1", _ENV_NAMES["video_queue_arn"]: ""}

#: Prefix of the work folder an embedded AWS gives its process's workers (under the system's
#: temporary folder). Not ``mediajobs-*``: a worker whose ``WORK_DIR`` is that temporary
#: folder itself must not take it for a dead worker's.
LOCAL_WORK_DIR_PREFIX = "mediajobs.local-"


@dataclass(frozen=True)
class ResourceNames:
    """The names of a local stack's resources (:func:`resource_names`)."""

    bucket: str
    table: str
    sources_table: str
    assets_table: str
    outbox_table: str
    rule: str
    queue: str
    dlq: str
    events_dlq: str
    backfill_queue: str
    backfill_dlq: str
    bus: str
    failures_queue: str
    seen_queue: str
    seen_rule: str
    decisions_bucket: str
    decision_stream: str
    key_secret: str


#: Each resource's name after the stack's (``<name>-<suffix>``), by :class:`ResourceNames` field.
_NAME_SUFFIXES: Final = {
    "bucket": "media",
    "table": "jobs",
    "sources_table": "sources",
    "assets_table": "assets",
    "outbox_table": "outbox",
    "rule": "object-created",
    "queue": "jobs",
    "dlq": "dlq",
    "events_dlq": "events-dlq",
    "backfill_queue": "backfill",
    "backfill_dlq": "backfill-dlq",
    "bus": "notifications",
    "failures_queue": "notification-failures",
    "seen_queue": "notifications-seen",
    "seen_rule": "seen",
    "decisions_bucket": "decisions",
    "decision_stream": "decisions",
    "key_secret": "job-keys",
}


def resource_names(name: str = DEFAULT_NAME) -> ResourceNames:
    """The names :class:`~mediajobs.local.embedded.EmbeddedAws` gives the resources of the
    stack ``name`` (``<name>-media``, ``<name>-jobs``, ...): what finds a served stack's."""
    return ResourceNames(**{resource: f"{name}-{suffix}" for resource, suffix in _NAME_SUFFIXES.items()})


def shared_session(region: str, credentials: Mapping[str, str]) -> boto3.session.Session:
    """A new boto3 session for ``region`` and ``credentials`` on the process's shared
    loader (:data:`mediajobs.adapters.sessions.SESSIONS`)."""
    return SESSIONS.boto3_session(region, credentials)


@dataclass(frozen=True)
class LocalStack:
    """Names and settings of the resources created locally, and what a worker needs to
    reach them: plain data, so a storm passes it to its worker processes as an argument.

    Attributes
    ----------
    endpoint_url: the moto server (``http://127.0.0.1:<port>``).
    bucket: bucket name; rule_name: EventBridge rule.
    queue_url, queue_arn, dlq_url, dlq_arn: the jobs queue and its dead-letter queue.
    events_dlq_url, events_dlq_arn: the rule's dead-letter queue (events it could not deliver).
    backfill_queue_url, backfill_queue_arn, backfill_dlq_url: the backfill lane and its
        dead-letter queue (empty when the template declares none).
    table_name: jobs table; sources_table_name: the source index; assets_table_name:
        the assets, references and collection candidates; outbox_table_name: the
        notifications owed (its stream feeds the dispatcher).
    notification_bus_name: the notification bus; notification_failures_queue_url: the
        dispatcher's on-failure queue; notifications_seen_queue_url: a local queue a rule
        on the bus copies every event to (to see what EventBridge was given).
    decisions_bucket, decision_stream_name: the decision log's bucket and the Firehose
        stream that writes it (empty when the template declares none).
    function_env: the worker's environment, resolved from the template.
    function_envs: every function's environment, resolved from the template, by logical id
        (``WorkerFunction``, ``StatusFunction``, ``DispatcherFunction``): what ``mediajobs
        serve --env-vars`` writes for ``sam local invoke``.
    batch_size: the SQS event source's BatchSize.
    timeout_s: the worker's Timeout, seconds.
    worker_env: the environment a local worker runs with, by the settings' names
        (:data:`mediajobs.settings._ENV_NAMES`): the settings the user set, overridden by
        ``function_env`` and :data:`LOCAL_DEFAULTS` (but for the :data:`USER_TUNABLE`
        limits the user set), then by the endpoint, region and ``WORK_DIR`` of this
        embedded AWS. Read by :meth:`settings`; never written into ``os.environ``.
    credentials: what its clients sign with (``aws_access_key_id``,
        ``aws_secret_access_key``): the embedded AWS's, new each time one starts
        (:func:`~mediajobs.local.credentials.new_credentials`); it refuses any other
        (:mod:`mediajobs.local.authentication`). Explicit, so a local run never reaches
        for the user's own.
    region: the stack's region.
    """

    endpoint_url: str
    bucket: str
    rule_name: str
    queue_url: str
    queue_arn: str
    dlq_url: str
    dlq_arn: str
    events_dlq_url: str
    events_dlq_arn: str
    table_name: str
    sources_table_name: str
    assets_table_name: str
    function_env: dict[str, str]
    batch_size: int
    timeout_s: int
    credentials: dict[str, str]
    outbox_table_name: str = "mediajobs-outbox"
    notification_bus_name: str = ""
    notification_failures_queue_url: str = ""
    notifications_seen_queue_url: str = ""
    backfill_queue_url: str = ""
    backfill_queue_arn: str = ""
    backfill_dlq_url: str = ""
    decisions_bucket: str = ""
    decision_stream_name: str = ""
    worker_env: dict[str, str] = field(default_factory=dict)
    function_envs: dict[str, dict[str, str]] = field(default_factory=dict)
    region: str = REGION

    def settings(self, **overrides: Any) -> Settings:
        """The worker's :class:`~mediajobs.settings.Settings`: :attr:`worker_env` read by
        :meth:`Settings.from_env`, ``overrides`` (field names) winning.

        Raises
        ------
        ValueError
            If a value (one the user set, say ``MAX_PIXELS=many``) is not valid.
        """
        return Settings.from_env(self.worker_env, **overrides)

    def boto_session(self) -> boto3.session.Session:
        """A new boto3 session with the stack's credentials and region (no profile, no
        environment credentials); build clients with ``endpoint_url=self.endpoint_url``.
        Its service models come from a loader the process's local sessions share
        (:mod:`mediajobs.adapters.sessions`), so its first client costs what a later one does."""
        return shared_session(self.region, self.credentials)

    def client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client of ``service`` for the embedded server (``kwargs``: e.g. ``config``;
        an S3 client presigns with SigV4, as the deployed functions' do:
        :data:`mediajobs.adapters.clients.S3_SIGNING`)."""
        config = with_s3_signing(service, kwargs.pop("config", None))
        return self.boto_session().client(service, endpoint_url=self.endpoint_url, config=config, **kwargs)

    def clients(self) -> ClientFactory:
        """The client factory of this stack: its endpoint, region and credentials, the one
        retry configuration, and a session of the shared loader (:meth:`boto_session`):
        every client and model of a local worker comes from it."""
        return ClientFactory(self.region, self.endpoint_url, self.credentials, session=self.boto_session())

    def model(self, model: type[M], table_name: str) -> type[M]:
        """PynamoDB ``model`` bound to ``table_name`` on the embedded server (:meth:`clients`)."""
        return self.clients().model(model, table_name)

    def job_model(self) -> type[JobModel]:
        """The jobs table's model (:meth:`model`)."""
        return self.model(JobModel, self.table_name)

    def source_model(self) -> type[SourceModel]:
        """The source index's model (:meth:`model`)."""
        return self.model(SourceModel, self.sources_table_name)

    def asset_models(self) -> AssetModels:
        """The assets table's three models (:meth:`model` each)."""
        return self.clients().asset_models(self.assets_table_name)

    def assets(self, *, writer: bool = False, sleep: Callable[[float], None] = time.sleep) -> DynamoAssets:
        """The asset records of this stack: to read (a unit of work without the outbox), or
        with ``writer`` to write too (its changes' notifications put in the stack's outbox);
        ``sleep``: how lost rounds wait (tests pass a no-op)."""
        clients = self.clients()
        uow = clients.unit_of_work(self.outbox_table_name if writer else None, sleep=sleep)
        return DynamoAssets(uow, clients.asset_models(self.assets_table_name))

    def backfills(self) -> DynamoBackfills:
        """The backfills of this stack (in its assets table)."""
        clients = self.clients()
        return DynamoBackfills(clients.unit_of_work(), clients.backfill_models(self.assets_table_name))

    def ledger(self, *, max_attempts: int = 4) -> DynamoLedger:
        """The job ledger of this stack."""
        return DynamoLedger(self.clients().unit_of_work(), self.job_model(), max_attempts=max_attempts)

    def sources(self) -> SourceIndex:
        """The source index of this stack."""
        return SourceIndex(self.clients().unit_of_work(), self.source_model())

    def outbox_model(self) -> type[OutboxModel]:
        """The outbox table's model (:meth:`model`)."""
        return self.model(OutboxModel, self.outbox_table_name)

    def outbox_stream_arn(self) -> str:
        """The outbox table's stream (``LatestStreamArn``)."""
        table = self.client("dynamodb").describe_table(TableName=self.outbox_table_name)["Table"]
        return str(table["LatestStreamArn"])

    def dispatcher_settings(self, **overrides: Any) -> Settings:
        """The dispatcher's settings on this stack: the outbox, the bus, the failures
        queue (``webhook_url`` and ``webhook_secret_arn`` among ``overrides``)."""
        return self.settings(
            notification_bus_name=self.notification_bus_name,
            notification_failures_queue_url=self.notification_failures_queue_url,
            **overrides,
        )
