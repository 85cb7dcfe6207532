"""Scalar root finding inside a traced function: the implicit-function rule (irad/solvers.py).

``t*(θ)`` with ``g(t*, θ) = 0`` has ``dt*/dθ = -(∂g/∂θ) / (∂g/∂t)``; every case is checked
against central finite differences in float64 on the second and later calls of one compiled
object, and compiles once."""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.errors import NoRuleError
from irad.testing import numerical_vjp

so = pytest.importorskip("scipy.optimize")

W_WORLD = np.array([1.0, 2.0])


def fd(f, x):
    """Central finite differences of scalar ``f`` at float64 ``x`` (``irad.testing.numerical_vjp``)."""
    return numerical_vjp(f, (np.asarray(x, dtype=np.float64),), 1.0)[0]


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
    "newton_secant": lambda w: so.newton(lambda t: t ** 3 - w[0] * w[1], 1.0, tol=1e-13),
    "newton_fprime": lambda w: so.newton(lambda t: t ** 3 - w[0] * w[1], 1.0, fprime=lambda t: 3 * t ** 2),
    "newton_halley": lambda w: so.newton(lambda t: np.exp(t) - w[0] - w[1], 0.0, fprime=np.exp, fprime2=np.exp),
    "newton_extra_args": lambda w: so.newton(lambda t, c: np.cos(t) - c * t, 0.5, args=(w[0],)) * w[1],
    "newton_full_output": lambda w: so.newton(lambda t: t ** 3 - w[0], 1.0, full_output=True)[1].root * w[1],
    "newton_array_start": lambda w: np.sum(so.newton(lambda t: t ** 3 - w, np.ones(2), tol=1e-13) * [1.0, 3.0]),
    "newton_array_fprime": lambda w: np.sum(so.newton(lambda t: t ** 3 - w * t, np.full(2, 2.0),
                                                      fprime=lambda t: 3 * t ** 2 - w) ** 2),
    "root_scalar_newton": lambda w: so.root_scalar(lambda t: t ** 2 - w[0] * w[1], x0=1.0, fprime=lambda t: 2 * t,
                                                   method="newton").root,
    "root_scalar_secant": lambda w: so.root_scalar(lambda t: t ** 2 - w[0] * w[1], x0=1.0, x1=2.0,
                                                   method="secant").root,
    "root_scalar_halley": lambda w: so.root_scalar(lambda t: t ** 2 - w[0] * w[1], x0=1.0, fprime=lambda t: 2 * t,
                                                   fprime2=lambda t: 2.0, method="halley").root,
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


START_CASES = {
    "brentq_bracket_from_parameters": lambda w: so.brentq(lambda t: t ** 3 - w[0], 0.0, 2.0 * w[0] + 1.0),
    "bisect_bracket_from_parameters": lambda w: so.bisect(lambda t: t ** 3 - w[0] * w[1], w[0] - 5.0, 5.0 + w[1],
                                                          xtol=1e-14),
    "root_scalar_bracket": lambda w: so.root_scalar(lambda t: t ** 2 - w[0], bracket=[0.0, w[0] + 1.0]).root,
    "newton_start_from_parameters": lambda w: so.newton(lambda t: t ** 3 - w[0] * w[1], w[0], tol=1e-13),
    "newton_array_start_from_parameters": lambda w: np.sum(so.newton(lambda t: t ** 3 - w, w + 0.5, tol=1e-13)),
    "fsolve_start_from_parameters": lambda w: np.sum(so.fsolve(lambda x: x ** 3 - w, w, xtol=1e-13) ** 2),
    "root_start_from_parameters": lambda w: np.sum(so.root(lambda x: x ** 3 + x - w, 2.0 * w, tol=1e-13).x),
}


@pytest.mark.parametrize("name", sorted(START_CASES))
def test_a_start_or_bracket_computed_from_traced_values_is_the_one_each_call_uses(name):
    f = START_CASES[name]
    vg = irad.value_and_grad(f)
    for w in (np.array([0.5, 1.5]), np.array([0.7, 1.2]), np.array([1.9, 0.8])):
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-7)
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-5, atol=1e-6)
    assert vg.traces == 1


