"""The compiled tier's loops: a loop op whose step numba can run becomes one compiled function.

A re-rolled loop (``irad.loops``) lowered to numpy is a Python ``for`` whose every iteration calls
numpy a dozen times on small arrays; at ~1 µs per call, an RNN step of 8×16 arrays spends nearly all
its time in call overhead.  Here the whole loop (every iteration, the carries, the stacked inputs
and outputs) is one ``numba.njit`` function: the step's ops are written as numba code, tiny matrix
products as explicit loops (faster than a BLAS call at these sizes), elementwise chains as numba's
own array expressions.  Everything around the loop stays numpy, in the same generated program.

The joint graph irad builds for a short loop (under ``irad.loops.CONFIG.min_ops``) is unrolled;
``prepare`` re-rolls it (the same exact ``reroll``, with no size floor) and keeps the loops this
module can compile, writing the others out again.  A loop op here reads its ``each`` inputs as one
stacked array: rows of an earlier compiled loop's stacked output, sliced (a reverse loop reads the
forward loop's rows backwards), or ``np.stack`` of the atoms.  Its ``each`` outputs are one stacked
array each, whose rows are bound to the original per-iteration values only where something else
reads them.

Every array parameter is declared a read-only array of any layout, so one compiled signature takes
C, Fortran and strided views and read-only arrays alike, and nothing compiles on a later call.  Each
loop is its own generated module (cached on disk like the kernels): one that numba rejects stays a
numpy loop and costs nothing else.  The step's text is irad's own: prims from a closed table,
numbers irad spells, no user text.
"""
from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence, cast

import numpy as np

from ..ir import ArrayT, Const, Graph, Op, ScalarT, Var, typeof
from ..loops import LOOP_PRIM, Loop, fresh_ids, loop_of, reroll, unroll
from .numba import _BINARY, _COMPARE, TRANSCENDENTAL, _spell, cached_path, load_module

LOOP_CALL = "irad.backends.numba.loop"
#: a loop that re-rolling makes is compiled only if its iterations hold at least this many ops
#: together (a three-op run is cheaper as numpy than as a call into numba)
MIN_OPS = 12
#: matrix products of at most this many multiply-adds are explicit loops; bigger ones call BLAS
SMALL_MATMUL = 1 << 15
#: a loop is compiled only if every value of its step has at most this many elements: what a compiled
#: loop saves is numpy's ~1 µs per call, and on bigger arrays numpy's own SIMD loops (sin, exp, ... on
#: AVX-512) outrun numba's (the `chain` workload: 5*10^4 elements, 1.3x slower compiled)
MAX_ELEMENTS = 4096

_MATMUL = ("operator.matmul", "numpy.matmul", "numpy.dot")
_ELEMENTWISE_CALLS = {
    "numpy.sqrt": "np.sqrt",
    "numpy.sin": "np.sin", "numpy.cos": "np.cos", "numpy.abs": "np.abs", "numpy.absolute": "np.abs",
    "numpy.maximum": "np.maximum", "numpy.minimum": "np.minimum", "numpy.where": "np.where",
    "numpy.zeros_like": "np.zeros_like",
}
_NEG = ("operator.neg", "numpy.negative")
_TRANSPOSE = ("numpy.swapaxes", "numpy.ndarray.swapaxes", "numpy.transpose", "numpy.ndarray.transpose")
_SUM = ("numpy.sum", "numpy.ndarray.sum")
_MEAN = ("numpy.mean", "numpy.ndarray.mean")

