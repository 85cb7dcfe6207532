"""Export: an irad Graph (or a function compiled by irad) -> ``onnx.ModelProto``."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import onnx
from onnx import helper

from ..ir import GUARD_PRIMS, Graph, Op, Type, Var
from .ops import _DT, OPS, OPSET, ExportError, _Builder, _dtype, _shape, _Unsupported

def _at(op: Op) -> str:
    return f" at {op.loc}" if op.loc else ""


def blockers(g: Graph) -> list[str]:
    """One line per op of ``g`` that keeps it from exporting (empty: it exports)."""
    try:
        export_graph(g)
    except ExportError as e:
        return e.problems
    return []


def _value_info(name: str, t: Type) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _DT[_dtype(t)], list(_shape(t)))


def _clean(name: str) -> str:
    return name or "x"


def export_graph(g: Graph, input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
                 name: str | None = None) -> onnx.ModelProto:
    """An ONNX model computing ``g``; raises ``ExportError`` listing every op it cannot map."""
    from .. import passes as irad_passes

    b = _Builder()
    problems: list[str] = []
    closure_lines = iter(irad_passes.not_serialisable(g))
    input_names = list(input_names) if input_names is not None else \
        [_clean(v.hint) or f"x{i}" for i, v in enumerate(g.inputs)]
    seen: set[str] = set()
    inputs = []
    for v, nm in zip(g.inputs, input_names):
        base, k = nm, 1
        while nm in seen:
            nm, k = f"{base}_{k}", k + 1
        seen.add(nm)
        b.names[v.id] = nm
        try:
            inputs.append(_value_info(nm, v.type))
            b.types[nm] = (_dtype(v.type), _shape(v.type))
        except _Unsupported as e:
            problems.append(f"input {nm}: {e} has no ONNX type")
    for op in g.ops:
        if op.prim == "call_pullback":
            problems.append(next(closure_lines, f"call_pullback{_at(op)}: a closure"))
            continue
        if op.prim in GUARD_PRIMS:
            problems.append(f"{op.prim}{_at(op)}: value-dependent control flow (a guard on a traced value) "
                            "has no static ONNX form")
            continue
        emit = OPS.get(op.prim)
        if emit is None:
            prim, what = op.prim, "no ONNX mapping"
            if op.prim in ("pullback", "rule_fwd"):
                rule = op.kw("_rule")
                prim = f"{op.prim}[{getattr(rule, 'name', rule)}]"
                what = "a rule not inlined into primitive ops (its body was not traced)"
            problems.append(f"{prim}{_at(op)}: {what}")
            continue
        if any(v.id not in b.names for v in op.inputs):
            continue  # a mapped op reading the result of an op already reported: not a cause of its own
        if len(op.outs) != 1:
            problems.append(f"{op.prim}{_at(op)}: {len(op.outs)} outputs (only single-output ops are exported)")
            continue
        out = op.out
        nm = (_clean(out.hint) + "_" if out.hint else "v") + str(out.id)
        try:
            _dtype(out.type)
            emit(b, op, nm)
        except (_Unsupported, KeyError) as e:
            problems.append(f"{op.prim}{_at(op)}: {e}")
            continue
        b.names[out.id] = nm
        b.types[nm] = (_dtype(out.type), _shape(out.type))
    if problems:
        raise ExportError(name or g.name, problems)
    output_names = list(output_names) if output_names is not None else [f"out{i}" for i in range(len(g.outputs))]
    outputs = []
    for a, nm in zip(g.outputs, output_names):
        base, k = nm, 1
        while nm in seen or nm in b.types:  # an argument called ``value``, say
            nm, k = f"{base}_{k}", k + 1
        seen.add(nm)
        try:
            src, dt, shape = b.atom(a)
        except _Unsupported as e:
            raise ExportError(name or g.name, [f"output {nm}: {e}"]) from None
        want = _dtype(a.type) if isinstance(a, Var) else dt
        b.node("Identity", [src], out=nm) if want == dt else b.node("Cast", [src], out=nm, to=_DT[want])
        outputs.append(helper.make_tensor_value_info(nm, _DT[want], list(shape)))
    graph = helper.make_graph(b.nodes, name or g.name, inputs, outputs, initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="irad")
    return model


def export(f: Callable[..., Any], *args: Any, argnums: int | Sequence[int] = 0, gradient: bool = True,
           path: str | None = None, **kwargs: Any) -> onnx.ModelProto:
    """Compile ``f`` at ``args`` with irad and export it to ONNX.

    ``gradient=True``: outputs are the value, then the gradient leaves of each argnum
    (``grad.params.W1``, ...); ``gradient=False``: the traced forward graph only.  Inputs are the
    dynamic (non-static) leaves of the arguments in order, named by their pytree paths.
    """
    from ..api import compile as irad_compile
    from ..trace import trace_values

    fname = getattr(f, "__name__", "f")
    if gradient:
        prog = irad_compile(f, *args, argnums=argnums, **kwargs)
        g = prog.graph
        names = [f"value{i}" if prog.n_out > 1 else "value" for i in range(prog.n_out)]
        ins = [_clean(v.hint) or f"x{i}" for i, v in enumerate(prog.forward.inputs)]
        for a, tree, idx in prog.grad_slots:
            arg_paths = list(tree.paths(_arg_name(prog.forward, a, args)))
            for pth, k in zip(arg_paths, idx):
                if k is not None:
                    names.append("grad." + pth)
        model = export_graph(g, ins, names, name=f"{fname}_grad")
    else:
        g, _, _ = trace_values(f, args, kwargs)
        model = export_graph(g, None, [f"out{i}" if len(g.outputs) > 1 else "out" for i in range(len(g.outputs))],
                             name=fname)
    onnx.checker.check_model(model, full_check=True)
    if path is not None:
        onnx.save(model, path)
    return model


def _arg_name(g: Graph, a: int, args: tuple[Any, ...]) -> str:
    """The readable name of positional argument ``a``: the common prefix of its input hints."""
    from ..pytree import flatten

    statics = {i for i, _ in g.statics}
    pos = sum(flatten(x)[1].num_leaves for x in args[:a])
    n = flatten(args[a])[1].num_leaves
    k = sum(1 for i in range(pos) if i not in statics)
    for i in range(pos, pos + n):
        if i not in statics:
            hint = g.inputs[k].hint
            leaves_tree = flatten(args[a])[1]
            sub = list(leaves_tree.paths(""))[i - pos]
            if sub and hint.endswith(sub):
                return hint[: len(hint) - len(sub)].rstrip(".")
            return hint if not sub else f"arg{a}"
    return f"arg{a}"


