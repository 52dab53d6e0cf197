"""The storm's shape, :class:`StormConfig`: each field that ``mediajobs simulate`` takes as a
flag declares it once (:func:`flagged`: its default, name, type and help), and the command's
flags are built from the fields (:func:`storm_flags`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from mediajobs.local.arguments import non_negative_integer, positive_integer, positive_seconds, share

#: The key of a field's :class:`Flag` in its ``dataclasses.field`` metadata.
FLAG: Final = "flag"
_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Flag:
    """How a :class:`StormConfig` field is given on ``mediajobs simulate``'s command line.

    Attributes
    ----------
    name: the flag, ``--uploads``.
    parse: argparse's ``type``: the flag's text to the field's value (or a usage error,
        :mod:`mediajobs.local.arguments`).
    help: the flag's help; ``{default}`` stands for the field's default (format specs
        allowed: ``{default:g}``).
    """

    name: str
    parse: Callable[[str], Any]
    help: str

    @property
    def dest(self) -> str:
        """The flag's attribute in argparse's namespace (``--lease-seconds``: ``lease_seconds``)."""
        return self.name.removeprefix("--").replace("-", "_")

    def help_for(self, default: Any) -> str:
        """The help text with the field's ``default`` in its place."""
        return self.help.format(default=default)


def flagged(default: _T, name: str, parse: Callable[[str], _T], help_text: str) -> _T:
    """A :class:`StormConfig` field whose value ``mediajobs simulate`` takes as the flag
    ``name``: its ``default``, and its :class:`Flag` in the field's metadata.

    Parameters
    ----------
    parse: the flag's text to a value (argparse's ``type``).
    help_text: the flag's help, ``{default}`` standing for ``default`` (:meth:`Flag.help_for`).
    """
    return dataclasses.field(default=default, metadata={FLAG: Flag(name, parse, help_text)})


