"""A pullback may return fewer cotangents than its rule's positional arguments (issue 19, item 4).

The omitted ones are trailing and read as ``None``: no cotangent (a zero, or an argument that
is not differentiable: an exponent, a flag).  Every consumer of pullback results takes the short
tuple: reverse mode (``grad``, ``value_and_grad``, ``vjp``; with and without the inlining pass),
forward mode (``jvp``, which derives a rule's forward form from its pullback, by the inlined body or
by transposing the call), batching (``jacrev``/``jacfwd``, over inlined bodies or pullback calls),
second order (``hessian``), ONNX export (inlined and as functions) and ``irad.testing.check_rule``.

Gradients are checked on the second and third calls of one compiled object (the first call's
result comes from trace time) against central finite differences.
"""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.testing import check_grads, check_rule

# ---- the rules: user code, registered through the public API ----------------------------------


def powsin(x, n, flip):
    """``sin(x) ** n`` (``cos`` when ``flip``): one differentiable argument, two that are not."""
    return (np.cos(x) if flip else np.sin(x)) ** n


def powsin_fwd(x, n, flip):  # (the body, not a call of powsin: so that ONNX export can write it)
    return (np.cos(x) if flip else np.sin(x)) ** n, (x, n, flip)


def powsin_pullback(state, ybar):
    x, n, flip = state
    s, ds = (np.cos(x), -np.sin(x)) if flip else (np.sin(x), np.cos(x))
    return (ybar * n * s ** (n - 1) * ds,)  # n's and flip's: omitted


irad.defrule(powsin, powsin_fwd, powsin_pullback)


def sinpow(x, y, k):
    """``sin(x) * y ** k``: two differentiable arguments, then one that is not."""
    return np.sin(x) * y ** k


def sinpow_fwd(x, y, k):
    return np.sin(x) * y ** k, (x, y, k)


def sinpow_pullback(state, ybar):
    x, y, k = state
    return ybar * np.cos(x) * y ** k, ybar * np.sin(x) * k * y ** (k - 1)  # k's: omitted


irad.defrule(sinpow, sinpow_fwd, sinpow_pullback)


def tanhpow(x, n, flip):
    """``powsin`` with ``tanh``, as a closure rule (``irad.rrule``): a ``call_pullback``."""
    return (-np.tanh(x) if flip else np.tanh(x)) ** n


@irad.rrule(tanhpow)
def _tanhpow_rule(x, n, flip):
    t = np.tanh(x)
    sgn = -1.0 if flip else 1.0

    def pullback(ybar):
        return (ybar * n * (sgn * t) ** (n - 1) * sgn * (1.0 - t * t),)  # one of three

    return tanhpow(x, n, flip), pullback


def guarded(x, n, flip):
    """``powsin`` again, whose pullback branches on a value: no pass inlines it, so forward mode
    transposes the call when the program runs (``TransposedPullback``)."""
    return (np.cos(x) if flip else np.sin(x)) ** n


def guarded_fwd(x, n, flip):
    return guarded(x, n, flip), (x, n, flip)


def guarded_pullback(state, ybar):
    x, n, flip = state
    if float(np.max(np.abs(x))) > 1e6:  # a value the tracer cannot keep symbolic
        raise ValueError("out of range")
    s, ds = (np.cos(x), -np.sin(x)) if flip else (np.sin(x), np.cos(x))
    return (ybar * n * s ** (n - 1) * ds,)


irad.defrule(guarded, guarded_fwd, guarded_pullback)


def half_mul(x, y):
    """``x * y`` whose pullback gives ``x``'s cotangent only: ``y``'s is a zero, as ``None`` is."""
    return x * y


def half_mul_fwd(x, y):
    return x * y, y


def half_mul_pullback(y, ybar):
    return (ybar * y,)


irad.defrule(half_mul, half_mul_fwd, half_mul_pullback)


def half_mul_none(x, y):
    return x * y


irad.defrule(half_mul_none, half_mul_fwd, lambda y, ybar: (ybar * y, None))


# ---- losses over them ----------------------------------------------------------------------


def loss1(x):
    return np.sum(powsin(x, 3, False) + powsin(x, 2, True))


def loss2(x, y):
    return np.sum(sinpow(x, y, 3) * x)


def loss_closure(x):
    return np.sum(tanhpow(x, 3, False) * tanhpow(x, 2, True))


def loss_guarded(x):
    return np.sum(guarded(x, 3, False))


def vec1(x):
    return powsin(x, 3, False) * x[0]


def vec2(x, y):
    return sinpow(x, y, 3) + x[::-1]


LOSSES = {"one_of_three": (loss1, 1), "two_of_three": (loss2, 2), "closure": (loss_closure, 1),
          "guarded": (loss_guarded, 1)}


def points(nargs, seed=0, n=3, shape=(4,)):
    """``n`` fresh points (tuples of ``nargs`` arrays), away from ``y = 0`` for ``y ** (k - 1)``."""
    rng = np.random.default_rng(seed)
    return [tuple(rng.uniform(0.3, 1.4, shape) for _ in range(nargs)) for _ in range(n)]


