"""The ``mediajobs`` command, run as a user runs it (a subprocess)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import case_file, media_file

CLI = [sys.executable, "-m", "mediajobs.local.cli"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_process_json_prints_one_object_per_input(tmp_path):
    photo = str(media_file("photos", "orientation-landscape-6.jpg"))
    empty = str(case_file("I18_empty.jpg"))
    html = str(case_file("I17_html_error_page.jpg"))
    bomb = str(case_file("I14_bomb_60mp_8000x7500.png"))
    out = tmp_path / "out"
    done = run("process", photo, empty, html, bomb, photo, "--out", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["input"] for line in lines] == [photo, empty, html, bomb, photo]
    first, empty_line, html_line, bomb_line, again = lines

    assert set(first) == {"input", "sha256", "media", "state", "reason", "detail", "jobs"}
    assert (first["media"], first["state"], first["reason"], first["detail"]) == ("image", "done", None, None)
    moderation, job, placeholder = first["jobs"]
    assert (moderation["recipe"], moderation["state"], moderation["outputs"]) == ("moderation-image@1", "done", [])
    assert set(job) == {"recipe", "job_key", "state", "reused", "reason", "manifest", "outputs"}
    assert (placeholder["recipe"], placeholder["state"], placeholder["outputs"]) == ("image-placeholder@1", "done", [])
    decisions = json.loads(Path(placeholder["manifest"]).read_text())["decisions"]
    # EXIF orientation 6 turns the stored 1200x1800 picture upright: 1800 wide, 1200 high.
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (1800, 1200)
    assert decisions["dominant_colour"].startswith("#") and decisions["thumbhash"]
    assert (job["recipe"], job["state"], job["reused"], len(job["job_key"])) == ("web-image@1", "done", False, 64)
    assert [(o["name"], o["format"], o["width"], o["height"]) for o in job["outputs"]] == [
        ("thumb", "webp", 320, 213),
        ("card", "webp", 800, 533),
        ("full", "avif", 1600, 1067),
    ]
    for o in job["outputs"]:
        path = Path(o["path"])
        assert path.is_file() and path.stat().st_size == o["bytes"] and out.resolve() in path.resolve().parents
    manifest = json.loads(Path(job["manifest"]).read_text())
    assert manifest["job_key"] == job["job_key"] and "source" not in manifest  # its provenance is private

    assert (again["jobs"][1]["reused"], again["jobs"][1]["job_key"]) == (True, job["job_key"])
    assert empty_line == {
        "input": empty,
        "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "media": None,
        "state": "failed",
        "legacy_state": "permanent_failure",
        "reason": "empty_file",
        "detail": "the object has 0 bytes",
        "jobs": [],
    }
    assert (html_line["state"], html_line["reason"], html_line["jobs"], html_line["media"]) == (
        "failed",
        "unsupported_format",
        [],
        None,
    )
    assert (bomb_line["state"], bomb_line["reason"], bomb_line["media"]) == (
        "failed",
        "too_many_pixels",
        "image",
    )
    assert bomb_line["jobs"][0]["state"] == "failed" and bomb_line["jobs"][0]["outputs"] == []
    assert bomb_line["jobs"][0]["legacy_state"] == "permanent_failure"  # through 0.2.x, as the line's
    assert "legacy_state" not in first["jobs"][0]  # only where the word changed
    assert bomb_line["detail"].startswith("8000x7500 = 60000000 pixels")


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    """``MaxInputBytes`` rules it out by its size: the CLI neither opens nor puts it (the
    script makes opening it fail), and says what the worker would say."""
    big = tmp_path / "big.mov"
    with open(big, "wb") as f:
        f.truncate(209_715_201)  # MaxInputBytes' default + 1: sparse, no disk used
    script = tmp_path / "guarded.py"
    script.write_text(
        "import builtins, sys\n"
        "from mediajobs.local.cli import main\n"
        "real_open = builtins.open\n"
        "def guarded(file, *args, **kwargs):\n"
        f"    if str(file) == {str(big)!r}:\n"
        "        raise AssertionError('the file over the limit was opened')\n"
        "    return real_open(file, *args, **kwargs)\n"
        "builtins.open = guarded\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), "process", str(big), "--out", str(tmp_path / "o"), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(text) for text in done.stdout.splitlines()]
    assert (line["state"], line["reason"], line["sha256"], line["jobs"]) == ("failed", "too_large", None, [])
    assert line["detail"].startswith("209,715,201 bytes (200.0 MiB) > 209,715,200 bytes (200.0 MiB)")
    assert "MaxInputBytes" in line["detail"]


def test_process_missing_file_is_a_usage_error(tmp_path):
    done = run("process", str(tmp_path / "nope.jpg"), "--out", str(tmp_path / "o"), "--json", cwd=tmp_path)
    assert done.returncode == 2 and "nope.jpg" in done.stderr and done.stdout == ""


@pytest.mark.slow
def test_demo_runs_end_to_end_and_renders_nothing_twice(tmp_path):
    out = tmp_path / "demo"
    done = run("demo", "--segment-seconds", "2", "--out", str(out), cwd=tmp_path)  # as make demo runs it
    assert done.returncode == 0, done.stderr
    assert "no render ran twice" in done.stdout
    # both videos split (5.3 s and 10 s in about 2 s segments), and joined
    assert "bigbuckbunny.mp4: split into 3 segments" in done.stdout
    assert "bikes.mp4: split into 5 segments" in done.stdout
    assert "0 renders" in done.stdout.split("second delivery")[1]
    assert "(copy)" in done.stdout and "reused" in done.stdout
    # Each asset told once, to the verifying receiver and the bus; the second delivery of
    # every event told nothing new; each delete told once.
    # The moderation policy: the known-bad test card refused by its hash rule, rendering
    # nothing; the review card held, accepted by the demo's reviewer, then rendered.
    assert "known-bad-card.png: rejected, nothing rendered (rule perceptual:" in done.stdout
    assert "review-card.png: held for review: its renditions wait for a person" in done.stdout
    assert "review accepted by demo:reviewer: originals/demo/10-review-card.png: ready, 3 outputs" in done.stdout
    assert "labels DECLARED for the test cards" in done.stdout and "not a model" in done.stdout
    # The demo album's promo: 7 accepted photos' cards (the copy is the same card, the videos
    # have none, the known-bad card was rejected), its provenance, made once though asked twice.
    promo = done.stdout.split("$ mediajobs promo originals/demo/", 1)[1].split("decision log")[0]
    assert "# again, the album unchanged\npromo of originals/demo/: done, job " in promo
    assert "promo of originals/demo/: done" in promo and "800x450" in promo
    assert "7 frames (asset key <- rendition job key, decision id: its moderation job's key):" in promo
    assert "    originals/demo/10-review-card.png  <- " in promo and ", decision " in promo
    assert "left out: originals/demo/09-known-bad-card.png: rejected by the moderation policy" in promo
    assert (
        "left out: originals/demo/08-copy-of-astronaut.png: the same picture as originals/demo/00-astronaut.png"
        in promo
    )
    assert "requested twice: the same job, 1 render" in promo and (out / "promo.mp4").stat().st_size > 0
    # Every event twice, and the decision log says no identity was processed twice.
    assert "none: every identity was processed once, its duplicates reused" in done.stdout
    assert "notifications: 11 new ids at the webhook (11 deliveries), 11 bus events" in done.stdout
    assert (
        "notifications after the second delivery: 0 new ids at the webhook (0 deliveries), 0 bus events" in done.stdout
    )
    assert "notifications of the deletes: 2 new ids at the webhook (2 deliveries), 2 bus events" in done.stdout
    assert done.stdout.count("  Asset Ready ") == 10 and done.stdout.count("  Asset Deleted ") == 2
    assert done.stdout.count("  Asset Rejected ") == 1
    index = out / "index.html"
    assert str(index) in done.stdout
    page = index.read_text()
    # 6 photos, 2 videos, a copy of the first photo, two test cards, the promo; the first and its copy
    # deleted, and said so
    assert page.count("<section>") + page.count("<section class=deleted>") == 12  # and the album's promo
    assert '<a href="promo.mp4">&#9654; promo</a>' in page
    assert page.count("<section class=deleted>") == 2 and "copies fetched into this folder before the delete" in page
    folders = sorted(p for p in out.iterdir() if p.is_dir() and "known-bad" not in p.name)  # it has none
    assert "rejected by the moderation policy, nothing rendered or shown: rule perceptual:" in page
    videos = {"bigbuckbunny": {"720p.mp4", "360p.mp4", "poster.jpg"}, "bikes": {"source.mp4", "poster.jpg"}}
    for folder in folders:
        video = next((names for stem, names in videos.items() if stem in folder.name), None)
        expected = video or {"thumb.webp", "card.webp", "full.avif"}
        assert {f.name for f in folder.iterdir()} >= expected | {"manifest.json"}, folder
        for name in expected:
            assert f"{folder.name}/{name}" in page
    for stem in videos:  # each video is shown by its poster, with links to its renditions
        folder = next(f for f in folders if stem in f.name)
        assert f'<img src="{folder.name}/poster.jpg"' in page
        for name in videos[stem] - {"poster.jpg"}:
            assert f'<a href="{folder.name}/{name}">' in page


def test_out_must_be_a_folder(tmp_path):
    photo = str(media_file("photos", "canon-40d-small.jpg"))
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    for args in (
        ("process", photo, "--out", str(a_file)),
        ("process", photo, "--out", ""),
        ("demo", "--out", str(a_file)),
        ("demo", "--segment-seconds", "0.5", "--out", str(tmp_path / "d")),
    ):
        done = run(*args, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, args
        assert "--out" in done.stderr or "--segment-seconds" in done.stderr, args


def test_demo_with_a_missing_file_is_a_usage_error(tmp_path):
    done = run("demo", "--out", str(tmp_path / "o"), str(tmp_path / "missing.jpg"), cwd=tmp_path)
    assert done.returncode == 2 and "missing.jpg" in done.stderr and "Traceback" not in done.stderr


def test_a_foreign_template_in_the_working_directory_is_ignored(tmp_path):
    (tmp_path / "template.yaml").write_text("Resources:\n  F:\n    Type: AWS::Serverless::Function\n")
    photo = str(media_file("photos", "canon-40d-small.jpg"))
    done = run("process", photo, "--out", str(tmp_path / "o"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "done"


def test_limits_from_the_environment_apply_to_local_runs(tmp_path):
    photo = str(media_file("photos", "canon-40d-small.jpg"))  # 100x68
    env = {**os.environ, "MAX_PIXELS": "1000"}
    done = subprocess.run(
        [*CLI, "process", photo, "--out", str(tmp_path / "o"), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env=env,
    )
    line = json.loads(done.stdout)
    assert (done.returncode, line["state"], line["reason"]) == (0, "failed", "too_many_pixels")


@pytest.mark.slow
def test_an_input_that_cannot_be_processed_does_not_hide_the_others(tmp_path, monkeypatch):
    """A failure before any job is claimed (here: reading the original always fails) is
    retried by SQS and dead-lettered: exit 1, a message, every other line printed."""
    script = tmp_path / "run.py"
    script.write_text(
        "import dataclasses, sys\n"
        "from mediajobs.local.cli import main\n"
        "class FailingStore:\n"  # wraps the real store (the CLI's test hook), patches nothing
        "    def __init__(self, inner):\n"
        "        self._inner = inner\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(self._inner, name)\n"
        "    def download(self, ref, dest, **kwargs):\n"
        "        if ref.key.endswith('canon-40d-small.jpg'):\n"
        "            raise ConnectionResetError('unexpected')\n"
        "        return self._inner.download(ref, dest, **kwargs)\n"
        "wrap = lambda adapters: dataclasses.replace(adapters, store=FailingStore(adapters.store))\n"
        "sys.exit(main(sys.argv[1:], wrap_adapters=wrap))\n"
    )
    good = str(media_file("photos", "orientation-landscape-1.jpg"))
    bad = str(media_file("photos", "canon-40d-small.jpg"))
    done = subprocess.run(
        [sys.executable, str(script), "process", bad, good, "--out", str(tmp_path / "o"), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 1
    assert [json.loads(line)["input"] for line in done.stdout.splitlines()] == [good]
    assert f"mediajobs: {bad}: " in done.stderr and "dead-letter queue: 1" in done.stderr


def test_invalid_settings_and_unusable_out_are_usage_errors(tmp_path):
    photo = str(media_file("photos", "canon-40d-small.jpg"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    env = {**os.environ, "MAX_PIXELS": "many"}
    bad_env = subprocess.run(
        [*CLI, "process", photo, "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env=env,
    )
    bad_out = run("process", photo, "--out", str(blocker / "sub"), cwd=tmp_path)
    for done in (bad_env, bad_out):
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "MAX_PIXELS" in bad_env.stderr or "many" in bad_env.stderr


@pytest.mark.slow
def test_a_job_that_keeps_failing_ends_attempts_exhausted(tmp_path):
    """A claimed job that fails transiently on every attempt is retried up to MAX_ATTEMPTS
    claims; the next delivery ends it permanent ``attempts_exhausted`` (exit 0: the
    input was answered), not in the dead-letter queue."""
    script = tmp_path / "run.py"
    script.write_text(
        "import dataclasses, sys\n"
        "from mediajobs.local.cli import main\n"
        "class FailingStep:\n"  # wraps the real step (the CLI's test hook), patches nothing
        "    def __init__(self, inner):\n"
        "        self._inner = inner\n"
        "        self.name, self.params_model = inner.name, inner.params_model\n"
        "    def run(self, source, params, context, out_dir):\n"
        "        if source.stat().st_size == 7958:\n"  # canon-40d-small.jpg: always fails
        "            raise ConnectionResetError('unexpected')\n"
        "        return self._inner.run(source, params, context, out_dir)\n"
        "def wrap(adapters):\n"
        "    steps = {n: FailingStep(s) for n, s in adapters.steps.items()}\n"
        "    return dataclasses.replace(adapters, steps=steps)\n"
        "sys.exit(main(sys.argv[1:], wrap_adapters=wrap))\n"
    )
    bad = str(media_file("photos", "canon-40d-small.jpg"))
    done = subprocess.run(
        [sys.executable, str(script), "process", bad, "--out", str(tmp_path / "o"), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    line = json.loads(done.stdout)
    assert (done.returncode, line["state"], line["reason"]) == (0, "failed", "attempts_exhausted")


def test_a_video_failure_names_its_reason_and_the_table_says_why(tmp_path):
    video = str(case_file("V08_moov_missing.mov"))
    done = run("process", video, "--out", str(tmp_path / "o"), "--json", cwd=tmp_path)
    line = json.loads(done.stdout)
    assert (done.returncode, line["state"], line["reason"], line["media"]) == (
        0, "failed", "invalid_media", "video",
    )  # fmt: skip
    assert (line["jobs"][0]["recipe"], line["jobs"][0]["reason"]) == ("moderation-video@1", "invalid_media")
    table = run("process", video, "--out", str(tmp_path / "o2"), cwd=tmp_path)
    assert "failed: invalid_media (moov atom not found)" in table.stdout


FAKE_FFMPEG = """import os, signal, sys, time
with open(os.environ["FAKE_FFMPEG_FIFO"] + ".pid", "w") as f:
    f.write(str(os.getpid()))
