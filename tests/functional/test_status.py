"""The status function (``GET /assets?key=...``) answered through the function URL's event
shape (payload format 2.0, as AWS's "Invoking Lambda function URLs" gives it, with the
``AWS_IAM`` caller in ``requestContext.authorizer.iam``), over :class:`tests.fakes.FakeAssets`
(the Assets port's reference semantics); its calls against the embedded AWS are checked
against ``StatusRole`` at the end of the module."""

from __future__ import annotations

import fnmatch
import json
import os
import time
import urllib.parse
from typing import Any

import pytest

from mediajobs.domain.assets import AssetJob, AssetJobState, AssetVersion, sequencer_order
from mediajobs.domain.jobs import OutputRecord
from mediajobs.entrypoints.status import answer, key_of, make_status_app
from mediajobs.local.function_events import function_url_event
from mediajobs.local.notifications import new_webhook_secret
from mediajobs.local.receiver import WebhookReceiver
from mediajobs.local.template import load_template
from mediajobs.settings import Settings
from tests.conftest import REPO
from tests.fakes import FakeAssets, job_of

BUCKET = "media-bucket"
SETTINGS = Settings(media_bucket=BUCKET)
JOB_IMAGE, JOB_PLACEHOLDER = "a" * 64, "b" * 64
PLACEHOLDER = {
    "placeholder": "thumbhash",
    "thumbhash": "1QcSHQRnh493V4dIh4eXh1h4kJUI",
    "dominant_colour": "#7f6a55",
    "display_width_px": 512,
    "display_height_px": 512,
}


