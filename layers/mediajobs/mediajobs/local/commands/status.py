"""``mediajobs status``: an original's asset on a running ``mediajobs serve``, as the status
function answers ``GET /assets?key=...`` (``--json``: exactly its document).

A status read is one ``GetItem`` on the served assets table: this module and what it
imports at the top stay light (no moto, no embedded AWS, no worker: ``mediajobs status``
answers in well under a second; ``tests/functional/test_cli_imports.py`` holds it), and the
command builds only the asset reader, on the served endpoint's names
(:func:`~mediajobs.local.commands.served.served_view`), asking the server nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from mediajobs.domain.errors import TransientFailure
from mediajobs.domain.status import answer
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.common import InternalError, because, human_size
from mediajobs.local.commands.served import (
    add_endpoint,
    credentials_refused,
    refused_credentials,
    served_assets,
    served_view,
)
from mediajobs.local.stack import LocalStack
from mediajobs.service_layer.ports import Assets


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs status`` (its ``run``: :func:`run`)."""
    status = subparsers.add_parser("status", help=SUMMARIES["status"])
    status.add_argument("key", metavar="KEY", help="the original's key (originals/...)")
    status.add_argument("--json", action="store_true", help="print the status document (the status function's JSON)")
    add_endpoint(status)
    status.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: Any = None) -> int:
    """``mediajobs status``: :func:`cmd_status` on the served stack's asset records."""
    return cmd_status(args, parser)


def cmd_status(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    assets_of: Callable[[LocalStack], Assets] | None = None,
) -> int:
    """Print the asset of an original key of a running ``mediajobs serve``, as the status
    function answers it (``--json``: exactly its document). A key outside ``originals/`` is
    a usage error; an unknown one exits 1.

    Parameters
    ----------
    assets_of: builds the Assets port for the served stack's names
        (:func:`~mediajobs.local.commands.served.served_view`; default
        :func:`~mediajobs.local.commands.served.served_assets`; tests pass a fake).

    Raises
    ------
    InternalError
        If nothing answers at ``--endpoint`` or it holds no stack's assets table.
    """
    stack = served_view(args.endpoint)
    assets = (assets_of or served_assets)(stack)
    try:
        status, body = answer([args.key], lambda key: assets.get(stack.bucket, key), stack.settings().originals_prefix)
    except TransientFailure as exc:
        if refused_credentials(exc):
            raise credentials_refused(stack) from exc
        raise InternalError(
            f"could not read {stack.assets_table_name} at {args.endpoint} ({exc}): is `mediajobs serve` running there?"
        ) from exc
    if status == 400:
        parser.error(f"{args.key!r}: {body['message']}")
    if status == 404:
        print(f"mediajobs: no asset for {args.key} in {stack.bucket} at {stack.endpoint_url}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(body), flush=True)
    else:
        _print_status(body)
    return 0


def _print_status(document: dict[str, Any]) -> None:
    """The human form of a :func:`~mediajobs.domain.assets.status_document`."""
    version = document["version"]
    state = document["state"]
    if document.get("reason") and document["reason"] != state:
        state += f": {document['reason']}{because(document.get('detail'))}"
    elif document.get("detail"):  # rejected (the rule that fired), review (the rule that holds it)
        state += because(document.get("detail"))
    print(f"{document['key']}  {state}")
    size = "size unknown" if version["size_bytes"] is None else f"{version['size_bytes']} bytes"
    print(f"  version   {version['version_id'] or '-'} (etag {version['etag'] or '-'}, {size})")
    print(f"  sha256    {document['sha256'] or '-'}")
    if document.get("placeholder"):
        placeholder = document["placeholder"]
        print(f"  placeholder  {placeholder.get('placeholder')} {placeholder.get('dominant_colour', '')}")
    for recipe, job in document["recipes"].items():
        line = f"  {recipe:<22} {job['state']}"
        if job.get("reason"):
            line += f": {job['reason']}"
        if job.get("progress") is not None and job["state"] == "processing":
            line += f" {job['progress']:.0%}"
        print(line + f"  {job['job_key'][:12]}")
        for out in job["outputs"]:
            print(f"    {out['key']}  {out['format']} {out['width']}x{out['height']} {human_size(out['bytes'])}")
