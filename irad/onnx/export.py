"""Export: an irad Graph (or a function compiled by irad) -> ``onnx.ModelProto``."""
from __future__ import annotations

from typing import Any, Callable, Sequence, cast

import numpy as np
import onnx

from onnx import helper, numpy_helper

from .. import loops
from ..ir import GUARD_PRIMS, Graph, Op, Type, Var
from .ops import _DT, MULTI_OPS, OPS, OPSET, Emit, ExportError, _Builder, _dtype, _shape, _Unsupported


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
    """An ONNX model computing ``g``; raises ``ExportError`` listing every op it cannot map.

    A rule that is still a call (``rule_fwd[...]``/``pullback[...]``) becomes a call of an ONNX
    function in the ``irad`` domain named after it (``pullback.numpy.tanh``), whose body is the
    rule's traced body (see ``_RuleFunctions``).
    """
    g = loops.unroll(g, keep=_loop_exports)  # a loop whose step holds a rule call or a guard is written out
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
    rules = _RuleFunctions(g) if any(op.prim in _RULE_PRIMS for op in g.ops) else None
    _emit_ops(b, g.ops, problems, rules, closure_lines)
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
    opsets = [helper.make_opsetid("", OPSET)]
    functions = list(rules.functions.values()) if rules is not None else []
    if functions:
        opsets.append(helper.make_opsetid(FUNCTION_DOMAIN, 1))
    return helper.make_model(graph, opset_imports=opsets, producer_name="irad", functions=functions)


_RULE_PRIMS = ("rule_fwd", "pullback")
#: the ONNX domain of the functions a rule call exports as
FUNCTION_DOMAIN = "irad"


def _rule_label(op: Op) -> str:
    rule = op.kw("_rule")
    return f"{op.prim}[{getattr(rule, 'name', rule)}]"


def _emit_ops(b: _Builder, ops: Sequence[Op], problems: list[str], rules: "_RuleFunctions | None",
              closure_lines: Any = iter(())) -> None:
    """Emit ONNX nodes for ``ops`` into ``b``; append one line per op that cannot be mapped."""
    for op in ops:
        if op.prim == "call_pullback":
            problems.append(next(closure_lines, f"call_pullback{_at(op)}: a closure"))
            continue
        if op.prim in GUARD_PRIMS and op.prim not in MULTI_OPS:
            problems.append(f"{op.prim}{_at(op)}: value-dependent control flow (a guard on a traced value) "
                            "has no static ONNX form")
            continue
        if op.prim in _RULE_PRIMS:  # reads its state, which is a set of tensors only in ONNX
            if rules is None:
                problems.append(f"{_rule_label(op)}{_at(op)}: a rule call inside a rule body")
            else:
                rules.emit(b, op, problems)
            continue
        if any(v.id not in b.names for v in op.inputs):
            continue  # an op reading the result of an op already reported: not a cause of its own
        if op.prim == loops.LOOP_PRIM:
            _emit_loop(b, op, problems)
            continue
        emit, multi = OPS.get(op.prim), MULTI_OPS.get(op.prim)
        if emit is None and multi is None:
            problems.append(f"{op.prim}{_at(op)}: no ONNX mapping")
            continue
        if multi is None and len(op.outs) != 1:
            problems.append(f"{op.prim}{_at(op)}: {len(op.outs)} outputs (only single-output ops are exported)")
            continue
        names = [b.prefix + (_clean(v.hint) + "_" if v.hint else "v") + str(v.id) for v in op.outs]
        try:
            for v in op.outs:
                _dtype(v.type)
            if multi is not None:
                multi(b, op, names)
            else:
                cast(Emit, emit)(b, op, names[0])  # (not None: checked above)
        except (_Unsupported, KeyError) as e:
            problems.append(f"{op.prim}{_at(op)}: {e}")
            continue
        for v, nm in zip(op.outs, names):
            b.names[v.id] = nm
            b.types[nm] = (_dtype(v.type), _shape(v.type))


def _loop_exports(op: Op) -> bool:
    """Can this loop op be one ONNX ``Loop``: is every op of its step (and of the loops inside it)
    one that exports without the rule functions, which only the top-level graph holds?"""
    for bop in loops.loop_of(op).body.ops:
        if bop.prim in _RULE_PRIMS or bop.prim == "call_pullback" or \
                (bop.prim in GUARD_PRIMS and bop.prim not in MULTI_OPS) or \
                (bop.prim == loops.LOOP_PRIM and not _loop_exports(bop)):
            return False
    return True