def get(assets: FakeAssets, key: str | None, **kwargs: Any) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Resolve a GET of ``key`` (quoted as an SDK signing with SigV4 sends it) through the app."""
    raw = "" if key is None else "key=" + urllib.parse.quote(key, safe="")
    response = make_status_app(assets, SETTINGS).resolve(function_url_event(raw, **kwargs), None)
    return response["statusCode"], json.loads(response["body"]), response["headers"]


def version(sequencer: str = "0055AED6DCD90281E5") -> AssetVersion:
    return AssetVersion(
        "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", "d41d8cd98f00b204e9800998ecf8427e", 1234, sequencer_order(sequencer)
    )


def jobs(*states: tuple[AssetJobState, dict[str, Any]]) -> list[AssetJob]:
    recipes = (("web-image@1", JOB_IMAGE), ("image-placeholder@1", JOB_PLACEHOLDER))
    return [
        AssetJob(recipe, key, state, **extra) for (recipe, key), (state, extra) in zip(recipes, states, strict=True)
    ]


def uploaded(key: str = "originals/users/42/avatar.jpg") -> tuple[FakeAssets, str, str]:
    """An asset whose version is current with its two jobs pending; returns (assets, key, sequencer)."""
    assets = FakeAssets()
    v = version()
    pending = jobs((AssetJobState.PENDING, {}), (AssetJobState.PENDING, {}))
    assets.make_current(BUCKET, key, v, sha256="c" * 64, media="image", jobs=pending, now_s=100)
    return assets, key, v.sequencer


OUTPUTS = (
    OutputRecord("thumb", f"derivatives/{JOB_IMAGE}/thumb.webp", "webp", 320, 240, 9123, "d" * 64, "image/webp"),
    OutputRecord("large", f"derivatives/{JOB_IMAGE}/large.avif", "avif", 1600, 1200, 81234, "e" * 64, "image/avif"),
)


def test_a_ready_asset_answers_its_version_outputs_and_placeholder():
    assets, key, seq = uploaded()
    done = jobs(
        (AssetJobState.DONE, {"manifest_key": f"derivatives/{JOB_IMAGE}/manifest.json", "outputs": OUTPUTS}),
        (AssetJobState.DONE, {"manifest_key": f"derivatives/{JOB_PLACEHOLDER}/manifest.json"}),
    )
    assets.record(BUCKET, key, seq, done, now_s=130, placeholder=PLACEHOLDER)
    status, body, headers = get(assets, key)
    assert status == 200
    assert headers["Content-Type"] == "application/json" and headers["Cache-Control"] == "no-store"
    assert body["state"] == "ready" and body["key"] == key and body["bucket"] == BUCKET
    assert body["version"] == {
        "version_id": "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
        "etag": "d41d8cd98f00b204e9800998ecf8427e",
        "size_bytes": 1234,
        "sequencer": "55AED6DCD90281E5",
        "checksum_sha256": False,  # no full-object checksum: the worker hashed what it read
    }
    assert body["sha256"] == "c" * 64 and body["media"] == "image" and body["updated_at_s"] == 130
    assert body["placeholder"] == PLACEHOLDER
    image = body["recipes"]["web-image@1"]
    assert image["state"] == "done" and image["reason"] is None and image["job_key"] == JOB_IMAGE
    assert image["manifest_key"] == f"derivatives/{JOB_IMAGE}/manifest.json"
    assert image["outputs"] == [
        {"key": f"derivatives/{JOB_IMAGE}/thumb.webp", "format": "webp", "width": 320, "height": 240, "bytes": 9123},
        {"key": f"derivatives/{JOB_IMAGE}/large.avif", "format": "avif", "width": 1600, "height": 1200, "bytes": 81234},
    ]
    assert body["recipes"]["image-placeholder@1"]["outputs"] == []


def test_a_processing_asset_answers_the_progress_of_its_job():
    assets, key, seq = uploaded()
    assets.record(BUCKET, key, seq, jobs((AssetJobState.PROCESSING, {}), (AssetJobState.PENDING, {})), now_s=110)
    assets.progress(BUCKET, key, seq, JOB_IMAGE, 0.4, now_s=115)
    status, body, _ = get(assets, key)
    assert status == 200 and body["state"] == "processing" and body["reason"] is None
    assert body["recipes"]["web-image@1"]["state"] == "processing"
    assert body["recipes"]["web-image@1"]["progress"] == 0.4
    assert body["recipes"]["image-placeholder@1"] == {
        "job_key": JOB_PLACEHOLDER, "state": "pending", "reason": None, "progress": None,
        "manifest_key": None, "serving": True, "outputs": [],
    }  # fmt: skip


def test_a_failed_asset_answers_its_reason():
    assets, key, seq = uploaded()
    failed = {"reason": "too_many_pixels", "detail": "60000000 pixels > 50000000"}
    assets.record(BUCKET, key, seq, jobs((AssetJobState.FAILED, failed), (AssetJobState.DONE, {})), now_s=120)
    status, body, _ = get(assets, key)
    assert status == 200 and body["state"] == "failed"
    assert (body["reason"], body["detail"]) == ("too_many_pixels", "60000000 pixels > 50000000")
    assert body["recipes"]["web-image@1"]["reason"] == "too_many_pixels"


def test_an_original_refused_before_any_job_answers_failed_with_its_reason():
    assets = FakeAssets()
    key = "originals/empty.jpg"
    v = version()
    assets.make_current(BUCKET, key, v, sha256=None, media=None, jobs=None, now_s=100)
    assets.record(BUCKET, key, v.sequencer, [], now_s=101, failure=("empty_file", ""))
    status, body, _ = get(assets, key)
    assert (status, body["state"], body["reason"], body["recipes"]) == (200, "failed", "empty_file", {})


def test_a_deleted_asset_answers_deleted():
    assets, key, _ = uploaded()
    assets.delete(BUCKET, key, version("0055AED6DCD90281F0"), now_s=200)
    status, body, _ = get(assets, key)
    assert status == 200 and body["state"] == "deleted" and body["recipes"] == {}
    assert body["version"]["sequencer"] == "55AED6DCD90281F0"


def test_an_unknown_key_is_404_with_a_message():
    status, body, headers = get(FakeAssets(), "originals/never/uploaded.jpg")
    assert status == 404 and headers["Content-Type"] == "application/json"
    assert body == {"message": "no asset for this key", "key": "originals/never/uploaded.jpg"}


class NoReads(FakeAssets):
    def get(self, bucket, key):
        raise AssertionError("the table is read for a key that cannot be an original")


@pytest.mark.parametrize(
    "raw",
    [
        "key=" + urllib.parse.quote("derivatives/" + "a" * 64 + "/thumb.webp", safe=""),
        "key=" + urllib.parse.quote("users/42/avatar.jpg", safe=""),
        "key=originals%2F",  # the prefix itself
        "key=originals%2Fphotos%2F",  # a folder marker: no asset
        "key=" + urllib.parse.quote("originals/" + "x" * 1015, safe=""),  # 1,025 bytes
        "key=originals%2Fa.jpg&key=originals%2Fb.jpg",  # two keys
        "key=",
        "",  # no key
        "name=originals%2Fa.jpg",
    ],
)
def test_a_missing_repeated_or_outside_key_is_400_without_reading_the_table(raw):
    response = make_status_app(NoReads(), SETTINGS).resolve(function_url_event(raw), None)
    body = json.loads(response["body"])
    assert response["statusCode"] == 400 and body["message"]


def test_the_longest_key_s3_allows_is_read():
    key = "originals/" + "é" * 507  # 10 + 1,014 bytes
    assert len(key.encode()) == 1024
    assert get(FakeAssets(), key)[0] == 404


@pytest.mark.parametrize(
    "key",
    [
        "originals/users/42/My Photo (1).jpg",
        "originals/a+b=c&d,e.jpg",  # '+', '&', '=' and ',' quoted by the signer
        "originals/фото/日本語 ü.png",
        "originals/100%/real.jpg",
    ],
)
def test_a_url_encoded_key_names_its_asset(key):
    assets, _, _ = uploaded(key)
    status, body, _ = get(assets, key)
    assert (status, body["key"]) == (200, key)


def test_a_space_sent_as_plus_is_a_space():
    assets, key, _ = uploaded("originals/My Photo.jpg")
    response = make_status_app(assets, SETTINGS).resolve(function_url_event("key=originals/My+Photo.jpg"), None)
    assert json.loads(response["body"])["key"] == key


def test_the_key_comes_from_the_raw_query_string_not_the_comma_joined_parameters():
    assert key_of("key=originals%2Fa%2Cb.jpg") == ["originals/a,b.jpg"]
    assert key_of("key=originals%2Fa.jpg&key=b") == ["originals/a.jpg", "b"]
    assert key_of("other=1") == []


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/assets"), ("DELETE", "/assets"), ("GET", "/"), ("GET", "/jobs")]
)
def test_other_methods_and_paths_get_powertools_404(method, path):
    response = make_status_app(NoReads(), SETTINGS).resolve(
        function_url_event("key=originals%2Fa.jpg", method=method, path=path), None
    )
    assert response["statusCode"] == 404


def test_the_app_needs_the_stacks_bucket():
    with pytest.raises(ValueError, match="MEDIA_BUCKET"):
        make_status_app(FakeAssets(), Settings())


def test_answer_reads_the_stacks_bucket_only_for_a_checked_key():
    seen: list[str] = []
    assert answer(["originals/a.jpg"], lambda k: seen.append(k), "originals/")[0] == 404
    assert answer(["other/a.jpg"], lambda k: seen.append(k), "originals/")[0] == 400
    assert seen == ["originals/a.jpg"]


# The template's status function and its role.

TEMPLATE = load_template(REPO / "template.yaml")
RESOURCES = TEMPLATE["Resources"]


def test_the_status_function_reads_the_stacks_bucket_and_assets_table():
    function = RESOURCES["StatusFunction"]["Properties"]
    env = function["Environment"]["Variables"]
    assert env["MEDIA_BUCKET"] == {"Ref": "MediaBucket"}
    assert env["ASSETS_TABLE_NAME"] == {"Ref": "AssetsTable"}
    assert function["Handler"] == "app.lambda_handler" and function["CodeUri"] == "functions/status"
    app = (REPO / "functions" / "status" / "app.py").read_text()
    assert app.count("from mediajobs.bootstrap import status_function") == 1
    from mediajobs.settings import _ENV_NAMES

    assert set(env) <= set(_ENV_NAMES.values())  # every variable is a setting it reads


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


STATUS_STATEMENTS = [
    st for p in RESOURCES["StatusRole"]["Properties"]["Policies"] for st in p["PolicyDocument"]["Statement"]
]


def allowed_by_status_role(action: str, resource: str, table_arn: str, log_group: str = "log-group") -> bool:
    def arn(value: Any) -> str:
        name = value["Fn::GetAtt"][0]
        return {"AssetsTable": table_arn, "StatusLogGroup": log_group}[name]

    return any(
        st["Effect"] == "Allow"
        and action in _as_list(st["Action"])
        and any(fnmatch.fnmatchcase(resource, arn(r)) for r in _as_list(st["Resource"]))
        for st in STATUS_STATEMENTS
    )


def test_every_call_of_the_status_handler_is_allowed_by_its_role(local_session, monkeypatch):
    """Each AWS call the deployed handler (``status_function()``, building its default adapter
    from the environment the template gives it, on the embedded AWS) makes for a known
    key, an unknown key and a refused key is recorded at botocore and checked against
    StatusRole: GetItem on the assets table, nothing else."""
    import botocore.client

    adapters = pytest.importorskip("mediajobs.adapters.assets", reason="the DynamoDB assets adapter")
    from mediajobs.bootstrap import status_function
    from mediajobs.local.runner import LocalLambdaContext

    stack = local_session.stack
    # The function's environment as the template sets it (the stack's exported already).
    monkeypatch.setenv("MEDIA_BUCKET", stack.bucket)
    monkeypatch.setenv("ASSETS_TABLE_NAME", stack.assets_table_name)
    key = "originals/least-privilege/a b.jpg"
    pending = jobs((AssetJobState.PENDING, {}), (AssetJobState.PENDING, {}))
    writer = stack.assets(writer=True)
    assert isinstance(writer, adapters.DynamoAssets)
    writer.make_current(stack.bucket, key, version(), sha256="c" * 64, media="image", jobs=pending, now_s=100)

    calls: list[tuple[str, str]] = []
    real = botocore.client.BaseClient._make_api_call

    def recording(client, operation, params):
        service = client.meta.service_model.service_name
        calls.append((f"{service}:{operation}", str(params.get("TableName", "?"))))
        return real(client, operation, params)

    handler = status_function()  # as functions/status/app.py: built at the first request
    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    try:
        answers = [
            handler(function_url_event("key=" + urllib.parse.quote(k, safe="")), LocalLambdaContext(timeout_s=10))[
                "statusCode"
            ]
            for k in (key, "originals/least-privilege/unknown.jpg", "elsewhere/x.jpg")
        ]
    finally:
        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", real)
    assert answers == [200, 404, 400]
    table_arn = f"arn:aws:dynamodb:{stack.region}:123456789012:table/{stack.assets_table_name}"
    assert calls and all(table == stack.assets_table_name for _, table in calls)
    assert {action for action, _ in calls} == {"dynamodb:GetItem"}
    assert all(allowed_by_status_role(action, table_arn, table_arn) for action, _ in calls)


# The CLI's status and delete, against a served stack (the module's embedded AWS, reached
# by its endpoint as `mediajobs status --endpoint` reaches a running `mediajobs serve`).


def test_the_served_stack_names_what_the_embedded_aws_created(local_session):
    from mediajobs.local.commands.served import served_stack

    stack, served = local_session.stack, served_stack(local_session.stack.endpoint_url)
    for name in ("bucket", "queue_url", "queue_arn", "dlq_url", "events_dlq_url", "table_name", "assets_table_name"):
        assert getattr(served, name) == getattr(stack, name), name
    assert served.sources_table_name == stack.sources_table_name
    assert (served.batch_size, served.timeout_s) == (stack.batch_size, stack.timeout_s)
    assert served.function_env == stack.function_env
    settings = served.settings()
    assert (settings.endpoint_url, settings.assets_table_name) == (stack.endpoint_url, stack.assets_table_name)


def test_the_served_stack_says_when_nothing_answers():
    from mediajobs.local.cli import InternalError
    from mediajobs.local.commands.served import served_stack

    with pytest.raises(InternalError, match="mediajobs serve"):
        served_stack("http://127.0.0.1:9")  # the discard port: nothing listens


def _cli(argv: list[str]) -> tuple[Any, Any]:
    from mediajobs.local.cli import build_parser

    parser = build_parser()
    return parser.parse_args(argv), parser


def test_status_json_prints_exactly_the_status_document(local_session, capsys):
    from mediajobs.domain.assets import status_document
    from mediajobs.local.cli import cmd_status

    bucket = local_session.stack.bucket
    assets = FakeAssets()
    key = "originals/cli/My Photo.jpg"
    assets.make_current(bucket, key, version(), sha256="c" * 64, media="image", jobs=jobs(
        (AssetJobState.DONE, {"outputs": OUTPUTS, "manifest_key": f"derivatives/{JOB_IMAGE}/manifest.json"}),
        (AssetJobState.PENDING, {}),
    ), now_s=5)  # fmt: skip
    args, parser = _cli(["status", key, "--json", "--endpoint", local_session.stack.endpoint_url])
    assert cmd_status(args, parser, lambda stack: assets) == 0
    assert json.loads(capsys.readouterr().out) == status_document(assets.get(bucket, key))

    args, parser = _cli(["status", key, "--endpoint", local_session.stack.endpoint_url])
    assert cmd_status(args, parser, lambda stack: assets) == 0
    out = capsys.readouterr().out
    assert f"{key}  pending" in out and "c" * 64 in out and "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY" in out
    assert "web-image@1" in out and "done" in out and f"derivatives/{JOB_IMAGE}/large.avif  avif 1600x1200" in out


def test_status_of_an_unknown_key_exits_1_and_of_a_key_outside_originals_is_a_usage_error(local_session, capsys):
    from mediajobs.local.cli import cmd_status

    endpoint = local_session.stack.endpoint_url
    args, parser = _cli(["status", "originals/nothing.jpg", "--endpoint", endpoint])
    assert cmd_status(args, parser, lambda stack: FakeAssets()) == 1
    assert "no asset for originals/nothing.jpg" in capsys.readouterr().err
    args, parser = _cli(["status", "derivatives/x/y.webp", "--endpoint", endpoint])
    with pytest.raises(SystemExit) as exit_:
        cmd_status(args, parser, lambda stack: NoReads())
    assert exit_.value.code == 2


def test_delete_puts_a_delete_marker_on_the_original(local_session, capsys):
    from mediajobs.local.cli import cmd_delete

    s3, bucket = local_session.s3, local_session.stack.bucket
    key = "originals/cli/to-delete.png"
    s3.put_object(Bucket=bucket, Key=key, Body=b"bytes")
    args, parser = _cli(["delete", key, "--endpoint", local_session.stack.endpoint_url])
    assert cmd_delete(args, parser) == 0
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)
    (marker,) = versions["DeleteMarkers"]
    assert marker["IsLatest"] is True and len(versions["Versions"]) == 1  # the bytes stay, noncurrent
    assert marker["VersionId"] in capsys.readouterr().out
    args, parser = _cli(["delete", "derivatives/x/manifest.json", "--endpoint", local_session.stack.endpoint_url])
    with pytest.raises(SystemExit) as exit_:
        cmd_delete(args, parser)
    assert exit_.value.code == 2


def test_serve_has_a_worker_flag_and_status_and_delete_an_endpoint(monkeypatch):
    from mediajobs.local.cli import DEFAULT_ENDPOINT

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)  # else the default is the exported one

    assert _cli(["serve", "--worker"])[0].worker is True and _cli(["serve"])[0].worker is False
    assert _cli(["status", "originals/a.jpg"])[0].endpoint == DEFAULT_ENDPOINT == "http://127.0.0.1:5000"
    assert _cli(["delete", "originals/a.jpg", "--endpoint", "http://127.0.0.1:5001"])[0].endpoint.endswith(":5001")


@pytest.mark.subprocess  # the worker renders in its bounded child process
def test_the_served_worker_processes_what_reaches_the_served_queue(local_session):
    from mediajobs.local.commands.serve import serve_worker
    from mediajobs.local.commands.served import served_stack
    from tests.functional.test_worker import unique_png

    stack = served_stack(local_session.stack.endpoint_url)
    key = "originals/cli/served-worker.png"
    local_session.s3.put_object(Bucket=stack.bucket, Key=key, Body=unique_png())
    secret = new_webhook_secret()
    receiver = WebhookReceiver(secret).start()
    try:
        serve_worker(local_session.stack, "ERROR", polls=2, webhook_url=receiver.url, webhook_secret=secret)
    finally:
        receiver.stop()
    listed = local_session.s3.list_objects_v2(Bucket=stack.bucket, Prefix="derivatives/")
    assert any(o["Key"].endswith("/manifest.json") for o in listed.get("Contents", []))
    # The served dispatcher told the webhook (moto's state is the process's: other modules'
    # notifications may come too).
    told = [d.payload["type"] for d in receiver.received.deliveries if d.payload["asset"]["key"] == key]
    assert told == ["Asset Ready"]


def test_serve_refuses_a_webhook_without_the_worker_or_a_secret(capsys):
    from mediajobs.local.cli import main

    for argv in (
        ["serve", "--webhook-url", "http://127.0.0.1:8765/", "--webhook-secret", new_webhook_secret()],
        ["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/"],
        ["serve", "--worker", "--webhook-url", "http://example.com/", "--webhook-secret", new_webhook_secret()],
        ["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/", "--webhook-secret", "not base64!"],
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2, argv


@pytest.mark.parametrize(
    "argv",
    [
        ["webhook", "listen", "--secret", "mysecret"],
        ["serve", "--webhook-secret", "mysecret"],
        ["serve", "--worker", "--webhook-url", "http://127.0.0.1:8765/", "--webhook-secret", "whsec_bXlzZWNyZXQ="],
    ],
    ids=["listen", "serve-secret-alone", "serve-short-secret"],
)
def test_a_bad_webhook_secret_is_refused_at_start_showing_the_right_form(argv, capsys):
    from mediajobs.local.cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "whsec_ + base64 of 24 to 64 random bytes" in error
    assert "the base64 alone" in error  # and the deployed form beside it


def test_status_reads_the_served_assets_table_with_the_stacks_credentials(local_session, capsys):
    pytest.importorskip("mediajobs.adapters.assets", reason="the DynamoDB assets adapter")
    from mediajobs.local.cli import cmd_status
    from mediajobs.local.commands.served import served_assets, served_stack

    stack = served_stack(local_session.stack.endpoint_url)
    key = "originals/cli/served-status.jpg"
    pending = jobs((AssetJobState.PENDING, {}), (AssetJobState.PENDING, {}))
    served_assets(stack).make_current(
        stack.bucket, key, version(), sha256="c" * 64, media="image", jobs=pending, now_s=7
    )
    args, parser = _cli(["status", key, "--json", "--endpoint", stack.endpoint_url])
    assert cmd_status(args, parser) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["key"], document["state"], document["updated_at_s"]) == (key, "pending", 7)


# The gallery's badge of each asset's state.


def test_the_gallery_badges_each_state_from_the_status_document(tmp_path, local_session):
    from mediajobs.domain.assets import status_document
    from mediajobs.local.cli import asset_document
    from mediajobs.local.gallery import GalleryEntry, status_badge, write_gallery

    assets, key, seq = uploaded()
    assert status_badge(status_document(assets.get(BUCKET, key))) == '<span class="badge pending">pending</span>'
    assets.record(BUCKET, key, seq, jobs((AssetJobState.PROCESSING, {}), (AssetJobState.PENDING, {})), now_s=1)
    assets.progress(BUCKET, key, seq, JOB_IMAGE, 0.4, now_s=2)
    assert ">processing 40%<" in status_badge(status_document(assets.get(BUCKET, key)))
    failed = {"reason": "too_many_pixels", "detail": "60000000 > 50000000 <px>"}
    assets.record(BUCKET, key, seq, jobs((AssetJobState.FAILED, failed), (AssetJobState.DONE, {})), now_s=3)
    badge = status_badge(status_document(assets.get(BUCKET, key)))
    assert (
        badge == '<span class="badge failed" title="60000000 &gt; 50000000 &lt;px&gt;">failed: too_many_pixels</span>'
    )
    ready_assets, ready_key, ready_seq = uploaded("originals/ready.jpg")
    ready_assets.record(BUCKET, ready_key, ready_seq, jobs((AssetJobState.DONE, {}), (AssetJobState.DONE, {})), now_s=4)
    assert (
        status_badge(status_document(ready_assets.get(BUCKET, ready_key))) == '<span class="badge ready">ready</span>'
    )
    assets.delete(BUCKET, key, version("0055AED6DCD90281F0"), now_s=5)
    deleted = status_document(assets.get(BUCKET, key))
    assert status_badge(deleted) == '<span class="badge deleted">deleted</span>'
    assert status_badge(None) == ""

    page = write_gallery(tmp_path, [GalleryEntry("avatar", None, None, status=deleted)]).read_text()
    assert '<span class="badge deleted">deleted</span>' in page and ".badge.deleted" in page
    # A deleted asset's row says what its pictures are now, dimmed; the page says what each badge means.
    assert "<section class=deleted>" in page and "copies fetched into this folder before the delete" in page
    assert "Each badge is the asset" in page
    ready_page = write_gallery(tmp_path, [GalleryEntry("avatar", None, None, status={"state": "ready"})]).read_text()
    assert "<section class=deleted>" not in ready_page and "before the delete" not in ready_page

    stack = local_session.stack
    fake = FakeAssets()
    fake.make_current(stack.bucket, key, version(), sha256=None, media=None, jobs=None, now_s=9)
    assert asset_document(stack, key, lambda s: fake)["state"] == "pending"
    assert asset_document(stack, "originals/none.jpg", lambda s: fake) is None


def test_what_serve_prints_for_an_app_is_enough_for_a_plain_boto3_upload(local_session, monkeypatch):
    """An app's shell with only the printed exports: ``boto3.client("s3")``, no endpoint,
    region or credentials in the code, uploads to the served stack."""
    import boto3

    from mediajobs.local.commands.serve import client_settings

    printed = client_settings(local_session.stack)
    exports = dict(
        line.strip().removeprefix("export ").split("=", 1)
        for line in printed.splitlines()
        if line.strip().startswith("export ")
    )
    assert set(exports) == {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"}
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in exports.items():
        monkeypatch.setenv(name, value)
    bucket = local_session.stack.bucket
    assert f"bucket {bucket} under originals/" in printed
    s3 = boto3.session.Session().client("s3")
    s3.put_object(Bucket=bucket, Key="quickstart/hello.txt", Body=b"hello")  # outside originals/: no event
    assert s3.head_object(Bucket=bucket, Key="quickstart/hello.txt")["ContentLength"] == 5


def test_the_served_commands_reach_the_endpoint_an_apps_shell_exports(monkeypatch):
    """``serve`` prints ``export AWS_ENDPOINT_URL=...`` for an app's shell: ``mediajobs status``
    run there reaches that serve without ``--endpoint``; ``--endpoint`` still wins."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5100")
    assert _cli(["status", "originals/a.jpg"])[0].endpoint == "http://127.0.0.1:5100"
    assert _cli(["status", "originals/a.jpg", "--endpoint", "http://127.0.0.1:5200"])[0].endpoint.endswith(":5200")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    assert _cli(["collect"])[0].endpoint == "http://127.0.0.1:5000"


