"""The ``mediajobs`` command: ``demo`` and ``process``, through the embedded AWS.

``serve`` holds an embedded AWS on a port (``--worker``: with the worker behind its event
source mapping); ``status`` and ``delete`` reach a running ``serve`` (``--endpoint``).

Exit codes: 0 success (also when inputs fail permanently: that is a result, reported),
1 internal error (or, for ``status``, no asset for the key), 2 usage error.
"""

from __future__ import annotations

import argparse
import signal
import sys

from mediajobs.local.commands import collect, delete, demo, process, serve, simulate, status, webhook
from mediajobs.local.commands.common import InternalError
from mediajobs.local.commands.delete import cmd_delete
from mediajobs.local.commands.served import DEFAULT_ENDPOINT, asset_document
from mediajobs.local.commands.simulate import MAX_DDB_REQUESTS_PER_DUPLICATE, storm_failures
from mediajobs.local.commands.status import cmd_status
from mediajobs.local.session import AdapterWrapper

__all__ = [
    "COMMANDS",
    "DEFAULT_ENDPOINT",
    "MAX_DDB_REQUESTS_PER_DUPLICATE",
    "InternalError",
    "asset_document",
    "build_parser",
    "cmd_delete",
    "cmd_status",
    "main",
    "storm_failures",
]

#: The command modules, in the order ``mediajobs --help`` lists them: each one's
#: ``add_parser(subparsers)`` registers its command and the ``run`` :func:`main` calls.
COMMANDS = (demo, process, simulate, serve, status, delete, webhook, collect)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``mediajobs`` command: ``--log-level``, then one
    subcommand per module of :data:`COMMANDS`, each with its ``run`` in the namespace."""
    parser = argparse.ArgumentParser(prog="mediajobs", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="ERROR", help="worker log level, logs go to stderr (default ERROR)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


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
        The exit code: 0 success, 1 internal error (said on stderr), 130 interrupted; a
        usage error exits 2 (``SystemExit``, from argparse).
    """
    parser = build_parser()
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


if __name__ == "__main__":
    sys.exit(main())
