"""``mediajobs serve``: the embedded AWS with the stack on a port until Ctrl-C, for ``sam
local invoke`` (``--env-vars``: every function's environment) and, with ``--worker``, for ``status``, ``delete`` and
``collect``: the worker behind its event source mapping and the dispatcher on the outbox
stream, and the app page on the next port (:mod:`mediajobs.local.page`)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mediajobs.domain.webhook_targets import LOOPBACK_NETWORKS
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.common import WEBHOOK_SECRET_ENV, webhook_secret
from mediajobs.local.embedded import LOCAL_DEFAULTS, EmbeddedAws, LocalStack
from mediajobs.local.session import AdapterWrapper
from mediajobs.settings import _ENV_NAMES

#: ``WORKER_TIMEOUT_SECONDS`` of ``serve --worker``'s backfill: locally a deployment (an edit
#: of active.json) takes effect between two polls, so no invocation of the old set is left
#: after it; the second pass waits this long, not the function's 900 s.
LOCAL_DEPLOY_OVER_S = 10
#: Seconds between two backfill scans of ``serve --worker`` (the template's ``BackfillSchedule``
#: is a minute: locally a backfill goes on sooner), and the longest each may take.
BACKFILL_EVERY_S = 5.0
BACKFILL_TICK_S = 2.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs serve`` (its ``run``: :func:`run`)."""
    serve = subparsers.add_parser(
        "serve",
        help=SUMMARIES["serve"],
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for Docker)")
    serve.add_argument("--port", type=int, default=5000, help="port to listen on (default 5000)")
    serve.add_argument("--docker-host", default="host.docker.internal", help="how the function's container reaches it")
    serve.add_argument(
        "--env-vars", metavar="FILE", help="write every function's environment, by logical id, for --env-vars"
    )
    serve.add_argument(
        "--worker",
        action="store_true",
        help="also run the worker on the jobs queue (uploads and deletes are processed) and the dispatcher "
        "on the outbox stream (notifications to the stack's bus, and to --webhook-url)",
    )
    serve.add_argument(
        "--webhook-url",
        metavar="URL",
        help="with --worker: POST each notification there (https, or http to 127.0.0.1: a `mediajobs webhook "
        f"listen`), signed with the secret of --webhook-secret-file, {WEBHOOK_SECRET_ENV} or --webhook-secret; "
        "its host must not be or resolve to a private, link-local, metadata or other non-global address "
        "(but for --webhook-allow-networks)",
    )
    serve.add_argument(
        "--webhook-secret-file",
        metavar="PATH",
        help="a file holding the webhook's Standard Webhooks secret (whsec_ + base64; chmod 600 it)",
    )
    serve.add_argument(
        "--webhook-secret",
        metavar="SECRET",
        help="the webhook's Standard Webhooks secret (whsec_ + base64); VISIBLE TO OTHER USERS in `ps`: prefer "
        f"--webhook-secret-file or the environment variable {WEBHOOK_SECRET_ENV}",
    )
    serve.add_argument(
        "--webhook-allow-networks",
        metavar="CIDRS",
        default=LOOPBACK_NETWORKS,
        help="comma-separated networks the webhook may reach although they are not global (never a metadata "
        f'address); replaces the default, loopback: {LOOPBACK_NETWORKS} ("": none)',
    )
    serve.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None) -> int:
    """Check the webhook's flags, then :func:`cmd_serve` with ``args.webhook_secret`` the
    secret of whichever source gave it.

    A usage error (exit 2): two sources of the secret (:func:`~.common.webhook_secret`), a
    secret that is not one, ``--webhook-url`` without ``--worker`` or a secret, an allow
    list that is not CIDRs, or a URL that is not one -- its form, or a host that is, or
    resolves now to, an address no webhook is sent to (the message names it and why), or
    does not resolve.
    """
    secret = webhook_secret(
        parser,
        flag=("--webhook-secret", args.webhook_secret),
        file_flag=("--webhook-secret-file", args.webhook_secret_file),
    )
    if args.webhook_url and not (args.worker and secret):
        parser.error(
            f"--webhook-url needs --worker and a secret (--webhook-secret-file, {WEBHOOK_SECRET_ENV} or "
            "--webhook-secret)"
        )
    if secret:
        from mediajobs.adapters.webhooks import StandardWebhooksSigner
        from mediajobs.domain.notifications import webhook_key

        try:
            webhook_key(secret.value, prefixed=True)  # the local form, checked at start
            StandardWebhooksSigner(secret.value)
        except ValueError as exc:
            parser.error(f"{secret.source}: {exc}")
    if args.webhook_url:
        from mediajobs.adapters.webhooks import HttpTransport
        from mediajobs.domain.webhook_targets import parse_networks

        try:
            allowed = parse_networks(args.webhook_allow_networks)
        except ValueError as exc:
            parser.error(f"--webhook-allow-networks: {exc}")
        try:
            HttpTransport(allowed=allowed).checked_addresses(args.webhook_url)  # a literal or its name resolved now
        except ValueError as exc:
            parser.error(f"--webhook-url: {exc}")
        except OSError as exc:
            parser.error(f"--webhook-url {args.webhook_url}: its host does not resolve: {exc}")
    args.webhook_secret = secret.value if secret else None
    busy = [f"{port} ({what})" for port, what in served_ports(args) if not port_free(args.host, port)]
    if busy:
        parser.error(
            f"port {', '.join(busy)} is in use by another program (another `mediajobs serve`?): "
            "stop it, or start this one with --port N (it takes N, and N+1 and N+2 with --worker)"
        )
    return cmd_serve(args)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable and writable by this user only (mode 0600, set
    before a byte is written, and on a file that was there already): ``--env-vars`` holds
    the stack's credentials."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def served_ports(args: argparse.Namespace) -> list[tuple[int, str]]:
    """The ports ``serve`` listens on, each with what it serves: ``--port`` (the embedded
    AWS), and with ``--worker`` the two after it (the app page, the status function's URL);
    none for ``--port 0`` (any free one)."""
    if not args.port:
        return []
    ports = [(args.port, "the embedded AWS")]
    if args.worker:
        ports += [(args.port + 1, "the app page"), (args.port + 2, "the status function's URL")]
    return ports


