"""The rule registry: which implementation has which reverse rule.

The canonical rule is explicit (seed thread 000): two ordinary, named functions

    fwd(*args, **kwargs) -> (y, state)        forward value and the residuals the backward needs
    bwd(state, ybar)     -> (cot_0, ...)      one cotangent per positional argument (None: zero;
                                              trailing ones left out are None)

Cotangents may keep the broadcast shape of ``y``: the reverse-mode transform sums them down to
the argument's shape (``irad.primitives.sum_to``) and casts them to the argument's type, so rules never
handle broadcasting.  A positional argument that is a list (``np.concatenate([a, b])``) gets a
list of cotangents.  Keyword arguments are static: they get no cotangent.  For an op whose result
is a container (``np.linalg.eigh``), ``ybar`` is a tuple with one (materialised) cotangent per leaf.

Rules are keyed by the implementation that runs (``impl_key``), never by a name.
"""
from __future__ import annotations

import inspect
import sys
import threading
import types
import types as types_mod
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import numpy as np

from ..weakcache import WeakIdMap

Fwd = Callable[..., tuple[Any, Any]]
Bwd = Callable[[Any, Any], tuple[Any, ...]]


@dataclass(frozen=True)
class Rule:
    """A reverse rule for one implementation."""

    impl: Any
    name: str
    fwd: Fwd
    bwd: Bwd
    kind: str = "explicit"  # 'explicit' | 'scalar' | 'closure'
    types: tuple[type, ...] = ()  # leading positional argument types it was registered for
    closure_fn: Any = field(default=None, compare=False)  # the user's closure-form rule, if any
    params: tuple[Any, ...] = ()  # positional parameters (name or (name, default)), where the signature hides them
    #: optional forward form ``jvp(tangents, *args, **kwargs) -> (y, ydot)``: ``tangents`` has one
    #: entry per positional argument (None: a zero tangent), ``ydot`` has ``y``'s structure.  Forward
    #: mode (``irad.forward``) uses it when present and derives one from ``bwd`` otherwise.
    jvp: Callable[..., tuple[Any, Any]] | None = field(default=None, compare=False)


_RULES: dict[Any, list[Rule]] = {}
_NONDIFF: set[Any] = set()
_OPT_OUT: dict[Any, list[tuple[type, ...]]] = {}  # implementation -> argument types traced through instead
_VERSION = [0]  # bumped on every registration: compiled programs key their caches on it
#: library functions whose Python body the tracer could not trace (qualified name -> why): the
#: tracer writes it, reverse mode's NoRuleError reads it (why a function without a rule has none)
LIBRARY_FAILURES: dict[str, str] = {}
#: registrations and pending loaders, one at a time (lookups take no lock).  NOTE: a lost
#: ``_VERSION`` increment would let a program traced between two registrations be cached under
#: the version of the second; a rule list edited in place would show a lookup no rule at all.
_LOCK = threading.RLock()


def version() -> int:
    return _VERSION[0]


def _bump() -> None:
    with _LOCK:
        _VERSION[0] += 1


def impl_key(fn: Any) -> Any:
    """A hashable key for the implementation ``fn`` runs.

    Bound methods of C objects (``np.add.reduce``) are keyed by ``(owner, name)`` because a new
    bound-method object is made at every attribute access; ``np.float64.sum`` shares
    ``np.ndarray.sum``'s key; Python bound methods are keyed by their function.
    """
    if isinstance(fn, types.MethodType):
        return fn.__func__
    if isinstance(fn, types.BuiltinMethodType) and fn.__self__ is not None and not isinstance(fn.__self__, types.ModuleType):
        owner = fn.__self__
        if isinstance(owner, (np.ndarray, np.generic)):
            return getattr(np.ndarray, fn.__name__, None) or (type(owner), fn.__name__)
        if isinstance(owner, np.random.RandomState) or isinstance(owner, np.random.Generator):
            return (type(owner), fn.__name__)
        try:
            hash(owner)
            return (owner, fn.__name__)
        except TypeError:
            return (type(owner), fn.__name__)
    objclass = getattr(fn, "__objclass__", None)
    if objclass is not None and isinstance(objclass, type) and issubclass(objclass, np.generic):
        alias = getattr(np.ndarray, getattr(fn, "__name__", ""), None)
        if alias is not None:
            return alias
    return fn


