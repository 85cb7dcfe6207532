"""Seeing what irad did: traces, the reason for each retrace, what each pass changed, generated source.

Five topics, each a logger of the standard ``logging`` module (``irad.trace``, ``irad.retrace``,
``irad.passes``, ``irad.source``, ``irad.backend``: what the compiled tier compiled, when and
why), all off until asked for::

    IRAD_LOG=retrace,passes python train.py          # read once, when irad is imported
    irad.config(log="trace,retrace")                 # at run time; irad.config(log=None): off

When a topic is on and the program has configured no logging handler, the records go to stderr
(irad's fallback handler, which stays quiet once the program has a handler of its own).
Everything here runs only on paths that have just traced, passed or lowered, and each of them
tests one flag of ``CONFIG`` before it formats anything: a cached call does no logging work.
"""
from __future__ import annotations

import dis
import logging
import os
import sys
import types
import warnings
from typing import Any, Iterable, NamedTuple

from . import backends
from .errors import ConfigError

TOPICS = ("trace", "retrace", "passes", "source", "backend")
_ALL = frozenset({"all", "*"})
_OFF = frozenset({"", "0", "none", "off"})


def parse_topics(spec: str | Iterable[str] | None) -> frozenset[str]:
    """``"retrace, passes"`` (commas or spaces), an iterable of topics, ``"all"`` or None/"" (none)."""
    if spec is None:
        return frozenset()
    words = spec.replace(",", " ").split() if isinstance(spec, str) else [str(w).strip() for w in spec]
    found = {w.lower() for w in words} - _OFF
    if found & _ALL:
        return frozenset(TOPICS)
    unknown = sorted(found - set(TOPICS))
    if unknown:
        raise ConfigError(f"unknown irad log topic(s) {', '.join(map(repr, unknown))}; the topics are "
                          f"{', '.join(TOPICS)} (or 'all'), e.g. IRAD_LOG=retrace,passes")
    return frozenset(found)


class Settings(NamedTuple):
    """What ``irad.config()`` reports: the settings in force (pass them back to restore them)."""

    log: tuple[str, ...]
    backend: str = "auto"


class Config:
    """irad's run-time settings; the one instance is ``CONFIG``, changed by :func:`config`.

    The flags are plain attributes because the code that logs tests them before doing anything."""

    __slots__ = ("trace", "retrace", "passes", "source", "backend", "enabled")

    def __init__(self) -> None:
        self.trace = self.retrace = self.passes = self.source = self.backend = self.enabled = False

    @property
    def log(self) -> frozenset[str]:
        return frozenset(t for t in TOPICS if getattr(self, t))

    def set_log(self, topics: frozenset[str]) -> None:
        for t in TOPICS:
            setattr(self, t, t in topics)
        self.enabled = bool(topics)
        if topics:
            _install_fallback()


CONFIG = Config()
_UNSET: Any = object()


def config(*, log: str | Iterable[str] | None = _UNSET, backend: str | None = _UNSET) -> Settings:
    """Change irad's settings; returns those now in force.

    ``log``: the topics to log (``"trace,retrace,passes,source,backend"``, ``"all"``, a list of
    them), or None to turn logging off; as the ``IRAD_LOG`` environment variable, which sets it at
    import.  ``backend``: ``"numpy"``, ``"numba"`` or ``"auto"`` (``irad.backends``; the
    ``IRAD_BACKEND`` variable), for programs compiled from now on."""
    if log is not _UNSET:
        CONFIG.set_log(parse_topics(log))
    if backend is not _UNSET:
        backends.CONFIG.backend = backends.parse_backend(backend)
    return Settings(tuple(t for t in TOPICS if getattr(CONFIG, t)), backends.CONFIG.backend)


class _Fallback(logging.Handler):
    """stderr, for programs that configured no logging: without it, INFO records would vanish
    (``logging.lastResort`` shows warnings only).  Silent where another handler gets the record."""

    def emit(self, record: logging.LogRecord) -> None:
        lg: logging.Logger | None = logging.getLogger(record.name)
        while lg is not None:  # the loggers the record reaches, as logging.Logger.callHandlers walks them
            if any(h is not self for h in lg.handlers):
                return  # the program's own handlers show it
            lg = lg.parent if lg.propagate else None
        try:
            sys.stderr.write(self.format(record) + "\n")  # (sys.stderr now: it may have been replaced)
        except Exception:
            self.handleError(record)


