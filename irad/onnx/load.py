"""Import: an ONNX model (the op set ``export`` emits) -> numpy source -> irad Graph."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir import Graph
from .ops import _INT64_MIN, LoadError, _Unsupported

_NP_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Pow": "**", "MatMul": "@",
              "Equal": "==", "Less": "<", "LessOrEqual": "<=", "Greater": ">", "GreaterOrEqual": ">="}
_NP_UNARY = {"Neg": "np.negative", "Abs": "np.abs", "Tanh": "np.tanh", "Exp": "np.exp", "Log": "np.log",
             "Sqrt": "np.sqrt", "Sin": "np.sin", "Cos": "np.cos", "Sign": "np.sign", "Floor": "np.floor",
             "Ceil": "np.ceil", "Reciprocal": "np.reciprocal", "Not": "np.logical_not", "IsNaN": "np.isnan"}
_REDUCE = {"ReduceSum": "np.sum", "ReduceMean": "np.mean", "ReduceMax": "np.max", "ReduceMin": "np.min",
           "ReduceProd": "np.prod"}


def _ident(name: str, used: set[str]) -> str:
    base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name) or "v"
    if base[0].isdigit():
        base = "v_" + base
    nm, k = base, 1
    while nm in used or nm in ("np", "self"):
        nm, k = f"{base}_{k}", k + 1
    used.add(nm)
    return nm


def _slices(starts: Any, ends: Any, axes: Any, steps: Any, rank: int) -> str:
    parts = [":"] * rank
    for s0, s1, ax, st in zip(starts, ends, axes, steps):
        s1 = None if (st < 0 and s1 <= _INT64_MIN + 1) or s1 >= 2 ** 62 else int(s1)
        parts[int(ax) % rank] = f"{int(s0)}:{'' if s1 is None else s1}:{int(st)}"
    return ", ".join(parts) + ("," if rank == 1 else "")


class _Node:
    """One ONNX node as a handler of ``_NODES`` sees it: its inputs as numpy expressions, constant
    inputs as arrays, static shapes, attributes; ``line`` adds a statement before its assignment."""

    def __init__(self, node: onnx.NodeProto, ref: Callable[[str], str], consts: dict[str, np.ndarray],
                 shapes: dict[str, tuple[int, ...]], lines: list[str], used: set[str]) -> None:
        self.node, self.op = node, node.op_type
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.ins = list(node.input)
        self._ref, self._consts, self._shapes, self._lines, self._used = ref, consts, shapes, lines, used

    def has(self, k: int) -> bool:
        return len(self.ins) > k and bool(self.ins[k])

    def x(self, k: int = 0) -> str:
        """Input ``k`` as a numpy expression."""
        if not self.has(k):
            raise _Unsupported(f"input {k} missing")
        return self._ref(self.ins[k])

    def const(self, k: int) -> np.ndarray:
        if not self.has(k) or self.ins[k] not in self._consts:
            raise _Unsupported(f"input {k} is not a constant")
        return self._consts[self.ins[k]]

    def shape(self, k: int = 0) -> tuple[int, ...]:
        return self._shapes.get(self.ins[k], ()) if self.has(k) else ()

    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        return tuple(int(d) for d in self._shapes[self.node.output[k]])

    def attr(self, name: str, default: Any = None) -> Any:
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v

    def axis(self, default: int = 0) -> int:
        return int(self.attr("axis", default)) % max(len(self.shape()), 1)

    def tmp(self, base: str) -> str:
        return _ident(base, self._used)

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


def _bad(why: str) -> str:
    raise _Unsupported(why)


_NODES["Identity"] = lambda n: n.x()
_NODES["Cast"] = lambda n: f"np.asarray({n.x()}).astype(np.{helper.tensor_dtype_to_np_dtype(n.attr('to')).name})"
_NODES["Reshape"] = lambda n: f"np.reshape({n.x()}, {n.out_shape()})"
_NODES["Expand"] = lambda n: f"np.broadcast_to({n.x()}, {n.out_shape()})"
_NODES["Where"] = lambda n: f"np.where({n.x(0)}, {n.x(1)}, {n.x(2)})"
_NODES["Einsum"] = lambda n: f"np.einsum({n.attr('equation')!r}, {', '.join(n.x(k) for k in range(len(n.ins)))})"
_NODES["Concat"] = lambda n: f"np.concatenate([{', '.join(n.x(k) for k in range(len(n.ins)))}], axis={n.attr('axis')})"
_NODES["Unsqueeze"] = lambda n: f"np.expand_dims({n.x()}, {tuple(int(i) for i in n.const(1))})"
_NODES["Gather"] = lambda n: f"np.take({n.x(0)}, {n.x(1)}, axis={int(n.attr('axis', 0))})"
_NODES["GatherElements"] = lambda n: f"np.take_along_axis({n.x(0)}, {n.x(1)}, axis={n.axis()})"
_NODES["Range"] = lambda n: f"np.arange({n.x(0)}, {n.x(1)}, {n.x(2)})"
_NODES["Tile"] = lambda n: f"np.tile({n.x()}, {tuple(int(r) for r in n.const(1))})"
_NODES["Compress"] = lambda n: f"np.compress({n.x(1)}, {n.x(0)}, axis={n.attr('axis')})"
_NODES["Trilu"] = lambda n: (f"np.{'triu' if n.attr('upper', 1) else 'tril'}({n.x()}, "
                             f"{int(n.const(1)) if n.has(1) else 0})")


@_on("Transpose")
def _transpose(n: _Node) -> str:
    return f"np.transpose({n.x()}, {tuple(int(p) for p in n.attr('perm', range(len(n.shape()))[::-1]))})"


@_on(*_REDUCE, "ReduceL1", "ReduceL2")
def _reduce(n: _Node) -> str:
    if n.attr("noop_with_empty_axes", 0):
        raise _Unsupported("noop_with_empty_axes")
    axes = tuple(int(i) for i in n.const(1)) if n.has(1) else None
    kd, x = bool(n.attr("keepdims", 1)), n.x()
    if n.op == "ReduceL2":
        return f"np.sqrt(np.sum({x} * {x}, axis={axes}, keepdims={kd}))"
    if n.op == "ReduceL1":
        return f"np.sum(np.abs({x}), axis={axes}, keepdims={kd})"
    return f"{_REDUCE[n.op]}({x}, axis={axes}, keepdims={kd})"


@_on("Slice")
def _slice(n: _Node) -> str:
    starts = n.const(1)
    steps = n.const(4) if n.has(4) else [1] * len(starts)
    axes = n.const(3) if n.has(3) else range(len(starts))
    return f"{n.x()}[{_slices(starts, n.const(2), axes, steps, len(n.shape()))}]"


@_on("CumSum", "CumProd")
def _cumulative(n: _Node) -> str:
    if n.attr("exclusive", 0) or n.attr("reverse", 0):
        raise _Unsupported("exclusive/reverse")
    return f"np.{n.op.lower()}({n.x()}, axis={int(n.const(1))})"


@_on("IsInf")
def _isinf(n: _Node) -> str:
    if not (n.attr("detect_positive", 1) and n.attr("detect_negative", 1)):
        raise _Unsupported("one-signed IsInf")
    return f"np.isinf({n.x()})"


@_on("ArgMax", "ArgMin")
def _argext(n: _Node) -> str:
    if n.attr("select_last_index", 0):
        raise _Unsupported("select_last_index")
    return f"np.{n.op.lower()}({n.x()}, axis={n.axis()}, keepdims={bool(n.attr('keepdims', 1))})"


@_on("TopK")
def _topk(n: _Node) -> list[str]:
    """An ascending sort (``largest=0, sorted=1``): ties by index, numpy's stable sort."""
    if n.attr("largest", 1) or not n.attr("sorted", 1):
        raise _Unsupported("TopK other than an ascending sort")
    ax, k = n.axis(-1), int(n.const(1).reshape(-1)[0])
    idx = n.tmp("order")
    n.line(f"{idx} = np.argsort({n.x()}, axis={ax}, kind='stable')")
    if k != n.shape()[ax]:
        n.line(f"{idx} = {idx}[{_slices([0], [k], [ax], [1], len(n.shape()))}]")
    return [f"np.take_along_axis({n.x()}, {idx}, axis={ax})", idx]


