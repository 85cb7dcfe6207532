"""``python -m benchmarks.compile_scaling [--sizes 1000,10000,50000] [--markdown FILE]``: first-call cost per op.

Two programs of about 1k, 10k and 50k recorded ops (``len(irad.trace(f, *args).ops)``): a Python
loop of scalar ops over a list of floats (five ops a step) and a loop of small-array ops on an
``f64[8]`` (four ops a step).  For each:

* the time of ``irad.trace`` (the tracer alone) and of the whole first call of a new
  ``irad.value_and_grad(f)`` (trace, differentiate, passes, lower, Python's ``compile``, run),
  per recorded op (µs), best of ``--repeat``;
* that first call split by stage, timed by wrapping each stage's function for one call: the
  trace (``irad.trace.trace_values``), the reverse transform (``irad.ad.reverse``), every pass
  of ``passes.manager.PIPELINE`` (summed over its rounds), lowering (``irad.lower.lower``, less
  what it spends in Python's ``compile``) and ``compile``; *other* is what remains (the checks
  and the result building of ``irad.api``);
* peak memory per op (KB), measured in separate runs (tracemalloc slows Python code several-fold,
  so it never runs while anything is timed): of ``irad.trace`` and of the first call.

And the peak memory of a first call on a 10^7-element ``f64`` input (an elementwise chain of six
ops), against HIPS autograd's ``value_and_grad`` and the hand-written gradient (tracemalloc, which
sees numpy's allocations; as multiples of the input's 80 MB).

Not a test: nothing here asserts a time or a size.  The 50k programs take about a minute each;
``--sizes`` leaves them out.  BLAS is single-threaded; the machines are shared (expect ±20 %).
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"  # NOTE: must happen before numpy is imported

import argparse  # noqa: E402
import builtins  # noqa: E402
import contextlib  # noqa: E402
import functools  # noqa: E402
import gc  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Iterator  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402
import irad.ad  # noqa: E402
import irad.api  # noqa: E402
import irad.weakcache  # noqa: E402
from irad.passes import manager  # noqa: E402

from .contenders import write_section  # noqa: E402

BIG = 10 ** 7


# ---- the programs ------------------------------------------------------------------------------

def scalar_loop(xs: list[float], steps: int) -> float:
    total = 0.0
    for i in range(steps):
        v = xs[i % len(xs)]
        total = total + v * v * 0.5 + 0.1 * v
    return total


def array_loop(w: np.ndarray, steps: int) -> Any:
    h = w
    for _ in range(steps):
        h = np.tanh(h * w) + 0.1 * h
    return np.sum(h)


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[int], tuple[Any, ...]], int]] = {
    # name: (function, arguments for n ops, recorded ops per step)
    "scalar loop": (scalar_loop, lambda n: ([0.01 * k for k in range(64)], n // 5), 5),
    "small-array loop (f64[8])": (array_loop, lambda n: (np.linspace(0.1, 0.9, 8), n // 4), 4),
}


def chain(x: Any, np: Any = np) -> Any:
    """Six elementwise ops on a big array (``np`` is autograd's numpy for HIPS autograd)."""
    y = np.sin(x)
    w = np.exp(-(y * x))
    return np.sum(w * y + np.tanh(x))


def chain_hand(x: np.ndarray) -> tuple[Any, np.ndarray]:
    y = np.sin(x)
    w = np.exp(-(y * x))
    t = np.tanh(x)
    value = np.sum(w * y + t)
    c = np.cos(x)
    return value, w * c - w * y * (c * x + y) + (1 - t * t)


# ---- measuring ---------------------------------------------------------------------------------

def peak_bytes(fn: Callable[[], Any]) -> int:
    """tracemalloc's peak during ``fn()`` above what was live before it."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@contextlib.contextmanager
def stage_timer() -> Iterator[dict[str, float]]:
    """Seconds spent in each stage of the first calls made inside the block (see the module doc)."""
    spent: dict[str, float] = {}

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t
        return run

    saved = [(irad.api, "trace_values"), (irad.ad, "reverse"), (irad.api, "lower"), (manager, "PIPELINE")]
    old = [getattr(m, n) for m, n in saved]
    irad.api.trace_values = timed("trace", irad.api.trace_values)
    irad.ad.reverse = timed("reverse", irad.ad.reverse)
    irad.api.lower = timed("lower", irad.api.lower)
    manager.PIPELINE = tuple(timed(f"pass {p.__name__}", p) for p in manager.PIPELINE)
    irad.weakcache.compile = timed("compile", builtins.compile)  # type: ignore[attr-defined]
    try:
        yield spent
    finally:
        for (m, n), v in zip(saved, old):
            setattr(m, n, v)
        del irad.weakcache.compile  # type: ignore[attr-defined]


def measure(name: str, n: int, repeat: int) -> dict[str, Any]:
    f, make, _ = PROGRAMS[name]
    args = make(n)
    ops = len(irad.trace(f, *args).ops)
    trace_s = []
    for _ in range(repeat):
        t = time.perf_counter()
        irad.trace(f, *args)
        trace_s.append(time.perf_counter() - t)
    first_s, stages = [], []
    for _ in range(repeat):
        vg = irad.value_and_grad(f)
        gc.collect()
        with stage_timer() as spent:
            t = time.perf_counter()
            first = vg(*args)
            first_s.append(time.perf_counter() - t)
        stages.append(spent)
        second = vg(*args)  # the compiled program: the first call's result is the program's
        np.testing.assert_allclose(np.asarray(first[1], float), np.asarray(second[1], float), rtol=1e-12)
        del vg
    best = int(np.argmin(first_s))
    stage = dict(stages[best])
    stage["lower"] = stage.get("lower", 0.0) - stage.get("compile", 0.0)
    stage["other"] = first_s[best] - sum(stage.values())
    trace_peak = peak_bytes(lambda: irad.trace(f, *args))
    first_peak = peak_bytes(lambda: irad.value_and_grad(f)(*args))
    return {"program": name, "n": n, "ops": ops, "trace_us": 1e6 * min(trace_s) / ops,
            "first_us": 1e6 * first_s[best] / ops, "first_ms": 1e3 * first_s[best],
            "stages_us": {k: 1e6 * v / ops for k, v in stage.items()},
            "trace_kb": trace_peak / 1e3 / ops, "first_kb": first_peak / 1e3 / ops}


def big_data() -> dict[str, float]:
    """First-call peaks on a 10^7-element input, in multiples of the input's size."""
    x = np.random.default_rng(0).normal(size=BIG)
    small = x[:100].copy()
    v, g = irad.value_and_grad(chain)(small)  # instrumentation caches warm, and the check
    hv, hg = chain_hand(small)
    np.testing.assert_allclose(g, hg, rtol=1e-10)
    out = {"irad first call": peak_bytes(lambda: irad.value_and_grad(chain)(x)) / x.nbytes}
    vg = irad.value_and_grad(chain)
    vg(x)
    out["irad later call"] = peak_bytes(lambda: vg(x)) / x.nbytes
    del vg
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        pass
    else:
        ag = autograd.value_and_grad(lambda x: chain(x, anp))
        ag(small)
        out["HIPS autograd"] = peak_bytes(lambda: ag(x)) / x.nbytes
    out["hand-written"] = peak_bytes(lambda: chain_hand(x)) / x.nbytes
    return out


# ---- reporting ---------------------------------------------------------------------------------

STAGES = ("trace", "reverse", "pass explicit_state", "pass inline_pullbacks", "pass fold_constants",
          "pass simplify", "pass cse", "pass dce", "lower", "compile", "other")


def tables(rows: list[dict[str, Any]], big: dict[str, float]) -> str:
    lines = ["| program | recorded ops | trace (µs/op) | first call (µs/op) | first call (ms) | "
             "trace peak (KB/op) | first call peak (KB/op) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['program']} | {r['ops']} | {r['trace_us']:.1f} | {r['first_us']:.1f} | "
                     f"{r['first_ms']:.0f} | {r['trace_kb']:.2f} | {r['first_kb']:.2f} |")
    names = [s for s in STAGES if any(s in r["stages_us"] for r in rows)]
    names += sorted({k for r in rows for k in r["stages_us"]} - set(names))
    lines += ["", "First call by stage (µs per recorded op):", "",
              "| program | ops | " + " | ".join(s.replace("pass ", "") for s in names) + " |",
              "|---|---:|" + "---:|" * len(names)]
    for r in rows:
        lines.append(f"| {r['program']} | {r['ops']} | " +
                     " | ".join(f"{r['stages_us'].get(s, 0.0):.1f}" for s in names) + " |")
    ag = big.get("HIPS autograd")
    lines += ["", f"Peak memory of a first call on a 10^7-element input (`chain`: six elementwise ops), in "
              "multiples of the input's size (80 MB):", "", "| | peak (× input) | vs HIPS autograd |",
              "|---|---:|---:|"]
    for k, v in big.items():
        lines.append(f"| {k} | {v:.1f} | {v / ag:.2f}x |" if ag else f"| {k} | {v:.1f} | n/a |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compile_scaling", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,50000", help="comma-separated numbers of recorded ops")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--markdown", type=Path, default=None,
                    help="write the tables as the <!-- compile_scaling --> section of this file (docs/benchmarks.md)")
    opts = ap.parse_args(argv)
    sizes = [int(s) for s in opts.sizes.split(",")]
    for f, make, _ in PROGRAMS.values():  # instrumentation caches warm
        irad.value_and_grad(f)(*make(40))
    rows = []
    for n in sizes:
        for name in PROGRAMS:
            r = measure(name, n, opts.repeat if n <= 10000 else 1)
            rows.append(r)
            print(f"{name:28s} {r['ops']:6d} ops  trace {r['trace_us']:6.1f} µs/op  first call {r['first_us']:7.1f} "
                  f"µs/op ({r['first_ms']:.0f} ms)  peak {r['trace_kb']:.2f} / {r['first_kb']:.2f} KB/op", flush=True)
    big = big_data()
    text = tables(rows, big)
    print(text)
    if opts.markdown is not None:
        section = "\n".join([
            "<!-- compile_scaling -->", "## First call: how trace and compile scale", "",
            f"Written by `python -m benchmarks.compile_scaling --sizes {opts.sizes} --markdown docs/benchmarks.md` "
            "(`benchmarks/compile_scaling.py`): a Python loop of scalar ops (`total = total + v * v * 0.5 + "
            "0.1 * v`, five ops a step) and a loop of small-array ops (`h = np.tanh(h * w) + 0.1 * h` on "
            "`f64[8]`, four ops a step), at about 1k, 10k and 50k recorded ops.  *trace*: `irad.trace(f, *args)`; "
            "*first call*: a new `irad.value_and_grad(f)`'s first call (trace, differentiate, passes, lower, "
            f"compile, run); best of {opts.repeat} (one run at 50k).  Peaks: tracemalloc, in separate runs (it "
            "slows the tracer several-fold).  Wall clock on a shared machine (expect ±20 %).", "", text,
            "<!-- /compile_scaling -->"])
        write_section(opts.markdown, "compile_scaling", section)


if __name__ == "__main__":
    main()
