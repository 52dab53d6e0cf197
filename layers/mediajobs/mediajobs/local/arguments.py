"""The types of the ``mediajobs`` command's bounded numeric flags (argparse's ``type=``).

Each converts one flag's text or refuses it: argparse turns the refusal into a usage error
(exit 2) that names the flag, e.g. ``argument --uploads: must be a positive integer, got 0``,
or, for text that is no number at all, ``argument --uploads: invalid positive_integer
value: 'x'`` (argparse names the type by its ``__name__``: keep the names).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

_Number = TypeVar("_Number", int, float)


@dataclass(frozen=True)
class Bounded(Generic[_Number]):
    """An argparse ``type``: a flag's text converted to a number, refused out of bounds.

    Attributes
    ----------
    name: its ``__name__``, which argparse shows when the text is no number.
    convert: ``int`` or ``float``.
    out_of_bounds: whether a converted value is refused.
    refusal: the message of a refused value; ``{text}`` stands for the flag's text.
    """

    name: str
    convert: Callable[[str], _Number]
    out_of_bounds: Callable[[_Number], bool]
    refusal: str

    @property
    def __name__(self) -> str:
        """:attr:`name`, as argparse looks it up."""
        return self.name

    def __call__(self, text: str) -> _Number:
        """The flag's value.

        Raises
        ------
        argparse.ArgumentTypeError
            If the value is out of bounds (argparse: a usage error saying ``refusal``).
        ValueError
            If ``text`` is no number (argparse: ``invalid <name> value``).
        """
        value = self.convert(text)
        if self.out_of_bounds(value):
            raise argparse.ArgumentTypeError(self.refusal.format(text=text))
        return value


#: A share, 0 to 1 inclusive (``--crash-rate 0.05``).
share: Final = Bounded("share", float, lambda value: not 0.0 <= value <= 1.0, "a share is between 0 and 1, got {text}")
#: An integer above 0 (``--uploads 200``).
positive_integer: Final = Bounded(
    "positive_integer", int, lambda value: value <= 0, "must be a positive integer, got {text}"
)
#: A number of seconds above 0, fractions allowed (``--max-seconds 7200``).
positive_seconds: Final = Bounded(
    "positive_seconds", float, lambda value: value <= 0, "must be a positive number of seconds, got {text}"
)
#: A whole number, 0 or more (``simulate --backfill-at 0``: none).
non_negative_integer: Final = Bounded(
    "non_negative_integer", int, lambda value: value < 0, "must be 0 or more, got {text}"
)
#: A whole number of seconds, 0 or more (``collect --grace-seconds 0``).
non_negative_seconds: Final = Bounded(
    "non_negative_seconds", int, lambda value: value < 0, "must be 0 or more seconds, got {text}"
)
