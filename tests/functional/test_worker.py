"""The worker's classification of outcomes into SQS acknowledgements, and what it stores."""

from __future__ import annotations

import dataclasses
import io
import json
import time
import uuid

import numpy as np
from PIL import Image

from mediajobs.bootstrap import build_service, default_adapters, load_recipe
from mediajobs.domain.jobs import JobSpec
from mediajobs.domain.keys import job_key, sha256_hex
from mediajobs.entrypoints import worker
from mediajobs.local.events import object_created_body
from mediajobs.local.runner import LocalLambdaContext, sqs_event
from mediajobs.local.session import local_adapters, local_handler
from mediajobs.settings import Settings
from tests.fakes import FakeQueue, Wrapping, planned_key

RECIPE = load_recipe("web-image", 1)


def unique_png(width: int = 640, height: int = 480) -> bytes:
    """A small photo-like PNG whose bytes no other test produces."""
    rng = np.random.default_rng(uuid.uuid4().int % 2**32)
    pixels = rng.integers(0, 255, size=(height // 8, width // 8, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).resize((width, height), Image.Resampling.BICUBIC).save(out, format="PNG")
    return out.getvalue()


def event_for(session, key: str, size: int) -> dict:
    """A Lambda SQS event of one record whose body is S3's "Object Created" event for
    ``key``, the key URL-encoded as S3 sends it."""
    body = object_created_body(session.stack.bucket, key, size=size)
    return sqs_event(
        [{"MessageId": str(uuid.uuid4()), "ReceiptHandle": "h", "Body": body}],
        session.stack.queue_arn,
        "us-east-1",
    )


def swallow_queued(session) -> None:
    """Delete what the bucket's notifications queued (PurgeQueue allows one call a minute)."""
    while messages := session.sqs.receive_message(
        QueueUrl=session.stack.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
    ).get("Messages"):
        for m in messages:
            session.sqs.delete_message(QueueUrl=session.stack.queue_url, ReceiptHandle=m["ReceiptHandle"])


def put(session, key: str, data: bytes) -> None:
    session.s3.put_object(Bucket=session.stack.bucket, Key=key, Body=data)


def test_outputs_have_content_type_cache_control_and_a_manifest(local_session):
    data = unique_png()
    put(local_session, "originals/w/a.png", data)
    assert local_session.handler(event_for(local_session, "originals/w/a.png", len(data)), LocalLambdaContext()) == {
        "batchItemFailures": []
    }
    key = planned_key(data, "web-image", local_session.stack.settings())
    s3, bucket = local_session.s3, local_session.stack.bucket
    thumb = s3.head_object(Bucket=bucket, Key=f"derivatives/{key}/thumb.webp")
    full = s3.head_object(Bucket=bucket, Key=f"derivatives/{key}/full.avif")
    assert (thumb["ContentType"], full["ContentType"]) == ("image/webp", "image/avif")
    assert thumb["CacheControl"] == "public, max-age=31536000, immutable"
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"derivatives/{key}/manifest.json")["Body"].read())
    assert manifest["job_key"] == key
    assert "source" not in manifest and manifest["schema"] == 2  # what it came from is private:
    source = local_session.stack.ledger().get(key).provenance["source"]
    assert source["sha256"] == sha256_hex(data) and source["bytes"] == len(data)
    assert source["version_id"]  # the template turns versioning on
    assert manifest["recipe"] == {"id": "web-image", "version": 1, "sha256": RECIPE.sha256}
    assert manifest["policy"] == {"version": "1"}
    assert [(o["name"], o["width"], o["height"]) for o in manifest["outputs"]] == [
        ("thumb", 320, 240),
        ("card", 640, 480),
        ("full", 640, 480),
    ]
    for o in manifest["outputs"]:
        body = s3.get_object(Bucket=bucket, Key=o["key"])["Body"].read()
        assert (len(body), sha256_hex(body)) == (o["bytes"], o["sha256"])
    assert manifest["decisions"]["orientation"] == 1
    row = local_session.stack.job_model().get(key)
    assert (row.state, row.manifest_key, row.attempts) == ("done", f"derivatives/{key}/manifest.json", 1)


class FlakyStep:
    """Wraps a step: raises ``error`` while set, then runs the real one."""

    def __init__(self, step, error):
        self.step, self.error = step, error
        self.name, self.params_model = step.name, step.params_model

    def run(self, source, params, context, out_dir):
        if self.error is not None:
            raise self.error
        return self.step.run(source, params, context, out_dir)


