"""``irad.batching.batch``: a batched graph computes what a Python loop over the batch computes.

The oracle is the *unbatched* graph's compiled program run on each row and the rows stacked; the
batched graph must match it, pass ``verify``, and declare the types its values really have
(``typed_run`` checks every value against its binder's type).  One test per rule family, each
with broadcasting against unbatched operands, 0-d values, keepdims and negative axes where they
apply; the backward graphs of the whole corpus (tests/functions.py); and the loop fallback.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable, Sequence

import numpy as np
import pytest

import irad
from irad import ad, passes
from irad import primitives as irad_ops
from irad.passes import evaluate_residuals, split
from irad.batching import Rows, batch
from irad.ir import ArrayT, Const, Graph, Op, OpaqueT, ScalarT, Var, bind_outputs, const, map_atoms, verify
from irad.lower import lower
from irad.trace import trace_values

from functions import CASES

SIZE = 3


def typed_run(g: Graph, inputs: Sequence[Any]) -> list[Any]:
    """Evaluate ``g``, checking that every value has its binder's shape and dtype."""
    env: dict[int, Any] = {}

    def check(v: Var, x: Any, where: str) -> None:
        t = v.type
        if isinstance(t, ArrayT):
            assert isinstance(x, (np.ndarray, np.generic)), f"{v} ({where}) is declared {t}, got {type(x).__name__}"
            assert x.shape == t.shape and x.dtype.name == t.dtype, f"{v} ({where}) is declared {t}, got " \
                                                                   f"{x.dtype}{list(x.shape)}"
        elif isinstance(t, ScalarT):
            assert type(x).__name__ == t.kind, f"{v} ({where}) is declared {t}, got {type(x).__name__}"
        elif t == OpaqueT("rows"):
            assert isinstance(x, Rows), f"{v} ({where}) is declared rows, got {type(x).__name__}"

    for v, x in zip(g.inputs, inputs):
        env[v.id] = x
        check(v, x, "input")

    def get(a: Any) -> Any:
        return env[a.id] if isinstance(a, Var) else a.value

    for op in g.ops:
        r = op.fn(*[map_atoms(a, get) for a in op.args], **{k: map_atoms(a, get) for k, a in op.kwargs if k[0] != "_"})
        bind_outputs(op, r, env)
        for o in op.outs:
            check(o, env[o.id], op.prim)
    return [get(o) for o in g.outputs]


def _copy(x: Any) -> Any:
    """A fresh copy of an array (``irad.primitives.add_into`` writes into its first argument)."""
    return x.copy() if isinstance(x, np.ndarray) else x


def rows_oracle(g: Graph, inputs: Sequence[Any], batched: Sequence[int], size: int) -> list[np.ndarray]:
    """The unbatched graph's program on each row, stacked."""
    fn = lower(g, "row").fn
    per_row = [fn(*[_copy(x[i]) if k in batched else _copy(x) for k, x in enumerate(inputs)]) for i in range(size)]
    return [np.stack([np.asarray(r[k]) for r in per_row]) for k in range(len(g.outputs))]


def sample_rows(t: Any, rng: np.random.Generator, size: int) -> Any:
    if isinstance(t, ScalarT):
        return rng.normal(size=size)
    assert isinstance(t, ArrayT) and t.dtype.startswith(("float", "complex")), t
    x = rng.normal(size=(size,) + t.shape)
    return (x + 1j * rng.normal(size=x.shape) if t.dtype.startswith("complex") else x).astype(t.dtype)


def check_batched(g: Graph, inputs: Sequence[Any], batched: Sequence[int], size: int = SIZE,
                  expect_loops: int | None = 0) -> Graph:
    """``batch(g)`` agrees with the loop over rows; returns the batched graph."""
    bg = batch(g, batched, size)
    verify(bg)
    str(bg)  # printable
    want = rows_oracle(g, inputs, batched, size)
    got = typed_run(bg, [_copy(x) for x in inputs])
    low = lower(bg, "batched")
    got2 = low.fn(*[_copy(x) for x in inputs])
    for k, (w, a, c) in enumerate(zip(want, got, got2)):
        assert np.shape(a) == w.shape, f"output {k}: {np.shape(a)} != {w.shape}\n{bg}"
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-12, err_msg=f"output {k}\n{bg}")
        np.testing.assert_allclose(c, w, rtol=1e-12, atol=1e-12, err_msg=f"output {k} (lowered)\n{low.source}")
    loops = sum(1 for op in bg.ops if op.prim == "irad.batching.loop_call")
    if expect_loops is not None:
        assert loops == expect_loops, f"{loops} looped ops, expected {expect_loops}:\n{bg}"
    return bg


