"""What a cold start of the worker imports: only what every record needs.

Each test runs a fresh interpreter (the test process has imported everything already),
does what Lambda's INIT does -- import ``functions/worker/app.py`` with ``functions/worker``
first on ``sys.path``, then build the pipeline from the environment -- and reads
``sys.modules``. Building creates clients only; nothing here reaches a network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

from tests.fakes import TEST_KEY_SECRET

REPO_ROOT = Path(__file__).resolve().parents[2]
TASK_ROOT = REPO_ROOT / "functions" / "worker"

#: Modules a cold start must not import, by name or package prefix: the local extra and
#: what tests use (never in the layer), and what only videos need. (The image adapter is
#: imported at INIT: every original is detected with it, and a broken Pillow must fail INIT.)
NOT_AT_COLD_START = (
    "mediajobs.local",
    "moto",
    "werkzeug",
    "yaml",
    "pytest",
    "numpy",
    "pillow_heif",
    "mediajobs.adapters.video",
    "mediajobs.adapters.ffmpeg",
)

_INIT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import app  # functions/worker/app.py, as the runtime imports the handler
handler = app.lambda_handler.built()  # the service, built as the first record would
loaded = {"init": sorted(sys.modules)}
"""


def _run(tmp_path: Path, after_init: str = "") -> dict[str, list[str]]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "JOBS_TABLE_NAME": "jobs",
        "SOURCES_TABLE_NAME": "sources",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
        "WORK_DIR": str(tmp_path),
        "KEY_SECRET": TEST_KEY_SECRET,
    }
    code = _INIT + after_init + "print(json.dumps(loaded))\n"
    done = subprocess.run(
        [sys.executable, "-c", code, str(TASK_ROOT)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _matching(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_AT_COLD_START)]


def test_a_cold_start_imports_neither_the_local_extra_nor_the_video_adapter(tmp_path):
    loaded = _run(tmp_path)
    assert "mediajobs.entrypoints.worker" in loaded["init"]
    assert _matching(loaded["init"]) == []


def test_the_image_adapter_is_imported_at_init_with_pi_heifs_opener(tmp_path):
    png = tmp_path / "one.png"
    Image.new("L", (4, 4), 128).save(png)
    loaded = _run(
        tmp_path,
        after_init=(
            "from PIL import Image\n"
            "loaded['heif'] = [Image.OPEN['HEIF'][0].__module__] if 'HEIF' in Image.OPEN else []\n"
            "from mediajobs import bootstrap\n"
            f"loaded['media'] = [str(bootstrap.detect_media(__import__('pathlib').Path({str(png)!r})))]\n"
            "loaded['after'] = sorted(sys.modules)\n"
        ),
    )
    assert "mediajobs.adapters.imaging" in loaded["init"]
    assert loaded["heif"] == ["pi_heif.as_plugin"]  # registered before any HEIC can be opened
    assert loaded["media"] == ["image"]
    assert "pillow_heif" not in loaded["after"]
    assert "mediajobs.adapters.video" not in loaded["after"]  # only a video render imports it


def test_the_handler_module_holds_no_mutable_state():
    """Per-batch state lives in a delivery ``Batch`` made per invocation, the service in the
    handler ``make_handler`` binds: nothing an invocation could leave to the next."""
    import random
    from types import ModuleType

    from mediajobs.entrypoints import worker
    from mediajobs.service_layer.pipeline import Pipeline

    mutable = (dict, list, set, bytearray, random.Random, Pipeline)
    found = {
        name
        for name, value in vars(worker).items()
        if not name.startswith("__") and not isinstance(value, ModuleType) and isinstance(value, mutable)
    }
    assert found == set()
