"""What HIPS autograd's test suite found missing (issue 14, part 3), checked the way autograd's users
call it: rules against central finite differences at orders 1 and 2 (``check_rule``), several
shapes, broadcasting and 0-d inputs, whole functions through ``check_grads``, and the compiled
``irad.value_and_grad`` program on a *second* call (new values, same signature) against finite
differences of the function itself.

Covered: ``scipy.special`` ``gammainc``/``gammaincc`` (x and a), ``betainc``/``betaincc`` (x;
a, b raise GradError), ``stdtr`` (t; df raises), ``chdtr``/``chdtrc`` (x and v), ``yn``/``kn``,
``erf``/``erfc``/``erfcx``/``erfi``/``dawsn``/``wofz`` of complex input; ``scipy.stats``
``t``/``chi2``/``gamma``/``beta`` ``cdf``/``sf``/``logcdf``/``logsf``;
``scipy.stats.multivariate_normal.entropy``; ``scipy.linalg.solve_banded``;
``scipy.special.logsumexp`` with ``keepdims`` and ``b``; ``np.partition`` and ``a.partition()``;
dicts read with ``.get`` (and the other ways of reading one: ``dict.get(d, k)``,
``operator.itemgetter``, ``operator.methodcaller``).
"""
from __future__ import annotations

import functools
import operator

import numpy as np
import pytest

import irad
from irad.errors import GradError
from irad.rules import scipy_rules
from irad.testing import check_grads, check_rule, numerical_vjp

_WHY = "the scipy part of autograd's surface needs SciPy"
sla = pytest.importorskip("scipy.linalg", reason=_WHY)
sp = pytest.importorskip("scipy.special", reason=_WHY)
st = pytest.importorskip("scipy.stats", reason=_WHY)

rng = np.random.default_rng(20250303)


def R(*shape):
    return rng.standard_normal(shape)


def P(*shape):
    """Positive values away from 0."""
    return rng.uniform(0.5, 2.0, shape)


def I(*shape):  # noqa: E743
    """Values in (0.1, 0.9)."""
    return rng.uniform(0.1, 0.9, shape)


def C(*shape):
    return R(*shape) + 1j * R(*shape)


def spd(n):
    a = R(n, n)
    return a @ a.T + n * np.eye(n)


def rule_orders(fn, *args, **kw):
    """``check_rule`` at orders 1 and 2."""
    check_rule(fn, *args, **kw)
    check_rule(fn, *args, order=2, rtol=1e-4, atol=1e-6, **kw)


def second_call(f, first, second, argnums=(0,), rtol=1e-5, atol=1e-8):
    """The compiled ``value_and_grad`` of ``f``, called at ``first`` and then at ``second``: the
    second call's value and gradient match ``f`` and its finite differences there (for a complex
    argument, JAX's convention: df/dx - i df/dy, where ``numerical_vjp`` gives df/dx + i df/dy)."""
    vg = irad.value_and_grad(f, argnums=argnums)
    vg(*first)
    value, grads = vg(*second)
    np.testing.assert_allclose(value, f(*second), rtol=1e-12)
    expected = numerical_vjp(f, tuple(second), 1.0)
    grads = grads if isinstance(argnums, tuple) else (grads,)
    for i, g in zip(argnums if isinstance(argnums, tuple) else (argnums,), grads):
        np.testing.assert_allclose(g, np.conj(expected[i]), rtol=rtol, atol=atol)


# ---- scipy.special: incomplete gamma and beta, t and chi-square ------------------------------

#: (function, argument makers, positions checked by finite differences)
SPECIAL_CASES = [
    ("gammainc", sp.gammainc, [lambda *s: P(*s) * 2, lambda *s: P(*s) * 2], None),
    ("gammaincc", sp.gammaincc, [lambda *s: P(*s) * 2, lambda *s: P(*s) * 3], None),
    ("betainc", sp.betainc, [P, P, I], (2,)),
    ("betaincc", getattr(sp, "betaincc", None), [P, P, I], (2,)),   # (SciPy >= 1.11)
    ("stdtr", sp.stdtr, [lambda *s: P(*s) * 3, R], (1,)),
    ("chdtr", sp.chdtr, [lambda *s: P(*s) * 3, lambda *s: P(*s) * 2], None),
    ("chdtrc", sp.chdtrc, [lambda *s: P(*s) * 3, lambda *s: P(*s) * 2], None),
    ("erfcx", sp.erfcx, [R], None),
    ("erfi", sp.erfi, [R], None),
    ("dawsn", sp.dawsn, [R], None),
]
SHAPES = {"scalar": None, "0d": (), "vector": (3,), "matrix": (2, 3)}


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("name,fn,makers,wrt", SPECIAL_CASES, ids=[c[0] for c in SPECIAL_CASES])
def test_special_shapes(name, fn, makers, wrt, shape):
    if fn is None:
        pytest.skip(f"scipy.special.{name} is not in this SciPy")
    s = SHAPES[shape]
    args = [float(m()[()]) if s is None else np.asarray(m(*s)) for m in makers]
    rule_orders(fn, *args, wrt=wrt)


