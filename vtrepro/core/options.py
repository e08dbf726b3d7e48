"""Options declared once: a frozen dataclass whose every field carries its :class:`~vtrepro.core.schema.Field`.

One declaration gives an option its type, default, bounds, choices and help, and every way in reads it:

- a spec's or recipe's YAML mapping (:meth:`Options.read`, file:line errors through a
  :class:`~vtrepro.core.schema.Checker`),
- a command line (:func:`vtrepro.core.cli.add_option_flags` and :func:`vtrepro.core.cli.options_from_args`, called
  by the command modules alone: nothing here knows argparse),
- a subprocess's command line (:meth:`Options.to_argv`, which :func:`~vtrepro.core.cli.options_from_args` reads back),
- Python (the constructor, which checks every value against its field, so an object that exists is valid).

Example (:class:`vtrepro.encode.shards.ShardOptions`)::

    @dataclass(frozen=True)
    class ShardOptions(Options):
        shard_size: int = option(Field(int, 2000, minimum=1, help="documents per shard"))

    ShardOptions.read(checker, spec, "shards", "shards")   # from YAML
    options_from_args(ShardOptions, parser.parse_args(argv))  # from --shard-size (a command module)
    ShardOptions(shard_size=500).to_argv()                 # ['--shard-size', '500']

Old spellings stay readable: a subclass maps them in ``RENAMED`` (key -> new key) and ``RENAMED_VALUES``
(key -> {old value: new value}); reading one logs a one-line deprecation notice naming the file and line.
Other spellings that stay valid (another project's name for the same option, e.g. the authors'
``flops_threshold`` for ``doc_active_threshold``) are mapped in ``ALIASES`` and ``VALUE_ALIASES`` and read
by :func:`accept_aliases`, without a notice.

A block within the block is a field declared with ``option(Field("mapping", ...), nested=OtherOptions)``;
a rule between options (one of two keys, not both) is a subclass's :meth:`Options.conflict`, refused on
creation and, from YAML, at the line of the key it names.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Sequence, TypeVar

from vtrepro.core.errors import VtreproError
from vtrepro.core.schema import REQUIRED, Checker, Field, is_boolean, within

logger = logging.getLogger(__name__)

OptionsT = TypeVar("OptionsT", bound="Options")
_FIELD_KEY = "vtrepro.option"
_NESTED_KEY = "vtrepro.nested"


def option(field: Field, nested: type[Options] | None = None) -> Any:
    """A dataclass field declared by ``field``: its default is the field's (none when it is required).
    ``nested``: the options a mapping value holds (read with their own fields, line by line)."""
    metadata = {_FIELD_KEY: field, **({_NESTED_KEY: nested} if nested is not None else {})}
    if field.default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=field.default, metadata=metadata)


class Conflict(VtreproError):
    """Options each valid alone that break a rule together; ``key`` is the one to point at (None: the block)."""

    def __init__(self, owner: str, key: str | None, rule: str):
        super().__init__(f"{owner} {rule}")
        self.key, self.rule = key, rule


def flag_name(name: str) -> str:
    """The command-line flag of option ``name``: ``max_length_doc`` -> ``--max-length-doc``."""
    return "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class Options:
    """Base of every options object: frozen, each field declared with :func:`option`, checked on creation."""

    RENAMED: ClassVar[Mapping[str, str]] = {}
    """Old key -> its current name, read with a deprecation notice."""
    RENAMED_VALUES: ClassVar[Mapping[str, Mapping[str, str]]] = {}
    """Key -> {old value: current value}, read with a deprecation notice."""
    ALIASES: ClassVar[Mapping[str, str]] = {}
    """Another valid spelling of a key -> its name here, read silently (:func:`accept_aliases`)."""
    VALUE_ALIASES: ClassVar[Mapping[str, Mapping[str, str]]] = {}
    """Key -> {another valid spelling of a value: the value here}, read silently."""

    def __post_init__(self) -> None:
        for name, nested in self.nested().items():
            if isinstance(getattr(self, name), Mapping):  # a plain mapping given in Python: its options
                object.__setattr__(self, name, nested(**getattr(self, name)))
        for name, field in self.schema().items():
            problem = invalid(getattr(self, name), field)
            if problem:
                raise VtreproError(f"{type(self).__name__}.{name} must be {problem}, got {getattr(self, name)!r}")
        conflict = self.conflict()
        if conflict is not None:
            raise Conflict(type(self).__name__, *conflict)

    def conflict(self) -> tuple[str | None, str] | None:
        """A rule between options these values break, as (the key to point at, None for the whole block; the
        rule in words after the block's name, e.g. "takes one of 'a' and 'b', not both"), or None."""
        return None

    @classmethod
    def schema(cls) -> dict[str, Field]:
        """Option name -> its declaration, in declaration order."""
        return {item.name: item.metadata[_FIELD_KEY] for item in dataclasses.fields(cls) if _FIELD_KEY in item.metadata}

    @classmethod
    def nested(cls) -> dict[str, type[Options]]:
        """Option name -> the options its mapping holds, for the blocks within this block."""
        return {item.name: item.metadata[_NESTED_KEY] for item in dataclasses.fields(cls) if _NESTED_KEY in item.metadata}

    @classmethod
    def read(cls: type[OptionsT], check: Checker, parent: Any, key: Any, where: str, **given: Any) -> OptionsT:
        """``parent[key]`` (``parent`` itself for key None) read with ``check``: unknown keys, bounds and
        choices refused at their line, old spellings accepted with a notice, absent keys defaulted.
        ``given`` fills options the mapping does not hold (e.g. spec-wide settings under a condition's)."""
        return cls.read_with(check, parent, key, where, {}, **given)[0]

    @classmethod
    def read_with(cls: type[OptionsT], check: Checker, parent: Any, key: Any, where: str, extra: Mapping[str, Field],
                  **given: Any) -> tuple[OptionsT, dict[str, Any]]:
        """:meth:`read` of a block that may also hold the ``extra`` keys (a spec's transfer ``source``), which
        are checked against their fields and returned apart: (the options, extra key -> value)."""
        node = parent if key is None else parent.get(key)
        if node is not None and hasattr(node, "items"):
            accept_aliases(check, node, where, cls.ALIASES, cls.VALUE_ALIASES)
            modernize(check, node, where, cls.RENAMED, cls.RENAMED_VALUES)
        values = check.read(parent, key, {**extra, **cls.schema()}, where, fill=False)
        extras = {name: values.pop(name) for name in extra if name in values}
        for name, nested in cls.nested().items():
            if values.get(name) is not None:
                values[name] = nested.read(check, node, name, f"{where}.{name}")
        try:
            return cls(**{**given, **values}), extras
        except Conflict as error:
            message = f"{where or check.top} {error.rule}"
            if error.key is not None and error.key in (node or {}):
                raise check.fail(node, error.key, message) from None
            raise check.fail(parent, key, message) from None

    def to_argv(self, names: Sequence[str] | None = None) -> list[str]:
        """The command line that :func:`~vtrepro.core.cli.options_from_args` reads back as these options (every option,
        or ``names``)."""
        argv: list[str] = []
        for name in self.schema() if names is None else names:
            value = getattr(self, name)
            if isinstance(value, bool):  # a flag off by default has no --no- form (core.cli.add_options)
                argv += [flag_name(name)] if value else [] if self.schema()[name].default is False else [
                    "--no-" + flag_name(name)[2:]]
            elif value is not None:
                argv += [flag_name(name), str(value)]
        return argv

    def to_dict(self) -> dict[str, Any]:
        """Option name -> value (JSON-ready for manifests and reports; a nested block as its own mapping)."""
        values = {name: getattr(self, name) for name in self.schema()}
        return {name: value.to_dict() if isinstance(value, Options) else value for name, value in values.items()}

    def replace(self: OptionsT, **changes: Any) -> OptionsT:
        """A copy with ``changes``, checked like a new object."""
        return dataclasses.replace(self, **changes)


def invalid(value: Any, field: Field) -> str:
    """What ``value`` should have been when it does not fit ``field`` ('' when it does)."""
    if value is None:
        return "" if field.nullable or field.default is None else field.expected()
    if field.kind is bool:
        valid = is_boolean(value)
    elif field.kind in (int, float):
        numeric = isinstance(value, int if field.kind is int else (int, float)) and not isinstance(value, bool)
        valid = numeric and within(value, *field.bounds)
    elif field.kind is str:
        valid = isinstance(value, str) and bool(value.strip()) and (not field.choices or value in field.choices)
    else:
        valid = True  # mappings and lists are checked by their owners' own options
    return "" if valid else field.expected()


def modernize(check: Checker, node: Any, where: str, renamed: Mapping[str, str],
              renamed_values: Mapping[str, Mapping[str, str]]) -> None:
    """Rewrite old keys (``renamed``: old -> new) and values (``renamed_values``: key -> {old: new}) of the
    YAML mapping ``node`` in place to their current spelling, one deprecation notice each (one for an old
    key with an old value: ``'precision: bf16' is deprecated; write 'dtype: bfloat16'``)."""
    old_values: dict[str, str] = {}  # old key -> its old value, named in the key's notice
    for key, values in renamed_values.items():
        for spelled in [key, *(old for old, new in renamed.items() if new == key)]:
            if isinstance(node.get(spelled), str) and node[spelled] in values:
                if spelled == key:
                    logger.warning("%s: %s: %s is deprecated; write %s", check.location(node, spelled), spelled,
                                   node[spelled], values[node[spelled]])
                else:
                    old_values[spelled] = node[spelled]
                node[spelled] = values[node[spelled]]
    for old, new in renamed.items():
        if old in node:
            if new in node:
                raise check.fail(node, old, f"{where}.{old} is the old spelling of {where}.{new}; give only {new}")
            was, now = (f"{old}: {old_values[old]}", f"{new}: {node[old]}") if old in old_values else (old, new)
            logger.warning("%s: '%s' is deprecated; write '%s'", check.location(node, old), was, now)
            position = list(node).index(old)
            node.insert(position, new, node.pop(old))


def accept_aliases(check: Checker, node: Any, where: str, aliases: Mapping[str, str],
                   value_aliases: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Rewrite the other spellings of keys (``aliases``: other -> name) and of values (``value_aliases``:
    key -> {other: value}) of the YAML mapping ``node`` in place to vtrepro's, silently: both spellings
    are valid and mean the same option. Giving one option in both spellings is an error at the second's line."""
    for key, values in (value_aliases or {}).items():
        for spelled in [key, *(other for other, name in aliases.items() if name == key)]:
            if isinstance(node.get(spelled), str) and node[spelled] in values:
                node[spelled] = values[node[spelled]]
    for other, name in aliases.items():
        if other in node:
            if name in node:
                raise check.fail(node, other, f"{where}.{other} is another spelling of {where}.{name}; give only one")
            node.insert(list(node).index(other), name, node.pop(other))
