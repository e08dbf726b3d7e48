"""An unsupported Python gets one line and exit 2, not a traceback from a module it cannot compile.

The older Pythons are real interpreters (pyenv's, or ``python3.N`` on ``PATH``) running this checkout's
``vtrepro``: the check in ``vtrepro/__init__.py`` comes before anything that needs 3.11.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from helpers import REPO_ROOT, assert_one_error_line
from vtrepro import MINIMUM_PYTHON

OLDER_MINORS = range(6, MINIMUM_PYTHON[1])
"""Python 3.6 up to the last one below the minimum (3.0-3.5 are nowhere to be found now)."""


def older_pythons() -> dict[str, Path]:
    """``{"3.N": interpreter}`` for each Python 3 older than the minimum found here."""
    found: dict[str, Path] = {}
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for minor in OLDER_MINORS:
        version = f"3.{minor}"
        candidates = sorted(pyenv.glob(f"{version}.*/bin/python"), reverse=True)
        on_path = shutil.which(f"python{version}")
        candidates += [Path(on_path)] if on_path else []
        if candidates:
            found[version] = candidates[0]
    return found


OLDER = older_pythons()


def test_requires_python_is_the_minimum_checked():
    requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=%d.%d" % MINIMUM_PYTHON


@pytest.mark.parametrize("version", sorted(OLDER) or [pytest.param("none", marks=pytest.mark.skip(
    reason=f"no Python 3.{OLDER_MINORS[0]}-3.{OLDER_MINORS[-1]} here (pyenv or python3.N on PATH)"))])
@pytest.mark.parametrize("how", [["-m", "vtrepro", "--help"], ["-m", "vtrepro", "regress", "--help"],
                                 ["-c", "import vtrepro"]], ids=["entry", "command", "import"])
def test_older_python_gets_one_line_and_exit_2(version, how):
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    result = subprocess.run([str(OLDER[version]), *how], capture_output=True, text=True, env=environment,
                            cwd=REPO_ROOT, timeout=60)
    line = assert_one_error_line(result.returncode, result.stderr, "needs Python 3.11 or newer", "python3.13 -m venv")
    assert re.search(rf"is Python {re.escape(version)}\.\d+;", line), line
    assert result.stdout == ""
