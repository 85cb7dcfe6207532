"""Rules for numpy's rearranging ops: flips, rolls, diagonals, tiling, ``take``, ``pad``, ``diff``.

Each is linear.  Where the adjoint is a simple op it is written out (``flip`` is its own adjoint,
``roll`` by ``-shift``); otherwise the op is applied to the input's 1-based positions
(``labels``) and the cotangent is scatter-added back to them (``scatter_labels``), which is exact
for repeats, wrap-around and zero fill.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import primitives as ops
from ._common import Table, is_float, labels, options, scatter_labels
from ..errors import NoRuleError

T = Table(__name__)


def _gather_fwd(fn: Any, a: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[Any, Any]:
    return fn(a, *args, **kw), (np.shape(a), args, kw)


def _scatter(fn: Any, s: Any, g: Any) -> tuple[Any]:
    """Adjoint of the gather ``fn(a, *args, **kw)`` for the first argument."""
    shape, args, kw = s
    return (scatter_labels(fn(labels(shape), *args, **kw), g, shape),)


def diagonal_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _gather_fwd(np.diagonal, a, args, kw)


def diagonal_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    return _scatter(np.diagonal, s, g)


def linalg_diagonal_fwd(a: Any, **kw: Any) -> tuple[Any, Any]:
    return _gather_fwd(np.linalg.diagonal, a, (), kw)


def linalg_diagonal_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    return _scatter(np.linalg.diagonal, s, g)


def take_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _gather_fwd(np.take, a, args, {k: v for k, v in kw.items() if k != "out"})


def take_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    return _scatter(np.take, s, g)


def take_along_axis_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _gather_fwd(np.take_along_axis, a, args, kw)


def take_along_axis_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    return _scatter(np.take_along_axis, s, g)


def resize_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _gather_fwd(np.resize, a, args, kw)


def resize_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    return _scatter(np.resize, s, g)


def delete_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _gather_fwd(np.delete, a, args, kw)


def delete_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    return _scatter(np.delete, s, g)


def diag_fwd(v: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _gather_fwd(np.diag, v, args, kw)


def diag_pullback(s: Any, g: Any) -> tuple[Any]:
    """diag of a vector builds a matrix (adjoint: its diagonal) and vice versa."""
    shape, args, kw = s
    k = args[0] if args else kw.get("k", 0)
    if len(shape) == 1:
        return (np.diagonal(g, k),)
    # the k-th diagonal of a matrix: g written onto zeros (cheaper than a bincount over n*m labels)
    i = np.arange(np.shape(g)[0]) + max(-k, 0)
    return (ops.setitem(np.zeros(shape, np.result_type(g)), (i, i + k), g),)


def diagflat_fwd(v: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _gather_fwd(np.diagflat, v, args, kw)


def diagflat_pullback(s: Any, g: Any) -> tuple[Any]:
    shape, args, kw = s
    k = args[0] if args else kw.get("k", 0)
    return (np.reshape(np.diagonal(g, k), shape),)


def compress_fwd(condition: Any, a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.compress(condition, a, *args, **kw), (condition, np.shape(a), args, kw)


def compress_pullback(s: Any, g: Any) -> tuple[None, Any]:
    condition, shape, args, kw = s
    lab = np.compress(condition, labels(shape), *args, **kw)
    return None, scatter_labels(lab, g, shape)


def extract_fwd(condition: Any, arr: Any) -> tuple[Any, Any]:
    return np.extract(condition, arr), (condition, np.shape(arr))


def extract_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    condition, shape = s
    return None, scatter_labels(np.extract(condition, labels(shape)), g, shape)


T.rule(np.diagonal, diagonal_fwd, diagonal_pullback)
T.rule(np.ndarray.diagonal, diagonal_fwd, diagonal_pullback)
T.rule(getattr(np.linalg, "diagonal", None), linalg_diagonal_fwd, linalg_diagonal_pullback)
T.rule(np.take, take_fwd, take_pullback, "repeated indices accumulate")
T.rule(np.ndarray.take, take_fwd, take_pullback, "repeated indices accumulate")
T.rule(np.take_along_axis, take_along_axis_fwd, take_along_axis_pullback)
T.rule(np.resize, resize_fwd, resize_pullback)
T.rule(np.delete, delete_fwd, delete_pullback)
T.rule(np.diag, diag_fwd, diag_pullback)
T.rule(np.diagflat, diagflat_fwd, diagflat_pullback)
T.rule(np.compress, compress_fwd, compress_pullback)
T.rule(np.extract, extract_fwd, extract_pullback)

# ---- self-adjoint-ish rearrangements ---------------------------------------------------------


def flip_fwd(m: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.flip(m, *args, **kw), (args, kw)


def flip_pullback(s: Any, g: Any) -> tuple[Any]:
    args, kw = s
    return (np.flip(g, *args, **kw),)


def fliplr_fwd(m: Any) -> tuple[Any, Any]:
    return np.fliplr(m), None


def fliplr_pullback(s: Any, g: Any) -> tuple[Any]:
    return (np.fliplr(g),)


def flipud_fwd(m: Any) -> tuple[Any, Any]:
    return np.flipud(m), None


def flipud_pullback(s: Any, g: Any) -> tuple[Any]:
    return (np.flipud(g),)


def roll_fwd(a: Any, shift: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    axis = args[0] if args else kw.get("axis")
    return np.roll(a, shift, *args, **kw), (shift, axis)


def roll_pullback(s: Any, g: Any) -> tuple[Any]:
    shift, axis = s
    return (np.roll(g, np.negative(shift), axis),)


def rot90_fwd(m: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("k", "axes"), k=1, axes=(0, 1))
    return np.rot90(m, *args, **kw), (o["k"], o["axes"])


def rot90_pullback(s: Any, g: Any) -> tuple[Any]:
    k, axes = s
    return (np.rot90(g, -k, axes),)


def triu_fwd(m: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.triu(m, *args, **kw), args[0] if args else kw.get("k", 0)


def triu_pullback(k: int, g: Any) -> tuple[Any]:
    return (np.triu(g, k),)


def tril_fwd(m: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.tril(m, *args, **kw), args[0] if args else kw.get("k", 0)


def tril_pullback(k: int, g: Any) -> tuple[Any]:
    return (np.tril(g, k),)


def _trace_state(a: Any, off: int, a1: int, a2: int) -> Any:
    return (np.shape(a), off, a1, a2)


def trace_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("offset", "axis1", "axis2", "dtype", "out"), offset=0, axis1=0, axis2=1)
    return np.trace(a, *args, **kw), _trace_state(a, o["offset"], o["axis1"], o["axis2"])


def linalg_trace_fwd(a: Any, **kw: Any) -> tuple[Any, Any]:
    return np.linalg.trace(a, **kw), _trace_state(a, kw.get("offset", 0), -2, -1)


def trace_pullback(s: Any, g: Any) -> tuple[Any]:
    """The cotangent of a trace is ``g`` times the identity (shifted by ``offset``)."""
    shape, off, a1, a2 = s
    nd = len(shape)
    eye = np.eye(shape[a1 % nd], shape[a2 % nd], k=off)
    gx = np.expand_dims(g, (-2, -1)) * eye
    return (np.moveaxis(gx, (-2, -1), (a1 % nd, a2 % nd)),)


def tile_fwd(a: Any, reps: Any) -> tuple[Any, Any]:
    return np.tile(a, reps), (np.shape(a), tuple(int(r) for r in np.atleast_1d(reps)))


def tile_pullback(s: Any, g: Any) -> tuple[Any, None]:
    """Split every axis into (repetition, original) and sum the repetitions."""
    shape, reps = s
    d = max(len(shape), len(reps))
    sh = (1,) * (d - len(shape)) + tuple(shape)
    rp = (1,) * (d - len(reps)) + reps
    g = np.reshape(g, tuple(x for pair in zip(rp, sh) for x in pair))
    return np.reshape(np.sum(g, axis=tuple(range(0, 2 * d, 2))), shape), None


def _repeat_state(a: Any, repeats: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    axis = args[0] if args else kw.get("axis")
    return (np.shape(a), repeats, axis)


def repeat_fwd(a: Any, repeats: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.repeat(a, repeats, *args, **kw), _repeat_state(a, repeats, args, kw)


def ndarray_repeat_fwd(a: Any, repeats: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return a.repeat(repeats, *args, **kw), _repeat_state(a, repeats, args, kw)


def repeat_pullback(s: Any, g: Any) -> tuple[Any]:
    """Sum each run of copies (a scatter-add when the repeat counts differ)."""
    shape, repeats, axis = s
    src = (int(np.prod(shape)),) if axis is None else tuple(shape)
    ax = 0 if axis is None else axis % len(shape)
    if np.size(repeats) == 1:
        r = int(np.ravel(repeats)[0])
        gx = np.sum(np.reshape(g, src[:ax + 1] + (r,) + src[ax + 1:]), axis=ax + 1)
    else:
        idx = np.repeat(np.arange(src[ax]), repeats)
        zero = np.zeros(src, dtype=np.result_type(g))
        gx = ops.add_at(zero, (slice(None),) * ax + (idx,), g)
    return (np.reshape(gx, shape),)


_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


def pad_fwd(array: Any, pad_width: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    mode = args[0] if args else kw.get("mode", "constant")
    if not isinstance(mode, str) or mode not in _PAD_MODES or kw.get("reflect_type", "even") != "even":
        raise NoRuleError(f"irad: np.pad(mode={mode!r}) has no rule; "
                                  f"supported modes: {', '.join(_PAD_MODES)}")
    y = np.pad(array, pad_width, *args, **kw)
    shape = np.shape(array)
    if mode == "constant":
        pw = np.broadcast_to(np.asarray(pad_width, dtype=np.intp), (len(shape), 2))
        return y, ("slice", tuple(slice(int(b), int(b) + k) for (b, _), k in zip(pw, shape)))
    rest = {k: v for k, v in kw.items() if k != "mode"}
    return y, ("gather", (shape, pad_width, mode, rest))


def pad_pullback(s: Any, g: Any) -> tuple[Any]:
    """Constant mode: the interior of ``g``; edge/reflect/symmetric/wrap: scatter-add."""
    kind, data = s
    if kind == "slice":
        return (g[data],)
    shape, pad_width, mode, rest = data
    lab = np.pad(labels(shape), pad_width, mode, **rest)
    return (scatter_labels(lab, g, shape),)


def diff_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("n", "axis", "prepend", "append"), n=1, axis=-1, prepend=None)
    axis = o["axis"] % np.ndim(a)
    pre = o["prepend"]
    p = 0 if pre is None else (1 if np.ndim(pre) == 0 else np.shape(pre)[axis])
    return np.diff(a, *args, **kw), (o["n"], axis, p, np.shape(a)[axis])


def diff_pullback(s: Any, g: Any) -> tuple[Any]:
    """Adjoint of one difference: pad(g, before) - pad(g, after); then drop prepend/append."""
    k, axis, p, m = s
    nd = np.ndim(g)
    before = [(0, 0)] * nd
    after = [(0, 0)] * nd
    before[axis], after[axis] = (1, 0), (0, 1)
    for _ in range(k):
        g = np.pad(g, before) - np.pad(g, after)
    sl = [slice(None)] * nd
    sl[axis] = slice(p, p + m)
    return (g[tuple(sl)],)


def select_fwd(condlist: Any, choicelist: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    y = np.select(condlist, choicelist, *args, **kw)
    shape = np.shape(y)
    which = np.select(condlist, [np.full(shape, i) for i in range(len(choicelist))], -1)
    items = list(choicelist)
    default = args[0] if args else None
    return y, (which, items, type(choicelist), default, 2 + len(args))


def select_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """Each choice gets g where it was selected (first true condition); default elsewhere."""
    which, items, seqtype, default, n = s
    cot = [ops.sum_to(np.where(which == i, g, 0.0), np.shape(x)) if is_float(x) else None
           for i, x in enumerate(items)]
    out: tuple[Any, ...] = (None, tuple(cot) if seqtype is tuple else cot)
    if n == 3:
        out += (np.where(which == -1, g, 0.0) if is_float(default) else None,)
    return out


def bincount_fwd(x: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return np.bincount(x, *args, **kw), (x, 1 + len(args))


def bincount_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """``weights`` (positional) gets ``g[x]``."""
    x, n = s
    if n == 1:
        return (None,)
    return None, np.asarray(g)[x]


def sliding_window_view_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    kw = {k: v for k, v in kw.items() if k not in ("subok", "writeable")}
    y = np.lib.stride_tricks.sliding_window_view(a, *args, **kw)
    return y, (np.shape(a), args, kw)


def sliding_window_view_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """Windows overlap: each element gets the cotangents of all the windows it appears in."""
    return _scatter(np.lib.stride_tricks.sliding_window_view, s, g)


def as_strided_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    x = np.asarray(a)
    if not x.flags.c_contiguous:
        raise NoRuleError("irad: as_strided of a non-contiguous array has no rule")
    o = options(args, kw, ("shape", "strides"), shape=None, strides=None)
    shape = x.shape if o["shape"] is None else tuple(o["shape"])
    strides = x.strides if o["strides"] is None else tuple(o["strides"])
    if any(st % x.itemsize for st in strides):
        raise NoRuleError("irad: as_strided with strides that are not multiples of the item size has no rule")
    lab = labels(x.shape)
    lab = np.lib.stride_tricks.as_strided(lab, shape, tuple(st // x.itemsize * lab.itemsize for st in strides))
    return np.lib.stride_tricks.as_strided(a, *args, **kw), (lab.copy(), x.shape)


def as_strided_pullback(s: Any, g: Any) -> tuple[Any]:
    lab, shape = s
    return (scatter_labels(lab, g, shape),)


T.rule(np.lib.stride_tricks.sliding_window_view, sliding_window_view_fwd, sliding_window_view_pullback,
       "overlapping windows accumulate")
T.rule(np.lib.stride_tricks.as_strided, as_strided_fwd, as_strided_pullback, "contiguous input; repeats accumulate")
T.rule(np.flip, flip_fwd, flip_pullback)
T.rule(np.fliplr, fliplr_fwd, fliplr_pullback)
T.rule(np.flipud, flipud_fwd, flipud_pullback)
T.rule(np.roll, roll_fwd, roll_pullback)
T.rule(np.rot90, rot90_fwd, rot90_pullback)
T.rule(np.triu, triu_fwd, triu_pullback)
T.rule(np.tril, tril_fwd, tril_pullback)
T.rule(np.trace, trace_fwd, trace_pullback)
T.rule(np.ndarray.trace, trace_fwd, trace_pullback)
T.rule(getattr(np.linalg, "trace", None), linalg_trace_fwd, trace_pullback)
T.rule(np.tile, tile_fwd, tile_pullback)
T.rule(np.repeat, repeat_fwd, repeat_pullback)
T.rule(np.ndarray.repeat, ndarray_repeat_fwd, repeat_pullback)
T.rule(np.pad, pad_fwd, pad_pullback, "modes constant, edge, reflect, symmetric, wrap")
T.rule(np.diff, diff_fwd, diff_pullback, "prepend/append are constants")
T.rule(np.select, select_fwd, select_pullback, "list cotangent")
T.rule(np.bincount, bincount_fwd, bincount_pullback, "positional weights only")
