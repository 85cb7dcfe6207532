"""Import: an ONNX model -> numpy source -> irad Graph (docs/onnx_import.md).

``to_source`` parses and checks the model, infers its static shapes, and asks the handler of each
node (``node.NODES``/``ML_NODES``, filled by ``load_ops``, ``load_nn``, ``load_ml``) for its numpy
expressions; nodes of constant inputs are computed at once.  A model file is untrusted input
(DESIGN.md §7): no ONNX name or attribute value is ever spliced into the generated source (see
``node``).  A model that fails a check, or has nodes irad cannot read, raises ``LoadError``
listing every problem: a model is never half-loaded.
"""
from __future__ import annotations

import math
import operator
import re
from typing import Any, Callable, Iterator, NamedTuple, Sequence, cast

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from ..errors import LoadError
from ..ir import Graph
from ..lower import literal
from . import load_ml, load_nn, load_ops  # noqa: F401  (each fills its handler table)
from .load_ops import EINSUM
from .node import ML_NODES, NODES, Node, ident, to_array
from .ops import _Unsupported

def _parse(model: "onnx.ModelProto | str | bytes", shapes: "dict[str, Sequence[int]] | None" = None
           ) -> onnx.ModelProto:
    """The model with functions inlined, ``shapes`` given to its dynamic inputs and shapes
    inferred, or ``LoadError``: a file that does not parse or check is refused before any of it is
    read."""
    label = str(model) if isinstance(model, str) or hasattr(model, "__fspath__") else \
        model.graph.name if isinstance(model, onnx.ModelProto) else "<model>"
    try:
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        elif isinstance(model, str) or hasattr(model, "__fspath__"):
            model = onnx.load(model)
        else:
            model = _copy(model)  # the caller's model stays as it was
        if model.functions:  # rules exported as ONNX functions (``export(..., inline=False)``)
            from onnx import inliner
            model = inliner.inline_local_functions(model)
        _before_inference(model.graph)
        if shapes:
            _fix_shapes(model, shapes)
        # The shapes a file declares for intermediate values and outputs are claims, not facts:
        # inference computes them from the inputs' (a non-strict merge would keep a wrong claim).
        del model.graph.value_info[:]
        for o in model.graph.output:
            o.type.tensor_type.ClearField("shape")
        # data_prop: shapes computed by Shape/Gather/Concat chains (exporters' reshapes) become static.
        # ONNX infers nothing (or wrongly) after most ai.onnx.ml ops, so strictness would refuse
        # their models: ``to_source`` infers every other node of theirs one by one (``_infer_node``).
        strict = not _has_ml(model.graph)
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=strict, data_prop=True)
    except LoadError:
        raise
    except Exception as err:  # NOTE: untrusted bytes: whatever onnx raises, the model is refused
        raise LoadError(label, [f"{type(err).__name__}: {err}"]) from err


