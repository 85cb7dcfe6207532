"""Lowering: a Graph becomes straight-line Python source that reads like hand-written numpy.

Python operators stay operators (``a * b``: Python floats stay Python floats), ndarray methods
stay methods, numpy functions are spelled ``np.name``, rules are called by their names
(``numpy_tanh_fwd``), each backward line says what it computes, and array values are freed
(``del``) after their last use.

User values never become code (DESIGN.md §7).  Identifiers are irad's own ASCII names (a user's
name at most as a sanitised hint, ``ascii_name``); literals are only those irad spells itself
from exact ``int``/``float``/``complex``/``bool``/``None`` values and short plain ASCII strings
(``literal``); every other value (dict keys, odd strings, keyword names, docstrings, objects)
is a named constant in the program's namespace; comments are one sanitised line.
"""
from __future__ import annotations

import builtins
import keyword
import math
import operator
import re
import types
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import log
from .errors import GuardError
from .effects import is_impure_prim
from .loops import LOOP_PRIM, step_has_effect, use_step_compiler
from .ir import GUARD_PRIMS, ArrayT, Const, Graph, Op, OpaqueT, ScalarT, Var
from .pytree import flatten
from .weakcache import compile_source

_INFIX = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
          operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.matmul: "@",
          operator.lt: "<", operator.le: "<=", operator.eq: "==", operator.ne: "!=", operator.gt: ">",
          operator.ge: ">=", operator.and_: "&", operator.or_: "|", operator.xor: "^",
          operator.lshift: "<<", operator.rshift: ">>"}
_PREFIX = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}
#: Python's binding strength of each operator lowering writes (its grammar, weakest first)
_PREC = {"<": 6, "<=": 6, "==": 6, "!=": 6, ">": 6, ">=": 6, "|": 7, "^": 8, "&": 9, "<<": 10, ">>": 10,
         "+": 11, "-": 11, "*": 12, "@": 12, "/": 12, "//": 12, "%": 12, "**": 14}
_UNARY, _ATOM = 13, 16
_BUILTINS = {getattr(builtins, n): n for n in ("abs", "float", "complex", "int", "bool", "max", "min", "len",
                                               "round", "sum", "print", "divmod", "pow")}
_SHORT_DTYPE = {"float64": "f64", "float32": "f32", "int64": "i64", "bool": "b", "complex128": "c128"}
#: what a line computing a cotangent does, by operator (comments of the backward program)
_BAR_NOTES = {"operator.add": "  # accumulate", "irad.primitives.add_into": "  # accumulate in place",
              "irad.primitives.sum_to": "  # undo broadcasting", "numpy.sum": "  # undo broadcasting",
              "numpy.reshape": "  # undo broadcasting", "irad.primitives.zeros_like": "  # no gradient flows here",
              "irad.primitives.to_dtype": "  # cast to the argument's dtype", "builtins.float": "  # a float argument"}
_METHOD_TYPES = (types.MethodDescriptorType, types.WrapperDescriptorType)


@dataclass(frozen=True)
class Lowered:
    """Generated source, the namespace it runs in, and the compiled function."""

    source: str
    fn: Callable[..., Any]
    name: str


def _leaves(x: Any) -> list[Any]:
    return flatten(x)[0]


def _ascii_char(ch: str) -> str:
    """An ASCII spelling of one non-ASCII character: its base letter (``é`` -> ``e``), its name
    (``θ`` -> ``theta``) or its code point (``u53d8``); never the character itself."""
    base = "".join(c for c in unicodedata.normalize("NFKD", ch) if c.isascii())
    if base.isalnum():
        return base
    word = unicodedata.name(ch, "").rsplit(" ", 1)[-1].lower()
    if word.isascii() and word.isalpha():
        return word
    return f"u{ord(ch):x}" if ch.isalnum() else "_"


