"""Precision of the elementwise rules' partial derivatives over their whole domain (issue 14, part 5).

The textbook formula of a derivative can lose everything where the function saturates or
cancels: ``tanh'(x) = 1 - y*y`` is exactly 0 beyond |x| ~ 19 (the true value there is ~1e-16),
``expm1' = y + 1`` is 0 for x < -37, ``arcsinh' = 1/sqrt(x*x + 1)`` is 0 beyond 1e154 (true:
1/x), ``expit' = y*(1 - y)`` is 0 for x > 37.  Each rule is compared here with a high-precision
reference (mpmath at 40 digits, the argument taken as the exact binary value) over a log-spaced
grid of both signs, from the smallest subnormal to the largest float, plus each function's hard
points (saturation, cancellation near a branch point, ±0, ±inf, nan).

The error measure is ``|got - ref| / max(|ref|, scale)``: the relative error, and relative to
``scale`` where the derivative has roots (sinc, i1e, digamma): there it is the error in units of
the derivative's local size away from the root, which is what any formula built from the
function's terms can reach.  A true value below the normal range (subnormal) may come out as any value within the
smallest normal float of it, 0 included (libm and SciPy flush there too).

Run as a script to print the worst error per rule.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import irad
from irad.rules import registry
from irad.rules.python_rules import digamma
from irad.testing import check_rule

try:
    import mpmath as mp
except ImportError:  # pragma: no cover - mpmath is in the test extra (sympy brings it too)
    mp = None

try:
    import scipy.special as sp

    from irad.rules import scipy_rules
    scipy_rules.load_all()
except ImportError:  # pragma: no cover
    sp = None

needs_mp = pytest.mark.skipif(mp is None, reason="mpmath is not installed: no high-precision reference")

EPS = np.finfo(float).eps
TINY = np.finfo(float).tiny
INF, NAN = np.inf, np.nan


# ---- evaluating a rule's partials ------------------------------------------------------------


def partials(fn, *args):
    """Every partial derivative of ``fn`` at ``args`` (its pullback applied to ybar = 1)."""
    rule = registry.lookup(fn, args)
    assert rule is not None, fn
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, state = rule.fwd(*args)
        one = 1.0 if isinstance(y, float) else np.ones_like(y)
        return rule.bwd(state, one)


def partial(fn, i, *args):
    return partials(fn, *args)[i]


def rel_err(got, ref, scale=None):
    """``|got - ref| / max(|ref|, scale)``; where the true value is below the normal range
    (subnormal), any result within ``tiny`` of it (0 included) counts as exact."""
    got = np.asarray(got, dtype=float)
    ref = np.asarray(ref, dtype=float)
    s = np.abs(ref) if scale is None else np.maximum(np.abs(ref), scale)
    with np.errstate(all="ignore"):
        diff = np.abs(got - ref)
        err = np.where(s < TINY, np.where(diff <= TINY, 0.0, np.inf), diff / s)
    same = (got == ref) | (np.isnan(got) & np.isnan(ref))
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))


# ---- grids -----------------------------------------------------------------------------------

POS = np.unique(np.concatenate([np.geomspace(5e-324, 1.7e308, 240),
                                [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 18.0, 19.0, 20.0, 30.0,
                                 40.0, 100.0, 355.0, 372.0, 700.0, 710.0, 1e3],
                                # (squares that round: the exp(-x*x) partials' hard case)
                                [0.1234567, 1.987654321, 3.3333, 7.77777, 13.1313, 21.212121, 26.5432,
                                 33.3333, 37.777, 100.101, 500.5005]]))
ALL = np.concatenate([-POS[::-1], [0.0], POS])
NEAR1 = 1.0 - 2.0 ** -np.arange(1.0, 54.0)                          # 0.5 ... 1 - 2^-53
UNIT = np.unique(np.concatenate([NEAR1, -NEAR1, POS[POS < 1], -POS[POS < 1], [0.0]]))
PROB = np.unique(np.concatenate([POS[POS < 1], NEAR1]))             # (0, 1)


def _pairs(values):
    v = np.asarray(values, dtype=float)
    a, b = np.meshgrid(v, v)
    return a.ravel(), b.ravel()


MAG2 = [0.0, 1e-310, 1e-200, 1e-10, 0.3, 1.0, 7.0, 1e10, 1e200, 1e307]
PAIRS = _pairs(sorted({s * m for m in MAG2 for s in (1.0, -1.0)}))


def _logaddexp_pairs():
    base = [-1e300, -1e10, -745.0, -1.0, 0.0, 0.7, 30.0, 700.0, 1e10, 1e300]
    dist = [0.0, 1e-300, 1e-12, 1e-6, 0.5, 1.0, 30.0, 700.0, 1e5, 1e20]
    xs, ys = [], []
    for a in base:
        for d in dist:
            for s in (1.0, -1.0):
                xs.append(a)
                ys.append(a + s * d)
    return np.array(xs), np.array(ys)


LSE_X, LSE_Y = _logaddexp_pairs()


# ---- references (mpmath, exact binary arguments) ---------------------------------------------


def mpf(x):
    return mp.mpf(float(x))


def _vec(ref, *arrays):
    """Evaluate the scalar reference ``ref`` (mpf arguments, returns mpf or float) pointwise."""
    arrays = np.broadcast_arrays(*[np.asarray(a, dtype=float) for a in arrays])
    out = np.empty(arrays[0].shape)
    with mp.workdps(40):
        for idx in np.ndindex(out.shape):
            out[idx] = float(ref(*[mpf(a[idx]) for a in arrays]))
    return out


def _sech2(x):
    return 0.0 if abs(x) > 800 else mp.sech(x) ** 2


def _exp(x):
    return INF if x > 710 else 0.0 if x < -746 else mp.exp(x)


def _recip(v):
    return INF if v == 0 else 1 / v


def _sinc_d(x):
    if x == 0:
        return mp.mpf(0)
    if abs(x) < 1e-5:
        p2 = mp.pi ** 2
        return x * (-p2 / 3 + x * x * (p2 * p2 / 30 - x * x * p2 ** 3 / 840))
    return (mp.cospi(x) - mp.sinpi(x) / (mp.pi * x)) / x


def _sinc_scale(x):
    """The amplitude 1/|x| of sinc' beyond its first root (1.43): sinc' has roots, where the
    error is measured in that unit."""
    ax = np.abs(np.asarray(x, dtype=float))
    with np.errstate(all="ignore"):
        return np.where(ax > 1.0, 1.0 / ax, 0.0)


def _lse_share(x, y):
    d = y - x
    if d > 3000:
        return mp.exp(-d)
    if d < -3000:
        return mp.mpf(1)
    return 1 / (1 + mp.exp(d))


def _expit_d(x):
    if abs(x) > 3000:
        return 0.0
    return 1 / ((1 + mp.exp(-x)) * (1 + mp.exp(x)))


def _log_ndtr_d(x):
    if x < -1e6:  # the asymptotic series of the inverse Mills ratio: t / (1 - 1/t^2 + 3/t^4 - ...)
        t = -x
        u = 1 / (t * t)
        return t / (1 - u * (1 - 3 * u * (1 - 5 * u * (1 - 7 * u))))
    if x > 40:
        return mp.npdf(x)
    return mp.npdf(x) / mp.ncdf(x)


def _newton(f, df, y0, target, log=False):
    """The root of f(y) = target near y0 by Newton's method (on log f with ``log``: f > 0)."""
    y = mp.mpf(y0 if np.isfinite(y0) else np.sign(y0) * 27.0)
    for _ in range(8):
        y -= ((mp.log(f(y)) - mp.log(target)) * f(y) if log else f(y) - target) / df(y)
    return y


