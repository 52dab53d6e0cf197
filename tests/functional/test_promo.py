"""Albums' promos on the embedded AWS with the real worker and ffmpeg: what a promo shows,
its provenance in the manifest, its key (an unchanged album reuses it, a changed one
releases the old promo to the collection), the moderation of each frame's crop, and the
status function's ``/promos`` route."""

from __future__ import annotations

import io
import json
import subprocess
import uuid
from pathlib import Path

import pytest
from PIL import Image

from mediajobs.adapters.ffmpeg import find_binaries
from mediajobs.bootstrap import promos_over
from mediajobs.domain.assets import reference_id
from mediajobs.domain.jobs import JobState
from mediajobs.domain.promo import holder_key
from mediajobs.entrypoints.status import make_status_app
from mediajobs.local.function_events import function_url_event
from mediajobs.local.moderation_samples import card, expected_hash
from mediajobs.local.session import LocalSession
from tests.conftest import REPO, media_file

pytestmark = pytest.mark.subprocess

PHOTOS = ("orientation-landscape-1.jpg", "orientation-landscape-6.jpg")


@pytest.fixture(scope="module")
def session():
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-promo") as s:
        yield s


def promos(session: LocalSession):
    stack = session.stack
    settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket)
    return promos_over(settings, stack.clients(), stack.assets())


def png(picture: Image.Image) -> bytes:
    out = io.BytesIO()
    picture.save(out, "PNG", compress_level=1)
    return out.getvalue()


def album(session: LocalSession, files: dict[str, bytes]) -> str:
    """Upload ``files`` (name -> bytes) under a new album, processed; its prefix."""
    prefix = f"originals/album-{uuid.uuid4().hex[:8]}/"
    for name, data in files.items():
        session.s3.put_object(Bucket=session.stack.bucket, Key=prefix + name, Body=data)
    session.run()
    return prefix


def photo(name: str) -> bytes:
    return media_file("photos", name).read_bytes()


def hidden_in_its_middle() -> bytes:
    """A square picture whose middle 16:9 band is the known-bad test card and whose top and
    bottom are the plain card: the whole is none of them (its difference hash is far from
    the known-bad card's), the band a promo's frame shows is the known-bad card."""
    picture = Image.new("RGB", (1600, 1600))
    picture.paste(card("plain", (1600, 350)), (0, 0))
    picture.paste(card("known-bad", (1600, 900)), (0, 350))
    picture.paste(card("plain", (1600, 350)), (0, 1250))
    return png(picture)


def manifest(session: LocalSession, key: str) -> dict:
    return json.loads(session.s3.get_object(Bucket=session.stack.bucket, Key=key)["Body"].read())


