"""The op table: irad primitive -> ONNX nodes (``OPS``), the node builder, and the export errors.

Each entry of ``OPS`` is ``emit(builder, op, out_name)``; it raises ``_Unsupported`` for an
argument form it does not map, which the exporter reports with the op's source line.
Static shapes come from the IR types, so no entry computes shapes inside the model.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, cast

import numpy as np
import onnx  # the onnx package (absolute import), not irad.onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import IradError, LoadError as LoadError  # noqa: F401 (LoadError: re-exported)
from ..ir import ArrayT, Const, Op, ScalarT, Type, Var

class ExportError(IradError):
    """A graph holds ops that have no ONNX form; the message lists every one with its source line."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"cannot export {name} to ONNX: {len(problems)} op(s) have no ONNX form:\n{lines}")


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
        #: put before the names of op results (a loop step's values are named apart from the graph's)
        self.prefix = ""

    def fresh(self, base: str = "t") -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def node(self, op_type: str, inputs: Sequence[str], n_out: int = 1, out: str | None = None,
             **attrs: Any) -> str:
        outs = [out or self.fresh(op_type.lower())] + [self.fresh(op_type.lower()) for _ in range(n_out - 1)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh("n_" + op_type), **attrs))
        return outs[0]

    def node_outs(self, op_type: str, inputs: Sequence[str], outs: Sequence[str | None], **attrs: Any) -> list[str]:
        """A node with several outputs (``TopK``): ``None`` entries get fresh names; returns all names."""
        names = [o or self.fresh(op_type.lower()) for o in outs]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self.fresh("n_" + op_type), **attrs))
        return names

    def array(self, value: Any, dtype: str | None = None) -> str:
        a = np.asarray(value, dtype=dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        name = self.const_names.get(key)
        if name is None:
            name = self.const_names[key] = self.fresh("const")
            self.store_constant(a, name)
            self.types[name] = (a.dtype.name, a.shape)
        return name

    def store_constant(self, a: np.ndarray, name: str) -> None:
        """Put constant ``a`` in the model under ``name`` (an initializer)."""
        self.inits.append(numpy_helper.from_array(a, name))

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
# ops with zero or several outputs (``np.split``, a shape guard): ``emit(builder, op, names of op.outs)``
EmitMulti = Callable[[_Builder, Op, list[str]], None]
MULTI_OPS: dict[str, EmitMulti] = {}


def _reg(*prims: str) -> Callable[[Emit], Emit]:
    def deco(fn: Emit) -> Emit:
        for p in prims:
            OPS[p] = fn
        return fn
    return deco


def _out_dtype(op: Op) -> str:
    return _dtype(op.outs[0].type)


# ufunc keywords that leave the value alone: the result dtype is the op's output type (every entry
# casts to it), and ``order``/``subok`` only choose the memory layout and the array class
_BENIGN_KW = frozenset({"dtype", "casting", "order", "subok"})


def _is_true(a: Any) -> bool:
    return isinstance(a, Const) and isinstance(a.value, (bool, np.bool_)) and bool(a.value)


def _extra_kw(op: Op, allowed: Sequence[str] = ()) -> list[str]:
    """Keywords of ``op`` that change its value and are not in ``allowed`` (``out=None``, ``where=True``
    and the ``_BENIGN_KW`` do not)."""
    return [k for k, v in op.kwargs if not k.startswith("_") and k not in _BENIGN_KW and k not in allowed
            and not (k == "out" and isinstance(v, Const) and v.value is None) and not (k == "where" and _is_true(v))]


def _args(op: Op, n: int) -> tuple[Any, ...]:
    extra = _extra_kw(op)
    if len(op.args) != n or extra:
        raise _Unsupported(f"{op.prim} with {len(op.args)} arguments and keywords {extra}")
    return op.args


def _arg(op: Op, name: str, pos: int | None = None) -> Any:
    """The atom of argument ``name`` (positional index ``pos``, else keyword), or None when absent."""
    if pos is not None and len(op.args) > pos:
        return op.args[pos]
    for k, v in op.kwargs:
        if k == name:
            return v
    return None


def _static(op: Op, name: str, pos: int | None, default: Any) -> Any:
    """The value of a static argument (an axis, a mode); ``_Unsupported`` if it is traced."""
    a = _arg(op, name, pos)
    if a is None:
        return default
    if not isinstance(a, Const):
        raise _Unsupported(f"a traced {name}")
    return a.value


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
OPS["irad.primitives.read_live"] = _unary("Identity")  # an array of the world, read before the function updates it


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
        extra = _extra_kw(op, ("axis", "keepdims"))
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


def _cumulative(onnx_op: str) -> Emit:
    """``np.cumsum``/``np.cumprod`` (``CumSum``/``CumProd``, opset 26, float64 kernels in onnxruntime):
    the input cast to the result dtype first, as numpy accumulates in it; ``axis=None`` flattens."""
    def emit(b: _Builder, op: Op, out: str) -> None:
        extra = _extra_kw(op, ("axis",))
        if extra or len(op.args) > 3:  # (a, axis, dtype): the dtype is the output type's
            raise _Unsupported(f"{op.prim} with {sorted(extra)}")
        axis = _static(op, "axis", 1, None)
        n = b.cast(op.args[0], _out_dtype(op))
        if axis is None:
            n, axis = b.node("Reshape", [n, b.ints([-1])]), 0
        b.node(onnx_op, [n, b.array(np.int64(axis))], out=out)
    return emit


OPS["numpy.cumsum"] = OPS["numpy.ndarray.cumsum"] = _cumulative("CumSum")
OPS["numpy.cumprod"] = OPS["numpy.ndarray.cumprod"] = _cumulative("CumProd")


@_reg("numpy.swapaxes")
def _swapaxes(b: _Builder, op: Op, out: str) -> None:
    x, a1, a2 = _args(op, 3)
    rank = len(b.meta(x)[1])
    perm = list(range(rank))
    i, j = int(a1.value) % rank, int(a2.value) % rank
    perm[i], perm[j] = perm[j], perm[i]
    b.node("Transpose", [b.atom(x)[0]], out=out, perm=perm)


def _c_order(op: Op, pos: int | None = None) -> None:
    """Reshapes here read and write in C order; ``order='F'``/``'A'`` would permute the elements."""
    if _static(op, "order", pos, "C") not in ("C", None):
        raise _Unsupported(f"{op.prim} with order={_static(op, 'order', pos, 'C')!r}")


def _to_shape(onnx_op: str) -> Emit:
    def emit(b: _Builder, op: Op, out: str) -> None:
        x = op.args[0]
        if onnx_op == "Reshape":
            _c_order(op, {"numpy.reshape": 2, "numpy.ravel": 1}.get(op.prim))
        b.node(onnx_op, [b.cast(x, _out_dtype(op)), b.ints(_shape(op.out.type))], out=out)
    return emit


OPS["numpy.broadcast_to"] = _to_shape("Expand")
OPS["numpy.reshape"] = OPS["numpy.ravel"] = _to_shape("Reshape")
OPS["numpy.expand_dims"] = OPS["numpy.squeeze"] = OPS["numpy.atleast_1d"] = OPS["numpy.atleast_2d"] = \
    _to_shape("Reshape")


@_reg("irad.primitives.sum_to")
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


@_reg("irad.primitives.to_dtype")
def _to_dtype(b: _Builder, op: Op, out: str) -> None:
    b.node("Identity", [b.cast(op.args[0], _out_dtype(op))], out=out)


_INT64_MIN = -(2 ** 63)


@_reg("operator.getitem")
def _getitem(b: _Builder, op: Op, out: str) -> None:
    x, idx = _args(op, 2)
    name, _, shape = b.atom(x)
    vals = _index_items(idx)
    if any(isinstance(v, Var) for v in vals):
        mask = _traced_mask(b, vals, shape)
        if mask is not None:  # x[mask]: its length is data-dependent; the Reshape to the traced length
            name = b.node("Reshape", [name, b.ints([-1, *shape[len(b.meta(mask)[1]):]])])  # is its guard
            name = b.node("Compress", [name, b.node("Reshape", [b.atom(mask)[0], b.ints([-1])])], axis=0)
        else:
            name = _advanced(b, name, shape, vals)[0]
        b.node("Reshape", [name, b.ints(_shape(op.out.type))], out=out)
        return
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
        starts.append(s0)
        ends.append(s1)
        axes.append(ax)
        steps.append(st)
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
        return cast(np.ndarray, np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[index])
    except Exception as e:
        raise _Unsupported(f"index {index!r}: {e}") from None


def _gather(b: _Builder, op: Op, out: str, name: str, shape: tuple[int, ...], index: Any) -> None:
    pos = _positions(shape, index)
    flat = b.node("Reshape", [name, b.ints([-1])])
    b.node("Reshape", [b.node("Gather", [flat, b.array(pos.reshape(-1))], axis=0), b.ints(_shape(op.out.type))],
           out=out)


def _index_items(idx: Any) -> list[Any]:
    """The items of a getitem/setitem index: Vars (traced) and the values of Consts (ints, slices,
    ``None``, ``...``, index arrays); a Const holding a whole tuple index is spread out."""
    vals: list[Any] = []
    for it in (idx if isinstance(idx, tuple) else (idx,)):
        if isinstance(it, Var):
            vals.append(it)
        elif isinstance(it, Const):
            vals.extend(it.value) if isinstance(it.value, tuple) else vals.append(it.value)
        else:
            raise _Unsupported(f"an index item {it!r}")
    return vals


def _traced_mask(b: _Builder, vals: list[Any], shape: tuple[int, ...]) -> Var | None:
    """The traced boolean array of ``a[mask]`` (leading axes of ``a``); None for other indices."""
    masks: list[Var] = [v for v in vals if isinstance(v, Var) and b.meta(v)[0] == "bool"]
    if not masks:
        return None
    full = [v is Ellipsis or (isinstance(v, slice) and v == slice(None)) for v in vals[1:]]
    mshape = b.meta(masks[0])[1]
    if vals[0] is not masks[0] or not all(full) or not mshape or tuple(shape[:len(mshape)]) != tuple(mshape):
        raise _Unsupported("a traced boolean mask that is not the whole index (a[mask] on leading axes)")
    return cast(Var, masks[0])  # (a Var: the `is not` test above narrows it to Any)


def _advanced(b: _Builder, x: str, shape: tuple[int, ...], vals: list[Any]) -> tuple[str, tuple[int, ...]]:
    """``x[vals]`` for an index holding traced integer arrays (numpy's advanced indexing), and its shape.

    The slices are applied first (``Slice``); the integer-indexed axes are moved to the front
    (``Transpose``) and flattened into one (``Reshape``), the index arrays combined into flat
    positions along it (``Where(i < 0, i + n, i)`` for negative indices, times the stride), one
    ``Gather``, and a ``Transpose`` putting the index dimensions where numpy puts them: in place of
    the first indexed axis when the indexed items are adjacent, else first.  ``None`` items only
    add length-1 axes, which the caller's ``Reshape`` to the op's output type inserts."""
    def dummy(v: Any) -> Any:  # a stand-in of the same shape, for numpy's shape rules
        if isinstance(v, Var):
            dt, s = b.meta(v)
            if dt == "bool" or not np.issubdtype(np.dtype(dt), np.integer):
                raise _Unsupported(f"a traced index of dtype {dt} among other index items")
            return np.zeros(s, dtype=np.int64)
        return v
    try:
        want = np.empty(shape, dtype=np.int8)[tuple(dummy(v) for v in vals)].shape
    except IndexError as e:
        raise _Unsupported(f"index: {e}") from None
    items: list[Any] = []  # integer arrays for constant masks; Ellipsis kept: it separates indexed items
    for v in vals:
        if isinstance(v, (bool, np.bool_)):
            raise _Unsupported("a boolean scalar index")
        if not isinstance(v, (Var, slice, int, np.integer)) and v is not None and v is not Ellipsis:
            a = np.asarray(v)
            if a.dtype == np.bool_ and a.ndim:
                items.extend(np.nonzero(a))
                continue
            if not np.issubdtype(a.dtype, np.integer):
                raise _Unsupported(f"an index of dtype {a.dtype}{' (0-d)' if a.ndim == 0 else ''}")
            v = a
        items.append(v)
    is_adv = [not (v is None or v is Ellipsis or isinstance(v, slice)) for v in items]
    first = is_adv.index(True)
    adjacent = all(is_adv[first:first + sum(is_adv)])
    n_axes = sum(1 for v in items if v is not None and v is not Ellipsis)
    ell = [i for i, v in enumerate(items) if v is Ellipsis]
    if ell:
        items = items[:ell[0]] + [slice(None)] * (len(shape) - n_axes) + items[ell[0] + 1:]
    items = [v for v in items if v is not None]
    items += [slice(None)] * (len(shape) - len(items))
    dims = list(shape)
    sl: list[list[int]] = [[], [], [], []]  # starts, ends, axes, steps
    adv_axes, adv_vals, slice_axes = [], [], []
    for ax, v in enumerate(items):
        if not isinstance(v, slice):
            adv_axes.append(ax)
            adv_vals.append(v)
            continue
        slice_axes.append(ax)
        if v != slice(None):
            s0, s1, st = v.indices(dims[ax])
            dims[ax] = len(range(s0, s1, st))
            for k, item in enumerate((s0, _INT64_MIN if st < 0 and s1 < 0 else s1, ax, st)):
                sl[k].append(item)
    if sl[2]:
        x = b.node("Slice", [x] + [b.ints(e) for e in sl])
    perm = adv_axes + slice_axes
    if perm != sorted(perm):
        x = b.node("Transpose", [x], perm=perm)
    adv_dims = [dims[a] for a in adv_axes]
    rest = [dims[a] for a in slice_axes]
    if len(adv_axes) > 1:
        x = b.node("Reshape", [x, b.ints([int(np.prod(adv_dims)), *rest])])
    flat, const = None, None
    for k, (v, n) in enumerate(zip(adv_vals, adv_dims)):
        stride = int(np.prod(adv_dims[k + 1:]))
        if isinstance(v, Var):
            i = b.cast(v, "int64")
            i = b.node("Where", [b.node("Less", [i, b.array(np.int64(0))]), b.node("Add", [i, b.array(np.int64(n))]),
                                 i])
            if stride != 1:
                i = b.node("Mul", [i, b.array(np.int64(stride))])
            flat = i if flat is None else b.node("Add", [flat, i])
        else:
            c = np.asarray(v, dtype=np.int64)
            if ((c < -n) | (c >= n)).any():
                raise _Unsupported(f"index {v!r} out of bounds for an axis of length {n}")
            c = np.where(c < 0, c + n, c) * stride
            const = c if const is None else const + c
    if const is not None:
        flat = b.node("Add", [cast(str, flat), b.array(const)])  # (a traced item set it)
    bshape = np.broadcast_shapes(*(b.meta(v)[1] if isinstance(v, Var) else np.shape(v) for v in adv_vals))
    x = b.node("Gather", [x, cast(str, flat)], axis=0)
    p = sum(1 for a in slice_axes if a < adv_axes[0])
    if adjacent and p:
        nb = len(bshape)
        x = b.node("Transpose", [x], perm=[nb + i for i in range(p)] + list(range(nb)) +
                   [nb + i for i in range(p, len(rest))])
    assert int(np.prod(want)) == int(np.prod(bshape)) * int(np.prod(rest))
    return x, want


def _expand_to(b: _Builder, v: Any, dt: str, shape: tuple[int, ...]) -> str:
    """``v`` broadcast to ``shape`` the way an assignment does (leading length-1 axes of ``v`` dropped)."""
    name = b.cast(v, dt)
    vshape = b.meta(v)[1]
    if len(vshape) > len(shape):
        if any(n != 1 for n in vshape[:len(vshape) - len(shape)]):
            raise _Unsupported(f"a value of shape {vshape} for {shape} positions")
        name = b.node("Reshape", [name, b.ints(vshape[len(vshape) - len(shape):])])
    return b.node("Expand", [name, b.ints(shape)])


def _scatter(reduction: str | None) -> Emit:
    """``a[idx] = v`` (``irad.primitives.setitem``) and ``np.add.at(a, idx, v)`` (``irad.primitives.add_at``):
    ``ScatterND`` on the flattened array at flat positions, computed at export for a constant
    index, else gathered with the same (traced) index from a table of positions (a ``Range``)."""
    def emit(b: _Builder, op: Op, out: str) -> None:
        a, idx, v = _args(op, 3)
        dt = _out_dtype(op)
        _, shape = b.meta(a)
        n = int(np.prod(shape))
        flat = b.node("Reshape", [b.cast(a, dt), b.ints([-1])])
        vals = _index_items(idx)
        traced = any(isinstance(i, Var) for i in vals)
        mask = _traced_mask(b, vals, shape) if traced else None
        if mask is not None:  # a[mask] = v for a scalar v: a Where (the number of positions is data-dependent)
            if b.meta(v)[1]:
                raise _Unsupported("an array assigned through a traced boolean mask")
            mshape = b.meta(mask)[1]
            cond = b.node("Reshape", [b.atom(mask)[0], b.ints(list(mshape) + [1] * (len(shape) - len(mshape)))])
            vn = b.cast(v, dt)
            r = b.node("Where", [cond, b.node("Add", [b.cast(a, dt), vn]) if reduction else vn, b.cast(a, dt)])
            b.node("Identity", [r], out=out)
            return
        if traced:  # the table of flat positions, made at run time (a Range: not an initializer of a's size)
            table = b.node("Reshape", [b.node("Range", [b.array(np.int64(0)), b.array(np.int64(n)),
                                                         b.array(np.int64(1))]), b.ints(shape)])
            pos, rshape = _advanced(b, table, shape, vals)
            pos = b.node("Reshape", [pos, b.ints([-1, 1])])
        else:
            p = _positions(shape, _const_index(idx))
            if reduction is None and len(np.unique(p)) != p.size:
                raise _Unsupported("an assignment to repeated positions")
            pos, rshape = b.array(p.reshape(-1, 1)), p.shape
        m = int(np.prod(rshape))
        upd = b.node("Reshape", [_expand_to(b, v, dt, rshape), b.ints([-1])])
        if m == 0:
            r = flat
        elif reduction or not traced:
            r = b.node("ScatterND", [flat, pos, upd],
                       **cast("dict[str, Any]", {"reduction": reduction} if reduction else {}))
        else:
            # numpy keeps the last of repeated assignments; ScatterND leaves their order undefined.  So:
            # the number of the last update of each position (a max-scatter of 0..m-1), a Gather of it
            last = b.node("ScatterND", [b.array(np.full(n, -1, dtype=np.int64)), pos,
                                        b.array(np.arange(m, dtype=np.int64))], reduction="max")
            got = b.node("Gather", [upd, b.node("Max", [last, b.array(np.int64(0))])], axis=0)
            r = b.node("Where", [b.node("GreaterOrEqual", [last, b.array(np.int64(0))]), got, flat])
        b.node("Reshape", [r, b.ints(shape)], out=out)
    return emit


OPS["irad.primitives.setitem"] = _scatter(None)
OPS["irad.primitives.add_at"] = _scatter("add")


def _to_out(b: _Builder, op: Op, out: str) -> None:
    """A cast and/or reshape to the op's output type: float(x), x.astype(...), x.reshape(...), x.copy()."""
    x = op.args[0]
    if op.prim in ("numpy.ndarray.reshape", "numpy.ndarray.ravel", "numpy.ndarray.flatten"):
        _c_order(op, None if op.prim == "numpy.ndarray.reshape" else 1)
    b.node("Reshape", [b.cast(x, _out_dtype(op)), b.ints(_shape(op.out.type))], out=out)


for _p in ["builtins.float", "numpy.float64", "numpy.ndarray.copy", "numpy.ndarray.astype", "numpy.ndarray.reshape",
           "numpy.ndarray.ravel", "numpy.ndarray.flatten", "numpy.ndarray.squeeze", "numpy.real"]:
    OPS[_p] = _to_out
for _p, _o in [("exp", "Exp"), ("log", "Log"), ("sin", "Sin"), ("cos", "Cos"), ("sqrt", "Sqrt"),
               ("tanh", "Tanh"), ("fabs", "Abs")]:
    OPS[f"math.{_p}"] = _unary(_o)
OPS["math.pow"] = _binary("Pow")  # float ** float (math.pow raises where Pow gives NaN)
OPS["numpy.ndarray.sum"] = OPS["numpy.sum"]
OPS["numpy.ndarray.mean"] = OPS["numpy.mean"]
OPS["numpy.ndarray.max"] = OPS["numpy.max"]
OPS["numpy.ndarray.min"] = OPS["numpy.min"]
OPS["numpy.ndarray.swapaxes"] = OPS["numpy.swapaxes"]
OPS["numpy.ndarray.dot"] = OPS["numpy.dot"]


@_reg("numpy.linalg.norm")
def _norm(b: _Builder, op: Op, out: str) -> None:
    """Vector norms (``ord`` None/2: ``ReduceL2``, 1: ``ReduceL1``, ±inf: ``ReduceMax``/``ReduceMin`` of
    ``Abs``, 0: a count, p: ``(sum |x|^p)^(1/p)``) and the matrix norms that need no SVD (None/'fro':
    ``ReduceL2``, ±1/±inf: extreme column/row sums of ``Abs``), with ``axis`` and ``keepdims``; the
    result is reshaped to the output type (``keepdims``)."""
    if _extra_kw(op, ("ord", "axis", "keepdims")) or len(op.args) > 4:
        raise _Unsupported(f"numpy.linalg.norm with {_extra_kw(op, ('ord', 'axis', 'keepdims'))}")
    x = op.args[0]
    rank = len(b.meta(x)[1])
    order, axis = _static(op, "ord", 1, None), _static(op, "axis", 2, None)
    dt, oshape = _out_dtype(op), _shape(op.out.type)
    xn = b.cast(x, dt)
    if axis is None:
        if order is None:
            b.node("Reshape", [b.node("ReduceL2", [xn, b.ints(list(range(rank)))], keepdims=0), b.ints(oshape)],
                   out=out)
            return
        if rank not in (1, 2):
            raise _Unsupported(f"numpy.linalg.norm(ord={order!r}) of a {rank}-D array")
        axis = tuple(range(rank))
    axes = [int(a) % rank for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis)]

    def red(onnx_op: str, t: str, ax: list[int]) -> str:
        return b.node(onnx_op, [t, b.ints(ax)], keepdims=1)

    if len(axes) == 1:
        if order is None or order == 2:
            r = red("ReduceL2", xn, axes)
        elif order == 1:
            r = red("ReduceL1", xn, axes)
        elif order in (np.inf, -np.inf):
            r = red("ReduceMax" if order > 0 else "ReduceMin", b.node("Abs", [xn]), axes)
        elif order == 0:
            r = red("ReduceSum", b.node("Cast", [b.node("Not", [b.node("Equal", [xn, b.array(0, dt)])])],
                                        to=_DT[dt]), axes)
        elif isinstance(order, (int, float, np.integer, np.floating)):
            p = b.array(float(order), dt)
            r = b.node("Pow", [red("ReduceSum", b.node("Pow", [b.node("Abs", [xn]), p]), axes),
                               b.array(1.0 / float(order), dt)])
        else:
            raise _Unsupported(f"numpy.linalg.norm(ord={order!r}) of a vector")
    elif len(axes) == 2:
        if order in (None, "fro"):
            r = red("ReduceL2", xn, axes)
        elif order in (1, -1, np.inf, -np.inf):
            inner, outer = (axes[0], axes[1]) if order in (1, -1) else (axes[1], axes[0])
            r = red("ReduceMax" if order > 0 else "ReduceMin", red("ReduceSum", b.node("Abs", [xn]), [inner]), [outer])
        else:
            raise _Unsupported(f"numpy.linalg.norm(ord={order!r}) of a matrix (singular values)")
    else:
        raise _Unsupported("numpy.linalg.norm over more than two axes")
    b.node("Reshape", [r, b.ints(oshape)], out=out)


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
            _extra_kw(op, ("optimize",)):  # optimize= only picks the contraction order
        raise _Unsupported(f"numpy.einsum without a literal subscripts string, or with {_extra_kw(op, ('optimize',))}")
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
    ax: list[Any]
    ay: list[Any]
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


