"""Property: random compositions of numpy ops and Python control flow trace, verify, and
re-evaluate equal to the function (on the tracing inputs, and on fresh inputs unless a guard
fails).  A drawn "program" is a list of steps run by a small interpreter that is itself traced."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irad
from irad.pytree import flatten

UNARY = {
    "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "arctan": np.arctan, "abs": np.abs, "neg": np.negative,
    "expt": lambda v: np.exp(np.tanh(v)), "log1p_sq": lambda v: np.log1p(v * v),
    "soft": lambda v: np.sqrt(v * v + 1.0), "sq": np.square,
}
BINARY = ["add", "sub", "mul", "div", "max", "pow"]
REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


def squash(v: Any) -> Any:
    return np.tanh(v) * 3.0  # keeps magnitudes bounded between steps


def operand(v: Any, y: Any, kind: str, k: int) -> Any:
    """The second operand of a binary step: broadcastable against ``v``."""
    if kind == "const":
        return 0.5 + k
    if kind == "scalar":
        return y[k % 4]
    if kind == "pyfloat":
        return float(y[k % 4])
    if kind == "vector":
        n = v.shape[-1]
        return np.resize(y, n) if n != 4 else y  # noqa: broadcast along the last axis
    return v


def binary(op: str, a: Any, b: Any) -> Any:
    if op == "add":
        return a + b
    if op == "sub":
        return b - a
    if op == "mul":
        return a * b
    if op == "div":
        return a / (1.0 + b * b)
    if op == "max":
        return np.maximum(a, b)
    return np.abs(a) ** 1.5


def step(v: Any, y: Any, s: tuple) -> Any:
    kind = s[0]
    if kind == "unary":
        return UNARY[s[1]](v)
    if kind == "binary":
        _, op, which, k = s
        return squash(binary(op, v, operand(v, y, which, k)))
    if kind == "reduce":
        _, name, axis, keep = s
        return REDUCE[name](v, axis=axis, keepdims=keep)
    if kind == "transpose":
        return v.T
    if kind == "reshape":
        return v.reshape(-1) if s[1] == "flat" else v.reshape(v.shape[::-1])
    if kind == "index":
        _, how, k = s
        if how == "int":
            return v[k % v.shape[0]]
        if how == "rev":
            return v[::-1]
        if how == "slice":
            return v[k % v.shape[0]:]
        if how == "last":
            return v[..., -1]
        return v[None]
    if kind == "if":
        _, thresh, f1, f2 = s
        if v.sum() > thresh:
            return UNARY[f1](v)
        return UNARY[f2](v) * 0.5
    if kind == "loop":
        _, n, f1 = s
        for i in range(n):
            v = UNARY[f1](v) * 0.9 + 0.1 * i
        return v
    if kind == "inplace":
        _, k = s
        w = v.copy()
        w[k % w.shape[0]] += y[k % 4]
        w *= 0.5
        return w
    if kind == "rows":
        total = 0.0
        for r in v:
            total = total + r
        return squash(total)
    raise AssertionError(kind)


@st.composite
def programs(draw: Any) -> list[tuple]:
    shape: tuple = (3, 4)
    prog = []
    for _ in range(draw(st.integers(1, 6))):
        options = ["unary", "binary", "if", "loop"]
        if shape:
            options += ["reduce", "index", "inplace", "rows"]
        if len(shape) >= 1:
            options += ["reshape"]
        if len(shape) == 2:
            options += ["transpose"]
        kind = draw(st.sampled_from(options))
        if kind == "unary":
            s: tuple = ("unary", draw(st.sampled_from(sorted(UNARY))))
        elif kind == "binary":
            which = draw(st.sampled_from(["const", "scalar", "pyfloat", "self"] + (["vector"] if shape else [])))
            s = ("binary", draw(st.sampled_from(BINARY)), which, draw(st.integers(0, 5)))
        elif kind == "reduce":
            axis = draw(st.sampled_from([None] + list(range(len(shape)))))
            keep = draw(st.booleans())
            s = ("reduce", draw(st.sampled_from(sorted(REDUCE))), axis, keep)
            if axis is None:
                shape = tuple(1 for _ in shape) if keep else ()
            else:
                shape = tuple(1 if i == axis else n for i, n in enumerate(shape)) if keep else \
                    tuple(n for i, n in enumerate(shape) if i != axis)
        elif kind == "transpose":
            s, shape = ("transpose",), shape[::-1]
        elif kind == "reshape":
            flat = draw(st.booleans())
            s = ("reshape", "flat" if flat else "rev")
            shape = (int(np.prod(shape)),) if flat else shape[::-1]
        elif kind == "index":
            how = draw(st.sampled_from(["int", "rev", "slice", "last", "none"]))
            k = draw(st.integers(0, 5))
            s = ("index", how, k)
            if how == "int":
                shape = shape[1:]
            elif how == "slice":
                shape = (shape[0] - k % shape[0],) + shape[1:]
            elif how == "last":
                shape = shape[:-1]
            elif how == "none":
                shape = (1,) + shape
        elif kind == "if":
            s = ("if", draw(st.floats(-2, 2)), draw(st.sampled_from(sorted(UNARY))),
                 draw(st.sampled_from(sorted(UNARY))))
        elif kind == "loop":
            s = ("loop", draw(st.integers(0, 3)), draw(st.sampled_from(sorted(UNARY))))
        elif kind == "inplace":
            s = ("inplace", draw(st.integers(0, 5)))
        else:
            s, shape = ("rows",), shape[1:]
        prog.append(s)
    return prog


def make_runner(prog: list[tuple]) -> Any:
    def run(x, y):
        v = x
        for s in prog:
            v = step(v, y, s)
        return v
    return run


def assert_same(a: Any, b: Any) -> None:
    la, ta = flatten(a)
    lb, tb = flatten(b)
    assert ta == tb
    for u, w in zip(la, lb):
        assert type(u) is type(w) and np.shape(u) == np.shape(w)
        np.testing.assert_allclose(u, w, rtol=1e-12, atol=1e-12)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**32 - 1))
def test_random_numpy_programs(prog: list[tuple], seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal(4)
    run = make_runner(prog)
    want = run(x, y)
    g = irad.trace(run, x, y)
    irad.verify(g)
    assert_same(g(x, y), want)
    has_if = any(s[0] == "if" for s in prog)
    if not has_if:
        assert not g.guards
    x2, y2 = rng.standard_normal((3, 4)), rng.standard_normal(4)
    try:
        got = g(x2, y2)
    except irad.GuardError:
        assert has_if
        got = irad.trace(run, x2, y2)(x2, y2)
    assert_same(got, run(x2, y2))


# ---- Python float programs: math functions, branches and while loops ------------------------

FLOAT_OPS = ["add", "mul", "sin", "exp_tanh", "branch", "while", "pow", "hypot"]


def float_step(a: float, b: float, s: tuple) -> float:
    kind, c = s
    if kind == "add":
        return a + b * c
    if kind == "mul":
        return math.tanh(a * b) + c
    if kind == "sin":
        return math.sin(a) * c - b
    if kind == "exp_tanh":
        return math.exp(math.tanh(a)) + abs(b)
    if kind == "branch":
        return a - c if a > b else b * 0.5
    if kind == "while":
        n = 0
        while abs(a) > 0.5 and n < 5:
            a = a * 0.6
            n += 1
        return a + n
    if kind == "pow":
        return abs(a) ** 0.5 + min(a, b)
    return math.hypot(a, c) - max(b, c)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(FLOAT_OPS), st.floats(-2, 2)), min_size=1, max_size=8),
       st.floats(-3, 3), st.floats(-3, 3), st.floats(-3, 3), st.floats(-3, 3))
def test_random_float_programs(prog: list[tuple], a: float, b: float, a2: float, b2: float) -> None:
    def run(a, b):
        for s in prog:
            a, b = float_step(a, b, s), a
        return a, b

    want = run(a, b)
    g = irad.trace(run, a, b)
    irad.verify(g)
    assert_same(g(a, b), want)
    try:
        got = g(a2, b2)
    except irad.GuardError:
        assert any(k in ("branch", "while") for k, _ in prog) or g.guards
        return
    assert_same(got, run(a2, b2))


# ---- views and in-place updates: any interleaving matches numpy ---------------------------------

VIEW_KINDS = ["row", "col", "slice", "rev", "T", "reshape", "ravel", "ellipsis"]


def make_view(a: Any, kind: str, k: int) -> Any:
    if a.ndim == 0:
        return a[...]
    n = a.shape[0]
    if kind == "row":
        return a[k % n] if a.ndim == 2 else a[k % n:k % n + 2]
    if kind == "col":
        return a[:, k % a.shape[1]] if a.ndim == 2 else a[k % n:]
    if kind == "slice":
        return a[k % n:]
    if kind == "rev":
        return a[::-1]
    if kind == "T":
        return a.T
    if kind == "reshape":
        return a.reshape(-1) if a.flags.c_contiguous else a[...]
    if kind == "ravel":
        return a.ravel()
    return a[...]


def inplace_step(arrs: list, acc: Any, x: Any, y: Any, s: tuple) -> Any:
    kind, i, k = s
    a = arrs[i % len(arrs)]
    if kind == "view":
        arrs.append(make_view(a, VIEW_KINDS[k % len(VIEW_KINDS)], k))
    elif kind == "iadd":
        a += y[k % 4] * (k + 1)
    elif kind == "imul":
        a *= 1.0 + 0.1 * k
    elif kind == "set":
        if a.ndim == 0:
            a[...] = y[k % 4]
        else:
            a[k % a.shape[0]] = y[k % 4] * 2.0
    elif kind == "slice_iadd":
        if a.ndim >= 1:
            a[1:] += 0.5 * y[k % 4]
    elif kind == "out":
        np.tanh(a, out=a)
    elif kind == "read":
        acc = acc + a.sum() * (k + 1)
    elif kind == "copy":
        arrs.append(a.copy())
    elif kind == "zeros":  # an untracked buffer: traced values written into it (or its views) adopt it
        arrs.append(np.zeros((4, 3)) + k)
    else:  # "new": a fresh traced array
        arrs.append(x * (k + 1.0))
    return acc


INPLACE_KINDS = ["view", "view", "iadd", "imul", "set", "slice_iadd", "out", "read", "read", "copy", "new", "zeros"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(INPLACE_KINDS), st.integers(0, 7), st.integers(0, 7)),
                min_size=1, max_size=14), st.integers(0, 2**32 - 1))
def test_random_views_and_inplace_updates(prog: list[tuple], seed: int) -> None:
    def run(x, y):
        arrs = [x.copy()]
        acc = 0.0
        for s in prog:
            acc = inplace_step(arrs, acc, x, y, s)
        return acc, arrs[0], arrs[-1]

    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((4, 3)), rng.standard_normal(4)
    want = run(x, y)
    g = irad.trace(run, x, y)
    irad.verify(g)
    assert not g.guards
    assert_same(g(x, y), want)
    x2, y2 = rng.standard_normal((4, 3)), rng.standard_normal(4)
    assert_same(g(x2, y2), run(x2, y2))