@dataclasses.dataclass(frozen=True)
class StormConfig:
    """The storm's shape. The fields with a flag come in the order ``mediajobs simulate
    --help`` lists them.

    Attributes
    ----------
    uploads: originals uploaded.
    workers: worker processes running at once.
    crash_rate: probability that a worker dies while holding a claim (per claim).
    identical_share: share of uploads that are byte-identical copies under another key.
    overwrite_rate: share of uploads whose key is written again later with other bytes.
    late_share: share of overwrites whose replaced version's event is delivered again after
        the new version's (out of order: the late one must be superseded).
    delete_rate: share of uploads deleted later (a delete marker), originals whose bytes
        another key shares first.
    reupload_share: share of deletes followed by an upload of the same bytes under another
        key (during the grace period: the job revives without a render).
    grace_s: the collection's grace period in the storm, seconds (the parent runs a
        collection every ``collect_every_s``, and a last one with no grace at the end).
    collect_every_s: how often the parent runs a collection, seconds.
    dispatch_every_s: how often the parent runs the dispatcher on the outbox stream, seconds
        (its webhook goes to a verifying receiver in the parent:
        :class:`~mediajobs.local.notifications.LocalNotifications`).
    conflict_hold_ms: when above 0, the embedded DynamoDB has transaction conflicts, each
        transaction holding its items this long (:mod:`mediajobs.local.conflicts`); the
        summary then counts the conflicts and the writes of the hottest item. With
        ``identical_share`` near 1 this is the hot-content storm: many workers uploading
        the same bytes under distinct keys at once.
    duplicate_share: share of uploads whose event is delivered twice.
    redelivery_share: share of successful records whose acknowledgement is lost, so
        SQS delivers them again after their visibility timeout.
    video_rate: share of the distinct contents that are small generated videos (3 s at 10
        fps with a tone, a keyframe a second: :func:`~mediajobs.local.storm.plan.video`); the
        workers split them in 1 s segments (``SEGMENT_SECONDS`` 1, ``SPLIT_ABOVE_SECONDS``
        lowered), so each is 3 segment jobs, an audio job and a join.
    checksum_share: share of uploads sent with a full-object SHA-256 checksum.
    lease_s: the workers' lease, seconds.
    timeout_s: the simulated function timeout, seconds.
    visibility_s: the queue's visibility timeout, seconds (how long the unstarted
        records of a crashed worker's batch stay hidden).
    backfill_at: after this many writes of the plan, deploy the active set with
        ``web-image@2`` (:data:`~mediajobs.local.storm.backfill.NEW_IMAGE_SET`) and start its
        backfill (0: none).
    key_change_at: after this many writes of the plan, deploy the keyed key algorithm
        (``KEY_ALGORITHM_VERSION`` 2, with the stack's secret) to workers that started on
        algorithm 1, and start its backfill: every asset is moved to its new paths (0: none;
        the storm then runs algorithm 2 from the start). Not with ``backfill_at``.
    backfill_workers: worker processes on the backfill lane (its ``MaximumConcurrency``).
    seed: fixes every random choice the storm makes: contents, copies, duplicated events,
        crash points (:func:`~mediajobs.local.storm.worker.crash_point`) and lost
        acknowledgements.
    max_seconds: give up after this long.
    log_level: the workers' log level (their logs go to stderr; the command's ``--log-level``).
    """

    uploads: int = flagged(200, "--uploads", positive_integer, "originals uploaded (default {default})")
    workers: int = flagged(4, "--workers", positive_integer, "worker processes (default {default})")
    crash_rate: float = flagged(
        0.05, "--crash-rate", share, "probability a worker dies while holding a claim (default {default})"
    )
    identical_share: float = flagged(
        0.09, "--identical-share", share, "byte-identical copies under other keys (default {default})"
    )
    overwrite_rate: float = flagged(
        0.0,
        "--overwrite-rate",
        share,
        "uploads written again later with other bytes, some events out of order (default {default})",
    )
    late_share: float = 0.5
    delete_rate: float = flagged(
        0.0, "--delete-rate", share, "uploads deleted later, shared bytes first, some re-uploaded (default {default})"
    )
    reupload_share: float = 0.5
    grace_s: int = flagged(
        3, "--grace-seconds", int, "the storm's collection grace period, seconds (default {default})"
    )
    collect_every_s: float = 2.0
    dispatch_every_s: float = 2.0
    conflict_hold_ms: float = flagged(
        0.0,
        "--conflict-hold-ms",
        float,
        "emulate DynamoDB's transaction conflicts, each transaction holding its items this long "
        "(0: off; default {default:g})",
    )
    duplicate_share: float = flagged(0.05, "--duplicate-share", share, "events delivered twice (default {default})")
    redelivery_share: float = flagged(
        0.08,
        "--redelivery-share",
        share,
        "records whose acknowledgement is lost, redelivered after the visibility timeout (default {default})",
    )
    video_rate: float = flagged(
        0.0,
        "--video-rate",
        share,
        "uploads that are small generated videos, split into 3 segments and their audio, then joined "
        "(default {default})",
    )
    reject_rate: float = flagged(
        0.0,
        "--reject-rate",
        share,
        "image contents that are copies of the moderation policy's known-bad test card: each is rejected, "
        "renders nothing and is told Asset Rejected once (default {default})",
    )
    checksum_share: float = flagged(
        1.0, "--checksum-share", share, "uploads sent with a full-object SHA-256 checksum (default {default})"
    )
    lease_s: int = flagged(4, "--lease-seconds", positive_integer, "the workers' lease (default {default})")
    timeout_s: int = 30
    visibility_s: int = flagged(
        20,
        "--visibility-seconds",
        positive_integer,
        "the queue's visibility timeout: how long a crashed batch's other records stay hidden (default {default})",
    )
    seed: int = flagged(1, "--seed", int, "random seed (default {default})")
    backfill_at: int = flagged(
        0,
        "--backfill-at",
        non_negative_integer,
        "after this many uploads, deploy an active set with web-image@2 and backfill it while the storm goes on "
        "(0: none; default {default})",
    )
    key_change_at: int = flagged(
        0,
        "--key-change-at",
        non_negative_integer,
        "start on key algorithm 1 and, after this many uploads, deploy the keyed algorithm 2 and backfill it "
        "while the storm goes on: every asset moves to its new paths (0: none; default {default})",
    )
    backfill_workers: int = 2
    # A guard against a hang, not a budget: 2,000 uploads of two jobs each took 1,269 s on
    # a loaded 2-core machine before assets; with them every record also writes its asset.
    max_seconds: float = flagged(
        7200.0, "--max-seconds", positive_seconds, "give up after this long (default {default:g})"
    )
    log_level: str = "ERROR"


def storm_flags() -> Iterator[tuple[dataclasses.Field[Any], Flag]]:
    """The fields of :class:`StormConfig` that are flags, each with its :class:`Flag`, in
    the order of the fields."""
    for field in dataclasses.fields(StormConfig):
        if FLAG in field.metadata:
            yield field, field.metadata[FLAG]
