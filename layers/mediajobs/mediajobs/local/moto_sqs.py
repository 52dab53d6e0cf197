"""The embedded AWS's SQS reads the clock cheaply (:class:`SqsClock`); applied while an
embedded AWS is open (:mod:`mediajobs.local.adaptations`)."""

from __future__ import annotations

import time
from datetime import datetime

from mediajobs.local.adaptations import Patches


class SqsClock:
    """Make moto's SQS read the clock without a round trip through ``datetime``.

    moto (5.2.5) decides whether each message of a queue is visible (``Message.visible``)
    and whether it is delayed (``Message.delayed``) by reading the clock through
    ``moto.core.utils.unix_time_millis``: ``datetime.now(UTC)``, ``utcfromtimestamp(0)``
    and a subtraction, each time. ``GetQueueAttributes`` reads it four times per message
    of the queue (it counts the visible, the delayed and the in-flight ones), and each
    ``ReceiveMessage`` poll twice per message: in the 400-upload storm, 6 % of the server
    process's samples were these clock readings. Here ``moto.sqs.models`` reads the same
    clock, ``time.time()`` rounded to the microsecond as ``datetime.now`` rounds it, in
    milliseconds as moto's; a time given (``dt``) is converted by moto's own function.
    """

    def apply(self, patches: Patches) -> None:
        """Replace ``moto.sqs.models.unix_time_millis``."""
        from moto.sqs import models

        moto_millis = models.unix_time_millis

        def unix_time_millis(dt: datetime | None = None) -> float:
            if dt is not None:
                return float(moto_millis(dt))
            return round(time.time(), 6) * 1000.0

        patches.set(models, "unix_time_millis", unix_time_millis)
