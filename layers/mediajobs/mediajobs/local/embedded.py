"""The embedded AWS: a moto server in this process, with the resources of ``template.yaml``.

Resources are created as the template declares them (bucket with EventBridge
notifications, the rule with the template's own event pattern targeting the queue with
its retry policy and dead-letter queue, the queue with the template's redrive policy and
visibility timeout, both dead-letter queues, the tables with the PynamoDB models' key
schemas), under local names.

Where moto's events are not AWS's in a way the worker depends on, the embedded AWS makes
them so (:func:`send_s3_events_as_aws`): the object key URL-encoded, sequencers that
order the events of a key, and deletes as S3 sends them; lifecycle expirations of
noncurrent versions happen on demand (:meth:`EmbeddedAws.expire_noncurrent`). Each
embedded AWS gives the workers of its process a work folder of their own (``WORK_DIR``),
since a worker empties its work folder when it starts.

Nothing is written into ``os.environ``: what a worker needs (endpoint, credentials,
region, the function's environment from the template) is data on :class:`LocalStack`
(:attr:`LocalStack.worker_env`, :meth:`LocalStack.settings`, :meth:`LocalStack.boto_session`),
and every client is built with the endpoint and credentials explicitly.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar

import boto3
from moto import backends as moto_backends
from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from pynamodb.models import Model
from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wsgi import get_input_stream

from mediajobs.adapters.assets import AssetModels, DynamoAssets
from mediajobs.adapters.clients import ClientFactory
from mediajobs.adapters.ledger import DynamoLedger, JobModel
from mediajobs.adapters.outbox import OutboxModel
from mediajobs.adapters.sources import SourceIndex, SourceModel
from mediajobs.domain.keys import encode_event_key
from mediajobs.local.conflicts import TransactionConflicts
from mediajobs.local.events import (
    ACCOUNT_ID,
    DELETE_MARKER_CREATED,
    DELETE_MARKER_ETAG,
    DELETE_OBJECT,
    LIFECYCLE_EXPIRATION,
    PERMANENTLY_DELETED,
    REGION,
    Sequencers,
    object_created_event,
    object_deleted_event,
)
from mediajobs.local.template import (
    ASSETS_TABLE_ID,
    BUCKET_ID,
    BUS_ID,
    DLQ_ID,
    EVENTS_DLQ_ID,
    FAILURES_QUEUE_ID,
    FUNCTION_ID,
    OUTBOX_TABLE_ID,
    QUEUE_ID,
    RULE_ID,
    SOURCES_TABLE_ID,
    TABLE_ID,
    find_template,
    load_template,
    parameter_defaults,
    resolve,
)
from mediajobs.settings import _ENV_NAMES, LAMBDA_MEMORY_ENV, Settings

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Model)

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


#: Every S3 event this process's moto sends gets its sequencer here (process-wide, like
#: moto's backends): the events of one key get increasing sequencers, of varying lengths.
SEQUENCERS: Final = Sequencers()

#: S3's ``reason`` of an "Object Created" event, by moto's notification event name.
_CREATED_REASONS: Final = {
    "s3:ObjectCreated:Put": "PutObject",
    "s3:ObjectCreated:Post": "POST Object",
    "s3:ObjectCreated:Copy": "CopyObject",
    "s3:ObjectCreated:CompleteMultipartUpload": "CompleteMultipartUpload",
}


class _KeyAsS3Sends:
    """moto's object (``FakeKey``) with ``name`` URL-encoded, as S3 spells it in events."""

    def __init__(self, key: Any) -> None:
        self._key = key
        self.name = encode_event_key(key.name)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._key, attribute)


#: Called with every "Object Created" and "Object Deleted" event the embedded S3 sends
#: (:func:`listen_to_s3_events`): a storm keeps the real bodies to deliver them again.
_LISTENERS: list[Callable[[dict[str, Any]], None]] = []


