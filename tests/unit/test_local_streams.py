"""The local DynamoDB stream event source mapping against Lambda's documented behaviour,
with a fake ``dynamodbstreams`` client (no AWS)."""

from __future__ import annotations

from typing import Any

import pytest

from mediajobs.local.streams import StreamEventSourceMapping


class FakeStreams:
    """One shard holding ``count`` INSERT records (sequence numbers "1", "2", ...)."""

    def __init__(self, count: int) -> None:
        self.records = [
            {"eventName": "INSERT", "dynamodb": {"SequenceNumber": str(n), "Keys": {"id": {"S": f"n{n}"}}}}
            for n in range(1, count + 1)
        ]
        self._served = False

    def describe_stream(self, StreamArn: str) -> dict[str, Any]:
        return {"StreamDescription": {"Shards": [{"ShardId": "shard-1"}]}}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        return {"ShardIterator": "it-0"}

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:
        records, self._served = ([] if self._served else self.records), True
        return {"Records": records, "NextShardIterator": "it-1"}


@pytest.mark.parametrize(
    "failures",
    [[{"itemIdentifier": ""}], [{"itemIdentifier": None}], [{"itemId": "1"}]],
    ids=["empty-identifier", "null-identifier", "bad-key-name"],
)
def test_a_malformed_partial_batch_response_is_a_complete_failure(failures):
    """AWS Lambda developer guide, "Configuring partial batch response with DynamoDB and
    Lambda", "Success and failure conditions": Lambda treats a batch as a complete failure
    if the response has an empty string itemIdentifier, a null itemIdentifier, or an
    itemIdentifier with a bad key name -- and retries it. The mapping must not checkpoint
    past those records (nor crash)."""
    calls: list[list[str]] = []
    given_up: list[dict[str, Any]] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.append([r["dynamodb"]["SequenceNumber"] for r in event["Records"]])
        return {"batchItemFailures": failures} if len(calls) == 1 else {"batchItemFailures": []}

    mapping = StreamEventSourceMapping(FakeStreams(3), "arn:stream", handler, on_failure=given_up.append)
    mapping.drain(max_rounds=10)
    assert calls == [["1", "2", "3"], ["1", "2", "3"]], f"a malformed response was not retried whole: {calls}"
    assert given_up == []
