"""``IRAD_LOG`` and ``irad.config(log=...)``: traces, retrace reasons (with the user's file:line),
passes, generated source; off by default and free when off."""
from __future__ import annotations

import inspect
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import irad
from irad import log
from irad.errors import ConfigError

HERE = Path(__file__).name
SCALE = 1.0


def branchy(x: Any) -> Any:
    if x.sum() > 0:
        return np.sum(np.tanh(x))
    return np.sum(x * x)


def scaled(x: Any) -> Any:
    return np.sum(np.sin(x) * SCALE)


def line_of(fn: Any, text: str) -> int:
    """The line number of the first line of ``fn`` that contains ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Logging off before and after each test (the setting is process-wide)."""
    irad.config(log=None)
    caplog.set_level(logging.INFO, logger="irad")
    yield caplog
    irad.config(log=None)


def messages(caplog: pytest.LogCaptureFixture, topic: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == f"irad.{topic}"]


def test_retrace_names_the_guard_and_its_line(logs: pytest.LogCaptureFixture) -> None:
    irad.config(log="retrace")
    g = irad.grad(branchy)
    g(np.ones(3))
    assert messages(logs, "retrace") == []  # the first trace is no retrace
    g(-np.ones(3))  # the branch goes the other way: the guard fails
    (msg,) = messages(logs, "retrace")
    assert "guard" in msg
    assert f"{HERE}:{line_of(branchy, 'if x.sum() > 0')}" in msg
    assert f"called from {__file__}:" in msg  # the line of this test that made the call


def test_retrace_names_the_global_and_where_it_is_read(logs: pytest.LogCaptureFixture) -> None:
    irad.config(log="retrace")
    g = irad.grad(scaled)
    g(np.ones(3))
    try:
        globals()["SCALE"] = 2.0
        np.testing.assert_allclose(g(np.ones(3)), 2.0 * np.cos(np.ones(3)))
    finally:
        globals()["SCALE"] = 1.0
    (msg,) = messages(logs, "retrace")
    assert "global 'SCALE'" in msg and "changed" in msg
    assert f"read at {__file__}:{line_of(scaled, 'SCALE')}" in msg


def test_new_argument_signature_is_a_reason(logs: pytest.LogCaptureFixture) -> None:
    irad.config(log="retrace")
    g = irad.grad(scaled)
    g(np.ones(3))
    g(np.ones(4))
    (msg,) = messages(logs, "retrace")
    assert "new argument signature (x: f64[4])" in msg


def test_vjp_retrace_is_logged(logs: pytest.LogCaptureFixture) -> None:
    irad.config(log="retrace")
    irad.vjp(branchy, np.ones(3))
    irad.vjp(branchy, -np.ones(3))
    (msg,) = messages(logs, "retrace")
    assert msg.startswith("vjp(branchy): ") and "guards" in msg


def test_trace_log_names_function_site_signature_and_ops(logs: pytest.LogCaptureFixture) -> None:
    irad.config(log="trace")
    irad.grad(branchy)(np.ones(3))
    (msg,) = messages(logs, "trace")
    code = branchy.__code__
    assert f"traced branchy ({code.co_filename}:{code.co_firstlineno})" in msg
    n_ops = len(irad.trace(branchy, np.ones(3)).ops)
    assert f"for (x: f64[3]): {n_ops} ops, 1 guard" in msg


def test_passes_log_names_each_pass_that_changed_the_graph(logs: pytest.LogCaptureFixture) -> None:
    irad.config(log="passes")
    prog = irad.compile(branchy, np.ones(3))
    msgs = messages(logs, "passes")
    assert any("inline_pullbacks:" in m and " -> " in m for m in msgs), msgs
    assert msgs[-1].endswith(f"-> {len(prog.graph.ops)} ops")
    assert "pipeline done" in msgs[-1]


def test_source_log_has_the_generated_program(logs: pytest.LogCaptureFixture) -> None:
    irad.config(log="source")
    prog = irad.compile(branchy, np.ones(3))
    (msg,) = messages(logs, "source")
    assert "def branchy_grad(" in msg
    assert prog.source.rstrip() in msg


