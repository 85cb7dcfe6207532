"""One ONNX node as an import handler sees it (``Node``), and the tables of handlers, one per op
type: ``NODES`` for the default domain (filled by ``load_ops`` and ``load_nn``), ``ML_NODES`` for
``ai.onnx.ml`` (``load_ml``).  ``load.to_source`` drives them.

A model file is untrusted input (DESIGN.md §7): a handler spells into the source only what a
``Node`` reader has checked (ints within range, finite floats, strings from a fixed set); names
become fresh ASCII identifiers (``ident``), other values enter the function's namespace
(``Node.constant``).
"""
from __future__ import annotations

import keyword
import math
import re
from typing import Any, Callable

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from ..lower import ascii_name
from .ops import _Unsupported

_ATTR_KIND: dict[int, str] = {
    AttributeProto.INT: "an int", AttributeProto.INTS: "a list of ints", AttributeProto.STRING: "a string",
    AttributeProto.FLOAT: "a float", AttributeProto.TENSOR: "a tensor"}

def ident(name: str, used: set[str]) -> str:
    """A fresh ASCII identifier for an ONNX name (user text: only a hint, never spliced)."""
    base = name if name.isidentifier() and name.isascii() else \
        re.sub(r"__+", "_", re.sub(r"[^A-Za-z0-9_]", "_", ascii_name(name)))[:40].strip("_") or "v"
    if base[0].isdigit() or base.startswith("__"):
        base = "v_" + base
    if keyword.iskeyword(base):
        base += "_"
    nm, k = base, 1
    while nm in used or nm in ("np", "self"):
        nm, k = f"{base}_{k}", k + 1
    used.add(nm)
    return nm


def to_array(t: onnx.TensorProto, what: str) -> np.ndarray:
    """A tensor of the file as a numeric numpy array, or ``_Unsupported``."""
    if t.data_location == onnx.TensorProto.EXTERNAL:  # a path the file names: not read from data
        raise _Unsupported(f"{what}: external data (load the model from its file, which reads it)")
    try:
        a = numpy_helper.to_array(t)
    except Exception as err:  # NOTE: untrusted bytes: whatever onnx raises, the tensor is refused
        raise _Unsupported(f"{what}: {type(err).__name__}: {err}") from None
    if a.dtype.kind not in "biuf" or getattr(np, a.dtype.name, None) is not a.dtype.type:
        raise _Unsupported(f"{what}: a tensor of type {a.dtype}")
    return a


