"""Every pixel mode Pillow can hand us keeps its look: a left-to-right ramp stays a ramp,
and alpha stays where the output format has it. (PA exists only in memory: no file
format stores it; palette transparency is case I08.)"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.bootstrap import load_recipe

VARIANTS = load_recipe("web-image", 1).params.variants


def ramp(mode: str) -> tuple[Image.Image, str]:
    """A 512x64 dark-to-light ramp in ``mode`` and the file format that stores it."""
    x = np.tile(np.linspace(0, 1, 512), (64, 1))
    if mode == "I;16":
        return Image.fromarray((x * 65535).astype(np.uint16)), "PNG"
    if mode == "I":
        return Image.fromarray((x * 65535).astype(np.int32)), "TIFF"
    if mode == "F":
        return Image.fromarray((x * 2 - 1).astype(np.float32)), "TIFF"
    grey = Image.fromarray((x * 255).astype(np.uint8))
    if mode == "1":
        return grey.convert("1", dither=Image.Dither.FLOYDSTEINBERG), "PNG"
    if mode == "LA":
        return Image.merge("LA", (grey, Image.new("L", grey.size, 200))), "PNG"
    if mode == "RGBA":
        return Image.merge("RGBA", (grey, grey, grey, Image.new("L", grey.size, 200))), "PNG"
    if mode == "CMYK":
        return grey.convert("RGB").convert("CMYK"), "TIFF"
    if mode == "P":
        return grey.convert("RGB").convert("P", palette=Image.Palette.ADAPTIVE, colors=64), "PNG"
    return grey.convert(mode), "PNG"


@pytest.mark.parametrize("mode", ["1", "L", "LA", "P", "RGB", "RGBA", "CMYK", "I;16", "I", "F"])
def test_mode_keeps_its_look(tmp_path, mode):
    image, fmt = ramp(mode)
    source = tmp_path / f"source.{fmt.lower()}"
    image.save(source, format=fmt)
    out = tmp_path / "out"
    out.mkdir()
    files, decisions = PillowRenderer(50_000_000).render(source, VARIANTS, out)
    has_alpha = mode in ("LA", "RGBA")
    assert decisions.alpha is has_alpha
    for f in files:
        with Image.open(f.path) as im:
            assert im.mode == ("RGBA" if has_alpha else "RGB"), f.name
            grey = np.asarray(im.convert("L"), dtype=float)
            if has_alpha:
                assert abs(np.asarray(im.getchannel("A"), dtype=float).mean() - 200) < 3
        w = grey.shape[1]
        assert grey[:, : w // 10].mean() < 40 and grey[:, -(w // 10) :].mean() > 215, (mode, f.name)
