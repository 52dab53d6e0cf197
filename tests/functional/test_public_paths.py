"""What the CDN serves names no uploader, and nobody finds it from the file
(docs/security.md, "What is public").

CloudFront serves ``derivatives/*`` to anyone holding a URL: here, every object under a
set's prefix, read from the embedded S3 as the distribution reads it."""

from __future__ import annotations

import json

from mediajobs.bootstrap import active_recipes
from mediajobs.domain.assets import status_document
from mediajobs.domain.keys import UNKEYED, job_key, sha256_hex
from mediajobs.domain.plan import Where, plan_jobs
from tests.functional.test_worker import unique_png

ALICE = "originals/users/alice/2026/12/07/0f3a/alice-private-name.png"
BOB = "originals/users/bob/2026/12/07/77c1/holiday.png"


def public_objects(session, job_key_: str) -> dict[str, bytes]:
    """Every object under ``derivatives/<job key>/``: what the CDN serves of the set."""
    s3, bucket = session.s3, session.stack.bucket
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"derivatives/{job_key_}/").get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_a_set_two_uploaders_share_names_neither_of_them_nor_the_original(local_session):
    """Alice and Bob upload the same bytes: Bob's status points at the set Alice's upload
    made. Nothing under that set's public prefix -- its manifest included -- names Alice's
    key, user id, upload id or file name, Bob's, the bucket, a version id, or the content's
    SHA-256; each of them still gets everything about their own asset from the status."""
    data = unique_png()
    for key in (ALICE, BOB):
        local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=key, Body=data)
        local_session.run()
    assets = local_session.stack.assets()
    alice, bob = (assets.get(local_session.stack.bucket, key) for key in (ALICE, BOB))
    assert alice.state == bob.state == "ready" and [j.job_key for j in alice.jobs] == [j.job_key for j in bob.jobs]
    versions = [
        local_session.s3.head_object(Bucket=local_session.stack.bucket, Key=k)["VersionId"] for k in (ALICE, BOB)
    ]
    words = [
        "alice", "bob", "users/", "0f3a", "77c1", "holiday", "originals/",
        local_session.stack.bucket, sha256_hex(data), *versions,
    ]  # fmt: skip
    served = {k: v for job in bob.jobs for k, v in public_objects(local_session, job.job_key).items()}
    assert any(k.endswith("/manifest.json") for k in served) and any(k.endswith("/thumb.webp") for k in served)
    for key, body in served.items():
        found = [w for w in words if w.encode() in body or w in key]
        assert found == [], (key, found)
    for key, body in served.items():
        if key.endswith("manifest.json"):
            assert "source" not in json.loads(body) and "inputs" not in json.loads(body)
    # The provenance is in the job's row, private: the first upload of the content.
    web = next(j for j in bob.jobs if j.recipe.startswith("web-image@"))
    assert local_session.stack.ledger().get(web.job_key).provenance["source"]["key"] == ALICE
    # Bob's status is all about Bob's asset.
    document = status_document(bob)
    assert document["key"] == BOB and document["sha256"] == sha256_hex(data)
    assert "alice" not in json.dumps(document)


def test_a_path_computed_from_the_bytes_and_the_public_recipe_finds_nothing(local_session):
    """Anyone holding the photo has its SHA-256, and the recipes are public: every key that
    computes -- the key of algorithm 1, planned as a worker plans it -- names nothing in the
    bucket, while the photo's sets are there under the stack's keyed paths."""
    data = unique_png()
    key = "originals/users/carol/portrait.png"
    local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=key, Body=data)
    local_session.run()
    asset = local_session.stack.assets().get(local_session.stack.bucket, key)
    assert asset.state == "ready" and all(public_objects(local_session, j.job_key) for j in asset.jobs)
    settings = local_session.stack.settings()
    where = Where(local_session.stack.bucket, key, settings.derivatives_prefix, settings.policy_version, UNKEYED)
    guessed = {job.key for job in plan_jobs(sha256_hex(data), "image", active_recipes(), where)}
    guessed |= {
        job_key(sha256_hex(data), r.sha256, p, keys=UNKEYED) for r in active_recipes()["image"] for p in ("1", "none")
    }
    assert guessed.isdisjoint(j.job_key for j in asset.jobs)
    for guess in guessed:
        assert public_objects(local_session, guess) == {}, guess
