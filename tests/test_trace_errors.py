"""Every tracer error path: the class from irad.errors, and a message that names the construct,
the function and its file:line (and says what to write instead).  Also the frame-sensitive
builtins, which must work inside traced code."""
from __future__ import annotations

import inspect
import os
import re
import sys

import numpy as np
import pytest

import irad
from irad.errors import GuardError, MutationError, TraceError, UnsupportedError, VerifyError
from irad.ir import Graph, Op, ScalarT, ArrayT, Var, verify

HERE = os.path.basename(__file__)


def line_of(fn, text: str) -> int:
    """The file line of the first source line of ``fn`` that contains ``text``."""
    lines, start = inspect.getsourcelines(fn)
    for k, ln in enumerate(lines):
        if text in ln:
            return start + k
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def check(exc: BaseException, construct: str, fn, text: str) -> None:
    msg = str(exc)
    assert re.search(construct, msg), msg
    assert f"{fn.__qualname__} (" in msg, msg
    assert f"{HERE}:{line_of(fn, text)})" in msg, msg


# ---- mutation ---------------------------------------------------------------------------------

def test_view_read_after_base_update_is_rederived() -> None:
    """``v = a[:2]; a *= 2; v.sum()``: the view sees the update (it is re-derived from ``a``)."""
    def f(x):
        a = x.copy()
        v = a[:2]
        a *= 2.0
        return v.sum()

    x = np.array([1.0, 2.0, 3.0])
    g = irad.trace(f, x)
    assert f(x) == 6.0 and g(x) == 6.0
    assert g(np.array([5.0, 1.0, 0.0])) == 12.0
    assert "operator.getitem(%3, :2)" in str(g)  # re-derived from the updated array


def test_mutating_an_argument_that_aliases_another() -> None:
    def f(x, y):
        x += 1.0
        return y.sum()

    a = np.ones(3)
    with pytest.raises(MutationError) as e:
        irad.trace(f, a, a)
    check(e.value, r"used after an in-place update \(add= at .*\) changed its memory through another array",
          f, "return y.sum()")
    assert "copy first" in str(e.value)


def test_write_through_a_view_irad_cannot_invert() -> None:
    def f(x):
        a = x.copy()
        b = a.view(np.int64)
        b[0] = 0
        return a.sum()

    with pytest.raises(MutationError) as e:
        irad.trace(f, np.ones(3))
    check(e.value, r"in-place update \(a\[i\] = v at .*\)", f, "return a.sum()")


def test_writing_into_a_view_of_an_untracked_array() -> None:
    def f(x):
        buf = np.zeros(4)
        v = np.lib.stride_tricks.as_strided(buf, shape=(2,), strides=(16,))
        v[0] = x[0]
        return buf.sum()

    with pytest.raises(MutationError) as e:
        irad.trace(f, np.ones(3))
    check(e.value, r"in-place update \(a\[i\] = v\) of an array while it is a view of an array irad does not "
          "track", f, "v[0] = x[0]")


W_MUTABLE = np.zeros(3)


def test_writing_traced_values_into_a_global_array() -> None:
    """The update happens on every call, as in Python: the compiled program writes it back."""
    def f(x):
        W_MUTABLE[:] = x
        return (W_MUTABLE ** 2).sum()

    W_MUTABLE[:] = 0.0
    vg = irad.value_and_grad(f)
    for x in (np.ones(3), np.array([1.0, -2.0, 0.5]), np.array([3.0, 0.0, 1.0])):
        value, grad = vg(x)
        np.testing.assert_allclose(W_MUTABLE, x)
        np.testing.assert_allclose(value, (x ** 2).sum())
        np.testing.assert_allclose(grad, 2 * x)
    with pytest.raises(MutationError) as e:
        irad.vjp(f, np.ones(3))
    assert "in place" in str(e.value)


def test_untraced_update_of_a_constant_keeps_old_uses() -> None:
    """A world array read before an (untraced) update keeps its old contents for those uses;
    the graph reads the array live, so evaluating it again is calling ``f`` again."""
    C = np.ones(2)

    def f(x):
        y = x * C
        C[0] = 5.0
        return y.sum() + (x * C).sum()

    x = np.array([1.0, 2.0])
    want = f(x)
    C[0] = 1.0
    g = irad.trace(f, x)
    C[0] = 1.0
    assert g(x) == want == 3.0 + 7.0
    vg = irad.value_and_grad(f)
    for _ in range(3):
        before = C.copy()
        value, grad = vg(x)
        assert value == (x * before).sum() + 5.0 + 2.0 and C[0] == 5.0
        np.testing.assert_allclose(grad, before + np.array([5.0, 1.0]))


# ---- unsupported constructs -------------------------------------------------------------------

def test_eval_inside_traced_code() -> None:
    def f(x):
        return eval("x * 2")

    with pytest.raises(UnsupportedError) as e:
        irad.trace(f, np.ones(2))
    check(e.value, r"eval\(\) inside a traced function", f, 'eval("x * 2")')


