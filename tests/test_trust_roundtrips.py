"""Trust II (part): values that leave the float world and come back never silently drop a gradient.

A traced float turned into something that is not a float -- its bytes (``x.tobytes()``, ``x.data``,
``memoryview(x)``, ``struct.pack``, ``array.array('d', generator)``), the same bytes as another dtype
(``x.view(np.int64)``, ``np.frombuffer(x, np.int64)``), the exact integers of its ratio
(``as_integer_ratio``: ``Fraction``, ``statistics``), a ``Decimal``, a raw pointer -- and computed
back into the result used to get a zero gradient (and sometimes the first call's value on the next
call).  Now each round trip is either traced exactly (``statistics.mean/variance/stdev``,
``itertools.accumulate``) and matches central finite differences on the second and later calls of
the same ``irad.value_and_grad``, or it is an irad error naming the user's line and what to use
instead (see ``irad/roundtrip.py``).  Every case below was silently wrong before the change (a view
as another float dtype was refused, with a generic "no reverse rule" message); plain uses, and
statistics' own behaviour on constants and mixed types, keep working.
"""
from __future__ import annotations

import array
import ctypes
import decimal
import fractions
import hashlib
import itertools
import re
import statistics
import struct
from typing import Any, Callable

import numpy as np
import pytest

import irad
from irad.errors import NoRuleError, UnsupportedError

SHAPES = [(), (4,), (2, 3)]
DTYPES = [np.float64, np.float32]
INT = {np.dtype(np.float64): np.int64, np.dtype(np.float32): np.int32}


def arg(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    return np.random.RandomState(seed).uniform(0.5, 2.0, size=shape).astype(dtype)


def first(x: Any) -> Any:
    return x.reshape(-1)[0]


def fd(f: Callable[..., Any], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central finite differences of ``f`` in float64."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        a, b = x.copy(), x.copy()
        a[i] += eps
        b[i] -= eps
        g[i] = (float(f(a)) - float(f(b))) / (2 * eps)
    return g


def check_matches_fd(f: Callable[..., Any], shape: tuple[int, ...], dtype: Any) -> None:
    vg = irad.value_and_grad(f)
    vg(arg(shape, dtype, 0))  # the call that traces
    tol = 1e-6 if dtype == np.float64 else 3e-3
    for seed in (1, 2):  # later calls of the same compiled object: nothing of the first call is baked in
        x = arg(shape, dtype, seed)
        v, g = vg(x)
        x64 = x.astype(np.float64)
        np.testing.assert_allclose(float(v), float(f(x64)), rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), fd(f, x64), rtol=tol, atol=tol)


def check_refused(f: Callable[..., Any], shape: tuple[int, ...], dtype: Any, error: type, match: str) -> None:
    vg = irad.value_and_grad(f)
    for seed in (0, 1):  # refused on every call: nothing wrong was cached
        with pytest.raises(error) as e:
            vg(arg(shape, dtype, seed))
        msg = str(e.value)
        assert re.search(match, msg, re.S), msg
        assert "test_trust_roundtrips.py" in msg, msg  # the user's line


# ---- reinterpretations: the same bytes as another dtype ---------------------------------------

def view_roundtrip(x):
    return np.sum(x.view(INT[x.dtype]).view(x.dtype) ** 2)


def view_copy_roundtrip(x):
    return np.sum(x.view(INT[x.dtype]).copy().view(x.dtype) ** 2)


def bits_arithmetic_roundtrip(x):
    bits = x.view(INT[x.dtype]) + 0  # integer arithmetic on the bits, then back
    return np.sum(bits.view(x.dtype) * 2.0)


def frombuffer_as_int(x):
    return np.sum(np.frombuffer(x, dtype=INT[x.dtype]).view(x.dtype) ** 2)


def scalar_view_roundtrip(x):
    return first(x).view(INT[x.dtype]).view(x.dtype) ** 2 + np.sum(x)


REINTERPRETATIONS = [view_roundtrip, view_copy_roundtrip, bits_arithmetic_roundtrip, frombuffer_as_int,
                     scalar_view_roundtrip]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=["0d", "1d", "2d"])
@pytest.mark.parametrize("f", REINTERPRETATIONS)
def test_reinterpretation_round_trip_is_refused(f, shape, dtype):
    check_refused(f, shape, dtype, NoRuleError, r"reinterpretation of the bytes.*astype")


def view_as_other_float(x):
    return np.sum(x.view(np.float32 if x.dtype == np.float64 else np.float16))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", [(4,), (2, 3)], ids=["1d", "2d"])
def test_view_as_another_float_dtype_is_refused(shape, dtype):
    check_refused(view_as_other_float, shape, dtype, NoRuleError, r"reinterpretation of the bytes.*views its memory")


# ---- buffers: bytes, memoryviews, struct -------------------------------------------------------

def data_frombuffer(x):
    return np.sum(np.frombuffer(x.data, dtype=x.dtype) ** 2)


def memoryview_bytes_back(x):
    return np.sum(np.asarray(memoryview(x).cast("B")).view(x.dtype) ** 2)


