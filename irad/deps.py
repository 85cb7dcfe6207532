"""What a compiled program depends on besides its arguments, and the check that it is unchanged.

While tracing, the tracer records every global and module attribute a traced function reads, the
closure cells it reads, the methods and properties it resolved on classes, and the implementation
``functools.singledispatch`` or plum chose.  Before each call a program checks them (a few
dictionary lookups: measured in docs/benchmarks.md) and is traced again when one changed, so
redefining a function, assigning a method, registering an overload or rebinding a global takes
effect at the next call.  Rule registrations change the cache key instead (``registry.version``).
"""
from __future__ import annotations

from typing import Any

MISSING = object()
LIBRARY_PREFIXES = ("numpy", "math", "builtins", "functools", "operator", "irad", "scipy", "collections",
                     "itertools", "typing", "abc", "_")


class Identity:
    """A value compared by identity, hashable whatever it is (an array, a list...)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


class DictRef(Identity):
    """A namespace dict, compared and hashed by identity."""


def check_deps(deps: tuple[tuple[Any, ...], ...]) -> str | None:
    """None when everything a trace read is unchanged; else what changed (the program is stale)."""
    for kind, obj, key, expected in deps:
        if kind == "global":
            if obj.value.get(key, MISSING) is not expected.value:
                return f"global {key!r} was rebound"
        elif kind == "cell":
            try:
                if obj.value.cell_contents is not expected.value:
                    return "a closure variable was rebound"
            except ValueError:
                return "a closure variable was deleted"
        elif kind == "attr":
            found = None
            for klass in obj.__mro__:
                if key in vars(klass):
                    found = vars(klass)[key]
                    break
            if found is not expected.value:
                return f"{obj.__qualname__}.{key} was redefined"
        elif kind == "dispatch":
            if obj.dispatch(key) is not expected:
                return f"a new overload of {obj.__qualname__} was registered"
        elif kind == "plum":
            from .rules.registry import implementation
            if implementation(obj, key) is not expected:
                return "a new plum method was registered"
    return None
