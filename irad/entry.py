"""The fast entry of a cached gradient program: one generated function per program that does what
``GradFunction.__call__`` does on a cache hit, for the argument structure of the call it was built
from, in straight-line Python.

A cached call used to pay for generic code: ``call_key`` walks the arguments and builds a key
tuple, the key is hashed for the lookup, ``prog.unpack`` calls one builder per part of the result
(2-4 us in all on a call of one array, issue 16).  The entry tests the arguments against that one
structure instead (``type(a0) is ndarray and a0.shape == (3,)``: the same tests ``call_key`` makes,
with the key's parts as constants), calls the assumption check and the program, and builds the
result in one expression.

It is only a shortcut, never a second source of truth: anything it does not recognise (another
structure, dtype, shape, static value or rule registry; a stale dependency; a failed guard) returns
``MISS`` and the call takes the generic path, which also keeps the cache's order and warnings.
Programs that write back, set attributes or draw random numbers get no entry.  Every object in the
generated code is a constant of its namespace: no user text (dict keys, static values) is in it.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from .errors import GuardError
from .pytree import TreeDef
from .rules import registry
from .signature import _REGISTERED, ProgramCache

#: what an entry returns when the call is not its own (the generic path answers it)
MISS = object()
#: static leaves an entry compares by value (others: no entry); ints, floats, complex are data
_STATIC_TYPES = (str, bool, bytes, type(None))
#: a list or tuple longer than this is only keyed as a run of floats (else no entry: the tests
#: would be long)
_MAX_ITEMS = 64


class _Unsupported(Exception):
    """The call's structure has no entry (the generic path serves it)."""


