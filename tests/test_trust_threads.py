"""Threads (issue 12, defect 6): concurrent first calls of one transform object are all correct,
and instrumented code running untraced in one thread never records into another thread's trace.

Every result, from the threads and from the single-threaded calls after them (so also what the
program caches hold), is checked value and gradient against central finite differences in
float64.  ``sys.setswitchinterval(1e-5)`` makes the interpreter switch threads often enough for
a race to show, and a barrier starts the first calls together.
"""
from __future__ import annotations

import sys
import threading
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import irad
from irad import hooks
from irad.instrument import GLOBAL_NAMES, instrument_code, instrument_function, is_instrumented
from irad.rules import registry
from irad.testing import numerical_vjp
from irad.trace import trace_values

N_THREADS = 4
ROUNDS = 3  # fresh transform objects per test: each round races the first calls again
RTOL, ATOL = 1e-5, 1e-7


@pytest.fixture(autouse=True)
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def run_together(fns: list[Callable[[], Any]], timeout: float = 120.0) -> list[Any]:
    """Run each ``fn`` in its own thread, all released by one barrier; their results in order
    (an exception is re-raised here, naming the thread)."""
    barrier = threading.Barrier(len(fns))
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException | None] = [None] * len(fns)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 - reported in the main thread
            errors[i] = e

    threads = [threading.Thread(target=worker, args=(i,), name=f"irad-test-{i}") for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), f"{t.name} did not finish in {timeout} s"
    for i, e in enumerate(errors):
        if e is not None:
            raise AssertionError(f"thread {i} raised {type(e).__name__}: {e}") from e
    return results


# ---- the functions: several shapes of the same bug --------------------------------------------

def plain_loss(x: np.ndarray) -> Any:
    h = x
    for k in range(4):
        h = np.tanh(h * (0.5 + 0.1 * k)) + 0.1 * h
    return (h ** 2).sum() + 0.5 * np.sum(x * x)


def _helper(a: np.ndarray, scale: float) -> np.ndarray:
    return np.sin(a) * scale + a * a


def helper_loss(x: np.ndarray) -> Any:
    return _helper(x, 2.0).sum() + _helper(np.cos(x), 0.5).mean()


class Model:
    def __init__(self, n: int) -> None:
        self.scale = np.linspace(0.5, 1.5, n)

    def loss(self, x: np.ndarray) -> Any:
        return np.sum(np.tanh(x * self.scale[: x.shape[0]]) ** 2) + self.penalty(x)

    def penalty(self, x: np.ndarray) -> Any:
        return 0.1 * np.sum(x ** 4)


MODEL = Model(16)


def branch_loss(x: np.ndarray) -> Any:
    if x.sum() > 0:  # a guard: the threads below take both branches at once
        return (x ** 3).sum() + np.exp(x).sum()
    return (np.sin(x) * 3).sum() - (x ** 2).sum()


def scalar_f(x: Any) -> Any:
    return np.sin(x) * x ** 3 + np.exp(0.5 * x)


def scalar_df(x: Any) -> Any:
    return np.cos(x) * x ** 3 + 3 * np.sin(x) * x ** 2 + 0.5 * np.exp(0.5 * x)


_FRESH_SOURCE = """
def fresh_helper(a, k):
    return np.tanh(a * k) + a ** 2 / (1.0 + k)

def fresh_loss(x):
    s = 0.0
    for k in (0.5, 1.0, 1.5):
        s = s + fresh_helper(x, k).sum()
    return s
"""


