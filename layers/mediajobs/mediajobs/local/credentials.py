"""The embedded AWS's credentials: new ones each time one starts (:func:`new_credentials`),
and where a running ``mediajobs serve`` leaves them for the commands that reach it
(:func:`credentials_file`, :func:`write_credentials_file`, :func:`read_credentials_file`).

The embedded AWS refuses every request not signed with its credentials, as AWS refuses a
request signed with keys it does not know (:mod:`mediajobs.local.authentication`). So
they are a secret of the user who started it: ``serve`` prints them in its ``export``
lines for the user's own shell, and writes them in a file only that user can read (mode
0600, in a folder of the user's: ``$XDG_RUNTIME_DIR/mediajobs/`` when the system gives
one, a private tmpfs on systemd machines, else ``~/.cache/mediajobs/``), keyed by the
port it listens on, and removes it when it stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import string
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

#: Every access key id of an embedded AWS starts so: never an AWS one (``AKIA``, ``ASIA``).
ACCESS_KEY_PREFIX: Final = "LOCAL"
#: The length of an access key id (AWS's are 20 characters) and of a secret access key
#: (AWS's are 40), characters.
ACCESS_KEY_CHARS: Final = 20
SECRET_KEY_CHARS: Final = 40

_KEY_ALPHABET: Final = string.ascii_uppercase + string.digits
_SECRET_ALPHABET: Final = string.ascii_letters + string.digits


def new_credentials() -> dict[str, str]:
    """New random credentials for an embedded AWS, by boto3's names: ``aws_access_key_id``
    (:data:`ACCESS_KEY_PREFIX` then random capitals and digits, :data:`ACCESS_KEY_CHARS` in
    all) and ``aws_secret_access_key`` (:data:`SECRET_KEY_CHARS` random letters and digits:
    about 238 bits, from :mod:`secrets`). No session token: they are long-term keys."""
    key_id = ACCESS_KEY_PREFIX + "".join(
        secrets.choice(_KEY_ALPHABET) for _ in range(ACCESS_KEY_CHARS - len(ACCESS_KEY_PREFIX))
    )
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(SECRET_KEY_CHARS))
    return {"aws_access_key_id": key_id, "aws_secret_access_key": secret}


def credentials_folder(environ: Mapping[str, str] | None = None) -> Path:
    """The user's folder for served credentials: ``$XDG_RUNTIME_DIR/mediajobs`` when
    ``XDG_RUNTIME_DIR`` names a folder (the XDG Base Directory specification: owned by
    the user, mode 0700), else ``~/.cache/mediajobs``."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "mediajobs"
    return Path(env.get("HOME") or Path.home()) / ".cache" / "mediajobs"


def credentials_file(port: int, environ: Mapping[str, str] | None = None) -> Path:
    """Where the ``serve`` listening on ``port`` keeps its credentials:
    ``serve-<port>.json`` in :func:`credentials_folder`."""
    return credentials_folder(environ) / f"serve-{port}.json"


def write_credentials_file(
    port: int, endpoint_url: str, credentials: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> Path:
    """Write ``credentials`` (and ``endpoint_url``) for the ``serve`` on ``port`` to its
    :func:`credentials_file`, readable and writable by this user only (mode 0600; a new
    folder is made 0700), replacing a file a ``serve`` that did not stop left there.

    Returns
    -------
    Path
        The file written.

    Raises
    ------
    OSError
        If the folder cannot be made or the file written.
    """
    path = credentials_file(port, environ)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    record = {
        "endpoint_url": endpoint_url,
        "aws_access_key_id": credentials["aws_access_key_id"],
        "aws_secret_access_key": credentials["aws_secret_access_key"],
    }
    # mkstemp makes the file 0600 before anything is written in it; the rename is atomic.
    handle, temporary = tempfile.mkstemp(prefix=".serve-", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(record, out)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def read_credentials_file(port: int, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The credentials the ``serve`` on ``port`` wrote (``aws_access_key_id``,
    ``aws_secret_access_key``), or ``None`` when there is no such file, it cannot be read,
    or it does not hold them."""
    try:
        record = json.loads(credentials_file(port, environ).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    key_id, secret = record.get("aws_access_key_id"), record.get("aws_secret_access_key")
    if not (isinstance(key_id, str) and key_id and isinstance(secret, str) and secret):
        return None
    return {"aws_access_key_id": key_id, "aws_secret_access_key": secret}


def remove_credentials_file(path: Path, credentials: Mapping[str, str]) -> None:
    """Remove ``path`` when it still holds ``credentials`` (a later ``serve`` on the same
    port may have written its own there); nothing when it is gone already."""
    try:
        held = json.loads(path.read_text()).get("aws_access_key_id")
    except (OSError, ValueError, AttributeError):
        return
    if held == credentials["aws_access_key_id"]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
