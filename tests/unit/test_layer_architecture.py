"""The layer says which architecture its wheels are for, and a mismatch fails at import with
the fix (SAM does not pass a template's Architecture to a makefile build)."""

from __future__ import annotations

import pytest

from mediajobs import LayerArchitectureMismatch, check_layer_architecture


def test_a_layer_built_for_arm64_fails_on_x86_64_naming_the_fix(tmp_path):
    info = tmp_path / "layer.json"
    info.write_text('{"architecture": "arm64"}\n')
    fix = "ARCH=x86_64 sam build --parameter-overrides Architecture=x86_64"
    with pytest.raises(LayerArchitectureMismatch, match=fix):
        check_layer_architecture(info, machine="x86_64")


@pytest.mark.parametrize(("built", "machine"), [("arm64", "aarch64"), ("x86_64", "x86_64"), ("x86_64", "AMD64")])
def test_a_layer_on_its_own_architecture_passes(tmp_path, built, machine):
    info = tmp_path / "layer.json"
    info.write_text(f'{{"architecture": "{built}"}}\n')
    check_layer_architecture(info, machine=machine)


def test_outside_a_layer_nothing_is_checked(tmp_path):
    check_layer_architecture(tmp_path / "no-layer.json", machine="riscv64")
