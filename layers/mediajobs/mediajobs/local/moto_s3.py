"""The embedded AWS's S3 sends the events AWS's S3 sends (:class:`S3EventsAsAws`), where
moto's differ in a way the worker depends on; applied while an embedded AWS is open
(:mod:`mediajobs.local.adaptations`).
"""

from __future__ import annotations

import copy
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from mediajobs.domain.keys import encode_event_key
from mediajobs.local.adaptations import Patches
from mediajobs.local.events import (
    DELETE_MARKER_CREATED,
    DELETE_MARKER_ETAG,
    DELETE_OBJECT,
    PERMANENTLY_DELETED,
    Sequencers,
    object_created_event,
    object_deleted_event,
)

#: S3's ``reason`` of an "Object Created" event, by moto's notification event name.
_CREATED_REASONS: Final = {
    "s3:ObjectCreated:Put": "PutObject",
    "s3:ObjectCreated:Post": "POST Object",
    "s3:ObjectCreated:Copy": "CopyObject",
    "s3:ObjectCreated:CompleteMultipartUpload": "CompleteMultipartUpload",
}

Listener = Callable[[dict[str, Any]], None]


class _KeyAsS3Sends:
    """moto's object (``FakeKey``) with ``name`` URL-encoded, as S3 spells it in events."""

    def __init__(self, key: Any) -> None:
        self._key = key
        self.name = encode_event_key(key.name)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._key, attribute)


