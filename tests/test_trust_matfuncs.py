"""Trust II (part): scipy.linalg's matrix functions (expm, expm_frechet, logm, sqrtm) have real rules.

Before, ``np.sum(scipy.linalg.expm(A))`` was traced through SciPy's Python code: its C Pade
kernels write into a traced work array (a ``MutationError`` now, a wrong gradient before), and a
triangular input took a path whose derivative was wrong (at A = [[0, 0], [0, 0.1]] the gradient
with respect to the zero off-diagonal entry came out 0 instead of about 0.21).  The rules use
the adjoint of the Frechet derivative, Abar = conj(L_f(A^T, conj(Ybar))) (see
``irad/rules/scipy_rules.py``).  Every gradient here is compared with central finite differences,
on the second and later calls of one compiled program as well as the first.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import irad
from irad.testing import check_grads
from irad.testing import check_rule, numerical_vjp

sla = pytest.importorskip("scipy.linalg")
scipy_rules = pytest.importorskip("irad.rules.scipy_rules")

rng = np.random.default_rng(20250113)


def R(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


def C(*shape: int) -> np.ndarray:
    return R(*shape) + 1j * R(*shape)


def spd(n: int, batch: tuple[int, ...] = ()) -> np.ndarray:
    a = R(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def sym(n: int) -> np.ndarray:
    a = R(n, n)
    return a + a.T


def central(f, a: np.ndarray) -> np.ndarray:
    """d f / d a[i] by central differences, entry by entry (the reference gradient:
    ``irad.testing.numerical_vjp``)."""
    return numerical_vjp(f, (a,), 1.0)[0]


#: A = [[0, 0], [0, 0.1]]: SciPy's triangular path; d/dA[0, 1] of sum(expm(A)) is (e^0.1 - 1) / 0.1
ZERO_OFF = np.array([[0.0, 0.0], [0.0, 0.1]])


def test_the_triangular_example_of_the_issue():
    vg = irad.value_and_grad(lambda a: np.sum(sla.expm(a)))
    for _ in range(3):
        value, grad = vg(ZERO_OFF)
        np.testing.assert_allclose(value, np.sum(sla.expm(ZERO_OFF)), rtol=1e-14)
        np.testing.assert_allclose(grad[0, 1], (np.exp(0.1) - 1) / 0.1, rtol=1e-10)  # 1.0517...
        np.testing.assert_allclose(grad[1, 0], (np.exp(0.1) - 1) / 0.1, rtol=1e-10)
        np.testing.assert_allclose(grad, central(lambda a: np.sum(sla.expm(a)), ZERO_OFF), atol=1e-8)
    assert irad.has_rule(sla.expm, ZERO_OFF)


# ---- value_and_grad of a weighted sum, on the second and later calls ---------------------------

EXPM_POINTS = {  # shape -> the points one compiled program is called at, in this order
    (2, 2): [ZERO_OFF, R(2, 2), np.triu(R(2, 2)), sym(2), ZERO_OFF, np.zeros((2, 2))],
    (3, 3): [R(3, 3), np.triu(R(3, 3)), np.tril(R(3, 3)), sym(3), np.diag(R(3)), 2 * R(3, 3)],
    (1, 1): [R(1, 1), R(1, 1)],
    (2, 3, 3): [R(2, 3, 3), np.triu(R(2, 3, 3))],
}


@pytest.mark.parametrize("shape", list(EXPM_POINTS), ids=str)
def test_expm_weighted_sum_matches_finite_differences_on_later_calls(shape):
    w = R(*shape)

    def f(a):
        return np.sum(sla.expm(a) * w)

    vg = irad.value_and_grad(f)
    for a in EXPM_POINTS[shape] * 2:           # every point again: all of them on later calls
        value, grad = vg(a)
        np.testing.assert_allclose(value, f(a), rtol=1e-12)
        np.testing.assert_allclose(grad, central(f, a), rtol=1e-6, atol=1e-7)


POSITIVE_POINTS = {  # positive eigenvalues: real logm and sqrtm
    (2, 2): [ZERO_OFF + np.eye(2), spd(2), np.triu(spd(2)), spd(2) + 0.3 * R(2, 2)],
    (3, 3): [spd(3), np.triu(spd(3)), np.diag([0.5, 1.0, 2.0]), spd(3) + 0.2 * R(3, 3)],
    (1, 1): [spd(1), spd(1)],
    (2, 3, 3): [spd(3, (2,)), spd(3, (2,))],
}


@pytest.mark.parametrize("fn", [sla.logm, sla.sqrtm], ids=["logm", "sqrtm"])
@pytest.mark.parametrize("shape", list(POSITIVE_POINTS), ids=str)
def test_logm_sqrtm_weighted_sums_match_finite_differences_on_later_calls(fn, shape):
    w = R(*shape)

    def f(a):
        return np.sum(fn(a) * w)

    vg = irad.value_and_grad(f)
    for a in POSITIVE_POINTS[shape] * 2:
        value, grad = vg(a)
        np.testing.assert_allclose(value, f(a), rtol=1e-12)
        np.testing.assert_allclose(grad, central(f, a), rtol=1e-6, atol=1e-7)


NEG = np.array([[-2.0, 1.0], [0.5, 1.0]])   # eigenvalues 1.16 and -2.16: complex logm and sqrtm


def _real_and_imag(fn, w, wi):
    def f(a):
        y = fn(a)
        return np.sum(np.real(y) * w) + np.sum(np.imag(y) * wi)
    return f


@pytest.mark.parametrize("fn", [sla.logm, sla.sqrtm], ids=["logm", "sqrtm"])
def test_a_program_compiled_at_a_real_result_is_right_at_a_complex_one(fn):
    """logm and sqrtm of a real matrix are complex when it has a negative eigenvalue: the type of
    the result depends on the values.  The rule's cotangent stays right (and real) when a
    program compiled where the result is real runs where it is complex, and the other way round."""
    w = R(2, 2)

    def f(a):
        return np.sum(np.real(fn(a)) * w)

    for points in ([spd(2), NEG, spd(2), NEG], [NEG, spd(2), NEG]):
        vg = irad.value_and_grad(f)
        for a in points:
            value, grad = vg(a)
            assert np.isrealobj(grad)
            np.testing.assert_allclose(value, f(a), rtol=1e-12)
            np.testing.assert_allclose(grad, central(f, a), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fn", [sla.logm, sla.sqrtm], ids=["logm", "sqrtm"])
def test_a_program_traced_at_a_complex_result_reads_the_imaginary_part(fn):
    f = _real_and_imag(fn, R(2, 2), R(2, 2))
    vg = irad.value_and_grad(f)
    for a in (NEG, NEG * 1.1):
        np.testing.assert_allclose(vg(a)[1], central(f, a), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fn", [sla.logm, sla.sqrtm], ids=["logm", "sqrtm"])
def test_a_program_traced_at_a_real_result_reads_the_imaginary_part_later(fn):
    """The result's dtype depends on the values: the program guards it and is traced again."""
    f = _real_and_imag(fn, R(2, 2), R(2, 2))
    vg = irad.value_and_grad(f)
    vg(spd(2))
    np.testing.assert_allclose(vg(NEG)[1], central(f, NEG), rtol=1e-6, atol=1e-7)