def fd_grad(f, args, i, eps=1e-6):
    g = np.zeros_like(args[i])
    for j in np.ndindex(args[i].shape):
        a, b = [x.copy() for x in args], [x.copy() for x in args]
        a[i][j] += eps
        b[i][j] -= eps
        g[j] = (f(*a) - f(*b)) / (2 * eps)
    return g


def fd_jac(f, args, i, eps=1e-6):
    cols = []
    for j in np.ndindex(args[i].shape):
        a, b = [x.copy() for x in args], [x.copy() for x in args]
        a[i][j] += eps
        b[i][j] -= eps
        cols.append((f(*a) - f(*b)) / (2 * eps))
    return np.stack(cols, axis=-1).reshape(np.shape(f(*args)) + args[i].shape)


def prims(g):
    return {op.prim for op in g.ops}


# ---- reverse mode --------------------------------------------------------------------------


@pytest.mark.parametrize("passes", [None, []], ids=["inlined", "no_passes"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_value_and_grad_repeated_calls(name, passes):
    f, nargs = LOSSES[name]
    argnums = tuple(range(nargs))
    vg = irad.value_and_grad(f, argnums=argnums, passes=passes)
    for args in points(nargs):
        v, gs = vg(*args)
        np.testing.assert_allclose(v, f(*args), rtol=1e-12)
        for i in argnums:
            np.testing.assert_allclose(gs[i], fd_grad(f, args, i), rtol=1e-6, atol=1e-8)
    gr = irad.grad(f, argnums=argnums, passes=passes)
    for args in points(nargs, seed=1):
        gs = gr(*args)
        for i in argnums:
            np.testing.assert_allclose(gs[i], fd_grad(f, args, i), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", list(LOSSES))
def test_check_grads(name):
    f, nargs = LOSSES[name]
    for args in points(nargs, seed=2):
        check_grads(f, *args)


@pytest.mark.parametrize("name", ["one_of_three", "two_of_three", "closure"])
def test_inlined_by_the_default_pipeline(name):
    f, nargs = LOSSES[name]
    args = points(nargs)[0]
    inlined = irad.compile(f, *args, argnums=tuple(range(nargs)))
    assert not prims(inlined.graph) & {"pullback", "call_pullback"}, inlined.graph
    kept = irad.compile(f, *args, argnums=tuple(range(nargs)), passes=[])
    assert prims(kept.graph) & {"pullback", "call_pullback"}
    for a in points(nargs, seed=3):
        for (v1, g1), (v2, g2) in [(inlined(*a), kept(*a))]:
            np.testing.assert_allclose(v1, v2, rtol=1e-12)
            for x, y in zip(g1 if nargs > 1 else (g1,), g2 if nargs > 1 else (g2,)):
                np.testing.assert_allclose(x, y, rtol=1e-12)


def test_guarded_pullback_stays_a_call():
    g = irad.compile(loss_guarded, points(1)[0][0]).graph
    assert "pullback" in prims(g), g


@pytest.mark.parametrize("name", ["one_of_three", "two_of_three"])
def test_vjp(name):
    f = {"one_of_three": vec1, "two_of_three": vec2}[name]
    nargs = LOSSES[name][1]
    rng = np.random.default_rng(4)
    for args in points(nargs, seed=4):
        y, pb = irad.vjp(f, *args)
        np.testing.assert_allclose(y, f(*args), rtol=1e-12)
        u = rng.standard_normal(np.shape(y))
        cots = pb(u)
        assert len(cots) == nargs
        for i in range(nargs):
            np.testing.assert_allclose(cots[i], np.tensordot(u, fd_jac(f, args, i), 1), rtol=1e-6, atol=1e-8)


def test_vjp_of_the_rule_itself():
    """``vjp`` of the ruled function directly: its non-float arguments get ``None``."""
    x = points(1)[0][0]
    for flip in (False, True):
        y, pb = irad.vjp(powsin, x, 3, flip)
        cots = pb(np.ones_like(x))
        assert len(cots) == 3 and cots[1] is None and cots[2] is None
        np.testing.assert_allclose(cots[0], np.diag(fd_jac(lambda x: powsin(x, 3, flip), (x,), 0)), rtol=1e-6)


def test_omitted_cotangent_is_a_zero():
    """A differentiable argument whose cotangent is omitted gets zeros, as with ``None``."""
    for f in (half_mul, half_mul_none):
        gr = irad.grad(lambda x, y, f=f: np.sum(f(x, y) * x), argnums=(0, 1))
        for x, y in points(2, seed=5):
            gx, gy = gr(x, y)
            np.testing.assert_allclose(gx, 2 * x * y, rtol=1e-12)
            np.testing.assert_array_equal(gy, np.zeros_like(y))
    check_rule(half_mul, *points(2)[0], wrt=(0,))


def loopy(x, y):
    h = x
    for _ in range(6):
        h = 0.5 * (sinpow(h, y, 2) + powsin(h, 3, False)) + x
    return np.sum(h)


@pytest.mark.parametrize("passes", [None, []], ids=["inlined", "no_passes"])
def test_in_a_rerolled_loop(passes):
    """The rules in the step of an ``irad.loop`` op: the reverse loop runs their pullbacks."""
    from irad import loops
    with loops.rerolling(True, min_ops=1):
        vg = irad.value_and_grad(loopy, argnums=(0, 1), passes=passes)
        args = points(2, seed=13)
        assert "irad.loop" in prims(irad.compile(loopy, *args[0], argnums=(0, 1), passes=passes).graph)
        for a in args:
            v, (gx, gy) = vg(*a)
            np.testing.assert_allclose(v, loopy(*a), rtol=1e-12)
            np.testing.assert_allclose(gx, fd_grad(loopy, a, 0), rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(gy, fd_grad(loopy, a, 1), rtol=1e-6, atol=1e-8)


# ---- forward mode, batching, second order ---------------------------------------------------


@pytest.mark.parametrize("name", ["one_of_three", "two_of_three", "closure", "guarded"])
def test_jvp(name):
    f, nargs = LOSSES[name]
    rng = np.random.default_rng(6)
    for args in points(nargs, seed=6):
        ts = tuple(rng.standard_normal(a.shape) for a in args)
        y, ydot = irad.jvp(f, args, ts)
        np.testing.assert_allclose(y, f(*args), rtol=1e-12)
        want = sum(np.sum(fd_grad(f, args, i) * ts[i]) for i in range(nargs))
        np.testing.assert_allclose(ydot, want, rtol=1e-6, atol=1e-8)


def test_jvp_transposes_the_guarded_pullback():
    from irad.forward import jvp_program
    x = points(1)[0][0]
    prog = jvp_program(loss_guarded, (x,))
    assert "transposed_pullback" in prims(prog.graph), prog.graph
    y, pb = irad.jvp(lambda x: guarded(x, 2, True), (x,), (np.ones_like(x),))
    np.testing.assert_allclose(pb, -2 * np.cos(x) * np.sin(x), rtol=1e-12)


@pytest.mark.parametrize("passes", [None, []], ids=["inlined", "no_passes"])
@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
def test_jacobians(jac, passes):
    for f, nargs in ((vec1, 1), (vec2, 2), (lambda x: guarded(x, 3, True) * x, 1)):
        J = getattr(irad, jac)(f, argnums=tuple(range(nargs)), passes=passes)
        for args in points(nargs, seed=7):
            got = J(*args)
            for i in range(nargs):
                np.testing.assert_allclose(got[i], fd_jac(f, args, i), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["one_of_three", "two_of_three", "closure"])
def test_hessian(name):
    f, nargs = LOSSES[name]
    argnums = tuple(range(nargs))
    H = irad.hessian(f, argnums=argnums)
    gr = irad.grad(f, argnums=argnums)
    for args in points(nargs, seed=8):
        got = H(*args)
        for i in argnums:
            for j in argnums:
                want = fd_jac(lambda *a: gr(*a)[i], args, j)
                np.testing.assert_allclose(got[i][j], want, rtol=1e-5, atol=1e-7)
        check_grads(f, *args, order=2)


def test_grad_of_grad():
    gg = irad.grad(lambda x: np.sum(irad.grad(loss1)(x) ** 2))
    g1 = irad.grad(loss1)
    for (x,) in points(1, seed=9):
        np.testing.assert_allclose(gg(x), fd_grad(lambda x: np.sum(g1(x) ** 2), (x,), 0), rtol=1e-5, atol=1e-7)


# ---- check_rule ----------------------------------------------------------------------------


def test_check_rule():
    for (x, y) in points(2, seed=10):
        check_rule(powsin, x, 3, False)
        check_rule(powsin, x, 2, True, order=2)
        check_rule(sinpow, x, y, 3, order=2)
        check_rule(tanhpow, x, 3, True)


def test_check_rule_refuses_too_many_cotangents():
    def three(x):
        return 3.0 * x

    irad.defrule(three, lambda x: (3.0 * x, None), lambda s, ybar: (3.0 * ybar, None))
    with pytest.raises(AssertionError, match="2 cotangents for 1 positional argument"):
        check_rule(three, np.ones(2))


# ---- ONNX export ---------------------------------------------------------------------------


@pytest.mark.parametrize("inline", [True, False], ids=["inlined", "functions"])
@pytest.mark.parametrize("name", ["one_of_three", "two_of_three"])
def test_onnx_export(name, inline):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import irad.onnx as ionnx
    from onnx_run import expected, run_model

    f, nargs = LOSSES[name]
    argnums = tuple(range(nargs))
    args = points(nargs, seed=11)[0]
    model = ionnx.export(f, *args, argnums=argnums, inline=inline)
    prog = irad.compile(f, *args, argnums=argnums)
    for a in points(nargs, seed=12):
        _, outs = run_model(model, prog, a)
        want = expected(prog, a)
        assert len(outs) == len(want)
        for got, w in zip(outs, want):
            np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)
