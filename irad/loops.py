"""Loops as one op: ``irad.loop``, a scan over a sub-Graph, and ``reroll``, which finds them.

A traced Python loop arrives unrolled: n copies of one step.  ``reroll`` finds runs of
consecutive blocks of ops that are the same step (same callables, types, locations and
attributes; values flowing only from the block before) and replaces each run by one op::

    %c, %y0, ..., %yn = irad.loop[body(n=50)]((%c0,), (%W,), ($ts, %rows))

whose ``Loop`` holds the step as a Graph ``(carry..., invariant..., x...) -> (carry..., y...)``.
Each ``x`` is either one atom per iteration (``each``) or an array whose rows are the
iterations (``stack``: ``X[t]`` for consecutive ``t``); each ``y`` is one out per iteration
(``each``) or one stacked array (``stack``).  Nothing is re-rolled that would not be exact: a
block that reads a value from two iterations back, an impure op, an opaque value, an int that
changes between iterations (it could shape the program) all leave the run unrolled.

Reverse mode (``irad.ad``) turns a loop op into a forward loop that also stacks what the
backward needs, and a reverse loop over the step's pullback; lowering writes a Python ``for``.
``unroll`` turns loop ops back into straight-line ops for consumers that want them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, cast

import numpy as np

from .effects import is_impure_prim
from .errors import GuardError
from .ir import GUARD_PRIMS, ArrayT, Const, Graph, OpaqueT, Op, ScalarT, Var, map_atoms, run_ops, typeof

LOOP_PRIM = "irad.loop"
LOOP_T = OpaqueT("loop")
#: runs shorter than this many iterations stay unrolled
MIN_TRIPS = 3


@dataclass
class Config:
    """``reroll``: grad, value_and_grad and vjp re-roll loops before differentiating (on by default).
    ``min_ops``: a run of iterations covering fewer ops stays unrolled.  Re-rolled programs compile
    10-17x faster; an RNN's gradient runs as fast re-rolled as unrolled, but a loop of a few
    Python-scalar ops per step runs about 2x slower (docs/benchmarks.md) until ``irad.tiers``
    unrolls its hot program, so only long runs are re-rolled by default."""

    reroll: bool = True
    min_ops: int = 400
    #: a loop whose step makes more bytes than this over all its iterations is checkpointed
    #: (``checkpoint_loops``); ``None``: never
    checkpoint_bytes: int | None = 1 << 28


#: owned by this module; tests and users switch re-rolling off with ``irad.loops.CONFIG.reroll = False``
CONFIG = Config()


@contextlib.contextmanager
def rerolling(on: bool, min_ops: int | None = None) -> Iterator[None]:
    """Switch re-rolling on or off (and set ``min_ops``) for a block."""
    was = CONFIG.reroll, CONFIG.min_ops
    CONFIG.reroll = on
    CONFIG.min_ops = was[1] if min_ops is None else min_ops
    try:
        yield
    finally:
        CONFIG.reroll, CONFIG.min_ops = was


@contextlib.contextmanager
def checkpointing(min_bytes: int | None) -> Iterator[None]:
    """Checkpoint the loops whose steps make more than ``min_bytes`` over all iterations (``0``:
    every loop; ``None``: none) for a block."""
    was = CONFIG.checkpoint_bytes
    CONFIG.checkpoint_bytes = min_bytes
    try:
        yield
    finally:
        CONFIG.checkpoint_bytes = was


#: how many later occurrences of an op's signature are tried as the period of a run
_TRIES = 6


@dataclass(frozen=True, eq=False)
class Loop:
    """One scan: ``body`` is ``(carry..., invariant..., x...) -> (carry..., y...)``, run ``n`` times
    (from the last iteration to the first when ``reverse``).  Compared by identity; ``key`` is the
    structural identity (two iterations of an outer loop hold equal inner loops)."""

    body: Graph
    n: int
    n_carry: int
    n_inv: int
    xs_kinds: tuple[str, ...]
    ys_kinds: tuple[str, ...]
    reverse: bool = False
    #: reverse mode keeps only each iteration's carry and recomputes the step in the backward loop
    remat: bool = False
    _compiled: Callable[..., Sequence[Any]] | None = field(default=None, init=False, repr=False)  # the step compiled, once needed

    def __repr__(self) -> str:
        return f"{self.body.name}(n={self.n}{', reverse' if self.reverse else ''}{', remat' if self.remat else ''})"

    @property
    def key(self) -> Any:
        return (self.n, self.n_carry, self.n_inv, self.xs_kinds, self.ys_kinds, self.reverse, self.remat,
                canonical(self.body))

    def order(self) -> range:
        return range(self.n - 1, -1, -1) if self.reverse else range(self.n)

    def __call__(self, init: Sequence[Any], inv: Sequence[Any], xs: Sequence[Any]) -> tuple[Any, ...]:
        nc = self.n_carry
        carry = list(init)
        cols: list[list[Any]] = [[None] * self.n for _ in self.ys_kinds]
        step = self._step()
        inv = list(inv)
        for i in self.order():
            outs = step(carry + inv + [x[i] for x in xs])
            carry = list(outs[:nc])
            for col, y in zip(cols, outs[nc:]):
                col[i] = y
        result = list(carry)
        for kind, col in zip(self.ys_kinds, cols):
            if kind == "stack":
                result.append(np.stack(col))
            else:
                result.extend(col)
        return tuple(result)

    def _step(self) -> Callable[[list[Any]], Sequence[Any]]:
        """The step as a function of its inputs: compiled (once per Loop) when the loop is long
        enough to repay it, else evaluated op by op.  A compiled step whose guard fails runs again
        op by op, so that the error names the op."""
        if self.n < COMPILE_STEPS_FROM or _STEP_COMPILER[0] is None:
            return lambda ins: run(self.body, ins)
        compiled = self._compiled
        if compiled is None:
            compiled = _STEP_COMPILER[0](self.body)
            object.__setattr__(self, "_compiled", compiled)  # a cache, not part of the value

        def step(ins: list[Any]) -> Sequence[Any]:
            try:
                return compiled(*ins)
            except GuardError:
                return run(self.body, ins)
        return step


#: loops of this many iterations and more run their step compiled when a value is computed
COMPILE_STEPS_FROM = 32
#: the step compiler, ``Graph -> function(*inputs) -> outputs``: ``irad.lower`` sets it (it imports
#: this module, so this module cannot import it)
_STEP_COMPILER: list[Callable[[Graph], Callable[..., Sequence[Any]]] | None] = [None]


def use_step_compiler(compile_step: Callable[[Graph], Callable[..., Sequence[Any]]]) -> None:
    """Install the compiler that long loops' steps run through (called by ``irad.lower``)."""
    _STEP_COMPILER[0] = compile_step


