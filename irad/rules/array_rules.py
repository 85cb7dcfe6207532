"""Rules for indexing, shape manipulation, array construction and irad's functional updates.

Most of these ops are linear gathers: every output element is a copy of one input element (or a
fill value).  The cheap ones have direct adjoints (reshape back, transpose back, flip again);
the rest share one exact construction: apply the op to the 1-based positions of the input
(``labels``) and scatter-add the cotangent to the labels it produced (``scatter_labels``), so
repeated elements accumulate and filled ones (label 0) are dropped.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import primitives as ops
from ._common import Table, is_float, labels, options, scatter_labels, struct_cot
from .numpy_rules import _tie_mean, sort_pullback, sort_state
from ..errors import NoRuleError

T = Table(__name__)

# ---- indexing --------------------------------------------------------------------------------


def _is_basic(index: Any) -> bool:
    """Whether ``index`` selects without integer/boolean arrays (no repeats possible)."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(p is None or p is Ellipsis or isinstance(p, slice)
               or (isinstance(p, (int, np.integer)) and not isinstance(p, (bool, np.bool_)))
               for p in parts)


def getitem_fwd(a: Any, index: Any) -> tuple[Any, Any]:
    if isinstance(a, (list, tuple)):
        return _seq_getitem_fwd(a, index)
    return a[index], (np.shape(a), np.result_type(a), index)


def _seq_getitem_fwd(a: Any, index: Any) -> tuple[Any, Any]:
    """``xs[i]`` / ``xs[i:j]`` on a list or tuple whose selected items are values, not lists."""
    y = a[index]
    picked = range(len(a))[index]
    items = [a[i] for i in picked] if isinstance(picked, range) else [a[picked]]
    if any(isinstance(v, (list, tuple, dict)) for v in items):
        raise NoRuleError("irad: indexing a list of lists has no rule")
    return y, ("seq", len(a), picked, type(a))


def _seq_getitem_pullback(s: Any, g: Any) -> tuple[Any, None]:
    """One cotangent per item: ``g`` (a tuple of them for a slice) at the items selected."""
    _, n, picked, seqtype = s
    cot: list[Any] = [None] * n
    if isinstance(picked, range):
        for k, i in enumerate(picked):
            cot[i] = g[k]
    else:
        cot[picked] = g
    return (tuple(cot) if seqtype is tuple else cot), None


def getitem_pullback(s: Any, g: Any) -> tuple[Any, None]:
    """Scatter-add ``g`` into zeros: repeated integer indices accumulate."""
    if s[0] == "seq":
        return _seq_getitem_pullback(s, g)
    shape, dtype, index = s
    if dtype.kind not in "fc":
        return None, None
    zero = np.zeros(shape, dtype=np.result_type(dtype, g))
    if _is_basic(index):
        return ops.setitem(zero, index, g), None
    return ops.add_at(zero, index, g), None


def _full_mask(a: Any, index: Any) -> bool:
    """A boolean mask of ``a``'s own shape (``a[a < 0] = v``): the selection has a static form."""
    return isinstance(index, np.ndarray) and index.dtype == np.bool_ and index.shape == np.shape(a)


def setitem_fwd(a: Any, index: Any, v: Any) -> tuple[Any, Any]:
    y = ops.setitem(a, index, v)
    if _is_basic(index):
        return y, (index, None)
    if _full_mask(a, index) and np.ndim(v) == 0:
        return y, (index, "mask")  # no shapes that depend on how many elements the mask selects
    sub = np.zeros(np.shape(a), dtype=bool)[index].shape
    lab = ops.setitem(np.zeros(np.shape(a), dtype=np.intp), index, labels(sub))
    return y, (index, (lab, sub))


def setitem_pullback(s: Any, g: Any) -> tuple[Any, None, Any]:
    """``a`` gets g outside ``a[index]``; ``v`` gets what landed where it was written (the last
    write of a repeated index wins, as in numpy)."""
    index, lab = s
    if isinstance(lab, str):  # a full-shape mask and a scalar v
        return np.where(index, 0, g), None, np.sum(np.where(index, g, 0))
    ga = ops.setitem(g, index, 0)
    if lab is None:
        return ga, None, g[index]
    lab, sub = lab
    return ga, None, scatter_labels(lab, g, sub)


def add_at_fwd(a: Any, index: Any, v: Any) -> tuple[Any, Any]:
    return ops.add_at(a, index, v), index


