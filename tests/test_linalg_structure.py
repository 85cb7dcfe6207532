"""Structure-aware linear algebra (irad.passes.structure): the facts, the rewrites, and that each
fires on its pattern, not on near-misses, and keeps gradients equal to finite differences on the
second and later calls of one compiled object."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
import scipy.linalg as sla

import irad
from irad.passes import structure as st
from irad.rules.decomp_rules import cho_inverse
from irad.testing import check_grads, check_rule, numerical_vjp

SIZES = (1, 3, 7)


def spd(rng: np.random.Generator, n: int, *batch: int) -> np.ndarray:
    a = rng.standard_normal((*batch, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def prims(g: irad.Graph) -> list[str]:
    return [op.prim for op in g.ops]


def compiled(f: Callable[..., Any], *args: Any, argnums: Any = 0) -> tuple[Any, Any]:
    """The cached value_and_grad of f, called once (traced) and its program for args."""
    vg = irad.value_and_grad(f, argnums=argnums)
    vg(*args)
    return vg, vg.program(*args)


def assert_fd(vg: Any, f: Callable[..., Any], args: tuple[Any, ...], argnums: Any = 0) -> None:
    """vg (already compiled) at new args: value == f, gradient == central differences."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    value, grad = vg(*args)
    np.testing.assert_allclose(value, f(*args), rtol=1e-12, atol=1e-12)
    ref = numerical_vjp(f, args, 1.0)
    grads = (grad,) if isinstance(argnums, int) else grad
    for i, gr in zip(nums, grads):
        np.testing.assert_allclose(gr, ref[i], rtol=1e-6, atol=1e-7)


def calls(vg: Any, f: Callable[..., Any], make: Callable[[np.random.Generator], tuple[Any, ...]],
          argnums: Any = 0) -> None:
    """Second and later calls of one compiled object, with new values."""
    for seed in (11, 12):
        assert_fd(vg, f, make(np.random.default_rng(seed)), argnums)


# ---- the analysis ----------------------------------------------------------------------------


def test_facts_from_cholesky_tril_triu_and_transposes() -> None:
    def f(k: np.ndarray, a: np.ndarray) -> Any:
        low = np.linalg.cholesky(k)
        up = np.linalg.cholesky(k, upper=True)
        return low, low.T, np.transpose(low), np.swapaxes(low, 0, 1), low.mT, np.conj(low), up, \
            np.tril(a), np.tril(a, -1), np.tril(a, 1), np.triu(a), np.triu(a, 2), np.triu(a, -1), \
            sla.cholesky(k, lower=True), sla.cholesky(k)

    k = spd(np.random.default_rng(0), 3)
    g = irad.trace(f, k, k)
    facts = st.structure(g)
    got = [facts.get(o.id, st.Fact()).tri for o in g.outputs]
    assert got == ["lower", "upper", "upper", "upper", "upper", "lower", "upper",
                   "lower", "lower", "", "upper", "upper", "", "lower", "upper"]
    assert facts[g.outputs[0].id].factor_of == g.inputs[0]
    assert facts[g.outputs[6].id].factor_of is None  # U with U^H U = K: not the lower factor
    g = irad.trace(lambda k: np.linalg.cholesky(k), k)
    assert st.structure(g)[g.inputs[0].id].spd == "lower"


def test_no_facts_for_qr_general_modified_or_batched_transpose() -> None:
    def f(k: np.ndarray) -> Any:
        q, r = np.linalg.qr(k)
        low = np.linalg.cholesky(k)
        m = low.copy()
        m[0, 1] = 1.0
        return r, k, m, low + 0.0, low * 2.0, np.abs(low)

    g = irad.trace(f, spd(np.random.default_rng(0), 3))
    facts = st.structure(g)
    assert all(facts.get(o.id, st.Fact()).tri == "" for o in g.outputs)
    # a stack: transpose reverses all three axes (not a per-matrix transpose), swapaxes(-1, -2) flips
    g3 = irad.trace(lambda k: (np.transpose(np.linalg.cholesky(k)), np.linalg.cholesky(k).mT),
                    spd(np.random.default_rng(0), 3, 2))
    facts = st.structure(g3)
    assert [facts.get(o.id, st.Fact()).tri for o in g3.outputs] == ["", "upper"]


