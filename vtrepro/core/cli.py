"""What every command shares: the entry wrapper, range-checked argument types, verbosity.

Every ``python -m vtrepro <command>`` runs through :func:`cli_entry`, which turns each failure a user
can cause into one ``error:`` line (exit 2): a :class:`VtreproError`, an OS-level failure (missing
path, permissions, full disk) or an interrupt. Anything else is an internal error: one line, exit 3,
and a hint to rerun with ``--debug`` for the traceback. Messages go through the ``vtrepro`` logger
(:mod:`vtrepro.core.log`): ``--quiet`` keeps only warnings, ``--verbose`` also lets third-party logs
through (Lucene, transformers, Java warnings), which are otherwise silenced.
"""
from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, TypeVar

from vtrepro.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, VtreproError
from vtrepro.core.log import command_level, command_logging, write_line
from vtrepro.core.schema import REQUIRED, Field, bounds_text, within

if TYPE_CHECKING:
    from vtrepro.core.options import Options

OptionsT = TypeVar("OptionsT", bound="Options")
logger = logging.getLogger(__name__)

_GLOBAL_FLAGS = ("--verbose", "--quiet", "--debug")
_OS_FIXES = {
    errno.ENOSPC: "free disk space (or choose another --output) and rerun",
    errno.EDQUOT: "free disk space (or choose another --output) and rerun",
    errno.EFBIG: "the file would exceed this system's or process's file-size limit: raise it or choose another path",
    errno.EACCES: "check the permissions or choose another path",
    errno.EPERM: "check the permissions or choose another path",
    errno.EROFS: "the file system is read-only: choose another path",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a folder: check the path",
    errno.EISDIR: "the path is a folder: give a file path",
}


def command_parser(prog: str, doc: str | None) -> CommandParser:
    """An argument parser for ``python -m vtrepro <prog>`` that documents the global flags."""
    parser = CommandParser(prog=f"python -m vtrepro {prog}", description=(doc or "").splitlines()[0])
    parser.add_argument("--verbose", action="store_true",
                        help="also show debug lines and third-party logs (Lucene, transformers, Java)")
    parser.add_argument("--quiet", action="store_true", help="show only warnings and errors (wins over --verbose)")
    parser.add_argument("--debug", action="store_true", help="print the full traceback of an internal error")
    return parser


def add_model(parser: argparse.ArgumentParser, what: str, old_spelling: str | None = None) -> None:
    """``--model MODEL`` (required, stored as ``args.model``): a checkpoint folder or Hub id."""
    parser.add_argument("--model", required=True, metavar="MODEL", help=f"{what} (folder or Hub id)")
    if old_spelling:
        add_renamed(parser, old_spelling, "--model")


def add_data_dir(parser: argparse._ActionsContainer) -> None:
    """``--data-dir``: the data root holding ``beir/<dataset>/`` (default ``$VTREPRO_DATA``)."""
    parser.add_argument("--data-dir", default=None, help="data root holding beir/<dataset> (default: $VTREPRO_DATA)")


def add_model_dir(parser: argparse._ActionsContainer) -> None:
    """``--model-dir``: the folder of local model copies by Hub id (default ``$VTREPRO_MODELS``)."""
    parser.add_argument("--model-dir", default=None,
                        help="folder of local model copies by Hub id (default: $VTREPRO_MODELS)")


def add_text_source(parser: argparse.ArgumentParser, texts: str) -> None:
    """``--dataset NAME | --corpus FILE`` (one required): where ``texts`` come from (see :mod:`vtrepro.data.texts`)."""
    source = parser.add_mutually_exclusive_group(required=True)
    add_dataset(source, help=f"BEIR dataset name or folder whose corpus gives {texts}")
    add_path(source, "--corpus", "input file",
             help="corpus file: JSONL ('text' or 'contents', optional 'title') or id<TAB>text TSV")


def _available_cores() -> int:
    """The cores this process may run on (its CPU affinity, as set by taskset, cgroups or a batch scheduler)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1


DEFAULT_THREADS = _available_cores()
"""Threads of every command's ``--threads`` and of every function that indexes or searches: all cores."""


