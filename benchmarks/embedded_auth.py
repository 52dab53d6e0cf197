"""What the embedded AWS's signature check costs a request (``mediajobs.local.authentication``).

Two servers in this process on the same moto (its adapted classes, its state): the embedded
server as it runs, every request's SigV4 signature checked
(:class:`~mediajobs.local.server.EmbeddedServer`), and the same application without the
check (:class:`~mediajobs.local.server.AtomicWrites` behind a
:class:`~mediajobs.local.server.PooledWSGIServer`, as before the check existed). The same
signed calls go to each in turn, round after round (A B A B ...: the machine's drift
cancels), and each call's median time is printed for both, with their ratio: S3 writes of
4 KiB and 8 MiB (a body the check hashes), an S3 read, DynamoDB writes and reads, SQS sends.
Then the check alone (:func:`~mediajobs.local.authentication.refusal_of` on a signed
request built here, no server): its CPU time per request.

    .venv/bin/python benchmarks/embedded_auth.py [--rounds 7] [--calls 40] [--json]

A benchmark, not a test: it exits 0 whatever it measures.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

from mediajobs.adapters.clients import with_s3_signing
from mediajobs.local.server import AtomicWrites, EmbeddedServer, PooledWSGIServer


def clients(endpoint: str, credentials: dict[str, str]) -> dict[str, Any]:
    session = boto3.session.Session(region_name="us-east-1", **credentials)
    config = Config(retries={"max_attempts": 1})
    return {
        service: session.client(service, endpoint_url=endpoint, config=with_s3_signing(service, config))
        for service in ("s3", "dynamodb", "sqs")
    }


def calls(made: dict[str, Any], bucket: str, table: str, queue_url: str) -> dict[str, Callable[[], object]]:
    s3, dynamodb, sqs = made["s3"], made["dynamodb"], made["sqs"]
    small, large = b"x" * 4096, b"y" * (8 * 2**20)
    item = {"pk": {"S": "bench"}, "n": {"N": "1"}}
    return {
        "s3 PutObject 4 KiB": lambda: s3.put_object(Bucket=bucket, Key="bench/small", Body=small),
        "s3 PutObject 8 MiB": lambda: s3.put_object(Bucket=bucket, Key="bench/large", Body=large),
        "s3 GetObject 4 KiB": lambda: s3.get_object(Bucket=bucket, Key="bench/small")["Body"].read(),
        "dynamodb PutItem": lambda: dynamodb.put_item(TableName=table, Item=item),
        "dynamodb GetItem": lambda: dynamodb.get_item(TableName=table, Key={"pk": item["pk"]}, ConsistentRead=True),
        "sqs SendMessage": lambda: sqs.send_message(QueueUrl=queue_url, MessageBody="bench"),
    }


def check_alone_us(credentials: dict[str, str], repeat: int = 2000) -> dict[str, float]:
    """The check's own time on one signed request of each kind, microseconds (median of 5)."""
    import io

    from botocore.auth import S3SigV4Auth, SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from mediajobs.local.authentication import Received, refusal_of

    keys = Credentials(credentials["aws_access_key_id"], credentials["aws_secret_access_key"])
    kinds = {
        "s3 PutObject 4 KiB": ("PUT", "http://127.0.0.1:5000/bucket/bench/small", b"x" * 4096, S3SigV4Auth, "s3", {}),
        "dynamodb GetItem": (
            "POST", "http://127.0.0.1:5000/", b'{"TableName": "t", "Key": {"pk": {"S": "bench"}}}', SigV4Auth,
            "dynamodb", {"X-Amz-Target": "DynamoDB_20120810.GetItem", "Content-Type": "application/x-amz-json-1.0"},
        ),
    }  # fmt: skip
    found = {}
    for kind, (method, url, body, signer, service, headers) in kinds.items():
        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        signer(keys, service, "us-east-1").add_auth(request)
        prepared = request.prepare()
        split = url.split("/", 3)
        sent = {name.lower(): value for name, value in prepared.headers.items()}
        sent["host"] = split[2]
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(repeat):
                received = Received(method, "/" + split[3], "", sent, io.BytesIO(body))
                assert refusal_of(received, credentials, time.time()) is None
            runs.append((time.perf_counter() - start) / repeat * 1e6)
        found[kind] = round(statistics.median(runs), 1)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=40, help="calls of each kind per round and server")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the unchecked server's request log

    with EmbeddedServer("127.0.0.1", 0) as checked:
        bare = PooledWSGIServer(
            "127.0.0.1", 0, AtomicWrites(DomainDispatcherApplication(create_backend_app)), handler=MotoRequestHandler
        )
        threading.Thread(target=bare.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        try:
            setup = clients(checked.endpoint_url, checked.credentials)
            bucket, table = f"bench-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
            setup["s3"].create_bucket(Bucket=bucket)
            setup["dynamodb"].create_table(
                TableName=table,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            queue_url = setup["sqs"].create_queue(QueueName=f"bench-{uuid.uuid4().hex[:8]}")["QueueUrl"]
            servers = {
                "checked": calls(clients(checked.endpoint_url, checked.credentials), bucket, table, queue_url),
                "unchecked": calls(
                    clients(f"http://127.0.0.1:{bare.server_port}", checked.credentials), bucket, table, queue_url
                ),
            }
            for kinds in servers.values():  # warm: connections, models, moto's first answers
                for call in kinds.values():
                    call()
            times: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
            for _ in range(args.rounds):
                for name, kinds in servers.items():
                    for kind, call in kinds.items():
                        count = max(1, args.calls // 8) if "8 MiB" in kind else args.calls
                        start = time.perf_counter()
                        for _ in range(count):
                            call()
                        times[name].setdefault(kind, []).append((time.perf_counter() - start) / count * 1000)
        finally:
            bare.shutdown()
            bare.server_close()
        alone = check_alone_us(checked.credentials)

    rows = []
    for kind in times["checked"]:
        with_ms, without_ms = (statistics.median(times[n][kind]) for n in ("checked", "unchecked"))
        rows.append({"call": kind, "checked_ms": round(with_ms, 3), "unchecked_ms": round(without_ms, 3),
                     "ratio": round(with_ms / without_ms, 3)})  # fmt: skip
    if args.json:
        print(json.dumps({"rounds": args.rounds, "calls": args.calls, "rows": rows, "check_alone_us": alone}))
        return 0
    print(f"{'call':<22} {'checked ms':>11} {'unchecked ms':>13} {'ratio':>6}   (median of {args.rounds} rounds)")
    for row in rows:
        print(f"{row['call']:<22} {row['checked_ms']:>11.3f} {row['unchecked_ms']:>13.3f} {row['ratio']:>6.3f}")
    print("the check alone, per request: " + ", ".join(f"{kind} {us} us" for kind, us in alone.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
