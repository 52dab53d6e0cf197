"""layers/size_check.py: the unzipped total of a sam build against Lambda's limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO, load_script

size_check = load_script("layers_size_check", REPO / "layers" / "size_check.py")


def write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def build(root: Path, parts: dict[str, int]) -> Path:
    for name, size in parts.items():
        write(root / name / "python" / "a.py", size // 2)
        write(root / name / "python" / "sub" / "b.bin", size - size // 2)
    (root / "template.yaml").write_text("ignored: a file beside the artifacts\n")
    return root


def test_the_limit_is_lambdas_250_mb_unzipped_and_the_cap_80_percent():
    assert size_check.LAMBDA_UNZIPPED_LIMIT_BYTES == 262_144_000
    report = size_check.Report("b", {"x": 1}, size_check.LAMBDA_UNZIPPED_LIMIT_BYTES, size_check.MAX_FRACTION)
    assert report.cap_bytes == 209_715_200  # = 200 MiB


def test_parts_are_the_apparent_sizes_of_their_files(tmp_path: Path):
    report = size_check.measure(build(tmp_path, {"WorkerFunction": 170, "MediaJobsLayer": 1001, "FfmpegLayer": 10}))
    assert report.parts == {"FfmpegLayer": 10, "MediaJobsLayer": 1001, "WorkerFunction": 170}
    assert report.total_bytes == 1181


def test_a_link_to_a_file_counts_as_the_file(tmp_path: Path):
    write(tmp_path / "Layer" / "real", 100)
    os.symlink("real", tmp_path / "Layer" / "link")
    assert size_check.tree_bytes(tmp_path / "Layer") == 200


@pytest.mark.parametrize(("total", "ok"), [(800, True), (801, False), (0, True)])
def test_a_total_over_the_cap_fails_and_the_cap_itself_passes(tmp_path: Path, total: int, ok: bool):
    report = size_check.measure(build(tmp_path, {"A": total // 2, "B": total - total // 2}), limit_bytes=1000)
    assert (report.cap_bytes, report.total_bytes, report.ok) == (800, total, ok)


def test_the_command_prints_each_part_and_fails_when_a_build_is_over(tmp_path: Path, capsys):
    small = build(tmp_path / "arm64", {"A": 100})
    large = build(tmp_path / "x86_64", {"A": 700, "B": 200})
    assert size_check.main([str(small), "--limit-bytes", "1000"]) == 0
    assert size_check.main([str(small), str(large), "--limit-bytes", "1000"]) == 1
    out, err = capsys.readouterr()
    assert "x86_64" in err and "arm64" not in err
    assert "  B " in out and "900 B" in out and "90.0% of 1,000 B" in out and "OVER" in out


def test_an_empty_build_folder_is_an_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        size_check.measure(tmp_path)
