"""A new policy's backfill regenerates albums' promos, on the embedded AWS with the real
worker: once the backfill's assets serve the renditions made under the new policy, every
album whose promo was made under the old one is requested again -- before the backfill is
``done`` -- and ``mediajobs decisions affected`` tells the promos with the assets."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from mediajobs.bootstrap import build_backfiller, promos_over
from mediajobs.domain.backfill import BackfillState
from mediajobs.local.commands.decisions import affected_report
from mediajobs.local.decisions import DecisionLogReader
from mediajobs.local.session import LocalSession, local_adapters
from tests.conftest import REPO, media_file

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def session():
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-promo-bf") as s:
        yield s


def test_a_new_policys_backfill_regenerates_the_promos_made_under_the_old_one(session):
    stack = session.stack
    prefix = f"originals/event-{uuid.uuid4().hex[:8]}/"
    for i, name in enumerate(("orientation-landscape-1.jpg", "orientation-landscape-2.jpg")):
        session.s3.put_object(Bucket=stack.bucket, Key=f"{prefix}{i}.jpg", Body=media_file("photos", name).read_bytes())
    session.run()
    old_settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket)
    old = promos_over(old_settings, stack.clients(), stack.assets())
    made = old.request(prefix)
    session.run()
    assert old.status(prefix).state == "done" and made.record.policy_version == "1"
    reader = DecisionLogReader(stack.client("s3"), stack.decisions_bucket)
    report = affected_report(reader, "1", {})
    assert [r["recipe"] for r in report["promos"]] == ["promo"]  # the promo, decided under policy 1
    assert {r["recipe"] for r in report["assets"]} == {"moderation-image"}

    # The next deployment moderates by another policy ("none" here: no second policy file is
    # needed to roll one out): its backfill runs on the jobs queue the session's worker polls.
    new_settings = dataclasses.replace(
        old_settings, policy_version="none", backfill_queue_arn=stack.queue_arn, backfill_rate_per_s=1e9
    )
    over = dataclasses.replace(new_settings, worker_timeout_s=0.001)  # the old deployment's invocations are over
    backfiller = build_backfiller(over, local_adapters(stack, new_settings))
    started, _ = backfiller.start()
    for _ in range(8):
        backfiller.tick(budget_s=30)
        session.run()
        if backfiller.status(started.id).state == BackfillState.DONE:
            break
    assert backfiller.status(started.id).state == BackfillState.DONE
    session.run()  # the regenerated promo's request
    new = promos_over(new_settings, stack.clients(), stack.assets())
    regenerated = new.status(prefix)
    assert regenerated.state == "done" and regenerated.job_key != made.job_key
    assert regenerated.record.policy_version == "none"
    views = [stack.assets().get(stack.bucket, f"{prefix}{i}.jpg") for i in range(2)]
    cards = [next(j.job_key for j in v.jobs if j.recipe == "web-image@1") for v in views]
    assert [f.rendition_job_key for f in regenerated.record.frames] == cards  # the new policy's renditions
    assert [f.decision_id for f in regenerated.record.frames] == [None, None]  # none moderates nothing
    assert new.stale() == []
    # The old promo is released to the collection: no album references it any more.
    assert stack.assets().referrers(made.job_key) == []
