"""Snapshots of the generated program (``prog.source``) for three corpus functions.

Issue 19 moves the tracer, the stages and the IR around without changing behaviour: these
programs pin what lowering writes (names, order, frees, comments) so that a refactor that changes
them is noticed.  A change that makes a program better is fine: rewrite the files with
``IRAD_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_snapshots.py`` and review the diff.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import irad
from functions import by_name

HERE = Path(__file__).parent / "data" / "snapshots"
NAMES = ["layer_norm", "softmax_cross_entropy", "linalg_solve_inv"]


@pytest.mark.parametrize("name", NAMES)
def test_generated_program_is_unchanged(name: str) -> None:
    case = by_name(name)
    prog = irad.compile(case.fn, *case.make_args(np.random.default_rng(0)))
    path = HERE / f"{name}.py.txt"
    if os.environ.get("IRAD_UPDATE_SNAPSHOTS"):
        path.write_text(prog.source)
    assert prog.source == path.read_text()
    # the pinned program is also a right one: its gradient on new inputs matches the function's FD
    irad.testing.check_grads(case.fn, *case.make_args(np.random.default_rng(1)), argnums=case.argnums)
