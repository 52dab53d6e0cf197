"""Moderation on the embedded AWS: the moderation job before every rendition, its three
outcomes (accepted, rejected by a hash rule, held for review), a person's review through
the service and the status function's ``POST /review``, the embedded
``DetectModerationLabels``, and the decision log's records against the ledger."""

from __future__ import annotations

import io
import json
import urllib.parse
import uuid
from pathlib import Path

import botocore.exceptions
import pytest
from PIL import Image

from mediajobs.bootstrap import active_recipes, build_reviews
from mediajobs.domain.assets import AssetState
from mediajobs.domain.jobs import JobState
from mediajobs.domain.moderation import Label
from mediajobs.domain.plan import Where, plan_jobs
from mediajobs.entrypoints.status import make_status_app
from mediajobs.local.decisions import DecisionLogReader
from mediajobs.local.function_events import function_url_event
from mediajobs.local.moderation_samples import card
from mediajobs.local.session import LocalSession
from mediajobs.service_layer.ports import LabelsFound
from tests.conftest import REPO, media_file

pytestmark = pytest.mark.subprocess

REVIEWER = "arn:aws:iam::123456789012:role/moderators"


@pytest.fixture(scope="module")
def session():
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-moderation") as s:
        yield s


def png(picture: Image.Image, level: int = 6) -> bytes:
    out = io.BytesIO()
    picture.save(out, "PNG", compress_level=level)
    return out.getvalue()


def upload(session: LocalSession, data: bytes, name: str) -> str:
    key = f"originals/moderation/{uuid.uuid4().hex}-{name}"
    session.s3.put_object(Bucket=session.stack.bucket, Key=key, Body=data)
    session.run()
    return key


def asset(session: LocalSession, key: str):
    return session.stack.assets().get(session.stack.bucket, key)


def listed(session: LocalSession, job_key: str) -> list[str]:
    found = session.s3.list_objects_v2(Bucket=session.stack.bucket, Prefix=f"derivatives/{job_key}/")
    return sorted(o["Key"].rsplit("/", 1)[1] for o in found.get("Contents", []))


def notifications(session: LocalSession, key: str) -> list[str]:
    """The detail-types the outbox holds for ``key``."""
    return sorted(item.type for item in session.stack.outbox_model().scan() if item.object_key == key)


def test_an_accepted_photo_is_moderated_once_before_its_renditions_which_hash_its_decision(session):
    data = (media_file("photos", "orientation-landscape-1.jpg")).read_bytes()
    key = upload(session, data, "photo.jpg")
    (result,) = session.collector.results[key]
    moderation, web, placeholder = result.jobs
    assert [j.recipe for j in result.jobs] == ["moderation-image@1", "web-image@1", "image-placeholder@1"]
    assert (result.state, moderation.state, web.state) == ("done", "done", "done")
    decision = moderation.decisions["moderation"]
    assert (decision["outcome"], decision["rule"], decision["policy"]) == ("accepted", None, "moderation-policy@1")
    assert (decision["label_source"], decision["model_version"], decision["human_loop"]) == ("rekognition", "7.0", None)
    (sample,) = decision["samples"]
    assert sample["labels"] == [] and len(sample["perceptual"]) == 16
    assert listed(session, moderation.job_key) == ["manifest.json"]  # a decision, no file
    # Each rendition's key hashes its moderation job's: one per (content, policy).
    where = Where(session.stack.bucket, key, "derivatives/", "1", session.stack.settings().keys)
    planned = {j.recipe.ref: j for j in plan_jobs(result.sha256, "image", active_recipes(), where)}
    assert planned["web-image@1"].spec.upstream == {moderation.job_key} == planned["image-placeholder@1"].spec.upstream
    assert asset(session, key).state == AssetState.READY


def test_the_known_bad_card_is_rejected_by_the_hash_rule_and_renders_nothing(session):
    key = upload(session, png(card("known-bad")), "known-bad.png")
    (result,) = session.collector.results[key]
    assert (result.state, result.reason) == ("rejected", "rejected")
    assert "rule perceptual:9a4771cbd85a5a35" in result.detail
    for job in result.jobs:
        assert (job.state, job.reason) == ("permanent_failure", "rejected")
        assert listed(session, job.job_key) == []  # nothing rendered, not even a manifest
    view = asset(session, key)
    assert (view.state, view.reason) == (AssetState.REJECTED, "rejected")
    row = session.stack.ledger().get(result.jobs[0].job_key)
    assert row.decisions["moderation"]["rule"] == "perceptual:9a4771cbd85a5a35"  # kept on the failed row
    # Delivered again: answered from the asset, told once.
    session.redeliver(list(session.esm.stats.bodies[-1:]))
    session.run()
    assert session.collector.results[key][-1].bytes_read == 0
    assert notifications(session, key) == ["Asset Rejected"]


