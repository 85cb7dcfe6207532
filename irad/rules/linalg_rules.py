"""Rules for products (matmul, dot, einsum, tensordot, ...) and numpy.linalg's inverse-type ops.

Decompositions and norms are in ``decomp_rules``.  Products support complex values (the
cotangent of ``a`` in ``a @ b`` is ``g @ b^T``: JAX's convention, no conjugate) and broadcasting of batch dimensions (the
transform sums the batch axes down).  Inverse, determinant and solve assume a non-singular
matrix, as their derivatives do.
"""
from __future__ import annotations

import operator
import string
from collections import Counter
from typing import Any

import numpy as np

from .. import primitives as ops
from ._common import Table, cj
from ..errors import NoRuleError

T = Table(__name__)


def _H(x: Any) -> Any:
    """Conjugate transpose of the last two axes."""
    return np.swapaxes(cj(x), -1, -2)


def _T(x: Any) -> Any:
    """Transpose of the last two axes (holomorphic rules' cotangents: no conjugate)."""
    return np.swapaxes(x, -1, -2)


# ---- matmul and friends ----------------------------------------------------------------------


def matmul_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    if kw.keys() - {"dtype", "casting", "order"}:
        raise NoRuleError("irad: matmul(axes=..., out=...) has no rule")
    return np.matmul(a, b, **kw), (a, b)


def operator_matmul_fwd(a: Any, b: Any) -> tuple[Any, Any]:
    return operator.matmul(a, b), (a, b)


def linalg_matmul_fwd(a: Any, b: Any) -> tuple[Any, Any]:
    return np.linalg.matmul(a, b), (a, b)


def matmul_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """a gets g @ b^T, b gets a^T @ g; 1-d operands are promoted and demoted again."""
    a, b = s
    ad, bd = np.ndim(a), np.ndim(b)
    if ad == 1 and bd == 1:
        return g * b, a * g
    if ad == 1:  # (n,) @ (..., n, k) -> (..., k)
        ga = np.matmul(b, g[..., None])[..., 0]
        return ga, a[:, None] * np.expand_dims(g, -2)
    if bd == 1:  # (..., m, n) @ (n,) -> (..., m)
        gb = np.matmul(_T(a), g[..., None])[..., 0]
        return g[..., :, None] * b, gb
    return np.matmul(g, _T(b)), np.matmul(_T(a), g)


def dot_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    return np.dot(a, b, **kw), (a, b)


def ndarray_dot_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    return a.dot(b, **kw), (a, b)


def dot_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """dot sums the last axis of a with the second-to-last of b (the only one if b is 1-d)."""
    a, b = s
    ad, bd = np.ndim(a), np.ndim(b)
    if ad == 0 or bd == 0:
        return g * b, g * a
    ia = ad - 1
    if bd == 1:  # y[I] = sum_l a[I, l] b[l]
        ga = np.multiply.outer(g, b)
        gb = np.tensordot(a, g, axes=(list(range(ia)), list(range(ia))))
        return ga, gb
    jb = bd - 2  # y[I, J, k] = sum_l a[I, l] b[J, l, k]
    ga = np.tensordot(g, b, axes=(list(range(ia, np.ndim(g))), list(range(jb)) + [jb + 1]))
    gb = np.tensordot(a, g, axes=(list(range(ia)), list(range(ia))))
    return ga, np.moveaxis(gb, 0, jb)


def vdot_fwd(a: Any, b: Any) -> tuple[Any, Any]:
    return np.vdot(a, b), (a, b)


def vdot_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """vdot(a, b) = sum(conj(a) * b): a gets conj(b * g), b gets conj(a) * g."""
    a, b = s
    return (np.reshape(cj(np.ravel(b) * g), np.shape(a)),
            np.reshape(cj(np.ravel(a)) * g, np.shape(b)))


def _vecdot_fwd(fn: Any, a: Any, b: Any, kw: dict[str, Any]) -> tuple[Any, Any]:
    if "axes" in kw or "out" in kw:
        raise NoRuleError("irad: vecdot(axes=..., out=...) has no rule")
    return fn(a, b, **kw), (a, b, kw.get("axis", -1))


