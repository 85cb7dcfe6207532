"""Trust II (issue 13), as a property: the untraced boundary never gives a silent mismatch.

A *crossing* is a way a traced array or scalar goes into code irad does not trace -- a C function
or method with no rule, a Python-level round trip through bytes, strings, objects or exact numbers,
C code that calls back into Python -- and something comes back.  A random small program runs a
differentiable prefix, one or two crossings and a differentiable suffix down to a scalar.  For
each, ``irad.value_and_grad`` either raises an irad error (``irad.errors.IradError``) on every call,
whose message names one of the crossings, or returns on every call -- the one that traces and two
later ones with new values, where a result baked in at trace time would show -- the value of the
plain function and the gradient central finite differences give (``irad.testing.numerical_vjp``).
A wrong gradient, a stale value or an exception that is not irad's is a failure.

Where a crossing is only piecewise differentiable (an order, a threshold) the inputs are drawn away
from the kinks, so finite differences are meaningful; nothing is compared more loosely than that.
Crossings irad refuses today may get a rule tomorrow (quad, odeint: the property accepts either).
"""
from __future__ import annotations

import array
import collections
import copy
import ctypes
import decimal
import fractions
import functools
import heapq
import io
import itertools
import math
import operator
import pickle
import re
import statistics
import struct
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irad
from irad.errors import IradError
from irad.testing import numerical_vjp

si = pytest.importorskip("scipy.integrate")
sinterp = pytest.importorskip("scipy.interpolate")
sl = pytest.importorskip("scipy.linalg")
sndi = pytest.importorskip("scipy.ndimage")
so = pytest.importorskip("scipy.optimize")
ssig = pytest.importorskip("scipy.signal")
ssp = pytest.importorskip("scipy.special")
sst = pytest.importorskip("scipy.stats")


# ---- where finite differences mean something ---------------------------------------------------

def separated(v: Any) -> bool:
    """No two values within 1e-3 of each other: an order (sort, max, rank) is locally constant.

    Values exactly equal are copies of one quantity (``rng.choice`` drawing an item twice, the
    windows of ``as_strided``, ``a * b`` and ``b * a``): they move together, so they count once."""
    r = np.unique(np.ravel(np.asarray(v, dtype=np.float64)))
    return r.size < 2 or bool(np.min(np.diff(r)) > 1e-3)


@dataclass(frozen=True)
class Crossing:
    name: str
    fn: Callable[[np.ndarray], Any]  # a traced float64 array of any shape (size >= min_size) in, numbers out
    names: str  # regex: what an irad error about this crossing names (the function or the construct)
    min_size: int = 1
    smooth: Callable[[Any], bool] | None = None  # is the crossing differentiable around this input?
    tol: float = 1e-6  # of the gradient against finite differences
    #: the finite-difference step: an adaptive solver's output moves in steps of its tolerance
    #: (odeint's 1e-11 over a 1e-6 step is 1e-5 of noise), so it takes a larger one
    eps: float = 1e-6

    def __repr__(self) -> str:  # hypothesis prints the falsifying program with these
        return self.name


def flat(v: Any) -> Any:
    return np.ravel(v)


@functools.lru_cache(maxsize=None)
def _cached_square(t: float) -> float:
    return t * t


def _pushed(v: Any) -> Any:
    h: list[Any] = []
    for t in flat(v):
        heapq.heappush(h, t)
    return np.array([heapq.heappop(h) for _ in range(len(h))])


def _packed(v: Any) -> bytes:
    return struct.pack(f"{np.size(v)}d", *flat(v))


def _decayed(v: Any) -> Any:
    """y(1) of y' = -v[0] y, y(0) = 1, integrated by C code calling back into Python."""
    ts = np.array([0.0, 1.0])
    return si.odeint(lambda y, t: -flat(v)[0] * y, 1.0, ts, rtol=1e-11, atol=1e-12)[-1, 0]


def _list_sorted(v: Any) -> Any:
    items = list(flat(v))
    items.sort()
    return np.array(items)


def _without_max(v: Any) -> Any:
    items = list(flat(v))
    items.remove(max(items))
    return np.array(items)


def _heapified(v: Any) -> Any:
    items = list(flat(v))
    heapq.heapify(items)
    return np.array(items)


def _saved_and_loaded(v: Any) -> Any:
    buf = io.BytesIO()
    np.save(buf, v)
    buf.seek(0)
    return np.load(buf)


class _Interface:
    """An object that hands numpy an array's memory by pointer (``__array_interface__``)."""

    def __init__(self, a: Any) -> None:
        self.__array_interface__ = a.__array_interface__


