"""Instrumenting real-world bytecode: every code object of a list of stdlib modules instruments,
instrumented copies of stdlib modules behave exactly like the originals when no tracer is active,
and a few stdlib workloads trace (recursing into stdlib Python code) and re-evaluate correctly."""
from __future__ import annotations

import importlib
import json
import math
import statistics
import sys
import textwrap
import time
import types
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

import irad
from irad.instrument import instrument_code, instrument_function, is_instrumented

MODULES = ["json.encoder", "json.decoder", "json.scanner", "ast", "dataclasses", "enum", "functools", "collections",
           "textwrap", "statistics", "fractions", "_pydecimal", "inspect", "typing", "re._parser", "re._compiler",
           "difflib", "string", "heapq", "copy", "pprint", "contextlib", "random", "tokenize", "argparse", "shlex"]


def _module_code(name: str) -> types.CodeType:
    mod = importlib.import_module(name)
    path = mod.__file__
    assert path and path.endswith(".py"), name
    with open(path, encoding="utf-8") as fh:
        return compile(fh.read(), path, "exec")


def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out.extend(_code_objects(c))
    return out


def test_instrument_every_code_object_of_stdlib_modules() -> None:
    start = time.perf_counter()
    total = 0
    for name in MODULES:
        code = _module_code(name)
        new = instrument_code(code)  # recursively instruments every nested code object
        assert is_instrumented(new)
        originals, instrumented = _code_objects(code), _code_objects(new)
        assert all(is_instrumented(b) for b in instrumented)
        key = lambda c: (c.co_firstlineno, c.co_qualname)  # noqa: E731 (constants may be reordered)
        assert sorted(map(key, originals)) == sorted(map(key, instrumented)), name
        total += len(originals)
    assert total > 2000
    assert time.perf_counter() - start < 60


def _instrumented_module(name: str) -> types.ModuleType:
    """A fresh copy of a stdlib module whose code (all of it) is instrumented."""
    real = importlib.import_module(name)
    mod = types.ModuleType(name)
    mod.__file__ = real.__file__
    mod.__package__ = real.__package__
    exec(instrument_code(_module_code(name)), mod.__dict__)
    return mod


DATA = {"b": [1, 2.5, {"c": None, "d": [True, False]}], "a": "x\u00e9\"y", "n": {"z": [], "y": {}}, "f": 1e-7}


def test_instrumented_json_encoder_and_decoder() -> None:
    enc = _instrumented_module("json.encoder")
    dec = _instrumented_module("json.decoder")
    for kw in ({"indent": 2}, {"indent": None, "sort_keys": True}, {"separators": (",", ":"), "indent": 1}):
        text = enc.JSONEncoder(**kw).encode(DATA)
        assert text == json.dumps(DATA, **kw)
        assert list(enc.JSONEncoder(**kw).iterencode(DATA)) == list(json.JSONEncoder(**kw).iterencode(DATA))
        assert dec.JSONDecoder().decode(text) == json.loads(text)
    assert dec.JSONDecoder(object_pairs_hook=OrderedDict).decode('{"b": 1, "a": [2]}') == \
        OrderedDict([("b", 1), ("a", [2])])


def test_instrumented_textwrap_statistics_fractions_decimal_difflib() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 6
    tw = _instrumented_module("textwrap")
    assert tw.fill(text, width=31) == textwrap.fill(text, width=31)
    assert tw.dedent("    a\n      b\n") == textwrap.dedent("    a\n      b\n")
    assert tw.shorten(text, 40) == textwrap.shorten(text, 40)

    st = _instrumented_module("statistics")
    data = [1.5, 2.25, 3.0, 10.0, -4.5, 2.25]
    for fname in ("mean", "fmean", "median", "stdev", "pvariance", "mode", "geometric_mean"):
        args = [abs(v) for v in data] if fname == "geometric_mean" else data
        assert getattr(st, fname)(args) == getattr(statistics, fname)(args), fname
    assert st.linear_regression([1.0, 2.0, 3.0], [2.0, 4.1, 5.9]) == \
        statistics.linear_regression([1.0, 2.0, 3.0], [2.0, 4.1, 5.9])

    fr = _instrumented_module("fractions")
    from fractions import Fraction
    a, b = fr.Fraction(3, 7), fr.Fraction("1.25")
    assert str(a + b) == str(Fraction(3, 7) + Fraction("1.25"))
    assert str(a ** 2 / b - 1) == str(Fraction(3, 7) ** 2 / Fraction("1.25") - 1)
    assert fr.Fraction(0.1).limit_denominator(100) == Fraction(0.1).limit_denominator(100)

    pd = _instrumented_module("_pydecimal")
    import decimal
    with pd.localcontext() as ctx:
        ctx.prec = 30
        mine = str(pd.Decimal(2).sqrt() * pd.Decimal("1.1") / 7)
    with decimal.localcontext() as ctx:
        ctx.prec = 30
        ref = str(decimal.Decimal(2).sqrt() * decimal.Decimal("1.1") / 7)
    assert mine == ref

    dl = _instrumented_module("difflib")
    import difflib
    x, y = ["a\n", "b\n", "c\n", "d\n"], ["a\n", "c\n", "x\n", "d\n"]
    assert list(dl.unified_diff(x, y)) == list(difflib.unified_diff(x, y))
    assert dl.SequenceMatcher(None, "abcd", "bcde").ratio() == difflib.SequenceMatcher(None, "abcd", "bcde").ratio()