def probe(session: LocalSession, key: str, tmp_path: Path) -> dict:
    path = tmp_path / "promo.mp4"
    session.s3.download_file(session.stack.bucket, key, str(path))
    out = subprocess.run(  # noqa: S603 - argv list
        [find_binaries().ffprobe, "-v", "error", "-show_streams", "-show_format", "-of", "json", str(path)],
        capture_output=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_a_promo_shows_the_albums_accepted_cards_in_key_order_and_its_manifest_lists_their_provenance(
    session, tmp_path
):
    prefix = album(
        session,
        {"1.jpg": photo(PHOTOS[0]), "2-bad.png": png(card("known-bad")), "3.jpg": photo(PHOTOS[1])},
    )
    asked = promos(session).request(prefix)
    assert asked.state == "requested" and asked.job_key is not None
    session.run()
    answer = promos(session).status(prefix)
    assert answer.state == "done" and answer.job_key == asked.job_key
    document = answer.to_json()
    [output] = document["outputs"]
    assert (output["name"], output["width"], output["height"], output["content_type"]) == (
        "promo", 800, 450, "video/mp4",
    )  # fmt: skip
    assert [x["asset_key"] for x in document["left_out"]] == [prefix + "2-bad.png"]
    assert document["left_out"][0]["why"] == "rejected by the moderation policy"
    # The provenance (the job's row, private): each frame's asset key, rendition job key and
    # decision id. The public manifest names none of them: the frames by input, when they
    # show and what their crops were judged.
    body = manifest(session, document["manifest_key"])
    private = session.stack.ledger().get(document["job_key"]).provenance
    assets = session.stack.assets()
    expected = []
    for i, name in enumerate(("1.jpg", "3.jpg")):
        view = assets.get(session.stack.bucket, prefix + name)
        web = next(j for j in view.jobs if j.recipe == "web-image@1")
        gate = next(j for j in view.jobs if j.recipe == "moderation-image@1")
        expected.append((f"card-{i:04d}", prefix + name, web.job_key, gate.job_key))
    inputs = private["inputs"]
    cards = [(x["name"], x["asset_key"], x["job_key"]) for x in inputs if x["name"].startswith("card-")]
    decisions = [(x["name"], x["job_key"]) for x in inputs if x["name"].startswith("decision-")]
    assert cards == [(n, a, w) for n, a, w, _ in expected]
    assert decisions == [(n.replace("card", "decision"), g) for n, _, _, g in expected]
    assert private["source"]["key"] == prefix
    frames = body["decisions"]["promo"]["frames"]
    assert [f["input"] for f in frames] == [n for n, *_ in expected]
    assert [f["from_s"] for f in frames] == [0.0, 2.0]
    assert {f["crop"]["outcome"] for f in frames} == {"accepted"}
    assert (body["policy"], body["recipe"]["id"]) == ({"version": "1"}, "promo")
    public = json.dumps(body)
    assert "source" not in body and "inputs" not in body and prefix not in public
    assert not any(key in public for _, _, w, g in expected for key in (w, g))
    # The album's owner reads it all from the promo route (the album's record, private).
    assert [(f["asset_key"], f["rendition_job_key"], f["decision_id"]) for f in document["frames"]] == [
        (a, w, g) for _, a, w, g in expected
    ]
    # The video: H.264 High, 800 x 450, two cards of 2.5 s less one 0.5 s crossfade.
    found = probe(session, output["key"], tmp_path)
    [video] = found["streams"]
    assert (video["codec_name"], video["profile"], video["width"], video["height"]) == ("h264", "High", 800, 450)
    assert float(found["format"]["duration"]) == pytest.approx(4.5, abs=0.05)


def test_an_unchanged_album_requested_again_reuses_its_promo_and_a_changed_one_releases_it(session):
    prefix = album(session, {"1.jpg": photo("orientation-landscape-2.jpg")})
    first = promos(session).request(prefix)
    session.run()
    renders = len(session.collector.renders)
    again = promos(session).request(prefix)
    assert (again.state, again.job_key) == ("done", first.job_key)
    session.run()
    assert len(session.collector.renders) == renders  # nothing rendered twice
    assets = session.stack.assets()
    holder = (session.stack.bucket, holder_key(prefix))
    assert assets.referrers(first.job_key) == [holder]
    # A photo more: another promo; the first one's reference is released to the collection.
    session.s3.put_object(Bucket=session.stack.bucket, Key=prefix + "2.jpg", Body=photo("orientation-landscape-3.jpg"))
    session.run()
    changed = promos(session).request(prefix)
    assert changed.job_key != first.job_key and changed.state == "requested"
    session.run()
    assert promos(session).status(prefix).state == "done"
    assert assets.referrers(first.job_key) == [] and assets.referrers(changed.job_key) == [holder]
    released_by = reference_id(session.stack.bucket, holder_key(prefix))
    assert [c.released_by for c in assets.candidates_of(first.job_key)] == [released_by]


def test_a_crop_the_policy_refuses_is_left_out_though_the_whole_picture_was_accepted(session):
    prefix = album(session, {"1.jpg": photo("orientation-landscape-4.jpg"), "2.png": hidden_in_its_middle()})
    hidden = session.stack.assets().get(session.stack.bucket, prefix + "2.png")
    assert hidden.state == "ready"  # the whole is accepted: its renditions exist
    promos(session).request(prefix)
    session.run()
    answer = promos(session).status(prefix)
    assert answer.state == "done"
    body = manifest(session, answer.to_json()["manifest_key"])
    promo = body["decisions"]["promo"]
    assert [f["input"] for f in promo["frames"]] == ["card-0000"]
    [left] = promo["left_out"]
    assert left["input"] == "card-0001"  # 2.png, as the provenance and the promo route say
    assert [x["asset_key"] for x in answer.to_json()["frames"]] == [prefix + "1.jpg", prefix + "2.png"]
    assert left["crop"]["outcome"] == "rejected" and left["crop"]["rule"].startswith("perceptual:")
    assert left["crop"]["perceptual"] == f"{expected_hash('known-bad'):016x}"


def test_an_album_whose_every_crop_is_refused_fails_rejected_with_each_reason(session):
    prefix = album(session, {"only.png": hidden_in_its_middle()})
    promos(session).request(prefix)
    session.run()
    answer = promos(session).status(prefix)
    assert answer.state == "failed" and answer.row.failure_reason == "rejected"
    assert "card-0000: its crop is rejected" in answer.row.failure_detail


def test_the_promos_route_requests_and_reads_an_albums_promo(session):
    stack = session.stack
    settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket)
    app = make_status_app(stack.assets(), settings, promos=promos(session))

    def call(method: str, query: str) -> tuple[int, dict]:
        response = app.resolve(function_url_event(query, path="/promos", method=method), None)
        return response["statusCode"], json.loads(response["body"])

    prefix = album(session, {"1.jpg": photo("orientation-landscape-5.jpg")})
    assert call("GET", f"prefix={prefix}")[0] == 404  # none requested yet
    status, body = call("POST", f"prefix={prefix}")
    assert status == 202 and body["state"] == "requested" and len(body["frames"]) == 1
    session.run()
    status, body = call("GET", f"prefix={prefix}")
    assert status == 200 and body["state"] == "done" and body["outputs"][0]["name"] == "promo"
    assert call("POST", f"prefix={prefix}") == (200, body)  # requested again: the same promo
    assert call("POST", "prefix=originals/nothing-here/")[0] == 409
    for query in ("prefix=photos/x/", "prefix=originals/x", "", f"prefix={prefix}&prefix={prefix}"):
        assert call("POST", query)[0] == 400
    assert app.resolve(function_url_event("", path="/promos", method="DELETE"), None)["statusCode"] == 404
    without = make_status_app(stack.assets(), settings)
    assert without.resolve(function_url_event(f"prefix={prefix}", path="/promos"), None)["statusCode"] == 404