def test_in_place_update_kills_the_fact_and_its_views() -> None:
    g = irad.trace(lambda k: np.linalg.cholesky(k), spd(np.random.default_rng(0), 3))
    low = g.outputs[0]
    t = irad.ir.Var(100, low.type)
    s = irad.ir.Var(101, low.type)
    ops = g.ops + (irad.ir.Op("numpy.transpose", (low,), (), (t,), np.transpose),
                   irad.ir.Op("irad.primitives.add_into", (low, low), (), (s,), irad.primitives.add_into))
    h = g.replace(ops=ops, outputs=(t, s))
    assert st.structure(g)[low.id].tri == "lower"
    facts = st.structure(h)
    assert low.id not in facts and t.id not in facts


# ---- triangular solves -----------------------------------------------------------------------


def tri_solve(k: np.ndarray, b: np.ndarray) -> Any:
    low = np.linalg.cholesky(k)
    x = np.linalg.solve(low, b)
    return np.sum(x * x) + np.sum(np.linalg.solve(low.T, b) ** 3)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("rhs", [(), (2,)])
def test_solves_with_a_factor_are_triangular(n: int, rhs: tuple[int, ...]) -> None:
    def make(rng: np.random.Generator) -> tuple[Any, ...]:
        return spd(rng, n), rng.standard_normal((n, *rhs))

    args = make(np.random.default_rng(0))
    vg, prog = compiled(tri_solve, *args, argnums=(0, 1))
    p = prims(prog.graph)
    assert "numpy.linalg.solve" not in p and "scipy.linalg.solve_triangular" in p
    assert "solve_triangular(" in prog.source and "check_finite=False" in prog.source
    calls(vg, tri_solve, make, (0, 1))


def tril_solve(a: np.ndarray, b: np.ndarray) -> Any:
    return np.sum(np.sin(np.linalg.solve(np.tril(a), b))) + np.sum(np.linalg.solve(np.triu(a).T, b))


@pytest.mark.parametrize("n", SIZES)
def test_tril_and_transposed_triu_solves(n: int) -> None:
    def make(rng: np.random.Generator) -> tuple[Any, ...]:
        return rng.standard_normal((n, n)) + 3 * n * np.eye(n), rng.standard_normal(n)

    args = make(np.random.default_rng(0))
    vg, prog = compiled(tril_solve, *args, argnums=(0, 1))
    assert "numpy.linalg.solve" not in prims(prog.graph)
    calls(vg, tril_solve, make, (0, 1))


def test_complex_triangular_solve() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    k = a @ a.conj().T + 3 * np.eye(3)
    b = rng.standard_normal(3) + 1j * rng.standard_normal(3)

    def f(k: np.ndarray, b: np.ndarray) -> Any:
        x = np.linalg.solve(np.linalg.cholesky(k), b)
        return np.real(np.sum(x * np.conj(x)))

    prog = irad.compile(f, k, b, argnums=1)
    assert "scipy.linalg.solve_triangular" in prims(prog.graph)
    check_grads(f, k, b, argnums=1)


# ---- near-misses: general matrices, qr, modified factors -------------------------------------


def general(a: np.ndarray, b: np.ndarray) -> Any:
    return np.sum(np.linalg.solve(a, b) ** 2)


def from_qr(a: np.ndarray, b: np.ndarray) -> Any:
    q, r = np.linalg.qr(a)
    return np.sum(np.linalg.solve(r, b) ** 2)


def modified(k: np.ndarray, b: np.ndarray) -> Any:
    low = np.linalg.cholesky(k)
    low[0, -1] = 0.25
    return np.sum(np.linalg.solve(low, b) ** 2)


def modified_through_view(k: np.ndarray, b: np.ndarray) -> Any:
    low = np.linalg.cholesky(k)
    up = low.T
    up[-1, 0] = 0.25  # low[0, -1]: above the diagonal
    return np.sum(np.linalg.solve(low, b) ** 2)


def added(k: np.ndarray, b: np.ndarray) -> Any:
    low = np.linalg.cholesky(k) + 0.1
    return np.sum(np.linalg.solve(low, b) ** 2)


@pytest.mark.parametrize("f", [general, from_qr, modified, modified_through_view, added])
@pytest.mark.parametrize("n", (3, 7))
def test_no_triangular_solve_for_near_misses(f: Callable[..., Any], n: int) -> None:
    def make(rng: np.random.Generator) -> tuple[Any, ...]:
        return spd(rng, n) + 0.3 * rng.standard_normal((n, n)), rng.standard_normal(n)

    args = make(np.random.default_rng(0))
    vg, prog = compiled(f, *args, argnums=(0, 1))
    # NOTE: not the ops of cholesky's own pullback, once inlined: they solve with the factor
    # before the update, which is triangular
    p = [op.prim for op in prog.graph.ops if not (op.loc and op.loc.func == "pullback of numpy.linalg.cholesky")]
    assert "scipy.linalg.solve_triangular" not in p and "scipy.linalg.cho_solve" not in p
    assert "numpy.linalg.solve" in p or "irad.passes.structure.lu_solve" in p  # general (shared_lu: one LU)
    calls(vg, f, make, (0, 1))


