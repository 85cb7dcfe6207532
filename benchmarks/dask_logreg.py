"""``python -m benchmarks.dask_logreg [--rows N] [--chunks 50000,250000,1000000] [--repeat 5]``.

The value and gradient of L2-regularised logistic regression on ``--rows`` x 32 float64 rows
(default 10⁷, 2.56 GB): hand-written numpy and ``irad.value_and_grad`` on the gathered array in
one process, against ``irad.dask.value_and_grad`` on a two-worker ``LocalCluster`` (one thread
each) at several chunk sizes.  BLAS runs single-threaded everywhere, so one worker is one core.

The data are the same rows whatever the chunking (generated in blocks of ``GEN`` rows, each from
its own seed); on the cluster they are generated on the workers and persisted there, so a timed
call reads them from worker memory.  Reported per setup: the median time of ``--repeat`` calls
(after one call that compiles), rows per second, the peak RSS of each process during the timed
calls (psutil, sampled every few milliseconds: the data it holds plus the call's working
memory) and that peak above its RSS before the calls, and the largest relative difference of the
gradient from numpy's.  Printed as a markdown table.  Not a test: nothing here asserts a time.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_v] = "1"  # NOTE: before numpy is imported (the workers inherit it)

import argparse  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402

COLS = 32
GEN = 10_000  # rows per generated block: chunk sizes are multiples of it
LAM = 1e-4
SEED = 0


def loss(w: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float) -> Any:
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * lam * (w @ w)


def hand(w: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float) -> tuple[float, np.ndarray]:
    """The hand-written value and gradient (the reference)."""
    z = X @ w
    value = np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * lam * (w @ w)
    return value, X.T @ (1.0 / (1.0 + np.exp(-z)) - y) / len(y) + lam * w


def w_true() -> np.ndarray:
    return np.random.default_rng(SEED).normal(size=COLS) * (3.0 / np.sqrt(COLS))


def rows_of(lo: int, hi: int, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``lo:hi`` (``lo`` a multiple of GEN, ``hi`` one or ``total``), the same however split."""
    Xs, ys, wt = [], [], w_true()
    for k in range(lo // GEN, -(-hi // GEN)):
        n = min(GEN, total - k * GEN)
        X = np.random.default_rng([SEED, k]).standard_normal((n, COLS))
        u = np.random.default_rng([SEED, k, 1]).random(n)
        Xs.append(X)
        ys.append((u < 1.0 / (1.0 + np.exp(-(X @ wt)))).astype(np.float64))
    return np.concatenate(Xs), np.concatenate(ys)


# ---- peak memory: a thread that samples the process's RSS ---------------------------------

class RssSampler:
    """The largest RSS of this process between ``start()`` and ``stop()`` (every ``period`` s)."""

    def __init__(self, period: float = 0.002) -> None:
        import psutil
        self.proc, self.period = psutil.Process(), period
        self.peak = self.before = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        self.before = self.peak = self.proc.memory_info().rss
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self.before

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.period)

    def stop(self) -> tuple[int, int]:
        """``(peak, before)`` in bytes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)
        return self.peak, self.before


def _start_sampler(dask_worker: Any) -> int:
    dask_worker._irad_rss = RssSampler()
    return dask_worker._irad_rss.start()


def _stop_sampler(dask_worker: Any) -> tuple[int, int]:
    return dask_worker._irad_rss.stop()


# ---- the measurements ---------------------------------------------------------------------

def timed(call: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The median seconds of ``repeat`` calls and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def rel_diff(got: tuple[Any, Any], want: tuple[Any, Any]) -> float:
    return max(abs(got[0] - want[0]) / abs(want[0]), float(np.max(np.abs(got[1] - want[1]) / np.abs(want[1]))))


def one_process(rows: int, repeat: int, w: np.ndarray) -> tuple[list[dict[str, Any]], tuple[Any, Any]]:
    X, y = rows_of(0, rows, rows)
    want = hand(w, X, y, LAM)
    out = []
    vg = irad.value_and_grad(loss)
    t0 = time.perf_counter()
    vg(w, X, y, LAM)
    first = time.perf_counter() - t0
    for name, fn, compile_s in [("numpy (hand-written), 1 process", hand, None),
                                ("irad.value_and_grad, 1 process", vg, first)]:
        sampler = RssSampler()
        sampler.start()
        sec, got = timed(lambda: fn(w, X, y, LAM), repeat)
        peak, before = sampler.stop()
        out.append(dict(setup=name, chunk=rows, chunks=1, sec=sec, first=compile_s, peaks=[peak], befores=[before],
                        diff=rel_diff(got, want)))
    return out, want


def on_cluster(client: Any, rows: int, chunk: int, repeat: int, w: np.ndarray,
               want: tuple[Any, Any]) -> dict[str, Any]:
    import dask
    import dask.array as da
    import distributed

    import irad.dask

    chunks = (chunk,) * (rows // chunk) + ((rows % chunk,) if rows % chunk else ())
    starts = np.cumsum((0,) + chunks[:-1])

    def block(block_info: Any = None) -> np.ndarray:
        i = block_info[None]["chunk-location"][0]
        return rows_of(int(starts[i]), int(starts[i]) + chunks[i], rows)[0]

    def labels(X: np.ndarray, block_info: Any = None) -> np.ndarray:
        i = block_info[None]["chunk-location"][0]
        return rows_of(int(starts[i]), int(starts[i]) + chunks[i], rows)[1]

    X = da.map_blocks(block, chunks=(chunks, (COLS,)), dtype=np.float64)
    y = da.map_blocks(labels, X, drop_axis=1, dtype=np.float64)
    X, y = dask.persist(X, y, scheduler=client)
    distributed.wait([X, y])
    vg = irad.dask.value_and_grad(loss)
    t0 = time.perf_counter()
    vg(w, X, y, LAM, scheduler=client)
    first = time.perf_counter() - t0
    before = client.run(_start_sampler)
    sec, got = timed(lambda: vg(w, X, y, LAM, scheduler=client), repeat)
    stats = client.run(_stop_sampler)
    return dict(setup=f"irad.dask, {len(before)} workers", chunk=chunk, chunks=len(chunks), sec=sec, first=first,
                peaks=[p for p, _ in stats.values()], befores=[b for _, b in stats.values()], diff=rel_diff(got, want))


def table(rows: int, results: list[dict[str, Any]]) -> str:
    mb = 2 ** 20
    lines = ["| setup | rows per chunk | chunks | s per value+grad | rows/s | first call (s) | peak RSS per process (MB) "
             "| above its RSS before (MB) | rel. diff vs numpy |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        first = "" if r["first"] is None else f"{r['first']:.2f}"
        peaks = " / ".join(f"{p / mb:,.0f}" for p in r["peaks"])
        above = " / ".join(f"{(p - b) / mb:,.0f}" for p, b in zip(r["peaks"], r["befores"]))
        lines.append(f"| {r['setup']} | {r['chunk']:,} | {r['chunks']} | {r['sec']:.3f} | {rows / r['sec']:,.0f} "
                     f"| {first} | {peaks} | {above} | {r['diff']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--chunks", default="50000,250000,1000000", help="rows per chunk (multiples of 10,000)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    sizes = [int(c) for c in a.chunks.split(",")]
    if any(c % GEN for c in sizes):
        p.error(f"chunk sizes must be multiples of {GEN:,} (the rows generated together)")
    w = np.random.default_rng(1).normal(size=COLS) * 0.1

    results, want = one_process(a.rows, a.repeat, w)  # (its arrays are freed before the cluster starts)
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        for chunk in sizes:
            if chunk <= a.rows:
                results.append(on_cluster(client, a.rows, chunk, a.repeat, w, want))
                client.restart()  # (fresh workers: each chunk size's peak is its own)
    print(f"logistic regression, {a.rows:,} x {COLS} float64 ({a.rows * COLS * 8 / 1e9:.2f} GB), value and gradient, "
          f"median of {a.repeat} calls; BLAS single-threaded; {os.cpu_count()} cores\n")
    print(table(a.rows, results))


if __name__ == "__main__":
    main()
