"""Import: an ONNX model (the op set ``export`` emits) -> numpy source -> irad Graph.

A model file is untrusted input (DESIGN.md §7): no ONNX name or attribute value is ever spliced
into the generated source.  Names become fresh ASCII identifiers (``_ident``); every attribute a
handler reads is checked against its ONNX type, and ints against the input's rank, before it
is spelled (``_Node.attr_int`` and friends); strings and odd constants enter the function's
namespace as values (``_Node.constant``).  A model that fails a check raises ``LoadError``.
"""
from __future__ import annotations

import keyword
import math
import operator
import re
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from ..errors import LoadError
from ..ir import Graph
from ..lower import ascii_name, literal
from .ops import _INT64_MIN, _Unsupported

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
_ATTR_KIND = {AttributeProto.INT: "an int", AttributeProto.INTS: "a list of ints", AttributeProto.STRING: "a string",
              AttributeProto.FLOAT: "a float", AttributeProto.TENSOR: "a tensor"}
_EINSUM = re.compile(r"[A-Za-z.,\- >]*\Z")  # the characters of an einsum equation


def _ident(name: str, used: set[str]) -> str:
    """A fresh ASCII identifier for an ONNX name (user text: only a hint, never spliced)."""
    base = name if name.isidentifier() and name.isascii() else \
        re.sub(r"__+", "_", re.sub(r"[^A-Za-z0-9_]", "_", ascii_name(name)))[:40].strip("_") or "v"
    if base[0].isdigit() or base.startswith("__"):
        base = "v_" + base
    if keyword.iskeyword(base):
        base += "_"
    nm, k = base, 1
    while nm in used or nm in ("np", "self"):
        nm, k = f"{base}_{k}", k + 1
    used.add(nm)
    return nm


def _to_array(t: onnx.TensorProto, what: str) -> np.ndarray:
    """A tensor of the file as a numeric numpy array, or ``_Unsupported``."""
    try:
        a = numpy_helper.to_array(t)
    except Exception as err:  # NOTE: untrusted bytes: whatever onnx raises, the tensor is refused
        raise _Unsupported(f"{what}: {type(err).__name__}: {err}") from None
    if a.dtype.kind not in "biuf" or getattr(np, a.dtype.name, None) is not a.dtype.type:
        raise _Unsupported(f"{what}: a tensor of type {a.dtype}")
    return a


def _slices(starts: Any, ends: Any, axes: Any, steps: Any, rank: int) -> str:
    parts = [":"] * rank
    for s0, s1, ax, st in zip(starts, ends, axes, steps):
        if not -rank <= ax < rank or st == 0:
            raise _Unsupported(f"a slice of axis {ax} with step {st} of a rank-{rank} tensor")
        s1 = None if (st < 0 and s1 <= _INT64_MIN + 1) or s1 >= 2 ** 62 else int(s1)
        parts[int(ax) % rank] = f"{int(s0)}:{'' if s1 is None else s1}:{int(st)}"
    return ", ".join(parts) + ("," if rank == 1 else "")


