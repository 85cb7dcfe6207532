"""Derivative operators built from the program transforms: Jacobians as one batched program.

``jacrev(f)(*args)`` runs two compiled programs: ``f``'s forward program (its outputs and the
residuals its pullback reads) and the *Jacobian program*: the backward graph batched
(``irad.batching``) over all output cotangents at once and seeded with the identity, so that
row ``k`` of each batched cotangent is the gradient of output element ``k``.  The Jacobian
program also cuts the rows into blocks, one per (output leaf, input leaf) with JAX's layout:
output shape + input shape, nested as the output's structure of the input's structure (of a
tuple over ``argnums`` when ``argnums`` is a tuple).

``jacobian_graph`` builds such a program from any graph whose derivative inputs are seeded,
reverse (seeds are output cotangents, rows are outputs) or forward (seeds are input tangents,
rows are inputs); ``jacobian_program`` and ``batched_program`` lower them.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from . import ad
from .api import _argnums, _aux_split, _builder, _check_numbers, _deep, _is_complex, _wrt_inputs
from .passes.partition import evaluate_residuals, split
from .batching import Batcher, batch
from .rules import batch_rules  # noqa: F401  (the batching rules register themselves)
from .errors import GradError, GuardError, MutationError, def_site
from .ir import ArrayT, Graph, Op, ScalarT, Var, const
from .lower import Lowered, lower
from .pytree import TreeDef, flatten, unflatten
from .signature import NO_ASSUMPTIONS, Assumptions, ProgramCache, call_key, effect_dep
from .trace import trace_values


# ---- Jacobian graphs (for jacrev here, and forward mode's jacfwd) ------------------------------


class Block(NamedTuple):
    """One leaf on a side of a Jacobian: where it is in the graph (a seeded input, or a derivative
    output; None: the graph has none for it, its blocks are zeros), its shape and dtype."""

    position: int | None
    shape: tuple[int, ...]
    dtype: str


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def jacobian_graph(g: Graph, outs: Sequence[Block], ins: Sequence[Block], mode: str, keep: Sequence[int] = (),
                   name: str | None = None) -> Graph:
    """The Jacobian of a derivative graph ``g`` as one graph, seeded with the identity.

    ``outs``/``ins``: the leaves of the differentiated function's outputs and inputs.  ``mode="rev"``:
    ``g`` is a backward graph, ``outs[i].position`` the position of output ``i``'s cotangent among
    ``g``'s inputs, ``ins[j].position`` of input ``j``'s cotangent among its outputs.  ``mode="fwd"``:
    ``g`` is a JVP graph, ``ins[j].position`` the position of input ``j``'s tangent among ``g``'s
    inputs, ``outs[i].position`` of output ``i``'s tangent among its outputs.  The seeded inputs are
    batched over their total size ``N`` (``irad.batching.batch``) and defined in the graph by the
    rows of ``np.eye(N)``.

    The result takes ``g``'s other inputs, in order, and returns block ``(i, j)`` of shape
    ``outs[i].shape + ins[j].shape`` for every ``i`` then ``j``, then ``g``'s outputs at ``keep``
    (which must not depend on the seeds: values such as ``aux``).
    """
    if mode not in ("rev", "fwd"):
        raise ValueError(f"jacobian_graph: mode must be 'rev' or 'fwd', not {mode!r}")
    seeded, derived = (outs, ins) if mode == "rev" else (ins, outs)
    wanted = [d.position for d in derived if d.position is not None]
    sub = g.replace(outputs=tuple(g.outputs[p] for p in wanted) + tuple(g.outputs[k] for k in keep))
    seed_pos = [s.position for s in seeded if s.position is not None]
    n = sum(_size(s.shape) for s in seeded if s.position is not None)
    for k, a in zip(keep, sub.outputs[len(wanted):]):
        if isinstance(a, Var) and _depends(sub, a, seed_pos):
            raise ValueError(f"jacobian_graph: output {k} of {g.name} depends on the seeded inputs")
    bg = batch(sub, seed_pos, n) if n else sub
    ids = [v.id for v in bg.inputs] + [o.id for op in bg.ops for o in op.outs]
    b = Batcher(max(n, 1), 1 + max(ids, default=-1))
    # the seeds: each seeded input is its rows of the identity
    rows: dict[int, tuple[int, int]] = {}  # seeded leaf index -> (first row, number of rows)
    if n:
        dtypes = {s.dtype for s in seeded if s.position is not None}
        common = dtypes.pop() if len(dtypes) == 1 else "float64"
        eye = b.emit(np.eye, (const(n),), ArrayT(common, (n, n)), {"dtype": const(np.dtype(common))})
    at = 0
    for i, s in enumerate(seeded):
        if s.position is None:
            continue
        size = _size(s.shape)
        v = bg.inputs[s.position]
        if not n:  # every seeded leaf is empty: so is its seed
            b.ops.append(Op("numpy.zeros", (const(s.shape),), (("dtype", const(np.dtype(s.dtype))),), (v,), np.zeros))
            continue
        rows[i] = (at, size)
        at += size
        seed = Var(v.id, v.type, f"{v.hint}_seed" if v.hint else "seed")  # (named as what it is, not a cotangent)
        if size == n and s.shape == (n,) and s.dtype == common and b.ops[-1].outs == (eye,):
            eye_op = b.ops.pop()
            b.ops.append(Op(eye_op.prim, eye_op.args, eye_op.kwargs, (seed,), eye_op.fn))
            eye = seed
            continue
        part = eye if size == n else b.index(eye, (slice(None), slice(at - size, at)), (n, size))
        if s.dtype != common:
            part = b.emit(np.ndarray.astype, (part, const(np.dtype(s.dtype))), ArrayT(s.dtype, (n, size)))
        b.ops.append(Op("numpy.reshape", (part, const((n,) + s.shape)), (), (seed,), np.reshape))
    n_seed_ops = len(b.ops)
    # the blocks
    derived_out = {i: bg.outputs[k] for k, i in enumerate(i for i, d in enumerate(derived) if d.position is not None)}
    blocks = []
    for i, o in enumerate(outs):
        for j, x in enumerate(ins):
            s_i, d_i = (i, j) if mode == "rev" else (j, i)
            shape = o.shape + x.shape
            dt = derived[d_i].dtype
            if s_i not in rows or d_i not in derived_out:
                blocks.append(b.emit(np.zeros, (const(shape),), ArrayT(dt, shape), {"dtype": const(np.dtype(dt))}))
                continue
            first, count = rows[s_i]
            full = derived_out[d_i]
            rest = full.type.shape[1:] if isinstance(full.type, ArrayT) else ()
            part = full if count == n else b.index(full, (slice(first, first + count),), (count,) + rest)
            if isinstance(part.type, ArrayT) and part.type.shape == shape and (mode == "rev" or not (x.shape and o.shape)):
                blocks.append(part)  # (forward rows are the input's elements: a square block still transposes)
            elif mode == "rev" or not (x.shape and o.shape):
                blocks.append(b.emit(np.reshape, (part, const(shape)), ArrayT(dt, shape)))
            else:  # rows are the input's elements: (input..., output...) -> (output..., input...)
                t = b.emit(np.reshape, (part, const(x.shape + o.shape)), ArrayT(dt, x.shape + o.shape))
                perm = tuple(range(len(x.shape), len(x.shape) + len(o.shape))) + tuple(range(len(x.shape)))
                blocks.append(b.emit(np.transpose, (t, const(perm)), ArrayT(dt, shape)))
    inputs = tuple(v for k, v in enumerate(bg.inputs) if k not in set(seed_pos))
    ops = tuple(b.ops[:n_seed_ops]) + bg.ops + tuple(b.ops[n_seed_ops:])
    kept = sub.outputs[len(wanted):]
    return Graph(name or f"{g.name}_jacobian", inputs, ops, tuple(blocks) + tuple(kept), None, None, (),
                 bg.provenance + (f"jacobian ({mode}): {len(outs)} x {len(ins)} blocks, {n} seeded rows",))


def _depends(g: Graph, v: Var, positions: Sequence[int]) -> bool:
    """Does ``v`` depend on ``g``'s inputs at ``positions``?"""
    dep = {g.inputs[p].id for p in positions}
    for op in g.ops:
        if any(a.id in dep for a in op.inputs):
            dep.update(o.id for o in op.outs)
    return v.id in dep


