"""Everything that differs between CPython 3.11, 3.12 and 3.13 bytecode, in one place.

The rest of irad emits hooks through these helpers and never tests the version itself.
Facts (measured, see TRACER-NOTES): 3.11 calls need PRECALL; the NULL of a call sits *below*
the callable on 3.11/3.12 and *above* it on 3.13; method loads are LOAD_METHOD on 3.11 and the
low bit of LOAD_ATTR on 3.12+; keyword names come from KW_NAMES (3.11/3.12) or a constant
loaded right before CALL_KW (3.13); 3.13 adds TO_BOOL and compare-with-bool-cast.
"""
from __future__ import annotations

import sys
from typing import Any, cast

from bytecode import Instr

PY311 = sys.version_info >= (3, 11)
PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)
if not PY311:  # pragma: no cover
    raise ImportError("irad needs CPython 3.11 or newer")

#: 3.13 and later put the NULL (or self) slot above the callable.
NULL_ABOVE_CALLABLE = PY313

#: the "cast to bool" bit of COMPARE_OP's argument on 3.13
COMPARE_CAST_BIT = 16

#: conditional jumps that test truthiness of the top of stack (3.13 tests exact bools after TO_BOOL)
TRUTH_JUMPS = frozenset(
    () if PY313 else
    ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE",
     "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")
)

#: truth tests that leave the tested value itself on the stack (the hook must not replace it by a bool)
TRUTH_KEEPS_VALUE = frozenset({"JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"})

#: instructions before which a truth test is hooked
TRUTH_TESTS = frozenset({"TO_BOOL"} if PY313 else {"UNARY_NOT"}) | TRUTH_JUMPS

#: unary operators that are their own opcode (3.12+ moved unary plus to CALL_INTRINSIC_1)
UNARY_OPS = frozenset({"UNARY_NEGATIVE", "UNARY_INVERT"} | (set() if PY312 else {"UNARY_POSITIVE"}))

INTRINSIC_UNARY_POSITIVE = 5


def call(m: int, loc: Any) -> list[Instr]:
    """Call with the layout ``[callable_or_self, ..., m args]`` already on the stack."""
    seq = [Instr("CALL", m, location=loc)]
    if not PY312:
        seq.insert(0, Instr("PRECALL", m, location=loc))
    return seq


def hook(h: Any, k: int, extras: tuple[Any, ...], loc: Any) -> list[Instr]:
    """Replace the top ``k`` stack values by ``h(v1, ..., vk, *extras)``.

    The hook is pushed and rotated *below* the operands, so the call sees it in the
    "method" slot and the first operand as ``self``: the same sequence works on every version.
    """
    seq = [Instr("LOAD_CONST", h, location=loc)]
    seq += [Instr("SWAP", i, location=loc) for i in range(k + 1, 1, -1)]
    seq += [Instr("LOAD_CONST", e, location=loc) for e in extras]
    return seq + call(k - 1 + len(extras), loc)


def push_null_for_method(loc: Any) -> list[Instr]:
    """After a plain attribute load, add the NULL that a method call expects."""
    if NULL_ABOVE_CALLABLE:
        return [Instr("PUSH_NULL", location=loc)]
    return [Instr("PUSH_NULL", location=loc), Instr("SWAP", 2, location=loc)]


def call_with_hook(h: Any, n: int, kwnames: tuple[str, ...] | None, loc: Any) -> list[Instr]:
    """Rewrite a call of ``n`` arguments whose NULL slot is a real NULL into
    ``h(callable, args_tuple, kwnames)``."""
    seq = [Instr("BUILD_TUPLE", n, location=loc), Instr("LOAD_CONST", kwnames, location=loc)]
    return seq + _rotate_into_call(h, loc)


def call_ex_with_hook(h: Any, has_kwargs: bool, loc: Any) -> list[Instr]:
    """Rewrite CALL_FUNCTION_EX into ``h(callable, args, kwargs_or_None)``."""
    seq = [] if has_kwargs else [Instr("LOAD_CONST", None, location=loc)]
    return seq + _rotate_into_call(h, loc)


