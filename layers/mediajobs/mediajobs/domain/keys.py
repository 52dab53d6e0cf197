"""Job keys: the identity of a unit of work, derived only from what determines its output.

A job key is the SHA-256 (hex) of a canonical JSON document holding:

* ``input_sha256`` -- the SHA-256 of the original's bytes;
* ``recipe_sha256`` -- the SHA-256 of the recipe's canonical JSON (id, version, step, parameters);
* ``policy_version`` -- the moderation policy version under which the output is published
  (``"none"`` until moderation exists);
* ``algorithm`` -- the key algorithm's version (:class:`KeyScheme`), bumped whenever this
  derivation changes.

How the document becomes a key is the :class:`KeyScheme`'s. Algorithm 1 is its SHA-256: every
field is public (the content's hash is computed by anyone holding the bytes, the recipe's is
in this repository), so anyone holding a photo could compute its key, ask the CDN for
``derivatives/<key>/thumb.webp``, and learn from a 200 that someone uploaded it -- the
"confirmation of file" attack on deduplicating stores. Algorithm 2
(:data:`KEY_ALGORITHM_VERSION`, the default) is the HMAC-SHA256 of the same document under the
stack's **key secret** (RFC 2104; made at deploy in Secrets Manager, at start locally, never
in the repository): the same content still has one key within the stack (deduplication
holds), and no one without the secret can compute it. A stack moves from 1 to 2 as it moves
to any new recipe: a backfill gives every asset its new sets, the old ones are retired after
the grace (``docs/operations.md``, "Rolling out a new key algorithm").

A job whose recipe takes something else than one original -- named inputs, each an
original's content or another job's named output (:func:`inputs_job_key`) -- has
``inputs`` (name -> the input's identity) in place of ``input_sha256``. The two documents
cannot meet: they have different fields, and canonical JSON is unambiguous. A job whose only
input is the original, under the name :data:`ORIGINAL_INPUT`, keeps the first document,
byte for byte: every key of today's recipes stays as it was (golden tests pin them).

Filenames, bucket names, event ids and message ids are never part of the key: the same
bytes uploaded under two names are one job.

Canonical JSON: keys sorted, no whitespace (``","`` and ``":"`` separators), UTF-8, NaN
and infinities rejected. JSON string quoting makes the encoding unambiguous: no choice of
field values can make two different documents serialise to the same bytes.

Also here: the identity of a source version in the source index (:func:`source_version_id`,
a hash, so that no object key can make it longer than DynamoDB allows), and object keys as
S3's event notifications spell them (:func:`encode_event_key`, :func:`event_key_candidates`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote_plus, unquote_plus

#: The key algorithm a stack uses unless told otherwise (``KEY_ALGORITHM_VERSION``): the keyed one.
KEY_ALGORITHM_VERSION: Final = 2
#: The first key algorithm: the SHA-256 of public inputs (kept so a running stack's keys are
#: computed as they were until it rolls the keyed one out).
UNKEYED_ALGORITHM: Final = 1
#: The algorithms there are.
KEY_ALGORITHMS: Final = frozenset({UNKEYED_ALGORITHM, KEY_ALGORITHM_VERSION})
#: The shortest key secret, in bytes of its UTF-8 text: 32, the HMAC-SHA256 block's half and
#: the hash's length (RFC 2104 section 3: "less than L bytes is strongly discouraged").
MIN_KEY_SECRET_BYTES: Final = 32
#: ``POLICY_VERSION`` that moderates nothing: no moderation job is planned (domain/plan.py), and
#: the keys carry this word, as every key did before moderation existed.
NO_POLICY: Final = "none"


@dataclass(frozen=True)
class KeyScheme:
    """How a key document becomes a job key (the module docstring).

    Attributes
    ----------
    algorithm: :data:`UNKEYED_ALGORITHM` (1: SHA-256 of the document) or
        :data:`KEY_ALGORITHM_VERSION` (2: HMAC-SHA256 of it under ``secret``); the document
        carries it, so two algorithms never give one key.
    secret: the stack's key secret (algorithm 2 only), never shown in a ``repr``.

    Raises
    ------
    ValueError
        An unknown algorithm; algorithm 2 without a secret of at least
        :data:`MIN_KEY_SECRET_BYTES` bytes; algorithm 1 with one.
    """

    algorithm: int = KEY_ALGORITHM_VERSION
    secret: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        if self.algorithm not in KEY_ALGORITHMS:
            raise ValueError(f"key algorithm {self.algorithm!r} is not one of {sorted(KEY_ALGORITHMS)}")
        if self.algorithm == UNKEYED_ALGORITHM and self.secret:
            raise ValueError("key algorithm 1 hashes public inputs only: it takes no secret")
        if self.algorithm != UNKEYED_ALGORITHM and len(self.secret) < MIN_KEY_SECRET_BYTES:
            raise ValueError(
                f"key algorithm {self.algorithm} needs a key secret of at least {MIN_KEY_SECRET_BYTES} bytes"
                f" (KEY_SECRET_ARN deployed, KEY_SECRET locally), got {len(self.secret)}"
            )

    def digest(self, document: bytes) -> str:
        """The key of a canonical ``document``: 64 lowercase hex characters."""
        if self.algorithm == UNKEYED_ALGORITHM:
            return sha256_hex(document)
        return hmac.new(self.secret, document, hashlib.sha256).hexdigest()

    @property
    def id(self) -> str:
        """What tells two schemes apart without showing the secret: ``"1"``, or ``"2:"`` and
        12 hex characters of an HMAC of a fixed text under the secret (a new secret is a new
        scheme: a key change). Part of a backfill's change and of every decision record."""
        if self.algorithm == UNKEYED_ALGORITHM:
            return str(self.algorithm)
        fingerprint = hmac.new(self.secret, b"mediajobs key scheme id", hashlib.sha256).hexdigest()[:12]
        return f"{self.algorithm}:{fingerprint}"


