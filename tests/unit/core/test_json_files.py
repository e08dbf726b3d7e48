"""One JSON reader (issue 44): every JSON file or text vtrepro reads goes through ``core.io`` (checked from the
source with ``ast``: no ``json.loads`` or ``json.load`` anywhere else in the package or the scripts), each kind
of file has one size cap, declared in ``core.io.JSON_FILE_BYTES`` alone, and the reader refuses what is not a
regular file before opening it and fields of the wrong type."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from helpers import REPO_ROOT
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import (
    JSON_FILE_BYTES,
    check_fields,
    check_folder_files,
    open_regular_file,
    read_json_file,
)

READER = REPO_ROOT / "vtrepro" / "core" / "io.py"
SOURCES = sorted([*(REPO_ROOT / "vtrepro").rglob("*.py"), *(REPO_ROOT / "scripts").rglob("*.py")])


def _json_reads(tree: ast.AST) -> list[int]:
    """Lines that parse JSON with the standard library: ``json.loads(...)``, ``json.load(...)``, or either
    imported by name (``from json import loads``)."""
    def parses(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in ("loads", "load") and isinstance(node.value, ast.Name) and node.value.id == "json"
        return isinstance(node, ast.ImportFrom) and node.module == "json" and \
            any(alias.name in ("loads", "load") for alias in node.names)

    lines = [node.lineno for node in ast.walk(tree) if parses(node)]
    return sorted(lines)


def test_json_is_parsed_only_in_core_io():
    found = {f"{path.relative_to(REPO_ROOT)}:{line}" for path in SOURCES if path != READER
             for line in _json_reads(ast.parse(path.read_text(encoding="utf-8")))}
    assert not found, f"JSON parsed outside core/io.py (use read_json_file or parse_json): {sorted(found)}"
    assert _json_reads(ast.parse("import json\njson.loads('1')\nfrom json import load\n")) == [2, 3]


def test_each_json_size_cap_is_declared_once_in_core_io():
    """No module but core/io declares a JSON size (``MAX_*JSON*``), and every ``read_json_file`` call passes
    its kind's cap (``JSON_FILE_BYTES[...]``) or none (the model cap)."""
    declared, uncapped = [], []
    for path in SOURCES:
        if path == READER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign):
                declared += [f"{path.name}:{target.id}" for target in node.targets
                             if isinstance(target, ast.Name) and "JSON" in target.id and target.id.startswith("MAX_")]
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "read_json_file":
                given = [*node.args[2:3], *(keyword.value for keyword in node.keywords if keyword.arg == "max_bytes")]
                if given and not (isinstance(given[0], ast.Subscript) and getattr(given[0].value, "id", "") ==
                                  "JSON_FILE_BYTES"):
                    uncapped.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not declared and not uncapped, (declared, uncapped)
    assert all(0 < cap <= 2**30 for cap in JSON_FILE_BYTES.values())


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "outside", "folder"])
def test_the_reader_refuses_what_is_not_a_regular_file_inside_the_folder_before_opening(kind, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    path = folder / "file.json"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would block: the test would hang, not fail
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "outside":
        (tmp_path / "elsewhere.json").write_text("{}")
        path.symlink_to(tmp_path / "elsewhere.json")
    else:
        path.mkdir()
    with pytest.raises(VtreproError, match=rf"^{path}: .*[:;] the fix$"):
        read_json_file(path, "the fix", JSON_FILE_BYTES["stamp"], folder)
    if kind != "folder":  # a real subfolder is walked
        with pytest.raises(VtreproError, match=rf"^{path}: .*[:;] the fix$"):
            check_folder_files(folder, "the fix")


def test_a_fifo_is_opened_without_blocking_and_refused(tmp_path):
    """The second check, on the open descriptor: a FIFO swapped in after the ``stat`` opens at once and is refused."""
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(VtreproError, match="no longer a regular file"):
        open_regular_file(tmp_path / "fifo", "fix")


def test_fields_are_typed_and_a_bool_is_no_integer(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"count": 3, "name": "x", "flag": true}')
    assert read_json_file(path, "fix", fields={"count": int, "name": str, "maybe": (str, type(None))})["count"] == 3
    for fields, message in (({"count": str}, "field 'count' is a JSON integer, expected string"),
                            ({"flag": int}, "field 'flag' is a JSON boolean, expected integer"),
                            ({"gone": list}, "field 'gone' is missing, expected array")):
        with pytest.raises(VtreproError, match=rf"^{path}: {message}; fix$"):
            read_json_file(path, "fix", fields=fields)
    with pytest.raises(VtreproError, match="holds a JSON array, not an object"):
        check_fields([], "where", "fix", {})


def test_a_folder_of_regular_files_is_listed(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a").write_text("a")
    (tmp_path / "sub" / "b").write_text("b")
    (tmp_path / "link").symlink_to("a")  # a link inside the folder is fine
    assert check_folder_files(tmp_path, "fix") == [tmp_path / "a", tmp_path / "link", tmp_path / "sub" / "b"]
    Path(tmp_path / "sub" / "loop").symlink_to("..")  # a linked folder is refused, never walked
    with pytest.raises(VtreproError, match="loop: leads to .*, outside the folder"):
        check_folder_files(tmp_path, "fix")