def _spd(v: Any) -> Any:
    r = flat(v)
    return np.eye(r.size) * 3.0 + 0.1 * np.outer(r, r)


CROSSINGS = [
    # -- bytes, buffers and reinterpretations
    Crossing("frombuffer_tobytes", lambda v: np.frombuffer(v.tobytes(), dtype=np.float64), r"tobytes|bytes"),
    Crossing("view_int64_and_back", lambda v: np.ascontiguousarray(v).view(np.int64).view(np.float64),
             r"reinterpretation"),
    Crossing("memoryview", lambda v: np.asarray(memoryview(np.ascontiguousarray(v))), r"memoryview"),
    Crossing("struct_pack_unpack", lambda v: np.array(struct.unpack(f"{v.size}d", _packed(v))), r"struct|pack"),
    Crossing("array_array", lambda v: np.array(array.array("d", flat(v))), r"array\.array|opaque array"),
    Crossing("pickle", lambda v: pickle.loads(pickle.dumps(v)), r"pickle|dumps|bytes"),
    # -- exact numbers, strings and objects
    Crossing("fraction", lambda v: float(fractions.Fraction(float(flat(v)[0]))) * v, r"as_integer_ratio"),
    Crossing("decimal", lambda v: float(decimal.Decimal(float(flat(v)[-1]))) + v, r"Decimal"),
    Crossing("str_float", lambda v: np.array([float(str(t)) for t in flat(v)]), r"\bstr\b"),
    Crossing("astype_object", lambda v: np.asarray(v).astype(object).astype(np.float64), r"object"),
    Crossing("frompyfunc", lambda v: np.asarray(np.frompyfunc(lambda t: t * 2.0, 1, 1)(v), dtype=np.float64),
             r"object|vectorized|frompyfunc"),
    Crossing("ctypes_double", lambda v: np.array([ctypes.c_double(t).value for t in flat(v)]), r"c_double|ctypes"),
    # -- orders decided in C
    Crossing("sorted", lambda v: np.array(sorted(flat(v))), r"sorted", smooth=separated),
    Crossing("statistics_median", lambda v: statistics.median(flat(v)) + v, r"sorted|median", smooth=separated),
    Crossing("heappush", _pushed, r"heap", smooth=separated),
    Crossing("rng_permuted", lambda v: np.random.default_rng(0).permuted(np.atleast_1d(v)), r"permuted"),
    Crossing("rng_choice", lambda v: np.random.default_rng(0).choice(flat(v), 3), r"choice"),
    # -- SciPy C code with no rule, and C code that calls back into Python
    Crossing("special_ellipk", lambda v: ssp.ellipk(np.tanh(v) * 0.5), r"ellipk"),
    Crossing("special_expn", lambda v: ssp.expn(1, v * v + 0.5), r"expn"),
    Crossing("signal_lfilter", lambda v: ssig.lfilter([1.0, 0.5], [1.0, -0.2], flat(v)), r"lfilter|_linear_filter"),
    Crossing("signal_sosfilt", lambda v: ssig.sosfilt(np.array([[1.0, 0.5, 0.0, 1.0, -0.2, 0.0]]), flat(v)),
             r"sosfilt"),
    Crossing("linalg_lu_solve", lambda v: sl.lu_solve(sl.lu_factor(_spd(v)), flat(v)), r"getrf|lu_factor|lu_solve"),
    Crossing("integrate_quad", lambda v: si.quad(lambda t: np.sum(v) * t * t + np.sin(t), 0.0, 1.0)[0] * v,
             r"quad|_qagse|called back"),
    Crossing("integrate_odeint", lambda v: _decayed(v) * v, r"odeint|called back", tol=1e-5, eps=1e-5),
    Crossing("optimize_newton", lambda v: so.newton(lambda t: t ** 3 + t - flat(v)[0], 0.5, tol=1e-13) * v,
             r"newton|called back"),
    # -- round trips irad follows
    Crossing("tolist_array", lambda v: np.array(v.tolist()), r"tolist"),
    Crossing("deepcopy", lambda v: copy.deepcopy(v), r"deepcopy|copy"),
    Crossing("statistics_mean", lambda v: statistics.mean(flat(v)) * v, r"mean"),
    Crossing("math_fsum", lambda v: math.fsum(flat(v)) * v, r"fsum"),
    Crossing("reduce_add", lambda v: functools.reduce(operator.add, flat(v)) + v, r"reduce|add"),
    Crossing("accumulate_mul", lambda v: np.array(list(itertools.accumulate(flat(v), operator.mul))), r"accumulate"),
    Crossing("map_lambda", lambda v: np.array(list(map(lambda t: t * t - t, flat(v)))), r"map|lambda"),
    Crossing("builtin_max", lambda v: max(flat(v)) * v, r"max", smooth=separated),
    Crossing("vectorize", lambda v: np.vectorize(lambda t: t * t + 1.0)(v), r"vectorize"),
    Crossing("apply_along_axis", lambda v: np.apply_along_axis(lambda row: row * row[::-1], -1, np.atleast_1d(v)),
             r"apply_along_axis"),
    Crossing("item_complex", lambda v: complex(flat(v)[0].item(), 0.5).real * v + abs(complex(flat(v)[-1], 0.5)),
             r"item|complex"),
    Crossing("as_strided", lambda v: (lambda r: np.lib.stride_tricks.as_strided(
        r, shape=(r.size - 1, 2), strides=(r.strides[0], r.strides[0])))(np.ascontiguousarray(flat(v))),
             r"as_strided", min_size=2),
    Crossing("lru_cache", lambda v: _cached_square(float(flat(v)[0])) + v, r"lru_cache|_cached_square"),
    Crossing("interp1d", lambda v: sinterp.interp1d(np.arange(v.size), flat(v))(np.array([0.25, 0.5 * v.size - 0.5])),
             r"interp1d|interp", min_size=2),
    Crossing("stats_rankdata", lambda v: sst.rankdata(flat(v)) * flat(v), r"rankdata", smooth=separated),
    # C code that takes decisions on traced values: each one guards (or is refused)
    Crossing("filter_lambda", lambda v: sum(filter(lambda t: t > 0.1, flat(v)), 0.0 * flat(v)[0]) * v,
             r"filter", smooth=lambda v: bool(np.min(np.abs(flat(v) - 0.1)) > 1e-3)),
    Crossing("takewhile_dropwhile", lambda v: np.array(list(itertools.takewhile(lambda t: t < 0.5, flat(v))) +
                                                       list(itertools.dropwhile(lambda t: t < 0.5, flat(v)))),
             r"takewhile|dropwhile", smooth=lambda v: bool(np.min(np.abs(flat(v) - 0.5)) > 1e-3)),
    Crossing("compress", lambda v: np.array(list(itertools.compress(flat(v), [t > 0.0 for t in flat(v)])) + [1.0]),
             r"compress", smooth=lambda v: bool(np.min(np.abs(flat(v))) > 1e-3)),
    Crossing("list_sort", _list_sorted, r"sorted|sort", smooth=separated),
    Crossing("list_remove_max", _without_max, r"max|remove", min_size=2, smooth=separated),
    Crossing("list_equality", lambda v: v * 2.0 if list(flat(v)[:1]) == [0.25] else v * 3.0, r"=="),
    Crossing("heapify", _heapified, r"heap", smooth=separated),
    Crossing("deque", lambda v: np.array(list(collections.deque(flat(v)))), r"deque"),
    # C code that reads traced memory or writes a result where irad does not follow
    Crossing("ndimage_filter", lambda v: sndi.uniform_filter1d(flat(v), 3), r"uniform_filter1d|output buffer"),
    Crossing("cubic_spline", lambda v: sinterp.CubicSpline(np.arange(v.size), flat(v))(np.array([0.5])),
             r"gtsv|evaluate|output buffer", min_size=3),
    Crossing("save_load", _saved_and_loaded, r"nditer|save|load"),
    Crossing("array_interface", lambda v: np.asarray(_Interface(v * 1.0)), r"__array_interface__"),
    Crossing("char_mod", lambda v: np.char.mod("%.17g", np.atleast_1d(v)).astype(np.float64), r"_vec_string|opaque"),
]


