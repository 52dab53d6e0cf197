"""The DynamoDB unit of work: the one module that sends requests to DynamoDB.

The other DynamoDB adapters -- the job ledger, the source index, the assets, the outbox --
express only their rows: a PynamoDB model, an item, the actions of an update and the
condition a write must meet. This module owns the rest, once:

* **binding** a model to its table, endpoint, credentials and the one retry configuration
  (:func:`bind`, :class:`RetryConfig`);
* **conditional writes that answer won or lost**: a failed condition
  (``ConditionalCheckFailedException``) is an answer, ``False``, never an exception
  (:meth:`UnitOfWork.put`, :meth:`~UnitOfWork.update`, :meth:`~UnitOfWork.delete`);
* **transactions** (:class:`Transaction`): items collected, the notifications the change
  owes collected with them and put in the outbox in the same ``TransactWriteItems``; one
  answer, won or lost;
* **the optimistic round**: read, decide, write conditional on what was read, and again
  with backoff when the write lost (:meth:`UnitOfWork.rounds`);
* **error mapping**, from the error code, never from the message: a lost race is
  ``False``; a ``ValidationException`` on a request that carries a value over one of
  DynamoDB's size limits -- measured here (:func:`oversize`) -- is the input's fault,
  ``unstorable_input``; anything else may pass, :class:`~mediajobs.domain.errors.TransientFailure`.

Throttling and 5xx answers are retried inside each request by botocore's standard retry
mode (:meth:`RetryConfig.botocore`), for PynamoDB's models as for boto3's clients.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from botocore.config import Config
from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, PynamoDBException, TransactWriteError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from mediajobs.adapters.sessions import SESSIONS
from mediajobs.domain.errors import UNSTORABLE_INPUT, PermanentFailure, TransientFailure

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Model)
T = TypeVar("T")

#: The error code of a write whose condition failed: a lost race, answered ``False``.
CONDITION_FAILED: Final = "ConditionalCheckFailedException"
#: Cancellation reasons of a transaction worth another round (DynamoDB API reference,
#: "TransactWriteItems"): a condition failed (another writer changed an item: read again),
#: a conflict with another transaction or write on one of the items, throttling.
_LOST_REASONS: Final = frozenset(
    {"ConditionalCheckFailed", "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
#: Request error codes that lose a round rather than fail it.
_LOST_CODES: Final = frozenset({"TransactionConflictException", "TransactionInProgressException"})
_VALIDATION: Final = "ValidationException"
_VALIDATION_REASON: Final = "ValidationError"

#: DynamoDB's limits (developer guide, "Service, account, and table quotas"): a partition
#: key's value, a sort key's value, and an item, in bytes (an item as "Item sizes and
#: formats" counts it); and the items of one ``TransactWriteItems``.
MAX_PARTITION_KEY_BYTES: Final = 2048
MAX_SORT_KEY_BYTES: Final = 1024
MAX_ITEM_BYTES: Final = 400 * 1024
MAX_TRANSACTION_ITEMS: Final = 100


@dataclass(frozen=True)
class RetryConfig:
    """The one retry configuration of every AWS request the functions make.

    Attributes
    ----------
    attempts: total attempts of one request, the first included (botocore's standard
        retry mode: throttling, S3 ``SlowDown``, 5xx and timeouts, with its own backoff).
    connect_timeout_s, read_timeout_s: socket timeouts of one attempt, seconds.
    rounds: rounds of one optimistic write (read, decide, write conditional on the read)
        before it gives up as a transient failure.
    backoff_base_s, backoff_cap_s: the wait before round ``n`` (from 0) is drawn uniformly
        from 0 to ``min(cap, base * 2**n)`` seconds ("full jitter", AWS Architecture Blog,
        "Exponential Backoff And Jitter").
    """

    attempts: int = 5
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    rounds: int = 10
    backoff_base_s: float = 0.01
    backoff_cap_s: float = 0.2

    def botocore(self) -> Config:
        """The botocore client configuration of boto3 clients."""
        return Config(
            retries={"mode": "standard", "max_attempts": self.attempts},
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
        )

    def backoff_s(self, round_: int, rng: random.Random | None = None) -> float:
        """The wait before retrying after round ``round_`` (from 0) lost, seconds."""
        draw = (rng or random).uniform
        return draw(0, min(self.backoff_cap_s, self.backoff_base_s * 2**round_))


#: The configuration every client and model is built with (:mod:`mediajobs.adapters.clients`).
RETRY: Final = RetryConfig()


@dataclass(frozen=True)
class Endpoint:
    """Where the tables are, and what requests are signed with.

    Attributes
    ----------
    region: AWS region.
    host: endpoint URL (the embedded moto server), or ``None`` for AWS's.
    credentials: ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``;
        empty for the default chain (the function's role).
    """

    region: str
    host: str | None = None
    credentials: Mapping[str, str] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.region, self.host, tuple(sorted(self.credentials.items()))))


def bind(model: type[M], table_name: str, endpoint: Endpoint, retry: RetryConfig = RETRY) -> type[M]:
    """A subclass of ``model`` bound to ``table_name`` at ``endpoint``, with ``retry``'s
    attempts and timeouts (PynamoDB ``Meta``). Cached: a model's connection (a botocore
    client) is made once per table and endpoint.

    Only the client factory (:mod:`mediajobs.adapters.clients`) calls it.
    """
    return _bind(model, table_name, endpoint, retry)


_BIND_LOCK: Final = threading.Lock()


def _bind(model: type[M], table_name: str, endpoint: Endpoint, retry: RetryConfig) -> type[M]:
    with _BIND_LOCK:
        return _bound(model, table_name, endpoint, retry)


@functools.cache
def _bound(model: type[M], table_name: str, endpoint: Endpoint, retry: RetryConfig) -> type[M]:
    meta: dict[str, Any] = {
        "table_name": table_name,
        "region": endpoint.region,
        "max_retry_attempts": retry.attempts - 1,
        "connect_timeout_seconds": retry.connect_timeout_s,
        "read_timeout_seconds": retry.read_timeout_s,
        **dict(endpoint.credentials),
    }
    if endpoint.host:
        meta["host"] = endpoint.host
    bound: type[M] = type(f"{model.__name__}_{table_name}", (model,), {"Meta": type("Meta", (), meta)})
    # PynamoDB gives each model's connection a botocore session of its own, which parses
    # DynamoDB's service model again (:mod:`mediajobs.adapters.sessions`): about 0.3 s a
    # model, for each of the worker's six models on a cold start. So the model's one
    # connection gets its botocore session from the shared loader and makes its client now,
    # in this thread: PynamoDB keeps a session per thread but one client per
    # connection (made on first use), so every later request of any thread uses this client.
    # PynamoDB has no public way to give a model a session; without ``_local`` (another
    # PynamoDB) the connection makes its own session, as before: slower, not wrong.
    connection = bound._get_connection().connection
    local = getattr(connection, "_local", None)
    if local is not None and getattr(local, "session", None) is None:
        local.session = SESSIONS.botocore_session(endpoint.credentials)
    _ = connection.client
    return bound


# -- Sizes, as DynamoDB counts them ---------------------------------------------------------


def value_bytes(value: Mapping[str, Any]) -> int:
    """The size of one attribute value in DynamoDB JSON (``{"S": ...}``, ``{"N": ...}``,
    ``{"M": {...}}`` ...), bytes, as the DynamoDB developer guide's "Item sizes and formats"
    counts it: a string's UTF-8 length, a number's about 1 byte per 2 significant digits
    plus 1, binary its length, a list or map 3 bytes plus 1 per element plus the elements
    (and a map's names), null and booleans 1 byte."""
    (kind, data), *_ = value.items()
    if kind == "S":
        return len(str(data).encode("utf-8"))
    if kind == "N":
        return (len(str(data).lstrip("-").replace(".", "").lstrip("0")) + 1) // 2 + 1
    if kind == "B":
        return len(data)
    if kind in ("SS", "NS", "BS"):
        element = {"SS": "S", "NS": "N", "BS": "B"}[kind]
        return sum(value_bytes({element: v}) for v in data)
    if kind == "L":
        return 3 + sum(1 + value_bytes(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_bytes(v) for k, v in data.items())
    return 1


def item_bytes(attributes: Mapping[str, Mapping[str, Any]]) -> int:
    """The size of an item given as DynamoDB JSON attributes, bytes (names and values)."""
    return sum(len(name.encode("utf-8")) + value_bytes(value) for name, value in attributes.items())


def oversize(model: type[Model], attributes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Which of DynamoDB's size limits ``attributes`` (DynamoDB JSON: an item, or the values
    an update writes, its keys included) exceed, in words; ``None`` when none."""
    hash_name = model._hash_key_attribute().attr_name
    range_attribute = model._range_key_attribute()
    limits = [(hash_name, MAX_PARTITION_KEY_BYTES, "partition key")]
    if range_attribute is not None:
        limits.append((range_attribute.attr_name, MAX_SORT_KEY_BYTES, "sort key"))
    for name, limit, what in limits:
        if name in attributes and (size := value_bytes(attributes[name])) > limit:
            return f"the {what} {name} has {size} bytes > DynamoDB's {limit}"
    if (size := item_bytes(attributes)) > MAX_ITEM_BYTES:
        return f"the item has {size} bytes > DynamoDB's {MAX_ITEM_BYTES}"
    return None


def _written(item: Model, actions: Sequence[Action] = ()) -> dict[str, Any]:
    """What a request writes of ``item``, in DynamoDB JSON: the item whole (a put), or its
    keys and the values ``actions`` set (an update)."""
    if not actions:
        return item.serialize(null_check=False)
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    for action in actions:
        action.serialize(names, values)
    keys = {k: v for k, v in item.serialize(null_check=False).items() if k in _key_names(type(item))}
    return {**keys, **{f"value{i}": v for i, v in enumerate(values.values())}}


def _key_names(model: type[Model]) -> set[str]:
    range_attribute = model._range_key_attribute()
    names = {model._hash_key_attribute().attr_name}
    if range_attribute is not None:
        names.add(range_attribute.attr_name)
    return names


def failure(exc: PynamoDBException, what: str, model: type[Model], attributes: Mapping[str, Any]) -> MediaJobsFailure:
    """The pipeline's error for a request that failed other than by a lost race.

    A ``ValidationException`` on a request carrying a value over one of DynamoDB's size
    limits (:func:`oversize`: a key over 2,048 or 1,024 bytes, an item over 400 KB) is
    DynamoDB refusing a value derived from the input: retrying can never help, so it is
    ``unstorable_input``, with the limit and DynamoDB's own words as the detail. Any other
    ``ValidationException`` (a key that does not match the table's schema: a table name
    pointing at the wrong table) is the deployment's, not the input's: transient, so the
    message is redelivered, dead-lettered and alarmed on rather than acknowledged as a
    failure of every upload. Anything else (throttling botocore gave up on, a network
    error) may pass: transient.

    Parameters
    ----------
    exc: PynamoDB's error (its botocore cause carries the code).
    what: the request, for the message (``"ledger put"``).
    model, attributes: the model and what the request wrote or named (DynamoDB JSON).
    """
    code = exc.cause_response_code
    if code == _VALIDATION:
        too_big = oversize(model, attributes)
        if too_big is not None:
            said = exc.cause_response_message or ""
            return PermanentFailure(UNSTORABLE_INPUT, f"{what} refused by DynamoDB: {too_big} ({said})")
        return TransientFailure(f"{what} refused by DynamoDB (not the input's values): {exc.cause_response_message}")
    return TransientFailure(f"{what} failed: {code or exc}")


MediaJobsFailure = PermanentFailure | TransientFailure


class Lost(Exception):
    """Raised by an attempt of :meth:`UnitOfWork.rounds` whose write lost: read again."""


# -- The unit of work --------------------------------------------------------------------


class UnitOfWork:
    """Every DynamoDB request of the functions goes through one of these.

    Parameters
    ----------
    endpoint: where the tables are (a transaction's connection is made for it).
    retry: the retry configuration (rounds and their backoff; attempts per request).
    outbox: makes the outbox item of a notification a transaction owes, and its condition
        (:func:`mediajobs.adapters.outbox.outbox_put`); ``None`` for a unit of work that
        owes none (a reader, the dispatcher).
    sleep: how a round waits (seconds); tests pass a no-op.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        retry: RetryConfig = RETRY,
        outbox: Callable[[Any, int], tuple[Model, Condition]] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint = endpoint
        self.retry = retry
        self._outbox = outbox
        self._sleep = sleep

    @functools.cached_property
    def _connection(self) -> Connection:
        """The connection transactions are sent on (one botocore client, made on first use)."""
        credentials = self.endpoint.credentials
        return Connection(
            region=self.endpoint.region,
            host=self.endpoint.host,
            connect_timeout_seconds=self.retry.connect_timeout_s,
            read_timeout_seconds=self.retry.read_timeout_s,
            max_retry_attempts=self.retry.attempts - 1,
            aws_access_key_id=credentials.get("aws_access_key_id"),
            aws_secret_access_key=credentials.get("aws_secret_access_key"),
            aws_session_token=credentials.get("aws_session_token"),
        )

    # -- reads -------------------------------------------------------------------------

    def get(self, model: type[M], hash_key: Any, range_key: Any = None, *, what: str = "read") -> M | None:
        """One strongly consistent ``GetItem``; ``None`` when there is no such item.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure` (a key over DynamoDB's limit is ``unstorable_input``).
        """
        try:
            return model.get(hash_key, range_key, consistent_read=True)
        except DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise failure(exc, what, model, _keys_of(model, hash_key, range_key)) from exc

    def batch_get(self, model: type[M], keys: Iterable[Any], *, what: str = "batch read") -> list[M]:
        """The items of ``keys`` that exist: strongly consistent ``BatchGetItem`` requests
        (PynamoDB retries unprocessed keys itself).

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure`.
        """
        keys = list(keys)
        if not keys:
            return []
        try:
            return list(model.batch_get(keys, consistent_read=True))
        except PynamoDBException as exc:
            longest = max(keys, key=lambda k: len(str(k)))
            raise failure(exc, what, model, _keys_of(model, longest, None)) from exc

    def query(
        self,
        model: type[M],
        hash_key: Any,
        range_key_condition: Condition | None = None,
        *,
        filter_condition: Condition | None = None,
        limit: int | None = None,
        what: str = "query",
    ) -> list[M]:
        """The items of one partition (strongly consistent ``Query``, every page up to
        ``limit`` items), in sort key order.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure`.
        """
        try:
            rows = model.query(
                hash_key,
                range_key_condition,
                filter_condition=filter_condition,
                consistent_read=True,
                limit=limit,
                page_size=limit,
            )
            return list(rows)
        except PynamoDBException as exc:
            raise failure(exc, what, model, _keys_of(model, hash_key, None)) from exc

    def scan_page(
        self,
        model: type[M],
        segment: int,
        segments: int,
        cursor: Mapping[str, Any] | None,
        *,
        limit: int,
        filter_condition: Condition | None = None,
        what: str = "scan",
    ) -> tuple[list[M], Mapping[str, Any] | None]:
        """Up to ``limit`` items of segment ``segment`` of a ``segments``-way parallel
        ``Scan`` (eventually consistent; DynamoDB developer guide, "Parallel scan"),
        starting after ``cursor``; with the cursor to go on from (``None``: the segment's
        end). When ``limit`` items come before a page's end, the cursor is the last item's
        key (PynamoDB's ``ResultIterator.last_evaluated_key``), so nothing is skipped.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure`.
        """
        try:
            rows = model.scan(
                filter_condition=filter_condition,
                segment=segment,
                total_segments=segments,
                last_evaluated_key=dict(cursor) if cursor is not None else None,
                limit=limit,
                page_size=limit,
            )
            items = list(rows)
            return items, rows.last_evaluated_key
        except PynamoDBException as exc:
            raise failure(exc, what, model, {}) from exc

    def count(
        self, model: type[Model], hash_key: Any, range_key_condition: Condition | None = None, *, what: str = "count"
    ) -> int:
        """How many items of one partition meet ``range_key_condition`` (strongly
        consistent ``Query`` with ``Select COUNT``, every page).

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure`.
        """
        try:
            return int(model.count(hash_key, range_key_condition, consistent_read=True))
        except PynamoDBException as exc:
            raise failure(exc, what, model, _keys_of(model, hash_key, None)) from exc

    # -- single writes -----------------------------------------------------------------

    def put(self, item: Model, condition: Condition | None = None, *, what: str = "put") -> bool:
        """One ``PutItem``: ``True`` when written, ``False`` when ``condition`` failed.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure`.
        """
        return self._write(lambda: item.save(condition=condition), what, item)

    def update(
        self, item: Model, actions: Sequence[Action], condition: Condition | None = None, *, what: str = "update"
    ) -> bool:
        """One ``UpdateItem``: ``True`` when written -- ``item`` then holds the whole item as
        stored after it (``ALL_NEW``) -- ``False`` when ``condition`` failed.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure`.
        """
        return self._write(lambda: item.update(actions=list(actions), condition=condition), what, item, actions)

    def delete(self, item: Model, condition: Condition | None = None, *, what: str = "delete") -> bool:
        """One ``DeleteItem``: ``True`` when done (or there was nothing), ``False`` when
        ``condition`` failed.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure`.
        """
        return self._write(lambda: item.delete(condition=condition), what, item)

    def put_all(self, items: Iterable[Model], *, what: str = "batch put") -> None:
        """Put ``items`` (``BatchWriteItem``, unconditional; PynamoDB resends unprocessed ones).

        Raises
        ------
        PermanentFailure, TransientFailure
            As :func:`failure`.
        """
        items = list(items)
        if not items:
            return
        model = type(items[0])
        try:
            with model.batch_write() as batch:
                for item in items:
                    batch.save(item)
        except PynamoDBException as exc:
            raise failure(exc, what, model, max((_written(i) for i in items), key=item_bytes)) from exc

    def _write(self, request: Callable[[], Any], what: str, item: Model, actions: Sequence[Action] = ()) -> bool:
        try:
            request()
        except PynamoDBException as exc:
            if exc.cause_response_code == CONDITION_FAILED:
                return False
            raise failure(exc, what, type(item), _written(item, actions)) from exc
        return True

    # -- transactions and rounds -------------------------------------------------------

    def transaction(self, what: str = "transaction") -> Transaction:
        """A new transaction: collect its writes and notifications, then
        :meth:`Transaction.commit`."""
        return Transaction(self, what)

    def rounds(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` (read, decide, write conditional on the read) until it does not
        raise :class:`Lost`, at most ``retry.rounds`` times, with jittered exponential
        backoff between rounds.

        Raises
        ------
        TransientFailure
            Every round lost.
        """
        last: Lost | None = None
        for round_ in range(self.retry.rounds):
            try:
                return attempt()
            except Lost as lost:
                last = lost
                if round_ + 1 < self.retry.rounds:
                    self._sleep(self.retry.backoff_s(round_))
        raise TransientFailure(f"{what}: still losing races after {self.retry.rounds} rounds ({last})")


@dataclass
class _Write:
    kind: str  # "delete", "put", "update": PynamoDB sends deletes, then puts, then updates
    item: Model
    condition: Condition | None
    actions: Sequence[Action] = ()
    told: bool = False


_ORDER: Final = {"delete": 0, "put": 1, "update": 2}


class Transaction:
    """The writes of one change, collected, then sent as one ``TransactWriteItems``
    (:meth:`commit`): all of them, or none.

    The notifications the change owes (:meth:`tell`) are put in the outbox by the same
    transaction, each conditional on its id not being there yet: a transition told already
    (a redelivery, a takeover) is not told twice, and when that condition alone fails, the
    change is written again without it.
    """

    def __init__(self, uow: UnitOfWork, what: str) -> None:
        self._uow = uow
        self.what = what
        self._writes: list[_Write] = []
        self._told: list[tuple[Any, int]] = []

    def put(self, item: Model, condition: Condition | None = None) -> Transaction:
        """Put ``item`` (when ``condition`` holds)."""
        self._writes.append(_Write("put", item, condition))
        return self

    def update(self, item: Model, actions: Sequence[Action], condition: Condition | None = None) -> Transaction:
        """Update ``item`` with ``actions`` (when ``condition`` holds)."""
        self._writes.append(_Write("update", item, condition, list(actions)))
        return self

    def delete(self, item: Model, condition: Condition | None = None) -> Transaction:
        """Delete ``item`` (when ``condition`` holds)."""
        self._writes.append(_Write("delete", item, condition))
        return self

    def tell(self, notification: Any, *, now_s: int) -> Transaction:
        """Owe ``notification`` (a :class:`~mediajobs.domain.notifications.Notification`):
        put in the outbox with the change, once per id."""
        self._told.append((notification, now_s))
        return self

    def commit(self) -> bool:
        """Write everything collected in one ``TransactWriteItems`` (one plain request when
        there is one write and nothing to tell): ``True`` when written, ``False`` when a
        condition failed or the transaction met a conflict or throttling (read again and
        decide anew: :meth:`UnitOfWork.rounds`).

        Raises
        ------
        RuntimeError
            Notifications owed by a unit of work that has no outbox.
        PermanentFailure
            ``unstorable_input``: an item over DynamoDB's size limits.
        TransientFailure
            Over DynamoDB's 100 items, or any other failure.
        """
        writes = list(self._writes)
        if self._told and self._uow._outbox is None:
            raise RuntimeError(f"{self.what}: notifications are owed, and this unit of work has no outbox")
        for notification, now_s in self._told:
            assert self._uow._outbox is not None
            item, condition = self._uow._outbox(notification, now_s)
            writes.append(_Write("put", item, condition, told=True))
        if not writes:
            return True
        if len(writes) > MAX_TRANSACTION_ITEMS:
            raise TransientFailure(f"{self.what}: {len(writes)} items, over DynamoDB's {MAX_TRANSACTION_ITEMS}")
        if len(writes) == 1:
            return self._single(writes[0])
        return self._send(writes)

    def _single(self, write: _Write) -> bool:
        uow = self._uow
        if write.kind == "put":
            return uow.put(write.item, write.condition, what=self.what)
        if write.kind == "update":
            return uow.update(write.item, write.actions, write.condition, what=self.what)
        return uow.delete(write.item, write.condition, what=self.what)

    def _send(self, writes: list[_Write]) -> bool:
        ordered = sorted(writes, key=lambda w: _ORDER[w.kind])  # the order PynamoDB sends them in
        try:
            with TransactWrite(connection=self._uow._connection) as tx:
                for w in ordered:
                    if w.kind == "put":
                        tx.save(w.item, condition=w.condition)
                    elif w.kind == "update":
                        tx.update(w.item, actions=list(w.actions), condition=w.condition)
                    else:
                        tx.delete(w.item, condition=w.condition)
        except TransactWriteError as exc:
            reasons = exc.cancellation_reasons or [None] * len(ordered)
            failed = [(w, r) for w, r in zip(ordered, reasons, strict=False) if r is not None]
            # An item over a limit: DynamoDB cancels with a ValidationError reason on it
            # (API reference, "TransactWriteItems"), moto answers ValidationException. Either
            # way the request's own items are measured, never the message read.
            if exc.cause_response_code == _VALIDATION or any(r.code == _VALIDATION_REASON for _, r in failed):
                sizes = [(w, oversize(type(w.item), _written(w.item, w.actions))) for w in ordered]
                too_big = [(w, size) for w, size in sizes if size is not None]
                if too_big:
                    said = "; ".join(r.message or "" for _, r in failed) or exc.cause_response_message or ""
                    detail = f"{self.what} refused by DynamoDB: {too_big[0][1]} ({said})"
                    raise PermanentFailure(UNSTORABLE_INPUT, detail) from exc
            codes = {r.code for _, r in failed}
            if failed and codes <= _LOST_REASONS:
                if all(w.told for w, _ in failed) and codes == {"ConditionalCheckFailed"}:
                    log.info("notification already in the outbox", extra={"what": self.what})
                    kept = [w for w in writes if not any(w is t for t, _ in failed)]
                    return self._single(kept[0]) if len(kept) == 1 else self._send(kept)
                return False
            if exc.cause_response_code in _LOST_CODES:
                return False
            raise failure(exc, self.what, type(ordered[0].item), {}) from exc
        return True


def _keys_of(model: type[Model], hash_key: Any, range_key: Any) -> dict[str, Any]:
    """The DynamoDB JSON of the key values a read names (for :func:`oversize`)."""
    keys = {model._hash_key_attribute().attr_name: {"S": str(hash_key)}}
    range_attribute = model._range_key_attribute()
    if range_attribute is not None and range_key is not None:
        keys[range_attribute.attr_name] = {"S": str(range_key)}
    return keys