def ascii_name(hint: str) -> str:
    """A valid ASCII identifier made from a user's name, for generated source.

    Python NFKC-normalises identifiers in source, so a non-ASCII name could silently become
    another one (``x_ｂar`` is ``x_bar``, ``ﬁ`` is ``fi``).  ASCII names are their own normal form:
    two distinct names stay distinct once the emitter has made them unique.
    """
    s = hint if hint.isascii() else "".join(
        ch if ch.isascii() else _ascii_char(ch) for ch in unicodedata.normalize("NFKC", hint))
    s = re.sub(r"[^A-Za-z0-9_]", "_", s.replace("]", ""))[:64].strip("_") or "v"
    if s[0].isdigit():
        s = "v_" + s
    return s


def _is_name(s: Any) -> bool:
    """``s`` may be written in source as itself: an ASCII identifier that is no keyword."""
    return type(s) is str and s.isascii() and s.isidentifier() and not keyword.iskeyword(s)


def _hint(x: Any, default: str) -> str:
    """``x.__name__`` as a name hint when it is a string (a metaclass may make it anything)."""
    n = getattr(x, "__name__", None)
    return n if type(n) is str and n else default


def _comment(s: str) -> str:
    """One line of a comment: no line breaks, no bidi or other control characters."""
    return "".join(ch if ch.isprintable() else "?" for ch in s)[:120]


def literal(x: Any) -> str | None:
    """The source text of ``x`` where irad can spell it exactly and safely, else None.

    Only exact builtin types whose text has a fixed grammar qualify (a subclass could override
    ``__repr__``); ints past 64 bits and strings other than short plain ASCII without quotes or
    backslashes become namespace constants instead.
    """
    t = type(x)
    if x is None or t is bool:
        return repr(x)
    if t is int:
        return repr(x) if x.bit_length() <= 64 else None
    if t is float:
        return repr(x) if math.isfinite(x) else None
    if t is complex:
        return repr(x) if math.isfinite(x.real) and math.isfinite(x.imag) else None
    if t is str and len(x) <= 40 and x.isascii() and x.isprintable() and "'" not in x and "\\" not in x:
        return f"'{x}'"
    return None


