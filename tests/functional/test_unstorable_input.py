"""A value derived from the input that DynamoDB refuses (``ValidationException``: a
partition key over 2,048 bytes, an item over 400 KB) is a permanent failure,
``unstorable_input`` with DynamoDB's reason, never a retry: against the moto server, which
checks both limits on writes."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from mediajobs.adapters.ledger import DynamoLedger
from mediajobs.adapters.sources import SourceIndex, SourceModel
from mediajobs.bootstrap import build_service, default_adapters
from mediajobs.domain.errors import UNSTORABLE_INPUT, PermanentFailure, TransientFailure
from mediajobs.domain.keys import source_version_document, source_version_id
from mediajobs.entrypoints import worker
from mediajobs.local.runner import LocalLambdaContext
from mediajobs.settings import Settings
from tests.fakes import Wrapping
from tests.functional.test_ledger import spec
from tests.functional.test_worker import event_for, put, unique_png

#: Bigger than DynamoDB's largest item (400 KB).
TOO_BIG = "x" * 410_000


@pytest.fixture()
def index(local_session) -> SourceIndex:
    stack = local_session.stack
    return stack.sources()


@pytest.fixture()
def ledger(local_session) -> DynamoLedger:
    stack = local_session.stack
    return stack.ledger(max_attempts=4)


def test_a_source_id_longer_than_a_partition_key_is_unstorable_not_transient(index):
    with pytest.raises(PermanentFailure) as refused:
        index.begin_reading("k" * 2049, "token", now_s=1000, lease_until_s=1060)
    assert refused.value.reason == UNSTORABLE_INPUT
    assert "Size of hashkey has exceeded" in refused.value.detail


def test_a_job_row_larger_than_an_item_is_unstorable(ledger):
    key = uuid.uuid4().hex * 2
    with pytest.raises(PermanentFailure) as refused:
        ledger.claim(dataclasses.replace(spec(key), source_key=TOO_BIG), now_s=1000, lease_until_s=1060)
    assert refused.value.reason == UNSTORABLE_INPUT and "Item size" in refused.value.detail


def test_a_manifest_larger_than_an_item_is_unstorable(ledger):
    key = uuid.uuid4().hex * 2
    claim = ledger.claim(spec(key), now_s=1000, lease_until_s=1060)
    with pytest.raises(PermanentFailure) as refused:
        ledger.stage_manifest(key, claim.lease_token, TOO_BIG, now_s=1001)
    assert refused.value.reason == UNSTORABLE_INPUT
    ledger.fail_permanently(key, claim.lease_token, reason=UNSTORABLE_INPUT, detail=refused.value.detail, now_s=1002)
    assert ledger.get(key).failure_reason == UNSTORABLE_INPUT


def _keyed_by_the_document(sources, hashed: str, document: str) -> Wrapping:
    """The source index keyed as it was: by a version's JSON document, not by its hash."""

    def keyed(source_id: str) -> str:
        return document if source_id == hashed else source_id

    return Wrapping(
        sources,
        lookup=lambda source_id, **kw: sources.lookup(keyed(source_id), **kw),
        begin_reading=lambda source_id, token, **kw: sources.begin_reading(keyed(source_id), token, **kw),
        remember=lambda ids, known, **kw: sources.remember([keyed(i) for i in ids], known, **kw),
        release=lambda source_id, token, **kw: sources.release(keyed(source_id), token, **kw),
    )


def test_the_handler_acknowledges_a_record_whose_source_id_dynamodb_refuses(local_session):
    """The source index keyed as it was (the JSON itself) meets a 1,000-byte key of quotes:
    the record ends ``unstorable_input`` and is deleted, where it was retried as transient
    until the dead-letter queue, from which a redrive could never succeed."""
    # Its own folder: test_event_keys uploads the same quotes, and an asset it left there
    # (the embedded AWS is the process's) would supersede this hand-made event.
    key = "originals/unstorable/" + '"' * 990
    data = unique_png(64, 48)
    put(local_session, key, data)
    bucket, settings = local_session.stack.bucket, Settings.from_env()
    head = local_session.s3.head_object(Bucket=bucket, Key=key)
    version = {"version_id": head.get("VersionId"), "etag": head["ETag"], "size_bytes": len(data)}
    hashed, document = source_version_id(bucket, key, **version), source_version_document(bucket, key, **version)
    adapters = default_adapters(settings, clients=local_session.stack.clients())
    adapters = dataclasses.replace(adapters, sources=_keyed_by_the_document(adapters.sources, hashed, document))
    local_session.collector.results.clear()
    event = event_for(local_session, key, len(data))
    handler = worker.make_handler(build_service(settings, adapters=adapters, observer=local_session.collector))
    assert handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    [result] = local_session.collector.results[key]
    assert (result.state, result.reason, result.jobs) == ("permanent_failure", UNSTORABLE_INPUT, [])
    assert "2048 bytes" in result.detail


def test_a_request_the_table_schema_refuses_is_the_deployments_fault_and_transient(local_session):
    """A ``ValidationException`` that is not a size limit (a table name pointing at a table
    keyed otherwise) must come back and reach the dead-letter queue and its alarm: were it
    ``unstorable_input``, every upload would be acknowledged as failed."""
    stack = local_session.stack
    wrong = SourceIndex(stack.clients().unit_of_work(), stack.model(SourceModel, stack.table_name))  # the jobs table
    with pytest.raises(TransientFailure) as refused:
        wrong.begin_reading("a" * 64, "token", now_s=1000, lease_until_s=1060)
    assert not isinstance(refused.value, PermanentFailure)
    assert "not the input's values" in str(refused.value)