# ---- programs: a differentiable prefix, crossings, a differentiable suffix --------------------

def _weights(v: Any) -> Any:
    return np.linspace(0.6, 1.4, np.size(v)).reshape(np.shape(v))


PREFIX: dict[str, Callable[[Any], Any]] = {
    "sin": lambda v: np.sin(v) * 1.3,
    "scale": lambda v: v * _weights(v),
    "square": lambda v: v * v - 0.5 * v,
    "tanh": lambda v: np.tanh(v + 0.2) * 1.5,
    "flip": lambda v: v[::-1] if v.ndim else -v,
    "transpose": lambda v: v.T + 0.1,  # a strided view for 2-d
    "tail": lambda v: v[1:] if v.ndim and v.shape[0] > 2 else v * 0.9,
}
SHAPES = [(), (3,), (5,), (2, 3)]


@dataclass(frozen=True)
class Program:
    shape: tuple[int, ...]
    prefix: tuple[str, ...]
    crossings: tuple[Crossing, ...]
    suffix: str  # "dot" or "square"

    def run(self, x: Any, probe: list[tuple[Crossing, Any]] | None = None) -> Any:
        v = x
        for p in self.prefix:
            v = PREFIX[p](v)
        for i, c in enumerate(self.crossings):
            if i:
                v = 1.2 * np.tanh(v)  # bounded between crossings
            if np.size(v) < c.min_size:
                v = np.concatenate([np.ravel(v), np.array([0.35, -0.8])])
            if probe is not None:
                probe.append((c, v))
            v = np.asarray(c.fn(v), dtype=np.float64)
        r = np.ravel(v)
        w = np.cos(np.arange(r.size) * 0.7 + 0.3)
        return np.sum(w * r) if self.suffix == "dot" else np.sum(w * r * r)

    def function(self) -> Callable[[Any], Any]:
        def prog(x):
            return self.run(x)
        return prog

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """An input where every crossing is differentiable (away from ties and thresholds)."""
        for _ in range(200):
            x = rng.uniform(-1.2, 1.2, size=self.shape)
            probe: list[tuple[Crossing, Any]] = []
            self.run(x, probe)
            if all(c.smooth is None or c.smooth(v) for c, v in probe):
                return x
        raise AssertionError(f"no smooth input for {self}")  # pragma: no cover


