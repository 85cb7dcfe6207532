"""Per-call overhead of a cached compiled program: the call key, the cache lookup, the check of
what the trace read from the world (``irad.signature``), and unpacking the result.

Reported as ratios to the plain Python call of the same function in the same process (these
machines are shared and noisy), for a tiny function and for the scalar loop workload::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m benchmarks.overhead

Run it from two checkouts (before and after a change) to compare; figures go in
docs/benchmarks.md.  Not a test: nothing here asserts a time.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import contextlib  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable, Iterator  # noqa: E402

import numpy as np  # noqa: E402

import irad  # noqa: E402
from benchmarks.workloads import scalar_loop  # noqa: E402

W = np.array([0.5, -1.0, 2.0])

#: the same measurement on 65aff21, before ``irad.signature`` (issue 12), on the machine of
#: docs/benchmarks.md: (cached call / plain Python call, check µs, deps).  The tiny function's
#: program was then also wrong after ``W *= 2``: it returned a gradient folded at compile time.
BEFORE = {"tiny": (1.39, 0.19, 2), "scalar_loop": (2.77, 0.14, 1)}


def tiny(x: np.ndarray) -> Any:
    return np.sum(W * x)


def _median(fn: Callable[[], Any], reps: int, rounds: int = 15) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t) / reps)
    return float(np.median(times))


def measure() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    x = np.array([0.1, 0.2, 0.3])
    xs = [float(v) for v in np.random.default_rng(0).normal(size=100)]
    for name, f, args in (("tiny", tiny, (x,)), ("scalar_loop", scalar_loop, (xs,))):
        vg = irad.value_and_grad(f)
        vg(*args)
        prog = vg.program(*args)
        t_call = _median(lambda: vg(*args), 2000 if name == "tiny" else 200)
        t_plain = _median(lambda: f(*args), 2000 if name == "tiny" else 200)
        check = getattr(prog, "assumptions", None)
        if check is not None:
            t_check = _median(check.check, 5000)
        else:  # before irad.signature: the check was irad.deps.check_deps over the dependency tuples
            from irad.api import check_deps
            t_check = _median(lambda: check_deps(prog.deps), 5000)
        out[name] = {"call_us": 1e6 * t_call, "plain_us": 1e6 * t_plain, "check_us": 1e6 * t_check,
                     "n_deps": float(len(prog.deps)), "ratio": t_call / t_plain, "check_share": t_check / t_call}
    return out


def _one_array(x: np.ndarray) -> Any:
    return np.sum(x * x)


def _floats(xs: list[float]) -> Any:
    t = 0.0
    for v in xs:
        t = t + v * v
    return t


def _dict_of_arrays(p: dict[str, np.ndarray]) -> Any:
    return np.sum(p["w"] * p["b"])


@contextlib.contextmanager
def stubbed(vg: Any, prog: Any, flat: Any) -> Iterator[Callable[..., Any]]:
    """``prog``'s generated code swapped for a stub that returns ``flat``: a call then costs only
    its dispatch.  The program's fast entry (``irad.entry``, which holds the function it was built
    for) is dropped so that the next cached call builds it around the stub, and dropped again after.
    (Relies on the Program's ``fn`` and ``_entry`` attributes being what a call runs.)"""
    def stub(*a: Any) -> Any:
        return flat

    real = prog.fn
    prog.fn, prog._entry, vg.cache.fast = stub, None, None
    try:
        yield stub
    finally:
        prog.fn, prog._entry, vg.cache.fast = real, None, None


#: the common argument shapes of issue 16's entry-path target (<= 1 us for all parts together)
ENTRY_SHAPES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[Any, ...]]]] = {
    "one array (3,)": (_one_array, lambda: (np.ones(3),)),
    "a list of 64 floats": (_floats, lambda: ([0.5 * i for i in range(64)],)),
    "a dict of 2 arrays": (_dict_of_arrays, lambda: ({"w": np.ones(3), "b": np.ones(3)},)),
}


def entry_parts() -> dict[str, dict[str, float]]:
    """What a cached ``value_and_grad`` call spends outside its generated program (us).

    ``dispatch`` is a call with the generated program replaced by a stub (``stubbed``) minus the
    stub's own call, through the program's fast entry (``irad.entry``: the argument tests, the
    assumption check, building ``(value, grad)``); ``generic`` is the same without the entry
    (``call_key``, the lookup, ``_select``, ``unpack``), whose parts are: the call key (flattening
    and keying the arguments), the cache lookup, the assumption check and building
    ``(value, grad)`` from the flat results.  ``call`` and ``program``: the real call and the
    generated program alone."""
    from irad.signature import call_key
    out: dict[str, dict[str, float]] = {}
    for name, (f, make) in ENTRY_SHAPES.items():
        args = make()
        vg = irad.value_and_grad(f)
        vg(*args)
        prog = vg.program(*args)
        deep = frozenset({0})
        key, leaves = call_key(args, {}, deep)
        flat = prog.fn(*leaves)
        cache = vg.cache
        n = 20000

        def generic() -> Any:
            cache.fast = None  # (the generic path sets it again: one attribute store)
            return vg(*args)

        r = {"key": _median(lambda: call_key(args, {}, deep), n), "lookup": _median(lambda: vg.cache.get(key), n),
             "check": _median(prog.assumptions.check, n), "build": _median(lambda: vg._result(prog.unpack(flat)), n),
             "program": _median(lambda: prog.fn(*leaves), n), "call": _median(lambda: vg(*args), n)}
        with stubbed(vg, prog, flat) as stub:
            vg(*args)  # (the entry, built around the stub)
            t_stub = _median(lambda: stub(*leaves), n)
            r["dispatch"] = _median(lambda: vg(*args), n) - t_stub
            r["generic"] = _median(generic, n) - t_stub
        r = {k: 1e6 * v for k, v in r.items()}
        out[name] = r
    return out


def main() -> None:
    for name, r in entry_parts().items():
        print(f"{name}: dispatch {r['dispatch']:.2f} us through the entry (call {r['call']:.2f}, program "
              f"{r['program']:.2f}); without it {r['generic']:.2f} us: key {r['key']:.2f}, lookup {r['lookup']:.2f}, "
              f"check {r['check']:.2f}, build {r['build']:.2f}")
    for name, r in measure().items():
        print(f"{name}: cached call {r['call_us']:.2f} us = {r['ratio']:.2f}x the plain Python call "
              f"({r['plain_us']:.2f} us); assumption check {r['check_us']:.3f} us for {int(r['n_deps'])} deps "
              f"= {100 * r['check_share']:.2f} % of the call")


if __name__ == "__main__":
    main()
