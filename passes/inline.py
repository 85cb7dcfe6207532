"""Pullback inlining: replace ``rule_fwd``/``pullback`` calls by the primitive ops of their bodies.

A rule's named ``fwd`` and ``bwd`` are ordinary numpy functions, so irad traces them (on values
of the right types) and splices the recorded ops into the graph.  Their work becomes visible to
the other passes: ``tanh``'s backward reads the forward output, and CSE computes ``cos(x)``
once when forward and backward both need it.  A rule whose body branches on values (a guard
appears), cannot run on sample values, or uses opaque state is left as a call.
"""
from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from irad.ir import GUARD_PRIMS, ArrayT, Const, Graph, Loc, Op, ScalarT, Var, collector_paused, const, map_atoms
from irad.pytree import LEAF, TreeDef, flatten, unflatten
from irad.signature import Assumptions

from . import standins


class _Skip(Exception):
    """This rule cannot be inlined; keep the call."""


def _sample(t: Any, rng: np.random.Generator) -> Any:
    if isinstance(t, ArrayT):
        dt = np.dtype(t.dtype)
        if np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.complexfloating):
            a = rng.uniform(0.5, 1.5, t.shape).astype(dt, copy=False)
        elif dt == np.bool_:  # NOTE: kept 0-d, never np.bool_: the tracer cannot track a singleton
            return rng.integers(0, 2, t.shape).astype(bool)
        elif np.issubdtype(dt, np.integer):
            a = rng.integers(0, 2, t.shape).astype(dt)
        else:
            raise _Skip(f"no sample for {t}")
        return a[()] if t.scalar else a
    if isinstance(t, ScalarT):
        return {"float": 0.75, "complex": 0.75 + 0.25j, "int": 1, "bool": True}[t.kind]
    raise _Skip(f"no sample for {t}")