def run(g: Graph, inputs: Sequence[Any]) -> list[Any]:
    """``ir.evaluate`` without its error decoration (a loop body's guard names its own op)."""
    get = _getter(values_of(g, inputs))
    return [map_atoms(a, get) for a in g.outputs]


def values_of(g: Graph, inputs: Sequence[Any]) -> dict[int, Any]:
    """Every value of ``g`` run on ``inputs``: Var id -> value."""
    return run_ops(g.ops, {v.id: x for v, x in zip(g.inputs, inputs)})


def _getter(env: dict[int, Any]) -> Any:
    return lambda a: env[a.id] if isinstance(a, Var) else a.value


def loop_of(op: Op) -> Loop:
    return cast(Loop, op.kw("_loop"))


def step_has_effect(op: Op) -> bool:
    """Does this loop op's step (or a loop inside it) hold a guard or an impure call?"""
    for bop in loop_of(op).body.ops:
        if bop.prim in GUARD_PRIMS or is_impure_prim(bop.prim) or (bop.prim == LOOP_PRIM and step_has_effect(bop)):
            return True
    return False


def make_op(loop: Loop, init: Sequence[Any], inv: Sequence[Any], xs: Sequence[Any], outs: Sequence[Var],
            loc: Any = None) -> Op:
    # NOTE: each out is one entry of the loop's flat result tuple: a y may itself be a tuple (a rule's
    # state), which binding the result's pytree leaves would take apart
    return Op(LOOP_PRIM, (tuple(init), tuple(inv), tuple(xs)), (("_loop", Const(loop, LOOP_T)),), tuple(outs),
              loop, loc, _entry_paths(len(outs)))


def _entry_paths(n: int) -> tuple[tuple[int], ...]:
    """``((0,), (1,), ..., (n - 1,))``: out k is entry k of the result."""
    return tuple((k,) for k in range(n))


# ---- structure ----------------------------------------------------------------------------------


def atoms(op: Op) -> list[Any]:
    """The atoms of an op's arguments, in one fixed order (positional, then keyword values)."""
    found: list[Any] = []
    for a in op.args:
        _walk(a, found)
    for _, a in op.kwargs:
        _walk(a, found)
    return found


def _walk(a: Any, found: list[Any]) -> None:
    if isinstance(a, (Var, Const)):
        found.append(a)
    elif type(a) in (tuple, list):
        for x in a:
            _walk(x, found)
    elif type(a) is dict:
        for x in a.values():
            _walk(x, found)


