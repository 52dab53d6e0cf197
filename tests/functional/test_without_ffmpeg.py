"""On a machine without ffmpeg, no test module fails to import: the video tests find ffmpeg
when they run, the way the product does (``find_binaries``), not at collection."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_every_test_module_is_collected_when_no_ffmpeg_is_found(tmp_path):
    empty = tmp_path / "no-ffmpeg-here"
    empty.mkdir()
    env = os.environ | {"MEDIAJOBS_FFMPEG_DIR": str(empty)}  # when set, the only place looked
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "error" not in done.stdout.splitlines()[-1], done.stdout[-3000:]
