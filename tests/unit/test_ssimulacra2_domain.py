"""SSIMULACRA2's weights and final mapping (domain/ssimulacra2.py), against libjxl's
tools/ssimulacra2.cc: the weight table's order, what is computed, the score's shape."""

from __future__ import annotations

import pytest

from mediajobs.domain.ssimulacra2 import (
    SIGNIFICANT,
    WEIGHTS,
    needed,
    scale_count,
    score,
    significant,
    srgb_to_linear,
    weight,
)


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


@pytest.mark.parametrize(
    ("size", "scales"),
    [
        ((1600, 1200), 6),
        ((320, 213), 6),  # the 1:32 scale is 10x7: computed, since 1:16 is 20x14
        ((100, 68), 5),  # 100x68, 50x34, 25x17, 13x9, then 7x5 (libjxl's 100x68 photo)
        ((320, 100), 5),
        ((8, 8), 2),
        ((7, 100), 0),
    ],
)
def test_the_scales_are_counted_as_libjxl_counts_them(size, scales):
    # libjxl's ComputeSSIMULACRA2 checks the previous scale's size before halving.
    assert scale_count(*size) == scales


def test_with_fewer_scales_the_weights_shift_as_libjxls_loop_walks_them():
    # Msssim::Score walks weight[i++] over the scales the picture has: with 5 scales, the Y
    # plane starts at weight[30] (X's 1:32 terms in the 6-scale table).
    assert weight(("Y", 0, "ssim", 1), 5) == WEIGHTS[("X", 5, "ssim", 1)]
    assert weight(("B", 4, "blurring", 4), 5) == WEIGHTS[("B", 2, "blurring", 4)]  # weight[89]
    assert all(weight(term, 6) == w for term, w in WEIGHTS.items())
    assert significant(6) == SIGNIFICANT and significant(5) != SIGNIFICANT
    assert needed("Y", 0, 5) != needed("Y", 0)


def test_a_term_outside_the_pictures_scales_is_refused():
    with pytest.raises(ValueError, match="no scale 5 among 5"):
        score({("Y", 5, "ssim", 1): 0.1}, 5)
