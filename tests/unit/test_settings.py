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
        "none",
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
