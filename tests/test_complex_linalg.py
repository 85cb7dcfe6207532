"""Complex linear algebra in JAX's and HIPS autograd's convention (issue 14, part 2).

Each rule is checked three ways on complex inputs of several shapes (stacks of matrices where
the rule takes them):

- ``check_rule`` (the rule alone) and ``check_grads`` (whole functions through irad, orders 1
  and 2) against central finite differences, pairing cotangents with ``Re(sum(a * b))``;
- ``irad.vjp`` against ``jax.vjp`` (float64) on the same inputs and a random complex cotangent;
- against HIPS ``autograd`` where autograd has a complex rule.

JAX and autograd come with the bench extra (``pip install -e '.[bench]'``); without them those
tests are skipped with that reason.

The phases of ``eigh``'s eigenvectors and of ``svd``'s singular vectors are arbitrary (LAPACK
fixes them in no documented way), so their losses and cotangents are gauge-invariant: the
random cotangents are projected onto the ones that do not see a change of phase
(``_phase_free``), the losses use ``|v|``, ``u_k vh_k`` and the values.  ``eig``'s eigenvectors
are normalised by LAPACK (unit norm, largest component real): any cotangent works, and JAX
(``enable_eigvec_derivs``) differentiates through the same normalisation.  numpy's ``eigh``,
``eigvalsh`` and ``cholesky`` read one triangle (the other is its conjugate transpose, the
imaginary part of the diagonal is ignored), JAX's symmetrise their input: the JAX reference
reads the same triangle explicitly (``_tri_herm``).
"""
from __future__ import annotations

import numpy as np
import pytest

import irad
from irad.testing import check_grads, check_rule

rng = np.random.default_rng(20261201)

TOL = 1e-9  # relative agreement with JAX / autograd (the same LAPACK results, float64)