def add_threads(parser: argparse._ActionsContainer, what: str) -> None:
    """``--threads N`` (default :data:`DEFAULT_THREADS` in every command): threads for ``what``. No run
    or figure depends on it (docs/pipeline.md, search and ties), only the time taken."""
    action = parser.add_argument("--threads", type=positive_int, default=DEFAULT_THREADS,
                                 help=f"{what}; results do not depend on it (default: all %(default)s cores this "
                                      "process may use; 1 for one)")
    action.default_text = "every core this process may use"  # type: ignore[attr-defined]  # the machine's number


PATH_KINDS = ("input file", "input folder", "input path", "created file", "created folder", "root")
"""What a path flag names: an existing file, folder or either (read), what the command creates (its
``--output``: written under a temporary name and renamed when complete), or a root holding many runs."""
_METAVARS = {"input file": "FILE", "input folder": "FOLDER", "input path": "PATH", "created file": "FILE",
             "created folder": "FOLDER", "root": "ROOT"}


def add_path(parser: argparse._ActionsContainer, flag: str, kind: str, help: str, **kwargs: Any) -> argparse.Action:
    """A path flag of one of :data:`PATH_KINDS`, recorded on the action (``action.path_kind``, read by the
    flag test and docs/flags.md) and shown by its metavar (FILE, FOLDER, PATH or ROOT)."""
    if kind not in PATH_KINDS:
        raise ValueError(f"{flag}: path kind {kind!r} is none of {PATH_KINDS}")
    action = parser.add_argument(flag, type=Path, metavar=kwargs.pop("metavar", _METAVARS[kind]), help=help, **kwargs)
    action.path_kind = kind  # type: ignore[attr-defined]
    return action


def add_output_folder(parser: argparse.ArgumentParser, what: str = "output folder", required: bool = True,
                      default: Path | None = None, rule: str = "must not exist or be empty",
                      old_spelling: bool = False) -> None:
    """``--output FOLDER``: the folder this command creates (``rule``: which existing folder it accepts);
    ``old_spelling``: also ``--out``, deprecated, where a command took it."""
    add_path(parser, "--output", "created folder", required=required, default=default,
             help=f"{what} ({rule}{'' if default is None else '; default: %(default)s'})")
    if old_spelling:
        add_renamed(parser, "--out", "--output")


def add_output_file(parser: argparse._ActionsContainer, what: str, required: bool = True,
                    default: Path | None = None) -> None:
    """``--output FILE``: the one file this command creates (replaced when complete)."""
    add_path(parser, "--output", "created file", required=required, default=default,
             help=f"{what} (replaced when complete{'' if default is None else '; default: %(default)s'})")


DEFAULT_RUNS = Path("runs")
"""Where ``regress`` writes a folder per spec, and where ``export`` and ``report`` find them."""


def add_runs(parser: argparse._ActionsContainer, what: str, default: Path | None = DEFAULT_RUNS) -> None:
    """``--runs ROOT`` (default ``runs/``): the root holding one folder per spec that regress writes."""
    add_path(parser, "--runs", "root", default=default,
             help=what if default is None else f"{what} (default: %(default)s)")


def add_vectors(parser: argparse._ActionsContainer, what: str, required: bool = False) -> None:
    """``--vectors PATH``: existing encoded vectors, read: an encoded corpus folder (or a JsonVectorCollection
    folder; ``what`` says which other forms the command takes)."""
    add_path(parser, "--vectors", "input path", required=required, help=what)


def add_reference_vectors(parser: argparse._ActionsContainer, what: str) -> None:
    """``--reference-vectors PATH``: other encoded vectors that ``--vectors`` are compared with, read."""
    add_path(parser, "--reference-vectors", "input path", help=what)


def add_limit(parser: argparse._ActionsContainer, what: str, default: int | None = None,
              maximum: int | None = None, dest: str = "limit") -> None:
    """``--limit N``: only the first N ``what`` (texts, documents) are used; none: all of them."""
    shown = "all" if default is None else "%(default)s"
    parser.add_argument("--limit", dest=dest, type=number_in(int, minimum=1, maximum=maximum), default=default,
                        metavar="N", help=f"use only the first N {what} (default: {shown})")


