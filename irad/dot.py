"""Graph pictures: a ``Graph`` as Graphviz DOT source, and as SVG where Graphviz is installed.

``to_dot(g)`` makes one node per input, op and output and one edge per value an op reads.  In a
joint graph (reverse mode) the forward ops, the backward ops (pullbacks, the ops that compute
cotangents, everything after the first pullback) and the ``rule_fwd`` ops are coloured apart and
grouped in a ``forward`` and a ``backward`` box; edges carrying rule state are dashed.

Every label is irad's own text or user text (hints, file names, function names) quoted for DOT,
so no hint can change the picture's syntax.  Only ``to_svg`` needs Graphviz's ``dot`` program
(the ``graphviz`` and ``pydot`` packages call the same program); ``to_dot`` needs nothing.
"""
from __future__ import annotations

import html
import shutil
import subprocess
import unicodedata
from typing import NamedTuple

from .errors import GraphvizError
from .ir import GUARD_PRIMS, STATE, Const, Graph, Op, Var

#: a graph with more ops than this is not rendered for a notebook (dot would take minutes)
MAX_PICTURE_OPS = 1500
#: output lines shown in an op's label (a pullback may have many)
MAX_OUT_LINES = 4


class Style(NamedTuple):
    """How one role of node is drawn."""

    shape: str
    fill: str
    border: str


#: the role of a node -> how it is drawn (the legend in the picture's title says which is which)
STYLES: dict[str, Style] = {
    "input": Style("box", "#d9f0d3", "#1b7837"),
    "output": Style("box", "#e0e0e0", "#404040"),
    "forward": Style("box", "#deebf7", "#2171b5"),
    "rule_fwd": Style("box", "#9ecae1", "#08306b"),
    "backward": Style("box", "#fdd0a2", "#d94801"),
    "guard": Style("diamond", "#fff7bc", "#b8860b"),
}
STATE_EDGE = "#7b3294"
COTANGENT_EDGE = "#d94801"
PLAIN_EDGE = "#606060"
_PULLBACKS = ("pullback", "call_pullback")


def quote(text: str) -> str:
    """``text`` as a DOT double-quoted string that reads as ``text``: backslashes and quotes are
    escaped (so ``\\N`` or ``\\l`` in a hint stay letters), line breaks become DOT line breaks and
    other control characters are spelled out."""
    out = []
    for ch in text.replace("\r\n", "\n").replace("\r", "\n"):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn"):
            out.append(f"\\\\u{ord(ch):04x}")  # (shown as the letters \u0007, never the character)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _attrs(**kw: str) -> str:
    """``[k="v", ...]``: every value quoted (ids and colours are irad's own, labels are not)."""
    return "[" + ", ".join(f"{k}={quote(v)}" for k, v in kw.items()) + "]"


def _split_role(g: Graph) -> str | None:
    """``forward``/``backward`` for the halves of ``irad.passes.split``, else None."""
    for p in reversed(g.provenance):
        if p.startswith("split: "):
            return p[len("split: "):]
    return None


def is_joint(g: Graph) -> bool:
    """A graph made by the reverse-mode transform (its provenance says so)."""
    return any(p == "reverse mode" or p.startswith("split: ") for p in g.provenance)


def roles(g: Graph) -> list[str]:
    """The role of each op of ``g``: ``forward``, ``rule_fwd``, ``backward`` or ``guard``.

    Backward, in a joint graph: a pullback, an op inlined from one (its location says
    ``pullback of ...``), an op whose output is a cotangent (its hint ends in ``_bar``), an op
    that reads a backward value or a cotangent input, and any op after the first pullback (the
    transform emits the backward sweep after the forward one)."""
    half = _split_role(g)
    joint = is_joint(g)
    back_vals = {v.id for v in g.inputs if v.hint.endswith("_bar")}
    after_pullback = False
    out: list[str] = []
    for op in g.ops:
        if op.prim in GUARD_PRIMS:
            role = "guard"
        elif op.prim == "rule_fwd":
            role = "rule_fwd"
        elif half is not None:
            role = half
        elif joint and (after_pullback or op.prim in _PULLBACKS
                        or (op.loc is not None and op.loc.func.startswith("pullback of"))
                        or any(o.hint.endswith("_bar") for o in op.outs)
                        or any(v.id in back_vals for v in op.inputs)):
            role = "backward"
        else:
            role = "forward"
        if role == "backward":
            back_vals.update(o.id for o in op.outs)
        after_pullback = after_pullback or op.prim in _PULLBACKS
        out.append(role)
    return out


def _where(op: Op) -> str:
    """``loss (mlp.py:14)``: the file's name only (a picture checked into docs holds no machine paths)."""
    if op.loc is None:
        return ""
    return f"{op.loc.func} ({op.loc})" if op.loc.func else str(op.loc)


def _value(v: Var) -> str:
    return f"{v}{' ' + v.hint if v.hint else ''}: {v.type}"


def _op_head(op: Op) -> str:
    """``numpy.tanh``, or ``rule_fwd[numpy.tanh]`` for an op whose attribute names a rule."""
    rule = op.kw("_rule")
    name = getattr(rule, "name", None)
    return f"{op.prim}[{name}]" if name else op.prim


def _op_lines(op: Op) -> list[str]:
    lines = [_op_head(op)] + [_value(o) for o in op.outs[:MAX_OUT_LINES]]
    if len(op.outs) > MAX_OUT_LINES:
        lines.append(f"... {len(op.outs) - MAX_OUT_LINES} more")
    return lines