def test_exec_inside_traced_code() -> None:
    def f(x):
        exec("y = 1")
        return x

    with pytest.raises(UnsupportedError) as e:
        irad.trace(f, np.ones(2))
    check(e.value, r"exec\(\) inside a traced function", f, 'exec("y = 1")')


def test_flat_iterator() -> None:
    def f(x):
        return sum(x.flat)

    with pytest.raises(UnsupportedError) as e:
        irad.trace(f, np.ones(2))
    check(e.value, r"the \.flat iterator of a traced array cannot be traced", f, "x.flat")
    assert "a.ravel()" in str(e.value)


def test_sorted_by_untraced_keys_works() -> None:
    def f(d):
        return sorted(d.items())[0][1].sum()

    d = {"b": np.ones(2), "a": np.array([1.0, 5.0])}
    assert irad.trace(f, d)(d) == 6.0


def test_np_put_with_traced_indices() -> None:
    def f(x):
        a = x.copy()
        np.put(a, np.argsort(x)[:1], 5.0)  # (constant indices are an assignment: see test_heldout.py)
        return a

    with pytest.raises(UnsupportedError) as e:
        irad.trace(f, np.ones(2))
    check(e.value, r"np\.put with traced indices", f, "np.put(a")


def test_resize_method_on_traced_array() -> None:
    def f(x):
        a = x * 2.0
        a.resize(4)
        return a

    with pytest.raises(UnsupportedError) as e:
        irad.trace(f, np.ones(2))
    check(e.value, r"the in-place method a\.resize\(\) on a traced array", f, "a.resize(4)")


def test_ufunc_at_other_than_add() -> None:
    def f(x):
        a = x.copy()
        np.multiply.at(a, [0], 2.0)
        return a

    with pytest.raises(UnsupportedError) as e:
        irad.trace(f, np.ones(2))
    check(e.value, r"np\.multiply\.at cannot be traced", f, "np.multiply.at")


def test_out_with_several_outputs() -> None:
    def f(x):
        a, b = np.empty(2), np.empty(2)
        np.divmod(x, 2.0, out=(a, b))
        return a

    with pytest.raises(UnsupportedError) as e:
        irad.trace(f, np.ones(2))
    check(e.value, r"out=\.\.\.\) with several outputs", f, "np.divmod")


def test_errors_are_irad_errors() -> None:
    assert issubclass(UnsupportedError, TraceError) and issubclass(MutationError, TraceError)
    assert issubclass(TraceError, irad.IradError) and issubclass(GuardError, irad.IradError)


# ---- guards -------------------------------------------------------------------------------

def test_guard_error_names_the_branch() -> None:
    def f(x):
        if x.sum() > 0:
            return x * 2.0
        return -x

    g = irad.trace(f, np.ones(3))
    assert len(g.guards) == 1
    np.testing.assert_allclose(g(np.full(3, 2.0)), 4.0)
    with pytest.raises(GuardError) as e:
        g(-np.ones(3))
    msg = str(e.value)
    assert "guard failed: value is False, traced with True" in msg
    assert f"f ({__file__}:{line_of(f, 'if x.sum() > 0')})" in msg
    assert "the traced branch no longer applies (graph f)" in msg


def test_static_argument_mismatch() -> None:
    def f(x, n):
        for _ in range(n):
            x = x * 2.0
        return x

    g = irad.trace(f, np.ones(2), 3)
    np.testing.assert_allclose(g(np.ones(2), 3), 8.0)
    with pytest.raises(GuardError) as e:
        g(np.ones(2), 4)
    assert "static argument 1 was 3 when traced, got 4; trace again with the new value" in str(e.value)
    with pytest.raises(GuardError):
        g(np.ones(2), 3.5)  # a float is traced as data: different structure of statics
    with pytest.raises(TypeError, match="arguments have structure"):
        g(np.ones(2))


def test_static_object_argument_compared_by_identity() -> None:
    class Config:
        def __init__(self, w):
            self.w = w

        def __eq__(self, other):
            return self.w == other.w  # an array: not a plain bool

    def f(x, c):
        return x * c.w

    c = Config(np.ones(2))
    g = irad.trace(f, np.ones(2), c)
    np.testing.assert_allclose(g(np.ones(2), c), 1.0)
    with pytest.raises(GuardError, match="static argument 1"):
        g(np.ones(2), Config(np.ones(2)))


# ---- verify on malformed graphs -----------------------------------------------------------

def _graph(ops, inputs, outputs) -> Graph:
    return Graph("bad", tuple(inputs), tuple(ops), tuple(outputs))


F3 = ArrayT("float64", (3,))


def test_verify_use_before_definition() -> None:
    x, y, z = Var(0, F3), Var(1, F3), Var(2, F3)
    ops = [Op("numpy.sin", (y,), (), (z,), np.sin), Op("numpy.cos", (x,), (), (y,), np.cos)]
    with pytest.raises(VerifyError) as e:
        verify(_graph(ops, [x], [z]))
    msg = str(e.value)
    assert msg.startswith("%1 used before definition\nwhile checking graph:")
    assert "> " + "  %2: f64[3] = numpy.sin(%1)" in msg
    assert "  graph bad(%0: f64[3]) -> f64[3]:" in msg


