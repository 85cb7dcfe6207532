"""Integrals inside a traced function: the Leibniz rule (irad/quadrature.py).

``I(θ, a, b) = ∫_a^b g(x, θ) dx`` has ``dI/dθ = ∫_a^b ∂g/∂θ dx``, ``dI/db = g(b)``, ``dI/da = -g(a)``.
Every case is checked against central finite differences in float64 on the second and later
calls of one compiled object, and compiles once; the options the rule does not cover, and
integrands it cannot differentiate exactly, are named errors."""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.errors import GuardError, NoRuleError, UnsupportedError
from irad.testing import numerical_vjp

si = pytest.importorskip("scipy.integrate")

W_WORLD = np.array([1.0, 2.0])
POINTS = (np.array([0.5, 1.5]), np.array([0.7, 1.2]), np.array([0.9, 0.8]))


def fd(f, x):
    """Central finite differences of scalar ``f`` at float64 ``x`` (``irad.testing.numerical_vjp``)."""
    return numerical_vjp(f, (np.asarray(x, dtype=np.float64),), 1.0)[0]


def check_compiled(f, points=POINTS, rtol=1e-6, atol=1e-8):
    """Values and gradients of one ``value_and_grad`` object on the second and later calls."""
    vg = irad.value_and_grad(f)
    vg(points[-1])  # the call that traces
    for w in points:
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(grad, fd(f, w), rtol=rtol, atol=atol)
    assert vg.traces == 1


def gaussian_weight(x, s):
    return np.exp(-0.5 * (x / s) ** 2)


CASES = {
    "integrand_only": lambda w: si.quad(lambda x: np.sin(w[0] * x) * np.exp(-w[1] * x), 0.0, 2.0)[0],
    "limits_only": lambda w: si.quad(lambda x: np.exp(-x * x), w[0] - 1.0, w[1])[0],
    "integrand_and_upper_limit": lambda w: si.quad(lambda x: np.sin(w[0] * x), 0.0, w[1])[0],
    "reversed_limits": lambda w: si.quad(lambda x: np.cos(w[0] * x) + x, w[1] + 1.0, w[0])[0],
    "args": lambda w: si.quad(lambda x, c, d: d * np.exp(-c * x), 0.0, 1.0, args=(w[0], w[1]))[0],
    "args_not_a_tuple": lambda w: si.quad(lambda x, c: np.exp(c * x), 0.0, 1.0, args=w[0])[0] * w[1],
    "gaussian_infinite_limits": lambda w: si.quad(gaussian_weight, -np.inf, np.inf, args=(w[0],))[0],
    "half_infinite_with_traced_lower": lambda w: si.quad(lambda x: np.exp(-w[0] * x), w[1], np.inf)[0],
    "vector_theta": lambda w: si.quad(lambda x: np.sum(w * x ** np.arange(2.0)) ** 2, 0.0, 1.0)[0],
    "world_array_in_integrand": lambda w: si.quad(lambda x: W_WORLD[1] * np.sin(W_WORLD[0] * w[0] * x),
                                                  0.0, w[1])[0],
    "integrand_constant_in_x": lambda w: si.quad(lambda x: w[0] ** 2, 0.0, w[1])[0],
    "ufunc_integrand": lambda w: si.quad(np.sin, 0.0, w[1])[0] * w[0],
    "points": lambda w: si.quad(lambda x: np.abs(x - w[1]) * w[0], 0.0, 2.0, points=[w[1]])[0],
    "kink_by_maximum": lambda w: si.quad(lambda x: np.maximum(x - w[1], 0.0) * w[0], 0.0, 2.0, points=[w[1]])[0],
    "branch_on_x_as_data": lambda w: si.quad(lambda x: np.where(x < 0.5, w[0] * x, w[1]), 0.0, 1.0,
                                             points=[0.5])[0],
    "jump_split_by_hand": lambda w: si.quad(lambda x: w[0] * x, 0.0, w[1])[0] + si.quad(lambda x: w[0], w[1], 2.0)[0],
    "value_used_later": lambda w: np.sin(si.quad(lambda x: np.exp(w[0] * x), 0.0, w[1])[0]) * np.sum(w ** 2),
    "cos_weight_traced_limit": lambda w: si.quad(lambda x: np.exp(-w[0] * x), 0.0, w[1], weight="cos", wvar=3.0)[0],
    "sin_weight_infinite": lambda w: si.quad(lambda x: np.exp(-w[0] * x), 0.0, np.inf, weight="sin", wvar=2.0)[0],
    "alg_weight_constant_limits": lambda w: si.quad(lambda x: np.exp(-w[0] * x), 0.0, 1.0, weight="alg",
                                                    wvar=(-0.5, 0.3))[0],
    "quad_vec": lambda w: np.sum(si.quad_vec(lambda x: np.array([np.sin(w[0] * x), x * w[1]]), 0.0, w[1])[0] ** 2),
    "nquad": lambda w: si.nquad(lambda x, y: np.exp(-w[0] * x * y), [[0.0, w[1]], [0.0, 1.0]])[0],
    "tplquad_limit_function": lambda w: si.tplquad(lambda z, y, x: np.exp(-w[0] * x * y * z), 0.0, 1.0, 0.0, 1.0,
                                                   0.0, lambda x, y: w[1])[0],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_integral_gradient_matches_finite_differences(name):
    check_compiled(CASES[name])


def dbl(w):
    """A parameter in the integrand and in the upper limit function of the inner integral."""
    return si.dblquad(lambda y, x: np.sin(w[0] * x * y) + y, 0.0, 1.0, 0.0, lambda x: w[1] * x)[0]


def test_dblquad_with_a_parameter_in_the_integrand_and_a_limit_function():
    check_compiled(dbl)
    w = np.array([0.5, 1.5])  # ∂/∂w1 by hand: the inner upper limit w1·x moves, ∫ x g(w1 x, x) dx
    want = si.quad(lambda x: x * (np.sin(w[0] * x * w[1] * x) + w[1] * x), 0.0, 1.0, epsabs=1e-13)[0]
    np.testing.assert_allclose(irad.grad(dbl)(w)[1], want, rtol=1e-7)


def test_abserr_is_fresh_on_later_calls():
    def f(w):
        value, err = si.quad(lambda x: np.sin(w[0] * x), 0.0, w[1])
        return value + 1e6 * err  # the error estimate has no gradient, but it is the call's own

    vg = irad.value_and_grad(f)
    vg(np.array([0.5, 1.5]))
    for w in (np.array([30.7, 10.2]), np.array([0.7, 1.2])):
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-12)
        np.testing.assert_allclose(grad, irad.grad(lambda v: si.quad(lambda x: np.sin(v[0] * x), 0.0, v[1])[0])(w))
    assert vg.traces == 1


