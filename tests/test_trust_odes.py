"""ODEs inside a traced function: the adjoint rules of odeint and solve_ivp (irad/odes.py).

Every gradient is checked against central finite differences in float64 of the same function
(solved with tight tolerances, so that the differences are meaningful), on the second and later
calls of one compiled object, which compiles once; where the exact solution is known (a linear
system: ``expm``) the gradient is checked against it too."""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.errors import NoRuleError, UnsupportedError
from irad.testing import numerical_vjp

si = pytest.importorskip("scipy.integrate")
expm = pytest.importorskip("scipy.linalg").expm

TOL = {"rtol": 1e-10, "atol": 1e-10}
TS = np.linspace(0.0, 2.0, 5)
WEIGHTS = np.arange(1.0, 6.0)[:, None]  # a loss that reads every output time
W_WORLD = np.array([0.4, 1.5])
PARAMS = (np.array([1.0, 0.0, 0.3, 2.0]), np.array([0.5, 0.2, 0.1, 1.0]), np.array([0.7, -0.3, 0.5, 3.0]))


def fd(f, x):
    """Central finite differences of scalar ``f`` at float64 ``x`` (``irad.testing.numerical_vjp``)."""
    return numerical_vjp(f, (np.asarray(x, dtype=np.float64),), 1.0)[0]


def oscillator(t, y, c, k):
    """``y'' + c y' + k y = 0`` as a first-order system."""
    return np.array([y[1], -k * y[0] - c * y[1]])


def exact_loss(w):
    """The damped oscillator's loss from its exact solution ``expm(A t) y0``."""
    a = np.array([[0.0, 1.0], [-w[3], -w[2]]])
    ys = np.stack([expm(a * t) @ w[:2] for t in TS])
    return np.sum(ys ** 2 * WEIGHTS)


def odeint_loss(passing):
    if passing == "args":
        return lambda w: np.sum(si.odeint(lambda y, t, c, k: oscillator(t, y, c, k), w[:2], TS,
                                          args=(w[2], w[3]), **TOL) ** 2 * WEIGHTS)
    return lambda w: np.sum(si.odeint(lambda y, t: oscillator(t, y, w[2], w[3]), w[:2], TS, **TOL) ** 2 * WEIGHTS)


def ivp_loss(method, passing):
    if passing == "args":
        return lambda w: np.sum(si.solve_ivp(oscillator, (0.0, 2.0), w[:2], method=method, t_eval=TS,
                                             args=(w[2], w[3]), **TOL).y.T ** 2 * WEIGHTS)
    return lambda w: np.sum(si.solve_ivp(lambda t, y: oscillator(t, y, w[2], w[3]), (0.0, 2.0), w[:2],
                                         method=method, t_eval=TS, **TOL).y.T ** 2 * WEIGHTS)


SOLVERS = ["odeint", "RK45", "DOP853", "LSODA", "BDF", "Radau"]


@pytest.mark.parametrize("passing", ["closure", "args"])
@pytest.mark.parametrize("solver", SOLVERS)
def test_damped_oscillator_gradient_wrt_initial_state_and_coefficients(solver, passing):
    f = odeint_loss(passing) if solver == "odeint" else ivp_loss(solver, passing)
    vg = irad.value_and_grad(f)
    vg(PARAMS[0])  # the call that traces
    for w in PARAMS + (PARAMS[0],):
        value, grad = vg(w)
        np.testing.assert_allclose(value, f(w), rtol=1e-12)
        np.testing.assert_allclose(grad, fd(f, w), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grad, fd(exact_loss, w), rtol=1e-6, atol=1e-7)
    assert vg.traces == 1


def decay_exact(t0, times, y0, a):
    """``y' = -a t y``: ``y(t) = y0 exp(-a (t² - t0²) / 2)``."""
    return y0[None, :] * np.exp(-a * (times[:, None] ** 2 - t0 ** 2) / 2)


