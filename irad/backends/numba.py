"""The compiled tier: a joint graph's elementwise chains fused into numba kernels.

numpy runs an expression such as ``ḡ * (1 / cosh(clip(z)))**2`` one operator at a time: every
step reads its inputs from memory and writes a new array, so a chain of k elementwise ops on an
array that does not fit in cache streams it ~2k times.  Here each maximal chain of elementwise
ops becomes one kernel, a ``numba.vectorize`` ufunc that computes the whole chain per element,
with vectorisable implementations of the transcendental functions (``irad.backends.vecmath``).
Everything else (matmuls, reductions, linalg, rules, loops' bookkeeping) stays numpy, in the same
generated program: the fused graph is lowered by ``irad.lower`` like any other.

A kernel computes one *materialised* value: an elementwise result that a non-elementwise op (a
matmul, a reduction, a rule) or the graph's outputs read, a transcendental one that several ops
read (computed once), or one smaller than a reader (a bias-sized value is not recomputed per
element of its broadcast).  The other elementwise results are never stored: each kernel that needs
one recomputes it from the materialised values and inputs it reads.  A ufunc has one result, and
in a joint graph most forward values are read again by the backward, so recomputing the cheap
ones (arithmetic, comparisons, ``where``) is what lets the chains on both sides of a reuse fuse;
their cost is a few instructions per element in a loop bound by memory.  A kernel is a ufunc, so
numpy's broadcasting, memory order and dtype rules for its inputs hold as they do for the ops it
replaces.  Only float64 and boolean values go through kernels; literals irad can spell
(``lower.literal``) are written into the kernel, other constants are its arguments.

Arithmetic in a kernel is IEEE double arithmetic in the ops' order (numba does not reassociate or
contract without ``fastmath``, which is never set), so a kernel of ``+ - * /``, comparisons,
``where``, ``abs``, ``maximum``/``minimum``/``clip`` gives numpy's bits; a kernel with a
transcendental function agrees with numpy to a few ulp (``tests/test_vecmath.py``).

The kernels of a program are one generated module.  With the disk cache on (``IRAD_CACHE_DIR``,
as for instrumented code) it is written to ``numba-<stamp>/k<hash>.py`` and compiled with numba's
own cache, so a later process loads it in milliseconds; the hash covers the module's text, and the
stamp irad's version, numba's version and ``vecmath``'s source: a change of any is a miss.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import math
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ..instrument import cache_root, hash_sources
from ..ir import ArrayT, Const, Graph, Op, ScalarT, Var
from ..loops import LOOP_PRIM, loop_of
from ..lower import literal

#: prim -> how its result is written in a kernel from its operands' texts
_BINARY = {"operator.add": "+", "numpy.add": "+", "operator.sub": "-", "numpy.subtract": "-",
           "operator.mul": "*", "numpy.multiply": "*", "operator.truediv": "/", "numpy.divide": "/",
           "numpy.true_divide": "/"}
_COMPARE = {"operator.lt": "<", "numpy.less": "<", "operator.le": "<=", "numpy.less_equal": "<=",
            "operator.gt": ">", "numpy.greater": ">", "operator.ge": ">=", "numpy.greater_equal": ">=",
            "operator.eq": "==", "numpy.equal": "==", "operator.ne": "!=", "numpy.not_equal": "!="}
#: functions with a vectorisable implementation in vecmath (numpy's own are scalar libm on many machines)
TRANSCENDENTAL = {"numpy.exp": "exp", "numpy.expm1": "expm1", "numpy.log": "log", "numpy.log1p": "log1p",
                  "numpy.tanh": "tanh", "numpy.cosh": "cosh", "numpy.sinh": "sinh"}
#: other one-argument functions, as numba spells them on a float64 scalar
_UNARY = {"numpy.sqrt": "np.sqrt({})", "numpy.sin": "np.sin({})", "numpy.cos": "np.cos({})",
          "numpy.abs": "abs({})", "numpy.absolute": "abs({})", "builtins.abs": "abs({})",
          "operator.neg": "(-{})", "numpy.negative": "(-{})", "numpy.square": "({0} * {0})",
          "numpy.reciprocal": "(1.0 / {})"}
_FLOAT, _BOOL = "float64", "boolean"


def _numpy_has_simd_transcendentals() -> bool:
    """Does numpy run its float64 exp/log/tanh/... as AVX-512 SIMD code on this machine?  (Then
    they are faster than vecmath's, and a kernel would slow them down.)"""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features  # numpy >= 2
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features  # type: ignore[no-redef]  # numpy 1.x: the fallback import
        except ImportError:
            return False
    return bool(features.get("AVX512_SKX"))


@dataclass
class Config:
    """``fuse_transcendental``: put exp, log, tanh, ... into kernels (vecmath's implementations).
    By default only where numpy's own are scalar libm calls (machines without AVX-512): where numpy
    has SIMD versions they are faster than vecmath's on big arrays (docs/benchmarks.md), so there
    they stay numpy ops and the kernels fuse the arithmetic around them."""

    fuse_transcendental: bool = True
    #: arrays of at most this many elements get their transcendental functions fused even so: on
    #: them a call's overhead (~1 µs) outweighs the per-element speed
    small: int = 2048


#: owned by this module; read when a program's kernels are planned
CONFIG = Config(fuse_transcendental=not _numpy_has_simd_transcendentals())


def _kind(t: Any) -> str | None:
    """The kernel type of a value of IR type ``t`` (float64 or boolean), or None."""
    if isinstance(t, ArrayT):
        return {"float64": _FLOAT, "bool": _BOOL}.get(t.dtype)
    if t == ScalarT("float"):
        return _FLOAT
    return None


def _atom_kind(a: Any) -> str | None:
    """The kernel type of an operand (a Var, or a constant written in or passed), or None."""
    if isinstance(a, Var):
        return _kind(a.type)
    if isinstance(a, Const):
        v = a.value
        if type(v) is bool:
            return _BOOL
        if type(v) in (int, float) or isinstance(v, np.float64):
            return _FLOAT if type(v) is not int or abs(v) <= 2 ** 53 else None
        if isinstance(v, np.ndarray) and v.dtype in (np.float64, np.bool_):
            return _FLOAT if v.dtype == np.float64 else _BOOL
    return None


def _elementwise(op: Op) -> bool:
    """Can ``op`` be computed inside a kernel: an elementwise op of the table on float64 (or, for
    ``where``'s condition, boolean) operands, giving a float64 or boolean array of rank >= 1?"""
    if op.unpack or len(op.outs) != 1 or any(not k.startswith("_") for k, _ in op.kwargs):
        return False
    t = op.outs[0].type
    if not isinstance(t, ArrayT) or t.scalar or not t.shape or t.dtype not in ("float64", "bool"):
        return False
    kinds = [_atom_kind(a) for a in op.args]
    p, n = op.prim, len(op.args)
    if p in _BINARY or p in _COMPARE or p in ("numpy.maximum", "numpy.minimum"):
        return n == 2 and kinds == [_FLOAT, _FLOAT]
    if p in TRANSCENDENTAL:
        return (CONFIG.fuse_transcendental or math.prod(t.shape) <= CONFIG.small) and n == 1 and kinds == [_FLOAT]
    if p in _UNARY:
        return n == 1 and kinds == [_FLOAT]
    if p in ("numpy.clip", "numpy.ndarray.clip"):
        return n == 3 and kinds == [_FLOAT] * 3
    if p == "numpy.where":
        return n == 3 and kinds == [_BOOL, _FLOAT, _FLOAT]
    if p in ("operator.pow", "numpy.power"):
        return n == 2 and kinds[0] == _FLOAT and isinstance(op.args[1], Const) and _atom_kind(op.args[1]) == _FLOAT
    return False


@dataclass(frozen=True)
class Group:
    """One kernel's ops (indices into the graph's ops, in order); ``ops[-1]`` is the root, whose
    result is the kernel's.  An op that is not materialised may be in several groups."""

    ops: tuple[int, ...]

    @property
    def root(self) -> int:
        return self.ops[-1]


#: a group of one op is fused only if it is one of these (elsewhere numpy is as fast)
MIN_OPS = 2
#: the most ops one kernel computes (numba's compile time grows with a kernel's size); a bigger
#: group stays numpy ops
MAX_OPS = 64


def plan(g: Graph) -> list[Group]:
    """The kernels of ``g``'s top level (see the module docstring), each of at least ``MIN_OPS``
    ops or holding a transcendental function."""
    fusable = [_elementwise(op) for op in g.ops]
    producer = {op.outs[0].id: i for i, op in enumerate(g.ops) if fusable[i]}
    readers: dict[int, list[int]] = {}
    for j, op in enumerate(g.ops):
        for v in op.inputs:
            readers.setdefault(v.id, []).append(j)
    outputs = {o.id for o in g.outputs if isinstance(o, Var)}

    def materialised(i: int) -> bool:
        o = g.ops[i].outs[0]
        rs = readers.get(o.id, [])
        if o.id in outputs or not rs or any(not fusable[j] for j in rs):
            return True
        if any(cast(ArrayT, g.ops[j].outs[0].type).shape != cast(ArrayT, o.type).shape for j in rs):  # fused: arrays
            return True
        return g.ops[i].prim in TRANSCENDENTAL and len(rs) > 1

    stored = [fusable[i] and materialised(i) for i in range(len(g.ops))]
    while True:
        groups, too_big = [], []
        for root in range(len(g.ops)):
            if not stored[root]:
                continue
            members, todo = {root}, [root]
            while todo:
                for v in g.ops[todo.pop()].inputs:
                    i = producer.get(v.id)
                    if i is not None and not stored[i] and i not in members:
                        members.add(i)
                        todo.append(i)
            if len(members) > MAX_OPS:
                too_big.append(members)
            elif len(members) >= MIN_OPS or g.ops[root].prim in TRANSCENDENTAL:
                groups.append(Group(tuple(sorted(members))))
        if not too_big:
            return groups
        for members in too_big:  # NOTE: kept as numpy ops, so what they read must be stored too
            for i in members:
                stored[i] = True


def has_kernels(g: Graph) -> bool:
    """Would the compiled tier fuse anything in ``g`` (its top level or a loop's step)?"""
    return bool(plan(g)) or any(op.prim == LOOP_PRIM and has_kernels(loop_of(op).body) for op in g.ops)


# ---- kernel source ------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelSpec:
    """A kernel before compilation: its source (a function ``name(a0, a1, ...)``), its numba
    signature, and the graph operands it takes, in order."""

    name: str
    source: str
    signature: str
    operands: tuple[Any, ...]


def _spell(a: Any) -> str | None:
    """A constant written into a kernel's source (irad's own spelling of a number), or None."""
    v = a.value
    if type(v) is bool:
        return repr(v)
    if isinstance(v, np.float64):
        v = float(v)
    if type(v) is float:
        if math.isnan(v):
            return "np.nan"
        if math.isinf(v):
            return "np.inf" if v > 0 else "(-np.inf)"
    if type(v) in (int, float):
        text = literal(float(v))
        return None if text is None else f"({text})"
    return None


def _expr(op: Op, x: list[str]) -> str:
    p = op.prim
    if p in _BINARY:
        return f"({x[0]} {_BINARY[p]} {x[1]})"
    if p in _COMPARE:
        return f"({x[0]} {_COMPARE[p]} {x[1]})"
    if p in TRANSCENDENTAL:
        return f"vm.{TRANSCENDENTAL[p]}({x[0]})"
    if p in _UNARY:
        return _UNARY[p].format(x[0])
    if p == "numpy.maximum":  # numpy's: nan from either side; of two equal values, the second
        return f"({x[0]} if ({x[0]} > {x[1]} or {x[0]} != {x[0]}) else {x[1]})"
    if p == "numpy.minimum":
        return f"({x[0]} if ({x[0]} < {x[1]} or {x[0]} != {x[0]}) else {x[1]})"
    if p in ("numpy.clip", "numpy.ndarray.clip"):  # numpy's: x unchanged unless strictly outside
        return f"({x[1]} if {x[0]} < {x[1]} else ({x[2]} if {x[0]} > {x[2]} else {x[0]}))"
    if p == "numpy.where":
        return f"({x[1]} if {x[0]} else {x[2]})"
    if p in ("operator.pow", "numpy.power"):
        e = float(op.args[1].value)
        if e == 2.0:
            return f"({x[0]} * {x[0]})"  # numpy's x**2 is a square, exactly
        return f"({x[0]} ** {x[1]})"
    raise AssertionError(p)


def kernel_spec(g: Graph, group: Group, name: str) -> KernelSpec:
    """The source of one group's kernel."""
    inside = {g.ops[i].outs[0].id for i in group.ops}
    params: dict[Any, str] = {}  # operand key -> parameter name
    operands: list[Any] = []
    kinds: list[str] = []
    local: dict[int, str] = {}
    lines = []
    for k, i in enumerate(group.ops):
        op = g.ops[i]
        texts = []
        for a in op.args:
            if isinstance(a, Var) and a.id in inside:
                texts.append(local[a.id])
                continue
            if isinstance(a, Const):
                text = _spell(a)
                if text is not None:
                    texts.append(text)
                    continue
            key = ("v", a.id) if isinstance(a, Var) else ("c", id(a.value))
            if key not in params:
                params[key] = f"a{len(params)}"
                operands.append(a)
                kinds.append(_atom_kind(a) or _FLOAT)
            texts.append(params[key])
        local[op.outs[0].id] = f"v{k}"
        lines.append(f"    v{k} = {_expr(op, texts)}")
    lines.append(f"    return v{len(group.ops) - 1}")
    out = _kind(g.ops[group.root].outs[0].type)
    src = f"def {name}({', '.join(params.values())}):\n" + "\n".join(lines) + "\n"
    return KernelSpec(name, src, f"{out}({', '.join(kinds)})", tuple(operands))


def module_source(specs: list[KernelSpec]) -> str:
    """One module holding every kernel of a program, each a ``vectorize`` ufunc."""
    head = ("# irad compiled tier: generated kernels (irad.backends.numba)\n"
            "import numpy as np\nfrom numba import vectorize\nfrom irad.backends import vecmath as vm\n")
    parts = [head]
    for s in specs:
        parts.append(f"\n\n@vectorize([{s.signature!r}], cache=_CACHE)\n{s.source}")
    return "".join(parts)


# ---- compiling ----------------------------------------------------------------------------

_STAMPS: dict[tuple[str, str], str] = {}  # (numba's version, irad's) -> the stamp: once per process


def _stamp() -> str:
    """What the kernels' disk cache depends on besides their text: numba, irad, Python, vecmath."""
    key = (_numba_version(), _irad_version())
    stamp = _STAMPS.get(key)
    if stamp is None:
        stamp = _STAMPS[key] = _stamp_of(*key)
    return stamp


def _stamp_of(numba_version: str, irad_version: str) -> str:
    h = hashlib.sha256(f"{numba_version}|{irad_version}|{sys.version}".encode())
    hash_sources(h, os.path.dirname(os.path.abspath(__file__)), ("vecmath.py", "numba.py"))
    return h.hexdigest()[:16]


@functools.cache
def _numba_version() -> str:
    return importlib.metadata.version("numba")  # NOTE: from its metadata: importing numba costs ~0.3 s


@functools.cache
def _irad_version() -> str:
    try:
        return importlib.metadata.version("irad")
    except Exception:  # NOTE: run from a source tree without metadata: the sources' hash still counts
        return "0"


#: one compile at a time: numba's compiler holds a process-wide lock anyway
_LOCK = threading.Lock()


def cache_directory() -> str | None:
    root = cache_root()
    return None if root is None else os.path.join(root, f"numba-{_stamp()}")


def cached_path(source: str) -> str | None:
    """Where the module of ``source`` is (or would be) stored on disk, or None without a disk cache."""
    d = cache_directory()
    if d is None:
        return None
    return os.path.join(d, "k" + hashlib.sha256(source.encode()).hexdigest()[:24] + ".py")


def load_module(source: str) -> dict[str, Any]:
    """The namespace of the kernel module ``source``, compiled (from numba's disk cache when it was
    compiled before).  Raises whatever numba raises when a kernel does not compile."""
    with _LOCK:
        path = cached_path(source)
        if path is not None:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if not os.path.exists(path):
                    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                    with open(tmp, "w") as fh:
                        fh.write(source.replace("cache=_CACHE", "cache=True"))
                    os.replace(tmp, path)  # NOTE: atomic: another process never reads half a module
            except OSError:
                path = None
        if path is None:  # no disk cache: compiled in memory (numba cannot cache code without a file)
            ns: dict[str, Any] = {"_CACHE": False}
            exec(compile(source, "<irad kernels>", "exec"), ns)  # noqa: S102 - irad's own text only
            return ns
        name = "irad_kernels_" + os.path.basename(path)[:-3]
        mod = sys.modules.get(name)
        if mod is None:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            # NOTE: importable by name: numba's cache rebuilds a kernel's environment by importing
            # its module; the name is the text's hash, so a module is loaded once per process
            sys.modules[name] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                del sys.modules[name]
                raise
        return vars(mod)


def fuse(g: Graph, ns: dict[str, Any], specs: dict[int, list[KernelSpec]] | None = None) -> Graph:
    """``g`` with each planned group replaced by one call of its compiled kernel (from ``ns``);
    loops' steps are fused too."""
    groups = plan(g)
    by_root = {gr.root: gr for gr in groups}
    dropped = {i for gr in groups for i in gr.ops[:-1]}  # (values no op stores: recomputed in kernels)
    names = iter(specs[id(g)]) if specs is not None else None
    ops = []
    for i, op in enumerate(g.ops):
        if i in dropped:
            continue
        if i in by_root:
            spec = next(names) if names is not None else None
            assert spec is not None
            k = ns[spec.name]
            k = getattr(k, "ufunc", k)  # NOTE: the ufunc under numba's DUFunc: no Python frame per call
            ops.append(Op("irad.backends.numba.kernel", spec.operands, (), op.outs, fn=k, loc=op.loc))
            continue
        if op.prim == LOOP_PRIM:
            loop = loop_of(op)
            body = fuse(loop.body, ns, specs)
            if body is not loop.body:
                new = dataclasses.replace(loop, body=body)
                op = Op(op.prim, op.args, tuple((k, new if k == "_loop" else v) for k, v in op.kwargs),
                        op.outs, op.fn, op.loc, op.unpack)
        ops.append(op)
    if len(ops) == len(g.ops) and all(a is b for a, b in zip(ops, g.ops)):
        return g
    return g.replace(ops=tuple(ops))


def specs_of(g: Graph) -> dict[int, list[KernelSpec]]:
    """Every kernel of ``g`` and its loops' steps: graph id -> its kernels in order of their roots.
    Kernels that compute the same thing (an unrolled loop's steps) share one name, so each is
    compiled once."""
    out: dict[int, list[KernelSpec]] = {}
    names: dict[tuple[str, str], str] = {}  # (body, signature) -> the name of its kernel

    def visit(h: Graph) -> None:
        out[id(h)] = []
        for gr in plan(h):
            spec = kernel_spec(h, gr, "k")
            key = (spec.source, spec.signature)
            name = names.setdefault(key, f"k{len(names)}")
            out[id(h)].append(KernelSpec(name, spec.source.replace("def k(", f"def {name}(", 1), spec.signature,
                                         spec.operands))
        for op in h.ops:
            if op.prim == LOOP_PRIM:
                visit(loop_of(op).body)
    visit(g)
    return out


def _unique(specs: dict[int, list[KernelSpec]]) -> list[KernelSpec]:
    seen: dict[str, KernelSpec] = {}
    for ss in specs.values():
        for s in ss:
            seen.setdefault(s.name, s)
    return list(seen.values())