def test_a_promo_whose_card_was_collected_meanwhile_fails_source_missing_and_is_made_again_without_it(session):
    from mediajobs.adapters.ledger import JobModel

    prefix = album(
        session, {"1.jpg": photo("orientation-landscape-7.jpg"), "2.jpg": photo("orientation-landscape-8.jpg")}
    )
    first = promos(session).request(prefix)  # requested: its job request waits in the queue
    view = session.stack.assets().get(session.stack.bucket, prefix + "2.jpg")
    card_job = next(j for j in view.jobs if j.recipe == "web-image@1").job_key
    rows = session.stack.model(JobModel, session.stack.table_name)
    rows.get(card_job).update(actions=[rows.state.set(str(JobState.COLLECTED))])  # its asset gone meanwhile
    session.run()
    failed = promos(session).status(prefix)
    assert (failed.state, failed.row.failure_reason) == ("failed", "source_missing")
    assert f"input job {card_job[:12]} was collected" in failed.row.failure_detail
    again = promos(session).request(prefix)
    assert again.job_key != first.job_key
    assert [x.why for x in again.record.left_out] == ["its 'card' rendition is not done now"]
    session.run()
    assert promos(session).status(prefix).state == "done"


def _granted(action: str, resource: str, arns: dict[str, str], context: dict[str, object]) -> bool:
    """Whether a StatusRole statement allows ``action`` on ``resource`` given the request's
    condition keys ``context`` (``s3:prefix``, ``dynamodb:LeadingKeys``), as IAM evaluates the
    operators the template uses (StringLike, ForAllValues:StringLike)."""
    from fnmatch import fnmatchcase

    from mediajobs.local.template import load_template

    statements = [
        st
        for p in load_template(REPO / "template.yaml")["Resources"]["StatusRole"]["Properties"]["Policies"]
        for st in p["PolicyDocument"]["Statement"]
        if "Sid" in st
    ]

    def matches(st: dict) -> bool:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        named = [arns.get(r["Fn::GetAtt"][0] if "Fn::GetAtt" in r else r.get("Ref", "?"), "?") for r in resources]
        if action not in actions or resource not in named:
            return False
        for keys in st.get("Condition", {}).values():  # StringLike, ForAllValues:StringLike
            for name, patterns in keys.items():
                patterns = patterns if isinstance(patterns, list) else [patterns]
                values = context.get(name)
                values = values if isinstance(values, list) else [values]
                if values == [None] or not all(any(fnmatchcase(str(v), p) for p in patterns) for v in values):
                    return False
        return True

    return any(st["Effect"] == "Allow" and matches(st) for st in statements)