class Node:
    """One ONNX node as a handler of ``NODES`` sees it: its inputs as numpy expressions, constant
    inputs as arrays, static shapes, checked attributes; ``line`` adds a statement before its
    assignment, ``constant`` a value to the function's namespace.  Every attribute the node
    carries must be read (``unread``): one irad ignored would change the meaning silently."""

    def __init__(self, node: onnx.NodeProto, ref: Callable[[str], str], consts: dict[str, np.ndarray],
                 shapes: dict[str, tuple[int, ...]], lines: list[str], used: set[str],
                 glob: dict[str, Any], opset: int, dtypes: dict[str, np.dtype]) -> None:
        self.node, self.op, self.opset = node, node.op_type, opset
        self._attrs = {a.name: a for a in node.attribute}
        self._read: set[str] = set()
        self.ins = list(node.input)
        self._ref, self._consts, self._shapes, self._lines, self._used = ref, consts, shapes, lines, used
        self._glob, self._dtypes = glob, dtypes
        self.dynamic = False  # whether the expressions read an input that is not a constant

    # ---- inputs ---------------------------------------------------------------------------

    def has(self, k: int) -> bool:
        return len(self.ins) > k and bool(self.ins[k])

    def x(self, k: int = 0) -> str:
        """Input ``k`` as a numpy expression."""
        if not self.has(k):
            raise _Unsupported(f"input {k} missing")
        if self.ins[k] not in self._consts:
            self.dynamic = True
        return self._ref(self.ins[k])

    def const(self, k: int) -> np.ndarray:
        if not self.has(k) or self.ins[k] not in self._consts:
            raise _Unsupported(f"input {k} is not a constant")
        return self._consts[self.ins[k]]

    def ints(self, k: int) -> tuple[int, ...]:
        """Constant input ``k`` as Python ints (an index, axis or count is an integer tensor)."""
        c = self.const(k)
        if c.dtype.kind not in "iu":
            raise _Unsupported(f"input {k} must be an integer tensor, not {c.dtype}")
        return tuple(int(i) for i in c.reshape(-1))

    def int1(self, k: int) -> int:
        """Constant input ``k``: one integer."""
        v = self.ints(k)
        if len(v) != 1:
            raise _Unsupported(f"input {k} must hold one integer, not {len(v)}")
        return v[0]

    def dtype(self, k: int = 0) -> np.dtype:
        """The element type of input ``k`` (from the model's declarations and shape inference)."""
        if not self.has(k) or self.ins[k] not in self._dtypes:
            raise _Unsupported(f"the type of input {k} is unknown")
        return self._dtypes[self.ins[k]]

    def shape(self, k: int = 0) -> tuple[int, ...]:
        """The static shape of input ``k`` (``()`` for an omitted optional input)."""
        if not self.has(k):
            return ()
        if self.ins[k] not in self._shapes:
            raise _Unsupported(f"the shape of input {k} is unknown")
        return self._shapes[self.ins[k]]

    def rank(self, k: int = 0) -> int:
        if not self.has(k) or self.ins[k] not in self._shapes:
            raise _Unsupported(f"the rank of input {k} is unknown")
        return len(self._shapes[self.ins[k]])

    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        if self.node.output[k] not in self._shapes:
            raise _Unsupported(f"the shape of output {k} is unknown")
        return self._shapes[self.node.output[k]]

    # ---- attributes: each read checks its ONNX type ---------------------------------------

    def _attr(self, name: str, kind: int) -> AttributeProto | None:
        self._read.add(name)
        a = self._attrs.get(name)
        if a is not None and a.type != kind:
            kinds = {v: k for k, v in AttributeProto.AttributeType.items()}
            raise _Unsupported(f"attribute {name} must be {_ATTR_KIND[kind]}, not {kinds.get(a.type, a.type)}")
        return a

    def attr_int(self, name: str, default: int | None = None) -> int:
        """An INT attribute (``default`` None: it is required)."""
        a = self._attr(name, AttributeProto.INT)
        if a is None:
            if default is None:
                raise _Unsupported(f"attribute {name} missing")
            return default
        return int(a.i)

    def attr_flag(self, name: str, default: int) -> bool:
        v = self.attr_int(name, default)
        if v not in (0, 1):
            raise _Unsupported(f"attribute {name} must be 0 or 1, not {v}")
        return bool(v)

    def attr_float(self, name: str, default: float | None = None) -> float:
        """A FLOAT attribute, finite (``default`` None: it is required)."""
        a = self._attr(name, AttributeProto.FLOAT)
        if a is None:
            if default is None:
                raise _Unsupported(f"attribute {name} missing")
            return default
        if not math.isfinite(a.f):
            raise _Unsupported(f"attribute {name} = {a.f} is not finite")
        return float(a.f)

    def attr_tensor(self, name: str) -> np.ndarray | None:
        a = self._attr(name, AttributeProto.TENSOR)
        return None if a is None else to_array(a.t, name)

    def axes(self, name: str, k: int, since: int) -> tuple[int, ...] | None:
        """Reduction axes: the attribute ``name`` before opset ``since``, input ``k`` from it on;
        each in ``[-rank, rank)``, made non-negative.  None: no axes given."""
        axes = (self.attr_ints(name) if self.opset < since else
                (self.ints(k) if self.has(k) else None))
        if axes is None:
            return None
        r = self.rank()
        if any(not -r <= a < r for a in axes) or len({a % r for a in axes}) != len(axes):
            raise _Unsupported(f"axes {axes[:8]} are out of range or repeated for a rank-{r} input")
        return tuple(a % r for a in axes)

    def attr_ints(self, name: str) -> tuple[int, ...] | None:
        a = self._attr(name, AttributeProto.INTS)
        return None if a is None else tuple(int(i) for i in a.ints)

    def attr_str(self, name: str, default: str | None, choices: tuple[str, ...] | None = None) -> str:
        """A STRING attribute; with ``choices`` it must be one of them."""
        a = self._attr(name, AttributeProto.STRING)
        if a is None:
            if default is None:
                raise _Unsupported(f"attribute {name} missing")
            return default
        try:
            v = a.s.decode("utf-8")
        except UnicodeDecodeError:
            raise _Unsupported(f"attribute {name} is not UTF-8 text") from None
        if choices is not None and v not in choices:
            raise _Unsupported(f"attribute {name} must be one of {', '.join(choices)}, not {v[:40]!r}")
        return v

    def axis(self, default: int | None = 0, k: int = 0) -> int:
        """The ``axis`` attribute: an int in ``[-rank, rank)`` of input ``k``, made non-negative."""
        ax, r = self.attr_int("axis", default), self.rank(k)
        if not -r <= ax < r:
            raise _Unsupported(f"attribute axis = {ax} is out of range for a rank-{r} input")
        return ax % r

    def given(self, name: str) -> bool:
        return name in self._attrs

    def unread(self) -> list[str]:
        return sorted(set(self._attrs) - self._read)

    # ---- output ---------------------------------------------------------------------------

    def tmp(self, base: str) -> str:
        return ident(base, self._used)

    def constant(self, value: Any, hint: str) -> str:
        """``value`` as a name in the function's namespace (a value never becomes source)."""
        name = ident(hint, self._used)
        self._glob[name] = value
        return name

    def line(self, text: str) -> None:
        self._lines.append(f"    {text}")


Handler = Callable[[Node], "str | list[str]"]  # the expression of each output
NODES: dict[str, Handler] = {}      # the default domain (ai.onnx)
ML_NODES: dict[str, Handler] = {}   # ai.onnx.ml


def on(*op_types: str, table: dict[str, Handler] = NODES) -> Callable[[Handler], Handler]:
    """Register a handler for ``op_types`` (in ``table``)."""
    def deco(fn: Handler) -> Handler:
        for t in op_types:
            table[t] = fn
        return fn
    return deco
