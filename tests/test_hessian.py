"""jacfwd, hessian and hvp: forward mode (irad.forward) batched over the input directions.

Oracles: central finite differences in float64 computed here with plain numpy, and JAX where
installed.  Every check reads the second or a later call of the same object (the first may
come from trace time).
"""
from __future__ import annotations

import numpy as np
import pytest

import irad
from functions import CASES
from irad.pytree import flatten

jax = pytest.importorskip("jax", reason="jax is the peer these layouts follow")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


def _twice(fn, *args):
    fn(*args)
    return fn(*args)


def _fd_jacobian(f, x, eps=1e-6):
    """d f / d x by central differences: shape f(x).shape + x.shape."""
    x = np.asarray(x, dtype=float)
    y0 = np.asarray(f(x))
    J = np.zeros(y0.shape + x.shape)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        J[(Ellipsis,) + idx] = (np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps)
    return J


FUNCS = [
    (lambda x: np.tanh(x) * np.sum(x ** 2), lambda x: jnp.tanh(x) * jnp.sum(x ** 2), (4,)),
    (lambda x: np.cumsum(np.exp(x)) / np.linalg.norm(x), lambda x: jnp.cumsum(jnp.exp(x)) / jnp.linalg.norm(x), (5,)),
    (lambda A: np.linalg.inv(A + 4 * np.eye(3)) @ A, lambda A: jnp.linalg.inv(A + 4 * jnp.eye(3)) @ A, (3, 3)),
    (lambda x: np.sum(x * x), lambda x: jnp.sum(x * x), (3,)),  # scalar output
    (lambda x: np.sin(x) * 2.0, lambda x: jnp.sin(x) * 2.0, ()),  # 0-d input
    (lambda x: x[[0, 2, 2]] * x[1:].sum() + np.maximum(x, 0.1), lambda x: x[jnp.array([0, 2, 2])] * x[1:].sum()
     + jnp.maximum(x, 0.1), (3,)),
]


