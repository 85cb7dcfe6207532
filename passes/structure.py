"""Matrix structure: which values are triangular (or SPD), and the linear algebra that saves.

``structure(g)`` is an analysis, a pure function from a Graph to facts about its Vars (``Var.id
-> Fact``): ``cholesky`` gives a lower (``upper=True``: upper) triangular factor and says that its
input is SPD on the triangle it read; ``tril``/``triu`` give triangles; a transpose of the last
two axes flips them; a conjugate keeps them.  Nothing else keeps a fact: a matrix that is the
result of any other op (a ``setitem`` on a factor, ``L + 0``, ``qr``'s R, a general matrix) is not
known to be triangular, and a value that an op updates in place (``add_into``, ``out=``) loses
its facts together with every view of it.

NOTE: the facts live in an analysis, not in ``ArrayT``: a type is part of every cache key, of
the printed IR and of what rules see, and "triangular" is a property of values that only a few
ops create and every other op destroys.  Recomputing it from the def-use chains costs one
linear walk, and no pass or rule has to keep a fact up to date.

The rewrites (SciPy installed; without SciPy every pass here returns its graph unchanged):

- ``triangular_solves``: ``numpy.linalg.solve(A, b)`` with ``A`` known triangular (2-D) ->
  ``scipy.linalg.solve_triangular(A, b, lower=..., check_finite=False)``; ``solve(Lᵀ, solve(L,
  b))`` with ``L`` a Cholesky factor, the inner result read nowhere else -> ``cho_solve``.
- ``cholesky_consumers`` (on rule calls, before ``inline_pullbacks``): for ``L = cholesky(K)``,
  ``solve(Lᵀ, solve(L, b))`` becomes ``cho_solve((L, True), b)`` and ``sum(log(diag(L)))`` keeps
  its value; their cotangents go to ``K`` directly (``K⁻¹`` from the factor, LAPACK ``potri``)
  instead of through ``L`` and the Cholesky pullback (a matmul and two triangular solves with
  ``n`` right-hand sides), which disappears when nothing else reads ``L``'s cotangent.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import operator
from dataclasses import dataclass
from typing import Any, Callable, TypeGuard, cast

import numpy as np

from irad.ir import ArrayT, Const, Graph, Loc, OpaqueT, Op, Var, const, map_atoms
from irad.rules.decomp_rules import cho_inverse

# ---- the analysis ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """What is known of a matrix's values (of each matrix of a stack: the last two axes).

    ``tri``: ``"lower"`` or ``"upper"``, zero on the other side of the diagonal.  ``spd``: the
    Hermitian matrix that this triangle of the value defines (``"lower"``/``"upper"``) is positive
    definite (``cholesky`` read it and succeeded; the other triangle may hold anything).
    ``factor_of``: the value is the Cholesky factor ``L`` of that matrix (``L Lᴴ = K``, lower).
    """

    tri: str = ""
    spd: str = ""
    factor_of: Var | None = None

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in (("tri", self.tri), ("spd", self.spd)) if v]
        if self.factor_of is not None:
            parts.append(f"factor_of={self.factor_of}")
        return f"Fact({', '.join(parts)})"


_FLIP = {"lower": "upper", "upper": "lower", "": ""}
_REAL = ("float32", "float64")
_FLOATS = ("float32", "float64", "complex64", "complex128")
_POTRF = frozenset(f"scipy.linalg.lapack.{t}potrf" for t in "sdcz")
#: ops whose result may share memory with their first argument: an in-place update of one is an
#: update of the other
_VIEWS = frozenset({"numpy.transpose", "numpy.swapaxes", "numpy.matrix_transpose", "operator.getitem",
                    "numpy.reshape", "numpy.ravel", "numpy.asarray", "numpy.asanyarray", "numpy.diagonal",
                    "numpy.diag", "numpy.squeeze", "numpy.expand_dims", "numpy.real", "numpy.imag",
                    "numpy.moveaxis", "numpy.broadcast_to", "numpy.atleast_2d", "numpy.atleast_3d",
                    "numpy.ndarray.view", "numpy.ndarray.reshape", "numpy.ndarray.ravel",
                    "numpy.ndarray.transpose", "numpy.conjugate", "numpy.conj", "numpy.array"})
#: ops that update their first argument in place
_IN_PLACE = frozenset({"irad.primitives.add_into"})


def _primal(op: Op) -> tuple[str, tuple[Any, ...], dict[str, Any], tuple[Var, ...]]:
    """(function name, args, keyword arguments, outputs) of the call an op makes: a rule call
    (``rule_fwd[numpy.tril](%3)``) is read as the call of its function (its state dropped)."""
    kw = {k: v for k, v in op.kwargs if k[0] != "_"}
    if op.prim == "rule_fwd":
        rule = op.kw("_rule")
        return getattr(rule, "name", ""), op.args, kw, op.outs[:-1]
    return op.prim, op.args, kw, op.outs


def _static(a: Any, default: Any = None) -> Any:
    """The value of a static argument, ``default`` when absent; ``_Dynamic`` for a Var."""
    if a is None:
        return default
    if isinstance(a, Const):
        return a.value
    if isinstance(a, Var):
        return _DYNAMIC
    return map_atoms(a, lambda c: _DYNAMIC if isinstance(c, Var) else c.value)


_DYNAMIC = object()


def _ndim(a: Any) -> int:
    t = getattr(a, "type", None)
    return len(t.shape) if isinstance(t, ArrayT) and not t.scalar else -1


def _arg(args: tuple[Any, ...], kw: dict[str, Any], i: int, name: str) -> Any:
    return args[i] if len(args) > i else kw.get(name)


def _flips_last_two(name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
    """Is this call a transpose of the last two axes of its first argument (and nothing else)?"""
    nd = _ndim(args[0]) if args else -1
    if nd < 2:
        return False
    if name == "numpy.matrix_transpose":
        return len(args) == 1 and not kw
    if name == "numpy.transpose":
        axes = _static(_arg(args, kw, 1, "axes"))
        return nd == 2 and (axes is None or (isinstance(axes, (tuple, list)) and tuple(axes) == (1, 0)))
    if name == "numpy.swapaxes":
        a, b = _static(_arg(args, kw, 1, "axis1")), _static(_arg(args, kw, 2, "axis2"))
        return type(a) is int and type(b) is int and {a % nd, b % nd} == {nd - 2, nd - 1}
    return False


def _fact_of_call(name: str, args: tuple[Any, ...], kw: dict[str, Any], facts: dict[int, Fact]) -> Fact | None:
    """The fact of the first output of one call, or None."""
    if not args or _ndim(args[0]) < 1:
        return None
    x = args[0]
    known = facts.get(x.id) if isinstance(x, Var) else None
    if name == "numpy.linalg.cholesky" and _ndim(x) >= 2:
        upper = _static(kw.get("upper"), False)
        if upper is _DYNAMIC or len(args) > 1:
            return None
        return Fact(tri="upper" if upper else "lower", factor_of=x if isinstance(x, Var) and not upper else None)
    if name == "scipy.linalg._batched_linalg._cholesky" and _ndim(x) == 2:
        # NOTE: SciPy >= 1.18's scipy.linalg.cholesky: _cholesky(a, lower, overwrite_a, clean)
        lower, clean = (_static(a, None) for a in (args + (None,) * 4)[1:4:2])
        if kw or len(args) != 4 or type(lower) is not bool or clean is not True:
            return None
        return Fact(tri="lower" if lower else "upper")
    if name in _POTRF and _ndim(x) == 2:
        lower, clean = _static(kw.get("lower"), False), _static(kw.get("clean"), True)
        if len(args) > 1 or lower is _DYNAMIC or clean is _DYNAMIC or not clean:
            return None
        return Fact(tri="lower" if lower else "upper")
    if name in ("numpy.tril", "numpy.triu"):
        k = _static(_arg(args, kw, 1, "k"), 0)
        if type(k) is not int:
            return None
        if name == "numpy.tril" and k <= 0:
            return Fact(tri="lower")
        if name == "numpy.triu" and k >= 0:
            return Fact(tri="upper")
        return None
    if known is None:
        return None
    if _flips_last_two(name, args, kw):
        return Fact(tri=_FLIP[known.tri], spd=_FLIP[known.spd])
    if name in ("numpy.conjugate", "numpy.conj") and len(args) == 1 and not kw:
        return Fact(tri=known.tri, spd=known.spd)
    return None


def structure(g: Graph) -> dict[int, Fact]:
    """Facts about the matrices of ``g``, by Var id (a pure function of the graph).

    Before: ``%2 = numpy.linalg.cholesky(%1); %3 = numpy.transpose(%2)``.
    After:  ``{1: Fact(spd='lower'), 2: Fact(tri='lower', factor_of=%1), 3: Fact(tri='upper')}``.
    """
    facts: dict[int, Fact] = {}
    for op in g.ops:
        name, args, kw, outs = _primal(op)
        if outs and isinstance(outs[0], Var):
            f = _fact_of_call(name, args, kw, facts)
            if f is not None and _ndim(outs[0]) >= 2:
                facts[outs[0].id] = f
                if name == "numpy.linalg.cholesky" and isinstance(args[0], Var) and f.tri:
                    old = facts.get(args[0].id, Fact())
                    facts[args[0].id] = dataclasses.replace(old, spd=f.tri)
    written = _written(g)
    return {i: f for i, f in facts.items() if not written(i)}


# ---- SciPy (optional) -----------------------------------------------------------------------


class _SciPy:
    """``scipy.linalg`` once found, or None: the rewrites need it, a graph without it stays as is."""

    module: Any = None
    looked = False

    @classmethod
    def linalg(cls) -> Any:
        if not cls.looked:
            cls.looked = True
            if importlib.util.find_spec("scipy") is not None:
                try:
                    import scipy.linalg as sla  # NOTE: an optional extra: imported once a rewrite can fire
                    cls.module = sla
                except ImportError:
                    cls.module = None
        return cls.module


def _c(v: Any) -> Const:
    return const(v)


def _real_matrix(t: Any, n: int | None = None) -> TypeGuard[ArrayT]:
    return isinstance(t, ArrayT) and not t.scalar and len(t.shape) == 2 and t.shape[0] == t.shape[1] and \
        t.dtype in _REAL and (n is None or t.shape[0] == n)


def _rhs_ok(a: Any, b: Any, out: Var, dtypes: tuple[str, ...]) -> bool:
    """``b`` is one vector or a matrix of right-hand sides for the 2-D matrix ``a``, all of one dtype."""
    ta, tb, to = getattr(a, "type", None), getattr(b, "type", None), out.type
    if not (isinstance(ta, ArrayT) and isinstance(tb, ArrayT) and isinstance(to, ArrayT)):
        return False
    if ta.scalar or tb.scalar or len(ta.shape) != 2 or ta.shape[0] != ta.shape[1] or len(tb.shape) not in (1, 2):
        return False
    return ta.dtype in dtypes and tb.dtype == ta.dtype == to.dtype and tb.shape[0] == ta.shape[0] and \
        to.shape == tb.shape


# ---- rewrite: triangular solves --------------------------------------------------------------


def triangular_solves(g: Graph) -> Graph:
    """Solve triangular systems as triangular systems (``scipy.linalg``; no SciPy: unchanged).

    Before: ``%2 = numpy.linalg.cholesky(%1); %4 = numpy.linalg.solve(%2, %3)``.
    After:  ``%4 = scipy.linalg.solve_triangular[lower=True, check_finite=False](%2, %3)``, and
    ``solve(Lᵀ, solve(L, b))`` (the inner result read nowhere else) is one ``scipy.linalg.cho_solve``.
    """
    if not any(op.prim in ("numpy.linalg.solve", "scipy.linalg.solve_triangular") for op in g.ops):
        return g  # NOTE: before SciPy is imported (~0.2 s): most graphs solve nothing
    sla = _SciPy.linalg()
    if sla is None:
        return g
    facts = structure(g)
    uses = _uses(g)
    defs = {o.id: op for op in g.ops for o in op.outs}

    def triangular(op: Op) -> Fact | None:
        if op.prim != "numpy.linalg.solve" or len(op.args) != 2 or op.kwargs or len(op.outs) != 1:
            return None
        a, b = op.args
        fa = facts.get(a.id) if isinstance(a, Var) else None
        return fa if fa is not None and fa.tri and _rhs_ok(a, b, op.out, _FLOATS) else None

    factors: dict[int, Var] = {}  # id(outer solve) -> L
    inners: set[int] = set()
    for op in g.ops:
        b = op.args[1] if triangular(op) is not None or _scipy_tri_solve(op) is False else None
        inner = defs.get(b.id) if isinstance(b, Var) and uses.get(b.id) == 1 else None
        low = _cholesky_pair(inner, op.args[0], facts, defs) if inner is not None else None
        if low is not None and id(inner) not in factors and _rhs_ok(low, cast(Op, inner).args[1], op.out, _FLOATS):
            factors[id(op)] = low
            inners.add(id(inner))
    ops: list[Op] = []
    n_tri = 0
    for op in g.ops:
        fa = triangular(op)
        if id(op) in inners:
            continue
        if id(op) not in factors and fa is None:
            ops.append(op)
            continue
        if id(op) in factors:
            b = defs[op.args[1].id].args[1]
            ops.append(Op("scipy.linalg.cho_solve", ((factors[id(op)], _c(True)), b),
                          (("check_finite", _c(False)),), op.outs, sla.cho_solve, op.loc))
            continue
        ops.append(Op("scipy.linalg.solve_triangular", op.args,
                      (("lower", _c(cast(Fact, fa).tri == "lower")), ("check_finite", _c(False))), op.outs,
                      sla.solve_triangular, op.loc))
        n_tri += 1
    if not n_tri and not factors:
        return g
    note = f"after triangular_solves: {n_tri} triangular solves, {len(factors)} cho_solve"
    return g.replace(ops=tuple(ops), provenance=g.provenance + (note,))


def _scipy_tri_solve(op: Op) -> bool | None:
    """``lower`` of a plain ``scipy.linalg.solve_triangular(A, b, lower=..., check_finite=False)``
    (as this pass writes it), else None."""
    kw = dict(op.kwargs)
    if op.prim != "scipy.linalg.solve_triangular" or len(op.args) != 2 or len(op.outs) != 1 or \
            set(kw) != {"lower", "check_finite"} or _static(kw["check_finite"]) is not False:
        return None
    lower = _static(dict(op.kwargs).get("lower"), False)
    return lower if type(lower) is bool else None


def _cholesky_pair(inner: Op, outer_a: Any, facts: dict[int, Fact], defs: dict[int, Op]) -> Var | None:
    """``L`` when ``inner`` is ``solve(L, b)`` (or a lower triangular solve) and ``outer_a`` is ``Lᵀ``
    (``Lᴴ`` for complex values), ``L`` a lower Cholesky factor; else None."""
    plain = inner.prim == "numpy.linalg.solve" and len(inner.args) == 2 and not inner.kwargs
    if not plain and _scipy_tri_solve(inner) is not True:
        return None
    low = inner.args[0]
    if not isinstance(low, Var) or not isinstance(outer_a, Var):
        return None
    fl = facts.get(low.id)
    if fl is None or fl.factor_of is None or fl.tri != "lower" or _ndim(low) != 2:
        return None
    return low if _is_adjoint(outer_a, low, defs) else None


def _is_adjoint(a: Var, low: Var, defs: dict[int, Op]) -> bool:
    """Is ``a`` the conjugate transpose of ``low`` (a plain transpose for real values)?"""
    op = defs.get(a.id)
    if op is None:
        return False
    name, args, kw, _ = _primal(op)
    if not _flips_last_two(name, args, kw):
        return False
    src = args[0]
    if src == low:
        return isinstance(low.type, ArrayT) and low.type.dtype in _REAL
    sop = defs.get(src.id) if isinstance(src, Var) else None
    if sop is None:
        return False
    sname, sargs, skw, _ = _primal(sop)
    return sname in ("numpy.conjugate", "numpy.conj") and len(sargs) == 1 and not skw and sargs[0] == low


def _uses(g: Graph) -> dict[int, int]:
    n: dict[int, int] = {}
    for op in g.ops:
        for v in op.inputs:
            n[v.id] = n.get(v.id, 0) + 1
    for o in g.outputs:
        if isinstance(o, Var):
            n[o.id] = n.get(o.id, 0) + 1
    return n


# ---- rewrite: what a Cholesky factor's consumers send back to its matrix -------------------


@dataclass(frozen=True)
class _Solve:
    """``x2 = solve(Lᵀ, solve(L, b))``: its forward op, and the two pullbacks it replaces."""

    fwd: Op
    b: Any
    pb_outer: Op
    pb_inner: Op


@dataclass(frozen=True)
class _LogDet:
    """``t = sum(log(diag(L)))``: the three pullbacks it replaces (the forward stays)."""

    pb_sum: Op


def _rule_name(op: Op) -> str:
    return getattr(op.kw("_rule"), "name", "") if op.prim in ("rule_fwd", "pullback") else ""


def _plain_call(op: Op, name: str, nargs: int) -> bool:
    return _rule_name(op) == name and op.prim == "rule_fwd" and len(op.args) == nargs and \
        len(op.kwargs) == 1 and len(op.outs) == 2


class _Uses:
    """Def-use tables of a rule-level graph."""

    def __init__(self, g: Graph) -> None:
        self.by: dict[int, list[Op]] = {}
        self.out: set[int] = {o.id for o in g.outputs if isinstance(o, Var)}
        self.pullback: dict[int, Op] = {}  # state id -> its pullback op
        for op in g.ops:
            for v in op.inputs:
                self.by.setdefault(v.id, []).append(op)
            if op.prim == "pullback" and op.args and isinstance(op.args[0], Var):
                self.pullback[op.args[0].id] = op
        self.defs = {o.id: op for op in g.ops for o in op.outs}

    def only(self, v: Any) -> Op | None:
        """The one op that reads ``v`` (None: read by several, by none, or returned)."""
        if not isinstance(v, Var) or v.id in self.out:
            return None
        users = self.by.get(v.id, [])
        return users[0] if len(users) == 1 else None

    def cot(self, pb: Op | None, path: tuple[int, ...]) -> Var | None:
        """The output of a pullback that is the cotangent of argument ``path``, if computed."""
        if pb is None or not isinstance(pb.unpack, tuple):
            return None
        for o, p in zip(pb.outs, pb.unpack):
            if tuple(p) == path:
                return o
        return None


def _match_solve(u: Op, low: Var, uses: _Uses) -> _Solve | None:
    if not _plain_call(u, "numpy.linalg.solve", 2) or u.args[0] != low:
        return None
    x1, s1 = u.outs
    outer = uses.only(x1)
    if outer is None or not _plain_call(outer, "numpy.linalg.solve", 2) or outer.args[1] != x1:
        return None
    a2 = outer.args[0]
    t = uses.defs.get(a2.id) if isinstance(a2, Var) else None
    if t is None or t.prim != "rule_fwd" or not _flips_last_two(*_primal(t)[:3]) or t.args[0] != low:
        return None
    x2, s2 = outer.outs
    pb2, pb1 = uses.only(s2), uses.only(s1)
    if pb2 is None or pb1 is None or pb2.prim != "pullback" or pb1.prim != "pullback":
        return None
    x1bar = uses.cot(pb2, (1,))
    if x1bar is None or uses.only(x1bar) is not pb1 or pb1.args[1] != x1bar:
        return None
    if not (_rhs_ok(low, u.args[1], x1, _REAL) and _rhs_ok(low, x1, x2, _REAL)):
        return None
    return _Solve(outer, u.args[1], pb2, pb1)


def _match_logdet(u: Op, low: Var, uses: _Uses) -> _LogDet | None:
    if _rule_name(u) != "numpy.diag" or u.prim != "rule_fwd" or len(u.outs) != 2 or u.args[0] != low or \
            len(u.kwargs) != 1 or any(_static(a) != 0 for a in u.args[1:]):
        return None
    d, sd = u.outs
    lg = uses.only(d)
    if lg is None or not _plain_call(lg, "numpy.log", 1):
        return None
    ld, sl = lg.outs
    sm = uses.only(ld)
    if sm is None or not _plain_call(sm, "numpy.sum", 1):
        return None
    t, ss = sm.outs
    pbd, pbl, pbs = uses.only(sd), uses.only(sl), uses.only(ss)
    if pbd is None or pbl is None or pbs is None:
        return None
    gld, gd = uses.cot(pbs, (0,)), uses.cot(pbl, (0,))
    if gld is None or gd is None or uses.only(gld) is not pbl or uses.only(gd) is not pbd or \
            pbl.args[1] != gld or pbd.args[1] != gd or uses.cot(pbd, (0,)) is None:
        return None
    if not isinstance(t.type, ArrayT) or t.type.shape != () or not isinstance(pbs.args[1], (Var, Const)):
        return None
    return _LogDet(pbs)


class _Emitter:
    """New ops and Vars for one rewrite: fresh ids above the graph's."""

    def __init__(self, g: Graph, loc: Loc | None) -> None:
        self.next = 1 + max([v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs] + [0])
        self.loc = Loc(loc.file, loc.line, "pullback of numpy.linalg.cholesky") if loc else None

    def var(self, dtype: str, shape: tuple[int, ...]) -> Var:
        v = Var(self.next, ArrayT(dtype, shape))
        self.next += 1
        return v

    def op(self, fn: Callable[..., Any], prim: str, args: tuple[Any, ...], out: Var,
           kwargs: tuple[tuple[str, Any], ...] = ()) -> Op:
        return Op(prim, args, kwargs, (out,), fn, self.loc)