def mutated_between(k: np.ndarray, b: np.ndarray) -> Any:
    low = np.linalg.cholesky(k)
    x = np.linalg.solve(low, b)
    low += 0.1  # in place: no longer triangular
    return np.sum(x * x) + np.sum(np.linalg.solve(low, b) ** 2)


@pytest.mark.parametrize("n", (3, 7))
def test_solve_whose_matrix_is_mutated_between_uses(n: int) -> None:
    def make(rng: np.random.Generator) -> tuple[Any, ...]:
        return spd(rng, n), rng.standard_normal(n)

    args = make(np.random.default_rng(0))
    vg, prog = compiled(mutated_between, *args, argnums=(0, 1))
    graph = prog.graph
    facts = st.structure(graph)
    forward = [op for op in graph.ops if op.loc is None or not op.loc.func.startswith("pullback of")]
    lu = "irad.passes.structure.lu_solve"  # the mutated factor's solves share one LU (shared_lu)
    kinds = [op.prim for op in forward if op.prim in ("numpy.linalg.solve", "scipy.linalg.solve_triangular", lu)]
    assert kinds in (["scipy.linalg.solve_triangular", "numpy.linalg.solve"], ["scipy.linalg.solve_triangular", lu])
    general_solves = [op for op in graph.ops if op.prim in ("numpy.linalg.solve", lu)]
    assert all(not facts.get(op.args[0].id, st.Fact()).tri for op in general_solves)
    calls(vg, mutated_between, make, (0, 1))


# ---- cho_solve and log det: cotangents straight to K -----------------------------------------


def gp(a: np.ndarray, y: np.ndarray) -> Any:
    k = a @ a.T + a.shape[0] * np.eye(a.shape[0])
    low = np.linalg.cholesky(k)
    alpha = np.linalg.solve(low.T, np.linalg.solve(low, y))
    return 0.5 * np.sum(y * alpha) + np.sum(np.log(np.diag(low)))


def gp_make(n: int, rhs: tuple[int, ...]) -> Callable[[np.random.Generator], tuple[Any, ...]]:
    return lambda rng: (rng.standard_normal((n, n)), rng.standard_normal((n, *rhs)))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("rhs", [(), (1,), (3,)])
def test_gp_uses_cho_solve_and_the_inverse_from_the_factor(n: int, rhs: tuple[int, ...]) -> None:
    make = gp_make(n, rhs)
    args = make(np.random.default_rng(0))
    vg, prog = compiled(gp, *args, argnums=(0, 1))
    p = prims(prog.graph)
    assert "numpy.linalg.solve" not in p and "scipy.linalg.solve_triangular" not in p
    assert p.count("scipy.linalg.cho_solve") == 2  # x and w = K^-1 xbar
    assert p.count("irad.rules.decomp_rules.cho_inverse") == 1
    assert "cho_solve((" in prog.source and "cho_inverse(" in prog.source
    assert not any(op.prim == "pullback" for op in prog.graph.ops)
    calls(vg, gp, make, (0, 1))


def logdet_only(a: np.ndarray) -> Any:
    low = np.linalg.cholesky(a @ a.T + a.shape[0] * np.eye(a.shape[0]))
    return 2.0 * np.sum(np.log(np.diag(low)))


def cho_solve_and_other_uses(a: np.ndarray, y: np.ndarray) -> Any:
    low = np.linalg.cholesky(a @ a.T + a.shape[0] * np.eye(a.shape[0]))
    alpha = np.linalg.solve(low.T, np.linalg.solve(low, y))
    return np.sum(alpha ** 2) + np.sum(np.log(np.diag(low))) + np.sum(np.sin(low))


