"""HEIF overlays (``iovl``) through the real renderer (pi-heif, libheif), on files written here
at run time: HEVC pictures coded by pillow-heif (x265), the overlay written box by box
(``tests/media/bmff_write.py``), since no encoder we have writes one.

What every variant must show is the primary image as the specification composes it
(ISO/IEC 23008-12, ImageOverlay): a canvas of the descriptor's size filled with its
canvas_fill_value (libheif keeps the top 8 bits of each 16-bit value), the inputs drawn over
it in order at their offsets, the parts outside the canvas left out. The expected pictures
are drawn here with Pillow's ``paste`` (which clips the same way), independently of the
renderer's code.
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
import pillow_heif
import pytest
from PIL import Image

from mediajobs.adapters import imaging
from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import PermanentFailure
from tests.conftest import MEDIA, load_script

bmff = load_script("bmff_write", MEDIA / "bmff_write.py")

VARIANTS = load_recipe("web-image", 1).params.variants
RED, YELLOW, BLUE = (220, 30, 30), (230, 200, 40), (40, 60, 200)
INPUT_PX = (480, 320)
CANVAS_PX = (1000, 680)
#: The variants of a 1000x680 picture in the recipe's boxes (thumb 320, card 800, full 1600; never upscaled).
CANVAS_VARIANTS = {"thumb": (320, 218), "card": (800, 544), "full": (1000, 680)}
#: A canvas_fill_value (16-bit RGBA) and the 8-bit colour libheif fills with.
FILL_RGBA, FILL_RGB = (0x1000, 0x8000, 0xFFFF, 0xFFFF), (0x10, 0x80, 0xFF)
#: x265 as the case makers run it: deterministic, fast.
X265_PARAMS = {"preset": "ultrafast", "x265:pools": "none", "x265:frame-threads": "1"}


@functools.cache
def _heic(colour: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    pillow_heif.from_pillow(Image.new("RGB", size, colour)).save(out, quality=90, enc_params=dict(X265_PARAMS))
    return out.getvalue()


def coded(item_id: int, colour: tuple[int, int, int], size: tuple[int, int] = INPUT_PX, *, hidden: bool = True):
    """A flat ``colour`` HEVC picture as item ``item_id`` (hidden, as libheif writes an overlay's inputs)."""
    heif = bmff.read_heif(_heic(colour, size))
    item = heif.item(heif.primary)
    item.id, item.hidden, item.refs = item_id, hidden, []
    return item


def overlay_file(
    folder: Path,
    layers: list[tuple[tuple[int, int, int], tuple[int, int], tuple[int, int]]],
    *,
    canvas: tuple[int, int] = CANVAS_PX,
    wide: bool = False,
    in_idat: bool = False,
    transforms: tuple[bytes, ...] = (),
    fill_rgba: tuple[int, int, int, int] = FILL_RGBA,
    name: str = "overlay.heic",
) -> Path:
    """A HEIC whose primary item is an overlay of ``layers`` (colour, size, (x, y) offset),
    bottom first, on ``canvas``, with ``transforms`` (clap/irot/imir boxes) on the overlay."""
    inputs = [coded(n, colour, size) for n, (colour, size, _) in enumerate(layers, start=1)]
    overlay = bmff.Item(
        len(inputs) + 1,
        "iovl",
        bmff.overlay_descriptor(*canvas, [xy for _, _, xy in layers], fill_rgba=fill_rgba, wide=wide),
        [(bmff.ispe(*canvas), False), *((t, True) for t in transforms)],
        refs=[("dimg", [i.id for i in inputs])],
        in_idat=in_idat,
    )
    brands = bmff.read_heif(_heic(RED, (64, 64))).brands
    path = folder / name
    path.write_bytes(bmff.write_heif(bmff.Heif(brands, overlay.id, [*inputs, overlay])))
    return path


def composed(layers, canvas: tuple[int, int] = CANVAS_PX, fill: tuple[int, int, int] = FILL_RGB) -> Image.Image:
    """The overlay as the specification composes it, drawn with Pillow."""
    image = Image.new("RGB", canvas, fill)
    for colour, size, xy in layers:
        image.paste(Image.new("RGB", size, colour), xy)  # parts outside the canvas are left out
    return image


def render(path: Path, max_pixels: int = 50_000_000):
    """The variants of ``path`` (name -> RGB image) and the decisions."""
    out = path.parent / "out"
    out.mkdir(exist_ok=True)
    files, decisions = PillowRenderer(max_pixels).render(path, VARIANTS, out)
    images = {}
    for f in files:
        with Image.open(f.path) as im:
            images[f.name] = im.convert("RGB")
    return images, decisions


def decoded(path: Path) -> Image.Image:
    """The picture every variant is resized from, before any lossy encoding: edges exact."""
    image, _, _ = PillowRenderer(50_000_000).decode(path, 1600)
    return image


def refused(path: Path, monkeypatch: pytest.MonkeyPatch | None = None) -> PermanentFailure:
    """The failure of rendering ``path``; with ``monkeypatch``, no decoder may open it."""
    if monkeypatch is not None:

        def no_decoder(*args):
            raise AssertionError(f"a decoder opened {args[0]}")

        monkeypatch.setattr(imaging, "_open", no_decoder)
    out = path.parent / "out"
    out.mkdir(exist_ok=True)
    with pytest.raises(PermanentFailure) as caught:
        PillowRenderer(50_000_000).render(path, VARIANTS, out)
    assert list(out.iterdir()) == []
    return caught.value


def mean_difference(a: Image.Image, b: Image.Image) -> float:
    assert a.size == b.size
    return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).mean())


