"""The docs agree with the code: reason codes, environment names, alarms, CLI flags, links.

README.md and docs/*.md are read as text; what they must agree with is read from the code
(``domain/errors.py``, ``settings.py``, ``local/cli.py``) and from ``template.yaml``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from mediajobs.domain.errors import REASON_CODES
from mediajobs.local.cli import build_parser
from mediajobs.settings import _ENV_NAMES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
REASON_PAGE = DOCS / "reason-codes.md"
CONFIG_PAGE = DOCS / "configuration.md"
OPERATIONS_PAGE = DOCS / "operations.md"

#: Variables the configuration page documents that are not Settings fields: read by the
#: ffmpeg adapter, or by Settings as a fallback (region, the function's memory).
OTHER_VARIABLES = {"MEDIAJOBS_FFMPEG_DIR", "AWS_DEFAULT_REGION", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"}

#: More distinct reason codes than this in one paragraph of another page is a second list.
MAX_CODES_PER_PARAGRAPH = 4

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SHELL_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: Where a paragraph, or an item of a list, begins.
PARAGRAPH = re.compile(r"\n\s*\n|\n(?=\s*(?:\d+\.|[-*]) )")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return FENCE.sub("", text)


def _table_rows(text: str) -> list[list[str]]:
    """The body rows of every markdown table in ``text``, as stripped cells."""
    rows = []
    for line in _prose(text).splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _first_cell_names(text: str) -> list[str]:
    """The backquoted names that open a table row's first cell (``| `NAME` |``)."""
    names = []
    for row in _table_rows(text):
        names += re.findall(r"`([^`]+)`", row[0])
    return names


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", _prose(path.read_text()), re.MULTILINE)}


def _reason_table() -> dict[str, list[str]]:
    return {m.group(1): row for row in _table_rows(REASON_PAGE.read_text()) if (m := re.fullmatch(r"`(\w+)`", row[0]))}


def test_the_reason_code_page_lists_exactly_the_codes_of_errors_py():
    table = _reason_table()
    assert set(table) == set(REASON_CODES)
    assert len(table) == len(REASON_CODES), "a code is listed twice"


def test_every_reason_code_has_a_meaning_and_says_whether_it_is_permanent():
    for code, row in _reason_table().items():
        assert len(row) == 4, f"{code}: expected code | applies to | meaning | permanent"
        _, applies, meaning, permanent = row
        assert applies and len(meaning) > 20, code
        # Every code of errors.py is a PermanentFailure reason (PermanentFailure refuses others).
        assert permanent == "yes", code


@pytest.mark.parametrize("page", [p for p in PAGES if p != REASON_PAGE], ids=_id)
def test_no_other_page_lists_the_reason_codes(page):
    text = page.read_text()
    assert not set(_first_cell_names(text)) & REASON_CODES, "a table of reason codes outside reason-codes.md"
    for paragraph in PARAGRAPH.split(_prose(text)):
        if paragraph.lstrip().startswith("|"):
            continue  # a table of something else (variables, steps) naming a code per row
        named = {code for code in REASON_CODES if re.search(rf"\b{code}\b", paragraph)}
        assert len(named) <= MAX_CODES_PER_PARAGRAPH, f"a list of reason codes: {sorted(named)}"


def test_the_configuration_page_documents_every_environment_name_of_the_settings():
    documented = set(_first_cell_names(CONFIG_PAGE.read_text()))
    assert set(_ENV_NAMES.values()) <= documented
    assert documented - set(_ENV_NAMES.values()) <= OTHER_VARIABLES


def test_readme_variables_are_settings_names():
    readme = (ROOT / "README.md").read_text()
    variables = {name for name in _first_cell_names(readme) if name.isupper()}
    assert variables, "the README's configuration table is missing"
    assert variables <= set(_ENV_NAMES.values()) | OTHER_VARIABLES


