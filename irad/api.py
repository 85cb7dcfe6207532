"""The user-facing API: ``compile``, ``grad``, ``value_and_grad``, ``vjp``.

One compiled program per argument signature (pytree structure, dtypes, shapes, static values,
rule-registry version).  A cache hit does no tracing: it flattens the arguments, checks the
key, and runs straight-line Python.  A failed guard (a branch that now goes the other way)
retraces and caches that path beside the first; a signature that keeps retracing warns.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import ad
from .errors import GradError, GuardError
from .ir import Graph, Var
from .lower import lower
from .pytree import TreeDef, flatten, unflatten
from .rules import registry
from .trace import trace_values, trackable

RETRACE_WARN_AFTER = 8


class RetraceWarning(UserWarning):
    """A gradient function keeps retracing for the same argument signature."""


def _leaf_sig(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return (x.dtype, x.shape)
    tx = type(x)
    if tx is float or tx is complex or isinstance(x, np.generic):
        return tx
    return (tx, x)  # static: part of the key by value


def signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The cache key of a call and its flat leaves."""
    leaves, tree = flatten((args, kwargs))
    return (tree, tuple(_leaf_sig(x) for x in leaves), registry.version()), leaves


def _argnums(argnums: int | Sequence[int], nargs: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    out = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise GradError(f"argnums {a} is out of range for {nargs} positional arguments")
        out.append(a % nargs)
    return tuple(out)


@dataclass
class Program:
    """A compiled gradient program for one argument signature.

    ``prog(*args) -> (value, gradient)``; ``source`` is the generated Python, ``graph`` the
    optimised joint forward+backward graph, ``forward`` the traced graph.
    """

    name: str
    forward: Graph
    graph: Graph
    source: str
    fn: Callable[..., Any]
    argnums: tuple[int, ...]
    single: bool
    out_tree: TreeDef
    n_out: int
    grad_slots: list[tuple[int, TreeDef, list[int | None]]]  # (argnum, tree, joint output index per leaf)
    first: Any = field(default=None, repr=False)  # (value, grad) of the call that traced

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _, leaves = signature(args, kwargs)
        dyn = [x for i, x in enumerate(leaves) if i not in self._static_positions]
        return self.unpack(self.fn(*dyn))

    @property
    def _static_positions(self) -> set[int]:
        return {i for i, _ in self.forward.statics}

    def unpack(self, flat: Sequence[Any]) -> tuple[Any, Any]:
        value = unflatten(self.out_tree, flat[: self.n_out])
        grads = []
        for _, tree, idx in self.grad_slots:
            grads.append(unflatten(tree, [None if k is None else flat[k] for k in idx]))
        return value, (grads[0] if self.single else tuple(grads))

    def guard_locations(self) -> tuple[str, ...]:
        return getattr(self.fn, "__irad_guards__", ())


def _wrt_inputs(g: Graph, args: tuple[Any, ...], kwargs: dict[str, Any], argnums: tuple[int, ...], fname: str) \
        -> tuple[list[int], list[tuple[int, TreeDef, list[int | None]]]]:
    """Graph-input positions to differentiate, and how each argnum's gradient is laid out."""
    statics = {i for i, _ in g.statics}
    leaf_to_input: dict[int, int] = {}
    k = 0
    n_leaves = flatten((args, kwargs))[1].num_leaves
    for i in range(n_leaves):
        if i not in statics:
            leaf_to_input[i] = k
            k += 1
    starts = []
    pos = 0
    for a in args:
        starts.append(pos)
        pos += flatten(a)[1].num_leaves
    wrt: list[int] = []
    slots = []
    for a in argnums:
        leaves, tree = flatten(args[a])
        idx: list[int | None] = []
        any_float = False
        for j, x in enumerate(leaves):
            inp = leaf_to_input.get(starts[a] + j)
            if inp is None or not g.inputs[inp].type.is_float:
                idx.append(None)
                continue
            any_float = True
            idx.append(len(wrt))
            wrt.append(inp)
        if not any_float:
            kinds = ", ".join(sorted({type(x).__name__ if not isinstance(x, np.ndarray) else f"{x.dtype} array"
                                      for x in leaves})) or "empty"
            raise GradError(f"{fname}: argument {a} ({kinds}) is not differentiable; integer and boolean "
                            "inputs get no gradient — pass floats, or leave it out of argnums")
        slots.append((a, tree, idx))
    return wrt, slots


def compile(f: Callable[..., Any], *args: Any, argnums: int | Sequence[int] = 0,
            passes: Sequence[Callable[[Graph], Graph]] | None = None, **kwargs: Any) -> Program:
    """Trace ``f`` at ``args``, differentiate, optimise and lower it: ``prog(*args) -> (value, grad)``."""
    nums = _argnums(argnums, len(args))
    g, tracer, _ = trace_values(f, args, kwargs)
    return _build(f, g, tracer.values, args, kwargs, nums, isinstance(argnums, int), passes)


def _build(f: Callable[..., Any], g: Graph, values: dict[int, Any], args: tuple[Any, ...], kwargs: dict[str, Any],
           nums: tuple[int, ...], single: bool, passes: Sequence[Callable[[Graph], Graph]] | None) -> Program:
    fname = getattr(f, "__name__", "f")
    outs = [o for o in g.outputs]
    if len(outs) != 1 or (isinstance(outs[0], Var) and getattr(outs[0].type, "shape", ()) != ()) \
            or not outs[0].type.is_float and isinstance(outs[0], Var):
        types_ = ", ".join(str(o.type) for o in outs)
        raise GradError(f"grad of {fname}: the function must return one float scalar, it returned ({types_}); "
                        "use irad.vjp for other outputs")
    wrt_leaf, slots = _wrt_inputs(g, args, kwargs, nums, fname)
    joint = ad.reverse(g, values, wrt_leaf, seed="one")
    jg = joint.graph
    from . import passes as irad_passes
    jg = irad_passes.run(jg, passes)
    low = lower(jg, f"{fname}_grad")
    slots = [(a, tree, [None if k is None else joint.n_outputs + k for k in idx]) for a, tree, idx in slots]
    prog = Program(fname, g, jg, low.source, low.fn, nums, single, g.out_tree or flatten(None)[1],
                   joint.n_outputs, slots)
    flat = [joint.values[o.id] if isinstance(o, Var) else o.value for o in joint.graph.outputs]
    prog.first = prog.unpack(flat)
    return prog


class GradFunction:
    """``value_and_grad(f)``/``grad(f)``: compiled once per argument signature, retraced on guard failure."""

    def __init__(self, f: Callable[..., Any], argnums: int | Sequence[int], with_value: bool,
                 passes: Sequence[Callable[[Graph], Graph]] | None = None) -> None:
        self.f = f
        self.argnums = argnums
        self.with_value = with_value
        self.passes = passes
        self.cache: dict[Any, list[tuple[Program, list[int]]]] = {}
        self.traces = 0
        self.retraces: dict[Any, int] = {}
        self.__name__ = f"{'value_and_grad' if with_value else 'grad'}({getattr(f, '__name__', 'f')})"
        self.__doc__ = getattr(f, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key, leaves = signature(args, kwargs)
        progs = self.cache.get(key)
        failed: list[str] = []
        if progs:
            for k, (prog, dyn_pos) in enumerate(progs):
                try:
                    flat = prog.fn(*[leaves[i] for i in dyn_pos])
                except GuardError as e:
                    failed.append(prog.guard_locations()[e.args[0]] if e.args and isinstance(e.args[0], int)
                                  and e.args[0] < len(prog.guard_locations()) else str(e))
                    continue
                if k:
                    progs.insert(0, progs.pop(k))
                return self._result(prog.unpack(flat))
        return self._retrace(key, args, kwargs, failed)

    def _retrace(self, key: Any, args: tuple[Any, ...], kwargs: dict[str, Any], failed: list[str]) -> Any:
        self.traces += 1
        nums = _argnums(self.argnums, len(args))
        g, tracer, _ = trace_values(self.f, args, kwargs)
        prog = _build(self.f, g, tracer.values, args, kwargs, nums, isinstance(self.argnums, int), self.passes)
        statics = {i for i, _ in g.statics}
        dyn_pos = [i for i in range(len(signature(args, kwargs)[1])) if i not in statics]
        lst = self.cache.setdefault(key, [])
        lst.insert(0, (prog, dyn_pos))
        if failed:
            n = self.retraces[key] = self.retraces.get(key, 0) + 1
            if n == RETRACE_WARN_AFTER:
                warnings.warn(
                    f"{self.__name__} retraced {n} times for the same argument shapes because value-dependent "
                    f"branches keep changing (guard at {failed[-1]}); each new path is traced and compiled. "
                    "Consider np.where or moving the branch out of the differentiated function.",
                    RetraceWarning, stacklevel=3)
        return self._result(prog.first)

    def _result(self, vg: tuple[Any, Any]) -> Any:
        return vg if self.with_value else vg[1]

    def program(self, *args: Any, **kwargs: Any) -> Program:
        """The compiled program that a call with these arguments runs (compiling it if needed)."""
        key, _ = signature(args, kwargs)
        if key not in self.cache:
            self(*args, **kwargs)
        return self.cache[key][0][0]


def grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, *,
         passes: Sequence[Callable[[Graph], Graph]] | None = None) -> GradFunction:
    """The gradient of scalar-valued ``f`` with respect to positional argument(s) ``argnums``."""
    return GradFunction(f, argnums, False, passes)


def value_and_grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, *,
                   passes: Sequence[Callable[[Graph], Graph]] | None = None) -> GradFunction:
    """``(f(*args), grad(f)(*args))`` from one run of the compiled program."""
    return GradFunction(f, argnums, True, passes)


