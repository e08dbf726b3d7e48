"""The old command modules, ``python -m vtrepro.<command>`` (``python -m vtrepro.train``, ``python -m vtrepro.encode``,
...): no module file each, but one import hook that keeps these old spellings of the commands working.

``import vtrepro`` appends :data:`FINDER` to ``sys.meta_path``, so Python asks it only after its own finders
found no module, and it answers only for the names of :data:`OLD_SPELLINGS`: ``vtrepro.<command>``, or
``vtrepro.<command>.__main__`` where ``vtrepro/<command>/`` is a real package. A real module is never found
here. ``python -m`` (runpy) asks the loader for the module's code: one line that runs :func:`run_old_spelling`,
which logs one deprecation line naming the new spelling and runs the command. Importing an old spelling
(``import vtrepro.train``) is an ImportError: there is no such module.
"""
from __future__ import annotations

import os
import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import CodeType, ModuleType
from typing import Sequence

OLD_SPELLINGS = ("transfer", "mlm", "calibrate", "train", "encode", "fingerprint", "index", "search", "evaluate",
                 "regress", "export", "report", "bench")
"""The commands of earlier releases, once run as ``python -m vtrepro.<command>`` (pyserini and anserini came
after the docs spelled every command ``python -m vtrepro <command>``: they have no old spelling)."""

_ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py")
"""What an old spelling runs: ``vtrepro/__main__.py`` (its module's ``__file__``, and ``sys.argv[0]``)."""


def command_of(name: str) -> str | None:
    """The command a module name spells the old way (``vtrepro.train``, ``vtrepro.encode.__main__``), else None."""
    parts = name.split(".")
    if parts[-1] == "__main__":
        parts.pop()
    return parts[1] if len(parts) == 2 and parts[0] == "vtrepro" and parts[1] in OLD_SPELLINGS else None


class OldSpellingFinder(MetaPathFinder, Loader):
    """A ``sys.meta_path`` finder, and the loader of what it finds: the old spellings and nothing else."""

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        return None if command_of(name) is None else ModuleSpec(name, self, origin=_ENTRY)

    def exec_module(self, module: ModuleType) -> None:
        raise ImportError(f"{module.__name__} is no module: 'python -m {module.__name__.removesuffix('.__main__')}' "
                          f"is the old spelling of 'python -m vtrepro {command_of(module.__name__)}'",
                          name=module.__name__)

    def get_code(self, name: str) -> CodeType:
        """The code ``python -m <name>`` runs (runpy asks for it and runs it as ``__main__``)."""
        spelled = (name.removesuffix(".__main__"), command_of(name))
        return compile(f"import sys\nfrom vtrepro.old_command_modules import run_old_spelling\n"
                       f"sys.exit(run_old_spelling(*{spelled!r}, sys.argv[1:]))\n", _ENTRY, "exec")


FINDER = OldSpellingFinder()


def install() -> None:
    """Append :data:`FINDER` to ``sys.meta_path`` (once: a reloaded package adds no second one)."""
    if not any(isinstance(finder, OldSpellingFinder) for finder in sys.meta_path):
        sys.meta_path.append(FINDER)


def run_old_spelling(old: str, command: str, argv: list[str]) -> int:
    """``python -m <old> <argv>``: one deprecation line naming the new spelling, then the command; its exit status."""
    import logging  # here, not above: `import vtrepro` installs this hook and stays light

    from vtrepro.__main__ import main

    logging.getLogger(__name__).warning("'python -m %s' is deprecated; write 'python -m vtrepro %s'", old, command)
    return main([command, *argv])