class _StepBuilder(_Builder):
    """Builds the body of an ONNX ``Loop``: names are unique in the whole model (they share the
    outer builder's counter and carry a prefix); constants live in the outer graph, whose values
    a body reads by name."""

    def __init__(self, outer: _Builder) -> None:
        super().__init__()
        self.outer = outer
        self.prefix = outer.fresh("step") + "_"
        self.types = dict(outer.types)

    def fresh(self, base: str = "t") -> str:
        return self.outer.fresh(base)

    def array(self, value: Any, dtype: str | None = None) -> str:
        name = self.outer.array(value, dtype)
        self.types[name] = self.outer.types[name]
        return name


def _emit_loop(b: _Builder, op: Op, problems: list[str]) -> None:
    """An ``irad.loop`` as an ONNX ``Loop`` of ``n`` trips: carries are its loop-carried values,
    invariants are read from the outer scope, a ``stack`` input's row is a ``Gather`` of the
    iteration number (``n - 1 - i`` for a reverse loop), an ``each`` input is stacked first; every
    output is a scan output, split back into one value per iteration for ``each`` outputs."""
    loop = loops.loop_of(op)
    body, nc, ni, n = loop.body, loop.n_carry, loop.n_inv, loop.n
    init, inv, xs = op.args
    sb = _StepBuilder(b)
    it, cond = sb.fresh("iter"), sb.fresh("cond")
    graph_in = [helper.make_tensor_value_info(it, onnx.TensorProto.INT64, []),
                helper.make_tensor_value_info(cond, onnx.TensorProto.BOOL, [])]
    try:
        carried = [b.cast(a, _dtype(v.type)) for a, v in zip(init, body.inputs[:nc])]
        for v in body.inputs[:nc]:
            nm = sb.fresh(sb.prefix + "carry")
            sb.names[v.id] = nm
            sb.types[nm] = (_dtype(v.type), _shape(v.type))
            graph_in.append(_value_info(nm, v.type))
        for v, a in zip(body.inputs[nc:nc + ni], inv):
            nm, dt, shape = b.atom(a)
            sb.names[v.id] = nm
            sb.types[nm] = (dt, shape)
        row = sb.node("Sub", [b.array(np.int64(n - 1)), it]) if loop.reverse else it
        for v, kind, a in zip(body.inputs[nc + ni:], loop.xs_kinds, xs):
            dt = _dtype(v.type)
            if kind == "stack":
                src = b.cast(a, dt)
            else:
                src = b.node("Concat", [b.node("Unsqueeze", [b.cast(x, dt), b.ints([0])]) for x in a], axis=0)
            nm = sb.node("Gather", [src, row], axis=0)
            sb.names[v.id] = nm
            sb.types[nm] = (dt, _shape(v.type))
        body_problems: list[str] = []
        _emit_ops(sb, body.ops, body_problems, None)
        if body_problems:
            problems.extend(f"{p} (in the step of the loop{_at(op)})" for p in body_problems)
            return
        graph_out = [helper.make_tensor_value_info(sb.node("Identity", [cond]), onnx.TensorProto.BOOL, [])]
        elems = []  # (dtype, shape) of each step output
        for o in body.outputs:
            src, dt, shape = sb.atom(o)
            want = _dtype(o.type) if isinstance(o, Var) else dt
            nm = sb.node("Identity", [src]) if want == dt else sb.node("Cast", [src], to=_DT[want])
            graph_out.append(helper.make_tensor_value_info(nm, _DT[want], list(shape)))
            elems.append((want, shape))
        step = helper.make_graph(sb.nodes, sb.prefix.rstrip("_"), graph_in, graph_out)
        results = b.node_outs("Loop", [b.array(np.int64(n)), ""] + carried, [None] * len(body.outputs), body=step)
    except _Unsupported as e:
        problems.append(f"{op.prim}{_at(op)}: {e}")
        return
    for o, nm in zip(op.outs[:nc], results[:nc]):
        b.names[o.id] = nm
        b.types[nm] = (_dtype(o.type), _shape(o.type))
    at = nc
    for kind, scan, (dt, shape) in zip(loop.ys_kinds, results[nc:], elems[nc:]):
        if kind == "stack":  # scan rows are in trip order: a reverse loop's are reversed
            nm = b.node("Gather", [scan, b.ints(range(n - 1, -1, -1))], axis=0) if loop.reverse else scan
            b.names[op.outs[at].id] = nm
            b.types[nm] = (dt, (n,) + tuple(shape))
            at += 1
            continue
        for i in range(n):
            nm = b.node("Gather", [scan, b.array(np.int64(n - 1 - i if loop.reverse else i))], axis=0)
            b.names[op.outs[at + i].id] = nm
            b.types[nm] = (dt, tuple(shape))
        at += n