def with_atoms(op: Op, new: Sequence[Any], outs: tuple[Var, ...] | None = None) -> Op:
    """``op`` with its atoms replaced, in ``atoms`` order."""
    it = iter(new)

    def put(a: Any) -> Any:
        return next(it)

    args = tuple(map_atoms(a, put) for a in op.args)
    kwargs = tuple((k, map_atoms(a, put)) for k, a in op.kwargs)
    return Op(op.prim, args, kwargs, op.outs if outs is None else outs, op.fn, op.loc, op.unpack)


def _shape_of(a: Any) -> Any:
    """The nesting of an argument with its atoms' kinds: what two iterations' ops share."""
    if isinstance(a, Var):
        return a.type
    if isinstance(a, Const):
        return ("c", a.type)
    if type(a) in (tuple, list):
        return (type(a), tuple(_shape_of(x) for x in a))
    if type(a) is dict:
        return (dict, tuple((k, _shape_of(x)) for k, x in a.items()))
    return ("?", repr(type(a)))


def signature(op: Op) -> Any:
    """What must agree between two iterations' ops (constants' values are compared later)."""
    loc = (op.loc.file, op.loc.line) if op.loc is not None else None
    return (op.prim, id(op.fn), op.unpack, loc, tuple(o.type for o in op.outs),
            tuple(_shape_of(a) for a in op.args), tuple((k, _shape_of(a)) for k, a in op.kwargs))


def _const_same(a: Const, b: Const) -> bool:
    if a.live != b.live:
        return False
    if isinstance(a.value, Loop) and isinstance(b.value, Loop):
        return a.value is b.value or a.value.key == b.value.key
    if type(a.value) in (float, complex) or isinstance(a.value, np.inexact):
        return type(a.value) is type(b.value) and repr(a.value) == repr(b.value)  # 0.0 and -0.0 differ
    return a == b


def canonical(g: Graph) -> Any:
    """``g`` up to the names of its values: equal for two copies of one step."""
    pos: dict[int, Any] = {v.id: ("in", k) for k, v in enumerate(g.inputs)}
    rows = []
    for r, op in enumerate(g.ops):
        refs = []
        for a in atoms(op):
            if isinstance(a, Var):
                refs.append(pos.get(a.id, ("free", a.id)))
            elif isinstance(a.value, Loop):
                refs.append(("loop", a.value.key))
            else:
                refs.append(("c", a._key(), a.live))
        for q, o in enumerate(op.outs):
            pos[o.id] = (r, q)
        rows.append((signature(op), tuple(refs)))
    outs = tuple(pos.get(o.id) if isinstance(o, Var) else ("c", o._key()) for o in g.outputs)
    return (tuple(v.type for v in g.inputs), tuple(rows), outs)


# ---- re-rolling -----------------------------------------------------------------------------------


class _Ids:
    def __init__(self, g: Graph) -> None:
        self.next = 1 + max([v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs] + [-1])

    def var(self, t: Any, hint: str = "") -> Var:
        v = Var(self.next, t, hint)
        self.next += 1
        return v


def for_reverse_mode(g: Graph, values: dict[int, Any] | None = None) -> Graph:
    """What grad, value_and_grad and vjp differentiate: ``g`` re-rolled, its big loops
    checkpointed, as ``CONFIG`` says."""
    if not CONFIG.reroll:
        return g
    g = reroll(g, values)
    if CONFIG.checkpoint_bytes is not None:
        g = checkpoint_loops(g, values, CONFIG.checkpoint_bytes)
    return g


def reroll(g: Graph, values: dict[int, Any] | None = None, min_ops: int | None = None) -> Graph:
    """Replace each run of identical loop iterations in ``g`` by one ``irad.loop`` op.

    ``values`` (the trace's values, Var id -> value) gets the values of the Vars made here outside
    the loops, so that reverse mode can run on the new graph (a body's values are its own).
    ``min_ops``: the fewest ops a run must cover (``CONFIG.min_ops`` when None).  Returns ``g``
    itself when nothing re-rolls.
    """
    ids = _Ids(g)
    ops = g.ops
    out_ids = {o.id for o in g.outputs if isinstance(o, Var)}
    new = _reroll_ops(list(ops), out_ids, ids, values, g.name, CONFIG.min_ops if min_ops is None else min_ops)
    if new is None:
        return g
    return g.replace(ops=tuple(new), provenance=g.provenance + ("reroll",))


