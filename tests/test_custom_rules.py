"""``irad.custom_vjp`` and ``irad.custom_jvp`` (issue 15, part 4): user-defined rules, JAX's layout.

Every gradient is checked on the second and later calls of the same compiled object (the first
call's result comes from trace time), against central finite differences in float64 and, where
the rule is not the true derivative on purpose, against JAX running the same rule.  The rule is
an explicit one of the registry: ``rule_fwd[<module>.f]`` / ``pullback[<module>.f]`` in the
joint graph, named functions in the lowered program.
"""
from __future__ import annotations

import sys
from functools import partial

import numpy as np
import pytest

import irad
from irad.errors import GradError, TraceError
from irad.pytree import flatten, unflatten

MOD = __name__


def fd_grad(f, args, argnum=0, eps=1e-6):
    """Central differences of scalar ``f`` with respect to every float leaf of ``args[argnum]``."""
    leaves, tree = flatten(args[argnum])
    out = []
    for k, x in enumerate(leaves):
        x = np.asarray(x, dtype=float)
        g = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            def at(d, k=k, i=i):
                xs = list(leaves)
                v = np.array(x, copy=True)
                v[i] += d
                xs[k] = v if np.ndim(leaves[k]) else float(v)
                a = list(args)
                a[argnum] = unflatten(tree, xs)
                return float(f(*a))
            g[i] = (at(eps) - at(-eps)) / (2 * eps)
        out.append(g if np.ndim(leaves[k]) else float(g))
    return unflatten(tree, out)


def assert_tree_close(got, want, rtol=1e-6, atol=1e-8):
    gl, gt = flatten(got)
    wl, wt = flatten(want)
    assert gt == wt, (gt, wt)
    for a, b in zip(gl, wl):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def calls(rng, shape, n=3):
    """``n`` fresh float64 points of ``shape``: the first call traces, the others run the program."""
    return [rng.standard_normal(shape) for _ in range(n)]


# ---- custom_vjp -----------------------------------------------------------------------------


@irad.custom_vjp
def sin_times(x, y):
    return np.sin(x) * y


def sin_times_fwd(x, y):
    s = np.sin(x)
    return s * y, (np.cos(x), s, y)


def sin_times_bwd(res, g):
    c, s, y = res
    return g * c * y, g * s


sin_times.defvjp(sin_times_fwd, sin_times_bwd)


def loss_sin_times(x, y):
    return np.sum(sin_times(x, y) ** 2) + np.sum(x * y)


def test_custom_vjp_outside_a_trace_is_the_function():
    x = np.array([0.3, -1.2])
    np.testing.assert_array_equal(sin_times(x, 2.0), np.sin(x) * 2.0)
    assert sin_times.__name__ == "sin_times" and sin_times.fun.__name__ == "sin_times"


def test_custom_vjp_gradient_matches_finite_differences_on_later_calls():
    rng = np.random.default_rng(0)
    g = irad.grad(loss_sin_times, argnums=(0, 1))
    vg = irad.value_and_grad(loss_sin_times, argnums=(0, 1))
    for x, y in zip(calls(rng, 4), calls(rng, 4)):
        gx, gy = g(x, y)
        assert_tree_close(gx, fd_grad(loss_sin_times, (x, y), 0))
        assert_tree_close(gy, fd_grad(loss_sin_times, (x, y), 1))
        v, (vx, vy) = vg(x, y)
        assert v == pytest.approx(loss_sin_times(x, y), rel=1e-12)
        assert_tree_close((vx, vy), (gx, gy), rtol=1e-12, atol=0)


def test_custom_vjp_vjp_on_later_calls():
    rng = np.random.default_rng(1)
    for x, y, ybar in zip(calls(rng, 3), calls(rng, 3), calls(rng, 3)):
        out, pb = irad.vjp(sin_times, x, y)
        np.testing.assert_allclose(out, np.sin(x) * y, rtol=1e-12)
        xb, yb = pb(ybar)
        np.testing.assert_allclose(xb, ybar * np.cos(x) * y, rtol=1e-12)
        np.testing.assert_allclose(yb, ybar * np.sin(x), rtol=1e-12)


