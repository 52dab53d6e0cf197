"""Read ``template.yaml`` (CloudFormation short-form tags included) and resolve the
intrinsic functions the local runner needs against local resource names."""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

#: PyYAML's safe loader on libyaml when PyYAML was built with it (its wheels are): the same
#: documents, parsed about ten times faster than the pure-Python scanner.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CfnLoader(_SafeLoader):  # type: ignore[misc]
    """SafeLoader that turns ``!Ref X`` into ``{"Ref": "X"}``, ``!GetAtt A.B`` into
    ``{"Fn::GetAtt": ["A", "B"]}`` and any other ``!Fn`` into ``{"Fn::Fn": ...}``."""


def _construct_tag(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{tag_suffix}": value}


_CfnLoader.add_multi_constructor("!", _construct_tag)


# Logical ids in template.yaml that the local tools instantiate or name, written once here.
BUCKET_ID: Final = "MediaBucket"
RULE_ID: Final = "OriginalEventsRule"
QUEUE_ID: Final = "JobsQueue"
DLQ_ID: Final = "DeadLetterQueue"
EVENTS_DLQ_ID: Final = "EventsDeadLetterQueue"
BACKFILL_QUEUE_ID: Final = "BackfillQueue"
BACKFILL_DLQ_ID: Final = "BackfillDeadLetterQueue"
TABLE_ID: Final = "JobsTable"
SOURCES_TABLE_ID: Final = "SourcesTable"
ASSETS_TABLE_ID: Final = "AssetsTable"
OUTBOX_TABLE_ID: Final = "OutboxTable"
BUS_ID: Final = "NotificationBus"
FAILURES_QUEUE_ID: Final = "NotificationFailuresQueue"
DISPATCHER_ID: Final = "DispatcherFunction"
DECISION_STREAM_ID: Final = "DecisionStream"
DECISIONS_BUCKET_ID: Final = "DecisionsBucket"
KEY_SECRET_ID: Final = "JobKeySecret"  # noqa: S105 -- a logical id, not a secret
FUNCTION_ID: Final = "WorkerFunction"

#: Logical ids the local runner needs; a template without them is not ours.
REQUIRED_RESOURCES: Final = frozenset({BUCKET_ID, RULE_ID, QUEUE_ID, DLQ_ID, TABLE_ID, FUNCTION_ID})


def _is_ours(path: Path) -> bool:
    try:
        return set(load_template(path)["Resources"]) >= REQUIRED_RESOURCES
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError):
        return False


def find_template(start: Path | None = None) -> Path:
    """Locate mediajobs' ``template.yaml``: ``$MEDIAJOBS_TEMPLATE``, else the nearest one above
    this package (an editable install in the repository), else above the current directory.
    A ``template.yaml`` that lacks the stack's resources is skipped.

    Raises
    ------
    FileNotFoundError
        If none is found.
    """
    explicit = os.environ.get("MEDIAJOBS_TEMPLATE")
    if explicit:
        return Path(explicit)
    for base in (Path(__file__).resolve(), start or Path.cwd()):
        for folder in (base, *base.parents):
            candidate = folder / "template.yaml"
            if candidate.is_file() and _is_ours(candidate):
                return candidate
    raise FileNotFoundError("mediajobs' template.yaml not found: run from the repository or set MEDIAJOBS_TEMPLATE")


_PARSED: dict[tuple[str, int, int], dict[str, Any]] = {}
_PARSED_LOCK = threading.Lock()


