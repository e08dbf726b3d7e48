"""The ``vtrepro`` logger: a library user silences it in one place; the CLI flags set its level for one command."""
from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

import pytest

from vtrepro.core.cli import cli_entry
from vtrepro.core.errors import VtreproError
from vtrepro.core.log import PACKAGE, verbose, verbosity_flags
from vtrepro.core.progress import Progress

module_logger = logging.getLogger(f"{PACKAGE}.tests.example")  # as any vtrepro module's logging.getLogger(__name__)


@pytest.fixture
def package_logger():
    """The ``vtrepro`` logger, its level, handlers and propagation put back after the test."""
    logger = logging.getLogger(PACKAGE)
    saved = logger.level, list(logger.handlers), logger.propagate
    yield logger
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]
    logger.propagate = saved[2]


@cli_entry
def example_command(argv: list[str] | None = None) -> int:
    """A command that logs at every level and reports what it saw as its own verbosity."""
    module_logger.debug("debug line")
    module_logger.info("info line")
    module_logger.warning("warning line")
    module_logger.info(f"verbose={verbose()} flags={verbosity_flags()}")
    if argv and argv[0] == "fail":
        raise VtreproError("bad input")
    return 0


def test_a_library_user_silences_vtrepro_with_one_set_level(package_logger, capsys) -> None:
    collected = io.StringIO()
    package_logger.addHandler(logging.StreamHandler(collected))
    package_logger.setLevel(logging.INFO)
    module_logger.info("shown")
    with Progress(1, "stage", "doc") as progress:
        progress.update()
    package_logger.setLevel(logging.WARNING)
    module_logger.info("hidden")
    module_logger.warning("still a warning")
    with Progress(1, "quiet stage", "doc") as progress:
        progress.update()
    assert collected.getvalue().splitlines() == ["shown", "still a warning"]
    assert [line.split(":")[0] for line in capsys.readouterr().err.splitlines()] == ["stage"]


def test_vtrepro_adds_no_handler_of_its_own(package_logger) -> None:
    assert package_logger.handlers == [] and package_logger.level == logging.NOTSET and not verbose()


@pytest.mark.parametrize(("flags", "expected"), [
    ([], ["info line", "warning line", "verbose=False flags=[]"]),
    (["--quiet"], ["warning line"]),
    (["--verbose"], ["debug line", "info line", "warning line", "verbose=True flags=['--verbose']"]),
    (["--verbose", "--quiet"], ["warning line"]),
])
def test_the_cli_flags_set_the_level_for_one_command(flags, expected, package_logger, capsys) -> None:
    before = package_logger.level, list(package_logger.handlers), package_logger.propagate
    for _ in range(2):  # commands run one after another in one process: no handler piles up
        assert example_command(flags) == 0
        assert capsys.readouterr().err.splitlines() == expected
        assert (package_logger.level, package_logger.handlers, package_logger.propagate) == before
    assert not verbose()


def test_a_failing_command_leaves_no_handler_behind(package_logger, capsys) -> None:
    before = list(package_logger.handlers)
    assert example_command(["fail", "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines() == ["warning line", "error: bad input"]
    assert package_logger.handlers == before and package_logger.level == logging.NOTSET


@cli_entry
def loading_command(argv: list[str] | None = None) -> int:
    """A command that loads a model straight through transformers, as sentence-transformers does in ``bench encode``."""
    from transformers import AutoModelForMaskedLM

    assert argv
    AutoModelForMaskedLM.from_pretrained(argv[0])
    return 0


@pytest.mark.parametrize(("flags", "shown"), [([], False), (["--verbose"], True)])
def test_transformers_progress_bars_show_only_with_verbose(flags, shown, splade_tiny, package_logger, capsys) -> None:
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging as transformers_logging

    transformers_logging.enable_progress_bar()  # as in a fresh process
    try:
        assert loading_command([str(splade_tiny), *flags]) == 0
        assert ("Loading weights" in capsys.readouterr().err) == shown
        assert transformers_logging.is_progress_bar_enabled() and not are_progress_bars_disabled()  # put back
    finally:
        transformers_logging.disable_progress_bar()


def test_processes_sharing_an_unbuffered_stderr_write_whole_lines() -> None:
    """torchrun's ranks share one stderr, unbuffered: each ``error:`` or progress line is one write, so no line
    ends up with another's text after it (CI saw ``...file not founderror: ...`` from two ``print`` writes)."""
    line = "error: /no/such/run.trec: file not found"
    writer = f"from vtrepro.core.log import write_line\nfor _ in range(2000): write_line({line!r})"
    reader, shared = os.pipe()
    children = [subprocess.Popen([sys.executable, "-c", writer], stderr=shared,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"}) for _ in range(3)]
    os.close(shared)
    with os.fdopen(reader) as text:
        lines = text.read().splitlines()
    assert all(child.wait() == 0 for child in children)
    assert lines == [line] * 6000