def _static_shape(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    tt = vi.type.tensor_type
    if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
        return tuple(int(d.dim_value) for d in tt.shape.dim)
    return None


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def _has_ml(g: onnx.GraphProto) -> bool:
    return any(node.domain == "ai.onnx.ml" for node in g.node)


def _nodes(g: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``g`` and of the graphs its nodes carry (``If``/``Loop`` bodies)."""
    for node in g.node:
        yield node
        for a in node.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                yield from _nodes(sub)


def _before_inference(g: onnx.GraphProto) -> None:
    """Refuse what ONNX's own shape inference cannot be trusted with: an Einsum equation outside
    the grammar can make it loop forever (``i-j->``), a Slice step near the int64 limits crash
    its data propagation (a segfault, or an allocation of gigabytes)."""
    problems = []
    tensors = {t.name: t for t in g.initializer}
    tensors.update((node.output[0], a.t) for node in _nodes(g) if node.op_type == "Constant" and node.output
                   for a in node.attribute if a.name == "value" and a.type == AttributeProto.TENSOR)
    for node in _nodes(g):
        if node.op_type == "Einsum":
            eq = [a.s for a in node.attribute if a.name == "equation" and a.type == AttributeProto.STRING]
            if len(eq) != 1 or not EINSUM.match(eq[0].decode("utf-8", "replace")):
                problems.append(_problem(node, "attribute equation is not an einsum equation"))
        if node.op_type == "Slice" and len(node.input) > 4 and node.input[4] in tensors:
            try:
                steps = numpy_helper.to_array(tensors[node.input[4]])
            except Exception:  # NOTE: an unreadable tensor: reported when the node is read
                continue
            if steps.dtype.kind in "iu" and np.any(np.abs(steps.astype(np.float64)) >= 2.0 ** 62):
                problems.append(_problem(node, "a step near the int64 limits"))
    if problems:
        raise LoadError(g.name, problems)


def _fix_shapes(model: onnx.ModelProto, shapes: "dict[str, Sequence[int]]") -> None:
    """Give the inputs named in ``shapes`` those shapes (a dynamic dimension takes any size, a
    static one must match)."""
    by_name = {vi.name: vi for vi in model.graph.input}
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


def _problem(node: onnx.NodeProto, why: object) -> str:
    name = node.name or (node.output[0] if node.output else "")
    return f"ONNX {node.op_type[:40]!r} node {name[:80]!r}: {why}"


Inputs = list[tuple[str, str, tuple[int, ...]]]  # (identifier, dtype name, shape) of each model input
FOLD_LIMIT = 1 << 16  # the most elements a node's inputs, and its outputs, may have to be computed at load time
# ops whose work grows faster than their inputs and outputs (an einsum of four vectors): never
# computed at load time, so a small file cannot make loading slow
TRACE_LIMIT = 1 << 27  # the most elements of a value ``load`` computes when it traces a model
NOT_FOLDED = frozenset({"Einsum", "MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
                        "LinearClassifier", "LinearRegressor"})


class Imported(NamedTuple):
    """What ``to_source`` reads from a model."""
    source: str                 # ``def model(<inputs>[, params]): ...``
    namespace: dict[str, Any]   # the constants the source names (arrays, strings)
    inputs: Inputs              # the model's inputs, as the function's leading parameters
    params: dict[str, np.ndarray]  # with params="inputs": the initial value of each parameter
    largest: int                # the most elements of a value the function computes (of known size)


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
    kinds: dict[tuple[str, int], Callable[[], np.ndarray]] = {
        ("value", AttributeProto.TENSOR): lambda: to_array(a.t, "value"),
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
    """Python/numpy source of an ONNX model's graph (one handler per op type in ``NODES``).

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
        shape = _static_shape(vi)
        if shape is not None:
            sizes[vi.name] = shape
        try:
            dtypes[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            pass
    values: dict[str, np.ndarray] = {}
    for t in g.initializer:
        try:
            c = to_array(t, f"initializer {t.name[:80]!r}")
        except _Unsupported as err:
            problems.append(str(err))
            continue
        sizes[t.name], dtypes[t.name] = c.shape, c.dtype
        if params == "inputs" and c.dtype.kind == "f" and c.ndim >= 1:
            names[t.name] = ident(t.name, used)
            values[t.name] = c.copy()
            key = ident("key_" + t.name, used)
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
        names[vi.name] = ident(vi.name, used)
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
            names[n] = ident("c_" + n, used)
            glob[names[n]] = c
            return names[n]
        if n in failed:
            raise KeyError(f"its input {n[:80]!r} is a value reported above")
        raise KeyError(f"no value named {n[:80]!r}")

    per_node = _has_ml(g)  # ONNX's inference stops at ai.onnx.ml ops: infer the others one by one
    for node in g.node:
        mine: list[str] = []
        n = Node(node, ref, consts, sizes, mine, used, glob, opset, dtypes)
        try:
            if node.domain not in ("", "ai.onnx", "ai.onnx.ml"):
                raise _Unsupported(f"an op of domain {node.domain[:40]!r}")
            if per_node and node.domain != "ai.onnx.ml":
                _infer_node(node, sizes, dtypes, consts, opset, model.opset_import)
            if node.op_type == "Constant":
                consts[node.output[0]] = _constant_node(node)
                continue
            handler = (ML_NODES if node.domain == "ai.onnx.ml" else NODES).get(node.op_type)
            if handler is None and node.op_type in _CONTROL_FLOW:
                raise _Unsupported("control flow with a subgraph (Loop, Scan, If) is not imported yet; a model "
                                   "irad exported from a re-rolled loop can be exported unrolled instead, "
                                   "inside irad.loops.rerolling(False)")
            if handler is None:
                raise _Unsupported("no numpy mapping")
            exprs = handler(n)
            if n.unread():
                raise _Unsupported(f"attributes irad does not read: {', '.join(a[:40] for a in n.unread())}")
            exprs = exprs if isinstance(exprs, list) else [exprs]
            outs = [(o, e) for o, e in zip(node.output, exprs) if o]
            if not n.dynamic and _cheap(node, [o for o, _ in outs], sizes):
                _compute_now(outs, mine, glob, consts)
                continue
        except (_Unsupported, KeyError, IndexError, ValueError) as err:
            problems.append(_problem(node, err.args[0] if isinstance(err, KeyError) and err.args else err))
            failed.update(node.output)
            continue
        lines.extend(mine)
        for o, e in outs:
            out = names[o] = ident(o, used)
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
    fname = ident(g.name or "model", used)
    args = [n for n, _, _ in inputs] + (["params"] if params == "inputs" else [])
    src = f"def {fname}({', '.join(args)}):\n" + "\n".join(lines) + f"\n    return {', '.join(results)}\n"
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", src))
    largest = max((math.prod(sizes[o]) for o in names if o in sizes), default=0)
    return Imported(src, {k: v for k, v in glob.items() if k in words}, inputs, values, largest)


#: ONNX ops whose attributes hold subgraphs
_CONTROL_FLOW = ("Loop", "Scan", "If")


def _cheap(node: onnx.NodeProto, outs: list[str], sizes: dict[str, tuple[int, ...]]) -> bool:
    """Whether a node of constant inputs is computed at load time: its inputs and outputs of
    known, small sizes (known before computing: a file cannot make irad allocate), its work
    linear in them."""
    if node.op_type in NOT_FOLDED or not all(o in sizes for o in outs):
        return False
    ins = [i for i in node.input if i]
    return (all(i in sizes for i in ins) and sum(math.prod(sizes[i]) for i in ins) <= FOLD_LIMIT
            and sum(math.prod(sizes[o]) for o in outs) <= FOLD_LIMIT)


def _infer_node(node: onnx.NodeProto, sizes: dict[str, tuple[int, ...]], dtypes: dict[str, np.dtype],
                consts: dict[str, np.ndarray], opset: int, opsets: Any) -> None:
    """The static shapes and types of one node's outputs, from those of its inputs as irad knows
    them (ONNX's whole-model inference does not see through ai.onnx.ml ops)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain="")
        types = {i: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(dtypes[i]), sizes.get(i))
                 for i in node.input if i and i in dtypes}
        data = {i: numpy_helper.from_array(consts[i], i) for i in node.input if i in consts}
        out = onnx.shape_inference.infer_node_outputs(schema, node, types, data, opset_imports=list(opsets))
    except Exception as err:  # NOTE: what ONNX says of an ill-typed node, reported per node
        raise _Unsupported(f"shape inference: {type(err).__name__}: {str(err)[:200]}") from None
    for o in node.output:
        sizes.pop(o, None)
        t = out.get(o)
        if t is None or not t.HasField("tensor_type"):
            continue
        tt = t.tensor_type
        dtypes[o] = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            sizes[o] = tuple(int(d.dim_value) for d in tt.shape.dim)


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
    initializers (their values from the file in ``fn.params``), so ``irad.grad`` of a scalar loss
    of ``fn(x, params)`` with respect to ``params`` differentiates the weights.
    ``shapes={"x": (32, 4)}`` fixes inputs of dynamic shape.
    ``fn.__irad_source__`` is its source."""
    return _function(to_source(model, params, shapes), params)


def _function(imported: Imported, params: str) -> Callable[..., Any]:
    from ..weakcache import compile_source

    src, glob, values = imported.source, imported.namespace, imported.params
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
    if imported.largest > TRACE_LIMIT:  # load runs the model once: a file must not make it allocate
        raise LoadError(imported.source.split("(", 1)[0][4:], [
            f"a value of {imported.largest} elements: load() traces the model on example inputs; "
            "load_function(...) gives the function without running it"])
    fn = _function(imported, params)
    rng = np.random.default_rng(0)
    examples: list[Any] = [rng.standard_normal(s).astype(dt) if np.dtype(dt).kind == "f" else np.zeros(s, dt)
                           for _, dt, s in imported.inputs]
    if params == "inputs":
        examples.append(imported.params)
    return cast(Graph, trace(fn, *examples))

