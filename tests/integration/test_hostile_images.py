"""Damaged and hostile images found by trying to break the renderer: every one ends as a
permanent failure with its reason, or renders without decoding what it should not."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

from mediajobs.adapters.imaging import MAX_FRAMES, MAX_JPEG_SCANS, PillowRenderer
from mediajobs.bootstrap import load_recipe
from mediajobs.domain.errors import PermanentFailure
from tests.conftest import media_file

VARIANTS = load_recipe("web-image", 1).params.variants


def noise(width: int, height: int, mode: str = "RGB", seed: int = 7) -> Image.Image:
    channels = 3 if mode == "RGB" else 1
    shape = (height, width, channels) if channels > 1 else (height, width)
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, shape, dtype=np.uint8))


def encoded(frames: list[Image.Image], fmt: str, **params) -> bytes:
    out = io.BytesIO()
    frames[0].save(out, format=fmt, save_all=len(frames) > 1, append_images=frames[1:], **params)
    return out.getvalue()


def render(tmp_path, data: bytes, name: str, max_pixels: int = 50_000_000):
    source = tmp_path / name
    source.write_bytes(data)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return PillowRenderer(max_pixels).render(source, VARIANTS, out)


def reason(tmp_path, data: bytes, name: str) -> str:
    folder = tmp_path / f"failing-{name}"
    folder.mkdir()
    with pytest.raises(PermanentFailure) as caught:
        render(folder, data, name)
    assert list((folder / "out").iterdir()) == []  # nothing written
    return caught.value.reason


@pytest.mark.parametrize(
    ("name", "fmt", "params", "expected"),
    [
        ("animated.gif", "GIF", {"duration": 50}, "truncated_image"),  # found by the block walk
        ("pages.tif", "TIFF", {}, "corrupt_image"),  # a later page's header is cut
        ("animated.png", "PNG", {"duration": 100}, "truncated_image"),
        ("animated.webp", "WEBP", {"duration": 100}, "corrupt_image"),
    ],
)
def test_truncated_multi_frame_files_fail_permanently(tmp_path, name, fmt, params, expected):
    mode = "L" if fmt == "GIF" else "RGB"
    frames = [noise(400, 300, mode, seed).convert("P" if fmt == "GIF" else "RGB") for seed in range(6)]
    data = encoded(frames, fmt, **params)
    assert reason(tmp_path, data[: len(data) // 2], name) == expected


def _gif_frame(width: int, height: int) -> bytes:
    """One GIF image block (descriptor + data) of a ``width`` x ``height`` frame."""
    im = Image.new("P", (width, height), 0)
    im.putpalette([0, 0, 0, 255, 255, 255] + [0] * 762)
    data = encoded([im], "GIF")
    start = data.find(b"\x2c\x00\x00\x00\x00" + struct.pack("<HH", width, height))
    return data[start:-1]


def test_gif_with_larger_later_frames_renders_frame_0_without_decoding_them(tmp_path):
    small = Image.new("P", (10, 10), 1)
    small.putpalette([0, 0, 0, 255, 255, 255] + [0] * 762)
    head = encoded([small], "GIF")
    first = head.find(b"\x2c\x00\x00\x00\x00" + struct.pack("<HH", 10, 10))
    control = b"\x21\xf9\x04\x00\x0a\x00\x00\x00"  # 100 ms
    data = head[:first] + control + head[first:-1] + (control + _gif_frame(400, 400)) * 3 + b"\x3b"
    files, decisions = render(tmp_path, data, "late-bomb.gif", max_pixels=10_000)
    assert [(f.width, f.height) for f in files] == [(10, 10)] * 3
    assert (decisions.frames, decisions.duration_ms, decisions.animated) == (None, None, True)  # walk stopped


def test_progressive_jpeg_scan_bomb_is_refused(tmp_path):
    data = encoded([Image.new("L", (64, 64), 128)], "JPEG", progressive=True)
    last_scan, end = data.rfind(b"\xff\xda"), data.rfind(b"\xff\xd9")
    bomb = data[:end] + data[last_scan:end] * (MAX_JPEG_SCANS + 10) + data[end:]
    assert reason(tmp_path, bomb, "scans.jpg") == "too_many_scans"


def test_mpo_is_checked_and_reduced_like_a_jpeg(tmp_path):
    data = encoded([noise(2000, 1500, seed=1), noise(2000, 1500, seed=2)], "MPO", quality=80)
    files, decisions = render(tmp_path, data, "ultra-hdr.jpg")
    assert decisions.source_format == "MPO"
    assert (decisions.frames, decisions.animated, decisions.frames_dropped) == (2, False, 1)
    assert [(f.width, f.height) for f in files] == [(320, 240), (800, 600), (1600, 1200)]
    damaged = bytearray(data)
    damaged[len(data) // 4 : len(data) // 4 + 8] = b"\xff" * 7 + b"\x9f"
    assert reason(tmp_path, bytes(damaged), "damaged.jpg") == "corrupt_image"


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_float_image_with_non_finite_range_is_corrupt(tmp_path, bad):
    pixels = np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    pixels[0, 0] = bad  # Pillow's extrema become nan (or inf): there is no range to scale
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="TIFF")
    assert reason(tmp_path, out.getvalue(), "nan.tif") == "corrupt_image"


def test_multi_page_tiff_is_pages_not_animation(tmp_path):
    data = encoded([noise(100, 80, seed=i) for i in range(5)], "TIFF")
    _, decisions = render(tmp_path, data, "pages.tif")
    assert (decisions.frames, decisions.animated, decisions.duration_ms, decisions.frames_dropped) == (5, False, 0, 4)


def test_gif_cut_inside_its_last_frame_is_truncated(tmp_path):
    frames = [noise(200, 150, "L", seed).convert("P") for seed in range(3)]
    data = encoded(frames, "GIF", duration=100)
    assert reason(tmp_path, data[:-200], "cut.gif") == "truncated_image"  # frame 0 alone would render


# --- Found by a second break-it pass: damage that decoders hide, and structure bombs ---


def test_truncated_heic_fails_instead_of_green_tiles(tmp_path):
    data = media_file("photos", "iphone-13-pro-max.heic").read_bytes()
    assert reason(tmp_path, data[: len(data) // 2], "cut.heic") == "truncated_image"


def test_avif_decoder_errors_are_permanent(tmp_path):
    frames = [noise(300, 200, seed=s) for s in range(6)]
    damaged = bytearray(encoded(frames, "AVIF", duration=100, quality=60))
    n = len(damaged)
    damaged[n - n // 5 : n - 100] = b"\0" * (n // 5 - 100)
    assert reason(tmp_path, bytes(damaged), "damaged.avif") == "corrupt_image"


def heif(image: Image.Image, **params) -> bytes:
    """HEIF bytes made with pillow-heif's encoder (a test-only dependency: the worker reads
    HEIF with pi-heif, which has none), without registering it with Pillow."""
    import pillow_heif

    out = io.BytesIO()
    pillow_heif.from_pillow(image).save(out, **params)
    return out.getvalue()


def test_heif_whose_declared_size_lies_is_too_many_pixels(tmp_path):
    data = bytearray(heif(Image.new("RGB", (8192, 4320), (90, 120, 200)), quality=30))
    at = data.find(b"ispe")
    data[at + 8 : at + 16] = struct.pack(">II", 64, 64)
    assert reason(tmp_path, bytes(data), "lie.heic") == "too_many_pixels"


def test_animated_webp_and_avif_durations_are_measured(tmp_path):
    frames = [noise(60, 40, seed=s) for s in range(6)]
    for fmt in ("WEBP", "AVIF", "GIF"):
        _, decisions = render(tmp_path, encoded(frames, fmt, duration=100), f"anim.{fmt.lower()}")
        assert (decisions.frames, decisions.duration_ms, decisions.animated) == (6, 600, True), fmt


def test_too_many_frames_is_refused_before_walking_them_all(tmp_path):
    header = b"GIF89a" + struct.pack("<HH", 1, 1) + bytes([0x80, 0, 0]) + b"\0\0\0\xff\xff\xff"
    control = b"\x21\xf9\x04\x00\x01\x00\x00\x00"
    frame = b"\x2c" + struct.pack("<HHHH", 0, 0, 1, 1) + b"\0" + b"\x02\x02\x44\x01\x00"
    data = header + (control + frame) * (MAX_FRAMES + 1) + b"\x3b"
    assert reason(tmp_path, data, "many.gif") == "too_many_frames"


def test_tiff_tile_larger_than_the_pixel_limit_is_refused(tmp_path):
    width = height = 64
    tile = 26_000
    data_bytes = b"\x78\x9c\x03\x00\x00\x00\x00\x01"  # a tiny zlib stream: the tile size is the bomb
    entries = [
        (256, 4, 1, width),
        (257, 4, 1, height),
        (258, 3, 3, 0),
        (259, 3, 1, 8),
        (262, 3, 1, 2),
        (277, 3, 1, 3),
        (284, 3, 1, 1),
        (322, 4, 1, tile),
        (323, 4, 1, tile),
        (324, 4, 1, 0),
        (325, 4, 1, len(data_bytes)),
    ]
    ifd_len = 2 + 12 * len(entries) + 4
    bits_at = 8 + ifd_len
    fixed = {258: bits_at, 324: bits_at + 8}
    ifd = (
        struct.pack("<H", len(entries))
        + b"".join(struct.pack("<HHII", tag, kind, count, fixed.get(tag, value)) for tag, kind, count, value in entries)
        + b"\0" * 4
    )
    data = b"II*\0" + struct.pack("<I", 8) + ifd + struct.pack("<HHH", 8, 8, 8) + b"\0\0" + data_bytes
    assert reason(tmp_path, data, "tile.tif") == "too_many_pixels"


def test_jpeg_structure_bombs_are_refused_before_pillow_reads_them(tmp_path):
    data = encoded([Image.new("L", (8, 8), 128)], "JPEG")
    sos = data.rfind(b"\xff\xda")
    fill = data[:sos] + b"\xff" * 10_000 + data[sos:]
    comments = data[:sos] + b"\xff\xfe\x00\x02" * 1_001 + data[sos:]
    assert reason(tmp_path, fill, "fill.jpg") == "corrupt_image"
    assert reason(tmp_path, comments, "comments.jpg") == "corrupt_image"


def test_png_chunk_flood_and_missing_end_are_refused(tmp_path):
    import zlib

    data = encoded([Image.new("L", (8, 8), 100)], "PNG")
    idat = data.find(b"IDAT") - 4
    chunk = struct.pack(">I", 0) + b"abCd" + struct.pack(">I", zlib.crc32(b"abCd"))
    assert reason(tmp_path, data[:idat] + chunk * 100_001 + data[idat:], "flood.png") == "corrupt_image"
    assert reason(tmp_path, data[: data.find(b"IEND") - 4], "no-end.png") == "truncated_image"


def test_gif_comment_flood_is_refused(tmp_path):
    header = b"GIF89a" + struct.pack("<HH", 8, 8) + bytes([0x80, 0, 0]) + b"\0\0\0\xff\xff\xff"
    frame = b"\x2c" + struct.pack("<HHHH", 0, 0, 1, 1) + b"\0" + b"\x02\x02\x44\x01\x00"
    data = header + b"\x21\xfe" + b"\x01A" * 20_000 + b"\0" + frame + b"\x3b"
    assert reason(tmp_path, data, "comments.gif") == "corrupt_image"


def test_a_phone_heic_with_bytes_appended_renders_and_one_cut_before_its_data_is_truncated(tmp_path):
    data = media_file("photos", "iphone-13-pro-max.heic").read_bytes()
    files, decisions = render(tmp_path, data + bytes(range(256)) * 4, "appended.heic")
    assert [(f.width, f.height) for f in files] == [(240, 320), (600, 800), (1200, 1600)]
    assert decisions.orientation == 6  # its grid's irot 3 (270 degrees anti-clockwise)
    mdat = data.find(b"mdat") - 4
    assert data.find(b"meta") < mdat  # meta first, as the camera writes it
    assert reason(tmp_path, data[:mdat], "no-data.heic") == "truncated_image"


def test_the_image_limits_come_from_the_settings(tmp_path):
    """bootstrap.steps builds the image step with Settings' limits: a 2-scan cap refuses an
    ordinary progressive JPEG (Pillow writes about ten scans)."""
    from PIL import Image

    from mediajobs.bootstrap import steps
    from mediajobs.domain.jobs import RenderContext
    from mediajobs.settings import Settings

    source = tmp_path / "progressive.jpg"
    Image.new("RGB", (64, 48), "teal").save(source, "JPEG", progressive=True)
    step = steps(Settings(max_jpeg_scans=2), in_process=True)["image.variants"]
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(PermanentFailure) as caught:
        step.run(source, load_recipe("web-image", 1).params, RenderContext(), out)
    assert caught.value.reason == "too_many_scans" and "scans > 2: the limit is" in caught.value.detail
