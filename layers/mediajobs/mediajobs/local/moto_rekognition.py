"""The embedded AWS answers Rekognition's ``DetectModerationLabels`` (moto 5.2 raises
``NotImplementedError`` for it), with Rekognition's request and response shapes, from
labels **declared** for pictures (``local/declared-labels.json``): not a model.

Applied while an embedded AWS is open (:mod:`mediajobs.local.adaptations`).

Why declared labels and no local classifier: the candidates on PyPI either carry their
weights under a licence this MIT project cannot ship beside its code (nudenet 3.4.2's wheel
has an AGPL-3.0 LICENSE file under an MIT classifier) or cover one category of the
taxonomy. A declared label is honest about what it is; the demo and docs/moderation.md say
so. The hash rules of a policy do not depend on labels and run the same locally and
deployed.

The answer (:func:`moderation_answer`):

* ``Image.Bytes`` (base64 in the JSON request, as botocore sends it) must decode as JPEG
  or PNG, at most 5,242,880 bytes, else ``InvalidImageFormatException`` /
  ``ImageTooLargeException`` (400), as Rekognition answers; ``Image.S3Object`` is read from
  the embedded S3.
* The picture's difference hash picks the declared entry within its ``max_distance``;
  labels of ``Confidence`` below ``MinConfidence`` (default 50) are left out.
* ``ModerationModelVersion`` is the file's (``"7.0"``); ``HumanLoopActivationOutput`` is
  absent, as when no human loop is configured.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import json
from importlib import resources
from typing import Any, Final

from mediajobs.local.adaptations import Patches

#: Rekognition's largest ``Image.Bytes``, bytes (its API reference: ``Bytes`` max 5242880).
MAX_IMAGE_BYTES: Final = 5_242_880


@functools.cache
def declared_labels() -> dict[str, Any]:
    """The declared labels file (``mediajobs/local/declared-labels.json``), parsed once."""
    text = resources.files("mediajobs.local").joinpath("declared-labels.json").read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(text)
    return document


class RekognitionError(Exception):
    """A Rekognition error answer: its ``code`` (``__type``) and message, status 400."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def moderation_answer(image_bytes: bytes, min_confidence: float = 50.0) -> dict[str, Any]:
    """The ``DetectModerationLabels`` response for a picture (module docstring).

    Raises
    ------
    RekognitionError
        ``ImageTooLargeException`` over :data:`MAX_IMAGE_BYTES`; ``InvalidImageFormatException``
        for bytes that are not a JPEG or PNG picture.
    """
    from PIL import Image, UnidentifiedImageError

    from mediajobs.adapters.perceptual import dhash
    from mediajobs.domain.moderation import hamming

    if len(image_bytes) > MAX_IMAGE_BYTES:
        raise RekognitionError("ImageTooLargeException", f"Image size is too large: {len(image_bytes)} bytes")
    try:
        with Image.open(io.BytesIO(image_bytes)) as picture:
            if picture.format not in ("JPEG", "PNG"):
                raise RekognitionError("InvalidImageFormatException", "Request has unsupported image format")
            picture.load()
            hashed = dhash(picture)
    except Image.DecompressionBombError as exc:  # more pixels than Pillow decodes: Rekognition's too large
        raise RekognitionError("ImageTooLargeException", f"Image size is too large: {exc}") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise RekognitionError("InvalidImageFormatException", f"Request has invalid image format: {exc}") from None
    declared = declared_labels()
    labels: list[dict[str, Any]] = []
    for entry in declared["pictures"]:
        if hamming(hashed, int(entry["perceptual"], 16)) <= int(entry["max_distance"]):
            labels = [dict(label) for label in entry["labels"] if float(label["Confidence"]) >= min_confidence]
            break
    return {"ModerationLabels": labels, "ModerationModelVersion": declared["model_version"]}


class DetectModerationLabels:
    """Add ``detect_moderation_labels`` to moto's ``RekognitionResponse`` (the action moto
    dispatches ``RekognitionService.DetectModerationLabels`` to), answering
    :func:`moderation_answer`."""

    def apply(self, patches: Patches) -> None:
        """Set ``RekognitionResponse.detect_moderation_labels``."""
        from moto.rekognition.responses import RekognitionResponse

        def detect_moderation_labels(response: Any) -> Any:
            params = json.loads(response.body or "{}")
            image = params.get("Image") or {}
            try:
                data = _image_bytes(image)
                answer = moderation_answer(data, float(params.get("MinConfidence", 50.0)))
            except RekognitionError as error:
                body = json.dumps({"__type": error.code, "message": error.message})
                return 400, {"status": 400, "x-amzn-ErrorType": error.code}, body
            return json.dumps(answer)

        patches.set(RekognitionResponse, "detect_moderation_labels", detect_moderation_labels)


def _image_bytes(image: dict[str, Any]) -> bytes:
    """The bytes an ``Image`` names: ``Bytes`` (base64 in the JSON body), or an
    ``S3Object`` read from the embedded S3 (its ``Version`` when given)."""
    if "Bytes" in image:
        try:
            return base64.b64decode(image["Bytes"], validate=True)
        except (binascii.Error, ValueError):
            raise RekognitionError("InvalidImageFormatException", "Image.Bytes is not base64") from None
    s3 = image.get("S3Object")
    if not isinstance(s3, dict):
        raise RekognitionError("InvalidParameterException", "Image needs Bytes or S3Object")
    from moto.s3.models import s3_backends

    for account in s3_backends.values():
        for backend in account.values():
            if s3.get("Bucket") in backend.buckets:
                key = backend.get_object(s3["Bucket"], s3.get("Name", ""), version_id=s3.get("Version"))
                if key is None:
                    break
                return bytes(key.value)
    raise RekognitionError("InvalidS3ObjectException", "Unable to get object metadata from S3")
