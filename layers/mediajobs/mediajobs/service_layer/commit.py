"""The commit of one job: the only code that writes derivatives.

A job's work becomes visible as one unit, in this order:

1. **register** what will be written (each file's MD5, SHA-256 and size) in the job's row;
2. **write** each file with ``If-None-Match: *``; a 412 (the key is taken: a lost holder's
   write) is identified by the listing's ETag among the registered candidates --
   derivatives are never read back;
3. **stage** the manifest in the row (the first staged body wins: a lost holder's may),
   its provenance included (:mod:`mediajobs.domain.manifest`);
4. **write** ``manifest.json`` last, the commit marker -- its public face only, the same
   bytes whoever writes it: no reader sees derivatives without it;
5. **complete** the row (``done``, keeping the decisions and the provenance), conditional
   on still holding the claim, under
   :meth:`~mediajobs.service_layer.lease.LeaseKeeper.last_write` (the heartbeat neither
   renews nor releases meanwhile).

Before every write the heartbeat's findings are checked (:meth:`LeaseKeeper.check`): a
superseded holder stops, one whose invocation is ending has already given the claim back.

A takeover that finds a staged manifest **adopts** it (:meth:`Commit.adopt`): steps 4 and
5 only, without the original (every output is stored already).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from mediajobs.domain.errors import OUTPUT_CONFLICT, PermanentFailure
from mediajobs.domain.jobs import (
    JobSpec,
    JobView,
    ObjectRef,
    OutputCandidate,
    OutputRecord,
    RenderedFile,
    identify_stored,
)
from mediajobs.domain.manifest import (
    MANIFEST_CONTENT_TYPE,
    MANIFEST_NAME,
    build_manifest,
    inputs_of,
    provenance_of,
    public_body,
)
from mediajobs.service_layer.lease import LeaseKeeper
from mediajobs.service_layer.ports import Ledger, ObjectStore


@dataclasses.dataclass
class Commit:
    """The commit of one claimed job (one instance per job and claim).

    Attributes
    ----------
    store, ledger: adapters.
    source: the original the job renders (its bucket holds the derivatives).
    spec: the job.
    token: this holder's fencing token.
    keeper: the claim's heartbeat (checked before each write).
    clock: Unix time in seconds.
    on_step: called with (point, job key) after each durable step: ``output_stored`` after
        each derivative, ``manifest_stored`` (the pipeline observer's ``step``).
    row: the job's row as the commit left it (``done``), once committed.
    """

    store: ObjectStore
    ledger: Ledger
    source: ObjectRef
    spec: JobSpec
    token: str
    keeper: LeaseKeeper
    clock: Callable[[], float]
    on_step: Callable[[str, str], None]
    row: JobView | None = None

    @property
    def manifest_key(self) -> str:
        """``derivatives/<job key>/manifest.json``."""
        return self.spec.output_prefix + MANIFEST_NAME

    def rendered(
        self, files: list[RenderedFile], decisions: Mapping[str, Any], *, input_bytes: int
    ) -> list[OutputRecord]:
        """Commit what this holder rendered: register, write, stage, write the manifest, complete.

        Parameters
        ----------
        files: the step's files in the work folder (may be empty).
        decisions: the step's decisions (JSON data), recorded in the manifest.
        input_bytes: the original's size in bytes (recorded in the manifest).

        Returns
        -------
        list[OutputRecord]
            The outputs as stored (a lost holder's bytes where its write landed first).

        Raises
        ------
        PermanentFailure
            ``output_conflict`` when a key holds bytes no holder of this job registered;
            ``unstorable_input`` when the ledger refuses the staged manifest.
        Superseded, DeadlineReached, DeliveryLost
            What the heartbeat found, before the next write.
        TransientFailure
            As the adapters.
        """
        key, prefix = self.spec.job_key, self.spec.output_prefix
        own = {rendered.path.name: _candidate(rendered) for rendered in files}
        self.keeper.check()
        registered = self.ledger.register_outputs(key, self.token, list(own.values()), now_s=self._now())
        listed: dict[str, str] = {}  # the prefix's ETags by key, listed at a 412
        outputs = []
        for rendered in files:
            self.keeper.check()
            record = _record(prefix, rendered)
            if not self.store.put_file_if_absent(
                self.source.bucket, record.key, rendered.path, content_type=rendered.content_type
            ):
                record = self._stored_record(record, own[rendered.path.name], registered, listed)
            outputs.append(record)
            self.on_step("output_stored", key)
        body = json.dumps(self._manifest(outputs, decisions, input_bytes), indent=2, sort_keys=True)
        self.keeper.check()
        staged = self.ledger.stage_manifest(key, self.token, body, now_s=self._now())
        outputs = self._write_manifest(staged)
        self.on_step("manifest_stored", key)
        self._complete(outputs, staged)
        return outputs

    def adopt(self, staged: str) -> list[OutputRecord]:
        """Commit the manifest a lost holder staged (``staged``, its JSON body) after storing
        every output: write it (it may be there already), then complete. Needs no byte of
        the original and renders nothing.

        Returns
        -------
        list[OutputRecord]
            The staged manifest's outputs.

        Raises
        ------
        Superseded
            Another holder took the job over meanwhile.
        TransientFailure
            As the adapters.
        """
        outputs = self._write_manifest(staged)
        self._complete(outputs, staged)
        return outputs

    def _now(self) -> int:
        return int(self.clock())

    def _manifest(
        self, outputs: list[OutputRecord], decisions: Mapping[str, Any], input_bytes: int
    ) -> dict[str, object]:
        spec = self.spec
        return build_manifest(
            job_key=spec.job_key,
            source=self.source,
            input_sha256=spec.input_sha256,
            input_bytes=input_bytes,
            recipe_id=spec.recipe_id,
            recipe_version=spec.recipe_version,
            recipe_sha256=spec.recipe_sha256,
            policy_version=spec.policy_version,
            outputs=outputs,
            decisions=decisions,
            created_at=_utc_iso(self.clock()),
            inputs=inputs_of(spec) if spec.about else None,
        )

    def _write_manifest(self, staged: str) -> list[OutputRecord]:
        """Write the staged manifest's public face (a 412 means it is there: every write of
        it carries these bytes, :func:`~mediajobs.domain.manifest.public_body`); its outputs."""
        self.store.put_if_absent(
            self.source.bucket,
            self.manifest_key,
            public_body(staged).encode("utf-8"),
            content_type=MANIFEST_CONTENT_TYPE,
        )
        return [OutputRecord.from_json(o) for o in json.loads(staged)["outputs"]]

    def _complete(self, outputs: list[OutputRecord], staged: str) -> None:
        """Mark the job done with the outputs, the staged manifest's decisions and its provenance."""
        document = json.loads(staged)
        decisions = document.get("decisions") or {}
        with self.keeper.last_write():  # the heartbeat neither renews nor releases meanwhile
            self.row = self.ledger.complete(
                self.spec.job_key,
                self.token,
                manifest_key=self.manifest_key,
                outputs=outputs,
                now_s=self._now(),
                decisions=decisions,
                provenance=provenance_of(document),
            )

    def _stored_record(
        self,
        record: OutputRecord,
        own: OutputCandidate,
        registered: frozenset[OutputCandidate],
        listed: dict[str, str],
    ) -> OutputRecord:
        """``record`` describing the bytes already stored under its key (a 412).

        ``listed`` caches the prefix's listing; it is listed again when it does not
        identify the key (a lost holder's write in flight may have landed since).

        Raises
        ------
        PermanentFailure
            ``output_conflict`` when the stored bytes are none of the registered
            candidates: written by something other than a holder of this job (a version
            before registration, a person, an SSE-KMS bucket whose ETags are no MD5).
        """
        bucket, prefix = self.source.bucket, self.spec.output_prefix
        listed_now = not listed
        if listed_now:
            listed.update(self.store.listing(bucket, prefix))
        stored = identify_stored(own, listed.get(record.key), registered)
        if stored is None and not listed_now:
            listed.clear()
            listed.update(self.store.listing(bucket, prefix))
            stored = identify_stored(own, listed.get(record.key), registered)
        if stored is None:
            raise PermanentFailure(
                OUTPUT_CONFLICT, f"{record.key} holds bytes no holder of this job wrote (ETag {listed.get(record.key)})"
            )
        return dataclasses.replace(record, bytes=stored.bytes, sha256=stored.sha256)


def _utc_iso(now_s: float) -> str:
    return datetime.fromtimestamp(now_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _record(prefix: str, rendered: RenderedFile) -> OutputRecord:
    """The manifest's record of ``rendered`` stored under ``prefix``."""
    return OutputRecord(
        name=rendered.name,
        key=prefix + rendered.path.name,
        format=rendered.format,
        width=rendered.width,
        height=rendered.height,
        bytes=rendered.bytes,
        sha256=rendered.sha256,
        content_type=rendered.content_type,
    )


def _candidate(rendered: RenderedFile) -> OutputCandidate:
    """What a holder registers before writing ``rendered`` (its MD5 read from the file)."""
    with open(rendered.path, "rb") as f:
        md5 = hashlib.file_digest(f, lambda: hashlib.md5(usedforsecurity=False)).hexdigest()
    return OutputCandidate(rendered.path.name, md5, rendered.sha256, rendered.bytes)
