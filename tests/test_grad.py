"""Reverse mode end to end: grad, value_and_grad, vjp, compile, checked against finite differences."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import irad
from irad.testing import check_grads

from functions import CASES

# impure cases (random draws) have no finite-difference reference; they are traced in test_trace_corpus
DIFF_CASES = [c for c in CASES if c.differentiable and not c.impure]


@pytest.mark.parametrize("case", DIFF_CASES, ids=[c.name for c in DIFF_CASES])
def test_corpus_gradient(case):
    rng = np.random.default_rng(1)
    args = case.make_args(rng)
    check_grads(case.fn, *args, argnums=case.argnums)


def test_corpus_has_many_differentiable_cases():
    assert len(DIFF_CASES) >= 60


def test_branch_through_one_grad_object():
    def f(x):
        return (x ** 2).sum() if x.sum() > 0 else (-3 * x).sum()

    g = irad.grad(f)
    pos = np.array([1.0, 2.0, 3.0])
    neg = np.array([-1.0, -2.0, -3.0])
    np.testing.assert_allclose(g(pos), 2 * pos)
    np.testing.assert_allclose(g(neg), np.full(3, -3.0))
    np.testing.assert_allclose(g(pos * 0.5), pos)  # back on the first branch: cached program
    assert g.traces == 2


def test_second_call_does_not_trace():
    def f(W, x):
        return np.tanh(W @ x).sum()

    vg = irad.value_and_grad(f, argnums=(0, 1))
    W, x = np.ones((3, 4)) * 0.1, np.arange(4.0)
    v1, (gW1, gx1) = vg(W, x)
    v2, (gW2, gx2) = vg(W * 2, x)
    assert vg.traces == 1
    v3, _ = vg(np.ones((5, 4)), x)  # new shape: new program
    assert vg.traces == 2
    np.testing.assert_allclose(v2, f(W * 2, x))
    h = 1 - np.tanh(2 * W @ x) ** 2
    np.testing.assert_allclose(gW2, np.outer(h, x))
    np.testing.assert_allclose(gx2, (2 * W).T @ h)


def test_value_and_grad_pytree_and_floats():
    def f(params, s):
        return (params["w"] * s).sum() + params["b"] ** 2 + math.sin(s)

    params = {"w": np.arange(3.0), "b": 0.5}
    v, (gp, gs) = irad.value_and_grad(f, argnums=(0, 1))(params, 2.0)
    assert set(gp) == {"w", "b"} and type(gp["b"]) is float and type(gs) is float
    np.testing.assert_allclose(gp["w"], np.full(3, 2.0))
    assert gp["b"] == pytest.approx(1.0)
    assert gs == pytest.approx(3.0 + math.cos(2.0))


def test_repeated_arguments():
    def f(a, b):
        return (a * b + np.sin(a) * b).sum()

    x = np.linspace(0.1, 1.0, 4)
    ga, gb = irad.grad(f, argnums=(0, 1))(x, x)
    np.testing.assert_allclose(ga, x + np.cos(x) * x)
    np.testing.assert_allclose(gb, x + np.sin(x))
    check_grads(lambda a: f(a, a), x)


def test_broadcasting_and_zero_d():
    def f(a, b, c):
        return ((a + b) * c).sum()

    a, b, c = np.ones((3, 1)), np.arange(4.0), np.array(2.0)
    ga, gb, gc = irad.grad(f, argnums=(0, 1, 2))(a, b, c)
    assert ga.shape == (3, 1) and gb.shape == (4,) and gc.shape == ()
    np.testing.assert_allclose(ga, np.full((3, 1), 8.0))
    np.testing.assert_allclose(gb, np.full(4, 6.0))
    np.testing.assert_allclose(gc, ((a + b)).sum())


def test_vjp_non_scalar_output():
    def f(x, y):
        return np.tanh(x) * y, x.sum()

    x, y = np.linspace(-1, 1, 5), 3.0
    (out, s), pb = irad.vjp(f, x, y)
    np.testing.assert_allclose(out, np.tanh(x) * y)
    u = (np.arange(5.0), 2.0)
    gx, gy = pb(u)
    np.testing.assert_allclose(gx, u[0] * (1 - np.tanh(x) ** 2) * y + 2.0)
    assert gy == pytest.approx(float((u[0] * np.tanh(x)).sum()))


def test_only_some_arguments_differentiated():
    def f(x, n, flag):
        return (x ** n).sum() if flag else x.sum()

    g = irad.grad(f)(np.arange(1.0, 4.0), 3, True)
    np.testing.assert_allclose(g, 3 * np.arange(1.0, 4.0) ** 2)


def test_compile_program_has_source_and_graphs():
    def loss(W, x):
        return np.tanh(W @ x).sum()

    W, x = np.ones((2, 3)), np.ones(3)
    explicit = irad.compile(loss, W, x, argnums=0, passes=[])  # the joint graph as reverse mode builds it
    irad.verify(explicit.graph)
    assert "rule_fwd[numpy.tanh]" in str(explicit.graph) and "pullback[numpy.tanh]" in str(explicit.graph)
    prog = irad.compile(loss, W, x, argnums=0)  # default pipeline: pullbacks inlined
    irad.verify(prog.graph)
    assert "rule_fwd" not in str(prog.graph) and "pullback[" not in str(prog.graph)
    assert prog.source.startswith("def loss_grad(W, x):")
    assert "del " in prog.source and "pullback of numpy.tanh" in prog.source
    expected = np.outer(1 - np.tanh(3.0) ** 2 * np.ones(2), np.ones(3))
    for p in (explicit, prog):
        value, gW = p(W, x)
        np.testing.assert_allclose(gW, expected)
        np.testing.assert_allclose(value, loss(W, x))


def test_nan_and_inf_inputs_follow_numpy():
    def f(x):
        return (2.0 * x).sum()

    x = np.array([1.0, np.nan, np.inf])
    v, g = irad.value_and_grad(f)(x)
    assert np.isnan(v)
    np.testing.assert_array_equal(g, np.full(3, 2.0))
    with np.errstate(all="ignore"):
        v2, g2 = irad.value_and_grad(lambda x: np.sqrt(x).sum())(np.array([0.0, 4.0, -1.0]))
        assert np.isnan(v2)
        np.testing.assert_array_equal(g2, 0.5 / np.sqrt(np.array([0.0, 4.0, -1.0])))


# ---- errors ---------------------------------------------------------------------------------


def test_non_scalar_output_under_grad():
    with pytest.raises(irad.errors.GradError, match="one float scalar"):
        irad.grad(lambda x: x * 2)(np.ones(3))


def test_integer_argument_in_argnums():
    with pytest.raises(irad.errors.GradError, match="argument 1 .*int.* not differentiable"):
        irad.grad(lambda x, n: (x * n).sum(), argnums=1)(np.ones(3), 2)
    with pytest.raises(irad.errors.GradError, match="int64 array"):
        irad.grad(lambda x, i: (x[i]).sum(), argnums=1)(np.ones(3), np.array([0, 1]))


def test_no_rule_error_names_function_types_and_line():
    assert irad.rules.lookup(np.nextafter) is None and not irad.rules.is_nondiff(np.nextafter)  # precondition

    def f(x):
        return np.nextafter(x, 2.0).sum()  # a numpy C function irad has no rule for

    with pytest.raises(irad.NoRuleError) as info:
        irad.grad(f)(np.ones(3))
    msg = str(info.value)
    assert "numpy.nextafter(f64[3], float)" in msg and "it is not Python code" in msg
    assert "at test_no_rule_error_names_function_types_and_line.<locals>.f (" in msg and "test_grad.py:" in msg
    assert "@irad.rrule(numpy.nextafter)" in msg


def test_numpy_python_functions_are_traced_through():
    # np.i0, np.cov and np.gradient have no rules: irad traces their Python bodies
    assert irad.rules.lookup(np.i0) is None and irad.rules.lookup(np.cov) is None
    x = np.array([0.3, 1.2, -2.0])
    check_grads(lambda x: np.i0(x), x)
    check_grads(lambda a: np.cov(a), np.arange(6.0).reshape(2, 3) ** 1.5)
    prims = [op.prim for op in irad.trace(lambda a: np.cov(a), np.ones((2, 3))).ops]
    assert "numpy.cov" not in prims and "numpy.dot" in prims
    # a body irad cannot trace: the call stays one primitive, and the error says why
    with pytest.raises(irad.NoRuleError, match=r"numpy\.nanmedian\(.*could not trace through its Python body"):
        irad.grad(lambda x: np.nanmedian(x, axis=1).sum())(np.arange(6.0).reshape(2, 3))  # masked arrays


def test_alternating_branches_reuse_cached_paths():
    def f(x):
        return x.sum() * 2 if x[0] > x[1] else x.sum()

    g = irad.grad(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(2 * irad.api.RETRACE_WARN_AFTER + 2):
            g(np.array([1.0, 0.0]) if k % 2 else np.array([0.0, 1.0]))
    assert g.traces == 2  # both paths cached: no further retrace
    assert not [w for w in caught if issubclass(w.category, irad.api.RetraceWarning)]


def test_retrace_warning_when_guards_keep_failing():
    def f(x):
        n = int(x[0])  # a value-dependent Python int: every new value is a new trace
        return x.sum() * n

    g = irad.grad(f)
    with pytest.warns(irad.api.RetraceWarning, match=r"retraced \d+ times.*guard at .*test_grad.py"):
        for k in range(irad.api.RETRACE_WARN_AFTER + 2):
            np.testing.assert_allclose(g(np.array([float(k), 1.0])), np.full(2, float(k)))


def test_user_rules_closure_scalar_and_explicit():
    def my_square(x):
        return x * x

    @irad.rrule(my_square)
    def _(x):
        y = my_square(x)

        def pullback(ybar):
            return (2 * x * ybar,)
        return y, pullback

    def cube(x):
        return x ** 3

    irad.scalar_rule(cube, lambda x: 3 * x ** 2)
    f = lambda x: (my_square(x) + cube(x)).sum()  # noqa: E731
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(irad.grad(f)(x), 2 * x + 3 * x ** 2)
    prog = irad.compile(f, x, passes=[])
    assert "test_user_rules_closure_scalar_and_explicit.<locals>.my_square](" in str(prog.graph)
    check_grads(f, x)


def test_scalar_comparison_is_data_not_a_guard():
    """``s > 0`` on a numpy scalar is a traced 0-d bool: one trace serves both signs of ``s``."""
    def f(x):
        s = x.sum()
        m = s > 0
        alias = m
        m |= x[0] > 10.0  # rebinds m, as on an np.bool_: ``alias`` keeps its value
        return np.sum(np.where(m, x, 2.0 * x)) + float(alias) * s

    g = irad.grad(f)
    for x in (np.array([1.0, 2.0]), np.array([-1.0, -2.0]), np.array([11.0, -20.0])):
        irad.testing.check_grads(f, x)
        want = (1.0 if x.sum() > 0 or x[0] > 10 else 2.0) + float(x.sum() > 0)
        np.testing.assert_allclose(g(x), np.full(2, want))
    assert g.traces == 1
    assert not irad.trace(f, np.array([1.0, 2.0])).guards


def test_truth_test_of_a_scalar_comparison_still_guards():
    def f(x):
        return x.sum() * 2 if x.sum() > 0 else x.sum()

    g = irad.trace(f, np.array([1.0, 2.0]))
    assert [op.prim for op in g.guards] == ["irad.primitives.guard"]
    assert "irad.primitives.guard[expected=True]" in str(g)


def test_builtin_max_min_route_the_cotangent_by_value_on_every_call():
    """max/min of numbers: which argument wins is data, so one trace serves every ordering
    (the pullback's structure must not depend on the winner at trace time)."""
    def f(x):
        a, b = float(x[0]), float(x[1])
        return max(a, b) * 3.0 + min(x[0], x[1], 0.5) + max(v for v in x)

    g = irad.grad(f)
    for x in ([2.0, 1.0], [1.0, 2.0], [0.2, 0.1], [0.1, 0.3]):
        x = np.array(x)
        irad.testing.check_grads(f, x)
        i, j = int(np.argmax(x)), int(np.argmin(x))
        want = np.zeros(2)
        want[i] += 4.0
        want[j] += 1.0 if x[j] < 0.5 else 0.0
        np.testing.assert_allclose(g(x), want)
    np.testing.assert_allclose(g(np.array([1.0, 1.0])), [4.0, 0.0])  # ties: the first argument
    assert g.traces == 1


def test_grad_of_a_bool_output_is_an_error_not_zeros():
    for f in (lambda x: float(x[0]) > 0.0, lambda x: True, lambda x: x.sum() > 0):
        with pytest.raises(irad.errors.GradError, match="must return one float scalar"):
            irad.grad(f)(np.ones(3))
    np.testing.assert_array_equal(irad.grad(lambda x: 1.0)(np.ones(3)), np.zeros(3))  # a constant: zeros


def test_vjp_of_a_function_without_float_inputs():
    y, pb = irad.vjp(lambda n: np.ones(3) * 2.0, 3)
    np.testing.assert_array_equal(y, np.full(3, 2.0))
    assert pb(np.ones(3)) == (None,)
