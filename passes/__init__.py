"""irad's graph passes (installed as ``irad.passes``): pure ``Graph -> Graph`` functions.

``PIPELINE`` (in ``manager.py``) is the default pipeline of ``irad.compile``; ``run(g, pipeline)``
applies a pipeline until nothing changes.
"""
from .analysis import to_nx
from .cse import cse
from .dce import dce
from .memory import accumulate_in_place
from .explicit_state import explicit_state, not_serialisable
from .fold import fold_constants
from .inline import inline_pullbacks
from .manager import PIPELINE, run
from .partition import evaluate_residuals, split
from .simplify import simplify
from .structure import cholesky_consumers, shared_lu, triangular_solves

__all__ = ["PIPELINE", "accumulate_in_place", "cholesky_consumers", "cse", "dce", "explicit_state", "not_serialisable", "evaluate_residuals", "fold_constants", "inline_pullbacks", "run", "shared_lu", "simplify", "split", "to_nx", "triangular_solves"]