def check_fn(f: Callable[..., Any], args: Sequence[Any], batched: Sequence[int], expect_loops: int | None = 0,
             seed: int = 0) -> Graph:
    """Trace ``f`` at ``args``, batch the graph inputs at ``batched`` with random rows, compare."""
    g = irad.trace(f, *args)
    rng = np.random.default_rng(seed)
    assert len(g.inputs) == len(args), "every argument is a graph input"
    inputs = [sample_rows(v.type, rng, SIZE) if k in batched else a for k, (v, a) in enumerate(zip(g.inputs, args))]
    return check_batched(g, inputs, batched, expect_loops=expect_loops)


def combos(n: int) -> list[tuple[int, ...]]:
    """Every non-empty subset of n input positions."""
    return [tuple(k for k in range(n) if m >> k & 1) for m in range(1, 2 ** n)]


R = np.random.default_rng(42)


def arr(*shape: int) -> np.ndarray:
    return R.normal(size=shape)


# ---- elementwise ----

ELEMENTWISE = [
    ("mul_broadcast", lambda x, y: x * y + np.sin(x), (arr(3, 1), arr(4))),
    ("scalar_times_matrix", lambda s, m: s * m - m / (1.5 + s * s), (arr(), arr(2, 3))),
    ("python_float", lambda s, m: s * m + s, (0.7, arr(2, 3))),
    ("numpy_scalar", lambda s, m: np.exp(s) * m, (np.float64(0.3), arr(4))),
    ("where_clip", lambda x, y: np.where(x > 0, x, y).clip(-0.5, 0.5), (arr(3, 4), arr(4))),
    ("ufunc2", lambda x, y: np.arctan2(x, y) + np.hypot(x, y) + np.maximum(x, y), (arr(2, 1, 3), arr(4, 1))),
    ("ops", lambda x, y: -x ** 2 + abs(y) // 0.7 + (x % 1.3) * (x >= y), (arr(4), arr(1))),
    ("astype_real", lambda x: np.real(x.astype(np.complex128)) + np.zeros_like(x) + np.ones_like(x), (arr(3),)),
    ("float_of_scalar", lambda x, y: float(np.sum(x)) * y, (arr(3), arr(2))),
    ("python_max", lambda a, b: max(a, b) * 2.0 + min(a, b), (0.3, -0.2)),
]


@pytest.mark.parametrize("name,f,args", ELEMENTWISE, ids=[c[0] for c in ELEMENTWISE])
def test_elementwise(name: str, f: Callable[..., Any], args: tuple[Any, ...]) -> None:
    for batched in combos(len(args)):
        check_fn(f, args, batched)


def test_batched_python_float_becomes_a_float64_array() -> None:
    g = irad.trace(lambda s, x: s * x, 0.5, np.ones(3, np.float32))
    bg = check_batched(g, [np.array([0.5, 1.0, 2.0]), np.ones(3, np.float32)], [0])
    assert str(bg.inputs[0].type) == "f64[3]"


# ---- reductions and axes ----

REDUCTIONS = [
    ("sum_all", lambda x: np.sum(x), (arr(3, 4),)),
    ("sum_neg_keepdims", lambda x: np.sum(x, axis=-1, keepdims=True) * x, (arr(3, 4),)),
    ("mean_tuple", lambda x: x.mean(axis=(0, 2)), (arr(2, 3, 4),)),
    ("max_min_std", lambda x: np.max(x, axis=0) + np.min(x, 1) + np.std(x, axis=-2, ddof=1), (arr(3, 3),)),
    ("sum_0d", lambda x: np.sum(x) + np.prod(x, axis=0), (arr(),)),
    ("var_keepdims_none", lambda x: np.var(x, keepdims=True) + x, (arr(2, 3),)),
    ("cumsum", lambda x: np.cumsum(x) + np.cumsum(x, axis=-1).sum(), (arr(2, 3),)),
    ("cumprod_axis0", lambda x: np.cumprod(x, 0), (arr(3, 2),)),
    ("flip_sort", lambda x: np.flip(x) + np.flip(x, -1) + np.sort(x, axis=0), (arr(3, 4),)),
    ("argmax", lambda x: x[np.argmax(x, axis=1)] * 1.0, (arr(3, 3),)),
    ("diff", lambda x: np.diff(x, axis=-1) ** 2, (arr(2, 5),)),
]


@pytest.mark.parametrize("name,f,args", REDUCTIONS, ids=[c[0] for c in REDUCTIONS])
def test_reductions(name: str, f: Callable[..., Any], args: tuple[Any, ...]) -> None:
    check_fn(f, args, (0,), expect_loops=None if name == "argmax" else 0)


SHAPES = [
    ("reshape", lambda x: x.reshape(2, -1) @ np.ones(6) + np.reshape(x, (12,))[:2].sum(), (arr(3, 4),)),
    ("ravel_flatten", lambda x: x.ravel() * x.flatten() + np.ravel(x.T), (arr(2, 3),)),
    ("transpose", lambda x: x.T + np.transpose(x, (2, 1, 0)) * 2.0 + np.transpose(x, (-1, 1, 0)) +
     x.transpose(2, 1, 0) + x.transpose((2, 1, 0)) + np.transpose(x, (1, 2, 0)).sum(-1).T[:, :, None], (arr(2, 3, 4),)),
    ("swap_move", lambda x: np.swapaxes(x, 0, -1) + np.moveaxis(x, 0, -1) + np.moveaxis(x, [0, 1], [-1, -2]),
     (arr(3, 3, 3),)),
    ("expand_squeeze", lambda x: np.expand_dims(x, -1) + np.expand_dims(x, (0, 2)).squeeze(0) +
     np.squeeze(np.expand_dims(x, 1)), (arr(4, 4),)),
    ("broadcast_to", lambda x, y: np.broadcast_to(x, (2, 3, 4)) * y, (arr(4), arr(3, 1))),
    ("broadcast_scalar", lambda x: np.broadcast_to(x, (5,)) + 1.0, (arr(),)),
]


@pytest.mark.parametrize("name,f,args", SHAPES, ids=[c[0] for c in SHAPES])
def test_shapes(name: str, f: Callable[..., Any], args: tuple[Any, ...]) -> None:
    for batched in combos(len(args)):
        check_fn(f, args, batched)


def test_fortran_order_reshapes_are_looped() -> None:
    """Only C order keeps each row's elements together; F order (positional or keyword) loops."""
    check_fn(lambda x: np.ravel(x, "F") + x.flatten("C") + x.ravel(order="F") + np.reshape(x, (6,), "F"),
             (arr(2, 3),), (0,), expect_loops=3)


# ---- products ----

PRODUCT_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                  ((2, 3), (5, 3, 4)), ((5, 2, 3), (3,)), ((3,), (5, 3, 4)), ((5, 2, 3), (5, 3, 4)), ((3, 1), (1, 3)),
                  ((2, 3), (3, 1)), ((1, 2, 3), (5, 3, 4))]


