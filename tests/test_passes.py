"""Passes: each is a pure Graph -> Graph that keeps the graph valid and its values unchanged."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irad
import irad.passes as P
from irad.errors import PassError

from functions import CASES

ALL_PASSES = [P.cse, P.dce, P.fold_constants, P.simplify, P.inline_pullbacks, P.explicit_state,
              P.cholesky_consumers, P.triangular_solves, P.shared_lu]
DIFF = [c for c in CASES if c.differentiable and not c.impure and not c.guards]


def _joint(case, seed=0):
    """The joint graph of a corpus case, with the arguments it was traced at."""
    args = case.make_args(np.random.default_rng(seed))
    prog = irad.compile(case.fn, *args, argnums=case.argnums, passes=[])
    return prog, args


def _run(g, prog, args):
    from irad.pytree import flatten
    statics = {i for i, _ in g.statics}
    leaves = flatten((args, {}))[0]
    dyn = [x for i, x in enumerate(leaves) if i not in statics]
    from irad.ir import evaluate
    return evaluate(g, dyn)


def _same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(x, dtype=complex), np.asarray(y, dtype=complex), rtol=1e-10,
                                   atol=1e-12)


@pytest.mark.parametrize("p", ALL_PASSES, ids=lambda p: p.__name__)
@pytest.mark.parametrize("case", DIFF[::3], ids=lambda c: c.name)
def test_pass_keeps_graph_valid_and_values(p, case):
    prog, args = _joint(case)
    g = prog.graph
    out = p(g)
    irad.verify(out)
    _same(_run(out, prog, args), _run(g, prog, args))
    assert p(g) is not None and g == prog.graph  # the input graph is never mutated


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(DIFF), st.lists(st.sampled_from(ALL_PASSES), min_size=1, max_size=6))
def test_any_pipeline_is_sound(case, pipeline):
    prog, args = _joint(case)
    out = P.run(prog.graph, pipeline, check=True)
    _same(_run(out, prog, args), _run(prog.graph, prog, args))


def test_every_pass_has_a_one_line_docstring_and_example():
    for p in ALL_PASSES:
        doc = p.__doc__ or ""
        assert doc.strip().splitlines()[0].endswith("."), p.__name__
        assert "Before:" in doc and "After:" in doc, p.__name__


def test_default_pipeline_is_visible_and_used():
    assert P.PIPELINE == (P.explicit_state, P.cholesky_consumers, P.inline_pullbacks, P.triangular_solves,
                          P.shared_lu, P.fold_constants, P.simplify, P.cse, P.dce)
    prog = irad.compile(lambda x: np.tanh(x).sum(), np.ones(3))
    assert "after inline_pullbacks" in "\n".join(prog.graph.provenance)


def test_failing_pass_is_named_with_what_ran_before():
    def broken(g):
        """Break."""
        raise ValueError("boom")

    with pytest.raises(PassError, match=r"pass 'broken' failed after \['cse', 'dce'\]: ValueError: boom"):
        irad.compile(lambda x: (x * x).sum(), np.ones(2), passes=[P.cse, P.dce, broken])


def test_user_pass_in_compile():
    seen = []

    def count_ops(g):
        """Record how many ops reach the end of the pipeline (a user analysis pass)."""
        seen.append(len(g.ops))
        return g

    prog = irad.compile(lambda x: np.sin(x).sum(), np.ones(3), passes=[P.inline_pullbacks, P.cse, count_ops])
    assert seen and seen[-1] == len(prog.graph.ops)
    np.testing.assert_allclose(prog(np.zeros(3))[1], np.ones(3))


def test_tanh_backward_reuses_forward_output_and_cos_is_computed_once():
    prog = irad.compile(lambda x: np.tanh(x).sum(), np.ones(3))
    assert prog.source.count("np.tanh(") == 1
    prog2 = irad.compile(lambda x: (np.sin(x) * np.cos(x)).sum(), np.ones(3))
    # sin's pullback needs cos(x), which the forward computes too: CSE keeps one
    assert prog2.source.count("np.cos(x)") == 1, prog2.source
    irad.testing.check_grads(lambda x: (np.sin(x) * np.cos(x)).sum(), np.linspace(0, 1, 3))


def test_dce_drops_dead_ops_but_keeps_effects_and_guards():
    def f(x):
        unused = np.exp(x)  # noqa: F841
        noise = np.random.normal(size=3)  # impure: drawn although unused
        print("side effect")
        if x.sum() > 0:
            return (x * 2).sum()
        return x.sum()

    g = irad.trace(f, np.ones(3))
    out = P.dce(g)
    prims = [op.prim for op in out.ops]
    assert "numpy.exp" not in prims
    assert any(p.startswith("numpy.random") for p in prims) and "builtins.print" in prims
    assert len(out.guards) == len(g.guards) == 1


def test_cse_never_merges_impure_ops():
    def f(x):
        a = np.random.normal(size=3)
        b = np.random.normal(size=3)
        return (x * a + x * b).sum()

    g = irad.trace(f, np.ones(3))
    assert sum(op.prim.startswith("numpy.random") for op in P.cse(g).ops) == 2


def test_side_effects_happen_exactly_once_per_call(capsys):
    def f(x):
        print("called")
        return (x * np.random.normal(size=x.shape)).sum()

    vg = irad.value_and_grad(f)
    x = np.ones(4)
    for k in range(3):
        np.random.seed(k)
        expected_noise = np.random.normal(size=4)
        after_one_call = np.random.normal(size=1)
        np.random.seed(k)
        v, g = vg(x)
        np.testing.assert_allclose(g, expected_noise)  # the same draw f itself makes
        np.testing.assert_allclose(np.random.normal(size=1), after_one_call)  # exactly one draw
    assert capsys.readouterr().out == "called\n" * 3


def test_gradient_of_some_arguments_only_drops_the_others_backward_work():
    def f(a, b):
        return (np.sin(a) * np.exp(b)).sum()

    a, b = np.ones(3), np.ones(3)
    both = irad.compile(f, a, b, argnums=(0, 1))
    only_a = irad.compile(f, a, b, argnums=0)
    assert len(only_a.graph.ops) < len(both.graph.ops)
    assert "np.cos" in only_a.source  # d/da
    assert only_a.source.count("np.exp(") == 1  # exp(b) only in the forward: no backward through it


def test_explicit_state_lifts_closure_rules_and_reports_the_rest():
    def scaled(x, s):
        return x * s

    @irad.rrule(scaled)
    def _(x, s):
        def pullback(g):
            return g * s, (g * x).sum()
        return x * s, pullback

    def counted(x):
        return x * 3.0

    calls = []

    @irad.rrule(counted)
    def _(x):
        n = 0

        def pullback(g):
            nonlocal n  # writes a captured variable: lifted with cells as state
            n += 1
            calls.append(n)
            return (3.0 * g,)
        return x * 3.0, pullback

    def opaque(x):
        return x * 2.0

    class Pullback:
        def __call__(self, g):
            return (2.0 * g,)

    @irad.rrule(opaque)
    def _(x):
        return x * 2.0, Pullback()  # a callable object: cannot be lifted

    def f(x):
        return (scaled(x, 1.5) + counted(x) + opaque(x)).sum()

    x = np.arange(3.0)
    raw = irad.compile(f, x, passes=[])
    assert sum(op.prim == "call_pullback" for op in raw.graph.ops) == 3
    lifted = P.explicit_state(raw.graph)
    prims = [op.prim for op in lifted.ops]
    assert prims.count("call_pullback") == 1
    problems = P.not_serialisable(lifted)
    assert len(problems) == 1 and "opaque" in problems[0] and "Pullback" in problems[0]
    for op in lifted.ops:
        if op.prim == "pullback" and "scaled" in op.kw("_rule").name:
            assert op.fn.__name__.endswith("scaled_pullback") and "<locals>" not in op.fn.__module__
    prog = irad.compile(f, x)
    np.testing.assert_allclose(prog(x)[1], np.full(3, 1.5 + 3.0 + 2.0))
    assert calls  # the nonlocal counter ran through the lifted pullback
    irad.testing.check_grads(f, x)


def test_grad_of_grad():
    def f(x):
        return (np.sin(x) * x ** 2).sum()

    g = irad.grad(f)
    x = np.linspace(0.1, 1.0, 4)
    hess_diag = irad.grad(lambda x: (g(x) * np.ones_like(x)).sum())
    expected = 2 * np.sin(x) + 4 * x * np.cos(x) - x ** 2 * np.sin(x) + 0 * x
    # d/dx_i sum_j g_j(x): the Hessian is diagonal here
    np.testing.assert_allclose(hess_diag(x), expected, rtol=1e-10)
    irad.testing.check_grads(f, x, order=2)


def test_partial_objects_and_functools_in_passes():
    f = functools.partial(lambda x, k: (np.tanh(x) * k).sum(), k=2.0)
    irad.testing.check_grads(f, np.linspace(-1, 1, 4))