@pytest.mark.parametrize("name,fn,makers,wrt", [c for c in SPECIAL_CASES if len(c[2]) > 1],
                         ids=[c[0] for c in SPECIAL_CASES if len(c[2]) > 1])
def test_special_broadcasting(name, fn, makers, wrt):
    if fn is None:
        pytest.skip(f"scipy.special.{name} is not in this SciPy")
    shapes = [(3, 1), (4,), (3, 4)][-len(makers):] if len(makers) == 3 else [(3, 1), (4,)]
    rule_orders(fn, *[m(*s) for m, s in zip(makers, shapes)], wrt=wrt)
    rule_orders(fn, *[m(*s) for m, s in zip(makers, shapes[::-1])], wrt=wrt)


def test_integer_order_bessel():
    for fn in (sp.yn, sp.kn):
        rule_orders(fn, np.array([0, 1, 2, 3]), P(4) + 0.5)
        rule_orders(fn, 2, P(2, 3) + 0.5)
        rule_orders(fn, np.array([[0], [3]]), P(3) + 0.5)            # broadcasting
        rule_orders(fn, 1, 1.7)
    x = P(5) + 0.5
    for n in (0, 1, 4):   # the recurrences, against scipy's own derivatives
        np.testing.assert_allclose(irad.grad(lambda x: np.sum(sp.yn(n, x)))(x), sp.yvp(n, x), rtol=1e-12)
        np.testing.assert_allclose(irad.grad(lambda x: np.sum(sp.kn(n, x)))(x), sp.kvp(n, x), rtol=1e-12)
    second_call(lambda x: np.sum(sp.yn(2, x) * sp.kn(1, x)), (x,), (x + 0.3,))


def test_gammainc_in_a_against_mpmath():
    mp = pytest.importorskip("mpmath", reason="the reference derivatives in a need mpmath")
    mp.mp.dps = 50
    pts = [(0.1, 0.05), (0.5, 0.3), (2.0, 1.5), (2.0, 3.0), (1.0, 1.0), (5.0, 0.1), (0.3, 20.0), (10.0, 9.0),
           (10.0, 11.0), (100.0, 110.0), (1000.0, 1020.0), (0.01, 2.0), (50.0, 1.0)]
    a = np.array([p[0] for p in pts])
    x = np.array([p[1] for p in pts])
    for n in (1, 2):
        got = scipy_rules.gammainc_da(n, a, x)
        ref = np.array([float(mp.diff(lambda t: mp.gammainc(t, 0, xi, regularized=True), mp.mpf(ai), n))
                        for ai, xi in pts])
        np.testing.assert_allclose(got, ref, rtol=1e-13 if n == 1 else 1e-11)
    g = irad.grad(lambda a: np.sum(sp.gammainc(a, x)))(a)
    np.testing.assert_allclose(g, scipy_rules.gammainc_da(1, a, x), rtol=0)
    np.testing.assert_allclose(irad.grad(lambda a: np.sum(sp.gammaincc(a, x)))(a), -g, rtol=0)


def test_gammainc_in_a_against_extrapolated_differences():
    """(without mpmath) Richardson-extrapolated central differences of SciPy's own gammainc in a."""
    a = np.array([0.2, 0.9, 2.0, 3.7, 8.0, 25.0, 2.0, 6.0])
    x = np.array([0.1, 0.5, 1.5, 9.0, 4.0, 30.0, 12.0, 6.0])

    def cd(h):
        return (sp.gammainc(a + h, x) - sp.gammainc(a - h, x)) / (2 * h)
    h = 2e-2 * a
    d1, d2 = (4 * cd(h / 2) - cd(h)) / 3, (4 * cd(h / 4) - cd(h / 2)) / 3   # no h^2 term
    d = (16 * d2 - d1) / 15                                                  # no h^4 term
    np.testing.assert_allclose(scipy_rules.gammainc_da(1, a, x), d, rtol=1e-9)