@_on("Pad")
def _pad(n: _Node) -> str:
    pads, mode = n.const(1), n.attr("mode", "constant")
    if n.has(3) or (pads < 0).any() or mode not in ("constant", "edge", "reflect", "wrap"):
        raise _Unsupported(f"Pad(mode={mode}) with axes or negative pads")
    r = len(pads) // 2
    widths = tuple((int(pads[i]), int(pads[i + r])) for i in range(r))
    cv = f", constant_values={n.x(2)}" if mode == "constant" and n.has(2) else ""
    return f"np.pad({n.x()}, {widths}, mode={mode!r}{cv})"


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
    red = n.attr("reduction", "none")
    if red == "max":
        upd = n.const(2)
        if (np.diff(upd.reshape(-1)) < 0).any():
            raise _Unsupported("a max-scatter of updates that are not non-decreasing")
    tmp, idx, u = _scatter_copy(n), f"{n.x(1)}[:, 0]", n.x(2)
    n.line({"none": f"{tmp}[{idx}] = {u}", "add": f"np.add.at({tmp}, {idx}, {u})",
            "max": f"{tmp}[{idx}] = np.maximum({tmp}[{idx}], {u})"}.get(red) or _bad(f"reduction {red}"))
    return tmp


@_on("ScatterElements")
def _scatter_elements(n: _Node) -> str:
    if n.attr("reduction", "none") not in ("add", "none") or n.axis():
        raise _Unsupported(f"ScatterElements(reduction={n.attr('reduction')})")
    tmp = _scatter_copy(n)
    n.line(f"np.add.at({tmp}, {n.x(1)}, {n.x(2)})" if n.attr("reduction") == "add" else f"{tmp}[{n.x(1)}] = {n.x(2)}")
    return tmp