def test_instrumented_ast_dataclasses_enum() -> None:
    src = "def f(x, *a, k=1, **kw):\n    return [i ** 2 for i in range(x) if i % 2] or {'a': (k, *a)}\n"
    am = _instrumented_module("ast")
    import ast
    assert am.unparse(am.parse(src)) == ast.unparse(ast.parse(src))
    assert am.dump(am.parse(src)) == ast.dump(ast.parse(src))
    assert am.literal_eval("[1, (2.5, 'x'), {3: None}]") == [1, (2.5, "x"), {3: None}]

    dm = _instrumented_module("dataclasses")

    @dm.dataclass(order=True, frozen=True)
    class P:
        x: float
        y: float = 0.0
        tags: tuple = dm.field(default=(), compare=False)

    p, q = P(1.0, 2.0), P(1.0, 3.0, ("t",))
    assert p < q and repr(q) == "test_instrumented_ast_dataclasses_enum.<locals>.P(x=1.0, y=3.0, tags=('t',))"
    assert dm.asdict(q) == {"x": 1.0, "y": 3.0, "tags": ("t",)} and dm.replace(p, y=5.0).y == 5.0

    em = _instrumented_module("enum")

    class Color(em.IntFlag):
        R = 1
        G = 2
        B = 4

    assert (Color.R | Color.B).value == 5 and Color(6) == Color.G | Color.B
    assert [c.name for c in Color] == ["R", "G", "B"]


def test_instrumented_functions_of_the_real_modules() -> None:
    """``instrument_function`` copies (shared globals, closures, defaults) behave like the originals."""
    assert instrument_function(textwrap.indent)("a\nb", "> ") == textwrap.indent("a\nb", "> ")
    assert instrument_function(statistics.median_grouped)([1, 2, 2, 3]) == statistics.median_grouped([1, 2, 2, 3])
    import functools
    cached = functools.lru_cache(maxsize=4)(lambda n: n * 2)
    wrapped = instrument_function(functools.reduce.__call__.__class__.__call__) if False else None
    assert wrapped is None and cached(3) == 6
    dumps = instrument_function(json.dumps)
    assert dumps(DATA, indent=3) == json.dumps(DATA, indent=3)  # keyword-only defaults (__kwdefaults__)


# ---- stdlib workloads traced ------------------------------------------------------------------

def test_trace_through_statistics_and_math() -> None:
    def f(a, b, c):
        xs = [a, b * 2.0, c + 1.0]
        return statistics.fmean(xs) + math.fsum(xs) + statistics.fmean([a, c], weights=[1.0, 3.0])

    args = (1.5, 0.25, -2.0)
    g = irad.trace(f, *args)
    irad.verify(g)
    assert g(*args) == f(*args)
    assert g(0.5, 3.0, 4.0) == f(0.5, 3.0, 4.0)


def test_trace_through_json_dumps_of_traced_floats() -> None:
    def f(x):
        s = json.dumps({"loss": float(x.sum()), "first": float(x[0])}, indent=1)
        return x * 2.0, s

    x = np.array([1.0, 2.5])
    g = irad.trace(f, x)
    irad.verify(g)
    out, s = g(x)
    assert s == f(x)[1]
    x2 = np.array([-3.25, 0.5])
    out2, s2 = g(x2)
    assert s2 == f(x2)[1] == json.dumps({"loss": -2.75, "first": -3.25}, indent=1)
    np.testing.assert_allclose(out2, x2 * 2.0)


def test_trace_through_textwrap_of_a_traced_label() -> None:
    def f(x):
        label = textwrap.shorten(f"value {x[0]:.3f} and {x[1]:.3f}", width=40)
        return label.upper()

    x = np.array([1.0, 2.0])
    g = irad.trace(f, x)
    x2 = np.array([7.5, 1.25])  # same text widths: the same branches of textwrap
    assert g(x2) == f(x2) == "VALUE 7.500 AND 1.250"
    x3 = np.array([7.5, -1.25])  # a longer word: textwrap measured lengths, so a guard fails
    with pytest.raises(irad.GuardError, match="textwrap.py"):
        g(x3)
    assert irad.trace(f, x3)(x3) == f(x3) == "VALUE 7.500 AND -1.250"