def test_gammainc_in_a_against_jax():
    jax = pytest.importorskip("jax", reason="the comparison with JAX needs jax")
    jax.config.update("jax_enable_x64", True)
    from jax.scipy.special import gammainc as jgammainc
    a, x = rng.uniform(0.1, 30.0, 400), rng.uniform(0.01, 50.0, 400)
    ref = np.asarray(jax.vmap(jax.grad(jgammainc, argnums=(0, 1)))(a, x))
    got = irad.grad(lambda a, x: np.sum(sp.gammainc(a, x)), argnums=(0, 1))(a, x)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-10, atol=1e-300)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-10, atol=1e-300)


def test_gammainc_edges():
    assert scipy_rules.gammainc_da(1, 2.0, 0.0) == 0.0
    assert scipy_rules.gammainc_da(1, 2.0, np.inf) == 0.0
    assert np.isnan(scipy_rules.gammainc_da(1, -1.0, 2.0))
    assert np.isnan(scipy_rules.gammainc_da(1, 2.0, -1.0))
    assert scipy_rules.gammainc_da(0, 2.0, 1.5) == sp.gammainc(2.0, 1.5)


def test_gammainc_every_order_in_a():
    """d/da goes through gammainc_da(n, ...), whose own rule gives the next order: third order."""
    f = lambda a: np.sum(sp.gammainc(a, np.array([0.7, 3.0, 9.0])))   # series and continued fraction
    h = 1e-3
    a = np.array(2.5)
    d3 = irad.grad(irad.grad(irad.grad(f)))(a)
    d2 = lambda t: scipy_rules.gammainc_da(2, t, np.array([0.7, 3.0, 9.0])).sum()
    np.testing.assert_allclose(d3, (d2(a + h) - d2(a - h)) / (2 * h), rtol=1e-5)


def test_special_second_call():
    a, x = P(4) * 2, P(4) * 3
    second_call(lambda a, x: np.sum(sp.gammainc(a, x) ** 2), (a, x), (a * 1.3, x * 0.7), argnums=(0, 1))
    second_call(lambda v, x: np.sum(np.log(sp.chdtrc(v, x))), (a, x), (a + 1.0, x + 0.5), argnums=(0, 1))
    b = P(4)
    second_call(lambda x: np.sum(sp.betainc(a, b, x) * x), (I(4),), (I(4),))
    second_call(lambda t: np.sum(sp.stdtr(3.5, t) ** 2), (R(4),), (R(4),))


@pytest.mark.parametrize("fn,pos,args", [
    (sp.betainc, 0, (1.5, 2.0, np.array([0.2, 0.7]))),
    (sp.betainc, 1, (1.5, 2.0, np.array([0.2, 0.7]))),
    (sp.stdtr, 0, (3.0, np.array([0.2, -1.7]))),
], ids=["betainc-a", "betainc-b", "stdtr-df"])
def test_not_implemented_arguments_raise(fn, pos, args):
    """No accurate derivative (JAX has none either): a GradError naming the function, never a 0."""
    def f(v):
        full = list(args)
        full[pos] = v
        return np.sum(fn(*full))
    with pytest.raises(GradError, match=fn.__name__):
        irad.grad(f)(args[pos])


# ---- scipy.stats cdfs ------------------------------------------------------------------------

DISTS = [  # (name, standard args: x then shapes, positions with derivatives, a loc/scale-friendly x)
    ("t", lambda: (R(4), P(4) * 3), (1,)),
    ("chi2", lambda: (P(4) * 2, P(4) * 3), (1, 2)),
    ("gamma", lambda: (P(4) * 2, P(4) + 1), (1, 2)),
    ("beta", lambda: (I(4) * 0.5 + 0.2, P(4), P(4)), (1,)),
]
METHODS = ["cdf", "sf", "logcdf", "logsf"]


@pytest.mark.parametrize("meth", METHODS)
@pytest.mark.parametrize("name,make,diff", DISTS, ids=[d[0] for d in DISTS])
def test_stats_cdf_rules(name, make, diff, meth):
    dist, fn = getattr(st, name), getattr(st.rv_continuous, meth)
    args = make()
    nshape = len(args) - 1
    rule_orders(fn, dist, *args, wrt=(1,) + diff[1:])                       # standard form
    loc, scale = 0.1 * R(4), P(4)
    x = args[0] * scale + loc
    full = (x,) + args[1:] + (loc, scale)
    rule_orders(fn, dist, *full, wrt=(1,) + diff[1:] + (2 + nshape, 3 + nshape))
    # broadcasting: one shape parameter for a (3, 4) array of points
    xb = np.reshape(np.concatenate([args[0]] * 3), (3, 4)) * 0.9
    rule_orders(fn, dist, xb, *[a[:1] for a in args[1:]], wrt=(1,) + diff[1:])


