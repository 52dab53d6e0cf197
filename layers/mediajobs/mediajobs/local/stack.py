"""What a local stack is made of, as data: the names the embedded AWS gives its resources
(:func:`resource_names`), and what a worker needs to reach them (:class:`LocalStack`).

Nothing is written into ``os.environ``: what a worker needs (endpoint, credentials,
region, the function's environment from the template) is data on :class:`LocalStack`
(:attr:`LocalStack.worker_env`, :meth:`LocalStack.settings`, :meth:`LocalStack.boto_session`),
and every client is built with the endpoint and credentials explicitly.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import boto3
import botocore.session
from pynamodb.models import Model

from mediajobs.adapters.assets import AssetModel, AssetModels, CandidateModel, ReferenceModel
from mediajobs.adapters.ledger import JobModel, bind_model
from mediajobs.adapters.outbox import OutboxModel
from mediajobs.adapters.sources import SourceModel
from mediajobs.local.events import REGION
from mediajobs.settings import _ENV_NAMES, Settings

M = TypeVar("M", bound=Model)

#: The name of a stack made without one (``mediajobs serve``'s, ``mediajobs demo``'s): the
#: prefix of its resources' names (:func:`resource_names`).
DEFAULT_NAME: Final = "mediajobs-local"

#: What the embedded AWS's clients sign with: moto accepts any credentials, and explicit
#: ones keep a local run from reaching for the user's own (or failing without any).
CREDENTIALS: Final = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "aws_session_token": "testing",
}

#: Settings a local run takes from the user's environment when set there (their
#: environment names are the settings': :data:`mediajobs.settings._ENV_NAMES`).
USER_TUNABLE: Final = frozenset(
    _ENV_NAMES[name]
    for name in (
        "max_pixels",
        "max_input_bytes",
        "lease_s",
        "policy_version",
        "max_attempts",
        "deadline_margin_s",
        "image_job_s",
        "retry_base_s",
        "worker_timeout_s",
        "video_speed_factor",
        "max_video_s",
    )
)

#: Local differences from the deployed function: a transient failure comes back after
#: about 1, 2, 4, 8 s instead of 5, 10, 20, 40 s, so a local run with a failing input ends soon.
LOCAL_DEFAULTS: Final[dict[str, str]] = {_ENV_NAMES["retry_base_s"]: "1"}

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
    bus: str
    failures_queue: str
    seen_queue: str
    seen_rule: str


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
    "bus": "notifications",
    "failures_queue": "notification-failures",
    "seen_queue": "notifications-seen",
    "seen_rule": "seen",
}


def resource_names(name: str = DEFAULT_NAME) -> ResourceNames:
    """The names :class:`~mediajobs.local.embedded.EmbeddedAws` gives the resources of the
    stack ``name`` (``<name>-media``, ``<name>-jobs``, ...): what finds a served stack's."""
    return ResourceNames(**{resource: f"{name}-{suffix}" for resource, suffix in _NAME_SUFFIXES.items()})


def credentialed(model: type[M], credentials: Mapping[str, str]) -> type[M]:
    """A subclass of a bound PynamoDB ``model`` (:func:`mediajobs.adapters.ledger.bind_model`)
    that signs with ``credentials`` (PynamoDB's ``Meta.aws_access_key_id``,
    ``aws_secret_access_key``, ``aws_session_token``) instead of the default chain's."""
    parent_meta: type = model.Meta  # type: ignore[assignment]  # the bound model's Meta is a class
    meta = type("Meta", (parent_meta,), dict(credentials))
    return type(model.__name__, (model,), {"Meta": meta})


class _SharedLoader:
    """One botocore data loader for every session :meth:`LocalStack.boto_session` makes.

    A fresh boto3 session loads and parses a service's JSON model and ``endpoints.json``
    again for its first client: 0.7 to 1 s a client on this project's 2-core machine,
    against 40 to 120 ms with the loader (and its cache) shared; the storm's notification
    thread made an SQS client every 2 s, 14 % of its server process's samples. botocore
    shares one loader among all the clients of a session already; here the sessions
    share it too. boto3 adds its own data folder to a session's loader for each session:
    kept once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loader: Any = None

    def session(self, region: str, credentials: Mapping[str, str]) -> boto3.session.Session:
        """A new boto3 session with ``region`` and ``credentials``, on the shared loader."""
        with self._lock:
            core = botocore.session.Session()
            if self._loader is None:
                self._loader = core.get_component("data_loader")
            else:
                core.register_component("data_loader", self._loader)
            session = boto3.session.Session(region_name=region, botocore_session=core, **credentials)
            paths = self._loader.search_paths
            paths[:] = list(dict.fromkeys(paths))
            return session


_SESSIONS: Final = _SharedLoader()


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
    table_name: jobs table; sources_table_name: the source index; assets_table_name:
        the assets, references and collection candidates; outbox_table_name: the
        notifications owed (its stream feeds the dispatcher).
    notification_bus_name: the notification bus; notification_failures_queue_url: the
        dispatcher's on-failure queue; notifications_seen_queue_url: a local queue a rule
        on the bus copies every event to (to see what EventBridge was given).
    function_env: the worker's environment, resolved from the template.
    batch_size: the SQS event source's BatchSize.
    timeout_s: the worker's Timeout, seconds.
    worker_env: the environment a local worker runs with, by the settings' names
        (:data:`mediajobs.settings._ENV_NAMES`): the settings the user set, overridden by
        ``function_env`` and :data:`LOCAL_DEFAULTS` (but for the :data:`USER_TUNABLE`
        limits the user set), then by the endpoint, region and ``WORK_DIR`` of this
        embedded AWS. Read by :meth:`settings`; never written into ``os.environ``.
    region: the stack's region; credentials: what its clients sign with
        (``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``).
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
    outbox_table_name: str = "mediajobs-outbox"
    notification_bus_name: str = ""
    notification_failures_queue_url: str = ""
    notifications_seen_queue_url: str = ""
    worker_env: dict[str, str] = field(default_factory=dict)
    region: str = REGION
    credentials: dict[str, str] = field(default_factory=lambda: dict(CREDENTIALS))

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
        (:class:`_SharedLoader`), so its first client costs what a later one does."""
        return _SESSIONS.session(self.region, self.credentials)

    def client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client of ``service`` for the embedded server (``kwargs``: e.g. ``config``)."""
        return self.boto_session().client(service, endpoint_url=self.endpoint_url, **kwargs)

    def model(self, model: type[M], table_name: str) -> type[M]:
        """PynamoDB ``model`` bound to ``table_name`` on the embedded server, signing with
        the stack's credentials."""
        return credentialed(bind_model(model, table_name, self.region, self.endpoint_url), self.credentials)

    def job_model(self) -> type[JobModel]:
        """The jobs table's model (:meth:`model`)."""
        return self.model(JobModel, self.table_name)

    def source_model(self) -> type[SourceModel]:
        """The source index's model (:meth:`model`)."""
        return self.model(SourceModel, self.sources_table_name)

    def asset_models(self) -> AssetModels:
        """The assets table's three models and the outbox's (:meth:`model` each)."""
        return AssetModels(
            self.model(AssetModel, self.assets_table_name),
            self.model(ReferenceModel, self.assets_table_name),
            self.model(CandidateModel, self.assets_table_name),
            self.outbox_model(),
        )

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