def _cleanup(g: Graph) -> Graph:
    """CSE and DCE: batching repeats alignments and leaves the broadcasts of unused outputs."""
    from . import passes as irad_passes  # NOTE: as api.py does: passes/ imports the package
    out: Graph = irad_passes.run(g, (irad_passes.cse, irad_passes.dce))
    return out


def jacobian_program(g: Graph, outs: Sequence[Block], ins: Sequence[Block], mode: str, name: str,
                     keep: Sequence[int] = ()) -> tuple[Lowered, Graph]:
    """``jacobian_graph`` after CSE and DCE, lowered: ``(program, graph)``."""
    jg = _cleanup(jacobian_graph(g, outs, ins, mode, keep, name))
    return lower(jg, name), jg


def batched_program(g: Graph, batched: Sequence[int], size: int, name: str) -> tuple[Lowered, Graph]:
    """``g`` batched over a leading axis of ``size`` of its inputs at ``batched``, after CSE and DCE,
    lowered: ``(program, graph)``."""
    bg = _cleanup(batch(g, batched, size))
    return lower(bg, name), bg


# ---- jacrev ------------------------------------------------------------------------------------


@dataclass
class JacobianProgram:
    """The two programs of one call key: ``fwd(*inputs) -> outputs + aux + residuals`` and
    ``jac(*residuals) -> blocks`` (one per output leaf and input leaf, output-major); ``graph`` is
    the Jacobian program's graph, ``forward`` the traced one."""

    fwd: Callable[..., Any]
    jac: Callable[..., Any]
    fwd_source: str
    source: str
    forward: Graph
    graph: Graph
    dyn_pos: list[int]
    n_y: int  # output leaves
    n_out: int  # output and aux leaves: the residuals follow
    n_wrt: int  # input leaves differentiated (blocks per output leaf)
    out_tree: TreeDef
    slots: list[tuple[TreeDef, list[int | None]]]  # per argnum: its tree, the wrt index of each leaf
    single: bool
    aux_tree: TreeDef | None = None
    assumptions: Assumptions = field(default=NO_ASSUMPTIONS, repr=False)
    _builders: Any = field(default=None, repr=False)

    @property
    def deps(self) -> tuple[tuple[Any, ...], ...]:
        return self.assumptions.deps

    def guard_failure(self, e: GuardError) -> str:
        locs = getattr(self.fwd, "__irad_guards__", ())
        return locs[e.args[0]] if e.args and isinstance(e.args[0], int) and e.args[0] < len(locs) else str(e)

    def result(self, flat: Sequence[Any], copy: bool = True) -> tuple[Any, Any]:
        """``(jacobian, aux)`` from the forward program's outputs: runs the Jacobian program once.
        ``copy``: blocks that are read-only views (of a broadcast) are copied, so callers may write."""
        blocks = list(self.jac(*flat[self.n_out:]))
        if copy:
            blocks = [x if not isinstance(x, np.ndarray) or x.flags.writeable else x.copy() for x in blocks]
        return self.assemble(blocks), self.aux(flat)

    def assemble(self, blocks: list[Any]) -> Any:
        """The blocks in JAX's layout: the output's structure of (a tuple over argnums of) the
        input's structure.  Pytree building only, no array operations (so it may run traced)."""
        b = self._builders
        if b is None:
            b = self._builders = (_builder(self.out_tree, list(range(self.n_y))),
                                  [_builder(tree, idx) for tree, idx in self.slots])
        out, per_arg = b
        w = self.n_wrt
        per_out = []
        for p in range(self.n_y):
            row = blocks[p * w:(p + 1) * w]
            parts = [build(row) for build in per_arg]
            per_out.append(parts[0] if self.single else tuple(parts))
        return out(per_out)

    def aux(self, flat: Sequence[Any]) -> Any:
        return None if self.aux_tree is None else unflatten(self.aux_tree, list(flat[self.n_y:self.n_out]))

    def traced_result(self, tracer: Any, flat: list[Any]) -> tuple[Any, Any]:
        """``result`` under an enclosing trace: the Jacobian program runs under ``tracer`` too."""
        blocks = tracer.call(self.jac, tuple(flat[self.n_out:]), {})
        return self.assemble(list(blocks)), self.aux(flat)