@pytest.mark.parametrize("name,make,diff", DISTS, ids=[d[0] for d in DISTS])
def test_stats_cdf_user_calls(name, make, diff):
    """As users write it: loc and scale by keyword, orders 1 and 2, the second call."""
    dist = getattr(st, name)
    args = make()
    shapes = args[1:]
    loc, scale = 0.2, 1.5
    x = args[0] * scale + loc

    def f(x, loc, scale):
        return np.sum(dist.cdf(x, *shapes, loc=loc, scale=scale) + dist.logsf(x, *shapes, loc=loc, scale=scale))

    check_grads(f, x, loc, scale, order=2)
    second_call(f, (x, loc, scale), (x * 1.01, loc + 0.01, scale * 0.98), argnums=(0, 1, 2))
    if len(diff) > 1:   # the shape parameter (chi2's df, gamma's a)
        g = lambda s, x: np.sum(dist.cdf(x, s))
        check_grads(g, shapes[0], args[0], order=2)
        second_call(g, (shapes[0], args[0]), (shapes[0] * 1.1, args[0]), argnums=(0, 1))


@pytest.mark.parametrize("name,args,pos", [
    ("t", (np.array([0.3, -1.0]), 3.0), 1), ("beta", (np.array([0.3, 0.6]), 2.0, 3.0), 1),
    ("beta", (np.array([0.3, 0.6]), 2.0, 3.0), 2)], ids=["t-df", "beta-a", "beta-b"])
def test_stats_cdf_shape_raises(name, args, pos):
    dist = getattr(st, name)

    def f(v):
        full = list(args)
        full[pos] = v
        return np.sum(dist.cdf(*full))
    with pytest.raises(GradError, match="cdf"):
        irad.grad(f)(args[pos])


def test_stats_cdf_outside_support():
    g = irad.grad(lambda x: np.sum(st.gamma.cdf(x, 2.0)))(np.array([-1.0, 0.0, 2.0]))
    np.testing.assert_allclose(g, [0.0, 0.0, st.gamma.pdf(2.0, 2.0)])
    g = irad.grad(lambda x: np.sum(st.beta.cdf(x, 2.0, 3.0)))(np.array([-1.0, 0.5, 2.0]))
    np.testing.assert_allclose(g, [0.0, st.beta.pdf(0.5, 2.0, 3.0), 0.0])
    g = irad.grad(lambda a: np.sum(st.gamma.cdf(np.array([-1.0, 2.0]), a)))(2.0)
    np.testing.assert_allclose(g, scipy_rules.gammainc_da(1, 2.0, 2.0))


def test_stats_erlang_uses_gammas_rules():
    x = P(3) * 2
    check_grads(lambda x: np.sum(st.erlang.cdf(x, 3) + st.erlang.logpdf(x, 3)), x, order=2)


# ---- complex input: the holomorphic convention (no conjugate) ----------------------------------

HOLO = [
    (sp.erf, lambda z: 2.0 / np.sqrt(np.pi) * np.exp(-z * z)),
    (sp.erfc, lambda z: -2.0 / np.sqrt(np.pi) * np.exp(-z * z)),
    (sp.erfcx, lambda z: 2.0 * z * sp.erfcx(z) - 2.0 / np.sqrt(np.pi)),
    (sp.erfi, lambda z: 2.0 / np.sqrt(np.pi) * np.exp(z * z)),
    (sp.dawsn, lambda z: 1.0 - 2.0 * z * sp.dawsn(z)),
    (sp.wofz, lambda z: 2.0j / np.sqrt(np.pi) - 2.0 * z * sp.wofz(z)),
]


@pytest.mark.parametrize("fn,deriv", HOLO, ids=[f[0].__name__ for f in HOLO])
def test_complex_input(fn, deriv):
    for z in (complex(0.3, -0.4), np.array(0.2 + 0.5j), C(3) * 0.7, C(2, 3) * 0.7):
        rule_orders(fn, z)
    z = C(4) * 0.7
    _, pb = irad.vjp(fn, z)
    u = C(4)
    (zbar,) = pb(u)
    np.testing.assert_allclose(zbar, u * deriv(z), rtol=1e-12)        # ybar * f'(z), no conjugate
    check_grads(lambda z: np.sum(np.abs(fn(z)) ** 2), z, order=2)     # a real function of complex z
    second_call(lambda z: np.sum(np.real(fn(z)) * np.imag(fn(z))), (z,), (z * 0.9 + 0.1j,))


