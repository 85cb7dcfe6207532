"""Reverse rules: the registry and the built-in rule tables (imported for their registrations)."""
from .registry import (Rule, RuleQuery, all_rules, defrule, has_rule, impl_key, implementation, is_nondiff,
                       lookup, non_differentiable, opt_out, qualname, rrule, scalar_rule, version)

__all__ = ["Rule", "RuleQuery", "all_rules", "defrule", "has_rule", "impl_key", "implementation", "is_nondiff",
           "lookup", "non_differentiable", "opt_out", "qualname", "rrule", "scalar_rule", "version"]


def _load_tables() -> None:
    import importlib
    for name in ("python_rules", "numpy_rules", "array_rules", "gather_rules", "linalg_rules",
                 "decomp_rules", "stats_rules", "object_rules", "fft_rules", "scipy_rules"):
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:  # a table not written yet
            if e.name != f"{__name__}.{name}":
                raise


_load_tables()
