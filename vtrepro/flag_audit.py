"""The flag audit: every command's flags, read from the parsers themselves, checked for one meaning per name
and one name per meaning, and written as the table of docs/flags.md.

``python -m vtrepro.flag_audit > docs/flags.md`` writes the table of the flags two or more commands share (the
flag test, ``tests/unit/test_flags.py``, fails when docs/flags.md differs from it). Each command builds its
parser in ``build_parser()`` (``bench`` and ``export`` with a parser per subcommand), so the flags are read
without running anything.

A flag's meaning is its value's type (integer, number, text, switch, path, or a choice), the kind of path
it names (:data:`vtrepro.core.cli.PATH_KINDS`: read, created by the command, or a root) and its default.
:func:`conflicts` lists every name whose meaning differs between commands (a default may differ only where
:data:`PER_COMMAND_DEFAULTS` says why; ``--output`` is the command's product, a file or a folder), every
shared flag without a line in :data:`MEANINGS`, two names declared with one meaning, and an old spelling
(:data:`RETIRED`) in use other than as a deprecated one.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any, Iterator

from vtrepro.__main__ import COMMANDS, command_functions
from vtrepro.core.cli import is_negatable, renamed_flags, subcommand_parsers

MEANINGS: dict[str, str] = {
    "--output": "the one thing this command creates, never an input: a FILE or a FOLDER (its metavar), written "
                "under a temporary name and renamed when complete",
    "--runs": "the root holding one folder per spec that regress writes (runs/<spec>/)",
    "--vectors": "existing encoded vectors, read: an encoded corpus folder (or JsonVectorCollection folder)",
    "--reference-vectors": "other encoded vectors that --vectors are compared with, read",
    "--queries": "the queries file the command reads: texts where it encodes, query vectors where it searches",
    "--corpus": "a corpus file whose texts are read (JSONL or TSV)",
    "--model": "a model: checkpoint folder or Hub id",
    "--tokenizer": "a tokenizer whose vocabulary is measured: a built-in vocabulary's name, or what --model takes; "
                   "repeated to set vocabularies side by side",
    "--model-dir": "the folder of local model copies by Hub id (default $VTREPRO_MODELS)",
    "--data-dir": "the data root holding beir/<dataset> (default $VTREPRO_DATA)",
    "--dataset": "one BEIR dataset, by name or folder",
    "--datasets": "a comma-separated subset of the spec's datasets",
    "--spec": "a regression spec: its file, or its name in regressions/",
    "--split": "the BEIR split whose queries or qrels are used",
    "--limit": "use only the first N texts or documents",
    "--metrics": "comma-separated metrics (e.g. ndcg@10,recall@100)",
    "--threads": "threads the command's work runs on",
    "--k": "hits kept per query",
    "--device": "where a model runs: cpu, cuda or cuda:N",
    "--batch-size": "texts per batch or step",
    "--seed": "the seed of the command's random choices",
    "--max-length-doc": "tokens per document",
    "--dtype": "the precision a model computes in",
    "--trust-remote-code": "let models run the Python code they ship (transformers' trust_remote_code)",
    "--engine": "the engine: lucene (Anserini) or pisa, exact; seismic or bmp, approximate",
    "--engines": "comma-separated engines a benchmark measures: lucene, pisa (exact), seismic, bmp (approximate)",
    "--qrels": "a judgments file: BEIR TSV with header, or TREC 4-column",
    "--preset": "whose choices to follow: vtrepro's, or the authors' released code",
    "--dry-run": "validate, print the plan and its cost, run nothing",
    "--rehearse": "run at miniature size on stand-in models and data",
    "--max-length": "tokens per text (mlm's training texts; the document length is --max-length-doc)",
    "--max-length-query": "tokens per query",
    "--projection": "how the vocabulary is projected: dense, screened (int8 or bfloat16 screen), or auto",
}
"""The one meaning of each shared flag (and of flags whose meaning a reader might confuse with another's)."""

PER_COMMAND_DEFAULTS: dict[str, str] = {
    "--output": "what each command creates, and where by default",
    "--limit": "each command reads as many texts by default as its work needs (all of them in mlm)",
    "--dataset": "the benchmarks default to scifact; elsewhere it is one of two sources",
    "--runs": "export model quotes no figures unless --runs is given; regress --rehearse writes runs/rehearse/",
    "--max-length-doc": "export model takes the spec condition's length unless given",
    "--max-length-query": "export model takes the spec condition's length unless given",
}
"""Flags whose default differs between commands, and why (any other difference is a conflict)."""

PER_COMMAND_CHOICES: dict[str, str] = {
    "--dtype": "mlm trains in float32 or bfloat16 (autocast) only",
}
"""Choice flags some commands accept fewer values of, and why."""

RETIRED: dict[str, str] = {
    "--docs": "--limit", "--max-texts": "--limit", "--documents": "--limit", "--metric": "--metrics",
    "--precision": "--dtype", "--screen": "--projection", "--out": "--output", "--config": "--recipe",
    "--source": "--model",
}
"""Old spellings: accepted only as deprecated ones (one notice naming the new flag), never declared anew."""

GLOBAL_FLAGS = ("-h", "--help", "--verbose", "--quiet", "--debug")
SCRIPT_COMMANDS = {"scripts/gpu_check.sh": "vtrepro.bench.command:gpu_check"}
"""Commands run by a script rather than through ``python -m vtrepro`` (named by the script; the parser's module
and its ``build_<name>_parser``): their flags follow the same rules."""


@dataclass(frozen=True)
class Flag:
    """One flag of one command, as its parser declares it."""

    command: str
    name: str
    type: str
    path_kind: str | None
    default: Any
    metavar: Any

    @property
    def meaning(self) -> tuple[str, str | None, str]:
        """What must agree between commands: type, the kind of path (created file and folder alike for
        --output), and the default (where it is not per command)."""
        kind = "created" if self.path_kind and self.path_kind.startswith("created") else self.path_kind
        default = "" if self.name in PER_COMMAND_DEFAULTS else shown_default(self.default)
        kind_of_value = "a choice" if self.name in PER_COMMAND_CHOICES else self.type
        return kind_of_value, kind if self.name == "--output" else self.path_kind, default


def command_parsers() -> Iterator[tuple[str, Any]]:
    """(command name, parser) of every command and subcommand, from each command's ``build_parser()``."""
    builders = {name: command_functions(name)[1] for name in COMMANDS}
    for name, spelled in SCRIPT_COMMANDS.items():
        module, _, part = spelled.partition(":")
        builders[name] = getattr(importlib.import_module(module), f"build_{part}_parser")
    for name, build in builders.items():
        parser = build()
        subparsers = subcommand_parsers(parser)
        if not subparsers:
            yield name, parser
        yield from ((f"{name} {sub}", subparser) for sub, subparser in subparsers.items())


def type_name(action: Any) -> str:
    """The kind of value a flag takes: switch, integer, number, text, path, list or one of its choices."""
    if action.nargs == 0:
        return "switch"
    if is_negatable(action):
        return "switch (--no- form)"
    if action.choices is not None:
        return "one of " + ", ".join(map(str, action.choices))
    label = getattr(action.type, "__name__", "str")
    kind = {"Path": "path", "str": "text"}.get(label) or (
        "integer" if label.startswith("an integer") else "number" if label.startswith("a number") else label)
    return f"{kind} list" if action.nargs in ("+", "*") else kind


def shown_default(value: Any) -> str:
    """A default as docs/flags.md shows it."""
    if value is None or value is False:
        return "none" if value is None else "off"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def command_flags(command: str, parser: Any) -> list[Flag]:
    """The flags ``parser`` declares, old spellings and the global flags left out."""
    renamed = renamed_flags(parser)
    flags = []
    for action in parser._actions:
        for name in action.option_strings:
            if name in renamed or name in GLOBAL_FLAGS or not name.startswith("--") or name.startswith("--no-"):
                continue
            flags.append(Flag(command, name, type_name(action), getattr(action, "path_kind", None),
                              getattr(action, "default_text", action.default), action.metavar))
    return flags


def all_flags() -> list[Flag]:
    """Every flag of every command."""
    return [flag for command, parser in command_parsers() for flag in command_flags(command, parser)]


def deprecated_spellings() -> dict[str, tuple[str, list[str]]]:
    """Every old spelling -> (the flag to write instead, the commands accepting it)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for command, parser in command_parsers():
        for old, new in renamed_flags(parser).items():
            found.setdefault(old, (new, []))[1].append(command)
    return found


def shared(flags: list[Flag]) -> dict[str, list[Flag]]:
    """Flag name -> its declarations, for the names two or more commands take, in name order."""
    by_name: dict[str, list[Flag]] = {}
    for flag in flags:
        by_name.setdefault(flag.name, []).append(flag)
    return {name: found for name, found in sorted(by_name.items()) if len({flag.command for flag in found}) > 1}


def conflicts(flags: list[Flag]) -> list[str]:
    """Every way the flags break one meaning per name and one name per meaning, in words (none: they keep it)."""
    problems = []
    by_name: dict[str, list[Flag]] = {}
    for flag in flags:
        by_name.setdefault(flag.name, []).append(flag)
        if flag.type == "path" and flag.path_kind is None:
            problems.append(f"{flag.command} {flag.name}: a path flag without a kind (declare it with core.cli.add_path)")
        if flag.name == "--output" and not (flag.path_kind or "").startswith("created"):
            problems.append(f"{flag.command} --output: is not what the command creates ({flag.path_kind})")
        if flag.name in RETIRED:
            problems.append(f"{flag.command} {flag.name}: an old spelling of {RETIRED[flag.name]}, declared anew")
    for name, found in by_name.items():
        meanings = {flag.meaning for flag in found}
        if len(meanings) > 1:
            problems.append(f"{name} has {len(meanings)} meanings: " + "; ".join(
                f"{flag.command}: {flag.meaning}" for flag in found))
    for name in shared(flags):
        if name not in MEANINGS:
            problems.append(f"{name}: shared by several commands but has no line in MEANINGS")
    texts: dict[str, str] = {}
    for name, text in MEANINGS.items():
        if text in texts:
            problems.append(f"{texts[text]} and {name}: two names with one meaning ({text})")
        texts[text] = name
    return problems


def markdown() -> str:
    """docs/flags.md: every shared flag with its one meaning, type, default and commands, then the old spellings."""
    flags = all_flags()
    lines = ["# Flags shared by several commands", "",
             "Generated from the commands' parsers by `python -m vtrepro.flag_audit > docs/flags.md`; "
             "`tests/unit/test_flags.py` fails when this file differs from what the parsers give, when one name "
             "carries two meanings (type, kind of path, default) or one meaning two names.", "",
             "Kinds of path: *input* (an existing file or folder, read), *created* (what the command creates: "
             "written under a temporary name and renamed when complete), *root* (a folder holding many runs). "
             "A default marked *per command* is listed beside each command.", "",
             "| flag | meaning | type | default | commands |", "|---|---|---|---|---|"]
    for name, found in shared(flags).items():
        kinds = sorted({flag.path_kind for flag in found if flag.path_kind})
        kind = f"path ({' or '.join(kinds)})" if kinds else found[0].type
        if name in PER_COMMAND_CHOICES:
            kind = f"{max((flag.type for flag in found), key=len)} ({PER_COMMAND_CHOICES[name]})"
        per_command = name in PER_COMMAND_DEFAULTS
        default = f"per command: {PER_COMMAND_DEFAULTS[name]}" if per_command else shown_default(found[0].default)
        takers = ", ".join(f"{flag.command} ({shown_default(flag.default)})" if per_command else flag.command
                           for flag in found)
        lines.append(f"| `{name}` | {MEANINGS[name]} | {kind} | {default} | {takers} |")
    lines += ["", "## Old spellings", "",
              "Each still works, stores into the new flag and logs one line: `'--old' is deprecated; write '--new'`.",
              "", "| old | write | commands |", "|---|---|---|"]
    for old, (new, commands) in sorted(deprecated_spellings().items()):
        lines.append(f"| `{old}` | `{new}` | {', '.join(commands)} |")
    lines += ["", "Positional arguments of `fingerprint` (`--vectors A --reference-vectors B`) and `report` "
              "(`--results FOLDER ...`), `export` without a subcommand (`export vectors`) and "
              "`search --engine pisa --vectors` (`index --engine pisa`) also still work, with a notice naming the "
              "new spelling."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