@pytest.mark.parametrize("name", ["erfcx", "wofz"])
def test_complex_against_jax(name):
    jax = pytest.importorskip("jax", reason="the comparison with JAX needs jax")
    jax.config.update("jax_enable_x64", True)
    jf = getattr(jax.scipy.special, name)
    z, u = C(5) * 0.7, C(5)
    ref = np.asarray(jax.vjp(jf, z)[1](u)[0])
    got = irad.vjp(getattr(sp, name), z)[1](u)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-10)


def test_complex_erf_against_autograd():
    ag = pytest.importorskip("autograd", reason="the comparison with autograd needs autograd")
    import autograd.scipy.special as asp
    z, u = C(5) * 0.7, C(5)
    for name in ("erf", "erfc"):
        ref = ag.make_vjp(getattr(asp, name))(z)[0](u)
        np.testing.assert_allclose(irad.vjp(getattr(sp, name), z)[1](u)[0], ref, rtol=1e-12)


# ---- scipy.linalg.solve_banded ---------------------------------------------------------------


def band(nl, nu, m, cplx=False, batch=()):
    ab = R(*batch, nl + nu + 1, m) + (1j * R(*batch, nl + nu + 1, m) if cplx else 0)
    ab[..., nu, :] += 4.0 * (nl + nu + 1)
    return ab


def dense(ab, nl, nu):
    m = ab.shape[-1]
    a = np.zeros(ab.shape[:-2] + (m, m), dtype=ab.dtype)
    for i in range(m):
        for j in range(max(0, i - nl), min(m, i + nu + 1)):
            a[..., i, j] = ab[..., nu + i - j, j]
    return a


@pytest.mark.parametrize("nl,nu", [(0, 0), (1, 1), (2, 1), (0, 2), (3, 0)])
@pytest.mark.parametrize("bshape", [(5,), (5, 2)], ids=["vector", "matrix"])
def test_solve_banded(nl, nu, bshape):
    ab = band(nl, nu, 5)
    b = R(*bshape)
    rule_orders(sla.solve_banded, (nl, nu), ab, b)
    rule_orders(sla.solve_banded, (nl, nu), band(nl, nu, 5, cplx=True), R(*bshape) + 1j * R(*bshape))
    # ab's cotangent is the dense solve's, read on the band (its unused corners get 0)
    w = R(*bshape)
    g_ab, g_b = irad.grad(lambda ab, b: np.sum(w * sla.solve_banded((nl, nu), ab, b)), argnums=(0, 1))(ab, b)
    ga, gb = irad.grad(lambda a, b: np.sum(w * np.linalg.solve(a, b)), argnums=(0, 1))(dense(ab, nl, nu), b)
    np.testing.assert_allclose(g_b, gb, rtol=1e-10)
    on_band = dense(np.ones_like(ab), nl, nu) != 0
    np.testing.assert_allclose(dense(g_ab, nl, nu), np.where(on_band, ga, 0.0), rtol=1e-10, atol=1e-14)
    f = lambda ab, b: np.sum(np.sin(sla.solve_banded((nl, nu), ab, b)))
    second_call(f, (ab, b), (band(nl, nu, 5), R(*bshape)), argnums=(0, 1))


def test_solve_banded_corners_and_edge_cases():
    ab = band(1, 2, 4)
    g = irad.grad(lambda ab: np.sum(sla.solve_banded((1, 2), ab, np.ones(4))))(ab)
    assert g[0, 0] == g[0, 1] == g[1, 0] == g[3, 3] == 0.0            # the '*' entries are not read
    rule_orders(sla.solve_banded, (1, 1), band(1, 1, 1), R(1))          # 1 x 1
    rule_orders(sla.solve_banded, (1, 1), band(1, 1, 4, batch=(2,)), R(2, 4, 3))   # batched
    rule_orders(sla.solve_banded, (1, 1), band(1, 1, 4, batch=(2,)), R(4))
    ab, b = band(1, 1, 4), R(4)
    ab0, b0 = ab.copy(), b.copy()
    irad.grad(lambda ab, b: np.sum(sla.solve_banded((1, 1), ab, b, overwrite_ab=True, overwrite_b=True)),
              argnums=(0, 1))(ab, b)
    np.testing.assert_array_equal(ab, ab0)                             # the rule never works in place
    np.testing.assert_array_equal(b, b0)
    check_grads(lambda ab, b: sla.solve_banded((1, 1), ab, b, check_finite=False), ab, b, order=2)


