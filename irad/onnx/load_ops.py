"""Import handlers of the standard ONNX operators (the default domain): elementwise math, matrix
products, reductions, shapes and indexing, each one numpy expression irad differentiates.  The
neural-network nodes are in ``load_nn``, ai.onnx.ml in ``load_ml``."""
from __future__ import annotations

import math
import re
from typing import Any, cast

import numpy as np
from onnx import helper

from ..lower import literal
from .node import NODES, Handler, Node, on
from .ops import _Unsupported

_NP_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "MatMul": "@",
              "Equal": "==", "Less": "<", "LessOrEqual": "<=", "Greater": ">", "GreaterOrEqual": ">="}
_NP_UNARY = {"Neg": "np.negative", "Abs": "np.abs", "Tanh": "np.tanh", "Exp": "np.exp", "Log": "np.log",
             "Sqrt": "np.sqrt", "Sin": "np.sin", "Cos": "np.cos", "Sign": "np.sign", "Floor": "np.floor",
             "Ceil": "np.ceil", "Reciprocal": "np.reciprocal", "Not": "np.logical_not", "IsNaN": "np.isnan",
             "Tan": "np.tan", "Asin": "np.arcsin", "Acos": "np.arccos", "Atan": "np.arctan", "Sinh": "np.sinh",
             "Cosh": "np.cosh", "Asinh": "np.arcsinh", "Acosh": "np.arccosh", "Atanh": "np.arctanh",
             "Round": "np.round"}
_REDUCE = {"ReduceSum": "np.sum", "ReduceMean": "np.mean", "ReduceMax": "np.max", "ReduceMin": "np.min",
           "ReduceProd": "np.prod"}
# an einsum equation, nothing else; possessive quantifiers (Python 3.11+): no backtracking, so a
# long equation failing late is refused in linear time
_TERM = r"(?:[A-Za-z]|\.\.\.)*+"
EINSUM = re.compile(rf" *+{_TERM}(?: *+, *+{_TERM})*+(?: *+-> *+{_TERM})? *+\Z")


def _slices(starts: Any, ends: Any, axes: Any, steps: Any, shape: tuple[int, ...]) -> str:
    """The index of an ONNX ``Slice``: starts and ends clamped as the spec says (numpy's own
    clamping overflows at the int64 extremes exporters write for "to the end")."""
    rank = len(shape)
    parts = [":"] * rank
    for s0, s1, ax, st in zip(starts, ends, axes, steps):
        if not -rank <= ax < rank or st == 0 or parts[int(ax) % rank] != ":":
            raise _Unsupported(f"a slice of axis {ax} (repeated?) with step {st} of a rank-{rank} tensor")
        dim = shape[ax]
        if dim == 0:
            continue
        # the spec's clamps: start to [0, dim] (step > 0) or [0, dim - 1], end to [0, dim] or [-1, dim - 1]
        s0 = min(max(s0 + dim if s0 < 0 else s0, 0), dim if st > 0 else dim - 1)
        s1 = min(max(s1 + dim if s1 < 0 else s1, 0 if st > 0 else -1), dim if st > 0 else dim - 1)
        parts[int(ax) % rank] = f"{s0}:{'' if s1 < 0 else s1}:{int(st)}"  # -1: through index 0
    return ", ".join(parts) + ("," if rank == 1 else "")


for _op, _sym in _NP_BINARY.items():
    NODES[_op] = cast(Handler, lambda n, s=_sym: f"{n.x(0)} {s} {n.x(1)}")
for _op, _fn in _NP_UNARY.items():
    NODES[_op] = cast(Handler, lambda n, f=_fn: f"{f}({n.x()})")


def _activation(template: str, **defaults: float) -> Handler:
    """An elementwise op as a template over its input ``{x}`` and float attributes (finite
    numbers, checked by ``attr_float``, the only values spelled into the source)."""
    def h(n: Node) -> str:
        x = n.x()
        if n.dtype().kind != "f":
            raise _Unsupported(f"{n.op} of {n.dtype()}")
        return template.format(x=x, **{k: repr(n.attr_float(k, v)) for k, v in defaults.items()})
    return h


