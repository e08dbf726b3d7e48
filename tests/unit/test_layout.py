"""The package's shape, read from the source (``ast``), not by importing: no import circle, imports point
down the pipeline, no two modules share a name with two meanings, no oversized module, no literal default where
an option is declared.

The import graph holds every ``import vtrepro...`` and ``from vtrepro... import ...``, at module level or
inside a function (a deferred import still ties the two modules together), and the imports made by name:
``importlib.import_module("vtrepro.a.b")``, and in a module that imports from a table of names (the command
table of ``vtrepro/__main__.py``, the public API of ``vtrepro/__init__.py``), every module its strings name.
Every module is checked, the benchmarks and the top-level modules included. This test is the layout check:
there is no separate tool for it (``farm-studio look``, which issue 32 names, is neither on PyPI nor here).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

from helpers import REPO_ROOT

PACKAGE_ROOT = REPO_ROOT / "vtrepro"
LAYERS = ("core", "data", "model", "vocabulary", "encode", "index", "search", "evaluate", "training", "gap", "report",
          "regress", "bench")
"""The subpackages from the bottom up: a module may import its own layer and those below it. Above them all is
the command layer (every stage's ``command.py``: the parsers and ``main``s, which may call any stage, and which
no stage's module may import), and above it the entry point: the top-level modules (``vtrepro`` itself, the
public API; ``vtrepro.__main__``, the command table; any other ``vtrepro/<name>.py``), which nothing in a layer
may import."""
COMMAND_LAYER = len(LAYERS)
ENTRY_POINT = COMMAND_LAYER + 1
MAX_MODULE_LINES = 600


def module_name(path: Path) -> str:
    """``vtrepro/search/runs.py`` -> ``vtrepro.search.runs``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


@functools.cache
def parse(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once per session (several checks read every module; none changes a tree)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s tree (``ast.walk``), listed once per session."""
    return tuple(ast.walk(parse(path)))


def imported_modules(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The vtrepro modules ``path`` (module ``name``) imports: ``from a.b import c`` counts as ``a.b.c``
    when that is a module, else as ``a.b``; relative imports are resolved against ``name``; imports by
    name as :func:`imports_by_name` finds them."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = parse(path)
    found: set[str] = imports_by_name(tree, modules)
    for node in ast.walk(tree):
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


def imports_by_name(tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    """The modules imported through ``importlib.import_module``: a literal name is that module; a name taken
    from a table (any other argument) makes every module the module's strings name an import: a word
    ``vtrepro.a.b``, or, where the module writes names as ``f"vtrepro.{...}"``, a word ``a.b`` or a subpackage's
    name (docstrings are not read)."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _called(node) == "import_module"]
    found = {call.args[0].value for call in calls
             if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)}
    if not any(call.args and not isinstance(call.args[0], ast.Constant) for call in calls):
        return found
    prefixed = any(isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant)
                   and node.values[0].value == "vtrepro." for node in ast.walk(tree))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for word in node.value.split():
                word = word.partition(":")[0]  # the command table's "stage.command:name": the module stage.command
                if word.startswith("vtrepro."):
                    found.add(word)
                elif prefixed and ("." in word or modules.get(f"vtrepro.{word}", Path()).name == "__init__.py"):
                    found.add(f"vtrepro.{word}")
    return found


def _called(call: ast.Call) -> str | None:
    """The name a call calls: ``f(...)`` and ``a.b.f(...)`` both give ``f``."""
    function = call.func
    return function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else None


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


