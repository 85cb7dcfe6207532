"""Rules for SciPy (optional): scipy.special, scipy.stats distributions, scipy.linalg, scipy.signal.

Importing this module never imports SciPy.  Each part registers through
``registry.when_imported``: the rules for ``scipy.special`` are registered the first time irad
looks up a rule after the program has imported ``scipy.special`` (likewise ``scipy.stats``,
``scipy.linalg``, ``scipy.signal``), so ``import irad`` stays fast and works without SciPy.

scipy.special's functions are numpy ufuncs: their arguments are positional (ufuncs take no
keyword inputs), so every argument can carry a cotangent.  Orders of Bessel functions and the
``n`` of ``polygamma`` get none: ``n`` is discrete (``None``, no tangent; also the integer orders
of ``yn``, ``kn``); a real Bessel order raises ``GradError`` when differentiated
(``NotImplemented``), rather than HIPS autograd's silent 0, as do ``betainc``'s ``a``, ``b`` and
``stdtr``'s ``df``.  ``gammainc``'s ``a`` is differentiated through ``gammainc_da`` (below).

scipy.stats distributions are instances (``scipy.stats.norm``) whose methods are shared by all
distributions (``rv_continuous.logpdf``): the rules are registered with ``types=`` on ``self``
so that each applies to one distribution only, and with ``params`` naming the shape, ``loc``
and ``scale`` parameters so that ``norm.logpdf(x, loc=m, scale=s)`` with differentiated ``m``
or ``s`` works like the positional call.  Other distributions, and frozen ones
(``norm(m, s).logpdf(x)``), have no rule: irad traces into SciPy's Python code and stops at the
first C function without a rule.
"""
from __future__ import annotations

import importlib.util
import math
from typing import Any, Callable

import numpy as np

from ._common import Table, cj, expand_reduced, options, unreduce
from .numpy_rules import _EXP_CAP, _clip
from .registry import when_imported
from ..errors import NoRuleError

T = Table(__name__)

special: Any = None
stats: Any = None
linalg: Any = None
signal: Any = None

_HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)
_EPS = float(np.finfo(float).eps)


# ---- scipy.special: elementwise ----------------------------------------------------------------


#: Bessel orders: differentiable in principle, not implemented: differentiating w.r.t. one raises
_ORDER = "order v: GradError if differentiated"


# ---- partials in forms accurate over the whole domain (issue 14: tests/test_rule_precision.py) --
#
# As in numpy_rules: where the textbook partial saturates or cancels, a form that stays within a
# few ulp; a branch np.where discards only sees arguments on which it is finite (so that its
# derivative, at second order, is 0 rather than NaN).

#: phi(x)/Phi(x) = t / S(1/t^2) for t = -x > 20, S(u) = sum_k (-1)^k (2k - 1)!! u^k (10 terms)
_MILLS_C = tuple((-1) ** k * float(math.prod(range(1, 2 * k, 2))) for k in range(11))


def _log_ndtr_d(x: Any, y: Any) -> Any:
    """d log Phi(x) = phi(x)/Phi(x) = exp(log phi(x) - y).  For x << 0 both logs are ~ -x^2/2 and
    the difference keeps only the digits below their ulp (relative error ~x^2 eps: all of them
    by x ~ -1e8, NaN at -inf): x < -20 takes the asymptotic series of the inverse Mills ratio."""
    if np.iscomplexobj(x):
        return np.exp(-0.5 * x * x - _HALF_LOG_2PI - y)
    far = np.less(x, -20.0)
    xn = np.where(far, 0.0, np.minimum(x, 40.0))   # (beyond 40 the result has underflowed: no overflow)
    near = np.exp(-0.5 * xn * xn - _HALF_LOG_2PI - np.where(far, 0.0, y))
    t = np.where(far, -x, 20.0)
    u = np.square(1.0 / t)
    p = _MILLS_C[-1]
    for c in reversed(_MILLS_C[:-1]):
        p = p * u + c
    return np.where(far, t / p, near)


_EULER = 0.5772156649015329


def _rgamma_d(x: Any, y: Any) -> Any:
    """d/dx 1/gamma(x) = -psi(x) y, which is 0 * inf at the poles of gamma (x = 0, -1, -2, ...),
    where the entire function 1/gamma has slope (-1)^n n!, and inf * 0 for subnormal x (psi
    overflows): there 1/gamma(x) = x + euler x^2 + O(x^3)."""
    if np.iscomplexobj(x):
        return -y * special.digamma(x)
    tiny = np.less(np.abs(x), 1e-300)
    pole = np.logical_and(np.equal(y, 0), np.less(x, -0.5))
    xr = np.where(np.logical_or(pole, tiny), 0.5, x)
    xp = np.where(pole, x, 0.0)
    return np.where(tiny, 1.0 + (2.0 * _EULER) * x,
                    np.where(pole, (1.0 - 2.0 * np.remainder(xp, 2.0)) * special.gamma(1.0 - xp),
                             -y * special.digamma(xr)))


#: |x| beyond which the ive partials take the large-argument expansion (and 1.25 v^2 for order v)
_IVE_FAR = 50.0
_IVE_TERMS = 16


def _ive_far(v: Any, t: Any) -> Any:
    """d/dt exp(-t) I_v(t) for t > max(50, 1.25 v^2): the large-argument expansion of I_v,
    differentiated: (2 pi t)^-1/2 sum_k (-1)^(k+1) (k + 1/2) a_k(v) t^-(k+1), a_0 = 1,
    a_k = a_(k-1) (4 v^2 - (2k - 1)^2) / (8k) (16 terms: a few ulp there)."""
    w = 1.0 / t
    if isinstance(v, (int, float)):  # (a constant order: Horner in 1/t)
        a, coef = 1.0, [-0.5]
        for k in range(1, _IVE_TERMS):
            a *= (4.0 * v * v - (2 * k - 1) ** 2) / (8 * k)
            coef.append((-1) ** (k + 1) * (k + 0.5) * a)
        p = coef[-1]
        for c in reversed(coef[:-1]):
            p = p * w + c
        total = p * w
    else:
        mu = 4.0 * v * v
        a, wk = 1.0, w
        total = -0.5 * w
        for k in range(1, _IVE_TERMS):
            a = a * ((mu - (2 * k - 1) ** 2) / (8 * k))
            wk = wk * w
            total = total + ((-1) ** (k + 1) * (k + 0.5)) * a * wk
    return total / np.sqrt((2.0 * np.pi) * t)


def _i0e_d(x: Any, y: Any) -> Any:
    """i0e' = i1e - sign(x) i0e: the two cancel for large |x| (the result is ~ -sign(x) y/(2|x|):
    |x| ulp lost), so |x| > 50 takes the large-argument expansion."""
    if np.iscomplexobj(x):
        return special.i1e(x) - np.sign(x) * y
    t = np.abs(x)
    far = np.greater(t, _IVE_FAR)
    return np.where(far, np.sign(x) * _ive_far(0.0, np.where(far, t, _IVE_FAR)),
                    special.i1e(x) - np.sign(x) * y)


def _i1e_d(x: Any, y: Any) -> Any:
    """i1e' = (i0e + ive(2, x))/2 - sign(x) i1e, which cancels like i0e's (and SciPy's ive is NaN
    beyond |x| ~ 1e9): |x| > 50 takes the large-argument expansion (an even function)."""
    if np.iscomplexobj(x):
        return 0.5 * (special.i0e(x) + special.ive(2, x)) - np.sign(x) * y
    t = np.abs(x)
    far = np.greater(t, _IVE_FAR)
    xn = np.where(far, 1.0, x)
    return np.where(far, _ive_far(1.0, np.where(far, t, _IVE_FAR)),
                    0.5 * (special.i0e(xn) + special.ive(2, xn)) - np.sign(xn) * y)


def _ive_d(v: Any, x: Any, y: Any) -> Any:
    """d/dx ive(v, x) = (ive(v - 1, x) + ive(v + 1, x))/2 - sign(x) ive(v, x), which cancels for
    large |x|: beyond max(50, 1.25 v^2) the large-argument expansion, times (-1)^(v+1) for x < 0
    (integer v; NaN, like ive itself, for another v)."""
    if np.iscomplexobj(x):
        return 0.5 * (special.ive(v - 1, x) + special.ive(v + 1, x)) - np.sign(x) * y
    t = np.abs(x)
    far = np.greater(t, np.maximum(_IVE_FAR, 1.25 * v * v))
    xn = np.where(far, 1.0, x)
    tf = np.where(far, t, 1e6)
    sgn = np.where(np.less(x, 0), -np.cos(np.pi * v), 1.0)
    near = 0.5 * (special.ive(v - 1, xn) + special.ive(v + 1, xn)) - np.sign(xn) * y
    return np.where(far, sgn * _ive_far(v, tf) + 0.0 * y, near)


