"""User-facing errors and the command-line wrapper that turns them into one-line messages."""
from __future__ import annotations

import functools
import sys
from typing import Callable

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2


class VtreproError(Exception):
    """Bad input or environment: reported as a single line, exit status 2, no traceback."""


def cli_entry(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a command's ``main(argv)`` so VtreproError prints ``error: ...`` and exits 2."""

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except VtreproError as error:
            message = " ".join(str(error).split())
            print(f"error: {message}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt:
            print("error: interrupted; finished shards are kept and a rerun resumes", file=sys.stderr)
            return 130

    return wrapper