def fresh_code() -> Callable[..., Any]:
    """A loss and helper with new code objects (never instrumented yet): the threads' first
    calls instrument them at the same time."""
    ns: dict[str, Any] = {"np": np}
    exec(compile(_FRESH_SOURCE, "<fresh loss>", "exec"), ns)  # noqa: S102 - the test's own source
    return ns["fresh_loss"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Case:
    name: str
    #: () -> (what the transform is applied to, the same computed natively for the value and
    #: the finite differences); called once per round
    make_fns: Callable[[], tuple[Callable[..., Any], Callable[..., Any]]]
    make: Callable[[int, bool], Any]  # (thread index, same shape?) -> the argument


def _same(f: Callable[..., Any]) -> Callable[[], tuple[Callable[..., Any], Callable[..., Any]]]:
    return lambda: (f, f)


def _nested() -> tuple[Callable[..., Any], Callable[..., Any]]:
    return irad.grad(scalar_f), scalar_df  # one inner object too: its first calls race as well


def _fresh() -> tuple[Callable[..., Any], Callable[..., Any]]:
    f = fresh_code()
    return f, f


def _array(i: int, same: bool, sign: float = 1.0) -> np.ndarray:
    n = 5 if same else 3 + i
    return sign * np.random.default_rng(i).uniform(0.2, 1.0, n)


CASES = [
    Case("plain", _same(plain_loss), lambda i, same: _array(i, same)),
    Case("helper", _same(helper_loss), lambda i, same: _array(i, same)),
    Case("method", _same(MODEL.loss), lambda i, same: _array(i, same)),
    Case("branch", _same(branch_loss), lambda i, same: _array(i, same, 1.0 if i % 2 else -1.0)),
    # grad(grad(f)) of a scalar f: the value is f', the gradient f''
    Case("nested", _nested, lambda i, same: 0.3 + 0.2 * i if same or i % 2 else np.float64(0.3 + 0.2 * i)),
    Case("fresh_code", _fresh, lambda i, same: _array(i, same)),
]


def check(ref: Callable[..., Any], with_value: bool, x: Any, out: Any, what: str) -> None:
    """``out`` (of the transform at ``x``) against ``ref`` computed natively and its central
    differences."""
    expected_grad = numerical_vjp(ref, (x,), 1.0)[0]
    if with_value:
        assert isinstance(out, tuple) and len(out) == 2, f"{what}: expected (value, grad), got {out!r}"
        value, g = out
        np.testing.assert_allclose(value, ref(x), rtol=1e-12, atol=1e-12, err_msg=f"{what}: value")
    else:
        g = out
    assert np.shape(g) == np.shape(x), f"{what}: gradient shape {np.shape(g)} != {np.shape(x)}"
    np.testing.assert_allclose(g, expected_grad, rtol=RTOL, atol=ATOL, err_msg=f"{what}: gradient")


@pytest.mark.parametrize("with_value", [False, True], ids=["grad", "value_and_grad"])
@pytest.mark.parametrize("same", [True, False], ids=["same_shapes", "different_shapes"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_concurrent_first_calls(case: Case, same: bool, with_value: bool) -> None:
    for rnd in range(ROUNDS):
        fn, ref = case.make_fns()
        tf = (irad.value_and_grad if with_value else irad.grad)(fn)
        xs = [case.make(i, same) for i in range(N_THREADS)]

        def calls(x: Any) -> Callable[[], Any]:
            return lambda: (tf(x), tf(x), tf(x))  # the first call traces; later ones run the cache
        outs = run_together([calls(x) for x in xs])
        for i, (x, results) in enumerate(zip(xs, outs)):
            for k, out in enumerate(results):
                check(ref, with_value, x, out, f"round {rnd}, thread {i}, call {k + 1}")
        # then single-threaded: the programs the threads left in the cache, and new values
        for i, x in enumerate(xs):
            check(ref, with_value, x, tf(x), f"round {rnd}, after the threads, input {i}")
            x2 = x * 0.75 if isinstance(x, np.ndarray) else type(x)(x * 0.75)
            check(ref, with_value, x2, tf(x2), f"round {rnd}, after the threads, new value {i}")
        assert hooks.active_tracer() is None and not hooks.OUTER.get()


# ---- untraced instrumented code in one thread while another traces -----------------------------

_B_ONLY = 3.0  # read only by the code thread B runs natively


def _b_helper(a: np.ndarray) -> np.ndarray:
    return np.sin(a) * _B_ONLY


def b_work(a: np.ndarray) -> np.ndarray:
    r = _helper(a, 2.0) + _b_helper(a)  # the same helper thread A traces, and one of its own
    if r.sum() > 0:
        r = r + 1.0
    return r


def test_untraced_thread_does_not_record_into_a_trace() -> None:
    b_inst = instrument_function(b_work)  # instrumented, run natively: its hooks must see no tracer
    xb = np.linspace(0.1, 1.0, 7)
    expected_b = b_work(xb)
    xa = _array(0, True)
    ref_graph, ref_tracer, _ = trace_values(helper_loss, (xa,), {})
    ref_ops = [op.prim for op in ref_graph.ops]
    stop = threading.Event()

    def thread_a() -> list[Any]:
        found = []
        try:
            for _ in range(20):
                g, tracer, _ = trace_values(helper_loss, (xa,), {})
                found.append(([op.prim for op in g.ops], {d[2] for d in tracer.deps if d[0] == "global"}))
                found.append(irad.value_and_grad(helper_loss)(xa))  # a fresh object: a first call
        finally:
            stop.set()
        return found

    def thread_b() -> int:
        n = 0
        while not stop.is_set():
            r = b_inst(xb)
            assert type(r) is np.ndarray and r.shape == xb.shape, f"thread B got {type(r).__name__}"
            np.testing.assert_array_equal(r, expected_b, err_msg=f"thread B, call {n}")
            assert hooks.active_tracer() is None and not hooks.OUTER.get(), "thread B sees a tracer"
            n += 1
        return n

    found, n_b = run_together([thread_a, thread_b])
    assert n_b > 0
    for k in range(0, len(found), 2):
        prims, globals_read = found[k]
        assert prims == ref_ops, f"trace {k // 2}: thread B's operations were recorded into thread A's trace"
        assert "_B_ONLY" not in globals_read, "thread A's program depends on a global only thread B read"
        check(helper_loss, True, xa, found[k + 1], f"first call {k // 2} while thread B runs")
    assert {d[2] for d in ref_tracer.deps if d[0] == "global"} >= {"_helper"}


# ---- caches filled on first use ---------------------------------------------------------------

def test_rules_of_an_optional_library_are_seen_by_every_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first lookups after an optional library is imported run its pending rule loader: a
    thread arriving while another runs it waits for the rules (never sees none, never fails)."""
    name = "irad_test_optional_library"

    def opaque(x: Any) -> Any:
        return x

    def loader() -> None:
        time.sleep(0.05)  # a slow loader: the other threads arrive while it runs
        registry.defrule(opaque, lambda x: (x, None), lambda s, ybar: (ybar,))

    registry.when_imported(name, loader)
    monkeypatch.setitem(sys.modules, name, types.ModuleType(name))  # the library is imported now
    found = run_together([lambda: registry.lookup(opaque) for _ in range(N_THREADS)])
    assert all(r is not None and r.fwd is not None for r in found), found
    assert len({id(r) for r in found}) == 1


def test_code_instrumented_by_threads_at_once_is_one_twin() -> None:
    """Concurrent first instrumentation of one code object publishes one complete twin: every
    thread gets it, and it is known as instrumented (with its globals) when anyone sees it."""
    for _ in range(5):
        f = fresh_code()
        twins = run_together([lambda: instrument_function(f).__code__ for _ in range(N_THREADS)])
        assert len({id(c) for c in twins}) == 1
        assert is_instrumented(twins[0]) and instrument_code(twins[0]) is twins[0]
        assert "fresh_helper" in GLOBAL_NAMES[id(twins[0])]
