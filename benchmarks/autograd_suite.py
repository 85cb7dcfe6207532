"""HIPS autograd's own test suite, run unmodified through irad's public API.

A measurement tool, not a test: it answers "how much of autograd's suite would pass if autograd
were irad", and why the rest fails.  autograd 1.9.1's ``tests/`` (from its sdist) are copied into
a temporary directory beside a *shim* package named ``autograd`` that maps autograd's API onto irad
and plain numpy/SciPy:

- ``autograd.numpy`` *is* ``numpy`` (and ``.random``, ``.linalg``, ``.fft``), ``autograd.scipy.*``
  is ``scipy.*`` (``signal.convolve`` refuses autograd's own ``axes=``/``dot_axes=``): irad traces
  plain numpy, so the functions under test are exactly what a numpy user writes;
- ``grad``, ``value_and_grad``, ``holomorphic_grad`` (irad's ``grad(holomorphic=True)``),
  ``grad_and_aux`` (``grad(has_aux=True)``, where irad has it), ``make_vjp(f, argnum)(*args) ->
  (vjp, ans)``, ``vector_jacobian_product`` and ``core.make_vjp``
  go to ``irad.grad``/``irad.value_and_grad``/``irad.vjp``; ``wrap_util.unary_to_nary`` is
  autograd's plain-Python argument plumbing;
- ``test_util.check_grads(f, argnum, modes, order)(*args)`` is
  ``irad.testing.check_grads(f, *args, argnums=argnum, order=order)`` for reverse mode (irad's
  tolerances) and, for ``"fwd"``, irad's JVP against central differences at order 1;
  ``jacobian``/``hessian``/``hessian_vector_product``/``make_jvp``/``deriv``/``checkpoint`` go to
  irad's; ``combo_check``, ``scalar_close`` and ``check_equivalent`` as in autograd.

A test is *not applicable* (n/a), rather than a failure of irad, when it reaches autograd API that
irad does not have: the shim raises ``NotInIrad`` for differential operators irad lacks
(``jacobian``, ``hessian``, ``elementwise_grad``, ...), ``ForwardModeOnly`` for forward mode
(``deriv``, ``make_jvp``, ``check_grads(modes=["fwd"])``; a check with both modes keeps its reverse
half) and ``AutogradOnly`` for autograd's machinery (``vspace``, ``primitive``/``defvjp``,
``autograd.misc``, names only autograd.numpy has, and its containers ``autograd.tuple``/``list``/
``dict``/``isinstance``/``type``).  These names import, so a test module still collects; using one
raises.  Also n/a: a test that never asks irad for a derivative (*NoIradCall*: it tests
autograd.numpy's wrappers or autograd's function names; the shim counts irad calls per test), and
one that asserts autograd's NotImplementedError where irad computes the gradient
(*AutogradLimitation*).  autograd's containers are plain constructors in most tests (test_linalg.py
does ``from autograd import tuple`` and returns ``tuple((u, s, v))`` from every svd/eig test), so by
default the files where they made tests n/a are run a second time with Python's builtins in their
place, and both figures are reported (``--containers``).

The real autograd (installed with the bench extra) is never imported: the shim directory comes
first on ``PYTHONPATH`` and the pytest plugin refuses to start unless ``autograd.__file__`` is the
shim's.  Each test file runs in its own ``python -m pytest -p no:cacheprovider`` subprocess (in
parallel, with a time limit).  The plugin writes one JSON line per test phase with the exception
chain's classes, so the classification uses exception *classes*, not parsed tracebacks, and a file
that runs out of time keeps its finished tests (the one running is reported as a timeout).  A
failure gets a short class from its exception chain (``FAILURE_CLASSES``: "missing rule: <name>",
"wrong gradient: VJP vs finite differences", "refuses with GradError where the test expects another
exception", ...).

Usage, from the repository root with irad importable (about 2.5 minutes on 2 cores)::

    python -m benchmarks.autograd_suite [--tests DIR] [--files test_numpy.py ...] [--json OUT]
        [--containers autograd-only|builtin|both] [--markdown docs/benchmarks.md]

``--tests`` defaults to the sdist unpacked in ``<tempdir>/irad-autograd-1.9.1``; when that is
missing, the sdist is fetched there with ``pip download --no-binary :all: --no-deps autograd==1.9.1``.  The report: a table per
test file (passed / failed / n/a / skipped, pass rate = passed / runnable, runnable = passed +
failed), the failing tests grouped by class with the first line of each error, and the n/a reasons.
``--markdown`` writes the summary as the ``<!-- autograd_suite -->`` section of a file.  Nothing is
asserted.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

REPO_ROOT = Path(__file__).resolve().parent.parent
AUTOGRAD_VERSION = "1.9.1"
#: where the sdist is unpacked once and reused (the system's temporary directory)
SDIST_CACHE = Path(tempfile.gettempdir()) / f"irad-autograd-{AUTOGRAD_VERSION}"
DEFAULT_TESTS = SDIST_CACHE / f"autograd-{AUTOGRAD_VERSION}" / "tests"

# ---------------------------------------------------------------------------------------- the shim
# File path -> source.  Written to <tmp>/shim/autograd/...; kept as text here so the whole tool
# is one readable file and nothing of it is importable from the repository by accident.

_SHIM_COMMON = '''
"""What the shim's modules share: the not-applicable exceptions and a placeholder for names that
autograd has and irad does not (importing it works, so a test module still collects; using it
raises)."""
from __future__ import annotations

from typing import Any

_calls = 0


def irad_call() -> None:
    """Note that the running test asked irad for a derivative (a gradient, a VJP, a check); the
    plugin calls a test that never does NoIradCall."""
    global _calls
    _calls += 1


def irad_calls() -> int:
    """How many derivatives irad was asked for so far in this process."""
    return _calls


class NotApplicable(Exception):
    """The test uses autograd API that irad does not offer: not a failure of irad."""


class NotInIrad(NotApplicable):
    """A differential operator irad does not have (yet): jacobian, hessian, elementwise_grad, ..."""


class ForwardModeOnly(NotApplicable):
    """Forward mode (deriv, make_jvp, check_grads(modes=["fwd"])): irad is reverse mode only."""


class AutogradOnly(NotApplicable):
    """autograd's own machinery: containers, vspaces, primitive/defvjp, tracer internals."""


