"""``irad.jacrev`` / ``irad.jacobian``: Jacobians in JAX's layout from one forward program and one
batched backward program.

Two oracles independent of irad: central finite differences in float64, and ``jax.jacrev`` (x64).
Every check runs on the second and later calls of the same Jacobian object, at arguments other
than the ones it was traced at (so the cached programs answer, not the trace).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import irad
from irad.errors import GradError, MutationError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

tree = jax.tree_util


def fd_jacobian(f: Callable[..., Any], args: tuple[Any, ...], argnums: int | tuple[int, ...],
                h: float = 1e-6) -> Any:
    """Central differences, in JAX's layout: per output leaf, (a tuple over argnums of) the input's
    structure of blocks ``out.shape + in.shape``."""
    nums = (argnums,) if isinstance(argnums, int) else argnums
    y0 = f(*args)
    y_leaves, y_def = tree.tree_flatten(y0)
    per_arg = []
    for a in nums:
        x_leaves, x_def = tree.tree_flatten(args[a])
        cols: list[list[np.ndarray]] = [[] for _ in y_leaves]  # per output leaf: per input leaf
        for j, xl in enumerate(x_leaves):
            xl = np.asarray(xl, dtype=float)
            blocks = [np.zeros(np.shape(yl) + xl.shape) for yl in y_leaves]
            for idx in np.ndindex(*xl.shape):
                def at(d: float) -> list[np.ndarray]:
                    moved = [np.array(v, dtype=float, copy=True) for v in x_leaves]
                    moved[j][idx] += d
                    new = list(args)
                    new[a] = tree.tree_unflatten(x_def, [m if np.ndim(v) else float(m) for m, v in
                                                         zip(moved, x_leaves)])
                    return tree.tree_leaves(f(*new))
                plus, minus = at(h), at(-h)
                for k in range(len(y_leaves)):
                    blocks[k][(Ellipsis,) + idx] = (np.asarray(plus[k]) - np.asarray(minus[k])) / (2 * h)
            for k in range(len(y_leaves)):
                cols[k].append(blocks[k])
        per_arg.append([tree.tree_unflatten(x_def, c) for c in cols])
    out = [per_arg[0][k] if isinstance(argnums, int) else tuple(p[k] for p in per_arg) for k in range(len(y_leaves))]
    return tree.tree_unflatten(y_def, out)


def same(got: Any, want: Any, rtol: float, atol: float) -> None:
    assert tree.tree_structure(got) == tree.tree_structure(want), (tree.tree_structure(got), tree.tree_structure(want))
    for g, w in zip(tree.tree_leaves(got), tree.tree_leaves(want)):
        assert isinstance(g, np.ndarray), type(g)
        assert g.shape == np.shape(w), (g.shape, np.shape(w))
        np.testing.assert_allclose(g, np.asarray(w), rtol=rtol, atol=atol)


def to_jax(x: Any) -> Any:
    return tree.tree_map(lambda v: jnp.asarray(v) if isinstance(v, np.ndarray) else v, x)


R = np.random.default_rng(7)
W1, W2, B1 = R.normal(size=(5, 4)), R.normal(size=(3, 5)), R.normal(size=5)


def _softmax(xp: Any) -> Callable[..., Any]:
    def f(x: Any) -> Any:
        e = xp.exp(x - xp.max(x))
        return e / xp.sum(e)
    return f


# (name, maker of f for a numpy-like module, maker of arguments, argnums)
CASES: list[tuple[str, Callable[[Any], Callable[..., Any]], Callable[[np.random.Generator], tuple[Any, ...]], Any]] = [
    ("elementwise", lambda xp: lambda x: xp.sin(x) * x ** 2 + xp.exp(-x), lambda r: (r.normal(size=4),), 0),
    ("matmul_chain", lambda xp: lambda x, w1, w2: w2 @ xp.tanh(w1 @ x + 1.0),
     lambda r: (r.normal(size=4), r.normal(size=(5, 4)), r.normal(size=(3, 5))), 0),
    ("matmul_chain_all_args", lambda xp: lambda x, w1, w2: w2 @ xp.tanh(w1 @ x),
     lambda r: (r.normal(size=4), r.normal(size=(5, 4)), r.normal(size=(3, 5))), (0, 1, 2)),
    ("softmax", _softmax, lambda r: (r.normal(size=6),), 0),
    ("norms", lambda xp: lambda x: xp.linalg.norm(x) * x + x / xp.sqrt(xp.sum(x ** 2)), lambda r: (r.normal(size=4),), 0),
    ("reductions", lambda xp: lambda m: xp.sum(m, axis=0) * xp.mean(m, axis=1, keepdims=True) + xp.max(m, axis=-1)[:, None],
     lambda r: (r.normal(size=(3, 4)),), 0),
    ("indexing", lambda xp: lambda x: x[1:4] * x[xp.array([0, 0, 2])] + x[-1], lambda r: (r.normal(size=5),), 0),
    ("scalar_output", lambda xp: lambda x, y: xp.sum(xp.tanh(x) * y) ** 2, lambda r: (r.normal(size=(2, 3)), r.normal(size=3)),
     (0, 1)),
    ("zero_d_input", lambda xp: lambda s: s * xp.arange(1.0, 4.0) + xp.sin(s), lambda r: (np.array(r.normal()),), 0),
    ("python_float", lambda xp: lambda s, t: s * s * t + 1.0, lambda r: (float(r.normal()), float(r.normal())), (0, 1)),
    ("matrix_to_matrix", lambda xp: lambda m: m @ m.T + xp.cos(m).sum(), lambda r: (r.normal(size=(3, 2)),), 0),
    ("pytree_in_out", lambda xp: lambda p, v: {"y": xp.tanh(p["w"] @ v), "z": (xp.sum(p["b"] * v[:2]), p["b"] ** 2)},
     lambda r: ({"w": r.normal(size=(2, 3)), "b": r.normal(size=2)}, r.normal(size=3)), (0, 1)),
    ("pytree_in_single", lambda xp: lambda p: [p[0] * p[1][0], xp.sum(p[1][1])],
     lambda r: ((r.normal(size=3), (r.normal(), r.normal(size=(2, 2)))),), 0),
    ("concat_cumsum", lambda xp: lambda x, y: xp.cumsum(xp.concatenate([x, y * 2.0, x[:1]])),
     lambda r: (r.normal(size=3), r.normal(size=2)), (0, 1)),
    ("independent_argument", lambda xp: lambda x, y: x * 3.0, lambda r: (r.normal(size=3), r.normal(size=2)), (0, 1)),
    ("mlp", lambda xp: lambda x, w1, b1, w2: w2 @ xp.tanh(w1 @ x + b1),
     lambda r: (r.normal(size=4), r.normal(size=(5, 4)), r.normal(size=5), r.normal(size=(3, 5))), (0, 1, 2, 3)),
]


@pytest.mark.parametrize("name,make,args_of,argnums", CASES, ids=[c[0] for c in CASES])
def test_jacrev_against_finite_differences_and_jax(name: str, make: Callable[[Any], Callable[..., Any]],
                                                   args_of: Callable[[np.random.Generator], tuple[Any, ...]],
                                                   argnums: Any) -> None:
    f = make(np)
    jf = make(jnp)
    jac = irad.jacrev(f, argnums=argnums)
    rng = np.random.default_rng(0)
    jac(*args_of(rng))  # traces
    for _ in range(2):
        args = args_of(rng)
        got = jac(*args)
        same(got, jax.jacrev(jf, argnums=argnums)(*to_jax(args)), 1e-10, 1e-12)
        same(got, fd_jacobian(f, args, argnums), 1e-6, 1e-7)
    assert jac.traces == 1


def test_jacobian_is_jacrev_with_autograds_layout() -> None:
    """autograd's ``jacobian(f)(x)`` has shape ``f(x).shape + x.shape``, as here."""
    assert irad.jacobian is irad.jacrev
    f = lambda x: np.outer(x, x)  # noqa: E731
    j = irad.jacobian(f)
    x = np.array([1.0, 2.0, 3.0])
    j(x)
    got = j(x + 1.0)
    assert got.shape == (3, 3, 3)
    same(got, fd_jacobian(f, (x + 1.0,), 0), 1e-6, 1e-7)


