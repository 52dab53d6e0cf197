"""Runs ffmpeg and ffprobe: argv lists only, never a shell.

Each run starts in its own process group with stdin closed; its stdout is read as
``-progress`` blocks (or collected, for ffprobe's JSON), its stderr is kept as the last
:data:`~mediajobs.domain.video.STDERR_TAIL_BYTES` bytes, and a timeout or an exception in the
progress callback (a lost lease, the invocation's end) kills the whole group.

The ffmpeg layer carries ffprobe xz-compressed (``bin/ffprobe.xz``, with its SHA-256 in
``bin/ffprobe.sha256``: ``layers/ffmpeg/README.md``): :func:`find_binaries` unpacks it into
``/tmp`` the first time a video needs it, once per sandbox, never at import or cold start.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import tempfile
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

#: A packed ffprobe in a ``bin/`` folder (the ffmpeg layer as ``sam build`` makes it), and the
#: SHA-256 of the program it unpacks to (``sha256sum`` format: ``<hex>  ffprobe``).
PACKED_FFPROBE = "ffprobe.xz"
PACKED_FFPROBE_SHA256 = "ffprobe.sha256"

#: The folder under the temporary directory (``/tmp`` in Lambda) that a packed ffprobe is
#: unpacked into. Not named ``mediajobs-*``, the work folders that the cold start removes
#: when a dead worker left them (:func:`mediajobs.service_layer.pipeline.remove_work_folders`).
UNPACK_DIR_NAME = "mediajobs.bin"

_CHUNK_BYTES = 1 << 20


#: Receives each ``-progress`` block as a dict of its ``key=value`` lines.
ProgressSink = Callable[[dict[str, str]], None]


class FfmpegMissing(RuntimeError):
    """Neither the layer, a local layer build, nor an ffmpeg on PATH was found."""


class FfmpegUnpackFailed(FfmpegMissing):
    """A packed ffprobe could not be unpacked: a damaged ``.xz``, a checksum that does not
    match, or an unpack folder that is not safe to run programs from."""


class FfmpegTimeout(RuntimeError):
    """A run exceeded its timeout; its process group was killed."""


def _machine() -> str:
    return {"aarch64": "arm64", "arm64": "arm64", "x86_64": "x86_64", "amd64": "x86_64"}.get(
        platform.machine().lower(), platform.machine()
    )


@dataclass(frozen=True)
class Binaries:
    """Paths of ``ffmpeg`` and ``ffprobe``, and where they came from (``layer``, ``local build``, ``PATH``).

    ``unpacked_bytes`` is what the programs take in the temporary folder, bytes: the size of an
    ffprobe unpacked from the layer, 0 when both run from where they were found.
    """

    ffmpeg: str
    ffprobe: str
    origin: str
    unpacked_bytes: int = 0


def default_unpack_dir() -> Path:
    """Where a packed ffprobe is unpacked: :data:`UNPACK_DIR_NAME` in the temporary directory
    (``/tmp`` in Lambda, the only writable place; ``TMPDIR`` elsewhere)."""
    return Path(tempfile.gettempdir()) / UNPACK_DIR_NAME


@functools.cache
def find_binaries() -> Binaries:
    """Locate ffmpeg and ffprobe, first found wins:

    1. ``MEDIAJOBS_FFMPEG_DIR`` (a folder holding both); when it is set, nowhere else;
    2. the Lambda layer, ``/opt/bin``;
    3. the layer built for this machine, ``layers/ffmpeg/build/<arch>/bin``;
    4. ``PATH`` (Debian's ``ffmpeg`` package).

    In a folder, ffprobe is an executable ``ffprobe`` or, as the ffmpeg layer ships it, a
    packed ``ffprobe.xz``, unpacked by :func:`unpack_ffprobe` into :func:`default_unpack_dir`
    (about 1.2 s for the 79 MB x86_64 ffprobe; an earlier unpack that still checks out is
    reused). Called at the first video, never at import: image-only work never pays for it.

    Raises
    ------
    FfmpegMissing
        If none has both programs.
    FfmpegUnpackFailed
        If a packed ffprobe was found but could not be unpacked.
    """
    return locate_binaries(os.environ.get("MEDIAJOBS_FFMPEG_DIR"))


def locate_binaries(
    env_dir: str | None,
    *,
    layer_bin: Path = LAYER_BIN,
    local_bin: Path | None = None,
    unpack_dir: Path | None = None,
    search_path: bool = True,
) -> Binaries:
    """:func:`find_binaries` without its cache, each place a parameter (tests pass their own).

    Parameters
    ----------
    env_dir: the folder ``MEDIAJOBS_FFMPEG_DIR`` names; when given, the only place looked.
    layer_bin: the Lambda layer's ``bin/`` (:data:`LAYER_BIN`).
    local_bin: the local layer build's ``bin/``; ``layers/ffmpeg/build/<this machine>/bin`` by default.
    unpack_dir: where a packed ffprobe is unpacked; :func:`default_unpack_dir` by default.
    search_path: whether ``PATH`` is the last place looked.

    Raises
    ------
    FfmpegMissing, FfmpegUnpackFailed
        As :func:`find_binaries`.
    """
    if env_dir:
        candidates = [(Path(env_dir), "MEDIAJOBS_FFMPEG_DIR")]
    else:
        local = local_bin if local_bin is not None else LOCAL_LAYER_BIN / _machine() / "bin"
        candidates = [(layer_bin, "layer"), (local, "local layer build")]
    for folder, origin in candidates:
        if found := binaries_in(folder, origin, unpack_dir=unpack_dir or default_unpack_dir()):
            return found
    if env_dir:
        raise FfmpegMissing(f"MEDIAJOBS_FFMPEG_DIR={env_dir} holds no executable ffmpeg and ffprobe")
    if search_path:
        ffmpeg_path, ffprobe_path = shutil.which("ffmpeg"), shutil.which("ffprobe")
        if ffmpeg_path and ffprobe_path:
            return Binaries(ffmpeg_path, ffprobe_path, "PATH")
    raise FfmpegMissing(
        "ffmpeg/ffprobe not found: build the layer for this machine (make -C layers/ffmpeg local), "
        "install Debian's ffmpeg (apt-get install ffmpeg), or set MEDIAJOBS_FFMPEG_DIR"
    )


def binaries_in(folder: Path, origin: str, *, unpack_dir: Path) -> Binaries | None:
    """The ffmpeg and ffprobe of ``folder``, or ``None`` when it lacks one of them.

    ffprobe is an executable ``ffprobe``, else a packed :data:`PACKED_FFPROBE` with its
    :data:`PACKED_FFPROBE_SHA256`, unpacked into ``unpack_dir`` (:func:`unpack_ffprobe`).

    Raises
    ------
    FfmpegUnpackFailed
        If the packed ffprobe has no valid checksum file or cannot be unpacked.
    """
    ffmpeg, ffprobe = folder / "ffmpeg", folder / "ffprobe"
    if not os.access(ffmpeg, os.X_OK):
        return None
    if os.access(ffprobe, os.X_OK):
        return Binaries(str(ffmpeg), str(ffprobe), origin)
    packed = folder / PACKED_FFPROBE
    if not packed.is_file():
        return None
    unpacked = unpack_ffprobe(packed, read_sha256(folder / PACKED_FFPROBE_SHA256), unpack_dir)
    return Binaries(str(ffmpeg), str(unpacked), origin, unpacked_bytes=unpacked.stat().st_size)


def read_sha256(path: Path) -> str:
    """The hex SHA-256 that ``path`` holds (``sha256sum`` format: ``<hex>  <name>``).

    Raises
    ------
    FfmpegUnpackFailed
        If the file is missing or does not start with 64 hex digits.
    """
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise FfmpegUnpackFailed(f"{path}: {exc.strerror}: a packed ffprobe needs its SHA-256") from exc
    match = re.match(r"([0-9a-f]{64})(\s|$)", text)
    if not match:
        raise FfmpegUnpackFailed(f"{path} holds no SHA-256 (64 hex digits)")
    return match.group(1)


def unpack_ffprobe(packed: Path, sha256_hex: str, dest_dir: Path) -> Path:
    """Unpack the xz file ``packed`` to ``dest_dir/ffprobe``, or reuse an earlier unpack.

    An ``ffprobe`` already in ``dest_dir`` is reused when it is executable and its SHA-256 is
    ``sha256_hex`` (an unpack of this sandbox's earlier process; hashing 79 MB took 0.06 s here).
    Otherwise the file is unpacked under a temporary name in ``dest_dir``, checked against
    ``sha256_hex``, made executable (0700) and renamed into place, so no process ever sees
    a partial or unchecked program, and concurrent unpacks end with the same file.
    ``dest_dir`` is created (0700) if needed and must belong to this user and be writable by
    no one else, since the program is run from there.

    Parameters
    ----------
    packed: the ``.xz`` file (``/opt/bin/ffprobe.xz`` in Lambda).
    sha256_hex: SHA-256 of the unpacked program, lower-case hex.
    dest_dir: folder to unpack into (``/tmp/mediajobs.bin`` in Lambda).

    Returns
    -------
    Path
        The executable ``dest_dir/ffprobe``.

    Raises
    ------
    FfmpegUnpackFailed
        If ``packed`` is not valid xz, unpacks to other bytes than ``sha256_hex`` says, or
        ``dest_dir`` is not safe.
    OSError
        If the disk is full or ``dest_dir`` cannot be written (a transient failure).
    """
    _safe_dir(dest_dir)
    import fcntl

    with open(dest_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one unpack at a time; a waiting one then reuses it
        return _unpack_locked(packed, sha256_hex, dest_dir)


def _unpack_locked(packed: Path, sha256_hex: str, dest_dir: Path) -> Path:
    target = dest_dir / "ffprobe"
    if os.access(target, os.X_OK) and _sha256_of(target) == sha256_hex:
        return target
    # Left by an unpack that was killed (SIGKILL, out of memory) before it could clean up:
    # under the lock no other unpack is running, so none of these is in use.
    for leftover in dest_dir.glob(".ffprobe.*"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    import lzma  # only on the video path, the first time

    fd, tmp = tempfile.mkstemp(prefix=".ffprobe.", dir=dest_dir)
    try:
        digest = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as out, lzma.open(packed, "rb") as src:
                for chunk in iter(lambda: src.read(_CHUNK_BYTES), b""):
                    digest.update(chunk)
                    out.write(chunk)
        except (lzma.LZMAError, EOFError) as exc:
            raise FfmpegUnpackFailed(f"{packed} is not a valid xz file: {exc}") from exc
        if digest.hexdigest() != sha256_hex:
            raise FfmpegUnpackFailed(f"{packed} unpacks to SHA-256 {digest.hexdigest()}, not {sha256_hex}")
        os.chmod(tmp, 0o700)  # run by this user only, from a folder only it can enter
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


def unpacked_bytes_on(binaries: Binaries, folder: Path) -> int:
    """What ``binaries`` take on the disk of ``folder``, bytes: their ``unpacked_bytes`` when the
    unpacked ffprobe is on that disk (the same device), else 0."""
    if not binaries.unpacked_bytes:
        return 0
    try:
        same = os.stat(binaries.ffprobe).st_dev == os.stat(folder).st_dev
    except OSError:
        return 0
    return binaries.unpacked_bytes if same else 0


def _safe_dir(folder: Path) -> None:
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError as exc:  # a file or a (dangling) symlink stands there
        raise FfmpegUnpackFailed(f"{folder} is not a folder of this user that others cannot write to") from exc
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise FfmpegUnpackFailed(f"{folder} is not a folder of this user that others cannot write to")


def _sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


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
    _STARTING.depth += 1  # a stop signal now is kept (defer_stop) until the group can be killed
    try:
        proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,  # its own process group: a kill reaches every child
        )
    finally:
        _STARTING.depth -= 1
    pending, _STARTING.pending = _STARTING.pending, None
    # From here on, anything raised (a SIGTERM unwinding the CLI included, even while the
    # reader thread starts) kills the group: a stop that came before the try left ffmpeg
    # running (tests/functional/test_cli.py's SIGTERM test, under load), and one that came
    # while Popen ran lost its pid (it is raised here, once the group is known).
    stderr_reader: threading.Thread | None = None
    timer: threading.Timer | None = None
    timed_out = threading.Event()
    tail: collections.deque[bytes] = collections.deque()
    stdout = b""
    try:
        if pending is not None:
            pending()
        assert proc.stdout is not None and proc.stderr is not None
        stderr_reader = threading.Thread(target=_keep_tail, args=(proc.stderr, tail), daemon=True)
        stderr_reader.start()

        def kill() -> None:
            if proc.poll() is None:
                timed_out.set()
                _kill_group(proc)

        timer = threading.Timer(timeout_s, kill)
        timer.daemon = True
        timer.start()
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
        if timer is not None:
            timer.cancel()
        if stderr_reader is not None:
            stderr_reader.join()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    if timed_out.is_set():
        raise FfmpegTimeout(f"{Path(argv[0]).name} killed after {timeout_s:.0f} s")
    return Completed(proc.returncode, stdout, b"".join(tail)[-STDERR_TAIL_BYTES:].decode("utf-8", "replace"))


class _Starting:
    """Whether a process is being started (``depth``), and the stop a signal handler asked
    for meanwhile (``pending``: what raises it), for :func:`defer_stop`."""

    depth = 0
    pending: Callable[[], None] | None = None


_STARTING = _Starting()


def defer_stop(stop: Callable[[], None]) -> bool:
    """For a signal handler that stops the process by raising (the CLI's SIGTERM): while a
    process group is being started (inside ``subprocess.Popen``, whose pid an exception
    raised there would lose, leaving ffmpeg running), keep ``stop`` -- :func:`run` calls it
    once the group can be killed -- and return ``True``; otherwise ``False`` (stop now)."""
    if _STARTING.depth:
        _STARTING.pending = stop
        return True
    return False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


@functools.cache
def version(binary: str) -> str:
    """First line of ``<binary> -version`` (``ffmpeg version 7.0.2-static ...``)."""
    completed = run([binary, "-hide_banner", "-version"], timeout_s=30)
    return completed.stdout.decode("utf-8", "replace").splitlines()[0] if completed.stdout else ""


def main() -> int:
    """``python -m mediajobs.adapters.ffmpeg``: print which ffmpeg and ffprobe the product uses
    (as :func:`find_binaries` finds them); exit 1 with the reason when there are none."""
    import sys

    try:
        found = find_binaries()
    except FfmpegMissing as exc:
        print(f"ffmpeg: {exc}", file=sys.stderr)
        return 1
    print(f"ffmpeg: {found.ffmpeg} and {found.ffprobe} ({found.origin})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