@pytest.mark.parametrize("method", ["BFGS", "Nelder-Mead", "L-BFGS-B"])
def test_a_minimize_start_computed_from_traced_values(method):
    def f(w):  # the minimiser A⁻¹w does not move with the start: the gradient is A⁻ᵀ1
        return np.sum(so.minimize(lambda x: 0.5 * x @ A_SPD @ x - w @ x, w * 2.0, method=method,
                                  options={"xatol": 1e-12, "fatol": 1e-14} if method == "Nelder-Mead" else {}).x)

    vg = irad.value_and_grad(f)
    for w in (np.array([0.5, 1.5]), np.array([0.7, 1.2]), np.array([1.9, 0.8])):
        value, grad = vg(w)
        np.testing.assert_allclose(value, np.sum(np.linalg.solve(A_SPD, w)), rtol=1e-5)
        np.testing.assert_allclose(grad, np.linalg.solve(A_SPD.T, np.ones(2)), rtol=1e-6)
    assert vg.traces == 1


def branch_on_the_unknown(t, a):
    if t > 1.0:
        return t ** 3 - a
    return 2.0 * (t ** 3 - a)


def branch_on_a_parameter(t, a):
    if a > 8.5:
        return t ** 3 - a
    return 2.0 * (t ** 3 - a) + t - 2.0


@pytest.mark.parametrize("solve", [
    lambda g, a: so.brentq(g, 0.0, 5.0, args=(a,)),
    lambda g, a: so.newton(g, 1.5, args=(a,)),
    lambda g, a: so.fsolve(lambda x: np.atleast_1d(g(x[0], a)), np.full(1, 1.9))[0],
], ids=["brentq", "newton", "fsolve"])
def test_a_residual_that_branches_on_the_unknown_is_an_error(solve):
    with pytest.raises(NoRuleError, match="branches on the unknown"):
        irad.grad(lambda w: solve(branch_on_the_unknown, w[0]))(np.array([8.0]))


def test_a_branch_on_a_parameter_guards_the_whole_program():
    def f(w):
        return so.brentq(branch_on_a_parameter, 0.0, 5.0, args=(w[0],)) * w[0]

    vg = irad.value_and_grad(f)
    for a in (9.0, 10.0, 8.0, 8.2, 9.5):  # crossing 8.5 takes the other branch: a retrace, never a wrong root
        value, grad = vg(np.array([a]))
        np.testing.assert_allclose(value, f(np.array([a])), rtol=1e-12)
        np.testing.assert_allclose(grad, fd(f, [a]), rtol=1e-5)
    assert vg.traces == 2


def system3(x, w):
    return np.array([x[0] + 0.5 * np.sin(x[1]) - w[0],
                     x[1] + 0.3 * x[2] ** 2 - w[1],
                     x[2] - 0.2 * x[0] * x[1] - w[2]])


VECTOR_CASES = {
    "fsolve_3d_system": lambda w: np.sum(so.fsolve(lambda x: system3(x, w), np.zeros(3), xtol=1e-13) ** 2),
    "root_hybr_3d_system": lambda w: np.sum(so.root(lambda x: system3(x, w), np.zeros(3), tol=1e-13).x
                                            * np.arange(1.0, 4.0)),
    "fsolve_extra_args": lambda w: so.fsolve(lambda x, c: x ** 3 - c, np.ones(2), args=(w[:2],), xtol=1e-13)[0],
}


@pytest.mark.parametrize("name", sorted(VECTOR_CASES))
def test_vector_root_gradient_matches_finite_differences(name):
    f = VECTOR_CASES[name]
    vg = irad.value_and_grad(f)
    for w in (np.array([0.5, 1.5, 0.2]), np.array([0.7, 1.2, 0.3]), np.array([0.9, 0.8, -0.1])):
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-8)
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-5, atol=1e-6)
    assert vg.traces == 1


# ---- minimize: the argmin by the implicit function theorem on its first-order conditions -------

A_SPD = np.array([[3.0, 0.5], [0.5, 2.0]])
_rng = np.random.default_rng(0)
XD = _rng.normal(size=(30, 2))
YD = (XD @ np.array([1.0, -1.0]) > 0).astype(float)