def R(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


def C(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _H(x: np.ndarray) -> np.ndarray:
    return np.conj(np.swapaxes(x, -1, -2))


def hpd(n: int, batch: tuple[int, ...] = ()) -> np.ndarray:
    """A complex Hermitian positive-definite matrix (or stack)."""
    a = C(*batch, n, n)
    return a @ _H(a) + n * np.eye(n)


def junk_other_triangle(a: np.ndarray, lower: bool) -> np.ndarray:
    """``a`` with the triangle numpy does not read (and the diagonal's imaginary part) changed."""
    n = a.shape[-1]
    junk = np.triu(C(*a.shape), 1) if lower else np.tril(C(*a.shape), -1)
    return a + junk + 1j * R(*a.shape[:-1])[..., None] * np.eye(n)


def _phase_free(v: np.ndarray, gv: np.ndarray, k: int | None = None) -> np.ndarray:
    """``gv`` minus the part that sees the phases of the first ``k`` columns of ``v`` (unit
    columns): afterwards Im(diag(v^T gv)) = 0, so <gv, v diag(i theta)> = 0 for every theta."""
    k = v.shape[-1] if k is None else k
    d = np.einsum("...ij,...ij->...j", gv[..., :k], v[..., :k])
    out = gv.copy()
    out[..., :k] = gv[..., :k] - np.conj(v[..., :k]) * (1j * np.imag(d))[..., None, :]
    return out


def svd_cotangent(u: np.ndarray, s: np.ndarray, vh: np.ndarray) -> tuple:
    """A random cotangent of (U, s, Vh) that does not see a joint phase change of a singular pair
    (u_k -> u_k e^{it}, vh_k -> e^{-it} vh_k) nor a unitary change of the extra columns of a full
    U / extra rows of a full Vh."""
    k = s.shape[-1]
    gu, gs, gvh = C(*u.shape), R(*s.shape), C(*vh.shape)
    d = (np.einsum("...ik,...ik->...k", gu[..., :k], u[..., :k])
         - np.einsum("...ki,...ki->...k", gvh[..., :k, :], vh[..., :k, :]))
    gu[..., :k] -= np.conj(u[..., :k]) * (1j * np.imag(d))[..., None, :]
    for g, x in ((gu, u), (np.swapaxes(gvh, -1, -2), np.swapaxes(vh, -1, -2))):  # extra basis
        if x.shape[-1] > k:
            x2, g2 = x[..., k:], g[..., k:]
            m = np.swapaxes(x2, -1, -2) @ g2  # must be Hermitian
            g[..., k:] = g2 - np.conj(x2) @ ((m - _H(m)) / 2)
    return gu, gs, gvh


def _tri_herm(xp, a, lower: bool):
    """The Hermitian matrix numpy's eigh/cholesky see: one triangle, its conjugate transpose,
    the real part of the diagonal."""
    t = xp.tril(a, -1) if lower else xp.triu(a, 1)
    return t + xp.conj(xp.swapaxes(t, -1, -2)) + xp.real(a * xp.eye(a.shape[-1]))


# ---- the peers -------------------------------------------------------------------------------


def _jax():
    jax = pytest.importorskip("jax", reason="jax (the bench extra) gives the reference VJPs")
    jax.config.update("jax_enable_x64", True)
    return jax


def _autograd():
    pytest.importorskip("autograd", reason="HIPS autograd (the bench extra) gives the reference VJPs")
    import autograd
    import autograd.numpy as anp
    return autograd, anp


def _leaves(x):
    if isinstance(x, (tuple, list)):
        return [leaf for item in x for leaf in _leaves(item)]
    return [np.asarray(x)]


def rel(got, ref) -> float:
    """max |got - ref| / max |ref| over matching pytrees."""
    gl, rl = _leaves(got), _leaves(ref)
    assert len(gl) == len(rl)
    num = max(float(np.max(np.abs(g - r), initial=0.0)) for g, r in zip(gl, rl))
    den = max(float(np.max(np.abs(r), initial=0.0)) for r in rl)
    return num / max(den, 1e-300)


def agree(name: str, got, ref, tol: float = TOL) -> None:
    for g, r in zip(_leaves(got), _leaves(ref)):
        assert g.shape == r.shape, f"{name}: shapes {g.shape} vs {r.shape}"
    d = rel(got, ref)
    print(f"AGREEMENT {name}: {d:.2e}")
    assert d < tol, f"{name}: relative difference {d:.3e}"


def irad_vjp(f, args, cot):
    """irad's VJP of ``f`` (a namedtuple result, ``SVDResult`` & co, as a plain tuple)."""
    def plain(*a):
        y = f(*a)
        return tuple(y) if isinstance(y, tuple) else y
    irad.vjp(plain, *args)  # the first call traces; the second runs the compiled programs
    y, pb = irad.vjp(plain, *args)
    return y, pb(cot)


def jax_vjp(jf, args, cot):
    jax = _jax()
    y, pb = jax.vjp(jf, *args)
    return jax.tree_util.tree_map(np.asarray, y), tuple(np.asarray(c) for c in pb(cot))


def autograd_vjp(af, args, cot):
    autograd, _ = _autograd()
    out = []
    for i in range(len(args)):
        pb, _y = autograd.make_vjp(af, argnum=i)(*args)
        out.append(np.asarray(pb(cot)))
    return tuple(out)


def both(name: str, f, jf, args, cot, tol: float = TOL) -> None:
    """irad's VJP of ``f`` against jax's of ``jf`` (values too)."""
    y, got = irad_vjp(f, args, cot)
    yj, ref = jax_vjp(jf, args, cot)
    agree(name + " (value)", y, yj, 1e-10)
    agree(name, got, ref, tol)


# ---- svd -------------------------------------------------------------------------------------

SVD_SHAPES = [(4, 3), (3, 5), (4, 4), (2, 4, 3), (2, 3, 5)]


def svd_losses(shape):
    """A real loss of svd's factors that does not depend on the singular vectors' phases, for
    numpy and for jax.numpy (the same weights)."""
    m, n = shape[-2:]
    k = min(m, n)
    w_s, w_u, w_p = R(k), R(m, k), C(k, m, n)

    def make(xp):
        def loss(a):
            u, s, vh = xp.linalg.svd(a, full_matrices=False)
            pairs = xp.einsum("...ik,...kj,kij->...", u, vh, w_p)   # sum_k <W_k, u_k vh_k>
            return xp.sum(s * w_s) + xp.sum(xp.abs(u) ** 2 * w_u) + xp.sum(xp.real(pairs) + xp.imag(pairs))
        return loss
    return make


@pytest.mark.parametrize("shape", SVD_SHAPES, ids=str)
def test_svd_reduced_fd(shape):
    a = C(*shape)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    check_rule(np.linalg.svd, a, ybar=svd_cotangent(u, s, vh), full_matrices=False)
    check_grads(svd_losses(shape)(np), a, order=2)


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 4), (5, 3), (2, 3, 5)], ids=str)
def test_svd_full_matrices_fd(shape):
    """Full factors: the extra columns of U (rows of Vh) are a basis of the complement, exact for
    cotangents that do not see its own rotation (nor the phases)."""
    a = C(*shape)
    u, s, vh = np.linalg.svd(a)
    check_rule(np.linalg.svd, a, ybar=svd_cotangent(u, s, vh))
    check_rule(np.linalg.svd, a, True, ybar=svd_cotangent(u, s, vh))

    def loss(a):  # the projector onto the complement is basis-free
        u, s, vh = np.linalg.svd(a)
        k = s.shape[-1]
        pu = u[..., :, k:] @ np.conj(np.swapaxes(u[..., :, k:], -1, -2))
        pv = np.conj(np.swapaxes(vh[..., k:, :], -1, -2)) @ vh[..., k:, :]
        return np.sum(np.real(pu) * wu) + np.sum(np.imag(pv) * wv) + np.sum(np.abs(u[..., :, :k] * vh[..., 0:1, 0:1]))
    wu, wv = R(shape[-2], shape[-2]), R(shape[-1], shape[-1])
    check_grads(loss, a, order=2)


