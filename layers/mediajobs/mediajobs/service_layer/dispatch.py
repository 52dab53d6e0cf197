"""The dispatcher: deliver each outbox item to every destination once, and mark it.

The outbox item is committed with the asset's change (``adapters/assets.py``); its
stream record names it. For each destination not marked on the item yet, the dispatcher
delivers (a destination retries within the invocation as its policy says), then marks the
item with one conditional update. A dispatcher that dies between delivering and marking
delivers again with the same id: consumers drop repeats by it. Two dispatchers racing one
item may both deliver, and mark it once.

Outcomes per destination:

* delivered: marked ``{"at_s": ...}`` with what the destination reported (an event id, a
  status);
* refused for good (a webhook's 3xx or 4xx, reason ``webhook_refused``; a webhook URL
  whose host is or resolves to an address no webhook is sent to, reason
  ``webhook_target_refused``): kept in the on-failure destination with its reason, the
  status and the first bytes of the answer (or why the address is refused), and marked
  ``{"refused": true, "reason": ...}`` -- never tried again;
* not delivered yet (a timeout, a 5xx, a ``Retry-After`` longer than the invocation can
  wait): the destination's earliest next try is noted on the item (``not_before_s``) and
  :class:`~mediajobs.domain.errors.TransientFailure` is raised, so the event source
  mapping retries the record (a bounded number of times, then its on-failure destination
  keeps it).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mediajobs.domain.errors import TransientFailure
from mediajobs.domain.notifications import (
    WEBHOOK_REFUSED,
    WEBHOOK_TARGET_REFUSED,
    Notification,
    Verdict,
    webhook_verdict,
)
from mediajobs.domain.webhook_targets import WebhookTargetRefused

log = logging.getLogger(__name__)


class DeliveryRefused(Exception):
    """A destination refused the notification for good: a webhook's 3xx or 4xx (reason
    ``webhook_refused``), or a webhook target no POST is sent to (``webhook_target_refused``,
    no status).

    Attributes: ``status`` (HTTP status; ``None``: nothing was sent), ``detail`` (the first
    bytes of the answer, or why), ``reason`` (one of the on-failure reasons of
    :mod:`mediajobs.domain.notifications`).
    """

    def __init__(self, status: int | None, detail: str, *, reason: str = WEBHOOK_REFUSED) -> None:
        super().__init__(f"refused ({reason}{f', {status}' if status is not None else ''}): {detail[:200]}")
        self.status = status
        self.detail = detail
        self.reason = reason


class NotYet(TransientFailure):
    """A destination could not deliver within this invocation; ``not_before_s`` (Unix
    seconds) is the earliest its next try may be (a ``Retry-After``, a backoff)."""

    def __init__(self, message: str, *, not_before_s: float) -> None:
        super().__init__(message)
        self.not_before_s = not_before_s


class Destination(Protocol):
    """Where notifications go (EventBridge, a webhook)."""

    @property
    def name(self) -> str:
        """Its name on the outbox item's ``deliveries`` (``eventbridge``, ``webhook``)."""
        ...

    def deliver(self, notification: Notification, *, remaining_s: Callable[[], float | None]) -> Mapping[str, Any]:
        """Deliver ``notification`` (retrying within ``remaining_s()`` seconds as its policy
        says); returns what to mark (``{"event_id": ...}``, ``{"status": 200}``).

        Raises
        ------
        DeliveryRefused
            Refused for good.
        NotYet
            Not delivered within the invocation; try no earlier than ``not_before_s``.
        TransientFailure
            Anything else worth another try.
        """
        ...


@dataclass(frozen=True)
class OutboxRecord:
    """An outbox item as the dispatcher reads it (see ``adapters/outbox.py``).

    Attributes
    ----------
    notification: the notification.
    deliveries: destination name -> its mark; a destination is done once it is here.
    not_before_s: destination name -> the earliest its next try may be (Unix seconds).
    created_at_s: when the asset's transaction wrote it.
    """

    notification: Notification
    deliveries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    not_before_s: Mapping[str, float] = field(default_factory=dict)
    created_at_s: int = 0


class Outbox(Protocol):
    """The dispatcher's side of the outbox."""

    def get(self, notification_id: str) -> OutboxRecord | None:
        """The item, read strongly consistent; ``None`` when there is none (expired)."""
        ...

    def mark(self, notification_id: str, destination: str, mark: Mapping[str, Any], *, now_s: int, last: bool) -> bool:
        """Mark ``destination`` done, once (``False``: it was marked already); ``last``:
        every destination is marked now, the item may expire."""
        ...

    def defer(self, notification_id: str, destination: str, *, not_before_s: float) -> None:
        """Note the earliest next try of ``destination``."""
        ...


class FailureSink(Protocol):
    """The on-failure destination (an SQS queue): what could not be delivered, kept."""

    def keep(self, failure: Mapping[str, Any]) -> None:
        """Keep ``failure`` (a JSON object). Raises TransientFailure when it could not."""
        ...


