"""The command layer, read from the source (``ast``): only a stage's ``command.py`` (and ``core/cli.py``, which
builds their parsers) imports argparse or takes a parsed command line (a ``Namespace``); every command of the
command table lives in one. Below the command layer, every function takes typed options and values."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO_ROOT
from vtrepro.__main__ import COMMANDS

PACKAGE_ROOT = REPO_ROOT / "vtrepro"
ARGPARSE_ALLOWED = {"core/cli.py"}
"""Beside the ``command.py`` modules: the one module of shared flags and parser helpers."""


def command_layer(path: Path, root: Path) -> bool:
    relative = path.relative_to(root).as_posix()
    return path.name == "command.py" or relative in ARGPARSE_ALLOWED


def argparse_imports(tree: ast.Module) -> list[int]:
    """The lines that import argparse (``import argparse``, ``from argparse import ...``), at any level."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "argparse" for alias in node.names)
            or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse"]


def namespace_parameters(tree: ast.Module) -> list[str]:
    """``function(parameter)`` for every parameter annotated as a Namespace, or named ``args`` without an
    annotation (a parsed command line passed on under its usual name)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                annotation = ast.unparse(argument.annotation) if argument.annotation is not None else ""
                if "Namespace" in annotation or (argument.arg == "args" and not annotation):
                    found.append(f"{node.name}({argument.arg})")
    return found


def violations(root: Path) -> list[str]:
    """Every module outside the command layer that imports argparse or takes a Namespace, as ``path:what``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if command_layer(path, root):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        relative = path.relative_to(root.parent).as_posix()
        found += [f"{relative}:{line}: imports argparse" for line in argparse_imports(tree)]
        found += [f"{relative}: {where} takes a Namespace" for where in namespace_parameters(tree)]
    return found


def test_only_the_command_layer_imports_argparse_or_takes_a_namespace() -> None:
    found = violations(PACKAGE_ROOT)
    assert found == [], "argparse below the command layer (move the parsing into the stage's command.py):\n" + \
        "\n".join(found)


def test_the_check_finds_argparse_and_namespaces_below_the_command_layer(tmp_path: Path) -> None:
    package = tmp_path / "vtrepro"
    (package / "stage").mkdir(parents=True)
    (package / "stage" / "work.py").write_text(
        "def run(options):\n    import argparse\n\n\ndef old(args):\n    pass\n\n\n"
        "def typed(args: 'argparse.Namespace') -> None:\n    pass\n")
    (package / "stage" / "command.py").write_text("import argparse\n\n\ndef main(args: argparse.Namespace):\n    pass\n")
    assert violations(package) == ["vtrepro/stage/work.py:2: imports argparse",
                                   "vtrepro/stage/work.py: old(args) takes a Namespace",
                                   "vtrepro/stage/work.py: typed(args) takes a Namespace"]


def test_every_command_lives_in_a_command_module() -> None:
    modules = {name: module.partition(":")[0] for name, module in COMMANDS.items()}
    elsewhere = {name: module for name, module in modules.items() if not module.endswith(".command")}
    assert elsewhere == {}, f"commands outside a stage's command.py: {elsewhere}"
