"""``mediajobs delete``: an original of a running ``mediajobs serve`` deleted as an app
deletes it (a delete marker)."""

from __future__ import annotations

import argparse

from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.served import add_endpoint, served_stack
from mediajobs.local.session import AdapterWrapper


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs delete`` (its ``run``: :func:`run`)."""
    delete = subparsers.add_parser("delete", help=SUMMARIES["delete"])
    delete.add_argument("key", metavar="KEY", help="the original's key (originals/...)")
    add_endpoint(delete)
    delete.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None) -> int:
    """``mediajobs delete``: :func:`cmd_delete`."""
    return cmd_delete(args, parser)


def cmd_delete(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Delete an original of a running ``mediajobs serve``'s bucket as an app would:
    ``DeleteObject`` without a version, so the versioned bucket keeps the bytes under a
    delete marker and S3 (the embedded AWS) sends ``Object Deleted`` ("Delete Marker
    Created") to the worker (``serve --worker`` processes it). A key outside ``originals/``
    is a usage error; exit 0.

    Raises
    ------
    InternalError
        If nothing answers at ``--endpoint`` or it holds no stack.
    """
    stack = served_stack(args.endpoint)
    if not args.key.startswith(stack.settings().originals_prefix):
        parser.error(f"{args.key!r}: only originals are deleted (keys under {stack.settings().originals_prefix})")
    s3 = stack.client("s3")
    marker = s3.delete_object(Bucket=stack.bucket, Key=args.key)
    what = (
        f"delete marker {marker['VersionId']}"
        if marker.get("VersionId")
        else "deleted (no version: unversioned bucket, or nothing there)"
    )
    print(f"deleted {args.key}: {what}", flush=True)
    return 0
