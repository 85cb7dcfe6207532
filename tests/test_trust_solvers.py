"""Scalar root finding inside a traced function: the implicit-function rule (irad/solvers.py).

``t*(θ)`` with ``g(t*, θ) = 0`` has ``dt*/dθ = -(∂g/∂θ) / (∂g/∂t)``; every case is checked
against central finite differences in float64 on the second and later calls of one compiled
object, and compiles once."""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.errors import NoRuleError

so = pytest.importorskip("scipy.optimize")

W_WORLD = np.array([1.0, 2.0])


def fd(f, x, eps=1e-6):
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


CASES = {
    "brentq_cube_root": lambda w: so.brentq(lambda t: t ** 3 - w[0] * w[1], 0.0, 5.0),
    "brentq_vector_theta": lambda w: so.brentq(lambda t: np.sum(w * t) - np.sum(w ** 2), -10.0, 10.0) * np.sum(w),
    "ridder_extra_args": lambda w: so.ridder(lambda t, c: t ** 3 + c * t - 1.0, 0.0, 2.0, args=(np.sum(w),)),
    "bisect": lambda w: so.bisect(lambda t: np.tanh(t) - 0.1 * np.sum(w), -3.0, 3.0, xtol=1e-14),
    "brenth_fixed_point": lambda w: so.brenth(lambda t: t - np.cos(t * w[0]), 0.0, 2.0),
    "toms748": lambda w: so.toms748(lambda t: np.exp(t) - np.sum(w), -5.0, 5.0),
    "root_scalar_brentq": lambda w: so.root_scalar(lambda t: t ** 2 - w[0] * w[1], bracket=[0, 10],
                                                   method="brentq").root,
    "root_scalar_bisect": lambda w: so.root_scalar(lambda t: t ** 2 - w[0] * w[1], bracket=[0, 10],
                                                   method="bisect", xtol=1e-14).root,
    "world_array_in_residual": lambda w: so.brentq(lambda t: W_WORLD[0] * t - w[1], -10.0, 10.0) ** 2,
    "root_used_later": lambda w: np.sin(so.brentq(lambda t: t ** 3 - w[0], 0.0, 5.0)) * np.sum(w ** 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_root_gradient_matches_finite_differences(name):
    f = CASES[name]
    vg = irad.value_and_grad(f)
    for w in (np.array([0.5, 1.5]), np.array([0.7, 1.2]), np.array([0.9, 0.8])):
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-9)
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-5, atol=1e-7)
    assert vg.traces == 1


def test_a_world_array_the_residual_reads_is_live():
    f = CASES["world_array_in_residual"]
    vg = irad.value_and_grad(f)
    w = np.array([0.5, 1.5])
    vg(w)
    try:
        W_WORLD[0] = 5.0
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w))
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-5, atol=1e-7)
    finally:
        W_WORLD[0] = 1.0


def test_a_constant_residual_gives_a_constant_root():
    def f(x):
        return so.brentq(lambda t: t ** 3 - 2.0, 0.0, 5.0) * np.sum(x ** 2)

    vg = irad.value_and_grad(f)
    for x in (np.array([1.0, 2.0]), np.array([0.5, -1.0])):
        value, grad = vg(x)
        np.testing.assert_allclose(grad, 2.0 ** (1 / 3) * 2 * x)


def test_a_root_where_the_residual_is_flat_is_an_error():
    def f(a):
        return so.brentq(lambda t: np.floor(t) - a, 0.5, 3.0)  # ∂g/∂t is zero everywhere

    with pytest.raises(NoRuleError, match="derivative is zero"):
        irad.grad(f)(1.0)