class Unavailable:
    """Stands for the autograd name ``name``; calling it, or any attribute or item of it, raises
    ``exc`` (dunder lookups raise AttributeError, so introspection by pytest stays harmless)."""

    def __init__(self, name: str, exc: type[NotApplicable]) -> None:
        self._name, self._exc = name, exc

    def _refuse(self) -> NotApplicable:
        return self._exc(f"autograd.{self._name} has no irad counterpart")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse()

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise self._refuse()

    def __getitem__(self, key: Any) -> Any:
        raise self._refuse()

    def __repr__(self) -> str:
        return f"<autograd.{self._name}: not in irad>"


def module_getattr(module: str, forward: frozenset[str] = frozenset()):
    """A module ``__getattr__``: every other public name of autograd's ``module`` is autograd's
    machinery (``forward`` names are forward mode)."""
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Unavailable(f"{module}.{name}", ForwardModeOnly if name in forward else AutogradOnly)
    return __getattr__
'''

_SHIM_API = '''
"""The differential operators irad has, in autograd's signatures (apart from ``__init__``,
which rebinds ``dict``/``list``/``tuple``/``type``/``isinstance`` as autograd does)."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import irad

from ._common import irad_call

Argnum = int | Sequence[int]


def _nums(argnum: Argnum) -> int | tuple[int, ...]:
    return argnum if type(argnum) is int else tuple(argnum)


def _noting(op: Callable[..., Any]) -> Callable[..., Any]:
    """``op``, noting each call: a test that never calls irad's result tests something else."""
    def call(*args: Any, **kwargs: Any) -> Any:
        irad_call()
        return op(*args, **kwargs)
    return call


def grad(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., Any]:
    return _noting(irad.grad(fun, _nums(argnum)))


def value_and_grad(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., Any]:
    return _noting(irad.value_and_grad(fun, _nums(argnum)))


def holomorphic_grad(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., Any]:
    """autograd's holomorphic_grad is f'(z): irad's grad(holomorphic=True)."""
    return _noting(irad.grad(fun, _nums(argnum), holomorphic=True))


def make_vjp(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., tuple[Callable[[Any], Any], Any]]:
    """``make_vjp(f, argnum)(*args) -> (vjp, ans)``, from irad.vjp (which pulls back to every
    positional argument; keep the selected ones)."""
    nums = _nums(argnum)

    def at(*args: Any, **kwargs: Any) -> tuple[Callable[[Any], Any], Any]:
        irad_call()
        ans, pullback = irad.vjp(fun, *args, **kwargs)

        def vjp(g: Any) -> Any:
            cots = pullback(g)
            return cots[nums] if type(nums) is int else tuple(cots[i] for i in nums)
        return vjp, ans
    return at


def vector_jacobian_product(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., Any]:
    """``vector_jacobian_product(f, argnum)(*args, v)``, as in autograd."""
    def vector_dot_grad(*args: Any, **kwargs: Any) -> Any:
        args, vector = args[:-1], args[-1]
        return make_vjp(fun, argnum)(*args, **kwargs)[0](vector)
    return vector_dot_grad


if hasattr(irad, "elementwise_grad"):  # irad since issue 15's first part
    def elementwise_grad(fun: Callable[..., Any], argnum: int = 0) -> Callable[..., Any]:
        """autograd's ``elementwise_grad(f, argnum)``: irad's, the vjp with a cotangent of ones."""
        return _noting(irad.elementwise_grad(fun, argnum))


if hasattr(irad, "jacobian"):  # irad since issue 15's Jacobians
    def jacobian(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., Any]:
        """autograd's ``jacobian(f, argnum)``: out.shape + in.shape, as irad's (jacrev)."""
        return _noting(irad.jacobian(fun, _nums(argnum)))

    def hessian(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., Any]:
        return _noting(irad.hessian(fun, _nums(argnum)))

    def hessian_vector_product(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., Any]:
        """``hessian_vector_product(f, argnum)(*args, v)``: irad.hvp (forward over reverse)."""
        return _noting(irad.hvp(fun, _nums(argnum)))


if hasattr(irad, "jvp"):  # irad since issue 15's forward mode
    def make_jvp(fun: Callable[..., Any], argnum: int = 0) -> Callable[..., Callable[[Any], tuple[Any, Any]]]:
        """``make_jvp(f, argnum)(*args)(v) -> (ans, J v)``, from irad's forward mode."""
        from irad.forward import jvp_wrt

        def at(*args: Any) -> Callable[[Any], tuple[Any, Any]]:
            def jvp(v: Any) -> tuple[Any, Any]:
                irad_call()
                return jvp_wrt(fun, tuple(args), (argnum,), (v,))
            return jvp
        return at

    def deriv(fun: Callable[..., Any], argnum: int = 0) -> Callable[..., Any]:
        """autograd's ``deriv``: the JVP with a tangent of ones."""
        import numpy as np

        def d(*args: Any) -> Any:
            x = args[argnum]
            ones = type(x)(1) if type(x) in (float, complex) else np.ones_like(x)
            return make_jvp(fun, argnum)(*args)(ones)[1]
        return d


