"""``irad.dask.value_and_grad``: a loss written for one numpy chunk, over Dask arrays chunked by
rows, on the threads and processes schedulers and a two-worker ``distributed`` cluster.

Every result is compared with numpy on the gathered data (rtol 1e-12): a hand-written gradient
for logistic regression and least squares, ``irad.value_and_grad`` on the numpy arrays for the
rest.  Each returned function is called several times at different parameters.
"""
from __future__ import annotations

import io
import logging
import multiprocessing
import pickle
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import irad

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import irad.dask  # noqa: E402
from irad.errors import GradError, MutationError  # noqa: E402

RTOL = 1e-12
N, D = 1000, 6
SCALE = 1.0  # a global the losses read (rebound by a test)
COLUMN_WEIGHTS = np.ones(D)  # a global array a loss reads (updated in place by a test)


# ---- the data and the numpy references ----------------------------------------------------

def make_data(seed: int = 0, n: int = N) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    y = (rng.random(n) < 0.5).astype(float)
    r = rng.normal(size=n)  # a real-valued target
    return X, y, r


def logreg(w: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float) -> Any:
    """L2-regularised logistic regression: a mean over rows plus a term of w alone."""
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z) + lam * np.sum(w * w)


def logreg_hand(w: np.ndarray, X: np.ndarray, y: np.ndarray, lam: float) -> tuple[float, np.ndarray]:
    z = X @ w
    value = np.mean(np.logaddexp(0.0, z) - y * z) + lam * w @ w
    return value, X.T @ (1.0 / (1.0 + np.exp(-z)) - y) / len(y) + 2.0 * lam * w


def least_squares(w: np.ndarray, X: np.ndarray, r: np.ndarray) -> Any:
    return 0.5 * np.sum((X @ w - r) ** 2)


def least_squares_hand(w: np.ndarray, X: np.ndarray, r: np.ndarray) -> tuple[float, np.ndarray]:
    res = X @ w - r
    return 0.5 * res @ res, X.T @ res


def affine(p: dict[str, Any], X: np.ndarray, r: np.ndarray) -> Any:
    res = X @ p["w"] + p["b"] - r
    return np.mean(res * res)


def affine_hand(p: dict[str, Any], X: np.ndarray, r: np.ndarray) -> tuple[float, dict[str, Any]]:
    res = X @ p["w"] + p["b"] - r
    return np.mean(res * res), {"w": 2.0 * X.T @ res / len(r), "b": 2.0 * np.mean(res)}


