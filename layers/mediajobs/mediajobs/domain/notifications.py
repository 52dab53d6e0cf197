"""Notifications: what an app is told when an asset version ends, and the rules of their
delivery. Pure.

An asset version that becomes ``ready`` or ``failed``, or an asset that becomes
``deleted``, owes its app one notification. The notification is written to the outbox in
the DynamoDB transaction that makes the change (:func:`notification_for`), under an id
derived only from what the transition is (:func:`notification_id`): a redelivery, a
takeover or a replay of the same transition computes the same id, so the outbox's
conditional put finds it there and no second logical notification exists. Delivery is the
dispatcher's (:mod:`mediajobs.service_layer.dispatch`); consumers drop repeats by the id,
since a transport may still deliver one id twice (EventBridge does not deduplicate, and a
dispatcher that dies between a POST and its mark sends it again).

Webhook answers are classified here too (:func:`webhook_verdict`), following the Standard
Webhooks conventions (https://www.standardwebhooks.com, "Retry schedule" and "Failure
handling"): 2xx is delivered; 429 and 503 come back no earlier than their ``Retry-After``
(capped); other 5xx and timeouts back off with jitter; any other answer is permanent.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import email.utils
import enum
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mediajobs.domain.assets import AssetState, AssetVersion, AssetView, same_version, status_document
from mediajobs.domain.keys import canonical_json

#: Bumped whenever :func:`notification_id`'s document changes (never reuse a value).
NOTIFICATION_ID_VERSION: Final = 1

#: Standard Webhooks' symmetric signing secret (the spec's "Signature scheme" table):
#: "Random. Between 24 bytes (192 bits) and 64 bytes (512 bits)", serialised "base64
#: encoded, prefixed with ``whsec_``".
SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - the serialisation's prefix, not a secret
SECRET_MIN_BYTES: Final = 24
SECRET_MAX_BYTES: Final = 64
#: The two forms a user meets, for error messages.
SECRET_FORMS: Final = (
    "locally (the secret of mediajobs webhook listen and serve): whsec_ + base64 of 24 to 64 random "  # noqa: S105
    "bytes, e.g. python3 -c \"import base64,os; print('whsec_' + base64.b64encode(os.urandom(32)).decode())\"; "
    "deployed (the WebhookSecret in Secrets Manager): the base64 alone, without whsec_"
)


def webhook_key(secret: str, *, prefixed: bool | None = None) -> bytes:
    """The HMAC key a Standard Webhooks secret holds: ``whsec_`` + base64 (``prefixed``
    ``True``: the local CLI's form), the base64 alone (``False``: the Secrets Manager value
    of a deployed stack), or either (``None``: the signer, given one or the other). Pure.

    Raises
    ------
    ValueError
        A secret not in the form asked, not strict base64, or not 24 to 64 bytes once
        decoded; the message shows both forms (:data:`SECRET_FORMS`).
    """
    secret = secret.strip()  # a Secrets Manager value written from a file may end in a newline
    has_prefix = secret.startswith(SECRET_PREFIX)
    if prefixed is True and not has_prefix:
        raise ValueError(f"a local webhook secret starts with {SECRET_PREFIX}; the forms: {SECRET_FORMS}")
    if prefixed is False and has_prefix:
        raise ValueError(f"a deployed webhook secret is the base64 alone; the forms: {SECRET_FORMS}")
    encoded = secret[len(SECRET_PREFIX) :] if has_prefix else secret
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        where = f" after {SECRET_PREFIX}" if has_prefix else ""
        raise ValueError(f"the webhook secret is not base64{where}; the forms: {SECRET_FORMS}") from None
    if not SECRET_MIN_BYTES <= len(key) <= SECRET_MAX_BYTES:
        raise ValueError(
            f"the webhook secret holds {len(key)} bytes, Standard Webhooks asks for {SECRET_MIN_BYTES} to "
            f"{SECRET_MAX_BYTES}; the forms: {SECRET_FORMS}"
        )
    return key


#: The EventBridge ``Source`` of every event mediajobs puts on its bus.
EVENT_SOURCE: Final = "mediajobs"


class NotificationType(enum.StrEnum):
    """The EventBridge ``DetailType`` of a notification, and its webhook ``type``."""

    READY = "Asset Ready"
    FAILED = "Asset Failed"
    REJECTED = "Asset Rejected"
    DELETED = "Asset Deleted"


_OF_STATE: Final = {
    AssetState.READY: NotificationType.READY,
    AssetState.FAILED: NotificationType.FAILED,
    AssetState.REJECTED: NotificationType.REJECTED,
    AssetState.DELETED: NotificationType.DELETED,
}


def version_identity(version: AssetVersion) -> dict[str, Any]:
    """What names an asset version in a notification id: its S3 version id, and the
    sequencer of the event that made it current (a version made current again -- after
    the newer one was deleted for good -- is a new transition, told again); on an
    unversioned bucket, its ETag and size instead of the version id."""
    if version.version_id is not None:
        return {"version_id": version.version_id, "sequencer": version.sequencer}
    return {"etag": version.etag, "size_bytes": version.size_bytes, "sequencer": version.sequencer}


def notification_id(
    bucket: str,
    key: str,
    version: AssetVersion,
    notification_type: NotificationType,
    recipes: Iterable[str],
    jobs: Iterable[str] | None = None,
) -> str:
    """The id of an asset version's notification: the SHA-256 (hex, 64 characters) of the
    canonical JSON ``{"asset": "<bucket>/<key>", "recipes": [sorted recipe references],
    "type": <detail-type>, "v": NOTIFICATION_ID_VERSION, "version": version_identity}``,
    with ``"jobs": [sorted job keys]`` too when ``jobs`` is given (a switch to new jobs of
    the same recipes, after a policy change: :func:`notification_for`).

    It is the webhook's ``webhook-id`` and the ``id`` in every EventBridge event's detail.
    Nothing of a delivery (event id, message id, time) is part of it.
    """
    document = {
        "asset": f"{bucket}/{key}",
        "recipes": sorted(set(recipes)),
        "type": str(notification_type),
        "v": NOTIFICATION_ID_VERSION,
        "version": version_identity(version),
    }
    if jobs is not None:
        document["jobs"] = sorted(set(jobs))
    return hashlib.sha256(canonical_json(document)).hexdigest()


@dataclass(frozen=True)
class Notification:
    """One notification, as the outbox keeps it.

    Attributes
    ----------
    id: :func:`notification_id` (64 hex characters).
    type: a :class:`NotificationType`.
    bucket, key: the original.
    payload: the JSON an app receives (:func:`payload`).
    """

    id: str
    type: NotificationType
    bucket: str
    key: str
    payload: Mapping[str, Any]


def payload(notification_id_: str, notification_type: NotificationType, view: AssetView) -> dict[str, Any]:
    """The body an app receives: ``{"id": str, "type": "Asset Ready|Asset Failed|Asset Rejected|Asset Deleted",
    "asset": <the status document of the version, as GET /assets?key= answers it>}``
    (:func:`~mediajobs.domain.assets.status_document`: key, version, SHA-256, state, reason,
    per recipe its outputs and manifest key, the placeholder)."""
    return {"id": notification_id_, "type": str(notification_type), "asset": status_document(view)}


def _job_keys(view: AssetView) -> list[str]:
    return [job.job_key for job in view.jobs]


def notification_for(old: AssetView | None, new: AssetView) -> Notification | None:
    """The notification a write from ``old`` to ``new`` owes, or ``None``. Pure.

    Owed when ``new`` is ``ready``, ``failed``, ``rejected`` or ``deleted`` and ``old`` was not already
    in that state for the same version (:func:`~mediajobs.domain.assets.same_version`:
    a later event naming the same version moves only its sequencer, and tells nothing
    new) -- or, ``ready``, with the same serving recipe set (a backfill's switch to a new
    set is told again, under another id): a duplicate write of a transition owes nothing
    more (and, written anyway, would carry the same id). A ``deleted`` asset nothing was ever told of (an unknown key's
    tombstone) owes nothing.
    """
    kind = _OF_STATE.get(new.state)
    if kind is None:
        return None
    if (
        old is not None
        and old.state == new.state
        and same_version(old.version, new.version)
        and (new.state != AssetState.READY or _job_keys(old) == _job_keys(new))
    ):
        return None
    if kind is NotificationType.DELETED and (old is None or old.state == AssetState.DELETED):
        return None
    recipes = [job.recipe for job in new.jobs] or [job.recipe for job in (old.jobs if old is not None else ())]
    # A switch to other jobs of the same recipes (a new policy version) is told under an id
    # of its own; every other id stays as it always was.
    switched = old is not None and old.state == new.state == AssetState.READY and old.recipes == new.recipes
    nid = notification_id(new.bucket, new.key, new.version, kind, recipes, _job_keys(new) if switched else None)
    return Notification(nid, kind, new.bucket, new.key, payload(nid, kind, new))


# --------------------------------------------------------------------------- webhook answers


class Verdict(enum.StrEnum):
    """What a webhook answer means for its delivery."""

    DELIVERED = "delivered"
    #: Try again, no earlier than the verdict's ``wait_s``.
    RETRY = "retry"
    #: Never again: the on-failure destination keeps it.
    PERMANENT = "permanent"


@dataclass(frozen=True)
class WebhookVerdict:
    """A classified answer: ``wait_s`` (seconds) before the next try, for ``RETRY``."""

    verdict: Verdict
    wait_s: float = 0.0


#: Why the dispatcher's on-failure destination keeps a webhook notification (its message's
#: ``reason``). Stable: scripts match them, never rename one.
#: The receiver answered 3xx or 4xx (other than 429): it refused the notification for good.
WEBHOOK_REFUSED: Final = "webhook_refused"
#: The URL's host is, or resolved to, an address no webhook is sent to (a metadata endpoint,
#: a private, loopback or link-local network: :mod:`mediajobs.domain.webhook_targets`); no
#: connection was made.
WEBHOOK_TARGET_REFUSED: Final = "webhook_target_refused"

#: Statuses whose ``Retry-After`` is honoured (RFC 9110 section 10.2.3; Standard Webhooks).
RETRY_AFTER_STATUSES: Final = frozenset({429, 503})


def retry_after_s(value: str | None, *, now_s: float) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: delay-seconds (``"2"``) or an
    HTTP-date (RFC 9110 section 10.2.3), never negative; ``None`` when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # 1*DIGIT: ASCII only (str.isdigit also takes "²")
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # asctime-date (and "-0000") carry no zone: an HTTP-date is UTC
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now_s)


def backoff_s(attempt: int, *, base_s: float, cap_s: float, jitter: float) -> float:
    """Full-jitter exponential backoff before try ``attempt + 1`` (``attempt`` >= 1):
    ``jitter * min(cap_s, base_s * 2 ** (attempt - 1))``, ``jitter`` drawn from [0, 1) by
    the caller ("Exponential Backoff And Jitter", AWS Architecture Blog)."""
    return jitter * min(cap_s, base_s * 2 ** (attempt - 1))


def webhook_verdict(
    status: int | None,
    headers: Mapping[str, str],
    *,
    attempt: int,
    now_s: float,
    retry_after_cap_s: float,
    base_s: float,
    cap_s: float,
    jitter: float,
) -> WebhookVerdict:
    """Classify a webhook answer (``status`` ``None``: a timeout or a connection failure).

    2xx: delivered. 429 and 503: retried no earlier than ``Retry-After`` says, at most
    ``retry_after_cap_s`` (without a readable header: the backoff). Other 5xx, timeouts and
    connection failures: retried after :func:`backoff_s`. Any other status (3xx, 4xx):
    permanent -- the receiver refused it and would refuse it again.
    """
    if status is not None and 200 <= status < 300:
        return WebhookVerdict(Verdict.DELIVERED)
    if status is not None and status in RETRY_AFTER_STATUSES:
        asked = retry_after_s(_header(headers, "retry-after"), now_s=now_s)
        if asked is not None:
            return WebhookVerdict(Verdict.RETRY, min(asked, retry_after_cap_s))
    if status is None or status >= 500 or status in RETRY_AFTER_STATUSES:
        return WebhookVerdict(Verdict.RETRY, backoff_s(attempt, base_s=base_s, cap_s=cap_s, jitter=jitter))
    return WebhookVerdict(Verdict.PERMANENT)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None
