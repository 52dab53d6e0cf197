"""Inner steps that fail the way a decoder can, for the render child of
:class:`mediajobs.adapters.isolated.IsolatedStep` (built there from
``"tests.integration.bounded_faults:<name>"``: the child's ``sys.path`` is the test's)."""

from __future__ import annotations

import ctypes
import json
import os
import time
from pathlib import Path

from mediajobs.domain.errors import CORRUPT_IMAGE, PermanentFailure
from mediajobs.domain.jobs import RenderedFile
from mediajobs.domain.manifest import RenderDecisions
from mediajobs.domain.recipes import ImageVariantsParams
from mediajobs.service_layer.ports import StepResult


class Fault:
    """An ``image.variants`` step whose ``render(source, variants, out_dir)`` misbehaves."""

    name = "image.variants"
    params_model = ImageVariantsParams

    def run(self, source: Path, params: ImageVariantsParams, context: object, out_dir: Path) -> StepResult:
        files, decisions = self.render(source, params.variants, out_dir)  # type: ignore[attr-defined]
        return StepResult(files, decisions.to_json())


class Crashing(Fault):
    """Dies by SIGSEGV, as a decoder reading through a NULL it did not check."""

    def render(self, source: Path, variants: object, out_dir: Path) -> object:
        return ctypes.string_at(0)


class Allocating(Fault):
    """Asks for ``mb`` MiB at once, as a decoder sizing a frame from the coded data."""

    def __init__(self, mb: int) -> None:
        self.mb = mb

    def render(self, source: Path, variants: object, out_dir: Path) -> object:
        return bytearray(self.mb * 1024 * 1024)


class Sleeping(Fault):
    """Writes its pid to ``out_dir/pid`` and never ends, as a decoder in a CPU bomb."""

    def render(self, source: Path, variants: object, out_dir: Path) -> object:
        (out_dir / "pid").write_text(str(os.getpid()))
        while True:
            time.sleep(1)


class Raising(Fault):
    """Raises an error that is none of the decoders' (a bug of ours)."""

    def render(self, source: Path, variants: object, out_dir: Path) -> object:
        raise LookupError("a bug in the renderer")


class ReportingItself(Fault):
    """Fails permanently with, as the detail, JSON: its ``pid``, its parent's (``ppid``) and
    the names of its environment variables (``environment``)."""

    def render(self, source: Path, variants: object, out_dir: Path) -> object:
        itself = {"pid": os.getpid(), "ppid": os.getppid(), "environment": sorted(os.environ)}
        raise PermanentFailure(CORRUPT_IMAGE, json.dumps(itself))


class Escaping(Fault):
    """Reports an output outside ``out_dir`` (``target``) or a symlink in it pointing there."""

    def __init__(self, target: str, link: bool) -> None:
        self.target, self.link = Path(target), link

    def render(self, source: Path, variants: object, out_dir: Path) -> tuple[list[RenderedFile], RenderDecisions]:
        path = self.target
        if self.link:
            path = out_dir / "thumb.webp"
            path.symlink_to(self.target)
        reported = RenderedFile("thumb", "webp", path, 1, 1, 1, "0" * 64, "image/webp")
        return [reported], RenderDecisions("PNG", 1, 1)