def test_has_aux() -> None:
    def f(x: np.ndarray) -> Any:
        y = np.sin(x) * x[0]
        return y, {"norm": np.sum(y ** 2), "n": 3}
    jac = irad.jacrev(f, has_aux=True)
    x = np.array([0.3, -0.2, 0.5])
    jac(x)
    j, aux = jac(x * 2.0)
    want_j, want_aux = jax.jacrev(lambda x: (jnp.sin(x) * x[0], {"norm": jnp.sum((jnp.sin(x) * x[0]) ** 2), "n": 3}),
                                  has_aux=True)(jnp.asarray(x * 2.0))
    same(j, want_j, 1e-12, 1e-14)
    assert set(aux) == {"norm", "n"} and aux["n"] == 3
    np.testing.assert_allclose(aux["norm"], float(want_aux["norm"]), rtol=1e-12)


def test_a_100_to_100_function() -> None:
    rng = np.random.default_rng(1)
    w, b = rng.normal(size=(100, 100)) / 10, rng.normal(size=100)

    def f(x: np.ndarray) -> np.ndarray:
        return np.tanh(w @ x + b)
    jac = irad.jacrev(f)
    jac(rng.normal(size=100))
    x = rng.normal(size=100)
    got = jac(x)
    assert got.shape == (100, 100)
    want = np.diag(1 - np.tanh(w @ x + b) ** 2) @ w  # by hand
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    same(got, jax.jacrev(lambda x: jnp.tanh(w @ x + b))(jnp.asarray(x)), 1e-12, 1e-14)


