"""``python -m benchmarks [--quick] [--markdown FILE] [--contenders irad,jax,...]``.

Times the gradient of every workload (``workloads.py``) under each contender: hand-written numpy
(the reference), irad, HIPS autograd, JAX (jit, x64) and PyTorch eager (float64), interleaved in
one process, BLAS single-threaded for all.  In each round every contender runs a block of calls
(its median is the round's figure) right after a block of the hand-written gradient; the reported
time is the median over rounds, the ratio the median of the per-round ratios to the adjacent
hand-written block.  Every contender is checked against the
hand-written gradient first; a contender that errs or disagrees is reported as failing and not
timed.  Peers that are not installed are skipped with a notice.

Each contender is warmed up first, with up to 1,001 calls (at most ~1 s): irad lowers a hot
program's scalar loops again, unrolled, at its 1,000th cached call (``irad.tiers``), as JAX
compiles at its first.

Also reported: irad's and JAX's first-call latency, peak memory of one call (tracemalloc: seen
for numpy-backed contenders only), the tracer's cost per op, the cost of irad's staleness check
per call, the ``accumulate_in_place`` pass on the MLP, and op counts before/after the passes.

``--quick`` checks that every workload runs and agrees, without timing.  ``--clock cpu`` (the
default) reports process CPU time first and wall-clock time beside it; ``--clock wall`` the reverse.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"  # NOTE: must happen before numpy (and the peers) are imported
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "1")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import argparse  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Sequence  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402

from .contenders import Contender, contenders, to_numpy  # noqa: E402
from .workloads import WORKLOADS, Workload  # noqa: E402

#: warm-up calls of each contender before timing (irad.tiers.CONFIG.hot_calls, and one more)
WARMUP_CALLS = 1001

# the targets (ratio to hand-written, steady state), for comparison in the report
TARGETS = {
    "irad": "≤ 1.00 on every workload (issue 16; GP ≤ 0.9)",
    "autograd": "1.1–9.6 on arrays, ~1500 on the scalar loop",
    "jax": "1.06–1.45 on most arrays, ~0.14 (7x faster) on the RNN, ~13 on the scalar loop",
    "torch": "1.6–2.9 on arrays, ~300 on the scalar loop",
}


def agree(got: Any, want: Any, rtol: float, atol: float) -> None:
    """``got`` (any contender's types) matches ``want`` (hand-written) in structure and values."""
    g, w = to_numpy(got), to_numpy(want)
    if isinstance(w, dict):
        assert isinstance(g, dict) and set(g) == set(w), f"keys {sorted(g) if isinstance(g, dict) else g!r}"
        for k in w:
            agree(g[k], w[k], rtol, atol)
    elif isinstance(w, (list, tuple)):
        assert isinstance(g, (list, tuple)) and len(g) == len(w), "structure differs"
        for a, b in zip(g, w):
            agree(a, b, rtol, atol)
    else:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


CLOCK: Callable[[], float] = time.perf_counter  # --clock cpu: time.process_time (all threads' CPU time)


def _clock_names() -> tuple[str, str]:
    cpu, wall = "process CPU time (time.process_time)", "wall-clock time (time.perf_counter)"
    return (cpu, wall) if CLOCK is time.process_time else (wall, cpu)


def _median_times(fn: Callable[[], Any], reps: int) -> tuple[float, float]:
    """Median time of one call by the primary clock and by the other one."""
    c1, c2 = (time.process_time, time.perf_counter) if CLOCK is time.process_time \
        else (time.perf_counter, time.process_time)
    t1, t2 = [], []
    for _ in range(reps):
        a, b = c1(), c2()
        fn()
        t2.append(c2() - b)
        t1.append(c1() - a)
    return float(np.median(t1)), float(np.median(t2))


def _median_time(fn: Callable[[], Any], reps: int) -> float:
    clock = CLOCK
    times = []
    for _ in range(reps):
        t = clock()
        fn()
        times.append(clock() - t)
    return float(np.median(times))


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


def run_workload(w: Workload, cs: list[Contender], quick: bool, rounds: int = 9, budget: float = 0.04) \
        -> dict[str, Any]:
    rng = np.random.default_rng(0)
    args = w.make_args(rng)
    want = w.hand(*args)
    calls: dict[str, Callable[[], Any]] = {}
    res: dict[str, Any] = {"name": w.name, "note": w.note, "fails": {}, "first_ms": {}, "us": {}, "ratio": {},
                           "peak_kib": {}, "rounds": rounds,
                           "us_alt": {}, "ratio_alt": {}, "clock": _clock_names()}
    for c in cs:
        try:
            call, first = c.prepare(w, args)
            tol = (1e-9, 1e-12) if c.name in ("hand", "irad") else (1e-7, 1e-10)
            agree(call(), want, *tol)
            agree(call(), want, *tol)  # the steady-state path too
        except Exception as e:  # noqa: BLE001  (a failing contender is reported, not fatal)
            msg = str(e).strip().splitlines()
            res["fails"][c.name] = f"{type(e).__name__}: {msg[0][:150] if msg else ''}"
            continue
        calls[c.name] = call
        if first is not None:
            res["first_ms"][c.name] = 1e3 * first
    if quick:
        return res
    for c in cs:
        if c.name in calls and c.measures_memory:
            res["peak_kib"][c.name] = peak_bytes(calls[c.name]) / 1024
    reps = {}
    for name, call in calls.items():
        t = _median_time(call, 3)
        reps[name] = int(min(200, max(3, budget / max(t, 1e-9))))
        # NOTE: steady state: irad lowers a hot program's scalar loops again, unrolled, at its
        # 1,000th call (irad.tiers); every contender gets as many warm-up calls, up to ~1 s
        for _ in range(int(min(WARMUP_CALLS, 1.0 / max(t, 1e-9)))):
            call()
    # both clocks around every call: the primary one (--clock) is reported first, the other beside it
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in calls}
    ratios: dict[str, list[tuple[float, float]]] = {n: [] for n in calls}
    peers = [n for n in calls if n != "hand"]
    for r in range(rounds):
        # interleaved: each peer's block right after a hand-written block, rotating the order of the
        # peers, so that the machine's load drifts alike over both sides of each ratio
        for n in peers[r % len(peers):] + peers[: r % len(peers)] if peers else []:
            if "hand" in calls:
                th = _median_times(calls["hand"], reps["hand"])
                times["hand"].append(th)
            tn = _median_times(calls[n], reps[n])
            times[n].append(tn)
            if "hand" in calls:
                ratios[n].append((tn[0] / th[0], tn[1] / th[1]))
        if not peers and "hand" in calls:
            times["hand"].append(_median_times(calls["hand"], reps["hand"]))
    for n in calls:
        for k, key in ((0, ""), (1, "_alt")):
            res["us" + key][n] = 1e6 * float(np.median([t[k] for t in times[n]]))
            if ratios[n]:
                res["ratio" + key][n] = float(np.median([t[k] for t in ratios[n]]))
    if "irad" in calls:  # trace+compile again with warm instrumentation caches (a new value_and_grad)
        warm = []
        for _ in range(3):
            vg = irad.value_and_grad(w.loss, argnums=w.argnums)
            t = time.perf_counter()
            vg(*args)
            warm.append(time.perf_counter() - t)
        res["first_warm_ms"] = 1e3 * float(np.median(warm))
    return res


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