@pytest.mark.parametrize("sx,sy", PRODUCT_SHAPES, ids=[f"{sx}@{sy}" for sx, sy in PRODUCT_SHAPES])
def test_matmul_every_rank_and_side(sx: tuple[int, ...], sy: tuple[int, ...]) -> None:
    for f in (lambda x, y: x @ y, lambda x, y: np.matmul(x, y)):
        for batched in combos(2):
            check_fn(f, (arr(*sx), arr(*sy)), batched)


@pytest.mark.parametrize("sx,sy", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((2, 2, 3), (3,)),
                                   ((), (3,)), ((2, 3), ())])
def test_dot(sx: tuple[int, ...], sy: tuple[int, ...]) -> None:
    for batched in combos(2):
        check_fn(lambda x, y: np.dot(x, y), (arr(*sx), arr(*sy)), batched)
    check_fn(lambda x, y: np.dot(x, y) if np.ndim(x) else x * y, (arr(*sx), arr(*sy)), (0,))


EINSUMS = [("ij,j->i", (2, 3), (3,)), ("ij,jk", (2, 3), (3, 4)), ("i,i", (3,), (3,)), ("ba,ab->", (2, 3), (3, 2)),
           ("...ij,jk->...ik", (5, 2, 3), (3, 4)), ("ij,ij->ij", (2, 3), (2, 3)), ("Ab,bc", (2, 3), (3, 4)),
           (",ik->ik", (), (3, 5))]