for _op, _template, _defaults in [
        ("Relu", "np.maximum({x}, 0)", {}),
        # exp(-log(1 + e^-x)): no overflow for either sign, and its gradient stays finite
        ("Sigmoid", "np.exp(-np.logaddexp(0, -{x}))", {}),
        ("Softplus", "np.logaddexp(0, {x})", {}),
        ("Softsign", "{x} / (1 + np.abs({x}))", {}),
        ("LeakyRelu", "np.where({x} < 0, {alpha} * {x}, {x})", {"alpha": 0.01}),
        ("Elu", "np.where({x} < 0, {alpha} * np.expm1(np.minimum({x}, 0)), {x})", {"alpha": 1.0}),
        ("Selu", "{gamma} * np.where({x} > 0, {x}, {alpha} * np.expm1(np.minimum({x}, 0)))",
         {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
        ("Celu", "np.maximum({x}, 0) + np.minimum(0, {alpha} * np.expm1(np.minimum({x}, 0) / {alpha}))",
         {"alpha": 1.0}),
        ("HardSigmoid", "np.clip({alpha} * {x} + {beta}, 0, 1)", {"alpha": 0.2, "beta": 0.5}),
        ("HardSwish", "{x} * np.clip({x} / 6 + 0.5, 0, 1)", {}),
        ("Mish", "{x} * np.tanh(np.logaddexp(0, {x}))", {}),
        ("ThresholdedRelu", "np.where({x} > {alpha}, {x}, 0 * {x})", {"alpha": 1.0})]:
    NODES[_op] = _activation(_template, **_defaults)


def _fold(fn: str) -> Handler:
    """A variadic elementwise node (``Max(a, b, c)``) as nested binary calls."""
    def h(n: Node) -> str:
        e = n.x(0)
        for k in range(1, len(n.ins)):
            e = f"{fn}({e}, {n.x(k)})"
        return e
    return h


for _op, _fn in [("Max", "np.maximum"), ("Min", "np.minimum"), ("Or", "np.logical_or"), ("And", "np.logical_and"),
                 ("Xor", "np.logical_xor")]:
    NODES[_op] = _fold(_fn)


def _all_inputs(n: Node) -> str:
    return ", ".join(n.x(k) for k in range(len(n.ins)))


NODES["Identity"] = lambda n: n.x()
NODES["Expand"] = lambda n: f"np.broadcast_to({n.x()}, {n.out_shape()})"
NODES["Where"] = lambda n: f"np.where({n.x(0)}, {n.x(1)}, {n.x(2)})"
NODES["Concat"] = lambda n: f"np.concatenate([{_all_inputs(n)}], axis={n.axis(None)})"
NODES["Gather"] = lambda n: f"np.take({n.x(0)}, {n.x(1)}, axis={n.axis()})"
NODES["Range"] = lambda n: f"np.arange({n.x(0)}, {n.x(1)}, {n.x(2)}, dtype=np.{n.dtype().name})"
NODES["Tile"] = lambda n: f"np.tile({n.x()}, {n.ints(1)})"
NODES["Compress"] = lambda n: f"np.compress({n.x(1)}, {n.x(0)}, axis={n.axis(None) if n.given('axis') else None})"
NODES["Trilu"] = lambda n: (f"np.{'triu' if n.attr_flag('upper', 1) else 'tril'}({n.x()}, "
                             f"{n.int1(1) if n.has(1) else 0})")


@on("GatherElements")
def _gather_elements(n: Node) -> str:
    """The output has the indices' shape: on the other axes they read the data's leading part
    (``take_along_axis`` would broadcast instead)."""
    ax, data, idx = n.axis(), n.shape(0), n.shape(1)
    if len(idx) != len(data) or any(i > d for k, (i, d) in enumerate(zip(idx, data)) if k != ax):
        raise _Unsupported(f"indices of shape {idx} for data of shape {data} along axis {ax}")
    x = n.x(0)
    if any(i < d for k, (i, d) in enumerate(zip(idx, data)) if k != ax):
        x = f"{x}[{', '.join(':' if k == ax else f':{i}' for k, i in enumerate(idx))}]"
    return f"np.take_along_axis({x}, {n.x(1)}, axis={ax})"


@on("Reshape")
def _reshape(n: Node) -> str:
    n.attr_flag("allowzero", 0)  # the static output shape already says what it did
    # (an input of unknown shape, a mask's count, is checked when the model runs: numpy refuses)
    if n.ins[0] in n._shapes and math.prod(n.shape()) != math.prod(n.out_shape()):
        raise _Unsupported(f"a reshape of {n.shape()} into {n.out_shape()}")
    return f"np.reshape({n.x()}, {n.out_shape()})"


@on("LpNormalization")
def _lp_normalization(n: Node) -> str:
    x, ax = n.x(), n.axis(-1)
    p = n.attr_int("p", 2)
    if p not in (1, 2):
        raise _Unsupported(f"attribute p = {p}")
    norm = f"np.sum(np.abs({x}), axis={ax}, keepdims=True)" if p == 1 else \
        f"np.sqrt(np.sum({x} * {x}, axis={ax}, keepdims=True))"
    return f"{x} / {norm}"


@on("Cast")
def _cast(n: Node) -> str:
    n.attr_flag("saturate", 1)  # float8 targets only, which are refused below
    to = n.attr_int("to")
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        raise _Unsupported(f"attribute to = {to} is not a tensor type") from None
    if dt.kind not in "biufc" or getattr(np, dt.name, None) is not dt.type:
        raise _Unsupported(f"a cast to {dt}")
    return f"np.asarray({n.x()}).astype(np.{dt.name})"


@on("Einsum")
def _einsum(n: Node) -> str:
    eq = n.attr_str("equation", None)
    if not EINSUM.match(eq):
        raise _Unsupported(f"attribute equation {eq[:40]!r} is not an einsum equation")
    return f"np.einsum({n.constant(eq, 'equation')}, {_all_inputs(n)})"


@on("Transpose")
def _transpose(n: Node) -> str:
    r = n.rank()
    perm = n.attr_ints("perm")
    perm = tuple(range(r))[::-1] if perm is None else perm
    if sorted(perm) != list(range(r)):
        raise _Unsupported(f"attribute perm {perm} is not a permutation of {r} axes")
    return f"np.transpose({n.x()}, {perm})"


_REDUCE_ALSO = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


@on(*_REDUCE, *_REDUCE_ALSO)
def _reduce(n: Node) -> str:
    """Axes are an attribute before opset 18 (13 for ReduceSum), an input from then on; no axes
    (or an empty list) reduce every axis unless ``noop_with_empty_axes``."""
    since = 13 if n.op == "ReduceSum" else 18
    axes = n.axes("axes", 1, since)
    noop = n.opset >= since and n.attr_flag("noop_with_empty_axes", 0)
    kd, x = n.attr_flag("keepdims", 1), n.x()
    if not axes:
        if noop:
            return x
        axes = None
    how = f"axis={axes}, keepdims={kd}"
    if 0 in n.shape() and n.op in ("ReduceMax", "ReduceMin", "ReduceLogSumExp"):  # the op's identity
        dt = n.dtype()
        if dt.kind == "f":
            low, high = -np.inf, np.inf
        else:
            low, high = (np.iinfo(dt).min, np.iinfo(dt).max) if dt.kind in "iu" else (False, True)
        fill = n.constant(np.array(high if n.op == "ReduceMin" else low, dt), "identity")
        return f"np.full({n.out_shape()}, {fill})"
    out = _reduced(n, x, axes, kd, how)
    dt = n.dtype()
    # integers stay integers of their width (a mean or a norm truncated, as onnxruntime does)
    return out if dt.kind in "fb" else f"np.asarray({out}).astype(np.{dt.name})"


def _reduced(n: Node, x: str, axes: tuple[int, ...] | None, kd: bool, how: str) -> str:
    if n.op == "ReduceL2":
        return f"np.sqrt(np.sum({x} * {x}, {how}))"
    if n.op == "ReduceSumSquare":
        return f"np.sum({x} * {x}, {how})"
    if n.op == "ReduceL1":
        return f"np.sum(np.abs({x}), {how})"
    if n.op == "ReduceLogSum":
        return f"np.log(np.sum({x}, {how}))"
    if n.op == "ReduceLogSumExp":  # shifted by the maximum, which the gradient does not see
        m = n.tmp("shift")
        n.line(f"{m} = np.max({x}, axis={axes}, keepdims=True)")
        out = f"np.log(np.sum(np.exp({x} - {m}), axis={axes}, keepdims=True)) + {m}"
        return out if kd else f"np.squeeze({out}, axis={axes})"
    return f"{_REDUCE[n.op]}({x}, {how})"


@on("Slice")
def _slice(n: Node) -> str:
    starts = n.ints(1)
    steps = n.ints(4) if n.has(4) else (1,) * len(starts)
    axes = n.ints(3) if n.has(3) else tuple(range(len(starts)))
    return f"{n.x()}[{_slices(starts, n.ints(2), axes, steps, n.shape())}]"


def _along(rank: int, ax: int, part: str) -> str:
    """An index taking ``part`` (a slice's text) of axis ``ax``."""
    return ", ".join([":"] * ax + [part]) + ("," if rank == 1 else "")


@on("CumSum", "CumProd")
def _cumulative(n: Node) -> str:
    """``reverse`` flips before and after; ``exclusive`` shifts by one, the first entry the
    operation's identity."""
    ax, r = n.int1(1), n.rank()
    if not -r <= ax < r:
        raise _Unsupported(f"axis {ax} is out of range for a rank-{r} input")
    ax %= r
    x = n.x()
    rev, exc = n.attr_flag("reverse", 0), n.attr_flag("exclusive", 0)
    if rev:
        x = f"np.flip({x}, axis={ax})"
    # integers keep their width (numpy accumulates int32 in int64); floats are differentiated
    out = f"np.{n.op.lower()}({x}, axis={ax}{'' if n.dtype().kind == 'f' else f', dtype=np.{n.dtype().name}'})"
    if exc:
        head = f"{x}[{_along(r, ax, ':1')}]"
        first = f"np.zeros_like({head})" if n.op == "CumSum" else f"np.ones_like({head})"
        out = f"np.concatenate([{first}, {out}[{_along(r, ax, ':-1')}]], axis={ax})"
    return f"np.flip({out}, axis={ax})" if rev else out


@on("ArgMax", "ArgMin")
def _argext(n: Node) -> str:
    ax, kd = n.axis(), n.attr_flag("keepdims", 1)
    if n.attr_flag("select_last_index", 0):
        return f"{n.shape()[ax] - 1} - np.{n.op.lower()}(np.flip({n.x()}, axis={ax}), axis={ax}, keepdims={kd})"
    return f"np.{n.op.lower()}({n.x()}, axis={ax}, keepdims={kd})"


@on("TopK")
def _topk(n: Node) -> list[str]:
    """A stable sort (ties by index, as onnxruntime orders them), descending for ``largest``;
    ``sorted=0`` leaves the order open, so sorted is as good."""
    largest = n.attr_flag("largest", 1)
    n.attr_flag("sorted", 1)
    ax, k = n.axis(-1), n.int1(1)
    if n.dtype().kind not in "fiu":
        raise _Unsupported(f"TopK of {n.dtype()}")
    if not 0 <= k <= n.shape()[ax]:
        raise _Unsupported(f"k = {k} for an axis of length {n.shape()[ax]}")
    idx = n.tmp("order")
    # descending: -x of floats, ~x of integers (order-reversing without overflow, unsigned too)
    x = n.x()
    key = x if not largest else f"~{x}" if n.dtype().kind != "f" else f"np.where(np.isnan({x}), -np.inf, -{x})"
    n.line(f"{idx} = np.argsort({key}, axis={ax}, kind='stable')")  # NaN ranks largest, as in onnxruntime
    if k != n.shape()[ax]:
        n.line(f"{idx} = {idx}[{_slices([0], [k], [ax], [1], n.shape())}]")
    return [f"np.take_along_axis({n.x()}, {idx}, axis={ax})", idx]


@on("IsInf")
def _isinf(n: Node) -> str:
    pos, neg = n.attr_flag("detect_positive", 1), n.attr_flag("detect_negative", 1)
    fn = {(1, 1): "np.isinf", (1, 0): "np.isposinf", (0, 1): "np.isneginf"}.get((pos, neg))
    return f"{fn}({n.x()})" if fn else f"np.zeros({n.shape()}, dtype=np.bool_)"


def _variadic(n: Node, op: str) -> str:
    return f" {op} ".join(n.x(k) for k in range(len(n.ins)))


NODES["Sum"] = lambda n: _variadic(n, "+")
NODES["PRelu"] = lambda n: f"np.where({n.x(0)} < 0, {n.x(1)} * {n.x(0)}, {n.x(0)})"  # slope broadcasts to x
NODES["Mean"] = lambda n: f"({_variadic(n, '+')}) / {len(n.ins)}"


@on("Div")
def _div(n: Node) -> str:
    """Integer division truncates toward zero in ONNX (numpy's ``//`` floors)."""
    a, b = n.x(0), n.x(1)
    if n.dtype().kind in "iu":
        return f"(np.abs({a}) // np.abs({b})) * (np.sign({a}) * np.sign({b}))"
    return f"{a} / {b}"


@on("Pow")
def _pow(n: Node) -> str:
    """The only binary op whose operands may differ in type; the result has the base's.  An
    integer base is raised in float64 and truncated, as onnxruntime does (``3 ** 1.5 == 5``, a
    negative exponent too, where numpy's integer power raises)."""
    dt = n.dtype(0)
    if dt.kind in "iu":
        return f"(np.asarray({n.x(0)}, dtype=np.float64) ** {n.x(1)}).astype(np.{dt.name})"
    if n.dtype(1) != dt:
        return f"{n.x(0)} ** np.asarray({n.x(1)}, dtype=np.{dt.name})"
    return f"{n.x(0)} ** {n.x(1)}"


@on("Mod")
def _mod(n: Node) -> str:
    return f"np.{'fmod' if n.attr_flag('fmod', 0) else 'mod'}({n.x(0)}, {n.x(1)})"


@on("Erf", "Gelu")
def _erf(n: Node) -> str:
    """Erf through SciPy's ``erf`` (irad has its rule); Gelu's tanh form needs no SciPy."""
    x = n.x()
    if n.op == "Gelu" and n.attr_str("approximate", "none", ("none", "tanh")) == "tanh":
        return f"0.5 * {x} * (1 + np.tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})))"
    try:
        from scipy.special import erf
    except ImportError:
        raise _Unsupported("Erf needs SciPy: pip install scipy") from None
    f = n.constant(erf, "erf")
    return f"{f}({x})" if n.op == "Erf" else f"0.5 * {x} * (1 + {f}({x} * 0.7071067811865476))"


@on("Clip")
def _clip(n: Node) -> str:
    """Bounds are optional inputs from opset 11 (attributes before)."""
    x = n.x()
    if n.opset < 11:
        lo: str | None
        hi: str | None
        lo, hi = (repr(n.attr_float(k, d)) for k, d in (("min", -math.inf), ("max", math.inf)))
        lo, hi = (None if v in ("inf", "-inf") else v for v in (lo, hi))
    else:
        lo, hi = (n.x(k) if n.has(k) else None for k in (1, 2))
    if lo is not None and hi is not None:
        return f"np.clip({x}, {lo}, {hi})"
    return f"np.maximum({x}, {lo})" if lo is not None else f"np.minimum({x}, {hi})" if hi is not None else x


@on("Gemm")
def _gemm(n: Node) -> str:
    """``alpha * A' @ B' + beta * C`` (C optional, broadcast)."""
    a, b = n.x(0), n.x(1)
    a = f"{a}.T" if n.attr_flag("transA", 0) else a
    b = f"{b}.T" if n.attr_flag("transB", 0) else b
    alpha, beta = n.attr_float("alpha", 1.0), n.attr_float("beta", 1.0)
    out = f"{a} @ {b}" if alpha == 1.0 else f"{alpha!r} * ({a} @ {b})"
    if n.has(2):
        out += f" + {n.x(2)}" if beta == 1.0 else f" + {beta!r} * {n.x(2)}"
    return out


@on("Softmax", "LogSoftmax")
def _softmax(n: Node) -> str:
    """Along one axis from opset 13; before it, over the axes from ``axis`` on (a 2-D view).  The
    maximum subtracted for range cancels in the value and the gradient."""
    shape = n.shape()
    if n.opset >= 13:
        x, ax = n.x(), n.axis(-1)
    else:
        ax0 = n.attr_int("axis", 1)
        if not -len(shape) <= ax0 <= len(shape):
            raise _Unsupported(f"attribute axis = {ax0} is out of range for a rank-{len(shape)} input")
        ax0 += len(shape) if ax0 < 0 else 0
        x, ax = f"np.reshape({n.x()}, {(int(np.prod(shape[:ax0])), int(np.prod(shape[ax0:])))})", 1
    m, z = n.tmp("shifted"), n.tmp("exp")
    n.line(f"{m} = {x} - np.max({x}, axis={ax}, keepdims=True)")
    if n.op == "Softmax":
        n.line(f"{z} = np.exp({m})")
        out = f"{z} / np.sum({z}, axis={ax}, keepdims=True)"
    else:
        out = f"{m} - np.log(np.sum(np.exp({m}), axis={ax}, keepdims=True))"
    return out if n.opset >= 13 else f"np.reshape({out}, {shape})"


@on("Flatten")
def _flatten(n: Node) -> str:
    ax, r = n.attr_int("axis", 1), n.rank()
    if not -r <= ax <= r:
        raise _Unsupported(f"attribute axis = {ax} is out of range for a rank-{r} input")
    return f"np.reshape({n.x()}, {n.out_shape()})"


@on("Squeeze", "Unsqueeze")
def _squeeze(n: Node) -> str:
    """Axes an attribute before opset 13, an input from then on; the result shape is inferred."""
    if n.opset < 13:
        n.attr_ints("axes")
    return f"np.reshape({n.x()}, {n.out_shape()})"


@on("Split")
def _split(n: Node) -> list[str]:
    """Sizes from input 1 (opset 13+) or attribute ``split``; else ``num_outputs`` (opset 18+)
    pieces, the last one smaller; else equal pieces, one per output."""
    ax, r = n.axis(0), n.rank()
    length, k = n.shape()[ax], len(n.node.output)
    sizes = (n.ints(1) if n.has(1) else None) if n.opset >= 13 else n.attr_ints("split")
    num = n.attr_int("num_outputs", 0) if n.opset >= 18 else 0
    if sizes is None and num:
        chunk = -(-length // num)
        sizes = tuple(min(chunk, max(0, length - i * chunk)) for i in range(num))
    elif sizes is None:
        if length % k:
            raise _Unsupported(f"an axis of length {length} into {k} equal pieces")
        sizes = (length // k,) * k
    if len(sizes) != k or sum(sizes) != length or min(sizes) < 0:
        raise _Unsupported(f"split sizes {sizes[:8]} for {k} outputs of an axis of length {length}")
    ends = np.cumsum((0,) + tuple(sizes))
    return [f"{n.x()}[{_along(r, ax, f'{int(a)}:{int(b)}')}]" for a, b in zip(ends[:-1], ends[1:])]


@on("Shape")
def _shape(n: Node) -> str:
    """A constant: shapes are static (``start``/``end`` slice it, from opset 15)."""
    start, end = n.attr_int("start", 0), n.attr_int("end", 2 ** 62)
    return f"np.array({tuple(n.shape()[start:end])}, dtype=np.int64)"


NODES["Size"] = lambda n: f"np.int64({int(np.prod(n.shape()))})"


@on("CastLike")
def _cast_like(n: Node) -> str:
    n.attr_flag("saturate", 1)  # float8 targets only, which dtype() does not give
    return f"np.asarray({n.x()}).astype(np.{n.dtype(1).name})"


@on("ConstantOfShape")
def _constant_of_shape(n: Node) -> str:
    value = n.attr_tensor("value")
    value = np.zeros(1, np.float32) if value is None else value
    shape = n.ints(0)
    if value.size != 1 or min(shape, default=0) < 0:
        raise _Unsupported(f"a fill value of {value.size} elements, or a negative size in {shape[:8]}")
    return f"np.full({shape}, {n.constant(value.reshape(()), 'fill')})"


@on("Dropout")
def _dropout(n: Node) -> list[str]:
    """Inference only (the identity, an all-true mask): a training-mode Dropout is random."""
    n.attr_int("seed", 0)
    if n.opset < 12:
        n.attr_float("ratio", 0.5)
    if n.has(2) and (n.ins[2] not in n._consts or n.const(2).dtype != np.bool_ or n.const(2).any()):
        raise _Unsupported("Dropout in training mode or with training_mode a model input "
                           "(irad reads inference-mode Dropout only: training mode is random)")
    return [n.x(), f"np.ones({n.shape()}, dtype=np.bool_)"]


_PAD_MODES = ("constant", "edge", "reflect", "wrap")


@on("Pad")
def _pad(n: Node) -> str:
    """``pads`` lists the begins, then the ends, of every axis (of ``axes``, opset 18+); a
    negative pad crops, after padding the rest."""
    pads, mode = n.ints(1), n.attr_str("mode", "constant", _PAD_MODES)
    r = n.rank()
    axes = tuple(range(r))
    if n.has(3):
        axes = n.ints(3)
        if any(not -r <= a < r for a in axes) or len({a % r for a in axes}) != len(axes):
            raise _Unsupported(f"axes {axes[:8]} are out of range or repeated for a rank-{r} input")
        axes = tuple(a % r for a in axes)
    if len(pads) != 2 * len(axes):
        raise _Unsupported(f"{len(pads)} pads for {len(axes)} axes")
    begin, end = [0] * r, [0] * r
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[k + len(axes)]
    widths = tuple((max(b, 0), max(e, 0)) for b, e in zip(begin, end))
    x, shape = n.x(), n.shape()
    if min(begin + end) < 0:  # crop first: a wrap then reads the cropped tensor, as onnxruntime does
        x = f"{x}[{', '.join(f'{max(-b, 0)}:{s - max(-e, 0)}' for b, e, s in zip(begin, end, shape))}" \
            f"{',' if r == 1 else ''}]"
        shape = tuple(s - max(-b, 0) - max(-e, 0) for b, e, s in zip(begin, end, shape))
        if min(shape) < 0:
            raise _Unsupported(f"pads {pads[:8]} crop more than the input's shape {n.shape()}")
    if mode == "constant" and n.has(2) and n.ins[2] not in n._consts:  # a traced fill, differentiated
        mask = n.constant(np.pad(np.zeros(shape, np.bool_), widths, constant_values=True), "padded")
        return f"np.where({mask}, {n.x(2)}, np.pad({x}, {widths}))"
    cv = f", constant_values={n.x(2)}" if mode == "constant" and n.has(2) else ""
    return f"np.pad({x}, {widths}, mode={literal(mode)}{cv})"


def _scatter_copy(n: Node) -> str:
    if len(n.shape()) != 1:
        raise _Unsupported("a scatter into a tensor of rank > 1")
    tmp = n.tmp("scatter")
    n.line(f"{tmp} = np.array({n.x()}, copy=True)")
    return tmp


@on("ScatterND")
def _scatter_nd(n: Node) -> str:
    """Flat scatters (``export`` flattens): ``a[i] = u``, ``np.add.at``; a max-scatter only of
    non-decreasing constant updates, where numpy's last-wins assignment is the maximum."""
    if n.shape(1)[-1:] != (1,):
        raise _Unsupported("indices of more than one coordinate")
    red = n.attr_str("reduction", "none", ("none", "add", "max"))
    if red == "max":
        upd = n.const(2)
        if (np.diff(upd.reshape(-1)) < 0).any():
            raise _Unsupported("a max-scatter of updates that are not non-decreasing")
    tmp, idx, u = _scatter_copy(n), f"{n.x(1)}[:, 0]", n.x(2)
    n.line({"none": f"{tmp}[{idx}] = {u}", "add": f"np.add.at({tmp}, {idx}, {u})",
            "max": f"{tmp}[{idx}] = np.maximum({tmp}[{idx}], {u})"}[red])
    return tmp


@on("ScatterElements")
def _scatter_elements(n: Node) -> str:
    red = n.attr_str("reduction", "none", ("none", "add"))
    if n.axis():
        raise _Unsupported("ScatterElements along an axis other than 0")
    tmp = _scatter_copy(n)
    n.line(f"np.add.at({tmp}, {n.x(1)}, {n.x(2)})" if red == "add" else f"{tmp}[{n.x(1)}] = {n.x(2)}")
    return tmp

