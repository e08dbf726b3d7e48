"""The commands' old spellings, ``python -m vtrepro.<command>`` (:mod:`vtrepro.old_command_modules`): each still runs its
command, after one deprecation line naming the new spelling; real modules never go through the hook."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib.machinery import PathFinder, SourceFileLoader

import pytest

from helpers import run_module
from vtrepro.__main__ import COMMANDS
from vtrepro.core.log import PACKAGE
from vtrepro.old_command_modules import FINDER, OLD_SPELLINGS


def notice(command: str) -> str:
    return f"'python -m vtrepro.{command}' is deprecated; write 'python -m vtrepro {command}'"


@pytest.mark.parametrize("command", OLD_SPELLINGS)
def test_each_old_spelling_runs_its_command_and_names_the_new_one(command: str, capsys, caplog) -> None:
    """As ``python -m`` runs it (runpy, in this process: every spelling in a fraction of a second)."""
    code, stdout, _ = run_module(f"vtrepro.{command}", "--help", capsys=capsys)
    assert code == 0 and stdout.startswith(f"usage: python -m vtrepro {command}"), stdout[:200]
    assert [(record.name, record.getMessage()) for record in caplog.records] == [(f"{PACKAGE}.old_command_modules",
                                                                                   notice(command))]


def test_an_old_spelling_in_a_process_of_its_own_warns_once_on_stderr() -> None:
    """The interpreter's own ``-m`` for a module (train) and a package (encode): the line and nothing else,
    no runpy warning; a real package without ``__main__`` still fails as Python says, without the hook."""
    for command in ("train", "encode"):
        result = subprocess.run([sys.executable, "-m", f"vtrepro.{command}", "--help"], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0 and result.stdout.startswith(f"usage: python -m vtrepro {command}")
        assert result.stderr.splitlines() == [notice(command)]
    result = subprocess.run([sys.executable, "-m", "vtrepro.core", "--help"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1 and "No module named vtrepro.core.__main__" in result.stderr
    assert "deprecated" not in result.stderr


def test_old_spellings_are_commands_and_no_module_of_their_own() -> None:
    assert set(OLD_SPELLINGS) <= set(COMMANDS)
    with pytest.raises(ImportError, match=r"old spelling of 'python -m vtrepro train'"):
        importlib.import_module("vtrepro.train")
    assert "vtrepro.train" not in sys.modules


def test_real_modules_are_found_by_python_itself() -> None:
    """The hook comes after Python's own finders: every command's module (and the packages the old spellings
    share a name with) is a file found first."""
    assert sys.meta_path.count(FINDER) == 1 and sys.meta_path.index(FINDER) > sys.meta_path.index(PathFinder)
    modules = {module.partition(":")[0] for module in COMMANDS.values()}
    for name in [*modules, "vtrepro.encode", "vtrepro.search", "vtrepro.bench", "vtrepro.core"]:
        spec = importlib.util.find_spec(name)
        assert spec is not None and isinstance(spec.loader, SourceFileLoader), name
