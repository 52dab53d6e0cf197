"""``mediajobs serve`` as a user runs it (a process of its own): new credentials at each
start, printed in its ``export`` lines and kept for its user alone (mode 0600) while it runs;
the commands that reach it find them there, or in the exported variables, and say what to
do when they find neither."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mediajobs.local.credentials import credentials_file, read_credentials_file

CLI = [sys.executable, "-m", "mediajobs.local.cli"]
EXPORT = re.compile(r"export (AWS_[A-Z_]+)=(\S+)")


def user_environment(runtime: Path) -> dict[str, str]:
    """A user's shell with no AWS settings at all, its runtime folder ``runtime``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(runtime / "home")}


@contextmanager
def serve(env: dict[str, str]) -> Iterator[tuple[str, dict[str, str]]]:
    """A ``mediajobs serve --port 0``: its endpoint and the variables its export lines set,
    once it says it answers; stopped with Ctrl-C (SIGINT) on exit."""
    process = subprocess.Popen(
        [*CLI, "serve", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        lines: list[str] = []
        assert process.stdout is not None
        for line in process.stdout:  # blocks until serve prints: no sleep
            lines.append(line)
            if "press Ctrl-C to stop" in line:
                break
        text = "".join(lines)
        assert "press Ctrl-C to stop" in text, text + (process.stderr.read() if process.stderr else "")
        exports = dict(EXPORT.findall(text))
        yield exports["AWS_ENDPOINT_URL"], exports
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


def status(endpoint: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``mediajobs status`` of a key no upload made, against the serve at ``endpoint``."""
    return subprocess.run(
        [*CLI, "status", "originals/none/nothing.jpg", "--endpoint", endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_each_serve_has_new_credentials_kept_for_its_user_alone_while_it_runs(tmp_path):
    env = user_environment(tmp_path)
    with serve(env) as (endpoint, exports):
        port = int(endpoint.rsplit(":", 1)[1])
        path = credentials_file(port, env)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        first = read_credentials_file(port, env)
        assert first == {
            "aws_access_key_id": exports["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": exports["AWS_SECRET_ACCESS_KEY"],
        }
        # A command in the user's shell finds them in the file: the table is read (no asset).
        found = status(endpoint, env)
        assert (found.returncode, "no asset for originals/none/nothing.jpg" in found.stderr) == (1, True), found.stderr
        # With the exported variables instead (another runtime folder: no file there).
        pasted = {**user_environment(tmp_path / "elsewhere"), **exports}
        (tmp_path / "elsewhere").mkdir()
        assert "no asset for" in status(endpoint, pasted).stderr
        # Neither: the command says what to do.
        lost = status(endpoint, user_environment(tmp_path / "elsewhere"))
        assert lost.returncode == 1 and "no credentials for a serve at" in lost.stderr
        assert "Paste the `export AWS_ACCESS_KEY_ID=" in lost.stderr
        # Other keys in the environment: refused, and said so.
        wrong = status(endpoint, {**pasted, "AWS_SECRET_ACCESS_KEY": "not-the-secret"})
        assert wrong.returncode == 1 and "refused the credentials" in wrong.stderr, wrong.stderr
    assert not path.exists()  # removed when it stopped
    with serve(env) as (endpoint, exports):
        second = read_credentials_file(int(endpoint.rsplit(":", 1)[1]), env)
        assert second is not None and second["aws_access_key_id"] != first["aws_access_key_id"]
        assert second["aws_secret_access_key"] != first["aws_secret_access_key"]


def test_a_port_in_use_is_a_usage_error_naming_it_before_anything_starts(tmp_path):
    """``serve --worker --port P`` takes P, P+1 (the app page) and P+2 (the status function's
    URL): one of them taken by another program is said at once, by number and use, with
    exit 2 -- no traceback, no credentials printed or written for a serve that never ran."""
    import socket

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        for port, what in ((taken, "the embedded AWS"), (taken - 1, "the app page"), (taken - 2, "the status")):
            done = subprocess.run(
                [*CLI, "serve", "--worker", "--port", str(port)],
                env=user_environment(runtime),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 2, done.stderr
            assert f"{taken} ({what}" in done.stderr and "Traceback" not in done.stderr
            assert "export" not in done.stdout
            assert not credentials_file(port, user_environment(runtime)).exists()


def test_the_env_vars_file_holds_the_secret_key_for_its_user_alone(tmp_path):
    """``serve --env-vars FILE`` (every function's environment, for ``sam local invoke``)
    holds the stack's secret access key: it is written mode 0600, even over a file that
    another mode had."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env_file = tmp_path / "env.json"
    env_file.write_text("{}")
    env_file.chmod(0o644)
    process = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--env-vars", str(env_file)],
        env=user_environment(runtime),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:  # blocks until serve prints: no sleep
            if "press Ctrl-C to stop" in line:
                break
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        assert "AWS_SECRET_ACCESS_KEY" in env_file.read_text()
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
