"""First calls on big arrays, with rule bodies traced on stand-ins (``passes/standins.py``) and without.

``python -m benchmarks.big_first_call [--markdown docs/benchmarks.md]``: for each workload, a new
``irad.value_and_grad``'s first call, alternating the two settings (best of ``--rounds``), the time
``inline_pullbacks`` takes in it, the same call's tracemalloc peak (a separate run: tracemalloc
slows numpy's allocations), and a steady call for scale.  The program must be the same in both
settings; the gradients of the two first calls are checked equal.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402 (the BLAS thread variables must be set before numpy is imported)
import pathlib  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402
from irad.passes import inline, standins  # noqa: E402

from .compile_scaling import chain, peak_bytes, stage_timer  # noqa: E402
from .contenders import write_section  # noqa: E402
from .workloads import gp_args, gp_nll, logreg_loss, mlp_args, mlp_loss  # noqa: E402


def _logreg(rng: np.random.Generator) -> tuple[Any, ...]:
    n = 1_000_000
    X = rng.normal(size=(n, 32))
    return 0.1 * rng.normal(size=32), X, (rng.random(n) < 0.5).astype(float)


WORKLOADS: dict[str, tuple[Callable[..., Any], Callable[[np.random.Generator], tuple[Any, ...]]]] = {
    "logreg 10^6 x 32": (logreg_loss, _logreg),
    "chain 10^7": (chain, lambda rng: (rng.normal(size=10_000_000),)),
    "mlp, batch 20,000": (mlp_loss, lambda rng: mlp_args(rng, n=20_000, d=64, hdim=512)),
    "gp n=1000": (gp_nll, lambda rng: gp_args(rng, n=1000)),
}


def _first(f: Callable[..., Any], args: tuple[Any, ...], on: bool) -> tuple[float, float, Any, str]:
    standins.MIN_DIM = 512 if on else 10 ** 12
    inline._BODIES.clear()
    vg = irad.value_and_grad(f)
    with stage_timer() as spent:
        t = time.perf_counter()
        _, grad = vg(*args)
        dt = time.perf_counter() - t
    return dt, spent.get("pass inline_pullbacks", 0.0), grad, vg.program(*args).source


def measure(rounds: int) -> list[dict[str, Any]]:
    rows = []
    for name, (f, make) in WORKLOADS.items():
        args = make(np.random.default_rng(0))
        small = tuple(a[:64] if isinstance(a, np.ndarray) and a.ndim else a for a in args)
        try:
            irad.value_and_grad(f)(*small)  # instrumentation caches warm
        except Exception:  # noqa: BLE001 (a workload that needs its real shapes warms up in round 1)
            pass
        best: dict[bool, list[float]] = {True: [np.inf, np.inf], False: [np.inf, np.inf]}
        grads, sources = {}, {}
        for _ in range(rounds):
            for on in (True, False):
                dt, inl, grads[on], sources[on] = _first(f, args, on)
                best[on] = [min(best[on][0], dt), min(best[on][1], inl)]
        leaves = [np.asarray(x) for x in irad.pytree.flatten(grads[True])[0]]
        for a, b in zip(leaves, irad.pytree.flatten(grads[False])[0]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)
        peaks = {}
        for on in (True, False):
            standins.MIN_DIM = 512 if on else 10 ** 12
            peaks[on] = peak_bytes(lambda: irad.value_and_grad(f)(*args))
        standins.MIN_DIM = 512
        vg = irad.value_and_grad(f)
        vg(*args)
        t = time.perf_counter()
        vg(*args)
        steady = time.perf_counter() - t
        data = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
        rows.append({"name": name, "data": data / 1e6, "on": best[True], "off": best[False], "peak_on": peaks[True] / 1e6,
                     "peak_off": peaks[False] / 1e6, "steady": steady, "same": sources[True] == sources[False]})
        r = rows[-1]
        print(f"{name}: first call {r['on'][0]:.3f} s (inline {r['on'][1]:.3f}) with stand-ins, {r['off'][0]:.3f} s "
              f"(inline {r['off'][1]:.3f}) without; peak {r['peak_on']:.0f} / {r['peak_off']:.0f} MB; "
              f"steady call {steady:.3f} s", flush=True)
    return rows


def table(rows: list[dict[str, Any]], rounds: int) -> str:
    lines = ["<!-- big_first_call -->", "## First calls on big arrays: rule bodies on stand-ins", "",
             "Written by `python -m benchmarks.big_first_call --markdown docs/benchmarks.md` "
             "(`benchmarks/big_first_call.py`, one core, wall clock, best of "
             f"{rounds} alternating rounds).  *with*/*without*: rule bodies traced on stand-in shapes "
             "(`passes/standins.py`, docs/passes.md) or at the real shapes (before).  The peak is tracemalloc's "
             "during the first call (MB, above what was live before it).  *steady*: a later call of the "
             "same function.", "",
             "| workload | arguments (MB) | first call with (s) | inline_pullbacks with (s) | first call without (s) | "
             "inline_pullbacks without (s) | peak with (MB) | peak without (MB) | steady call (s) | same program |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['data']:.0f} | {r['on'][0]:.3f} | {r['on'][1]:.3f} | {r['off'][0]:.3f} | "
                     f"{r['off'][1]:.3f} | {r['peak_on']:.0f} | {r['peak_off']:.0f} | {r['steady']:.3f} | "
                     f"{'yes' if r['same'] else 'no'} |")
    lines.append("<!-- /big_first_call -->")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown", type=pathlib.Path, default=None)
    opts = ap.parse_args(argv)
    text = table(measure(opts.rounds), opts.rounds)
    print(text)
    if opts.markdown is not None:
        write_section(opts.markdown, "big_first_call", text)


if __name__ == "__main__":
    main()
