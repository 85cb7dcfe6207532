"""In-place updates and views of traced arrays, recorded functionally.

``a += b``, ``a[i] = v``, ``out=`` and mutating methods become new SSA values; the old value is
snapshotted for the ops that read it before.  Views are remembered with how they were made, so a
write through a view goes back into its base, and other views of changed memory are re-derived
when next used; what cannot be expressed raises ``MutationError`` instead of tracing something
wrong.  ``Aliasing`` is composed into ``irad.trace.Tracer`` (``tracer.aliasing``).
"""
from __future__ import annotations

import operator
import sys
from typing import TYPE_CHECKING, Any, Callable, Literal

import numpy as np

from .errors import MutationError
from .ir import Var, typeof

if TYPE_CHECKING:
    from .trace import Tracer

def by_id(fns: Any) -> dict[int, Any]:
    """Membership tables keyed by identity (callables need not be hashable)."""
    return {id(f): f for f in fns}


def member(f: Any, table: dict[int, Any]) -> bool:
    return table.get(id(f)) is f


def root_of(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


#: functions whose result is a view that can be re-derived from its base
STRUCTURAL_VIEWS = {np.transpose, np.ndarray.transpose, np.swapaxes, np.ndarray.swapaxes, np.moveaxis,
                     np.reshape, np.ndarray.reshape, np.ravel, np.ndarray.ravel, np.squeeze, np.ndarray.squeeze,
                     np.expand_dims, np.flip, np.fliplr, np.flipud, np.asarray, np.asanyarray,
                     np.atleast_1d, np.atleast_2d, np.atleast_3d}

STRUCTURAL_VIEWS_ = by_id(STRUCTURAL_VIEWS)


def _real_of_real(d: tuple[Any, ...]) -> bool:
    """``a.real`` of a real array views all of ``a`` unchanged: a write through it is a write to ``a``."""
    return d[0] is np.real and isinstance(d[3], np.ndarray) and d[3].dtype.kind != "c"


class Aliasing:
    """In-place updates and views of one trace: the tracer's ``aliasing`` (``Tracer.aliasing``).

    It owns the tables of which arrays share memory and how views were made, and it reads the
    tracer's value tables (the same dicts: the tracer never rebinds them) and records through the
    tracer (``new_var``, ``emit``, ``track``)."""

    def __init__(self, tracer: Tracer) -> None:
        self.t = tracer
        self.vars, self.values, self.keep, self.consts = tracer.vars, tracer.values, tracer.keep, tracer.consts
        self.captured = tracer._captured
        self.const_roots: set[int] = set()  # id(root) of the memory of array constants
        self.traced_roots: set[int] = set()  # id(root) of the memory of tracked arrays
        self.views: dict[int, dict[int, np.ndarray]] = {}  # id(root) -> arrays on that memory (views)
        #: id(view) -> (fn, args, kwargs, base): how a view was made from its base
        self.derived: dict[int, tuple[Any, tuple[Any, ...], dict[str, Any], np.ndarray]] = {}
        self.stale: dict[int, str] = {}  # id(array) -> the in-place update that changed it behind its Var
        #: id(array about to be updated) -> (bases written through, arrays made stale, what)
        self.pending: dict[int, tuple[list[tuple[Any, ...]], list[np.ndarray], str]] = {}

    # ---- mutation -------------------------------------------------------------------------

    def note_view(self, view: np.ndarray, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Remember how a view was made from its base, to write through it and to re-derive it."""
        for p in args:
            if isinstance(p, np.ndarray) and p is not view and np.may_share_memory(view, p):
                self.derived[id(view)] = (fn, args, kwargs, p)
                return

    def note_untracked_view(self, view: np.ndarray, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """An untracked view of an untracked array: remember how it was made (a write through it
        must reach its base)."""
        for p in args:
            if isinstance(p, np.ndarray) and p is not view and np.may_share_memory(view, p):
                self.derived[id(view)] = (fn, args, kwargs, p)
                self.keep.append(view)
                self.views.setdefault(id(root_of(view)), {})[id(view)] = view
                return

    def seen(self, x: Any) -> bool:
        """Is ``x`` tracked?  An untracked view of a tracked array (made by C code irad did not see)
        is adopted first: its contents depend on traced values."""
        if id(x) in self.vars:
            return True
        if type(x) is np.ndarray and x.base is not None and id(root_of(x)) in self.vars:
            self.adopt_view(x)
            return True
        if self.captured and id(x) in self.captured:
            self.t._adopt_capture(x)
            return True
        return False

    def adopt_view(self, x: np.ndarray) -> Var:
        """An untracked view of a tracked array, made where irad could not see how (C code...):
        derive it from its base through the flat positions of its elements (``np.take``)."""
        self.flat_view_derivation(x)
        self.stale[id(x)] = "its base was updated in place"
        return self.refresh(x)

    def flat_view_derivation(self, x: np.ndarray) -> None:
        """Remember ``x`` as ``root[index]``: the memory positions of its elements, unravelled in
        the root's memory order (an advanced index: reads copy, writes go through setitem)."""
        root = root_of(x)
        if id(x) not in self.derived:
            item = root.itemsize
            offset = x.__array_interface__["data"][0] - root.__array_interface__["data"][0]
            order: Literal["C", "F"] | None = \
                "C" if root.flags.c_contiguous else "F" if root.flags.f_contiguous else None
            if x.dtype != root.dtype or order is None or offset % item or any(s % item for s in x.strides):
                loc = self.t.loc()
                raise MutationError("an array that views the memory of a traced array, made where irad could not "
                                    "see how, is used", loc.long if loc else "",
                                    "make it with indexing or a numpy function, or copy it (`.copy()`)")
            pos = np.full(x.shape, offset // item, dtype=np.intp)
            for axis, (n, s) in enumerate(zip(x.shape, x.strides)):
                pos += (np.arange(n) * (s // item)).reshape((n,) + (1,) * (x.ndim - axis - 1))
            index = np.unravel_index(pos, root.shape, order=order)
            self.derived[id(x)] = (operator.getitem, (root, index), {}, root)
            self.keep.append(x)

    def refresh(self, x: np.ndarray) -> Var:
        """A stale array is used: re-derive it from its (updated) base, or fail."""
        d = self.derived.get(id(x))
        why = self.stale.pop(id(x))
        if d is None:
            loc = self.t.loc()
            raise MutationError(
                f"an array is used after an in-place update ({why}) changed its memory through another "
                "array that shares it (a view or an aliased argument), and irad does not know how the two "
                "are related", loc.long if loc else "",
                "copy first (`v = a[...].copy()`), or write the update out of place (`a = a + b`)")
        fn, args, kwargs, _ = d
        atoms = (tuple(self.t.atom(a) for a in args), {k: self.t.atom(v) for k, v in kwargs.items()})
        v = self.t.new_var(x)
        self.t.emit(fn, atoms[0], atoms[1], (v,))
        self.t.track(x, v)
        return v

    def _mutation_error(self, what: str, why: str, hint: str = "") -> None:
        loc = self.t.loc()
        raise MutationError(
            f"in-place update ({what}) of an array while {why}: irad cannot express its effect",
            loc.long if loc else "",
            hint or "copy first (`v = a[...].copy()`), or write the update out of place (`a = a + b`)")

    def _external_name(self, a: np.ndarray) -> str | None:
        """The name under which ``a`` is a module global or a closure variable of the user's code."""
        frame = self.t._user_frame()
        if frame is None:
            return None
        for name in frame.f_code.co_freevars:
            if frame.f_locals.get(name) is a:
                return str(name)
        for name, val in frame.f_globals.items():
            if val is a:
                return str(name)
        return None

    def touches_traced_memory(self, a: Any) -> bool:
        """Could an in-place update of ``a`` change a traced array?"""
        return isinstance(a, np.ndarray) and (id(a) in self.vars or id(root_of(a)) in self.traced_roots)

    def before_mutation(self, a: np.ndarray, what: str) -> Any:
        """``a`` is about to be updated in place: return the atom of its old value.

        Also prepares what ``rebind`` needs: the chain of bases the update writes through, and
        every other array on the same memory (which the update makes stale)."""
        chain: list[tuple[Any, ...]] = []  # (base, view fn, view args, view kwargs, base before)
        if id(a) not in self.vars and a.base is not None and id(a) not in self.derived and id(root_of(a)) in self.vars:
            self.flat_view_derivation(a)  # a view of traced memory that irad did not see being made
        child = a
        while True:
            d = self.derived.get(id(child))
            if d is None or not (d[0] is operator.getitem or member(d[0], STRUCTURAL_VIEWS_) or _real_of_real(d)) \
                    or d[1][0] is not d[3]:
                break
            chain.append((d[3], d[0], d[1], d[2]))
            child = d[3]
        top = child
        if id(top) not in self.vars:
            if top.base is not None and (sys.getrefcount(root_of(top)) > 3 or id(root_of(top)) in self.traced_roots):
                self._mutation_error(what, "it is a view of an array irad does not track")
            name = self._external_name(top)
            if name is not None:
                loc = self.t.loc()
                raise MutationError(
                    f"in-place update ({what}) of the global or closure array `{name}` with traced values: a graph "
                    "cannot repeat this side effect", loc.long if loc else "",
                    f"copy it first (`{name} = {name}.copy()`) and update the copy")
        # old values: the arrays written through, then snapshots of everything on that memory
        befores = [self._before_atom(x) for x in [a] + [c[0] for c in chain]]
        root = root_of(a)
        group = list(self.views.get(id(root), {}).values()) + ([root] if id(root) in self.vars else [])
        written = {id(a)} | {id(c[0]) for c in chain}
        affected = [w for w in group if id(w) not in written and np.may_share_memory(w, a)]
        written_arrays: list[np.ndarray] = [a] + [c[0] for c in chain] + affected
        for w in written_arrays:
            v = self.vars.get(id(w))
            if v is not None and self.values.get(v.id) is w:
                self.values[v.id] = w.copy()
        self.protect_consts(a)
        self.pending[id(a)] = ([(c[0], c[1], c[2], c[3], b) for c, b in zip(chain, befores[1:])], affected, what)
        return befores[0]

    def _before_atom(self, x: np.ndarray) -> Any:
        if id(x) in self.vars:
            return self.t.atom(x)
        return self.t.const(x.copy(), origin=self.t._origin(x))

    def protect_consts(self, a: np.ndarray) -> None:
        """Constants that alias the memory about to change keep their old contents."""
        if id(root_of(a)) not in self.const_roots:
            return
        for key, c in list(self.consts.items()):
            if isinstance(c.value, np.ndarray) and np.may_share_memory(c.value, a):
                object.__setattr__(c, "value", c.value.copy())
                object.__setattr__(c, "live", False)  # a snapshot irad made
                del self.consts[key]  # later reads of the array see its new contents
                self.keep.append(c.value)

    def rebind(self, a: Any, fn: Callable[..., Any], atoms: tuple[tuple[Any, ...], dict[str, Any]],
               prim: str | None = None) -> Any:
        """Record an in-place update of ``a`` as a new SSA value that ``a`` now stands for; write
        it back through the bases ``a`` views, and mark the other arrays on that memory stale."""
        from . import primitives as irad_ops
        v = self.t.new_var(a)
        self.t.emit(fn, atoms[0], atoms[1], (v,), prim=prim)
        self.t.track(a, v)
        chain, affected, what = self.pending.pop(id(a), ([], [], ""))
        child_var = v
        for base, fn_v, args_v, kwargs_v, before in chain:
            if fn_v is operator.getitem:
                index = self.t.atom(args_v[1])
            else:  # replay the view on an index array: the write-back is an advanced-index update
                pos = np.arange(base.size).reshape(base.shape)
                index = self.t.const(np.unravel_index(fn_v(pos, *args_v[1:], **kwargs_v), base.shape))
            bv = self.t.new_var(base)
            self.t.emit(irad_ops.setitem, (before, index, child_var), {}, (bv,))
            self.t.track(base, bv)
            child_var = bv
        loc = self.t.loc()
        for w in affected:
            self.stale[id(w)] = f"{what} at {loc}" if loc else what
            if id(w) not in self.vars:  # an untracked view: a placeholder Var (never in a graph: refreshed first)
                self.vars[id(w)] = Var(-1, typeof(w))
            if w.base is not None:
                self.views.get(id(root_of(w)), {}).pop(id(w), None)
        return a
