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
"""