class _Source:
    """The lines and constants of one entry being generated."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {"_MISS": MISS, "_ndarray": np.ndarray, "_GuardError": GuardError}
        self.leaves: list[str] = []  # expressions of the flat leaves, in call_key's order
        self._n = 0

    def const(self, value: Any) -> str:
        name = f"_c{len(self.ns)}"
        self.ns[name] = value
        return name

    def fresh(self) -> str:
        self._n += 1
        return f"a_{self._n}"

    def test(self, cond: str) -> None:
        self.lines.append(f"    if not ({cond}): return _MISS")


def _arg(src: _Source, x: Any, name: str, deep: bool) -> None:
    """Tests that a value bound to ``name`` has the structure ``signature._key`` gave ``x``, and its
    leaves (mirrors ``signature._key`` branch for branch; keep the two together)."""
    tx = type(x)
    if tx is np.ndarray:
        d, s = src.const(x.dtype), src.const(x.shape)
        src.test(f"type({name}) is _ndarray and {name}.shape == {s} and ({name}.dtype is {d} or {name}.dtype == {d})")
        src.leaves.append(name)
        return
    if tx is float or tx is int or tx is complex:
        src.test(f"type({name}) is {src.const(tx)}")
        src.leaves.append(name)
        return
    if tx is list or tx is tuple:
        n = len(x)
        if x and list(map(type, x)).count(float) == n:
            src.test(f"type({name}) is {src.const(tx)} and len({name}) == {n} and "
                     f"list(map(type, {name})).count({src.const(float)}) == {n}")
            src.leaves.append(f"*{name}")
            return
        if n > _MAX_ITEMS:
            raise _Unsupported
        src.test(f"type({name}) is {src.const(tx)} and len({name}) == {n}")
        if n:
            items = [src.fresh() for _ in range(n)]
            src.lines.append(f"    {', '.join(items)}, = {name}")
            for e, item in zip(x, items):
                _arg(src, e, item, deep)
        return
    if tx is dict or tx is OrderedDict:
        if len(x) > _MAX_ITEMS:
            raise _Unsupported
        keys = tuple(x)
        src.test(f"type({name}) is {src.const(tx)} and len({name}) == {len(keys)} and "
                 f"tuple({name}) == {src.const(keys)}")  # the same keys in the same order
        for k, v in x.items():
            item = src.fresh()
            src.lines.append(f"    {item} = {name}[{src.const(k)}]")
            _arg(src, v, item, deep)
        return
    if x is None:
        src.test(f"{name} is None")
        return
    if isinstance(x, np.generic) and not isinstance(x, tuple):
        src.test(f"type({name}) is {src.const(tx)}")
        src.leaves.append(name)
        return
    if tx in _STATIC_TYPES and not deep and tx not in _REGISTERED:
        c = src.const(x)
        src.test(f"type({name}) is {src.const(tx)} and ({name} is {c} or {name} == {c})")
        src.leaves.append(name)
        return
    raise _Unsupported  # namedtuples, objects, registered pytrees, TracedInt: the generic path


def _build(src: _Source, tree: TreeDef, idx: list[int | None], builder: Callable[[Any], Any]) -> str:
    """An expression building ``tree`` from the program's flat outputs ``r`` (``idx[k]``: the output
    of leaf ``k``; None: no value); a tree of other kinds calls its ``builder``."""
    kind = tree.kind
    if kind == "leaf":
        return "None" if idx[0] is None else f"r[{idx[0]}]"
    if kind == "none":
        return "None"
    if kind in ("list", "tuple") and len(idx) > 2 and all(c.kind == "leaf" for c in tree.children) \
            and None not in idx \
            and idx == list(range(idx[0], idx[0] + len(idx))):  # type: ignore[arg-type, operator]  # no None
        return f"{kind}(r[{idx[0]}:{idx[0] + len(idx)}])"  # type: ignore[operator]  # a run: one slice
    if kind in ("list", "tuple", "dict"):
        parts, pos = [], 0
        for child in tree.children:
            n = child.num_leaves
            parts.append(_build(src, child, idx[pos:pos + n], builder))
            pos += n
        if kind == "list":
            return f"[{', '.join(parts)}]"
        if kind == "tuple":
            return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"
        return "{" + ", ".join(f"{src.const(k)}: {p}" for k, p in zip(tree.keys, parts)) + "}"
    return f"{src.const(builder)}(r)"


def make_entry(prog: Any, args: tuple[Any, ...], deep: frozenset[int], with_value: bool, has_aux: bool) \
        -> Callable[[tuple[Any, ...], ProgramCache[Any]], Any] | None:
    """The entry of ``prog`` for calls shaped like ``args`` (positional only), or None when it has
    none (see the module's docstring).  It is called as ``entry(args, cache)`` with the cache that
    holds ``prog`` (an argument, not a constant: the entry must not keep its cache alive)."""
    if prog.writeback or prog.setattrs or prog.rngs:
        return None
    src = _Source()
    src.lines.append("    if len(args) != %d: return _MISS" % len(args))
    if args:
        names = [f"a{i}" for i in range(len(args))]
        src.lines.append(f"    {', '.join(names)}, = args")
        try:
            for i, (a, name) in enumerate(zip(args, names)):
                _arg(src, a, name, i in deep)
        except _Unsupported:
            return None
    src.test(f"{src.const(registry._VERSION)}[0] == {registry.version()}")
    if prog.assumptions.deps:  # the assumption check, inline (a test that raises: not this entry's call)
        src.lines.append("    try:")
        src.lines += [f"        if not ({test}): return _MISS" for test in prog.assumptions.tests(src.ns)]
        src.lines += ["    except Exception:", "        return _MISS"]
    leaves = src.leaves
    if prog.dyn_pos is not None:
        if any(e.startswith("*") for e in leaves):
            return None  # (a run of floats among static leaves: rare; the generic path)
        leaves = [leaves[i] for i in prog.dyn_pos]
    if prog.hot is not None:  # its count of calls, toward its unrolled tier (the generic path promotes it)
        hot = src.const(prog.hot)
        src.lines += [f"    {hot}[0] -= 1", f"    if {hot}[0] <= 0: return _MISS"]
    src.lines += ["    try:", f"        r = {src.const(prog.fn)}({', '.join(leaves)})",
                  "    except _GuardError:", "        return _MISS"]
    value_b, grad_bs = prog.builders()
    value = _build(src, prog.out_tree, list(range(prog.n_out)), value_b)
    grads = [_build(src, tree, idx, b) for (_, tree, idx), b in zip(prog.grad_slots, grad_bs)]
    grad = grads[0] if prog.single else f"({', '.join(grads)}{',' if len(grads) == 1 else ''})"
    src.lines += ["    if cache.stale_counts: cache.settled()",
                  "    if cache.size() > 1:",  # the most recently used key, as the generic path keeps it
                  "        try:", f"            cache.touch({src.const(prog.key)})", "        except KeyError:",
                  "            pass"]
    if with_value:
        src.lines.append(f"    return ({value}, {grad})")
    elif has_aux:
        src.lines.append(f"    return ({grad}, ({value})[1])")
    else:
        src.lines.append(f"    return {grad}")
    code = "def entry(args, cache):\n" + "\n".join(src.lines) + "\n"
    exec(compile(code, "<irad entry>", "exec"), src.ns)  # noqa: S102 - irad's own names only
    entry: Callable[[tuple[Any, ...], ProgramCache[Any]], Any] = src.ns.pop("entry")
    entry.__irad_source__ = code  # type: ignore[attr-defined]
    return entry