def _node(name: str, role: str, lines: list[str], tooltip: str = "") -> str:
    st = STYLES[role]
    kw = {"label": "\n".join(lines), "shape": st.shape, "fillcolor": st.fill, "color": st.border}
    if tooltip:
        kw["tooltip"] = tooltip
    return f"  {name} {_attrs(**kw)};"


def to_dot(g: Graph, *, title: str | None = None) -> str:
    """DOT source for ``g``: a node per input, op and output, an edge per value read.

    ``title`` replaces the first line of the caption (``graph NAME: N ops``).  Op labels are the
    primitive and the output types (``%4 h: f64[3]``), tooltips the source line.  A joint graph
    gets its forward and backward ops coloured and boxed apart."""
    op_roles = roles(g)
    joint = is_joint(g)
    defined: dict[int, str] = {}  # Var id -> node name
    back: set[int] = set()
    lines = ["digraph irad {",
             f"  graph {_attrs(label=_title(g, joint, title), labelloc='t', rankdir='TB')};",
             f"  node {_attrs(style='filled,rounded', fontname='Helvetica', fontsize='10')};",
             f"  edge {_attrs(color=PLAIN_EDGE, arrowsize='0.6')};"]
    for k, v in enumerate(g.inputs):
        defined[v.id] = f"in{k}"
        if v.hint.endswith("_bar"):  # a cotangent input (vjp's backward graph)
            back.add(v.id)
        lines.append(_node(f"in{k}", "input", [f"input {k}", _value(v)]))
    groups: dict[str, list[str]] = {"forward": [], "backward": []}  # op nodes
    body: list[str] = []  # edges
    for i, (op, role) in enumerate(zip(g.ops, op_roles)):
        name = f"op{i}"
        node = _node(name, role, _op_lines(op), _where(op))
        groups["backward" if role == "backward" else "forward"].append(node)
        seen: set[int] = set()
        for v in op.inputs:
            if v.id in seen or v.id not in defined:
                continue
            seen.add(v.id)
            body.append(_edge(defined[v.id], name, v, v.id in back))
        for o in op.outs:
            defined[o.id] = name
            if role == "backward":
                back.add(o.id)
    if joint and groups["backward"]:
        for side, nodes in groups.items():
            st = STYLES["rule_fwd" if side == "forward" else "backward"]
            lines.append(f"  subgraph cluster_{side} {{")
            lines.append(f"    graph {_attrs(label=side, color=st.border, style='rounded,dashed')};")
            lines.extend("  " + n for n in nodes)
            lines.append("  }")
    else:
        lines.extend(groups["forward"] + groups["backward"])
    lines.extend(body)
    for k, o in enumerate(g.outputs):
        name = f"out{k}"
        desc = _value(o) if isinstance(o, Var) else f"constant: {o.type}" if isinstance(o, Const) else "?"
        lines.append(_node(name, "output", [f"output {k}", desc]))
        if isinstance(o, Var) and o.id in defined:
            lines.append(_edge(defined[o.id], name, o, o.id in back))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _title(g: Graph, joint: bool, title: str | None) -> str:
    legend = ("\nforward (blue), rule_fwd (dark blue), backward (orange), guard (yellow); "
              "dashed edges carry rule state") if joint else ""
    return (f"graph {g.name}: {len(g.ops)} ops" if title is None else title) + legend


def _edge(src: str, dst: str, v: Var, cotangent: bool) -> str:
    if v.type == STATE:
        return f"  {src} -> {dst} {_attrs(style='dashed', color=STATE_EDGE, tooltip=str(v))};"
    if cotangent:
        return f"  {src} -> {dst} {_attrs(color=COTANGENT_EDGE, tooltip=str(v))};"
    return f"  {src} -> {dst} {_attrs(tooltip=str(v))};"


# ---- rendering ----------------------------------------------------------------------------


def dot_program() -> str | None:
    """The path of Graphviz's ``dot`` program, or None when it is not installed."""
    return shutil.which("dot")


def render_svg(source: str, timeout: float = 120.0) -> str:
    """SVG text of DOT ``source``, by Graphviz's ``dot``; ``GraphvizError`` when it is missing or fails."""
    exe = dot_program()
    if exe is None:
        raise GraphvizError("drawing a graph as SVG needs Graphviz's dot program, which is not installed: "
                            "apt-get install graphviz, brew install graphviz or conda install graphviz "
                            "(to_dot() gives the DOT source without it)")
    try:
        r = subprocess.run([exe, "-Tsvg"], input=source.encode(), capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GraphvizError(f"Graphviz's dot failed: {e}") from e
    if r.returncode != 0:
        raise GraphvizError(f"Graphviz's dot failed (exit {r.returncode}): {r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode()


def to_svg(g: Graph, *, title: str | None = None) -> str:
    """``g`` drawn as SVG (needs Graphviz's ``dot``)."""
    return render_svg(to_dot(g, title=title))


def _picturable(g: Graph) -> bool:
    return dot_program() is not None and len(g.ops) <= MAX_PICTURE_OPS


def repr_svg(g: Graph) -> str | None:
    """For notebooks: the SVG, or None when Graphviz is missing, fails or the graph is too large."""
    if not _picturable(g):
        return None
    try:
        return to_svg(g)
    except GraphvizError:
        return None


def repr_html(g: Graph) -> str | None:
    """For notebooks: None where the SVG shows (so the picture is drawn once), else the graph's
    text form in a ``<pre>``, HTML-escaped."""
    if _picturable(g):
        return None
    return f"<pre>{html.escape(str(g))}</pre>"