def test_transient_failure_is_reported_and_released(local_session):
    data = unique_png()
    put(local_session, "originals/w/flaky.png", data)
    settings = Settings.from_env()
    adapters = default_adapters(settings, clients=local_session.stack.clients())
    flaky = FlakyStep(adapters.steps["image.variants"], ConnectionResetError("peer reset"))
    steps = {**adapters.steps, "image.variants": flaky}
    handler = worker.make_handler(build_service(settings, adapters=dataclasses.replace(adapters, steps=steps)))
    event = event_for(local_session, "originals/w/flaky.png", len(data))
    response = handler(event, LocalLambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
    key = planned_key(data, "web-image", local_session.stack.settings())
    row = local_session.stack.job_model().get(key)
    assert row.state == "transient_failure"
    flaky.error = None
    assert handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    assert row.refresh() is None and (row.state, row.attempts) == ("done", 2)


def test_unparseable_record_is_reported_and_others_succeed(local_session):
    data = unique_png()
    put(local_session, "originals/w/ok.png", data)
    good = event_for(local_session, "originals/w/ok.png", len(data))["Records"][0]
    bad = {**good, "messageId": "bad-1", "body": "{not json"}
    response = local_session.handler({"Records": [bad, good]}, LocalLambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": "bad-1"}]}


def test_permanent_failure_is_deleted_and_recorded(local_session, tmp_path):
    truncated = unique_png()[:300]
    put(local_session, "originals/w/cut.png", truncated)
    response = local_session.handler(
        event_for(local_session, "originals/w/cut.png", len(truncated)), LocalLambdaContext()
    )
    assert response == {"batchItemFailures": []}
    key = planned_key(truncated, "web-image", local_session.stack.settings())
    row = local_session.stack.job_model().get(key)
    assert (row.state, row.failure_reason) == ("permanent_failure", "truncated_image")
    listed = local_session.s3.list_objects_v2(Bucket=local_session.stack.bucket, Prefix=f"derivatives/{key}/")
    assert listed.get("KeyCount", 0) == 0


def _hold(local_session, data: bytes, lease_s: int, now: int | None = None) -> str:
    """Claim the job of ``data`` as another worker would, at ``now`` (default: the clock's
    time) with a lease of ``lease_s``: web-image@1's alone, as :data:`ONE_JOB` plans it."""
    settings = local_session.stack.settings()
    policy = settings.policy_version
    key = job_key(sha256_hex(data), RECIPE.sha256, policy, keys=settings.keys)
    spec = JobSpec(
        job_key=key,
        input_sha256=sha256_hex(data),
        recipe_id="web-image",
        recipe_version=1,
        recipe_sha256=RECIPE.sha256,
        policy_version=policy,
        output_prefix=f"derivatives/{key}/",
        source_bucket="b",
        source_key="k",
    )
    now = int(time.time()) if now is None else now
    local_session.stack.ledger().claim(spec, now_s=now, lease_until_s=now + lease_s)
    return key


#: The busy record's one job, web-image@1's: another active recipe's job would be claimed
#: and rendered first, and the holder's short lease could end meanwhile.
ONE_JOB = {"image": [RECIPE]}


def one_job_handler(session, **changes):
    """The real handler over the session's adapters (``changes`` replacing some), applying
    web-image@1 alone."""
    adapters = dataclasses.replace(local_adapters(session.stack, session.settings), **changes)
    service = build_service(session.settings, adapters=adapters, recipes=ONE_JOB)
    return local_handler(worker.make_handler(service))


def received_with(session, body: str) -> list[dict]:
    """The queued messages whose body is ``body``, received within 3 long polls of 10 s
    (other tests' delayed copies are not ours)."""
    for _ in range(3):
        received = session.sqs.receive_message(
            QueueUrl=session.stack.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if mine := [m for m in received if m["Body"] == body]:
            return mine
    return []


def test_a_busy_record_is_resent_to_come_back_after_the_holders_lease(local_session):
    """Waiting is not failing: a busy record is re-sent as a fresh message delayed by the
    holder's remaining lease plus jitter (receive count 0), then acknowledged."""
    data = unique_png()
    put(local_session, "originals/w/busy-resend.png", data)
    held_at = int(time.time())
    _hold(local_session, data, lease_s=3, now=held_at)
    swallow_queued(local_session)  # the upload's own message
    body = event_for(local_session, "originals/w/busy-resend.png", len(data))["Records"][0]["body"]
    third = {"MessageId": "m-3", "ReceiptHandle": "h", "Body": body, "Attributes": {"ApproximateReceiveCount": "3"}}
    event = sqs_event([third], local_session.stack.queue_arn, "us-east-1")
    queue = local_adapters(local_session.stack, local_session.settings).queue
    resent = []

    def resend(queue_arn, body, delay_s, *, handovers=0):
        resent.append((body, delay_s, handovers))
        queue.resend(queue_arn, body, delay_s, handovers=handovers)

    # The worker's clock stands at the claim: the holder is alive however long this takes.
    handler = one_job_handler(local_session, queue=Wrapping(queue, resend=resend), clock=lambda: held_at)
    assert handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    # Delayed by the lease remaining (<= 3 s) plus jitter (1-2 s here), its hand-over count kept.
    [(sent, delay_s, handovers)] = resent
    assert (sent, handovers) == (body, 0) and 1 <= delay_s <= 5
    messages = received_with(local_session, body)  # SQS holds it back for its delay
    assert [m["Body"] for m in messages] == [body]
    assert messages[0]["Attributes"]["ApproximateReceiveCount"] == "1"
    local_session.sqs.delete_message(QueueUrl=local_session.stack.queue_url, ReceiptHandle=messages[0]["ReceiptHandle"])


def test_a_busy_record_that_cannot_be_resent_goes_back_after_the_lease(local_session):
    data = unique_png()
    put(local_session, "originals/w/busy-later.png", data)
    _hold(local_session, data, lease_s=3)
    settings = Settings.from_env()
    queue = FakeQueue(refuse_resend=True)
    adapters = dataclasses.replace(default_adapters(settings, clients=local_session.stack.clients()), queue=queue)
    handler = worker.make_handler(build_service(settings, adapters=adapters, recipes=ONE_JOB))
    event = event_for(local_session, "originals/w/busy-later.png", len(data))
    response = handler(event, LocalLambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
    [(arn, handle, seconds)] = queue.returned
    assert (arn, handle) == (local_session.stack.queue_arn, "h") and 1 <= seconds <= 5
    assert queue.deleted == []  # nothing was handed over


def test_a_handler_bound_to_a_service_reports_each_record_to_its_listener(local_session):
    data = unique_png()
    put(local_session, "originals/w/listened.png", data)
    seen: list[tuple[str, int, str]] = []
    handler = worker.make_handler(local_session.service, on_record=lambda *args: seen.append(args))
    event = _record(local_session, "originals/w/listened.png", len(data), receives=2)
    bad = {**event["Records"][0], "messageId": "bad-2", "body": "{not json"}
    assert handler({"Records": [*event["Records"], bad]}, LocalLambdaContext()) == {
        "batchItemFailures": [{"itemIdentifier": "bad-2"}]
    }
    assert seen == [(event["Records"][0]["messageId"], 2, "done")]  # a record that does not parse never reaches it


def test_a_handlers_metrics_never_pile_up_across_invocations(capsys, monkeypatch):
    """Disabled metrics pile up in Powertools (its ``Metrics`` share one set) and print at
    100 values: a handler's metrics hold none once an invocation ends."""
    from mediajobs.bootstrap import function_metrics

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics = function_metrics()

    def busy_handler(event, context):
        for _ in range(60):
            metrics.busy()
        return {"batchItemFailures": []}

    handler = metrics.around(busy_handler)
    for _ in range(3):
        handler({"Records": []}, LocalLambdaContext())
    assert capsys.readouterr().out == ""


def _record(local_session, key: str, size: int, receives: int, handovers: int | None = None) -> dict:
    body = event_for(local_session, key, size)["Records"][0]["body"]
    message = {"MessageId": f"m-{uuid.uuid4().hex[:8]}", "ReceiptHandle": "h", "Body": body}
    message["Attributes"] = {"ApproximateReceiveCount": str(receives)}
    if handovers is not None:
        message["MessageAttributes"] = {"mediajobs-handovers": {"DataType": "Number", "StringValue": str(handovers)}}
    return sqs_event([message], local_session.stack.queue_arn, "us-east-1")


def test_a_record_on_its_last_receive_but_one_is_handed_over_before_any_work(local_session):
    """Receives lost to a batch-mate's crash or a lost ack must not dead-letter a record
    whose own work never failed: at receive 4 of 5 it is handed to a fresh copy."""
    data = unique_png()
    put(local_session, "originals/w/handover.png", data)
    swallow_queued(local_session)  # the upload's own message
    event = _record(local_session, "originals/w/handover.png", len(data), receives=4)
    assert local_session.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    [copy] = received_with(local_session, event["Records"][0]["body"])
    assert copy["Body"] == event["Records"][0]["body"]
    assert copy["Attributes"]["ApproximateReceiveCount"] == "1"
    assert copy["MessageAttributes"]["mediajobs-handovers"]["StringValue"] == "1"
    key = planned_key(data, "web-image", local_session.stack.settings())
    assert local_session.stack.job_model().count(key) == 0  # no work was done on the handed-over receive
    local_session.sqs.delete_message(QueueUrl=local_session.stack.queue_url, ReceiptHandle=copy["ReceiptHandle"])


def test_after_two_handovers_a_record_is_processed_and_left_to_sqs(local_session):
    data = unique_png()
    put(local_session, "originals/w/handed-twice.png", data)
    event = _record(local_session, "originals/w/handed-twice.png", len(data), receives=4, handovers=2)
    assert local_session.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    key = planned_key(data, "web-image", local_session.stack.settings())
    row = local_session.stack.job_model().get(key)
    assert row.state == "done"


def test_a_record_that_does_not_parse_is_not_handed_over(local_session):
    """It is the batch processor's to report, with the rest of its batch."""
    bad = {
        "MessageId": "bad-4",
        "ReceiptHandle": "h",
        "Body": "{not json",
        "Attributes": {"ApproximateReceiveCount": "4"},
    }
    event = sqs_event([bad], local_session.stack.queue_arn, "us-east-1")
    swallow_queued(local_session)
    assert local_session.handler(event, LocalLambdaContext()) == {"batchItemFailures": [{"itemIdentifier": "bad-4"}]}
    assert (
        local_session.sqs.receive_message(QueueUrl=local_session.stack.queue_url, WaitTimeSeconds=1).get("Messages", [])
        == []
    )