if hasattr(irad, "checkpoint"):
    def checkpoint(fun: Callable[..., Any]) -> Callable[..., Any]:
        return irad.checkpoint(fun)


if "has_aux" in inspect.signature(irad.grad).parameters:  # irad since d98f0a2
    def grad_and_aux(fun: Callable[..., Any], argnum: Argnum = 0) -> Callable[..., Any]:
        """autograd's ``grad_and_aux(f)(*args) -> (grad, aux)``: irad's grad(has_aux=True), same layout."""
        return _noting(irad.grad(fun, _nums(argnum), has_aux=True))
'''

_SHIM_INIT = '''
"""autograd's top-level API, mapped onto irad (a shim written by benchmarks/autograd_suite.py)."""
import sys

import numpy

from . import _api
from ._api import grad, holomorphic_grad, make_vjp, value_and_grad, vector_jacobian_product  # noqa: F401
from ._common import AutogradOnly, ForwardModeOnly, NotApplicable, NotInIrad, Unavailable  # noqa: F401

# autograd.numpy is plain numpy: irad traces numpy itself
sys.modules[__name__ + ".numpy"] = numpy
for _sub in ("random", "linalg", "fft"):
    sys.modules[f"{__name__}.numpy.{_sub}"] = getattr(numpy, _sub)

for _name in ("checkpoint", "elementwise_grad", "grad_and_aux", "grad_named", "hessian",
              "hessian_tensor_product", "hessian_vector_product", "jacobian", "make_ggnvp", "make_hvp",
              "multigrad_dict", "tensor_jacobian_product"):  # unless this irad has it (_api defines it)
    globals()[_name] = getattr(_api, _name, None) or Unavailable(_name, NotInIrad)
for _name in ("deriv", "make_jvp"):
    globals()[_name] = getattr(_api, _name, None) or Unavailable(_name, ForwardModeOnly)
globals()["primitive"] = Unavailable("primitive", AutogradOnly)
# autograd's containers: the builtins themselves (irad traces plain containers), or refused
from .builtins import dict, isinstance, list, tuple, type  # noqa: E402,F401  (last: they shadow builtins)
'''

_SHIM_SCIPY = '''
"""autograd.scipy is scipy: its submodules (and stats' distributions, which autograd makes
modules) are registered under autograd.scipy.* so that ``import autograd.scipy.stats.norm`` works."""
from __future__ import annotations

import sys
from typing import Any

import scipy
import scipy.integrate
import scipy.linalg
import scipy.signal
import scipy.special
import scipy.stats

from .._common import AutogradOnly

for _sub in ("integrate", "linalg", "special", "stats"):
    sys.modules[f"{__name__}.{_sub}"] = getattr(scipy, _sub)
    globals()[_sub] = getattr(scipy, _sub)
for _dist in ("beta", "chi2", "dirichlet", "gamma", "multivariate_normal", "norm", "poisson", "t"):
    sys.modules[f"{__name__}.stats.{_dist}"] = getattr(scipy.stats, _dist)
from . import signal  # noqa: E402


def __getattr__(name: str) -> Any:
    return getattr(scipy, name)
'''

_SHIM_SIGNAL = '''
"""autograd.scipy.signal: scipy.signal, but autograd's convolve also takes ``axes=`` and
``dot_axes=`` (a generalised tensor convolution scipy does not have)."""
from __future__ import annotations

from typing import Any

import scipy.signal

from .._common import AutogradOnly


def convolve(A: Any, B: Any, axes: Any = None, dot_axes: Any = None, mode: str = "full") -> Any:
    if axes is not None or dot_axes is not None:
        raise AutogradOnly("autograd.scipy.signal.convolve(axes=, dot_axes=) is autograd's own function")
    return scipy.signal.convolve(A, B, mode=mode)


def __getattr__(name: str) -> Any:
    return getattr(scipy.signal, name)
'''

_SHIM_TEST_UTIL = '''
"""autograd.test_util on irad.testing.check_grads (reverse mode; irad's finite-difference check)."""
from __future__ import annotations

import functools
from itertools import product
from typing import Any, Callable, Sequence

import numpy as np
import irad.testing

from ._common import ForwardModeOnly, irad_call, module_getattr

TOL = 1e-6
RTOL = 1e-6

__getattr__ = module_getattr("test_util", forward=frozenset({"check_jvp", "make_numerical_jvp"}))


def scalar_close(a: Any, b: Any) -> bool:
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


def check_grads(f: Callable[..., Any], argnum: int | Sequence[int] = 0, modes: Sequence[str] = ("fwd", "rev"),
                order: int = 2) -> Callable[..., None]:
    """autograd's ``check_grads(f, argnum, modes, order)(*args, **kwargs)``: reverse mode to
    ``order`` with irad's checker, forward mode at order 1 (``_check_fwd``); keyword arguments are
    bound to ``f`` first."""
    assert all(m in ("fwd", "rev") for m in modes)

    def check(*args: Any, **kwargs: Any) -> None:
        if "rev" not in modes and not hasattr(irad, "jvp"):
            raise ForwardModeOnly(f"check_grads(modes={list(modes)}) checks forward mode only")
        irad_call()
        fun = f
        if kwargs:
            fun = functools.partial(f, **kwargs)
            fun.__name__ = getattr(f, "__name__", "f")  # type: ignore[attr-defined]
            kwargs = {}
        nums = argnum if type(argnum) is int else tuple(argnum)
        if "rev" in modes:
            irad.testing.check_grads(fun, *args, argnums=nums, order=order)
        if "fwd" in modes and hasattr(irad, "jvp"):
            _check_fwd(fun, args, (nums,) if type(nums) is int else nums)
    return check


