"""The embedded AWS adapts moto while it is open and only then: its changes to moto's
classes and modules are undone when the last embedded AWS of the process closes, a later
one applies them again, and each starts from an empty moto -- so no test depends on
which ran before it (``mediajobs.local.adaptations``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from moto import backends as moto_backends
from moto.dynamodb import models as ddb_models
from moto.s3 import models as s3_models
from moto.s3 import notifications as s3_notifications

from mediajobs.local import moto_s3
from mediajobs.local.adaptations import MotoAdaptations, Patches
from mediajobs.local.embedded import ADAPTATIONS, EmbeddedAws, EmbeddedServer, listen_to_s3_events
from tests.conftest import REPO


def moto_now() -> dict[str, Any]:
    """What the embedded AWS replaces in moto (5.2.5), as it is now."""
    return {
        "list_of_moto_modules": moto_backends.list_of_moto_modules,
        "_send_event_bridge_message": s3_notifications._send_event_bridge_message,
        "S3Backend.delete_object": vars(s3_models.S3Backend).get("delete_object"),
        "DynamoDBBackend.transact_write_items": vars(ddb_models.DynamoDBBackend).get("transact_write_items"),
        "dynamodb copy": ddb_models.copy,  # type: ignore[attr-defined]
        "moto_s3._ACTIVE": moto_s3._ACTIVE,
    }


@pytest.fixture
def moto_own() -> dict[str, Any]:
    """moto's own objects: no embedded AWS is open in the process (another module's fixture
    would be torn down by now)."""
    assert ADAPTATIONS.users == 0
    own = moto_now()
    assert own["dynamodb copy"] is copy and own["moto_s3._ACTIVE"] is None
    return own


def changed(own: dict[str, Any]) -> set[str]:
    return {name for name, value in moto_now().items() if value is not own[name]}


def test_moto_is_itself_again_after_an_embedded_aws_and_a_second_one_adapts_it_again(moto_own):
    for _ in range(2):
        with EmbeddedAws(REPO / "template.yaml", name="mediajobs-adapt") as stack:
            assert changed(moto_own) == set(moto_own)  # every one replaced
            assert stack.client("s3").list_buckets()["Buckets"]
        assert changed(moto_own) == set()  # every one moto's own again
    assert ADAPTATIONS.users == 0


def test_the_adaptations_stay_until_the_last_of_several_open_ones_closes(moto_own):
    outer = EmbeddedServer("127.0.0.1", 0)
    with outer:
        with EmbeddedAws(REPO / "template.yaml", name="mediajobs-adapt-inner"):
            assert ADAPTATIONS.users == 2
        assert ADAPTATIONS.users == 1 and changed(moto_own) == set(moto_own)
    assert ADAPTATIONS.users == 0 and changed(moto_own) == set()


def test_a_later_embedded_aws_of_the_same_name_starts_empty():
    """Before, the second stack found the first one's assets table, items included."""
    name = "mediajobs-adapt-empty"
    with EmbeddedAws(REPO / "template.yaml", name=name) as stack:
        stack.client("dynamodb").put_item(
            TableName=stack.assets_table_name, Item={"pk": {"S": "job#a"}, "sk": {"S": "ref#x"}}
        )
        stack.client("s3").put_object(Bucket=stack.bucket, Key="originals/left.jpg", Body=b"x")
    with EmbeddedAws(REPO / "template.yaml", name=name) as stack:
        assert stack.client("dynamodb").scan(TableName=stack.assets_table_name)["Items"] == []
        assert "Contents" not in stack.client("s3").list_objects_v2(Bucket=stack.bucket)


def test_s3_events_are_heard_only_while_an_embedded_aws_is_open():
    with pytest.raises(RuntimeError, match="no embedded AWS is open"):
        listen_to_s3_events(lambda event: None)
    heard: list[str] = []
    with EmbeddedAws(REPO / "template.yaml", name="mediajobs-adapt-listen") as stack:
        stop = listen_to_s3_events(lambda event: heard.append(event["detail"]["object"]["key"]))
        stack.client("s3").put_object(Bucket=stack.bucket, Key="originals/a b.jpg", Body=b"x")
        stop()
        stack.client("s3").put_object(Bucket=stack.bucket, Key="originals/after.jpg", Body=b"x")
    assert heard == ["originals/a+b.jpg"]


def test_patches_put_back_own_attributes_and_remove_inherited_ones():
    class Base:
        def inherited(self) -> str:
            return "base"

    class Child(Base):
        def own(self) -> str:
            return "child"

    own = vars(Child)["own"]
    patches = Patches()
    assert patches.set(Child, "own", lambda self: "patched")(Child()) == "child"
    assert patches.set(Child, "inherited", lambda self: "patched")(Child()) == "base"
    assert (Child().own(), Child().inherited()) == ("patched", "patched")
    patches.undo()
    assert vars(Child)["own"] is own and "inherited" not in vars(Child)
    assert (Child().own(), Child().inherited()) == ("child", "base")


def test_an_adaptation_that_fails_to_apply_leaves_moto_as_it_was():
    class Target:
        value = "moto's"

    class Sets:
        def apply(self, patches: Patches) -> None:
            patches.set(Target, "value", "adapted")

    class Fails:
        def apply(self, patches: Patches) -> None:
            raise AttributeError("moto changed")

    resets: list[str] = []
    adaptations = MotoAdaptations((Sets, Fails), reset=lambda: resets.append("reset"))
    with pytest.raises(AttributeError):
        adaptations.acquire()
    assert (Target.value, adaptations.users) == ("moto's", 0)
    with pytest.raises(RuntimeError):
        adaptations.release()


def test_reference_counting_applies_once_and_undoes_once():
    applied: list[str] = []

    class Counts:
        def apply(self, patches: Patches) -> None:
            applied.append("applied")

    resets: list[int] = []
    adaptations = MotoAdaptations((Counts,), reset=lambda: resets.append(adaptations.users))
    with adaptations.applied(), adaptations.applied():
        assert adaptations.active(Counts) and adaptations.users == 2
    assert (applied, resets, adaptations.users) == (["applied"], [0, 0], 0)
    with pytest.raises(RuntimeError):
        adaptations.active(Counts)
