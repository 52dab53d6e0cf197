"""Notification ids, which writes owe a notification, and how webhook answers are
classified: pure rules, no AWS."""

from __future__ import annotations

import dataclasses

import pytest

from mediajobs.domain.assets import AssetJob, AssetJobState, AssetState, AssetVersion, AssetView
from mediajobs.domain.notifications import (
    NotificationType,
    Verdict,
    backoff_s,
    notification_for,
    notification_id,
    retry_after_s,
    webhook_verdict,
)

V1 = AssetVersion("v1", "e1", 10, "0" * 48 + "0000000000000001")
V2 = AssetVersion("v2", "e2", 12, "0" * 48 + "0000000000000002")
JOBS = (AssetJob("web-image@1", "a" * 64, AssetJobState.DONE), AssetJob("image-placeholder@1", "b" * 64))


def view(state: AssetState, version: AssetVersion = V1, jobs=JOBS) -> AssetView:
    return AssetView("media", "originals/a.jpg", state, version, sha256="c" * 64, media="image", jobs=jobs)


def test_a_notification_id_is_pinned():
    """A change of the id's document must be deliberate (a new NOTIFICATION_ID_VERSION):
    consumers deduplicate on it."""
    nid = notification_id(
        "media", "originals/a.jpg", V1, NotificationType.READY, ["web-image@1", "image-placeholder@1"]
    )
    assert nid == "bfc5ab406fd74e375bd5c6cd7448611b2e247c32c8f9fa5d264c6b9c244f3544"


def test_the_id_depends_on_the_transition_only():
    args = ("media", "originals/a.jpg", V1, NotificationType.READY)
    same = notification_id(*args, ["web-image@1", "image-placeholder@1"])
    assert notification_id(*args, ["image-placeholder@1", "web-image@1", "web-image@1"]) == same
    assert notification_id(*args, ["web-image@1"]) != same
    assert notification_id("media", "originals/a.jpg", V1, NotificationType.FAILED, ["web-image@1"]) != same
    assert notification_id("media", "originals/a.jpg", V2, NotificationType.READY, ["web-image@1"]) != same
    assert notification_id("other", "originals/a.jpg", V1, NotificationType.READY, ["web-image@1"]) != same
    # The same version made current again by a later event (its newer version deleted):
    again = dataclasses.replace(V1, sequencer="0" * 48 + "0000000000000003")
    assert notification_id(*args[:2], again, NotificationType.READY, ["web-image@1", "image-placeholder@1"]) != same


def test_an_unversioned_object_is_named_by_etag_size_and_sequencer():
    plain = AssetVersion(None, "e1", 10, V1.sequencer)
    nid = notification_id("media", "k", plain, NotificationType.READY, ["r@1"])
    assert nid != notification_id("media", "k", dataclasses.replace(plain, etag="e2"), NotificationType.READY, ["r@1"])
    assert nid != notification_id(
        "media", "k", dataclasses.replace(plain, size_bytes=11), NotificationType.READY, ["r@1"]
    )


@pytest.mark.parametrize(
    ("old", "new", "owed"),
    [
        (view(AssetState.PROCESSING), view(AssetState.READY), NotificationType.READY),
        (view(AssetState.PENDING), view(AssetState.FAILED), NotificationType.FAILED),
        (None, view(AssetState.FAILED), NotificationType.FAILED),
        (view(AssetState.READY), view(AssetState.READY), None),
        (view(AssetState.READY), view(AssetState.READY, V2), NotificationType.READY),
        (view(AssetState.PROCESSING), view(AssetState.PROCESSING), None),
        (view(AssetState.PENDING, V2), view(AssetState.PROCESSING, V2), None),
        (view(AssetState.READY), view(AssetState.DELETED, V2), NotificationType.DELETED),
        (None, view(AssetState.DELETED), None),
        (view(AssetState.DELETED), view(AssetState.DELETED, V2), None),
    ],
    ids=[
        "ready",
        "failed",
        "failed-at-once",
        "ready-again",
        "new-version-ready",
        "processing",
        "new-version-processing",
        "deleted",
        "unknown-deleted",
        "deleted-again",
    ],
)
def test_which_writes_owe_a_notification(old, new, owed):
    found = notification_for(old, new)
    assert (found.type if found else None) == owed


def test_a_notification_carries_the_status_document_and_its_id():
    found = notification_for(view(AssetState.PROCESSING), view(AssetState.READY))
    assert found is not None
    assert found.payload["id"] == found.id and found.payload["type"] == "Asset Ready"
    asset = found.payload["asset"]
    assert (asset["key"], asset["state"], asset["sha256"]) == ("originals/a.jpg", "ready", "c" * 64)
    assert set(asset["recipes"]) == {"web-image@1", "image-placeholder@1"}
    assert found.id == notification_id(
        "media", "originals/a.jpg", V1, NotificationType.READY, ["web-image@1", "image-placeholder@1"]
    )


