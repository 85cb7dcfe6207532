"""Is a traced loss a sum (or a mean) of per-row terms?  A static check for ``irad.dask``.

``irad.dask`` evaluates a loss on chunks of its data arguments (contiguous blocks of rows: the
leading axis) and combines the chunks' values.  That gives the loss on the whole data only when
the loss is *decomposable over rows*:

- ``reduce="sum"``: ``total = sum_c loss(chunk_c)``, right iff ``loss(chunk) = a * sum_i r(row_i)``:
  additive over any partition of the rows, with no term that does not depend on the data (a
  regulariser ``0.01 * np.sum(w**2)`` would be counted once per chunk).
- ``reduce="mean"``: ``total = sum_c (n_c / N) * loss(chunk_c)``, right iff
  ``loss(chunk) = (1/n) * a * sum_i r(row_i) + C(params)``, ``n`` the chunk's row count.

``check_rows`` proves one of these forms by abstract interpretation of the forward graph: each
value gets a *form* (``Fixed``: independent of the data; ``Rows``: row ``i`` depends only on row
``i`` of the data; ``Red``: a linear combination of sums over rows; ``Bad``: none of these) and
each op a rule; whatever a rule cannot prove is ``Bad``, an error only if it reaches the output.

The row count enters a loss through ``len(X)``, ``X.shape[0]`` or ``np.mean``.  The tracer folds
``len(X)`` to a Python constant (``operator.truediv(%19, 10)``), so one trace cannot tell ``10`` the
row count from ``10`` a temperature.  ``check_rows`` therefore reads a second trace, ``g2``: the same
loss on every data argument stacked with itself (``2n`` rows), the other arguments unchanged
(``irad.dask`` always passes it).  The two programs must be the same op for op but for sizes along
axes of ``k*n`` entries; a constant equal in both is a plain number (even where it equals ``n``),
one that is ``2**k`` times larger in ``g2`` is ``n**k`` times a constant (``np.sum(r) / len(X)`` a
mean, ``lam / (2*len(X))`` a regulariser divided by the row count, whatever ``lam``), and one that
changes otherwise (``np.sqrt(len(X))``, ``len(X) - 1``) refuses the op that reads it.  The forms
track these powers of ``n`` (``exps``) so that a mean is told from a sum, and a data-independent
term divided by ``n`` (counted by every chunk with its own ``n``) from a constant of the parameters.

Without ``g2`` (a caller with one trace) the powers are guessed by value: a constant equal to
``k*n`` or ``1/(k*n)`` (``k`` in ``_MULTIPLES``) that multiplies or divides a value computed from
the data counts as ``n`` (or ``1/n``), and so does a divisor equal to ``k*n`` of a data-independent
value (``np.sum(w**2) / len(X)``).

Known limits (conservative, or documented guesses):

- with ``g2``, only two row counts are compared: a constant made from ``len(X)`` that happens to
  double (or halve) from ``n`` to ``2n`` without being a power of ``n`` (a branch on ``len(X)``
  choosing between two numbers) is taken for one; powers beyond ``n**±2`` are refused;
- without ``g2``: a hard-coded constant that happens to equal ``k*n`` or ``1/(k*n)`` is taken for
  the row count, one derived from ``len(X)`` in another way (``np.sqrt(len(X))``, ``len(X) - 1``,
  ``lam / len(X)`` folded into one constant) for a plain constant, and with ``n == 1`` powers of
  ``n`` cannot be told apart (sum and mean are both accepted);
- a Python loop over the rows, or a branch on ``len(X)``, gives the two traces different
  programs: refused, naming the first op that differs;
- a constant computed in the graph (from parameters) that has ``n`` entries along the row axis is
  taken to differ from row to row (with ``g2``: any value not computed from the data whose shape
  grows with the row count); ``np.einsum``, ``np.linalg`` on rows, in-place updates of data and
  all ops without a rule here are refused.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union, cast

import numpy as np

from .errors import RowsError
from .ir import GUARD_PRIMS, ArrayT, Const, Graph, Op, Var

# ---- forms ----------------------------------------------------------------------------------

#: powers k of the row count n a value is scaled by (n**k)
ZERO: frozenset[int] = frozenset({0})
NONE: frozenset[int] = frozenset()

#: a constant equal to k*n or 1/(k*n) for these k counts as n (or 1/n)
_MULTIPLES = (1, 2)

_HINT = ("write the loss as a sum (or a mean) of per-row terms, or compute what needs all the rows "
         "outside the chunked loss and pass it in as a parameter")
_ROW_COUNT_HINT = ("every chunk reads its own row count; pass the number the loss needs (the total number of "
                   "rows, say) in as a parameter, so that every chunk reads the same one")
_STRUCTURE_HINT = ("a Python loop over the rows (for i in range(len(X))) or a branch on len(X) makes a different "
                   "program for each chunk size; write the loss with whole-array operations (np.sum over the rows)")


@dataclass(frozen=True)
class Fixed:
    """Independent of the data (parameters, constants), scaled by ``n**k`` for ``k`` in ``exps``."""

    exps: frozenset[int] = ZERO


@dataclass(frozen=True)
class Rows:
    """An array whose axis ``ax`` (negative: counted from the end, as broadcasting aligns) has one
    entry per row, each depending only on that row of the data; scaled by ``n**k``, ``k`` in ``exps``."""

    ax: int
    exps: frozenset[int] = ZERO


@dataclass(frozen=True, eq=False)
class Red:
    """A linear combination of sums over rows, scaled by ``n**k`` (``k`` in ``exps``), plus a
    data-independent part scaled by ``n**k`` for ``k`` in ``const_exps`` (empty: no such part),
    first added by ``const_op``."""

    exps: frozenset[int]
    const_exps: frozenset[int] = NONE
    const_op: Op | None = None


@dataclass(frozen=True, eq=False)
class Bad:
    """Not decomposable: why, the op that made it so, and what the user can do."""

    reason: str
    op: Op | None
    hint: str = _HINT


Form = Union[Fixed, Rows, Red, Bad]
CONST = Fixed()


def _plus(a: frozenset[int], b: frozenset[int]) -> frozenset[int]:
    """Exponents of a product: every sum of one from each."""
    return frozenset(x + y for x in a for y in b)


def _neg(a: frozenset[int]) -> frozenset[int]:
    return frozenset(-x for x in a)


def _shift(f: Form, e: frozenset[int]) -> Form:
    """``f`` multiplied by a data-independent factor scaled by ``n**k``, ``k`` in ``e``."""
    if isinstance(f, Fixed):
        return Fixed(_plus(f.exps, e))
    if isinstance(f, Rows):
        return Rows(f.ax, _plus(f.exps, e))
    if isinstance(f, Red):
        return Red(_plus(f.exps, e), _plus(f.const_exps, e), f.const_op)
    return f


# ---- entry point ----------------------------------------------------------------------------


def check_rows(g: Graph, data: Sequence[int], reduce: str, fname: str = "loss", g2: Graph | None = None) -> int:
    """Raise irad.errors.RowsError unless g's one output is decomposable over the rows of the
    positional arguments `data`; return n, the row count (shape[0]) those arguments share.

    ``g2``: the same loss traced with every data argument stacked with itself along axis 0
    (``np.concatenate([X, X])``: ``2n`` rows) and the other arguments unchanged.  With it the
    powers of ``n`` in the constants are read from how they change between the traces (``irad.dask``
    always passes it); without it they are guessed by value (see the module docstring)."""
    if reduce not in ("sum", "mean"):
        raise RowsError(f"{fname}: reduce must be 'sum' or 'mean', got {reduce!r}")
    inputs = _data_inputs(g, data, fname)
    n = _row_count(inputs, fname)
    pair = None if g2 is None else _Pair(g, g2, data, n, fname)
    an = _Analysis(n, fname, pair)
    for v in inputs:
        an.forms[v.id] = Rows(-len(cast(ArrayT, v.type).shape))  # (_row_count checked: arrays)
    for i, op in enumerate(g.ops):
        if pair is not None:  # NOTE: op by op, so that the first problem met is the one reported
            pair.align(i)
        an.step(op)
    if pair is not None:
        pair.finish()
    _check_output(an, g, reduce)
    return n


def _data_inputs(g: Graph, data: Sequence[int], fname: str) -> list[Var]:
    """The graph inputs that come from the positional arguments ``data`` (as ``irad.api``
    maps argnums to inputs: the leaves of ``(args, kwargs)`` less the static ones)."""
    if not data:
        raise RowsError(f"{fname}: no data arguments given; say which positional arguments hold the rows")
    if g.in_tree is None:  # a graph made by hand: one input per positional argument
        trees_leaves = [1] * len(g.inputs)
        leaf_to_input = {i: i for i in range(len(g.inputs))}
    else:
        statics = {i for i, _ in g.statics}
        leaf_to_input = {}
        for i in range(g.in_tree.num_leaves):
            if i not in statics:
                leaf_to_input[i] = len(leaf_to_input)
        trees_leaves = [t.num_leaves for t in g.in_tree.children[0].children]
    starts = [0]
    for k in trees_leaves:
        starts.append(starts[-1] + k)
    found: list[Var] = []
    for a in data:
        if not 0 <= a < len(trees_leaves):
            raise RowsError(f"{fname}: data argument {a} is not one of its {len(trees_leaves)} positional arguments")
        mine = [g.inputs[leaf_to_input[j]] for j in range(starts[a], starts[a + 1]) if j in leaf_to_input]
        if not mine:
            raise RowsError(f"{fname}: data argument {a} holds no array; its rows cannot be split into chunks")
        found.extend(mine)
    return found


def _row_count(inputs: list[Var], fname: str) -> int:
    """The ``shape[0]`` every data input shares."""
    sizes = []
    for v in inputs:
        t = v.type
        if not isinstance(t, ArrayT) or not t.shape:
            raise RowsError(f"{fname}: data argument {v.hint or v} is {t}, not an array with rows "
                            "(a leading axis); pass arrays of one row per example")
        sizes.append(t.shape[0])
    if len(set(sizes)) > 1:
        desc = ", ".join(f"{v.hint or v}: {s}" for v, s in zip(inputs, sizes))
        raise RowsError(f"{fname}: the data arguments have different numbers of rows ({desc}); "
                        "every data argument must have one row per example")
    return sizes[0]


# ---- the analysis ---------------------------------------------------------------------------


class _Analysis:
    """The forms of the graph's Vars, computed op by op; ``pair``: ``g2`` aligned with the graph
    (None: one trace, the powers of ``n`` guessed by value)."""

    def __init__(self, n: int, fname: str, pair: _Pair | None = None) -> None:
        self.n, self.fname, self.pair = n, fname, pair
        self.forms: dict[int, Form] = {}
        self.producer: dict[int, Op] = {}

    def form(self, a: Any) -> Form:
        return self.forms.get(a.id, CONST) if isinstance(a, Var) else CONST

    def step(self, op: Op) -> None:
        ins = [self.form(v) for v in _op_vars(op)]
        if op.prim in GUARD_PRIMS:
            if any(f != CONST for f in ins):
                raise self.error(op, f"{op.prim} branches on a value computed from the data",
                                 "the branch taken on all the data may differ from the one taken on a "
                                 "chunk; compute the condition outside the loss, or use np.where")
            return
        if not op.outs:
            return
        out: Form | list[Form]
        bad = next((f for f in ins if isinstance(f, Bad)), None)
        odd = self.pair.odd.get(id(op)) if self.pair is not None else None
        if bad is not None:
            out = bad
        elif odd is not None:
            out = Bad(odd[0], op, odd[1])
        elif all(f == CONST for f in ins) and op.prim not in _ARITH and not self.scales(op):
            out = CONST
        else:
            out = self.apply(op)
        for i, o in enumerate(op.outs):
            self.forms[o.id] = self.sized(op, o, out[i] if isinstance(out, list) else out)
            self.producer[o.id] = op

    def apply(self, op: Op) -> Form | list[Form]:
        """The form of ``op``'s result by its rule; an op the rules do not understand is ``Bad``."""
        rule = _rule(op)
        if rule is not None:
            try:
                return rule(self, op)
            except (TypeError, ValueError, IndexError, AttributeError, AssertionError):
                pass  # (arguments of a shape no rule expects: conservative, as for an unknown op)
        return Bad(f"irad cannot tell whether {op.prim} keeps rows apart", op)

    def error(self, op: Op | None, reason: str, hint: str = _HINT) -> RowsError:
        return _refusal(self.fname, op, reason, hint)

    # -- what the second trace tells (each falls back to the one trace's guess without it) --

    def scales(self, op: Op) -> bool:
        """Does a constant ``op`` reads differ between the two traces (a size, or a power of ``n``)?"""
        return self.pair is not None and id(op) in self.pair.scaled

    def twin(self, obj: Any) -> Any:
        """What ``g2`` holds where the graph holds ``obj`` (a Const, or an array or a slice in one's
        value); ``_SAME`` where unknown (an object a rule made)."""
        return self.pair.twins.get(id(obj), _SAME) if self.pair is not None else _SAME

    def sized(self, op: Op, o: Var, f: Form) -> Form:
        """``f``, unless its shape grows with the row count where its rows are not: a value not
        computed row by row from the data (``w[0] * np.ones(len(X))``), or a per-row one along
        another axis (``r[:, None] * np.ones(len(X))``).  irad cannot tell how it weighs the rows,
        nor how a sum over it scales with their number."""
        if self.pair is None or isinstance(f, Bad):
            return f
        o2 = self.pair.vars.get(o.id)
        if o2 is None or o2.type == o.type:
            return f
        s1, s2 = list(_shape(o)), list(_shape(o2))
        if isinstance(f, Rows) and len(s1) == len(s2) >= -f.ax:
            del s1[f.ax], s2[f.ax]
            if s1 == s2:
                return f
        return Bad(f"{op.prim} makes a value whose shape grows with the row count ({o.type} with {self.n} rows, "
                   f"{o2.type} with {2 * self.n}) along an axis that does not hold the rows of the data", op,
                   "pass per-row weights in as a data argument, so that they are chunked with the rows")

    def operand_form(self, a: Any, op: Op) -> Form:
        """The form of an operand ``op`` reads as a number: a constant ``2**k`` times larger in
        ``g2`` than here is one the row count made, ``n**k`` times a number: ``Fixed({k})``."""
        if not isinstance(a, Const) or self.pair is None:
            return self.form(a)
        twin = self.twin(a)
        if twin is _SAME:
            return CONST
        k = None if twin is _AMBIGUOUS else _scaling(a.value, twin, self.n)
        if k == _VARIES or k == 0:
            return CONST  # (one that varies along the rows: the check that rows are not weighted refuses it)
        if k is None:
            return Bad(f"{op.prim} reads a constant that scales with the row count as neither n nor 1/n "
                       f"({_show(a.value)} with {self.n} rows, {_show(twin)} with {2 * self.n}: "
                       "np.sqrt(len(X)), len(X) - 1, ...?)", op, _ROW_COUNT_HINT)
        return Fixed(frozenset({int(k)}))

    def fits(self, v: Any, ax: int) -> bool:
        """Does ``v`` have an axis ``ax`` (from the end) of length ``n`` (``2n`` in ``g2``)?"""
        shape = _shape(v)
        if not (len(shape) >= -ax > 0 and shape[ax] == self.n):
            return False
        if self.pair is None:
            return True
        v2 = self.pair.vars.get(v.id) if isinstance(v, Var) else None
        return v2 is not None and _shape(v2)[ax] == 2 * self.n

    def rows(self, op: Op, ax: int, exps: frozenset[int]) -> Form:
        """``Rows(ax, exps)`` for every out of ``op``, if each has ``n`` entries on that axis."""
        if all(self.fits(o, ax) for o in op.outs):
            return Rows(ax, exps)
        return Bad(f"irad cannot tell where the rows of {op.prim}'s result are", op)

    def uniform(self, a: Any, axis: int) -> bool:
        """Can ``a`` (a data-independent operand) broadcast along the row axis at ``axis`` without
        weighting rows by their position in the chunk: length 1 there, or all entries equal (in
        both traces)?"""
        shape = _shape(a)
        if len(shape) < -axis:
            return True
        if isinstance(a, Const):
            values = [a.value]
            if self.pair is not None:
                twin = self.twin(a)
                if twin is _AMBIGUOUS:
                    return False
                if twin is not _SAME:
                    values.append(twin)
            return all(_uniform_along(np.asarray(v), axis) for v in values)
        if shape[axis] != 1:
            return False
        v2 = self.pair.vars.get(a.id) if self.pair is not None and isinstance(a, Var) else None
        return self.pair is None or (v2 is not None and _shape(v2)[axis] == 1)

    def is_arange(self, e: Any) -> bool:
        """Is the index entry ``e`` ``np.arange(len(X))`` (``np.arange(2n)`` in ``g2``)?"""
        if not _is_arange(e, self.n):
            return False
        twin = self.twin(e)
        return self.pair is None or (isinstance(twin, np.ndarray) and _is_arange(twin, 2 * self.n))

    def full(self, e: Any) -> bool:
        """A slice that takes every row, in order: ``:``, ``0:``, ``:n`` (``:2n`` in ``g2``)."""
        if not _full(e, self.n):
            return False
        if self.pair is None or e.stop is None:
            return True
        twin = self.twin(e)
        return isinstance(twin, slice) and twin.stop == 2 * self.n

    def same_column(self, e: np.ndarray) -> bool:
        """A constant index entry that picks the same entry in every row (0-d, or ``n`` equal
        entries: ``2n`` in ``g2``)."""
        if e.ndim == 0:
            return True  # (one that differs between the traces is refused by the alignment)
        if e.shape != (self.n,) or not _uniform_along(e, 0):
            return False
        twin = self.twin(e)
        return self.pair is None or (isinstance(twin, np.ndarray) and twin.shape == (2 * self.n,)
                                     and _uniform_along(twin, 0))


