"""Rules for numpy.linalg's decompositions (cholesky, eigh, eig, svd, qr) and norms.

Real and complex matrices, in JAX's and autograd's convention (the cotangent pairs with the
tangent as ``Re(sum(xbar * dx))``, no conjugate; docs/rules.md, "Complex values").  Most
pullbacks are written as the textbook Hermitian adjoint (``A^H``, ``<a, b> = Re sum(conj(a) b)``)
and run as ``conj(adjoint(conj(ybar)))``: the two conjugations are no-ops on real values.

numpy reads one triangle of the input of ``eigh``, ``eigvalsh`` and ``cholesky``
(``UPLO``/``upper``; for a complex matrix the other triangle is taken as the conjugate transpose
and the imaginary part of the diagonal is ignored): the cotangent lives on that triangle (real on
the diagonal), so the rules are exact for any input, Hermitian or not.  Eigenvector and
singular-vector cotangents need distinct eigenvalues / singular values; where two coincide the
undefined terms are dropped (exact when the loss does not depend on the basis chosen inside the
degenerate subspace).  The phases of complex eigenvectors (``eigh``) and singular vectors
(``svd``) are arbitrary: losses must not depend on them (``|v|``, ``u[:, k] * vh[k, :]``, ``s``).
``eig``'s eigenvectors are fixed as LAPACK fixes them (unit norm, largest component real), and
the rule differentiates through that choice, so any loss of them works.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._common import Table, cj, norm_axes
from ..errors import NoRuleError

T = Table(__name__)


def _T(x: Any) -> Any:
    return np.swapaxes(x, -1, -2)


def _mm(*xs: Any) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = np.matmul(out, x)
    return out


def _H(x: Any) -> Any:
    """Conjugate transpose of the last two axes (a plain transpose for real values)."""
    return np.swapaxes(cj(x), -1, -2)


def _sym(x: Any) -> Any:
    """The Hermitian (for real values: symmetric) part of ``x``."""
    return 0.5 * (x + _H(x))


def _tri_weights(n: int, lower: bool, diag: float, dtype: Any) -> Any:
    """``diag`` on the diagonal, 1 on the ``lower`` (else upper) side, 0 on the other: one
    multiplication instead of ``tril``s (``np.tril`` builds a mask and runs ``where``: ~3x the cost
    of a product).  Built from constants only: the passes fold it into one."""
    w = (np.tri(n, k=-1) + diag * np.eye(n)).astype(dtype)
    return w if lower else np.transpose(w)


def _on_triangle(gs: Any, lower: bool) -> Any:
    """A Hermitian cotangent moved onto the triangle numpy reads: off-diagonal entries double
    (the other triangle is their conjugate), the diagonal (real) stays.  (Exactly
    ``tril(gs) + tril(gs, -1)``: the weights are 2, 1 and 0.)"""
    return gs * (2.0 * _tri_weights(np.shape(gs)[-1], lower, 0.5, gs.dtype))


def _inv_gaps(w: Any) -> Any:
    """F[..., i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it and where w_i == w_j."""
    d = np.expand_dims(w, -2) - np.expand_dims(w, -1)
    return np.where(d == 0, 0.0, 1.0 / np.where(d == 0, 1.0, d))


# ---- Hermitian eigenproblems and cholesky ----------------------------------------------------


def _uplo(args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
    return str(args[0] if args else kw.get("UPLO", "L")).upper() == "L"


def eigh_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.linalg.eigh(a, *args, **kw)
    return y, (y[0], y[1], _uplo(args, kw))


def eigh_pullback(s: Any, g: Any) -> tuple[Any]:
    """A = V diag(w) V^H: the Hermitian adjoint is V (diag(gw) + F * (V^H gV)) V^H, F_ij =
    1/(w_j - w_i) (0 on the diagonal: the phase of each eigenvector is not differentiated); in
    JAX's convention conj(V) (diag(gw) + F * (V^T gV)) V^T, made Hermitian, on the triangle read."""
    w, v, lower = s
    gw, gv = g
    inner = _inv_gaps(w) * _mm(_T(v), gv)
    inner = inner + np.expand_dims(gw, -1) * np.eye(np.shape(w)[-1])
    return (_on_triangle(_sym(_mm(cj(v), inner, _T(v))), lower),)


def eigvalsh_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    v = np.linalg.eigh(a, *args, **kw)[1]
    return np.linalg.eigvalsh(a, *args, **kw), (v, _uplo(args, kw))


def eigvalsh_pullback(s: Any, g: Any) -> tuple[Any]:
    """dw_i = Re(v_i^H dA v_i): A gets conj(V) diag(g) V^T, on the triangle read."""
    v, lower = s
    ga = _mm(cj(v) * np.expand_dims(g, -2), _T(v))
    if np.iscomplexobj(ga):  # Hermitian up to rounding: exactly, so that the diagonal is real
        ga = _sym(ga)
    return (_on_triangle(ga, lower),)


def cholesky_fwd(a: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.linalg.cholesky(a, **kw)
    upper = bool(kw.get("upper", False))
    return y, (_H(y) if upper else y, upper)


def cholesky_pullback(s: Any, g: Any) -> tuple[Any]:
    """A = L L^H (Murray, 'Differentiation of the Cholesky decomposition'): the Hermitian adjoint
    is S = L^-H Phi(L^H gL) L^-1 (Phi: lower triangle, half diagonal), made Hermitian; in JAX's
    convention conj(S) = L^-T Phi(L^T gL) conj(L)^-1.  ``upper``: A = U^H U, L = U^H, gL = gU^H."""
    low, upper = s
    gl = _H(g) if upper else g
    n = np.shape(low)[-1]
    p = _mm(_T(low), gl)
    p = p * _tri_weights(n, True, 0.5, p.dtype)  # Phi(L^T gL)
    # NOTE: general solves with the factor: irad.passes.structure knows L is triangular and turns
    # them into triangular solves where SciPy is installed
    x = np.linalg.solve(_T(low), p)             # L^-T P
    smat = _T(np.linalg.solve(_H(low), _T(x)))  # L^-T P conj(L)^-1
    # _on_triangle(_sym(smat)), with the 1/2 of _sym and the 2 of _on_triangle cancelled (exact)
    return ((smat + _H(smat)) * _tri_weights(n, not upper, 0.5, smat.dtype),)


def eig_fwd(a: Any) -> tuple[Any, Any]:
    y = np.linalg.eig(a)
    return y, (y[0], y[1], np.iscomplexobj(a))


def eigvals_fwd(a: Any) -> tuple[Any, Any]:
    w, v = np.linalg.eig(a)
    return np.linalg.eigvals(a), (w, v, np.iscomplexobj(a))


def _eig_cot(w: Any, v: Any, gw: Any, gv: Any, cplx: bool) -> Any:
    """A = V diag(w) V^-1.  With P = V^-1 dA V: dw = diag(P), dv_j = u_j + c_j v_j, U = V (F * P),
    F_ij = 1/(w_j - w_i), and c_j fixed by LAPACK's normalisation of each eigenvector (unit norm,
    the component k_j of largest modulus real): c_j = -Re(v_j^H u_j) - i Im(u_kj) / v_kj.  The
    transpose (JAX's convention, no conjugate): gU = gV - conj(V) Re(a) - i e_k Im(a) / v_k with
    a_j = sum_i gV_ij v_ij, then A gets V^-T (diag(gw) + F * (V^T gU)) V^T (the real part for
    real A)."""
    n = np.shape(w)[-1]
    vt = _T(v)
    inner = np.expand_dims(gw, -1) * np.eye(n)
    if gv is not None:
        a = np.sum(gv * v, axis=-2)
        gu = gv - cj(v) * np.expand_dims(np.real(a), -2)
        if np.iscomplexobj(v) or np.iscomplexobj(gv):
            top = np.expand_dims(np.argmax(np.abs(v), axis=-2), -2)  # k_j (non-differentiable)
            hit = np.arange(n)[:, None] == top                        # hit_ij = (i == k_j)
            vk = np.sum(np.where(hit, np.real(v), 0.0), axis=-2)
            gu = gu - 1j * np.where(hit, np.expand_dims(np.imag(a) / vk, -2), 0.0)
        inner = inner + _inv_gaps(w) * _mm(vt, gu)
    ga = np.linalg.solve(vt, _mm(inner, vt))
    return ga if cplx else np.real(ga)


def eig_pullback(s: Any, g: Any) -> tuple[Any]:
    w, v, cplx = s
    gw, gv = g
    return (_eig_cot(w, v, gw, gv, cplx),)


def eigvals_pullback(s: Any, g: Any) -> tuple[Any]:
    w, v, cplx = s
    return (_eig_cot(w, v, g, None, cplx),)


T.rule(np.linalg.eig, eig_fwd, eig_pullback,
       "batched, complex; distinct eigenvalues; eigenvectors normalised as LAPACK does (unit norm, largest component real)")
T.rule(np.linalg.eigvals, eigvals_fwd, eigvals_pullback, "batched, complex; distinct eigenvalues")
T.rule(np.linalg.eigh, eigh_fwd, eigh_pullback,
       "batched, complex Hermitian; reads the UPLO triangle; distinct eigenvalues and phase-independent losses for eigenvectors")
T.rule(np.linalg.eigvalsh, eigvalsh_fwd, eigvalsh_pullback, "batched, complex Hermitian; reads the UPLO triangle")
T.rule(np.linalg.cholesky, cholesky_fwd, cholesky_pullback,
       "batched, complex Hermitian; reads one triangle (upper=)")


def cho_inverse(low: Any) -> Any:
    """``K^-1`` for ``K = L L^T`` from its lower Cholesky factor ``L`` (real, 2-D; LAPACK ``potri``,
    SciPy): the lower triangle of the result is ``K^-1``'s, the strict upper one is ``L``'s (zero
    for a factor).  ``irad.passes.structure`` calls it for cotangents that need ``K^-1``."""
    from scipy.linalg import lapack  # NOTE: SciPy is optional; only graphs rewritten where it is installed call this
    (potri,) = lapack.get_lapack_funcs(("potri",), (low,))
    r, info = potri(np.transpose(low), lower=0)  # U = L^T: Fortran order without a copy
    if info != 0:
        raise np.linalg.LinAlgError(f"cho_inverse: the factor is singular (potri info={info})")
    return np.transpose(r)


def cho_inverse_fwd(low: Any) -> tuple[Any, Any]:
    r = cho_inverse(low)
    return r, (low, r)


def cho_inverse_pullback(s: Any, g: Any) -> tuple[Any]:
    """R = tril(K^-1) + triu(L, 1), K = tril(L) tril(L)^T: with H = -K^-1 tril(gR) K^-1, L gets
    tril((H + H^T) tril(L)) + triu(gR, 1)."""
    low, r = s
    kinv = np.tril(r) + np.transpose(np.tril(r, -1))
    h = -_mm(kinv, np.tril(g), kinv)
    return (np.tril(_mm(h + _T(h), np.tril(low))) + np.triu(g, 1),)


T.rule(cho_inverse, cho_inverse_fwd, cho_inverse_pullback, "real 2-D factors (SciPy)")

# ---- svd -------------------------------------------------------------------------------------


def _recip(s: Any) -> Any:
    """1 / s, and 0 where s == 0 (as JAX: a loss of the singular values alone stays finite at a
    rank-deficient matrix; the singular vectors' derivatives are undefined there)."""
    return np.where(s == 0, 0.0, 1.0 / np.where(s == 0, 1.0, s))


def _svd_core(u: Any, s: Any, vh: Any, gu: Any, gs: Any, gvh: Any) -> Any:
    """The Hermitian adjoint for the reduced factors of A = U diag(s) V^H (Townsend,
    'Differentiating the SVD'; the complex term as in Wan & Zhang): with J = U^H gU, K = V^H gV,
    A gets U (diag(gs) + F * (J - J^H) S + S F * (K - K^H) + i Im(diag(J)) / S) V^H, plus the
    parts of gU, gV outside U's, V's span.  The phase of a singular pair is not determined: the
    i Im(diag(J)) term moves it with U (JAX's and autograd's gauge), exact for losses that do
    not depend on it."""
    v, gv = _H(vh), _H(gvh)
    k = np.shape(s)[-1]
    eye = np.eye(k)
    s2 = s * s
    f = _inv_gaps(s2)  # 1 / (s_j^2 - s_i^2)
    sm = np.expand_dims(s, -2) * eye  # diag(s)
    sinv = np.expand_dims(_recip(s), -2)
    out = np.expand_dims(gs, -1) * eye
    if gu is not None:
        utgu = _mm(_H(u), gu)
        out = out + _mm(f * (utgu - _H(utgu)), sm)
        if np.iscomplexobj(utgu):
            out = out + 1j * np.imag(utgu) * eye * sinv
    if gv is not None:
        vtgv = _mm(_H(v), gv)
        out = out + _mm(sm, f * (vtgv - _H(vtgv)))
    ga = _mm(u, out, vh)
    m, n = np.shape(u)[-2], np.shape(v)[-2]
    if gu is not None and m > k:  # (I - U U^H) gU S^-1 V^H
        ga = ga + _mm(gu - _mm(u, _H(u), gu), sinv * eye, vh)
    if gv is not None and n > k:  # U S^-1 gV^H (I - V V^H)
        ga = ga + _mm(u, sinv * eye, _H(gv) - _mm(_H(gv), v, vh))
    return ga


def svd_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    names = ("full_matrices", "compute_uv", "hermitian")
    o: dict[str, Any] = dict(zip(names, (True, True, False)))
    o.update(zip(names, args))
    o.update(kw)
    if o["hermitian"]:
        raise NoRuleError("irad: svd(hermitian=True) has no rule")
    y = np.linalg.svd(a, *args, **kw)
    if not o["compute_uv"]:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        return y, (u, s, vh, False)
    return y, (y[0], y[1], y[2], True)


def svd_pullback(st: Any, g: Any) -> tuple[Any]:
    """Reduced factors exactly; full factors of a non-square matrix take the extra columns of U
    (rows of Vh) as a basis whose own rotation (for complex values: phase) is not differentiated:
    exact for one extra column of a real matrix, and for losses that do not depend on that basis.
    The Hermitian adjoint runs on conj(ybar) and its result is conjugated (JAX's convention)."""
    u, s, vh, uv = st
    if not uv:  # ds_i = Re(u_i^H dA v_i)
        return (_mm(cj(u) * np.expand_dims(g, -2), cj(vh)),)
    gu, gs, gvh = cj(g[0]), g[1], cj(g[2])
    k = np.shape(s)[-1]
    u1, gu1, vh1, gvh1 = u[..., :k], gu[..., :k], vh[..., :k, :], gvh[..., :k, :]
    ga = _svd_core(u1, s, vh1, gu1, gs, gvh1)
    sinv = np.expand_dims(_recip(s), -2) * np.eye(k)
    if np.shape(u)[-1] > k:  # U2 changes by -U1 S^-1 V^H dA^H U2
        u2, gu2 = u[..., k:], gu[..., k:]
        ga = ga - _mm(u2, _H(gu2), u1, sinv, vh1)
    if np.shape(vh)[-2] > k:  # V2 changes by -V1 S^-1 U^H dA V2
        vh2, gvh2 = vh[..., k:, :], gvh[..., k:, :]
        ga = ga - _mm(u1, sinv, _mm(vh1, _H(gvh2)), vh2)
    return (cj(ga),)


def svdvals_fwd(a: Any) -> tuple[Any, Any]:
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.linalg.svdvals(a), (u, s, vh, False)


T.rule(np.linalg.svd, svd_fwd, svd_pullback,
       "batched, complex; distinct nonzero singular values; complex: losses independent of the singular vectors' phases")
T.rule(getattr(np.linalg, "svdvals", None), svdvals_fwd, svd_pullback, "batched, complex")

# ---- qr --------------------------------------------------------------------------------------


def _qr_square_cot(q: Any, r: Any, gq: Any, gr: Any) -> Any:
    """The Hermitian adjoint of A = QR with R square and real on its diagonal (LAPACK's):
    A gets (gQ + Q copyltu(M)) R^-H, M = R gR^H - gQ^H Q, copyltu(M) = the strict lower triangle
    of M mirrored (conjugated) above it, and Re(diag(M)) on the diagonal."""
    mm = _mm(r, _H(gr)) - _mm(_H(gq), q)
    low = np.tril(mm, -1)
    copyltu = low + _H(low) + np.eye(np.shape(r)[-1]) * (np.real(mm) if np.iscomplexobj(mm) else mm)
    b = gq + _mm(q, copyltu)
    return _H(np.linalg.solve(r, _H(b)))  # b R^-H


def qr_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    mode = args[0] if args else kw.get("mode", "reduced")
    m, n = np.shape(a)[-2], np.shape(a)[-1]
    if mode not in ("reduced", "r", "complete") or (mode == "complete" and m > n):
        raise NoRuleError(f"irad: qr(mode={mode!r}) has no rule for a {m}x{n} matrix "
                                  "(supported: 'reduced', 'r', and 'complete' when m <= n)")
    y = np.linalg.qr(a, *args, **kw)
    q, r = np.linalg.qr(a) if mode == "r" else y
    return y, (a, q, r, mode == "r")


def qr_pullback(s: Any, g: Any) -> tuple[Any]:
    """The Hermitian adjoint on conj(ybar), conjugated (JAX's convention; no-ops when real)."""
    a, q, r, r_only = s
    gq, gr = (np.zeros(np.shape(q)), cj(g)) if r_only else (cj(g[0]), cj(g[1]))
    m, n = np.shape(a)[-2], np.shape(a)[-1]
    if m >= n:
        return (cj(_qr_square_cot(q, r, gq, gr)),)
    # wide: A = [X | Y], X = Q U (square), Y = Q V; V = Q^H Y also moves with Q
    y = a[..., :, m:]
    u, gu, gv = r[..., :, :m], gr[..., :, :m], gr[..., :, m:]
    gx = _qr_square_cot(q, u, gq + _mm(y, _H(gv)), gu)
    return (cj(np.concatenate([gx, _mm(q, gv)], axis=-1)),)


T.rule(np.linalg.qr, qr_fwd, qr_pullback, "batched, complex; modes reduced, r (complete if m <= n)")

# ---- norms -----------------------------------------------------------------------------------


def _safe_div(g: Any, y: Any) -> Any:
    """g / y, and 0 where y == 0 (the subgradient irad picks at the origin)."""
    return np.where(y == 0, 0.0, g / np.where(y == 0, 1.0, y))


def _vector_norm_cot(x: Any, ordv: Any, axes: tuple[int, ...], yk: Any, gk: Any) -> Any:
    """Cotangent of a vector norm over ``axes``; ``yk``/``gk`` keep the reduced axes."""
    x = np.asarray(x)
    ax = np.abs(x)
    sgn = np.sign(x)  # x/|x| for complex
    if ordv is None or ordv == 2:
        return _safe_div(gk, yk) * x
    if ordv == 1:
        return gk * sgn
    if ordv == 0:
        return np.zeros_like(x)
    if ordv in (np.inf, -np.inf):
        hit = ax == yk
        cnt = np.sum(hit, axis=axes, keepdims=True)
        return gk * sgn * hit / np.maximum(cnt, 1)
    p = float(ordv)
    return _safe_div(gk, yk ** (p - 1)) * ax ** (p - 1) * sgn


def _ord_cot(x: Any, ordv: Any, axes: tuple[int, ...], yk: Any, gk: Any, keepdims: bool) -> Any:
    """d|x|_p/dp = y (sum |x|^p ln|x| / (p y^p) - ln(y) / p); ord 0 and +-inf are discrete."""
    if ordv is None or isinstance(ordv, str) or ordv == 0 or np.isinf(ordv):
        return NotImplemented
    p = float(ordv)
    ax = np.abs(np.asarray(x))
    safe = np.where(ax == 0, 1.0, ax)
    t = np.sum(np.where(ax == 0, 0.0, safe ** p * np.log(safe)), axis=axes, keepdims=True)
    ys = np.where(yk == 0, 1.0, yk)
    dydp = np.where(yk == 0, 0.0, ys * (t / (p * ys ** p) - np.log(ys) / p))
    return np.sum(gk * dydp)


def _matrix_norm_cot(x: Any, ordm: Any, yk: Any, gk: Any) -> Any:
    """Cotangent of a matrix norm over the last two axes (``yk``/``gk`` keep them as size 1)."""
    if ordm in (None, "fro"):
        return _safe_div(gk, yk) * x
    if ordm in ("nuc", 2, -2):
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        if ordm == "nuc":
            return gk * _mm(u, vh)
        i = 0 if ordm == 2 else -1
        return gk * np.expand_dims(u[..., :, i], -1) * np.expand_dims(vh[..., i, :], -2)
    ax, sgn = np.abs(x), np.sign(x)
    red, keep = (-2, -1) if ordm in (1, -1) else (-1, -2)  # 1: columns sum, inf: rows sum
    sums = np.sum(ax, axis=red, keepdims=True)
    ext = np.max(sums, axis=keep, keepdims=True) if ordm in (1, np.inf) else np.min(sums, axis=keep, keepdims=True)
    hit = sums == ext
    share = hit / np.sum(hit, axis=keep, keepdims=True)
    return gk * sgn * share


def _norm_state(x: Any, ordv: Any, axis: Any, keepdims: bool) -> tuple[Any, ...]:
    nd = np.ndim(x)
    if axis is None and (ordv is None or nd == 1):
        return ("vec", norm_axes(None, nd))
    if axis is None:
        axis = (0, 1) if nd == 2 else None
    if isinstance(axis, (tuple, list)) and len(axis) == 2:
        return ("mat", (int(axis[0]) % nd, int(axis[1]) % nd))
    return ("vec", norm_axes(axis, nd))


def norm_fwd(x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    names = ("ord", "axis", "keepdims")
    o: dict[str, Any] = dict(zip(names, (None, None, False)))
    o.update(zip(names, args))
    o.update(kw)
    y = np.linalg.norm(x, *args, **kw)
    kind, axes = _norm_state(x, o["ord"], o["axis"], o["keepdims"])
    return y, (x, y, kind, axes, o["ord"], o["keepdims"], 1 + len(args))


def vector_norm_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.linalg.vector_norm(x, **kw)
    axes = norm_axes(kw.get("axis"), np.ndim(x))
    return y, (x, y, "vec", axes, kw.get("ord", 2), kw.get("keepdims", False), 1)


def matrix_norm_fwd(x: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.linalg.matrix_norm(x, **kw)
    nd = np.ndim(x)
    return y, (x, y, "mat", (nd - 2, nd - 1), kw.get("ord", "fro"), kw.get("keepdims", False), 1)


def norm_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """Vector norms: 2, 1, inf, -inf, 0, p; matrix norms: fro, nuc, 2, -2, 1, -1, inf, -inf.
    Ties (inf-norms, max row/column sums) split evenly; the 2-norm at 0 gets 0."""
    x, y, kind, axes, ordv, keepdims, n = s
    shape = np.shape(x)
    rest: tuple[Any, ...] = ()
    yk = y if keepdims else np.expand_dims(y, axes)
    gk = g if keepdims else np.expand_dims(g, axes)
    if n >= 2:  # ord given positionally: a float ord can be differentiated (p-norms) or not at all
        rest = (_ord_cot(x, ordv, axes, yk, gk, keepdims) if kind == "vec" else NotImplemented,)
    # the formulas give the ascent direction (x/|x|-like); a real function of complex x gets its
    # conjugate in JAX's convention (df/dRe - i df/dIm), hence cj
    if kind == "vec":
        return (cj(np.broadcast_to(_vector_norm_cot(x, ordv, axes, yk, gk), shape)),) + rest
    r, c = axes
    xt = np.moveaxis(x, (r, c), (-2, -1))
    ykt = np.moveaxis(yk, (r, c), (-2, -1))
    gkt = np.moveaxis(gk, (r, c), (-2, -1))
    return (cj(np.moveaxis(_matrix_norm_cot(xt, ordv, ykt, gkt), (-2, -1), (r, c))),) + rest


_NORM = "vector 2/1/inf/p, matrix fro/nuc/2/1/inf (and their negatives); complex; ties split evenly; 0 at 0"
T.rule(np.linalg.norm, norm_fwd, norm_pullback, _NORM)
T.rule(getattr(np.linalg, "vector_norm", None), vector_norm_fwd, norm_pullback, _NORM)
T.rule(getattr(np.linalg, "matrix_norm", None), matrix_norm_fwd, norm_pullback, _NORM)
