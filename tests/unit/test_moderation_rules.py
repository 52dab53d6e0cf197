"""Moderation's pure rules: the plan's gate, the asset states review and rejected, a video's
sampled frames, the verdict over several samples, a review's decision, and who may review."""

from __future__ import annotations

import pytest

from mediajobs.bootstrap import active_recipes
from mediajobs.domain.assets import AssetJob, AssetJobState, AssetState, may_move, summarize
from mediajobs.domain.errors import REJECTED
from mediajobs.domain.jobs import DECISIONS_OUTPUT, ContentInput, OutputInput
from mediajobs.domain.keys import NO_POLICY
from mediajobs.domain.moderation import (
    ACCEPTED,
    MODERATION_INPUT,
    Label,
    PolicyError,
    Sample,
    judged,
    load_policy,
    policy_of,
    with_review,
)
from mediajobs.domain.plan import Where, plan_jobs
from mediajobs.domain.status import review_request, reviewer_allowed
from mediajobs.steps.moderation import POSTER_AT_FRACTION, frame_times
from tests.fakes import TEST_KEYS

SHA = "ab" * 32


def where(policy: str) -> Where:
    return Where("bucket", "originals/a.jpg", "derivatives/", policy, TEST_KEYS)


def test_under_a_policy_the_moderation_job_comes_first_and_every_rendition_waits_for_it():
    jobs = plan_jobs(SHA, "image", active_recipes(), where("1"))
    gate, web, placeholder = jobs
    assert [j.recipe.ref for j in jobs] == ["moderation-image@1", "web-image@1", "image-placeholder@1"]
    assert gate.spec.inputs == {"original": ContentInput(SHA)} and gate.spec.waiting == {web.key, placeholder.key}
    for job in (web, placeholder):
        assert job.spec.inputs == {
            "original": ContentInput(SHA),
            MODERATION_INPUT: OutputInput(gate.key, DECISIONS_OUTPUT),
        }
        assert job.spec.upstream == {gate.key}


def test_without_a_policy_nothing_is_moderated_and_the_keys_are_the_bare_ones():
    jobs = plan_jobs(SHA, "image", active_recipes(), where(NO_POLICY))
    assert [j.recipe.ref for j in jobs] == ["web-image@1", "image-placeholder@1"]
    assert all(j.spec.inputs == {"original": ContentInput(SHA)} for j in jobs)


def test_a_new_policy_version_gives_every_job_a_new_key():
    one = {j.recipe.ref: j.key for j in plan_jobs(SHA, "image", active_recipes(), where("1"))}
    two = {j.recipe.ref: j.key for j in plan_jobs(SHA, "image", active_recipes(), where("2"))}
    assert set(one) == set(two) and not set(one.values()) & set(two.values())


def test_policy_of_names_a_policy_or_none():
    assert policy_of(NO_POLICY) is None and policy_of("1") == load_policy(1)
    for bad in ("0", "v1", "", "1.0"):
        with pytest.raises(PolicyError):
            policy_of(bad)


def job(state: AssetJobState, reason: str | None = None) -> AssetJob:
    return AssetJob("r@1", f"{state}-{reason}", state, reason=reason)


def test_an_asset_is_rejected_by_a_rejected_job_and_in_review_while_one_is_held():
    assert summarize([job(AssetJobState.FAILED, REJECTED), job(AssetJobState.PENDING)])[0] == AssetState.REJECTED
    assert summarize([job(AssetJobState.FAILED, "corrupt_image")])[0] == AssetState.FAILED
    assert summarize([job(AssetJobState.REVIEW), job(AssetJobState.PENDING)])[0] == AssetState.REVIEW
    assert summarize([job(AssetJobState.DONE), job(AssetJobState.PROCESSING)])[0] == AssetState.PROCESSING


def test_review_goes_on_to_processing_once_accepted_and_final_states_never_move():
    assert may_move(AssetState.PROCESSING, AssetState.REVIEW)
    assert may_move(AssetState.REVIEW, AssetState.PROCESSING)  # accepted: the renditions run
    assert may_move(AssetState.REVIEW, AssetState.REJECTED) and may_move(AssetState.REVIEW, AssetState.READY)
    assert not may_move(AssetState.REJECTED, AssetState.READY) and not may_move(AssetState.READY, AssetState.REJECTED)
    assert not may_move(AssetState.READY, AssetState.REVIEW)


def test_a_video_is_sampled_at_its_poster_and_every_interval_at_most_max_frames():
    assert frame_times(12.0, 5.0, 120) == [round(12.0 * POSTER_AT_FRACTION, 3), 0.0, 5.0, 10.0]
    long = frame_times(3 * 3600.0, 5.0, 120)
    assert len(long) == 120 and long[0] == 1080.0 and long[1:3] == [0.0, pytest.approx(10800 / 119, abs=1e-3)]
    assert frame_times(0.0, 5.0, 10) == [0.0]
    with pytest.raises(ValueError):
        frame_times(10.0, 0.0, 10)


