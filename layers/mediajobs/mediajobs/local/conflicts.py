"""DynamoDB's transaction conflicts, which moto does not have, for the embedded AWS.

DynamoDB runs ``TransactWriteItems`` in two phases and holds its items meanwhile: a second
transaction that touches one of them fails with ``TransactionCanceledException`` whose
cancellation reason is ``TransactionConflict``, and a single-item write to such an item
fails with ``TransactionConflictException`` (DynamoDB developer guide, "Transaction
conflict handling in DynamoDB"). moto applies a transaction at once (and the embedded AWS
runs DynamoDB requests one at a time: :class:`~mediajobs.local.embedded.AtomicWrites`), so
no two ever overlap and no conflict is ever seen.

:class:`TransactionConflicts` is WSGI middleware in front of moto that gives each
transaction a duration (``hold_s``, the time DynamoDB's two phases take: 10 ms by default,
in the range of the service's transaction latency) during which its items are held, and
answers as DynamoDB does when another write touches a held item. It also counts the writes
each item receives, so a measurement can name its hottest item. It is off unless a caller
puts it in front of the server (``benchmarks/hot_content.py``, ``mediajobs simulate
--conflicts``).
"""

from __future__ import annotations

import collections
import io
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from werkzeug.wsgi import get_input_stream

#: What DynamoDB's JSON protocol names each operation in ``X-Amz-Target``.
_TARGET_PREFIX: Final = "DynamoDB_20120810."
_SINGLE_WRITES: Final = frozenset({"PutItem", "UpdateItem", "DeleteItem"})

#: How long a transaction holds its items by default, seconds: in the range of DynamoDB's
#: transaction latency.
DEFAULT_HOLD_S: Final = 0.010

ItemId = tuple[str, str]  # (table name, canonical JSON of the item's key)


def _item_id(table: str, key: dict[str, Any]) -> ItemId:
    return table, json.dumps(key, sort_keys=True, separators=(",", ":"))


#: The key attributes of this project's tables (assets: ``pk``/``sk``; jobs: ``job_key``;
#: sources: ``source_id``): a ``Put`` names its item by them.
KEY_ATTRIBUTES: Final = ("pk", "sk", "job_key", "source_id")


def transaction_items(body: dict[str, Any]) -> list[ItemId]:
    """The items a ``TransactWriteItems`` request body touches: by ``Key`` for updates,
    deletes and condition checks, by the :data:`KEY_ATTRIBUTES` of its ``Item`` for a
    ``Put``."""
    items = []
    for entry in body.get("TransactItems", []):
        (kind, spec), *_ = entry.items()
        if kind == "Put":
            item = spec["Item"]
            key = {k: item[k] for k in KEY_ATTRIBUTES if k in item}
        else:
            key = spec["Key"]
        items.append(_item_id(spec["TableName"], key))
    return items


def single_item(operation: str, body: dict[str, Any]) -> ItemId | None:
    """The item a single-item write touches, or ``None`` for any other operation."""
    if operation not in _SINGLE_WRITES:
        return None
    if operation == "PutItem":
        item = body["Item"]
        key = {k: item[k] for k in KEY_ATTRIBUTES if k in item}
    else:
        key = body["Key"]
    return _item_id(body["TableName"], key)


class TransactionConflicts:
    """WSGI middleware that makes overlapping DynamoDB transactions conflict, as they do on
    DynamoDB (see the module docstring).

    Parameters
    ----------
    app: the application behind it (the embedded server's).
    hold_s: how long a transaction holds its items, seconds, before it is applied.
    hold: called instead of sleeping ``hold_s`` while a transaction holds its items (a
        test holds one open with an event).

    Attributes
    ----------
    writes: writes each item received (committed transactions' items and single writes).
    conflicts: transactions cancelled for a conflict; single_conflicts: single-item writes
        refused so.
    """

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        *,
        hold_s: float = DEFAULT_HOLD_S,
        hold: Callable[[], object] | None = None,
    ) -> None:
        self.app = app
        self.hold_s = hold_s
        self._hold = hold or (lambda: time.sleep(self.hold_s))
        self._lock = threading.Lock()
        self._held: collections.Counter[ItemId] = collections.Counter()
        self.writes: collections.Counter[ItemId] = collections.Counter()
        self.conflicts = 0
        self.single_conflicts = 0

    def hottest(self) -> tuple[ItemId, int]:
        """The item written most, and how often (``("", "{}")`` and 0 before any write)."""
        with self._lock:
            if not self.writes:
                return ("", "{}"), 0
            return self.writes.most_common(1)[0]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith(_TARGET_PREFIX):
            return self.app(environ, start_response)
        operation = target[len(_TARGET_PREFIX) :]
        raw = get_input_stream(environ).read()  # bounded by Content-Length (keep-alive sockets)
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["CONTENT_LENGTH"] = str(len(raw))
        body = json.loads(raw or b"{}")
        if operation == "TransactWriteItems":
            return self._transaction(environ, start_response, transaction_items(body))
        item = single_item(operation, body)
        if item is not None:
            with self._lock:
                if self._held[item]:
                    self.single_conflicts += 1
                    return _error(
                        start_response,
                        "TransactionConflictException",
                        "Transaction is ongoing for the item",
                    )
                self.writes[item] += 1
        return self.app(environ, start_response)

    def _transaction(
        self, environ: dict[str, Any], start_response: Callable[..., Any], items: list[ItemId]
    ) -> Iterable[bytes]:
        with self._lock:
            conflicting = [bool(self._held[i]) for i in items]
            if any(conflicting):
                self.conflicts += 1
                reasons = [
                    {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
                    if c
                    else {"Code": "None"}
                    for c in conflicting
                ]
                return _error(
                    start_response,
                    "TransactionCanceledException",
                    "Transaction cancelled, please refer cancellation reasons for specific reasons "
                    f"[{', '.join(r['Code'] for r in reasons)}]",
                    CancellationReasons=reasons,
                )
            self._held.update(items)
        try:
            self._hold()  # the transaction's two phases, while its items are held
            status: list[str] = []

            def capture(code: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                status.append(code)
                return start_response(code, headers, exc_info)

            response = list(self.app(environ, capture))
            if status and status[0].startswith("200"):
                with self._lock:
                    self.writes.update(items)
            return response
        finally:
            with self._lock:
                self._held.subtract(items)


def _error(start_response: Callable[..., Any], code: str, message: str, **extra: Any) -> list[bytes]:
    """A DynamoDB JSON-protocol error answer (HTTP 400)."""
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message, **extra})
    start_response(
        "400 Bad Request",
        [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(body)))],
    )
    return [body.encode("utf-8")]
