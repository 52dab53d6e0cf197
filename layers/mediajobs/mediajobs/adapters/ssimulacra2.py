"""SSIMULACRA2 with Pillow alone (no numpy, no scipy: the Lambda layer has no room for them,
docs/images.md "The metric").

The algorithm is libjxl's ``tools/ssimulacra2.cc`` (Cloudinary's SSIMULACRA 2.1; constants,
weights and the final mapping in :mod:`mediajobs.domain.ssimulacra2`). Pictures are held as
Pillow ``F`` (32-bit float) planes and combined with :mod:`PIL.ImageMath`; where Pillow has no
float operation, it is built from ones it has:

- **sRGB to linear**: a 256-entry table (``L`` -> ``F`` ``point``), exact for 8-bit input.
- **Cube root** of the opsin mix: a 256-entry table of the cube root of each bin's upper
  edge, then two Newton steps ``y <- (2y + x/y^2)/3``. From above, Newton's steps stay
  above the root (AM-GM) and shrink the relative error from at most 27 % to 0.27 % in the
  second-lowest bin (mixes of 0.004-0.008: sRGB values below about 13), to 0.03 % in the
  third and less above.
- **Gaussian blur**, sigma 1.5: Pillow blurs floats with no filter, so the plane goes to
  fixed point (``I``, 2^22 per unit), is padded with 5 pixels of zeros (libjxl's recursive
  Gaussian reads zeros outside the picture too), and filtered 4 times with the 3x3 kernel
  ``[k, 1-2k, k]`` x ``[k, 1-2k, k]``, k = 9/32, whose 4-fold convolution (9x9) has variance
  4 x 2k = 2.25 = 1.5^2 per axis: a binomial-like kernel close to the Gaussian (libjxl's
  recursive filter is an approximation of it too). Rounding costs 2.4e-7 per pass.
- **Downscaling** 2x2 in linear RGB: ``Image.reduce(2)``, whose partial last column and row
  average what is there, as libjxl's replicated edge does.
- **Pooling**: the mean of a map and of its 4th power by ``reduce`` to one pixel.
- **Scales** are counted and weighted as libjxl does (:func:`~mediajobs.domain.ssimulacra2.scale_count`,
  :func:`~mediajobs.domain.ssimulacra2.weight`): a picture under 113 px on a side has
  fewer than 6, and then libjxl's weights shift; a 100x68 photo scored 18 points away
  from libjxl's tool before this was matched.

Only the terms with a weight of at least
:data:`~mediajobs.domain.ssimulacra2.NEGLIGIBLE_WEIGHT` are computed (25 of 108): at 1:1 only
the Y plane counts, X from 1:2 to 1:16, B at 1:8 and 1:16, nothing at 1:32. How far the scores are from a
reference implementation: ``benchmarks/ssimulacra2_agreement.py``, figures in
benchmarks/README.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from PIL import Image, ImageFilter, ImageMath

from mediajobs.domain.ssimulacra2 import (
    BLUR_SIGMA_PX,
    C2,
    OPSIN_BIAS,
    OPSIN_MATRIX,
    PLANES,
    Map,
    Plane,
    Term,
    needed,
    scale_count,
    score,
    srgb_to_linear,
)

#: Background an alpha channel is composited over before scoring (mid grey, 8-bit sRGB).
ALPHA_BACKGROUND: Final = (128, 128, 128)
_LINEAR_LUT: Final = [srgb_to_linear(i) for i in range(256)]
_CBRT_BIAS: Final = OPSIN_BIAS ** (1 / 3)
#: The opsin mix is at most 1 + bias (each matrix row sums to 1): the cube-root table's range.
_MIX_TOP: Final = 1.0 + OPSIN_BIAS
_CBRT_BINS: Final = 255
#: Cube root of each bin's upper edge (``convert("L")`` truncates: bin i holds [i, i+1) x step).
_CBRT_GUESS: Final = [((i + 1) * _MIX_TOP / _CBRT_BINS) ** (1 / 3) for i in range(256)]
_NEWTON_STEPS: Final = 2
#: Fixed point of the blur: 2^22 per unit keeps every sum of 9 taps exact in a float32 (< 2^24).
_FIXED: Final = float(1 << 22)
#: 4 passes of [k, 1-2k, k]: variance 8k per axis = sigma^2.
_PASSES: Final = 4
_K: Final = BLUR_SIGMA_PX**2 / (2 * _PASSES)
_TAPS: Final = (_K, 1 - 2 * _K, _K)
_KERNEL: Final = ImageFilter.Kernel((3, 3), [a * b for a in _TAPS for b in _TAPS], scale=1)
#: Zeros around the picture while blurring: the kernel's reach (4) plus the 1-pixel rim
#: Pillow's 3x3 filter copies unfiltered.
_PAD_PX: Final = _PASSES + 1


def _img(fn: Callable[[dict[str, object]], object], **planes: Image.Image) -> Image.Image:
    out = ImageMath.lambda_eval(fn, **planes)
    if not isinstance(out, Image.Image):  # pragma: no cover - a scalar expression
        raise TypeError("an ImageMath expression gave no image")
    return out


def _affine(plane: Image.Image, scale: float, offset: float = 0.0) -> Image.Image:
    """``plane * scale + offset`` (one pass in C: ``point`` on ``F`` is affine)."""
    return plane.point(lambda v: v * scale + offset)


def _mean(plane: Image.Image) -> float:
    """The mean of an ``F`` plane (``reduce`` to one pixel sums in double precision)."""
    value = plane.reduce(plane.size).getpixel((0, 0))
    assert isinstance(value, float)
    return value


def blur(plane: Image.Image) -> Image.Image:
    """Gaussian blur of sigma 1.5 of an ``F`` plane, zeros outside it (module docstring).

    Parameters
    ----------
    plane: an ``F`` image, values in about 0..1.5 (the fixed point holds up to 511).

    Returns
    -------
    Image.Image
        An ``F`` image of the same size.
    """
    width, height = plane.size
    fixed = _affine(plane, _FIXED).convert("I").crop((-_PAD_PX, -_PAD_PX, width + _PAD_PX, height + _PAD_PX))
    for _ in range(_PASSES):
        fixed = fixed.filter(_KERNEL)
    return _affine(fixed.crop((_PAD_PX, _PAD_PX, _PAD_PX + width, _PAD_PX + height)).convert("F"), 1 / _FIXED)


def _cube_root(mix: Image.Image) -> Image.Image:
    """``mix ** (1/3)`` for an ``F`` plane of opsin mixes (bias..1+bias): table, then Newton."""
    guess = _affine(mix, _CBRT_BINS / _MIX_TOP).convert("L").point(_CBRT_GUESS, "F")
    third = _affine(mix, 1 / 3)
    root = guess
    for _ in range(_NEWTON_STEPS):
        root = _img(lambda a: a["y"] * (2 / 3) + a["t"] / (a["y"] * a["y"]), y=root, t=third)  # type: ignore[operator]
    return root


def _mix(linear: tuple[Image.Image, Image.Image, Image.Image], row: tuple[float, float, float]) -> Image.Image:
    """One row of the opsin absorbance matrix applied to linear RGB, plus the bias."""
    r, g, b = linear
    return _img(
        lambda a: a["r"] + a["g"] + a["b"],  # type: ignore[operator]
        r=_affine(r, row[0], OPSIN_BIAS),
        g=_affine(g, row[1]),
        b=_affine(b, row[2]),
    )


def _xyb(linear: tuple[Image.Image, Image.Image, Image.Image], planes: set[Plane]) -> dict[Plane, Image.Image]:
    """The asked planes of positive XYB (libjxl ``ToXYB`` then ``MakePositiveXYB``).

    X = (c0 - c1)/2 * 14 + 0.42, Y = (c0 + c1)/2 + 0.01, B = c2 - Y_raw + 0.55, where
    c_i = cbrt(mix_i) - cbrt(bias) and Y_raw = (c0 + c1)/2."""
    roots = [_cube_root(_mix(linear, OPSIN_MATRIX[i])) for i in range(3 if "B" in planes else 2)]
    out: dict[Plane, Image.Image] = {}
    if "X" in planes:
        out["X"] = _img(lambda a: (a["c0"] - a["c1"]) * 7.0 + 0.42, c0=roots[0], c1=roots[1])  # type: ignore[operator]
    if "Y" in planes:
        out["Y"] = _img(lambda a: (a["c0"] + a["c1"]) * 0.5 + (0.01 - _CBRT_BIAS), c0=roots[0], c1=roots[1])  # type: ignore[operator]
    if "B" in planes:
        out["B"] = _img(lambda a: a["c2"] - (a["c0"] + a["c1"]) * 0.5 + 0.55, c0=roots[0], c1=roots[1], c2=roots[2])  # type: ignore[operator]
    return out


def _planes_at(scale: int, scales: int) -> dict[Plane, frozenset[Map]]:
    return {p: maps for p in PLANES if (maps := needed(p, scale, scales))}


@dataclass(frozen=True)
class _PlaneRef:
    """What the reference contributes to one plane at one scale, computed once."""

    plane: Image.Image  # p1
    mu: Image.Image  # blur(p1)
    variance: Image.Image | None  # blur(p1^2) - mu1^2, when the SSIM map is needed
    edge: Image.Image  # 1 + |p1 - mu1|


def _rgb(image: Image.Image) -> Image.Image:
    """The picture as 8-bit sRGB ``RGB``, alpha composited over :data:`ALPHA_BACKGROUND`."""
    if image.mode == "RGB":
        return image
    if "A" in image.getbands():
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (*ALPHA_BACKGROUND, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def _linear(image: Image.Image) -> tuple[Image.Image, Image.Image, Image.Image]:
    r, g, b = (band.point(_LINEAR_LUT, "F") for band in _rgb(image).split())
    return r, g, b


class Ssimulacra2:
    """SSIMULACRA2 scores of distorted versions of one reference picture.

    The reference's share of the work (its XYB planes, local means and variances at every
    scale) is done once, here; each :meth:`score` does the distorted picture's share only.

    Parameters
    ----------
    reference:
        The picture before encoding: any Pillow mode, taken as sRGB (8 bits per sample;
        alpha composited over mid grey).

    Raises
    ------
    ValueError
        If the picture is empty.
    """

    def __init__(self, reference: Image.Image) -> None:
        if reference.width < 1 or reference.height < 1:
            raise ValueError(f"an empty picture: {reference.width}x{reference.height}")
        self.size: tuple[int, int] = reference.size
        #: How many scales the picture has (libjxl's rule: :func:`scale_count`).
        self.scale_count = scale_count(*reference.size)
        self._scales: list[dict[Plane, _PlaneRef]] = []
        linear = _linear(reference)
        for scale in range(self.scale_count):
            if scale:
                linear = (linear[0].reduce(2), linear[1].reduce(2), linear[2].reduce(2))
            wanted = _planes_at(scale, self.scale_count)
            refs: dict[Plane, _PlaneRef] = {}
            for name, p1 in (_xyb(linear, set(wanted)) if wanted else {}).items():
                mu1 = blur(p1)
                variance = None
                if "ssim" in wanted[name]:
                    variance = _img(lambda a: a["s"] - a["m"] * a["m"], s=blur(_sq(p1)), m=mu1)  # type: ignore[operator]
                edge = _img(lambda a: abs(a["p"] - a["m"]) + 1.0, p=p1, m=mu1)  # type: ignore[operator]
                refs[name] = _PlaneRef(p1, mu1, variance, edge)
            self._scales.append(refs)

    def pooled(self, distorted: Image.Image) -> dict[Term, float]:
        """The significant pooled error maps of ``distorted`` against the reference.

        Raises
        ------
        ValueError
            If ``distorted`` is not the reference's size.
        """
        if distorted.size != self.size:
            raise ValueError(f"sizes differ: {distorted.size} against the reference's {self.size}")
        pooled: dict[Term, float] = {}
        linear = _linear(distorted)
        for scale, refs in enumerate(self._scales):
            if scale:
                linear = (linear[0].reduce(2), linear[1].reduce(2), linear[2].reduce(2))
            wanted = _planes_at(scale, self.scale_count)
            for name, p2 in (_xyb(linear, set(refs)) if refs else {}).items():
                ref = refs[name]
                mu2 = blur(p2)
                if ref.variance is not None:
                    ssim = _img(
                        lambda a: a["max"](  # type: ignore[operator]
                            1.0
                            - (1.0 - (a["m1"] - a["m2"]) * (a["m1"] - a["m2"]))  # type: ignore[operator]
                            * ((a["s12"] - a["m1"] * a["m2"]) * 2.0 + C2)  # type: ignore[operator]
                            / (a["v1"] + (a["s22"] - a["m2"] * a["m2"]) + C2),  # type: ignore[operator]
                            0.0,
                        ),
                        m1=ref.mu,
                        m2=mu2,
                        v1=ref.variance,
                        s12=blur(_product(ref.plane, p2)),
                        s22=blur(_sq(p2)),
                    )
                    _norms(pooled, (name, scale, "ssim"), ssim)
                maps = wanted[name]
                if "ringing" in maps or "blurring" in maps:
                    ratio = _img(lambda a: (abs(a["p"] - a["m"]) + 1.0) / a["e"] - 1.0, p=p2, m=mu2, e=ref.edge)  # type: ignore[operator]
                    if "ringing" in maps:
                        _norms(pooled, (name, scale, "ringing"), _img(lambda a: a["max"](a["d"], 0.0), d=ratio))  # type: ignore[operator]
                    if "blurring" in maps:
                        _norms(pooled, (name, scale, "blurring"), _img(lambda a: a["max"](-a["d"], 0.0), d=ratio))  # type: ignore[operator]
        return pooled

    def score(self, distorted: Image.Image) -> float:
        """The SSIMULACRA2 score of ``distorted`` (same size as the reference): 100 when
        identical, 90 visually lossless, 70 high, 50 medium, 30 low quality.

        Raises
        ------
        ValueError
            If ``distorted`` is not the reference's size.
        """
        return score(self.pooled(distorted), self.scale_count)


def _sq(plane: Image.Image) -> Image.Image:
    return _img(lambda a: a["p"] * a["p"], p=plane)  # type: ignore[operator]


def _product(a_plane: Image.Image, b_plane: Image.Image) -> Image.Image:
    return _img(lambda a: a["p"] * a["q"], p=a_plane, q=b_plane)  # type: ignore[operator]


def _norms(pooled: dict[Term, float], key: tuple[Plane, int, Map], error_map: Image.Image) -> None:
    """The 1-norm and 4-norm of a (non-negative) error map, into ``pooled``."""
    plane, scale, map_ = key
    pooled[(plane, scale, map_, 1)] = _mean(error_map)
    fourth = _img(lambda a: (a["d"] * a["d"]) * (a["d"] * a["d"]), d=error_map)  # type: ignore[operator]
    pooled[(plane, scale, map_, 4)] = max(_mean(fourth), 0.0) ** 0.25


def ssimulacra2(reference: Image.Image, distorted: Image.Image) -> float:
    """The SSIMULACRA2 score of ``distorted`` against ``reference`` (one comparison; use
    :class:`Ssimulacra2` to compare several pictures with one reference).

    Raises
    ------
    ValueError
        If the sizes differ or the pictures are empty.
    """
    return Ssimulacra2(reference).score(distorted)
