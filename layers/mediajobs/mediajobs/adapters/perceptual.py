"""Perceptual hashes of pictures, with Pillow: what a moderation policy's known-content
lists compare by Hamming distance (:mod:`mediajobs.domain.moderation`)."""

from __future__ import annotations

from PIL import Image


def dhash(image: Image.Image) -> int:
    """The 64-bit difference hash of ``image``: grey, resized to 9 x 8 pixels (Lanczos),
    one bit per pixel saying whether it is brighter than its right neighbour, row by row
    (Neal Krawetz's dHash, "Kind of Like That", 2013). A re-encode or a resize moves a few
    bits; another picture about half of them.

    Returns
    -------
    int
        0 to 2**64 - 1; ``f"{h:016x}"`` is how a policy writes it.
    """
    small = image.convert("L").resize((9, 8), Image.Resampling.LANCZOS)
    pixels = small.tobytes()  # one byte a pixel (mode L), rows top to bottom
    bits = 0
    for row in range(8):
        for col in range(8):
            left, right = pixels[row * 9 + col], pixels[row * 9 + col + 1]
            bits = (bits << 1) | (1 if left > right else 0)
    return bits