def test_every_call_of_post_promos_is_allowed_by_the_status_role_and_its_conditions(session, monkeypatch):
    """The deployed handler (``status_function()`` from the environment the template gives
    it) answering ``POST /promos``: each AWS call recorded at botocore and checked against
    StatusRole, with the request's condition keys (the listing's prefix, each written item's
    partition key: never an asset item)."""
    import botocore.client

    from mediajobs.bootstrap import status_function
    from mediajobs.local.runner import LocalLambdaContext

    stack = session.stack
    prefix = album(session, {"1.jpg": photo("orientation-landscape-0.jpg")})
    first = promos(session).request(prefix)  # an earlier promo: the route's request releases it
    session.run()
    session.s3.put_object(Bucket=stack.bucket, Key=prefix + "2.jpg", Body=photo("canon-40d-small.jpg"))
    session.run()
    env = {
        "MEDIA_BUCKET": stack.bucket,
        "ASSETS_TABLE_NAME": stack.assets_table_name,
        "JOBS_TABLE_NAME": stack.table_name,
        "JOBS_QUEUE_ARN": stack.queue_arn,
        "POLICY_VERSION": "1",
        "KEY_SECRET_ARN": stack.function_env["KEY_SECRET_ARN"],  # the promo's key is keyed
        "AWS_ENDPOINT_URL": stack.endpoint_url,
        "AWS_DEFAULT_REGION": stack.region,
        "AWS_ACCESS_KEY_ID": stack.credentials["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": stack.credentials["aws_secret_access_key"],
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    calls: list[tuple[str, dict]] = []
    real = botocore.client.BaseClient._make_api_call

    def recording(client, operation, params):
        calls.append((f"{client.meta.service_model.service_name}:{operation}", params))
        return real(client, operation, params)

    handler = status_function()  # built at its first call: its key secret's read is recorded
    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    try:
        event = function_url_event(f"prefix={prefix}", path="/promos", method="POST")
        response = handler(event, LocalLambdaContext(timeout_s=10))
    finally:
        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", real)
    assert response["statusCode"] == 202 and json.loads(response["body"])["job_key"] != first.job_key
    account = "123456789012"
    arns = {
        "MediaBucket": f"arn:aws:s3:::{stack.bucket}",
        "AssetsTable": f"arn:aws:dynamodb:{stack.region}:{account}:table/{stack.assets_table_name}",
        "JobsTable": f"arn:aws:dynamodb:{stack.region}:{account}:table/{stack.table_name}",
        "JobsQueue": stack.queue_arn,
        "JobKeySecret": stack.function_env["KEY_SECRET_ARN"],
    }
    table_arn = {stack.assets_table_name: arns["AssetsTable"], stack.table_name: arns["JobsTable"]}
    checked: list[tuple[str, str, dict]] = []
    for operation, params in calls:
        if operation.startswith("sts:"):  # the SDK's own (an assumed role's credentials), none here
            continue
        if operation == "s3:ListObjectsV2":
            checked.append(("s3:ListBucket", arns["MediaBucket"], {"s3:prefix": params["Prefix"]}))
        elif operation in ("sqs:SendMessage", "sqs:GetQueueUrl"):
            checked.append((operation, arns["JobsQueue"], {}))
        elif operation == "secretsmanager:GetSecretValue":
            checked.append((operation, params["SecretId"], {}))
        elif operation == "dynamodb:BatchGetItem":
            checked.extend(("dynamodb:BatchGetItem", table_arn[t], {}) for t in params["RequestItems"])
        elif operation == "dynamodb:TransactWriteItems":
            for item in params["TransactItems"]:
                [(kind, write)] = item.items()
                key = write.get("Item") or write.get("Key")
                action = {"Put": "PutItem", "Delete": "DeleteItem", "Update": "UpdateItem"}[kind]
                leading = key.get("pk", key.get("job_key"))["S"]
                checked.append(
                    (f"dynamodb:{action}", table_arn[write["TableName"]], {"dynamodb:LeadingKeys": [leading]})
                )
        else:
            key = params.get("Item") or params.get("Key") or {}
            leading = (key.get("pk") or key.get("job_key") or {}).get("S")
            context = {"dynamodb:LeadingKeys": [leading]} if leading else {}
            checked.append((operation, table_arn[params["TableName"]], context))
    wanted = {"s3:ListBucket", "dynamodb:PutItem", "dynamodb:DeleteItem", "sqs:SendMessage"}
    assert {a for a, _, _ in checked} >= wanted | {"secretsmanager:GetSecretValue"}
    refused = [c for c in checked if not _granted(*c[:2], arns, c[2])]
    assert refused == []


def test_an_album_whose_pictures_were_all_deleted_retires_its_promo_to_the_collection(session):
    prefix = album(session, {"1.jpg": photo("orientation-landscape-1.jpg")})
    made = promos(session).request(prefix)
    session.run()
    session.s3.delete_object(Bucket=session.stack.bucket, Key=prefix + "1.jpg")
    session.run()
    retired = promos(session).request(prefix)
    assert (retired.state, retired.job_key) == ("empty", None)
    assert promos(session).status(prefix).state == "empty"  # not the promo of deleted pictures
    assets = session.stack.assets()
    assert assets.referrers(made.job_key) == []
    released_by = reference_id(session.stack.bucket, holder_key(prefix))
    assert released_by in [c.released_by for c in assets.candidates_of(made.job_key)]