def vecdot_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    return _vecdot_fwd(np.vecdot, a, b, kw)


def linalg_vecdot_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    return _vecdot_fwd(np.linalg.vecdot, a, b, kw)


def vecdot_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    a, b, axis = s
    nd = max(np.ndim(a), np.ndim(b))
    ge = np.expand_dims(g, axis % nd)
    return cj(b * ge), cj(a) * ge


def inner_fwd(a: Any, b: Any) -> tuple[Any, Any]:
    return np.inner(a, b), (a, b)


def inner_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    a, b = s
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return g * b, g * a
    return _tensordot_cots(a, b, [np.ndim(a) - 1], [np.ndim(b) - 1], g)


def outer_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    return np.outer(a, b, **kw), (a, b)


def linalg_outer_fwd(a: Any, b: Any) -> tuple[Any, Any]:
    return np.linalg.outer(a, b), (a, b)


def outer_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    a, b = s
    ga = np.matmul(g, np.ravel(b))
    gb = np.matmul(np.ravel(a), g)
    return np.reshape(ga, np.shape(a)), np.reshape(gb, np.shape(b))


def _tensordot_axes(a: Any, b: Any, axes: Any) -> tuple[list[int], list[int]]:
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        return list(range(np.ndim(a) - n, np.ndim(a))), list(range(n))
    xa, xb = axes
    xa = [xa] if isinstance(xa, (int, np.integer)) else list(xa)
    xb = [xb] if isinstance(xb, (int, np.integer)) else list(xb)
    return [int(i) % np.ndim(a) for i in xa], [int(i) % np.ndim(b) for i in xb]


def _tensordot_cots(a: Any, b: Any, xa: list[int], xb: list[int], g: Any) -> tuple[Any, Any]:
    """Cotangents of ``tensordot(a, b, (xa, xb))`` (output axes: free a axes, then free b)."""
    fa = [i for i in range(np.ndim(a)) if i not in xa]
    fb = [i for i in range(np.ndim(b)) if i not in xb]
    nfa = len(fa)
    # a: contract g's free-b part with b's free axes -> (free a..., summed b axes sorted)
    ga = np.tensordot(g, b, axes=(list(range(nfa, np.ndim(g))), fb))
    order_b = sorted(xb)
    ga_axes = fa + [xa[xb.index(j)] for j in order_b]
    ga = np.transpose(ga, np.argsort(ga_axes))
    gb = np.tensordot(a, g, axes=(fa, list(range(nfa))))
    order_a = sorted(xa)
    gb_axes = [xb[xa.index(i)] for i in order_a] + fb
    gb = np.transpose(gb, np.argsort(gb_axes))
    return ga, gb


