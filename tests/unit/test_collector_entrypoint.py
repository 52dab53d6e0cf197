"""The collection's entry point: the template's schedule sends what the worker function's
handler (``functions/worker/app.py``) sends to the collection, and the handler runs one
batch, logs its report and publishes its counts as metrics."""

from __future__ import annotations

import importlib.util
import json

from mediajobs.adapters.metrics import COLLECTION_METRICS
from mediajobs.bootstrap import Adapters, function_metrics, powertools_logger, steps, worker_function
from mediajobs.entrypoints import collector as entry
from mediajobs.local.runner import LocalLambdaContext
from mediajobs.local.template import load_template
from mediajobs.service_layer.collection import Collector
from mediajobs.settings import Settings
from tests.conftest import REPO
from tests.fakes import TEST_KEY_SECRET, FakeAssets, FakeClock, FakeLedger, FakeSources, FakeStore
from tests.unit.test_collection import BUCKET, NOW_S, World

SQS_BATCH = {"Records": [{"messageId": "m1", "eventSource": "aws:sqs", "body": "{}"}]}


def schedule_input() -> object:
    function = load_template(REPO / "template.yaml")["Resources"]["WorkerFunction"]["Properties"]
    return json.loads(function["Events"]["Collect"]["Properties"]["Input"])


def test_the_templates_schedule_sends_the_request_the_dispatcher_recognises():
    event = schedule_input()
    assert event == dict(entry.COLLECT_REQUEST)
    assert entry.is_collection_request(event)


def test_an_sqs_batch_or_anything_else_is_not_a_collection_request():
    for event in (SQS_BATCH, {}, {"mediajobs": "other"}, [], "collect", None):
        assert not entry.is_collection_request(event)


def collected_world() -> tuple[World, str]:
    """A world with one job released long ago: one collection collects it."""
    log: list = []
    world = World(log, FakeAssets(log), FakeLedger(log), FakeStore({}, log), FakeClock(NOW_S))
    job = "1" * 64
    world.job(job)
    world.release(job)
    return world, job


def test_the_functions_handler_sends_the_schedules_request_to_the_collection(tmp_path):
    spec = importlib.util.spec_from_file_location("worker_app", REPO / "functions" / "worker" / "app.py")
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)  # builds nothing: the handler is built at the first invocation
    assert app.__all__ == ["lambda_handler"]
    world, job = collected_world()
    settings = Settings(key_secret=TEST_KEY_SECRET, collect_grace_s=1_000, work_dir=str(tmp_path))
    adapters = Adapters(world.store, world.ledger, FakeSources([]), None, steps(settings), world.clock, world.assets)
    handler = worker_function(settings, adapters=adapters)
    counts = handler(schedule_input(), LocalLambdaContext(timeout_s=900))
    assert counts["collected"] == 1 and world.ledger.rows[job].state == "collected"


def test_the_handler_runs_a_batch_and_publishes_its_counts(capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")  # the tests' default is off
    world, job = collected_world()
    settings = Settings(key_secret=TEST_KEY_SECRET, collect_grace_s=1_000)
    collector = Collector(world.assets, world.ledger, world.store, settings, world.clock)
    handler = entry.make_handler(collector, logger=powertools_logger(), metrics=function_metrics())
    counts = handler(schedule_input(), LocalLambdaContext(timeout_s=900))
    assert (counts["collected"], counts["deleted_objects"]) == (1, 3)
    assert world.ledger.rows[job].state == "collected" and world.store.objects == {}
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    published = {
        k: sum(v) if isinstance(v, list) else v
        for doc in documents
        for k, v in doc.items()
        if k in COLLECTION_METRICS.values()
    }
    assert (published["Collected"], published["DerivativesDeleted"], published["Revived"]) == (1, 3, 0)
    assert world.ledger.rows[job].source_bucket == BUCKET