TIME_CASES = {
    "odeint_times": lambda t: np.sum(si.odeint(lambda y, s: -0.5 * s * y, np.array([1.0, 2.0]), t, **TOL) ** 2),
    "ivp_t_eval_and_span": lambda t: np.sum(si.solve_ivp(lambda s, y: -0.5 * s * y, (t[0], t[-1]),
                                                         np.array([1.0, 2.0]), t_eval=t, **TOL).y ** 2),
    "ivp_start_before_t_eval": lambda t: np.sum(si.solve_ivp(lambda s, y: -0.5 * s * y, (t[0], 3.0),
                                                             np.array([1.0, 2.0]), t_eval=t[1:], method="DOP853",
                                                             **TOL).y ** 2),
    "odeint_decreasing_times": lambda t: np.sum(si.odeint(lambda y, s: -0.5 * s * y, np.array([1.0, 2.0]),
                                                          t[::-1], **TOL) ** 2),
}
TIME_EXACT = {
    "odeint_times": lambda t: np.sum(decay_exact(t[0], t, np.array([1.0, 2.0]), 0.5) ** 2),
    "ivp_t_eval_and_span": lambda t: np.sum(decay_exact(t[0], t, np.array([1.0, 2.0]), 0.5) ** 2),
    "ivp_start_before_t_eval": lambda t: np.sum(decay_exact(t[0], t[1:], np.array([1.0, 2.0]), 0.5) ** 2),
    "odeint_decreasing_times": lambda t: np.sum(decay_exact(t[-1], t, np.array([1.0, 2.0]), 0.5) ** 2),
}


