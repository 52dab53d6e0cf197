"""``mediajobs serve --env-vars`` writes every function's environment (issue 25), and each
function's handler, as ``sam local invoke <Function> -e events/<file> --env-vars env.json``
runs it (``functions/<name>/app.py``'s ``lambda_handler``), answers its sample event with
that file's environment against the embedded AWS: in this process, without Docker."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mediajobs.local.commands.serve import sam_env_vars
from mediajobs.local.embedded import EmbeddedAws, LocalStack
from mediajobs.local.function_events import FUNCTION_SAMPLES, SAMPLE_KEY, function_sample_text
from mediajobs.local.notifications import seen_events
from mediajobs.local.runner import LocalLambdaContext
from mediajobs.local.template import load_template
from tests.conftest import REPO, load_script, media_file

EVENTS = REPO / "events"
#: The function's folder under functions/, by logical id (its CodeUri).
CODE = {"WorkerFunction": "worker", "StatusFunction": "status", "DispatcherFunction": "dispatcher"}


def load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


class Functions:
    """The stack's functions as ``sam local invoke`` runs them, with the env-vars file."""

    def __init__(self, stack: LocalStack, env_file: Path, work_dir: Path) -> None:
        self.stack, self.env_file, self.work_dir = stack, env_file, work_dir

    def invoke(self, function: str, event: dict[str, Any], timeout_s: int = 900) -> Any:
        """Import ``functions/<function>/app.py`` afresh and call its handler with ``event``,
        the process's environment being that function's entry of the env-vars file."""
        env = json.loads(self.env_file.read_text())[function]
        with pytest.MonkeyPatch.context() as patch:
            for name, value in {**env, "WORK_DIR": str(self.work_dir)}.items():
                patch.setenv(name, value)
            app = load_script(f"mediajobs_sample_{CODE[function]}_app", REPO / "functions" / CODE[function] / "app.py")
            return app.lambda_handler(event, LocalLambdaContext(timeout_s=timeout_s))


@pytest.fixture(scope="module")
def functions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Functions]:
    """The embedded AWS under the names ``serve`` gives (the samples name them), its env-vars
    file as ``serve --env-vars`` writes it (the endpoint this process reaches), and
    ``object-created.json``'s photo uploaded and rendered by the worker function."""
    folder = tmp_path_factory.mktemp("function-events")
    with EmbeddedAws() as stack:
        env_file = folder / "env.json"
        env_file.write_text(json.dumps(sam_env_vars(stack, stack.endpoint_url), indent=2))
        work_dir = folder / "work"
        work_dir.mkdir()
        stack.client("s3").upload_file(
            str(media_file("photos", "orientation-landscape-1.jpg")), stack.bucket, SAMPLE_KEY
        )
        yield Functions(stack, env_file, work_dir)


def rendered(functions: Functions) -> None:
    response = functions.invoke("WorkerFunction", load("object-created.json"))
    assert response == {"batchItemFailures": []}


def test_every_function_sample_is_what_the_factory_writes():
    for name in FUNCTION_SAMPLES:
        assert (EVENTS / name).read_text(encoding="utf-8") == function_sample_text(name)


def test_serve_env_vars_writes_every_functions_environment_as_the_template_declares_it():
    template = load_template(REPO / "template.yaml")
    declared = {
        logical_id: resource["Properties"]["Environment"]["Variables"]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function" and "Environment" in resource.get("Properties", {})
    }
    with EmbeddedAws() as stack:
        written = sam_env_vars(stack, "http://host.docker.internal:5000")
    assert sorted(written) == sorted(declared) == [
        "DispatcherFunction", "StatusFunction", "VideoWorkerFunction", "WorkerFunction",
    ]  # fmt: skip
    # The video function is the worker's code behind the video lane: the same environment.
    assert declared["VideoWorkerFunction"] == declared["WorkerFunction"]
    # No video lane locally: a split video's parts go to the jobs queue `serve --worker` polls.
    assert written["WorkerFunction"]["VIDEO_QUEUE_ARN"] == written["VideoWorkerFunction"]["VIDEO_QUEUE_ARN"] == ""
    for logical_id, variables in declared.items():
        env = written[logical_id]
        assert set(variables) <= set(env), logical_id
        assert env["AWS_ENDPOINT_URL"] == "http://host.docker.internal:5000"
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["AWS_REGION"]) == (
            stack.credentials["aws_access_key_id"],
            stack.credentials["aws_secret_access_key"],
            "us-east-1",
        )
        assert env["POWERTOOLS_SERVICE_NAME"] == "mediajobs"  # the Globals too
        assert not any(stack.endpoint_url in value for value in env.values()), logical_id
    assert (written["StatusFunction"]["ASSETS_TABLE_NAME"], written["StatusFunction"]["MEDIA_BUCKET"]) == (
        stack.assets_table_name,
        stack.bucket,
    )
    assert written["WorkerFunction"]["JOBS_TABLE_NAME"] == stack.table_name
    dispatcher = written["DispatcherFunction"]
    assert (dispatcher["OUTBOX_TABLE_NAME"], dispatcher["NOTIFICATION_BUS_NAME"]) == (
        stack.outbox_table_name,
        stack.notification_bus_name,
    )
    assert dispatcher["NOTIFICATION_FAILURES_QUEUE_URL"].startswith("http://host.docker.internal:5000/")
    assert (dispatcher["WEBHOOK_URL"], dispatcher["WEBHOOK_SECRET_ARN"]) == ("", "")  # no webhook by default