@_reg("numpy.var", "numpy.ndarray.var", "numpy.std", "numpy.ndarray.std")
def _var(b: _Builder, op: Op, out: str) -> None:
    """Mean of squared deviations over ``n - ddof`` (``std``: its ``Sqrt``)."""
    extra = _extra_kw(op, ("axis", "keepdims", "ddof"))
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
    if op.prim.endswith("std"):
        b.node("Sqrt", [b.node("Div", [s, b.array(n, dt)])], out=out)
    else:
        b.node("Div", [s, b.array(n, dt)], out=out)


@_reg("numpy.ndarray.transpose")
def _method_transpose(b: _Builder, op: Op, out: str) -> None:
    x = op.args[0]
    rank = len(b.meta(x)[1])
    rest: list[Any] = [a.value if isinstance(a, Const) else None for a in op.args[1:]]
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


@_reg("numpy.zeros_like", "irad.primitives.zeros_like", "numpy.ones_like")
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


# ---- counting, sorting, searching -----------------------------------------------------------

@_reg("numpy.bincount")
def _bincount(b: _Builder, op: Op, out: str) -> None:
    """``ScatterElements`` (reduction ``add``) of the weights (or ones) onto zeros of the traced
    length (``max(x) + 1`` or ``minlength``): an index past it fails in the runtime, not silently."""
    extra = _extra_kw(op, ("weights", "minlength"))
    if extra or len(op.args) > 3:
        raise _Unsupported(f"numpy.bincount with {extra}")
    x, w = op.args[0], _arg(op, "weights", 1)
    dt, (length,) = _out_dtype(op), _shape(op.out.type)
    n = b.meta(x)[1]
    if len(n) != 1:
        raise _Unsupported("numpy.bincount of a non-1-D array")
    upd = b.array(np.ones(n, dtype=dt)) if w is None or (isinstance(w, Const) and w.value is None) else \
        _expand_to(b, w, dt, n)
    b.node("ScatterElements", [b.array(np.zeros(length, dtype=dt)), b.cast(x, "int64"), upd], out=out, axis=0,
           reduction="add")


