"""The pass manager: the default pipeline, in one visible place, run to a fixed point."""
from __future__ import annotations

from typing import Callable, Sequence

from irad import log
from irad.errors import PassError
from irad.ir import Graph, verify

from .cse import cse
from .dce import dce
from .explicit_state import explicit_state
from .fold import fold_constants
from .inline import inline_pullbacks
from .structure import cholesky_consumers, shared_lu, triangular_solves
from .simplify import simplify

Pass = Callable[[Graph], Graph]

#: the default pipeline of irad.compile (passes=None)
PIPELINE: tuple[Pass, ...] = (explicit_state, cholesky_consumers, inline_pullbacks, triangular_solves, shared_lu, fold_constants, simplify, cse, dce)


def run(g: Graph, pipeline: Sequence[Pass] | None = None, *, max_rounds: int = 10, check: bool = False) -> Graph:
    """Apply ``pipeline`` (default: ``PIPELINE``) until the graph stops changing.

    A failing pass is named together with the passes that ran before it.
    """
    pipeline = PIPELINE if pipeline is None else tuple(pipeline)
    ran: list[str] = []
    start, rounds = g, 0
    for rounds in range(1, max_rounds + 1):
        before = g
        for p in pipeline:
            name = getattr(p, "__name__", repr(p))
            try:
                new = p(g)
                if not isinstance(new, Graph):
                    raise TypeError(f"returned {type(new).__name__}, not a Graph")
                if check:
                    verify(new)
            except Exception as e:
                raise PassError(f"pass {name!r} failed after {ran}: {type(e).__name__}: {e}") from e
            ran.append(name)
            if log.CONFIG.passes and new is not g and (new.ops != g.ops or new.outputs != g.outputs):
                log.passed(start.name, name, g, new)
            g = new
        if g is before or (g.ops == before.ops and g.outputs == before.outputs):
            break
    if log.CONFIG.passes:
        log.pipeline_done(start.name, rounds, start, g)
    return g