def load_template(path: Path) -> dict[str, Any]:
    """Parse a SAM/CloudFormation template into plain data (a copy the caller may change).

    A file parsed before, unchanged since (same size and modification time), is not parsed
    again: every embedded AWS of a process reads the same template.

    Raises
    ------
    OSError
        If the file cannot be read.
    ValueError, yaml.YAMLError
        If it is not a CloudFormation template.
    """
    stat = os.stat(path)
    key = (str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)
    with _PARSED_LOCK:
        document = _PARSED.get(key)
    if document is None:
        with open(path, encoding="utf-8") as f:
            document = yaml.load(f, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
        if not isinstance(document, dict) or "Resources" not in document:
            raise ValueError(f"{path} is not a CloudFormation template")
        with _PARSED_LOCK:
            _PARSED[key] = document
    return copy.deepcopy(document)


def resolve(
    value: Any,
    refs: dict[str, str],
    attrs: dict[tuple[str, str], str],
    params: dict[str, str],
    conditions: Mapping[str, bool] | None = None,
) -> Any:
    """Resolve ``Ref``, ``Fn::GetAtt``, ``Fn::Sub`` and ``Fn::If`` in ``value``.

    Parameters
    ----------
    refs: logical id -> value of ``Ref`` (local resource names).
    attrs: (logical id, attribute) -> value of ``Fn::GetAtt``.
    params: parameter name -> value (defaults from the template).
    conditions: condition name -> its value (:func:`condition_values`); without it an
        ``Fn::If`` is left as it is.

    A ``Ref`` to a resource the runner does not create resolves to ``local-<LogicalId>``,
    an ``Fn::GetAtt`` of one to ``local-<LogicalId>.<Attribute>``.
    """
    if isinstance(value, list):
        return [resolve(v, refs, attrs, params, conditions) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Fn::If"} and conditions is not None:
        name, if_true, if_false = value["Fn::If"]
        return resolve(if_true if conditions[name] else if_false, refs, attrs, params, conditions)
    if set(value) == {"Ref"}:
        name = value["Ref"]
        if name in params:
            return params[name]
        return refs.get(name, f"local-{name}")  # resources the runner does not create (layers, roles)
    if set(value) == {"Fn::GetAtt"}:
        logical_id, attribute = value["Fn::GetAtt"]
        # Attributes of resources the runner does not create (the role, the log group).
        return attrs.get((logical_id, attribute), f"local-{logical_id}.{attribute}")
    if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        text: str = value["Fn::Sub"]
        for (logical_id, attribute), resolved in attrs.items():
            text = text.replace("${" + f"{logical_id}.{attribute}" + "}", resolved)
        for name, resolved in {**refs, **params}.items():
            text = text.replace("${" + name + "}", resolved)
        return text
    return {k: resolve(v, refs, attrs, params, conditions) for k, v in value.items()}


def condition_values(template: dict[str, Any], params: dict[str, str]) -> dict[str, bool]:
    """Each of the template's ``Conditions`` evaluated with ``params`` (``Fn::Equals``,
    ``Fn::Not``, ``Fn::And``, ``Fn::Or``, ``Condition`` and ``Ref`` of a parameter).

    Raises
    ------
    ValueError
        A condition function this reader does not know.
    """
    declared = template.get("Conditions") or {}

    def value(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if set(node) == {"Ref"}:
            return params.get(node["Ref"], "")
        if set(node) == {"Condition"}:
            return value(declared[node["Condition"]])
        (function, args), *_ = node.items()
        if function == "Fn::Equals":
            return str(value(args[0])) == str(value(args[1]))
        if function == "Fn::Not":
            return not value(args[0])
        if function == "Fn::And":
            return all(value(a) for a in args)
        if function == "Fn::Or":
            return any(value(a) for a in args)
        raise ValueError(f"condition function {function} is not supported")

    return {name: bool(value(node)) for name, node in declared.items()}


def function_environments(
    template: dict[str, Any], refs: dict[str, str], attrs: dict[tuple[str, str], str]
) -> dict[str, dict[str, str]]:
    """The environment of every ``AWS::Serverless::Function`` of ``template`` that has one
    (the ``Globals`` then its own ``Variables``), by logical id, in the template's order:
    references resolved with ``refs`` and ``attrs`` (:func:`resolve`), parameters at their
    defaults, ``Fn::If`` by the conditions they give (:func:`condition_values`); values as
    strings."""
    params = parameter_defaults(template)
    conditions = condition_values(template, params)
    globals_env = (template.get("Globals", {}).get("Function", {}).get("Environment", {}) or {}).get("Variables", {})
    shared = resolve(globals_env, refs, attrs, params, conditions)
    found: dict[str, dict[str, str]] = {}
    for logical_id, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        own = (resource.get("Properties", {}).get("Environment", {}) or {}).get("Variables", {})
        env = {**shared, **resolve(own, refs, attrs, params, conditions)}
        if env:
            found[logical_id] = {k: str(v) for k, v in env.items()}
    return found


def parameter_defaults(template: dict[str, Any]) -> dict[str, str]:
    """Parameter name -> its default, as a string."""
    return {name: str(spec.get("Default", "")) for name, spec in (template.get("Parameters") or {}).items()}


@dataclass(frozen=True)
class WorkerFunction:
    """The worker function as the template declares it, resolved (:func:`worker_function`).

    Attributes
    ----------
    env: its environment (the template's ``Globals`` then its own ``Variables``), as strings.
    batch_size: its SQS event source's ``BatchSize`` (default 10, as Lambda's).
    timeout_s: its ``Timeout``, seconds (default 3, as Lambda's).
    """

    env: dict[str, str]
    batch_size: int
    timeout_s: int


def worker_function(
    template: dict[str, Any], refs: dict[str, str], attrs: dict[tuple[str, str], str]
) -> WorkerFunction:
    """The worker function of ``template`` (:data:`FUNCTION_ID`), its references resolved
    with ``refs`` and ``attrs`` (:func:`resolve`) and the parameters' defaults.

    Raises
    ------
    KeyError
        If the template has no worker function.
    StopIteration
        If the function has no SQS event source.
    """
    params = parameter_defaults(template)
    function = resolve(template["Resources"][FUNCTION_ID]["Properties"], refs, attrs, params)
    globals_env = (template.get("Globals", {}).get("Function", {}).get("Environment", {}) or {}).get("Variables", {})
    env = {**resolve(globals_env, refs, attrs, params), **function.get("Environment", {}).get("Variables", {})}
    sqs_event = next(e["Properties"] for e in function["Events"].values() if e["Type"] == "SQS")
    return WorkerFunction(
        env={k: str(v) for k, v in env.items()},
        batch_size=int(sqs_event.get("BatchSize", 10)),
        timeout_s=int(function.get("Timeout", 3)),
    )