# ---- scipy.stats.multivariate_normal.entropy ---------------------------------------------------


def test_mvn_entropy():
    mvn = type(st.multivariate_normal)
    c = spd(3)
    rule_orders(mvn.entropy, st.multivariate_normal, R(3), c)
    rule_orders(mvn.entropy, st.multivariate_normal, None, c + np.triu(R(3, 3), 1))   # upper ignored
    rule_orders(mvn.entropy, st.multivariate_normal, R(3), P(3))                     # diagonal
    rule_orders(mvn.entropy, st.multivariate_normal, R(3), 1.5)                      # c I
    rule_orders(mvn.entropy, st.multivariate_normal, None, 1.5)                      # 1-d
    rule_orders(mvn.entropy, st.multivariate_normal, None, np.array([[1.7]]))
    # as users call it, against 0.5 logdet(2 pi e C) of the symmetric matrix
    ent = lambda c: st.multivariate_normal.entropy(cov=c)
    ref = lambda c: 0.5 * np.linalg.slogdet(2 * np.pi * np.e * (c + c.T) / 2)[1]
    sym = lambda c: (c + c.T) / 2
    np.testing.assert_allclose(ent(c), ref(c))
    g = irad.grad(lambda c: ent(sym(c)))(c)
    np.testing.assert_allclose(g, irad.grad(ref)(c), rtol=1e-10)
    check_grads(lambda c: ent(sym(c)), c, order=2)
    check_grads(lambda m, c: st.multivariate_normal.entropy(m, sym(c)), R(3), c, order=2)
    second_call(lambda c: ent(sym(c)) ** 2, (c,), (spd(3),))


# ---- scipy.special.logsumexp: keepdims and b, every combination ---------------------------------

LSE_B = {"none": None, "same": (3, 4), "row": (4,), "col": (3, 1), "scalar": ()}


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)], ids=str)
@pytest.mark.parametrize("bname", list(LSE_B))
def test_logsumexp_keepdims_b(axis, keepdims, bname):
    a = R(3, 4)
    if LSE_B[bname] is None:
        fs = [lambda a: sp.logsumexp(a, axis=axis, keepdims=keepdims),
              lambda a: sp.logsumexp(a, axis, None, keepdims)]
        args = (a,)
    else:
        b = P(*LSE_B[bname])
        fs = [lambda a, b: sp.logsumexp(a, axis=axis, b=b, keepdims=keepdims),   # b by keyword: a cotangent too
              lambda a, b: sp.logsumexp(a, axis, b, keepdims)]                   # positional
        args = (a, b)
    for f in fs:
        check_grads(f, *args, order=2)
        check_grads(lambda *xs: np.sum(np.sin(f(*xs))), *args, order=2)
    g = lambda *xs: np.sum(fs[0](*xs) ** 2)
    second_call(g, args, tuple(x * 1.1 for x in args), argnums=tuple(range(len(args))))


def test_logsumexp_b_broadcasts_a_and_zeros():
    check_grads(lambda a, b: sp.logsumexp(a, axis=1, b=b, keepdims=True), R(4), P(3, 4), order=2)
    check_grads(lambda a, b: sp.logsumexp(a, None, b, True), R(3, 1), P(3, 4), order=2)
    check_grads(lambda a, b: sp.logsumexp(a, (0, 2), b), R(2, 3, 4), P(3, 1), order=2)
    b = np.array([0.0, 1.0, 2.0, 0.5])                                     # a zero weight
    check_grads(lambda a, b: sp.logsumexp(a, axis=1, b=b), R(3, 4), b, order=2)
    for x in (0.4, np.float64(0.3), np.array(0.2)):                        # 0-d
        check_grads(lambda x: sp.logsumexp(x, keepdims=True), x, order=2)
        check_grads(lambda x, b: sp.logsumexp(x, b=b), x, 2.0, order=2)


# ---- np.partition ----------------------------------------------------------------------------


def test_partition_rule():
    rule_orders(np.partition, R(7), 3)
    rule_orders(np.partition, R(1), 0)
    rule_orders(np.partition, R(4, 6), [1, 3], axis=0)
    rule_orders(np.partition, R(4, 6), 2, 1)
    rule_orders(np.partition, R(3, 4), 5, None)
    rule_orders(np.partition, R(2, 3, 5), (0, 4), -1)
    rule_orders(np.partition, R(2000), 1000)          # long rows: argpartition disagrees with partition


