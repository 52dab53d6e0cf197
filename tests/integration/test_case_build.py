"""tests/media/make_cases.py: the synthetic cases are deterministic, built once and reused,
and a damaged or interrupted build is never reused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import _make_cases, case_registry


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.slow
def test_two_builds_give_the_same_bytes_and_every_file_of_every_case(tmp_path):
    make_cases = _make_cases()
    first = digests(make_cases.build(tmp_path / "a" / "cases"))
    second = digests(make_cases.build(tmp_path / "b" / "cases"))
    assert first == second
    assert set(first) - {".stamp.json"} == {name for case in case_registry() for name in case.files}


@pytest.mark.slow
def test_a_build_is_reused_and_a_missing_file_or_a_killed_build_is_mended(tmp_path):
    make_cases = _make_cases()
    out = tmp_path / "cases"
    make_cases.build(out)
    stamp = (out / ".stamp.json").stat().st_mtime_ns
    assert make_cases.build(out) == out and (out / ".stamp.json").stat().st_mtime_ns == stamp  # reused
    (out / "I18_empty.jpg").unlink()
    leftover = tmp_path / ".cases-killed"  # the staging folder of a build that was killed
    leftover.mkdir()
    make_cases.build(out)
    assert (out / "I18_empty.jpg").is_file()
    assert not leftover.exists()
