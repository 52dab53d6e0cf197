"""A recipe step run in a child process under an address-space limit (the bounded render).

Why: the decoders allocate what the coded data asks for, not what the container's header
declares (an AVIF ``ispe`` over a larger AV1 frame, a HEIC grid whose tiles outgrow it), so
no header check can bound a decode. In the worker's own process a decode that takes the
function's memory kills the invocation (Lambda: ``Runtime.OutOfMemory``) with every record
of its batch, on every delivery. In a child it can only fail, and the outcome is a
permanent failure naming the budget.

How, in order:

1. On a thread's first render the parent starts the thread's **zygote** (a fork server):
   ``sys.executable -P -s -m mediajobs.adapters.isolated_child --zygote`` with
   :mod:`subprocess`: no shell, and the argv holds no user string; its stdin is its end of
   a Unix socketpair. Not :mod:`multiprocessing`: its queues and pools need ``/dev/shm``,
   which Lambda lacks. The zygote's ``sys.path`` is the parent's (``PYTHONPATH``): the same
   package and wheels, ``/opt/python`` in Lambda. ``-P`` keeps the working folder off it.
   One zygote per thread (:func:`_zygote`): ``PR_SET_PDEATHSIG`` fires when the *thread*
   that started a process ends (``prctl(2)``), so only that thread may use it.
2. Per render the parent writes the request (paths, the step's parameters, the inner
   step's factory and options) to a temporary file and passes it, and two temporary files
   for stdout and stderr, to the zygote as descriptors (``SCM_RIGHTS``,
   :func:`socket.send_fds`). The zygote imports the step's module, the modules its class
   names in ``child_imports`` and Pillow's plugins (the layer's code, not the input) once,
   then forks with :func:`os.fork`: it is single-threaded (it checks, and NumPy's OpenBLAS
   is held to one thread), so the fork is safe; the parent, which has threads (the lease
   heartbeat, boto3's transfer threads), never forks. The render child calls ``setsid``,
   takes the files as 0/1/2 and closes every other descriptor.
3. The render child builds the step, reads its own ``VmSize`` and sets ``RLIMIT_AS`` (soft
   and hard) to that plus the budget, and only then opens the input. So the budget is
   exactly what the input can make the child add, on any architecture or Python (the
   baseline is about 60 MB on x86_64 with Python 3.11 here, another figure on arm64). The
   limit is not set from the parent with ``preexec_fn``: that runs between fork and exec in
   a process with threads, where Python documents it as unsafe; nor in the zygote, which
   must stay unbounded to fork the next child.
4. ``MALLOC_ARENA_MAX=2`` in the zygote and so in every child: glibc reserves a 64 MB heap
   arena per thread (up to 8 per core) as address space that is never touched; with it the
   iPhone HEIC of the tests peaks at 248 MB of address space instead of 689 MB, for the
   same 134-141 MB RSS.
5. The zygote's environment is an allow-list (:data:`PASSED_ENVIRONMENT`), and a forked
   child has the zygote's: no AWS credentials in its own environment, so a decoder that
   fails in a hostile way does not hand them to whatever it runs. It is not a sandbox: the
   child runs as the worker's user, and such a user may read the worker's
   ``/proc/<pid>/environ`` (proc(5); the one-shot child could too), where Lambda puts the
   role's credentials. Each asks the kernel to kill it with its parent
   (``PR_SET_PDEATHSIG``: the zygote with the worker's thread, a render child with the
   zygote), so neither outlives a worker that Lambda stops at its timeout.
6. The zygote answers the child's pid, waits for it and answers its exit status (negative:
   the signal, as :class:`subprocess.Popen`). The parent waits for that status at most the
   time left (:class:`~mediajobs.domain.jobs.RenderContext`'s ``remaining_s`` less the
   margin, else ``timeout_s``, which :func:`mediajobs.bootstrap.steps` sets to the
   function's timeout less the margin), then kills the child and its process group and
   takes the status the zygote then sends (at most :data:`KILLED_CHILD_WAIT_S` more).
7. A zygote that is gone or answers anything else is killed and replaced: before it named
   the child (no render ran: a child it forked dies with it) the render is asked once more
   of a fresh zygote, and a second failure is a :class:`TransientFailure`; during the
   render, the render is a :class:`TransientFailure` (it may have run; the ledger's
   attempts bound the retries). Every wait has a bound.

``IsolatedStep(zygote=False)`` starts a fresh interpreter per render instead
(``python -P -s -m mediajobs.adapters.isolated_child``, with the request on stdin; steps 3
to 5 and the outcomes are the same): the comparison the benchmark makes.

Outcomes (:func:`interpret` applies them in this order):

===============================================  ==========================================
what the child did                               outcome
===============================================  ==========================================
killed by the parent at the deadline             :class:`DeadlineReached` (transient: the
                                                 service releases the claim at once and the
                                                 message comes back; a render that never
                                                 fits ends ``attempts_exhausted``)
reported files and decisions                     the files (each must be a regular file
                                                 directly in ``out_dir``), the decisions
reported a :class:`PermanentFailure`             the same reason and detail;
                                                 ``memory_limit_exceeded`` names the budget
reported ``MemoryError``                         ``memory_limit_exceeded``
reported another exception with its address      ``memory_limit_exceeded``: codecs report
space past half its budget                       a failed allocation in their own words
                                                 (:data:`NEAR_THE_LIMIT_SHARE`)
reported another exception                       :class:`TransientFailure`, as the service
                                                 treats it from an in-process renderer
died by a signal after its limit was set         ``memory_limit_exceeded``: a C++ decoder
(no report)                                      aborts on ``std::bad_alloc``, a C one may
                                                 crash on a NULL it did not check, and
                                                 SIGKILL is the kernel's OOM killer. The
                                                 same bytes under the same limit die the
                                                 same way, so a retry cannot help; the
                                                 detail gives the signal and the child's
                                                 last stderr lines
exited after its limit was set, no report        ``memory_limit_exceeded`` when its stderr
                                                 names an allocation failure (glibc's
                                                 loader exits 127 when a thread's TLS
                                                 cannot be mapped), else
                                                 :class:`TransientFailure`: unexplained, so
                                                 retried, and bounded by the ledger's
                                                 attempts (``attempts_exhausted``)
exited or died before its limit was set          :class:`TransientFailure`: the deployment
                                                 (an import, the interpreter), not the input
===============================================  ==========================================

A decoder that reports a failed allocation as a generic error (libavif's "Decoding of color
planes failed" when dav1d cannot allocate a frame) keeps that error's reason
(``corrupt_image``); the structural checks before decoding name such headers.

Cost: one interpreter start and the imports per worker thread that renders (per Lambda
execution environment, about 0.3 s of CPU and 40 MB of RSS kept for the zygote), then one
fork and the render per original: a few milliseconds of CPU over the render in-process
(``benchmarks/isolation_overhead.py``), instead of an interpreter start and the imports per
original (``benchmarks/peak_memory.py`` measures the peaks).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Final, TypedDict

from pydantic import BaseModel

from mediajobs.domain.errors import (
    MEMORY_LIMIT_EXCEEDED,
    REASON_CODES,
    DeadlineReached,
    PermanentFailure,
    TransientFailure,
)
from mediajobs.domain.jobs import RenderContext, RenderedFile
from mediajobs.service_layer.ports import StepResult

log = logging.getLogger(__name__)

MB: Final = 1024 * 1024
#: The child's entry point (``python -m``).
CHILD_MODULE: Final = "mediajobs.adapters.isolated_child"
#: Variables the child inherits when the parent has them; every other one is dropped
#: (AWS credentials included). ``LD_LIBRARY_PATH`` carries Lambda's ``/var/lang/lib``,
#: where its python finds libpython.
PASSED_ENVIRONMENT: Final = ("PATH", "LD_LIBRARY_PATH", "PYTHONHOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
#: glibc malloc arenas in the child (``mallopt(3)``, ``M_ARENA_MAX``): see the module docstring.
MALLOC_ARENA_MAX: Final = "2"
#: OpenBLAS threads (NumPy's, where it is installed: ``thash`` imports it): one, so that
#: importing NumPy in the zygote starts no thread and the zygote can fork.
OPENBLAS_NUM_THREADS: Final = "1"
#: How long the worker waits for the zygote's answer once it has killed a render child, seconds;
#: past it the zygote is taken for broken and replaced. A zygote that works answers within
#: milliseconds; the wait must stay well inside the invocation's margin (10 s by default,
#: ``Settings.deadline_margin_s``), or a stopped zygote would use it up.
KILLED_CHILD_WAIT_S: Final = 2.0
#: Longest answer line the worker reads from a zygote, bytes.
MAX_ANSWER_BYTES: Final = 4096
#: What the parent reads of the child's report channel and of its stderr, bytes.
MAX_REPORT_BYTES: Final = 1 * MB
STDERR_TAIL_BYTES: Final = 2000
#: Words (any case) in a child's stderr that mean an allocation failed: C++
#: ``std::bad_alloc``; ``std::system_error`` "Resource temporarily unavailable" when a
#: thread's stack cannot be mapped; glibc's strerror(ENOMEM) and its loader's "cannot
#: allocate memory for thread-local data"; CPython's ``MemoryError`` and "out of memory".
ALLOCATION_FAILURE_WORDS: Final = (
    "bad_alloc",
    "resource temporarily unavailable",
    "cannot allocate memory",
    "memoryerror",
    "out of memory",
)


class RenderRequest(TypedDict):
    """What the parent sends the child on stdin (one JSON document)."""

    factory: str
    options: dict[str, Any]
    source: str
    out_dir: str
    params: dict[str, Any]
    memory_budget_bytes: int
    parent_pid: int


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """How the child builds the inner step: ``factory(**options)``.

    Attributes
    ----------
    factory: ``"package.module:name"`` of a class implementing the
        :class:`~mediajobs.service_layer.ports.Step` port (its ``name`` and ``params_model``
        class attributes are read in the parent), importable from the parent's
        ``sys.path`` (``"mediajobs.steps.image_variants:ImageVariantsStep"``).
    options: its keyword arguments, JSON values (``{"max_pixels": 50_000_000}``).

    Raises
    ------
    ValueError
        If ``factory`` is not ``module:name`` or ``options`` is not JSON.
    """

    factory: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        module, _, name = self.factory.partition(":")
        if not module or not name.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
            raise ValueError(f"factory must be 'package.module:name', got {self.factory!r}")
        json.dumps(dict(self.options))  # TypeError/ValueError now, not in the child


@dataclasses.dataclass(frozen=True)
class ChildExit:
    """How a render child ended, as the parent saw it.

    Attributes
    ----------
    returncode: the exit status; negative: killed by that signal (:class:`subprocess.Popen`).
    timed_out: the parent killed it at the deadline.
    reports: the JSON objects it wrote on its report channel, in order (``ready`` first).
    stderr_tail: the end of its stderr (at most :data:`STDERR_TAIL_BYTES`).
    """

    returncode: int
    timed_out: bool
    reports: tuple[dict[str, Any], ...]
    stderr_tail: str


def budget_text(budget_bytes: int, limit_bytes: int | None = None) -> str:
    """``"the decode memory budget of 1536 MB"`` (with the address-space limit, when known)."""
    text = f"the decode memory budget of {budget_bytes // MB} MB"
    if limit_bytes:
        text += f" (address-space limit {limit_bytes // MB} MB)"
    return text


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _names_allocation_failure(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in ALLOCATION_FAILURE_WORDS)


def _stderr_summary(text: str) -> str:
    """The telling lines of a child's stderr: those naming an allocation failure or a fatal
    error (faulthandler's dump follows them), else its last three."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    telling = [line for line in lines if _names_allocation_failure(line) or line.startswith("Fatal Python error")]
    return " | ".join(telling[:3] if telling else lines[-3:])


def _rendered(entry: dict[str, Any], out_dir: Path) -> RenderedFile:
    """A reported file, accepted only as a regular file directly in ``out_dir``: a child
    taken over by a hostile file must not name ``/proc/<parent>/environ`` (or a symlink to
    it) as an output to upload."""
    path = Path(entry["path"])
    if path.parent != out_dir or not path.is_file() or path.is_symlink():
        raise TransientFailure(f"render child reported an output outside {out_dir}: {path}")
    return RenderedFile(
        name=str(entry["name"]),
        format=str(entry["format"]),
        path=path,
        width=int(entry["width"]),
        height=int(entry["height"]),
        bytes=int(entry["bytes"]),
        sha256=str(entry["sha256"]),
        content_type=str(entry["content_type"]),
    )


#: Share of the budget (above the child's baseline) that a render's address space must have
#: reached for an unexplained error to count as the budget's. Codecs report a failed
#: allocation in their own words (libaom under libavif: "Encoding of color planes failed",
#: measured with an 8 MP JPEG under a 60 MB budget), and a render that failed after taking
#: most of its budget fails the same way on every retry; one that failed early did not run
#: out (disk full, a bug) and is retried.
NEAR_THE_LIMIT_SHARE: Final = 0.5


def _near_the_limit(peak: dict[str, Any], ready: dict[str, Any]) -> bool:
    """Whether the child's peak address space (``peak_vm_mb``) reached
    :data:`NEAR_THE_LIMIT_SHARE` of its budget above its baseline."""
    try:
        baseline, limit = int(ready["baseline_bytes"]), int(ready["limit_bytes"])
        peak_bytes = float(peak["peak_vm_mb"]) * 2**20
    except (KeyError, TypeError, ValueError):
        return False
    return limit > baseline and peak_bytes - baseline >= NEAR_THE_LIMIT_SHARE * (limit - baseline)


def interpret(exit_: ChildExit, *, out_dir: Path, budget_bytes: int, waited_s: float = 0.0) -> StepResult:
    """The render's result from how its child ended (the table of the module docstring). Pure
    but for checking that the reported files exist.

    Parameters
    ----------
    exit_: what the parent saw.
    out_dir: the folder the outputs must be in.
    budget_bytes: the decode memory budget the child ran under.
    waited_s: how long the parent waited, seconds (for a deadline's message).

    Returns
    -------
    StepResult
        The files and decisions, when the child reported them.

    Raises
    ------
    PermanentFailure
        The child's own, or ``memory_limit_exceeded``.
    DeadlineReached
        When the parent killed it at the deadline.
    TransientFailure
        When it failed for a reason that is not the input's.
    """
    if exit_.timed_out:
        raise DeadlineReached(f"image render stopped after {waited_s:.1f} s: the invocation's time is up")
    ready = next((r for r in exit_.reports if r.get("event") == "ready"), None)
    final = next((r for r in reversed(exit_.reports) if r.get("event") != "ready"), None)
    limit = int(ready["limit_bytes"]) if ready else None
    budget = budget_text(budget_bytes, limit)
    if final is not None:
        event = final.get("event")
        try:
            if event == "done":
                files = [_rendered(entry, out_dir) for entry in final["files"]]
                decisions = final["decisions"]
                if not isinstance(decisions, dict):
                    raise TypeError(f"decisions are {type(decisions).__name__}, not an object")
                cpu = final.get("cpu_s")
                return StepResult(files, decisions, cpu_s=float(cpu) if isinstance(cpu, int | float) else None)
            if event == "failed" and final.get("reason") in REASON_CODES:
                reason, detail = str(final["reason"]), str(final.get("detail", ""))
                if reason == MEMORY_LIMIT_EXCEEDED:
                    detail = f"decoding needed more than {budget}: {detail}"
                raise PermanentFailure(reason, detail)
            if event == "memory":
                raise PermanentFailure(
                    MEMORY_LIMIT_EXCEEDED, f"decoding needed more than {budget}: {final.get('detail', 'MemoryError')}"
                )
            if event == "error":
                error = f"{final.get('type')}: {final.get('message')}"
                if ready is not None and _near_the_limit(final.get("peak") or {}, ready):
                    raise PermanentFailure(
                        MEMORY_LIMIT_EXCEEDED,
                        f"decoding needed more than {budget}: the render failed with its address space at "
                        f"{final['peak']['peak_vm_mb']} MB: {error}",
                    )
                raise TransientFailure(f"render child: {error}")
        except (KeyError, TypeError, ValueError) as exc:
            raise TransientFailure(f"render child sent an unreadable report ({exc!r}): {final!r:.300}") from exc
        raise TransientFailure(f"render child sent an unknown report: {final!r:.300}")
    stderr = _stderr_summary(exit_.stderr_tail)
    if ready is None:
        raise TransientFailure(f"render child ended before rendering (status {exit_.returncode}): {stderr}")
    if exit_.returncode < 0:
        name = _signal_name(-exit_.returncode)
        known = _names_allocation_failure(exit_.stderr_tail)
        why = "" if known else " (no allocation failure reported: it may also be a decoder crash on this file)"
        raise PermanentFailure(
            MEMORY_LIMIT_EXCEEDED,
            f"the decoder died by {name} under {budget}{why}" + (f": {stderr}" if stderr else ""),
        )
    if _names_allocation_failure(exit_.stderr_tail):
        raise PermanentFailure(
            MEMORY_LIMIT_EXCEEDED, f"decoding needed more than {budget} (status {exit_.returncode}): {stderr}"
        )
    raise TransientFailure(f"render child exited with status {exit_.returncode} and no report: {stderr}")


def _child_environment() -> dict[str, str]:
    """The child's environment: :data:`PASSED_ENVIRONMENT`, this interpreter's ``sys.path``
    as ``PYTHONPATH``, :data:`MALLOC_ARENA_MAX` and :data:`OPENBLAS_NUM_THREADS`."""
    env = {name: os.environ[name] for name in PASSED_ENVIRONMENT if name in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isabs(p))
    env["MALLOC_ARENA_MAX"] = MALLOC_ARENA_MAX
    env["OPENBLAS_NUM_THREADS"] = OPENBLAS_NUM_THREADS
    return env


def _start_child(
    argv: list[str], stdin: int | IO[bytes], stdout: int | IO[bytes], stderr: int | IO[bytes] | None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (our interpreter and module: no user string) with the child's
    environment, in the temporary folder, in a session of its own (killed whole)."""
    return subprocess.Popen(  # noqa: S603 - our interpreter and module; the request is on stdin
        argv,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=_child_environment(),
        cwd=tempfile.gettempdir(),
        start_new_session=True,  # its own process group, killed whole at the deadline
        close_fds=True,
    )


def _kill(pid: int) -> None:
    """SIGKILL the process ``pid`` and its process group (a render child may be killed before
    its ``setsid``); one already gone is not an error."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


class ZygoteError(Exception):
    """The zygote is gone (its socket closed or broken) or answered what it must not."""


class Zygote:
    """A started zygote (fork server, :func:`mediajobs.adapters.isolated_child.zygote`) and
    the worker's end of its socket. Used by one thread at a time (see :func:`_zygote`).

    Parameters
    ----------
    python: the interpreter to run.

    Raises
    ------
    OSError
        When it cannot be started.
    """

    def __init__(self, python: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = _start_child(
                [python, "-P", "-s", "-m", CHILD_MODULE, "--zygote"], theirs.fileno(), subprocess.DEVNULL, None
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._buffer = b""
        self.python = python
        self.environment = _child_environment()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        """Whether it has not ended (as far as :meth:`subprocess.Popen.poll` knows)."""
        return self._proc.poll() is None

    def start(self, factory: str, fds: tuple[int, int, int], deadline: float) -> int:
        """Ask for a render child of ``factory`` with ``fds`` as its stdin, stdout, stderr;
        return its pid. ``deadline``: :func:`time.monotonic` seconds.

        Raises
        ------
        ZygoteError
            When the zygote is gone or answers anything but a pid.
        TimeoutError
            When no answer came before the deadline.
        """
        try:
            socket.send_fds(self._sock, [json.dumps({"factory": factory}).encode() + b"\n"], list(fds))
        except OSError as exc:  # BrokenPipeError, ConnectionResetError: it is gone
            raise ZygoteError(f"the zygote took no request: {exc}") from exc
        return self._answer("pid", deadline)

    def status(self, deadline: float) -> int:
        """The exit status of the render child it started (negative: the signal), waiting
        until ``deadline`` (:func:`time.monotonic` seconds).

        Raises
        ------
        ZygoteError
            When the zygote is gone or answers anything but a status.
        TimeoutError
            When the child has not ended by the deadline.
        """
        return self._answer("status", deadline)

    def _answer(self, key: str, deadline: float) -> int:
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {key} from the zygote in time")
            self._sock.settimeout(remaining)
            try:
                data = self._sock.recv(MAX_ANSWER_BYTES)
            except TimeoutError:
                raise
            except OSError as exc:
                raise ZygoteError(f"the zygote's socket broke: {exc}") from exc
            if not data:
                raise ZygoteError(f"the zygote ended (status {self._proc.poll()})")
            self._buffer += data
            if len(self._buffer) > MAX_ANSWER_BYTES:
                raise ZygoteError(f"the zygote sent {len(self._buffer)} bytes without a line end")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            value = json.loads(line)[key]
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{key} is {type(value).__name__}")
        except (ValueError, TypeError, KeyError) as exc:
            raise ZygoteError(f"the zygote answered {line[:300]!r} instead of a {key}") from exc
        return value

    def close(self) -> None:
        """Close the socket and kill its session (its render children die with it,
        ``PR_SET_PDEATHSIG``); wait for it at most :data:`KILLED_CHILD_WAIT_S`."""
        self._sock.close()
        if self._proc.poll() is not None:
            return
        _kill(self._proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=KILLED_CHILD_WAIT_S)


#: Each thread's zygote (``.zygote``, or none yet).
_THREADS = threading.local()
#: Every zygote of this process not yet closed, for :func:`_close_all` at exit.
_STARTED: weakref.WeakSet[Zygote] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """At the interpreter's exit, stop and reap every zygote (so that their CPU time is
    counted as this process's children's, and none is left to ``init``). A process that
    ends without it (``os._exit``, a signal) takes them with it: ``PR_SET_PDEATHSIG``."""
    for zygote in list(_STARTED):
        zygote.close()


def _zygote(python: str) -> Zygote:
    """The calling thread's zygote for ``python``, started when it has none, or when its
    own has ended or was started with another interpreter or environment (``sys.path``).

    One per thread, because ``PR_SET_PDEATHSIG`` fires when the *thread* that started the
    zygote ends (``prctl(2)``): a zygote handed to another thread would be killed mid-render
    when its starter ends. The thread that renders is the one that started it.
    """
    current: Zygote | None = getattr(_THREADS, "zygote", None)
    if current is not None and (
        current.python != python or current.environment != _child_environment() or not current.alive()
    ):
        _discard(current)
        current = None
    if current is None:
        current = _THREADS.zygote = Zygote(python)
        _STARTED.add(current)
    return current


def close_zygote() -> None:
    """Stop the calling thread's zygote, if it has one, and wait for it (at most
    :data:`KILLED_CHILD_WAIT_S`). The CPU time of the render children it waited for then
    counts in this process's ``RUSAGE_CHILDREN`` (``getrusage(2)``: a reaped child's count
    includes the descendants it waited for). The thread's next render starts a fresh one."""
    current: Zygote | None = getattr(_THREADS, "zygote", None)
    if current is not None:
        _discard(current)


def _discard(zygote: Zygote) -> None:
    """Kill ``zygote`` and forget it (the thread's next render starts a fresh one)."""
    if getattr(_THREADS, "zygote", None) is zygote:
        _THREADS.zygote = None
    zygote.close()


def _reports(stream: IO[bytes]) -> tuple[dict[str, Any], ...]:
    stream.seek(0)
    found = []
    for line in stream.read(MAX_REPORT_BYTES).splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue  # a line cut at the size limit, or not ours
        if isinstance(value, dict):
            found.append(value)
    return tuple(found)


def _tail(stream: IO[bytes]) -> str:
    size = stream.seek(0, os.SEEK_END)
    stream.seek(max(0, size - STDERR_TAIL_BYTES))
    return stream.read().decode("utf-8", errors="replace")


class IsolatedStep:
    """Runs an inner step in a child process whose address space is bounded (see the module
    docstring). It is a :class:`~mediajobs.service_layer.ports.Step` itself, with the inner
    step's ``name`` and ``params_model``.

    Parameters
    ----------
    spec: how the child builds the inner step.
    memory_budget_mb: address space, MiB, the render may add to the child's baseline
        (``Settings.decode_memory_mb``).
    timeout_s: longest a render may take when no context gives the time left, seconds.
    margin_s: seconds kept before the invocation's end (``Settings.deadline_margin_s``).
    python: the interpreter to run (default: this one).
    zygote: fork each render child from the thread's zygote (default); False: start a
        fresh interpreter per render (the one-shot child: benchmarks, comparison).

    Raises
    ------
    ValueError
        If a number is not positive.
    ImportError, AttributeError
        If ``spec.factory`` cannot be imported, or has no ``name`` or ``params_model``.
    """

    def __init__(
        self,
        spec: StepSpec,
        *,
        memory_budget_mb: int,
        timeout_s: float,
        margin_s: float = 0.0,
        python: str = sys.executable,
        zygote: bool = True,
    ) -> None:
        if memory_budget_mb <= 0 or timeout_s <= 0 or margin_s < 0:
            raise ValueError("memory_budget_mb and timeout_s must be positive, margin_s not negative")
        self.spec = spec
        module_name, _, attribute = spec.factory.partition(":")
        inner = getattr(importlib.import_module(module_name), attribute)
        self.name: str = inner.name
        self.params_model: type[BaseModel] = inner.params_model
        self.memory_budget_bytes = memory_budget_mb * MB
        self.timeout_s = float(timeout_s)
        self.margin_s = float(margin_s)
        self._python = python
        self._zygote = zygote

    def _deadline_s(self, context: RenderContext | None) -> float:
        remaining = context.remaining_s() if context is not None else None
        if remaining is None:
            return self.timeout_s
        return min(self.timeout_s, remaining - self.margin_s)

    def run(self, source: Path, params: BaseModel, context: RenderContext | None, out_dir: Path) -> StepResult:
        """Run the inner step on the original at ``source`` into ``out_dir``, in a child process.

        Parameters
        ----------
        source: the original.
        params: the recipe's parameters (an instance of ``params_model``).
        context: the invocation's remaining time (optional; without it the child gets
            ``timeout_s``).
        out_dir: an existing folder for the outputs.

        Returns
        -------
        StepResult
            As the inner step returned it.

        Raises
        ------
        PermanentFailure
            The inner step's (``unsupported_format``, ``corrupt_image`` ...), or
            ``memory_limit_exceeded`` with a detail naming the budget.
        DeadlineReached
            When no time is left, or the child was stopped at the deadline.
        TransientFailure
            When the child failed for a reason that is not the input's.
        """
        deadline_s = self._deadline_s(context)
        if deadline_s <= 0:
            raise DeadlineReached(f"no time left for an image render ({deadline_s + self.margin_s:.1f} s left)")
        out_dir = out_dir.resolve()
        request: RenderRequest = {
            "factory": self.spec.factory,
            "options": dict(self.spec.options),
            "source": str(source.resolve()),
            "out_dir": str(out_dir),
            "params": params.model_dump(mode="json"),
            "memory_budget_bytes": self.memory_budget_bytes,
            "parent_pid": os.getpid(),
        }
        with (
            tempfile.TemporaryFile() as stdin,
            tempfile.TemporaryFile() as stdout,
            tempfile.TemporaryFile() as stderr,
        ):
            stdin.write(json.dumps(request).encode())
            stdin.seek(0)
            run = self._forked if self._zygote else self._run
            exit_ = run(stdin, stdout, stderr, deadline_s)
        _log_exit(exit_)
        return interpret(exit_, out_dir=out_dir, budget_bytes=self.memory_budget_bytes, waited_s=deadline_s)

    def _forked(self, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes], deadline_s: float) -> ChildExit:
        """Run the render in a child forked from the thread's zygote, to its end or to the
        deadline (then kill its process group).

        A zygote that is gone or answers garbage before it names the child (so before any
        render ran: a child it forked dies with it) is replaced, and the render asked once
        more of the fresh one; a second failure is a :class:`TransientFailure`. One that
        fails once the child runs is replaced too, and the render is a
        :class:`TransientFailure` (it may have run: the ledger's attempts bound a retry).
        """
        deadline = time.monotonic() + deadline_s
        for attempt in (1, 2):
            zygote = _zygote(self._python)
            stdin.seek(0)
            for stream in (stdout, stderr):
                stream.seek(0)
                stream.truncate()
            try:
                pid = zygote.start(self.spec.factory, (stdin.fileno(), stdout.fileno(), stderr.fileno()), deadline)
            except TimeoutError:  # the zygote's imports took the whole time
                _discard(zygote)
                return ChildExit(-signal.SIGKILL, True, _reports(stdout), _tail(stderr))
            except ZygoteError as exc:
                _discard(zygote)
                if attempt == 2:
                    raise TransientFailure(f"render zygote failed twice before rendering: {exc}") from exc
                log.warning("render zygote replaced", extra={"error": str(exc)})
                continue
            return self._collect(zygote, pid, deadline, stdout, stderr)
        raise AssertionError("unreachable")

    def _collect(self, zygote: Zygote, pid: int, deadline: float, stdout: IO[bytes], stderr: IO[bytes]) -> ChildExit:
        """Wait for the render child ``pid`` until ``deadline``, killing it there."""
        timed_out = False
        try:
            status = zygote.status(deadline)
        except TimeoutError:
            timed_out = True
            status = _kill_and_collect(zygote, pid)
        except ZygoteError as exc:
            _kill(pid)
            _discard(zygote)
            raise TransientFailure(f"render zygote failed during the render: {exc}") from exc
        except BaseException:  # this thread interrupted: the child must not outlive the wait
            _kill_and_collect(zygote, pid)
            raise
        return ChildExit(status, timed_out, _reports(stdout), _tail(stderr))

    def _run(self, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes], deadline_s: float) -> ChildExit:
        """Run a one-shot child to its end or to the deadline (then kill its process group)."""
        proc = _start_child([self._python, "-P", "-s", "-m", CHILD_MODULE], stdin, stdout, stderr)
        timed_out = False
        try:
            proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if proc.poll() is None:  # the deadline, or this thread interrupted
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return ChildExit(proc.returncode, timed_out, _reports(stdout), _tail(stderr))


def _kill_and_collect(zygote: Zygote, pid: int) -> int:
    """Kill the render child ``pid`` and return its status from ``zygote``; a zygote that
    does not give it within :data:`KILLED_CHILD_WAIT_S` is replaced (the status is then
    SIGKILL's: the child dies with the zygote)."""
    _kill(pid)
    try:
        return zygote.status(time.monotonic() + KILLED_CHILD_WAIT_S)
    except (TimeoutError, ZygoteError):
        _discard(zygote)
        return -signal.SIGKILL


def _log_exit(exit_: ChildExit) -> None:
    """Log a render child's stderr (debug) and its peaks (info)."""
    if exit_.stderr_tail.strip():
        log.debug("render child stderr: %s", exit_.stderr_tail[-500:])
    ready = next((r for r in exit_.reports if r.get("event") == "ready"), {})
    for report in exit_.reports:
        if report.get("event") not in ("ready", None) and isinstance(report.get("peak"), dict):
            limits = {
                "baseline_mb": round(int(ready.get("baseline_bytes", 0)) / MB, 1),
                "limit_mb": round(int(ready.get("limit_bytes", 0)) / MB, 1),
            }
            log.info("render child ended", extra={"event": report["event"], **report["peak"], **limits})