@pytest.mark.parametrize("f,fj,shape", FUNCS)
def test_jacfwd_matches_jacrev_jax_and_finite_differences(f, fj, shape):
    x = np.random.default_rng(0).uniform(0.2, 1.0, shape)
    got = _twice(irad.jacfwd(f), x)
    np.testing.assert_allclose(got, jax.jacfwd(fj)(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, _twice(irad.jacrev(f), x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, _fd_jacobian(f, x), rtol=1e-6, atol=1e-8)


def test_jacfwd_pytrees_argnums_and_aux():
    def f(params, x):
        h = np.tanh(x @ params["W"] + params["b"])
        return {"h": h, "s": np.sum(h)}, x.shape[0]

    def fj(params, x):
        h = jnp.tanh(x @ params["W"] + params["b"])
        return {"h": h, "s": jnp.sum(h)}, x.shape[0]
    rng = np.random.default_rng(1)
    params = {"W": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    x = rng.standard_normal((4, 3))
    got, aux = _twice(irad.jacfwd(f, argnums=(0, 1), has_aux=True), params, x)
    want, jaux = jax.jacfwd(fj, argnums=(0, 1), has_aux=True)(params, x)
    assert aux == jaux == 4
    for key in ("h", "s"):
        np.testing.assert_allclose(got[key][1], want[key][1], rtol=1e-10, atol=1e-12)
        for name in ("W", "b"):
            assert got[key][0][name].shape == want[key][0][name].shape
            np.testing.assert_allclose(got[key][0][name], want[key][0][name], rtol=1e-10, atol=1e-12)


def test_jacfwd_is_one_program_call(monkeypatch):
    import irad.derivatives as d
    J = irad.jacfwd(lambda x: np.sin(x) * x[::-1])
    x = np.linspace(0, 1, 100)
    prog = J.program(x)
    calls = []
    fn = prog.fwd
    monkeypatch.setattr(prog, "fwd", lambda *a: calls.append(1) or fn(*a))
    np.testing.assert_allclose(J(x), np.diag(np.cos(x) * x[::-1]) + np.diag(np.sin(x))[:, ::-1], atol=1e-14)
    assert calls == [1]
    assert isinstance(prog, d.ForwardJacobianProgram) and "for " not in prog.source  # batched, not a loop


def loss(w, X, y):
    z = X @ w
    return np.mean(np.logaddexp(0, -y * z)) + 0.1 * np.sum(w ** 4)


def loss_jax(w, X, y):
    z = X @ w
    return jnp.mean(jnp.logaddexp(0, -y * z)) + 0.1 * jnp.sum(w ** 4)


def _data():
    rng = np.random.default_rng(2)
    return rng.standard_normal(3), rng.standard_normal((8, 3)), np.sign(rng.standard_normal(8))


def test_hessian_matches_jax_and_the_gradient_differenced():
    w, X, y = _data()
    H = _twice(irad.hessian(loss), w, X, y)
    np.testing.assert_allclose(H, jax.hessian(loss_jax)(w, X, y), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(H, H.T, atol=1e-12)
    g = irad.grad(loss)
    np.testing.assert_allclose(H, _fd_jacobian(lambda v: g(v, X, y), w), rtol=1e-6, atol=1e-8)


def test_hessian_of_a_pytree_argument():
    def f(p):
        return np.sum(np.sin(p["a"]) * p["b"] ** 2)

    def fj(p):
        return jnp.sum(jnp.sin(p["a"]) * p["b"] ** 2)
    p = {"a": np.array([0.1, 0.7]), "b": np.array([1.5, -0.5])}
    got, want = _twice(irad.hessian(f), p), jax.hessian(fj)(p)
    for i in "ab":
        for j in "ab":
            np.testing.assert_allclose(got[i][j], want[i][j], rtol=1e-10, atol=1e-12)


def test_hvp_without_the_hessian():
    w, X, y = _data()
    v = np.array([0.5, -1.0, 2.0])
    hv = irad.hvp(loss)
    got = _twice(hv, w, X, y, v)
    np.testing.assert_allclose(got, jax.hessian(loss_jax)(w, X, y) @ v, rtol=1e-10)
    two = irad.hvp(lambda a, b: np.sum(a ** 2 * b ** 3), argnums=(0, 1))
    a, b = np.array([1.0, 2.0]), np.array([0.5, 1.5])
    ga, gb = _twice(two, a, b, (np.ones(2), np.zeros(2)))
    np.testing.assert_allclose(ga, 2 * b ** 3)
    np.testing.assert_allclose(gb, 6 * a * b ** 2)
    with pytest.raises(irad.errors.GradError, match="vector last"):
        hv(w)


def test_refusals_name_the_function():
    with pytest.raises(irad.errors.GradError, match="complex"):
        irad.jacfwd(lambda z: z * 2)(np.array([1 + 1j]))
    with pytest.raises(irad.errors.GradError, match="not differentiable"):
        irad.jacfwd(lambda n: np.ones(2) * n)(np.array([1, 2]))


DIFF = [c for c in CASES if c.differentiable and not c.impure]


@pytest.mark.parametrize("case", DIFF, ids=[c.name for c in DIFF])
def test_corpus_jacfwd_is_the_gradient(case):
    """Every differentiable function of the shared corpus: jacfwd of a scalar loss is its gradient."""
    args = case.make_args(np.random.default_rng(1))
    nums = case.argnums if len(case.argnums) > 1 else case.argnums[0]
    got = _twice(irad.jacfwd(case.fn, argnums=nums), *args)
    want = irad.grad(case.fn, argnums=nums)
    want(*args)
    for a, b in zip(flatten(got)[0], flatten(want(*args))[0]):
        np.testing.assert_allclose(np.asarray(a).reshape(np.shape(b)), b, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("case", DIFF, ids=[c.name for c in DIFF])
def test_corpus_hessian_is_the_gradient_differenced(case):
    """Every differentiable function of the shared corpus: the Hessian (forward over reverse) of
    its first differentiated argument against central differences of irad's gradient."""
    args = list(case.make_args(np.random.default_rng(1)))
    a = case.argnums[0]
    x = args[a]
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f" or x.size > 40:
        pytest.skip("the Hessian check takes one float array argument of at most 40 elements")
    H = irad.hessian(case.fn, argnums=a)
    got = _twice(H, *args)
    g = irad.grad(case.fn, argnums=a)

    def grad_at(v):
        full = list(args)
        full[a] = v
        return g(*full)
    fd = _fd_jacobian(grad_at, x, eps=1e-5)
    np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-5 * max(1.0, float(np.max(np.abs(fd)))))


def test_jacfwd_inside_another_transform():
    """jacfwd under a trace (jacrev of jacfwd, grad of a jacfwd entry): its program runs traced."""
    def f(x):
        return np.sin(x) * np.sum(x ** 2)

    def fj(x):
        return jnp.sin(x) * jnp.sum(x ** 2)
    x = np.array([0.3, -0.4, 0.9])
    got = _twice(irad.jacrev(irad.jacfwd(f)), x)
    np.testing.assert_allclose(got, jax.jacrev(jax.jacfwd(fj))(x), rtol=1e-10, atol=1e-12)
    g = _twice(irad.grad(lambda x: irad.jacfwd(f)(x)[0, 1]), x)
    np.testing.assert_allclose(g, jax.grad(lambda x: jax.jacfwd(fj)(x)[0, 1])(x), rtol=1e-10, atol=1e-12)