def _uniform_along(v: np.ndarray, axis: int) -> bool:
    """Are ``v``'s entries equal along ``axis`` (trivially so if it has no such axis, or length 1)?"""
    if v.ndim < -axis or v.shape[axis] <= 1:
        return True
    return bool(np.all(v == np.take(v, [0], axis=axis)))


def _refusal(fname: str, op: Op | None, reason: str, hint: str = _HINT) -> RowsError:
    where = f"\n  at {op.loc}" if op is not None and op.loc is not None else ""
    return RowsError(f"{fname} cannot be evaluated chunk by chunk of rows: {reason}{where}\n  {hint}")


def _n_power(v: Any, n: int) -> int:
    """+1 if ``v`` is ``k*n``, -1 if it is ``1/(k*n)``, else 0 (``k`` in ``_MULTIPLES``)."""
    if n < 2 or isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return 0
    x = float(v)
    for k in _MULTIPLES:
        if x == k * n:
            return 1
        if math.isclose(x * k * n, 1.0, rel_tol=1e-12):
            return -1
    return 0


def _op_vars(op: Op) -> list[Var]:
    """The Vars an op reads, leaving out its attributes (keywords starting with ``_``)."""
    found: list[Var] = []
    _collect(op.args, found)
    _collect(tuple(v for k, v in op.kwargs if not k.startswith("_")), found)
    return found