def _reroll_ops(ops: list[Op], out_ids: set[int], ids: _Ids, values: dict[int, Any] | None,
                name: str, min_ops: int) -> list[Op] | None:
    n = len(ops)
    if n < min_ops:
        return None
    table: dict[Any, int] = {}  # each signature once, as a small int: runs compare lists of ints
    sig = [table.setdefault(signature(op), len(table)) for op in ops]
    nxt = [-1] * n
    last: dict[Any, int] = {}
    for i in range(n - 1, -1, -1):
        nxt[i] = last.get(sig[i], -1)
        last[sig[i]] = i
    readers_after = _last_reader(ops)
    result: list[Op] = []
    changed = False
    i = 0
    while i < n:
        best = None
        j, tries = nxt[i], 0
        while j != -1 and tries < _TRIES and 2 * (j - i) <= n - i:
            p = j - i
            k = 1
            while i + (k + 1) * p <= n and sig[i + k * p: i + (k + 1) * p] == sig[i: i + p]:
                k += 1
            if k >= MIN_TRIPS and k * p >= min_ops and (best is None or k * p > best[1] * best[0]):
                best = (p, k)
            j, tries = nxt[j], tries + 1
        if best is not None:
            p, k = best
            made = None
            while k >= MIN_TRIPS and k * p >= min_ops and made is None:
                made = _plan(ops, i, p, k, out_ids, readers_after, ids, values, f"{name}_loop", min_ops)
                if made is None:
                    k -= 1  # a later iteration may read further back (a first value kept): try fewer
            if made is not None:
                result.extend(made)
                i += k * p
                changed = True
                continue
        result.append(ops[i])
        i += 1
    return result if changed else None


def _last_reader(ops: list[Op]) -> dict[int, int]:
    last: dict[int, int] = {}
    for j, op in enumerate(ops):
        for v in op.inputs:
            last[v.id] = j
    return last


def _slot_ok(t: Any) -> bool:
    """A value that may vary between iterations: an array, or a Python float/complex (never an int,
    which could shape the program, nor an object)."""
    return isinstance(t, ArrayT) or (isinstance(t, ScalarT) and t.kind in ("float", "complex"))


