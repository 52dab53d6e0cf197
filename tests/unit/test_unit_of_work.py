"""The DynamoDB unit of work without DynamoDB: its rounds (bounded, with jittered backoff),
DynamoDB's size rules as it measures them, and its error mapping from the error code alone
(a lost race is an answer; a ``ValidationException`` is the input's fault only when a value
is over a limit, whatever the message says)."""

from __future__ import annotations

import botocore.exceptions
import pytest
from pynamodb.exceptions import PutError

from mediajobs.adapters.dynamo import (
    MAX_ITEM_BYTES,
    MAX_PARTITION_KEY_BYTES,
    Endpoint,
    Lost,
    RetryConfig,
    UnitOfWork,
    failure,
    item_bytes,
    oversize,
    value_bytes,
)
from mediajobs.adapters.ledger import JobModel
from mediajobs.domain.errors import UNSTORABLE_INPUT, PermanentFailure, TransientFailure


def uow(waits: list[float], rounds: int = 10) -> UnitOfWork:
    return UnitOfWork(Endpoint("us-east-1"), retry=RetryConfig(rounds=rounds), sleep=waits.append)


def test_lost_rounds_are_retried_a_bounded_number_of_times_then_transient():
    waits: list[float] = []

    def lose() -> None:
        raise Lost("ConditionalCheckFailed")

    with pytest.raises(TransientFailure, match="still losing races after 10 rounds"):
        uow(waits).rounds("asset make_current", lose)
    assert len(waits) == 9 and all(0 <= w <= 0.2 for w in waits)


def test_a_round_that_wins_returns_its_value_after_the_lost_ones():
    waits: list[float] = []
    tries = iter([Lost("TransactionConflict"), None])

    def once() -> str:
        lost = next(tries)
        if lost is not None:
            raise lost
        return "written"

    assert uow(waits).rounds("asset delete", once) == "written"
    assert len(waits) == 1


def test_backoff_is_full_jitter_capped():
    retry = RetryConfig(backoff_base_s=0.01, backoff_cap_s=0.2)

    class Top:
        def uniform(self, low: float, high: float) -> float:
            return high

    assert [retry.backoff_s(n, Top()) for n in range(7)] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.2, 0.2]  # type: ignore[arg-type]


def test_sizes_are_counted_as_dynamodb_counts_them():
    assert value_bytes({"S": "é"}) == 2  # UTF-8
    assert value_bytes({"N": "12345"}) == 4  # (5 digits + 1) / 2 + 1
    assert value_bytes({"L": [{"S": "ab"}, {"BOOL": True}]}) == 3 + (1 + 2) + (1 + 1)
    assert value_bytes({"M": {"k": {"S": "v"}}}) == 3 + 1 + 1 + 1
    assert item_bytes({"job_key": {"S": "x" * 64}}) == 7 + 64


def test_a_partition_key_or_an_item_over_the_limits_is_named():
    assert oversize(JobModel, {"job_key": {"S": "k" * MAX_PARTITION_KEY_BYTES}}) is None
    too_long = oversize(JobModel, {"job_key": {"S": "k" * (MAX_PARTITION_KEY_BYTES + 1)}})
    assert too_long == "the partition key job_key has 2049 bytes > DynamoDB's 2048"
    too_big = oversize(JobModel, {"job_key": {"S": "k"}, "outputs": {"S": "x" * MAX_ITEM_BYTES}})
    assert too_big is not None and too_big.startswith("the item has")


def _error(code: str, message: str) -> PutError:
    cause = botocore.exceptions.ClientError({"Error": {"Code": code, "Message": message}}, "PutItem")
    return PutError("failed", cause)


def test_a_validation_error_over_a_limit_is_unstorable_input_whatever_its_words():
    big = {"job_key": {"S": "k" * 3000}}
    mapped = failure(
        _error("ValidationException", "One or more parameter values were invalid"), "ledger put", JobModel, big
    )
    assert isinstance(mapped, PermanentFailure) and mapped.reason == UNSTORABLE_INPUT
    assert "2048" in mapped.detail and "One or more parameter values were invalid" in mapped.detail


def test_a_validation_error_within_the_limits_is_the_deployments_and_transient_whatever_its_words():
    small = {"job_key": {"S": "k"}}
    mapped = failure(_error("ValidationException", "Item size has exceeded the maximum"), "ledger put", JobModel, small)
    assert isinstance(mapped, TransientFailure) and not isinstance(mapped, PermanentFailure)
    assert "not the input's values" in str(mapped)


def test_any_other_error_is_transient_with_its_code():
    mapped = failure(_error("ThrottlingException", "slow down"), "ledger put", JobModel, {})
    assert isinstance(mapped, TransientFailure) and "ThrottlingException" in str(mapped)


def test_notifications_owed_without_an_outbox_are_refused():
    tx = uow([]).transaction("asset record")
    tx.tell(object(), now_s=1)
    with pytest.raises(RuntimeError, match="no outbox"):
        tx.commit()


def test_models_bound_to_tables_share_one_parse_of_the_service_model_and_keep_their_credentials():
    """Each model's connection has its own botocore session (PynamoDB's), all on one data
    loader (``mediajobs.adapters.sessions``); each signs with its endpoint's credentials."""
    from mediajobs.adapters.dynamo import Endpoint, bind
    from mediajobs.adapters.ledger import JobModel
    from mediajobs.adapters.sessions import SESSIONS

    keys = {"aws_access_key_id": "key-a", "aws_secret_access_key": "secret-a", "aws_session_token": "token-a"}
    other = {**keys, "aws_access_key_id": "key-b"}
    a = bind(JobModel, "uow-loader-a", Endpoint("eu-west-1", "http://127.0.0.1:9", keys))
    b = bind(JobModel, "uow-loader-b", Endpoint("eu-west-1", "http://127.0.0.1:9", other))
    clients = [m._get_connection().connection.client for m in (a, b)]
    assert [c._request_signer._credentials.access_key for c in clients] == ["key-a", "key-b"]
    assert [c.meta.region_name for c in clients] == ["eu-west-1", "eu-west-1"]
    loaders = {id(m._get_connection().connection.session.get_component("data_loader")) for m in (a, b)}
    assert loaders == {id(SESSIONS.botocore_session({}).get_component("data_loader"))}
