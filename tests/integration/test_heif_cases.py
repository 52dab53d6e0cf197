"""The HEIF / AVIF cases (tests/media/cases_heif.py says what each expects) through the real
renderers: Pillow + libavif, pi-heif (libheif), ffmpeg for the MP4s.

Expected pixels are computed here from the case's description with Pillow's own rotate,
flip and crop, independently of the renderer's code.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps, PngImagePlugin

from mediajobs.adapters import imaging
from mediajobs.adapters.imaging import DECODERS, PillowRenderer
from mediajobs.adapters.video import FfmpegRenderer
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.inspections.heif_items import Rotation, primary_image, read_structure
from tests.conftest import MEDIA, case_file, load_script, media_file

VARIANTS = load_recipe("web-image", 1).params.variants
RED, GREEN, BLUE, YELLOW, WHITE = (220, 30, 30), (30, 160, 60), (40, 60, 200), (230, 200, 40), (255, 255, 255)


def render(tmp_path: Path, name: str, max_pixels: int = 50_000_000):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    files, decisions = PillowRenderer(max_pixels).render(case_file(name), VARIANTS, out)
    images = {}
    for f in files:
        with Image.open(f.path) as im:
            images[f.name] = im.convert("RGB")
            assert im.size == (f.width, f.height)
    return images, decisions


def refused(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch | None = None) -> PermanentFailure:
    """The failure of rendering case file ``name``; with ``monkeypatch``, Pillow must never open it."""
    if monkeypatch is not None:

        def no_decoder(path):
            raise AssertionError(f"a decoder opened {path}")

        monkeypatch.setattr(imaging, "_open", no_decoder)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(PermanentFailure) as caught:
        PillowRenderer(50_000_000).render(case_file(name), VARIANTS, out)
    assert list(out.iterdir()) == []
    return caught.value


def quadrants(width: int, height: int) -> Image.Image:
    """The stored picture of the cases: TL red, TR green, BL blue, BR yellow."""
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[: height // 2, : width // 2] = RED
    pixels[: height // 2, width // 2 :] = GREEN
    pixels[height // 2 :, : width // 2] = BLUE
    pixels[height // 2 :, width // 2 :] = YELLOW
    return Image.fromarray(pixels)


def mean_difference(a: Image.Image, b: Image.Image) -> float:
    assert a.size == b.size
    return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).mean())


def colour_at(image: Image.Image, x: float, y: float) -> tuple[int, int, int]:
    """The mean colour of a 5x5 patch at fractions (x, y) of the image."""
    pixels = np.asarray(image, dtype=float)
    h, w = pixels.shape[:2]
    cy, cx = int(y * h), int(x * w)
    patch = pixels[max(cy - 2, 0) : cy + 3, max(cx - 2, 0) : cx + 3]
    return tuple(int(v) for v in patch.reshape(-1, 3).mean(axis=0))


def near(got: tuple[int, int, int], want: tuple[int, int, int], tolerance: int = 24) -> bool:
    return all(abs(g - w) <= tolerance for g, w in zip(got, want, strict=True))


# --- headers that lie about the size ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        ("B01_avif_ispe_64_over_16384_frame.avif", "16384x16384 = 268435456 pixels"),
        ("B02_heic_grid_bomb_32768.heic", "grid item 1 (8x8 tiles) is 32768x32768 = 1073741824 pixels"),
        ("B03_avif_ispe_64_over_2000x1500.avif", "ispe says 64x64, its data 2000x1500"),
    ],
)
def test_a_size_the_header_hides_is_too_many_pixels_before_any_decoder_opens_it(tmp_path, monkeypatch, name, detail):
    failure = refused(tmp_path, name, monkeypatch)
    assert failure.reason == "too_many_pixels"
    assert detail in failure.detail


def test_the_grid_bomb_is_small_and_declares_a_small_image(tmp_path):
    data = case_file("B02_heic_grid_bomb_32768.heic").read_bytes()
    assert len(data) < 8_000
    with Image.open(case_file("B02_heic_grid_bomb_32768.heic")) as im:  # what the old check read
        assert im.size == (64, 64)


# --- transformative properties ----------------------------------------------------------

SOURCE_PX = (96, 64)
CROP = (8, 4, 56, 40)
#: Case name -> its steps, applied to the stored picture in this order.
TRANSFORMS = {
    "irot0": [("irot", 0)],
    "irot90": [("irot", 1)],
    "irot180": [("irot", 2)],
    "irot270": [("irot", 3)],
    "imir0": [("imir", 0)],
    "imir1": [("imir", 1)],
    "clap": [("clap", None)],
    "irot90_imir0": [("irot", 1), ("imir", 0)],
    "irot90_imir1": [("irot", 1), ("imir", 1)],
    "irot270_imir0": [("irot", 3), ("imir", 0)],
    "clap_irot90": [("clap", None), ("irot", 1)],
    "clap_irot270_imir1": [("clap", None), ("irot", 3), ("imir", 1)],
}


def expected_picture(steps) -> Image.Image:
    """The stored picture after ``steps``: clap crops CROP, irot turns anti-clockwise
    (Image.rotate is anti-clockwise), imir 0 flips top/bottom (ImageOps.flip), 1 left/right."""
    image = quadrants(*SOURCE_PX)
    for kind, value in steps:
        if kind == "clap":
            left, top, width, height = CROP
            image = image.crop((left, top, left + width, top + height))
        elif kind == "irot":
            image = image.rotate(90 * value, expand=True)
        else:
            image = ImageOps.flip(image) if value == 0 else ImageOps.mirror(image)
    return image


def expected_orientation(steps) -> int:
    """The EXIF orientation whose display transform (Pillow's exif_transpose) does what the
    rotation and mirror steps do."""
    stored = quadrants(*SOURCE_PX)
    wanted = expected_picture([s for s in steps if s[0] != "clap"])
    for orientation in range(1, 9):
        tagged = stored.copy()
        exif = Image.Exif()
        exif[0x0112] = orientation
        tagged.info["exif"] = exif.tobytes()
        shown = ImageOps.exif_transpose(tagged)
        if shown.size == wanted.size and shown.tobytes() == wanted.tobytes():
            return orientation
    raise AssertionError(f"no EXIF orientation does {steps}")


@pytest.mark.parametrize("fmt", ["avif", "heic"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_clap_irot_imir_are_applied_once_in_order(tmp_path, fmt, name):
    case = "B04" if fmt == "avif" else "B05"
    images, decisions = render(tmp_path, f"{case}_{fmt}_{name}.{fmt}")
    want = expected_picture(TRANSFORMS[name])
    for variant, image in images.items():
        assert image.size == want.size, variant  # the pictures are smaller than every box
        assert mean_difference(image, want) < 6, (variant, mean_difference(image, want))
    assert decisions.orientation == expected_orientation(TRANSFORMS[name])
    assert decisions.crop == (list(CROP) if ("clap", None) in TRANSFORMS[name] else None)
    assert (decisions.source_width, decisions.source_height) == SOURCE_PX


def test_the_expected_renderings_tell_every_orientation_apart():
    """Each of the 8 orientations occurs, and different ones give different pictures (a test
    that passed whatever the orientation would prove nothing)."""
    pictures: dict[tuple[int, bool], set[bytes]] = {}
    for steps in TRANSFORMS.values():
        key = (expected_orientation(steps), ("clap", None) in steps)
        pictures.setdefault(key, set()).add(expected_picture(steps).tobytes())
    assert {orientation for orientation, cropped in pictures if not cropped} == set(range(1, 9))
    assert all(len(found) == 1 for found in pictures.values())  # irot 90 + imir 1 is irot 270 + imir 0
    assert len({found.pop() for found in pictures.values()}) == len(pictures)


# --- every variant from the primary image -----------------------------------------------


@pytest.mark.parametrize("name", ["B06_heic_primary_listed_second.heic", "B07_heic_grid_tiles_listed.heic"])
def test_every_variant_comes_from_the_primary_image(tmp_path, name):
    images, decisions = render(tmp_path, name)
    assert {n: im.size for n, im in images.items()} == {"thumb": (320, 213), "card": (800, 533), "full": (960, 640)}
    want = quadrants(960, 640)
    for variant, image in images.items():
        assert mean_difference(image, want.resize(image.size)) < 8, variant
    assert decisions.animated is False and decisions.frames_dropped == decisions.frames - 1


def test_an_overlay_libavif_cannot_compose_is_unsupported_not_one_of_its_inputs(tmp_path, monkeypatch):
    failure = refused(tmp_path, "B08_avif_overlay.avif", monkeypatch)
    assert failure.reason == "unsupported_feature"
    assert "iovl" in failure.detail and "libavif" in failure.detail


def test_an_overlay_libheif_composes_is_rendered_whole(tmp_path):
    images, _ = render(tmp_path, "B09_heic_overlay.heic")
    assert images["full"].size == (960, 640)
    for image in images.values():
        assert near(colour_at(image, 0.25, 0.25), RED)
        assert near(colour_at(image, 0.75, 0.75), YELLOW)
        assert near(colour_at(image, 0.75, 0.25), WHITE) and near(colour_at(image, 0.25, 0.75), WHITE)


# --- trailing bytes and cuts ------------------------------------------------------------


@pytest.mark.parametrize("name", ["B10_heic_trailing_junk.heic", "B10_heic_trailing_cut_free_box.heic"])
def test_a_heic_with_bytes_after_its_last_box_renders(tmp_path, name):
    images, _ = render(tmp_path, name)
    assert {n: im.size for n, im in images.items()} == {"thumb": (320, 240), "card": (640, 480), "full": (640, 480)}
    assert mean_difference(images["full"], quadrants(640, 480)) < 8


def test_a_heic_cut_after_its_meta_is_truncated(tmp_path, monkeypatch):
    failure = refused(tmp_path, "B12_heic_cut_after_meta.heic", monkeypatch)
    assert failure.reason == "truncated_image" and "item 1 (hvc1)" in failure.detail


def test_a_grid_short_of_a_tile_is_corrupt(tmp_path, monkeypatch):
    failure = refused(tmp_path, "B16_heic_grid_missing_tile.heic", monkeypatch)
    assert (failure.reason, failure.detail) == ("corrupt_image", "grid item 1 is 2x2 but has 3 tiles")


def _video(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    original = folder / "original"
    shutil.copyfile(case_file(name), original)
    (folder / "out").mkdir()
    return original


def _video_renderer() -> FfmpegRenderer:
    return FfmpegRenderer(speed_factor=1.0, max_duration_s=1800, invocation_s=880, margin_s=10)


def test_an_mp4_with_bytes_after_its_last_box_renders(tmp_path):
    original = _video(tmp_path, "B11_mp4_trailing_junk.mp4")
    files, _ = _video_renderer().render(original, load_recipe("web-video", 1).params, original.parent / "out")
    assert {(f.width, f.height) for f in files} == {(320, 240)}
    assert {f.name for f in files} >= {"poster"} and len(files) >= 2


def test_an_mp4_cut_after_its_moov_is_invalid_media_before_ffprobe(tmp_path):
    original = _video(tmp_path, "B13_mp4_cut_after_moov.mp4")
    renderer = _video_renderer()

    def no_ffprobe(*args, **kwargs):
        raise AssertionError("ffprobe ran")

    renderer._run = no_ffprobe  # type: ignore[method-assign]
    with pytest.raises(PermanentFailure) as caught:
        renderer.probe(original)
    assert caught.value.reason == "invalid_media"
    assert "truncated: sample data at byte" in caught.value.detail


# --- orientation a browser does not apply -----------------------------------------------


def test_an_xmp_orientation_alone_is_not_applied(tmp_path):
    images, decisions = render(tmp_path, "B14_jpeg_xmp_orientation_6_only.jpg")
    assert decisions.orientation == 1
    assert images["thumb"].size == (320, 213)
    assert mean_difference(images["full"], quadrants(480, 320)) < 8


def test_exif_orientation_wins_over_a_disagreeing_xmp_one(tmp_path):
    images, decisions = render(tmp_path, "B14_jpeg_exif_6_xmp_3.jpg")
    assert decisions.orientation == 6
    want = quadrants(480, 320).rotate(-90, expand=True)  # EXIF 6: turn 90 degrees clockwise to show
    assert images["full"].size == (320, 480)
    assert mean_difference(images["full"], want) < 8


def test_an_xmp_orientation_in_a_png_is_not_applied_either(tmp_path):
    stored = quadrants(120, 80)
    source = tmp_path / "xmp.png"
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", '<x:xmpmeta><rdf:Description tiff:Orientation="8"/></x:xmpmeta>')
    stored.save(source, pnginfo=info)
    with Image.open(source) as im:
        assert im.getexif().get(0x0112) == 8  # what Pillow's exif_transpose would have applied
    out = tmp_path / "out"
    out.mkdir()
    files, decisions = PillowRenderer(50_000_000).render(source, VARIANTS, out)
    assert decisions.orientation == 1 and (files[0].width, files[0].height) == (120, 80)


def test_a_heic_exif_orientation_without_irot_is_ignored(tmp_path):
    images, decisions = render(tmp_path, "B15_heic_exif_orientation_6_without_irot.heic")
    assert decisions.orientation == 1
    assert images["full"].size == (480, 320)
    assert mean_difference(images["full"], quadrants(480, 320)) < 8


def test_a_phone_heic_grid_is_checked_and_rotated_once():
    data = media_file("photos", "iphone-13-pro-max.heic").read_bytes()
    found = primary_image(read_structure(data), 50_000_000, DECODERS["HEIF"])
    assert (found.item_type, found.width_px, found.height_px, found.coded_items) == ("grid", 4032, 3024, 48)
    assert found.transforms == (Rotation(3),)
    assert (found.display_width_px, found.display_height_px) == (3024, 4032)


def test_a_heif_image_sequence_without_a_still_image_is_unsupported_and_still_an_image(tmp_path):
    bmff = load_script("bmff_write", MEDIA / "bmff_write.py")
    ftyp = bmff.box("ftyp", b"msf1", b"\0\0\0\0", b"msf1iso8hevc")
    data = ftyp + bmff.box("moov", bmff.full_box("mvhd", 0, 0, b"\0" * 96)) + bmff.box("mdat", b"\0" * 64)
    source = tmp_path / "sequence.heic"
    source.write_bytes(data)
    assert imaging.identify(source) == "HEIF"  # so the render job says why
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(PermanentFailure) as caught:
        PillowRenderer(50_000_000).render(source, VARIANTS, out)
    assert caught.value.reason == "unsupported_feature" and "image sequence" in caught.value.detail


def test_an_avif_whose_major_brand_is_mif1_is_decoded_by_libavif(tmp_path):
    """MIAF allows ``mif1`` as the major brand with ``avif`` among the compatible ones;
    pi-heif (no AV1 decoder) claims ``mif1`` too, so the file must go to libavif."""
    source = Image.new("RGB", (64, 48), (200, 30, 30))
    path = tmp_path / "mif1.avif"
    source.save(path, format="AVIF", quality=90)
    data = bytearray(path.read_bytes())
    assert data[8:12] == b"avif" and b"mif1" in data[16 : int.from_bytes(data[0:4], "big")]
    data[8:12] = b"mif1"
    path.write_bytes(bytes(data))
    recipe = load_recipe("web-image", 1)
    out = tmp_path / "out"
    out.mkdir()
    files, decisions = PillowRenderer(max_pixels=50_000_000).render(path, recipe.params.variants, out)
    assert decisions.source_format == "AVIF"
    assert [(f.width, f.height) for f in files][0] == (64, 48)
    with Image.open(files[0].path) as rendered:
        assert rendered.convert("RGB").getpixel((32, 24)) == pytest.approx((200, 30, 30), abs=12)


def _heif_tools():
    """The case makers' box writer and picture helpers (tests/media), loaded as scripts."""
    import sys

    sys.path.insert(0, str(MEDIA))
    try:
        cases = load_script("cases_heif", MEDIA / "cases_heif.py")
        bmff = load_script("bmff_write", MEDIA / "bmff_write.py")
    finally:
        sys.path.remove(str(MEDIA))
    return cases, bmff


def test_more_items_than_libheif_reads_is_unsupported_not_corrupt(tmp_path):
    """libheif refuses a file of more than 1,000 items (its default security limit): a valid
    HEIC it cannot read is ``unsupported_feature`` naming the count, before it is asked."""
    cases, bmff = _heif_tools()
    heif = bmff.read_heif(cases.heic_bytes(cases.quadrants(96, 64)))
    heif.items += [bmff.Item(100 + k, "Exif", b"\0\0\0\0MM\0*\0\0\0\x08\0\0", hidden=True) for k in range(1500)]
    source = tmp_path / "many.heic"
    source.write_bytes(bmff.write_heif(heif))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(PermanentFailure) as caught:
        PillowRenderer(50_000_000).render(source, VARIANTS, out)
    assert (caught.value.reason, caught.value.detail) == (
        "unsupported_feature",
        "1501 items: libheif (pi-heif) reads at most 1000",
    )


def test_an_avif_grid_listed_after_its_tile_that_libavif_refuses_is_unsupported_not_corrupt(tmp_path):
    """Item order is free (ISO/IEC 23008-12); libavif refuses a grid listed after its tiles."""
    cases, bmff = _heif_tools()
    data = cases.avif_bytes(cases.quadrants(96, 64), quality=90, speed=10)
    heif = bmff.read_heif(data)
    tile = cases.coded_item(data, 2, hidden=True)
    grid = bmff.Item(1, "grid", bmff.grid_descriptor(1, 1, 96, 64), [(bmff.ispe(96, 64), False)], refs=[("dimg", [2])])
    source = tmp_path / "tile-first.avif"
    source.write_bytes(bmff.write_heif(bmff.Heif(heif.brands, 1, [tile, grid])))
    out = tmp_path / "out"
    out.mkdir()
    try:
        files, _ = PillowRenderer(50_000_000).render(source, VARIANTS, out)
    except PermanentFailure as failure:
        assert failure.reason == "unsupported_feature" and "libavif" in failure.detail
    else:  # a libavif that reads it: then it must be the whole picture
        assert (files[0].width, files[0].height) == (96, 64)