def _rotate_into_call(h: Any, loc: Any) -> list[Instr]:
    # stack: [NULL, f, a, b] (3.11/3.12) or [f, NULL, a, b] (3.13)  ->  h(f, a, b)
    swaps = (5, 3, 2) if NULL_ABOVE_CALLABLE else (4, 3, 2)
    return ([Instr("LOAD_CONST", h, location=loc)] + [Instr("SWAP", s, location=loc) for s in swaps]
            + call(3, loc))


# ---- NULL-slot analysis ---------------------------------------------------------------------
# Which calls have a real NULL in their NULL slot (hookable) and which have a real object there
# (the `with` exit, 3.11 comprehension calls, decorators): the latter must stay native.

NULL, OTHER = "N", "x"


def method_load_tags() -> list[str]:
    """Tags pushed by a method load once irad has rewritten it to attribute + NULL."""
    return [OTHER, NULL] if NULL_ABOVE_CALLABLE else [NULL, OTHER]


def call_null_depth(instr: Instr) -> tuple[int, int] | None:
    """For a call instruction: (depth of its NULL slot from the top, number of items it pops)."""
    name, arg = instr.name, cast(int, instr.arg)  # every call instruction's argument is a count
    if name == "PRECALL" or (name == "CALL" and PY312):
        n = arg
        return (n + 1, n + 2) if NULL_ABOVE_CALLABLE else (n + 2, n + 2)
    if name == "CALL_KW":
        return (arg + 2, arg + 3)
    if name == "CALL_FUNCTION_EX":
        k = 1 + (arg & 1)  # args (+ kwargs)
        return (k + 1, k + 2) if NULL_ABOVE_CALLABLE else (k + 2, k + 2)
    return None


def is_method_load(instr: Instr) -> bool:
    if instr.name == "LOAD_METHOD":
        return True
    return PY312 and instr.name in ("LOAD_ATTR", "LOAD_SUPER_ATTR") and bool(cast("tuple[bool, ...]", instr.arg)[0])


def global_null_tags(instr: Instr) -> list[str] | None:
    """Tags pushed by LOAD_GLOBAL with its push-NULL bit set."""
    if instr.name == "LOAD_GLOBAL" and isinstance(instr.arg, tuple) and instr.arg[0]:
        return [OTHER, NULL] if NULL_ABOVE_CALLABLE else [NULL, OTHER]
    return None


def plain_attr_load(instr: Instr) -> Instr:
    """The non-method form of a method load (pushes just the bound attribute)."""
    loc = instr.location
    if instr.name == "LOAD_METHOD":
        return Instr("LOAD_ATTR", instr.arg, location=loc)
    if instr.name == "LOAD_SUPER_ATTR":
        arg3 = cast("tuple[bool, bool, str]", instr.arg)  # (method bit, two-arg bit, name)
        return Instr("LOAD_SUPER_ATTR", (False,) + tuple(arg3[1:]), location=loc)
    return Instr("LOAD_ATTR", (False, cast("tuple[bool, str]", instr.arg)[1]), location=loc)


def attr_name(instr: Instr) -> str:
    arg = cast("tuple[bool, str] | str", instr.arg)  # LOAD_ATTR / LOAD_METHOD: (method bit, name) or name
    return arg[1] if isinstance(arg, tuple) else arg


def load_attr(name: str, loc: Any = None) -> Instr:
    """A plain (non-method) attribute load."""
    return Instr("LOAD_ATTR", (False, name) if PY312 else name, location=loc)

#: instructions that push a cell for an inner closure (3.13 spells LOAD_CLOSURE as LOAD_FAST of a cell)
CLOSURE_LOADS = frozenset({"LOAD_CLOSURE", "LOAD_FAST"} if PY313 else {"LOAD_CLOSURE"})
