"""The embedded AWS's transaction conflicts (mediajobs.local.conflicts): a transaction that
touches an item another one holds is cancelled with TransactionConflict, as on DynamoDB."""

from __future__ import annotations

import threading
import uuid

import boto3
import pytest
from botocore.config import Config

from mediajobs.local.embedded import EmbeddedServer


@pytest.fixture
def held():
    """An embedded server (moto adapted as the embedded AWS runs it, whatever ran before)
    whose transactions stay held until the test sets ``release``; yields (client factory,
    middleware, entered, release, table)."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(timeout=30)

    server = EmbeddedServer("127.0.0.1", 0, hold=hold)
    middleware = server.conflicts
    assert middleware is not None
    server.start()
    session = boto3.session.Session(region_name="us-east-1", **server.credentials)
    endpoint = server.endpoint_url

    def client():
        return session.client("dynamodb", endpoint_url=endpoint, config=Config(retries={"max_attempts": 1}))

    table = f"conflicts-test-{uuid.uuid4().hex[:8]}"
    client().create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield client, middleware, entered, release, table
    release.set()
    server.stop()


def _put(table: str, pk: str) -> list[dict]:
    return [{"Put": {"TableName": table, "Item": {"pk": {"S": pk}}}}]


def test_a_transaction_touching_a_held_item_is_cancelled_with_transaction_conflict(held):
    client, middleware, entered, release, table = held
    first = threading.Thread(target=lambda: client().transact_write_items(TransactItems=_put(table, "hot")))
    first.start()
    assert entered.wait(timeout=30)
    second = client()
    with pytest.raises(second.exceptions.TransactionCanceledException) as cancelled:
        second.transact_write_items(TransactItems=_put(table, "other") + _put(table, "hot"))
    reasons = [r["Code"] for r in cancelled.value.response["CancellationReasons"]]
    assert reasons == ["None", "TransactionConflict"]
    with pytest.raises(second.exceptions.TransactionConflictException):
        second.put_item(TableName=table, Item={"pk": {"S": "hot"}})
    release.set()
    first.join(timeout=30)
    assert middleware.conflicts == 1 and middleware.single_conflicts == 1
    assert middleware.hottest()[1] == 1
    assert "Item" in second.get_item(TableName=table, Key={"pk": {"S": "hot"}}, ConsistentRead=True)