def _float_dtype(t: Any) -> str:
    if isinstance(t, ArrayT):
        return t.dtype
    if isinstance(t, ScalarT):
        return {"float": "float64", "complex": "complex128"}.get(t.kind, "float64")
    return "float64"


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, ArrayT) else ()


def _trace_checked(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], nums: tuple[int, ...],
                   has_aux: bool, what: str) -> tuple[Graph, Any, int, list[int], list[Any]]:
    """Trace ``f`` once for a Jacobian (``what``: "jacrev" or "jacfwd") and refuse what has none:
    the graph, the tracer, how many outputs are differentiated, the inputs to differentiate and
    how each argnum's result is laid out."""
    fname = getattr(f, "__name__", "f")
    site = def_site(f) or fname
    g, tracer, _ = trace_values(f, args, kwargs, deep=frozenset(nums))
    _check_numbers(f, list(g.outputs), what)
    n_diff = _aux_split(g, f, what) if has_aux else len(g.outputs)
    if tracer.mutated_inputs or tracer.mutated_world:
        raise MutationError(f"{what} of {fname}: the function updates an argument, or an array it reads from "
                            "globals, closures or attributes, in place (this call did; a compiled forward program "
                            "would not); work on a copy")
    wrt, arg_slots = _wrt_inputs(g, args, kwargs, nums, f"{what} of {site}")
    for o in g.outputs[:n_diff]:
        if _is_complex(o.type):
            raise GradError(f"{what} of {site}: an output is complex ({o.type}); {what} needs real outputs, as "
                            "JAX's does (take np.real or np.abs of it, or use irad.vjp / irad.jvp)")
        if not o.type.is_float:
            raise GradError(f"{what} of {site}: an output is {o.type}, not a float; integer and boolean outputs "
                            "have no derivative — return them as aux with has_aux=True")
    return g, tracer, n_diff, wrt, arg_slots


