"""The storm's plan: every write it makes, in order (puts, copies under other keys,
overwrites, deletes, re-uploads), and the distinct contents they write, each choice drawn
from the storm's seed (:func:`plan`)."""

from __future__ import annotations

import dataclasses
import io
import random
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mediajobs.local.storm.config import StormConfig

if TYPE_CHECKING:
    from mediajobs.settings import Settings


@dataclasses.dataclass
class Upload:
    """One write of the storm: a put of ``contents[data_index]`` under ``key`` (``kind``
    ``put``, ``overwrite`` or ``reupload``), or a delete of ``key``: a delete marker
    (``delete``), its current version for good (``delete_version``), or its oldest
    noncurrent version for good (``delete_noncurrent``)."""

    key: str
    data_index: int
    checksum: bool
    #: Its event is sent a second time (the same event: same sequencer).
    twice: bool = False
    kind: str = "put"
    #: An overwrite whose replaced version's event is delivered again after its own.
    late: bool = False


def jpeg(seed: int, size: tuple[int, int] = (96, 64)) -> bytes:
    """A small unique real JPEG (noise from ``seed``), ``size`` in pixels (width, height)."""
    from PIL import Image

    rng = random.Random(seed)
    pixels = rng.randbytes(size[0] * size[1] * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", size, pixels).save(out, "JPEG", quality=85)
    return out.getvalue()


#: A storm video's length and rate: with 1 s segments, 3 segments (a keyframe each second).
VIDEO_SECONDS: Final = 3
VIDEO_FPS: Final = 10
#: The parts each storm video is split into: its 3 segments and its audio.
VIDEO_PARTS: Final = VIDEO_SECONDS + 1


def is_video(content: bytes) -> bool:
    """Whether a storm content is one of :func:`video`'s (an ISO BMFF ``ftyp`` box first)."""
    return content[4:8] == b"ftyp"


def video(seed: int) -> bytes:
    """A small unique real MP4 (``seed`` in its tone and its metadata): 64x64 H.264 at
    :data:`VIDEO_FPS` for :data:`VIDEO_SECONDS` s, a keyframe each second, with AAC.

    Raises
    ------
    subprocess.CalledProcessError
        If ffmpeg fails; :class:`~mediajobs.adapters.ffmpeg.FfmpegMissing` without it.
    """
    from mediajobs.adapters.ffmpeg import find_binaries

    with tempfile.TemporaryDirectory(prefix="mediajobs.storm-video-") as folder:
        out = Path(folder) / "video.mp4"
        subprocess.run(  # noqa: S603 - argv list, no shell
            [find_binaries().ffmpeg, "-nostdin", "-v", "error", "-f", "lavfi", "-i",
             f"testsrc2=size=64x64:rate={VIDEO_FPS}:duration={VIDEO_SECONDS}", "-f", "lavfi", "-i",
             f"sine=frequency={200 + seed % 1000}:duration={VIDEO_SECONDS}", "-c:v", "libx264",
             "-g", str(VIDEO_FPS), "-keyint_min", str(VIDEO_FPS), "-sc_threshold", "0", "-c:a", "aac",
             "-shortest", "-metadata", f"comment=storm {seed}", "-f", "mp4", str(out)],
            check=True,
        )  # fmt: skip
        return out.read_bytes()


#: What marks a storm content made from the known-bad test card (its JPEG comment).
KNOWN_BAD_MARK: Final = b"mediajobs storm known-bad"


def known_bad(seed: int, size: tuple[int, int] = (96, 64)) -> bytes:
    """A unique JPEG of the moderation policy's known-bad test card
    (:mod:`mediajobs.local.moderation_samples`): its grid, so its perceptual hash is the
    card's, a few pixels of its last row from ``seed``, and :data:`KNOWN_BAD_MARK`."""
    from PIL import Image

    from mediajobs.local.moderation_samples import card

    picture: Image.Image = card("known-bad", size)
    rng = random.Random(seed)
    for _ in range(6):
        level = rng.randrange(256)
        picture.putpixel((rng.randrange(size[0]), size[1] - 1), (level, level, level))
    out = io.BytesIO()
    picture.save(out, "JPEG", quality=85, comment=KNOWN_BAD_MARK)
    return out.getvalue()


def is_known_bad(content: bytes) -> bool:
    """Whether a storm content is one of :func:`known_bad`'s."""
    return KNOWN_BAD_MARK in content[:512]


def plan(cfg: StormConfig) -> tuple[list[Upload], list[bytes]]:
    """The uploads in order and the distinct contents, every choice drawn from ``cfg.seed``
    (a share ``cfg.video_rate`` of the contents are videos: :func:`video`; a share
    ``cfg.reject_rate`` of the images the known-bad card: :func:`known_bad`)."""
    rng = random.Random(cfg.seed)
    copies = round(cfg.uploads * cfg.identical_share)
    uniques = max(1, cfg.uploads - copies)
    videos = random.Random(f"{cfg.seed}-videos")  # its own generator: the other choices stay
    is_video = [cfg.video_rate > 0 and videos.random() < cfg.video_rate for _ in range(uniques)]
    rejects = random.Random(f"{cfg.seed}-rejects")  # its own generator too
    is_bad = [not v and cfg.reject_rate > 0 and rejects.random() < cfg.reject_rate for v in is_video]
    contents = [
        video(cfg.seed * 1_000_003 + i) if v else (known_bad if is_bad[i] else jpeg)(cfg.seed * 1_000_003 + i)
        for i, v in enumerate(is_video)
    ]
    suffix = [".mp4" if v else ".jpg" for v in is_video]
    uploads = [
        Upload(f"originals/storm/{i:05d}{suffix[i]}", i, rng.random() < cfg.checksum_share) for i in range(uniques)
    ]
    # Copies under names S3's events URL-encode (a space, parentheses, "+" and an accent),
    # which the worker must decode to find them.
    for j in range(cfg.uploads - uniques):
        position = rng.randrange(1, len(uploads) + 1)  # after at least one original
        source = rng.randrange(0, min(position, uniques))
        source_index = uploads[source].data_index
        name = f"originals/storm/copy {j:05d} (1)+é{suffix[source_index]}"
        copy = Upload(name, source_index, rng.random() < cfg.checksum_share)
        uploads.insert(position, copy)
    # Chosen here, in upload order, not by the upload threads as they happen to run.
    duplicates = random.Random(cfg.seed + 7)
    for u in uploads:
        u.twice = duplicates.random() < cfg.duplicate_share
    _plan_changes(cfg, uploads, contents)
    return uploads, contents


def _plan_changes(cfg: StormConfig, uploads: list[Upload], contents: list[bytes]) -> None:
    """Insert the overwrites, deletes and re-uploads into ``uploads``, each after the write
    it changes (new contents for overwrites appended to ``contents``)."""
    rng = random.Random(f"{cfg.seed}-changes")
    originals = [u for u in uploads if u.kind == "put"]
    overwrites = round(len(originals) * cfg.overwrite_rate)
    for i, target in enumerate(rng.sample(originals, min(overwrites, len(originals)))):
        contents.append(jpeg(cfg.seed * 1_000_003 + 500_000 + i))
        change = Upload(target.key, len(contents) - 1, target.checksum, kind="overwrite")
        change.late = rng.random() < cfg.late_share
        at = uploads.index(target)
        uploads.insert(rng.randrange(at + 1, len(uploads) + 1), change)
    # Deletes: first the originals whose bytes another key shares (the shared set must stay).
    shared = {u.data_index for u in originals if sum(v.data_index == u.data_index for v in originals) > 1}
    ordered = sorted(originals, key=lambda u: (u.data_index not in shared, rng.random()))
    for j, target in enumerate(ordered[: round(len(originals) * cfg.delete_rate)]):
        at = max(i for i, u in enumerate(uploads) if u.key == target.key)  # after its last write
        position = rng.randrange(at + 1, len(uploads) + 1)
        # A third delete the current version for good (S3 then serves the one before, if
        # any: no event says so); the others create a delete marker.
        kind = "delete_version" if rng.random() < 1 / 3 else "delete"
        uploads.insert(position, Upload(target.key, target.data_index, target.checksum, kind=kind))
        if rng.random() < cfg.reupload_share:
            again = Upload(f"originals/storm/again {j:05d}.jpg", target.data_index, target.checksum, kind="reupload")
            uploads.insert(position + 1, again)
    # Half the overwritten keys later lose their oldest noncurrent version for good (as a
    # lifecycle expiration does): a "Permanently Deleted" of a version the asset no longer
    # shows, which changes nothing an app sees and owes no notification. A generator of its
    # own keeps the other choices of a seed as they were.
    noncurrent = random.Random(f"{cfg.seed}-noncurrent")
    for change in [u for u in uploads if u.kind == "overwrite"]:
        if noncurrent.random() < 0.5:
            at = uploads.index(change)
            drop = Upload(change.key, change.data_index, change.checksum, kind="delete_noncurrent")
            uploads.insert(noncurrent.randrange(at + 1, len(uploads) + 1), drop)


def planned_keys(
    contents: Sequence[bytes], active: Mapping[str, Sequence[Any]], settings: Settings
) -> dict[str, set[str]]:
    """The job keys the active recipes ``active`` plan for ``contents``, by recipe reference,
    under the storm workers' ``settings`` (their policy and key scheme): a rendition's key
    hashes its moderation job's, so it is planned, never a bare ``job_key``."""
    from mediajobs.domain.keys import sha256_hex
    from mediajobs.domain.plan import Where, plan_jobs

    where = Where("storm", "originals/storm", settings.derivatives_prefix, settings.policy_version, settings.keys)
    keys: dict[str, set[str]] = {}
    for content in contents:
        media = "video" if is_video(content) else "image"
        for job in plan_jobs(sha256_hex(content), media, {media: list(active.get(media, ()))}, where):
            keys.setdefault(job.recipe.ref, set()).add(job.key)
    return keys
