"""The collection's entry point: the template's schedule sends what the dispatcher of
``functions/worker/app.py`` recognises, and the handler runs one batch, logs its report
and publishes its counts as metrics."""

from __future__ import annotations

import importlib.util
import json

from mediajobs.entrypoints import collector as entry
from mediajobs.local.runner import LocalLambdaContext
from mediajobs.local.template import load_template
from mediajobs.service_layer.collection import Collector
from mediajobs.settings import Settings
from tests.conftest import REPO
from tests.fakes import FakeAssets, FakeClock, FakeLedger, FakeStore
from tests.unit.test_collection import BUCKET, NOW_S, World

SQS_BATCH = {"Records": [{"messageId": "m1", "eventSource": "aws:sqs", "body": "{}"}]}


def schedule_input() -> object:
    function = load_template(REPO / "template.yaml")["Resources"]["WorkerFunction"]["Properties"]
    [collect] = [e for e in function["Events"].values() if e["Type"] == "ScheduleV2"]
    return json.loads(collect["Properties"]["Input"])


def test_the_templates_schedule_sends_the_request_the_dispatcher_recognises():
    event = schedule_input()
    assert event == dict(entry.COLLECT_REQUEST)
    assert entry.is_collection_request(event)


def test_an_sqs_batch_or_anything_else_is_not_a_collection_request():
    for event in (SQS_BATCH, {}, {"mediajobs": "other"}, [], "collect", None):
        assert not entry.is_collection_request(event)


def test_the_functions_handler_imports_the_collectors_recogniser():
    spec = importlib.util.spec_from_file_location("worker_app", REPO / "functions" / "worker" / "app.py")
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    assert app.__all__ == ["lambda_handler"]
    assert app.collector.is_collection_request is entry.is_collection_request


def test_the_handler_runs_a_batch_and_publishes_its_counts(capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")  # the tests' default is off
    log: list = []
    world = World(log, FakeAssets(log), FakeLedger(log), FakeStore({}, log), FakeClock(NOW_S))
    job = "1" * 64
    world.job(job)
    world.release(job)
    settings = Settings(collect_grace_s=1_000)
    handler = entry.make_handler(Collector(world.assets, world.ledger, world.store, settings, world.clock))
    counts = handler(schedule_input(), LocalLambdaContext(timeout_s=900))
    assert (counts["collected"], counts["deleted_objects"]) == (1, 3)
    assert world.ledger.rows[job].state == "collected" and world.store.objects == {}
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    published = {
        k: sum(v) if isinstance(v, list) else v
        for doc in documents
        for k, v in doc.items()
        if k in entry.METRICS.values()
    }
    assert (published["Collected"], published["DerivativesDeleted"], published["Revived"]) == (1, 3, 0)
    assert world.ledger.rows[job].source_bucket == BUCKET
