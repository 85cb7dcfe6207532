"""ONNX export (``irad.onnx``): onnxruntime runs the exported gradient programs and matches irad.

Skipped where ``onnx``/``onnxruntime`` are not installed (``pip install irad[onnx]``).
"""
from __future__ import annotations

import collections
import inspect
import os
import re
import sys
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX export needs the onnx package (pip install irad[onnx])")
ort = pytest.importorskip("onnxruntime", reason="running exported models needs onnxruntime (pip install irad[onnx])")

import irad  # noqa: E402
import irad.onnx as ionnx  # noqa: E402
from irad.pytree import flatten  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks/ is not an installed package
from benchmarks import workloads as W  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from functions import CASES  # noqa: E402


from onnx_run import expected, run_model  # noqa: E402  (after importorskip)


WORKLOADS = {
    "mlp": (W.mlp_loss, lambda r: W.mlp_args(r, 16, 8, 12, 4)),
    "logreg": (W.logreg_loss, lambda r: W.logreg_args(r, 50, 5)),
    "rnn": (W.rnn_loss, lambda r: W.rnn_args(r, 5, 3, 4, 6)),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_gradient_runs_in_onnxruntime(name, tmp_path):
    f, make = WORKLOADS[name]
    args = make(np.random.default_rng(0))
    path = tmp_path / f"{name}.onnx"
    model = ionnx.export(f, *args, path=str(path))
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert model.opset_import[0].version == ionnx.OPSET == onnx.defs.onnx_opset_version()
    prog = irad.compile(f, *args)
    sess, outs = run_model(model, prog, args)
    want = expected(prog, args)
    assert len(outs) == len(want)
    for got, w in zip(outs, want):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-10)
    # readable, typed names: pytree paths for inputs, grad.<path> for gradients
    names = [o.name for o in sess.get_outputs()]
    assert names[0] == "value"
    if name == "mlp":
        assert [i.name for i in sess.get_inputs()] == ["params.W1", "params.b1", "params.W2", "params.b2", "x", "y"]
        assert names[1:] == ["grad.params.W1", "grad.params.b1", "grad.params.W2", "grad.params.b2"]
        assert sess.get_inputs()[0].shape == [8, 12] and sess.get_inputs()[0].type == "tensor(double)"
    if name == "logreg":
        assert names == ["value", "grad.w"]


def test_forward_export_and_fresh_inputs():
    f, make = WORKLOADS["mlp"]
    args = make(np.random.default_rng(1))
    model = ionnx.export(f, *args, gradient=False)
    prog = irad.compile(f, *args)
    other = make(np.random.default_rng(2))  # the model is a program, not a snapshot of one call
    _, outs = run_model(model, prog, other)
    assert len(outs) == 1
    np.testing.assert_allclose(outs[0], f(*other), rtol=0, atol=1e-10)


def test_multiple_argnums_and_basic_indexing():
    def f(a, b):
        h = np.tanh(a[1:, None, ::2] * b[..., 0])
        return np.sum(h ** 2) / np.max(np.abs(b)) + np.where(a > 0, a, 0.0).mean()

    rng = np.random.default_rng(3)
    args = (rng.standard_normal((4, 6)), rng.standard_normal((3, 2)))
    model = ionnx.export(f, *args, argnums=(0, 1))
    prog = irad.compile(f, *args, argnums=(0, 1))
    sess, outs = run_model(model, prog, args)
    assert [o.name for o in sess.get_outputs()] == ["value", "grad.a", "grad.b"]
    for got, w in zip(outs, expected(prog, args)):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-10)


def _rule_calls(g):
    """The ONNX function name stem of each rule call of a joint graph, but for pullbacks of a
    constant cotangent (the seed): those are constants, computed by plain nodes."""
    return {f"{'fwd' if op.prim == 'rule_fwd' else 'pullback'}.{op.kw('_rule').name}"
            for op in g.ops if op.prim == "rule_fwd" or (op.prim == "pullback" and isinstance(op.args[1], irad.Var))}


