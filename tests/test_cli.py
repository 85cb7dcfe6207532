"""The ``irad`` command line: ``--help``, ``irad trace FILE.py:FUNC`` and ``python -m irad demo``."""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from irad.cli import as_args, eval_args, main

USER_FILE = """
import numpy as np

def f(x, y):
    return np.sum(np.sin(x) * y)

def g(x):
    return np.tanh(x) * 2.0

def g_args():
    return np.ones((2, 3))

def no_args(x):
    return x
"""


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "irad", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    p = tmp_path / "user_model.py"
    p.write_text(textwrap.dedent(USER_FILE))
    return p


def test_help_console_script() -> None:
    exe = shutil.which("irad", path=sysconfig.get_path("scripts"))
    if exe is None:
        pytest.skip("the irad console script is not installed in this environment")
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "usage: irad" in r.stdout
    assert "demo" in r.stdout and "trace" in r.stdout


def test_help_module() -> None:
    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "usage: irad" in r.stdout


def test_help_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["trace", "--help"])
    assert e.value.code == 0
    assert "--args" in capsys.readouterr().out


def test_trace_with_args(user_file: Path) -> None:
    r = run("trace", f"{user_file}:f", "--args", "np.ones(3), 2.0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("graph f(")
    header = r.stdout.splitlines()[0]
    assert "f64[3]" in header and "float" in header
    assert "return" in r.stdout


def test_trace_with_func_args(user_file: Path) -> None:
    r = run("trace", f"{user_file}:g")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("graph g(")
    assert "f64[2,3]" in r.stdout.splitlines()[0]


def test_trace_single_value_args(user_file: Path) -> None:
    r = run("trace", f"{user_file}:g", "--args", "np.zeros(4)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("graph g(%0: f64[4])")


def test_trace_without_args_says_what_to_write(user_file: Path) -> None:
    r = run("trace", f"{user_file}:no_args")
    assert r.returncode == 2
    assert "--args" in r.stderr and "no_args_args()" in r.stderr


@pytest.mark.parametrize("target, message", [
    ("nofile.py:f", "no such file"),
    ("{file}", "expected FILE.py:FUNC"),
    ("{file}:missing", "has no function 'missing'"),
])
def test_trace_usage_errors(user_file: Path, target: str, message: str) -> None:
    r = run("trace", target.format(file=user_file), "--args", "1.0")
    assert r.returncode == 2
    assert message in r.stderr


def test_bad_args_expression(user_file: Path) -> None:
    r = run("trace", f"{user_file}:f", "--args", "np.nope(3)")
    assert r.returncode == 2
    assert "--args" in r.stderr and "AttributeError" in r.stderr


def test_demo() -> None:
    r = run("demo")
    assert r.returncode == 0, r.stderr
    assert "\ngraph loss(" in r.stdout
    assert "numpy.tanh" in r.stdout


def test_as_args() -> None:
    assert as_args((1, 2)) == (1, 2)
    assert as_args([1, 2]) == ([1, 2],)
    assert as_args(3.0) == (3.0,)
    x, y = eval_args("np.ones(2), 2.0")
    assert x.shape == (2,) and y == 2.0