def cholesky_consumers(g: Graph) -> Graph:
    """Send the cotangents of ``cho_solve``-shaped solves and of ``log det`` straight to ``K``.

    Before: (rule calls) ``%2 = cholesky(%1); %3 = transpose(%2); %5 = solve(%3, solve(%2, %4))``,
    the pullbacks of both solves, of the transpose and the Cholesky pullback.
    After: ``%5 = scipy.linalg.cho_solve((%2, True), %4)``; in the backward ``w = cho_solve((L,
    True), x̄)``, ``b̄ = w`` and ``K̄ += -(w xᵀ + x wᵀ)`` on ``K``'s lower triangle (for
    ``sum(log(diag(L)))``: ``K̄ += t̄ K⁻¹``, ``K⁻¹`` from ``potri``); the Cholesky pullback only
    sees ``L̄`` from other uses of ``L`` (none: it is gone).  Real 2-D ``K`` (``upper=False``).
    """
    if not any(op.prim == "rule_fwd" and _rule_name(op) == "numpy.linalg.cholesky" for op in g.ops):
        return g  # NOTE: before SciPy is imported (~0.2 s): most graphs factor nothing
    sla = _SciPy.linalg()
    if sla is None:
        return g
    done = 0
    while True:
        new = _rewrite_one_cholesky(g, sla)
        if new is None:
            break
        g, done = new, done + 1
    if not done:
        return g
    return g.replace(provenance=g.provenance + (f"after cholesky_consumers: rewrote the consumers of {done} factors",))