NO_INLINE = tuple(p for p in irad.passes.PIPELINE if p is not irad.passes.inline_pullbacks)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_rules_export_as_onnx_functions_named_after_them(name):
    f, make = WORKLOADS[name]
    args = make(np.random.default_rng(6))
    model = ionnx.export(f, *args, inline=False)
    assert {(o.domain, o.version) for o in model.opset_import} == {("", ionnx.OPSET), ("irad", 1)}
    functions = {fn.name: fn for fn in model.functions}
    assert all(fn.domain == "irad" for fn in functions.values())
    called = {n.op_type for n in model.graph.node if n.domain == "irad"}
    assert called == set(functions)
    # one function per rule call of the joint graph (``.2``, ...: the same rule at other shapes)
    joint = irad.compile(f, *args, passes=NO_INLINE).graph
    assert {re.sub(r"\.\d+$", "", c) for c in called} == _rule_calls(joint)
    if name == "mlp":
        assert "pullback.numpy.tanh" in functions
        body = [n.op_type for n in functions["pullback.numpy.tanh"].node]
        # ybar / cosh(clip(x))**2 (accurate where 1 - y*y is not): ONNX's Cosh has no float64 kernel
        # in onnxruntime, so cosh lowers through Exp
        assert "Mul" in body and ("Cosh" in body or "Exp" in body)
    prog = irad.compile(f, *args)
    _, outs = run_model(model, prog, args)
    for got, w in zip(outs, expected(prog, args)):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-10)
    # the functions inline back on import
    leaves = flatten(args)[0]
    for got, w in zip(ionnx.load(model)(*leaves), expected(prog, args)):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-10)


def test_a_rule_with_no_onnx_form_says_why():
    def f(x):
        return np.sum(x[x > 0] ** 2)  # how many elements the mask selects is data

    with pytest.raises(ionnx.ExportError) as info:
        ionnx.export(f, np.array([1.0, -2.0, 3.0]), inline=False)
    msg = str(info.value)
    assert f"rule_fwd[operator.getitem] at {_line(f, 'x[x > 0]')}: a rule with no ONNX form: " in msg
    assert "irad.primitives.guard_shape" in msg


def _line(fn, text):
    src, start = inspect.getsourcelines(fn)
    return f"test_onnx.py:{start + next(i for i, ln in enumerate(src) if text in ln)}"


def test_export_error_lists_every_blocking_op_with_its_line():
    def opaque(x):
        return x * 2.0

    class Pullback:
        def __call__(self, g):
            return (2.0 * g,)

    @irad.rrule(opaque)
    def _(x):
        return x * 2.0, Pullback()  # a callable object: cannot be lifted into a named pullback

    def bad(x):
        y = np.arctan(x)  # no float64 kernel in onnxruntime: not mapped
        if x[0] > 0:  # value-dependent control flow: a guard
            y = y * 2.0
        return (opaque(y) + np.sort(x)).sum()

    x = np.array([0.5, -1.0, 2.0])
    with pytest.raises(ionnx.ExportError) as info:
        ionnx.export(bad, x)
    err = info.value
    assert isinstance(err, irad.IradError)
    msg = str(err)
    assert "cannot export bad_grad to ONNX" in msg
    assert f"numpy.arctan at {_line(bad, 'np.arctan')}: no ONNX mapping" in msg
    assert f"irad.primitives.guard at {_line(bad, 'if x[0]')}: value-dependent control flow" in msg
    assert "call_pullback[" in msg and "opaque" in msg and "Pullback" in msg
    assert "a rule with no ONNX form: its pullback is a closure irad could not lift" in msg
    assert f"at {_line(bad, 'opaque(y)')}" in msg
    assert len(err.problems) >= 3


def test_forward_export_error_names_the_op():
    def f(x):
        return np.linalg.inv(x).sum()  # ONNX has no matrix inverse

    with pytest.raises(ionnx.ExportError, match=r"numpy\.linalg\.inv at test_onnx\.py:\d+: no ONNX mapping"):
        ionnx.export(f, np.eye(2) * 2.0, gradient=False)


