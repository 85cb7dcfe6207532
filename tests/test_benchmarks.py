"""The benchmark workloads run under irad and agree with their hand-written gradients
(``python -m benchmarks --quick``, peers left out: they are optional, CI installs the test extra).

Run as a subprocess from the repository root: ``benchmarks/`` is not an installed package, and
the harness sets thread-count environment variables that should not leak into the test process.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_benchmarks_quick_irad_agrees_with_hand_written() -> None:
    r = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--contenders", "irad"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "7 workloads x 2 contenders (hand, irad): 14 run and agree" in r.stdout, r.stdout