def _layout(g: Graph, tracer: Any, opt: Graph, has_aux: bool) -> tuple[list[int], TreeDef, TreeDef | None, Assumptions]:
    """A Jacobian program's input leaves, output and aux trees, and assumptions (the trace's and
    what the passes traced in; as vjp's, attribute writes are not replayed: traced again each call)."""
    assert g.in_tree is not None
    statics = {i for i, _ in g.statics}
    out_tree, aux_tree = g.out_tree or flatten(None)[1], None
    if has_aux:
        out_tree, aux_tree = out_tree.children
    deps = tuple(tracer.deps) + opt.assumed + ((effect_dep("an attribute"),) if tracer.attr_writes else ())
    return [i for i in range(g.in_tree.num_leaves) if i not in statics], out_tree, aux_tree, Assumptions(deps)


def _compile(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], nums: tuple[int, ...],
             single: bool, has_aux: bool, passes: Sequence[Callable[[Graph], Graph]] | None) \
        -> tuple[JacobianProgram, list[Any]]:
    """Trace ``f`` once, differentiate and split it, batch the backward graph; the program and the
    forward program's outputs for this call (from the trace: ``f`` runs once)."""
    from . import passes as irad_passes

    fname = getattr(f, "__name__", "f")
    g, tracer, n_diff, wrt, arg_slots = _trace_checked(f, args, kwargs, nums, has_aux, "jacrev")
    joint = ad.reverse(g, tracer.values, wrt, seed="input", outputs=n_diff)
    opt = irad_passes.run(joint.graph, passes)
    fwd_g, bwd_g, n_res = split(joint, opt)
    seeded = dict(zip(joint.seed_outputs, range(n_res, n_res + len(joint.seed_outputs))))
    outs = [Block(seeded.get(p), _shape(o.type), _float_dtype(o.type)) for p, o in enumerate(g.outputs[:n_diff])]
    ins = [Block(k, _shape(g.inputs[i].type), _float_dtype(g.inputs[i].type)) for k, i in enumerate(wrt)]
    jac_low, jac_g = jacobian_program(bwd_g, outs, ins, "rev", f"{fname}_jacobian")
    fwd_low = lower(fwd_g, f"{fname}_forward")
    dyn_pos, out_tree, aux_tree, assumptions = _layout(g, tracer, opt, has_aux)
    prog = JacobianProgram(fwd_low.fn, jac_low.fn, fwd_low.source, jac_low.source, g, jac_g, dyn_pos, n_diff,
                           len(g.outputs), len(wrt), out_tree, [(tree, idx) for _, tree, idx in arg_slots], single,
                           aux_tree, assumptions)
    values = [joint.values[o.id] if isinstance(o, Var) else o.value for o in g.outputs]
    return prog, values + evaluate_residuals(fwd_g, joint, tracer.values)


