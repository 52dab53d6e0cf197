"""S3's 409 ConditionalRequestConflict: the write is tried again after a backoff with full
jitter, a bounded number of times, then given back as a transient failure. No test sleeps:
the store takes the sleep it calls."""

from __future__ import annotations

import io
import random

import pytest
from botocore.exceptions import ClientError

from mediajobs.adapters.s3 import S3Store
from mediajobs.domain.errors import TransientFailure
from mediajobs.domain.retry import CONFLICT_ATTEMPTS, CONFLICT_BASE_S, CONFLICT_CAP_S, conflict_backoff_s


def conflict() -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "ConditionalRequestConflict", "Message": "A conflicting operation is in progress"},
            "ResponseMetadata": {"HTTPStatusCode": 409},
        },
        "PutObject",
    )


class ConflictingS3:
    """A PutObject that answers 409 ``conflicts`` times, then stores the object."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts = conflicts
        self.bodies: list[bytes] = []

    def put_object(self, **params):
        self.bodies.append(params["Body"].read() if hasattr(params["Body"], "read") else params["Body"])
        if len(self.bodies) <= self.conflicts:
            raise conflict()
        return {"ETag": '"e"'}


def test_the_ceilings_double_from_the_base_up_to_the_cap_and_every_wait_is_under_its_ceiling():
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(CONFLICT_CAP_S, CONFLICT_BASE_S * 2 ** (attempt - 1))
        waits = [conflict_backoff_s(attempt, rng=rng) for _ in range(200)]
        assert all(0.0 <= w <= ceiling for w in waits)
        assert max(waits) > 0.9 * ceiling and min(waits) < 0.1 * ceiling  # full jitter: the whole range
    assert (CONFLICT_BASE_S, CONFLICT_CAP_S) == (0.25, 4.0)


def test_the_same_seed_gives_the_same_waits_and_attempt_zero_is_refused():
    assert [conflict_backoff_s(n, rng=random.Random(1)) for n in (1, 2, 3)] == [
        conflict_backoff_s(n, rng=random.Random(1)) for n in (1, 2, 3)
    ]
    with pytest.raises(ValueError):
        conflict_backoff_s(0, rng=random.Random(1))


def test_a_409_is_retried_after_a_jittered_backoff_and_then_succeeds():
    slept: list[float] = []
    s3 = ConflictingS3(conflicts=2)
    store = S3Store(s3, sleep=slept.append, rng=random.Random(3))
    assert store.put_if_absent("b", "derivatives/k/thumb.webp", io.BytesIO(b"bytes"), content_type="image/webp")
    expected = random.Random(3)
    assert slept == [conflict_backoff_s(1, rng=expected), conflict_backoff_s(2, rng=expected)]
    assert 0 < slept[0] <= 0.25 and 0 < slept[1] <= 0.5
    assert s3.bodies == [b"bytes"] * 3  # the body is sent whole each time (rewound)


def test_a_409_at_every_try_is_transient_after_a_bounded_number_of_tries():
    slept: list[float] = []
    s3 = ConflictingS3(conflicts=100)
    store = S3Store(s3, sleep=slept.append, rng=random.Random(5))
    with pytest.raises(TransientFailure, match="conditional write conflicts"):
        store.put_if_absent("b", "derivatives/k/manifest.json", b"{}", content_type="application/json")
    assert len(s3.bodies) == CONFLICT_ATTEMPTS == 5
    assert len(slept) == CONFLICT_ATTEMPTS - 1  # no wait after the last try
    assert sum(slept) <= 0.25 + 0.5 + 1.0 + 2.0


def test_a_412_is_not_retried():
    class Exists:
        calls = 0

        def put_object(self, **params):
            Exists.calls += 1
            raise ClientError(
                {"Error": {"Code": "PreconditionFailed"}, "ResponseMetadata": {"HTTPStatusCode": 412}}, "PutObject"
            )

    slept: list[float] = []
    assert S3Store(Exists(), sleep=slept.append).put_if_absent("b", "k", b"x", content_type="x") is False
    assert (Exists.calls, slept) == (1, [])