_HELPERS = '''

@njit(cache=_CACHE, error_model="numpy")
def _mm(a, b):
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n))
    for i in range(m):
        for p in range(k):
            s = a[i, p]
            for j in range(n):
                out[i, j] += s * b[p, j]
    return out


@njit(cache=_CACHE, error_model="numpy")
def _mv(a, x):
    m, k = a.shape
    out = np.zeros(m)
    for i in range(m):
        s = 0.0
        for p in range(k):
            s += a[i, p] * x[p]
        out[i] = s
    return out


@njit(cache=_CACHE, error_model="numpy")
def _vm(x, b):
    k, n = b.shape
    out = np.zeros(n)
    for p in range(k):
        s = x[p]
        for j in range(n):
            out[j] += s * b[p, j]
    return out


@njit(cache=_CACHE, error_model="numpy")
def _sum0(a):
    m, n = a.shape
    out = np.zeros(n)
    for i in range(m):
        for j in range(n):
            out[j] += a[i, j]
    return out


@njit(cache=_CACHE, error_model="numpy")
def _sum1(a):
    m, n = a.shape
    out = np.zeros(m)
    for i in range(m):
        s = 0.0
        for j in range(n):
            s += a[i, j]
        out[i] = s
    return out


@njit(cache=_CACHE, error_model="numpy")
def _put(y, i, v):
    c = np.ascontiguousarray(v)
    row, flat = y[i].reshape(c.size), c.reshape(c.size)
    for e in range(c.size):
        row[e] = flat[e]


@njit(cache=_CACHE, error_model="numpy")
def _vv(x, y):
    s = 0.0
    for p in range(x.shape[0]):
        s += x[p] * y[p]
    return s
''' + "".join(f'''

@njit(cache=_CACHE, error_model="numpy")
def _{f}(a):
    c = np.ascontiguousarray(a)
    out = np.empty(c.shape)
    flat, into = c.reshape(c.size), out.reshape(out.size)
    for e in range(flat.size):
        into[e] = vm.{f}(flat[e])
    return out
''' for f in sorted(set(TRANSCENDENTAL.values())))


# ---- what can be compiled -----------------------------------------------------------------

def _float_array(t: Any, min_rank: int = 1) -> bool:
    return isinstance(t, ArrayT) and not t.scalar and t.dtype == "float64" and len(t.shape) >= min_rank


def _float_scalar(t: Any) -> bool:
    return t == ScalarT("float") or (isinstance(t, ArrayT) and t.scalar and t.dtype == "float64")


def _numba_type(t: Any) -> str | None:
    """The numba parameter type of a value of IR type ``t``, or None."""
    if _float_scalar(t):
        return "nt.float64"
    if t == ScalarT("int"):
        return "nt.int64"
    if t == ScalarT("bool"):
        return "nt.boolean"
    if isinstance(t, ArrayT) and not t.scalar and t.dtype in ("float64", "bool"):
        dtype = "nt.float64" if t.dtype == "float64" else "nt.boolean"
        return f'nt.Array({dtype}, {len(t.shape)}, "A", readonly=True)'
    return None


def _inner_ok(t: Any) -> bool:
    """A value a step may make: a float64/bool array or scalar, or a Python number."""
    return (isinstance(t, ArrayT) and t.dtype in ("float64", "bool")) or t in (ScalarT("float"), ScalarT("bool"))


def _size(t: Any) -> int:
    return math.prod(t.shape) if isinstance(t, ArrayT) else 1


def _axes(op: Op) -> tuple[int, ...] | None | Literal[False]:
    """A reduction's axes (None: all), or False when its keywords are not just a constant ``axis``."""
    kws = {k: v for k, v in op.kwargs if not k.startswith("_")}
    if not kws:
        return None
    if set(kws) != {"axis"} or not isinstance(kws["axis"], Const):
        return False
    ax = kws["axis"].value
    if ax is None:
        return None
    if type(ax) is int:
        ax = (ax,)
    if type(ax) is not tuple or not all(type(a) is int for a in ax):
        return False
    return ax


def _rank(a: Any) -> int | None:
    t = a.type if isinstance(a, (Var, Const)) else None
    if isinstance(t, ArrayT):
        return 0 if t.scalar else len(t.shape)
    if isinstance(t, ScalarT):
        return 0
    return None