def review_card(level: int) -> bytes:
    """The review card: the same picture (its perceptual hash declared) in new bytes."""
    return png(card("review"), level)


def test_a_held_asset_waits_for_a_person_and_is_ready_once_accepted(session):
    key = upload(session, review_card(1), "review-accept.png")
    (held,) = session.collector.results[key]
    assert held.state == "review"
    moderation = held.jobs[0]
    assert (
        moderation.state == "review" and moderation.decisions["moderation"]["rule"] == "label:Visually Disturbing>=80"
    )
    assert [j.state for j in held.jobs[1:]] == ["waiting", "waiting"]
    view = asset(session, key)
    assert view.state == AssetState.REVIEW and view.reason is None
    assert view.detail == "held for review: rule label:Visually Disturbing>=80: Visually Disturbing 91.5"
    renders = len(session.collector.renders)
    session.redeliver(list(session.esm.stats.bodies[-1:]))  # a duplicate while held: nothing read or rendered
    session.run()
    assert session.collector.results[key][-1].state == "review" and session.collector.results[key][-1].bytes_read == 0
    assert len(session.collector.renders) == renders
    reviews = reviews_of(session)
    answer = reviews.decide(key, "accepted", REVIEWER)
    assert (answer.state, answer.outcome, answer.by) == ("decided", "accepted", REVIEWER)
    session.run()
    view = asset(session, key)
    assert view.state == AssetState.READY and notifications(session, key) == ["Asset Ready"]
    row = session.stack.ledger().get(moderation.job_key)
    decision = row.decisions["moderation"]
    assert (row.state, decision["outcome"], decision["review"]["by"]) == ("done", "accepted", REVIEWER)
    assert decision["rule"] == "label:Visually Disturbing>=80"  # the machine's decision kept beside the person's
    again = reviews.decide(key, "rejected", "someone-else")
    assert (again.state, again.outcome, again.by) == ("already_decided", "accepted", REVIEWER)
    assert len(session.collector.renders) == renders + 2  # each rendition once, after the review


def reviews_of(session: LocalSession):
    stack = session.stack
    settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket)
    return build_reviews(settings, stack.clients(), stack.assets())


def post_review(session: LocalSession, key: str, outcome: str, caller: str, reviewers: str = REVIEWER):
    stack = session.stack
    settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket, reviewer_arns=reviewers)
    app = make_status_app(stack.assets(), settings, reviews=reviews_of(session))
    event = function_url_event(
        "key=" + urllib.parse.quote(key, safe=""),
        method="POST",
        path="/review",
        body=json.dumps({"outcome": outcome}),
        caller_arn=caller,
    )
    response = app.resolve(event, None)
    return response["statusCode"], json.loads(response["body"])


def test_the_review_route_decides_for_a_reviewer_only_and_a_rejection_renders_nothing(session):
    key = upload(session, review_card(9), "review-reject.png")
    assert asset(session, key).state == AssetState.REVIEW
    status, body = post_review(session, key, "rejected", "arn:aws:iam::123456789012:user/app")
    assert status == 403 and "REVIEWER_ARNS" in body["message"]
    status, body = post_review(session, key, "maybe", REVIEWER)
    assert status == 400
    status, body = post_review(session, key, "rejected", REVIEWER, reviewers="arn:aws:iam::123456789012:role/mod*")
    assert (status, body["state"], body["outcome"], body["by"]) == (200, "decided", "rejected", REVIEWER)
    session.run()
    view = asset(session, key)
    assert (view.state, view.reason) == (AssetState.REJECTED, "rejected")
    assert "rejected by a person in review" in view.detail and REVIEWER not in view.detail  # the ARN is the ledger's
    for job in session.stack.ledger().find([j.job_key for j in view.jobs]).values():
        assert job.state == JobState.PERMANENT_FAILURE and listed(session, job.job_key) == []
    assert notifications(session, key) == ["Asset Rejected"]
    status, body = post_review(session, key, "accepted", REVIEWER)
    assert (status, body["state"], body["outcome"]) == (200, "already_decided", "rejected")
    status, _ = post_review(session, "originals/moderation/nothing.png", "accepted", REVIEWER)
    assert status == 404
    photo = upload(session, (media_file("photos", "orientation-landscape-2.jpg")).read_bytes(), "ready.jpg")
    status, body = post_review(session, photo, "accepted", REVIEWER)
    assert (status, body["state"]) == (409, "not_held")


