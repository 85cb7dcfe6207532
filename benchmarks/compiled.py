"""The compiled tier (``irad.backends.numba``) against the numpy tier, hand-written numpy and JAX's
jit, on the array workloads, in one process::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.compiled [--markdown docs/benchmarks.md]

For each workload: a call of irad's numpy tier (``backend="numpy"``), a call of its compiled tier
(compiled at once, ``tiers.compile_after(1)``, and waited for), the compile's time and kernels,
whether they came from the disk cache, the cached call at which the default estimate would start
the compile, and the ratios to the hand-written gradient, interleaved (each contender's block right
after a hand-written block).  Times are medians over rounds (wall clock; a shared machine).  Not a
test: nothing here asserts a time.
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
from irad import tiers  # noqa: E402
from benchmarks.contenders import contenders, write_section  # noqa: E402
from benchmarks.workloads import WORKLOADS  # noqa: E402

ARRAY_WORKLOADS = ("mlp", "rnn", "logreg", "gp", "chain")


def _block(fn: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def measure(names: tuple[str, ...] = ARRAY_WORKLOADS, rounds: int = 7, budget: float = 0.05) -> list[dict[str, Any]]:
    cs, _ = contenders(["jax"])
    jax = next((c for c in cs if c.name == "jax"), None)
    out = []
    for w in WORKLOADS:
        if w.name not in names:
            continue
        args = w.make_args(np.random.default_rng(0))
        was = irad.config().backend
        irad.config(backend="numpy")
        plain = irad.value_and_grad(w.loss, argnums=w.argnums)
        plain(*args)
        irad.config(backend="numba")
        fast = irad.value_and_grad(w.loss, argnums=w.argnums)
        with tiers.compile_after(1):
            fast(*args)
        fast(*args)  # the first cached call starts the compile
        prog = fast.program(*args)
        tiers.settle()
        fast(*args)  # the switch
        irad.config(backend=was)
        job = prog.compiled
        row: dict[str, Any] = {"name": w.name, "tier": prog.tier, "kernels": job.kernels if job else 0, "loops": job.loops if job else 0,
                               "compile_s": job.seconds if job else 0.0, "from_disk": bool(job and job.from_disk),
                               "switch_at": tiers.calls_before_compiling(prog.graph)}
        calls = {"hand": lambda: w.hand(*args), "numpy tier": lambda: plain(*args), "compiled tier": lambda: fast(*args)}
        if jax is not None:
            calls["jax"] = jax.prepare(w, args)[0]
        reps = {k: max(3, int(budget / max(_block(c, 3), 1e-7))) for k, c in calls.items()}
        ratios: dict[str, list[float]] = {k: [] for k in calls if k != "hand"}
        times: dict[str, list[float]] = {k: [] for k in calls}
        for r in range(rounds):
            peers = list(ratios)
            for k in peers[r % len(peers):] + peers[:r % len(peers)]:
                th = _block(calls["hand"], reps["hand"])
                tk = _block(calls[k], reps[k])
                times["hand"].append(th)
                times[k].append(tk)
                ratios[k].append(tk / th)
        row["us"] = {k: 1e6 * float(np.median(v)) for k, v in times.items()}
        row["ratio"] = {k: float(np.median(v)) for k, v in ratios.items()}
        out.append(row)
    return out


def section(rows: list[dict[str, Any]]) -> str:
    L = ["<!-- compiled -->", "## The compiled tier (`irad.backends`), sessions 14-15", "",
         "Written by `python -m benchmarks.compiled --markdown docs/benchmarks.md`: ratio of a call to the "
         "hand-written gradient (interleaved, median of 7 rounds), the compile (numba kernels for the "
         "program's elementwise chains and its loops compiled whole, in a background thread), and the cached "
         "call at which the default estimate starts it.", "",
         "| workload | numpy tier | compiled tier | JAX jit | hand-written call | kernels | loops | compile | from disk | compile starts at call |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        jax = r["ratio"].get("jax")
        L.append(f"| {r['name']} | {r['ratio']['numpy tier']:.2f} | {r['ratio']['compiled tier']:.2f}"
                 f"{'' if r['tier'] == 'numba' else ' (stayed numpy)'} | {'—' if jax is None else f'{jax:.2f}'} | "
                 f"{r['us']['hand']:.1f} µs | {r['kernels']} | {r['loops']} | {r['compile_s']:.2f} s | "
                 f"{'yes' if r['from_disk'] else 'no'} | {r['switch_at']} |")
    L += ["<!-- /compiled -->"]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compiled")
    ap.add_argument("--markdown", default=None, help="write the section into this markdown file")
    ap.add_argument("--workloads", default=",".join(ARRAY_WORKLOADS))
    ns = ap.parse_args()
    text = section(measure(tuple(ns.workloads.split(","))))
    if ns.markdown:
        write_section(Path(ns.markdown), "compiled", text)
    print(text)


if __name__ == "__main__":
    main()