def test_partition_like_autograd():
    x = R(7)
    check_grads(lambda x: np.partition(x, 3), x, order=2)
    check_grads(lambda x: np.partition(x, kth=3), x, order=2)
    check_grads(lambda x: np.sum(np.partition(x, (1, 4), axis=0)[:2] ** 3), R(6, 3), order=2)
    second_call(lambda x: np.sum(np.partition(x, 3)[:3] ** 2), (x,), (R(7),))


def test_ndarray_partition_in_place():
    def f(x):
        y = x * 1.0
        y.partition(2)
        return np.sum(y[:3] ** 2) + np.sum(y[3:])
    x = R(6)
    check_grads(f, x, order=2)
    second_call(f, (x,), (R(6),))

    def g(x):
        y = x.copy()
        y.partition(1, axis=0)
        return np.sum(np.arange(1.0, 5.0)[:, None] * y)
    check_grads(g, R(4, 3), order=2)


def test_partition_ties_share_evenly():
    x = np.array([1.0, 2.0, 2.0, 0.0, 2.0, 3.0])
    w = np.arange(6.0)
    g = irad.grad(lambda x: np.sum(w * np.partition(x, 2)))(x)
    y = np.partition(x, 2)
    expect = np.array([w[y == v].mean() for v in x])
    np.testing.assert_allclose(g, expect)


# ---- dicts read with .get --------------------------------------------------------------------


def _dict(shape, keys=("a", "b")):
    return {k: (float(P()[()]) if shape is None else P(*shape)) for k in keys}


@pytest.mark.parametrize("shape", [None, (), (3,), (2, 3)], ids=["float", "0d", "vector", "matrix"])
def test_dict_get(shape):
    d = _dict(shape)
    f = lambda d: np.sum(d.get("a") * d["b"])
    g = irad.grad(f)(d)
    np.testing.assert_allclose(g["a"], np.broadcast_to(d["b"], np.shape(d["a"])))
    np.testing.assert_allclose(g["b"], d["a"])
    check_grads(f, d, order=2)
    check_grads(lambda d, x: np.sum(np.sin(d.get("c", x)) * d["b"]), d, P(*(shape or ())), order=2)  # default
    check_grads(lambda d: np.sum(d.get("a", 2.0) * d.get("z", 3.0) * d["b"]), d, order=2)            # constants
    vg = irad.value_and_grad(f)
    vg(d)
    d2 = _dict(shape)
    v, g2 = vg(d2)                                      # the second call of the same program
    np.testing.assert_allclose(v, f(d2))
    np.testing.assert_allclose(g2["a"], np.broadcast_to(d2["b"], np.shape(d2["a"])))


def test_dict_get_key_present_then_absent():
    vg = irad.value_and_grad(lambda d: d.get("a", 0.5) * d["b"])
    assert vg({"a": 1.0, "b": 2.0}) == (2.0, {"a": 2.0, "b": 1.0})
    assert vg({"b": 2.0}) == (1.0, {"b": 0.5})
    assert vg({"a": 4.0, "b": 2.0}) == (8.0, {"a": 2.0, "b": 4.0})


@pytest.mark.parametrize("read", [
    lambda d, k: dict.get(d, k),                       # the method through its class
    lambda d, k: functools.partial(dict.get, d)(k),
    lambda d, k: operator.methodcaller("get", k)(d),
    lambda d, k: operator.itemgetter(k)(d),
    lambda d, k: dict.__getitem__(d, k),
    lambda d, k: getattr(d, "get")(k),
    lambda d, k: (lambda get: get(k))(d.get),
], ids=["dict.get", "partial", "methodcaller", "itemgetter", "dict.__getitem__", "getattr", "bound"])
def test_dict_read_forms(read):
    d = {"a": P(3), "b": P(3)}
    f = lambda d: np.sum(read(d, "a") * read(d, "b") ** 2)
    g = irad.grad(f)(d)
    np.testing.assert_allclose(g["a"], d["b"] ** 2)
    np.testing.assert_allclose(g["b"], 2 * d["a"] * d["b"])
    check_grads(f, d, order=2)


def test_dict_get_through_the_class_with_a_traced_default():
    f = lambda d, x: dict.get(d, "z", x) * d["b"]
    g = irad.grad(f, argnums=(0, 1))({"a": 1.0, "b": 2.0}, 3.0)
    assert g == ({"a": 0.0, "b": 3.0}, 2.0)
    check_grads(f, {"a": 1.0, "b": 2.0}, 3.0, order=2)


