"""Regressions of ``passes.structure.cholesky_consumers`` found in review: programs whose first
call was right and whose later calls crashed (the rewrite emitted ops in the wrong order)."""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.testing import check_grads

pytest.importorskip("scipy")


def spd(n, seed):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def _without_structure(f):
    return irad.value_and_grad(f, passes=[p for p in irad.passes.PIPELINE
                                          if p.__name__ not in ("cholesky_consumers", "triangular_solves")])


def two_logdets(K):
    L = np.linalg.cholesky(K)
    return np.sum(np.log(np.diag(L))) ** 2 + 3.0 * np.sum(np.log(np.diag(L)))


def gp_plus_logdet(K, y):
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * np.dot(y, a) + np.sum(np.log(np.diag(L))) + np.sum(y) * np.sum(np.log(np.diag(L)))


def rhs_is_the_factor(K):
    L = np.linalg.cholesky(K)
    x = np.linalg.solve(L.T, np.linalg.solve(L, L))
    return np.sum(x * np.arange(float(K.size)).reshape(K.shape))


@pytest.mark.parametrize("f, extra", [(two_logdets, ()), (gp_plus_logdet, (np.linspace(-1.0, 1.0, 4),)),
                                      (rhs_is_the_factor, ())], ids=lambda c: getattr(c, "__name__", ""))
def test_later_calls_run_and_agree(f, extra):
    vg, ref = irad.value_and_grad(f), _without_structure(f)
    for seed in (1, 2, 3):
        K = spd(4, seed)
        (v, g), (rv, rg) = vg(K, *extra), ref(K, *extra)
        np.testing.assert_allclose(v, rv, rtol=1e-10)
        np.testing.assert_allclose(g, rg, rtol=1e-8, atol=1e-10)
    assert any(op.prim == "irad.rules.decomp_rules.cho_inverse" or op.prim == "scipy.linalg.cho_solve"
               for op in vg.program(K, *extra).graph.ops)
    check_grads(f, spd(4, 5), *extra, argnums=0)
