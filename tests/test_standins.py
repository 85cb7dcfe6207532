"""Rule bodies traced on small stand-in shapes (passes/standins.py): the program is the one traced at
the real shapes, or the body is traced at the real shapes."""
from __future__ import annotations

import re
import sys
import warnings
from typing import Any

import numpy as np
import pytest

import irad
from irad import pytree
from irad.passes import inline as inline_mod
from irad.passes import standins
from irad.testing import check_grads
from irad.trace import trace_values

import test_rules
from functions import CASES

DIFF_CASES = [c for c in CASES if c.differentiable and not c.impure]


@pytest.fixture
def everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-ins for every size of every array, small or not (and larger than the size)."""
    monkeypatch.setattr(standins, "MIN_DIM", 2)
    monkeypatch.setattr(standins, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(standins, "SMALLER", False)


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the bodies merged from stand-in traces, and those refused."""
    seen = {"merged": 0, "refused": 0}
    merge = standins.merge

    def counted(*a: Any) -> Any:
        try:
            g = merge(*a)
        except standins.Mismatch:
            seen["refused"] += 1
            raise
        seen["merged"] += 1
        return g

    monkeypatch.setattr(standins, "merge", counted)
    return seen


def _source(f: Any, args: tuple[Any, ...], argnums: Any, on: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    """The program's source with stand-ins for every size (on) or none; constants' names
    folded (equal constants made at the real sizes are shared, so they number differently)."""
    with monkeypatch.context() as m:
        if not on:
            m.setattr(standins, "MIN_DIM", 10 ** 12)
        inline_mod._BODIES.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            vg = irad.value_and_grad(f, argnums=argnums)
            vg(*args)
            src = vg.program(*args).source
    return re.sub(r"\bc(_\d+)?\b", "c", src)


@pytest.mark.parametrize("case", DIFF_CASES, ids=[c.name for c in DIFF_CASES])
def test_corpus_programs_are_the_ones_traced_at_the_real_shapes(case: Any, everywhere: None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    args = case.make_args(np.random.default_rng(1))
    assert _source(case.fn, args, case.argnums, True, monkeypatch) == \
        _source(case.fn, args, case.argnums, False, monkeypatch)
    check_grads(case.fn, *args, argnums=case.argnums)  # on stand-ins, 2nd and later calls against FD


def _loss_of(fn: Any, kwargs: dict[str, Any]) -> Any:
    def loss(*xs: Any) -> Any:
        t = 0.0
        for leaf in pytree.flatten(fn(*xs, **kwargs))[0]:
            if isinstance(leaf, (np.ndarray, np.generic, float, complex)) and np.asarray(leaf).dtype.kind in "fc":
                t = t + np.sum(np.real(leaf) * 0.37)
        return t
    return loss


RULE_CASES = [p for p in test_rules._first_case_per_rule()
              if any(isinstance(a, np.ndarray) and a.dtype.kind in "fc" for a in p.values[1])]


@pytest.mark.parametrize("fn,args,kwargs,opts", RULE_CASES)
def test_every_rule_on_standins_gives_the_program_traced_at_the_real_shapes(fn: Any, args: Any, kwargs: Any,
                                                                            opts: Any, everywhere: None,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    nums = tuple(i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind in "fc")
    loss = _loss_of(fn, kwargs)
    try:
        off = _source(loss, args, nums, False, monkeypatch)
    except Exception as e:  # noqa: BLE001 (a case whose loss irad does not compile: nothing to compare)
        pytest.skip(f"not compiled at the real shapes either: {type(e).__name__}")
    assert _source(loss, args, nums, True, monkeypatch) == off


def test_the_corpus_is_traced_on_standins(everywhere: None, merges: dict[str, int]) -> None:
    """The comparisons above are not vacuous: most bodies merge, and some are refused."""
    for case in DIFF_CASES[:40]:
        inline_mod._BODIES.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            irad.value_and_grad(case.fn, argnums=case.argnums)(*case.make_args(np.random.default_rng(1)))
    assert merges["merged"] > 200 and merges["refused"] > 0


# ---- plan: which sizes, which stand-ins -----------------------------------------------------

def test_small_graphs_get_no_standins() -> None:
    assert standins.plan(irad.trace(lambda x: np.sum(x * x), np.ones((300, 200)))) is None  # 60,000 < 2**16
    assert standins.plan(irad.trace(lambda x: np.sum(x * x), np.ones((70000, 3)))) is not None


def test_standins_keep_the_order_of_sizes_and_stay_above_the_sizes_kept() -> None:
    def f(x: Any, y: Any, z: Any) -> Any:
        return np.sum(x) + np.sum(y) + np.sum(z)

    g = irad.trace(f, np.ones((70000, 3)), np.ones((600, 200)), np.ones((1000, 100)))
    sizes = standins.plan(g)
    assert sizes is not None
    big = [600, 1000, 70000]
    assert sorted(sizes.small[0]) == big  # 200 and 100 stay (arrays of 120,000 elements, but below MIN_DIM)
    for w in (0, 1):
        s = [sizes.small[w][d] for d in big]
        assert s == sorted(s) and len(set(s)) == 3 and min(s) > 200
        assert all(x < d for x, d in zip(s, big))
    gaps = [sizes.small[1][d] - sizes.small[0][d] for d in big]
    assert len(set(gaps)) == 3  # a difference of two sizes changes between the two traces
    assert set(sizes.small[0].values()).isdisjoint(sizes.small[1].values())


def test_too_many_sizes_get_no_standins() -> None:
    xs = [np.ones(70000 + k) for k in range(standins.MAX_SIZES + 1)]
    assert standins.plan(irad.trace(lambda *a: sum(np.sum(x) for x in a), *xs)) is None


# ---- merge: what becomes a real size, and what is refused -----------------------------------

def _two_traces(body: Any, shape: tuple[int, ...]) -> tuple[Any, Any, standins.Sizes]:
    sizes = standins.plan(irad.trace(lambda x: np.sum(x), np.ones(shape)))
    assert sizes is not None
    g1, g2 = (trace_values(body, (np.ones(sizes.shape(shape, w)),), {})[0] for w in (0, 1))
    return g1, g2, sizes


@pytest.mark.parametrize("body", [
    lambda x: x / x.shape[0],                      # an int count
    lambda x: x.reshape(x.shape[0], -1).sum(axis=0),
    lambda x: x + np.zeros(x.shape),              # a uniform constant of the size
    lambda x: np.broadcast_to(np.sum(x), x.shape) * 2.0,
    lambda x: x[: x.shape[0]],                     # a slice to the size itself
], ids=["count", "reshape", "zeros", "broadcast", "slice"])
def test_bodies_polymorphic_in_the_sizes_merge_to_the_real_trace(body: Any) -> None:
    shape = (70000, 2)
    g1, g2, sizes = _two_traces(body, shape)
    merged = standins.merge(g1, g2, sizes)
    real = trace_values(body, (np.ones(shape),), {})[0]
    assert str(merged) == str(real)
    for a, b in zip(merged.ops, real.ops):
        for x, y in zip(a.args, b.args):
            if isinstance(x, irad.ir.Const) and isinstance(x.value, np.ndarray):
                np.testing.assert_array_equal(x.value, y.value)
                assert x.value.shape == y.value.shape


@pytest.mark.parametrize("body,why", [
    (lambda x: x * (1.0 / x.shape[0]), "a number"),       # a float made from the size
    (lambda x: x[: x.shape[0] - 1], "an int"),             # an int made from the size
    (lambda x: x[1:], "an int"),                           # a shape made from the size
    (lambda x: x + np.arange(x.shape[0])[:, None], "array constant"),
    (lambda x: np.sum(x) if x.shape[0] % 2 else np.mean(x), "against|structure"),  # the stand-ins' parities differ
], ids=["reciprocal", "minus_one", "shorter", "arange", "parity"])
def test_bodies_not_polymorphic_are_refused(body: Any, why: str) -> None:
    g1, g2, sizes = _two_traces(body, (70000, 2))
    with pytest.raises(standins.Mismatch, match=why):
        standins.merge(g1, g2, sizes)


# ---- end to end, at the default thresholds ---------------------------------------------------

def _samples(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the arrays rule bodies are traced on (inline's trace_values calls)."""
    seen: list[tuple[int, ...]] = []
    module = sys.modules["irad.trace"]  # (irad.trace is the function)
    real = module.trace_values

    def spy(f: Any, args: Any, kwargs: Any, *rest: Any, **kw: Any) -> Any:
        for leaf in pytree.flatten((args, kwargs))[0]:
            if isinstance(leaf, np.ndarray):
                seen.append(leaf.shape)
        return real(f, args, kwargs, *rest, **kw)

    monkeypatch.setattr(module, "trace_values", spy)
    return seen


def logreg(w: Any, X: Any, y: Any) -> Any:
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z) + 0.01 * np.var(z, ddof=1)


def test_a_big_logistic_regression_traces_its_rules_on_standins(monkeypatch: pytest.MonkeyPatch,
                                                              merges: dict[str, int]) -> None:
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(80000, 4)), (rng.random(80000) < 0.5).astype(float)
    vg = irad.value_and_grad(logreg)
    with monkeypatch.context() as m:
        seen = _samples(m)
        vg(np.zeros(4), X, y)
    assert (129, 4) in seen and (80000, 4) not in seen  # matmul's body on stand-ins of X, never on X's size
    assert (80000,) in seen  # np.var's body (n - ddof) at the real shapes
    assert merges["merged"] >= 4 and merges["refused"] >= 1  # np.var's n - ddof: at the real shapes
    for w in (0.1 * rng.normal(size=4), 0.2 * rng.normal(size=4)):  # 2nd and 3rd calls
        z = X @ w
        want = X.T @ ((1.0 / (1.0 + np.exp(-z)) - y) / len(z) + 0.02 * (z - z.mean()) / (len(z) - 1))
        v, g = vg(w, X, y)
        np.testing.assert_allclose(v, logreg(w, X, y), rtol=1e-12)
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-15)
    check_grads(logreg, 0.1 * rng.normal(size=4), X, y, argnums=0)
    with monkeypatch.context() as m:  # the same program as traced at the real shapes
        m.setattr(standins, "MIN_DIM", 10 ** 12)
        inline_mod._BODIES.clear()
        ref = irad.value_and_grad(logreg)
        ref(np.zeros(4), X, y)
        assert re.sub(r"\bc(_\d+)?\b", "c", ref.program(np.zeros(4), X, y).source) == \
            re.sub(r"\bc(_\d+)?\b", "c", vg.program(np.zeros(4), X, y).source)


def test_a_users_rule_is_traced_at_its_real_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule whose pullback branches on a size (here, deliberately, to a wrong cotangent for
    small arrays): stand-ins would take the other branch.  A user's rule never gets them."""
    @irad.custom_vjp
    def scale(x: Any) -> Any:
        return 2.0 * x

    def fwd(x: Any) -> Any:
        return 2.0 * x, None

    def bwd(res: Any, g: Any) -> Any:
        return (2.0 * g if g.shape[0] > 1000 else 0.0 * g,)

    scale.defvjp(fwd, bwd)
    x = np.linspace(0.0, 1.0, 70000)
    vg = irad.value_and_grad(lambda x: np.sum(scale(x) * x))
    vg(x)
    _, g = vg(x + 1.0)
    np.testing.assert_allclose(g, 4.0 * (x + 1.0))
