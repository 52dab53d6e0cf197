"""How a render child's end becomes the render's outcome (mediajobs.adapters.isolated.interpret)
and the decode memory budget setting. No child process is started here."""

from __future__ import annotations

import hashlib
import signal

import pytest

from mediajobs.adapters.isolated import MB, ChildExit, IsolatedStep, StepSpec, interpret
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import DeadlineReached, PermanentFailure, TransientFailure
from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.manifest import RenderDecisions
from mediajobs.settings import Settings
from tests.conftest import REPO

BUDGET = 1536 * MB
READY = {"event": "ready", "baseline_bytes": 55 * MB, "limit_bytes": 55 * MB + BUDGET}
DECISIONS = RenderDecisions("JPEG", 640, 480)
IMAGE_VARIANTS = "mediajobs.steps.image_variants:ImageVariantsStep"


def test_a_bounded_step_is_the_inner_steps_name_and_params():
    step = IsolatedStep(StepSpec(IMAGE_VARIANTS), memory_budget_mb=10, timeout_s=60)
    assert (step.name, step.params_model.__name__) == ("image.variants", "ImageVariantsParams")


def ended(*reports: dict, returncode: int = 0, timed_out: bool = False, stderr: str = "") -> ChildExit:
    return ChildExit(returncode, timed_out, reports, stderr)


def outcome(exit_: ChildExit, out_dir):
    return interpret(exit_, out_dir=out_dir, budget_bytes=BUDGET, waited_s=12.0)


def file_report(path) -> dict:
    data = path.read_bytes()
    return {
        "name": "thumb",
        "format": "webp",
        "path": str(path),
        "width": 4,
        "height": 3,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "content_type": "image/webp",
    }


def test_a_finished_render_gives_its_files_and_decisions(tmp_path):
    (tmp_path / "thumb.webp").write_bytes(b"RIFF")
    done = {"event": "done", "files": [file_report(tmp_path / "thumb.webp")], "decisions": DECISIONS.to_json()}
    result = outcome(ended(READY, done), tmp_path)
    assert result.decisions == DECISIONS.to_json()
    assert [(f.name, f.path, f.bytes) for f in result.files] == [("thumb", tmp_path / "thumb.webp", 4)]


@pytest.mark.parametrize("where", ["outside", "missing", "symlink", "subfolder"])
def test_a_reported_file_must_be_a_regular_file_directly_in_the_output_folder(tmp_path, where):
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "secret"
    outside.write_bytes(b"credentials")
    path = {
        "outside": outside,
        "missing": out / "thumb.webp",
        "symlink": out / "thumb.webp",
        "subfolder": out / "sub" / "thumb.webp",
    }[where]
    if where == "symlink":
        path.symlink_to(outside)
    if where == "subfolder":
        path.parent.mkdir()
        path.write_bytes(b"RIFF")
    report = {**file_report(outside), "path": str(path)}
    with pytest.raises(TransientFailure, match="outside"):
        outcome(ended(READY, {"event": "done", "files": [report], "decisions": DECISIONS.to_json()}), out)


def test_a_permanent_failure_passes_through_with_its_reason(tmp_path):
    failed = {"event": "failed", "reason": "unsupported_feature", "detail": "RuntimeError: Reformat failed"}
    with pytest.raises(PermanentFailure) as caught:
        outcome(ended(READY, failed), tmp_path)
    assert (caught.value.reason, caught.value.detail) == ("unsupported_feature", "RuntimeError: Reformat failed")


@pytest.mark.parametrize(
    "report",
    [
        {"event": "memory", "detail": "MemoryError"},
        {"event": "failed", "reason": "memory_limit_exceeded", "detail": "OSError: [Errno 12] Cannot allocate memory"},
    ],
)
def test_an_allocation_failure_names_the_budget_and_the_limit(tmp_path, report):
    with pytest.raises(PermanentFailure) as caught:
        outcome(ended(READY, report), tmp_path)
    assert caught.value.reason == "memory_limit_exceeded"
    assert "the decode memory budget of 1536 MB (address-space limit 1591 MB)" in caught.value.detail


def test_a_timeout_is_the_deadline_whatever_the_child_wrote(tmp_path):
    with pytest.raises(DeadlineReached, match="12.0 s"):
        outcome(ended(READY, returncode=-signal.SIGKILL, timed_out=True), tmp_path)


def test_an_exception_that_is_not_the_inputs_is_transient(tmp_path):
    with pytest.raises(TransientFailure, match="ConnectionResetError: peer reset"):
        outcome(ended(READY, {"event": "error", "type": "ConnectionResetError", "message": "peer reset"}), tmp_path)


def test_a_codec_error_at_the_limit_is_the_budgets_not_a_retry(tmp_path):
    """libaom reports its failed allocation as "Encoding of color planes failed" (an 8 MP JPEG
    under a 60 MB budget): a render that failed with most of its budget taken fails so on
    every retry, so it is ``memory_limit_exceeded``, not transient until attempts_exhausted."""
    error = {
        "event": "error",
        "type": "RuntimeError",
        "message": "Failed to encode image: Encoding of color planes failed",
        "peak": {"peak_vm_mb": (55 * MB + 0.8 * BUDGET) / MB, "peak_rss_mb": 900.0},
    }
    with pytest.raises(PermanentFailure) as failed:
        outcome(ended(READY, error), tmp_path)
    assert failed.value.reason == "memory_limit_exceeded"
    assert "Encoding of color planes failed" in failed.value.detail and "1536 MB" in failed.value.detail
    early = {**error, "peak": {"peak_vm_mb": (55 * MB + 0.1 * BUDGET) / MB, "peak_rss_mb": 90.0}}
    with pytest.raises(TransientFailure):
        outcome(ended(READY, early), tmp_path)


