"""The user-facing API: ``compile``, ``grad``, ``value_and_grad``, ``vjp``.

One compiled program per call key (pytree structure, dtypes, shapes, static values, rule-registry
version), each with the assumptions its trace made about the world (``irad.signature``): a cached
call flattens the arguments, looks the key up, checks the assumptions (one identity test per
dependency) and runs straight-line Python.  A failed guard (a branch that now goes the other way)
retraces and caches that path beside the first; a stale dependency retraces; a program that
keeps retracing warns.
"""
from __future__ import annotations

import enum
import functools
import inspect
import random
import types
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import ad, loops, tiers
from . import passes as irad_passes
from .entry import MISS, make_entry
from .errors import GradError, GuardError, MutationError, def_site
from .ir import ArrayT, Const, Graph, ScalarT, Var, collector_paused, map_atoms
from .lower import lower
from .passes.partition import evaluate_residuals, split
from .pytree import REGISTRY, Depth, Node, TreeDef, flatten, rebuild, unflatten
from .signature import RETRACE_WARN_AFTER, RetraceWarning  # noqa: F401  (public: the warning and its threshold)
from .signature import NO_ASSUMPTIONS, Assumptions, Identity, ProgramCache, call_key, effect_dep
from .trace import trace_values

def _argnums(argnums: int | Sequence[int], nargs: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    out = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise GradError(f"argnums {a} is out of range for {nargs} positional arguments")
        out.append(a % nargs)
    return tuple(out)


def _deep(argnums: int | Sequence[int], nargs: int) -> frozenset[int]:
    """The positions of the differentiated arguments, whose dataclasses and objects of the user's
    classes are pytrees (``irad.pytree.Depth.OBJECTS``); out-of-range ones are left to ``_argnums``."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    return frozenset(a % nargs for a in nums if -nargs <= a < nargs)


@dataclass
class Program:
    """A compiled gradient program for one call key.

    ``prog(*args) -> (value, gradient)``; ``source`` is the generated Python, ``graph`` the
    optimised joint forward+backward graph, ``forward`` the traced graph.  A call whose key
    differs (another shape, another static value), whose assumptions no longer hold (a rebound
    global, a changed attribute) or whose guards fail is answered by a program traced for it,
    never by this one.  ``prog.source`` is what runs (``prog.tier`` says which): a program whose
    loops step through scalar work is lowered again with its loops unrolled once it is hot, giving
    the same bits; a program of array work may move to the compiled tier, its elementwise chains
    fused into numba kernels (``irad.tiers``); ``prog.graph`` stays the graph it was compiled from.
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
    assumptions: Assumptions = field(default=NO_ASSUMPTIONS, repr=False)
    key: Any = field(default=None, repr=False)
    dyn_pos: list[int] | None = field(default=None, repr=False)  # leaf positions of the inputs (None: all)
    #: (leaf position or array of the world, joint output index): what the function updates in
    #: place, written back after each run so that every call mutates it as Python does
    writeback: tuple[tuple[Any, int], ...] = field(default=(), repr=False)
    live_arrays: tuple[np.ndarray, ...] = field(default=(), repr=False)  # the world's arrays it reads (with writeback)
    #: (object, attribute, output index or None, constant): what the function sets on objects of the
    #: world (``self.inp = x``), set again after each run
    setattrs: tuple[tuple[Any, str, int | None, Any], ...] = field(default=(), repr=False)
    #: the random generators its impure ops draw from: a run that fails a guard puts their state
    #: back, so that the retrace draws what the function would have drawn, once
    rngs: tuple[Any, ...] = field(default=(), repr=False)
    f: Any = field(default=None, repr=False)
    passes: Any = field(default=None, repr=False)
    _builders: tuple[Callable[[Sequence[Any]], Any], list[Callable[[Sequence[Any]], Any]]] | None = \
        field(default=None, repr=False)
    _other: Any = field(default=None, repr=False)  # the GradFunction that answers other calls
    _entry: Any = field(default=None, repr=False)  # its fast entry (irad.entry; False: it has none)
    #: calls left before it moves on to its next tier (``irad.tiers``; None: never)
    hot: list[int] | None = field(default=None, repr=False)
    #: the tier it runs: "numpy", "unrolled" (its loops written out) or "numba" (the compiled tier)
    tier: str = field(default="numpy", repr=False)
    upgrade: str | None = field(default=None, repr=False)  # the tier its ``hot`` count leads to
    compiled: Any = field(default=None, repr=False)  # its compiled tier being built (``tiers.Compile``)
    #: (source, fn) of its numpy program once the compiled tier runs: what a trace records (the
    #: kernels are opaque to it) and what is shipped to other processes
    numpy_tier: tuple[str, Callable[..., Any]] | None = field(default=None, repr=False)
    deep: frozenset[int] = field(default=frozenset(), repr=False)  # the argnums, for the call key

    @property
    def deps(self) -> tuple[tuple[Any, ...], ...]:
        """What the trace read from the world (see ``irad.signature``)."""
        return self.assumptions.deps

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key, leaves = call_key(args, kwargs, self.deep)
        if key == self.key and self.assumptions.check() is None:
            hot = self.hot
            if hot is not None:
                hot[0] -= 1
                if hot[0] <= 0:
                    tiers.promote(self, leaves)
            try:
                flat = self.run(leaves)
            except GuardError:
                pass
            else:
                return self.unpack(flat)
        other = self._other
        if other is None:
            other = self._other = GradFunction(self.f, self.argnums[0] if self.single else self.argnums, True,
                                               self.passes)
        return other(*args, **kwargs)

    def run(self, leaves: list[Any]) -> Any:
        """The flat outputs of the program on a call's leaves (arguments updated in place too)."""
        dyn = self.dyn_pos
        if self.writeback:
            self._no_aliasing(leaves)
        states = [rng_state(r) for r in self.rngs]
        try:
            flat = self.fn(*leaves) if dyn is None else self.fn(*[leaves[i] for i in dyn])
        except GuardError:
            for r, st in zip(self.rngs, states):
                set_rng_state(r, st)
            raise
        if self.writeback:
            for t, k in self.writeback:
                np.copyto(leaves[t] if type(t) is int else t, flat[k])
        for o, name, j, c in self.setattrs:
            setattr(o, name, c if j is None else flat[j])
        return flat

    def _no_aliasing(self, leaves: list[Any]) -> None:
        """An array the program updates must not share memory with another array it reads (``f(a, a)``,
        or an argument that is a global the function reads): the write-back would change both, which
        the traced program, computed for distinct arrays, does not do."""
        arrays = [(i, x) for i, x in enumerate(leaves) if isinstance(x, np.ndarray)] + \
            [(None, x) for x in self.live_arrays]
        for t, _ in self.writeback:
            dst = leaves[t] if type(t) is int else t
            for i, x in arrays:
                if (i != t if type(t) is int else x is not dst) and np.may_share_memory(x, dst):
                    raise MutationError(f"{self.name} updates an array in place that shares memory with another array "
                                        "it reads (the same array passed twice, or a global it also reads): copy one "
                                        "of them first")

    def builders(self) -> tuple[Callable[[Sequence[Any]], Any], list[Callable[[Sequence[Any]], Any]]]:
        """The functions that build the value and each argnum's gradient from the flat outputs."""
        builders = self._builders
        if builders is None:
            builders = self._builders = (_builder(self.out_tree, list(range(self.n_out))),
                                         [_builder(tree, idx) for _, tree, idx in self.grad_slots])
        return builders

    def unpack(self, flat: Sequence[Any]) -> tuple[Any, Any]:
        builders = self._builders or self.builders()
        if self.single:
            return builders[0](flat), builders[1][0](flat)
        return builders[0](flat), tuple([b(flat) for b in builders[1]])

    def guard_locations(self) -> tuple[str, ...]:
        return getattr(self.fn, "__irad_guards__", ())

    def guard_failure(self, e: GuardError) -> str:
        locs = self.guard_locations()
        return locs[e.args[0]] if e.args and isinstance(e.args[0], int) and e.args[0] < len(locs) else str(e)

    def to_dot(self) -> str:
        """Graphviz DOT of the joint graph this program runs: its forward ops (the traced ones,
        ``len(prog.forward.ops)`` of them before the passes) and its backward ops boxed and
        coloured apart (``irad.dot``)."""
        return self.graph.to_dot(title=f"{self.name}: gradient program, {len(self.graph.ops)} ops "
                                       f"(traced forward: {len(self.forward.ops)})")


def _builder(tree: TreeDef, idx: list[int | None]) -> Callable[[Sequence[Any]], Any]:
    """A function that builds ``tree``'s structure from a flat result sequence: ``idx[k]`` is the
    position of leaf ``k`` (``None``: no value).  Built once per program; a run of contiguous
    leaves in a list or tuple becomes one slice."""
    kind = tree.kind
    if kind == "leaf":
        k = idx[0]
        return (lambda flat: None) if k is None else (lambda flat: flat[k])
    if kind == "none":
        return lambda flat: None
    if kind in ("list", "tuple") and all(c.kind == "leaf" for c in tree.children) and idx and \
            None not in idx and \
            idx == list(range(idx[0], idx[0] + len(idx))):  # type: ignore[arg-type, operator]  # None not in idx
        a, b = idx[0], idx[0] + len(idx)  # type: ignore[operator]  # None not in idx
        return (lambda flat: list(flat[a:b])) if kind == "list" else (lambda flat: tuple(flat[a:b]))
    parts, pos = [], 0
    for child in tree.children:
        n = child.num_leaves
        parts.append(_builder(child, idx[pos:pos + n]))
        pos += n
    if kind == "list":
        return lambda flat: [p(flat) for p in parts]
    if kind == "tuple":
        return lambda flat: tuple(p(flat) for p in parts)
    if kind == "dict":
        keys = tree.keys
        return lambda flat: {k: p(flat) for k, p in zip(keys, parts)}
    if kind == "odict":
        keys = tree.keys
        return lambda flat: OrderedDict((k, p(flat)) for k, p in zip(keys, parts))
    if isinstance(kind, Node):  # a dataclass, a registered class, an object: an instance of its class
        keys = tree.keys
        return lambda flat: rebuild(kind, keys, [p(flat) for p in parts])
    return lambda flat: kind(*[p(flat) for p in parts])  # a namedtuple class


def _wrt_inputs(g: Graph, args: tuple[Any, ...], kwargs: dict[str, Any], argnums: tuple[int, ...], fname: str) \
        -> tuple[list[int], list[tuple[int, TreeDef, list[int | None]]]]:
    """Graph-input positions to differentiate, and how each argnum's gradient is laid out: the
    argument's tree as traced (``g.in_tree``, where a differentiated object's attributes are leaves)."""
    assert g.in_tree is not None
    statics = {i for i, _ in g.statics}
    leaf_to_input: dict[int, int] = {}
    k = 0
    for i in range(g.in_tree.num_leaves):
        if i not in statics:
            leaf_to_input[i] = k
            k += 1
    trees = g.in_tree.children[0].children
    starts = [0]
    for t in trees:
        starts.append(starts[-1] + t.num_leaves)
    wrt: list[int] = []
    slots = []
    for a in argnums:
        tree = trees[a]
        leaves = flatten(args[a], depth=Depth.OBJECTS)[0]
        idx: list[int | None] = []
        any_float = False
        for j in range(tree.num_leaves):
            inp = leaf_to_input.get(starts[a] + j)
            if inp is None or not g.inputs[inp].type.is_float:
                idx.append(None)
                continue
            any_float = True
            idx.append(len(wrt))
            wrt.append(inp)
        _refuse_objects(fname, a, tree, leaves, any_float)
        if not any_float and leaves:  # (an empty container gets its empty structure back, as in JAX)
            kinds = ", ".join(sorted({type(x).__name__ if not isinstance(x, np.ndarray) else f"{x.dtype} array"
                                      for x in leaves}))
            raise GradError(f"{fname}: argument {a} ({kinds}) is not differentiable; integer and boolean "
                            "inputs get no gradient — pass floats, or leave it out of argnums")
        slots.append((a, tree, idx))
    return wrt, slots


#: leaves that are values, not objects that could hold a gradient's arrays
_VALUES = (bool, int, float, complex, str, bytes, np.ndarray, np.generic, np.dtype, type, types.FunctionType,
           types.BuiltinFunctionType, types.MethodType, types.ModuleType, np.ufunc, functools.partial, slice, range,
           type(Ellipsis), enum.Enum)


def _holds_floats(x: Any) -> bool:
    """Does ``x`` (an object irad does not flatten) hold float values in its attributes or slots?"""
    vals = list(vars(x).values()) if type(getattr(x, "__dict__", None)) is dict else []
    for klass in type(x).__mro__:
        slots = vars(klass).get("__slots__", ())
        vals += [getattr(x, n) for n in ((slots,) if isinstance(slots, str) else slots)
                 if isinstance(n, str) and hasattr(x, n)]
    return any(isinstance(v, (float, complex, np.inexact)) or isinstance(v, np.ndarray) and v.dtype.kind in "fc"
               for v in flatten(vals)[0])


def _refuse_objects(fname: str, a: int, tree: TreeDef, leaves: list[Any], any_float: bool) -> None:
    """An object that irad cannot flatten, in a differentiated argument: a ``GradError`` naming its
    type and the three ways out, when it holds floats (they would get no gradient) or when nothing
    else in the argument is differentiable.  Configuration objects beside float leaves are static."""
    for path, x in zip(tree.paths(), leaves):
        if isinstance(x, _VALUES) or type(x).__module__ == "builtins" or not (_holds_floats(x) or not any_float):
            continue
        tp = type(x)
        name = tp.__qualname__
        why = REGISTRY.why_not(tp) or "it holds no float values"
        where = f"{path}: type {name}" if path else f"type {name}"
        raise GradError(f"{fname}: argument {a} ({where}) is not differentiable: {why}. irad differentiates floats, "
                        "float arrays and pytrees of them (tuples, lists, dicts, dataclasses, registered classes and "
                        f"objects of your own classes); make {name} a dataclass, register it with "
                        f"irad.register_pytree({name}, flatten, unflatten), or pass its arrays instead (a dict or "
                        "tuple of them)")


def compile(f: Callable[..., Any], *args: Any, argnums: int | Sequence[int] = 0,
            passes: Sequence[Callable[[Graph], Graph]] | None = None, holomorphic: bool = False,
            xp: Any = None, **kwargs: Any) -> Any:
    """Trace ``f`` at ``args``, differentiate, optimise and lower it: ``prog(*args) -> (value, grad)``.
    ``xp``: an array-API namespace (CuPy, ``array_api_strict``) the program runs on instead of
    numpy (``irad.arrayapi``)."""
    nums = _argnums(argnums, len(args))
    if xp is not None:
        from .arrayapi import compile_xp
        return compile_xp(f, args, kwargs, argnums, passes, holomorphic, xp)
    g, tracer, _ = trace_values(f, args, kwargs, deep=frozenset(nums))
    # NOTE: the key after the trace, which may register rules (a lazy SciPy table)
    key, _ = call_key(args, kwargs, frozenset(nums))
    return _build(f, g, tracer, args, kwargs, nums, isinstance(argnums, int), passes, key, holomorphic)


def _is_complex(t: Any) -> bool:
    return isinstance(t, ScalarT) and t.kind == "complex" or \
        isinstance(t, ArrayT) and t.dtype.startswith(("complex", "clongdouble"))


def _aux_split(g: Graph, f: Callable[..., Any], what: str) -> int:
    """``has_aux=True``: ``f`` returns a pair ``(differentiated, aux)``; the number of graph outputs
    (leaves) of the first part, which come first.  Anything else is a ``GradError``."""
    tree = g.out_tree
    if tree is None or tree.kind not in ("tuple", "list") or len(tree.children) != 2:
        site = def_site(f) or getattr(f, "__name__", "f")
        raise GradError(f"{what} of {site} with has_aux=True: the function must return a pair (output, aux), "
                        f"it returned {_describe_tree(tree)}")
    return tree.children[0].num_leaves


def _describe_tree(tree: TreeDef | None) -> str:
    if tree is None or tree.kind == "none":
        return "None"
    if tree.kind == "leaf":
        return "a single value"
    kind = tree.kind if isinstance(tree.kind, str) else getattr(tree.kind, "__name__", "container")
    return f"a {kind} of {len(tree.children)}"


def _check_output(g: Graph, f: Callable[..., Any], holomorphic: bool, n_diff: int | None = None) -> None:
    """``grad`` differentiates one number: a real scalar (or any array of exactly one element, as
    autograd allows), or a complex one when ``holomorphic=True`` (JAX's rule).  A complex output
    without it is refused: its real and imaginary parts have two different gradients.  ``n_diff``:
    the outputs that are differentiated (``has_aux``: the first part of the pair)."""
    fname = def_site(f) or getattr(f, "__name__", "f")
    outs = list(g.outputs if n_diff is None else g.outputs[:n_diff])
    o = outs[0] if len(outs) == 1 else None
    one = o is not None and (isinstance(o, Const) and not isinstance(o.value, (bool, int, np.bool_, np.integer))
                             or isinstance(o, Var) and o.type.is_float and
                             int(np.prod(getattr(o.type, "shape", ()))) == 1)
    if not one:
        types_ = ", ".join(str(x.type) for x in outs)
        raise GradError(f"grad of {fname}: the function must return one float scalar (or an array of one "
                        f"element), it returned ({types_}); use irad.vjp for other outputs")
    assert o is not None
    if _is_complex(o.type) and not holomorphic:
        raise GradError(f"grad of {fname}: the function returned a complex number ({o.type}); grad needs a real "
                        "output (take np.real, np.abs or abs(z)**2 of it), or pass holomorphic=True for f'(z) "
                        "of a holomorphic f")
    if holomorphic and not _is_complex(o.type):
        raise GradError(f"grad of {fname} with holomorphic=True: the function returned {o.type}, not a complex "
                        "number; leave holomorphic out for real-valued functions")


def _check_holomorphic_inputs(g: Graph, wrt: list[int], f: Callable[..., Any]) -> None:
    fname = def_site(f) or getattr(f, "__name__", "f")
    for i in wrt:
        if not _is_complex(g.inputs[i].type):
            raise GradError(f"grad of {fname} with holomorphic=True: input {g.inputs[i].hint or i} is "
                            f"{g.inputs[i].type}, not complex; pass complex values (e.g. x + 0j)")


def _build(f: Callable[..., Any], g: Graph, tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
           nums: tuple[int, ...], single: bool, passes: Sequence[Callable[[Graph], Graph]] | None,
           key: Any, holomorphic: bool = False, has_aux: bool = False) -> Program:
    fname = getattr(f, "__name__", "f")
    outs = [o for o in g.outputs]
    _check_numbers(f, outs, "grad")
    n_diff = _aux_split(g, f, "grad") if has_aux else None
    _check_output(g, f, holomorphic, n_diff)
    wrt_leaf, slots = _wrt_inputs(g, args, kwargs, nums, f"grad of {def_site(f) or fname}")
    if holomorphic:
        _check_holomorphic_inputs(g, wrt_leaf, f)
    with collector_paused():  # NOTE: a long graph's Vars and Ops would be scanned again and again
        return _build_joint(f, g, tracer, args, kwargs, nums, single, passes, key, wrt_leaf, slots, n_diff)


def _build_joint(f: Callable[..., Any], g: Graph, tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 nums: tuple[int, ...], single: bool, passes: Sequence[Callable[[Graph], Graph]] | None, key: Any,
                 wrt_leaf: list[int], slots: list[Any], n_diff: int | None) -> Program:
    fname = getattr(f, "__name__", "f")
    joint = ad.reverse(loops.for_reverse_mode(g, tracer.values), tracer.values, wrt_leaf, seed="one",
                       outputs=n_diff)
    # the first call's results, then the trace-time values are released: the passes and lowering
    # of a call on big arrays need none of them (the first call's peak memory)
    flat = [joint.values[o.id] if isinstance(o, Var) else o.value for o in joint.graph.outputs]
    joint.values.clear()
    tracer.values.clear()
    jg = joint.graph
    dyn_pos = _dyn_positions(g, args, kwargs)
    n_joint = len(jg.outputs)
    targets = [dyn_pos[k] if dyn_pos is not None else k for k, _ in tracer.mutated_inputs] + \
        [a for a, _ in tracer.mutated_world]
    writeback = tuple((t, n_joint + j) for j, t in enumerate(targets))
    finals = [v for _, v in tracer.mutated_inputs] + [v for _, v in tracer.mutated_world]
    # (object, attribute, joint output index or None, constant): replayed after each run
    setattrs: list[tuple[Any, str, int | None, Any]] = []
    for o, name, a in tracer.attr_write_atoms:
        if isinstance(a, Var):
            setattrs.append((o, name, n_joint + len(finals), None))
            finals.append(a)
        else:
            setattrs.append((o, name, None, a.value))
    if finals:  # NOTE: extra outputs after the gradients: written back once the program has finished
        jg = jg.replace(outputs=jg.outputs + tuple(finals))
    jg = irad_passes.run(jg, passes)
    low = lower(jg, f"{fname}_grad")
    slots = [(a, tree, [None if k is None else joint.n_outputs + k for k in idx]) for a, tree, idx in slots]
    live = tuple({id(c.value): c.value for op in g.ops for c in _consts(op) if c.live}.values()) if writeback else ()
    prog = Program(fname, g, jg, low.source, low.fn, nums, single, g.out_tree or flatten(None)[1],
                   joint.n_outputs, slots, assumptions=Assumptions(tuple(tracer.deps) + jg.assumed), key=key, dyn_pos=dyn_pos,
                   writeback=writeback, live_arrays=live, setattrs=tuple(setattrs), rngs=_rngs(g), f=f,
                   passes=passes, deep=frozenset(nums))
    prog.hot = tiers.countdown(jg, prog)
    prog.first = prog.unpack(flat)
    return prog


def _is_number_type(t: Any) -> bool:
    if isinstance(t, ScalarT):
        return True
    return isinstance(t, ArrayT) and t.dtype.startswith(("float", "complex", "longdouble", "clongdouble", "int",
                                                          "uint", "bool"))


def _check_numbers(f: Callable[..., Any], outs: list[Any], what: str) -> None:
    """The outputs of a traced function must be numbers: a string, a coroutine (``async def``), a
    generator or another object carries no gradient, and differentiating it would silently give
    zeros.  Raises ``GradError`` naming what was returned, the function and where it is defined."""
    fname = getattr(f, "__name__", "f")
    for o in outs:
        if isinstance(o, Var):
            if _is_number_type(o.type):
                continue
            value, desc = None, f"a {o.type} (computed from the arguments)"
        else:
            value = o.value
            if isinstance(value, (bool, int, float, complex, np.number, np.bool_)) or \
                    (isinstance(value, np.ndarray) and _is_number_type(o.type)):
                continue
            name = type(value).__name__
            desc = f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"
        site, hint = "", "return a float scalar (irad.vjp takes arrays and pytrees of them)"
        if inspect.iscoroutine(value):
            value.close()  # never awaited: close it, so Python does not warn about it later
            site = f"{value.cr_code.co_qualname} ({value.cr_code.co_filename}:{value.cr_code.co_firstlineno})"
            desc = "a coroutine (what calling an async def function gives)"
            hint = ("irad differentiates ordinary functions, not coroutines: move the computation into a plain "
                    "def and await what needs awaiting outside it")
        elif inspect.isgenerator(value):
            value.close()
            site = f"{value.gi_code.co_qualname} ({value.gi_code.co_filename}:{value.gi_code.co_firstlineno})"
            desc = "a generator (what calling a function that contains yield gives)"
            hint = "return the number itself (e.g. sum(...) of what it would yield) from a plain function"
        elif inspect.isasyncgen(value):
            site = f"{value.ag_code.co_qualname} ({value.ag_code.co_filename}:{value.ag_code.co_firstlineno})"
            desc = "an async generator (what calling an async def function that yields gives)"
            hint = "return the number itself from a plain (not async) function"
        elif isinstance(value, (str, bytes)) or (o.type is not None and str(o.type) in ("str", "bytes")):
            hint = "return the number itself, and format it outside the differentiated function"
        site = site or def_site(f)
        raise GradError(f"{what} of {fname}: the function returned {desc}, not a number, so it has no gradient"
                        + (f"\n  at {site}" if site else "") + f"\n  {hint}")


_RNG_TYPES = (np.random.Generator, np.random.RandomState, random.Random)


def rng_state(r: Any) -> Any:
    return r.bit_generator.state if isinstance(r, np.random.Generator) else \
        r.get_state() if isinstance(r, np.random.RandomState) else r.getstate()


def set_rng_state(r: Any, state: Any) -> None:
    if isinstance(r, np.random.Generator):
        r.bit_generator.state = state
    elif isinstance(r, np.random.RandomState):
        r.set_state(state)
    else:
        r.setstate(state)


def _rngs(g: Graph) -> tuple[Any, ...]:
    """The random generators of the world that ``g``'s impure ops draw from (``rng.normal``,
    ``np.random.rand``'s global one, ``irad.primitives.draw_order``'s)."""
    from .effects import is_impure_prim
    found: dict[int, Any] = {}
    for op in g.ops:
        if not is_impure_prim(op.prim):
            continue
        owner = getattr(op.fn, "__self__", None)
        for r in [owner] + [c.value for c in _consts(op)]:
            if isinstance(r, _RNG_TYPES):
                found[id(r)] = r
    return tuple(found.values())


def _consts(op: Any) -> list[Const]:
    found: list[Const] = []
    for a in list(op.args) + [v for _, v in op.kwargs]:
        map_atoms(a, lambda c: found.append(c) if isinstance(c, Const) else None)
    return found


def _dyn_positions(g: Graph, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int] | None:
    """The flat leaf positions of the graph's inputs (None: every leaf is an input)."""
    if not g.statics:
        return None
    statics = {i for i, _ in g.statics}
    assert g.in_tree is not None
    return [i for i in range(g.in_tree.num_leaves) if i not in statics]


class GradFunction:
    """``value_and_grad(f)``/``grad(f)``: compiled once per call key, retraced when a guard fails or
    the world the trace read changed (``irad.signature``)."""

    def __init__(self, f: Callable[..., Any], argnums: int | Sequence[int], with_value: bool,
                 passes: Sequence[Callable[[Graph], Graph]] | None = None, holomorphic: bool = False,
                 has_aux: bool = False) -> None:
        self.f = f
        self.argnums = argnums
        self.with_value = with_value
        self.passes = passes
        self.holomorphic = holomorphic
        self.has_aux = has_aux
        self.__name__ = f"{'value_and_grad' if with_value else 'grad'}({getattr(f, '__name__', 'f')})"
        self.__doc__ = getattr(f, "__doc__", None)
        self.cache: ProgramCache[Program] = ProgramCache(self.__name__, self._arg_names)
        self.traces = 0
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        #: the positions of the call key's deep arguments (None: negative argnums, per call)
        self._deep = frozenset(nums) if all(type(a) is int and a >= 0 for a in nums) else None

    def _arg_names(self) -> list[str]:
        try:
            return list(inspect.signature(self.f).parameters)
        except (TypeError, ValueError):
            return []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        cache = self.cache
        entry = cache.fast
        if entry is not None and not kwargs:  # the last program that ran, for calls shaped like its own
            out = entry(args, cache)
            if out is not MISS:
                return out
        deep = self._deep
        key, leaves = call_key(args, kwargs, _deep(self.argnums, len(args)) if deep is None else deep)
        prog, flat = self._select(key, leaves, args, kwargs)
        vg = prog.first if flat is None else prog.unpack(flat)
        if self.with_value and not self.has_aux:  # NOTE: the common case without a call of _result
            return vg
        return self._result(vg)

    def _select(self, key: Any, leaves: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) \
            -> tuple[Program, Any]:
        """The program for this call and its flat outputs (None: it was traced by this call)."""
        # NOTE: the hot path of every cached call: attribute reads and C calls, no helper frames
        cache = self.cache
        progs = cache.get(key)
        failed: list[str] = []
        if progs:
            for k, prog in enumerate(progs):
                if prog.assumptions.check() is not None:
                    cache.drop(key, prog, prog.assumptions.stale() or "a dependency")
                    continue
                hot = prog.hot
                if hot is not None:
                    hot[0] -= 1
                    if hot[0] <= 0:
                        tiers.promote(prog, leaves)
                dyn = prog.dyn_pos
                try:
                    if prog.writeback or prog.setattrs or prog.rngs:
                        flat = prog.run(leaves)
                    else:
                        flat = prog.fn(*leaves) if dyn is None else prog.fn(*[leaves[i] for i in dyn])
                except GuardError as e:
                    failed.append(prog.guard_failure(e))
                    continue
                if k:
                    cache.promote(key, progs, k)
                if cache.size() > 1:
                    try:
                        cache.touch(key)  # the most recently used key
                    except KeyError:  # dropped by another thread meanwhile
                        pass
                if cache.stale_counts:
                    cache.settled()
                if not kwargs:
                    self._use_entry(prog, args)
                return prog, flat
        return self._retrace(key, args, kwargs, failed), None

    def _use_entry(self, prog: Program, args: tuple[Any, ...]) -> None:
        """Let calls shaped like ``args`` take ``prog``'s fast entry (built on its first cached run)."""
        entry = prog._entry
        if entry is None:
            deep = self._deep
            entry = prog._entry = make_entry(prog, args, _deep(self.argnums, len(args))
                                             if deep is None else deep, self.with_value, self.has_aux) or False
        if entry:
            self.cache.fast = entry

    def __irad_trace_call__(self, tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Called on traced values (e.g. ``grad(grad(f))``): choose the program for these values
        untraced (its guards and assumptions checked), then run it under the tracer, which records
        its ops like any user code and takes on what the inner trace read from the world."""
        from .hooks import paused
        deep = _deep(self.argnums, len(args))
        key, leaves = call_key(args, kwargs, deep)
        tracer.reach_arguments(args, kwargs, deep)
        with paused():
            prog, _ = self._select(key, [np.array(x, copy=True) if isinstance(x, np.ndarray) else x
                                         for x in leaves], args, kwargs)
        if prog.writeback:
            raise MutationError(f"{self.__name__} inside another transform: the function updates an argument, or an "
                                "array it reads from globals, closures or attributes, in place; work on a copy")
        tracer.deps.update(prog.assumptions.deps)
        dyn = prog.dyn_pos
        fn = prog.fn if prog.numpy_tier is None else prog.numpy_tier[1]  # (a traceable program)
        flat = tracer.call(fn, tuple(leaves) if dyn is None else tuple(leaves[i] for i in dyn), {})
        for o, name, k, c in prog.setattrs:  # the outer trace records the writes as its own
            tracer.setattr(o, name, c if k is None else flat[k])
        return self._result(prog.unpack(flat))

    def _retrace(self, key: Any, args: tuple[Any, ...], kwargs: dict[str, Any], failed: list[str]) -> Program:
        self.traces += 1
        nums = _argnums(self.argnums, len(args))
        g, tracer, _ = trace_values(self.f, args, kwargs, deep=frozenset(nums))
        # NOTE: the key after the trace, which may have registered rules (a lazy SciPy table)
        key = call_key(args, kwargs, frozenset(nums))[0]
        prog = _build(self.f, g, tracer, args, kwargs, nums, isinstance(self.argnums, int), self.passes, key,
                      self.holomorphic, self.has_aux)
        self.cache.add(key, prog, failed[-1] if failed else None)
        return prog

    def _result(self, vg: tuple[Any, Any]) -> Any:
        """``(value, grad)``; ``grad``; with ``has_aux`` (JAX's layouts) ``((value, aux), grad)`` and
        ``(grad, aux)``."""
        if self.with_value:
            return vg
        return (vg[1], vg[0][1]) if self.has_aux else vg[1]

    def program(self, *args: Any, **kwargs: Any) -> Program:
        """The compiled program that a call with these arguments runs.  It is chosen as a call
        chooses it (key, assumptions, guards), so this runs the program once, or traces it."""
        key, leaves = call_key(args, kwargs, _deep(self.argnums, len(args)))
        return self._select(key, leaves, args, kwargs)[0]


def grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, *,
         passes: Sequence[Callable[[Graph], Graph]] | None = None, holomorphic: bool = False,
         has_aux: bool = False) -> GradFunction:
    """The gradient of scalar-valued ``f`` with respect to positional argument(s) ``argnums``.

    Complex arguments follow JAX's convention: a real-valued ``f`` of ``z = x + iy`` gets
    ``df/dx - i df/dy`` (``np.conj`` of it is the steepest-ascent direction); with
    ``holomorphic=True``, ``f`` may return a complex number and the result is ``f'(z)``.  With
    ``has_aux=True``, ``f`` returns ``(loss, aux)`` and the result is ``(grad, aux)``: ``aux`` (any
    pytree) is computed by the same program and not differentiated."""
    return GradFunction(f, argnums, False, passes, holomorphic, has_aux)


def value_and_grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, *,
                   passes: Sequence[Callable[[Graph], Graph]] | None = None,
                   holomorphic: bool = False, has_aux: bool = False) -> GradFunction:
    """``(f(*args), grad(f)(*args))`` from one run of the compiled program (``holomorphic`` as
    for ``grad``; with ``has_aux=True``: ``((loss, aux), grad)``)."""
    return GradFunction(f, argnums, True, passes, holomorphic, has_aux)


def stop_gradient(x: Any) -> Any:
    """``x`` (any pytree) with its value kept and its dependence cut: inside a differentiated
    function the result is a constant for the transform, as JAX's ``stop_gradient``."""
    from . import primitives as ops
    leaves, tree = flatten(x)
    return unflatten(tree, [ops.stop_gradient(v) for v in leaves])


def _ones_like(v: Any) -> Any:
    """A cotangent of ones of ``v``'s type: a Python float, a numpy scalar or an array."""
    if type(v) in (float, complex):
        return type(v)(1)
    return np.ones_like(v) if np.ndim(v) else np.ones_like(v)[()]


def elementwise_grad(f: Callable[..., Any], argnum: int = 0) -> Callable[..., Any]:
    """HIPS autograd's ``elementwise_grad``: the vector-Jacobian product of ``f`` with a cotangent
    of ones, i.e. the derivative of an elementwise ``f`` element by element (for other ``f``, the
    gradient of ``sum(f)``).  One ``vjp`` program per argument signature, cached like ``vjp``'s."""
    def egrad(*args: Any, **kwargs: Any) -> Any:
        y, pb = vjp(f, *args, **kwargs)
        leaves, tree = flatten(y)
        return pb(unflatten(tree, [_ones_like(v) for v in leaves]))[argnum]
    egrad.__name__ = f"elementwise_grad({getattr(f, '__name__', 'f')})"
    return egrad


@dataclass
class VJPProgram:
    """A forward program (outputs + residuals) and a backward program (residuals + ybar -> cotangents)."""

    fwd: Callable[..., Any]
    bwd: Callable[..., Any]
    fwd_source: str
    bwd_source: str
    forward: Graph
    n_out: int
    out_tree: TreeDef
    slots: list[tuple[TreeDef, list[int | None]]]
    dyn_pos: list[int]
    seeds: list[int]  # output positions whose cotangents the backward program takes
    assumptions: Assumptions = field(default=NO_ASSUMPTIONS, repr=False)
    #: ``has_aux``: the structure of aux, whose leaves follow y's among the first ``n_out`` outputs
    aux_tree: TreeDef | None = field(default=None, repr=False)

    def outputs(self, flat: Sequence[Any]) -> tuple[Any, Any]:
        """``(y, aux)`` from the forward program's flat outputs (``aux`` None without has_aux)."""
        if self.aux_tree is None:
            return unflatten(self.out_tree, flat[: self.n_out]), None
        n_y = self.out_tree.num_leaves
        return unflatten(self.out_tree, flat[:n_y]), unflatten(self.aux_tree, flat[n_y: self.n_out])

    @property
    def deps(self) -> tuple[tuple[Any, ...], ...]:
        return self.assumptions.deps


#: vjp's programs, per function (weakly: released with it)
_VJP_CACHE: "weakref.WeakKeyDictionary[Any, ProgramCache[VJPProgram]]" = weakref.WeakKeyDictionary()


def vjp(f: Callable[..., Any], *args: Any, has_aux: bool = False, **kwargs: Any) -> Any:
    """``y, pb = vjp(f, *args)``: ``pb(ybar)`` returns one cotangent per positional argument
    (``None`` for arguments with no float leaves: Python ints, bools, ``None``), each with its
    argument's structure; integer arrays beside float arguments are data and get ``None`` too.
    When no argument has a float leaf, an integer or boolean array argument is a ``GradError``,
    as in ``grad``: nothing would be differentiated.

    With ``has_aux=True``, ``f`` returns ``(y, aux)`` and the result is ``(y, pb, aux)``, as in
    JAX: ``aux`` is not differentiated.  Other keyword arguments are passed to ``f``.

    Programs are cached per function and argument signature; the call that traces returns the
    traced values, so ``f``'s side effects happen once per call either way.
    """
    deep = frozenset(range(len(args)))  # every positional argument gets a cotangent
    key, leaves = call_key(args, kwargs, deep)
    if has_aux:
        key = ("has_aux", key)
    # NOTE: a bound method is a new object at each `m.f`: its programs live with the function,
    # keyed also by the object it is bound to
    owner, cache_key = (f.__func__, (Identity(f.__self__), key)) if type(f) is types.MethodType else (f, key)
    per_f = _VJP_CACHE.get(owner) if _weakrefable(owner) else None
    if per_f is None:
        per_f = ProgramCache(f"vjp({getattr(f, '__name__', 'f')})")
        if _weakrefable(owner):
            _VJP_CACHE[owner] = per_f
    for prog in per_f.get(cache_key) or ():
        if prog.assumptions.check() is not None:
            per_f.drop(cache_key, prog, prog.assumptions.stale() or "a dependency")
            continue
        try:
            flat = prog.fwd(*[leaves[i] for i in prog.dyn_pos])
        except GuardError:
            continue
        if per_f.stale_counts:
            per_f.settled()
        y, aux = prog.outputs(flat)
        pb = _pullback(prog, list(flat[prog.n_out:]), f)
        return (y, pb, aux) if has_aux else (y, pb)
    prog, (y, aux), residuals = _compile_vjp(f, args, kwargs, has_aux)
    key = call_key(args, kwargs, deep)[0]  # NOTE: the trace may have registered rules (a lazy SciPy table)
    if has_aux:
        key = ("has_aux", key)
    per_f.add((Identity(f.__self__), key) if type(f) is types.MethodType else key, prog)
    pb = _pullback(prog, residuals, f)
    return (y, pb, aux) if has_aux else (y, pb)


def _weakrefable(f: Any) -> bool:
    try:
        weakref.ref(f)
    except TypeError:
        return False
    return True


def _vjp_traced(tracer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``vjp`` called on traced values: compile untraced, run the forward program traced; the
    pullback it returns is ordinary Python that the tracer follows when it is called."""
    from .hooks import paused
    f, fargs = args[0], args[1:]
    kwargs = dict(kwargs)
    has_aux = bool(kwargs.pop("has_aux", False))
    deep = frozenset(range(len(fargs)))
    key, leaves = call_key(fargs, kwargs, deep)
    tracer.reach_arguments(fargs, kwargs, deep)
    with paused():
        prog = _compile_vjp(f, fargs, kwargs, has_aux)[0]
    tracer.deps.update(prog.assumptions.deps)
    flat = tracer.call(prog.fwd, tuple(leaves[i] for i in prog.dyn_pos), {})
    y, aux = prog.outputs(flat)
    pb = _pullback(prog, list(flat[prog.n_out:]), f)
    return (y, pb, aux) if has_aux else (y, pb)


def _compile_vjp(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], has_aux: bool = False) \
        -> tuple[VJPProgram, Any, list[Any]]:
    """The programs of ``vjp(f, *args)``, ``f``'s value(s) at this call (``(y, aux)`` with
    ``has_aux``) and the residuals of this call."""

    g, tracer, _ = trace_values(f, args, kwargs, deep=frozenset(range(len(args))))
    _check_numbers(f, list(g.outputs), "vjp")
    n_diff = _aux_split(g, f, "vjp") if has_aux else None
    if tracer.mutated_inputs or tracer.mutated_world:
        raise MutationError(f"vjp of {getattr(f, '__name__', 'f')}: the function updates an argument, or an array it "
                            "reads from globals, closures or attributes, in place (this call did; a compiled forward "
                            "program would not); work on a copy")
    statics = {i for i, _ in g.statics}
    assert g.in_tree is not None
    dyn_pos = [i for i in range(g.in_tree.num_leaves) if i not in statics]
    leaf_to_input = {leaf: k for k, leaf in enumerate(dyn_pos)}
    wrt: list[int] = []
    slots: list[tuple[TreeDef, list[int | None]]] = []
    pos = 0
    site = f"vjp of {def_site(f) or getattr(f, '__name__', 'f')}"
    for k, (a, tree) in enumerate(zip(args, g.in_tree.children[0].children)):
        idx: list[int | None] = []
        for j in range(tree.num_leaves):
            inp = leaf_to_input.get(pos + j)
            if inp is None or not g.inputs[inp].type.is_float:
                idx.append(None)
            else:
                idx.append(len(wrt))
                wrt.append(inp)
        pos += tree.num_leaves
        slots.append((tree, idx))
        a_leaves = flatten(a, depth=Depth.OBJECTS)[0]
        _refuse_objects(site, k, tree, a_leaves, True)  # (an object with no floats: a parameter, None)
    if not wrt:
        for k, a in enumerate(args):
            _refuse_integer_arrays(f, k, flatten(a, depth=Depth.OBJECTS)[0])
    joint = ad.reverse(loops.for_reverse_mode(g, tracer.values), tracer.values, wrt, seed="input",
                       outputs=n_diff)
    opt = irad_passes.run(joint.graph, None)
    fwd_g, bwd_g, _ = split(joint, opt)
    name = getattr(f, "__name__", "f")
    fwd_low = lower(fwd_g, f"{name}_forward")
    bwd_low = lower(bwd_g, f"{name}_pullback")
    out_tree = g.out_tree or flatten(None)[1]
    aux_tree = None
    if has_aux:
        out_tree, aux_tree = out_tree.children
    prog = VJPProgram(fwd_low.fn, bwd_low.fn, fwd_low.source, bwd_low.source, g, joint.n_outputs, out_tree, slots,
                      dyn_pos, list(joint.seed_outputs),
                      # NOTE: vjp does not replay attribute writes (`self.inp = x`): it traces again each call
                      Assumptions(tuple(tracer.deps) + opt.assumed
                                  + ((effect_dep("an attribute"),) if tracer.attr_writes else ())), aux_tree)
    values = prog.outputs([joint.values[o.id] if isinstance(o, Var) else o.value for o in g.outputs])
    residuals = evaluate_residuals(fwd_g, joint, tracer.values)
    return prog, values, residuals


def _refuse_integer_arrays(f: Callable[..., Any], k: int, leaves: list[Any]) -> None:
    """When no argument of ``vjp`` has a float leaf, an argument holding integer or boolean
    *arrays* is what the caller meant to differentiate: raise, as ``grad`` does, rather than hand
    back ``None``.  Beside float arguments, integer arrays are data (labels, indices) and get
    ``None``; Python ints and bools (sizes, counts, flags) are parameters."""
    arrays = [x for x in leaves if isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind in "biu"]
    if arrays:
        kinds = ", ".join(sorted({f"{x.dtype} {'array' if isinstance(x, np.ndarray) else 'scalar'}"
                                  for x in arrays}))
        site = def_site(f) or getattr(f, "__name__", "f")
        raise GradError(f"vjp of {site}: argument {k} ({kinds}) is not differentiable; integer and boolean "
                        "arrays get no cotangent and no argument is a float — pass floats (x.astype(float))")


def _pullback(prog: VJPProgram, residuals: list[Any], f: Callable[..., Any]) -> Callable[[Any], tuple[Any, ...]]:
    seeds = prog.seeds

    def pullback(ybar: Any) -> tuple[Any, ...]:
        yl, ytree = flatten(ybar, depth=Depth.DATACLASSES)
        if ytree != prog.out_tree:
            raise GradError(f"vjp of {getattr(f, '__name__', 'f')}: the cotangent has structure {ytree}, "
                            f"the output has {prog.out_tree}")
        grads = prog.bwd(*residuals, *[yl[i] for i in seeds])
        out: list[Any] = []
        for tree, idx in prog.slots:
            if all(k is None for k in idx):
                out.append(None)
            else:
                out.append(unflatten(tree, [None if k is None else grads[k] for k in idx]))
        return tuple(out)

    pullback.source = prog.bwd_source  # type: ignore[attr-defined]
    pullback.forward_source = prog.fwd_source  # type: ignore[attr-defined]
    return pullback


vjp.__irad_trace_call__ = _vjp_traced  # type: ignore[attr-defined]
