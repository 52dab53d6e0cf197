"""The source index in DynamoDB, through PynamoDB: what is known of a source version or
a content before reading its bytes.

Two kinds of row share the table, both keyed by ``source_id``:

* a **source version** (64 hex characters: the SHA-256 of ``["s3", bucket, key,
  "version", id]`` or of the ETag-and-size form, see
  :func:`mediajobs.domain.keys.source_version_id`; before, the JSON itself, which a long key
  could make longer than DynamoDB allows): the SHA-256 of its bytes, remembered after the
  first time they were hashed, so a redelivered event needs no byte of the object;
* a **content** (``sha256:<hex>``): its media type, for objects whose full-object
  SHA-256 checksum names the content before any read.

While the first delivery reads an unknown source, its row is a ``reading`` marker with
a lease: a duplicate that arrives meanwhile is told to come back instead of reading the
same bytes again. Rows expire through DynamoDB TTL (``expires_at_s``); losing one only
costs a re-hash.
"""

from __future__ import annotations

import logging
from typing import Final

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, GetError, PutError, PynamoDBException
from pynamodb.models import Model

from mediajobs.adapters.ledger import dynamo_failure
from mediajobs.domain.jobs import KnownSource, Reading

log = logging.getLogger(__name__)

#: How long a remembered hash is kept: 30 days (a redelivery later than that re-hashes).
SOURCE_TTL_S: Final = 30 * 24 * 3600
_READING: Final = "reading"
_KNOWN: Final = "known"


class SourceModel(Model):
    """A source-index row. The hash key is ``source_id``; there is no range key.

    ``template.yaml`` declares the same key schema and ``expires_at_s`` as the TTL
    attribute (a contract test holds them together).
    """

    class Meta:
        table_name = "mediajobs-sources"
        region = "us-east-1"

    source_id = UnicodeAttribute(hash_key=True)
    state = UnicodeAttribute()
    sha256 = UnicodeAttribute(null=True)
    size_bytes = NumberAttribute(null=True)
    media = UnicodeAttribute(null=True)
    reader_token = UnicodeAttribute(null=True)
    lease_expires_at_s = NumberAttribute(default=0)
    updated_at_s = NumberAttribute()
    expires_at_s = NumberAttribute()


def _entry(row: SourceModel, now_s: int) -> KnownSource | Reading | None:
    if row.state == _KNOWN and row.sha256:
        return KnownSource(row.sha256, int(row.size_bytes or 0), row.media)
    if row.state == _READING and int(row.lease_expires_at_s) > now_s:
        return Reading(int(row.lease_expires_at_s))
    return None


class SourceIndex:
    """Remembered hashes and media types of sources.

    Parameters
    ----------
    model: a bound :class:`SourceModel` (see :func:`mediajobs.adapters.ledger.bind_model`).
    """

    def __init__(self, model: type[SourceModel]) -> None:
        self._model = model

    def lookup(self, source_id: str, *, now_s: int) -> KnownSource | Reading | None:
        """What is known of ``source_id``: one consistent ``GetItem``.

        Returns ``None`` when nothing is known (or a reader's lease ran out).

        Raises
        ------
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the key
            (:func:`~mediajobs.adapters.ledger.dynamo_failure`).
        TransientFailure
            On any other DynamoDB error.
        """
        try:
            row = self._model.get(source_id, consistent_read=True)
        except self._model.DoesNotExist:
            return None
        except GetError as exc:
            raise dynamo_failure(exc, "source index read") from exc
        return _entry(row, now_s)

    def begin_reading(
        self, source_id: str, token: str, *, now_s: int, lease_until_s: int
    ) -> KnownSource | Reading | None:
        """Mark ``source_id`` as being read by the holder of ``token``.

        One conditional put (no row, or a reader whose lease ran out); after a lost race,
        one consistent read.

        Returns
        -------
        ``None`` when this delivery holds the marker; otherwise what another delivery
        left: :class:`Reading` (come back later) or :class:`KnownSource`.

        Raises
        ------
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the row
            (:func:`~mediajobs.adapters.ledger.dynamo_failure`).
        TransientFailure
            On any other DynamoDB error than a lost race.
        """
        m = self._model
        row = m(
            source_id,
            state=_READING,
            reader_token=token,
            lease_expires_at_s=lease_until_s,
            updated_at_s=now_s,
            expires_at_s=now_s + SOURCE_TTL_S,
        )
        takeable = m.source_id.does_not_exist() | ((m.state == _READING) & (m.lease_expires_at_s <= now_s))
        try:
            row.save(condition=takeable)
            return None
        except PutError as exc:
            if exc.cause_response_code != "ConditionalCheckFailedException":
                raise dynamo_failure(exc, "source index put") from exc
        entry = self.lookup(source_id, now_s=now_s)
        return entry if entry is not None else Reading(now_s)

    def remember(self, source_ids: list[str], known: KnownSource, *, now_s: int) -> None:
        """Record ``known`` under every id (one ``BatchWriteItem``), replacing markers.

        Failures are logged, not raised: the index is a cache, and the next delivery
        re-hashes.
        """
        try:
            with self._model.batch_write() as batch:
                for source_id in source_ids:
                    batch.save(
                        self._model(
                            source_id,
                            state=_KNOWN,
                            sha256=known.sha256,
                            size_bytes=known.size_bytes,
                            media=known.media,
                            updated_at_s=now_s,
                            expires_at_s=now_s + SOURCE_TTL_S,
                        )
                    )
        except PynamoDBException as exc:
            log.warning("could not remember a source: %s", exc, extra={"source_ids": source_ids})

    def abandon(self, source_id: str, token: str) -> None:
        """Remove this delivery's ``reading`` marker (after a failure), so a retry need not
        wait for its lease. Best effort: a marker that changed hands is left alone."""
        m = self._model
        try:
            m(source_id).delete(condition=(m.state == _READING) & (m.reader_token == token))
        except DeleteError as exc:
            if exc.cause_response_code != "ConditionalCheckFailedException":
                log.warning("could not remove a reading marker: %s", exc, extra={"source_id": source_id})
