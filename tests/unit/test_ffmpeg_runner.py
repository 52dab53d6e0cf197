"""The process runner, with small stand-in programs instead of ffmpeg."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mediajobs.adapters import ffmpeg
from mediajobs.domain.video import STDERR_TAIL_BYTES


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "fake.py"
    path.write_text(body)
    return [sys.executable, str(path)]


def test_progress_blocks_are_passed_on_and_the_exit_code_kept(tmp_path: Path) -> None:
    argv = script(
        tmp_path,
        "import sys\n"
        "for us in (500000, 1000000):\n"
        "    print(f'frame=1\\nout_time_ms={us}\\nprogress=continue', flush=True)\n"
        "print('out_time_ms=2000000\\nprogress=end')\n"
        "sys.exit(3)\n",
    )
    blocks: list[dict[str, str]] = []
    completed = ffmpeg.run(argv, timeout_s=60, on_progress=blocks.append)
    assert completed.returncode == 3
    assert [b["out_time_ms"] for b in blocks] == ["500000", "1000000", "2000000"]
    assert [b["progress"] for b in blocks] == ["continue", "continue", "end"]


def test_only_the_last_8_kib_of_stderr_are_kept(tmp_path: Path) -> None:
    argv = script(tmp_path, "import sys\nsys.stderr.write('x' * 100_000 + 'THE END')\n")
    completed = ffmpeg.run(argv, timeout_s=60)
    assert len(completed.stderr_tail) == STDERR_TAIL_BYTES == 8192
    assert completed.stderr_tail.endswith("THE END")


def test_stdout_is_collected_without_a_progress_sink(tmp_path: Path) -> None:
    completed = ffmpeg.run(script(tmp_path, "print('{\"format\": {}}')"), timeout_s=60)
    assert completed.stdout.strip() == b'{"format": {}}' and completed.returncode == 0


def test_stdin_is_closed(tmp_path: Path) -> None:
    completed = ffmpeg.run(script(tmp_path, "import sys\nprint(repr(sys.stdin.read()))"), timeout_s=60)
    assert completed.stdout.strip() == b"''"


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    # The child starts a grandchild that holds stdout open: run() can only return once the
    # grandchild is dead too, so returning at all proves the group was killed.
    argv = script(
        tmp_path,
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "time.sleep(600)\n",
    )
    with pytest.raises(ffmpeg.FfmpegTimeout):
        ffmpeg.run(argv, timeout_s=1)


def test_an_exception_in_the_progress_sink_kills_the_run(tmp_path: Path) -> None:
    argv = script(
        tmp_path,
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('out_time_ms=1\\nprogress=continue', flush=True)\n"
        "time.sleep(600)\n",
    )

    class LeaseLost(Exception):
        pass

    def sink(block: dict[str, str]) -> None:
        raise LeaseLost

    with pytest.raises(LeaseLost):
        ffmpeg.run(argv, timeout_s=600, on_progress=sink)


def test_arguments_reach_the_program_verbatim(tmp_path: Path) -> None:
    hostile = "$(touch pwned); `id` | rm -rf / ; 'quote\" *"
    completed = ffmpeg.run(script(tmp_path, "import sys\nprint(sys.argv[1])") + [hostile], timeout_s=60, cwd=tmp_path)
    assert completed.stdout.decode().rstrip("\n") == hostile
    assert not (tmp_path / "pwned").exists()


def test_binaries_are_found_in_the_folder_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ffmpeg", "ffprobe"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("MEDIAJOBS_FFMPEG_DIR", str(tmp_path))
    ffmpeg.find_binaries.cache_clear()
    try:
        found = ffmpeg.find_binaries()
    finally:
        ffmpeg.find_binaries.cache_clear()
    assert (found.ffmpeg, found.ffprobe, found.origin) == (
        str(tmp_path / "ffmpeg"), str(tmp_path / "ffprobe"), "MEDIAJOBS_FFMPEG_DIR",
    )  # fmt: skip


def test_a_folder_named_by_the_environment_is_the_only_place_looked(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEDIAJOBS_FFMPEG_DIR", str(tmp_path / "missing"))
    ffmpeg.find_binaries.cache_clear()
    try:
        with pytest.raises(ffmpeg.FfmpegMissing) as caught:
            ffmpeg.find_binaries()
    finally:
        ffmpeg.find_binaries.cache_clear()
    assert "MEDIAJOBS_FFMPEG_DIR" in str(caught.value)


def test_without_ffmpeg_the_demo_leaves_its_videos_out_and_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    from mediajobs.local.commands import demo

    monkeypatch.setenv("MEDIAJOBS_FFMPEG_DIR", str(tmp_path / "missing"))
    ffmpeg.find_binaries.cache_clear()
    try:
        assert demo.videos_if_ffmpeg() == []
    finally:
        ffmpeg.find_binaries.cache_clear()
    assert "the demo runs without its videos" in capsys.readouterr().err
