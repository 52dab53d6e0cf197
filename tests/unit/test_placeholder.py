"""The placeholder computation: ThumbHash against the format's reference encoder, the dominant
colour, the display size (orientation included), alpha, 1x1 and banner shapes; the one-frame
ffmpeg argv; the video step against a fake frame source."""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path

import pytest
from PIL import Image
from thash import thumb_hash_to_average_rgba, thumb_hash_to_rgba

from mediajobs.domain.errors import DeadlineReached, PermanentFailure
from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.recipes import ImagePlaceholderParams, VideoPlaceholderParams
from mediajobs.domain.video import FORMAT_WHITELIST, VideoProbe, frame_argv, frame_at_s
from mediajobs.steps.placeholder import (
    THUMBHASH_MAX_PX,
    ImagePlaceholder,
    VideoPlaceholder,
    mean_colour,
    placeholder_of,
)


def pixels(w: int, h: int, f) -> Image.Image:
    """An RGBA image whose pixel (x, y) is ``f(x, y)``, each value clamped to 0-255 and truncated."""
    data = bytearray()
    for y in range(h):
        for x in range(w):
            data += bytes(max(0, min(255, int(v))) for v in f(x, y))
    return Image.frombytes("RGBA", (w, h), bytes(data))


#: Pixel arrays defined by formulas, and the ThumbHash (hex) that the format's reference
#: encoder, ``rgbaToThumbHash`` of thumbhash.js 0.1.1 (npm ``thumbhash``, github.com/evanw/thumbhash),
#: returned for exactly these RGBA bytes under node 20 (the arrays were dumped as JSON by this
#: module's ``pixels`` and fed to it). The placeholder step must give the same bytes.
IMAGES = {
    "gradient-100x75": (100, 75, lambda x, y: (x * 255 // 99, y * 255 // 74, (x + y) * 255 // 173, 255)),
    "portrait-40x100": (40, 100, lambda x, y: (200, 40 + y * 2, 90 if (x // 8 + y // 8) % 2 else 20, 255)),
    "alpha-disc-64x64": (64, 64, lambda x, y: (255, 128, 0, 255 if (x - 31.5) ** 2 + (y - 31.5) ** 2 < 600 else 0)),
    "alpha-ramp-100x50": (100, 50, lambda x, y: (30, 60, 220, x * 255 // 99)),
    "one-pixel-1x1": (1, 1, lambda x, y: (12, 200, 99, 255)),
    "banner-100x1": (100, 1, lambda x, y: (x * 2, 255 - x * 2, 128, 255)),
    "column-1x100": (1, 100, lambda x, y: (y * 2, y * 2, y * 2, 255)),
    "solid-grey-10x10": (10, 10, lambda x, y: (128, 128, 128, 255)),
    "transparent-8x8": (8, 8, lambda x, y: (0, 0, 0, 0)),
    "waves-100x100": (
        100,
        100,
        lambda x, y: (
            128 + 127 * math.sin(x / 7),
            128 + 127 * math.cos(y / 9),
            128 + 127 * math.sin((x + y) / 11),
            255,
        ),
    ),
}
REFERENCE = {
    "gradient-100x75": "1f080e0d9a80878781878778787878788f7008f877",
    "portrait-40x100": "a07b0a2b1478807778878777888088f778",
    "alpha-disc-64x64": "e0fd820500377878888780787807888589f708588887808958",
    "alpha-ramp-100x50": "9ac2810380378f867778877088f7908780877888788888",
    "one-pixel-1x1": "1a8834175c08f708888788708f7088f80888808008f7870f",
    "banner-100x1": "e0874101a88888888888087877870f88d7",
    "column-1x100": "180832010008848b888788870000000000",
    "solid-grey-10x10": "2008020700686b9b8678787077d78888787a090000000000",
    "transparent-8x8": "00088205000000000000000000000000000000000000000000",
    "waves-100x100": "e0270a1f08a9db6279878876b9f7b8c67886b8c808dc710f",
}
#: Where ``thash`` (the encoder used) differs from the reference: a quantised value that falls
#: exactly half-way, which Python's ``round`` takes to even and ``Math.round`` up. In
#: alpha-ramp-100x50 that is the luminance grid (5 * 50 / 100 = 2.5: 5x2 terms, not 5x3); in
#: the others single AC nibbles (7.5: 7, not 8). Same length, same average colour.
HALF_WAY = {
    "alpha-disc-64x64": "e0fd820500377878788780787807888589f808588887808958",
    "alpha-ramp-100x50": "9ac2810280378f868777778088f7908780877888788888",
    "solid-grey-10x10": "2008020700686b9b8677788077d78788787a090000000000",
}


def hashed(name: str) -> bytes:
    w, h, f = IMAGES[name]
    return base64.b64decode(placeholder_of(pixels(w, h, f), (w, h)).thumbhash)


@pytest.mark.parametrize("name", sorted(set(IMAGES) - set(HALF_WAY)))
def test_the_thumbhash_is_the_reference_encoders_bytes(name):
    assert hashed(name).hex() == REFERENCE[name]


@pytest.mark.parametrize("name", sorted(HALF_WAY))
def test_a_half_way_value_rounds_to_even_one_step_from_the_reference(name):
    ours, reference = hashed(name), bytes.fromhex(REFERENCE[name])
    assert ours.hex() == HALF_WAY[name]
    assert len(ours) == len(reference)
    assert thumb_hash_to_average_rgba(list(ours)) == thumb_hash_to_average_rgba(list(reference))
    nibbles = [(b >> s) & 15 for b in ours for s in (0, 4)], [(b >> s) & 15 for b in reference for s in (0, 4)]
    assert all(abs(a - b) <= 1 for a, b in zip(*nibbles, strict=True))


def test_an_image_with_alpha_sets_the_hash_alpha_bit_and_weights_the_colour_by_alpha():
    half = pixels(2, 1, lambda x, y: (255, 0, 0, 255) if x == 0 else (0, 0, 255, 0))
    result = placeholder_of(half, (2, 1))
    assert base64.b64decode(result.thumbhash)[2] & 0x80  # hasAlpha, bit 23 of the header
    assert result.dominant_colour == "#ff0000"  # the transparent blue pixel weighs nothing
    opaque = placeholder_of(pixels(2, 1, lambda x, y: (255, 0, 0, 255)), (2, 1))
    assert not base64.b64decode(opaque.thumbhash)[2] & 0x80


def test_the_dominant_colour_is_the_exact_mean_not_the_hashs_quantised_one():
    grey = placeholder_of(pixels(10, 10, lambda x, y: (128, 128, 128, 255)), (10, 10))
    assert grey.dominant_colour == "#808080"
    r, g, b, _ = thumb_hash_to_average_rgba(list(base64.b64decode(grey.thumbhash)))
    assert (round(r * 255), round(g * 255), round(b * 255)) == (133, 129, 127)  # what the hash alone keeps


def test_mean_colour_rounds_half_up_and_falls_back_to_the_plain_mean_when_all_is_transparent():
    assert mean_colour(bytes([0, 0, 0, 255, 1, 3, 255, 255])) == "#010280"  # 0.5 -> 1, 1.5 -> 2, 127.5 -> 128
    assert mean_colour(bytes([10, 20, 30, 0, 30, 40, 50, 0])) == "#141e28"
    with pytest.raises(ValueError):
        mean_colour(b"\x00\x00\x00")


def test_a_one_pixel_image():
    result = placeholder_of(Image.new("RGB", (1, 1), (12, 200, 99)), (1, 1))
    assert (result.display_width_px, result.display_height_px, result.dominant_colour) == (1, 1, "#0cc863")
    assert base64.b64decode(result.thumbhash).hex() == REFERENCE["one-pixel-1x1"]


def test_a_banner_keeps_its_shape_and_a_large_image_is_hashed_at_100_px(monkeypatch):
    import thash

    seen = []
    real = thash.rgba_to_thumb_hash_pure
    monkeypatch.setattr(thash, "rgba_to_thumb_hash_pure", lambda w, h, rgba: seen.append((w, h)) or real(w, h, rgba))
    banner = placeholder_of(Image.new("RGB", (8000, 80), (1, 2, 3)), (8000, 80))
    assert (banner.display_width_px, banner.display_height_px) == (8000, 80)
    placeholder_of(Image.new("RGB", (100, 1), (1, 2, 3)), (100, 1))
    placeholder_of(Image.new("RGB", (640, 480), (1, 2, 3)), (4000, 3000))  # a draft-reduced decode
    assert seen == [(100, 1), (100, 1), (100, 75)]


def test_box_px_is_bounded_by_the_format():
    with pytest.raises(ValueError, match="box_px"):
        placeholder_of(Image.new("RGB", (1, 1)), (1, 1), THUMBHASH_MAX_PX + 1)


PARAMS = ImagePlaceholderParams(box_px=100)
VIDEO_PARAMS = VideoPlaceholderParams(box_px=100, at_fraction=0.1)


def test_an_exif_oriented_jpeg_gives_the_display_size_after_orientation(tmp_path):
    """Stored 300x100 with orientation 6 (rotate 90 clockwise to view): shown 100x300; the
    stored left half, red, is the displayed top half."""
    stored = Image.new("RGB", (300, 100), (0, 0, 255))
    stored.paste((255, 0, 0), (0, 0, 150, 100))
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.jpg"
    stored.save(path, quality=95, exif=exif)
    result = ImagePlaceholder(max_pixels=50_000_000).run(path, PARAMS, RenderContext(), tmp_path)
    assert result.files == []
    decisions = result.decisions
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (100, 300)
    w, h, rgba = thumb_hash_to_rgba(list(base64.b64decode(decisions["thumbhash"])))
    assert w < h  # the hash's own aspect ratio is portrait
    top, bottom = rgba[4 * (w // 2) : 4 * (w // 2) + 3], rgba[4 * (w * (h - 1) + w // 2) :][:3]
    assert top[0] > top[2] and bottom[2] > bottom[0]  # red on top, blue below: turned once
    assert list(tmp_path.iterdir()) == [path]  # nothing written


def test_the_frame_argv_keeps_the_input_guard_and_writes_raw_rgb_to_stdout():
    probe = VideoProbe(
        format_name="mov", duration_s=10.0, codec="h264", coded_width=1920, coded_height=1080, frames=300
    )
    argv = frame_argv("/opt/bin/ffmpeg", "/tmp/w/original", probe, 1.0, (100, 56))
    assert argv[argv.index("-format_whitelist") + 1] == FORMAT_WHITELIST
    assert argv[argv.index("-protocol_whitelist") + 1] == "file"
    assert argv.index("-ss") < argv.index("-i") and argv[argv.index("-ss") + 1] == "1.000"
    assert argv[argv.index("-vf") + 1] == "format=yuv420p,scale=100:56,setsar=1,format=rgb24"
    assert argv[-3:] == ["-f", "rawvideo", "pipe:1"]
    assert frame_at_s(probe, 0.1) == 1.0


class FakeFrames:
    """A video adapter with one fixed frame: records what was asked."""

    invocation_s = 900.0
    margin_s = 20.0
    max_duration_s = 1800.0

    def __init__(self, probe: VideoProbe) -> None:
        self._probe = probe
        self.asked: list[tuple[float, tuple[int, int], float]] = []

    def probe(self, source: Path) -> VideoProbe:
        return self._probe

    def frame_rgb(self, source, probe, at_s, size, timeout_s):
        self.asked.append((at_s, size, timeout_s))
        return bytes([200, 100, 50]) * (size[0] * size[1]), at_s


def test_the_video_step_hashes_the_frame_at_the_posters_time_in_display_orientation():
    probe = VideoProbe(
        format_name="mov", duration_s=8.0, codec="h264", coded_width=1920, coded_height=1080, frames=240, rotation=90
    )
    frames = FakeFrames(probe)
    built = []
    step = VideoPlaceholder(lambda: built.append(1) or frames)
    assert built == []  # the adapter waits for the first video
    result = step.run(Path("/w/original"), VIDEO_PARAMS, RenderContext(remaining_s=lambda: 100.0), Path("/w/out"))
    assert frames.asked == [(0.8, (56, 100), 80.0)]
    assert result.files == []
    assert result.decisions["display_width_px"] == 1080 and result.decisions["display_height_px"] == 1920
    assert result.decisions["dominant_colour"] == "#c86432" and result.decisions["frame_at_s"] == 0.8


def test_the_video_step_stops_when_no_time_is_left():
    probe = VideoProbe(format_name="mov", duration_s=8.0, codec="h264", coded_width=64, coded_height=64, frames=8)
    step = VideoPlaceholder(lambda: FakeFrames(probe))
    with pytest.raises(DeadlineReached):
        step.run(Path("/w/original"), VIDEO_PARAMS, RenderContext(remaining_s=lambda: 15.0), Path("/w/out"))


def test_the_video_step_refuses_what_web_video_refuses_as_too_long():
    """A source past MAX_VIDEO_SECONDS is too_long for the placeholder as for web-video@2,
    before any frame is decoded (a 600 s single-keyframe file would otherwise decode every
    frame up to 10 %, and time out transiently near the size limit)."""
    probe = VideoProbe(format_name="mov", duration_s=1800.5, codec="h264", coded_width=64, coded_height=64, frames=9)
    frames = FakeFrames(probe)
    with pytest.raises(PermanentFailure) as caught:
        VideoPlaceholder(lambda: frames).run(Path("/w/o"), VIDEO_PARAMS, RenderContext(), Path("/w/out"))
    assert (caught.value.reason, frames.asked) == ("too_long", [])
    assert caught.value.detail.startswith("1800.5 s > 1800 s: the limit is MAX_VIDEO_SECONDS")


def placeholder_manifest(**changes) -> dict:
    decisions = {
        "placeholder": "thumbhash",
        "thumbhash": base64.b64encode(bytes.fromhex(REFERENCE["gradient-100x75"])).decode(),
        "dominant_colour": "#807d7b",
        "display_width_px": 4000,
        "display_height_px": 3000,
    }
    return {"recipe": {"id": "image-placeholder", "version": 1}, "outputs": [], "decisions": {**decisions, **changes}}


def test_the_gallery_draws_each_picture_on_its_placeholder_until_it_loads(tmp_path):
    from mediajobs.local.gallery import GalleryEntry, GalleryVariant, placeholder_from_manifest, write_gallery

    placeholder = placeholder_from_manifest(placeholder_manifest())
    assert placeholder is not None and placeholder.data_url.startswith("data:image/png;base64,")
    png = Image.open(io.BytesIO(base64.b64decode(placeholder.data_url.split(",", 1)[1])))
    assert png.format == "PNG" and max(png.size) == 32 and png.width > png.height
    thumb = tmp_path / "thumb.webp"
    Image.new("RGB", (320, 240)).save(thumb)
    entry = GalleryEntry("photo", None, "k" * 64, [GalleryVariant("thumb", thumb, 320, 240, thumb.stat().st_size)])
    entry.placeholder = placeholder
    page = write_gallery(tmp_path, [entry]).read_text()
    style = f"background: #807d7b url({placeholder.data_url}) center / 100% 100% no-repeat; width: 320px; "
    assert f'<img src="thumb.webp" alt="thumb" loading="lazy" style="{style}aspect-ratio: 4000 / 3000">' in page
    assert "thumbhash &middot; #807d7b" in page


@pytest.mark.parametrize(
    "manifest",
    [
        {"decisions": {"source_format": "JPEG"}},  # web-image@1's
        placeholder_manifest(dominant_colour="red;} body {display:none"),
        placeholder_manifest(thumbhash="not base64!"),
        placeholder_manifest(thumbhash=""),
        placeholder_manifest(display_width_px="4000"),
    ],
)
def test_a_manifest_without_a_readable_placeholder_gives_none(manifest):
    from mediajobs.local.gallery import placeholder_from_manifest

    assert placeholder_from_manifest(manifest) is None


def test_image_placeholder_v1_loads_through_the_registry_and_leaves_the_other_keys_alone():
    from mediajobs.bootstrap import load_recipe

    recipe = load_recipe("image-placeholder", 1)
    assert (recipe.step, recipe.params) == ("image.placeholder", ImagePlaceholderParams(box_px=100))
    assert recipe.sha256 == "b380f3fb1e0ce5788bf53294f9034e7bdeb0bdae51b7c26905c46f20a02b063f"
    # web-image@1's hash as tests/unit/test_keys.py pins it: adding a recipe changes no other key.
    assert load_recipe("web-image", 1).sha256 == "e367c8290d2fe6172691d759eb4f2b2dcb6f1247e2b38a40a0172d76b1f8f9fa"


@pytest.mark.parametrize("params", [{"box_px": 101}, {"box_px": 0}, {"box_px": 100, "hash": "blurhash"}, {}])
def test_the_placeholder_parameters_are_strict(params):
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ImagePlaceholderParams.model_validate(params)


def test_video_placeholder_v1_loads_through_the_registry_at_the_posters_time():
    from mediajobs.bootstrap import load_recipe

    recipe = load_recipe("video-placeholder", 1)
    assert (recipe.step, recipe.params) == ("video.placeholder", VIDEO_PARAMS)
    assert recipe.params.at_fraction == load_recipe("web-video", 2).params.poster.at_fraction
    assert recipe.sha256 == "e1a36618e3246c269b0fd030342ddd13f31db119108201b34bc2c3f727403891"
    # web-video@2's hash is unchanged by a second video recipe.
    assert load_recipe("web-video", 2).sha256 == "68fea602470e187d7e2c241372a25d6272a1c926ccfcb3a8474143e9e7e8b114"