def _expr(op: Op, x: list[str]) -> str | None:
    """The numba expression of one step op from its operands' texts, or None if it has none."""
    p, n = op.prim, len(op.args)
    if any(not k.startswith("_") for k, _ in op.kwargs) and p not in _SUM:
        return None
    if p in _BINARY and n == 2:
        return f"({x[0]} {_BINARY[p]} {x[1]})"
    if p in _COMPARE and n == 2:
        return f"({x[0]} {_COMPARE[p]} {x[1]})"
    if p in _NEG and n == 1:
        return f"(-{x[0]})"
    if p == "numpy.square" and n == 1:
        return f"({x[0]} * {x[0]})"
    if p == "numpy.reciprocal" and n == 1:
        return f"(1.0 / {x[0]})"
    if p in ("operator.pow", "numpy.power") and n == 2 and isinstance(op.args[1], Const) \
            and type(op.args[1].value) in (int, float):
        return f"({x[0]} * {x[0]})" if op.args[1].value == 2 else f"({x[0]} ** {x[1]})"
    if p in ("numpy.clip", "numpy.ndarray.clip") and n == 3:
        return f"np.minimum(np.maximum({x[0]}, {x[1]}), {x[2]})"  # numpy's clip, nan kept
    if p in TRANSCENDENTAL and n == 1:  # vecmath's, vectorised: numba's own are scalar libm calls
        return f"vm.{TRANSCENDENTAL[p]}({x[0]})" if _rank(op.args[0]) == 0 else f"_{TRANSCENDENTAL[p]}({x[0]})"
    if p in _ELEMENTWISE_CALLS:
        arity = 3 if p == "numpy.where" else 2 if p in ("numpy.maximum", "numpy.minimum") else 1
        return f"{_ELEMENTWISE_CALLS[p]}({', '.join(x)})" if n == arity else None
    if p in _TRANSPOSE:
        rest = [a.value for a in op.args[1:] if isinstance(a, Const)]
        if _rank(op.args[0]) == 2 and len(rest) == n - 1 and rest in ([], [None], [-1, -2], [-2, -1], [0, 1],
                                                                       [1, 0], [(1, 0)]):
            return f"{x[0]}.T"
        return None
    if p in _MATMUL and n == 2:
        ra, rb = _rank(op.args[0]), _rank(op.args[1])
        helpers: dict[tuple[int | None, int | None], str] = {(2, 2): "_mm", (2, 1): "_mv", (1, 2): "_vm", (1, 1): "_vv"}
        helper = helpers.get((ra, rb))
        if helper is None:
            return None
        sa, sb = op.args[0].type.shape, op.args[1].type.shape
        if helper == "_mm" and sa[0] * sa[1] * sb[1] > SMALL_MATMUL:
            return f"np.dot(np.ascontiguousarray({x[0]}), np.ascontiguousarray({x[1]}))"
        return f"{helper}({x[0]}, {x[1]})"
    if p in _SUM and n == 1:
        axes = _axes(op)
        if axes is False:
            return None
        if axes is None:
            return f"np.sum({x[0]})"
        rank = _rank(op.args[0]) or 0
        axes = tuple(sorted({a % rank for a in axes})) if rank else ()
        if axes == tuple(range(rank)):
            return f"np.sum({x[0]})"
        if rank == 2:  # NOTE: explicit loops: numba takes ~2.5 s to compile its np.sum with an axis
            return f"_sum{axes[0]}({x[0]})"
        text = x[0]
        for ax in reversed(axes):
            text = f"np.sum({text}, axis={ax})"
        return text
    if p in _MEAN and n == 1 and not any(not k.startswith("_") for k, _ in op.kwargs):
        return f"np.mean({x[0]})"
    return None


def _step_ok(loop: Loop) -> bool:
    """Can the step of ``loop`` be written as numba code (every op in the table, every value a
    float64/bool array or a number)?"""
    body = loop.body
    if any(_size(v.type) > MAX_ELEMENTS for v in body.inputs):
        return False
    for op in body.ops:
        if op.unpack or len(op.outs) != 1 or not _inner_ok(op.outs[0].type):
            return False
        if _size(op.outs[0].type) > MAX_ELEMENTS:
            return False
        if any(not isinstance(a, (Var, Const)) for a in op.args):
            return False
        if _expr(op, ["a"] * len(op.args)) is None:
            return False
        for a in op.args:
            if isinstance(a, Const) and _spell(a) is None and _numba_type(a.type) is None:
                return False
    return True


