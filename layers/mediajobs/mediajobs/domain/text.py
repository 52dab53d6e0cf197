"""Text kept or shown within a bound: a string cut to a number of characters."""

from __future__ import annotations

from typing import Final

#: What ends a cut string: HORIZONTAL ELLIPSIS (U+2026), one character.
ELLIPSIS: Final = "\u2026"


def shortened(text: str, max_chars: int) -> str:
    """``text`` when it has at most ``max_chars`` characters (Python's: code points); else
    its first ``max_chars - 1`` characters and :data:`ELLIPSIS`, ``max_chars`` in all. Pure.

    Raises
    ------
    ValueError
        If ``max_chars`` is less than 1.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars is at least 1, not {max_chars}")
    return text if len(text) <= max_chars else text[: max_chars - 1] + ELLIPSIS
