"""Memory: caches hold nothing alive that the user released (issue 12, defect 7).

- a training loop that builds a new loss per batch holds O(1) batches (closure, instrumented
  helper closure, method of a per-batch object), with correct gradients on every call;
- cached calls of a compiled gradient allocate nothing that stays;
- linecache entries of generated programs go with their program;
- code objects of released functions are freed, and a new code object at a reused id never
  gets a dead one's cached data (source locations, instrumented twin).
"""
from __future__ import annotations

import gc
import linecache
import tracemalloc
import weakref
from typing import Any, Callable

import numpy as np
import pytest

import irad
from irad import instrument

N_BATCHES = 1000
SHAPE = (128, 256)  # 256 KiB of float64 per batch


def _closure(batch: np.ndarray) -> tuple[Callable[..., Any], Any]:
    def loss(w):
        return np.sum((batch @ w) ** 2)
    return loss, None


def _helper(batch: np.ndarray) -> tuple[Callable[..., Any], Any]:
    def predict(w):  # an instrumented sub-function closing over the batch
        return batch @ w

    def loss(w):
        return np.sum(predict(w) ** 2)
    return loss, None


class _Model:
    def __init__(self, batch: np.ndarray) -> None:
        self.batch = batch

    def predict(self, w):
        return self.batch @ w

    def loss(self, w):
        return np.sum(self.predict(w) ** 2)


def _method(batch: np.ndarray) -> tuple[Callable[..., Any], Any]:
    model = _Model(batch)
    return model.loss, model


