"""The image render in a child process under the decode memory budget
(mediajobs.adapters.isolated): whatever a file makes the decoder allocate, the worker's
process stays small and the outcome is a permanent failure naming the budget; normal
photos render exactly as in-process."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.adapters.isolated import IsolatedStep, StepSpec
from mediajobs.bootstrap import image_limits, load_recipe, steps
from mediajobs.domain.errors import DeadlineReached, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.manifest import RenderDecisions
from mediajobs.settings import Settings
from tests.conftest import REPO, case_file, media_file

VARIANTS = load_recipe("web-image", 1).params.variants
FAULTS = "tests.integration.bounded_faults"
IMAGE_VARIANTS = "mediajobs.steps.image_variants:ImageVariantsStep"
PHOTO = media_file("photos", "canon-40d-small.jpg")


def faulty(name: str, budget_mb: int = 200, timeout_s: float = 60, **options: object) -> IsolatedStep:
    return IsolatedStep(StepSpec(f"{FAULTS}:{name}", options), memory_budget_mb=budget_mb, timeout_s=timeout_s)


def image_step(settings: Settings) -> IsolatedStep:
    """The image.variants step as production registers it (bounded)."""
    return steps(settings)["image.variants"]


def render(renderer, source: Path, tmp_path: Path):
    """(files, decisions) of a bounded step or of an in-process PillowRenderer."""
    out = tmp_path / "out"
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(renderer, PillowRenderer):
        return renderer.render(source, VARIANTS, out)
    result = renderer.run(source, load_recipe("web-image", 1).params, RenderContext(), out)
    return result.files, RenderDecisions(**result.decisions)


def failure(renderer, source: Path, tmp_path: Path) -> PermanentFailure:
    with pytest.raises(PermanentFailure) as caught:
        render(renderer, source, tmp_path)
    return caught.value


@pytest.fixture(scope="module")
def png_30mp(tmp_path_factory) -> Path:
    """A legitimately big decode: 6400x4800 RGB (92 MB of pixels) in a small PNG."""
    path = tmp_path_factory.mktemp("big") / "30mp.png"
    rows = np.linspace(0, 255, 4800, dtype=np.uint8)[:, None, None]
    Image.fromarray(np.broadcast_to(rows, (4800, 6400, 3)).copy()).save(path, compress_level=9)
    return path


@pytest.mark.parametrize(
    "parts",
    [("photos", "phone-jolla.jpg"), ("photos", "iphone-13-pro-max.heic"), ("photos", "orientation-landscape-6.jpg")],
)
def test_normal_photos_render_under_the_default_budget_exactly_as_in_process(tmp_path, parts):
    source = media_file(*parts)
    bounded_files, bounded = render(image_step(Settings()), source, tmp_path / "bounded")
    direct_files, direct = render(PillowRenderer(Settings().max_pixels), source, tmp_path / "direct")
    assert bounded == direct
    assert [(f.name, f.width, f.height, f.bytes, f.sha256) for f in bounded_files] == [
        (f.name, f.width, f.height, f.bytes, f.sha256) for f in direct_files
    ]
    assert all(f.path.read_bytes() == g.path.read_bytes() for f, g in zip(bounded_files, direct_files, strict=True))


def test_a_case_with_alpha_and_its_pixels_come_back_the_same(tmp_path):
    source = case_file("I08_palette_trns.png")
    files, decisions = render(image_step(Settings()), source, tmp_path)
    assert decisions.alpha and decisions.mode == "P->RGBA"
    with Image.open(files[0].path) as thumb:
        assert thumb.mode == "RGBA" and thumb.getpixel((0, 0))[3] == 0


@pytest.mark.parametrize("zygote", [True, False], ids=["forked-from-the-zygote", "one-shot"])
def test_a_big_decode_over_a_small_budget_is_memory_limit_exceeded(tmp_path, png_30mp, zygote):
    settings = Settings(decode_memory_mb=100)
    step = IsolatedStep(
        StepSpec(IMAGE_VARIANTS, image_limits(settings)), memory_budget_mb=100, timeout_s=60, zygote=zygote
    )
    failed = failure(step, png_30mp, tmp_path)
    assert failed.reason == "memory_limit_exceeded"
    assert "decode memory budget of 100 MB" in failed.detail
    assert list((tmp_path / "out").iterdir()) == []


_PARENT = """
import json, sys
from pathlib import Path
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.bootstrap import image_limits, load_recipe, steps
from mediajobs.domain.jobs import RenderContext
from mediajobs.settings import Settings
params = load_recipe("web-image", 1).params
bounded = steps(Settings(decode_memory_mb=100))["image.variants"]
before = hwm()
try:
    if sys.argv[1] == "bounded":
        bounded.run(Path(sys.argv[2]), params, RenderContext(), Path(sys.argv[3]))
    else:
        PillowRenderer(50_000_000).render(Path(sys.argv[2]), params.variants, Path(sys.argv[3]))
    reason = None
