"""The storm's end checks (:func:`~mediajobs.local.storm.checks.end_checks`) find what they
are for, each on its own: an asset behind S3's current version, an asset not ready, a
deleted original whose asset is not deleted, a missing manifest, a reference too many, a
prefix no asset uses -- and hold on a settled stack. On the embedded AWS, through the real
worker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from mediajobs.local.session import LocalSession
from mediajobs.local.simulate import end_checks
from tests.conftest import REPO

PHOTO = REPO / "tests" / "media" / "photos" / "canon-40d-small.jpg"
OTHER = REPO / "tests" / "media" / "photos" / "camera-gps-nikon.jpg"


@pytest.fixture
def session() -> Iterator[LocalSession]:
    """A stack of its own per test: the checks read the whole bucket and tables."""
    name = f"mediajobs-end-{uuid.uuid4().hex[:8]}"
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name=name) as session:
        yield session


def processed(session: LocalSession, *photos) -> list[str]:
    keys = [f"originals/end/{uuid.uuid4().hex}.jpg" for _ in photos]
    for photo, key in zip(photos, keys, strict=True):
        session.upload(photo, key)
    session.run()
    return keys


def failing(checks: dict[str, int]) -> dict[str, int]:
    return {name: count for name, count in checks.items() if count}


def test_a_settled_stack_holds_every_check_and_gives_its_jobs_end_states(session):
    keys = processed(session, PHOTO, OTHER)
    checks, states = end_checks(session.stack, set(keys))
    assert failing(checks) == {}
    assert states == {"done": 6}  # three recipes each: the moderation job and two renditions


def test_an_overwrite_not_processed_is_an_asset_not_current(session):
    keys = processed(session, PHOTO)
    session.stack.client("s3").put_object(Bucket=session.stack.bucket, Key=keys[0], Body=OTHER.read_bytes())
    assert failing(end_checks(session.stack, set(keys))[0]) == {"assets_not_current": 1}


def test_a_delete_not_processed_is_an_asset_not_deleted(session):
    keys = processed(session, PHOTO)
    session.stack.client("s3").delete_object(Bucket=session.stack.bucket, Key=keys[0])  # a delete marker
    # Its asset still references its three jobs, which no live key uses any more.
    assert failing(end_checks(session.stack, set(keys))[0]) == {
        "assets_not_deleted": 1,
        "count_mismatches": 3,
        "unreferenced_prefixes": 3,
    }


def test_an_upload_not_processed_is_an_asset_not_ready(session):
    keys = processed(session, PHOTO)
    unprocessed = f"originals/end/{uuid.uuid4().hex}.jpg"
    session.upload(OTHER, unprocessed)
    assert failing(end_checks(session.stack, {*keys, unprocessed})[0]) == {
        "assets_not_current": 1,  # no asset at all
        "assets_not_ready": 1,
    }


def test_a_missing_manifest_and_a_prefix_no_asset_uses_are_counted(session):
    keys = processed(session, PHOTO)
    stack = session.stack
    s3 = stack.client("s3")
    job_key = stack.assets().get(stack.bucket, keys[0]).jobs[0].job_key
    s3.delete_object(Bucket=stack.bucket, Key=f"derivatives/{job_key}/manifest.json")
    s3.put_object(Bucket=stack.bucket, Key=f"derivatives/{'f' * 64}/manifest.json", Body=b"{}")
    # The stray prefix has as many references as uses (none): no count mismatch.
    assert failing(end_checks(stack, set(keys))[0]) == {"missing_manifests": 1, "unreferenced_prefixes": 1}


def test_a_reference_no_live_asset_holds_is_a_count_mismatch(session):
    keys = processed(session, PHOTO)
    stack = session.stack
    view = stack.assets().get(stack.bucket, keys[0])
    stray = stack.asset_models().reference(f"job#{view.jobs[0].job_key}", "ref#someone-else")
    stray.bucket, stray.object_key = stack.bucket, "originals/gone.jpg"
    stray.save()
    assert failing(end_checks(stack, set(keys))[0]) == {"count_mismatches": 1}


def test_an_unversioned_bucket_serves_its_objects_under_no_version_id(session):
    """``HeadObject`` on an unversioned bucket gives no version id and the listing of
    versions gives ``"null"``: the end checks read it as none, as the asset has it (found by
    trying to break the bulk reads: every key counted ``assets_not_current``)."""
    from mediajobs.local.storm.checks import _served_versions

    s3 = session.stack.client("s3")
    s3.create_bucket(Bucket="unversioned")
    s3.put_object(Bucket="unversioned", Key="originals/a.jpg", Body=b"x")
    assert s3.head_object(Bucket="unversioned", Key="originals/a.jpg").get("VersionId") is None
    assert _served_versions(s3, "unversioned", "originals/") == {"originals/a.jpg": None}
