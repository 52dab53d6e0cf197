"""The ``mediajobs`` command: ``demo`` and ``process``, through the embedded AWS.

``serve`` holds an embedded AWS on a port (``--worker``: with the worker behind its event
source mapping); ``status`` and ``delete`` reach a running ``serve`` (``--endpoint``).

Exit codes: 0 success (also when inputs fail permanently: that is a result, reported),
1 internal error (or, for ``status``, no asset for the key), 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.common import InternalError

if TYPE_CHECKING:
    from mediajobs.local.session import AdapterWrapper

# Also given by name, imported when asked for: the names of _LAZY (below).
__all__ = ["COMMANDS", "InternalError", "build_parser", "command_module", "command_of", "main"]

#: The commands, in the order ``mediajobs --help`` lists them: each one's module
#: (``mediajobs.local.commands.<name>``, :func:`command_module`) has ``add_parser(subparsers)``,
#: which registers it and the ``run`` :func:`main` calls.
COMMANDS: Final = tuple(SUMMARIES)

#: What this module gives by name, imported when first asked for (:func:`__getattr__`): a
#: name a command's module defines, so that importing the CLI imports no command's module.
_LAZY: Final = {
    "DEFAULT_ENDPOINT": "served",
    "asset_document": "served",
    "cmd_delete": "delete",
    "cmd_status": "status",
    "MAX_DDB_REQUESTS_PER_DUPLICATE": "simulate",
    "storm_failures": "simulate",
}


def __getattr__(name: str) -> Any:
    """The names of :data:`_LAZY`, from their command's module (imported then)."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"mediajobs.local.commands.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def command_module(name: str) -> ModuleType:
    """The module of the command ``name`` (one of :data:`COMMANDS`), imported now.

    Raises
    ------
    KeyError
        If ``name`` is not a command.
    """
    if name not in SUMMARIES:
        raise KeyError(name)
    return importlib.import_module(f"mediajobs.local.commands.{name}")


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs (its first word that is not an option or ``--log-level``'s
    value), or ``None`` when that is not one of :data:`COMMANDS` (or there is none)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in SUMMARIES else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``mediajobs`` command: ``--log-level``, then one
    subcommand per name of :data:`COMMANDS`, each with its ``run`` in the namespace.

    Parameters
    ----------
    command: the one command whose module is imported and whose flags are registered
        (the others are listed by name and help only, and cannot be parsed); ``None``,
        every command's module and flags.
    """
    parser = argparse.ArgumentParser(prog="mediajobs", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="ERROR", help="worker log level, logs go to stderr (default ERROR)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, summary in SUMMARIES.items():
        if command is None or name == command:
            command_module(name).add_parser(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def _exit_on_signal(signum: int, frame: object) -> None:
    """Unwind with exit code 128 + ``signum``; while ffmpeg is being started, once its
    process group is known (:func:`mediajobs.adapters.ffmpeg.defer_stop`)."""

    def stop() -> None:
        raise SystemExit(128 + signum)

    ffmpeg = sys.modules.get("mediajobs.adapters.ffmpeg")  # loaded only by a command that runs it
    if ffmpeg is not None and ffmpeg.defer_stop(stop):
        return
    stop()


def main(argv: list[str] | None = None, *, wrap_adapters: AdapterWrapper | None = None) -> int:
    """Entry point of the ``mediajobs`` console script.

    Parameters
    ----------
    argv: the arguments (default ``sys.argv[1:]``).
    wrap_adapters: the test hook of ``demo`` and ``process``: wraps the worker's real
        adapters (:class:`~mediajobs.local.session.LocalSession`), so a test injects a
        fault by wrapping an adapter, not by replacing a class's method.

    Returns
    -------
    int
        The exit code: 0 success, 1 internal error (said on stderr), 130 interrupted, 141
        the reader of its output gone (a closed pipe: nothing said); a usage error exits 2
        (``SystemExit``, from argparse).
    """
    argv = sys.argv[1:] if argv is None else argv
    # Only the module of the command asked for is imported (a status read imports no moto).
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    # SIGTERM and SIGHUP unwind like Ctrl-C: a running ffmpeg's process group is killed and
    # work folders are removed on the way out (the default action would orphan ffmpeg).
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    try:
        code: int = args.run(args, parser, wrap_adapters)
        return code
    except InternalError as exc:
        print(f"mediajobs: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: ffmpeg and work folders were cleaned up on the way out
        print("mediajobs: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # `mediajobs status KEY | head -1`: the reader left, nothing is wrong
        # Python's advice ("Note on SIGPIPE", signal module docs): point stdout at devnull so
        # the interpreter's last flush at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
