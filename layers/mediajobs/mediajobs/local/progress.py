"""Progress bars for local runs: one per rendition, fed by ffmpeg's ``-progress`` output."""

from __future__ import annotations

import sys
from typing import IO, Any

from tqdm import tqdm


class ProgressBars:
    """One bar per (job, rendition), in seconds of output written; closed at 100 %.

    Parameters
    ----------
    stream: where the bars are drawn (default stderr, so ``--json`` output stays clean).
    enabled: ``None`` draws them only when ``stream`` is a terminal (tqdm's rule); ``True``
        always; ``False`` never.
    """

    def __init__(self, stream: IO[str] | None = None, enabled: bool | None = None) -> None:
        self._stream = stream or sys.stderr
        self._disable = None if enabled is None else not enabled
        self._bars: dict[tuple[str, str], Any] = {}

    def update(self, job_key: str, names: tuple[str, ...], done_s: float, total_s: float) -> None:
        """Move the bars of ``names`` to ``done_s`` of ``total_s`` seconds."""
        for name in names:
            bar = self._bars.get((job_key, name))
            if bar is None:
                bar = tqdm(
                    total=round(total_s, 2),
                    desc=f"{job_key[:12]} {name:>7}",
                    unit="s",
                    file=self._stream,
                    disable=self._disable,
                    leave=True,
                    bar_format="{desc} {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s",
                )
                self._bars[(job_key, name)] = bar
            bar.n = round(min(done_s, total_s), 2)
            bar.refresh()
            if done_s >= total_s:
                bar.close()

    def close(self) -> None:
        """Close every bar still open."""
        for bar in self._bars.values():
            bar.close()
