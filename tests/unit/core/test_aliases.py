"""Every command of earlier releases also runs as ``python -m vtrepro.<command>``: their spellings (and docs
written for them) keep working, through a package's ``__main__.py`` or a top-level alias module."""
from __future__ import annotations

import subprocess
import sys

import pytest

from vtrepro.__main__ import COMMANDS

ONE_SPELLING_ONLY = {"pyserini", "anserini"}
"""Commands added once the docs spelled every command ``vtrepro <command>``: no earlier spelling to keep."""


@pytest.mark.slow  # a process per command: its point is the interpreter's own `-m` handling (runpy warnings included)
@pytest.mark.parametrize("command", sorted(set(COMMANDS) - ONE_SPELLING_ONLY))
def test_module_spelling_runs_the_command(command: str) -> None:
    result = subprocess.run([sys.executable, "-m", f"vtrepro.{command}", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m vtrepro {command} "), result.stdout[:200]
    assert "Warning" not in result.stderr, result.stderr  # e.g. runpy's "found in sys.modules" for a package