def _install_fallback() -> None:
    top = logging.getLogger("irad")
    if top.level == logging.NOTSET:
        top.setLevel(logging.INFO)  # NOTE: else the root logger's WARNING would drop every record
    if not any(isinstance(h, _Fallback) for h in top.handlers):
        h = _Fallback()
        h.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        top.addHandler(h)


def _emit(topic: str, msg: str) -> None:
    logging.getLogger("irad." + topic).info(msg)


# ---- where things are ---------------------------------------------------------------------

_IRAD_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PASSES_DIR = os.path.join(os.path.dirname(_IRAD_DIR[:-1]), "passes") + os.sep  # (a source checkout)


def call_site() -> str:
    """``file:line`` of the user's line that led here (the first frame outside irad)."""
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith((_IRAD_DIR, _PASSES_DIR, "<irad", "irad-generated")):
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return "?"


def def_site(fn: Any) -> str:
    """``qualname (file:line)`` of a function, as far as one can be found."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", type(fn).__name__)
    return f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"


def _functions(deps: Iterable[tuple[Any, ...]]) -> list[types.FunctionType]:
    """The traced functions among a program's dependencies (``function`` deps hold them weakly)."""
    out = []
    for kind, ref, _, _ in deps:
        if kind == "function":
            fn = ref()
            if fn is not None:
                out.append(fn)
    return out


def _codes(code: types.CodeType) -> Iterable[types.CodeType]:
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


_READS = {"global": ("LOAD_GLOBAL", "LOAD_NAME"), "cell": ("LOAD_DEREF", "LOAD_CLOSURE"),
          "inst": ("LOAD_ATTR", "LOAD_METHOD"), "attr": ("LOAD_ATTR", "LOAD_METHOD")}


def read_sites(dep: tuple[Any, ...], deps: Iterable[tuple[Any, ...]], limit: int = 3) -> list[str]:
    """Where the traced functions read what ``dep`` (a ``signature.Dep``) names, as ``file:line``:
    a global, a closure variable or an attribute, found in their bytecode by name.  Reported,
    never relied on."""
    kind, obj, key, expected = dep
    if kind == "function":
        code = expected.value[0]  # the code the trace ran (it may have been replaced since)
        return [f"{code.co_filename}:{code.co_firstlineno}"]
    ops = _READS.get(kind)
    if ops is None or not isinstance(key, str):
        return []
    found: list[str] = []
    for fn in _functions(deps):
        if kind == "global" and fn.__globals__ is not obj.value:
            continue
        if kind == "cell" and not any(c is obj.value for c in fn.__closure__ or ()):
            continue
        for code in _codes(fn.__code__):
            line = None
            for ins in dis.get_instructions(code):
                line = ins.positions.lineno if ins.positions and ins.positions.lineno else line
                if ins.opname in ops and ins.argval == key and line is not None:
                    site = f"{code.co_filename}:{line}"
                    if site not in found:
                        found.append(site)
                    if len(found) >= limit:
                        return found
    return found


# ---- the events ---------------------------------------------------------------------------


def signature(g: Any) -> str:
    """A graph's inputs as ``(x: f64[3], y: float)``, and how many static arguments it has."""
    params = ", ".join(f"{v.hint or v}: {v.type}" for v in g.inputs)
    statics = f" + {len(g.statics)} static" if g.statics else ""
    return f"({params}){statics}"


def _traced_function(prog: Any) -> str:
    f = getattr(prog, "f", None)
    if f is not None:
        return def_site(f)
    fns = _functions(getattr(prog, "deps", ()))  # NOTE: the first function a trace enters is its own
    return def_site(fns[0]) if fns else prog.forward.name


