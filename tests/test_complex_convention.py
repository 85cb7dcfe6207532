"""Complex values in JAX's and HIPS autograd's convention (issue 14, docs/api.md).

A holomorphic step sends ``ybar`` to ``ybar * f'(z)``; a real-valued ``f`` of ``z = x + iy`` gets
``df/dx - i df/dy``.  Each check runs a compiled object twice and compares the second call (the
first call's result comes from trace time).  Finite differences are the reference everywhere; JAX
and autograd, where installed, must agree with irad on the same functions and cotangents.
"""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.errors import GradError
from irad.testing import check_grads


def second(fn, *args):
    fn(*args)
    return fn(*args)


def fd_grad_real(f, z, eps=1e-6):
    """df/dx - i df/dy of a real-valued f at complex z (array or scalar), by central differences."""
    z = np.asarray(z, dtype=complex)
    out = np.zeros_like(z)
    for idx in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[idx] = 1.0
        dx = (f(z + eps * e) - f(z - eps * e)) / (2 * eps)
        dy = (f(z + 1j * eps * e) - f(z - 1j * eps * e)) / (2 * eps)
        out[idx] = dx - 1j * dy
    return out


# ---- the |z|^2 example and real-valued functions ------------------------------------------------


def test_abs_squared_is_2x_minus_2iy():
    g = irad.grad(lambda z: abs(z) ** 2)
    assert second(g, 1 + 1j) == 2 - 2j
    assert second(g, 3 - 0.5j) == pytest.approx(6 + 1j)
    v = irad.value_and_grad(lambda z: np.abs(z) ** 2)
    val, gz = second(v, np.complex128(1 + 1j))
    assert val == pytest.approx(2.0) and gz == pytest.approx(2 - 2j)


REAL_FUNCS = {
    "abs": lambda z: np.sum(np.abs(z) * np.arange(1, z.size + 1).reshape(z.shape)),
    "angle": lambda z: np.sum(np.angle(z) ** 2),
    "real_imag": lambda z: np.sum(np.real(z) ** 3 - 2 * np.imag(z)),
    "attrs": lambda z: np.sum(z.real * z.imag),
    "conj_product": lambda z: np.real(np.sum(np.conj(z) * z * (1 + 2j) + z ** 2)),
    "norm": lambda z: np.linalg.norm(z),
    "var": lambda z: np.var(z),
    "exp_imag": lambda z: np.sum(np.imag(np.exp(z)) + np.real(np.log(z))),
    "fft_power": lambda z: np.sum(np.abs(np.fft.fft(z.ravel())) ** 2 * np.arange(z.size)),
}


@pytest.mark.parametrize("name", sorted(REAL_FUNCS))
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_real_valued_functions_match_finite_differences(name, shape):
    f = REAL_FUNCS[name]
    if shape == () and name in ("fft_power",):
        shape = (1,)
    rng = np.random.default_rng(sum(map(ord, name)) + len(shape))
    z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape) + 0.3
    got = second(irad.grad(f), z)
    np.testing.assert_allclose(got, fd_grad_real(f, z), rtol=1e-6, atol=1e-7)