def _plan(ops: list[Op], a: int, p: int, k: int, out_ids: set[int], readers: dict[int, int], ids: _Ids,
          values: dict[int, Any] | None, name: str, min_ops: int) -> list[Op] | None:
    """The ops that replace ``ops[a : a + k*p]`` (k blocks of p ops) by a loop, or None."""
    end = a + k * p
    block = [ops[a + b * p: a + (b + 1) * p] for b in range(k)]
    pos: dict[int, tuple[int, int, int]] = {}
    for b in range(k):
        for r, op in enumerate(block[b]):
            if is_impure_prim(op.prim) or op.fn is None:
                return None
            for q, o in enumerate(op.outs):
                if isinstance(o.type, OpaqueT):
                    return None
                pos[o.id] = (b, r, q)
    carries: dict[tuple[int, int], Any] = {}  # (r, q) of the body value that is carried -> initial atom
    carry_vars: dict[tuple[int, int], Var] = {}
    invs: dict[int, tuple[Var, Var]] = {}  # outer Var id -> (outer, body input)
    xs: list[tuple[str, Any, Var]] = []  # (kind, outer: tuple of atoms or the stacked Var's source, body input)
    pre: list[Op] = []  # ops before the loop (the slices that stacked rows come from)
    #: values of the new Vars outside the loop, given to ``values`` only if the run re-rolls (a value
    #: left behind under an id that a later stage reuses would be read as that stage's value)
    made: dict[int, Any] = {}
    subst: dict[int, Var] = {}  # body value id -> the body input that replaces it
    body_ops: list[Op] = []
    for r in range(p):
        cols = list(zip(*(atoms(block[b][r]) for b in range(k))))
        op0 = block[0][r]
        rows = _stacked_rows(op0, cols, block, r, pos, k)
        if rows is not None:
            src, index, axis, row_t = rows
            shape = src.type.shape
            cut = ArrayT(src.type.dtype, shape[:axis] + (k,) + shape[axis + 1:])
            sv = ids.var(cut, "rows")
            pre.append(Op("operator.getitem", (src, Const(index, typeof(index))), (), (sv,), operator.getitem,
                          op0.loc))
            if values is not None:
                if isinstance(src, Var) and src.id not in values:
                    return None
                made[sv.id] = (values[src.id] if isinstance(src, Var) else src.value)[index]
            if axis:  # ``X[:, t]``: the slice's axis first, so that its rows are the iterations' values
                moved = ids.var(ArrayT(src.type.dtype, (k,) + shape[:axis] + shape[axis + 1:]), "rows")
                pre.append(Op("numpy.moveaxis", (sv, Const(axis, typeof(axis)), Const(0, typeof(0))), (), (moved,),
                              np.moveaxis, op0.loc))
                if values is not None:
                    made[moved.id] = np.moveaxis(made[sv.id], axis, 0)
                sv = moved
            xv = ids.var(row_t, op0.outs[0].hint or "row")
            xs.append(("stack", sv, xv))
            subst[op0.outs[0].id] = xv
            continue
        new_atoms: list[Any] = []
        for col in cols:
            a0 = col[0]
            if isinstance(a0, Var) and a0.id in pos and pos[a0.id][0] == 0 and \
                    all(isinstance(x, Var) and pos.get(x.id, (-1,))[0] == b and pos[x.id][1:] == pos[a0.id][1:]
                        for b, x in enumerate(col)):
                new_atoms.append(subst.get(a0.id, a0))  # made in this iteration
                continue
            if all(_same_atom(x, a0) for x in col) and not (isinstance(a0, Var) and a0.id in pos):
                if isinstance(a0, Var):  # read the same by every iteration
                    if a0.id not in invs:
                        invs[a0.id] = (a0, ids.var(a0.type, a0.hint))
                    new_atoms.append(invs[a0.id][1])
                else:
                    new_atoms.append(a0)
                continue
            src_pos = pos.get(col[1].id) if isinstance(col[1], Var) else None
            if src_pos is not None and src_pos[0] == 0 and not (isinstance(a0, Var) and a0.id in pos) and \
                    all(isinstance(x, Var) and pos.get(x.id) == (b - 1,) + src_pos[1:] for b, x in
                        enumerate(col) if b >= 1):
                key = src_pos[1:]
                src_var = block[0][key[0]].outs[key[1]]
                if not _slot_ok(src_var.type) or (typeof(a0.value) if isinstance(a0, Const) else a0.type) != src_var.type:
                    return None
                if key in carries:
                    if not _same_atom(carries[key], a0):
                        return None
                else:
                    carries[key] = a0
                    carry_vars[key] = ids.var(src_var.type, src_var.hint or "carry")
                new_atoms.append(carry_vars[key])
                continue
            if any(isinstance(x, Var) and x.id in pos for x in col):
                return None  # a value from further back, or from a different place in the step
            types = {x.type if isinstance(x, Var) else typeof(x.value) for x in col}
            if len(types) != 1 or not _slot_ok(next(iter(types))) or any(isinstance(x, Const) and x.live for x in col):
                return None
            t = next(iter(types))
            xv = ids.var(t, "x")
            xs.append(("each", tuple(col), xv))
            new_atoms.append(xv)
        body_ops.append(with_atoms(op0, new_atoms))
    # what the rest of the program reads from the run: one out per iteration
    carry_keys = list(carries)
    ys: list[tuple[int, int]] = []
    for r in range(p):
        for q in range(len(block[0][r].outs)):
            used = [b for b in range(k) if _read_later(block[b][r].outs[q], end, readers, out_ids)]
            if used and not (used == [k - 1] and (r, q) in carries):
                ys.append((r, q))
    outs: list[Var] = []
    for key in carry_keys:
        last = block[k - 1][key[0]].outs[key[1]]
        fresh = key in ys or not _read_later(last, end, readers, out_ids)
        outs.append(ids.var(last.type, last.hint) if fresh else last)
        if fresh and values is not None:
            if last.id not in values:
                return None
            made[outs[-1].id] = values[last.id]
    for r, q in ys:
        outs.extend(block[b][r].outs[q] for b in range(k))

    def inner(v: Var) -> Any:
        return subst.get(v.id, v)

    body_in = [carry_vars[c] for c in carry_keys] + [bv for _, bv in invs.values()] + [xv for _, _, xv in xs]
    body_out = [inner(block[0][r].outs[q]) for r, q in carry_keys] + [inner(block[0][r].outs[q]) for r, q in ys]
    body = Graph(name, tuple(body_in), tuple(body_ops), tuple(body_out))
    inner_ops = _reroll_ops(list(body.ops), {o.id for o in body_out if isinstance(o, Var)}, ids, None, name, min_ops)
    if inner_ops is not None:
        body = body.replace(ops=tuple(inner_ops))
    loop = Loop(body, k, len(carry_keys), len(invs), tuple(kd for kd, _, _ in xs), ("each",) * len(ys))
    if values is not None:
        values.update(made)
    init = [carries[c] for c in carry_keys]
    return pre + [make_op(loop, init, [o for o, _ in invs.values()], [src for _, src, _ in xs], outs, block[0][0].loc)]