#: names of weak-referenceable callables (user functions, types, builtins): they go with them
_QN_WEAK: WeakIdMap[Any, str] = WeakIdMap()
#: names of C callables that are not weak-referenceable (ufuncs, numpy dispatchers, method
#: descriptors) and that a module or type owns, so holding them keeps nothing alive
_QN_OWNED: dict[int, tuple[Any, str]] = {}
_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType)


def qualname(fn: Any) -> str:
    """An importable-looking qualified name for a callable, used to print ops and rules."""
    hit = _QN_OWNED.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    name = _QN_WEAK.get(fn)
    if name is not None:
        return name
    if type(fn) is types.MethodType:  # made afresh by each attribute access: name its function
        return qualname(fn.__func__)
    name = _qualname(fn)
    try:
        _QN_WEAK[fn] = name
    except TypeError:
        if _owned(fn) and len(_QN_OWNED) < 4096:
            _QN_OWNED[id(fn)] = (fn, name)
    return name


def _owned(fn: Any) -> bool:
    """Whether ``fn`` is a type's descriptor or a module's attribute (alive as long as they are)."""
    if type(fn) in _DESCRIPTORS:
        return True
    name = getattr(fn, "__name__", None)
    if type(name) is not str:
        return False
    for modname in (getattr(fn, "__module__", None), "numpy", "scipy.special"):
        mod = sys.modules.get(modname) if type(modname) is str else None
        if mod is not None and vars(mod).get(name) is fn:
            return True
    return False


def _qualname(fn: Any) -> str:
    if isinstance(fn, np.ufunc):
        if getattr(np, fn.__name__, None) is not fn:
            for where in ("scipy.special", "scipy.special._ufuncs"):  # (its private ufuncs: _zeta, _lambertw)
                mod_ = sys.modules.get(where)
                if mod_ is not None and getattr(mod_, fn.__name__, None) is fn:
                    return f"{where}.{cast(np.ufunc, fn).__name__}"
        return f"numpy.{fn.__name__}"
    if isinstance(fn, types.BuiltinMethodType) and fn.__self__ is not None and not isinstance(fn.__self__, types.ModuleType):
        owner = fn.__self__
        if isinstance(owner, np.ufunc):
            return f"numpy.{owner.__name__}.{fn.__name__}"
        if owner is getattr(np.random, "mtrand", None) or isinstance(owner, np.random.RandomState):
            return f"numpy.random.{fn.__name__}"
        return f"{qualname(type(owner))}.{fn.__name__}"
    if isinstance(fn, types.MethodType):
        return qualname(fn.__func__)
    objclass = getattr(fn, "__objclass__", None)
    if objclass is not None:
        return f"{qualname(objclass)}.{fn.__name__}"
    if type(fn).__name__ == "fortran":  # an f2py routine (its __name__ is "function dgetrf")
        short = str(getattr(fn, "__name__", "")).split()[-1]
        for where in ("scipy.linalg.lapack", "scipy.linalg.blas"):
            mod_ = sys.modules.get(where)
            if mod_ is not None and getattr(mod_, short, None) is fn:
                return f"{where}.{short}"
        return short
    mod = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    if mod in ("_operator", "builtins", "__builtin__"):
        mod = "operator" if mod == "_operator" else "builtins"
    if (mod.startswith("numpy") and mod != "numpy") or mod.startswith("scipy."):
        # numpy.linalg._linalg -> numpy.linalg when the public module exports the same object
        public = ".".join(p for p in mod.split(".") if not p.startswith("_"))
        pm = sys.modules.get(public)
        if pm is not None and getattr(pm, getattr(fn, "__name__", ""), None) is fn:
            mod = public
    return f"{mod}.{name}" if mod else name


# ---- registration ---------------------------------------------------------------------------


def is_singledispatch(fn: Any) -> bool:
    return callable(getattr(fn, "dispatch", None)) and hasattr(fn, "registry") and hasattr(fn, "register")


def is_plum(fn: Any) -> bool:
    return type(fn).__module__.startswith("plum") and hasattr(fn, "_resolve_method_with_cache")


