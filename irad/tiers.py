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

The compiled tier (``irad.backends.numba``, where numba is installed and ``irad.config(backend=...)``
allows it) is for the other programs, whose elementwise chains it fuses into kernels.  Its compile
takes ~0.2–1 s, so it runs in a background thread, started once the program's estimated run time
over its cached calls exceeds the compile's estimated time (``calls_before_compiling``), or on its
first cached call when the kernels are in the disk cache.  Calls go on meanwhile on the numpy tier.
The first call after the compile finishes runs both tiers on its arguments: the compiled one
replaces the numpy one only if their results agree (``agree``); either way it is decided once.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from . import backends, log, passes
from .backends import tier as compiled
from .effects import is_impure_prim
from .errors import GuardError
from .ir import ArrayT, Graph, ScalarT
from .loops import LOOP_PRIM, loop_of, unroll
from .lower import Lowered, lower


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
    #: the compiled tier: the fewest cached calls before its compile starts, and (when set) the
    #: count that replaces the estimate of ``calls_before_compiling``
    compile_min_calls: int = 2
    compile_calls: int | None = None
    #: False: the call that reaches the count compiles and switches itself (tests, stress runs)
    compile_in_thread: bool = True


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


@contextlib.contextmanager
def compile_after(calls: int | None) -> Iterator[None]:
    """Programs compiled in this block start their compiled tier's compile after ``calls`` cached
    calls (None: by the estimate)."""
    was = CONFIG.compile_calls
    CONFIG.compile_calls = calls
    try:
        yield
    finally:
        CONFIG.compile_calls = was


#: one promotion at a time: two threads that reach a program's count together compile it once
_LOCK = threading.RLock()  # (reentrant: a program run to check a switch may call another program)


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


def _impure(g: Graph) -> bool:
    """Does ``g`` (or a loop's step in it) call something impure (a print, a user's logger)?"""
    return any(is_impure_prim(op.prim) or (op.prim == LOOP_PRIM and _impure(loop_of(op).body)) for op in g.ops)


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
    in place), or None when it keeps its first tier; sets ``program.upgrade`` to the tier it
    counts toward."""
    if program.passes is not None or program.writeback or program.setattrs or program.rngs:
        return None
    if CONFIG.hot_calls is not None:
        size = unrolled_size(g)
        if size is not None and size <= CONFIG.max_ops:
            program.upgrade = "unrolled"
            return [CONFIG.hot_calls]
    if backends.CONFIG.compiled_tier() and not _impure(g):  # (the switch runs the program twice)
        p = compiled.prospect(g)
        if p is not None:
            program.upgrade = "numba"
            return [1 if p.on_disk and CONFIG.compile_calls is None else calls_before_compiling(g, p)]
    return None


def calls_before_compiling(g: Graph, p: compiled.Prospect | None = None) -> int:
    """How many cached calls of ``g``'s numpy program take about as long as compiling its kernels."""
    if CONFIG.compile_calls is not None:
        return CONFIG.compile_calls
    p = p or compiled.prospect(g)
    if p is None:
        return 10 ** 9
    calls = p.compile_s() / max(compiled.estimate_run_s(g), 1e-9)
    return max(CONFIG.compile_min_calls, min(int(math.ceil(calls)), 10 ** 9))


@dataclass
class Compile:
    """A program's compiled tier, built in a background thread (``Program.compiled``)."""

    counter: list[int]  # the program's hot counter: set to 0 when done, so the next call switches
    thread: threading.Thread | None = None
    result: Lowered | None = None
    error: BaseException | None = None
    kernels: int = 0
    loops: int = 0  # loops compiled whole
    from_disk: bool = False
    seconds: float = 0.0


#: compile threads still running (``settle`` waits for them)
_THREADS: set[threading.Thread] = set()
_NEVER = 2 ** 62  # a count no program reaches: the entry stops asking


def settle(timeout: float | None = None) -> bool:
    """Wait for the compiled tiers being built; True when none is left."""
    end = None if timeout is None else time.monotonic() + timeout
    for t in list(_THREADS):
        t.join(None if end is None else max(0.0, end - time.monotonic()))
    return not any(t.is_alive() for t in list(_THREADS))


