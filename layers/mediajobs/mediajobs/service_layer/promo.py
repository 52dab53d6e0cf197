"""Promos, in order: what a request for an album's promo does (``mediajobs promo PREFIX``,
``POST /promos?prefix=...``), and what a new policy's backfill does with them.

1. **List the album** (:meth:`Promos.request`): up to :data:`~mediajobs.domain.promo.MAX_ALBUM_KEYS`
   keys under the prefix (``ListObjectsV2``, key order), their assets (``BatchGetItem``).
2. **Choose the frames** (:func:`~mediajobs.domain.promo.album_frames`): each ``ready`` asset's
   rendition, read from the ledger (one ``BatchGetItem``) to know it is done and which
   decision it was rendered under; the others are left out, with why.
3. **The job** (:func:`~mediajobs.domain.promo.promo_spec`): its key hashes the renditions'
   and decisions' job keys, the recipe and the policy. It is written ``requested`` and a job
   request sent (:meth:`~mediajobs.service_layer.requests.JobRequests.request`): the worker
   claims and renders it like any job, once; an unchanged album requested again finds it
   done (nothing sent) or on its way (its request sent again: the claim makes it run once).
4. **The record** (:class:`~mediajobs.service_layer.ports.PromoRecords`): the album's latest
   promo, with the job's reference (the previous promo's released to the collection). The
   job's row is read after it: a promo collected meanwhile, or before (an album back to an
   old promo), is requested again. An album with nothing to show retires its promo: its
   record keeps no job.

**Regeneration** (:meth:`Promos.regenerate`): every album whose record carries another
policy (or promo recipe) than this deployment's is requested again -- run by the backfill of
that change once it is done (``service_layer/backfill.py``), when its assets serve the new
policy's renditions.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mediajobs.domain.errors import PermanentFailure, TransientFailure
from mediajobs.domain.jobs import DECISIONS_OUTPUT, JobState, JobView, OutputInput
from mediajobs.domain.moderation import MODERATION_INPUT
from mediajobs.domain.promo import (
    MAX_ALBUM_KEYS,
    MAX_LEFT_OUT,
    AlbumFrame,
    LeftOut,
    PromoRecord,
    album_frames,
    promo_spec,
    valid_prefix,
)
from mediajobs.domain.recipes import Recipe
from mediajobs.service_layer.ports import Assets, Ledger, ObjectStore, PromoRecords
from mediajobs.service_layer.requests import JobRequests
from mediajobs.settings import Settings

log = logging.getLogger(__name__)

#: Job states of a promo that is not done and that no request may be on its way for
#: (collected, being collected, or given back): requested again.
_AGAIN = frozenset({JobState.COLLECTED, JobState.COLLECTING, JobState.TRANSIENT_FAILURE})


class PromoState(enum.StrEnum):
    """What a promo request or status found.

    ``requested``: the job is written and its request sent (or on its way, or running);
    ``done``: the promo is there (its manifest and outputs in the answer); ``failed``: it
    failed for good (its reason); ``empty``: the album holds no asset the promo can show
    (nothing requested); ``invalid``: the prefix is not an album's; ``unknown``: no promo
    was requested for the album (status only).
    """

    REQUESTED = "requested"
    DONE = "done"
    FAILED = "failed"
    EMPTY = "empty"
    INVALID = "invalid"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class PromoAnswer:
    """The answer to a promo request or status.

    Attributes
    ----------
    state: a :class:`PromoState`.
    prefix: the album.
    message: in words, for ``invalid``, ``empty`` and ``failed``.
    job_key: the promo job, when there is one.
    record: the album's record (frames and left out), when there is one.
    row: the promo job's ledger row, when read.
    """

    state: PromoState
    prefix: str
    message: str = ""
    job_key: str | None = None
    record: PromoRecord | None = None
    row: JobView | None = None
    left_out: tuple[LeftOut, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """``{"state", "prefix", "message", "job_key", "recipe", "policy_version", "frames",
        "left_out", "left_out_total", "truncated", "manifest_key", "outputs", "reason",
        "detail"}``: what the CLI prints and the route answers."""
        record = self.record
        done = self.row if self.row is not None and self.row.state == JobState.DONE else None
        failed = self.row if self.row is not None and self.row.state == JobState.PERMANENT_FAILURE else None
        return {
            "state": str(self.state),
            "prefix": self.prefix,
            "message": self.message,
            "job_key": self.job_key,
            "recipe": record.recipe if record else None,
            "policy_version": record.policy_version if record else None,
            "frames": [f.to_json() for f in record.frames] if record else [],
            "left_out": [x.to_json() for x in (record.left_out if record else self.left_out)],
            "left_out_total": record.left_out_total if record else len(self.left_out),
            "truncated": record.truncated if record else False,
            "manifest_key": done.manifest_key if done else None,
            "outputs": [o.to_json() for o in done.outputs] if done else [],
            "reason": failed.failure_reason if failed else None,
            "detail": failed.failure_detail if failed else None,
        }


class Promos:
    """Requests, reads and regenerates albums' promos (the module's order).

    Parameters
    ----------
    settings: ``media_bucket``, ``originals_prefix``, ``derivatives_prefix``,
        ``policy_version``.
    store: S3 (the album's listing).
    assets: the asset records.
    ledger: the job ledger (the renditions' rows, the promo's).
    requests: writes and sends the promo's job request.
    records: the promo registry.
    recipe: the active promo recipe (``None``: this deployment makes no promo).
    active: every active recipe's reference (a promo of renditions no longer active is stale).
    clock: Unix time, seconds.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ObjectStore,
        assets: Assets,
        ledger: Ledger,
        requests: JobRequests,
        records: PromoRecords,
        recipe: Recipe | None,
        active: frozenset[str] = frozenset(),
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._store = store
        self._assets = assets
        self._ledger = ledger
        self._requests = requests
        self._records = records
        self._recipe = recipe
        self._active = active
        self._clock = clock

    @property
    def bucket(self) -> str:
        """The media bucket albums live in."""
        return self._settings.media_bucket

    def request(self, prefix: str, bucket: str | None = None) -> PromoAnswer:
        """Request the promo of the album ``prefix`` of ``bucket`` (default: the settings'
        ``media_bucket``) (module docstring, 1-4).

        Raises
        ------
        PermanentFailure, TransientFailure
            As the ports' (DynamoDB, S3, SQS): nothing half-done is wrong to redo.
        """
        problem = valid_prefix(prefix, self._settings.originals_prefix)
        if problem is not None:
            return PromoAnswer(PromoState.INVALID, prefix, problem)
        if self._recipe is None:
            return PromoAnswer(PromoState.INVALID, prefix, "no promo recipe is active here (recipes/active.json)")
        bucket = bucket or self.bucket
        rendition = self._recipe.params.rendition
        keys = self._store.keys(bucket, prefix, limit=MAX_ALBUM_KEYS + 1)
        truncated = len(keys) > MAX_ALBUM_KEYS
        found = self._assets.get_many(bucket, keys[:MAX_ALBUM_KEYS])
        views = [found[k] for k in keys[:MAX_ALBUM_KEYS] if k in found]
        frames, left_out = album_frames(views, rendition, self._done_renditions(views, rendition), self._max_cards)
        now = int(self._clock())
        if not frames:  # nothing to show now: the album's earlier promo, if any, is retired
            empty = PromoRecord(
                bucket, prefix, None, self._recipe.ref, self._settings.policy_version, now, (),
                tuple(left_out[:MAX_LEFT_OUT]), left_out_total=len(left_out), truncated=truncated,
                keys=self._settings.keys.id,
            )  # fmt: skip
            stored = self._store_record(empty) if self._records.get(bucket, prefix) is not None else empty
            return self._answer(prefix, stored, None)
        spec = promo_spec(
            self._recipe,
            frames,
            bucket=bucket,
            prefix=prefix,
            policy_version=self._settings.policy_version,
            derivatives_prefix=self._settings.derivatives_prefix,
            rendition=rendition,
            keys=self._settings.keys,
        )
        self._requests.request([spec])
        record = PromoRecord(
            bucket, prefix, spec.job_key, self._recipe.ref, self._settings.policy_version, now,
            tuple(frames), tuple(left_out[:MAX_LEFT_OUT]), left_out_total=len(left_out), truncated=truncated,
            keys=self._settings.keys.id,
        )  # fmt: skip
        stored = self._store_record(record)
        # Read after the reference is written: a collection that found the job unreferenced
        # before it (an album back to an old promo) may have collected it meanwhile. It is
        # requested again, and rendered again by the claim's takeover, as an asset's job
        # referenced again is by its delivery.
        row = self._ledger.get(spec.job_key)
        if row is not None and row.state in _AGAIN:
            self._requests.request_one(spec.job_key)
        log.info("promo requested", extra={"prefix": prefix, "job_key": spec.job_key, "frames": len(frames)})
        return self._answer(prefix, stored, row)

    def _store_record(self, record: PromoRecord) -> PromoRecord:
        """Store ``record`` as its album's, on top of whatever another request stored
        meanwhile (a few rounds of read and conditional write); the record as stored.

        Raises
        ------
        TransientFailure
            Another request kept writing first (ask again), or DynamoDB failed.
        """
        for _ in range(5):
            previous = self._records.get(record.bucket, record.prefix)
            if self._records.put(record, previous=previous, now_s=record.requested_at_s):
                return self._records.get(record.bucket, record.prefix) or record
        raise TransientFailure(f"the promo record of {record.prefix} kept changing: ask again")

    def status(self, prefix: str) -> PromoAnswer:
        """The album's latest promo: its record and its job's row (``unknown`` when none
        was requested)."""
        problem = valid_prefix(prefix, self._settings.originals_prefix)
        if problem is not None:
            return PromoAnswer(PromoState.INVALID, prefix, problem)
        record = self._records.get(self.bucket, prefix)
        if record is None:
            return PromoAnswer(PromoState.UNKNOWN, prefix, "no promo was requested for this album")
        return self._answer(prefix, record, self._ledger.get(record.job_key) if record.job_key else None)

    def all(self) -> list[PromoRecord]:
        """Every album's record (the registry)."""
        return self._records.all()

    def affected(self, policy_version: str) -> list[PromoRecord]:
        """The albums whose latest promo was made under ``policy_version``."""
        return [r for r in self._records.all() if r.policy_version == policy_version]

    def stale(self) -> list[PromoRecord]:
        """The albums whose latest promo carries another policy, promo recipe or key scheme
        than this deployment's, or shows a rendition of a recipe no longer active: what
        :meth:`regenerate` requests again."""
        if self._recipe is None:
            return []
        policy, recipe, keys = self._settings.policy_version, self._recipe.ref, self._settings.keys.id

        def stale(r: PromoRecord) -> bool:
            renditions = {f.rendition_recipe for f in r.frames}
            changed = r.policy_version != policy or r.recipe != recipe or r.keys != keys
            return changed or bool(self._active and renditions - self._active)

        return [r for r in self._records.all() if stale(r)]

    def regenerate(self) -> list[PromoAnswer]:
        """Request again every album :meth:`stale` lists (a new policy's backfill, once its
        assets serve the new renditions). Idempotent: an album already regenerated is not
        stale any more, and a request of an unchanged album finds its job. An album with
        nothing to show now (every asset deleted or refused) keeps its record; one DynamoDB
        refuses is logged and skipped: neither holds the backfill back.

        Raises
        ------
        TransientFailure
            A read or write failed (the next tick asks again).
        """
        answers = []
        for record in self.stale():
            try:
                answers.append(self.request(record.prefix, record.bucket))
            except PermanentFailure as refused:
                log.warning("promo not regenerated: %s", refused, extra={"prefix": record.prefix})
        if answers:
            log.info("promos regenerated", extra={"albums": len(answers)})
        return answers

    # -- helpers ---------------------------------------------------------------------------

    @property
    def _max_cards(self) -> int:
        assert self._recipe is not None
        return int(self._recipe.params.max_cards)

    def _done_renditions(self, views: list[Any], rendition: str) -> Mapping[str, str | None]:
        """Rendition job key -> its decision id, for the renditions of ready assets whose row
        is done and whose decision (the moderation job's row) is done too: one ``BatchGetItem``
        each."""
        wanted = sorted({j.job_key for v in views for j in v.jobs if any(o.name == rendition for o in j.outputs)})
        rows = self._ledger.find(wanted) if wanted else {}
        decided: dict[str, str | None] = {}
        for key, row in rows.items():
            if row.state != JobState.DONE or row.spec is None:
                continue
            gate = row.spec.inputs.get(MODERATION_INPUT)
            decided[key] = gate.job_key if isinstance(gate, OutputInput) and gate.output == DECISIONS_OUTPUT else None
        gates = sorted({g for g in decided.values() if g is not None})
        gate_rows = self._ledger.find(gates) if gates else {}
        return {
            k: g for k, g in decided.items() if g is None or (g in gate_rows and gate_rows[g].state == JobState.DONE)
        }

    def _answer(self, prefix: str, record: PromoRecord, row: JobView | None) -> PromoAnswer:
        if record.job_key is None:
            rendition = self._recipe.params.rendition if self._recipe is not None else "card"
            message = f"no ready asset with a {rendition!r} rendition"
            return PromoAnswer(PromoState.EMPTY, prefix, message, None, record, None)
        if row is not None and row.state == JobState.DONE:
            state = PromoState.DONE
        elif row is not None and row.state == JobState.PERMANENT_FAILURE:
            state = PromoState.FAILED
        else:
            state = PromoState.REQUESTED
        message = f"{row.failure_reason}: {row.failure_detail or ''}" if state == PromoState.FAILED and row else ""
        return PromoAnswer(state, prefix, message, record.job_key, record, row)


__all__ = ["AlbumFrame", "PromoAnswer", "PromoState", "Promos"]
