"""Settings: read from the environment once; explicit arguments win."""

from __future__ import annotations

import pytest

from mediajobs.settings import Settings


def test_defaults():
    s = Settings.from_env({})
    assert (s.max_pixels, s.originals_prefix, s.derivatives_prefix, s.policy_version) == (
        50_000_000,
        "originals/",
        "derivatives/",
        "1",
    )


def test_environment_and_overrides():
    s = Settings.from_env({"JOBS_TABLE_NAME": "t", "MAX_PIXELS": "1000", "AWS_DEFAULT_REGION": "eu-west-1"}, lease_s=7)
    assert (s.jobs_table_name, s.max_pixels, s.region, s.lease_s) == ("t", 1000, "eu-west-1", 7)


@pytest.mark.parametrize("env", [{"MAX_PIXELS": "0"}, {"MAX_PIXELS": "many"}, {"ORIGINALS_PREFIX": "originals"}])
def test_invalid_values_are_rejected(env):
    with pytest.raises(ValueError):
        Settings.from_env(env)


def test_derivatives_may_not_live_under_originals():
    with pytest.raises(ValueError):
        Settings.from_env({"DERIVATIVES_PREFIX": "originals/derivatives/"})


@pytest.mark.parametrize("raw", ["nan", "inf", "-1", "0"])
def test_the_video_speed_factor_must_be_a_positive_finite_number(raw):
    with pytest.raises(ValueError):
        Settings.from_env({"VIDEO_SPEED_FACTOR": raw})


def test_the_decode_budget_follows_the_functions_memory_unless_set():
    """A stack deployed with MemorySize 1024 must not get a 1,536 MB decode budget: the
    function would be killed before the child's limit is reached."""
    from mediajobs.settings import Settings

    assert Settings.from_env({}).decode_memory_mb == 1536
    assert Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048"}).decode_memory_mb == 1536
    assert Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024"}).decode_memory_mb == 768
    assert (
        Settings.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024", "DECODE_MEMORY_MB": "900"}).decode_memory_mb
        == 900
    )


def test_the_image_limits_are_settings_whose_defaults_the_renderer_shares():
    from mediajobs.adapters import imaging

    settings = Settings()
    assert (settings.max_frames, settings.max_jpeg_scans) == (imaging.MAX_FRAMES, imaging.MAX_JPEG_SCANS)
    with pytest.raises(ValueError, match="max_frames"):
        Settings(max_frames=0)