def to_source(model: "onnx.ModelProto | str") -> tuple[str, dict[str, Any], list[tuple[str, str, tuple[int, ...]]]]:
    """Python/numpy source of an ONNX model's graph (the ops ``export`` emits, one handler each in
    ``_NODES``), its constants, and its inputs as ``(name, dtype, shape)``."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        model = onnx.load(model)
    if model.functions:  # rules exported as ONNX functions (``export(..., inline=False)``)
        from onnx import inliner
        model = inliner.inline_local_functions(model)
        nodes = list(model.graph.node)  # their Constant nodes become initializers
        consts = [n for n in nodes if n.op_type == "Constant" and [a.name for a in n.attribute] == ["value"]]
        for n in consts:
            model.graph.initializer.append(numpy_helper.from_array(
                numpy_helper.to_array(n.attribute[0].t), n.output[0]))
        del model.graph.node[:]
        model.graph.node.extend(n for n in nodes if not any(n is c for c in consts))
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = model.graph
    used: set[str] = set()
    names: dict[str, str] = {}
    consts: dict[str, np.ndarray] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = tuple(d.dim_value for d in dims)
    for t in g.initializer:
        consts[t.name] = numpy_helper.to_array(t)
        shapes[t.name] = consts[t.name].shape
    init_names = {t.name for t in g.initializer}
    inputs = []
    for vi in g.input:
        if vi.name in init_names:
            continue
        names[vi.name] = _ident(vi.name, used)
        dt = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name
        inputs.append((names[vi.name], dt, shapes[vi.name]))
    glob: dict[str, Any] = {}
    problems: list[str] = []
    lines: list[str] = []

    def ref(n: str) -> str:
        if n in names:
            return names[n]
        if n in consts:
            c = consts[n]
            if c.ndim == 0:
                return f"np.{c.dtype.name}({c.item()!r})" if c.dtype != np.bool_ else repr(bool(c))
            names[n] = _ident("c_" + n, used)
            glob[names[n]] = c
            return names[n]
        raise KeyError(n)

    for node in g.node:
        n = _Node(node, ref, consts, shapes, lines, used)
        try:
            handler = _NODES.get(node.op_type)
            if handler is None:
                raise _Unsupported("no numpy mapping")
            exprs = handler(n)
        except (_Unsupported, KeyError, IndexError) as err:
            problems.append(f"ONNX {node.op_type} node {node.name or node.output[0]}: {err}")
            continue
        for o, e in zip(node.output, exprs if isinstance(exprs, list) else [exprs]):
            if o:
                out = names[o] = _ident(o, used)
                lines.append(f"    {out} = {e}")
    if problems:
        raise LoadError(g.name, problems)
    outs = [ref(o.name) for o in g.output]
    fname = _ident(g.name or "model", set())
    src = f"def {fname}({', '.join(n for n, _, _ in inputs)}):\n" + "\n".join(lines) + \
        f"\n    return {', '.join(outs)}\n"
    return src, glob, inputs


def load_function(model: "onnx.ModelProto | str") -> Callable[..., Any]:
    """A plain numpy function computing an ONNX model (the op set ``export`` emits); differentiable
    with ``irad.grad`` like any other numpy code.  ``fn.__irad_source__`` is its source."""
    import linecache

    src, glob, _ = to_source(model)
    fname = src.split("(", 1)[0][4:]
    filename = f"<onnx {fname}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns: dict[str, Any] = {"np": np, **glob}
    exec(compile(src, filename, "exec"), ns)
    fn = ns[fname]
    fn.__irad_source__ = src
    return fn  # type: ignore[no-any-return]


def load(model: "onnx.ModelProto | str") -> Graph:
    """Import an ONNX model (the op set ``export`` emits) as an irad Graph: its numpy form traced
    on inputs of the declared shapes."""
    from ..trace import trace

    _, _, inputs = to_source(model)
    fn = load_function(model)
    rng = np.random.default_rng(0)
    examples = [rng.standard_normal(s).astype(dt) if np.dtype(dt).kind == "f" else np.zeros(s, dt)
                for _, dt, s in inputs]
    return trace(fn, *examples)
