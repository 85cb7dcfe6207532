"""Batching rules: how each primitive maps over a leading batch axis (``irad.batching``).

Table rows keyed by implementation (``register([fns], rule)``), one rule for a family of
functions.  A rule gets the ``Batcher``, the op, and the op's arguments with batched values
substituted; it emits ops (``b.rewrite``, ``b.emit``) whose outputs carry the batch axis first,
or raises ``Fallback`` for a case it does not cover (the op is then looped).  Ufuncs without a
row of their own use ``np.ufunc``'s (elementwise); ``ufunc.outer`` uses ``(np.ufunc, "outer")``.
"""
from __future__ import annotations

import builtins
import operator
import string
from typing import Any, Callable

import numpy as np

from .. import primitives as irad_ops
from ..batching import Batcher, Fallback, Looped, Rule, dtype_of, register
from ..ir import ArrayT, Const, OpaqueT, Op, ScalarT, Var, const, map_atoms
from ..pytree import flatten
from .registry import impl_key

# ---- helpers ----


def _out(op: Op) -> ArrayT:
    """The type of ``op``'s one output, which the rule needs to be an array's."""
    t = op.out.type
    if not isinstance(t, ArrayT):
        raise Fallback(f"{op.prim} returns {t}")
    return t


def _static(a: Any) -> Any:
    """The value of a static argument (an axis, a shape); a traced one is not covered."""
    if isinstance(a, Const):
        return a.value
    if isinstance(a, Var):
        raise Fallback(f"{a} is not static")
    return map_atoms(a, _static) if isinstance(a, (tuple, list)) else a