@pytest.mark.subprocess  # the worker renders in its bounded child process
def test_an_edit_of_active_json_is_deployed_by_the_served_worker_and_backfilled(local_session, monkeypatch):
    """``serve --worker`` takes an edit of recipes/active.json as a deployment: its worker
    renders the new set, and the backfill schedule's code (every poll here) starts the set's
    backfill and switches the asset already there."""
    import json as _json

    import mediajobs.local.commands.serve as served
    from mediajobs.bootstrap import active_file_text
    from tests.functional.test_worker import unique_png

    stack = local_session.stack
    key = "originals/cli/served-rollout.png"
    local_session.s3.put_object(Bucket=stack.bucket, Key=key, Body=unique_png())
    before = active_file_text()
    edited = _json.loads(before)
    edited["image"] = ["moderation-image@1", "web-image@2", "image-placeholder@1"]
    served.serve_worker(stack, "ERROR", polls=2, active_text=lambda: before)  # the upload, on the old set
    assert job_of(stack.assets().get(stack.bucket, key), "web-image").recipe == "web-image@1"
    monkeypatch.setattr(served, "BACKFILL_EVERY_S", 0.0)  # the schedule's code at every poll
    served.serve_worker(stack, "ERROR", polls=3, active_text=lambda: _json.dumps(edited))  # the first pass
    clock = FakeSecondPass(served.LOCAL_DEPLOY_OVER_S)
    monkeypatch.setattr(time, "time", clock)  # the old set's invocations are over: the second pass
    served.serve_worker(stack, "ERROR", polls=4, active_text=lambda: _json.dumps(edited))
    view = stack.assets().get(stack.bucket, key)
    assert [j.recipe for j in view.jobs] == ["moderation-image@1", "web-image@2", "image-placeholder@1"]
    assert not view.next


