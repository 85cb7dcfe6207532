"""ONNX import of the neural-network nodes: convolutions, pooling, normalizations (``node.NODES``).

A window op becomes ``sliding_window_view`` of the padded input, stepped by the stride and the
dilation, then reduced (pooling) or contracted with the kernel by an ``einsum`` whose equation is
built here from fixed letters.  Everything spelled into the source is an int or a tuple of ints
computed from type-checked attributes and static shapes, or a finite float; the per-window
divisors of an average pool are computed here and enter the namespace as a value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .node import Node, on
from .ops import _Unsupported

_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_OUT, _KER = "xyz", "ijk"  # einsum letters of the spatial output axes and of the kernel axes
_STASH_FLOAT = 1  # stash_type onnx.TensorProto.FLOAT (the default): the statistics in float32


def _per_axis(n: Node, name: str, d: int, default: int, least: int) -> tuple[int, ...]:
    """An INTS attribute with one value, at least ``least``, per spatial axis."""
    v = n.attr_ints(name)
    if v is None:
        return (default,) * d
    if len(v) != d or min(v) < least:
        raise _Unsupported(f"attribute {name} = {v[:8]} is not {d} ints >= {least}")
    return v


def _spatial(n: Node) -> int:
    """The number of spatial axes of input 0, (N, C, D1, ..., Dd)."""
    d = n.rank(0) - 2
    if not 1 <= d <= len(_OUT):
        raise _Unsupported(f"a rank-{d + 2} input (1 to {len(_OUT)} spatial axes are mapped)")
    return d


def _kernel(n: Node, d: int, weight: tuple[int, ...] | None) -> tuple[int, ...]:
    """``kernel_shape``: required for a pool; for a convolution it must equal the weight's."""
    k = n.attr_ints("kernel_shape")
    if weight is not None and k is not None and tuple(k) != weight:
        raise _Unsupported(f"attribute kernel_shape = {k[:8]} differs from the weight's {weight}")
    k = weight if k is None and weight is not None else k
    if k is None or len(k) != d or min(k) < 1:
        raise _Unsupported(f"attribute kernel_shape = {k if k is None else k[:8]} for {d} spatial axes")
    return tuple(k)


def _check_out(n: Node, shape: tuple[int, ...]) -> None:
    """The output shape irad computes must be the one shape inference gave later nodes."""
    try:
        inferred = n.out_shape()
    except _Unsupported:
        return
    if len(inferred) != len(shape) or any(i and i != s for i, s in zip(inferred, shape)):
        raise _Unsupported(f"output shape {shape} (as onnxruntime computes it) differs from the inferred {inferred}")


@dataclass(frozen=True)
class _Geometry:
    """A window op along the spatial axes of an input of spatial shape ``size``: pads before and
    after (``end`` includes the ceil-mode overhang, which no divisor counts) and window counts."""
    size: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    pads_end: tuple[int, ...]  # the declared pads after
    end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def span(self) -> tuple[int, ...]:
        return tuple(dl * (k - 1) + 1 for k, dl in zip(self.kernel, self.dilations))

    def positions(self, axis: int) -> np.ndarray:
        """Input index of each (window, tap) along ``axis`` (negative: in the pads before)."""
        o, k = np.arange(self.out[axis]), np.arange(self.kernel[axis])
        return o[:, None] * self.strides[axis] - self.begin[axis] + k[None, :] * self.dilations[axis]


