"""Drives a handler with a DynamoDB stream the way Lambda's stream event source mapping does.

The template's mapping of the outbox stream (``DispatcherFunction``, event ``Outbox``):
records in shard order from ``TRIM_HORIZON``, only those its filter lets through
(``eventName`` ``INSERT``), ``BatchSize`` at a time, with ``ReportBatchItemFailures``: a
batch whose response names a failed record is retried from that record (the records
before it are done); an invocation that raised is retried too, split in two
(``BisectBatchOnFunctionError``); after ``MaximumRetryAttempts`` retries the records left
are described in a message to the on-failure queue and skipped (AWS Lambda developer
guide, "Using Lambda with DynamoDB": "Error handling", "Configuring partial batch
response"). moto keeps the stream; the mapping is this poller, reading it with
``GetShardIterator``/``GetRecords`` as Lambda does.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from mediajobs.local.runner import HandlerFn, LocalLambdaContext

log = logging.getLogger(__name__)


@dataclass
class StreamStats:
    """What the stream mapping did: ``invocations``, ``records`` delivered (retries
    included), ``retried`` batches, ``errors`` (invocations that raised), ``sent_to_failures``
    records given up on."""

    invocations: int = 0
    records: int = 0
    retried: int = 0
    errors: int = 0
    sent_to_failures: int = 0
    filtered_out: int = 0
    sequence_numbers: list[str] = field(default_factory=list)


@dataclass
class _Shard:
    shard_id: str
    iterator: str | None
    buffer: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    limit: int = 0  # a bisected batch's size; 0: BatchSize


@dataclass(frozen=True)
class StreamMappingSettings:
    """The settings of a stream's event source mapping; the defaults are the template's for
    the outbox stream (``DispatcherFunction``, event ``Outbox``).

    Attributes
    ----------
    batch_size: ``BatchSize``.
    max_retries: ``MaximumRetryAttempts``.
    bisect: ``BisectBatchOnFunctionError``.
    event_names: the filter's ``eventName`` values.
    timeout_s: the function's ``Timeout``, seconds (the context's remaining time).
    function_name: the function's name, as the context gives it.
    """

    batch_size: int = 10
    max_retries: int = 3
    bisect: bool = True
    event_names: frozenset[str] = frozenset({"INSERT"})
    timeout_s: int = 180
    function_name: str = "mediajobs-dispatcher"


@dataclass(eq=False)
class StreamEventSourceMapping:
    """A DynamoDB stream -> handler, as Lambda's mapping with the template's settings.

    Attributes
    ----------
    streams: a boto3 ``dynamodbstreams`` client (endpoint: the moto server).
    stream_arn: the table's ``LatestStreamArn``.
    handler: the Lambda handler (``event, context -> response``).
    on_failure: called with the message Lambda would send to the on-failure destination.
    settings: the mapping's settings (default: the template's, :class:`StreamMappingSettings`).
    stats: what it did so far.
    """

    streams: Any
    stream_arn: str
    handler: HandlerFn
    _: KW_ONLY
    on_failure: Callable[[dict[str, Any]], None]
    settings: StreamMappingSettings = field(default_factory=StreamMappingSettings)
    stats: StreamStats = field(default_factory=StreamStats, init=False)
    _shards: dict[str, _Shard] = field(default_factory=dict, init=False, repr=False)

    def _refresh_shards(self) -> None:
        described = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        for shard in described.get("Shards", []):
            shard_id = shard["ShardId"]
            if shard_id not in self._shards:
                iterator = self.streams.get_shard_iterator(
                    StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
                self._shards[shard_id] = _Shard(shard_id, iterator)

    def _fill(self, shard: _Shard) -> None:
        if shard.buffer or shard.iterator is None:
            return
        answer = self.streams.get_records(ShardIterator=shard.iterator, Limit=1000)
        shard.iterator = answer.get("NextShardIterator")
        for record in answer.get("Records", []):
            if record.get("eventName") in self.settings.event_names:
                shard.buffer.append(_as_lambda_sends(record, self.stream_arn))
            else:
                self.stats.filtered_out += 1

    def poll_once(self) -> int:
        """Read what is new, and invoke the handler once per shard with a batch; returns
        the records delivered."""
        self._refresh_shards()
        delivered = 0
        for shard in self._shards.values():
            self._fill(shard)
            if shard.buffer:
                delivered += self._invoke(shard)
        return delivered

    def pending(self) -> int:
        """Records read and not done yet (a retry to come)."""
        return sum(len(s.buffer) for s in self._shards.values())

    def drain(self, max_rounds: int = 1000) -> StreamStats:
        """Poll until nothing new comes and nothing is pending (bounded by ``max_rounds``)."""
        for _ in range(max_rounds):
            if not self.poll_once() and not self.pending():
                return self.stats
        raise TimeoutError(f"stream not drained after {max_rounds} rounds")

    def _invoke(self, shard: _Shard) -> int:
        size = shard.limit or self.settings.batch_size
        batch = shard.buffer[:size]
        self.stats.invocations += 1
        self.stats.records += len(batch)
        self.stats.sequence_numbers.extend(r["dynamodb"]["SequenceNumber"] for r in batch)
        try:
            result = self.handler(
                {"Records": batch},
                LocalLambdaContext(timeout_s=self.settings.timeout_s, function_name=self.settings.function_name),
            )
        except Exception as exc:  # noqa: BLE001 - an invocation error, as Lambda sees it
            log.warning("the dispatcher raised: %s", exc)
            self.stats.errors += 1
            if self.settings.bisect and len(batch) > 1:
                shard.limit = max(1, len(batch) // 2)
            self._retry(shard)
            return len(batch)
        failures = (result or {}).get("batchItemFailures") or []
        failed = {f.get("itemIdentifier") if isinstance(f, dict) else None for f in failures}
        if None in failed or "" in failed:
            # "Success and failure conditions": an empty or null itemIdentifier, or one
            # under a bad key name, makes the whole batch a failure (retried from its start).
            first: int | None = 0
        else:
            first = next((i for i, r in enumerate(batch) if r["dynamodb"]["SequenceNumber"] in failed), None)
        if first is None:
            del shard.buffer[: len(batch)]
            shard.attempts, shard.limit = 0, 0
        else:
            del shard.buffer[:first]  # checkpointed: the records before the first failure
            self._retry(shard)
        return len(batch)

    def _retry(self, shard: _Shard) -> None:
        """Count a retry of the shard's head batch; past ``max_retries``, give it up."""
        shard.attempts += 1
        if shard.attempts <= self.settings.max_retries:
            self.stats.retried += 1
            return
        size = shard.limit or self.settings.batch_size
        given_up = shard.buffer[:size]
        del shard.buffer[:size]
        shard.attempts, shard.limit = 0, 0
        self.stats.sent_to_failures += len(given_up)
        self.on_failure(self._failure_message(shard.shard_id, given_up))

    def _failure_message(self, shard_id: str, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The message Lambda sends to a stream mapping's on-failure destination (its
        ``DDBStreamBatchInfo`` shape)."""
        now = datetime.datetime.now(tz=datetime.UTC).isoformat()
        return {
            "requestContext": {
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": self.settings.max_retries + 1,
            },
            "timestamp": now,
            "DDBStreamBatchInfo": {
                "shardId": shard_id,
                "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
                "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
                "batchSize": len(records),
                "streamArn": self.stream_arn,
            },
        }


def _as_lambda_sends(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A ``GetRecords`` record as a Lambda event's: ``eventSourceARN`` added, and
    ``ApproximateCreationDateTime`` in epoch seconds (boto3 parses it to a datetime)."""
    dynamodb = dict(record["dynamodb"])
    created = dynamodb.get("ApproximateCreationDateTime")
    if isinstance(created, datetime.datetime):
        dynamodb["ApproximateCreationDateTime"] = created.timestamp()
    return {**record, "dynamodb": dynamodb, "eventSourceARN": stream_arn}


def sqs_failure_sink(sqs: Any, queue_url: str) -> Callable[[dict[str, Any]], None]:
    """An ``on_failure`` that sends the message to an SQS queue, as Lambda does."""

    def send(message: dict[str, Any]) -> None:
        sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(message))

    return send


def stream_records(streams: Any, stream_arn: str) -> list[dict[str, Any]]:
    """Every record a DynamoDB stream holds, shard by shard from ``TRIM_HORIZON``, as
    ``GetRecords`` returns them (images in DynamoDB JSON). A reader for checks: it reads
    until a ``GetRecords`` answers none, which on AWS is not the end of an open shard."""
    found: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=stream_arn)["StreamDescription"].get("Shards", []):
        iterator = streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            answer = streams.get_records(ShardIterator=iterator, Limit=1000)
            if not answer.get("Records"):
                break
            found.extend(answer["Records"])
            iterator = answer.get("NextShardIterator")
    return found