def add_metrics(parser: argparse._ActionsContainer, default: Sequence[str], what: str = "metrics to score") -> None:
    """``--metrics LIST``: comma-separated metrics, e.g. ``ndcg@10,recall@100``."""
    parser.add_argument("--metrics", default=",".join(default), metavar="LIST",
                        help=f"{what}, comma-separated, e.g. ndcg@10,recall@100 (default: %(default)s)")


def add_datasets(parser: argparse._ActionsContainer) -> None:
    """``--datasets LIST``: a comma-separated subset of the spec's datasets."""
    parser.add_argument("--datasets", metavar="LIST", help="comma-separated subset of the spec's datasets (default: all)")


def add_spec(parser: argparse._ActionsContainer, required: bool = True, what: str = "") -> None:
    """``--spec SPEC``: a spec file, or a name in regressions/."""
    parser.add_argument("--spec", required=required, metavar="SPEC",
                        help=f"spec file, or a name in regressions/ (e.g. beir_bm25_flat){what}")


def add_split(parser: argparse._ActionsContainer, what: str) -> None:
    """``--split NAME`` (default test): the BEIR split whose queries and qrels are used."""
    parser.add_argument("--split", default="test", help=f"BEIR split of the {what} (default: %(default)s)")


def add_device(parser: argparse._ActionsContainer, extra: str = "") -> None:
    """``--device``: where a model runs."""
    parser.add_argument("--device", help=f"cpu, cuda or cuda:N (default: CUDA when present{extra})")


class CommandParser(argparse.ArgumentParser):
    """A command's parser: old spellings of its flags (:func:`add_renamed`) are rewritten to the new ones
    before parsing, each with one notice, so they parse exactly as the new flag (required, exclusive, typed)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.renamed: dict[str, tuple[str, dict[str, Any] | None]] = {}

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        return super().parse_known_args(self._modernized(list(sys.argv[1:] if args is None else args)), namespace)

    def _modernized(self, args: list[str]) -> list[str]:
        """``args`` with every old spelling (``--old V`` or ``--old=V``) written as its new flag."""
        written: list[str] = []
        index = 0
        while index < len(args):
            token = args[index]
            if token == "--":
                return written + args[index:]
            name, equals, attached = token.partition("=")
            if name not in self.renamed:
                written.append(token)
                index += 1
                continue
            new, values = self.renamed[name]
            takes_value = self._option_string_actions[new].nargs != 0
            value = attached if equals else args[index + 1] if takes_value and index + 1 < len(args) else None
            index += 1 if equals or not takes_value or value is None else 2
            if value is None:
                logger.warning(f"'{name}' is deprecated; write '{new}'")
                written.append(new)
                continue
            if values is not None and value not in values:
                self.error(f"argument {name}: invalid choice: {value!r} (choose from {', '.join(values)})")
            value = values[value] if values is not None else value
            logger.warning(f"'{name} {args[index - 1] if not equals else attached}' is deprecated; write '{new} {value}'")
            written += [new, value]
        return written


def add_renamed(parser: argparse.ArgumentParser, old: str, new: str, values: dict[str, Any] | None = None) -> None:
    """Accept ``old``, the deprecated spelling of the flag ``new`` (already added to ``parser``, a
    :class:`CommandParser`): it is rewritten to ``new`` before parsing, hidden from ``--help``, and logs
    ``'old V' is deprecated; write 'new V'``. ``values`` maps the old spelling's values (its only accepted
    ones) to the new flag's."""
    if not isinstance(parser, CommandParser) or new not in parser._option_string_actions:
        raise ValueError(f"{old}: add {new} to a command parser (core.cli.command_parser) before its old spelling")
    parser.renamed[old] = (new, values)


