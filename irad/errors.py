"""Every exception irad raises lives here.

Messages say what happened, where (function and file:line) and what the user can write next.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any


class IradError(Exception):
    """Base class of all irad errors."""


class TraceError(IradError):
    """A construct the tracer cannot capture faithfully (raised instead of a wrong trace)."""

    def __init__(self, construct: str, where: str = "", hint: str = "") -> None:
        self.construct, self.where, self.hint = construct, where, hint
        msg = construct
        if where:
            msg += f"\n  at {where}"
        if hint:
            msg += f"\n  {hint}"
        super().__init__(msg)


class UnsupportedError(TraceError):
    """A Python or numpy construct irad does not trace (yet)."""


class MutationError(TraceError):
    """An in-place update whose effect on other traced values irad cannot express."""


class GuardError(IradError):
    """A graph was evaluated on arguments that take a different branch than the traced one."""


class VerifyError(IradError):
    """``irad.verify`` found a malformed graph; the message quotes the graph around the fault."""


class NoRuleError(IradError):
    """A differentiable primitive has no reverse rule and no traceable body."""


class GradError(IradError, TypeError):
    """A gradient request that cannot be honoured (non-scalar or complex output, integer argument,
    ...).  Also a ``TypeError``, as JAX's and autograd's refusals of the same requests are, so code
    written against them catches it."""


class PassError(IradError):
    """A pass failed; the message names it and the passes that ran before it."""


class LoadError(IradError):
    """An ONNX model ``irad.onnx.load`` cannot read: unreadable or malformed (an attribute of the
    wrong type or out of range), or nodes with no numpy form; the message lists every problem."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"cannot import ONNX model {name!r}: {len(problems)} problem(s):\n{lines}")


class ConfigError(IradError, ValueError):
    """A setting ``irad.config`` (or ``IRAD_LOG``) does not know; the message lists the valid ones."""


class GraphvizError(IradError):
    """A graph picture needs Graphviz's ``dot`` program, which is not installed (or failed)."""


class RowsError(IradError, ValueError):
    """``irad.dask``: a loss that is not a sum (or mean) of per-row terms over its data arguments,
    so summing it chunk by chunk would not give its value on the whole data; the message names the
    op and the user's line that mix rows."""


class NamespaceError(IradError, TypeError):
    """``irad.compile(..., xp=namespace)``: the program calls something the array API standard
    has no form of (a numpy-only function, a rule implemented in numpy); the message names the
    call and the user's line."""


class ShipError(IradError, TypeError):
    """``irad.dask``: a compiled chunk program holds a constant that plain ``pickle`` cannot send
    to a worker (a lambda, a local class, an open file); the message names it and the line of the
    loss that uses it."""


def def_site(f: Any) -> str:
    """``qualname (file:line)`` of the function the user handed to irad, as far as it can be found:
    what messages name the function by."""
    while isinstance(f, functools.partial):
        f = f.func
    try:
        f = inspect.unwrap(f)
    except ValueError:
        pass
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    if code is None:
        return ""
    return f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"