def test_the_strictest_frame_decides_and_says_when():
    policy = load_policy(1)
    calm = Sample(0.0, 0x0123456789ABCDEF)
    disturbing = Sample(35.0, 0x0F0F0F0F0F0F0F0F, (Label("Visually Disturbing", "", 88.0),))
    explicit = Sample(40.0, 0x0F0F0F0F0F0F0F0E, (Label("Explicit", "", 97.0),))
    assert judged(policy, sha256=SHA, samples=[calm]).outcome == ACCEPTED
    held = judged(policy, sha256=SHA, samples=[calm, disturbing])
    assert (held.outcome, held.rule, held.evidence) == (
        "review",
        "label:Visually Disturbing>=80",
        "frame at 35.0 s: Visually Disturbing 88.0",
    )
    assert judged(policy, sha256=SHA, samples=[calm, disturbing, explicit]).outcome == "rejected"
    known = judged(policy, sha256=SHA, samples=[Sample(None, 0x9A4771CBD85A5A35 ^ 0b101)])  # 2 bits off the card
    assert (known.outcome, known.rule, known.evidence) == ("rejected", "perceptual:9a4771cbd85a5a35", "distance 2 <= 6")


def test_a_review_keeps_the_machines_decision_and_records_the_persons():
    held = {"moderation": {"outcome": "review", "rule": "label:Violence>=80"}, "other": 1}
    decided = with_review(held, {"outcome": "accepted", "by": "arn:aws:iam::1:role/mod", "at_s": 5})
    assert decided == {
        "moderation": {
            "outcome": "accepted",
            "rule": "label:Violence>=80",
            "review": {"outcome": "accepted", "by": "arn:aws:iam::1:role/mod", "at_s": 5},
        },
        "other": 1,
    }
    with pytest.raises(ValueError):
        with_review(held, {"outcome": "review"})
    with pytest.raises(ValueError):
        with_review({}, {"outcome": "accepted"})


def test_a_role_session_is_matched_by_its_roles_arn_and_a_star_crosses_no_slash():
    role = "arn:aws:iam::123456789012:role/moderators"
    assert reviewer_allowed("arn:aws:sts::123456789012:assumed-role/moderators/alice", role)
    assert not reviewer_allowed("arn:aws:sts::123456789012:assumed-role/moderators-evil/x", role)
    assert not reviewer_allowed("arn:aws:sts::999999999999:assumed-role/moderators/alice", role)
    assert not reviewer_allowed("arn:aws:iam::123456789012:role/team/moderators", "arn:aws:iam::123456789012:role/*")


def test_a_persons_decision_runs_however_many_claims_the_moderation_took():
    from mediajobs.domain.jobs import Decision, JobState, JobView, decide, reviewed

    held = JobView("k", JobState.REVIEW.value, "t4", 0, 4)  # four claims: three throttled, one held
    changes = reviewed({"outcome": "accepted", "by": "ana", "at_s": 1}, 2)
    row = JobView("k", changes["state"], "t4", 0, changes["attempts"], review=changes["review"])
    assert decide(held, now_s=3, max_attempts=4) is Decision.HELD
    assert decide(row, now_s=3, max_attempts=4) is Decision.TAKE_OVER


def test_only_a_listed_principal_may_review():
    patterns = "arn:aws:iam::123456789012:role/moderators, arn:aws:sts::123456789012:assumed-role/mod/*"  # noqa: E501
    assert reviewer_allowed("arn:aws:iam::123456789012:role/moderators", patterns)
    assert reviewer_allowed("arn:aws:sts::123456789012:assumed-role/mod/ana", patterns)
    assert not reviewer_allowed("arn:aws:iam::123456789012:role/moderators-not", patterns)
    assert not reviewer_allowed("arn:aws:iam::123456789012:user/app", patterns)
    assert not reviewer_allowed("arn:aws:iam::123456789012:role/moderators", "")
    assert not reviewer_allowed(None, "*")


def test_a_review_request_names_one_key_and_an_outcome():
    assert review_request("key=originals%2Fa.jpg", '{"outcome": "rejected"}') == ("originals/a.jpg", "rejected", None)
    for query, body in (("", '{"outcome": "accepted"}'), ("key=a&key=b", "{}"), ("key=a", "no"), ("key=a", "[]")):
        key, outcome, problem = review_request(query, body)
        assert (key, outcome) == (None, None) and problem