def test_corpus_export_report(capsys):
    """How much of the shared corpus exports; what blocks the rest (printed with the test output)."""
    n = exported = 0
    blockers: collections.Counter[str] = collections.Counter()
    mismatched = []
    for case in CASES:
        if not case.differentiable:
            continue
        n += 1
        args = case.make_args(np.random.default_rng(0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                model = ionnx.export(case.fn, *args, argnums=case.argnums)
            except ionnx.ExportError as e:
                for p in {p.split(" at ")[0].split(":")[0] for p in e.problems}:
                    blockers[p] += 1
                continue
            prog = irad.compile(case.fn, *args, argnums=case.argnums)
        exported += 1
        want = expected(prog, args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            as_functions = ionnx.export(case.fn, *args, argnums=case.argnums, inline=False)
        for m in (model, as_functions):  # rules inlined; rules as ONNX functions
            _, outs = run_model(m, prog, args)
            if len(outs) != len(want) or any(not np.allclose(a, b, rtol=0, atol=1e-10) for a, b in zip(outs, want)):
                mismatched.append(case.name)
    report = [f"irad.onnx: {exported}/{n} differentiable corpus functions export (gradient programs, with rules "
              f"inlined and as ONNX functions); onnxruntime matches irad on all of them to 1e-10"
              if not mismatched else f"mismatch: {mismatched}",
              "ops blocking the rest (functions blocked): " +
              ", ".join(f"{k} ({v})" for k, v in blockers.most_common())]
    with capsys.disabled():  # shown with or without -s
        print("\n" + "\n".join(report))
    assert not mismatched
    assert exported >= 100


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_import_round_trip_and_grad_of_imported_model(name):
    f, make = WORKLOADS[name]
    args = make(np.random.default_rng(4))
    leaves = flatten(args)[0]
    model = ionnx.export(f, *args, gradient=False)
    g = ionnx.load(model)
    assert isinstance(g, irad.Graph)
    irad.verify(g)
    other = flatten(make(np.random.default_rng(5)))[0]
    np.testing.assert_allclose(g(*other), f(*make(np.random.default_rng(5))), rtol=0, atol=1e-12)
    fn = ionnx.load_function(model)
    irad.testing.check_grads(fn, *leaves, argnums=0)
    # the imported gradient program computes what irad computes
    gm = ionnx.load(ionnx.export(f, *args))
    prog = irad.compile(f, *args)
    for got, w in zip(gm(*leaves), expected(prog, args)):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-10)


def test_import_round_trip_corpus():
    """Every forward program of the corpus that exports loads back and evaluates to the same values."""
    n = 0
    for case in CASES:
        if not case.differentiable:
            continue
        args = case.make_args(np.random.default_rng(0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                model = ionnx.export(case.fn, *args, gradient=False)
            except ionnx.ExportError:
                continue
            prog = irad.compile(case.fn, *args, argnums=case.argnums)
            fn = ionnx.load_function(model)
        statics = {i for i, _ in prog.forward.statics}
        leaves = [x for i, x in enumerate(flatten((args, {}))[0]) if i not in statics]
        np.testing.assert_allclose(fn(*[np.asarray(x) for x in leaves]), prog(*args)[0], rtol=0, atol=1e-10,
                                   err_msg=case.name)
        n += 1
    assert n >= 100


def test_cli_export(tmp_path, capsys):
    from irad.cli import main

    out = tmp_path / "logreg.onnx"
    target = os.path.join(ROOT, "benchmarks", "workloads.py") + ":logreg_loss"
    assert main(["export", target, "--args", "np.ones(3), np.ones((5, 3)), np.zeros(5)", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "outputs: value, grad.w" in printed
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    assert main(["export", target, "--args", "np.ones(3), np.ones((5, 3)), np.zeros(5)", "-o", str(out),
                 "--rules-as-functions"]) == 0
    assert "functions (rules)" in capsys.readouterr().out
    assert "pullback.numpy.logaddexp" in {f.name for f in onnx.load(str(out)).functions}
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\n\ndef f(x):\n    return np.linalg.inv(x).sum()\n")
    assert main(["export", f"{bad}:f", "--args", "2.0 * np.eye(2)", "-o", str(tmp_path / "b.onnx")]) == 1
    err = capsys.readouterr().err
    assert "ExportError" in err and "numpy.linalg.inv at bad.py:4: no ONNX mapping" in err


def test_irad_onnx_is_available_after_a_plain_import():
    import subprocess
    import sys
    code = "import irad; print(callable(irad.onnx.export), callable(irad.onnx.load))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True True"
