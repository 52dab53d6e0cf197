"""A stop signal that arrives while ffmpeg is being started (inside ``subprocess.Popen``,
where an exception would lose the child's pid and leave it running) is kept and raised once
the process group is known, so the group is killed (``adapters/ffmpeg.py``: ``defer_stop``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mediajobs.adapters import ffmpeg


def test_a_stop_while_popen_runs_is_raised_after_it_and_kills_the_group(monkeypatch, tmp_path):
    started: list[int] = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)

        def stop() -> None:
            raise SystemExit(143)

        assert ffmpeg.defer_stop(stop)  # the CLI's SIGTERM handler, run inside Popen
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(SystemExit):
        ffmpeg.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=120, cwd=tmp_path)
    (pid,) = started
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left to sleep for a minute
        os.kill(pid, 0)
    assert ffmpeg._STARTING.depth == 0 and ffmpeg._STARTING.pending is None


def test_outside_a_start_a_stop_is_not_deferred():
    assert ffmpeg.defer_stop(lambda: None) is False