def _sort_axis(b: _Builder, op: Op, x: Any, pos: int = 1) -> tuple[str, int, int]:
    """(input, axis, length): ``axis=None`` flattens, as numpy does."""
    extra = _extra_kw(op, ("axis", "kind", "stable", "order"))
    if extra or _static(op, "order", 3, None) is not None:
        raise _Unsupported(f"{op.prim} with {extra or 'order'}")
    dt, shape = b.meta(x)
    if dt == "bool" or not (np.issubdtype(np.dtype(dt), np.number)):
        raise _Unsupported(f"{op.prim} of {dt} (no TopK kernel)")
    axis = _static(op, "axis", pos, -1)
    name = b.atom(x)[0]
    if axis is None:
        name, shape, axis = b.node("Reshape", [name, b.ints([-1])]), (int(np.prod(shape)),), 0
    if not shape:
        raise _Unsupported(f"{op.prim} of a 0-d array")
    axis = int(axis) % len(shape)
    return name, axis, shape[axis]


def _topk(b: _Builder, op: Op, x: Any, pos: int = 1) -> list[str]:
    """(values, indices) of ``TopK(largest=0, sorted=1)`` over the whole axis: an ascending sort.
    TopK breaks ties by index (the lower first), a stable sort; NaNs sort last, as in numpy."""
    name, axis, n = _sort_axis(b, op, x, pos)
    return b.node_outs("TopK", [name, b.ints([n])], [None, None], axis=axis, largest=0, sorted=1)


