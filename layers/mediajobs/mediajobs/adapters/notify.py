"""Where notifications go, through boto3: the EventBridge bus (:class:`EventBridgeDestination`)
and the on-failure queue (:class:`SqsFailureSink`).

EventBridge does not deduplicate (EventBridge user guide, "PutEvents": "EventBridge might
deliver an event more than once"), so the notification id travels in the detail for
consumers to drop repeats. ``PutEvents`` answers 200 even when an entry failed: the
entry's ``ErrorCode`` says so, and only that entry is sent again.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from mediajobs.domain.errors import TransientFailure
from mediajobs.domain.notifications import EVENT_SOURCE, Notification

log = logging.getLogger(__name__)

#: Tries of one entry within an invocation (the event source mapping retries the record after).
ENTRY_ATTEMPTS: Final = 4
#: Full-jitter backoff between them: up to base * 2**n seconds, capped.
ENTRY_BACKOFF_BASE_S: Final = 0.1
ENTRY_BACKOFF_CAP_S: Final = 2.0


class EventBridgeDestination:
    """``PutEvents`` of one notification to the stack's bus: ``Source`` ``mediajobs``,
    ``DetailType`` the notification's type (``Asset Ready``, ``Asset Failed``,
    ``Asset Deleted``), ``Detail`` its payload (whose ``id`` is the notification id).

    Parameters
    ----------
    client: a boto3 EventBridge client.
    bus_name: the bus (name or ARN).
    sleep: waits between an entry's tries (seconds).
    """

    name = "eventbridge"

    def __init__(self, client: Any, bus_name: str, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self._events = client
        self._bus = bus_name
        self._sleep = sleep

    def deliver(self, notification: Notification, *, remaining_s: Callable[[], float | None]) -> Mapping[str, Any]:
        """Put the event; returns ``{"event_id": ...}`` (EventBridge's id of the event).

        Raises
        ------
        TransientFailure
            The entry still failed after :data:`ENTRY_ATTEMPTS` tries, or the call did.
        """
        entry = {
            "Source": EVENT_SOURCE,
            "DetailType": str(notification.type),
            "Detail": json.dumps(notification.payload, sort_keys=True, separators=(",", ":")),
            "EventBusName": self._bus,
        }
        last = ""
        for attempt in range(ENTRY_ATTEMPTS):
            try:
                answer = self._events.put_events(Entries=[entry])
            except (ClientError, BotoCoreError) as exc:
                raise TransientFailure(f"EventBridge PutEvents failed: {exc}") from exc
            (result,) = answer["Entries"]
            if "EventId" in result and not result.get("ErrorCode"):
                return {"event_id": result["EventId"]}
            last = f"{result.get('ErrorCode')}: {result.get('ErrorMessage', '')}"
            log.warning("EventBridge refused the entry (try %d): %s", attempt + 1, last)
            if attempt + 1 < ENTRY_ATTEMPTS:
                self._sleep(random.uniform(0, min(ENTRY_BACKOFF_CAP_S, ENTRY_BACKOFF_BASE_S * 2**attempt)))
        raise TransientFailure(f"EventBridge entry failed {ENTRY_ATTEMPTS} times: {last}")


class SqsFailureSink:
    """The on-failure destination the dispatcher writes to itself (a refusal), the same
    queue the event source mapping sends exhausted records to.

    Parameters
    ----------
    client: a boto3 SQS client.
    queue_url: the queue.
    """

    def __init__(self, client: Any, queue_url: str) -> None:
        self._sqs = client
        self._url = queue_url

    def keep(self, failure: Mapping[str, Any]) -> None:
        """Send ``failure`` as one JSON message.

        Raises
        ------
        TransientFailure
            SQS failed (the record is retried: the refusal is kept before it is marked).
        """
        try:
            self._sqs.send_message(QueueUrl=self._url, MessageBody=json.dumps(dict(failure), sort_keys=True))
        except (ClientError, BotoCoreError) as exc:
            raise TransientFailure(f"SQS SendMessage to the on-failure queue failed: {exc}") from exc