class FakeSecondPass:
    """``time.time`` moved ``ahead_s`` seconds forward (the wait before a backfill's second
    pass), the rest of the clock as it is."""

    def __init__(self, ahead_s: float) -> None:
        import time as _time

        self._real = _time.time
        self._ahead_s = ahead_s

    def __call__(self) -> float:
        return self._real() + self._ahead_s + 1


@pytest.mark.subprocess
def test_review_and_decisions_commands_work_on_the_served_stack(local_session, capsys):
    """``mediajobs review list|accept`` and ``mediajobs decisions count|spikes`` against the
    stack ``serve`` names (the session's), as docs/local.md shows them."""
    import io

    from mediajobs.local.commands import decisions as decisions_command
    from mediajobs.local.commands import review as review_command
    from mediajobs.local.moderation_samples import card

    out = io.BytesIO()
    card("review").save(out, "PNG", compress_level=7)
    key = "originals/cli/held-for-review.png"
    local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=key, Body=out.getvalue())
    local_session.run()
    endpoint = ["--endpoint", local_session.stack.endpoint_url]
    capsys.readouterr()
    args, parser = _cli(["review", "list", "--json", *endpoint])
    assert review_command.run(args, parser) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {
        "key": key,
        "detail": "held for review: rule label:Visually Disturbing>=80: Visually Disturbing 91.5",
    } in listed
    args, parser = _cli(["review", "accept", key, "--by", "ana", "--json", *endpoint])
    assert review_command.run(args, parser) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "decided"
    local_session.run()
    args, parser = _cli(["review", "accept", "originals/cli/never-uploaded.png", *endpoint])
    assert review_command.run(args, parser) == 1
    assert "no asset for this key" in capsys.readouterr().out
    args, parser = _cli(["decisions", "count", "--json", *endpoint])
    assert decisions_command.run(args, parser) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["review"] >= 1 and counts["accepted"] >= 1
    args, parser = _cli(["decisions", "spikes", "--since", "24h", "--json", *endpoint])
    assert decisions_command.run(args, parser) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == []


