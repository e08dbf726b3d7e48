"""Where the specs, recipes and published tables that ship with vtrepro live, and finding one by name.

They are package data (``vtrepro/regressions/``; the repository's ``regressions/`` links there), so a
regular ``pip install`` finds them by name from any folder. A user's own files are named by path.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from vtrepro.core.errors import VtreproError

SHIPPED_DIR = Path(str(files("vtrepro") / "regressions"))
"""The shipped regression specs (``<name>.yaml``)."""
RECIPES_DIR = SHIPPED_DIR / "recipes"
"""The shipped training recipes."""
PUBLISHED_DIR = SHIPPED_DIR / "published"
"""The shipped published tables (papers, model cards, Anserini and Pyserini regressions)."""


def shipped_names(folder: Path) -> list[str]:
    """The names (file stems) of the YAML files shipped in ``folder``, sorted."""
    return sorted(path.stem for path in folder.glob("*.yaml"))


def find_shipped(name: str, folder: Path, kind: str, checkout: bool = True) -> Path:
    """A YAML file named by path, or by name (with or without ``.yaml``) in ``folder`` (one of the shipped
    folders above). With ``checkout``, the same folder under ``./regressions/`` comes before the package's
    (a checkout's files, as edited, when vtrepro is installed from elsewhere). Not found: a
    :class:`VtreproError` listing the shipped names."""
    folders = [Path.cwd() / "regressions" / folder.relative_to(SHIPPED_DIR)] if checkout else []
    candidates = [Path(name)]
    for where in [*folders, folder]:
        candidates += [where / name, where / f"{name}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise VtreproError(f"{kind} '{name}' not found: give a YAML file path or a shipped name "
                       f"({', '.join(shipped_names(folder)) or 'none'}; in {folder})")
