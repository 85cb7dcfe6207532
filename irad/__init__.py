"""irad: a reverse-mode automatic differentiation compiler for plain Python/numpy code.

Public surface (a short re-export; each name lives in the module of its pipeline stage).
"""
from . import errors, rules
from .errors import GuardError, IradError, NoRuleError, TraceError, UnsupportedError, VerifyError
from .ir import Const, Graph, Op, Var, verify
from .rules import defrule
from .rules import non_differentiable, rrule, scalar_rule
from .trace import trace
from .api import Program, compile, grad, value_and_grad, vjp

__all__ = ["Program", "compile", "grad", "value_and_grad", "vjp", "Const", "Graph", "GuardError", "IradError", "NoRuleError", "Op", "TraceError", "UnsupportedError",
           "Var", "VerifyError", "defrule", "errors", "non_differentiable", "rrule", "rules", "scalar_rule",
           "trace", "verify"]
