"""Every corpus function traces, verifies, and its graph re-evaluates equal to the function."""
from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest

import irad
from irad.pytree import flatten

from functions import CASES, Case

SEED = 1234


def assert_same(actual: Any, expected: Any, what: str = "") -> None:
    """Pytrees equal leafwise: same structure, same leaf types, values equal to tight tolerance."""
    la, ta = flatten(actual)
    le, te = flatten(expected)
    assert ta == te, f"{what}: structure {ta} != {te}"
    for i, (a, e) in enumerate(zip(la, le)):
        assert type(a) is type(e), f"{what}: leaf {i} has type {type(a).__name__}, expected {type(e).__name__}"
        if isinstance(e, (np.ndarray, np.generic, float, int, complex)):
            np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-12, err_msg=f"{what}: leaf {i}")
            assert np.shape(a) == np.shape(e)
            if isinstance(e, (np.ndarray, np.generic)):
                assert a.dtype == e.dtype, f"{what}: leaf {i} dtype {a.dtype} != {e.dtype}"
        else:
            assert a == e, f"{what}: leaf {i}: {a!r} != {e!r}"


def run(fn: Any, args: tuple[Any, ...], seed: int) -> tuple[Any, str]:
    """Call with np.random seeded; return the result and what it printed."""
    np.random.seed(seed)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        out = fn(*args)
    return out, buf.getvalue()


def copy_args(args: Any) -> Any:
    leaves, tree = flatten(args)
    from irad.pytree import unflatten
    return unflatten(tree, [x.copy() if isinstance(x, np.ndarray) else x for x in leaves])


def test_corpus_is_large_and_names_are_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) >= 100
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_trace_and_reevaluate(case: Case) -> None:
    rng = np.random.default_rng(SEED)
    args = case.make_args(rng)
    expected, printed = run(case.fn, copy_args(args), 0)

    np.random.seed(0)
    with contextlib.redirect_stdout(io.StringIO()) as traced_out:
        g = irad.trace(case.fn, *copy_args(args))
    if case.impure:
        assert traced_out.getvalue() == printed, "the tracing call prints like f"
    irad.verify(g)
    text = str(g)
    assert text.startswith(f"graph {g.name}(")
    if not case.guards:
        assert not g.guards, f"unexpected guards in\n{text}"

    # on the tracing arguments
    again, printed_again = run(g, copy_args(args), 0)
    assert_same(again, expected, "g(*args) vs f(*args)")
    assert printed_again == printed

    # on fresh arguments of the same shapes and types
    for k in range(2):
        fresh = case.make_args(rng)
        want, want_printed = run(case.fn, copy_args(fresh), 7 + k)
        try:
            got, got_printed = run(g, copy_args(fresh), 7 + k)
        except irad.GuardError:
            assert case.guards, f"GuardError from a case without guards:\n{text}"
            g2 = irad.trace(case.fn, *copy_args(fresh))
            irad.verify(g2)
            got, got_printed = run(g2, copy_args(fresh), 7 + k)
        assert_same(got, want, f"fresh args #{k}")
        assert got_printed == want_printed


@pytest.mark.parametrize("case", [c for c in CASES if c.differentiable], ids=lambda c: c.name)
def test_differentiable_cases_return_a_float_scalar(case: Case) -> None:
    out = case.fn(*case.make_args(np.random.default_rng(0)))
    assert isinstance(out, (float, np.floating)) or (isinstance(out, np.ndarray) and out.shape == () and
                                                     out.dtype.kind == "f"), type(out)
    args = case.make_args(np.random.default_rng(0))
    for i in case.argnums:
        leaves, _ = flatten(args[i])
        assert leaves and all(isinstance(x, (float, np.floating)) or
                              (isinstance(x, np.ndarray) and x.dtype.kind == "f") for x in leaves), case.name


def test_inputs_are_not_mutated_by_tracing() -> None:
    from functions import by_name
    for name in ("augmented_assign", "setitem_int_slice", "out_keyword"):
        c = by_name(name)
        args = c.make_args(np.random.default_rng(0))
        before = copy_args(args)
        irad.trace(c.fn, *args)
        assert_same(args, before, name)


# ---- the printed form: a contract (hand-written expectations) ---------------------------------

import math  # noqa: E402

F = "test_trace_corpus.py"
EYE = np.eye(3)


