"""Synthetic test cards for moderation: pictures made here, never real content.

A moderation policy's rules are exercised end to end, by the demo and the tests, with
cards whose difference hash is chosen (:func:`card`): a 9 x 8 grid of grey levels drawn
at any size has exactly the bits its grid says, whatever the resize.

* ``known-bad``: the card moderation-policy v1 lists among its known content (perceptual
  hash within 6 bits, outcome ``rejected``): a deployment can check its hash rule by
  uploading it (``mediajobs moderation-card known-bad``). It stands for known-bad content;
  it shows nothing.
* ``review``: the card the embedded AWS's declared labels name ``Visually Disturbing``
  (91.5 %): what makes the demo's upload wait for review. Declared labels are not a model
  (``local/declared-labels.json``): deployed, Rekognition decides.
* ``plain``: a card no rule and no declared label names (accepted).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Final

from PIL import Image, ImageDraw

#: Each card's seed: its grid's grey levels come from ``random.Random(seed)`` (the
#: Mersenne Twister: the same sequence on every Python).
CARDS: Final = {"known-bad": 20260001, "review": 20260002, "plain": 20260003}


def grid(seed: int) -> list[list[int]]:
    """The 8 rows of 9 grey levels (0-255) of a card: neighbours at least 40 apart, so a
    resize or a JPEG cannot flip a bit of the difference hash."""
    rng = random.Random(seed)
    rows = []
    for _ in range(8):
        row = [rng.randrange(40, 216)]
        for _ in range(8):
            step = rng.choice((-1, 1)) * rng.randrange(40, 80)
            nxt = row[-1] + step
            if not 20 <= nxt <= 235:
                nxt = row[-1] - step
            row.append(max(0, min(255, nxt)))
        rows.append(row)
    return rows


def card(name: str, size: tuple[int, int] = (900, 640)) -> Image.Image:
    """The test card ``name`` (:data:`CARDS`) as an RGB picture of ``size`` (width, height,
    pixels): its grid's cells filled with their grey, tinted, and a frame with the card's
    name in blocks (no font is needed).

    Raises
    ------
    KeyError
        For a name not in :data:`CARDS`.
    """
    levels = grid(CARDS[name])
    width, height = size
    image = Image.new("RGB", size)
    draw = ImageDraw.Draw(image)
    tint = {"known-bad": (1.0, 0.55, 0.55), "review": (1.0, 0.85, 0.45), "plain": (0.55, 0.8, 1.0)}[name]
    for r, row in enumerate(levels):
        for c, level in enumerate(row):
            box = (c * width // 9, r * height // 8, (c + 1) * width // 9 - 1, (r + 1) * height // 8 - 1)
            draw.rectangle(box, fill=tuple(int(level * t) for t in tint))
    return image


def expected_hash(name: str) -> int:
    """The difference hash a card has by construction (the bits of its grid's rows)."""
    bits = 0
    for row in grid(CARDS[name]):
        for left, right in zip(row, row[1:], strict=False):
            bits = (bits << 1) | (1 if left > right else 0)
    return bits


def write_card(name: str, dest: Path) -> Path:
    """Write the card ``name`` as a PNG at ``dest``; returns ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    card(name).save(dest, "PNG")
    return dest
