"""The render child of :class:`mediajobs.adapters.isolated.IsolatedStep`, and the zygote
(fork server) that starts render children.

Two ways in, one render (:func:`serve`):

* ``python -P -s -m mediajobs.adapters.isolated_child --zygote``: the zygote. Its stdin is
  its end of a Unix socketpair with the worker; it serves renders until the worker closes
  its end (:func:`zygote`). Each render child is a plain :func:`os.fork` of it, so the
  interpreter start and the imports are paid once per zygote, not once per render.
* ``python -P -s -m mediajobs.adapters.isolated_child``: one render, one interpreter (what
  ``IsolatedStep(zygote=False)`` starts; kept for comparison and as a fallback).

A render child reads a :class:`~mediajobs.adapters.isolated.RenderRequest` on stdin. Its
stdout is its report channel, one JSON object a line: ``ready`` once the address-space
limit is set, then one of ``done`` (files and decisions), ``failed`` (a permanent failure's
reason and detail), ``memory`` (a ``MemoryError``) or ``error`` (any other exception).
Whatever a library prints goes to stderr instead (fd 1 is pointed there), so it cannot
garble a report.

Only the standard library and the domain are imported before the request is read; the
inner step's module (Pillow, pi-heif), the modules it names in ``child_imports`` and
Pillow's plugins are imported before the limit is set (by the zygote, before it forks),
and the input is opened only after it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import faulthandler
import gc
import importlib
import json
import os
import resource
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Final, NoReturn

from mediajobs.adapters.isolated import RenderRequest
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.jobs import RenderContext

#: ``prctl(2)`` option: the signal the kernel sends this process when its parent thread ends.
_PR_SET_PDEATHSIG: Final = 1


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when the parent that started it ends (elsewhere: nothing);
    exit at once when it has already ended."""
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = getattr(libc, "prctl", None)
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _status_bytes(*fields: str) -> dict[str, int]:
    """Fields of ``/proc/self/status`` (``VmSize``, ``VmPeak``, ``VmHWM``), in bytes; empty without /proc."""
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in fields:
                    found[name] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return found


def _peak() -> dict[str, float]:
    status = _status_bytes("VmPeak", "VmHWM")
    return {
        "peak_vm_mb": round(status.get("VmPeak", 0) / 2**20, 1),
        "peak_rss_mb": round(status.get("VmHWM", 0) / 2**20, 1),
    }


def _factory(factory: str) -> Any:
    module_name, _, name = factory.partition(":")
    return getattr(importlib.import_module(module_name), name)


def _build(factory: str, options: dict[str, Any]) -> Any:
    return _factory(factory)(**options)


def _load_code(factory: str) -> None:
    """Import the step ``factory`` names, the modules its class lists in ``child_imports``
    (a tuple of module names, optional) and Pillow's plugins: the layer's code, not the
    input. Errors propagate (the caller decides)."""
    for name in getattr(_factory(factory), "child_imports", ()):
        importlib.import_module(name)
    pillow = sys.modules.get("PIL.Image")
    if pillow is not None:  # the plugins Pillow imports at its first open (8 MB here): code, not input
        pillow.init()


def _send(channel: IO[str], report: dict[str, Any]) -> None:
    channel.write(json.dumps(report) + "\n")
    channel.flush()