def port_free(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be listened on now (a bind, at once released)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug's server binds
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the embedded AWS with the stack until interrupted (for ``sam local invoke``);
    exit 0. Its credentials (new at each start) are printed in the ``export`` lines, and
    written for the commands that reach it to a file only this user can read
    (:func:`~mediajobs.local.credentials.write_credentials_file`), removed when it stops."""
    with EmbeddedAws(host=args.host, port=args.port) as stack, served_credentials_file(stack) as written:
        if args.env_vars:
            env_vars = sam_env_vars(stack, container_endpoint(stack, args.docker_host))
            write_private(Path(args.env_vars), json.dumps(env_vars, indent=2) + "\n")
            print(
                f"wrote {args.env_vars} for sam local invoke --env-vars ({', '.join(env_vars)}); mode 0600: it "
                "holds this stack's secret access key"
            )
        print(
            f"embedded AWS at {stack.endpoint_url}: bucket {stack.bucket}, table {stack.table_name}, "
            f"queue {stack.queue_url}"
        )
        print(client_settings(stack))
        print(f"the commands that reach it (status, delete ...) read these credentials from {written}")
        keys = stack.settings().key_algorithm
        print(
            "job keys: algorithm 1, from public inputs (KEY_ALGORITHM_VERSION=1: a stack from before the keyed one)"
            if keys == 1
            else f"job keys: algorithm {keys}, keyed with this stack's secret (made now; docs/security.md)"
        )
        print(
            f"assets table {stack.assets_table_name}: `mediajobs status KEY --endpoint {stack.endpoint_url}`"
            f"{'' if args.worker else ' (add --worker to process uploads and deletes here)'}"
        )
        page = status = None
        if args.worker:
            from mediajobs.local.page import page_for

            page = page_for(stack, host=args.host, port=args.port + 1).__enter__()
            print(f"app page at {page.url}: drop files on it, watch them get ready (docs/apps.md)", flush=True)
            status = status_url(stack, host=args.host, port=args.port + 2).__enter__()
            print(
                f"status function URL at {status.url} (AuthType AWS_IAM: sign with SigV4, service lambda, the "
                "credentials above): the StatusUrl of docs/apps.md's backend code",
                flush=True,
            )
        print("press Ctrl-C to stop", flush=True)
        try:
            if args.worker:
                serve_worker(
                    stack,
                    args.log_level,
                    webhook_url=args.webhook_url,
                    webhook_secret=args.webhook_secret,
                    webhook_allow_networks=args.webhook_allow_networks,
                )
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            for server in (status, page):
                if server is not None:
                    server.__exit__(None, None, None)
    return 0


@contextlib.contextmanager
def served_credentials_file(stack: LocalStack) -> Iterator[Path]:
    """While open, ``stack``'s credentials are in the file the commands that reach a
    ``serve`` read (:func:`~mediajobs.local.credentials.credentials_file` of its port, mode
    0600); it is removed on exit (unless a later ``serve`` on the port wrote its own)."""
    from mediajobs.local.credentials import remove_credentials_file, write_credentials_file

    port = urllib.parse.urlsplit(stack.endpoint_url).port
    assert port is not None  # the server's own URL names its port
    path = write_credentials_file(port, stack.endpoint_url, stack.credentials)
    try:
        yield path
    finally:
        remove_credentials_file(path, stack.credentials)


def status_url(stack: LocalStack, *, host: str = "127.0.0.1", port: int = 0) -> Any:
    """The status function (``GET assets``, ``POST uploads``, ``POST promos`` ...) of the served
    stack behind a local function URL that checks SigV4 as Lambda does
    (:class:`~mediajobs.local.function_url.FunctionUrl`); not started."""
    from mediajobs.bootstrap import status_app
    from mediajobs.local.function_url import FunctionUrl

    settings = stack.settings(media_bucket=stack.bucket, jobs_queue_arn=stack.queue_arn)
    app = status_app(settings, clients=stack.clients(), assets=stack.assets())
    return FunctionUrl(app.resolve, credentials=stack.credentials, region=stack.region, host=host, port=port)


def container_endpoint(stack: LocalStack, docker_host: str) -> str:
    """How a function's container reaches the served stack: ``http://<docker_host>:<port>``,
    the port the server listens on (the one ``--port 0`` picked, not 0)."""
    port = urllib.parse.urlsplit(stack.endpoint_url).port
    return f"http://{docker_host}:{port}"


def signing_env(stack: LocalStack, endpoint_url: str) -> dict[str, str]:
    """The environment an AWS SDK reaches the served stack with: ``AWS_ENDPOINT_URL``
    ``endpoint_url`` and the stack's credentials, by boto3's names (the region is
    ``AWS_DEFAULT_REGION`` for an SDK, ``AWS_REGION`` in a function's, as Lambda sets it)."""
    return {
        _ENV_NAMES["endpoint_url"]: endpoint_url,
        "AWS_ACCESS_KEY_ID": stack.credentials["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": stack.credentials["aws_secret_access_key"],
    }


def client_settings(stack: LocalStack) -> str:
    """What an app needs to talk to the served stack, as lines to copy: the endpoint, the
    region and the credentials as the environment variables every AWS SDK and the AWS CLI
    read (``AWS_ENDPOINT_URL``: boto3 1.28+, AWS CLI 2.13+), and the bucket to upload to."""
    exports = {**signing_env(stack, stack.endpoint_url), "AWS_DEFAULT_REGION": stack.region}
    return "\n".join(
        [
            "for your app (boto3, the AWS CLI, any AWS SDK), in its shell:",
            *(f"  export {name}={value}" for name, value in exports.items()),
            f"  upload to bucket {stack.bucket} under originals/, e.g."
            f" boto3.client('s3').upload_file('photo.jpg', '{stack.bucket}', 'originals/photo.jpg')",
        ]
    )


def sam_env_vars(stack: LocalStack, endpoint_url: str) -> dict[str, dict[str, str]]:
    """What ``serve --env-vars`` writes for ``sam local invoke --env-vars``: every function's
    environment as ``template.yaml`` declares it (:attr:`LocalStack.function_envs`, by
    logical id), each with ``AWS_ENDPOINT_URL`` ``endpoint_url`` (how the function's
    container reaches this embedded AWS, e.g. ``http://host.docker.internal:5000``), the
    stack's credentials and region (:func:`signing_env`); a value naming the stack's own
    endpoint (a queue's URL) names ``endpoint_url`` instead."""
    served = {**signing_env(stack, endpoint_url), _ENV_NAMES["region"]: stack.region}
    # No video lane locally: a split video's parts go to the jobs queue, which `serve
    # --worker` polls (LOCAL_DEFAULTS, as for every local worker).
    lanes = {k: v for k, v in LOCAL_DEFAULTS.items() if k == _ENV_NAMES["video_queue_arn"]}
    return {
        function: {
            **{k: v.replace(stack.endpoint_url, endpoint_url) for k, v in env.items()},
            **{k: v for k, v in lanes.items() if k in env},
            **served,
        }
        for function, env in stack.function_envs.items()
    }


def serve_worker(
    stack: LocalStack,
    log_level: str,
    *,
    polls: int | None = None,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
    webhook_allow_networks: str = LOOPBACK_NETWORKS,
    active_text: Callable[[], str] | None = None,
) -> None:
    """Run the real worker handler behind the local event source mapping on ``stack``'s
    queue (as ``demo`` does), long-polling until interrupted (or ``polls`` receives: tests).
    Uploads, ``mediajobs delete`` and re-uploads to the served bucket are processed as
    they arrive. After each poll the real dispatcher delivers what the outbox stream
    holds: to the stack's bus, and to ``webhook_url`` signed with ``webhook_secret`` (a
    ``mediajobs webhook listen``) when given, its addresses checked at each POST with
    ``webhook_allow_networks`` admitted (comma-separated CIDRs; default loopback).

    An edit of ``recipes/active.json`` (``active_text``: how it is read; tests pass their
    own) is deployed between two polls, as a deployment of the stack would: the worker
    renders the new set, and the backfill schedule's code -- run every
    :data:`BACKFILL_EVERY_S` -- starts its backfill and goes on with it.

    Raises
    ------
    ValueError
        A webhook URL that is not https or http to a loopback host, or whose host is a
        literal address the rule refuses; a secret that is not a Standard Webhooks secret.
    """
    from mediajobs.bootstrap import active_file_text, active_recipes, build_backfiller, build_service
    from mediajobs.entrypoints import worker
    from mediajobs.local.notifications import local_dispatcher
    from mediajobs.local.runner import EventSourceMapping
    from mediajobs.local.session import configure_worker_logs, local_adapters, local_handler

    settings = stack.settings()
    # Locally the previous "deployment" is over between two polls: the backfill's second
    # pass need not wait the function's timeout.
    scan_settings = dataclasses.replace(settings, worker_timeout_s=LOCAL_DEPLOY_OVER_S)
    logger = configure_worker_logs(log_level)
    adapters = local_adapters(stack, settings)

    def deployed(text: str) -> tuple[list[EventSourceMapping], Any]:
        """The worker and the backfill scan on the active set ``text`` (active.json's)."""
        recipes = active_recipes(text)
        service = build_service(settings, adapters=adapters, recipes=recipes)
        handler = local_handler(worker.make_handler(service, logger=logger))
        queues = ((stack.queue_url, stack.queue_arn), (stack.backfill_queue_url, stack.backfill_queue_arn))
        esms = [
            EventSourceMapping(
                stack.client("sqs"),
                url,
                arn,
                handler,
                batch_size=stack.batch_size,
                timeout_s=stack.timeout_s,
                region=stack.region,
            )
            for url, arn in queues
            if url
        ]
        scan = build_backfiller(scan_settings, adapters, recipes=recipes) if stack.backfill_queue_url else None
        sets = ", ".join(f"{media}: {' + '.join(r.ref for r in rs)}" for media, rs in recipes.items())
        print(f"worker: active recipes {sets} (recipes/active.json; an edit is deployed at once)", flush=True)
        return esms, scan

    read_active = active_text or active_file_text
    current_text = read_active()
    mappings, backfiller = deployed(current_text)
    next_tick = time.monotonic()
    dispatcher = local_dispatcher(
        stack, webhook_url=webhook_url, webhook_secret=webhook_secret, webhook_allow_networks=webhook_allow_networks
    )
    print("worker: processing the jobs queue" + (" and the backfill lane" if len(mappings) > 1 else ""), flush=True)
    print(
        f"dispatcher: notifications to the bus {stack.notification_bus_name}"
        + (f" and to the webhook {webhook_url}" if webhook_url else " (add --webhook-url and a secret)"),
        flush=True,
    )
    done = 0
    while polls is None or done < polls:
        if (text := read_active()) != current_text:  # a deployment of the edited set
            current_text = text
            try:
                mappings, backfiller = deployed(text)
            except ValueError as exc:  # RecipeError: the edit is refused, the running set stays
                print(f"worker: recipes/active.json not deployed: {exc}", flush=True)
        for esm in mappings:
            esm.poll_once(wait_s=1 if esm is mappings[0] else 0)
        if backfiller is not None and time.monotonic() >= next_tick:  # the Backfill schedule, every few seconds
            backfiller.tick(budget_s=BACKFILL_TICK_S, auto_start=True)
            next_tick = time.monotonic() + BACKFILL_EVERY_S
        dispatcher.mapping.drain()
        done += 1
