"""What a decoder's error means (mediajobs.adapters.imaging._decode_failure): a valid file
the decoder cannot handle is ``unsupported_feature``, a failed allocation
``memory_limit_exceeded``, damage ``corrupt_image`` or ``truncated_image``; the decoder's
message is the detail. The messages are the ones Pillow, libavif and libheif give."""

from __future__ import annotations

import errno
import struct

import pytest

from mediajobs.adapters.imaging import _decode_failure


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (RuntimeError("Conversion from YUV failed: Reformat failed"), "unsupported_feature"),  # libavif, MC 10
        (RuntimeError("Failed to decode frame 0: Not implemented"), "unsupported_feature"),  # libavif
        (RuntimeError("Unsupported feature: Unsupported codec"), "unsupported_feature"),  # libheif
        (RuntimeError("Error while loading plugin: Support for this compression format has not been built in"),
         "unsupported_feature"),  # pi-heif without an AV1 decoder
        (OSError("decoder tiff_jpeg2000 not available"), "unsupported_feature"),  # Pillow built without it
        (OSError(errno.ENOMEM, "Cannot allocate memory"), "memory_limit_exceeded"),
        (RuntimeError("Memory allocation error: Unspecified"), "memory_limit_exceeded"),  # libheif
        (OSError("out of memory when reading image file"), "memory_limit_exceeded"),  # Pillow codec status -9
        (RuntimeError("Invalid input: Unspecified: Security limit exceeded"), "too_many_pixels"),
        (RuntimeError("Failed to decode frame 0: Decoding of color planes failed"), "corrupt_image"),
        (RuntimeError("Invalid input: Unsupported data version"), "corrupt_image"),
        (OSError("image file is truncated"), "truncated_image"),
        (struct.error("unpack requires a buffer of 4 bytes"), "truncated_image"),
        (SyntaxError("broken PNG file"), "corrupt_image"),
    ],
)  # fmt: skip
def test_a_decoder_error_is_told_apart_by_what_it_says(error, reason):
    failure = _decode_failure(error)
    assert failure.reason == reason
    assert str(error) in failure.detail  # the decoder's own message is the detail