def _check_fwd(fun: Callable[..., Any], args: tuple[Any, ...], nums: tuple[int, ...]) -> None:
    """Forward mode at order 1: irad's JVP along a random direction against central differences."""
    from irad.forward import jvp_wrt
    from irad.pytree import flatten, unflatten
    rng = np.random.default_rng(0)

    def rand(x: Any) -> Any:
        if type(x) in (float, int):
            return float(rng.standard_normal())
        if type(x) is complex or np.iscomplexobj(x):
            t = rng.standard_normal(np.shape(x)) + 1j * rng.standard_normal(np.shape(x))
            return complex(t) if type(x) is complex else np.asarray(t, dtype=np.asarray(x).dtype)
        return np.asarray(rng.standard_normal(np.shape(x)), dtype=np.result_type(np.asarray(x).dtype, float))
    tangents = []
    for k in nums:
        leaves, tree = flatten(args[k])
        tangents.append(unflatten(tree, [rand(x) for x in leaves]))
    jvp_wrt(fun, tuple(args), nums, tuple(tangents))
    _, got = jvp_wrt(fun, tuple(args), nums, tuple(tangents))  # (the second call runs the program)
    eps = 1e-6

    def moved(sign: float) -> Any:
        new = list(args)
        for k, t in zip(nums, tangents):
            xl, tree = flatten(args[k])
            new[k] = unflatten(tree, [x + sign * eps * d for x, d in zip(xl, flatten(t)[0])])
        return fun(*new)
    up, down = flatten(moved(1.0))[0], flatten(moved(-1.0))[0]
    for g, a, b in zip(flatten(got)[0], up, down):
        num = (np.asarray(a) - np.asarray(b)) / (2 * eps)
        if not np.iscomplexobj(g):
            num = np.real(num)
        assert np.allclose(g, num, rtol=1e-4, atol=1e-5 * max(1.0, float(np.max(np.abs(num), initial=0.0)))), \
            f"forward mode: jvp {g} differs from finite differences {num}"


def combo_check(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., None]:
    """Every combination of the given positional and keyword values (autograd's helper)."""
    def _combo_check(*arg_lists: Any, **kwarg_lists: Any) -> None:
        kwarg_key_vals = [[(k, x) for x in xs] for k, xs in kwarg_lists.items()]
        for _args in product(*arg_lists):
            for _kwargs in product(*kwarg_key_vals):
                check_grads(fun, *args, **kwargs)(*_args, **dict(_kwargs))
    return _combo_check


def _leaves(x: Any) -> tuple[Any, list[Any]]:
    if isinstance(x, dict):
        keys = sorted(x)
        return ("dict", tuple(keys)), [leaf for k in keys for leaf in _leaves(x[k])[1]]
    if isinstance(x, (tuple, list)):
        parts = [_leaves(v) for v in x]
        return (type(x).__name__, tuple(p[0] for p in parts)), [leaf for p in parts for leaf in p[1]]
    return ("leaf", np.shape(x), bool(np.iscomplexobj(x))), [x]


def check_equivalent(x: Any, y: Any) -> None:
    """Same structure, shapes and real/complex kind, and close values (autograd compares vspaces
    and an inner product with a random vector)."""
    (sx, lx), (sy, ly) = _leaves(x), _leaves(y)
    assert sx == sy, f"VSpace mismatch:\\nx: {sx}\\ny: {sy}"
    for a, b in zip(lx, ly):
        assert np.allclose(a, b, rtol=RTOL, atol=TOL), f"Value mismatch:\\nx: {x}\\ny: {y}"
'''

_SHIM_CORE = '''
"""autograd.core: make_vjp (unary: ``make_vjp(f, x) -> (vjp, ans)``) from irad.vjp; the rest is
autograd's machinery."""
from __future__ import annotations

from typing import Any, Callable

import irad

from ._common import irad_call, module_getattr

__getattr__ = module_getattr("core", forward=frozenset({"make_jvp"}))


def make_vjp(fun: Callable[[Any], Any], x: Any) -> tuple[Callable[[Any], Any], Any]:
    irad_call()
    ans, pullback = irad.vjp(fun, x)
    return (lambda g: pullback(g)[0]), ans
'''

_SHIM_WRAP_UTIL = '''
"""autograd.wrap_util.unary_to_nary: autograd's plain-Python argument plumbing (no tracing)."""
from __future__ import annotations

import functools
from typing import Any, Callable

from ._common import module_getattr

__getattr__ = module_getattr("wrap_util")