def _collect(a: Any, found: list[Var]) -> None:
    if isinstance(a, Var):
        found.append(a)
    elif isinstance(a, (tuple, list)):
        for x in a:
            _collect(x, found)
    elif isinstance(a, dict):
        for x in a.values():
            _collect(x, found)


def _shape(a: Any) -> tuple[int, ...]:
    t = getattr(a, "type", None)
    if isinstance(t, ArrayT):
        return t.shape
    if isinstance(a, Const) and isinstance(a.value, np.ndarray):
        return cast(tuple[int, ...], a.value.shape)
    return ()


def _value(a: Any) -> Any:
    """A Const's value (nested structures of atoms too)."""
    if isinstance(a, Const):
        return a.value
    if type(a) in (tuple, list):
        return type(a)(_value(x) for x in a)
    return a


def _kwargs(op: Op) -> dict[str, Any]:
    return {k: v for k, v in op.kwargs if not k.startswith("_")}


def _arg(op: Op, name: str, pos: int, default: Any) -> Any:
    """An argument given by keyword or at position ``pos`` (an atom), else ``default``."""
    kw = _kwargs(op)
    if name in kw:
        return kw[name]
    return op.args[pos] if len(op.args) > pos else default


def _mixes(forms: Sequence[Form], op: Op) -> Bad | None:
    """A per-row value combined with a sum over rows (``X - X.mean(0)``)."""
    if any(isinstance(f, Rows) for f in forms) and any(isinstance(f, Red) for f in forms):
        return Bad(f"{op.prim} combines a per-row value with a sum (or mean) over the rows of the chunk, "
                   "which differs from chunk to chunk", op,
                   "compute the statistic over all the data outside the loss and pass it in as a parameter")
    return None


def _nonlinear_red(op: Op) -> Bad:
    return Bad(f"{op.prim} is a non-linear function of a sum over rows", op,
               "only sums of per-row terms (times constants) add up over chunks; "
               "compute it outside the chunked loss")


def _nonlinear_n(op: Op) -> Bad:
    return Bad(f"{op.prim} is a non-linear function of a value scaled by the row count (len of the data)", op)


# ---- elementwise ops ------------------------------------------------------------------------

_ARITH = {
    "operator.add": "add", "operator.sub": "add", "operator.neg": "neg", "operator.pos": "neg",
    "operator.mul": "mul", "operator.truediv": "div", "operator.pow": "pow",
    "numpy.add": "add", "numpy.subtract": "add", "numpy.negative": "neg", "numpy.positive": "neg",
    "numpy.multiply": "mul", "numpy.divide": "div", "numpy.true_divide": "div", "numpy.power": "pow",
}

_ELEMENTWISE = frozenset({
    "operator.floordiv", "operator.mod", "operator.abs", "operator.eq", "operator.ne", "operator.lt",
    "operator.le", "operator.gt", "operator.ge", "operator.and_", "operator.or_", "operator.xor",
    "operator.invert", "builtins.abs", "numpy.where", "numpy.clip", "numpy.ndarray.clip",
    "numpy.nan_to_num", "numpy.round", "numpy.around", "numpy.ndarray.round", "numpy.real", "numpy.imag",
    "numpy.angle", "numpy.sinc", "numpy.i0", "numpy.ndarray.conj", "numpy.ndarray.conjugate",
})

_NOT_ELEMENTWISE_KW = frozenset({"where", "out"})
_NUMBERS = (int, float, complex, np.ndarray, np.generic)


def _operands(an: _Analysis, op: Op, kind: str | None) -> list[tuple[Any, Form]]:
    """The array and number operands of an elementwise op, with their forms.  With ``g2``, a
    constant the row count made is ``n**k`` times a number (``an.operand_form``), whatever the op.
    Without, by value: in a product or a quotient, a constant equal to ``k*n`` or ``1/(k*n)`` counts
    as ``n**±1`` when the other factor depends on the data, and a divisor equal to ``k*n`` always
    (``np.sum(w**2) / len(X)``)."""
    atoms: list[Any] = []
    for a in list(op.args) + list(_kwargs(op).values()):
        if isinstance(a, Var) or (isinstance(a, Const) and isinstance(a.value, _NUMBERS)):
            atoms.append(a)
    if an.pair is not None:
        return [(a, an.operand_form(a, op)) for a in atoms]
    operands = [(a, an.form(a)) for a in atoms]
    if kind not in ("mul", "div") or len(operands) != 2:
        return operands
    data = [not isinstance(f, Fixed) for _, f in operands]
    for i, (a, f) in enumerate(operands):
        k = _n_power(a.value, an.n) if isinstance(a, Const) else 0
        if k and (data[1 - i] or (kind == "div" and i == 1 and k == 1)):
            operands[i] = (a, Fixed(frozenset({k})))
    return operands


def _rows_axis(an: _Analysis, op: Op, operands: list[tuple[Any, Form]]) -> int | Bad:
    """The row axis all per-row operands share, once the others are checked not to weight rows."""
    axes = {f.ax for _, f in operands if isinstance(f, Rows)}
    if len(axes) > 1:
        return Bad(f"{op.prim} combines values whose rows lie on different axes (an outer product of rows)", op)
    (ax,) = axes
    for a, f in operands:
        if isinstance(f, Fixed) and not an.uniform(a, ax):
            return Bad(f"{op.prim} combines each row with a constant that differs from row to row, "
                       "so its value depends on a row's position in the chunk", op,
                       "pass per-row weights in as a data argument, so that they are chunked with the rows")
    return ax


def _elementwise(an: _Analysis, op: Op) -> Form:
    """A row-wise function of its operands (numpy ufuncs, comparisons, np.where, np.clip)."""
    if op.prim == "numpy.where" and len(op.args) == 1:
        return Bad("numpy.where with one argument finds positions of rows", op)
    kind = _ARITH.get(op.prim)
    if any(k in _NOT_ELEMENTWISE_KW for k in _kwargs(op)):
        return Bad(f"irad cannot tell whether {op.prim} with where= or out= keeps rows apart", op)
    operands = _operands(an, op, kind)
    forms = [f for _, f in operands]
    bad = next((f for f in forms if isinstance(f, Bad)), None) or _mixes(forms, op)
    if bad:
        return bad
    combined = _combine(kind, op, operands)
    if isinstance(combined, Bad) or not isinstance(combined, Rows):
        return combined
    ax = _rows_axis(an, op, operands)
    return ax if isinstance(ax, Bad) else an.rows(op, ax, combined.exps)


def _combine(kind: str | None, op: Op, operands: list[tuple[Any, Form]]) -> Form:
    """The form of an elementwise result, its row axis still to be checked (``Rows(0, exps)``)."""
    forms = [f for _, f in operands]
    if kind in ("add", "neg"):
        return _add(forms, op)
    if kind == "mul" and len(forms) == 2:
        return _mul(forms[0], forms[1], op)
    if kind == "div" and len(forms) == 2:
        inv = _inverse(forms[1], op)
        return inv if isinstance(inv, Bad) else _mul(forms[0], inv, op)
    if kind == "pow" and len(operands) == 2:
        return _pow(operands[0][1], operands[1], op)
    return _nonlinear(forms, op)


def _like(forms: Sequence[Form], exps: frozenset[int]) -> Form:
    return Rows(0, exps) if any(isinstance(f, Rows) for f in forms) else Fixed(exps)


def _add(forms: list[Form], op: Op) -> Form:
    reds = [f for f in forms if isinstance(f, Red)]
    fixed = [f for f in forms if isinstance(f, Fixed)]
    if not reds:
        return _like(forms, frozenset().union(*(f.exps for f in forms)))  # type: ignore[union-attr]
    exps = frozenset().union(*(r.exps for r in reds))
    const_exps = frozenset().union(*(r.const_exps for r in reds), *(f.exps for f in fixed))
    const_op = next((r.const_op for r in reds if r.const_op is not None), None)
    return Red(exps, const_exps, const_op or (op if fixed else None))


def _mul(a: Form, b: Form, op: Op) -> Form:
    if isinstance(a, Red) and isinstance(b, Red):
        return _nonlinear_red(op)
    if isinstance(a, Red) or isinstance(b, Red):
        red, other = (a, b) if isinstance(a, Red) else (b, a)
        assert isinstance(other, Fixed)
        return _shift(red, other.exps)
    return _like((a, b), _plus(a.exps, b.exps))  # type: ignore[union-attr]


