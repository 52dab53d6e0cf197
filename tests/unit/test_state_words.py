"""One word per state for an app: ``process --json`` (:func:`public_state` of the worker's
states), the status document (``AssetState``, ``AssetJobState``) and the notifications
(their ``asset`` is the status document) say ``failed`` for an end for good, never
``permanent_failure``."""

from __future__ import annotations

from mediajobs.domain.assets import AssetJob, AssetJobState, AssetState, AssetVersion, AssetView, status_document
from mediajobs.domain.jobs import JobState, SourceState, public_state
from mediajobs.domain.notifications import notification_for

FAILED = "failed"


def test_the_worker_states_read_as_the_status_documents_words():
    assert public_state(SourceState.PERMANENT_FAILURE) == public_state(JobState.PERMANENT_FAILURE) == FAILED
    assert AssetState.FAILED == AssetJobState.FAILED == FAILED
    assert public_state(SourceState.DONE) == public_state(JobState.DONE) == AssetJobState.DONE == "done"
    words = {public_state(s) for s in (*SourceState, *JobState)}
    assert "permanent_failure" not in words


def test_a_failed_asset_is_failed_in_its_status_document_and_its_notification():
    version = AssetVersion("v1", "e1", 10, "0" * 48 + "0000000000000001")
    job = AssetJob("web-image@1", "a" * 64, AssetJobState.FAILED, reason="corrupt_image")
    processing = AssetView("media", "originals/a.jpg", AssetState.PROCESSING, version, jobs=(job,))
    failed = AssetView("media", "originals/a.jpg", AssetState.FAILED, version, reason="corrupt_image", jobs=(job,))
    document = status_document(failed)
    told = notification_for(processing, failed)
    assert told is not None
    assert document["state"] == told.payload["asset"]["state"] == FAILED
    assert document["recipes"]["web-image@1"]["state"] == FAILED
    assert "permanent_failure" not in repr(document) + repr(told.payload)
