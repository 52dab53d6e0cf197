"""An upload through the embedded AWS gets its placeholder: a committed job whose manifest has
no outputs and carries the values in its decisions, keyed like any other job.

The first two go through the queue and the real handler, and run once ``recipes/active.json``
lists the placeholder recipes; the last two process the upload with the production adapters
and the placeholder recipes given explicitly, so they run whatever is active."""

from __future__ import annotations

import base64
import json
import re
import uuid

import pytest

from mediajobs.bootstrap import active_recipes, build_service, load_recipe
from mediajobs.domain.jobs import ObjectRef
from mediajobs.domain.keys import job_key
from mediajobs.local.session import local_adapters
from mediajobs.service_layer.pipeline import Pipeline
from tests.conftest import media_file
from tests.fakes import planned_key

#: Every upload through the embedded session renders in the bounded render child or ffmpeg.
pytestmark = pytest.mark.subprocess


def committed(session, key: str, recipe: str):
    (result,) = session.collector.results[key]
    assert result.state == "done", (result.reason, result.detail)
    (job,) = [j for j in result.jobs if j.recipe == recipe]
    assert job.state == "done" and job.outputs == ()
    listed = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=f"derivatives/{job.job_key}/")
    assert [o["Key"].rsplit("/", 1)[-1] for o in listed["Contents"]] == ["manifest.json"]
    body = session.s3.get_object(Bucket=session.stack.bucket, Key=job.manifest_key)["Body"].read()
    return result, job, json.loads(body)


def active(media: str) -> list[str]:
    return [r.ref for r in active_recipes()[media]]


@pytest.mark.skipif(
    "image-placeholder@1" not in active("image"),
    reason="image-placeholder@1 is registered but not in recipes/active.json (held back: see its commit)",
)
def test_an_uploaded_photo_gets_an_image_placeholder_manifest_with_no_outputs(local_session):
    key = "originals/placeholder/rotated.jpg"
    local_session.upload(media_file("photos", "orientation-landscape-6.jpg"), key)
    local_session.run()
    result, job, manifest = committed(local_session, key, "image-placeholder@1")
    recipe = load_recipe("image-placeholder", 1)
    assert job.job_key == planned_key(result.sha256, recipe.id, local_session.stack.settings())
    assert manifest["recipe"] == {"id": "image-placeholder", "version": 1, "sha256": recipe.sha256}
    assert manifest["outputs"] == []
    decisions = manifest["decisions"]
    assert set(decisions) == {"placeholder", "thumbhash", "dominant_colour", "display_width_px", "display_height_px"}
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (1800, 1200)
    assert re.fullmatch(r"#[0-9a-f]{6}", decisions["dominant_colour"])
    assert 5 <= len(base64.b64decode(decisions["thumbhash"], validate=True)) <= 25
    assert any(j.recipe == "web-image@1" and j.state == "done" for j in result.jobs)


@pytest.mark.skipif(
    "video-placeholder@1" not in active("video"),
    reason="video-placeholder@1 is registered but not in recipes/active.json (held back: see its commit)",
)
def test_an_uploaded_video_gets_a_video_placeholder_manifest_from_its_display_oriented_frame(local_session):
    key = "originals/placeholder/rotated.mp4"
    local_session.upload(media_file("video", "video_rotation_90.mp4"), key)
    local_session.run()
    result, job, manifest = committed(local_session, key, "video-placeholder@1")
    assert job.job_key == planned_key(result.sha256, "video-placeholder", local_session.stack.settings(), media="video")
    decisions = manifest["decisions"]
    assert manifest["outputs"] == []
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (60, 100)
    assert decisions["frame_at_s"] >= 0
    assert any(j.recipe == "web-video@2" and j.state == "done" for j in result.jobs)


def placeholder_service(session) -> Pipeline:
    """The session's adapters (steps in the bounded render child, the embedded AWS) with the
    placeholder recipes after the web ones, whatever ``recipes/active.json`` lists."""
    recipes = {
        "image": [load_recipe("web-image", 1), load_recipe("image-placeholder", 1)],
        "video": [load_recipe("web-video", 2), load_recipe("video-placeholder", 1)],
    }
    return build_service(session.settings, adapters=local_adapters(session.stack, session.settings), recipes=recipes)


def uploaded(session, path, name: str) -> ObjectRef:
    """``path`` put under ``originals/``; its queued event removed (this test processes it)."""
    key = f"originals/placeholder/{uuid.uuid4().hex}-{name}"
    session.s3.put_object(Bucket=session.stack.bucket, Key=key, Body=path.read_bytes())
    while messages := session.sqs.receive_message(QueueUrl=session.stack.queue_url, MaxNumberOfMessages=10).get(
        "Messages", []
    ):
        for m in messages:
            session.sqs.delete_message(QueueUrl=session.stack.queue_url, ReceiptHandle=m["ReceiptHandle"])
    return ObjectRef(session.stack.bucket, key)


def stored_manifest(session, result, recipe: str) -> dict:
    assert result.state == "done", (result.reason, result.detail)
    (job,) = [j for j in result.jobs if j.recipe == recipe]
    assert job.state == "done" and job.outputs == ()
    listed = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=f"derivatives/{job.job_key}/")
    assert [o["Key"].rsplit("/", 1)[-1] for o in listed["Contents"]] == ["manifest.json"]
    recipe_id, version = recipe.split("@")
    policy = session.settings.policy_version  # no moderation recipe here: the bare key
    assert job.job_key == job_key(
        result.sha256, load_recipe(recipe_id, int(version)).sha256, policy, keys=session.settings.keys
    )
    body = session.s3.get_object(Bucket=session.stack.bucket, Key=job.manifest_key)["Body"].read()
    return json.loads(body)


def test_a_photo_uploaded_to_the_embedded_aws_commits_its_placeholder_manifest(local_session):
    service = placeholder_service(local_session)
    result = service.process(uploaded(local_session, media_file("photos", "orientation-landscape-6.jpg"), "p.jpg"))
    manifest = stored_manifest(local_session, result, "image-placeholder@1")
    assert manifest["outputs"] == [] and manifest["recipe"]["id"] == "image-placeholder"
    decisions = manifest["decisions"]
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (1800, 1200)
    assert re.fullmatch(r"#[0-9a-f]{6}", decisions["dominant_colour"])
    again = service.process(uploaded(local_session, media_file("photos", "orientation-landscape-6.jpg"), "q.jpg"))
    assert all(j.reused for j in again.jobs)  # the same bytes: both jobs found committed


def test_a_video_uploaded_to_the_embedded_aws_commits_its_placeholder_manifest(local_session):
    service = placeholder_service(local_session)
    result = service.process(uploaded(local_session, media_file("video", "video_rotation_90.mp4"), "v.mp4"))
    manifest = stored_manifest(local_session, result, "video-placeholder@1")
    decisions = manifest["decisions"]
    assert manifest["outputs"] == [] and (decisions["display_width_px"], decisions["display_height_px"]) == (60, 100)