def _same_atom(x: Any, y: Any) -> bool:
    if isinstance(x, Var) or isinstance(y, Var):
        return isinstance(x, Var) and isinstance(y, Var) and x.id == y.id
    return _const_same(x, y)


def _read_later(v: Var, end: int, readers: dict[int, int], out_ids: set[int]) -> bool:
    return v.id in out_ids or readers.get(v.id, -1) >= end


def _stacked_rows(op0: Op, cols: list[tuple[Any, ...]], block: list[list[Op]], r: int,
                  pos: dict[int, tuple[int, int, int]], k: int) -> tuple[Any, Any, int, Any] | None:
    """``X[t]``, or ``X[:, ..., :, t]``, with ``t`` = t0, t0±1, ... across the iterations (one
    array read along one axis): the array, the index of the part read (a slice along ``axis``),
    ``axis``, and the type of one iteration's value."""
    if op0.fn is not operator.getitem or len(op0.args) != 2 or op0.kwargs or len(cols) != 2:
        return None
    srcs, idx = cols
    src = srcs[0]
    if not all(_same_atom(x, src) for x in srcs) or (isinstance(src, Var) and src.id in pos):
        return None
    t = src.type if isinstance(src, Var) else typeof(src.value)
    if not isinstance(t, ArrayT) or t.scalar or not t.shape or (isinstance(src, Const) and src.live):
        return None
    if not all(isinstance(x, Const) for x in idx):
        return None
    axis = _row_axis(idx[0].value)
    if axis is None or axis >= len(t.shape) or any(_row_axis(x.value) != axis for x in idx):
        return None
    if axis and any(x.value[:axis] != idx[0].value[:axis] for x in idx):
        return None
    size = t.shape[axis]
    ts = [_row_of(x.value, axis) for x in idx]
    ts = [v + size if v < 0 else v for v in ts]
    if not all(0 <= v < size for v in ts):
        return None
    step = ts[1] - ts[0]
    if step not in (1, -1) or any(b - c != step for b, c in zip(ts[1:], ts)):
        return None
    if step == 1:
        sl = slice(ts[0], ts[0] + k)
    else:
        stop = ts[0] - k
        sl = slice(ts[0], stop if stop >= 0 else None, -1)
    index = sl if axis == 0 else (slice(None),) * axis + (sl,)
    return src, index, axis, op0.outs[0].type


def _row_axis(index: Any) -> int | None:
    """The axis an index picks one position of: 0 for ``t``, ``axis`` for ``(:,) * axis + (t,)``."""
    if type(index) is int:
        return 0
    if type(index) is tuple and index and type(index[-1]) is int and \
            all(type(x) is slice and x == slice(None) for x in index[:-1]):
        return len(index) - 1
    return None


def _row_of(index: Any, axis: int) -> int:
    return cast(int, index if axis == 0 else index[axis])


# ---- unrolling ---------------------------------------------------------------------------------------


def unroll(g: Graph, keep: Callable[[Op], bool] | None = None) -> Graph:
    """``g`` with its loop ops written out as straight-line ops (the inverse of ``reroll``); a
    top-level loop op for which ``keep(op)`` is true stays a loop."""
    if not any(op.prim == LOOP_PRIM and (keep is None or not keep(op)) for op in g.ops):
        return g
    ids = fresh_ids(g)
    env: dict[int, Any] = {}
    ops = list(_unrolled(list(g.ops), ids, env, keep=keep))
    outs = tuple(map_atoms(o, lambda a: env.get(a.id, a) if isinstance(a, Var) else a) for o in g.outputs)
    return g.replace(ops=tuple(ops), outputs=outs)


def fresh_ids(g: Graph) -> _Ids:
    """A source of new Vars for ``g``: ids above every id in it, its loops' steps included."""
    ids = _Ids(g)
    ids.next = max(ids.next, _max_id(g) + 1)
    return ids


def _max_id(g: Graph) -> int:
    m = max([v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs] + [-1])
    for op in g.ops:
        if op.prim == LOOP_PRIM:
            m = max(m, _max_id(loop_of(op).body))
    return m