def test_one_call_runs_the_forward_program_once_and_the_batched_backward_once() -> None:
    w = np.random.default_rng(2).normal(size=(6, 4))

    def f(x: np.ndarray, y: np.ndarray) -> Any:
        return {"a": np.tanh(w @ x) * y[0], "b": np.sum(x ** 2)}
    jac = irad.jacrev(f, argnums=(0, 1))
    x, y = np.ones(4), np.ones(2)
    prog = jac.program(x, y)
    calls = {"fwd": 0, "jac": 0}
    fwd, bwd = prog.fwd, prog.jac

    def counting_fwd(*a: Any) -> Any:
        calls["fwd"] += 1
        return fwd(*a)

    def counting_jac(*a: Any) -> Any:
        calls["jac"] += 1
        return bwd(*a)
    prog.fwd, prog.jac = counting_fwd, counting_jac
    for k in range(1, 4):
        jac(x * k, y)
        assert calls == {"fwd": k, "jac": k}
    # one straight-line function: no loop over the output elements, and no looped op
    assert prog.source.count("def ") == 1 and "for " not in prog.source and "loop_" not in prog.source
    assert prog.source.startswith("def f_jacobian(")
    assert "np.eye(7, dtype=" in prog.source  # the seeds: 6 + 1 output elements


def test_outputs_are_fresh_writable_arrays() -> None:
    jac = irad.jacrev(lambda x: np.sum(x) + 0.0 * x[0])
    x = np.ones(3)
    jac(x)
    a, b = jac(x), jac(x)
    assert a.flags.writeable and not np.shares_memory(a, b)
    a[0] = 7.0
    np.testing.assert_allclose(jac(x), np.ones(3))
    ident = irad.jacrev(lambda x: x)
    ident(x)
    e1, e2 = ident(x), ident(x)
    e1[0, 0] = 5.0
    np.testing.assert_allclose(e2, np.eye(3))


def test_empty_output_and_input() -> None:
    jac = irad.jacrev(lambda x: x[:0] * 2.0)
    jac(np.ones(3))
    assert jac(np.ones(3)).shape == (0, 3)
    jac2 = irad.jacrev(lambda x: np.sum(x) + 1.0)
    jac2(np.ones(0))
    assert jac2(np.ones(0)).shape == (0,)


def test_retraces_when_a_global_changes_and_reads_arrays_live() -> None:
    global SCALE
    SCALE = 2.0
    jac = irad.jacrev(_scaled)
    x = np.ones(3)
    np.testing.assert_allclose(jac(x), 2 * np.eye(3))
    SCALE = 5.0
    np.testing.assert_allclose(jac(x), 5 * np.eye(3))
    assert jac.traces == 2
    LIVE[:] = [1.0, 2.0, 3.0]
    np.testing.assert_allclose(jac(x), np.diag(5.0 * LIVE))  # LIVE is read at each call (no retrace)
    assert jac.traces == 2


SCALE = 2.0
LIVE = np.ones(3)


def _scaled(x: np.ndarray) -> np.ndarray:
    return SCALE * x * LIVE


def test_a_branch_that_changes_retraces() -> None:
    def f(x: np.ndarray) -> np.ndarray:
        return x ** 2 if np.sum(x) > 0 else -x
    jac = irad.jacrev(f)
    np.testing.assert_allclose(jac(np.ones(2)), 2 * np.eye(2))
    np.testing.assert_allclose(jac(-np.ones(2)), -np.eye(2))
    np.testing.assert_allclose(jac(np.ones(2) * 3), 6 * np.eye(2))
    assert jac.traces == 2