def test_a_deleted_asset_is_named_with_the_recipes_it_had():
    gone = notification_for(view(AssetState.READY), view(AssetState.DELETED, V2, jobs=()))
    assert gone is not None
    assert gone.id == notification_id(
        "media", "originals/a.jpg", V2, NotificationType.DELETED, ["web-image@1", "image-placeholder@1"]
    )


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), (" 120 ", 120.0), ("Thu, 01 Jan 2032 00:00:10 GMT", 10.0), ("Thu, 01 Jan 2032 00:00:00 GMT", 0.0)],
)
def test_retry_after_reads_delay_seconds_and_http_dates(value, seconds):
    assert retry_after_s(value, now_s=1956528000.0) == seconds  # 2032-01-01T00:00:00Z


@pytest.mark.parametrize("value", [None, "", "soon", "-3", "1.5"])
def test_an_unreadable_retry_after_is_none(value):
    assert retry_after_s(value, now_s=0.0) is None


POLICY = {"attempt": 1, "now_s": 0.0, "retry_after_cap_s": 60.0, "base_s": 1.0, "cap_s": 30.0, "jitter": 0.5}


@pytest.mark.parametrize(
    ("status", "headers", "verdict", "wait_s"),
    [
        (200, {}, Verdict.DELIVERED, 0.0),
        (204, {}, Verdict.DELIVERED, 0.0),
        (429, {"Retry-After": "2"}, Verdict.RETRY, 2.0),
        (503, {"retry-after": "7"}, Verdict.RETRY, 7.0),
        (429, {"Retry-After": "3600"}, Verdict.RETRY, 60.0),
        (429, {}, Verdict.RETRY, 0.5),
        (500, {"Retry-After": "9"}, Verdict.RETRY, 0.5),
        (502, {}, Verdict.RETRY, 0.5),
        (None, {}, Verdict.RETRY, 0.5),
        (400, {}, Verdict.PERMANENT, 0.0),
        (401, {}, Verdict.PERMANENT, 0.0),
        (404, {"Retry-After": "2"}, Verdict.PERMANENT, 0.0),
        (410, {}, Verdict.PERMANENT, 0.0),
        (301, {}, Verdict.PERMANENT, 0.0),
    ],
)
def test_webhook_answers_are_classified(status, headers, verdict, wait_s):
    found = webhook_verdict(status, headers, **POLICY)
    assert (found.verdict, found.wait_s) == (verdict, wait_s)


def test_the_backoff_doubles_up_to_its_cap_and_scales_with_the_jitter():
    waits = [backoff_s(n, base_s=1.0, cap_s=30.0, jitter=1.0) for n in range(1, 8)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff_s(3, base_s=1.0, cap_s=30.0, jitter=0.25) == 1.0


@pytest.mark.parametrize("state", [AssetState.READY, AssetState.FAILED])
def test_a_later_event_naming_the_same_version_owes_nothing(state):
    """Only the sequencer moves (plan_current: a noncurrent version deleted for good, or
    identical bytes re-put on an unversioned bucket): the version's end was told already."""
    later = dataclasses.replace(V1, sequencer="0" * 48 + "0000000000000003")
    found = notification_for(view(state), view(state, later))
    assert found is None, f"{state} told again under a second id {found.id if found else ''} for the same version"


@pytest.fixture()
def berlin_time(monkeypatch):
    """The process's local time zone is not UTC (a laptop running the local dispatcher)."""
    import time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    "value",
    ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"],
    ids=["imf-fixdate", "rfc850", "asctime"],
)
def test_every_http_date_format_is_read_as_utc_whatever_the_local_zone(berlin_time, value):
    """RFC 9110 section 5.6.7: a recipient MUST accept all three HTTP-date formats, and an
    HTTP-date is always UTC (asctime-date carries no zone: it is not local time)."""
    now_s = 784111740.0  # 1994-11-06T08:49:00Z
    read = retry_after_s(value, now_s=now_s)
    assert read == 37.0, f"Retry-After {value!r} read as {read} s"


@pytest.mark.parametrize("value", ["²", "¹²", "３"])
def test_retry_after_delay_seconds_are_ascii_digits_only(value):
    """RFC 9110 section 10.2.3: delay-seconds = 1*DIGIT, DIGIT being ASCII 0-9 (RFC 5234).
    http.client decodes header values as Latin-1, so a receiver can send "²": unreadable,
    not an error out of the dispatcher."""
    assert retry_after_s(value, now_s=0.0) is None
