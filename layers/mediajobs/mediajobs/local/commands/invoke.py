"""``mediajobs invoke``: a function of ``template.yaml`` run as ``sam local invoke FUNCTION
-e EVENT --env-vars FILE`` runs it, in this process: no SAM CLI, no Docker.

The function's ``CodeUri`` and ``Handler`` come from the template (``functions/<name>/app.py``,
``app.lambda_handler``), its environment from the file ``mediajobs serve --env-vars`` wrote
(its entry for the function), its context from :class:`~mediajobs.local.runner.LocalLambdaContext`
(the function's ``Timeout``). ``host.docker.internal`` in that file -- how a container of
``sam local invoke`` reaches ``serve`` -- is this machine here, so it reads ``127.0.0.1``.
The handler's answer is printed as JSON on stdout; its logs and metrics go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from mediajobs.local.commands import SUMMARIES
from mediajobs.local.session import AdapterWrapper

#: How a container of ``sam local invoke`` reaches the host (``serve --docker-host``'s default).
DOCKER_HOST = "host.docker.internal"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs invoke`` (its ``run``: :func:`run`)."""
    invoke = subparsers.add_parser("invoke", help=SUMMARIES["invoke"])
    invoke.add_argument("function", metavar="FUNCTION", help="its logical id in template.yaml, e.g. StatusFunction")
    invoke.add_argument("-e", "--event", required=True, metavar="FILE", help="the event, a JSON file (events/)")
    invoke.add_argument(
        "--env-vars", required=True, metavar="FILE", help="the file `mediajobs serve --env-vars FILE` wrote"
    )
    invoke.add_argument("--template", default="template.yaml", metavar="FILE", help="default: template.yaml")
    invoke.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None) -> int:
    """Run the function's handler on the event; print its answer as JSON; exit 0 (a usage
    error, exit 2, for a function the template does not have, or the env-vars file lacks,
    or an event that is not JSON)."""
    from mediajobs.local.runner import LocalLambdaContext
    from mediajobs.local.session import configure_worker_logs
    from mediajobs.local.template import load_template

    template_path = Path(args.template)
    if not template_path.is_file():
        parser.error(f"{template_path}: no template here (run it from the clone's folder, or give --template)")
    resources = load_template(template_path).get("Resources", {})
    functions = sorted(k for k, r in resources.items() if r.get("Type") == "AWS::Serverless::Function")
    if args.function not in functions:
        parser.error(f"{args.function!r} is not a function of {template_path}: {', '.join(functions)}")
    try:
        event = json.loads(Path(args.event).read_text(encoding="utf-8"))
        env = json.loads(Path(args.env_vars).read_text(encoding="utf-8"))[args.function]
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read {args.event} or {args.env_vars}: {exc}")
    except KeyError:
        parser.error(
            f"{args.env_vars} has no entry for {args.function} (write it again with mediajobs serve --env-vars)"
        )
    properties = resources[args.function].get("Properties", {})
    timeout = properties.get("Timeout")
    configure_worker_logs(args.log_level)  # stderr: stdout is the answer
    with tempfile.TemporaryDirectory(prefix="mediajobs-invoke-") as tmp:
        os.environ.update({k: str(v).replace(DOCKER_HOST, "127.0.0.1") for k, v in env.items()})
        os.environ.setdefault("WORK_DIR", tmp)  # Lambda's /tmp
        handler = _handler(template_path.parent / str(properties["CodeUri"]), str(properties["Handler"]))
        context = LocalLambdaContext(timeout_s=timeout if isinstance(timeout, int) else 900)
        with contextlib.redirect_stdout(sys.stderr):  # its metrics (EMF) and prints: stdout is the answer
            answer = handler(event, context)
    print(json.dumps(answer, default=str), flush=True)
    return 0


def _handler(code_uri: Path, handler: str) -> Any:
    """The handler ``module.function`` of the code in ``code_uri``, imported from its file."""
    module_name, _, function = handler.rpartition(".")
    path = code_uri / f"{module_name}.py"
    spec = importlib.util.spec_from_file_location(f"mediajobs_invoked_{module_name}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, function)