def _only_first_batched(b: Batcher, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The first argument, which must be the only batched one."""
    if not args or not b.is_b(args[0]) or any(b.any_b(a) for a in args[1:]) or \
            any(b.any_b(v) for v in kwargs.values()):
        raise Fallback("a batched argument other than the first")
    return args[0]


def _axis(a: Any, nd: int) -> int:
    """Unbatched axis ``a`` of a rank-``nd`` value as an axis of its batched form."""
    if type(a) is bool or not isinstance(a, (int, np.integer)):
        raise Fallback(f"axis {a!r}")
    if nd == 0 and a in (0, -1):  # numpy reduces a 0-d array over its "axis 0": over nothing
        return -1
    if not -nd <= a < nd:
        raise Fallback(f"axis {a} out of range")
    return int(a) % nd + 1


def _axes(axis: Any, nd: int) -> Any:
    """``axis`` (an int or a tuple of them) shifted past the batch axis."""
    if isinstance(axis, (tuple, list)):
        return tuple(x for x in (_axis(a, nd) for a in axis) if x >= 0)
    x = _axis(axis, nd)
    return () if x < 0 else x


def _replace_arg(args: tuple[Any, ...], kwargs: dict[str, Any], pos: int, name: str, value: Any) \
        -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Put ``value`` where the op passed argument ``name`` (position ``pos``), as a keyword if it did not."""
    if len(args) > pos:
        return args[:pos] + (const(value),) + args[pos + 1:], kwargs
    return args, {**kwargs, name: const(value)}


def _get_arg(args: tuple[Any, ...], kwargs: dict[str, Any], pos: int, name: str, default: Any) -> Any:
    if len(args) > pos:
        return _static(args[pos])
    return _static(kwargs[name]) if name in kwargs else default


def _flat_rows(b: Batcher, x: Any) -> Var:
    """Batched ``x`` with each row flattened: ``(size, -1)``."""
    n = int(np.prod(b.shape(x)))
    return b.emit(np.reshape, (x, const((b.size, n))), ArrayT(dtype_of(x), (b.size, n)))


def batched_bincount(x: np.ndarray, weights: np.ndarray, minlength: int) -> np.ndarray:
    """``np.bincount(x, weights[i], minlength)`` for every row ``i`` of ``weights``, in one call:
    row ``i``'s bins are offset by ``i * minlength``."""
    size = weights.shape[0]
    offset = (np.asarray(x) + minlength * np.arange(size)[:, None]).ravel()
    return np.bincount(offset, weights.reshape(-1), size * minlength).reshape(size, minlength)


# ---- rules: elementwise ----


_SAMPLES = {"float": 1.0, "int": 1, "bool": True, "complex": 1 + 0j}


def _sample(b: Batcher, a: Any) -> Any:
    """A one-element stand-in with ``a``'s dtype and kind (array, numpy scalar, Python scalar):
    numpy's result dtype depends on nothing else (NEP 50)."""
    if isinstance(a, Const):
        return np.ones((), a.value.dtype) if isinstance(a.value, np.ndarray) else a.value
    if not isinstance(a, Var):
        return map_atoms(a, lambda x: _sample(b, x))
    t = a.type
    if isinstance(t, ScalarT):
        return _SAMPLES[t.kind]
    if isinstance(t, ArrayT):
        return np.dtype(t.dtype).type(1) if t.scalar else np.ones((), t.dtype)
    raise Fallback("an opaque operand")


def _result_dtypes(b: Batcher, op: Op, fn: Callable[..., Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> list[str | None]:
    """The dtypes of ``fn`` on the batched operands (a batched Python float is a float64 array,
    which numpy casts like any array): ``fn`` run on one-element samples."""
    try:
        with np.errstate(all="ignore"):
            r = fn(*[_sample(b, a) for a in args],
                   **{k: _sample(b, v) for k, v in kwargs.items() if not k.startswith("_")})
        leaves = flatten(r)[0] if op.unpack else [r]
        return [np.asarray(x).dtype.name for x in leaves]
    except Exception:  # noqa: BLE001  (keep the traced dtypes)
        return [None] * len(op.outs)


def elementwise(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any], fn: Any = None) -> list[Var]:
    """Operators, ufuncs and other elementwise functions: batched operands get unit axes after the
    batch axis up to the rank of the widest operand, then broadcasting does the rest."""
    if any(b.any_b(v) for v in kwargs.values()) or \
            any(not isinstance(a, (Var, Const)) and b.any_b(a) for a in args) or "ndmin" in kwargs:
        raise Fallback("a batched keyword or container argument")
    fn = op.fn if fn is None else fn
    r = max([b.rank(a) for a in args if isinstance(a, (Var, Const)) and not
             (isinstance(a, Var) and isinstance(a.type, OpaqueT))], default=0)
    new = tuple(b.align(a, r) for a in args)
    return b.rewrite(op, fn, new, kwargs, _result_dtypes(b, op, fn, new, kwargs))


def _shape_from_first(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``np.full_like(a, v)``: the result has ``a``'s shape, so ``a`` must be batched."""
    if not b.is_b(args[0]):
        raise Fallback("the shape comes from an unbatched argument")
    return elementwise(b, op, args, kwargs)


def _where(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    if len(args) != 3:
        raise Fallback("np.where(condition) gives indices")
    return elementwise(b, op, args, kwargs)


def _python_minmax(pick: Any) -> Rule:
    """``max(a, b)`` of two numbers is ``b`` where ``b > a`` else ``a`` (Python keeps the first of equals)."""
    def rule(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
        if len(args) != 2 or kwargs:
            raise Fallback("max/min of other than two numbers")
        x, y = args
        r = max(b.rank(x), b.rank(y))
        x, y = b.align(x, r), b.align(y, r)
        shape = (b.size,) + tuple(np.broadcast_shapes(b.shape(x), b.shape(y)))
        test = b.emit(pick, (y, x), ArrayT("bool", shape))
        dtypes = _result_dtypes(b, op, np.where, (test, y, x), {})
        return b.rewrite(op, np.where, (test, y, x), {}, dtypes)
    return rule


def _to_float(dtype: str) -> Rule:
    """``float(x)`` / ``complex(x)`` of a batched value: an array of that dtype."""
    def rule(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
        if len(args) != 1 or kwargs:
            raise Fallback("float() of other than one number")
        return b.rewrite(op, np.asarray, args, {"dtype": const(np.dtype(dtype))}, [dtype])
    return rule


def _to_dtype(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``irad.primitives.to_dtype(g, dtype, scalar)``: a batched cotangent is an array, never a scalar."""
    g = _only_first_batched(b, args, kwargs)
    return b.rewrite(op, irad_ops.to_dtype, (g, args[1], const(False)))


def _add_into(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``add_into(a, g)`` writes into ``a``'s buffer, which batching may have made a view or a
    smaller array: a plain ``a + g`` instead."""
    return elementwise(b, op, args, kwargs, fn=operator.add)


# ---- rules: reductions and axes ----


def axis_rule(pos: int, default: Any, none: str, reduces: bool = False) -> Rule:
    """A function of one array with an axis parameter at ``pos`` (``default`` when not passed);
    ``none`` says what ``axis=None`` means: ``"all"`` axes, ``"flatten"`` first, ``"unit"``
    (the size-1 axes: ``squeeze``), or ``"error"``.  ``reduces``: it takes a tuple of axes (so a
    0-d value's axis 0 can be no axis at all)."""
    def rule(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
        x = _only_first_batched(b, args, kwargs)
        shape = b.shape(x)
        axis = _get_arg(args, kwargs, pos, "axis", default)
        if axis is None:
            if none == "all":
                new: Any = tuple(range(1, len(shape) + 1))
            elif none == "unit":
                new = tuple(i + 1 for i, n in enumerate(shape) if n == 1)
            elif none == "flatten":
                x, new = _flat_rows(b, x), 1
            else:
                raise Fallback("axis=None")
        else:
            new = _axes(axis, len(shape))
            if new == () and not (reduces or isinstance(axis, (tuple, list))):
                raise Fallback("an int axis of a 0-d value")
        args, kw = _replace_arg((x,) + args[1:], kwargs, pos, "axis", new)
        return b.rewrite(op, op.fn, args, kw)
    return rule


reduction = axis_rule(1, None, "all", reduces=True)


def _expand_dims(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """Axes count in the result: non-negative ones move past the batch axis, negative ones stay."""
    x = _only_first_batched(b, args, kwargs)
    axis = _get_arg(args, kwargs, 1, "axis", None)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if not all(isinstance(a, (int, np.integer)) for a in axes):
        raise Fallback("axis")
    args, kw = _replace_arg((x,) + args[1:], kwargs, 1, "axis", tuple(int(a) + 1 if a >= 0 else int(a) for a in axes))
    return b.rewrite(op, op.fn, args, kw)


#: where ``order`` goes when passed positionally (``ndarray.reshape``'s are all shape)
_ORDER_AT = {np.reshape: 2, np.ravel: 1, np.ndarray.ravel: 1, np.ndarray.flatten: 1}


def _reshape(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``reshape``/``ravel``/``flatten`` in C order: each row to the traced result shape."""
    x = args[0]
    if not b.is_b(x) or any(b.any_b(a) for a in args[1:]) or any(b.any_b(v) for v in kwargs.values()):
        raise Fallback("a traced shape")
    pos = _ORDER_AT.get(impl_key(op.fn))
    order = _static(kwargs["order"]) if "order" in kwargs else \
        _static(args[pos]) if pos is not None and len(args) > pos else "C"
    if order != "C":
        raise Fallback(f"order={order!r}")
    return b.rewrite(op, np.reshape, (x, const((b.size,) + _out(op).shape)))


def _transpose(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    x = _only_first_batched(b, args, kwargs)
    nd = b.rank(x)
    axes = tuple(_static(a) for a in args[1:]) or ((_static(kwargs["axes"]),) if "axes" in kwargs else ())
    if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list, np.ndarray))):
        axes = tuple(np.asarray(axes[0]).tolist()) if axes[0] is not None else ()
    perm = tuple(range(nd - 1, -1, -1)) if not axes else axes
    return b.rewrite(op, np.transpose, (x, const((0,) + tuple(_axis(a, nd) for a in perm))))


def _swapaxes(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    x = _only_first_batched(b, args, kwargs)
    nd = b.rank(x)
    if len(args) != 3 or kwargs:
        raise Fallback("swapaxes keywords")
    return b.rewrite(op, np.swapaxes, (x, const(_axis(_static(args[1]), nd)), const(_axis(_static(args[2]), nd))))


def _moveaxis(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    x = _only_first_batched(b, args, kwargs)
    nd = b.rank(x)
    src = _get_arg(args, kwargs, 1, "source", None)
    dst = _get_arg(args, kwargs, 2, "destination", None)

    def shift(a: Any) -> Any:
        return tuple(_axis(i, nd) for i in a) if isinstance(a, (tuple, list)) else _axis(a, nd)
    return b.rewrite(op, np.moveaxis, (x, const(shift(src)), const(shift(dst))))


def _broadcast_to(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    x = _only_first_batched(b, args, kwargs)
    shape = _out(op).shape
    return b.rewrite(op, np.broadcast_to, (b.align(x, len(shape)), const((b.size,) + shape)))


def _diff(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    if "prepend" in kwargs or "append" in kwargs:
        raise Fallback("prepend/append")
    return list(axis_rule(2, -1, "error")(b, op, args, kwargs))


def _pad(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``np.pad`` in constant mode: no padding along the batch axis."""
    x = _only_first_batched(b, args, kwargs)
    mode = _get_arg(args, kwargs, 2, "mode", "constant")
    if mode != "constant" or set(kwargs) - {"mode", "constant_values"} or \
            np.ndim(_static(kwargs.get("constant_values", const(0)))) != 0:
        raise Fallback("np.pad other than with one constant")
    widths = np.broadcast_to(np.asarray(_get_arg(args, kwargs, 1, "pad_width", 0), dtype=np.intp), (b.rank(x), 2))
    new = ((0, 0),) + tuple((int(lo), int(hi)) for lo, hi in widths)
    rest = {k: v for k, v in kwargs.items() if k != "pad_width"}
    return b.rewrite(op, op.fn, (x, const(new)) + args[2:], rest)


# ---- rules: joining and splitting ----


def _join(stack: bool) -> Rule:
    """``np.concatenate`` / ``np.stack``: unbatched parts are broadcast along the batch axis."""
    def rule(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
        seq = args[0]
        if not isinstance(seq, (tuple, list)) or not seq or any(b.any_b(a) for a in args[1:]) or \
                any(b.any_b(v) for v in kwargs.values()):
            raise Fallback("a sequence that is one array")
        axis = _get_arg(args, kwargs, 1, "axis", 0)
        parts = [b.lift(x) for x in seq]
        nd = b.rank(seq[0])
        if axis is None:
            if stack:
                raise Fallback("axis=None")
            parts, new = [_flat_rows(b, x) for x in parts], 1
        else:
            new = _axis(axis, nd + 1 if stack else nd)
        rest = {k: v for k, v in kwargs.items() if k != "axis"}
        return b.rewrite(op, op.fn, (type(seq)(parts),), {**rest, "axis": const(new)})
    return rule


def _split(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    x = _only_first_batched(b, args, kwargs)
    axis = _get_arg(args, kwargs, 2, "axis", 0)
    a, kw = _replace_arg((x,) + args[1:], kwargs, 2, "axis", _axis(axis, b.rank(x)))
    return b.rewrite(op, op.fn, a, kw)


# ---- rules: indexing ----


def _index_items(idx: Any) -> list[Any]:
    """The items of an index (an atom or a tuple of atoms) as a list of atoms."""
    if isinstance(idx, Const) and type(idx.value) is tuple:
        return [const(v) for v in idx.value]
    if type(idx) is tuple:
        return list(idx)
    return [idx]


def _is_array_index(b: Batcher, a: Any) -> bool:
    if not isinstance(a, (Const, Var)):  # a list holding traced ints (x[[n, 0]]): not worked out here
        raise Fallback("an index list with traced entries")
    if isinstance(a, Const):
        v = a.value
        if isinstance(v, (bool, np.bool_)):
            raise Fallback("a boolean scalar index")
        return isinstance(v, (np.ndarray, list))
    t = a.type
    return isinstance(t, ArrayT) and bool(t.shape)


def _leading_index(b: Batcher, idx: Any) -> Any:
    """The index for the batched array: a full slice first.  Only where that leaves the batch axis
    first: numpy moves the axes of advanced indices that a slice separates to the front."""
    items = _index_items(idx)
    if any(b.any_b(a) for a in items):
        raise Fallback("a batched index")
    arrays = [i for i, a in enumerate(items) if _is_array_index(b, a)]
    if arrays:
        adv = [i for i, a in enumerate(items) if i in arrays or
               (isinstance(a, Const) and isinstance(a.value, (int, np.integer))) or
               (isinstance(a, Var) and isinstance(a.type, (ArrayT, ScalarT)))]
        if adv != list(range(adv[0], adv[0] + len(adv))):
            raise Fallback("advanced indices separated by a slice")
    if all(isinstance(a, Const) for a in items):
        return const((slice(None),) + tuple(a.value for a in items))
    return (const(slice(None)),) + tuple(items)


def _indexed_shape(b: Batcher, shape: tuple[int, ...], idx: Any) -> tuple[int, ...]:
    """The shape of ``a[idx]`` for ``a`` of ``shape`` (traced integer indices by their shapes)."""
    def value(a: Any) -> Any:
        if isinstance(a, Const):
            return a.value
        t = a.type
        if isinstance(t, ArrayT) and t.dtype.startswith(("int", "uint")):
            return np.zeros(t.shape, t.dtype)
        if isinstance(t, ScalarT) and t.kind == "int":
            return 0
        raise Fallback("an index whose shape depends on values")
    items = tuple(value(a) for a in _index_items(idx))
    try:
        return tuple(np.broadcast_to(np.zeros((), np.int8), shape)[items].shape)
    except (IndexError, TypeError, ValueError) as e:
        raise Fallback(f"index: {e}") from e


def _getitem(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    x, idx = args
    if not b.is_b(x):
        t = idx.type if isinstance(idx, Var) else None
        if b.is_b(idx) and isinstance(t, ArrayT) and t.dtype.startswith(("int", "uint")) and \
                isinstance(x.type, ArrayT) and x.type.shape:
            return b.rewrite(op, operator.getitem, (x, idx))  # x[i] for each row i of indices
        raise Fallback("a batched index")
    if not isinstance(x.type, ArrayT):
        raise Fallback("indexing a batch of other values")
    return b.rewrite(op, operator.getitem, (x, _leading_index(b, idx)))


def _scatter(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``irad.primitives.setitem(a, index, v)`` / ``add_at``: both copy ``a``, so an unbatched ``a`` may be
    a broadcast view; ``v`` gets unit axes to broadcast against each row's ``a[index]``."""
    if len(args) != 3 or kwargs:
        raise Fallback("keywords")
    a, idx, v = args
    new_idx = _leading_index(b, idx)
    sub = _indexed_shape(b, b.shape(a), idx)
    return b.rewrite(op, op.fn, (b.lift(a), new_idx, b.align(v, len(sub))))


def _take(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    x = _only_first_batched(b, args, kwargs)
    axis = _get_arg(args, kwargs, 2, "axis", None)
    if axis is None:
        x, new = _flat_rows(b, x), 1
    else:
        new = _axis(axis, b.rank(x))
    a, kw = _replace_arg((x,) + args[1:], kwargs, 2, "axis", new)
    return b.rewrite(op, op.fn, a, kw)


def _take_along_axis(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """Both the array and the indices may be batched; the unbatched one gets a unit batch axis."""
    x, idx = args[:2]
    axis = _get_arg(args, kwargs, 2, "axis", None)
    if axis is None or b.any_b(args[2:]) or any(b.any_b(v) for v in kwargs.values()):
        raise Fallback("axis=None")
    nd = b.rank(x)
    pair = [a if b.is_b(a) else b.index(a, (None,), (1,) + b.shape(a)) for a in (x, idx)]
    a, kw = _replace_arg(tuple(pair) + args[2:], kwargs, 2, "axis", _axis(axis, nd))
    return b.rewrite(op, op.fn, a, kw)


def _bincount(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """Batched weights of unbatched bins: one bincount over offset bins (``batched_bincount``)."""
    x = args[0]
    w = args[1] if len(args) > 1 else kwargs.get("weights")
    if b.is_b(x) or w is None or not b.is_b(w) or len(args) > 2:
        raise Fallback("batched bins")
    return b.rewrite(op, batched_bincount, (x, w, const(_out(op).shape[0])))


# ---- rules: products ----


def _promote(b: Batcher, x: Any, idx: tuple[Any, ...], shape: tuple[int, ...]) -> Var:
    """``x[idx]`` for a batched ``x`` (a leading full slice added) or an unbatched one."""
    if b.is_b(x):
        return b.index(x, (slice(None),) + idx, (b.size,) + shape)
    return b.index(x, idx, shape)


def _matmul(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``x @ y``.  Numpy reads a batched vector as a matrix and broadcasts stacks from the right,
    so: vectors become explicit matrices, batched stacks get unit axes up to the other's rank, and
    the unit axes come off at the end.  Matrix-vector products against an unbatched matrix (the
    pullback of ``W @ x``) run as one matrix product over the whole batch."""
    if kwargs or len(args) != 2:
        raise Fallback("matmul keywords")
    x, y = args
    rx, ry = b.rank(x), b.rank(y)
    bx, by = b.is_b(x), b.is_b(y)
    if rx == 0 or ry == 0:
        raise Fallback("matmul of a scalar")
    out_shape = _out(op).shape
    dt = _out(op).dtype
    B = b.size
    if bx and not by and (ry == 1 or rx == 1 and ry == 2):
        # x @ vector: numpy takes stacks on the left as they come; (B, n) @ matrix: one product
        return b.rewrite(op, np.matmul, (x, y))
    if bx and not by and rx == 2 and ry == 2:
        k, n = b.shape(x)
        flat = b.emit(np.reshape, (x, const((B * k, n))), ArrayT(dtype_of(x), (B * k, n)))
        r = b.emit(np.matmul, (flat, y), ArrayT(dt, (B * k,) + out_shape[-1:]))
        return b.rewrite(op, np.reshape, (r, const((B,) + out_shape)))
    if by and not bx and rx == 2 and (ry == 1 or ry == 2 and b.shape(y)[1] == 1):
        k, n = b.shape(x)
        xt = b.emit(np.transpose, (x, const(None)), ArrayT(dtype_of(x), (n, k)), batched=False)
        if ry == 1:  # each row: x @ y_i, i.e. (y @ x.T)_i
            return b.rewrite(op, np.matmul, (y, xt))
        vec = b.emit(np.reshape, (y, const((B, n))), ArrayT(dtype_of(y), (B, n)))
        r = b.emit(np.matmul, (vec, xt), ArrayT(dt, (B, k)))
        return b.rewrite(op, np.reshape, (r, const((B,) + out_shape)))
    # general: explicit matrices, stacks aligned, unit axes dropped at the end
    xs = _promote(b, x, (None, slice(None)), (1,) + b.shape(x)) if rx == 1 else x
    ys = _promote(b, y, (Ellipsis, None), b.shape(y) + (1,)) if ry == 1 else y
    r_ = max(b.rank(xs), b.rank(ys))
    xs, ys = b.align(xs, r_), b.align(ys, r_)
    full = out_shape
    drop: tuple[Any, ...] = ()
    if rx == 1 and ry == 1:
        full, drop = out_shape + (1, 1), (Ellipsis, 0, 0)
    elif ry == 1:
        full, drop = out_shape + (1,), (Ellipsis, 0)
    elif rx == 1:
        full, drop = out_shape[:-1] + (1,) + out_shape[-1:], (Ellipsis, 0, slice(None))
    if not drop:
        return b.rewrite(op, np.matmul, (xs, ys))
    r = b.emit(np.matmul, (xs, ys), ArrayT(dt, (B,) + full))
    return b.rewrite(op, operator.getitem, (r, const(drop)))


def _dot(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``np.dot``: a product with a scalar, ``matmul`` up to 2-d, else a batched first operand."""
    if kwargs or len(args) != 2:
        raise Fallback("dot keywords")
    x, y = args
    rx, ry = b.rank(x), b.rank(y)
    if rx == 0 or ry == 0:
        return elementwise(b, op, args, kwargs, fn=np.multiply)
    if rx <= 2 and ry <= 2 or rx == 1 or ry == 1:  # (where dot and matmul agree)
        return _matmul(b, op, args, kwargs)
    if b.is_b(x) and not b.is_b(y):
        return b.rewrite(op, np.dot, (x, y))
    raise Fallback("dot of a batched n-d second operand")


def _letters(used: str, n: int) -> str:
    free = [c for c in string.ascii_letters if c not in used]
    if len(free) < n:
        raise Fallback("einsum has no free label")
    return "".join(free[:n])


def _einsum_of(b: Batcher, op: Op, spec: str, operands: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``np.einsum(spec, *operands)`` with a new label for the batch axis on batched operands and
    first in the output."""
    spec = spec.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    terms = ins.split(",")
    if len(terms) != len(operands):
        raise Fallback("einsum operands")
    if not arrow:  # numpy's implicit output: "..." then the labels used once, sorted
        labels = [c for c in ins if c.isalpha()]
        out = ("..." if "..." in ins else "") + "".join(sorted(c for c in set(labels) if labels.count(c) == 1))
    z = _letters(spec, 1)
    new = ",".join(z + t if b.is_b(x) else t for t, x in zip(terms, operands)) + "->" + z + out
    return b.rewrite(op, np.einsum, (const(new),) + operands, kwargs)


def _einsum(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    spec = _static(args[0])
    if not isinstance(spec, str) or any(b.any_b(v) for v in kwargs.values()):
        raise Fallback("einsum's sublist form")
    return _einsum_of(b, op, spec, args[1:], kwargs)


def _tensordot(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """Contracted axes shift past the batch axis; a batched second operand's batch axis comes out
    after the first's free axes and is moved to the front."""
    x, y = args[:2]
    axes = _get_arg(args, kwargs, 2, "axes", 2)
    rx, ry = b.rank(x), b.rank(y)
    if isinstance(axes, (int, np.integer)):
        ax, ay = list(range(rx - int(axes), rx)), list(range(int(axes)))
    else:
        ax, ay = [list(a) if isinstance(a, (tuple, list)) else [a] for a in axes]
    ax, ay = [a % rx for a in ax], [a % ry for a in ay]
    if b.is_b(x) and b.is_b(y):  # both: one einsum with the batch label on each
        lx = _letters("", rx)
        ly = "".join(lx[ax[ay.index(j)]] if j in ay else c for j, c in enumerate(_letters(lx, ry)))
        out = "".join(c for i, c in enumerate(lx) if i not in ax) + "".join(c for j, c in enumerate(ly) if j not in ay)
        return _einsum_of(b, op, f"{lx},{ly}->{out}", (x, y), {})
    new = (const(([a + 1 for a in ax], ay)) if b.is_b(x) else const((ax, [a + 1 for a in ay])))
    if b.is_b(x):
        return b.rewrite(op, np.tensordot, (x, y), {"axes": new})
    free_x = tuple(n for i, n in enumerate(b.shape(x)) if i not in ax)
    free_y = tuple(n for j, n in enumerate(b.shape(y)) if j not in ay)
    r = b.emit(np.tensordot, (x, y), ArrayT(_out(op).dtype, free_x + (b.size,) + free_y), {"axes": new})
    return b.rewrite(op, np.moveaxis, (r, const(len(free_x)), const(0)))


def _outer_of(b: Batcher, op: Op, ufunc: Any, x: Any, y: Any) -> list[Var]:
    """``ufunc.outer(x, y)``: shape ``x.shape + y.shape`` per row."""
    sx, sy = b.shape(x), b.shape(y)
    if b.is_b(x) and b.is_b(y):
        xs = b.index(x, (Ellipsis,) + (None,) * len(sy), (b.size,) + sx + (1,) * len(sy))
        ys = b.align(y, len(sx) + len(sy))
        return b.rewrite(op, ufunc, (xs, ys), {}, _result_dtypes(b, op, ufunc, (xs, ys), {}))
    if b.is_b(x):
        return b.rewrite(op, ufunc.outer, (x, y))
    r = b.emit(ufunc.outer, (x, y), ArrayT(_out(op).dtype, sx + (b.size,) + sy))
    return b.rewrite(op, np.moveaxis, (r, const(len(sx)), const(0)))


def _ufunc_outer(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    if kwargs or len(args) != 2:
        raise Fallback("outer keywords")
    return _outer_of(b, op, getattr(op.fn, "__self__"), *args)


def _np_outer(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``np.outer`` flattens its operands first."""
    if kwargs or len(args) != 2:
        raise Fallback("outer keywords")
    flat = [_flat_rows(b, a) if b.is_b(a) else
            b.emit(np.ravel, (a,), ArrayT(dtype_of(a), (int(np.prod(b.shape(a))),)), batched=False) for a in args]
    return _outer_of(b, op, np.multiply, *flat)


def _solve(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``np.linalg.solve(a, rhs)``: for one matrix, the batch of right-hand sides as columns of one
    solve (one factorisation); batched matrices broadcast (numpy reads a 1-d right-hand side as a
    vector only when it is 1-d, so a batch of vectors gets a unit column)."""
    if kwargs or len(args) != 2:
        raise Fallback("solve keywords")
    a, rhs = args
    ra, rr = b.rank(a), b.rank(rhs)
    B = b.size
    out = _out(op).shape
    dt = _out(op).dtype
    if not b.is_b(a) and ra == 2 and rr in (1, 2):
        n = b.shape(a)[0]
        cols = b.shape(rhs)[1] if rr == 2 else 1
        front = b.emit(np.moveaxis, (rhs, const(0), const(-1)), ArrayT(dtype_of(rhs), b.shape(rhs) + (B,)))
        flat = b.emit(np.reshape, (front, const((n, cols * B))), ArrayT(dtype_of(rhs), (n, cols * B)))
        x = b.emit(np.linalg.solve, (a, flat), ArrayT(dt, (n, cols * B)))
        back = b.emit(np.reshape, (x, const(out + (B,))), ArrayT(dt, out + (B,)))
        return b.rewrite(op, np.moveaxis, (back, const(-1), const(0)))
    if ra == 2 and rr == 1:
        col = _promote(b, rhs, (Ellipsis, None), b.shape(rhs) + (1,))
        x = b.emit(np.linalg.solve, (a, col), ArrayT(dt, (B,) + out + (1,)))
        return b.rewrite(op, operator.getitem, (x, const((Ellipsis, 0))))
    if ra == 2 and rr == 2:
        return b.rewrite(op, np.linalg.solve, (a, rhs))
    raise Fallback("solve of stacks")


def _sum_to(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """``irad.primitives.sum_to(g, shape)`` per row: the extra leading axes of a row are summed first,
    so that the batch axis stays where ``sum_to`` does not look."""
    g = _only_first_batched(b, args, kwargs)
    shape = tuple(_static(args[1]))
    gs = b.shape(g)
    lead = len(gs) - len(shape)
    if lead > 0:
        g = b.emit(np.sum, (g,), ArrayT(dtype_of(g), (b.size,) + gs[lead:]),
                   {"axis": const(tuple(range(1, lead + 1)))})
    return b.rewrite(op, irad_ops.sum_to, (b.align(g, len(shape)), const((b.size,) + shape)))


# ---- rules: guards ----


def _guard(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    """A guard on a batched value holds when it holds for every row: one guard on all of them."""
    expected = _get_arg(args, kwargs, 1, "expected", None)
    v = args[0]
    shape = (b.size,) + b.shape(v)
    if type(expected) is bool:
        test = b.emit(np.asarray, (v,), ArrayT("bool", shape), {"dtype": const(np.dtype(bool))})
        agg = np.all if expected else np.any
    elif isinstance(expected, (int, float, np.number)):
        test = b.emit(operator.eq, (v, const(expected)), ArrayT("bool", shape))
        expected, agg = True, np.all
    else:  # (a tuple of dict-key labels): compared row by row
        test = b.emit(Looped(operator.eq, (0, None), b.size, 1, False), (v, const(expected)), ArrayT("bool", shape[:1]),
                      prim="irad.batching.loop_call")
        expected, agg = True, np.all
    verdict = b.emit(agg, (test,), ArrayT("bool", (), scalar=True), batched=False)
    b.ops.append(Op(op.prim, (verdict,), (("expected", const(expected)),), (), op.fn, op.loc))
    return []


def _guard_shape(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    expected = _get_arg(args, kwargs, 1, "expected", None)
    b.ops.append(Op(op.prim, (args[0],), (("expected", const((b.size,) + tuple(expected))),), (), op.fn, op.loc))
    return []


def _guard_dtype(b: Batcher, op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Var]:
    b.ops.append(Op(op.prim, args, tuple(kwargs.items()), (), op.fn, op.loc))
    return []


# ---- the table ----

register([operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
          operator.pow, operator.neg, operator.pos, operator.abs, operator.lt, operator.le, operator.eq,
          operator.ne, operator.gt, operator.ge, operator.and_, operator.or_, operator.xor, operator.invert,
          builtins.abs, np.clip, np.ndarray.clip, np.real, np.imag, np.round, np.around, np.nan_to_num, np.sinc,
          np.angle, np.fix, np.asarray, np.ascontiguousarray, np.array, np.copy, np.ndarray.copy,
          np.ndarray.astype, np.ndarray.conj, np.ndarray.conjugate, np.zeros_like, np.ones_like,
          np.empty_like, irad_ops.zeros_like, irad_ops.stop_gradient, irad_ops.iop], elementwise)
register([np.full_like, irad_ops.fill], _shape_from_first)
register([np.where], _where)
register([builtins.max], _python_minmax(operator.gt))
register([builtins.min], _python_minmax(operator.lt))
register([builtins.float], _to_float("float64"))
register([builtins.complex], _to_float("complex128"))
register([irad_ops.to_dtype], _to_dtype)
register([irad_ops.add_into], _add_into)
register([irad_ops.sum_to], _sum_to)
register([np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin, np.std, np.var, np.all, np.any, np.ptp,
          np.nansum, np.nanmean, np.nanprod, np.nanmax, np.nanmin, np.nanstd, np.nanvar, np.count_nonzero,
          np.median, np.ndarray.sum, np.ndarray.mean, np.ndarray.prod, np.ndarray.max, np.ndarray.min,
          np.ndarray.std, np.ndarray.var, np.ndarray.all, np.ndarray.any], reduction)
register([np.cumsum, np.cumprod, np.nancumsum, np.nancumprod, np.ndarray.cumsum, np.ndarray.cumprod,
          np.argmax, np.argmin, np.ndarray.argmax, np.ndarray.argmin], axis_rule(1, None, "flatten"))
register([np.sort, np.argsort, irad_ops.sort_inplace], axis_rule(1, -1, "flatten"))
register([np.flip], axis_rule(1, None, "all"))
register([np.squeeze, np.ndarray.squeeze], axis_rule(1, None, "unit"))
register([np.diff], _diff)
register([np.expand_dims], _expand_dims)
register([np.reshape, np.ndarray.reshape, np.ravel, np.ndarray.ravel, np.ndarray.flatten], _reshape)
register([np.transpose, np.ndarray.transpose], _transpose)
register([np.swapaxes, np.ndarray.swapaxes], _swapaxes)
register([np.moveaxis], _moveaxis)
register([np.broadcast_to], _broadcast_to)
register([np.pad], _pad)
register([np.concatenate], _join(stack=False))
register([np.stack], _join(stack=True))
register([np.split, np.array_split], _split)
register([operator.getitem], _getitem)
register([irad_ops.setitem, irad_ops.add_at], _scatter)
register([np.take], _take)
register([np.take_along_axis], _take_along_axis)
register([np.bincount], _bincount)
register([operator.matmul, np.matmul], _matmul)
register([np.dot, np.ndarray.dot], _dot)
register([np.einsum], _einsum)
register([np.tensordot], _tensordot)
register([np.outer], _np_outer)
register([np.linalg.solve], _solve)
register([irad_ops.guard], _guard)
register([irad_ops.guard_shape], _guard_shape)
register([irad_ops.guard_dtype], _guard_dtype)
register([np.ufunc], elementwise)
register([(np.ufunc, "outer")], _ufunc_outer)