def _name_outputs(nodes: list[onnx.NodeProto], srcs: list[str]) -> list[str]:
    """Make ``srcs`` (values computed by ``nodes``, or inputs/constants) the outputs ``out0``, ...
    of a function body, renaming the values in place and giving every internal value and node a
    canonical name (so that equal bodies serialise equally).

    NOTE: a body ending in ``Identity(v) -> out0`` where ``v`` is computed inside is valid ONNX, but
    onnxruntime 1.32's basic graph optimizer (after it inlines the function) then drops values
    that later calls read; naming the producing node's output ``out0`` avoids the pattern.
    """
    produced = {o for n in nodes for o in n.output}
    ren: dict[str, str] = {}
    for j, src in enumerate(srcs):
        if src in produced and src not in ren:
            ren[src] = f"out{j}"
    k = 0
    for n in nodes:
        for o in n.output:
            if o not in ren:
                ren[o] = f"t{k}"
                k += 1
    for i, n in enumerate(nodes):
        n.input[:] = [ren.get(x, x) for x in n.input]
        n.output[:] = [ren.get(x, x) for x in n.output]
        n.name = f"n{i}"
    outs = []
    for j, src in enumerate(srcs):
        if ren.get(src) != f"out{j}":
            nodes.append(helper.make_node("Identity", [ren.get(src, src)], [f"out{j}"], name=f"n{len(nodes)}"))
        outs.append(f"out{j}")
    return outs


def _live(ops: Sequence[Op], results: Sequence[Any]) -> list[Op]:
    """The ops that ``results`` depend on (a function body holds no dead nodes)."""
    need = {a.id for a in results if isinstance(a, Var)}
    kept = []
    for op in reversed(ops):
        if any(o.id in need for o in op.outs):
            kept.append(op)
            need.update(v.id for v in op.inputs)
    return kept[::-1]


class _FunctionBuilder(_Builder):
    """Builds the body of an ONNX function: constants are ``Constant`` nodes (a FunctionProto has
    no initializers)."""

    def store_constant(self, a: np.ndarray, name: str) -> None:
        self.nodes.append(helper.make_node("Constant", [], [name], name=self.fresh("n_Constant"),
                                           value=numpy_helper.from_array(a, name)))