def implementation(fn: Any, types: tuple[type, ...] = ()) -> Any:
    """The implementation a call of ``fn`` with arguments of ``types`` runs: the function a bound
    method wraps, ``f.dispatch(types[0])`` for ``functools.singledispatch``, plum's resolution for
    plum functions, else ``fn`` itself."""
    if isinstance(fn, types_mod.MethodType):
        return fn.__func__
    if types and is_singledispatch(fn):
        return fn.dispatch(types[0])
    if types and is_plum(fn):
        method = fn._resolve_method_with_cache(types=tuple(types))
        return method[0] if isinstance(method, tuple) else method
    return fn


def defrule(fn: Any, fwd: Fwd, bwd: Bwd, *, types: tuple[type, ...] = (), kind: str = "explicit",
            closure_fn: Any = None, params: tuple[Any, ...] = (),
            jvp: Callable[..., tuple[Any, Any]] | None = None) -> Rule:
    """Register the explicit rule ``(fwd, bwd)`` for the implementation ``fn`` (with ``types``:
    the implementation calls with those leading argument types dispatch to).  ``params`` names
    the positional parameters (``self`` first for a method) when ``fn``'s signature hides them
    behind ``*args``: a differentiated keyword argument with one of these names is moved into
    the positional arguments, so that it gets a cotangent.  An entry ``(name, default)`` lets a
    later keyword move too, the default filling the gap (``norm.logpdf(x, scale=s)``).  ``jvp``:
    the rule's optional forward form (``Rule.jvp``)."""
    impl = implementation(fn, tuple(types))
    rule = Rule(impl_key(impl), qualname(impl if impl is not fn and not isinstance(fn, types_mod.MethodType)
                                          else fn), fwd, bwd, kind, tuple(types), closure_fn, tuple(params), jvp)
    with _LOCK:  # a new list, published whole: a concurrent lookup sees the old rules or the new
        _RULES[rule.impl] = [r for r in _RULES.get(rule.impl, ()) if r.types != rule.types] + [rule]
        _bump()
    return rule


