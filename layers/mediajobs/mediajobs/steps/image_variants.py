"""The ``image.variants`` step: resized, re-encoded variants of an image, with Pillow."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from mediajobs.adapters.imaging import MAX_FRAMES, MAX_JPEG_SCANS, PillowRenderer
from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.recipes import ImageVariantsParams
from mediajobs.service_layer.ports import StepResult


class ImageVariantsStep:
    """Renders a recipe's image variants in this process
    (:class:`~mediajobs.adapters.imaging.PillowRenderer`); production runs it in the bounded
    render child (:class:`~mediajobs.adapters.isolated.IsolatedStep`).

    Parameters
    ----------
    max_pixels: the largest picture decoded, pixels (``Settings.max_pixels``).
    max_frames, max_jpeg_scans: the other image limits (``Settings``).
    """

    name: ClassVar[str] = "image.variants"
    params_model: ClassVar[type[ImageVariantsParams]] = ImageVariantsParams

    def __init__(self, max_pixels: int, max_frames: int = MAX_FRAMES, max_jpeg_scans: int = MAX_JPEG_SCANS) -> None:
        self.renderer = PillowRenderer(max_pixels, max_frames=max_frames, max_jpeg_scans=max_jpeg_scans)

    def run(self, source: Path, params: ImageVariantsParams, context: RenderContext, out_dir: Path) -> StepResult:
        """One file per variant in ``out_dir``; the decisions of
        :class:`~mediajobs.domain.manifest.RenderDecisions`.

        Raises
        ------
        PermanentFailure, TransientFailure
            As :meth:`PillowRenderer.render <mediajobs.adapters.imaging.PillowRenderer.render>`.
        """
        files, decisions = self.renderer.render(source, params.variants, out_dir, context)
        return StepResult(files, decisions.to_json())