def check(p: Program, seed: int) -> str:
    """The property; returns the outcome ("agrees" or the irad error class) for the report."""
    rng = np.random.default_rng(seed)
    f = p.function()
    vg = irad.value_and_grad(f)
    outcomes = []
    for call in range(3):  # the call that traces, then two with new values
        x = p.draw(rng)
        want = p.run(x)
        try:
            value, grad = vg(x)
        except IradError as e:
            msg = str(e)
            assert any(re.search(c.names, msg) for c in p.crossings), \
                f"{p}: {type(e).__name__} names none of the crossings:\n{msg}"
            outcomes.append(type(e).__name__)
            continue
        tol = max(c.tol for c in p.crossings)
        np.testing.assert_allclose(value, want, rtol=1e-9, atol=1e-10, err_msg=f"{p}: value of call {call + 1}")
        fd = numerical_vjp(f, (x,), 1.0, eps=max(c.eps for c in p.crossings))[0]
        assert np.shape(grad) == np.shape(x), (p, np.shape(grad))
        np.testing.assert_allclose(grad, fd, rtol=max(tol, 1e-5), atol=tol,
                                   err_msg=f"{p}: gradient of call {call + 1} against finite differences")
        outcomes.append("agrees")
    if not any(c.smooth is not None for c in p.crossings):
        # (a crossing that decides on the data, compress or sorted, may take another path on a later
        # call, one the other crossing does not reach: then a refusal on one call only is right)
        assert len(set(outcomes)) == 1, f"{p}: refused on some calls only: {outcomes}"
    return outcomes[0]


# ---- every crossing alone (a failure names it) --------------------------------------------------

@pytest.mark.parametrize("shape", [(), (4,), (2, 3)], ids=["0d", "1d", "2d"])
@pytest.mark.parametrize("crossing", CROSSINGS, ids=[c.name for c in CROSSINGS])
def test_each_crossing_refuses_or_agrees(crossing, shape):
    check(Program(shape, ("sin",), (crossing,), "dot"), seed=len(shape))


# ---- random small programs ----------------------------------------------------------------------

@st.composite
def programs(draw: Any) -> Program:
    shape = draw(st.sampled_from(SHAPES))
    prefix = tuple(draw(st.lists(st.sampled_from(sorted(PREFIX)), max_size=3)))
    crossings = tuple(draw(st.lists(st.sampled_from(CROSSINGS), min_size=1, max_size=2)))
    return Program(shape, prefix, crossings, draw(st.sampled_from(["dot", "square"])))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**32 - 1))
def test_random_programs_through_untraced_code_refuse_or_agree(p, seed):
    check(p, seed)


def test_the_crossings_cover_both_outcomes():
    """The list is a boundary: some crossings are refused, some are followed exactly."""
    seen = {check(Program((4,), ("sin",), (c,), "dot"), seed=7) for c in CROSSINGS}
    assert "agrees" in seen and seen - {"agrees"}, seen
