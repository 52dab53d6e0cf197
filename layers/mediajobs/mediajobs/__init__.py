"""mediajobs: turn uploads into their derivatives on AWS serverless, exactly once."""

from __future__ import annotations

import json
import platform
from pathlib import Path

__version__ = "0.1.0"

#: Written by the layer's build (layers/mediajobs/Makefile): the architecture its wheels are for.
LAYER_INFO = Path(__file__).with_name("layer.json")


class LayerArchitectureMismatch(ImportError):
    """The mediajobs layer was built for another architecture than the one it runs on."""


def check_layer_architecture(info_path: Path = LAYER_INFO, machine: str | None = None) -> None:
    """Fail at import, with the fix, when the layer's wheels are for another architecture.

    SAM does not pass a template's ``Architecture`` to a makefile build (aws/aws-sam-cli#3349),
    so ``sam build --parameter-overrides Architecture=x86_64`` without ``ARCH=x86_64`` builds
    arm64 wheels, which would otherwise fail deep inside pydantic-core's import. A checkout
    or a pip install has no ``layer.json``: nothing is checked.

    Parameters
    ----------
    info_path: the layer's ``mediajobs/layer.json`` (``{"architecture": "arm64" | "x86_64"}``).
    machine: ``platform.machine()`` by default (``aarch64`` or ``x86_64`` in Lambda).

    Raises
    ------
    LayerArchitectureMismatch
        If the layer's architecture is not this machine's.
    """
    if not info_path.is_file():
        return
    built = json.loads(info_path.read_text())["architecture"]
    raw = machine or platform.machine()
    running = {"aarch64": "arm64", "arm64": "arm64", "x86_64": "x86_64", "amd64": "x86_64"}.get(raw.lower(), raw)
    if built != running:
        raise LayerArchitectureMismatch(
            f"the mediajobs layer was built for {built} but runs on {running}: build it for the "
            f"function's architecture, ARCH={running} sam build --parameter-overrides Architecture={running}"
        )


check_layer_architecture()
