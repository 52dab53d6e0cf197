"""The mediajobs layer as ``sam build`` makes it (layers/mediajobs/Makefile, build-MediaJobsLayer),
built for this machine's architecture, and the total Lambda counts with the ffmpeg layer.

The build is a pip install from PyPI of the lock (layers/mediajobs/requirements.txt); pip's
cache makes later runs take seconds. It needs a CPython 3.12 (the Lambda runtime, whose
bytecode the layer ships), found the way .ci/run finds it; without one the tests skip and
say so.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO, load_script

LAYER_DIR = REPO / "layers" / "mediajobs"
_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
HOST_ARCH = _ARCHES.get(platform.machine().lower(), "")
WHEEL_ARCH = {"arm64": "aarch64", "x86_64": "x86_64"}.get(HOST_ARCH, "")

#: Import names (top-level folders or modules) of the local extra and of what pi-heif replaced.
NOT_IN_THE_LAYER = ("moto", "werkzeug", "tqdm", "yaml", "_yaml", "flask", "pillow_heif", "_pillow_heif")

#: PEP 552: the flags word of a pyc. Bit 0: hash-based; bit 1: check the source's hash.
PYC_HASH_BASED, PYC_CHECK_SOURCE = 0b01, 0b10


def python312() -> str | None:
    """A CPython 3.12 that runs, found as .ci/run finds it (a pyenv shim may not select 3.12)."""
    candidates = [shutil.which("python3.12") or ""]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True)
    candidates += ["/usr/local/bin/python3.12", "/usr/bin/python3.12"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            done = subprocess.run([candidate, "-c", ""], capture_output=True, check=False)
            if done.returncode == 0:
                return candidate
    return None


PYTHON312 = python312()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        sys.platform != "linux" or not HOST_ARCH,
        reason=f"the layer is built for Linux arm64/x86_64; this is {sys.platform} {platform.machine()}",
    ),
    pytest.mark.skipif(
        PYTHON312 is None,
        reason="no python3.12 (the Lambda runtime, whose bytecode the layer ships) on PATH, in ~/.pyenv, "
        "/usr/local/bin or /usr/bin",
    ),
]


def make(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None:
        pytest.fail("make is not installed: the layers' build recipes are Makefiles")
    return subprocess.run(
        ["make", "--no-print-directory", *args], capture_output=True, text=True, timeout=900, check=False
    )


def py312(code: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert PYTHON312
    return subprocess.run(
        [PYTHON312, "-S", "-c", code, *argv], capture_output=True, text=True, timeout=300, env=env, check=False
    )


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python/`` of the layer exactly as ``sam build`` makes it, for this machine."""
    artifacts = tmp_path_factory.mktemp("mediajobs-layer")
    done = make(
        "-C", str(LAYER_DIR), "build-MediaJobsLayer", f"ARTIFACTS_DIR={artifacts}", f"ARCH={HOST_ARCH}",
        f"PYTHON312={PYTHON312}",
    )  # fmt: skip
    assert done.returncode == 0, f"layer build failed:\n{done.stdout}\n{done.stderr}"
    assert sorted(p.name for p in artifacts.iterdir()) == ["python"]  # /opt/python in Lambda
    return artifacts / "python"


def test_the_layer_has_mediajobs_without_local(layer: Path):
    package = layer / "mediajobs"
    assert (package / "entrypoints" / "worker.py").is_file()
    assert (package / "recipes" / "web-image.v1.json").is_file()
    assert not (package / "local").exists()
    assert not list(layer.glob("*.egg-info")) and not list(package.rglob("*.egg-info"))
    assert json.loads((package / "layer.json").read_text()) == {"architecture": HOST_ARCH}


def test_the_layer_has_nothing_of_the_local_extra_nor_pillow_heif(layer: Path):
    tops = {p.name.split(".")[0].split("-")[0].lower() for p in layer.iterdir()}
    assert not tops & set(NOT_IN_THE_LAYER), sorted(tops & set(NOT_IN_THE_LAYER))
    assert (layer / "pi_heif").is_dir()
    assert not [p for p in layer.rglob("*") if "x265" in p.name.lower()]  # pillow-heif's HEVC encoder
    assert not (layer / "bin").exists()  # wheels' console scripts: nothing runs them in Lambda


def test_the_layer_installs_exactly_the_lock(layer: Path):
    lock = load_script("mediajobs_layer_lock", LAYER_DIR / "lock.py")
    pins = lock.read_lock((LAYER_DIR / "requirements.txt").read_text())
    dists = importlib.metadata.distributions(path=[str(layer)])
    installed = {lock.canonical(d.metadata["Name"]): d.version for d in dists}
    assert installed == pins