def test_a_world_array_the_integrand_reads_is_live():
    f = CASES["world_array_in_integrand"]
    vg = irad.value_and_grad(f)
    w = np.array([0.5, 1.5])
    vg(w)
    try:
        W_WORLD[0] = 3.0
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-12)
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-6)
    finally:
        W_WORLD[0] = 1.0


def test_second_order():
    def f(w):
        return si.quad(lambda x: np.exp(-w[0] * x * x), -w[1], np.inf)[0]

    gf = irad.grad(f)
    h = irad.grad(lambda w: np.sum(gf(w) ** 2))
    h(POINTS[-1])
    for w in POINTS:
        np.testing.assert_allclose(h(w), fd(lambda v: np.sum(gf(v) ** 2), w), rtol=1e-5)
    assert h.traces == 1


def test_second_order_of_dblquad():
    gd = irad.grad(dbl)
    h = irad.grad(lambda w: gd(w)[0] * w[1])
    w = np.array([0.5, 1.5])
    np.testing.assert_allclose(h(w), fd(lambda v: gd(v)[0] * v[1], w), rtol=1e-5)


def test_a_constant_integrand_gives_a_constant_integral():
    def f(x):
        return si.quad(lambda t: t ** 2, 0.0, 1.0, full_output=1)[0] * np.sum(x ** 2)  # full_output is fine here

    vg = irad.value_and_grad(f)
    for x in (np.array([1.0, 2.0]), np.array([0.5, -1.0])):
        np.testing.assert_allclose(vg(x)[1], 2 * x / 3)


def test_a_branch_on_theta_inside_the_integrand_retraces():
    def g(x, w):
        if w[0] > 0:
            return np.sin(w[0] * x)
        return np.cos(w[0] * x)

    def f(w):
        return si.quad(g, 0.0, 1.0, args=(w,))[0] * w[1]

    vg = irad.value_and_grad(f)
    for w in (np.array([1.0, 2.0]), np.array([1.5, 2.0]), np.array([-1.0, 2.0]), np.array([-1.5, 0.5])):
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-12)
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-6)
    assert vg.traces == 2  # one trace per branch, each compiled once


def test_a_python_branch_on_the_integration_variable_is_an_error():
    def f(w):
        return si.quad(lambda x: w[0] * x if x < 0.5 else w[0], 0.0, 1.0)[0]

    vg = irad.value_and_grad(f)
    for _ in range(2):
        with pytest.raises(UnsupportedError, match=r"quad: the integrand branches on the integration variable") as e:
            vg(np.array([1.0, 2.0]))
        assert "test_trust_quad.py" in str(e.value) and "np.where" in str(e.value)
        assert not isinstance(e.value, GuardError)