def tobytes_as_int_back(x):
    return np.sum(np.frombuffer(x.tobytes(), dtype=INT[x.dtype]).view(x.dtype) ** 2)


def array_of_a_generator(x):
    code = "d" if x.dtype == np.float64 else "f"  # C code copies the items the generator computes
    return np.sum(np.asarray(array.array(code, (v * 2.0 for v in np.ravel(x)))) ** 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=["0d", "1d", "2d"])
@pytest.mark.parametrize("f, kind", [(data_frombuffer, "memoryview"), (memoryview_bytes_back, "memoryview"),
                                     (tobytes_as_int_back, "bytes"), (array_of_a_generator, "array")],
                         ids=["data", "memoryview", "tobytes", "array_array"])
def test_buffer_round_trip_is_refused(f, kind, shape, dtype):
    check_refused(f, shape, dtype, NoRuleError, rf"opaque {kind} object.*buffer round trip")


def struct_through_an_int(x):
    code, n = ("d", 8) if x.dtype == np.float64 else ("f", 4)
    i = int.from_bytes(struct.pack(code, first(x)), "little")
    return struct.unpack(code, i.to_bytes(n, "little"))[0] ** 2 + np.sum(x)


def make_bytes_keyed_cache() -> Callable[..., Any]:
    cache: dict[bytes, Any] = {}

    def cached_loss(x):
        key = x.tobytes()
        if key in cache:
            return cache[key]
        r = np.sum(x ** 2)
        cache[key] = r
        return r
    return cached_loss


def decimal_to_fraction(x):
    return float(fractions.Fraction(decimal.Decimal(float(first(x))))) ** 2 + np.sum(x)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=["0d", "1d", "2d"])
@pytest.mark.parametrize("make", [lambda: struct_through_an_int, make_bytes_keyed_cache, lambda: decimal_to_fraction],
                         ids=["struct_int", "bytes_keyed_cache", "decimal_fraction"])
def test_a_branch_on_the_exact_encoding_is_refused(make, shape, dtype):
    check_refused(make(), shape, dtype, NoRuleError,
                  r"branch decides on the exact encoding.*outside the differentiated")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=["0d", "1d", "2d"])
def test_bytes_keyed_cache_is_refused_when_it_hits(shape, dtype):
    """Before: the third call (the first call's array again) returned the cached value with a zero gradient."""
    f = make_bytes_keyed_cache()
    vg = irad.value_and_grad(f)
    x = arg(shape, dtype, 0)
    for y in (x, arg(shape, dtype, 1), x):
        with pytest.raises(NoRuleError):
            vg(y)


def ctypes_pointer(x):
    buf = (ctypes.c_double * x.size).from_address(x.ctypes.data)
    return np.sum(np.asarray(buf) ** 2)


@pytest.mark.parametrize("shape", SHAPES, ids=["0d", "1d", "2d"])
def test_raw_pointer_is_refused(shape):
    check_refused(ctypes_pointer, shape, np.float64, UnsupportedError, r"a\.ctypes \(a raw pointer")


# ---- exact integer ratios: Fraction, as_integer_ratio, statistics' exact arithmetic -----------

def fraction_of_float(x):
    return float(fractions.Fraction(float(first(x)))) ** 2 + np.sum(x)


def integer_ratio(x):
    n, d = first(x).as_integer_ratio()
    return (n / d) ** 2 + np.sum(x)


def harmonic_mean(x):
    return statistics.harmonic_mean(list(x.reshape(-1)) + [x.dtype.type(1.0)])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=["0d", "1d", "2d"])
@pytest.mark.parametrize("f", [fraction_of_float, integer_ratio, harmonic_mean])
def test_exact_integer_ratio_is_refused(f, shape, dtype):
    check_refused(f, shape, dtype, UnsupportedError, r"as_integer_ratio\(\) of a traced float.*Compute in floats")


# ---- traced exactly: statistics of traced floats, itertools.accumulate -----------------------

def mean_of_array(x):
    return statistics.mean(np.ravel(x)) ** 2


def mean_of_list(x):
    return statistics.mean(list(np.ravel(x)) + [x.dtype.type(1.0)]) ** 2


def mean_of_generator(x):
    return statistics.mean(v * 2.0 for v in np.ravel(x)) ** 2


def variance_of_list(x):
    return statistics.variance(list(np.ravel(x)) + [x.dtype.type(0.25)])


def pvariance_of_array(x):
    return statistics.pvariance(np.append(np.ravel(x), 3.0))


def stdev_with_xbar(x):
    xs = list(np.ravel(x)) + [x.dtype.type(0.25), x.dtype.type(3.0)]
    return statistics.stdev(xs, statistics.mean(xs))


def pstdev_of_array(x):
    return statistics.pstdev(np.append(np.ravel(x), 3.0))


def accumulate_sum(x):
    return sum(v * v for v in itertools.accumulate(np.append(np.ravel(x), 0.5)))


def accumulate_initial(x):
    return list(itertools.accumulate(np.ravel(x), initial=0.5))[-1] ** 2