def _rewrite_one_cholesky(g: Graph, sla: Any) -> Graph | None:
    """The graph with the consumers of one Cholesky factor rewritten, or None when none can be."""
    if not any(op.prim == "rule_fwd" and _rule_name(op) == "numpy.linalg.cholesky" for op in g.ops):
        return None
    facts = structure(g)
    uses = _Uses(g)
    for chol in g.ops:
        if not _plain_call(chol, "numpy.linalg.cholesky", 1):
            continue
        low, state = chol.outs
        k = chol.args[0]
        fact = facts.get(low.id)
        pbc = uses.pullback.get(state.id)
        if pbc is None or fact is None or fact.factor_of != k or not _real_matrix(low.type) or k.type != low.type:
            continue
        users = list({id(u): u for u in uses.by.get(low.id, [])}.values())  # NOTE: solve(L, L) reads L twice
        m: _Solve | _LogDet | None  # (bound by both comprehensions)
        solves = [m for u in users if (m := _match_solve(u, low, uses)) is not None]
        logdets = [m for u in users if (m := _match_logdet(u, low, uses)) is not None]
        if solves or logdets:
            new = _rewrite(g, chol, pbc, solves, logdets, uses, sla)
            if new is not None:
                return new
    return None


def _rewrite(g: Graph, chol: Op, pbc: Op, solves: list[_Solve], logdets: list[_LogDet], uses: _Uses,
             sla: Any) -> Graph | None:

    low = chol.outs[0]
    dt, (n, _) = cast(ArrayT, low.type).dtype, cast(ArrayT, low.type).shape  # a real matrix
    em = _Emitter(g, chol.loc)
    zero: set[int] = set()  # cotangents of L that the rewrite no longer computes
    drop: set[int] = set()  # ids of the pullback ops replaced
    at: dict[int, list[Op]] = {}  # id(op) -> the ops emitted in its place
    terms: list[tuple[int, Var]] = []  # (+1: t̄ K⁻¹ | -1: w xᵀ + x wᵀ) on K's lower triangle
    true, no_check = _c(True), (("check_finite", _c(False)),)
    for s in solves:
        x2, g2 = s.fwd.outs[0], s.pb_outer.args[1]
        at[id(s.fwd)] = [Op("scipy.linalg.cho_solve", ((low, true), s.b), no_check, (x2,), sla.cho_solve, s.fwd.loc)]
        bbar = uses.cot(s.pb_inner, (1,))
        w = bbar if bbar is not None else em.var(dt, cast(ArrayT, x2.type).shape)
        new = [em.op(sla.cho_solve, "scipy.linalg.cho_solve", ((low, true), g2), w, no_check)]
        if len(cast(ArrayT, x2.type).shape) == 1:
            left, right = em.var(dt, (n, 2)), em.var(dt, (2, n))
            new += [em.op(np.stack, "numpy.stack", ((w, x2),), left, (("axis", _c(1)),)),
                    em.op(np.stack, "numpy.stack", ((x2, w),), right, (("axis", _c(0)),))]
        else:
            m = cast(ArrayT, x2.type).shape[1]
            left, both = em.var(dt, (n, 2 * m)), em.var(dt, (n, 2 * m))
            right = em.var(dt, (2 * m, n))
            new += [em.op(np.concatenate, "numpy.concatenate", ((w, x2),), left, (("axis", _c(1)),)),
                    em.op(np.concatenate, "numpy.concatenate", ((x2, w),), both, (("axis", _c(1)),)),
                    em.op(np.swapaxes, "numpy.swapaxes", (both, _c(-1), _c(-2)), right)]
        p = em.var(dt, (n, n))
        new.append(em.op(np.matmul, "numpy.matmul", (left, right), p))
        at[id(s.pb_outer)] = new
        terms.append((-1, p))
        pb: Op | None  # an Op here, one that may be missing below
        for pb in (s.pb_outer, s.pb_inner):
            drop.add(id(pb))
            zero.update(o.id for o in pb.outs if o != bbar and o != uses.cot(s.pb_outer, (1,)))
    kinv: Var | None = None
    order = {id(op): i for i, op in enumerate(g.ops)}
    # NOTE: K^-1 is computed where the first of these pullbacks runs (the last log det in the forward)
    for ld in sorted(logdets, key=lambda ld: order[id(ld.pb_sum)]):
        new = []
        if kinv is None:
            kinv = em.var(dt, (n, n))
            new.append(em.op(cho_inverse, "irad.rules.decomp_rules.cho_inverse", (low,), kinv))
        gk = em.var(dt, (n, n))
        new.append(em.op(operator.mul, "operator.mul", (ld.pb_sum.args[1], kinv), gk))
        at[id(ld.pb_sum)] = new
        terms.append((1, gk))
        gld = uses.cot(ld.pb_sum, (0,))
        pbl = uses.only(gld)
        pbd = uses.only(uses.cot(pbl, (0,))) if pbl is not None else None
        for pb in (ld.pb_sum, pbl, pbd):
            assert pb is not None
            drop.add(id(pb))
        zero.add(uses.cot(pbd, (0,)).id)  # type: ignore[union-attr]
    return _emit(g, em, pbc, at, drop, zero, terms, n, dt)


