"""The Lambda layer's lock (layers/mediajobs/requirements.txt) agrees with pyproject.toml.

pyproject.toml's ``[project] dependencies`` are the one source; ``make -C layers/mediajobs
lock`` writes the lock from them. These checks are offline: a name in pyproject that the lock
does not pin, or a pin its specifier does not allow, fails here.
"""

from __future__ import annotations

import tomllib

import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO, load_script

LOCAL_EXTRA_ONLY = {"moto", "werkzeug", "tqdm", "pyyaml", "flask", "pillow-heif", "duckdb"}


lock = load_script("mediajobs_layer_lock", REPO / "layers" / "mediajobs" / "lock.py")


def project() -> dict:
    with (REPO / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]


def test_the_lock_pins_every_dependency_of_pyproject_within_its_specifier():
    pins = lock.read_lock((REPO / "layers" / "mediajobs" / "requirements.txt").read_text())
    assert lock.problems(project()["dependencies"], pins) == []


def test_the_lock_carries_nothing_of_the_local_extra():
    pins = lock.read_lock((REPO / "layers" / "mediajobs" / "requirements.txt").read_text())
    assert not LOCAL_EXTRA_ONLY & set(pins)
    local = {lock.canonical(Requirement(r).name) for r in project()["optional-dependencies"]["local"]}
    assert local == {"moto", "werkzeug", "tqdm", "pyyaml", "duckdb"}
    assert not local & {lock.canonical(Requirement(r).name) for r in project()["dependencies"]}


def test_the_console_script_needs_the_local_extra_and_says_so(monkeypatch, capsys):
    from mediajobs import local

    assert project()["scripts"]["mediajobs"] == "mediajobs.local:main"
    monkeypatch.setattr(local, "missing_extra_modules", lambda: ["moto", "tqdm"])
    assert local.main(["--help"]) == 1
    err = capsys.readouterr().err
    assert "the local extra is needed: pip install '.[local]' in a clone" in err and "(missing: moto, tqdm)" in err


def test_a_dependency_the_lock_does_not_pin_is_a_problem():
    found = lock.problems(["boto3>=1.40", "pi-heif>=1.1"], {"boto3": "1.44.8"})
    assert found == ["pi-heif is a dependency in pyproject.toml but is not pinned"]


def test_a_pin_outside_the_specifier_is_a_problem():
    found = lock.problems(["aws-lambda-powertools[parser]>=3.20,<4"], {"aws-lambda-powertools": "4.0.0"})
    assert len(found) == 1 and "aws-lambda-powertools==4.0.0 does not satisfy" in found[0]
    assert lock.problems(["Pillow>=12.0"], {"pillow": "12.0"}) == []  # names compare as PEP 503 normalises them
    assert lock.problems(["Pillow>=12.0"], {"pillow": "13.0.0rc1"}) != []  # no pre-release unless asked


def test_pins_are_read_with_normalised_names_and_comments_ignored():
    text = "# header\n\nPillow==13.0.0  # imaging\ntyping_extensions==4.16.0\n"
    assert lock.read_lock(text) == {"pillow": "13.0.0", "typing-extensions": "4.16.0"}


@pytest.mark.parametrize(
    "line", ["boto3>=1.40", "boto3", "boto3==1.44.*", "-e .", "boto3==1.44.8 ; python_version>'3'"]
)
def test_a_line_that_is_not_an_exact_pin_is_refused(line: str):
    with pytest.raises(ValueError, match="not an exact pin"):
        lock.read_lock(line + "\n")


def test_a_name_pinned_twice_is_refused():
    with pytest.raises(ValueError, match="pinned twice"):
        lock.read_lock("Pillow==13.0.0\npillow==12.0.0\n")


def test_the_written_lock_is_sorted_with_its_header():
    text = lock.render({"urllib3": "2.8.0", "boto3": "1.44.8"})
    assert text.startswith(lock.HEADER)
    assert text.endswith("boto3==1.44.8\nurllib3==2.8.0\n")
    assert lock.read_lock(text) == {"urllib3": "2.8.0", "boto3": "1.44.8"}


def test_lambda_platform_tags_cover_manylinux2014_to_glibc_2_34():
    args = lock.platform_args("aarch64")
    tags = args[1::2]
    assert set(args[0::2]) == {"--platform"}
    assert tags[0] == "manylinux2014_aarch64" and tags[-1] == "manylinux_2_34_aarch64"
    assert "manylinux_2_26_aarch64" in tags  # pi-heif's aarch64 wheel
