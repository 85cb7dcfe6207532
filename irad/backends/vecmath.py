"""Branch-free float64 transcendental functions for numba kernels that LLVM can vectorise.

Why these exist: numpy's float64 ``exp``, ``log``, ``tanh``, ... are scalar libm calls on machines
without AVX-512 (and a call to libm inside a numba loop is opaque to LLVM on every machine), so a
generated fused elementwise kernel that calls ``math.exp`` runs one element at a time. The
functions here are written only with arithmetic, integer bit manipulation of the float64
representation and selects (``a if c else b``, which LLVM if-converts into blends): no branches
on the data, no loops, no libm calls. They are meant to be called from inside generated
``@numba.vectorize(["float64(float64, ...)"])`` kernels (or any ``njit`` loop), where LLVM's loop
vectoriser turns them into packed SIMD code.

Accuracy contract: within 4 ulp of numpy's own result for every float64 input (measured as
``|got - ref| / np.spacing(|ref|)``; measured at most 2 ulp from numpy and 1.6 ulp from the exact
value), including results in the subnormal range (measured on the subnormal grid), and exactly
numpy's answer at the special values: +-0.0 (with the sign of zero numpy gives), subnormal
inputs, +-inf, nan, and the overflow / underflow thresholds (e.g. ``exp(709.782712893384)`` is
finite, ``cosh(710.4)`` is finite, ``exp`` of large negatives goes through the subnormals down
to 0). ``sigmoid`` has no numpy counterpart; it is within 4 ulp of the exactly rounded
``1 / (1 + exp(-x))`` for all x, large negative included (where that formula in float64 gives 0).

Floating-point flags (which numpy turns into RuntimeWarnings for ufuncs, numba's included):
finite inputs set only what numpy's function sets (overflow, underflow); nan and +-inf inputs
may set 'invalid' or 'overflow' where numpy sets none (seen with the same numba on Python 3.12:
tanh, cosh, sigmoid of nan; cosh of +-inf); but ``log`` and ``log1p`` set no divide-by-zero / invalid flag at 0 / -1 and below,
where numpy warns. LLVM does not promise to keep flags, so this is observed, not guaranteed.

Methods (textbook): ``exp`` by Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2, a Taylor
polynomial for exp(r), and 2**n built from exponent bits (as two factors, so that results near
overflow and in the subnormal range are rounded once); ``expm1`` from the same pieces, adding
1 - 2**-n to the polynomial with an exact two-sum; ``log`` by x = m 2**k with m in [sqrt(1/2),
sqrt(2)) and the atanh series of s = f / (2 + f), f = m - 1; ``log1p`` by the same with the
rounding error of u = 1 + x folded back into f; ``cosh`` / ``sinh`` from exp(|x|) / 2 (built
directly, so no overflow before numpy's threshold) and, for small |x|, from expm1 (no
cancellation); ``tanh`` from expm1(2|x|).

Polynomials go through ``_muladd`` (``llvm.fmuladd``): one fused multiply-add where the CPU numba
compiles for has FMA, a multiply and an add where it does not; either is within the contract.
"""
import math
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

if TYPE_CHECKING:
    from numba.core.dispatcher import Dispatcher

__all__ = ["exp", "expm1", "log", "log1p", "tanh", "cosh", "sinh", "sigmoid"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _jit(fn: _F) -> "Dispatcher[_F]":
    return numba.njit(inline="always", error_model="numpy", cache=False)(fn)


# ---- bit-level helpers ------------------------------------------------------------------------

if TYPE_CHECKING:
    # What jitted code calls: numba drops the typing context (and the stub of ``intrinsic`` has no
    # way to say so), and the typing functions below return numba types, not the values.
    def _bits(x: float, /) -> int: ...
    def _float(i: int, /) -> float: ...
    def _muladd(a: float, b: float, c: float, /) -> float: ...
else:
    @intrinsic
    def _bits(typingctx, x):
        """The int64 with the same 64 bits as the float64 x."""
        if x != types.float64:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(64))
        return types.int64(types.float64), codegen


    @intrinsic
    def _float(typingctx, i):
        """The float64 with the same 64 bits as the int64 i."""
        if i != types.int64:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.DoubleType())
        return types.float64(types.int64), codegen


    @intrinsic
    def _muladd(typingctx, a, b, c):
        """a * b + c, fused into one FMA where the target has it (llvm.fmuladd)."""
        if not (a == b == c == types.float64):
            return None

        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.DoubleType(), [ir.DoubleType()] * 3)
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fmuladd.f64")
            return builder.call(fn, args)
        return types.float64(types.float64, types.float64, types.float64), codegen