fifo = os.open(os.environ["FAKE_FFMPEG_FIFO"], os.O_WRONLY)
os.write(fifo, f"{os.getpid()}\\n".encode())
os.kill(os.getppid(), signal.SIGTERM)  # the CLI is told to stop while "ffmpeg" runs
time.sleep(120)
"""


def test_sigterm_stops_the_cli_and_kills_ffmpeg(tmp_path):
    """A stand-in ffmpeg holds the write end of a FIFO: the test reads end-of-file only once
    every process holding it is gone, so the end-of-file proves the stand-in was killed."""
    from mediajobs.adapters.ffmpeg import find_binaries

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ffprobe").symlink_to(find_binaries().ffprobe)
    (fake / "ffmpeg").write_text(f"#!{sys.executable}\n{FAKE_FFMPEG}")
    (fake / "ffmpeg").chmod(0o755)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "MEDIAJOBS_FFMPEG_DIR": str(fake), "FAKE_FFMPEG_FIFO": str(fifo), "WORK_DIR": str(work)}
    video = str(media_file("video", "white.mp4"))
    try:
        cli = subprocess.run(
            [*CLI, "process", video, "--out", str(tmp_path / "o"), "--json"],
            capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env,
        )  # fmt: skip
        assert cli.returncode == 128 + signal.SIGTERM, cli.stderr
        received = b""
        while True:  # the pid line, then end-of-file once the stand-in is dead
            ready, _, _ = select.select([reader], [], [], 60)
            assert ready, f"the stand-in ffmpeg is still running: {received!r}"
            chunk = os.read(reader, 100)
            if not chunk:
                break
            received += chunk
        assert int(received.decode().split()[0]) > 0  # the stand-in ran and wrote its pid
        assert "Traceback" not in cli.stderr
        assert not list(work.glob("mediajobs-*"))  # its work folder was removed on the way out
    finally:
        os.close(reader)
        pid_file = tmp_path / "fifo.pid"  # written first: a failing run leaves no stand-in behind
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_process_uploads_a_file_under_its_own_name_and_the_manifest_names_it(tmp_path):
    """Spaces, ``+``, ``%`` and non-ASCII letters reach the key as they are (the event then
    carries them URL-encoded, as AWS's do, and the worker decodes them)."""
    name = "My Photo (1) +100% café.jpg"
    (tmp_path / name).write_bytes(media_file("photos", "canon-40d-small.jpg").read_bytes())
    out = tmp_path / "out"
    done = run("process", str(tmp_path / name), "--out", str(out), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(x) for x in done.stdout.splitlines()]
    assert line["state"] == "done" and all(job["state"] == "done" for job in line["jobs"])
    # The public manifest names no original (the worker's decoding of the key is held by
    # tests/functional/test_event_keys.py, from the job's private provenance).
    assert "originals/" not in Path(line["jobs"][0]["manifest"]).read_text()


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count > 65535:
            continue
        try:
            with contextlib.ExitStack() as held:
                for port in range(first, first + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise AssertionError(f"no {count} consecutive free ports")


class Lines:
    """A child's text output, read line by line by a thread of its own (a pipe's buffered
    reader may hold lines that ``select`` does not see)."""

    def __init__(self, stream) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put("")  # the end

    def matching(self, pattern: str, timeout_s: float = 120) -> re.Match[str]:
        """The first line from here on matching ``pattern``.

        Raises AssertionError when the output ends, or has no such line within ``timeout_s``."""
        while True:
            try:
                line = self._lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s: {self.seen}") from None
            assert line, f"the output ended before a line matching {pattern!r}: {self.seen}"
            self.seen.append(line)
            if match := re.search(pattern, line):
                return match


def test_serve_and_listen_take_the_secret_from_the_environment_and_a_file_and_never_show_it_in_ps(tmp_path):
    """``webhook listen`` reads the secret from a file (mode 600), ``serve --worker`` from
    MEDIAJOBS_WEBHOOK_SECRET: an upload to the served stack reaches the listener, which
    verified its signature; neither process's command line (what ``ps`` shows every user)
    holds the secret."""
    import boto3

    from mediajobs.local.commands.served import served_credentials
    from mediajobs.local.notifications import new_webhook_secret

    secret = new_webhook_secret()
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    listen_port, serve_port = _free_ports(1), _free_ports(3)
    env = {k: v for k, v in os.environ.items() if k != "MEDIAJOBS_WEBHOOK_SECRET"}
    listen_argv = ["webhook", "listen", "--port", str(listen_port), "--secret-file", str(secret_file), "--count", "1"]
    serve_argv = ["serve", "--worker", "--port", str(serve_port), "--webhook-url", f"http://127.0.0.1:{listen_port}/"]
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "cwd": tmp_path}
    children = []
    try:
        listen = subprocess.Popen([*CLI, *listen_argv], env=env, **popen)
        children.append(listen)
        listen_out, listen_err = Lines(listen.stdout), Lines(listen.stderr)
        listen_err.matching(r"listening on http://127\.0\.0\.1")
        serve = subprocess.Popen([*CLI, *serve_argv], env={**env, "MEDIAJOBS_WEBHOOK_SECRET": secret}, **popen)
        children.append(serve)
        serve_out = Lines(serve.stdout)
        Lines(serve.stderr)  # drained, so the worker's logs never fill the pipe
        bucket = serve_out.matching(r"embedded AWS at \S+: bucket ([^,]+),").group(1)
        serve_out.matching(r"^dispatcher: .* and to the webhook http://127\.0\.0\.1")
        for child in (listen, serve):
            argv = Path(f"/proc/{child.pid}/cmdline").read_bytes()
            assert secret.encode() not in argv and secret.removeprefix("whsec_").encode() not in argv
        endpoint = f"http://127.0.0.1:{serve_port}"
        credentials = served_credentials(endpoint, environ={})  # the serve's, from its file
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **credentials)
        key = "originals/cli/secret-from-env.jpg"
        s3.put_object(Bucket=bucket, Key=key, Body=media_file("photos", "canon-40d-small.jpg").read_bytes())
        delivery = json.loads(listen_out.matching(r"^\{").string)
        assert (delivery["key"], delivery["type"], delivery["answered"]) == (key, "Asset Ready", 200)
        assert listen.wait(timeout=60) == 0  # --count 1: one verified delivery answered 2xx
        serve.send_signal(signal.SIGINT)
        assert serve.wait(timeout=60) == 0
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=30)
