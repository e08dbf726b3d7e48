"""torchrun as :mod:`vtrepro.core.launch` starts it: ``python -m vtrepro.core.torchrun N <command> [ARGS ...]``
runs ``torchrun --standalone --nproc-per-node N -m vtrepro <command> ARGS``: N local processes of one job
(rendezvous on a free local port), each with torchrun's ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``, and
``OMP_NUM_THREADS=1`` unless it is set.

It differs from the ``torchrun`` command in reading and reporting only:

- torchrun's parser never sees the command's arguments: it would take one that begins one of its own
  options as that option (``evaluate --run`` is ambiguous with ``--run-path``, and stops the job);
- a failed process ends the job with that process's exit status (2 for bad input) after its own
  ``error:`` line, without torchrun's traceback and failure report, and a job stopped by a signal
  (Ctrl-C, SIGTERM) with 128 + its number, the processes having written theirs; torchrun's own log lines
  (the ``OMP_NUM_THREADS`` notice, the processes it stops) are shown only with the command's ``--verbose``.
"""
from __future__ import annotations

import logging
import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``argv[1:]`` (a command and its arguments) in ``argv[0]`` processes; the first failure's exit
    status (1 for a process ended by a signal), 128 + the signal that stopped the job, or 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    if "--verbose" not in argv:
        for name, logger in logging.root.manager.loggerDict.items():
            if name.startswith("torch.distributed") and isinstance(logger, logging.Logger):
                logger.setLevel(logging.CRITICAL)
    options = get_args_parser().parse_args(["--standalone", f"--nproc-per-node={argv[0]}", "-m", "vtrepro"])
    options.training_script_args = argv[1:]
    try:
        run(options)
    except ChildFailedError as error:
        status = error.get_first_failure()[1].exitcode
        return status if status > 0 else 1
    except SignalException as error:
        return 128 + int(error.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