def compilable(op: Op) -> bool:
    """Is ``op`` a loop op this module compiles: its step in the table, its carries float64 arrays
    or floats, its inputs arrays or numbers numba takes, its outputs float64 arrays?"""
    if op.prim != LOOP_PRIM:
        return False
    loop = loop_of(op)
    body = loop.body
    nc, ni = loop.n_carry, loop.n_inv
    ins = body.inputs
    if any(not (_float_array(v.type) or _float_scalar(v.type)) for v in ins[:nc]):
        return False
    if any(_numba_type(v.type) is None for v in ins[nc:]):
        return False
    for kind, v in zip(loop.xs_kinds, ins[nc + ni:]):
        if kind == "each" and not (_float_array(v.type, 0) or _float_scalar(v.type)):
            return False
    outs = body.outputs
    if any(not isinstance(o, (Var, Const)) for o in outs):
        return False
    if any(not _float_array(o.type) for o in outs[nc:]):
        return False
    if any(not (_float_array(o.type) or _float_scalar(o.type)) for o in outs[:nc]):
        return False
    return _step_ok(loop)


# ---- the function's source ----------------------------------------------------------------

@dataclass(frozen=True)
class LoopSpec:
    """One compiled loop before compilation: its module's source (a function ``name``), and the
    constants of its step that are passed as arguments after the loop's own inputs."""

    name: str
    source: str
    consts: tuple[Const, ...]


def loop_spec(loop: Loop, name: str = "compiled_loop") -> LoopSpec:
    """The module that compiles ``loop`` as one function ``name(carry..., invariant..., xs...,
    constants...) -> (carry..., stacked ys...)`` (``each`` xs passed stacked)."""
    body = loop.body
    nc, ni = loop.n_carry, loop.n_inv
    names: dict[int, str] = {}
    params, sig = [], []
    for j, v in enumerate(body.inputs):
        role = "c" if j < nc else "p" if j < nc + ni else "x"
        names[v.id] = f"{role}{j}"
        if role == "x":  # (an `each` x comes stacked, as a `stack` x does)
            params.append(f"s{j}_")
            sig.append(_numba_type(_stack_type(v.type, loop.n)))
        else:
            params.append(f"{role}{j}_" if role == "c" or _is_array(v.type) else f"{role}{j}")
            sig.append(_numba_type(v.type))
    consts: list[Const] = []
    const_names: dict[int, str] = {}

    def text(a: Any) -> str:
        if isinstance(a, Var):
            return names[a.id]
        spelled = _spell(a)
        if spelled is not None:
            return spelled
        if id(a) not in const_names:
            const_names[id(a)] = f"k{len(consts)}"
            consts.append(a)
            params.append(const_names[id(a)])
            sig.append(_numba_type(a.type))
        return const_names[id(a)]

    step = []
    for k, op in enumerate(body.ops):
        e = _expr(op, [text(a) for a in op.args])
        assert e is not None
        names[op.outs[0].id] = f"v{k}"
        step.append(f"v{k} = {e}")
    outs = [text(o) for o in body.outputs]
    lines = [f"def {name}({', '.join(params)}):"]
    for j in range(nc):  # NOTE: a copy: the carry's own C-ordered array, whatever layout came in
        lines.append(f"    c{j} = c{j}_.copy()" if _float_array(body.inputs[j].type) else f"    c{j} = c{j}_")
    for j in range(nc, len(body.inputs)):  # NOTE: C order: the step's products then run on unit strides
        if j >= nc + ni:
            lines.append(f"    s{j} = np.ascontiguousarray(s{j}_)")
        elif _is_array(body.inputs[j].type):
            lines.append(f"    p{j} = np.ascontiguousarray(p{j}_)")
    for q, o in enumerate(body.outputs[nc:]):
        lines.append(f"    y{q} = np.empty({(loop.n,) + tuple(o.type.shape)!r})")
    order = f"range({loop.n - 1}, -1, -1)" if loop.reverse else f"range({loop.n})"
    lines.append(f"    for i in {order}:")
    for j in range(nc + ni, len(body.inputs)):
        lines.append(f"        x{j} = s{j}[i]")
    lines.extend("        " + s for s in step)
    for q, o in enumerate(outs[nc:]):  # NOTE: not `y[i] = o`: numba takes ~3 s to compile that setitem
        lines.append(f"        _put(y{q}, i, {o})")
    if nc:
        new = [o if not _float_array(body.inputs[j].type) or _fresh(body, body.outputs[j]) else f"{o}.copy()"
               for j, o in enumerate(outs[:nc])]
        lines.append(f"        {', '.join(f'c{j}' for j in range(nc))}, = {', '.join(new)},")
    result = [f"c{j}" for j in range(nc)] + [f"y{q}" for q in range(len(outs) - nc)]
    lines.append(f"    return ({', '.join(result)},)")
    head = ("# irad compiled tier: one loop compiled (irad.backends.compiled_loops)\n"
            "import numpy as np\nfrom numba import njit, types as nt\nfrom irad.backends import vecmath as vm\n")
    src = (head + _HELPERS + "\n\n" + "\n".join(lines) + "\n\n\n"
           f"{name} = njit(({', '.join(cast('list[str]', sig))},), cache=_CACHE, error_model=\"numpy\")({name})\n")
    return LoopSpec(name, src, tuple(consts))


