"""``python -m benchmarks.checkpoint_memory [--steps N]``: what ``irad.checkpoint`` saves.

The gradient of a recurrent loop of ``--steps`` cells ``h = cell(h, W)`` (a two-layer tanh cell on
a batch, five intermediate arrays per step), compiled by ``irad.grad``, in four variants: no
checkpoint; ``irad.checkpoint(cell)`` at every step; ``irad.checkpoint`` of a chunk of ``k``
steps (the classic ``sqrt(T)`` schedule).  For each: the peak memory of one call of the compiled
program (tracemalloc, which sees numpy's allocations, above what was live before the call; the
*second* call, so tracing is not in it), the median time of a call, and the first call (trace +
compile).  All variants are checked to give the same gradient first.

Printed as a markdown table (the figures of docs/benchmarks.md's ``checkpoint_memory`` section).
Not a test: nothing here asserts a time or a size.  About 3 minutes: the uncheckpointed program
of 1,000 steps takes ~25 s to compile, so ``python -m benchmarks`` does not run it.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # NOTE: before numpy is imported

import argparse  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402

BATCH, WIDTH = 32, 64


def cell(h: np.ndarray, W: np.ndarray) -> np.ndarray:
    """One step: five intermediate arrays the backward pass of ``h`` needs without checkpoint."""
    z = np.tanh(h @ W)
    u = np.sin(z) * z
    return h + 0.1 * np.tanh(u @ W)


def chunk(h: np.ndarray, W: np.ndarray, k: int) -> np.ndarray:
    for _ in range(k):
        h = cell(h, W)
    return h


def loss_plain(h: np.ndarray, W: np.ndarray, steps: int) -> Any:
    for _ in range(steps):
        h = cell(h, W)
    return np.sum(h * h)


def loss_each(h: np.ndarray, W: np.ndarray, steps: int) -> Any:
    for _ in range(steps):
        h = irad.checkpoint(cell)(h, W)
    return np.sum(h * h)


def loss_chunked(h: np.ndarray, W: np.ndarray, steps: int, k: int) -> Any:
    for _ in range(steps // k):
        h = irad.checkpoint(chunk)(h, W, k)
    return np.sum(h * h)


def peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak traced allocation of one call above what was live before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def measure(steps: int = 1000, chunks: tuple[int, ...] = (10, 40)) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    h0 = rng.normal(size=(BATCH, WIDTH))
    W = rng.normal(size=(WIDTH, WIDTH)) / np.sqrt(WIDTH)
    variants: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
        ("no checkpoint", loss_plain, (h0, W, steps)),
        ("`checkpoint(cell)` every step", loss_each, (h0, W, steps))]
    variants += [(f"`checkpoint(chunk)` of {k} steps", loss_chunked, (h0, W, steps, k))
                 for k in chunks if steps % k == 0]
    rows, want = [], None
    for label, loss, args in variants:
        g = irad.grad(loss, argnums=(0, 1))
        t = time.perf_counter()
        got = g(*args)
        first = time.perf_counter() - t
        got = g(*args)  # the second call: the compiled program, no tracing
        if want is None:
            want = got
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        peak = peak_bytes(lambda: g(*args))
        times = []
        for _ in range(5):
            t = time.perf_counter()
            g(*args)
            times.append(time.perf_counter() - t)
        rows.append({"variant": label, "peak_mib": peak / 2 ** 20, "call_ms": 1e3 * float(np.median(times)),
                     "first_s": first})
    return rows


def table(rows: list[dict[str, Any]], steps: int) -> str:
    base = rows[0]
    lines = [f"| {steps}-step loop, batch {BATCH}×{WIDTH} | peak memory of a call (MiB) | vs no checkpoint | "
             "call (ms) | vs no checkpoint | first call (s) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['peak_mib']:.1f} | {r['peak_mib'] / base['peak_mib']:.2f}x | "
                     f"{r['call_ms']:.1f} | {r['call_ms'] / base['call_ms']:.2f}x | {r['first_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint_memory")
    ap.add_argument("--steps", type=int, default=1000)
    opts = ap.parse_args(argv)
    print(table(measure(opts.steps), opts.steps))


if __name__ == "__main__":
    main()