@_reg("numpy.sort", "irad.primitives.sort_inplace")
def _sort(b: _Builder, op: Op, out: str) -> None:
    """Sorted values: equal values are interchangeable, so the sort kind does not matter."""
    values = _topk(b, op, op.args[0])[0]
    dt = _out_dtype(op)
    if dt == b.meta(op.args[0])[0]:
        b.node("Identity", [values], out=out)
    else:
        b.node("Cast", [values], out=out, to=_DT[dt])


@_reg("numpy.argsort", "numpy.ndarray.argsort")
def _argsort(b: _Builder, op: Op, out: str) -> None:
    """The indices of ``TopK``: ties in index order, which is numpy's ``kind='stable'`` order.  For the
    default kind numpy leaves the order of ties unspecified (and its SIMD sorts do reorder them), so
    argsorts of arrays with repeated values may differ there; without ties every kind agrees."""
    b.node("Identity", [_topk(b, op, op.args[0])[1]], out=out)


@_reg("numpy.take_along_axis")
def _take_along_axis(b: _Builder, op: Op, out: str) -> None:
    """``GatherElements``: both operands expanded to the result shape in the other axes first
    (numpy broadcasts them; GatherElements does not)."""
    if _extra_kw(op, ("axis",)) or len(op.args) > 3:
        raise _Unsupported(f"numpy.take_along_axis with {_extra_kw(op, ('axis',))}")
    x, idx = op.args[:2]
    axis = _static(op, "axis", 2, -1)
    dt, oshape = _out_dtype(op), _shape(op.out.type)
    xn, xshape = b.cast(x, dt), b.meta(x)[1]
    if axis is None:
        xn, xshape, axis = b.node("Reshape", [xn, b.ints([-1])]), (int(np.prod(xshape)),), 0
    axis = int(axis) % len(xshape)
    xs = list(oshape)
    xs[axis] = xshape[axis]
    if tuple(xs) != tuple(xshape):
        xn = b.node("Expand", [xn, b.ints(xs)])
    ii = b.cast(idx, "int64")
    if tuple(b.meta(idx)[1]) != tuple(oshape):
        ii = b.node("Expand", [ii, b.ints(oshape)])
    b.node("GatherElements", [xn, ii], out=out, axis=axis)


