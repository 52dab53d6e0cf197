"""Identify: the first step of a delivery. What the original is, without reading a byte.

Refuse what is certainly bad from the event (0 bytes, over the size limit), then from
``HeadObject`` (the URL-decoded key first, the key as the event spelled it only when that
names no object); learn its SHA-256 from the object's full-object checksum, from its asset
(the same version: a duplicate costs no lookup), or from the source index (a delivery
reading it now sends this one back: :class:`~mediajobs.domain.errors.JobBusy`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from mediajobs.domain.errors import SOURCE_MISSING, UNSUPPORTED_FORMAT, DeadlineReached, JobBusy, PermanentFailure
from mediajobs.domain.jobs import (
    Delivery,
    KnownSource,
    ObjectHead,
    ObjectRef,
    Reading,
    SourceResult,
    refused,
    size_refusal,
)
from mediajobs.domain.keys import is_original_key, source_version_id
from mediajobs.service_layer.assets import KeptAsset
from mediajobs.service_layer.ports import ObjectStore, Sources
from mediajobs.settings import Settings

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Identified:
    """An original identified before reading a byte of it.

    Attributes
    ----------
    ref: the object: the key that names it (see :meth:`Identify.head`), with its version id.
    head: what ``HeadObject`` said of it.
    source_id: its id in the source index (``None`` when the object names no version).
    sha256: its content's SHA-256 when known without reading (checksum, asset, source index).
    media: its media type when the asset or the source index remembers it.
    """

    ref: ObjectRef
    head: ObjectHead
    source_id: str | None
    sha256: str | None
    media: str | None


class Identify:
    """Step 1 of a delivery (see the module docstring).

    Parameters
    ----------
    settings: ``max_input_bytes``, ``deadline_margin_s``.
    store: S3 (``HeadObject``).
    sources: the source index.
    clock: Unix time in seconds.
    """

    def __init__(self, settings: Settings, *, store: ObjectStore, sources: Sources, clock: Callable[[], float]) -> None:
        self._settings = settings
        self._store = store
        self._sources = sources
        self._clock = clock

    @property
    def settings(self) -> Settings:
        """The settings the worker runs with."""
        return self._settings

    def ours(self, ref: ObjectRef) -> bool:
        """Whether ``ref``'s key is an original's (:func:`~mediajobs.domain.keys.is_original_key`:
        under ``originals_prefix``, not a folder marker): any other is ignored, acknowledged
        with nothing read, no asset and no notification."""
        if is_original_key(ref.key, self._settings.originals_prefix):
            return True
        why = "a folder marker" if ref.key.endswith("/") else f"outside {self._settings.originals_prefix}"
        log.info("ignoring key: %s", why, extra={"source_key": ref.key})
        return False

    def __call__(self, ref: ObjectRef, delivery: Delivery | None, asset: KeptAsset) -> Identified | SourceResult:
        """Identify the original ``ref`` names.

        Returns
        -------
        Identified | SourceResult
            What it is; or its refusal (empty, too large, missing, remembered as content no
            recipe applies to).

        Raises
        ------
        JobBusy
            Another delivery is reading this source now.
        DeadlineReached
            The invocation has too little time left to start.
        EventSuperseded
            A greater sequencer is stored for the key the object is under.
        """
        if ref.size_bytes is not None and (refusal := size_refusal(ref.size_bytes, self._settings.max_input_bytes)):
            return refused(ref, *refusal)
        if delivery is not None and delivery.remaining_s() < self._settings.deadline_margin_s:
            raise DeadlineReached(
                f"{delivery.remaining_s():.1f} s left, a job needs {self._settings.deadline_margin_s} s"
            )
        try:
            ref, head = self.head(ref)
        except PermanentFailure as failure:
            return refused(ref, failure.reason, failure.detail)
        if ref.key != asset.key:  # the key as the event spelled it names the object: its asset
            asset.rekey(ref.key)
        if ref.version_id is None and head.version_id:
            ref = dataclasses.replace(ref, version_id=head.version_id)
        if refusal := size_refusal(head.size_bytes, self._settings.max_input_bytes):
            return refused(ref, *refusal, size_bytes=head.size_bytes)
        source_id = source_version_id(
            ref.bucket, ref.key, version_id=head.version_id, etag=head.etag, size_bytes=head.size_bytes
        )
        sha256, media = head.sha256, None
        if sha256 is None:
            sha256, media = asset.content_of(head.version_id, head.etag, head.size_bytes)
        if sha256 is None and source_id is not None:
            match self._sources.lookup(source_id, now_s=int(self._clock())):
                case KnownSource() as known:
                    sha256, media = known.sha256, known.media
                case Reading() as reading:  # another delivery is reading it right now
                    raise JobBusy(source_id, reading.lease_expires_at_s)
        if media == "":
            return refused(ref, UNSUPPORTED_FORMAT, "no recipe for this content (remembered)", sha256=sha256)
        return Identified(ref, head, source_id, sha256, media)

    def head(self, ref: ObjectRef) -> tuple[ObjectRef, ObjectHead]:
        """``HeadObject`` of the object an event names, and the ref with the key that names it.

        The key URL-decoded (``ref.key``) first; the key as the event spelled it
        (``ref.raw_key``) only when the decoded one names no object and it does. The key
        used is logged.

        Raises
        ------
        PermanentFailure
            ``source_missing`` (for the decoded key) when neither names an object.
        TransientFailure
            As :meth:`ObjectStore.head`.
        """
        try:
            head = self._store.head(ref)
        except PermanentFailure as missing:
            if missing.reason != SOURCE_MISSING or ref.raw_key is None:
                raise
            as_received = dataclasses.replace(ref, key=ref.raw_key, raw_key=None)
            try:
                head = self._store.head(as_received)
            except PermanentFailure:
                raise missing from None
            log.warning(
                "object key used as the event spelled it: the URL-decoded key names no object",
                extra={"source_key": as_received.key, "decoded_key": ref.key},
            )
            return as_received, head
        if ref.raw_key is not None:
            log.info("object key URL-decoded", extra={"source_key": ref.key, "event_key": ref.raw_key})
        return ref, head

    def current(self, ref: ObjectRef) -> ObjectHead | None:
        """``HeadObject`` of the key without a version (what S3 serves now), ``None`` when
        nothing is there.

        Raises
        ------
        TransientFailure
            As :meth:`ObjectStore.head`.
        """
        try:
            return self._store.head(ObjectRef(ref.bucket, ref.key))
        except PermanentFailure as missing:
            if missing.reason != SOURCE_MISSING:
                raise
            return None
