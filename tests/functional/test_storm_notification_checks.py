"""The storm's notification checks find what they are for: an owed notification not yet
delivered (missing, outstanding), an asset write that owed one and put none in the outbox
(untold), and they hold once the dispatcher has run -- on the embedded AWS, through the
real worker and the real dispatcher."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from mediajobs.adapters.assets import asset_pk
from mediajobs.local.notifications import LocalNotifications
from mediajobs.local.session import LocalSession
from mediajobs.local.simulate import notification_checks, watch_asset_writes
from tests.conftest import REPO

PHOTO = REPO / "tests" / "media" / "photos" / "canon-40d-small.jpg"
OTHER = REPO / "tests" / "media" / "photos" / "camera-gps-nikon.jpg"


@pytest.fixture(scope="module")
def local_session() -> Iterator[LocalSession]:
    """A stack of its own (moto's state is the process's: the shared session's outbox
    holds other modules' notifications, which nothing here owed)."""
    with LocalSession(log_level="WARNING", template_path=REPO / "template.yaml", name="mediajobs-checks") as session:
        yield session


@pytest.fixture(scope="module")
def told(local_session) -> Iterator[LocalNotifications]:
    watch_asset_writes(local_session.stack)
    notifications = LocalNotifications(local_session.stack)
    yield notifications
    notifications.close()


def test_a_ready_asset_is_missing_and_outstanding_until_dispatched_then_every_check_holds(
    local_session, told, capsys, monkeypatch
):
    stack = local_session.stack
    local_session.upload(PHOTO, f"originals/checks/{uuid.uuid4().hex}.jpg")
    local_session.run()

    checks, counts = notification_checks(stack, told)
    assert (counts["owed"], counts["outbox"], counts["webhook_ids"]) == (1, 1, 0)
    assert checks["notifications_missing"] == 1 and checks["outbox_outstanding"] == 1
    assert checks["notifications_untold"] == 0

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")  # as in a shell, where simulate runs
    capsys.readouterr()
    told.run()
    assert capsys.readouterr().out == ""  # stdout is simulate's one JSON object: no EMF documents
    # ... and none pile up: Powertools prints them anyway once 100 values are held (the
    # 2,000-upload storm's stdout began with one). Its Metrics instances share one set.
    from mediajobs.bootstrap import function_metrics

    assert function_metrics().metrics.metric_set == {}
    checks, counts = notification_checks(stack, told)
    assert set(checks.values()) == {0}
    assert (counts["owed"], counts["webhook_ids"], counts["bus_events"]) == (1, 1, 1)
    assert counts["by_type"] == {"Asset Ready": 1}


def test_a_noncurrent_version_deleted_for_good_tells_nothing_and_every_version_is_told_once(local_session, told):
    """An overwrite, then the replaced version deleted for good (as a lifecycle expiration
    does): S3 sends "Permanently Deleted" with a greater sequencer, the asset's sequencer
    moves, nothing an app sees changes -- one id per version, checked without
    notification_for."""
    stack = local_session.stack
    key = f"originals/checks/{uuid.uuid4().hex}.jpg"
    local_session.upload(PHOTO, key)
    local_session.run()
    local_session.upload(OTHER, key)
    local_session.run()
    told.run()
    versions = local_session.s3.list_object_versions(Bucket=stack.bucket, Prefix=key)["Versions"]
    (replaced,) = [v["VersionId"] for v in versions if not v["IsLatest"]]
    local_session.s3.delete_object(Bucket=stack.bucket, Key=key, VersionId=replaced)
    local_session.run()
    told.run()

    checks, _ = notification_checks(stack, told)
    assert checks["versions_not_told_once"] == 0, checks
    ready = [d for d in told.receiver.received.deliveries if d.payload["asset"]["key"] == key]
    assert len({d.payload["asset"]["version"]["version_id"] for d in ready}) == len(ready) == 2


def test_an_asset_end_written_without_its_outbox_item_is_counted_untold(local_session, told):
    stack = local_session.stack
    key = f"originals/checks/{uuid.uuid4().hex}.jpg"
    local_session.upload(PHOTO, key)
    local_session.run()
    told.run()
    checks, counts = notification_checks(stack, told)
    assert checks["notifications_untold"] == 0
    # The table's stream is the whole module's (its other tests' assets too): compare with now.
    before = Counter(counts["by_type"])

    # The asset deleted by a write that bypasses the adapter's transaction: it owes an
    # "Asset Deleted" the outbox never got.
    model = stack.asset_models().asset
    item = model.get(asset_pk(stack.bucket, key), "asset", consistent_read=True)
    item.update(actions=[model.state.set("deleted"), model.sequencer.set("f" * 64), model.jobs.remove()])
    checks, counts = notification_checks(stack, told)
    assert checks["notifications_untold"] == 1 and checks["notifications_missing"] == 1
    assert checks["versions_not_told_once"] == 1  # the deleted episode, told under no id
    assert Counter(counts["by_type"]) - before == Counter({"Asset Deleted": 1})