_MAGIC = 6755399441055744.0          # 1.5 * 2**52: for |y| < 2**51, y + MAGIC is round(y) in the low bits
_MAGIC_BITS = 0x4338000000000000     # the bits of MAGIC
_EXP_BIAS = 1023
_MANT_BITS = 52


@_jit
def _int_to_float(k: int) -> float:
    """float(k) for |k| < 2**51 by the magic number (AVX2 has no packed int64 -> float64)."""
    return _float(k + _MAGIC_BITS) - _MAGIC


@_jit
def _pow2(k: int) -> float:
    """2.0**k for -1022 <= k <= 1023, from the exponent bits."""
    return _float((k + _EXP_BIAS) << _MANT_BITS)


@_jit
def _times_pow2(y: float, k: int) -> float:
    """y * 2**k for -2044 <= k <= 2046 as two exact-range factors, so it rounds at most once."""
    h = k >> 1
    return (y * _pow2(h)) * _pow2(k - h)


# ---- exp / expm1 core ---------------------------------------------------------------------------

_INV_LN2 = 1.4426950408889634
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")   # ln 2 to 32 bits: n * LN2_HI is exact for |n| < 2**21
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")  # ln 2 - LN2_HI, to 53 bits

_EXP_X_MIN = -746.0   # exp(x) rounds to 0 below -745.13...
_EXP_X_MAX = 711.0    # exp(x) / 2 overflows above 710.47...
_EXPM1_X_MIN = -40.0  # expm1(x) rounds to -1 below -37.4...


@_jit
def _exp_reduce(x: float) -> tuple[int, float, float]:
    """(n, r, rc) with x = n ln2 + r + rc, |r| <= ln2/2 (barely more), rc the rounding error of r."""
    t = x * _INV_LN2 + _MAGIC
    n = _bits(t) - _MAGIC_BITS
    nf = t - _MAGIC
    hi = x - nf * _LN2_HI              # exact (Cody-Waite)
    lo = nf * _LN2_LO
    r = hi - lo
    rc = (hi - r) - lo
    return n, r, rc


@_jit
def _expm1_poly(r: float) -> float:
    """(exp(r) - 1 - r) / r**2 for |r| <= 0.35: the Taylor series to r**13 / 13!, Horner."""
    p = 1.0 / 6227020800.0
    p = _muladd(p, r, 1.0 / 479001600.0)
    p = _muladd(p, r, 1.0 / 39916800.0)
    p = _muladd(p, r, 1.0 / 3628800.0)
    p = _muladd(p, r, 1.0 / 362880.0)
    p = _muladd(p, r, 1.0 / 40320.0)
    p = _muladd(p, r, 1.0 / 5040.0)
    p = _muladd(p, r, 1.0 / 720.0)
    p = _muladd(p, r, 1.0 / 120.0)
    p = _muladd(p, r, 1.0 / 24.0)
    p = _muladd(p, r, 1.0 / 6.0)
    return _muladd(p, r, 0.5)


@_jit
def _exp_mant(r: float, rc: float) -> float:
    """exp(r + rc) for the reduced argument: a number in [0.7, 1.42]."""
    return 1.0 + (r + _muladd(r * r, _expm1_poly(r), rc))