def logreg_objective(w, lam):
    z = XD @ w
    return np.sum(np.logaddexp(0.0, z) - YD * z) + lam * np.sum(w ** 2)


def logreg_argmin_tight(lam):
    """The reference solve: the exact gradient, a tight tolerance (finite differences of it are clean)."""
    def jac(w, lam):
        return XD.T @ (1.0 / (1.0 + np.exp(-XD @ w)) - YD) + 2.0 * lam * w
    return so.minimize(logreg_objective, np.zeros(2), args=(lam,), jac=jac, method="BFGS",
                       options={"gtol": 1e-13}).x


@pytest.mark.parametrize("method", ["BFGS", "L-BFGS-B", "Nelder-Mead"])
def test_argmin_of_a_parametrised_quadratic(method):
    opts = {"BFGS": {"gtol": 1e-12}, "L-BFGS-B": {"gtol": 1e-12, "ftol": 1e-15},
            "Nelder-Mead": {"xatol": 1e-12, "fatol": 1e-14, "maxiter": 5000}}[method]

    def f(b):
        res = so.minimize(lambda x: 0.5 * x @ A_SPD @ x - b @ x, np.zeros(2), method=method, options=opts)
        return np.sum(res.x ** 2)

    vg = irad.value_and_grad(f)
    for b in (np.array([0.5, 1.5]), np.array([0.7, 1.2]), np.array([-0.3, 0.4])):
        value, grad = vg(b)
        xs = np.linalg.solve(A_SPD, b)
        np.testing.assert_allclose(value, np.sum(xs ** 2), rtol=1e-6)
        np.testing.assert_allclose(grad, 2 * np.linalg.solve(A_SPD.T, xs), rtol=1e-5, atol=1e-7)
    assert vg.traces == 1


def test_argmin_of_a_logistic_regression_fit_with_respect_to_its_penalty():
    def f(t):
        res = so.minimize(logreg_objective, np.zeros(2), args=(t[0],), method="L-BFGS-B",
                          options={"gtol": 1e-12, "ftol": 1e-15})
        return np.sum(res.x * np.array([1.0, 2.0]))

    vg = irad.value_and_grad(f)
    for lam in (0.7, 0.3, 1.5):
        value, grad = vg(np.array([lam]))
        # the implicit-function derivative at the tight solution, dw/dlam = -H^-1 (2 w): a difference
        # quotient of two solves carries their stopping error over 2e (it was 1.2e-4 off on one machine)
        w = logreg_argmin_tight(lam)
        sig = 1.0 / (1.0 + np.exp(-XD @ w))
        hess = XD.T @ (XD * (sig * (1.0 - sig))[:, None]) + 2.0 * lam * np.eye(2)
        want = -np.linalg.solve(hess, 2.0 * w) @ np.array([1.0, 2.0])
        np.testing.assert_allclose(grad[0], want, rtol=1e-4)
    assert vg.traces == 1


def test_the_minimum_value_follows_the_envelope_theorem():
    def f(b):
        return so.minimize(lambda x: 0.5 * x @ A_SPD @ x - b @ x, np.zeros(2), method="BFGS",
                           options={"gtol": 1e-12}).fun

    vg = irad.value_and_grad(f)
    for b in (np.array([0.5, 1.5]), np.array([0.7, 1.2])):
        value, grad = vg(b)
        np.testing.assert_allclose(value, -0.5 * b @ np.linalg.solve(A_SPD, b), rtol=1e-8)
        np.testing.assert_allclose(grad, -np.linalg.solve(A_SPD, b), rtol=1e-6)


def box_argmin(b, lo, hi):
    """The reference: the quadratic's minimiser in the box, by the exact gradient, to tight tolerance."""
    return so.minimize(lambda x: 0.5 * x @ A_SPD @ x - b @ x, np.zeros(2), jac=lambda x: A_SPD @ x - b,
                       method="L-BFGS-B", bounds=list(zip(lo, hi)), options={"gtol": 1e-14, "ftol": 1e-16}).x


BOX_OPTIONS = {"L-BFGS-B": {"gtol": 1e-12, "ftol": 1e-15}, "TNC": {"gtol": 1e-12, "ftol": 1e-15, "xtol": 1e-14},
               "SLSQP": {"ftol": 1e-15}, "Powell": {"xtol": 1e-12, "ftol": 1e-14},
               "Nelder-Mead": {"xatol": 1e-12, "fatol": 1e-14, "maxiter": 5000}}


