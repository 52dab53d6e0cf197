"""Hot content: how each representation of a job's references holds when many workers
upload identical bytes under distinct keys at once (a meme: thousands of originals, one job).

Every upload makes an asset current and adds one reference to the one job, in one
``TransactWriteItems`` (as the worker does). Three representations of the references:

* ``counter``: the job's item holds a count (``ADD refs 1``): every transaction writes it;
* ``sharded``: ``--shards`` counter items per job, the asset's hash choosing one;
* ``rows``: a reference row per asset under the job (``pk=job#<key>``, ``sk=ref#<asset>``),
  what mediajobs uses (``docs/assets.md``).

It runs against a moto server behind :class:`mediajobs.local.conflicts.TransactionConflicts`
(moto has no transaction conflicts; that middleware holds a transaction's items for
``--hold-ms``, DynamoDB's two phases, and cancels another transaction touching one with
``TransactionConflict``). Each conflict is retried with jittered exponential backoff, as a
client must. Printed per representation: conflicts per committed upload, attempts per
upload, uploads per second as a ratio against ``rows`` measured in the same run, and the
writes the hottest item took -- the figure DynamoDB's limit of 1,000 write units per second
per partition, which one item can never exceed (developer guide, "Best practices for
designing and using partition keys effectively"), applies to.

    .venv/bin/python benchmarks/hot_content.py [--uploads 400] [--workers 16] [--json]

A benchmark, not a test: it exits 0 whatever it measures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import boto3
from botocore.config import Config
from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from mediajobs.local.conflicts import TransactionConflicts
from mediajobs.local.credentials import new_credentials
from mediajobs.local.embedded import AtomicWrites

JOB = "job#" + "ab" * 32
MAX_ATTEMPTS = 12


@dataclass
class Result:
    representation: str
    uploads: int
    committed: int
    gave_up: int
    conflicts: int
    attempts_per_upload: float
    conflicts_per_upload: float
    seconds: float
    uploads_per_s: float
    hottest_item_writes: int
    references_counted: int
    ratio_vs_rows: float = 0.0


def transaction(table: str, representation: str, asset: str, shards: int) -> list[dict[str, Any]]:
    """The upload's ``TransactItems``: the asset put, and its reference."""
    items: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": table,
                "Item": {"pk": {"S": "asset#" + asset}, "sk": {"S": "asset"}, "job": {"S": JOB}},
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
    ]
    if representation == "rows":
        ref = hashlib.sha256(asset.encode()).hexdigest()
        items.append({"Put": {"TableName": table, "Item": {"pk": {"S": JOB}, "sk": {"S": "ref#" + ref}}}})
    else:
        shard = int(hashlib.sha256(asset.encode()).hexdigest(), 16) % shards if representation == "sharded" else 0
        items.append(
            {
                "Update": {
                    "TableName": table,
                    "Key": {"pk": {"S": JOB}, "sk": {"S": f"count#{shard}"}},
                    "UpdateExpression": "ADD refs :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        )
    return items


def count_references(client: Any, table: str, representation: str) -> int:
    """The job's references as the representation stores them (strongly consistent)."""
    total = 0
    for page in client.get_paginator("query").paginate(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": JOB}},
        ConsistentRead=True,
    ):
        for item in page["Items"]:
            total += 1 if representation == "rows" else int(item["refs"]["N"])
    return total


def run(representation: str, *, uploads: int, workers: int, shards: int, hold_s: float, seed: int) -> Result:
    """One representation on a fresh server and table."""
    middleware = TransactionConflicts(AtomicWrites(DomainDispatcherApplication(create_backend_app)), hold_s=hold_s)
    server = make_server("127.0.0.1", 0, middleware, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    config = Config(retries={"max_attempts": 1}, max_pool_connections=workers + 2)
    # This server has no signature check (moto's application behind the middlewares
    # measured): any credentials sign.
    session = boto3.session.Session(region_name="us-east-1", **new_credentials())
    admin = session.client("dynamodb", endpoint_url=endpoint, config=config)
    table = f"hot-content-{representation}-{uuid.uuid4().hex[:8]}"  # moto's tables outlive a server
    admin.create_table(
        TableName=table,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
    )
    assets = [
        f"media/originals/u{i}/meme-{uuid.UUID(int=random.Random(seed + i).getrandbits(128))}.jpg"
        for i in range(uploads)
    ]
    lock = threading.Lock()
    tally = {"attempts": 0, "committed": 0, "gave_up": 0}

    def worker(index: int) -> None:
        client = session.client("dynamodb", endpoint_url=endpoint, config=config)
        rng = random.Random(seed * 1000 + index)
        for asset in assets[index::workers]:
            for attempt in range(1, MAX_ATTEMPTS + 1):
                with lock:
                    tally["attempts"] += 1
                try:
                    client.transact_write_items(TransactItems=transaction(table, representation, asset, shards))
                except client.exceptions.TransactionCanceledException:
                    time.sleep(rng.uniform(0, min(0.2, 0.005 * 2**attempt)))  # jittered backoff before a retry
                    continue
                with lock:
                    tally["committed"] += 1
                break
            else:
                with lock:
                    tally["gave_up"] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    counted = count_references(admin, table, representation)
    _, hottest = middleware.hottest()
    server.shutdown()
    server.server_close()
    committed = tally["committed"]
    return Result(
        representation=representation,
        uploads=uploads,
        committed=committed,
        gave_up=tally["gave_up"],
        conflicts=middleware.conflicts,
        attempts_per_upload=round(tally["attempts"] / uploads, 3),
        conflicts_per_upload=round(middleware.conflicts / uploads, 3),
        seconds=round(seconds, 3),
        uploads_per_s=round(committed / seconds, 1),
        hottest_item_writes=hottest,
        references_counted=counted,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=400)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--hold-ms", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's request log
    results = [
        run(
            r,
            uploads=args.uploads,
            workers=args.workers,
            shards=args.shards,
            hold_s=args.hold_ms / 1000,
            seed=args.seed,
        )
        for r in ("rows", "sharded", "counter")
    ]
    baseline = results[0].uploads_per_s or 1.0
    for r in results:
        r.ratio_vs_rows = round(r.uploads_per_s / baseline, 3)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return 0
    print(f"{args.uploads} uploads of one content by {args.workers} workers, transactions held {args.hold_ms} ms")
    print(
        f"{'representation':<15}{'committed':>10}{'gave up':>9}{'conflicts/upload':>18}{'attempts/upload':>17}"
        f"{'uploads/s vs rows':>19}{'hottest item writes':>21}{'refs counted':>14}"
    )
    for r in results:
        name = f"{r.representation} ({args.shards})" if r.representation == "sharded" else r.representation
        print(
            f"{name:<15}{r.committed:>10}{r.gave_up:>9}{r.conflicts_per_upload:>18.3f}{r.attempts_per_upload:>17.3f}"
            f"{r.ratio_vs_rows:>19.3f}{r.hottest_item_writes:>21}{r.references_counted:>14}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