def _is_array(t: Any) -> bool:
    return isinstance(t, ArrayT) and not t.scalar


def _stack_type(row: Any, n: int) -> Any:
    return ArrayT("float64", (n,) + (() if _float_scalar(row) else tuple(row.shape)))


def _fresh(body: Graph, out: Any) -> bool:
    """Is ``out`` an array a step op makes anew (C-ordered), not an input, a constant or a view?"""
    if not isinstance(out, Var):
        return False
    for op in body.ops:
        if op.outs[0].id == out.id:
            return op.prim not in _TRANSPOSE
    return False


# ---- the graph ----------------------------------------------------------------------------

def prepare(g: Graph) -> Graph:
    """``g`` with the runs of identical iterations that this module can compile re-rolled (a short
    loop's joint graph arrives unrolled); runs it cannot compile stay written out."""
    before = {id(op) for op in g.ops if op.prim == LOOP_PRIM}
    r = reroll(g, min_ops=0)
    if r is g:
        return g

    def keep(op: Op) -> bool:
        if id(op) in before:
            return True
        loop = loop_of(op)
        return loop.n * len(loop.body.ops) >= MIN_OPS and compilable(op)

    return unroll(r, keep=keep)


def _row_run(atoms: Sequence[Any], rows: dict[int, tuple[Var, int]]) -> tuple[Var, int, int] | None:
    """(stacked array, first row, step) when ``atoms`` are consecutive rows (step ±1) of one
    compiled loop's stacked output."""
    if not atoms or not all(isinstance(a, Var) and a.id in rows for a in atoms):
        return None
    src, first = rows[atoms[0].id]
    step = 1 if len(atoms) == 1 else rows[atoms[1].id][1] - first
    if step not in (1, -1):
        return None
    for k, a in enumerate(atoms):
        s, r = rows[a.id]
        if s.id != src.id or r != first + k * step:
            return None
    return src, first, step


def _slice(first: int, step: int, n: int) -> slice:
    """The ``n`` rows from ``first`` by ``step`` (±1) as a slice."""
    if step > 0:
        return slice(first, first + n)
    stop = first - n
    return slice(first, None if stop < 0 else stop, -1)


