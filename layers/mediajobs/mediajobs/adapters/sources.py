"""The source index in DynamoDB: what is known of a source version or a content before
reading its bytes (:class:`SourceModel`).

Two kinds of row share the table, both keyed by ``source_id``:

* a **source version** (64 hex characters: the SHA-256 of ``["s3", bucket, key,
  "version", id]`` or of the ETag-and-size form, see
  :func:`mediajobs.domain.keys.source_version_id`): the SHA-256 of its bytes, remembered
  after the first time they were hashed, so a redelivered event needs no byte of the object;
* a **content** (``sha256:<hex>``): its media type, for objects whose full-object
  SHA-256 checksum names the content before any read.

While the first delivery reads an unknown source, its row is a ``reading`` mark held
under a fenced lease (token and expiry, as a job's claim: :class:`~mediajobs.service_layer.lease.Lease`):
a duplicate that arrives meanwhile is told to come back instead of reading the same bytes
again; a mark whose lease ran out is taken over conditioned on its token. Rows expire
through DynamoDB TTL (``expires_at_s``); losing one only costs a re-hash. Every request
goes through the unit of work (:mod:`mediajobs.adapters.dynamo`).
"""

from __future__ import annotations

import logging
from typing import Final

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from mediajobs.adapters.dynamo import UnitOfWork
from mediajobs.domain.errors import PermanentFailure, Superseded, TransientFailure
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
    lease_token = UnicodeAttribute(null=True)
    lease_expires_at_s = NumberAttribute(default=0)
    updated_at_s = NumberAttribute()
    expires_at_s = NumberAttribute()


def _entry(row: SourceModel) -> KnownSource | Reading | None:
    if row.state == _KNOWN and row.sha256:
        return KnownSource(row.sha256, int(row.size_bytes or 0), row.media)
    if row.state == _READING:
        return Reading(int(row.lease_expires_at_s or 0), row.lease_token)
    return None


class SourceIndex:
    """Remembered hashes and media types of sources, and the reading marks.

    Parameters
    ----------
    uow: the unit of work every request goes through.
    model: the source index's bound model.
    """

    def __init__(self, uow: UnitOfWork, model: type[SourceModel]) -> None:
        self._uow = uow
        self._model = model

    def lookup(self, source_id: str, *, now_s: int) -> KnownSource | Reading | None:
        """What is known of ``source_id``: one consistent ``GetItem``. ``None`` when nothing
        is known, or a reader's lease ran out.

        Raises
        ------
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the key.
        TransientFailure
            On any other DynamoDB error.
        """
        entry = self._entry(source_id)
        if isinstance(entry, Reading) and entry.lease_expires_at_s <= now_s:
            return None
        return entry

    def _entry(self, source_id: str) -> KnownSource | Reading | None:
        row = self._uow.get(self._model, source_id, what="source index read")
        return None if row is None else _entry(row)

    def begin_reading(
        self, source_id: str, token: str, *, now_s: int, lease_until_s: int
    ) -> KnownSource | Reading | None:
        """Mark ``source_id`` as being read by the holder of ``token`` until ``lease_until_s``.

        One conditional put (no row); after a lost race, one consistent read, and when the
        mark found is a reader's whose lease ran out, one update fenced on its token.

        Returns
        -------
        ``None`` when this delivery holds the mark; otherwise what another delivery left:
        :class:`Reading` (come back later) or :class:`KnownSource`.

        Raises
        ------
        PermanentFailure
            ``unstorable_input`` when DynamoDB refuses the row.
        TransientFailure
            On any other DynamoDB error than a lost race.
        """
        m = self._model
        row = m(
            source_id,
            state=_READING,
            lease_token=token,
            lease_expires_at_s=lease_until_s,
            updated_at_s=now_s,
            expires_at_s=now_s + SOURCE_TTL_S,
        )
        if self._uow.put(row, m.source_id.does_not_exist(), what="source index put"):
            return None
        found = self._entry(source_id)
        if isinstance(found, KnownSource) or (isinstance(found, Reading) and found.lease_expires_at_s > now_s):
            return found
        # A reader's mark whose lease ran out (or a row of no known kind): taken over,
        # conditioned on the token it carries.
        seen = found.lease_token if isinstance(found, Reading) else None
        fence = m.lease_token.does_not_exist() if seen is None else m.lease_token == seen
        actions = [
            m.state.set(_READING),
            m.lease_token.set(token),
            m.lease_expires_at_s.set(lease_until_s),
            m.updated_at_s.set(now_s),
            m.expires_at_s.set(now_s + SOURCE_TTL_S),
        ]
        if self._uow.update(m(source_id), actions, fence, what="source index update"):
            return None
        return Reading(now_s)

    def renew(self, source_id: str, token: str, *, lease_until_s: int, now_s: int) -> None:
        """Extend this reader's mark to ``lease_until_s``.

        Raises
        ------
        Superseded
            The mark is not ``token``'s any more (taken over, or remembered).
        """
        m = self._model
        actions = [m.lease_expires_at_s.set(lease_until_s), m.updated_at_s.set(now_s)]
        held = (m.state == _READING) & (m.lease_token == token)
        if not self._uow.update(m(source_id), actions, held, what="source index update"):
            raise Superseded(source_id)

    def release(self, source_id: str, token: str, *, detail: str = "", now_s: int = 0) -> None:
        """Remove this reader's mark (after a failure), so a retry need not wait for its
        lease. A mark that changed hands, or was remembered over, is left alone.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`lookup`.
        """
        m = self._model
        self._uow.delete(m(source_id), (m.state == _READING) & (m.lease_token == token), what="source index delete")

    def remember(self, source_ids: list[str], known: KnownSource, *, now_s: int) -> None:
        """Record ``known`` under every id (one ``BatchWriteItem``), replacing marks.

        Failures are logged, not raised: the index is a cache, and the next delivery
        re-hashes.
        """
        rows = [
            self._model(
                source_id,
                state=_KNOWN,
                sha256=known.sha256,
                size_bytes=known.size_bytes,
                media=known.media,
                updated_at_s=now_s,
                expires_at_s=now_s + SOURCE_TTL_S,
            )
            for source_id in source_ids
        ]
        try:
            self._uow.put_all(rows, what="source index batch put")
        except (PermanentFailure, TransientFailure) as exc:
            log.warning("could not remember a source: %s", exc, extra={"source_ids": source_ids})