def _argext(onnx_op: str) -> Emit:
    """``np.argmax``/``argmin`` (``ArgMax``/``ArgMin``; first index of ties, as numpy), over the
    flattened array for ``axis=None``; booleans compared as integers (no boolean kernel)."""
    def emit(b: _Builder, op: Op, out: str) -> None:
        extra = _extra_kw(op, ("axis", "keepdims"))
        if extra or len(op.args) > 2:
            raise _Unsupported(f"{op.prim} with {extra}")
        x = op.args[0]
        dt, shape = b.meta(x)
        name = b.cast(x, "int64") if dt == "bool" else b.atom(x)[0]
        axis = _static(op, "axis", 1, None)
        if axis is None:
            name, axis = b.node("Reshape", [name, b.ints([-1])]), 0
        r = b.node(onnx_op, [name], axis=int(axis) % max(len(shape), 1), keepdims=0, select_last_index=0)
        b.node("Reshape", [r, b.ints(_shape(op.out.type))], out=out)
    return emit


OPS["numpy.argmax"] = OPS["numpy.ndarray.argmax"] = _argext("ArgMax")
OPS["numpy.argmin"] = OPS["numpy.ndarray.argmin"] = _argext("ArgMin")


def _anyall(onnx_op: str) -> Emit:
    """``np.any``/``np.all``: ``ReduceMax``/``ReduceMin`` of the booleans (``x != 0``); a reduction
    over no elements (onnxruntime rejects it for booleans) is the constant False/True."""
    reduce = _reduce(onnx_op)

    def emit(b: _Builder, op: Op, out: str) -> None:
        _, shape = b.meta(op.args[0])
        axes = _axes(op, len(shape))
        if any(shape[a] == 0 for a in (range(len(shape)) if axes is None else axes)):
            fill = onnx_op == "ReduceMin"
            b.node("Identity", [b.array(np.full(_shape(op.out.type), fill))], out=out)
            return
        reduce(b, op, out)
    return emit


