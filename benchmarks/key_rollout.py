"""What rolling out a new key algorithm costs, per 1,000 assets, against their first processing.

A stack that runs key algorithm 1 (job keys from public inputs) moves to the keyed algorithm
2 (``docs/operations.md``, "Rolling out a new key algorithm") the way it takes any change of
what determines a job's output: a backfill gives every asset the jobs the new keys name, each
rendered once per content on the backfill lane, switches it, and the old sets are collected
after the retire grace. Every job gets a new key, so nothing is reused: the rollout renders
and moderates everything again.

One run, in one process, on the embedded AWS:

1. **the baseline**: ``--assets`` distinct photos (made here: a gradient and noise, so each is
   its own content, JPEG of ``--width`` x ``--height``) uploaded under algorithm 1 and
   processed by the real handler, as the event source mapping drives it;
2. **the rollout**: a handler of algorithm 2 with the stack's secret (the deployment), the
   backfill started and its scan run (its lane: the jobs queue here) until it is ``done``,
   then the collection with no grace (the retire grace over).

For each phase: the jobs' CPU seconds as the decision log has them (``cpu_s`` of each
``ended`` record, grouped by ``key_v``: what ``mediajobs decisions`` and the spikes query
read; the embedded AWS, which runs in this process, is not in them), the jobs ended, and
every AWS request the code made, by service and operation (a patched ``botocore`` client). The figures are the
rollout's, per 1,000 assets, and their ratio to the baseline's (the same photos, the same
run). Prices: ``benchmarks/cost.py``'s ``PRICES`` (us-east-1 list prices) for what the
requests cost, and Rekognition's ``DetectModerationLabels`` at 0.001 USD an image (the
first price tier); the CPU's price depends on the function's memory (``docs/cost.md``).

At the end it checks what the rollout must leave: every asset on its new keys, no object
under an old key's prefix.

    .venv/bin/python benchmarks/key_rollout.py --assets 60
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib.util
import io
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import botocore.client
from PIL import Image

REPO_ROOT = Path(__file__).resolve().parents[1]
#: USD per DetectModerationLabels image (Rekognition Image, first 1M images a month).
REKOGNITION_IMAGE_USD = 0.001


def _prices() -> dict[str, float]:
    spec = importlib.util.spec_from_file_location("cost_benchmark", REPO_ROOT / "benchmarks" / "cost.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.PRICES)


def photo(seed: int, width: int, height: int) -> bytes:
    """A JPEG of its own content: a gradient with noise, from ``seed``."""
    rng = random.Random(seed)
    base = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    noise = Image.effect_noise((width, height), 40 + rng.random() * 20).convert("RGB")
    tint = Image.new("RGB", (width, height), tuple(rng.randrange(256) for _ in range(3)))
    image = Image.blend(Image.blend(base, noise, 0.35), tint, 0.3)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=88)
    return out.getvalue()


class Calls:
    """Every botocore call made while :meth:`counting`, by ``service:Operation``."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._real = botocore.client.BaseClient._make_api_call

    def install(self) -> None:
        real, counts = self._real, self.counts

        def counted(client: Any, operation: str, params: Any) -> Any:
            counts[f"{client.meta.service_model.service_name}:{operation}"] += 1
            return real(client, operation, params)

        botocore.client.BaseClient._make_api_call = counted  # type: ignore[method-assign]

    def remove(self) -> None:
        botocore.client.BaseClient._make_api_call = self._real  # type: ignore[method-assign]

    def take(self) -> collections.Counter[str]:
        taken = collections.Counter(self.counts)
        self.counts.clear()
        return taken


def job_cpu(stack: Any) -> dict[int, tuple[float, int]]:
    """By key algorithm: the CPU seconds the jobs' work spent and how many ended (the
    decision log's ``ended`` records)."""
    from mediajobs.local.decisions import DecisionLogReader

    reader = DecisionLogReader(stack.client("s3"), stack.decisions_bucket)
    rows = reader.run_sql("SELECT key_v, sum(cpu_s), count(*) FROM decisions WHERE action = 'ended' GROUP BY key_v")
    return {int(k): (float(s or 0.0), int(n)) for k, s, n in rows.rows}


