"""One launcher for every command a command runs: in this process, as a subprocess, or under torchrun.

A :class:`Job` is a command of ``python -m vtrepro`` with its declared options (each an
:class:`~vtrepro.core.options.Options`, written by :meth:`~vtrepro.core.options.Options.to_argv`), its
other arguments (inputs, output) and, for the in-process mode, the call that does the same work here.
:class:`Shared` holds what a launched command shares with its launcher: the data and model folders and
the grant to run model code. :func:`launch` runs a job one of three ways:

- ``in-process``: ``job.run(data_dir=..., model_dir=..., trust_remote_code=...)``; its errors reach the
  caller as they are;
- ``subprocess``: ``python -m vtrepro <command> <arguments> <options> <shared flags>``;
- ``torchrun``: ``torchrun --standalone --nproc-per-node N -m vtrepro <command> ...`` on this Python, through
  :mod:`vtrepro.core.torchrun` (``python -m vtrepro.core.torchrun N <command> ...``), which keeps the
  command's arguments from torchrun's parser and ends a failed job with its process's exit status.

The grant to run model code passes the same way in all three: the in-process call gets
``trust_remote_code`` as an argument, a child gets ``--trust-remote-code``, and nothing else grants it.
A child inherits this process's environment (torchrun sets ``OMP_NUM_THREADS=1`` in its workers unless
it is set) and verbosity (``--verbose``/``--quiet``); it writes its own error line, after which a failed
child is one more line here, naming what failed and what a rerun does, e.g.::

    error: training recipe.yaml failed (its error is above); rerunning resumes from the last checkpoint in runs/train/r
"""
from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, get_args

from vtrepro.core.errors import VtreproError
from vtrepro.core.log import verbosity_flags
from vtrepro.core.options import Options

logger = logging.getLogger(__name__)

Mode = Literal["in-process", "subprocess", "torchrun"]
MODES: tuple[str, ...] = get_args(Mode)
"""The ways :func:`launch` runs a job."""


@dataclass(frozen=True)
class Shared:
    """What a launched command shares with its launcher: where data and models are looked up (None: the
    defaults, ``$VTREPRO_DATA`` and ``$VTREPRO_MODELS``) and whether model code may run."""

    data_dir: str | Path | None = None
    model_dir: str | Path | None = None
    trust_remote_code: bool = False

    def to_argv(self) -> list[str]:
        """The shared flags of a child's command line (None folders and a withheld grant left out), with
        this process's verbosity."""
        argv = ["--data-dir", str(self.data_dir)] if self.data_dir is not None else []
        argv += ["--model-dir", str(self.model_dir)] if self.model_dir is not None else []
        argv += ["--trust-remote-code"] if self.trust_remote_code else []
        return argv + verbosity_flags()


@dataclass(frozen=True)
class Job:
    """A command of ``python -m vtrepro``: its name, its other arguments (``--model M --output DIR``), its
    declared options, and ``run``, the same work as a call in this process (None: the job runs only as a
    child). ``run`` takes the :class:`Shared` settings as the keyword arguments ``data_dir``,
    ``model_dir`` and ``trust_remote_code``."""

    command: str
    arguments: tuple[str, ...] = ()
    options: tuple[Options, ...] = ()
    run: Callable[..., object] | None = field(default=None, compare=False)

    def argv(self, shared: Shared = Shared()) -> list[str]:
        """The command line after ``python -m vtrepro``: the command, its arguments, every option and the
        shared flags; the command's parser reads the options back as these objects
        (:func:`~vtrepro.core.cli.options_from_args`)."""
        return [self.command, *self.arguments, *(arg for options in self.options for arg in options.to_argv()),
                *shared.to_argv()]


def command_line(job: Job, shared: Shared = Shared(), mode: Mode = "subprocess", processes: int = 1) -> list[str]:
    """The child's whole command line: ``python -m vtrepro ...``, or under torchrun with ``processes``
    local processes (:mod:`vtrepro.core.torchrun`)."""
    if mode == "in-process":
        raise ValueError("an in-process job has no command line")
    launcher = ["vtrepro.core.torchrun", str(processes)] if mode == "torchrun" else ["vtrepro"]
    return [sys.executable, "-m", *launcher, *job.argv(shared)]


def launch(job: Job, shared: Shared = Shared(), mode: Mode = "in-process", processes: int = 1,
           failed: str = "", resume: str = "") -> None:
    """Run ``job`` in ``mode`` with ``shared`` (``processes`` local processes under torchrun). A child
    that exits other than 0 has written its error: that is one :class:`VtreproError` here, "``failed``
    failed (its error is above); ``resume``" (``failed`` defaults to the command line)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "in-process":
        if job.run is None:
            raise ValueError(f"the {job.command} job runs only as a child process")
        job.run(data_dir=shared.data_dir, model_dir=shared.model_dir, trust_remote_code=shared.trust_remote_code)
        return
    command = command_line(job, shared, mode, processes)
    logger.info(f"running {' '.join(command)}")
    if subprocess.run(command).returncode != 0:
        what = failed or " ".join(["python -m vtrepro", *job.argv(shared)])
        raise VtreproError(f"{what} failed (its error is above)" + (f"; {resume}" if resume else ""))
