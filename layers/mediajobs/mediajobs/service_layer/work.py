"""Work folders: one fresh folder per delivery (or per job run without one) under
``settings.work_dir``, removed whatever happens, and the clean-up of a dead worker's at INIT."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: Prefix of the per-record work folders under ``settings.work_dir``. Nothing else the
#: worker or the local tools create is named so (the ffmpeg adapter's unpack folder is
#: ``mediajobs.bin``; the embedded AWS's and ``simulate``'s folders are ``mediajobs.*`` too).
WORK_FOLDER_PREFIX = "mediajobs-"
#: A file every work folder holds from its creation: :func:`remove_work_folders` removes
#: only folders that hold it, never a user's folder that happens to share the prefix.
WORK_FOLDER_MARKER = ".mediajobs-work-folder"


def remove_work_folders(work_dir: str) -> int:
    """Remove every work folder under ``work_dir``, whatever its age; returns how many.

    Called once, when the pipeline is built (Lambda's INIT). A Lambda execution environment
    runs one invocation at a time and a work folder lives no longer than its invocation, so
    any work folder there at INIT was left by a predecessor that died in that sandbox (a
    crash, a timeout or running out of memory skip the cleanup) and holds space the next
    originals need (``/tmp``, the function's ``EphemeralStorage``, survives a restart of the
    sandbox's runtime). Where several workers share a folder at once this does not hold --
    Lambda Managed Instances, or local runs -- so each needs a ``WORK_DIR`` of its own, as
    the local tools give every worker they run (``mediajobs.local``).

    Only folders named :data:`WORK_FOLDER_PREFIX` ``*`` directly under ``work_dir`` that
    hold the :data:`WORK_FOLDER_MARKER` file are removed (``mediajobs-out``, the demo's
    output folder, is not a work folder); errors are ignored (what cannot be removed is
    tried again at the next INIT).
    """
    removed = 0
    try:
        entries = list(Path(work_dir).glob(f"{WORK_FOLDER_PREFIX}*"))
    except OSError:
        return 0
    for folder in entries:
        try:
            marked = (folder / WORK_FOLDER_MARKER).is_file()
            if folder.is_dir() and not folder.is_symlink() and marked:
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def work_folder(work_dir: str) -> Iterator[Path]:
    """A fresh work folder under ``work_dir`` (see :data:`WORK_FOLDER_MARKER`), removed
    whatever happens."""
    folder = Path(tempfile.mkdtemp(prefix=WORK_FOLDER_PREFIX, dir=work_dir))
    try:
        (folder / WORK_FOLDER_MARKER).touch()
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
