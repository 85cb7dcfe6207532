"""Rules for Python itself: ``operator`` functions, builtins and the ``math`` module.

The tracer records ``a + b`` as ``operator.add(a, b)`` whatever the operand types (Python floats,
numpy scalars, arrays), so these rules are written once for all of them: Python floats in give
Python floats out, and broadcasting is left to the transform.  Complex values follow the
convention of ``scalar_rule`` (JAX's and autograd's): the cotangent of ``x`` is ``ybar * dy/dx``,
no conjugate, and a real-valued ``f`` of complex ``z`` gets ``df/dx - i df/dy``.
"""
from __future__ import annotations

import builtins
import math
import operator
from typing import Any

import numpy as np

from ._common import Table, cj, is_float
from ..errors import NoRuleError

T = Table(__name__)


# ---- arithmetic (shared with the numpy ufuncs in numpy_rules) --------------------------------


def add_fwd(x: Any, y: Any) -> tuple[Any, Any]:
    return x + y, None


def add_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    return g, g


def sub_fwd(x: Any, y: Any) -> tuple[Any, Any]:
    return x - y, None


def sub_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    return g, -g


def mul_fwd(x: Any, y: Any) -> tuple[Any, Any]:
    return x * y, (x, y)


def mul_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    x, y = s
    return g * y, g * x


def truediv_fwd(x: Any, y: Any) -> tuple[Any, Any]:
    out = x / y
    return out, (y, out)


def truediv_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    y, out = s
    gx = g / y
    return gx, -gx * out


def neg_fwd(x: Any) -> tuple[Any, Any]:
    return -x, None


def neg_pullback(s: Any, g: Any) -> tuple[Any]:
    return (-g,)


def pos_fwd(x: Any) -> tuple[Any, Any]:
    return +x, None


def identity_pullback(s: Any, g: Any) -> tuple[Any]:
    return (g,)


def mod_fwd(x: Any, y: Any) -> tuple[Any, Any]:
    return x % y, (x, y)