def test_real_input_through_complex_intermediates_gets_a_real_gradient():
    f = lambda x: np.abs(np.sum(x * (1 + 2j) * np.exp(1j * x))) ** 2  # noqa: E731
    x = np.linspace(0.1, 0.9, 4)
    got = second(irad.grad(f), x)
    assert got.dtype == np.float64
    fd = np.array([(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(4)])
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


def test_repeated_complex_argument():
    f = lambda a, b: np.real(np.sum(a * np.conj(b)))  # noqa: E731
    z = np.array([1 + 2j, -0.5 + 1j])
    ga, gb = second(irad.grad(f, argnums=(0, 1)), z, z)
    # Re(a conj(b)) = ax bx + ay by: df/dax - i df/day = conj(b), and likewise conj(a) for b
    np.testing.assert_allclose(ga, np.conj(z))
    np.testing.assert_allclose(gb, np.conj(z))
    g = second(irad.grad(lambda z: f(z, z)), z)
    np.testing.assert_allclose(g, fd_grad_real(lambda w: f(w, w), z), atol=1e-7)


# ---- holomorphic functions -----------------------------------------------------------------------


HOLO = {
    "sin_times": (lambda z: np.sin(z) * z, lambda z: np.cos(z) * z + np.sin(z)),
    "exp_log": (lambda z: np.exp(z) + np.log(z), lambda z: np.exp(z) + 1 / z),
    "poly": (lambda z: 3 * z ** 3 - z / (1 + z), lambda z: 9 * z ** 2 - 1 / (1 + z) ** 2),
    "tanh_sqrt": (lambda z: np.tanh(z) * np.sqrt(z), lambda z: np.sqrt(z) / np.cosh(z) ** 2 + np.tanh(z) / (2 * np.sqrt(z))),
}


@pytest.mark.parametrize("name", sorted(HOLO))
@pytest.mark.parametrize("z0", [0.5 + 2j, -1.2 + 0.3j, np.complex128(0.7 - 0.9j)])
def test_holomorphic_grad_is_the_complex_derivative(name, z0):
    f, df = HOLO[name]
    got = second(irad.grad(f, holomorphic=True), z0)
    assert got == pytest.approx(df(z0), rel=1e-12)
    val, got2 = second(irad.value_and_grad(f, holomorphic=True), z0)
    assert val == pytest.approx(f(z0)) and got2 == pytest.approx(df(z0), rel=1e-12)


def test_holomorphic_vjp_has_no_conjugate():
    z = np.array([0.5 + 1j, -2.0 + 0.25j, 1j])
    ct = np.array([1.0 - 1j, 2j, 0.5])
    f = lambda z: np.sin(z) * np.exp(z)  # noqa: E731
    for _ in range(2):
        _, pb = irad.vjp(f, z)
        (zbar,) = pb(ct)
    np.testing.assert_allclose(zbar, ct * (np.cos(z) * np.exp(z) + np.sin(z) * np.exp(z)), rtol=1e-12)


def test_complex_output_without_holomorphic_is_a_grad_error():
    with pytest.raises(GradError, match=r"returned a complex number.*holomorphic=True") as e:
        irad.grad(lambda z: z * z)(1 + 1j)
    assert "test_complex_convention.py" in str(e.value)  # names the user's function and file
    with pytest.raises(GradError, match="complex"):
        irad.value_and_grad(lambda z: np.sum(np.exp(z)))(np.array([1j, 2j]))


def test_refusals_are_type_errors_as_in_jax_and_autograd():
    """autograd's test_direct::test_grad_complex_output and test_logic::test_nograd expect TypeError."""
    with pytest.raises(TypeError):
        irad.grad(lambda x: x * (1.0 + 0.2j))(1.0)
    with pytest.raises(TypeError):
        irad.grad(lambda x: np.allclose(x, (x * 3.0) / 3.0))(np.array([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError):
        irad.grad(lambda n: n * 2.0)(3)


def test_holomorphic_needs_complex_inputs_and_outputs():
    with pytest.raises(GradError, match="not complex"):
        irad.grad(lambda x: x * (1 + 2j), holomorphic=True)(1.5)
    with pytest.raises(GradError, match="not a complex number"):
        irad.grad(lambda z: abs(z), holomorphic=True)(1 + 1j)


def test_check_grads_pairs_without_conjugate():
    # a function whose gradient differs between the two conventions: it must pass in JAX's
    check_grads(lambda z: np.real(np.sum(z ** 2 * (1 + 3j))), np.array([0.3 + 1j, -1 + 0.5j]), order=2)
    check_grads(lambda z: np.imag(np.exp(z)), 0.2 + 0.4j, order=2)


# ---- one-element outputs ---------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda x: -np.sum(x ** 2, keepdims=True),                 # (1,)
    lambda x: np.reshape(np.sum(np.sin(x)), (1, 1)),          # (1, 1)
    lambda x: (x[:1] * x[-1:]) ** 2,                          # (1,) from slices
    lambda x: np.sum(x * x),                                  # () for comparison
])
def test_one_element_outputs(make):
    x = np.array([0.3, -1.2, 2.0])
    got = second(irad.grad(make), x)
    fd = np.array([(np.sum(make(x + 1e-6 * e)) - np.sum(make(x - 1e-6 * e))) / 2e-6 for e in np.eye(3)])
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)
    val, got2 = second(irad.value_and_grad(make), x)
    assert np.shape(val) == np.shape(make(x))
    np.testing.assert_allclose(got2, got)