def scaled(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
    """Reads the globals SCALE (a float, baked into the program) and COLUMN_WEIGHTS (read live)."""
    z = X @ (w * COLUMN_WEIGHTS)
    return SCALE * np.mean(np.logaddexp(0.0, z) - y * z)


def close(got: Any, want: Any) -> None:
    """Same structure, values within RTOL."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want)
        for k in want:
            close(got[k], want[k])
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for a, b in zip(got, want):
            close(a, b)
    else:
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=0)


# ---- schedulers ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    """Two worker processes kept for the module (dask starts a pool per compute otherwise)."""
    ex = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    yield ex
    ex.shutdown()


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=logging.ERROR)
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()


Run = Callable[..., Any]


@pytest.fixture(params=["threads", "processes", "distributed"])
def run(request: pytest.FixtureRequest) -> Run:
    """``run(vg, *args)``: ``vg(*args)`` on one scheduler."""
    if request.param == "threads":
        return lambda vg, *args: vg(*args, scheduler="threads")
    if request.param == "processes":
        ex = request.getfixturevalue("pool")

        def on_processes(vg: Any, *args: Any) -> Any:
            with dask.config.set(pool=ex):
                return vg(*args, scheduler="processes")
        return on_processes
    c = request.getfixturevalue("client")
    return lambda vg, *args: vg(*args, scheduler=c)


def chunked(*arrays: np.ndarray, rows: int | tuple[int, ...]) -> list[Any]:
    return [da.from_array(a, chunks=(rows,) + a.shape[1:]) for a in arrays]


# ---- exact over the chunks ----------------------------------------------------------------

@pytest.mark.parametrize("rows", [250, 300], ids=["equal", "ragged"])
def test_mean_logistic_regression_is_numpy_on_the_gathered_data(run: Run, rows: int) -> None:
    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=rows)
    vg = irad.dask.value_and_grad(logreg)
    rng = np.random.default_rng(1)
    seen = []
    for lam in (0.1, 0.01, 0.0):  # later calls reuse the programs, at other parameters
        w = rng.normal(size=D)
        got = run(vg, w, Xd, yd, lam)
        close(got, logreg_hand(w, X, y, lam))
        seen.append(got[0])
    assert len(set(seen)) == 3
    assert vg.traces == len(set(Xd.chunks[0]))  # one program per chunk shape, compiled once


def test_sum_least_squares_is_numpy_on_the_gathered_data(run: Run) -> None:
    X, _, r = make_data()
    Xd, rd = chunked(X, r, rows=(100, 250, 250, 400))  # three chunk shapes
    vg = irad.dask.value_and_grad(least_squares, reduce="sum")
    rng = np.random.default_rng(2)
    for _ in range(3):
        w = rng.normal(size=D)
        close(run(vg, w, Xd, rd), least_squares_hand(w, X, r))
    assert vg.traces == 3


def test_dict_parameters_get_a_dict_gradient(run: Run) -> None:
    X, _, r = make_data()
    Xd, rd = chunked(X, r, rows=300)
    vg = irad.dask.value_and_grad(affine)
    rng = np.random.default_rng(3)
    for _ in range(2):
        p = {"w": rng.normal(size=D), "b": rng.normal()}
        close(run(vg, p, Xd, rd), affine_hand(p, X, r))


def test_several_argnums_hyperparameters_and_statics() -> None:
    """A tuple of argnums gives a tuple of gradients; a float hyperparameter is an input of the
    program (no recompile when it changes); a string is static (one program per value)."""
    def loss(w: np.ndarray, b: float, X: np.ndarray, y: np.ndarray, lam: float, penalty: str) -> Any:
        z = X @ w + b
        reg = np.sum(np.abs(w)) if penalty == "l1" else np.sum(w * w)
        return np.mean(np.logaddexp(0.0, z) - y * z) + lam * reg

    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=300)
    vg = irad.dask.value_and_grad(loss, argnums=(0, 1), data=(2, 3))
    ref = irad.value_and_grad(loss, argnums=(0, 1))
    rng = np.random.default_rng(4)
    for lam, penalty in [(0.1, "l2"), (0.3, "l2"), (0.1, "l1")]:
        w, b = rng.normal(size=D), float(rng.normal())
        close(vg(w, b, Xd, yd, lam, penalty, scheduler="threads"), ref(w, b, X, y, lam, penalty))
    assert vg.traces == 4  # two chunk shapes x two penalties


def test_data_layouts_are_aligned_to_the_first_arrays_rows() -> None:
    """y as numpy or chunked unlike X, X chunked along its columns: aligned before mapping."""
    X, y, _ = make_data()
    w = np.random.default_rng(5).normal(size=D)
    want = logreg_hand(w, X, y, 0.1)
    vg = irad.dask.value_and_grad(logreg)
    Xd = da.from_array(X, chunks=(300, 2))
    for yd in (y, da.from_array(y, chunks=170)):
        close(vg(w, Xd, yd, 0.1, scheduler="threads"), want)
    Xd, yd = chunked(X, y, rows=(0, 600, 0, 400))  # (empty chunks are left out)
    close(vg(w, Xd, yd, 0.1, scheduler="threads"), want)


def test_each_block_is_computed_once_per_call() -> None:
    """X and y sliced from one generated array: each generated block feeds both chunks of a
    task once (the graphs are merged, not optimised apart)."""
    made: list[int] = []

    def block(block_info: Any = None) -> np.ndarray:
        k = block_info[None]["chunk-location"][0]
        made.append(k)
        Z = np.random.default_rng(k).normal(size=block_info[None]["chunk-shape"])
        Z[:, -1] = Z[:, -1] > 0
        return Z

    Z = da.map_blocks(block, chunks=((250,) * 4, (D + 1,)), dtype=float)
    X, y = Z[:, :D], Z[:, D]
    vg = irad.dask.value_and_grad(logreg)
    want = logreg_hand(np.ones(D), *dask.compute(X, y, scheduler="sync"), 0.1)
    made.clear()
    for _ in range(2):
        close(vg(np.ones(D), X, y, 0.1, scheduler="threads"), want)
    assert sorted(made) == [0, 0, 0, 1, 1, 2, 2, 3, 3]  # two calls, and block 0 once more to compile on


def test_each_worker_compiles_a_program_once(client: Any) -> None:
    """The workers' caches hold the shipped programs by digest: three calls of two programs (a
    ragged last chunk) add those two at most (another test may have shipped one of them)."""
    def cached() -> dict[str, set[str]]:  # (eval: a function of this module would not unpickle there)
        return {k: set(v) for k, v in client.run(eval, "list(__import__('irad.dask').dask._WORKER_FUNCTIONS)").items()}

    X, _, r = make_data(seed=8)
    Xd, rd = chunked(X, r, rows=300)
    vg = irad.dask.value_and_grad(least_squares, reduce="sum")
    before = cached()
    rng = np.random.default_rng(8)
    for _ in range(3):
        w = rng.normal(size=D)
        close(vg(w, Xd, rd, scheduler=client), least_squares_hand(w, X, r))
    digests = {e.spec.digest for e in vg._programs.values()}
    after = cached()
    assert len(digests) == 2 and digests <= set().union(*after.values())  # (compiled there by now)
    assert set().union(*[v - before.get(k, set()) for k, v in after.items()]) <= digests  # and nothing else


def test_default_scheduler_is_a_client_in_scope(client: Any) -> None:
    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=300)
    w = np.full(D, 0.1)
    with dask.config.set(scheduler=client):
        close(irad.dask.value_and_grad(logreg)(w, Xd, yd, 0.1), logreg_hand(w, X, y, 0.1))


# ---- staleness and guards -----------------------------------------------------------------

@pytest.mark.parametrize("scheduler", ["threads", "processes"])
def test_a_rebound_global_is_seen_on_the_next_call(scheduler: str, pool: ProcessPoolExecutor) -> None:
    global SCALE
    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=300)
    w = np.random.default_rng(6).normal(size=D)
    vg = irad.dask.value_and_grad(scaled)
    ref = irad.value_and_grad(scaled)
    try:
        with dask.config.set(pool=pool if scheduler == "processes" else None):
            close(vg(w, Xd, yd, scheduler=scheduler), ref(w, X, y))
            SCALE = 3.0
            close(vg(w, Xd, yd, scheduler=scheduler), ref(w, X, y))
            assert vg.traces == 4  # stale: both chunk programs compiled again
            COLUMN_WEIGHTS[:] = np.linspace(0.5, 2.0, D)  # read live: no recompile, the workers see it
            close(vg(w, Xd, yd, scheduler=scheduler), ref(w, X, y))
            assert vg.traces == 4
    finally:
        SCALE = 1.0
        COLUMN_WEIGHTS[:] = 1.0


def test_a_branch_on_the_parameters_compiles_again_at_them(run: Run) -> None:
    def loss(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
        z = X @ w
        if np.sum(w) > 0:
            return np.mean(np.logaddexp(0.0, z) - y * z)
        return np.mean((z - y) ** 2)

    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=300)
    vg = irad.dask.value_and_grad(loss)
    ref = irad.value_and_grad(loss)
    for sign in (1.0, -1.0, 1.0):
        w = sign * np.linspace(0.1, 0.6, D)
        close(run(vg, w, Xd, yd), ref(w, X, y))


def test_a_branch_on_the_data_is_refused() -> None:
    """irad.rows refuses it from the trace (the chunk programs would take different branches)."""
    def loss(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
        if X[:, 0].sum() > 0:
            return np.mean((X @ w - y) ** 2)
        return np.mean(np.abs(X @ w - y))

    X, y, _ = make_data()
    X[:500, 0], X[500:, 0] = 1.0, -1.0  # the first chunk takes one branch, the second the other
    Xd, yd = chunked(X, y, rows=500)
    with pytest.raises(irad.errors.RowsError, match="branches on a value computed from the data"):
        irad.dask.value_and_grad(loss)(np.ones(D), Xd, yd, scheduler="threads")


# ---- refusals -----------------------------------------------------------------------------

def sorts_a_column(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
    ranks = np.sort(X @ w)  # each row's term depends on the other rows
    return np.mean(ranks * np.linspace(0.0, 1.0, len(y)))


def standardises(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
    Z = (X - X.mean(0)) / X.std(0)  # statistics of the chunk, not of the data
    return np.mean((Z @ w - y) ** 2)


def median_residual(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
    return np.median(np.abs(X @ w - y))


def summed_with_a_regulariser(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
    return np.sum((X @ w - y) ** 2) + np.sum(w * w)  # under "sum": counted once per chunk


def regulariser_over_n(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
    lam = 0.5
    return np.mean((X @ w - y) ** 2) + lam / (2 * len(X)) * np.sum(w * w)  # lam/(2n): one constant in the trace


@pytest.mark.parametrize("loss, reduce", [(sorts_a_column, "mean"), (standardises, "mean"),
                                          (median_residual, "mean"), (summed_with_a_regulariser, "sum"),
                                          (regulariser_over_n, "mean")],
                         ids=["sort", "standardise", "median", "sum-regulariser", "regulariser-over-n"])
def test_a_loss_that_mixes_rows_is_refused(loss: Callable[..., Any], reduce: str) -> None:
    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=300)
    with pytest.raises(irad.errors.RowsError):
        irad.dask.value_and_grad(loss, reduce=reduce)(np.ones(D), Xd, yd, scheduler="threads")


def test_a_mutating_or_random_loss_is_refused() -> None:
    def mutates(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
        y *= 2.0
        return np.mean((X @ w - y) ** 2)

    rng = np.random.default_rng(7)

    def noisy(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
        return np.mean((X @ w - y + 0.1 * rng.normal(size=len(y))) ** 2)

    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=300)
    with pytest.raises(MutationError, match="updates an argument"):
        irad.dask.value_and_grad(mutates)(np.ones(D), Xd, yd, scheduler="threads")
    with pytest.raises(GradError, match="draws random numbers"):
        irad.dask.value_and_grad(noisy)(np.ones(D), Xd, yd, scheduler="threads")


def test_a_constant_pickle_cannot_send_is_named() -> None:
    @irad.custom_jvp
    def softplus(x: np.ndarray) -> np.ndarray:  # a local function: pickle cannot name it
        return np.logaddexp(0.0, x)

    @softplus.defjvp
    def softplus_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        (x,), (t,) = primals, tangents
        return softplus(x), t / (1.0 + np.exp(-x))

    def loss(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> Any:
        z = X @ w
        return np.mean(np.logaddexp(0.0, z) - y * z) + np.sum(softplus(w))  # (on the parameters only)

    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=300)
    with pytest.raises(irad.dask.ShipError, match=r"softplus.*test_dask\.py:\d+.*pickle cannot send"):
        irad.dask.value_and_grad(loss)(np.ones(D), Xd, yd, scheduler="threads")


def test_argument_errors_are_clear() -> None:
    X, y, _ = make_data()
    Xd, yd = chunked(X, y, rows=300)
    w = np.ones(D)
    with pytest.raises(GradError, match="both differentiated"):
        irad.dask.value_and_grad(logreg, argnums=(0, 1))(w, Xd, yd, 0.1)
    with pytest.raises(GradError, match="no data argument is a Dask array"):
        irad.dask.value_and_grad(logreg)(w, X, y, 0.1)
    with pytest.raises(GradError, match="different numbers of rows"):
        irad.dask.value_and_grad(logreg)(w, Xd, yd[:-1], 0.1)
    keep = Xd[:, 0] > 0
    with pytest.raises(GradError, match="chunk sizes are unknown"):
        irad.dask.value_and_grad(logreg)(w, Xd[keep], yd[keep], 0.1)
    with pytest.raises(GradError, match="reduce='max'"):
        irad.dask.value_and_grad(logreg, reduce="max")


# ---- shipping -----------------------------------------------------------------------------

def test_a_program_travels_as_source_and_constants() -> None:
    """The spec pickles as bytes of plain pickle that name nothing of this module; a chunk-sized
    constant of equal elements (a mean's 1/n) travels as its value; the unpickled spec compiles
    its source and computes what the original program does."""
    X, y, _ = make_data(n=20_000)
    Xd, yd = chunked(X, y, rows=10_000)
    vg = irad.dask.value_and_grad(logreg)
    w = np.full(D, 0.2)
    vg(w, Xd, yd, 0.1, scheduler="threads")
    (prog,) = vg.programs
    spec = irad.dask.build_spec(prog, ((False, 0), (True, 0), (True, 1), (False, 3)), "logreg")
    modules: set[str] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            modules.add(module.partition(".")[0])
            return super().find_class(module, name)

    source, name, consts = Recording(io.BytesIO(spec.payload)).load()
    assert source == prog.source and name == prog.fn.__name__
    assert modules <= {"irad", "numpy", "builtins", "copyreg", "_codecs"}, modules
    assert len(spec.payload) < 4000
    copy = pickle.loads(pickle.dumps(spec))
    assert copy.fn is None and copy.digest == spec.digest
    shared = [w, None, None, 0.1]
    close(tuple(copy.run(shared, (X[:10_000], y[:10_000]))), tuple(prog.fn(w, X[:10_000], y[:10_000], 0.1)))


def test_import_irad_does_not_import_dask() -> None:
    code = "import sys, irad; assert 'dask' not in sys.modules, 'dask imported'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