def near(got: tuple[int, ...], want: tuple[int, int, int], tolerance: int = 8) -> bool:
    return all(abs(int(g) - w) <= tolerance for g, w in zip(got, want, strict=True))


def assert_shows(images: dict[str, Image.Image], picture: Image.Image, want: Image.Image, points: dict) -> None:
    """Every variant is ``want`` scaled into its box; the decoded ``picture`` is ``want`` and
    has the colours ``points`` name ((x, y) -> colour), typically on both sides of an edge."""
    for name, image in images.items():
        assert mean_difference(image, want.resize(image.size, Image.Resampling.LANCZOS)) < 3, name
    assert picture.size == want.size and mean_difference(picture, want) < 1.5
    for xy, colour in points.items():
        assert near(picture.getpixel(xy), colour), (xy, picture.getpixel(xy), colour)


# --- offsets, background colour, inputs partly outside the canvas ----------------------


def test_an_overlay_is_rendered_at_its_canvas_size_with_its_inputs_at_their_offsets_on_its_fill(tmp_path):
    layers = [(RED, INPUT_PX, (10, 20)), (YELLOW, INPUT_PX, (500, 340)), (BLUE, (200, 100), (400, 250))]
    path = overlay_file(tmp_path, layers)
    images, decisions = render(path)
    assert {name: im.size for name, im in images.items()} == CANVAS_VARIANTS
    assert (decisions.source_width, decisions.source_height) == CANVAS_PX
    points = {
        (9, 100): FILL_RGB,  # left of red (x 10..489, y 20..339)
        (10, 100): RED,
        (100, 19): FILL_RGB,
        (100, 20): RED,
        (100, 339): RED,
        (100, 340): FILL_RGB,
        (450, 300): BLUE,  # blue (x 400..599, y 250..349) over red: later inputs are on top
        (499, 500): FILL_RGB,  # left of yellow (x 500..979, y 340..659)
        (500, 500): YELLOW,
        (979, 659): YELLOW,
        (980, 659): FILL_RGB,
        (979, 660): FILL_RGB,
        (999, 679): FILL_RGB,
        (800, 100): FILL_RGB,
    }
    assert_shows(images, decoded(path), composed(layers), points)


def test_an_input_past_the_right_and_bottom_edges_is_clipped(tmp_path):
    layers = [(RED, INPUT_PX, (0, 0)), (YELLOW, INPUT_PX, (700, 500))]
    path = overlay_file(tmp_path, layers)
    images, _ = render(path)
    assert {name: im.size for name, im in images.items()} == CANVAS_VARIANTS
    points = {(699, 600): FILL_RGB, (700, 600): YELLOW, (999, 679): YELLOW, (800, 499): FILL_RGB, (800, 500): YELLOW}
    assert_shows(images, decoded(path), composed(layers), points)


@pytest.mark.parametrize("wide", [False, True], ids=["16-bit offsets", "32-bit offsets"])
def test_an_input_left_of_and_above_the_canvas_is_clipped_not_dropped_or_cut_short(tmp_path, wide):
    # libheif 1.23 alone drops an input at a negative 16-bit offset (it reads -100 as about
    # -2^31) and draws one at a negative 32-bit offset 50 rows short.
    layers = [(RED, INPUT_PX, (-100, -50)), (YELLOW, INPUT_PX, (700, 400)), (BLUE, (200, 100), (300, 200))]
    path = overlay_file(tmp_path, layers, wide=wide)
    images, decisions = render(path)
    assert {name: im.size for name, im in images.items()} == CANVAS_VARIANTS
    assert (decisions.source_width, decisions.source_height) == CANVAS_PX
    points = {
        (0, 0): RED,  # what shows of red: x 0..379, y 0..269
        (379, 100): RED,
        (380, 100): FILL_RGB,
        (100, 269): RED,
        (100, 270): FILL_RGB,
        (350, 250): BLUE,  # blue (x 300..499, y 200..299) over red
        (999, 679): YELLOW,  # yellow past the right and bottom edges
    }
    assert_shows(images, decoded(path), composed(layers), points)