OPS["numpy.any"] = OPS["numpy.ndarray.any"] = _anyall("ReduceMax")
OPS["numpy.all"] = OPS["numpy.ndarray.all"] = _anyall("ReduceMin")
OPS["numpy.ndarray.prod"] = OPS["numpy.prod"]


def _isfloat(b: _Builder, x: Any) -> bool:
    return np.issubdtype(np.dtype(b.meta(x)[0]), np.floating)


@_reg("numpy.isnan", "numpy.isinf", "numpy.isfinite", "math.isnan", "math.isinf", "math.isfinite")
def _isnan(b: _Builder, op: Op, out: str) -> None:
    """``IsNaN``, ``IsInf``, ``Not(IsNaN or IsInf)``; integers and booleans are never NaN or infinite."""
    (x,) = _args(op, 1)
    what = op.prim.rsplit(".", 1)[1]
    if not _isfloat(b, x):
        b.node("Identity", [b.array(np.full(_shape(op.out.type), what == "isfinite"))], out=out)
        return
    name = b.atom(x)[0]
    if what == "isnan":
        b.node("IsNaN", [name], out=out)
    elif what == "isinf":
        b.node("IsInf", [name], out=out)
    else:
        b.node("Not", [b.node("Or", [b.node("IsNaN", [name]), b.node("IsInf", [name])])], out=out)


# ---- shape manipulation ---------------------------------------------------------------------

