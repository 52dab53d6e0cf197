"""Runs ffmpeg and ffprobe: argv lists only, never a shell.

Each run starts in its own process group with stdin closed; its stdout is read as
``-progress`` blocks (or collected, for ffprobe's JSON), its stderr is kept as the last
:data:`~mediajobs.domain.video.STDERR_TAIL_BYTES` bytes, and a timeout or an exception in the
progress callback (a lost lease, the invocation's end) kills the whole group.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import platform
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mediajobs.domain.video import STDERR_TAIL_BYTES

#: Where a Lambda layer's ``bin/`` is mounted (AWS Lambda, "Layer paths for each runtime").
LAYER_BIN = Path("/opt/bin")

#: The layer built for this machine by ``make -C layers/ffmpeg local``.
LOCAL_LAYER_BIN = Path(__file__).resolve().parents[3] / "ffmpeg" / "build"


#: Receives each ``-progress`` block as a dict of its ``key=value`` lines.
ProgressSink = Callable[[dict[str, str]], None]


class FfmpegMissing(RuntimeError):
    """Neither the layer, a local layer build, nor an ffmpeg on PATH was found."""


class FfmpegTimeout(RuntimeError):
    """A run exceeded its timeout; its process group was killed."""


def _machine() -> str:
    return {"aarch64": "arm64", "arm64": "arm64", "x86_64": "x86_64", "amd64": "x86_64"}.get(
        platform.machine().lower(), platform.machine()
    )


@dataclass(frozen=True)
class Binaries:
    """Paths of ``ffmpeg`` and ``ffprobe``, and where they came from (``layer``, ``local build``, ``PATH``)."""

    ffmpeg: str
    ffprobe: str
    origin: str


@functools.cache
def find_binaries() -> Binaries:
    """Locate ffmpeg and ffprobe, first found wins:

    1. ``MEDIAJOBS_FFMPEG_DIR`` (a folder holding both); when it is set, nowhere else;
    2. the Lambda layer, ``/opt/bin``;
    3. the layer built for this machine, ``layers/ffmpeg/build/<arch>/bin``;
    4. ``PATH`` (Debian's ``ffmpeg`` package).

    Raises
    ------
    FfmpegMissing
        If none has both programs.
    """
    if env := os.environ.get("MEDIAJOBS_FFMPEG_DIR"):
        candidates = [(Path(env), "MEDIAJOBS_FFMPEG_DIR")]
    else:
        candidates = [(LAYER_BIN, "layer"), (LOCAL_LAYER_BIN / _machine() / "bin", "local layer build")]
    for folder, origin in candidates:
        ffmpeg, ffprobe = folder / "ffmpeg", folder / "ffprobe"
        if os.access(ffmpeg, os.X_OK) and os.access(ffprobe, os.X_OK):
            return Binaries(str(ffmpeg), str(ffprobe), origin)
    if env:
        raise FfmpegMissing(f"MEDIAJOBS_FFMPEG_DIR={env} holds no executable ffmpeg and ffprobe")
    ffmpeg_path, ffprobe_path = shutil.which("ffmpeg"), shutil.which("ffprobe")
    if ffmpeg_path and ffprobe_path:
        return Binaries(ffmpeg_path, ffprobe_path, "PATH")
    raise FfmpegMissing(
        "ffmpeg/ffprobe not found: build the layer for this machine (make -C layers/ffmpeg local), "
        "install Debian's ffmpeg (apt-get install ffmpeg), or set MEDIAJOBS_FFMPEG_DIR"
    )


@dataclass(frozen=True)
class Completed:
    """A finished run: exit code (negative: killed by that signal), stdout (empty when progress
    was read from it), and the last bytes of stderr, decoded leniently."""

    returncode: int
    stdout: bytes
    stderr_tail: str


def _keep_tail(stream: IO[bytes], tail: collections.deque[bytes]) -> None:
    """Read ``stream`` to its end keeping only its last bytes (ring of chunks)."""
    kept = 0
    for chunk in iter(lambda: stream.read(4096), b""):
        tail.append(chunk)
        kept += len(chunk)
        while kept - len(tail[0]) >= STDERR_TAIL_BYTES:
            kept -= len(tail.popleft())


def _read_progress(stream: IO[bytes], on_progress: ProgressSink) -> None:
    """Call ``on_progress`` with each ``-progress`` block (``key=value`` lines ending ``progress=...``)."""
    block: dict[str, str] = {}
    for raw in stream:
        key, _, value = raw.decode("utf-8", "replace").strip().partition("=")
        block[key] = value
        if key == "progress":
            on_progress(block)
            block = {}


def run(
    argv: list[str],
    *,
    timeout_s: float,
    on_progress: ProgressSink | None = None,
    cwd: Path | None = None,
) -> Completed:
    """Run ``argv`` (a list; ``shell`` is never used) and wait for it.

    Parameters
    ----------
    argv: program and arguments, each a separate string.
    timeout_s: wall-clock limit, seconds; the process group is killed when it passes.
    on_progress: called with each ``-progress pipe:1`` block read from stdout; an exception
        it raises kills the process group and propagates. Without it stdout is collected.
    cwd: working folder of the process.

    Raises
    ------
    FfmpegTimeout
        When ``timeout_s`` passed; the group was killed.
    """
    proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        start_new_session=True,  # its own process group: a kill reaches every child
    )
    assert proc.stdout is not None and proc.stderr is not None
    tail: collections.deque[bytes] = collections.deque()
    stderr_reader = threading.Thread(target=_keep_tail, args=(proc.stderr, tail), daemon=True)
    stderr_reader.start()
    timed_out = threading.Event()

    def kill() -> None:
        if proc.poll() is None:
            timed_out.set()
            _kill_group(proc)

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    timer.start()
    stdout = b""
    try:
        if on_progress is None:
            stdout = proc.stdout.read()
        else:
            _read_progress(proc.stdout, on_progress)
        proc.wait()
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        timer.cancel()
        stderr_reader.join()
        proc.stdout.close()
        proc.stderr.close()
    if timed_out.is_set():
        raise FfmpegTimeout(f"{Path(argv[0]).name} killed after {timeout_s:.0f} s")
    return Completed(proc.returncode, stdout, b"".join(tail)[-STDERR_TAIL_BYTES:].decode("utf-8", "replace"))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


@functools.cache
def version(binary: str) -> str:
    """First line of ``<binary> -version`` (``ffmpeg version 7.0.2-static ...``)."""
    completed = run([binary, "-hide_banner", "-version"], timeout_s=30)
    return completed.stdout.decode("utf-8", "replace").splitlines()[0] if completed.stdout else ""