@pytest.mark.parametrize("method", sorted(BOX_OPTIONS))
@pytest.mark.parametrize("as_object", [False, True], ids=["pairs", "Bounds"])
def test_argmin_in_a_box_holds_the_active_coordinates_and_retraces_when_they_change(method, as_object):
    lo, hi = np.array([-1.0, -np.inf]), np.array([1.0, 1.0])
    bounds = so.Bounds(lo, hi) if as_object else [(-1.0, 1.0), (None, 1.0)]

    def f(b):
        res = so.minimize(lambda x: 0.5 * x @ A_SPD @ x - b @ x, np.zeros(2), method=method, bounds=bounds,
                          options=BOX_OPTIONS[method])
        return np.sum(res.x * np.array([1.0, 2.0]))

    def reference(b):
        return np.sum(box_argmin(b, lo, hi) * np.array([1.0, 2.0]))

    vg = irad.value_and_grad(f)
    # x₀ held at 1, then x₀ and x₁ free, then both held: three active sets, three programs
    for b, traces in ((np.array([5.0, 1.0]), 1), (np.array([4.0, 1.2]), 1), (np.array([0.5, 0.4]), 2),
                      (np.array([0.3, -0.2]), 2), (np.array([6.0, 4.0]), 3), (np.array([5.5, 3.0]), 3)):
        value, grad = vg(b)
        np.testing.assert_allclose(value, reference(b), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(grad, fd(reference, b), rtol=1e-5, atol=1e-7)
        assert vg.traces == traces


@pytest.mark.parametrize("kwargs,named", [
    ({"method": "SLSQP", "constraints": [{"type": "ineq", "fun": lambda x: 1.0 - x[0] - x[1]}]}, "constraints"),
    ({"method": "trust-constr", "bounds": [(-1.0, 1.0), (-1.0, 1.0)]}, "trust-constr"),
    ({"method": "L-BFGS-B", "callback": lambda xk: None}, "callback"),
])
def test_minimize_options_the_rule_does_not_cover_are_refused_over_traced_values(kwargs, named):
    def f(b):
        res = so.minimize(lambda x: 0.5 * x @ A_SPD @ x - b @ x, np.zeros(2), **kwargs)
        return np.sum(res.x)

    with pytest.raises(NoRuleError, match=named):
        irad.grad(f)(np.array([0.5, 1.5]))


@pytest.mark.parametrize("kwargs", [{"method": "trust-constr", "bounds": [(-1.0, 1.0), (-1.0, 1.0)]},
                                    {"method": "SLSQP", "constraints": [{"type": "ineq", "fun": lambda z: 1.0 - z[0]}]}])
def test_any_options_are_fine_when_the_objective_reads_only_constants(kwargs):
    def g(x):
        res = so.minimize(lambda z: np.sum((z - 0.5) ** 2), np.zeros(2), **kwargs)
        return np.sum(res.x) * np.sum(x ** 2)

    scale = np.sum(so.minimize(lambda z: np.sum((z - 0.5) ** 2), np.zeros(2), **kwargs).x)  # ≈ 1, a constant
    vg = irad.value_and_grad(g)
    for x in (np.array([1.0, 2.0]), np.array([0.5, -1.0]), np.array([0.1, 0.3])):
        value, grad = vg(x)
        np.testing.assert_allclose(grad, 2 * x * scale, rtol=1e-9)
    assert vg.traces == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["brentq_cube_root", "newton_secant", "newton_array_start", "root_scalar_brentq"])