def _ndtri_d(p):
    if p in (0, 1):
        return INF
    y = _newton(mp.ncdf, mp.npdf, sp.ndtri(float(p)), p, log=True)
    return 1 / mp.npdf(y)


def _erfinv_d(x):
    if abs(x) == 1:
        return INF
    y = _newton(mp.erf, lambda t: 2 / mp.sqrt(mp.pi) * mp.exp(-t * t), sp.erfinv(float(x)), x)
    return mp.sqrt(mp.pi) / 2 * mp.exp(y * y)


def _erfcinv_d(x):
    if x in (0, 2):
        return -INF
    y = _newton(mp.erfc, lambda t: -2 / mp.sqrt(mp.pi) * mp.exp(-t * t), sp.erfcinv(float(x)), x, log=True)
    return -mp.sqrt(mp.pi) / 2 * mp.exp(y * y)


def _rgamma_d(x):
    if x <= 0 and x == int(x):  # 1/gamma is entire: at -n its slope is (-1)^n n!
        n = int(-x)
        return (-1) ** n * mp.factorial(n)
    return -mp.psi(0, x) * mp.rgamma(x)


def _ive_d(v, x):
    """d/dx exp(-|x|) I_v(x) (integer v for x < 0)."""
    if x == 0:
        return mp.mpf(0.5) if v == 1 else mp.mpf(0)
    s = 1 if x > 0 else -1
    if abs(x) > 1e4:  # the large-argument expansion (mpmath's besseli does not converge there)
        t, a, total = abs(x), mp.mpf(1), mp.mpf(0)
        for k in range(40):
            if k:
                a *= (4 * v * v - (2 * k - 1) ** 2) / (8 * k)
            total += (-1) ** (k + 1) * (k + mp.mpf(0.5)) * a / t ** (k + 1)
        return (1 if s > 0 else (-1) ** (int(v) + 1)) * total / mp.sqrt(2 * mp.pi * t)

    def i(n, t):
        return mp.besseli(abs(n) if n == int(n) else n, t)  # (I_-n = I_n for integer n)
    return mp.re(mp.exp(-abs(x)) * ((i(v - 1, x) + i(v + 1, x)) / 2 - s * i(v, x)))


