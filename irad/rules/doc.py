"""Generate the table of built-in rules in docs/rules.md from the rule tables themselves.

``python -m irad.rules.doc`` prints the markdown; ``python -m irad.rules.doc --write [PATH]``
replaces the part of PATH (default docs/rules.md) between the markers.  A test keeps the file
up to date.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ._common import builtin_entries, builtin_nondiff
from .registry import impl_key, load_pending, qualname

START = "<!-- rules-table:start -->"
END = "<!-- rules-table:end -->"
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def _group(name: str) -> str:
    if name.startswith(("operator.", "builtins.", "math.", "irad.rules.python_rules.")):
        return "Python: operator, builtins, math"
    if name.startswith("irad.rules.scipy_rules."):
        return "scipy (optional)"
    if name.startswith("irad."):
        return "irad functional updates"
    if name.startswith("numpy.fft."):
        return "numpy.fft"
    if name.startswith("scipy."):
        return "scipy (optional)"
    if name.startswith("numpy.linalg."):
        return "numpy.linalg"
    if name.startswith("numpy.ndarray."):
        return "ndarray methods"
    return "numpy"


def table() -> str:
    """The generated markdown: one table per group, then the non-differentiable functions."""
    load_pending(force=True)  # the SciPy rules register when SciPy is imported: import it now
    seen: set[object] = set()
    rows: dict[str, list[tuple[str, str, str]]] = {}
    for e in builtin_entries():
        if (e.rule.impl, e.rule.types) in seen:
            continue
        seen.add((e.rule.impl, e.rule.types))
        name = e.label or e.rule.name
        rows.setdefault(_group(name), []).append((name, e.rule.kind, e.note))
    order = ["Python: operator, builtins, math", "numpy", "ndarray methods", "numpy.linalg",
             "numpy.fft", "irad functional updates", "scipy (optional)"]
    total = sum(len(v) for v in rows.values())
    out = [f"{total} functions have built-in rules.", ""]
    for grp in order:
        if grp not in rows:
            continue
        out += [f"### {grp}", "", "| function | kind | notes |", "|---|---|---|"]
        for name, kind, note in sorted(rows[grp]):
            out.append(f"| `{name}` | {kind} | {note} |")
        out.append("")
    names = sorted({qualname(f) for f in builtin_nondiff() if impl_key(f) is not None})
    out += [f"### Non-differentiable ({len(names)})", "",
            "Their outputs carry no gradient (`irad.non_differentiable`):", "",
            ", ".join(f"`{n}`" for n in names), ""]
    return "\n".join(out)


def render(text: str) -> str:
    """``text`` with the part between the markers replaced by the current table."""
    head, sep, rest = text.partition(START)
    if not sep or END not in rest:
        raise ValueError(f"docs/rules.md lacks the markers {START} ... {END}")
    tail = rest.split(END, 1)[1]
    return f"{head}{START}\n{table()}{END}{tail}"


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--write":
        path = Path(argv[1]) if len(argv) > 1 else DEFAULT_PATH
        path.write_text(render(path.read_text()))
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