def test_more_than_one_element_is_still_an_error():
    with pytest.raises(GradError, match="one element.*irad.vjp"):
        irad.grad(lambda x: x[:2])(np.ones(3))


# ---- agreement with JAX and autograd ---------------------------------------------------------

# f(xp, *args): the same code for numpy (irad), jax.numpy and autograd.numpy
PEER_CASES = {
    "exp": (lambda xp, z: xp.exp(z), 1),
    "log": (lambda xp, z: xp.log(z), 1),
    "sin_cos": (lambda xp, z: xp.sin(z) * xp.cos(z), 1),
    "tanh": (lambda xp, z: xp.tanh(z), 1),
    "sqrt": (lambda xp, z: xp.sqrt(z), 1),
    "arith": (lambda xp, z: (z * z - 2.0 / z) ** 2, 1),
    "reciprocal": (lambda xp, z: xp.reciprocal(z), 1),
    "abs": (lambda xp, z: xp.abs(z), 1),
    "angle": (lambda xp, z: xp.angle(z), 1),
    "real_imag": (lambda xp, z: xp.real(z) * xp.imag(z), 1),
    "conj": (lambda xp, z: xp.conj(z) * z, 1),
    "sum_prod": (lambda xp, z: xp.prod(z, axis=-1) + xp.sum(z ** 2, axis=-1), 1),
    "cumsum": (lambda xp, z: xp.cumsum(z * z, axis=-1), 1),
    "matmul": (lambda xp, a, b: a @ b, 2),
    "einsum": (lambda xp, a, b: xp.einsum("ij,jk->ik", a, b), 2),
    "outer_dot": (lambda xp, a, b: xp.dot(a, b) + xp.outer(a[0], b[:, 0]), 2),
    "inv": (lambda xp, a, b: xp.linalg.inv(a + 3 * xp.eye(3)), 2),
    "det": (lambda xp, a, b: xp.linalg.det(a + 3 * xp.eye(3)), 2),
    "solve": (lambda xp, a, b: xp.linalg.solve(a + 3 * xp.eye(3), b), 2),
    "fft": (lambda xp, z: xp.fft.fft(z, axis=-1), 1),
    "ifft_ortho": (lambda xp, z: xp.fft.ifft(z, norm="ortho", axis=-1), 1),
    "fft2": (lambda xp, z: xp.fft.fft2(z), 1),
    "mean_var_std": (lambda xp, z: xp.mean(z, axis=0) * xp.var(z) + xp.std(z, axis=1).sum(), 1),
    "cumprod": (lambda xp, z: xp.cumprod(z, axis=1), 1),
    "kron": (lambda xp, a, b: xp.kron(a, b[:2, :2]), 2),
    "cross": (lambda xp, a, b: xp.cross(a, b), 2),
    "tensordot": (lambda xp, a, b: xp.tensordot(a, b, axes=([0], [1])), 2),
    "trace_diag": (lambda xp, a, b: xp.trace(a @ b) * xp.diagonal(a), 2),
    "where_abs": (lambda xp, z: xp.where(xp.abs(z) > 1.0, z * z, xp.conj(z)), 1),
    "power_real_exp": (lambda xp, z: z ** 2.5 + z ** 3, 1),
    "linspace_mult": (lambda xp, z: z * xp.exp(1j * xp.linspace(0.0, 1.0, 3)), 1),
}
# (arccosh is left out: JAX and autograd differentiate it as 1/sqrt(z*z - 1), which is on the other
# branch of the square root for some complex z; test_arccosh_follows_numpys_branch checks irad)
for _name in ("sinh", "cosh", "tan", "arcsinh", "arctanh", "arcsin", "arccos", "arctan", "log10",
              "log2", "exp2", "expm1", "log1p", "square", "negative"):
    PEER_CASES[f"ufunc_{_name}"] = ((lambda n: lambda xp, z: getattr(xp, n)(z * 0.3))(_name), 1)


