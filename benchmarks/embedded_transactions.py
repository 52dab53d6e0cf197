"""The embedded AWS's ``TransactWriteItems`` and ``Query``: their cost against the size of
the table.

moto (5.x) deep-copies every table a transaction names, once per item, to roll back on a
failed condition; the embedded AWS checks the conditions first and applies a transaction
without copying (``mediajobs.local.moto_dynamodb.TransactionsAsDynamoDB``). moto's
``Query`` sorts and reads every item of the table to keep one partition's; the embedded
AWS reads the partition (``QueryByPartition``). This measures a three-item transaction
(an asset, two reference rows: what a worker's asset write is) and a query of one asset's
partition, on a table holding ``--small`` items and on one holding ``--large`` items, in
the same run, with the adaptations and without them (moto's own code), and prints the
milliseconds per transaction and per query and the large table's as a ratio to the small
one's; and the Python heap's peak during the large table's transactions
(``tracemalloc``), MB.

    .venv/bin/python benchmarks/embedded_transactions.py [--small 100] [--large 5000] [--rounds 50] [--json]

A benchmark, not a test: it exits 0 whatever it measures.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
import uuid
from typing import Any


def _client() -> Any:
    import boto3

    return boto3.client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # noqa: S106 - moto's in-process mock
    )


def _table(client: Any, items: int) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    client.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
    )
    filler = "x" * 800  # an asset's jobs JSON is of this order
    for i in range(items):
        client.put_item(TableName=name, Item={"pk": {"S": f"asset#{i}"}, "sk": {"S": "asset"}, "jobs": {"S": filler}})
    return name


def _transactions(client: Any, table: str, rounds: int) -> tuple[float, float]:
    """Seconds per transaction and the heap's peak (MB) over ``rounds`` transactions."""
    tracemalloc.start()
    started = time.perf_counter()
    for r in range(rounds):
        key = uuid.uuid4().hex
        client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": table,
                        "Item": {"pk": {"S": f"asset#{key}"}, "sk": {"S": "asset"}, "revision": {"N": str(r)}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {"Put": {"TableName": table, "Item": {"pk": {"S": "job#a"}, "sk": {"S": f"ref#{key}"}}}},
                {"Put": {"TableName": table, "Item": {"pk": {"S": "job#b"}, "sk": {"S": f"ref#{key}"}}}},
            ]
        )
    per_s = (time.perf_counter() - started) / rounds
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return per_s, peak / 1e6


def _queries(client: Any, table: str, rounds: int) -> float:
    """Seconds per query of one asset's partition (one item), over ``rounds`` queries."""
    started = time.perf_counter()
    for r in range(rounds):
        client.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"asset#{r}"}},
            ConsistentRead=True,
        )
    return (time.perf_counter() - started) / rounds


def measure(small: int, large: int, rounds: int, *, adapted: bool) -> dict[str, float]:
    from moto import mock_aws

    from mediajobs.local.adaptations import Patches
    from mediajobs.local.moto_dynamodb import QueryByPartition, TransactionsAsDynamoDB

    patches = Patches()
    if adapted:
        TransactionsAsDynamoDB().apply(patches)
        QueryByPartition().apply(patches)
    try:
        with mock_aws():
            client = _client()
            small_table, large_table = _table(client, small), _table(client, large)
            # The queries first: moto's transactions leave hundreds of MB of table copies
            # for the garbage collector, which would slow whatever comes after them.
            small_query_s, large_query_s = _queries(client, small_table, rounds), _queries(client, large_table, rounds)
            small_s, _ = _transactions(client, small_table, rounds)
            large_s, peak_mb = _transactions(client, large_table, rounds)
    finally:
        patches.undo()
    return {
        "small_ms": round(small_s * 1000, 2),
        "large_ms": round(large_s * 1000, 2),
        "large_to_small": round(large_s / small_s, 2),
        "large_peak_mb": round(peak_mb, 1),
        "query_small_ms": round(small_query_s * 1000, 2),
        "query_large_ms": round(large_query_s * 1000, 2),
        "query_large_to_small": round(large_query_s / small_query_s, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    moto_own = measure(args.small, args.large, args.rounds, adapted=False)
    embedded = measure(args.small, args.large, args.rounds, adapted=True)
    result = {"moto": moto_own, "embedded": embedded}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"TransactWriteItems of 3 items, tables of {args.small} and {args.large} items, {args.rounds} each:")
        for name, r in result.items():
            print(
                f"  {name:<9} {r['small_ms']:>8} ms  {r['large_ms']:>8} ms  x{r['large_to_small']:<6} "
                f"peak {r['large_peak_mb']} MB"
            )
        print(f"Query of one partition, the same tables, {args.rounds} each:")
        for name, r in result.items():
            print(f"  {name:<9} {r['query_small_ms']:>8} ms  {r['query_large_ms']:>8} ms  x{r['query_large_to_small']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
