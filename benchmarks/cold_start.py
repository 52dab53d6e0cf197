"""Benchmark: the worker's cold start (Lambda's INIT) against a handler that imports only boto3.

Each sample is a fresh python3.12 process that does what INIT does with the layer as
Lambda mounts it:

* ``sys.path`` is Lambda's order: the function's code (``/var/task``: a copy of
  ``functions/worker``), then the layer's ``python/`` folder (``/opt/python``), then the
  standard library; nothing else (no site-packages, no current directory);
* nothing writes bytecode (``-B``, ``PYTHONDONTWRITEBYTECODE=1``): ``/opt`` is read-only in
  Lambda, so a layer without ``.pyc`` files compiles every module it imports on every cold
  start. The run checks afterwards that no ``.pyc`` appeared;
* the environment is the template's (table names, Powertools, limits) plus what Lambda sets
  (region, dummy credentials, ``AWS_EXECUTION_ENV``), with ``HOME`` and the AWS config files
  pointed at an empty folder and the instance metadata service disabled.

**ours** imports ``app`` (``functions/worker/app.py``, the template's handler module) and
builds the pipeline (``app.lambda_handler.built()``, which otherwise runs
at the first record). **boto3 only** imports ``app`` from a task folder whose handler imports
only boto3 and creates the clients the pipeline creates (S3 and SQS, with its ``Config``).
Its boto3 is the layer's own (same versions), copied and compiled into a folder of its own:
a yardstick that stays the same whether the layer carries bytecode or not, as the runtime's
own boto3 (compiled) would. The two run interleaved, ours then boto3 only, ``--runs``
times each after one discarded warm-up pair; the time is measured inside each process, from
its first statement to the pipeline (or the clients) built, so the interpreter's own start,
the same for both, is left out. It prints the medians and the ratio ours / boto3 only.

Before timing, one process of each kind runs under an audit hook that refuses any socket
connection or name lookup: building the pipeline must create clients only. That check also
imports the video adapter, which the worker imports at its first video, and checks Pillow's
HEIF opener, so a layer that lacks one of their dependencies fails here rather than at a record.

Without ``--layer`` the layer is built into a temporary folder by its own build
(``make -C layers/mediajobs build-MediaJobsLayer ARCH=<this machine>``), or, where that
Makefile is missing, by ``pip install --target`` of ``layers/mediajobs/requirements.txt`` for
CPython 3.12 plus a copy of the package without ``local/``, compiled with
``compileall --invalidation-mode unchecked-hash``. ``--no-bytecode`` removes the bytecode
(what ``sam build`` with ``BuildMethod: python3.12`` shipped).

    .venv/bin/python benchmarks/cold_start.py [--runs 15] [--json]
    .venv/bin/python benchmarks/cold_start.py --no-bytecode
    .venv/bin/python benchmarks/cold_start.py --layer .aws-sam/build/MediaJobsLayer

It is a benchmark, not a test: it exits 0 whatever the ratio (1 if the layer cannot be
built or imported, or if INIT tries to reach a network).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
LAYER_SOURCE = REPO_ROOT / "layers" / "mediajobs"
HANDLER = REPO_ROOT / "functions" / "worker" / "app.py"
RUNS = 15
#: What boto3 needs, as top-level names in a layer's python/ folder (modules or packages).
BOTO3_TOP_LEVEL = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six", "urllib3")

#: The template's environment for the worker (Globals and WorkerFunction) and what Lambda
#: adds. Table names are the stack's; the values only have to be valid.
LAMBDA_ENV = {
    "JOBS_TABLE_NAME": "mediajobs-dev-JobsTable",
    "SOURCES_TABLE_NAME": "mediajobs-dev-SourcesTable",
    "POWERTOOLS_SERVICE_NAME": "mediajobs",
    "POWERTOOLS_METRICS_NAMESPACE": "mediajobs",
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "MAX_PIXELS": "50000000",
    "LEASE_SECONDS": "120",
    "MAX_ATTEMPTS": "4",
    "MAX_RECEIVE_COUNT": "5",
    "WORKER_TIMEOUT_SECONDS": "900",
    "VIDEO_SPEED_FACTOR": "1.0",
    "MAX_VIDEO_SECONDS": "1800",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "AKIDBENCHMARKONLY",
    "AWS_SECRET_ACCESS_KEY": "benchmark-only",
    "AWS_SESSION_TOKEN": "benchmark-only",
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
    "AWS_LAMBDA_FUNCTION_NAME": "mediajobs-dev-WorkerFunction",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048",
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "_HANDLER": "app.lambda_handler",
    "TZ": ":UTC",
    "LANG": "en_US.UTF-8",
    "AWS_EC2_METADATA_DISABLED": "true",
    "PYTHONDONTWRITEBYTECODE": "1",
}

#: The boto3-only handler: the clients ``mediajobs.bootstrap`` creates, with its Config.
BASELINE_APP = '''"""A handler that imports only boto3 and creates the worker's clients."""
import os