class _CloudFormationLoader(yaml.SafeLoader):
    """A YAML loader that reads CloudFormation's short tags (``!Ref``, ``!Sub``) as plain values."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> object:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_CloudFormationLoader.add_multi_constructor("!", _any_tag)


def _template() -> dict:
    return yaml.load((ROOT / "template.yaml").read_text(), Loader=_CloudFormationLoader)  # noqa: S506


def test_the_runbook_has_a_section_per_alarm_of_the_template():
    resources = _template()["Resources"]
    alarms = {name for name, res in resources.items() if res["Type"] == "AWS::CloudWatch::Alarm"}
    assert alarms, "no alarm found in template.yaml"
    headings = set(re.findall(r"^### `(\w+)`", OPERATIONS_PAGE.read_text(), re.MULTILINE))
    assert headings == alarms


def test_documented_parameters_are_the_templates():
    parameters = set(_template()["Parameters"])
    readme = (ROOT / "README.md").read_text()
    documented = {name for name in _first_cell_names(readme) if name[:1].isupper() and not name.isupper()}
    assert documented == parameters


def _subcommand_options() -> dict[str, set[str]]:
    parser = build_parser()
    top = {s for a in parser._actions for s in a.option_strings}
    subparsers = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))

    def options(sub: argparse.ArgumentParser) -> set[str]:
        # A command with commands of its own (``webhook listen``): any of theirs.
        nested = [a for a in sub._actions if a.choices and isinstance(a.choices, dict)]
        found = set(sub._option_string_actions)
        for action in nested:
            for inner in action.choices.values():
                found |= options(inner)
        return found

    return {name: top | options(sub) for name, sub in subparsers.choices.items()}


def test_every_documented_mediajobs_command_and_flag_exists():
    options = _subcommand_options()
    seen = 0
    for page in PAGES:
        for block in SHELL_BLOCK.findall(page.read_text()):
            for line in block.splitlines():
                match = re.search(r"(?:^|\s|bin/)mediajobs (.*)", line)
                if not match:
                    continue
                words = match.group(1).split("#")[0].split()
                while words and words[0].startswith("--"):  # options before the command
                    words = words[2:] if words[0] == "--log-level" else words[1:]
                command = words[0] if words else ""
                assert command in options, f"{_id(page)}: no command mediajobs {command!r}"
                for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", " ".join(words[1:])):
                    assert flag in options[command], f"{_id(page)}: mediajobs {command} has no {flag}"
                seen += 1
    assert seen, "no mediajobs command found in the docs"


def test_the_simulate_flag_table_gives_the_cli_defaults():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    actions = {s: a for a in subparsers.choices["simulate"]._actions for s in a.option_strings}
    rows = [row for row in _table_rows((DOCS / "local.md").read_text()) if row[0].startswith("`--")]
    assert {row[0].strip("`") for row in rows} == {s for s in actions if s.startswith("--") and s != "--help"}
    for row in rows:
        default = actions[row[0].strip("`")].default
        if isinstance(default, float):  # 900 and 900.0 are one default
            assert float(row[1]) == default, row[0]
        else:
            assert row[1] == ("off" if default is False else "none" if default is None else str(default)), row[0]


def test_every_named_event_file_and_template_resource_exists():
    resources = set(_template()["Resources"])
    for page in PAGES:
        text = page.read_text()
        for name in re.findall(r"\bevents/([\w-]+\.json)", text):
            assert (ROOT / "events" / name).is_file(), f"{_id(page)}: events/{name}"
        for name in re.findall(r"sam local invoke (\w+)", text):
            assert name in resources, f"{_id(page)}: no resource {name}"


def _links() -> list[tuple[Path, str]]:
    return [(page, target) for page in PAGES for target in LINK.findall(_prose(page.read_text()))]


@pytest.mark.parametrize(("page", "target"), _links(), ids=lambda v: _id(v) if isinstance(v, Path) else v)
def test_relative_links_resolve(page, target):
    if re.match(r"[a-z]+:", target):
        return  # https:, mailto: ... are not checked here
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    assert resolved.exists(), f"{_id(page)} links to {target}, which does not exist"
    if anchor and resolved.suffix == ".md":
        assert anchor in _anchors(resolved), f"{_id(page)} links to {target}: no such heading"


def test_the_readme_stays_short():
    """What a user needs first (commands, the local quickstart, what you get and its limits,
    deploy and its prerequisites, what an app calls and is told); the rest is in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 280


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_the_docs_state_what_is_not_its_history(page):
    history = re.compile(r"\bissue \d+|\bpreviously\b|\bbefore this issue\b|\bthe review\b|\bused to\b", re.I)
    assert not history.findall(page.read_text())
