"""The one YAML schema engine of specs and recipes: YAML read with line numbers, :class:`Field`
(a key's type, default, choices and bounds) and :class:`Checker`, which validates a mapping against
a schema of fields and reports the first problem as one ``file:line: ...`` error.

The modules that own options declare them as fields of :class:`vtrepro.core.options.Options` classes
(``vocabulary.transfer.TransferOptions``, ``training.recipe.TrainingOptions``, ``regress.spec.SpecDefaults``,
``search.runs.SearchOptions``...); specs, recipes and the command-line parsers are all read from them.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import MaxDepthExceededError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, SequenceNode
from ruamel.yaml.scalarbool import ScalarBoolean

from vtrepro.core.errors import VtreproError


def round_trip_yaml() -> YAML:
    """A ruamel YAML that keeps comments, quotes and order (for reading with line numbers and rewriting)."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


MAX_YAML_BYTES = 256 * 1024
"""Largest YAML file read: specs, recipes and published tables are a few KB (the largest shipped, 11 KB)."""
MAX_YAML_NODES = 100_000
"""Most nodes a YAML file may expand to, each alias counted at every use: a few hundred bytes of nested
aliases ("billion laughs") expand to billions of nodes, which a later walk or message would build. The
largest file shipped expands to 475."""
MAX_YAML_DEPTH = 32
"""Deepest nesting read (shipped files nest 7 levels): the parser's time grows with the square of the depth."""


def read_yaml(path: Path) -> Any:
    """Round-trip YAML (comments and line numbers kept); a syntax error names the file and line. The file's
    size and nesting are bounded, and its nodes are counted with aliases expanded (:func:`check_expansion`)
    before anything is built from them."""
    text = _read_bounded_text(path)
    yaml = round_trip_yaml()
    yaml.max_depth = MAX_YAML_DEPTH
    try:
        root = yaml.compose(text)
        check_expansion(root, path)
        return None if root is None else yaml.constructor.construct_document(root)
    except MaxDepthExceededError as error:
        raise VtreproError(f"{path}:{error.problem_mark.line + 1}: YAML nested deeper than {MAX_YAML_DEPTH} levels "
                           "(shipped files nest 7); flatten it") from None
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise VtreproError(f"{path}{line}: malformed YAML ({error.problem or error.context}); fix the syntax") from None
    except YAMLError as error:
        raise VtreproError(f"{path}: malformed YAML ({error}); fix the syntax") from None
    except ValueError as error:  # a scalar the constructor cannot build, e.g. an integer of 5,000 digits
        raise VtreproError(f"{path}: a YAML value vtrepro cannot read ({' '.join(str(error).split())[:120]}); "
                           "fix that value") from None


