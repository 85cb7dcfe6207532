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
             "Ceil": "np.ceil", "Reciprocal": "np.reciprocal", "Not": "np.logical_not"}
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


def to_source(model: "onnx.ModelProto | str") -> tuple[str, dict[str, Any], list[tuple[str, str, tuple[int, ...]]]]:
    """Python/numpy source of an ONNX model's graph (the ops ``export`` emits), its constants, and its
    inputs as ``(name, dtype, shape)``."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        model = onnx.load(model)
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
    lines = []

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

    def const_of(n: str) -> np.ndarray:
        if n not in consts:
            raise _Unsupported(f"a non-constant {n}")
        return consts[n]

    for node in g.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ins = list(node.input)
        op = node.op_type
        try:
            a = [ref(i) for i in ins if i in names or i in consts] if op not in ("Slice",) else []
            x = a[0] if a else ""
            rank = len(shapes.get(ins[0], ())) if ins else 0
            if op in _NP_BINARY:
                e = f"{a[0]} {_NP_BINARY[op]} {a[1]}"
            elif op in ("Max", "Min") and len(a) == 2:
                e = f"np.{'maximum' if op == 'Max' else 'minimum'}({a[0]}, {a[1]})"
            elif op in _NP_UNARY:
                e = f"{_NP_UNARY[op]}({x})"
            elif op == "Identity":
                e = x
            elif op == "Cast":
                e = f"np.asarray({x}).astype(np.{helper.tensor_dtype_to_np_dtype(attrs['to']).name})"
            elif op == "Reshape":
                e = f"np.reshape({x}, {tuple(int(s) for s in shapes[node.output[0]])})"
            elif op == "Expand":
                e = f"np.broadcast_to({x}, {tuple(shapes[node.output[0]])})"
            elif op == "Transpose":
                e = f"np.transpose({x}, {tuple(int(p) for p in attrs.get('perm', range(rank)[::-1]))})"
            elif op in _REDUCE or op == "ReduceL2":
                axes = tuple(int(i) for i in const_of(ins[1])) if len(ins) > 1 and ins[1] else None
                kd = bool(attrs.get("keepdims", 1))
                if op == "ReduceL2":
                    e = f"np.sqrt(np.sum({x} * {x}, axis={axes}, keepdims={kd}))"
                else:
                    e = f"{_REDUCE[op]}({x}, axis={axes}, keepdims={kd})"
            elif op == "Where":
                e = f"np.where({a[0]}, {a[1]}, {a[2]})"
            elif op == "Slice":
                x = ref(ins[0])
                steps = const_of(ins[4]) if len(ins) > 4 else [1] * len(const_of(ins[1]))
                axes_ = const_of(ins[3]) if len(ins) > 3 else range(len(const_of(ins[1])))
                e = f"{x}[{_slices(const_of(ins[1]), const_of(ins[2]), axes_, steps, rank)}]"
            elif op == "Gather":
                e = f"np.take({x}, {ref(ins[1])}, axis={int(attrs.get('axis', 0))})"
            elif op == "ScatterND" and rank == 1 and shapes.get(ins[1], (0, 0))[-1] == 1:
                idx = ref(ins[1])
                tmp = _ident("scatter", used)
                lines.append(f"    {tmp} = np.array({x}, copy=True)")
                if attrs.get("reduction", b"none") in (b"add", "add"):
                    lines.append(f"    np.add.at({tmp}, {idx}[:, 0], {a[2]})")
                else:
                    lines.append(f"    {tmp}[{idx}[:, 0]] = {a[2]}")
                e = tmp
            elif op == "Einsum":
                e = f"np.einsum({attrs['equation'].decode() if isinstance(attrs['equation'], bytes) else attrs['equation']!r}, {', '.join(a)})"
            elif op in ("Or", "And"):
                e = f"np.logical_{op.lower()}({a[0]}, {a[1]})"
            elif op == "Concat":
                e = f"np.concatenate([{', '.join(a)}], axis={int(attrs['axis'])})"
            elif op == "Unsqueeze":
                e = f"np.expand_dims({x}, {tuple(int(i) for i in const_of(ins[1]))})"
            elif op == "CumSum":
                e = f"np.cumsum({x}, axis={int(const_of(ins[1]))})"
            else:
                raise _Unsupported("no numpy mapping")
        except (_Unsupported, KeyError, IndexError) as err:
            problems.append(f"ONNX {op} node {node.name or node.output[0]}: {err}")
            continue
        out = names[node.output[0]] = _ident(node.output[0], used)
        lines.append(f"    {out} = {e}")
    if problems:
        raise LoadError(g.name, problems)
    outs = [ref(o.name) for o in g.output]
    fname = _ident(g.name or "model", set())
    src = f"def {fname}({', '.join(n for n, _, _ in inputs)}):\n" + "\n".join(lines) + \
        f"\n    return {', '.join(outs)}{',' if len(outs) == 1 and False else ''}\n"
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
