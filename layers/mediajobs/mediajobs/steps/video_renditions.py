"""The ``video.renditions`` step: an H.264 ladder, the source rendition and a poster frame,
with ffmpeg.

The ffmpeg adapter (its runner and the video plans) is imported at the first video, not
when the handler is imported (Lambda's INIT, paid by every cold start).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.recipes import VideoRenditionsParams
from mediajobs.service_layer.ports import StepResult

if TYPE_CHECKING:
    from mediajobs.adapters.video import FfmpegRenderer


class VideoRenditionsStep:
    """Renders a recipe's renditions with the renderer ``make`` builds at the first video.

    Parameters
    ----------
    make: builds the :class:`~mediajobs.adapters.video.FfmpegRenderer`; called once.
    """

    name: ClassVar[str] = "video.renditions"
    params_model: ClassVar[type[VideoRenditionsParams]] = VideoRenditionsParams

    def __init__(self, make: Callable[[], FfmpegRenderer]) -> None:
        self._make = make
        self._renderer: FfmpegRenderer | None = None

    def run(self, source: Path, params: VideoRenditionsParams, context: RenderContext, out_dir: Path) -> StepResult:
        """The renditions and the poster in ``out_dir``; the decisions of
        :class:`~mediajobs.domain.video.VideoDecisions`.

        A part of a split video renders that part
        (:meth:`~mediajobs.adapters.video.FfmpegRenderer.render_part`); a split video whose
        parts are done joins them (:meth:`~mediajobs.adapters.video.FfmpegRenderer.join`).

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`FfmpegRenderer.render <mediajobs.adapters.video.FfmpegRenderer.render>`.
        SplitNeeded
            The video is long enough to split (the runner fans it out).
        """
        if self._renderer is None:
            self._renderer = self._make()
        if context.part is not None:  # one part of a split video
            return StepResult(*self._renderer.render_part(source, params, out_dir, context))
        if context.split is not None:  # a split video whose parts are done: the join
            return StepResult(*self._renderer.join(source, params, out_dir, context))
        files, decisions = self._renderer.render(source, params, out_dir, context)
        return StepResult(files, decisions.to_json())