@pytest.mark.parametrize("n", SIZES)
def test_logdet_alone_and_with_other_uses_of_the_factor(n: int) -> None:
    make = gp_make(n, ())
    vg, prog = compiled(logdet_only, make(np.random.default_rng(0))[0])
    assert "irad.rules.decomp_rules.cho_inverse" in prims(prog.graph)
    assert "numpy.linalg.solve" not in prims(prog.graph)
    for seed in (5, 6):
        assert_fd(vg, logdet_only, make(np.random.default_rng(seed))[:1])
    # sin(L) still needs the Cholesky pullback: both paths add up
    args = make(np.random.default_rng(0))
    vg, prog = compiled(cho_solve_and_other_uses, *args, argnums=(0, 1))
    p = prims(prog.graph)
    assert "irad.rules.decomp_rules.cho_inverse" in p and "scipy.linalg.cho_solve" in p
    # NOTE: the Cholesky pullback stays (sin(L)); whether inline_pullbacks splices it for a small
    # matrix depends on its sample values, so its solves are not asserted on here
    calls(vg, cho_solve_and_other_uses, make, (0, 1))


def two_factors(a: np.ndarray, y: np.ndarray) -> Any:
    n = a.shape[0]
    l1 = np.linalg.cholesky(a @ a.T + n * np.eye(n))
    l2 = np.linalg.cholesky(a.T @ a + n * np.eye(n))
    return np.sum(np.linalg.solve(l1.T, np.linalg.solve(l2, y)) ** 2)


def inner_used_twice(a: np.ndarray, y: np.ndarray) -> Any:
    n = a.shape[0]
    low = np.linalg.cholesky(a @ a.T + n * np.eye(n))
    z = np.linalg.solve(low, y)
    return np.sum(np.linalg.solve(low.T, z) ** 2) + np.sum(z ** 3)


@pytest.mark.parametrize("f", [two_factors, inner_used_twice])
def test_no_cho_solve_for_near_misses(f: Callable[..., Any]) -> None:
    make = gp_make(3, ())
    args = make(np.random.default_rng(0))
    vg, prog = compiled(f, *args, argnums=(0, 1))
    p = prims(prog.graph)
    assert "scipy.linalg.cho_solve" not in p and "irad.rules.decomp_rules.cho_inverse" not in p
    assert "scipy.linalg.solve_triangular" in p
    calls(vg, f, make, (0, 1))


def test_cho_solve_of_a_forward_graph() -> None:
    """The prim-level form: a traced graph (no rules) gets one cho_solve."""
    rng = np.random.default_rng(0)
    k, y = spd(rng, 4), rng.standard_normal(4)
    def f(k: np.ndarray, y: np.ndarray) -> Any:
        return np.linalg.solve(np.linalg.cholesky(k).T, np.linalg.solve(np.linalg.cholesky(k), y))

    for g in (irad.trace(f, k, y), irad.trace(lambda k, y: sla.cho_solve((np.linalg.cholesky(k), True), y), k, y)):
        h = irad.passes.run(g)
        assert prims(h).count("scipy.linalg.cho_solve") == 1 and "numpy.linalg.solve" not in prims(h)
        np.testing.assert_allclose(h(k, y), np.linalg.solve(k, y), rtol=1e-12)
    # the inner solve read twice: two triangular solves
    h = irad.passes.run(irad.trace(lambda k, y: (f(k, y), np.linalg.solve(np.linalg.cholesky(k), y)), k, y))
    assert prims(h).count("scipy.linalg.solve_triangular") == 2 and "scipy.linalg.cho_solve" not in prims(h)


def test_batched_factors_keep_general_solves() -> None:
    def make(rng: np.random.Generator) -> tuple[Any, ...]:
        return spd(rng, 3, 2), rng.standard_normal((2, 3, 1))

    def f(k: np.ndarray, b: np.ndarray) -> Any:
        low = np.linalg.cholesky(k)
        return np.sum(np.linalg.solve(low.mT, np.linalg.solve(low, b)) ** 2) + np.sum(np.log(np.diagonal(low, axis1=-2, axis2=-1)))

    args = make(np.random.default_rng(0))
    vg, prog = compiled(f, *args, argnums=(0, 1))
    assert "scipy.linalg.cho_solve" not in prims(prog.graph)
    calls(vg, f, make, (0, 1))


def test_second_order_through_the_rewrites() -> None:
    rng = np.random.default_rng(1)
    check_grads(gp, rng.standard_normal((3, 3)), rng.standard_normal(3), order=2)


def test_cho_inverse_rule() -> None:
    low = np.linalg.cholesky(spd(np.random.default_rng(2), 4))
    r = cho_inverse(low)
    np.testing.assert_allclose(np.tril(r), np.tril(np.linalg.inv(low @ low.T)), rtol=1e-12, atol=1e-14)
    assert not np.triu(r, 1).any()
    check_rule(cho_inverse, low)