def _read_bounded_text(path: Path) -> str:
    """The UTF-8 text of ``path``, refused beyond :data:`MAX_YAML_BYTES` without reading further, and refused
    when it is not a regular file (opening a FIFO would wait for a writer forever)."""
    if path.exists() and not path.is_file():
        raise VtreproError(f"{path}: not a regular file; give the path of a YAML file")
    with path.open("rb") as handle:
        data = handle.read(MAX_YAML_BYTES + 1)
    if len(data) > MAX_YAML_BYTES:
        raise VtreproError(f"{path}: larger than {MAX_YAML_BYTES} bytes, the most a spec, recipe or table may "
                           "be (they are a few KB); give the right file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise VtreproError(f"{path}:{line}: not valid UTF-8 (byte {error.start}); save the file as UTF-8") from None


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def check_expansion(root: Node | None, path: Path) -> None:
    """Refuse a composed YAML graph whose nodes, each alias expanded at every use, exceed
    :data:`MAX_YAML_NODES`, or where an alias sits inside the collection it names (an endless expansion).

    An alias is the node it names, shared: each node's expanded size is counted once (depth first,
    children before their parent) and the first node over the limit is named, so the count stops there.
    A node met again once counted is an alias's.
    """
    sizes: dict[int, int] = {}  # id(node) -> nodes it expands to
    opened: set[int] = set()  # nodes whose children are being counted: the current path, while unsized
    shared = False
    stack = [root] if root is not None else []
    while stack:
        node = stack[-1]
        if id(node) in sizes:
            stack.pop()
            shared = True
            continue
        children = _children(node)
        if id(node) not in opened:
            opened.add(id(node))
            for child in children:
                if id(child) in opened and id(child) not in sizes:
                    raise VtreproError(f"{path}:{child.start_mark.line + 1}: a YAML alias sits inside the "
                                       "collection it names, so it expands without end; remove it")
            shared = shared or any(id(child) in sizes for child in children)
            stack.extend(child for child in children if id(child) not in sizes)
            continue
        stack.pop()
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
        if sizes[id(node)] > MAX_YAML_NODES:
            what = "YAML aliases expand to" if shared else "the YAML holds"
            raise VtreproError(f"{path}:{node.start_mark.line + 1}: {what} more than {MAX_YAML_NODES} nodes (each "
                               "alias counted at every use; shipped files hold a few hundred); remove the aliases "
                               "that repeat collections, or give the right file")


def read_mapping_file(path: Path, name: str, needs: str) -> tuple[CommentedMap, Checker]:
    """A YAML file that must hold a mapping (``a <name> must be a YAML mapping with <needs>`` otherwise),
    and a :class:`Checker` that calls it ``the <name>``."""
    document = read_yaml(path)
    if not isinstance(document, CommentedMap):
        raise VtreproError(f"{path}:1: a {name} must be a YAML mapping with {needs}")
    return document, Checker(path, f"the {name}")


BOOLEAN_FIX = "use true or false (unquoted; yes, no, on and off are strings in YAML 1.2)"


def is_boolean(value: Any) -> bool:
    """Whether a YAML value is a real boolean: ``true``/``false``, not ``yes``, ``no``, ``"true"`` or 1."""
    return isinstance(value, (bool, ScalarBoolean))


def bounds_text(minimum: float | None = None, maximum: float | None = None,
                above: float | None = None, below: float | None = None) -> str:
    """Bounds in words: ``>= 1``, ``> 0``, ``in [0, 1]``, ``in (0, 1)``; '' when unbounded."""
    low = _number_text(minimum if minimum is not None else above)
    high = _number_text(maximum if maximum is not None else below)
    if low is not None and high is not None:
        return f"in {'[' if minimum is not None else '('}{low}, {high}{']' if maximum is not None else ')'}"
    if low is not None:
        return f"{'>=' if minimum is not None else '>'} {low}"
    if high is not None:
        return f"{'<=' if maximum is not None else '<'} {high}"
    return ""


def _number_text(value: float | None) -> str | None:
    """A bound in words: whole numbers in full (10000000, not 1e+07), others as ``%g``; None for None."""
    if value is None:
        return None
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def within(value: float, minimum: float | None = None, maximum: float | None = None,
           above: float | None = None, below: float | None = None) -> bool:
    """Whether a finite ``value`` lies within the bounds (``minimum``/``maximum`` inclusive, ``above``/``below`` not)."""
    return (abs(value) <= sys.float_info.max and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
            and (above is None or value > above) and (below is None or value < below))


REQUIRED: Any = object()
"""The default of a :class:`Field` that must be given."""
MAX_TEXT_TOKENS = 8192
"""Most tokens per text any length option takes (ModernBERT's positions, the longest of the models used
here); a model with fewer positions refuses more where its config.json is read
(:func:`vtrepro.model.text_lengths.text_length_limit`)."""
MAX_BATCH_SIZE = 4096
"""Most texts per batch any batch-size option takes: twice the largest batch used (the MLM recipes' 2048);
memory grows with batch size x tokens per text."""

_KIND_NAMES = {int: "an integer", float: "a number", str: "a non-empty string", bool: "true or false",
               "mapping": "a mapping", "list": "a list", "str_list": "a non-empty list of strings"}


@dataclass(frozen=True)
class Field:
    """One key of a YAML mapping (and of a command line, where it has a flag).

    ``kind`` is int, float, str, bool, ``"mapping"``, ``"list"`` or ``"str_list"``; ``minimum`` and
    ``maximum`` are inclusive bounds, ``above`` and ``below`` exclusive ones; ``nullable`` allows an
    empty value (None); ``help`` is the command-line help text; ``what`` says in words what a valid
    value is, where the type alone does not.
    """

    kind: type | str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    below: float | None = None
    nullable: bool = False
    help: str = ""
    what: str = ""

    @property
    def bounds(self) -> tuple[float | None, float | None, float | None, float | None]:
        return self.minimum, self.maximum, self.above, self.below

    def expected(self) -> str:
        """What a valid value is, in words: ``an integer >= 1``, ``one of a, b``."""
        if self.what:
            return self.what
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        bounds = bounds_text(*self.bounds) if self.kind in (int, float) else ""
        return f"{_KIND_NAMES[self.kind]}{f' {bounds}' if bounds else ''}"


class Checker:
    """Validates YAML nodes against schemas; every problem names the file, the line and the key.

    ``where`` arguments name the mapping being read in messages (``training``, ``condition 'x'.bm25``);
    ``""`` is the document itself, called ``top`` (``the spec``, ``the recipe``).
    """

    def __init__(self, path: Path, top: str):
        self.path, self.top = path, top

    def location(self, node: Any, key: Any) -> str:
        """``file:line`` of ``node[key]`` (a mapping key or a list index), else of ``node``; ``file`` alone
        where YAML kept no line."""
        line = getattr(getattr(node, "lc", None), "line", None)
        lines = getattr(getattr(node, "lc", None), "data", None) or {}  # none on a tagged node (`!!python/...`)
        if isinstance(node, CommentedMap) and key in lines:  # keys merged from an anchor have no line here
            line = node.lc.key(key)[0]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and key < len(node) and lines:
            line = node.lc.item(key)[0]
        return f"{self.path}{'' if line is None else f':{line + 1}'}"

    def fail(self, node: Any, key: Any, message: str) -> VtreproError:
        """An error at ``node[key]``'s line (a mapping key or a list index), else at ``node``'s."""
        return VtreproError(f"{self.location(node, key)}: {message}")

    def mapping(self, parent: Any, key: Any, allowed: set[str] | dict[str, Any], where: str) -> CommentedMap:
        """``parent[key]`` (``parent`` itself for key None) as a mapping of ``allowed`` keys; empty for null."""
        node = parent if key is None else parent.get(key)
        if node is None:
            return CommentedMap()
        if not isinstance(node, CommentedMap):
            raise self.fail(parent, key, f"{where or self.top} must be a mapping")
        for name in node:
            if name not in allowed:
                raise self.fail(node, name, f"unknown key '{name}' in {where or self.top}; "
                                            f"expected one of {', '.join(sorted(allowed))}")
        return node

    def read(self, parent: Any, key: Any, schema: dict[str, Field], where: str,
             fill: bool = True) -> dict[str, Any]:
        """``parent[key]`` (``parent`` for key None) checked against ``schema``: unknown keys, required
        keys and every value; absent keys get their defaults (only the given keys when not ``fill``)."""
        node = self.mapping(parent, key, schema, where)
        values = {}
        for name, field in schema.items():
            if name in node:
                values[name] = self.value(node, name, field, f"{where}.{name}" if where else name)
            elif field.default is REQUIRED:
                raise self.fail(parent, key, f"{where or self.top} needs '{name}'")
            elif fill:
                values[name] = field.default
        return values

    def value(self, node: CommentedMap, key: Any, field: Field, label: str) -> Any:
        """``node[key]`` checked against ``field``; ``label`` names it in the message."""
        value = node[key]
        if value is None and field.nullable:
            return None
        if field.kind == "str_list":
            valid = isinstance(value, list) and bool(value) and all(isinstance(item, str) for item in value)
            value = tuple(value) if valid else value
        elif isinstance(field.kind, str):
            valid = isinstance(value, CommentedMap if field.kind == "mapping" else CommentedSeq)
        elif field.kind is bool:
            valid = is_boolean(value)
            value = bool(value) if valid else value
        elif field.kind is str:
            valid = isinstance(value, str) and bool(value.strip()) and (not field.choices or value in field.choices)
            value = str(value) if valid else value
        else:
            numeric = isinstance(value, int if field.kind is int else (int, float)) and not is_boolean(value)
            valid = numeric and within(value, *field.bounds)
            value = field.kind(value) if valid else value
        if not valid:
            fix = f"; {BOOLEAN_FIX}" if field.kind is bool else ""
            raise self.fail(node, key, f"{label} must be {field.expected()}, got {value!r}{fix}")
        return value
