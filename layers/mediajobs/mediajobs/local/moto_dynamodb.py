"""The embedded AWS's DynamoDB: transactions as DynamoDB runs them
(:class:`TransactionsAsDynamoDB`) and a ``Query`` that reads one partition
(:class:`QueryByPartition`); applied while an embedded AWS is open
(:mod:`mediajobs.local.adaptations`).

Both rely on the embedded server running DynamoDB requests one at a time
(:class:`~mediajobs.local.server.AtomicWrites`).
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from mediajobs.local.adaptations import Patches


class _CopyWithoutTables:
    """Stands for the ``copy`` module inside moto's DynamoDB backend: a ``Table`` is not
    deep-copied while ``applying`` is set for this thread; everything else is copied as
    ``copy`` does."""

    def __init__(self) -> None:
        self.applying = threading.local()

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        from moto.dynamodb.models.table import Table

        if isinstance(value, Table) and getattr(self.applying, "active", False):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def _transaction_key(backend: Any, op_type: str, op: dict[str, Any]) -> dict[str, Any]:
    """The key of the item a transaction's action targets (a ``Put``'s, from its item).

    Raises moto's ``ValidationException`` for a ``Put`` whose item lacks a key attribute,
    with DynamoDB's message ("Missing the key pk in the item")."""
    from moto.dynamodb.exceptions import MockValidationException

    if op_type != "Put":
        return dict(op["Key"])
    table = backend.get_table(op["TableName"])
    key = {}
    for name in (table.hash_key_attr, table.range_key_attr):
        if name is None:
            continue
        if name not in op["Item"]:
            missing = f"One or more parameter values were invalid: Missing the key {name} in the item"
            raise MockValidationException(missing)
        key[name] = op["Item"][name]
    return key


class TransactionsAsDynamoDB:
    """Make moto's ``TransactWriteItems`` cost what the transaction touches, and cancel
    one as DynamoDB does.

    moto (5.x) backs a transaction up by deep-copying every table it names, once per
    item, before writing anything, and on a failed condition puts the copies back: the
    cost grows with the tables (the 2,000-upload storm, whose every record writes its
    asset in a transaction, slowed from 160 to 40 commits a minute and its server grew
    past 23 GB before the kernel killed it), and the items written before the failing
    one have already been applied (and streamed) when it is cancelled. DynamoDB checks
    every condition first and writes nothing, streams nothing, when one fails
    ("TransactWriteItems", DynamoDB API reference).

    Here the request's form is checked first, as DynamoDB does before any condition (two
    actions on one item, a ``Put`` without its key: ``ValidationException``); then the
    conditions, against the items as they are (every DynamoDB request of the embedded
    server runs alone); a failed one cancels the transaction with moto's own reasons
    before anything is written. When all hold, moto's code applies the transaction
    without its table copies; a write that still fails (a validation error) is undone
    item by item, and the stream records of the writes and of their undo dropped.
    """

    def apply(self, patches: Patches) -> None:
        """Replace ``DynamoDBBackend.transact_write_items`` and the ``copy`` module moto's
        DynamoDB backend deep-copies tables with."""
        from moto.dynamodb import models as ddb_models

        copies = _CopyWithoutTables()
        patches.set(ddb_models, "copy", copies)
        original = ddb_models.DynamoDBBackend.transact_write_items

        def transact_write_items(backend: Any, transact_items: list[dict[str, Any]]) -> None:
            if len(transact_items) > 100 or any(len(item) != 1 for item in transact_items):
                return original(backend, transact_items)  # moto's own errors for malformed requests
            actions = _actions(backend, transact_items)
            if actions is None:
                return original(backend, transact_items)
            touched = _check_conditions(backend, actions)
            # Each stream's length before: a transaction that fails while applied streams
            # nothing, neither its writes nor their undo (moto's table copies took the
            # stream back too).
            streams = {name: backend.get_table(name).stream_shard for name, _, _ in touched}
            streamed = {name: len(shard.items) for name, shard in streams.items() if shard is not None}
            copies.applying.active = True
            try:
                return original(backend, transact_items)
            except Exception:
                for table_name, key, attributes in touched:  # undo what was applied, item by item
                    if attributes is None:
                        if backend.get_item(table_name, key) is not None:
                            backend.delete_item(table_name, key)
                    else:
                        backend.put_item(table_name, attributes)
                for name, length in streamed.items():
                    del streams[name].items[length:]
                raise
            finally:
                copies.applying.active = False

        patches.set(ddb_models.DynamoDBBackend, "transact_write_items", transact_write_items)


