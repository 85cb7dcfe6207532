"""The ``irad`` command line: ``irad demo``, ``irad trace FILE.py:FUNC [--args EXPR] [--grad]
[--dot] [--svg OUT.svg]`` and ``irad export FILE.py:FUNC [--args EXPR] -o MODEL.onnx``.

``irad`` itself is imported inside the commands, so ``irad --help`` stays fast and works even
when a later pipeline stage is broken.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mlp.py"


class CliError(Exception):
    """A usage problem: printed as ``irad: error: ...`` with exit status 2."""


# ---- loading user code ----------------------------------------------------------------------


def load_module(path: str | os.PathLike[str]) -> ModuleType:
    """Import a Python file as a module, the way ``python FILE`` would find its neighbours."""
    p = Path(path)
    if not p.is_file():
        raise CliError(f"no such file: {p}")
    p = p.resolve()
    name = p.stem if p.stem.isidentifier() and p.stem not in sys.modules else f"_irad_cli_{abs(hash(p))}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {p}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(p.parent))  # NOTE: lets the file import its sibling modules
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def find_function(module: ModuleType, qualname: str) -> Callable[..., Any]:
    """``module.a.b`` for ``qualname == 'a.b'``; a clear error if it is missing or not callable."""
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise CliError(f"{module.__file__} has no function {qualname!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CliError(f"{qualname} in {module.__file__} is a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]


def as_args(value: Any) -> tuple[Any, ...]:
    """A tuple is the argument list; any other value is the single argument."""
    return value if type(value) is tuple else (value,)


def eval_args(expr: str) -> tuple[Any, ...]:
    """Evaluate ``--args``: a Python expression with ``np`` (numpy) in scope."""
    import numpy as np

    try:
        value = eval(expr, {"np": np, "numpy": np})  # noqa: S307 (the user's own command line)
    except Exception as e:
        raise CliError(f"--args {expr!r} failed: {type(e).__name__}: {e}") from None
    return as_args(value)


def example_args_for(module: ModuleType, func_name: str) -> tuple[Any, ...]:
    """Arguments from the module's ``FUNC_args()`` or ``example_args()``."""
    short = func_name.rsplit(".", 1)[-1]
    for name in (f"{short}_args", "example_args"):
        maker = getattr(module, name, None)
        if callable(maker):
            return as_args(maker())
    raise CliError(
        f"no arguments for {func_name}: pass --args 'EXPR' (a Python expression with np in scope, "
        f"e.g. --args 'np.ones(3), 2.0'), or define {short}_args() or example_args() in {module.__file__}")


# ---- irad demo -------------------------------------------------------------------------------

Context = dict[str, Any]
Step = tuple[str, Callable[[Context], None]]


def _step_trace(ctx: Context) -> None:
    import irad

    g = irad.trace(ctx["f"], *ctx["args"])
    ctx["graph"] = g
    print(g)


def _step_compile(ctx: Context) -> None:
    import irad

    prog = irad.compile(ctx["f"], *ctx["args"], argnums=0)
    ctx["program"] = prog
    print(prog.graph)


def _step_source(ctx: Context) -> None:
    print(ctx["program"].source)


def _step_check(ctx: Context) -> None:
    import irad.testing

    irad.testing.check_grads(ctx["f"], *ctx["args"], argnums=0)
    value, grads = ctx["program"](*ctx["args"])
    print(f"loss = {float(value):.6f}")
    for k, g in grads.items():
        print(f"|d loss / d {k}| = {float((g ** 2).sum() ** 0.5):.6f}")
    print("gradient check against central finite differences: passed")


def demo_steps() -> list[Step]:
    """The steps of ``irad demo``, in order: ``(title, step(ctx))``.

    ``ctx`` starts with ``f`` (the example loss) and ``args``; each step may add results
    (``ctx['graph']`` after the trace) for the steps after it.
    """
    return [
        ("trace: the typed SSA IR of one call, g = irad.trace(loss, params, x, y)", _step_trace),
        ("reverse mode: the joint forward+backward graph, prog = irad.compile(loss, params, x, y)", _step_compile),
        ("lowering: the generated gradient program, prog.source", _step_source),
        ("check: irad.testing.check_grads(loss, params, x, y, argnums=0)", _step_check),
    ]


def cmd_demo(ns: argparse.Namespace) -> int:
    if not EXAMPLE.is_file():
        raise CliError(f"the bundled example is missing: {EXAMPLE} (install irad from a source checkout)")
    module = load_module(EXAMPLE)
    ctx: Context = {"f": module.loss, "args": module.example_args(), "example": EXAMPLE}
    print(f"# irad demo: loss(params, x, y) from {EXAMPLE.parent.name}/{EXAMPLE.name}")
    for i, (title, step) in enumerate(demo_steps(), 1):
        print(f"\n## {i}. {title}\n")
        step(ctx)
    return 0


# ---- irad trace ------------------------------------------------------------------------------