def _inverse(f: Form, op: Op) -> Form:
    """The form of ``1/f``."""
    if isinstance(f, Red):
        return _nonlinear_red(op)
    assert isinstance(f, (Fixed, Rows))
    if len(f.exps) != 1:
        return _nonlinear_n(op)
    if isinstance(f, Rows) and f.exps != ZERO:
        return _nonlinear_n(op)
    return _like((f,), _neg(f.exps))


def _pow(base: Form, expo: tuple[Any, Form], op: Op) -> Form:
    atom, ef = expo
    if isinstance(base, Red) or isinstance(ef, Red):
        return _nonlinear_red(op)
    assert isinstance(base, (Fixed, Rows)) and isinstance(ef, (Fixed, Rows))
    if ef.exps != ZERO:
        return _nonlinear_n(op)
    if base.exps == ZERO:
        return _like((base, ef), ZERO)
    k = atom.value if isinstance(atom, Const) else None
    if isinstance(ef, Fixed) and len(base.exps) == 1 and isinstance(k, (int, float, np.integer, np.floating)) \
            and float(k).is_integer():
        (e,) = base.exps
        return _like((base,), frozenset({e * int(k)}))
    return _nonlinear_n(op)


def _nonlinear(forms: list[Form], op: Op) -> Form:
    if any(isinstance(f, Red) for f in forms):
        return _nonlinear_red(op)
    if any(f.exps != ZERO for f in forms):  # type: ignore[union-attr]
        return _nonlinear_n(op)
    return _like(forms, ZERO)


def _astype(an: _Analysis, op: Op) -> Form:
    """A cast: to a float type it is the identity, to an integer one a row-wise function."""
    dtype = _value(_arg(op, "dtype", 1, None))
    try:
        floating = np.dtype(dtype).kind in "fc"
    except TypeError:
        floating = False
    return _identity(an, op) if floating else _elementwise(an, op)


def _identity(an: _Analysis, op: Op) -> Form:
    """A copy or conversion of its first argument (``np.asarray``, ``float``, ``stop_gradient``)."""
    if any(an.form(v) != CONST for v in _op_vars(op) if v is not op.args[0]):
        return Bad(f"irad cannot tell whether {op.prim} keeps rows apart", op)
    f = an.form(op.args[0])
    return an.rows(op, f.ax, f.exps) if isinstance(f, Rows) else f


# ---- reductions -----------------------------------------------------------------------------

#: kind: "sum"/"mean" (linear), "rowwise" (any other reduction), "scan" (keeps the shape); the
#: position of the axis argument; the default axis ("all": every axis, flattening)
_REDUCTIONS: dict[str, tuple[str, int, Any]] = {}


def _table(kind: str, pos: int, default: Any, *prims: str) -> None:
    for p in prims:
        _REDUCTIONS[p] = (kind, pos, default)
        if p.startswith("numpy.") and p.count(".") == 1:
            _REDUCTIONS["numpy.ndarray." + p[6:]] = (kind, pos, default)


_table("sum", 1, "all", "numpy.sum", "numpy.nansum")
_table("mean", 1, "all", "numpy.mean")
_table("rowwise", 1, "all", "numpy.max", "numpy.min", "numpy.amax", "numpy.amin", "numpy.prod", "numpy.std",
       "numpy.var", "numpy.median", "numpy.ptp", "numpy.argmax", "numpy.argmin", "numpy.any", "numpy.all",
       "numpy.nanmax", "numpy.nanmin", "numpy.nanmean", "numpy.nanstd", "numpy.nanvar", "numpy.nanmedian",
       "numpy.nanprod", "numpy.count_nonzero", "scipy.special.logsumexp")
_table("rowwise", 2, "all", "numpy.percentile", "numpy.quantile", "numpy.nanpercentile", "numpy.nanquantile",
       "numpy.linalg.norm")
_table("scan", 1, -1, "numpy.sort", "numpy.argsort")
_table("scan", 1, "all", "numpy.cumsum", "numpy.cumprod", "numpy.nancumsum", "numpy.nancumprod",
       "scipy.special.softmax", "scipy.special.log_softmax", "numpy.flip")
_table("scan", 2, -1, "numpy.diff")

_LINEAR_SCANS = frozenset({"numpy.cumsum", "numpy.ndarray.cumsum", "numpy.diff", "numpy.flip"})
_REDUCE_KW_REFUSED = frozenset({"where", "initial", "b", "weights", "return_sign", "prepend", "append", "out"})


def _reduction(an: _Analysis, op: Op) -> Form:
    kind, pos, default = _REDUCTIONS[op.prim]
    x = op.args[0]
    fx = an.form(x)
    if any(an.form(v) != CONST for v in _op_vars(op) if v is not x) or \
            any(k in _REDUCE_KW_REFUSED for k in _kwargs(op)):
        return Bad(f"irad cannot tell whether {op.prim} with these arguments keeps rows apart", op)
    linear = kind in ("sum", "mean") or op.prim in _LINEAR_SCANS
    if isinstance(fx, Red):
        return fx if linear else _nonlinear_red(op)
    if isinstance(fx, Fixed):
        return fx if linear else _nonlinear_n(op)
    assert isinstance(fx, Rows)
    ndim = len(_shape(x))
    axes = _axes(_arg(op, "axis", pos, default), ndim)
    if axes is None:
        return Bad(f"irad cannot tell which axes {op.prim} reduces", op)
    p = ndim + fx.ax
    if p in axes:
        return _over_rows(op, kind, fx)
    if not linear and fx.exps != ZERO:
        return _nonlinear_n(op)
    keep = kind == "scan" or bool(_value(_kwargs(op).get("keepdims", False)))
    return an.rows(op, fx.ax if keep else fx.ax + sum(1 for a in axes if a > p), fx.exps)


def _axes(axis: Any, ndim: int) -> tuple[int, ...] | None:
    """The axes an ``axis`` argument names (``"all"`` or ``None``: every axis)."""
    if isinstance(axis, Var):
        return None
    axis = _value(axis)
    if axis is None or axis == "all":
        return tuple(range(ndim))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    try:
        return tuple(int(a) % ndim for a in items) if ndim else ()
    except (TypeError, ValueError):
        return None


def _over_rows(op: Op, kind: str, fx: Rows) -> Form:
    """A reduction whose axes include the row axis."""
    if kind == "sum":
        return Red(fx.exps)
    if kind == "mean":
        return Red(_plus(fx.exps, frozenset({-1})))
    hint = _HINT
    if op.prim == "numpy.linalg.norm":
        hint = "write np.sum(r**2) (a sum over rows) instead of np.linalg.norm(r)**2"
    return Bad(f"{op.prim} over the row axis does not add up over chunks of rows", op, hint)


# ---- matmul ---------------------------------------------------------------------------------


def _matmul(an: _Analysis, op: Op) -> Form:
    """``a @ b`` (also ``np.dot``, ``ndarray.dot`` on 1-D and 2-D operands)."""
    if len(op.args) != 2 or _kwargs(op):
        return Bad(f"irad cannot tell whether {op.prim} with these arguments keeps rows apart", op)
    a, b = op.args
    fa, fb = an.operand_form(a, op), an.operand_form(b, op)
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:  # np.dot with a scalar: a product
        return _elementwise_as(an, op, "operator.mul")
    bad = next((f for f in (fa, fb) if isinstance(f, Bad)), None) or _mixes((fa, fb), op)
    if bad:
        return bad
    if isinstance(fa, Red) or isinstance(fb, Red):
        return _mul(fa, fb, op)  # linear in the sum, as a product with a constant is
    if len(sa) > 2 or len(sb) > 2:
        return Bad(f"irad cannot tell whether {op.prim} on arrays of more than 2 dimensions keeps rows apart", op)
    assert isinstance(fa, (Fixed, Rows)) and isinstance(fb, (Fixed, Rows))
    exps = _plus(fa.exps, fb.exps)
    if isinstance(fa, Fixed) and isinstance(fb, Fixed):
        return Fixed(exps)
    a_sums = isinstance(fa, Rows) and fa.ax == -1  # a's rows are on the contracted axis
    b_sums = isinstance(fb, Rows) and (len(sb) == 1 or fb.ax == -2)
    if isinstance(fa, Rows) and isinstance(fb, Rows):
        if a_sums and b_sums:
            return Red(exps)
        return Bad(f"{op.prim} multiplies rows with other rows (an outer product such as X @ X.T)", op)
    if a_sums or b_sums:
        weights, axis = (b, 0) if a_sums else (a, -1)
        if an.uniform(weights, axis):
            return Red(exps)
        return Bad(f"{op.prim} sums rows with weights that differ from row to row, "
                   "so its value depends on a row's position in the chunk", op,
                   "pass per-row weights in as a data argument, so that they are chunked with the rows")
    out_ndim = len(_shape(op.outs[0]))
    return an.rows(op, -out_ndim if isinstance(fa, Rows) else -1, exps)


def _elementwise_as(an: _Analysis, op: Op, prim: str) -> Form:
    return _elementwise(an, Op(prim, op.args, (), op.outs, op.fn, op.loc))


# ---- shapes ---------------------------------------------------------------------------------


def _others_const(an: _Analysis, op: Op) -> bool:
    x = op.args[0] if op.args else None
    return all(an.form(v) == CONST for v in _op_vars(op) if v is not x)


