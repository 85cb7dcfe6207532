"""``irad.dask``: the value and gradient of a loss over Dask arrays, one compiled program per chunk.

``value_and_grad(loss, argnums=0, data=(1, 2), reduce="mean")(w, X, y)``: ``loss`` is plain numpy
written for one chunk of rows; ``X`` and ``y`` are ``dask.array``s chunked along their leading
axis.  irad traces and compiles ``loss`` once per chunk shape (a ragged last chunk is a second
program), refuses a loss that is not a sum (or a mean) of per-row terms (``irad.rows``), runs one
Dask task per chunk and tree-reduces the values and gradients: weighted by each chunk's row count
for ``"mean"``, so the result is the loss of the whole data up to summation order.

Programs travel to workers as their generated source and the constants of their namespace,
pickled with plain ``pickle`` (``ChunkSpec``); each worker process compiles a program once
(``_worker_function``).  Nothing of the user's code is pickled: a worker needs irad and numpy,
not the module that defines the loss.
"""
from __future__ import annotations

import hashlib
import importlib
import pickle
import re
import threading
import types
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, cast

import numpy as np

import dask
import dask.array as da

from . import api
from .errors import GradError, GuardError, MutationError, ShipError, def_site
from .rows import check_rows, probe_rows
from .signature import call_key
from .trace import trace_values
from .weakcache import compile_source

# dask ships partial types (these functions are untyped): typed aliases of the ones called here
_dask_delayed: Callable[..., Any] = dask.delayed  # type: ignore[attr-defined]  # dask: not re-exported
_dask_compute: Callable[..., Any] = dask.base.compute  # (dask.compute)
_dask_from_array: Callable[..., Any] = da.from_array

__all__ = ["ChunkSpec", "DaskValueAndGrad", "ShipError", "value_and_grad"]

REDUCTIONS = ("mean", "sum")
#: compiled programs kept per worker process (a recompiled loss adds one; the oldest go first)
WORKER_CACHE_SIZE = 64
#: chunk programs kept per DaskValueAndGrad (argument signatures x chunk shapes)
MAX_PROGRAMS = 64
#: chunk results summed by one task of the reduction tree
FAN_IN = 8
#: an array constant of at least this many equal elements travels as its value and shape
_FULL_MIN_SIZE = 64


# ---- shipping: a program as its source and constants ----------------------------------------

@dataclass(frozen=True)
class _Module:
    """A module of a program's namespace (``np``), imported again on the worker."""

    name: str


@dataclass(frozen=True)
class _Full:
    """An array constant whose elements are all equal (``1/n`` of a mean's pullback), rebuilt on
    the worker: a chunk-sized constant would otherwise travel with every program."""

    shape: tuple[int, ...]
    dtype: np.dtype
    value: Any
    fortran: bool
    writeable: bool


def _pack(value: Any, live: set[int]) -> Any:
    if isinstance(value, types.ModuleType):
        return _Module(value.__name__)
    if type(value) is np.ndarray and id(value) not in live and value.size >= _FULL_MIN_SIZE \
            and value.dtype.kind in "biufc":
        first = value.flat[0]
        if first == first and not np.any(value != first):  # (NaN: shipped as it is)
            return _Full(value.shape, value.dtype, first, value.flags.f_contiguous and not value.flags.c_contiguous,
                         value.flags.writeable)
    return value


def _unpack(value: Any) -> Any:
    if isinstance(value, _Module):
        return importlib.import_module(value.name)
    if isinstance(value, _Full):
        out = np.full(value.shape, value.value, value.dtype, order="F" if value.fortran else "C")
        out.flags.writeable = value.writeable
        return out
    return value