def detect(session: LocalSession, picture: bytes, **kwargs):
    client = session.stack.client("rekognition")
    return client.detect_moderation_labels(Image={"Bytes": picture}, **kwargs)


def test_the_embedded_aws_answers_detect_moderation_labels_from_declared_labels(session):
    declared = detect(session, review_card(3))
    assert declared["ModerationModelVersion"] == "7.0" and "HumanLoopActivationOutput" not in declared
    assert [(label["Name"], label["ParentName"], label["Confidence"]) for label in declared["ModerationLabels"]] == [
        ("Visually Disturbing", "", 91.5)
    ]
    assert detect(session, review_card(3), MinConfidence=95)["ModerationLabels"] == []  # below MinConfidence
    assert detect(session, png(card("plain")))["ModerationLabels"] == []  # nothing declared
    client = session.stack.client("rekognition")
    for picture, code in ((b"GIF89a not a jpeg or png", "InvalidImageFormatException"),
                          (b"\xff" * (5_242_880 + 1), "ImageTooLargeException")):  # fmt: skip
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            client.detect_moderation_labels(Image={"Bytes": picture})
        assert refused.value.response["Error"]["Code"] == code
    key = upload(session, review_card(4), "by-s3-object.png")  # Image.S3Object is read from the embedded S3
    by_object = client.detect_moderation_labels(Image={"S3Object": {"Bucket": session.stack.bucket, "Name": key}})
    assert [label["Name"] for label in by_object["ModerationLabels"]] == ["Visually Disturbing"]


def test_every_processing_start_in_the_ledger_has_its_decision_record(session):
    """``decisions_missing`` = 0: every claim a job's row counts has a ``process`` or
    ``takeover`` record (or, committing a review, the review's), and every moderation
    outcome and review is recorded with its rule or reviewer."""
    upload(session, png(card("known-bad"), 3), "log-bad.png")  # what it needs, whatever ran before it
    for level, outcome in ((5, "accepted"), (6, "rejected")):
        held = upload(session, review_card(level), f"log-{outcome}.png")
        reviews_of(session).decide(held, outcome, REVIEWER)
        session.run()
    reader = DecisionLogReader(session.stack.client("s3"), session.stack.decisions_bucket)
    with reader.records() as folder:
        records = [
            json.loads(line) for path in sorted(Path(folder).glob("*.json")) for line in path.read_text().splitlines()
        ]
    starts: dict[str, int] = {}
    for r in records:
        if r["action"] in ("process", "takeover") or (r["action"] in ("accepted", "rejected") and r.get("reviewer")):
            starts[r["job"]] = starts.get(r["job"], 0) + 1
    rows = session.stack.job_model().scan()
    missing = [row.job_key for row in rows if int(row.attempts or 0) > starts.get(row.job_key[:16], 0)]
    assert missing == []
    assert all(set(r) >= {"t", "corr", "asset", "content", "recipe", "policy", "key_v", "prior"} for r in records)
    assert not any("originals/" in json.dumps(r) for r in records)  # never a key or a file name
    reviewed = [r for r in records if r.get("reviewer") == REVIEWER]
    assert {r["action"] for r in reviewed} == {"accepted", "rejected"}
    outcomes = {r["action"] for r in records if r["action"] in ("accepted", "rejected", "review")}
    assert outcomes == {"accepted", "rejected", "review"}
    assert any(r.get("rule", "").startswith("perceptual:") for r in records if r["action"] == "rejected")


def test_a_picture_hidden_in_its_alpha_channel_is_judged_as_a_dark_page_shows_it(session):
    """White pixels carrying the known-bad card in their alpha: blank on white, the card on
    black -- and the renditions keep the alpha. Judged on both, it is rejected."""
    bad = card("known-bad").convert("L")
    hidden = Image.merge("RGBA", [Image.new("L", bad.size, 255)] * 3 + [bad])
    key = upload(session, png(hidden), "hidden.png")
    (result,) = session.collector.results[key]
    assert (result.state, result.reason) == ("rejected", "rejected")
    samples = session.stack.ledger().get(result.jobs[0].job_key).decisions["moderation"]["samples"]
    assert [s["perceptual"] for s in samples] == ["0000000000000000", "9a4771cbd85a5a35"]  # on white, on black
    assert all(listed(session, job.job_key) == [] for job in result.jobs)


