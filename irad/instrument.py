"""Bytecode instrumentation: rewrite a code object so that every operation goes through a hook.

Each rewritten instruction calls a function of ``irad.hooks`` on the real operands.  With no
tracer active the hooks just perform the operation, so instrumented code keeps its meaning
everywhere (generators resumed later, closures that escape a trace).  Nested code objects
(lambdas, comprehensions, inner functions, class bodies) are instrumented too.

Version-specific instruction shapes live in ``irad.pyver``; this module is version-neutral.
"""
from __future__ import annotations

import dis
import hashlib
import marshal
import os
import sys
import tempfile
import threading
import types
import weakref
from typing import Any, cast

from bytecode import Bytecode, Instr, Label
from bytecode.instr import TryBegin  # the class `bytecode` re-exports without listing it in __all__

from . import hooks, intdata, pyver
from .errors import UnsupportedError
from .weakcache import WeakIdMap

#: original code -> its instrumented twin (the twin never refers to the original: the entry goes with it)
_TWINS: WeakIdMap[types.CodeType, types.CodeType] = WeakIdMap()
#: ids of live instrumented code objects (an id leaves with its code, before it can be reused)
INSTRUMENTED: set[int] = set()
#: the global names each live instrumented code object reads (what a compiled program depends on)
GLOBAL_NAMES: dict[int, frozenset[str]] = {}
#: ids of instrumented code that rebinds a global (``global G; G = ...``): a side effect a compiled
#: program cannot repeat, so a program that traced it is traced again on every call
STORES_GLOBALS: dict[int, tuple[str, ...]] = {}
#: serialises instrumenting (misses only: a hit takes no lock), so that threads instrumenting one
#: code object at once agree on one twin, published complete (INSTRUMENTED and GLOBAL_NAMES
#: first, then _TWINS).  Reentrant: nested code objects are instrumented inside the outer rewrite.
_LOCK = threading.RLock()


def is_instrumented(code: types.CodeType) -> bool:
    return id(code) in INSTRUMENTED


def instrument_code(code: types.CodeType) -> types.CodeType:
    """The instrumented twin of ``code`` (cached by identity: equal code from two files differs)."""
    if id(code) in INSTRUMENTED:
        return code
    hit = _TWINS.get(code)
    if hit is not None:
        return hit
    with _LOCK:
        hit = _TWINS.get(code)  # another thread may have finished it while this one waited
        if hit is not None:
            return hit
        key = DISK.key(code)
        cached = DISK.load(key) if key is not None else None
        if cached is not None:  # its nested code objects are instrumented twins too: register them
            new = cached[0]
            for c, (reads, writes) in zip(_nested(new), cached[1]):
                _register(c, reads, writes)
        else:
            try:
                bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
                new = _rewrite(bc).to_code()
            except UnsupportedError:
                raise
            except Exception as e:  # a bytecode shape irad does not know: say so, never run it wrongly
                raise UnsupportedError(
                    f"cannot instrument the bytecode of {code.co_qualname}: {type(e).__name__}: {e}",
                    f"{code.co_filename}:{code.co_firstlineno}",
                    "please report this function; as a workaround register a rule for it with @irad.rrule") from e
            _register(new, _global_names(code), _stored_globals(code))
            if key is not None:
                DISK.store(key, new)
        _TWINS[code] = new  # NOTE: published last: whoever sees the twin finds it complete
    return new


def _register(new: types.CodeType, read: frozenset[str], stored: tuple[str, ...]) -> None:
    """Note ``new`` as instrumented code that reads the globals ``read`` and rebinds ``stored``."""
    k = id(new)
    INSTRUMENTED.add(k)
    GLOBAL_NAMES[k] = read
    if stored:
        STORES_GLOBALS[k] = stored
    weakref.finalize(new, _forget, k).atexit = False


def cache_root() -> str | None:
    """irad's on-disk cache directory: ``IRAD_CACHE_DIR``, else ``irad`` under ``$XDG_CACHE_HOME``
    or ``~/.cache``; None when ``IRAD_CACHE_DIR`` is ``off`` (or empty, ``0``, ``none``)."""
    env = os.environ.get("IRAD_CACHE_DIR")
    if env is not None and env.strip().lower() in ("", "off", "0", "none"):
        return None
    return env or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "irad")


