"""What must hold once the storm is over, read from the bucket and the tables
(:func:`end_checks`)."""

from __future__ import annotations

from collections import Counter, defaultdict

from mediajobs.domain.assets import AssetState
from mediajobs.local.embedded import LocalStack


def end_checks(stack: LocalStack, keys: set[str]) -> tuple[dict[str, int], dict[str, int]]:
    """What must hold once the storm is over, counted (0 each when it holds), and the end
    state of every live asset's jobs:

    * ``assets_not_current``: live keys whose asset's version is not S3's current version;
    * ``assets_not_ready``: live keys whose asset is not ``ready``;
    * ``assets_not_deleted``: deleted keys whose asset is not ``deleted``;
    * ``missing_manifests``: jobs a live asset references whose manifest is not there;
    * ``count_mismatches``: jobs whose references differ from the live assets using them;
    * ``unreferenced_prefixes``: prefixes under ``derivatives/`` no live asset references
      (the last collection ran with no grace).
    """
    s3 = stack.client("s3")
    assets = stack.assets()
    checks = dict.fromkeys(
        (
            "assets_not_current",
            "assets_not_ready",
            "assets_not_deleted",
            "missing_manifests",
            "count_mismatches",
            "unreferenced_prefixes",
        ),
        0,
    )
    end_states: dict[str, int] = defaultdict(int)
    used: Counter[str] = Counter()
    ledger = stack.ledger()
    for key in sorted(keys):
        view = assets.get(stack.bucket, key)
        try:
            head = s3.head_object(Bucket=stack.bucket, Key=key)
        except s3.exceptions.ClientError:
            checks["assets_not_deleted"] += view is None or view.state != AssetState.DELETED
            continue
        if view is None or view.version.version_id != head.get("VersionId"):
            checks["assets_not_current"] += 1
        if view is None or view.state != AssetState.READY:
            checks["assets_not_ready"] += 1
        for entry in view.jobs if view is not None else ():
            used[entry.job_key] += 1
            row = ledger.get(entry.job_key)
            end_states["no_job" if row is None else str(row.failure_reason or row.state)] += 1
    for job_key in used:
        try:
            s3.head_object(Bucket=stack.bucket, Key=f"derivatives/{job_key}/manifest.json")
        except s3.exceptions.ClientError:
            checks["missing_manifests"] += 1
    prefixes: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix="derivatives/"):
        prefixes.update(item["Key"].split("/")[1] for item in page.get("Contents", ()))
    # Every reference row, live asset or not, counted per job in one scan (a Query per job
    # is a scan of the whole table in moto: 4,000 of them took over ten minutes).
    references: Counter[str] = Counter()
    for page in (
        stack.client("dynamodb")
        .get_paginator("scan")
        .paginate(
            TableName=stack.assets_table_name,
            FilterExpression="begins_with(pk, :job) AND begins_with(sk, :ref)",
            ExpressionAttributeValues={":job": {"S": "job#"}, ":ref": {"S": "ref#"}},
            ProjectionExpression="pk",
            ConsistentRead=True,
        )
    ):
        references.update(item["pk"]["S"].removeprefix("job#") for item in page["Items"])
    for job_key in prefixes | set(used) | set(references):
        if references[job_key] != used[job_key]:
            checks["count_mismatches"] += 1
    checks["unreferenced_prefixes"] = len(prefixes - set(used))
    return checks, dict(sorted(end_states.items()))
