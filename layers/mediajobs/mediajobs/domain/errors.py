"""Errors classified by what the caller must do.

* :class:`PermanentFailure` ends the job: the input can never succeed (empty,
  unsupported, corrupt, over a limit). It is recorded and the message deleted.
* :class:`TransientFailure` means "try again later": SQS redelivers.
* :class:`JobBusy` is not a fault: another worker holds an unexpired lease.
* :class:`DeadlineReached` and :class:`DeliveryLost` are transient failures that
  release the claim at once.
* :class:`Superseded` means this worker's lease was taken over; its results
  must not be committed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

# Stable reason codes. Users script against these strings: never rename one.
EMPTY_FILE: Final = "empty_file"
UNSUPPORTED_FORMAT: Final = "unsupported_format"
TRUNCATED_IMAGE: Final = "truncated_image"
CORRUPT_IMAGE: Final = "corrupt_image"
TOO_MANY_PIXELS: Final = "too_many_pixels"
TOO_MANY_SCANS: Final = "too_many_scans"
TOO_MANY_FRAMES: Final = "too_many_frames"
TOO_LARGE: Final = "too_large"
SOURCE_MISSING: Final = "source_missing"
ATTEMPTS_EXHAUSTED: Final = "attempts_exhausted"
# Video (ffprobe/ffmpeg outcomes; see mediajobs.domain.video.CLASSIFICATION).
INVALID_MEDIA: Final = "invalid_media"
UNSUPPORTED_CONTAINER: Final = "unsupported_container"
UNSUPPORTED_CODEC: Final = "unsupported_codec"
NO_VIDEO_STREAM: Final = "no_video_stream"
TOO_LONG: Final = "too_long"
INVALID_OUTPUT: Final = "invalid_output"
# A derivative's key holds bytes no holder of the job registered (see domain.jobs.identify_stored).
OUTPUT_CONFLICT: Final = "output_conflict"
# A valid file using a feature the decoder does not implement (an overlay it cannot compose,
# a colour conversion it lacks): not damage, so never ``corrupt_image``.
UNSUPPORTED_FEATURE: Final = "unsupported_feature"
# Decoding needed more memory than the worker's decode budget (a header that lies about the size).
MEMORY_LIMIT_EXCEEDED: Final = "memory_limit_exceeded"
# The ledger cannot store this input (DynamoDB's ValidationException on a value derived from it).
UNSTORABLE_INPUT: Final = "unstorable_input"
# The moderation policy refused the content, or a person did in review: a decision, not damage
# (the asset ends ``rejected``; the detail names the rule that fired and its evidence).
REJECTED: Final = "rejected"

REASON_CODES: Final = frozenset(
    {
        EMPTY_FILE,
        UNSUPPORTED_FORMAT,
        TRUNCATED_IMAGE,
        CORRUPT_IMAGE,
        TOO_MANY_PIXELS,
        TOO_MANY_SCANS,
        TOO_MANY_FRAMES,
        TOO_LARGE,
        SOURCE_MISSING,
        ATTEMPTS_EXHAUSTED,
        INVALID_MEDIA,
        UNSUPPORTED_CONTAINER,
        UNSUPPORTED_CODEC,
        NO_VIDEO_STREAM,
        TOO_LONG,
        INVALID_OUTPUT,
        OUTPUT_CONFLICT,
        UNSUPPORTED_FEATURE,
        MEMORY_LIMIT_EXCEEDED,
        UNSTORABLE_INPUT,
        REJECTED,
    }
)


@dataclasses.dataclass(frozen=True)
class Limit:
    """A limit a refusal is over: the setting that sets it (the template's parameter, the
    worker's environment variable) and what a user can change. Its :meth:`detail` is the
    refusal's detail, so that every refusal names its limit, its setting and the way out
    (``docs/reason-codes.md``)."""

    setting: str
    change: str

    def detail(self, found: str, limit: str | None = None) -> str:
        """``"<found> > <limit>: the limit is <setting>; <change>"`` (without ``limit``, when
        ``found`` says it: ``"<found>: the limit is ..."``)."""
        over = found if limit is None else f"{found} > {limit}"
        return f"{over}: the limit is {self.setting}; {self.change}"


def in_bytes(n: int) -> str:
    """``n`` bytes as a person reads them: ``"452,790,050 bytes (431.8 MiB)"``."""
    return f"{n:,} bytes ({n / 2**20:,.1f} MiB)"


#: The original's size (``Settings.max_input_bytes``).
INPUT_BYTES: Final = Limit(
    "MaxInputBytes (the worker's MAX_INPUT_BYTES)",
    "upload a smaller file, or deploy with a larger MaxInputBytes",
)
#: An image's or a video frame's pixels (``Settings.max_pixels``), width x height.
PIXELS: Final = Limit(
    "MaxPixels (the worker's MAX_PIXELS)",
    "downscale it, or deploy with a larger MaxPixels (the worker's memory bounds it: docs/images.md)",
)
#: An animation's frames (``adapters/imaging.py``'s ``MAX_FRAMES``: each is decoded).
FRAMES: Final = Limit(
    "the image recipe's frame bound (MAX_FRAMES in adapters/imaging.py)",
    "upload it as a video, or with fewer frames",
)
#: A progressive JPEG's scans (``adapters/imaging.py``'s ``MAX_JPEG_SCANS``: each is a
#: decoding pass over the whole image).
SCANS: Final = Limit(
    "the decoder's scan bound (MAX_JPEG_SCANS in adapters/imaging.py)",
    "re-save the JPEG as baseline, or progressive with the encoder's default scans",
)
#: A video's frames per second of source (``domain/video.py``'s ``MAX_SOURCE_FPS``: every
#: frame is decoded, whatever the renditions keep).
SOURCE_FPS: Final = Limit(
    "the video decoder's rate bound (MAX_SOURCE_FPS in domain/video.py)",
    "re-encode it at the rate it is meant to play (a slow-motion clip at its playback rate)",
)
#: A video's duration (``Settings.max_video_seconds``).
VIDEO_SECONDS: Final = Limit(
    "MAX_VIDEO_SECONDS (the worker's environment in template.yaml)",
    "trim the video, or raise MAX_VIDEO_SECONDS",
)
#: The work one invocation can do (the worker's ``Timeout``, Lambda's 900 s maximum, less
#: the margin it keeps).
WORK_SECONDS: Final = Limit(
    "the worker's Timeout (900 s, Lambda's maximum, less a margin)",
    "shorten the video, lower its resolution or frame rate, or lower SPLIT_ABOVE_SECONDS and SEGMENT_SECONDS "
    "so that it is split (docs/video.md)",
)
#: The worker's disk (its ``EphemeralStorage``).
DISK_BYTES: Final = Limit(
    "the worker's EphemeralStorage (template.yaml)",
    "upload a smaller file, or raise EphemeralStorage (up to 10,240 MB)",
)


class MediaJobsError(Exception):
    """Base class of every error mediajobs raises on purpose."""


class PermanentFailure(MediaJobsError):
    """The input can never be processed; retrying cannot help.

    Parameters
    ----------
    reason:
        One of the stable codes in :data:`REASON_CODES`.
    detail:
        Human-readable explanation (decoder message, measured value and limit).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        if reason not in REASON_CODES:
            raise ValueError(f"unknown reason code {reason!r}")
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class ContentRejected(PermanentFailure):
    """A moderation job's decision refused its content (the policy, or a person in review):
    the job fails ``rejected``, its ``decisions`` kept on its row.

    Parameters
    ----------
    detail: the rule that fired and its evidence (or who rejected it in review).
    decisions: the moderation decision (the manifest ``decisions`` it would have had).
    """

    def __init__(self, detail: str, decisions: Mapping[str, Any]) -> None:
        super().__init__(REJECTED, detail)
        self.decisions = dict(decisions)


class HeldForReview(MediaJobsError):
    """A moderation job's policy said ``review``: the job is held for a person's decision,
    with its machine ``decisions`` (not a failure: nothing is retried, nothing renders)."""

    def __init__(self, decisions: Mapping[str, Any]) -> None:
        super().__init__("held for review")
        self.decisions = dict(decisions)


class TransientFailure(MediaJobsError):
    """A failure that may pass (network, throttling, a lost write race): redeliver."""


class DeadlineReached(TransientFailure):
    """Too little of the Lambda invocation's time is left to start or finish a job.

    The claim (if any) is released at once so that another worker can take it without
    waiting for the lease to expire; the message should come back immediately.
    """


class DeliveryLost(TransientFailure):
    """The SQS message is no longer this worker's (``ReceiptHandleIsInvalid``): it was
    deleted or its receipt handle expired. The work is abandoned and the claim released."""


class JobBusy(MediaJobsError):
    """Another worker holds an unexpired lease on the job.

    Parameters
    ----------
    job_key:
        The job's key (64 hex characters).
    lease_expires_at_s:
        When the holder's lease runs out, in Unix epoch seconds.
    """

    def __init__(self, job_key: str, lease_expires_at_s: int) -> None:
        super().__init__(f"job {job_key[:12]} is running; lease expires at {lease_expires_at_s}")
        self.job_key = job_key
        self.lease_expires_at_s = lease_expires_at_s


class Superseded(MediaJobsError):
    """This worker's claim was taken over (its lease token no longer matches).

    Parameters
    ----------
    job_key:
        The job's key (64 hex characters).
    """

    def __init__(self, job_key: str) -> None:
        super().__init__(f"claim on job {job_key[:12]} was taken over by another worker")
        self.job_key = job_key
