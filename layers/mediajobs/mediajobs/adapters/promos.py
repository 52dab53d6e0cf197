"""The promo registry in DynamoDB, through PynamoDB: :class:`DynamoPromos`, the
``PromoRecords`` port.

It lives in the assets table (``docs/moderation.md``, "Promos"), in items the assets scan
filters out (their ``sk`` is never ``asset``):

* :class:`PromoModel` -- ``promo``, ``<bucket>/<album prefix>``: the album's latest promo
  request (:class:`~mediajobs.domain.promo.PromoRecord`); one ``Query`` lists them all;
* a reference row under the promo's job (``job#<job key>``, ``ref#<reference_id(bucket,
  "promo:<prefix>")>``, :class:`~mediajobs.adapters.assets.ReferenceModel`), written with
  it: the collection keeps a job some album's record points at, as it keeps an asset's.

A request that moves an album to another promo writes, in one transaction: the record
(conditional on the revision read), the new job's reference row, the old one's deletion and
a collection candidate of the old job -- which the collection deletes after its grace unless
another album (or the same one, back again) references it.
"""

from __future__ import annotations

from typing import Final

from pynamodb.attributes import BooleanAttribute, JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from mediajobs.adapters.assets import AssetModels, candidate_pk, candidate_sk, reference_pk, reference_sk
from mediajobs.adapters.dynamo import UnitOfWork
from mediajobs.domain.keys import UNKEYED
from mediajobs.domain.promo import AlbumFrame, LeftOut, PromoRecord, holder_key

PROMOS_PK: Final = "promo"


class PromoModel(Model):
    """An album's promo record: ``pk`` ``promo``, ``sk`` ``<bucket>/<prefix>``."""

    class Meta:
        table_name = "mediajobs-assets"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    bucket = UnicodeAttribute()
    prefix = UnicodeAttribute()
    job_key = UnicodeAttribute(null=True)
    recipe = UnicodeAttribute()
    policy_version = UnicodeAttribute()
    requested_at_s = NumberAttribute()
    frames = JSONAttribute(null=True)
    left_out = JSONAttribute(null=True)
    left_out_total = NumberAttribute(default=0)
    truncated = BooleanAttribute(default=False)
    revision = NumberAttribute(default=0)
    #: The key scheme's id the promo's key was derived under (none: "1", before it was kept).
    keys = UnicodeAttribute(null=True)


def _record(item: PromoModel) -> PromoRecord:
    return PromoRecord(
        bucket=item.bucket,
        prefix=item.prefix,
        job_key=item.job_key,
        recipe=item.recipe,
        policy_version=item.policy_version,
        requested_at_s=int(item.requested_at_s),
        frames=tuple(
            AlbumFrame(f["asset_key"], f["rendition_job_key"], f["rendition_recipe"], f.get("decision_id"))
            for f in item.frames or ()
        ),
        left_out=tuple(LeftOut(x["asset_key"], x["state"], x["why"]) for x in item.left_out or ()),
        revision=int(item.revision or 0),
        left_out_total=int(item.left_out_total or 0),
        truncated=bool(item.truncated),
        keys=item.keys or UNKEYED.id,
    )


class DynamoPromos:
    """The promo registry (module docstring).

    Parameters
    ----------
    uow: the unit of work every request goes through.
    model: the bound :class:`PromoModel` of the assets table.
    assets: the assets table's models (its reference rows and candidates).
    """

    def __init__(self, uow: UnitOfWork, model: type[PromoModel], assets: AssetModels) -> None:
        self._uow = uow
        self._model = model
        self._assets = assets

    def get(self, bucket: str, prefix: str) -> PromoRecord | None:
        """The album's record (a strongly consistent ``GetItem``), or ``None``.

        Raises
        ------
        TransientFailure
            The read failed.
        """
        item = self._uow.get(self._model, PROMOS_PK, f"{bucket}/{prefix}", what="promo read")
        return None if item is None else _record(item)

    def all(self) -> list[PromoRecord]:
        """Every album's record, by bucket and prefix (one ``Query``, every page).

        Raises
        ------
        TransientFailure
            The query failed.
        """
        return [_record(item) for item in self._uow.query(self._model, PROMOS_PK, what="promos query")]

    def put(self, record: PromoRecord, *, previous: PromoRecord | None, now_s: int) -> bool:
        """Store ``record`` as its album's, if the album's record is still ``previous`` (its
        revision; ``None``: none yet), with the promo job's reference row (none for a record
        without a job: an album with nothing to show); when ``previous`` named another job,
        its reference row is deleted and a candidate of it written (released by the
        album). ``False`` when ``previous`` is no longer the record.

        Raises
        ------
        PermanentFailure
            ``unstorable_input``: the record is over DynamoDB's item size.
        TransientFailure
            Anything else.
        """
        model, refs, cands = self._model, self._assets.reference, self._assets.candidate
        condition = model.pk.does_not_exist() if previous is None else model.revision == previous.revision
        item = model(
            PROMOS_PK,
            f"{record.bucket}/{record.prefix}",
            bucket=record.bucket,
            prefix=record.prefix,
            job_key=record.job_key,
            recipe=record.recipe,
            policy_version=record.policy_version,
            requested_at_s=record.requested_at_s,
            frames=[f.to_json() for f in record.frames],
            left_out=[x.to_json() for x in record.left_out],
            left_out_total=record.left_out_total,
            truncated=record.truncated,
            revision=(previous.revision if previous is not None else 0) + 1,
            keys=record.keys,
        )
        holder = holder_key(record.prefix)
        ref_sk = reference_sk(record.bucket, holder)
        tx = self._uow.transaction("promo record").put(item, condition)
        moved = previous is None or previous.job_key != record.job_key
        if moved and record.job_key is not None:
            tx.put(refs(reference_pk(record.job_key), ref_sk, bucket=record.bucket, object_key=holder))
        if moved and previous is not None and previous.job_key is not None:
            tx.delete(refs(reference_pk(previous.job_key), ref_sk))
            released_by = ref_sk.removeprefix("ref#")
            tx.put(
                cands(
                    candidate_pk(previous.job_key),
                    candidate_sk(previous.job_key, released_by),
                    job_key=previous.job_key,
                    released_by=released_by,
                    released_at_s=now_s,
                )
            )
        return tx.commit()