def irad_extras(rounds: int = 7) -> dict[str, Any]:
    """Staleness-check overhead, the accumulate_in_place pass and op counts (irad only)."""
    out: dict[str, Any] = {}
    mlp = next(w for w in WORKLOADS if w.name == "mlp")
    args = mlp.make_args(np.random.default_rng(0))
    vg = irad.value_and_grad(mlp.loss)
    prog = vg.program(*args)
    vg(*args)
    ratios, t_chk, t_call = [], [], []
    for _ in range(rounds):
        tc = _median_time(prog.assumptions.check, 200)
        tg = _median_time(lambda: vg(*args), 30)
        t_chk.append(tc)
        t_call.append(tg)
        ratios.append(tc / tg)
    out["check_us"] = 1e6 * float(np.median(t_chk))
    out["call_us"] = 1e6 * float(np.median(t_call))
    out["check_share"] = float(np.median(ratios))
    out["n_deps"] = len(prog.deps)
    # the whole per-call dispatch (signature key, cache lookup, staleness check, result unflattening):
    # a call with the generated code swapped for a stub that returns its last result
    from benchmarks.overhead import entry_parts, measure, stubbed
    try:  # NOTE: relies on the cached Program's `fn` and `_entry` attributes being what a call runs
        leaves = irad.pytree.flatten((args, {}))[0]
        flat = prog.fn(*(leaves if prog.dyn_pos is None else [leaves[i] for i in prog.dyn_pos]))
        with stubbed(vg, prog, flat):
            vg(*args)
            disp = float(np.median([_median_time(lambda: vg(*args), 200) for _ in range(rounds)]))
        out["dispatch_us"] = 1e6 * disp
        out["dispatch_share"] = disp / float(np.median(t_call))
    except Exception:  # noqa: BLE001  (the cache's layout changed: leave this figure out)
        out["dispatch_share"] = None
    out["overhead"] = measure()
    out["entry"] = entry_parts()
    # accumulate_in_place on the MLP
    vga = irad.value_and_grad(mlp.loss, passes=[*irad.passes.PIPELINE, irad.passes.accumulate_in_place])
    agree(vga(*args), mlp.hand(*args), 1e-9, 1e-12)
    td, ta, rr = [], [], []
    for _ in range(rounds):
        a = _median_time(lambda: vg(*args), 30)
        b = _median_time(lambda: vga(*args), 30)
        td.append(a)
        ta.append(b)
        rr.append(b / a)
    out["aip"] = {"default_us": 1e6 * float(np.median(td)), "aip_us": 1e6 * float(np.median(ta)),
                  "ratio": float(np.median(rr)), "default_kib": peak_bytes(lambda: vg(*args)) / 1024,
                  "aip_kib": peak_bytes(lambda: vga(*args)) / 1024}
    # op counts before/after the default pipeline
    ops = {}
    for w in WORKLOADS:
        wa = w.make_args(np.random.default_rng(0))
        try:
            raw = irad.compile(w.loss, *wa, argnums=w.argnums, passes=[])
            opt = irad.compile(w.loss, *wa, argnums=w.argnums)
            ops[w.name] = (len(raw.forward.ops), len(raw.graph.ops), len(opt.graph.ops))
        except Exception as e:  # noqa: BLE001
            ops[w.name] = f"fails: {type(e).__name__}: {e}"
    out["ops"] = ops
    return out