def listen_to_s3_events(listener: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    """Call ``listener`` with each "Object Created" and "Object Deleted" event this
    process's embedded S3 sends (the EventBridge event, as put on the rules), before it is
    delivered; returns the function that stops it. ``mediajobs simulate`` keeps the real
    events so that a duplicate it sends is the same event (same sequencer), and a late one
    is the real older event."""
    _LISTENERS.append(listener)
    return lambda: _LISTENERS.remove(listener)


def _publish(account_id: str, bucket: Any, event: dict[str, Any]) -> None:
    """Put an S3 ``event`` on every rule of moto's EventBridge in the bucket's region, as
    moto's own S3 does (the rules match their patterns), when the bucket sends its events
    to EventBridge. moto's rules take the ``time`` as Unix seconds (and write it ISO 8601
    into an SQS target's message), so the event's ISO time goes in as such."""
    from moto.events.models import events_backends

    config = bucket.notification_configuration
    if config is None or config.event_bridge is None:
        return
    for listener in list(_LISTENERS):
        listener(event)
    as_moto_takes = {
        **event,
        "time": datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp(),
    }
    backend = events_backends[account_id][bucket.region_name]
    for event_bus in list(backend.event_buses.values()):
        for rule in list(event_bus.rules.values()):
            rule.send_to_targets(as_moto_takes, transform_input=False)  # type: ignore[arg-type]  # moto's TypedDict


def _version_of(key: Any, bucket: Any) -> str | None:
    """The ``version-id`` an event names for moto's object ``key``: none on an unversioned
    bucket (moto says ``"null"``)."""
    version = getattr(key, "version_id", None)
    return None if not bucket.is_versioned or version in (None, "null") else str(version)


def _object_created(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
    """Send the "Object Created" event S3 sends for moto's new object ``key``."""
    event = object_created_event(
        bucket.name,
        key.name,
        size=int(key.size),
        etag=key.etag,
        version_id=_version_of(key, bucket),
        region=bucket.region_name,
        sequencer=SEQUENCERS.next(),
        source_ip="127.0.0.1",
        reason=_CREATED_REASONS.get(event_name, "PutObject"),
    )
    _publish(account_id, bucket, event)


def _object_deleted(
    account_id: str, bucket: Any, key_name: str, *, deletion_type: str, version: Any, reason: str
) -> None:
    """Send the "Object Deleted" event S3 sends when ``version`` (moto's object or delete
    marker) of ``key_name`` is deleted (Permanently Deleted), or is the delete marker just
    created (Delete Marker Created)."""
    from moto.s3.models import FakeDeleteMarker

    is_marker = isinstance(version, FakeDeleteMarker)
    event = object_deleted_event(
        bucket.name,
        key_name,
        deletion_type=deletion_type,
        version_id=_version_of(version, bucket),
        etag=DELETE_MARKER_ETAG if is_marker else version.etag,
        reason=reason,
        region=bucket.region_name,
        sequencer=SEQUENCERS.next(),
        source_ip="127.0.0.1",
    )
    _publish(account_id, bucket, event)


def send_s3_events_as_aws() -> None:
    """Make moto's S3 (5.x) send to EventBridge the events AWS's S3 sends, where the worker
    depends on the difference. Process-wide (moto's backends are), idempotent.

    * Every "Object Created" and "Object Deleted" event is built by the one factory
      (:func:`~mediajobs.local.events.object_created_event`,
      :func:`~mediajobs.local.events.object_deleted_event`): the key URL-encoded as S3
      spells it (moto sends it raw, which once hid the worker's missing decoding),
      ``etag`` (moto: ``eTag``), the API's ``reason`` (moto: ``ObjectCreated``), no
      ``version-id`` on an unversioned bucket (moto: ``"null"``), an ISO time.
    * A sequencer from :data:`SEQUENCERS` (moto: one constant): increasing in the order of
      the writes, since the event is built inside the write, and the embedded server runs
      S3 writes one at a time (:attr:`AtomicWrites.S3_WRITES`).
    * Deletes (``DeleteObject``, and each object of ``DeleteObjects``, which moto applies
      through ``delete_object``): a delete marker created gives "Delete Marker Created"
      with the marker's version id (moto sends nothing); a version deleted gives
      "Permanently Deleted" with that version's id (moto sends an event only when the last
      version goes, naming the current one, without ``deletion-type``); an object of an
      unversioned bucket gives "Permanently Deleted" without a version. Nothing is sent
      when nothing was deleted.
    * A completed multipart upload gives one "Object Created" (``CompleteMultipartUpload``);
      moto sends a ``PutObject`` one before it too.
    * Other events (moto's "Object Tags Added" on every put, ...) keep moto's shape, with
      the key encoded; the template's rule takes none of them.

    Done where moto builds the event, so everything downstream holds what AWS would: the
    rule matches the encoded key, the jobs queue and its dead-letter queue hold AWS's body,
    and re-sent or redelivered bodies stay as they were.
    """
    from moto.s3 import models, notifications

    send = notifications._send_event_bridge_message
    if getattr(send, "_mediajobs_as_aws", False):
        return

    def send_as_aws(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
        if event_name.startswith("s3:ObjectRemoved:"):
            return  # sent by delete_object below, as S3 sends it
        if event_name == "s3:ObjectCreated:Put" and getattr(key, "multipart", None) is not None:
            return  # the put inside CompleteMultipartUpload: its own event follows
        if event_name in _CREATED_REASONS:
            _object_created(account_id, bucket, event_name, key)
        else:
            send(account_id, bucket, event_name, _KeyAsS3Sends(key))

    send_as_aws._mediajobs_as_aws = True  # type: ignore[attr-defined]
    notifications._send_event_bridge_message = send_as_aws

    delete_object = models.S3Backend.delete_object

    def delete_object_as_aws(
        self: Any, bucket_name: str, key_name: str, version_id: str | None = None, bypass: bool = False
    ) -> tuple[bool, dict[str, Any]]:
        bucket = self.get_bucket(bucket_name)
        before = list(bucket.keys.getlist(key_name, []))
        deleted, meta = delete_object(self, bucket_name, key_name, version_id=version_id, bypass=bypass)
        if deleted:
            _event_of_delete(self.account_id, bucket, key_name, version_id, before, reason=DELETE_OBJECT)
        return deleted, meta

    delete_object_as_aws._mediajobs_original = delete_object  # type: ignore[attr-defined]
    models.S3Backend.delete_object = delete_object_as_aws  # type: ignore[method-assign]


def _event_of_delete(
    account_id: str, bucket: Any, key_name: str, version_id: str | None, before: list[Any], *, reason: str
) -> None:
    """Send the event of a delete moto applied: ``before`` are the key's versions (oldest
    first) before it; ``version_id`` the version the request named, if any."""
    if not bucket.is_versioned:
        if before:
            _object_deleted(
                account_id, bucket, key_name, deletion_type=PERMANENTLY_DELETED, version=before[-1], reason=reason
            )
        return
    if version_id is None:
        after = bucket.keys.getlist(key_name, [])
        if after and all(after[-1] is not v for v in before):
            _object_deleted(
                account_id, bucket, key_name, deletion_type=DELETE_MARKER_CREATED, version=after[-1], reason=reason
            )
        return
    gone = next((v for v in before if str(v.version_id) == str(version_id)), None)
    if gone is not None:
        _object_deleted(account_id, bucket, key_name, deletion_type=PERMANENTLY_DELETED, version=gone, reason=reason)


def expire_noncurrent_versions(
    bucket_name: str, *, prefix: str, noncurrent_older_than_s: float, now: datetime | None = None
) -> list[tuple[str, str]]:
    """Apply a ``NoncurrentVersionExpiration`` lifecycle rule now (moto stores lifecycle
    rules but never applies them): delete every noncurrent version of the objects under
    ``prefix`` that became noncurrent (its successor was written) at least
    ``noncurrent_older_than_s`` ago, each with the "Permanently Deleted" event S3 sends,
    ``reason`` "Lifecycle Expiration" (S3 user guide, "Expiring objects"; "EventBridge event
    message structure"). Current versions and delete markers stay.

    Runs in the process of the embedded AWS (moto's backend is there), holding
    :attr:`AtomicWrites.S3_WRITES` like every S3 write.

    Parameters
    ----------
    bucket_name: the bucket (versioned; an unversioned bucket has no noncurrent versions).
    prefix: the rule's key prefix (``originals/``).
    noncurrent_older_than_s: seconds a version must have been noncurrent (the rule's
        ``NoncurrentDays`` times 86,400; 0 expires every noncurrent version).
    now: the time to measure from (default: now, UTC).

    Returns
    -------
    list of (str, str)
        The (key, version id) expired, in the order of their events.

    Raises
    ------
    moto.s3.exceptions.MissingBucket
        If the bucket does not exist.
    """
    from moto.s3.models import FakeKey, s3_backends

    send_s3_events_as_aws()
    backend = s3_backends[ACCOUNT_ID]["aws"]
    original = getattr(type(backend).delete_object, "_mediajobs_original", type(backend).delete_object)
    moment = (now or datetime.now(UTC)).replace(tzinfo=None)  # moto's times are naive UTC
    expired: list[tuple[str, str]] = []
    with AtomicWrites.S3_WRITES:
        bucket = backend.get_bucket(bucket_name)
        for key_name in [k for k in list(bucket.keys) if k.startswith(prefix)]:
            versions = list(bucket.keys.getlist(key_name, []))
            for version, successor in zip(versions, versions[1:], strict=False):
                age_s = (moment - successor.last_modified).total_seconds()
                if not isinstance(version, FakeKey) or age_s < noncurrent_older_than_s:
                    continue
                before = list(bucket.keys.getlist(key_name, []))
                deleted, _ = original(backend, bucket_name, key_name, version_id=str(version.version_id))
                if deleted:
                    _event_of_delete(
                        ACCOUNT_ID, bucket, key_name, str(version.version_id), before, reason=LIFECYCLE_EXPIRATION
                    )
                    expired.append((key_name, str(version.version_id)))
    return expired


#: Set while this thread applies a transaction whose conditions held (see
#: :func:`_transactions_without_table_copies`).
_APPLYING = threading.local()


class _CopyWithoutTables:
    """Stands for the ``copy`` module inside moto's DynamoDB backend: a ``Table`` is not
    deep-copied while :data:`_APPLYING` is set; everything else is copied as ``copy`` does."""

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        from moto.dynamodb.models.table import Table

        if isinstance(value, Table) and getattr(_APPLYING, "active", False):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def _transaction_key(backend: Any, op_type: str, op: dict[str, Any]) -> dict[str, Any]:
    """The key of the item a transaction's action targets (a ``Put``'s, from its item).

    Raises moto's ``ValidationException`` for a ``Put`` whose item lacks a key attribute,
    with DynamoDB's message ("Missing the key pk in the item")."""
    from moto.dynamodb.exceptions import MockValidationException

    if op_type != "Put":
        return dict(op["Key"])
    table = backend.get_table(op["TableName"])
    key = {}
    for name in (table.hash_key_attr, table.range_key_attr):
        if name is None:
            continue
        if name not in op["Item"]:
            missing = f"One or more parameter values were invalid: Missing the key {name} in the item"
            raise MockValidationException(missing)
        key[name] = op["Item"][name]
    return key


def _transactions_without_table_copies() -> None:
    """Make moto's ``TransactWriteItems`` cost what the transaction touches, and cancel
    one as DynamoDB does.

    moto (5.x) backs a transaction up by deep-copying every table it names, once per
    item, before writing anything, and on a failed condition puts the copies back: the
    cost grows with the tables (the 2,000-upload storm, whose every record writes its
    asset in a transaction, slowed from 160 to 40 commits a minute and its server grew
    past 23 GB before the kernel killed it), and the items written before the failing
    one have already been applied (and streamed) when it is cancelled. DynamoDB checks
    every condition first and writes nothing, streams nothing, when one fails
    ("TransactWriteItems", DynamoDB API reference).

    Here the request's form is checked first, as DynamoDB does before any condition (two
    actions on one item, a ``Put`` without its key: ``ValidationException``); then the
    conditions, against the items as they are (every DynamoDB request of the embedded
    server runs alone: :class:`AtomicWrites`); a failed one cancels the transaction with
    moto's own reasons before anything is written. When all hold, moto's code applies the
    transaction without its table copies; a write that still fails (a validation error) is
    undone item by item, and the stream records of the writes and of their undo dropped.
    """
    from moto.dynamodb import models as ddb_models
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        MockValidationException,
        MultipleTransactionsException,
        TransactionCanceledException,
    )

    backend_class = ddb_models.DynamoDBBackend
    if getattr(backend_class.transact_write_items, "_mediajobs", False):
        return
    original = backend_class.transact_write_items
    ddb_models.copy = _CopyWithoutTables()  # type: ignore[attr-defined,assignment]

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if len(transact_items) > 100 or any(len(item) != 1 for item in transact_items):
            return original(self, transact_items)  # moto's own errors for malformed requests
        actions: list[tuple[dict[str, Any], dict[str, Any]]] = []
        targets: set[tuple[str, str]] = set()
        for item in transact_items:  # the request's form first: DynamoDB refuses it before any condition
            op_type, op = next(iter(item.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"} or "TableName" not in op:
                return original(self, transact_items)
            key = _transaction_key(self, op_type, op)
            target = (str(op["TableName"]), str(dict(sorted(key.items()))))  # as moto's check_unicity
            if target in targets:  # "no two actions can target the same item"
                raise MultipleTransactionsException()
            targets.add(target)
            actions.append((op, key))
        errors: list[tuple[Any, Any, Any]] = []
        touched: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        for op, key in actions:
            current = self.get_item(op["TableName"], key)
            touched.append((op["TableName"], key, current.to_json()["Attributes"] if current else None))
            condition = op.get("ConditionExpression")
            try:
                held = condition is None or get_filter_expression(
                    condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
                ).expr(current)
            except MockValidationException:
                raise  # a ValidationException, as moto's own code raises it
            except Exception as exc:  # noqa: BLE001 - moto's own code makes it a cancellation reason
                errors.append((type(exc).__name__, str(exc), None))
                continue
            if not held:
                old = (
                    current.to_json()["Attributes"]
                    if current and op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
                    else None
                )
                errors.append(("ConditionalCheckFailed", "The conditional request failed", old))
            else:
                errors.append((None, None, None))
        if any(code is not None for code, _, _ in errors):
            raise TransactionCanceledException(errors)
        # Each stream's length before: a transaction that fails while applied streams nothing,
        # neither its writes nor their undo (moto's table copies took the stream back too).
        streams = {name: self.get_table(name).stream_shard for name, _, _ in touched}
        streamed = {name: len(shard.items) for name, shard in streams.items() if shard is not None}
        _APPLYING.active = True
        try:
            return original(self, transact_items)
        except Exception:
            for table_name, key, attributes in touched:  # undo what was applied, item by item
                if attributes is None:
                    if self.get_item(table_name, key) is not None:
                        self.delete_item(table_name, key)
                else:
                    self.put_item(table_name, attributes)
            for name, length in streamed.items():
                del streams[name].items[length:]
            raise
        finally:
            _APPLYING.active = False

    transact_write_items._mediajobs = True  # type: ignore[attr-defined]
    backend_class.transact_write_items = transact_write_items  # type: ignore[method-assign]


def _cache_moto_module_list() -> None:
    """moto's server (5.x) finds the service of every request by listing its own package
    folder (``os.listdir`` and an ``isdir`` per entry, ~150 system calls). The list never
    changes while the process runs: compute it once. Measured: ~2x more requests per
    second from 8 worker processes (``mediajobs simulate``)."""
    if getattr(moto_backends.list_of_moto_modules, "_mediajobs_cached", False):
        return
    modules = tuple(moto_backends.list_of_moto_modules())

    def cached() -> tuple[str, ...]:
        return modules

    cached._mediajobs_cached = True  # type: ignore[attr-defined]
    moto_backends.list_of_moto_modules = cached  # type: ignore[assignment]


class AtomicWrites:
    """WSGI middleware that makes the moto server's conditional writes atomic, as AWS's are.

    moto (5.x) applies a DynamoDB ``PutItem``/``UpdateItem``/``DeleteItem`` and an S3
    ``PutObject`` with ``If-None-Match`` as "read the item, check the condition, write"
    with no lock, and its server answers requests on many threads. Two writers can then
    both pass a condition that DynamoDB (single-item writes are atomic; see "Condition
    expressions" in the DynamoDB developer guide) or S3 (conditional writes) lets only one
    pass: measured, 3 of 200 rounds of ten threads racing one takeover gave two winners.

    Each request's body is read whole first, outside any lock, so a client that stops
    half-way through its body holds up nobody else. Then moto's own routing picks the
    service, and every DynamoDB request runs alone among DynamoDB requests, every S3
    ``PUT``, ``POST`` or ``DELETE`` (signed, presigned or unsigned) alone among S3 writes;
    its whole response is built inside the lock. S3 reads and every other service (SQS
    long polls included) are not serialised. The locks are the class's: moto's backends
    are shared by the whole process, whatever server answers.

    Parameters
    ----------
    dispatcher: moto's ``DomainDispatcherApplication``, which routes a request to its
        service's application.
    """

    DYNAMODB = threading.Lock()
    S3_WRITES = threading.Lock()

    def __init__(self, dispatcher: DomainDispatcherApplication) -> None:
        self.dispatcher = dispatcher

    @classmethod
    def lock_for(cls, service: str, method: str) -> threading.Lock | None:
        """The lock a request of moto's ``service`` (``"dynamodb"``, ``"s3"``, ...) with
        HTTP ``method`` must hold, or ``None`` when it runs unserialised."""
        if service.startswith("dynamodb"):
            return cls.DYNAMODB
        if service == "s3" and method in ("PUT", "POST", "DELETE"):
            return cls.S3_WRITES
        return None

    def route(self, environ: dict[str, Any]) -> tuple[Callable[..., Iterable[bytes]], threading.Lock | None]:
        """The application moto routes ``environ`` to, and the lock it must run under."""
        app = self.dispatcher.get_application(environ)
        return app, self.lock_for(str(getattr(app, "service", "")), environ.get("REQUEST_METHOD", ""))

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ["wsgi.input"] = io.BytesIO(get_input_stream(environ).read())
        app, lock = self.route(environ)
        if lock is None:
            return app(environ, start_response)
        with lock:
            response = app(environ, start_response)
            try:
                return list(response)
            finally:
                if hasattr(response, "close"):  # PEP 3333: the caller of an iterable closes it
                    response.close()


class EmbeddedServer:
    """moto's server (its application and request handler) behind :class:`AtomicWrites`,
    on a thread of this process.

    Parameters
    ----------
    host: address to listen on; port: TCP port, 0 for a free one.
    transaction_hold_s: when set, DynamoDB's transaction conflicts are emulated in front
        of moto (:class:`~mediajobs.local.conflicts.TransactionConflicts`), each
        transaction holding its items this long.
    """

    def __init__(self, host: str, port: int, *, transaction_hold_s: float | None = None) -> None:
        self.app: Callable[..., Iterable[bytes]] = AtomicWrites(DomainDispatcherApplication(create_backend_app))
        #: DynamoDB's transaction conflicts, when asked for (``transaction_hold_s``).
        self.conflicts: TransactionConflicts | None = None
        if transaction_hold_s is not None:
            self.conflicts = TransactionConflicts(self.app, hold_s=transaction_hold_s)
            self.app = self.conflicts
        self._server: BaseWSGIServer = make_server(
            host, port, self.app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-server", daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_port)

    def start(self) -> None:
        """Answer requests (the socket is already bound)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop answering and close the socket."""
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()


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
        """A boto3 session with the stack's credentials and region (no profile, no
        environment credentials); build clients with ``endpoint_url=self.endpoint_url``."""
        return boto3.session.Session(region_name=self.region, **self.credentials)

    def client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client of ``service`` for the embedded server (``kwargs``: e.g. ``config``)."""
        return self.boto_session().client(service, endpoint_url=self.endpoint_url, **kwargs)

    def clients(self) -> ClientFactory:
        """The client factory of this stack: its endpoint, region and credentials, the one
        retry configuration (every client and model of a local worker comes from it)."""
        return ClientFactory(self.region, self.endpoint_url, self.credentials)

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


class EmbeddedAws:
    """Start a moto server on 127.0.0.1 (a free port) and create the stack in it.

    Use as a context manager; it gives the :class:`LocalStack`, whose
    :attr:`~LocalStack.worker_env` and :meth:`~LocalStack.settings` hold the worker's
    variables; the process environment is only read. ``WORK_DIR`` is a fresh folder of this
    embedded AWS (:attr:`work_dir`, removed on exit), inside the ``WORK_DIR`` that
    ``environ`` names, if any, else in the system's temporary folder.

    Parameters
    ----------
    template_path: defaults to :func:`mediajobs.local.template.find_template`.
    name: prefix of the local resource names.
    host, port: where the server listens (default 127.0.0.1 and a free port).
    environ: the user's environment, read for the :data:`USER_TUNABLE` limits and
        ``WORK_DIR`` (default ``os.environ``; never written).
    transaction_hold_s: emulate DynamoDB's transaction conflicts (:class:`EmbeddedServer`);
        the counts are then on :attr:`conflicts` while open.
    """

    def __init__(
        self,
        template_path: Path | None = None,
        name: str = "mediajobs-local",
        host: str = "127.0.0.1",
        port: int = 0,
        environ: Mapping[str, str] | None = None,
        *,
        transaction_hold_s: float | None = None,
    ) -> None:
        self._host, self._port = host, port
        self.template_path = template_path or find_template()
        self.template = load_template(self.template_path)
        self.name = name
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._transaction_hold_s = transaction_hold_s
        #: The emulated transaction conflicts' counts (with ``transaction_hold_s``).
        self.conflicts: TransactionConflicts | None = None
        self._server: EmbeddedServer | None = None
        self.stack: LocalStack | None = None
        #: The workers' ``WORK_DIR`` while open.
        self.work_dir: str | None = None
        self._own_work_dir = False

    def __enter__(self) -> LocalStack:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's request log
        _cache_moto_module_list()
        _transactions_without_table_copies()
        send_s3_events_as_aws()
        self._server = EmbeddedServer(self._host, self._port, transaction_hold_s=self._transaction_hold_s)
        self.conflicts = self._server.conflicts
        self._server.start()
        endpoint = f"http://127.0.0.1:{self._server.port}"
        stack = self._create(endpoint)
        # Workers empty their work folder when they start (every folder there is a dead
        # worker's on Lambda): locally, where other processes' workers may share the
        # system's temporary folder or the user's WORK_DIR, this process's workers get a
        # folder of their own inside it.
        work_dir_var = _ENV_NAMES["work_dir"]
        self.work_dir = tempfile.mkdtemp(prefix=LOCAL_WORK_DIR_PREFIX, dir=self._environ.get(work_dir_var) or None)
        self._own_work_dir = True
        # The settings the user set for this run, then the template's values (local
        # defaults included) except the limits the user set, then this stack's endpoint,
        # region and work folder.
        read = {*_ENV_NAMES.values(), LAMBDA_MEMORY_ENV}
        user = {k: v for k, v in self._environ.items() if k in read}
        template = {**stack.function_env, **LOCAL_DEFAULTS}
        worker_env = {
            **user,
            **{k: v for k, v in template.items() if not (k in USER_TUNABLE and k in user)},
            _ENV_NAMES["endpoint_url"]: endpoint,
            _ENV_NAMES["region"]: stack.region,
            work_dir_var: self.work_dir,
        }
        self.stack = dataclasses.replace(stack, worker_env=worker_env)
        return self.stack

    def __exit__(self, *exc: object) -> None:
        made = self.work_dir if self._own_work_dir else None
        if made is not None and Path(made).name.startswith(LOCAL_WORK_DIR_PREFIX):  # only the folder mkdtemp made
            shutil.rmtree(made, ignore_errors=True)
        self.work_dir, self._own_work_dir = None, False
        if self._server is not None:
            self._server.stop()
            self._server = None

    def client(self, service: str) -> Any:
        """A boto3 client for the embedded server (:meth:`LocalStack.client`)."""
        assert self.stack is not None
        return self.stack.client(service)

    def noncurrent_expirations(self) -> dict[str, int]:
        """The template's enabled lifecycle rules that expire noncurrent versions: their
        ``NoncurrentDays`` (parameters resolved to their defaults), by key prefix."""
        params = parameter_defaults(self.template)
        props = resolve(self._resource(BUCKET_ID).get("Properties", {}), {}, {}, params)
        rules = props.get("LifecycleConfiguration", {}).get("Rules", [])
        return {
            str(rule.get("Prefix", "")): int(rule["NoncurrentVersionExpiration"]["NoncurrentDays"])
            for rule in rules
            if rule.get("Status") == "Enabled" and "NoncurrentVersionExpiration" in rule
        }

    def expire_noncurrent(
        self,
        prefix: str = "originals/",
        *,
        noncurrent_older_than_s: float | None = None,
        bucket: str | None = None,
        now: datetime | None = None,
    ) -> list[tuple[str, str]]:
        """Apply now the template's lifecycle rule that expires noncurrent versions under
        ``prefix`` (``expire-noncurrent-originals`` for ``originals/``), which moto never
        applies: :func:`expire_noncurrent_versions`, each with S3's "Permanently Deleted"
        event, ``reason`` "Lifecycle Expiration".

        Parameters
        ----------
        prefix: the rule's prefix, or a narrower one under it (a test's own folder).
        noncurrent_older_than_s: how long a version must have been noncurrent, seconds;
            default the rule's ``NoncurrentDays`` (its parameter's default) times 86,400.
            0 expires every noncurrent version (what a test or the storm wants).
        bucket: default the stack's bucket.
        now: the time to measure from (default now).

        Returns
        -------
        list of (str, str)
            The (key, version id) expired.

        Raises
        ------
        KeyError
            If no enabled noncurrent-version rule of the template covers ``prefix``.
        """
        assert self.stack is not None, "the embedded AWS is not open"
        rules = self.noncurrent_expirations()
        covering = [rule for rule in rules if prefix.startswith(rule)]
        if not covering:
            raise KeyError(f"no lifecycle rule of the template expires noncurrent versions under {prefix!r}")
        days = rules[max(covering, key=len)]
        older_than_s = days * 86400 if noncurrent_older_than_s is None else noncurrent_older_than_s
        return expire_noncurrent_versions(
            bucket or self.stack.bucket, prefix=prefix, noncurrent_older_than_s=older_than_s, now=now
        )

    def _resource(self, logical_id: str) -> dict[str, Any]:
        resource: dict[str, Any] = self.template["Resources"][logical_id]
        return resource

    def _create_declared_table(self, dynamodb: Any, logical_id: str, table_name: str) -> None:
        """Create the table ``logical_id`` as the template declares it (keys, and its
        stream when it has one), on demand; a table this process's moto already has is
        kept, as the models' ``create_table`` keeps it."""
        props = self._resource(logical_id)["Properties"]
        stream = props.get("StreamSpecification")
        with contextlib.suppress(dynamodb.exceptions.ResourceInUseException):
            dynamodb.create_table(
                TableName=table_name,
                AttributeDefinitions=props["AttributeDefinitions"],
                KeySchema=props["KeySchema"],
                BillingMode="PAY_PER_REQUEST",
                **({"StreamSpecification": {"StreamEnabled": True, **stream}} if stream else {}),
            )

    def _create(self, endpoint: str) -> LocalStack:
        session = boto3.session.Session(region_name=REGION, **CREDENTIALS)
        s3 = session.client("s3", endpoint_url=endpoint)
        sqs = session.client("sqs", endpoint_url=endpoint)
        events = session.client("events", endpoint_url=endpoint)

        bucket = f"{self.name}-media"
        table_name = f"{self.name}-jobs"
        sources_table_name = f"{self.name}-sources"
        assets_table_name = f"{self.name}-assets"
        outbox_table_name = f"{self.name}-outbox"
        rule_name = f"{self.name}-object-created"
        refs: dict[str, str] = {
            BUCKET_ID: bucket,
            TABLE_ID: table_name,
            SOURCES_TABLE_ID: sources_table_name,
            ASSETS_TABLE_ID: assets_table_name,
            OUTBOX_TABLE_ID: outbox_table_name,
            RULE_ID: rule_name,
        }
        attrs: dict[tuple[str, str], str] = {
            (BUCKET_ID, "Arn"): f"arn:aws:s3:::{bucket}",
            (TABLE_ID, "Arn"): f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{table_name}",
            (SOURCES_TABLE_ID, "Arn"): f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{sources_table_name}",
            (ASSETS_TABLE_ID, "Arn"): f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{assets_table_name}",
            (OUTBOX_TABLE_ID, "Arn"): f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{outbox_table_name}",
        }
        params = parameter_defaults(self.template)

        # Queues: the dead-letter queues first, since the main queue's redrive and the rule's
        # target name them.
        dlq_props = self._resource(DLQ_ID).get("Properties", {})
        dlq_url = sqs.create_queue(QueueName=f"{self.name}-dlq", Attributes=_queue_attributes(dlq_props))["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        refs[DLQ_ID], attrs[(DLQ_ID, "Arn")] = dlq_url, dlq_arn
        events_dlq_props = self._resource(EVENTS_DLQ_ID).get("Properties", {})
        events_dlq_url = sqs.create_queue(
            QueueName=f"{self.name}-events-dlq", Attributes=_queue_attributes(events_dlq_props)
        )["QueueUrl"]
        events_dlq_arn = sqs.get_queue_attributes(QueueUrl=events_dlq_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        refs[EVENTS_DLQ_ID], attrs[(EVENTS_DLQ_ID, "Arn")] = events_dlq_url, events_dlq_arn
        queue_props = resolve(self._resource(QUEUE_ID).get("Properties", {}), refs, attrs, params)
        queue_url = sqs.create_queue(QueueName=f"{self.name}-jobs", Attributes=_queue_attributes(queue_props))[
            "QueueUrl"
        ]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        refs[QUEUE_ID], attrs[(QUEUE_ID, "Arn")] = queue_url, queue_arn

        # Bucket, with EventBridge notifications when the template turns them on.
        bucket_props = self._resource(BUCKET_ID).get("Properties", {})
        s3.create_bucket(Bucket=bucket)
        if bucket_props.get("VersioningConfiguration", {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        eb = bucket_props.get("NotificationConfiguration", {}).get("EventBridgeConfiguration", {})
        if eb.get("EventBridgeEnabled"):
            s3.put_bucket_notification_configuration(
                Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )

        # The rule, with the template's own event pattern and targets.
        rule_props = resolve(self._resource(RULE_ID)["Properties"], refs, attrs, params)
        rule_arn = events.put_rule(Name=rule_name, EventPattern=json.dumps(rule_props["EventPattern"]))["RuleArn"]
        attrs[(RULE_ID, "Arn")] = rule_arn
        target_props = ("Id", "Arn", "RetryPolicy", "DeadLetterConfig")
        events.put_targets(
            Rule=rule_name, Targets=[{k: t[k] for k in target_props if k in t} for t in rule_props["Targets"]]
        )

        # The tables, with the key schemas of the PynamoDB models.
        clients = ClientFactory(REGION, endpoint, CREDENTIALS)
        for model, name in ((JobModel, table_name), (SourceModel, sources_table_name)):
            clients.model(model, name).create_table(billing_mode="PAY_PER_REQUEST", wait=True)
        # The assets table as the template declares it (its items are of several models).
        # Like the models' create_table, a table this process's moto already has is kept.
        dynamodb = session.client("dynamodb", endpoint_url=endpoint)
        self._create_declared_table(dynamodb, ASSETS_TABLE_ID, assets_table_name)
        # The notification bus, the dispatcher's failures queue, and (local only) a rule
        # copying every event of the bus to a queue, to see what EventBridge was given.
        bus_name = f"{self.name}-notifications"
        try:
            bus_arn = events.create_event_bus(Name=bus_name)["EventBusArn"]
        except events.exceptions.ResourceAlreadyExistsException:  # this process's moto has it
            bus_arn = events.describe_event_bus(Name=bus_name)["Arn"]
        refs[BUS_ID], attrs[(BUS_ID, "Arn")], attrs[(BUS_ID, "Name")] = bus_name, bus_arn, bus_name
        failures_url = sqs.create_queue(QueueName=f"{self.name}-notification-failures")["QueueUrl"]
        seen_url = sqs.create_queue(QueueName=f"{self.name}-notifications-seen")["QueueUrl"]
        seen_arn = sqs.get_queue_attributes(QueueUrl=seen_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        refs[FAILURES_QUEUE_ID] = failures_url
        events.put_rule(
            Name=f"{self.name}-seen", EventBusName=bus_name, EventPattern=json.dumps({"source": ["mediajobs"]})
        )
        events.put_targets(Rule=f"{self.name}-seen", EventBusName=bus_name, Targets=[{"Id": "seen", "Arn": seen_arn}])
        # The outbox as the template declares it, with its stream (the dispatcher's source).
        self._create_declared_table(dynamodb, OUTBOX_TABLE_ID, outbox_table_name)

        function = resolve(self._resource(FUNCTION_ID)["Properties"], refs, attrs, params)
        globals_env = (self.template.get("Globals", {}).get("Function", {}).get("Environment", {}) or {}).get(
            "Variables", {}
        )
        env = {**resolve(globals_env, refs, attrs, params), **function.get("Environment", {}).get("Variables", {})}
        sqs_event = next(e["Properties"] for e in function["Events"].values() if e["Type"] == "SQS")
        return LocalStack(
            endpoint_url=endpoint,
            bucket=bucket,
            rule_name=rule_name,
            queue_url=queue_url,
            queue_arn=queue_arn,
            dlq_url=dlq_url,
            dlq_arn=dlq_arn,
            events_dlq_url=events_dlq_url,
            events_dlq_arn=events_dlq_arn,
            table_name=table_name,
            sources_table_name=sources_table_name,
            assets_table_name=assets_table_name,
            outbox_table_name=outbox_table_name,
            notification_bus_name=bus_name,
            notification_failures_queue_url=failures_url,
            notifications_seen_queue_url=seen_url,
            function_env={k: str(v) for k, v in env.items()},
            batch_size=int(sqs_event.get("BatchSize", 10)),
            timeout_s=int(function.get("Timeout", 3)),
        )


def _queue_attributes(props: dict[str, Any]) -> dict[str, str]:
    """SQS attributes from a template's ``AWS::SQS::Queue`` properties."""
    attributes: dict[str, str] = {}
    for prop in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "ReceiveMessageWaitTimeSeconds"):
        if prop in props:
            attributes[prop] = str(props[prop])
    if "RedrivePolicy" in props:
        policy = props["RedrivePolicy"]
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": policy["deadLetterTargetArn"], "maxReceiveCount": int(policy["maxReceiveCount"])}
        )
    return attributes
