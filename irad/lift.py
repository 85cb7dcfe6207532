"""Lambda lifting: turn a closure into an ordinary function whose free variables are parameters.

This is what lets a closure-form rule (``@irad.rrule``) become a *named* pullback of explicit
state (seed thread 000).  Two forms (TRACER-NOTES §4):

- by value: ``LOAD_DEREF x`` becomes ``LOAD_FAST x`` and the state is the captured values;
- cells: for closures that write a captured variable (``nonlocal``), ``x`` becomes a parameter
  holding the *cell*, read and written through ``cell_contents``, so writes keep their meaning.

A free variable that an inner closure captures again becomes a cell variable of the lifted
function (``MAKE_CELL``).  Anything else irad cannot rewrite is reported, not guessed.
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

from bytecode import Bytecode, Instr
from bytecode.instr import CellVar, FreeVar  # (not in the package's __all__)

from . import pyver
from .weakcache import WeakIdMap


@dataclass(frozen=True)
class Lifted:
    """``fn(*free, *args)``: ``free`` are the closure's free variable values (``mode='values'``)
    or its cells (``mode='cells'``), in ``names`` order."""

    fn: types.FunctionType
    names: tuple[str, ...]
    mode: str

    def state_of(self, closure: types.FunctionType) -> tuple[Any, ...]:
        cells = closure.__closure__ or ()
        return tuple(cells) if self.mode == "cells" else tuple(c.cell_contents for c in cells)


class CannotLift(Exception):
    """The closure's code uses a construct the lifter does not rewrite."""


#: closure code -> (lifted code, free names, mode); the lifted code never refers to the original
_CACHE: WeakIdMap[types.CodeType, tuple[types.CodeType, tuple[str, ...], str]] = WeakIdMap()


def lift(closure: types.FunctionType, name: str | None = None) -> Lifted:
    """Lift ``closure``: the rewritten code is cached by the closure's code object; the function is
    made per call with the closure's current globals and defaults (a cached one would keep them)."""
    code = closure.__code__
    hit = _CACHE.get(code)
    if hit is None:
        hit = _CACHE[code] = _lift_code(code, name)
    new_code, free, mode = hit
    fn = types.FunctionType(new_code, closure.__globals__, new_code.co_name, closure.__defaults__)
    fn.__kwdefaults__ = closure.__kwdefaults__
    return Lifted(fn, free, mode)


def _lift_code(code: types.CodeType, name: str | None) -> tuple[types.CodeType, tuple[str, ...], str]:
    bc = Bytecode.from_code(code)
    free = list(bc.freevars)
    writes = {i.arg.name for i in bc if isinstance(i, Instr) and i.name in ("STORE_DEREF", "DELETE_DEREF")
              and isinstance(i.arg, FreeVar)}
    if any(isinstance(i, Instr) and i.name == "DELETE_DEREF" for i in bc):
        raise CannotLift("the closure deletes a captured variable")
    mode = "cells" if writes else "values"
    recaptured = {i.arg.name for i in bc if isinstance(i, Instr) and i.name in pyver.CLOSURE_LOADS
                  and isinstance(i.arg, FreeVar)}
    params = [f"{n}__cell" if mode == "cells" else n for n in free]
    clash = set(params) & set(bc.argnames) | set(params) & set(bc.cellvars)
    if clash:
        raise CannotLift(f"captured names clash with local names: {sorted(clash)}")
    out: list[Any] = []
    for ins in bc:
        if not isinstance(ins, Instr):
            out.append(ins)
            continue
        loc, arg = ins.location, ins.arg
        if ins.name == "COPY_FREE_VARS":
            continue
        if isinstance(arg, FreeVar):
            n = arg.name
            if mode == "cells":
                if ins.name in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
                    out += [Instr("LOAD_FAST", f"{n}__cell", location=loc), pyver.load_attr("cell_contents", loc)]
                elif ins.name == "STORE_DEREF":
                    out += [Instr("LOAD_FAST", f"{n}__cell", location=loc), Instr("STORE_ATTR", "cell_contents",
                                                                                 location=loc)]
                elif ins.name in pyver.CLOSURE_LOADS:
                    out.append(Instr("LOAD_FAST", f"{n}__cell", location=loc))
                else:
                    raise CannotLift(f"{ins.name} of a captured variable")
            elif n in recaptured:
                out.append(Instr(ins.name, CellVar(n), location=loc))
            elif ins.name in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
                out.append(Instr("LOAD_FAST", n, location=loc))
            else:
                raise CannotLift(f"{ins.name} of a captured variable")
            continue
        out.append(ins)
    if mode == "values" and recaptured:
        out = [Instr("MAKE_CELL", CellVar(n)) for n in free if n in recaptured] + out
    new = Bytecode(out)
    new._copy_attr_from(bc)
    new.freevars = []
    if mode == "values" and recaptured:
        new.cellvars = list(bc.cellvars) + [n for n in free if n in recaptured]
    new.argnames = params + list(bc.argnames)
    new.argcount = bc.argcount + len(params)
    if bc.posonlyargcount:
        new.posonlyargcount = bc.posonlyargcount + len(params)
    new.name = name or f"{bc.name}_lifted"
    try:
        new_code = new.to_code()
    except Exception as e:  # pragma: no cover - a bytecode shape we did not foresee
        raise CannotLift(f"rewritten code does not assemble: {e}") from e
    return new_code, tuple(free), mode
