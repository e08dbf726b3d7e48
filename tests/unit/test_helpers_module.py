"""docs/testing.md's rule (issue 43): fixtures live in ``tests/conftest.py``, and what tests import lives in
``tests/helpers.py``: no test imports ``conftest`` (pytest loads it for its fixtures)."""
from __future__ import annotations

import ast
import os

from helpers import REPO_ROOT, repeated_encodings
from vtrepro.encode.folder import TIMINGS_NAME

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


def test_the_end_of_session_check_skips_hostile_manifests(tmp_path):
    """The session summary reads every manifest.json the session left: the catalogue leaves FIFOs and links to
    /dev/zero under that name. Before: CI's process was killed for memory reading /dev/zero after its last test."""
    for name, plant in (("fifo", os.mkfifo), ("zero", lambda path: path.symlink_to("/dev/zero"))):
        (tmp_path / name).mkdir()
        plant(tmp_path / name / "manifest.json")
        (tmp_path / name / TIMINGS_NAME).write_text("{}")
    assert repeated_encodings(tmp_path, 0) == []
