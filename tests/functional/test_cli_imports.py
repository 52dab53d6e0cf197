"""``mediajobs status`` is a status read: it imports neither the embedded AWS (moto,
Werkzeug, Flask) nor the worker, the dispatcher or another command's module, and asks the
server only for the asset (issue 25: it took a second and more, most of it importing what
``demo`` and ``serve`` need). Held by the modules loaded, never by a time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

#: What a status read must not import: the embedded AWS and what only other commands need.
NOT_FOR_STATUS = (
    "moto",
    "werkzeug",
    "flask",
    "PIL",
    "numpy",
    "aws_lambda_powertools",
    "mediajobs.bootstrap",
    "mediajobs.local.embedded",
    "mediajobs.local.session",
    "mediajobs.local.commands.demo",
    "mediajobs.local.commands.serve",
    "mediajobs.local.commands.simulate",
)

SCRIPT = """
import json, sys
from mediajobs.local import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def modules_after(argv: list[str]) -> tuple[int, list[str]]:
    """Run ``mediajobs ARGV`` in a fresh interpreter: its exit code and every module it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
    )
    line = json.loads(done.stdout.strip().splitlines()[-1])
    return line["code"], line["modules"]


def loaded(modules: list[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.mark.subprocess
def test_status_imports_no_moto_no_worker_and_no_other_command():
    # The discard port: nothing answers, so the read fails at once (exit 1) after the imports.
    code, modules = modules_after(["status", "originals/a.jpg", "--endpoint", "http://127.0.0.1:9"])
    assert code == 1
    assert [name for name in NOT_FOR_STATUS if loaded(modules, name)] == []
    assert "mediajobs.local.commands.status" in modules


@pytest.mark.subprocess
def test_a_command_imports_its_own_module_and_help_lists_every_command():
    from mediajobs.local.commands import SUMMARIES

    done = subprocess.run(
        [sys.executable, "-m", "mediajobs.local.cli", "--help"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0 and all(name in done.stdout for name in SUMMARIES)
    code, modules = modules_after(["delete", "originals/a.jpg", "--endpoint", "http://127.0.0.1:9"])
    assert code == 1
    assert "mediajobs.local.commands.delete" in modules and "mediajobs.local.commands.status" not in modules


def test_the_command_of_argv_is_its_first_word_past_the_options():
    from mediajobs.local.cli import command_of

    assert command_of(["status", "originals/a.jpg"]) == "status"
    assert command_of(["--log-level", "INFO", "status", "k"]) == "status"
    assert command_of(["--log-level", "status"]) is None  # "status" is the level here: no word after it
    assert command_of(["--help"]) is None and command_of(["nothing"]) is None
