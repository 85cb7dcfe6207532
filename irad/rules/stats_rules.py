"""Rules for numpy's statistics helpers that are not plain reductions: average, median, trapezoid,
quantile/percentile and interp.

numpy implements most of them in Python, but their bodies do what the tracer cannot follow
(``a.partition()`` in place, C ``interp``) or are cheaper as one rule.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._common import Table, bincount, norm_axes, options, unreduce
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
    return y, (perm, srt, ax, axis, np.shape(a), bool(o["keepdims"]))


def median_pullback(s: Any, g: Any) -> tuple[Any]:
    """The middle element (the two middle ones, half each) of the sorted values gets g;
    equal values share it evenly."""
    perm, srt, ax, axis, shape, keepdims = s
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
    return (np.reshape(gx, shape),)


def trapezoid_fwd(y: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("x", "dx", "axis"), x=None, dx=1.0, axis=-1)
    out = _trapezoid(y, *args, **kw)
    yv = np.asarray(y)
    base = _trapezoid(yv, dx=1.0, axis=o["axis"]) if o["x"] is None and len(args) >= 2 else None
    return out, (yv, o["x"], o["dx"], o["axis"] % yv.ndim, len(args) >= 1, 1 + len(args), base)


def _trapezoid(*args: Any, **kw: Any) -> Any:
    fn = getattr(np, "trapezoid", None) or getattr(np, "trapz")
    return fn(*args, **kw)


def trapezoid_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """y gets weights (d_{i-1} + d_i)/2; x gets (y_{i-1} - y_{i+1})/2, and -(y_0 + y_1)/2,
    (y_{m-2} + y_{m-1})/2 at the ends."""
    yv, x, dx, axis, xpos, n, base = s
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
    if base is not None:  # dx given positionally (x is None): the integral is linear in it
        out[2] = np.sum(g * base)
    return tuple(out)


# ---- quantile / percentile -------------------------------------------------------------------

_QUANTILE_OPTS = ("axis", "out", "overwrite_input", "method", "keepdims")


def _quantile_fwd(fn: Any, scale: float, a: Any, q: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[Any, Any]:
    o = options(args, kw, _QUANTILE_OPTS, axis=None, method="linear", keepdims=False)
    if kw.get("weights") is not None or kw.get("interpolation") is not None or o.get("out") is not None:
        raise NoRuleError(f"irad: {fn.__name__}(weights=/interpolation=/out=) has no rule")
    method, axis = o["method"], o["axis"]
    if method not in ("linear", "lower", "higher", "midpoint"):
        raise NoRuleError(f"irad: {fn.__name__}(method={method!r}) has no rule (linear, lower, higher, midpoint)")
    if isinstance(axis, (tuple, list)):
        raise NoRuleError(f"irad: {fn.__name__} over several axes has no rule")
    y = fn(a, q, *args, **kw)
    x = np.asarray(a)
    xm = np.reshape(x, (-1,)) if axis is None else np.moveaxis(x, axis, -1)
    n = xm.shape[-1]
    perm = np.argsort(xm, axis=-1, kind="stable")
    srt = np.take_along_axis(xm, perm, axis=-1)
    qs = np.asarray(q, dtype=float).ravel() / scale
    h = qs * (n - 1)
    lo = np.floor(h).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    frac = h - lo
    if method == "lower":
        frac = np.zeros_like(frac)
    elif method == "higher":
        frac = (frac > 0).astype(float)
    elif method == "midpoint":
        frac = np.where(frac > 0, 0.5, 0.0)
    return y, (perm, srt, lo, hi, frac, method == "linear", scale, np.shape(q), axis, x.shape,
               bool(o["keepdims"]))


def _quantile_pullback(s: Any, g: Any) -> tuple[Any, Any]:
    """The two order statistics around each quantile get (1 - frac) g and frac g (equal values
    share evenly); q gets g (n - 1) (x_hi - x_lo) / scale for the linear method."""
    perm, srt, lo, hi, frac, linear, scale, qshape, axis, shape, keepdims = s
    n = srt.shape[-1]
    nq = lo.shape[0]
    g = np.asarray(g)
    lead = srt.shape[:-1]
    g2 = np.reshape(g, (nq,) + lead)  # keepdims' size-1 axes and q's axes flattened away
    W = np.zeros((nq, n))
    W[np.arange(nq), lo] += 1.0 - frac
    W[np.arange(nq), hi] += frac
    gs = np.tensordot(np.moveaxis(g2, 0, -1), W, axes=1)
    from .numpy_rules import _tie_mean
    gs = _tie_mean(srt, gs, -1)
    gx = np.take_along_axis(gs, np.argsort(perm, axis=-1), axis=-1)
    gx = np.reshape(gx, shape) if axis is None else np.moveaxis(gx, -1, axis)
    gq = None
    if linear:
        step = np.moveaxis(np.take(srt, hi, axis=-1) - np.take(srt, lo, axis=-1), -1, 0)  # (nq,) + lead
        gq = np.reshape(np.sum(np.reshape(g2 * step, (nq, -1)), axis=1) * (n - 1) / scale, qshape)
    return gx, gq


def quantile_fwd(a: Any, q: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _quantile_fwd(np.quantile, 1.0, a, q, args, kw)


def percentile_fwd(a: Any, q: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    return _quantile_fwd(np.percentile, 100.0, a, q, args, kw)


# ---- interp ----------------------------------------------------------------------------------

def interp_fwd(x: Any, xp: Any, fp: Any, *args: Any, **kw: Any) -> tuple[Any, Any]:
    o = options(args, kw, ("left", "right", "period"), left=None, right=None, period=None)
    if o["period"] is not None:
        raise NoRuleError("irad: interp(period=...) has no rule")
    y = np.interp(x, xp, fp, *args, **kw)
    return y, (x, np.asarray(xp), np.asarray(fp), o["left"] is not None, o["right"] is not None, 3 + len(args))


def interp_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """Inside [xp[0], xp[-1]] y = fp[i] + t (fp[i+1] - fp[i]), t = (x - xp[i]) / (xp[i+1] - xp[i]):
    x gets the slope, fp[i] and fp[i+1] get (1 - t) and t, xp[i] and xp[i+1] get -slope (1 - t)
    and -slope t; outside, ``left``/``right`` (or fp's end values) get g."""
    x, xp, fp, has_left, has_right, n_args = s
    xa = np.asarray(x, dtype=float)
    n = xp.shape[0]
    g = np.broadcast_to(g, np.shape(xa))
    below, above = xa < xp[0], xa > xp[-1]
    inside = ~(below | above)
    zero = np.zeros((), dtype=np.result_type(g))
    if n == 1:
        gfp = np.reshape(np.sum(np.where(inside | (below & ~has_left) | (above & ~has_right), g, zero)), (1,))
        gx, gxp = np.zeros(np.shape(xa)), np.zeros(1)
    else:
        i = np.clip(np.searchsorted(xp, xa, side="right") - 1, 0, n - 2)
        h = xp[i + 1] - xp[i]
        t = (xa - xp[i]) / h
        slope = (fp[i + 1] - fp[i]) / h
        gin = np.where(inside, g, zero)
        gx = np.real(gin * slope) if not np.iscomplexobj(x) else gin * slope
        gfp = bincount(i, gin * (1.0 - t), n) + bincount(i + 1, gin * t, n)
        if not has_left:
            gfp = gfp + bincount(np.zeros(np.shape(xa), np.intp), np.where(below, g, zero), n)
        if not has_right:
            gfp = gfp + bincount(np.full(np.shape(xa), n - 1, np.intp), np.where(above, g, zero), n)
        gxp = np.real(bincount(i, -gin * slope * (1.0 - t), n) + bincount(i + 1, -gin * slope * t, n))
    out: list[Any] = [gx, gxp, gfp] + [None] * (n_args - 3)
    if n_args > 3:
        out[3] = np.sum(np.where(below, g, zero)) if has_left else None
    if n_args > 4:
        out[4] = np.sum(np.where(above, g, zero)) if has_right else None
    return tuple(out)


T.rule(np.quantile, quantile_fwd, _quantile_pullback, "methods linear, lower, higher, midpoint; ties split evenly")
T.rule(np.percentile, percentile_fwd, _quantile_pullback, "methods linear, lower, higher, midpoint; ties split evenly")
T.rule(np.interp, interp_fwd, interp_pullback, "not period=")
T.rule(np.average, average_fwd, average_pullback, "weights get a cotangent",
       params=("a", ("axis", None), ("weights", None)))
T.rule(np.median, median_fwd, median_pullback, "ties split evenly")
T.rule(getattr(np, "trapezoid", None), trapezoid_fwd, trapezoid_pullback)
