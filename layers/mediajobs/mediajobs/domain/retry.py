"""When a message that was not acknowledged should come back. Pure.

Lambda's SQS event source leaves a failed record invisible until its visibility timeout
runs out (90 minutes in the template); the handler sets a better one per record with
``ChangeMessageVisibility``. Every receive counts toward the queue's ``maxReceiveCount``,
so the delays below decide how fast a message walks toward the dead-letter queue.
"""

from __future__ import annotations

import random
from typing import Final

#: SQS's largest visibility timeout, seconds (12 hours; SQS API reference, ChangeMessageVisibility).
MAX_VISIBILITY_S: Final = 43_200


def busy_delay_s(lease_remaining_s: float, *, lease_s: int, rng: random.Random | None = None) -> int:
    """Visibility for a duplicate that found its job running: the holder's remaining
    lease plus jitter, so it comes back after the holder has finished (and then finds
    ``done``) or after its lease ran out (and then takes over).

    The jitter (1 s up to a tenth of the lease) spreads duplicates that found the same
    holder, so they do not return in one burst.
    """
    rng = rng or random.Random()
    jitter = rng.uniform(1.0, max(2.0, lease_s / 10))
    return _clamp(max(0.0, lease_remaining_s) + jitter)


def transient_delay_s(receive_count: int, *, base_s: int, cap_s: int, rng: random.Random | None = None) -> int:
    """Visibility after a transient failure: exponential backoff with full jitter on the
    receive count (``base_s * 2**(n-1)``, at most ``cap_s``), at least 1 s."""
    rng = rng or random.Random()
    ceiling = min(cap_s, base_s * 2 ** max(0, receive_count - 1))
    return _clamp(max(1.0, rng.uniform(ceiling / 2, ceiling)))


def _clamp(seconds: float) -> int:
    return int(min(MAX_VISIBILITY_S, max(0, round(seconds))))
