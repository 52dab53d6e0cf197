"""What the deployed stack costs per 10,000 images, from measured CPU time, memory and requests.

Three measurements, one run:

* **CPU time and peak memory per image.** Each photo of ``tests/media/photos/`` is
  rendered with recipe ``web-image@1`` by ``benchmarks/images.py``'s worker in a fresh
  process; CPU is that child's user + system time (``RUSAGE_CHILDREN``), peak memory its
  ``VmHWM``. The baseline, measured in the same run, is a worker that only starts Python and
  imports the modules: its CPU time is subtracted (a warm Lambda does not pay it per image).
* **AWS requests per image.** The real handler runs against the embedded AWS on the same
  photos, as the event source mapping would drive it (batches of the template's BatchSize);
  every botocore call it makes is counted by service and operation, and the bytes it logs
  at ``INFO``.
* **Price.** ``PRICES`` below (us-east-1 list prices, arm64; check them against the AWS
  pricing pages for your region). Lambda's billed time per image is modelled as render CPU
  seconds divided by the vCPU share the function's memory buys (1,769 MB = 1 vCPU, Lambda
  developer guide "Memory and computing power"; at most 1 for the mostly single-threaded
  Pillow work) plus ``REQUEST_LATENCY_S`` per AWS request (an in-region figure; the
  embedded AWS's own latency says nothing about AWS's).

This machine is not a Graviton: its CPU seconds stand in for arm64 ones.

    .venv/bin/python benchmarks/cost.py
"""

from __future__ import annotations

import collections
import io
import json
import logging
import math
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.client

REPO_ROOT = Path(__file__).resolve().parents[1]
PHOTOS = REPO_ROOT / "tests" / "media" / "photos"
IMAGES_BENCHMARK = REPO_ROOT / "benchmarks" / "images.py"
IMAGES = 10_000
#: USD, us-east-1 list prices (arm64 Lambda, on-demand DynamoDB, S3 Standard, SQS standard).
PRICES = {
    "lambda_gb_s": 0.0000133334,
    "lambda_request": 0.20 / 1e6,
    "s3_put_list": 0.005 / 1000,
    "s3_get_head": 0.0004 / 1000,
    "dynamodb_write_unit": 0.625 / 1e6,
    "dynamodb_read_unit": 0.125 / 1e6,
    "sqs_request": 0.40 / 1e6,
    "logs_ingested_gb": 0.50,
    "s3_storage_gb_month": 0.023,
}
MEMORY_MB = (1024, 2048, 3008)
TEMPLATE_MEMORY_MB = 2048
REQUEST_LATENCY_S = 0.02
S3_WRITES = {"PutObject", "ListObjectsV2", "ListObjects", "CopyObject"}


def render(photo: Path | None) -> dict[str, Any]:
    """Render ``photo`` in a fresh process (``None``: imports only); its JSON plus ``cpu_s``."""
    argv = [sys.executable, str(IMAGES_BENCHMARK), "--_worker", "ours" if photo else "baseline"]
    if photo is not None:
        argv += ["--input", str(photo)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def count_requests(photos: list[Path]) -> tuple[collections.Counter[tuple[str, str]], int, int, float]:
    """Run the handler on ``photos`` against the embedded AWS: calls by (service, operation),
    log bytes, output bytes stored (manifests included) and the mean manifest size."""
    from mediajobs.bootstrap import powertools_logger
    from mediajobs.local.session import LocalSession

    calls: collections.Counter[tuple[str, str]] = collections.Counter()
    counting = [False]
    real = botocore.client.BaseClient._make_api_call

    def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if counting[0]:
            calls[(client.meta.service_model.service_name, operation)] += 1
        return real(client, operation, params)

    botocore.client.BaseClient._make_api_call = counted  # type: ignore[method-assign]
    logs = io.StringIO()
    try:
        with LocalSession(log_level="INFO") as session:
            for handler in logging.getLogger(powertools_logger().name).handlers:
                if isinstance(handler, logging.StreamHandler):
                    handler.setStream(logs)
            for photo in photos:
                session.upload(photo, f"originals/cost/{photo.name}")
            counting[0] = True
            session.run()
            counting[0] = False
            listed = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix="derivatives/")
            stored = sum(o["Size"] for o in listed.get("Contents", []))
            manifests = [o["Size"] for o in listed.get("Contents", []) if o["Key"].endswith("/manifest.json")]
            if session.dead_letters():
                raise RuntimeError("a photo was dead-lettered: the request counts would be wrong")
    finally:
        botocore.client.BaseClient._make_api_call = real  # type: ignore[method-assign]
    return calls, len(logs.getvalue().encode()), stored, statistics.mean(manifests)


