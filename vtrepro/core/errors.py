"""The error a user can cause, and the exit statuses of every command."""
from __future__ import annotations

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class VtreproError(Exception):
    """Bad input or environment: reported as a single line, exit status 2, no traceback."""
