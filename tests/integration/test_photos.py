"""Real photos: every variant fits its box in the displayed orientation, orientations
agree pixel for pixel, HEIF rotation is applied once, and no metadata leaks."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.bootstrap import load_recipe
from tests.conftest import MEDIA, media_file

RECIPE = load_recipe("web-image", 1)
BOXES = {v.name: v.box_px for v in RECIPE.params.variants}
PHOTOS = sorted(p.name for p in (MEDIA / "photos").glob("*") if p.suffix != ".md")


def render(path: Path, out: Path):
    files, decisions = PillowRenderer(50_000_000).render(path, RECIPE.params.variants, out)
    return {f.name: f for f in files}, decisions


def displayed_size(path: Path) -> tuple[int, int]:
    """The size a viewer shows: EXIF orientation 5-8 swaps the stored sides (HEIF is reported upright)."""
    with Image.open(path) as im:
        w, h = im.size
        return (h, w) if im.getexif().get(0x0112, 1) in (5, 6, 7, 8) else (w, h)


@pytest.mark.parametrize("name", PHOTOS)
def test_every_photo_fits_its_boxes_in_displayed_orientation(tmp_path, name):
    path = media_file("photos", name)
    files, _ = render(path, tmp_path)
    dw, dh = displayed_size(path)
    assert set(files) == {"thumb", "card", "full"}
    for variant, f in files.items():
        box = BOXES[variant]
        with Image.open(f.path) as im:
            assert im.size == (f.width, f.height)
        assert max(f.width, f.height) == min(box, max(dw, dh)), variant  # fits, never enlarged
        assert (f.width >= f.height) == (dw >= dh), "orientation kept"
        assert abs(f.width / f.height - dw / dh) < 0.02 * max(1.0, dw / dh), variant


def test_the_nine_orientations_give_the_same_upright_pixels(tmp_path):
    thumbs = {}
    for n in range(9):
        out = tmp_path / str(n)
        out.mkdir()
        files, _ = render(media_file("photos", f"orientation-landscape-{n}.jpg"), out)
        with Image.open(files["thumb"].path) as im:
            thumbs[n] = np.asarray(im.convert("RGB"), dtype=float)
    reference = thumbs[1]
    assert reference.shape == (213, 320, 3)
    for n, pixels in thumbs.items():
        assert pixels.shape == reference.shape, n
        assert np.abs(pixels - reference).mean() < 4.0, f"orientation {n} differs from 1"
    # and they are not trivially equal to a mirrored or rotated picture
    assert np.abs(reference[:, ::-1] - reference).mean() > 20


def test_heic_rotation_is_applied_exactly_once(tmp_path):
    files, decisions = render(media_file("photos", "iphone-13-pro-max.heic"), tmp_path)
    assert (files["full"].width, files["full"].height) == (1200, 1600)
    assert decisions.source_format == "HEIF"


def test_avif_with_exif_orientation_is_rotated_once(tmp_path):
    """Pillow writes EXIF orientation of an AVIF as irot/imir; reading it back must not rotate twice."""
    im = Image.new("RGB", (400, 200), (0, 0, 255))
    im.paste((255, 0, 0), (0, 0, 100, 100))
    exif = Image.Exif()
    exif[0x0112] = 6
    source = tmp_path / "rotated.avif"
    im.save(source, format="AVIF", exif=exif.tobytes(), quality=90)
    out = tmp_path / "out"
    out.mkdir()
    files, _ = render(source, out)
    with Image.open(files["thumb"].path) as thumb:
        assert thumb.size == (160, 320)  # orientation 6: rotate 90 clockwise -> portrait
        rgb = np.asarray(thumb.convert("RGB"), dtype=int)
        assert rgb[20, 140, 0] > 180 and rgb[20, 140, 2] < 80  # red corner moved to the top right


@pytest.mark.parametrize("name", ["camera-gps-nikon.jpg", "phone-jolla.jpg", "iphone-13-pro-max.heic"])
def test_no_output_carries_exif_gps_or_xmp(tmp_path, name):
    files, _ = render(media_file("photos", name), tmp_path)
    for f in files.values():
        data = f.path.read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            assert len(im.getexif()) == 0, f.name
            assert "xmp" not in im.info and "exif" not in im.info
            icc = im.info.get("icc_profile")
            assert icc is None or b"sRGB" in icc
        assert b"Exif\x00\x00" not in data and b"xmpmeta" not in data and b"GPS" not in data
