"""A running ``mediajobs serve`` as the commands that reach it see it (``status``,
``delete``, ``collect``): its stack found by its endpoint, its asset records, an asset's
status document."""

from __future__ import annotations

import argparse
import dataclasses
import os
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Final

import botocore.exceptions

from mediajobs.domain.assets import status_document
from mediajobs.local import template
from mediajobs.local.commands.common import InternalError
from mediajobs.local.credentials import credentials_file, read_credentials_file
from mediajobs.local.events import ACCOUNT_ID, REGION
from mediajobs.local.stack import LOCAL_DEFAULTS, LocalStack, resource_names
from mediajobs.service_layer.ports import Assets
from mediajobs.settings import _ENV_NAMES

#: Where ``mediajobs serve`` listens unless told otherwise (its ``--port`` default).
DEFAULT_ENDPOINT: Final = "http://127.0.0.1:5000"
#: The prefix of the names a ``serve``'s stack has (:class:`~mediajobs.local.embedded.EmbeddedAws`).
SERVED_NAME: Final = "mediajobs-local"
#: The error codes of a request signed with keys the embedded AWS does not have, or with
#: the wrong secret (:data:`mediajobs.local.authentication.ANSWERS`); a ``HeadBucket``'s
#: refusal has no body, only its status.
REFUSED_CREDENTIALS: Final = frozenset(
    {
        "403",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidSignatureException",
    }
)


def add_endpoint(parser: argparse.ArgumentParser) -> None:
    """Give a command the ``--endpoint`` of the ``serve`` it reaches (default: ``AWS_ENDPOINT_URL``,
    which ``serve`` prints for an app's shell, else :data:`DEFAULT_ENDPOINT`)."""
    parser.add_argument(
        "--endpoint",
        default=os.environ.get("AWS_ENDPOINT_URL") or DEFAULT_ENDPOINT,
        help=f"the serve's endpoint (default: $AWS_ENDPOINT_URL, as serve prints it, else {DEFAULT_ENDPOINT})",
    )


