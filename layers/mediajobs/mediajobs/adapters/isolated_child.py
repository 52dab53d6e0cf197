"""The render child of :class:`mediajobs.adapters.isolated.IsolatedStep`.

Run as ``python -P -s -m mediajobs.adapters.isolated_child`` with a
:class:`~mediajobs.adapters.isolated.RenderRequest` on stdin. Its stdout is its report
channel, one JSON object a line: ``ready`` once the address-space limit is set, then one of
``done`` (files and decisions), ``failed`` (a permanent failure's reason and detail),
``memory`` (a ``MemoryError``) or ``error`` (any other exception). Whatever a library
prints goes to stderr instead (fd 1 is pointed there), so it cannot garble a report.

Only the standard library and the domain are imported before the request is read; the
inner step's module (Pillow, pi-heif) and Pillow's plugins are imported before the
limit is set, and the input is opened only after it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import importlib
import json
import os
import resource
import signal
import sys
from pathlib import Path
from typing import IO, Any, Final

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


def _build(factory: str, options: dict[str, Any]) -> Any:
    module_name, _, name = factory.partition(":")
    return getattr(importlib.import_module(module_name), name)(**options)


def _send(channel: IO[str], report: dict[str, Any]) -> None:
    channel.write(json.dumps(report) + "\n")
    channel.flush()


def main() -> int:
    """Serve one request; the exit status is 0 whenever a report was sent."""
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # C libraries' printf lands in stderr
    sys.stdout = sys.stderr
    faulthandler.enable()  # a decoder's crash leaves the Python stack on stderr
    request: RenderRequest = json.load(sys.stdin)
    _die_with_parent(request["parent_pid"])
    step = _build(request["factory"], request["options"])
    pillow = sys.modules.get("PIL.Image")
    if pillow is not None:  # the plugins Pillow imports at its first open (8 MB here): code, not input
        pillow.init()
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
        }
        _send(channel, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
