"""The embedded AWS: a moto server in this process, with the resources of ``template.yaml``.

Resources are created as the template declares them (bucket with EventBridge
notifications, the rule with the template's own event pattern targeting the queue with
its retry policy and dead-letter queue, the queue with the template's redrive policy and
visibility timeout, both dead-letter queues, the tables with the PynamoDB models' key
schemas), under local names (:func:`~mediajobs.local.stack.resource_names`).

Where moto is not AWS in a way the product depends on, the embedded AWS adapts moto while
it is open, and puts it back when the last one in the process closes
(:mod:`mediajobs.local.adaptations`, :data:`~mediajobs.local.server.ADAPTATIONS`): its
S3 sends AWS's events (:mod:`mediajobs.local.moto_s3`), its DynamoDB runs transactions
as DynamoDB does and answers a ``Query`` from one partition
(:mod:`mediajobs.local.moto_dynamodb`), its server makes conditional writes atomic
(:class:`~mediajobs.local.server.AtomicWrites`), and it refuses every request not signed
with its credentials, new each time it starts, as AWS refuses one
(:mod:`mediajobs.local.authentication`). Each embedded AWS starts from an empty
moto, unless another is open in the process (they then share moto's state: give each a
name of its own). Lifecycle expirations of noncurrent versions happen on demand
(:meth:`EmbeddedAws.expire_noncurrent`). Each embedded AWS gives the workers of its
process a work folder of their own (``WORK_DIR``), since a worker empties its work
folder when it starts.

The public names of the modules it is made of are importable from here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mediajobs.adapters.clients import ClientFactory
from mediajobs.adapters.ledger import JobModel
from mediajobs.adapters.sources import SourceModel
from mediajobs.local import template as cfn
from mediajobs.local.conflicts import TransactionConflicts
from mediajobs.local.events import ACCOUNT_ID, LIFECYCLE_EXPIRATION, REGION
from mediajobs.local.moto_s3 import SEQUENCERS, S3EventsAsAws, listen_to_s3_events
from mediajobs.local.server import ADAPTATIONS, AtomicWrites, EmbeddedServer
from mediajobs.local.stack import (
    DEFAULT_NAME,
    LOCAL_DEFAULTS,
    LOCAL_WORK_DIR_PREFIX,
    USER_TUNABLE,
    LocalStack,
    resource_names,
    shared_session,
)
from mediajobs.settings import _ENV_NAMES, LAMBDA_MEMORY_ENV

__all__ = [
    "ADAPTATIONS",
    "DEFAULT_NAME",
    "LOCAL_DEFAULTS",
    "LOCAL_WORK_DIR_PREFIX",
    "SEQUENCERS",
    "USER_TUNABLE",
    "AtomicWrites",
    "EmbeddedAws",
    "EmbeddedServer",
    "LocalStack",
    "expire_noncurrent_versions",
    "listen_to_s3_events",
    "send_s3_events_as_aws",
]

log = logging.getLogger(__name__)


def send_s3_events_as_aws() -> contextlib.AbstractContextManager[None]:
    """While the returned context is open, this process's moto has the embedded AWS's
    adaptations (:data:`~mediajobs.local.server.ADAPTATIONS`: its S3 sends AWS's events,
    :class:`~mediajobs.local.moto_s3.S3EventsAsAws`, among them), as while an embedded
    server runs; reference-counted with the servers, so the first to open starts moto
    empty and the last to close undoes the adaptations and empties moto.
    """
    return ADAPTATIONS.applied()


def expire_noncurrent_versions(
    bucket_name: str, *, prefix: str, noncurrent_older_than_s: float, now: datetime | None = None
) -> list[tuple[str, str]]:
    """Apply a ``NoncurrentVersionExpiration`` lifecycle rule now (moto stores lifecycle
    rules but never applies them): delete every noncurrent version of the objects under
    ``prefix`` that became noncurrent (its successor was written) at least
    ``noncurrent_older_than_s`` ago, each with the "Permanently Deleted" event S3 sends,
    ``reason`` "Lifecycle Expiration" (S3 user guide, "Expiring objects"; "EventBridge event
    message structure"). Current versions and delete markers stay.

    Runs in the process of an open embedded AWS (moto's backend is there), holding
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
    RuntimeError
        If no embedded AWS is open in this process.
    """
    from moto.s3.models import FakeKey, s3_backends

    s3_events = ADAPTATIONS.active(S3EventsAsAws)
    delete_object = s3_events.delete_object
    assert delete_object is not None  # set by apply
    backend = s3_backends[ACCOUNT_ID]["aws"]
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
                version_id = str(version.version_id)
                deleted, _ = delete_object(backend, bucket_name, key_name, version_id=version_id)
                if deleted:
                    s3_events.event_of_delete(
                        ACCOUNT_ID, bucket, key_name, version_id, before, reason=LIFECYCLE_EXPIRATION
                    )
                    expired.append((key_name, version_id))
    return expired


class EmbeddedAws:
    """Start a moto server on 127.0.0.1 (a free port) and create the stack in it.

    The server has credentials of its own, new and random each time it starts
    (:attr:`LocalStack.credentials`), and refuses every request not signed with them, as
    AWS refuses a request signed with keys it does not know
    (:mod:`mediajobs.local.authentication`): the stack's clients sign with them.

    Use as a context manager; it gives the :class:`LocalStack`, whose
    :attr:`~LocalStack.worker_env` and :meth:`~LocalStack.settings` hold the worker's
    variables; the process environment is only read. ``WORK_DIR`` is a fresh folder of this
    embedded AWS (:attr:`work_dir`, removed on exit), inside the ``WORK_DIR`` that
    ``environ`` names, if any, else in the system's temporary folder.

    Parameters
    ----------
    template_path: defaults to :func:`mediajobs.local.template.find_template`.
    name: prefix of the local resource names (:func:`~mediajobs.local.stack.resource_names`).
    host, port: where the server listens (default 127.0.0.1 and a free port).
    environ: the user's environment, read for the :data:`USER_TUNABLE` limits and
        ``WORK_DIR`` (default ``os.environ``; never written).
    transaction_hold_s: emulate DynamoDB's transaction conflicts (:class:`EmbeddedServer`);
        the counts are then on :attr:`conflicts` while open.
    """

    def __init__(
        self,
        template_path: Path | None = None,
        name: str = DEFAULT_NAME,
        host: str = "127.0.0.1",
        port: int = 0,
        environ: Mapping[str, str] | None = None,
        *,
        transaction_hold_s: float | None = None,
    ) -> None:
        self._host, self._port = host, port
        self.template_path = template_path or cfn.find_template()
        self.template = cfn.load_template(self.template_path)
        self.name = name
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._transaction_hold_s = transaction_hold_s
        #: The emulated transaction conflicts' counts (with ``transaction_hold_s``).
        self.conflicts: TransactionConflicts | None = None
        self._server: EmbeddedServer | None = None
        self.stack: LocalStack | None = None
        #: The workers' ``WORK_DIR`` while open.
        self.work_dir: str | None = None
        #: The job keys' secret this embedded AWS made at start (``KEY_SECRET`` of its workers).
        self.key_secret = ""
        self._own_work_dir = False

    def __enter__(self) -> LocalStack:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's request log
        self._server = EmbeddedServer(self._host, self._port, transaction_hold_s=self._transaction_hold_s)
        self.conflicts = self._server.conflicts
        self._server.start()  # moto adapted (ADAPTATIONS) until it stops
        try:
            stack = self._create(self._server.endpoint_url, self._server.credentials)
        except BaseException:
            self._server.stop()
            self._server = None
            raise
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
            _ENV_NAMES["endpoint_url"]: stack.endpoint_url,
            _ENV_NAMES["region"]: stack.region,
            work_dir_var: self.work_dir,
            **({_ENV_NAMES["key_secret"]: self.key_secret} if self.key_secret else {}),
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
        params = cfn.parameter_defaults(self.template)
        props = cfn.resolve(self._resource(cfn.BUCKET_ID).get("Properties", {}), {}, {}, params)
        rules = props.get("LifecycleConfiguration", {}).get("Rules", [])
        return {
            str(rule.get("Prefix", "")): int(rule["NoncurrentVersionExpiration"]["NoncurrentDays"])
            for rule in rules
            if rule.get("Status") == "Enabled" and "NoncurrentVersionExpiration" in rule
        }

    def expire_noncurrent(
        self, prefix: str = "originals/", *, noncurrent_older_than_s: float | None = None, now: datetime | None = None
    ) -> list[tuple[str, str]]:
        """Apply now the template's lifecycle rule that expires noncurrent versions under
        ``prefix`` (``expire-noncurrent-originals`` for ``originals/``) to the stack's
        bucket, which moto never applies: :func:`expire_noncurrent_versions`, each with
        S3's "Permanently Deleted" event, ``reason`` "Lifecycle Expiration".

        Parameters
        ----------
        prefix: the rule's prefix, or a narrower one under it (a test's own folder).
        noncurrent_older_than_s: how long a version must have been noncurrent, seconds;
            default the rule's ``NoncurrentDays`` (its parameter's default) times 86,400.
            0 expires every noncurrent version (what a test or the storm wants).
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
            self.stack.bucket, prefix=prefix, noncurrent_older_than_s=older_than_s, now=now
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

    def _create(self, endpoint: str, credentials: dict[str, str]) -> LocalStack:
        session = shared_session(REGION, credentials)  # service models parsed once per process
        s3 = session.client("s3", endpoint_url=endpoint)
        sqs = session.client("sqs", endpoint_url=endpoint)
        events = session.client("events", endpoint_url=endpoint)
        names = resource_names(self.name)
        refs: dict[str, str] = {
            cfn.BUCKET_ID: names.bucket,
            cfn.TABLE_ID: names.table,
            cfn.SOURCES_TABLE_ID: names.sources_table,
            cfn.ASSETS_TABLE_ID: names.assets_table,
            cfn.OUTBOX_TABLE_ID: names.outbox_table,
            cfn.RULE_ID: names.rule,
        }
        table_arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table"
        attrs: dict[tuple[str, str], str] = {(cfn.BUCKET_ID, "Arn"): f"arn:aws:s3:::{names.bucket}"}
        for table_id in (cfn.TABLE_ID, cfn.SOURCES_TABLE_ID, cfn.ASSETS_TABLE_ID, cfn.OUTBOX_TABLE_ID):
            attrs[(table_id, "Arn")] = f"{table_arn}/{refs[table_id]}"
        params = cfn.parameter_defaults(self.template)

        def queue(logical_id: str, name: str) -> tuple[str, str]:
            """Create the queue ``logical_id`` as the template declares it; its URL and ARN."""
            props = cfn.resolve(self._resource(logical_id).get("Properties", {}), refs, attrs, params)
            url = sqs.create_queue(QueueName=name, Attributes=_queue_attributes(props))["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            refs[logical_id], attrs[(logical_id, "Arn")] = url, arn
            return url, arn

        # Queues: the dead-letter queues first, since the main queue's redrive and the rule's
        # target name them.
        dlq_url, dlq_arn = queue(cfn.DLQ_ID, names.dlq)
        events_dlq_url, events_dlq_arn = queue(cfn.EVENTS_DLQ_ID, names.events_dlq)
        queue_url, queue_arn = queue(cfn.QUEUE_ID, names.queue)
        backfill_url = backfill_arn = backfill_dlq_url = ""
        if cfn.BACKFILL_QUEUE_ID in self.template.get("Resources", {}):  # the backfill lane
            backfill_dlq_url, _ = queue(cfn.BACKFILL_DLQ_ID, names.backfill_dlq)
            backfill_url, backfill_arn = queue(cfn.BACKFILL_QUEUE_ID, names.backfill_queue)

        # Bucket, with EventBridge notifications when the template turns them on.
        bucket_props = self._resource(cfn.BUCKET_ID).get("Properties", {})
        s3.create_bucket(Bucket=names.bucket)
        if bucket_props.get("VersioningConfiguration", {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=names.bucket, VersioningConfiguration={"Status": "Enabled"})
        eb = bucket_props.get("NotificationConfiguration", {}).get("EventBridgeConfiguration", {})
        if eb.get("EventBridgeEnabled"):
            s3.put_bucket_notification_configuration(
                Bucket=names.bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )

        # The rule, with the template's own event pattern and targets.
        rule_props = cfn.resolve(self._resource(cfn.RULE_ID)["Properties"], refs, attrs, params)
        rule_arn = events.put_rule(Name=names.rule, EventPattern=json.dumps(rule_props["EventPattern"]))["RuleArn"]
        attrs[(cfn.RULE_ID, "Arn")] = rule_arn
        target_props = ("Id", "Arn", "RetryPolicy", "DeadLetterConfig")
        events.put_targets(
            Rule=names.rule, Targets=[{k: t[k] for k in target_props if k in t} for t in rule_props["Targets"]]
        )

        # The tables, with the key schemas of the PynamoDB models.
        clients = ClientFactory(REGION, endpoint, credentials, session=session)
        for model, name in ((JobModel, names.table), (SourceModel, names.sources_table)):
            clients.model(model, name).create_table(billing_mode="PAY_PER_REQUEST", wait=True)
        # The assets table as the template declares it (its items are of several models).
        # Like the models' create_table, a table an open embedded AWS already made is kept.
        dynamodb = session.client("dynamodb", endpoint_url=endpoint)
        self._create_declared_table(dynamodb, cfn.ASSETS_TABLE_ID, names.assets_table)
        # The notification bus, the dispatcher's failures queue, and (local only) a rule
        # copying every event of the bus to a queue, to see what EventBridge was given.
        try:
            bus_arn = events.create_event_bus(Name=names.bus)["EventBusArn"]
        except events.exceptions.ResourceAlreadyExistsException:  # an open embedded AWS made it
            bus_arn = events.describe_event_bus(Name=names.bus)["Arn"]
        refs[cfn.BUS_ID], attrs[(cfn.BUS_ID, "Arn")], attrs[(cfn.BUS_ID, "Name")] = names.bus, bus_arn, names.bus
        failures_url = sqs.create_queue(QueueName=names.failures_queue)["QueueUrl"]
        seen_url = sqs.create_queue(QueueName=names.seen_queue)["QueueUrl"]
        seen_arn = sqs.get_queue_attributes(QueueUrl=seen_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        refs[cfn.FAILURES_QUEUE_ID] = failures_url
        seen_pattern = json.dumps({"source": ["mediajobs"]})
        events.put_rule(Name=names.seen_rule, EventBusName=names.bus, EventPattern=seen_pattern)
        events.put_targets(Rule=names.seen_rule, EventBusName=names.bus, Targets=[{"Id": "seen", "Arn": seen_arn}])
        # The outbox as the template declares it, with its stream (the dispatcher's source).
        self._create_declared_table(dynamodb, cfn.OUTBOX_TABLE_ID, names.outbox_table)
        decisions_bucket = decision_stream = ""
        if cfn.DECISION_STREAM_ID in self.template.get("Resources", {}):  # the decision log
            decisions_bucket, decision_stream = names.decisions_bucket, names.decision_stream
            self._create_decision_stream(session, endpoint, s3, decisions_bucket, decision_stream)
            refs[cfn.DECISIONS_BUCKET_ID], refs[cfn.DECISION_STREAM_ID] = decisions_bucket, decision_stream
            attrs[(cfn.DECISION_STREAM_ID, "Arn")] = (
                f"arn:aws:firehose:{REGION}:{ACCOUNT_ID}:deliverystream/{decision_stream}"
            )

        if cfn.KEY_SECRET_ID in self.template.get("Resources", {}):  # the job keys' secret, made now
            refs[cfn.KEY_SECRET_ID] = self._create_key_secret(session, endpoint, names.key_secret)

        function = cfn.worker_function(self.template, refs, attrs)
        return LocalStack(
            endpoint_url=endpoint,
            bucket=names.bucket,
            rule_name=names.rule,
            queue_url=queue_url,
            queue_arn=queue_arn,
            dlq_url=dlq_url,
            dlq_arn=dlq_arn,
            events_dlq_url=events_dlq_url,
            events_dlq_arn=events_dlq_arn,
            table_name=names.table,
            sources_table_name=names.sources_table,
            assets_table_name=names.assets_table,
            outbox_table_name=names.outbox_table,
            notification_bus_name=names.bus,
            notification_failures_queue_url=failures_url,
            notifications_seen_queue_url=seen_url,
            backfill_queue_url=backfill_url,
            backfill_queue_arn=backfill_arn,
            backfill_dlq_url=backfill_dlq_url,
            decisions_bucket=decisions_bucket,
            decision_stream_name=decision_stream,
            function_env=function.env,
            batch_size=function.batch_size,
            timeout_s=function.timeout_s,
            credentials=dict(credentials),
            function_envs=cfn.function_environments(self.template, refs, attrs),
        )

    def _create_key_secret(self, session: Any, endpoint: str, name: str) -> str:
        """The job keys' secret, as the template's ``JobKeySecret`` is deployed: made at start
        (64 random URL-safe characters, :func:`secrets.token_urlsafe`), never in the
        repository, kept in the embedded Secrets Manager under ``name``, and given to this
        process's workers as ``KEY_SECRET`` (:attr:`key_secret`); its ARN. A secret an open
        embedded AWS of this name made is kept (two stacks sharing moto share it)."""
        manager = session.client("secretsmanager", endpoint_url=endpoint)
        try:
            made = manager.create_secret(Name=name, SecretString=secrets.token_urlsafe(48))
        except manager.exceptions.ResourceExistsException:
            made = manager.describe_secret(SecretId=name)
        self.key_secret = str(manager.get_secret_value(SecretId=name)["SecretString"])
        return str(made["ARN"])

    def _create_decision_stream(self, session: Any, endpoint: str, s3: Any, bucket: str, stream: str) -> None:
        """The decision log's bucket and its Firehose stream, with the template's prefix and
        buffering (moto writes each ``PutRecordBatch`` at once, under the prefix and the
        ``YYYY/MM/DD/HH/`` Firehose appends: the layout AWS writes, unbuffered). A stream an
        open embedded AWS made is kept."""
        props = self._resource(cfn.DECISION_STREAM_ID).get("Properties", {})
        destination = props.get("ExtendedS3DestinationConfiguration", {})
        s3.create_bucket(Bucket=bucket)
        firehose = session.client("firehose", endpoint_url=endpoint)
        with contextlib.suppress(firehose.exceptions.ResourceInUseException):
            firehose.create_delivery_stream(
                DeliveryStreamName=stream,
                DeliveryStreamType="DirectPut",
                ExtendedS3DestinationConfiguration={
                    "BucketARN": f"arn:aws:s3:::{bucket}",
                    "RoleARN": f"arn:aws:iam::{ACCOUNT_ID}:role/{stream}-firehose",
                    "Prefix": str(destination.get("Prefix", "decisions/")),
                    "CompressionFormat": "UNCOMPRESSED",
                },
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