def hash_sources(h: Any, directory: str, names: tuple[str, ...]) -> None:
    """Feed the files ``names`` of ``directory`` to the hash ``h`` (a missing file: its name), so
    that a disk cache keyed by ``h`` misses once any of them changes."""
    for name in names:
        try:
            with open(os.path.join(directory, name), "rb") as fh:
                h.update(fh.read())
        except OSError:
            h.update(name.encode())


class _DiskCache:
    """Instrumented twins of irad's own code (the rule bodies the inline pass traces), kept on disk
    across processes: rewriting a rule body's bytecode costs milliseconds, loading its twin tens
    of microseconds, and a process's first gradient traces dozens of them.

    A twin is stored by a hash of the original code object (its bytecode, constants, names and
    file name, everything ``marshal`` writes), of this Python and of irad's rewriting modules, so
    any change to either finds no entry.  The hooks in a twin's constants (functions, which
    ``marshal`` cannot write) are stored by name and put back on loading.  ``IRAD_CACHE_DIR``
    chooses the directory (default ``~/.cache/irad``, or under ``$XDG_CACHE_HOME``); set to
    ``off`` (or empty) it turns the cache off.  Only code under irad's package directory is
    stored: a bounded set, never the user's code or a library's.  Any failure to read or write
    is a miss."""

    _MARK = "\x00irad.hook"

    def __init__(self) -> None:
        self._dir: str | None | bool = False  # False: not worked out yet

    def directory(self) -> str | None:
        if self._dir is False:
            root = cache_root()
            self._dir = None if root is None else os.path.join(root, f"instrument-{self._stamp()}")
        return self._dir  # type: ignore[return-value]

    @staticmethod
    def _stamp() -> str:
        h = hashlib.sha256(sys.version.encode())
        hash_sources(h, os.path.dirname(os.path.abspath(__file__)), ("instrument.py", "pyver.py", "hooks.py", "intdata.py"))
        return h.hexdigest()[:20]

    def _hooks(self) -> dict[str, Any]:
        table = {n: f for n, f in vars(hooks).items() if n.startswith("h_") and callable(f)}
        table["intdata.h_is"] = intdata.h_is
        return table

    def key(self, code: types.CodeType) -> str | None:
        if not code.co_filename.startswith(_OWN_DIR) or self.directory() is None:
            return None
        try:
            # NOTE: version 2 writes no back-references, whose use depends on reference counts
            return hashlib.sha256(marshal.dumps(code, 2)).hexdigest()
        except ValueError:
            return None

    def load(self, key: str) -> tuple[types.CodeType, list[tuple[frozenset[str], tuple[str, ...]]]] | None:
        """The twin stored under ``key`` and, for it and each code object nested in it (``_nested``
        order), the global names it reads and those it rebinds."""
        d = self.directory()
        if d is None:
            return None
        try:
            with open(os.path.join(d, key), "rb") as fh:
                code, names = marshal.loads(fh.read())
            code = self._thaw(code, self._hooks())
            names = [(frozenset(r), tuple(w)) for r, w in names]
            if len(names) != len(_nested(code)):
                return None
            return code, names
        except Exception:  # a missing, partial or foreign entry: instrument afresh
            return None

    def store(self, key: str, code: types.CodeType) -> None:
        d = self.directory()
        if d is None:
            return
        try:
            names = [(tuple(sorted(_global_names(c))), _stored_globals(c)) for c in _nested(code)]
            data = marshal.dumps((self._freeze(code, {id(f): n for n, f in self._hooks().items()}), names))
            os.makedirs(d, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        except Exception:  # (a hook irad does not know by name, a read-only directory)
            return
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, os.path.join(d, key))  # NOTE: atomic: a reader sees all of it or none
        except Exception:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def _freeze(self, code: types.CodeType, names: dict[int, str]) -> types.CodeType:
        consts = tuple((self._MARK, names[id(c)]) if id(c) in names and callable(c) else
                       self._freeze(c, names) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return code.replace(co_consts=consts)

    def _thaw(self, code: types.CodeType, table: dict[str, Any]) -> types.CodeType:
        consts = tuple(table[c[1]] if type(c) is tuple and len(c) == 2 and c[0] == self._MARK else
                       self._thaw(c, table) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return code.replace(co_consts=consts)


_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: the on-disk store of instrumented twins (see _DiskCache)
DISK = _DiskCache()


def _forget(k: int) -> None:
    INSTRUMENTED.discard(k)
    GLOBAL_NAMES.pop(k, None)
    STORES_GLOBALS.pop(k, None)


def _nested(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and the code objects nested in it (comprehensions, generator expressions, lambdas):
    they run with the same globals, and the tracer never calls into them through ``call_python``."""
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _nested(c)
    return out


def _global_names(code: types.CodeType) -> frozenset[str]:
    return frozenset(ins.argval for c in _nested(code) for ins in dis.get_instructions(c)
                     if ins.opname == "LOAD_GLOBAL")


def _stored_globals(code: types.CodeType) -> tuple[str, ...]:
    return tuple(sorted({ins.argval for c in _nested(code) for ins in dis.get_instructions(c)
                         if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}))


def instrument_function(fn: types.FunctionType) -> types.FunctionType:
    """A copy of ``fn`` running instrumented code, sharing its globals, closure cells and defaults.

    Built afresh per call (cheap): a cached copy would hold ``fn``'s closure (a user's batch),
    globals and defaults alive, and go stale when ``fn.__defaults__`` is rebound."""
    code = fn.__code__
    if id(code) in INSTRUMENTED:
        return fn
    new = types.FunctionType(instrument_code(code), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    return new


# ---- analysis -------------------------------------------------------------------------------

_FINAL = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"})


def _hookable_calls(instrs: list[Any]) -> set[int]:
    """Indices of call instructions whose NULL slot holds a real NULL (see ``pyver``)."""
    state: list[str] | None = []
    at_label: dict[Label, list[str]] = {}
    hookable: set[int] = set()
    for i, ins in enumerate(instrs):
        if isinstance(ins, Label):
            if state is None and ins in at_label:
                state = list(at_label[ins])
            continue
        if isinstance(ins, TryBegin):
            if state is not None and isinstance(ins.stack_depth, int):
                at_label.setdefault(ins.target, state[: ins.stack_depth] + [pyver.OTHER] * (1 + bool(ins.push_lasti)))
            continue
        if not isinstance(ins, Instr):
            continue
        if state is None:  # unreachable or unknown: leave native
            continue
        name = ins.name
        if ins.has_jump():
            jumped = list(state)
            _apply(ins, jumped, True, hookable, i)
            at_label.setdefault(cast(Label, ins.arg), jumped)  # a jump's argument is its target
        _apply(ins, state, False, hookable, i)
        if name in _FINAL or ins.is_uncond_jump():
            state = None
    return hookable


def _apply(ins: Instr, st: list[str], jump: bool, hookable: set[int], index: int) -> None:
    name = ins.name
    if name == "PUSH_NULL":
        st.append(pyver.NULL)
        return
    tags = pyver.global_null_tags(ins)
    if tags is not None:
        st.extend(tags)
        return
    if pyver.is_method_load(ins):
        del st[len(st) - (3 if name == "LOAD_SUPER_ATTR" else 1):]
        st.extend(pyver.method_load_tags())
        return
    if name == "SWAP":
        k = cast(int, ins.arg)
        if len(st) >= k:
            st[-1], st[-k] = st[-k], st[-1]
        return
    if name == "COPY":
        c = cast(int, ins.arg)
        st.append(st[-c] if len(st) >= c else pyver.OTHER)
        return
    nd = pyver.call_null_depth(ins)
    if nd is not None:
        depth, pops = nd
        if len(st) >= depth and st[-depth] == pyver.NULL and not jump:
            hookable.add(index)
        del st[max(0, len(st) - pops):]
        st.append(pyver.OTHER)
        return
    if name == "CALL" and not pyver.PY312:  # 3.11: PRECALL already accounted for the call
        return
    eff = ins.stack_effect(jump=jump)
    if eff >= 0:
        st.extend([pyver.OTHER] * eff)
    else:
        del st[max(0, len(st) + eff):]


# ---- rewriting ------------------------------------------------------------------------------


def _rewrite(bc: Bytecode) -> Bytecode:
    instrs = list(bc)
    hookable = _hookable_calls(instrs)
    out: list[Any] = []
    kwnames: tuple[str, ...] | None = None
    hook_next_call = False  # 3.11: PRECALL decided, CALL emits
    n = len(instrs)
    for i, ins in enumerate(instrs):
        if not isinstance(ins, Instr):
            out.append(ins)
            continue
        name, arg, loc = ins.name, ins.arg, ins.location
        iarg = cast(int, arg)  # read only by the opcodes below whose argument is a number (int or IntEnum)
        if name == "LOAD_CONST" and isinstance(arg, types.CodeType):
            out.append(Instr("LOAD_CONST", instrument_code(arg), location=loc))
        elif name == "KW_NAMES":
            if _next_call_hookable(instrs, i, hookable):
                kwnames = cast("tuple[str, ...]", arg)
            else:
                out.append(ins)
        elif name == "LOAD_CONST" and pyver.PY313 and i + 1 < n and isinstance(instrs[i + 1], Instr) \
                and cast(Instr, instrs[i + 1]).name == "CALL_KW" and (i + 1) in hookable:
            kwnames = cast("tuple[str, ...]", arg)
        elif name == "PRECALL":
            if i in hookable:
                hook_next_call = True
            else:
                out.append(ins)
        elif name in ("CALL", "CALL_KW"):
            if hook_next_call or i in hookable:
                out += pyver.call_with_hook(hooks.h_call, iarg, kwnames, loc)
                hook_next_call, kwnames = False, None
            else:
                out.append(ins)
        elif name == "CALL_FUNCTION_EX":
            if i in hookable:
                out += pyver.call_ex_with_hook(hooks.h_call_ex, bool(iarg & 1), loc)
            else:
                out.append(ins)
        elif name == "BINARY_OP":
            out += pyver.hook(hooks.h_binop, 2, (int(iarg),), loc)
        elif name == "COMPARE_OP":
            out += pyver.hook(hooks.h_compare, 2, (int(iarg),), loc)
        elif name == "CONTAINS_OP":
            out += pyver.hook(hooks.h_contains, 2, (int(iarg),), loc)
        elif name == "IS_OP" and not _against_non_int_constant(instrs, i):
            out += pyver.hook(intdata.h_is, 2, (int(iarg),), loc)
        elif name == "BINARY_SUBSCR":
            out += pyver.hook(hooks.h_getitem, 2, (), loc)
        elif name == "BINARY_SLICE":
            out += pyver.hook(hooks.h_binary_slice, 3, (), loc)
        elif name == "STORE_SUBSCR":
            out += pyver.hook(hooks.h_setitem, 3, (), loc) + [Instr("POP_TOP", location=loc)]
        elif name == "STORE_SLICE":
            out += pyver.hook(hooks.h_store_slice, 4, (), loc) + [Instr("POP_TOP", location=loc)]
        elif name in pyver.UNARY_OPS:
            out += pyver.hook(hooks.h_unary, 1, (name,), loc)
        elif name == "CALL_INTRINSIC_1" and int(iarg) == pyver.INTRINSIC_UNARY_POSITIVE:
            out += pyver.hook(hooks.h_unary, 1, ("UNARY_POSITIVE",), loc)
        elif name in pyver.TRUTH_TESTS:
            out += pyver.hook(hooks.h_truth, 1, (int(name in pyver.TRUTH_KEEPS_VALUE),), loc) + [ins]
        elif name in ("GET_ITER", "GET_YIELD_FROM_ITER", "LIST_EXTEND"):
            out += pyver.hook(hooks.h_iter, 1, (), loc) + [ins]
        elif name == "SET_UPDATE":  # the set (arg + 1 deep, below the iterable) sees the items that go in
            out += pyver.hook(hooks.h_iter, 1, (), loc) + _hash_add(int(iarg) + 1, 2, loc) + [ins]
        elif name == "DICT_UPDATE":
            out += _hash_add(int(iarg) + 1, 2, loc) + [ins]
        elif name == "SET_ADD":
            out += _hash_add(int(iarg) + 1, 1, loc) + [ins]
        elif name == "MAP_ADD":  # stack: ..., the dict (arg + 2 deep), ..., key, value
            out += [Instr("COPY", int(iarg) + 2, location=loc), Instr("COPY", 3, location=loc)] + \
                pyver.hook(hooks.h_hash_add, 2, (1,), loc) + [Instr("POP_TOP", location=loc), ins]
        elif name == "BUILD_MAP" and int(iarg) > 0:
            out += [Instr("BUILD_TUPLE", 2 * int(iarg), location=loc)] + pyver.hook(hooks.h_build_map, 1, (), loc)
        elif name == "BUILD_SET" and int(iarg) > 0:
            out += [Instr("BUILD_TUPLE", int(iarg), location=loc)] + pyver.hook(hooks.h_build_set, 1, (), loc)
        elif name == "DELETE_SUBSCR":
            out += pyver.hook(hooks.h_delitem, 2, (), loc) + [Instr("POP_TOP", location=loc)]
        elif name == "STORE_ATTR":
            out += pyver.hook(hooks.h_setattr, 2, (arg,), loc) + [Instr("POP_TOP", location=loc)]
        elif name == "BEFORE_WITH":
            out += pyver.hook(hooks.h_with, 1, (), loc) + [ins]
        elif name == "FORMAT_VALUE":  # 3.11/3.12: low bits = conversion, bit 2 = a spec is on the stack
            flags = int(iarg)
            if flags & 4:
                out += pyver.hook(hooks.h_format, 2, (flags & 3,), loc)
            else:
                out += pyver.hook(hooks.h_format_simple, 1, (flags & 3,), loc)
        elif name == "CONVERT_VALUE":
            out += pyver.hook(hooks.h_convert, 1, (int(iarg),), loc)
        elif name == "FORMAT_SIMPLE":
            out += pyver.hook(hooks.h_format_simple, 1, (0,), loc)
        elif name == "FORMAT_WITH_SPEC":
            out += pyver.hook(hooks.h_format, 2, (0,), loc)
        elif name == "BUILD_STRING" and int(iarg) > 0:
            out += pyver.hook(hooks.h_build_string, int(iarg), (), loc)
        elif name in ("UNPACK_SEQUENCE", "UNPACK_EX"):
            out += pyver.hook(hooks.h_unpack, 1, (), loc) + [ins]
        elif pyver.is_method_load(ins):
            if name == "LOAD_SUPER_ATTR":
                out.append(pyver.plain_attr_load(ins))
            else:
                out += pyver.hook(hooks.h_getattr, 1, (pyver.attr_name(ins),), loc)
            out += pyver.push_null_for_method(loc)
        elif name == "LOAD_ATTR":
            out += pyver.hook(hooks.h_getattr, 1, (pyver.attr_name(ins),), loc)
        else:
            out.append(ins)
    new = Bytecode(out)
    new._copy_attr_from(bc)
    return new


def _hash_add(depth: int, kind: int, loc: Any) -> list[Instr]:
    """``top = h_hash_add(container, top, kind)`` where the container is ``depth`` deep (see hooks)."""
    return [Instr("COPY", depth, location=loc), Instr("SWAP", 2, location=loc)] + \
        pyver.hook(hooks.h_hash_add, 2, (kind,), loc)


def _against_non_int_constant(instrs: list[Any], i: int) -> bool:
    """``x is None``, ``flag is True``: a traced int is never that object, whatever its value, so
    the test stays native (only ``a is b`` of two values and ``n is 3`` need the hook)."""
    prev = instrs[i - 1] if i else None
    return isinstance(prev, Instr) and prev.name == "LOAD_CONST" and \
        (type(prev.arg) is not int or isinstance(prev.arg, bool))


def _next_call_hookable(instrs: list[Any], i: int, hookable: set[int]) -> bool:
    for j in range(i + 1, min(i + 4, len(instrs))):
        ins = instrs[j]
        if isinstance(ins, Instr) and ins.name in ("PRECALL", "CALL"):
            return j in hookable
    return False
