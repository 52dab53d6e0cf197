"""SSIMULACRA2's weights and final mapping (domain/ssimulacra2.py), against libjxl's
tools/ssimulacra2.cc: the weight table's order, what is computed, the score's shape."""

from __future__ import annotations

import pytest

from mediajobs.domain.ssimulacra2 import SIGNIFICANT, WEIGHTS, needed, score, srgb_to_linear


def test_the_weights_are_libjxls_108_in_its_order():
    assert len(WEIGHTS) == 108
    # libjxl's weight[48], weight[54], weight[100]: Y 1:4 ssim 1-norm, Y 1:8 ssim 1-norm, B 1:16 ringing 4-norm.
    assert WEIGHTS[("Y", 2, "ssim", 1)] == 225.20515300849274
    assert WEIGHTS[("Y", 3, "ssim", 1)] == 176.39317598450694
    assert WEIGHTS[("B", 4, "ringing", 4)] == 171.2667255897307
    assert WEIGHTS[("Y", 0, "blurring", 4)] == 17.445833984131262


def test_only_significant_terms_are_computed():
    assert len(SIGNIFICANT) == 25
    assert needed("Y", 0) == {"ssim", "blurring"} and needed("X", 0) == frozenset() and needed("B", 5) == frozenset()


def test_no_error_scores_100_and_more_error_scores_lower():
    assert score({}) == 100.0
    term = ("Y", 2, "ssim", 1)
    scores = [score({term: e}) for e in (0.001, 0.005, 0.01, 0.02)]
    assert scores == sorted(scores, reverse=True) and scores[0] < 100


def test_the_srgb_curve_and_its_range():
    assert srgb_to_linear(0) == 0.0 and srgb_to_linear(255) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        srgb_to_linear(256)