# ---- the cases ---------------------------------------------------------------------------------
#
# (id, fn, argument index, grid (tuple of arrays), reference, rtol, scale): the partial with
# respect to argument ``index`` must agree with ``reference`` to ``rtol`` on the grid.  ``rtol``
# is a few ulp where the formula allows it; exp(-x*x)-type partials (erf, ndtr) carry the
# rounding of x*x, up to |x^2| ulp before they underflow (x^2 < 746: ~1e-13); erfinv, erfcinv
# and ndtri's exp(y*y) carry SciPy's error in y, times 2 y^2 (up to ~1500).

F = 16 * EPS  # "a few ulp"
#: logaddexp's shares are expit(x - y): the rounding of x - y (|x - y| / 2 ulp, and |x - y| < 745
#: before a share underflows) is the only error left (exp(x - out) lost all digits at |out| ~ 1e16)
LSE_TOL = 1e-13
#: hypot's partials a / hypot: at subnormal arguments the forward's hypot itself rounds to a
#: subnormal (0.5 ulp of 5e-324: 2.5e-14 relative at 1e-310)
HYPOT_TOL = 1e-13

CASES = [
    ("numpy.tanh", np.tanh, 0, (np.concatenate([ALL, [18.5, -18.5, 19.5, 25.0, -25.0]]),), _sech2, F, None),
    ("numpy.expm1", np.expm1, 0, (np.concatenate([ALL, [-37.0, -40.0, -745.0, -746.0]]),), _exp, F, None),
    ("numpy.exp", np.exp, 0, (ALL,), _exp, F, None),
    ("numpy.exp2", np.exp2, 0, (ALL,), lambda x: INF if x > 1025 else 0.0 if x < -1080 else mp.ln2 * 2 ** x,
     F, None),
    ("numpy.log", np.log, 0, (POS,), lambda x: 1 / x, F, None),
    ("numpy.log2", np.log2, 0, (POS,), lambda x: 1 / (x * mp.ln2), F, None),
    ("numpy.log10", np.log10, 0, (POS,), lambda x: 1 / (x * mp.ln10), F, None),
    ("numpy.log1p", np.log1p, 0, (np.concatenate([ALL[ALL > -1], NEAR1 - 1.0]),), lambda x: _recip(1 + x),
     F, None),
    ("numpy.sqrt", np.sqrt, 0, (np.concatenate([[0.0], POS]),), lambda x: _recip(2 * mp.sqrt(x)), F, None),
    ("numpy.cbrt", np.cbrt, 0, (ALL,), lambda x: _recip(3 * abs(x) ** (mp.mpf(2) / 3)), F, None),
    ("numpy.reciprocal", np.reciprocal, 0, (ALL[ALL != 0],), lambda x: -1 / x ** 2, F, None),
    ("numpy.sin", np.sin, 0, (ALL,), lambda x: mp.cos(x), F, None),
    ("numpy.cos", np.cos, 0, (ALL,), lambda x: -mp.sin(x), F, None),
    ("numpy.tan", np.tan, 0, (ALL,), lambda x: mp.sec(x) ** 2, F, None),
    ("numpy.arcsin", np.arcsin, 0, (UNIT,), lambda x: 1 / mp.sqrt(1 - x * x), F, None),
    ("numpy.arccos", np.arccos, 0, (UNIT,), lambda x: -1 / mp.sqrt(1 - x * x), F, None),
    ("numpy.arctan", np.arctan, 0, (ALL,), lambda x: 1 / (1 + x * x), F, None),
    ("numpy.sinh", np.sinh, 0, (ALL,), lambda x: INF if abs(x) > 711 else mp.cosh(x), F, None),
    ("numpy.cosh", np.cosh, 0, (ALL,), lambda x: mp.sign(x) * INF if abs(x) > 711 else mp.sinh(x), F, None),
    ("numpy.arcsinh", np.arcsinh, 0, (ALL,), lambda x: 1 / mp.sqrt(1 + x * x), F, None),
    ("numpy.arccosh", np.arccosh, 0, (np.concatenate([[1.0], 1.0 + 2.0 ** -np.arange(1.0, 53.0), POS[POS > 1]]),),
     lambda x: _recip(mp.sqrt(x * x - 1)), F, None),
    ("numpy.arctanh", np.arctanh, 0, (np.concatenate([UNIT, [1.0, -1.0]]),), lambda x: _recip(1 - x * x), F, None),
    ("numpy.sinc", np.sinc, 0,
     (np.concatenate([ALL[np.abs(ALL) < 1e17], [1e-3, -1e-3, 0.01, 0.1, 0.2, 0.25, 0.3, 0.7, 1.43, 2.5, 1e3 + 0.3,
                                               1e6 + 0.25, 2.0 ** 52 + 1, 2.0 ** 53, 1e300]]),),
     _sinc_d, F, _sinc_scale),
    ("numpy.logaddexp[x]", np.logaddexp, 0, (LSE_X, LSE_Y), lambda x, y: _lse_share(x, y), LSE_TOL, None),
    ("numpy.logaddexp[y]", np.logaddexp, 1, (LSE_X, LSE_Y), lambda x, y: _lse_share(y, x), LSE_TOL, None),
    ("numpy.logaddexp2[x]", np.logaddexp2, 0, (LSE_X, LSE_Y), lambda x, y: _lse_share(x * mp.ln2, y * mp.ln2),
     LSE_TOL, None),
    ("numpy.logaddexp2[y]", np.logaddexp2, 1, (LSE_X, LSE_Y), lambda x, y: _lse_share(y * mp.ln2, x * mp.ln2),
     LSE_TOL, None),
    ("numpy.arctan2[y]", np.arctan2, 0, PAIRS, lambda y, x: NAN if x == y == 0 else x / (x * x + y * y), F, None),
    ("numpy.arctan2[x]", np.arctan2, 1, PAIRS, lambda y, x: NAN if x == y == 0 else -y / (x * x + y * y), F, None),
    ("numpy.hypot[x]", np.hypot, 0, PAIRS, lambda x, y: 0 if x == y == 0 else x / mp.hypot(x, y), HYPOT_TOL, None),
    ("numpy.hypot[y]", np.hypot, 1, PAIRS, lambda x, y: 0 if x == y == 0 else y / mp.hypot(x, y), HYPOT_TOL, None),
]