def _geometry(n: Node, kernel: tuple[int, ...], pool: bool, ceil: bool = False,
              dilations_since: int = 1) -> _Geometry:
    """Pads and window counts of Conv and the pools, from auto_pad, pads, strides, dilations
    (as onnxruntime computes them: SAME pads to ``ceil(size / stride)`` windows, the odd pad
    after for SAME_UPPER, before for SAME_LOWER; ceil mode drops a window starting past the
    input and its pads before)."""
    d, size = len(kernel), n.shape(0)[2:]
    auto = n.attr_str("auto_pad", "NOTSET", _AUTO_PAD)
    strides = _per_axis(n, "strides", d, 1, 1)
    dil = _per_axis(n, "dilations", d, 1, 1)
    if n.opset < dilations_since and n.given("dilations"):
        raise _Unsupported(f"attribute dilations before opset {dilations_since}")
    pads = n.attr_ints("pads")
    span = [dl * (k - 1) + 1 for k, dl in zip(kernel, dil)]
    if pads is not None and auto != "NOTSET":
        raise _Unsupported(f"attribute pads with auto_pad = {auto}")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if max(dil) > 1:  # onnxruntime refuses it for Conv, and pads pools as if undilated
            raise _Unsupported(f"auto_pad = {auto} with dilations {dil}")
        out = [-(-i // s) for i, s in zip(size, strides)]
        total = [(o - 1) * s + w - i for o, s, w, i in zip(out, strides, span, size)]
        if pool and min(total) < 0:  # a stride past the window: onnxruntime's pools crop or refuse
            raise _Unsupported(f"auto_pad = {auto} with strides {strides} longer than the kernel {kernel}")
        total = [max(0, t) for t in total]  # Conv, as onnxruntime: no padding
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        pe = [t - b for t, b in zip(total, begin)]
    else:
        pads = (0,) * (2 * d) if pads is None or auto == "VALID" else pads
        if len(pads) != 2 * d or min(pads) < 0:
            raise _Unsupported(f"attribute pads = {pads[:8]} is not {2 * d} ints >= 0")
        begin, pe = list(pads[:d]), list(pads[d:])
        out = []
        for i, s, w, b, e in zip(size, strides, span, begin, pe):
            room = i + b + e - w
            if room < 0:
                raise _Unsupported(f"a window of {w} is wider than the padded input, {i + b + e}")
            o = (-(-room // s) if ceil else room // s) + 1
            out.append(o - 1 if ceil and (o - 1) * s >= i + b else o)
    end = [max(e, (o - 1) * s + w - i - b) for e, o, s, w, i, b in zip(pe, out, strides, span, size, begin)]
    return _Geometry(size, tuple(kernel), tuple(strides), tuple(dil), tuple(begin), tuple(pe), tuple(end), tuple(out))


def _windows(n: Node, x: str, g: _Geometry, fill: str = "") -> str:
    """``x`` (N, C, D1..Dd) padded (with ``fill``, np.pad's keywords) as its windows,
    (N, C, O1..Od, K1..Kd)."""
    d = len(g.kernel)
    if any(g.begin) or any(g.end):
        padded = n.tmp("padded")
        n.line(f"{padded} = np.pad({x}, {((0, 0), (0, 0)) + tuple(zip(g.begin, g.end))}{fill})")
        x = padded
    steps = [f"::{s}" if -(-(i + b + e - w + 1) // s) == o else f":{(o - 1) * s + 1}:{s}"
             for i, b, e, w, o, s in zip(g.size, g.begin, g.end, g.span, g.out, g.strides)]
    steps = [":" if t == "::1" else t for t in steps + [f"::{dl}" for dl in g.dilations]]
    w = n.tmp("windows")
    n.line(f"{w} = np.lib.stride_tricks.sliding_window_view({x}, {g.span}, axis={tuple(range(2, 2 + d))})"
           f"[:, :, {', '.join(steps)}]")
    return w


def _contract(n: Node, win: str, w: str, groups: int, g: _Geometry, features: int, transposed: bool) -> str:
    """The windows (N, C, O.., K..) times the kernel, (M, C/G, K..) or, ``transposed``,
    (C, M/G, K..), summed over channels and taps: (N, M, O..)."""
    d = len(g.kernel)
    o, k, wl = _OUT[:d], _KER[:d], "cm" if transposed else "mc"
    if groups == 1:
        return f"np.einsum('nc{o}{k},{wl}{k}->nm{o}', {win}, {w}, optimize=True)"
    batch, channels = n.shape(0)[:2]
    c, m = channels // groups, features // groups
    wins = f"np.reshape({win}, {(batch, groups, c) + g.out + g.kernel})"
    ker = f"np.reshape({w}, {(groups,) + ((c, m) if transposed else (m, c)) + g.kernel})"
    y = n.tmp("grouped")
    n.line(f"{y} = np.einsum('ngc{o}{k},g{wl}{k}->ngm{o}', {wins}, {ker}, optimize=True)")
    return f"np.reshape({y}, {(batch, features) + g.out})"


def _bias(n: Node, y: str, k: int, features: int, d: int) -> str:
    return f"{y} + np.reshape({n.x(k)}, {(features,) + (1,) * d})" if n.has(k) else y


def _groups(n: Node, channels: int, features: int) -> int:
    groups = n.attr_int("group", 1)
    if groups < 1 or channels % groups or features % groups:
        raise _Unsupported(f"attribute group = {groups} for {channels} input and {features} output channels")
    return groups


@on("Conv")
def _conv(n: Node) -> str:
    d = _spatial(n)
    (batch, channels), ws = n.shape(0)[:2], n.shape(1)
    if len(ws) != d + 2:
        raise _Unsupported(f"a rank-{len(ws)} weight for a rank-{d + 2} input")
    groups = _groups(n, channels, ws[0])
    if ws[1] * groups != channels:
        raise _Unsupported(f"a weight of {ws[1]} input channels per group for {channels} in {groups} groups")
    g = _geometry(n, _kernel(n, d, ws[2:]), pool=False)
    _check_out(n, (batch, ws[0]) + g.out)
    y = _contract(n, _windows(n, n.x(0), g), n.x(1), groups, g, ws[0], transposed=False)
    return _bias(n, y, 2, ws[0], d)


@on("ConvTranspose")
def _conv_transpose(n: Node) -> str:
    """The gradient of a convolution: the input spread out by the strides (zeros between),
    padded by ``dilation * (kernel - 1)`` less the pads (cropped where that is negative), then
    convolved with the kernel flipped along its spatial axes."""
    d = _spatial(n)
    xs, ws = n.shape(0), n.shape(1)
    (batch, channels), size = xs[:2], xs[2:]
    if len(ws) != d + 2 or ws[0] != channels:
        raise _Unsupported(f"a weight of shape {ws} for an input of shape {xs}")
    groups = n.attr_int("group", 1)
    features = ws[1] * groups
    _groups(n, channels, features)
    kernel = _kernel(n, d, ws[2:])
    auto = n.attr_str("auto_pad", "NOTSET", _AUTO_PAD)
    strides = _per_axis(n, "strides", d, 1, 1)
    dil = _per_axis(n, "dilations", d, 1, 1)
    adj = _per_axis(n, "output_padding", d, 0, 0)
    pads, shape = n.attr_ints("pads"), n.attr_ints("output_shape")
    reach = [dl * (k - 1) for k, dl in zip(kernel, dil)]
    full = [(i - 1) * s + a + r + 1 for i, s, a, r in zip(size, strides, adj, reach)]
    if pads is not None and (auto != "NOTSET" or shape is not None):
        raise _Unsupported(f"attribute pads with auto_pad = {auto} or output_shape")
    if shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        if shape is not None and len(shape) != d:
            raise _Unsupported(f"attribute output_shape = {shape[:8]} for {d} spatial axes")
        total = [f - o for f, o in zip(full, shape or [i * s for i, s in zip(size, strides)])]
        # past the full output (total < 0): onnxruntime pads an output_shape with zeros after, and
        # makes SAME the full output
        begin = [0 if t < 0 else t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        end = [(t if shape else 0) if t < 0 else t - b for t, b in zip(total, begin)]
    else:
        pads = (0,) * (2 * d) if pads is None or auto == "VALID" else pads
        if len(pads) != 2 * d or min(pads) < 0:
            raise _Unsupported(f"attribute pads = {pads[:8]} is not {2 * d} ints >= 0")
        begin, end = list(pads[:d]), list(pads[d:])
    out = tuple(f - b - e for f, b, e in zip(full, begin, end))
    if min(out) < 1:
        raise _Unsupported(f"an empty output, {out}")
    _check_out(n, (batch, features) + out)
    x = n.x(0)
    if max(strides) > 1:
        spread = n.tmp("spread")
        n.line(f"{spread} = np.zeros({(batch, channels) + tuple((i - 1) * s + 1 for i, s in zip(size, strides))}, "
               f"dtype={x}.dtype)")
        n.line(f"{spread}[:, :, {', '.join(f'::{s}' for s in strides)}] = {x}")
        x = spread
    left = [r - b for r, b in zip(reach, begin)]
    right = [r - e + a for r, e, a in zip(reach, end, adj)]
    length = [(i - 1) * s + 1 for i, s in zip(size, strides)]
    crops = [(max(0, -lo), m - max(0, -hi)) for lo, hi, m in zip(left, right, length)]
    if min(left) < 0 or min(right) < 0:
        x = f"{x}[:, :, {', '.join(f'{a}:{b}' for a, b in crops)}]"
    pad_lo, pad_hi = tuple(max(0, lo) for lo in left), tuple(max(0, hi) for hi in right)
    g = _Geometry(tuple(b - a for a, b in crops), kernel, (1,) * d, dil, pad_lo, pad_hi, pad_hi, out)
    w = n.tmp("flipped")
    n.line(f"{w} = np.flip({n.x(1)}, axis={tuple(range(2, 2 + d))})")
    y = _contract(n, _windows(n, x, g), w, groups, g, features, transposed=True)
    return _bias(n, y, 2, features, d)


def _pool_windows(n: Node, fill: str, ceil_since: int,
                  dilations_since: int) -> tuple[str, _Geometry, tuple[int, ...]]:
    """MaxPool/AveragePool/LpPool: the windows, their geometry and their tap axes (``*_since``:
    the opset that gave the op that attribute)."""
    d = _spatial(n)
    if n.opset < ceil_since and n.given("ceil_mode"):
        raise _Unsupported(f"attribute ceil_mode before opset {ceil_since}")
    g = _geometry(n, _kernel(n, d, None), True, n.attr_flag("ceil_mode", 0), dilations_since)
    _check_out(n, n.shape(0)[:2] + g.out)
    for ax in range(d):  # a window of padding only would be -inf (max) or 0/0 (average)
        p = g.positions(ax)
        if not ((p >= 0) & (p < g.size[ax])).any(axis=1).all():
            raise _Unsupported("a window that holds only padding")
    return _windows(n, n.x(0), g, fill), g, tuple(range(2 + d, 2 + 2 * d))


@on("MaxPool")
def _max_pool(n: Node) -> str:
    if len(n.node.output) > 1 and n.node.output[1]:
        raise _Unsupported("the Indices output")
    n.attr_flag("storage_order", 0)  # the layout of Indices only
    dt = n.dtype(0)
    low = "-np.inf" if dt.kind == "f" else int(np.iinfo(dt).min)
    win, _, taps = _pool_windows(n, f", constant_values={low}", 10, 10)
    return f"np.max({win}, axis={taps})"


@on("AveragePool")
def _average_pool(n: Node) -> str:
    """The sum of each window over the number of its taps that lie in the input (or, with
    count_include_pad, in the input and its declared pads: never the ceil-mode overhang)."""
    include = n.attr_flag("count_include_pad", 0)
    win, g, taps = _pool_windows(n, "", 10, 19)
    d = len(g.size)
    counts = np.ones(g.out)
    for ax in range(d):
        p = g.positions(ax)
        lo, hi = (-g.begin[ax], g.size[ax] + g.pads_end[ax]) if include else (0, g.size[ax])
        counts = counts * ((p >= lo) & (p < hi)).sum(axis=1).reshape((-1,) + (1,) * (d - 1 - ax))
    if (counts == counts.flat[0]).all():
        return f"np.sum({win}, axis={taps}) / {int(counts.flat[0])}"
    return f"np.sum({win}, axis={taps}) / {n.constant(counts.astype(n.dtype(0)), 'counts')}"


def _lp(n: Node, x: str, axes: tuple[int, ...], keep: bool = False) -> str:
    """``(sum |x|^p) ^ (1/p)`` over ``axes``."""
    p = n.attr_int("p", 2)
    if p < 1:
        raise _Unsupported(f"attribute p = {p}")
    over = f"axis={axes}, keepdims={keep}"
    if p == 1:
        return f"np.sum(np.abs({x}), {over})"
    if p == 2:
        return f"np.sqrt(np.sum({x} * {x}, {over}))"
    return f"np.sum(np.abs({x}) ** {p}, {over}) ** {1 / p!r}"


@on("LpPool")
def _lp_pool(n: Node) -> str:
    win, _, taps = _pool_windows(n, "", 18, 18)
    return _lp(n, win, taps)


def _global_axes(n: Node) -> tuple[int, ...]:
    return tuple(range(2, 2 + _spatial(n)))


_GLOBAL_POOLS = {"GlobalAveragePool": "np.mean", "GlobalMaxPool": "np.max"}


@on(*_GLOBAL_POOLS)
def _global_pool(n: Node) -> str:
    return f"{_GLOBAL_POOLS[n.op]}({n.x()}, axis={_global_axes(n)}, keepdims=True)"


@on("GlobalLpPool")
def _global_lp_pool(n: Node) -> str:
    return _lp(n, n.x(), _global_axes(n), keep=True)


def _only_output(n: Node, what: str) -> None:
    if any(n.node.output[1:]):
        raise _Unsupported(what)


def _per_channel(n: Node, k: int, rank: int) -> str:
    """Input ``k``, one value per channel (axis 1), shaped to broadcast against the input."""
    return f"np.reshape({n.x(k)}, {(n.shape(0)[1],) + (1,) * (rank - 2)})"


def _normalize(n: Node, x: str, axes: tuple[int, ...], eps: float) -> tuple[str, str, str]:
    """``x`` less its mean over ``axes``, the mean and 1 / sqrt(variance + eps) (kept dims)."""
    mean, centred, inv = n.tmp("mean"), n.tmp("centred"), n.tmp("inv_std")
    n.line(f"{mean} = np.mean({x}, axis={axes}, keepdims=True)")
    n.line(f"{centred} = {x} - {mean}")
    n.line(f"{inv} = 1.0 / np.sqrt(np.mean({centred} * {centred}, axis={axes}, keepdims=True) + {eps!r})")
    return centred, mean, inv


def _stash(n: Node) -> None:
    if n.attr_int("stash_type", _STASH_FLOAT) != _STASH_FLOAT:
        raise _Unsupported("attribute stash_type other than 1 (float)")


@on("BatchNormalization")
def _batch_norm(n: Node) -> str:
    """Inference form: the running statistics are inputs; training mode updates them."""
    if n.attr_flag("training_mode", 0):
        raise _Unsupported("training_mode = 1")
    _only_output(n, "the running mean and variance outputs (training mode)")
    eps = n.attr_float("epsilon", 1e-5)
    n.attr_float("momentum", 0.9)  # how training would update the running statistics
    r = n.rank(0)
    if r < 2:
        raise _Unsupported(f"a rank-{r} input")
    mean, var, scale, bias = (_per_channel(n, k, r) for k in (3, 4, 1, 2))
    return f"({n.x(0)} - {mean}) / np.sqrt({var} + {eps!r}) * {scale} + {bias}"


@on("LayerNormalization")
def _layer_norm(n: Node) -> list[str]:
    """Normalized over the axes from ``axis`` on; the outputs Mean and InvStdDev keep them as 1s."""
    r = n.rank(0)
    axes = tuple(range(n.axis(-1), r))
    _stash(n)
    centred, mean, inv = _normalize(n, n.x(0), axes, n.attr_float("epsilon", 1e-5))
    y = f"{centred} * {inv} * {n.x(1)}"
    if n.dtype(0) != np.float32:  # Mean and InvStdDev are of the stash type
        mean, inv = f"{mean}.astype(np.float32)", f"{inv}.astype(np.float32)"
    return [f"{y} + {n.x(2)}" if n.has(2) else y, mean, inv]


@on("InstanceNormalization")
def _instance_norm(n: Node) -> str:
    r = n.rank(0)
    if r < 3:
        raise _Unsupported(f"a rank-{r} input")
    centred, _, inv = _normalize(n, n.x(0), tuple(range(2, r)), n.attr_float("epsilon", 1e-5))
    return f"{centred} * {inv} * {_per_channel(n, 1, r)} + {_per_channel(n, 2, r)}"


@on("GroupNormalization")
def _group_norm(n: Node) -> str:
    """The channels in ``num_groups`` groups, each normalized over its channels and the spatial
    axes; scale and bias per channel (opset 21) or, as opset 18 had it, per group."""
    shape = n.shape(0)
    r = len(shape)
    if r < 2:
        raise _Unsupported(f"a rank-{r} input")
    (batch, channels), groups = shape[:2], n.attr_int("num_groups")
    if groups < 1 or channels % groups:
        raise _Unsupported(f"attribute num_groups = {groups} for {channels} channels")
    each = channels if n.opset >= 21 else groups
    if n.shape(1) != (each,) or n.shape(2) != (each,):
        raise _Unsupported(f"scale and bias of shapes {n.shape(1)}, {n.shape(2)}: opset {n.opset} "
                           f"has one per {'channel' if n.opset >= 21 else 'group'}")
    _stash(n)
    eps = n.attr_float("epsilon", 1e-5)
    grouped = n.tmp("grouped")
    n.line(f"{grouped} = np.reshape({n.x(0)}, {(batch, groups, math.prod(shape[1:]) // groups)})")
    centred, _, inv = _normalize(n, grouped, (2,), eps)
    if n.opset >= 21:
        return f"np.reshape({centred} * {inv}, {shape}) * {_per_channel(n, 1, r)} + {_per_channel(n, 2, r)}"
    scale, bias = (f"np.reshape({n.x(k)}, {(groups, 1)})" for k in (1, 2))
    return f"np.reshape({centred} * {inv} * {scale} + {bias}, {shape})"
