"""The JPEG marker walk finds corrupt entropy data that libjpeg silently skips."""

from __future__ import annotations

import io

from PIL import Image

from mediajobs.domain.inspections.jpeg_markers import find_jpeg_corruption


def _jpeg(progressive: bool = False) -> bytes:
    im = Image.linear_gradient("L").resize((256, 256)).convert("RGB")
    out = io.BytesIO()
    im.save(out, format="JPEG", quality=90, progressive=progressive, exif=Image.Exif().tobytes())
    return out.getvalue()


def test_valid_baseline_and_progressive_jpegs_pass():
    assert find_jpeg_corruption(_jpeg()) is None
    assert find_jpeg_corruption(_jpeg(progressive=True)) is None


def test_a_block_of_ff_bytes_followed_by_garbage_is_found():
    data = bytearray(_jpeg())
    middle = len(data) // 2
    data[middle : middle + 64] = b"\xff" * 63 + b"\x9f"
    assert find_jpeg_corruption(bytes(data)) == f"invalid marker 0xFF9F at byte {middle + 62}"


def test_a_truncated_stream_is_left_to_the_decoder():
    data = _jpeg()
    assert find_jpeg_corruption(data[: len(data) // 2]) is None


def test_non_jpeg_data_is_not_examined():
    assert find_jpeg_corruption(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32) is None
