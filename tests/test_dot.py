"""Graph pictures (``irad.dot``, ``Graph.to_dot``, ``Program.to_dot``, the notebook reprs) and the
CLI's ``irad trace --grad/--dot/--svg``."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import irad
import irad.dot
from irad.cli import load_module, main
from irad.errors import GraphvizError
from irad.ir import STATE, Graph, Loc, Op, Var, ArrayT

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot program is not installed (apt-get install graphviz)")
# NOTE: pydot's parser calls pyparsing's deprecated names; not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pydot")
DEFAULTS = {"node", "edge", "graph"}  # pydot reads `node [...]` statements as nodes of these names


def pydot_module() -> Any:
    return pytest.importorskip("pydot", reason="pydot parses the DOT source (pip install pydot)")


def parse(src: str) -> Any:
    graphs = pydot_module().graph_from_dot_data(src)
    assert graphs is not None and len(graphs) == 1, src
    return graphs[0]


def all_nodes(g: Any) -> list[Any]:
    found = [n for n in g.get_nodes() if n.get_name() not in DEFAULTS]
    for sub in g.get_subgraphs():
        found += all_nodes(sub)
    return found


def all_edges(g: Any) -> list[Any]:
    found = list(g.get_edges())
    for sub in g.get_subgraphs():
        found += all_edges(sub)
    return found


def expected_edges(g: Graph) -> int:
    """One edge per distinct Var an op reads, and one per output Var."""
    return sum(len({v.id for v in op.inputs}) for op in g.ops) + sum(isinstance(o, Var) for o in g.outputs)


def f(x: Any, y: Any) -> Any:
    if x.sum() > 0:
        return np.sum(np.tanh(x) * y)
    return np.sum(x)


X = np.ones(3)


def test_trace_graph_parses_with_one_node_per_input_op_output() -> None:
    g = irad.trace(f, X, 2.0)
    d = parse(g.to_dot())
    assert len(all_nodes(d)) == len(g.inputs) + len(g.ops) + len(g.outputs)
    assert len(all_edges(d)) == expected_edges(g)
    assert d.get_subgraphs() == []  # not a joint graph: no forward/backward boxes
    assert set(irad.dot.roles(g)) == {"forward", "guard"}


@pytest.mark.parametrize("passes", [None, []], ids=["optimised", "no passes"])
def test_program_graph_parses_and_boxes_forward_and_backward(passes: Any) -> None:
    prog = irad.compile(f, X, 2.0, passes=passes)
    g = prog.graph
    d = parse(prog.to_dot())
    assert len(all_nodes(d)) == len(g.inputs) + len(g.ops) + len(g.outputs)
    assert len(all_edges(d)) == expected_edges(g)
    boxes = {s.get_name(): s for s in d.get_subgraphs()}
    assert set(boxes) == {"cluster_forward", "cluster_backward"}
    roles = irad.dot.roles(g)
    n_back = roles.count("backward")
    assert n_back and len(all_nodes(boxes["cluster_backward"])) == n_back
    assert len(all_nodes(boxes["cluster_forward"])) == len(g.ops) - n_back


def test_joint_graph_colours_rule_fwd_and_dashes_state_edges() -> None:
    g = irad.compile(f, X, 2.0, passes=[]).graph
    roles = irad.dot.roles(g)
    assert [op.prim for op, r in zip(g.ops, roles) if r == "rule_fwd"] == ["rule_fwd"] * 3
    assert all(r == "backward" for op, r in zip(g.ops, roles) if op.prim == "pullback")
    d = parse(g.to_dot())
    fills = {n.get_name(): n.get("fillcolor").strip('"') for n in all_nodes(d)}
    assert {fills[f"op{i}"] for i, r in enumerate(roles) if r == "rule_fwd"} == {irad.dot.STYLES["rule_fwd"].fill}
    assert {fills[f"op{i}"] for i, r in enumerate(roles) if r == "backward"} == {irad.dot.STYLES["backward"].fill}
    n_state = sum(len({v.id for v in op.inputs if v.type == STATE}) for op in g.ops)
    dashed = [e for e in all_edges(d) if (e.get("style") or "").strip('"') == "dashed"]
    assert n_state == 3 and len(dashed) == n_state


HOSTILE = 'a"b\n{c}\\N [x];\\l<i>"]; evil [label="pwned'


def hostile_graph() -> Graph:
    x = Var(0, ArrayT("float64", (3,)), HOSTILE)
    y = Var(1, ArrayT("float64", (3,)), "}" + HOSTILE + "\r\x07")
    op = Op("numpy.sin", (x,), (), (y,), np.sin, Loc('we"ird\n{dir}/f.py', 3, 'f"}{'))
    return Graph('g"{\n}<i>', (x,), (op,), (y,))


def test_user_text_is_escaped() -> None:
    g = hostile_graph()
    d = parse(g.to_dot())
    names = {n.get_name() for n in all_nodes(d)}
    assert names == {"in0", "op0", "out0"}  # `evil` did not become a node
    assert len(all_edges(d)) == 2
    label = d.get_node("in0")[0].get("label")
    assert label.startswith('"') and label.endswith('"')
    # the DOT escapes undo to the hint: a quote stays a quote, a backslash a backslash
    assert HOSTILE.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") in label


@needs_dot
def test_user_text_survives_graphviz() -> None:
    svg = irad.dot.to_svg(hostile_graph())
    assert "<svg" in svg
    assert "pwned" in svg and "&quot;" in svg and "\\N" in svg  # shown as text, not interpreted
    assert "evil" in svg and svg.count("class=\"node\"") == 3


@needs_dot
def test_svg_renders_and_notebooks_get_it() -> None:
    g = irad.trace(f, X, 2.0)
    svg = g._repr_svg_()
    assert svg is not None and "<svg" in svg and "numpy.tanh" in svg
    assert g._repr_html_() is None  # the notebook shows the SVG, drawn once


def test_html_fallback_without_graphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(irad.dot, "dot_program", lambda: None)
    g = hostile_graph()
    assert g._repr_svg_() is None
    page = g._repr_html_()
    assert page is not None and page.startswith("<pre>") and page.endswith("</pre>")
    assert "&quot;" in page and "&lt;i&gt;" in page and "<i>" not in page
    assert "-&gt; f64[3]" in page  # the graph's text form, escaped
    with pytest.raises(GraphvizError, match="apt-get install graphviz"):
        irad.dot.to_svg(g)


def test_large_graphs_are_not_drawn_for_notebooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(irad.dot, "MAX_PICTURE_OPS", 2)
    g = irad.trace(f, X, 2.0)
    assert g._repr_svg_() is None
    assert (g._repr_html_() or "").startswith("<pre>")


# ---- the CLI ---------------------------------------------------------------------------------

USER_FILE = """
import numpy as np

