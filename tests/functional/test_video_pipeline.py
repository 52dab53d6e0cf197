"""Videos through the embedded AWS and the real handler: committed once with their manifest,
reused on redelivery, and a playlist never makes the worker open another file."""

from __future__ import annotations

import json

from tests.conftest import case_file, media_file


def _manifest(session, job) -> dict:
    body = session.s3.get_object(Bucket=session.stack.bucket, Key=job.manifest_key)["Body"].read()
    return json.loads(body)


def test_a_portrait_video_is_committed_with_its_renditions_poster_and_manifest(local_session):
    session = local_session
    key = session.upload(case_file("V01_portrait_rotation.mp4"), "originals/video/portrait.mp4")
    session.run()
    (result,) = session.collector.results[key]
    assert (result.state, result.media) == ("done", "video")
    moderation, job, placeholder = result.jobs
    assert (job.recipe, placeholder.recipe, placeholder.outputs) == ("web-video@2", "video-placeholder@1", ())
    assert _manifest(session, moderation)["decisions"]["moderation"]["outcome"] == "accepted"
    decisions = _manifest(session, placeholder)["decisions"]
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (720, 1280)  # upright, as the poster
    outputs = {o.name: (o.width, o.height, o.content_type) for o in job.outputs}
    assert outputs == {
        "720p": (406, 720, "video/mp4"),
        "360p": (202, 360, "video/mp4"),
        "poster": (720, 1280, "image/jpeg"),
    }
    manifest = _manifest(session, job)
    assert [o["name"] for o in manifest["outputs"]] == ["720p", "360p", "poster"]
    decisions = manifest["decisions"]
    assert (decisions["rotation"], decisions["display_width"], decisions["display_height"]) == (90, 720, 1280)
    assert decisions["skipped"] == [] and decisions["audio"] is True
    listed = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=f"derivatives/{job.job_key}/")
    assert sorted(o["Key"].rsplit("/", 1)[1] for o in listed["Contents"]) == [
        "360p.mp4", "720p.mp4", "manifest.json", "poster.jpg",
    ]  # fmt: skip


def test_v10_a_3000_fps_clip_is_committed_at_60_fps_within_its_budget(local_session):
    """CASES.md V10: 6,000 frames of 16x16 in 2 s: the budget counts the frames, and the
    active recipe caps the rendition at 60 fps; done in one delivery, nothing retried."""
    session = local_session
    key = session.upload(case_file("V10_high_frame_rate_16x16.mp4"), "originals/video/fast.mp4")
    session.run()
    (result,) = session.collector.results[key]
    assert (result.state, result.media) == ("done", "video")
    _, job, placeholder = result.jobs
    assert (job.recipe, placeholder.recipe, placeholder.state) == ("web-video@2", "video-placeholder@1", "done")
    outputs = {o.name: (o.width, o.height, o.content_type) for o in job.outputs}
    assert outputs == {"source": (16, 16, "video/mp4"), "poster": (16, 16, "image/jpeg")}
    decisions = _manifest(session, job)["decisions"]
    assert (decisions["source_frames"], decisions["fps_cap"], decisions["skipped"]) == (6000, 60, ["720p", "360p"])
    assert session.dead_letters() == 0


def test_a_redelivered_video_is_answered_from_the_ledger(local_session):
    session = local_session
    key = session.upload(media_file("video", "white.mp4"), "originals/video/white.mp4")
    session.run()
    renders = len(session.collector.renders)
    session.redeliver(list(session.esm.stats.bodies[-1:]))
    session.run()
    assert len(session.collector.renders) == renders
    first, second = session.collector.results[key]
    assert second.jobs[0].reused and second.jobs[0].manifest_key == first.jobs[0].manifest_key
    assert second.bytes_read == 0


def test_v09_canary_first_then_the_playlists(local_session):
    """CASES.md V09: the canary segment is uploaded first in the same warm environment, then
    the playlists; they end unsupported_container and nothing of theirs is written."""
    session = local_session
    keys = {}
    for name in ("V09_canary_segment.ts", "V09_hls_playlist.mp4", "V09_hls_ssrf.mp4"):
        keys[name] = session.upload(case_file(name), f"originals/v09/{name}")
        session.run()
    for name in ("V09_hls_playlist.mp4", "V09_hls_ssrf.mp4"):
        (result,) = session.collector.results[keys[name]]
        assert (result.state, result.reason) == ("permanent_failure", "unsupported_container")
        assert [(job.recipe, job.reason) for job in result.jobs] == [
            ("moderation-video@1", "unsupported_container"),  # it reads the video first
            ("web-video@2", "unsupported_container"),
            ("video-placeholder@1", "unsupported_container"),
        ]
        for job in result.jobs:
            listed = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=f"derivatives/{job.job_key}/")
            assert listed.get("KeyCount", 0) == 0
    assert session.dead_letters() == 0