def test_nested_in_grad_and_jacrev_of_jacrev() -> None:
    def f(x: np.ndarray) -> np.ndarray:
        return np.sin(x) * x[::-1]
    x = np.array([0.1, 0.2, 0.3])
    g = irad.grad(lambda x: np.sum(irad.jacrev(f)(x) ** 2))
    g(x)
    want = jax.grad(lambda x: jnp.sum(jax.jacrev(lambda x: jnp.sin(x) * x[::-1])(x) ** 2))(jnp.asarray(x * 2))
    np.testing.assert_allclose(g(x * 2), want, rtol=1e-10)
    hess = irad.jacrev(irad.jacrev(lambda x: np.sum(np.sin(x) * x ** 3)))
    hess(x)
    np.testing.assert_allclose(hess(x + 1), jax.hessian(lambda x: jnp.sum(jnp.sin(x) * x ** 3))(jnp.asarray(x + 1)),
                               rtol=1e-10)


def test_refusals_name_the_problem() -> None:
    with pytest.raises(GradError, match="complex"):
        irad.jacrev(lambda x: x * 1j)(np.ones(2))
    with pytest.raises(GradError, match="has_aux"):
        irad.jacrev(lambda x: (x * 2.0, np.argmax(x)))(np.ones(2))
    with pytest.raises(GradError, match="not differentiable"):
        irad.jacrev(lambda n: n * 2)(np.arange(3))
    with pytest.raises(GradError, match="pair"):
        irad.jacrev(lambda x: x, has_aux=True)(np.ones(2))

    def mutates(x: np.ndarray) -> np.ndarray:
        x *= 2.0
        return x
    with pytest.raises(MutationError, match="in place"):
        irad.jacrev(mutates)(np.ones(2))


def test_complex_input_real_output_follows_jax() -> None:
    def f(z: np.ndarray) -> np.ndarray:
        return np.abs(z) ** 2 + np.real(z * z[::-1])
    jac = irad.jacrev(f)
    z = np.array([1.0 + 2.0j, -0.5 + 0.3j])
    jac(z)
    got = jac(z * 1.5)
    want = jax.jacrev(lambda z: jnp.abs(z) ** 2 + jnp.real(z * z[::-1]))(jnp.asarray(z * 1.5))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_jacobian_graph_of_a_jvp_graph() -> None:
    """``jacobian_graph(mode="fwd")`` (what forward mode's jacfwd builds on): a hand-written JVP
    graph of ``X @ X`` (inputs X, Xdot; outputs X @ X, Xdot @ X + X @ Xdot), seeded over Xdot,
    gives the Jacobian in the same layout as reverse mode; ``keep`` returns the primal output."""
    from irad.derivatives import Block, jacobian_program
    g = irad.trace(lambda x, t: (x @ x, t @ x + x @ t), np.eye(3), np.ones((3, 3)))
    x = np.random.default_rng(5).normal(size=(3, 3))
    outs = [Block(1, (3, 3), "float64")]  # the tangent output
    ins = [Block(1, (3, 3), "float64")]  # the tangent input
    low, jg = jacobian_program(g, outs, ins, "fwd", "xx_jacfwd", keep=(0,))
    irad.verify(jg)
    block, primal = low.fn(x)
    np.testing.assert_allclose(primal, x @ x)
    same(block, jax.jacrev(lambda x: x @ x)(jnp.asarray(x)), 1e-12, 1e-14)
    assert "np.eye(9" in low.source and "for " not in low.source
    # an elementwise JVP (sin): vector in, vector out, and a scalar input beside it
    g2 = irad.trace(lambda v, s, vd, sd: (np.sin(v) * s, np.cos(v) * vd * s + np.sin(v) * sd), np.ones(3), 2.0,
                    np.ones(3), 1.0)
    v = np.array([0.1, 0.5, -0.3])
    low2, _ = jacobian_program(g2, [Block(1, (3,), "float64")], [Block(2, (3,), "float64"),
                                                                   Block(3, (), "float64")], "fwd", "sin_jacfwd")
    dv, ds = low2.fn(v, 2.0)
    same((dv, ds), jax.jacrev(lambda v, s: jnp.sin(v) * s, argnums=(0, 1))(jnp.asarray(v), 2.0), 1e-12, 1e-14)
