"""Trust II (part): C code that calls back into traced Python never silently drops a gradient.

C code without a rule (MINPACK's ``leastsq``, under ``curve_fit`` too) calls the user's
callback, which computes with traced values, and returns a new float: before, the gradient
through it was silently zero.  Now it is a ``NoRuleError`` naming the C function and the
callback's line, while callbacks of constants keep working.  (SciPy's root finders have an
implicit-function rule: tests/test_trust_solvers.py; ``quad`` the Leibniz rule: tests/test_trust_quad.py;
``odeint`` and ``solve_ivp`` an adjoint rule: tests/test_trust_odes.py.)"""
from __future__ import annotations

import operator

import numpy as np
import pytest

import irad
from irad.errors import MutationError, NoRuleError
from irad.testing import numerical_vjp

so = pytest.importorskip("scipy.optimize")
si = pytest.importorskip("scipy.integrate")


def fit_leastsq(a):
    return so.leastsq(lambda t: a * t ** 2 + np.sin(a * t) - 1.0, 1.0)[0][0]


def fit_curve_fit(a):
    xs = np.linspace(0.0, 1.0, 5)
    return so.curve_fit(lambda x, p: p * x, xs, a * xs ** 2, p0=[1.0])[0][0]


def array_param_leastsq(w):
    return so.leastsq(lambda t: np.sum(w) * t - 1.0, 1.0)[0][0] + np.sum(w ** 2)


@pytest.mark.parametrize("f", [fit_leastsq, fit_curve_fit])
@pytest.mark.parametrize("transform", ["grad", "value_and_grad"])
def test_callback_of_traced_values_into_c_is_an_error_not_a_zero(f, transform):
    g = getattr(irad, transform)(f)
    for _ in range(2):  # refused on every call: nothing wrong was cached
        with pytest.raises(NoRuleError) as e:
            g(2.0)
        msg = str(e.value)
        assert "called back into Python" in msg and "test_trust_boundary.py" in msg, msg


def test_array_captured_by_the_callback():
    with pytest.raises(NoRuleError, match="_lmdif"):
        irad.grad(array_param_leastsq)(np.array([0.5, 1.5]))


def test_vjp_refuses_too():
    with pytest.raises(NoRuleError):
        irad.vjp(fit_leastsq, 2.0)


def constant_root_times(x):
    r = so.brentq(lambda t: t ** 3 - 2.0, 0.0, 5.0)  # the callback reads no traced value
    return r * np.sum(x ** 2)


def constant_integral_times(x):
    c = si.quad(lambda t: t ** 2, 0.0, 1.0)[0]
    return c * np.sum(np.sin(x))


@pytest.mark.parametrize("f, grad_of", [
    (constant_root_times, lambda x: 2.0 ** (1 / 3) * 2 * x),
    (constant_integral_times, lambda x: np.cos(x) / 3.0),
])
def test_callbacks_of_constants_still_work(f, grad_of):
    vg = irad.value_and_grad(f)
    for x in (np.array([0.3, -1.2]), np.array([1.0, 2.0]), np.array([0.5, 0.25])):
        value, grad = vg(x)
        np.testing.assert_allclose(value, f(x), rtol=1e-9)
        np.testing.assert_allclose(grad, grad_of(x), rtol=1e-7)


# ---- C code that writes into a traced array: an error, never an update the graph misses ---------


sl = pytest.importorskip("scipy.linalg")


blas = pytest.importorskip("scipy.linalg.blas")


def scaled_by_blas(x):
    y = x.copy()
    blas.dscal(2.0, y)  # y *= 2 in place, in Fortran
    return np.sum(y * np.arange(4.0))


def swapped_by_blas(x):
    y, z = x * 2.0, np.sin(x)
    blas.dswap(y, z)
    return np.sum(y * np.arange(4.0))


def axpy_by_blas(x):
    y = np.cos(x)
    blas.daxpy(x, y, a=3.0)  # y += 3 x in place
    return np.sum(y * np.arange(4.0))


@pytest.mark.parametrize("f", [scaled_by_blas, swapped_by_blas, axpy_by_blas])
def test_untraced_in_place_update_of_a_traced_array_is_refused(f):
    g = irad.value_and_grad(f)
    for _ in range(2):
        with pytest.raises(MutationError) as e:
            g(np.array([0.3, -1.2, 0.7, 0.5]))
        assert "updates a traced array in place" in str(e.value)
        assert "test_trust_boundary.py" in str(e.value)


def untraced_reader(x):
    y = x * 1.0
    order = np.random.default_rng(0).permutation(len(y))  # reads nothing traced, writes nothing
    return np.sum(y[order] * np.arange(4.0))


def test_untraced_calls_that_do_not_write_still_work():
    vg = irad.value_and_grad(untraced_reader)
    order = np.random.default_rng(0).permutation(4)
    want = np.zeros(4)
    want[order] = np.arange(4.0)
    for x in (np.arange(4.0), np.ones(4)):
        value, grad = vg(x)
        np.testing.assert_allclose(value, untraced_reader(x))
        np.testing.assert_allclose(grad, want)


# ---- C functions that only move the references they are handed still work ------------------------

@pytest.mark.parametrize("f", [
    lambda x: (lambda l: (operator.setitem(l, 0, x[3]), l[0] * 2 + l[1])[1])([x[0], x[1]]),
    lambda x: (lambda l: (operator.delitem(l, 0), l[0] * 2)[1])([x[0], x[1]]),
    lambda x: (lambda l: l[0] * 2 + l[1] * 3)(operator.iadd([x[0]], [x[2]])),
    lambda x: (lambda d: (operator.setitem(d, "k", x[1]), d["k"] * 5)[1])({}),
], ids=["setitem", "delitem", "iadd", "dict_setitem"])
def test_c_functions_that_move_references_of_traced_values_work(f):
    vg = irad.value_and_grad(f)
    for x in (np.arange(4.0), np.arange(4.0) ** 2 + 0.5):
        value, grad = vg(x)
        np.testing.assert_allclose(value, f(x))
        np.testing.assert_allclose(grad, numerical_vjp(f, (x,), 1.0)[0], atol=1e-8)