@pytest.mark.parametrize("shape", SVD_SHAPES + [(3, 2, 2)], ids=str)
def test_svd_values_fd(shape):
    a = C(*shape)
    check_rule(np.linalg.svd, a, compute_uv=False, order=2)
    check_rule(np.linalg.svd, a, False, False, order=2)
    if hasattr(np.linalg, "svdvals"):
        check_rule(np.linalg.svdvals, a, order=2)
    w = R(*shape[:-2], min(shape[-2:]))
    check_grads(lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 2 * w), a, order=2)


@pytest.mark.parametrize("dtype", [float, complex])
@pytest.mark.parametrize("full", [False, True])
def test_svd_rank_deficient_values_stay_finite(dtype, full):
    """A loss of the singular values alone, through svd's full output, at an exactly singular
    matrix: the 1/s terms meet zero cotangents and count as 0 (as in JAX), no nan."""
    a = np.zeros((3, 2), dtype)
    a[0, 0] = 1.5 + (0.5j if dtype is complex else 0)
    a[1, 0] = -0.5
    g = irad.grad(lambda a: np.sum(np.linalg.svd(a, full_matrices=full)[1] ** 2))(a)
    np.testing.assert_allclose(g, 2 * np.conj(a), atol=1e-12)


@pytest.mark.parametrize("shape", SVD_SHAPES + [(3, 3)], ids=str)
def test_svd_jax(shape):
    jax = _jax()
    a = C(*shape)
    full = shape == (3, 3)  # JAX differentiates full factors of square matrices only
    u, s, vh = np.linalg.svd(a, full_matrices=full)
    both(f"svd{shape} full={full}", lambda a: np.linalg.svd(a, full_matrices=full),
         lambda a: tuple(jax.numpy.linalg.svd(a, full_matrices=full)), (a,), svd_cotangent(u, s, vh))
    g = R(*s.shape)
    both(f"svd{shape} compute_uv=False", lambda a: np.linalg.svd(a, compute_uv=False),
         lambda a: jax.numpy.linalg.svd(a, compute_uv=False), (a,), g)
    if hasattr(np.linalg, "svdvals"):
        both(f"svdvals{shape}", np.linalg.svdvals, jax.numpy.linalg.svdvals, (a,), g)
    make = svd_losses(shape)
    agree(f"svd{shape} loss grad", irad.grad(make(np))(a), np.asarray(jax.grad(make(jax.numpy))(a)))


@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (4, 4), (2, 4, 3)], ids=str)
def test_svd_autograd(shape):
    _, anp = _autograd()
    a = C(*shape)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    cot = svd_cotangent(u, s, vh)
    _, got = irad_vjp(lambda a: np.linalg.svd(a, full_matrices=False), (a,), cot)
    agree(f"svd{shape} autograd", got, autograd_vjp(lambda a: anp.linalg.svd(a, full_matrices=False), (a,), cot))
    g = R(*s.shape)
    _, got = irad_vjp(lambda a: np.linalg.svd(a, compute_uv=False), (a,), g)
    agree(f"svd{shape} compute_uv=False autograd", got,
          autograd_vjp(lambda a: anp.linalg.svd(a, compute_uv=False), (a,), g))


