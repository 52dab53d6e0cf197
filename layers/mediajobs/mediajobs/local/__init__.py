"""mediajobs outside Lambda: the embedded AWS, the local event source, the CLI, the storm.

This package needs the ``local`` extra (``pip install '.[local]'`` in a clone: moto, Werkzeug,
tqdm, PyYAML) and is not built into the Lambda layer (``layers/mediajobs/Makefile``).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Final

#: The modules the ``local`` extra of ``pyproject.toml`` provides, by import name.
EXTRA_MODULES: Final = ("moto", "werkzeug", "tqdm", "yaml")

#: What the ``mediajobs`` command prints when the extra is not installed.
EXTRA_MISSING: Final = "the local extra is needed: pip install '.[local]' in a clone of the repository (make does it)"


def missing_extra_modules() -> list[str]:
    """Import names of the ``local`` extra that cannot be found (none: it is installed)."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mediajobs`` console script: :func:`mediajobs.local.cli.main`.

    Returns
    -------
    int
        The command's exit code; 1, with :data:`EXTRA_MISSING` on stderr, when the ``local``
        extra is not installed (rather than an ImportError's traceback).
    """
    if missing := missing_extra_modules():
        print(f"mediajobs: {EXTRA_MISSING} (missing: {', '.join(missing)})", file=sys.stderr)
        return 1
    from mediajobs.local.cli import main as cli_main

    return cli_main(argv)
