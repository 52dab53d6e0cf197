"""Read: step 4 of a delivery, for an original whose jobs need its bytes.

When its media type is not known, the source (or its content, when the hash is known) is
marked as being read first, under a lease (:class:`~mediajobs.service_layer.lease.Lease`):
duplicates meanwhile come back later instead of reading it too. Another delivery may have
remembered it meanwhile: then it is planned, settled or claimed as when the content is known.

Then the original is streamed into a fresh **work folder** while hashing it, its media type
detected from the bytes, its jobs attached to the asset and claimed (unless claimed before
reading), and only then are hash and type remembered in the source index -- so a duplicate
that learns the content from the index finds its jobs claimed, and waits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from mediajobs.domain.errors import SOURCE_MISSING, UNSUPPORTED_FORMAT, JobBusy, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import (
    Claim,
    ClaimOutcome,
    ContentInput,
    Delivery,
    KnownSource,
    ObjectRef,
    Reading,
    SourceResult,
    refused,
    size_refusal,
)
from mediajobs.domain.keys import content_id
from mediajobs.service_layer.assets import KeptAsset
from mediajobs.service_layer.claims import Claimed, Claims, Plan
from mediajobs.service_layer.identify import Identified
from mediajobs.service_layer.lease import Lease
from mediajobs.service_layer.observer import PipelineObserver
from mediajobs.service_layer.ports import ObjectStore, Sources
from mediajobs.service_layer.work import work_folder
from mediajobs.settings import Settings

log = logging.getLogger(__name__)


#: How long a presigned URL of an original lasts, seconds: a whole invocation (Lambda's
#: 900 s maximum) and its margin.
PRESIGNED_URL_S: Final = 960


@dataclasses.dataclass(frozen=True)
class Work:
    """One delivery's original, read into its work folder.

    Attributes
    ----------
    ref: the original; original: its copy in the folder; size_bytes: bytes read;
    sha256: SHA-256 hex of the bytes read; folder: the work folder.
    url: when the original is not copied but read where it is, by byte ranges: a presigned
        ``GetObject`` URL of its version (``original`` then names no file, ``size_bytes``
        is 0 and ``sha256`` the content's, which the version pins).
    """

    ref: ObjectRef
    original: Path
    size_bytes: int
    sha256: str
    folder: Path
    url: str | None = None


@dataclasses.dataclass(frozen=True)
class Read:
    """What step 4 gives the runner: the claims, and the original read (``None`` when
    another delivery's result settled every job meanwhile)."""

    claimed: Claimed
    work: Work | None


class Reader:
    """Step 4 of a delivery (see the module docstring).

    Parameters
    ----------
    settings: ``work_dir``, ``max_input_bytes``.
    store: S3 (the download).
    sources: the source index (the reading mark, the remembered hashes).
    claims: plan, settle or claim the content once known.
    detect_media: ``"image"``, ``"video"`` or ``None`` for a file, given the file and the
        original's key (whose extension only routes bytes that no sniffing recognises).
    observer: hooks (``reading``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: ObjectStore,
        sources: Sources,
        claims: Claims,
        detect_media: Callable[[Path, str], str | None],
        observer: PipelineObserver,
    ) -> None:
        self._settings = settings
        self._store = store
        self._sources = sources
        self._claims = claims
        self._detect_media = detect_media
        self._observer = observer

    @contextlib.contextmanager
    def read(
        self, original: Identified, claimed: Claimed, delivery: Delivery | None, asset: KeptAsset
    ) -> Iterator[Read | SourceResult]:
        """Read ``original`` into a work folder (removed on exit) and claim its jobs.

        Yields
        ------
        Read | SourceResult
            The claims and the bytes read; or a refusal (gone, changed, too large, no recipe).

        Raises
        ------
        JobBusy
            Another delivery is reading it, or runs one of its jobs.
        EventSuperseded
            A greater sequencer of the key became current (the claims are given back).
        """
        plan, claims = claimed.plan, list(claimed.claims)
        mark: Lease | None = None
        try:
            if plan is None or plan.media is None:
                marked = self._mark(original, delivery)
                if isinstance(marked, SourceResult):
                    yield marked
                    return
                mark = marked if isinstance(marked, Lease) else None
                if isinstance(marked, KnownSource):  # remembered by another delivery meanwhile
                    plan = self._claims.plan(original, marked.sha256, marked.media, asset)
                    if plan is not None and plan.media is not None:
                        again = self._claims.settle_or_claim(plan, delivery, asset)
                        if isinstance(again, SourceResult) or again.settled:
                            yield again if isinstance(again, SourceResult) else Read(again, None)
                            return
                        claims = list(again.claims)
            with work_folder(self._settings.work_dir) as folder:
                yield self._read(original, plan, claims, folder, delivery, asset, mark)
        finally:
            if mark is not None:
                mark.release("the read ended")

    def _read(
        self,
        original: Identified,
        plan: Plan | None,
        claims: list[Claim],
        folder: Path,
        delivery: Delivery | None,
        asset: KeptAsset,
        mark: Lease | None,
    ) -> Read | SourceResult:
        """Download and hash, check, detect, attach and claim, remember."""
        path = folder / "original"
        try:
            downloaded = self._store.download(original.ref, path, etag=original.head.etag)
        except PermanentFailure as failure:
            # Gone or changed: the claims are given back instead of failing the jobs -- they
            # belong to the content, and another copy may come.
            self._claims.release_all(claims, failure)
            return refused(original.ref, failure.reason, failure.detail)
        work = Work(original.ref, path, downloaded.size_bytes, downloaded.sha256, folder)
        if plan is not None and work.sha256 != plan.sha256:  # not the content the hash named
            log.warning(
                "the bytes read do not match the known SHA-256; using the bytes",
                extra={"source_key": work.ref.key, "known": plan.sha256, "read": work.sha256},
            )
            self._claims.release_all(claims, TransientFailure("content changed"))
            plan, claims = None, []
        facts = {"sha256": work.sha256, "size_bytes": work.size_bytes, "bytes_read": work.size_bytes}
        if refusal := size_refusal(work.size_bytes, self._settings.max_input_bytes):
            return refused(work.ref, *refusal, **facts)  # type: ignore[arg-type]
        media = (plan.media if plan is not None else None) or self._detect_media(work.original, work.ref.key)
        jobs = self._claims.jobs(original, work.sha256, media) if media in self._claims.recipes else ()
        if not jobs:
            self._remember(original, work, media, mark)  # first, so that duplicates are refused unread
            detail = f"no recipe for this content ({media or 'unknown type'})"
            return refused(work.ref, UNSUPPORTED_FORMAT, detail, media=media, **facts)  # type: ignore[arg-type]
        views = plan.views if plan is not None else {}
        plan = Plan(original, work.sha256, media, work.size_bytes, jobs, views)
        self._claims.current(original, asset, plan, claims)  # the jobs attached before they are claimed
        # Claim every job before telling duplicates what the content is: one that learns it
        # from the index then finds the jobs claimed, and waits.
        claims = claims or self._claims.claim_all(plan, delivery, asset)
        self._remember(original, work, media, mark)
        return Read(Claimed(plan, claims, logged=True), work)

    def _mark(self, original: Identified, delivery: Delivery | None) -> Lease | KnownSource | SourceResult | None:
        """Mark the source (or its content, when the hash is known) as being read, so that
        duplicates meanwhile wait instead of reading it too.

        Returns this delivery's lease on the mark (``None``: the object names no version
        and no hash is known: nothing to mark); what the index knows when another delivery
        remembered the content meanwhile; or the refusal of content remembered as one no
        recipe applies to.

        Raises
        ------
        JobBusy
            Another delivery is reading it now.
        """
        marker = content_id(original.sha256) if original.sha256 is not None else original.source_id
        if marker is None:
            return None
        token, until = uuid.uuid4().hex, self._claims.lease_until(delivery)
        found = self._sources.begin_reading(marker, token, now_s=self._claims.now_s(), lease_until_s=until)
        match found:
            case None:
                self._observer.reading(original.ref)
                return Lease(self._sources, marker, token, until, clock=self._claims.clock)
            case KnownSource(media=""):
                detail = "no recipe for this content (remembered)"
                return refused(original.ref, UNSUPPORTED_FORMAT, detail, sha256=original.sha256)
            case KnownSource():
                return found
            case Reading():
                raise JobBusy(marker, found.lease_expires_at_s)
        return None

    def _remember(self, original: Identified, work: Work, media: str | None, mark: Lease | None) -> None:
        """Remember the hash and media type under the ids it is true for: this source
        version, and the content the bytes read are (a mark named after another hash is
        left, and given back at the end)."""
        ids: Sequence[str] = [
            i for i in (original.source_id, content_id(work.sha256) if original.head.sha256 else None) if i
        ]
        self._sources.remember(
            list(ids), KnownSource(work.sha256, work.size_bytes, media or ""), now_s=self._claims.now_s()
        )
        if mark is not None and mark.key in ids:
            mark.forget()  # remembered over: the mark is gone with it

    @contextlib.contextmanager
    def fetch(
        self,
        source: ObjectRef,
        content: ContentInput | None,
        claim: Claim,
        delivery: Delivery | None,
        *,
        ranged: bool = False,
    ) -> Iterator[Work | SourceResult | None]:
        """For a job a request names: its original read into a work folder (removed on
        exit) when the job takes it and holds its claim to render; ``None`` when nothing is
        to be read. With ``ranged`` (a split video's part or join, which read only what they
        need) and a version to pin the bytes, nothing is copied: the work carries a
        presigned URL of that version, valid for :data:`PRESIGNED_URL_S`
        (:meth:`~mediajobs.service_layer.ports.ObjectStore.presigned_get`).

        Yields
        ------
        Work | SourceResult | None
            The original; or, when it is gone or holds other bytes now, a
            ``source_missing`` refusal of this request (the claim given back: the job
            belongs to the content, and another copy may come).
        """
        if content is None or claim.outcome is not ClaimOutcome.RUN or claim.staged_manifest is not None:
            yield None
            return
        with work_folder(self._settings.work_dir) as folder:
            path = folder / "original"
            if ranged and source.version_id:  # a version's bytes never change: no hash to check
                url = self._store.presigned_get(source, expires_s=PRESIGNED_URL_S)
                yield Work(source, path, 0, content.sha256, folder, url=url)
                return
            try:
                downloaded = self._store.download(source, path)
            except PermanentFailure as failure:
                self._claims.release_all([claim], failure)
                yield refused(source, SOURCE_MISSING, failure.detail)
                return
            if downloaded.sha256 != content.sha256:
                why = f"s3://{source.bucket}/{source.key} holds other bytes now ({downloaded.sha256[:12]})"
                self._claims.release_all([claim], TransientFailure(why))
                yield refused(source, SOURCE_MISSING, why)
                return
            yield Work(source, path, downloaded.size_bytes, downloaded.sha256, folder)