@pytest.mark.parametrize("make_loss", [_closure, _helper, _method], ids=["closure", "helper", "method"])
def test_training_loop_holds_O1_batches(make_loss: Callable[[np.ndarray], tuple[Callable[..., Any], Any]]) -> None:
    """``irad.grad(make_loss(batch))(w)`` per batch, 1,000 batches: at most a couple stay alive."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(SHAPE[1])
    w2 = rng.standard_normal(SHAPE[1])
    refs: list[weakref.ref[np.ndarray]] = []
    alive_at: dict[int, int] = {}
    for i in range(N_BATCHES):
        batch = rng.standard_normal(SHAPE)
        refs.append(weakref.ref(batch))
        loss, owner = make_loss(batch)
        g = irad.grad(loss)
        if i % 100 == 0:  # the first call traces; the second and later run the cached program
            for x in (w, w2, w):
                np.testing.assert_allclose(g(x), 2 * batch.T @ (batch @ x), rtol=1e-10)
        else:
            g(w)
        del batch, loss, owner, g
        if i in (N_BATCHES // 2, N_BATCHES - 1):
            gc.collect()
            alive_at[i] = sum(r() is not None for r in refs)
    assert max(alive_at.values()) <= 2, f"batches still alive: {alive_at}"


def test_vjp_of_a_per_batch_closure_holds_O1_batches() -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal(SHAPE[1])
    refs = []
    for _ in range(200):
        batch = rng.standard_normal(SHAPE)
        refs.append(weakref.ref(batch))
        loss, _ = _closure(batch)
        for x in (w, w + 1.0):  # the tracing call, then the cached program
            y, pb = irad.vjp(loss, x)
            np.testing.assert_allclose(pb(1.0)[0], 2 * batch.T @ (batch @ x), rtol=1e-10)
        del batch, loss, y, pb
    gc.collect()
    assert sum(r() is not None for r in refs) <= 2


# ---- cached calls ---------------------------------------------------------------------------

def _mlp(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


def _scalar_loop(x, n):
    s = 0.0
    for i in range(n):
        s = s + np.sin(x * i)
    return s


class _Affine:
    def __init__(self) -> None:
        self.b = np.linspace(0.0, 1.0, 8)

    def loss(self, w):
        return np.sum((w + self.b) ** 2)


def _branch(x):
    return np.sum(x ** 2) if x[0] > 0 else np.sum(x * 3.0)


def _params(p, scale=1.0):
    return np.sum(p["a"] * p["b"]) * scale


_CACHED_CASES: list[tuple[str, Callable[..., Any], list[tuple[Any, ...]], Callable[..., Any]]] = [
    ("mlp", _mlp, [(np.full((4, 3), 0.1), np.ones((5, 4)))],
     lambda w, x: x.T @ (2 * np.tanh(x @ w) * (1 - np.tanh(x @ w) ** 2))),
    ("scalar_loop", _scalar_loop, [(0.3, 5)], lambda x, n: sum(i * np.cos(x * i) for i in range(n))),
    ("method", _Affine().loss, [(np.zeros(8),)], lambda w: 2 * (w + np.linspace(0.0, 1.0, 8))),
    # two cached paths, the guard of one failing on every other call
    ("branch", _branch, [(np.ones(3),), (-np.ones(3),)], lambda x: 2 * x if x[0] > 0 else np.full(3, 3.0)),
    ("dict", _params, [({"a": np.ones(3), "b": np.arange(3.0)}, 2.0)],
     lambda p, scale: {"a": p["b"] * scale, "b": p["a"] * scale}),
]


@pytest.mark.parametrize("name,f,argsets,exact", _CACHED_CASES, ids=[c[0] for c in _CACHED_CASES])
def test_cached_calls_grow_memory_by_nothing(name: str, f: Callable[..., Any], argsets: list[tuple[Any, ...]],
                                             exact: Callable[..., Any]) -> None:
    """10,000 calls of a compiled gradient: no allocation outlives its call."""
    g = irad.grad(f)

    def check() -> None:
        for args in argsets:
            got, want = g(*args), exact(*args)
            for k in (want if isinstance(want, dict) else [None]):
                np.testing.assert_allclose(got if k is None else got[k], want if k is None else want[k], rtol=1e-10)
    for _ in range(3):
        check()
    calls = 10_000 // len(argsets)
    tracemalloc.start()
    try:
        for _ in range(100):
            for args in argsets:
                g(*args)
        gc.collect()
        before = tracemalloc.take_snapshot()
        for _ in range(calls):
            for args in argsets:
                g(*args)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    flt = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = after.filter_traces(flt).compare_to(before.filter_traces(flt), "lineno")
    grown = sum(d.size_diff for d in diff)
    assert grown < 4096, f"{name}: {grown} bytes kept by 10,000 calls:\n" + \
        "\n".join(str(d) for d in diff[:5])
    check()


# ---- linecache ------------------------------------------------------------------------------

def _generated_files() -> set[str]:
    return {k for k in linecache.cache if k.startswith("<irad") or k.startswith("<onnx")}


def test_linecache_entries_go_with_their_program() -> None:
    gc.collect()
    start = _generated_files()
    for k in range(50):
        def f(x, k=k):
            return np.sum(np.sin(x) * k)
        g = irad.grad(f)
        np.testing.assert_allclose(g(np.ones(3)), k * np.cos(np.ones(3)))
        prog = g.program(np.ones(3))
        filename = prog.fn.__code__.co_filename
        assert linecache.getline(filename, 1).startswith("def "), "a live program's source is in linecache"
        del f, g, prog
    gc.collect()
    assert _generated_files() - start == set()


def test_linecache_entries_stay_while_the_program_lives() -> None:
    progs = [irad.compile(lambda x, k=k: np.sum(x * k), np.ones(2)) for k in range(5)]
    gc.collect()
    names = [p.fn.__code__.co_filename for p in progs]
    assert len(set(names)) == len(names), "each program has its own file name"
    for p, name in zip(progs, names):
        assert "".join(linecache.getlines(name)) == p.source


def test_linecache_entries_of_loaded_onnx_models_go_with_the_function() -> None:
    pytest.importorskip("onnx")
    from irad.onnx import export, load_function

    def f(x):
        return np.tanh(x) * 2.0

    model = export(f, np.ones(3), gradient=False)
    gc.collect()
    start = _generated_files()
    for _ in range(20):
        fn = load_function(model)
        np.testing.assert_allclose(fn(np.ones(3)), f(np.ones(3)))
        assert linecache.getlines(fn.__code__.co_filename)
        del fn
    gc.collect()
    assert _generated_files() - start == set()


# ---- code objects and reused ids ------------------------------------------------------------

def _fresh(src: str, filename: str, name: str = "f") -> Callable[..., Any]:
    ns: dict[str, Any] = {"np": np}
    exec(compile(src, filename, "exec"), ns)
    return ns[name]  # type: ignore[no-any-return]


def test_code_objects_of_released_functions_are_freed() -> None:
    gc.collect()
    n_instrumented = len(instrument.INSTRUMENTED)
    codes = []
    for k in range(100):
        src = f"def f(x):\n    h = lambda y: y * {k + 1}.0\n    return np.sum(h(np.sin(x)))\n"
        f = _fresh(src, f"<memtest {k}>")
        codes.append(weakref.ref(f.__code__))
        np.testing.assert_allclose(irad.grad(f)(np.ones(2)), (k + 1) * np.cos(np.ones(2)))
        del f
    gc.collect()
    assert sum(r() is not None for r in codes) == 0, "code objects of released functions are freed"
    assert len(instrument.INSTRUMENTED) - n_instrumented < 10


def test_a_reused_code_id_never_gets_a_dead_codes_locations() -> None:
    """Source locations of ops are those of the code that ran, even at an id a dead one had."""
    for k in range(200):
        f = _fresh("def f(x):\n    return np.sum(np.sin(x))\n", f"<memtest-loc {k}>")
        g = irad.trace(f, np.ones(2))
        files = {op.loc.file for op in g.ops if op.loc is not None}
        assert files == {f"<memtest-loc {k}>"}, (k, files)
        del f, g


def test_a_reused_code_id_never_gets_a_dead_codes_twin() -> None:
    """Each new function runs its own code, not the instrumented twin of a dead one."""
    for k in range(200):
        f = _fresh(f"def f(x):\n    return np.sum(x * {k}.0)\n", f"<memtest-twin {k % 3}>")
        np.testing.assert_allclose(irad.grad(f)(np.ones(2)), np.full(2, float(k)))
        del f
