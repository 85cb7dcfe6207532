"""Caches that forget what the user released.

``WeakIdMap`` keys by identity (code objects compare equal across files; user callables may define
``__eq__``) and drops an entry the moment its key dies, so a dead object's id, which CPython hands
to the next object allocated there, never finds the dead one's value.  A value must not refer back
to its key, or the key never dies: store what was derived from it, and rebuild anything that closes
over it per lookup.

``compile_source`` compiles irad's generated programs under a unique file name whose linecache
entry (for tracebacks and ``inspect``) lives exactly as long as the code compiled from it.
"""
from __future__ import annotations

import itertools
import linecache
import types
import weakref
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class WeakIdMap(Generic[K, V]):
    """``key -> value`` by identity, holding keys weakly: an entry goes when its key dies."""

    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d: dict[int, tuple[weakref.ref[K], V]] = {}

    def get(self, key: K) -> V | None:
        hit = self._d.get(id(key))
        # NOTE: the identity check also covers a key whose death callback has not run yet
        return hit[1] if hit is not None and hit[0]() is key else None

    def __setitem__(self, key: K, value: V) -> None:
        """Raises TypeError when ``key`` is not weak-referenceable."""
        k, d = id(key), self._d

        def forget(ref: weakref.ref[K]) -> None:
            hit = d.get(k)
            if hit is not None and hit[0] is ref:
                del d[k]
        d[k] = (weakref.ref(key, forget), value)

    def __contains__(self, key: object) -> bool:
        hit = self._d.get(id(key))
        return hit is not None and hit[0]() is key

    def __len__(self) -> int:
        return len(self._d)


_SERIAL = itertools.count()


def compile_source(src: str, kind: str) -> types.CodeType:
    """``compile(src)`` as module code, under the file name ``<kind N>`` (N unique per process: an
    ``id`` could be reused), with the source in linecache until the last code object compiled from
    it (module, function, nested lambdas) is freed."""
    filename = f"<{kind} {next(_SERIAL)}>"
    code = compile(src, filename, "exec")
    entry = (len(src), None, src.splitlines(True), filename)
    codes = _code_tree(code)
    live = [None] * len(codes)  # one token per live code object (list.pop is atomic: no lock)
    linecache.cache[filename] = entry
    for c in codes:
        weakref.finalize(c, _release, filename, entry, live).atexit = False
    return code


def _code_tree(code: types.CodeType) -> list[types.CodeType]:
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _code_tree(c)
    return out


def _release(filename: str, entry: tuple[object, ...], live: list[None]) -> None:
    live.pop()
    if not live and linecache.cache.get(filename) is entry:  # (linecache.clearcache() may have dropped it)
        linecache.cache.pop(filename, None)
