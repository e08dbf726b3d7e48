"""YAML read with line numbers, and the value checks specs and recipes share (file:line errors)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.scalarbool import ScalarBoolean

from vtrepro.core.errors import VtreproError


def round_trip_yaml() -> YAML:
    """A ruamel YAML that keeps comments, quotes and order (for reading with line numbers and rewriting)."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def read_yaml(path: Path) -> Any:
    """Round-trip YAML (comments and line numbers kept); a syntax error names the file and line."""
    try:
        return round_trip_yaml().load(path.read_text(encoding="utf-8"))
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise VtreproError(f"{path}{line}: malformed YAML ({error.problem or error.context}); fix the syntax") from None
    except YAMLError as error:
        raise VtreproError(f"{path}: malformed YAML ({error}); fix the syntax") from None


BOOLEAN_FIX = "use true or false (unquoted; yes, no, on and off are strings in YAML 1.2)"


def is_boolean(value: Any) -> bool:
    """Whether a YAML value is a real boolean: ``true``/``false``, not ``yes``, ``no``, ``"true"`` or 1."""
    return isinstance(value, (bool, ScalarBoolean))


def bounds_text(minimum: float | None = None, maximum: float | None = None,
                above: float | None = None, below: float | None = None) -> str:
    """Bounds in words: ``>= 1``, ``> 0``, ``in [0, 1]``, ``in (0, 1)``; '' when unbounded."""
    low = f"{minimum:g}" if minimum is not None else f"{above:g}" if above is not None else None
    high = f"{maximum:g}" if maximum is not None else f"{below:g}" if below is not None else None
    if low is not None and high is not None:
        return f"in {'[' if minimum is not None else '('}{low}, {high}{']' if maximum is not None else ')'}"
    if low is not None:
        return f"{'>=' if minimum is not None else '>'} {low}"
    if high is not None:
        return f"{'<=' if maximum is not None else '<'} {high}"
    return ""


def within(value: float, minimum: float | None = None, maximum: float | None = None,
           above: float | None = None, below: float | None = None) -> bool:
    """Whether a finite ``value`` lies within the bounds (``minimum``/``maximum`` inclusive, ``above``/``below`` not)."""
    return (math.isfinite(value) and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
            and (above is None or value > above) and (below is None or value < below))
