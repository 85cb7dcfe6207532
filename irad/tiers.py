"""The unrolled tier: a hot program whose loops step through scalar work is lowered again with its
loops written out.

Re-rolling (``irad.loops``) makes a long loop's first call cheap: the step is traced, differentiated
and lowered once, not once per iteration.  But a Python ``for`` costs ~100 ns per iteration in
bookkeeping (the iteration, the rows read, the residuals stored), and a step of a few float ops
costs about as much, so a re-rolled loop over Python floats or numpy scalars runs ~2x slower than
the same ops written out (docs/benchmarks.md).  The written-out program is what a hot program
should run; the re-rolled one is what its first call should compile.  So a program starts re-rolled
and, once it has answered ``CONFIG.hot_calls`` calls, its joint graph is unrolled, the exact passes
(``fold_constants``, ``simplify``, ``cse``, ``dce``: each gives the same bits as what it replaces)
run over it, and it is lowered again.  The new function computes the same ops in the same order, so
it gives the same bits as the one it replaces (tests/test_tiers.py checks this); only ``prog.fn``
and ``prog.source`` change.  ``prog.graph`` stays the re-rolled graph.

Only loops whose steps make scalars (a Python number, a numpy scalar or a 0-d array, in loops
nested to any depth) qualify: an array step's ops cost microseconds, and its loop's bookkeeping is
noise.  A step with an impure call, a program that writes back or sets attributes or
draws random numbers, a custom pass pipeline, and a program that would unroll to more than
``CONFIG.max_ops`` ops keep their first tier.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from . import log
from .effects import is_impure_prim
from .ir import ArrayT, Graph, ScalarT
from .loops import LOOP_PRIM, loop_of, unroll


@dataclass
class Config:
    """``hot_calls``: the cached calls after which a qualifying program is unrolled (``None``: never).
    Both the unrolling's cost and a call's saving grow with the unrolled program's size, so one count
    fits programs of every size: at 1,000 calls, the calls have taken about as long as the unrolling
    takes (~50 µs per unrolled op, against ~30 ns per op and call saved).
    ``max_ops``: a program that would unroll to more ops keeps its loops (its compile would take
    seconds)."""

    hot_calls: int | None = 1000
    max_ops: int = 20_000


#: owned by this module; tests set ``CONFIG.hot_calls`` (or use ``hot_after``) to promote early
CONFIG = Config()


@contextlib.contextmanager
def hot_after(calls: int | None) -> Iterator[None]:
    """Programs compiled in this block are unrolled after ``calls`` cached calls (None: never)."""
    was = CONFIG.hot_calls
    CONFIG.hot_calls = calls
    try:
        yield
    finally:
        CONFIG.hot_calls = was


#: one promotion at a time: two threads that reach a program's count together compile it once
_LOCK = threading.Lock()


def _scalar(t: Any) -> bool:
    return isinstance(t, ScalarT) or (isinstance(t, ArrayT) and t.shape == ())


def _step_size(body: Graph) -> int | None:
    """The ops of one iteration of ``body`` written out, or None if the step makes anything but
    scalars or calls something impure.  (A guard is fine: written out, each iteration's copy checks
    what the step's guard checked, and a failure is answered by a retrace as before.)"""
    size = 0
    for op in body.ops:
        if is_impure_prim(op.prim):
            return None
        if op.prim == LOOP_PRIM:
            inner = _step_size(loop_of(op).body)
            if inner is None:
                return None
            size += loop_of(op).n * inner
        elif all(_scalar(o.type) for o in op.outs):
            size += 1
        else:
            return None
    return size


def unrolled_size(g: Graph) -> int | None:
    """The ops of ``g`` with its loops written out, when it holds a loop and every loop steps through
    scalar work without impure calls; None otherwise."""
    size, loops = 0, False
    for op in g.ops:
        if op.prim != LOOP_PRIM:
            size += 1
            continue
        step = _step_size(loop_of(op).body)
        if step is None:
            return None
        size += loop_of(op).n * step
        loops = True
    return size if loops else None


def countdown(g: Graph, program: Any) -> list[int] | None:
    """The hot counter a new program starts with (a one-element list: generated entries decrement it
    in place), or None when it keeps its first tier."""
    if CONFIG.hot_calls is None or program.passes is not None:
        return None
    if program.writeback or program.setattrs or program.rngs:
        return None
    size = unrolled_size(g)
    if size is None or size > CONFIG.max_ops:
        return None
    return [CONFIG.hot_calls]


def promote(program: Any) -> None:
    """Lower ``program``'s graph again with its loops unrolled, and run that from now on."""
    from . import passes  # NOTE: passes imports the lowering's dependencies; import when first needed
    from .lower import lower
    with _LOCK:
        if program.hot is None:  # another thread promoted it meanwhile
            return
        program.hot = None  # (whatever happens below: asked once)
        t = time.perf_counter()
        try:
            g = passes.run(unroll(program.graph), (passes.fold_constants, passes.simplify, passes.cse, passes.dce))
            low = lower(g, program.fn.__name__)
        except Exception as e:  # NOTE: the first tier is right: a call never fails for want of the second
            log.unrolled(program.name, 0, 0.0, e)
            return
        program.source, program.fn = low.source, low.fn
        program._entry = None  # the entry holds the old function: built again on the next cached run
        log.unrolled(program.name, len(g.ops), 1e3 * (time.perf_counter() - t))
