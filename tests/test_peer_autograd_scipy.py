"""HIPS autograd's tests/test_scipy.py, ported to irad (plain ``scipy`` instead of
``autograd.scipy``; see tests/test_peer_autograd.py for the harness)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import irad
from irad.testing import check_grads

scipy = pytest.importorskip("scipy", reason="the ported scipy tests need SciPy")
from scipy import signal, special, stats  # noqa: E402
import scipy.linalg as spla  # noqa: E402

R = np.random.RandomState(1).randn
U = np.random.RandomState(2).uniform


def combo(fun, argnums, *arg_lists, order=1, **kw_lists):
    keys = list(kw_lists)
    for args in itertools.product(*arg_lists):
        for vals in itertools.product(*[kw_lists[k] for k in keys]):
            check_grads(fun, *args, argnums=argnums, order=order, **dict(zip(keys, vals)))


def unary(fun, lims, order=1):
    r = np.random.RandomState(3)
    t = lambda x: x * (lims[1] - lims[0]) + lims[0]
    combo(fun, (0,), [t(0.4), t(r.rand(2)), t(r.rand(3, 2)), t(r.rand(1, 2))], order=order)


def symmetrize_matrix_arg(fun, argnum):
    def symmetrized(*args, **kwargs):
        args = list(args)
        args[argnum] = 0.5 * (args[argnum] + np.swapaxes(args[argnum], -1, -2))
        return fun(*args, **kwargs)
    return symmetrized


# ---- stats -----------------------------------------------------------------------------------

def test_beta_pdf_logpdf():
    combo(stats.beta.pdf, [0, 1, 2], [U(0.0, 1.0, 4)], [R(4) ** 2 + 1.1], [R(4) ** 2 + 1.1])
    combo(stats.beta.logpdf, [0, 1, 2], [U(0.0, 1.0, 4)], [R(4) ** 2 + 1.1], [R(4) ** 2 + 1.1])


def test_gamma_pdf_logpdf():
    combo(stats.gamma.pdf, [0, 1], [R(4) ** 2 + 1.1], [R(4) ** 2 + 1.1])
    combo(stats.gamma.logpdf, [0, 1], [R(4) ** 2 + 1.1], [R(4) ** 2 + 1.1])


@pytest.mark.parametrize("name", ["pdf", "cdf", "sf", "logpdf", "logcdf", "logsf"])
def test_norm(name):
    fn = getattr(stats.norm, name)
    combo(fn, [0, 1, 2], [R(4)], [R(4)], [R(4) ** 2 + 1.1])
    combo(fn, [0, 1, 2], [R(4, 3)], [R(1, 3)], [R(4, 1) ** 2 + 1.1])


@pytest.mark.parametrize("name", ["cdf", "logpmf", "pmf"])
def test_poisson(name):
    fn = getattr(stats.poisson, name)
    combo(fn, [1], [np.round(R(4) ** 2)], [R(4) ** 2 + 1.1])
    combo(fn, [1], [np.round(R(4, 3) ** 2)], [R(4, 1) ** 2 + 1.1])


def test_t_pdf_logpdf():
    for fn in (stats.t.pdf, stats.t.logpdf):
        combo(fn, [0, 1, 2, 3], [R(4)], [R(4) ** 2 + 2.1], [R(4)], [R(4) ** 2 + 2.1])
        combo(fn, [0, 1, 2, 3], [R(4, 3)], [R(1, 3) ** 2 + 2.1], [R(4, 3)], [R(4, 1) ** 2 + 2.1])


def test_t_cdf():
    combo(stats.t.cdf, [0, 2], [R(4)], [R(4) ** 2 + 2.1], [R(4)], [R(4) ** 2 + 2.1])
    combo(stats.t.cdf, [0, 2], [R(4, 3)], [R(1, 3) ** 2 + 2.1], [R(4, 3)], [R(4, 1) ** 2 + 2.1])


def test_t_cdf_df_is_named_as_unsupported():
    # the shape parameter goes through the incomplete beta function (JAX has no derivative either)
    with pytest.raises(irad.errors.GradError, match="cdf"):
        check_grads(stats.t.cdf, R(4), R(4) ** 2 + 2.1, argnums=(1,))


def test_chi2_beta_gamma_cdf():
    combo(stats.chi2.cdf, [0], [R(4) ** 2 + 2.1], [R(4) ** 2 + 2.1])
    combo(stats.beta.cdf, [0], [U(0.0, 1.0, 4)], [R(4) ** 2 + 1.1], [R(4) ** 2 + 1.1])
    combo(stats.gamma.cdf, [0], [R(4) ** 2 + 2.1], [R(4) ** 2 + 1.1])


def make_psd(mat):
    return np.dot(mat.T, mat) + np.eye(mat.shape[0])


def test_mvn_pdf_logpdf():
    for fn in (stats.multivariate_normal.pdf, stats.multivariate_normal.logpdf):
        combo(symmetrize_matrix_arg(fn, 2), [0, 1, 2], [R(4)], [R(4)], [make_psd(R(4, 4))])
        combo(symmetrize_matrix_arg(fn, 2), [0, 1, 2], [R(5, 4)], [R(4)], [make_psd(R(4, 4))])


def test_dirichlet():
    alpha = np.random.RandomState(4).random(4) ** 2 + 1.2
    x = stats.dirichlet.rvs(alpha, size=1, random_state=5)[0, :]
    normalize = lambda x: x / np.sum(x)
    combo(lambda x, a: stats.dirichlet.pdf(normalize(x), a), [0], [x], [alpha])
    combo(stats.dirichlet.pdf, [1], [x], [alpha])
    combo(lambda x, a: stats.dirichlet.logpdf(normalize(x), a), [0], [x], [alpha])
    combo(stats.dirichlet.logpdf, [1], [x], [alpha])


# ---- misc ------------------------------------------------------------------------------------

def test_logsumexp():
    combo(special.logsumexp, [0], [1.1, R(4), R(3, 4)], axis=[None, 0], keepdims=[True, False])
    combo(special.logsumexp, [0], [R(3, 4), R(4, 5, 6), R(1, 5)], axis=[None, 0, 1], keepdims=[True, False])
    combo(special.logsumexp, [0], [R(4)], b=[np.exp(R(4))], axis=[None, 0], keepdims=[True, False])
    combo(special.logsumexp, [0], [R(2, 3, 4)], b=[np.exp(R(2, 3, 4))], axis=[None, 0, 1], keepdims=[True, False])
    x = R(1, 5)
    f = lambda a: special.logsumexp(a, axis=1, keepdims=True)
    check_grads(f, x, order=2)
    check_grads(lambda a: irad.vjp(f, a)[1](np.ones((1, 1)))[0], x)


def test_convolve():
    combo(signal.convolve, [0, 1], [R(4), R(5), R(6)], [R(2), R(3), R(4)], mode=["full", "valid"])
    combo(signal.convolve, [0, 1], [R(4, 3), R(5, 4), R(6, 7)], [R(2, 2), R(3, 2), R(4, 2), R(4, 1)],
          mode=["full", "valid"])


# ---- special ---------------------------------------------------------------------------------

def test_beta_betaln():
    combo(special.beta, [0, 1], [R(4) ** 2 + 1.1], [R(4) ** 2 + 1.1])
    combo(special.betaln, [0, 1], [R(4) ** 2 + 1.1], [R(4) ** 2 + 1.1])


def test_orders_are_static():
    combo(special.polygamma, [1], [0], [R(4) ** 2 + 1.3])
    combo(special.jn, [1], [2], [R(4) ** 2 + 1.3])
    combo(special.iv, [1], [U(1.0, 50.0, 4)], [R(4) ** 2 + 1.3])
    combo(special.ive, [1], [U(1.0, 50.0, 4)], [R(4) ** 2 + 1.3])


@pytest.mark.parametrize("name,lims", [
    ("psi", (0.3, 2.0)), ("digamma", (0.3, 2.0)), ("gamma", (0.3, 2.0)), ("gammaln", (0.3, 2.0)),
    ("rgamma", (0.3, 2.0)), ("j0", (0.2, 20.0)), ("j1", (0.2, 20.0)), ("y0", (0.2, 20.0)),
    ("y1", (0.2, 20.0)), ("i0", (0.2, 20.0)), ("i1", (0.2, 20.0)), ("erf", (-3.0, 3.0)),
    ("erfc", (-3.0, 3.0)), ("erfinv", (-0.95, 0.95)), ("erfcinv", (0.05, 1.95)), ("logit", (0.1, 0.9)),
    ("expit", (-4.05, 4.95)),
])
def test_special_unary(name, lims):
    unary(getattr(special, name), lims)


def test_gammasgn_has_no_gradient():
    x = np.array([0.5, 1.5])
    np.testing.assert_array_equal(irad.grad(lambda x: np.sum(special.gammasgn(x) * x))(x), special.gammasgn(x))


def test_multigammaln():
    combo(special.multigammaln, [0], [U(4.0, 5.0), U(4.0, 5.0, (2, 3))], [1, 2, 3])


def test_incomplete_gamma():
    combo(special.gammainc, [1], [1], [R(4) ** 2 + 1.3])
    combo(special.gammaincc, [1], [1], [R(4) ** 2 + 1.3])


def test_incomplete_beta_a_b_are_named_as_unsupported():
    with pytest.raises(irad.errors.GradError, match="betainc"):
        check_grads(special.betainc, 1.5, R(4) ** 2 + 1.3, U(0.0, 1.0, 4), argnums=(1,))


# ---- linalg ----------------------------------------------------------------------------------

def test_sqrtm():
    combo(symmetrize_matrix_arg(spla.sqrtm, 0), [0], [make_psd(R(3, 3))], order=2)


def test_solve_sylvester():
    combo(spla.solve_sylvester, [0, 1, 2], [R(3, 3)], [R(3, 3)], [R(3, 3)], order=2)