def mod_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    x, y = s  # x % y == x - y * (x // y), and x // y is locally constant
    return g, -g * (x // y)


def _is_int(y: Any) -> bool:
    """Integer (or bool) exponents are constants: they never get a cotangent."""
    if isinstance(y, (bool, int, np.integer, np.bool_)):
        return True
    dt = getattr(y, "dtype", None)
    return dt is not None and dt.kind in "biu"


def pow_fwd(x: Any, y: Any) -> tuple[Any, Any]:
    out = x ** y
    return out, (x, y, out)


def pow_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """d(x**y): ``y * x**(y-1)`` (0 where y == 0) and ``x**y * log(x)`` (0 where x == 0)."""
    x, y, out = s
    if isinstance(y, (int, np.integer)) and not isinstance(y, (bool, np.bool_)):
        gx = g * (y * (x if y == 2 else x ** (y - 1))) if y != 0 else g * 0.0  # x ** 1 would copy
        return gx, None
    # NOTE: np.equal/np.greater, not ==/>: on Python floats those give a bool, which the tracer
    # cannot keep as data (it guards), so this body would not inline
    gx = g * (y * x ** np.where(np.equal(y, 0), 1.0, y - 1.0))
    if _is_int(y):
        return gx, None
    return gx, g * (out * _log_base(x))


def _log_base(x: Any) -> Any:
    """log(x) for d(x**y)/dy: 0 at x == 0 (x**y is flat in y there), NaN (quietly) for x < 0."""
    if np.iscomplexobj(x):
        return np.log(np.where(np.equal(x, 0), 1.0, x))
    pos = np.greater(x, 0)
    return np.where(pos, np.log(np.where(pos, x, 1.0)), np.where(np.equal(x, 0), 0.0, np.nan))


T.rule(operator.add, add_fwd, add_pullback)
T.rule(operator.sub, sub_fwd, sub_pullback)
T.rule(operator.mul, mul_fwd, mul_pullback)
T.rule(operator.truediv, truediv_fwd, truediv_pullback)
T.rule(operator.neg, neg_fwd, neg_pullback)
T.rule(operator.pos, pos_fwd, identity_pullback)
T.rule(operator.mod, mod_fwd, mod_pullback, "gradient of x - y*floor(x/y)")
T.rule(operator.pow, pow_fwd, pow_pullback, "integer exponents get no cotangent")
T.nograd(operator.floordiv, operator.lt, operator.le, operator.eq, operator.ne, operator.gt,
         operator.ge, operator.and_, operator.or_, operator.xor, operator.invert, operator.inv,
         operator.lshift, operator.rshift, operator.not_, operator.truth, operator.index,
         operator.is_, operator.is_not, operator.contains)


# ---- builtins --------------------------------------------------------------------------------


def _sgn(x: float) -> float:
    """sign of a Python (or numpy) float as a Python float, 0 at 0 (np.sign: data, not a branch)."""
    return float(np.sign(x))


def abs_fwd(x: Any) -> tuple[Any, Any]:
    return abs(x), x


def abs_pullback(x: Any, g: Any) -> tuple[Any]:
    """``g * sign(x)`` (``conj(x)/|x|`` for complex: d|z| = Re(conj(z) dz)/|z|), 0 at 0."""
    if type(x) is float:
        return (g * _sgn(x),)
    if np.iscomplexobj(x):
        return (g * np.conj(np.sign(x)),)
    return (g * np.sign(x),)


def float_fwd(x: Any) -> tuple[Any, Any]:
    return float(x), None


def complex_fwd(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    if kwargs:
        raise NoRuleError("irad: complex(real=..., imag=...) with keywords has no rule")
    return complex(*args), len(args)


def complex_pullback(n: int, g: Any) -> tuple[Any, ...]:
    """complex(re, im) = re + 1j*im: re gets Re(g * 1) = Re(g), im gets Re(g * 1j) = -Im(g)."""
    if n == 1:
        return (g,)
    return g.real, -g.imag


def _chosen(args: tuple[Any, ...], y: Any) -> int:
    """Which argument ``max``/``min`` returned (by identity, so ties go to the first)."""
    for i, a in enumerate(args):
        if a is y:
            return i
    return -1  # ``default=`` was returned


def _is_number(a: Any) -> bool:
    return isinstance(a, (float, int, np.number, np.bool_)) or (isinstance(a, np.ndarray) and a.ndim == 0)


def _minmax_fwd(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    y = fn(*args, **kwargs)
    if len(args) != 1:
        items, kind, seqtype = tuple(args), "args", None
    else:
        (seq,) = args
        if isinstance(seq, np.ndarray):
            if seq.ndim != 1:
                raise NoRuleError("irad: builtins.max/min over an array needs a 1-d array")
            i = int(np.argmax(seq) if fn is builtins.max else np.argmin(seq))
            return y, ("array", seq.shape[0], i, None)
        items, kind, seqtype = tuple(seq), "seq", type(seq)
    if all(_is_number(a) for a in items):
        # NOTE: which item was returned is decided from the values (the first equal to y), as data:
        # the pullback then has the same structure whichever item wins, so one trace serves all
        return y, ("values", kind, items, y, seqtype)
    return y, (kind, len(items), _chosen(items, y), seqtype)


def max_fwd(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return _minmax_fwd(builtins.max, args, kwargs)


def min_fwd(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return _minmax_fwd(builtins.min, args, kwargs)


def minmax_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """The whole cotangent goes to the element returned (the first of tied ones)."""
    if s[0] == "values":
        _, kind, items, y, seqtype = s
        cot: list[Any] = []
        taken = None
        for a in items:
            hit = np.equal(a, y) if taken is None else np.logical_and(np.equal(a, y), np.logical_not(taken))
            taken = hit if taken is None else np.logical_or(taken, hit)
            integral = isinstance(a, (int, np.integer, np.bool_)) or np.asarray(a).dtype.kind in "biu"
            cot.append(None if integral else g * float(hit))
    else:
        kind, n, i, seqtype = s
        if kind == "array":
            return (np.where(np.arange(n) == i, g, 0.0),)
        cot = [g if k == i else None for k in range(n)]
    if kind == "args":
        return tuple(cot)
    return (tuple(cot) if seqtype is tuple else cot,)


def pow3_fwd(*args: Any) -> tuple[Any, Any]:
    if len(args) != 2:
        raise NoRuleError("irad: pow(x, y, mod) is integer-only")
    return pow_fwd(*args)


T.rule(builtins.abs, abs_fwd, abs_pullback, "0 at 0")
T.rule(operator.abs, abs_fwd, abs_pullback, "0 at 0")
T.rule(builtins.float, float_fwd, identity_pullback)
T.rule(builtins.complex, complex_fwd, complex_pullback)
T.rule(builtins.max, max_fwd, minmax_pullback, "all to the returned argument (ties: the first)")
T.rule(builtins.min, min_fwd, minmax_pullback, "all to the returned argument (ties: the first)")
T.rule(builtins.pow, pow3_fwd, pow_pullback)
T.nograd(builtins.round, builtins.int, builtins.bool, builtins.len)


# ---- math ------------------------------------------------------------------------------------


def digamma(x: float) -> float:
    """psi(x) = d/dx lgamma(x) for Python floats (math has none): the recurrence psi(x) =
    psi(x + 1) - 1/x up to x >= 12, then the asymptotic series through x^-14 (a few ulp; its
    truncation there is below 1e-17); for x < 0 the reflection psi(x) = psi(1 - x) - pi/tan(pi x),
    the tangent taken of pi times x reduced to [-1/2, 1/2] (exactly: no rounding of pi * x)."""
    x = float(x)
    if x <= 0.0 and x == math.floor(x):
        return math.nan
    r = 0.0
    if x < 0.0:
        r = -math.pi / math.tan(math.pi * (x - round(x)))
        x = 1.0 - x
    while x < 12.0:
        r -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    series = f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f * (1 / 240 - f * (1 / 132 - f * (691 / 32760 - f / 12))))))
    return r + math.log(x) - 0.5 / x - series


def trigamma(x: float) -> float:
    """psi'(x) for Python floats, so that ``digamma`` (a primitive) has a rule too: the
    recurrence psi'(x) = psi'(x + 1) + 1/x^2 up to x >= 12, then the asymptotic series through
    x^-15; for x < 0 the reflection psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x) (reduced as in
    digamma)."""
    x = float(x)
    if x <= 0.0 and x == math.floor(x):
        return math.nan
    if x < 0.0:
        t = math.pi / math.sin(math.pi * (x - round(x)))
        return t * t - trigamma(1.0 - x)
    r = 0.0
    while x < 12.0:
        ix = 1.0 / x
        r += ix * ix  # (not 1/(x*x): x*x underflows to 0 below 1e-162; ix*ix overflows to inf)
        x += 1.0
    f = 1.0 / (x * x)
    series = 1 / x + f / 2 + f / x * (1 / 6 - f * (1 / 30 - f * (1 / 42 - f * (1 / 30 - f * (5 / 66 - f * (
        691 / 2730 - f * 7 / 6))))))
    return r + series


def log_fwd(*args: Any) -> tuple[Any, Any]:
    return math.log(*args), args


def log_pullback(args: tuple[Any, ...], g: Any) -> tuple[Any, ...]:
    """log(x) and log(x, base) = ln x / ln base."""
    if len(args) == 1:
        return (g / args[0],)
    x, b = args
    lb = math.log(b)
    return g / (x * lb), -g * math.log(x) / (b * lb * lb)


def mpow_fwd(x: Any, y: Any) -> tuple[Any, Any]:
    out = math.pow(x, y)
    return out, (x, y, out)


def mpow_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    x, y, out = s
    # NOTE: branch-free (np.where of np.equal/np.greater), so the body inlines as data ops
    y0 = np.equal(y, 0)
    gx = g * float(np.where(y0, 0.0, y * np.power(x, np.where(y0, 1.0, y - 1.0))))
    pos = np.greater(x, 0)
    gy = g * out * float(np.where(pos, np.log(np.where(pos, x, 1.0)), 0.0))
    return gx, gy


def hypot_fwd(*args: Any) -> tuple[Any, Any]:
    out = math.hypot(*args)
    return out, (args, out)


def hypot_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """Each argument gets g * a / hypot; 0 at the origin (a kink: the subgradient 0, as for abs)."""
    args, out = s
    safe = float(np.where(np.equal(out, 0), 1.0, out))  # (data, not a branch: the body inlines)
    return tuple(g * a / safe for a in args)


def fsum_fwd(seq: Any) -> tuple[Any, Any]:
    items = list(seq)
    return math.fsum(items), (len(items), type(seq))


def fsum_pullback(s: Any, g: Any) -> tuple[Any]:
    n, seqtype = s
    cot = [g] * n
    return (tuple(cot) if seqtype is tuple else cot,)


def prod_fwd(seq: Any, **kwargs: Any) -> tuple[Any, Any]:
    items = list(seq)
    return math.prod(items, **kwargs), (items, kwargs.get("start", 1), type(seq))


def prod_pullback(s: Any, g: Any) -> tuple[Any]:
    """Each factor gets g times the product of the others (exact with zeros)."""
    items, start, seqtype = s
    n = len(items)
    left = [start] * (n + 1)
    for k in range(n):
        left[k + 1] = left[k] * items[k]
    right = [1] * (n + 1)
    for k in range(n - 1, -1, -1):
        right[k] = right[k + 1] * items[k]
    cot = [g * left[k] * right[k + 1] if is_float(items[k]) else None for k in range(n)]
    return (tuple(cot) if seqtype is tuple else cot,)


def _inv(a: float) -> float:
    """1/a, and inf (numpy's answer, not ZeroDivisionError) at a == 0: the slope of sqrt at 0, of
    asin at +-1 and of acosh at 1 is infinite."""
    return float(np.divide(1.0, a))


def _sech2(x: float) -> float:
    """tanh' = sech(x)^2 = 4e/(1 + e)^2, e = exp(-2|x|), to a few ulp (1 - tanh(x)^2 is 0 beyond
    |x| ~ 19, where the true value is ~1e-16; math.cosh would overflow)."""
    e = math.exp(-2.0 * abs(x))
    d = 1.0 + e
    return 4.0 * e / (d * d)


def _atan2_d(y: float, x: float) -> tuple[float, float]:
    """(x, -y) / (x^2 + y^2) as (x/h)/h, h = hypot(x, y) (x*x + y*y overflows and underflows)."""
    h = math.hypot(x, y)
    return x / h / h, -y / h / h


_SQRTPI_2 = 2.0 / math.sqrt(math.pi)
_INV_LN2, _INV_LN10 = 1.0 / math.log(2.0), 1.0 / math.log(10.0)
T.scalar(math.sin, lambda x: math.cos(x))
T.scalar(math.cos, lambda x: -math.sin(x))
T.scalar(math.tan, lambda x, y: 1.0 + y * y)
T.scalar(math.asin, lambda x: _inv(math.sqrt((1.0 - x) * (1.0 + x))))  # 1 - x*x cancels near +-1
T.scalar(math.acos, lambda x: -_inv(math.sqrt((1.0 - x) * (1.0 + x))))
T.scalar(math.atan, lambda x: 1.0 / (1.0 + x * x))
T.scalar(math.atan2, lambda y, x: _atan2_d(y, x)[0], lambda y, x: _atan2_d(y, x)[1])
T.scalar(math.sinh, lambda x: math.cosh(x))
T.scalar(math.cosh, lambda x: math.sinh(x))
T.scalar(math.tanh, lambda x: _sech2(x))
T.scalar(math.asinh, lambda x: 1.0 / math.hypot(1.0, x))  # x*x overflows beyond 1e154
T.scalar(math.acosh, lambda x: _inv(math.sqrt(x - 1.0) * math.sqrt(x + 1.0)))
T.scalar(math.atanh, lambda x: 1.0 / ((1.0 - x) * (1.0 + x)))
T.scalar(math.exp, lambda x, y: y)
T.scalar(getattr(math, "exp2", None), lambda x, y: y * math.log(2.0))
T.scalar(math.expm1, lambda x: math.exp(x))  # not y + 1: 0 for x < -37
T.rule(math.log, log_fwd, log_pullback, "one or two arguments")
T.scalar(math.log1p, lambda x: 1.0 / (1.0 + x))
T.scalar(math.log2, lambda x: _INV_LN2 / x)
T.scalar(math.log10, lambda x: _INV_LN10 / x)  # x * ln 10 overflows for x > 7.8e307
T.scalar(math.sqrt, lambda x, y: 0.5 * _inv(y))
T.scalar(getattr(math, "cbrt", None), lambda x, y: _inv(3.0 * y * y))
T.rule(math.pow, mpow_fwd, mpow_pullback)
T.rule(math.hypot, hypot_fwd, hypot_pullback, "any number of arguments")
T.scalar(math.fabs, lambda x: _sgn(x), note="0 at 0")
T.scalar(math.erf, lambda x: _SQRTPI_2 * math.exp(-x * x))
T.scalar(math.erfc, lambda x: -_SQRTPI_2 * math.exp(-x * x))
T.scalar(math.lgamma, lambda x: digamma(x))
T.scalar(math.gamma, lambda x, y: y * digamma(x))
T.scalar(digamma, lambda x: trigamma(x))
T.scalar(math.copysign, lambda x, y: _sgn(x) * math.copysign(1.0, y), None)
T.scalar(math.degrees, lambda x: 180.0 / math.pi)
T.scalar(math.radians, lambda x: math.pi / 180.0)
T.scalar(math.fmod, lambda x, y: 1.0, lambda x, y: -float(math.trunc(x / y)))
T.scalar(math.remainder, lambda x, y: 1.0, lambda x, y, r: -(x - r) / y)
T.scalar(math.ldexp, lambda x, i: math.ldexp(1.0, i), None)
T.rule(math.fsum, fsum_fwd, fsum_pullback, "list cotangent")
T.rule(math.prod, prod_fwd, prod_pullback, "list cotangent, exact with zeros")
T.nograd(math.floor, math.ceil, math.trunc, math.isnan, math.isinf, math.isfinite, math.isclose,
         math.factorial, math.comb, math.perm, math.gcd, math.lcm, math.isqrt)