# ---- eigh / eigvalsh -------------------------------------------------------------------------

EIGH_CASES = [((4, 4), "L"), ((4, 4), "U"), ((3, 3), "U"), ((2, 3, 3), "L"), ((2, 2, 3, 3), "U")]


def _eigh_args(shape, uplo):
    lower = uplo == "L"
    a = junk_other_triangle(_tri_herm(np, C(*shape), lower) + 0.0j, lower)
    return a, lower


def eigh_loss(w_w, w_v):
    def loss(a, *args):
        w, v = np.linalg.eigh(a, *args)
        return np.sum(w * w_w) + np.sum(np.abs(v) ** 2 * w_v)
    return loss


@pytest.mark.parametrize("shape,uplo", EIGH_CASES, ids=str)
def test_eigh_fd(shape, uplo):
    a, lower = _eigh_args(shape, uplo)
    w, v = np.linalg.eigh(a, uplo)
    check_rule(np.linalg.eigh, a, uplo, ybar=(R(*w.shape), _phase_free(v, C(*v.shape))))
    check_rule(np.linalg.eigh, a, UPLO=uplo, ybar=(R(*w.shape), _phase_free(v, C(*v.shape))))
    check_grads(eigh_loss(R(*w.shape), R(*v.shape)), a, uplo, order=2)


@pytest.mark.parametrize("shape,uplo", EIGH_CASES, ids=str)
def test_eigvalsh_fd(shape, uplo):
    a, lower = _eigh_args(shape, uplo)
    check_rule(np.linalg.eigvalsh, a, uplo, order=2)
    check_rule(np.linalg.eigvalsh, a, UPLO=uplo, order=2)
    wts = R(shape[-1])
    check_grads(lambda a: np.sum(np.linalg.eigvalsh(a, UPLO=uplo) ** 3 * wts), a, order=2)


def test_eigh_cotangent_lives_on_the_triangle():
    """numpy ignores the other triangle and the diagonal's imaginary part: their cotangent is 0."""
    a, _ = _eigh_args((4, 4), "L")
    for uplo, other in (("L", np.triu), ("U", np.tril)):
        (g,) = irad.vjp(lambda a: np.linalg.eigvalsh(a, uplo), a)[1](R(4))
        assert np.all(other(g, 1 if uplo == "L" else -1) == 0)
        assert np.all(np.imag(np.diagonal(g)) == 0)
        w, v = np.linalg.eigh(a, uplo)
        (g,) = irad.vjp(lambda a: tuple(np.linalg.eigh(a, uplo)), a)[1]((R(4), _phase_free(v, C(4, 4))))
        assert np.all(other(g, 1 if uplo == "L" else -1) == 0)
        assert np.all(np.imag(np.diagonal(g)) == 0)


@pytest.mark.parametrize("shape,uplo", EIGH_CASES, ids=str)
def test_eigh_jax(shape, uplo):
    jax = _jax()
    jnp = jax.numpy
    a, lower = _eigh_args(shape, uplo)
    w, v = np.linalg.eigh(a, uplo)
    cot = (R(*w.shape), _phase_free(v, C(*v.shape)))
    both(f"eigh{shape} {uplo}", lambda a: np.linalg.eigh(a, uplo),
         lambda a: tuple(jnp.linalg.eigh(_tri_herm(jnp, a, lower), UPLO=uplo)), (a,), cot)
    both(f"eigvalsh{shape} {uplo}", lambda a: np.linalg.eigvalsh(a, UPLO=uplo),
         lambda a: jnp.linalg.eigvalsh(_tri_herm(jnp, a, lower), UPLO=uplo), (a,), cot[0])


@pytest.mark.parametrize("shape,uplo", [((4, 4), "L"), ((4, 4), "U"), ((2, 3, 3), "L")], ids=str)
def test_eigh_autograd(shape, uplo):
    _, anp = _autograd()
    a, _ = _eigh_args(shape, uplo)
    w, v = np.linalg.eigh(a, uplo)
    cot = (R(*w.shape), _phase_free(v, C(*v.shape)))
    _, got = irad_vjp(lambda a: np.linalg.eigh(a, uplo), (a,), cot)
    agree(f"eigh{shape} {uplo} autograd", got, autograd_vjp(lambda a: anp.linalg.eigh(a, uplo), (a,), cot))