_LINEAR_IN_ZERO = frozenset({"numpy.transpose", "numpy.swapaxes", "numpy.matrix_transpose", "numpy.linalg.cholesky"})


def _emit(g: Graph, em: _Emitter, pbc: Op, at: dict[int, list[Op]], drop: set[int], zero: set[int],
          terms: list[tuple[int, Var]], n: int, dt: str) -> Graph | None:
    """Rebuild ``g``: the emitted ops in place of the replaced ones, zero cotangents of ``L``
    dropped from their sums (a transpose's or the Cholesky pullback of a zero is zero), and
    ``K̄`` = the Cholesky pullback's (if any remains) + the direct terms, on the lower triangle."""
    env: dict[int, Any] = {}
    ops: list[Op] = []

    def sub(a: Any) -> Any:
        return env.get(a.id, a) if isinstance(a, Var) else a

    def is_zero(a: Any) -> bool:
        return isinstance(a, Var) and a.id in zero

    def materialise(v: Var, loc: Loc | None) -> None:
        t = v.type
        if not isinstance(t, ArrayT) or t.scalar:
            raise _Abort(f"a zero {t}")
        ops.append(Op("numpy.zeros", (_c(t.shape),), (("dtype", _c(t.dtype)),), (v,), np.zeros, loc))
        zero.discard(v.id)

    def rebuilt(op: Op) -> Op:
        return Op(op.prim, tuple(map_atoms(a, sub) for a in op.args),
                  tuple((k, map_atoms(v, sub)) for k, v in op.kwargs), op.outs, op.fn, op.loc, op.unpack)

    try:
        for op in g.ops:
            if id(op) in at:
                ops.extend(rebuilt(o) for o in at[id(op)])
                continue
            if id(op) in drop:
                continue
            op = rebuilt(op)
            if op is not pbc and op.prim == "operator.add" and len(op.args) == 2 and not op.kwargs and \
                    len(op.outs) == 1 and any(map(is_zero, op.args)):
                a, b = op.args
                if is_zero(a) and is_zero(b):
                    zero.add(op.out.id)
                    continue
                other = b if is_zero(a) else a
                if getattr(other, "type", None) == op.out.type:
                    env[op.out.id] = other
                    continue
            if op.prim == "pullback" and len(op.args) == 2 and is_zero(op.args[1]) and \
                    _rule_name(op) in _LINEAR_IN_ZERO and (pbc.args[0] != op.args[0]):
                zero.update(o.id for o in op.outs)
                continue
            if pbc.args[0] == op.args[0] and op.prim == "pullback":
                ops.extend(_combine(op, em, terms, n, dt, is_zero(op.args[1])))
                continue
            for v in op.inputs:
                if is_zero(v):
                    materialise(v, op.loc)
            ops.append(op)
        outputs = tuple(map_atoms(o, sub) for o in g.outputs)
        for o in outputs:
            if is_zero(o):
                materialise(o, None)
    except _Abort:
        return None
    return g.replace(ops=tuple(ops), outputs=outputs)