@dataclass
class Dispatched:
    """What one dispatch did, by destination name: ``delivered`` now, ``refused`` now,
    ``already`` marked before it, ``raced`` (delivered, but another dispatcher marked it
    first)."""

    notification_id: str
    delivered: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    raced: list[str] = field(default_factory=list)
    missing: bool = False


class Dispatcher:
    """Deliver outbox items (one screen: read, wait for a deferred try, deliver, mark).

    Parameters
    ----------
    outbox: the outbox (:class:`Outbox`).
    destinations: every destination, in the order they are tried.
    failures: the on-failure destination (:class:`FailureSink`).
    clock: Unix time, seconds.
    sleep: how a wait for a deferred try passes (seconds); tests pass a recording fake.
    margin_s: time kept back at the end of the invocation (seconds).
    """

    def __init__(
        self,
        outbox: Outbox,
        destinations: Sequence[Destination],
        failures: FailureSink,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        margin_s: float = 5.0,
    ) -> None:
        self._outbox = outbox
        self._destinations = list(destinations)
        self._failures = failures
        self._clock = clock
        self._sleep = sleep
        self._margin_s = margin_s

    def dispatch(self, notification_id: str, *, remaining_s: Callable[[], float | None] = lambda: None) -> Dispatched:
        """Deliver the item ``notification_id`` to every destination not marked on it.

        ``remaining_s``: seconds left in the invocation (``None``: no limit).

        Raises
        ------
        TransientFailure
            A destination could not deliver yet (its next try noted on the item), or the
            outbox failed: the record is retried.
        """
        done = Dispatched(notification_id)
        record = self._outbox.get(notification_id)
        if record is None:
            done.missing = True  # expired after every destination marked it, or never there
            return done
        pending = [d for d in self._destinations if d.name not in record.deliveries]
        done.already = [d.name for d in self._destinations if d.name in record.deliveries]
        for number, destination in enumerate(pending):
            last = number == len(pending) - 1
            self._wait_for(record, destination.name, remaining_s)
            try:
                mark = dict(destination.deliver(record.notification, remaining_s=remaining_s))
            except DeliveryRefused as refused:
                self._failures.keep(
                    {
                        "notification_id": notification_id,
                        "destination": destination.name,
                        "type": str(record.notification.type),
                        "key": record.notification.key,
                        "reason": refused.reason,
                        "status": refused.status,
                        "detail": refused.detail,
                    }
                )
                mark = {"refused": True, "reason": refused.reason}
                if refused.status is not None:
                    mark["status"] = refused.status
                extra = {
                    "notification_id": notification_id,
                    "destination": destination.name,
                    "reason": refused.reason,
                    "status": refused.status,
                }
                log.warning("notification refused for good: kept in the on-failure destination", extra=extra)
                done.refused.append(destination.name)
            except NotYet as later:
                self._outbox.defer(notification_id, destination.name, not_before_s=later.not_before_s)
                raise
            else:
                done.delivered.append(destination.name)
            if not self._outbox.mark(notification_id, destination.name, mark, now_s=int(self._clock()), last=last):
                done.raced.append(destination.name)
        return done

    def _wait_for(self, record: OutboxRecord, destination: str, remaining_s: Callable[[], float | None]) -> None:
        """Wait until a deferred destination may be tried, if the invocation has the time;
        else raise :class:`NotYet` (the record comes back)."""
        not_before = record.not_before_s.get(destination)
        if not_before is None:
            return
        wait_s = not_before - self._clock()
        if wait_s <= 0:
            return
        left = remaining_s()
        if left is not None and wait_s > left - self._margin_s:
            raise NotYet(f"{destination}: next try in {wait_s:.1f} s, past this invocation", not_before_s=not_before)
        self._sleep(wait_s)


# --------------------------------------------------------------------------- webhooks


@dataclass(frozen=True)
class WebhookAnswer:
    """What a receiver answered: ``status`` (``None``: a timeout or a connection failure),
    its headers, and the first bytes of its body."""

    status: int | None
    headers: Mapping[str, str] = field(default_factory=dict)
    body_head: bytes = b""


class WebhookTransport(Protocol):
    """One HTTPS POST (``adapters/webhooks.py``)."""

    def post(self, url: str, body: bytes, headers: Mapping[str, str], *, timeout_s: float) -> WebhookAnswer:
        """POST ``body``; never raises for an answer or a timeout (both are answers).

        Raises
        ------
        WebhookTargetRefused
            The URL's host is, or resolves to, an address no webhook is sent to
            (:mod:`mediajobs.domain.webhook_targets`); nothing was sent.
        """
        ...


class WebhookSigner(Protocol):
    """Standard Webhooks signing (``adapters/webhooks.py``, with the ``standardwebhooks`` package)."""

    def signature(self, msg_id: str, timestamp_s: int, body: str) -> str:
        """The ``webhook-signature`` header (``v1,<base64 HMAC-SHA256 of id.timestamp.body>``)."""
        ...