def _unrolled(ops: list[Op], ids: _Ids, env: dict[int, Any], fresh: bool = False,
              keep: Callable[[Op], bool] | None = None) -> Iterator[Op]:
    """The ops with loops written out; ``env`` maps a replaced Var's id to the atom that now holds it;
    ``fresh``: every op gets new outs (one copy of a loop body per iteration)."""
    def sub(x: Any) -> Any:
        return env.get(x.id, x) if isinstance(x, Var) else x

    for op in ops:
        if op.prim != LOOP_PRIM or (keep is not None and keep(op)):
            outs = None
            if fresh:
                outs = tuple(ids.var(o.type, o.hint) for o in op.outs)
            new = with_atoms(op, [sub(x) for x in atoms(op)], outs)
            if fresh:
                env.update({o.id: nv for o, nv in zip(op.outs, new.outs)})
            yield new
            continue
        loop = loop_of(op)
        init, inv, xs = (tuple(map_atoms(a, sub) for a in part) for part in op.args)
        body = loop.body
        nc, ni = loop.n_carry, loop.n_inv
        carry = list(init)
        cols: list[list[Any]] = [[None] * loop.n for _ in loop.ys_kinds]
        for i in loop.order():
            benv: dict[int, Any] = {}
            for v, x in zip(body.inputs, carry + list(inv)):
                benv[v.id] = x
            for v, kind, x in zip(body.inputs[nc + ni:], loop.xs_kinds, xs):
                if kind == "each":
                    benv[v.id] = x[i]
                else:
                    row = ids.var(v.type, v.hint)
                    yield Op("operator.getitem", (x, Const(i, typeof(i))), (), (row,), operator.getitem, op.loc)
                    benv[v.id] = row
            yield from _unrolled(list(body.ops), ids, benv, True)
            res = [benv.get(o.id, o) if isinstance(o, Var) else o for o in body.outputs]
            carry = res[:nc]
            for col, y in zip(cols, res[nc:]):
                col[i] = y
        finals: list[Any] = list(carry)
        for kind, col in zip(loop.ys_kinds, cols):
            if kind == "stack":
                sv = ids.var(op.outs[len(finals)].type)
                yield Op("numpy.stack", (list(col),), (), (sv,), np.stack, op.loc)
                finals.append(sv)
            else:
                finals.extend(col)
        for o, f in zip(op.outs, finals):
            env[o.id] = f


# ---- checkpointing ---------------------------------------------------------------------------------


def step_bytes(loop: Loop) -> int:
    """The bytes of the arrays one iteration of ``loop``'s step makes (what reverse mode may keep)."""
    total = 0
    for op in loop.body.ops:
        if op.prim == LOOP_PRIM:
            total += loop_of(op).n * step_bytes(loop_of(op))
            continue
        for o in op.outs:
            t = o.type
            if isinstance(t, ArrayT):
                total += int(np.prod(t.shape, dtype=np.int64)) * (np.dtype(t.dtype).itemsize if t.dtype != "object"
                                                                   else 8)
            else:
                total += 8
    return total


def _segment_length(n: int) -> int:
    """The divisor of ``n`` nearest sqrt(n) (1 when ``n`` is prime: no segments)."""
    best = 1
    for k in range(2, n):
        if n % k == 0 and abs(k - n ** 0.5) < abs(best - n ** 0.5):
            best = k
    return best


def checkpoint_loops(g: Graph, values: dict[int, Any] | None = None, min_bytes: int = 0) -> Graph:
    """Checkpoint each top-level loop of ``g`` whose step makes more than ``min_bytes`` over all
    its iterations (the sqrt(n) schedule): the loop becomes an outer loop of ``n / k`` segments,
    each an inner loop of ``k`` iterations (``k`` the divisor of ``n`` nearest sqrt(n)), marked
    ``remat``.  Reverse mode then keeps only each segment's starting carry and, in the backward
    loop, runs the segment again (keeping its ``k`` iterations' residuals) before reversing it:
    memory ~ (n/k + k) iterations' state instead of n, for one more forward run of the loop.  A
    loop of a prime number of iterations is marked ``remat`` itself (its carries are kept, the
    rest recomputed).  ``values`` gets the values of the Vars made here, as in ``reroll``."""
    if not any(op.prim == LOOP_PRIM and not loop_of(op).remat and
               loop_of(op).n * step_bytes(loop_of(op)) > min_bytes for op in g.ops):
        return g
    ids = _Ids(g)
    ids.next = max(ids.next, _max_id(g) + 1)
    ops: list[Op] = []
    for op in g.ops:
        loop = loop_of(op) if op.prim == LOOP_PRIM else None
        if loop is None or loop.remat or loop.n * step_bytes(loop) <= min_bytes:
            ops.append(op)
            continue
        k = _segment_length(loop.n)
        if k == 1:
            ops.append(make_op(_replace(loop, remat=True), *cast("tuple[Any, Any, Any]", op.args), op.outs, op.loc))  # (init, inv, xs)
            continue
        ops.extend(_segments(op, loop, k, ids, values))
    return g.replace(ops=tuple(ops), provenance=g.provenance + ("checkpoint_loops",))


def _replace(loop: Loop, **changes: Any) -> Loop:
    return dataclasses.replace(loop, **changes)


