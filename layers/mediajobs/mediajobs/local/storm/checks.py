"""What must hold once the storm is over, read from the bucket and the tables
(:func:`end_checks`)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import Any

from mediajobs.adapters.assets import ASSET_SK, asset_of_image
from mediajobs.domain.assets import AssetState, AssetView
from mediajobs.local.embedded import LocalStack


def end_checks(
    stack: LocalStack, keys: set[str], *, videos_split: bool = False, rejected: frozenset[str] = frozenset()
) -> tuple[dict[str, int], dict[str, int]]:
    """What must hold once the storm is over, counted (0 each when it holds), and the end
    state of every live asset's jobs:

    * ``assets_not_current``: live keys whose asset's version is not S3's current version;
    * ``assets_not_ready``: live keys whose asset is not ``ready``;
    * ``assets_not_deleted``: deleted keys whose asset is not ``deleted``;
    * ``missing_manifests``: jobs a live asset references whose manifest is not there;
    * ``count_mismatches``: jobs whose references differ from the live assets using them;
    * ``unreferenced_prefixes``: prefixes under ``derivatives/`` no live asset references
      (the last collection ran with no grace: a split video's parts, released by its join,
      are gone too);
    * ``videos_not_split``: live videos' jobs done without a split of 3 segments or more
      (counted only when ``videos_split`` is asked for: the storm's ``--video-rate``);
    * ``rejected_not_rejected``: live keys of a content the policy refuses (``rejected``:
      their SHA-256s) whose asset is not ``rejected`` (those are not counted not ready);
    * ``rejected_rendered``: objects under the prefix of a job of such an asset (it renders
      nothing, not even a manifest);
    * ``decisions_missing``: claims the ledger counts (each job row's ``attempts``) without
      their record in the decision log (``process``, ``takeover``, or a review's commit).
    """
    s3 = stack.client("s3")
    checks = dict.fromkeys(
        (
            "assets_not_current",
            "assets_not_ready",
            "assets_not_deleted",
            "missing_manifests",
            "count_mismatches",
            "unreferenced_prefixes",
            "rejected_not_rejected",
            "rejected_rendered",
            "decisions_missing",
        ),
        0,
    )
    # Read in bulk, once everything is settled: every asset in one scan, what S3 serves in
    # one listing, the jobs in batches (a request per key took 16 s of a 400-upload storm).
    views = asset_views(stack)
    served = _served_versions(s3, stack.bucket, os.path.commonprefix(sorted(keys)) if keys else "")
    used: Counter[str] = Counter()
    refused_jobs: set[str] = set()
    for key in sorted(keys):
        view = views.get(key)
        if key not in served:
            checks["assets_not_deleted"] += view is None or view.state != AssetState.DELETED
            continue
        if view is None or view.version.version_id != served[key]:
            checks["assets_not_current"] += 1
        if view is not None and view.sha256 in rejected:
            checks["rejected_not_rejected"] += view.state != AssetState.REJECTED
            refused_jobs.update(entry.job_key for entry in view.jobs)
        elif view is None or view.state != AssetState.READY:
            checks["assets_not_ready"] += 1
        for entry in view.jobs if view is not None else ():
            used[entry.job_key] += 1
    rows = stack.ledger().find(list(used))
    end_states: dict[str, int] = defaultdict(int)
    for job_key, uses in used.items():
        row = rows.get(job_key)
        end_states["no_job" if row is None else str(row.failure_reason or row.state)] += uses
    if videos_split:
        videos = [r for r in rows.values() if r.recipe_id == "web-video"]
        checks["videos_not_split"] = sum(1 for r in videos if r.split is None or len(r.split.segments) < 3)
    prefixes: set[str] = set()
    manifests: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=stack.bucket, Prefix="derivatives/"):
        for item in page.get("Contents", ()):
            prefixes.add(item["Key"].split("/")[1])
            if item["Key"].endswith("/manifest.json"):
                manifests.add(item["Key"])
    checks["missing_manifests"] = sum(
        1 for job_key in used if job_key not in refused_jobs and f"derivatives/{job_key}/manifest.json" not in manifests
    )
    checks["rejected_rendered"] = len(prefixes & refused_jobs)
    checks["decisions_missing"] = decisions_missing(stack)
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


def asset_views(stack: LocalStack) -> dict[str, AssetView]:
    """Every asset of the stack's bucket, by key: one strongly consistent scan of the assets
    table (its asset items only)."""
    model = stack.asset_models().asset
    views: dict[str, AssetView] = {}
    pages = (
        stack.client("dynamodb")
        .get_paginator("scan")
        .paginate(
            TableName=stack.assets_table_name,
            FilterExpression="sk = :asset",
            ExpressionAttributeValues={":asset": {"S": ASSET_SK}},
            ConsistentRead=True,
        )
    )
    for page in pages:
        for item in page["Items"]:
            view = asset_of_image(model, item)
            if view is not None and view.bucket == stack.bucket:
                views[view.key] = view
    return views


def _served_versions(s3: Any, bucket: str, prefix: str) -> dict[str, str | None]:
    """The keys under ``prefix`` that S3 serves now (its latest version is not a delete
    marker), with that version's id: what ``HeadObject`` without a version answers, from
    one listing of the versions. An unversioned bucket lists ``"null"`` where
    ``HeadObject`` gives no id: ``None`` then, as the asset has it."""
    served: dict[str, str | None] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for version in page.get("Versions", ()):
            if version["IsLatest"]:
                served[version["Key"]] = None if version["VersionId"] == "null" else version["VersionId"]
    return served


def decisions_missing(stack: LocalStack) -> int:
    """The claims the ledger counts without their decision record: for each job row, its
    ``attempts`` less the records of its claims that ran it (``process``, ``takeover``, and a
    review's ``accepted`` or ``rejected``), when more (0 without a decision log)."""
    from mediajobs.local.decisions import DecisionLogReader

    if not stack.decisions_bucket:
        return 0
    reader = DecisionLogReader(stack.client("s3"), stack.decisions_bucket)
    counted = reader.run_sql(
        "SELECT job, count(*) FROM decisions WHERE action IN ('process', 'takeover') "
        "OR (action IN ('accepted', 'rejected') AND reviewer IS NOT NULL) GROUP BY job"
    )
    starts = {str(job): int(n) for job, n in counted.rows}
    missing = 0
    for row in stack.job_model().scan(attributes_to_get=["job_key", "attempts"]):
        missing += max(0, int(row.attempts or 0) - starts.get(row.job_key[:16], 0))
    return missing
