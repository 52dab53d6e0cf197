"""SSIMULACRA2's constants and its final score, pure Python (the pixel work is in
:mod:`mediajobs.adapters.ssimulacra2`, with Pillow).

SSIMULACRA 2 (Jon Sneyers, Cloudinary, 2022, updated April 2023; the reference is libjxl's
``tools/ssimulacra2.cc``, with Cloudinary's description at github.com/cloudinary/ssimulacra2):

- both pictures are converted from sRGB to linear RGB, then to XYB (JPEG XL's opsin
  absorbance matrix, a bias, a cube root), rescaled to about 0..1 (``MakePositiveXYB``:
  X*14+0.42, Y+0.01, B-Y+0.55);
- at 6 scales (1:1 to 1:32, each halved by a 2x2 average in *linear RGB*), for each of the
  three planes, three error maps: SSIM without the gamma term in the luminance comparison
  (``1 - (mu1-mu2)^2`` instead of ``2 mu1 mu2 / (mu1^2 + mu2^2)``), "ringing" (the distorted
  picture has edges where the original is smooth) and "blurring" (the reverse), from local
  means by a Gaussian blur of sigma 1.5;
- each map is pooled with its 1-norm (mean) and its 4-norm: 108 numbers, weighted
  (:data:`WEIGHTS`, fitted on CID22, TID2013, KADID-10k and KonFiG-IQA) and summed, then
  mapped to the score by a cubic and a power (:func:`score`): 100 for identical pictures,
  90 visually lossless, 70 high quality, 50 medium, 30 low; it can go below 0.

What differs in this package's implementation is said where it is done
(:mod:`mediajobs.adapters.ssimulacra2`): terms whose weight is below
:data:`NEGLIGIBLE_WEIGHT` are not computed (together they change a score by less than 0.1 point).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, Literal

#: Scales: 1:1, 1:2, ... 1:32 (libjxl ``kNumScales``). As libjxl's ``ComputeSSIMULACRA2``
#: does, a scale is computed while the scale *before* it is at least :data:`MIN_SCALE_SIDE_PX`
#: on both sides (its check reads the previous scale's size before halving), so the last
#: scale may be smaller than that (:func:`scale_count`).
NUM_SCALES: Final = 6
MIN_SCALE_SIDE_PX: Final = 8
#: SSIM's stabilising constant for the variance terms (libjxl ``kC2``).
C2: Final = 0.0009
#: Sigma of the Gaussian blur that makes the local means and variances, pixels.
BLUR_SIGMA_PX: Final = 1.5

#: The opsin absorbance matrix (linear sRGB -> LMS-like mix), rows in the order of the
#: mixed planes, and its bias (libjxl ``lib/jxl/cms/opsin_params.h``, kM00..kM22, kB0).
OPSIN_MATRIX: Final = (
    (0.30, 0.622, 0.078),
    (0.23, 0.692, 0.078),
    (0.24342268924547819, 0.20476744424496821, 0.55180986650955360),
)
OPSIN_BIAS: Final = 0.0037930732552754493

Plane = Literal["X", "Y", "B"]
Map = Literal["ssim", "ringing", "blurring"]
Norm = Literal[1, 4]
PLANES: Final[tuple[Plane, ...]] = ("X", "Y", "B")
MAPS: Final[tuple[Map, ...]] = ("ssim", "ringing", "blurring")
NORMS: Final[tuple[Norm, ...]] = (1, 4)

#: A pooled map: (plane, scale 0-5, map, norm).
Term = tuple[Plane, int, Map, Norm]

#: The 108 weights of libjxl's ``Msssim::Score``, in its order: plane X, Y, B; scale 0-5;
#: norm 1 then 4; map ssim, ringing, blurring.
_WEIGHT_LIST: Final = (
    # X: scales 0-5, each: norm 1 (ssim, ringing, blurring), norm 4 (ssim, ringing, blurring)
    0.0, 0.0007376606707406586, 0.0, 0.0, 0.0007793481682867309, 0.0,
    0.0, 0.0004371155730107379, 0.0, 1.1041726426657346, 0.00066284834129271, 0.00015231632783718752,
    0.0, 0.0016406437456599754, 0.0, 1.8422455520539298, 11.441172603757666, 0.0,
    0.0007989109436015163, 0.000176816438078653, 0.0, 1.8787594979546387, 10.94906990605142, 0.0,
    0.0007289346991508072, 0.9677937080626833, 0.0, 0.00014003424285435884, 0.9981766977854967, 0.00031949755934435053,
    0.0004550992113792063, 0.0, 0.0, 0.0013648766163243398, 0.0, 0.0,
    # Y: scales 0-5, each: norm 1 (ssim, ringing, blurring), norm 4 (ssim, ringing, blurring)
    0.0, 0.0, 0.0, 7.466890328078848, 0.0, 17.445833984131262,
    0.0006235601634041466, 0.0, 0.0, 6.683678146179332, 0.00037724407979611296, 1.027889937768264,
    225.20515300849274, 0.0, 0.0, 19.213238186143016, 0.0011401524586618361, 0.001237755635509985,
    176.39317598450694, 0.0, 0.0, 24.43300999870476, 0.28520802612117757, 0.0004485436923833408,
    0.0, 0.0, 0.0, 34.77906344483772, 44.835625328877896, 0.0,
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    # B: scales 0-5, each: norm 1 (ssim, ringing, blurring), norm 4 (ssim, ringing, blurring)
    0.0, 0.0008680556573291698, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0005313191874358747, 0.0, 0.00016533814161379112, 0.0, 0.0,
    0.0, 0.0, 0.0, 0.0004179171803251336, 0.0017290828234722833, 0.0,
    0.0020827005846636437, 0.0, 0.0, 8.826982764996862, 23.19243343998926, 0.0,
    95.1080498811086, 0.9863978034400682, 0.9834382792465353,
    0.0012286405048278493, 171.2667255897307, 0.9807858872435379,
    0.0, 0.0, 0.0, 0.0005130064588990679, 0.0, 0.00010854057858411537,
)  # fmt: skip


def _weights() -> dict[Term, float]:
    terms = [
        (plane, scale, map_, norm) for plane in PLANES for scale in range(NUM_SCALES) for norm in NORMS for map_ in MAPS
    ]
    assert len(terms) == len(_WEIGHT_LIST) == 108
    return dict(zip(terms, _WEIGHT_LIST, strict=True))


#: Weight of each of the 108 terms of a picture with all 6 scales (libjxl ``Msssim::Score``).
WEIGHTS: Final[Mapping[Term, float]] = _weights()

_PLANE_INDEX: Final = {p: i for i, p in enumerate(PLANES)}
_MAP_INDEX: Final = {m: i for i, m in enumerate(MAPS)}


def scale_count(width_px: int, height_px: int) -> int:
    """How many scales libjxl's ``ComputeSSIMULACRA2`` computes for a picture of this size.

    Scale 0 needs at least :data:`MIN_SCALE_SIDE_PX` on both sides; scale ``s`` > 0 (the
    previous one halved, odd sides rounded up) is computed when scale ``s - 1`` still has at
    least that on both sides. So a 320x213 picture has 6 scales (the last one 10x7) and a
    100x68 one 5 (the last 7x5).
    """
    if min(width_px, height_px) < MIN_SCALE_SIDE_PX:
        return 0
    scales = 1
    # (width_px, height_px) is the last scale counted: while it has at least 8 on both
    # sides, the next one is computed too, whatever its own size.
    while scales < NUM_SCALES and min(width_px, height_px) >= MIN_SCALE_SIDE_PX:
        width_px, height_px = (width_px + 1) // 2, (height_px + 1) // 2
        scales += 1
    return scales


def weight(term: Term, scales: int = NUM_SCALES) -> float:
    """The weight libjxl gives ``term`` in a picture of ``scales`` scales.

    libjxl's ``Msssim::Score`` walks its 108 weights in order while it loops over the scales
    the picture *has* (plane, then scale, then norm, then map), so with fewer than 6 scales
    the weights shift: the Y plane's terms take weights the table lists for X's missing
    scales, and so on. The metric is what that tool computes, so the same shift is made
    here (with 6 scales this is :data:`WEIGHTS`).

    Raises
    ------
    ValueError
        If ``scales`` is not 1-6 or the term's scale is not below it.
    """
    plane, scale, map_, norm = term
    if not 1 <= scales <= NUM_SCALES or not 0 <= scale < scales:
        raise ValueError(f"no scale {scale} among {scales}")
    index = _PLANE_INDEX[plane] * scales * 6 + scale * 6 + (0 if norm == 1 else 3) + _MAP_INDEX[map_]
    return _WEIGHT_LIST[index]


#: Terms weighing less are not computed. The 27 such terms with a weight (the others weigh 0)
#: weigh 0.020 together, at most 0.0021 each, and a pooled error map is below 1 in practice,
#: so leaving them out moves the weighted sum by less than 0.02: a score by less than 0.1
#: point at 70 (where the sum is about 2.6).
NEGLIGIBLE_WEIGHT: Final = 0.01


def significant(scales: int = NUM_SCALES) -> frozenset[Term]:
    """The terms worth computing in a picture of ``scales`` scales: weight (:func:`weight`)
    at least :data:`NEGLIGIBLE_WEIGHT`; with 6 scales, 25 of 108."""
    return frozenset(
        (plane, scale, map_, norm)
        for plane in PLANES
        for scale in range(scales)
        for map_ in MAPS
        for norm in NORMS
        if weight((plane, scale, map_, norm), scales) >= NEGLIGIBLE_WEIGHT
    )


#: The terms worth computing in a picture with all 6 scales: 25 of 108.
SIGNIFICANT: Final[frozenset[Term]] = significant()


def needed(plane: Plane, scale: int, scales: int = NUM_SCALES) -> frozenset[Map]:
    """The maps of ``plane`` at ``scale`` that carry a significant weight in a picture of
    ``scales`` scales (empty: skip it).

    ``ssim`` needs the blurred squares and product; ``ringing`` and ``blurring`` only the
    blurred planes."""
    terms = SIGNIFICANT if scales == NUM_SCALES else significant(scales)
    return frozenset(m for (p, s, m, _n) in terms if p == plane and s == scale)


def score(pooled: Mapping[Term, float], scales: int = NUM_SCALES) -> float:
    """The SSIMULACRA2 score of pooled error maps (libjxl ``Msssim::Score``).

    Parameters
    ----------
    pooled:
        (plane, scale, map, norm) -> the map's 1-norm (mean) or 4-norm (the 4th root of the
        mean of 4th powers). A term not given counts 0 (terms not computed).
    scales:
        How many scales the picture has (:func:`scale_count`): it decides each term's
        weight (:func:`weight`).

    Returns
    -------
    float
        100 for no error; lower is worse (it may go below 0).

    Raises
    ------
    ValueError
        If a term's scale is not below ``scales``.
    """
    if not pooled:
        return 100.0
    total = sum(weight(term, scales) * abs(value) for term, value in pooled.items())
    total *= 0.9562382616834844
    total = 2.326765642916932 * total - 0.020884521182843837 * total**2 + 6.248496625763138e-05 * total**3
    if total <= 0:
        return 100.0
    return 100.0 - 10.0 * math.pow(total, 0.6276336467831387)


def srgb_to_linear(value_8bit: int) -> float:
    """An 8-bit sRGB sample as linear light, 0..1 (IEC 61966-2-1 transfer function).

    Raises
    ------
    ValueError
        If ``value_8bit`` is not 0-255.
    """
    if not 0 <= value_8bit <= 255:
        raise ValueError(f"not an 8-bit sample: {value_8bit}")
    v = value_8bit / 255
    return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