def _permute(an: _Analysis, op: Op) -> Form:
    """Transposes (``.T``, ``np.transpose``, ``swapaxes``, ``moveaxis``): where does the row axis go?
    Found by applying the op to a stand-in array (no memory) whose axes have distinct lengths."""
    if not _others_const(an, op):
        return Bad(f"irad cannot tell whether {op.prim} with these arguments keeps rows apart", op)
    x = op.args[0]
    fx = an.form(x)
    if not isinstance(fx, Rows):
        return fx  # linear: a sum over rows stays one
    ndim = len(_shape(x))
    sizes = tuple(range(2, ndim + 2))
    dummy = np.lib.stride_tricks.as_strided(np.zeros(1), sizes, (0,) * ndim)
    try:
        out = op.fn(dummy, *_value(op.args[1:]), **{k: _value(v) for k, v in _kwargs(op).items()})  # type: ignore[misc]
        perm = [sizes.index(s) for s in np.shape(out)]
    except Exception:
        return Bad(f"irad cannot tell where {op.prim} moves the rows", op)
    p = ndim + fx.ax
    return an.rows(op, perm.index(p) - ndim, fx.exps)


def _reshape(an: _Analysis, op: Op) -> Form:
    """Reshapes in C order (``reshape``, ``ravel``, ``squeeze``, ``expand_dims``): rows stay apart
    when the result has an axis of length ``n`` with as many elements after it as the row axis had."""
    values = [_value(a) for a in op.args[1:]] + [_value(v) for v in _kwargs(op).values()]
    if not _others_const(an, op) or any(isinstance(v, str) and v != "C" for v in values):
        return Bad(f"irad cannot tell whether {op.prim} with these arguments keeps rows apart", op)
    x = op.args[0]
    fx = an.form(x)
    if not isinstance(fx, Rows):
        return fx
    shape, out = _shape(x), _shape(op.outs[0])
    after = math.prod(shape[len(shape) + fx.ax + 1:])
    for q in range(len(out)):
        if an.fits(op.outs[0], q - len(out)) and math.prod(out[q + 1:]) == after:
            return an.rows(op, q - len(out), fx.exps)
    return Bad(f"{op.prim} reshapes the rows together (a flattening across rows)", op,
               "keep the row axis apart: X.reshape(len(X), -1), y.reshape(-1, 1)")


def _broadcast_to(an: _Analysis, op: Op) -> Form:
    if not _others_const(an, op):
        return Bad(f"irad cannot tell whether {op.prim} with these arguments keeps rows apart", op)
    fx = an.form(op.args[0])
    return an.rows(op, fx.ax, fx.exps) if isinstance(fx, Rows) else fx


def _joined(an: _Analysis, op: Op) -> Form:
    """``np.concatenate``, ``np.stack``, ``np.hstack``, ``np.column_stack`` along other axes than rows."""
    seq = op.args[0] if op.args else ()
    if not isinstance(seq, (tuple, list)) or any(an.form(v) != CONST for v in _op_vars(op) if not _within(v, seq)):
        return Bad(f"irad cannot tell whether {op.prim} with these arguments keeps rows apart", op)
    items = [(a, an.operand_form(a, op)) for a in seq]
    forms = [f for _, f in items]
    bad = next((f for f in forms if isinstance(f, Bad)), None) or _mixes(forms, op)
    if bad:
        return bad
    if not any(isinstance(f, Rows) for f in forms):
        return _add(forms, op)  # linear, as a sum is
    positions = _joined_positions(op, [len(_shape(a)) for a in seq], forms)
    if isinstance(positions, str):
        return Bad(f"{op.prim} {positions}", op)
    p_in, p_out = positions
    for a, f in items:
        if isinstance(f, Fixed) and not an.uniform(a, p_in - len(_shape(a))):
            return Bad(f"{op.prim} joins rows with a constant that differs from row to row", op)
    exps = frozenset().union(*(f.exps for f in forms))  # type: ignore[union-attr]
    return an.rows(op, p_out - len(_shape(op.outs[0])), exps)


def _within(v: Var, seq: Any) -> bool:
    return any(x is v for x in seq)


def _joined_positions(op: Op, ndims: list[int], forms: list[Form]) -> tuple[int, int] | str:
    """The row axis's position in the joined arrays and in the result, or why it mixes rows."""
    rows = {(nd, nd + f.ax) for nd, f in zip(ndims, forms) if isinstance(f, Rows)}
    if op.prim == "numpy.column_stack":  # (1-D arrays become columns)
        return (0, 0) if {p for _, p in rows} == {0} else "joins arrays whose rows are not their first axis"
    if len(rows) > 1:
        return "joins arrays whose rows lie on different axes"
    ((ndim, p),) = rows
    axis = _value(_arg(op, "axis", 1, 1 if op.prim == "numpy.hstack" and ndim > 1 else 0))
    if not isinstance(axis, (int, np.integer)):
        return "joins along an axis irad cannot tell"
    if op.prim == "numpy.stack":
        k = int(axis) % (ndim + 1)
        return (p, p if k > p else p + 1)
    if int(axis) % ndim == p:
        return "joins along the row axis (the result's rows come from several arrays)"
    return (p, p)


# ---- indexing -------------------------------------------------------------------------------


def _getitem(an: _Analysis, op: Op) -> Form:
    x, idx = op.args[0], op.args[1]
    fx = an.form(x)
    entries = _index_entries(idx)
    if entries is None:
        return Bad(f"irad cannot tell which rows {op.prim} selects", op)
    index_forms = [an.form(e) for e in entries if isinstance(e, Var)]
    if any(isinstance(f, Red) or f.exps != ZERO for f in index_forms):  # type: ignore[union-attr]
        return Bad(f"{op.prim} indexes with a value computed from a sum over rows or the row count", op)
    if isinstance(fx, Rows):
        return _getitem_rows(an, op, fx, entries)
    if any(isinstance(f, Rows) for f in index_forms):
        return _gather(an, op, fx, entries)
    return fx  # a selection from a constant or from sums over rows: linear


def _index_entries(idx: Any) -> list[Any] | None:
    """The parts of an index, each a Var or a plain value; None where irad cannot tell."""
    if isinstance(idx, Var):
        return [idx]
    if isinstance(idx, Const):
        v = idx.value
        items = list(v) if type(v) is tuple else [v]
    elif type(idx) is tuple:
        items = [a.value if isinstance(a, Const) else a for a in idx]
    else:
        return None
    out: list[Any] = []
    for e in items:
        if isinstance(e, list):
            if any(isinstance(x, (Var, list, tuple)) for x in e):
                return None
            e = np.asarray(e)
        elif isinstance(e, (tuple, dict)):
            return None
        out.append(e)
    return out


def _consumes(e: Any) -> int:
    """How many axes of the indexed array an index entry consumes."""
    if e is None or e is Ellipsis:
        return 0
    if _is_bool(e):
        return len(_shape(e)) if isinstance(e, Var) else np.ndim(e)
    return 1


def _is_bool(e: Any) -> bool:
    if isinstance(e, Var):
        return isinstance(e.type, ArrayT) and e.type.dtype == "bool"
    return isinstance(e, np.ndarray) and e.dtype == np.bool_ or isinstance(e, (bool, np.bool_))


def _is_array(e: Any) -> bool:
    return isinstance(e, (Var, np.ndarray)) or _is_bool(e)


def _full(e: Any, n: int) -> bool:
    """A slice that takes every row, in order: ``:``, ``0:``, ``:n``."""
    return isinstance(e, slice) and e.start in (None, 0) and e.step in (None, 1) and e.stop in (None, n)


def _getitem_rows(an: _Analysis, op: Op, fx: Rows, entries: list[Any]) -> Form:
    """Indexing a per-row array: the row axis must be taken whole (``X[:, 0]``, ``X[:, 1:]``)."""
    ndim = len(_shape(op.args[0]))
    p = ndim + fx.ax
    if p == 0 and entries and an.is_arange(entries[0]):
        return _pick(an, op, fx, entries[1:])
    expanded = _expand(entries, ndim)
    if expanded is None:
        return Bad(f"irad cannot tell which rows {op.prim} selects", op)
    row_i, axis = None, 0
    for i, e in enumerate(expanded):
        k = _consumes(e)
        if axis <= p < axis + k:
            row_i = i
            break
        axis += k
    if row_i is None or not an.full(expanded[row_i]):
        return Bad(f"{op.prim} selects, reorders or masks rows, so its value depends on which rows a chunk holds", op,
                   "select the rows outside the loss (pass the selection in as data), or take every row: X[:, ...]")
    if any(isinstance(e, Var) and isinstance(an.form(e), Rows) for e in expanded):
        return Bad(f"{op.prim} indexes a per-row array with values from the data along another axis", op)
    pos = _row_position(expanded, row_i)
    out = _shape(op.outs[0])
    if not 0 <= pos < len(out):
        return Bad(f"irad cannot tell where the rows of {op.prim}'s result are", op)
    return an.rows(op, pos - len(out), fx.exps)


def _expand(entries: list[Any], ndim: int) -> list[Any] | None:
    """The index with its Ellipsis (or the missing trailing axes) spelt out as full slices."""
    consumed = sum(_consumes(e) for e in entries)
    ellipses = [i for i, e in enumerate(entries) if e is Ellipsis]
    if len(ellipses) > 1 or consumed > ndim:
        return None
    fill = [slice(None)] * (ndim - consumed)
    if ellipses:
        i = ellipses[0]
        return entries[:i] + fill + entries[i + 1:]
    return entries + fill


