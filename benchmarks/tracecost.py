"""``python -m benchmarks.tracecost [--rounds N] [--against DIR [--markdown FILE]]``: what tracing costs.

For every workload (``workloads.py``): the time of ``irad.trace(f, *args)`` (the tracer alone, with
its boundary checks: world dependencies, read-only arrays and byte compares around rule-less C
calls, callback probes) and of the first call of a new ``irad.value_and_grad(f)`` (trace,
differentiate, optimise, lower, run), best of ``--repeat`` once instrumentation caches are warm.

``--against DIR`` compares with another checkout of irad (a ``git worktree`` of an older commit):
the two run alternately in child processes, ``--rounds`` times each, and the report gives each
one's best per workload and the ratio new/old.  Only ratios in one run mean anything: these
machines are shared.  BLAS is single-threaded.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"  # NOTE: must happen before numpy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from .contenders import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def measure(repeat: int) -> dict[str, dict[str, float]]:
    """Best-of-``repeat`` trace and first-call times (ms) of every workload, in this process."""
    import numpy as np

    import irad
    from benchmarks.workloads import WORKLOADS
    out: dict[str, dict[str, float]] = {}
    for w in WORKLOADS:
        args = w.make_args(np.random.default_rng(0))
        irad.value_and_grad(w.loss, argnums=w.argnums)(*args)  # instrumentation caches warm
        trace, first = [], []
        for _ in range(repeat):
            t = time.perf_counter()
            irad.trace(w.loss, *args)
            trace.append(time.perf_counter() - t)
            vg = irad.value_and_grad(w.loss, argnums=w.argnums)
            t = time.perf_counter()
            vg(*args)
            first.append(time.perf_counter() - t)
        out[w.name] = {"trace_ms": 1e3 * min(trace), "first_ms": 1e3 * min(first)}
    return out


def _staged(checkout: Path, into: Path) -> Path:
    """``checkout``'s irad laid out as installed (``passes/`` is the package ``irad.passes``, see
    pyproject's ``package-dir``), so that a child can import it without the editable install's
    finder, which maps ``irad.passes`` to this checkout's whatever ``irad`` is."""
    dest = into / checkout.name
    shutil.copytree(checkout / "irad", dest / "irad", ignore=shutil.ignore_patterns("__pycache__"))
    if (checkout / "passes").is_dir():
        shutil.copytree(checkout / "passes", dest / "irad" / "passes", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def child(staged: Path, repeat: int) -> dict[str, dict[str, float]]:
    """``measure`` in a fresh process importing irad from ``staged`` (see ``_staged``)."""
    code = ("import importlib, json, sys; "
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__.lower()]; "
            "sys.path.insert(0, sys.argv[1]); import irad; "
            "assert irad.__file__.startswith(sys.argv[1]), irad.__file__; "
            "sys.path.insert(1, sys.argv[3]); "
            "m = importlib.import_module('benchmarks.tracecost'); "  # as a package module: it imports relatively
            "print(json.dumps(m.measure(int(sys.argv[2]))))")
    done = subprocess.run([sys.executable, "-c", code, str(staged), str(repeat), str(ROOT)],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"measuring {staged} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--against", type=Path, default=None, help="another irad checkout (the 'before')")
    ap.add_argument("--markdown", type=Path, default=None,
                    help="write the comparison as the <!-- tracecost --> section of this file (docs/benchmarks.md)")
    ap.add_argument("--label", default="", help="what the older checkout is, for the report")
    opts = ap.parse_args(argv)
    if opts.against is None:
        for name, r in measure(opts.repeat).items():
            print(f"{name:12s} trace {r['trace_ms']:8.2f} ms   first call {r['first_ms']:8.2f} ms")
        return
    best: dict[str, dict[str, dict[str, float]]] = {"old": {}, "new": {}}
    with tempfile.TemporaryDirectory() as tmp:
        old, new = _staged(opts.against, Path(tmp) / "old"), _staged(ROOT, Path(tmp) / "new")
        for _ in range(opts.rounds):  # alternate, so that both see the same load
            for label, where in (("old", old), ("new", new)):
                for name, r in child(where, opts.repeat).items():
                    b = best[label].setdefault(name, dict(r))
                    for k, v in r.items():
                        b[k] = min(b[k], v)
    rows = ["| workload | trace old (ms) | trace new (ms) | new/old | first call old (ms) | first call new (ms) "
            "| new/old |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, new in best["new"].items():
        old = best["old"][name]
        rows.append(f"| {name} | {old['trace_ms']:.2f} | {new['trace_ms']:.2f} | "
                    f"{new['trace_ms'] / old['trace_ms']:.2f} | {old['first_ms']:.1f} | {new['first_ms']:.1f} | "
                    f"{new['first_ms'] / old['first_ms']:.2f} |")
    print("\n".join(rows))
    if opts.markdown is not None:
        section = "\n".join([
            "<!-- tracecost -->", "## What tracing costs, against an older checkout", "",
            f"Written by `python -m benchmarks.tracecost --rounds {opts.rounds} --repeat {opts.repeat} --against "
            f"OLD --markdown docs/benchmarks.md` (OLD: {opts.label or 'an older checkout'}); the two run alternately "
            "in child processes, best of all their calls. *trace*: `irad.trace(f, *args)`, the tracer with "
            "its boundary checks; *first call*: a new `irad.value_and_grad(f)`'s first call (trace, "
            "differentiate, optimise, lower, run). Ratios only: the machine is shared.", "", *rows,
            "<!-- /tracecost -->"])
        write_section(opts.markdown, "tracecost", section)


if __name__ == "__main__":
    main()