def machine(cs: list[Contender]) -> list[str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    try:
        from threadpoolctl import threadpool_info
        blas = "; ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} thread(s), "
                         f"{i.get('architecture')}, {Path(i.get('filepath', '')).name})"
                         for i in threadpool_info()) or "unknown"
    except ImportError:
        blas = "threadpoolctl not installed (OPENBLAS_NUM_THREADS=1 set)"
    vers = ", ".join(f"{c.label} {c.version}" for c in cs if c.name != "hand")
    return [f"- CPU: {cpu}, {os.cpu_count()} logical core(s) visible, {platform.machine()}, "
            f"{platform.system()} {platform.release()}",
            f"- Python {platform.python_version()}, numpy {np.__version__}",
            f"- thread pools (threadpoolctl): {blas}",
            f"- contenders: {vers}",
            "- single-threaded: OMP/OPENBLAS/MKL_NUM_THREADS=1, torch.set_num_threads(1), "
            "XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"]


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "n/a" if x is None else format(x, spec)


def report(results: list[dict[str, Any]], cs: list[Contender], notices: list[str], tc: dict[str, float],
           extras: dict[str, Any] | None, png: str | None) -> str:
    peers = [c for c in cs if c.name != "hand"]
    L = ["# Benchmarks", "",
         "Generated by `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks --markdown "
         "docs/benchmarks.md` (see `benchmarks/`).  Gradient (value and gradient) of each workload; every "
         "contender is checked against the hand-written numpy gradient before it is timed, then warmed up "
         f"with up to {WARMUP_CALLS:,} calls (at most ~1 s; irad unrolls a hot program's scalar loops at its "
         "1,000th call, `irad.tiers`).  Contenders "
         f"are timed interleaved in one process: in each of {results[0]['rounds'] if results else 0} rounds every contender runs a block of calls "
         "(~40 ms, the median call counts) right after a block of the hand-written gradient, in rotating order; "
         "the ratio is contender / the adjacent hand-written block, median over rounds (> 1: slower than "
         f"hand-written).  Times are {results[0]['clock'][0] if results else ''}; the same run by "
         f"{results[0]['clock'][1] if results else ''} is shown below it.  Process CPU time counts only this "
         "process's threads (all of them), so it is less disturbed by other processes on a shared machine; the "
         "machine was shared (2 cores, other jobs running) while this ran, so expect noise of ±10–20 % in the "
         "wall-clock figures.  First-call latencies are wall-clock.", "",
         "## Machine", "", *machine(cs)]
    L += [f"- skipped: {n}" for n in notices]
    L += ["", "## Workloads", ""]
    for r in results:
        L.append(f"- **{r['name']}**: {r['note']}")
    L += ["", f"## Ratio to hand-written (steady state, {results[0]['clock'][0] if results else ''})", "",
          *_ratio_table(results, peers, "")]
    L += ["", "Targets from the issue, for comparison: " +
          "; ".join(f"{c.label}: {TARGETS[c.name]}" for c in peers if c.name in TARGETS) + "."]
    irad_r = [(r["name"], r["ratio"].get("irad"), r["fails"].get("irad")) for r in results]
    if any(c.name == "irad" for c in peers):
        meets = [f"{n} {x:.2f}x {'meets' if x <= (0.9 if n == 'gp' else 1.0) else 'misses'}"
                 if x is not None else f"{n} {f or 'n/a'}" for n, x, f in irad_r]
        L += ["", "irad against its target (≤ 1.00x of hand-written, GP ≤ 0.90x): " + "; ".join(meets) + "."]
    if png:
        L += ["", f"![ratio to hand-written, log scale]({Path(png).name})"]
    L += ["", f"The same run by {results[0]['clock'][1] if results else ''}:", "", *_ratio_table(results, peers, "_alt")]
    L += ["", "## First call (trace + compile)", "",
          "irad: the first call of `irad.value_and_grad(f)` (trace, differentiate, optimise, lower, run); "
          "*cold* is the first call of this function in the process (the workloads run in the order shown, "
          "so only mlp pays in full for instrumenting numpy's and irad's Python helpers on the way), *warm* a new `value_and_grad` of the same function once those caches are filled (median of 3). "
          "JAX: the first call of the jitted `value_and_grad` (trace + XLA compile). Target (issue 16): MLP ≤ 20 ms warm, ≤ 60 ms cold.", "",
          "| workload | irad cold (ms) | irad warm (ms) | JAX jit (ms) |", "|---|---:|---:|---:|"]
    for r in results:
        L.append(f"| {r['name']} | {_fmt(r['first_ms'].get('irad'))} | {_fmt(r.get('first_warm_ms'))} | "
                 f"{_fmt(r['first_ms'].get('jax'))} |")
    mem_cs = [c for c in cs if c.measures_memory]
    L += ["", "## Peak memory of one gradient call", "",
          "tracemalloc's peak above what was live before the call (KiB); it sees numpy's allocations, so "
          "JAX (XLA buffers) and PyTorch (its own allocator) are n/a.", "",
          "| workload | " + " | ".join(c.label for c in cs) + " |", "|---|" + "---:|" * len(cs)]
    for r in results:
        L.append(f"| {r['name']} | " + " | ".join(_fmt(r["peak_kib"].get(c.name), ".0f") if c in mem_cs else "n/a"
                                                   for c in cs) + " |")
    L += ["", "## irad internals", "",
          f"- tracer: {tc['us_per_op']:.2f} µs per recorded op once the instrumented code is cached; "
          f"{tc['ms_per_function']:.2f} ms to instrument a function the first time (json.decoder's functions, mean)."]
    if extras:
        L.append(f"- staleness check per call (`prog.assumptions.check()`, {extras['n_deps']} deps, "
                 f"MLP): {extras['check_us']:.1f} µs against {extras['call_us']:.1f} µs for one gradient call = "
                 f"{100 * extras['check_share']:.2f} % (target < 5 %)." + (
                     "" if extras["dispatch_share"] is None else
                     "  The whole per-call dispatch of `value_and_grad` (signature key, cache lookup, this check, "
                     "unflattening the results; timed with the generated code replaced by a stub): "
                     f"{extras.get('dispatch_us', 0):.1f} µs = {100 * extras['dispatch_share']:.1f} % of the call."))
        from benchmarks.overhead import BEFORE
        for name, r in extras.get("overhead", {}).items():
            b = BEFORE.get(name)
            L.append(f"- cached call of `{name}` (`python -m benchmarks.overhead`): {r['call_us']:.2f} µs = "
                     f"{r['ratio']:.2f}x the plain Python call; its assumption check {r['check_us']:.2f} µs for "
                     f"{int(r['n_deps'])} deps = {100 * r['check_share']:.1f} % of the call" + (
                         "." if b is None else f" (before `irad.signature`, 65aff21: {b[0]:.2f}x, check "
                         f"{b[1]:.2f} µs for {b[2]} deps)."))
        for name, r in extras.get("entry", {}).items():
            L.append(f"- entry path, {name} (`benchmarks.overhead.entry_parts`): the whole dispatch (a call with "
                     f"its program replaced by a stub) {r['dispatch']:.2f} µs through the fast entry (`irad.entry`; "
                     f"target: 1 µs); {r['generic']:.2f} µs through the generic path, whose parts are: call key "
                     f"{r['key']:.2f} µs, cache lookup {r['lookup']:.2f}, assumption check {r['check']:.2f}, "
                     f"building (value, grad) {r['build']:.2f}.")
        a = extras["aip"]
        L.append(f"- `accumulate_in_place` on the MLP: peak {a['default_kib']:.0f} KiB → {a['aip_kib']:.0f} KiB, "
                 f"time {a['default_us']:.0f} µs → {a['aip_us']:.0f} µs ({a['ratio']:.2f}x).")
        L += ["", "Ops per workload: traced forward graph; joint forward+backward graph with `passes=[]`; "
              "after the default pipeline (`len(prog.graph.ops)`).  The default pipeline inlines the rules' "
              "pullbacks into their primitive ops, so a graph can grow while its Python-call count shrinks.", "",
              "| workload | forward ops | joint, no passes | joint, default pipeline |", "|---|---:|---:|---:|"]
        for name, v in extras["ops"].items():
            L.append(f"| {name} | {v[0]} | {v[1]} | {v[2]} |" if isinstance(v, tuple) else f"| {name} | {v} | | |")
    return "\n".join(L) + "\n"