class _Abort(Exception):
    """This rewrite does not apply after all; keep the graph."""


def _combine(pbc: Op, em: _Emitter, terms: list[tuple[int, Var]], n: int, dt: str, gone: bool) -> list[Op]:
    """``K̄``: the Cholesky pullback (unless its ``L̄`` is zero) plus the direct terms, weighted
    onto ``K``'s lower triangle (1 below the diagonal, 1/2 on it: ``tril(S) + tril(S, -1)`` of
    their symmetric part ``S``, whose 1/2 cancels)."""
    if len(pbc.outs) != 1:
        raise _Abort("a Cholesky pullback without one output")
    kbar = pbc.outs[0]
    ops: list[Op] = []
    acc: Var | None = None
    for sign, v in terms:
        if acc is None and sign > 0:
            acc = v
            continue
        nxt = em.var(dt, (n, n))
        if acc is None:
            ops.append(em.op(operator.neg, "operator.neg", (v,), nxt))
        else:
            ops.append(em.op(operator.add if sign > 0 else operator.sub,
                             "operator.add" if sign > 0 else "operator.sub", (acc, v), nxt))
        acc = nxt
    assert acc is not None
    weights = Const((np.tri(n, k=-1) + 0.5 * np.eye(n)).astype(dt), ArrayT(dt, (n, n)), "cholesky triangle weights")
    if gone:
        ops.append(em.op(operator.mul, "operator.mul", (acc, weights), kbar))
        return ops
    direct, k0 = em.var(dt, (n, n)), Var(em.next, kbar.type, kbar.hint)
    em.next += 1
    ops.append(Op(pbc.prim, pbc.args, pbc.kwargs, (k0,), pbc.fn, pbc.loc, pbc.unpack))
    ops.append(em.op(operator.mul, "operator.mul", (acc, weights), direct))
    ops.append(em.op(operator.add, "operator.add", (k0, direct), kbar))
    return ops