# ---- eig / eigvals ---------------------------------------------------------------------------

EIG_SHAPES = [(3, 3), (4, 4), (2, 3, 3)]


@pytest.mark.parametrize("shape", EIG_SHAPES, ids=str)
@pytest.mark.parametrize("kind", ["complex", "real"])
def test_eig_fd(shape, kind):
    """LAPACK's normalisation (unit norm, largest component real) makes the eigenvectors a
    function of A: any cotangent, any loss."""
    a = C(*shape) if kind == "complex" else R(*shape)
    check_rule(np.linalg.eig, a, order=2)
    check_rule(np.linalg.eigvals, a, order=2)
    wv = C(*shape)
    check_grads(lambda a: np.sum(np.real(np.linalg.eig(a)[1] * wv)), a, order=2)


@pytest.mark.parametrize("shape", EIG_SHAPES, ids=str)
@pytest.mark.parametrize("kind", ["complex", "real"])
def test_eig_jax(shape, kind):
    jax = _jax()
    a = C(*shape) if kind == "complex" else R(*shape)
    if kind == "real":  # a rotation-like block makes a complex pair: JAX gives complex eigenvectors,
        a[..., 0, 1] += 3.0   # numpy real ones where every eigenvalue is real
        a[..., 1, 0] -= 3.0
    w, v = np.linalg.eig(a)
    assert np.iscomplexobj(w)
    cot = (C(*w.shape), C(*v.shape))
    both(f"eig{shape} {kind}", np.linalg.eig,
         lambda a: tuple(jax.lax.linalg.eig(a, compute_left_eigenvectors=False, enable_eigvec_derivs=True)),
         (a,), cot)
    both(f"eigvals{shape} {kind}", np.linalg.eigvals, jax.numpy.linalg.eigvals, (a,), cot[0])


@pytest.mark.parametrize("shape", EIG_SHAPES, ids=str)
def test_eig_autograd(shape):
    """autograd's rule does not fix the phases: it agrees on phase-free cotangents."""
    _, anp = _autograd()
    a = C(*shape)
    w, v = np.linalg.eig(a)
    cot = (C(*w.shape), _phase_free(v, C(*v.shape)))
    _, got = irad_vjp(np.linalg.eig, (a,), cot)
    agree(f"eig{shape} autograd", got, autograd_vjp(anp.linalg.eig, (a,), cot))


# ---- qr --------------------------------------------------------------------------------------

QR_CASES = [((4, 3), "reduced"), ((3, 3), "reduced"), ((3, 5), "reduced"), ((2, 4, 3), "reduced"),
            ((2, 2, 5), "reduced"), ((4, 3), "r"), ((3, 5), "r"), ((2, 3, 3), "r"),
            ((3, 5), "complete"), ((3, 3), "complete"), ((2, 2, 4), "complete")]


@pytest.mark.parametrize("shape,mode", QR_CASES, ids=str)
def test_qr_fd(shape, mode):
    """LAPACK's R has a real diagonal: the factors are a function of A (no phase to fix)."""
    a = C(*shape)
    check_rule(np.linalg.qr, a, mode, order=2)
    check_rule(np.linalg.qr, a, mode=mode)
    wq, wr = C(shape[-2], min(shape[-2:])), C(min(shape[-2:]), shape[-1])

    def loss(a):
        res = np.linalg.qr(a, mode)
        q, r = (None, res) if mode == "r" else res
        tot = np.sum(np.real(r * wr) ** 2)
        return tot if q is None else tot + np.sum(np.imag(q * wq))
    check_grads(loss, a, order=2)


@pytest.mark.parametrize("shape,mode", QR_CASES, ids=str)
def test_qr_jax(shape, mode):
    jax = _jax()
    a = C(*shape)
    y = np.linalg.qr(a, mode)
    cot = C(*y.shape) if mode == "r" else (C(*y[0].shape), C(*y[1].shape))
    both(f"qr{shape} {mode}", lambda a: np.linalg.qr(a, mode),
         lambda a: jax.numpy.linalg.qr(a, mode) if mode == "r" else tuple(jax.numpy.linalg.qr(a, mode)),
         (a,), cot)


# ---- cholesky --------------------------------------------------------------------------------

CHOL_CASES = [(4, (), False), (3, (), True), (3, (2,), False), (3, (2, 2), True), (1, (), False)]