def loss(x, y):
    return np.sum(np.tanh(x) * y)

def loss_args():
    return np.ones(3), 2.0
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    p = tmp_path / "dot_model.py"
    p.write_text(textwrap.dedent(USER_FILE))
    return p


def test_cli_grad_prints_the_gradient_program(user_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", f"{user_file}:loss", "--grad"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("def loss_grad(x, y):")
    assert "x_bar" in out and "return" in out
    assert main(["trace", f"{user_file}:loss", "--grad", "--argnums", "(0, 1)"]) == 0
    assert "y_bar" in capsys.readouterr().out


def test_cli_dot(user_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", f"{user_file}:loss", "--dot"]) == 0
    src = capsys.readouterr().out
    g = irad.trace(load_module(user_file).loss, np.ones(3), 2.0)
    assert len(all_nodes(parse(src))) == len(g.inputs) + len(g.ops) + len(g.outputs)
    assert main(["trace", f"{user_file}:loss", "--grad", "--dot", "--no-passes"]) == 0
    joint = parse(capsys.readouterr().out)
    assert {s.get_name() for s in joint.get_subgraphs()} == {"cluster_forward", "cluster_backward"}


@needs_dot
def test_cli_svg(user_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "loss.svg"
    assert main(["trace", f"{user_file}:loss", "--grad", "--svg", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: graph loss, ")
    assert "<svg" in out.read_text() and "x_bar" in out.read_text()


def test_cli_svg_without_graphviz(user_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(irad.dot, "dot_program", lambda: None)
    out = tmp_path / "loss.svg"
    assert main(["trace", f"{user_file}:loss", "--svg", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("irad: error: --svg needs Graphviz's dot program") and "--dot" in err
    assert not out.exists()


def test_readme_picture_is_checked_in() -> None:
    root = Path(__file__).resolve().parent.parent
    svg = (root / "docs" / "img" / "mlp_grad.svg").read_text()
    assert "<svg" in svg and "params.W1_bar" in svg
    assert "docs/img/mlp_grad.svg" in (root / "README.md").read_text()


def test_cli_gradient_options_need_grad(user_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", f"{user_file}:loss", "--no-passes"]) == 2
    assert "add --grad" in capsys.readouterr().err
