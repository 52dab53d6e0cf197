"""``mediajobs process``: the user's files through the embedded AWS; a table, or one JSON
object per input (``--json``, docs/local.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mediajobs.domain.jobs import JobResult, public_state
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.common import (
    InternalError,
    checked_inputs,
    first_result,
    key_name,
    print_splits,
    print_table,
    refused_unread,
    safe_name,
    sha256_file,
)
from mediajobs.local.progress import ProgressBars
from mediajobs.local.session import AdapterWrapper, LocalSession


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs process`` (its ``run``: :func:`run`)."""
    process = subparsers.add_parser("process", help=SUMMARIES["process"])
    process.add_argument("files", nargs="+", metavar="FILE")
    process.add_argument("--out", required=True, metavar="DIR", help="where derivatives and manifests go")
    process.add_argument("--json", action="store_true", help="one JSON object per input on its own line")
    process.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None) -> int:
    """Process the user's files; one JSON line per input with ``--json``. Exit 0 when every
    input was answered (done, or failed for good), 1 when one was not processed (said on
    stderr; every other input is still reported)."""
    files, out_dir = checked_inputs(args, parser)
    with LocalSession(log_level=args.log_level, bars=ProgressBars(), wrap_adapters=wrap_adapters) as session:
        keys = []
        for i, path in enumerate(files):
            keys.append(session.upload(path, f"originals/cli/{i:04d}-{key_name(path.name)}"))
        session.run()
        rows = []
        unprocessed = 0
        for i, (given, path, key) in enumerate(zip(args.files, files, keys, strict=True)):
            try:
                result = first_result(session, key)
            except InternalError as exc:  # report it, and still report every other input
                print(f"mediajobs: {given}: {exc}", file=sys.stderr, flush=True)
                unprocessed += 1
                continue
            folder = out_dir / f"{i:04d}-{safe_name(path.stem)}"
            jobs_json = []
            for job in result.jobs:
                fetched = session.fetch(job, folder / job.recipe.replace("@", "-v")) if job.state == "done" else None
                jobs_json.append(_job_json(job, fetched))
            line = {
                "input": given,
                "sha256": result.sha256 or (None if refused_unread(result) else sha256_file(path)),
                "media": result.media,
                "state": public_state(result.state),
                "reason": result.reason,
                "detail": result.detail or None,
                "jobs": jobs_json,
            }
            if line["state"] != result.state:  # the word before 0.2, kept through 0.2.x (docs/local.md)
                line["legacy_state"] = str(result.state)
            rows.append((path.name, result))
            if args.json:
                print(json.dumps(line), flush=True)
        if not args.json:
            print_table(rows)
            print_splits(session, [(path.name, key) for path, key in zip(files, keys, strict=True)])
            written = any(job.state == "done" for _, result in rows for job in result.jobs)
            print(
                f"\nderivatives written to {out_dir.resolve()}" if written else "\nno derivatives: every input failed"
            )
    return 1 if unprocessed else 0


def _job_json(job: JobResult, fetched: dict[str, Any] | None) -> dict[str, Any]:
    """A job of ``process --json``'s line: its state and outputs, with the paths ``fetched``."""
    outputs = []
    for out in job.outputs:
        outputs.append(
            {
                "name": out.name,
                "path": str(fetched["outputs"][out.name]) if fetched else None,
                "format": out.format,
                "width": out.width,
                "height": out.height,
                "bytes": out.bytes,
            }
        )
    entry = {
        "recipe": job.recipe,
        "job_key": job.job_key,
        "state": public_state(job.state),
        "reused": job.reused,
        "reason": job.reason,
        "manifest": str(fetched["manifest"]) if fetched and job.manifest_key else None,
        "outputs": outputs,
    }
    if entry["state"] != job.state:  # the word before 0.2, kept through 0.2.x (docs/local.md)
        entry["legacy_state"] = str(job.state)
    return entry