# ---- rewrite: one LU factorisation per general matrix ---------------------------------------
#
# The helpers below are what a rewritten graph calls.  Each takes the matrix ``a`` as well as its
# factor: their rules differentiate with respect to ``a`` (the factor is a non-differentiable
# cache), so the generated program can itself be traced and differentiated (second order).


def lu_factor(a: Any) -> tuple[Any, Any, int]:
    """``(lu, piv, info)`` of a real square matrix: LAPACK ``getrf``, what
    ``scipy.linalg.lu_factor(a, check_finite=False)`` runs, without its warning for an exactly
    singular matrix (``info > 0``): the consumers decide, as numpy's do (``solve``/``inv`` raise
    ``LinAlgError``, ``det`` is 0, ``slogdet`` is ``(0, -inf)``)."""
    (getrf,) = _SciPy.linalg().lapack.get_lapack_funcs(("getrf",), (a,))
    lu, piv, info = getrf(a, overwrite_a=False)
    if info < 0:
        raise ValueError(f"lu_factor: illegal value in argument {-info} of getrf")
    return lu, piv, int(info)


def lu_solve(a: Any, factor: tuple[Any, Any, int], b: Any, trans: int) -> Any:
    """``solve(a, b)`` (``trans=0``) or ``solve(aᵀ, b)`` (``trans=1``) from ``factor = lu_factor(a)``."""
    lu, piv, info = factor
    if info > 0:
        raise np.linalg.LinAlgError("Singular matrix")
    return _SciPy.linalg().lu_solve((lu, piv), b, trans=trans, check_finite=False)