def _split(b: _Builder, op: Op, outs: list[str]) -> None:
    """``np.split``/``np.array_split``: one ``Slice`` per piece; the pieces' lengths are in the
    output types, so the sections or split points need no interpretation here."""
    if _extra_kw(op, ("axis",)) or len(op.args) > 3:
        raise _Unsupported(f"{op.prim} with {_extra_kw(op, ('axis',))}")
    x = op.args[0]
    dt, shape = b.meta(x)
    axis = int(_static(op, "axis", 2, 0)) % len(shape)
    start = 0
    for v, nm in zip(op.outs, outs):
        n = _shape(v.type)[axis]
        b.node("Slice", [b.cast(x, _dtype(v.type)), b.ints([start]), b.ints([start + n]), b.ints([axis])], out=nm)
        start += n


MULTI_OPS["numpy.split"] = MULTI_OPS["numpy.array_split"] = _split


@_reg("numpy.pad")
def _pad(b: _Builder, op: Op, out: str) -> None:
    """``Pad``: modes ``constant`` (one constant value), ``edge``, ``reflect`` and ``wrap`` (numpy's
    and ONNX's agree while a pad is shorter than the axis); ``symmetric`` has no ONNX mode."""
    extra = _extra_kw(op, ("mode", "constant_values"))
    if extra or len(op.args) > 3:
        raise _Unsupported(f"numpy.pad with {extra}")
    x = op.args[0]
    dt, shape = _out_dtype(op), b.meta(op.args[0])[1]
    if not shape:
        raise _Unsupported("numpy.pad of a 0-d array")
    mode = _static(op, "mode", 2, "constant")
    widths = np.broadcast_to(np.asarray(_static(op, "pad_width", 1, None), dtype=np.int64), (len(shape), 2))
    pads = b.ints(list(widths[:, 0]) + list(widths[:, 1]))
    if mode == "constant":
        cv = _arg(op, "constant_values")
        if cv is None:
            cv = Const(0, ScalarT("int"))
        elif isinstance(cv, Const) and np.ndim(cv.value):
            vals = np.unique(np.asarray(cv.value))
            if vals.size != 1:
                raise _Unsupported("numpy.pad with different constant values per side")
            cv = Const(vals.reshape(()), ScalarT("float"))
        elif b.meta(cv)[1]:
            raise _Unsupported("numpy.pad with traced constant values per side")
        b.node("Pad", [b.cast(x, dt), pads, b.cast(cv, dt)], out=out, mode="constant")
        return
    fits = {"edge": lambda n, w: n > 0, "reflect": lambda n, w: n > w, "wrap": lambda n, w: n >= w}
    if mode not in fits or any(max(w0, w1) and not fits[mode](n, max(w0, w1)) for n, (w0, w1) in zip(shape, widths)):
        raise _Unsupported(f"numpy.pad(mode={mode!r}) of these widths")
    b.node("Pad", [b.cast(x, dt), pads], out=out, mode=mode)


@_reg("numpy.tile")
def _tile(b: _Builder, op: Op, out: str) -> None:
    """``Tile``, with ``reps`` and the array's shape padded with leading ones to the same length."""
    x = _args(op, 2)[0]
    reps = _static(op, "reps", 1, None)
    reps = [int(r) for r in np.atleast_1d(reps)]
    shape = b.meta(x)[1]
    name = b.cast(x, _out_dtype(op))
    if len(shape) < len(reps):
        name = b.node("Reshape", [name, b.ints([1] * (len(reps) - len(shape)) + list(shape))])
    reps = [1] * (len(shape) - len(reps)) + reps
    b.node("Tile", [name, b.ints(reps)], out=out)


@_reg("numpy.repeat", "numpy.ndarray.repeat")
def _repeat(b: _Builder, op: Op, out: str) -> None:
    """``Gather`` with the constant index ``np.repeat(arange(n), repeats)`` (static repeats only: traced
    ones make the length data-dependent)."""
    if _extra_kw(op, ("axis",)) or len(op.args) > 3:
        raise _Unsupported(f"{op.prim} with {_extra_kw(op, ('axis',))}")
    x = op.args[0]
    repeats = _static(op, "repeats", 1, None)
    axis = _static(op, "axis", 2, None)
    name, shape = b.cast(x, _out_dtype(op)), b.meta(x)[1]
    if axis is None:
        name, shape, axis = b.node("Reshape", [name, b.ints([-1])]), (int(np.prod(shape)),), 0
    axis = int(axis) % len(shape)
    idx = np.repeat(np.arange(shape[axis], dtype=np.int64), repeats)
    b.node("Gather", [name, b.array(idx)], out=out, axis=axis)


def _trilu(upper: int) -> Emit:
    """``Trilu`` (float64, integer and boolean kernels), ``k`` static."""
    def emit(b: _Builder, op: Op, out: str) -> None:
        if _extra_kw(op, ("k",)) or len(op.args) > 2:
            raise _Unsupported(f"{op.prim} with {_extra_kw(op, ('k',))}")
        x = op.args[0]
        if len(b.meta(x)[1]) < 2:
            raise _Unsupported(f"{op.prim} of a 1-D array")
        k = int(_static(op, "k", 1, 0))
        b.node("Trilu", [b.cast(x, _out_dtype(op)), b.array(np.int64(k))], out=out, upper=upper)
    return emit


OPS["numpy.tril"] = _trilu(0)
OPS["numpy.triu"] = _trilu(1)


