"""Backfills on the embedded AWS: the DynamoDB adapters (``DynamoBackfills``, the assets
scan, ``upgrade``/``record_next``) under the real backfiller, the status route
``GET /backfills/<id>``, and the template's lane (queue, mapping, dead-letter queue, alarm,
IAM) as its contract."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from mediajobs.bootstrap import Adapters, build_backfiller
from mediajobs.domain.assets import AssetJob, AssetJobState, AssetState, AssetVersion, sequencer_order
from mediajobs.domain.backfill import BackfillState
from mediajobs.domain.jobs import OutputRecord
from mediajobs.entrypoints.status import make_status_app
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from mediajobs.local.function_events import function_url_event
from mediajobs.local.template import load_template
from mediajobs.settings import Settings
from tests.conftest import REPO
from tests.fakes import FakeQueue, TextStep, text_recipes

BUCKET = "media"
NEW = text_recipes(("a", "A", {}), ("b", "B", {}))
TEMPLATE = load_template(REPO / "template.yaml")
RESOURCES = TEMPLATE["Resources"]


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-backfill-store") as stack:
        yield stack


def seeded(stack: LocalStack, n: int, contents: int) -> list[str]:
    """``n`` ready assets on the old set (``a@1`` only), sharing ``contents`` contents, written
    through the real adapter; their keys."""
    from mediajobs.domain.plan import Where, plan_jobs

    assets = stack.assets(writer=True)
    keys = []
    for i in range(n):
        key = f"originals/{i:03d}.jpg"
        sha = f"{i % contents:064x}"
        [job] = [
            j
            for j in plan_jobs(
                sha,
                "image",
                NEW,
                Where(BUCKET, key, "derivatives/", stack.settings().policy_version, stack.settings().keys),
            )
            if j.recipe.id == "a"
        ]
        version = AssetVersion(f"v{i}", f"e{i}", 10, sequencer_order(f"{i + 1:x}"))
        assets.make_current(BUCKET, key, version, sha256=sha, media="image", jobs=[AssetJob("a@1", job.key)], now_s=1)
        out = OutputRecord("out", f"derivatives/{job.key}/out.txt", "txt", 0, 0, 1, "0" * 64, "text/plain")
        done = AssetJob(
            "a@1", job.key, AssetJobState.DONE, manifest_key=f"derivatives/{job.key}/manifest.json", outputs=(out,)
        )
        assets.record(BUCKET, key, version.sequencer, [done], now_s=2)
        keys.append(key)
    return keys


def test_the_scan_counts_each_content_once_and_the_status_route_answers_the_ledger(stack):
    keys = seeded(stack, 24, 6)
    queue = FakeQueue()
    settings = dataclasses.replace(
        stack.settings(), backfill_queue_arn="arn:lane", backfill_segments=3, backfill_rate_per_s=1e9
    )
    adapters = Adapters(
        store=None, ledger=stack.ledger(), sources=stack.sources(), queue=queue, steps={TextStep.name: TextStep()},  # type: ignore[arg-type]
        assets=stack.assets(writer=True), backfills=stack.backfills(),
    )  # fmt: skip
    backfiller = build_backfiller(settings, adapters, recipes=NEW)
    started, created = backfiller.start()
    assert created and build_backfiller(settings, adapters, recipes=NEW).start() == (started, False)
    [after] = backfiller.tick(budget_s=60)
    assert after.first_pass_over and after.counts.assets_scanned == 24
    assert (after.counts.total, after.counts.enqueued, after.counts.reused) == (6, 6, 0)
    sent = [json.loads(body)["job_key"] for arn, body, _, _ in queue.resent]
    assert sorted(set(sent)) == sorted(sent) and len(sent) == 6  # once per content, on the lane
    assert {arn for arn, *_ in queue.resent} == {"arn:lane"}
    view = stack.assets().get(BUCKET, keys[0])
    assert view.state == AssetState.READY and [j.recipe for j in view.next] == ["a@1", "b@1"]
    # The status route answers what the store holds.
    app = make_status_app(stack.assets(), Settings(media_bucket=BUCKET), backfills=stack.backfills())
    for path in (f"/backfills/{started.id}", "/backfills/latest"):
        response = app.resolve(function_url_event("", path=path), None)
        body = json.loads(response["body"])
        assert response["statusCode"] == 200 and body["id"] == started.id
        assert {k: body[k] for k in ("total", "enqueued", "done", "remaining", "state")} == {
            "total": 6, "enqueued": 6, "done": 0, "remaining": 6, "state": "running",
        }  # fmt: skip
    assert app.resolve(function_url_event("", path="/backfills/nope"), None)["statusCode"] == 400
    assert app.resolve(function_url_event("", path="/backfills/bf-000000000000-1"), None)["statusCode"] == 404
    # Pause, resume and cancel move the stored state; cancelled is final.
    assert backfiller.move(started.id, BackfillState.PAUSED).state == BackfillState.PAUSED
    assert backfiller.move(started.id, BackfillState.CANCELLED).state == BackfillState.CANCELLED
    assert backfiller.move(started.id, BackfillState.RUNNING) is None


def test_the_lane_is_a_queue_of_its_own_with_its_mapping_dead_letter_queue_alarm_and_iam():
    lane = RESOURCES["BackfillQueue"]["Properties"]
    assert lane["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["BackfillDeadLetterQueue", "Arn"]},
        "maxReceiveCount": 5,
    }
    assert lane["VisibilityTimeout"] == RESOURCES["JobsQueue"]["Properties"]["VisibilityTimeout"]
    events = RESOURCES["WorkerFunction"]["Properties"]["Events"]
    mapping = events["BackfillLane"]["Properties"]
    assert mapping["Queue"] == {"Fn::GetAtt": ["BackfillQueue", "Arn"]}
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "BackfillMaximumConcurrency"}}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert events["Jobs"]["Properties"]["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "MaxConcurrency"}}
    params = TEMPLATE["Parameters"]
    assert (params["BackfillMaximumConcurrency"]["Default"], params["BackfillMaximumConcurrency"]["MinValue"]) == (2, 2)
    assert params["RetireGraceSeconds"]["Default"] == 604800
    assert json.loads(events["Backfill"]["Properties"]["Input"]) == {"mediajobs": "backfill"}
    alarm = RESOURCES["BackfillDeadLetterQueueAlarm"]["Properties"]
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": ["BackfillDeadLetterQueue", "QueueName"]}}
    ]
    env = RESOURCES["WorkerFunction"]["Properties"]["Environment"]["Variables"]
    assert env["BACKFILL_QUEUE_ARN"] == {"Fn::GetAtt": ["BackfillQueue", "Arn"]}
    assert env["RETIRE_GRACE_SECONDS"] == {"Ref": "RetireGraceSeconds"}
    statements = RESOURCES["WorkerRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    [grant] = [st for st in statements if st.get("Sid") == "BackfillQueue"]
    assert grant["Resource"] == {"Fn::GetAtt": ["BackfillQueue", "Arn"]} and "sqs:SendMessage" in grant["Action"]
    [assets] = [st for st in statements if st.get("Sid") == "Assets"]
    assert "dynamodb:Scan" in assets["Action"]


def test_the_backfill_schedules_handler_starts_the_backfill_and_publishes_its_metrics(stack, capsys, monkeypatch):
    from mediajobs.adapters.metrics import BACKFILL_METRICS
    from mediajobs.bootstrap import function_metrics
    from mediajobs.entrypoints import backfill as entry
    from tests.functional.test_template_contract import emitted_metrics

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    settings = dataclasses.replace(stack.settings(), backfill_queue_arn="arn:lane", policy_version="metrics-test")
    adapters = Adapters(
        store=None, ledger=stack.ledger(), sources=stack.sources(), queue=FakeQueue(), steps={},  # type: ignore[arg-type]
        assets=stack.assets(writer=True), backfills=stack.backfills(),
    )  # fmt: skip
    # A logger of its own: Powertools' "mediajobs" logger, made here with capsys's stdout as its
    # stream, would be the package's loggers' parent for the tests after this one.
    from aws_lambda_powertools import Logger

    logger = Logger(service="mediajobs-backfill-schedule-test")
    backfiller = build_backfiller(settings, adapters, recipes=NEW)
    handler = entry.make_handler(backfiller, logger=logger, metrics=function_metrics())
    capsys.readouterr()
    assert entry.is_backfill_request({"mediajobs": "backfill"}) and not entry.is_backfill_request({"Records": []})
    from mediajobs.local.runner import LocalLambdaContext

    answered = handler({"mediajobs": "backfill"}, LocalLambdaContext())
    [doc] = [d for d in answered if d["policy_version"] == "metrics-test"]
    assert doc["state"] in ("running", "done")
    assert set(BACKFILL_METRICS.values()) <= emitted_metrics(capsys)