def _expit_d(x: Any) -> Any:
    """expit' = 1/(2 + 2 cosh(x)), to a few ulp: the textbook y (1 - y) is 0 for x > 37 (y rounds
    to 1) where the true value is ~e^-x.  x is clipped where cosh would overflow (beyond, the
    slope stays at ~e^-709 ~ 1e-308, below the normal range, instead of going to 0)."""
    cap = _EXP_CAP.get(np.result_type(x), 709.0)
    return 0.5 / (1.0 + np.cosh(_clip(x, -cap, cap)))


def _over_safe(x: Any, d: Any, zero: Any) -> Any:
    """x / d, and 0 where ``zero`` (xlogy(0, y) = 0 for every y: its y-slope is 0 there, y = 0 too)."""
    return x / np.where(zero, 1.0, d)


def _load_special() -> None:
    global special
    import scipy.special as sp
    special = sp
    s = T.scalar
    s(sp.gamma, lambda x, y: y * sp.digamma(x))
    s(sp.gammaln, lambda x: sp.digamma(x), note="log of abs(gamma) for negative x")
    s(sp.rgamma, _rgamma_d)
    s(sp.digamma, lambda x: sp.polygamma(1, x), note="also scipy.special.digamma")
    s(sp.polygamma, None, lambda n, x: sp.polygamma(n + 1, x), note="n gets no cotangent")
    s(sp.multigammaln, lambda a, d: np.sum(sp.digamma(np.expand_dims(a, -1) - 0.5 * np.arange(d)), -1),
      None, note="d is static")
    s(sp.beta, lambda a, b, y: y * (sp.digamma(a) - sp.digamma(a + b)),
      lambda a, b, y: y * (sp.digamma(b) - sp.digamma(a + b)))
    s(sp.betaln, lambda a, b: sp.digamma(a) - sp.digamma(a + b),
      lambda a, b: sp.digamma(b) - sp.digamma(a + b))
    s(sp.erf, lambda x: (2.0 / np.sqrt(np.pi)) * np.exp(-x * x))
    s(sp.erfc, lambda x: (-2.0 / np.sqrt(np.pi)) * np.exp(-x * x))
    s(sp.erfinv, lambda x, y: (0.5 * np.sqrt(np.pi)) * np.exp(y * y))
    s(sp.erfcinv, lambda x, y: (-0.5 * np.sqrt(np.pi)) * np.exp(y * y))
    s(sp.ndtr, lambda x: np.exp(-0.5 * x * x - _HALF_LOG_2PI))
    s(sp.log_ndtr, _log_ndtr_d)
    s(sp.ndtri, lambda p, y: np.exp(0.5 * y * y + _HALF_LOG_2PI))
    s(sp.expit, _expit_d)
    s(sp.logit, lambda x: 1.0 / (x * (1.0 - x)))
    s(getattr(sp, "log_expit", None), lambda x: sp.expit(-x))
    s(sp.xlogy, lambda x, y: np.log(y), lambda x, y: _over_safe(x, y, np.logical_and(np.equal(x, 0), np.equal(y, 0))),
      note="x = 0 gives log(y)")
    s(sp.xlog1py, lambda x, y: np.log1p(y),
      lambda x, y: _over_safe(x, 1.0 + y, np.logical_and(np.equal(x, 0), np.equal(y, -1))))
    s(sp.i0, lambda x: sp.i1(x))
    s(sp.i1, lambda x: 0.5 * (sp.i0(x) + sp.iv(2, x)))
    s(sp.i0e, _i0e_d)
    s(sp.i1e, _i1e_d)
    s(sp.j0, lambda x: -sp.j1(x))
    s(sp.j1, lambda x: 0.5 * (sp.j0(x) - sp.jv(2, x)))
    s(sp.y0, lambda x: -sp.y1(x))
    s(sp.y1, lambda x: 0.5 * (sp.y0(x) - sp.yv(2, x)))
    s(sp.iv, NotImplemented, lambda v, x: 0.5 * (sp.iv(v - 1, x) + sp.iv(v + 1, x)), note=_ORDER)
    s(sp.ive, NotImplemented, _ive_d, note=_ORDER)
    s(sp.jv, NotImplemented, lambda v, x: 0.5 * (sp.jv(v - 1, x) - sp.jv(v + 1, x)),
      note=_ORDER + "; also scipy.special.jn")
    s(sp.yv, NotImplemented, lambda v, x: 0.5 * (sp.yv(v - 1, x) - sp.yv(v + 1, x)), note=_ORDER)
    s(sp.kv, NotImplemented, lambda v, x: -0.5 * (sp.kv(v - 1, x) + sp.kv(v + 1, x)), note=_ORDER)
    T.rule(sp.logsumexp, logsumexp_fwd, logsumexp_pullback, "axis, b (positional or keyword), keepdims",
           params=("a", ("axis", None), ("b", None)))
    T.rule(sp.softmax, softmax_fwd, softmax_pullback, "axis")
    T.rule(sp.log_softmax, log_softmax_fwd, log_softmax_pullback, "axis")
    T.nograd(sp.gammasgn)
    # autograd's surface (issue 14): incomplete gamma and beta, t and chi-square cdfs, integer
    # Bessel orders, more of the error-function family (complex too)
    s(sp.gammainc, lambda a, x: gammainc_da(1, a, x), lambda a, x: gammainc_dens_da(0, a, x),
      note="a too: series / continued fraction (gammainc_da)")
    s(sp.gammaincc, lambda a, x: -gammainc_da(1, a, x), lambda a, x: -gammainc_dens_da(0, a, x),
      note="a too: series / continued fraction (gammainc_da)")
    s(gammainc_da, None, lambda n, a, x: gammainc_da(n + 1, a, x), lambda n, a, x: gammainc_dens_da(n, a, x),
      note="d^n/da^n gammainc, what gammainc's pullback calls: every order")
    s(sp.betainc, NotImplemented, NotImplemented, lambda a, b, x: _beta_dens(a, b, x),
      note="x only: a, b GradError")
    s(getattr(sp, "betaincc", None), NotImplemented, NotImplemented, lambda a, b, x: -_beta_dens(a, b, x),
      note="x only: a, b GradError")
    s(sp.stdtr, NotImplemented, lambda df, t: np.exp(_t_logpdf(df, t)), note="t only: df GradError")
    s(sp.chdtr, lambda v, x: 0.5 * gammainc_da(1, 0.5 * v, 0.5 * x),
      lambda v, x: 0.5 * gammainc_dens_da(0, 0.5 * v, 0.5 * x), note="v too (gammainc_da)")
    s(sp.chdtrc, lambda v, x: -0.5 * gammainc_da(1, 0.5 * v, 0.5 * x),
      lambda v, x: -0.5 * gammainc_dens_da(0, 0.5 * v, 0.5 * x), note="v too (gammainc_da)")
    s(sp.yn, None, lambda n, x: 0.5 * (sp.yn(n - 1, x) - sp.yn(n + 1, x)), note="integer order n: no cotangent")
    s(sp.kn, None, lambda n, x: -0.5 * (sp.kn(n - 1, x) + sp.kn(n + 1, x)), note="integer order n: no cotangent")
    s(sp.erfcx, _erfcx_d, note="complex too")
    s(sp.erfi, lambda x: (2.0 / np.sqrt(np.pi)) * np.exp(x * x), note="complex too")
    s(sp.dawsn, _dawsn_d, note="complex too")
    s(sp.wofz, lambda z, y: 2.0j / np.sqrt(np.pi) - 2.0 * z * y, note="complex")


# ---- scipy.special: reductions ---------------------------------------------------------------


def logsumexp_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("axis", "b", "keepdims", "return_sign"), axis=None, b=None, keepdims=False,
                return_sign=False)
    if o["return_sign"]:
        raise NoRuleError("irad: scipy.special.logsumexp(return_sign=True) has no rule")
    y = special.logsumexp(a, *args, **kw)
    b = o["b"]
    scalar = np.ndim(a) == 0 and np.ndim(b) == 0  # SciPy reduces a scalar as a 1-element array
    if scalar:
        a, y = np.reshape(a, (1,)), np.reshape(y, (1,) if np.ndim(y) or o["keepdims"] else ())
    return y, (a, b, y, o["axis"], bool(o["keepdims"]), len(args) >= 2, 1 + len(args), scalar)


def logsumexp_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """y = log sum(b exp(a)): a gets g b exp(a - y), b gets g exp(a - y)."""
    a, b, y, axis, keepdims, bpos, n, scalar = s
    if scalar:
        g = np.reshape(g, np.shape(y))
    shape = np.shape(a) if b is None else np.broadcast_shapes(np.shape(a), np.shape(b))
    w = np.exp(a - expand_reduced(y, shape, axis, keepdims))
    ge = unreduce(g, shape, axis, keepdims)
    out: list[Any] = [ge * w if b is None else ge * w * b] + [None] * (n - 1)
    if bpos:
        out[2] = ge * w
    if scalar:
        out = [None if c is None else np.reshape(np.sum(c), ()) for c in out]
    return tuple(out)


