"""The packed ffprobe of the ffmpeg layer (``bin/ffprobe.xz`` + ``bin/ffprobe.sha256``): how the
product unpacks it, with small fake programs in ``tmp_path`` and every place injected."""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import stat
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from mediajobs.adapters import ffmpeg
from mediajobs.adapters.video import FfmpegRenderer
from mediajobs.service_layer.work import WORK_FOLDER_MARKER, remove_work_folders
from tests.conftest import REPO, load_script

FAKE_FFPROBE = b"#!/bin/sh\necho fake ffprobe\nexit 0\n" + bytes(range(256)) * 64


def load_pack() -> ModuleType:
    return load_script("ffmpeg_layer_pack", REPO / "layers" / "ffmpeg" / "pack.py")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def packed_layer(root: Path, program: bytes = FAKE_FFPROBE, *, checksum: str | None = None) -> Path:
    """A layer ``bin/`` as ``sam build`` makes it: an executable ffmpeg, ffprobe.xz and its SHA-256."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ffmpeg").write_text("#!/bin/sh\necho fake ffmpeg\n")
    (bin_dir / "ffmpeg").chmod(0o755)
    (bin_dir / "ffprobe.xz").write_bytes(lzma.compress(program))
    (bin_dir / "ffprobe.sha256").write_text(f"{checksum or sha256(program)}  ffprobe\n")
    return bin_dir


def locate(layer_bin: Path, unpack_dir: Path) -> ffmpeg.Binaries:
    return ffmpeg.locate_binaries(
        None, layer_bin=layer_bin, local_bin=layer_bin.parent / "no-local-build", unpack_dir=unpack_dir,
        search_path=False,
    )  # fmt: skip


def test_a_packed_ffprobe_is_unpacked_checked_and_runs(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    found = locate(layer_bin, tmp_path / "tmp" / "mediajobs.bin")
    assert found.origin == "layer"
    assert found.ffmpeg == str(layer_bin / "ffmpeg")
    assert found.ffprobe == str(tmp_path / "tmp" / "mediajobs.bin" / "ffprobe")
    unpacked = Path(found.ffprobe)
    assert unpacked.read_bytes() == FAKE_FFPROBE
    assert found.unpacked_bytes == len(FAKE_FFPROBE)
    assert stat.S_IMODE(unpacked.stat().st_mode) == 0o700
    assert stat.S_IMODE(unpacked.parent.stat().st_mode) == 0o700
    assert subprocess.run([found.ffprobe], capture_output=True, check=True).stdout.startswith(b"fake ffprobe")
    assert sorted(p.name for p in unpacked.parent.iterdir()) == [".lock", "ffprobe"]  # no temporary left


def test_an_earlier_unpack_that_checks_out_is_reused(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    unpack_dir = tmp_path / "tmp" / "mediajobs.bin"
    first = Path(locate(layer_bin, unpack_dir).ffprobe)
    inode = first.stat().st_ino
    (layer_bin / "ffprobe.xz").write_bytes(b"not read again")  # reuse must not unpack
    again = locate(layer_bin, unpack_dir)
    assert Path(again.ffprobe).stat().st_ino == inode
    assert again.unpacked_bytes == len(FAKE_FFPROBE)


def test_an_earlier_file_that_does_not_check_out_is_replaced(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    unpack_dir = tmp_path / "tmp" / "mediajobs.bin"
    unpack_dir.mkdir(parents=True, mode=0o700)
    (unpack_dir / "ffprobe").write_bytes(FAKE_FFPROBE[:100])  # a cut copy, executable
    (unpack_dir / "ffprobe").chmod(0o700)
    assert Path(locate(layer_bin, unpack_dir).ffprobe).read_bytes() == FAKE_FFPROBE


def test_a_plain_ffprobe_is_used_as_it_is(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    shutil.copy(layer_bin / "ffmpeg", layer_bin / "ffprobe")
    found = locate(layer_bin, tmp_path / "tmp" / "mediajobs.bin")
    assert (found.ffprobe, found.unpacked_bytes) == (str(layer_bin / "ffprobe"), 0)
    assert not (tmp_path / "tmp").exists()


def test_the_folder_named_by_the_environment_may_hold_a_packed_ffprobe(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "built")
    found = ffmpeg.locate_binaries(str(layer_bin), unpack_dir=tmp_path / "unpacked", search_path=False)
    assert found.origin == "MEDIAJOBS_FFMPEG_DIR"
    assert Path(found.ffprobe).read_bytes() == FAKE_FFPROBE


def test_a_checksum_that_does_not_match_fails_and_leaves_nothing(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt", checksum="0" * 64)
    unpack_dir = tmp_path / "tmp" / "mediajobs.bin"
    with pytest.raises(ffmpeg.FfmpegUnpackFailed, match="unpacks to SHA-256"):
        locate(layer_bin, unpack_dir)
    assert [p.name for p in unpack_dir.iterdir()] == [".lock"]  # no partial or unchecked program


def test_a_damaged_xz_fails_and_leaves_nothing(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    packed = layer_bin / "ffprobe.xz"
    packed.write_bytes(packed.read_bytes()[:-40])  # cut: the stream's end and check are gone
    unpack_dir = tmp_path / "tmp" / "mediajobs.bin"
    with pytest.raises(ffmpeg.FfmpegUnpackFailed, match="not a valid xz file"):
        locate(layer_bin, unpack_dir)
    assert [p.name for p in unpack_dir.iterdir()] == [".lock"]  # no partial or unchecked program


@pytest.mark.parametrize("content", [None, "not a checksum\n"])
def test_a_packed_ffprobe_without_a_valid_checksum_file_fails(tmp_path: Path, content: str | None) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    if content is None:
        (layer_bin / "ffprobe.sha256").unlink()
    else:
        (layer_bin / "ffprobe.sha256").write_text(content)
    with pytest.raises(ffmpeg.FfmpegUnpackFailed, match="SHA-256"):
        locate(layer_bin, tmp_path / "tmp" / "mediajobs.bin")


def test_an_unpack_folder_others_can_write_to_is_refused(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    unpack_dir = tmp_path / "shared"
    unpack_dir.mkdir()
    unpack_dir.chmod(0o777)
    with pytest.raises(ffmpeg.FfmpegUnpackFailed, match="others cannot write"):
        locate(layer_bin, unpack_dir)
    assert list(unpack_dir.iterdir()) == []


@pytest.mark.parametrize("kind", ["file", "dangling symlink"])
def test_a_file_or_symlink_where_the_unpack_folder_goes_is_refused(tmp_path: Path, kind: str) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    unpack_dir = tmp_path / "unpack"
    if kind == "file":
        unpack_dir.write_text("not a folder")
    else:
        unpack_dir.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ffmpeg.FfmpegUnpackFailed, match="not a folder of this user"):
        locate(layer_bin, unpack_dir)


def test_a_partial_file_left_by_a_killed_unpack_is_removed_by_the_next(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    unpack_dir = tmp_path / "unpack"
    unpack_dir.mkdir(mode=0o700)
    (unpack_dir / ".ffprobe.k1ll3d").write_bytes(FAKE_FFPROBE[:100])  # what SIGKILL mid-unpack leaves
    found = locate(layer_bin, unpack_dir)
    assert Path(found.ffprobe).read_bytes() == FAKE_FFPROBE
    assert sorted(p.name for p in unpack_dir.iterdir()) == [".lock", "ffprobe"]


def test_without_ffmpeg_a_packed_ffprobe_is_not_unpacked(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    (layer_bin / "ffmpeg").unlink()
    with pytest.raises(ffmpeg.FfmpegMissing):
        locate(layer_bin, tmp_path / "tmp" / "mediajobs.bin")
    assert not (tmp_path / "tmp").exists()


def test_the_unpack_folder_survives_the_cold_start_cleanup_of_work_folders(tmp_path: Path) -> None:
    layer_bin = packed_layer(tmp_path / "opt")
    found = locate(layer_bin, tmp_path / ffmpeg.UNPACK_DIR_NAME)
    (tmp_path / "mediajobs-dead-worker").mkdir()
    (tmp_path / "mediajobs-dead-worker" / WORK_FOLDER_MARKER).touch()
    removed = remove_work_folders(str(tmp_path))
    assert removed == 1 and Path(found.ffprobe).read_bytes() == FAKE_FFPROBE


def test_the_default_unpack_folder_is_in_the_temporary_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ffmpeg.tempfile, "tempdir", str(tmp_path))
    assert ffmpeg.default_unpack_dir() == tmp_path / "mediajobs.bin"


def test_the_renderer_looks_for_ffmpeg_only_when_a_video_needs_it(monkeypatch) -> None:
    def fail() -> ffmpeg.Binaries:
        raise AssertionError("find_binaries called before any video")

    monkeypatch.setattr(ffmpeg, "find_binaries", fail)
    FfmpegRenderer(speed_factor=1.0, max_duration_s=600, invocation_s=800, margin_s=60)


def test_the_video_budget_leaves_out_the_space_of_the_unpacked_ffprobe(tmp_path: Path) -> None:
    unpacked = tmp_path / "mediajobs.bin" / "ffprobe"
    unpacked.parent.mkdir()
    unpacked.write_bytes(FAKE_FFPROBE)
    binaries = ffmpeg.Binaries("ffmpeg", str(unpacked), "layer", unpacked_bytes=len(FAKE_FFPROBE))
    renderer = FfmpegRenderer(speed_factor=1.0, max_duration_s=600, invocation_s=800, margin_s=60, binaries=binaries)
    budget = renderer._budget(tmp_path)
    assert budget.capacity_bytes == shutil.disk_usage(tmp_path).total - len(FAKE_FFPROBE)
    plain = ffmpeg.Binaries("ffmpeg", str(unpacked), "layer")
    assert ffmpeg.unpacked_bytes_on(plain, tmp_path) == 0


def test_the_layer_build_packs_deterministically_what_the_product_unpacks(tmp_path: Path) -> None:
    pack = load_pack()
    outputs = []
    for run in ("a", "b"):
        program = tmp_path / run / "ffprobe"
        program.parent.mkdir()
        program.write_bytes(FAKE_FFPROBE)
        program.chmod(0o755)
        packed, checksum = pack.pack(program, cache_dir=None)
        assert not program.exists()
        assert sorted(os.listdir(program.parent)) == ["ffprobe.sha256", "ffprobe.xz"]
        assert stat.S_IMODE(packed.stat().st_mode) == 0o644
        outputs.append(packed.read_bytes())
    assert outputs[0] == outputs[1]
    assert checksum.read_text() == f"{sha256(FAKE_FFPROBE)}  ffprobe\n"
    unpacked = ffmpeg.unpack_ffprobe(packed, ffmpeg.read_sha256(checksum), tmp_path / "unpacked")
    assert unpacked.read_bytes() == FAKE_FFPROBE


def test_the_layer_build_uses_a_cached_pack_only_when_it_unpacks_to_the_program(tmp_path: Path) -> None:
    pack = load_pack()
    cache = tmp_path / "cache"
    program = tmp_path / "bin" / "ffprobe"
    program.parent.mkdir()
    program.write_bytes(FAKE_FFPROBE)
    pack.pack(program, cache_dir=cache)
    (cached,) = cache.iterdir()
    assert sha256(FAKE_FFPROBE) in cached.name
    cached.write_bytes(lzma.compress(b"something else"))  # a cache entry gone wrong
    program.write_bytes(FAKE_FFPROBE)
    packed, _ = pack.pack(program, cache_dir=cache)
    assert lzma.decompress(packed.read_bytes()) == FAKE_FFPROBE
    assert lzma.decompress(cached.read_bytes()) == FAKE_FFPROBE