def requests_usd(counts: collections.Counter[str], prices: dict[str, float]) -> float:
    """What ``counts`` cost: S3 writes and lists, S3 reads, DynamoDB units (one per request:
    the items here are under 1 KB reads / 1 KB writes but for a transaction's, counted per
    item), SQS requests, Rekognition images."""
    usd = 0.0
    for name, n in counts.items():
        service, operation = name.split(":")
        if service == "s3":
            cheap = operation.startswith(("Get", "Head"))
            usd += n * (prices["s3_get_head"] if cheap else prices["s3_put_list"])
        elif service == "dynamodb":
            write = operation.startswith(("Put", "Update", "Delete", "TransactWrite", "BatchWrite"))
            usd += n * (prices["dynamodb_write_unit"] if write else prices["dynamodb_read_unit"])
        elif service == "sqs":
            usd += n * prices["sqs_request"]
        elif service == "rekognition":
            usd += n * REKOGNITION_IMAGE_USD
    return usd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assets", type=int, default=60, help="distinct photos (default 60)")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from mediajobs.bootstrap import build_backfiller, build_collector, build_service
    from mediajobs.domain.backfill import BackfillState
    from mediajobs.domain.keys import KEY_ALGORITHM_VERSION, sha256_hex
    from mediajobs.domain.plan import Where, plan_jobs
    from mediajobs.entrypoints import worker
    from mediajobs.local.runner import EventSourceMapping
    from mediajobs.local.session import LocalSession, local_adapters, local_handler

    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    environ = {**os.environ, "KEY_ALGORITHM_VERSION": "1"}  # a stack from before the keyed algorithm
    prices = _prices()
    calls = Calls()
    contents = [photo(seed, args.width, args.height) for seed in range(args.assets)]
    with tempfile.TemporaryDirectory() as folder, LocalSession(environ=environ, name="key-rollout") as session:
        stack = session.stack
        assert session.settings.key_algorithm == 1
        paths = []
        for i, data in enumerate(contents):
            path = Path(folder) / f"{i:04d}.jpg"
            path.write_bytes(data)
            paths.append(path)
        calls.install()
        try:
            wall = time.monotonic()
            for i, path in enumerate(paths):
                session.upload(path, f"originals/bench/{i:04d}.jpg")
            session.run()
            baseline = {"wall_s": time.monotonic() - wall, "calls": calls.take()}

            # The deployment: algorithm 2's workers (the lane is the jobs queue here).
            settings = dataclasses.replace(
                session.settings, key_algorithm=KEY_ALGORITHM_VERSION, backfill_queue_arn="", retire_grace_s=0
            )
            adapters = dataclasses.replace(
                local_adapters(stack, settings), assets=stack.assets(writer=True), backfills=stack.backfills()
            )
            handler = local_handler(worker.make_handler(build_service(settings, adapters=adapters)))
            esm = EventSourceMapping(
                session.sqs,
                stack.queue_url,
                stack.queue_arn,
                handler,
                batch_size=stack.batch_size,
                timeout_s=stack.timeout_s,
                region=stack.region,
            )
            backfiller = build_backfiller(dataclasses.replace(settings, worker_timeout_s=1), adapters)
            wall = time.monotonic()
            backfill, _ = backfiller.start()
            for _ in range(1000):
                [now] = [b for b in backfiller.tick(budget_s=10.0) if b.id == backfill.id] or [backfill]
                esm.drain()
                if now.state == BackfillState.DONE:
                    break
            collected = build_collector(settings, adapters).run(grace_s=0, limit=100_000)
            rollout = {"wall_s": time.monotonic() - wall, "calls": calls.take()}
        finally:
            calls.remove()
        by_key = job_cpu(stack)
        baseline["cpu_s"], baseline["jobs"] = by_key.get(1, (0.0, 0))
        rollout["cpu_s"], rollout["jobs"] = by_key.get(KEY_ALGORITHM_VERSION, (0.0, 0))
        status = backfiller.status(backfill.id)

        # What it must leave: every asset on its new keys, nothing under an old key.
        where = Where(stack.bucket, "k", settings.derivatives_prefix, settings.policy_version, settings.keys)
        old_where = dataclasses.replace(where, keys=session.settings.keys)
        from mediajobs.bootstrap import active_recipes

        recipes = active_recipes()
        new_keys = {j.key for c in contents for j in plan_jobs(sha256_hex(c), "image", recipes, where)}
        old_keys = {j.key for c in contents for j in plan_jobs(sha256_hex(c), "image", recipes, old_where)}
        assets = stack.assets()
        off = [
            k
            for i in range(args.assets)
            if (view := assets.get(stack.bucket, f"originals/bench/{i:04d}.jpg")) is not None
            for k in [j.job_key for j in view.jobs]
            if k not in new_keys
        ]
        s3 = stack.client("s3")
        left = set()
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix="derivatives/"):
            left.update(item["Key"].split("/")[1] for item in page.get("Contents", ()))

    per = 1000 / args.assets
    base_usd = requests_usd(baseline["calls"], prices)
    roll_usd = requests_usd(rollout["calls"], prices)
    report = {
        "assets": args.assets,
        "photo": f"{args.width}x{args.height} JPEG",
        "backfill": {k: getattr(status.counts, k) for k in ("total", "enqueued", "reused", "done", "failed")}
        if status
        else None,
        "backfill_state": str(status.state) if status else None,
        "collected": dataclasses.asdict(collected) if dataclasses.is_dataclass(collected) else str(collected),
        "assets_off_new_keys": len(off),
        "old_prefixes_left": len(left & old_keys),
        "baseline": {
            "jobs_ended": baseline["jobs"],
            "cpu_s": round(baseline["cpu_s"], 2),
            "requests": sum(baseline["calls"].values()),
            "requests_usd": round(base_usd, 6),
        },
        "rollout": {
            "jobs_ended": rollout["jobs"],
            "cpu_s": round(rollout["cpu_s"], 2),
            "requests": sum(rollout["calls"].values()),
            "requests_usd": round(roll_usd, 6),
            "by_operation": dict(sorted(rollout["calls"].items())),
        },
        "per_1000_assets": {
            "cpu_s": round(rollout["cpu_s"] * per, 1),
            "requests": round(sum(rollout["calls"].values()) * per),
            "rekognition_images": round(rollout["calls"]["rekognition:DetectModerationLabels"] * per),
            "requests_usd": round(roll_usd * per, 4),
        },
        "ratio_to_baseline": {
            "cpu": round(rollout["cpu_s"] / baseline["cpu_s"], 3),
            "requests": round(sum(rollout["calls"].values()) / sum(baseline["calls"].values()), 3),
            "requests_usd": round(roll_usd / base_usd, 3) if base_usd else None,
        },
    }
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0 if report["assets_off_new_keys"] == 0 and report["old_prefixes_left"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