def layer(module: str) -> int:
    """The layer of ``vtrepro.<layer>...``; :data:`ENTRY_POINT` for the top-level modules."""
    parts = module.split(".")
    if len(parts) == 3 and parts[1] in LAYERS and parts[2] == "command":
        return COMMAND_LAYER
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else ENTRY_POINT


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a higher layer (the entry point included), as ``importer -> imported``."""
    return [f"{module} -> {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
            if layer(target) > layer(module)]


def test_the_package_has_no_import_circle():
    found = cycles(import_graph())
    assert found == [], "import circles:\n" + "\n".join(" <-> ".join(circle) for circle in found)


def test_imports_point_down_the_pipeline():
    found = upward_imports(import_graph())
    assert found == [], "imports of a higher layer:\n" + "\n".join(found)


def test_every_subpackage_has_a_layer():
    """A new subpackage must be placed in :data:`LAYERS`: every one has a place, the benchmarks included."""
    subpackages = {path.parent.name for path in PACKAGE_ROOT.glob("*/__init__.py")}
    assert subpackages <= set(LAYERS), f"subpackages without a layer: {sorted(subpackages - set(LAYERS))}"


def test_no_module_is_over_the_line_limit():
    long = {name: count for name, path in package_modules().items()
            if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_the_graph_reader_sees_deferred_relative_and_named_imports(tmp_path):
    """The checks above are only as good as the reader: a function-level import, a relative one and imports by
    name (a literal, a table of names) count; a docstring naming a module does not."""
    source = tmp_path / "probe.py"
    source.write_text("def late():\n    from vtrepro.search import pisa\n\nfrom ..core import errors\nimport vtrepro.core.io\n"
                      "importlib.import_module('vtrepro.regress.spec')\n")
    modules = package_modules()
    found = imported_modules(source, "vtrepro.index.probe", modules)
    assert found == {"vtrepro.search.pisa", "vtrepro.core.errors", "vtrepro.core.io", "vtrepro.regress.spec"}
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert upward_imports({"vtrepro.index.probe": found}) == ["vtrepro.index.probe -> vtrepro.regress.spec",
                                                               "vtrepro.index.probe -> vtrepro.search.pisa"]
    table = tmp_path / "table.py"
    table.write_text('"""vtrepro.regress.runner in a docstring."""\nimport importlib\n'
                     'TABLE = """\nencode  encode.writer  encode a corpus\nbench  bench  benchmarks\n"""\n'
                     'API = {"load_spec": "vtrepro.regress.spec"}\n'
                     'def run(name):\n    return importlib.import_module(f"vtrepro.{name}")\n')
    assert imported_modules(table, "vtrepro.table", modules) == {
        "vtrepro.encode", "vtrepro.encode.writer", "vtrepro.bench", "vtrepro.regress.spec"}
    assert upward_imports({"vtrepro.bench.probe": {"vtrepro.__main__"}, "vtrepro.__main__": {"vtrepro.bench"}}) == [
        "vtrepro.bench.probe -> vtrepro.__main__"]


def test_the_command_table_and_the_api_are_read_as_imports():
    """``vtrepro/__main__.py`` imports every command's module by name, ``vtrepro/__init__.py`` every public name's."""
    graph = import_graph()
    assert {"vtrepro.search.command", "vtrepro.regress.command", "vtrepro.training.command"} <= graph["vtrepro.__main__"]
    assert {"vtrepro.data.beir", "vtrepro.regress.spec"} <= graph["vtrepro"]
    assert "vtrepro.regress.model_export" in graph["vtrepro.model.command"]


ONE_MEANING: dict[str, tuple[set[str], str]] = {
    "encode": ({"vtrepro.encode", "vtrepro.bench.encode"}, "encoding: the stage, and `bench encode`, which measures it"),
    "search": ({"vtrepro.search", "vtrepro.bench.search"}, "search: the stage, and `bench search`, which measures it"),
    "transfer": ({"vtrepro.vocabulary.transfer", "vtrepro.bench.transfer"},
                 "vocabulary transfer: the stage, and `bench transfer`, which measures it"),
    "gap": ({"vtrepro.gap", "vtrepro.regress.gap", "vtrepro.report.gap"},
            "the vocabulary gap: measured by its package, run and pinned by a spec's `gap:` block, shown in the report"),
    "model": ({"vtrepro.model", "vtrepro.gap.model"}, "a model: the models, and `gap model`, the gap in a model's vectors"),
    "training": ({"vtrepro.training", "vtrepro.gap.training"},
                 "training: the training package, and `gap training`, the gap over a training run"),
}
"""Base names that several modules share with one meaning, each with the modules that hold it and that meaning.
Beside these, each stage's ``command.py`` (its command layer) and an engine's two modules (``index/<engine>.py``
builds its index, ``search/<engine>.py`` searches it) share a name; any other shared name has two meanings."""


def shared_names() -> dict[str, set[str]]:
    """Base name -> the modules holding it (a module's last part, a package's folder), for every name two or
    more modules share."""
    holders: dict[str, set[str]] = {}
    for name in package_modules():
        holders.setdefault(name.rpartition(".")[2], set()).add(name)
    return {base: modules for base, modules in holders.items() if len(modules) > 1}


def names_with_two_meanings(shared: dict[str, set[str]]) -> list[str]:
    """The shared names of ``shared`` that are neither the command layer's, an engine's nor in :data:`ONE_MEANING`."""
    return [f"{base}: {', '.join(sorted(modules))}" for base, modules in sorted(shared.items())
            if not (all(layer(module) == COMMAND_LAYER for module in modules)
                    or modules == {f"vtrepro.index.{base}", f"vtrepro.search.{base}"}
                    or modules == ONE_MEANING.get(base, (set(), ""))[0])]


def test_no_two_modules_share_a_name_with_two_meanings():
    found = names_with_two_meanings(shared_names())
    assert found == [], ("modules that share a name (rename one to say what it holds, or add the name to ONE_MEANING "
                         "with its one meaning):\n" + "\n".join(found))


def test_every_name_with_one_meaning_is_still_shared():
    """A name of :data:`ONE_MEANING` that no longer has those modules is removed from it."""
    shared = shared_names()
    stale = [base for base, (modules, _) in ONE_MEANING.items() if shared.get(base) != modules]
    assert stale == [], f"ONE_MEANING names modules that no longer share the name: {stale}"


def test_the_name_check_finds_two_meanings():
    """Commands and an engine's two modules pass; a module named like a package of another meaning does not, nor a
    name two engines' modules share outside index/ and search/."""
    shared = {"command": {"vtrepro.index.command", "vtrepro.regress.command"},
              "lucene": {"vtrepro.index.lucene", "vtrepro.search.lucene"},
              "report": {"vtrepro.report", "vtrepro.regress.report"},
              "pisa": {"vtrepro.index.pisa", "vtrepro.bench.pisa"}}
    assert names_with_two_meanings(shared) == ["pisa: vtrepro.bench.pisa, vtrepro.index.pisa",
                                               "report: vtrepro.regress.report, vtrepro.report"]


