"""The placeholder steps on real media: every orientation of one photo gives the same upright
placeholder, a HEIC is measured after its irot, the synthetic bad images fail as web-image's
render does, and videos are hashed from their display-oriented frame."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from thash import thumb_hash_to_rgba

from mediajobs.bootstrap import video_renderer
from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.jobs import RenderContext
from mediajobs.domain.recipes import ImagePlaceholderParams, VideoPlaceholderParams
from mediajobs.settings import Settings
from mediajobs.steps.placeholder import ImagePlaceholder, VideoPlaceholder
from tests.conftest import case_file, media_file, packaged_video

PARAMS = ImagePlaceholderParams(box_px=100)
VIDEO_PARAMS = VideoPlaceholderParams(box_px=100, at_fraction=0.1)


def image_placeholder(path: Path, out: Path) -> dict:
    result = ImagePlaceholder(max_pixels=50_000_000).run(path, PARAMS, RenderContext(), out)
    assert result.files == [] and list(out.iterdir()) == []
    return dict(result.decisions)


def decoded(thumbhash: str) -> tuple[int, int, bytes]:
    return thumb_hash_to_rgba(list(base64.b64decode(thumbhash)))


def test_every_exif_orientation_of_a_photo_gives_the_same_upright_placeholder(tmp_path):
    """orientation-landscape-0 to -8 are one 1800x1200 picture stored in each EXIF orientation."""
    found = {}
    for n in range(9):
        out = tmp_path / str(n)
        out.mkdir()
        found[n] = image_placeholder(media_file("photos", f"orientation-landscape-{n}.jpg"), out)
    assert {(d["display_width_px"], d["display_height_px"]) for d in found.values()} == {(1800, 1200)}
    w0, h0, first = decoded(found[0]["thumbhash"])
    for decisions in found.values():
        w, h, pixels = decoded(decisions["thumbhash"])
        assert (w, h) == (w0, h0)
        assert max(abs(a - b) for a, b in zip(pixels, first, strict=True)) <= 8  # JPEG noise, not a turn
        colour = bytes.fromhex(decisions["dominant_colour"][1:])
        assert max(abs(a - b) for a, b in zip(colour, bytes.fromhex(found[0]["dominant_colour"][1:]), strict=True)) <= 2


def test_a_heic_is_measured_upright(tmp_path):
    decisions = image_placeholder(media_file("photos", "iphone-13-pro-max.heic"), tmp_path)
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (3024, 4032)
    w, h, _ = decoded(decisions["thumbhash"])
    assert w < h


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("I14_bomb_60mp_8000x7500.png", "too_many_pixels"),
        ("I12_progressive_truncated.jpg", "truncated_image"),
        ("I17_html_error_page.jpg", None),
        ("I18_empty.jpg", None),
    ],
)
def test_a_bad_image_fails_with_its_reason(tmp_path, name, reason):
    with pytest.raises(PermanentFailure) as failure:
        image_placeholder(case_file(name), tmp_path)
    if reason is not None:
        assert failure.value.reason == reason


def test_a_banner_keeps_its_full_size(tmp_path):
    decisions = image_placeholder(case_file("I16_wide_8000x2.png"), tmp_path)
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (8000, 2)


@pytest.mark.subprocess  # ffmpeg
def test_a_rotated_video_is_hashed_in_its_display_orientation():
    """100x60 stored with a 90 degree display matrix: shown 60x100."""
    step = VideoPlaceholder(lambda: video_renderer(Settings.from_env()))
    path = media_file("video", "video_rotation_90.mp4").resolve()
    result = step.run(path, VIDEO_PARAMS, RenderContext(), path.parent)
    assert result.files == []
    assert (result.decisions["display_width_px"], result.decisions["display_height_px"]) == (60, 100)
    w, h, _ = decoded(result.decisions["thumbhash"])
    assert w < h


@pytest.mark.subprocess  # ffmpeg
def test_a_white_video_is_white_and_a_real_one_is_taken_at_the_posters_time():
    step = VideoPlaceholder(lambda: video_renderer(Settings.from_env()))
    white = media_file("video", "white.mp4").resolve()
    decisions = step.run(white, VIDEO_PARAMS, RenderContext(), white.parent).decisions
    assert all(int(decisions["dominant_colour"][i : i + 2], 16) >= 0xF0 for i in (1, 3, 5))
    bunny = packaged_video("bigbuckbunny.mp4")
    decisions = step.run(bunny, VIDEO_PARAMS, RenderContext(), bunny.parent).decisions
    assert (decisions["display_width_px"], decisions["display_height_px"]) == (1280, 720)
    assert decisions["frame_at_s"] == pytest.approx(0.53, abs=0.01)  # 10 % of 5.3 s, as web-video@2's poster
