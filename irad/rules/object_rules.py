"""Rules for irad's own structural ops: user objects handed to rules, in-place accumulation."""
from __future__ import annotations

from typing import Any

from .. import primitives as ops
from .registry import defrule


def rebuild_fwd(cls: type, attrs: dict[str, Any]) -> tuple[Any, Any]:
    return ops.rebuild(cls, attrs), None


def rebuild_pullback(_: Any, obj_bar: Any) -> tuple[Any, ...]:
    """An object's cotangent is a dict of attribute cotangents (or an object holding them)."""
    if obj_bar is None:
        return (None, None)
    return (None, dict(obj_bar) if isinstance(obj_bar, dict) else dict(vars(obj_bar)))


def add_into_fwd(a: Any, b: Any) -> tuple[Any, Any]:
    return a + b, None


def add_into_pullback(_: Any, g: Any) -> tuple[Any, ...]:
    return g, g


# NOTE: both are registered directly, outside the table that check_rule sweeps: rebuild's output
# is a user object (no finite differences), and add_into writes into its first argument by design.
# They are tested end to end: tests/test_methods.py and the accumulate_in_place tests.
defrule(ops.rebuild, rebuild_fwd, rebuild_pullback)
defrule(ops.add_into, add_into_fwd, add_into_pullback)