class _Node:
    """One ONNX node as a handler of ``_NODES`` sees it: its inputs as numpy expressions, constant
    inputs as arrays, static shapes, checked attributes; ``line`` adds a statement before its
    assignment, ``constant`` a value to the function's namespace.  Every attribute the node
    carries must be read (``unread``): one irad ignored would change the meaning silently."""

    def __init__(self, node: onnx.NodeProto, ref: Callable[[str], str], consts: dict[str, np.ndarray],
                 shapes: dict[str, tuple[int, ...]], lines: list[str], used: set[str],
                 glob: dict[str, Any], opset: int, dtypes: dict[str, np.dtype]) -> None:
        self.node, self.op, self.opset = node, node.op_type, opset
        self._attrs = {a.name: a for a in node.attribute}
        self._read: set[str] = set()
        self.ins = list(node.input)
        self._ref, self._consts, self._shapes, self._lines, self._used = ref, consts, shapes, lines, used
        self._glob, self._dtypes = glob, dtypes
        self.dynamic = False  # whether the expressions read an input that is not a constant

    # ---- inputs ---------------------------------------------------------------------------

    def has(self, k: int) -> bool:
        return len(self.ins) > k and bool(self.ins[k])

    def x(self, k: int = 0) -> str:
        """Input ``k`` as a numpy expression."""
        if not self.has(k):
            raise _Unsupported(f"input {k} missing")
        if self.ins[k] not in self._consts:
            self.dynamic = True
        return self._ref(self.ins[k])

    def const(self, k: int) -> np.ndarray:
        if not self.has(k) or self.ins[k] not in self._consts:
            raise _Unsupported(f"input {k} is not a constant")
        return self._consts[self.ins[k]]

    def ints(self, k: int) -> tuple[int, ...]:
        """Constant input ``k`` as Python ints (an index, axis or count is an integer tensor)."""
        c = self.const(k)
        if c.dtype.kind not in "iu":
            raise _Unsupported(f"input {k} must be an integer tensor, not {c.dtype}")
        return tuple(int(i) for i in c.reshape(-1))

    def int1(self, k: int) -> int:
        """Constant input ``k``: one integer."""
        v = self.ints(k)
        if len(v) != 1:
            raise _Unsupported(f"input {k} must hold one integer, not {len(v)}")
        return v[0]

    def dtype(self, k: int = 0) -> np.dtype:
        """The element type of input ``k`` (from the model's declarations and shape inference)."""
        if not self.has(k) or self.ins[k] not in self._dtypes:
            raise _Unsupported(f"the type of input {k} is unknown")
        return self._dtypes[self.ins[k]]

    def shape(self, k: int = 0) -> tuple[int, ...]:
        return self._shapes.get(self.ins[k], ()) if self.has(k) else ()

    def rank(self, k: int = 0) -> int:
        if not self.has(k) or self.ins[k] not in self._shapes:
            raise _Unsupported(f"the rank of input {k} is unknown")
        return len(self._shapes[self.ins[k]])

    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        if self.node.output[k] not in self._shapes:
            raise _Unsupported(f"the shape of output {k} is unknown")
        return self._shapes[self.node.output[k]]

    # ---- attributes: each read checks its ONNX type ---------------------------------------

    def _attr(self, name: str, kind: int) -> AttributeProto | None:
        self._read.add(name)
        a = self._attrs.get(name)
        if a is not None and a.type != kind:
            kinds = {v: k for k, v in AttributeProto.AttributeType.items()}
            raise _Unsupported(f"attribute {name} must be {_ATTR_KIND[kind]}, not {kinds.get(a.type, a.type)}")
        return a

    def attr_int(self, name: str, default: int | None = None) -> int:
        """An INT attribute (``default`` None: it is required)."""
        a = self._attr(name, AttributeProto.INT)
        if a is None:
            if default is None:
                raise _Unsupported(f"attribute {name} missing")
            return default
        return int(a.i)

    def attr_flag(self, name: str, default: int) -> bool:
        v = self.attr_int(name, default)
        if v not in (0, 1):
            raise _Unsupported(f"attribute {name} must be 0 or 1, not {v}")
        return bool(v)

    def attr_float(self, name: str, default: float | None = None) -> float:
        """A FLOAT attribute, finite (``default`` None: it is required)."""
        a = self._attr(name, AttributeProto.FLOAT)
        if a is None:
            if default is None:
                raise _Unsupported(f"attribute {name} missing")
            return default
        if not math.isfinite(a.f):
            raise _Unsupported(f"attribute {name} = {a.f} is not finite")
        return float(a.f)

    def attr_tensor(self, name: str) -> np.ndarray | None:
        a = self._attr(name, AttributeProto.TENSOR)
        return None if a is None else _to_array(a.t, name)

    def axes(self, name: str, k: int, since: int) -> tuple[int, ...] | None:
        """Reduction axes: the attribute ``name`` before opset ``since``, input ``k`` from it on;
        each in ``[-rank, rank)``, made non-negative.  None: no axes given."""
        axes = (self.attr_ints(name) if self.opset < since else
                (self.ints(k) if self.has(k) else None))
        if axes is None:
            return None
        r = self.rank()
        if any(not -r <= a < r for a in axes) or len({a % r for a in axes}) != len(axes):
            raise _Unsupported(f"axes {axes[:8]} are out of range or repeated for a rank-{r} input")
        return tuple(a % r for a in axes)

    def attr_ints(self, name: str) -> tuple[int, ...] | None:
        a = self._attr(name, AttributeProto.INTS)
        return None if a is None else tuple(int(i) for i in a.ints)

    def attr_str(self, name: str, default: str | None, choices: tuple[str, ...] | None = None) -> str:
        """A STRING attribute; with ``choices`` it must be one of them."""
        a = self._attr(name, AttributeProto.STRING)
        if a is None:
            if default is None:
                raise _Unsupported(f"attribute {name} missing")
            return default
        try:
            v = a.s.decode("utf-8")
        except UnicodeDecodeError:
            raise _Unsupported(f"attribute {name} is not UTF-8 text") from None
        if choices is not None and v not in choices:
            raise _Unsupported(f"attribute {name} must be one of {', '.join(choices)}, not {v[:40]!r}")
        return v

    def axis(self, default: int | None = 0, k: int = 0) -> int:
        """The ``axis`` attribute: an int in ``[-rank, rank)`` of input ``k``, made non-negative."""
        ax, r = self.attr_int("axis", default), self.rank(k)
        if not -r <= ax < r:
            raise _Unsupported(f"attribute axis = {ax} is out of range for a rank-{r} input")
        return ax % r

    def given(self, name: str) -> bool:
        return name in self._attrs

    def unread(self) -> list[str]:
        return sorted(set(self._attrs) - self._read)

    # ---- output ---------------------------------------------------------------------------

    def tmp(self, base: str) -> str:
        return _ident(base, self._used)

    def constant(self, value: Any, hint: str) -> str:
        """``value`` as a name in the function's namespace (a value never becomes source)."""
        name = _ident(hint, self._used)
        self._glob[name] = value
        return name

    def line(self, text: str) -> None:
        self._lines.append(f"    {text}")


