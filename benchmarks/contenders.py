"""The contenders: hand-written numpy, irad, HIPS autograd, JAX (jit) and PyTorch eager.

Each contender turns a workload into ``prepare(args) -> call``: ``call()`` computes the value and
the gradient w.r.t. ``argnums`` once (blocking until done); ``to_numpy(result)`` returns
``(value, grad)`` as numpy/float leaves in the workload's structure, for the agreement check.

autograd and JAX run the *same* workload source: the loss function is re-created with its
globals' ``np`` bound to ``autograd.numpy`` / ``jax.numpy`` (``with_np``).  PyTorch gets a hand
translation per workload (``torch_workloads.py``).  Peers that are not installed are skipped.
"""
from __future__ import annotations

import time
import types
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import irad

from .workloads import Workload


def with_np(f: Callable[..., Any], module: Any) -> Callable[..., Any]:
    """``f`` with the global name ``np`` bound to ``module`` (same code, same closure)."""
    glb = dict(f.__globals__)
    glb["np"] = module
    g = types.FunctionType(f.__code__, glb, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    return g


def to_numpy(x: Any) -> Any:
    """Dicts/lists/tuples of arrays (numpy, jax, torch) or scalars -> the same of numpy/float."""
    if isinstance(x, dict):
        return {k: to_numpy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(to_numpy(v) for v in x)
    if hasattr(x, "detach"):  # torch
        x = x.detach().numpy()
    a = np.asarray(x)
    return float(a) if a.ndim == 0 else a


@dataclass
class Contender:
    name: str
    label: str
    # prepare(workload, args) -> (call, first_call_seconds or None); call() -> result in its own types
    prepare: Callable[[Workload, tuple[Any, ...]], tuple[Callable[[], Any], float | None]]
    version: str
    measures_memory: bool  # tracemalloc sees its allocations (numpy-backed)


def _hand(w: Workload, args: tuple[Any, ...]) -> tuple[Callable[[], Any], float | None]:
    return (lambda: w.hand(*args)), None


def _irad(w: Workload, args: tuple[Any, ...]) -> tuple[Callable[[], Any], float | None]:
    vg = irad.value_and_grad(w.loss, argnums=w.argnums)
    t = time.perf_counter()
    vg(*args)
    first = time.perf_counter() - t
    return (lambda: vg(*args)), first


def _autograd() -> Contender | None:
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        return None

    def prepare(w: Workload, args: tuple[Any, ...]) -> tuple[Callable[[], Any], float | None]:
        vg = autograd.value_and_grad(with_np(w.loss, anp), w.argnums)
        return (lambda: vg(*args)), None

    from importlib.metadata import version
    return Contender("autograd", "HIPS autograd", prepare, version("autograd"), True)


def _jax() -> Contender | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    cpu = jax.devices("cpu")[0]

    def prepare(w: Workload, args: tuple[Any, ...]) -> tuple[Callable[[], Any], float | None]:
        fn = jax.jit(jax.value_and_grad(with_np(w.loss, jnp), w.argnums))
        jargs = jax.device_put(args, cpu)  # numpy arrays -> device arrays once, as a jax user would
        t = time.perf_counter()
        jax.block_until_ready(fn(*jargs))
        first = time.perf_counter() - t
        return (lambda: jax.block_until_ready(fn(*jargs))), first

    return Contender("jax", "JAX jit", prepare, jax.__version__, False)


def _torch() -> Contender | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    from .torch_workloads import TORCH

    def prepare(w: Workload, args: tuple[Any, ...]) -> tuple[Callable[[], Any], float | None]:
        return TORCH[w.name](*args), None

    return Contender("torch", "PyTorch eager", prepare, torch.__version__, False)


def contenders(names: list[str] | None = None) -> tuple[list[Contender], list[str]]:
    """The available contenders (hand-written first) among ``names`` (all if None), and notices
    for the peers that are not installed."""
    want = names or ["hand", "irad", "autograd", "jax", "torch"]
    out: list[Contender] = [Contender("hand", "hand-written", _hand, np.__version__, True)]
    notices = []
    for name in want:
        if name == "hand":
            continue
        if name == "irad":
            from importlib.metadata import version
            out.append(Contender("irad", "irad", _irad, version("irad"), True))
            continue
        make = {"autograd": _autograd, "jax": _jax, "torch": _torch}[name]
        c = make()
        if c is None:
            notices.append(f"{name} is not installed: skipped (pip install -e '.[bench]')")
        else:
            out.append(c)
    return out, notices


def write_section(path: Any, tag: str, section: str) -> None:
    """Put ``section`` (which starts with ``<!-- tag -->`` and ends with ``<!-- /tag -->``) in the
    markdown file at ``path``, in place of the one already there, or at its end."""
    text = path.read_text() if path.exists() else ""
    start, end = text.find(f"<!-- {tag} -->"), text.find(f"<!-- /{tag} -->")
    if 0 <= start < end:
        text = text[:start] + section + text[end + len(f"<!-- /{tag} -->"):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)