def renamed_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every deprecated spelling ``parser`` accepts -> the flag to write instead."""
    return {old: new for old, (new, _) in getattr(parser, "renamed", {}).items()}


def _shown(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def _action(parser: argparse._ActionsContainer, flag: str) -> argparse.Action:
    for action in parser._actions:
        if flag in action.option_strings:
            return action
    raise ValueError(f"{flag} is not a flag of this parser")


def positional_fallback(parser: argparse.ArgumentParser, args: argparse.Namespace, name: str,
                        flags: Sequence[str]) -> None:
    """The deprecated positional arguments ``args.<name>`` given in place of ``flags`` (in order; the last
    takes the rest when its dest is a list): filled into those flags' dests with one notice naming them."""
    given = getattr(args, name)
    delattr(args, name)
    if not given:
        return
    actions = [_action(parser, flag) for flag in flags]
    for action in actions:
        if getattr(args, action.dest) not in (None, action.default, []):
            parser.error(f"give {' and '.join(flags)} as flags, not also as positional arguments")
    values = list(given)
    written = []
    for index, action in enumerate(actions):
        if not values:
            break
        if index == len(actions) - 1 and action.nargs in ("+", "*"):
            value, values = values, []
        else:
            value = values.pop(0)
        setattr(args, action.dest, value)
        written.append(f"{action.option_strings[0]} {_shown(value)}")
    if values:
        parser.error(f"unrecognized arguments: {' '.join(map(str, values))}")
    logger.warning(f"positional arguments are deprecated; write '{' '.join(written)}'")


def add_trust_remote_code(parser: argparse._ActionsContainer) -> None:
    """``--trust-remote-code``: the person at the keyboard allows models to run the Python code they ship."""
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let models run the Python code they ship (transformers' trust_remote_code); a spec "
                             "or recipe asking for it (trust_remote_code: true) alone never grants it")


def grant_remote_code(path: str | Path, askers: Sequence[str], granted: bool) -> None:
    """Refuse, before any work, a spec or recipe (``path``) whose ``askers`` set ``trust_remote_code: true``
    unless ``--trust-remote-code`` was given: a file from someone else must not make vtrepro run code."""
    if askers and not granted:
        raise VtreproError(
            f"{path}: {', '.join(askers)} set trust_remote_code: true, which runs Python code shipped with the "
            "model; a spec or recipe cannot grant that: rerun with --trust-remote-code if you trust those models")


def add_checkpoint_arguments(parser: argparse.ArgumentParser, model: str, texts: str | None = None,
                             old_model_spelling: str | None = None) -> None:
    """What every command from one checkpoint to another takes: ``--model``, the ``texts`` it reads
    (``--dataset``/``--corpus`` with ``--data-dir``; none when None), ``--model-dir``, ``--output`` and
    ``--trust-remote-code``."""
    add_model(parser, model, old_model_spelling)
    if texts is not None:
        add_text_source(parser, texts)
        add_data_dir(parser)
    add_model_dir(parser)
    add_output_folder(parser, old_spelling=True)
    add_trust_remote_code(parser)


def os_error_message(error: OSError) -> str:
    """One line for an OS-level failure: the path, what happened and what to do."""
    where = f"{error.filename}: " if error.filename else ""
    fix = _OS_FIXES.get(error.errno or 0, "check the path and rerun")
    return f"{where}{error.strerror or error}; {fix}"


def _error(message: str) -> None:
    write_line(f"error: {' '.join(message.split())}")


def usage_error(usage: str, message: str) -> int:
    """Print ``usage`` and one ``error:`` line to stderr (a command line that names no command); exit 2."""
    print(usage, end="\n\n", file=sys.stderr)
    _error(message)
    return EXIT_BAD_INPUT


class Command(Protocol):
    """A command's ``main``: parses ``argv`` (default: the process's arguments) and returns the exit status."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def cli_entry(main: Callable[[list[str] | None], int]) -> Command:
    """Wrap a command's ``main(argv)``: every failure becomes one ``error:`` line and an exit status."""

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        debug = "--debug" in argv
        level = command_level(quiet="--quiet" in argv, verbose="--verbose" in argv)
        argv = [arg for arg in argv if arg not in _GLOBAL_FLAGS]
        with command_logging(level):
            return _run(main, argv, debug)

    return wrapper


def _run(main: Callable[[list[str] | None], int], argv: list[str], debug: bool) -> int:
    """``main(argv)``'s exit status, every failure turned into one ``error:`` line."""
    try:
        return main(argv)
    except VtreproError as error:
        _error(str(error))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _error("interrupted; files already finished are kept (encode and train resume where they stopped)")
        return 130
    except OSError as error:
        if debug:
            raise
        _error(os_error_message(error))
        return EXIT_BAD_INPUT
    except Exception as error:  # noqa: BLE001 - the last line of defence: one line, trace on --debug
        if debug:
            raise
        _error(f"internal error ({type(error).__name__}: {str(error).strip()[:300]}); "
               "rerun with --debug for the traceback and report it")
        return EXIT_INTERNAL


