"""Rules for numpy's elementwise functions and reductions, and numpy's non-differentiable list.

Shape and indexing rules live in ``array_rules``, products and ``numpy.linalg`` in
``linalg_rules``.  Conventions (docs/rules.md): cotangents are ``ybar * dy/dx`` (JAX's complex
convention, no conjugate); they may keep the broadcast shape of the output (the transform sums
them down); ties in ``max``/``min`` reductions and in ``maximum``/``minimum`` split the cotangent
evenly between the tied elements.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._common import Table, bincount, cj, count, expand_reduced, norm_axes, options, unreduce
from .python_rules import (add_pullback, identity_pullback, mul_pullback, neg_pullback,
                           pow_pullback, sub_pullback, truediv_pullback)
from ..errors import NoRuleError

T = Table(__name__)

# ---- elementwise -----------------------------------------------------------------------------


def add_fwd(x: Any, y: Any, **kw: Any) -> tuple[Any, Any]:
    return np.add(x, y, **kw), None


def subtract_fwd(x: Any, y: Any, **kw: Any) -> tuple[Any, Any]:
    return np.subtract(x, y, **kw), None


def multiply_fwd(x: Any, y: Any, **kw: Any) -> tuple[Any, Any]:
    return np.multiply(x, y, **kw), (x, y)


def divide_fwd(x: Any, y: Any, **kw: Any) -> tuple[Any, Any]:
    out = np.divide(x, y, **kw)
    return out, (y, out)


def negative_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    return np.negative(x, **kw), None


def positive_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    return np.positive(x, **kw), None


def power_fwd(x: Any, y: Any, **kw: Any) -> tuple[Any, Any]:
    out = np.power(x, y, **kw)
    return out, (x, y, out)


def float_power_fwd(x: Any, y: Any, **kw: Any) -> tuple[Any, Any]:
    out = np.float_power(x, y, **kw)
    return out, (x, y, out)


def absolute_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    return np.absolute(x, **kw), x


def absolute_pullback(x: Any, g: Any) -> tuple[Any]:
    """``g * sign(x)``; for complex ``x`` it is ``g * conj(x)/|x|`` (d|z| = Re(conj(z) dz)/|z|)."""
    if np.iscomplexobj(x):
        return (g * np.conj(np.sign(x)),)
    return (g * np.sign(x),)


def sign_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.sign(x, **kw)
    return y, (x, y)


def sign_pullback(s: Any, g: Any) -> tuple[Any]:
    """Real sign is locally constant; complex y = sign(z) = z/|z| has dy = (dz - y Re(conj(y) dz))/|z|,
    whose transpose sends g to (g - Re(g y) conj(y))/|z|."""
    x, y = s
    if not np.iscomplexobj(x):
        return (None,)
    r = np.abs(x)
    safe = np.where(r == 0, 1.0, r)
    gx = (g - np.real(g * y) * np.conj(y)) / safe
    return (np.where(r == 0, 0.0, gx),)


def real_fwd(x: Any) -> tuple[Any, Any]:
    return np.real(x), None


def real_if_close_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.real_if_close(a, *args, **kw), None


def real_if_close_pullback(s: None, g: Any) -> tuple[Any]:
    """Either the identity or the real part: in both cases ``a`` gets ``g`` (``tol`` none)."""
    return (g,)


def imag_fwd(x: Any) -> tuple[Any, Any]:
    return np.imag(x), np.iscomplexobj(x)


def imag_pullback(cplx: bool, g: Any) -> tuple[Any]:
    """imag(x) = Re(-1j * x), so x gets -1j * g (nothing when x is real)."""
    return (-1j * g if cplx else None,)


def conj_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    return np.conjugate(x, **kw), None


def ndarray_conj_fwd(x: Any) -> tuple[Any, Any]:
    return x.conj(), None


def conj_pullback(s: Any, g: Any) -> tuple[Any]:
    return (np.conj(g),)


def angle_fwd(x: Any, deg: bool = False) -> tuple[Any, Any]:
    return np.angle(x, deg), (x, deg)


def angle_pullback(s: Any, g: Any) -> tuple[Any]:
    """angle(z) = atan2(y, x): z gets g * (d/dx - 1j d/dy) = -1j * conj(z) * g / |z|^2; real input
    is locally constant."""
    x, deg = s
    if not np.iscomplexobj(x):
        return (None,)
    scale = 180.0 / np.pi if deg else 1.0
    return (-1j * np.conj(x) * (g * scale) / (x * np.conj(x)).real,)


def clip_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.clip(a, *args, **kw)
    o = options(args, {k: v for k, v in kw.items() if k in ("a_min", "a_max", "min", "max")},
                ("a_min", "a_max"), a_min=None, a_max=None)
    lo = o["min"] if o.get("min") is not None else o["a_min"]
    hi = o["max"] if o.get("max") is not None else o["a_max"]
    return y, (a, lo, hi, 1 + len(args))


def ndarray_clip_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = a.clip(*args, **kw)
    o = options(args, kw, ("min", "max"), min=None, max=None)
    return y, (a, o["min"], o["max"], 1 + len(args))


def clip_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """clip = minimum(maximum(x, lo), hi); x keeps the cotangent on the boundary (lo <= x <= hi)."""
    a, lo, hi, n = s
    m = a if lo is None else np.maximum(a, lo)
    over = np.zeros(np.shape(m), bool) if hi is None else m > hi
    under = np.zeros(np.shape(a), bool) if lo is None else a < lo
    ga = np.where(over | under, 0.0, g)
    glo = None if lo is None else np.where(under & ~over, g, 0.0)
    ghi = None if hi is None else np.where(over, g, 0.0)
    return (ga, glo, ghi)[:n]


def where_fwd(*args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.where(*args, **kw), (args[0], len(args))


def where_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    cond, n = s
    if n == 1:
        return (None,)
    zero = np.zeros((), dtype=np.result_type(g))
    return None, np.where(cond, g, zero), np.where(cond, zero, g)


def nan_to_num_fwd(x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.nan_to_num(x, *args, **kw), x


def nan_to_num_pullback(x: Any, g: Any) -> tuple[Any]:
    return (np.where(np.isfinite(x), g, 0.0),)


T.rule(np.add, add_fwd, add_pullback)
T.rule(np.subtract, subtract_fwd, sub_pullback)
T.rule(np.multiply, multiply_fwd, mul_pullback)
T.rule(np.divide, divide_fwd, truediv_pullback)
T.rule(np.negative, negative_fwd, neg_pullback)
T.rule(np.positive, positive_fwd, identity_pullback)
T.rule(np.power, power_fwd, pow_pullback, "integer exponents get no cotangent")
T.rule(np.float_power, float_power_fwd, pow_pullback)
T.rule(np.absolute, absolute_fwd, absolute_pullback, "0 at 0; complex: x/|x|")
T.rule(np.sign, sign_fwd, sign_pullback, "zero for real input; complex: z/|z|")
T.rule(np.real, real_fwd, identity_pullback)
T.rule(np.real_if_close, real_if_close_fwd, real_if_close_pullback, "the identity or the real part")
T.rule(np.imag, imag_fwd, imag_pullback)
T.rule(np.conjugate, conj_fwd, conj_pullback)
T.rule(np.ndarray.conj, ndarray_conj_fwd, conj_pullback)
T.rule(np.ndarray.conjugate, ndarray_conj_fwd, conj_pullback)
T.rule(np.angle, angle_fwd, angle_pullback, "zero for real input")
T.rule(np.clip, clip_fwd, clip_pullback, "x keeps the cotangent on the boundary")
T.rule(np.ndarray.clip, ndarray_clip_fwd, clip_pullback, "x keeps the cotangent on the boundary")
T.rule(np.where, where_fwd, where_pullback)
T.rule(np.nan_to_num, nan_to_num_fwd, nan_to_num_pullback, "zero where x is not finite")

_LN2, _LN10 = np.log(2.0), np.log(10.0)
_INV_LN2, _INV_LN10 = 1.0 / _LN2, 1.0 / _LN10
_D2R, _R2D = np.pi / 180.0, 180.0 / np.pi


# ---- partials in forms accurate over the whole domain (issue 14: tests/test_rule_precision.py) --
#
# The textbook formula of a derivative can lose every digit where the function saturates or
# cancels (1 - tanh(x)^2 is 0 beyond |x| ~ 19, where the true value is ~1e-16).  These forms
# stay within a few ulp of the true derivative from the smallest subnormal to the largest
# float, and give the limit at +-inf.  They are plain numpy (the pullbacks are traced and
# differentiated again): where a form has two branches, each branch only sees arguments on
# which it is finite, so that the branch np.where discards gives a zero, not a NaN, derivative.

#: |x| beyond which sech(x)^2 has underflowed to 0 in each float type while cosh(x) is finite
_FLOATS = (np.float16, np.float32, np.float64, np.longdouble)
_SECH2_CAP = {np.dtype(t): 0.9 * float(np.log(np.finfo(t).max)) for t in _FLOATS}


def _clip(x: Any, lo: float, hi: float) -> Any:
    """np.clip, as the method for arrays (half of np.clip's call overhead on small arrays)."""
    return x.clip(lo, hi) if isinstance(x, np.ndarray) else np.clip(x, lo, hi)


def _sech2(x: Any) -> Any:
    """sech(x)^2 = 1/cosh(x)^2 (tanh', and tan'(x) = sech(ix)^2 for complex x), to a few ulp.

    Real x: 1/cosh(clip(x, -cap, cap))^2, the cap past the point where the result underflows
    (so cosh never overflows: no warning, a finite second derivative).  Complex z: 4e/(1 + e)^2
    with e = exp(-2w), w = +-z with Re w >= 0 (sech^2 is even), which neither overflows nor
    cancels (1 - tanh(z)^2 cancels for large |Re z| too)."""
    if np.iscomplexobj(x):
        w = np.where(np.less(np.real(x), 0), -x, x)
        e = np.exp(-2.0 * w)
        d = 1.0 + e
        return 4.0 * e / (d * d)
    cap = _SECH2_CAP.get(np.result_type(x), 400.0)
    s = 1.0 / np.cosh(_clip(x, -cap, cap))
    return s * s


def _tan_d(x: Any, y: Any) -> Any:
    """tan' = 1 + tan^2 (accurate for real x); complex: sech(iz)^2 (1 + tan^2 cancels as tan(z)
    -> +-i for large |Im z|)."""
    if np.iscomplexobj(x):
        return _sech2(1j * x)
    return 1.0 + y * y


def _rsqrt_1mx2(x: Any) -> Any:
    """1/sqrt(1 - x^2) (arcsin') as 1/sqrt((1 - x)(1 + x)): 1 - x*x cancels near |x| = 1, where
    1 -+ x is exact.  Complex: the product of the two principal roots (the same branch cuts as
    arcsin's, no overflow)."""
    if np.iscomplexobj(x):
        return 1.0 / (np.sqrt(1.0 - x) * np.sqrt(1.0 + x))
    return 1.0 / np.sqrt((1.0 - x) * (1.0 + x))


def _arctan_d(x: Any) -> Any:
    """1/(1 + x^2) (x*x overflows only where the result is below the normal range); complex:
    1/((1 + iz)(1 - iz)), which does not cancel near the poles +-i."""
    if np.iscomplexobj(x):
        return 1.0 / ((1.0 + 1j * x) * (1.0 - 1j * x))
    return 1.0 / (1.0 + x * x)


def _arcsinh_d(x: Any) -> Any:
    """1/sqrt(1 + x^2): x*x overflows beyond 1e154, where the slope is 1/|x| (not 0), so |x| >
    1e150 takes 1/|x| (exactly the rounded value there; np.hypot would be 4x slower).  Complex:
    1/(sqrt(1 + iz) sqrt(1 - iz)) (no cancellation near +-i)."""
    if np.iscomplexobj(x):
        return 1.0 / (np.sqrt(1.0 + 1j * x) * np.sqrt(1.0 - 1j * x))
    a = np.abs(x)
    big = np.greater(a, 1e150)
    xs = np.where(big, 0.0, x)
    return np.where(big, 1.0 / np.where(big, a, 1.0), 1.0 / np.sqrt(1.0 + xs * xs))


def _arccosh_d(x: Any) -> Any:
    """1/sqrt(x^2 - 1) as 1/(sqrt(x - 1) sqrt(x + 1)): no cancellation near 1, no overflow, and
    for complex z numpy's own branch (arccosh z = log(z + sqrt(z - 1) sqrt(z + 1)))."""
    return 1.0 / (np.sqrt(x - 1.0) * np.sqrt(x + 1.0))


def _arctanh_d(x: Any) -> Any:
    """1/(1 - x^2) as 1/((1 - x)(1 + x)) (1 - x*x cancels near |x| = 1)."""
    return 1.0 / ((1.0 - x) * (1.0 + x))


#: |d| at which exp(d) is clipped in logaddexp's shares: the last finite exp in each float type
#: (beyond it the small share is at most exp(-cap), below the normal range)
_EXP_CAP = {np.dtype(t): float(math.floor(np.log(np.finfo(t).max))) for t in _FLOATS}


def _logaddexp_shares(x: Any, y: Any, scale: float = 1.0) -> tuple[Any, Any]:
    """logaddexp's partials e/(1 + e) and 1/(1 + e), e = exp(d), d = (x - y) * scale (ln 2 for
    logaddexp2).

    The textbook exp(x - out) carries the rounding of out (all its digits are lost when |out|
    is ~1e16 times |x - out|, and it is NaN at x = out = inf); both shares of e are a few ulp
    plus the rounding of x - y (|d|/2 ulp, |d| < 745 before a share underflows).  d is clipped
    where exp would overflow (the small share then stays at exp(-709) ~ 1e-308, below the
    normal range, instead of going to 0; the lower bound is where exp is 0 already).  Equal
    infinities (d = inf - inf) give NaN, as before."""
    d = x - y
    if scale != 1.0:
        d = d * scale
    cap = _EXP_CAP.get(np.result_type(d), 709.0)
    e = np.exp(_clip(d, -cap - 37.0, cap))
    # NOTE: np.reciprocal, not 1.0 / (1 + e): onnxruntime 1.32's graph optimizer breaks the
    # exported model on that sigmoid-shaped Div (a dangling input) when ybar is a constant
    r = np.reciprocal(1.0 + e)
    return e * r, r


def _over_hypot(a: Any, h: Any) -> Any:
    """a / hypot(...): 0 at the origin, a kink (like abs and the 2-norm: the subgradient 0)."""
    return a / np.where(np.equal(h, 0), 1.0, h)


def _arctan2_d(y: Any, x: Any) -> tuple[Any, Any]:
    """(x, -y) / (x^2 + y^2), with x and y scaled by s = max(|x|, |y|) first: x*x + y*y
    overflows beyond 1e154 (0 for a slope ~1/|x|) and underflows below 1e-154 (inf).  NaN at
    the origin, as before (arctan2 is not continuous there)."""
    s = np.maximum(np.abs(x), np.abs(y))
    xs, ys = x / s, y / s
    q = s * (xs * xs + ys * ys)
    return xs / q, -ys / q


_PI2_3, _PI4_30 = np.pi ** 2 / 3.0, np.pi ** 4 / 30.0
#: sinc'(x) = x * sum_k c_k x^(2k-2), c_k = (-1)^k 2k pi^(2k) / (2k + 1)!, k = 1..10 (|x| < 0.3)
_SINC_C = tuple((-1) ** k * 2 * k * math.pi ** (2 * k) / math.factorial(2 * k + 1) for k in range(1, 11))


def _sinc_d(x: Any) -> Any:
    """sinc'(x) = (cos(pi x) - sinc(x)) / x.

    The difference cancels near 0 (both terms ~1, the result ~ -pi^2 x / 3): |x| < 0.3 takes
    the Taylor series (to a few ulp).  Beyond, cos and sin are taken of pi r, r = x reduced
    mod 2 (exactly), so that large x keeps its digits (pi * x rounds: np.sinc(1e300) is noise).
    Complex: the old form (series below |z| = 1e-3)."""
    if np.iscomplexobj(x):
        tiny = np.abs(x) < 1e-3
        return np.where(tiny, x * (_PI4_30 * x * x - _PI2_3),
                        (np.cos(np.pi * x) - np.sinc(x)) / np.where(tiny, 1.0, x))
    small = np.less(np.abs(x), 0.3)
    xs = np.where(small, x, 0.0)
    u = xs * xs
    p = _SINC_C[-1]
    for c in reversed(_SINC_C[:-1]):
        p = p * u + c
    xl = np.where(small, 1.0, x)
    r = xl - 2.0 * np.round(0.5 * xl)
    pr = np.pi * r
    big = (np.cos(pr) - np.sin(pr) / (np.pi * xl)) / xl
    return np.where(small, xs * p, big)


T.scalar(np.square, lambda x: 2 * x)
T.scalar(np.sqrt, lambda x, y: 0.5 / y)
T.scalar(np.cbrt, lambda x, y: 1.0 / (3.0 * y * y))
T.scalar(np.reciprocal, lambda x, y: -y * y)
T.scalar(np.exp, lambda x, y: y)
T.scalar(np.exp2, lambda x, y: y * _LN2)
T.scalar(np.expm1, lambda x: np.exp(x))               # not y + 1: 0 for x < -37
T.scalar(np.log, lambda x: 1.0 / x)
T.scalar(np.log2, lambda x: _INV_LN2 / x)
T.scalar(np.log10, lambda x: _INV_LN10 / x)            # not 1/(x ln 10): x ln 10 overflows beyond 7.8e307
T.scalar(np.log1p, lambda x: 1.0 / (1.0 + x))
T.scalar(np.logaddexp, lambda x, y: _logaddexp_shares(x, y)[0], lambda x, y: _logaddexp_shares(x, y)[1])
T.scalar(np.logaddexp2, lambda x, y: _logaddexp_shares(x, y, _LN2)[0],
         lambda x, y: _logaddexp_shares(x, y, _LN2)[1])
T.scalar(np.sin, lambda x: np.cos(x))
T.scalar(np.cos, lambda x: -np.sin(x))
T.scalar(np.tan, _tan_d)
T.scalar(np.arcsin, lambda x: _rsqrt_1mx2(x))
T.scalar(np.arccos, lambda x: -_rsqrt_1mx2(x))
T.scalar(np.arctan, lambda x: _arctan_d(x))
T.scalar(np.arctan2, lambda y, x: _arctan2_d(y, x)[0], lambda y, x: _arctan2_d(y, x)[1])
T.scalar(np.hypot, lambda x, y, h: _over_hypot(x, h), lambda x, y, h: _over_hypot(y, h))
T.scalar(np.sinh, lambda x: np.cosh(x))
T.scalar(np.cosh, lambda x: np.sinh(x))
T.scalar(np.tanh, lambda x: _sech2(x))                 # not 1 - y*y: 0 beyond |x| ~ 19
T.scalar(np.arcsinh, lambda x: _arcsinh_d(x))
T.scalar(np.arccosh, lambda x: _arccosh_d(x))
T.scalar(np.arctanh, lambda x: _arctanh_d(x))
T.scalar(np.deg2rad, lambda x: _D2R)
T.scalar(np.radians, lambda x: _D2R)
T.scalar(np.rad2deg, lambda x: _R2D)
T.scalar(np.degrees, lambda x: _R2D)
T.scalar(np.fabs, lambda x: np.sign(x), note="0 at 0")
T.scalar(np.sinc, lambda x: _sinc_d(x))
T.scalar(np.maximum, lambda x, y: (x > y) + 0.5 * (x == y), lambda x, y: (y > x) + 0.5 * (x == y),
         note="ties split evenly")
T.scalar(np.minimum, lambda x, y: (x < y) + 0.5 * (x == y), lambda x, y: (y < x) + 0.5 * (x == y),
         note="ties split evenly")
T.scalar(np.fmax, lambda x, y: np.where(np.isnan(y), 1.0, (x > y) + 0.5 * (x == y)),
         lambda x, y: np.where(np.isnan(x), 1.0, (y > x) + 0.5 * (x == y)),
         note="ties split evenly; NaN loses")
T.scalar(np.fmin, lambda x, y: np.where(np.isnan(y), 1.0, (x < y) + 0.5 * (x == y)),
         lambda x, y: np.where(np.isnan(x), 1.0, (y < x) + 0.5 * (x == y)),
         note="ties split evenly; NaN loses")
T.scalar(np.remainder, lambda x, y: 1.0, lambda x, y: -np.floor_divide(x, y))
T.scalar(np.fmod, lambda x, y: 1.0, lambda x, y: -np.trunc(x / y))
T.scalar(np.copysign, lambda x, y: np.sign(x) * np.copysign(1.0, y), None)
T.scalar(np.ldexp, lambda x, i: np.ldexp(1.0, i), None)


def modf_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    return np.modf(x, **kw), None


def modf_pullback(s: Any, g: Any) -> tuple[Any]:
    """x = frac + integer part: the fractional part has slope 1, the integer part 0."""
    return (g[0],)


def frexp_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.frexp(x, **kw)
    return y, y[1]


def frexp_pullback(e: Any, g: Any) -> tuple[Any]:
    """x = m 2^e with e locally constant: m has slope 2^-e."""
    return (np.ldexp(g[0], -e),)


def heaviside_fwd(x1: Any, x2: Any, **kw: Any) -> tuple[Any, Any]:
    return np.heaviside(x1, x2, **kw), x1


def heaviside_pullback(x1: Any, g: Any) -> tuple[Any, Any]:
    """A step in x1 (zero derivative); x2 is the value taken where x1 == 0."""
    return None, np.where(x1 == 0, g, np.zeros((), dtype=np.result_type(g)))


T.rule(np.heaviside, heaviside_fwd, heaviside_pullback, "x1 none; x2 where x1 == 0")
T.rule(np.modf, modf_fwd, modf_pullback, "the fractional part has slope 1")
T.rule(np.frexp, frexp_fwd, frexp_pullback, "the mantissa has slope 2^-e")

# ---- reductions ------------------------------------------------------------------------------

_SUM = ("axis", "dtype", "out", "keepdims", "initial", "where")
_MAX = ("axis", "out", "keepdims", "initial", "where")
_MEAN = ("axis", "dtype", "out", "keepdims")
_VAR = ("axis", "dtype", "out", "ddof", "keepdims")


def _no_out(o: dict[str, Any]) -> None:
    if o.get("out") is not None:
        raise NoRuleError("irad: out= is not supported inside a differentiated function")


def _reduce_state(a: Any, args: tuple[Any, ...], kw: dict[str, Any], names: tuple[str, ...],
                  axis: Any = None) -> dict[str, Any]:
    o = options(args, kw, names, axis=axis, keepdims=False, where=True, ddof=0)
    _no_out(o)
    o["shape"] = np.shape(a)
    return o


def sum_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.sum(a, *args, **kw), _reduce_state(a, args, kw, _SUM)


def add_reduce_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.add.reduce(a, *args, **kw), _reduce_state(a, args, kw, _SUM, axis=0)


def sum_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    gx = unreduce(g, o["shape"], o["axis"], o["keepdims"])
    if o["where"] is not True:
        gx = np.where(o["where"], gx, 0.0)
    return (gx,)


def nansum_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = _reduce_state(a, args, kw, _SUM)
    o["where"] = ~np.isnan(a) & o["where"]
    return np.nansum(a, *args, **kw), o


def mean_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = _reduce_state(a, args, kw, _MEAN)
    return np.mean(a, *args, **kw), o


def nanmean_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = _reduce_state(a, args, kw, _MEAN)
    o["where"] = ~np.isnan(a) & o["where"]
    return np.nanmean(a, *args, **kw), o


def mean_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    shape, axis, w = o["shape"], o["axis"], o["where"]
    gx = unreduce(g, shape, axis, o["keepdims"])
    if w is True:
        return (gx / count(shape, axis),)
    w = np.broadcast_to(w, shape)
    k = np.sum(w, axis=norm_axes(axis, len(shape)), keepdims=True)
    return (np.where(w, gx / np.maximum(k, 1), 0.0),)


def _var_state(a: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any]:
    if kw.get("where", True) is not True or kw.get("mean") is not None:
        raise NoRuleError("irad: var/std with where= or mean= has no rule")
    o = _reduce_state(a, args, kw, _VAR)
    if o.get("correction") is not None:
        o["ddof"] = o["correction"]
    o["x"] = a
    return o


def var_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.var(a, *args, **kw), _var_state(a, args, kw)


def std_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.std(a, *args, **kw)
    o = _var_state(a, args, kw)
    o["y"] = y
    return y, o


def _centered(o: dict[str, Any]) -> Any:
    x, axis = o["x"], o["axis"]
    return x - np.mean(x, axis=norm_axes(axis, np.ndim(x)), keepdims=True)


def var_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    """d var = 2 Re(conj(x - mean) dx) / (N - ddof): x gets 2 conj(x - mean) / (N - ddof)."""
    gx = unreduce(g, o["shape"], o["axis"], o["keepdims"])
    k = count(o["shape"], o["axis"]) - o["ddof"]
    return (gx * cj(_centered(o)) * (2.0 / k),)


def std_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    """d std = (x - mean) / ((N - ddof) std); 0 where std == 0 (a subgradient)."""
    y = o["y"]
    safe = np.where(y == 0, 1.0, y)
    gx = unreduce(np.where(y == 0, 0.0, g / safe), o["shape"], o["axis"], o["keepdims"])
    k = count(o["shape"], o["axis"]) - o["ddof"]
    return (gx * cj(_centered(o)) / k,)


def _minmax_state(fn: Any, a: Any, args: tuple[Any, ...], kw: dict[str, Any],
                  axis: Any = None) -> tuple[Any, Any]:
    y = fn(a, *args, **kw)
    o = _reduce_state(a, args, kw, _MAX, axis=axis)
    o["x"], o["y"] = a, y
    return y, o


def max_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _minmax_state(np.max, a, args, kw)


def min_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _minmax_state(np.min, a, args, kw)


def amax_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _minmax_state(np.amax, a, args, kw)


def amin_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _minmax_state(np.amin, a, args, kw)


def nanmax_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _minmax_state(np.nanmax, a, args, kw)


def nanmin_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _minmax_state(np.nanmin, a, args, kw)


def maximum_reduce_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _minmax_state(np.maximum.reduce, a, args, kw, axis=0)


def minimum_reduce_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _minmax_state(np.minimum.reduce, a, args, kw, axis=0)


def _argext_share(x: Any, ykept: Any, axes: tuple[int, ...], where: Any) -> Any:
    """1/k on each of the k elements equal to the reduced value (ties split evenly), else 0."""
    hit = x == ykept
    if not isinstance(hit, np.ndarray):
        hit = np.asarray(hit)
    if where is not True:
        hit = hit & where
    k = np.sum(hit, axis=axes, keepdims=True)
    return hit / np.maximum(k, 1)


def max_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    """The cotangent goes to the extreme element; ties split it evenly."""
    shape, axis, keep = o["shape"], o["axis"], o["keepdims"]
    ykept = expand_reduced(o["y"], shape, axis, keep)
    share = _argext_share(o["x"], ykept, norm_axes(axis, len(shape)), o["where"])
    # NOTE: share has the input's shape, so g with the reduced axes kept broadcasts to it
    return (expand_reduced(g, shape, axis, keep) * share,)


def ptp_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = _reduce_state(a, args, kw, ("axis", "out", "keepdims"))
    ax = norm_axes(o["axis"], np.ndim(a))
    o["x"], o["axes"] = a, ax
    o["hi"] = np.max(a, axis=ax, keepdims=True)
    o["lo"] = np.min(a, axis=ax, keepdims=True)
    return np.ptp(a, *args, **kw), o


def ptp_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    """max - min: +g to the maximum, -g to the minimum (ties split evenly)."""
    x, ax = o["x"], o["axes"]
    share = _argext_share(x, o["hi"], ax, True) - _argext_share(x, o["lo"], ax, True)
    return (unreduce(g, o["shape"], ax, o["keepdims"]) * share,)


def _prod_others(x: Any, axes: tuple[int, ...]) -> Any:
    """For each element, the product of the other elements of its reduction (exact with zeros)."""
    x = np.asarray(x)
    rest = [i for i in range(x.ndim) if i not in axes]
    perm = rest + list(axes)
    xt = np.transpose(x, perm)
    lead = xt.shape[:len(rest)]
    flat = xt.reshape(lead + (-1,))
    one = np.ones(lead + (1,), dtype=flat.dtype)
    left = np.cumprod(np.concatenate([one, flat[..., :-1]], axis=-1), axis=-1)
    rflat = flat[..., ::-1]
    right = np.cumprod(np.concatenate([one, rflat[..., :-1]], axis=-1), axis=-1)[..., ::-1]
    return np.transpose((left * right).reshape(xt.shape), np.argsort(perm))


def prod_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = _reduce_state(a, args, kw, _SUM)
    o["x"] = a
    return np.prod(a, *args, **kw), o


def multiply_reduce_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = _reduce_state(a, args, kw, _SUM, axis=0)
    o["x"] = a
    return np.multiply.reduce(a, *args, **kw), o


def prod_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    """Each factor gets g times the product of the others (and of ``initial``)."""
    x, shape, axis = o["x"], o["shape"], o["axis"]
    w = o["where"]
    xe = x if w is True else np.where(w, x, 1)
    others = _prod_others(xe, norm_axes(axis, len(shape)))
    if "initial" in o:
        others = others * o["initial"]
    gx = unreduce(g, shape, axis, o["keepdims"]) * others
    if w is not True:
        gx = np.where(w, gx, 0.0)
    return (gx,)


T.rule(np.sum, sum_fwd, sum_pullback)
T.rule(np.ndarray.sum, sum_fwd, sum_pullback)
T.rule(np.add.reduce, add_reduce_fwd, sum_pullback)
T.rule(np.nansum, nansum_fwd, sum_pullback, "zero at NaNs")
T.rule(np.mean, mean_fwd, mean_pullback)
T.rule(np.ndarray.mean, mean_fwd, mean_pullback)
T.rule(np.nanmean, nanmean_fwd, mean_pullback, "zero at NaNs")
T.rule(np.var, var_fwd, var_pullback, "ddof/correction")
T.rule(np.ndarray.var, var_fwd, var_pullback, "ddof")
T.rule(np.std, std_fwd, std_pullback, "ddof/correction; 0 where std == 0")
T.rule(np.ndarray.std, std_fwd, std_pullback, "ddof; 0 where std == 0")
_TIES = "ties split evenly"
T.rule(np.max, max_fwd, max_pullback, _TIES)
T.rule(np.min, min_fwd, max_pullback, _TIES)
T.rule(np.amax, amax_fwd, max_pullback, _TIES)
T.rule(np.amin, amin_fwd, max_pullback, _TIES)
T.rule(np.ndarray.max, max_fwd, max_pullback, _TIES)
T.rule(np.ndarray.min, min_fwd, max_pullback, _TIES)
T.rule(np.nanmax, nanmax_fwd, max_pullback, _TIES + "; NaNs get zero")
T.rule(np.nanmin, nanmin_fwd, max_pullback, _TIES + "; NaNs get zero")
T.rule(np.maximum.reduce, maximum_reduce_fwd, max_pullback, _TIES)
T.rule(np.minimum.reduce, minimum_reduce_fwd, max_pullback, _TIES)
T.rule(np.ptp, ptp_fwd, ptp_pullback, _TIES)
T.rule(np.prod, prod_fwd, prod_pullback, "exact with zeros")
T.rule(np.ndarray.prod, prod_fwd, prod_pullback, "exact with zeros")
T.rule(np.multiply.reduce, multiply_reduce_fwd, prod_pullback, "exact with zeros")

# ---- cumulative ------------------------------------------------------------------------------


def _revcumsum(v: Any, axis: int) -> Any:
    return np.flip(np.cumsum(np.flip(v, axis), axis), axis)


def _cum_state(a: Any, args: tuple[Any, ...], kw: dict[str, Any], axis: Any = None) -> dict[str, Any]:
    o = options(args, kw, ("axis", "dtype", "out"), axis=axis)
    _no_out(o)
    o["shape"] = np.shape(a)
    return o


def cumsum_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.cumsum(a, *args, **kw), _cum_state(a, args, kw)


def add_accumulate_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.add.accumulate(a, *args, **kw), _cum_state(a, args, kw, axis=0)


def cumsum_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    """Reverse cumulative sum (over the flattened array when axis is None)."""
    if o["axis"] is None:
        gx = np.reshape(_revcumsum(np.ravel(g), 0), o["shape"])
    else:
        gx = _revcumsum(g, o["axis"])
    return (gx,)


def cumprod_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.cumprod(a, *args, **kw)
    o = _cum_state(a, args, kw)
    o["x"], o["y"] = a, y
    return y, o


def multiply_accumulate_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.multiply.accumulate(a, *args, **kw)
    o = _cum_state(a, args, kw, axis=0)
    o["x"], o["y"] = a, y
    return y, o


def cumprod_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    """revcumsum(g*y)/x where x != 0; the first zero of each row gets its exact value.

    Exact to first order for any input; its own derivative (second order) is not exact where a
    cumulative run holds two or more zeros.
    """
    x, y, axis = np.asarray(o["x"]), o["y"], o["axis"]
    if axis is None:
        x, g, axis = np.ravel(x), np.ravel(g), 0
    nz = x != 0
    main = _revcumsum(g * y, axis) / np.where(nz, x, 1)
    first = ~nz & (np.cumsum(~nz, axis=axis) == 1)
    y1 = np.cumprod(np.where(first, 1, x), axis=axis)
    alt = _revcumsum(g * y1, axis)
    gx = np.where(nz, main, np.where(first, alt, 0.0))
    return (np.reshape(gx, o["shape"]),)


T.rule(np.cumsum, cumsum_fwd, cumsum_pullback)
T.rule(np.ndarray.cumsum, cumsum_fwd, cumsum_pullback)
T.rule(np.add.accumulate, add_accumulate_fwd, cumsum_pullback)
T.rule(np.cumprod, cumprod_fwd, cumprod_pullback, "exact with zeros")
T.rule(np.ndarray.cumprod, cumprod_fwd, cumprod_pullback, "exact with zeros")
T.rule(np.multiply.accumulate, multiply_accumulate_fwd, cumprod_pullback, "exact with zeros")

# ---- sorting ---------------------------------------------------------------------------------


def sort_state(a: Any, y: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any]:
    """The permutation ``sort`` applied (a stable argsort) and the sorted values (for ties)."""
    o = options(args, kw, ("axis", "kind", "order"), axis=-1)
    if o.get("order") is not None:
        raise NoRuleError("irad: sort(order=...) of structured arrays has no rule")
    axis = o["axis"]
    flat = np.ravel(a) if axis is None else a
    perm = np.argsort(flat, axis=-1 if axis is None else axis, kind="stable")
    return {"perm": perm, "y": y, "axis": axis, "shape": np.shape(a)}


def sort_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.sort(a, *args, **kw)
    return y, sort_state(a, y, args, kw)


def _tie_mean(y: Any, g: Any, axis: int) -> Any:
    """Replace g by its mean over runs of equal values of the sorted ``y`` along ``axis``."""
    ys = np.moveaxis(np.asarray(y), axis, -1)
    gs = np.moveaxis(np.asarray(g), axis, -1)
    n = ys.shape[-1]
    ys2, gs2 = ys.reshape(-1, n), gs.reshape(-1, n)
    rows = ys2.shape[0]
    start = np.concatenate([np.ones((rows, 1), bool), ys2[:, 1:] != ys2[:, :-1]], axis=1)
    gid = np.cumsum(start, axis=1) - 1 + (np.arange(rows) * n)[:, None]
    sums = bincount(gid, gs2, rows * n)
    cnt = np.bincount(np.ravel(gid), minlength=rows * n)
    mean = (sums / np.maximum(cnt, 1))[gid]
    return np.moveaxis(mean.reshape(gs.shape), -1, axis)


def sort_pullback(o: dict[str, Any], g: Any) -> tuple[Any]:
    """Undo the sorting permutation; equal values share their cotangents evenly."""
    axis = -1 if o["axis"] is None else o["axis"]
    if np.size(g):
        g = _tie_mean(o["y"], g, axis)
    inv = np.argsort(o["perm"], axis=axis)
    gx = np.take_along_axis(g, inv, axis=axis)
    return (np.reshape(gx, o["shape"]),)


def unique_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.unique(a, *args, **kw)
    o = options(args, kw, ("return_index", "return_inverse", "return_counts", "axis"), axis=None)
    if o["axis"] is not None:
        raise NoRuleError("irad: np.unique(axis=...) has no rule")
    srt = {} if o.get("sorted", True) is True else {"sorted": o["sorted"]}
    vals, inv, cnt = np.unique(a, return_inverse=True, return_counts=True, **srt)
    if not np.array_equal(vals, y[0] if isinstance(y, tuple) else y, equal_nan=True):
        raise NoRuleError("irad: np.unique(sorted=False) returned its values in an order irad cannot reproduce")
    return y, (np.reshape(inv, np.shape(a)), cnt, isinstance(y, tuple))


def unique_pullback(s: Any, g: Any) -> tuple[Any]:
    """Each unique value's cotangent is shared evenly by the equal input elements."""
    inv, cnt, multi = s
    gv = g[0] if multi else g
    return (np.asarray(gv)[inv] / cnt[inv],)


T.rule(np.sort, sort_fwd, sort_pullback, "ties split evenly")
T.rule(np.unique, unique_fwd, unique_pullback, "shared evenly by equal elements")

# ---- no gradient -----------------------------------------------------------------------------

T.nograd(
    np.floor, np.ceil, np.round, np.around, np.rint, np.fix, np.trunc, np.signbit,
    np.spacing, np.floor_divide,
    np.all, np.any, np.argmax, np.argmin, np.argpartition, np.argsort, np.argwhere, np.nonzero,
    np.flatnonzero, np.count_nonzero, np.searchsorted, np.digitize, np.isin,
    np.ndim, np.shape, np.size, np.result_type, np.iscomplexobj, np.isrealobj, np.iscomplex,
    np.isreal, np.isscalar, np.zeros_like, np.ones_like, np.empty_like,
    np.isfinite, np.isinf, np.isnan, np.isneginf, np.isposinf, np.allclose, np.isclose,
    np.array_equal, np.array_equiv,
    np.greater, np.greater_equal, np.less, np.less_equal, np.equal, np.not_equal,
    np.logical_and, np.logical_or, np.logical_not, np.logical_xor,
    np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert, np.left_shift, np.right_shift,
    np.gcd, np.lcm,
    np.ndarray.argmax, np.ndarray.argmin, np.ndarray.argsort, np.ndarray.argpartition,
    np.ndarray.nonzero, np.ndarray.all, np.ndarray.any, np.ndarray.round,
    np.ndarray.searchsorted,
)
