"""The one list of impure operations: random draws, printing, I/O.

The tracer records them even when no traced value flows in (so a graph draws anew and prints
anew each time it runs); CSE never merges them and DCE never drops them.
"""
from __future__ import annotations

import builtins
import random
from typing import Any

import numpy as np

IMPURE_FUNCTIONS: set[Any] = {builtins.print, builtins.input, builtins.open}
#: objects whose methods are impure (random generators hold state)
IMPURE_OWNERS: tuple[type, ...] = (np.random.RandomState, np.random.Generator, random.Random)
IMPURE_MODULES: tuple[str, ...] = ("numpy.random",)
#: IR primitives (by printed name) that are impure besides the above
IMPURE_PRIMS: set[str] = {"irad.primitives.draw_order"}


def mark_impure(fn: Any) -> Any:
    """Declare a user function impure: irad records every call and passes keep it."""
    IMPURE_FUNCTIONS.add(fn)
    from .rules.registry import qualname
    IMPURE_PRIMS.add(qualname(fn))
    return fn


def is_impure(fn: Any) -> bool:
    try:
        if fn in IMPURE_FUNCTIONS:
            return True
    except TypeError:
        pass
    owner = getattr(fn, "__self__", None)
    if owner is not None and isinstance(owner, IMPURE_OWNERS):
        return True
    mod = getattr(fn, "__module__", None) or ""
    if mod.startswith(IMPURE_MODULES):
        return True
    from .rules.registry import qualname
    try:
        return qualname(fn).startswith(("numpy.random.", "random."))
    except Exception:
        return False


def is_impure_prim(prim: str) -> bool:
    """Impurity by printed primitive name (used by passes, which see ops, not callables)."""
    return (prim in IMPURE_PRIMS or prim.startswith(("numpy.random.", "random.")) or
            prim in ("builtins.print", "builtins.input", "builtins.open"))