def _used_at(source: str, name: str) -> str:
    """The loss's ``file:line`` of the first generated line that uses constant ``name``."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    for line in source.splitlines():
        code, _, comment = line.partition("  # ")
        if word.search(code):
            return comment.strip()
    return ""


@dataclass(eq=False)
class ChunkSpec:
    """One compiled chunk program, as it travels to workers: ``payload`` is plain ``pickle`` of
    ``(source, name, constants)``, made (so checked) when the spec is built.

    ``plan``: where each argument of the compiled function comes from, ``(True, j)`` the ``j``-th
    data chunk, ``(False, i)`` leaf ``i`` of the call's other arguments.  ``fn`` is the program as
    compiled in this process; a spec unpickled elsewhere compiles its source once per process.
    """

    name: str
    plan: tuple[tuple[bool, int], ...]
    payload: bytes = field(repr=False)
    digest: str
    fn: Callable[..., Any] | None = field(default=None, repr=False, compare=False)

    def __reduce__(self) -> tuple[Any, ...]:
        return ChunkSpec, (self.name, self.plan, self.payload, self.digest)

    def __dask_tokenize__(self) -> str:
        return f"{self.digest}-{self.plan}"

    def function(self) -> Callable[..., Any]:
        fn = self.fn
        return _worker_function(self.digest, self.payload) if fn is None else fn

    def run(self, shared: Sequence[Any], chunks: Sequence[Any]) -> tuple[Any, ...]:
        """The flat outputs of the program on one chunk (value, then gradient leaves)."""
        return cast("tuple[Any, ...]",
                    self.function()(*[chunks[k] if is_data else shared[k] for is_data, k in self.plan]))


def build_spec(prog: api.Program, plan: tuple[tuple[bool, int], ...], site: str) -> ChunkSpec:
    """The shippable form of ``prog``; a constant plain ``pickle`` cannot send is a ``ShipError``."""
    source, fn = (prog.source, prog.fn) if prog.numpy_tier is None else prog.numpy_tier  # (kernels do not pickle)
    ns = fn.__globals__
    live = _live_ids(prog)
    consts = {k: _pack(v, live) for k, v in ns.items() if k != "__builtins__"}
    name = fn.__name__
    try:
        payload = pickle.dumps((source, name, consts), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # pickle raises several types (PicklingError, TypeError, AttributeError)
        raise _ship_error(prog, consts, site, e) from e
    return ChunkSpec(name, plan, payload, hashlib.sha256(payload).hexdigest(), fn)


def _ship_error(prog: api.Program, consts: dict[str, Any], site: str, cause: Exception) -> ShipError:
    for k, v in consts.items():
        try:
            pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            where = _used_at(prog.source, k)
            return ShipError(f"irad.dask.value_and_grad of {site}: the compiled chunk program holds a "
                             f"{type(v).__name__} (constant {k!r}{', used at ' + where if where else ''}) that "
                             f"pickle cannot send to a worker ({type(e).__name__}: {e}); define it at the top "
                             "level of an importable module, or pass it as an argument")
    return ShipError(f"irad.dask.value_and_grad of {site}: the compiled chunk program cannot be pickled "
                     f"({type(cause).__name__}: {cause})")


def _live_ids(prog: api.Program) -> set[int]:
    """The arrays of the user's world the program reads live (a global array): they are sent
    again with each call, so that a worker sees them as they are at the call."""
    return {id(c.value) for g in (prog.forward, prog.graph) for op in g.ops for c in api._consts(op) if c.live}


def _refresh(spec: ChunkSpec, prog: api.Program, site: str) -> ChunkSpec:
    """``spec`` with the current contents of the world's arrays the program reads (itself when
    there are none, or when they are unchanged)."""
    if not _live_ids(prog):
        return spec
    new = build_spec(prog, spec.plan, site)
    return spec if new.digest == spec.digest else new


_WORKER_FUNCTIONS: "OrderedDict[str, Callable[..., Any]]" = OrderedDict()
_WORKER_LOCK = threading.Lock()


def _worker_function(digest: str, payload: bytes) -> Callable[..., Any]:
    """The function of a shipped program, compiled once per process: by the first task that
    needs it (the lock makes a worker's other threads wait for it rather than compile again)."""
    with _WORKER_LOCK:
        fn = _WORKER_FUNCTIONS.get(digest)
        if fn is not None:
            _WORKER_FUNCTIONS.move_to_end(digest)
            return fn
        source, name, consts = pickle.loads(payload)
        ns = {k: _unpack(v) for k, v in consts.items()}
        exec(compile_source(source, f"irad.dask {name}"), ns)  # noqa: S102 - irad's generated source
        fn = _WORKER_FUNCTIONS[digest] = ns.pop(name)
        while len(_WORKER_FUNCTIONS) > WORKER_CACHE_SIZE:
            _WORKER_FUNCTIONS.popitem(last=False)
        return cast("Callable[..., Any]", fn)


# ---- the tasks ----------------------------------------------------------------------------

def _chunk_task(spec: ChunkSpec, shared: Sequence[Any], weight: int, *chunks: Any) -> tuple[Any, ...]:
    """One chunk's value and gradient leaves, times ``weight`` (its row count for a mean)."""
    flat = spec.run(shared, chunks)
    return tuple(flat) if weight == 1 else tuple(weight * x for x in flat)


def _add(*parts: Sequence[Any]) -> tuple[Any, ...]:
    """The sum of the chunks' flat outputs, position by position."""
    acc = list(parts[0])
    for p in parts[1:]:
        for k, x in enumerate(p):
            acc[k] = acc[k] + x
    return tuple(acc)


def _tree_sum(parts: list[Any], fan_in: int) -> Any:
    """A tree of delayed sums of ``fan_in`` parts each: depth log(chunks), few tasks."""
    add = _dask_delayed(_add, pure=False)
    while len(parts) > 1:
        groups = [parts[i:i + fan_in] for i in range(0, len(parts), fan_in)]
        parts = [add(*g) if len(g) > 1 else g[0] for g in groups]
    return parts[0]


# ---- the function -------------------------------------------------------------------------

@dataclass
class _Entry:
    prog: api.Program
    spec: ChunkSpec


class DaskValueAndGrad:
    """``irad.dask.value_and_grad(loss, ...)``: called as ``loss`` is, with Dask arrays at the
    ``data`` positions; returns ``(value, gradient)`` as numpy values, the gradient with the
    structure of the ``argnums`` argument(s).

    One compiled program per chunk shape and signature of the other arguments, reused while its
    assumptions about the world hold (a rebound global the loss reads compiles it again); a call
    whose parameters take another branch compiles it again at them.  ``traces`` counts the
    programs compiled.
    """

    def __init__(self, loss: Callable[..., Any], argnums: int | Sequence[int] = 0,
                 data: int | Sequence[int] = (1, 2), reduce: str = "mean") -> None:
        self.loss = loss
        self.argnums = argnums
        self.data = (data,) if isinstance(data, int) else tuple(data)
        self.reduce = reduce
        self.site = def_site(loss) or getattr(loss, "__name__", "loss")
        self.__name__ = f"irad.dask.value_and_grad({getattr(loss, '__name__', 'loss')})"
        self.traces = 0
        self._programs: "OrderedDict[Any, _Entry]" = OrderedDict()
        self._lock = threading.Lock()
        if reduce not in REDUCTIONS:
            raise GradError(f"{self.__name__}: reduce={reduce!r}; it is 'mean' (the loss is a mean over the rows "
                            "of a chunk, plus terms of the parameters alone) or 'sum' (a sum over the rows)")
        if not self.data:
            raise GradError(f"{self.__name__}: data=() names no argument; pass the positions of the Dask arrays")

    @property
    def programs(self) -> list[api.Program]:
        """The chunk programs compiled so far (the most recently used last)."""
        return [e.prog for e in self._programs.values()]

    def __call__(self, *args: Any, scheduler: Any = None) -> tuple[Any, Any]:
        """``(value, gradient)`` over all rows; ``scheduler`` as for ``dask.compute`` (None: Dask's
        current default, a ``distributed.Client`` when one is in scope)."""
        nums, data = self._positions(len(args))
        arrays = _aligned(self.__name__, [args[i] for i in data])
        rows = arrays[0].chunks[0]
        total = sum(rows)
        if total == 0:
            raise GradError(f"{self.__name__}: the data have no rows")
        # NOTE: not optimised apart: X and y sliced from one array would each compute its blocks
        blocks = [a.to_delayed(optimize_graph=False).reshape(-1) for a in arrays]
        retried = False
        while True:
            entries, shared = self._entries(args, nums, data, arrays, blocks, rows, scheduler, fresh=retried)
            try:
                flat = self._compute(entries, shared, blocks, rows, scheduler)
                break
            except GuardError as e:
                if retried:
                    raise self._guard_error(entries) from e
                retried = True  # a branch on the parameters: compile at them, once
        if self.reduce == "mean":
            flat = [x / total for x in flat]
        return next(iter(entries.values())).prog.unpack(flat)

    # -- arguments --

    def _positions(self, nargs: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        nums = api._argnums(self.argnums, nargs)
        data = []
        for d in self.data:
            if not -nargs <= d < nargs:
                raise GradError(f"{self.__name__}: data position {d} is out of range for {nargs} positional arguments")
            data.append(d % nargs)
        both = sorted(set(nums) & set(data))
        if both:
            raise GradError(f"{self.__name__}: argument(s) {both} are both differentiated (argnums) and data; "
                            "the gradient is with respect to parameters, the data are split into chunks")
        if len(set(data)) != len(data):
            raise GradError(f"{self.__name__}: data={self.data} names an argument twice")
        return nums, tuple(data)

    def _shared_leaves(self, args: tuple[Any, ...], nums: tuple[int, ...], data: tuple[int, ...],
                       shapes: Sequence[tuple[tuple[int, ...], np.dtype]]) -> tuple[Any, list[Any], list[int]]:
        """The call key of a chunk of these shapes, the call's leaves and the leaf positions of the data."""
        stand_ins = {i: np.broadcast_to(np.zeros((), dt), shape) for i, (shape, dt) in zip(data, shapes)}
        key, leaves = call_key(tuple(stand_ins.get(i, a) for i, a in enumerate(args)), {}, frozenset(nums))
        ids = {id(s): j for j, s in enumerate(stand_ins.values())}
        slots = [-1] * len(data)
        for pos, leaf in enumerate(leaves):
            j = ids.get(id(leaf))
            if j is not None:
                slots[j] = pos
        return key, leaves, slots

    # -- programs --

    def _entries(self, args: tuple[Any, ...], nums: tuple[int, ...], data: tuple[int, ...],
                 arrays: list[Any], blocks: list[Any], rows: tuple[int, ...], scheduler: Any,
                 fresh: bool) -> tuple[dict[int, _Entry], list[Any]]:
        """The program of each distinct chunk row count (compiled when missing or stale, or all
        of them when ``fresh``) and the non-data leaves every task reads."""
        entries: dict[int, _Entry] = {}
        dynamic: set[int] = set()
        leaves: list[Any] = []
        slots: list[int] = []
        for n in dict.fromkeys(r for r in rows if r):
            shapes = [((n,) + a.shape[1:], a.dtype) for a in arrays]
            key, leaves, slots = self._shared_leaves(args, nums, data, shapes)
            entry = None if fresh else self._lookup(key)
            if entry is None:
                i = rows.index(n)
                entry = self._compile(args, nums, data, [b[i] for b in blocks], scheduler)
                key = self._shared_leaves(args, nums, data, shapes)[0]  # (the trace may register rules)
                self._store(key, entry)
            entries[n] = entry
            dyn = entry.prog.dyn_pos
            dynamic.update(range(len(leaves)) if dyn is None else dyn)
        data_slots = set(slots)
        shared = [leaf if i in dynamic and i not in data_slots else None for i, leaf in enumerate(leaves)]
        return entries, shared

    def _lookup(self, key: Any) -> _Entry | None:
        """The cached program of ``key``, unless it is stale."""
        with self._lock:
            entry = self._programs.get(key)
            if entry is None:
                return None
            if entry.prog.assumptions.check() is not None:  # stale: a global it read was rebound...
                del self._programs[key]
                return None
            self._programs.move_to_end(key)
        spec = _refresh(entry.spec, entry.prog, self.site)
        if spec is not entry.spec:
            entry = _Entry(entry.prog, spec)
            self._store(key, entry)
        return entry

    def _store(self, key: Any, entry: _Entry) -> None:
        with self._lock:
            self._programs[key] = entry
            self._programs.move_to_end(key)
            while len(self._programs) > MAX_PROGRAMS:
                self._programs.popitem(last=False)

    def _compile(self, args: tuple[Any, ...], nums: tuple[int, ...], data: tuple[int, ...],
                 sample: list[Any], scheduler: Any) -> _Entry:
        """Trace and compile ``loss`` on a real chunk (``sample``: its blocks of each data argument)."""
        chunks = _dask_compute(*sample, scheduler=scheduler)
        for c in chunks:
            if type(c) is not np.ndarray:
                raise GradError(f"{self.__name__}: a chunk of the data is a {type(c).__name__}, not a numpy array; "
                                "irad compiles numpy code (dask arrays of other backends are not supported)")
        cargs = list(args)
        for i, c in zip(data, chunks):
            cargs[i] = c
        prog = api.compile(self.loss, *cargs, argnums=self.argnums)
        self.traces += 1
        self._refuse(prog, nums, data, cargs)
        probe_rows(self.loss, cargs, data, self.reduce, nums, self.site)
        _, leaves, slots = self._shared_leaves(args, nums, data, [(c.shape, c.dtype) for c in chunks])
        where = {pos: j for j, pos in enumerate(slots)}
        dyn = range(len(leaves)) if prog.dyn_pos is None else prog.dyn_pos
        if any(s not in dyn for s in slots):
            raise GradError(f"{self.__name__}: a data argument is not an input of the compiled program")
        plan = tuple((True, where[i]) if i in where else (False, i) for i in dyn)
        return _Entry(prog, build_spec(prog, plan, self.site))

    def _refuse(self, prog: api.Program, nums: tuple[int, ...], data: tuple[int, ...], cargs: list[Any]) -> None:
        """Losses whose chunk-by-chunk sum would not be their value on the whole data.  The
        proof compares the chunk's trace with a trace on the chunk stacked with itself (twice
        the rows): the constants that differ between the two are the ones the row count made
        (``len(X)`` is a number in a trace), whatever their values."""
        if prog.writeback or prog.setattrs:
            raise MutationError(f"{self.__name__}: the loss updates an argument, an array of the world or an "
                                "attribute; chunks run on workers, where such an update would be lost",
                                self.site, "compute on a copy, and return what you need instead of storing it")
        if prog.rngs:
            raise GradError(f"{self.__name__}: the loss draws random numbers; each chunk would draw from its own "
                            "copy of the generator (the same numbers in every chunk, and yours never advances); "
                            f"draw them outside and pass them as a data argument\n  at {self.site}")
        twice = list(cargs)
        for i in data:
            twice[i] = np.concatenate([cargs[i], cargs[i]])
        with np.errstate(all="ignore"):  # NOTE: traced as irad.compile traces (ints are inputs), to align
            g2, tracer, _ = trace_values(self.loss, tuple(twice), {}, deep=frozenset(nums))
        tracer.values.clear()
        check_rows(prog.forward, data, self.reduce, self.site, g2=g2)

    def _guard_error(self, entries: dict[int, _Entry]) -> GuardError:
        where = sorted({loc for entry in entries.values() for loc in entry.prog.guard_locations()})
        return GuardError(f"{self.__name__}: the loss branches on the values of its data ({', '.join(where)}): "
                          "the program compiled on one chunk takes another branch in another chunk; write the "
                          "branch with np.where (or np.maximum, np.abs...) so that every row takes its own")

    # -- the tasks --

    def _compute(self, entries: dict[int, _Entry], shared: list[Any], blocks: list[Any],
                 rows: tuple[int, ...], scheduler: Any) -> list[Any]:
        task = _dask_delayed(_chunk_task, pure=False)
        shared_d = _dask_delayed(shared, traverse=False)  # one key, read by every task
        specs = {n: _dask_delayed(e.spec, traverse=False) for n, e in entries.items()}
        mean = self.reduce == "mean"
        parts = [task(specs[n], shared_d, n if mean else 1, *[b[i] for b in blocks])
                 for i, n in enumerate(rows) if n]
        return list(_dask_compute(_tree_sum(parts, FAN_IN), scheduler=scheduler)[0])


def _aligned(fname: str, arrays: list[Any]) -> list[Any]:
    """The data as Dask arrays with the same row chunks and one chunk along every other axis."""
    first = next((a for a in arrays if isinstance(a, da.Array)), None)
    if first is None:
        raise GradError(f"{fname}: no data argument is a Dask array; wrap the data with "
                        "dask.array.from_array(X, chunks=(rows_per_chunk, -1)) (or call irad.value_and_grad)")
    for a in arrays:
        if not isinstance(a, (da.Array, np.ndarray)):
            raise GradError(f"{fname}: a data argument is a {type(a).__name__}; pass Dask (or numpy) arrays")
        if a.ndim == 0:
            raise GradError(f"{fname}: a data argument is a 0-d array; data have rows (pass it as a parameter)")
        if isinstance(a, da.Array) and any(np.isnan(c) for c in a.chunks[0]):
            raise GradError(f"{fname}: the data's chunk sizes are unknown; call .compute_chunk_sizes() first")
        if a.shape[0] != first.shape[0]:
            raise GradError(f"{fname}: the data arguments have different numbers of rows "
                            f"({first.shape[0]} and {a.shape[0]})")
    rows = first.chunks[0]
    out = []
    for a in arrays:
        if isinstance(a, np.ndarray):
            a = _dask_from_array(a, chunks=(rows,) + a.shape[1:])
        want = {0: rows} | {k: -1 for k in range(1, a.ndim)}
        if a.chunks[0] != rows or any(len(c) > 1 for c in a.chunks[1:]):
            a = a.rechunk(want)
        out.append(a)
    return out


def value_and_grad(loss: Callable[..., Any], argnums: int | Sequence[int] = 0, data: int | Sequence[int] = (1, 2),
                   reduce: str = "mean") -> DaskValueAndGrad:
    """The value and gradient of ``loss`` over Dask arrays at the positional arguments ``data``,
    chunked along their leading axis; ``loss`` is plain numpy for one chunk.

    ``reduce="mean"``: ``loss`` is a mean over the rows of its chunk plus terms of the parameters
    alone (a regulariser); the result is the mean over all rows plus those terms, each chunk
    weighted by its row count.  ``reduce="sum"``: ``loss`` is a sum over the rows; the result is
    the sum over all rows.  A loss that is neither (it sorts, standardises or takes a median over
    rows) is a ``RowsError``.  Call the result as ``loss`` is called, plus ``scheduler=`` (as for
    ``dask.compute``)."""
    return DaskValueAndGrad(loss, argnums, data, reduce)
