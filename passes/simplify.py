"""Algebraic peepholes: exact rewrites of arithmetic the reverse transform leaves behind.

The pullbacks of ``x ** 2``, ``c * x`` and ``a - b`` spell their cotangents one op at a time
(``2 * x``, then ``1.0 * that``, then ``-that``), and the program pays ~30 ns per statement for
each on Python floats.  Every rewrite here gives the same bits as the code it replaces (the
exceptions are named on each rule), and fires only where the IR types say what the operands are:
Python or numpy numbers, or numeric ndarrays; objects with their own ``__mul__`` are never touched.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import numpy as np

from irad.ir import ArrayT, Const, Graph, Op, ScalarT, Var, const, map_atoms

_NEG, _ADD, _SUB, _MUL, _DIV, _POW = ("operator.neg", "operator.add", "operator.sub", "operator.mul",
                                      "operator.truediv", "operator.pow")
_FN: dict[str, Callable[..., Any]] = {_NEG: operator.neg, _ADD: operator.add, _SUB: operator.sub, _MUL: operator.mul}


def _kind(t: Any) -> str | None:
    """``"f"``/``"i"``: a float or integer number or numeric array (by the IR type); else None."""
    if isinstance(t, ScalarT):
        return {"float": "f", "int": "i"}.get(t.kind)
    if isinstance(t, ArrayT):
        return t.dtype[0] if t.dtype.startswith(("float", "int")) else None
    return None


def _immutable(v: Var) -> bool:
    """A Python number or a numpy scalar: replacing ``1.0 * v`` by ``v`` cannot alias an array."""
    return isinstance(v.type, ScalarT) or (isinstance(v.type, ArrayT) and v.type.scalar)


def _num_const(a: Any) -> float | int | None:
    """The value of a finite ``int``, ``float`` or ``np.float64`` constant (not bool), else None.
    (A rewrite that drops or merges one checks that the result keeps its type: ``np.float64(2.0)``
    times a Python float is an ``np.float64``.)"""
    if isinstance(a, Const) and type(a.value) in (int, float, np.float64) and math.isfinite(a.value):
        return a.value.item() if type(a.value) is np.float64 else a.value
    return None


def _pow2(c: float | int) -> bool:
    """``c`` is ± a power of two: multiplying by it only moves the exponent (exact)."""
    return c != 0 and math.frexp(c)[0] in (0.5, -0.5)


def simplify(g: Graph) -> Graph:
    """Rewrite arithmetic peepholes exactly; dead ops they leave are DCE's.

    - ``x ** 2`` -> ``x * x``: numpy computes ``ndarray ** 2`` as ``square``, the same bits; on
      Python floats ``pow`` goes through libm, which may round the square differently by 1 ulp
      (``x * x`` is the correctly rounded one).
    - ``1.0 * v``, ``v * 1``, ``v / 1.0`` -> ``v`` for Python numbers and numpy scalars (an array
      would be aliased instead of copied).
    - ``c1 * (c2 * v)`` -> ``(c1*c2) * v`` when ``c1`` or ``c2`` is a power of two, and
      ``c * -v``/``-(c * v)`` -> ``(-c) * v``: exact unless ``c2 * v`` overflows or is subnormal,
      where the folded form is the accurate one.
    - ``a + -b`` -> ``a - b``, ``-a + b`` -> ``b - a``, ``a - -b`` -> ``a + b``, and
      ``a + (-b) * c`` -> ``a - b * c``: IEEE defines ``a - b`` as ``a + (-b)``.
    - ``np.tensordot(y, c, axes=([], []))`` -> ``y * c`` for a 0-d ``c``; ``np.sum(Y * np.eye(n))``
      -> ``np.trace(Y)`` (not bit-exact: see ``_masked_by_identity``); scatters of array elements
      -> one array (``_assemble_scatters``).

    Before: ``%8 = operator.mul(2, %5)``, ``%9 = operator.mul(100.0, %8)``, ``%10 = operator.neg(%9)``,
    ``%11 = operator.add(%3, %10)``.  After: ``%9 = operator.mul(200.0, %5)``, ``%11 = operator.sub(%3, %9)``.
    """
    uses: dict[int, int] = {}
    for op in g.ops:
        for v in op.inputs:
            uses[v.id] = uses.get(v.id, 0) + 1
    for o in g.outputs:
        if isinstance(o, Var):
            uses[o.id] = uses.get(o.id, 0) + 2  # NOTE: an output is never "used once" by an op
    next_id = 1 + max([v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs], default=-1)
    env: dict[int, Any] = {}  # a Var replaced by another atom
    defs: dict[int, Op] = {}  # the (rewritten) op that defines each Var
    ops: list[Op] = []
    changed = 0

    def sub(a: Any) -> Any:
        return env.get(a.id, a) if isinstance(a, Var) else a

    def plain(op: Op, prim: str) -> bool:
        return op.prim == prim and not op.kwargs and not op.unpack and len(op.outs) == 1

    def single(a: Any, prim: str) -> Op | None:
        """The op defining ``a`` when it is a plain ``prim`` op read only here."""
        d = defs.get(a.id) if isinstance(a, Var) else None
        return d if d is not None and plain(d, prim) and uses.get(a.id, 0) == 1 else None

    def negated(a: Any) -> Any:
        """``b`` where ``a`` is ``-b``, a number or numeric array, read only here."""
        d = single(a, _NEG)
        return d.args[0] if d is not None and _kind(a.type) and _kind(getattr(d.args[0], "type", None)) else None

    def make(prim: str, args: tuple[Any, ...], like: Op, out: Var | None = None) -> Op:
        nonlocal next_id
        if out is None:
            out = Var(next_id, like.outs[0].type)
            next_id += 1
        new = Op(prim, args, (), (out,), _FN[prim], like.loc)
        defs[out.id] = new
        return new

    for op in g.ops:
        if env:
            op = Op(op.prim, tuple(map_atoms(a, sub) for a in op.args),
                    tuple((k, map_atoms(v, sub)) for k, v in op.kwargs), op.outs, op.fn, op.loc, op.unpack)
        new = _rewrite(op, single, negated, make, env)
        if new is op:
            new = (op,)
        else:
            changed += 1
        for n in new:
            ops.append(n)
            for o in n.outs:
                defs[o.id] = n
    if changed:
        g = g.replace(ops=tuple(ops), outputs=tuple(map_atoms(o, sub) for o in g.outputs))
    g, assembled = _assemble_scatters(g, next_id)
    if not changed and not assembled:
        return g
    return g.replace(provenance=g.provenance + (f"after simplify: rewrote {changed + assembled} ops",))


def _rewrite(op: Op, single: Any, negated: Any, make: Any, env: dict[int, Any]) -> Any:
    """The ops that replace ``op`` (``op`` itself, as the same object, when no rule applies)."""
    if op.prim == "numpy.tensordot" and len(op.outs) == 1 and not op.unpack:
        return _outer_with_scalar(op)
    if op.prim == "numpy.sum" and len(op.outs) == 1 and not op.unpack:
        return _masked_by_identity(op, single)
    if not (op.kwargs == () and not op.unpack and len(op.outs) == 1 and op.prim in (_POW, _MUL, _DIV, _ADD, _SUB, _NEG)):
        return op
    out = op.outs[0]
    kind = _kind(out.type)
    if kind is None:
        return op
    a = op.args[0]
    b: Any = op.args[1] if len(op.args) == 2 else None  # (each rule tests what b is before it reads b.type)
    if op.prim == _POW:  # NOTE: only x**2; every other power stays (the add/sub folds below are not for it)
        e = b.value if isinstance(b, Const) else None
        if isinstance(a, Var) and _kind(a.type) == kind and \
                ((type(e) is int and e == 2) or (type(e) is float and e == 2.0 and kind == "f")):
            return (make(_MUL, (a, a), op, out),)
        return op
    if op.prim in (_MUL, _DIV):
        for c, v in ((_num_const(b), a), (_num_const(a), b)) if op.prim == _MUL else ((_num_const(b), a),):
            if c is None or not isinstance(v, Var) or _kind(v.type) is None:
                continue
            if c == 1 and _immutable(v) and v.type == out.type:
                env[out.id] = v
                return ()
            if op.prim == _DIV or kind != "f" or _kind(v.type) != "f":
                continue
            inner = single(v, _MUL)
            if inner is not None:
                for c2, w in ((_num_const(inner.args[0]), inner.args[1]), (_num_const(inner.args[1]), inner.args[0])):
                    if c2 is not None and isinstance(w, Var) and w.type == out.type and (_pow2(c) or _pow2(c2)) \
                            and math.isfinite(c * c2):
                        return (make(_MUL, (const(float(c * c2)), w), op, out),)
            w = negated(v)
            if w is not None and w.type == out.type:
                return (make(_MUL, (const(-float(c)), w), op, out),)
        return op
    if op.prim == _NEG:
        inner = single(a, _MUL)
        if inner is not None and kind == "f":
            for c, w in ((_num_const(inner.args[0]), inner.args[1]), (_num_const(inner.args[1]), inner.args[0])):
                if c is not None and isinstance(w, Var) and w.type == out.type:
                    return (make(_MUL, (const(-float(c)), w), op, out),)
        return op
    # add / sub: fold a negation of the right (or, for add, the left) operand into the operator
    if not all(_num_const(x) is not None or (isinstance(x, Var) and _kind(x.type)) for x in (a, b)):
        return op
    nb = negated(b)
    if nb is not None:
        return (make(_SUB if op.prim == _ADD else _ADD, (a, nb), op, out),)
    if op.prim == _ADD:
        na = negated(a)
        if na is not None:
            return (make(_SUB, (b, na), op, out),)
    m = single(b, _MUL)
    if m is not None and _kind(b.type):
        for i in (0, 1):
            w = negated(m.args[i])
            if w is not None:
                prod = make(_MUL, (w, m.args[1 - i]) if i == 0 else (m.args[0], w), m)
                return (prod, make(_SUB if op.prim == _ADD else _ADD, (a, prod.outs[0]), op, out))
    return op


def _outer_with_scalar(op: Op) -> Any:
    """``np.tensordot(y, c, axes=([], []))`` with a 0-d ``c`` (a scalar's pullback through ``dot``)
    is ``y * c``: one multiplication per element either way, the same bits."""
    out = op.outs[0]
    kws = dict(op.kwargs)
    if len(op.args) != 2 or set(kws) != {"axes"} or not isinstance(kws["axes"], Const):
        return op
    y, c = op.args
    ct = getattr(c, "type", None)
    if kws["axes"].value in (([], []), ((), ()), 0) and isinstance(y, Var) and y.type == out.type and \
            isinstance(y.type, ArrayT) and y.type.shape and isinstance(ct, ArrayT) and ct.shape == () and \
            np.result_type(y.type.dtype, ct.dtype) == np.dtype(y.type.dtype):
        return (Op("operator.mul", (y, c), (), (out,), operator.mul, op.loc),)
    return op


def _identity(a: Any) -> bool:
    """``a`` is a constant irad made (never the user's array, which may change) equal to ``np.eye(n)``."""
    v = a.value if isinstance(a, Const) and not a.live else None
    return isinstance(v, np.ndarray) and v.ndim == 2 and v.shape[0] == v.shape[1] and \
        v.dtype.kind == "f" and np.array_equal(v, np.eye(v.shape[0], dtype=v.dtype))


def _masked_by_identity(op: Op, single: Any) -> Any:
    """``np.sum(Y * np.eye(n))`` over both axes (the pullback of ``K + s * np.eye(n)`` with respect
    to ``s``) is ``np.trace(Y)``: ``n`` additions instead of an ``n x n`` product and sum.  Not the
    same bits: the same ``n`` numbers are added in another order (a few ulp), and an inf or nan
    off the diagonal, which the product turns into nan, is not read."""
    out = op.outs[0]
    kws = dict(op.kwargs)
    if len(op.args) != 1 or set(kws) - {"axis"}:
        return op
    axis = kws["axis"].value if "axis" in kws and isinstance(kws["axis"], Const) else None
    if "axis" in kws and (not isinstance(kws["axis"], Const) or
                          type(axis) is not tuple or sorted(a % 2 for a in axis) != [0, 1]):
        return op
    m = single(op.args[0], _MUL)
    if m is None or len(m.args) != 2:
        return op
    for y, c in ((m.args[0], m.args[1]), (m.args[1], m.args[0])):
        if isinstance(y, Var) and y.type == m.outs[0].type and isinstance(y.type, ArrayT) and \
                len(y.type.shape) == 2 and y.type.dtype.startswith("float") and _identity(c) and \
                c.value.shape == y.type.shape and np.dtype(c.value.dtype) == np.dtype(y.type.dtype) and \
                out.type == ArrayT(y.type.dtype, (), True):
            return (Op("numpy.trace", (y,), (), (out,), np.trace, op.loc),)
    return op


# ---- a gradient assembled element by element ---------------------------------------------------

_F64 = ArrayT("float64", (), True)
#: the largest array whose elements ``_assemble_scatters`` writes out one by one
MAX_ASSEMBLED = 1024


def _scatter_of(op: Op) -> tuple[tuple[int, ...], dict[int, Any]] | None:
    """``irad.primitives.setitem(zeros, i, v)`` (``x[i]``'s pullback: a float64 array of zeros with one
    float element set) as ``(shape, {flat index: v})``; else None."""
    if op.prim != "irad.primitives.setitem" or op.kwargs or op.unpack or len(op.args) != 3 or len(op.outs) != 1:
        return None
    z, idx, v = op.args
    zv = z.value if isinstance(z, Const) and not z.live else None
    if not isinstance(zv, np.ndarray) or zv.dtype != np.float64 or zv.ndim == 0 or zv.size > MAX_ASSEMBLED or \
            zv.any() or not isinstance(idx, Const) or op.outs[0].type != ArrayT("float64", zv.shape):
        return None
    i = idx.value if type(idx.value) is tuple else (idx.value,)
    if len(i) != zv.ndim or any(type(k) is not int or not -n <= k < n for k, n in zip(i, zv.shape)):
        return None
    if not (isinstance(v, (Var, Const)) and v.type in (ScalarT("float"), _F64)):
        return None
    return zv.shape, {int(np.ravel_multi_index(tuple(k % n for k, n in zip(i, zv.shape)), zv.shape)): v}


def _assemble_scatters(g: Graph, next_id: int) -> tuple[Graph, int]:
    """A sum of one-element scatters becomes one array of per-element sums.

    ``x[i]`` of an array has the pullback ``setitem(zeros, i, ḡ)``, so scalar code that indexes an
    array (``x[i + 1] - x[i] ** 2``) accumulates its gradient as a chain of whole-array copies and
    additions.  Each element's additions happen in the same order on the same numbers, and the
    result is built once (``np.array([...])``): the same bits, except that a ``-0.0`` element
    that the chain would have added ``+0.0`` to stays ``-0.0``.
    """
    uses: dict[int, int] = {}
    reader: dict[int, int] = {}
    for j, op in enumerate(g.ops):
        for v in op.inputs:
            uses[v.id] = uses.get(v.id, 0) + 1
            reader[v.id] = j
    for o in g.outputs:
        if isinstance(o, Var):
            uses[o.id] = uses.get(o.id, 0) + 2
    parts: dict[int, tuple[tuple[int, ...], dict[int, Any]]] = {}  # a scatter or a sum of them
    for op in g.ops:
        sc = _scatter_of(op)
        if sc is None and op.prim == "operator.add" and len(op.args) == 2 and not op.kwargs and len(op.outs) == 1:
            a, b = (parts.get(x.id) if isinstance(x, Var) else None for x in op.args)
            if a is not None and b is not None and a[0] == b[0]:
                merged = dict(a[1])
                for k, e in b[1].items():
                    merged[k] = ("+", merged[k], e) if k in merged else e
                sc = (a[0], merged)
        if sc is not None:
            parts[op.outs[0].id] = sc
    # a part read once, by a sum of parts, is folded into that sum; the others are built where they are
    folded = {vid for vid in parts if uses.get(vid) == 1 and g.ops[reader[vid]].prim == "operator.add"
              and g.ops[reader[vid]].outs[0].id in parts}
    built_set = {op.outs[0].id for op in g.ops if op.prim == "operator.add" and op.outs and op.outs[0].id in parts
                 and op.outs[0].id not in folded}
    if not built_set:
        return g, 0
    ops: list[Op] = []
    for op in g.ops:
        o = op.outs[0].id if len(op.outs) == 1 else None
        if o in folded:
            continue
        if o not in built_set:
            ops.append(op)
            continue
        shape, elems = parts[o]

        def emit(e: Any) -> Any:
            nonlocal next_id
            if not isinstance(e, tuple):
                return e
            x, y = emit(e[1]), emit(e[2])
            t = _F64 if _F64 in (x.type, y.type) else ScalarT("float")
            out = Var(next_id, t)
            next_id += 1
            ops.append(Op("operator.add", (x, y), (), (out,), operator.add, op.loc))
            return out

        flat = [emit(elems[k]) if k in elems else const(0.0) for k in range(int(np.prod(shape)))]
        nested: Any = flat
        for n in reversed(shape[1:]):
            nested = [nested[k:k + n] for k in range(0, len(nested), n)]
        ops.append(Op("numpy.array", (nested,), (("dtype", const(np.dtype(np.float64))),), op.outs, np.array, op.loc))
    return g.replace(ops=tuple(ops)), len(built_set)
