"""The ``mediajobs`` command's subcommands, one module each.

Each module's ``add_parser(subparsers)`` registers its subcommand with its flags and
``set_defaults(run=...)``; :func:`mediajobs.local.cli.main` parses and calls
``args.run(args, parser, wrap_adapters)``: its arguments, the ``mediajobs`` parser (a usage
error is ``parser.error(...)``, exit 2) and the test hook of the commands that run the worker
(``demo``, ``process``: :class:`~mediajobs.local.session.LocalSession`), which the others
ignore; it returns the exit code.

What several share: :mod:`.common` (the internal error, the inputs and the results table of
``demo`` and ``process``) and :mod:`.served` (a running ``mediajobs serve``, reached by its
endpoint).

:data:`SUMMARIES` names the commands in the order ``mediajobs --help`` lists them, each with
its one-line help: the ``mediajobs`` command imports only the module of the command it
runs (:func:`mediajobs.local.cli.build_parser`), so ``mediajobs status`` never imports
what ``demo`` or ``serve`` need (moto, the worker, the gallery).
"""

from __future__ import annotations

from typing import Final

#: Each command's one-line help (its module ``mediajobs.local.commands.<name>`` registers it
#: with this help), in the order ``mediajobs --help`` lists them.
SUMMARIES: Final[dict[str, str]] = {
    "demo": "sample photos and videos through the embedded AWS, each event delivered twice",
    "process": "process your files through the embedded AWS",
    "simulate": "a storm of uploads, duplicates, redeliveries and worker crashes; prints one JSON object",
    "serve": "run the embedded AWS with the stack until Ctrl-C (for sam local invoke; with --worker, for "
    "mediajobs status, delete and collect)",
    "status": "an original's asset on a running `mediajobs serve`, as GET /assets?key=... answers it",
    "delete": "delete an original on a running `mediajobs serve` (a delete marker)",
    "webhook": "a local webhook receiver that verifies what the dispatcher sends",
    "collect": "one collection run against `mediajobs serve`: delete the derivatives no asset references",
    "backfill": "start, watch, pause, resume or cancel the backfill of the active recipe set on `mediajobs serve`",
    "invoke": "run a function of template.yaml on an event as sam local invoke does, in this process",
    "review": "accept or reject an asset held for review on a running `mediajobs serve`",
    "promo": "request (or --status: read) the promo of an album on a running `mediajobs serve`",
    "decisions": "query the decision log of a running `mediajobs serve`: spikes --since 24h, affected --policy N",
}