def _row_position(expanded: list[Any], row_i: int) -> int:
    """Where numpy puts the axis indexed by ``expanded[row_i]`` (a slice) in the result: basic
    entries keep their order; advanced ones (arrays, and ints among arrays) broadcast together, in
    place when adjacent, else first."""
    arrays = [i for i, e in enumerate(expanded) if _is_array(e)]
    advanced = [i for i, e in enumerate(expanded) if _is_array(e) or (arrays and _is_int(e))]
    basic_before = sum(1 for e in expanded[:row_i] if e is None or isinstance(e, slice))
    if not advanced:
        return basic_before
    bnd = max(1 if _is_bool(expanded[i]) else len(_shape(expanded[i])) if isinstance(expanded[i], Var)
              else np.ndim(expanded[i]) for i in advanced)
    if advanced != list(range(advanced[0], advanced[-1] + 1)):
        return bnd + basic_before
    return basic_before + (bnd if advanced[0] < row_i else 0)


def _is_int(e: Any) -> bool:
    return isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_))


def _is_arange(e: Any, n: int) -> bool:
    return isinstance(e, np.ndarray) and e.ndim == 1 and e.dtype.kind in "iu" and e.shape == (n,) \
        and bool(np.all(e == np.arange(n)))


def _pick(an: _Analysis, op: Op, fx: Rows, rest: list[Any]) -> Form:
    """``z[np.arange(len(z)), y]``: one entry from each row, chosen by that row's label."""
    for e in rest:
        if isinstance(e, slice) or _is_int(e):
            continue
        if isinstance(e, Var):
            f = an.form(e)
            if isinstance(f, Rows) and _shape(e) == (an.n,) and not _is_bool(e):
                continue
            if f == CONST and not _shape(e):
                continue
        if isinstance(e, np.ndarray) and not _is_bool(e) and an.same_column(e):
            continue
        return Bad(f"irad cannot tell which rows {op.prim} selects", op)
    out = _shape(op.outs[0])
    return an.rows(op, -len(out), fx.exps) if out else Bad(f"irad cannot tell which rows {op.prim} selects", op)


def _gather(an: _Analysis, op: Op, fx: Form, entries: list[Any]) -> Form:
    """``w[y]``: a constant table indexed by a per-row integer (labels): one entry per row."""
    (y,) = entries if len(entries) == 1 else (None,)
    fy = an.form(y) if isinstance(y, Var) else None
    if fx == CONST and isinstance(fy, Rows) and _shape(y) == (an.n,) and not _is_bool(y):
        out = _shape(op.outs[0])
        return an.rows(op, -len(out), ZERO)
    return Bad(f"{op.prim} indexes with values from the data in a way irad cannot follow", op)


def _take_along_axis(an: _Analysis, op: Op) -> Form:
    """``np.take_along_axis(z, idx, axis)`` with ``z`` and ``idx`` per-row, along another axis."""
    if len(op.args) < 2:
        return Bad(f"irad cannot tell whether {op.prim} keeps rows apart", op)
    a, idx = op.args[:2]
    fa, fi = an.form(a), an.form(idx)
    axis = _value(_arg(op, "axis", 2, None))
    if not (isinstance(fa, Rows) and isinstance(fi, Rows) and fa.ax == fi.ax and fi.exps == ZERO) \
            or not isinstance(axis, (int, np.integer)):
        return Bad(f"irad cannot tell whether {op.prim} keeps rows apart", op)
    ndim = len(_shape(a))
    if int(axis) % ndim == ndim + fa.ax:
        return Bad(f"{op.prim} along the row axis mixes rows", op)
    return an.rows(op, fa.ax, fa.exps)


# ---- dispatch and the output ----------------------------------------------------------------

Rule = Callable[[_Analysis, Op], "Form | list[Form]"]

_RULES: dict[str, Rule] = {
    "operator.getitem": _getitem,
    "operator.matmul": _matmul, "numpy.matmul": _matmul, "numpy.dot": _matmul, "numpy.ndarray.dot": _matmul,
    "numpy.ndarray.astype": _astype,
    "numpy.take_along_axis": _take_along_axis,
    "numpy.broadcast_to": _broadcast_to,
}
for _p in ("numpy.asarray", "numpy.array", "numpy.asanyarray", "numpy.ascontiguousarray", "numpy.copy",
           "numpy.ndarray.copy", "irad.primitives.stop_gradient", "builtins.float", "numpy.float64", "numpy.float32",
           "numpy.float16", "numpy.longdouble", "numpy.generic.item", "numpy.ndarray.item"):
    _RULES[_p] = _identity
for _p in ("numpy.transpose", "numpy.ndarray.transpose", "numpy.swapaxes", "numpy.ndarray.swapaxes",
           "numpy.moveaxis", "numpy.rollaxis", "numpy.matrix_transpose"):
    _RULES[_p] = _permute
for _p in ("numpy.reshape", "numpy.ndarray.reshape", "numpy.ravel", "numpy.ndarray.ravel", "numpy.ndarray.flatten",
           "numpy.squeeze", "numpy.ndarray.squeeze", "numpy.expand_dims", "numpy.atleast_1d", "numpy.atleast_2d",
           "numpy.atleast_3d"):
    _RULES[_p] = _reshape
for _p in ("numpy.concatenate", "numpy.stack", "numpy.hstack", "numpy.column_stack"):
    _RULES[_p] = _joined
for _p in _REDUCTIONS:
    _RULES[_p] = _reduction
for _p in set(_ARITH) | _ELEMENTWISE:
    _RULES[_p] = _elementwise


def _rule(op: Op) -> Rule | None:
    rule = _RULES.get(op.prim)
    if rule is None and isinstance(op.fn, np.ufunc) and len(op.outs) >= 1:
        return _elementwise  # numpy and scipy.special ufuncs: np.exp, np.maximum, expit, ...
    return rule


def _check_output(an: _Analysis, g: Graph, reduce: str) -> None:
    if len(g.outputs) != 1:
        raise an.error(None, f"it returns {len(g.outputs)} values, not one scalar loss")
    out = g.outputs[0]
    op = an.producer.get(out.id) if isinstance(out, Var) else None
    f = an.form(out)
    if isinstance(f, Bad):
        raise an.error(f.op, f.reason, f.hint)
    shape = _shape(out)
    if math.prod(shape) != 1:
        raise an.error(op, f"it returns a value of shape {shape}, not a scalar loss")
    if isinstance(f, Fixed):
        raise an.error(op, "its result does not depend on the data arguments",
                       "say which positional arguments hold the rows (data=...)")
    if isinstance(f, Rows):
        raise an.error(op, "its result is a per-row value, not a sum or mean over rows")
    assert isinstance(f, Red)
    (_check_sum if reduce == "sum" else _check_mean)(an, op, f)


def _check_sum(an: _Analysis, op: Op | None, f: Red) -> None:
    if f.const_exps:
        raise an.error(f.const_op, f"with reduce='sum', {f.const_op.prim if f.const_op else 'it'} adds a term "
                       "that does not depend on the data, which would be counted once per chunk",
                       "add that term (a regulariser?) outside the chunked loss, or, if the data term is a "
                       "mean over rows, use reduce='mean'")
    if (an.n == 1 and an.pair is None) or f.exps == ZERO:  # (one trace of one row: no power of n shows)
        return
    if f.exps == frozenset({-1}):
        raise an.error(op, "with reduce='sum', the loss is a mean over rows (divided by the row count), "
                       "not a sum", "use reduce='mean'")
    raise an.error(op, _scaled(f.exps), "write the loss as a plain sum over rows (reduce='sum') or a mean "
                   "(reduce='mean')")


def _check_mean(an: _Analysis, op: Op | None, f: Red) -> None:
    untold = an.n == 1 and an.pair is None  # (one trace of one row: no power of n shows)
    if not untold and f.const_exps - ZERO:
        raise an.error(f.const_op, f"{f.const_op.prim if f.const_op else 'it'} adds a data-independent term "
                       "scaled by the row count, which would be counted once per chunk",
                       "leave the row count out of the regulariser, or add it outside the chunked loss")
    if untold or f.exps == frozenset({-1}):
        return
    if f.exps == ZERO:
        hint = ("use reduce='sum'" if not f.const_exps else
                "divide the data term by len(X) (a mean) for reduce='mean', or use reduce='sum' and add "
                "the data-independent term outside the chunked loss")
        raise an.error(op, "with reduce='mean', the loss is a sum over rows, not a mean", hint)
    raise an.error(op, _scaled(f.exps), "write the loss as a mean over rows (reduce='mean') or a plain sum "
                   "(reduce='sum')")


def _scaled(exps: frozenset[int]) -> str:
    powers = ", ".join(f"n**{k}" for k in sorted(exps))
    if len(exps) == 1:
        return f"its sum over rows is scaled by {powers} (n the row count): neither a sum (n**0) nor a mean (n**-1)"
    return f"its sums over rows are scaled by different powers of the row count n ({powers})"


# ---- two traces: the constants the row count made -------------------------------------------------

_SAME = object()       # (no counterpart recorded: the same value in both traces)
_AMBIGUOUS = object()  # (one object of g standing for different values of g2)
_VARIES = "varies"     # (an array with axes of the row count whose entries differ along them)