def _complex(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _inputs(name, nargs):
    rng = np.random.default_rng(sum(map(ord, name)))
    if nargs == 2:
        return (_complex(rng, (3, 3)), _complex(rng, (3, 3)))
    return (_complex(rng, (2, 3)) + 0.5,)


def _irad_vjp(name, args, ct):
    f = PEER_CASES[name][0]
    for _ in range(2):  # the second call runs the compiled program
        _, pb = irad.vjp(lambda *a: f(np, *a), *args)
        out = pb(ct)
    return out


@pytest.mark.parametrize("name", sorted(PEER_CASES))
def test_agrees_with_jax_vjp(name):
    jax = pytest.importorskip("jax", reason="JAX is a peer for comparison (bench extra)")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    f, nargs = PEER_CASES[name]
    args = _inputs(name, nargs)
    y = f(np, *args)
    rng = np.random.default_rng(7)
    ct = rng.standard_normal(np.shape(y)) if not np.iscomplexobj(y) else _complex(rng, np.shape(y))
    _, jpb = jax.vjp(lambda *a: f(jnp, *a), *[jnp.asarray(a) for a in args])
    want = jpb(jnp.asarray(ct))
    got = _irad_vjp(name, args, ct)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-9, atol=1e-11)


# autograd has no complex cumprod rule, no make_diagonal for this trace, no ifft norm/fft2 here
@pytest.mark.parametrize("name", sorted(set(PEER_CASES) - {"ifft_ortho", "fft2", "reciprocal", "cumprod", "trace_diag"}))
def test_agrees_with_autograd(name):
    autograd = pytest.importorskip("autograd", reason="HIPS autograd is a peer for comparison (bench extra)")
    import autograd.numpy as anp
    f, nargs = PEER_CASES[name]
    args = _inputs(name, nargs)
    y = f(np, *args)
    rng = np.random.default_rng(7)
    ct = rng.standard_normal(np.shape(y)) if not np.iscomplexobj(y) else _complex(rng, np.shape(y))
    got = _irad_vjp(name, args, ct)
    for i in range(nargs):
        def fi(x, i=i):
            a = list(args)
            a[i] = x
            return f(anp, *a)
        vjp, _ = autograd.make_vjp(fi)(args[i])
        np.testing.assert_allclose(got[i], vjp(ct), rtol=1e-9, atol=1e-11)


def test_arccosh_follows_numpys_branch():
    """arccosh z = log(z + sqrt(z - 1) sqrt(z + 1)): its derivative is 1/(sqrt(z - 1) sqrt(z + 1)),
    which is -1/sqrt(z*z - 1) for some z (where JAX's and autograd's rules give the other sign)."""
    rng = np.random.default_rng(5)
    z = 0.3 * (_complex(rng, (2, 3)) + 0.5)
    ct = _complex(rng, (2, 3))
    got = _irad_vjp_fn(np.arccosh, z, ct)
    h = 1e-7
    fd = (np.arccosh(z + h) - np.arccosh(z - h)) / (2 * h)
    np.testing.assert_allclose(got, ct * fd, rtol=1e-6)
    assert np.any(np.abs(fd + 1 / np.sqrt(z * z - 1)) < 1e-6)  # the textbook form is off here