def _actions(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]] | None:
    """Each action of a transaction with the key of its item, after the checks DynamoDB
    makes of the request's form before any condition; ``None`` for a request moto's own
    code must refuse (an unknown action, no table).

    Raises
    ------
    moto.dynamodb.exceptions.MultipleTransactionsException
        If two actions target one item ("no two actions can target the same item").
    moto.dynamodb.exceptions.MockValidationException
        If a ``Put`` lacks a key attribute.
    """
    from moto.dynamodb.exceptions import MultipleTransactionsException

    actions: list[tuple[dict[str, Any], dict[str, Any]]] = []
    targets: set[tuple[str, str]] = set()
    for item in transact_items:
        op_type, op = next(iter(item.items()))
        if op_type not in {"ConditionCheck", "Put", "Delete", "Update"} or "TableName" not in op:
            return None
        key = _transaction_key(backend, op_type, op)
        target = (str(op["TableName"]), str(dict(sorted(key.items()))))  # as moto's check_unicity
        if target in targets:
            raise MultipleTransactionsException()
        targets.add(target)
        actions.append((op, key))
    return actions


def _check_conditions(
    backend: Any, actions: list[tuple[dict[str, Any], dict[str, Any]]]
) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """Check every action's condition against its item as it is; returns each action's
    (table, key, attributes before, ``None`` where there was no item).

    Raises
    ------
    moto.dynamodb.exceptions.TransactionCanceledException
        With a reason per action, if a condition failed (or could not be evaluated).
    moto.dynamodb.exceptions.MockValidationException
        If a condition is not valid.
    """
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import MockValidationException, TransactionCanceledException

    errors: list[tuple[Any, Any, Any]] = []
    touched: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    for op, key in actions:
        current = backend.get_item(op["TableName"], key)
        touched.append((op["TableName"], key, current.to_json()["Attributes"] if current else None))
        condition = op.get("ConditionExpression")
        try:
            held = condition is None or get_filter_expression(
                condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
            ).expr(current)
        except MockValidationException:
            raise  # a ValidationException, as moto's own code raises it
        except Exception as exc:  # noqa: BLE001 - moto's own code makes it a cancellation reason
            errors.append((type(exc).__name__, str(exc), None))
            continue
        if not held:
            old = (
                current.to_json()["Attributes"]
                if current and op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
                else None
            )
            errors.append(("ConditionalCheckFailed", "The conditional request failed", old))
        else:
            errors.append((None, None, None))
    if any(code is not None for code, _, _ in errors):
        raise TransactionCanceledException(errors)
    return touched


class QueryByPartition:
    """Make moto's ``Query`` of a table (not of an index) read the partition it names,
    not the whole table.

    moto (5.2.5, ``Table.query``) takes ``all_items()`` (every item of the table, sorted)
    and keeps those whose partition key is the one asked: the cost of a query grows with
    the table, and the assets table holds every asset, its reference rows (``job#...``,
    ``ref#...``) and its collection candidates (``collect#...``). Its items are stored by
    partition already (``Table.items[hash_key][range_key]``, keyed by ``DynamoType``, whose
    hash and equality are the same type and value): while a query of the table runs,
    ``all_items()`` gives that partition's items only, in the order ``all_items()`` would
    (sort key), so moto's own code sorts, pages, filters, projects and counts them, and the
    answer is what moto gives. Queries of an index, and scans, keep moto's way.
    """

    def __init__(self) -> None:
        self._querying = threading.local()

    def apply(self, patches: Patches) -> None:
        """Replace ``Table.query`` and ``Table.all_items``."""
        from moto.dynamodb.models.table import Table

        querying = self._querying

        def query(
            table: Any,
            hash_key: Any,
            range_comparison: Any,
            range_objs: Any,
            limit: Any,
            exclusive_start_key: Any,
            scan_index_forward: Any,
            projection_expressions: Any,
            index_name: str | None = None,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            scoped = not index_name and hash_key is not None
            if scoped:
                querying.partition = (table, hash_key)
            try:
                return original_query(
                    table,
                    hash_key,
                    range_comparison,
                    range_objs,
                    limit,
                    exclusive_start_key,
                    scan_index_forward,
                    projection_expressions,
                    index_name,
                    *args,
                    **kwargs,
                )
            finally:
                if scoped:
                    querying.partition = None

        def all_items(table: Any) -> list[Any]:
            scope = getattr(querying, "partition", None)
            if scope is None or scope[0] is not table:
                return original_all_items(table)  # type: ignore[no-any-return]
            partition = table.items.get(scope[1])  # .get: Table.items is a defaultdict
            if partition is None:
                return []
            if not table.range_key_attr:
                return [partition]
            return sorted(partition.values(), key=lambda item: item.range_key)

        original_query = patches.set(Table, "query", query)
        original_all_items = patches.set(Table, "all_items", all_items)