def _spd_samples(inputs: list[Var], world: "_World") -> bool:
    """Replace the samples of square float matrices by symmetric positive definite ones."""
    changed = False
    for v in inputs:
        t = world.type(v.type)
        if isinstance(t, ArrayT) and len(t.shape) >= 2 and t.shape[-1] == t.shape[-2] and \
                np.issubdtype(np.dtype(t.dtype), np.floating):
            n = t.shape[-1]
            m = world.rng.uniform(-0.1, 0.1, t.shape)
            world.values[v.id] = (m + np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(t.dtype)
            changed = True
    return changed


#: traced rule bodies, by (function, argument structure, types, constants): a rule used at many
#: call sites of the same types (a scalar loop) is traced once.  The graph does not depend on
#: the sample values: a body that branches on them is not inlined at all.
_BODIES: dict[Any, Any] = {}
_BODIES_MAX = 4096


def _body_key(fn: Any, tree: TreeDef, leaves: list[Any], live: dict[int, Const]) -> Any:
    """The cache key of tracing ``fn`` on these host leaves, or None when a constant is not hashable.

    A live constant (the user's array, read at each call: ``live`` by id) is an input of the body,
    keyed by its type like a Var: its contents today say nothing about the next call."""
    from irad.rules import registry

    parts: list[Any] = [fn, tree, registry.version()]
    for leaf in leaves:
        if isinstance(leaf, Var) or id(leaf) in live:
            t = leaf.type if isinstance(leaf, Var) else live[id(leaf)].type
            if isinstance(t, ArrayT) and math.prod(t.shape) > 4096:
                return None  # NOTE: the cache keeps the sample values alive: small ones only
            parts.append(("input", t))
        elif isinstance(leaf, np.ndarray):
            if leaf.size > 64:
                return None
            parts.append((leaf.dtype.str, leaf.shape, leaf.tobytes()))
        else:
            try:
                hash(leaf)
            except TypeError:
                return None
            parts.append((type(leaf), leaf))
    return tuple(parts)


class _Body:
    """A rule body traced on sample values, ready to be copied into host graphs."""

    __slots__ = ("graph", "out_values", "assumed", "skip", "statics", "defined")

    def __init__(self, g: Graph, values: dict[int, Any], assumed: Assumptions) -> None:
        self.graph = g
        #: the values of the body's outputs on the samples (the only values a host needs: every
        #: other value of the body's trace is dropped here, not kept alive with the cache)
        self.out_values = [values.get(o.id) if isinstance(o, Var) else o.value for o in g.outputs]
        self.assumed = assumed
        self.skip: str | None = None
        for op in g.ops:
            if op.prim in GUARD_PRIMS or op.prim.startswith(("numpy.random", "builtins.print")):
                self.skip = f"value-dependent control flow or effects in the rule body: {op.prim} at {op.loc}"
                break
        self.statics = frozenset(i for i, _ in g.statics)
        self.defined = frozenset(o.id for op in g.ops for o in op.outs)


class _World:
    """Sample values of a graph's Vars: at the real shapes (``sizes`` None), or at the stand-ins
    of trace ``w`` (``passes/standins.py``)."""

    def __init__(self, sizes: standins.Sizes | None = None, w: int = 0) -> None:
        self.sizes, self.w = sizes, w
        self.values: dict[int, Any] = {}
        self.rng = np.random.default_rng(0)

    def type(self, t: Any) -> Any:
        return t if self.sizes is None else self.sizes.type(t, self.w)

    def sample(self, a: Any) -> None:
        """Draw a sample for a Var that has none."""
        if isinstance(a, Var) and a.id not in self.values:
            self.values[a.id] = _sample(self.type(a.type), self.rng)

    def host(self, a: Any) -> Any:
        """The value a traced body gets for a host atom."""
        if isinstance(a, Var):
            return self.values[a.id]
        if self.sizes is None:
            # NOTE: a copy of a live constant: the cached body's values must not keep the user's array alive
            return a.value.copy() if a.live else a.value
        if a.live:  # (an input of the body: any value of its type will do)
            return _sample(self.type(a.type), self.rng)
        return self.sizes.value(a.value, self.w)


class _Splicer:
    """Traces a function on sample values and copies its ops into a host graph under new ids."""

    def __init__(self, next_id: int) -> None:
        self.next_id = next_id
        #: what the traced bodies read from the world: the host program must check it too (a
        #: user rule's pullback that reads a global must not keep the old value baked in)
        self.deps: list[Any] = []
        #: the uniform array constants of bodies traced on stand-ins, made at the real sizes
        self.made: dict[Any, np.ndarray] = {}

    def _body(self, fn: Any, host_args: tuple[Any, ...], host_kwargs: dict[str, Any], world: _World,
              constant: frozenset[int]) -> _Body | Exception:
        from irad.trace import trace_values

        s_args = tuple(map_atoms(a, world.host) for a in host_args)
        s_kwargs = {k: map_atoms(a, world.host) for k, a in host_kwargs.items()}
        with np.errstate(all="ignore"):
            try:
                g, tracer, _ = trace_values(fn, s_args, s_kwargs, constant)
            except Exception as e:  # the body cannot run on sample values: keep the call
                return e
            return _Body(g, tracer.values, Assumptions(_user_deps(tuple(tracer.deps))))

    def splice(self, fn: Any, host_args: tuple[Any, ...], host_kwargs: dict[str, Any], worlds: tuple[_World, ...],
               loc: Any, keep: Any = None, again: bool = False) -> tuple[list[Op], list[Any], TreeDef, list[list[Any]]]:
        """Trace ``fn`` on the sample values of the host atoms in each world (one at the real
        shapes, or two at stand-ins, merged); returns (ops, output atoms, output tree, each
        world's output values).  ``keep(out_tree) -> {flat output index: host Var}`` names
        outputs that should keep a host variable's identity (the value the host op defined).
        ``again``: trace again on new samples, even if the body failed on the last ones.
        The samples of the Vars the spliced ops define as outputs are added to each world."""
        live: dict[int, Const] = {}  # NOTE: the user's arrays are inputs of the body, never folded into it
        host_leaves: list[Any] = []
        host_tree = TreeDef("tuple", (0, 1), (_host_tree(host_args, host_leaves, live),
                                              _host_tree(host_kwargs, host_leaves, live)))
        constant = frozenset(i for i, leaf in enumerate(host_leaves)
                             if not isinstance(leaf, Var) and id(leaf) not in live)
        if len(worlds) == 1:
            key = _body_key(fn, host_tree, host_leaves, live)
            hit = _BODIES.get(key) if key is not None else None
            if hit is not None and (again if isinstance(hit, Exception) else hit.assumed.check() is not None):
                hit = None  # new samples, or the world the body read changed (a rule reads a global that was rebound)
            if hit is None:
                hit = self._body(fn, host_args, host_kwargs, worlds[0], constant)
                if key is not None:
                    if len(_BODIES) >= _BODIES_MAX:
                        _BODIES.clear()
                    _BODIES[key] = hit
            if isinstance(hit, Exception):
                raise _Skip(f"its body failed on sample values: {type(hit).__name__}: {hit}") from hit
            body: _Body = hit
            out_values = [list(body.out_values)]
        else:  # NOTE: not cached: bodies on stand-ins are cheap to trace again
            traced = []
            for world in worlds:
                b = self._body(fn, host_args, host_kwargs, world, constant)
                if isinstance(b, Exception):
                    raise standins.Mismatch(f"{type(b).__name__}: {b}") from b
                traced.append(b)
            sizes = worlds[0].sizes
            assert sizes is not None
            body = _Body(standins.merge(traced[0].graph, traced[1].graph, sizes, self.made), {}, traced[0].assumed)
            out_values = [list(b.out_values) for b in traced]
        g = body.graph
        self.deps.extend(body.assumed.deps)
        if body.skip is not None:
            raise _Skip(body.skip)
        env: dict[int, Any] = {}
        statics = body.statics
        k = 0
        for i, leaf in enumerate(host_leaves):
            if i in statics:
                if isinstance(leaf, Var):  # its sample would be baked into the body as a constant
                    raise _Skip(f"the sample of {leaf} was not traced")
                continue
            inp = g.inputs[k]
            k += 1
            env[inp.id] = leaf if isinstance(leaf, Var) else live.get(id(leaf)) or const(leaf)
        preset: dict[int, Var] = {}
        if keep is not None:
            defined = body.defined
            seen: set[int] = set()
            for i, host in keep(g.out_tree).items():
                o = g.outputs[i]
                if isinstance(o, Var) and o.id in defined and o.id not in seen and host.type == o.type:
                    preset[o.id] = host
                seen.add(getattr(o, "id", -1))

        def sub(a: Any) -> Any:
            return env.get(a.id, a) if isinstance(a, Var) else a

        ops: list[Op] = []
        next_id = self.next_id
        for op in g.ops:
            outs = []
            for o in op.outs:
                n = preset.get(o.id)
                if n is None:
                    n = Var(next_id, o.type)
                    next_id += 1
                env[o.id] = n
                outs.append(n)
            args = op.args
            args = tuple([env.get(a.id, a) if type(a) is Var else a for a in args]) \
                if all(type(a) is Var or type(a) is Const for a in args) else tuple(map_atoms(a, sub) for a in args)
            kwargs = tuple((kk, map_atoms(v, sub)) for kk, v in op.kwargs) if op.kwargs else ()
            ops.append(Op(op.prim, args, kwargs, tuple(outs), op.fn, loc, op.unpack))
        self.next_id = next_id
        outs_atoms = [env.get(o.id, o) if isinstance(o, Var) else o for o in g.outputs]
        for world, values in zip(worlds, out_values):
            for o, a, v in zip(g.outputs, outs_atoms, values):
                if isinstance(o, Var) and o.id in body.defined:
                    world.values[a.id] = v
        return ops, outs_atoms, g.out_tree or flatten(None)[1], out_values


#: constant values that flatten to one leaf
_PLAIN_LEAVES = (float, int, bool, complex, str, np.ndarray, np.float64)


def _host_tree(x: Any, leaves: list[Any], live: dict[int, Const]) -> TreeDef:
    """``flatten`` of an op's argument structure with its Consts replaced by their values (the
    user's arrays among them noted in ``live``): the same leaves and TreeDef, without the generic
    walk's per-leaf checks for user pytree nodes (this runs for every spliced rule call)."""
    tx = type(x)
    if tx is Var:
        leaves.append(x)
        return LEAF
    if tx is tuple or tx is list:
        return TreeDef(tx.__name__, tuple(range(len(x))), tuple([_host_tree(c, leaves, live) for c in x]))
    if tx is dict:
        keys = tuple(x)
        return TreeDef("dict", keys, tuple([_host_tree(x[k], leaves, live) for k in keys]))
    if isinstance(x, Var):
        leaves.append(x)
        return LEAF
    if isinstance(x, Const):
        if x.live:
            live[id(x.value)] = x
        v = x.value
        if type(v) in _PLAIN_LEAVES:
            leaves.append(v)
            return LEAF
        sub, tree = flatten(v)
        leaves.extend(sub)
        return tree
    sub, tree = flatten(x)  # (not an atom: a raw value, as map_atoms leaves it)
    leaves.extend(sub)
    return tree


def _user_deps(deps: tuple[Any, ...]) -> tuple[Any, ...]:
    """The dependencies of a traced rule body that can change: irad's and numpy's own globals,
    the code and closure cells of their functions, and containers reached from those are not
    user state (``irad.signature.LIBRARY_ROOTS``); a user rule's reads of its own module's
    globals and closures are.  Every cached program checks its deps on every call: keeping the
    library's out keeps that check as short as the trace's own."""
    from irad.signature import Dep, is_library_module
    lib_cells: set[int] = set()
    lib_values: set[int] = set()
    kept = []
    for dep in deps:
        d = Dep(*dep)
        if d.kind == "function":
            fn = d.obj() if callable(d.obj) else None
            if fn is not None and is_library_module(getattr(fn, "__module__", None) or ""):
                lib_cells.update(id(c) for c in (fn.__closure__ or ()))
                continue
        elif d.kind == "global":
            namespace = getattr(d.obj, "value", None)
            if isinstance(namespace, dict) and is_library_module(str(namespace.get("__name__", ""))):
                lib_values.add(id(getattr(d.expected, "value", None)))
                continue
        kept.append(d)
    return tuple(d for d in kept if not (d.kind == "cell" and id(getattr(d.obj, "value", None)) in lib_cells)
                 and not (d.kind == "contents" and id(getattr(d.obj, "value", None)) in lib_values))


def _leaf_index(tree: TreeDef, path: tuple[Any, ...]) -> int | None:
    """Flat leaf index of ``path`` in ``tree`` (None when the path holds no single leaf)."""
    offset = 0
    t = tree
    for p in path:
        if t.kind in ("leaf", "none") or p not in t.keys:
            return None
        k = t.keys.index(p)
        offset += sum(c.num_leaves for c in t.children[:k])
        t = t.children[k]
    return offset if t.kind == "leaf" else None


def inline_pullbacks(g: Graph) -> Graph:
    """Inline rule forwards and their pullbacks as primitive ops.

    Before: ``%3, %7 = rule_fwd[numpy.tanh](%2)`` ... ``%9 = pullback[numpy.tanh](%7, %8)``.
    After:  ``%3 = numpy.tanh(%2)`` ... ``%10 = operator.mul(%3, %3)``, ``%11 = operator.sub(1, %10)``,
    ``%9 = operator.mul(%8, %11)`` (the ops of the rule's named functions).
    """
    with collector_paused():
        return _inline_pullbacks(g)


def _inline_pullbacks(g: Graph) -> Graph:
    deps: list[Any] = []
    plans = plan_rules(g, deps=deps)
    if not plans:
        return g
    env: dict[int, Any] = {}  # old var id -> replacement atom

    def sub(a: Any) -> Any:
        return env.get(a.id, a) if isinstance(a, Var) else a

    def subst(op: Op) -> Op:
        if not any(v.id in env for v in op.inputs):
            return op
        return Op(op.prim, tuple(map_atoms(a, sub) for a in op.args),
                  tuple((k, map_atoms(v, sub)) for k, v in op.kwargs), op.outs, op.fn, op.loc, op.unpack)

    new_ops: list[Op] = []
    for k, op in enumerate(g.ops):
        plan = plans.get(k)
        if plan is None:
            new_ops.append(subst(op) if env else op)
            continue
        ops, binds = plan
        new_ops.extend(subst(o) for o in ops)
        for old, atom in binds:
            if not (isinstance(atom, Var) and atom.id == old):
                env[old] = sub(atom)
    outputs = tuple(map_atoms(o, sub) for o in g.outputs)
    n_rules = sum(1 for k, op in enumerate(g.ops) if op.prim == "rule_fwd" and k in plans)
    return g.replace(ops=tuple(new_ops), outputs=outputs, assumed=g.assumed + tuple(dict.fromkeys(deps)),
                     provenance=g.provenance + (f"after inline_pullbacks: inlined {n_rules} rules",))


Plan = tuple[list[Op], list[tuple[int, Any]]]  # spliced ops, (old var id, new atom) bindings


def plan_rules(g: Graph, reasons: dict[int, str] | None = None, deps: list[Any] | None = None) -> dict[int, Plan]:
    """For each rule_fwd whose state only feeds its pullbacks: the spliced ops of the forward and of
    every pullback (keyed by op index), or nothing when any of them cannot be inlined; then
    ``reasons`` (when given) says why, for the forward and each of its pullbacks; ``deps`` (when
    given) receives what the traced bodies read from the world.  The ONNX exporter uses the same
    plans to write a rule as named functions instead of splicing it."""
    fwd_at = {op.outs[-1].id: k for k, op in enumerate(g.ops) if op.prim == "rule_fwd"}
    pullbacks: dict[int, list[int]] = {}
    blocked: dict[int, str] = {}  # state id -> why the rule stays a call
    for k, op in enumerate(g.ops):
        for i, v in enumerate(op.inputs):
            if v.id in fwd_at:
                if op.prim == "pullback" and op.args[0] == v and i == 0:
                    pullbacks.setdefault(v.id, []).append(k)
                elif op.prim == "call_pullback":
                    blocked[v.id] = "its pullback is a closure irad could not lift into a named function"
                else:
                    blocked[v.id] = f"its state is read by {op.prim}, not only by its pullback"
    for o in g.outputs:
        if isinstance(o, Var) and o.id in fwd_at:
            blocked[o.id] = "its state is an output of the graph"
    next_id = 1 + max([v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs], default=-1)
    sp = _Splicer(next_id)
    full = _World()
    sizes = standins.plan(g)
    small = (_World(sizes, 0), _World(sizes, 1)) if sizes is not None else ()
    everywhere = (full,) + small

    # NOTE: a sample lives until the last rule that reads it is spliced (iterations in the order
    # of fwd_at): on big inputs the samples of every value of the graph at once would be many
    # times the data; the draws (and so the sample values) are the same as when all were kept
    last: dict[int, int] = {}
    for j, (sid, k) in enumerate(fwd_at.items()):
        if sid in blocked:
            continue
        for v in g.ops[k].inputs:
            last[v.id] = j
        for pk in pullbacks.get(sid, []):
            for a in _atoms_in(g.ops[pk].args[1]):
                if isinstance(a, Var):
                    last[a.id] = j
    dies: dict[int, list[int]] = {}
    for vid, j in last.items():
        dies.setdefault(j, []).append(vid)

    def release(j: int, n0: list[int]) -> None:
        for world, n in zip(everywhere, n0):
            samples = world.values
            added = len(samples) - n  # (nothing is deleted during an iteration: new keys come last)
            for vid in list(itertools.islice(reversed(samples), added)) if added > 0 else ():
                if last.get(vid, -1) <= j:
                    del samples[vid]
            for vid in dies.get(j, ()):
                samples.pop(vid, None)

    locs: dict[tuple[Any, ...], Loc] = {}

    def pullback_loc(at: Loc, name: str) -> Loc:
        key = (at.file, at.line, name)
        loc = locs.get(key)
        if loc is None:
            loc = locs[key] = Loc(at.file, at.line, f"pullback of {name}")
        return loc

    own: set[int] = set()
    if sizes is not None:
        from irad.rules._common import builtin_entries
        own = {id(e.rule) for e in builtin_entries()}

    def on_standins(k: int) -> bool:
        """Trace this rule on stand-ins: one of irad's rule tables (not a user's rule, nor a
        built-in one that calls user code: custom_vjp, solvers), with a big argument or cotangent."""
        if sizes is None:
            return False
        op = g.ops[k]
        if id(op.kw("_rule")) not in own:
            return False
        atoms = _atoms_in(op.args) + [a for pk in pullbacks.get(op.outs[-1].id, []) for a in _atoms_in(g.ops[pk].args[1])]
        return any(sizes.shrinks(a.type) for a in atoms if isinstance(a, (Var, Const)))

    def rule_plans(sid: int, k: int, worlds: tuple[_World, ...]) -> dict[int, Plan]:
        """The plans of the rule_fwd at ``k`` and of its pullbacks, traced in ``worlds``; raises
        _Skip, or standins.Mismatch."""
        op = g.ops[k]
        rule = op.kw("_rule")
        kwargs = {n: v for n, v in op.kwargs if not n.startswith("_")}
        for world in worlds:
            for a in op.inputs:
                world.sample(a)
        try:
            ops, outs, tree, values = sp.splice(rule.fwd, op.args, kwargs, worlds, op.loc,
                                                lambda t: dict(enumerate(op.outs[:-1])))
        except (_Skip, standins.Mismatch):
            # NOTE: some rules need better-conditioned samples (cholesky, inv): retry with
            # symmetric positive definite matrices; only shapes and dtypes matter to the splice
            if not all([_spd_samples(op.inputs, world) for world in worlds]):
                raise
            ops, outs, tree, values = sp.splice(rule.fwd, op.args, kwargs, worlds, op.loc,
                                                lambda t: dict(enumerate(op.outs[:-1])), again=True)
        if tree.kind != "tuple" or len(tree.children) != 2:
            raise _Skip("fwd did not return (y, state)")
        n_y = tree.children[0].num_leaves
        if n_y != len(op.outs) - 1:
            raise _Skip("output structure differs")
        binds: list[tuple[int, Any]] = list(zip([o.id for o in op.outs[:-1]], outs[:n_y]))
        _same_types(op.outs[:-1], outs[:n_y], "output")
        for world in worlds:
            for o, a in binds:
                if isinstance(a, Var):
                    world.values[o] = world.values.get(a.id)
        stree = tree.children[1]
        for a in outs[n_y:]:
            if isinstance(a, Const) and not _plain_static(a.value):
                # e.g. a closure pullback: its cells hold the sample values of this trace
                raise _Skip("the state holds an opaque object")
        st_host = _as_atoms(unflatten(stree, outs[n_y:]))
        for world, vals in zip(worlds, values):
            for a, v in zip(outs[n_y:], vals[n_y:]):
                if isinstance(a, Var):
                    world.values.setdefault(a.id, v)
        pb_plans: dict[int, Plan] = {}
        for pk in pullbacks.get(sid, []):
            pop = g.ops[pk]
            for world in worlds:
                for a in _atoms_in(pop.args[1]):
                    world.sample(a)
            loc = pullback_loc(pop.loc, rule.name) if pop.loc else None
            def keep(t: TreeDef, pop: Op = pop) -> dict[int, Var]:
                return {i: o for i, o in zip([_leaf_index(t, p) for p in pop.paths], pop.outs) if i is not None}
            b_ops, b_outs, b_tree, _ = sp.splice(rule.bwd, (st_host, pop.args[1]), {}, worlds, loc, keep)
            picks = [_leaf_index(b_tree, p) for p in pop.paths]
            if any(p is None for p in picks):
                raise _Skip("cotangent structure differs")
            _same_types(pop.outs, [b_outs[p] for p in picks], "cotangent")  # type: ignore[index]
            pb_plans[pk] = (b_ops, [(o.id, b_outs[p]) for o, p in zip(pop.outs, picks)])  # type: ignore[index]
        return {k: (ops, binds), **pb_plans}

    plans: dict[int, Plan] = {}
    for j, (sid, k) in enumerate(fwd_at.items()):
        if sid in blocked:
            if reasons is not None:
                for pk in [k] + pullbacks.get(sid, []):
                    reasons[pk] = blocked[sid]
            continue
        n0 = [len(world.values) for world in everywhere]
        try:
            if on_standins(k):
                next_id = sp.next_id
                try:
                    plans.update(rule_plans(sid, k, small))
                except (_Skip, standins.Mismatch):  # (not the same function of the sizes: the real shapes)
                    sp.next_id = next_id
                    plans.update(rule_plans(sid, k, (full,)))
            else:
                plans.update(rule_plans(sid, k, (full,)))
        except (_Skip, standins.Mismatch) as e:
            if reasons is not None:
                for pk in [k] + pullbacks.get(sid, []):
                    reasons[pk] = str(e)
        release(j, n0)
    if deps is not None:
        deps.extend(sp.deps)
    return plans


def _atoms_in(x: Any) -> list[Any]:
    """The atoms of an argument structure, in ``flatten``'s order (``flatten(x, is_leaf=atom)``)."""
    tx = type(x)
    if tx is Var or tx is Const:
        return [x]
    if tx is tuple or tx is list:
        out: list[Any] = []
        for e in x:
            out += _atoms_in(e)
        return out
    return flatten(x, is_leaf=lambda y: isinstance(y, (Var, Const)))[0]


def _same_types(host: Any, spliced: list[Any], what: str) -> None:
    """The body traced on samples must give the types the call gave: a dtype that depends on the
    values (scipy.linalg.sqrtm of a real matrix is complex when it has a negative eigenvalue)
    means the sample trace took another path than the program's values do."""
    for h, a in zip(host, spliced):
        t = a.type if isinstance(a, Var) else getattr(a, "type", None)
        if t is not None and t != h.type:
            raise _Skip(f"the body's {what} on sample values is {t}, the call's {h.type} (a value-dependent type)")


def _plain_static(x: Any) -> bool:
    """State that means the same for every input of these shapes: shapes, axes, flags, and arrays
    the rule made without reading its inputs (an untraced array cannot depend on them).  Not
    functions or objects: a closure made during the sample trace holds sample values."""
    if x is None or x is Ellipsis or isinstance(x, (bool, int, float, complex, str, np.dtype, type, slice,
                                                     np.ndarray, np.generic)):
        return True
    if isinstance(x, (tuple, list)):
        return all(_plain_static(e) for e in x)
    return False


def _as_atoms(x: Any) -> Any:
    """A state pytree of atoms as an op-argument structure (tuples/lists of atoms)."""
    if isinstance(x, (Var, Const)):
        return x
    if type(x) in (tuple, list):
        return type(x)(_as_atoms(e) for e in x)
    if type(x) is dict:
        return {k: _as_atoms(e) for k, e in x.items()}
    return const(x)