def lu_slogdet(a: Any, factor: tuple[Any, Any, int]) -> tuple[Any, Any]:
    """``numpy.linalg.slogdet(a)`` from ``factor = lu_factor(a)``, in numpy's convention: the sign
    ±1 from the pivots and the diagonal's signs, ``log|det|`` summed in order along the diagonal;
    ``(0, -inf)`` for an exactly singular matrix; scalars of ``a``'s dtype."""
    lu, piv, info = factor
    t = lu.dtype.type
    if info > 0:
        return t(0.0), t(-np.inf)
    d = np.diagonal(lu)
    flips = np.count_nonzero(d < 0) + np.count_nonzero(piv != np.arange(len(piv)))
    return t(-1.0 if flips % 2 else 1.0), np.add.accumulate(np.log(np.abs(d)))[-1]


def lu_det(a: Any, factor: tuple[Any, Any, int]) -> Any:
    """``numpy.linalg.det(a)`` from ``factor = lu_factor(a)``: ``sign * exp(logabsdet)``, as numpy
    computes it (0 for an exactly singular matrix)."""
    sign, logdet = lu_slogdet(a, factor)
    return sign * np.exp(logdet)


def _inv_t(a: Any, factor: tuple[Any, Any, int]) -> Any:
    return lu_solve(a, factor, np.eye(np.shape(a)[-1], dtype=factor[0].dtype), 1)


def _lu_solve_fwd(a: Any, factor: Any, b: Any, trans: int) -> tuple[Any, Any]:
    x = lu_solve(a, factor, b, trans)
    return x, (a, factor, x, trans)


def _lu_solve_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    """``x = op(A)⁻¹ b``: b gets ``op(A)⁻ᵀ g``; A gets ``-gb xᵀ`` (``op(A) = A``) or ``-x gbᵀ`` (``Aᵀ``)."""
    a, factor, x, trans = s
    gb = lu_solve(a, factor, g, 1 - trans)
    xm = x[:, None] if np.ndim(x) == 1 else x
    gm = gb[:, None] if np.ndim(gb) == 1 else gb
    ga = -(gm @ xm.T) if trans == 0 else -(xm @ gm.T)
    return ga, None, gb, None


def _lu_slogdet_fwd(a: Any, factor: Any) -> tuple[Any, Any]:
    return lu_slogdet(a, factor), (a, factor)


def _lu_slogdet_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    a, factor = s
    glog = g[1] if g is not None else None
    if glog is None:
        return np.zeros_like(a), None
    return glog * _inv_t(a, factor), None


def _lu_det_fwd(a: Any, factor: Any) -> tuple[Any, Any]:
    y = lu_det(a, factor)
    return y, (a, factor, y)


def _lu_det_pullback(s: Any, g: Any) -> tuple[Any, ...]:
    a, factor, y = s
    return (g * y) * _inv_t(a, factor), None


def _register_lu_rules() -> None:
    from irad.rules.registry import defrule, non_differentiable, qualname
    non_differentiable(lu_factor)
    defrule(lu_solve, _lu_solve_fwd, _lu_solve_pullback)
    defrule(lu_slogdet, _lu_slogdet_fwd, _lu_slogdet_pullback)
    defrule(lu_det, _lu_det_fwd, _lu_det_pullback)
    _LU_NAMES.update({f: qualname(f) for f in (lu_factor, lu_solve, lu_slogdet, lu_det)})


_LU_NAMES: dict[Any, str] = {}
_register_lu_rules()
_LU_CONSUMERS = frozenset({"numpy.linalg.solve", "numpy.linalg.inv", "numpy.linalg.det", "numpy.linalg.slogdet"})
_LU_FACTOR_T = OpaqueT("lu_factor")


def _written(g: Graph) -> Callable[[int], bool]:
    """``written(id)``: may the Var ``id`` share memory with a value some op of ``g`` updates in
    place (``add_into``, ``out=``)?  Union-find over the views of each value (no fact survives
    a write, and no factor is shared across one)."""
    parent: dict[int, int] = {}  # union-find over "may share memory"
    mutated: list[int] = []

    def root(i: int) -> int:
        while parent.get(i, i) != i:
            i = parent[i]
        return i

    for op in g.ops:
        name, args, kw, outs = _primal(op)
        if name in _VIEWS and args and isinstance(args[0], Var):
            for o in outs:
                parent[root(o.id)] = root(args[0].id)
        if name in _IN_PLACE and args and isinstance(args[0], Var):
            mutated.append(args[0].id)
        out = kw.get("out")
        if out is not None:
            found: list[Var] = []
            map_atoms(out, lambda a: found.append(a) if isinstance(a, Var) else a)
            mutated.extend(v.id for v in found)
    dead = {root(i) for i in mutated}
    return lambda i: bool(dead) and root(i) in dead