# math.* takes Python floats one at a time (and raises where numpy overflows): its grids are
# the numpy ones restricted to where the forward is defined and finite.
MATH_CASES = [
    ("math.tanh", math.tanh, 0, (ALL,), _sech2, F),
    ("math.expm1", math.expm1, 0, (ALL[ALL < 709],), _exp, F),
    ("math.log2", math.log2, 0, (POS,), lambda x: 1 / (x * mp.ln2), F),
    ("math.log10", math.log10, 0, (POS,), lambda x: 1 / (x * mp.ln10), F),
    ("math.log1p", math.log1p, 0, (np.concatenate([ALL[ALL > -1], NEAR1 - 1.0]),), lambda x: _recip(1 + x), F),
    ("math.sqrt", math.sqrt, 0, (np.concatenate([[0.0], POS]),), lambda x: _recip(2 * mp.sqrt(x)), F),
    ("math.asin", math.asin, 0, (UNIT,), lambda x: 1 / mp.sqrt(1 - x * x), F),
    ("math.acos", math.acos, 0, (UNIT,), lambda x: -1 / mp.sqrt(1 - x * x), F),
    ("math.atan", math.atan, 0, (ALL,), lambda x: 1 / (1 + x * x), F),
    ("math.asinh", math.asinh, 0, (ALL,), lambda x: 1 / mp.sqrt(1 + x * x), F),
    ("math.acosh", math.acosh, 0, (np.concatenate([[1.0], 1.0 + 2.0 ** -np.arange(1.0, 53.0), POS[POS > 1]]),),
     lambda x: _recip(mp.sqrt(x * x - 1)), F),
    ("math.atanh", math.atanh, 0, (UNIT,), lambda x: _recip(1 - x * x), F),
    ("math.atan2[y]", math.atan2, 0, tuple(a[(PAIRS[0] != 0) | (PAIRS[1] != 0)] for a in PAIRS),
     lambda y, x: x / (x * x + y * y), F),
    ("math.atan2[x]", math.atan2, 1, tuple(a[(PAIRS[0] != 0) | (PAIRS[1] != 0)] for a in PAIRS),
     lambda y, x: -y / (x * x + y * y), F),
    ("math.hypot[x]", math.hypot, 0, PAIRS, lambda x, y: 0 if x == y == 0 else x / mp.hypot(x, y), HYPOT_TOL),
    ("math.erf", math.erf, 0, (ALL,), lambda x: 0.0 if abs(x) > 40 else 2 / mp.sqrt(mp.pi) * mp.exp(-x * x), 2e-13),
]
GAMMA_X = np.concatenate([POS[POS < 1e15], [1.4616321449683622, 1.46163214, 0.1, 0.9, 5.5, 11.9, 12.1],
                          -np.array([0.5, 0.504083008264455, 1.3, 1.5, 2.7, 10.3, 99.9, 1e3 + 0.25, 12345.678])])


def _psi_scale(x):
    """psi has roots (x0 = 1.4616..., one in each (-n-1, -n)) where its terms (~1) cancel: below 2
    the error is measured in units of 1."""
    return np.where(np.asarray(x) < 2.0, 1.0, 0.0)