def number_in(kind: type, minimum: float | None = None, maximum: float | None = None,
              above: float | None = None, below: float | None = None) -> Callable[[str], Any]:
    """An argparse type for a finite ``kind`` (int or float) within the bounds (``minimum``/``maximum``
    inclusive, ``above``/``below`` exclusive)."""
    label = f"{'an integer' if kind is int else 'a number'} {bounds_text(minimum, maximum, above, below)}".strip()

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {label}, got {text!r}") from None
        if not within(value, minimum, maximum, above, below):
            raise argparse.ArgumentTypeError(f"expected {label}, got {text!r}")
        return value

    parse.__name__ = label
    return parse


positive_int = number_in(int, minimum=1)
non_negative_int = number_in(int, minimum=0)
positive_float = number_in(float, above=0)


def add_options(parser: argparse._ActionsContainer, schema: dict[str, Field], names: Sequence[str] | None = None) -> None:
    """One ``--flag-name`` per field of ``schema`` (or of ``names``): its type, bounds, choices, default
    and help, so a command line takes exactly what a spec or recipe takes."""
    for name in names or schema:
        field = schema[name]
        flag = "--" + name.replace("_", "-")
        default = None if field.default is REQUIRED else field.default
        shown = f"{field.help} (default: %(default)s)" if default is not None else field.help
        if field.kind is bool:  # --flag alone when it is off by default, else --flag/--no-flag
            parser.add_argument(flag, action="store_true" if default is False else argparse.BooleanOptionalAction,
                                default=default, help=field.help)
        elif field.kind in (int, float):
            parser.add_argument(flag, type=number_in(field.kind, *field.bounds), default=default,
                                required=field.default is REQUIRED, help=shown)
        elif field.kind is str:
            parser.add_argument(flag, choices=field.choices or None, default=default,
                                required=field.default is REQUIRED, help=shown)
        else:
            raise TypeError(f"{name}: a {field.kind} field has no command-line form")


def add_option_flags(parser: argparse._ActionsContainer, options: type[Options],
                     names: Sequence[str] | None = None) -> None:
    """One ``--flag-name`` per option of ``options`` (or per one of ``names``), typed, bounded and documented."""
    add_options(parser, options.schema(), names)


def options_from_args(options: type[OptionsT], args: argparse.Namespace, **given: Any) -> OptionsT:
    """The ``options`` parsed by :func:`add_option_flags` (those it did not add keep their defaults or ``given``)."""
    parsed = {name: getattr(args, name) for name in options.schema() if hasattr(args, name)}
    return options(**{**given, **parsed})


def add_k(parser: argparse._ActionsContainer, options: type[Options]) -> None:
    """``--k``: hits per query, as ``options`` (the search options) declare it."""
    add_option_flags(parser, options, ["k"])


def add_dataset(parser: argparse._ActionsContainer, help: str, default: str | None = None) -> None:
    """``--dataset NAME``: one BEIR dataset, by name or folder (``help`` says what the command reads of it)."""
    parser.add_argument("--dataset", default=default, help=help)


def add_dry_run(parser: argparse._ActionsContainer, help: str) -> None:
    """``--dry-run``: validate, print the plan and its cost, run nothing (``help`` names what is validated)."""
    parser.add_argument("--dry-run", action="store_true", help=help)


def add_rehearse(parser: argparse._ActionsContainer, help: str) -> None:
    """``--rehearse``: run at miniature size on stand-in models and data (``help`` says what runs)."""
    parser.add_argument("--rehearse", action="store_true", help=help)


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Subcommand name -> its parser, for a parser with subcommands (``bench``, ``export``); else empty."""
    return {name: subparser for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, subparser in action.choices.items()}


def is_negatable(action: argparse.Action) -> bool:
    """Whether a flag has a ``--no-`` form (:func:`add_options` gives one to a switch on by default)."""
    return isinstance(action, argparse.BooleanOptionalAction)