def add_at_pullback(index: Any, g: Any) -> tuple[Any, None, Any]:
    return g, None, g[index]


def fill_fwd(a: Any, v: Any) -> tuple[Any, Any]:
    return ops.fill(a, v), None


def fill_pullback(s: Any, g: Any) -> tuple[None, Any]:
    return None, np.sum(g)


def copyto_fwd(dst: Any, src: Any, *args: Any) -> tuple[Any, Any]:
    return ops.copyto(dst, src, *args), (args[0] if args else True, len(args))


def copyto_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """``dst`` is overwritten where ``where`` holds (everywhere by default), keeps ``g`` elsewhere;
    ``src`` gets ``g`` where it was written (summed over broadcasting by the transform)."""
    where, n = s
    if n == 0:
        return None, g
    zero = np.zeros((), dtype=np.result_type(g))
    return np.where(where, zero, g), np.where(where, g, zero), None


def fill_diagonal_fwd(a: Any, v: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    wrap = args[0] if args else kw.get("wrap", False)
    lab = ops.fill_diagonal(np.zeros(np.shape(a), np.intp), labels(np.shape(v)), wrap)
    return ops.fill_diagonal(a, v, *args, **kw), (wrap, lab, np.shape(v))


def fill_diagonal_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """The diagonal of ``a`` is overwritten; ``v`` (cycled along it) gets what it filled."""
    wrap, lab, vshape = s
    return ops.fill_diagonal(g, 0, wrap), scatter_labels(lab, g, vshape)


def sum_to_fwd(g: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    return ops.sum_to(g, shape), np.shape(g)


def sum_to_pullback(gshape: tuple[int, ...], h: Any) -> tuple[Any, None]:
    """sum_to sums (adjoint: broadcast back) or, given fewer axes, broadcasts (adjoint: sum)."""
    if len(gshape) < np.ndim(h):
        return ops.sum_to(h, gshape), None
    return np.broadcast_to(h, gshape), None


def to_dtype_fwd(g: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return ops.to_dtype(g, *args, **kw), None


def to_dtype_pullback(s: None, h: Any) -> tuple[Any]:
    """A cast (real part for complex to real) passes the cotangent through."""
    return (h,)


def sort_inplace_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = ops.sort_inplace(a, *args, **kw)
    return y, sort_state(a, y, args, kw)


def array_wrap_fwd(self: Any, arr: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return self.__array_wrap__(arr, *args, **kw), np.shape(arr)


def array_wrap_pullback(shape: tuple[int, ...], g: Any) -> tuple[None, Any]:
    """``a.__array_wrap__(arr)`` (numpy's own code: np.linalg.tensorsolve) returns ``arr`` as
    ``a``'s type: ``arr`` gets the cotangent, ``a`` none."""
    return None, np.reshape(g, shape)


T.rule(np.ndarray.__array_wrap__, array_wrap_fwd, array_wrap_pullback, "arr gets the cotangent")
T.rule(operator.getitem, getitem_fwd, getitem_pullback, "integer-array indices accumulate")
T.rule(ops.setitem, setitem_fwd, setitem_pullback, "repeated indices: the written element")
T.rule(ops.add_at, add_at_fwd, add_at_pullback)
T.rule(ops.fill, fill_fwd, fill_pullback)
T.rule(ops.copyto, copyto_fwd, copyto_pullback)
T.rule(ops.fill_diagonal, fill_diagonal_fwd, fill_diagonal_pullback)
T.rule(ops.sum_to, sum_to_fwd, sum_to_pullback)
T.rule(ops.sort_inplace, sort_inplace_fwd, sort_pullback, "ties split evenly")
T.rule(getattr(ops, "to_dtype", None), to_dtype_fwd, to_dtype_pullback)
T.nograd(ops.guard, ops.guard_shape, ops.zeros_like, ops.stop_gradient)

# ---- reshaping -------------------------------------------------------------------------------


def _order(a: Any, order: str | None) -> str:
    """The memory order a reshape really used ('A' and 'K' depend on the input's layout)."""
    if order in (None, "C"):
        return "C"
    if order == "F":
        return "F"
    flags = getattr(a, "flags", None)
    if flags is None or flags.c_contiguous:
        return "C"
    if flags.f_contiguous:
        return "F"
    if order == "A":
        return "C"
    raise NoRuleError("irad: order='K' on a non-contiguous array has no rule")


def reshape_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    order = args[1] if len(args) > 1 else kw.get("order", "C")
    return np.reshape(a, *args, **kw), (np.shape(a), _order(a, order))


def ndarray_reshape_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return a.reshape(*args, **kw), (np.shape(a), _order(a, kw.get("order")))


def ravel_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    order = args[0] if args else kw.get("order", "C")
    return np.ravel(a, *args, **kw), (np.shape(a), _order(a, order))


def ndarray_ravel_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    order = args[0] if args else kw.get("order", "C")
    return a.ravel(*args, **kw), (np.shape(a), _order(a, order))


def flatten_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    order = args[0] if args else kw.get("order", "C")
    return a.flatten(*args, **kw), (np.shape(a), _order(a, order))


def reshape_pullback(s: Any, g: Any) -> tuple[Any]:
    shape, order = s
    return (np.reshape(g, shape, order=order),)


def _plain_fwd(fn: Any, a: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[Any, Any]:
    return fn(a, *args, **kw), np.shape(a)


def plain_reshape_pullback(shape: tuple[int, ...], g: Any) -> tuple[Any]:
    """Shape-only ops (expand_dims, squeeze, atleast_nd): reshape the cotangent back."""
    return (np.reshape(g, shape),)


def expand_dims_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _plain_fwd(np.expand_dims, a, args, kw)


def squeeze_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _plain_fwd(np.squeeze, a, args, kw)


def ndarray_squeeze_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return a.squeeze(*args, **kw), np.shape(a)


def _atleast_fwd(fn: Any, arys: tuple[Any, ...]) -> tuple[Any, Any]:
    return fn(*arys), tuple(np.shape(a) for a in arys)


def atleast_1d_fwd(*arys: Any) -> tuple[Any, Any]:
    return _atleast_fwd(np.atleast_1d, arys)


def atleast_2d_fwd(*arys: Any) -> tuple[Any, Any]:
    return _atleast_fwd(np.atleast_2d, arys)


def atleast_3d_fwd(*arys: Any) -> tuple[Any, Any]:
    return _atleast_fwd(np.atleast_3d, arys)


def atleast_pullback(shapes: tuple[Any, ...], g: Any) -> tuple[Any, ...]:
    if len(shapes) == 1:
        return (np.reshape(g, shapes[0]),)
    return tuple(np.reshape(gi, sh) for gi, sh in zip(g, shapes))


def _transpose_axes(args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    axes = kw.get("axes", args[0] if len(args) == 1 else (args or None))
    return None if axes is None else tuple(int(a) for a in axes)


def transpose_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.transpose(a, *args, **kw), (_transpose_axes(args, kw), np.ndim(a))


def ndarray_transpose_fwd(a: Any, *args: Any) -> tuple[Any, Any]:
    return a.transpose(*args), (_transpose_axes(args, {}), np.ndim(a))


def transpose_pullback(s: Any, g: Any) -> tuple[Any]:
    axes, nd = s
    inv = None if axes is None else tuple(np.argsort([a % nd for a in axes]))
    return (np.transpose(g, inv),)


def matrix_transpose_fwd(x: Any) -> tuple[Any, Any]:
    return np.matrix_transpose(x), None


def linalg_matrix_transpose_fwd(x: Any) -> tuple[Any, Any]:
    return np.linalg.matrix_transpose(x), None


def matrix_transpose_pullback(s: Any, g: Any) -> tuple[Any]:
    return (np.swapaxes(g, -1, -2),)


def swapaxes_fwd(a: Any, axis1: int, axis2: int) -> tuple[Any, Any]:
    return np.swapaxes(a, axis1, axis2), (axis1, axis2)


def ndarray_swapaxes_fwd(a: Any, axis1: int, axis2: int) -> tuple[Any, Any]:
    return a.swapaxes(axis1, axis2), (axis1, axis2)


def swapaxes_pullback(s: Any, g: Any) -> tuple[Any, None, None]:
    return np.swapaxes(g, s[0], s[1]), None, None


def moveaxis_fwd(a: Any, source: Any, destination: Any) -> tuple[Any, Any]:
    return np.moveaxis(a, source, destination), (source, destination)


def moveaxis_pullback(s: Any, g: Any) -> tuple[Any, None, None]:
    return np.moveaxis(g, s[1], s[0]), None, None


def rollaxis_fwd(a: Any, axis: int, *args: Any, **kw: Any) -> tuple[Any, Any]:
    start = args[0] if args else kw.get("start", 0)
    nd = np.ndim(a)
    ax, st = axis % nd, start + nd if start < 0 else start
    dest = st - 1 if ax < st else st  # rollaxis is a moveaxis (numpy's own definition)
    return np.rollaxis(a, axis, *args, **kw), (ax, dest)


def rollaxis_pullback(s: Any, g: Any) -> tuple[Any]:
    ax, dest = s
    return (np.moveaxis(g, dest, ax),)


def broadcast_to_fwd(a: Any, shape: Any, **kw: Any) -> tuple[Any, Any]:
    return np.broadcast_to(a, shape, **kw), np.shape(a)


def broadcast_to_pullback(shape: tuple[int, ...], g: Any) -> tuple[Any, None]:
    return ops.sum_to(g, shape), None


def broadcast_arrays_fwd(*args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.broadcast_arrays(*args, **kw), tuple(np.shape(a) for a in args)


def broadcast_arrays_pullback(shapes: tuple[Any, ...], g: Any) -> tuple[Any, ...]:
    return tuple(ops.sum_to(gi, sh) for gi, sh in zip(g, shapes))


T.rule(np.reshape, reshape_fwd, reshape_pullback)
T.rule(np.ndarray.reshape, ndarray_reshape_fwd, reshape_pullback)
T.rule(np.ravel, ravel_fwd, reshape_pullback)
T.rule(np.ndarray.ravel, ndarray_ravel_fwd, reshape_pullback)
T.rule(np.ndarray.flatten, flatten_fwd, reshape_pullback)
T.rule(np.expand_dims, expand_dims_fwd, plain_reshape_pullback)
T.rule(np.squeeze, squeeze_fwd, plain_reshape_pullback)
T.rule(np.ndarray.squeeze, ndarray_squeeze_fwd, plain_reshape_pullback)
T.rule(np.atleast_1d, atleast_1d_fwd, atleast_pullback)
T.rule(np.atleast_2d, atleast_2d_fwd, atleast_pullback)
T.rule(np.atleast_3d, atleast_3d_fwd, atleast_pullback)
T.rule(np.transpose, transpose_fwd, transpose_pullback)
T.rule(np.ndarray.transpose, ndarray_transpose_fwd, transpose_pullback)
T.rule(getattr(np, "matrix_transpose", None), matrix_transpose_fwd, matrix_transpose_pullback)
T.rule(getattr(np.linalg, "matrix_transpose", None), linalg_matrix_transpose_fwd,
       matrix_transpose_pullback)
T.rule(np.swapaxes, swapaxes_fwd, swapaxes_pullback)
T.rule(np.ndarray.swapaxes, ndarray_swapaxes_fwd, swapaxes_pullback)
T.rule(np.moveaxis, moveaxis_fwd, moveaxis_pullback)
T.rule(np.rollaxis, rollaxis_fwd, rollaxis_pullback)
T.rule(np.broadcast_to, broadcast_to_fwd, broadcast_to_pullback)
T.rule(np.broadcast_arrays, broadcast_arrays_fwd, broadcast_arrays_pullback)

# ---- copies and construction -----------------------------------------------------------------


def _array_fwd(fn: Any, obj: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[Any, Any]:
    y = fn(obj, *args, **kw)
    if not is_float(y):
        return y, ("none", None, 0)
    if isinstance(obj, (list, tuple)):
        return y, ("nested", obj, np.ndim(obj))
    return y, ("leaf", np.shape(obj), 0)


def array_fwd(obj: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _array_fwd(np.array, obj, args, kw)


def asarray_fwd(obj: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _array_fwd(np.asarray, obj, args, kw)


def asanyarray_fwd(obj: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _array_fwd(np.asanyarray, obj, args, kw)


def ascontiguousarray_fwd(obj: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _array_fwd(np.ascontiguousarray, obj, args, kw)


def asfortranarray_fwd(obj: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _array_fwd(np.asfortranarray, obj, args, kw)


def copy_fwd(obj: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _array_fwd(np.copy, obj, args, kw)


def ndarray_copy_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _array_fwd(np.ndarray.copy if isinstance(a, np.ndarray) else type(a).copy, a, args, kw)


def astype_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _array_fwd(type(a).astype, a, args, kw)


def array_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """Reshape back (``ndmin`` added leading axes), splitting along nested lists of values."""
    kind, obj, base = s
    if kind == "none":
        return ()
    if kind == "nested":
        g = np.reshape(g, np.shape(g)[np.ndim(g) - base:])
        return (struct_cot(obj, g),)
    return (np.reshape(g, obj),)


T.rule(np.array, array_fwd, array_pullback, "nested lists get list cotangents")
T.rule(np.asarray, asarray_fwd, array_pullback, "nested lists get list cotangents")
T.rule(np.asanyarray, asanyarray_fwd, array_pullback)
T.rule(np.ascontiguousarray, ascontiguousarray_fwd, array_pullback)
T.rule(np.asfortranarray, asfortranarray_fwd, array_pullback)
T.rule(np.copy, copy_fwd, array_pullback)
T.rule(np.ndarray.copy, ndarray_copy_fwd, array_pullback)
T.rule(np.ndarray.astype, astype_fwd, array_pullback, "no cotangent to integer dtypes")


def view_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    """``a.view()``, ``a.view(np.ndarray)``, ``a.view(a.dtype)``: the same values.  A view as another
    dtype reinterprets the bytes (irad.ad refuses its gradient before this rule runs)."""
    y = (np.ndarray.view if isinstance(a, np.ndarray) else type(a).view)(a, *args, **kw)
    if y.dtype != a.dtype:
        raise NoRuleError(f"a.view(...) reinterprets the bytes of a {a.dtype} array as {y.dtype}: there is no "
                          "gradient through raw bits; use a.astype(...) to convert the values")
    return y, np.shape(a)


def view_pullback(shape: tuple[int, ...], g: Any) -> tuple[Any]:
    return (np.reshape(np.asarray(g), shape),)


def frombuffer_fwd(buffer: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    """``np.frombuffer(x)`` of an array: its elements in memory order (C-contiguous, same dtype)."""
    o = options(args, kw, ("dtype", "count", "offset"), dtype=float, count=-1, offset=0)
    y = np.frombuffer(buffer, *args, **kw)
    if not isinstance(buffer, np.ndarray) or y.dtype != buffer.dtype or not buffer.flags.c_contiguous:
        raise NoRuleError("np.frombuffer has a rule only for a C-contiguous array read as its own dtype; "
                          "use x.ravel() (and slicing) instead of a buffer round trip")
    return y, (np.shape(buffer), int(o["offset"]) // buffer.itemsize, y.size)


def frombuffer_pullback(s: Any, g: Any) -> tuple[Any]:
    shape, start, count = s
    flat = np.zeros(int(np.prod(shape)), dtype=np.result_type(g))
    flat[start:start + count] = g
    return (flat.reshape(shape),)


T.rule(np.ndarray.view, view_fwd, view_pullback, "same dtype only: a view as another dtype has no gradient")
T.rule(np.frombuffer, frombuffer_fwd, frombuffer_pullback, "an array read as its own dtype")


def item_fwd(a: Any, *args: Any) -> tuple[Any, Any]:
    shape = np.shape(a)
    if not args:
        flat = 0
    elif len(args) == 1 and not isinstance(args[0], tuple):
        flat = int(args[0]) % max(int(np.prod(shape)), 1)
    else:
        idx = args[0] if len(args) == 1 else args
        flat = int(np.ravel_multi_index(tuple(i % d for i, d in zip(idx, shape)), shape))
    return a.item(*args), (shape, flat)


def item_pullback(s: Any, g: Any) -> tuple[Any]:
    shape, flat = s
    size = int(np.prod(shape))
    return (np.where(np.arange(size) == flat, g, 0.0).reshape(shape),)


def tolist_fwd(a: Any) -> tuple[Any, Any]:
    return a.tolist(), np.shape(a)


def tolist_pullback(shape: tuple[int, ...], g: Any) -> tuple[Any]:
    """``g`` is one cotangent per list leaf (row-major) or a scalar for 0-d arrays."""
    return (np.reshape(np.asarray(g), shape),)


def full_fwd(shape: Any, fill_value: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.full(shape, fill_value, *args, **kw)
    return y, is_float(y)


def full_like_fwd(a: Any, fill_value: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.full_like(a, fill_value, *args, **kw)
    return y, is_float(y)


def full_pullback(ok: bool, g: Any) -> tuple[None, Any]:
    """The fill value gets the whole cotangent (the transform sums it to the value's shape)."""
    return None, g if ok else None


def linspace_fwd(start: Any, stop: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("num", "endpoint", "retstep", "dtype", "axis"), num=50,
                endpoint=True, retstep=False, axis=0)
    if o["retstep"]:
        raise NoRuleError("irad: linspace(retstep=True) has no rule")
    y = np.linspace(start, stop, *args, **kw)
    t = np.linspace(0.0, 1.0, o["num"], endpoint=o["endpoint"])
    return y, (t, o["axis"] % np.ndim(y))


def linspace_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """y = start + t * (stop - start) along ``axis``: start gets sum g*(1-t), stop sum g*t."""
    t, axis = s
    shape = [1] * np.ndim(g)
    shape[axis] = t.shape[0]
    t = t.reshape(shape)
    return np.sum(g * (1.0 - t), axis=axis), np.sum(g * t, axis=axis)


def float64_fwd(*args: Any) -> tuple[Any, Any]:
    return np.float64(*args), len(args)


def float32_fwd(*args: Any) -> tuple[Any, Any]:
    return np.float32(*args), len(args)


def complex128_fwd(*args: Any) -> tuple[Any, Any]:
    return np.complex128(*args), len(args)


def complex64_fwd(*args: Any) -> tuple[Any, Any]:
    return np.complex64(*args), len(args)


def cast_pullback(n: int, g: Any) -> tuple[Any, ...]:
    """numpy scalar constructors (``np.float64(x)``) pass the cotangent through (``np.float64()``
    has no argument to pass it to)."""
    return (g,)[:n]


T.rule(np.float64, float64_fwd, cast_pullback)
T.rule(np.float32, float32_fwd, cast_pullback)
T.rule(np.complex128, complex128_fwd, cast_pullback)
T.rule(np.complex64, complex64_fwd, cast_pullback)
T.nograd(np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_)
T.rule(np.ndarray.item, item_fwd, item_pullback)
T.rule(np.ndarray.tolist, tolist_fwd, tolist_pullback, "one cotangent per list element")
T.rule(np.full, full_fwd, full_pullback)
T.rule(np.full_like, full_like_fwd, full_pullback)
T.rule(np.linspace, linspace_fwd, linspace_pullback)

# ---- joining and splitting -------------------------------------------------------------------


def _pieces(g: Any, sizes: list[int], axis: int) -> list[Any]:
    return np.split(g, np.cumsum(sizes)[:-1], axis=axis)


def _join_cot(items: list[Any], pieces: list[Any], seqtype: type) -> Any:
    cot = [struct_cot(x, np.reshape(p, np.shape(x))) if is_float(x) or isinstance(x, (list, tuple))
           else None for x, p in zip(items, pieces)]
    return tuple(cot) if seqtype is tuple else cot


def concatenate_fwd(arrays: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    axis = args[0] if args else kw.get("axis", 0)
    items = list(arrays)
    y = np.concatenate(arrays, *args, **kw)
    if axis is None:
        sizes = [int(np.size(x)) for x in items]
    else:
        sizes = [np.shape(np.asarray(x))[axis] for x in items]
    return y, (items, sizes, axis, type(arrays))


def concatenate_pullback(s: Any, g: Any) -> tuple[Any]:
    items, sizes, axis, seqtype = s
    pieces = _pieces(g, sizes, 0 if axis is None else axis)
    return (_join_cot(items, pieces, seqtype),)


def _joined(y: Any, arrays: Any, prepped: list[Any], axis: int) -> tuple[Any, Any]:
    sizes = [np.shape(p)[axis] for p in prepped]
    return y, (list(arrays), sizes, axis, type(arrays))


def hstack_fwd(tup: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    prepped = [np.atleast_1d(x) for x in tup]
    axis = 0 if prepped and prepped[0].ndim == 1 else 1
    return _joined(np.hstack(tup, *args, **kw), tup, prepped, axis)


def vstack_fwd(tup: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    prepped = [np.atleast_2d(x) for x in tup]
    return _joined(np.vstack(tup, *args, **kw), tup, prepped, 0)


def dstack_fwd(tup: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    prepped = [np.atleast_3d(x) for x in tup]
    return _joined(np.dstack(tup, *args, **kw), tup, prepped, 2)


def column_stack_fwd(tup: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    prepped = [np.asarray(x) for x in tup]
    prepped = [x.reshape(-1, 1) if x.ndim < 2 else x for x in prepped]
    return _joined(np.column_stack(tup, *args, **kw), tup, prepped, 1)


def stack_fwd(arrays: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    axis = args[0] if args else kw.get("axis", 0)
    y = np.stack(arrays, *args, **kw)
    return y, (list(arrays), axis % np.ndim(y), type(arrays))


def stack_pullback(s: Any, g: Any) -> tuple[Any]:
    items, axis, seqtype = s
    pieces = list(np.moveaxis(g, axis, 0))
    return (_join_cot(items, pieces, seqtype),)


def append_fwd(arr: Any, values: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    axis = args[0] if args else kw.get("axis")
    y = np.append(arr, values, *args, **kw)
    if axis is None:
        sizes = [int(np.size(arr)), int(np.size(values))]
    else:
        sizes = [np.shape(arr)[axis], np.shape(values)[axis]]
    return y, ([arr, values], sizes, 0 if axis is None else axis)


def append_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    items, sizes, axis = s
    a, b = _join_cot(items, _pieces(g, sizes, axis), list)
    return a, b


def _split_fwd(fn: Any, ary: Any, args: tuple[Any, ...], kw: dict[str, Any], axis: int) -> tuple[Any, Any]:
    return fn(ary, *args, **kw), axis


def split_fwd(ary: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _split_fwd(np.split, ary, args, kw, args[1] if len(args) > 1 else kw.get("axis", 0))


def array_split_fwd(ary: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _split_fwd(np.array_split, ary, args, kw, args[1] if len(args) > 1 else kw.get("axis", 0))


def hsplit_fwd(ary: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _split_fwd(np.hsplit, ary, args, kw, 1 if np.ndim(ary) > 1 else 0)


def vsplit_fwd(ary: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _split_fwd(np.vsplit, ary, args, kw, 0)


def dsplit_fwd(ary: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _split_fwd(np.dsplit, ary, args, kw, 2)


def split_pullback(axis: int, g: Any) -> tuple[Any]:
    """``g`` holds one cotangent per piece: join them again."""
    return (np.concatenate(g, axis=axis),)


T.rule(np.concatenate, concatenate_fwd, concatenate_pullback, "list cotangent")
T.rule(np.stack, stack_fwd, stack_pullback, "list cotangent")
T.rule(np.hstack, hstack_fwd, concatenate_pullback, "list cotangent")
T.rule(np.vstack, vstack_fwd, concatenate_pullback, "list cotangent")
T.rule(np.dstack, dstack_fwd, concatenate_pullback, "list cotangent")
T.rule(np.column_stack, column_stack_fwd, concatenate_pullback, "list cotangent")
T.rule(np.append, append_fwd, append_pullback)
T.rule(np.split, split_fwd, split_pullback)
T.rule(np.array_split, array_split_fwd, split_pullback)
T.rule(np.hsplit, hsplit_fwd, split_pullback)
T.rule(np.vsplit, vsplit_fwd, split_pullback)
T.rule(np.dsplit, dsplit_fwd, split_pullback)

# ---- np.partition (issue 14) -----------------------------------------------------------------


def partition_fwd(a: Any, kth: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("axis", "kind", "order"), axis=-1)
    if o.get("order") is not None:
        raise NoRuleError("irad: partition(order=...) of structured arrays has no rule")
    y = np.partition(a, kth, *args, **kw)
    axis = o["axis"]
    x = np.ravel(a) if axis is None else np.asarray(a)
    ax = -1 if axis is None else axis
    sx = np.argsort(x, axis=ax, kind="stable")
    sy = np.argsort(y, axis=ax, kind="stable")
    return y, (sx, sy, np.take_along_axis(y, sy, axis=ax), ax, np.shape(a))


def partition_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """y is a permutation of x along the axis: take g to sorted order (equal values share it
    evenly, as for sort), then back to x's order.  The permutation is not argpartition's: for
    long rows numpy's partition and argpartition may order the elements off the kth positions
    differently, while sorting both sides always matches y's elements with x's."""
    sx, sy, ys, ax, shape = s
    gs = np.take_along_axis(np.broadcast_to(g, np.shape(sy)), sy, axis=ax)
    if np.size(gs):
        gs = _tie_mean(ys, gs, ax)
    gx = np.take_along_axis(gs, np.argsort(sx, axis=ax), axis=ax)
    return (np.reshape(gx, shape), None)


T.rule(np.partition, partition_fwd, partition_pullback, "ties split evenly; kth static")