@pytest.mark.parametrize("name", sorted(TIME_CASES))
def test_gradient_wrt_the_output_times(name):
    f = TIME_CASES[name]
    vg = irad.value_and_grad(f)
    vg(np.array([0.1, 0.5, 1.2]))
    for t in (np.array([0.1, 0.5, 1.2]), np.array([0.2, 0.7, 1.0]), np.array([0.0, 1.5, 2.5])):
        value, grad = vg(t)
        np.testing.assert_allclose(value, f(t), rtol=1e-12)
        # (odeint's step choice depends on its start time: finite differences of it are noisy at 1e-5)
        np.testing.assert_allclose(grad, fd(f, t), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(grad, fd(TIME_EXACT[name], t), rtol=1e-6, atol=1e-8)
    assert vg.traces == 1


def world_field_loss(p):
    return np.sum(si.odeint(lambda y, t: -W_WORLD * p[0] * y + np.sin(t), np.array([1.0, 2.0]), TS, **TOL) ** 2)


CASES = {
    "closure_world_array": world_field_loss,
    "tfirst": lambda p: np.sum(si.odeint(lambda t, y: -p * y + np.sin(t), np.array([1.0, 2.0]), TS, tfirst=True,
                                         **TOL)),
    "scalar_ode_shape_1": lambda p: si.odeint(lambda y, t: -p[0] * y * np.cos(t), np.array([1.5]), TS, **TOL)[-1, 0],
    "scalar_ode_ivp": lambda p: si.solve_ivp(lambda t, y: -p[0] * y ** 3, (0.0, 2.0), p[1:], t_eval=[2.0],
                                             **TOL).y[0, 0],
    "float_initial_state": lambda p: np.sum(si.odeint(lambda y, t: -y ** 2, p[0] * 1.0, TS, **TOL)),
    "field_returns_a_list": lambda p: np.sum(si.odeint(lambda y, t: [y[1], -p[0] * y[0]], [1.0, 0.0], TS, **TOL)),
    "field_of_constants_from_a_traced_start": lambda p: np.sum(si.odeint(lambda y, t: np.ones(2), p, TS) ** 2),
    "float_in_args": lambda p: np.sum(si.odeint(lambda y, t, k: -k * y, [1.0, 0.5], TS, args=(p[0] * 1.0,), **TOL)),
    "odeint_dfun": lambda p: np.sum(si.odeint(lambda y, t: -p * y, np.array([1.0, 2.0]), TS,
                                              Dfun=lambda y, t: np.diag(-p), **TOL)),
    "ivp_jac_radau": lambda p: np.sum(si.solve_ivp(lambda t, y: -p * y, (0.0, 2.0), np.array([1.0, 2.0]),
                                                   t_eval=TS, jac=lambda t, y: np.diag(-p), method="Radau",
                                                   **TOL).y),
    "ivp_vectorized_bdf": lambda p: np.sum(si.solve_ivp(lambda t, y: -p[:, None] * y, (0.0, 2.0),
                                                        np.array([1.0, 2.0]), t_eval=TS, vectorized=True,
                                                        method="BDF", **TOL).y),
    "branch_on_a_parameter": lambda p: np.sum(si.odeint(lambda y, t: -p * y if p[0] > 0 else p * y,
                                                        np.array([1.0, 2.0]), TS, **TOL)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_of_what_the_vector_field_reads(name):
    f = CASES[name]
    vg = irad.value_and_grad(f)
    vg(np.array([0.5, 0.2]))
    for p in (np.array([0.5, 0.2]), np.array([0.7, 0.1]), np.array([0.3, 0.6])):
        value, grad = vg(p)
        np.testing.assert_allclose(value, f(p), rtol=1e-9)
        np.testing.assert_allclose(grad, fd(f, p), rtol=1e-5, atol=1e-6)
    assert vg.traces == 1


def test_np_where_on_the_time_is_the_exact_derivative():
    # y' = ∓p y switching at t = 0.5: y(t) = y0 exp(p (t - 1)) for t ≥ 0.5 (the finite differences of
    # the solver are noisy across the switch; the adjoint of the traced field is not)
    def f(p):
        return np.sum(si.odeint(lambda y, t: np.where(t < 0.5, -p * y, p * y), np.array([1.0, 2.0]), TS, **TOL))

    p = np.array([0.5, 0.2])
    want = np.array([1.0, 2.0]) * sum((t - 1.0 if t >= 0.5 else -t) * np.exp(p * (t - 1.0 if t >= 0.5 else -t))
                                      for t in TS)
    np.testing.assert_allclose(irad.grad(f)(p), want, rtol=1e-6)


def test_a_branch_on_a_parameter_that_changes_traces_again():
    f = CASES["branch_on_a_parameter"]
    vg = irad.value_and_grad(f)
    for p in (np.array([0.5, 0.2]), np.array([-0.5, 0.2]), np.array([0.4, 0.3]), np.array([-0.2, 0.1])):
        value, grad = vg(p)
        np.testing.assert_allclose(value, f(p), rtol=1e-9)
        np.testing.assert_allclose(grad, fd(f, p), rtol=1e-5, atol=1e-6)
    assert vg.traces == 2


def test_a_world_array_the_field_reads_is_live():
    vg = irad.value_and_grad(world_field_loss)
    p = np.array([0.5])
    vg(p)
    try:
        W_WORLD[0] = 2.0
        value, grad = vg(p)
        np.testing.assert_allclose(value, world_field_loss(p), rtol=1e-12)
        np.testing.assert_allclose(grad, fd(world_field_loss, p), rtol=1e-5)
    finally:
        W_WORLD[0] = 0.4
    assert vg.traces == 1


def test_a_branch_on_the_time_is_an_error_not_a_wrong_gradient():
    def f(p):
        return np.sum(si.odeint(lambda y, t: -p * y if t < 0.5 else p * y, np.array([1.0, 2.0]), TS))

    with pytest.raises(UnsupportedError, match=r"odeint: the vector field takes a branch that depends on the state "
                                               r"or the time[\s\S]*np\.where"):
        irad.value_and_grad(f)(np.array([0.5, 0.2]))

    def g(p):  # a branch on the state, crossed during the integration
        return si.solve_ivp(lambda t, y: -p if y[0] > 0.5 else -2 * p, (0.0, 2.0), np.array([1.0]),
                            t_eval=[2.0]).y[0, 0]

    with pytest.raises(UnsupportedError, match="solve_ivp: the vector field takes a branch"):
        irad.grad(g)(np.array([0.5]))


def test_full_output_gives_the_infodict_as_data():
    def f(p):
        y, info = si.odeint(lambda y, t: -p * y, np.array([1.0, 2.0]), TS, full_output=True, **TOL)
        assert isinstance(info, dict) and len(info["nst"]) == len(TS) - 1
        return np.sum(y)

    vg = irad.value_and_grad(f)
    for p in (np.array([0.5, 0.2]), np.array([0.7, 0.1]), np.array([0.3, 0.6])):
        value, grad = vg(p)
        np.testing.assert_allclose(grad, [-np.sum(TS * np.exp(-p[0] * TS)), -2 * np.sum(TS * np.exp(-p[1] * TS))],
                                   rtol=1e-7)
    assert vg.traces == 1


def test_solve_ivp_returns_an_ode_result_with_the_traced_solution():
    def f(p):
        res = si.solve_ivp(lambda t, y: -p * y, (0.0, 2.0), np.array([1.0, 2.0]), t_eval=TS, **TOL)
        assert res.success and res.y.shape == (2, len(TS))
        np.testing.assert_array_equal(res.t, TS)
        return np.sum(res.y[:, -1])

    vg = irad.value_and_grad(f)
    for p in (np.array([0.5, 0.2]), np.array([0.7, 0.1])):
        value, grad = vg(p)
        np.testing.assert_allclose(value, np.exp(-2 * p[0]) + 2 * np.exp(-2 * p[1]), rtol=1e-8)
        np.testing.assert_allclose(grad, [-2 * np.exp(-2 * p[0]), -4 * np.exp(-2 * p[1])], rtol=1e-7)
    assert vg.traces == 1


def test_a_call_of_constants_is_a_constant():
    def f(x):
        return np.sum(si.odeint(lambda y, t: -0.5 * y, np.array([1.0, 2.0]), TS)[-1]) * np.sum(x ** 2)

    def g(x):  # events and LSODA without t_eval are fine when nothing traced flows in
        res = si.solve_ivp(lambda t, y: -0.5 * y, (0.0, 2.0), np.array([1.0, 2.0]), method="LSODA",
                           events=lambda t, y: y[0] - 0.8)
        return res.t_events[0][0] * np.sum(x ** 2)

    for fn in (f, g):
        vg = irad.value_and_grad(fn)
        for x in (np.array([1.0, 2.0]), np.array([0.5, -1.0])):
            value, grad = vg(x)
            c = fn(np.array([1.0]))  # SciPy's own constant
            np.testing.assert_allclose(value, c * np.sum(x ** 2), rtol=1e-12)
            np.testing.assert_allclose(grad, 2 * c * x, rtol=1e-12)


@pytest.mark.parametrize("method", ["RK45", "RK23", "DOP853"])
def test_without_t_eval_the_runge_kutta_code_is_traced_through(method):
    # the output grid is the solver's own (its length depends on the parameters): irad traces SciPy's
    # Python Runge-Kutta code, whose guards retrace when the steps change; the gradient is the exact
    # derivative of the computed solution
    def f(p):
        res = si.solve_ivp(lambda t, y: oscillator(t, y, p[0], p[1]), (0.0, 2.0), np.array([1.0, 0.0]),
                           method=method, rtol=1e-5, atol=1e-5)
        return np.sum(res.y[:, -1] ** 2)

    vg = irad.value_and_grad(f)
    vg(np.array([0.3, 2.0]))
    for p in (np.array([0.3, 2.0]), np.array([0.3001, 2.0]), np.array([0.5, 1.0]), np.array([0.3, 2.0])):
        value, grad = vg(p)
        np.testing.assert_allclose(value, f(p), rtol=1e-12)
        # NOTE: a step of 1e-5, not fd's 1e-6: the adaptive solver's roundoff makes a 1e-6 difference
        # quotient noisy at 1e-6 (DOP853 at p = (0.3, 2): 1.6e-6 off at 1e-6, 5e-8 at 1e-5, 6e-9 at 1e-4)
        want = numerical_vjp(f, (np.asarray(p, dtype=np.float64),), 1.0, eps=1e-5)[0]
        np.testing.assert_allclose(grad, want, rtol=1e-6, atol=1e-8)
    assert vg.traces <= 3  # the same steps reuse the program; other steps trace again


@pytest.mark.parametrize("method", ["LSODA", "BDF", "Radau"])
def test_without_t_eval_the_implicit_methods_are_refused(method):
    def f(p):
        return np.sum(si.solve_ivp(lambda t, y: -p * y, (0.0, 1.0), np.array([1.0, 2.0]), method=method).y[:, -1])

    with pytest.raises(NoRuleError, match=rf"solve_ivp\(method='{method}'\) without t_eval[\s\S]*pass t_eval"):
        irad.grad(f)(np.array([0.5, 0.2]))


@pytest.mark.parametrize("option", ["events", "dense_output"])
def test_events_and_dense_output_are_refused(option):
    extra = {"events": lambda t, y: y[0] - 0.8} if option == "events" else {"dense_output": True}

    def f(p):
        return np.sum(si.solve_ivp(lambda t, y: -p * y, (0.0, 1.0), np.array([1.0, 2.0]), t_eval=[0.5, 1.0],
                                   **extra).y)

    with pytest.raises(NoRuleError, match=rf"solve_ivp with {option}"):
        irad.grad(f)(np.array([0.5, 0.2]))


def test_a_solver_option_computed_from_traced_values_is_refused():
    def f(p):
        return np.sum(si.odeint(lambda y, t: -p * y, np.array([1.0, 2.0]), TS, atol=p * 1e-8))

    with pytest.raises(NoRuleError, match=r"odeint: the option atol="):
        irad.grad(f)(np.array([0.5, 0.2]))


def test_second_order_through_the_adjoint():
    def h_odeint(k):
        return si.odeint(lambda y, t: -k * y, np.array([1.0]), [0.0, 1.0], **TOL)[1, 0]

    def h_ivp(k):
        return si.solve_ivp(lambda t, y: -k * y, (0.0, 1.0), np.array([1.0]), t_eval=[1.0], method="Radau",
                            **TOL).y[0, 0]

    for h in (h_odeint, h_ivp):
        d2 = irad.grad(irad.grad(h))
        for k in (0.7, 1.3):
            np.testing.assert_allclose(d2(k), np.exp(-k), rtol=1e-6)


@pytest.mark.parametrize("solver", ["odeint", "DOP853"])
def test_hessian_vector_products_through_the_adjoint(solver):
    f = odeint_loss("closure") if solver == "odeint" else ivp_loss(solver, "closure")
    g = irad.grad(f)
    v = np.array([0.3, -0.2, 0.5, 0.1])
    hv = irad.grad(lambda w: np.dot(g(w), v))
    hv(PARAMS[0])
    for w in PARAMS[:2]:
        np.testing.assert_allclose(hv(w), fd(lambda u: np.dot(g(u), v), w), rtol=1e-5, atol=1e-6)
    assert hv.traces == 1


def test_the_graph_has_one_op_for_the_solve():
    f = odeint_loss("args")
    graph = str(irad.trace(f, PARAMS[0]))
    # (the field's ops, np.array([y[1], -k y[0] - c y[1]]) among them, are a program of their own)
    assert graph.count("irad.odes.odeint_solution(<odeint problem>") == 1 and "numpy.array" not in graph


JUMPS = {
    "on_the_state": lambda p: si.odeint(lambda y, t: np.where(y > 0.5, -p, -2 * p), np.array([1.0]),
                                        [0.0, 2.0])[-1, 0],
    "on_the_time_at_a_traced_point": lambda p: si.solve_ivp(lambda t, y: np.where(t < p, -y, -2 * y), (0.0, 2.0),
                                                            np.array([1.0]), t_eval=[2.0]).y[0, 0],
    "floor_of_the_state": lambda p: si.odeint(lambda y, t: -p * np.floor(4 * y), np.array([1.0]), [0.0, 2.0])[-1, 0],
}


@pytest.mark.parametrize("name", sorted(JUMPS))
def test_a_field_that_jumps_where_the_solution_crosses_is_refused(name):
    # y' = -p while y > 0.5, then -2p: y(2) = 1.5 - 4p, while the adjoint without the crossing's
    # term would give -4 + 0.5/p
    with pytest.raises(NoRuleError, match=r"(odeint|solve_ivp): the vector field jumps where"):
        irad.grad(JUMPS[name])(0.7)


@pytest.mark.parametrize("keep", ["list", "dict", "cell"])
def test_a_field_that_keeps_what_it_computes_is_refused(keep):
    def f(p):
        seen, box = [], {}
        last = None

        def field(y, t):
            nonlocal last
            v = -p * y
            seen.append(v)
            box["v"] = v
            last = v
            return v
        y = si.odeint(field, np.array([1.0]), TS)
        return np.sum(y) + np.sum({"list": seen[-1], "dict": box["v"], "cell": last}[keep])

    with pytest.raises(UnsupportedError, match="odeint: the vector field keeps a value it computed, which is used"):
        irad.grad(f)(np.array([0.5]))