def _chol_kw(upper: bool) -> dict:
    return {"upper": True} if upper else {}


@pytest.mark.parametrize("n,batch,upper", CHOL_CASES, ids=str)
def test_cholesky_fd(n, batch, upper):
    a = junk_other_triangle(hpd(n, batch), not upper)
    check_rule(np.linalg.cholesky, a, order=2, **_chol_kw(upper))
    w = C(*batch, n, n)
    check_grads(lambda a: np.sum(np.real(np.linalg.cholesky(a, **_chol_kw(upper)) * w)), a, order=2)


@pytest.mark.parametrize("n,batch,upper", CHOL_CASES, ids=str)
def test_cholesky_jax(n, batch, upper):
    jax = _jax()
    jnp = jax.numpy
    a = junk_other_triangle(hpd(n, batch), not upper)
    cot = C(*batch, n, n)
    both(f"cholesky n={n} batch={batch} upper={upper}", lambda a: np.linalg.cholesky(a, **_chol_kw(upper)),
         lambda a: jnp.linalg.cholesky(_tri_herm(jnp, a, not upper), upper=upper), (a,), cot)


# ---- inv, det, slogdet, solve ----------------------------------------------------------------

SQUARE = [(3, 3), (1, 1), (2, 3, 3), (2, 2, 4, 4)]


def _well(shape):
    return C(*shape) + 3 * np.eye(shape[-1])


@pytest.mark.parametrize("shape", SQUARE, ids=str)
def test_inv_det_slogdet_fd(shape):
    a = _well(shape)
    for fn in (np.linalg.inv, np.linalg.det, np.linalg.slogdet):
        check_rule(fn, a, order=2)
    wl, ws = R(*shape[:-2]), C(*shape[:-2])
    check_grads(lambda a: np.sum(np.linalg.slogdet(a)[1] * wl) + np.sum(np.real(np.linalg.slogdet(a)[0] * ws)), a, order=2)


SOLVE = [((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 3, 3), (2, 3, 4)), ((2, 3, 3), (3,)), ((3, 3), (2, 3, 1))]


@pytest.mark.parametrize("sa,sb", SOLVE, ids=str)
def test_solve_fd(sa, sb):
    a, b = _well(sa), C(*sb)
    check_rule(np.linalg.solve, a, b, order=2)
    check_rule(np.linalg.solve, a, R(*sb))   # a real right-hand side gets a real cotangent
    check_grads(np.linalg.solve, a, b, order=2)


@pytest.mark.parametrize("shape", SQUARE, ids=str)
def test_inv_det_slogdet_jax(shape):
    jax = _jax()
    jnp = jax.numpy
    a = _well(shape)
    both(f"inv{shape}", np.linalg.inv, jnp.linalg.inv, (a,), C(*shape))
    both(f"det{shape}", np.linalg.det, jnp.linalg.det, (a,), C(*shape[:-2]))
    cot = (C(*shape[:-2]), R(*shape[:-2]))
    both(f"slogdet{shape}", np.linalg.slogdet, lambda a: tuple(jnp.linalg.slogdet(a)), (a,), cot)


@pytest.mark.parametrize("sa,sb", SOLVE, ids=str)
def test_solve_jax(sa, sb):
    jax = _jax()
    a, b = _well(sa), C(*sb)
    y = np.linalg.solve(a, b)
    both(f"solve{sa}{sb}", np.linalg.solve, jax.numpy.linalg.solve, (a, b), C(*y.shape))


@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3)], ids=str)
def test_inv_det_solve_autograd(shape):
    _, anp = _autograd()
    a, b = _well(shape), C(*shape)
    g = C(*shape)
    _, got = irad_vjp(np.linalg.inv, (a,), g)
    agree(f"inv{shape} autograd", got, autograd_vjp(anp.linalg.inv, (a,), g))
    g = C(*shape[:-2])
    _, got = irad_vjp(np.linalg.det, (a,), g)
    agree(f"det{shape} autograd", got, autograd_vjp(anp.linalg.det, (a,), g))
    g = C(*shape)
    _, got = irad_vjp(np.linalg.solve, (a, b), g)
    agree(f"solve{shape} autograd", got, autograd_vjp(anp.linalg.solve, (a, b), g))
    # autograd's slogdet rule ignores the sign's cotangent: compare the log|det| part
    g = (np.zeros(shape[:-2], complex), R(*shape[:-2]))
    _, got = irad_vjp(np.linalg.slogdet, (a,), g)
    agree(f"slogdet{shape} autograd", got, autograd_vjp(anp.linalg.slogdet, (a,), g))