def serve(parent_pid: int | None = None) -> int:
    """Serve the one request on stdin (fd 0), reporting on stdout (fd 1); the render logic
    of both ways in.

    Parameters
    ----------
    parent_pid: the process whose end must end this one (the zygote, for a forked child);
        None: the request's ``parent_pid`` (the worker, for a one-shot child).

    Returns
    -------
    int
        The exit status: 0 whenever a report was sent. An error before the ``ready`` report
        (an unreadable request, an import) propagates.
    """
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # C libraries' printf lands in stderr
    sys.stdout = sys.stderr
    faulthandler.enable()  # a decoder's crash leaves the Python stack on stderr
    request: RenderRequest = json.load(sys.stdin)
    _die_with_parent(request["parent_pid"] if parent_pid is None else parent_pid)
    step = _build(request["factory"], request["options"])
    _load_code(request["factory"])  # in a forked child: already done by the zygote, so free
    params = step.params_model.model_validate(request["params"])
    baseline = _status_bytes("VmSize").get("VmSize", 0)
    limit = baseline + int(request["memory_budget_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _send(channel, {"event": "ready", "baseline_bytes": baseline, "limit_bytes": limit})
    try:
        # The deadline is the parent's to keep (it kills this process group at it).
        result = step.run(Path(request["source"]), params, RenderContext(), Path(request["out_dir"]))
    except PermanentFailure as failure:
        _send(channel, {"event": "failed", "reason": failure.reason, "detail": failure.detail, "peak": _peak()})
    except MemoryError as exc:
        _send(channel, {"event": "memory", "detail": f"MemoryError: {exc}".rstrip(": "), "peak": _peak()})
    except Exception as exc:  # noqa: BLE001 - reported; the parent decides (transient)
        _send(channel, {"event": "error", "type": type(exc).__name__, "message": str(exc)[:500], "peak": _peak()})
    else:
        report = {
            "event": "done",
            "files": [{**dataclasses.asdict(f), "path": str(f.path)} for f in result.files],
            "decisions": dict(result.decisions),
            "peak": _peak(),
            "cpu_s": _cpu_s(),
        }
        _send(channel, report)
    return 0


#: Most a zygote buffers of one request line from the worker, bytes.
MAX_REQUEST_BYTES: Final = 64 * 1024
#: The file descriptors a render request carries: the render child's stdin, stdout, stderr.
RENDER_FDS: Final = 3


def _threads() -> int:
    """This process's threads, native ones included (``/proc/self/task``; elsewhere Python's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _answer(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _render_child(fds: Sequence[int], sock: socket.socket, zygote_pid: int) -> NoReturn:
    """In a child just forked from the zygote: its own session, ``fds`` as 0/1/2, no other
    descriptor, death with the zygote, then :func:`serve`. Never returns (``os._exit``)."""
    code = 1
    try:
        os.setsid()  # its own session and process group: the worker kills it whole
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        sock.close()
        os.closerange(RENDER_FDS, resource.getrlimit(resource.RLIMIT_NOFILE)[0])  # as Popen's close_fds
        gc.enable()
        code = serve(parent_pid=zygote_pid)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - before a report: the worker reads it from stderr
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def zygote() -> int:
    """The fork server: serve render requests from the worker until it closes its end.

    Its stdin is a Unix stream socket to the worker (moved off fd 0 at once). A request is
    one JSON line ``{"factory": "module:name"}`` carrying :data:`RENDER_FDS` descriptors
    (``SCM_RIGHTS``, :func:`socket.recv_fds`): the render's stdin (the request, at offset 0),
    stdout and stderr. For each, the zygote imports the step's code once (:func:`_load_code`;
    an import error is left to the child, which fails as a one-shot child would), freezes
    its objects (:func:`gc.freeze`: a child's collections do not write to the pages it shares),
    checks that it still has one thread, forks, answers ``{"pid": N}``, waits for the child
    and answers ``{"status": S}`` (:func:`os.waitstatus_to_exitcode`: negative for a signal,
    as :class:`subprocess.Popen`). When it has more than one thread it answers
    ``{"error": ...}`` and ends instead: ``fork(2)`` copies only the calling thread, so a
    child could inherit a lock another thread held (Python's :func:`os.fork` documents it).

    It dies with the worker thread that started it (``PR_SET_PDEATHSIG``), and its render
    children with it; a worker that ends closes the socket too, which ends an idle zygote.

    Returns
    -------
    int
        0 when the worker closed its end; 1 on a request it cannot read or an extra thread.
    """
    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _die_with_parent(os.getppid())  # the worker's thread; if it is gone already, recv sees EOF
    gc.disable()  # collections before a fork would dirty shared pages; the children enable it
    loaded: set[str] = set()
    buffer, fds = b"", []
    me = os.getpid()
    while True:
        while b"\n" not in buffer:
            data, received, _flags, _address = socket.recv_fds(sock, MAX_REQUEST_BYTES, RENDER_FDS)
            fds.extend(received)
            if not data:
                return 0
            buffer += data
            if len(buffer) > MAX_REQUEST_BYTES:
                return 1
        line, _, buffer = buffer.partition(b"\n")
        factory = json.loads(line)["factory"]
        if len(fds) < RENDER_FDS:
            _answer(sock, {"error": f"a request came with {len(fds)} descriptors, not {RENDER_FDS}"})
            return 1
        render_fds, fds = fds[:RENDER_FDS], fds[RENDER_FDS:]
        if factory not in loaded:
            loaded.add(factory)
            with contextlib.suppress(Exception):
                _load_code(factory)
            gc.freeze()
        if _threads() != 1:
            _answer(sock, {"error": f"the zygote has {_threads()} threads: it forks only with one"})
            return 1
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _render_child(render_fds, sock, me)
        for fd in render_fds:
            os.close(fd)
        _answer(sock, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _answer(sock, {"status": os.waitstatus_to_exitcode(status)})


def _cpu_s() -> float:
    """CPU seconds this render child spent (user and system, ``getrusage(RUSAGE_SELF)``):
    reported with its result, since the worker's own ``RUSAGE_CHILDREN`` counts a render
    child only once its zygote, which reaps it, is reaped."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 3)


def main(argv: Sequence[str] = ()) -> int:
    """``--zygote``: :func:`zygote`; otherwise one render (:func:`serve`)."""
    return zygote() if "--zygote" in argv else serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
