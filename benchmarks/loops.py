"""``python -m benchmarks.loops [--steps 100,300,1000,3000,10000] [--quick]``: loops as loop ops.

Three measurements, none asserted (the machines are shared; compare columns, not absolute times):

* **compile curves**: ``irad.compile`` (trace, re-roll, reverse mode, passes, lowering) of a
  scalar Rosenbrock loop over an ``f64[n]`` (11 ops a step) and of an RNN step
  ``h = tanh(W @ h + xs[t])`` (32 units, 4 ops a step), per step count: seconds (best of 3, GC as
  irad runs it) and the trace's share; peak memory (tracemalloc, in a separate run: it slows
  Python code several-fold); the same for the unrolled program (``rerolling(False)``) up to 1,000
  steps.
* **steady state** of the RNN workload's gradient (``benchmarks.workloads.rnn_loss``, 50 and 200
  steps): re-rolled against unrolled and hand-written numpy, timeit minima, interleaved.
* **checkpointing**: a 1,024-step RNN (128 units, batch 32): peak memory of one gradient call on
  the compiled program, and its time, with ``loops.checkpointing(0)`` (sqrt(n) segments) and
  without.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"  # NOTE: must happen before numpy is imported

import argparse  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402
from irad import loops  # noqa: E402
from irad.trace import trace_values  # noqa: E402

from .compile_scaling import peak_bytes  # noqa: E402
from .workloads import rnn_args, rnn_hand, rnn_loss  # noqa: E402


def rosenbrock(x: np.ndarray) -> Any:
    total = 0.0
    for i in range(x.shape[0] - 1):
        total = total + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return total


def rnn(W: np.ndarray, xs: np.ndarray) -> Any:
    h = np.zeros(W.shape[0])
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
    return np.sum(h)


def long_rnn(W: np.ndarray, U: np.ndarray, xs: np.ndarray) -> Any:
    h = np.zeros((xs.shape[1], W.shape[0]))
    loss = 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(h @ W + xs[t] @ U)
        loss = loss + np.mean(h * h)
    return loss


CURVES: dict[str, tuple[Callable[..., Any], Callable[[int], tuple[Any, ...]]]] = {
    "scalar Rosenbrock": (rosenbrock, lambda n: (np.random.default_rng(0).normal(size=n + 1),)),
    "RNN, 32 units": (rnn, lambda n: (np.random.default_rng(0).normal(size=(32, 32)) * 0.1,
                                      np.random.default_rng(1).normal(size=(n, 32)))),
}


def compile_seconds(f: Callable[..., Any], args: tuple[Any, ...], repeat: int = 3) -> tuple[float, float]:
    """Best-of-``repeat`` seconds of ``irad.compile`` and of its trace alone."""
    best, best_trace = float("inf"), float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        trace_values(f, args, {})
        best_trace = min(best_trace, time.perf_counter() - t)
        t = time.perf_counter()
        irad.compile(f, *args)
        best = min(best, time.perf_counter() - t)
    return best, best_trace


def curves(steps: list[int]) -> None:
    print("| workload | steps | re-rolled: compile (trace) | peak MiB | unrolled: compile | peak MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (f, make) in CURVES.items():
        for n in steps:
            args = make(n)
            with loops.rerolling(True, min_ops=12):  # the default re-rolls runs of 400 ops and more
                t, tt = compile_seconds(f, args, 3 if n <= 1000 else 1)
                m = peak_bytes(lambda: irad.compile(f, *args)) / 2 ** 20
            un = "—"
            if n <= 1000:
                with loops.rerolling(False):
                    tu, _ = compile_seconds(f, args, 1)
                    mu = peak_bytes(lambda: irad.compile(f, *args)) / 2 ** 20
                un = f"{tu:.2f} s | {mu:.1f}"
            else:
                un = "— | —"
            print(f"| {name} | {n:,} | {t:.2f} s ({tt:.2f} s) | {m:.1f} | {un} |", flush=True)


def steady(steps: int, rounds: int) -> None:
    args = rnn_args(np.random.default_rng(0), steps=steps)
    with loops.rerolling(True, min_ops=12):
        rolled = irad.compile(rnn_loss, *args)
    with loops.rerolling(False):
        unrolled = irad.compile(rnn_loss, *args)
    assert "for " in rolled.source and "for " not in unrolled.source
    times: dict[str, list[float]] = {"re-rolled": [], "unrolled": [], "hand": []}
    fns = {"re-rolled": lambda: rolled(*args), "unrolled": lambda: unrolled(*args), "hand": lambda: rnn_hand(*args)}
    for fn in fns.values():
        fn()
        fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k].append(min(timeit.repeat(fn, number=10, repeat=3)) / 10)
    best = {k: min(v) for k, v in times.items()}
    print(f"| RNN workload, {steps} steps | {best['re-rolled'] * 1e3:.3f} ms | {best['unrolled'] * 1e3:.3f} ms | "
          f"{best['hand'] * 1e3:.3f} ms | {best['re-rolled'] / best['unrolled']:.2f} |", flush=True)


def checkpointed(steps: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    args = (rng.normal(size=(128, 128)) * 0.05, rng.normal(size=(16, 128)) * 0.2, rng.normal(size=(steps, 32, 16)))
    rows = []
    for label, limit in (("every iteration's state kept", None), ("checkpointed (sqrt(n) segments)", 0)):
        with loops.checkpointing(limit):
            prog = irad.compile(long_rnn, *args, argnums=(0, 1))
        assert ("remat" in str(prog.graph)) == (limit == 0)
        prog(*args)
        mem = peak_bytes(lambda: prog(*args)) / 2 ** 20
        t = min(min(timeit.repeat(lambda: prog(*args), number=1, repeat=3)) for _ in range(rounds))
        rows.append((label, mem, t, prog(*args)[1]))
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(rows[0][3], rows[1][3]))
    for label, mem, t, _ in rows:
        print(f"| {label} | {mem:.1f} MiB | {t * 1e3:.1f} ms |", flush=True)
    print(f"\nlargest difference between the two gradients: {diff:.1e}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", default="100,300,1000,3000,10000")
    p.add_argument("--quick", action="store_true", help="fewer rounds, fewer step counts")
    a = p.parse_args()
    steps = [100, 1000] if a.quick else [int(s) for s in a.steps.split(",")]
    rounds = 5 if a.quick else 30
    curves(steps)
    print()
    print("| steady state | re-rolled | unrolled | hand-written | re-rolled / unrolled |")
    print("|---|---:|---:|---:|---:|")
    for n in (50, 200):
        steady(n, rounds)
    print()
    print("| 1,024-step RNN, 128 units, batch 32 | peak memory of a call | time of a call |")
    print("|---|---:|---:|")
    checkpointed(1024, 2 if a.quick else 5)


if __name__ == "__main__":
    main()
