"""The op table: irad primitive -> ONNX nodes (``OPS``), the node builder, and the export errors.

Each entry of ``OPS`` is ``emit(builder, op, out_name)``; it raises ``_Unsupported`` for an
argument form it does not map, which the exporter reports with the op's source line.
Static shapes come from the IR types, so no entry computes shapes inside the model.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import onnx  # the onnx package (absolute import), not irad.onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import IradError
from ..ir import ArrayT, Const, Op, ScalarT, Type, Var

class ExportError(IradError):
    """A graph holds ops that have no ONNX form; the message lists every one with its source line."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"cannot export {name} to ONNX: {len(problems)} op(s) have no ONNX form:\n{lines}")


class LoadError(IradError):
    """An ONNX model holds nodes ``load`` cannot read back; the message lists every one."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"cannot import ONNX model {name}: {len(problems)} node(s) have no numpy form:\n{lines}")


# the default opset of the installed onnx (onnxruntime 1.32 runs opset 28, onnx 1.23's default)
OPSET = onnx.defs.onnx_opset_version()

_DT = {
    "float64": TensorProto.DOUBLE, "float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
    "int64": TensorProto.INT64, "int32": TensorProto.INT32, "int16": TensorProto.INT16, "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8, "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64, "bool": TensorProto.BOOL,
}
_SCALAR_DT = {"float": "float64", "int": "int64", "bool": "bool"}


class _Unsupported(Exception):
    """Raised by a table entry for an argument form it does not map (an index array, say)."""


def _dtype(t: Type) -> str:
    if isinstance(t, ArrayT):
        if t.dtype not in _DT:
            raise _Unsupported(f"dtype {t.dtype}")
        return t.dtype
    if isinstance(t, ScalarT) and t.kind in _SCALAR_DT:
        return _SCALAR_DT[t.kind]
    raise _Unsupported(f"value of type {t}")


def _shape(t: Type) -> tuple[int, ...]:
    return t.shape if isinstance(t, ArrayT) else ()


class _Builder:
    """Accumulates nodes and initializers; names SSA values."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.names: dict[int, str] = {}
        self.types: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.const_names: dict[Any, str] = {}
        self.k = 0

    def fresh(self, base: str = "t") -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def node(self, op_type: str, inputs: Sequence[str], n_out: int = 1, out: str | None = None,
             **attrs: Any) -> str:
        outs = [out or self.fresh(op_type.lower())] + [self.fresh(op_type.lower()) for _ in range(n_out - 1)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh("n_" + op_type), **attrs))
        return outs[0]

    def array(self, value: Any, dtype: str | None = None) -> str:
        a = np.asarray(value, dtype=dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        name = self.const_names.get(key)
        if name is None:
            name = self.const_names[key] = self.fresh("const")
            self.inits.append(numpy_helper.from_array(a, name))
            self.types[name] = (a.dtype.name, a.shape)
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.array(np.asarray(list(values), dtype=np.int64))

    def atom(self, a: Any) -> tuple[str, str, tuple[int, ...]]:
        """(name, dtype, shape) of an atom."""
        if isinstance(a, Var):
            name = self.names[a.id]
            return (name, *self.types[name])
        if isinstance(a, Const):
            v = a.value
            if isinstance(v, (bool, int, float, np.ndarray, np.generic)) and not isinstance(v, complex):
                arr = np.asarray(v)
                if arr.dtype.name not in _DT:
                    raise _Unsupported(f"constant of dtype {arr.dtype}")
                name = self.array(arr)
                return name, arr.dtype.name, arr.shape
        raise _Unsupported(f"argument {a}")

    def meta(self, a: Any) -> tuple[str, tuple[int, ...]]:
        """(dtype, shape) of an atom, without adding anything to the model."""
        if isinstance(a, Var):
            return self.types[self.names[a.id]]
        if isinstance(a, Const) and isinstance(a.value, (bool, int, float, np.ndarray, np.generic)):
            arr = np.asarray(a.value)
            return arr.dtype.name, arr.shape
        raise _Unsupported(f"argument {a}")

    def cast(self, a: Any, dtype: str) -> str:
        if isinstance(a, Const) and isinstance(a.value, (bool, int, float, np.ndarray, np.generic)):
            return self.array(np.asarray(a.value).astype(dtype))
        name, dt, _ = self.atom(a)
        if dt == dtype:
            return name
        return self.node("Cast", [name], to=_DT[dtype])


Emit = Callable[[_Builder, Op, str], None]  # (builder, op, name of op.out)
OPS: dict[str, Emit] = {}


def _reg(*prims: str) -> Callable[[Emit], Emit]:
    def deco(fn: Emit) -> Emit:
        for p in prims:
            OPS[p] = fn
        return fn
    return deco


def _out_dtype(op: Op) -> str:
    return _dtype(op.outs[0].type)


def _args(op: Op, n: int) -> tuple[Any, ...]:
    if len(op.args) != n or any(not k.startswith("_") and k not in ("dtype",) for k, _ in op.kwargs):
        raise _Unsupported(f"{op.prim} with {len(op.args)} arguments and keywords {[k for k, _ in op.kwargs]}")
    return op.args


def _binary(onnx_op: str) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        x, y = _args(op, 2)
        dt = _out_dtype(op)
        b.node(onnx_op, [b.cast(x, dt), b.cast(y, dt)], out=out)
    return emit


for _p, _o in [("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("truediv", "Div"), ("pow", "Pow"),
               ("matmul", "MatMul")]:
    OPS[f"operator.{_p}"] = _binary(_o)
for _p, _o in [("add", "Add"), ("subtract", "Sub"), ("multiply", "Mul"), ("divide", "Div"), ("true_divide", "Div"),
               ("power", "Pow"), ("matmul", "MatMul"), ("maximum", "Max"), ("minimum", "Min"), ("fmax", "Max"),
               ("fmin", "Min")]:
    OPS[f"numpy.{_p}"] = _binary(_o)


def _dot(b: _Builder, op: Op, out: str) -> None:
    x, y = _args(op, 2)
    if len(b.meta(x)[1]) > 2 or len(b.meta(y)[1]) > 2 or not b.meta(x)[1] or not b.meta(y)[1]:
        raise _Unsupported("numpy.dot of arrays beyond 1-D/2-D")
    _binary("MatMul")(b, op, out)


OPS["numpy.dot"] = _dot


def _unary(onnx_op: str) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        (x,) = _args(op, 1)
        b.node(onnx_op, [b.cast(x, _out_dtype(op))], out=out)
    return emit


for _p, _o in [("tanh", "Tanh"), ("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"), ("abs", "Abs"),
               ("absolute", "Abs"), ("sin", "Sin"), ("cos", "Cos"), ("negative", "Neg"), ("sign", "Sign"),
               ("floor", "Floor"), ("ceil", "Ceil"), ("reciprocal", "Reciprocal")]:
    OPS[f"numpy.{_p}"] = _unary(_o)
OPS["operator.neg"] = _unary("Neg")
OPS["builtins.abs"] = OPS["operator.abs"] = _unary("Abs")
OPS["numpy.asarray"] = OPS["numpy.array"] = OPS["numpy.ascontiguousarray"] = OPS["operator.pos"] = \
    OPS["numpy.positive"] = _unary("Identity")
OPS["numpy.copy"] = _unary("Identity")


# onnxruntime has no float64 kernels for Tan, Sinh, Cosh (nor Asin, Acos, Atan, ...: not mapped)
@_reg("numpy.tan", "math.tan")
def _tan(b: _Builder, op: Op, out: str) -> None:
    (x,) = _args(op, 1)
    n = b.cast(x, _out_dtype(op))
    b.node("Div", [b.node("Sin", [n]), b.node("Cos", [n])], out=out)


def _hyp(sign: str) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        (x,) = _args(op, 1)
        dt = _out_dtype(op)
        n = b.cast(x, dt)
        e = b.node(sign, [b.node("Exp", [n]), b.node("Exp", [b.node("Neg", [n])])])
        b.node("Mul", [e, b.array(0.5, dt)], out=out)
    return emit


OPS["numpy.sinh"] = OPS["math.sinh"] = _hyp("Sub")
OPS["numpy.cosh"] = OPS["math.cosh"] = _hyp("Add")


@_reg("numpy.square")
def _square(b: _Builder, op: Op, out: str) -> None:
    (x,) = _args(op, 1)
    n = b.cast(x, _out_dtype(op))
    b.node("Mul", [n, n], out=out)


@_reg("numpy.log1p")
def _log1p(b: _Builder, op: Op, out: str) -> None:
    (x,) = _args(op, 1)
    dt = _out_dtype(op)
    b.node("Log", [b.node("Add", [b.cast(x, dt), b.array(1, dt)])], out=out)


@_reg("numpy.expm1")
def _expm1(b: _Builder, op: Op, out: str) -> None:
    (x,) = _args(op, 1)
    dt = _out_dtype(op)
    b.node("Sub", [b.node("Exp", [b.cast(x, dt)]), b.array(1, dt)], out=out)


@_reg("numpy.logaddexp")
def _logaddexp(b: _Builder, op: Op, out: str) -> None:
    x, y = _args(op, 2)
    dt = _out_dtype(op)
    xn, yn = b.cast(x, dt), b.cast(y, dt)
    m = b.node("Max", [xn, yn])
    d = b.node("Neg", [b.node("Abs", [b.node("Sub", [xn, yn])])])
    b.node("Add", [m, b.node("Log", [b.node("Add", [b.array(1, dt), b.node("Exp", [d])])])], out=out)


def _compare(onnx_op: str, negate: bool = False) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        x, y = _args(op, 2)
        dt = np.result_type(np.dtype(b.meta(x)[0]), np.dtype(b.meta(y)[0])).name
        r = b.node(onnx_op, [b.cast(x, dt), b.cast(y, dt)], out=None if negate else out)
        if negate:
            b.node("Not", [r], out=out)
    return emit


for _p, _np, _o, _neg in [("eq", "equal", "Equal", False), ("ne", "not_equal", "Equal", True),
                          ("lt", "less", "Less", False), ("le", "less_equal", "LessOrEqual", False),
                          ("gt", "greater", "Greater", False), ("ge", "greater_equal", "GreaterOrEqual", False)]:
    OPS[f"operator.{_p}"] = OPS[f"numpy.{_np}"] = _compare(_o, _neg)


@_reg("numpy.where")
def _where(b: _Builder, op: Op, out: str) -> None:
    c, x, y = _args(op, 3)
    dt = _out_dtype(op)
    b.node("Where", [b.cast(c, "bool"), b.cast(x, dt), b.cast(y, dt)], out=out)


def _axes(op: Op, rank: int, pos: int = 1) -> list[int] | None:
    axis = op.kw("axis")
    if axis is None and len(op.args) > pos:
        a = op.args[pos]
        if not isinstance(a, Const):
            raise _Unsupported("a traced axis")
        axis = a.value
    if axis is None:
        return None
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    return sorted(int(a) % rank if rank else 0 for a in axes)


def _reduce(onnx_op: str) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        extra = {k for k, _ in op.kwargs if not k.startswith("_")} - {"axis", "keepdims"}
        if extra or len(op.args) > 2 or (op.kw("keepdims") not in (None, False, True)):
            raise _Unsupported(f"{op.prim} with {sorted(extra)}")
        x = op.args[0]
        dt = _out_dtype(op)
        _, shape = b.meta(x)
        axes = _axes(op, len(shape))
        if axes is None:
            axes = list(range(len(shape)))
        xn = b.cast(x, dt)
        if not axes:
            b.node("Identity", [xn], out=out)
            return
        b.node(onnx_op, [xn, b.ints(axes)], out=out, keepdims=1 if op.kw("keepdims") else 0)
    return emit


OPS["numpy.sum"] = _reduce("ReduceSum")
OPS["numpy.mean"] = _reduce("ReduceMean")
OPS["numpy.max"] = OPS["numpy.amax"] = _reduce("ReduceMax")
OPS["numpy.min"] = OPS["numpy.amin"] = _reduce("ReduceMin")
OPS["numpy.prod"] = _reduce("ReduceProd")


@_reg("numpy.transpose")
def _transpose(b: _Builder, op: Op, out: str) -> None:
    x = op.args[0]
    rank = len(b.meta(x)[1])
    axes = op.kw("axes")
    if axes is None and len(op.args) > 1:
        axes = op.args[1].value
    perm = list(range(rank))[::-1] if axes is None else [int(a) % rank for a in axes]
    b.node("Transpose", [b.atom(x)[0]], out=out, perm=perm)


@_reg("numpy.moveaxis")
def _moveaxis(b: _Builder, op: Op, out: str) -> None:
    x, src, dst = _args(op, 3)
    rank = len(b.meta(x)[1])
    s, d = src.value, dst.value
    s = [s] if isinstance(s, (int, np.integer)) else list(s)
    d = [d] if isinstance(d, (int, np.integer)) else list(d)
    perm = _moveaxis_perm(rank, [i % rank for i in s], [i % rank for i in d])
    b.node("Transpose", [b.atom(x)[0]], out=out, perm=perm)


def _moveaxis_perm(rank: int, src: list[int], dst: list[int]) -> list[int]:
    order = [n for n in range(rank) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return order


@_reg("numpy.cumsum")
def _cumsum(b: _Builder, op: Op, out: str) -> None:
    x = op.args[0]
    axis = op.kw("axis") if len(op.args) < 2 else op.args[1].value
    extra = {k for k, _ in op.kwargs if not k.startswith("_")} - {"axis"}
    if extra or len(op.args) > 2:
        raise _Unsupported(f"numpy.cumsum with {sorted(extra)}")
    n = b.cast(x, _out_dtype(op))
    if axis is None:
        n, axis = b.node("Reshape", [n, b.ints([-1])]), 0
    b.node("CumSum", [n, b.array(np.int64(axis))], out=out)


@_reg("numpy.swapaxes")
def _swapaxes(b: _Builder, op: Op, out: str) -> None:
    x, a1, a2 = _args(op, 3)
    rank = len(b.meta(x)[1])
    perm = list(range(rank))
    i, j = int(a1.value) % rank, int(a2.value) % rank
    perm[i], perm[j] = perm[j], perm[i]
    b.node("Transpose", [b.atom(x)[0]], out=out, perm=perm)


def _to_shape(onnx_op: str) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        x = op.args[0]
        b.node(onnx_op, [b.cast(x, _out_dtype(op)), b.ints(_shape(op.out.type))], out=out)
    return emit


OPS["numpy.broadcast_to"] = _to_shape("Expand")
OPS["numpy.reshape"] = OPS["numpy.ravel"] = _to_shape("Reshape")
OPS["numpy.expand_dims"] = OPS["numpy.squeeze"] = OPS["numpy.atleast_1d"] = OPS["numpy.atleast_2d"] = \
    _to_shape("Reshape")


@_reg("irad.ops.sum_to")
def _sum_to(b: _Builder, op: Op, out: str) -> None:
    x = op.args[0]
    _, gshape = b.meta(x)
    shape = _shape(op.out.type)
    name = b.cast(x, _out_dtype(op))
    lead = len(gshape) - len(shape)
    axes = list(range(max(lead, 0)))
    if lead >= 0:
        axes += [lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1]
    if axes:
        name = b.node("ReduceSum", [name, b.ints(axes)], keepdims=1)
    b.node("Expand" if lead < 0 or any(n != 1 and gshape[lead + i] == 1 for i, n in enumerate(shape)) else "Reshape",
           [name, b.ints(shape)], out=out)


@_reg("irad.ops.to_dtype")
def _to_dtype(b: _Builder, op: Op, out: str) -> None:
    b.node("Identity", [b.cast(op.args[0], _out_dtype(op))], out=out)


_INT64_MIN = -(2 ** 63)


@_reg("operator.getitem")
def _getitem(b: _Builder, op: Op, out: str) -> None:
    x, idx = _args(op, 2)
    name, _, shape = b.atom(x)
    if isinstance(idx, tuple):
        items = list(idx)
    else:
        items = [idx]
    vals = []
    for it in items:
        if not isinstance(it, Const):
            raise _Unsupported("an index that is a traced value")
        v = it.value
        if isinstance(v, tuple):
            vals.extend(v)
        else:
            vals.append(v)
    if any(not (v is None or v is Ellipsis or isinstance(v, (slice, int, np.integer))) or isinstance(v, bool)
           for v in vals):
        _gather(b, op, out, name, shape, _const_index(idx))  # a static index array: Gather on flat positions
        return
    n_real = sum(1 for v in vals if v is not None and v is not Ellipsis)
    if Ellipsis in vals:
        i = vals.index(Ellipsis)
        vals = vals[:i] + [slice(None)] * (len(shape) - n_real) + vals[i + 1:]
    real = [v for v in vals if v is not None]
    real += [slice(None)] * (len(shape) - len(real))
    starts, ends, axes, steps = [], [], [], []
    for ax, (v, n) in enumerate(zip(real, shape)):
        if isinstance(v, slice):
            if v == slice(None):
                continue
            s0, s1, st = v.indices(n)
            if st < 0 and s1 < 0:
                s1 = _INT64_MIN
        else:
            s0 = int(v) % n
            s1, st = s0 + 1, 1
        starts.append(s0), ends.append(s1), axes.append(ax), steps.append(st)
    if axes:
        name = b.node("Slice", [name, b.ints(starts), b.ints(ends), b.ints(axes), b.ints(steps)])
    b.node("Reshape", [name, b.ints(_shape(op.out.type))], out=out)


def _const_index(idx: Any) -> Any:
    """The static index of a getitem/setitem (a Const or a tuple of Consts); ``_Unsupported`` if traced."""
    items = idx if isinstance(idx, tuple) else (idx,)
    vals = []
    for it in items:
        if not isinstance(it, Const):
            raise _Unsupported("an index that is a traced value")
        vals.append(it.value)
    return tuple(vals) if isinstance(idx, tuple) else vals[0]


def _positions(shape: tuple[int, ...], index: Any) -> np.ndarray:
    """Flat positions of ``a[index]`` in ``a`` (any static index numpy accepts)."""
    try:
        return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[index]
    except Exception as e:
        raise _Unsupported(f"index {index!r}: {e}") from None


def _gather(b: _Builder, op: Op, out: str, name: str, shape: tuple[int, ...], index: Any) -> None:
    pos = _positions(shape, index)
    flat = b.node("Reshape", [name, b.ints([-1])])
    b.node("Reshape", [b.node("Gather", [flat, b.array(pos.reshape(-1))], axis=0), b.ints(_shape(op.out.type))],
           out=out)


def _scatter(reduction: str | None) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        a, idx, v = _args(op, 3)
        dt = _out_dtype(op)
        _, shape = b.meta(a)
        pos = _positions(shape, _const_index(idx))
        if reduction is None and len(np.unique(pos)) != pos.size:
            raise _Unsupported("an assignment to repeated positions")
        upd = b.node("Reshape", [b.node("Expand", [b.cast(v, dt), b.ints(pos.shape)]), b.ints([-1])])
        flat = b.node("Reshape", [b.cast(a, dt), b.ints([-1])])
        attrs = {"reduction": reduction} if reduction else {}
        r = b.node("ScatterND", [flat, b.array(pos.reshape(-1, 1)), upd], **attrs)
        b.node("Reshape", [r, b.ints(shape)], out=out)
    return emit


OPS["irad.ops.setitem"] = _scatter(None)
OPS["irad.ops.add_at"] = _scatter("add")


def _to_out(b: _Builder, op: Op, out: str) -> None:
    """A cast and/or reshape to the op's output type: float(x), x.astype(...), x.reshape(...), x.copy()."""
    x = op.args[0]
    b.node("Reshape", [b.cast(x, _out_dtype(op)), b.ints(_shape(op.out.type))], out=out)


for _p in ["builtins.float", "numpy.float64", "numpy.ndarray.copy", "numpy.ndarray.astype", "numpy.ndarray.reshape",
           "numpy.ndarray.ravel", "numpy.ndarray.flatten", "numpy.ndarray.squeeze", "numpy.real"]:
    OPS[_p] = _to_out
for _p, _o in [("exp", "Exp"), ("log", "Log"), ("sin", "Sin"), ("cos", "Cos"), ("sqrt", "Sqrt"),
               ("tanh", "Tanh"), ("fabs", "Abs")]:
    OPS[f"math.{_p}"] = _unary(_o)
OPS["numpy.ndarray.sum"] = OPS["numpy.sum"]
OPS["numpy.ndarray.mean"] = OPS["numpy.mean"]
OPS["numpy.ndarray.max"] = OPS["numpy.max"]
OPS["numpy.ndarray.min"] = OPS["numpy.min"]
OPS["numpy.ndarray.swapaxes"] = OPS["numpy.swapaxes"]
OPS["numpy.ndarray.dot"] = OPS["numpy.dot"]


@_reg("numpy.linalg.norm")
def _norm(b: _Builder, op: Op, out: str) -> None:
    if len(op.args) != 1 or any(not k.startswith("_") for k, _ in op.kwargs):
        raise _Unsupported("numpy.linalg.norm with ord/axis")
    x = op.args[0]
    rank = len(b.meta(x)[1])
    b.node("ReduceL2", [b.cast(x, _out_dtype(op)), b.ints(list(range(rank)))], out=out, keepdims=0)


@_reg("numpy.outer")
def _outer(b: _Builder, op: Op, out: str) -> None:
    x, y = _args(op, 2)
    dt = _out_dtype(op)
    b.node("Mul", [b.node("Reshape", [b.cast(x, dt), b.ints([-1, 1])]),
                   b.node("Reshape", [b.cast(y, dt), b.ints([1, -1])])], out=out)


def _parts(b: _Builder, op: Op, seq: Any, dt: str, new_axis: int | None) -> list[str]:
    if not isinstance(seq, (list, tuple)):
        raise _Unsupported("a sequence argument that is not a literal list")
    names = []
    for a in seq:
        if isinstance(a, (list, tuple)):
            raise _Unsupported("a nested list")
        n = b.cast(a, dt)
        if new_axis is not None:
            n = b.node("Unsqueeze", [n, b.ints([new_axis])])
        names.append(n)
    return names


@_reg("numpy.concatenate")
def _concatenate(b: _Builder, op: Op, out: str) -> None:
    axis = op.kw("axis", 0) if len(op.args) < 2 else op.args[1].value
    if axis is None:
        raise _Unsupported("concatenate(axis=None)")
    b.node("Concat", _parts(b, op, op.args[0], _out_dtype(op), None), out=out, axis=int(axis))


@_reg("numpy.stack")
def _stack(b: _Builder, op: Op, out: str) -> None:
    axis = op.kw("axis", 0) if len(op.args) < 2 else op.args[1].value
    rank = len(_shape(op.out.type))
    axis = int(axis) % rank
    b.node("Concat", _parts(b, op, op.args[0], _out_dtype(op), axis), out=out, axis=axis)


def _array(b: _Builder, op: Op, out: str) -> None:
    x = op.args[0]
    if isinstance(x, (list, tuple)):
        if any(k for k, _ in op.kwargs if not k.startswith("_") and k != "dtype") or len(op.args) > 1:
            raise _Unsupported(f"{op.prim} with extra arguments")
        b.node("Concat", _parts(b, op, x, _out_dtype(op), 0), out=out, axis=0)
        return
    _to_out(b, op, out)


OPS["numpy.array"] = OPS["numpy.asarray"] = OPS["numpy.asanyarray"] = _array


@_reg("numpy.clip", "numpy.ndarray.clip")
def _clip(b: _Builder, op: Op, out: str) -> None:
    kw = {k: v for k, v in op.kwargs if not k.startswith("_")}
    if set(kw) - {"a_min", "a_max", "min", "max"} or len(op.args) + len(kw) != 3:
        raise _Unsupported(f"{op.prim} with keywords {sorted(kw)}")
    pos = list(op.args[1:])
    lo = pos.pop(0) if pos else kw.get("a_min", kw.get("min"))
    hi = pos.pop(0) if pos else kw.get("a_max", kw.get("max"))
    x = op.args[0]
    dt = _out_dtype(op)
    r = b.cast(x, dt)
    if not (isinstance(lo, Const) and lo.value is None):
        r = b.node("Max", [r, b.cast(lo, dt)])
    if not (isinstance(hi, Const) and hi.value is None):
        r = b.node("Min", [r, b.cast(hi, dt)])
    b.node("Identity", [r], out=out)


def _einsum_eq(b: _Builder, op: Op, out: str, eq: str, operands: Sequence[Any]) -> None:
    dt = _out_dtype(op)
    b.node("Einsum", [b.cast(x, dt) for x in operands], out=out, equation=eq)


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@_reg("numpy.einsum")
def _einsum(b: _Builder, op: Op, out: str) -> None:
    if not op.args or not isinstance(op.args[0], Const) or not isinstance(op.args[0].value, str) or \
            any(not k.startswith("_") for k, _ in op.kwargs):
        raise _Unsupported("numpy.einsum without a literal subscripts string, or with keywords")
    eq = op.args[0].value.replace(" ", "")
    if "->" not in eq:  # numpy's implicit output: the letters seen once, in order
        ins = eq.replace(",", "")
        eq += "->" + "".join(sorted(c for c in set(ins) if ins.count(c) == 1 and c.isalpha()))
    _einsum_eq(b, op, out, eq, op.args[1:])


@_reg("numpy.trace")
def _trace(b: _Builder, op: Op, out: str) -> None:
    x, = _args(op, 1)
    rank = len(b.meta(x)[1])
    rest = _LETTERS[1:rank - 1]
    _einsum_eq(b, op, out, f"aa{rest}->{rest}", [x])


@_reg("numpy.inner", "numpy.vdot")
def _inner(b: _Builder, op: Op, out: str) -> None:
    x, y = _args(op, 2)
    rx, ry = len(b.meta(x)[1]), len(b.meta(y)[1])
    if op.prim == "numpy.vdot":
        if rx != ry:
            raise _Unsupported("numpy.vdot of different shapes")
        sub = _LETTERS[:rx]
        _einsum_eq(b, op, out, f"{sub},{sub}->", [x, y])
        return
    if rx == 0 or ry == 0:
        _binary("Mul")(b, op, out)
        return
    xs, ys = _LETTERS[:rx - 1], _LETTERS[rx - 1:rx + ry - 2]
    _einsum_eq(b, op, out, f"{xs}z,{ys}z->{xs}{ys}", [x, y])


@_reg("numpy.tensordot")
def _tensordot(b: _Builder, op: Op, out: str) -> None:
    x, y = op.args[:2]
    axes = op.kw("axes", 2) if len(op.args) < 3 else op.args[2].value
    rx, ry = len(b.meta(x)[1]), len(b.meta(y)[1])
    if isinstance(axes, (int, np.integer)):
        ax, ay = list(range(rx - int(axes), rx)), list(range(int(axes)))
    else:
        ax, ay = ([a] if isinstance(a, (int, np.integer)) else list(a) for a in axes)
        ax, ay = [a % rx for a in ax], [a % ry for a in ay]
    xs = list(_LETTERS[:rx])
    ys = list(_LETTERS[rx:rx + ry])
    for i, j in zip(ax, ay):
        ys[j] = xs[i]
    outs = [c for k, c in enumerate(xs) if k not in ax] + [c for k, c in enumerate(ys) if k not in ay]
    _einsum_eq(b, op, out, f"{''.join(xs)},{''.join(ys)}->{''.join(outs)}", [x, y])


@_reg("numpy.var", "numpy.ndarray.var")
def _var(b: _Builder, op: Op, out: str) -> None:
    extra = {k for k, _ in op.kwargs if not k.startswith("_")} - {"axis", "keepdims", "ddof"}
    if extra or len(op.args) > 2:
        raise _Unsupported(f"{op.prim} with {sorted(extra)}")
    x = op.args[0]
    dt = _out_dtype(op)
    shape = b.meta(x)[1]
    axes = _axes(op, len(shape))
    axes = list(range(len(shape))) if axes is None else axes
    n = int(np.prod([shape[a] for a in axes])) - int(op.kw("ddof") or 0)
    xn = b.cast(x, dt)
    d = b.node("Sub", [xn, b.node("ReduceMean", [xn, b.ints(axes)], keepdims=1)])
    s = b.node("ReduceSum", [b.node("Mul", [d, d]), b.ints(axes)], keepdims=1 if op.kw("keepdims") else 0)
    b.node("Div", [s, b.array(n, dt)], out=out)


@_reg("numpy.ndarray.transpose")
def _method_transpose(b: _Builder, op: Op, out: str) -> None:
    x = op.args[0]
    rank = len(b.meta(x)[1])
    rest = [a.value if isinstance(a, Const) else None for a in op.args[1:]]
    if len(rest) == 1 and isinstance(rest[0], (tuple, list)):
        rest = list(rest[0])
    if any(r is None for r in rest):
        raise _Unsupported("traced axes")
    perm = list(range(rank))[::-1] if not rest else [int(a) % rank for a in rest]
    b.node("Transpose", [b.atom(x)[0]], out=out, perm=perm)


@_reg("numpy.flip")
def _flip(b: _Builder, op: Op, out: str) -> None:
    x = op.args[0]
    shape = b.meta(x)[1]
    axes = _axes(op, len(shape))
    axes = list(range(len(shape))) if axes is None else axes
    b.node("Slice", [b.atom(x)[0], b.ints([-1] * len(axes)), b.ints([_INT64_MIN] * len(axes)), b.ints(axes),
                     b.ints([-1] * len(axes))], out=out)


def _logical(onnx_op: str) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        if _out_dtype(op) != "bool":
            raise _Unsupported(f"{op.prim} on integers (bitwise)")
        b.node(onnx_op, [b.cast(a, "bool") for a in _args(op, len(op.args))], out=out)
    return emit


OPS["operator.or_"] = OPS["numpy.logical_or"] = _logical("Or")
OPS["operator.and_"] = OPS["numpy.logical_and"] = _logical("And")
OPS["operator.invert"] = OPS["numpy.logical_not"] = _logical("Not")


@_reg("numpy.hypot", "math.hypot")
def _hypot(b: _Builder, op: Op, out: str) -> None:
    x, y = _args(op, 2)
    dt = _out_dtype(op)
    xn, yn = b.cast(x, dt), b.cast(y, dt)
    b.node("Sqrt", [b.node("Add", [b.node("Mul", [xn, xn]), b.node("Mul", [yn, yn])])], out=out)


@_reg("numpy.multiply.outer")
def _mul_outer(b: _Builder, op: Op, out: str) -> None:
    x, y = _args(op, 2)
    dt = _out_dtype(op)
    sx, sy = b.meta(x)[1], b.meta(y)[1]
    xr = b.node("Reshape", [b.cast(x, dt), b.ints(list(sx) + [1] * len(sy))])
    b.node("Mul", [xr, b.cast(y, dt)], out=out)


@_reg("math.fsum", "math.prod", "builtins.sum")
def _seq_reduce(b: _Builder, op: Op, out: str) -> None:
    seq, = _args(op, 1)
    dt = _out_dtype(op)
    names = _parts(b, op, seq, dt, None)
    if not names:
        raise _Unsupported("an empty sequence")
    acc = names[0]
    for n in names[1:]:
        acc = b.node("Mul" if op.prim == "math.prod" else "Add", [acc, n])
    b.node("Identity", [acc], out=out)


@_reg("numpy.zeros_like", "irad.ops.zeros_like", "numpy.ones_like")
def _const_like(b: _Builder, op: Op, out: str) -> None:
    if len(op.args) != 1 or any(not k.startswith("_") for k, _ in op.kwargs):
        raise _Unsupported(f"{op.prim} with extra arguments")
    fill = 1 if op.prim == "numpy.ones_like" else 0
    b.node("Identity", [b.array(np.full(_shape(op.out.type), fill, dtype=_out_dtype(op)))], out=out)


@_reg("numpy.vstack", "numpy.hstack")
def _vhstack(b: _Builder, op: Op, out: str) -> None:
    seq, = _args(op, 1)
    if not isinstance(seq, (list, tuple)):
        raise _Unsupported("a sequence argument that is not a literal list")
    dt = _out_dtype(op)
    ranks = [len(b.meta(a)[1]) for a in seq]
    if op.prim == "numpy.vstack":
        parts = [b.node("Reshape", [b.cast(a, dt), b.ints([1, -1])]) if r < 2 else b.cast(a, dt)
                 for a, r in zip(seq, ranks)]
        b.node("Concat", parts, out=out, axis=0)
    else:
        parts = [b.node("Reshape", [b.cast(a, dt), b.ints([1])]) if r == 0 else b.cast(a, dt)
                 for a, r in zip(seq, ranks)]
        b.node("Concat", parts, out=out, axis=0 if max(ranks) <= 1 else 1)


@_reg("numpy.diff")
def _diff(b: _Builder, op: Op, out: str) -> None:
    if len(op.args) != 1 or any(not k.startswith("_") for k, _ in op.kwargs):
        raise _Unsupported("numpy.diff with n/axis/prepend")
    x, = op.args
    shape = b.meta(x)[1]
    ax, n = len(shape) - 1, shape[-1]
    xn = b.cast(x, _out_dtype(op))
    hi = b.node("Slice", [xn, b.ints([1]), b.ints([n]), b.ints([ax])])
    lo = b.node("Slice", [xn, b.ints([0]), b.ints([n - 1]), b.ints([ax])])
    b.node("Sub", [hi, lo], out=out)


