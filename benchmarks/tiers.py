"""The unrolled tier (``irad.tiers``) on the scalar workloads: a call of the re-rolled program, the
promotion at the 1,000th call, a call of the unrolled program, and the hand-written gradient, in
one process::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.tiers [--markdown docs/benchmarks.md]

Times are the best of 7 blocks of calls (wall clock; a shared machine).  Not a test: nothing here
asserts a time.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402
from benchmarks.contenders import write_section  # noqa: E402
from benchmarks.workloads import rosenbrock, rosenbrock_hand, scalar_loop, scalar_loop_hand  # noqa: E402

CASES = {"scalar_loop (100 floats)": (scalar_loop, scalar_loop_hand, 100),
         "rosenbrock (64 floats)": (rosenbrock, rosenbrock_hand, 64)}


def _best(fn: Callable[[], Any], n: int) -> float:
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def measure() -> dict[str, dict[str, float]]:
    out = {}
    for name, (f, hand, n) in CASES.items():
        xs = [float(v) for v in np.random.default_rng(0).normal(size=n)]
        vg = irad.value_and_grad(f)
        t = time.perf_counter()
        vg(xs)
        first = time.perf_counter() - t
        prog = vg.program(xs)
        looped = _best(lambda: vg(xs), 100)  # 700 calls: still the first tier
        assert prog.hot is not None and "for " in prog.source
        prog.hot[0] = 1  # the next call promotes
        t = time.perf_counter()
        vg(xs)
        promote = time.perf_counter() - t
        assert prog.hot is None and "for " not in prog.source
        out[name] = {"first_ms": 1e3 * first, "looped_us": 1e6 * looped, "promote_ms": 1e3 * promote,
                     "unrolled_us": 1e6 * _best(lambda: vg(xs), 1000), "hand_us": 1e6 * _best(lambda: hand(xs), 1000)}
    return out


def section(results: dict[str, dict[str, float]]) -> str:
    L = ["<!-- tiers -->", "## The unrolled tier for hot scalar loops (`irad.tiers`), session 13", "",
         "Written by `python -m benchmarks.tiers --markdown docs/benchmarks.md`: a call of the re-rolled "
         "program (calls 2-701), the call that promotes it (lowered again with its loops unrolled: "
         "`loops.unroll`, the exact passes, `lower`), a call of the unrolled program, and the hand-written "
         "gradient; best of 7 blocks, wall clock.", "",
         "| workload | first call | re-rolled call | promotion | unrolled call | hand-written | unrolled / hand |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        L.append(f"| {name} | {r['first_ms']:.1f} ms | {r['looped_us']:.1f} µs | {r['promote_ms']:.1f} ms | "
                 f"{r['unrolled_us']:.1f} µs | {r['hand_us']:.1f} µs | {r['unrolled_us'] / r['hand_us']:.2f}x |")
    L += ["", "The unrolled program gives the same bits as the re-rolled one (tests/test_tiers.py).", "<!-- /tiers -->"]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tiers")
    ap.add_argument("--markdown", default=None, help="write the section into this markdown file")
    ns = ap.parse_args()
    text = section(measure())
    if ns.markdown:
        write_section(Path(ns.markdown), "tiers", text)
    print(text)


if __name__ == "__main__":
    main()
