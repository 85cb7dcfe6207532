"""``verify`` recomputes the output type of the core prims from their inputs' types (issue 19):
a pass that emits a wrong-shaped or wrong-dtype op fails ``verify``, and every graph irad itself
builds (traces, joint graphs, optimised graphs of the corpus) still verifies."""
from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest

from irad import ad, loops, passes
from irad.errors import PassError, VerifyError
from irad.ir import ArrayT, Const, Graph, Op, ScalarT, Var, abstract_mismatch, typeof, verify
from irad.trace import trace, trace_values
from functions import CASES


def f64(*shape: int) -> ArrayT:
    return ArrayT("float64", shape)


def one_op(fn, prim, args, out_type, kwargs=()) -> Graph:
    ins = tuple(a for a in args if isinstance(a, Var))
    out = Var(len(ins) + 10, out_type)
    return Graph("g", ins, (Op(prim, tuple(args), tuple(kwargs), (out,), fn),), (out,))


@pytest.mark.parametrize("fn, prim, args, wrong, right", [
    (np.add, "numpy.add", (Var(0, f64(3, 1)), Var(1, f64(4))), f64(3, 1), f64(3, 4)),  # broadcasting
    (operator.mul, "operator.mul", (Var(0, f64(2)), Const(2.0, ScalarT("float"))),
     ArrayT("float32", (2,)), f64(2)),  # dtype
    (operator.matmul, "operator.matmul", (Var(0, f64(2, 3)), Var(1, f64(3, 5))), f64(2, 3), f64(2, 5)),
    (np.sum, "numpy.sum", (Var(0, f64(4, 5)),), f64(4, 5), ArrayT("float64", (), True)),  # numpy's scalar
    (np.exp, "numpy.exp", (Var(0, ArrayT("float64", (), True)),), ScalarT("float"), ArrayT("float64", (), True)),
    (operator.truediv, "operator.truediv", (Var(0, ScalarT("int")), Var(1, ScalarT("int"))),
     ScalarT("int"), ScalarT("float")),
    (np.transpose, "numpy.transpose", (Var(0, f64(2, 3, 4)),), f64(2, 3, 4), f64(4, 3, 2)),
    (np.ndarray.sum, "numpy.ndarray.sum", (Var(0, f64(2, 3)),), f64(3), f64(2)),
])
def test_a_wrong_output_type_fails_and_the_right_one_verifies(fn, prim, args, wrong, right) -> None:
    kwargs = (("axis", Const(1, ScalarT("int"))),) if fn is np.ndarray.sum else ()
    with pytest.raises(VerifyError, match="declared"):
        verify(one_op(fn, prim, args, wrong, kwargs))
    verify(one_op(fn, prim, args, right, kwargs))


def test_a_pass_that_emits_a_wrong_shaped_op_fails_verify() -> None:
    def f(x):
        return np.sum(np.tanh(x) * x)

    g = trace(f, np.ones((3, 4)))

    def keep_the_axis_out(g: Graph) -> Graph:  # a buggy rewrite: sum over axis 0 typed as the full sum
        ops = []
        for op in g.ops:
            if op.prim == "numpy.sum":
                op = Op(op.prim, op.args, (("axis", Const(0, ScalarT("int"))),), op.outs, op.fn, op.loc)
            ops.append(op)
        return g.replace(ops=tuple(ops))

    with pytest.raises(PassError, match=r"numpy\.sum of these input types gives f64\[4\]"):
        passes.run(g, [keep_the_axis_out], check=True)
    passes.run(g, [lambda g: g], check=True)  # the graph as traced verifies


def test_what_is_not_judged() -> None:
    big = Var(0, f64(1 << 17))  # no stand-in this big: verify stays cheap on big arrays
    assert abstract_mismatch(one_op(np.exp, "numpy.exp", (big,), f64(1)).ops[0]) is None
    # a prim outside the table, and one whose stand-ins fail (its values may be what fails)
    assert abstract_mismatch(one_op(np.linalg.inv, "numpy.linalg.inv", (Var(0, f64(2, 2)),), f64(3)).ops[0]) is None
    assert abstract_mismatch(one_op(np.reshape, "numpy.reshape", (Var(0, f64(6)), Const((4, 4), typeof((4, 4)))),
                                    f64(4, 4)).ops[0]) is None


def _graphs(case):
    args = case.make_args(np.random.default_rng(0))
    g, tracer, _ = trace_values(case.fn, args, {})
    yield g
    if case.differentiable:
        joint = ad.reverse(loops.for_reverse_mode(g, tracer.values), tracer.values, list(case.argnums))
        yield joint.graph
        yield passes.run(joint.graph)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_graph_irad_builds_verifies(case) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphs = list(_graphs(case))
    for g in graphs:
        verify(g)
