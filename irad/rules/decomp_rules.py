"""Rules for numpy.linalg's decompositions (cholesky, eigh, svd, qr) and norms.

Real matrices only for the decompositions.  numpy reads one triangle of the input of ``eigh``,
``eigvalsh`` and ``cholesky`` (``UPLO``/``upper``): the cotangent lives on that triangle, so the
rules are exact for any input, symmetric or not.  Eigenvector and singular-vector cotangents need
distinct eigenvalues / singular values; where two coincide the undefined terms are dropped
(exact when the loss does not depend on the basis chosen inside the degenerate subspace).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._common import Table, cj, nones, norm_axes
from ..errors import NoRuleError

T = Table(__name__)


def _T(x: Any) -> Any:
    return np.swapaxes(x, -1, -2)


def _mm(*xs: Any) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = np.matmul(out, x)
    return out


def _sym(x: Any) -> Any:
    return 0.5 * (x + _T(x))


def _on_triangle(gs: Any, lower: bool) -> Any:
    """A symmetric cotangent moved onto the triangle numpy reads: off-diagonal entries double."""
    return np.tril(gs) + np.tril(gs, -1) if lower else np.triu(gs) + np.triu(gs, 1)


def _inv_gaps(w: Any) -> Any:
    """F[..., i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it and where w_i == w_j."""
    d = np.expand_dims(w, -2) - np.expand_dims(w, -1)
    return np.where(d == 0, 0.0, 1.0 / np.where(d == 0, 1.0, d))


def _real_only(a: Any, name: str) -> None:
    if np.iscomplexobj(a):
        raise NoRuleError(f"irad: the rule for numpy.linalg.{name} is for real matrices")


# ---- symmetric eigenproblems and cholesky ----------------------------------------------------


def _uplo(args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
    return str(args[0] if args else kw.get("UPLO", "L")).upper() == "L"


def eigh_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    _real_only(a, "eigh")
    y = np.linalg.eigh(a, *args, **kw)
    return y, (y[0], y[1], _uplo(args, kw), 1 + len(args))


def eigh_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """A = V diag(w) V^T: A gets V (diag(gw) + F * (V^T gV)) V^T, on the triangle read."""
    w, v, lower, n = s
    gw, gv = g
    inner = _inv_gaps(w) * _mm(_T(v), gv)
    inner = inner + np.expand_dims(gw, -1) * np.eye(np.shape(w)[-1])
    return (_on_triangle(_sym(_mm(v, inner, _T(v))), lower),) + nones(n - 1)


def eigvalsh_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    _real_only(a, "eigvalsh")
    v = np.linalg.eigh(a, *args, **kw)[1]
    return np.linalg.eigvalsh(a, *args, **kw), (v, _uplo(args, kw), 1 + len(args))


def eigvalsh_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    v, lower, n = s
    return (_on_triangle(_mm(v * np.expand_dims(g, -2), _T(v)), lower),) + nones(n - 1)


def cholesky_fwd(a: Any, **kw: Any) -> tuple[Any, Any]:
    _real_only(a, "cholesky")
    y = np.linalg.cholesky(a, **kw)
    upper = bool(kw.get("upper", False))
    return y, (_T(y) if upper else y, upper)


def cholesky_pullback(s: Any, g: Any) -> tuple[Any]:
    """A = L L^T: S = L^-T Phi(L^T gL) L^-1 (Phi: lower triangle, half diagonal), symmetrised."""
    low, upper = s
    gl = _T(g) if upper else g
    p = np.tril(_mm(_T(low), gl))
    p = p - 0.5 * (np.eye(np.shape(low)[-1]) * p)
    x = np.linalg.solve(_T(low), p)             # L^-T P
    smat = _T(np.linalg.solve(_T(low), _T(x)))  # L^-T P L^-1
    return (_on_triangle(_sym(smat), not upper),)


def eig_fwd(a: Any) -> tuple[Any, Any]:
    y = np.linalg.eig(a)
    return y, (y[0], y[1], np.iscomplexobj(a))


def eigvals_fwd(a: Any) -> tuple[Any, Any]:
    w, v = np.linalg.eig(a)
    return np.linalg.eigvals(a), (w, v, np.iscomplexobj(a))


def _eig_cot(w: Any, v: Any, gw: Any, gv: Any, cplx: bool) -> Any:
    """A = V diag(w) V^-1 (columns of V of unit norm): with G = V^H gV and F_ij = 1/(w_j - w_i),
    the Hermitian adjoint sends (gw, gV) to V^-H (diag(gw) + conj(F) * (G - V^H V Re(diag(G)))) V^H;
    JAX's convention conjugates it on both sides (the real part for real A)."""
    ga = _eig_adjoint(w, v, cj(gw), None if gv is None else cj(gv))
    return cj(ga) if cplx else np.real(ga)


def _eig_adjoint(w: Any, v: Any, gw: Any, gv: Any) -> Any:
    vh = np.conj(_T(v))
    inner = np.expand_dims(gw, -1) * np.eye(np.shape(w)[-1])
    if gv is not None:
        f = np.conj(_inv_gaps(w))
        gg = _mm(vh, gv)
        diag_re = np.real(gg) * np.eye(np.shape(w)[-1])
        inner = inner + f * (gg - _mm(vh, v, diag_re))
    return np.linalg.solve(vh, _mm(inner, vh))


def eig_pullback(s: Any, g: Any) -> tuple[Any]:
    w, v, cplx = s
    gw, gv = g
    return (_eig_cot(w, v, gw, gv, cplx),)


def eigvals_pullback(s: Any, g: Any) -> tuple[Any]:
    w, v, cplx = s
    return (_eig_cot(w, v, g, None, cplx),)


T.rule(np.linalg.eig, eig_fwd, eig_pullback, "distinct eigenvalues; losses independent of eigenvector phases")
T.rule(np.linalg.eigvals, eigvals_fwd, eigvals_pullback, "distinct eigenvalues")
T.rule(np.linalg.eigh, eigh_fwd, eigh_pullback, "real; distinct eigenvalues for eigenvectors")
T.rule(np.linalg.eigvalsh, eigvalsh_fwd, eigvalsh_pullback, "real")
T.rule(np.linalg.cholesky, cholesky_fwd, cholesky_pullback, "real")

# ---- svd -------------------------------------------------------------------------------------


def _svd_core(u: Any, s: Any, vh: Any, gu: Any, gs: Any, gvh: Any) -> Any:
    """Cotangent of A = U diag(s) Vh for the reduced factors (Townsend, 'Differentiating the SVD')."""
    v, gv = _T(vh), _T(gvh)
    k = np.shape(s)[-1]
    eye = np.eye(k)
    s2 = s * s
    f = _inv_gaps(s2)  # 1 / (s_j^2 - s_i^2)
    sm = np.expand_dims(s, -2) * eye  # diag(s)
    out = np.expand_dims(gs, -1) * eye
    if gu is not None:
        utgu = _mm(_T(u), gu)
        out = out + _mm(f * (utgu - _T(utgu)), sm)
    if gv is not None:
        vtgv = _mm(_T(v), gv)
        out = out + _mm(sm, f * (vtgv - _T(vtgv)))
    ga = _mm(u, out, vh)
    sinv = np.expand_dims(1.0 / s, -2)
    m, n = np.shape(u)[-2], np.shape(v)[-2]
    if gu is not None and m > k:  # (I - U U^T) gU S^-1 V^T
        ga = ga + _mm(gu - _mm(u, _T(u), gu), sinv * eye, vh)
    if gv is not None and n > k:  # U S^-1 gV^T (I - V V^T)
        ga = ga + _mm(u, sinv * eye, _T(gv) - _mm(_T(gv), v, vh))
    return ga


def svd_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    _real_only(a, "svd")
    names = ("full_matrices", "compute_uv", "hermitian")
    o: dict[str, Any] = dict(zip(names, (True, True, False)))
    o.update(zip(names, args))
    o.update(kw)
    if o["hermitian"]:
        raise NoRuleError("irad: svd(hermitian=True) has no rule")
    y = np.linalg.svd(a, *args, **kw)
    if not o["compute_uv"]:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        return y, (u, s, vh, False, 1 + len(args))
    return y, (y[0], y[1], y[2], True, 1 + len(args))


def svd_pullback(st: Any, g: Any) -> tuple[Any, ...]:
    """Reduced factors exactly; full factors of a non-square matrix take the extra columns of U
    (rows of Vh) as a basis whose own rotation is not differentiated (exact for one extra)."""
    u, s, vh, uv, n = st
    rest = nones(n - 1)
    if not uv:
        return (_mm(u * np.expand_dims(g, -2), vh),) + rest
    gu, gs, gvh = g
    k = np.shape(s)[-1]
    u1, gu1, vh1, gvh1 = u[..., :k], gu[..., :k], vh[..., :k, :], gvh[..., :k, :]
    ga = _svd_core(u1, s, vh1, gu1, gs, gvh1)
    sinv = np.expand_dims(1.0 / s, -2) * np.eye(k)
    if np.shape(u)[-1] > k:  # U2 changes by -U1 S^-1 V^T dA^T U2
        u2, gu2 = u[..., k:], gu[..., k:]
        ga = ga - _mm(u2, _T(gu2), u1, sinv, vh1)
    if np.shape(vh)[-2] > k:  # V2 changes by -V1 S^-1 U^T dA V2
        vh2, gvh2 = vh[..., k:, :], gvh[..., k:, :]
        ga = ga - _mm(u1, sinv, _mm(vh1, _T(gvh2)), vh2)
    return (ga,) + rest


def svdvals_fwd(a: Any) -> tuple[Any, Any]:
    _real_only(a, "svdvals")
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.linalg.svdvals(a), (u, s, vh, False, 1)


T.rule(np.linalg.svd, svd_fwd, svd_pullback, "real; distinct nonzero singular values")
T.rule(getattr(np.linalg, "svdvals", None), svdvals_fwd, svd_pullback, "real")

# ---- qr --------------------------------------------------------------------------------------


def _qr_square_cot(q: Any, r: Any, gq: Any, gr: Any) -> Any:
    """A = QR with R square: A gets (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q."""
    mm = _mm(r, _T(gr)) - _mm(_T(gq), q)
    low = np.tril(mm, -1)
    copyltu = low + _T(low) + np.eye(np.shape(r)[-1]) * mm
    b = gq + _mm(q, copyltu)
    return _T(np.linalg.solve(r, _T(b)))  # b R^-T


def qr_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    _real_only(a, "qr")
    mode = args[0] if args else kw.get("mode", "reduced")
    m, n = np.shape(a)[-2], np.shape(a)[-1]
    if mode not in ("reduced", "r", "complete") or (mode == "complete" and m > n):
        raise NoRuleError(f"irad: qr(mode={mode!r}) has no rule for a {m}x{n} matrix "
                                  "(supported: 'reduced', 'r', and 'complete' when m <= n)")
    y = np.linalg.qr(a, *args, **kw)
    q, r = np.linalg.qr(a) if mode == "r" else y
    return y, (a, q, r, mode == "r", 1 + len(args))


def qr_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    a, q, r, r_only, nargs = s
    rest = nones(nargs - 1)
    gq, gr = (np.zeros(np.shape(q)), g) if r_only else g
    m, n = np.shape(a)[-2], np.shape(a)[-1]
    if m >= n:
        return (_qr_square_cot(q, r, gq, gr),) + rest
    # wide: A = [X | Y], X = Q U (square), Y = Q V; V = Q^T Y also moves with Q
    y = a[..., :, m:]
    u, gu, gv = r[..., :, :m], gr[..., :, :m], gr[..., :, m:]
    gx = _qr_square_cot(q, u, gq + _mm(y, _T(gv)), gu)
    return (np.concatenate([gx, _mm(q, gv)], axis=-1),) + rest


T.rule(np.linalg.qr, qr_fwd, qr_pullback, "real; modes reduced, r (complete if m <= n)")

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
        _real_only(x, "norm(ord=nuc/2/-2)")
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
    rest = nones(n - 1)
    yk = y if keepdims else np.expand_dims(y, axes)
    gk = g if keepdims else np.expand_dims(g, axes)
    if n >= 2:  # ord given positionally: a float ord can be differentiated (p-norms) or not at all
        rest = (_ord_cot(x, ordv, axes, yk, gk, keepdims) if kind == "vec" else NotImplemented,) + rest[1:]
    # the formulas give the ascent direction (x/|x|-like); a real function of complex x gets its
    # conjugate in JAX's convention (df/dRe - i df/dIm), hence cj
    if kind == "vec":
        return (cj(np.broadcast_to(_vector_norm_cot(x, ordv, axes, yk, gk), shape)),) + rest
    r, c = axes
    xt = np.moveaxis(x, (r, c), (-2, -1))
    ykt = np.moveaxis(yk, (r, c), (-2, -1))
    gkt = np.moveaxis(gk, (r, c), (-2, -1))
    return (cj(np.moveaxis(_matrix_norm_cot(xt, ordv, ykt, gkt), (-2, -1), (r, c))),) + rest


_NORM = "vector 2/1/inf/p, matrix fro/nuc/2/1/inf; ties split evenly; 0 at 0"
T.rule(np.linalg.norm, norm_fwd, norm_pullback, _NORM)
T.rule(getattr(np.linalg, "vector_norm", None), vector_norm_fwd, norm_pullback, _NORM)
T.rule(getattr(np.linalg, "matrix_norm", None), matrix_norm_fwd, norm_pullback, _NORM)