MAX_PARAMETERS = 8
"""Most parameters a function takes (``self`` and ``cls`` not counted): more belong in an options object."""
STDERR_WRITERS = {"vtrepro.core.log", "vtrepro.core.progress", "vtrepro.core.cli", "vtrepro"}
"""The modules that write to stderr themselves: the logger, the progress bar, the CLI entry (its
``error:`` line and usage) and the package itself (its line for a Python too old to compile the logger).
Everything else logs."""


def long_signatures() -> list[str]:
    found = []
    for name, path in package_modules().items():
        for node in nodes(path):
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
    for node in nodes(path):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name) and function.id == "print":
            if any(keyword.arg == "file" and "stderr" in ast.dump(keyword.value) for keyword in node.keywords):
                return True
        elif isinstance(function, ast.Attribute) and function.attr == "write" and "stderr" in ast.dump(function.value):
            return True
    return False


THREADS_CHANGE = {"threads"}
"""Option names whose literal defaults issue 32 replaces in a change of its own (``threads=1`` becomes
:data:`vtrepro.core.cli.DEFAULT_THREADS`, every core); remove a name once that change has landed."""


def option_declarations() -> dict[str, list[str]]:
    """Every option name declared in the package -> where: the fields of ``Options`` classes (declared with
    ``option(Field(...))``) and the keys of the mappings of ``Field(...)`` that schemas still read."""
    declared: dict[str, list[str]] = {}
    for name, path in package_modules().items():
        for node in nodes(path):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                            and isinstance(item.value, ast.Call) and _called(item.value) == "option"):
                        declared.setdefault(item.target.id, []).append(f"{name}.{node.name}")
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Call)
                            and _called(value) == "Field"):
                        declared.setdefault(key.value, []).append(f"{name}:{key.lineno}")
    return declared


