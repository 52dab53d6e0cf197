"""Every refusal over a limit names the limit, the setting that sets it and what a user can
change (``domain/errors.py``'s ``Limit``): a user reading ``too_large`` or ``too_long`` in
a status document or ``process --json`` knows what to do without reading the code."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.jobs import ObjectRef, SourceState, size_refusal
from mediajobs.domain.video import Budget, check_budget, plan_renditions
from mediajobs.settings import Settings
from tests.fakes import FakeLedger, FakeSources, FakeStore, pipeline_on
from tests.unit.test_video_domain import PARAMS, _probe

BUDGET = Budget(speed_factor=1.0, max_duration_s=1800, invocation_s=880, free_bytes=10**10, capacity_bytes=10**10)


def test_too_large_names_max_input_bytes_in_readable_units():
    reason, detail = size_refusal(452_790_050, 209_715_200)
    assert reason == "too_large"
    assert detail.startswith("452,790,050 bytes (431.8 MiB) > 209,715,200 bytes (200.0 MiB)")
    assert "MaxInputBytes" in detail and "MAX_INPUT_BYTES" in detail and "smaller file" in detail


@pytest.mark.parametrize(
    ("probe", "budget", "reason", "setting"),
    [
        (_probe(duration_s=3600.0), BUDGET, "too_long", "MAX_VIDEO_SECONDS"),
        (_probe(duration_s=1000.0, coded_width=1920, coded_height=1080), BUDGET, "too_long", "Timeout"),
        (_probe(duration_s=600.0), Budget(1.0, 1800, 880, 10**8, 10**8), "too_large", "EphemeralStorage"),
    ],
    ids=["duration", "estimated-work", "outputs-on-disk"],
)
def test_a_video_refusal_names_what_limits_it(probe, budget, reason, setting):
    with pytest.raises(PermanentFailure) as caught:
        check_budget(probe, plan_renditions(probe, PARAMS), budget)
    assert caught.value.reason == reason
    assert setting in caught.value.detail and "the limit is" in caught.value.detail


def test_too_many_pixels_names_max_pixels(tmp_path: Path):
    path = tmp_path / "wide.png"
    Image.new("RGB", (400, 300)).save(path)
    with pytest.raises(PermanentFailure) as caught:
        PillowRenderer(max_pixels=100_000).decode(path, 320)
    assert caught.value.reason == "too_many_pixels"
    assert caught.value.detail.startswith("400x300 = 120000 pixels > 100000")
    assert "MaxPixels" in caught.value.detail and "MAX_PIXELS" in caught.value.detail


def test_an_original_larger_than_the_workers_disk_names_ephemeral_storage(tmp_path: Path):
    class TinyDisk:
        total, free = 1_000, 1_000

    log: list = []
    pipeline = pipeline_on(
        Settings(work_dir=str(tmp_path)),
        store=FakeStore({"originals/a.jpg": b"x" * 2_000}, log),
        ledger=FakeLedger(log),
        sources=FakeSources(log),
        steps={},
        recipes={"image": []},
        detect_media=lambda path, key: "image",
        disk_usage=lambda folder: TinyDisk(),
    )
    result = pipeline.process(ObjectRef("bucket", "originals/a.jpg", None, 2_000, sequencer="1"))
    assert (result.state, result.reason) == (SourceState.PERMANENT_FAILURE, "too_large")
    assert "EphemeralStorage" in (result.detail or "")  # the disk, not MaxInputBytes


def test_the_table_keeps_a_refusals_setting_and_cuts_a_long_detail_at_a_word():
    from mediajobs.local.commands.common import because

    _, detail = size_refusal(452_790_050, 209_715_200)
    assert because(detail) == f" ({detail})" and "MaxInputBytes" in because(detail)
    long = "word " * 200
    cut = because(long)
    assert cut.endswith(" ...)") and len(cut) <= 406 and "wor ..." not in cut
    assert because(None) == because("") == ""


def test_the_longest_refusal_is_shown_whole_in_the_table():
    """The estimated-work refusal, the longest (about 300 characters), keeps its way out."""
    probe = _probe(duration_s=1000.0, coded_width=1920, coded_height=1080)
    with pytest.raises(PermanentFailure) as caught:
        check_budget(probe, plan_renditions(probe, PARAMS), BUDGET)
    from mediajobs.local.commands.common import because

    assert because(caught.value.detail) == f" ({caught.value.detail})"