@pytest.mark.parametrize("integrand", [
    lambda x, w: np.where(x < w[1], w[0] * x, w[0]),  # a jump at x = w1
    lambda x, w: w[0] * x if x < w[1] else w[0],
    lambda x, w: np.floor(x * w[0]),
    lambda x, w: np.sign(x - w[1]) * w[0],
])
def test_a_jump_that_moves_with_theta_is_refused(integrand):
    def f(w):
        return si.quad(integrand, 0.0, 2.0, args=(w,))[0]

    with pytest.raises(NoRuleError, match=r"quad: the integrand jumps where the integration variable meets a traced"):
        irad.grad(f)(np.array([0.5, 1.5]))


def test_a_jump_at_a_world_threshold_is_fine():
    def f(w):
        return si.quad(lambda x: np.where(x < W_WORLD[0], w[0] * x, w[1]), 0.0, 2.0, points=[1.0])[0]

    check_compiled(f)


@pytest.mark.parametrize("call, option", [
    (lambda w: si.quad(lambda x: np.exp(w[0] * x), 0.0, 1.0, full_output=1)[0], "full_output"),
    (lambda w: si.quad(lambda x: np.exp(1j * w[0] * x), 0.0, 1.0, complex_func=True)[0].real, "complex_func"),
    (lambda w: si.quad(lambda x: np.exp(-x), 0.0, 1.0, weight="cos", wvar=w[0])[0], "traced wvar"),
    (lambda w: si.quad(lambda x: np.exp(w[0] * x), 0.0, 1.0, epsabs=w[1] * 1e-9)[0], "traced epsabs"),
    (lambda w: si.quad(lambda x: np.exp(-w[0] * x), 0.0, w[1], weight="alg", wvar=(-0.5, 0.3))[0],
     "weight='alg' and a traced limit"),
    (lambda w: si.quad(lambda x: np.exp(-x), 0.0, w[1], weight="cauchy", wvar=3.0)[0],
     "weight='cauchy' and a traced limit"),
    (lambda w: si.quad_vec(lambda x: np.array([w[0] * x, x]), 0.0, 1.0, full_output=True)[0][0], "full_output"),
])
def test_refused_options_name_quad_and_the_option(call, option):
    with pytest.raises(NoRuleError) as e:
        irad.grad(call)(np.array([0.5, 1.5]))
    assert "scipy.integrate.quad" in str(e.value) and option in str(e.value), str(e.value)


def kept_in_a_list(w):
    store = []

    def g(x):
        store.append(w[0] * x)
        return w[0] * x

    return si.quad(g, 0.0, 1.0)[0] + store[-1]  # the value at quad's last node, not at irad's trace point


def kept_in_a_cell(w):
    last = None

    def g(x):
        nonlocal last
        last = w[0] * x
        return last

    return si.quad(g, 0.0, 1.0)[0] + last


def kept_in_a_dict(w):
    seen = {}

    def g(x):
        seen["last"] = w[0] * x
        return w[0] * x

    return si.quad(g, 0.0, 1.0)[0] + seen["last"]


def written_into_a_world_array(w):
    def g(x):
        W_WORLD[0] = x
        return w[0] * x

    return si.quad(g, 0.0, 1.0)[0]


@pytest.mark.parametrize("f, effect", [(kept_in_a_list, "keeps a value it computed, which is used after the call"),
                                       (kept_in_a_cell, "keeps a value it computed, which is used after the call"),
                                       (kept_in_a_dict, "keeps a value it computed, which is used after the call"),
                                       (written_into_a_world_array, "in place")])
def test_an_integrand_with_effects_is_refused(f, effect):
    saved = W_WORLD.copy()
    try:
        with pytest.raises(irad.IradError, match=effect) as e:
            irad.value_and_grad(f)(np.array([0.5, 1.5]))
        assert "scipy.integrate.quad" in str(e.value) or "W_WORLD" in str(e.value)
    finally:
        W_WORLD[:] = saved


def test_an_integrand_that_records_x_alone_runs_natively():
    xs = []

    def f(w):  # nothing traced reaches the integral: quad runs natively, and the list gets every node
        return si.quad(lambda x: xs.append(x) or x * x, 0.0, 1.0)[0] * w[0]

    vg = irad.value_and_grad(f)
    for w in POINTS:
        n = len(xs)
        value, grad = vg(w)
        np.testing.assert_allclose(value, w[0] / 3)
        np.testing.assert_allclose(grad, [1 / 3, 0.0])
        assert len(xs) >= n + 21  # (the list it reads changed: each call traces again)


def test_an_untraceable_integrand_of_constants_still_runs():
    def weird(x):
        return eval("x * 2.0")  # irad cannot trace eval, and nothing traced reaches it

    def f(w):
        return si.quad(weird, 0.0, 1.0)[0] * w[0]

    vg = irad.value_and_grad(f)
    for w in POINTS:
        np.testing.assert_allclose(vg(w)[1], [1.0, 0.0])