def test_solver_gradients_keep_the_argument_dtype(name, dtype):
    f = CASES[name]
    vg = irad.value_and_grad(f)
    for w in (np.array([0.5, 1.5], dtype=dtype), np.array([0.7, 1.2], dtype=dtype)):
        value, grad = vg(w)
        assert grad.dtype == dtype
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-5 if dtype is np.float64 else 1e-4, atol=1e-6)
    assert vg.traces == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_argmin_gradient_keeps_the_argument_dtype(dtype):
    def f(w):  # x* solves 2(x - w) + 4x³ = 0, so dx*/dw = 2 / (2 + 12 x*²)
        return np.sum(so.minimize(lambda x: np.sum((x - w) ** 2) + np.sum(x ** 4), np.zeros(2), method="BFGS",
                                  options={"gtol": 1e-10}).x)

    vg = irad.value_and_grad(f)
    for w in (np.array([0.9, 1.1], dtype=dtype), np.array([-0.4, 2.0], dtype=dtype)):
        value, grad = vg(w)
        xs = np.array([so.brentq(lambda x: 2 * (x - c) + 4 * x ** 3, -5.0, 5.0) for c in w.astype(np.float64)])
        assert grad.dtype == dtype
        np.testing.assert_allclose(grad, 2 / (2 + 12 * xs ** 2), rtol=1e-5)
    assert vg.traces == 1


def _kept(solve, where):
    def f(w):
        seen, last = {}, [None]

        def res(t, *rest):
            v = w[0] * w[0]
            seen["v"], last[0] = v, v
            return t ** 3 - w[0] + 0.0 * v
        r = solve(res, w)
        return np.sum(r) + (seen["v"] if where == "dict" else last[0])
    return f


@pytest.mark.parametrize("where", ["dict", "list"])
@pytest.mark.parametrize("solve", [
    lambda g, w: so.brentq(g, 0.0, 5.0),
    lambda g, w: so.newton(g, 1.0),
    lambda g, w: so.fsolve(g, np.ones(1)),
], ids=["brentq", "newton", "fsolve"])
def test_a_residual_that_keeps_what_it_computes_is_refused(solve, where):
    # (minimize is not here: its result's `fun` traces the objective again, in this trace, at the
    # argmin, so what the objective keeps is that call's, as plain Python's last call is near it)
    with pytest.raises(irad.IradError, match="keeps a value it computed, which is used after the call"):
        irad.value_and_grad(_kept(solve, where))(np.array([8.0]))


def test_a_residual_that_updates_an_array_in_place_is_refused():
    def f(w):
        buf = np.zeros(2) + w

        def res(t):
            buf[1] = t
            return t ** 3 - w[0]
        return so.brentq(res, 0.0, 5.0) + buf[1]

    with pytest.raises(irad.IradError, match="in place"):
        irad.value_and_grad(f)(np.array([8.0]))


# ---- solves that do not converge, what else a result holds, the user's derivatives -------------

@pytest.mark.parametrize("f", [
    lambda w: np.sum(so.minimize(lambda x: np.sum((x - w) ** 2) + np.sum(x ** 4), np.zeros(2), method="BFGS",
                                 options={"maxiter": 2}).x),
    lambda w: np.sum(so.minimize(lambda x: np.sum((x - w) ** 2) + np.sum(x ** 4), np.zeros(2), method="Nelder-Mead",
                                 options={"maxiter": 3}).x),
    lambda w: np.sum(so.fsolve(lambda x: x ** 3 + x - w, np.zeros(2), maxfev=4)),
    lambda w: np.sum(so.root(lambda x: x ** 3 + x - w, np.zeros(2), options={"maxfev": 4}).x),
    lambda w: so.newton(lambda t: t ** 3 - w[0], 5.0, maxiter=2, disp=False),
    lambda w: so.brentq(lambda t: t ** 3 - w[0], 0.0, 5.0, maxiter=2, disp=False),
], ids=["minimize_bfgs", "minimize_nelder_mead", "fsolve", "root", "newton", "brentq"])
def test_a_solve_that_does_not_converge_is_an_error(f):
    with pytest.raises(NoRuleError, match="did not converge"):
        irad.value_and_grad(f)(np.array([2.0, 3.0]))


