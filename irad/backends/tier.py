"""The compiled tier of one program: its loops compiled as loops, then its elementwise kernels.

``compile_program`` is what ``irad.tiers`` builds in its background thread: the joint graph's
short loops re-rolled and compiled whole (``compiled_loops``), the elementwise chains left around
them fused into kernels (``numba``), and the result lowered by ``irad.lower`` like any graph.
``prospect`` says, before anything is compiled, whether there is anything to compile and how long
it would take, for the tiers' hot count.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np

from ..ir import Graph
from ..loops import LOOP_PRIM, loop_of
from ..lower import Lowered, lower
from . import compiled_loops
from .numba import _unique, cached_path, fuse, has_kernels, load_module, module_source, specs_of


@dataclass(frozen=True)
class Compiled:
    """A program's compiled tier: the lowered program, and what went into it."""

    lowered: Lowered
    kernels: int
    loops: int
    from_disk: bool


def compile_program(g: Graph, name: str) -> Compiled:
    """The compiled tier of the joint graph ``g``."""
    g, n_loops, loops_cached = compiled_loops.compile_loops(g)
    specs = specs_of(g)
    flat = _unique(specs)
    from_disk = loops_cached == n_loops
    if flat:
        source = module_source(flat)
        path = cached_path(source)
        from_disk = from_disk and path is not None and os.path.exists(path)
        ns = load_module(source)
        g = fuse(g, ns, specs)
    return Compiled(lower(g, name), len(flat), n_loops, from_disk)


@dataclass(frozen=True)
class Prospect:
    """What compiling a program would take: how many distinct kernels and loops, and whether they
    are all in the disk cache already."""

    kernels: int
    loops: int
    on_disk: bool

    def compile_s(self) -> float:
        """A rough compile time: numba's import once per process, ~0.15 s per kernel (~0.08 s from
        disk: numba's cache still builds each ufunc's wrapper), ~4 s per loop (measured 3-7 s: numba
        compiles its array code slowly; ~0.05 s from disk)."""
        per_kernel, per_loop = (0.08, 0.05) if self.on_disk else (0.15, 4.0)
        return (0.0 if "numba" in sys.modules else 0.5) + per_kernel * self.kernels + per_loop * self.loops


def prospect(g: Graph) -> Prospect | None:
    """The compiled tier's prospect for ``g``, or None when nothing in it would be compiled."""
    prepared, loops = compiled_loops.planned(g)
    if not loops and not has_kernels(prepared):
        return None
    on_disk = all(compiled_loops.on_disk(spec.source) for spec in loops.values())
    # NOTE: the graph as it will be fused: its compiled loops are calls (their functions not made yet)
    shaped = compiled_loops.use_compiled_loops(prepared, {i: (None, spec) for i, spec in loops.items()})
    flat = _unique(specs_of(shaped))
    if flat:
        path = cached_path(module_source(flat))
        on_disk = on_disk and path is not None and os.path.exists(path)
    return Prospect(len(flat), len(loops), on_disk)


def estimate_run_s(g: Graph) -> float:
    """A rough run time of one call of ``g``'s numpy program: ~1 µs per op and ~1 ns per element
    made (loops: their step times their count)."""
    t = 0.0
    for op in g.ops:
        if op.prim == LOOP_PRIM:
            loop = loop_of(op)
            t += loop.n * estimate_run_s(loop.body)
            continue
        t += 1e-6
        for o in op.outs:
            shape = getattr(o.type, "shape", ())
            t += 1e-9 * float(np.prod(shape)) if shape else 0.0
    return t
