"""One tar reader (issue 43): ``tarfile`` is opened, and an archive's members extracted, only in
``core/archives.py`` (checked from the source with ``ast``, as ``test_json_files.py`` checks JSON), so vector
bundles and prebuilt indexes share one set of member checks; checksum sidecars are read there too."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO_ROOT

READER = REPO_ROOT / "vtrepro" / "core" / "archives.py"
SOURCES = sorted([*(REPO_ROOT / "vtrepro").rglob("*.py"), *(REPO_ROOT / "scripts").rglob("*.py")])
TRUSTED = {"scripts/arith_envelope.py": "extracts the repository's own `git archive` (which holds the symlink "
                                         "`regressions`) with tarfile's data filter; never an input"}
"""Files allowed to open a tar archive, with why: none of them reads an archive from elsewhere."""
EXTRACTING = {"extractfile", "extractall", "extract"}
OPENING = {"open", "TarFile"}


def _tar_reads(tree: ast.AST) -> list[int]:
    """Lines that open a tar archive (a call of ``tarfile.open``, ``tarfile.TarFile`` or one of its openers, or
    either imported by name) or take a member out of one (``.extractfile``, ``.extractall``, ``.extract``); a
    ``tarfile.TarFile`` annotation opens nothing."""
    def reads(node: ast.AST) -> bool:
        if isinstance(node, ast.ImportFrom):
            return node.module == "tarfile" and any(alias.name in OPENING for alias in node.names)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            called, owner = node.func.attr, ast.unparse(node.func.value)
            return called in EXTRACTING or (owner == "tarfile" and called in OPENING) or owner == "tarfile.TarFile"
        return False

    return sorted(node.lineno for node in ast.walk(tree) if reads(node))


def _found(path: Path) -> list[str]:
    return [f"{path.relative_to(REPO_ROOT)}:{line}" for line in _tar_reads(ast.parse(path.read_text(encoding="utf-8")))]


def test_tar_archives_are_opened_and_extracted_only_in_core_archives():
    found = [hit for path in SOURCES if path != READER and path.relative_to(REPO_ROOT).as_posix() not in TRUSTED
             for hit in _found(path)]
    assert not found, f"a tar archive opened or extracted outside core/archives.py (use extract_tar or new_tar): {found}"
    assert _found(READER), "core/archives.py no longer opens tar archives: this test checks nothing"
    assert all(_found(REPO_ROOT / name) for name in TRUSTED), "an allowed file no longer reads a tar: drop it"


def test_the_check_sees_every_spelling():
    source = ("import tarfile\nfrom tarfile import open\ntarfile.open('x')\ntarfile.TarFile('x')\n"
              "archive.extractfile(m)\narchive.extractall('d')\narchive.extract(m)\ntarfile.TarInfo('x')\n"
              "tarfile.TarFile.gzopen('x')\ndef f(a: tarfile.TarFile) -> None: ...\n")
    assert _tar_reads(ast.parse(source)) == [2, 3, 4, 5, 6, 7, 9]