def test_without_scipy_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st._SciPy, "looked", True)
    monkeypatch.setattr(st._SciPy, "module", None)
    make = gp_make(3, ())
    args = make(np.random.default_rng(0))
    prog = irad.compile(gp, *args, argnums=(0, 1))
    p = prims(prog.graph)
    assert "numpy.linalg.solve" in p and not any(x.startswith("scipy.") for x in p)
    assert "cho_inverse" not in prog.source
    value, grads = prog(*args)
    ref = numerical_vjp(gp, args, 1.0)
    for gr, r in zip(grads, ref):
        np.testing.assert_allclose(gr, r, rtol=1e-6, atol=1e-7)


# ---- shared_lu: one LU factorisation per general matrix --------------------------------------

LU = "irad.passes.structure.lu_factor"
NO_LU = [p for p in irad.passes.PIPELINE if p is not irad.passes.shared_lu]


def solve_solve(a: np.ndarray, b: np.ndarray) -> Any:
    return np.sum(np.linalg.solve(a, b) ** 2) + np.sum(np.sin(np.linalg.solve(a, 2.0 * b)))


def solve_inv(a: np.ndarray, b: np.ndarray) -> Any:
    return np.sum(np.linalg.solve(a, b) ** 2) + np.sum(np.linalg.inv(a) * np.cos(a))


def solve_slogdet(a: np.ndarray, b: np.ndarray) -> Any:
    return np.sum(np.linalg.solve(a, b)) + np.linalg.slogdet(a)[1] + 0.1 * np.log(np.abs(np.linalg.det(a)))


def solve_transposed(a: np.ndarray, b: np.ndarray) -> Any:
    return np.sum(np.linalg.solve(a.T, b) ** 2) + np.sum(np.linalg.solve(a, b))


def general_make(n: int, rhs: tuple[int, ...]) -> Callable[[np.random.Generator], tuple[Any, ...]]:
    return lambda rng: (rng.standard_normal((n, n)) + 2 * n * np.eye(n), rng.standard_normal((n, *rhs)))


def lu_ops(g: irad.Graph) -> list[Any]:
    return [op for op in g.ops if op.prim == LU]


@pytest.mark.parametrize("f", [solve_solve, solve_inv, solve_slogdet, solve_transposed])
@pytest.mark.parametrize("n", (1, 3, 6))
@pytest.mark.parametrize("rhs", [(), (2,)])
def test_shared_lu_fires_and_keeps_gradients(f: Callable[..., Any], n: int, rhs: tuple[int, ...]) -> None:
    make = general_make(n, rhs)
    args = make(np.random.default_rng(0))
    vg, prog = compiled(f, *args, argnums=(0, 1))
    p = prims(prog.graph)
    assert p.count(LU) == 1 and not {"numpy.linalg.solve", "numpy.linalg.inv", "numpy.linalg.det",
                                     "numpy.linalg.slogdet"} & set(p)
    (fac,) = lu_ops(prog.graph)
    assert fac.args[0] == prog.graph.inputs[0]
    # the backward's solve with Aᵀ uses the same factor, transposed
    solves = [op for op in prog.graph.ops if op.prim == "irad.passes.structure.lu_solve"]
    assert any(op.args[3].value == 1 for op in solves) and all(op.args[1] == fac.out for op in solves)
    calls(vg, f, make, (0, 1))
    ref = irad.value_and_grad(f, argnums=(0, 1), passes=NO_LU)
    for seed in (3, 4):
        x = make(np.random.default_rng(seed))
        (v1, g1), (v2, g2) = vg(*x), ref(*x)
        np.testing.assert_allclose(v1, v2, rtol=1e-10, atol=1e-12)
        for a, b in zip(g1, g2):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_shared_lu_second_order_and_check_grads() -> None:
    make = general_make(3, ())
    for f in (solve_inv, solve_slogdet, solve_transposed):
        check_grads(f, *make(np.random.default_rng(1)), order=2)


def single_solve(a: np.ndarray, b: np.ndarray) -> Any:
    return np.sum(np.linalg.solve(a, b) ** 2)


def two_matrices(a: np.ndarray, b: np.ndarray) -> Any:
    return np.sum(np.linalg.solve(a, b)) + np.sum(np.linalg.solve(a + 1.0, b))


