"""``mediajobs webhook listen``: a receiver for the dispatcher's webhooks on this machine,
printing one JSON line per verified delivery (docs/local.md)."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from mediajobs.domain.notifications import webhook_key
from mediajobs.local.commands import SUMMARIES
from mediajobs.local.commands.common import WEBHOOK_SECRET_ENV, InternalError, webhook_secret
from mediajobs.local.receiver import Delivery, WebhookReceiver, parse_answers
from mediajobs.local.session import AdapterWrapper


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``mediajobs webhook`` and its one command, ``listen`` (its ``run``: :func:`run`)."""
    webhook = subparsers.add_parser("webhook", help=SUMMARIES["webhook"])
    webhook_sub = webhook.add_subparsers(dest="webhook_command", required=True)
    listen = webhook_sub.add_parser(
        "listen",
        help="verify each delivery (Standard Webhooks) and print it as one JSON line",
        description="Listen for the dispatcher's webhooks, verify each signature with the secret, print one "
        "JSON line per verified delivery (its webhook-id, type, key, state, the status answered, whether the "
        "id was seen before). A delivery that does not verify is answered 401. The secret comes from "
        f"--secret-file, the environment variable {WEBHOOK_SECRET_ENV}, or --secret (one of them).",
    )
    listen.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    listen.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    listen.add_argument(
        "--secret-file", metavar="PATH", help="a file holding the signing secret (whsec_ + base64; chmod 600 it)"
    )
    listen.add_argument(
        "--secret",
        help="the signing secret (whsec_ + base64); VISIBLE TO OTHER USERS in `ps`: prefer --secret-file or "
        f"the environment variable {WEBHOOK_SECRET_ENV}",
    )
    listen.add_argument(
        "--answer",
        default="200",
        metavar="LIST",
        help="statuses to answer in turn, the last repeating; 429:2 is a 429 with Retry-After: 2 (default 200)",
    )
    listen.add_argument(
        "--count", type=int, default=0, help="stop once this many distinct ids were answered 2xx (default: never)"
    )
    listen.set_defaults(run=run)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, wrap_adapters: AdapterWrapper | None = None) -> int:
    """``mediajobs webhook listen``: verify and print each delivery until Ctrl-C (or
    ``--count`` deliveries); exit 0. An answer list or a secret that is not one, no secret,
    or two sources of it (:func:`~.common.webhook_secret`) is a usage error.

    Raises
    ------
    InternalError
        If it cannot listen on ``--host``:``--port``.
    """
    secret = webhook_secret(parser, flag=("--secret", args.secret), file_flag=("--secret-file", args.secret_file))
    if secret is None:
        parser.error(f"webhook listen needs the signing secret: --secret-file PATH, {WEBHOOK_SECRET_ENV}, or --secret")
    try:
        webhook_key(secret.value, prefixed=True)  # the local form, checked before listening
    except ValueError as exc:
        parser.error(f"{secret.source}: {exc}")
    try:
        answers = parse_answers(args.answer)
        receiver = WebhookReceiver(secret.value, host=args.host, port=args.port, answers=answers)
    except ValueError as exc:
        parser.error(str(exc))
    except OSError as exc:
        raise InternalError(f"cannot listen on {args.host}:{args.port}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - standardwebhooks refuses a bad secret with bare errors
        parser.error(f"{secret.source} is not a Standard Webhooks secret (whsec_ + base64): {exc}")
    done = threading.Event()

    def show(delivery: Delivery) -> None:
        seen = sum(d.id == delivery.id for d in receiver.received.deliveries)
        asset = delivery.payload.get("asset", {})
        line = {
            "webhook_id": delivery.id,
            "type": delivery.payload.get("type"),
            "key": asset.get("key"),
            "state": asset.get("state"),
            "answered": delivery.status,
            "repeat": seen > 1,
        }
        print(json.dumps(line), flush=True)
        accepted = {d.id for d in receiver.received.deliveries if 200 <= d.status < 300}
        if args.count and len(accepted) >= args.count:
            done.set()

    receiver.on_delivery = show
    receiver.start()
    print(f"listening on {receiver.url} (answers {args.answer}); Ctrl-C to stop", file=sys.stderr, flush=True)
    try:
        done.wait()
    finally:
        receiver.stop()
    return 0