def _irad_vjp_fn(f, z, ct):
    for _ in range(2):
        _, pb = irad.vjp(f, z)
        (zbar,) = pb(ct)
    return zbar


# ---- check_rule on complex inputs for rules the table in test_rules.py covers only for reals ----

def _c(rng, *shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _complex_rule_cases():
    import scipy.linalg as sl
    import scipy.signal as ss
    rng = np.random.default_rng(3)
    A = _c(rng, 3, 3) + 3 * np.eye(3)
    return [
        ("cross", np.cross, (_c(rng, 3), _c(rng, 2, 3))), ("kron", np.kron, (_c(rng, 2, 2), _c(rng, 2, 3))),
        ("tensordot", np.tensordot, (_c(rng, 2, 3, 4), _c(rng, 3, 4, 2))),
        ("matrix_power", np.linalg.matrix_power, (A, 3)), ("matrix_power_neg", np.linalg.matrix_power, (A, -2)),
        ("multi_dot", np.linalg.multi_dot, ([A, _c(rng, 3, 3), _c(rng, 3, 2)],)),
        ("pinv", np.linalg.pinv, (_c(rng, 4, 3),)), ("lstsq", np.linalg.lstsq, (_c(rng, 5, 3), _c(rng, 5))),
        ("solve_sylvester", sl.solve_sylvester, (A, _c(rng, 3, 3) + 4 * np.eye(3), _c(rng, 3, 3))),
        ("expm_frechet", sl.expm_frechet, (0.3 * _c(rng, 3, 3), _c(rng, 3, 3))),
        ("inner", np.inner, (_c(rng, 2, 3), _c(rng, 4, 3))), ("vdot", np.vdot, (_c(rng, 3), _c(rng, 3))),
        ("correlate", np.correlate, (_c(rng, 5), _c(rng, 3), "full")),
        ("convolve", np.convolve, (_c(rng, 5), _c(rng, 3), "same")),
        ("signal.convolve", ss.convolve, (_c(rng, 4, 3), _c(rng, 2, 2))),
        ("sla.inv", sl.inv, (A,)), ("sla.det", sl.det, (A,)),
        ("solve_triangular_C", sl.solve_triangular, (np.triu(A), _c(rng, 3), 2)),
        ("solve_triangular_T", sl.solve_triangular, (np.tril(A), _c(rng, 3, 2), 1, True)),
        ("cho_solve", lambda c, b: sl.cho_solve((c, True), b),
         (np.linalg.cholesky(A @ A.conj().T + np.eye(3)), _c(rng, 3))),
        ("cumprod", np.cumprod, (_c(rng, 4),)), ("prod", np.prod, (_c(rng, 2, 3),)),
        ("einsum_diagonal", np.einsum, ("iij,jk->ik", _c(rng, 3, 3, 2), _c(rng, 2, 2))),
        ("eig", np.linalg.eig, (A,)), ("sqrtm", sl.sqrtm, (A,)), ("logm", sl.logm, (A,)),
        ("interp", np.interp, (np.array([-0.5, 0.3, 0.7, 1.9]), np.array([0.0, 0.5, 1.0]), _c(rng, 3), 1j, 2.0 + 1j)),
        ("norm_3", np.linalg.norm, (_c(rng, 3), 3)), ("norm_1_matrix", np.linalg.norm, (_c(rng, 3, 4), 1)),
        ("norm_inf_matrix", np.linalg.norm, (_c(rng, 3, 4), np.inf)), ("var_axis", np.var, (_c(rng, 3, 4), 0)),
    ]


@pytest.mark.parametrize("case", range(31))
def test_check_rule_on_complex_inputs(case):
    pytest.importorskip("scipy", reason="some of these rules are SciPy's")
    from irad.testing import check_rule
    cases = _complex_rule_cases()
    assert len(cases) == 31
    name, fn, args = cases[case]
    if name == "cho_solve":  # a lambda has no rule: check the whole function instead
        check_grads(fn, *args, argnums=(1,), order=1)
        return
    check_rule(fn, *args)