@pytest.mark.subprocess  # the worker renders in its bounded child
def test_status_function_answers_the_sample_request_from_the_asset(functions):
    rendered(functions)
    response = functions.invoke("StatusFunction", load("status-request.json"))
    assert response["statusCode"] == 200
    body = json.loads(response["body"])
    assert (body["key"], body["bucket"], body["state"]) == (SAMPLE_KEY, functions.stack.bucket, "ready")

    unknown = load("status-request.json")
    unknown["rawQueryString"] = "key=originals%2Fevents%2Fnothing.jpg"
    unknown["queryStringParameters"] = {"key": "originals/events/nothing.jpg"}
    response = functions.invoke("StatusFunction", unknown)
    assert response["statusCode"] == 404 and json.loads(response["body"])["key"] == "originals/events/nothing.jpg"


@pytest.mark.subprocess
def test_dispatcher_function_answers_the_sample_record_and_delivers_an_outbox_item(functions):
    rendered(functions)
    seen_events(functions.stack)  # what earlier tests put on the bus
    # The sample's id, as the event names the version (no version id): nothing to deliver.
    assert functions.invoke("DispatcherFunction", load("outbox-insert.json")) == {"batchItemFailures": []}
    # The same record naming the item the render put in the outbox: delivered to the bus.
    items = functions.stack.client("dynamodb").scan(TableName=functions.stack.outbox_table_name)["Items"]
    (ready,) = [i["id"]["S"] for i in items if i["key"]["S"] == SAMPLE_KEY and i["type"]["S"] == "Asset Ready"]
    event = load("outbox-insert.json")
    event["Records"][0]["dynamodb"]["Keys"]["id"]["S"] = ready
    assert functions.invoke("DispatcherFunction", event) == {"batchItemFailures": []}
    told = [e for e in seen_events(functions.stack) if e["detail"]["id"] == ready]
    assert [e["detail-type"] for e in told] == ["Asset Ready"]
    marked = functions.stack.client("dynamodb").get_item(
        TableName=functions.stack.outbox_table_name, Key={"id": {"S": ready}}
    )["Item"]
    assert "eventbridge" in json.dumps(marked["deliveries"]).lower()


@pytest.mark.subprocess
def test_worker_function_runs_the_collection_on_the_schedules_event(functions):
    rendered(functions)
    report = functions.invoke("WorkerFunction", load("collect-schedule.json"))
    assert {"looked", "collected", "errors", "deleted_objects"} <= set(report)
    assert all(isinstance(count, int) for count in report.values())
    assert report["errors"] == 0 and report["collected"] == 0  # the photo is referenced, the grace is a day


@pytest.mark.subprocess
def test_mediajobs_invoke_runs_a_function_as_sam_local_invoke_does(functions, tmp_path):
    """``mediajobs invoke StatusFunction -e events/status-request.json --env-vars env.json``
    in a fresh process: the file as ``serve`` writes it for Docker (``host.docker.internal``),
    which here is this machine."""
    rendered(functions)
    env = json.loads(functions.env_file.read_text())
    port = functions.stack.endpoint_url.rsplit(":", 1)[1]
    docker = {
        name: {k: v.replace(functions.stack.endpoint_url, f"http://host.docker.internal:{port}") for k, v in e.items()}
        for name, e in env.items()
    }
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps(docker))
    argv = ["invoke", "StatusFunction", "-e", str(EVENTS / "status-request.json"), "--env-vars", str(env_file)]
    done = subprocess.run(
        [sys.executable, "-m", "mediajobs.local.cli", *argv], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["statusCode"] == 200 and json.loads(answer["body"])["state"] == "ready"

    bad = subprocess.run(
        [sys.executable, "-m", "mediajobs.local.cli", "invoke", "NoFunction", "-e", "x", "--env-vars", "y"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "StatusFunction" in bad.stderr


def test_the_env_vars_name_the_port_the_server_listens_on():
    """``serve --port 0`` lets the system pick the port: the file names that port, not 0."""
    from mediajobs.local.commands.serve import container_endpoint

    with EmbeddedAws(port=0) as stack:
        port = stack.endpoint_url.rsplit(":", 1)[1]
        assert port != "0"
        assert container_endpoint(stack, "host.docker.internal") == f"http://host.docker.internal:{port}"
        env = sam_env_vars(stack, container_endpoint(stack, "host.docker.internal"))
        assert {e["AWS_ENDPOINT_URL"] for e in env.values()} == {f"http://host.docker.internal:{port}"}
