"""The label source's contract with Rekognition's ``DetectModerationLabels``, held by
botocore's Stubber against the service model (request and response shapes validated):
``HumanLoopActivationOutput`` absent and present, and each error class."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from mediajobs.adapters.rekognition import RekognitionLabels
from mediajobs.domain.errors import INVALID_MEDIA, PermanentFailure, TransientFailure
from mediajobs.domain.moderation import Label

JPEG = b"\xff\xd8\xff\xe0 a jpeg"


def stubbed():
    client = boto3.client("rekognition", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    return client, Stubber(client)


def test_labels_and_the_model_version_are_read_without_a_human_loop():
    client, stub = stubbed()
    response = {
        "ModerationLabels": [
            {"Confidence": 93.25, "Name": "Violence", "ParentName": "", "TaxonomyLevel": 1},
            {"Confidence": 93.25, "Name": "Weapons", "ParentName": "Violence", "TaxonomyLevel": 2},
        ],
        "ModerationModelVersion": "7.0",
        "ContentTypes": [{"Confidence": 99.1, "Name": "Animated"}],
    }
    stub.add_response("detect_moderation_labels", response, {"Image": {"Bytes": JPEG}, "MinConfidence": 50.0})
    with stub:
        found = RekognitionLabels(lambda: client).detect(JPEG, min_confidence=50.0)
    assert found.labels == (Label("Violence", "", 93.25), Label("Weapons", "Violence", 93.25))
    assert (found.model_version, found.human_loop) == ("7.0", None)
    stub.assert_no_pending_responses()


def test_a_human_loop_activation_is_kept():
    client, stub = stubbed()
    response = {
        "ModerationLabels": [],
        "ModerationModelVersion": "7.0",
        "HumanLoopActivationOutput": {
            "HumanLoopArn": "arn:aws:sagemaker:us-east-1:123456789012:human-loop/loop-1",
            "HumanLoopActivationReasons": ["ConditionsEvaluation"],
            "HumanLoopActivationConditionsEvaluationResults": '{"Conditions": []}',
        },
    }
    stub.add_response("detect_moderation_labels", response, {"Image": {"Bytes": JPEG}, "MinConfidence": 60.0})
    with stub:
        found = RekognitionLabels(lambda: client).detect(JPEG, min_confidence=60.0)
    assert found.human_loop == {
        "HumanLoopArn": "arn:aws:sagemaker:us-east-1:123456789012:human-loop/loop-1",
        "HumanLoopActivationReasons": ["ConditionsEvaluation"],
    }


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InvalidImageFormatException", PermanentFailure),
        ("ImageTooLargeException", PermanentFailure),
        ("ThrottlingException", TransientFailure),
        ("ProvisionedThroughputExceededException", TransientFailure),
        ("InternalServerError", TransientFailure),
        ("AccessDeniedException", TransientFailure),  # a deployment's fault: retried, then alarmed on
    ],
)
def test_errors_name_the_picture_or_are_retried(code, kind):
    client, stub = stubbed()
    stub.add_client_error("detect_moderation_labels", service_error_code=code, http_status_code=400)
    with stub, pytest.raises(kind) as raised:
        RekognitionLabels(lambda: client).detect(JPEG, min_confidence=50.0)
    if kind is PermanentFailure:
        assert raised.value.reason == INVALID_MEDIA and code in raised.value.detail


def test_the_client_is_made_at_the_first_request_only():
    made = []
    RekognitionLabels(lambda: made.append(1))
    assert made == []