class S3EventsAsAws:
    """Make moto's S3 (5.x) send to EventBridge the events AWS's S3 sends, where the worker
    depends on the difference.

    * Every "Object Created" and "Object Deleted" event is built by the one factory
      (:func:`~mediajobs.local.events.object_created_event`,
      :func:`~mediajobs.local.events.object_deleted_event`): the key URL-encoded as S3
      spells it (moto sends it raw, which once hid the worker's missing decoding),
      ``etag`` (moto: ``eTag``), the API's ``reason`` (moto: ``ObjectCreated``), no
      ``version-id`` on an unversioned bucket (moto: ``"null"``), an ISO time.
    * A sequencer from :attr:`sequencers` (moto: one constant): increasing in the order of
      the writes, since the event is built inside the write, and the embedded server runs
      S3 writes one at a time (:attr:`~mediajobs.local.server.AtomicWrites.S3_WRITES`).
    * Deletes (``DeleteObject``, and each object of ``DeleteObjects``, which moto applies
      through ``delete_object``): a delete marker created gives "Delete Marker Created"
      with the marker's version id (moto sends nothing); a version deleted gives
      "Permanently Deleted" with that version's id (moto sends an event only when the last
      version goes, naming the current one, without ``deletion-type``); an object of an
      unversioned bucket gives "Permanently Deleted" without a version. Nothing is sent
      when nothing was deleted.
    * A completed multipart upload gives one "Object Created" (``CompleteMultipartUpload``);
      moto sends a ``PutObject`` one before it too.
    * Other events (moto's "Object Tags Added" on every put, ...) keep moto's shape, with
      the key encoded; the template's rule takes none of them.

    Done where moto builds the event, so everything downstream holds what AWS would: the
    rule matches the encoded key, the jobs queue and its dead-letter queue hold AWS's body,
    and re-sent or redelivered bodies stay as they were.

    Attributes
    ----------
    sequencers: the sequencers of the events sent while applied (a fresh count each time
        moto is adapted, like its fresh buckets).
    listeners: called with each "Object Created" and "Object Deleted" event before it is
        delivered (:func:`listen_to_s3_events`).
    delete_object: moto's own ``S3Backend.delete_object`` (which sends no event), while
        applied.
    """

    def __init__(self) -> None:
        self.sequencers = Sequencers()
        self.listeners: list[Listener] = []
        self.delete_object: Callable[..., tuple[bool, dict[str, Any]]] | None = None

    def apply(self, patches: Patches) -> None:
        """Replace moto's ``notifications._send_event_bridge_message`` and
        ``S3Backend.delete_object``; make this the adaptation :func:`listen_to_s3_events`
        and :data:`SEQUENCERS` name."""
        from moto.s3 import models, notifications

        send = notifications._send_event_bridge_message

        def send_as_aws(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
            if event_name.startswith("s3:ObjectRemoved:"):
                return  # sent by delete_object below, as S3 sends it
            if event_name == "s3:ObjectCreated:Put" and getattr(key, "multipart", None) is not None:
                return  # the put inside CompleteMultipartUpload: its own event follows
            if event_name in _CREATED_REASONS:
                self.object_created(account_id, bucket, event_name, key)
            else:
                send(account_id, bucket, event_name, _KeyAsS3Sends(key))

        delete_object = models.S3Backend.delete_object
        self.delete_object = delete_object

        def delete_object_as_aws(
            backend: Any, bucket_name: str, key_name: str, version_id: str | None = None, bypass: bool = False
        ) -> tuple[bool, dict[str, Any]]:
            bucket = backend.get_bucket(bucket_name)
            before = list(bucket.keys.getlist(key_name, []))
            deleted, meta = delete_object(backend, bucket_name, key_name, version_id=version_id, bypass=bypass)
            if deleted:
                self.event_of_delete(backend.account_id, bucket, key_name, version_id, before, reason=DELETE_OBJECT)
            return deleted, meta

        patches.set(notifications, "_send_event_bridge_message", send_as_aws)
        patches.set(models.S3Backend, "delete_object", delete_object_as_aws)
        patches.set(sys.modules[__name__], "_ACTIVE", self)

    def publish(self, account_id: str, bucket: Any, event: dict[str, Any]) -> None:
        """Put an S3 ``event`` on every rule of moto's EventBridge in the bucket's region, as
        moto's own S3 does (the rules match their patterns), when the bucket sends its
        events to EventBridge; :attr:`listeners` hear it first. moto's rules take the
        ``time`` as Unix seconds (and write it ISO 8601 into an SQS target's message), so
        the event's ISO time goes in as such."""
        from moto.events.models import events_backends

        config = bucket.notification_configuration
        if config is None or config.event_bridge is None:
            return
        for listener in list(self.listeners):
            listener(event)
        as_moto_takes = {
            **event,
            "time": datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp(),
        }
        backend = events_backends[account_id][bucket.region_name]
        for event_bus in list(backend.event_buses.values()):
            for rule in list(event_bus.rules.values()):
                rule.send_to_targets(as_moto_takes, transform_input=False)  # type: ignore[arg-type]  # moto's TypedDict

    def object_created(self, account_id: str, bucket: Any, event_name: str, key: Any) -> None:
        """Send the "Object Created" event S3 sends for moto's new object ``key``."""
        event = object_created_event(
            bucket.name,
            key.name,
            size=int(key.size),
            etag=key.etag,
            version_id=_version_of(key, bucket),
            region=bucket.region_name,
            sequencer=self.sequencers.next(),
            source_ip="127.0.0.1",
            reason=_CREATED_REASONS.get(event_name, "PutObject"),
        )
        self.publish(account_id, bucket, event)

    def object_deleted(
        self, account_id: str, bucket: Any, key_name: str, *, deletion_type: str, version: Any, reason: str
    ) -> None:
        """Send the "Object Deleted" event S3 sends when ``version`` (moto's object or delete
        marker) of ``key_name`` is deleted (Permanently Deleted), or is the delete marker
        just created (Delete Marker Created)."""
        from moto.s3.models import FakeDeleteMarker

        is_marker = isinstance(version, FakeDeleteMarker)
        event = object_deleted_event(
            bucket.name,
            key_name,
            deletion_type=deletion_type,
            version_id=_version_of(version, bucket),
            etag=DELETE_MARKER_ETAG if is_marker else version.etag,
            reason=reason,
            region=bucket.region_name,
            sequencer=self.sequencers.next(),
            source_ip="127.0.0.1",
        )
        self.publish(account_id, bucket, event)

    def event_of_delete(
        self, account_id: str, bucket: Any, key_name: str, version_id: str | None, before: list[Any], *, reason: str
    ) -> None:
        """Send the event of a delete moto applied: ``before`` are the key's versions
        (oldest first) before it; ``version_id`` the version the request named, if any."""
        if not bucket.is_versioned:
            if before:
                self.object_deleted(
                    account_id, bucket, key_name, deletion_type=PERMANENTLY_DELETED, version=before[-1], reason=reason
                )
            return
        if version_id is None:
            after = bucket.keys.getlist(key_name, [])
            if after and all(after[-1] is not v for v in before):
                self.object_deleted(
                    account_id, bucket, key_name, deletion_type=DELETE_MARKER_CREATED, version=after[-1], reason=reason
                )
            return
        gone = next((v for v in before if str(v.version_id) == str(version_id)), None)
        if gone is not None:
            self.object_deleted(
                account_id, bucket, key_name, deletion_type=PERMANENTLY_DELETED, version=gone, reason=reason
            )


class _VersionSeen:
    """What moto's ``list_object_versions`` reads of a version it sorts and pages but
    never returns (outside the prefix asked for): its key, time and version id; it sets
    ``is_latest`` on it."""

    def __init__(self, version: Any) -> None:
        self.name = version.name
        self.last_modified = version.last_modified
        self.version_id = version.version_id
        self.is_latest = False


class _CopyUnderPrefix:
    """Stands for the ``copy`` module inside moto's S3 backend: while ``listing`` is set
    for this thread (to the prefix asked for), the versions of a key outside the prefix
    are not copied (a :class:`_VersionSeen` each stands for them), and a key whose
    versions went while it was listed has none; everything else is copied as ``copy``
    does."""

    def __init__(self) -> None:
        self.listing = threading.local()

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        prefix = getattr(self.listing, "prefix", None)
        if prefix is not None:
            if value is None:
                return []
            if isinstance(value, list) and value and not str(value[0].name).startswith(prefix):
                return [_VersionSeen(version) for version in value]
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


class VersionsListedUnderPrefix:
    """Make moto's ``ListObjectVersions`` copy only the versions it may return.

    moto (5.2.5, ``S3Backend.list_object_versions``) deep-copies every version of every
    key of the bucket, the objects' bytes included, before it sorts them, pages them and
    keeps those under the prefix asked for (2 % of the storm's server process's samples,
    listing one key's versions in a bucket of thousands of objects). It also reads the
    keys without the S3 write lock (a read): a key deleted meanwhile has no version list,
    and moto answers 500 (``TypeError: 'NoneType' object is not iterable``); S3 answers.
    Here a key outside the prefix is stood for by its name, time and version id (all
    moto's code reads of it before it drops it), and a key gone meanwhile by no version:
    moto's own code sorts, pages and filters, and answers as it would.
    """

    def apply(self, patches: Patches) -> None:
        """Replace ``S3Backend.list_object_versions`` and the ``copy`` module moto's S3
        backend copies the versions with."""
        from moto.s3 import models

        copies = _CopyUnderPrefix()
        patches.set(models, "copy", copies)

        def list_object_versions(
            backend: Any,
            bucket_name: str,
            delimiter: str | None = None,
            key_marker: str | None = None,
            max_keys: int | None = 1000,
            prefix: str = "",
            version_id_marker: str | None = None,
        ) -> Any:
            copies.listing.prefix = prefix or ""
            try:
                return original(
                    backend,
                    bucket_name,
                    delimiter=delimiter,
                    key_marker=key_marker,
                    max_keys=max_keys,
                    prefix=prefix,
                    version_id_marker=version_id_marker,
                )
            finally:
                copies.listing.prefix = None

        original = patches.set(models.S3Backend, "list_object_versions", list_object_versions)


def _version_of(key: Any, bucket: Any) -> str | None:
    """The ``version-id`` an event names for moto's object ``key``: none on an unversioned
    bucket (moto says ``"null"``)."""
    version = getattr(key, "version_id", None)
    return None if not bucket.is_versioned or version in (None, "null") else str(version)


#: The applied :class:`S3EventsAsAws`, while an embedded AWS is open (set and put back by
#: its :meth:`~S3EventsAsAws.apply`, like its changes to moto).
_ACTIVE: S3EventsAsAws | None = None


def active() -> S3EventsAsAws:
    """The applied :class:`S3EventsAsAws`.

    Raises
    ------
    RuntimeError
        If no embedded AWS is open in this process.
    """
    if _ACTIVE is None:
        raise RuntimeError("no embedded AWS is open in this process: its S3 sends no events as AWS's")
    return _ACTIVE


def listen_to_s3_events(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` with each "Object Created" and "Object Deleted" event this
    process's embedded S3 sends (the EventBridge event, as put on the rules), before it is
    delivered, until the returned function is called or the last embedded AWS of the
    process closes. ``mediajobs simulate`` keeps the real events so that a duplicate it
    sends is the same event (same sequencer), and a late one is the real older event.

    Raises
    ------
    RuntimeError
        If no embedded AWS is open in this process.
    """
    listeners = active().listeners
    listeners.append(listener)

    def stop() -> None:
        if listener in listeners:
            listeners.remove(listener)

    return stop


class _OpenSequencers:
    """The sequencers of the open embedded AWS (:attr:`S3EventsAsAws.sequencers`)."""

    def next(self) -> str:
        """The next sequencer of this process's embedded S3 (:meth:`Sequencers.next`).

        Raises
        ------
        RuntimeError
            If no embedded AWS is open in this process.
        """
        return active().sequencers.next()


#: Where every S3 event of this process's embedded AWS gets its sequencer, while one is
#: open: the events of one key get increasing sequencers, of varying lengths. A fresh
#: count each time moto is adapted (:class:`S3EventsAsAws`), as its buckets are fresh.
SEQUENCERS: Final = _OpenSequencers()


#: The checksum headers S3 verifies against a PUT's or an UploadPart's body, by algorithm
#: (S3 user guide, "Checking object integrity": a value that does not match is refused
#: with 400 ``BadDigest`` and nothing is stored). CRC32C is not verified here: moto computes
#: it only with the optional ``crc32c`` package (CRC32 otherwise), which would refuse right
#: bodies.
_CHECKSUM_HEADERS: Final = {
    "SHA256": "x-amz-checksum-sha256",
    "SHA1": "x-amz-checksum-sha1",
    "CRC32": "x-amz-checksum-crc32",
}


class ChecksumsAsS3:
    """Make moto's S3 verify the checksum a ``PutObject`` or ``UploadPart`` carries, and keep
    it, as S3 does.

    moto (5.2.5, ``S3Response._get_checksum``) stores a client's ``x-amz-checksum-sha256``
    only when ``x-amz-sdk-checksum-algorithm`` comes with it (an SDK's request; a browser's
    PUT through a presigned URL sends the checksum header alone), and never compares it with
    the body. S3 compares it, refuses a body whose checksum differs with 400 ``BadDigest``
    ("The SHA256 you specified did not match the calculated checksum.") storing nothing, and
    returns the stored checksum from ``HeadObject`` with ``ChecksumMode=ENABLED``. Here the
    header alone names the algorithm, the body (moto's decoded ``body``, an SDK's
    ``aws-chunked`` framing removed) is hashed before moto writes anything, and a mismatch
    raises ``BadDigest``.

    ``CompleteMultipartUpload`` is checked as S3 checks it: an upload id that is not an
    upload of that key (unknown, aborted, completed, or another key's) is ``NoSuchUpload``
    (moto: a 500, or the object written at the upload's own key), and a part whose listed
    ``ChecksumSHA256`` is not its bytes' is ``InvalidPart`` (moto: accepted).

    A multipart object's checksum is composite (a hash of the parts' hashes): S3's
    ``HeadObject`` suffixes it ``-<parts>`` and says ``x-amz-checksum-type: COMPOSITE`` (S3
    user guide, "Checking object integrity"); moto returns the bare value with no type,
    which reads as the whole object's SHA-256 -- a wrong content hash. Here it is answered
    as S3 answers it.
    """

    def apply(self, patches: Patches) -> None:
        """Wrap ``S3Response.put_object``, ``S3Response.upload_part``,
        ``S3Response._get_checksum``, ``S3Response.head_object`` and
        ``S3Response._key_response_post`` (the completion)."""
        from moto.s3 import responses

        def verified(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
            def operation(response: Any) -> Any:
                _verify(response)
                return original(response)

            return operation

        def get_checksum(response: Any, response_headers: dict[str, Any]) -> tuple[str, str | None]:
            algorithm, value = original_get(response, response_headers)
            if algorithm:
                return algorithm, value
            found = _checksum_header(response)
            if found is None:
                return algorithm, value
            algorithm, header = found
            value = str(response.headers.get(header))
            response_headers[header] = value
            return algorithm, value

        def head_object(
            response: Any, bucket_name: str, query: dict[str, Any], key_name: str, headers: dict[str, Any]
        ) -> Any:
            status, answer, body = original_head(response, bucket_name, query, key_name, headers)
            if headers.get("x-amz-checksum-mode") != "ENABLED" or status != 200:
                return status, answer, body
            version_id = query.get("versionId", [None])[0]
            key = response.backend.get_object(bucket_name, key_name, version_id=version_id)
            algorithm = getattr(key, "checksum_algorithm", None)
            if key is not None and algorithm and getattr(key, "checksum_type", None):
                header = f"x-amz-checksum-{algorithm.lower()}"
                value = str(answer.get(header, key.checksum_value))
                if key.checksum_type == "COMPOSITE" and "-" not in value:
                    answer[header] = f"{value}-{key.checksum_parts}"
                answer["x-amz-checksum-type"] = key.checksum_type
            return status, answer, body

        def key_response_post(
            response: Any, request: Any, body: bytes, bucket_name: str, query: dict[str, Any], key_name: str
        ) -> Any:
            if query.get("uploadId") and b"CompleteMultipartUpload" in (body or b""):
                _check_completion(response.backend, bucket_name, key_name, query["uploadId"][0], body)
            return original_post(response, request, body, bucket_name, query, key_name)

        original_post = patches.set(responses.S3Response, "_key_response_post", key_response_post)
        original_get = patches.set(responses.S3Response, "_get_checksum", get_checksum)
        patches.set(responses.S3Response, "put_object", verified(responses.S3Response.put_object))
        patches.set(responses.S3Response, "upload_part", verified(responses.S3Response.upload_part))
        original_head = patches.set(responses.S3Response, "head_object", head_object)


def _checksum_header(response: Any) -> tuple[str, str] | None:
    """The (algorithm, header) of the checksum header a request carries, if any."""
    for algorithm, header in _CHECKSUM_HEADERS.items():
        if response.headers.get(header):
            return algorithm, header
    return None


def _verify(response: Any) -> None:
    """Refuse a body whose checksum header does not match it: 400 ``BadDigest``, as S3."""
    from moto.s3.exceptions import S3ClientError
    from moto.s3.utils import compute_checksum

    found = _checksum_header(response)
    if found is None or "x-amz-copy-source" in response.headers:
        return
    algorithm, header = found
    given = str(response.headers.get(header))
    body = response.body or b""
    digest = compute_checksum(body if isinstance(body, bytes) else bytes(body), algorithm=algorithm)
    computed = digest.decode("ascii") if isinstance(digest, bytes) else str(digest)
    if computed != given:
        raise S3ClientError("BadDigest", f"The {algorithm} you specified did not match the calculated checksum.")


def _check_completion(backend: Any, bucket_name: str, key_name: str, upload_id: str, body: bytes) -> None:
    """Refuse a ``CompleteMultipartUpload`` S3 refuses: ``NoSuchUpload`` for an upload id
    that is not one of ``key_name`` (a completed one of it is moto's idempotent answer, left
    to moto), ``InvalidPart`` for a part whose listed SHA-256 is not its bytes'."""
    import base64
    import hashlib
    import re

    from moto.s3.exceptions import InvalidPart, NoSuchUpload

    bucket = backend.get_bucket(bucket_name)
    multipart = bucket.multiparts.get(upload_id)
    if multipart is None:
        existing = backend.get_object(bucket_name, key_name)
        if existing is None or getattr(existing.multipart, "id", None) != upload_id:
            raise NoSuchUpload(upload_id=upload_id)
        return
    if multipart.key_name != key_name:
        raise NoSuchUpload(upload_id=upload_id)
    text = body.decode("utf-8", "replace")
    for part in re.findall(r"<Part>(.*?)</Part>", text, flags=re.S):
        number = re.search(r"<PartNumber>\s*(\d+)\s*</PartNumber>", part)
        listed = re.search(r"<ChecksumSHA256>\s*([^<]+?)\s*</ChecksumSHA256>", part)
        stored = multipart.parts.get(int(number.group(1))) if number else None
        if stored is None or listed is None:
            continue  # moto's own check (InvalidPart), or no checksum listed
        actual = base64.b64encode(hashlib.sha256(stored.value).digest()).decode("ascii")
        if actual != listed.group(1):
            raise InvalidPart()