@_jit
def _expm1_mant(n: int, r: float, rc: float) -> float:
    """(exp(n ln2 + r + rc) - 1) / 2**n, for n >= -58 (the sum with 1 - 2**-n rounded once)."""
    nc = n if n < 60 else 60
    c = 1.0 - _pow2(-nc)               # exact for -53 <= n <= 53; rounds harmlessly outside
    s = c + r
    e = (c - s) + r                    # Fast2Sum: |c| >= |r| unless c == 0
    return s + (e + _muladd(r * r, _expm1_poly(r), rc))


@_jit
def _at_most(x: float, hi: float) -> float:
    """min(x, hi) for a non-nan x."""
    return hi if x > hi else x


@_jit
def _clamp(x: float, lo: float, hi: float) -> float:
    """x limited to [lo, hi], for a non-nan x."""
    x = hi if x > hi else x
    return lo if x < lo else x


_EXP_FIELD = 0x7FF0000000000000


@_jit
def _finite_mask(b: int) -> int:
    """-1 (all bits) where the float64 of bits b is finite, 0 where it is +-inf or nan."""
    return ((b & _EXP_FIELD) - _EXP_FIELD) >> 63


@_jit
def _finite_or_zero(x: float) -> tuple[float, bool]:
    """(x, True) for a finite x, (0.0, False) for +-inf and nan.

    Each function computes on this finite stand-in and selects its answer for +-inf and nan at
    the end, so that those set no floating-point flags numpy's own functions do not set (numpy
    turns flags into RuntimeWarnings). It is done by masking the bits, not by a select: LLVM
    moves a select past the packed compares after it, and packed ``<`` / ``>`` signal on nan.
    """
    b = _bits(x)
    mask = _finite_mask(b)
    return _float(b & mask), mask != 0


# ---- the functions ----------------------------------------------------------------------------

@_jit
def _exp_finite(x: float) -> float:
    """exp(x) for a finite x."""
    n, r, rc = _exp_reduce(_clamp(x, _EXP_X_MIN, _EXP_X_MAX))
    return _times_pow2(_exp_mant(r, rc), n)


@_jit
def _expm1_finite(x: float) -> float:
    """expm1(x) for a finite x (-0.0 gives +0.0)."""
    n, r, rc = _exp_reduce(_clamp(x, _EXPM1_X_MIN, _EXP_X_MAX))
    return _times_pow2(_expm1_mant(n, r, rc), n)


@_jit
def exp(x: float) -> float:
    """e**x."""
    xs, fin = _finite_or_zero(x)
    y = _exp_finite(xs)
    return y if fin else (0.0 if x == -math.inf else x)


@_jit
def expm1(x: float) -> float:
    """e**x - 1, accurate for small |x|."""
    xs, fin = _finite_or_zero(x)
    y = _expm1_finite(xs)
    y = x if x == 0.0 else y                # keeps -0.0
    return y if fin else (-1.0 if x == -math.inf else x)


_SINH_EXPM1_MAX = 22.0   # above this, sinh(x) = exp(|x|) / 2 to the last bit
_TANH_X_MAX = 20.0       # tanh(x) rounds to +-1 above 19.06...


@_jit
def cosh(x: float) -> float:
    """The hyperbolic cosine."""
    xs, fin = _finite_or_zero(x)
    a = _at_most(abs(xs), _EXP_X_MAX)
    n, r, rc = _exp_reduce(a)
    h = _times_pow2(_exp_mant(r, rc), n - 1)    # exp(a) / 2, finite up to a = 710.47...
    y = h + 0.25 / h
    return y if fin else abs(x)


@_jit
def sinh(x: float) -> float:
    """The hyperbolic sine."""
    xs, fin = _finite_or_zero(x)
    a = _at_most(abs(xs), _EXP_X_MAX)
    n, r, rc = _exp_reduce(a)
    small = a < _SINH_EXPM1_MAX
    big = _times_pow2(_exp_mant(r, rc), n - 1)                   # exp(a) / 2
    t = _times_pow2(_expm1_mant(n, r, rc), n if small else 0)    # expm1(a) where small (finite anyway)
    y = math.copysign(0.5 * (t + t / (t + 1.0)) if small else big, x)
    return y if fin else x