#: Algorithm 1, as every key was computed before the keyed one (tests' golden keys).
UNKEYED: Final = KeyScheme(UNKEYED_ALGORITHM)


def is_original_key(key: str, originals_prefix: str) -> bool:
    """Whether the object key ``key`` names an original: under ``originals_prefix``
    (``originals/``), and not a folder marker -- a key ending in ``/``, what the S3
    console's "Create folder" writes (a zero-byte object; S3 User Guide, "Organizing
    objects in the Amazon S3 console by using folders"). A marker is no upload: no asset,
    no status, no notification. The rule is the key's, whatever its size: a key ending in
    ``/`` names no file (and an ``Object Deleted`` event carries no size). Pure."""
    return key.startswith(originals_prefix) and len(key) > len(originals_prefix) and not key.endswith("/")


#: The name of a job's input when it is the original's content: the only input of a recipe
#: that declares none.
ORIGINAL_INPUT: Final = "original"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
#: An input's name, and an output's (a recipe's variant and rendition names are such).
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` as canonical JSON bytes.

    Parameters
    ----------
    value:
        JSON-compatible data (dicts, lists, str, int, float, bool, None).

    Returns
    -------
    bytes
        UTF-8, keys sorted, no insignificant whitespace.

    Raises
    ------
    ValueError
        If the value holds NaN or infinity.
    TypeError
        If the value is not JSON-serialisable.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    """Return the SHA-256 of ``data`` as 64 lowercase hex characters."""
    return hashlib.sha256(data).hexdigest()


def recipe_hash(recipe_id: str, version: int, step: str, params: dict[str, Any]) -> str:
    """Hash of a versioned recipe: SHA-256 hex of its canonical JSON.

    Parameters
    ----------
    recipe_id, version, step:
        The recipe's identity (``"web-image"``, ``1``, ``"image.variants"``).
    params:
        The step's parameters; their key order does not matter.
    """
    return sha256_hex(canonical_json({"id": recipe_id, "version": version, "step": step, "params": params}))


def job_key(input_sha256: str, recipe_sha256: str, policy_version: str = NO_POLICY, *, keys: KeyScheme) -> str:
    """Derive the job key (64 hex characters).

    Parameters
    ----------
    input_sha256:
        SHA-256 hex of the original's bytes.
    recipe_sha256:
        :func:`recipe_hash` of the recipe.
    policy_version:
        Moderation policy version (``"none"`` until moderation exists).
    keys:
        The stack's :class:`KeyScheme` (its algorithm is the document's ``algorithm``).

    Raises
    ------
    ValueError
        If a hash is not 64 lowercase hex characters.
    """
    for name, value in (("input_sha256", input_sha256), ("recipe_sha256", recipe_sha256)):
        if not _HEX64.fullmatch(value):
            raise ValueError(f"{name} must be 64 lowercase hex characters, got {value!r}")
    document = {
        "algorithm": keys.algorithm,
        "input_sha256": input_sha256,
        "policy_version": policy_version,
        "recipe_sha256": recipe_sha256,
    }
    return keys.digest(canonical_json(document))


#: A part of a content a job works on: ``segment/v<plan version>/<start us>-<end us>``
#: (:meth:`mediajobs.domain.segments.Segment.identity`) or ``audio/v<plan version>``; numbers
#: without leading zeros (one spelling, one key), the range not empty (:func:`is_part`).
PART: Final = re.compile(r"(segment/v[1-9][0-9]{0,3}/(0|[1-9][0-9]{0,14})-[1-9][0-9]{0,14}|audio/v[1-9][0-9]{0,3})")


def is_part(part: str) -> bool:
    """Whether ``part`` is :data:`PART` and, for a segment, its start is before its end."""
    if not PART.fullmatch(part):
        return False
    if part.startswith("segment/"):
        start, end = part.rsplit("/", 1)[1].split("-")
        return int(start) < int(end)
    return True


def part_job_key(
    sha256: str, part: str, recipe_sha256: str, policy_version: str = NO_POLICY, *, keys: KeyScheme
) -> str:
    """The job key of the job that works on one part of the content ``sha256`` under a
    recipe: a segment of a long video, or its audio track (:func:`inputs_job_key` of
    ``{"original": {"sha256": sha256, "part": part}}``): the content, the recipe, the
    range and the plan's version, never a file name or a message.

    Raises
    ------
    ValueError
        As :func:`inputs_job_key` (``part`` not :data:`PART`, a hash not 64 hex characters).
    """
    return inputs_job_key({ORIGINAL_INPUT: {"sha256": sha256, "part": part}}, recipe_sha256, policy_version, keys=keys)


def inputs_job_key(
    inputs: Mapping[str, Mapping[str, str]],
    recipe_sha256: str,
    policy_version: str = NO_POLICY,
    *,
    keys: KeyScheme,
) -> str:
    """Derive the job key of a job with named inputs (64 hex characters).

    Parameters
    ----------
    inputs:
        Input name -> its identity: ``{"sha256": <hex>}`` for an original's content,
        ``{"sha256": <hex>, "part": <part>}`` for a part of it (:data:`PART`: a segment's
        range under a plan version, or the whole audio track: :func:`part_job_key`),
        ``{"job_key": <hex>, "output": <name>}`` for another job's named output. At least one.
    recipe_sha256, policy_version, keys:
        As :func:`job_key`.

    Returns
    -------
    str
        :func:`job_key` of the content when ``inputs`` is exactly ``{"original": {"sha256":
        ...}}`` (today's jobs keep their keys); otherwise the SHA-256 of the canonical JSON
        ``{"algorithm", "inputs", "policy_version", "recipe_sha256"}``.

    Raises
    ------
    ValueError
        No input, a name that is not ``[a-z0-9][a-z0-9_-]{0,31}``, an identity of another
        shape, or a hash that is not 64 lowercase hex characters.
    """
    if not inputs:
        raise ValueError("a job has at least one input")
    for name, identity in inputs.items():
        if not NAME.fullmatch(name):
            raise ValueError(f"input name {name!r} is not [a-z0-9][a-z0-9_-]{{0,31}}")
        if set(identity) == {"sha256"}:
            digest = identity["sha256"]
        elif set(identity) == {"job_key", "output"} and NAME.fullmatch(identity["output"]):
            digest = identity["job_key"]
        elif set(identity) == {"sha256", "part"} and is_part(identity["part"]):
            digest = identity["sha256"]
        else:
            shape = "a content, a part of one or a job's named output"
            raise ValueError(f"input {name!r}: not {shape}: {dict(identity)!r}")
        if not _HEX64.fullmatch(digest):
            raise ValueError(f"input {name!r}: {digest!r} is not 64 lowercase hex characters")
    if set(inputs) == {ORIGINAL_INPUT} and set(inputs[ORIGINAL_INPUT]) == {"sha256"}:
        return job_key(inputs[ORIGINAL_INPUT]["sha256"], recipe_sha256, policy_version, keys=keys)
    if not _HEX64.fullmatch(recipe_sha256):
        raise ValueError(f"recipe_sha256 must be 64 lowercase hex characters, got {recipe_sha256!r}")
    document = {
        "algorithm": keys.algorithm,
        "inputs": {name: dict(identity) for name, identity in inputs.items()},
        "policy_version": policy_version,
        "recipe_sha256": recipe_sha256,
    }
    return keys.digest(canonical_json(document))


def source_version_document(bucket: str, key: str, *, version_id: str | None, etag: str, size_bytes: int) -> str | None:
    """What identifies one immutable version of an S3 object, as canonical JSON text.

    ``["s3", bucket, key, "version", <version id>]`` when the bucket is versioned (a
    version's bytes never change); otherwise ``["s3", bucket, key, "etag", <etag>,
    <size>]`` (a new upload under the key gets another ETag unless its bytes are the
    same). ``None`` when neither is known.

    This was the source index's key itself until the index was keyed by its hash
    (:func:`source_version_id`): JSON escapes ``"`` and ``\\`` in two bytes and control
    characters in six, so an S3 key (up to 1,024 bytes) could make it longer than
    DynamoDB's 2,048-byte partition key.
    """
    if version_id:
        return canonical_json(["s3", bucket, key, "version", version_id]).decode()
    if etag:
        return canonical_json(["s3", bucket, key, "etag", etag.strip('"'), size_bytes]).decode()
    return None


def source_version_id(bucket: str, key: str, *, version_id: str | None, etag: str, size_bytes: int) -> str | None:
    """Identity of one immutable version of an S3 object, for the source index: the SHA-256
    (64 hex characters) of its :func:`source_version_document`, or ``None`` when neither a
    version id nor an ETag is known (such a source is hashed every time).

    64 bytes whatever the key: DynamoDB's partition key holds at most 2,048 bytes
    (DynamoDB developer guide, "Service, account, and table quotas": partition key length).
    It cannot meet a content id (``sha256:<hex>``, :func:`content_id`), which has a prefix.
    This is a cache key for a content hash, never a job's identity.
    """
    document = source_version_document(bucket, key, version_id=version_id, etag=etag, size_bytes=size_bytes)
    return None if document is None else sha256_hex(document.encode("utf-8"))


def content_id(sha256: str) -> str:
    """Identity of a content in the source index: ``sha256:<hex>``."""
    return f"sha256:{sha256}"


#: Characters that application/x-www-form-urlencoded leaves as they are, beside letters and
#: digits (WHATWG URL Standard, "application/x-www-form-urlencoded serializing"; Java's
#: ``URLEncoder`` agrees), plus ``/``, which S3 leaves in event keys.
_EVENT_KEY_SAFE: Final = "/*"


def encode_event_key(key: str) -> str:
    """An object key as S3 spells it in its event notifications (and so in the EventBridge
    events the worker receives).

    S3 URL-encodes the key: "The object key name value is URL encoded. For example, 'red
    flower.jpg' becomes 'red+flower.jpg' (Amazon S3 returns 'application/x-www-form-urlencoded'
    as the content type in the response)" (S3 user guide, "Event message structure"). So:
    UTF-8, a space as ``+``, letters, digits and ``-._*`` as they are, every other byte as a
    ``%XX`` escape (``+`` as ``%2B``, ``%`` as ``%25``, ``é`` as ``%C3%A9``) -- except ``/``,
    which stays: a rule's ``{"prefix": "originals/"}`` matches the key as the event spells
    it, and matches keys under ``originals/``.

    Only the embedded AWS, ``mediajobs simulate`` and tests build events; the worker decodes
    (:func:`event_key_candidates`).

    Raises
    ------
    UnicodeEncodeError
        If ``key`` is not valid Unicode text (a lone surrogate): no S3 key is.
    """
    return quote_plus(key, safe=_EVENT_KEY_SAFE, encoding="utf-8", errors="strict").replace("~", "%7E")


def event_key_candidates(received: str) -> tuple[str, ...]:
    """The object keys an S3 event's ``detail.object.key`` may name, in the order to try
    them. Pure.

    First the key URL-decoded (``unquote_plus``, as Powertools' own
    ``S3EventBridgeNotificationObject.key`` does): what S3 sends (:func:`encode_event_key`),
    and the identity of the source from then on (source version id, manifest, logs). Then,
    when it differs, the key as received: for an event from a producer that did not encode
    it (an older emulator, a hand-written event), used only if the decoded key names no
    object and this one does. ``"a%2Bb"`` is ``("a+b", "a%2Bb")``; ``"a.jpg"`` is ``("a.jpg",)``.
    Escapes that do not decode as UTF-8 (``"a%C3"``) give only the key as received: no
    decoding would name a key S3 holds, and a replacement character would name one never sent.
    """
    try:
        decoded = unquote_plus(received, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:  # escapes that are not UTF-8: S3 never sends them; no key to guess
        return (received,)
    return (decoded,) if decoded == received else (decoded, received)
