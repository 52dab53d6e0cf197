"""Every image case (tests/media/cases_images.py: each maker with its expected outcome) gives that outcome.

These run the real renderer (Pillow, pillow-heif, libwebp, libavif) on the case files.
Failures before any job (empty, unidentified) are asserted at the pipeline level in
tests/functional/test_pipeline_cases.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile
from skimage.color import deltaE_cie76, rgb2lab

from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import PermanentFailure
from tests.conftest import case_file, media_file

RECIPE = load_recipe("web-image", 1)


def render(tmp_path: Path, name: str, max_pixels: int = 50_000_000):
    files, decisions = PillowRenderer(max_pixels).render(case_file(name), RECIPE.params.variants, tmp_path)
    images = {f.name: Image.open(f.path) for f in files}
    for im in images.values():
        im.load()
    return {f.name: f for f in files}, images, decisions


def sizes(files) -> dict[str, tuple[int, int]]:
    return {name: (f.width, f.height) for name, f in files.items()}


def failure(tmp_path: Path, name: str) -> PermanentFailure:
    with pytest.raises(PermanentFailure) as caught:
        PillowRenderer(50_000_000).render(case_file(name), RECIPE.params.variants, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written
    return caught.value


@pytest.mark.parametrize("orientation", [5, 6, 7, 8])
def test_i01_orientation_5_to_8_upright_portrait(tmp_path, orientation):
    files, images, decisions = render(tmp_path, f"I01_orientation_{orientation}.jpg")
    assert sizes(files) == {"thumb": (213, 320), "card": (533, 800), "full": (640, 960)}
    assert decisions.orientation == orientation
    for im in images.values():
        rgb = np.asarray(im.convert("RGB"), dtype=int)
        h, w = rgb.shape[:2]
        tl, tr = rgb[h // 4, w // 4], rgb[h // 4, 3 * w // 4]
        bl, br = rgb[3 * h // 4, w // 4], rgb[3 * h // 4, 3 * w // 4]
        assert tl[0] > 180 and tl[1] < 80 and tl[2] < 80, "top-left red"
        assert tr[1] > 150 and tr[0] < 80 and tr[2] < 80, "top-right green"
        assert bl[2] > 180 and bl[0] < 80 and bl[1] < 80, "bottom-left blue"
        assert br[0] > 180 and br[1] > 180 and br[2] < 80, "bottom-right yellow"
        assert im.getexif().get(0x0112, 1) == 1


def test_i02_small_image_with_gps_is_reencoded_without_metadata(tmp_path):
    files, images, _ = render(tmp_path, "I02_gps_small_300x200.jpg")
    assert sizes(files) == {"thumb": (300, 200), "card": (300, 200), "full": (300, 200)}
    assert [images[n].format for n in ("thumb", "card", "full")] == ["WEBP", "WEBP", "AVIF"]
    for name, im in images.items():
        data = files[name].path.read_bytes()
        exif = im.getexif()
        assert 0x8825 not in exif and not ({0x010F, 0x0110, 0x0132} & set(exif)), name
        assert "xmp" not in im.info and b"xmpmeta" not in data and b"Exif" not in data and b"EXIF" not in data
        for needle in (b"12 deg", b"65 deg", b"GPS"):
            assert needle not in data


def test_i03_adobe_cmyk_becomes_correct_srgb(tmp_path):
    files, images, decisions = render(tmp_path, "I03_cmyk_adobe.jpg")
    assert files["thumb"].width == 320 and files["thumb"].height == 240
    thumb = np.asarray(images["thumb"].convert("RGB"), dtype=int)
    left, right, bottom = thumb[90, 60], thumb[90, 260], thumb[225, 160]
    assert left[0] >= 200 and left[1] <= 70 and left[2] <= 70
    assert right[2] >= 150 and right[0] <= 80 and right[1] <= 80
    assert all(100 <= c <= 160 for c in bottom)
    assert images["thumb"].mode in ("RGB", "RGBA") and "icc_profile" not in images["thumb"].info
    assert decisions.colour.startswith("cmyk->srgb")


P3_TARGETS = [(220, 40, 40), (40, 180, 60), (40, 60, 200), (224, 172, 140), (240, 200, 40), (128, 128, 128)]


def test_i05_display_p3_is_converted_to_srgb(tmp_path):
    files, images, decisions = render(tmp_path, "I05_display_p3.jpg")
    assert sizes(files) == {"thumb": (320, 213), "card": (480, 320), "full": (480, 320)}
    assert decisions.colour.startswith("icc->srgb") and "P3" in (decisions.icc_profile or "")
    for name, im in images.items():
        assert "icc_profile" not in im.info or b"sRGB" in im.info["icc_profile"], name
        rgb = np.asarray(im.convert("RGB"), dtype=float) / 255
        h, w = rgb.shape[:2]
        centres = [
            (h // 4, w // 6),
            (h // 4, w // 2),
            (h // 4, 5 * w // 6),
            (3 * h // 4, w // 6),
            (3 * h // 4, w // 2),
            (3 * h // 4, 5 * w // 6),
        ]
        for (y, x), target in zip(centres, P3_TARGETS, strict=True):
            got = rgb2lab(rgb[y - 2 : y + 3, x - 2 : x + 3].mean(axis=(0, 1)).reshape(1, 1, 3))
            want = rgb2lab((np.array(target, dtype=float) / 255).reshape(1, 1, 3))
            assert float(deltaE_cie76(got, want)[0, 0]) < 3, (name, target)


def test_i07_16_bit_grey_ramp_is_scaled_not_clipped(tmp_path):
    files, images, _ = render(tmp_path, "I07_gray16_ramp.png")
    assert sizes(files) == {"thumb": (320, 160), "card": (512, 256), "full": (512, 256)}
    for name, im in images.items():
        rgb = np.asarray(im.convert("RGB"), dtype=int)
        grey = rgb.mean(axis=2)
        w = grey.shape[1]
        assert grey[:, : w // 10].mean() <= 30, name
        assert grey[:, -(w // 10) :].mean() >= 225, name
        assert abs(grey[:, w // 2].mean() - 128) <= 12, name
        assert (rgb.max(axis=2) - rgb.min(axis=2)).max() <= 3, name
        assert (grey >= 250).mean() <= 0.15, name


def test_i08_palette_transparency_is_kept(tmp_path):
    files, images, decisions = render(tmp_path, "I08_palette_trns.png")
    assert sizes(files) == {"thumb": (256, 256), "card": (256, 256), "full": (256, 256)}
    assert decisions.alpha
    for name, im in images.items():
        rgba = np.asarray(im.convert("RGBA"), dtype=int)
        assert im.mode == "RGBA", name
        for y, x in ((0, 0), (0, 255), (255, 0), (255, 255)):
            assert rgba[y, x, 3] == 0
        centre = rgba[128, 128]
        assert centre[3] >= 250 and centre[0] >= 200 and centre[1] <= 60 and centre[2] <= 60
        ring = rgba[128, 128 + 85]
        assert abs(ring[3] - 128) <= 16 and ring[0] >= 180, (name, ring)
        visible = rgba[rgba[..., 3] > 0]
        assert not ((visible[:, :3] < 30).all(axis=1)).any(), name


def test_i10_animated_gif_gives_first_frame_and_records_dropped_frames(tmp_path):
    files, images, decisions = render(tmp_path, "I10_animated.gif")
    assert sizes(files) == {"thumb": (240, 180), "card": (240, 180), "full": (240, 180)}
    assert (decisions.animated, decisions.frames, decisions.duration_ms, decisions.frames_dropped) == (True, 4, 1000, 3)
    for name, im in images.items():
        assert getattr(im, "n_frames", 1) == 1
        rgba = np.asarray(im.convert("RGBA"), dtype=int)
        assert rgba[90, 120, 0] >= 200 and rgba[90, 120, 3] >= 250, name
        assert rgba[5, 5, 3] == 0 and rgba[90, 5, 3] == 0, name


def test_i12_truncated_progressive_jpeg_is_a_permanent_failure(tmp_path):
    assert failure(tmp_path, "I12_progressive_truncated.jpg").reason == "truncated_image"
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_i14_pixel_bomb_is_refused_from_the_header(tmp_path, monkeypatch):
    def no_decoding(self):
        raise AssertionError("pixels were decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    caught = failure(tmp_path, "I14_bomb_60mp_8000x7500.png")
    assert caught.reason == "too_many_pixels" and "60000000" in caught.detail


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("I16_wide_8000x2.png", {"thumb": (320, 1), "card": (800, 1), "full": (1600, 1)}),
        ("I16_tall_2x6000.png", {"thumb": (1, 320), "card": (1, 800), "full": (1, 1600)}),
    ],
)
def test_i16_extreme_aspect_ratios_keep_one_pixel(tmp_path, name, expected):
    files, images, _ = render(tmp_path, name)
    assert sizes(files) == expected
    assert {n: im.size for n, im in images.items()} == expected


def test_i17_html_error_page_named_jpg_is_unsupported(tmp_path):
    assert failure(tmp_path, "I17_html_error_page.jpg").reason == "unsupported_format"


def test_corrupted_jpeg_is_a_permanent_failure_with_its_reason(tmp_path):
    with pytest.raises(PermanentFailure) as caught:
        PillowRenderer(50_000_000).render(media_file("bad", "corrupted.jpg"), RECIPE.params.variants, tmp_path)
    assert caught.value.reason == "corrupt_image"
    assert caught.value.detail == "16384 fill bytes at byte 212992"  # then an invalid marker 0xFF9F


def test_huge_animation_is_rendered_without_decoding_every_frame(tmp_path):
    """Durations are measured only within a decode budget (4 x max_pixels of frames x pixels)."""
    frames = [Image.new("RGB", (50, 50), (i * 10, 0, 0)) for i in range(20)]
    source = tmp_path / "long.gif"
    frames[0].save(source, save_all=True, append_images=frames[1:], duration=100, loop=0)
    out = tmp_path / "out"
    out.mkdir()
    files, decisions = PillowRenderer(max_pixels=10_000).render(source, RECIPE.params.variants, out)
    assert (decisions.frames, decisions.duration_ms, decisions.frames_dropped) == (None, None, None)
    assert [(f.width, f.height) for f in files] == [(50, 50)] * 3
    _, decisions = PillowRenderer(max_pixels=50_000_000).render(source, RECIPE.params.variants, tmp_path / "out")
    assert decisions.duration_ms == 2000
