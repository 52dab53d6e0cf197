"""``TransactWriteItems`` on the embedded AWS as DynamoDB runs it: every condition is
checked before anything is written, a cancelled transaction writes nothing, a failure
while applying is undone item by item, and a transaction copies no table (moto's own
deep-copies every table it names, once per item)."""

from __future__ import annotations

import uuid

import pytest
from botocore.exceptions import ClientError

from mediajobs.local.embedded import EmbeddedAws
from tests.conftest import REPO


@pytest.fixture(scope="module")
def ddb():
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-transactions") as stack:
        client = stack.client("dynamodb")
        name = f"tx-{uuid.uuid4().hex[:8]}"
        client.create_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
        )
        yield client, name, stack.client("dynamodbstreams")


def put(table, pk, condition=None, **extra):
    op = {"TableName": table, "Item": {"pk": {"S": pk}, "n": {"N": "1"}}}
    if condition:
        op["ConditionExpression"] = condition
    op.update(extra)
    return {"Put": op}


def get(client, table, pk):
    return client.get_item(TableName=table, Key={"pk": {"S": pk}}, ConsistentRead=True).get("Item")


def stream_keys(client, streams, table):
    """The keys of every record in ``table``'s stream, in order."""
    arn = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    keys = []
    for shard in shards:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
        for record in streams.get_records(ShardIterator=it["ShardIterator"])["Records"]:
            keys.append(record["dynamodb"]["Keys"]["pk"]["S"])
    return keys


def test_a_transaction_whose_conditions_hold_is_applied(ddb):
    client, table, _ = ddb
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    client.transact_write_items(TransactItems=[put(table, a), put(table, b, "attribute_not_exists(pk)")])
    assert get(client, table, a) and get(client, table, b)


def test_a_failed_condition_cancels_it_before_anything_is_written(ddb):
    client, table, _ = ddb
    first, existing = uuid.uuid4().hex, uuid.uuid4().hex
    client.put_item(TableName=table, Item={"pk": {"S": existing}, "n": {"N": "7"}})
    items = [
        put(table, first),  # would be written first by moto, then rolled back
        put(table, existing, "attribute_not_exists(pk)", ReturnValuesOnConditionCheckFailure="ALL_OLD"),
    ]
    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=items)
    error = raised.value.response
    assert error["Error"]["Code"] == "TransactionCanceledException"
    reasons = error["CancellationReasons"]
    assert [r["Code"] for r in reasons] == ["None", "ConditionalCheckFailed"]
    assert reasons[1]["Item"] == {"pk": {"S": existing}, "n": {"N": "7"}}
    assert get(client, table, first) is None
    assert get(client, table, existing)["n"] == {"N": "7"}


def test_a_cancelled_transaction_puts_nothing_in_the_stream(ddb):
    client, table, streams = ddb
    first, existing = uuid.uuid4().hex, uuid.uuid4().hex
    client.put_item(TableName=table, Item={"pk": {"S": existing}, "n": {"N": "1"}})
    with pytest.raises(ClientError):
        client.transact_write_items(TransactItems=[put(table, first), put(table, existing, "attribute_not_exists(pk)")])
    keys = stream_keys(client, streams, table)
    assert existing in keys and first not in keys


def test_a_failure_while_applying_is_undone_item_by_item(ddb):
    client, table, _ = ddb
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    client.put_item(TableName=table, Item={"pk": {"S": b}, "n": {"N": "5"}})
    bad_update = {
        "Update": {
            "TableName": table,
            "Key": {"pk": {"S": b}},
            "UpdateExpression": "SET n = n + :s",  # a string added to a number: invalid when applied
            "ExpressionAttributeValues": {":s": {"S": "x"}},
        }
    }
    with pytest.raises(ClientError):
        client.transact_write_items(TransactItems=[put(table, a), bad_update])
    assert get(client, table, a) is None
    assert get(client, table, b)["n"] == {"N": "5"}


def test_two_operations_on_one_item_are_refused_even_when_a_condition_fails(ddb):
    """DynamoDB refuses a transaction two of whose actions target one item with a
    ValidationException ("Transaction request cannot include multiple operations on one
    item"; TransactWriteItems, DynamoDB API reference: "no two actions can target the same
    item"), whatever its conditions would say -- as moto's own code does."""
    client, table, _ = ddb
    existing = uuid.uuid4().hex
    client.put_item(TableName=table, Item={"pk": {"S": existing}, "n": {"N": "3"}})
    items = [
        put(table, existing, "attribute_not_exists(pk)"),  # fails: the item exists
        {"Delete": {"TableName": table, "Key": {"pk": {"S": existing}}}},
    ]
    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=items)
    error = raised.value.response["Error"]
    assert (error["Code"], error["Message"]) == (
        "ValidationException",
        "Transaction request cannot include multiple operations on one item",
    ), f"two operations on one item answered {error['Code']}: {error['Message']}"
    assert get(client, table, existing)["n"] == {"N": "3"}


def test_a_failure_while_applying_puts_nothing_in_the_stream(ddb):
    """A transaction that fails while it is applied writes nothing and streams nothing: the
    undo of what was applied leaves no record of either in the table's stream."""
    client, table, streams = ddb
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    client.put_item(TableName=table, Item={"pk": {"S": b}, "n": {"N": "5"}})
    before = stream_keys(client, streams, table)
    bad_update = {
        "Update": {
            "TableName": table,
            "Key": {"pk": {"S": b}},
            "UpdateExpression": "SET n = n + :s",
            "ExpressionAttributeValues": {":s": {"S": "x"}},
        }
    }
    with pytest.raises(ClientError):
        client.transact_write_items(TransactItems=[put(table, a), bad_update])
    after = stream_keys(client, streams, table)
    assert after == before, f"a failed transaction streamed {after[len(before) :]} (a: {a}, b: {b})"


def test_a_put_without_its_key_is_a_validation_error(ddb):
    """A Put whose item lacks the table's key is refused as DynamoDB refuses it
    (ValidationException "One or more parameter values were invalid: Missing the key pk in
    the item"), not answered with a server error (which the SDK retries)."""
    client, table, _ = ddb
    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": {"n": {"N": "1"}}}}])
    error = raised.value.response["Error"]
    assert (error["Code"], error["Message"]) == (
        "ValidationException",
        "One or more parameter values were invalid: Missing the key pk in the item",
    ), f"a Put without its key answered {error['Code']}: {error['Message'][:120]}"


def test_a_condition_moto_cannot_evaluate_is_a_client_error_not_a_server_error(ddb):
    """moto's own code made an exception while evaluating a condition a cancellation reason
    (a 400 the SDK does not retry); the pre-check must not turn it into a 500 (which the
    SDK retries, and DynamoDB never answers for a request's own content)."""
    client, table, _ = ddb
    op = {
        "TableName": table,
        "Item": {"pk": {"S": uuid.uuid4().hex}},
        "ConditionExpression": "size(pk) > :v",  # moto 5.x raises ValueError evaluating it
        "ExpressionAttributeValues": {":v": {"S": "x"}},
    }
    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=[{"Put": op}])
    response = raised.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400, (
        f"a condition moto cannot evaluate answered {response['ResponseMetadata']['HTTPStatusCode']} "
        f"{response['Error']['Code']}"
    )
