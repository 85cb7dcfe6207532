"""Rules for numpy's statistics helpers that are not plain reductions: average, median, trapezoid.

numpy implements them in Python behind its dispatcher, which the tracer treats as a primitive,
so they need rules like any C function.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._common import Table, nones, norm_axes, options, unreduce
from .numpy_rules import _tie_mean
from ..errors import NoRuleError

T = Table(__name__)


def average_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("axis", "weights", "returned", "keepdims"), axis=None, weights=None,
                returned=False, keepdims=False)
    y = np.average(a, *args, **kw)
    x = np.asarray(a)
    axes = norm_axes(o["axis"], x.ndim)
    w = o["weights"]
    if w is None:
        wb = np.ones(x.shape)
    elif np.shape(w) == x.shape:
        wb = np.asarray(w)
    else:  # 1-d weights along the single averaged axis
        shape = [1] * x.ndim
        shape[axes[0]] = np.size(w)
        wb = np.reshape(w, shape)
    total = np.sum(np.broadcast_to(wb, x.shape), axis=axes, keepdims=True)
    avg = np.sum(x * wb, axis=axes, keepdims=True) / total
    state = (x, wb, np.shape(w), total, avg, axes, bool(o["keepdims"]), bool(o["returned"]),
             w is not None and len(args) >= 2, 1 + len(args))
    return y, state


def average_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """y = sum(w a) / sum(w): a gets g w / W, w gets g (a - y) / W (+ g_W when returned)."""
    x, wb, wshape, total, avg, axes, keepdims, returned, wpos, n = s
    gy, gw_total = (g[0], g[1]) if returned else (g, None)
    ge = unreduce(gy, x.shape, axes, keepdims)
    ga = ge * wb / total
    out: list[Any] = [ga] + [None] * (n - 1)
    if wpos:
        gw = ge * (x - avg) / total
        if gw_total is not None:
            gw = gw + unreduce(gw_total, x.shape, axes, keepdims)
        if wshape != x.shape:
            keep = tuple(i for i in range(x.ndim) if i not in axes)
            gw = np.reshape(np.sum(gw, axis=keep), wshape)
        out[2] = gw
    return tuple(out)


def median_fwd(a: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("axis", "out", "overwrite_input", "keepdims"), axis=None, keepdims=False)
    axis = o["axis"]
    if isinstance(axis, (tuple, list)):
        raise NoRuleError("irad: median over several axes has no rule")
    y = np.median(a, *args, **kw)
    x = np.ravel(a) if axis is None else np.asarray(a)
    ax = 0 if axis is None else axis % x.ndim
    perm = np.argsort(x, axis=ax, kind="stable")
    srt = np.take_along_axis(x, perm, axis=ax)
    return y, (perm, srt, ax, axis, np.shape(a), bool(o["keepdims"]), 1 + len(args))


def median_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """The middle element (the two middle ones, half each) of the sorted values gets g;
    equal values share it evenly."""
    perm, srt, ax, axis, shape, keepdims, n = s
    m = srt.shape[ax]
    pick = np.zeros(m)
    pick[(m - 1) // 2] += 0.5
    pick[m // 2] += 0.5
    pshape = [1] * srt.ndim
    pshape[ax] = m
    if axis is None:
        ge = np.reshape(g, (1,) * srt.ndim)
    else:
        ge = g if keepdims else np.expand_dims(g, ax)
    gs = _tie_mean(srt, ge * np.reshape(pick, pshape), ax)
    gx = np.take_along_axis(gs, np.argsort(perm, axis=ax), axis=ax)
    return (np.reshape(gx, shape),) + nones(n - 1)


def trapezoid_fwd(y: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("x", "dx", "axis"), x=None, dx=1.0, axis=-1)
    out = _trapezoid(y, *args, **kw)
    yv = np.asarray(y)
    return out, (yv, o["x"], o["dx"], o["axis"] % yv.ndim, len(args) >= 1, 1 + len(args))


def _trapezoid(*args: Any, **kw: Any) -> Any:
    fn = getattr(np, "trapezoid", None) or getattr(np, "trapz")
    return fn(*args, **kw)


def trapezoid_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """y gets weights (d_{i-1} + d_i)/2; x gets (y_{i-1} - y_{i+1})/2, and -(y_0 + y_1)/2,
    (y_{m-2} + y_{m-1})/2 at the ends."""
    yv, x, dx, axis, xpos, n = s
    m = yv.shape[axis]
    ym = np.moveaxis(yv, axis, -1)
    ge = np.expand_dims(g, -1)
    if x is None:
        d = np.full(m - 1, float(dx))
    else:
        xm = np.asarray(x)
        xm = np.moveaxis(xm, axis, -1) if xm.ndim > 1 else xm
        d = np.diff(xm, axis=-1)
    zero = np.zeros(np.shape(d)[:-1] + (1,))
    w = 0.5 * (np.concatenate([zero, d], -1) + np.concatenate([d, zero], -1))
    gy = np.moveaxis(ge * w, -1, axis)
    out: list[Any] = [gy] + [None] * (n - 1)
    if xpos and x is not None:
        ypad_l = np.concatenate([-ym[..., :1], ym[..., :-1]], -1)   # y_{i-1}; -y_0 at the start
        ypad_r = np.concatenate([ym[..., 1:], -ym[..., -1:]], -1)   # y_{i+1}; -y_{m-1} at the end
        gx = ge * 0.5 * (ypad_l - ypad_r)
        if np.ndim(x) == 1:
            gx = np.reshape(np.sum(np.reshape(gx, (-1, m)), axis=0), np.shape(x))
        else:
            gx = np.moveaxis(gx, -1, axis)
        out[1] = gx
    return tuple(out)


T.rule(np.average, average_fwd, average_pullback, "positional weights get a cotangent")
T.rule(np.median, median_fwd, median_pullback, "ties split evenly")
T.rule(getattr(np, "trapezoid", None), trapezoid_fwd, trapezoid_pullback)