# ---- norm ------------------------------------------------------------------------------------

VECTOR_ORDS = [None, 2, 1, np.inf, -np.inf, 3, 0.5, -1.5, 0]
MATRIX_ORDS = [None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]
NORM_CASES = (
    [((5,), o, None) for o in VECTOR_ORDS]
    + [((3, 4), o, 1) for o in VECTOR_ORDS]
    + [((2, 3, 4), o, -1) for o in (None, 1, np.inf, 3)]
    + [((2, 3, 4), None, (0, 2))]
    + [((3, 4), o, None) for o in MATRIX_ORDS]
    + [((4, 3), o, (1, 0)) for o in MATRIX_ORDS]
    + [((2, 3, 4), o, (1, 2)) for o in MATRIX_ORDS]
    + [((3, 2, 4), o, (0, 2)) for o in ("nuc", 2, -2, 1, np.inf)]
)


def _norm_ids(c):
    return f"{c[0]}-ord={c[1]}-axis={c[2]}"


@pytest.mark.parametrize("case", NORM_CASES, ids=_norm_ids)
def test_norm_fd(case):
    shape, ordv, axis = case
    x = C(*shape)
    check_rule(np.linalg.norm, x, ordv, axis)
    check_rule(np.linalg.norm, x, ord=ordv, axis=axis, keepdims=True)
    y = np.linalg.norm(x, ordv, axis)
    w = R(*np.shape(y))
    check_grads(lambda x: np.sum(np.linalg.norm(x, ord=ordv, axis=axis) * w), x, order=2)


def test_vector_and_matrix_norm_fd():
    if not hasattr(np.linalg, "matrix_norm"):
        pytest.skip("numpy < 2 has no vector_norm / matrix_norm")
    x = C(2, 3, 4)
    for o in (2, 1, np.inf, 3):
        check_rule(np.linalg.vector_norm, x, ord=o, axis=(0, 2), order=2)
    for o in ("fro", "nuc", 2, -2, 1, -np.inf):
        check_rule(np.linalg.matrix_norm, x, ord=o, order=2)
        check_rule(np.linalg.matrix_norm, x, ord=o, keepdims=True)


@pytest.mark.parametrize("case", NORM_CASES, ids=_norm_ids)
def test_norm_jax(case):
    jax = _jax()
    shape, ordv, axis = case
    x = C(*shape)
    y = np.linalg.norm(x, ordv, axis)
    jaxis = tuple(axis) if isinstance(axis, tuple) else axis
    both(f"norm{shape} ord={ordv} axis={axis}", lambda x: np.linalg.norm(x, ordv, axis),
         lambda x: jax.numpy.linalg.norm(x, ordv, jaxis), (x,), R(*np.shape(y)))


@pytest.mark.parametrize("case", [c for c in NORM_CASES if c[1] in (None, "fro", "nuc")
                                  or (c[2] is not None and not isinstance(c[2], tuple)
                                      and isinstance(c[1], (int, float)) and 1 < c[1] < np.inf)],
                         ids=_norm_ids)
def test_norm_autograd(case):
    """autograd's norm rule covers 2/fro, nuc and vector p > 1."""
    _, anp = _autograd()
    shape, ordv, axis = case
    x = C(*shape)
    g = R(*np.shape(np.linalg.norm(x, ordv, axis)))
    _, got = irad_vjp(lambda x: np.linalg.norm(x, ordv, axis), (x,), g)
    agree(f"norm{shape} ord={ordv} axis={axis} autograd", got,
          autograd_vjp(lambda x: anp.linalg.norm(x, ordv, axis), (x,), g))


def test_nuclear_and_spectral_norm_grads():
    """The nuclear norm's gradient is conj(U Vh), the spectral norm's conj(u_0 vh_0)."""
    a = C(4, 3)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(irad.grad(lambda a: np.linalg.norm(a, "nuc"))(a), np.conj(u @ vh), atol=1e-12)
    np.testing.assert_allclose(irad.grad(lambda a: np.linalg.norm(a, 2))(a),
                               np.conj(np.outer(u[:, 0], vh[0])), atol=1e-12)
    np.testing.assert_allclose(irad.grad(lambda a: np.linalg.norm(a, -2))(a),
                               np.conj(np.outer(u[:, -1], vh[-1])), atol=1e-12)