def _arity(f: Callable[..., Any]) -> int:
    try:
        return len([p for p in inspect.signature(f).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    except (TypeError, ValueError):
        return -1


def _module_for_generated() -> types.ModuleType:
    from . import generated
    return generated


def scalar_rule(fn: Any, *partials: Callable[..., Any]) -> Rule:
    """Declare elementwise partial derivatives; irad generates a named pullback from them.

    Each partial is ``lambda *args`` or, when it is cheaper in terms of the output,
    ``lambda *args, y`` (one more parameter: the output).  ``None`` marks a non-differentiable
    argument (no tangent); ``NotImplemented`` one whose derivative exists but irad does not
    compute: differentiating with respect to it raises ``GradError`` instead of giving 0.  E.g. ``scalar_rule(np.tanh, lambda x, y: 1 - y * y)``.
    """
    n = len(partials)
    uses_y = tuple(p is not None and p is not NotImplemented and _arity(p) == n + 1 for p in partials)
    base = qualname(fn).replace(".", "_")
    mod = _module_for_generated()

    def fwd(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        y = fn(*args, **kwargs)
        return y, (args, y)

    def bwd(state: Any, ybar: Any) -> tuple[Any, ...]:
        args, y = state
        out = []
        for p, wy in zip(partials, uses_y):
            if p is None or p is NotImplemented:
                out.append(p)
            else:
                d = p(*args, y) if wy else p(*args)
                out.append(ybar * d)  # JAX's convention: no conjugate (docs/rules.md)
        return tuple(out)

    def jvp(tangents: tuple[Any, ...], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        y = fn(*args, **kwargs)
        ydot = None
        for k, (p, wy) in enumerate(zip(partials, uses_y)):
            t = tangents[k] if k < len(tangents) else None
            if t is None or p is None:
                continue
            if p is NotImplemented:
                from ..errors import GradError
                raise GradError(f"{base}: its derivative with respect to positional argument {k} is not implemented; "
                                "do not differentiate with respect to it, or register a rule that computes it")
            term = t * (p(*args, y) if wy else p(*args))
            ydot = term if ydot is None else ydot + term
        return y, ydot

    for f, suffix in ((fwd, "fwd"), (bwd, "pullback"), (jvp, "jvp")):
        f.__name__ = f.__qualname__ = f"{base}_{suffix}"
        f.__module__ = mod.__name__
        setattr(mod, f.__name__, f)
    return defrule(fn, fwd, bwd, kind="scalar", jvp=jvp)


def non_differentiable(*fns: Any) -> Any:
    """Mark implementations whose outputs carry no gradient (``np.argmax``, ``np.floor``...).
    Returns its (single) argument, so it also works as a decorator."""
    for fn in fns:
        _NONDIFF.add(impl_key(fn))
    _bump()
    return fns[0] if len(fns) == 1 else fns


def is_nondiff(fn: Any) -> bool:
    if _PENDING or _LOADING:
        load_pending()
    try:
        return impl_key(fn) in _NONDIFF
    except TypeError:
        return False


_PENDING: list[tuple[str, Callable[[], None]]] = []  # (module, loader): rules for optional libraries
#: the loaders running now: until they finish, lookups in other threads wait for their rules
_LOADING: list[tuple[str, Callable[[], None]]] = []


def when_imported(module: str, loader: Callable[[], None]) -> None:
    """Run ``loader`` (which registers rules) as soon as ``module`` has been imported by anyone:
    rules for an optional library (SciPy) cost nothing, not even its import, until a program
    uses it.  Checked on every rule lookup while loaders are pending."""
    if module in sys.modules:
        loader()
    else:
        _PENDING.append((module, loader))


def load_pending(force: bool = False) -> None:
    """Run the pending loaders whose module is imported (all of them, importing the modules,
    with ``force``: for the docs and the coverage tests)."""
    if force:
        import importlib
        for mod, _ in list(_PENDING):
            try:
                importlib.import_module(mod)
            except ImportError:
                pass
    ready = [p for p in _PENDING if sys.modules.get(p[0]) is not None]
    if not ready and not _LOADING:
        return  # NOTE: the common case (SciPy never imported) takes no lock
    with _LOCK:  # another thread running a loader: wait for its rules
        for p in ready:
            if p in _PENDING:
                _LOADING.append(p)  # (before the removal: a lookup always sees one of the two)
                _PENDING.remove(p)
                try:
                    p[1]()
                except ImportError:  # a broken optional install: its rules stay unregistered
                    pass
                finally:
                    _LOADING.remove(p)


def lookup(fn: Any, args: tuple[Any, ...] = ()) -> Rule | None:
    """The rule that applies to calling ``fn`` with ``args``, if any.

    A rule registered with ``types`` applies when the leading positional arguments are
    instances of those types; the most recently registered matching rule wins.
    """
    if _PENDING or _LOADING:
        load_pending()
    try:
        key = impl_key(fn)
        lst = _RULES.get(key)
    except TypeError:
        return None
    if not lst:
        return None
    for types_ in _OPT_OUT.get(key, ()):
        if _matches(types_, args):
            return None
    for r in reversed(lst):
        if _matches(r.types, args):
            return r
    return None


def _matches(types_: tuple[type, ...], args: tuple[Any, ...]) -> bool:
    return all(i < len(args) and isinstance(args[i], t) for i, t in enumerate(types_))


def opt_out(fn: Any, *types_: type) -> None:
    """Calls of ``fn`` whose leading positional arguments (``self`` first for methods) are
    instances of ``types_`` do not use ``fn``'s rule: irad traces through them."""
    impl = implementation(fn, types_)
    _OPT_OUT.setdefault(impl_key(impl), []).append(tuple(types_))
    _bump()


def all_rules() -> list[Rule]:
    """Every registered rule (for docs and tests)."""
    if _PENDING or _LOADING:
        load_pending()
    return [r for lst in list(_RULES.values()) for r in lst]  # (a copy: registrations may run)


def nondiff_keys() -> set[Any]:
    return set(_NONDIFF)


def rrule(fn: Any, *types_: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Closure-form rule (ChainRules style)::

        @irad.rrule(my_fn)
        def _(x, y):
            z = my_fn(x, y)
            def pullback(zbar):
                return zbar * y, zbar * x     # one cotangent per positional argument
            return z, pullback

    irad turns it into an explicit ``fwd``/``bwd`` pair: the state is the pullback closure.
    """
    def deco(rule_fn: Callable[..., Any]) -> Callable[..., Any]:
        base = qualname(fn).replace(".", "_").replace("<", "").replace(">", "")

        def fwd(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
            y, pb = rule_fn(*args, **kwargs)
            return y, pb

        def bwd(pb: Any, ybar: Any) -> tuple[Any, ...]:
            r = pb(ybar)
            return tuple(r) if isinstance(r, (tuple, list)) else (r,)

        fwd.__name__ = fwd.__qualname__ = f"{base}_rrule_fwd"
        bwd.__name__ = bwd.__qualname__ = f"{base}_call_pullback"
        defrule(fn, fwd, bwd, types=types_, kind="closure", closure_fn=rule_fn)
        return rule_fn

    return deco


# ---- asking which rule a call hits ----------------------------------------------------------


@dataclass(frozen=True)
class RuleQuery:
    """The answer of ``has_rule``: truthy when the call hits a rule; ``str()`` says why."""

    hit: bool
    implementation: Any
    rule: Rule | None
    explanation: str

    def __bool__(self) -> bool:
        return self.hit

    def __str__(self) -> str:
        return self.explanation

    __repr__ = __str__


def _describe(fn: Any) -> str:
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})" if code is not None else ""
    return f"{getattr(fn, '__qualname__', None) or qualname(fn)}{where}"


def _types_str(types_: tuple[type, ...]) -> str:
    return ", ".join(t.__name__ for t in types_)


def has_rule(fn: Any, *args: Any) -> RuleQuery:
    """Would the call ``fn(*args)`` hit a rule?  ``fn`` may be a bound method (``d.total``), a
    ``functools.singledispatch`` or plum function, or any callable.  The answer says which
    implementation the call resolves to, which rule (if any) is registered for it, and which
    opt-outs were consulted."""
    if _PENDING or _LOADING:
        load_pending()
    call_args = args
    if isinstance(fn, types_mod.MethodType):
        call_args = (fn.__self__,) + args
        impl = fn.__func__
        shown = f"{type(fn.__self__).__name__}(...).{fn.__func__.__name__}"
    else:
        impl = implementation(fn, tuple(type(a) for a in args[:1])) if args else fn
        shown = getattr(fn, "__qualname__", None) or qualname(fn)
    call = f"{shown}({_types_str(tuple(type(a) for a in args))})"
    try:
        key = impl_key(impl)
    except TypeError:
        key = None
    rules = list(reversed(_RULES.get(key, []))) if key is not None else []
    head = f"{call} resolves to {_describe(impl)}"
    opted = [t for t in _OPT_OUT.get(key, ()) if _matches(t, call_args)] if key is not None else []
    consulted = _OPT_OUT.get(key, []) if key is not None else []
    opt_note = ("; opt-outs consulted: " + ", ".join(f"({_types_str(t)})" for t in consulted)) if consulted else \
        "; no opt-outs registered"
    if is_nondiff(impl):
        return RuleQuery(True, impl, None, f"{head}, which is marked non-differentiable (its outputs carry no "
                                           f"gradient){opt_note}")
    if not rules:
        return RuleQuery(False, impl, None, f"{head}: no rule is registered for that implementation, so irad "
                                            f"traces through it{opt_note}")
    if opted:
        return RuleQuery(False, impl, None, f"{head}, which has a rule, but irad.opt_out({_describe(impl)}, "
                                            f"{_types_str(opted[0])}) matches these arguments: traced through"
                                            f"{opt_note}")
    for r in rules:
        if _matches(r.types, call_args):
            reg = f" for argument types ({_types_str(r.types)})" if r.types else ""
            return RuleQuery(True, impl, r, f"{head}, which has the {r.kind} rule {r.name}{reg}: the call uses "
                                            f"it{opt_note}")
    regs = "; ".join(f"({_types_str(r.types)})" for r in rules)
    return RuleQuery(False, impl, None, f"{head}, whose rules are registered for argument types {regs}; these "
                                        f"arguments do not match, so irad traces through it{opt_note}")