def updated_between(a: np.ndarray, b: np.ndarray) -> Any:
    a = a.copy()
    x = np.linalg.solve(a, b)
    a += 0.5  # a new value: its own factor, if any
    return np.sum(x) + np.sum(np.linalg.solve(a, b))


def test_shared_lu_near_misses_in_forward_graphs() -> None:
    a, b = general_make(4, ())(np.random.default_rng(0))
    for f in (single_solve, two_matrices, updated_between):
        h = irad.passes.run(irad.trace(f, a, b))
        assert LU not in prims(h) and "numpy.linalg.solve" in prims(h), f.__name__
        np.testing.assert_allclose(h(a, b), f(a, b), rtol=1e-12)
    # compiled: each version of the updated matrix has its own factor (its solve and the backward's)
    vg, prog = compiled(updated_between, a, b, argnums=(0, 1))
    facs = [op.args[0] for op in lu_ops(prog.graph)]
    assert len(facs) == len(set(facs))
    for op in prog.graph.ops:
        if op.prim == "irad.passes.structure.lu_solve":
            assert any(f.out == op.args[1] and f.args[0] == op.args[0] for f in lu_ops(prog.graph))
    calls(vg, updated_between, general_make(4, ()), (0, 1))


def test_shared_lu_not_for_a_matrix_written_in_place() -> None:
    a, b = general_make(3, ())(np.random.default_rng(0))
    g = irad.trace(lambda a, b: (np.linalg.solve(a, b), np.linalg.solve(a, 2.0 * b)), a, b)
    assert LU in prims(st.shared_lu(g))
    s = irad.ir.Var(100, g.inputs[0].type)
    h = g.replace(ops=g.ops + (irad.ir.Op("irad.primitives.add_into", (g.inputs[0], g.inputs[0]), (), (s,), irad.primitives.add_into),),
                  outputs=g.outputs + (s,))
    assert st.shared_lu(h) is h


def tri_general(k: np.ndarray, b: np.ndarray) -> Any:
    low = np.linalg.cholesky(k)
    return np.sum(np.linalg.solve(low, b)) + np.sum(np.linalg.inv(low)) + np.linalg.slogdet(low)[1]


def test_shared_lu_not_for_triangular_or_batched() -> None:
    rng = np.random.default_rng(0)
    k, b = spd(rng, 4), rng.standard_normal(4)
    vg, prog = compiled(tri_general, k, b, argnums=(0, 1))
    assert LU not in prims(prog.graph)
    calls(vg, tri_general, lambda r: (spd(r, 4), r.standard_normal(4)), (0, 1))

    def batched(a: np.ndarray, b: np.ndarray) -> Any:
        return np.sum(np.linalg.solve(a, b)) + np.sum(np.linalg.slogdet(a)[1])

    make = lambda r: (r.standard_normal((2, 3, 3)) + 6 * np.eye(3), r.standard_normal((2, 3, 1)))
    vg, prog = compiled(batched, *make(rng), argnums=(0, 1))
    assert LU not in prims(prog.graph) and "numpy.linalg.solve" in prims(prog.graph)
    calls(vg, batched, make, (0, 1))


def test_shared_lu_helpers_match_numpy() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 5, 9):
        for a in (rng.standard_normal((n, n)), rng.standard_normal((n, n)).astype(np.float32)):
            fac = st.lu_factor(a)
            sign, logdet = st.lu_slogdet(a, fac)
            s0, l0 = np.linalg.slogdet(a)
            assert sign == s0 and type(sign) is type(s0) and type(logdet) is type(l0)
            np.testing.assert_allclose(logdet, l0, rtol=1e-5 if a.dtype == np.float32 else 1e-12)
            np.testing.assert_allclose(st.lu_det(a, fac), np.linalg.det(a), rtol=1e-4 if a.dtype == np.float32 else 1e-12)
    sing = np.array([[1.0, 2.0], [2.0, 4.0]])
    fac = st.lu_factor(sing)
    assert st.lu_slogdet(sing, fac) == (0.0, -np.inf) and st.lu_det(sing, fac) == 0.0
    with pytest.raises(np.linalg.LinAlgError):
        st.lu_solve(sing, fac, np.ones(2), 0)


def test_shared_lu_without_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st._SciPy, "looked", True)
    monkeypatch.setattr(st._SciPy, "module", None)
    a, b = general_make(3, ())(np.random.default_rng(0))
    prog = irad.compile(solve_slogdet, a, b, argnums=(0, 1))
    assert LU not in prims(prog.graph) and "numpy.linalg.solve" in prims(prog.graph)