def softmax_fwd(x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("axis",), axis=None)
    y = special.softmax(x, *args, **kw)
    return y, (y, o["axis"])


def softmax_pullback(s: Any, g: Any) -> tuple[Any]:
    """x gets y (g - sum(g y))."""
    y, axis = s
    return (y * (g - np.sum(g * y, axis=axis, keepdims=True)),)


def log_softmax_fwd(x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("axis",), axis=None)
    y = special.log_softmax(x, *args, **kw)
    return y, (y, o["axis"])


def log_softmax_pullback(s: Any, g: Any) -> tuple[Any]:
    """x gets g - exp(y) sum(g)."""
    y, axis = s
    return (g - np.exp(y) * np.sum(g, axis=axis, keepdims=True),)


# ---- scipy.stats -----------------------------------------------------------------------------
#
# One fwd per method (it calls the method); the pullback asks the distribution's gradient
# function for d logpdf / d(x, parameters...) and scales it: logpdf by g, pdf by g * pdf.
# The state records which distribution, so one pullback serves them all.


def _norm_dlogpdf(x: Any, loc: Any, scale: Any) -> tuple[Any, ...]:
    z = (x - loc) / scale
    return -z / scale, z / scale, (z * z - 1.0) / scale


def _t_dlogpdf(x: Any, df: Any, loc: Any, scale: Any) -> tuple[Any, ...]:
    z = (x - loc) / scale
    dz = -(df + 1.0) * z / (df + z * z)
    ddf = 0.5 * (special.digamma(0.5 * (df + 1.0)) - special.digamma(0.5 * df) - 1.0 / df
                 - np.log1p(z * z / df) + (df + 1.0) * z * z / (df * (df + z * z)))
    return dz / scale, ddf, -dz / scale, (-dz * z - 1.0) / scale


def _gamma_dlogpdf(x: Any, a: Any, loc: Any, scale: Any) -> tuple[Any, ...]:
    z = (x - loc) / scale
    dz = (a - 1.0) / z - 1.0
    return dz / scale, np.log(z) - special.digamma(a), -dz / scale, (-dz * z - 1.0) / scale


def _beta_dlogpdf(x: Any, a: Any, b: Any, loc: Any, scale: Any) -> tuple[Any, ...]:
    z = (x - loc) / scale
    dz = (a - 1.0) / z - (b - 1.0) / (1.0 - z)
    dab = special.digamma(a + b)
    return (dz / scale, np.log(z) - special.digamma(a) + dab, np.log1p(-z) - special.digamma(b) + dab,
            -dz / scale, (-dz * z - 1.0) / scale)


def _poisson_dlogpmf(k: Any, mu: Any, loc: Any) -> tuple[Any, ...]:
    return None, (k - loc) / mu - 1.0, None


_DLOGPDF: dict[str, Callable[..., tuple[Any, ...]]] = {
    "norm": _norm_dlogpdf, "t": _t_dlogpdf, "gamma": _gamma_dlogpdf, "beta": _beta_dlogpdf,
    "poisson": _poisson_dlogpmf, "erlang": _gamma_dlogpdf}
_PARAMS = {"norm": (("loc", 0.0), ("scale", 1.0)),
           "t": (("df",), ("loc", 0.0), ("scale", 1.0)),
           "gamma": (("a",), ("loc", 0.0), ("scale", 1.0)),
           "beta": (("a",), ("b",), ("loc", 0.0), ("scale", 1.0)),
           "poisson": (("mu",), ("loc", 0)),
           "chi2": (("df",), ("loc", 0.0), ("scale", 1.0)),
           "erlang": (("a",), ("loc", 0.0), ("scale", 1.0))}  # (erlang's class is a subclass of gamma's)