def test_the_overlays_own_crop_and_rotation_apply_to_the_composed_canvas(tmp_path):
    layers = [(RED, INPUT_PX, (-100, -50)), (YELLOW, INPUT_PX, (700, 400))]
    crop = (50, 0, 900, 600)  # left, top, width, height of the canvas, then a quarter turn anti-clockwise
    transforms = (bmff.clap_for(*CANVAS_PX, *crop), bmff.irot(1))
    path = overlay_file(tmp_path, layers, transforms=transforms, in_idat=True)  # libheif's layout: idat
    images, decisions = render(path)
    left, top, width, height = crop
    want = composed(layers).crop((left, top, left + width, top + height)).rotate(90, expand=True)
    assert {name: im.size for name, im in images.items()} == {
        "thumb": (213, 320),
        "card": (533, 800),
        "full": (600, 900),
    }
    assert decisions.crop == list(crop) and decisions.orientation == 8
    # upright: red (the canvas's top left) at the bottom left, yellow (bottom right) at the top right
    points = {(0, 899): RED, (269, 570): RED, (270, 570): FILL_RGB, (599, 0): YELLOW, (599, 899): FILL_RGB}
    assert_shows(images, decoded(path), want, points)


def test_an_input_wholly_outside_the_canvas_leaves_the_fill(tmp_path):
    layers = [(RED, INPUT_PX, (-600, 10)), (YELLOW, INPUT_PX, (1000, 0)), (BLUE, (200, 100), (10, 10))]
    path = overlay_file(tmp_path, layers)
    images, _ = render(path)
    assert {name: im.size for name, im in images.items()} == CANVAS_VARIANTS
    assert_shows(images, decoded(path), composed(layers), {(0, 10): FILL_RGB, (100, 50): BLUE, (999, 0): FILL_RGB})


# --- refusals ------------------------------------------------------------------------


def test_a_primary_libheif_will_not_read_is_refused_never_replaced_by_an_input(tmp_path):
    # An overlay item with no properties at all: libheif refuses the item ("has no properties
    # assigned to it in ipma box") and pi-heif then opens its first other image, the red input,
    # of the canvas's very size.
    path = overlay_file(tmp_path, [(RED, INPUT_PX, (0, 0)), (YELLOW, (100, 100), (10, 10))], canvas=INPUT_PX)
    heif = bmff.read_heif(path.read_bytes())
    for item in heif.items:
        item.hidden = False
    heif.item(heif.primary).properties = []
    path.write_bytes(bmff.write_heif(heif))
    failure = refused(path)
    assert failure.reason == "unsupported_feature"
    assert "primary item 3 (iovl)" in failure.detail


def test_an_overlay_version_libheif_does_not_know_is_refused_before_decoding(tmp_path, monkeypatch):
    path = overlay_file(tmp_path, [(RED, INPUT_PX, (0, 0))], canvas=INPUT_PX)
    heif = bmff.read_heif(path.read_bytes())
    overlay = heif.item(heif.primary)
    overlay.data = bytes([1]) + overlay.data[1:]
    for item in heif.items:
        item.hidden = False  # pi-heif would fall back to the red input, of the canvas's size
    path.write_bytes(bmff.write_heif(heif))
    failure = refused(path, monkeypatch)
    assert failure.reason == "unsupported_feature" and "version 1" in failure.detail


def test_a_canvas_over_the_pixel_limit_is_refused_before_decoding(tmp_path, monkeypatch):
    path = overlay_file(tmp_path, [(RED, INPUT_PX, (0, 0))], canvas=(9000, 9000))
    failure = refused(path, monkeypatch)
    assert failure.reason == "too_many_pixels" and "iovl item 2" in failure.detail and "9000x9000" in failure.detail


def test_a_canvas_grown_for_inputs_outside_it_is_held_to_the_pixel_limit_before_decoding(tmp_path, monkeypatch):
    # 7000x7000 = 49 MP fits 50 MP; grown by 400 px left and 300 px up for the inputs it does not.
    path = overlay_file(tmp_path, [(RED, INPUT_PX, (-400, -200)), (BLUE, INPUT_PX, (0, -300))], canvas=(7000, 7000))
    failure = refused(path, monkeypatch)
    assert failure.reason == "too_many_pixels" and "7400x7300" in failure.detail