except Exception as exc:
    reason = getattr(exc, "reason", type(exc).__name__)
print(json.dumps({"reason": reason, "grew_mb": hwm() - before}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads VmHWM from /proc")
@pytest.mark.parametrize(("mode", "reason"), [("bounded", "memory_limit_exceeded"), ("in-process", None)])
def test_the_workers_own_peak_stays_where_it_was_when_the_decode_is_bounded(tmp_path, png_30mp, mode, reason):
    """The worker's peak RSS (VmHWM, in a fresh interpreter) grows by less than a tenth of
    the decode with the bounded renderer; in-process the same file adds the whole decode."""
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _PARENT, mode, str(png_30mp), str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["reason"] == reason
    decoded_mb = 6400 * 4800 * 3 // 2**20  # 87 MiB of pixels, before any conversion
    assert (result["grew_mb"] < decoded_mb // 10) is (mode == "bounded"), result


def test_a_heic_over_a_tiny_budget_ends_permanent_when_libheif_aborts(tmp_path):
    """libheif/libde265 (C++) cannot start their threads or allocate: the child aborts
    (std::system_error, std::bad_alloc) or exits from the loader; the worker names the budget."""
    failed = failure(
        image_step(Settings(decode_memory_mb=40)), media_file("photos", "iphone-13-pro-max.heic"), tmp_path
    )
    assert failed.reason == "memory_limit_exceeded"
    assert "decode memory budget of 40 MB" in failed.detail


def test_a_single_huge_allocation_is_memory_limit_exceeded(tmp_path):
    failed = failure(faulty("Allocating", budget_mb=64, mb=512), media_file("photos", "canon-40d-small.jpg"), tmp_path)
    assert (failed.reason, "MemoryError" in failed.detail) == ("memory_limit_exceeded", True)


def test_a_decoder_crash_is_permanent_and_the_worker_survives(tmp_path):
    failed = failure(faulty("Crashing"), media_file("photos", "canon-40d-small.jpg"), tmp_path)
    assert failed.reason == "memory_limit_exceeded"
    assert "SIGSEGV" in failed.detail and "may also be a decoder crash" in failed.detail


def test_a_render_past_its_deadline_is_killed_and_the_claim_comes_back(tmp_path):
    zygote = itself(tmp_path / "before")["ppid"]
    with pytest.raises(DeadlineReached):
        render(faulty("Sleeping", timeout_s=2), PHOTO, tmp_path)
    pid = int((tmp_path / "out" / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # reaped, not left running
        os.kill(pid, 0)
    assert itself(tmp_path / "after")["ppid"] == zygote  # the next render forks from the same zygote
    files, _ = render(image_step(Settings()), PHOTO, tmp_path / "photo")
    assert len(files) == 3


def test_a_stopped_zygote_is_replaced_within_the_invocations_margin(tmp_path):
    """A zygote that cannot answer (stopped with SIGSTOP): the render ends
    ``DeadlineReached`` at its deadline and the zygote is replaced. Any wait for a zygote's
    answer after the deadline is a small share of the margin the invocation keeps for
    releasing its claims."""
    from mediajobs.adapters.isolated import KILLED_CHILD_WAIT_S

    assert Settings().deadline_margin_s / 4 >= KILLED_CHILD_WAIT_S
    zygote = itself(tmp_path / "before")["ppid"]
    os.kill(zygote, signal.SIGSTOP)
    try:
        with pytest.raises(DeadlineReached):
            render(faulty("Sleeping", timeout_s=2), PHOTO, tmp_path)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(zygote, signal.SIGCONT)
    assert itself(tmp_path / "after")["ppid"] != zygote  # a fresh zygote


def test_an_error_that_is_not_the_inputs_is_transient(tmp_path):
    with pytest.raises(TransientFailure, match="LookupError: a bug in the renderer"):
        render(faulty("Raising"), media_file("photos", "canon-40d-small.jpg"), tmp_path)


@pytest.mark.parametrize("link", [False, True])
def test_an_output_outside_the_work_folder_is_never_accepted(tmp_path, link):
    with pytest.raises(TransientFailure, match="outside"):
        render(
            faulty("Escaping", target="/etc/hostname", link=link), media_file("photos", "canon-40d-small.jpg"), tmp_path
        )


def itself(tmp_path: Path, step: IsolatedStep | None = None) -> dict:
    """What a render child reports of itself (bounded_faults.ReportingItself)."""
    return json.loads(failure(step or faulty("ReportingItself"), PHOTO, tmp_path).detail)


def in_a_new_thread(work):
    """``work()``'s result, run in a thread of its own (which starts its own zygote)."""
    results: list = []
    thread = threading.Thread(target=lambda: results.append(work()))
    thread.start()
    thread.join()
    return results[0]


def gone(pids: list[int], timeout_s: float = 60) -> list[int]:
    """Those of ``pids`` that have ended within ``timeout_s`` (waiting on pidfds, Linux 5.3+)."""
    fds = {os.pidfd_open(pid): pid for pid in pids}
    try:
        readable, _, _ = select.select(list(fds), [], [], timeout_s)
        ended = {fds[fd] for fd in readable}
        waiting = [fd for fd in fds if fds[fd] not in ended]
        if waiting:  # each pidfd turns readable on its own: wait for the rest too
            readable, _, _ = select.select(waiting, [], [], timeout_s)
            ended |= {fds[fd] for fd in readable}
        return sorted(ended)
    finally:
        for fd in fds:
            os.close(fd)


def proc_status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return value.strip()
    raise KeyError(field)


def is_zygote(pid: int) -> bool:
    return b"--zygote" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def test_the_child_gets_no_aws_credentials(tmp_path, monkeypatch):
    """Nor does the zygote started while the worker has them (a fresh thread starts one)."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-pass")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "do-not-pass")
    reported = in_a_new_thread(lambda: itself(tmp_path))
    names = reported["environment"]
    assert not [name for name in names if name.startswith("AWS_")]
    assert "MALLOC_ARENA_MAX" in names and "PYTHONPATH" in names


def test_renders_through_one_step_are_forked_from_one_zygote(tmp_path):
    """One interpreter start for many renders: every child's parent is the same zygote,
    a single-threaded process that is not the worker (NumPy imported, by thash, included)."""
    step = faulty("ReportingItself")
    placeholder = steps(Settings())["image.placeholder"]
    placeholder.run(PHOTO, placeholder.params_model(box_px=100), RenderContext(), tmp_path)
    children = [itself(tmp_path / str(n), step) for n in range(4)]
    zygotes = {child["ppid"] for child in children}
    assert len(zygotes) == 1 and len({child["pid"] for child in children}) == 4
    zygote = zygotes.pop()
    assert zygote != os.getpid() and is_zygote(zygote)
    assert proc_status(zygote, "PPid") == str(os.getpid())
    assert proc_status(zygote, "Threads") == "1"


def test_a_zygote_killed_between_renders_is_replaced_and_the_render_succeeds(tmp_path):
    zygote = itself(tmp_path / "first")["ppid"]
    os.kill(zygote, signal.SIGKILL)
    files, _ = render(image_step(Settings()), PHOTO, tmp_path)
    assert len(files) == 3
    replacement = itself(tmp_path / "then")["ppid"]
    assert replacement != zygote and is_zygote(replacement)


def test_a_zygote_dies_with_the_thread_that_started_it(tmp_path):
    """PR_SET_PDEATHSIG fires when the starting thread ends (prctl(2)): one zygote per thread."""
    zygote = in_a_new_thread(lambda: itself(tmp_path))["ppid"]
    assert gone([zygote]) == [zygote]


_WORKER = """
import sys
from pathlib import Path
from mediajobs.adapters.isolated import IsolatedStep, StepSpec
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.jobs import RenderContext
step = IsolatedStep(StepSpec("tests.integration.bounded_faults:Sleeping"), memory_budget_mb=200, timeout_s=600)
step.run(Path(sys.argv[1]), load_recipe("web-image", 1).params, RenderContext(), Path(sys.argv[2]))
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on pidfds (Linux)")
def test_when_the_worker_dies_its_zygote_and_render_child_die(tmp_path):
    """The PR_SET_PDEATHSIG chain: worker -> zygote -> render child."""
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "pid")
    # Read and write ends held here: the open never blocks, the read waits for the child's pid.
    fifo = os.open(out / "pid", os.O_RDWR | os.O_NONBLOCK)
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the faults' module, for the worker and its children
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, str(PHOTO), str(out)], cwd=REPO, env=env)
    try:
        readable, _, _ = select.select([fifo], [], [], 120)
        assert readable, "the render child never wrote its pid"
        child = int(os.read(fifo, 100))
        zygote = int(proc_status(child, "PPid"))
        assert is_zygote(zygote) and proc_status(zygote, "PPid") == str(worker.pid)
        worker.kill()
        assert worker.wait(timeout=60) == -signal.SIGKILL
        assert gone([zygote, child]) == sorted([zygote, child])
    finally:
        os.close(fifo)
        if worker.poll() is None:
            worker.kill()
            worker.wait()
