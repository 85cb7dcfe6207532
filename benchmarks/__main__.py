"""``python -m benchmarks [--quick]``: irad against the hand-written numpy gradient, in one process.

Reports ratios (irad / hand-written) of steady-state gradient time, irad's first-call
trace+compile latency, and the tracer's cost per recorded op.  BLAS runs single-threaded.
``--quick`` checks that every workload runs and agrees, without timing.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # NOTE: must happen before numpy is imported

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402
from irad.pytree import flatten  # noqa: E402

from .workloads import WORKLOADS, Workload  # noqa: E402


def _agree(a: Any, b: Any) -> None:
    for x, y in zip(flatten(a)[0], flatten(b)[0]):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)


def _median_time(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def run_workload(w: Workload, quick: bool, rounds: int = 7, reps: int = 30) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    args = w.make_args(rng)
    hand_v, hand_g = w.hand(*args)
    t0 = time.perf_counter()
    vg = irad.value_and_grad(w.loss, argnums=w.argnums)
    v, g = vg(*args)
    first = time.perf_counter() - t0
    _agree(v, hand_v)
    _agree(g, hand_g)
    _agree(vg(*args), (hand_v, hand_g))
    if quick:
        return {"name": w.name, "ok": True}
    ratios, t_irad, t_hand = [], [], []
    for _ in range(rounds):  # interleaved so that machine noise hits both alike
        th = _median_time(lambda: w.hand(*args), reps)
        ti = _median_time(lambda: vg(*args), reps)
        t_hand.append(th)
        t_irad.append(ti)
        ratios.append(ti / th)
    return {"name": w.name, "note": w.note, "hand_us": 1e6 * float(np.median(t_hand)),
            "irad_us": 1e6 * float(np.median(t_irad)), "ratio": float(np.median(ratios)), "first_ms": 1e3 * first}


def trace_cost() -> dict[str, float]:
    """Tracing cost per recorded op once the instrumented code is cached, and per newly
    instrumented function."""
    def chain(xs: list[float]) -> float:
        s = 0.0
        for v in xs:
            s = s + v * v * 0.5
        return s

    xs = [float(i) for i in range(300)]
    irad.trace(chain, xs)
    best = min(_median_time(lambda: irad.trace(chain, xs), 3) for _ in range(5))
    n_ops = len(irad.trace(chain, xs).ops)
    from irad.instrument import instrument_code
    import json.decoder as jd
    codes = [f.__code__ for f in vars(jd).values() if hasattr(f, "__code__")]
    t = time.perf_counter()
    for c in codes:
        instrument_code(c.replace())  # a fresh code object: not in the cache
    per_fn = (time.perf_counter() - t) / len(codes)
    return {"us_per_op": 1e6 * best / n_ops, "ms_per_function": 1e3 * per_fn}


def _blas() -> str:
    try:
        from threadpoolctl import threadpool_info
        info = threadpool_info()
        return ", ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} thread(s), "
                         f"{i.get('architecture')})" for i in info) or "unknown"
    except ImportError:
        return "threadpoolctl not installed (OPENBLAS_NUM_THREADS=1 set)"


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks")
    ap.add_argument("--quick", action="store_true", help="check that every workload runs and agrees")
    ap.add_argument("--markdown", default=None, help="write a markdown report to this file")
    ns = ap.parse_args()
    results = [run_workload(w, ns.quick) for w in WORKLOADS]
    if ns.quick:
        print(f"{len(results)} workloads run and agree with the hand-written gradients")
        return
    tc = trace_cost()
    lines = [f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
             f"numpy {np.__version__}, BLAS: {_blas()}", "",
             "| workload | hand-written (µs) | irad (µs) | irad / hand | irad first call: trace+compile (ms) |",
             "|---|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['name']} ({r['note']}) | {r['hand_us']:.1f} | {r['irad_us']:.1f} | "
                     f"{r['ratio']:.2f} | {r['first_ms']:.1f} |")
    lines += ["", f"tracer: {tc['us_per_op']:.2f} µs per recorded op (cached instrumentation), "
              f"{tc['ms_per_function']:.2f} ms to instrument a function (json.decoder's functions, mean)"]
    text = "\n".join(lines)
    print(text)
    if ns.markdown:
        with open(ns.markdown, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