class Jacobian:
    """``jacrev(f)``: one forward program and one batched Jacobian program per call key, cached and
    checked like ``grad``'s (``irad.signature``): a failed guard or a changed dependency retraces."""

    _compile_program = staticmethod(_compile)

    def __init__(self, f: Callable[..., Any], argnums: int | Sequence[int], has_aux: bool,
                 passes: Sequence[Callable[[Graph], Graph]] | None = None) -> None:
        self.f = f
        self.argnums = argnums
        self.has_aux = has_aux
        self.passes = passes
        self.__name__ = f"jacrev({getattr(f, '__name__', 'f')})"
        self.__doc__ = getattr(f, "__doc__", None)
        self.cache: ProgramCache[JacobianProgram] = ProgramCache(self.__name__, self._arg_names)
        self.traces = 0

    def _arg_names(self) -> list[str]:
        try:
            return list(inspect.signature(self.f).parameters)
        except (TypeError, ValueError):
            return []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key, leaves = call_key(args, kwargs, _deep(self.argnums, len(args)))
        prog, flat = self._select(key, leaves, args, kwargs)
        jac, aux = prog.result(flat)
        return (jac, aux) if self.has_aux else jac

    def _select(self, key: Any, leaves: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) \
            -> tuple[JacobianProgram, Sequence[Any]]:
        """The program for this call and its forward program's outputs (from the trace when this
        call traced)."""
        cache = self.cache
        progs = cache.get(key)
        failed: list[str] = []
        if progs:
            for k, prog in enumerate(list(progs)):
                if prog.assumptions.check() is not None:
                    cache.drop(key, prog, prog.assumptions.stale() or "a dependency")
                    continue
                try:
                    flat = prog.fwd(*[leaves[i] for i in prog.dyn_pos])
                except GuardError as e:
                    failed.append(prog.guard_failure(e))
                    continue
                if k:
                    cache.promote(key, progs, k)
                if cache.stale_counts:
                    cache.settled()
                return prog, flat
        self.traces += 1
        nums = _argnums(self.argnums, len(args))
        prog, flat = self._compile_program(self.f, args, kwargs, nums, isinstance(self.argnums, int), self.has_aux,
                                           self.passes)
        key = call_key(args, kwargs, frozenset(nums))[0]  # NOTE: the trace may have registered rules
        cache.add(key, prog, failed[-1] if failed else None)
        return prog, flat

    def program(self, *args: Any, **kwargs: Any) -> JacobianProgram:
        """The compiled programs a call with these arguments runs, chosen as a call chooses them
        (so this runs the forward program once, or traces)."""
        key, leaves = call_key(args, kwargs, _deep(self.argnums, len(args)))
        return self._select(key, leaves, args, kwargs)[0]

    def __irad_trace_call__(self, tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Called on traced values (a Jacobian inside ``grad`` or another ``jacrev``): choose the
        program untraced, then run both programs under the tracer, which records their ops."""
        from .hooks import paused
        key, leaves = call_key(args, kwargs, _deep(self.argnums, len(args)))
        with paused():
            prog, _ = self._select(key, [np.array(x, copy=True) if isinstance(x, np.ndarray) else x
                                         for x in leaves], args, kwargs)
        tracer.deps.update(prog.assumptions.deps)
        flat = tracer.call(prog.fwd, tuple(leaves[i] for i in prog.dyn_pos), {})
        jac, aux = prog.traced_result(tracer, list(flat))
        return (jac, aux) if self.has_aux else jac


def jacrev(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False, *,
           passes: Sequence[Callable[[Graph], Graph]] | None = None) -> Jacobian:
    """The Jacobian of ``f`` with respect to positional argument(s) ``argnums``, by reverse mode:
    one forward program and one backward program batched over every output element.

    Layout as JAX's ``jacrev``: for an output leaf of shape ``out`` and an input leaf of shape
    ``in``, a block of shape ``out + in``; blocks nest as the output's structure of the input's
    structure (of a tuple over argnums when ``argnums`` is a tuple).  Outputs must be real floats;
    with ``has_aux=True``, ``f`` returns ``(output, aux)`` and the result is ``(jacobian, aux)``."""
    return Jacobian(f, argnums, has_aux, passes)


#: HIPS autograd's name (its ``jacobian(f, argnum)`` has this layout: output shape + input shape)
jacobian = jacrev


# ---- jacfwd / hessian / hvp: forward mode (irad.forward) builds them on jacobian_graph("fwd") ----


@dataclass
class ForwardJacobianProgram(JacobianProgram):
    """``jacfwd``'s one program: ``fwd(*inputs) -> blocks + aux`` (the JVP graph batched over the
    input tangents, seeded with the identity); ``jac`` is unused."""

    def result(self, flat: Sequence[Any], copy: bool = True) -> tuple[Any, Any]:
        nb = self.n_y * self.n_wrt
        blocks = list(flat[:nb])
        if copy:
            blocks = [x if not isinstance(x, np.ndarray) or x.flags.writeable else x.copy() for x in blocks]
        return self.assemble(blocks), self.aux(flat)

    def aux(self, flat: Sequence[Any]) -> Any:
        nb = self.n_y * self.n_wrt
        return None if self.aux_tree is None else unflatten(self.aux_tree, list(flat[nb:]))

    def traced_result(self, tracer: Any, flat: list[Any]) -> tuple[Any, Any]:
        return self.result(flat, copy=False)  # (the one program already ran under the tracer)


def _compile_fwd(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], nums: tuple[int, ...],
                 single: bool, has_aux: bool, passes: Sequence[Callable[[Graph], Graph]] | None) \
        -> tuple[JacobianProgram, list[Any]]:
    """Trace ``f`` once, take its JVP graph (``irad.forward``) and batch it over every input
    tangent: one program computes the outputs' derivatives along every input direction."""
    from . import passes as irad_passes
    from .forward import forward

    fname = getattr(f, "__name__", "f")
    site = def_site(f) or fname
    g, tracer, n_diff, wrt, arg_slots = _trace_checked(f, args, kwargs, nums, has_aux, "jacfwd")
    for k in wrt:
        if _is_complex(g.inputs[k].type):
            raise GradError(f"jacfwd of {site}: argument leaf {g.inputs[k].hint or k} is complex; jacfwd needs "
                            "real inputs (use irad.jvp)")
    jg = forward(g, tracer.values, wrt)
    opt = irad_passes.run(jg.graph, passes)
    n_in, n_out = len(g.inputs), len(g.outputs)
    ins = [Block(n_in + k, _shape(g.inputs[i].type), _float_dtype(g.inputs[i].type)) for k, i in enumerate(wrt)]
    outs = [Block(n_out + p, _shape(o.type), _float_dtype(o.type)) for p, o in enumerate(g.outputs[:n_diff])]
    low, jac_g = jacobian_program(opt, outs, ins, "fwd", f"{fname}_jacfwd", keep=list(range(n_diff, n_out)))
    dyn_pos, out_tree, aux_tree, assumptions = _layout(g, tracer, opt, has_aux)
    prog = ForwardJacobianProgram(low.fn, low.fn, low.source, low.source, g, jac_g, dyn_pos, n_diff, n_out, len(wrt),
                                  out_tree, [(tree, idx) for _, tree, idx in arg_slots], single, aux_tree, assumptions)
    leaves = call_key(args, kwargs, frozenset(nums))[1]
    return prog, list(prog.fwd(*[leaves[i] for i in prog.dyn_pos]))