def main() -> int:
    photos = sorted(p for p in PHOTOS.iterdir() if p.is_file()) if PHOTOS.is_dir() else []
    if not photos:
        print(f"no photos in {PHOTOS}", file=sys.stderr)
        return 1
    baseline = render(None)
    rows = [(photo, render(photo)) for photo in photos]
    print(f"baseline (start Python, import): {baseline['cpu_s']:.3f} s CPU, {baseline['peak_rss_mb']:.0f} MB peak")
    print(f"{'photo':32} {'CPU s':>7} {'- base':>7} {'x base':>7} {'peak MB':>8}")
    for photo, r in rows:
        net = max(r["cpu_s"] - baseline["cpu_s"], 0.0)
        ratio = r["cpu_s"] / baseline["cpu_s"]
        print(f"{photo.name:32} {r['cpu_s']:7.3f} {net:7.3f} {ratio:7.2f} {r['peak_rss_mb']:8.0f}")
    net_cpu = [max(r["cpu_s"] - baseline["cpu_s"], 0.0) for _, r in rows]
    cpu_s = statistics.mean(net_cpu)
    peak = max(r["peak_rss_mb"] for _, r in rows)
    print(f"mean render CPU per photo: {cpu_s:.3f} s; highest peak: {peak:.0f} MB\n")

    calls, log_bytes, stored_bytes, manifest_bytes = count_requests(photos)
    n = len(photos)
    per = {f"{svc}:{op}": count / n for (svc, op), count in sorted(calls.items())}
    print("AWS requests per photo (handler and event source mapping, embedded AWS):")
    for name, value in per.items():
        print(f"  {name:40} {value:6.2f}")
    requests_per_image = sum(per.values())
    print(f"  {'total':40} {requests_per_image:6.2f}")
    print(f"log bytes per photo: {log_bytes / n:.0f}; derivative bytes stored per photo: {stored_bytes / n:.0f}")
    print(f"manifest bytes (staged in the job row while it commits): {manifest_bytes:.0f}\n")

    s3_cost = sum(
        v * (PRICES["s3_put_list"] if name.split(":")[1] in S3_WRITES else PRICES["s3_get_head"])
        for name, v in per.items()
        if name.startswith("s3:")
    )
    # A write unit is 1 KB of the larger of the item before and after (DynamoDB developer
    # guide, "Read/write capacity mode"): rows are under 1 KB but while the staged manifest
    # is in them, which the staging update and the completing one both carry.
    ddb_writes = sum(v for name, v in per.items() if name.split(":")[1] in {"PutItem", "UpdateItem", "DeleteItem"})
    ddb_writes += sum(v for name, v in per.items() if name.endswith("BatchWriteItem"))
    ddb_writes += 2 * math.ceil(manifest_bytes / 1024)
    ddb_reads = sum(v for name, v in per.items() if name.split(":")[1] in {"GetItem", "BatchGetItem"})
    ddb_cost = ddb_writes * PRICES["dynamodb_write_unit"] + ddb_reads * PRICES["dynamodb_read_unit"]
    sqs_cost = sum(v for name, v in per.items() if name.startswith("sqs:")) * PRICES["sqs_request"]
    logs_cost = log_bytes / n / 1e9 * PRICES["logs_ingested_gb"]
    fixed = {"S3 requests": s3_cost, "DynamoDB": ddb_cost, "SQS": sqs_cost, "CloudWatch Logs": logs_cost}

    print(f"per {IMAGES:,} images (USD):")
    print(
        f"  {'MemorySize':>10} {'billed s/img':>12} {'Lambda':>8} "
        + " ".join(f"{k:>15}" for k in fixed)
        + f" {'total':>8}"
    )
    for memory_mb in MEMORY_MB:
        vcpu = min(memory_mb / 1769, 1.0)
        billed_s = cpu_s / vcpu + requests_per_image * REQUEST_LATENCY_S
        batch_size = 5
        lambda_cost = billed_s * memory_mb / 1024 * PRICES["lambda_gb_s"] + PRICES["lambda_request"] / batch_size
        total = lambda_cost + sum(fixed.values())
        marker = "  <- template.yaml" if memory_mb == TEMPLATE_MEMORY_MB else ""
        print(
            f"  {memory_mb:>10} {billed_s:>12.3f} {lambda_cost * IMAGES:>8.3f} "
            + " ".join(f"{v * IMAGES:>15.4f}" for v in fixed.values())
            + f" {total * IMAGES:>8.3f}{marker}"
        )
    month = stored_bytes / n * IMAGES / 1e9 * PRICES["s3_storage_gb_month"]
    print(f"storing their derivatives: {month:.4f} USD a month (S3 Standard)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