def _value(a: Any, values: dict[int, Any] | None) -> Any:
    if isinstance(a, Const):
        return a.value
    return None if values is None else values.get(a.id)


def _segments(op: Op, loop: Loop, k: int, ids: _Ids, values: dict[int, Any] | None) -> list[Op]:
    """``op`` as an outer loop (``remat``) of ``n / k`` iterations whose step is the loop over ``k``
    iterations; the ops around it reshape stacked inputs to ``(n / k, k, ...)`` and outputs back."""
    body, nc, ni, n = loop.body, loop.n_carry, loop.n_inv, loop.n
    m = n // k
    init, inv, xs = op.args
    pre: list[Op] = []
    post: list[Op] = []
    c_in = [ids.var(v.type, v.hint) for v in body.inputs[:nc]]
    o_inv = [a for a in inv if isinstance(a, Var)]  # constants stay constants of the inner loop
    i_in = {a.id: ids.var(v.type, v.hint) for a, v in zip(inv, body.inputs[nc:nc + ni]) if isinstance(a, Var)}
    inner_inv = [i_in[a.id] if isinstance(a, Var) else a for a in inv]
    o_xs: list[Any] = []
    o_kinds: list[str] = []
    x_in: list[Var] = []
    inner_xs: list[Any] = []
    for kind, a, v in zip(loop.xs_kinds, xs, body.inputs[nc + ni:]):
        if kind == "stack":
            rest = tuple(a.type.shape[1:])
            t = ArrayT(a.type.dtype, (m, k) + rest)
            r = ids.var(t, "segments")
            pre.append(Op("numpy.reshape", (a, Const((m, k) + rest, typeof((m, k) + rest))), (), (r,), np.reshape,
                          op.loc))
            if values is not None and _value(a, values) is not None:
                values[r.id] = np.reshape(_value(a, values), (m, k) + rest)
            seg = ids.var(ArrayT(a.type.dtype, (k,) + rest), v.hint)
            o_xs.append(r)
            o_kinds.append("stack")
            x_in.append(seg)
            inner_xs.append(seg)
        else:  # the j-th iterations of every segment: one ``each`` input of the outer loop
            col = []
            for j in range(k):
                u = ids.var(v.type, v.hint)
                o_xs.append(tuple(a[s * k + j] for s in range(m)))
                o_kinds.append("each")
                x_in.append(u)
                col.append(u)
            inner_xs.append(tuple(col))
    # the inner loop's outs, and the outer step's outputs
    inner = _replace(loop, n=k)
    i_outs: list[Var] = [ids.var(v.type, v.hint) for v in body.inputs[:nc]]
    step_out: list[Any] = list(i_outs)
    o_ys: list[str] = []
    outer_outs: list[Var] = list(op.outs[:nc])
    at = nc
    for kind, y in zip(loop.ys_kinds, body.outputs[nc:]):
        yt = y.type if isinstance(y, Var) else typeof(y.value)
        if kind == "stack":
            elem = tuple(getattr(yt, "shape", ()))
            dt = getattr(yt, "dtype", "float64")
            sv = ids.var(ArrayT(dt, (k,) + elem), "ys")
            i_outs.append(sv)
            step_out.append(sv)
            o_ys.append("stack")
            whole = op.outs[at]
            seg = ids.var(ArrayT(dt, (m, k) + elem), "ys")
            outer_outs.append(seg)
            post.append(Op("numpy.reshape", (seg, Const(tuple(cast(ArrayT, whole.type).shape),  # stacked: an array
                                                  typeof(tuple(cast(ArrayT, whole.type).shape)))),
                           (), (whole,), np.reshape, op.loc))
            if values is not None and whole.id in values:
                values[seg.id] = np.reshape(values[whole.id], (m, k) + elem)
            at += 1
            continue
        per = [ids.var(yt, "y") for _ in range(k)]
        i_outs.extend(per)
        step_out.extend(per)
        o_ys.extend(["each"] * k)
        outs_n = op.outs[at:at + n]
        for j in range(k):
            outer_outs.extend(outs_n[s * k + j] for s in range(m))
        at += n
    inner_op = make_op(inner, c_in, inner_inv, inner_xs, i_outs, op.loc)
    outer_body = Graph(body.name + "_segment", tuple(c_in) + tuple(i_in[a.id] for a in o_inv) + tuple(x_in),
                       (inner_op,), tuple(step_out))
    outer = Loop(outer_body, m, nc, len(o_inv), tuple(o_kinds), tuple(o_ys), loop.reverse, remat=True)
    return pre + [make_op(outer, init, o_inv, o_xs, outer_outs, op.loc)] + post