def test_expm_frechet_gradient_with_respect_to_a_and_e():
    w1, w2 = R(3, 3), R(3, 3)

    def f(a, e):
        ea, lae = sla.expm_frechet(a, e)
        return np.sum(ea * w1) + np.sum(lae * w2)

    g = irad.grad(f, argnums=(0, 1))
    for a, e in [(R(3, 3), R(3, 3)), (np.triu(R(3, 3)), np.eye(3)), (sym(3), R(3, 3))] * 2:
        ga, ge = g(a, e)
        np.testing.assert_allclose(ga, central(lambda x: f(x, e), a), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ge, central(lambda x: f(a, x), e), rtol=1e-6, atol=1e-7)


def test_complex_inputs():
    w = C(3, 3)
    for fn, a in [(sla.expm, C(3, 3)), (sla.logm, C(3, 3) + 4 * np.eye(3)), (sla.sqrtm, C(3, 3) + 4 * np.eye(3))]:
        def f(x, fn=fn):
            return np.real(np.sum(np.conj(w) * fn(x)))
        check_grads(f, a, order=1)
        check_grads(f, a, order=2, rtol=1e-4)


# ---- the rules themselves, orders 1 and 2 -------------------------------------------------------

RULE_CASES = [
    (sla.expm, (R(1, 1),), {}),
    (sla.expm, (R(2, 2),), {}),
    (sla.expm, (ZERO_OFF,), {}),
    (sla.expm, (R(3, 3),), {}),
    (sla.expm, (np.triu(R(3, 3)),), {}),
    (sla.expm, (sym(3),), {}),
    (sla.expm, (R(2, 3, 3),), {}),
    (sla.expm, (C(2, 2),), {}),
    (sla.expm, (0.7,), {}),
    (sla.expm_frechet, (R(1, 1), R(1, 1)), {}),
    (sla.expm_frechet, (R(2, 2), R(2, 2)), {}),
    (sla.expm_frechet, (R(3, 3), R(3, 3)), {"compute_expm": False}),
    (sla.expm_frechet, (np.triu(R(3, 3)), sym(3)), {}),
    (sla.expm_frechet, (R(2, 3, 3), R(2, 3, 3)), {}),
    (sla.expm_frechet, (C(2, 2), C(2, 2)), {}),
    (sla.logm, (spd(1),), {}),
    (sla.logm, (spd(2) + 0.3 * R(2, 2),), {}),
    (sla.logm, (spd(3),), {}),
    (sla.logm, (np.triu(spd(3)),), {}),
    (sla.logm, (spd(3, (2,)),), {}),
    (sla.logm, (NEG,), {}),
    (sla.logm, (np.diag([-2.0, -3.0, 1.0]) + 0.1 * R(3, 3),), {}),   # two negative eigenvalues
    (sla.logm, (C(3, 3) + 4 * np.eye(3),), {}),
    (sla.sqrtm, (spd(1),), {}),
    (sla.sqrtm, (spd(2) + 0.3 * R(2, 2),), {}),
    (sla.sqrtm, (np.triu(spd(3)),), {}),
    (sla.sqrtm, (spd(3, (2,)),), {}),
    (sla.sqrtm, (NEG,), {}),
    (sla.sqrtm, (C(3, 3) + 4 * np.eye(3),), {}),
    (sla.sqrtm, (4.0,), {}),
]


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("fn,args,kwargs", RULE_CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(RULE_CASES)])
def test_rule_orders_1_and_2(fn, args, kwargs, order):
    check_rule(fn, *args, order=order, rtol=1e-5 if order == 1 else 1e-4, atol=1e-7 if order == 1 else 1e-6,
               **kwargs)


