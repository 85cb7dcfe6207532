"""numpy.fft and SciPy through plain user code, checked end to end with ``check_grads``.

The rules themselves are checked one by one (orders 1 and 2) by the case table in
tests/test_rules.py; here they meet the tracer: complex intermediates under a real loss,
keyword arguments, bound methods of SciPy's distribution instances, lazy registration.
SciPy is optional: its tests are skipped without it.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import irad
from irad.testing import check_grads

rng = np.random.default_rng(8)


def _scipy(module: str):
    return pytest.importorskip(module, reason="SciPy is optional (pip install irad[test] installs it)")


# ---- numpy.fft ---------------------------------------------------------------------------------


def power(x):
    return np.sum(np.abs(np.fft.fft(x)) ** 2)


def filtered(x):
    spec = np.fft.rfft(x, norm="ortho") * np.exp(0.1j * np.arange(x.shape[-1] // 2 + 1))
    return np.sum(np.fft.irfft(spec, n=x.shape[-1], norm="ortho") ** 2 * np.arange(x.shape[-1]))


def shifted(x):
    k = np.fft.fftshift(np.fft.fft2(x), axes=(0, 1))
    return np.sum(np.real(np.fft.ifft2(np.fft.ifftshift(k * np.conj(k), axes=(0, 1)))) ** 2)


def padded(x):
    return np.sum(np.abs(np.fft.rfftn(x, s=(6, 8), axes=(0, 1))) ** 2) + np.sum(np.fft.fftn(x, norm="forward").real)


@pytest.mark.parametrize("f,shape", [(f, s) for f in (power, filtered) for s in ((8,), (5,), (4, 6), (3, 5))]
                         + [(f, s) for f in (shifted, padded) for s in ((4, 6), (3, 5), (2, 3, 4))])
def test_fft_end_to_end(f, shape):
    x = rng.standard_normal(shape)
    check_grads(f, x)
    check_grads(f, x, order=2)


def test_power_spectrum_gradient_is_parseval():
    """sum |fft(x)|^2 = n sum x^2 (Parseval): the gradient is 2 n x."""
    x = rng.standard_normal(7)
    np.testing.assert_allclose(irad.grad(power)(x), 2 * 7 * x, rtol=1e-12)


def test_fft_of_complex_input():
    def f(re, im):
        z = re + 1j * im
        return np.sum(np.abs(np.fft.ifft(z, n=8)) ** 2) + np.sum(np.fft.fft(z, n=4).imag)

    check_grads(f, rng.standard_normal(6), rng.standard_normal(6))
    check_grads(f, rng.standard_normal(6), rng.standard_normal(6), order=2)


# ---- SciPy ---------------------------------------------------------------------------------------


def test_logsumexp_softmax():
    _scipy("scipy.special")
    import scipy.special

    def f(x):
        return np.sum(scipy.special.logsumexp(x, axis=1))

    def g(x, w):
        return scipy.special.logsumexp(x, b=w) + np.sum(scipy.special.softmax(x, axis=0) ** 2)

    def h(x):
        return np.sum(scipy.special.log_softmax(x, axis=1) * np.arange(4.0))

    x = rng.standard_normal((3, 4))
    for fn, args in ((f, (x,)), (g, (x, rng.uniform(0.5, 2.0, (3, 4)))), (h, (x,))):
        check_grads(fn, *args)
        check_grads(fn, *args, order=2)


def test_special_functions_in_user_code():
    _scipy("scipy.special")
    from scipy import special

    def f(x):
        p = special.expit(x)
        return (np.sum(special.gammaln(np.exp(x)) + special.xlogy(p, p) + special.erf(x) * special.i0(x))
                + np.sum(special.digamma(2.0 + x ** 2)) + special.betaln(1.5, np.exp(x[0])))

    x = rng.standard_normal(5)
    check_grads(f, x)
    check_grads(f, x, order=2)


def test_norm_logpdf_positional_and_keyword():
    _scipy("scipy.stats")
    import scipy.stats

    def pos(x, mu, sigma):
        return np.sum(scipy.stats.norm.logpdf(x, mu, sigma))

    def kw(x, mu, sigma):
        return np.sum(scipy.stats.norm.logpdf(x, loc=mu, scale=sigma))

    def scale_only(x, sigma):
        return np.sum(scipy.stats.norm.pdf(x, scale=sigma)) + np.sum(scipy.stats.norm.logcdf(x, 0.5, sigma))

    x = rng.standard_normal((3, 4))
    for fn, args in ((pos, (x, 0.3, 1.7)), (kw, (x, 0.3, 1.7)), (kw, (x, rng.standard_normal(4), 1.2)),
                     (scale_only, (x, 0.8))):
        check_grads(fn, *args)
        check_grads(fn, *args, order=2)
    # the value: d/dsigma sum logpdf = sum (z^2 - 1) / sigma
    mu, sigma = 0.3, 1.7
    z = (x - mu) / sigma
    g = irad.grad(kw, argnums=(1, 2))(x, mu, sigma)
    np.testing.assert_allclose(g, (np.sum(z / sigma), np.sum((z * z - 1) / sigma)), rtol=1e-12)


def test_distribution_rules_are_per_distribution():
    _scipy("scipy.stats")
    import scipy.stats
    x = rng.standard_normal(3)
    assert irad.has_rule(scipy.stats.norm.logpdf, x, 0.0, 1.0)
    assert irad.has_rule(scipy.stats.t.logpdf, x, 3.0)
    assert not irad.has_rule(scipy.stats.laplace.logpdf, x, 0.0, 1.0)


def test_other_distributions():
    _scipy("scipy.stats")
    from scipy import special, stats

    def f(x, df, a):
        return (np.sum(stats.t.logpdf(x, df, scale=2.0)) + np.sum(stats.gamma.logpdf(np.exp(x), a))
                + np.sum(stats.beta.logpdf(special.expit(x), a, 2.0)) + np.sum(stats.poisson.logpmf(3, np.exp(x))))

    def dirichlet(z, alpha):
        return stats.dirichlet.logpdf(special.softmax(z), alpha)

    def mvn(x, m, c):
        return np.sum(stats.multivariate_normal.logpdf(x, mean=m, cov=c @ c.T + np.eye(3)))

    x = rng.standard_normal(4)
    for fn, args in ((f, (x, 3.5, 1.7)), (dirichlet, (x, rng.uniform(0.5, 2.0, 4))),
                     (mvn, (rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal((3, 3))))):
        check_grads(fn, *args)
        check_grads(fn, *args, order=2)


def test_scipy_linalg_and_signal():
    _scipy("scipy.linalg")
    _scipy("scipy.signal")
    import scipy.linalg
    import scipy.signal

    def chol(a, b):
        c = scipy.linalg.cho_factor(a @ a.T + 3 * np.eye(3), lower=True)
        return np.sum(scipy.linalg.cho_solve(c, b) ** 2)

    def tri(a, b):
        x = scipy.linalg.solve_triangular(a + 3 * np.eye(3), b, lower=True, trans="T")
        return np.sum(x ** 2) + np.sum(scipy.linalg.sqrtm(a @ a.T + np.eye(3)))

    def conv(x, k):
        return np.sum(scipy.signal.convolve(x, k, mode="same") ** 2)

    a, b = rng.standard_normal((3, 3)), rng.standard_normal(3)
    for fn, args in ((chol, (a, b)), (tri, (a, b)), (conv, (rng.standard_normal(6), rng.standard_normal(3)))):
        check_grads(fn, *args)
        check_grads(fn, *args, order=2)


def test_rules_register_when_scipy_is_imported():
    """``import irad`` imports no SciPy; the rules appear once the program imports it."""
    _scipy("scipy.special")
    code = (
        "import sys, numpy as np, irad\n"
        "assert not any(m == 'scipy' or m.startswith('scipy.') for m in sys.modules), 'irad imported scipy'\n"
        "import scipy.special\n"
        "g = irad.grad(lambda x: np.sum(scipy.special.gammaln(x)))(np.array([1.5, 2.5]))\n"
        "np.testing.assert_allclose(g, scipy.special.digamma(np.array([1.5, 2.5])))\n"
        "assert 'scipy.stats' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_without_scipy():
    """With SciPy missing (blocked), irad imports and works and registers no SciPy rule."""
    code = (
        "import sys\n"
        "for m in ('scipy', 'scipy.special', 'scipy.stats', 'scipy.linalg', 'scipy.signal'):\n"
        "    sys.modules[m] = None\n"
        "import numpy as np, irad\n"
        "from irad.rules._common import TABLES\n"
        "from irad.rules import scipy_rules\n"
        "scipy_rules.load_all()\n"
        "assert not [t for t in TABLES if t.module.endswith('scipy_rules') and t.entries]\n"
        "assert irad.grad(lambda x: np.sum(np.abs(np.fft.fft(x)) ** 2))(np.ones(4)).shape == (4,)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bessel_order_is_not_silently_zero():
    sp = _scipy("scipy.special")
    x = np.linspace(0.5, 2.0, 4)
    irad.testing.check_grads(lambda x: sp.jv(1.5, x).sum(), x)  # the argument: fine
    with pytest.raises(irad.errors.GradError, match=r"scipy.special.jv: its derivative with respect to "
                                                    r"positional argument 0 is not implemented"):
        irad.grad(lambda v: sp.jv(v, x).sum())(1.5)
