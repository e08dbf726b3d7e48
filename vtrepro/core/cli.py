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
import os
import sys
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from vtrepro.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, VtreproError
from vtrepro.core.log import command_level, command_logging
from vtrepro.core.schema import REQUIRED, Field, bounds_text, within

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


def command_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """An argument parser for ``python -m vtrepro <prog>`` that documents the global flags."""
    parser = argparse.ArgumentParser(prog=f"python -m vtrepro {prog}", description=(doc or "").splitlines()[0])
    parser.add_argument("--verbose", action="store_true",
                        help="also show debug lines and third-party logs (Lucene, transformers, Java)")
    parser.add_argument("--quiet", action="store_true", help="show only warnings and errors (wins over --verbose)")
    parser.add_argument("--debug", action="store_true", help="print the full traceback of an internal error")
    return parser


def add_model(parser: argparse._ActionsContainer, what: str, old_spelling: str | None = None) -> None:
    """``--model MODEL`` (required, stored as ``args.model``): a checkpoint folder or Hub id."""
    flags = ["--model"] + ([old_spelling] if old_spelling else [])
    old = f"; {old_spelling} is the old spelling" if old_spelling else ""
    parser.add_argument(*flags, dest="model", required=True, metavar="MODEL", help=f"{what} (folder or Hub id{old})")


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
    source.add_argument("--dataset", help=f"BEIR dataset name or folder whose corpus gives {texts}")
    source.add_argument("--corpus", type=Path,
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
    parser.add_argument("--threads", type=positive_int, default=DEFAULT_THREADS,
                        help=f"{what}; results do not depend on it (default: all %(default)s cores this process "
                             "may use; 1 for one)")


def add_output_folder(parser: argparse.ArgumentParser) -> None:
    """``--output FOLDER`` (old spelling ``--out``), stored as ``args.output``: a new or empty folder."""
    parser.add_argument("--output", "--out", dest="output", required=True, type=Path, metavar="FOLDER",
                        help="output folder (must not exist or be empty; --out is the old spelling)")


def add_trust_remote_code(parser: argparse._ActionsContainer) -> None:
    """``--trust-remote-code``: the person at the keyboard allows models to run the Python code they ship."""
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let models run the Python code they ship where the spec or recipe asks for it "
                             "(trust_remote_code: true); a file alone never grants it")


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
    (``--dataset``/``--corpus`` with ``--data-dir``; none when None), ``--model-dir`` and ``--output``."""
    add_model(parser, model, old_model_spelling)
    if texts is not None:
        add_text_source(parser, texts)
        add_data_dir(parser)
    add_model_dir(parser)
    add_output_folder(parser)


def os_error_message(error: OSError) -> str:
    """One line for an OS-level failure: the path, what happened and what to do."""
    where = f"{error.filename}: " if error.filename else ""
    fix = _OS_FIXES.get(error.errno or 0, "check the path and rerun")
    return f"{where}{error.strerror or error}; {fix}"


def _error(message: str) -> None:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)


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