def tensordot_fwd(a: Any, b: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    axes = args[0] if args else kw.get("axes", 2)
    return np.tensordot(a, b, *args, **kw), (a, b, _tensordot_axes(a, b, axes))


def linalg_tensordot_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    axes = kw.get("axes", 2)
    return np.linalg.tensordot(a, b, **kw), (a, b, _tensordot_axes(a, b, axes))


def tensordot_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    a, b, (xa, xb) = s
    return _tensordot_cots(a, b, xa, xb, g)


def kron_fwd(a: Any, b: Any) -> tuple[Any, Any]:
    return np.kron(a, b), (a, b)


def kron_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """Unfold g into interleaved (a_i, b_i) axes and contract with the other factor."""
    a, b = s
    d = max(np.ndim(a), np.ndim(b))
    sa = (1,) * (d - np.ndim(a)) + np.shape(a)
    sb = (1,) * (d - np.ndim(b)) + np.shape(b)
    G = np.reshape(g, tuple(x for pair in zip(sa, sb) for x in pair))
    G = np.transpose(G, tuple(range(0, 2 * d, 2)) + tuple(range(1, 2 * d, 2)))
    A, B = np.reshape(a, sa), np.reshape(b, sb)
    ga = np.tensordot(G, B, axes=d)
    gb = np.tensordot(A, G, axes=d)
    return np.reshape(ga, np.shape(a)), np.reshape(gb, np.shape(b))


def _cross_axes(a: Any, b: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[int, int, int]:
    names = ("axisa", "axisb", "axisc", "axis")
    o = dict(zip(names, args))
    o.update(kw)
    if o.keys() - set(names):
        raise NoRuleError(f"irad: cross({', '.join(sorted(o.keys() - set(names)))}=...) has no rule")
    axisa, axisb, axisc = o.get("axisa", -1), o.get("axisb", -1), o.get("axisc", -1)
    if o.get("axis") is not None:
        axisa = axisb = axisc = o["axis"]
    return axisa, axisb, axisc


def _to3(v: Any) -> Any:
    """A stack of 2-vectors (last axis) as 3-vectors with a zero z component."""
    if np.shape(v)[-1] == 3:
        return v
    return np.concatenate([v, np.zeros(np.shape(v)[:-1] + (1,), dtype=np.result_type(v))], axis=-1)


def cross_fwd(a: Any, b: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    """Any axisa/axisb/axisc/axis and 2- or 3-vectors: the rule works on the vectors moved to the
    last axis, 2-vectors padded with a zero z component (numpy's own definition)."""
    axisa, axisb, axisc = _cross_axes(a, b, args, kw)
    y = np.cross(a, b, *args, **kw)
    A, B = np.moveaxis(a, axisa, -1), np.moveaxis(b, axisb, -1)
    return y, (A, B, axisa, axisb, axisc, np.ndim(y) < np.ndim(np.cross(_to3(A), _to3(B))))


def linalg_cross_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    axis = kw.get("axis", -1)
    return np.linalg.cross(a, b, **kw), (np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1), axis, axis, axis, False)


def cross_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """g . (da x b) = da . (b x g) and g . (a x db) = db . (g x a), on the vectors moved to the
    last axis; a 2-vector gets the x, y part of its padded cotangent."""
    A, B, axisa, axisb, axisc, z_only = s
    A3, B3 = _to3(A), _to3(B)
    if z_only:  # two stacks of 2-vectors: the result is the z component only
        G = np.stack([np.zeros_like(g), np.zeros_like(g), g], axis=-1)
    else:
        G = np.moveaxis(g, axisc, -1)
    gA = ops.sum_to(np.cross(B3, G), np.shape(A3))[..., :np.shape(A)[-1]]
    gB = ops.sum_to(np.cross(G, A3), np.shape(B3))[..., :np.shape(B)[-1]]
    return np.moveaxis(gA, -1, axisa), np.moveaxis(gB, -1, axisb)


def _outer_fwd(fn: Any, a: Any, b: Any, kw: dict[str, Any]) -> tuple[Any, Any]:
    return fn(a, b, **kw), (a, b)


def add_outer_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    return _outer_fwd(np.add.outer, a, b, kw)


def subtract_outer_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    return _outer_fwd(np.subtract.outer, a, b, kw)


def multiply_outer_fwd(a: Any, b: Any, **kw: Any) -> tuple[Any, Any]:
    return _outer_fwd(np.multiply.outer, a, b, kw)


def _sum_split(g: Any, a: Any, b: Any) -> tuple[Any, Any]:
    na, nb = np.ndim(a), np.ndim(b)
    ga = np.sum(g, axis=tuple(range(na, na + nb)))
    gb = np.sum(g, axis=tuple(range(na)))
    return ga, gb


def add_outer_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    return _sum_split(g, *s)


def subtract_outer_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    ga, gb = _sum_split(g, *s)
    return ga, -gb


def multiply_outer_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    a, b = s
    na, nb = np.ndim(a), np.ndim(b)
    return np.tensordot(g, b, axes=nb), np.tensordot(a, g, axes=na)


_MM = "1-d operands promoted like numpy"
T.rule(np.matmul, matmul_fwd, matmul_pullback, _MM)
T.rule(operator.matmul, operator_matmul_fwd, matmul_pullback, _MM)
T.rule(getattr(np.linalg, "matmul", None), linalg_matmul_fwd, matmul_pullback, _MM)
T.rule(np.dot, dot_fwd, dot_pullback)
T.rule(np.ndarray.dot, ndarray_dot_fwd, dot_pullback)
T.rule(np.vdot, vdot_fwd, vdot_pullback, "conjugates its first argument")
T.rule(getattr(np, "vecdot", None), vecdot_fwd, vecdot_pullback, "conjugates its first argument")
T.rule(getattr(np.linalg, "vecdot", None), linalg_vecdot_fwd, vecdot_pullback,
       "conjugates its first argument")
T.rule(np.inner, inner_fwd, inner_pullback)
T.rule(np.outer, outer_fwd, outer_pullback)
T.rule(getattr(np.linalg, "outer", None), linalg_outer_fwd, outer_pullback)
T.rule(np.tensordot, tensordot_fwd, tensordot_pullback)
T.rule(getattr(np.linalg, "tensordot", None), linalg_tensordot_fwd, tensordot_pullback)
T.rule(np.kron, kron_fwd, kron_pullback)
T.rule(np.cross, cross_fwd, cross_pullback, "2- and 3-vectors, any axes")
T.rule(getattr(np.linalg, "cross", None), linalg_cross_fwd, cross_pullback, "3-vectors, any axis")
T.rule(np.add.outer, add_outer_fwd, add_outer_pullback)
T.rule(np.subtract.outer, subtract_outer_fwd, subtract_outer_pullback)
T.rule(np.multiply.outer, multiply_outer_fwd, multiply_outer_pullback)

# ---- einsum ----------------------------------------------------------------------------------


def _parse_einsum(subscripts: str, operands: tuple[Any, ...]) -> tuple[list[str], str]:
    """Explicit per-operand labels and output labels, with '...' spelled out as letters."""
    subs = subscripts.replace(" ", "")
    out: str | None = None
    ins = subs
    if "->" in subs:
        ins, out = subs.split("->")
    in_list = ins.split(",")
    if len(in_list) != len(operands):
        raise ValueError(f"einsum: {len(in_list)} subscripts for {len(operands)} operands")
    used = {c for c in subs if c.isalpha()}
    free = [c for c in string.ascii_letters if c not in used]
    ell_nd = [np.ndim(op) - (len(s) - 3) if "..." in s else 0 for s, op in zip(in_list, operands)]
    k = max(ell_nd, default=0)
    ell = "".join(free[:k])
    in_exp = [s.replace("...", ell[k - e:]) for s, e in zip(in_list, ell_nd)]
    if out is None:  # implicit mode: broadcast axes, then labels seen once, sorted
        counts = Counter("".join(in_list).replace(".", ""))
        out_exp = ell + "".join(sorted(c for c, m in counts.items() if m == 1))
    else:
        out_exp = out.replace("...", ell)
    return in_exp, out_exp


def _sublist_labels(sub: Any) -> str:
    """One sublist of einsum's sublist form (ints 0-51 and Ellipsis) as subscript letters, as
    numpy reads it (0-25: a-z, 26-51: A-Z)."""
    return "".join("..." if i is Ellipsis else string.ascii_letters[int(i)] for i in sub)


def _from_sublists(args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """``einsum(op0, sub0, op1, sub1, ..., [sub_out])`` as a subscripts string and the operands."""
    operands = args[0::2] if len(args) % 2 == 0 else args[0:-1:2]
    subs = ",".join(_sublist_labels(s) for s in args[1::2][:len(operands)])
    if len(args) % 2:
        subs += "->" + _sublist_labels(args[-1])
    return subs, operands


def einsum_fwd(*args: Any, **kw: Any) -> tuple[Any, Any]:
    if kw.get("out") is not None:
        raise NoRuleError("irad: einsum(out=...) has no rule")
    sublists = not isinstance(args[0], str)
    subscripts, operands = _from_sublists(args) if sublists else (args[0], args[1:])
    ins, out = _parse_einsum(subscripts, operands)
    return np.einsum(*args, **kw), (ins, out, operands, kw.get("optimize", False), sublists, len(args))


def _einsum_cot(i: int, ins: list[str], out: str, ops_: tuple[Any, ...], g: Any, optimize: Any) -> Any:
    """Contract g with the other operands into operand i's labels.

    Repeated labels of operand i (a diagonal) get fresh labels tied by identity matrices; labels
    only operand i has (summed away) come back through a vector of ones.
    """
    sub = ins[i]
    shape = np.shape(ops_[i])
    used = set("".join(ins) + out)
    fresh = iter(c for c in string.ascii_letters if c not in used)
    terms: list[tuple[str, Any]] = [(out, g)]
    terms += [(ins[j], ops_[j]) for j in range(len(ops_)) if j != i]
    target = []
    seen: set[str] = set()
    for c, n in zip(sub, shape):
        if c in seen:
            d = next(fresh)
            terms.append((c + d, np.eye(n)))
            target.append(d)
        else:
            seen.add(c)
            target.append(c)
    present = set("".join(s for s, _ in terms))
    for c, n in zip(sub, shape):
        if c not in present:
            terms.append((c, np.ones(n)))
            present.add(c)
    spec = ",".join(s for s, _ in terms) + "->" + "".join(target)
    return np.einsum(spec, *[x for _, x in terms], optimize=optimize)


def einsum_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """One cotangent per operand; the subscripts (or, in the sublist form, each operand's sublist
    and the output sublist) get none."""
    ins, out, ops_, optimize, sublists, nargs = s
    cots = [_einsum_cot(i, ins, out, ops_, g, optimize) for i in range(len(ops_))]
    if not sublists:
        return (None,) + tuple(cots)
    res: list[Any] = [None] * nargs
    res[0:2 * len(cots):2] = cots
    return tuple(res)


T.rule(np.einsum, einsum_fwd, einsum_pullback, "any operands, '...', repeated labels, sublist form")

# ---- convolution -----------------------------------------------------------------------------


def _conv_offset(n: int, m: int, mode: str) -> int:
    if mode == "full":
        return 0
    if mode == "same":
        return (min(n, m) - 1) // 2
    if mode == "valid":
        return min(n, m) - 1
    raise ValueError(f"convolve: unknown mode {mode!r}")


def convolve_fwd(a: Any, v: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    mode = args[0] if args else kw.get("mode", "full")
    return np.convolve(a, v, *args, **kw), (a, v, mode)


def convolve_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """Embed g in the full-length output, then correlate with the other operand (np.correlate
    conjugates its second operand, which cj undoes: convolve is holomorphic in each)."""
    a, v, mode = s
    na, nv = np.size(a), np.size(v)
    off = _conv_offset(na, nv, mode)
    full = np.pad(g, (off, na + nv - 1 - off - np.size(g)))
    ga = np.correlate(full, cj(v), "valid")
    gv = np.correlate(full, cj(a), "valid")
    return ga, gv


def correlate_fwd(a: Any, v: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    mode = args[0] if args else kw.get("mode", "valid")
    return np.correlate(a, v, *args, **kw), (a, v, mode)


def correlate_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """Full correlation y_k = sum_i a[i + k - (m-1)] conj(v[i]); g is embedded in it first.

    numpy swaps the operands when v is longer, which moves the 'same' window.
    """
    a, v, mode = s
    na, nv = np.size(a), np.size(v)
    if mode == "same" and na < nv:
        off = na - 1 - (na - 1) // 2
    else:
        off = _conv_offset(na, nv, mode)
    full = np.pad(g, (off, na + nv - 1 - off - np.size(g)))
    ga = np.convolve(full, cj(v), "valid")
    gv = np.correlate(cj(full), a, "valid")[::-1]
    return ga, gv


T.rule(np.convolve, convolve_fwd, convolve_pullback, "modes full, same, valid")
T.rule(np.correlate, correlate_fwd, correlate_pullback, "modes full, same, valid")

# ---- inverse, determinant, solve -------------------------------------------------------------


def inv_fwd(a: Any) -> tuple[Any, Any]:
    y = np.linalg.inv(a)
    return y, y


def inv_pullback(y: Any, g: Any) -> tuple[Any]:
    """d inv(A) = -inv(A) dA inv(A)."""
    yh = _T(y)
    return (-np.matmul(yh, np.matmul(g, yh)),)


def det_fwd(a: Any) -> tuple[Any, Any]:
    y = np.linalg.det(a)
    return y, (a, y)


def det_pullback(s: Any, g: Any) -> tuple[Any]:
    """d det(A) = det(A) tr(inv(A) dA)."""
    a, y = s
    return (np.expand_dims(g * y, (-2, -1)) * _T(np.linalg.inv(a)),)


def slogdet_fwd(a: Any) -> tuple[Any, Any]:
    y = np.linalg.slogdet(a)
    return y, (a, y[0])


def slogdet_pullback(s: Any, g: Any) -> tuple[Any]:
    """logabsdet gets tr(inv(A) dA)'s real part; for complex A the sign (a phase, d sign =
    1j sign Im(tr(inv(A) dA))) gets the rest."""
    a, sign = s
    gsign, glog = g
    coef = glog
    if np.iscomplexobj(a):
        coef = glog + 1j * np.imag(gsign * sign)
    return (np.expand_dims(coef, (-2, -1)) * _T(np.linalg.inv(a)),)


def solve_fwd(a: Any, b: Any) -> tuple[Any, Any]:
    x = np.linalg.solve(a, b)
    return x, (a, x, np.ndim(b) == 1)


def solve_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """x = A^-1 b: b gets A^-T g, A gets -(A^-T g) x^T.  A 1-d b is one column vector."""
    a, x, vec = s
    if vec:
        gb = np.linalg.solve(_T(a), np.asarray(g)[..., None])
        return -np.matmul(gb, _T(np.asarray(x)[..., None])), gb[..., 0]
    gb = np.linalg.solve(_T(a), g)
    return -np.matmul(gb, _T(x)), gb


def pinv_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    if kw.get("hermitian") or (len(args) > 1 and args[1]):
        raise NoRuleError("irad: pinv(hermitian=True) has no rule")
    y = np.linalg.pinv(a, *args, **kw)
    return y, (a, y)


def pinv_pullback(s: Any, g: Any) -> tuple[Any]:
    """Golub & Pereyra's derivative of the pseudo-inverse (valid while the rank is constant).

    pinv is not holomorphic (it reads A^H): the formula is the Hermitian adjoint, so it runs on
    conj(g) and its result is conjugated (JAX's convention; both are no-ops on real values)."""
    return (cj(_pinv_adjoint(s, cj(g))),)


def _pinv_adjoint(s: Any, g: Any) -> Any:
    a, p = s
    ph, gh = _H(p), _H(g)
    m, k = np.shape(a)[-2], np.shape(a)[-1]
    left = np.eye(m) - np.matmul(a, p)   # I - A A+
    right = np.eye(k) - np.matmul(p, a)  # I - A+ A
    ga = (-np.matmul(ph, np.matmul(g, ph))
          + np.matmul(left, np.matmul(gh, np.matmul(p, ph)))
          + np.matmul(np.matmul(ph, p), np.matmul(gh, right)))
    return ga


def lstsq_fwd(a: Any, b: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.linalg.lstsq(a, b, *args, **kw)
    if y[2] < min(np.shape(a)):
        raise NoRuleError("irad: lstsq of a rank-deficient matrix has no rule (the solution jumps with the rank)")
    return y, (a, b, np.linalg.pinv(a), y[0])


def lstsq_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """x = A+ b at full rank: the pseudo-inverse's derivative; the residuals |b - A x|^2 give
    b 2 r g and A -2 r g x^H (A^H r = 0 there); the singular values give U diag(g) V^H.

    Those are Hermitian adjoints (lstsq is not holomorphic): conj in, conj out, as for pinv."""
    gx, gres, _, gsv = g
    ga, gb = _lstsq_adjoint(s, cj(gx), gres, gsv)
    return cj(ga), cj(gb)


def _lstsq_adjoint(s: Any, gx: Any, gres: Any, gsv: Any) -> tuple[Any, Any]:
    a, b, p, x = s
    vec = np.ndim(b) == 1
    B, X = (b[:, None], x[:, None]) if vec else (b, x)
    GX = gx[:, None] if vec else gx
    ga = _pinv_adjoint((a, p), np.matmul(GX, _H(B)))
    gb = np.matmul(_H(p), GX)
    if np.size(gres):
        rg = (B - np.matmul(a, X)) * (2.0 * gres)
        gb = gb + rg
        ga = ga - np.matmul(rg, _H(X))
    u, _, vh = np.linalg.svd(a, full_matrices=False)
    ga = ga + np.matmul(u * np.expand_dims(gsv, -2), vh)
    return ga, gb[:, 0] if vec else gb


def matrix_power_fwd(a: Any, n: int) -> tuple[Any, Any]:
    return np.linalg.matrix_power(a, n), (a, int(n))


def matrix_power_pullback(s: Any, g: Any) -> tuple[Any, None]:
    """A^n: sum_k (A^T)^k g (A^T)^(n-1-k); negative n goes through the inverse."""
    a, n = s
    if n == 0:
        return None, None
    base = a if n > 0 else np.linalg.inv(a)
    k = abs(n)
    powers = [np.broadcast_to(np.eye(np.shape(a)[-1]), np.shape(a))]
    for _ in range(k - 1):
        powers.append(np.matmul(powers[-1], base))
    gb = sum(np.matmul(_T(powers[j]), np.matmul(g, _T(powers[k - 1 - j]))) for j in range(k))
    if n < 0:
        bh = _T(base)
        gb = -np.matmul(bh, np.matmul(gb, bh))
    return gb, None


def multi_dot_fwd(arrays: Any, **kw: Any) -> tuple[Any, Any]:
    return np.linalg.multi_dot(arrays, **kw), (list(arrays), type(arrays))


def multi_dot_pullback(s: Any, g: Any) -> tuple[Any]:
    """Each factor gets (left product)^T g (right product)^T, 1-d ends promoted to 2-d."""
    items, seqtype = s
    mats = [np.asarray(x) for x in items]
    first_vec, last_vec = mats[0].ndim == 1, mats[-1].ndim == 1
    if first_vec:
        mats[0] = mats[0][None, :]
    if last_vec:
        mats[-1] = mats[-1][:, None]
    g2 = np.reshape(g, (mats[0].shape[0], mats[-1].shape[1]))
    k = len(mats)
    left = [np.eye(mats[0].shape[0])]
    for m in mats[:-1]:
        left.append(np.matmul(left[-1], m))
    right = [np.eye(mats[-1].shape[1])]
    for m in mats[:0:-1]:
        right.append(np.matmul(m, right[-1]))
    cot = [np.matmul(_T(left[i]), np.matmul(g2, _T(right[k - 1 - i]))) for i in range(k)]
    cot = [np.reshape(c, np.shape(x)) for c, x in zip(cot, items)]
    return (tuple(cot) if seqtype is tuple else cot,)


T.rule(np.linalg.inv, inv_fwd, inv_pullback)
T.rule(np.linalg.det, det_fwd, det_pullback, "non-singular matrices")
T.rule(np.linalg.slogdet, slogdet_fwd, slogdet_pullback, "non-singular matrices")
T.rule(np.linalg.solve, solve_fwd, solve_pullback, "batched; 1-d b is a vector")
T.rule(np.linalg.lstsq, lstsq_fwd, lstsq_pullback, "full rank")
T.rule(np.linalg.pinv, pinv_fwd, pinv_pullback, "constant rank")
T.rule(np.linalg.matrix_power, matrix_power_fwd, matrix_power_pullback)
T.rule(np.linalg.multi_dot, multi_dot_fwd, multi_dot_pullback, "list cotangent")