def test_a_child_that_ends_before_its_limit_is_set_is_transient(tmp_path):
    with pytest.raises(TransientFailure, match="ModuleNotFoundError"):
        outcome(ended(returncode=1, stderr="ModuleNotFoundError: No module named 'PIL'\n"), tmp_path)


@pytest.mark.parametrize(
    ("number", "stderr", "telling"),
    [
        (signal.SIGABRT, "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n"
         "Fatal Python error: Aborted\n\nCurrent thread:\n  File \"x.py\", line 1\n", "std::bad_alloc"),
        (signal.SIGKILL, "", ""),
    ],
)  # fmt: skip
def test_death_by_a_signal_under_the_limit_is_memory_limit_exceeded(tmp_path, number, stderr, telling):
    with pytest.raises(PermanentFailure) as caught:
        outcome(ended(READY, returncode=-number, stderr=stderr), tmp_path)
    assert caught.value.reason == "memory_limit_exceeded"
    assert signal.Signals(number).name in caught.value.detail and telling in caught.value.detail


def test_a_crash_without_an_allocation_failure_says_it_may_be_the_decoder(tmp_path):
    with pytest.raises(PermanentFailure) as caught:
        outcome(ended(READY, returncode=-signal.SIGSEGV, stderr="Fatal Python error: Segmentation fault\n"), tmp_path)
    assert caught.value.reason == "memory_limit_exceeded"
    assert "SIGSEGV" in caught.value.detail and "may also be a decoder crash" in caught.value.detail


def test_an_exit_without_a_report_is_memory_only_when_stderr_says_so(tmp_path):
    loader = "cannot allocate memory for thread-local data: ABORT\n"
    with pytest.raises(PermanentFailure, match="memory_limit_exceeded"):
        outcome(ended(READY, returncode=127, stderr=loader), tmp_path)
    with pytest.raises(TransientFailure, match="status 3"):
        outcome(ended(READY, returncode=3, stderr="something else\n"), tmp_path)


@pytest.mark.parametrize(
    "report",
    [{"event": "done", "files": [{"name": "x"}], "decisions": {}}, {"event": "failed", "reason": "no_such_code"}, {}],
)
def test_an_unreadable_report_is_transient(tmp_path, report):
    with pytest.raises(TransientFailure, match="render child sent"):
        outcome(ended(READY, report), tmp_path)


@pytest.mark.parametrize("factory", ["PillowRenderer", "mediajobs.adapters.imaging", "a b:c", ":x", "m:not-a-name"])
def test_a_factory_is_module_colon_name(factory):
    with pytest.raises(ValueError):
        StepSpec(factory)


def test_options_must_be_json():
    with pytest.raises(TypeError):
        StepSpec("m:f", {"when": object()})


def test_no_child_is_started_without_time_left(tmp_path):
    renderer = IsolatedStep(
        StepSpec(IMAGE_VARIANTS), memory_budget_mb=10, timeout_s=60, margin_s=10, python=str(tmp_path / "no-python")
    )
    with pytest.raises(DeadlineReached):
        params = load_recipe("web-image", 1).params
        renderer.run(tmp_path / "x.jpg", params, RenderContext(remaining_s=lambda: 9.0), tmp_path)


def test_the_deadline_is_the_time_left_less_the_margin_within_the_timeout():
    renderer = IsolatedStep(StepSpec(IMAGE_VARIANTS), memory_budget_mb=10, timeout_s=60, margin_s=10)
    assert renderer._deadline_s(None) == 60
    assert renderer._deadline_s(RenderContext(remaining_s=lambda: 30.0)) == 20
    assert renderer._deadline_s(RenderContext(remaining_s=lambda: 300.0)) == 60
    assert renderer._deadline_s(RenderContext()) == 60  # no invocation deadline (local runs)


def test_the_decode_memory_budget_is_a_setting():
    assert Settings.from_env({}).decode_memory_mb == 1536
    assert Settings.from_env({"DECODE_MEMORY_MB": "512"}).decode_memory_mb == 512
    with pytest.raises(ValueError):
        Settings.from_env({"DECODE_MEMORY_MB": "0"})


def test_the_default_budget_fits_the_functions_memory_with_room_for_the_worker():
    """The budget comes out of the template's MemorySize: the worker process (75 MB with its
    clients), the child's baseline (60 MB) and room for S3 transfers and the page cache
    (256 MB) must fit beside it, or a render within budget could still get the function
    killed (benchmarks/peak_memory.py measured the figures)."""
    from mediajobs.local.template import load_template

    worker = load_template(REPO / "template.yaml")["Resources"]["WorkerFunction"]["Properties"]
    assert Settings().decode_memory_mb + 75 + 60 + 256 <= worker["MemorySize"]
