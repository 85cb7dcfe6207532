"""Every built-in reverse rule, checked against finite differences with ``irad.testing.check_rule``.

``CASES`` is a table of calls (function, positional args, keyword args): scalars, 0-d arrays,
broadcasting pairs, repeated arguments, axis/keepdims variants, fancy indexing with repeats.
Inputs stay away from non-differentiable points (logs of positives, distinct values for max and
sort) unless a case tests a documented tie convention.  ``test_every_rule_is_tested`` fails when
a rule is added without a case.  Keyword arguments whose names clash with ``check_rule``'s own
(``order``, ``rtol``, ...) are passed positionally.
"""
from __future__ import annotations

import builtins
import math
import operator
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from irad import primitives as ops
from irad.rules import doc, registry
from irad.rules._common import builtin_entries, builtin_nondiff
from irad.rules.decomp_rules import cho_inverse
from irad.rules.python_rules import digamma
from irad.testing import check_rule, numerical_vjp

rng = np.random.default_rng(20240607)
CASES: list = []


def R(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


def P(*shape: int) -> np.ndarray:
    """Positive values (for log, sqrt, division)."""
    return rng.uniform(0.5, 2.0, shape)


def U(*shape: int) -> np.ndarray:
    """Values in (-0.9, 0.9) (for arcsin, arctanh)."""
    return rng.uniform(-0.9, 0.9, shape)


def D(*shape: int) -> np.ndarray:
    """Distinct values, well separated (for max, sort, clip)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.5 - n / 4 + rng.uniform(0, 0.1, n)).reshape(shape)


def C(*shape: int) -> np.ndarray:
    return R(*shape) + 1j * R(*shape)


def spd(n: int, batch: tuple[int, ...] = ()) -> np.ndarray:
    a = R(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def np2(path: str):
    """A numpy 2 function, or None on numpy 1.x (its cases are then skipped)."""
    obj = np
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj


def _cross_takes_2d() -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            np.cross(np.ones(2), np.ones(2))
        return True
    except ValueError:
        return False


def case(fn, *args, _opts=None, **kwargs) -> None:
    if fn is None:
        return
    if getattr(fn, "__objclass__", None) is np.ndarray and args and isinstance(args[0], np.generic):
        fn = getattr(type(args[0]), fn.__name__)  # what the tracer records for x.sum() on a scalar
    name = registry.qualname(fn)
    CASES.append(pytest.param(fn, args, kwargs, _opts or {}, id=f"{name}-{len(CASES)}"))


# ---- Python operators ------------------------------------------------------------------------

BINARY_SHAPES = [
    (1.5, -0.7),                                   # Python floats
    (np.float64(1.2), np.float64(0.8)),            # numpy scalars
    (np.array(0.9), np.array(-1.3)),               # 0-d arrays
    (R(4), R(4)),
    (R(3, 1), R(1, 4)),                            # broadcasting both ways
    (R(3, 4), R(4)),
    (R(3, 4), 2.5),                                # array with a Python float
    (np.float64(0.3), R(2, 3)),
]
for fn in (operator.add, operator.sub, operator.mul, np.add, np.subtract, np.multiply):
    for a, b in BINARY_SHAPES:
        case(fn, a, b)
    x = R(3)
    case(fn, x, x)                                 # repeated argument
    case(fn, C(3), C(3))
for fn in (operator.truediv, np.divide):
    case(fn, 1.5, 2.5)
    case(fn, R(3, 4), P(4))
    case(fn, R(3, 1), P(1, 4))
    case(fn, np.array(0.5), P())
    x = P(3)
    case(fn, x, x)
    case(fn, C(3), C(3) + 3)
for fn in (operator.neg, operator.pos, np.negative, np.positive):
    case(fn, 1.5)
    case(fn, R(3, 4))
    case(fn, np.array(0.4))
case(operator.neg, C(2))
case(operator.mod, 5.3, 2.0)
case(operator.mod, np.array([5.3, -2.2, 7.7]), np.array([2.0, 1.5, 3.0]))
case(operator.mod, np.array([[5.3], [1.1]]), np.array([2.0, 3.0]))
for fn in (operator.pow, np.power, builtins.pow):
    case(fn, 1.7, 2)
    case(fn, 1.7, 0.6)
    case(fn, P(3, 4), 3)
    case(fn, P(3, 4), 0)
    case(fn, P(3, 1), R(1, 4))
    case(fn, P(4), np.array([1, 2, 3, 4]))
    case(fn, R(4), 2)
    x = P(3)
    case(fn, x, x)
case(np.float_power, P(3, 4), R(4))
case(np.float_power, 1.5, 2.5)
case(operator.pow, C(3), 3)

# ---- builtins and math -----------------------------------------------------------------------

for fn in (builtins.abs, operator.abs):
    case(fn, -1.3)
    case(fn, 2.2)
    case(fn, np.float64(-0.7))
    case(fn, R(3, 4))
    case(fn, 1.0 + 2.0j)
    case(fn, C(3))
case(builtins.float, np.float64(1.25))
case(builtins.float, np.array(0.75))
case(builtins.float, np.float32(0.5), _opts={"rtol": 1e-3, "eps": 1e-3})
case(builtins.complex, 1.5)
case(builtins.complex, 1.5, -0.5)
case(builtins.complex, np.float64(0.5), np.array(2.0))
for fn in (builtins.max, builtins.min):
    case(fn, 1.5, -0.5, 2.5)
    case(fn, np.float64(1.5), 0.25)
    case(fn, [0.5, 1.5, -2.5])
    case(fn, (0.5, 1.5))
    case(fn, D(5))
    case(fn, [1.0, 3.0, 2.0], key=lambda v: -v)

MATH_UNARY = [
    (math.sin, 0.7), (math.cos, 0.7), (math.tan, 0.4), (math.asin, 0.3), (math.acos, -0.4),
    (math.atan, 1.3), (math.sinh, 0.6), (math.cosh, -0.6), (math.tanh, 0.8), (math.asinh, 1.2),
    (math.acosh, 1.7), (math.atanh, 0.3), (math.exp, 0.9), (math.expm1, 0.2), (math.log, 1.7),
    (math.log1p, 0.6), (math.log2, 3.3), (math.log10, 4.5), (math.sqrt, 2.2), (math.fabs, -1.4),
    (math.erf, 0.4), (math.erfc, -0.3), (math.lgamma, 2.7), (math.lgamma, 0.3), (math.lgamma, -1.5),
    (math.gamma, 3.2), (math.gamma, 0.7), (math.degrees, 1.1), (math.radians, 30.0),
    (digamma, 0.6), (digamma, 7.5), (digamma, -0.4),
]
if hasattr(math, "exp2"):
    MATH_UNARY += [(math.exp2, 1.3), (math.cbrt, 2.5)]
for fn, x in MATH_UNARY:
    case(fn, x)
case(math.sin, np.float64(0.3))
case(math.exp, np.array(0.5))
case(math.log, 5.0, 2.0)
case(math.log, 5.0, 3.0)
case(math.atan2, 0.6, -1.2)
case(math.pow, 1.3, 2.7)
case(math.pow, 2.0, 3.0)
case(math.hypot, 3.0, 4.0)
case(math.hypot, 1.0, -2.0, 2.0)
case(math.copysign, -1.5, 2.0)
case(math.copysign, 1.5, -2.0)
case(math.fmod, 5.5, 2.0)
case(math.fmod, -5.5, 2.0)
case(math.remainder, 5.3, 2.0)
case(math.ldexp, 0.75, 3)
case(math.fsum, [0.1, 0.2, 0.3])
case(math.fsum, (0.5, np.float64(1.5)))
case(math.prod, [1.5, 2.0, -0.5])
case(math.prod, [1.5, 0.0, 2.0, 0.0], start=2.0)
case(math.prod, (0.0, 1.5, 2.0))

# ---- numpy elementwise -----------------------------------------------------------------------

UNARY = [
    (np.square, R), (np.sqrt, P), (np.cbrt, P), (np.reciprocal, P), (np.exp, R), (np.exp2, R),
    (np.expm1, R), (np.log, P), (np.log2, P), (np.log10, P), (np.log1p, P), (np.sin, R),
    (np.cos, R), (np.tan, U), (np.arcsin, U), (np.arccos, U), (np.arctan, R), (np.sinh, R),
    (np.cosh, R), (np.tanh, R), (np.arcsinh, R), (np.arccosh, lambda *s: P(*s) + 1.0),
    (np.arctanh, U), (np.deg2rad, R), (np.radians, R), (np.rad2deg, R), (np.degrees, R),
    (np.fabs, D), (np.absolute, D), (np.sinc, R), (np.real, R), (np.imag, R), (np.conjugate, R),
    (np.angle, R), (np.nan_to_num, R),
]
for fn, make in UNARY:
    case(fn, make(3, 4))
    case(fn, make())                                # 0-d array
    case(fn, np.float64(make()[()]))                # numpy scalar
case(np.ndarray.conj, C(3, 2))
case(np.ndarray.conjugate, C(3))
case(np.ndarray.conj, R(3))
for fn in (np.exp, np.log, np.sin, np.cos, np.tanh, np.sqrt, np.square, np.reciprocal,
           np.absolute, np.real, np.imag, np.conjugate, np.angle, np.log1p, np.expm1, np.arctan):
    case(fn, C(3, 2) + 2.0)
case(np.sinc, np.array([0.0, 0.5, -1.5]))
case(np.sign, C(3, 2))                              # complex sign z/|z| has a derivative
case(np.sign, D(3, 2))                              # real sign: zero
case(np.angle, C(3), deg=True)
case(np.nan_to_num, np.array([1.0, np.nan, np.inf, -2.0]), posinf=5.0, neginf=-5.0)
case(np.exp, 0.5)                                   # Python float into a ufunc
case(np.real, 0.5)
case(np.modf, R(3, 2) * 3.0)
case(np.ndarray.__array_wrap__, R(2, 3), R(4))
case(np.heaviside, np.array([0.0, 1.5, -1.0, 0.0]), 0.3, _opts={"wrt": (1,)})  # x1: a step
case(np.heaviside, R(3, 2), 0.3)
case(np.frexp, R(4) * 5.0)
case(np.frexp, 3.7)
case(np.real_if_close, R(3))
case(np.real_if_close, C(3))                        # stays complex
case(np.real_if_close, R(3) + 1e-15j)               # the real part
case(np.real_if_close, R(2) + 1e-9j, 1e9)           # tol positional

BINARY = [
    (np.logaddexp, R, R), (np.logaddexp2, R, R), (np.arctan2, R, R), (np.hypot, R, R),
    (np.maximum, D, D), (np.minimum, D, D), (np.fmax, D, D), (np.fmin, D, D),
    (np.remainder, P, P), (np.fmod, R, P), (np.copysign, D, R),
]
for fn, ma, mb in BINARY:
    case(fn, ma(3, 4), mb(3, 4))
    case(fn, ma(3, 1), mb(1, 4))
    case(fn, ma(), mb())
    case(fn, float(ma()[()]), mb(4))
for fn in (np.maximum, np.minimum, np.fmax, np.fmin):
    x = D(5)
    case(fn, x, x)                                  # ties split evenly
    if fn in (np.fmax, np.fmin):
        case(fn, np.array([1.0, np.nan, 3.0]), np.array([np.nan, 2.0, 1.0]))
case(np.remainder, np.array([5.3, -2.2, 7.7]), 2.0)
case(np.ldexp, R(3, 4), np.array([1, 2, 3, 4]))
case(np.ldexp, 0.75, 2)
for fn in (np.clip, np.ndarray.clip):
    x = D(4, 5)
    case(fn, x, -1.5, 2.5)
    case(fn, x, D(4, 1) * 0.3, 4.0)
    case(fn, x, None, D(5) * 0.5)
    case(fn, x, D(4, 5), D(4, 5))                  # lo > hi somewhere: numpy returns hi
case(np.clip, D(4, 5), min=-1.0)
case(np.clip, 0.5, 0.0, 1.0)
case(np.ndarray.clip, D(3), max=0.5)
case(np.where, D(3, 4) > 0, R(3, 4), R(3, 4))
case(np.where, D(3, 1) > 0, R(1, 4), 2.0)
case(np.where, np.array(True), 1.5, R(3))

# ---- reductions ------------------------------------------------------------------------------

for fn in (np.sum, np.ndarray.sum, np.mean, np.ndarray.mean, np.prod, np.ndarray.prod):
    x = R(3, 4, 2)
    case(fn, x)
    case(fn, x, axis=1)
    case(fn, x, axis=-1, keepdims=True)
    case(fn, x, axis=(0, 2))
    case(fn, x, 1)                                  # positional axis
    case(fn, x, None, None, None, True)             # positional keepdims
    case(fn, np.float64(1.5))
    case(fn, np.array(0.5))
    case(fn, C(3, 2), axis=0)
case(np.sum, 1.5)
case(np.sum, [0.5, np.float64(1.5), 2.0])           # a list argument: an array cotangent works
case(np.mean, [[0.5, 1.0], [np.float64(1.5), 2.0]], axis=0)
case(np.max, [0.5, 3.0, 2.0])
case(np.exp, [0.5, 1.0])
case(np.sum, R(3, 4), axis=1, where=np.array([True, False, True, True]))
case(np.sum, R(3, 4), initial=2.0)
case(np.mean, R(3, 4), axis=0, where=np.array([[True], [False], [True]]))
case(np.prod, np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [1.0, -2.0, 0.5]]), axis=1)
case(np.prod, np.array([1.5, 0.0, 2.0, 3.0]))
case(np.prod, R(3, 4), axis=1, initial=2.0)
case(np.prod, R(3, 4), axis=1, where=np.array([True, False, True, True]))
case(np.add.reduce, R(3, 4))
case(np.add.reduce, R(3, 4), axis=None)
case(np.add.reduce, R(3, 4), 1, keepdims=True)
case(np.multiply.reduce, R(3, 4))
case(np.multiply.reduce, np.array([[0.0, 2.0], [3.0, 0.0]]), axis=1)
for fn in (np.nansum, np.nanmean):
    x = R(3, 4)
    x[0, 1] = x[2, 3] = np.nan
    case(fn, x)
    case(fn, x, axis=1)
    case(fn, x, axis=0, keepdims=True)
for fn in (np.var, np.ndarray.var, np.std, np.ndarray.std):
    x = R(4, 5)
    case(fn, x)
    case(fn, x, axis=1)
    case(fn, x, axis=0, ddof=1)
    case(fn, x, 1, None, None, 1, True)             # positional ddof, keepdims
    case(fn, C(4, 3), axis=0)
case(np.var, R(4, 5), axis=1, correction=1)
case(np.std, np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]]), axis=1)  # std == 0 row
for fn in (np.max, np.min, np.amax, np.amin, np.ndarray.max, np.ndarray.min, np.nanmax, np.nanmin):
    x = D(3, 4, 2)
    case(fn, x)
    case(fn, x, axis=1)
    case(fn, x, axis=(0, 2), keepdims=True)
    case(fn, x, -1)
    case(fn, np.array([1.0, 3.0, 3.0, 2.0]))      # a tie: split evenly
    case(fn, np.array([[2.0, 2.0], [1.0, 5.0], [5.0, 5.0]]), axis=1)
    case(fn, np.float64(0.5))
case(np.max, D(3, 4), axis=1, initial=10.0)
case(np.max, D(3, 4), axis=1, where=np.array([True, False, True, True]), initial=-10.0)
case(np.nanmax, np.array([[1.0, np.nan, 3.0], [np.nan, 2.0, -1.0]]), axis=1)
case(np.nanmin, np.array([[1.0, np.nan, 3.0], [np.nan, 2.0, -1.0]]))
for fn in (np.maximum.reduce, np.minimum.reduce):
    case(fn, D(3, 4))
    case(fn, D(3, 4), axis=1)
    case(fn, D(3, 4), axis=None)
    case(fn, np.array([[2.0, 2.0], [1.0, 2.0]]))
case(np.ptp, D(3, 4))
case(np.ptp, D(3, 4), axis=1)
case(np.ptp, D(3, 4), axis=0, keepdims=True)
case(np.ptp, np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]), axis=1)

# ---- cumulative and sorting ------------------------------------------------------------------

for fn in (np.cumsum, np.ndarray.cumsum, np.cumprod, np.ndarray.cumprod):
    case(fn, R(3, 4))
    case(fn, R(3, 4), axis=1)
    case(fn, R(3, 4), 0)
    case(fn, R(2, 3, 2), axis=-2)
    case(fn, np.float64(0.7))
case(np.cumprod, np.array([[1.5, 0.0, 2.0, -1.0], [0.0, 1.2, 0.0, 3.0], [1.1, 2.0, 0.0, 0.0]]), axis=1)
case(np.cumprod, np.array([2.0, 0.5, 0.0, 3.0]))
case(np.cumprod, C(4))
for fn in (np.add.accumulate, np.multiply.accumulate):
    case(fn, R(3, 4))
    case(fn, R(3, 4), axis=1)
case(np.multiply.accumulate, np.array([1.5, 0.0, 2.0, 0.0, 3.0]))
for fn in (np.sort, ops.sort_inplace):
    case(fn, D(5))
    case(fn, D(3, 4))
    case(fn, D(3, 4), axis=0)
    case(fn, D(3, 4), 0)
    case(fn, np.array([2.0, 1.0, 2.0, 0.5]))      # a tie
case(np.sort, D(3, 4), axis=None)
case(np.unique, D(6))                               # distinct values: a sort
case(np.unique, D(2, 2), return_counts=True)

# ---- statistics helpers and scalar constructors ----------------------------------------------

case(np.average, R(3, 4))
case(np.average, R(3, 4), 1)
case(np.average, R(3, 4), 0, P(3, 4))
case(np.average, R(3, 4), 1, P(4), keepdims=True)
case(np.average, R(3, 4), None, P(3, 4))
case(np.average, R(3, 4), 0, P(3), True)              # returned=True: (average, sum of weights)
case(np.average, R(3, 4), axis=1, weights=P(4))       # keyword weights: a constant here (see test_grad)
case(np.median, R(5))
case(np.quantile, R(7), 0.3)
case(np.quantile, R(7), np.array([0.1, 0.55, 0.9]))
case(np.quantile, R(4, 5), 0.3, 1)
case(np.quantile, R(4, 5), np.array([0.3, 0.8]), axis=0, keepdims=True)
case(np.quantile, R(6), 0.37, method="lower")
case(np.quantile, R(6), 0.37, method="midpoint")
case(np.quantile, np.array([1.0, 2.0, 2.0, 3.0]), 0.5)  # ties share
case(np.percentile, R(7), 30.0)
case(np.percentile, R(3, 5), np.array([20.0, 65.0]), axis=1)
case(np.interp, np.array([-1.0, 0.5, 1.7, 4.9, 9.0]), np.arange(6.0), R(6))
case(np.interp, np.array([0.3, 2.5]), np.array([0.0, 0.7, 2.0, 3.1]), R(4), -1.0, 2.0)
case(np.interp, 0.7, np.arange(3.0), C(3))            # complex fp
case(np.median, R(4))
case(np.median, R(3, 4), axis=1)
case(np.median, R(3, 5), 0, keepdims=True)
case(np.median, np.array([1.0, 2.0, 2.0, 3.0, 0.5]))  # a tie at the median
case(np2("trapezoid"), R(5))
case(np2("trapezoid"), R(5), np.cumsum(P(5)))
case(np2("trapezoid"), R(3, 5), np.cumsum(P(5)))
case(np2("trapezoid"), R(4, 3), np.cumsum(P(4, 3), axis=0), axis=0)
case(np2("trapezoid"), R(5), dx=0.3)
case(np2("trapezoid"), R(5), None, 0.3)                # positional dx: the integral is linear in it
case(np2("trapezoid"), R(3, 4), None, 0.3, 0)
for fn in (np.float64, np.float32, np.complex128, np.complex64):
    opts = {"rtol": 1e-3, "atol": 1e-5, "eps": 1e-3} if fn in (np.float32, np.complex64) else None
    case(fn, 1.5, _opts=opts)
    case(fn, np.array(0.5), _opts=opts)
case(np.float64, np.float32(0.5), _opts={"rtol": 1e-3, "atol": 1e-5, "eps": 1e-3})
case(np.complex128, C(1)[0])

# ---- indexing and functional updates ---------------------------------------------------------

X = R(4, 5)
IDX = [
    1, -1, slice(1, 3), (1, 2), (slice(None), 2), (Ellipsis, 1), (None, 2), (slice(None, None, -2),),
    np.array([0, 2, 2, 3, 0]),                                     # repeats accumulate
    (np.array([0, 1, 1]), np.array([4, 4, 4])),
    (slice(1, None), np.array([0, 0, 3])),
    X > 0,                                                         # boolean mask
    (np.array([True, False, True, True]), slice(None, 3)),
    (np.array([[0, 1], [1, 1]]), Ellipsis),
    [0, 0, 3],
]
for index in IDX:
    case(operator.getitem, X, index)
case(operator.getitem, R(6), np.array([5, 5, 0, 1, 5]))
case(operator.getitem, np.array(1.5), ())
case(operator.getitem, np.array(1.5), None)
case(operator.getitem, C(4), np.array([1, 1, 3]))
case(operator.getitem, [0.5, R(3), 1.5], 1)                  # lists: a list cotangent
case(operator.getitem, (0.5, np.float64(2.0), 1.5), -2)
case(operator.getitem, [0.5, R(2), 1.5, 2.5], slice(1, None, 2))

SETS = [
    ((1, 2), 0.7),
    (slice(1, 3), R(2, 5)),
    ((slice(None), 1), R(4)),
    (slice(None), R(5)),                                           # v broadcast over rows
    (np.array([0, 2, 2]), R(3, 5)),                                # repeated row: the last write wins
    ((np.array([1, 1, 3]), np.array([0, 0, 4])), np.array([1.0, 2.0, 3.0])),
    (X > 0.5, 2.5),
    ((np.array([True, False, True, True]), 0), R(3)),
]
for index, v in SETS:
    case(ops.setitem, R(4, 5), index, v)
case(ops.setitem, R(5), np.array([1, 3]), 0.5)
for index, v in [(np.array([0, 2, 2, 0]), R(4, 5)), ((1, np.array([1, 1, 4])), R(3)),
                 (slice(1, 3), 0.5), (X > 0, 1.5)]:
    case(ops.add_at, R(4, 5), index, v)
case(ops.fill, R(3, 4), 0.5)
case(ops.fill, R(3), np.float64(2.0))
case(ops.copyto, R(3, 4), R(3, 4))
case(ops.copyto, R(3, 4), R(4))
case(ops.copyto, R(3, 4), 2.0)
case(ops.copyto, R(3, 4), R(4), R(3, 4) > 0)          # where=
case(ops.copyto, R(3, 4), R(3, 1), R(4) > 0)
case(ops.fill_diagonal, R(4, 4), 0.5)
case(ops.fill_diagonal, R(3, 5), R(3))
case(ops.fill_diagonal, R(7, 3), R(2), True)
case(ops.fill_diagonal, R(3, 3, 3), R(5))
case(ops.sum_to, R(3, 4), (1, 4))
case(ops.sum_to, R(2, 3, 4), (4,))
case(ops.sum_to, R(3), (3,))
case(ops.sum_to, R(3), (1, 3))
if hasattr(ops, "to_dtype"):
    case(ops.to_dtype, R(3), np.dtype(np.float64), False)
    case(ops.to_dtype, C(3), np.dtype(np.float64), False)
    case(ops.to_dtype, np.array(0.5), np.dtype(np.float64), True)
    case(ops.to_dtype, R(3), np.dtype(np.complex128), False)
    case(ops.to_dtype, 0.5, np.dtype(np.float32), True, _opts={"rtol": 1e-3, "atol": 1e-5, "eps": 1e-3})

# ---- reshaping -------------------------------------------------------------------------------

F = np.asfortranarray(R(3, 4))
case(np.reshape, R(3, 4), (4, 3))
case(np.reshape, R(3, 4), (2, -1))
case(np.reshape, R(3, 4), (12,), "F")
case(np.reshape, F, (4, 3), "A")
case(np.reshape, R(2, 3), shape=(3, 2))
case(np.reshape, 1.5, (1, 1))
case(np.ndarray.reshape, R(3, 4), 4, 3)
case(np.ndarray.reshape, R(3, 4), (2, 6))
case(np.ndarray.reshape, R(3, 4), -1, _opts={"fn_kwargs": {"order": "F"}})
case(np.ndarray.reshape, np.float64(2.0), (1,))
for fn in (np.ravel, np.ndarray.ravel, np.ndarray.flatten):
    case(fn, R(3, 4))
    case(fn, R(3, 4), "F")
    case(fn, F, "K")
    case(fn, F.T, "A")
case(np.ravel, 2.5)
case(np.expand_dims, R(3, 4), 1)
case(np.expand_dims, R(3, 4), (0, -1))
case(np.expand_dims, 1.5, 0)
for fn in (np.squeeze, np.ndarray.squeeze):
    case(fn, R(3, 1, 4, 1))
    case(fn, R(3, 1, 4, 1), 1)
    case(fn, R(1, 1), axis=(0, 1))
for fn in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    case(fn, 1.5)
    case(fn, R(3))
    case(fn, R(2, 3))
    case(fn, R(3), R(2, 2), np.array(0.5))
case(np.transpose, R(3, 4))
case(np.transpose, R(2, 3, 4), (2, 0, 1))
case(np.transpose, R(2, 3, 4), axes=(-1, 0, 1))
case(np.transpose, R(4))
case(np.ndarray.transpose, R(2, 3, 4))
case(np.ndarray.transpose, R(2, 3, 4), 1, 2, 0)
case(np.ndarray.transpose, R(2, 3, 4), (1, 2, 0))
case(np.ndarray.transpose, R(2, 3, 4), None)
case(np2("matrix_transpose"), R(2, 3, 4))
case(np2("linalg.matrix_transpose"), R(3, 4))
for fn in (np.swapaxes, np.ndarray.swapaxes):
    case(fn, R(2, 3, 4), 0, 2)
    case(fn, R(2, 3, 4), -1, 1)
case(np.moveaxis, R(2, 3, 4), 0, -1)
case(np.moveaxis, R(2, 3, 4), (0, 1), (2, 0))
case(np.rollaxis, R(2, 3, 4, 5), 3, 1)
case(np.lib.stride_tricks.sliding_window_view, R(7), 3)
case(np.lib.stride_tricks.sliding_window_view, R(5, 4), (2, 2))
case(np.lib.stride_tricks.sliding_window_view, R(5, 4), 2, axis=0)
case(np.lib.stride_tricks.as_strided, R(6), (4, 3), (8, 8))
case(np.rollaxis, R(2, 3, 4, 5), 1, 4)
case(np.rollaxis, R(2, 3, 4, 5), -1)
case(np.rollaxis, R(2, 3, 4, 5), 2, 0)
case(np.rollaxis, R(2, 3, 4, 5), 0, start=-1)
case(np.broadcast_to, R(4), (3, 4))
case(np.broadcast_to, R(3, 1), (2, 3, 4))
case(np.broadcast_to, 1.5, (2, 2))
case(np.broadcast_arrays, R(3, 1), R(4), 2.0)

# ---- copies, construction --------------------------------------------------------------------

for fn in (np.array, np.asarray, np.asanyarray, np.ascontiguousarray, np.asfortranarray, np.copy):
    case(fn, R(3, 4))
    case(fn, 1.5)
    case(fn, [R(3), R(3)])
case(np.array, [[1.5, 2.0], [np.float64(0.5), 3.0]])
case(np.array, [1.5, 2, np.array(0.5)])
case(np.array, (R(2), [1.0, 2.5]))
case(np.array, R(3), ndmin=3)
case(np.array, [0.5, 1.5], ndmin=2)
case(np.array, R(3), dtype=np.float32, _opts={"rtol": 1e-3, "atol": 1e-4, "eps": 1e-3})
case(np.array, R(3), dtype=int)
case(np.asarray, [[0.5, 1.5, 2.5]])
case(np.asarray, C(3))
case(np.ndarray.copy, R(3, 4))
case(np.ndarray.copy, np.float64(0.25))
case(np.ndarray.copy, R(3, 4), "F")
case(np.ndarray.astype, R(3, 4), np.float64)
case(np.ndarray.astype, R(3, 4), np.complex128)
case(np.ndarray.astype, R(3), np.int64)
case(np.ndarray.astype, R(3), np.float32, _opts={"rtol": 1e-3, "atol": 1e-4, "eps": 1e-3})
case(np.ndarray.view, R(3, 4))                       # the same values (another dtype: refused, see
case(np.ndarray.view, R(3), np.ndarray)              # tests/test_trust_roundtrips.py)
case(np.ndarray.view, R(2, 3), np.float64)
case(np.ndarray.view, np.float64(0.75))              # x[0].view() of a numpy scalar
case(np.frombuffer, R(3, 4))                         # an array's memory, as its own dtype
case(np.frombuffer, R(5), np.float64, 2, 8)          # count and offset
case(np.ndarray.item, R(1, 1))
case(np.ndarray.item, R(3, 4), 5)
case(np.ndarray.item, R(3, 4), -2)
case(np.ndarray.item, R(3, 4), 1, 2)
case(np.ndarray.item, R(3, 4), (2, -1))
case(np.ndarray.item, np.float64(0.5))
case(np.ndarray.tolist, R(3, 2))
case(np.ndarray.tolist, R(4))
case(np.ndarray.tolist, np.array(0.5))
case(np.full, (3, 4), 1.5)
case(np.full, (3, 4), R(4))
case(np.full, (2,), np.float64(0.5))
case(np.full_like, R(3, 4), 0.5)
case(np.full_like, R(3, 4), R(3, 1))
case(np.linspace, 0.5, 2.5)
case(np.linspace, -1.0, 2.0, 7)
case(np.linspace, 0.0, 1.5, 5, False)
case(np.linspace, R(3), R(3), 4)
case(np.linspace, R(2), 1.0, 5, axis=1)

# ---- joining and splitting -------------------------------------------------------------------

for fn in (np.concatenate,):
    case(fn, [R(2, 3), R(4, 3)])
    case(fn, (R(3, 2), R(3, 1), R(3, 4)), 1)
    case(fn, [R(2, 3), R(3)], axis=None)
    case(fn, [R(3), [0.5, 1.5]])
    x = R(3)
    case(fn, [x, x])
    case(fn, [R(2), np.arange(3)])                # an integer piece gets no cotangent
case(np2("concat"), [R(2, 2), R(1, 2)], axis=0)
case(np.stack, [R(3), R(3)])
case(np.stack, (R(2, 3), R(2, 3), R(2, 3)), axis=-1)
case(np.stack, [R(2), [0.5, 1.5]], 1)
case(np.stack, [0.5, np.float64(1.5)])
case(np.hstack, [R(3), R(2)])
case(np.hstack, (R(2, 3), R(2, 1)))
case(np.hstack, [0.5, R(2)])
case(np.vstack, [R(3), R(2, 3)])
case(np.vstack, [R(2, 2), R(1, 2)])
case(np.dstack, [R(3), R(3)])
case(np.dstack, [R(2, 3), R(2, 3, 2)])
case(np.column_stack, [R(3), R(3, 2)])
case(np.column_stack, (R(3), R(3)))
case(np.append, R(3), R(2))
case(np.append, R(2, 3), R(2, 2), 1)
case(np.append, R(2, 3), 1.5)
case(np.split, R(6, 2), 3)
case(np.split, R(6, 2), [1, 4])
case(np.split, R(2, 6), [2], axis=1)
case(np.array_split, R(7), 3)
case(np.array_split, R(2, 5), 2, 1)
case(np.hsplit, R(2, 4), 2)
case(np.hsplit, R(6), [1, 3])
case(np.vsplit, R(4, 2), 2)
case(np.dsplit, R(2, 2, 4), [1])

# ---- gathers and rearrangements --------------------------------------------------------------

for fn in (np.diagonal, np.ndarray.diagonal):
    case(fn, R(4, 4))
    case(fn, R(3, 5), 1)
    case(fn, R(3, 5), -1)
    case(fn, R(2, 3, 4), 0, 1, 2)
    case(fn, R(2, 3, 4), axis1=-1, axis2=0)
case(np2("linalg.diagonal"), R(2, 3, 3))
case(np2("linalg.diagonal"), R(3, 4), offset=1)
for fn in (np.take, np.ndarray.take):
    case(fn, R(3, 4), np.array([0, 5, 5, 11]))
    case(fn, R(3, 4), np.array([2, 0, 2]), 1)
    case(fn, R(3, 4), np.array([[1, 1], [0, 2]]), axis=0)
    case(fn, R(5), 7, mode="wrap")
    case(fn, R(5), np.array([-1, 9]), mode="clip")
case(np.take_along_axis, R(3, 4), np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]]), 1)
case(np.take_along_axis, R(3, 4), np.argsort(R(3, 4), axis=0), axis=0)
case(np.take_along_axis, R(5), np.array([4, 0, 4]), None)
case(np.resize, R(2, 3), (4, 4))
case(np.resize, R(4), (2, 2))
case(np.delete, R(3, 4), [0, 2], 1)
case(np.delete, R(5), 1)
case(np.diag, R(4))
case(np.diag, R(3), 1)
case(np.diag, R(3), k=-2)
case(np.diag, R(3, 5))
case(np.diag, R(4, 3), -1)
case(np.diagflat, R(3))
case(np.diagflat, R(2, 2), 1)
case(np.compress, np.array([True, False, True]), R(3, 2), axis=0)
case(np.compress, [False, True], R(3, 2), 1)
case(np.compress, np.array([True, True, False, True]), R(2, 3))
case(np.extract, np.array([[True, False], [True, True]]), R(2, 2))
case(np.flip, R(3, 4))
case(np.flip, R(3, 4), 1)
case(np.flip, R(2, 3, 4), axis=(0, 2))
case(np.fliplr, R(3, 4))
case(np.flipud, R(3, 4))
case(np.roll, R(5), 2)
case(np.roll, R(3, 4), -1, 1)
case(np.roll, R(3, 4), (1, 2), axis=(0, 1))
case(np.roll, R(3, 4), 5)
case(np.rot90, R(3, 4))
case(np.rot90, R(3, 4), 3)
case(np.rot90, R(2, 3, 4), 1, (1, 2))
case(np.rot90, R(3, 4), k=-1)
for fn in (np.triu, np.tril):
    case(fn, R(4, 4))
    case(fn, R(3, 5), 1)
    case(fn, R(2, 3, 3), k=-1)
for fn in (np.trace, np.ndarray.trace):
    case(fn, R(4, 4))
    case(fn, R(3, 5), 1)
    case(fn, R(2, 3, 3), 0, 1, 2)
    case(fn, R(3, 4, 2), offset=-1, axis1=1, axis2=0)
case(np2("linalg.trace"), R(2, 3, 3))
case(np2("linalg.trace"), R(3, 4), offset=1)
case(np.tile, R(3), 2)
case(np.tile, R(2, 3), (2, 1, 3))
case(np.tile, R(2, 3), (2,))
case(np.tile, 1.5, 3)
for fn in (np.repeat, np.ndarray.repeat):
    case(fn, R(2, 3), 2)
    case(fn, R(2, 3), 3, 1)
    case(fn, R(2, 3), np.array([1, 0, 2]), axis=1)
    case(fn, R(2, 3), [2], axis=0)
    case(fn, R(4), np.array([0, 3, 1, 2]))
case(np.repeat, 1.5, 3)
case(np.pad, R(3, 4), 1)
case(np.pad, R(3, 4), ((1, 0), (2, 3)), constant_values=1.5)
case(np.pad, R(4), (2, 1), "constant")
for mode in ("edge", "reflect", "symmetric", "wrap"):
    case(np.pad, R(3, 4), ((2, 1), (3, 2)), mode)
    case(np.pad, R(5), 3, mode=mode)
case(np.diff, R(5))
case(np.diff, R(3, 5), 2)
case(np.diff, R(3, 5), axis=0)
case(np.diff, R(4, 3), 1, 0, prepend=0.5, append=R(1, 3))
case(np.diff, R(6), 3, prepend=R(2))
case(np.select, [D(3, 4) > 0.5, D(3, 4) < -0.5], [R(3, 4), R(3, 4)])
case(np.select, [D(3, 4) > 0, D(4) > 0], (R(4), R(3, 4)), R(3, 1))
case(np.select, (D(5) > 0, D(5) > 1), [R(5), 2.0], 0.5)
case(np.bincount, np.array([0, 2, 2, 5, 1]), R(5))
case(np.bincount, np.array([1, 1, 3]), R(3), 6)

# ---- products --------------------------------------------------------------------------------

MM = [
    (R(3, 4), R(4, 5)), (R(4), R(4)), (R(4), R(4, 5)), (R(3, 4), R(4)), (R(2, 3, 4), R(4, 5)),
    (R(3, 4), R(2, 4, 5)), (R(2, 1, 3, 4), R(3, 4, 2)), (R(4), R(2, 4, 3)), (R(2, 3, 4), R(4)),
]
for fn in (np.matmul, operator.matmul, np2("linalg.matmul")):
    for a, b in MM:
        case(fn, a, b)
    x = R(3, 3)
    case(fn, x, x)
    case(fn, C(2, 3), C(3, 2))
DOT = [(R(3, 4), R(4, 5)), (R(4), R(4)), (R(4), R(4, 5)), (R(3, 4), R(4)), (R(2, 3, 4), R(4)),
       (R(2, 3, 4), R(5, 4, 2)), (R(4), R(2, 4, 3)), (2.5, R(3)), (R(2, 3), np.float64(0.5)),
       (R(3, 4), R(2, 4, 3))]
for fn in (np.dot, np.ndarray.dot):
    for a, b in DOT:
        if fn is np.ndarray.dot and not isinstance(a, np.ndarray):
            continue
        case(fn, a, b)
    case(fn, C(2, 3), C(3))
case(np.vdot, R(3), R(3))
case(np.vdot, R(2, 3), R(3, 2))
case(np.vdot, C(4), C(4))
case(np2("vecdot"), R(3, 4), R(4))
case(np2("vecdot"), R(4, 3), R(4, 3), axis=0)
case(np2("vecdot"), C(2, 3), C(2, 3))
case(np2("linalg.vecdot"), R(3, 4), R(3, 4))
case(np.inner, R(3), R(3))
case(np.inner, R(2, 3), R(4, 3))
case(np.inner, R(2, 5, 3), R(3))
case(np.inner, 1.5, R(2, 2))
for fn in (np.outer, np2("linalg.outer")):
    case(fn, R(3), R(4))
    case(fn, C(2), C(3))
case(np.outer, R(2, 2), R(3))
case(np.tensordot, R(3, 4, 5), R(4, 5, 2))
case(np.tensordot, R(3, 4, 5), R(5, 3), ([0, 2], [1, 0]))
case(np.tensordot, R(3, 4), R(4, 2), 1)
case(np.tensordot, R(3, 4), R(2, 5), 0)
case(np.tensordot, R(2, 3, 4), R(4, 3, 2), axes=([1, 2], [1, 0]))
case(np.tensordot, R(3, 4), R(3, 5), axes=(0, 0))
case(np2("linalg.tensordot"), R(3, 4, 5), R(4, 5, 2))
case(np2("linalg.tensordot"), R(3, 4), R(2, 3), axes=([0], [1]))
case(np.kron, R(2, 3), R(3, 2))
case(np.kron, R(3), R(2))
case(np.kron, R(2, 2), R(3))
case(np.kron, R(2), R(2, 3, 2))
case(np.kron, 1.5, R(2))
case(np.cross, R(3), R(3))
case(np.cross, R(4, 3), R(3))
case(np.cross, R(2, 1, 3), R(4, 3))
case(np2("linalg.cross"), R(4, 3), R(4, 3))
case(np2("linalg.cross"), R(3, 4), R(3, 4), axis=0)
case(np.cross, R(3, 4), R(4, 3), axisa=0)
case(np.cross, R(3, 2), R(3, 2), axis=0)
if _cross_takes_2d():  # (numpy 2.5 dropped 2-vectors)
    case(np.cross, R(4, 2), R(4, 2))                # 2-vectors: the z component
    case(np.cross, R(4, 2), R(4, 3))                # 2- with 3-vectors
    case(np.cross, R(2), R(2, 3))
    case(np.cross, R(3, 2), R(2, 2), axisa=0, axisb=0, axisc=0)
for fn in (np.add.outer, np.subtract.outer, np.multiply.outer):
    case(fn, R(3), R(4))
    case(fn, R(2, 2), R(3))
    case(fn, 1.5, R(2))
case(np.multiply.outer, C(2), C(3))

EINSUM = [
    ("ij,jk->ik", R(3, 4), R(4, 5)), ("ij,jk", R(3, 4), R(4, 5)), ("i,i->", R(4), R(4)),
    ("i,i", R(4), R(4)), ("ij->ji", R(3, 4)), ("ij->", R(3, 4)), ("ii->i", R(3, 3)), ("ii", R(3, 3)),
    ("iij->ij", R(3, 3, 2)), ("iii->i", R(2, 2, 2)), ("ij->i", R(3, 4)), ("ij,j->ij", R(3, 4), R(4)),
    ("...ij,...jk->...ik", R(2, 3, 4), R(4, 5)), ("...i,...i->...", R(2, 3), R(3)),
    ("i...,i->...", R(3, 2, 2), R(3)), ("ij,jk,kl->il", R(2, 3), R(3, 4), R(4, 2)),
    ("bij,bjk->bik", R(2, 3, 4), R(2, 4, 2)), ("ij,ij->ij", R(3, 1), R(3, 4)),
    (",i->i", 2.5, R(3)), ("Ba,aC", R(2, 3), R(3, 4)), ("i,j,k->ijk", R(2), R(3), R(2)),
    ("ij,ij", R(3, 4), R(3, 4)), ("ba", R(2, 3)), (" i j , j k -> i k ", R(2, 3), R(3, 2)),
    ("ij,ik->jk", C(3, 2), C(3, 2)),
    ("...ij,...jk->...ik", R(2, 1, 3, 4), R(5, 4, 2)),          # size-1 batch axis broadcasts
    ("i...->...", R(3, 2)), ("...ii->...i", R(2, 3, 3)), ("...j", R(2, 3)),
    ("ij...,jk...", R(2, 3), R(3, 2, 4)),
]
for spec, *operands in EINSUM:
    case(np.einsum, spec, *operands)
x = R(3, 3)
case(np.einsum, "ij,jk->ik", x, x)
case(np.einsum, "ij,jk->ik", R(3, 4), R(4, 2), optimize=True)
EINSUM_SUBLISTS = [  # einsum(op0, sublist0, op1, sublist1, ..., [output sublist]), as autograd's tests call it
    (R(3, 4), [0, 1], R(4, 5), [1, 2], [0, 2]), (R(3, 4), [0, 1], R(4, 5), [1, 2]),
    (R(3, 4), [0, 1], [1, 0]), (R(2, 3, 4), [Ellipsis, 0, 1], R(4, 2), [1, 2], [Ellipsis, 0, 2]),
    (R(3, 4), [0, 1], R(4, 5), [1, 2], R(5), [2], [0]), (R(3, 3), [0, 0], [0]),
    (C(3, 2), [0, 1], C(3, 2), [0, 2], [1, 2]), (R(2, 3), [26, 1], R(3), [1], [26]),
]
for operands in EINSUM_SUBLISTS:
    case(np.einsum, *operands)
for mode in ("full", "same", "valid"):
    case(np.convolve, R(5), R(3), mode)
    case(np.convolve, R(3), R(6), mode=mode)
    case(np.correlate, R(5), R(3), mode)
    case(np.correlate, R(2), R(4), mode=mode)
case(np.convolve, C(4), C(2))
case(np.correlate, C(4), C(3), "full")

# ---- numpy.linalg ----------------------------------------------------------------------------

case(np.linalg.inv, spd(3) + R(3, 3))
case(np.linalg.inv, spd(2, (2,)))
case(np.linalg.inv, C(3, 3) + 3 * np.eye(3))
case(np.linalg.det, R(3, 3) + 2 * np.eye(3))
case(np.linalg.det, R(2, 3, 3) + 2 * np.eye(3))
case(np.linalg.det, C(2, 2) + 2 * np.eye(2))
case(np.linalg.det, [[1.5, 0.5], [np.float64(-0.5), 2.0]])
case(np.linalg.slogdet, R(3, 3) - 2 * np.eye(3))
case(np.linalg.slogdet, spd(2, (3,)))
case(np.linalg.slogdet, C(3, 3) + 2 * np.eye(3))
case(np.linalg.solve, R(3, 3) + 3 * np.eye(3), R(3))
case(np.linalg.solve, R(3, 3) + 3 * np.eye(3), R(3, 2))
case(np.linalg.solve, R(2, 3, 3) + 3 * np.eye(3), R(3))
case(np.linalg.solve, R(2, 3, 3) + 3 * np.eye(3), R(2, 3, 4))
case(np.linalg.solve, R(3, 3) + 3 * np.eye(3), R(2, 3, 1))
case(np.linalg.solve, C(2, 2) + 2 * np.eye(2), C(2))
case(np.linalg.pinv, R(4, 3))
case(np.linalg.lstsq, R(6, 3), R(6), rcond=None)      # overdetermined: residuals too
case(np.linalg.lstsq, R(6, 3), R(6, 2), None)
case(np.linalg.lstsq, R(3, 5), R(3), rcond=None)      # underdetermined: minimum norm
case(np.linalg.eigvals, R(4, 4))
_S = np.random.RandomState(7).randn(4, 4) + 3 * np.eye(4)
case(np.linalg.eig, _S @ np.diag([1.0, 2.0, 3.5, 5.0]) @ np.linalg.inv(_S))  # real eigenvectors: unit norm fixes them
case(np.linalg.eigvals, C(4, 4))
case(np.linalg.eigvals, R(2, 3, 3))
case(np.linalg.pinv, R(2, 5))
case(np.linalg.pinv, R(2, 3, 2))
case(np.linalg.pinv, R(3, 3) + 3 * np.eye(3), 1e-12)
case(np.linalg.matrix_power, R(3, 3) * 0.5, 3)
case(np.linalg.matrix_power, R(3, 3) * 0.5, 1)
case(np.linalg.matrix_power, R(2, 3, 3) * 0.5, 2)
case(np.linalg.matrix_power, R(3, 3) + 3 * np.eye(3), -2)
case(np.linalg.matrix_power, R(3, 3), 0)
case(np.linalg.multi_dot, [R(2, 3), R(3, 4), R(4, 2)])
case(np.linalg.multi_dot, (R(3), R(3, 4), R(4, 2), R(2)))
case(np.linalg.multi_dot, [R(3), R(3, 2), R(2, 5)])
case(np.linalg.eigh, spd(4))
case(np.linalg.eigh, R(3, 3))                      # reads the lower triangle only
case(np.linalg.eigh, R(3, 3), "U")
case(np.linalg.eigh, spd(3, (2,)), UPLO="L")
case(np.linalg.eigvalsh, R(4, 4))
case(np.linalg.eigvalsh, R(3, 3), UPLO="U")
case(np.linalg.cholesky, spd(4))
case(np.linalg.cholesky, spd(3) + np.triu(R(3, 3), 1))    # upper triangle ignored
case(np.linalg.cholesky, spd(3) + np.tril(R(3, 3), -1), upper=True)
case(cho_inverse, np.linalg.cholesky(spd(4)))                  # K^-1 from K's factor (passes/structure.py)
case(np.linalg.cholesky, spd(3, (2,)))
case(np.linalg.svd, R(4, 3), full_matrices=False)
case(np.linalg.svd, R(3, 5), full_matrices=False)
case(np.linalg.svd, R(3, 3))
case(np.linalg.svd, R(4, 3))                       # full U, one extra column: exact
case(np.linalg.svd, R(3, 4))
case(np.linalg.svd, R(2, 4, 3), False)
case(np.linalg.svd, R(4, 3), compute_uv=False)
case(np.linalg.svd, R(2, 3, 5), False, False)
case(np2("linalg.svdvals"), R(4, 3))
case(np.linalg.qr, R(4, 3))
case(np.linalg.qr, R(3, 3))
case(np.linalg.qr, R(3, 5))
case(np.linalg.qr, R(2, 4, 3))
case(np.linalg.qr, R(4, 3), "r")
case(np.linalg.qr, R(3, 5), mode="complete")
NORMS = [
    (R(5), {}), (R(5), {"ord": 1}), (D(5), {"ord": np.inf}), (D(5), {"ord": -np.inf}),
    (R(5), {"ord": 3}), (D(5) + 0.3, {"ord": 0.5}), (R(5), {"ord": 0}), (R(3, 4), {}),
    (R(3, 4), {"ord": "fro"}), (R(3, 4), {"ord": "nuc"}), (R(3, 4), {"ord": 2}), (R(3, 4), {"ord": -2}),
    (R(3, 4), {"ord": 1}), (R(3, 4), {"ord": -1}), (R(3, 4), {"ord": np.inf}), (R(3, 4), {"ord": -np.inf}),
    (R(3, 4), {"axis": 1}), (R(3, 4), {"axis": 0, "keepdims": True}), (R(3, 4), {"axis": -1, "ord": 1}),
    (R(2, 3, 4), {}), (R(2, 3, 4), {"axis": (1, 2)}), (R(2, 3, 4), {"axis": (2, 0), "ord": 1}),
    (R(2, 3, 4), {"axis": (0, 1), "ord": "nuc", "keepdims": True}), (R(3, 4), {"keepdims": True}),
    (np.array([1.0, -3.0, 3.0]), {"ord": np.inf}), (np.zeros(3), {}), (C(4), {}), (C(3, 2), {"ord": "fro"}),
]
for x, kw in NORMS:
    case(np.linalg.norm, x, **kw)
case(np.linalg.norm, R(3, 4), 1, 1)               # positional ord, axis
case(np.linalg.norm, P(5), 3.0)                     # a float ord is differentiated too
case(np.linalg.norm, P(3, 4) * np.sign(R(3, 4)), 0.7, 1)  # away from 0: p < 1 is singular there
case(np2("linalg.vector_norm"), R(3, 4))
case(np2("linalg.vector_norm"), R(3, 4), axis=(0, 1), ord=3)
case(np2("linalg.vector_norm"), D(3, 4), axis=1, ord=np.inf, keepdims=True)
case(np2("linalg.matrix_norm"), R(2, 3, 4))
case(np2("linalg.matrix_norm"), R(3, 4), ord=2, keepdims=True)
case(np2("linalg.matrix_norm"), R(3, 4), ord=-np.inf)

# ---- numpy.fft -------------------------------------------------------------------------------

FFT = np.fft
for fn in (FFT.fft, FFT.ifft):
    case(fn, R(6))
    case(fn, C(5))
    case(fn, C(3, 4), 7, 0)                          # zero-padded along axis 0
    case(fn, C(3, 6), n=4, norm="ortho")             # truncated
    case(fn, R(4, 5), axis=0, norm="forward")
    case(fn, C(5), None, -1, "backward")
for fn in (FFT.fft2, FFT.ifft2, FFT.fftn, FFT.ifftn):
    case(fn, C(3, 4))
    case(fn, R(2, 3, 4), (5, 2), (1, 2))
    case(fn, C(3, 4, 2), axes=(0, 2), norm="ortho")
    case(fn, C(2, 3, 4), s=(4, 2), axes=(0, 2), norm="forward")
case(FFT.fftn, C(2, 3, 4))
case(FFT.ifftn, C(2, 3, 4), None, (1,))
for fn in (FFT.rfft,):
    case(fn, R(6))
    case(fn, R(7))
    case(fn, R(3, 5), 8, 0)
    case(fn, R(3, 5), n=4, norm="ortho")
    case(fn, R(5), norm="forward")
for fn in (FFT.rfft2, FFT.rfftn):
    case(fn, R(3, 4))
    case(fn, R(2, 3, 5), s=(4, 6), axes=(0, 1), norm="ortho")
    case(fn, R(3, 5), (2, 7), (0, 1), norm="forward")
case(FFT.rfftn, R(2, 3, 5))
case(FFT.irfft, C(4))
case(FFT.irfft, C(4), 7)                             # odd n
case(FFT.irfft, C(3, 5), n=6, axis=0, norm="ortho")
case(FFT.irfft, C(5), n=12, norm="forward")          # zero-padded input
case(FFT.irfft, C(6), n=5)                           # truncated input
for fn in (FFT.irfft2, FFT.irfftn):
    case(fn, C(3, 4))
    case(fn, C(2, 3, 4), s=(4, 5), axes=(1, 0), norm="forward")
    case(fn, C(3, 4), (3, 7), (0, 1), norm="ortho")
case(FFT.irfftn, C(2, 3, 4))
for fn in (FFT.fftshift, FFT.ifftshift):
    case(fn, R(5))
    case(fn, R(4, 5), axes=1)
    case(fn, C(4, 5))
    case(fn, R(3, 4), (0,))

# ---- SciPy (optional: no cases without it, and then no rules either) ---------------------------

try:
    import scipy.linalg
    import scipy.signal
    import scipy.special as sp
    import scipy.stats as st
except ImportError:
    sp = None
if sp is not None:
    from scipy.stats._distn_infrastructure import rv_continuous, rv_discrete

    from irad.rules import scipy_rules
    scipy_rules.load_all()
    sla, sig = scipy.linalg, scipy.signal

    def I(*shape: int) -> np.ndarray:
        """Values in (0.1, 0.9) (probabilities)."""
        return rng.uniform(0.1, 0.9, shape)

    SPECIAL = [
        (sp.gamma, P), (sp.gammaln, P), (sp.rgamma, P), (sp.digamma, P), (sp.erf, R), (sp.erfc, R),
        (sp.erfinv, U), (sp.erfcinv, lambda *s: I(*s) * 2), (sp.ndtr, R), (sp.log_ndtr, R), (sp.ndtri, I),
        (sp.expit, R), (sp.logit, I), (getattr(sp, "log_expit", None), R), (sp.i0, R), (sp.i1, R),
        (sp.i0e, R), (sp.i1e, R), (sp.j0, R), (sp.j1, R), (sp.y0, P), (sp.y1, P),
    ]
    for fn, make in SPECIAL:
        case(fn, make(3, 4))
        case(fn, float(make()[()]))
    case(sp.gammaln, -P(3) - 0.1)                      # log|gamma| for negative x
    case(sp.polygamma, np.array([0, 1, 2]), P(3))
    case(sp.polygamma, 1, P(2, 2))
    case(sp.multigammaln, P(3) + 2, 3)
    case(sp.multigammaln, 3.5, 2)
    for fn in (sp.beta, sp.betaln, sp.xlogy, sp.xlog1py):
        case(fn, P(3, 4), P(3, 4))
        case(fn, P(3, 1), P(4))
    case(sp.xlogy, np.array([0.0, 1.5]), P(2))
    case(sp.iv, np.array([0, 1, 2]), R(3))
    case(sp.ive, 1, R(2, 3))
    case(sp.jv, 2, R(3))
    case(sp.jv, 0.5, P(3), _opts={"wrt": (1,)})        # a real order: no cotangent
    case(sp.yv, 1, P(3))
    case(sp.kv, 1, P(3))
    case(sp.logsumexp, R(3, 4))
    case(sp.logsumexp, R(3, 4), 1)
    case(sp.logsumexp, R(3, 4), axis=0, keepdims=True)
    case(sp.logsumexp, R(3, 4), 1, P(3, 4))             # positional b: a cotangent
    case(sp.logsumexp, R(3, 4), None, P(4))
    case(sp.logsumexp, R(2, 3, 4), (0, 2), P(3, 1), True)
    case(sp.logsumexp, R(3, 4), axis=1, b=P(4))         # keyword b: a constant
    case(sp.logsumexp, 1.1, 0, None, True)              # a scalar: SciPy reduces it as a 1-element array
    case(sp.logsumexp, np.float64(0.3), None, 2.0)
    for fn in (sp.softmax, sp.log_softmax):
        case(fn, R(3, 4))
        case(fn, R(3, 4), axis=1)
        case(fn, R(2, 3, 4), (0, 2))
    # distributions: the method's function with the distribution first (self)
    case(rv_continuous.logpdf, st.norm, R(4), R(4), P(4))
    case(rv_continuous.logpdf, st.norm, R(3, 4))
    case(rv_continuous.logpdf, st.norm, R(4), 0.3, scale=2.0)
    case(rv_continuous.pdf, st.norm, R(4), 0.3, P(4))
    for meth in ("cdf", "logcdf", "sf", "logsf"):
        case(getattr(rv_continuous, meth), st.norm, R(4), R(4), P(4))
        case(getattr(rv_continuous, meth), st.norm, R(2, 3))
    case(rv_continuous.logpdf, st.t, R(4), P(4) * 3, R(4), P(4))
    case(rv_continuous.logpdf, st.t, R(4), 4.5)
    case(rv_continuous.pdf, st.t, R(4), P(4) * 3, 0.2, 1.5)
    case(rv_continuous.logpdf, st.gamma, P(4) * 2, P(4) + 1, 0.1, P(4))
    case(rv_continuous.pdf, st.gamma, P(4), 2.5)
    case(rv_continuous.logpdf, st.beta, I(4), P(4), P(4))
    case(rv_continuous.pdf, st.beta, I(4) * 0.5 + 0.2, P(4), P(4), 0.1, 1.2)
    for meth in (rv_discrete.logpmf, rv_discrete.pmf, rv_discrete.cdf):
        case(meth, st.poisson, np.array([0, 1, 3, 5]), P(4) * 2)
        case(meth, st.poisson, np.array([2.0, 4.0]), 1.5, 1, _opts={"wrt": (2,)})  # k: a step
    MVN = type(st.multivariate_normal)
    for meth in (MVN.logpdf, MVN.pdf):
        case(meth, st.multivariate_normal, R(3), R(3), spd(3))
        case(meth, st.multivariate_normal, R(5, 3), R(3), spd(3) + np.triu(R(3, 3), 1))  # upper ignored
        case(meth, st.multivariate_normal, R(5, 3), R(3), P(3))
        case(meth, st.multivariate_normal, R(5, 2), R(2), 1.5)
    DIR = type(st.dirichlet)
    for meth in (DIR.logpdf, DIR.pdf):                 # x lies on the simplex: alpha only
        case(meth, st.dirichlet, np.array([0.2, 0.3, 0.5]), P(3), _opts={"wrt": (2,)})
        case(meth, st.dirichlet, np.array([[0.2, 0.1], [0.3, 0.6], [0.5, 0.3]]), P(3), _opts={"wrt": (2,)})
    # scipy.linalg
    TRI = R(3, 3) + 3 * np.eye(3)
    case(sla.solve_triangular, np.tril(TRI), R(3), lower=True)
    case(sla.solve_triangular, TRI, R(3, 2))                         # reads the upper triangle
    case(sla.solve_triangular, TRI, R(3, 2), 1, True)
    case(sla.solve_triangular, TRI, R(3), trans="C", unit_diagonal=True)
    case(sla.solve_triangular, C(3, 3) + 3 * np.eye(3), C(3, 2), trans="T", lower=True)
    case(sla.solve_triangular, C(3, 3) + 3 * np.eye(3), C(3), trans=2)
    case(sla.solve_triangular, C(3, 3) + 3 * np.eye(3), C(3))
    case(sla.cho_factor, spd(3))
    case(sla.cho_factor, spd(3) + np.triu(R(3, 3), 1), True)
    case(sla.cho_solve, (np.tril(spd(3)), True), R(3))
    case(sla.cho_solve, (np.triu(spd(3)), False), R(3, 2))
    case(sla.sqrtm, spd(3))
    case(sla.sqrtm, spd(2) + 0.3 * R(2, 2))
    case(sla.solve_sylvester, spd(3), spd(2), R(3, 2))
    case(sla.inv, spd(3) + R(3, 3))
    case(sla.det, spd(3) + R(3, 3))
    # scipy.signal
    for mode in ("full", "same", "valid"):
        case(sig.convolve, R(5), R(3), mode)
        case(sig.convolve, R(3), R(6), mode=mode)
        case(sig.convolve, R(4, 5), R(2, 3), mode)
    case(sig.convolve, R(6, 5), R(3, 3), "full", "fft")
    case(sig.convolve, C(4), C(3))
    # scipy.linalg matrix functions, drawn from a generator of their own (cases added above do
    # not change them: SciPy's logm is bitwise reproducible only for most matrices, its 1-norm
    # estimates drawing from np.random).  The first case of each gets order 2 in
    # test_second_order; tests/test_trust_matfuncs.py checks order 2 on the rest.
    rng = np.random.default_rng(20250114)
    SYM = R(3, 3)
    SYM = SYM + SYM.T
    NEG = np.array([[-2.0, 1.0], [0.5, 1.0]])            # a real negative eigenvalue: complex logm, sqrtm
    case(sla.expm, R(3, 3))
    case(sla.expm, np.array([[0.0, 0.0], [0.0, 0.1]]))  # triangular: SciPy's own path, once wrong here
    case(sla.expm, R(1, 1))
    case(sla.expm, R(2, 2))
    case(sla.expm, R(2, 3, 3))                         # a batch
    case(sla.expm, np.triu(R(3, 3)))
    case(sla.expm, np.tril(R(4, 4)) * 2)
    case(sla.expm, SYM)
    case(sla.expm, np.diag(R(3)))                      # diagonal: another SciPy path
    case(sla.expm, C(3, 3))
    case(sla.expm, 0.7)                                # a scalar: SciPy returns [[exp(a)]]
    case(sla.expm_frechet, R(3, 3), R(3, 3))
    case(sla.expm_frechet, R(1, 1), R(1, 1))
    case(sla.expm_frechet, R(2, 2), R(2, 2), compute_expm=False)
    case(sla.expm_frechet, R(2, 3, 3), R(2, 3, 3))
    case(sla.expm_frechet, np.triu(R(3, 3)), R(3, 3), "blockEnlarge")
    case(sla.expm_frechet, SYM, np.eye(3))
    case(sla.expm_frechet, C(2, 2), C(2, 2))
    case(sla.logm, spd(3))
    case(sla.logm, spd(1))
    case(sla.logm, spd(2) + 0.3 * R(2, 2))
    case(sla.logm, spd(3, (2,)))
    case(sla.logm, np.triu(spd(3)))
    case(sla.logm, np.array([[1.0, 2.0], [-2.0, 1.0]]))  # complex eigenvalues, a real logarithm
    case(sla.logm, NEG)
    case(sla.logm, C(3, 3) + 4 * np.eye(3))
    case(scipy_rules.logm_keeping_rng, spd(3))          # what logm's pullback calls
    case(scipy_rules.logm_keeping_rng, NEG)
    case(sla.sqrtm, spd(1))
    case(sla.sqrtm, spd(3, (2,)))
    case(sla.sqrtm, np.triu(spd(3)))
    case(sla.sqrtm, NEG)
    case(sla.sqrtm, C(3, 3) + 4 * np.eye(3))
    case(sla.sqrtm, 4.0)                               # a scalar: SciPy 1.17 returns [[exp(a)]]
    # issue 14, autograd's surface (a generator of their own; more in tests/test_autograd_surface.py)
    rng = np.random.default_rng(20250302)
    case(sp.gammainc, P(3, 4) * 2, P(3, 4) * 2)        # a too: gammainc_da
    case(sp.gammainc, P(3, 1) * 2, P(4) * 3)
    case(sp.gammaincc, 1.7, 2.5)
    case(sp.gammaincc, P(3) * 2, P(3) * 4)
    case(scipy_rules.gammainc_da, 1, P(3) * 2, P(3) * 2)
    case(scipy_rules.gammainc_da, 2, P(2, 2) * 3, P(2, 2) * 4)
    case(sp.betainc, P(3), P(3), I(3), _opts={"wrt": (2,)})           # a, b: GradError
    case(sp.betainc, 2.5, P(3, 1), I(4), _opts={"wrt": (2,)})
    case(getattr(sp, "betaincc", None), P(3), P(3), I(3), _opts={"wrt": (2,)})
    case(sp.stdtr, P(3) * 3, R(3), _opts={"wrt": (1,)})               # df: GradError
    case(sp.chdtr, P(3) * 3, P(3) * 2)
    case(sp.chdtrc, P(2, 3) * 3, P(3) * 2)
    case(sp.yn, np.array([0, 1, 2]), P(3) + 1)
    case(sp.kn, 2, P(2, 3) + 0.5)
    for fn in (sp.erfcx, sp.erfi, sp.dawsn):
        case(fn, R(3, 2))
        case(fn, 0.3)
        case(fn, C(3) * 0.7)
    case(sp.wofz, C(3, 2) * 0.7)
    case(sp.wofz, R(3))
    case(sp.erf, C(4) * 0.7)
    case(sp.erfc, C(2, 2) * 0.7)
    for name, args, wrt in [("t", (R(4), P(4) * 3, R(4), P(4)), (1, 3, 4)),
                            ("chi2", (P(4) * 2, P(4) * 3, 0.1, P(4)), None),
                            ("gamma", (P(4) * 2, P(4) + 1, 0.1, P(4)), None),
                            ("beta", (I(4) * 0.5 + 0.2, P(4), P(4), 0.1, 1.2), (1, 4, 5))]:
        for meth in ("cdf", "sf", "logcdf", "logsf"):
            case(getattr(rv_continuous, meth), getattr(st, name), *args, _opts={"wrt": wrt} if wrt else None)
    case(rv_continuous.cdf, st.gamma, P(3) * 2, 2.5)
    case(MVN.entropy, st.multivariate_normal, R(3), spd(3) + np.triu(R(3, 3), 1))   # upper ignored
    case(MVN.entropy, st.multivariate_normal, R(3), P(3))
    case(MVN.entropy, st.multivariate_normal, R(3), 1.5)
    BAND = R(4, 5)
    BAND[2] += 10.0
    case(sla.solve_banded, (1, 2), BAND, R(5))
    case(sla.solve_banded, (2, 1), BAND, R(5, 2))
    case(sla.solve_banded, (0, 0), BAND[2:3], R(5))
    case(sla.solve_banded, (1, 1), BAND[1:] + 1j * R(3, 5), C(5))


# np.partition (issue 14): a permutation along the axis
case(np.partition, R(7), 3)
case(np.partition, R(4, 6), [1, 3], axis=0)
case(np.partition, R(3, 4), 5, None)
case(np.partition, R(2, 3, 5), (0, 4), -1)


# ---- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("fn,args,kwargs,opts", CASES)
def test_rule(fn, args, kwargs, opts):
    check_rule(fn, *args, **opts, **kwargs)


def _tested_impls() -> set:
    return {registry.impl_key(p.values[0]) for p in CASES}


def test_every_rule_is_tested():
    tested = _tested_impls()
    missing = sorted({e.rule.name for e in builtin_entries() if e.rule.impl not in tested})
    assert not missing, f"rules without a case in tests/test_rules.py: {missing}"
    # a rule registered for argument types (one per SciPy distribution) needs its own case
    hit = {id(registry.lookup(p.values[0], p.values[1])) for p in CASES}
    missing = sorted({e.label or e.rule.name for e in builtin_entries() if e.rule.types and id(e.rule) not in hit})
    assert not missing, f"rules without a case in tests/test_rules.py: {missing}"


def test_rules_are_named_module_functions():
    """Explicit rules are plain module-level functions (no closures): they print and inline."""
    for e in builtin_entries():
        if e.rule.kind != "explicit":
            continue
        for f in (e.rule.fwd, e.rule.bwd):
            assert f.__closure__ is None and "<" not in f.__qualname__, f"{e.rule.name}: {f}"
            assert getattr(__import__(f.__module__, fromlist=["_"]), f.__name__) is f


def test_nondifferentiable_list():
    for f in builtin_nondiff():
        assert registry.is_nondiff(f)
        assert registry.lookup(f) is None, registry.qualname(f)
    for f in (np.floor, np.argmax, np.ndarray.argsort, operator.lt, math.floor, builtins.round):
        assert registry.is_nondiff(f)


def _first_case_per_rule() -> list:
    seen, out = set(), []
    for p in CASES:
        rule = registry.lookup(p.values[0], p.values[1])
        key = (registry.impl_key(p.values[0]), rule.types if rule is not None else ())
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


@pytest.mark.parametrize("fn,args,kwargs,opts", _first_case_per_rule())
def test_second_order(fn, args, kwargs, opts):
    """The backward bodies are plain numpy: irad differentiates them again (order 2)."""
    opts = {"rtol": 1e-4, "atol": 1e-6, **opts, "order": 2}
    check_rule(fn, *args, **opts, **kwargs)


def test_builtin_max_min_give_ties_to_the_first():
    for fn in (builtins.max, builtins.min):
        rule = registry.lookup(fn)
        x = 1.25
        y, s = rule.fwd(x, x, 0.5 if fn is builtins.max else 2.0)
        # the others get an explicit 0 (not None): the structure cannot depend on who wins
        assert rule.bwd(s, 1.0) == (1.0, 0.0, 0.0)
        y, s = rule.fwd([x, x])
        assert rule.bwd(s, 1.0) == ([1.0, 0.0],)
        y, s = rule.fwd(x, 2)  # an int argument never gets a cotangent
        assert rule.bwd(s, 1.0) == ((1.0, None) if fn is builtins.min else (0.0, None))


def test_unique_shares_duplicates_evenly():
    rule = registry.lookup(np.unique)
    x = np.array([3.0, 1.0, 3.0, 2.0, 1.0, 3.0])
    y, s = rule.fwd(x)
    (gx,) = rule.bwd(s, np.array([6.0, 1.0, 3.0]))   # cotangents of 1.0, 2.0, 3.0
    np.testing.assert_allclose(gx, [1.0, 3.0, 1.0, 1.0, 3.0, 1.0])


def test_check_rule_catches_wrong_rules():
    def bad_fwd(x):
        return np.sin(x), x

    def bad_pullback(x, g):
        return (g * np.sin(x),)  # wrong: should be cos

    def short_pullback(x, g):
        return ()  # x's cotangent left out: a zero (trailing ones may be omitted)

    def long_pullback(x, g):
        return g * np.cos(x), None  # one more than the positional arguments

    def wrong_fwd(x):
        return np.cos(x), x

    good = registry.lookup(np.sin)
    for fwd, bwd, msg in [(bad_fwd, bad_pullback, "finite differences"),
                          (bad_fwd, short_pullback, r"left it out: None, a zero\) disagrees with finite"),
                          (bad_fwd, long_pullback, "2 cotangents for 1 positional"),
                          (wrong_fwd, good.bwd, "differs")]:
        rule = registry.Rule(good.impl, "numpy.sin", fwd, bwd)
        with pytest.raises(AssertionError, match=msg):
            check_rule(np.sin, R(3), rule=rule)


def test_check_rule_broadcast_and_list_cotangents():
    # the concatenate rule returns a list; a broadcast cotangent must sum down
    check_rule(np.concatenate, [R(2), R(3)])
    with pytest.raises(AssertionError, match="no reverse rule"):
        check_rule(lambda x: x, 1.0)


def test_numerical_vjp_matches_rule():
    x, y = R(3, 1), R(4)
    g = R(3, 4)
    num = numerical_vjp(np.multiply, (x, y), g)
    np.testing.assert_allclose(num[0], (g * y).sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(num[1], (g * x).sum(0), rtol=1e-6)
    z = C(2)
    num = numerical_vjp(np.exp, (z,), np.ones(2, complex))
    np.testing.assert_allclose(num[0], np.conj(np.exp(z)), rtol=1e-6)


def test_digamma_against_lgamma_differences():
    for x in (0.3, 1.0, 2.5, 11.0, -0.5, -2.3):
        h = 1e-6
        num = (math.lgamma(x + h) - math.lgamma(x - h)) / (2 * h)
        assert abs(digamma(x) - num) < 1e-6 * max(1.0, abs(num))


def test_docs_examples_run():
    """The rule examples in docs/rules.md are real: run them (each ends in check_rule)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "rules.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    ns: dict = {}
    for block in blocks:
        exec(compile(block, "docs/rules.md", "exec"), ns)


def test_docs_are_up_to_date():
    pytest.importorskip("scipy", reason="the generated table lists the SciPy rules too")
    path = Path(__file__).resolve().parents[1] / "docs" / "rules.md"
    text = path.read_text()
    assert text == doc.render(text), "docs/rules.md is stale: run python -m irad.rules.doc --write"