def test_held_and_waiting_jobs_of_a_deleted_upload_are_collected_and_block_nothing(session):
    from mediajobs.bootstrap import build_collector
    from mediajobs.local.session import local_adapters

    key = upload(session, review_card(2) + b"\0", "held-then-deleted.png")  # distinct bytes, the same picture
    held = [job.job_key for job in asset(session, key).jobs]
    session.s3.delete_object(Bucket=session.stack.bucket, Key=key)
    session.run()
    report = build_collector(session.settings, local_adapters(session.stack, session.settings)).run(grace_s=0)
    assert report.busy == 0
    rows = session.stack.ledger().find(held)
    assert {k: rows[k].state for k in held} == dict.fromkeys(held, JobState.COLLECTED)


def test_the_review_route_refuses_what_get_refuses_and_malformed_bodies_with_400(session):
    for query, body in (
        ("key=" + urllib.parse.quote("derivatives/x/manifest.json", safe=""), '{"outcome": "accepted"}'),
        ("key=originals/" + "k" * 1100 + ".png", '{"outcome": "accepted"}'),
        ("key=originals/a.png", "[" * 100_000),
        ("key=originals/a.png", '{"outcome": "accepted", "pad": "' + "x" * 2000 + '"}'),
    ):
        stack = session.stack
        settings = stack.settings(jobs_queue_arn=stack.queue_arn, media_bucket=stack.bucket, reviewer_arns=REVIEWER)
        app = make_status_app(stack.assets(), settings, reviews=reviews_of(session))
        event = function_url_event(query, method="POST", path="/review", body=body, caller_arn=REVIEWER)
        assert app.resolve(event, None)["statusCode"] == 400, query[:40]
    event = function_url_event("key=originals/a.png", method="POST", path="/review", body="!!!", caller_arn=REVIEWER)
    event["isBase64Encoded"] = True
    assert app.resolve(event, None)["statusCode"] == 400


def test_the_embedded_aws_refuses_a_decompression_bomb_as_rekognition_does(session):
    out = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(out, "PNG")  # 400 megapixels in a few KB
    client = session.stack.client("rekognition")
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        client.detect_moderation_labels(Image={"Bytes": out.getvalue()})
    assert refused.value.response["Error"]["Code"] == "ImageTooLargeException"


class SeesMore:
    """A label source whose model, once ``seeing`` is set, finds Visually Disturbing in every
    picture (a model update): the label source as Rekognition's next version might be."""

    name = "rekognition"

    def __init__(self, inner) -> None:
        self.inner, self.seeing = inner, False

    def detect(self, jpeg, *, min_confidence):
        if self.seeing:
            return LabelsFound((Label("Visually Disturbing", "", 91.5),), "7.1", None)
        return self.inner.detect(jpeg, min_confidence=min_confidence)


def test_renditions_taken_back_from_collection_wait_for_their_moderation_held_again(tmp_path):
    """A photo accepted, deleted and collected, then uploaded again when the label source now
    holds it: the renditions, whose collected rows a claim takes over, wait for the review
    again (not failed for an input that is not done), and run once it is accepted."""
    import dataclasses

    from mediajobs.bootstrap import build_collector
    from mediajobs.local.session import local_adapters
    from mediajobs.steps.moderation import ModerationImage

    seeing: list[SeesMore] = []

    def wrap(adapters):
        steps = dict(adapters.steps)
        gate = steps["moderation.image"]
        seeing.append(SeesMore(gate.labels))
        steps["moderation.image"] = ModerationImage(seeing[-1], gate._sample)
        return dataclasses.replace(adapters, steps=steps)

    data = (media_file("photos", "orientation-landscape-1.jpg")).read_bytes()
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-remoderate",
                      wrap_adapters=wrap) as s:  # fmt: skip
        first = upload(s, data, "accepted.jpg")
        jobs = [j.job_key for j in s.collector.results[first][-1].jobs]
        s.s3.delete_object(Bucket=s.stack.bucket, Key=first)
        s.run()
        assert build_collector(s.settings, local_adapters(s.stack, s.settings)).run(grace_s=0).collected == 3
        for labels in seeing:
            labels.seeing = True
        again = upload(s, data, "held.jpg")
        view = asset(s, again)
        rows = s.stack.ledger().find(jobs)
        assert view.state == AssetState.REVIEW and [rows[k].state for k in jobs] == ["review", "waiting", "waiting"]
        assert all(rows[k].failure_reason is None for k in jobs)
        reviews_of(s).decide(again, "accepted", REVIEWER)
        s.run()
        assert asset(s, again).state == AssetState.READY and notifications(s, again) == ["Asset Ready"]