@_jit
def tanh(x: float) -> float:
    """The hyperbolic tangent."""
    xs, fin = _finite_or_zero(x)
    a = _at_most(abs(xs), _TANH_X_MAX)
    e = _expm1_finite(2.0 * a)
    y = math.copysign(e / (e + 2.0), x)
    return y if fin else (x if x != x else math.copysign(1.0, x))


@_jit
def sigmoid(x: float) -> float:
    """The logistic function 1 / (1 + e**-x), accurate for large negative x too."""
    xs, fin = _finite_or_zero(x)
    e = _exp_finite(-abs(xs))
    y = (1.0 if xs >= 0.0 else e) / (1.0 + e)
    return y if fin else (x if x != x else (1.0 if x == math.inf else 0.0))


# ---- log / log1p ------------------------------------------------------------------------------

_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD   # the bits of sqrt(1/2)
_DBL_MIN = 2.2250738585072014e-308     # the smallest normal float64
_TWO52 = 4503599627370496.0
_LOG1P_TINY = 2.0 ** -54               # below this log1p(x) rounds to x


@_jit
def _split_sqrt2(ib: int) -> tuple[int, float]:
    """(k, m) with the positive normal float64 of bits ib = m * 2**k, m in [sqrt(1/2), sqrt(2))."""
    k = (ib - _SQRT_HALF_BITS) >> _MANT_BITS
    return k, _float(ib - (k << _MANT_BITS))


@_jit
def _log_core(f: float, k: int) -> float:
    """k ln2 + log(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]: atanh series in s = f / (2 + f)."""
    s = f / (2.0 + f)
    z = s * s
    # log(1 + f) = 2 atanh(s) = f - f**2/2 + s (f**2/2 + R), R = 2/3 z + 2/5 z**2 + ... + 2/21 z**10
    p = 2.0 / 21.0
    p = _muladd(p, z, 2.0 / 19.0)
    p = _muladd(p, z, 2.0 / 17.0)
    p = _muladd(p, z, 2.0 / 15.0)
    p = _muladd(p, z, 2.0 / 13.0)
    p = _muladd(p, z, 2.0 / 11.0)
    p = _muladd(p, z, 2.0 / 9.0)
    p = _muladd(p, z, 2.0 / 7.0)
    p = _muladd(p, z, 2.0 / 5.0)
    p = _muladd(p, z, 2.0 / 3.0)
    big_r = z * p
    hfsq = 0.5 * f * f
    kf = _int_to_float(k)
    return kf * _LN2_HI - ((hfsq - (s * (hfsq + big_r) + kf * _LN2_LO)) - f)


@_jit
def log(x: float) -> float:
    """The natural logarithm."""
    b = _bits(x)
    xs = _float(b & _finite_mask(b) & ~(b >> 63))    # x if finite and >= +0.0, else +0.0
    sub = xs < _DBL_MIN                     # subnormals (and the 0.0 lanes) scaled into the normals
    k, m = _split_sqrt2(_bits(xs * (_TWO52 if sub else 1.0)))
    y = _log_core(m - 1.0, k - 52 if sub else k)
    return y if xs != 0.0 else (-math.inf if x == 0.0 else (x if x == math.inf else math.nan))


@_jit
def log1p(x: float) -> float:
    """log(1 + x), accurate for small |x|."""
    xs, fin = _finite_or_zero(x)
    valid = xs > -1.0
    xs = xs if valid else 0.0
    u = 1.0 + xs
    k, m = _split_sqrt2(_bits(u))
    c = (1.0 - (u - xs)) if u >= 2.0 else (xs - (u - 1.0))  # 1 + x == u + c exactly
    kc = k if k < 1022 else 1022                            # c / 2**k only matters for small k
    f = (m - 1.0) + c * _pow2(-kc)                          # (1 + x) / 2**k - 1, rounded once
    y = _log_core(f, k)
    y = xs if abs(xs) < _LOG1P_TINY else y  # keeps -0.0 and subnormals exact
    y = y if valid else (-math.inf if x == -1.0 else math.nan)
    return y if fin else (x if x == math.inf else math.nan)
