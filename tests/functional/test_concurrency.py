"""Duplicates collapse into one job: concurrent deliveries of one event, and identical
bytes under another key."""

from __future__ import annotations

from mediajobs.bootstrap import active_recipes, build_service
from mediajobs.domain.errors import JobBusy
from mediajobs.domain.jobs import ObjectRef
from mediajobs.local.session import Collector
from mediajobs.settings import Settings
from tests.functional.test_worker import unique_png
from tests.functional.together import run_together

#: Jobs per image: one per active image recipe (web-image@1, image-placeholder@1).
IMAGE_JOBS = len(active_recipes()["image"])


def test_same_event_delivered_ten_times_concurrently_renders_once(local_session):
    data = unique_png(1200, 900)
    bucket = local_session.stack.bucket
    local_session.s3.put_object(Bucket=bucket, Key="originals/storm/a.png", Body=data)
    ref = ObjectRef(bucket, "originals/storm/a.png", None, len(data))
    collector = Collector()
    # One pipeline (own clients) per thread, as ten Lambda execution environments would have.
    pipelines = [build_service(Settings.from_env(), observer=collector) for _ in range(10)]

    def deliver(n: int) -> str:
        try:
            result = pipelines[n].process(ref)
            return "reused" if result.jobs[0].reused else "rendered"
        except JobBusy:
            return "busy"

    outcomes = run_together(deliver)
    assert len(collector.renders) == IMAGE_JOBS  # one render per job of the content
    assert outcomes.count("rendered") == 1 and len(outcomes) == 10
    assert set(outcomes) <= {"rendered", "busy", "reused"}
    # The busy ones come back later (SQS redelivery) and find the job done.
    for _ in range(outcomes.count("busy")):
        assert pipelines[0].process(ref).jobs[0].reused is True
    assert len(collector.renders) == IMAGE_JOBS


def test_identical_bytes_under_another_key_reuse_the_derivatives(local_session):
    data = unique_png()
    bucket = local_session.stack.bucket
    collector = Collector()
    pipeline = build_service(Settings.from_env(), observer=collector)
    local_session.s3.put_object(Bucket=bucket, Key="originals/reuse/first.png", Body=data)
    local_session.s3.put_object(Bucket=bucket, Key="originals/reuse/second-name.png", Body=data)
    first = pipeline.process(ObjectRef(bucket, "originals/reuse/first.png", None, len(data)))
    second = pipeline.process(ObjectRef(bucket, "originals/reuse/second-name.png", None, len(data)))
    assert len(collector.renders) == IMAGE_JOBS
    assert [j.reused for j in second.jobs] == [True] * IMAGE_JOBS and not any(j.reused for j in first.jobs)
    assert [(j.job_key, j.outputs) for j in second.jobs] == [(j.job_key, j.outputs) for j in first.jobs]


def test_queue_run_with_duplicated_and_redelivered_events(local_session):
    """Through SQS and the real handler: every event sent three times, one render per content."""
    local_session.run()  # deliver anything earlier tests left queued
    before = len(local_session.collector.renders)
    bodies_before = len(local_session.esm.stats.bodies)
    contents = [unique_png() for _ in range(3)]
    for i, data in enumerate(contents):
        local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=f"originals/dup/{i}.png", Body=data)
    local_session.run()
    bodies = local_session.esm.stats.bodies[bodies_before:]
    assert len(bodies) == 3
    local_session.redeliver(bodies + bodies)
    local_session.run()
    assert len(local_session.collector.renders) - before == 3 * IMAGE_JOBS
    assert local_session.dead_letters() == 0