def test_container_methods_through_the_class():
    check_grads(lambda xs: list.__getitem__(xs, 1) * tuple.__getitem__((xs[0], 2.0), 0), [1.5, 2.5], order=2)
    check_grads(lambda d: sum(dict.values(d)) * sum(v for _, v in dict.items(d)), {"a": 1.0, "b": 2.0}, order=2)
    check_grads(lambda x: operator.attrgetter("T")(x).sum() * operator.methodcaller("sum", axis=0)(x)[1],
                R(2, 2), order=2)
    check_grads(lambda d: np.prod(operator.itemgetter("a", "b")(d)), {"a": 1.5, "b": 2.5}, order=2)


def test_nested_dict_get():
    d = {"p": {"w": P(3), "b": 0.5}, "s": 2.0}
    f = lambda d: np.sum(d.get("p").get("w") ** 2) * d.get("s") + d["p"].get("b", 0.0)
    check_grads(f, d, order=2)
    second_call(lambda w: f({"p": {"w": w, "b": 0.5}, "s": 2.0}), (P(3),), (P(3),))



def test_erfcx_dawsn_far_out():
    """The textbook partials cancel for large |x| (erfcx ~ 1/(x sqrt(pi)), dawsn ~ 1/(2x)): the
    rules take the asymptotic series there, to a few ulp of the derivatives' own expansions."""
    x = np.array([1e3, 1e8, 1e150])
    u = (1.0 / x) ** 2   # (three terms of each expansion: the next is below 1e-16 here)
    ref_erfcx = -u / np.sqrt(np.pi) * (1.0 - 1.5 * u + 3.75 * u * u)
    ref_dawsn = -0.5 * u * (1.0 + 1.5 * u + 3.75 * u * u)
    np.testing.assert_allclose(irad.grad(lambda x: np.sum(sp.erfcx(x)))(x), ref_erfcx, rtol=1e-15)
    np.testing.assert_allclose(irad.grad(lambda x: np.sum(sp.dawsn(x)))(x), ref_dawsn, rtol=1e-15)
    np.testing.assert_allclose(irad.grad(lambda x: np.sum(sp.dawsn(x)))(-x), ref_dawsn, rtol=1e-15)
    for fn in (sp.erfcx, sp.dawsn):   # both sides of the switch
        rule_orders(fn, np.array([9.9, 10.1, -9.9, -10.1, 30.0]))
    mp = pytest.importorskip("mpmath", reason="the reference derivatives near the switch need mpmath")
    mp.mp.dps = 40
    for t in (3.0, 9.9, 10.1, 13.0, 50.0):
        e = float(mp.diff(lambda s: mp.exp(s * s) * mp.erfc(s), t))
        d = float(mp.diff(lambda s: mp.sqrt(mp.pi) / 2 * mp.exp(-s * s) * mp.erfi(s), t))
        np.testing.assert_allclose(irad.grad(sp.erfcx)(t), e, rtol=5e-14)   # (2 x^2 ulp below 10)
        np.testing.assert_allclose(irad.grad(sp.dawsn)(t), d, rtol=5e-14)


# ---- multivariate_normal with a singular covariance (autograd's test_mvn_sing_cov) --------------

def test_mvn_singular_cov_differentiates_x_and_mean():
    cov = np.zeros((4, 4))
    cov[0, 0] = cov[1, 1] = 1.0

    def pdf(x, mean, cov):  # x varies only where the variance is not zero
        x = np.concatenate([x[:2], mean[2:]])
        return st.multivariate_normal.pdf(x, mean, cov, allow_singular=True)

    x0, m0 = np.concatenate((R(2), np.zeros(2))), np.concatenate((R(2), np.zeros(2)))
    check_grads(pdf, x0, m0, cov, argnums=(0, 1), order=2)
    g = irad.value_and_grad(lambda x, m: st.multivariate_normal.logpdf(x, m, cov, allow_singular=True),
                            argnums=(0, 1))
    for k in range(3):
        x, m = x0 + 0.1 * k, m0 - 0.05 * k
        val, (gx, gm) = g(x, m)
        # the pseudo-inverse quadratic form: only the first two coordinates count
        want = -(x - m) * np.array([1.0, 1.0, 0.0, 0.0])
        np.testing.assert_allclose(gx, want, atol=1e-12)
        np.testing.assert_allclose(gm, -want, atol=1e-12)
    with pytest.raises(GradError, match="not implemented"):
        irad.grad(pdf, argnums=2)(x0, m0, cov)
