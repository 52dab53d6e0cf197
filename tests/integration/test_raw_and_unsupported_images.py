"""Camera raws are refused as what they are (R01), and a valid file whose feature a decoder
lacks is ``unsupported_feature``, never ``corrupt_image`` (R02, R03): the cases of
tests/media/cases_raw.py through the real renderer."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from mediajobs.adapters.imaging import PillowRenderer
from mediajobs.bootstrap import load_recipe, steps
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.jobs import RenderContext
from mediajobs.settings import Settings
from tests.conftest import case_file

VARIANTS = load_recipe("web-image", 1).params.variants


def render(source: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return PillowRenderer(50_000_000).render(source, VARIANTS, out)


def failure(source: Path, tmp_path: Path) -> PermanentFailure:
    with pytest.raises(PermanentFailure) as caught:
        render(source, tmp_path)
    assert list((tmp_path / "out").iterdir()) == []
    return caught.value


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("R01_dng.dng", "DNG 1.4.0.0"),
        ("R01_nef_like.nef", "a reduced-resolution preview with the full image in a SubIFD"),
        ("R01_cr2_like.cr2", "Canon CR2"),
    ],
)
def test_r01_camera_raws_are_refused_instead_of_rendering_their_preview(tmp_path, name, kind):
    failed = failure(case_file(name), tmp_path)
    assert failed.reason == "unsupported_format"
    assert f"a camera raw image ({kind}" in failed.detail


def test_r01_a_tiff_whose_first_page_is_a_thumbnail_without_subifds_still_renders(tmp_path):
    """Only a reduced-resolution first IFD *with* SubIFDs is a raw's layout: clear the
    SubIFDs tag of the NEF-like case (rename it to an unknown private tag) and it renders."""
    data = case_file("R01_nef_like.nef").read_bytes()
    entry = struct.pack("<HH", 330, 4)
    assert data.count(entry) == 1
    source = tmp_path / "thumbnail-first.tif"
    source.write_bytes(data.replace(entry, struct.pack("<HH", 65000, 4)))
    files, decisions = render(source, tmp_path)
    assert (decisions.source_format, decisions.source_width, decisions.source_height) == ("TIFF", 160, 120)
    assert [(f.width, f.height) for f in files] == [(160, 120)] * 3


def test_r02_hdr_avif_with_a_matrix_libavif_cannot_convert_is_unsupported_feature(tmp_path):
    failed = failure(case_file("R02_hdr_bt2020cl.avif"), tmp_path)
    assert failed.reason == "unsupported_feature"
    assert "Reformat failed" in failed.detail


def test_r02_the_same_file_with_a_matrix_libavif_has_renders(tmp_path):
    """The case is sound but for its matrix: BT.709 (1) in its place renders."""
    data = bytearray(case_file("R02_hdr_bt2020cl.avif").read_bytes())
    at = data.index(b"colrnclx") + 8
    assert struct.unpack(">HHH", data[at : at + 6]) == (9, 16, 10)
    data[at + 4 : at + 6] = struct.pack(">H", 1)
    source = tmp_path / "bt709.avif"
    source.write_bytes(bytes(data))
    files, decisions = render(source, tmp_path)
    assert decisions.source_format == "AVIF" and [(f.width, f.height) for f in files] == [(96, 64)] * 3


def test_r03_heif_with_a_codec_the_decoder_lacks_is_unsupported_feature(tmp_path):
    failed = failure(case_file("R03_heif_av1.heif"), tmp_path)
    assert failed.reason == "unsupported_feature"
    # The structure check names the codec before libheif is asked ("... has not been built in").
    assert failed.detail == "item 1 is a 'av01' image: libheif (pi-heif) cannot decode it"


def test_the_cases_end_the_same_in_the_bounded_render_child(tmp_path):
    renderer = steps(Settings())["image.variants"]  # bounded, as production registers it
    for name, reason in [
        ("R01_dng.dng", "unsupported_format"),
        ("R02_hdr_bt2020cl.avif", "unsupported_feature"),
        ("R03_heif_av1.heif", "unsupported_feature"),
    ]:
        out = tmp_path / name
        out.mkdir()
        with pytest.raises(PermanentFailure) as caught:
            renderer.run(case_file(name), load_recipe("web-image", 1).params, RenderContext(), out)
        assert caught.value.reason == reason
