"""The Lambda layer's lock: ``requirements.txt`` pins, ``name==version``, every package the
layer installs, resolved from ``pyproject.toml``'s ``[project] dependencies`` for Lambda.

    make -C layers/mediajobs lock        # python3.12 lock.py: resolve and write requirements.txt
    python3 layers/mediajobs/lock.py --check   # offline: the lock agrees with pyproject.toml

Resolution is pip's own (``pip install --dry-run --report``) for the Lambda runtime: CPython
3.12, manylinux wheels only, for arm64 and for x86_64, which must give the same pins (one
lock for both architectures). pip evaluates environment markers with the interpreter that
runs it, so the lock is written by a python3.12. The layer installs the lock with
``--no-deps``: what the lock says is what ships.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYPROJECT = HERE.parents[1] / "pyproject.toml"
REQUIREMENTS = HERE / "requirements.txt"

#: Lambda's python3.12 runtime (Amazon Linux 2023, glibc 2.34): the manylinux tags it accepts.
#: pip does not expand ``manylinux_2_x`` tags to older ones, so each is listed.
GLIBC_MINORS = range(17, 35)

#: Wheel machine names of Lambda's two architectures (arm64 is ``aarch64`` in wheel tags).
ARCHES = ("aarch64", "x86_64")

HEADER = """\
# The Lambda layer's lock: every package it installs (pip install --no-deps), exact pins.
# Generated from pyproject.toml's [project] dependencies by `make -C layers/mediajobs lock`
# (layers/mediajobs/lock.py; CPython 3.12, manylinux wheels, the same for arm64 and x86_64).
# Do not edit by hand; tests/unit/test_layer_lock.py checks it against pyproject.toml.
"""

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 normalises it (``Pillow`` and ``pillow`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def platform_args(arch: str) -> list[str]:
    """pip's ``--platform`` options for Lambda's glibc on ``arch`` (``aarch64`` or ``x86_64``)."""
    tags = [f"manylinux2014_{arch}"] + [f"manylinux_2_{minor}_{arch}" for minor in GLIBC_MINORS]
    return [arg for tag in tags for arg in ("--platform", tag)]


def project_dependencies(pyproject: Path = PYPROJECT) -> list[str]:
    """The requirement strings of ``[project] dependencies`` in ``pyproject``."""
    with pyproject.open("rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def read_lock(text: str) -> dict[str, str]:
    """Parse a lock: ``{canonical name: version}``.

    Raises
    ------
    ValueError
        For a line that is neither a comment nor an exact ``name==version`` pin, or a name
        pinned twice.
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.match(line)
        if not match:
            raise ValueError(f"line {number}: {raw!r} is not an exact pin (name==version)")
        name = canonical(match.group(1))
        if name in pins:
            raise ValueError(f"line {number}: {name} is pinned twice")
        pins[name] = match.group(2)
    return pins


def problems(dependencies: Iterable[str], pins: dict[str, str]) -> list[str]:
    """What makes a lock disagree with ``dependencies`` (empty: they agree).

    Every dependency's name must be pinned, to a version its specifier allows (PEP 440, with
    pre-releases only when the specifier names one). Packages pinned beyond them are their
    dependencies: this offline check cannot tell a stale extra one from a needed one, which
    the layer build's test does (every installed distribution's requirements are met).
    """
    from packaging.requirements import Requirement

    found = []
    for spec in dependencies:
        requirement = Requirement(spec)
        name = canonical(requirement.name)
        if name not in pins:
            found.append(f"{requirement.name} is a dependency in pyproject.toml but is not pinned")
        elif not requirement.specifier.contains(pins[name], prereleases=bool(requirement.specifier.prereleases)):
            found.append(f"{name}=={pins[name]} does not satisfy {spec!r} of pyproject.toml")
    return found


def resolve(dependencies: list[str], arch: str, python: str = sys.executable) -> dict[str, str]:
    """Resolve ``dependencies`` for Lambda's python3.12 on ``arch``: ``{name: version}``.

    Raises
    ------
    RuntimeError
        When pip cannot resolve them (its stderr is in the message).
    """
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        argv = [
            python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--dry-run", "--ignore-installed", "--report", str(report),
            "--target", str(Path(tmp) / "target"),  # pip takes --platform only with --target
            "--only-binary=:all:", "--implementation", "cp", "--python-version", "3.12",
            *platform_args(arch), *dependencies,
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603 - argv list
        if done.returncode != 0:
            raise RuntimeError(f"pip could not resolve for {arch}:\n{done.stderr}")
        installs = json.loads(report.read_text())["install"]
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in installs}


def render(pins: dict[str, str]) -> str:
    """The text of ``requirements.txt`` for ``pins``, sorted by name."""
    return HEADER + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))


def main(argv: list[str] | None = None) -> int:
    """``lock.py``: write the lock (needs python3.12 and PyPI), or ``--check`` it (offline)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check requirements.txt against pyproject.toml")
    args = parser.parse_args(argv)
    dependencies = project_dependencies()
    if args.check:
        found = problems(dependencies, read_lock(REQUIREMENTS.read_text()))
        for problem in found:
            print(f"lock: {problem}", file=sys.stderr)
        return 1 if found else 0
    if sys.version_info[:2] != (3, 12):
        print("lock: run me with python3.12 (pip evaluates markers with its own interpreter)", file=sys.stderr)
        return 2
    resolved = {arch: resolve(dependencies, arch) for arch in ARCHES}
    first, *others = ARCHES
    for arch in others:
        if resolved[arch] != resolved[first]:
            differ = sorted(set(resolved[arch].items()) ^ set(resolved[first].items()))
            print(f"lock: {first} and {arch} resolve differently: {differ}", file=sys.stderr)
            return 1
    REQUIREMENTS.write_text(render(resolved[first]))
    print(f"lock: {len(resolved[first])} pins -> {REQUIREMENTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
