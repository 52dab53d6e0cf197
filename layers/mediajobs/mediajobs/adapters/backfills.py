"""Backfills in DynamoDB, through PynamoDB: :class:`DynamoBackfills`, the ``Backfills`` port.

They live in the assets table (``docs/backfill.md``, "Where it is kept"), beside the assets
they roll a recipe set out to, in items the assets scan filters out (their ``sk`` is never
``asset``):

* :class:`BackfillModel` -- ``backfill``, ``<id>``: its state, what it rolls out and its
  counts (each an ``ADD``, in the transaction of the write it counts);
* :class:`ChangeModel` -- ``backfill``, ``change#<change hex>``: the backfill a change has
  (the conditional put that makes a second ``start`` answer with the first one);
* :class:`SegmentModel` -- ``backfill#<id>``, ``segment#<n>``: one parallel scan segment's
  cursor (``n`` = pass × segments + segment; the ``LastEvaluatedKey`` it stopped at, JSON),
  moved only from the cursor read;
* :class:`MarkModel` -- ``backfill#<id>``, ``job#<job key>``: that the job was counted
  (``enqueued`` or ``reused``) and how it ended (``done``, ``failed``): each job is counted
  once, however many assets share its content, however often its message comes;
* :class:`LaterModel` -- ``backfill#<id>``, ``later#<asset id hash>``: an asset whose
  content was not known when scanned, looked at again once the scan is over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from mediajobs.adapters.dynamo import Lost, Transaction, UnitOfWork
from mediajobs.domain.assets import reference_id
from mediajobs.domain.backfill import MOVES, Backfill, BackfillState, Counts

BACKFILLS_PK: Final = "backfill"
#: The counts an item keeps, by name (:class:`~mediajobs.domain.backfill.Counts`).
COUNTS: Final = ("total", "enqueued", "reused", "done", "failed", "dropped", "assets_scanned", "later")


class BackfillModel(Model):
    """A backfill: ``pk`` ``backfill``, ``sk`` its id."""

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    change = UnicodeAttribute()
    generation = NumberAttribute()
    state = UnicodeAttribute()
    active = JSONAttribute()
    policy_version = UnicodeAttribute()
    segments = NumberAttribute()
    created_at_s = NumberAttribute()
    updated_at_s = NumberAttribute(default=0)
    finished_at_s = NumberAttribute(default=0)
    scanned = NumberAttribute(default=0)
    total = NumberAttribute(default=0)
    enqueued = NumberAttribute(default=0)
    reused = NumberAttribute(default=0)
    done = NumberAttribute(default=0)
    failed = NumberAttribute(default=0)
    dropped = NumberAttribute(default=0)
    assets_scanned = NumberAttribute(default=0)
    later = NumberAttribute(default=0)


class ChangeModel(Model):
    """A change's backfill: ``pk`` ``backfill``, ``sk`` ``change#<change>``."""

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    backfill_id = UnicodeAttribute()
    generation = NumberAttribute()


class SegmentModel(Model):
    """A scan segment's cursor: ``pk`` ``backfill#<id>``, ``sk`` ``segment#<n>``; ``cursor``
    is the JSON of its ``LastEvaluatedKey`` (absent: the start), ``ended`` 1 at the end."""

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    cursor = UnicodeAttribute(null=True)
    ended = NumberAttribute(default=0)
    pages = NumberAttribute(default=0)


class MarkModel(Model):
    """A job a backfill counted: ``pk`` ``backfill#<id>``, ``sk`` ``job#<job key>``."""

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    state = UnicodeAttribute()


class LaterModel(Model):
    """An asset to look at again: ``pk`` ``backfill#<id>``, ``sk`` ``later#<reference_id>``."""

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    bucket = UnicodeAttribute()
    object_key = UnicodeAttribute(attr_name="key")


class BackfillModels(NamedTuple):
    """The backfill models, bound to the assets table and endpoint."""

    backfill: type[BackfillModel]
    change: type[ChangeModel]
    segment: type[SegmentModel]
    mark: type[MarkModel]
    later: type[LaterModel]


