"""Where the specs, recipes and published tables that ship with vtrepro live.

They are package data (``vtrepro/regressions/``; the repository's ``regressions/`` links there), so a
regular ``pip install`` finds them by name from any folder. A user's own files are named by path.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

SHIPPED_DIR = Path(str(files("vtrepro") / "regressions"))
"""The shipped regression specs (``<name>.yaml``)."""
RECIPES_DIR = SHIPPED_DIR / "recipes"
"""The shipped training recipes."""
PUBLISHED_DIR = SHIPPED_DIR / "published"
"""The shipped published tables (papers, model cards, Anserini and Pyserini regressions)."""