@pytest.mark.parametrize("spec,sx,sy", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum(spec: str, sx: tuple[int, ...], sy: tuple[int, ...]) -> None:
    for batched in combos(2):
        check_fn(lambda x, y: np.einsum(spec, x, y), (arr(*sx), arr(*sy)), batched)


@pytest.mark.parametrize("axes,sx,sy", [(1, (2, 3), (3, 4)), (2, (2, 3, 4), (3, 4, 5)), (([1], [0]), (2, 3), (3, 4)),
                                        (([0, 2], [2, 0]), (3, 2, 4), (4, 5, 3)), (0, (2,), (3,)),
                                        (([], []), (), (4,))])
def test_tensordot(axes: Any, sx: tuple[int, ...], sy: tuple[int, ...]) -> None:
    for batched in combos(2):
        check_fn(lambda x, y: np.tensordot(x, y, axes=axes), (arr(*sx), arr(*sy)), batched)


def test_outer() -> None:
    for batched in combos(2):
        check_fn(lambda x, y: np.outer(x, y), (arr(2, 2), arr(3)), batched)
        check_fn(lambda x, y: np.multiply.outer(x, y), (arr(2), arr(3, 2)), batched)
        check_fn(lambda x, y: np.subtract.outer(x, y), (arr(), arr(3)), batched)


def test_solve() -> None:
    a = arr(3, 3) + 3 * np.eye(3)
    for rhs in (arr(3), arr(3, 2)):
        for batched in combos(2):
            check_fn(lambda a, b: np.linalg.solve(a, b), (a, rhs), batched)


# ---- indexing ----

IDX = np.array([2, 0, 0])
MASK = np.array([True, False, True, True])
INDEXING = [
    ("slices", lambda x: x[1:, ::-1] + x[:-1, 0:3], (arr(3, 3),)),
    ("int_none_ellipsis", lambda x: x[0] * x[..., 1, None] + x[None, :, -1], (arr(3, 3),)),
    ("int_array", lambda x: x[IDX] + x[:, IDX].T + x[IDX, 1:].sum(), (arr(3, 3),)),
    ("two_arrays_adjacent", lambda x: x[:, IDX, IDX], (arr(2, 3, 3),)),
    ("mask", lambda x: x[MASK] * 2.0 + x[:, MASK].sum(), (arr(4, 4),)),
    ("list_index", lambda x: x[[0, 2]] + x[..., [1, 1]][0], (arr(3, 2),)),
    ("0d_from_vector", lambda x: x[1] * x[-1], (arr(3),)),
]


@pytest.mark.parametrize("name,f,args", INDEXING, ids=[c[0] for c in INDEXING])
def test_getitem(name: str, f: Callable[..., Any], args: tuple[Any, ...]) -> None:
    check_fn(f, args, (0,))


def test_getitem_advanced_indices_apart_loops() -> None:
    """``x[i, :, j]`` puts the advanced axes first, so the batch axis would move: looped."""
    check_fn(lambda x: x[IDX, :, IDX], (arr(3, 2, 3),), (0,), expect_loops=1)


def test_getitem_with_a_batched_index() -> None:
    """An unbatched array gathered at a batch of index arrays is one gather; mixed with other
    items (a batched advanced index beside a slice) it is looped."""
    x = arr(4, 2)
    xv, iv, out = Var(0, ArrayT("float64", (4, 2))), Var(1, ArrayT("int64", (3,))), Var(2, ArrayT("float64", (3, 2)))
    g = Graph("gather", (xv, iv), (Op("operator.getitem", (xv, iv), (), (out,), operator.getitem),), (out,))
    idx = np.array([[0, 1, 3], [2, 2, 0], [3, 0, 1]])
    check_batched(g, [x, idx], [1])
    g2 = g.replace(ops=(Op("operator.getitem", (xv, (iv, const(slice(None)))), (), (out,), operator.getitem),))
    check_batched(g2, [x, idx], [1], expect_loops=1)


# ---- joining, splitting, padding, gathers ----

JOINS = [
    ("concatenate", lambda x, y: np.concatenate([x, y, x], axis=-1), (arr(2, 3), arr(2, 1))),
    ("concatenate_none", lambda x, y: np.concatenate([x, y], axis=None), (arr(2, 3), arr(4))),
    ("stack", lambda x, y: np.stack([x, y], axis=-1) + np.stack((y, x)).sum(0)[..., None], (arr(3,), arr(3))),
    ("split", lambda x, y: sum(a.sum() for a in np.split(x * y, [1, 3], axis=-1)), (arr(2, 4), arr(4))),
    ("pad", lambda x, y: np.pad(x * y, [(1, 0)]) + np.pad(x, (2, 2))[:4], (arr(3), arr(3))),
    ("take", lambda x, y: np.take(x * y, IDX) + np.take(x, IDX, axis=-1), (arr(3), arr(3))),
    ("take_along_axis", lambda x, y: np.take_along_axis(x * y, np.array([[2, 0], [1, 1]]), axis=-1),
     (arr(2, 3), arr(3))),
]


@pytest.mark.parametrize("name,f,args", JOINS, ids=[c[0] for c in JOINS])
def test_joins(name: str, f: Callable[..., Any], args: tuple[Any, ...]) -> None:
    for batched in combos(len(args)):
        check_fn(f, args, batched)


# ---- irad's own ops (as backward graphs use them) ----

def _graph(name: str, inputs: Sequence[ArrayT | ScalarT], body: Callable[..., tuple[Any, Any, Any]]) -> Graph:
    """A one-op graph ``fn(*args)`` on inputs of these types (``body(*vars) -> (fn, args, out type)``)."""
    vs = tuple(Var(k, t) for k, t in enumerate(inputs))
    fn, args, t = body(*vs)
    out = Var(len(vs), t)
    prim = {irad_ops.sum_to: "irad.primitives.sum_to", irad_ops.to_dtype: "irad.primitives.to_dtype",
            irad_ops.zeros_like: "irad.primitives.zeros_like", irad_ops.add_into: "irad.primitives.add_into",
            irad_ops.setitem: "irad.primitives.setitem", irad_ops.add_at: "irad.primitives.add_at",
            np.bincount: "numpy.bincount"}[fn]
    kwargs = ()
    if isinstance(args, dict):
        args, kwargs = args["args"], tuple(args["kwargs"].items())
    return Graph(name, vs, (Op(prim, tuple(args), kwargs, (out,), fn),), (out,))


F = "float64"
ZERO = np.zeros((4, 3))
IRAD_OPS = [
    ("sum_to_lead", [ArrayT(F, (2, 4, 3))], lambda g: (irad_ops.sum_to, (g, const((4, 3))), ArrayT(F, (4, 3)))),
    ("sum_to_unit", [ArrayT(F, (4, 3))], lambda g: (irad_ops.sum_to, (g, const((1, 3))), ArrayT(F, (1, 3)))),
    ("sum_to_up", [ArrayT(F, (3,))], lambda g: (irad_ops.sum_to, (g, const((4, 3))), ArrayT(F, (4, 3)))),
    ("sum_to_0d", [ArrayT(F, (3,))], lambda g: (irad_ops.sum_to, (g, const(())), ArrayT(F, (), True))),
    ("to_dtype_scalar", [ScalarT("float")],
     lambda g: (irad_ops.to_dtype, (g, const(np.dtype(F)), const(True)), ArrayT(F, (), True))),
    ("to_dtype_real", [ArrayT("complex128", (3,))],
     lambda g: (irad_ops.to_dtype, (g, const(np.dtype(F)), const(False)), ArrayT(F, (3,)))),
    ("zeros_like", [ArrayT(F, (3,))], lambda g: (irad_ops.zeros_like, (g,), ArrayT(F, (3,)))),
    ("add_into", [ArrayT(F, (4, 3)), ArrayT(F, (3,))], lambda a, g: (irad_ops.add_into, (a, g), ArrayT(F, (4, 3)))),
    ("setitem", [ArrayT(F, (4,))],
     lambda v: (irad_ops.setitem, (Const(ZERO, ArrayT(F, (4, 3))), const((slice(None), 1)), v), ArrayT(F, (4, 3)))),
    ("setitem_row", [ArrayT(F, (3,))],
     lambda v: (irad_ops.setitem, (Const(ZERO, ArrayT(F, (4, 3))), const(2), v), ArrayT(F, (4, 3)))),
    ("setitem_bcast", [ArrayT(F, ())],
     lambda v: (irad_ops.setitem, (Const(ZERO, ArrayT(F, (4, 3))), const((slice(1, 3),)), v), ArrayT(F, (4, 3)))),
    ("setitem_batched_dest", [ArrayT(F, (4, 3))],
     lambda a: (irad_ops.setitem, (a, const(slice(0, 2)), const(1.5)), ArrayT(F, (4, 3)))),
    ("add_at", [ArrayT(F, (5,))],
     lambda v: (irad_ops.add_at, (Const(ZERO, ArrayT(F, (4, 3))), (Const(np.array([0, 1, 1, 3, 0]), ArrayT("int64", (5,))),
                                                                   const(2)), v), ArrayT(F, (4, 3)))),
    ("add_at_slice", [ArrayT(F, (4, 2))],
     lambda v: (irad_ops.add_at, (Const(ZERO, ArrayT(F, (4, 3))), const((slice(None), [2, 2])), v), ArrayT(F, (4, 3)))),
    ("bincount", [ArrayT(F, (5,))],
     lambda w: (np.bincount, {"args": (Const(np.array([0, 1, 1, 3, 0]), ArrayT("int64", (5,))),),
                              "kwargs": {"weights": w, "minlength": const(6)}}, ArrayT(F, (6,)))),
]


@pytest.mark.parametrize("name,types,body", IRAD_OPS, ids=[c[0] for c in IRAD_OPS])
def test_irad_ops(name: str, types: list[Any], body: Callable[..., Any]) -> None:
    g = _graph(name, types, body)
    rng = np.random.default_rng(1)
    for batched in combos(len(types)):
        inputs = [sample_rows(t, rng, SIZE) if k in batched else
                  (0.5 if isinstance(t, ScalarT) else rng.normal(size=t.shape).astype(t.dtype))
                  for k, t in enumerate(types)]
        check_batched(g, inputs, batched)


# ---- unbatched outputs, printing, lowering ----

def test_outputs_that_do_not_depend_on_the_batch_are_repeated_fresh() -> None:
    g = irad.trace(lambda x, y: (x * 2.0, np.sin(y), 3.0), arr(2), arr(3))
    y = arr(3)
    bg = check_batched(g, [sample_rows(g.inputs[0].type, R, SIZE), y], [0])
    outs = lower(bg, "b").fn(np.ones((SIZE, 2)), y)
    assert outs[1].shape == (SIZE, 3) and outs[1].flags.writeable and not np.shares_memory(outs[1], outs[1][0:1] * 0)
    outs[1][0] = 0.0  # a fresh array: the other rows keep their value
    assert np.all(outs[1][1] == np.sin(y))
    assert outs[2].shape == (SIZE,) and str(bg.outputs[2].type) == f"f64[{SIZE}]"


def test_printed_and_lowered_forms() -> None:
    def f(w: np.ndarray, x: np.ndarray) -> Any:
        return np.tanh(w @ x)
    g = irad.trace(f, np.ones((3, 4)), np.ones(4))
    bg = batch(g, [1], 5)
    text = str(bg)
    assert text.splitlines()[0] == "graph f(%0: f64[3,4], %4: f64[5,4]) -> f64[5,3]:"
    assert "%6: f64[5,3] = numpy.matmul(%4, %5)" in text and "# after batch: 2 ops over an axis of 5" in text
    src = lower(bg, "f_batched").source
    assert "np.tanh(x @ w.T)" in src and "for " not in src  # (x @ w.T: lowering's expressions, irad/lower.py)


def test_batch_checks_its_arguments() -> None:
    g = irad.trace(lambda x: x * 2.0, arr(2))
    with pytest.raises(ValueError, match="size must be a positive int"):
        batch(g, [0], 0)
    with pytest.raises(ValueError, match="out of range"):
        batch(g, [1], 2)
    bg = batch(g, [0], 2)
    assert g.ops[0].outs[0].type == ArrayT("float64", (2,))  # the input graph is untouched
    assert bg is not g


# ---- the fallback: a loop over the batch ----

def test_fallback_loops_an_op_without_a_rule() -> None:
    def f(a: np.ndarray, b: np.ndarray) -> Any:
        return np.linalg.inv(a) @ b + np.convolve(b, b)[:3].sum()
    a = arr(3, 3) + 3 * np.eye(3)
    bg = check_fn(f, (a, arr(3)), (0,), expect_loops=1)
    looped = [op for op in bg.ops if op.prim == "irad.batching.loop_call"]
    assert str(bg).count("irad.batching.loop_call['numpy.linalg.inv', (0,)]") == 1, str(bg)
    assert "loop_inv(" in lower(bg, "b").source
    assert looped[0].outs[0].type == ArrayT("float64", (SIZE, 3, 3))
    check_fn(f, (a, arr(3)), (1,), expect_loops=1)  # convolve of a batched vector
    check_fn(f, (a, arr(3)), (0, 1), expect_loops=2)


def test_fallback_loops_pullbacks_and_rule_state() -> None:
    """Without the passes the backward graph calls the rules' pullbacks: each is looped, and a
    batched rule state (``rule_fwd`` on a batched input) is ``Rows``."""
    def f(x: np.ndarray, w: np.ndarray) -> Any:
        return np.tanh(w @ x) * np.sum(x ** 2)
    x, w = arr(3), arr(2, 3)
    g, tracer, _ = trace_values(f, (x, w), {})
    joint = ad.reverse(g, tracer.values, [0, 1], seed="input")
    fwd, bwd, n_res = split(joint, joint.graph)  # no passes: pullback ops stay
    assert any(op.prim == "pullback" for op in bwd.ops)
    rng = np.random.default_rng(3)
    res = [joint.values[v.id] for v in bwd.inputs[:n_res]]
    ybar = sample_rows(bwd.inputs[n_res].type, rng, SIZE)
    bg = check_batched(bwd, res + [ybar], [n_res], expect_loops=None)
    assert all(op.prim != "pullback" for op in bg.ops) and any(op.prim == "irad.batching.loop_call" for op in bg.ops)
    assert "pullback[" in str(bg)
    # the joint graph batched over x: rule_fwd ops are looped, their state is ``Rows``
    jg = joint.graph
    inputs = [sample_rows(v.type, rng, SIZE) if k == 0 else joint.values[v.id] for k, v in enumerate(jg.inputs)]
    bj = check_batched(jg, inputs, [0], expect_loops=None)
    assert any(o.type == OpaqueT("rows") for op in bj.ops for o in op.outs)


def test_fallback_keeps_python_semantics_row_by_row() -> None:
    """A Python-level function (math.sqrt) is looped: each row raises or returns as Python does."""
    g = irad.trace(lambda x: math.sqrt(x) * 2.0, 4.0)
    bg = check_batched(g, [np.array([1.0, 4.0, 9.0])], [0], expect_loops=1)
    with pytest.raises(ValueError, match="math domain error"):
        lower(bg, "b").fn(np.array([1.0, -1.0, 2.0]))


def test_guards_hold_for_every_row() -> None:
    from irad.errors import GuardError
    g = irad.trace(lambda x: x * 2.0 if np.sum(x) > 0 else -x, np.ones(2))
    bg = batch(g, [0], 2)
    fn = lower(bg, "b").fn
    np.testing.assert_allclose(fn(np.ones((2, 2)))[0], 2 * np.ones((2, 2)))
    with pytest.raises(GuardError):
        fn(np.array([[1.0, 1.0], [-1.0, -1.0]]))  # the second row takes the other branch
    assert any(op.prim == "irad.primitives.guard" for op in passes.dce(bg).ops)


# ---- the corpus: every backward graph batched over its output cotangents ----

DIFF = [c for c in CASES if c.differentiable and not c.impure]


@pytest.mark.parametrize("case", DIFF, ids=[c.name for c in DIFF])
def test_corpus_backward_graphs(case: Any) -> None:
    args = case.make_args(np.random.default_rng(0))
    g, tracer, _ = trace_values(case.fn, args, {})
    wrt = [k for k, v in enumerate(g.inputs) if v.type.is_float]
    joint = ad.reverse(g, tracer.values, wrt, seed="input")
    fwd, bwd, n_res = split(joint, passes.run(joint.graph, None))
    res = evaluate_residuals(fwd, joint, tracer.values)
    rng = np.random.default_rng(1)
    seeds = [sample_rows(v.type, rng, SIZE) for v in bwd.inputs[n_res:]]
    check_batched(bwd, res + seeds, list(range(n_res, len(bwd.inputs))), expect_loops=None)