MATH_CASES += [
    ("math.lgamma (digamma)", math.lgamma, 0, (GAMMA_X,), lambda x: mp.psi(0, x), F, _psi_scale),
    ("irad digamma (trigamma)", digamma, 0, (GAMMA_X,), lambda x: mp.psi(1, x), F),
    ("math.gamma", math.gamma, 0, (GAMMA_X[(np.abs(GAMMA_X) < 170) & (np.abs(GAMMA_X) > 1e-300)],),
     lambda x: mp.gamma(x) * mp.psi(0, x), F, lambda x: np.abs(np.vectorize(math.gamma)(x)) * _psi_scale(x)),
]
if hasattr(math, "cbrt"):
    MATH_CASES.append(("math.cbrt", math.cbrt, 0, (ALL,), lambda x: _recip(3 * abs(x) ** (mp.mpf(2) / 3)), F))


def _i1e_scale(x):
    """i1e' has a root near x = 1.5, where its two terms (~i1e) cancel: the error is measured in
    units of i1e(x) / (2 (1 + |x|)) (the size of the derivative away from the root)."""
    with np.errstate(over="ignore"):
        return np.abs(sp.i1e(x)) / (2.0 * (1.0 + np.abs(x)))


#: the ive partials below |x| = max(50, 1.25 v^2) keep the cancellation of ive(v-1) + ive(v+1) - 2 ive(v)
#: (~2|x| times SciPy's error: ~150 ulp at most for v <= 2.5, ~2e4 for v = 10 near x = 100); beyond,
#: the large-argument expansion is a few ulp
IVE_TOL = 1e-13

SPECIAL_CASES = []
if sp is not None:
    SMALL = np.concatenate([-POS[::-1][POS[::-1] < 1e5], [0.0], POS[POS < 1e5]])
    SPECIAL_CASES = [
        ("scipy.special.expit", sp.expit, 0, (ALL,), _expit_d, F, None),
        ("scipy.special.log_expit", sp.log_expit, 0, (ALL,),
         lambda x: (1.0 if x < 0 else 0.0) if abs(x) > 3000 else 1 / (1 + mp.exp(x)), F, None),
        ("scipy.special.logit", sp.logit, 0, (np.concatenate([[0.0, 1.0], PROB]),),
         lambda p: _recip(p * (1 - p)), F, None),
        ("scipy.special.erf", sp.erf, 0, (ALL,), lambda x: 0.0 if abs(x) > 40 else 2 / mp.sqrt(mp.pi) * mp.exp(-x * x),
         2e-13, None),
        ("scipy.special.erfc", sp.erfc, 0, (ALL,),
         lambda x: 0.0 if abs(x) > 40 else -2 / mp.sqrt(mp.pi) * mp.exp(-x * x), 2e-13, None),
        ("scipy.special.ndtr", sp.ndtr, 0, (ALL,), lambda x: 0.0 if abs(x) > 50 else mp.npdf(x), 2e-13, None),
        ("scipy.special.log_ndtr", sp.log_ndtr, 0, (np.concatenate([ALL, [-20.0, -30.0, -37.0, -38.0, -39.0]]),),
         _log_ndtr_d, 2e-13, None),
        ("scipy.special.ndtri", sp.ndtri, 0, (np.concatenate([[0.0, 1.0], PROB]),), _ndtri_d, 2e-12, None),
        ("scipy.special.erfinv", sp.erfinv, 0, (np.concatenate([UNIT, [1.0, -1.0]]),), _erfinv_d, 2e-12, None),
        ("scipy.special.erfcinv", sp.erfcinv, 0, (np.concatenate([PROB, 2 - PROB, [0.0, 2.0]]),), _erfcinv_d,
         2e-12, None),
        ("scipy.special.rgamma", sp.rgamma, 0,
         (np.concatenate([[0.0, -1.0, -2.0, -3.0, -10.0, -1e-300, 1e-300, -2.5, -0.5, 0.5], SMALL[SMALL > -170]]),),
         _rgamma_d, 1e-12, None),
        ("scipy.special.xlogy[x]", sp.xlogy, 0, tuple(np.abs(a) for a in PAIRS),
         lambda x, y: -INF if y == 0 else mp.log(y), F, None),
        ("scipy.special.xlogy[y]", sp.xlogy, 1, tuple(np.abs(a) for a in PAIRS),
         lambda x, y: 0 if x == 0 else INF if y == 0 else x / y, F, None),
        ("scipy.special.xlog1py[y]", sp.xlog1py, 1,
         (np.abs(PAIRS[0]), np.abs(PAIRS[1]) - 1.0), lambda x, y: 0 if x == 0 else _recip(1 + y) * x, F, None),
        ("scipy.special.i0e", sp.i0e, 0, (ALL,), lambda x: _ive_d(0, x), IVE_TOL, None),
        ("scipy.special.i1e", sp.i1e, 0, (ALL,), lambda x: _ive_d(1, x), IVE_TOL, _i1e_scale),
    ]
    ON = POS[(POS > 1e-150) & (POS < 1e9)]  # (SciPy's ive is NaN beyond ~1.07e9 and flushes tiny values)
    for v, tol in ((0.0, IVE_TOL), (1.0, IVE_TOL), (2.0, IVE_TOL), (2.5, IVE_TOL), (10.0, 100 * IVE_TOL)):
        SPECIAL_CASES.append((f"scipy.special.ive[v={v}]", sp.ive, 1,
                              (np.full(ON.shape, v), ON), lambda v, x: _ive_d(v, x), tol, None))