STATS = [mean_of_array, mean_of_list, mean_of_generator, variance_of_list, pvariance_of_array, stdev_with_xbar,
         pstdev_of_array, accumulate_sum, accumulate_initial]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=["0d", "1d", "2d"])
@pytest.mark.parametrize("f", STATS)
def test_traced_exactly_matches_finite_differences(f, shape, dtype):
    check_matches_fd(f, shape, dtype)


def accumulate_rows(x):
    return np.sum(list(itertools.accumulate(x))[-1] ** 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", [(4,), (2, 3), (3, 2, 2)], ids=["1d", "2d", "3d"])
def test_accumulate_over_the_rows_of_a_traced_array(shape, dtype):
    check_matches_fd(accumulate_rows, shape, dtype)


def test_accumulate_value_is_not_the_first_calls():
    """Before: the first call's value was returned at every later call (a constant of the trace)."""
    vg = irad.value_and_grad(lambda x: list(itertools.accumulate(x))[-1] ** 2)
    assert float(vg(np.array([1.0, 2.0]))[0]) == 9.0
    v, g = vg(np.array([3.0, -1.0]))
    assert float(v) == 4.0
    np.testing.assert_allclose(g, [4.0, 4.0])


def test_statistics_of_mixed_types_raise_as_in_python():
    def f(x):
        return statistics.mean([x[0], 1.0])  # np.float32 and float: statistics cannot coerce them

    with pytest.raises(TypeError, match="coerce"):
        irad.value_and_grad(f)(np.array([1.0, 2.0], dtype=np.float32))


def test_statistics_of_constants_keep_their_exact_types():
    """The float bodies run only when traced floats flow in: constants keep statistics' own code."""
    def f(x):
        m = statistics.mean([1, 2, 3])  # an int, computed exactly
        q = statistics.mean([fractions.Fraction(1, 3), fractions.Fraction(1, 6)])
        assert type(m) is int and q == fractions.Fraction(1, 4)
        return np.sum(x) * m * float(q)

    check_matches_fd(f, (3,), np.float64)


# ---- plain uses keep working --------------------------------------------------------------------

PLAIN = {
    "view": lambda x: np.sum(x.view() ** 2),
    "view_ndarray": lambda x: np.sum(x.view(np.ndarray) ** 2),
    "view_same_dtype": lambda x: np.sum(x.view(x.dtype) * x),
    "scalar_view": lambda x: first(x).view() ** 2 + np.sum(x),
    "astype": lambda x: np.sum(x.astype(np.float64) ** 2) + np.sum(x.astype(np.int64)),
    "asarray": lambda x: np.sum(np.asarray(x) ** 3),
    "float_item": lambda x: float(first(x)) ** 2 + np.sum(x),
    "int_index": lambda x: np.ravel(x)[int(np.argmax(np.ravel(x)))] * np.sum(x),
    "frombuffer_own_dtype": lambda x: np.sum(np.frombuffer(x, dtype=x.dtype) ** 2),
    "fmean": lambda x: statistics.fmean(np.ravel(x)) ** 2,
    "sign_bits_as_a_mask": lambda x: np.sum(np.where(x.view(INT[x.dtype]) < 0, -x, x) ** 2),
    "bytes_hashed_not_branched": lambda x: (hashlib.sha1(x.tobytes()).hexdigest(), np.sum(x ** 2))[1],
    "len_of_bytes": lambda x: np.sum(x) * (len(x.tobytes()) // x.itemsize + 1),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=["0d", "1d", "2d"])
@pytest.mark.parametrize("name", list(PLAIN))
def test_plain_uses_keep_working(name, shape, dtype):
    check_matches_fd(PLAIN[name], shape, dtype)


def test_bytes_and_bits_in_an_undifferentiated_trace():
    """Without a gradient nothing is lost: a trace may branch on bytes and view bits (irad.trace)."""
    def f(x):
        key = x.tobytes()
        bits = x.view(np.int64)
        return (x * 2.0 if key != b"" else x), bits.view(np.float64) + 1.0, hashlib.sha1(key).hexdigest()

    x = np.array([1.5, -2.0])
    g = irad.trace(f, x)
    out, back, digest = g(x)
    np.testing.assert_array_equal(out, x * 2.0)
    np.testing.assert_array_equal(back, x + 1.0)
    assert digest == hashlib.sha1(x.tobytes()).hexdigest()
    y = np.array([0.25, 4.0])
    out, back, digest = g(y)
    np.testing.assert_array_equal(back, y + 1.0)
    assert digest == hashlib.sha1(y.tobytes()).hexdigest()


def test_data_is_a_recorded_memoryview():
    """``x.data`` is ``memoryview(x)``: recomputed at each call, not the trace-time buffer."""
    g = irad.trace(lambda x: np.frombuffer(x.data, dtype=x.dtype) * 1.0, np.array([1.0, 2.0]))
    np.testing.assert_array_equal(g(np.array([5.0, 6.0])), [5.0, 6.0])