# ---- numpy.fft -------------------------------------------------------------------------------

FFT_CASES = [
    ("fft", (8,), {}), ("fft", (3, 6), {"n": 4}), ("fft", (3, 5), {"n": 8, "axis": 0, "norm": "ortho"}),
    ("ifft", (7,), {"norm": "forward"}), ("ifft", (4, 6), {"n": 9, "axis": -1}),
    ("fft2", (4, 6), {}), ("fft2", (2, 4, 5), {"s": (3, 7), "norm": "ortho"}),
    ("ifft2", (3, 4, 5), {"axes": (0, 2), "norm": "forward"}),
    ("fftn", (3, 4, 5), {}), ("fftn", (3, 4, 5), {"s": (2, 6), "axes": (2, 0), "norm": "ortho"}),
    ("ifftn", (3, 4, 5), {"axes": (1,)}), ("ifftn", (4, 4), {"s": (5, 3), "axes": (0, 1), "norm": "backward"}),
    ("rfft", (8,), {}), ("rfft", (3, 7), {"n": 10, "norm": "ortho"}), ("rfft", (5, 4), {"n": 3, "axis": 0}),
    ("irfft", (5,), {}), ("irfft", (3, 5), {"n": 7, "norm": "forward"}), ("irfft", (4, 3), {"n": 6, "axis": 0}),
    ("rfft2", (4, 6), {}), ("rfft2", (2, 5, 6), {"s": (4, 5), "norm": "ortho"}),
    ("irfft2", (4, 4), {}), ("irfft2", (2, 4, 4), {"s": (5, 5), "axes": (0, 2)}),
    ("rfftn", (3, 4, 5), {}), ("rfftn", (3, 4, 6), {"s": (4, 4), "axes": (0, 1), "norm": "forward"}),
    ("irfftn", (3, 4, 5), {}), ("irfftn", (3, 4, 5), {"s": (3, 7), "axes": (1, 2), "norm": "ortho"}),
]


def _fft_ids(c):
    return f"{c[0]}{c[1]}{c[2]}"


def _fft_input(name, shape, kind):
    return C(*shape) if kind == "complex" else R(*shape)


# the input kinds each transform takes: irfft* read a (complex) half spectrum, and rfft* of complex
# input discards the imaginary part (numpy warns), so those pairs are not generated
FFT_KINDS = [(c, k) for c in FFT_CASES for k in ("complex", "real")
             if not (c[0].startswith("irfft") and k == "real") and not (c[0].startswith("rfft") and k == "complex")]


@pytest.mark.parametrize("case, kind", FFT_KINDS, ids=lambda v: v if isinstance(v, str) else _fft_ids(v))
def test_fft_fd(case, kind):
    name, shape, kw = case
    x = _fft_input(name, shape, kind)
    fn = getattr(np.fft, name)
    check_rule(fn, x, order=2, **kw)
    w = C(*np.shape(fn(x, **kw)))
    check_grads(lambda x: np.sum(np.abs(fn(x, **kw) * w) ** 2), x, order=2)


@pytest.mark.parametrize("case, kind", FFT_KINDS, ids=lambda v: v if isinstance(v, str) else _fft_ids(v))
def test_fft_jax(case, kind):
    jax = _jax()
    name, shape, kw = case
    x = _fft_input(name, shape, kind)
    fn, jfn = getattr(np.fft, name), getattr(jax.numpy.fft, name)
    y = fn(x, **kw)
    cot = C(*y.shape) if np.iscomplexobj(y) else R(*y.shape)
    both(f"{name}{shape}{kw} {kind}", lambda x: fn(x, **kw), lambda x: jfn(x, **kw), (x,), cot)
    f = lambda x: np.sum(np.abs(fn(x, **kw)) ** 2 * np.arange(y.size).reshape(y.shape))  # noqa: E731
    jf = lambda x: jax.numpy.sum(jax.numpy.abs(jfn(x, **kw)) ** 2 * np.arange(y.size).reshape(y.shape))  # noqa: E731
    agree(f"{name}{shape}{kw} {kind} power grad", irad.grad(f)(x), np.asarray(jax.grad(jf)(x)))