def worst(case):
    name, fn, i, grid, ref, rtol, scale = case
    got = partial(fn, i, *grid)
    want = _vec(ref, *grid)
    sc = None if scale is None else scale(*grid)
    err = rel_err(got, want, sc)
    k = int(np.argmax(err))
    return float(err[k]), tuple(float(np.ravel(np.broadcast_to(a, err.shape))[k]) for a in grid), got, want


def _math_partial(fn, i, p):
    try:
        return float(partial(fn, i, *p))
    except (ArithmeticError, ValueError):  # (ZeroDivisionError, OverflowError: an error is a wrong answer)
        return NAN


def worst_math(case):
    name, fn, i, grid, ref, rtol, *scale = case
    pts = list(zip(*[np.asarray(a, dtype=float).tolist() for a in grid]))
    got = np.array([_math_partial(fn, i, p) for p in pts])
    want = _vec(ref, *grid)
    err = rel_err(got, want, scale[0](*grid) if scale else None)
    k = int(np.argmax(err))
    return float(err[k]), pts[k], got, want


@needs_mp
@pytest.mark.parametrize("case", CASES + SPECIAL_CASES, ids=[c[0] for c in CASES + SPECIAL_CASES])
def test_partial_matches_high_precision_reference(case):
    err, at, _, _ = worst(case)
    assert err <= case[5], f"{case[0]}: relative error {err:.3g} at {at}"


@needs_mp
@pytest.mark.parametrize("case", MATH_CASES, ids=[c[0] for c in MATH_CASES])
def test_math_partial_matches_high_precision_reference(case):
    err, at, _, _ = worst_math(case)
    assert err <= case[5], f"{case[0]}: relative error {err:.3g} at {at}"


# ---- the requirement, without mpmath -------------------------------------------------


@pytest.mark.parametrize("x", [20.0, -20.0, 30.0, -30.0, 18.0, 5.0, 0.5])
def test_tanh_pullback_at_saturation(x):
    """tanh at +-20, +-30 agrees with 1/cosh(x)**2 to 1e-12 relative (the compiled gradient, the
    rule's pullback, math.tanh's and a complex input's)."""
    want = 1.0 / np.cosh(x) ** 2
    got = irad.grad(lambda v: np.sum(np.tanh(v)))(np.array([x]))[0]
    assert abs(got - want) <= 1e-12 * want
    assert abs(partial(np.tanh, 0, np.array(x)) - want) <= 1e-12 * want
    assert abs(partial(math.tanh, 0, x) - want) <= 1e-12 * want
    assert abs(irad.grad(math.tanh)(x) - want) <= 1e-12 * want
    z = np.array([x + 0.0j])
    assert abs(partial(np.tanh, 0, z)[0] - want) <= 1e-12 * want


# ---- special values --------------------------------------------------------------------------


def _same(got, want):
    """Equal, both NaN, or within a few ulp and the smallest normal float (a 0 may come out as
    ~1e-308, a 1 as 1 - 2^-53)."""
    got, want = np.asarray(got, dtype=complex), np.asarray(want, dtype=complex)
    with np.errstate(invalid="ignore"):
        ok = (got == want) | (np.isnan(got) & np.isnan(want)) | (np.abs(got - want) <= 4 * EPS * np.abs(want) + TINY)
    assert ok.all(), f"got {got}, want {want}"