class _Emitter:
    def __init__(self, g: Graph, guard_names: list[str]) -> None:
        self.g = g
        self.ns: dict[str, Any] = {"np": np, "_leaves": _leaves, "_GuardError": GuardError}
        self.obj_names: dict[int, str] = {}
        self.names: dict[int, str] = {}
        self.used: set[str] = set(self.ns) | set(_BUILTINS.values()) | set(dir(builtins))
        self.suffix: dict[str, int] = {}  # base name -> the next suffix to try
        self.lines: list[str] = []
        self.guard_names = guard_names
        #: Var id -> (expression, precedence) of a temporary written into its one reader (``inline_plan``)
        self.inlined: dict[int, tuple[str, int]] = {}
        self.prec = _ATOM  # the precedence of the expression ``call`` returned last
        #: Var id -> (list, index) of a loop's per-iteration out (``ys[3]``)
        self.listed: dict[int, tuple[str, int]] = {}

    # ---- names ----------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        base = ascii_name(base)
        if keyword.iskeyword(base):
            base += "_"
        name, k = base, self.suffix.get(base, 2)
        while name in self.used:  # NOTE: from the last suffix given: a hint shared by n values costs O(n), not O(n²)
            name, k = f"{base}_{k}", k + 1
        self.suffix[base] = k
        assert _is_name(name), name
        self.used.add(name)
        return name

    def var(self, v: Var) -> str:
        n = self.names.get(v.id)
        if n is None:
            base = v.hint or (f"s{v.id}" if v.type == OpaqueT("state") else f"t{v.id}")
            n = self.names[v.id] = self.fresh(base)
        return n

    def obj(self, x: Any, base: str) -> str:
        n = self.obj_names.get(id(x))
        if n is None:
            n = self.fresh(base)
            self.obj_names[id(x)] = n
            self.ns[n] = x
        return n

    def fn(self, f: Any, prim: str) -> str:
        if f in _BUILTINS if _hashable(f) else False:
            return _BUILTINS[f]
        parts = prim.split(".")
        if parts[0] == "numpy" and all(_is_name(p) for p in parts[1:]):
            target: Any = np
            try:
                for part in parts[1:]:
                    target = getattr(target, part)
                if target is f:
                    return "np." + ".".join(parts[1:])
            except AttributeError:
                pass
        return self.obj(f, _hint(f, parts[-1]))

    # ---- expressions ----------------------------------------------------------------------

    def lit(self, x: Any) -> str:
        """``x`` in source: its literal where ``literal`` can spell it, else a namespace name."""
        text = literal(x)
        if text is not None:
            return text
        if type(x) is float:
            return self.obj(x, "inf" if x == x else "nan")
        if type(x) in (str, bytes):
            return self.obj(x, "s")
        if x is Ellipsis:
            return "..."
        if type(x) is tuple:
            inner = ", ".join(self.lit(e) for e in x)
            return f"({inner},)" if len(x) == 1 else f"({inner})"
        if type(x) is list:
            return "[" + ", ".join(self.lit(e) for e in x) + "]"
        if type(x) is slice:
            return f"slice({self.lit(x.start)}, {self.lit(x.stop)}, {self.lit(x.step)})"
        if isinstance(x, np.ndarray):
            return self.obj(x, "c")
        if isinstance(x, np.generic):
            short = _SHORT_DTYPE.get(x.dtype.name, x.dtype.name)
            return self.obj(x, f"{short}_{x.item()!r}" if x.dtype.kind in "biufc" else short)
        if isinstance(x, np.dtype):
            return self.obj(x, f"dtype_{x.name}")
        if isinstance(x, type):
            return self.obj(x, _hint(x, "T"))
        return self.obj(x, "k")

    def arg(self, a: Any) -> str:
        if isinstance(a, Var):
            e = self.inlined.get(a.id)
            return self.var(a) if e is None else e[0]
        if isinstance(a, Const):
            return self.lit(a.value)
        if type(a) is tuple:
            inner = ", ".join(self.arg(e) for e in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if type(a) is list:
            return "[" + ", ".join(self.arg(e) for e in a) + "]"
        if type(a) is dict:
            return "{" + ", ".join(f"{self.lit(k)}: {self.arg(e)}" for k, e in a.items()) + "}"
        return self.lit(a)

    def operand(self, a: Any, need: int) -> str:
        """``a`` as the operand of an operator (or the receiver of ``.name``) that binds with
        strength ``need``: parenthesised when its own expression binds more weakly."""
        e = self.inlined.get(a.id) if isinstance(a, Var) else None
        if e is None:
            text = self.arg(a)
            prec = _UNARY if text.startswith("-") else _ATOM  # NOTE: -2.0 ** x is -(2.0 ** x)
        else:
            text, prec = e
        return f"({text})" if prec < need else text

    def kwargs(self, kws: list[tuple[str, Any]]) -> list[str]:
        """Keyword arguments: ``k=v`` while ``k`` is a plain name, then ``**{K: v, ...}`` from the
        first that is not (``f(**{"a b": x, "ﬁ": y})`` passes names no source may spell; ``ﬁ=``
        would mean ``fi=``), so that the callee sees them in their order."""
        n = next((i for i, (k, _) in enumerate(kws) if not _is_name(k)), len(kws))
        parts = [f"{k}={self.arg(v)}" for k, v in kws[:n]]
        rest = [f"{self.lit(k)}: {self.arg(v)}" for k, v in kws[n:]]
        return parts + ([f"**{{{', '.join(rest)}}}"] if rest else [])

    def index(self, a: Any) -> str:
        """A subscript: slices as ``a:b``, tuples without parentheses."""
        if isinstance(a, Const):
            v = a.value
            if type(v) is slice:
                return self._slice(v)
            if type(v) is tuple:
                return ", ".join(self._slice(e) if type(e) is slice else self.lit(e) for e in v) + \
                    ("," if len(v) == 1 else "") if v else "()"
            return self.lit(v)
        if type(a) is tuple:
            parts = [self.index(e) for e in a]
            return ", ".join(parts) + ("," if len(parts) == 1 else "") if parts else "()"
        return self.arg(a)

    def _slice(self, s: slice) -> str:
        parts = ["" if s.start is None else self.lit(s.start), "" if s.stop is None else self.lit(s.stop)]
        if s.step is not None:
            parts.append(self.lit(s.step))
        return ":".join(parts)

    def call(self, op: Op, args: tuple[Any, ...] | None = None) -> str:
        args = op.args if args is None else args
        f = op.fn
        kws = [(k, v) for k, v in op.kwargs if not k.startswith("_")]
        self.prec = _ATOM
        fast = self._array_form(op.prim, args, kws)
        if fast is not None:
            return fast
        if not kws:
            if f in _INFIX and len(args) == 2:
                return self._infix(_INFIX[f], args[0], args[1])
            if f in _PREFIX and len(args) == 1:
                self.prec = _UNARY
                return f"{_PREFIX[f]}{self.operand(args[0], _UNARY)}"
            if f is operator.getitem and len(args) == 2:
                return f"{self.operand(args[0], _ATOM)}[{self.index(args[1])}]"
        if isinstance(f, _METHOD_TYPES) and args and isinstance(args[0], Var) and _is_name(f.__name__):
            parts = [self.arg(a) for a in args[1:]] + self.kwargs(kws)
            return f"{self.operand(args[0], _ATOM)}.{f.__name__}({', '.join(parts)})"
        parts = [self.arg(a) for a in args] + self.kwargs(kws)
        return f"{self.fn(f, op.prim)}({', '.join(parts)})"

    def _infix(self, sym: str, a: Any, b: Any) -> str:
        """``a sym b`` with the parentheses Python's grammar needs: operators group to the left
        (``a - (b - c)``), ``**`` to the right and more tightly than a unary minus on its left
        (``(-a) ** b``, ``a ** -b``), and comparisons never chain (``(a < b) == c``)."""
        p = self.prec = _PREC[sym]
        left, right = (p + 1, _UNARY) if sym == "**" else (p + 1, p + 1) if p == 6 else (p, p + 1)
        return f"{self.operand(a, left)} {sym} {self.operand(b, right)}"

    def _array_form(self, prim: str, args: tuple[Any, ...], kws: list[tuple[str, Any]]) -> str | None:
        """The operator or method spelling of a numpy call on arrays (``a @ b``, ``x.sum(axis=0)``,
        ``x.T``), where the types say the arguments are ndarrays: it means the same and skips
        numpy's Python-level wrappers (``np.sum``, ``np.swapaxes`` cost about 1 µs a call)."""
        def nd(a: Any) -> int:  # the ndim of an ndarray argument, else -1
            t = a.type if isinstance(a, Var) else None
            return len(t.shape) if isinstance(t, ArrayT) and not t.scalar else -1

        if prim == "numpy.matmul" and len(args) == 2 and not kws and nd(args[0]) >= 1 and nd(args[1]) >= 1:
            return self._infix("@", args[0], args[1])
        if not args or nd(args[0]) < 0:
            return None
        x = self.operand(args[0], _ATOM)
        if prim == "numpy.sum" and len(args) == 1 and {k for k, _ in kws} <= {"axis", "keepdims", "dtype"}:
            return f"{x}.sum({', '.join(f'{k}={self.arg(v)}' for k, v in kws)})"
        if prim in ("numpy.swapaxes", "numpy.transpose") and not kws and all(isinstance(a, Const) for a in args[1:]):
            rest = tuple(a.value for a in args[1:])
            n = nd(args[0])
            if prim == "numpy.transpose" and (not rest or (len(rest) == 1 and rest[0] is None)):
                return f"{x}.T"
            if prim == "numpy.swapaxes" and len(rest) == 2 and all(type(i) is int for i in rest):
                if n == 2 and {rest[0] % 2, rest[1] % 2} == {0, 1}:
                    return f"{x}.T"
                return f"{x}.swapaxes({rest[0]}, {rest[1]})"
        return None

    def copied(self, text: str) -> str:
        """A copy of the array ``text`` names (a constant the caller may mutate)."""
        return f"{text}.copy()"

    def mutable(self, value: Any) -> bool:
        """Is the constant ``value``, lowered, an object the caller could update in place?"""
        return isinstance(value, np.ndarray)

    # ---- statements -----------------------------------------------------------------------

    def sequence(self, atoms: tuple[Any, ...]) -> str:
        """A name for the per-iteration atoms of a loop's ``each`` input: the list an earlier loop
        filled with exactly these values, a namespace tuple of constants, or a tuple display."""
        first = self.listed.get(atoms[0].id) if atoms and isinstance(atoms[0], Var) else None
        if first is not None and first[1] == 0 and all(
                isinstance(a, Var) and self.listed.get(a.id) == (first[0], i) for i, a in enumerate(atoms)):
            return first[0]
        if all(isinstance(a, Const) and not a.live for a in atoms):
            return self.obj(tuple(a.value for a in atoms), "xs")
        return "(" + ", ".join(self.arg(a) for a in atoms) + ",)"

    def loop(self, op: Op, loc: str) -> list[str]:
        """``irad.loop``: a Python ``for`` over the iterations with the step written inline."""
        loop = op.kw("_loop")
        body, nc, ni, n = loop.body, loop.n_carry, loop.n_inv, loop.n
        init, inv, xs = op.args
        outer_init = [self.arg(a) for a in init]
        outer_inv = [self.arg(a) for a in inv]
        outer_xs = [self.sequence(a) if kind == "each" else self.arg(a) for kind, a in zip(loop.xs_kinds, xs)]
        lines: list[str] = []
        srcs = []
        for text in outer_xs:  # each source once, by name
            if _is_name(text):
                srcs.append(text)
            else:
                tmp = self.fresh("xs")
                lines.append(f"{tmp} = {text}")
                srcs.append(tmp)
        ys_lists = []
        for kind, o in zip(loop.ys_kinds, body.outputs[nc:]):
            name = self.fresh("ys")
            ys_lists.append(name)
            if kind == "stack":
                t = o.type
                dtype = getattr(t, "dtype", "complex128" if t == ScalarT("complex") else "float64")
                shape = (n,) + tuple(getattr(t, "shape", ()))
                lines.append(f"{name} = np.empty({self.lit(shape)}, {self.obj(np.dtype(dtype), 'dtype')})")
            else:
                lines.append(f"{name} = [None] * {n}")
        saved = (self.names, self.inlined, self.listed)
        self.names, self.inlined, self.listed = {}, {}, {}
        try:
            cnames = [self.var(v) for v in body.inputs[:nc]]
            inames = [self.var(v) for v in body.inputs[nc:nc + ni]]
            xnames = [self.var(v) for v in body.inputs[nc + ni:]]
            i = self.fresh("i")
            if nc:
                lines.append(f"{', '.join(cnames)}, = {', '.join(outer_init)},")
            lines.extend(f"{a} = {b}" for a, b in zip(inames, outer_inv))
            rng = f"range({n} - 1, -1, -1)" if loop.reverse else f"range({n})"
            lines.append(f"for {i} in {rng}:{loc}  # {_comment(repr(loop))}")
            step = [f"{x} = {src}[{i}]" for x, src in zip(xnames, srcs)]
            keep = {v.id for v in body.inputs} | {o.id for o in body.outputs if isinstance(o, Var)}
            step += statements(self, body, keep)
            step += [f"{name}[{i}] = {self.arg(o)}" for name, o in zip(ys_lists, body.outputs[nc:])]
            if nc:
                step.append(f"{', '.join(cnames)}, = {', '.join(self.arg(o) for o in body.outputs[:nc])},")
            lines.extend("    " + ln for ln in step)
        finally:
            self.names, self.inlined, self.listed = saved
        for name, o in zip(cnames, op.outs[:nc]):
            self.names[o.id] = name
        at = nc
        for kind, name in zip(loop.ys_kinds, ys_lists):
            if kind == "stack":
                self.names[op.outs[at].id] = name
                at += 1
                continue
            for k in range(n):
                self.names[op.outs[at + k].id] = f"{name}[{k}]"
                self.listed[op.outs[at + k].id] = (name, k)
            at += n
        return lines

    def op(self, op: Op) -> list[str]:
        loc = f"  # {_comment(str(op.loc))}" if op.loc is not None else ""
        if op.loc is not None and op.loc.func.startswith("pullback of"):
            loc = f"  # {_comment(op.loc.func)} ({_comment(str(op.loc))})"
        if op.prim == "irad.primitives.guard":
            k = len(self.guard_names)
            self.guard_names.append(f"{op.loc.long if op.loc else '?'}")
            exp = op.kw("expected")
            a = self.operand(op.args[0], _PREC["|"])
            test = f"not {a}" if exp is True else (a if exp is False else f"{a} != {self.lit(exp)}")
            return [f"if {test}: raise _GuardError({k})  # guard: the traced branch{loc[3:] and ' at' + loc[3:]}"]
        if op.prim == "irad.primitives.guard_dtype":
            k = len(self.guard_names)
            self.guard_names.append(f"{op.loc.long if op.loc else '?'}")
            return [f"if {self.operand(op.args[0], _ATOM)}.dtype != {self.obj(op.kw('expected'), 'dtype')}: "
                    f"raise _GuardError({k})  # guard: data-dependent dtype"]
        if op.prim == "irad.primitives.guard_shape":
            k = len(self.guard_names)
            self.guard_names.append(f"{op.loc.long if op.loc else '?'}")
            return [f"if np.shape({self.arg(op.args[0])}) != {self.lit(op.kw('expected'))}: "
                    f"raise _GuardError({k})  # guard: data-dependent shape"]
        if op.prim == "rule_fwd":
            rule = op.kw("_rule")
            f = self.obj(op.fn, _hint(op.fn, "rule_fwd"))
            kws = [(k, v) for k, v in op.kwargs if not k.startswith("_")]
            args = [self.arg(a) for a in op.args] + self.kwargs(kws)
            ys, s = op.outs[:-1], op.outs[-1]
            rhs = f"{f}({', '.join(args)})"
            if len(ys) == 1:
                return [f"{self.var(ys[0])}, {self.var(s)} = {rhs}  # {_comment(rule.name)}{loc[3:] and ' at' + loc[3:]}"]
            tmp = self.fresh("y")
            return [f"{tmp}, {self.var(s)} = {rhs}  # {_comment(rule.name)}",
                    f"{', '.join(self.var(y) for y in ys)}, = _leaves({tmp})", f"del {tmp}"]
        if op.prim == LOOP_PRIM:
            return self.loop(op, loc)
        if op.prim in ("pullback", "call_pullback"):
            rule = op.kw("_rule")
            f = self.obj(op.fn, _hint(op.fn, "pullback"))
            rhs = f"{f}({self.arg(op.args[0])}, {self.arg(op.args[1])})"
            outs = [self.var(o) for o in op.outs]
            note = f"  # {', '.join(outs)} from {self.arg(op.args[1])} through {_comment(rule.name)}"
            if len(op.outs) == 1:
                idx = "".join(f"[{self.lit(k)}]" for k in op.paths[0])
                return [f"{outs[0]} = {rhs}{idx}{note}"]
            tmp = self.fresh("cots")
            lines = [f"{tmp} = {rhs}{note}"]
            for o, path in zip(outs, op.paths):
                lines.append(f"{o} = {tmp}{''.join(f'[{self.lit(k)}]' for k in path)}")
            lines.append(f"del {tmp}")  # NOTE: the tuple would keep every cotangent alive to the end
            return lines
        rhs = self.call(op)
        if not op.outs:
            return [rhs + loc]
        if op.unpack:
            return [f"{', '.join(self.var(o) for o in op.outs)}, = _leaves({rhs}){loc}"]
        out = op.outs[0]
        note = loc
        if out.hint.endswith("_bar") and not (op.loc and op.loc.func.startswith("pullback of")):
            note = _BAR_NOTES.get(op.prim, loc)
        return [f"{self.var(out)} = {rhs}{note}"]


#: how deeply lowering nests inlined temporaries: CPython's compiler recurses per nesting level,
#: and a long chain (a loop's running sum) reads better in steps anyway
MAX_INLINE_DEPTH = 6


#: numpy calls lowering may write into their reader's expression: pure, and cheap to read twice
#: as text (``x.T``, ``a @ b``)
_PURE_VIEWS = frozenset({"numpy.matmul", "numpy.transpose", "numpy.swapaxes"})


def _operator_form(op: Op) -> bool:
    """``op`` lowers to a Python operator expression (``a * b``, ``-a``, ``x[i]``, ``x.T``, ``a @ b``)
    with one result."""
    if op.unpack or len(op.outs) != 1 or any(not k.startswith("_") for k, _ in op.kwargs):
        return False
    if op.prim in _PURE_VIEWS:
        return True
    f = op.fn
    return _hashable(f) and ((f in _INFIX and len(op.args) == 2) or (f in _PREFIX and len(op.args) == 1) or
                             (f is operator.getitem and len(op.args) == 2))


def _immutable(t: Any) -> bool:
    return isinstance(t, ScalarT) or (isinstance(t, ArrayT) and t.scalar)


def inline_plan(g: Graph, keep: set[int]) -> dict[int, int]:
    """Which temporaries lowering writes into their one reader's expression: op index -> reader's index.

    A temporary qualifies when an operator computes it (``t = a * b``), exactly one op reads it,
    once, and it is no output.  The expression then runs where its reader runs, so moving it must
    not change what it reads or when it may raise: a temporary of Python numbers or numpy scalars
    (immutable) may move past any op without effects; one that reads an array only past other
    operator expressions (no in-place write can come between).  Same operations, same order of
    each expression's operands: the same bits.
    """
    uses: dict[int, int] = {}
    reader: dict[int, int] = {}
    j: int | None  # an op's index here, its reader's (or None) below
    for j, op in enumerate(g.ops):
        for v in op.inputs:
            uses[v.id] = uses.get(v.id, 0) + 1
            reader[v.id] = j
    effects = [0]  # effects[k]: how many of ops[:k] have effects
    plain = [0]  # plain[k]: how many of ops[:k] are operator expressions
    for op in g.ops:
        effects.append(effects[-1] + (op.prim in GUARD_PRIMS or is_impure_prim(op.prim) or
                                     (op.prim == LOOP_PRIM and step_has_effect(op))))
        plain.append(plain[-1] + _operator_form(op))
    into: dict[int, int] = {}
    depth: dict[int, int] = {}  # an inlined value's Var id -> how deeply its expression nests
    for i, op in enumerate(g.ops):
        if not _operator_form(op) or effects[i + 1] - effects[i]:
            continue
        o = op.outs[0]
        j = reader.get(o.id)
        if j is None or uses[o.id] != 1 or o.id in keep or effects[j] - effects[i + 1]:
            continue  # read twice, an output, or an effect (a guard, an impure call) runs between
        if not (_immutable(o.type) and all(_immutable(v.type) for v in op.inputs)) and \
                plain[j] - plain[i + 1] != j - i - 1:
            continue  # it reads an array and another kind of op runs between
        d = 1 + max((depth.get(v.id, 0) for v in op.inputs), default=0)
        if d <= MAX_INLINE_DEPTH:
            into[i] = j
            depth[o.id] = d
    return into


def _hashable(x: Any) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def statements(e: _Emitter, g: Graph, keep: set[int]) -> list[str]:
    """The statements computing ``g``'s ops (not its return), with temporaries written into their
    one reader and arrays freed after their last use; ``keep``: Var ids never freed."""
    into = inline_plan(g, keep)
    at = list(range(len(g.ops)))  # where each op's value is computed: an inlined one in its reader
    for i in sorted(into, reverse=True):
        at[i] = at[into[i]]
    last_use: dict[int, int] = {}
    v: Var | None  # an input here, a Var looked up (or None) below
    for i, op in enumerate(g.ops):
        for v in op.inputs:
            last_use[v.id] = max(last_use.get(v.id, -1), at[i])
    inlined_outs = {g.ops[i].outs[0].id for i in into}
    # a loop's outs per iteration live in its lists (``ys[i]``): never freed one by one
    listed = {o.id for op in g.ops if op.prim == LOOP_PRIM for o in op.outs[op.kw("_loop").n_carry:]}
    dying: dict[int, list[Var]] = {}
    for i, op in enumerate(g.ops):
        for o in op.outs:
            if o.id not in keep and o.id not in last_use and (isinstance(o.type, ArrayT) or o.type == OpaqueT("state")):
                last_use[o.id] = i  # never used: free at once
    defined = {o.id: o for op in g.ops for o in op.outs}
    for vid, i in last_use.items():
        v = defined.get(vid)
        if v is not None and vid not in keep and vid not in inlined_outs and vid not in listed and (
                isinstance(v.type, ArrayT) and not v.type.scalar or v.type == OpaqueT("state")):
            dying.setdefault(i, []).append(v)

    body: list[str] = []
    for i, op in enumerate(g.ops):
        if i in into:
            text = e.call(op)
            e.inlined[op.outs[0].id] = (text, e.prec)
        else:
            body.extend(e.op(op))
        dead = dying.get(i)
        if dead:
            body.append("del " + ", ".join(e.var(v) for v in dead))
    return body


def lower(g: Graph, name: str | None = None, *, docstring: str = "",
          emitter: Callable[[Graph, list[str]], _Emitter] = _Emitter) -> Lowered:
    """Compile ``g`` to a Python function ``name(*inputs) -> tuple(outputs)``.  ``docstring``
    becomes the function's ``__doc__`` as a value: it is never part of the source.  ``emitter``:
    how ops are spelled (``irad.arrayapi`` spells them for another array namespace)."""
    guard_names: list[str] = []
    e = emitter(g, guard_names)
    name = e.fresh(name or g.name)
    params = [e.var(v) for v in g.inputs]

    keep = {o.id for o in g.outputs if isinstance(o, Var)} | {v.id for v in g.inputs}
    body = statements(e, g, keep)
    # NOTE: a constant array returned to the caller is copied: the caller may mutate it
    outs = [e.copied(e.arg(o)) if isinstance(o, Const) and e.mutable(o.value) else e.arg(o) for o in g.outputs]
    body.append("return " + (", ".join(outs) + ("," if len(outs) == 1 else "") if outs else "()"))
    src = f"def {name}({', '.join(params)}):\n" + "\n".join("    " + ln for ln in body) + "\n"
    code = compile_source(src, f"irad-generated {name}")  # in linecache while the program lives
    ns = dict(e.ns)
    exec(code, ns)
    fn = ns.pop(name)  # NOTE: fn's globals must not hold fn: no cycle, so a released program is freed at once
    fn.__doc__ = docstring or None
    fn.__irad_guards__ = tuple(guard_names)
    if log.CONFIG.source:
        log.source(name, src)
    return Lowered(src, fn, name)


use_step_compiler(lambda g: lower(g).fn)