def _ratio_table(results: list[dict[str, Any]], peers: list[Contender], key: str) -> list[str]:
    L = ["| workload | hand-written (µs) | " + " | ".join(c.label for c in peers) + " |",
         "|---|---:|" + "---:|" * len(peers)]
    for r in results:
        cells = []
        for c in peers:
            if c.name in r["fails"]:
                cells.append(f"fails: {r['fails'][c.name]}")
            elif c.name in r["ratio" + key]:
                cells.append(f"{r['ratio' + key][c.name]:.2f}x ({r['us' + key][c.name]:.0f} µs)")
            else:
                cells.append("n/a")
        L.append(f"| {r['name']} | {_fmt(r['us' + key].get('hand'))} | " + " | ".join(cells) + " |")
    return L


def terminal_table(results: list[dict[str, Any]], cs: list[Contender]) -> str:
    peers = [c for c in cs if c.name != "hand"]
    head = f"{'workload':<12} {'hand µs':>10} " + " ".join(f"{c.name:>20}" for c in peers)
    rows = [head, "-" * len(head)]
    for r in results:
        cells = []
        for c in peers:
            if c.name in r["fails"]:
                cells.append(f"{'FAILS':>20}")
            elif c.name in r["ratio"]:
                cells.append(f"{r['ratio'][c.name]:>8.2f}x {r['us'][c.name]:>9.0f}µs")
            else:
                cells.append(f"{'n/a':>20}")
        rows.append(f"{r['name']:<12} {_fmt(r['us'].get('hand')):>10} " + " ".join(cells))
    return "\n".join(rows)


