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
    """Visibility after a transient failure: exponential backoff on the receive count
    (``base_s * 2**(n-1)``, at most ``cap_s``) with "equal jitter" (uniformly between half
    that and all of it), at least 1 s."""
    rng = rng or random.Random()
    ceiling = min(cap_s, base_s * 2 ** max(0, receive_count - 1))
    return _clamp(max(1.0, rng.uniform(ceiling / 2, ceiling)))


#: Tries of one S3 conditional write that meets 409 ``ConditionalRequestConflict`` (another
#: write or delete of the key in flight; S3 API reference, PutObject ``If-None-Match``: "On
#: a 409 failure you should retry the upload"), the first one included.
CONFLICT_ATTEMPTS: Final = 5
#: Backoff ceilings after a 409, seconds: 0.25 after the first try, doubling, at most 4.
#: The conflicting write is another holder's upload of the same object (a duplicate or a
#: takeover), which lasts from milliseconds to a few seconds for a video rendition; the
#: waits sum to at most 3.75 s, then the job is given back as a transient failure.
CONFLICT_BASE_S: Final = 0.25
CONFLICT_CAP_S: Final = 4.0


def conflict_backoff_s(
    attempt: int, *, rng: random.Random, base_s: float = CONFLICT_BASE_S, cap_s: float = CONFLICT_CAP_S
) -> float:
    """Seconds to wait after try number ``attempt`` (1 for the first) of a conditional write
    met a 409, before the next: exponential backoff with full jitter, uniformly between 0
    and ``min(cap_s, base_s * 2**(attempt - 1))`` (AWS Architecture Blog, "Exponential
    Backoff And Jitter"), so that writers that collided do not collide again in step.

    Parameters
    ----------
    attempt: the try that failed, from 1.
    rng: the source of jitter (tests pass a seeded one).
    base_s, cap_s: the first ceiling and the largest one, seconds.

    Raises
    ------
    ValueError
        If ``attempt`` is below 1.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be at least 1, got {attempt}")
    return rng.uniform(0.0, min(cap_s, base_s * 2 ** (attempt - 1)))


def _clamp(seconds: float) -> int:
    return int(min(MAX_VISIBILITY_S, max(0, round(seconds))))