@dataclass(frozen=True)
class WebhookPolicy:
    """How a webhook is tried (the defaults are documented in docs/notifications.md).

    Attributes
    ----------
    timeout_s: one POST's timeout, seconds.
    attempts: POSTs per invocation at most (the event source mapping retries the record
        after that, a bounded number of times).
    retry_after_cap_s: the longest ``Retry-After`` honoured, seconds (a longer one waits
        this long).
    backoff_base_s, backoff_cap_s: the full-jitter backoff after a 5xx or a timeout.
    detail_bytes: how much of a refusal's answer the on-failure destination keeps.
    margin_s: seconds of the invocation kept after the last POST or wait (to mark, report).
    """

    timeout_s: float = 10.0
    attempts: int = 5
    retry_after_cap_s: float = 60.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 30.0
    detail_bytes: int = 512
    margin_s: float = 5.0


@dataclass(frozen=True)
class Timing:
    """A destination's time sources: ``clock`` (Unix seconds), ``sleep`` (seconds) and
    ``jitter`` (a draw in [0, 1) for backoff); tests pass their own."""

    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = random.random


class WebhookDestination:
    """A webhook following the Standard Webhooks conventions: the body is the
    notification's payload (JSON), ``webhook-id`` its id, ``webhook-timestamp`` the Unix
    time of this attempt, ``webhook-signature`` over ``id.timestamp.body``. Answers are
    classified by :func:`~mediajobs.domain.notifications.webhook_verdict`.

    Parameters
    ----------
    url: the receiver.
    transport, signer: the ports above.
    policy: :class:`WebhookPolicy`.
    clock: Unix time, seconds; sleep: waits (seconds); jitter: draws from [0, 1).
    """

    name = "webhook"

    def __init__(
        self,
        url: str,
        transport: WebhookTransport,
        signer: WebhookSigner,
        *,
        policy: WebhookPolicy = WebhookPolicy(),
        timing: Timing = Timing(),
    ) -> None:
        self._url = url
        self._transport = transport
        self._signer = signer
        self._policy = policy
        self._clock = timing.clock
        self._sleep = timing.sleep
        self._jitter = timing.jitter
        self._margin_s = policy.margin_s

    def deliver(self, notification: Notification, *, remaining_s: Callable[[], float | None]) -> Mapping[str, Any]:
        """POST until an answer says delivered or refused, at most ``policy.attempts`` times
        in this invocation, waiting as each answer says when the invocation has the time.

        Raises
        ------
        DeliveryRefused
            A 3xx or 4xx other than 429 (reason ``webhook_refused``), or the URL's host is or
            resolves to an address no webhook is sent to (``webhook_target_refused``: no
            status, the detail says which address and why).
        NotYet
            Still not delivered: the next try no earlier than the last answer asked.
        """
        policy = self._policy
        body = _json_body(notification.payload)
        for attempt in range(1, policy.attempts + 1):
            left = remaining_s()
            if left is not None and policy.timeout_s > left - self._margin_s:
                # A POST may take its whole timeout: one started now could outlast the invocation.
                raise NotYet(f"webhook: {left:.1f} s left, less than one POST's timeout", not_before_s=self._clock())
            timestamp_s = int(self._clock())
            headers = {
                "content-type": "application/json",
                "webhook-id": notification.id,
                "webhook-timestamp": str(timestamp_s),
                "webhook-signature": self._signer.signature(notification.id, timestamp_s, body),
            }
            try:
                answer = self._transport.post(self._url, body.encode(), headers, timeout_s=policy.timeout_s)
            except WebhookTargetRefused as refused:  # permanent for this URL: no retry, no connection made
                raise DeliveryRefused(None, str(refused), reason=WEBHOOK_TARGET_REFUSED) from refused
            verdict = webhook_verdict(
                answer.status,
                answer.headers,
                attempt=attempt,
                now_s=self._clock(),
                retry_after_cap_s=policy.retry_after_cap_s,
                base_s=policy.backoff_base_s,
                cap_s=policy.backoff_cap_s,
                jitter=self._jitter(),
            )
            if verdict.verdict is Verdict.DELIVERED:
                return {"status": answer.status, "attempts": attempt}
            if verdict.verdict is Verdict.PERMANENT:
                assert answer.status is not None
                raise DeliveryRefused(answer.status, answer.body_head[: policy.detail_bytes].decode("utf-8", "replace"))
            not_before = self._clock() + verdict.wait_s
            left = remaining_s()
            out_of_time = left is not None and verdict.wait_s + policy.timeout_s > left - self._margin_s
            if attempt == policy.attempts or out_of_time:
                raise NotYet(
                    f"webhook answered {answer.status or 'nothing'} after {attempt} attempts", not_before_s=not_before
                )
            log.info(
                "webhook answered %s: trying again in %.1f s",
                answer.status or "nothing",
                verdict.wait_s,
                extra={"notification_id": notification.id},
            )
            self._sleep(verdict.wait_s)
        raise AssertionError("unreachable: the last attempt raises")


def _json_body(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))