def test_verify_double_assignment() -> None:
    x, y = Var(0, F3), Var(1, F3)
    ops = [Op("numpy.sin", (x,), (), (y,), np.sin), Op("numpy.cos", (x,), (), (y,), np.cos)]
    with pytest.raises(VerifyError) as e:
        verify(_graph(ops, [x], [y]))
    msg = str(e.value)
    assert msg.startswith("%1 is assigned twice (single assignment violated)")
    assert ">   %1: f64[3] = numpy.cos(%0)" in msg
    assert "    %1: f64[3] = numpy.sin(%0)" in msg


def test_verify_type_mismatch() -> None:
    x, y = Var(0, F3), Var(1, F3)
    wrong = Var(1, ScalarT("float"))
    ops = [Op("numpy.sin", (x,), (), (y,), np.sin), Op("numpy.cos", (wrong,), (), (Var(2, F3),), np.cos)]
    with pytest.raises(VerifyError) as e:
        verify(_graph(ops, [x], [Var(2, F3)]))
    msg = str(e.value)
    assert msg.startswith("%1 used as float but defined as f64[3]")
    assert ">   %2: f64[3] = numpy.cos(%1)" in msg


def test_verify_undefined_output_and_input_twice() -> None:
    x = Var(0, F3)
    with pytest.raises(VerifyError, match="output %5 is never defined"):
        verify(_graph([], [x], [Var(5, F3)]))
    with pytest.raises(VerifyError, match="defined twice"):
        verify(_graph([], [x, x], [x]))
    with pytest.raises(VerifyError, match="has no callable"):
        verify(_graph([Op("numpy.sin", (x,), (), (Var(1, F3),), None)], [x], [Var(1, F3)]))


def test_verify_quotes_a_window_around_the_fault() -> None:
    x = Var(0, F3)
    ops, prev = [], x
    for k in range(1, 20):
        v = Var(k, F3)
        ops.append(Op("numpy.sin", (prev,), (), (v,), np.sin))
        prev = v
    ops[12] = Op("numpy.sin", (Var(40, F3),), (), (Var(13, F3),), np.sin)
    with pytest.raises(VerifyError) as e:
        verify(_graph(ops, [x], [prev]))
    quoted = str(e.value).split("while checking graph:\n")[1].splitlines()
    assert len(quoted) == 11
    assert quoted[5] == ">   %13: f64[3] = numpy.sin(%40)"
    assert sum(ln.startswith(">") for ln in quoted) == 1


# ---- frame-sensitive builtins work inside traced code -----------------------------------------

class Base:
    def __init__(self, w):
        self.w = w

    def apply(self, x):
        return x * self.w


class Child(Base):
    def __init__(self, w):
        super().__init__(w * 2.0)

    def apply(self, x):
        return super().apply(x) + 1.0


def test_zero_argument_super() -> None:
    def f(x, w):
        return Child(w).apply(x).sum()

    x, w = np.ones(3), np.full(3, 0.5)
    g = irad.trace(f, x, w)
    assert g(x, w) == f(x, w) == 6.0
    x2, w2 = np.arange(3.0), np.ones(3)
    assert g(x2, w2) == f(x2, w2)
    assert "operator.mul(%1, 2.0)" in str(g)


def test_locals_globals_vars_dir() -> None:
    def f(x):
        y = x * 2.0
        names = dir()
        scope = locals()
        z = scope["y"] + vars()["x"]
        w = globals()["W_MUTABLE"]
        return (z + w).sum() + len(names)

    x = np.arange(3.0)
    g = irad.trace(f, x)
    assert g(x) == f(x)
    assert g(x + 1.0) == f(x + 1.0)
    assert "operator.add(%1, %0)" in str(g)


def test_getframe_sees_the_user_frame() -> None:
    def f(x):
        return x * len(sys._getframe().f_code.co_name)

    g = irad.trace(f, np.ones(2))
    np.testing.assert_allclose(g(np.ones(2)), 1.0)


def test_vars_of_an_object() -> None:
    def f(x):
        b = Base(x)
        return vars(b)["w"].sum()

    assert irad.trace(f, np.ones(3))(np.arange(3.0)) == 3.0


# ---- instrumentation ----------------------------------------------------------------------

def test_instrumented_code_runs_natively_without_a_tracer() -> None:
    from irad.instrument import instrument_function

    def f(x, d):
        s = f"{x:.2f}"
        d.attr = x * 2
        with open(os.devnull) as fh:
            fh.read()
        return [*range(3)], s, d.attr, not x

    class D:
        pass

    inst = instrument_function(f)
    assert inst is not f
    assert inst(1.5, D()) == f(1.5, D())
