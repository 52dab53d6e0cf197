"""The embedded AWS adapts moto while it is open and only then: its changes to moto's
classes and modules are undone when the last embedded AWS of the process closes, a later
one applies them again, and each starts from an empty moto -- so no test depends on
which ran before it (``mediajobs.local.adaptations``)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import boto3
import pytest
from moto import backends as moto_backends
from moto import mock_aws
from moto.dynamodb import models as ddb_models
from moto.dynamodb.models.table import Table
from moto.s3 import models as s3_models
from moto.s3 import notifications as s3_notifications
from moto.sqs import models as sqs_models

from mediajobs.local import moto_s3
from mediajobs.local.adaptations import MotoAdaptations, Patches
from mediajobs.local.embedded import ADAPTATIONS, EmbeddedAws, EmbeddedServer, listen_to_s3_events
from mediajobs.local.moto_dynamodb import QueryByPartition
from mediajobs.local.template import load_template
from tests.conftest import REPO


def moto_now() -> dict[str, Any]:
    """What the embedded AWS replaces in moto (5.2.5), as it is now."""
    return {
        "list_of_moto_modules": moto_backends.list_of_moto_modules,
        "_send_event_bridge_message": s3_notifications._send_event_bridge_message,
        "S3Backend.delete_object": vars(s3_models.S3Backend).get("delete_object"),
        "DynamoDBBackend.transact_write_items": vars(ddb_models.DynamoDBBackend).get("transact_write_items"),
        "dynamodb copy": ddb_models.copy,  # type: ignore[attr-defined]
        "Table.query": vars(Table).get("query"),
        "Table.all_items": vars(Table).get("all_items"),
        "moto_s3._ACTIVE": moto_s3._ACTIVE,
        "S3Backend.list_object_versions": vars(s3_models.S3Backend).get("list_object_versions"),
        "s3 copy": s3_models.copy,  # type: ignore[attr-defined]
        "sqs unix_time_millis": sqs_models.unix_time_millis,
    }


@pytest.fixture
def moto_own() -> dict[str, Any]:
    """moto's own objects: no embedded AWS is open in the process (another module's fixture
    would be torn down by now)."""
    assert ADAPTATIONS.users == 0
    own = moto_now()
    assert own["dynamodb copy"] is copy and own["s3 copy"] is copy and own["moto_s3._ACTIVE"] is None
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


def test_a_server_that_fails_to_start_holds_no_adaptation(moto_own):
    server = EmbeddedServer("127.0.0.1", 0)
    with server:
        with pytest.raises(RuntimeError):  # a thread starts once
            server.start()
        assert ADAPTATIONS.users == 1
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


# Query by partition answers what moto's own Query answers.


@pytest.fixture
def plain_moto() -> Iterator[Any]:
    """moto in this process (no server), the assets table as the template declares it,
    with several partitions: reference rows and candidates, as the assets table holds them."""
    assert ADAPTATIONS.users == 0
    declared = load_template(REPO / "template.yaml")["Resources"]["AssetsTable"]["Properties"]
    with mock_aws():
        client = boto3.client(
            "dynamodb", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        table = f"query-{uuid.uuid4().hex[:8]}"
        schema = {name: declared[name] for name in ("AttributeDefinitions", "KeySchema")}
        client.create_table(TableName=table, BillingMode="PAY_PER_REQUEST", **schema)
        for p in range(30):
            for s in range(p % 7):
                item = {"pk": {"S": f"job#{p:02d}"}, "sk": {"S": f"ref#{s:03d}"}, "n": {"N": str(s * p)}}
                client.put_item(TableName=table, Item=item)
            client.put_item(TableName=table, Item={"pk": {"S": f"collect#{p:02d}"}, "sk": {"S": "c"}})
        yield client, table


QUERIES: list[dict[str, Any]] = [
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "job#06"}}},
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "job#07"}}},  # empty
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "nothing"}}},
    {
        "KeyConditionExpression": "pk = :p AND begins_with(sk, :s)",
        "ExpressionAttributeValues": {":p": {"S": "job#13"}, ":s": {"S": "ref#00"}},
        "ScanIndexForward": False,
    },
    {
        "KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b",
        "ExpressionAttributeValues": {
            ":p": {"S": "job#20"},
            ":a": {"S": "ref#001"},
            ":b": {"S": "ref#004"},
            ":n": {"N": "30"},
        },
        "FilterExpression": "n > :n",
    },
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "job#27"}}, "Select": "COUNT"},
    {
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "job#27"}},
        "ProjectionExpression": "sk",
    },
]


def _answers(client: Any, table: str) -> list[Any]:
    """Every query of :data:`QUERIES`, each paged two items at a time, and whole."""
    answers = []
    for spec in QUERIES:
        answers.append({k: v for k, v in client.query(TableName=table, **spec).items() if k != "ResponseMetadata"})
        pages, start = [], None
        while True:
            page = client.query(TableName=table, Limit=2, **spec, **({"ExclusiveStartKey": start} if start else {}))
            pages.append({k: v for k, v in page.items() if k != "ResponseMetadata"})
            start = page.get("LastEvaluatedKey")
            if start is None:
                break
        answers.append(pages)
    return answers


def test_a_query_by_partition_answers_what_moto_answers_without_reading_the_table(plain_moto):
    client, table = plain_moto
    whole_table_reads: list[str] = []
    counting = Patches()
    all_items = counting.set(Table, "all_items", lambda t: whole_table_reads.append(t.name) or all_items(t))
    try:
        own = _answers(client, table)
        read_by_moto = len(whole_table_reads)
        patches = Patches()
        QueryByPartition().apply(patches)
        try:
            adapted = _answers(client, table)
        finally:
            patches.undo()
    finally:
        counting.undo()
    assert adapted == own
    assert any(answer.get("Count") for answer in own if isinstance(answer, dict))  # not all empty
    assert read_by_moto > 0 and len(whole_table_reads) == read_by_moto  # adapted: no whole-table read


# The versions listed under a prefix answer what moto's own listing answers.


@pytest.fixture
def versioned_bucket() -> Iterator[Any]:
    """moto in this process (no server), a versioned bucket: keys under two prefixes, each
    overwritten, one deleted (a delete marker)."""
    assert ADAPTATIONS.users == 0
    with mock_aws():
        client = boto3.client(
            "s3", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        bucket = f"versions-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=bucket)
        client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        for folder in ("originals/a/", "originals/b/", "derivatives/"):
            for n in range(4):
                for body in (b"first", b"second"):
                    client.put_object(Bucket=bucket, Key=f"{folder}{n}.jpg", Body=body)
            client.delete_object(Bucket=bucket, Key=f"{folder}0.jpg")
        yield client, bucket


def _listings(client: Any, bucket: str) -> list[Any]:
    """Listings under several prefixes, whole and paged three at a time."""
    listings = []
    for prefix in ("originals/a/1.jpg", "originals/b/", "originals/", "", "nothing/"):
        whole = client.list_object_versions(Bucket=bucket, Prefix=prefix)
        listings.append({k: v for k, v in whole.items() if k != "ResponseMetadata"})
        pages = client.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": 3}
        )
        listings.append([{k: v for k, v in page.items() if k != "ResponseMetadata"} for page in pages])
    listings.append(client.list_object_versions(Bucket=bucket, Prefix="originals/", Delimiter="/"))
    listings[-1].pop("ResponseMetadata")
    return listings


def test_versions_listed_under_a_prefix_answer_what_moto_answers_copying_only_those(versioned_bucket):
    from mediajobs.local.moto_s3 import VersionsListedUnderPrefix

    client, bucket = versioned_bucket
    copied: list[str] = []
    counting = Patches()
    getstate = counting.set(s3_models.FakeKey, "__getstate__", lambda key: copied.append(key.name) or getstate(key))

    def copies_of_one_key() -> int:
        del copied[:]
        client.list_object_versions(Bucket=bucket, Prefix="originals/a/1.jpg")
        return len(copied)

    try:
        own, own_copies = _listings(client, bucket), copies_of_one_key()
        patches = Patches()
        VersionsListedUnderPrefix().apply(patches)
        try:
            adapted, adapted_copies = _listings(client, bucket), copies_of_one_key()
        finally:
            patches.undo()
    finally:
        counting.undo()
    assert adapted == own
    assert len(own[0]["Versions"]) == 2 and len(own[2]["Versions"]) == 8 and own[2]["DeleteMarkers"]
    assert (own_copies, adapted_copies) == (24, 2)  # every object's versions, or the key's two


def test_a_key_deleted_while_its_bucket_is_listed_is_not_a_500(versioned_bucket):
    """moto reads a key's versions after listing the keys; a key deleted between the two
    has none (moto: TypeError, answered 500)."""
    from moto.s3.models import s3_backends

    from mediajobs.local.moto_s3 import VersionsListedUnderPrefix

    client, bucket = versioned_bucket
    keys = s3_backends["123456789012"]["aws"].get_bucket(bucket).keys
    gone = "originals/b/3.jpg"
    patches = Patches()
    VersionsListedUnderPrefix().apply(patches)
    getlist = keys.getlist
    try:
        keys.getlist = lambda key, default=None: default if key == gone else getlist(key, default)
        listed = client.list_object_versions(Bucket=bucket, Prefix="originals/b/")
    finally:
        del keys.getlist
        patches.undo()
    assert {v["Key"] for v in listed["Versions"]} == {f"originals/b/{n}.jpg" for n in range(3)}


def test_the_sqs_clock_reads_what_motos_reads():
    from moto.core.utils import unix_time_millis

    from mediajobs.local.moto_sqs import SqsClock

    patches = Patches()
    SqsClock().apply(patches)
    try:
        before = unix_time_millis()
        adapted = sqs_models.unix_time_millis()
        after = unix_time_millis()
        moment = datetime(2026, 12, 3, 12, 0, 0, 250_000)
        assert sqs_models.unix_time_millis(moment) == unix_time_millis(moment)
    finally:
        patches.undo()
    assert before <= adapted <= after and sqs_models.unix_time_millis is unix_time_millis
