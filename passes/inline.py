"""Pullback inlining: replace ``rule_fwd``/``pullback`` calls by the primitive ops of their bodies.

A rule's named ``fwd`` and ``bwd`` are ordinary numpy functions, so irad traces them (on values
of the right types) and splices the recorded ops into the graph.  Their work becomes visible to
the other passes: ``tanh``'s backward reads the forward output, and CSE computes ``cos(x)``
once when forward and backward both need it.  A rule whose body branches on values (a guard
appears), cannot run on sample values, or uses opaque state is left as a call.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from irad.ir import GUARD_PRIMS, ArrayT, Const, Graph, Loc, Op, ScalarT, Var, const, map_atoms
from irad.pytree import TreeDef, flatten
from irad.signature import Assumptions


class _Skip(Exception):
    """This rule cannot be inlined; keep the call."""


def _sample(t: Any, rng: np.random.Generator) -> Any:
    if isinstance(t, ArrayT):
        dt = np.dtype(t.dtype)
        if np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.complexfloating):
            a = rng.uniform(0.5, 1.5, t.shape).astype(dt)
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


def _spd_samples(inputs: list[Var], samples: dict[int, Any], rng: np.random.Generator) -> bool:
    """Replace the samples of square float matrices by symmetric positive definite ones."""
    changed = False
    for v in inputs:
        t = v.type
        if isinstance(t, ArrayT) and len(t.shape) >= 2 and t.shape[-1] == t.shape[-2] and \
                np.issubdtype(np.dtype(t.dtype), np.floating):
            n = t.shape[-1]
            m = rng.uniform(-0.1, 0.1, t.shape)
            samples[v.id] = (m + np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(t.dtype)
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
            if isinstance(t, ArrayT) and int(np.prod(t.shape)) > 4096:
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


class _Splicer:
    """Traces a function on sample values and copies its ops into a host graph under new ids."""

    def __init__(self, next_id: int) -> None:
        self.next_id = next_id
        self.rng = np.random.default_rng(0)
        #: what the traced bodies read from the world: the host program must check it too (a
        #: user rule's pullback that reads a global must not keep the old value baked in)
        self.deps: list[Any] = []

    def splice(self, fn: Any, host_args: tuple[Any, ...], host_kwargs: dict[str, Any], samples: dict[int, Any],
               loc: Any, keep: Any = None) -> tuple[list[Op], list[Any], TreeDef, list[Any]]:
        """Trace ``fn`` on the sample values of the host atoms; returns (ops, output atoms,
        output tree, output values).  ``keep(out_tree) -> {flat output index: host Var}`` names
        outputs that should keep a host variable's identity (the value the host op defined)."""
        from irad.trace import trace_values

        def sval(a: Any) -> Any:
            if isinstance(a, Var):
                return samples[a.id]
            # NOTE: a copy of a live constant: the cached body's values must not keep the user's array alive
            return a.value.copy() if a.live else a.value

        live: dict[int, Const] = {}  # NOTE: the user's arrays are inputs of the body, never folded into it

        def hleaf(a: Any) -> Any:
            if isinstance(a, Var):
                return a
            if a.live:
                live[id(a.value)] = a
            return a.value

        s_args = tuple(map_atoms(a, sval) for a in host_args)
        s_kwargs = {k: map_atoms(a, sval) for k, a in host_kwargs.items()}
        host_leaves, host_tree = flatten((tuple(map_atoms(a, hleaf) for a in host_args),
                                          {k: map_atoms(a, hleaf) for k, a in host_kwargs.items()}))
        constant = frozenset(i for i, leaf in enumerate(host_leaves)
                             if not isinstance(leaf, Var) and id(leaf) not in live)
        key = _body_key(fn, host_tree, host_leaves, live)
        hit = _BODIES.get(key) if key is not None else None
        if hit is not None and not isinstance(hit, Exception) and hit[2].check() is not None:
            hit = None  # the world the body read changed (a rule reads a global that was rebound)
        if hit is None:
            with np.errstate(all="ignore"):
                try:
                    g, tracer, _ = trace_values(fn, s_args, s_kwargs, constant)
                except Exception as e:  # the body cannot run on sample values: keep the call
                    hit = e
                else:
                    hit = (g, tracer.values, Assumptions(_user_deps(tuple(tracer.deps))))
            if key is not None:
                if len(_BODIES) >= _BODIES_MAX:
                    _BODIES.clear()
                _BODIES[key] = hit
        if isinstance(hit, Exception):
            raise _Skip(f"its body failed on sample values: {type(hit).__name__}: {hit}") from hit
        g, values, assumed = hit
        self.deps.extend(assumed.deps)
        for op in g.ops:
            if op.prim in GUARD_PRIMS or op.prim.startswith(("numpy.random", "builtins.print")):
                raise _Skip(f"value-dependent control flow or effects in the rule body: {op.prim} at {op.loc}")
        env: dict[int, Any] = {}
        statics = {i for i, _ in g.statics}
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
            defined = {o.id for op in g.ops for o in op.outs}
            seen: set[int] = set()
            for i, host in keep(g.out_tree).items():
                o = g.outputs[i]
                if isinstance(o, Var) and o.id in defined and o.id not in seen and host.type == o.type:
                    preset[o.id] = host
                seen.add(getattr(o, "id", -1))
        ops: list[Op] = []
        for op in g.ops:
            outs = []
            for o in op.outs:
                n = preset.get(o.id)
                if n is None:
                    n = Var(self.next_id, o.type)
                    self.next_id += 1
                env[o.id] = n
                samples[n.id] = values.get(o.id)
                outs.append(n)

            def sub(a: Any) -> Any:
                return env.get(a.id, a) if isinstance(a, Var) else a
            ops.append(Op(op.prim, tuple(map_atoms(a, sub) for a in op.args),
                          tuple((kk, map_atoms(v, sub)) for kk, v in op.kwargs), tuple(outs), op.fn, loc, op.unpack))
        outs_atoms = [env.get(o.id, o) if isinstance(o, Var) else o for o in g.outputs]
        out_values = [values.get(o.id) if isinstance(o, Var) else o.value for o in g.outputs]
        return ops, outs_atoms, g.out_tree or flatten(None)[1], out_values


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
    deps: list[Any] = []
    plans = plan_rules(g, deps=deps)
    if not plans:
        return g
    env: dict[int, Any] = {}  # old var id -> replacement atom

    def sub(a: Any) -> Any:
        return env.get(a.id, a) if isinstance(a, Var) else a

    def subst(op: Op) -> Op:
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
    rng = np.random.default_rng(0)
    samples: dict[int, Any] = {}

    def sample_of(a: Any) -> Any:
        if isinstance(a, Var) and a.id not in samples:
            samples[a.id] = _sample(a.type, rng)
        return samples.get(a.id) if isinstance(a, Var) else a.value

    plans: dict[int, Plan] = {}
    for sid, k in fwd_at.items():
        if sid in blocked:
            if reasons is not None:
                for pk in [k] + pullbacks.get(sid, []):
                    reasons[pk] = blocked[sid]
            continue
        op = g.ops[k]
        rule = op.kw("_rule")
        kwargs = {n: v for n, v in op.kwargs if not n.startswith("_")}
        try:
            for a in op.inputs:
                sample_of(a)
            try:
                ops, outs, tree, values = sp.splice(rule.fwd, op.args, kwargs, samples, op.loc,
                                                    lambda t: dict(enumerate(op.outs[:-1])))
            except _Skip:
                # NOTE: some rules need better-conditioned samples (cholesky, inv): retry with
                # symmetric positive definite matrices; only shapes and dtypes matter to the splice
                if not _spd_samples(op.inputs, samples, rng):
                    raise
                ops, outs, tree, values = sp.splice(rule.fwd, op.args, kwargs, samples, op.loc,
                                                    lambda t: dict(enumerate(op.outs[:-1])))
            if tree.kind != "tuple" or len(tree.children) != 2:
                raise _Skip("fwd did not return (y, state)")
            n_y = tree.children[0].num_leaves
            if n_y != len(op.outs) - 1:
                raise _Skip("output structure differs")
            binds: list[tuple[int, Any]] = list(zip([o.id for o in op.outs[:-1]], outs[:n_y]))
            _same_types(op.outs[:-1], outs[:n_y], "output")
            for o, a in binds:
                if isinstance(a, Var):
                    samples[o] = samples.get(a.id)
            from irad.pytree import unflatten
            stree = tree.children[1]
            for a in outs[n_y:]:
                if isinstance(a, Const) and not _plain_static(a.value):
                    # e.g. a closure pullback: its cells hold the sample values of this trace
                    raise _Skip("the state holds an opaque object")
            st_host = _as_atoms(unflatten(stree, outs[n_y:]))
            for a, v in zip(outs[n_y:], values[n_y:]):
                if isinstance(a, Var):
                    samples.setdefault(a.id, v)
            pb_plans: dict[int, Plan] = {}
            for pk in pullbacks.get(sid, []):
                pop = g.ops[pk]
                for a in flatten(pop.args[1], is_leaf=lambda x: isinstance(x, (Var, Const)))[0]:
                    sample_of(a)
                loc = Loc(pop.loc.file, pop.loc.line, f"pullback of {rule.name}") if pop.loc else None
                def keep(t: TreeDef, pop: Op = pop) -> dict[int, Var]:
                    return {i: o for i, o in zip([_leaf_index(t, p) for p in pop.unpack], pop.outs) if i is not None}
                b_ops, b_outs, b_tree, _ = sp.splice(rule.bwd, (st_host, pop.args[1]), {}, samples, loc, keep)
                picks = [_leaf_index(b_tree, p) for p in pop.unpack]
                if any(p is None for p in picks):
                    raise _Skip("cotangent structure differs")
                _same_types(pop.outs, [b_outs[p] for p in picks], "cotangent")  # type: ignore[index]
                pb_plans[pk] = (b_ops, [(o.id, b_outs[p]) for o, p in zip(pop.outs, picks)])  # type: ignore[index]
        except _Skip as e:
            if reasons is not None:
                for pk in [k] + pullbacks.get(sid, []):
                    reasons[pk] = str(e)
            continue
        plans[k] = (ops, binds)
        plans.update(pb_plans)
    if deps is not None:
        deps.extend(sp.deps)
    return plans


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