def test_result_fields_that_would_be_the_first_calls_are_refused():
    def f(b):
        r = so.minimize(lambda x: 0.5 * x @ A_SPD @ x - b @ x, np.zeros(2), method="BFGS", options={"gtol": 1e-12})
        assert isinstance(r.success, bool) and r.message
        return np.sum(r.x) + r.fun + r["fun"]

    vg = irad.value_and_grad(f)
    for b in (np.array([0.5, 1.5]), np.array([0.7, 1.2])):
        xs = np.linalg.solve(A_SPD, b)
        value, grad = vg(b)
        np.testing.assert_allclose(value, np.sum(xs) - b @ xs, rtol=1e-6)
        np.testing.assert_allclose(grad, np.linalg.solve(A_SPD, np.ones(2)) - 2 * xs, rtol=1e-5)
    for field in ("hess_inv", "jac", "nit"):
        def g(b, field=field):
            r = so.minimize(lambda x: 0.5 * x @ A_SPD @ x - b @ x, np.zeros(2), method="BFGS")
            return np.sum(r.x) + np.sum(getattr(r, field))
        with pytest.raises(irad.UnsupportedError, match=field):
            irad.grad(g)(np.array([0.5, 1.5]))


def test_roots_fun_is_the_residual_at_the_traced_root():
    def f(w):
        r = so.root(lambda x: x ** 3 + x - w, np.ones(2), tol=1e-13)
        return np.sum(r.x) + 1e3 * np.sum(r.fun)

    vg = irad.value_and_grad(f)
    for w in (np.array([2.0, 3.0]), np.array([1.0, 0.5])):
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("f", [
    lambda w: np.sum(so.fsolve(lambda x: x ** 3 + x - w, np.ones(2), fprime=lambda x: np.diag(3 * x ** 2 + 1),
                               xtol=1e-13)),
    lambda w: np.sum(so.root(lambda x: x ** 3 + x - w, np.ones(2), jac=lambda x: np.diag(3 * x ** 2 + 1),
                             tol=1e-13).x),
    lambda w: np.sum(so.minimize(lambda x: np.sum((x - w) ** 2) + np.sum(x ** 4), np.zeros(2), method="Newton-CG",
                                 jac=lambda x: 2 * (x - w) + 4 * x ** 3,
                                 hess=lambda x: np.diag(2 + 12 * x ** 2), options={"xtol": 1e-12}).x),
    lambda w: np.sum(so.minimize(lambda x: np.sum((x - w) ** 2) + np.sum(x ** 4), np.zeros(2), method="trust-exact",
                                 jac=lambda x: 2 * (x - w) + 4 * x ** 3,
                                 hess=lambda x: np.diag(2 + 12 * x ** 2), options={"gtol": 1e-12}).x),
    lambda w: np.sum(so.minimize(lambda x: np.sum((x - w) ** 2) + np.sum(x ** 4), np.zeros(2), method="trust-ncg",
                                 jac=lambda x: 2 * (x - w) + 4 * x ** 3,
                                 hessp=lambda x, p: (2 + 12 * x ** 2) * p, options={"gtol": 1e-12}).x),
], ids=["fsolve_fprime", "root_jac", "newton_cg_hess", "trust_exact_hess", "trust_ncg_hessp"])
def test_the_users_derivatives_are_irads_at_run_time(f):
    """The user's Jacobian or Hessian reads the traced values as they were when traced: at run time
    the solver gets irad's, so later calls solve the problem they are asked (x³ + x = w: exact)."""
    vg = irad.value_and_grad(f)
    for w in (np.array([2.0, 3.0]), np.array([0.5, -1.0]), np.array([4.0, 1.5])):
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-8)
        if "minimize" in f.__code__.co_names:  # x* of (x - w)² + x⁴: 2(x - w) + 4x³ = 0
            xs = np.array([so.brentq(lambda x: 2 * (x - c) + 4 * x ** 3, -5.0, 5.0) for c in w])
            np.testing.assert_allclose(grad, 2 / (2 + 12 * xs ** 2), rtol=1e-6)
        else:
            xs = np.array([so.brentq(lambda x: x ** 3 + x - c, -5.0, 5.0) for c in w])
            np.testing.assert_allclose(grad, 1 / (3 * xs ** 2 + 1), rtol=1e-6)
    assert vg.traces == 1


def test_fsolve_full_output_over_traced_values_is_refused_by_name():
    with pytest.raises(NoRuleError, match="fsolve with full_output=True"):
        irad.grad(lambda w: np.sum(so.fsolve(lambda x: x ** 3 - w, np.ones(2), full_output=True)[0]))(np.ones(2))