def stale(cache_name: str, prog: Any, why: str) -> None:
    """A cached program's assumptions failed (``ProgramCache.drop``): say which, and where it is read."""
    if not CONFIG.retrace:
        return
    where = ""
    deps = prog.assumptions.deps
    i = prog.assumptions.check()  # (which one: `why` is its description)
    if i is not None and i >= 0:
        sites = read_sites(deps[i], deps)
        where = f" (read at {', '.join(sites)})" if sites else ""
    _emit("retrace", f"{cache_name} traces again: {why}{where}; called from {call_site()}")


def published(cache: Any, key: Any, prog: Any, flipped: str | None, had: int) -> None:
    """A freshly traced program joins its cache (``ProgramCache.add``): the trace, and why it was
    needed.  ``had``: the programs ``key`` held before (-1: a new key)."""
    if CONFIG.retrace:
        why = None  # the first trace, or the retrace after a stale dependency (logged by `stale`)
        others = (cache.get(key) or [])[1:]
        if flipped:
            why = f"the guard at {flipped} failed (the branch goes the other way now): traced that path too"
        elif had > 0 and not any(p.assumptions.check() is not None for p in others):
            why = "the guards of the cached program(s) for these arguments failed: traced another path"
        elif had < 0 and len(cache) > 1:
            why = f"new argument signature {signature(prog.forward)} ({len(cache)} signatures compiled)"
        if why:
            _emit("retrace", f"{cache.name}: {why}; called from {call_site()}")
    if CONFIG.trace:
        g = prog.forward
        n_guards = len(g.guards)
        guards = f", {n_guards} guard{'s' * (n_guards != 1)}" if n_guards else ""
        _emit("trace", f"{cache.name}: traced {_traced_function(prog)} for {signature(g)}: "
                       f"{len(g.ops)} op{'s' * (len(g.ops) != 1)}{guards}")


def unrolled(name: str, ops: int, ms: float, error: BaseException | None = None) -> None:
    """A hot program lowered again with its loops unrolled (``irad.tiers.promote``), or why it kept
    its loops."""
    if CONFIG.trace:
        if error is None:
            _emit("trace", f"{name}: hot: its loops unrolled, {ops} ops, lowered in {ms:.1f} ms")
        else:
            _emit("trace", f"{name}: hot, but its loops stay: unrolling failed ({type(error).__name__}: {error})")


def compiled(name: str, kernels: int, seconds: float, from_disk: bool, why: str | None, loops: int = 0) -> None:
    """The compiled tier of a hot program went live (``why`` None), or why it stays on numpy."""
    if CONFIG.backend:
        if why is None:
            where = "loaded from the disk cache" if from_disk else "compiled"
            what = f"{kernels} numba kernel(s)" + (f" and {loops} loop(s)" if loops else "")
            _emit("backend", f"{name}: hot: {what} {where} in {seconds:.2f} s; "
                             "the compiled tier runs from now on")
        else:
            _emit("backend", f"{name}: hot, but it stays on numpy: {why}")


def passed(g_name: str, pass_name: str, before: Any, after: Any) -> None:
    """One pass changed a graph (``irad.passes.run``): its name, ops before -> after, its provenance note."""
    n = len(before.provenance)
    notes = "; ".join(after.provenance[n:]) if after.provenance[:n] == before.provenance else ""
    _emit("passes", f"{g_name}: {pass_name}: {len(before.ops)} -> {len(after.ops)} ops"
                    + (f" ({notes})" if notes else ""))


def pipeline_done(g_name: str, rounds: int, before: Any, after: Any) -> None:
    _emit("passes", f"{g_name}: pipeline done after {rounds} round{'s' * (rounds != 1)}: "
                    f"{len(before.ops)} -> {len(after.ops)} ops")


def source(name: str, src: str) -> None:
    """The generated source of a program (``irad.lower``)."""
    _emit("source", f"{name}:\n{src.rstrip()}")


def _from_environment() -> None:
    spec = os.environ.get("IRAD_LOG")
    if spec is None:
        return
    try:
        CONFIG.set_log(parse_topics(spec))
    except ConfigError as e:  # NOTE: a typo in a variable must not make `import irad` fail
        warnings.warn(f"IRAD_LOG={spec!r} ignored: {e}", stacklevel=2)


_from_environment()