SPECIAL_VALUES = [
    (np.tanh, (np.array([0.0, -0.0, INF, -INF, NAN]),), [(1.0, 1.0, 0.0, 0.0, NAN)]),
    (np.expm1, (np.array([0.0, -INF, INF, NAN]),), [(1.0, 0.0, INF, NAN)]),
    (np.arcsinh, (np.array([0.0, INF, -INF, NAN]),), [(1.0, 0.0, 0.0, NAN)]),
    (np.arctanh, (np.array([1.0, -1.0, 0.0]),), [(INF, INF, 1.0)]),
    (np.arcsin, (np.array([1.0, -1.0]),), [(INF, INF)]),
    (np.arccosh, (np.array([1.0, INF]),), [(INF, 0.0)]),
    (np.sinc, (np.array([0.0, -0.0, 1.0, -2.0, NAN]),), [(0.0, 0.0, -1.0, -0.5, NAN)]),
    (np.sqrt, (np.array([0.0, INF]),), [(INF, 0.0)]),                       # inf: the true slope at 0
    (np.cbrt, (np.array([0.0, -0.0]),), [(INF, INF)]),
    # (equal infinities: NaN, as before; exp(x - out) was NaN at every infinite x)
    (np.logaddexp, (np.array([INF, -INF, INF, -INF, 1.0, INF, NAN, 3.0]),
                    np.array([INF, -INF, 1.0, 1.0, -INF, -INF, 0.0, 3.0])),
     [(NAN, NAN, 1.0, 0.0, 1.0, 1.0, NAN, 0.5), (NAN, NAN, 0.0, 1.0, 0.0, 0.0, NAN, 0.5)]),
    (np.logaddexp2, (np.array([INF, -INF, 3.0, 1e300]), np.array([1.0, 1.0, 3.0, 1e300])),
     [(1.0, 0.0, 0.5, 0.5), (0.0, 1.0, 0.5, 0.5)]),
    (np.hypot, (np.array([0.0, -0.0, 3.0]), np.array([0.0, 0.0, 0.0])), [(0.0, 0.0, 1.0), (0.0, 0.0, 0.0)]),
]
if sp is not None:
    SPECIAL_VALUES += [
        (sp.expit, (np.array([0.0, INF, -INF, NAN]),), [(0.25, 0.0, 0.0, NAN)]),
        (sp.log_ndtr, (np.array([-INF, INF, 0.0, NAN]),), [(INF, 0.0, np.sqrt(2 / np.pi), NAN)]),
        (sp.rgamma, (np.array([0.0, -0.0, -1.0, -2.0, -3.0]),), [(1.0, 1.0, -1.0, 2.0, -6.0)]),
        (sp.xlogy, (np.array([0.0, 0.0, 2.0]), np.array([0.0, 3.0, 0.0])), [(-INF, np.log(3.0), -INF),
                                                                          (0.0, 0.0, INF)]),
        (sp.xlog1py, (np.array([0.0, 0.0]), np.array([-1.0, 3.0])), [(-INF, np.log(4.0)), (0.0, 0.0)]),
        (sp.i0e, (np.array([0.0, INF, -INF]),), [(0.0, 0.0, 0.0)]),
        (sp.i1e, (np.array([0.0, INF, -INF]),), [(0.5, 0.0, 0.0)]),
    ]


@pytest.mark.parametrize("fn,args,want", SPECIAL_VALUES, ids=[registry.qualname(c[0]) for c in SPECIAL_VALUES])
def test_special_values(fn, args, want):
    got = partials(fn, *args)
    for g, w in zip(got, want):
        _same(g, w)


def test_math_at_the_edges_of_the_domain():
    """math.* partials at 0 or a branch point give the true (infinite) slope, not ZeroDivisionError."""
    assert partial(math.sqrt, 0, 0.0) == INF
    assert partial(math.asin, 0, 1.0) == INF
    assert partial(math.acos, 0, -1.0) == -INF
    assert partial(math.acosh, 0, 1.0) == INF
    assert partials(math.hypot, 0.0, 0.0) == (0.0, 0.0)
    assert partials(math.hypot, 0.0, 0.0, 0.0) == (0.0, 0.0, 0.0)
    assert partial(math.tanh, 0, 1e3) == 0.0 and partial(math.tanh, 0, -INF) == 0.0
    assert partial(math.expm1, 0, -1e3) == 0.0
    with np.errstate(divide="ignore"):   # (1/0: numpy's inf, and its warning)
        for fn, x in ((math.sqrt, 0.0), (math.asin, 1.0)):
            assert irad.grad(fn)(x) == partial(fn, 0, x)
    if hasattr(math, "cbrt"):
        assert partial(math.cbrt, 0, 0.0) == INF


def test_norm_at_zero_is_a_finite_subgradient():
    """The 2-norm (and Frobenius norm) at a zero vector: 0, not nan (it is a kink there)."""
    for f in (lambda x: np.linalg.norm(x), lambda x: np.linalg.norm(x, 2), lambda x: np.linalg.norm(x, 1),
              lambda x: np.sum(np.linalg.norm(x.reshape(2, 2), axis=1)),
              lambda x: np.linalg.norm(x.reshape(2, 2), "fro"), lambda x: np.linalg.norm(x, 3.0)):
        g = irad.grad(f)(np.zeros(4))
        assert np.array_equal(g, np.zeros(4)), g


# ---- complex inputs keep the holomorphic formulas --------------------------------------------


def _complex_derivative(f, z, h=1e-6):
    return (f(z + h) - f(z - h)) / (2 * h)


COMPLEX = [np.tanh, np.tan, np.arcsin, np.arccos, np.arctan, np.arcsinh, np.arccosh, np.arctanh, np.expm1,
           np.log2, np.log10, np.sinc]