def _dist_args(self: Any, x: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[str, list[Any]]:
    name = self.name
    spec = _PARAMS[name]
    vals = list(args) + [None] * (len(spec) - len(args))
    for i, p in enumerate(spec):
        if i >= len(args):
            vals[i] = kw[p[0]] if p[0] in kw else p[1] if len(p) == 2 else None
    return name, [x] + vals


def logpdf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.logpdf(x, *args, **kw)
    name, vals = _dist_args(self, x, args, kw)
    return y, (name, vals, None, 2 + len(args))


def pdf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.pdf(x, *args, **kw)
    name, vals = _dist_args(self, x, args, kw)
    return y, (name, vals, y, 2 + len(args))


def logpmf_fwd(self: Any, k: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.logpmf(k, *args, **kw)
    name, vals = _dist_args(self, k, args, kw)
    return y, (name, vals, None, 2 + len(args))


def pmf_fwd(self: Any, k: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.pmf(k, *args, **kw)
    name, vals = _dist_args(self, k, args, kw)
    return y, (name, vals, y, 2 + len(args))


def logpdf_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """logpdf: each argument gets g * d logpdf; pdf (state holds it): g * pdf * d logpdf."""
    name, vals, p, n = s
    scale = g if p is None else g * p
    ds = _DLOGPDF[name](*vals)
    return (None,) + tuple(None if d is None else scale * d for d in ds)[:n - 1]


def _norm_z(self: Any, x: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[list[Any], Any]:
    _, vals = _dist_args(self, x, args, kw)
    return vals, (vals[0] - vals[1]) / vals[2]


def norm_cdf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.cdf(x, *args, **kw)
    vals, z = _norm_z(self, x, args, kw)
    return y, (z, vals[2], -0.5 * z * z - _HALF_LOG_2PI, 2 + len(args))


def norm_logcdf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.logcdf(x, *args, **kw)
    vals, z = _norm_z(self, x, args, kw)
    return y, (z, vals[2], -0.5 * z * z - _HALF_LOG_2PI - y, 2 + len(args))


def norm_sf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.sf(x, *args, **kw)
    vals, z = _norm_z(self, x, args, kw)
    return y, (z, -vals[2], -0.5 * z * z - _HALF_LOG_2PI, 2 + len(args))


def norm_logsf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.logsf(x, *args, **kw)
    vals, z = _norm_z(self, x, args, kw)
    return y, (z, -vals[2], -0.5 * z * z - _HALF_LOG_2PI - y, 2 + len(args))


def norm_cdf_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """F(z), z = (x - loc) / scale: dF/dz = exp(logd) (logd: log phi(z), minus log F for
    logcdf); x gets g dF/dz / scale, loc minus that, scale minus that times z.  sf and logsf
    store -scale."""
    z, scale, logd, n = s
    dx = g * np.exp(logd) / scale
    return (None, dx, -dx, -dx * z)[:n]


def poisson_cdf_fwd(self: Any, k: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.cdf(k, *args, **kw)
    _, vals = _dist_args(self, k, args, kw)
    return y, (vals[0], vals[1], vals[2], 2 + len(args))


def poisson_cdf_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """d/dmu P(K <= k) = -pmf(floor(k), mu)."""
    k, mu, loc, n = s
    kk = np.floor(k) - loc
    return (None, None, -g * np.exp(kk * np.log(mu) - mu - special.gammaln(kk + 1.0)), None)[:n]


def mvn_logpdf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("mean", "cov", "allow_singular"), mean=None, cov=1.0, allow_singular=False)
    y = self.logpdf(x, *args, **kw)
    return y, (x, o["mean"], o["cov"], None, 2 + len(args), bool(o["allow_singular"]))


def mvn_pdf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("mean", "cov", "allow_singular"), mean=None, cov=1.0, allow_singular=False)
    y = self.pdf(x, *args, **kw)
    return y, (x, o["mean"], o["cov"], y, 2 + len(args), bool(o["allow_singular"]))


_MVN_NOTE = "cov read from its lower triangle; allow_singular=True: x and mean (pseudo-inverse), not cov"


def mvn_logpdf_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """logpdf = -(d log 2 pi + log det C + r^T C^-1 r) / 2, r = x - mean (rows of x):
    x gets -g C^-1 r, mean +g C^-1 r, C (read from its lower triangle, as SciPy's eigh does)
    the lower-triangle image of (C^-1 r r^T C^-1 - C^-1) g / 2; a 0-d or 1-d cov (a multiple
    of the identity, a diagonal) gets the trace or the diagonal.  With ``allow_singular=True``
    SciPy uses the pseudo-inverse (and pseudo-determinant): x and mean get -/+ g C^+ r; C gets no
    cotangent (``NotImplemented``: a GradError), since the pseudo-determinant is not differentiable
    where the rank changes."""
    x, mean, cov, p, n, singular = s
    x = np.asarray(x, dtype=float)
    d = np.shape(mean)[-1] if mean is not None and np.ndim(mean) else (np.shape(x)[-1] if np.ndim(x) else 1)
    if np.ndim(x) == 0 or (d > 1 and np.ndim(x) == 1 and np.shape(x)[0] != d):
        raise NoRuleError("irad: multivariate_normal with scalar observations has no rule")
    c = cov * np.eye(d) if np.ndim(cov) == 0 else (np.diag(cov) if np.ndim(cov) == 1 else cov)
    c = np.tril(c) + np.swapaxes(np.tril(c, -1), -1, -2)
    r = x if mean is None else x - mean
    ge = g if p is None else g * p
    rows = np.swapaxes(np.reshape(r, (-1, d)), 0, 1)
    sol = np.matmul(np.linalg.pinv(c), rows) if singular else np.linalg.solve(c, rows)  # (d, m): C^-1 r
    gv = np.reshape(ge, (-1,))
    gsol = np.reshape(np.swapaxes(sol, 0, 1), np.shape(r)) * np.expand_dims(ge, -1)
    out: list[Any] = [None, -gsol] + [None] * (n - 2)
    if n > 2 and mean is not None:
        out[2] = gsol
    if n > 3 and singular:
        out[3] = NotImplemented
    elif n > 3:
        gs = 0.5 * (np.matmul(sol * gv, np.swapaxes(sol, 0, 1)) - np.sum(gv) * np.linalg.inv(c))
        if np.ndim(cov) == 0:
            out[3] = np.trace(gs)
        elif np.ndim(cov) == 1:
            out[3] = np.diagonal(gs)
        else:
            out[3] = 2.0 * np.tril(gs) - np.eye(d) * gs
    return tuple(out)


def dirichlet_logpdf_fwd(self: Any, x: Any, alpha: Any) -> tuple[Any, Any]:
    return self.logpdf(x, alpha), (x, alpha, None)


def dirichlet_pdf_fwd(self: Any, x: Any, alpha: Any) -> tuple[Any, Any]:
    y = self.pdf(x, alpha)
    return y, (x, alpha, y)


def dirichlet_logpdf_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """logpdf = gammaln(sum a) - sum gammaln(a) + sum (a - 1) log x over the first axis of x:
    x gets g (a - 1) / x, alpha gets g (digamma(sum a) - digamma(a) + log x), summed over
    the observations (x of shape (k, m))."""
    x, alpha, p = s
    ge = g if p is None else g * p
    a = np.reshape(alpha, (-1,) + (1,) * (np.ndim(x) - 1))
    gx = ge * (a - 1.0) / x
    ga = ge * (special.digamma(np.sum(alpha)) - special.digamma(a) + np.log(x))
    if np.ndim(x) > 1:
        ga = np.sum(ga, axis=tuple(range(1, np.ndim(x))))
    return None, gx, np.reshape(ga, np.shape(alpha))


def _load_stats() -> None:
    global stats
    import scipy.special  # noqa: F401  (the pullbacks use scipy.special)
    import scipy.stats as st
    stats = st
    _load_special_if_needed()
    from scipy.stats._distn_infrastructure import rv_continuous, rv_discrete
    for name in ("norm", "t", "gamma", "beta"):
        dist = getattr(st, name)
        tp = (type(dist),)
        params: tuple[Any, ...] = ("self", "x") + _PARAMS[name]
        T.rule(rv_continuous.logpdf, logpdf_fwd, logpdf_pullback, "parameters get cotangents", types=tp,
               label=f"scipy.stats.{name}.logpdf", params=params)
        T.rule(rv_continuous.pdf, pdf_fwd, logpdf_pullback, "parameters get cotangents", types=tp,
               label=f"scipy.stats.{name}.pdf", params=params)
    tp = (type(st.norm),)
    params = ("self", "x") + _PARAMS["norm"]
    for meth, fwd in (("cdf", norm_cdf_fwd), ("logcdf", norm_logcdf_fwd), ("sf", norm_sf_fwd),
                      ("logsf", norm_logsf_fwd)):
        T.rule(getattr(rv_continuous, meth), fwd, norm_cdf_pullback, "loc, scale get cotangents", types=tp,
               label=f"scipy.stats.norm.{meth}", params=params)
    tp = (type(st.poisson),)
    params = ("self", "k") + _PARAMS["poisson"]
    T.rule(rv_discrete.logpmf, logpmf_fwd, logpdf_pullback, "mu gets a cotangent, k none", types=tp,
           label="scipy.stats.poisson.logpmf", params=params)
    T.rule(rv_discrete.pmf, pmf_fwd, logpdf_pullback, "mu gets a cotangent, k none", types=tp,
           label="scipy.stats.poisson.pmf", params=params)
    T.rule(rv_discrete.cdf, poisson_cdf_fwd, poisson_cdf_pullback, "mu gets a cotangent, k none", types=tp,
           label="scipy.stats.poisson.cdf", params=params)
    mvn = type(st.multivariate_normal)
    params = ("self", "x", ("mean", None), ("cov", 1.0))
    T.rule(mvn.logpdf, mvn_logpdf_fwd, mvn_logpdf_pullback, _MVN_NOTE,
           label="scipy.stats.multivariate_normal.logpdf", params=params)
    T.rule(mvn.pdf, mvn_pdf_fwd, mvn_logpdf_pullback, _MVN_NOTE,
           label="scipy.stats.multivariate_normal.pdf", params=params)
    T.rule(mvn.entropy, mvn_entropy_fwd, mvn_entropy_pullback, "cov read from its lower triangle; non-singular",
           label="scipy.stats.multivariate_normal.entropy", params=("self", ("mean", None), ("cov", 1.0)))
    for name in ("t", "chi2", "gamma", "beta"):   # (issue 14: like norm's, one pullback for all)
        tp = (type(getattr(st, name)),)
        params = ("self", "x") + _PARAMS[name]
        note = {"t": "x, loc, scale (df: GradError)", "beta": "x, loc, scale (a, b: GradError)"}.get(
            name, "parameters get cotangents")
        for meth, fwd in (("cdf", dist_cdf_fwd), ("sf", dist_sf_fwd), ("logcdf", dist_logcdf_fwd),
                          ("logsf", dist_logsf_fwd)):
            T.rule(getattr(rv_continuous, meth), fwd, dist_cdf_pullback, note, types=tp,
                   label=f"scipy.stats.{name}.{meth}", params=params)
    dr = type(st.dirichlet)
    T.rule(dr.logpdf, dirichlet_logpdf_fwd, dirichlet_logpdf_pullback, "x on the simplex",
           label="scipy.stats.dirichlet.logpdf")
    T.rule(dr.pdf, dirichlet_pdf_fwd, dirichlet_logpdf_pullback, "x on the simplex",
           label="scipy.stats.dirichlet.pdf")


def _load_special_if_needed() -> None:
    if special is None:
        _load_special()


# ---- scipy.linalg ----------------------------------------------------------------------------


def _H(x: Any) -> Any:
    return np.swapaxes(cj(x), -1, -2)


def _tri(x: Any, lower: bool) -> Any:
    return np.tril(x) if lower else np.triu(x)


def solve_triangular_fwd(a: Any, b: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("trans", "lower", "unit_diagonal"), trans=0, lower=False, unit_diagonal=False)
    y = linalg.solve_triangular(a, b, *args, **kw)
    trans = {0: "N", 1: "T", 2: "C"}.get(o["trans"], o["trans"])
    return y, (a, y, trans, bool(o["lower"]), bool(o["unit_diagonal"]))


def solve_triangular_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """x = op(A)^-1 b: b gets op(A)^-T g, A the triangle of -(gb x^T), transposed (T) or
    conjugate-transposed (C) back when op(A) was."""
    a, x, trans, lower, unit = s
    if trans == "N":     # A x = b: gb = A^-T g
        gb = linalg.solve_triangular(a, g, trans="T", lower=lower, unit_diagonal=unit)
    elif trans == "T":   # A^T x = b: gb = A^-1 g
        gb = linalg.solve_triangular(a, g, lower=lower, unit_diagonal=unit)
    else:                # A^H x = b: gb = conj(A)^-1 g
        gb = cj(linalg.solve_triangular(a, cj(g), lower=lower, unit_diagonal=unit))
    xm = x[:, None] if np.ndim(x) == 1 else x
    gm = gb[:, None] if np.ndim(gb) == 1 else gb
    outer = -np.matmul(gm, _mT(xm))   # the cotangent of op(A)
    if trans == "T":
        outer = np.swapaxes(outer, -1, -2)
    elif trans == "C":
        outer = _H(outer)
    ga = _tri(outer, lower)
    if unit:
        ga = ga - np.eye(np.shape(a)[-1]) * ga
    return ga, gb


def cho_factor_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("lower",), lower=False)
    c, low = linalg.cho_factor(a, *args, **kw)
    lower = bool(o["lower"])
    fac = np.tril(c) if lower else np.transpose(np.triu(c))
    return (c, low), (fac, lower, _CHO_KEEPS_OTHER)


def cho_factor_pullback(s: Any, g: Any) -> tuple[Any]:
    """c holds the factor in one triangle: it goes through the Cholesky pullback.  The other
    triangle holds a's own entries (SciPy < 1.18: their cotangent goes straight to a) or
    zeros (SciPy >= 1.18)."""
    from .decomp_rules import cholesky_pullback
    fac, lower, keeps = s
    gc = g[0]
    if lower:
        (ga,) = cholesky_pullback((fac, False), np.tril(gc))
        return (ga + np.triu(gc, 1) if keeps else ga,)
    (ga,) = cholesky_pullback((fac, True), np.triu(gc))
    return (ga + np.tril(gc, -1) if keeps else ga,)


def cho_solve_fwd(c_and_lower: Any, b: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    c, lower = c_and_lower
    x = linalg.cho_solve(c_and_lower, b, *args, **kw)
    return x, (c, bool(lower), x)


def cho_solve_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """x = A^-1 b with A = L L^H (lower) or U^H U: the Hermitian adjoint sends g to gb = A^-1 g
    and, on the factor's triangle, (Abar + Abar^H) L (lower) or U (Abar + Abar^H) (upper), with
    Abar = -gb x^H; JAX's convention conjugates it on both sides (no-ops on real values)."""
    c, lower, x = s
    g = cj(g)
    gb = linalg.cho_solve((c, lower), g)
    xm = x[:, None] if np.ndim(x) == 1 else x
    gm = gb[:, None] if np.ndim(gb) == 1 else gb
    abar = -np.matmul(gm, _H(xm))
    sym = abar + _H(abar)
    gc = np.tril(np.matmul(sym, np.tril(c))) if lower else np.triu(np.matmul(np.triu(c), sym))
    return (cj(gc), None), cj(gb)


def _mT(x: Any) -> Any:
    return np.swapaxes(x, -1, -2)


def _as_matrix(a: Any) -> Any:
    """SciPy's matrix functions read a scalar (or a 1-element 1-d array) as a 1 x 1 matrix."""
    return np.reshape(a, (1, 1)) if np.ndim(a) < 2 else a


def _frechet(a: Any, e: Any) -> Any:
    """L_exp(a, e), the Frechet derivative of expm at ``a`` in the direction ``e`` (batched)."""
    if np.ndim(a) <= 2 and np.ndim(e) <= 2 or _FRECHET_BATCHES:
        return linalg.expm_frechet(a, e, compute_expm=False)
    shape = np.broadcast_shapes(np.shape(a), np.shape(e))   # SciPy < 1.15: one matrix at a time
    a2 = np.reshape(np.broadcast_to(a, shape), (-1,) + shape[-2:])
    e2 = np.reshape(np.broadcast_to(e, shape), (-1,) + shape[-2:])
    parts = [linalg.expm_frechet(a2[i], e2[i], compute_expm=False) for i in range(a2.shape[0])]
    return np.reshape(np.stack(parts), shape)


def _block(a: Any, e: Any) -> Any:
    """[[a, e], [0, a]] (over leading batch axes): f of it holds L_f(a, e) in its upper right."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(e))
    a, e = np.broadcast_to(a, shape), np.broadcast_to(e, shape)
    z = np.zeros(shape, dtype=np.result_type(a, e))
    return np.concatenate([np.concatenate([a, e], -1), np.concatenate([z, a], -1)], -2)


def _adjoint(a: Any, g: Any, frechet: Any) -> Any:
    """The pullback of Y = f(A) for a primary matrix function f: Abar = L_f(A^T, Ybar).

    <G, L_f(A, E)> = <L_f(A^T, G), E> holds for the bilinear pairing Re tr(G^T X) (JAX's
    convention) because f(A^T) = f(A)^T, also on the branch cut (a real matrix with a negative
    eigenvalue, whose logm and sqrtm are complex)."""
    return frechet(_mT(a), g)


def _logm_frechet(a: Any, e: Any) -> Any:
    """L_log(a, e) = 2 L_log(S, Z) with S = sqrtm(a) and S Z + Z S = e (log A = 2 log S), and
    L_log(S, Z) the upper right block of logm([[S, c Z], [0, S]]) / c.  The block matrix repeats
    each eigenvalue and rounding splits the copies: split across the branch cut of log (a real
    negative eigenvalue) they would give garbage, and the square root moves every eigenvalue off
    it.  The scale c (L is linear in its direction: any c > 0 gives the same value) makes the
    two blocks comparable in size."""
    k = np.shape(a)[-1]
    s = linalg.sqrtm(a)
    z = linalg.solve_sylvester(s, s, e)
    ns = np.linalg.norm(s, axis=(-2, -1), keepdims=True)
    nz = np.linalg.norm(z, axis=(-2, -1), keepdims=True)
    c = ns / np.maximum(nz, 1e-150)
    return logm_keeping_rng(_block(s, c * z))[..., :k, k:] * (2.0 / c)


def logm_keeping_rng(a: Any) -> Any:
    """``scipy.linalg.logm(a)`` with numpy's global random state seeded for the call and restored
    after it.  SciPy's logm estimates 1-norms from random vectors drawn from ``np.random``'s
    global state (``scipy.sparse.linalg.onenormest``), and for some matrices the estimate, and
    so the last bits of the result, depend on them.  The logm pullback calls this: a gradient
    must not move the user's random stream, and it is a function of its inputs alone (two runs
    agree to the bit).  It has logm's rule, so irad never traces into it."""
    state = np.random.get_state()
    try:
        np.random.seed(0x1A0)
        return linalg.logm(a)
    finally:
        np.random.set_state(state)


def logm_keeping_rng_fwd(a: Any) -> tuple[Any, Any]:
    return logm_keeping_rng(a), (a, False, not np.iscomplexobj(a))


def expm_fwd(a: Any) -> tuple[Any, Any]:
    y = linalg.expm(a)
    return y, (_as_matrix(a), np.shape(a))


def expm_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """Abar = L_exp(A^T, g), by scipy.linalg.expm_frechet."""
    a, shape = s
    return (np.reshape(_adjoint(a, g, _frechet), shape),)


def expm_frechet_fwd(a: Any, e: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("method", "compute_expm", "check_finite"), compute_expm=True)
    y = linalg.expm_frechet(a, e, *args, **kw)
    return y, (a, e, bool(o["compute_expm"]))


def expm_frechet_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """(expm(A), L(A, E)) is the first block row of expm(M), M = [[A, E], [0, A]]: M gets
    Mbar = L_exp(M^T, Gbar) with Gbar = [[gexpm, gL], [0, 0]], a 2n x 2n
    expm_frechet; A gets the sum of Mbar's diagonal blocks, E its upper right block.  Each
    order doubles the size of the matrices (this pullback calls expm_frechet again)."""
    a, e, both = s
    gf, gl = g if both else (None, g)
    k = np.shape(a)[-1]
    m = _block(a, e)
    shape = np.shape(m)[:-2] + (k, k)
    zero = np.zeros(shape, dtype=np.result_type(gl))
    top = np.concatenate([zero if gf is None else np.broadcast_to(gf, shape), np.broadcast_to(gl, shape)], -1)
    gm = np.concatenate([top, np.concatenate([zero, zero], -1)], -2)
    mb = _adjoint(m, gm, _frechet)
    return mb[..., :k, :k] + mb[..., k:, k:], mb[..., :k, k:]


def _real_if(real: bool, ga: Any) -> Any:
    """The cotangent of a real argument is real.  logm and sqrtm of a real matrix are real or
    complex depending on its values (a negative eigenvalue): a program compiled at a real
    result must still get a real cotangent at a complex one, so the rule takes the real part
    itself (the transform's cast is decided by the types at compile time)."""
    return np.real(ga) if real else ga


def logm_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = linalg.logm(a, *args, **kw)
    # disp=False (deprecated) gives (F, errest)
    return y, (a, isinstance(y, tuple), not np.iscomplexobj(a))


def logm_pullback(s: Any, g: Any) -> tuple[Any]:
    """Abar = L_log(A^T, g), L_log from logm of a 2n x 2n block matrix (so each
    order doubles the size; see ``_logm_frechet``).  With disp=False, errest (zero in exact
    arithmetic) gets none."""
    a, pair, real = s
    return (_real_if(real, _adjoint(a, g[0] if pair else g, _logm_frechet)),)


def sqrtm_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = linalg.sqrtm(a, *args, **kw)
    pair = isinstance(y, tuple)  # disp=False (deprecated): (X, errest), except for 1 x 1 matrices
    x = y[0] if pair else y
    scalar = np.ndim(a) < 2 and np.size(a) == 1
    return y, (x, pair, np.shape(a) if scalar else None, not np.iscomplexobj(a))


def sqrtm_pullback(s: Any, g: Any) -> tuple[Any]:
    """X X = A: Abar solves X^T Abar + Abar X^T = g (a Sylvester equation; it is the transpose
    formula with L_sqrt(B, E) solving sqrt(B) Z + Z sqrt(B) = E, also on the branch cut).  A
    scalar argument: SciPy 1.17 returns [[exp(a)]] for it (a SciPy bug), so the rule
    differentiates exp there.  With disp=False, errest (zero in exact arithmetic) gets none."""
    x, pair, scalar, real = s
    if pair:
        g = g[0]
    if scalar is not None and _SQRTM_SCALAR_IS_EXP:
        return (np.reshape(g * x, scalar),)
    xt = _mT(x)
    ga = _real_if(real, linalg.solve_sylvester(xt, xt, g))
    return (ga if scalar is None else np.reshape(ga, scalar),)


def solve_sylvester_fwd(a: Any, b: Any, q: Any) -> tuple[Any, Any]:
    x = linalg.solve_sylvester(a, b, q)
    return x, (a, b, x)


def solve_sylvester_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """A X + X B = Q: Q gets Qbar solving A^T Qbar + Qbar B^T = g; A gets -Qbar X^T, B -X^T Qbar."""
    a, b, x = s
    gq = linalg.solve_sylvester(_mT(a), _mT(b), g)
    return -np.matmul(gq, _mT(x)), -np.matmul(_mT(x), gq), gq


def sla_inv_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = linalg.inv(a, *args, **kw)
    return y, y


def sla_inv_pullback(y: Any, g: Any) -> tuple[Any]:
    """d inv(A) = -inv(A) dA inv(A)."""
    yt = _mT(y)
    return (-np.matmul(yt, np.matmul(g, yt)),)


def sla_det_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = linalg.det(a, *args, **kw)
    return y, (a, y)


def sla_det_pullback(s: Any, g: Any) -> tuple[Any]:
    """d det(A) = det(A) tr(inv(A) dA)."""
    a, y = s
    return (np.expand_dims(g * y, (-2, -1)) * _mT(np.linalg.inv(a)),)


_CHO_KEEPS_OTHER = True  # does cho_factor leave a's entries in the other triangle? (probed on load)
_FRECHET_BATCHES = True  # does expm_frechet take stacks of matrices (SciPy >= 1.15)? (probed on load)
_SQRTM_SCALAR_IS_EXP = False  # does sqrtm(4.0) return [[exp(4)]] (SciPy 1.17)? (probed on load)


def _load_linalg() -> None:
    global linalg, _CHO_KEEPS_OTHER, _FRECHET_BATCHES, _SQRTM_SCALAR_IS_EXP
    import scipy.linalg as sla
    linalg = sla
    _CHO_KEEPS_OTHER = bool(sla.cho_factor(np.array([[4.0, 1.0], [1.0, 4.0]]), lower=True)[0][0, 1] != 0)
    try:
        sla.expm_frechet(np.zeros((1, 1, 1)), np.zeros((1, 1, 1)), compute_expm=False)
    except Exception:  # noqa: BLE001  (SciPy < 1.15: "expected a square matrix")
        _FRECHET_BATCHES = False
    try:
        _SQRTM_SCALAR_IS_EXP = bool(abs(np.ravel(sla.sqrtm(np.array(4.0)))[0] - np.exp(4.0)) < 1e-6)
    except (ValueError, np.linalg.LinAlgError):
        pass
    T.rule(sla.solve_triangular, solve_triangular_fwd, solve_triangular_pullback,
           "trans N/T/C, lower, unit_diagonal; reads one triangle")
    T.rule(sla.cho_factor, cho_factor_fwd, cho_factor_pullback, "real; the other triangle as SciPy leaves it")
    T.rule(sla.cho_solve, cho_solve_fwd, cho_solve_pullback, "(c, lower) gets a (cot, None) pair")
    T.rule(sla.expm, expm_fwd, expm_pullback, "batched, complex; via expm_frechet (any order)")
    T.rule(sla.expm_frechet, expm_frechet_fwd, expm_frechet_pullback,
           "A and E; compute_expm; via a 2n x 2n expm_frechet (any order)")
    T.rule(sla.logm, logm_fwd, logm_pullback, "batched, complex; via sqrtm and logm of a 2n x 2n block (any order)")
    T.rule(logm_keeping_rng, logm_keeping_rng_fwd, logm_pullback,
           "logm with np.random seeded and restored: logm's pullback calls it")
    T.rule(sla.sqrtm, sqrtm_fwd, sqrtm_pullback, "batched, complex; via solve_sylvester")
    T.rule(sla.solve_sylvester, solve_sylvester_fwd, solve_sylvester_pullback)
    T.rule(sla.inv, sla_inv_fwd, sla_inv_pullback)
    T.rule(sla.det, sla_det_fwd, sla_det_pullback, "non-singular matrices")


# ---- scipy.signal ----------------------------------------------------------------------------


def convolve_fwd(in1: Any, in2: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("mode", "method"), mode="full", method="auto")
    y = signal.convolve(in1, in2, *args, **kw)
    return y, (in1, in2, o["mode"], o["method"])


def convolve_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """Embed g in the 'full' output (same and valid are its centred parts), then correlate it
    with the other input in 'valid' mode: convolve(G, flip(other), 'valid')."""
    in1, in2, mode, method = s
    s1, s2 = np.shape(in1), np.shape(in2)
    full = tuple(a + b - 1 for a, b in zip(s1, s2))
    if mode != "full":
        start = [(f - k) // 2 for f, k in zip(full, np.shape(g))]
        g = np.pad(g, [(st, f - k - st) for st, f, k in zip(start, full, np.shape(g))])
    g1 = signal.convolve(g, np.flip(in2), "valid", method)
    g2 = signal.convolve(g, np.flip(in1), "valid", method)
    return g1, g2


def _load_signal() -> None:
    global signal
    import scipy.signal as ss
    signal = ss
    T.rule(ss.convolve, convolve_fwd, convolve_pullback, "n-d; modes full, same, valid")


# ---- autograd's numerical surface (issue 14) ---------------------------------------------------
#
# The incomplete gamma function's derivatives in ``a`` (as JAX has them) by truncated Taylor
# arithmetic in ``a`` through the series and the continued fraction that compute it (Cephes'
# igam/igamc, the algorithms XLA differentiates): ``gammainc_da(n, a, x)`` is d^n/da^n P(a, x),
# a primitive with a rule of its own (d/da is ``gammainc_da(n + 1, ...)``, d/dx the n-th a-derivative
# of the density), so every order works.  The incomplete beta function's derivatives in a and b
# are not computed (JAX has none either): differentiating with respect to them raises GradError.


def _tmul(u: list[Any], v: list[Any]) -> list[Any]:
    """The product of two truncated Taylor series (lists of coefficient arrays)."""
    return [sum(u[i] * v[k - i] for i in range(k + 1)) for k in range(len(u))]


def _tdiv(u: list[Any], v: list[Any]) -> list[Any]:
    w: list[Any] = []
    for k in range(len(u)):
        acc = u[k]
        for i in range(1, k + 1):
            acc = acc - v[i] * w[k - i]
        w.append(acc / v[0])
    return w


def _texp(lc: list[Any]) -> list[Any]:
    """exp of a truncated Taylor series: e_k = sum_j j l_j e_(k-j) / k."""
    e = [np.exp(lc[0])]
    for k in range(1, len(lc)):
        e.append(sum(j * lc[j] * e[k - j] for j in range(1, k + 1)) / k)
    return e


def _log_power_taylor(c0: Any, lx: Any, a: Any, k: int) -> list[Any]:
    """The Taylor coefficients (through h^k) of c0 + h log x - lgamma(a + h) + lgamma(a):
    [c0, log x - digamma(a), -polygamma(1, a) / 2!, -polygamma(2, a) / 3!, ...]."""
    out = [c0, lx - special.digamma(a)]
    for j in range(2, k + 1):
        out.append(-special.polygamma(j - 1, a) / math.factorial(j))
    return out[:k + 1]


_IGAM_MAXITER = 4000


def _converged(new: list[Any], total: list[Any], tol: float = _EPS) -> Any:
    """Which elements' last terms move no Taylor coefficient of the sum by more than ``tol``."""
    out = np.abs(new[0]) <= tol * np.abs(total[0])
    for ni, ti in zip(new[1:], total[1:]):
        out &= np.abs(ni) <= tol * np.abs(ti)
    return out


_NEAR = 1e-13  # terms this small (relative): the end is near (see _iterate)


def _iterate(state: list[list[Any]], step: Any, result: int, k: int) -> list[Any]:
    """Run ``step(state, m) -> (state, near, converged)`` for m = 1, 2, ... on the elements not
    yet done (the others leave the arrays, so each element costs its own number of terms);
    returns the Taylor coefficients ``state[result]`` of every element.  An element is done when
    its last term moves no coefficient by an ulp or, as rounding may keep the higher ones moving,
    a quarter more terms (and 10) after its terms first fell below 1e-13 (near: the terms
    decrease geometrically by then, so the rest is below an ulp too)."""
    size = np.shape(state[0][0])[0]
    out = [np.zeros(size) for _ in range(k + 1)]
    idx = np.arange(size)
    first = np.zeros(size)   # the term at which each element came near (0: not yet)
    for m in range(1, _IGAM_MAXITER + 1):
        state, near, conv = step(state, m)
        first = np.where((first == 0) & near, m, first)
        conv = conv | ((first > 0) & (m >= first * 1.25 + 10))
        if np.any(conv):
            for j in range(k + 1):
                out[j][idx[conv]] = state[result][j][conv]
            keep = ~conv
            idx, first = idx[keep], first[keep]
            state = [[v[keep] for v in jet] for jet in state]
            if not idx.size:
                return out
    for j in range(k + 1):  # (not converged in _IGAM_MAXITER terms: the last partial sums)
        out[j][idx] = state[result][j]
    return out


def _series_step(state: list[list[Any]], m: int) -> tuple[list[list[Any]], Any, Any]:
    (a,), (x,), c, s = state
    d = a + m
    q = -1.0 / d
    r = [x / d]
    for _ in range(len(c) - 1):   # x / (a + h + m) = sum_k x (-1)^k h^k / (a + m)^(k + 1)
        r.append(r[-1] * q)
    c = _tmul(c, r)
    s = [si + ci for si, ci in zip(s, c)]
    return [[a], [x], c, s], _converged(c, s, _NEAR), _converged(c, s)


def _igam_series_jet(a: Any, x: Any, k: int) -> list[Any]:
    """P(a + h, x) = exp((a + h) log x - x - lgamma(a + h + 1)) sum_n prod_(m <= n) x / (a + h + m),
    as Taylor coefficients in h (x <= 1 or x <= a: the terms decrease from the first)."""
    lx = np.log(x)
    one = [np.ones_like(a)] + [np.zeros_like(a) for _ in range(k)]
    s = _iterate([[a], [x], one, [v.copy() for v in one]], _series_step, 3, k)
    e = _texp(_log_power_taylor(a * lx - x - special.gammaln(a + 1.0), lx, a + 1.0, k))
    return _tmul(e, s)


def _cf_step(state: list[list[Any]], c: int) -> tuple[list[list[Any]], Any, Any]:
    """One step of Cephes' igamc continued fraction, on Taylor coefficients in h."""
    y, z, pkm2, pkm1, qkm2, qkm1, ans = state
    y = [y[0] + 1.0] + y[1:]
    z = [z[0] + 2.0] + z[1:]
    yc = [yi * c for yi in y]
    pk = [p - q for p, q in zip(_tmul(pkm1, z), _tmul(pkm2, yc))]
    qk = [p - q for p, q in zip(_tmul(qkm1, z), _tmul(qkm2, yc))]
    ok = qk[0] != 0
    r = _tdiv(pk, [np.where(ok, qk[0], 1.0)] + qk[1:])
    delta = [ai - ri for ai, ri in zip(ans, r)]
    near, conv = ok & _converged(delta, r, _NEAR), ok & _converged(delta, r)
    ans = [np.where(ok, ri, ai) for ai, ri in zip(ans, r)]
    big = np.abs(pk[0]) > 4.503599627370496e15
    if np.any(big):   # rescale (the ratios stay)
        f = np.where(big, 2.220446049250313e-16, 1.0)
        pkm1, pk, qkm1, qk = ([v * f for v in w] for w in (pkm1, pk, qkm1, qk))
    return [y, z, pkm1, pk, qkm1, qk, ans], near, conv


def _igamc_cf_jet(a: Any, x: Any, k: int) -> list[Any]:
    """Q(a + h, x) = exp((a + h) log x - x - lgamma(a + h)) F, F Cephes' continued fraction (igamc),
    as Taylor coefficients in h (x > 1 and x > a)."""
    lx = np.log(x)
    zero = [np.zeros_like(a) for _ in range(k)]
    dh = [np.full_like(a, -1.0)] + zero[1:] if k else []   # y = 1 - (a + h), z = x + y + 1
    z = [x + 2.0 - a] + dh
    qkm1 = [zi * x for zi in z]
    pkm1 = [x + 1.0] + zero
    state = [[1.0 - a] + dh, z, [np.ones_like(a)] + zero, pkm1, [x.copy()] + zero, qkm1, _tdiv(pkm1, qkm1)]
    f = _iterate(state, _cf_step, 6, k)
    e = _texp(_log_power_taylor(a * lx - x - special.gammaln(a), lx, a, k))
    return _tmul(e, f)


def gammainc_da(n: int, a: Any, x: Any) -> Any:
    """d^n/da^n of the regularized lower incomplete gamma function ``scipy.special.gammainc(a, x)``
    (n >= 1; that of ``gammaincc`` is its negative).  0 at x = 0 and x = inf, nan where a <= 0
    or x < 0.  Accurate to a few ulp of the series or continued fraction it differentiates."""
    _load_special_if_needed()   # (called before irad looked up any rule: scipy.special's rules now)
    n = int(n)
    a, x = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(x, dtype=float))
    if n == 0:
        return special.gammainc(a, x)[()]
    out = np.full(a.shape, np.nan)
    edge = (a > 0) & ((x == 0) | (x == np.inf))
    out[edge] = 0.0
    ok = (a > 0) & (x > 0) & np.isfinite(x)
    cf = ok & (x > 1.0) & (x > a)
    ser = ok & ~cf
    scale = float(math.factorial(n))
    if np.any(ser):
        out[ser] = _igam_series_jet(a[ser], x[ser], n)[n] * scale
    if np.any(cf):
        out[cf] = -_igamc_cf_jet(a[cf], x[cf], n)[n] * scale
    return out[()]


def gammainc_dens_da(n: int, a: Any, x: Any) -> Any:
    """d^n/da^n of the gamma density x^(a-1) e^-x / Gamma(a) (d/dx of gammainc), written with
    functions that have rules, so that it differentiates again."""
    _load_special_if_needed()
    c0 = special.xlogy(a - 1.0, x) - x - special.gammaln(a)
    if n == 0:
        return np.exp(c0)
    return _texp(_log_power_taylor(c0, np.log(x), a, n))[n] * float(math.factorial(n))


def _beta_dens(a: Any, b: Any, x: Any) -> Any:
    """x^(a-1) (1-x)^(b-1) / B(a, b): d/dx of betainc(a, b, x)."""
    return np.exp(special.xlogy(a - 1.0, x) + special.xlog1py(b - 1.0, -x) - special.betaln(a, b))


#: beyond this |x| the erfcx and dawsn partials take their asymptotic series (20 terms: an ulp;
#: below it the textbook forms lose up to 2 x^2 ulp, 4e-14 at the switch)
_ERF_FAR = 10.0
#: erfcx'(x) = -(1/sqrt(pi)) sum_k c_k x^-(2k+2), c_k = (-1)^k (2k+1)!! / 2^k (x -> +inf)
_ERFCX_D_C = tuple((-1) ** k * float(math.prod(range(1, 2 * k + 2, 2))) / 2 ** k for k in range(20))
#: dawsn'(x) = -sum_k c_k x^-2k, c_k = (2k-1)!! / 2^k, k >= 1 (|x| -> inf)
_DAWSN_D_C = tuple(float(math.prod(range(1, 2 * k, 2))) / 2 ** k for k in range(1, 21))


def _horner(coef: tuple[float, ...], u: Any) -> Any:
    p = coef[-1]
    for c in reversed(coef[:-1]):
        p = p * u + c
    return p


def _erfcx_d(x: Any, y: Any) -> Any:
    """erfcx' = 2 x erfcx(x) - 2/sqrt(pi), which cancels as x grows (erfcx ~ 1/(x sqrt(pi)): x^2 ulp
    lost, all of them by 1e8): x > 10 takes the asymptotic series."""
    if np.iscomplexobj(x):
        return 2.0 * x * y - 2.0 / np.sqrt(np.pi)
    far = np.greater(x, _ERF_FAR)
    u = np.square(1.0 / np.where(far, x, _ERF_FAR))
    return np.where(far, (-1.0 / np.sqrt(np.pi)) * u * _horner(_ERFCX_D_C, u), 2.0 * x * y - 2.0 / np.sqrt(np.pi))


def _dawsn_d(x: Any, y: Any) -> Any:
    """dawsn' = 1 - 2 x dawsn(x), which cancels as |x| grows (dawsn ~ 1/(2x)): |x| > 10 takes the
    asymptotic series."""
    if np.iscomplexobj(x):
        return 1.0 - 2.0 * x * y
    far = np.greater(np.abs(x), _ERF_FAR)
    u = np.square(1.0 / np.where(far, x, _ERF_FAR))
    return np.where(far, -u * _horner(_DAWSN_D_C, u), 1.0 - 2.0 * x * y)


def _t_logpdf(df: Any, t: Any) -> Any:
    """log of Student's t density (d/dt of stdtr(df, t))."""
    return (special.gammaln(0.5 * (df + 1.0)) - special.gammaln(0.5 * df) - 0.5 * np.log(np.pi * df)
            - 0.5 * (df + 1.0) * np.log1p(t * t / df))


# ---- scipy.stats: cdf, sf, logcdf, logsf of t, chi2, gamma, beta ------------------------------
#
# Like norm's: F(z) with z = (x - loc) / scale, so x gets g dF/dz / scale, loc minus that and
# scale minus that times z.  dF/dz is the standardized density; each distribution's function below
# gives its log and the derivatives of F in the shape parameters (NotImplemented where irad does
# not compute them: t's df and beta's a, b go through the incomplete beta function).


def _t_cdf_parts(z: Any, df: Any) -> tuple[Any, tuple[Any, ...]]:
    return _t_logpdf(df, z), (NotImplemented,)


def _gamma_cdf_parts(z: Any, a: Any) -> tuple[Any, tuple[Any, ...]]:
    pos = z > 0
    zp = np.where(pos, z, 1.0)   # (the other branch of np.where gets no nan: its derivative is 0)
    logd = np.where(pos, special.xlogy(a - 1.0, zp) - zp - special.gammaln(a), -np.inf)
    return logd, (np.where(pos, gammainc_da(1, a, zp), 0.0),)


def _chi2_cdf_parts(z: Any, df: Any) -> tuple[Any, tuple[Any, ...]]:
    logd, (da,) = _gamma_cdf_parts(0.5 * z, 0.5 * df)   # chdtr(df, z) = gammainc(df / 2, z / 2)
    return logd - np.log(2.0), (0.5 * da,)


def _beta_cdf_parts(z: Any, a: Any, b: Any) -> tuple[Any, tuple[Any, ...]]:
    inside = (z > 0) & (z < 1)
    zi = np.where(inside, z, 0.5)
    logd = np.where(inside, special.xlogy(a - 1.0, zi) + special.xlog1py(b - 1.0, -zi) - special.betaln(a, b),
                    -np.inf)
    return logd, (NotImplemented, NotImplemented)


_CDF_PARTS: dict[str, Callable[..., Any]] = {
    "t": _t_cdf_parts, "chi2": _chi2_cdf_parts, "gamma": _gamma_cdf_parts, "beta": _beta_cdf_parts,
    "erlang": _gamma_cdf_parts}  # (erlang is a subclass of gamma's class)


def _cdf_state(self: Any, x: Any, args: tuple[Any, ...], kw: dict[str, Any], y: Any, kind: str) -> Any:
    name, vals = _dist_args(self, x, args, kw)
    return (name, vals, y, kind, 2 + len(args))


def dist_cdf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.cdf(x, *args, **kw)
    return y, _cdf_state(self, x, args, kw, y, "cdf")


def dist_sf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.sf(x, *args, **kw)
    return y, _cdf_state(self, x, args, kw, y, "sf")


def dist_logcdf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.logcdf(x, *args, **kw)
    return y, _cdf_state(self, x, args, kw, y, "logcdf")


def dist_logsf_fwd(self: Any, x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = self.logsf(x, *args, **kw)
    return y, _cdf_state(self, x, args, kw, y, "logsf")


def dist_cdf_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """F(z), z = (x - loc) / scale: x gets g f(z) / scale (f: the standardized density), loc
    minus that, scale minus that times z, a shape parameter g dF/dshape; sf = 1 - F negates them,
    logcdf and logsf divide them by exp(y).  t's df and beta's a, b: NotImplemented (GradError)."""
    name, vals, y, kind, n = s
    x, shapes, loc, scale = vals[0], vals[1:-2], vals[-2], vals[-1]
    z = (x - loc) / scale
    logd, dshape = _CDF_PARTS[name](z, *shapes)
    w = -g if kind in ("sf", "logsf") else g
    if kind in ("logcdf", "logsf"):
        dz = w * np.exp(logd - y)
        w = w * np.exp(-y)
    else:
        dz = w * np.exp(logd)
    dx = dz / scale
    out = (None, dx) + tuple(d if d is NotImplemented else w * d for d in dshape) + (-dx, -dx * z)
    return out[:n]


def mvn_entropy_fwd(self: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("mean", "cov"), mean=None, cov=1.0)
    y = self.entropy(*args, **kw)
    mean, cov = o["mean"], o["cov"]
    dim = (1 if np.ndim(cov) < 2 else np.shape(cov)[0]) if mean is None else int(np.size(mean))
    return y, (cov, dim, 1 + len(args))


def mvn_entropy_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """entropy = (d log(2 pi e) + log det C) / 2 (C non-singular): C (read from its lower triangle,
    as SciPy's eigh does) gets the lower-triangle image of g C^-1 / 2; a multiple of the identity
    (0-d cov) g d / (2 c), a diagonal (1-d cov) g / (2 c); the mean none (the entropy does not
    depend on it)."""
    cov, dim, n = s
    out: list[Any] = [None] * n
    if n > 2:
        if dim == 1 or np.ndim(cov) < 2:
            scale = float(dim) if np.ndim(cov) == 0 else 1.0
            out[2] = np.reshape(0.5 * g * scale / cov, np.shape(cov))
        else:
            c = np.tril(cov) + np.swapaxes(np.tril(cov, -1), -1, -2)
            gs = (0.5 * g) * np.linalg.inv(c)
            out[2] = 2.0 * np.tril(gs) - np.eye(dim) * gs
    return tuple(out)


# ---- scipy.linalg.solve_banded -----------------------------------------------------------------


def _band_index(nl: int, nu: int, m: int) -> tuple[Any, Any, Any]:
    """For ab[r, j] = A[i, j], i = r - u + j: the rows i (clipped), the columns j, and which
    (r, j) lie inside the matrix."""
    r = np.arange(nl + nu + 1)[:, None]
    j = np.arange(m)[None, :]
    i = r - nu + j
    inside = (i >= 0) & (i < m)
    return np.clip(i, 0, m - 1), np.broadcast_to(j, i.shape), inside


def _band_transpose(ab: Any, nl: int, nu: int) -> Any:
    """The band storage of A^T ((u, l) diagonals): abT[k, j] = ab[l + u - k, j + k - l]."""
    m = np.shape(ab)[-1]
    k = np.arange(nl + nu + 1)[:, None]
    col = np.arange(m)[None, :] + k - nl
    inside = (col >= 0) & (col < m)
    rows = np.broadcast_to(nl + nu - k, col.shape)
    picked = ab[..., rows, np.clip(col, 0, m - 1)]
    return np.where(inside, picked, np.zeros((), dtype=np.result_type(ab)))


def solve_banded_fwd(l_and_u: Any, ab: Any, b: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("overwrite_ab", "overwrite_b", "check_finite"), check_finite=True)
    nl, nu = (int(v) for v in l_and_u)
    # (never in place: the pullback reads ab, and x must not alias b)
    x = linalg.solve_banded((nl, nu), ab, b, check_finite=o["check_finite"])
    return x, (ab, x, nl, nu, np.ndim(b) == 1)


def solve_banded_pullback(s: Any, g: Any) -> tuple[None, Any, Any]:
    """x = A^-1 b, A in band storage: b gets A^-T g (solve_banded with the transposed band),
    ab[r, j] gets -(gb x^T)[r - u + j, j] on the band and 0 in its unused corners."""
    ab, x, nl, nu, vec = s
    m = np.shape(ab)[-1]
    gm = g[..., None] if vec else g
    xm = x[..., None] if vec else x
    gbm = linalg.solve_banded((nu, nl), _band_transpose(ab, nl, nu), gm)
    rows, cols, inside = _band_index(nl, nu, m)
    gab = -np.sum(gbm[..., rows, :] * xm[..., cols, :], axis=-1)
    gab = np.where(inside, gab, np.zeros((), dtype=np.result_type(gab)))
    return None, gab, gbm[..., 0] if vec else gbm


def _load_linalg_banded() -> None:
    global linalg
    import scipy.linalg as sla
    linalg = sla  # (set by _load_linalg too, which runs first)
    T.rule(sla.solve_banded, solve_banded_fwd, solve_banded_pullback,
           "ab and b (batched); (l, u) static; never in place")


def load_all() -> None:
    """Register every SciPy rule now (imports SciPy): for the docs and the coverage tests."""
    from .registry import load_pending
    load_pending(force=True)


def _have_scipy() -> bool:
    try:
        return importlib.util.find_spec("scipy") is not None
    except (ImportError, ValueError):
        return False


if _have_scipy():
    when_imported("scipy.special", _load_special_if_needed)
    when_imported("scipy.stats", _load_stats)
    when_imported("scipy.linalg", _load_linalg)
    when_imported("scipy.signal", _load_signal)
    when_imported("scipy.linalg", _load_linalg_banded)  # (after _load_linalg: it sets ``linalg``)
