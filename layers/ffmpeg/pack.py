"""Packs the layer's ffprobe: ``bin/ffprobe`` becomes ``bin/ffprobe.xz`` and ``bin/ffprobe.sha256``.

    python3 pack.py BIN_DIR/ffprobe [--cache-dir DIR]

The static ffprobe is about 79 MB on x86_64 (50 MB on arm64) and compresses to about a
quarter with xz. Lambda counts a function and its layers unzipped (250 MB), so the layer
carries it packed and the product unpacks it into /tmp on the first video
(``mediajobs.adapters.ffmpeg.unpack_ffprobe``), checking the SHA-256 written here.

The ``.xz`` is deterministic (liblzma, one thread, preset 6: an 8 MiB dictionary, so
unpacking needs about 9 MiB of memory). Compressing takes about 35 s, so the result is kept
in the cache folder under the SHA-256 of its input; a cached file is used only after it has
been unpacked again and found to give exactly that input.
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import os
import shutil
import sys
import tempfile
from pathlib import Path

#: liblzma's default preset: 8 MiB dictionary. Preset 9 saves 0.8 % here for a 64 MiB one.
PRESET = 6
CHUNK_BYTES = 1 << 20


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of the file at ``path``."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def unpacked_sha256(packed: Path) -> str | None:
    """Hex SHA-256 of what the ``.xz`` at ``packed`` unpacks to; ``None`` if it is damaged."""
    digest = hashlib.sha256()
    try:
        with lzma.open(packed, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
                digest.update(chunk)
    except (lzma.LZMAError, EOFError):
        return None
    return digest.hexdigest()


def compress(source: Path, dest: Path) -> None:
    """Write ``source`` xz-compressed (preset :data:`PRESET`, CRC64) to ``dest``, by a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        compressor = lzma.LZMACompressor(format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=PRESET)
        with os.fdopen(fd, "wb") as out, source.open("rb") as f:
            for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
                out.write(compressor.compress(chunk))
            out.write(compressor.flush())
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def pack(ffprobe: Path, cache_dir: Path | None = None) -> tuple[Path, Path]:
    """Replace ``ffprobe`` by ``ffprobe.xz`` (mode 0644) and ``ffprobe.sha256`` beside it.

    ``ffprobe.sha256`` holds the SHA-256 of the unpacked program, as ``sha256sum`` prints it
    (``<hex>  ffprobe``).

    Parameters
    ----------
    ffprobe: the program to pack.
    cache_dir: where compressed files are kept, named by their input's SHA-256; ``None``
        compresses every time.

    Returns
    -------
    (packed, checksum)
        Paths of ``ffprobe.xz`` and ``ffprobe.sha256``.
    """
    digest = sha256_of(ffprobe)
    packed = ffprobe.with_name(ffprobe.name + ".xz")
    checksum = ffprobe.with_name(ffprobe.name + ".sha256")
    if cache_dir is None:
        compress(ffprobe, packed)
    else:
        cache_dir.mkdir(parents=True, exist_ok=True)
        cached = cache_dir / f"{ffprobe.name}-{digest}-xz{PRESET}.xz"
        if not cached.is_file() or unpacked_sha256(cached) != digest:
            print(f"ffmpeg layer: compressing {ffprobe.name} (xz preset {PRESET}) into {cached}")
            compress(ffprobe, cached)
        shutil.copyfile(cached, packed)
    os.chmod(packed, 0o644)
    checksum.write_text(f"{digest}  {ffprobe.name}\n")
    os.chmod(checksum, 0o644)
    ffprobe.unlink()
    return packed, checksum


def main(argv: list[str] | None = None) -> int:
    """``pack.py FFPROBE [--cache-dir DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ffprobe", type=Path)
    parser.add_argument("--cache-dir", type=Path)
    args = parser.parse_args(argv)
    packed, _ = pack(args.ffprobe, args.cache_dir)
    print(f"ffmpeg layer: {packed} ({packed.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