@pytest.mark.parametrize("fn,a", [(sla.expm, R(3, 3)), (sla.expm, ZERO_OFF), (sla.logm, spd(3)),
                                  (sla.sqrtm, spd(3)), (sla.logm, NEG), (sla.sqrtm, NEG)],
                         ids=["expm", "expm-triangular", "logm", "sqrtm", "logm-negative", "sqrtm-negative"])
def test_whole_function_second_order(fn, a):
    w = R(*a.shape)

    def f(x):
        return np.sum(np.real(fn(x)) * w)

    check_grads(f, a, order=2, rtol=1e-4)


def test_batched_expm_without_batched_expm_frechet(monkeypatch):
    """SciPy < 1.15 has no batched expm_frechet: the pullback loops over the matrices."""
    monkeypatch.setattr(scipy_rules, "_FRECHET_BATCHES", False)
    check_rule(sla.expm, R(2, 3, 3))
    check_rule(sla.expm, R(3, 2, 2), order=2, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fn,a", [(sla.logm, spd(3)), (sla.sqrtm, spd(3)), (sla.logm, NEG), (sla.sqrtm, NEG)],
                         ids=["logm", "sqrtm", "logm-negative", "sqrtm-negative"])
def test_deprecated_disp_false(fn, a):
    """disp=False (deprecated in SciPy 1.16) returns (F, errest): F gets the gradient; errest,
    zero in exact arithmetic, none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if "disp" not in str(__import__("inspect").signature(fn)):
            pytest.skip("this SciPy has no disp argument")
        check_rule(fn, a, False)
        w = R(*a.shape)

        def f(x):
            return np.sum(np.real(fn(x, False)[0]) * w)

        vg = irad.value_and_grad(f)
        for x in (a, a + 0.1 * np.eye(3 if a.shape[0] == 3 else 2)):
            np.testing.assert_allclose(vg(x)[1], central(f, x), rtol=1e-6, atol=1e-7)


def test_the_logm_gradient_leaves_the_random_stream_alone():
    """SciPy's logm draws its 1-norm estimates from np.random's global state: the pullback seeds
    it for its own logm calls and restores it, so a gradient moves the user's random stream as
    the function alone does, and its bits do not depend on that stream."""
    from irad.rules import registry
    a, w = C(3, 3) + 4 * np.eye(3), C(3, 3)

    def f(x):
        return np.real(np.sum(np.conj(w) * sla.logm(x)))

    vg = irad.value_and_grad(f)
    vg(a)                                        # the call that traces
    np.random.seed(1)
    f(a)
    want = np.random.uniform(size=3)
    np.random.seed(1)
    vg(a)
    np.testing.assert_array_equal(np.random.uniform(size=3), want)
    rule = registry.lookup(sla.logm, (a,))
    _, state = rule.fwd(a)
    cots = set()
    for seed in range(6):
        np.random.seed(seed)
        cots.add(rule.bwd(state, w)[0].tobytes())
    assert len(cots) == 1