def cmd_trace(ns: argparse.Namespace) -> int:
    file, sep, func_name = str(ns.target).rpartition(":")
    if not sep or not file or not func_name:
        raise CliError(f"expected FILE.py:FUNC, got {ns.target!r}")
    if not ns.grad and (ns.argnums is not None or ns.no_passes):
        raise CliError("--argnums and --no-passes choose the gradient program: add --grad")
    import irad.dot

    if ns.svg is not None and irad.dot.dot_program() is None:  # (before tracing: say so at once)
        raise CliError("--svg needs Graphviz's dot program, which is not installed (apt-get install graphviz, "
                       "brew install graphviz or conda install graphviz); --dot prints the DOT source without it")
    module = load_module(file)
    func = find_function(module, func_name)
    args = eval_args(ns.args) if ns.args is not None else example_args_for(module, func_name)
    if ns.grad:
        nums = eval_args(ns.argnums) if ns.argnums is not None else (0,)
        prog = irad.compile(func, *args, argnums=nums[0] if len(nums) == 1 else nums,
                            passes=[] if ns.no_passes else None)
        graph, text, to_dot = prog.graph, prog.source.rstrip("\n"), prog.to_dot
    else:
        graph = irad.trace(func, *args)
        text, to_dot = str(graph), graph.to_dot
    if not ns.dot and ns.svg is None:
        print(text)
        return 0
    src = to_dot()
    if ns.dot:
        print(src, end="")
    if ns.svg is not None:
        svg = irad.dot.render_svg(src)
        try:
            Path(ns.svg).write_text(svg)
        except OSError as e:
            raise CliError(f"cannot write {ns.svg}: {e.strerror or e}") from None
        print(f"wrote {ns.svg}: graph {graph.name}, {len(graph.ops)} ops", file=sys.stderr if ns.dot else sys.stdout)
    return 0


# ---- irad export -----------------------------------------------------------------------------


def cmd_export(ns: argparse.Namespace) -> int:
    file, sep, func_name = str(ns.target).rpartition(":")
    if not sep or not file or not func_name:
        raise CliError(f"expected FILE.py:FUNC, got {ns.target!r}")
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise CliError("irad export needs the onnx package: pip install 'irad[onnx]'") from None
    module = load_module(file)
    func = find_function(module, func_name)
    args = eval_args(ns.args) if ns.args is not None else example_args_for(module, func_name)
    nums = eval_args(ns.argnums) if ns.argnums is not None else (0,)
    argnums: Any = nums[0] if len(nums) == 1 else nums

    import irad.onnx

    model = irad.onnx.export(func, *args, argnums=argnums, gradient=not ns.forward, path=ns.output,
                             inline=not ns.rules_as_functions)
    g = model.graph
    fns = f", {len(model.functions)} functions (rules)" if model.functions else ""
    print(f"wrote {ns.output}: {len(g.node)} ONNX nodes{fns}, opset {model.opset_import[0].version}")
    print("  inputs:  " + ", ".join(i.name for i in g.input))
    print("  outputs: " + ", ".join(o.name for o in g.output))
    return 0


# ---- entry point -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="irad", description="irad: a reverse-mode AD compiler for plain Python/numpy code.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = sub.add_parser("demo", help="trace the bundled MLP example and print its IR",
                          description="Trace examples/mlp.py (a 2-layer MLP loss) and print each stage.")
    demo.set_defaults(func=cmd_demo)

    trace = sub.add_parser("trace", help="trace FILE.py:FUNC and print its IR",
                           description="Import FILE.py, call FUNC once on example arguments under the "
                                       "tracer and print the typed SSA IR.")
    trace.add_argument("target", metavar="FILE.py:FUNC", help="the file and the function in it")
    trace.add_argument("--args", metavar="EXPR", default=None,
                       help="a Python expression with np in scope giving the arguments: a tuple is the "
                            "argument list, any other value the single argument (e.g. 'np.ones(3), 2.0'). "
                            "Default: the file's FUNC_args() or example_args()")
    trace.add_argument("--grad", action="store_true",
                       help="the gradient program instead: the generated source of irad.grad(FUNC) (with --dot or "
                            "--svg: its joint forward+backward graph, forward and backward coloured apart)")
    trace.add_argument("--argnums", metavar="EXPR", default=None,
                       help="with --grad: which arguments to differentiate, an int or a tuple (default 0)")
    trace.add_argument("--no-passes", action="store_true",
                       help="with --grad: skip the optimisation passes (rule_fwd/pullback pairs stay visible)")
    trace.add_argument("--dot", action="store_true", help="print the graph as Graphviz DOT source")
    trace.add_argument("--svg", metavar="OUT.svg", default=None,
                       help="write the graph as an SVG picture (needs Graphviz's dot program)")
    trace.set_defaults(func=cmd_trace)

    export = sub.add_parser("export", help="export the gradient program of FILE.py:FUNC to ONNX",
                            description="Compile FUNC with irad on example arguments and write its gradient "
                                        "program (value, then gradient) as an ONNX model (needs irad[onnx]).")
    export.add_argument("target", metavar="FILE.py:FUNC", help="the file and the function in it")
    export.add_argument("--args", metavar="EXPR", default=None,
                        help="the arguments, as for irad trace (default: FUNC_args() or example_args())")
    export.add_argument("--argnums", metavar="EXPR", default=None,
                        help="which arguments to differentiate: an int or a tuple (default 0)")
    export.add_argument("--forward", action="store_true", help="export the forward function only, no gradient")
    export.add_argument("--rules-as-functions", action="store_true",
                        help="keep each rule a call of an ONNX function named after it (pullback.numpy.tanh) "
                             "instead of inlining its ops")
    export.add_argument("-o", "--output", metavar="MODEL.onnx", required=True, help="where to write the model")
    export.set_defaults(func=cmd_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    from .errors import IradError

    try:
        return int(ns.func(ns))
    except CliError as e:
        print(f"irad: error: {e}", file=sys.stderr)
        return 2
    except IradError as e:
        print(f"irad {ns.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