def _build(program: Any, job: Compile) -> None:
    t = time.perf_counter()
    try:
        made = compiled.compile_program(program.graph, f"{program.fn.__name__}_compiled")
        job.result, job.kernels, job.loops, job.from_disk = made.lowered, made.kernels, made.loops, made.from_disk
    except Exception as e:  # NOTE: the numpy tier is right: a call never fails for want of the compiled one
        job.error = e
    job.seconds = time.perf_counter() - t
    job.counter[0] = 0  # the next call decides
    _THREADS.discard(threading.current_thread())


def agree(old: Sequence[Any], new: Sequence[Any]) -> str | None:
    """None when two runs' flat outputs agree (the same structure and dtypes; floats to ~1e-10 of each
    output's largest magnitude, nan where nan), else what differs."""
    if len(old) != len(new):
        return f"{len(new)} outputs, not {len(old)}"
    for k, (a, b) in enumerate(zip(old, new)):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output {k}: {y.dtype}{list(y.shape)}, not {x.dtype}{list(x.shape)}"
        if x.dtype.kind not in "fc":
            if not np.array_equal(x, y):
                return f"output {k} differs"
            continue
        if not np.array_equal(np.isnan(x), np.isnan(y)) or not np.array_equal(np.isinf(x), np.isinf(y)):
            return f"output {k}: nan or inf where the numpy tier has none"
        fin = np.isfinite(x)
        if fin.any():
            scale = float(np.max(np.abs(x[fin])))
            err = float(np.max(np.abs(x[fin] - y[fin])))
            if err > 1e-10 * scale + 1e-300:
                return f"output {k} differs by {err:.3g} (largest magnitude {scale:.3g})"
        inf = np.isinf(x)
        if not np.array_equal(x[inf], y[inf]):
            return f"output {k}: its infinities differ"
    return None


def _switch(program: Any, job: Compile, leaves: Sequence[Any]) -> None:
    """Run both tiers on this call's arguments; the compiled one from now on if they agree."""
    low = job.result
    assert low is not None
    dyn = program.dyn_pos
    xs = list(leaves) if dyn is None else [leaves[i] for i in dyn]
    try:
        old = program.fn(*xs)
    except GuardError:  # NOTE: this call is not the program's: the next one decides
        job.counter[0] = 0
        return
    try:
        new = low.fn(*xs)
        why = agree(old, new)
    except Exception as e:
        why = f"it raised {type(e).__name__}: {e}"
    program.hot = None
    if why is None:
        program.numpy_tier = (program.source, program.fn)
        program.source, program.fn = low.source, low.fn
        program.tier = "numba"
        program._entry = None  # the entry holds the old function: built again on the next cached run
    else:
        job.counter[0] = _NEVER
    log.compiled(program.name, job.kernels, job.seconds, job.from_disk, why, job.loops)


def promote(program: Any, leaves: Sequence[Any] = ()) -> None:
    """Move ``program`` on to its next tier: lower it again with its loops unrolled, or start (or
    finish) its compiled tier; ``leaves``: this call's arguments, flat."""
    with _LOCK:
        if program.hot is None:  # another thread promoted it meanwhile
            return
        if program.upgrade == "numba":
            job = program.compiled
            if job is None:
                counter = program.hot
                counter[0] = _NEVER  # no more asking while it compiles
                job = program.compiled = Compile(counter)
                if not CONFIG.compile_in_thread:
                    _build(program, job)
                else:
                    job.thread = threading.Thread(target=_build, args=(program, job), daemon=True,
                                                  name=f"irad compile {program.name}")
                    _THREADS.add(job.thread)
                    job.thread.start()
                    return
            if job.error is not None:
                program.hot = None
                job.counter[0] = _NEVER
                log.compiled(program.name, 0, job.seconds, False, f"it did not compile ({type(job.error).__name__}: "
                             f"{job.error})")
            elif job.result is not None:
                _switch(program, job, leaves)
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
        program.tier = "unrolled"
        program._entry = None  # the entry holds the old function: built again on the next cached run
        log.unrolled(program.name, len(g.ops), 1e3 * (time.perf_counter() - t))