import boto3
from botocore.config import Config

RETRY_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=60)


def build():
    region = os.environ["AWS_REGION"]
    return (
        boto3.client("s3", region_name=region, config=RETRY_CONFIG),
        boto3.client("sqs", region_name=region, config=RETRY_CONFIG),
    )


def lambda_handler(event, context):
    return {"batchItemFailures": []}
'''

#: One sample. argv: kind ("ours" or "baseline"), task root, layer python/ folder, check (0/1).
CHILD = r"""
import time
t0 = time.perf_counter()
import sys
kind, task_root, layer, check = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
sys.path[:] = [task_root, layer] + [p for p in sys.path[1:] if "-packages" not in p]
if check:
    def refuse(event, args):
        if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
            raise RuntimeError(f"INIT tried to reach a network: {event} {args!r}")
    sys.addaudithook(refuse)
import app
if kind == "ours":
    app.lambda_handler.built()
else:
    app.build()
t1 = time.perf_counter()
out = {"init_ms": (t1 - t0) * 1000, "modules": len(sys.modules)}
if check:
    out["app"] = app.__file__
    if kind == "ours":
        import mediajobs
        out["mediajobs"] = mediajobs.__file__
        out["local"] = sorted(m for m in sys.modules if m.startswith("mediajobs.local"))
        import mediajobs.adapters.imaging, mediajobs.adapters.video
        from PIL import Image
        out["heif"] = "HEIF" in Image.OPEN
print(__import__("json").dumps(out))
"""


def find_python312(explicit: str | None) -> str:
    """The real python3.12 executable (not a pyenv shim, which would add its own start-up).

    Raises
    ------
    SystemExit
        If none is found or it is not CPython 3.12.
    """
    candidates = (
        [explicit]
        if explicit
        else [
            shutil.which("python3.12"),
            *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
        ]
    )
    for candidate in candidates:
        if not candidate:
            continue
        done = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 12), sys.executable)"],
            capture_output=True,
            text=True,
            check=False,
        )
        ok, _, executable = done.stdout.strip().partition(" ")
        if done.returncode == 0 and ok == "True":
            return executable
    raise SystemExit("cold_start.py: no python3.12 found (pass --python /path/to/python3.12)")


def count_files(folder: Path) -> dict[str, int]:
    """Number of ``.py`` and ``.pyc`` files under ``folder``."""
    return {"py": sum(1 for _ in folder.rglob("*.py")), "pyc": sum(1 for _ in folder.rglob("*.pyc"))}


def remove_bytecode(folder: Path) -> None:
    """Delete every ``__pycache__`` folder and stray ``.pyc`` under ``folder``."""
    for cache in sorted(folder.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache)
    for pyc in folder.rglob("*.pyc"):
        pyc.unlink()


def build_layer(dest: Path, python: str, *, bytecode: bool) -> Path:
    """Build the layer into ``dest`` for this machine; returns its ``python/`` folder.

    Raises
    ------
    subprocess.CalledProcessError
        If the build fails.
    """
    arch = "arm64" if platform.machine() in ("aarch64", "arm64") else "x86_64"
    if (LAYER_SOURCE / "Makefile").is_file():
        subprocess.run(
            [
                "make",
                "-s",
                "-C",
                str(LAYER_SOURCE),
                "build-MediaJobsLayer",
                f"ARTIFACTS_DIR={dest}",
                f"ARCH={arch}",
                f"PYTHON312={python}",
            ],
            check=True,
            stdout=sys.stderr,
        )
        out = dest / "python"
    else:
        out = dest / "python"
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-compile",
                "--only-binary=:all:",
                "--target",
                str(out),
                "-r",
                str(LAYER_SOURCE / "requirements.txt"),
            ],
            check=True,
            stdout=sys.stderr,
        )
        shutil.copytree(
            LAYER_SOURCE / "mediajobs",
            out / "mediajobs",
            ignore=shutil.ignore_patterns("local", "__pycache__", "*.pyc", "*.egg-info"),
        )
        if bytecode:
            compile_folder(out, python)
    if not bytecode:
        remove_bytecode(out)
    return out


def compile_folder(folder: Path, python: str) -> None:
    """``compileall --invalidation-mode unchecked-hash`` with ``python`` (the runtime's version)."""
    subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", str(folder)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def baseline_folders(layer: Path, work: Path, python: str) -> tuple[Path, Path]:
    """(task root, python folder) of the boto3-only handler: the layer's boto3, compiled.

    Raises
    ------
    SystemExit
        If the layer has no boto3 (or one of its dependencies).
    """
    site = work / "baseline-python"
    site.mkdir()
    for name in BOTO3_TOP_LEVEL:
        package, module = layer / name, layer / f"{name}.py"
        if package.is_dir():
            shutil.copytree(package, site / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif module.is_file():
            shutil.copy2(module, site / module.name)
        else:
            raise SystemExit(f"cold_start.py: the layer has no {name} (boto3 needs it): {layer}")
    compile_folder(site, python)
    task = work / "baseline-task"
    task.mkdir()
    (task / "app.py").write_text(BASELINE_APP)
    return task, site


def sample(python: str, kind: str, task: Path, layer: Path, env: dict[str, str], *, check: bool) -> dict[str, Any]:
    """Run one fresh process; its JSON line (``init_ms``, ``modules``, and the checks').

    Raises
    ------
    RuntimeError
        If the process fails (its stderr's end is in the message).
    """
    done = subprocess.run(
        [python, "-B", "-s", "-c", CHILD, kind, str(task), str(layer), "1" if check else "0"],
        capture_output=True,
        text=True,
        cwd=task,
        env=env,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{kind} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(layer: Path, python: str, runs: int, work: Path) -> dict[str, Any]:
    """Check, then time ``runs`` interleaved pairs; the figures as one dict."""
    task = work / "task"
    task.mkdir()
    shutil.copy2(HANDLER, task / "app.py")
    base_task, base_site = baseline_folders(layer, work, python)
    home = work / "home"
    (home / "work").mkdir(parents=True)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "AWS_CONFIG_FILE": str(home / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "aws-credentials"),
        "WORK_DIR": str(home / "work"),
        "LAMBDA_TASK_ROOT": str(task),
        **LAMBDA_ENV,
    }
    before = count_files(layer)
    checked = sample(python, "ours", task, layer, env, check=True)
    sample(python, "baseline", base_task, base_site, env, check=True)
    if not checked["mediajobs"].startswith(str(layer)):
        raise RuntimeError(f"mediajobs came from {checked['mediajobs']}, not the layer")
    if not checked["heif"]:
        raise RuntimeError("Pillow has no HEIF opener once the image adapter is imported")
    times: dict[str, list[float]] = {"ours": [], "baseline": []}
    modules: dict[str, int] = {}
    for i in range(runs + 1):  # the first pair warms the page cache and is dropped
        for kind, where, site in (("ours", task, layer), ("baseline", base_task, base_site)):
            result = sample(python, kind, where, site, env, check=False)
            modules[kind] = result["modules"]
            if i:
                times[kind].append(result["init_ms"])
    after = count_files(layer)
    if after != before or count_files(task)["pyc"]:
        raise RuntimeError(f"bytecode was written during the run: {before} -> {after}")
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    return {
        "layer": str(layer),
        "python": subprocess.run([python, "-V"], capture_output=True, text=True, check=True).stdout.strip(),
        "layer_files": before,
        "runs": runs,
        "ours": {
            "median_ms": round(medians["ours"], 1),
            "runs_ms": [round(t, 1) for t in times["ours"]],
            "modules": modules["ours"],
            "local_modules": checked["local"],
        },
        "boto3_only": {
            "median_ms": round(medians["baseline"], 1),
            "runs_ms": [round(t, 1) for t in times["baseline"]],
            "modules": modules["baseline"],
        },
        "ratio": round(medians["ours"] / medians["baseline"], 3),
    }


def print_table(result: dict[str, Any]) -> None:
    files = result["layer_files"]
    print(
        f"layer: {result['layer']} ({files['py']} .py, {files['pyc']} .pyc); {result['python']}; "
        f"{result['runs']} interleaved runs each"
    )
    print()
    print("| handler | median INIT ms | min | max | modules |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, key in (
        ("ours: import app + build the pipeline", "ours"),
        ("boto3 only: import + 2 clients", "boto3_only"),
    ):
        row = result[key]
        print(
            f"| {label} | {row['median_ms']:.0f} | {min(row['runs_ms']):.0f} | {max(row['runs_ms']):.0f} "
            f"| {row['modules']} |"
        )
    print()
    print(f"ratio ours / boto3 only: {result['ratio']:.2f}")
    if result["ours"]["local_modules"]:
        print(f"WARNING: INIT imported {', '.join(result['ours']['local_modules'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layer", type=Path, help="a built layer (its python/ folder or the folder holding it)")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"samples of each handler (default {RUNS})")
    parser.add_argument("--no-bytecode", action="store_true", help="build the layer without .pyc files")
    parser.add_argument("--python", help="the python3.12 to run (default: found on PATH or in pyenv)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    python = find_python312(args.python)
    with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
        work = Path(tmp)
        try:
            if args.layer is not None:
                layer = args.layer.resolve()
                layer = layer / "python" if (layer / "python").is_dir() else layer
                if not (layer / "mediajobs").is_dir():
                    parser.error(f"{args.layer} holds no mediajobs package (nor python/mediajobs)")
            else:
                layer = build_layer(work / "layer", python, bytecode=not args.no_bytecode)
            result = run(layer, python, args.runs, work)
        except (subprocess.CalledProcessError, RuntimeError) as exc:
            print(f"cold_start.py: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