class _RuleFunctions:
    """The rule calls of a graph as ONNX functions named after the rule.

    Uses the plans of ``inline_pullbacks`` (each rule's forward and pullbacks traced into
    primitive ops on values of the right types) but keeps each one behind a call: the forward
    function returns the rule's outputs and then the state its pullbacks read, as tensors; each
    pullback function takes that state and the cotangent.  Static state (shapes, axes) is baked
    into the bodies, so one function is made per distinct body (``pullback.numpy.sum``,
    ``pullback.numpy.sum.2``, ...).
    """

    def __init__(self, g: Graph) -> None:
        from ..passes.inline import plan_rules

        self.reasons: dict[int, str] = {}
        self.plans = plan_rules(g, self.reasons)
        self.index = {id(op): k for k, op in enumerate(g.ops)}
        self.functions: dict[str, onnx.FunctionProto] = {}
        self._bodies: dict[bytes, str] = {}
        defined_in = {o.id: k for k, (ops, _) in self.plans.items() for op in ops for o in op.outs}
        #: plan -> the Vars it defines that other plans read (a forward's state leaves)
        self.exports: dict[int, list[Var]] = {k: [] for k in self.plans}
        bound = {k: {a.id for _, a in binds if isinstance(a, Var)} for k, (_, binds) in self.plans.items()}
        for k, (ops, binds) in self.plans.items():
            reads = [v for op in ops for v in op.inputs] + [a for _, a in binds if isinstance(a, Var)]
            for v in reads:
                src = defined_in.get(v.id)
                if src is not None and src != k and v.id not in bound[src] and \
                        all(v.id != e.id for e in self.exports[src]):
                    self.exports[src].append(v)  # (a result the host graph names is not state)

    def emit(self, b: _Builder, op: Op, problems: list[str]) -> None:
        k = self.index[id(op)]
        label = _rule_label(op)
        plan = self.plans.get(k)
        if plan is None:
            why = self.reasons.get(k, "its body was not traced")
            problems.append(f"{label}{_at(op)}: a rule with no ONNX form: {why}")
            return
        ops, binds = plan
        ops = _live(ops, [a for _, a in binds] + self.exports[k])
        defined = {o.id for o2 in ops for o in o2.outs}
        ins: list[Var] = []
        for o2 in ops:
            for v in o2.inputs:
                if v.id not in defined and all(v.id != w.id for w in ins):
                    ins.append(v)
        for _, a in binds:
            if isinstance(a, Var) and a.id not in defined and all(a.id != w.id for w in ins):
                ins.append(a)
        if any(v.id not in b.names for v in ins):
            return  # it reads what an op already reported computes
        if not ins:  # a constant (a pullback of the seed): its ops go in the graph, like inlined ones
            _emit_ops(b, ops, problems, None)
            for old, a in binds:
                try:
                    b.names[old] = b.atom(a)[0]
                except (_Unsupported, KeyError) as e:
                    problems.append(f"{label}{_at(op)}: {e}")
            return
        fb = _FunctionBuilder()
        in_names = [f"in{i}" for i in range(len(ins))]
        for v, nm in zip(ins, in_names):
            fb.names[v.id] = nm
            fb.types[nm] = b.types[b.names[v.id]]
        body_problems: list[str] = []
        _emit_ops(fb, ops, body_problems, None)
        if body_problems:
            problems.extend(f"{label}{_at(op)}: in its body: {p}" for p in body_problems)
            return
        results = [a for _, a in binds] + self.exports[k]
        srcs, out_types = [], []
        for j, a in enumerate(results):
            try:
                src, dt, shape = fb.atom(a)
            except _Unsupported as e:
                problems.append(f"{label}{_at(op)}: result {j}: {e}")
                return
            srcs.append(src)
            out_types.append((dt, shape))
        out_names = _name_outputs(fb.nodes, srcs)
        rule = op.kw("_rule")
        fname = self._register(f"{op.prim.replace('rule_fwd', 'fwd')}.{getattr(rule, 'name', rule)}", fb,
                               in_names, out_names)
        outs = [b.fresh(fname.rsplit(".", 1)[-1]) for _ in results]
        b.nodes.append(helper.make_node(fname, [b.names[v.id] for v in ins], outs, domain=FUNCTION_DOMAIN,
                                        name=b.fresh("n_" + fname)))
        for nm, t in zip(outs, out_types):
            b.types[nm] = t
        for (old, _), nm in zip(binds, outs):
            b.names[old] = nm
        for v, nm in zip(self.exports[k], outs[len(binds):]):
            b.names[v.id] = nm

    def _register(self, base: str, fb: _Builder, ins: list[str], outs: list[str]) -> str:
        """The name of a function with this body: an existing one, or ``base`` (``base.2``, ...)."""
        body = helper.make_function(FUNCTION_DOMAIN, "f", ins, outs, fb.nodes, [helper.make_opsetid("", OPSET)])
        key = base.encode() + b"\0" + body.SerializeToString()
        name = self._bodies.get(key)
        if name is None:
            name, n = base, 1
            while name in self.functions:
                n += 1
                name = f"{base}.{n}"
            self._bodies[key] = name
            self.functions[name] = helper.make_function(FUNCTION_DOMAIN, name, ins, outs, fb.nodes,
                                                        [helper.make_opsetid("", OPSET)])
        return name


def export(f: Callable[..., Any], *args: Any, argnums: int | Sequence[int] = 0, gradient: bool = True,
           path: str | None = None, inline: bool = True, **kwargs: Any) -> onnx.ModelProto:
    """Compile ``f`` at ``args`` with irad and export it to ONNX.

    ``gradient=True``: outputs are the value, then the gradient leaves of each argnum
    (``grad.params.W1``, ...); ``gradient=False``: the traced forward graph only.  Inputs are the
    dynamic (non-static) leaves of the arguments in order, named by their pytree paths.
    ``inline=False`` keeps every rule a call: the model's graph reads like the joint graph, each
    forward and pullback an ONNX function named after its rule (``pullback.numpy.tanh``).
    """
    from .. import passes as irad_passes
    from ..api import compile as irad_compile
    from ..trace import trace_values

    fname = getattr(f, "__name__", "f")
    if gradient:
        # NOTE: the structure passes call SciPy/LAPACK helpers (cho_solve, lu_solve) that have no
        # ONNX form: an exported program keeps numpy's solves, which it maps
        skip = {irad_passes.cholesky_consumers, irad_passes.triangular_solves, irad_passes.shared_lu}
        if not inline:
            skip.add(irad_passes.inline_pullbacks)
        pipeline = tuple(p for p in irad_passes.PIPELINE if p not in skip)
        prog = irad_compile(f, *args, argnums=argnums, passes=pipeline, **kwargs)
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
        if loops.CONFIG.reroll:  # as grad does: a long loop exports as one ``Loop``
            g = loops.reroll(g)
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


