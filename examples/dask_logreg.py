"""L2-regularised logistic regression on a Dask array of 10⁷ x 32, fitted with SciPy's L-BFGS-B.

The loss is plain numpy for one chunk of rows; ``irad.dask.value_and_grad`` compiles it once per
chunk shape and sums the chunks' values and gradients.  The data are generated block by block
from a seed (``da.map_blocks``): no process ever holds them whole, and each evaluation generates
them again (as reading them from storage would), unless ``--persist`` keeps the blocks in memory.

    python examples/dask_logreg.py --rows 100000             # a few seconds
    python examples/dask_logreg.py                           # 10⁷ rows
    python examples/dask_logreg.py --scheduler distributed --workers 2 --persist
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import scipy.optimize

import dask
import dask.array as da

import irad.dask


def loss(w: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float) -> Any:
    """Mean logistic loss of one chunk, plus the L2 penalty (a term of w alone)."""
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * lam * (w @ w)


def make_data(rows: int, cols: int, chunk: int, seed: int) -> tuple[Any, Any, np.ndarray]:
    """``(X, y, w_true)``: X standard normal, ``y ~ Bernoulli(sigmoid(X @ w_true))``, each block
    of rows generated from ``(seed, block index)``; y's blocks from X's (computed once for both)."""
    w_true = np.random.default_rng(seed).normal(size=cols) * (3.0 / np.sqrt(cols))

    def features(block_info: Any = None) -> np.ndarray:
        info = block_info[None]
        return np.random.default_rng([seed, info["chunk-location"][0]]).standard_normal(info["chunk-shape"])

    def labels(X: np.ndarray, block_info: Any = None) -> np.ndarray:
        rng = np.random.default_rng([seed, block_info[None]["chunk-location"][0], 1])
        return (rng.random(len(X)) < 1.0 / (1.0 + np.exp(-(X @ w_true)))).astype(np.float64)

    chunks = (chunk,) * (rows // chunk) + ((rows % chunk,) if rows % chunk else ())
    X = da.map_blocks(features, chunks=(chunks, (cols,)), dtype=np.float64)
    y = da.map_blocks(labels, X, drop_axis=1, dtype=np.float64)
    return X, y, w_true


def fit(X: Any, y: Any, lam: float, scheduler: Any) -> scipy.optimize.OptimizeResult:
    vg = irad.dask.value_and_grad(loss, argnums=0, data=(1, 2), reduce="mean")
    last: dict[str, Any] = {}
    start = time.perf_counter()

    def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = vg(w, X, y, lam, scheduler=scheduler)
        last.update(w=w.copy(), value=value, grad=grad, evals=last.get("evals", 0) + 1)
        return float(value), grad

    def progress(intermediate_result: scipy.optimize.OptimizeResult) -> None:  # (SciPy passes it by this name)
        x = intermediate_result.x
        iters = last["iters"] = last.get("iters", 0) + 1
        # L-BFGS-B's iterate is the last point it evaluated (the line search's accepted step)
        g = last["grad"] if np.array_equal(x, last["w"]) else fun(x)[1]
        print(f"{iters:4d}  {intermediate_result.fun:.10f}  {np.linalg.norm(g):9.3e}  {last['evals']:5d}  "
              f"{time.perf_counter() - start:7.2f}", flush=True)

    print("iter  loss          |gradient|  evals  seconds")
    res = scipy.optimize.minimize(fun, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B", callback=progress,
                                  options={"gtol": 1e-6})
    res.seconds = time.perf_counter() - start
    res.compiled = vg.traces
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--cols", type=int, default=32)
    p.add_argument("--chunk", type=int, default=250_000, help="rows per chunk")
    p.add_argument("--lam", type=float, default=1e-4, help="L2 penalty")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scheduler", default="threads", choices=["threads", "processes", "sync", "distributed"])
    p.add_argument("--workers", type=int, default=2, help="processes, distributed: worker processes (one thread each)")
    p.add_argument("--persist", action="store_true", help="keep the generated blocks in memory")
    a = p.parse_args()

    X, y, w_true = make_data(a.rows, a.cols, min(a.chunk, a.rows), a.seed)
    if a.scheduler == "distributed":
        import distributed  # (an optional extra of dask)
    with contextlib.ExitStack() as stack:
        scheduler: Any = a.scheduler
        if a.scheduler == "distributed":
            cluster = stack.enter_context(distributed.LocalCluster(n_workers=a.workers, threads_per_worker=1,
                                                                   dashboard_address=None))
            scheduler = stack.enter_context(distributed.Client(cluster))
        elif a.scheduler == "processes":  # one pool for the fit (else Dask starts one per evaluation)
            pool = stack.enter_context(ProcessPoolExecutor(a.workers, mp_context=multiprocessing.get_context("spawn")))
            stack.enter_context(dask.config.set(pool=pool))
        print(f"{a.rows:,} rows x {a.cols} columns in {X.numblocks[0]} chunks of up to {X.chunks[0][0]:,} rows, "
              f"scheduler {a.scheduler}")
        if a.persist:
            t = time.perf_counter()
            X, y = dask.persist(X, y, scheduler=scheduler)
            if a.scheduler == "distributed":
                distributed.wait([X, y])
            print(f"generated and persisted in {time.perf_counter() - t:.1f} s")
        res = fit(X, y, a.lam, scheduler)
    cos = res.x @ w_true / (np.linalg.norm(res.x) * np.linalg.norm(w_true))
    print(f"{res.message} after {res.nit} iterations, {res.nfev} evaluations, {res.seconds:.1f} s "
          f"({res.seconds / res.nfev:.3f} s and {a.rows * res.nfev / res.seconds:,.0f} rows/s per evaluation); "
          f"{res.compiled} chunk programs compiled")
    print(f"loss {res.fun:.10f}, cosine(w, w_true) = {cos:.6f}")


if __name__ == "__main__":
    main()
