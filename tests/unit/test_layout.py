"""The package's shape: no import circle, imports point down the pipeline, no oversized module.

The import graph is read from the source (``ast``), not by importing: every ``import vtrepro...`` and
``from vtrepro... import ...``, at module level or inside a function (a deferred import still ties
the two modules together).
"""
from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO_ROOT

PACKAGE_ROOT = REPO_ROOT / "vtrepro"
LAYERS = ("core", "data", "model", "vocabulary", "encode", "index", "search", "evaluate", "training", "report", "regress")
"""The subpackages from the bottom up: a module may import its own layer and those below it."""
MAX_MODULE_LINES = 600


def module_name(path: Path) -> str:
    """``vtrepro/search/runs.py`` -> ``vtrepro.search.runs``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


def imported_modules(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The vtrepro modules ``path`` (module ``name``) imports: ``from a.b import c`` counts as ``a.b.c``
    when that is a module, else as ``a.b``; relative imports are resolved against ``name``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported_modules(path, name, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1 or module in graph[module]:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def layer(module: str) -> int | None:
    """The layer of ``vtrepro.<layer>...``; None for top-level modules (``vtrepro/__main__.py``,
    ``vtrepro/spellings.py``, ``vtrepro/bench*``), which may import anything."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a higher layer, as ``importer -> imported``."""
    upward = []
    for module, targets in sorted(graph.items()):
        own = layer(module)
        if own is None:
            continue
        upward += [f"{module} -> {target}" for target in sorted(targets)
                   if (target_layer := layer(target)) is not None and target_layer > own]
    return upward


def test_the_package_has_no_import_circle():
    assert cycles(import_graph()) == []


def test_imports_point_down_the_pipeline():
    assert upward_imports(import_graph()) == []


def test_every_subpackage_has_a_layer():
    """A new subpackage must be placed in :data:`LAYERS` (only the benchmarks may import anything)."""
    subpackages = {path.parent.name for path in PACKAGE_ROOT.glob("*/__init__.py")}
    assert subpackages - {"bench"} <= set(LAYERS)


def test_no_module_is_over_the_line_limit():
    long = {name: count for name, path in package_modules().items()
            if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_the_graph_reader_sees_deferred_and_relative_imports(tmp_path):
    """The checks above are only as good as the reader: a function-level import and a relative one count."""
    source = tmp_path / "probe.py"
    source.write_text("def late():\n    from vtrepro.search import pisa\n\nfrom ..core import errors\nimport vtrepro.core.io\n")
    modules = package_modules()
    found = imported_modules(source, "vtrepro.index.probe", modules)
    assert found == {"vtrepro.search.pisa", "vtrepro.core.errors", "vtrepro.core.io"}
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert upward_imports({"vtrepro.index.probe": found}) == ["vtrepro.index.probe -> vtrepro.search.pisa"]


MAX_PARAMETERS = 8
"""Most parameters a function takes (``self`` and ``cls`` not counted): more belong in an options object."""
STDERR_WRITERS = {"vtrepro.core.log", "vtrepro.core.progress", "vtrepro.core.cli", "vtrepro"}
"""The modules that write to stderr themselves: the logger, the progress bar, the CLI entry (its
``error:`` line and usage) and the package itself (its line for a Python too old to compile the logger).
Everything else logs."""


def long_signatures() -> list[str]:
    found = []
    for name, path in package_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                count = len([argument for argument in arguments if argument.arg not in ("self", "cls")])
                if count > MAX_PARAMETERS:
                    found.append(f"{name}.{node.name} ({count})")
    return found


def test_no_function_takes_more_than_eight_parameters():
    assert long_signatures() == []


def test_only_the_logger_progress_and_cli_entry_write_to_stderr():
    writers = {name for name, path in package_modules().items() if _writes_stderr(path)}
    assert writers <= STDERR_WRITERS, writers - STDERR_WRITERS


def _writes_stderr(path: Path) -> bool:
    """Whether the module prints to stderr or writes to it (``print(..., file=sys.stderr)``,
    ``sys.stderr.write``); flushing it or handing it to a handler does not count."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name) and function.id == "print":
            if any(keyword.arg == "file" and "stderr" in ast.dump(keyword.value) for keyword in node.keywords):
                return True
        elif isinstance(function, ast.Attribute) and function.attr == "write" and "stderr" in ast.dump(function.value):
            return True
    return False


def test_the_encoder_length_default_is_declared_once():
    """The document length default (512 tokens) lives in ``EncoderOptions`` alone; everything else reads it."""
    declarations = [f"{name}:{number}" for name, path in package_modules().items()
                    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                    if "512" in line and ("max_length" in line or "max-length" in line)]
    assert len(declarations) == 1 and declarations[0].startswith("vtrepro.model.options:"), declarations
