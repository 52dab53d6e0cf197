"""A worker stopped at each step boundary, then another delivery: the end state is one
manifest, the job done, nothing lost, and the takeover counted.

The crash is a ``BaseException`` raised from the observer's hook: like a process dying,
it escapes every ``except Exception`` (no release, no acknowledgement). Time is moved on
by the second worker's clock (past the first one's lease) and by making the crashed
batch visible again (its visibility timeout "ran out"), never by sleeping.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from mediajobs.bootstrap import build_service, default_adapters, load_recipe
from mediajobs.domain.keys import job_key, sha256_hex
from mediajobs.entrypoints import worker
from mediajobs.local.runner import EventSourceMapping
from mediajobs.local.session import Collector
from mediajobs.local.simulate import CRASH_POINTS
from mediajobs.settings import Settings
from tests.functional.test_worker import unique_png


class Crash(BaseException):
    """The worker process dies here."""


class CrashAt(Collector):
    def __init__(self, point: str) -> None:
        super().__init__()
        self.point = point

    def step(self, point: str, job_key: str) -> None:
        if point == self.point:
            raise Crash(point)


def esm_for(session, service, before_ack=None) -> EventSourceMapping:
    stack = session.stack
    handler = worker.make_handler(service)
    return EventSourceMapping(
        session.sqs, stack.queue_url, stack.queue_arn, handler, batch_size=1, before_ack=before_ack
    )


def derivative_keys(session, key: str) -> list[str]:
    listed = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=f"derivatives/{key}/")
    return sorted(o["Key"].rsplit("/", 1)[1] for o in listed.get("Contents", []))


#: The crash points of one job: web-image@1 alone (each other active recipe is a job of its
#: own, with the same boundaries).
ONE_JOB = {"image": [load_recipe("web-image", 1)]}


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_worker_stopped_at_each_step_boundary_loses_nothing(local_session, point):
    local_session.run()  # nothing of an earlier test in flight
    data = unique_png(320, 240)
    local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=f"originals/crash/{point}.png", Body=data)
    settings = Settings.from_env()
    key = job_key(sha256_hex(data), ONE_JOB["image"][0].sha256, settings.policy_version, keys=settings.keys)

    # Worker A dies at the step boundary.
    first = CrashAt(point)
    crashing = build_service(
        settings,
        adapters=default_adapters(settings, clients=local_session.stack.clients()),
        observer=first,
        recipes=ONE_JOB,
    )

    def die_before_ack(messages):
        raise Crash("before_ack")

    a = esm_for(local_session, crashing, before_ack=die_before_ack if point == "before_ack" else None)
    with pytest.raises(Crash):
        a.poll_once()
    crashed_batch = a.current_batch
    assert len(crashed_batch) == 1

    # Its message comes back when its visibility timeout ends; worker B's clock is past A's lease.
    a.expire(crashed_batch)
    second = Collector()
    skew = settings.lease_s + 60
    adapters = dataclasses.replace(
        default_adapters(settings, clients=local_session.stack.clients()), clock=lambda: time.time() + skew
    )
    later = build_service(settings, adapters=adapters, observer=second, recipes=ONE_JOB)
    b = esm_for(local_session, later)
    assert b.poll_once() == 1

    row = local_session.stack.job_model().get(key, consistent_read=True)
    took_over = point in ("claimed", "output_stored", "manifest_stored")
    assert row.state == "done"
    assert derivative_keys(local_session, key) == ["card.webp", "full.avif", "manifest.json", "thumb.webp"]
    assert int(row.attempts) == (2 if took_over else 1)
    assert [c.took_over for c in second.claims] == ([True] if took_over else [])
    # A takeover renders again, unless the lost holder had committed the manifest.
    assert len(second.renders) == (1 if point in ("claimed", "output_stored") else 0)
    assert b.in_flight() == 0 and local_session.dead_letters() == 0
    result = second.results[f"originals/crash/{point}.png"][-1]
    assert result.state == "done" and result.jobs[0].manifest_key == f"derivatives/{key}/manifest.json"
    manifest = json.loads(
        local_session.s3.get_object(Bucket=local_session.stack.bucket, Key=f"derivatives/{key}/manifest.json")[
            "Body"
        ].read()
    )
    assert [o["key"] for o in manifest["outputs"]] == [o["key"] for o in row.outputs]
