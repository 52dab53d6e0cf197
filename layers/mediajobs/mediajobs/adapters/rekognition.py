"""Rekognition's ``DetectModerationLabels`` as the moderation steps' label source.

The request sends the picture's bytes (``Image.Bytes``: JPEG or PNG, at most 5,242,880
bytes; the API reference) with ``MinConfidence``; the response's ``ModerationLabels`` carry
``Name``, ``ParentName`` (``""`` at the top level), ``Confidence`` (0-100) and, since model 7,
``TaxonomyLevel``; ``ModerationModelVersion`` names the model ("7.0"), and
``HumanLoopActivationOutput`` is present only when a human loop was configured and
activated. Errors: ``ThrottlingException``, ``ProvisionedThroughputExceededException``,
``InternalServerError`` and connection failures pass (transient); ``InvalidImageFormatException``
and ``ImageTooLargeException`` name the picture (``invalid_media``: the worker made it, so a
refusal means the content cannot be moderated). ``tests/functional/test_rekognition_contract.py``
holds the shapes with botocore's Stubber.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from mediajobs.domain.errors import INVALID_MEDIA, PermanentFailure, TransientFailure
from mediajobs.domain.moderation import Label
from mediajobs.service_layer.ports import LabelsFound

log = logging.getLogger(__name__)

#: Error codes of ``DetectModerationLabels`` that name the picture, not the service.
REFUSES_PICTURE: Final = frozenset(
    {"InvalidImageFormatException", "ImageTooLargeException", "InvalidParameterException"}
)


class RekognitionLabels:
    """The :class:`~mediajobs.service_layer.ports.LabelSource` port over a ``rekognition``
    client (:meth:`mediajobs.adapters.clients.ClientFactory.client`), made by
    ``make_client`` at the first request (a worker that moderates nothing builds none)."""

    name: Final = "rekognition"

    def __init__(self, make_client: Callable[[], Any]) -> None:
        self._make_client = make_client
        self._client: Any = None

    def detect(self, jpeg: bytes, *, min_confidence: float) -> LabelsFound:
        """``DetectModerationLabels`` of ``jpeg`` (module docstring).

        Raises
        ------
        PermanentFailure
            ``invalid_media`` when Rekognition refuses the picture.
        TransientFailure
            Any other error.
        """
        if self._client is None:
            self._client = self._make_client()
        try:
            response = self._client.detect_moderation_labels(Image={"Bytes": jpeg}, MinConfidence=min_confidence)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in REFUSES_PICTURE:
                raise PermanentFailure(INVALID_MEDIA, f"DetectModerationLabels refused the picture: {code}") from exc
            raise TransientFailure(f"DetectModerationLabels: {code or exc}") from exc
        except BotoCoreError as exc:
            raise TransientFailure(f"DetectModerationLabels: {exc}") from exc
        return labels_found(response)


def labels_found(response: dict[str, Any]) -> LabelsFound:
    """The :class:`LabelsFound` of a ``DetectModerationLabels`` response (its documented
    shape: ``ModerationLabels``, ``ModerationModelVersion``, ``HumanLoopActivationOutput``
    when present)."""
    labels = tuple(
        Label(str(item.get("Name", "")), str(item.get("ParentName", "") or ""), float(item.get("Confidence", 0.0)))
        for item in response.get("ModerationLabels", [])
    )
    loop = response.get("HumanLoopActivationOutput")
    human_loop = None
    if isinstance(loop, dict):
        human_loop = {
            "HumanLoopArn": loop.get("HumanLoopArn"),
            "HumanLoopActivationReasons": list(loop.get("HumanLoopActivationReasons", [])),
        }
    return LabelsFound(labels, response.get("ModerationModelVersion"), human_loop)