def _line(text: str, line: int) -> str:
    return f"{text:<44} # {F}:{line}"


def design_loss(W, b):
    h = np.tanh(np.matmul(W, b))
    return np.sum(h)


def test_print_design_example() -> None:
    g = irad.trace(design_loss, np.ones((128, 64)), np.ones(64))
    L = design_loss.__code__.co_firstlineno
    assert str(g) == "\n".join([
        "graph design_loss(%0: f64[128,64], %1: f64[64]) -> f64[]:",
        _line("  %2: f64[128] = numpy.matmul(%0, %1)", L + 1),
        _line("  %3: f64[128] = numpy.tanh(%2)", L + 1),
        _line("  %4: f64[] = numpy.sum(%3)", L + 2),
        "  return %4",
    ])


def layer_step(params, x):
    W, b = params["W"], params["b"]
    h = x @ W + b
    if h.sum() > 0:
        h = h * 2.0
    out = h.copy()
    out[0] = 0.0
    return {"out": out, "mean": out.mean(axis=0)}


def test_print_pytrees_guard_and_inplace_update() -> None:
    params = {"W": np.ones((3, 2)), "b": np.ones(2)}
    g = irad.trace(layer_step, params, np.ones((4, 3)))
    L = layer_step.__code__.co_firstlineno
    assert str(g) == "\n".join([
        "graph layer_step(%0: f64[3,2], %1: f64[2], %2: f64[4,3]) -> (f64[4,2], f64[2]):",
        _line("  %3: f64[4,2] = operator.matmul(%2, %0)", L + 2),
        _line("  %4: f64[4,2] = operator.add(%3, %1)", L + 2),
        _line("  %5: f64[] = numpy.ndarray.sum(%4)", L + 3),
        _line("  %6: bool[] = operator.gt(%5, 0)", L + 3),
        _line("  irad.primitives.guard[expected=True](%6)", L + 3),
        _line("  %7: f64[4,2] = operator.mul(%4, 2.0)", L + 4),
        _line("  %8: f64[4,2] = numpy.ndarray.copy(%7)", L + 5),
        _line("  %9: f64[4,2] = irad.primitives.setitem(%8, 0, 0.0)", L + 6),
        _line("  %10: f64[2] = numpy.ndarray.mean[axis=0](%9)", L + 7),
        "  return %9, %10",
    ])
    assert [op.prim for op in g.guards] == ["irad.primitives.guard"]
    assert [v.hint for v in g.inputs] == ["params.W", "params.b", "x"]


def scalar_code(a, b):
    return math.sin(a) * b + max(a, 1.0)


def test_print_python_floats() -> None:
    g = irad.trace(scalar_code, 0.5, 2.0)
    L = scalar_code.__code__.co_firstlineno
    assert str(g) == "\n".join([
        "graph scalar_code(%0: float, %1: float) -> float:",
        _line("  %2: float = math.sin(%0)", L + 1),
        _line("  %3: float = operator.mul(%2, %1)", L + 1),
        _line("  %4: float = builtins.max(%0, 1.0)", L + 1),
        _line("  %5: float = operator.add(%3, %4)", L + 1),
        "  return %5",
    ])


def qr_loss(A):
    q, r = np.linalg.qr(A + EYE)
    return np.trace(r) + q[0, 0], A[::-1, 1:]


def test_print_global_constant_and_unpacking_op() -> None:
    g = irad.trace(qr_loss, np.diag([1.0, 2.0, 3.0]))
    L = qr_loss.__code__.co_firstlineno
    assert str(g) == "\n".join([
        "graph qr_loss(%0: f64[3,3]) -> (f64[], f64[3,2]):",
        "  $EYE: f64[3,3] = global EYE",
        _line("  %1: f64[3,3] = operator.add(%0, $EYE)", L + 1),
        _line("  %2: f64[3,3], %3: f64[3,3] = numpy.linalg.qr(%1)", L + 1),
        _line("  %4: f64[] = numpy.trace(%3)", L + 2),
        _line("  %5: f64[] = operator.getitem(%2, (0, 0))", L + 2),
        _line("  %6: f64[] = operator.add(%4, %5)", L + 2),
        _line("  %7: f64[3,2] = operator.getitem(%0, (::-1, 1:))", L + 2),
        "  return %6, %7",
    ])
