"""Progress bars of local runs: one per rendition, fed by ffmpeg's progress."""

from __future__ import annotations

import io

from mediajobs.local.progress import ProgressBars


def test_one_bar_per_rendition_reaching_100_percent() -> None:
    stream = io.StringIO()
    bars = ProgressBars(stream=stream, enabled=True)
    for done in (0.0, 1.0, 2.0):
        bars.update("a" * 64, ("720p", "360p"), done, 2.0)
    text = stream.getvalue()
    for name in ("720p", "360p"):
        assert f"aaaaaaaaaaaa {name:>7} 100%" in text
        assert f"aaaaaaaaaaaa {name:>7}  50%" in text


def test_no_bars_without_a_terminal_unless_asked() -> None:
    stream = io.StringIO()  # not a terminal
    bars = ProgressBars(stream=stream)
    bars.update("a" * 64, ("720p",), 1.0, 2.0)
    bars.close()
    assert stream.getvalue() == ""