def test_every_installed_requirement_is_met_in_the_layer(layer: Path):
    """The lock is closed: each distribution's dependencies (markers of Lambda's python3.12 on
    this architecture; the extras pyproject asks for) are installed in a version they allow."""
    lock = load_script("mediajobs_layer_lock", LAYER_DIR / "lock.py")
    dists = {lock.canonical(d.metadata["Name"]): d for d in importlib.metadata.distributions(path=[str(layer)])}
    extras: dict[str, set[str]] = {}
    for spec in lock.project_dependencies():
        requirement = Requirement(spec)
        extras.setdefault(lock.canonical(requirement.name), set()).update(requirement.extras)
    lambda_env = {
        "python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython",
        "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
        "os_name": "posix", "platform_machine": WHEEL_ARCH,
    }  # fmt: skip
    unmet = []
    for name, dist in dists.items():
        for line in dist.requires or []:
            requirement = Requirement(line)
            wanted = {""} | extras.get(name, set())
            if requirement.marker and not any(requirement.marker.evaluate({**lambda_env, "extra": e}) for e in wanted):
                continue
            have = dists.get(lock.canonical(requirement.name))
            if have is None or not requirement.specifier.contains(have.version, prereleases=True):
                unmet.append(f"{name} needs {line!r}, the layer has {have.version if have else 'nothing'}")
    assert unmet == []


def test_every_module_has_unchecked_hash_bytecode_for_cpython_312(layer: Path):
    """PEP 552: a hash-based pyc without check_source is used as it is, from a read-only /opt."""
    checker = r"""
import importlib.util, pathlib, sys
root = pathlib.Path(sys.argv[1])
bad = []
count = 0
for source in root.rglob("*.py"):
    count += 1
    pyc = source.parent / "__pycache__" / (source.stem + ".cpython-312.pyc")
    if not pyc.is_file():
        bad.append(f"no {pyc}")
        continue
    header = pyc.read_bytes()[:16]
    flags = int.from_bytes(header[4:8], "little")
    if header[:4] != importlib.util.MAGIC_NUMBER:
        bad.append(f"{pyc}: magic {header[:4].hex()}")
    elif flags != HASH_BASED:  # and not CHECK_SOURCE
        bad.append(f"{pyc}: flags {flags:#b}")
    elif header[8:16] != importlib.util.source_hash(source.read_bytes()):
        bad.append(f"{pyc}: not the source's hash")
print(count)
print("\n".join(bad[:20]))
"""
    checker = f"HASH_BASED, CHECK_SOURCE = {PYC_HASH_BASED}, {PYC_CHECK_SOURCE}\n" + checker
    done = py312(checker, str(layer))
    assert done.returncode == 0, done.stderr
    count, *bad = done.stdout.splitlines()
    assert int(count) > 500 and [b for b in bad if b] == []


def test_the_worker_imports_from_the_layer_using_its_bytecode_only(layer: Path):
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import mediajobs.entrypoints.worker, mediajobs.adapters.imaging, mediajobs.adapters.video\n"
        "import importlib.util\n"
        "print([m for m in ('mediajobs.local', 'moto', 'pillow_heif') if importlib.util.find_spec(m)])\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": "us-east-1", "PYTHONDONTWRITEBYTECODE": "1"}
    done = py312(code, str(layer), env={**env, "PYTHONVERBOSE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"
    compiled = re.findall(rf"code object from '?({re.escape(str(layer))}\S*?\.py)'?$", done.stderr, re.MULTILINE)
    assert compiled == [], f"compiled from source at import: {compiled[:5]}"
    assert f"code object from '{layer}/mediajobs/entrypoints/__pycache__/worker.cpython-312.pyc'" in done.stderr


def test_the_total_for_this_architecture_is_within_80_percent_of_lambdas_limit(layer: Path, tmp_path: Path):
    size_check = load_script("layers_size_check", REPO / "layers" / "size_check.py")
    ffmpeg_layer = tmp_path / "FfmpegLayer"
    done = make(
        "-C", str(REPO / "layers" / "ffmpeg"), "build-FfmpegLayer", f"ARTIFACTS_DIR={ffmpeg_layer}", f"ARCH={HOST_ARCH}"
    )
    assert done.returncode == 0, done.stderr
    parts = {
        "WorkerFunction": sum(p.stat().st_size for p in (REPO / "functions" / "worker").glob("*.py")),
        "MediaJobsLayer": size_check.tree_bytes(layer.parent),
        "FfmpegLayer": size_check.tree_bytes(ffmpeg_layer),
    }
    report = size_check.Report(HOST_ARCH, parts, size_check.LAMBDA_UNZIPPED_LIMIT_BYTES, size_check.MAX_FRACTION)
    assert report.ok, "\n".join(report.lines())