def test_the_rule_is_used_not_the_functions_derivative():
    """JAX's clip_gradient: the rule is not the derivative of the function, so only the rule can
    give this gradient."""
    @irad.custom_vjp
    def clip_gradient(lo, hi, x):
        return x

    def fwd(lo, hi, x):
        return x, (lo, hi)

    def bwd(res, g):
        lo, hi = res
        return None, None, np.clip(g, lo, hi)

    clip_gradient.defvjp(fwd, bwd)
    g = irad.grad(lambda x: np.sum(clip_gradient(-0.5, 0.5, x * x)))
    for x in calls(np.random.default_rng(2), 5):
        np.testing.assert_allclose(g(x), 0.5 * 2 * x)  # the cotangent 1 of the sum, clipped to 0.5


def test_joint_graph_and_program_name_the_rule():
    x, y = np.array([0.1, 0.2]), np.array([1.0, 2.0])
    prog = irad.compile(loss_sin_times, x, y, argnums=(0, 1), passes=[])
    text = str(prog.graph)
    assert f"rule_fwd[{MOD}.sin_times](%0, %1)" in text
    assert f"pullback[{MOD}.sin_times](" in text
    assert "sin_times_vjp_fwd(x, y)" in prog.source and "sin_times_vjp_pullback(" in prog.source
    assert f"{MOD}.sin_times(%0, %1)" in str(irad.trace(loss_sin_times, x, y))
    irad.verify(prog.graph)
    # the default pipeline inlines the user's fwd and bwd like any rule body
    opt = irad.compile(loss_sin_times, x, y, argnums=(0, 1))
    assert "pullback[" not in str(opt.graph) and "np.cos(x)" in opt.source
    for a, b in zip(opt(x, y)[1], prog(x, y)[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_keyword_arguments_are_resolved_to_positions():
    g = irad.grad(lambda x, y: np.sum(sin_times(y=y, x=x)), argnums=(0, 1))
    for x, y in zip(calls(np.random.default_rng(3), 2), calls(np.random.default_rng(4), 2)):
        gx, gy = g(x, y)
        np.testing.assert_allclose(gx, np.cos(x) * y, rtol=1e-12)
        np.testing.assert_allclose(gy, np.sin(x), rtol=1e-12)


# nondiff_argnums: a function (static) and an int (static); JAX's `app` example
@partial(irad.custom_vjp, nondiff_argnums=(0, 2))
def app(fn, x, power):
    return fn(x) ** power


def app_fwd(fn, x, power):
    y = fn(x)
    return y ** power, y


def app_bwd(fn, power, y, g):
    # d/dx fn(x)**power with fn = np.sin (the test's fn): power * y**(power-1) * cos(x); y = sin(x)
    return (g * power * y ** (power - 1) * np.sqrt(1 - y * y),)


app.defvjp(app_fwd, app_bwd)


def test_nondiff_argnums_static_function_and_int():
    def loss(x, power):
        return np.sum(app(np.sin, x, power))
    g = irad.grad(loss)
    rng = np.random.default_rng(5)
    for power in (2, 3):
        for x in calls(rng, 4):
            x = 0.7 * np.tanh(x)  # cos(x) > 0: sqrt(1 - sin^2) is cos
            assert_tree_close(g(x, power), fd_grad(loss, (x, power)))


@partial(irad.custom_vjp, nondiff_argnums=(1,))
def masked(x, mask):
    return np.exp(x) * mask


masked.defvjp(lambda x, mask: (np.exp(x) * mask, np.exp(x)), lambda mask, ex, g: (g * ex * mask,))


def test_nondiff_array_argument_gets_no_cotangent_and_refuses_differentiation():
    mask = np.array([1.0, 0.0, 2.0])
    g = irad.grad(lambda x, m: np.sum(masked(x, m)))
    for x in calls(np.random.default_rng(6), 3):
        np.testing.assert_allclose(g(x, mask), np.exp(x) * mask, rtol=1e-12)
    with pytest.raises(GradError, match=r"masked.*positional argument 1 is not implemented"):
        irad.grad(lambda x, m: np.sum(masked(x, m)), argnums=1)(np.ones(3), mask)


# pytrees: a dict argument, a (tuple, dict) output, dict residuals
@irad.custom_vjp
def rotate(p, s):
    c, d = np.cos(p["a"]), np.sin(p["a"])
    return (c * s, {"u": d * p["b"], "v": s * 2.0})


def rotate_fwd(p, s):
    c, d = np.cos(p["a"]), np.sin(p["a"])
    return (c * s, {"u": d * p["b"], "v": s * 2.0}), {"c": c, "d": d, "b": p["b"], "s": s}


def rotate_bwd(r, g):
    g0, gd = g
    pa = -r["d"] * r["s"] * g0 + r["c"] * r["b"] * gd["u"]
    return {"a": pa, "b": r["d"] * gd["u"]}, np.sum(r["c"] * g0) + 2.0 * gd["v"]


rotate.defvjp(rotate_fwd, rotate_bwd)


def loss_rotate(p, s):
    a, d = rotate(p, s)
    return np.sum(a * a) + np.sum(d["u"] ** 3) + d["v"] ** 2


def test_pytree_arguments_outputs_and_residuals():
    rng = np.random.default_rng(7)
    g = irad.grad(loss_rotate, argnums=(0, 1))
    for _ in range(3):
        p = {"a": rng.standard_normal(3), "b": rng.standard_normal(3)}
        s = float(rng.standard_normal())
        gp, gs = g(p, s)
        assert isinstance(gp, dict) and list(gp) == ["a", "b"] and type(gs) is float
        assert_tree_close(gp, fd_grad(loss_rotate, (p, s), 0))
        assert gs == pytest.approx(fd_grad(loss_rotate, (p, s), 1), rel=1e-6)


# higher order: bwd is numpy code, so irad traces it; JAX computes the same with the same rule
@irad.custom_vjp
def cube(x):
    return x ** 3


cube.defvjp(lambda x: (cube(x), x), lambda x, g: (g * 5.0 * x,))  # 5x, not 3x^2: the rule must be used


def test_grad_of_grad_through_custom_vjp_matches_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jcube = jax.custom_vjp(lambda x: x ** 3)
    jcube.defvjp(lambda x: (jcube(x), x), lambda x, g: (g * 5.0 * x,))
    want = jax.grad(jax.grad(lambda x: jcube(x) ** 2))
    inner = irad.grad(lambda x: cube(x) ** 2)
    gg = irad.grad(lambda x: inner(x))
    for x in (1.5, -0.7, 2.2):
        assert gg(x) == pytest.approx(float(want(x)), rel=1e-12)


def test_second_order_through_a_consistent_rule_matches_finite_differences():
    inner = irad.grad(loss_sin_times)
    rng = np.random.default_rng(11)
    y, w = rng.standard_normal(3), rng.standard_normal(3)
    outer = irad.grad(lambda x: np.sum(inner(x, y) * w))
    for x in calls(rng, 3):
        assert_tree_close(outer(x), fd_grad(lambda x: np.sum(inner(x, y) * w), (x,)))


def test_global_read_by_the_rule_is_a_dependency():
    mod = sys.modules[__name__]
    g = irad.grad(lambda x: np.sum(scaled(x)))
    x = np.array([0.5, 1.0])
    try:
        for _ in range(2):
            np.testing.assert_allclose(g(x), 3.0 * x * 2)
        mod.SCALE = 10.0  # the inlined bwd read it: the program must not keep 3.0
        np.testing.assert_allclose(g(x), 10.0 * x * 2)
    finally:
        mod.SCALE = 3.0


SCALE = 3.0


@irad.custom_vjp
def scaled(x):
    return x * x


scaled.defvjp(lambda x: (x * x, x), lambda x, g: (SCALE * g * 2 * x,))


# ---- errors ---------------------------------------------------------------------------------


@irad.custom_vjp
def product(x, y):
    return x * y


def product_fwd(x, y):
    return x * y, (x, y)


def bwd_one(res, g):
    return (g * res[1],)


def bwd_scalar(res, g):
    x, y = res
    return np.sum(g * y), g * x


def bwd_list(res, g):
    return [g], g


def bwd_not_tuple(res, g):
    return g * res[1]


LINE = {f.__name__: f.__code__.co_firstlineno for f in (bwd_one, bwd_scalar, bwd_list, bwd_not_tuple)}


@pytest.mark.parametrize("bwd, pattern", [
    (bwd_one, r"returned 1 cotangent, expected a tuple of 2: one per positional argument not in "
              r"nondiff_argnums \(x, y\)"),
    (bwd_scalar, r"returned a cotangent of shape \(\) for x, which has shape \(3,\)"),
    (bwd_list, r"returned a cotangent of a list for x, which has shape \(3,\)"),
    (bwd_not_tuple, r"returned a ndarray, expected a tuple of 2"),
])
def test_bwd_errors_name_the_function_the_rule_and_their_lines(bwd, pattern):
    product.defvjp(product_fwd, bwd)
    try:
        with pytest.raises(GradError, match=pattern) as e:
            irad.grad(lambda x, y: np.sum(product(x, y)))(np.ones(3), np.full(3, 2.0))
        msg = str(e.value)
        assert f"custom_vjp function product ({__file__}:{product.fun.__code__.co_firstlineno})" in msg
        assert f"{bwd.__name__} ({__file__}:{LINE[bwd.__name__]})" in msg
    finally:
        product.defvjp(product_fwd, lambda res, g: (g * res[1], g * res[0]))


def test_fwd_that_is_not_a_pair_is_an_error():
    @irad.custom_vjp
    def f(x):
        return x

    f.defvjp(lambda x: x, lambda r, g: (g,))
    with pytest.raises(GradError, match=r"custom_vjp function .*f .*: its fwd .* returned ndarray, not a pair"):
        irad.grad(lambda x: np.sum(f(x)))(np.ones(2))


def test_rule_never_defined_is_an_error_at_the_call_site():
    @irad.custom_vjp
    def no_vjp(x):
        return x * 2.0

    @irad.custom_jvp
    def no_jvp(x):
        return x * 2.0

    np.testing.assert_array_equal(no_vjp(np.ones(2)), 2.0)  # outside a trace: the function
    for f, hint in ((no_vjp, r"call no_vjp\.defvjp\(fwd, bwd\)"), (no_jvp, r"call no_jvp\.defjvp\(jvp\)")):
        def loss(x, f=f):
            return np.sum(f(x))  # the line the error points at
        line = loss.__code__.co_firstlineno + 1
        with pytest.raises(TraceError, match=rf"(?s){f.__name__} \({__file__}:\d+\) is called inside an irad "
                                             rf"transform, but its rule was never defined.*:{line}\).*{hint}"):
            irad.grad(loss)(np.ones(2))


def test_a_rule_holding_a_traced_value_in_its_closure_is_refused():
    def loss(x, w):
        @irad.custom_vjp
        def f(x):
            return x * w

        f.defvjp(lambda x: (x * w, None), lambda r, g: (g * w,))
        return np.sum(f(x))
    with pytest.raises(TraceError, match=r"holds a value being traced \(w, through a closure\)"):
        irad.grad(loss)(np.ones(2), np.ones(2))


# ---- custom_jvp -----------------------------------------------------------------------------


@irad.custom_jvp
def log1pexp(x):
    return np.log1p(np.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    x, = primals
    t, = tangents
    return log1pexp(x), t * (1 - 1 / (1 + np.exp(x)))  # sigmoid(x), stable for large x


def jax_log1pexp():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    f = jax.custom_jvp(lambda x: jnp.log1p(jnp.exp(x)))

    @f.defjvp
    def f_jvp(primals, tangents):
        x, = primals
        t, = tangents
        return f(x), t * (1 - 1 / (1 + jnp.exp(x)))
    return jax, f


def test_custom_jvp_reverse_rule_matches_finite_differences_and_jax_on_later_calls():
    jax, jf = jax_log1pexp()
    loss = lambda x: np.sum(np.sin(x) * log1pexp(2 * x))  # noqa: E731
    jloss = lambda x: jax.numpy.sum(jax.numpy.sin(x) * jf(2 * x))  # noqa: E731
    g = irad.grad(loss)
    rng = np.random.default_rng(8)
    for x in calls(rng, 5, n=4):
        got = g(x)
        assert_tree_close(got, fd_grad(loss, (x,)))
        np.testing.assert_allclose(got, np.asarray(jax.grad(jloss)(x)), rtol=1e-12, atol=1e-14)


def test_custom_jvp_is_stable_where_the_functions_own_derivative_is_not():
    jax, jf = jax_log1pexp()
    g = irad.grad(lambda x: np.sum(log1pexp(x)))
    x = np.array([-800.0, -30.0, 0.0, 30.0, 100.0])
    with np.errstate(over="ignore"):
        for _ in range(3):
            got = g(x)
            np.testing.assert_allclose(got, np.asarray(jax.grad(lambda x: jax.numpy.sum(jf(x)))(x)), rtol=1e-12)
            np.testing.assert_allclose(got, 1 / (1 + np.exp(-x)), rtol=1e-12, atol=1e-15)  # the rule's 1 - 1/(1+e^x)


def test_custom_jvp_transpose_is_compiled_once(monkeypatch):
    """Without the inline pass the pullback calls ``irad.vjp`` of the tangent map at each call:
    its program is compiled on the first call only."""
    import irad.api
    compiled = []
    real = irad.api._compile_vjp
    monkeypatch.setattr(irad.api, "_compile_vjp", lambda f, *a, **k: compiled.append(f.__name__) or real(f, *a, **k))
    loss = lambda x: np.sum(log1pexp(x) ** 2)  # noqa: E731
    g = irad.grad(loss, passes=[])
    rng = np.random.default_rng(9)
    for k, x in enumerate(calls(rng, 4, n=4)):
        assert_tree_close(g(x), fd_grad(loss, (x,)))
        if k == 0:
            assert compiled == ["log1pexp_tangent_map"]
    assert compiled == ["log1pexp_tangent_map"]
    assert "log1pexp_jvp_pullback(" in g.program(x).source


def test_custom_jvp_with_nondiff_argnums_and_a_pytree_output():
    @partial(irad.custom_jvp, nondiff_argnums=(0,))
    def powers(n, x):
        return {"p": x ** n, "q": np.sin(x)}

    @powers.defjvp
    def powers_jvp(n, primals, tangents):
        (x,), (t,) = primals, tangents
        return powers(n, x), {"p": n * x ** (n - 1) * t, "q": np.cos(x) * t}

    def loss(x, n):
        d = powers(n, x)
        return np.sum(d["p"] * d["q"])

    g = irad.grad(loss)
    for x in calls(np.random.default_rng(10), 3):
        for n in (2, 3):
            assert_tree_close(g(x, n), fd_grad(loss, (x, n)))


def test_grad_of_grad_through_custom_jvp_matches_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)

    def make(lib):
        f = lib.custom_jvp(lambda x: x ** 3)

        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return f(x), t * 5.0 * x  # not 3x^2: the rule must be used at every order
        return f

    jf, f = make(jax), make(irad)
    want = jax.grad(jax.grad(lambda x: jf(x) ** 2))
    inner = irad.grad(lambda x: f(x) ** 2)
    gg = irad.grad(lambda x: inner(x))
    for x in (1.5, -0.4, 2.0):
        assert gg(x) == pytest.approx(float(want(x)), rel=1e-12)


def test_forward_mode_uses_the_jvp_rule():
    jax, jf = jax_log1pexp()
    x, t = np.array([-2.0, 0.5, 40.0]), np.array([1.0, -2.0, 0.5])
    for _ in range(3):
        y, ydot = irad.jvp(lambda x: log1pexp(x) * 2.0, (x,), (t,))
        jy, jdot = jax.jvp(lambda x: jf(x) * 2.0, (x,), (t,))
        np.testing.assert_allclose(y, np.asarray(jy), rtol=1e-12)
        np.testing.assert_allclose(ydot, np.asarray(jdot), rtol=1e-12)
    f = irad.custom_jvp(lambda x: x ** 3)
    f.defjvp(lambda primals, tangents: (f(primals[0]), 5.0 * primals[0] * tangents[0]))  # not 3x^2
    for _ in range(3):
        np.testing.assert_allclose(irad.jvp(f, (x,), (t,))[1], 5.0 * x * t, rtol=1e-12)


def test_custom_jvp_ir_names_the_rule():
    x = np.array([0.1, 0.2])
    prog = irad.compile(lambda x: np.sum(log1pexp(x)), x, passes=[])
    assert f"rule_fwd[{MOD}.log1pexp](%0)" in str(prog.graph)
    assert "log1pexp_jvp_fwd(x)" in prog.source and "log1pexp_jvp_pullback(" in prog.source
    rule = irad.rules.registry.lookup(log1pexp._prim, (x,))
    assert rule is not None and rule.jvp is not None and rule.name == f"{MOD}.log1pexp"


# ---- ONNX export ----------------------------------------------------------------------------


@irad.custom_vjp
def sin_times_direct(x, y):
    return np.sin(x) * y


def sin_times_direct_fwd(x, y):  # computes the output itself: no call of the custom function
    s = np.sin(x)
    return s * y, (np.cos(x), s, y)


sin_times_direct.defvjp(sin_times_direct_fwd, sin_times_bwd)


@pytest.mark.parametrize("inline", [True, False])
def test_custom_vjp_exports_to_onnx(inline):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import irad.onnx as ionnx
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from onnx_run import expected, run_model

    def loss(x, y):
        return np.sum(sin_times_direct(x, y) ** 2)
    x, y = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
    model = ionnx.export(loss, x, y, argnums=(0, 1), inline=inline)
    prog = irad.compile(loss, x, y, argnums=(0, 1))
    _, outs = run_model(model, prog, (x, y))
    for got, want in zip(outs, expected(prog, (x, y))):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    names = [f.name for f in model.functions]
    assert (f"fwd.{MOD}.sin_times_direct" in names and f"pullback.{MOD}.sin_times_direct" in names) == (not inline)


def test_onnx_export_of_a_primal_call_names_it():
    """A custom function's own call (in fwd, or custom_jvp's forward) is one op whose ONNX form
    would be the function's body; the exporter does not write it yet and says which op."""
    pytest.importorskip("onnx")
    import irad.onnx as ionnx
    with pytest.raises(ionnx.ExportError, match=rf"{MOD}\.log1pexp at test_custom_rules\.py:\d+: no ONNX mapping"):
        ionnx.export(lambda x: np.sum(log1pexp(x)), np.ones(3))


def test_fwd_output_laid_out_otherwise_than_the_function_is_an_error():
    @irad.custom_vjp
    def pair(x):
        return x * 2.0, np.sum(x)

    pair.defvjp(lambda x: ((np.sum(x), x * 2.0), None), lambda r, g: (g[0] * 2.0,))  # swapped
    with pytest.raises(GradError, match=r"(?s)custom_vjp function .*pair .*: the output its rule .* returns is a "
                                        r"tuple of \(f64\[\], f64\[3\]\), but pair returns a tuple of "
                                        r"\(f64\[3\], f64\[\]\)"):
        irad.grad(lambda x: np.sum(pair(x)[0]))(np.ones(3))


def test_jvp_tangent_laid_out_otherwise_than_the_output_is_an_error():
    @irad.custom_jvp
    def f(x):
        return np.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), np.sum(np.cos(x) * t)  # a scalar tangent for an array output
    with pytest.raises(GradError, match=r"the tangent output its rule .*f_jvp .* returns is \(\), but f returns "
                                        r"\(3,\) .*return a tangent with the structure"):
        irad.grad(lambda x: np.sum(f(x)))(np.ones(3))


def test_nondiff_argnums_out_of_range_is_an_error():
    f = irad.custom_vjp(lambda x: x, nondiff_argnums=(1,))
    f.defvjp(lambda x: (x, None), lambda r, g: (g,))
    with pytest.raises(TypeError, match=r"nondiff_argnums \(1,\) name argument 1, but it is called with 1"):
        irad.grad(lambda x: np.sum(f(x)))(np.ones(2))
    with pytest.raises(TypeError, match=r"nondiff_argnums must be non-negative ints"):
        irad.custom_jvp(lambda x: x, nondiff_argnums=(-1,))