def _literal(node: ast.expr) -> bool:
    """A number or a string written out (``1000``, ``-1``, ``"test"``), not a name that refers to a declaration."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool)


def parameter_defaults(tree: ast.Module) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.arg, ast.expr]]:
    """Every (function, parameter, default) of the functions in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = [*node.args.posonlyargs, *node.args.args]
            pairs = [*zip(positional[len(positional) - len(node.args.defaults):], node.args.defaults),
                     *((argument, default) for argument, default in zip(node.args.kwonlyargs, node.args.kw_defaults)
                       if default is not None)]
            found += [(node, argument, default) for argument, default in pairs]
    return found


def literal_option_defaults() -> list[str]:
    """Every function parameter named as an option whose default is written out instead of read from the
    option's declaration (``k: int = 1000`` rather than ``k: int = SearchOptions.k``)."""
    declared = option_declarations()
    return [f"{name}:{default.lineno} {function.name}({argument.arg}={ast.unparse(default)}): "
            f"declared in {', '.join(declared[argument.arg])}"
            for name, path in package_modules().items()
            for function, argument, default in parameter_defaults(parse(path))
            if argument.arg in declared and argument.arg not in THREADS_CHANGE and _literal(default)]


def test_no_signature_writes_out_an_option_default():
    found = literal_option_defaults()
    assert found == [], "literal defaults where an option is declared (use the declaration):\n" + "\n".join(found)


def test_the_option_default_check_finds_a_literal(tmp_path):
    """The check sees a written-out default of a declared option, and only that."""
    source = tmp_path / "probe.py"
    source.write_text("def search(queries, k: int = 1000, depth=SearchOptions.k, *, seed=-1, show=True, other=3): ...\n")
    declared = option_declarations()
    found = [f"{argument.arg}={ast.unparse(default)}" for _, argument, default in parameter_defaults(parse(source))
             if argument.arg in declared and _literal(default)]
    assert found == ["k=1000", "seed=-1"]


def length_defaults() -> list[str]:
    """Every default tokens-per-text written out as a number: in an option's declaration (``option(Field(int,
    512, ...))``), a schema's ``Field``, a signature or a dataclass field, for any name ``max_length*``."""
    found = []
    for name, path in package_modules().items():
        tree = parse(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                            and item.target.id.startswith("max_length") and item.value is not None):
                        continue
                    field = item.value.args[0] if isinstance(item.value, ast.Call) and item.value.args else None
                    default = (field.args[1] if isinstance(field, ast.Call) and _called(field) == "Field"
                               and len(field.args) > 1 else item.value)
                    if _literal(default):
                        kind = "option" if _called(item.value) == "option" else "field"
                        found.append(f"{kind} {name}.{node.name}.{item.target.id} = {ast.unparse(default)}")
            elif isinstance(node, ast.Dict):
                found += [f"schema {name}:{key.lineno} {key.value} = {ast.unparse(value.args[1])}"
                          for key, value in zip(node.keys, node.values)
                          if isinstance(key, ast.Constant) and str(key.value).startswith("max_length")
                          and isinstance(value, ast.Call) and len(value.args) > 1 and _literal(value.args[1])]
        found += [f"signature {name}:{default.lineno} {function.name}({argument.arg}={ast.unparse(default)})"
                  for function, argument, default in parameter_defaults(tree)
                  if argument.arg.startswith("max_length") and _literal(default)]
    return sorted(found)


def test_every_default_length_is_declared_once():
    """Each default length is one option's declaration: the encoder's document and query lengths
    (``EncoderOptions``: encode, specs, calibrate, the IDF query encoder), a recipe's training lengths
    (``TrainingOptions``) and MLM's block length (``MlmOptions``); everything else reads them."""
    assert length_defaults() == [
        "option vtrepro.model.encoder_options.EncoderOptions.max_length_doc = 512",
        "option vtrepro.model.encoder_options.EncoderOptions.max_length_query = 64",
        "option vtrepro.training.mlm.MlmOptions.max_length = 128",
        "option vtrepro.training.recipe.TrainingOptions.max_length_doc = 256",
        "option vtrepro.training.recipe.TrainingOptions.max_length_query = 32",
    ], "\n".join(length_defaults())