#: a constant ``2**k`` times larger in ``g2`` is ``n**k`` times a number, for these ``k`` (0 first:
#: zeros are plain numbers)
_POWERS = (0, -1, 1, -2, 2)
#: how far (relatively) a float constant may be from ``2**k`` times its counterpart
_POWER_RTOL = 1e-12


class _Pair:
    """``g2`` (the loss traced on the data stacked with itself: ``2n`` rows) aligned with ``g``.

    The two must be one program but for sizes along axes of ``k*n`` entries and the constants the
    row count made (``len(X)`` is ``n`` in one, ``2n`` in the other).  Ops are aligned one at a
    time (``align``), as the analysis reaches them: ``vars`` maps each Var of ``g`` to its
    counterpart, ``twins`` each constant (a Const, an array or a slice in one's value) to its
    value in ``g2``; ``scaled`` holds the ops some of whose constants differ, and ``odd`` why (and
    a hint) an op's result is ``Bad``: it reads one that differs where no rule can tell what that
    does, or its shape changes in a way the row count does not explain (a boolean mask).
    """

    def __init__(self, g: Graph, g2: Graph, data: Sequence[int], n: int, fname: str) -> None:
        self.g, self.g2, self.n, self.fname = g, g2, n, fname
        self.vars: dict[int, Var] = {}
        self.twins: dict[int, Any] = {}
        self.scaled: set[int] = set()
        self.odd: dict[int, tuple[str, str]] = {}
        self._inputs(data)

    def _inputs(self, data: Sequence[int]) -> None:
        """The inputs pair up: the data arguments' with twice the rows, the others' unchanged."""
        g, g2, n = self.g, self.g2, self.n
        how = ("trace g2 with every data argument stacked with itself (np.concatenate([X, X])) and the other "
               "arguments unchanged")
        try:
            rows2 = _row_count(_data_inputs(g2, data, self.fname), self.fname)
        except RowsError as e:
            raise RowsError(f"{e} (in the second trace, g2; {how})") from None
        if len(g.inputs) != len(g2.inputs) or rows2 != 2 * n:
            raise RowsError(f"{self.fname}: the second trace (g2) has {len(g2.inputs)} inputs and {rows2} rows, "
                            f"not {len(g.inputs)} and {2 * n}; {how}")
        data_ids = {v.id for v in _data_inputs(g, data, self.fname)}
        for v, v2 in zip(g.inputs, g2.inputs):
            t = v.type
            if v.id in data_ids and isinstance(t, ArrayT):
                t = ArrayT(t.dtype, (2 * n,) + t.shape[1:], t.scalar)
            if v2.type != t:
                raise RowsError(f"{self.fname}: input {v.hint or v} of the second trace (g2) is {v2.type}, "
                                f"not {t}; {how}")
            self.vars[v.id] = v2

    def align(self, i: int) -> None:
        """Pair ``g``'s op ``i`` with ``g2``'s; RowsError where the programs differ."""
        op, n = self.g.ops[i], self.n
        if i >= len(self.g2.ops):
            raise self._structure(op, f"with {2 * n} rows the program has {len(self.g2.ops)} operations, "
                                      f"with {n} rows {len(self.g.ops)}")
        op2 = self.g2.ops[i]
        if op.prim != op2.prim:
            raise self._structure(op, f"{op.prim} with {n} rows, {op2.prim} with {2 * n}")
        if [k for k, _ in op.kwargs] != [k for k, _ in op2.kwargs] or len(op.outs) != len(op2.outs) \
                or op.unpack != op2.unpack or not _same_fn(op.fn, op2.fn):
            raise self._structure(op, f"{op.prim} is called differently with {2 * n} rows")
        self._args(op, op.args, op2.args, ())
        for (k, a), (_, b) in zip(op.kwargs, op2.kwargs):
            self._args(op, a, b, (k,))
        for o, o2 in zip(op.outs, op2.outs):
            self.vars[o.id] = o2
            if not _types_match(o.type, o2.type, n):
                self.odd.setdefault(id(op), (f"the shape of {op.prim}'s result depends on the rows in a way irad "
                                             f"cannot follow ({o.type} with {n} rows, {o2.type} with {2 * n})", _HINT))

    def finish(self) -> None:
        """After the last op: ``g2`` has no more, and returns the counterparts of ``g``'s outputs."""
        g, g2, n = self.g, self.g2, self.n
        if len(g2.ops) > len(g.ops):
            raise self._structure(g2.ops[len(g.ops)], f"with {2 * n} rows the program has {len(g2.ops)} "
                                                      f"operations, with {n} rows {len(g.ops)}")
        if len(g.outputs) != len(g2.outputs):
            raise self._structure(None, f"it returns {len(g.outputs)} values with {n} rows, "
                                        f"{len(g2.outputs)} with {2 * n}")
        for a, b in zip(g.outputs, g2.outputs):
            if isinstance(a, Var) and not (isinstance(b, Var) and self._is_twin(a, b)):
                raise self._structure(None, f"it returns another value with {2 * n} rows")

    def _structure(self, op: Op | None, detail: str) -> RowsError:
        return _refusal(self.fname, op, f"the program's structure depends on the number of rows ({detail})",
                        _STRUCTURE_HINT)

    def _is_twin(self, a: Var, b: Var) -> bool:
        a2 = self.vars.get(a.id)
        return a2 is not None and a2.id == b.id

    def _args(self, op: Op, a: Any, b: Any, path: tuple[Any, ...]) -> None:
        """Pair the arguments ``a`` (of ``g``'s op) and ``b`` (of ``g2``'s) at ``path``."""
        if isinstance(a, Var):
            if not (isinstance(b, Var) and self._is_twin(a, b)):
                raise self._structure(op, f"{op.prim} reads other values with {2 * self.n} rows")
        elif isinstance(b, Var) or isinstance(a, Const) != isinstance(b, Const):
            raise self._structure(op, f"{op.prim} reads other values with {2 * self.n} rows")
        elif isinstance(a, Const):
            self._record(a, b.value)
            self._constant(op, a.value, b.value, path)
        elif type(a) in (tuple, list) and type(b) is type(a) and len(a) == len(b):
            for j, (x, y) in enumerate(zip(a, b)):
                self._args(op, x, y, path + (j,))
        elif type(a) is dict and type(b) is dict and list(a) == list(b):
            for k in a:
                self._args(op, a[k], b[k], path + (k,))
        else:
            self._constant(op, a, b, path)

    def _constant(self, op: Op, v1: Any, v2: Any, path: tuple[Any, ...]) -> None:
        """A constant of ``g`` (``v1``) and its counterpart: which differ, and whether the rule of
        ``op`` reads one that differs at ``path`` in a way it can follow."""
        self._record_values(v1, v2)
        if _equal(v1, v2):
            return
        self.scaled.add(id(op))
        if not _readable(_reads(op, path), v1, v2, self.n):
            self.odd.setdefault(id(op), (f"{op.prim} reads a constant that depends on the row count "
                                         f"({_show(v1)} with {self.n} rows, {_show(v2)} with {2 * self.n}) "
                                         "where irad cannot tell what that does to the rows", _ROW_COUNT_HINT))

    def _record(self, obj: Any, twin: Any) -> None:
        prev = self.twins.get(id(obj), _SAME)
        if prev is _SAME:
            self.twins[id(obj)] = twin
        elif prev is not twin and not _equal(prev, twin):
            self.twins[id(obj)] = _AMBIGUOUS

    def _record_values(self, v1: Any, v2: Any) -> None:
        """The twins of the arrays and slices in a constant's value (which index rules look up)."""
        if isinstance(v1, (np.ndarray, slice)):
            self._record(v1, v2)
        elif type(v1) in (tuple, list) and type(v2) is type(v1) and len(v1) == len(v2):
            for x, y in zip(v1, v2):
                self._record_values(x, y)


def _same_fn(f1: Any, f2: Any) -> bool:
    """The same callable (a closure made anew by each trace counts if its code is the same)."""
    if f1 is f2:
        return True
    try:
        if f1 == f2:
            return True
    except Exception:  # noqa: BLE001 -- (an object whose == fails is not known equal)
        return False
    code1, code2 = getattr(f1, "__code__", None), getattr(f2, "__code__", None)
    return code1 is not None and code1 == code2


def _types_match(t1: Any, t2: Any, n: int) -> bool:
    """Equal types, but for sizes ``d`` in ``g`` that are ``2d`` in ``g2`` (``d`` a multiple of ``n``)."""
    if t1 == t2:
        return True
    if not (isinstance(t1, ArrayT) and isinstance(t2, ArrayT)) or (t1.dtype, t1.scalar) != (t2.dtype, t2.scalar):
        return False
    return _row_axes(t1.shape, t2.shape, n) is not None


def _row_axes(s1: tuple[int, ...], s2: tuple[int, ...], n: int) -> tuple[int, ...] | None:
    """The axes along which shape ``s2`` (in ``g2``) is twice ``s1`` (a multiple of ``n``), the
    others equal; None where the shapes differ otherwise."""
    if len(s1) != len(s2):
        return None
    axes = tuple(i for i, (a, b) in enumerate(zip(s1, s2)) if a != b)
    if all(_doubled_size(s1[i], s2[i], n) for i in axes):
        return axes
    return None


def _doubled_size(a: Any, b: Any, n: int) -> bool:
    return _is_int(a) and _is_int(b) and a > 0 and a % n == 0 and b == 2 * a