@pytest.mark.subprocess
def test_the_promo_command_requests_waits_for_and_reads_an_albums_promo_on_the_served_stack(local_session, capsys):
    """``mediajobs promo PREFIX`` (and ``--status``, ``--json``) against the stack ``serve``
    names, as docs/moderation.md shows it; a prefix that is no album's is a usage error."""
    from mediajobs.local.commands import decisions as decisions_command
    from mediajobs.local.commands import promo as promo_command
    from tests.conftest import media_file

    prefix = "originals/cli-album/"
    for name in ("orientation-landscape-3.jpg", "canon-40d-small.jpg"):
        data = media_file("photos", name).read_bytes()
        local_session.s3.put_object(Bucket=local_session.stack.bucket, Key=prefix + name, Body=data)
    local_session.run()
    endpoint = ["--endpoint", local_session.stack.endpoint_url]
    capsys.readouterr()
    args, parser = _cli(["promo", "originals/cli-album", "--json", *endpoint])  # the trailing / added
    assert promo_command.run(args, parser) == 0
    asked = json.loads(capsys.readouterr().out)
    assert (asked["state"], asked["prefix"], len(asked["frames"])) == ("requested", prefix, 2)
    local_session.run()
    args, parser = _cli(["promo", prefix, "--status", *endpoint])
    assert promo_command.run(args, parser) == 0
    shown = capsys.readouterr().out
    assert f"promo of {prefix}: done" in shown and f"job {asked['job_key']}  (promo@1, policy 1)" in shown
    assert "2 frames (asset key <- rendition job key, decision id: its moderation job's key):" in shown
    assert f"    {prefix}canon-40d-small.jpg  <- " in shown.splitlines()[4]  # key order
    args, parser = _cli(["promo", "photos/x/", *endpoint])
    assert promo_command.run(args, parser) == 2
    assert "an album is a folder under originals/" in capsys.readouterr().out
    args, parser = _cli(["promo", "originals/cli-empty/", *endpoint])
    assert promo_command.run(args, parser) == 1
    assert "no ready asset with a 'card' rendition" in capsys.readouterr().out
    args, parser = _cli(["decisions", "affected", "--policy", "1", "--json", *endpoint])
    assert decisions_command.run(args, parser) == 0
    promos = json.loads(capsys.readouterr().out)["promos"]
    assert [row["current"] for row in promos if row["key"] == prefix] == [True]  # its one promo, current
    args, parser = _cli(["decisions", "affected", "--policy", "1", *endpoint])
    assert decisions_command.run(args, parser) == 0
    assert f"promo                {prefix}  content " in capsys.readouterr().out
