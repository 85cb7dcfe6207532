"""Import: an ONNX model (the op set ``export`` emits) -> numpy source -> irad Graph.

A model file is untrusted input (DESIGN.md §7): no ONNX name or attribute value is ever spliced
into the generated source.  Names become fresh ASCII identifiers (``_ident``); every attribute a
handler reads is checked against its ONNX type, and ints against the input's rank, before it
is spelled (``_Node.attr_int`` and friends); strings and odd constants enter the function's
namespace as values (``_Node.constant``).  A model that fails a check raises ``LoadError``.
"""
from __future__ import annotations

import keyword
import re
from typing import Any, Callable

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from ..errors import LoadError
from ..ir import Graph
from ..lower import ascii_name, literal
from .ops import _INT64_MIN, _Unsupported

_NP_BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Pow": "**", "MatMul": "@",
              "Equal": "==", "Less": "<", "LessOrEqual": "<=", "Greater": ">", "GreaterOrEqual": ">="}
_NP_UNARY = {"Neg": "np.negative", "Abs": "np.abs", "Tanh": "np.tanh", "Exp": "np.exp", "Log": "np.log",
             "Sqrt": "np.sqrt", "Sin": "np.sin", "Cos": "np.cos", "Sign": "np.sign", "Floor": "np.floor",
             "Ceil": "np.ceil", "Reciprocal": "np.reciprocal", "Not": "np.logical_not", "IsNaN": "np.isnan"}
_REDUCE = {"ReduceSum": "np.sum", "ReduceMean": "np.mean", "ReduceMax": "np.max", "ReduceMin": "np.min",
           "ReduceProd": "np.prod"}
_ATTR_KIND = {AttributeProto.INT: "an int", AttributeProto.INTS: "a list of ints", AttributeProto.STRING: "a string"}
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
                 glob: dict[str, Any]) -> None:
        self.node, self.op = node, node.op_type
        self._attrs = {a.name: a for a in node.attribute}
        self._read: set[str] = set()
        self.ins = list(node.input)
        self._ref, self._consts, self._shapes, self._lines, self._used = ref, consts, shapes, lines, used
        self._glob = glob

    # ---- inputs ---------------------------------------------------------------------------

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
_NODES["Unsqueeze"] = lambda n: f"np.expand_dims({n.x()}, {n.ints(1)})"
_NODES["Gather"] = lambda n: f"np.take({n.x(0)}, {n.x(1)}, axis={n.axis()})"
_NODES["GatherElements"] = lambda n: f"np.take_along_axis({n.x(0)}, {n.x(1)}, axis={n.axis()})"
_NODES["Range"] = lambda n: f"np.arange({n.x(0)}, {n.x(1)}, {n.x(2)})"
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


@_on(*_REDUCE, "ReduceL1", "ReduceL2")
def _reduce(n: _Node) -> str:
    if n.attr_flag("noop_with_empty_axes", 0):
        raise _Unsupported("noop_with_empty_axes")
    axes = n.ints(1) if n.has(1) else None
    kd, x = n.attr_flag("keepdims", 1), n.x()
    if n.op == "ReduceL2":
        return f"np.sqrt(np.sum({x} * {x}, axis={axes}, keepdims={kd}))"
    if n.op == "ReduceL1":
        return f"np.sum(np.abs({x}), axis={axes}, keepdims={kd})"
    return f"{_REDUCE[n.op]}({x}, axis={axes}, keepdims={kd})"


@_on("Slice")
def _slice(n: _Node) -> str:
    starts = n.ints(1)
    steps = n.ints(4) if n.has(4) else (1,) * len(starts)
    axes = n.ints(3) if n.has(3) else tuple(range(len(starts)))
    return f"{n.x()}[{_slices(starts, n.ints(2), axes, steps, n.rank())}]"


@_on("CumSum", "CumProd")
def _cumulative(n: _Node) -> str:
    if n.attr_flag("exclusive", 0) or n.attr_flag("reverse", 0):
        raise _Unsupported("exclusive/reverse")
    ax, r = n.int1(1), n.rank()
    if not -r <= ax < r:
        raise _Unsupported(f"axis {ax} is out of range for a rank-{r} input")
    return f"np.{n.op.lower()}({n.x()}, axis={ax})"


@_on("IsInf")
def _isinf(n: _Node) -> str:
    if not (n.attr_flag("detect_positive", 1) and n.attr_flag("detect_negative", 1)):
        raise _Unsupported("one-signed IsInf")
    return f"np.isinf({n.x()})"


@_on("ArgMax", "ArgMin")
def _argext(n: _Node) -> str:
    if n.attr_flag("select_last_index", 0):
        raise _Unsupported("select_last_index")
    return f"np.{n.op.lower()}({n.x()}, axis={n.axis()}, keepdims={n.attr_flag('keepdims', 1)})"


@_on("TopK")
def _topk(n: _Node) -> list[str]:
    """An ascending sort (``largest=0, sorted=1``): ties by index, numpy's stable sort."""
    if n.attr_flag("largest", 1) or not n.attr_flag("sorted", 1):
        raise _Unsupported("TopK other than an ascending sort")
    ax, k = n.axis(-1), n.int1(1)
    idx = n.tmp("order")
    n.line(f"{idx} = np.argsort({n.x()}, axis={ax}, kind='stable')")
    if k != n.shape()[ax]:
        n.line(f"{idx} = {idx}[{_slices([0], [k], [ax], [1], n.rank())}]")
    return [f"np.take_along_axis({n.x()}, {idx}, axis={ax})", idx]


_PAD_MODES = ("constant", "edge", "reflect", "wrap")


