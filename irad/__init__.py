"""irad: a reverse-mode automatic differentiation compiler for plain Python/numpy code.

Public surface (a short re-export; each name lives in the module of its pipeline stage).
"""
from . import errors, rules
from .errors import GuardError, IradError, NoRuleError, TraceError, UnsupportedError, VerifyError
from .ir import Const, Graph, Op, Var, verify
from .pytree import register_pytree
from .log import config
from .rules import defrule, has_rule, non_differentiable, opt_out, rrule, scalar_rule
from .trace import trace
from .api import Program, compile, elementwise_grad, grad, stop_gradient, value_and_grad, vjp
from .forward import jvp, linearize
from .derivatives import hessian, hvp, jacfwd, jacobian, jacrev
from .custom import checkpoint, custom_jvp, custom_vjp, remat
from . import passes, testing  # passes/ is installed as irad.passes

__all__ = ["Const", "Graph", "GuardError", "IradError", "NoRuleError", "Op", "Program", "TraceError",
           "UnsupportedError", "Var", "VerifyError", "checkpoint", "compile", "config", "custom_jvp",
           "custom_vjp", "defrule", "elementwise_grad",
           "errors", "grad",
           "has_rule", "hessian", "hvp", "jacfwd", "jacobian", "jacrev", "jvp", "linearize", "non_differentiable", "opt_out", "passes", "register_pytree", "remat", "rrule", "rules", "scalar_rule",
           "stop_gradient", "testing", "trace", "value_and_grad", "verify", "vjp"]


def __getattr__(name: str) -> object:
    """``irad.onnx`` and ``irad.dask`` on first use: they need optional packages (``pip install
    'irad[onnx]'``, ``'irad[dask]'``)."""
    if name in ("onnx", "dask"):
        import importlib
        return importlib.import_module(f"irad.{name}")
    raise AttributeError(f"module 'irad' has no attribute {name!r}")
