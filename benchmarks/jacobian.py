"""``python -m benchmarks.jacobian [--rounds N] [--markdown docs/benchmarks.md]``: Jacobians of
100 -> 100 functions.

Contenders, interleaved in one process with BLAS single-threaded: a hand-written numpy Jacobian
(the reference), ``irad.jacrev`` (one forward program and one batched backward program),
``irad.vjp`` called once per output element (what a Jacobian costs without batching),
``jax.jit(jax.jacrev(f))`` (x64) and HIPS autograd's ``jacobian``.  Every contender is checked
against the hand-written Jacobian before it is timed.  In each round every contender runs a block
of calls (its median counts) right after a block of the hand-written one; the ratio is the median
over rounds of contender / adjacent hand-written block.  Run it with::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.jacobian --markdown docs/benchmarks.md

which writes the ``<!-- jacobian -->`` section of docs/benchmarks.md.  Not a test: nothing here
asserts a time.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"  # NOTE: before numpy (and the peers) are imported
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "1")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Sequence  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402

N = 100
_R = np.random.default_rng(0)
W = _R.normal(size=(N, N)) / np.sqrt(N)
B = _R.normal(size=N)
W1, B1 = _R.normal(size=(64, N)) / np.sqrt(N), _R.normal(size=64)
W2, B2 = _R.normal(size=(N, 64)) / 8.0, _R.normal(size=N)


def tanh_layer(x: np.ndarray) -> np.ndarray:
    return np.tanh(W @ x + B)


def mlp(x: np.ndarray) -> np.ndarray:
    return W2 @ np.tanh(W1 @ x + B1) + B2


def tanh_layer_hand(x: np.ndarray) -> np.ndarray:
    y = np.tanh(W @ x + B)
    return (1.0 - y * y)[:, None] * W


def mlp_hand(x: np.ndarray) -> np.ndarray:
    h = np.tanh(W1 @ x + B1)
    return (W2 * (1.0 - h * h)) @ W1


@dataclass(frozen=True)
class Workload:
    name: str
    note: str
    f: Callable[[np.ndarray], np.ndarray]
    hand: Callable[[np.ndarray], np.ndarray]


WORKLOADS = [
    Workload("tanh_layer", f"`tanh(W @ x + b)`, W {N}x{N}: J = diag(1 - y²) W", tanh_layer, tanh_layer_hand),
    Workload("mlp", f"`W2 @ tanh(W1 @ x + b1) + b2`, {N} -> 64 -> {N}", mlp, mlp_hand),
]


def with_np(f: Callable[..., Any], module: Any) -> Callable[..., Any]:
    """``f`` with its global ``np`` bound to ``module`` (the same source for every peer)."""
    glb = dict(f.__globals__)
    glb["np"] = module
    return types.FunctionType(f.__code__, glb, f.__name__, f.__defaults__, f.__closure__)


def contenders(w: Workload) -> tuple[dict[str, Callable[[np.ndarray], Any]], list[str], dict[str, float]]:
    """name -> Jacobian function, notices about missing peers, first-call latencies (ms)."""
    out: dict[str, Callable[[np.ndarray], Any]] = {"hand": w.hand}
    first: dict[str, float] = {}
    notes: list[str] = []
    x0 = np.linspace(-1.0, 1.0, N)
    jac = irad.jacrev(w.f)
    t = time.perf_counter()
    jac(x0)
    first["irad"] = 1e3 * (time.perf_counter() - t)
    out["irad"] = jac
    eye = np.eye(N)

    def vjp_rows(x: np.ndarray) -> np.ndarray:
        y, pb = irad.vjp(w.f, x)
        return np.stack([pb(eye[k])[0] for k in range(N)])
    out["irad vjp x100"] = vjp_rows
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        jj = jax.jit(jax.jacrev(with_np(w.f, jnp)))
        t = time.perf_counter()
        jj(x0).block_until_ready()
        first["jax"] = 1e3 * (time.perf_counter() - t)
        out["jax"] = lambda x: jj(x).block_until_ready()
    except ImportError:
        notes.append("jax not installed")
    try:
        import autograd
        import autograd.numpy as anp
        out["autograd"] = autograd.jacobian(with_np(w.f, anp))
    except ImportError:
        notes.append("autograd not installed")
    return out, notes, first


def _median_time(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return float(np.median(times))


def run(w: Workload, rounds: int, budget: float = 0.04) -> dict[str, Any]:
    calls, notes, first = contenders(w)
    x = np.linspace(-0.8, 1.2, N)
    want = w.hand(x)
    fails = {}
    for name, fn in list(calls.items()):
        try:
            np.testing.assert_allclose(np.asarray(fn(x)), want, rtol=1e-9, atol=1e-12)
        except Exception as e:  # noqa: BLE001  (reported, not timed)
            fails[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120] if str(e).strip() else ''}"
            del calls[name]
    reps = {n: int(min(500, max(3, budget / max(_median_time(lambda: f(x), 3), 1e-9)))) for n, f in calls.items()}
    times: dict[str, list[float]] = {n: [] for n in calls}
    ratios: dict[str, list[float]] = {n: [] for n in calls if n != "hand"}
    peers = [n for n in calls if n != "hand"]
    for r in range(rounds):
        for n in peers[r % len(peers):] + peers[:r % len(peers)]:
            th = _median_time(lambda: calls["hand"](x), reps["hand"])
            tn = _median_time(lambda: calls[n](x), reps[n])
            times["hand"].append(th)
            times[n].append(tn)
            ratios[n].append(tn / th)
    return {"name": w.name, "note": w.note, "fails": fails, "notes": notes, "first_ms": first,
            "us": {n: 1e6 * float(np.median(t)) for n, t in times.items()},
            "ratio": {n: float(np.median(v)) for n, v in ratios.items()}}


ORDER = ["irad", "irad vjp x100", "jax", "autograd"]


def markdown(results: list[dict[str, Any]], rounds: int) -> str:
    peers = [n for n in ORDER if any(n in r["ratio"] or n in r["fails"] for r in results)]
    rows = ["| workload | hand-written (µs) | " + " | ".join(peers) + " |", "|---|---:|" + "---:|" * len(peers)]
    for r in results:
        cells = [f"fails: {r['fails'][n]}" if n in r["fails"] else
                 f"{r['ratio'][n]:.2f}x ({r['us'][n]:.0f} µs)" if n in r["ratio"] else "n/a" for n in peers]
        rows.append(f"| {r['name']} | {r['us']['hand']:.0f} | " + " | ".join(cells) + " |")
    first = "; ".join(f"{r['name']}: irad {r['first_ms'].get('irad', float('nan')):.0f} ms, JAX jit "
                      f"{r['first_ms'].get('jax', float('nan')):.0f} ms" for r in results)
    notes = sorted({n for r in results for n in r["notes"]})
    versions = [f"numpy {np.__version__}"]
    for mod in ("jax", "autograd"):
        try:
            versions.append(f"{mod} {importlib.metadata.version(mod)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    cpu = next((ln.split(":", 1)[1].strip() for ln in _cpuinfo() if ln.startswith("model name")), "unknown CPU")
    return "\n".join([
        "<!-- jacobian -->", "## Jacobians (100 -> 100)", "",
        "Written by `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.jacobian --markdown "
        f"docs/benchmarks.md` (`benchmarks/jacobian.py`; BLAS single-threaded, process CPU time, {rounds} rounds "
        "interleaved with the hand-written Jacobian in one process, median ratio to it).  `irad.jacrev` runs the "
        "forward program and one backward program batched over the 100 output cotangents (`irad.batching`); "
        "*irad vjp x100* is what the same Jacobian costs as 100 pullback calls; JAX is `jax.jit(jax.jacrev(f))`; "
        "autograd is `autograd.jacobian(f)` (it too calls the pullback once per output element).", "",
        *[f"- **{r['name']}**: {r['note']}" for r in results], "", *rows, "",
        f"First call (trace + compile, wall clock): {first}." + (f"  Skipped: {', '.join(notes)}." if notes else ""),
        "", f"Machine: {cpu}, {os.cpu_count()} logical core(s) visible, {', '.join(versions)}; shared with other jobs "
        "while this ran, so expect ±20 % noise in the times (the ratios, interleaved, move less).",
        "<!-- /jacobian -->"])


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else ""
    start, end = text.find("<!-- jacobian -->"), text.find("<!-- /jacobian -->")
    if 0 <= start < end:
        text = text[:start] + section + text[end + len("<!-- /jacobian -->"):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.jacobian")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--markdown", type=Path, default=None,
                    help="write the results as the <!-- jacobian --> section of this file")
    opts = ap.parse_args(argv)
    results = [run(w, opts.rounds) for w in WORKLOADS]
    text = markdown(results, opts.rounds)
    print(text)
    if opts.markdown is not None:
        write_section(opts.markdown, text)
        print(f"wrote the jacobian section of {opts.markdown}")
    return results


if __name__ == "__main__":
    main()