def _lu_consumer(op: Op, defs: dict[int, Op]) -> tuple[Var, int] | None:
    """``(A, trans)`` when ``op`` solves with, inverts or takes the determinant of the real 2-D
    square matrix ``A`` (``trans=1``: of ``Aᵀ``, transposes of ``A``'s last two axes), else None."""
    if op.prim not in _LU_CONSUMERS or op.kwargs or not op.args or not isinstance(op.args[0], Var):
        return None
    m = op.args[0]
    if not _real_matrix(m.type) or m.type.shape[0] < 1:
        return None
    if op.prim == "numpy.linalg.solve":
        if len(op.args) != 2 or len(op.outs) != 1 or op.unpack or not _rhs_ok(m, op.args[1], op.out, _REAL):
            return None
    elif len(op.args) != 1:
        return None
    elif op.prim == "numpy.linalg.inv":
        if len(op.outs) != 1 or op.unpack or op.out.type != m.type:
            return None
    elif op.prim == "numpy.linalg.det":
        if len(op.outs) != 1 or op.unpack:
            return None
    elif len(op.outs) != 2 or op.unpack is not True:
        return None
    trans = 0
    while True:  # through transposes (``A.T.T`` is ``A``)
        t = defs.get(m.id)
        if t is None or t.prim == "rule_fwd" or len(t.outs) != 1 or not t.args or not isinstance(t.args[0], Var) \
                or t.args[0].type != m.type or not _flips_last_two(*_primal(t)[:3]):
            return m, trans
        m, trans = t.args[0], 1 - trans


def shared_lu(g: Graph) -> Graph:
    """Factor a general matrix once for all its solves, inverses and determinants.

    ``scipy.linalg``'s LAPACK ``getrf``/``getrs``; without SciPy the graph stays as is.

    Before: ``%2 = numpy.linalg.solve(%0, %1); %3, %4 = numpy.linalg.slogdet(%0); %5 =
    numpy.swapaxes(%0, -1, -2); %6 = numpy.linalg.solve(%5, %c)``.
    After: ``%7 = lu_factor(%0)`` (LAPACK ``getrf``), ``%2 = lu_solve(%0, %7, %1, 0)``, ``%3, %4 =
    lu_slogdet(%0, %7)``, ``%6 = lu_solve(%0, %7, %c, 1)`` (``inv``: ``lu_solve`` of the identity;
    ``det``: ``lu_det``).  Real 2-D square matrices read by two or more such ops (or already
    factored by an earlier round), none triangular (``triangular_solves`` has those) and none
    that may share memory with a value updated in place.
    """
    if sum(op.prim in _LU_CONSUMERS for op in g.ops) < 2:
        if not any(op.prim in _LU_CONSUMERS for op in g.ops) or \
                not any(op.outs and op.outs[0].type == _LU_FACTOR_T for op in g.ops):
            return g  # NOTE: before SciPy is imported (~0.2 s): most graphs solve nothing
    if _SciPy.linalg() is None:
        return g
    defs = {o.id: op for op in g.ops for o in op.outs}
    factored: dict[int, Var] = {}  # A's id -> its factor, from an earlier round
    groups: dict[int, list[tuple[Op, int]]] = {}
    mats: dict[int, Var] = {}
    for op in g.ops:
        if op.fn is lu_factor and len(op.args) == 1 and isinstance(op.args[0], Var) and len(op.outs) == 1:
            factored.setdefault(op.args[0].id, op.outs[0])
        hit = _lu_consumer(op, defs)
        if hit is not None:
            groups.setdefault(hit[0].id, []).append((op, hit[1]))
            mats[hit[0].id] = hit[0]
    if not groups:
        return g
    facts = structure(g)
    written = _written(g)

    def general(a: Var, cs: list[tuple[Op, int]]) -> bool:
        return not written(a.id) and not facts.get(a.id, Fact()).tri and \
            not any(facts.get(op.args[0].id, Fact()).tri or written(op.args[0].id) for op, _ in cs)

    chosen = {i: cs for i, cs in groups.items() if (len(cs) >= 2 or i in factored) and general(mats[i], cs)}
    if not chosen:
        return g
    nxt = 1 + max([v.id for v in g.inputs] + [o.id for op in g.ops for o in op.outs] + [0])
    first = {id(cs[0][0]): i for i, cs in chosen.items() if i not in factored}
    role = {id(op): (i, trans) for i, cs in chosen.items() for op, trans in cs}
    ops: list[Op] = []
    eyes: dict[int, Const] = {}
    for op in g.ops:
        if id(op) in first:
            i = first[id(op)]
            factored[i] = Var(nxt, _LU_FACTOR_T, "lu")
            nxt += 1
            ops.append(Op(_LU_NAMES[lu_factor], (mats[i],), (), (factored[i],), lu_factor, op.loc))
        if id(op) not in role:
            ops.append(op)
            continue
        i, trans = role[id(op)]
        a, fac = mats[i], factored[i]
        if op.prim == "numpy.linalg.solve":
            ops.append(Op(_LU_NAMES[lu_solve], (a, fac, op.args[1], _c(trans)), (), op.outs, lu_solve, op.loc))
        elif op.prim == "numpy.linalg.inv":
            t = cast(ArrayT, a.type)  # a real matrix (_lu_consumer)
            eye = eyes.get(i)
            if eye is None:  # NOTE: one Const per matrix: cse merges the inverses as it merged inv(A)s
                eye = eyes[i] = Const(np.eye(t.shape[0], dtype=t.dtype), ArrayT(t.dtype, t.shape), "identity")
            ops.append(Op(_LU_NAMES[lu_solve], (a, fac, eye, _c(trans)), (), op.outs, lu_solve, op.loc))
        elif op.prim == "numpy.linalg.det":
            ops.append(Op(_LU_NAMES[lu_det], (a, fac), (), op.outs, lu_det, op.loc))
        else:
            ops.append(Op(_LU_NAMES[lu_slogdet], (a, fac), (), op.outs, lu_slogdet, op.loc, op.unpack))
    n_new = len(first)
    note = f"after shared_lu: {n_new} LU factorisations shared by {sum(len(cs) for cs in chosen.values())} ops"
    return g.replace(ops=tuple(ops), provenance=g.provenance + (note,))