class ForwardJacobian(Jacobian):
    """``jacfwd(f)``: one batched JVP program per call key, cached and checked as ``jacrev``'s."""

    _compile_program = staticmethod(_compile_fwd)

    def __init__(self, f: Callable[..., Any], argnums: int | Sequence[int], has_aux: bool,
                 passes: Sequence[Callable[[Graph], Graph]] | None = None) -> None:
        super().__init__(f, argnums, has_aux, passes)
        self.__name__ = f"jacfwd({getattr(f, '__name__', 'f')})"
        self.cache = ProgramCache(self.__name__, self._arg_names)



def jacfwd(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False, *,
           passes: Sequence[Callable[[Graph], Graph]] | None = None) -> Jacobian:
    """The Jacobian of ``f`` by forward mode: its JVP program batched over every input element
    (the identity as tangents), one program call.  Layout, ``argnums`` and ``has_aux`` as
    ``jacrev``'s (JAX's); cheaper than ``jacrev`` when inputs are fewer than outputs."""
    return ForwardJacobian(f, argnums, has_aux, passes)


def hessian(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Jacobian:
    """The Hessian of scalar ``f``: ``jacfwd(jacrev(f))`` (forward over reverse, as JAX's), so
    the gradient program is traced once and batched over the input directions.  Layout: input
    shape + input shape (nested over ``argnums`` twice when it is a tuple)."""
    return jacfwd(jacrev(f, argnums, has_aux), argnums, has_aux)


class HessianVectorProduct:
    """``hvp(f)(*args, v)``: ``H·v`` as the JVP of ``grad(f)`` along ``v`` (forward over reverse);
    the Hessian is never formed.  One gradient function and its JVP programs per object."""

    def __init__(self, f: Callable[..., Any], argnums: int | Sequence[int] = 0) -> None:
        from .api import grad
        self.f = f
        self.argnums = argnums
        self.grad = grad(f, argnums)
        self.__name__ = f"hvp({getattr(f, '__name__', 'f')})"

    def __call__(self, *args_and_v: Any) -> Any:
        from .forward import jvp_wrt
        if len(args_and_v) < 2:
            raise GradError(f"{self.__name__}: call it as hvp(f)(*args, v), with the vector last")
        args, v = args_and_v[:-1], args_and_v[-1]
        nums = _argnums(self.argnums, len(args))
        tangents = (v,) if isinstance(self.argnums, int) else tuple(v)
        if len(tangents) != len(nums):
            raise GradError(f"{self.__name__}: v must have one entry per argnum ({len(nums)}), got {len(tangents)}")
        return jvp_wrt(self.grad, tuple(args), nums, tangents)[1]


def hvp(f: Callable[..., Any], argnums: int | Sequence[int] = 0) -> HessianVectorProduct:
    """``hvp(f)(*args, v)``: the Hessian-vector product of scalar ``f`` at ``args`` with ``v``
    (shaped like the argument ``argnums``; a tuple of such for a tuple of argnums), as autograd's
    ``hessian_vector_product``, by forward over reverse."""
    return HessianVectorProduct(f, argnums)