@_on("Pad")
def _pad(n: _Node) -> str:
    pads, mode = np.array(n.ints(1), dtype=np.int64), n.attr_str("mode", "constant", _PAD_MODES)
    if n.has(3) or (pads < 0).any() or len(pads) != 2 * n.rank():
        raise _Unsupported(f"Pad(mode={mode}) with axes or negative pads")
    r = len(pads) // 2
    widths = tuple((int(pads[i]), int(pads[i + r])) for i in range(r))
    cv = f", constant_values={n.x(2)}" if mode == "constant" and n.has(2) else ""
    return f"np.pad({n.x()}, {widths}, mode={literal(mode)}{cv})"


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


def _parse(model: "onnx.ModelProto | str | bytes") -> onnx.ModelProto:
    """The model with functions inlined and shapes inferred, or ``LoadError``: a file that does not
    parse or check is refused before any of it is read."""
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
            nodes = list(model.graph.node)  # their Constant nodes become initializers
            consts = [n for n in nodes if n.op_type == "Constant" and [a.name for a in n.attribute] == ["value"]
                      and n.attribute[0].type == AttributeProto.TENSOR]
            for n in consts:
                model.graph.initializer.append(numpy_helper.from_array(
                    numpy_helper.to_array(n.attribute[0].t), n.output[0]))
            del model.graph.node[:]
            model.graph.node.extend(n for n in nodes if not any(n is c for c in consts))
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as err:  # NOTE: untrusted bytes: whatever onnx raises, the model is refused
        raise LoadError(label, [f"{type(err).__name__}: {err}"]) from err


def _problem(node: onnx.NodeProto, why: object) -> str:
    name = node.name or (node.output[0] if node.output else "")
    return f"ONNX {node.op_type[:40]!r} node {name[:80]!r}: {why}"


Inputs = list[tuple[str, str, tuple[int, ...]]]  # (identifier, dtype name, shape) of each model input


def to_source(model: "onnx.ModelProto | str | bytes") -> tuple[str, dict[str, Any], Inputs]:
    """Python/numpy source of an ONNX model's graph (the ops ``export`` emits, one handler each in
    ``_NODES``), its constants, and its inputs as ``(name, dtype, shape)``.  No ONNX name or
    attribute is spliced into the source; a malformed model raises ``LoadError``."""
    model = _parse(model)
    g = model.graph
    used: set[str] = set()
    names: dict[str, str] = {}
    consts: dict[str, np.ndarray] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    problems: list[str] = []
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = tuple(int(d.dim_value) for d in vi.type.tensor_type.shape.dim)
    for t in g.initializer:
        try:
            consts[t.name] = numpy_helper.to_array(t)
        except Exception as err:  # NOTE: untrusted bytes, as in _parse
            problems.append(f"initializer {t.name[:80]!r}: {type(err).__name__}: {err}")
            continue
        shapes[t.name] = consts[t.name].shape
    inputs: Inputs = []
    for vi in g.input:
        if vi.name in consts:
            continue
        names[vi.name] = _ident(vi.name, used)
        try:
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        except (KeyError, TypeError, ValueError):
            dt = np.dtype(object)
        if dt.kind not in "biufc" or vi.name not in shapes:
            problems.append(f"input {vi.name[:80]!r}: not a numeric tensor of static shape")
            continue
        inputs.append((names[vi.name], dt.name, shapes[vi.name]))
    glob: dict[str, Any] = {}
    lines: list[str] = []
    failed: set[str] = set()  # outputs of nodes already reported

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
            raise KeyError(f"its input {n[:80]!r} comes from a node reported above")
        raise KeyError(f"no value named {n[:80]!r}")

    for node in g.node:
        n = _Node(node, ref, consts, shapes, lines, used, glob)
        try:
            if node.domain not in ("", "ai.onnx"):
                raise _Unsupported(f"an op of domain {node.domain[:40]!r}")
            handler = _NODES.get(node.op_type)
            if handler is None:
                raise _Unsupported("no numpy mapping")
            exprs = handler(n)
            if n.unread():
                raise _Unsupported(f"attributes irad does not read: {', '.join(a[:40] for a in n.unread())}")
        except (_Unsupported, KeyError, IndexError, ValueError) as err:
            problems.append(_problem(node, err.args[0] if isinstance(err, KeyError) and err.args else err))
            failed.update(node.output)
            continue
        for o, e in zip(node.output, exprs if isinstance(exprs, list) else [exprs]):
            if o:
                out = names[o] = _ident(o, used)
                lines.append(f"    {out} = {e}")
    outs = []
    for o in g.output:
        if o.name in failed:
            continue
        try:
            outs.append(ref(o.name))
        except KeyError as err:
            problems.append(f"output: {err.args[0]}")
    if problems:
        raise LoadError(g.name, problems)
    fname = _ident(g.name or "model", used)
    src = f"def {fname}({', '.join(n for n, _, _ in inputs)}):\n" + "\n".join(lines) + \
        f"\n    return {', '.join(outs)}\n"
    return src, glob, inputs


def load_function(model: "onnx.ModelProto | str") -> Callable[..., Any]:
    """A plain numpy function computing an ONNX model (the op set ``export`` emits); differentiable
    with ``irad.grad`` like any other numpy code.  ``fn.__irad_source__`` is its source."""
    from ..weakcache import compile_source

    src, glob, _ = to_source(model)
    fname = src.split("(", 1)[0][4:]
    ns: dict[str, Any] = {"np": np, **glob}
    exec(compile_source(src, f"onnx {fname}"), ns)  # in linecache while the function lives
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