def chart(results: list[dict[str, Any]], cs: list[Contender], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    peers = [c for c in cs if c.name != "hand"]
    names = [r["name"] for r in results]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(peers))
    for k, c in enumerate(peers):
        xs = [i + (k - (len(peers) - 1) / 2) * width for i in range(len(names))]
        ys = [r["ratio"].get(c.name, np.nan) for r in results]
        bars = ax.bar(xs, ys, width, label=c.label)
        for b, y in zip(bars, ys):
            if np.isfinite(y):
                ax.annotate(f"{y:.2g}", (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(1.0, color="gray", lw=0.6, ls="--", label="1.00 (irad target)")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("time / hand-written numpy (log)")
    clock = results[0]["clock"][0].split(" (")[0] if results else ""
    ax.set_title(f"gradient time relative to hand-written numpy, {clock} (lower is faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def kept_tail(path: Path) -> str:
    """Everything of ``path`` from its first ``<!-- name -->`` block on: the sections that other
    tools write (``benchmarks.tracecost``, ``benchmarks.loops``, ...), tagged or not, kept at the
    end of the report; "" when there are none."""
    old = path.read_text() if path.exists() else ""
    at = old.find("\n<!-- ")
    return "\n" + old[at + 1:].rstrip("\n") + "\n" if at >= 0 else ""


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks")
    ap.add_argument("--quick", action="store_true", help="check that every workload runs and agrees, untimed")
    ap.add_argument("--markdown", default=None, help="write a markdown report to this file")
    ap.add_argument("--png", default=None, help="bar chart of the ratios (default: next to --markdown)")
    ap.add_argument("--contenders", default=None,
                    help="comma-separated subset of irad,autograd,jax,torch (default: all installed)")
    ap.add_argument("--workloads", default=None, help="comma-separated subset of the workloads")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="cpu",
                    help="wall: time.perf_counter; cpu: time.process_time (less sensitive to other processes "
                         "on a shared machine)")
    ns = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if ns.clock == "cpu" else time.perf_counter
    cs, notices = contenders(ns.contenders.split(",") if ns.contenders else None)
    for n in notices:
        print(f"notice: {n}", file=sys.stderr)
    ws = [w for w in WORKLOADS if not ns.workloads or w.name in ns.workloads.split(",")]
    results = [run_workload(w, cs, ns.quick, rounds=ns.rounds) for w in ws]
    fails = [f"{r['name']}: {c}: {m}" for r in results for c, m in r["fails"].items()]
    if ns.quick:
        for f in fails:
            print(f"FAILS {f}")
        print(f"{len(results)} workloads x {len(cs)} contenders ({', '.join(c.name for c in cs)}): "
              f"{len(results) * len(cs) - len(fails)} run and agree with the hand-written gradients")
        if fails:
            raise SystemExit(1)
        return results
    tc = trace_cost()
    extras = irad_extras() if any(c.name == "irad" for c in cs) else None
    print(terminal_table(results, cs))
    for f in fails:
        print(f"FAILS {f}")
    png = ns.png or (str(Path(ns.markdown).with_suffix(".png")) if ns.markdown else None)
    if png:
        chart(results, cs, png)
    text = report(results, cs, notices, tc, extras, png)
    if ns.markdown:
        Path(ns.markdown).write_text(text + kept_tail(Path(ns.markdown)))
        print(f"wrote {ns.markdown}" + (f" and {png}" if png else ""))
    else:
        print(text)
    return results


if __name__ == "__main__":
    main()