def use_compiled_loops(g: Graph, fns: Mapping[int, tuple[Callable[..., Any] | None, LoopSpec]]) -> Graph:
    """``g`` with the loop ops at the indices of ``fns`` replaced by calls of their compiled
    functions, and the rows of stacked outputs bound where something reads them."""
    if not fns:
        return g
    ids = fresh_ids(g)
    rows: dict[int, tuple[Var, int]] = {}  # a per-iteration value's id -> (its stacked array, row)
    ops: list[Op] = []
    made_rows: list[int] = []  # indices in ops of the row bindings (dropped when nothing reads them)
    for i, op in enumerate(g.ops):
        if i not in fns:
            ops.append(op)
            continue
        fn, spec = fns[i]
        loop = loop_of(op)
        init, inv, xs = op.args
        body = loop.body
        nc, ni = loop.n_carry, loop.n_inv
        args: list[Any] = list(init) + list(inv)
        for kind, x, v in zip(loop.xs_kinds, xs, body.inputs[nc + ni:]):
            if kind == "stack":
                args.append(x)
                continue
            st = _stack_type(v.type, loop.n)
            run = _row_run(x, rows)
            s = ids.var(st, "rows")
            if run is not None:
                src, first, step = run
                sl = _slice(first, step, loop.n)
                ops.append(Op("operator.getitem", (src, Const(sl, typeof(sl))), (), (s,), fn=operator.getitem, loc=op.loc))
            else:
                ops.append(Op("numpy.stack", (tuple(x),), (), (s,), fn=np.stack, loc=op.loc))
            args.append(s)
        args.extend(spec.consts)
        outs: list[Var] = []
        after: list[Op] = []
        for j, o in enumerate(op.outs[:nc]):
            if isinstance(o.type, ArrayT) and o.type.scalar:  # NOTE: numba returns a float: np.float64 as traced
                raw = ids.var(ScalarT("float"), o.hint)
                outs.append(raw)
                after.append(Op("numpy.float64", (raw,), (), (o,), fn=np.float64, loc=op.loc))
            else:
                outs.append(o)
        pos = nc
        for kind, y in zip(loop.ys_kinds, body.outputs[nc:]):
            if kind == "stack":
                outs.append(op.outs[pos])
                pos += 1
                continue
            stacked = ids.var(ArrayT("float64", (loop.n,) + tuple(y.type.shape)), "ys")
            outs.append(stacked)
            for r in range(loop.n):
                o = op.outs[pos + r]
                rows[o.id] = (stacked, r)
                made_rows.append(len(ops) + 1 + len(after))
                after.append(Op("operator.getitem", (stacked, Const(r, typeof(r))), (), (o,), fn=operator.getitem, loc=op.loc))
            pos += loop.n
        ops.append(Op(LOOP_CALL, tuple(args), (), tuple(outs), fn=fn, loc=op.loc, unpack=True))
        ops.extend(after)
    read = {o.id for o in g.outputs if isinstance(o, Var)}
    for op in ops:
        read.update(v.id for v in op.inputs)
    dead = {k for k in made_rows if ops[k].outs[0].id not in read}
    return g.replace(ops=tuple(op for k, op in enumerate(ops) if k not in dead))


def planned(g: Graph) -> tuple[Graph, dict[int, LoopSpec]]:
    """``g`` prepared, and the specs of its loops to compile (by op index)."""
    g = prepare(g)
    return g, {i: loop_spec(loop_of(op)) for i, op in enumerate(g.ops) if compilable(op)}


def compile_loops(g: Graph) -> tuple[Graph, int, int]:
    """``g`` prepared and its compilable loops replaced by compiled functions: (the graph, how many
    loops were compiled, how many of those came from the disk cache)."""
    g, specs = planned(g)
    fns: dict[int, tuple[Callable[..., Any], LoopSpec]] = {}
    cached = 0
    for i, spec in specs.items():
        was = on_disk(spec.source)
        try:
            ns = load_module(spec.source)
        except Exception:  # NOTE: numba rejected this step: the loop stays a numpy loop
            continue
        fns[i] = (ns[spec.name], spec)
        cached += was
    return use_compiled_loops(g, fns), len(fns), cached


def on_disk(source: str) -> bool:
    """Is the module of ``source`` in the disk cache?"""
    path = cached_path(source)
    return path is not None and os.path.exists(path)