def vjp(f: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """``y, pb = vjp(f, *args)``: ``pb(ybar)`` returns one cotangent per positional argument
    (``None`` for arguments with no float leaves), each with its argument's structure."""
    g, tracer, result = trace_values(f, args, kwargs)
    nums = tuple(range(len(args)))
    wrt, slots = [], []
    statics = {i for i, _ in g.statics}
    leaf_to_input: dict[int, int] = {}
    k = 0
    for i in range(flatten((args, kwargs))[1].num_leaves):
        if i not in statics:
            leaf_to_input[i] = k
            k += 1
    pos = 0
    for a in nums:
        leaves, tree = flatten(args[a])
        idx: list[int | None] = []
        for j in range(len(leaves)):
            inp = leaf_to_input.get(pos + j)
            if inp is None or not g.inputs[inp].type.is_float:
                idx.append(None)
            else:
                idx.append(len(wrt))
                wrt.append(inp)
        pos += len(leaves)
        slots.append((tree, idx))
    joint = ad.reverse(g, tracer.values, wrt, seed="input")
    fwd_g, bwd_g, n_res = split(joint)
    from . import passes as irad_passes
    bwd_low = lower(irad_passes.run(bwd_g, None), f"{getattr(f, '__name__', 'f')}_pullback")
    residuals = [joint.values[v.id] for v in fwd_g.outputs[joint.n_outputs:]]  # type: ignore[union-attr]
    out_tree = g.out_tree or flatten(None)[1]
    y_leaves = [joint.values[o.id] if isinstance(o, Var) else o.value for o in g.outputs]
    y = unflatten(out_tree, y_leaves)
    ybar_types = [v.type for v in joint.ybar_inputs]
    ybar_out_pos = [i for i, o in enumerate(g.outputs) if isinstance(o, Var) and any(
        yb.hint == (o.hint or f"t{o.id}") + "_bar" for yb in joint.ybar_inputs)]

    def pullback(ybar: Any) -> tuple[Any, ...]:
        yl, ytree = flatten(ybar)
        if ytree != out_tree:
            raise GradError(f"vjp of {getattr(f, '__name__', 'f')}: cotangent has structure {ytree}, "
                            f"the output has {out_tree}")
        yb = [yl[i] for i in ybar_out_pos]
        flat = bwd_low.fn(*residuals, *yb)
        grads = flat[joint.n_outputs - joint.n_outputs:]
        out = []
        for tree, idx in slots:
            if all(k is None for k in idx):
                out.append(None)
            else:
                out.append(unflatten(tree, [None if k is None else grads[k] for k in idx]))
        return tuple(out)

    pullback.source = bwd_low.source  # type: ignore[attr-defined]
    pullback.graph = bwd_g  # type: ignore[attr-defined]
    del ybar_types
    return y, pullback


def split(joint: ad.Joint) -> tuple[Graph, Graph, int]:
    """Partition a joint graph into a forward graph (outputs + residuals) and a backward graph
    (residuals + output cotangents -> input cotangents), like JAX's ``fwd_and_bwd``."""
    g = joint.graph
    seeds = {v.id for v in joint.ybar_inputs}
    depends = set(seeds)
    fwd_ops, bwd_ops = [], []
    for op in g.ops:
        if any(v.id in depends for v in op.inputs):
            bwd_ops.append(op)
            depends.update(o.id for o in op.outs)
        else:
            fwd_ops.append(op)
    fwd_defined = {v.id: v for v in g.inputs} | {o.id: o for op in fwd_ops for o in op.outs}
    res: dict[int, Var] = {}
    for op in bwd_ops:
        for v in op.inputs:
            if v.id in fwd_defined and v.id not in seeds:
                res.setdefault(v.id, v)
    grad_outs = g.outputs[joint.n_outputs:]
    for o in grad_outs:
        if isinstance(o, Var) and o.id in fwd_defined:
            res.setdefault(o.id, o)
    residuals = tuple(res.values())
    n_in = len(g.inputs) - len(joint.ybar_inputs)
    fwd = Graph(g.name + "_fwd", g.inputs[:n_in], tuple(fwd_ops), tuple(g.outputs[: joint.n_outputs]) + residuals,
                None, None, g.statics, g.provenance + ("split: forward",))
    bwd = Graph(g.name + "_bwd", residuals + joint.ybar_inputs, tuple(bwd_ops), tuple(grad_outs), None, None, (),
                g.provenance + ("split: backward",))
    return fwd, bwd, len(residuals)