Handler = Callable[[_Node], "str | list[str]"]  # the expression of each output
_NODES: dict[str, Handler] = {}


def _on(*op_types: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for t in op_types:
            _NODES[t] = fn
        return fn
    return deco


for _op, _sym in _NP_BINARY.items():
    _NODES[_op] = lambda n, s=_sym: f"{n.x(0)} {s} {n.x(1)}"
for _op, _fn in _NP_UNARY.items():
    _NODES[_op] = lambda n, f=_fn: f"{f}({n.x()})"


def _activation(template: str, **defaults: float) -> Handler:
    """An elementwise op as a template over its input ``{x}`` and float attributes (finite
    numbers, checked by ``attr_float``, the only values spelled into the source)."""
    def h(n: _Node) -> str:
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
    _NODES[_op] = _activation(_template, **_defaults)


def _fold(fn: str) -> Handler:
    """A variadic elementwise node (``Max(a, b, c)``) as nested binary calls."""
    def h(n: _Node) -> str:
        e = n.x(0)
        for k in range(1, len(n.ins)):
            e = f"{fn}({e}, {n.x(k)})"
        return e
    return h


for _op, _fn in [("Max", "np.maximum"), ("Min", "np.minimum"), ("Or", "np.logical_or"), ("And", "np.logical_and"),
                 ("Xor", "np.logical_xor")]:
    _NODES[_op] = _fold(_fn)


def _all_inputs(n: _Node) -> str:
    return ", ".join(n.x(k) for k in range(len(n.ins)))


_NODES["Identity"] = lambda n: n.x()
_NODES["Expand"] = lambda n: f"np.broadcast_to({n.x()}, {n.out_shape()})"
_NODES["Where"] = lambda n: f"np.where({n.x(0)}, {n.x(1)}, {n.x(2)})"
_NODES["Concat"] = lambda n: f"np.concatenate([{_all_inputs(n)}], axis={n.axis(None)})"
_NODES["Gather"] = lambda n: f"np.take({n.x(0)}, {n.x(1)}, axis={n.axis()})"
_NODES["GatherElements"] = lambda n: f"np.take_along_axis({n.x(0)}, {n.x(1)}, axis={n.axis()})"
_NODES["Range"] = lambda n: f"np.arange({n.x(0)}, {n.x(1)}, {n.x(2)}, dtype=np.{n.dtype().name})"
_NODES["Tile"] = lambda n: f"np.tile({n.x()}, {n.ints(1)})"
_NODES["Compress"] = lambda n: f"np.compress({n.x(1)}, {n.x(0)}, axis={n.axis(None) if n.given('axis') else None})"
_NODES["Trilu"] = lambda n: (f"np.{'triu' if n.attr_flag('upper', 1) else 'tril'}({n.x()}, "
                             f"{n.int1(1) if n.has(1) else 0})")


@_on("Reshape")
def _reshape(n: _Node) -> str:
    n.attr_flag("allowzero", 0)  # the static output shape already says what it did
    return f"np.reshape({n.x()}, {n.out_shape()})"


@_on("Cast")
def _cast(n: _Node) -> str:
    n.attr_flag("saturate", 1)  # float8 targets only, which are refused below
    to = n.attr_int("to")
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        raise _Unsupported(f"attribute to = {to} is not a tensor type") from None
    if dt.kind not in "biufc" or getattr(np, dt.name, None) is not dt.type:
        raise _Unsupported(f"a cast to {dt}")
    return f"np.asarray({n.x()}).astype(np.{dt.name})"


@_on("Einsum")
def _einsum(n: _Node) -> str:
    eq = n.attr_str("equation", None)
    if not _EINSUM.match(eq):
        raise _Unsupported(f"attribute equation {eq[:40]!r} is not an einsum equation")
    return f"np.einsum({n.constant(eq, 'equation')}, {_all_inputs(n)})"


@_on("Transpose")
def _transpose(n: _Node) -> str:
    r = n.rank()
    perm = n.attr_ints("perm")
    perm = tuple(range(r))[::-1] if perm is None else perm
    if sorted(perm) != list(range(r)):
        raise _Unsupported(f"attribute perm {perm} is not a permutation of {r} axes")
    return f"np.transpose({n.x()}, {perm})"


_REDUCE_ALSO = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


@_on(*_REDUCE, *_REDUCE_ALSO)
def _reduce(n: _Node) -> str:
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
        big = np.inf if dt.kind == "f" else np.iinfo(dt).max if dt.kind in "iu" else True
        fill = n.constant(np.array(big if n.op == "ReduceMin" else -big if dt.kind != "b" else False, dt), "identity")
        return f"np.full({n.out_shape()}, {fill})"
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


@_on("Slice")
def _slice(n: _Node) -> str:
    starts = n.ints(1)
    steps = n.ints(4) if n.has(4) else (1,) * len(starts)
    axes = n.ints(3) if n.has(3) else tuple(range(len(starts)))
    return f"{n.x()}[{_slices(starts, n.ints(2), axes, steps, n.rank())}]"


def _along(rank: int, ax: int, part: str) -> str:
    """An index taking ``part`` (a slice's text) of axis ``ax``."""
    return ", ".join([":"] * ax + [part]) + ("," if rank == 1 else "")


@_on("CumSum", "CumProd")
def _cumulative(n: _Node) -> str:
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


@_on("ArgMax", "ArgMin")
def _argext(n: _Node) -> str:
    ax, kd = n.axis(), n.attr_flag("keepdims", 1)
    if n.attr_flag("select_last_index", 0):
        return f"{n.shape()[ax] - 1} - np.{n.op.lower()}(np.flip({n.x()}, axis={ax}), axis={ax}, keepdims={kd})"
    return f"np.{n.op.lower()}({n.x()}, axis={ax}, keepdims={kd})"


@_on("TopK")
def _topk(n: _Node) -> list[str]:
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
    flip = ("-" if n.dtype().kind == "f" else "~") if largest else ""
    n.line(f"{idx} = np.argsort({flip}{n.x()}, axis={ax}, kind='stable')")
    if k != n.shape()[ax]:
        n.line(f"{idx} = {idx}[{_slices([0], [k], [ax], [1], n.rank())}]")
    return [f"np.take_along_axis({n.x()}, {idx}, axis={ax})", idx]


@_on("IsInf")
def _isinf(n: _Node) -> str:
    pos, neg = n.attr_flag("detect_positive", 1), n.attr_flag("detect_negative", 1)
    fn = {(1, 1): "np.isinf", (1, 0): "np.isposinf", (0, 1): "np.isneginf"}.get((pos, neg))
    return f"{fn}({n.x()})" if fn else f"np.zeros({n.shape()}, dtype=np.bool_)"


def _variadic(n: _Node, op: str) -> str:
    return f" {op} ".join(n.x(k) for k in range(len(n.ins)))


_NODES["Sum"] = lambda n: _variadic(n, "+")
_NODES["PRelu"] = lambda n: f"np.where({n.x(0)} < 0, {n.x(1)} * {n.x(0)}, {n.x(0)})"  # slope broadcasts to x
_NODES["Mean"] = lambda n: f"({_variadic(n, '+')}) / {len(n.ins)}"


@_on("Div")
def _div(n: _Node) -> str:
    """Integer division truncates toward zero in ONNX (numpy's ``//`` floors)."""
    a, b = n.x(0), n.x(1)
    if n.dtype().kind in "iu":
        return f"(np.abs({a}) // np.abs({b})) * (np.sign({a}) * np.sign({b}))"
    return f"{a} / {b}"


@_on("Pow")
def _pow(n: _Node) -> str:
    """The only binary op whose operands may differ in type; the result has the base's."""
    dt = n.dtype(0)
    if n.dtype(1) != dt:
        return f"{n.x(0)} ** np.asarray({n.x(1)}, dtype=np.{dt.name})"
    return f"{n.x(0)} ** {n.x(1)}"


@_on("Mod")
def _mod(n: _Node) -> str:
    return f"np.{'fmod' if n.attr_flag('fmod', 0) else 'mod'}({n.x(0)}, {n.x(1)})"


@_on("Erf", "Gelu")
def _erf(n: _Node) -> str:
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


@_on("Clip")
def _clip(n: _Node) -> str:
    """Bounds are optional inputs from opset 11 (attributes before)."""
    x = n.x()
    if n.opset < 11:
        lo, hi = (repr(n.attr_float(k, d)) for k, d in (("min", -math.inf), ("max", math.inf)))
        lo, hi = (None if v in ("inf", "-inf") else v for v in (lo, hi))
    else:
        lo, hi = (n.x(k) if n.has(k) else None for k in (1, 2))
    if lo is not None and hi is not None:
        return f"np.clip({x}, {lo}, {hi})"
    return f"np.maximum({x}, {lo})" if lo is not None else f"np.minimum({x}, {hi})" if hi is not None else x


@_on("Gemm")
def _gemm(n: _Node) -> str:
    """``alpha * A' @ B' + beta * C`` (C optional, broadcast)."""
    a, b = n.x(0), n.x(1)
    a = f"{a}.T" if n.attr_flag("transA", 0) else a
    b = f"{b}.T" if n.attr_flag("transB", 0) else b
    alpha, beta = n.attr_float("alpha", 1.0), n.attr_float("beta", 1.0)
    out = f"{a} @ {b}" if alpha == 1.0 else f"{alpha!r} * ({a} @ {b})"
    if n.has(2):
        out += f" + {n.x(2)}" if beta == 1.0 else f" + {beta!r} * {n.x(2)}"
    return out


@_on("Softmax", "LogSoftmax")
def _softmax(n: _Node) -> str:
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


@_on("Flatten")
def _flatten(n: _Node) -> str:
    ax, r = n.attr_int("axis", 1), n.rank()
    if not -r <= ax <= r:
        raise _Unsupported(f"attribute axis = {ax} is out of range for a rank-{r} input")
    return f"np.reshape({n.x()}, {n.out_shape()})"


@_on("Squeeze", "Unsqueeze")
def _squeeze(n: _Node) -> str:
    """Axes an attribute before opset 13, an input from then on; the result shape is inferred."""
    if n.opset < 13:
        n.attr_ints("axes")
    return f"np.reshape({n.x()}, {n.out_shape()})"


@_on("Split")
def _split(n: _Node) -> list[str]:
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


@_on("Shape")
def _shape(n: _Node) -> str:
    """A constant: shapes are static (``start``/``end`` slice it, from opset 15)."""
    start, end = n.attr_int("start", 0), n.attr_int("end", 2 ** 62)
    return f"np.array({tuple(n.shape()[start:end])}, dtype=np.int64)"


_NODES["Size"] = lambda n: f"np.int64({int(np.prod(n.shape()))})"


@_on("CastLike")
def _cast_like(n: _Node) -> str:
    n.attr_flag("saturate", 1)  # float8 targets only, which dtype() does not give
    return f"np.asarray({n.x()}).astype(np.{n.dtype(1).name})"


@_on("ConstantOfShape")
def _constant_of_shape(n: _Node) -> str:
    value = n.attr_tensor("value")
    value = np.zeros(1, np.float32) if value is None else value
    shape = n.ints(0)
    if value.size != 1 or min(shape, default=0) < 0:
        raise _Unsupported(f"a fill value of {value.size} elements, or a negative size in {shape[:8]}")
    return f"np.full({shape}, {n.constant(value.reshape(()), 'fill')})"


@_on("Dropout")
def _dropout(n: _Node) -> list[str]:
    """Inference only (the identity, an all-true mask): a training-mode Dropout is random."""
    n.attr_int("seed", 0)
    if n.opset < 12:
        n.attr_float("ratio", 0.5)
    if n.has(2) and (n.ins[2] not in n._consts or n.const(2).dtype != np.bool_ or n.const(2).any()):
        raise _Unsupported("Dropout in training mode or with training_mode a model input "
                           "(irad reads inference-mode Dropout only: training mode is random)")
    return [n.x(), f"np.ones({n.shape()}, dtype=np.bool_)"]


_PAD_MODES = ("constant", "edge", "reflect", "wrap")


@_on("Pad")
def _pad(n: _Node) -> str:
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
    if mode == "constant" and n.has(2) and n.ins[2] not in n._consts:  # a traced fill, differentiated
        mask = n.constant(np.pad(np.zeros(n.shape(), np.bool_), widths, constant_values=True), "padded")
        out = f"np.where({mask}, {n.x(2)}, np.pad({n.x()}, {widths}))"
    else:
        cv = f", constant_values={n.x(2)}" if mode == "constant" and n.has(2) else ""
        out = f"np.pad({n.x()}, {widths}, mode={literal(mode)}{cv})"
    if min(begin + end) >= 0:
        return out
    full = [s + w0 + w1 for s, (w0, w1) in zip(n.shape(), widths)]
    crop = [f"{max(-b, 0)}:{f - max(-e, 0)}" for b, e, f in zip(begin, end, full)]
    return f"({out})[{', '.join(crop)}{',' if r == 1 else ''}]"


def _scatter_copy(n: _Node) -> str:
    if len(n.shape()) != 1:
        raise _Unsupported("a scatter into a tensor of rank > 1")
    tmp = n.tmp("scatter")
    n.line(f"{tmp} = np.array({n.x()}, copy=True)")
    return tmp


@_on("ScatterND")
def _scatter_nd(n: _Node) -> str:
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


@_on("ScatterElements")
def _scatter_elements(n: _Node) -> str:
    red = n.attr_str("reduction", "none", ("none", "add"))
    if n.axis():
        raise _Unsupported("ScatterElements along an axis other than 0")
    tmp = _scatter_copy(n)
    n.line(f"np.add.at({tmp}, {n.x(1)}, {n.x(2)})" if red == "add" else f"{tmp}[{n.x(1)}] = {n.x(2)}")
    return tmp


def _parse(model: "onnx.ModelProto | str | bytes", shapes: "dict[str, Sequence[int]] | None" = None
           ) -> onnx.ModelProto:
    """The model with functions inlined, ``shapes`` given to its dynamic inputs and shapes
    inferred, or ``LoadError``: a file that does not parse or check is refused before any of it
    is read."""
    label = str(model) if isinstance(model, str) or hasattr(model, "__fspath__") else \
        model.graph.name if isinstance(model, onnx.ModelProto) else "<model>"
    try:
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        elif isinstance(model, str) or hasattr(model, "__fspath__"):
            model = onnx.load(model)
        if model.functions:  # rules exported as ONNX functions (``export(..., inline=False)``)
            from onnx import inliner
            model = inliner.inline_local_functions(model)
        if shapes:
            model = _fix_shapes(model, shapes)
        # data_prop: shapes computed by Shape/Gather/Concat chains (exporters' reshapes) become static
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except LoadError:
        raise
    except Exception as err:  # NOTE: untrusted bytes: whatever onnx raises, the model is refused
        raise LoadError(label, [f"{type(err).__name__}: {err}"]) from err


def _fix_shapes(model: onnx.ModelProto, shapes: "dict[str, Sequence[int]]") -> onnx.ModelProto:
    """A copy of ``model`` whose inputs named in ``shapes`` have those shapes (a dynamic
    dimension takes any size, a static one must match)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    by_name = {vi.name: vi for vi in m.graph.input}
    problems = [f"shapes names {k[:80]!r}, which is not an input of the model" for k in shapes if k not in by_name]
    for name, shape in shapes.items():
        if name not in by_name:
            continue
        dims = by_name[name].type.tensor_type.shape.dim
        try:
            shape = tuple(operator.index(v) for v in shape)
        except TypeError:
            shape = ()
        if len(shape) != len(dims) or min(shape, default=0) < 0:
            problems.append(f"input {name[:80]!r}: shapes gives {repr(shapes[name])[:80]}, not the shape of a "
                            f"rank-{len(dims)} input (non-negative ints)")
            continue
        for d, v in zip(dims, shape):
            if d.HasField("dim_value") and d.dim_value != v:
                problems.append(f"input {name[:80]!r}: shape {shape}, but the model fixes it to "
                                f"{tuple(x.dim_value if x.HasField('dim_value') else None for x in dims)}")
                break
            d.dim_value = v  # clears dim_param (a oneof)
    if problems:
        raise LoadError(model.graph.name, problems)
    return m


def _problem(node: onnx.NodeProto, why: object) -> str:
    name = node.name or (node.output[0] if node.output else "")
    return f"ONNX {node.op_type[:40]!r} node {name[:80]!r}: {why}"


Inputs = list[tuple[str, str, tuple[int, ...]]]  # (identifier, dtype name, shape) of each model input
FOLD_LIMIT = 1 << 16  # the most elements a node's outputs may have to be computed at load time


class Imported(NamedTuple):
    """What ``to_source`` reads from a model."""
    source: str                 # ``def model(<inputs>[, params]): ...``
    namespace: dict[str, Any]   # the constants the source names (arrays, strings)
    inputs: Inputs              # the model's inputs, as the function's leading parameters
    params: dict[str, np.ndarray]  # with params="inputs": the initial value of each parameter


def _opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


def _constant_node(node: onnx.NodeProto) -> np.ndarray:
    """The value of a ``Constant`` node (one of its ``value*`` attributes)."""
    if len(node.attribute) != 1:
        raise _Unsupported("a Constant node must carry exactly one value attribute")
    a = node.attribute[0]
    kinds = {("value", AttributeProto.TENSOR): lambda: _to_array(a.t, "value"),
             ("value_float", AttributeProto.FLOAT): lambda: np.array(a.f, np.float32),
             ("value_floats", AttributeProto.FLOATS): lambda: np.array(list(a.floats), np.float32),
             ("value_int", AttributeProto.INT): lambda: np.array(a.i, np.int64),
             ("value_ints", AttributeProto.INTS): lambda: np.array(list(a.ints), np.int64)}
    make = kinds.get((a.name, a.type))
    if make is None:
        raise _Unsupported(f"a Constant given by {a.name[:40]!r} (irad reads numeric tensors only)")
    return make()


def to_source(model: "onnx.ModelProto | str | bytes", params: str = "constants",
              shapes: "dict[str, Sequence[int]] | None" = None) -> Imported:
    """Python/numpy source of an ONNX model's graph (one handler per op type in ``_NODES``).

    ``params="constants"`` bakes the initializers in; ``"inputs"`` makes every float initializer of
    rank >= 1 an entry of a trailing ``params`` dict argument (keyed by its ONNX name), so that
    it can be differentiated.  ``shapes`` gives inputs of dynamic shape (a batch size) the shape to
    load them at: the function is for one shape.  Nodes whose inputs are all constants (shape arithmetic, mostly)
    are computed here, once.  No ONNX name or attribute is spliced into the source; a malformed
    model, or one with ops irad cannot read, raises ``LoadError`` listing every problem."""
    if params not in ("constants", "inputs"):
        raise ValueError(f"params must be 'constants' or 'inputs', not {params!r}")
    model = _parse(model, shapes)
    g, opset = model.graph, _opset(model)
    used: set[str] = {"params"} if params == "inputs" else set()
    names: dict[str, str] = {}
    consts: dict[str, np.ndarray] = {}
    sizes: dict[str, tuple[int, ...]] = {}  # the static shape of each value
    dtypes: dict[str, np.dtype] = {}
    problems: list[str] = []
    glob: dict[str, Any] = {}
    lines: list[str] = []
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            sizes[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
        try:
            dtypes[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            pass
    values: dict[str, np.ndarray] = {}
    for t in g.initializer:
        try:
            c = _to_array(t, f"initializer {t.name[:80]!r}")
        except _Unsupported as err:
            problems.append(str(err))
            continue
        sizes[t.name], dtypes[t.name] = c.shape, c.dtype
        if params == "inputs" and c.dtype.kind == "f" and c.ndim >= 1:
            names[t.name] = _ident(t.name, used)
            values[t.name] = c.copy()
            key = _ident("key_" + t.name, used)
            glob[key] = t.name
            lines.append(f"    {names[t.name]} = params[{key}]")
        else:
            consts[t.name] = c
    inputs: Inputs = []
    failed: set[str] = set()  # values already reported: inputs refused, outputs of nodes refused
    for vi in g.input:
        if vi.name in consts or vi.name in values:
            continue
        dt = dtypes.get(vi.name, np.dtype(object))
        if dt.kind not in "biuf":
            problems.append(f"input {vi.name[:80]!r}: not a real or integer tensor")
            failed.add(vi.name)
            continue
        if vi.name not in sizes:
            dims = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param[:20] or None
                         for d in vi.type.tensor_type.shape.dim)
            problems.append(f"input {vi.name[:80]!r} has the dynamic shape {dims}: give it a shape with "
                            f"load_function(..., shapes={{{vi.name[:80]!r}: (...)}})")
            failed.add(vi.name)
            continue
        names[vi.name] = _ident(vi.name, used)
        inputs.append((names[vi.name], dt.name, sizes[vi.name]))

    def ref(n: str) -> str:
        if n in names:
            return names[n]
        if n in consts:
            c = consts[n]
            text = literal(c.item()) if c.ndim == 0 and c.dtype.kind in "biuf" else None
            if text is not None and c.dtype == np.bool_:
                return text
            if text is not None and getattr(np, c.dtype.name, None) is c.dtype.type:
                return f"np.{c.dtype.name}({text})"
            names[n] = _ident("c_" + n, used)
            glob[names[n]] = c
            return names[n]
        if n in failed:
            raise KeyError(f"its input {n[:80]!r} is a value reported above")
        raise KeyError(f"no value named {n[:80]!r}")

    for node in g.node:
        mine: list[str] = []
        n = _Node(node, ref, consts, sizes, mine, used, glob, opset, dtypes)
        try:
            if node.domain not in ("", "ai.onnx"):
                raise _Unsupported(f"an op of domain {node.domain[:40]!r}")
            if node.op_type == "Constant":
                consts[node.output[0]] = _constant_node(node)
                continue
            handler = _NODES.get(node.op_type)
            if handler is None:
                raise _Unsupported("no numpy mapping")
            exprs = handler(n)
            if n.unread():
                raise _Unsupported(f"attributes irad does not read: {', '.join(a[:40] for a in n.unread())}")
            exprs = exprs if isinstance(exprs, list) else [exprs]
            outs = [(o, e) for o, e in zip(node.output, exprs) if o]
            small = all(o in sizes and math.prod(sizes[o]) <= FOLD_LIMIT for o, _ in outs)
            if not n.dynamic and small:  # sizes known before computing: a file cannot make irad allocate
                _compute_now(outs, mine, glob, consts)
                continue
        except (_Unsupported, KeyError, IndexError, ValueError) as err:
            problems.append(_problem(node, err.args[0] if isinstance(err, KeyError) and err.args else err))
            failed.update(node.output)
            continue
        lines.extend(mine)
        for o, e in outs:
            out = names[o] = _ident(o, used)
            lines.append(f"    {out} = {e}")
    results = []
    for o in g.output:
        if o.name in failed:
            continue
        try:
            results.append(ref(o.name))
        except KeyError as err:
            problems.append(f"output: {err.args[0]}")
    if problems:
        raise LoadError(g.name, problems)
    fname = _ident(g.name or "model", used)
    args = [n for n, _, _ in inputs] + (["params"] if params == "inputs" else [])
    src = f"def {fname}({', '.join(args)}):\n" + "\n".join(lines) + f"\n    return {', '.join(results)}\n"
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", src))
    return Imported(src, {k: v for k, v in glob.items() if k in words}, inputs, values)


def _compute_now(outs: list[tuple[str, str]], lines: list[str], glob: dict[str, Any],
                 consts: dict[str, np.ndarray]) -> None:
    """Compute a node of constant inputs now: its statements and expressions are irad's own text,
    which runs as it would when the model runs."""
    ns: dict[str, Any] = {"np": np, **glob}
    try:
        exec("\n".join(ln[4:] for ln in lines), ns)  # NOTE: the handlers' text, no model text
        vals = [np.asarray(eval(e, ns)) for _, e in outs]  # NOTE: as above
    except Exception as err:  # NOTE: what numpy says of the model's constants, reported per node
        raise _Unsupported(f"computing it from its constant inputs fails: {type(err).__name__}: {err}") from None
    for (o, _), v in zip(outs, vals):
        consts[o] = v


def load_function(model: "onnx.ModelProto | str", params: str = "constants",
                  shapes: "dict[str, Sequence[int]] | None" = None) -> Callable[..., Any]:
    """A plain numpy function computing an ONNX model, differentiable with ``irad.grad`` like any
    other numpy code.  ``params="inputs"``: its last argument is a dict of the model's float
    initializers (their values from the file in ``fn.params``), so ``irad.grad(fn, argnums=-1)``
    differentiates the weights.  ``shapes={"x": (32, 4)}`` fixes inputs of dynamic shape.
    ``fn.__irad_source__`` is its source."""
    return _function(to_source(model, params, shapes), params)


def _function(imported: Imported, params: str) -> Callable[..., Any]:
    from ..weakcache import compile_source

    src, glob, _, values = imported
    fname = src.split("(", 1)[0][4:]
    ns: dict[str, Any] = {"np": np, **glob}
    exec(compile_source(src, f"onnx {fname}"), ns)  # in linecache while the function lives
    fn = ns[fname]
    fn.__irad_source__ = src
    if params == "inputs":
        fn.params = values
    return fn  # type: ignore[no-any-return]


def load(model: "onnx.ModelProto | str", params: str = "constants",
         shapes: "dict[str, Sequence[int]] | None" = None) -> Graph:
    """Import an ONNX model as an irad Graph: its numpy form (``load_function``) traced on inputs
    of the declared shapes (and, with ``params="inputs"``, the parameters from the file)."""
    from ..trace import trace

    imported = to_source(model, params, shapes)
    fn = _function(imported, params)
    rng = np.random.default_rng(0)
    examples: list[Any] = [rng.standard_normal(s).astype(dt) if np.dtype(dt).kind == "f" else np.zeros(s, dt)
                           for _, dt, s in imported.inputs]
    if params == "inputs":
        examples.append(imported.params)
    return trace(fn, *examples)


from . import load_nn  # noqa: E402,F401  (registers the neural-network ops in _NODES)