def _equal(a: Any, b: Any) -> bool:
    """The same value (arrays by dtype, shape and entries, NaN equal to NaN)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and \
            bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(_equal(a[k], b[k]) for k in a)
    if type(a) is slice:
        return _equal(a.start, b.start) and _equal(a.stop, b.stop) and _equal(a.step, b.step)
    if isinstance(a, (float, np.floating)) and math.isnan(a) and math.isnan(b):
        return True
    try:
        eq = a == b
    except Exception:  # noqa: BLE001 -- (an object whose == fails is not known equal)
        return False
    return bool(eq) if isinstance(eq, (bool, np.bool_)) else False


def _reads(op: Op, path: tuple[Any, ...]) -> str:
    """How the rule of ``op`` reads the argument at ``path``, where a constant may differ between
    the traces: ``"operand"`` (a number: its power of ``n`` is its form), ``"index"`` (arrays and
    slices whose sizes grow with the rows), ``"shape"`` (sizes, checked against the result),
    ``"ignored"`` (guards: only their inputs matter); ``""``: nowhere."""
    if op.prim in GUARD_PRIMS:
        return "ignored"
    head = path[0] if path else None
    if isinstance(head, str) and head.startswith("_"):
        return ""  # (an attribute of the op)
    rule = _rule(op)
    if rule in (_elementwise, _matmul) and len(path) == 1:
        return "operand"
    if rule is _joined and len(path) == 2 and head == 0:
        return "operand"
    if rule is _getitem and head == 1:
        return "index"
    if rule in (_reshape, _broadcast_to) and path != (0,):
        return "shape"
    return ""


def _readable(how: str, v1: Any, v2: Any, n: int) -> bool:
    """Can a rule that reads the constant ``how`` follow it changing from ``v1`` to ``v2``?"""
    if how == "ignored":
        return True
    if how == "operand":  # (its form says how it scales; ones that do not scale as n**k are Bad)
        return isinstance(v1, _NUMBERS) and isinstance(v2, _NUMBERS)
    if how == "index":
        return _index_like(v1, v2, n)
    if how == "shape":
        return _size_like(v1, v2, n)
    return False


def _size_like(v1: Any, v2: Any, n: int) -> bool:
    """Sizes (ints, tuples of them) equal, or ``k*n`` in ``g`` and ``2k*n`` in ``g2``."""
    if type(v1) in (tuple, list):
        return type(v2) is type(v1) and len(v1) == len(v2) and all(_size_like(x, y, n) for x, y in zip(v1, v2))
    return _equal(v1, v2) or _doubled_size(v1, v2, n)


def _index_like(v1: Any, v2: Any, n: int) -> bool:
    """Index entries equal, or slices whose bounds are sizes of the rows, or arrays whose shapes
    grow along axes of the row count (``np.arange(len(X))``; the rules check their values)."""
    if _equal(v1, v2):
        return True
    if type(v1) is slice and type(v2) is slice:
        return all(_size_like(getattr(v1, f), getattr(v2, f), n) for f in ("start", "stop", "step"))
    if type(v1) is tuple and type(v2) is tuple:
        return len(v1) == len(v2) and all(_index_like(x, y, n) for x, y in zip(v1, v2))
    if isinstance(v1, np.ndarray) and isinstance(v2, np.ndarray):
        return v1.shape != v2.shape and _row_axes(v1.shape, v2.shape, n) is not None
    return False


def _scaling(v1: Any, v2: Any, n: int) -> int | str | None:
    """How a number (or an array of them) scales from ``v1`` (``n`` rows) to ``v2`` (``2n``): the
    ``k`` of ``v2 == 2**k * v1``, ``_VARIES`` for an array that grows along axes of the row count
    with entries that differ along them, None for any other change."""
    if _equal(v1, v2):
        return 0
    if type(v1) is not type(v2):
        return None
    a1, a2 = np.asarray(v1), np.asarray(v2)
    if a1.dtype.kind not in "iuf" or a2.dtype.kind not in "iuf":
        return None
    if a1.shape != a2.shape:
        axes = _row_axes(a1.shape, a2.shape, n)
        if axes is None:
            return None
        if not all(_uniform_along(a, ax) for a in (a1, a2) for ax in axes):
            return _VARIES
        a1, a2 = (a[tuple(slice(0, 1) if i in axes else slice(None) for i in range(a.ndim))] for a in (a1, a2))
    return _ratio_power(a1, a2)


def _ratio_power(a1: np.ndarray, a2: np.ndarray) -> int | None:
    """The ``k`` in ``_POWERS`` with ``a2 == 2**k * a1`` (ints exactly, floats to ``_POWER_RTOL``)."""
    exact = a1.dtype.kind in "iu" and a2.dtype.kind in "iu"
    with np.errstate(all="ignore"):
        for k in _POWERS:
            if exact:
                o1, o2 = a1.astype(object), a2.astype(object)
                if np.array_equal(o1 * 2 ** max(k, 0), o2 * 2 ** max(-k, 0)):
                    return k
            elif np.all(np.isfinite(a1)) and np.allclose(a2, a1 * 2.0 ** k, rtol=_POWER_RTOL, atol=0.0):
                return k
    return None


def _show(v: Any) -> str:
    """A constant, briefly, for a message."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, np.ndarray) and v.size > 4:
        return f"an array of shape {v.shape}"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- a numerical probe, behind the proof ------------------------------------------------------

#: rows of a chunk the probe evaluates the loss on (two halves of its first rows)
PROBE_ROWS = 2048
#: how far apart (relatively) the loss of the rows and the combination of its halves' may be
PROBE_RTOL = 1e-8


def probe_rows(loss: Callable[..., Any], args: Sequence[Any], data: Sequence[int], reduce: str,
               argnums: Sequence[int], fname: str = "loss", seed: int = 0) -> None:
    """Raise ``RowsError`` unless ``loss`` evaluated (with numpy, no irad) on the first rows of a
    chunk equals the combination of its values on their two halves: ``f(A∪B) = f(A) + f(B)``
    for ``"sum"``, ``n·f(A∪B) = n_A·f(A) + n_B·f(B)`` for ``"mean"``.

    ``check_rows`` proves the form of a trace but reads the row count only where it appears as a
    constant; the trace folds ``lam / (2 * len(X))`` into one number it cannot trace back to ``n``.
    The probe catches such a loss from its values, at the call's parameters and at perturbed ones
    (a regulariser vanishes at ``w = 0``).  It can only refuse, never accept: a loss whose
    evaluation fails or is not finite on the probe's rows is left to the proof.
    """
    n = min(PROBE_ROWS, min(np.shape(args[i])[0] for i in data))
    if n < 2:
        return
    m = n // 2
    rng = np.random.default_rng(seed)
    for params in (list(args), _perturbed(args, argnums, rng)):
        def at(lo: int, hi: int) -> float | None:
            cargs = list(params)
            for i in data:
                cargs[i] = np.asarray(args[i])[lo:hi]
            try:
                with np.errstate(all="ignore"):
                    v = complex(np.asarray(loss(*cargs)).reshape(()))
            except Exception:  # noqa: BLE001 -- the probe only refuses; a failure leaves it to the proof
                return None
            return v.real if v.imag == 0 and math.isfinite(v.real) else None

        whole, a, b = at(0, n), at(0, m), at(m, n)
        if whole is None or a is None or b is None:
            continue
        combined = a + b if reduce == "sum" else (m * a + (n - m) * b) / n
        scale = abs(whole) + abs(a) + abs(b)
        if abs(combined - whole) > _tolerance(params, data) * scale + 1e-300:
            what = "sum" if reduce == "sum" else "row-count weighted mean"
            raise RowsError(f"{fname}: the loss of {n} rows ({whole!r}) is not the {what} of its values on their "
                            f"two halves ({a!r}, {b!r} -> {combined!r}), so chunks cannot be combined; a term may "
                            f"depend on the row count in a way the trace does not show (lam / (2 * len(X)) is one "
                            f"constant in the trace), or the loss mixes rows. {_HINT}")


def _tolerance(args: Sequence[Any], data: Sequence[int]) -> float:
    """``PROBE_RTOL``, or more where the loss computes in a lower precision (float32 data and
    parameters round at ~1e-7: the halves' sum differs from the whole by that much)."""
    from .pytree import flatten
    kinds = [np.asarray(x).dtype for x in flatten(list(args))[0]
             if isinstance(x, (np.ndarray, np.generic)) and np.asarray(x).dtype.kind in "fc"]
    eps = max((np.finfo(d).eps for d in kinds if d != np.float64 and d != np.complex128), default=0.0)
    return max(PROBE_RTOL, 1000 * float(eps))


def _perturbed(args: Sequence[Any], argnums: Sequence[int], rng: np.random.Generator) -> list[Any]:
    """``args`` with the float leaves of the differentiated arguments moved by about their size."""
    from .pytree import tree_map

    def move(x: Any) -> Any:
        if isinstance(x, float):
            return x + (abs(x) + 0.1) * float(rng.standard_normal())
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            return x + (np.abs(x) + 0.1) * rng.standard_normal(cast(tuple[int, ...], x.shape)).astype(x.dtype)
        return x
    out = list(args)
    for a in argnums:
        out[a] = tree_map(move, args[a])
    return out
