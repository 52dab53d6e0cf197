"""Makes the synthetic test cases: small files, each standing for a kind of input that has
broken real media pipelines (the public report is named with each case).

Usage::

    python tests/media/make_cases.py [--out DIR] [--force]

Each case is a :class:`Case` in a ``cases_<kind>.py`` module beside this file:
``cases_images.py`` (Pillow only), ``cases_video.py`` (ffmpeg, found the way the product
finds it: :func:`mediajobs.adapters.ffmpeg.find_binaries`) and the others,
with its expected outcome beside its maker. The makers are deterministic: the same sources,
Pillow and ffmpeg give the same files. :func:`build` writes every case once per checkout into
``tests/media/build/cases/`` (ignored by git) and reuses it while a stamp of the makers'
sources and the tools' versions is unchanged; a fresh build lands in a temporary folder that
replaces the old one only once it is complete, so an interrupted build is never reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Where :func:`build` writes the cases (``build/`` is in .gitignore).
DEFAULT_OUT = HERE / "build" / "cases"
STAMP = ".stamp.json"


@dataclass(frozen=True)
class Tools:
    """Programs a maker may run: absolute paths of ``ffmpeg`` and ``ffprobe``."""

    ffmpeg: str
    ffprobe: str


@dataclass(frozen=True)
class Case:
    """One synthetic case.

    Parameters
    ----------
    id
        The case's id, e.g. ``"I01"`` (images) or ``"V09"`` (video).
    title
        What it is, in a line.
    files
        The names of the files :attr:`make` writes (flat, e.g. ``"I18_empty.jpg"``).
    make
        ``make(folder, tools)`` writes every file of :attr:`files` into ``folder``;
        ``tools`` is ``None`` for a case that needs no program (:attr:`needs_ffmpeg` false).
    expected
        The outcome a correct pipeline gives, in words (the values a test asserts).
    reason
        The permanent failure's reason code, or ``None`` when the case must succeed.
    source
        The public report the case stands for (``owner/repo#issue``).
    needs_ffmpeg
        Whether :attr:`make` runs ffmpeg.
    """

    id: str
    title: str
    files: tuple[str, ...]
    make: Callable[[Path, Tools | None], None]
    expected: str
    reason: str | None = None
    source: str = ""
    needs_ffmpeg: bool = False


def all_cases() -> tuple[Case, ...]:
    """Every case, images first, in id order.

    Raises
    ------
    ValueError
        If two cases write the same file name.
    """
    import importlib

    sys.path.insert(0, str(HERE))
    try:
        # cases_images.py and cases_video.py first, then any other cases_<kind>.py in name order.
        names = sorted(p.stem for p in HERE.glob("cases_*.py"))
        first = [n for n in ("cases_images", "cases_video") if n in names]
        modules = [importlib.import_module(n) for n in first + [n for n in names if n not in first]]
    finally:
        sys.path.remove(str(HERE))
    cases = tuple(case for module in modules for case in module.CASES)
    names = [name for case in cases for name in case.files]
    if len(names) != len(set(names)):
        raise ValueError(f"two cases write the same file: {sorted(n for n in names if names.count(n) > 1)}")
    return cases


def _tools() -> Tools | None:
    """ffmpeg and ffprobe as the product finds them, or ``None`` when there are none."""
    from mediajobs.adapters.ffmpeg import FfmpegMissing, find_binaries

    try:
        found = find_binaries()
    except FfmpegMissing:
        return None
    return Tools(ffmpeg=found.ffmpeg, ffprobe=found.ffprobe)


def _tool_version(path: str) -> str:
    import subprocess

    done = subprocess.run([path, "-hide_banner", "-version"], capture_output=True, check=True, timeout=30)  # noqa: S603
    return done.stdout.decode(errors="replace").splitlines()[0]


def _stamp(tools: Tools | None) -> dict[str, str]:
    """What the built files depend on: the makers' sources and the tools' versions."""
    import numpy
    import PIL

    digest = hashlib.sha256()
    for source in sorted(HERE.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return {
        "sources_sha256": digest.hexdigest(),
        "pillow": PIL.__version__,
        "numpy": numpy.__version__,
        "ffmpeg": _tool_version(tools.ffmpeg) if tools else "none",
        "ffprobe": _tool_version(tools.ffprobe) if tools else "none",
    }


def build(out: Path = DEFAULT_OUT, *, force: bool = False) -> Path:
    """Write every case into ``out`` unless an up-to-date build is already there.

    Cases that need ffmpeg are left out when none is found (``make test`` fetches the
    layer's first); the stamp records it, so a later build with ffmpeg adds them. Concurrent
    builds (two test runs) take turns on a lock file beside ``out``.

    Returns
    -------
    Path
        ``out``, holding one file per name of every buildable case's :attr:`Case.files`.

    Raises
    ------
    RuntimeError
        If a maker did not write one of its files.
    """
    import fcntl

    tools = _tools()
    stamp = _stamp(tools)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and _up_to_date(out, stamp, tools is not None):
            return out
        for leftover in out.parent.glob(f".{out.name}-*"):  # of a build that was killed
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            for case in all_cases():
                if case.needs_ffmpeg and tools is None:
                    continue
                case.make(staging, tools if case.needs_ffmpeg else None)
                missing = [name for name in case.files if not (staging / name).is_file()]
                if missing:
                    raise RuntimeError(f"case {case.id} did not write {missing}")
            (staging / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
            staging.chmod(0o755)  # mkdtemp makes it 0700
            old = out.parent / f".{out.name}-old-{os.getpid()}"
            if out.exists():
                out.rename(old)
            staging.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _up_to_date(out: Path, stamp: dict[str, str], with_ffmpeg: bool) -> bool:
    """Whether ``out`` was built from the same makers and tools, and still holds every file."""
    try:
        if json.loads((out / STAMP).read_text()) != stamp:
            return False
    except (OSError, ValueError):
        return False
    wanted = [name for case in all_cases() if with_ffmpeg or not case.needs_ffmpeg for name in case.files]
    return all((out / name).is_file() for name in wanted)


def case_path(name: str, out: Path = DEFAULT_OUT) -> Path:
    """The built file ``name`` of a case (building the cases first if needed).

    Raises
    ------
    KeyError
        If no case writes ``name``.
    FileNotFoundError
        If its case needs ffmpeg and none was found.
    """
    case = next((c for c in all_cases() if name in c.files), None)
    if case is None:
        raise KeyError(f"no case writes {name!r} (tests/media/cases_*.py)")
    path = build(out) / name
    if not path.is_file() and not case.needs_ffmpeg:
        raise FileNotFoundError(f"{name} (case {case.id}) was not built into {out}")
    if not path.is_file():
        raise FileNotFoundError(
            f"{name} (case {case.id}) is made with ffmpeg, and none was found: "
            "`make test` fetches the layer's (make -C layers/ffmpeg local), or set MEDIAJOBS_FFMPEG_DIR"
        )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to write (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="build again even if up to date")
    args = parser.parse_args(argv)
    out = build(args.out, force=args.force)
    for case in all_cases():
        print(f"{case.id}  {', '.join(case.files)}  -> {case.reason or 'success'}")
    print(f"cases in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