def served_credentials(endpoint: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The credentials to sign requests to the ``mediajobs serve`` at ``endpoint`` with:
    ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` when both are set (the ``export``
    lines ``serve`` printed, pasted in this shell), else those that ``serve`` wrote for its
    port (:func:`~mediajobs.local.credentials.credentials_file`: readable by the user who
    started it only).

    Parameters
    ----------
    environ: the environment to read (default ``os.environ``).

    Raises
    ------
    InternalError
        If neither gives any, saying what to do.
    """
    env = os.environ if environ is None else environ
    key_id, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if key_id and secret:
        return {"aws_access_key_id": key_id, "aws_secret_access_key": secret}
    port = urllib.parse.urlsplit(endpoint).port or 80
    found = read_credentials_file(port, env)
    if found is not None:
        return found
    raise InternalError(
        f"no credentials for a serve at {endpoint}: is one running there (`mediajobs serve --port N`; another "
        "endpoint: --endpoint URL or AWS_ENDPOINT_URL)? `mediajobs serve` makes new ones each time it starts. "
        "Paste the `export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...` lines it printed in this shell, "
        f"or run this command as the user who started it (it wrote them to {credentials_file(port, env)}, "
        "which is gone when it stops)"
    )


def refused_credentials(exc: BaseException) -> bool:
    """Whether ``exc``, or an error that caused it, is the served stack refusing the
    credentials it was signed with (:data:`REFUSED_CREDENTIALS`: botocore's error code, or
    PynamoDB's ``cause_response_code``)."""
    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "cause_response_code", None)
        if isinstance(seen, botocore.exceptions.ClientError):
            code = seen.response.get("Error", {}).get("Code")
        if code in REFUSED_CREDENTIALS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def credentials_refused(stack: LocalStack) -> InternalError:
    """The error a command stops with when the ``serve`` at ``stack``'s endpoint refused
    its credentials, saying what to do."""
    return InternalError(
        f"{stack.endpoint_url} refused the credentials (access key {stack.credentials['aws_access_key_id']}): they "
        "are not the ones this `mediajobs serve` printed (it makes new ones each time it starts). Paste its latest "
        "`export` lines in this shell, or unset AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to use those it wrote "
        "for its own user"
    )


def served_view(endpoint: str, name: str = SERVED_NAME, credentials: Mapping[str, str] | None = None) -> LocalStack:
    """The names of a ``mediajobs serve``'s stack at ``endpoint`` (``<name>-media``,
    ``<name>-assets`` ...), as :class:`~mediajobs.local.embedded.EmbeddedAws` gives them,
    with its region and ``credentials`` (default :func:`served_credentials`): no request is
    made, no queue is asked for and the template is not read (its queue fields are empty,
    its ``function_env`` too). Enough for a command that reads a table of it (``status``);
    :func:`served_stack` is the whole stack.

    Raises
    ------
    InternalError
        If no credentials are given or found (:func:`served_credentials`).
    """
    keys = dict(credentials) if credentials is not None else served_credentials(endpoint)
    return LocalStack(
        endpoint_url=endpoint,
        bucket=f"{name}-media",
        rule_name=f"{name}-object-created",
        queue_url="",
        queue_arn="",
        dlq_url="",
        dlq_arn="",
        events_dlq_url="",
        events_dlq_arn="",
        table_name=f"{name}-jobs",
        sources_table_name=f"{name}-sources",
        assets_table_name=f"{name}-assets",
        outbox_table_name=f"{name}-outbox",
        decisions_bucket=f"{name}-decisions",
        decision_stream_name=f"{name}-decisions",
        function_env={},
        batch_size=1,
        timeout_s=1,
        region=REGION,
        credentials=keys,
    )


def served_stack(endpoint: str, name: str = SERVED_NAME, credentials: Mapping[str, str] | None = None) -> LocalStack:
    """The :class:`~mediajobs.local.embedded.LocalStack` of a running ``mediajobs serve`` at
    ``endpoint``: the names :class:`~mediajobs.local.embedded.EmbeddedAws` gives its
    resources (``<name>-media``, ``<name>-jobs`` ...), the queues' URLs and ARNs asked of the
    server, the worker's environment resolved from the template as ``serve`` resolved it.
    Its :attr:`~mediajobs.local.embedded.LocalStack.worker_env` has no ``WORK_DIR``: it is
    for reading and writing the served stack (``status``, ``delete``, ``collect``), not for
    rendering (``serve --worker`` renders, in the serving process).

    Parameters
    ----------
    credentials: what to sign with (default :func:`served_credentials`).

    Raises
    ------
    InternalError
        If no credentials are found, nothing answers at ``endpoint``, it refuses the
        credentials, or it holds no such stack.
    """
    found = template.load_template(template.find_template())
    view = served_view(endpoint, name, credentials)
    sqs = view.client("sqs")
    queues: dict[str, tuple[str, str]] = {}
    try:
        view.client("s3").head_bucket(Bucket=view.bucket)
        for suffix in ("jobs", "dlq", "events-dlq", "backfill", "backfill-dlq"):
            url = sqs.get_queue_url(QueueName=f"{name}-{suffix}")["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            queues[suffix] = (url, arn)
        secret_name = resource_names(name).key_secret  # the job keys' secret serve made at start
        key_secret = view.client("secretsmanager").get_secret_value(SecretId=secret_name)
    except botocore.exceptions.EndpointConnectionError as exc:
        raise InternalError(f"nothing answers at {endpoint}: start `mediajobs serve` first") from exc
    except botocore.exceptions.ClientError as exc:
        if refused_credentials(exc):
            raise credentials_refused(view) from exc
        raise InternalError(f"{endpoint} holds no mediajobs stack ({exc}): is it `mediajobs serve`?") from exc
    env, batch_size, timeout_s = _function_env(
        found, view, queues["jobs"][1], queues["backfill"][1], key_secret_arn=str(key_secret["ARN"])
    )
    return dataclasses.replace(
        view,
        queue_url=queues["jobs"][0],
        queue_arn=queues["jobs"][1],
        dlq_url=queues["dlq"][0],
        dlq_arn=queues["dlq"][1],
        events_dlq_url=queues["events-dlq"][0],
        events_dlq_arn=queues["events-dlq"][1],
        backfill_queue_url=queues["backfill"][0],
        backfill_queue_arn=queues["backfill"][1],
        backfill_dlq_url=queues["backfill-dlq"][0],
        function_env=env,
        batch_size=batch_size,
        timeout_s=timeout_s,
        worker_env={
            **env,
            **LOCAL_DEFAULTS,
            _ENV_NAMES["endpoint_url"]: endpoint,
            _ENV_NAMES["region"]: REGION,
            _ENV_NAMES["media_bucket"]: view.bucket,
            _ENV_NAMES["key_secret"]: str(key_secret["SecretString"]),
        },
    )


def _function_env(
    found: dict[str, Any], view: LocalStack, queue_arn: str, backfill_arn: str, *, key_secret_arn: str
) -> tuple[dict[str, str], int, int]:
    """The worker function's environment, its jobs queue's SQS event's ``BatchSize`` and
    its ``Timeout`` (seconds), resolved from the template ``found`` with ``view``'s names,
    the jobs queue's and the backfill lane's ARNs and the job keys' secret's, as ``serve``
    resolved them."""
    refs = {template.BUCKET_ID: view.bucket, template.TABLE_ID: view.table_name}
    refs[template.KEY_SECRET_ID] = key_secret_arn
    refs[template.SOURCES_TABLE_ID] = view.sources_table_name
    refs[template.ASSETS_TABLE_ID] = view.assets_table_name
    refs[template.OUTBOX_TABLE_ID] = view.outbox_table_name
    refs[template.DECISION_STREAM_ID] = view.decision_stream_name
    refs[template.DECISIONS_BUCKET_ID] = view.decisions_bucket
    arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table"
    attrs = {
        (template.BUCKET_ID, "Arn"): f"arn:aws:s3:::{view.bucket}",
        (template.TABLE_ID, "Arn"): f"{arn}/{view.table_name}",
        (template.QUEUE_ID, "Arn"): queue_arn,
        (template.BACKFILL_QUEUE_ID, "Arn"): backfill_arn,
    }
    params = template.parameter_defaults(found)
    function = template.resolve(found["Resources"][template.FUNCTION_ID]["Properties"], refs, attrs, params)
    globals_env = (found.get("Globals", {}).get("Function", {}).get("Environment", {}) or {}).get("Variables", {})
    env = {
        k: str(v)
        for k, v in {
            **template.resolve(globals_env, refs, attrs, params),
            **function.get("Environment", {}).get("Variables", {}),
        }.items()
    }
    sqs_event = function["Events"]["Jobs"]["Properties"]
    return env, int(sqs_event.get("BatchSize", 10)), int(function.get("Timeout", 3))


def served_assets(stack: LocalStack) -> Assets:
    """The served stack's asset records: the DynamoDB adapter on its assets table, signing
    with the stack's credentials (never the user's)."""
    return stack.assets()


def asset_document(
    stack: LocalStack, key: str, assets_of: Callable[[LocalStack], Assets] | None = None
) -> dict[str, Any] | None:
    """The status document of ``key``'s asset on ``stack`` (a session's or a served one), or
    ``None`` when it has none: what the gallery's badge shows (``GalleryEntry.status``).

    Parameters
    ----------
    assets_of: builds the Assets port for ``stack`` (default :func:`served_assets`).
    """
    view = (assets_of or served_assets)(stack).get(stack.bucket, key)
    if view is None:
        return None
    return status_document(view)