def test_off_is_silent(logs: pytest.LogCaptureFixture) -> None:
    irad.config(log="all")
    assert irad.config().log == log.TOPICS
    irad.config(log=None)
    assert irad.config().log == ()
    g = irad.grad(branchy)
    g(np.ones(3))
    g(-np.ones(3))
    irad.compile(branchy, np.ones(3))
    assert [r for r in logs.records if r.name.startswith("irad")] == []


def test_no_logging_work_when_off_or_on_a_cached_call(monkeypatch: pytest.MonkeyPatch,
                                                      logs: pytest.LogCaptureFixture) -> None:
    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("logging work on a path that must not log")

    for name in ("stale", "published", "passed", "pipeline_done", "source"):
        monkeypatch.setattr(log, name, boom)
    g = irad.grad(branchy)
    g(np.ones(3))
    g(-np.ones(3))  # a retrace, with logging off: nothing is called
    irad.config(log="all")
    monkeypatch.setattr(log, "_emit", boom)
    g(np.ones(3))  # cached (both paths are): no logging code runs, whatever is on
    g(-np.ones(3))


def test_topics_parse_and_unknown_ones_are_refused() -> None:
    assert log.parse_topics("retrace, passes") == {"retrace", "passes"}
    assert log.parse_topics("TRACE source") == {"trace", "source"}
    assert log.parse_topics(["trace"]) == {"trace"}
    assert log.parse_topics("all") == set(log.TOPICS)
    assert log.parse_topics("") == set() and log.parse_topics(None) == set() and log.parse_topics("0") == set()
    with pytest.raises(ConfigError, match="unknown irad log topic.*'retraces'.*trace, retrace, passes, source"):
        irad.config(log="retraces")
    with pytest.raises(ValueError):
        irad.config(log="nope")
    before = irad.config()
    try:
        irad.config(log=("passes",))
        assert irad.config() == log.Settings(("passes",))
    finally:
        irad.config(log=before.log)
    assert irad.config() == before


USER = """
import numpy as np
import irad

def f(x):
    if x.sum() > 0:
        return np.sum(np.tanh(x))
    return np.sum(x)

g = irad.grad(f)
g(np.ones(3))
g(-np.ones(3))
"""


def run_user(tmp_path: Path, env_value: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    script = tmp_path / "user_script.py"
    script.write_text(prelude + textwrap.dedent(USER))
    env = dict(os.environ, IRAD_LOG=env_value)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)


def test_environment_variable_at_import_logs_to_stderr(tmp_path: Path) -> None:
    r = run_user(tmp_path, "trace,retrace")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    traces = [ln for ln in lines if ln.startswith("irad.trace: grad(f): traced f (")]
    assert len(traces) == 2, r.stderr
    (retrace,) = [ln for ln in lines if ln.startswith("irad.retrace: ")]
    assert "user_script.py:6" in retrace  # the `if` line
    assert "irad.passes" not in r.stderr and "irad.source" not in r.stderr


def test_environment_variable_with_the_programs_own_logging(tmp_path: Path) -> None:
    r = run_user(tmp_path, "retrace",
                 "import logging, sys\nlogging.basicConfig(stream=sys.stderr, format='APP %(name)s %(message)s')\n")
    assert r.returncode == 0, r.stderr
    assert [ln for ln in r.stderr.splitlines() if "retrace" in ln] == \
        [ln for ln in r.stderr.splitlines() if ln.startswith("APP irad.retrace ")]  # once, through its handler
    assert "APP irad.retrace " in r.stderr


def test_environment_variable_typo_warns_and_imports(tmp_path: Path) -> None:
    r = run_user(tmp_path, "retrace,bogus")
    assert r.returncode == 0, r.stderr
    assert "IRAD_LOG='retrace,bogus' ignored" in r.stderr and "'bogus'" in r.stderr
    assert "irad.retrace" not in r.stderr