@pytest.mark.parametrize("fn", COMPLEX, ids=[registry.qualname(f) for f in COMPLEX])
def test_complex_partials_are_the_holomorphic_derivative(fn):
    z = np.array([0.3 + 0.4j, -1.7 + 0.2j, 2.5 - 1.5j, 0.1 - 3.0j, -0.6 - 0.9j])
    if fn is np.sinc:
        z = np.concatenate([z, [1e-3 + 1e-3j]])
    got = partial(fn, 0, z)
    want = _complex_derivative(fn, z)
    assert np.allclose(got, want, rtol=1e-7, atol=1e-9), (got, want)


def test_complex_tan_and_tanh_far_from_the_real_axis():
    """tan(x + iy) for large |y| (tan -> +-i: 1 + tan^2 cancels); tanh likewise for large |x|."""
    z = np.array([0.3 + 20.0j, -1.0 - 30.0j])
    want = 1.0 / np.cos(z) ** 2
    got = partial(np.tan, 0, z)
    assert np.all(np.abs(got - want) <= 1e-12 * np.abs(want)), (got, want)
    w = np.array([20.0 + 0.3j, -30.0 - 1.0j])
    want = 1.0 / np.cosh(w) ** 2
    got = partial(np.tanh, 0, w)
    assert np.all(np.abs(got - want) <= 1e-12 * np.abs(want)), (got, want)


# ---- the new formulas are differentiable (second order) where their branches switch ---------


HARD_ORDER2 = [
    (np.tanh, np.array([0.0, 0.3, -2.0, 25.0])),
    (np.sinc, np.array([0.0, 0.05, -0.2, 0.3, 1.5, 1e3 + 0.25])),
    (np.arcsinh, np.array([0.5, -3.0, 1e3])),
    (np.arccosh, np.array([1.5, 3.0, 1e3])),
    (np.arctanh, np.array([0.5, -0.9, 0.999])),
    (np.arcsin, np.array([0.5, -0.9, 0.99])),
    (np.arccos, np.array([0.5, -0.9, 0.99])),
    (np.expm1, np.array([-40.0, 0.3, 2.0])),
    (np.logaddexp, np.array([0.5, -3.0, 2.0, 1.0]), np.array([0.5, 1.0, -30.0, 1.0])),
    (np.logaddexp2, np.array([0.5, -3.0, 2.0]), np.array([0.5, 1.0, -30.0])),
    (np.hypot, np.array([0.5, -3.0, 1e-3]), np.array([0.2, 1.0, 2.0])),
    (np.arctan2, np.array([0.5, -3.0, 1e-3]), np.array([0.2, 1.0, -2.0])),
]
if sp is not None:
    HARD_ORDER2 += [
        (sp.expit, np.array([0.0, 3.0, -3.0, 40.0])),
        (sp.log_ndtr, np.array([-30.0, -50.0, -3.0, 0.5, 3.0])),
        (sp.i0e, np.array([0.3, -2.0, 150.0, -300.0])),
        (sp.i1e, np.array([0.3, -2.0, 150.0, -300.0])),
        (sp.ive, np.array([0.5, 2.0, 1.0, 3.0]), np.array([0.3, 200.0, -300.0, 150.0])),
        (sp.rgamma, np.array([0.3, 2.5, -0.5])),
        (sp.xlogy, np.array([0.5, 2.0]), np.array([0.5, 3.0])),
        (sp.xlog1py, np.array([0.5, 2.0]), np.array([0.5, 3.0])),
    ]


@pytest.mark.parametrize("case", HARD_ORDER2, ids=[registry.qualname(c[0]) for c in HARD_ORDER2])
def test_first_and_second_order_at_hard_points(case):
    fn, *args = case
    opts = {"wrt": (1,)} if sp is not None and fn is sp.ive else {}
    check_rule(fn, *args, **opts)
    check_rule(fn, *args, order=2, rtol=1e-4, atol=1e-6, **opts)


MATH_ORDER2 = [(math.tanh, 0.3), (math.tanh, 25.0), (math.expm1, -3.0), (math.asinh, 1e3), (math.acosh, 1.5),
               (math.atanh, 0.9), (math.asin, 0.99), (math.acos, -0.5), (math.log10, 3.0), (math.log2, 0.3),
               (math.sqrt, 2.0), (math.atan2, 0.3, -2.0), (math.hypot, 0.5, 1.2)]


@pytest.mark.parametrize("case", MATH_ORDER2, ids=[f"{c[0].__name__}{c[1:]}" for c in MATH_ORDER2])
def test_math_first_and_second_order(case):
    fn, *args = case
    check_rule(fn, *args)
    check_rule(fn, *args, order=2, rtol=1e-4, atol=1e-6)


# ---- report ------------------------------------------------------------------------------------


def report() -> None:  # pragma: no cover - a script
    for case in CASES + SPECIAL_CASES:
        err, at, _, _ = worst(case)
        print(f"{case[0]:32s} worst {err:10.3g} at {at}")
    for case in MATH_CASES:
        err, at, _, _ = worst_math(case)
        print(f"{case[0]:32s} worst {err:10.3g} at {at}")


if __name__ == "__main__":  # pragma: no cover
    report()
