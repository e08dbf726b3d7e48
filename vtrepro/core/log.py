"""The ``vtrepro`` logger: where messages go, how much is shown, and whether third-party logs pass.

Every module logs through ``logging.getLogger(__name__)``, a child of the ``vtrepro`` logger, so a
library user silences or redirects the whole package in one place, e.g.
``logging.getLogger("vtrepro").setLevel(logging.WARNING)``. vtrepro adds no handler on import: as a
library it shows its warnings (Python's last-resort handler) and its progress, and its information
lines only once the user configures logging.

A command (:func:`vtrepro.core.cli.cli_entry`) runs inside :func:`command_logging`, which attaches one
stderr handler printing bare messages, so the lines read as plain text: information by default,
warnings only with ``--quiet``, debug lines and third-party logs (Lucene, transformers, Java, PISA)
with ``--verbose``; transformers' and huggingface_hub's progress bars (e.g. "Loading weights") also only
with ``--verbose``. Everything is put back when the command returns.
"""
from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator

PACKAGE = "vtrepro"
"""The name of the package logger, parent of every module's logger."""

_package_logger = logging.getLogger(PACKAGE)


class _CommandHandler(logging.StreamHandler):
    """The stderr handler a command attaches (a class of its own, so a nested command adds no second one)."""


def write_line(line: str) -> None:
    """Write ``line`` and its newline to stderr in one write: processes sharing a stderr (torchrun's ranks run
    unbuffered) would otherwise put one's newline after another's text (seen in CI: two ``error:`` lines as one)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def verbose() -> bool:
    """Whether third-party logs and progress bars should be shown: the ``vtrepro`` logger lets debug
    lines through (``--verbose``, or a library user's ``setLevel(logging.DEBUG)``)."""
    return _package_logger.isEnabledFor(logging.DEBUG)


def progress_shown() -> bool:
    """Whether progress bars and lines are shown: unless the ``vtrepro`` logger's own level was set
    above information (``--quiet``, or a library user's ``setLevel(logging.WARNING)``)."""
    return _package_logger.level <= logging.INFO


def command_level(quiet: bool, verbose: bool) -> int:
    """The package level for a command's global flags; ``--quiet`` wins over ``--verbose``."""
    if quiet:
        return logging.WARNING
    return logging.DEBUG if verbose else logging.INFO


def verbosity_flags() -> list[str]:
    """The global flags that give a child command (a subprocess) this process's verbosity."""
    if verbose():
        return ["--verbose"]
    return [] if progress_shown() else ["--quiet"]


@contextlib.contextmanager
def command_logging(level: int) -> Iterator[None]:
    """Show the package's messages at ``level`` and above on the current ``sys.stderr`` (the one in
    place when the command starts, so a test's capture sees them) while a command runs; the handler,
    level and propagation are put back afterwards, so commands run one after another leave nothing."""
    saved_level, saved_propagate = _package_logger.level, _package_logger.propagate
    handler = None
    if not any(isinstance(existing, _CommandHandler) for existing in _package_logger.handlers):
        handler = _CommandHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        _package_logger.addHandler(handler)
    _package_logger.setLevel(level)
    _package_logger.propagate = False  # shown once, even where the root logger also writes to stderr
    try:
        with contextlib.nullcontext() if verbose() else _hub_progress_bars_hidden():
            yield
    finally:
        if handler is not None:
            _package_logger.removeHandler(handler)
        _package_logger.setLevel(saved_level)
        _package_logger.propagate = saved_propagate


@contextlib.contextmanager
def _hub_progress_bars_hidden() -> Iterator[None]:
    """Hide huggingface_hub's progress bars, and transformers' ("Loading weights", "Writing model shards"),
    for the whole command: transformers takes huggingface_hub's switch when it is imported, or is switched
    here when it already was. Both are put back afterwards. ``HF_HUB_DISABLE_PROGRESS_BARS=0`` keeps them."""
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    if constants.HF_HUB_DISABLE_PROGRESS_BARS is False:  # the user's environment asks for the bars
        yield
        return
    hub_hidden = are_progress_bars_disabled()
    transformers_logging = sys.modules.get("transformers.utils.logging")
    transformers_shown = transformers_logging.is_progress_bar_enabled() if transformers_logging else not hub_hidden
    disable_progress_bars()
    if transformers_logging is not None:
        transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging = sys.modules.get("transformers.utils.logging")
        if transformers_logging is not None and transformers_shown:
            transformers_logging.enable_progress_bar()  # huggingface_hub's too, set just below
        if hub_hidden:
            disable_progress_bars()
        else:
            enable_progress_bars()


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' logs and progress bars and huggingface_hub's bars, unless :func:`verbose`."""
    if verbose():
        yield
        return
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as transformers_logging

    level = transformers_logging.get_verbosity()
    bars_enabled = transformers_logging.is_progress_bar_enabled()
    hub_bars_disabled = hub_utils.are_progress_bars_disabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    hub_utils.disable_progress_bars()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(level)
        if bars_enabled:
            transformers_logging.enable_progress_bar()
        if not hub_bars_disabled:
            hub_utils.enable_progress_bars()
