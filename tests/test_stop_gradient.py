"""``irad.stop_gradient`` and ``irad.elementwise_grad`` (issue 15, parts 2 and 4: first pieces).

``stop_gradient(x)`` keeps the value and cuts the dependence: the gradient equals finite
differences of the function with the stopped value held constant.  ``elementwise_grad`` is
autograd's: the vjp with a cotangent of ones.  Every check runs the compiled object on several
calls with new values (the first call's result comes from trace time).
"""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.testing import numerical_vjp


def _fd(f, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    steps = [np.reshape(e, x.shape) for e in np.eye(x.size)]
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in steps]).reshape(x.shape)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_stopped_value_is_a_constant(shape):
    def f(x):
        return np.sum(np.sin(x) * irad.stop_gradient(x) ** 2)
    g = irad.grad(f)
    rng = np.random.default_rng(len(shape))
    for _ in range(3):
        x = rng.standard_normal(shape)
        held = x.copy()   # the stopped value, frozen at this point
        want = _fd(lambda u: np.sum(np.sin(u) * held ** 2), x)
        np.testing.assert_allclose(g(x), want, rtol=1e-6, atol=1e-9)


def test_python_floats_numpy_scalars_and_pytrees():
    g = irad.grad(lambda t: t * irad.stop_gradient(t) + irad.stop_gradient(t * t))
    for t in (0.5, -2.0, 3.0):
        assert g(t) == pytest.approx(t)
    h = irad.grad(lambda d: d["a"] * irad.stop_gradient(d)["b"] + irad.stop_gradient(d["a"]) ** 2 * d["b"])
    for a, b in ((1.0, 2.0), (3.0, 5.0)):
        assert h({"a": a, "b": b}) == {"a": pytest.approx(b), "b": pytest.approx(a * a)}
    s = irad.grad(lambda x: np.float64(2.0) * irad.stop_gradient(np.float64(x)) * x)
    assert s(1.5) == pytest.approx(3.0)


def test_value_is_kept_bit_for_bit():
    x = np.array([-0.0, np.nan, np.inf, 1e-310])
    y = irad.stop_gradient(x)
    assert y is not x
    np.testing.assert_array_equal(np.signbit(y), np.signbit(x))
    np.testing.assert_array_equal(y, x)
    assert np.signbit(irad.stop_gradient(-0.0))


def test_under_vjp_and_inside_an_outer_grad():
    f = lambda x: np.tanh(x) * irad.stop_gradient(x)  # noqa: E731
    x = np.array([0.3, -1.2, 2.0])
    for k in range(2):
        _, pb = irad.vjp(f, x + k)
        np.testing.assert_allclose(pb(np.ones(3))[0], (x + k) / np.cosh(x + k) ** 2, rtol=1e-12)

    def outer(p):  # the inner gradient of x * stop(p) * x is 2 x stop(p): no dependence on p left
        return irad.grad(lambda x: x * irad.stop_gradient(p) * x)(1.5) + p
    go = irad.grad(outer)
    for p in (0.5, 2.0):
        assert go(p) == pytest.approx(1.0)


@pytest.mark.parametrize("fn", [np.tanh, np.exp, lambda x: x ** 3 - np.sin(x), lambda x: 1 / (1 + np.exp(-x))])
@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
def test_elementwise_grad_matches_finite_differences(fn, shape):
    e = irad.elementwise_grad(fn)
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.standard_normal(shape)
        h = 1e-6
        np.testing.assert_allclose(e(x), (fn(x + h) - fn(x - h)) / (2 * h), rtol=1e-6, atol=1e-9)


def test_elementwise_grad_argnum_and_python_floats():
    def cumulative_hazard(params, t):
        lam, rho = params
        return (t / lam) ** rho
    hazard = irad.elementwise_grad(cumulative_hazard, argnum=1)
    t = np.array([1.0, 2.0, 3.5])
    for params in (np.array([2.0, 1.5]), np.array([1.2, 0.8])):
        lam, rho = params
        np.testing.assert_allclose(hazard(params, t), rho / lam * (t / lam) ** (rho - 1), rtol=1e-12)
    assert irad.elementwise_grad(lambda x: x ** 3)(2.0) == pytest.approx(12.0)
    # inside an outer gradient (the survival-fitter pattern of issue 23)
    g = irad.grad(lambda p: -np.sum(np.log(hazard(p, t))))
    p = np.array([2.0, 1.5])
    np.testing.assert_allclose(g(p), numerical_vjp(lambda q: -np.sum(np.log(q[1] / q[0] * (t / q[0]) ** (q[1] - 1))),
                                                   (p,), 1.0)[0], rtol=1e-6)