def unary_to_nary(unary_operator: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(unary_operator)
    def nary_operator(fun: Callable[..., Any], argnum: Any = 0, *op_args: Any, **op_kwargs: Any) -> Any:
        assert type(argnum) in (int, tuple, list), argnum

        def nary_f(*args: Any, **kwargs: Any) -> Any:
            def unary_f(x: Any) -> Any:
                subargs = list(args)
                if type(argnum) is int:
                    subargs[argnum] = x
                else:
                    for i, v in zip(argnum, x):
                        subargs[i] = v
                return fun(*subargs, **kwargs)
            x = args[argnum] if type(argnum) is int else tuple(args[i] for i in argnum)
            return unary_operator(unary_f, x, *op_args, **op_kwargs)
        return nary_f
    return nary_operator
'''

_SHIM_MACHINERY = '''
"""autograd.{name}: autograd's own machinery; every name is a placeholder that raises AutogradOnly."""
from ._common import module_getattr

__getattr__ = module_getattr("{name}")
'''

_SHIM_BUILTINS = '''
"""autograd.builtins: autograd's containers (``tuple((u, s, v))`` in test_linalg, ``dict``,
``list``, ``isinstance``, ``type``).  With IRAD_SUITE_CONTAINERS=builtin they are Python's own
(what a numpy user writes; irad differentiates through plain containers), otherwise autograd-only."""
import builtins
import os

from ._common import AutogradOnly, Unavailable, module_getattr

__getattr__ = module_getattr("builtins")

for _name in ("dict", "isinstance", "list", "tuple", "type"):
    globals()[_name] = (getattr(builtins, _name) if os.environ.get("IRAD_SUITE_CONTAINERS") == "builtin"
                        else Unavailable(_name, AutogradOnly))
'''

_SHIM_PLUGIN = '''
"""pytest plugin (``-p _irad_shim_plugin``): check that ``autograd`` is the shim, and write one
JSON line per test phase to $IRAD_SUITE_RECORDS with the exception chain's classes."""
from __future__ import annotations

import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

_RECORDS = os.environ["IRAD_SUITE_RECORDS"]


def _write(record: dict[str, Any]) -> None:
    with open(_RECORDS, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\\n")


def pytest_configure(config: Any) -> None:
    import autograd
    shim = Path(os.environ["IRAD_SUITE_SHIM"]).resolve()
    if shim not in Path(autograd.__file__).resolve().parents:
        raise pytest.UsageError(f"autograd is not the shim: {autograd.__file__}")


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _qualname(exc: BaseException) -> str:
    t = type(exc)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _not_applicable(chain: list[BaseException]) -> str | None:
    """Why the failure is no failure of irad, if it is none: the shim refused autograd-only API,
    the test reached a name only autograd.numpy has (``np.make_diagonal``, ``np.linalg._dot``),
    or it asserts one of autograd's limitations (NotImplementedError) that irad does not share."""
    from autograd._common import NotApplicable
    for e in chain:
        if isinstance(e, NotApplicable):
            return f"{type(e).__name__}: {e}"
        if type(e) is AttributeError and re.match(r"module 'numpy[.\\w]*' has no attribute", str(e)):
            return f"AutogradOnly: a name only autograd.numpy has ({e})"
        if type(e).__name__ == "Failed" and re.search(r"DID NOT RAISE.*NotImplementedError", str(e)):
            return f"AutogradLimitation: the test expects autograd's NotImplementedError, irad computes it ({e})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().replace(os.getcwd() + os.sep, "")
    return f"{_qualname(exc)}: {text.splitlines()[0] if text else ''}"


def _irad_frame(exc: BaseException) -> str | None:
    """The innermost frame of irad's own code the exception passed through (irad/..., passes/...)."""
    import irad
    root = Path(irad.__file__).resolve().parent.parent
    where = None
    tb = exc.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename).resolve()
        if root in path.parents and path.relative_to(root).parts[0] in ("irad", "passes"):
            where = f"{path.relative_to(root)}:{tb.tb_lineno} {tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return where


def _record(nodeid: str, when: str, outcome: str, excinfo: Any, longrepr: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"nodeid": nodeid, "when": when, "outcome": outcome}
    if outcome == "skipped":
        rec["message"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr).splitlines()[-1]
    elif excinfo is not None:
        chain = _chain(excinfo.value)
        rec["chain"] = [_qualname(e) for e in chain]
        rec["message"] = _first_line(chain[0])
        rec["messages"] = [_first_line(e) for e in chain]
        rec["not_applicable"] = _not_applicable(chain)
        rec["irad_frame"] = next((w for w in map(_irad_frame, chain) if w), None)
    elif outcome == "failed":
        rec["message"] = str(longrepr).strip().splitlines()[-1] if longrepr else "failed"
    return rec


_calls_at_start = 0


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    global _calls_at_start
    from autograd._common import irad_calls
    _calls_at_start = irad_calls()
    _write({"nodeid": nodeid, "when": "start", "outcome": "started"})


def _expects_exception(item: Any) -> bool:
    """Does the test say ``raises(...)`` (so an irad error may be the right refusal, of a
    different type than autograd's)?"""
    try:
        return "raises(" in inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    rep = outcome.get_result()
    if call.when == "call" or rep.outcome != "passed":
        from autograd._common import irad_calls
        rec = _record(item.nodeid, call.when, rep.outcome, call.excinfo if rep.failed else None, rep.longrepr)
        rec["irad_called"] = irad_calls() > _calls_at_start
        rec["expects_exception"] = _expects_exception(item)
        _write(rec)


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        rec = {"nodeid": report.nodeid, "when": "collect", "outcome": "failed",
               "message": str(report.longrepr).strip().splitlines()[-1]}
        if "NotInIrad" in rec["message"] or "AutogradOnly" in rec["message"] or "ForwardModeOnly" in rec["message"]:
            rec["not_applicable"] = rec["message"]
        _write(rec)
'''


def shim_sources() -> dict[str, str]:
    """Relative path -> source of every file of the shim directory (the package and the plugin)."""
    files = {
        "autograd/_common.py": _SHIM_COMMON,
        "autograd/__init__.py": _SHIM_INIT,
        "autograd/_api.py": _SHIM_API,
        "autograd/scipy/__init__.py": _SHIM_SCIPY,
        "autograd/scipy/signal.py": _SHIM_SIGNAL,
        "autograd/test_util.py": _SHIM_TEST_UTIL,
        "autograd/core.py": _SHIM_CORE,
        "autograd/builtins.py": _SHIM_BUILTINS,
        "autograd/wrap_util.py": _SHIM_WRAP_UTIL,
        "_irad_shim_plugin.py": _SHIM_PLUGIN,
    }
    for name in ("extend", "tracer", "misc", "util"):
        files[f"autograd/{name}.py"] = _SHIM_MACHINERY.replace("{name}", name)
    return {path: src.lstrip() for path, src in files.items()}


def write_shim(root: Path) -> Path:
    """Write the shim under ``root/shim`` and return that directory (it goes first on PYTHONPATH)."""
    shim = root / "shim"
    for rel, src in shim_sources().items():
        path = shim / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(src, encoding="utf-8")
    return shim


# ------------------------------------------------------------------------------------- the tests

def find_tests(given: Path | None) -> Path:
    """autograd's tests directory: ``given``, the default unpacked sdist, or a fresh download."""
    if given is not None:
        if not (given / "conftest.py").exists():
            raise SystemExit(f"{given}: not autograd's tests directory (no conftest.py)")
        return given
    if DEFAULT_TESTS.is_dir():
        return DEFAULT_TESTS
    print(f"{DEFAULT_TESTS} missing: downloading autograd=={AUTOGRAD_VERSION}'s sdist", file=sys.stderr)
    dl = SDIST_CACHE
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                    f"autograd=={AUTOGRAD_VERSION}", "-d", str(dl)], check=True)
    archive = next(dl.glob("autograd-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(dl, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return dl / f"autograd-{AUTOGRAD_VERSION}" / "tests"


@dataclass
class FileRun:
    """The records of one test file's pytest subprocess."""

    file: str
    records: list[dict[str, Any]]
    returncode: int | None  # None: killed at the time limit
    seconds: float


def run_file(tests: Path, shim: Path, file: str, scratch: Path, timeout: float, containers: str) -> FileRun:
    """One test file in its own pytest process (the shim first on the path)."""
    records = scratch / f"{file}.jsonl"
    records.unlink(missing_ok=True)
    env = dict(os.environ)
    path = [str(shim), str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(path)  # the shim first: it shadows the installed autograd
    env.update(IRAD_SUITE_RECORDS=str(records), IRAD_SUITE_SHIM=str(shim), IRAD_SUITE_CONTAINERS=containers,
               PYTHONDONTWRITEBYTECODE="1")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")  # files run in parallel
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "_irad_shim_plugin", "-q",
           "--tb=no", "-o", "addopts=", file]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tests, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        rc = None
    lines = records.read_text(encoding="utf-8").splitlines() if records.exists() else []
    recs = [json.loads(line) for line in lines]
    if rc not in (0, 1, 5, None) and not any(r["when"] == "call" for r in recs):
        recs.append({"nodeid": file, "when": "collect", "outcome": "failed",
                     "message": f"pytest exited {rc}: {out.decode(errors='replace').strip().splitlines()[-1:]}"})
    return FileRun(file, recs, rc, time.perf_counter() - t0)


# ------------------------------------------------------------------------------ classification

@dataclass
class Result:
    """One test's outcome: passed / failed / n/a (not applicable) / skipped."""

    nodeid: str
    status: str
    message: str = ""
    klass: str = ""  # failures: the inferred failure class; n/a: the reason's exception
    chain: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    irad_frame: str | None = None  # failures: the innermost frame of irad's code on the way

    @property
    def file(self) -> str:
        return self.nodeid.split("::")[0]


#: the reason for tests that never asked irad for a derivative: they test numpy (where
#: autograd.numpy's wrappers differ from numpy) or autograd's wrappers' names, not irad
NO_IRAD_CALL = "NoIradCall: the test never calls irad (it tests autograd.numpy or autograd's wrappers)"


def result_of(nodeid: str, recs: list[dict[str, Any]], run: FileRun) -> Result | None:
    """One test's result from its phase records: a failed phase wins; a failure in autograd-only
    API, or any outcome of a test that never called irad, is not applicable; a test left running
    at the time limit failed with a timeout."""
    failed = [r for r in recs if r["outcome"] == "failed"]
    call = [r for r in recs if r["when"] == "call"]
    if failed and failed[0].get("not_applicable"):
        reason = failed[0]["not_applicable"]
        return Result(nodeid, "n/a", reason, reason.split(":")[0])
    if call and not call[0].get("irad_called", True):
        return Result(nodeid, "n/a", NO_IRAD_CALL, NO_IRAD_CALL.split(":")[0])
    if failed:
        r = failed[0]
        res = Result(nodeid, "failed", r.get("message", ""), chain=r.get("chain", []), messages=r.get("messages", []),
                     irad_frame=r.get("irad_frame"))
        if r["when"] == "collect":
            res.klass = "collection error"
        elif r.get("expects_exception") and res.chain and res.chain[0].startswith("irad."):
            res.klass = f"refuses with {res.chain[0].rsplit('.', 1)[-1]} where the test expects another exception"
        else:
            res.klass = failure_class(res)
        return res
    skipped = [r for r in recs if r["outcome"] == "skipped"]
    if skipped:
        return Result(nodeid, "skipped", skipped[0].get("message", ""))
    if any(r["outcome"] == "passed" for r in recs):
        return Result(nodeid, "passed")
    if run.returncode is None:
        return Result(nodeid, "failed", f"still running after the time limit ({run.seconds:.0f} s)", "timeout")
    return None


def results_of(run: FileRun) -> list[Result]:
    """One result per test of a file's run."""
    by_test: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in run.records:
        by_test[rec["nodeid"]].append(rec)
    return [r for nodeid, recs in by_test.items() if (r := result_of(nodeid, recs, run)) is not None]


#: (class, pattern on "ExceptionType: message" of any exception in the chain), first match wins;
#: the class may use the pattern's groups
FAILURE_CLASSES: list[tuple[str, str]] = [
    ("missing rule: {0}", r"NoRuleError: no reverse rule for ([\w.]+)"),
    ("no rule: {0}", r"NoRuleError: irad: (.+?) has no rule"),
    ("NoRuleError: {0}", r"NoRuleError: (.{0,50})"),
    ("GradError: argument without float leaves (an empty dict, ints)", r"GradError: .*is not differentiable"),
    ("GradError: output not one float", r"GradError: .*(?:must return one float|not a number)"),
    ("GradError: complex output/input", r"GradError: .*complex"),
    ("GradError: {0}", r"GradError: (.{0,50})"),
    ("unsupported: {0}", r"UnsupportedError: (.{0,50})"),
    ("in-place update refused", r"MutationError"),
    ("trace error: {0}", r"TraceError: (.{0,50})"),
    ("wrong gradient: VJP vs finite differences", r"AssertionError: check_grads: VJP"),
    ("wrong gradient: compiled gradient vs VJP", r"AssertionError: check_grads: compiled"),
    ("traced value differs from f", r"traced value differs"),
    ("Python float argument is no 0-d array (x.shape)", r"'float' object has no attribute '(?:shape|ndim|size|dtype)'"),
    ("expected exception not raised", r"DID NOT RAISE"),
]


def _normalised(text: str) -> str:
    """``irad.errors.NoRuleError: msg`` -> ``NoRuleError: msg`` (the patterns name bare classes)."""
    kind, sep, rest = text.partition(": ")
    return f"{kind.rsplit('.', 1)[-1]}{sep}{rest}"


def failure_class(res: Result) -> str:
    """A short class for a failure, from its exception chain (outermost first)."""
    texts = [_normalised(t) for t in (res.messages or [res.message])]
    for klass, pattern in FAILURE_CLASSES:
        for text in texts:
            m = re.search(pattern, text)
            if m:
                return klass.format(*m.groups())
    # anything else: the exception and where in irad it came from (a rule's pullback, the tracer)
    where = f" in {res.irad_frame.split()[-1]} ({res.irad_frame.split(':')[0]})" if res.irad_frame else ""
    return f"{texts[0][:60]}{where}"


# -------------------------------------------------------------------------------------- report

#: an n/a reason that only autograd's containers caused (``from autograd import tuple`` in
#: test_linalg wraps every svd/eig output in one): such files are re-run with Python's builtins
CONTAINER_REASON = re.compile(r"autograd\.(?:builtins\.)?(?:tuple|list|dict|isinstance|type) has no irad")


def counts(results: list[Result], file: str | None = None) -> tuple[Counter[str], str, str]:
    """Status counts of ``file``'s results (all of them for None), "passed/runnable" and the rate."""
    c = Counter(r.status for r in results if file is None or r.file == file)
    runnable = c["passed"] + c["failed"]
    return c, f"{c['passed']}/{runnable}", f"{100 * c['passed'] / runnable:.1f}%" if runnable else "-"


def table(results: list[Result], alt: list[Result] | None = None) -> str:
    """Per file and overall (markdown): passed / failed / n/a / skipped, passed / runnable, and
    with ``alt`` the same figure when autograd's containers are Python's builtins."""
    head = ["file", "passed", "failed", "n/a", "skipped", "passed/runnable", "%"]
    if alt is not None:
        head += ["containers builtin: passed/runnable", "%"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name in sorted({r.file for r in results}) + [None]:
        c, frac, rate = counts(results, name)
        cells = [name or "**overall**", *(str(c[k]) for k in ("passed", "failed", "n/a", "skipped")), frac, rate]
        if alt is not None:
            cells += counts(alt, name)[1:]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def by_class(results: Iterable[Result], status: str) -> list[tuple[str, list[Result]]]:
    """The tests of ``status`` grouped by class, largest group first."""
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        if r.status == status:
            groups[r.klass].append(r)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [(k, sorted(v, key=lambda r: r.nodeid)) for k, v in ordered]


def listing(results: Iterable[Result], status: str, width: int = 160) -> str:
    """Each class with its tests and their first error line."""
    out = []
    for klass, rs in by_class(results, status):
        out.append(f"\n{klass} ({len(rs)})")
        for r in rs:
            line = f"  {r.nodeid}: {r.message}"
            out.append(line if len(line) <= width else line[: width - 3] + "...")
    return "\n".join(out)


def only_in(alt: list[Result], results: list[Result], status: str) -> list[Result]:
    """The results of ``alt`` with ``status`` that ``results`` does not have with it."""
    have = {r.nodeid for r in results if r.status == status}
    return [r for r in alt if r.status == status and r.nodeid not in have]


def irad_revision() -> str:
    """The checkout measured: short commit, and whether irad's sources have uncommitted changes."""
    def git(*cmd: str) -> str:
        r = subprocess.run(["git", *cmd], cwd=REPO_ROOT, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    head = git("rev-parse", "--short", "HEAD") or "unknown commit"
    return head + (" + uncommitted changes" if git("status", "--porcelain", "--", "irad", "passes") else "")


MARKDOWN_INTRO = (
    "A shim package named `autograd` maps autograd's API onto irad: `autograd.numpy` is numpy, "
    "`autograd.scipy` is SciPy, `grad`/`value_and_grad`/`holomorphic_grad`/`grad_and_aux`/`make_vjp` are "
    "`irad.grad`/`irad.value_and_grad`/`irad.vjp` (`holomorphic=True`, `has_aux=True`), "
    "`check_grads(f, argnum, modes, order)` is `irad.testing.check_grads(f, ..., argnums, order)` in "
    "reverse mode and irad's `jvp` against central differences in forward mode (order 1); `jacobian`, "
    "`hessian`, `hessian_vector_product`, `make_jvp`, `deriv` are irad's.  *n/a*: the test needs API irad "
    "does not have (NotInIrad: `make_hvp`, `tensor_jacobian_product`...; AutogradOnly: containers, vspaces, "
    "`primitive`/`defvjp`, "
    "names only autograd.numpy has), never asks irad for a derivative (NoIradCall), or asserts a "
    "NotImplementedError of autograd's that irad does not share (AutogradLimitation).  Pass rate = "
    "passed / runnable, runnable = passed + failed.  (`python -m benchmarks --markdown` keeps this "
    "section.)")


def markdown(results: list[Result], alt: list[Result] | None, command: str) -> str:
    """The docs/benchmarks.md section, between ``<!-- autograd_suite -->`` markers."""
    c, frac, rate = counts(results)
    skips = "".join(f" ({k})" for k in sorted({r.message for r in results if r.status == "skipped"}))
    overall = (f"**Overall: {frac} runnable tests pass ({rate})**; {c['n/a']} not applicable, "
               f"{c['skipped']} skipped{skips}.")
    failed = by_class(results, "failed")
    if alt is not None:
        overall += (f"  With autograd's containers as Python's builtins (`autograd.tuple((u, s, v))` wraps every "
                    f"svd/eig output of test_linalg.py): {counts(alt)[1]} ({counts(alt)[2]}).")
        extra = by_class(only_in(alt, results, "failed"), "failed")
        failed += [(f"{k} (containers builtin only)", v) for k, v in extra]
    lines = ["<!-- autograd_suite -->", "## HIPS autograd's own test suite through irad", "",
             f"Written by `{command}` (`benchmarks/autograd_suite.py`; irad at {irad_revision()}, autograd "
             f"{AUTOGRAD_VERSION}'s `tests/` from its sdist, run unmodified).  " + MARKDOWN_INTRO, "",
             overall, "", table(results, alt), "", "Failures by class (count: tests):", ""]
    for klass, rs in failed:
        names = ", ".join(f"`{r.nodeid.split('::')[-1]}`" for r in rs[:4]) + (", ..." if len(rs) > 4 else "")
        lines.append(f"- {klass} ({len(rs)}): {names}")
    reasons = Counter(r.klass for r in results if r.status == "n/a").most_common()
    lines += ["", "Not applicable: " + ", ".join(f"{k} {v}" for k, v in reasons) + ".", "<!-- /autograd_suite -->"]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, section: str) -> None:
    """Replace the ``<!-- autograd_suite -->`` section of ``path``, or append it at the end."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    start, end = old.find("<!-- autograd_suite -->"), old.find("<!-- /autograd_suite -->")
    if 0 <= start < end:
        new = old[:start] + section + old[end + len("<!-- /autograd_suite -->\n"):]
    else:
        new = old + ("\n" if old and not old.endswith("\n\n") else "") + section
    path.write_text(new, encoding="utf-8")


def run_suite(tests: Path, shim: Path, files: list[str], scratch: Path, containers: str, jobs: int,
              timeout: float) -> tuple[list[Result], list[FileRun]]:
    """Every file in its own process, ``jobs`` at a time."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        runs = list(pool.map(lambda f: run_file(tests, shim, f, scratch, timeout, containers), files))
    return [r for run in runs for r in results_of(run)], runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=Path, help=f"autograd's tests directory (default {DEFAULT_TESTS})")
    ap.add_argument("--files", nargs="*", help="only these test files (default: every test_*.py)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="test files run at once")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per test file")
    ap.add_argument("--containers", choices=("autograd-only", "builtin", "both"), default="both",
                    help="autograd.tuple/list/dict/isinstance/type: not applicable, Python's builtins, or "
                         "not applicable with the files they touch re-run as builtins (default)")
    ap.add_argument("--json", type=Path, help="also write every result here")
    ap.add_argument("--markdown", type=Path, help="write the summary as the <!-- autograd_suite --> section of FILE")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="irad-autograd-suite-"))
    try:
        source = find_tests(args.tests)
        tests = scratch / "tests"
        shutil.copytree(source, tests, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shim = write_shim(scratch)
        files = args.files or sorted(p.name for p in tests.glob("test_*.py"))
        t0 = time.perf_counter()
        mode = "builtin" if args.containers == "builtin" else "autograd-only"
        results, runs = run_suite(tests, shim, files, scratch, mode, args.jobs, args.timeout)
        alt = None
        if args.containers == "both":
            again = sorted({r.file for r in results if r.status == "n/a" and CONTAINER_REASON.search(r.message)})
            rerun, _ = run_suite(tests, shim, again, scratch, "builtin", args.jobs, args.timeout)
            alt = [r for r in results if r.file not in again] + rerun
        elapsed = time.perf_counter() - t0

        print(f"HIPS autograd {AUTOGRAD_VERSION}'s tests through irad at {irad_revision()} ({source}), "
              f"{len(files)} files, containers {mode}, {elapsed:.0f} s\n")
        print(table(results, alt))
        for run in runs:
            if run.returncode is None:
                print(f"\n{run.file}: stopped at the time limit ({args.timeout:.0f} s)")
        print("\nFailures by class:" + listing(results, "failed"))
        if alt is not None:
            print("\nFailures only with containers builtin:" + (listing(only_in(alt, results, "failed"), "failed")
                                                                 or " none"))
        print("\nNot applicable by reason:" + "".join(
            f"\n  {k}: {v}" for k, v in Counter(r.klass for r in results if r.status == "n/a").most_common()))
        if args.json:
            data = {"results": [r.__dict__ for r in results], "containers_builtin": alt and [r.__dict__ for r in alt]}
            args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        if args.markdown:
            command = "python -m benchmarks.autograd_suite" + (f" --containers {args.containers}"
                                                               if args.containers != "both" else "")
            write_markdown(args.markdown, markdown(results, alt, command + f" --markdown {args.markdown}"))
            print(f"\nwrote the autograd_suite section of {args.markdown}")
    finally:
        if args.keep:
            print(f"\nkept {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
