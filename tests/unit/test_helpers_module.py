"""docs/testing.md's rule (issue 43): fixtures live in ``tests/conftest.py``, and what tests import lives in
``tests/helpers.py``: no test imports ``conftest`` (pytest loads it for its fixtures)."""
from __future__ import annotations

import ast

from helpers import REPO_ROOT

TESTS = REPO_ROOT / "tests"


def test_no_test_imports_conftest():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if "conftest" in names:
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not found, f"import these from helpers (tests/helpers.py), not conftest: {found}"