@_reg("numpy.lib.stride_tricks.sliding_window_view")
def _sliding_windows(b: _Builder, op: Op, out: str) -> None:
    """The windows as a ``Gather`` of flat positions, computed at export (what imported
    convolutions and pools read)."""
    if _extra_kw(op, ("window_shape", "axis")) or len(op.args) > 3 or not isinstance(op.args[0], Var):
        raise _Unsupported(f"{op.prim} with {_extra_kw(op, ('window_shape', 'axis'))}")
    window, axis = _static(op, "window_shape", 1, None), _static(op, "axis", 2, None)
    name, _, shape = b.atom(op.args[0])
    try:
        pos = np.lib.stride_tricks.sliding_window_view(
            np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape), window, axis=axis)
    except Exception as e:
        raise _Unsupported(f"windows {window!r} on axes {axis!r}: {e}") from None
    flat = b.node("Reshape", [name, b.ints([-1])])
    b.node("Reshape", [b.node("Gather", [flat, b.array(np.ascontiguousarray(pos).reshape(-1))], axis=0),
                       b.ints(_shape(op.out.type))], out=out)


OPS["scipy.special.erf"] = _unary("Erf")  # onnxruntime has no float64 Erf kernel; float32 runs


@_reg("numpy.convolve", "numpy.correlate")
def _convolve(b: _Builder, op: Op, out: str) -> None:
    """``np.convolve``/``np.correlate`` of 1-D arrays: the full convolution ``f[k] = sum_j a[k-j] w[j]``
    (``w = v``, or ``v`` reversed for a correlation) as windows of ``a`` (a ``Gather`` with a
    constant index; positions off its ends read an appended zero) times ``w`` reversed (``MatMul``),
    the windows restricted to the ones ``mode`` keeps (numpy's offsets, which differ for ``same``)."""
    if _extra_kw(op, ("mode",)) or len(op.args) > 3:
        raise _Unsupported(f"{op.prim} with {_extra_kw(op, ('mode',))}")
    a, v = op.args[:2]
    correlate = op.prim == "numpy.correlate"
    mode = _static(op, "mode", 2, "valid" if correlate else "full")
    dt = _out_dtype(op)
    (n,), (m,) = b.meta(a)[1], b.meta(v)[1]
    if not n or not m:
        raise _Unsupported(f"{op.prim} of an empty array")
    same = n // 2 if correlate and m > n else (min(n, m) - 1) // 2
    lo = {"full": 0, "same": same, "valid": min(n, m) - 1}.get(mode)
    if lo is None:
        raise _Unsupported(f"{op.prim}(mode={mode!r})")
    length = _shape(op.out.type)[0]
    win = (lo + np.arange(length)[:, None] + np.arange(m)[None, :] - (m - 1)).astype(np.int64)
    win[(win < 0) | (win >= n)] = n
    ext = b.node("Concat", [b.cast(a, dt), b.array(np.zeros(1, dtype=dt))], axis=0)
    w = b.cast(v, dt)
    if not correlate:
        w = b.node("Slice", [w, b.ints([-1]), b.ints([_INT64_MIN]), b.ints([0]), b.ints([-1])])
    b.node("MatMul", [b.node("Gather", [ext, b.array(win)], axis=0), w], out=out)


# ---- complex parts of real arrays, copies, guards ---------------------------------------------

def _real_input(b: _Builder, op: Op) -> Any:
    (x,) = _args(op, 1)
    dt = b.meta(x)[0]
    if dt not in _DT:
        raise _Unsupported(f"{op.prim} of {dt}")
    return x


@_reg("numpy.real", "numpy.conjugate", "numpy.conj", "numpy.ndarray.conjugate", "numpy.ndarray.conj")
def _real(b: _Builder, op: Op, out: str) -> None:
    """The real part (and the conjugate) of a real array is the array (complex arrays have no ONNX type)."""
    b.node("Identity", [b.cast(_real_input(b, op), _out_dtype(op))], out=out)


@_reg("numpy.imag")
def _imag(b: _Builder, op: Op, out: str) -> None:
    """The imaginary part of a real array is zero."""
    _real_input(b, op)
    b.node("Identity", [b.array(np.zeros(_shape(op.out.type), dtype=_out_dtype(op)))], out=out)


@_reg("irad.primitives.copyto")
def _copyto(b: _Builder, op: Op, out: str) -> None:
    """``np.copyto(dst, src)`` as a value: ``src`` cast to ``dst``'s dtype and broadcast to its shape."""
    dst, src = _args(op, 2)
    b.node("Identity", [_expand_to(b, src, _out_dtype(op), b.meta(dst)[1])], out=out)


def _guard_shape(b: _Builder, op: Op, outs: list[str]) -> None:
    """No node.  ``guard_shape`` asserts that a value whose *length depends on the data* (``x[mask]``,
    ``np.nonzero``, ...) still has its traced shape; it is not about input shapes.  ONNX has no assert
    op, but every producer of such a value that this table maps (``x[mask]``: ``Compress``) ends in a
    ``Reshape`` to the traced shape, which the runtime refuses for data of another length: that
    Reshape is the guard.  Producers that are not mapped block the export themselves."""


MULTI_OPS["irad.primitives.guard_shape"] = _guard_shape
MULTI_OPS["irad.primitives.guard_dtype"] = _guard_shape  # no node either: an ONNX graph's types are fixed


@_reg("builtins.max", "builtins.min")
def _builtin_max(b: _Builder, op: Op, out: str) -> None:
    """``max(a, b, ...)``/``max([a, b, ...])`` of scalars of one dtype: a variadic ``Max``/``Min``
    (Python returns one of its arguments, so mixed int/float arguments have a data-dependent type)."""
    if _extra_kw(op):
        raise _Unsupported(f"{op.prim} with {_extra_kw(op)}")
    parts = list(op.args[0]) if len(op.args) == 1 and isinstance(op.args[0], (list, tuple)) else list(op.args)
    dt = _out_dtype(op)
    if not parts or any(b.meta(a)[1] or b.meta(a)[0] != dt for a in parts):
        raise _Unsupported(f"{op.prim} of arrays or of mixed types")
    b.node("Max" if op.prim == "builtins.max" else "Min", [b.cast(a, dt) for a in parts], out=out)
