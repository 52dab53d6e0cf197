"""What the commands share: the internal error (exit 1), the webhook secret of ``serve``
and ``webhook listen`` (a flag, a file or the environment), and what ``demo`` and
``process`` both do with their files and results (the inputs checked, the key of each
upload, the table of results)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import os
import re
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from mediajobs.domain.errors import REJECTED, TOO_LARGE
from mediajobs.settings import Settings

if TYPE_CHECKING:  # what only demo and process use: not imported by the light commands (status)
    from mediajobs.domain.jobs import JobResult, SourceResult
    from mediajobs.local.session import LocalSession


class InternalError(Exception):
    """Something the user cannot fix happened (exit code 1)."""


#: The environment variable ``mediajobs serve`` and ``mediajobs webhook listen`` read the
#: webhook's signing secret from: unlike a flag, not shown to other users by ``ps``.
WEBHOOK_SECRET_ENV: Final = "MEDIAJOBS_WEBHOOK_SECRET"  # noqa: S105 - a variable's name, not a secret


@dataclasses.dataclass(frozen=True)
class GivenSecret:
    """A webhook secret and where it came from (``--secret-file PATH``,
    ``MEDIAJOBS_WEBHOOK_SECRET``, ``--secret``), for the messages about it."""

    value: str = dataclasses.field(repr=False)
    source: str


def webhook_secret(
    parser: argparse.ArgumentParser,
    *,
    flag: tuple[str, str | None],
    file_flag: tuple[str, str | None],
    environ: Mapping[str, str] | None = None,
) -> GivenSecret | None:
    """The webhook secret given by exactly one of: a file (``file_flag``: its name and the
    path given, the file's text without surrounding whitespace), the environment variable
    :data:`WEBHOOK_SECRET_ENV` (``environ``, default ``os.environ``; empty is unset), or a
    flag (``flag``: its name and value, which ``ps`` shows to every user of the machine).
    ``None`` when none is given. A file that other users may read is used, with a warning
    on stderr.

    Raises
    ------
    SystemExit
        A usage error (``parser.error``, exit 2): two sources given (naming both), or the
        file cannot be read.
    """
    env = os.environ if environ is None else environ
    (flag_name, flag_value), (file_name, path) = flag, file_flag
    given = {
        f"{file_name} {path}": path,
        WEBHOOK_SECRET_ENV: env.get(WEBHOOK_SECRET_ENV) or None,
        flag_name: flag_value,
    }
    sources = [name for name, value in given.items() if value is not None]
    if len(sources) > 1:
        parser.error(f"the webhook secret is given twice, by {' and by '.join(sources)}: give one")
    if not sources:
        return None
    source = sources[0]
    if path is not None:
        try:
            mode = os.stat(path).st_mode
            text = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            parser.error(f"{file_name} {path}: {getattr(exc, 'strerror', None) or exc}")
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            print(
                f"mediajobs: warning: {path} is readable by other users (mode {stat.S_IMODE(mode):o}): chmod 600 it",
                file=sys.stderr,
            )
        return GivenSecret(text, source)
    value = given[source]
    assert value is not None
    return GivenSecret(value.strip(), source)


def safe_name(name: str) -> str:
    """A name for a local folder: letters, digits and ``._-`` only."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100] or "file"


def key_name(name: str) -> str:
    """A file's name as the last part of its object key: as it is (spaces, ``+``, ``%``,
    non-ASCII letters reach S3 and its URL-encoded events unchanged), but for control
    characters and path separators, at most 200 characters."""
    return re.sub(r"[\x00-\x1f\x7f/\\]", "_", name)[:200] or "file"


def sha256_file(path: Path) -> str:
    """The SHA-256 of the file at ``path``, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def human_size(size: int) -> str:
    """``size`` bytes in KB (below 1 MiB) or MB, for a table."""
    return f"{size / 1024:.1f} KB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.2f} MB"


def because(detail: str | None, limit: int = 400) -> str:
    """`` (detail)`` to follow a reason code, empty without one; a detail over ``limit``
    characters is cut at a word, with ``...`` (a refusal's detail names its setting: keep it)."""
    if not detail:
        return ""
    if len(detail) > limit:
        detail = detail[:limit].rsplit(" ", 1)[0] + " ..."
    return f" ({detail})"


def refused_unread(result: SourceResult) -> bool:
    """Whether ``result`` is an input refused by its size before anything read it
    (:meth:`~mediajobs.local.session.LocalSession.upload`): its bytes are not to be read
    here either (no hash, no copy)."""
    return result.reason == TOO_LARGE and not result.bytes_read


def first_result(session: LocalSession, key: str) -> SourceResult:
    """The result of the first delivery of ``key``'s event in ``session``.

    Raises
    ------
    InternalError
        If ``key`` was not processed (its event dead-lettered, or never delivered).
    """
    results = session.collector.results.get(key)
    if not results:
        raise InternalError(f"{key} was not processed (dead-letter queue: {session.dead_letters()} messages)")
    everything = [r for rs in session.collector.results.values() for r in rs]  # a join runs under its first key
    return joined(results[0], everything)


def print_splits(session: LocalSession, keys: list[tuple[str, str]]) -> None:
    """A line for each upload (``(title, key)``) whose video was split: its segments, how
    they were cut, and whether its audio was a part."""
    from mediajobs.domain.jobs import SourceState

    for title, key in keys:
        results = session.collector.results.get(key) or []
        if not results or results[0].state != SourceState.SPLIT:
            continue
        result = first_result(session, key)
        decisions = next((j.decisions for j in result.jobs if j.decisions and "segments" in j.decisions), None)
        if decisions is None:
            print(f"{title}: split, not joined ({result.state})")
            continue
        plan = decisions["segments"]
        cuts = ", ".join(f"{s['start_s']:.2f}" for s in plan["segments"])
        exact = plan["exact_cuts"]
        how = f", {exact} of them between keyframes" if exact else ", every cut on a keyframe"
        audio = " and its audio" if decisions.get("audio") else " (no audio)"
        print(f"{title}: split into {plan['count']} segments (at {cuts} s{how}){audio}, encoded apart; joined")


def joined(first: SourceResult, later: list[SourceResult]) -> SourceResult:
    """``first`` with each job it split (``waiting``), or held for review (``review``, and
    the renditions waiting for it), replaced by how the job's own run ended among ``later``
    (the join's job request, the review's), and its state made what they make: the split
    video's renditions are the upload's, not its parts'. ``first`` when nothing was split
    or held, or nothing of it ended since."""
    from mediajobs.domain.jobs import JobState, SourceState

    if first.state not in (SourceState.SPLIT, SourceState.REVIEW):
        return first
    ended = {j.job_key: j for r in later for j in r.jobs if j.state in (JobState.DONE, JobState.PERMANENT_FAILURE)}
    pending = (JobState.WAITING, JobState.REVIEW)
    jobs = [ended.get(j.job_key, j) if j.state in pending else j for j in first.jobs]
    failed = next((j for j in jobs if j.state == JobState.PERMANENT_FAILURE), None)
    state: SourceState = first.state
    if failed is not None:
        state = SourceState.REJECTED if failed.reason == REJECTED else SourceState.PERMANENT_FAILURE
    elif all(j.state == JobState.DONE for j in jobs):
        state = SourceState.DONE
    reason, detail = (failed.reason, failed.detail) if failed is not None else (None, "")
    return dataclasses.replace(first, state=state, jobs=jobs, reason=reason, detail=detail)


def print_table(rows: list[tuple[str, SourceResult]]) -> None:
    """Print the results table of ``demo`` and ``process``: per original (its title) each
    job's key prefix and each output's size, bytes and the time taken, a moderation job's
    decision, or why it failed."""
    from mediajobs.domain.moderation import moderation_of

    header = f"{'original':<28} {'job key':<12}  {'variant':<7} {'size':>11} {'bytes':>10}  {'time':>7}"
    print(header)
    print("-" * len(header))
    for title, result in rows:
        if not result.jobs:
            print(f"{title[:28]:<28} {'-':<12}  failed: {result.reason}{because(result.detail)}")
            continue
        label = title[:28]
        for job in result.jobs:
            key = job.job_key[:12]
            timing = "reused" if job.reused else f"{job.seconds:.2f} s"
            decision = moderation_of(job.decisions)
            if job.state == "review":
                rule = decision.get("rule") if decision else None
                print(f"{label:<28} {key:<12}  {job.recipe}: held for review ({rule})  {timing}")
            elif job.state == "waiting":
                why = "waits for the review" if result.state == "review" else "split into parts"
                print(f"{label:<28} {key:<12}  {job.recipe}: {why}")
            elif job.state != "done":
                print(f"{label:<28} {key:<12}  {job.recipe} failed: {job.reason}{because(job.detail)}")
            elif decision is not None:
                rule = decision.get("rule") or "no rule fired"
                print(f"{label:<28} {key:<12}  {job.recipe}: {decision.get('outcome')} ({rule})  {timing}")
            elif not job.outputs:  # a step whose result is data (a placeholder): its manifest holds it
                print(f"{label:<28} {key:<12}  {job.recipe}: no files, values in its manifest  {timing}")
            else:
                for i, out in enumerate(job.outputs):
                    first = i == 0
                    print(
                        f"{label if first else '':<28} {key if first else '':<12}  "
                        f"{out.name:<7} {f'{out.width}x{out.height}':>11} {human_size(out.bytes):>10}  "
                        f"{timing if first else '':>7}"
                    )
            label = ""


def renditions(result: SourceResult) -> list[JobResult]:
    """The jobs of ``result`` that render (its moderation job left out)."""
    return [job for job in result.jobs if not is_moderation_ref(job.recipe)]


@functools.cache
def is_moderation_ref(ref: str) -> bool:
    """Whether the recipe ``<id>@<version>`` is a moderation recipe (its step's)."""
    from mediajobs.bootstrap import load_recipe
    from mediajobs.domain.moderation import is_moderation
    from mediajobs.domain.recipes import RecipeError, parse_ref

    try:
        return is_moderation(load_recipe(*parse_ref(ref)).step)
    except RecipeError:
        return False


def checked_inputs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[list[Path], Path]:
    """The input files (``args.files``) and the output folder (``args.out``, created), or a
    usage error (``parser.error``: exit 2): a file that is not there, an ``--out`` that is not
    a folder or cannot be made, an invalid limit in the environment."""
    files = [Path(f) for f in args.files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        parser.error(f"not a readable file: {', '.join(missing)}")
    if not args.out:
        parser.error("--out must name a folder")
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        parser.error(f"--out {args.out} exists and is not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: {exc.strerror or exc}")
    try:
        Settings.from_env()  # limits set in the environment must be valid before anything starts
    except ValueError as exc:
        parser.error(f"invalid setting in the environment: {exc}")
    return files, out_dir
