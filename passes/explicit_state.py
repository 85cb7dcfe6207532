"""Explicit state for closure-form rules: the closure a user's ``@irad.rrule`` returns becomes a
named pullback of explicit state (seed thread 000)."""
from __future__ import annotations

import types
from typing import Any

import numpy as np

from irad.errors import TraceError
from irad.ir import STATE, Const, Graph, Op, Var, map_atoms
from irad.lift import CannotLift, lift
from irad.rules.registry import Rule
from irad.weakcache import WeakIdMap

from .inline import _sample, _Skip

#: rule -> pullback code -> its explicit twin; weak and by identity (a dead rule's or code's id is
#: reused), and the twin refers to neither key (``fwd`` keeps the rule's name, not the rule)
_LIFTED: WeakIdMap[Rule, WeakIdMap[types.CodeType, Rule]] = WeakIdMap()


def _explicit_rule(rule: Rule, closure: types.FunctionType) -> Rule:
    """The explicit twin of a closure rule: ``fwd`` returns the closure's free variables (or
    cells) as state; ``bwd`` is the lifted pullback, an ordinary named function."""
    per_code = _LIFTED.get(rule)
    if per_code is None:
        per_code = _LIFTED[rule] = WeakIdMap()
    hit = per_code.get(closure.__code__)
    if hit is not None:
        return hit
    lifted = lift(closure, f"{rule.name.replace('.', '_').replace('<', '').replace('>', '')}_pullback")
    code, rule_fn, rule_name, cells = closure.__code__, rule.closure_fn, rule.name, lifted.mode == "cells"
    site = (code.co_filename, code.co_firstlineno, code.co_qualname)  # NOTE: traced code runs an instrumented twin

    def fwd(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        y, pb = rule_fn(*args, **kwargs)
        c = getattr(pb, "__code__", None)
        if c is None or (c.co_filename, c.co_firstlineno, c.co_qualname) != site:
            raise TraceError(f"the rule for {rule_name} returned a different pullback than when it was lifted",
                             hint="return one pullback function from a closure rule")
        state = pb.__closure__ or ()
        return y, tuple(state) if cells else tuple(c.cell_contents for c in state)

    lifted_fn = lifted.fn

    def bwd(state: Any, ybar: Any) -> tuple[Any, ...]:
        r = lifted_fn(*state, ybar)
        return tuple(r) if isinstance(r, (tuple, list)) else (r,)

    from irad.rules import generated
    base = lifted_fn.__name__
    for f, name in ((fwd, base.replace("_pullback", "_fwd")), (bwd, base)):
        f.__name__ = f.__qualname__ = name
        f.__module__ = generated.__name__
        setattr(generated, name, f)
    lifted_fn.__module__ = generated.__name__
    lifted_fn.__qualname__ = f"{base}_body"
    setattr(generated, lifted_fn.__qualname__, lifted_fn)
    new = Rule(rule.impl, rule.name, fwd, bwd, "lifted", rule.types, rule.closure_fn)
    per_code[code] = new
    return new


def explicit_state(g: Graph) -> Graph:
    """Lift the pullback closures of closure-form rules into named functions of explicit state.

    Before: ``%3, %4 = rule_fwd[my_fn](%2)`` ... ``%6 = call_pullback[my_fn](%4, %5)`` (the state is a closure).
    After:  the same ops calling ``my_fn_fwd`` (state: the captured values) and ``my_fn_pullback``.
    A closure that cannot be lifted stays a ``call_pullback`` with the reason attached.
    """
    rng = np.random.default_rng(0)
    replaced: dict[int, Rule] = {}
    why: dict[int, str] = {}
    for op in g.ops:
        if op.prim != "rule_fwd" or op.kw("_rule").kind != "closure":
            continue
        rule = op.kw("_rule")
        try:
            samples = {v.id: _sample(v.type, rng) for v in op.inputs}
            args = [map_atoms(a, lambda x: samples[x.id] if isinstance(x, Var) else x.value) for a in op.args]
            kwargs = {k: map_atoms(a, lambda x: samples[x.id] if isinstance(x, Var) else x.value)
                      for k, a in op.kwargs if not k.startswith("_")}
            with np.errstate(all="ignore"):
                _, pb = rule.closure_fn(*args, **kwargs)
            if not isinstance(pb, types.FunctionType):
                raise CannotLift(f"the pullback is a {type(pb).__name__}, not a Python function, so irad "
                                 "cannot lift it into a named function of explicit state")
            replaced[op.outs[-1].id] = _explicit_rule(rule, pb)
        except (CannotLift, _Skip) as e:
            why[op.outs[-1].id] = str(e)
        except Exception as e:  # the rule cannot run on sample values: keep it as a closure
            why[op.outs[-1].id] = f"the rule could not run on sample values ({type(e).__name__}: {e})"
    if not replaced and not why:
        return g
    ops = []
    changed = False
    for op in g.ops:
        if op.prim == "rule_fwd" and op.outs[-1].id in replaced:
            new = replaced[op.outs[-1].id]
            kw = tuple((k, Const(new, STATE) if k == "_rule" else v) for k, v in op.kwargs)
            op = Op("rule_fwd", op.args, kw, op.outs, new.fwd, op.loc, op.unpack)
            changed = True
        elif op.prim == "call_pullback" and isinstance(op.args[0], Var):
            sid = op.args[0].id
            if sid in replaced:
                new = replaced[sid]
                op = Op("pullback", op.args, (("_rule", Const(new, STATE)),), op.outs, new.bwd, op.loc, op.unpack)
                changed = True
            elif sid in why and op.kw("_why") is None:
                op = Op(op.prim, op.args, op.kwargs + (("_why", Const(why[sid], STATE)),), op.outs, op.fn, op.loc,
                        op.unpack)
                changed = True
        ops.append(op)
    if not changed:
        return g
    return g.replace(ops=tuple(ops), provenance=g.provenance + (f"after explicit_state: lifted {len(replaced)} "
                                                                f"closure pullbacks",))


def not_serialisable(g: Graph) -> list[str]:
    """Why ``g`` cannot be serialised (e.g. to ONNX): one line per op that holds a closure."""
    out = []
    for op in g.ops:
        if op.prim == "call_pullback":
            reason = op.kw("_why") or "the pullback is a closure not lifted yet (run irad.passes.explicit_state)"
            where = f" at {op.loc}" if op.loc else ""
            out.append(f"call_pullback[{op.kw('_rule').name}]{where}: {reason}")
    return out