def _of(item: BackfillModel) -> Backfill:
    return Backfill(
        id=item.sk,
        change=item.change,
        generation=int(item.generation),
        state=BackfillState(item.state),
        active={m: tuple(refs) for m, refs in (item.active or {}).items()},
        policy_version=item.policy_version,
        segments=int(item.segments),
        created_at_s=int(item.created_at_s),
        updated_at_s=int(item.updated_at_s or 0),
        finished_at_s=int(item.finished_at_s or 0),
        counts=Counts(**{name: int(getattr(item, name) or 0) for name in COUNTS}),
        scanned=int(item.scanned or 0),
    )


def _part(backfill_id: str) -> str:
    return f"backfill#{backfill_id}"


class DynamoBackfills:
    """The ``Backfills`` port (``service_layer/ports.py``) on the assets table.

    Parameters
    ----------
    uow: the unit of work requests go through.
    models: the bound models (:class:`BackfillModels`).
    """

    def __init__(self, uow: UnitOfWork, models: BackfillModels) -> None:
        self._uow = uow
        self._m = models

    # -- reads ---------------------------------------------------------------------------

    def get(self, backfill_id: str) -> Backfill | None:
        """The backfill (strongly consistent), or ``None``.

        Raises
        ------
        TransientFailure
            The read failed.
        """
        item = self._uow.get(self._m.backfill, BACKFILLS_PK, backfill_id, what="backfill read")
        return _of(item) if item is not None else None

    def of_change(self, change: str) -> Backfill | None:
        """The latest backfill of ``change``, or ``None``."""
        item = self._uow.get(self._m.change, BACKFILLS_PK, f"change#{change}", what="backfill change read")
        return self.get(item.backfill_id) if item is not None else None

    def all(self) -> list[Backfill]:
        """Every backfill, oldest first (one ``Query`` of the ``backfill`` partition)."""
        model = self._m.backfill
        rows = self._uow.query(model, BACKFILLS_PK, model.sk.startswith("bf-"), what="backfills query")
        return sorted((_of(r) for r in rows), key=lambda b: (b.created_at_s, b.id))

    def cursor(self, backfill_id: str, segment: int) -> tuple[Mapping[str, Any] | None, bool]:
        """Segment ``segment``'s cursor and whether its scan ended."""
        item = self._uow.get(self._m.segment, _part(backfill_id), f"segment#{segment}", what="segment read")
        if item is None:
            return None, False
        return (json.loads(item.cursor) if item.cursor else None), bool(item.ended)

    def later(self, backfill_id: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` assets (bucket, key) to look at again."""
        model = self._m.later
        rows = self._uow.query(model, _part(backfill_id), model.sk.startswith("later#"), limit=limit, what="later")
        return [(r.bucket, r.object_key) for r in rows]

    def enqueued(self, backfill_id: str, limit: int) -> list[str]:
        """Up to ``limit`` job keys counted ``enqueued`` and not ended (a ``Query`` of the
        backfill's marks filtered on their state)."""
        model = self._m.mark
        rows = self._uow.query(
            model,
            _part(backfill_id),
            model.sk.startswith("job#"),
            filter_condition=model.state == "enqueued",
            limit=limit,
            what="backfill marks",
        )
        return [r.sk.removeprefix("job#") for r in rows]

    def mark(self, backfill_id: str, job_key: str) -> str | None:
        """How the job was counted, or ``None`` (one strongly consistent ``GetItem``)."""
        return self._mark(backfill_id, job_key)

    def reopen(self, backfill_id: str, job_key: str, *, now_s: int) -> bool:
        """A ``dropped`` job wanted again: its mark back to ``enqueued`` and ``dropped`` less
        1, in one transaction conditional on the mark being ``dropped``."""
        m = self._m
        mark = m.mark(_part(backfill_id), f"job#{job_key}")
        item = m.backfill(BACKFILLS_PK, backfill_id)
        tx = self._uow.transaction("backfill reopen")
        tx.update(mark, [m.mark.state.set("enqueued")], m.mark.state == "dropped")
        tx.update(item, [m.backfill.dropped.add(-1), m.backfill.updated_at_s.set(now_s)])
        return self._decided(tx, lambda: self._mark(backfill_id, job_key) == "dropped")

    # -- writes --------------------------------------------------------------------------

    def create(self, backfill: Backfill, *, after: int) -> bool:
        """Store ``backfill`` as its change's backfill, conditional on the change's being
        generation ``after`` (0: none yet): ``False`` when another start won."""
        m = self._m
        change = m.change(
            BACKFILLS_PK, f"change#{backfill.change}", backfill_id=backfill.id, generation=backfill.generation
        )
        condition = m.change.pk.does_not_exist() if after == 0 else m.change.generation == after
        item = m.backfill(
            BACKFILLS_PK,
            backfill.id,
            change=backfill.change,
            generation=backfill.generation,
            state=str(backfill.state),
            active={k: list(v) for k, v in backfill.active.items()},
            policy_version=backfill.policy_version,
            segments=backfill.segments,
            created_at_s=backfill.created_at_s,
            updated_at_s=backfill.created_at_s,
        )
        tx = self._uow.transaction("backfill create").put(change, condition).put(item, m.backfill.pk.does_not_exist())
        return tx.commit()

    def move(self, backfill_id: str, to: BackfillState, *, now_s: int) -> Backfill | None:
        """Move the backfill to ``to`` from any state that may move there
        (:data:`~mediajobs.domain.backfill.MOVES`); ``done`` only when it is
        :meth:`~mediajobs.domain.backfill.Backfill.finished` as read. Returns the backfill
        as stored after, or ``None`` when it is not there or the move is not allowed."""
        model = self._m.backfill

        def attempt() -> Backfill | None:
            now = self.get(backfill_id)
            if now is None or to not in MOVES[now.state] or (to == BackfillState.DONE and not now.finished()):
                return now if now is not None and now.state == to else None
            item = model(BACKFILLS_PK, backfill_id)
            actions = [model.state.set(str(to)), model.updated_at_s.set(now_s)]
            if to in (BackfillState.DONE, BackfillState.CANCELLED):
                actions.append(model.finished_at_s.set(now_s))
            condition = model.state == str(now.state)
            if to == BackfillState.DONE:  # and on the counts read: nothing counted meanwhile is missed
                condition &= (model.total == now.counts.total) & (model.later == now.counts.later)
                condition &= model.scanned == now.scanned
            if not self._uow.update(item, actions, condition, what="backfill move"):
                raise Lost("backfill move")
            return _of(item)

        return self._uow.rounds("backfill move", attempt)

    def advance(
        self,
        backfill_id: str,
        segment: int,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
        *,
        scanned: int,
        now_s: int,
    ) -> bool:
        """Move segment ``segment``'s cursor from ``old`` to ``new`` (``None``: its end),
        counting ``scanned`` assets, in one transaction conditional on the cursor being
        ``old``: ``False`` when another scanner moved it first (its page is counted once)."""
        m = self._m
        seg = m.segment(_part(backfill_id), f"segment#{segment}")
        if old is None:
            condition = m.segment.cursor.does_not_exist() & (m.segment.ended != 1)
        else:
            condition = m.segment.cursor == json.dumps(old, sort_keys=True)
        ended = new is None
        seg_actions = [m.segment.pages.add(1), m.segment.ended.set(1 if ended else 0)]
        seg_actions.append(
            m.segment.cursor.set(json.dumps(new, sort_keys=True)) if new is not None else m.segment.cursor.remove()
        )
        item = m.backfill(BACKFILLS_PK, backfill_id)
        actions = [m.backfill.assets_scanned.add(scanned), m.backfill.updated_at_s.set(now_s)]
        if ended:
            actions.append(m.backfill.scanned.add(1))
        tx = self._uow.transaction("backfill advance").update(seg, seg_actions, condition).update(item, actions)
        return self._decided(tx, lambda: self.cursor(backfill_id, segment) == (old, False))

    def count(self, backfill_id: str, job_key: str, state: str, *, now_s: int) -> bool:
        """Count the job once: put its mark (``enqueued`` or ``reused``) unless there is
        one, adding 1 to ``total`` and to ``state`` in the same transaction. ``False`` when
        it was counted already."""
        m = self._m
        mark = m.mark(_part(backfill_id), f"job#{job_key}", state=state)
        item = m.backfill(BACKFILLS_PK, backfill_id)
        actions = [m.backfill.total.add(1), getattr(m.backfill, state).add(1), m.backfill.updated_at_s.set(now_s)]
        tx = self._uow.transaction("backfill count").put(mark, m.mark.pk.does_not_exist()).update(item, actions)
        return self._decided(tx, lambda: self._mark(backfill_id, job_key) is None)

    def end(self, backfill_id: str, job_key: str, state: str, *, now_s: int) -> bool:
        """Count the end (``done``, ``failed`` or ``dropped``) of an ``enqueued`` job once: its mark moved
        from ``enqueued`` and 1 added to ``state``, in one transaction. ``False`` when it
        ended already, or the backfill never counted it."""
        m = self._m
        mark = m.mark(_part(backfill_id), f"job#{job_key}")
        item = m.backfill(BACKFILLS_PK, backfill_id)
        actions = [getattr(m.backfill, state).add(1), m.backfill.updated_at_s.set(now_s)]
        tx = self._uow.transaction("backfill end")
        tx.update(mark, [m.mark.state.set(state)], m.mark.state == "enqueued").update(item, actions)
        return self._decided(tx, lambda: self._mark(backfill_id, job_key) == "enqueued")

    def keep_for_later(self, backfill_id: str, bucket: str, key: str) -> bool:
        """Note an asset to look at again (once: ``later`` counts it in the same transaction)."""
        m = self._m
        row = m.later(_part(backfill_id), f"later#{reference_id(bucket, key)}", bucket=bucket, object_key=key)
        item = m.backfill(BACKFILLS_PK, backfill_id)
        tx = self._uow.transaction("backfill later").put(row, m.later.pk.does_not_exist())
        tx.update(item, [m.backfill.later.add(1)])
        return self._decided(tx, lambda: not self._is_later(backfill_id, bucket, key))

    def looked_again(self, backfill_id: str, bucket: str, key: str) -> bool:
        """Drop an asset from those to look at again (once: ``later`` less 1 with it)."""
        m = self._m
        row = m.later(_part(backfill_id), f"later#{reference_id(bucket, key)}")
        item = m.backfill(BACKFILLS_PK, backfill_id)
        tx = self._uow.transaction("backfill looked again").delete(row, m.later.pk.exists())
        tx.update(item, [m.backfill.later.add(-1)])
        return self._decided(tx, lambda: self._is_later(backfill_id, bucket, key))

    # -- helpers -------------------------------------------------------------------------

    def _decided(self, tx: Transaction, still_possible: Callable[[], bool]) -> bool:
        """Commit ``tx`` until it is written (``True``) or its condition is found false
        (``False``): a commit refused while ``still_possible()`` (read again) holds met a
        conflict or throttling, not the condition, and is sent again (the unit of work's
        rounds)."""

        def attempt() -> bool:
            if tx.commit():
                return True
            if still_possible():
                raise Lost(tx.what)
            return False

        return self._uow.rounds(tx.what, attempt)

    def _mark(self, backfill_id: str, job_key: str) -> str | None:
        item = self._uow.get(self._m.mark, _part(backfill_id), f"job#{job_key}", what="backfill mark read")
        return item.state if item is not None else None

    def _is_later(self, backfill_id: str, bucket: str, key: str) -> bool:
        sk = f"later#{reference_id(bucket, key)}"
        return self._uow.get(self._m.later, _part(backfill_id), sk, what="backfill later read") is not None
