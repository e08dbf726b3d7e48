"""Atomic writes, the output checks every command runs first, and the line-checked readers."""
from __future__ import annotations

import gzip
import hashlib
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import (
    atomic_write,
    check_output,
    check_replaceable,
    check_within,
    check_writable,
    process_alive,
    read_jsonl,
    read_lines,
    sha256_file,
    unsafe_character,
    write_json,
    write_jsonl,
)

ROOT = os.geteuid() == 0
"""Root writes through permission bits, so tests that need a folder closed to writing skip for root."""


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(VtreproError) as caught:
        call(*args, **kwargs)
    return str(caught.value)


def leftovers(folder: Path) -> list[str]:
    """Temporary files an atomic write left beside its target."""
    return sorted(path.name for path in folder.iterdir() if path.name.endswith(".tmp"))


# ---------------------------------------------------------------------------- atomic_write


def test_atomic_write_writes_a_temporary_file_beside_the_target_then_renames_it(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_write(target) as handle:
        handle.write("café\n")
        (temporary,) = leftovers(tmp_path)
        assert temporary.startswith(".out.txt.") and not target.exists()
    assert target.read_text(encoding="utf-8") == "café\n" and leftovers(tmp_path) == []


def test_atomic_write_creates_the_folders_and_honours_the_umask(tmp_path):
    target = tmp_path / "a" / "b" / "out.bin"
    with atomic_write(target, "wb") as handle:
        handle.write(b"\x00\xff")
    assert target.read_bytes() == b"\x00\xff"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="disk on fire"), atomic_write(target) as handle:
        handle.write("half of the new")
        raise RuntimeError("disk on fire")
    assert target.read_text() == "old" and leftovers(tmp_path) == []


def test_an_interrupted_write_leaves_no_target(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic_write(tmp_path / "new.txt") as handle:
        handle.write("x")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_replaces_a_link_not_its_target(tmp_path):
    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("kept")
    link.symlink_to(real)
    with atomic_write(link) as handle:
        handle.write("new")
    assert real.read_text() == "kept" and not link.is_symlink() and link.read_text() == "new"


def test_atomic_write_refuses_a_fifo_a_device_and_a_folder(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, what in ((fifo, "is a FIFO"), (Path(os.devnull), "is a character device"), (tmp_path, "is a folder")):
        with pytest.raises(VtreproError, match=what), atomic_write(target):
            pytest.fail("opened for writing")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and sorted(path.name for path in tmp_path.iterdir()) == ["pipe"]


def test_write_json_is_indented_utf8_with_a_final_newline(tmp_path):
    write_json(tmp_path / "a.json", {"b": [1], "é": "ü"})
    assert (tmp_path / "a.json").read_text(encoding="utf-8") == '{\n  "b": [\n    1\n  ],\n  "é": "ü"\n}\n'


def test_write_jsonl_counts_and_keeps_utf8(tmp_path):
    assert write_jsonl(tmp_path / "a.jsonl", ({"id": str(n), "t": "ß"} for n in range(3))) == 3
    assert (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines() == [
        '{"id": "0", "t": "ß"}', '{"id": "1", "t": "ß"}', '{"id": "2", "t": "ß"}']
    assert write_jsonl(tmp_path / "empty.jsonl", []) == 0 and (tmp_path / "empty.jsonl").read_bytes() == b""


# ---------------------------------------------------------------------------- readers


def test_read_lines_numbers_plain_and_gzipped_lines(tmp_path):
    (tmp_path / "a.tsv").write_bytes(b"x\ty\n\xc3\xa9\n")
    with gzip.open(tmp_path / "a.tsv.gz", "wb") as handle:
        handle.write(b"x\ty\n\xc3\xa9\n")
    for name in ("a.tsv", "a.tsv.gz"):
        assert list(read_lines(tmp_path / name)) == [(1, "x\ty\n"), (2, "é\n")]


def test_read_lines_names_a_missing_file(tmp_path):
    assert error_of(lambda: list(read_lines(tmp_path / "gone.tsv"))) == f"{tmp_path / 'gone.tsv'}: file not found"


def test_read_lines_names_the_line_and_column_of_bad_utf8(tmp_path):
    (tmp_path / "a.tsv").write_bytes(b"ok\nab\xffc\n")
    assert error_of(lambda: list(read_lines(tmp_path / "a.tsv"))) == (
        f"{tmp_path / 'a.tsv'}:2: not valid UTF-8 (byte 0xff at column 3); re-save the file as UTF-8")


def test_read_lines_names_corrupt_and_truncated_gzip(tmp_path):
    (tmp_path / "corrupt.gz").write_bytes(b"not gzip at all\n")
    data = gzip.compress(b"".join(b"line %d\n" % n for n in range(1000)))
    (tmp_path / "cut.gz").write_bytes(data[:len(data) // 2])
    for name in ("corrupt.gz", "cut.gz"):
        message = error_of(list, read_lines(tmp_path / name))
        assert message.startswith(f"{tmp_path / name}:") and "corrupt or truncated gzip data" in message


def test_read_jsonl_skips_blank_lines_and_keeps_line_numbers(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "a"}\n\n  \n{"id": "b"}\n')
    assert list(read_jsonl(tmp_path / "a.jsonl")) == [(1, {"id": "a"}), (4, {"id": "b"})]


@pytest.mark.parametrize(("line", "message"), [
    ('{"id": ', "not valid JSON (Expecting value, column 9); fix or remove that line"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('"text"', "expected a JSON object, got str"),
])
def test_read_jsonl_names_the_bad_line(tmp_path, line, message):
    (tmp_path / "a.jsonl").write_text('{"id": "a"}\n' + line + "\n")
    assert error_of(lambda: list(read_jsonl(tmp_path / "a.jsonl"))) == f"{tmp_path / 'a.jsonl'}:2: {message}"


@pytest.mark.parametrize(("text", "found"), [
    ("plain-id_1", None),
    ("café", None),
    ("a\u200db", None),  # a format character: the encoder escapes it, outside input may hold it
    ("new york", " "),
    ("tab\there", "\t"),
    ("nul\x00", "\x00"),
    ("nbsp\u00a0", "\u00a0"),
    ("next\x85line", "\x85"),
    ("half\ud800", "\ud800"),
])
def test_unsafe_character(text, found):
    assert unsafe_character(text) == found


def test_sha256_file_is_the_digest_of_the_bytes(tmp_path):
    data = os.urandom(3 << 20)  # more than one read block
    (tmp_path / "blob").write_bytes(data)
    assert sha256_file(tmp_path / "blob") == hashlib.sha256(data).hexdigest()


def test_process_alive():
    assert process_alive(os.getpid())
    child = subprocess.Popen(["true"])
    child.wait()
    assert not process_alive(child.pid)


# ---------------------------------------------------------------------------- check_output


def test_check_output_accepts_a_new_path_and_creates_nothing(tmp_path):
    target = tmp_path / "new" / "deeper" / "out.json"
    assert check_output(target) == target and check_output(str(target)) == target
    assert check_output(tmp_path / "folder", kind="folder") == tmp_path / "folder"
    assert list(tmp_path.iterdir()) == []


def test_check_output_accepts_an_existing_regular_file_and_folder(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    check_output(tmp_path / "old.json")
    check_output(tmp_path, kind="folder")


def test_check_output_refuses_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock"))
        assert error_of(check_output, tmp_path / "sock").endswith("is a socket, not a regular file; vtrepro writes "
                                                                  "only regular files: choose another output path")
    assert error_of(check_output, tmp_path / "pipe") == (
        f"{tmp_path / 'pipe'}: is a FIFO, not a regular file; vtrepro writes only regular files: choose another output path")
    assert error_of(check_output, os.devnull).startswith(f"{os.devnull}: is a character device, not a regular file")
    assert error_of(check_output, tmp_path) == f"{tmp_path}: is a folder; give a file path for the output"


def test_check_output_names_the_target_of_a_link(tmp_path):
    (tmp_path / "to-folder").symlink_to(tmp_path)
    (tmp_path / "to-null").symlink_to(os.devnull)
    assert error_of(check_output, tmp_path / "to-folder") == (
        f"{tmp_path / 'to-folder'}: is a folder (a link to {tmp_path}); give a file path for the output")
    assert f"is a character device (a link to {os.devnull})" in error_of(check_output, tmp_path / "to-null")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    check_output(tmp_path / "dangling")  # a write replaces the link itself


def test_a_folder_output_must_be_a_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    assert error_of(check_output, tmp_path / "file", kind="folder") == (
        f"{tmp_path / 'file'}: is a file, not a folder; choose another output path")
    assert error_of(check_output, tmp_path / "pipe", kind="folder") == (
        f"{tmp_path / 'pipe'}: is a FIFO, not a folder; choose another output path")


def test_check_output_refuses_a_place_under_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    assert error_of(check_output, tmp_path / "file" / "a" / "out.json") == (
        f"{tmp_path / 'file'}: is a file, not a folder; choose another output path")


def test_check_output_refuses_to_overwrite_an_input(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("{}\n")
    os.link(source, tmp_path / "hard.jsonl")
    (tmp_path / "soft.jsonl").symlink_to(source)
    expected = "is the input file {}; writing there would overwrite it: choose another output path"
    assert error_of(check_output, source, [source]) == f"{source}: " + expected.format(source)
    assert error_of(check_output, tmp_path / "hard.jsonl", [source]).endswith(expected.format(source))
    assert error_of(check_output, tmp_path / "soft.jsonl", [source]).endswith(expected.format(source))
    assert error_of(check_output, source, [tmp_path / "soft.jsonl"]).endswith(expected.format(tmp_path / "soft.jsonl"))


def test_check_output_refuses_a_place_inside_an_input_folder_or_holding_an_input(tmp_path):
    data = tmp_path / "data"
    (data / "beir").mkdir(parents=True)
    assert error_of(check_output, data / "beir" / "out.json", [data]) == (
        f"{data / 'beir' / 'out.json'}: lies inside the input folder {data}; vtrepro never writes inside an input: "
        "choose another output path")
    assert "is the input folder" in error_of(check_output, data, [data], kind="folder")
    assert error_of(check_output, tmp_path, [data / "beir"], kind="folder") == (
        f"{tmp_path}: holds the input folder {data / 'beir'}, which writing there could replace; "
        "choose another output path")
    check_output(tmp_path / "out.json", [data])  # a file beside an input folder is fine


def test_check_output_skips_inputs_that_are_not_here(tmp_path):
    check_output(tmp_path / "out", [None, "naver/splade-v3", tmp_path / "gone"], kind="folder")


@pytest.mark.skipif(ROOT, reason="root writes into a folder whose mode forbids it")
def test_check_output_refuses_a_folder_it_cannot_write(tmp_path):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o555)
    try:
        assert error_of(check_output, closed / "a" / "out.json") == (
            f"{closed}: cannot write here (Permission denied); choose another output path")
        assert "cannot write here" in error_of(check_writable, closed)
    finally:
        closed.chmod(0o755)


def test_check_writable_tries_for_real_and_leaves_nothing(tmp_path):
    check_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert error_of(check_writable, tmp_path / "missing").startswith(f"{tmp_path / 'missing'}: cannot write here (")


# ---------------------------------------------------------------------------- check_within, check_replaceable


def test_check_within_keeps_paths_strictly_under_the_root(tmp_path):
    root = tmp_path / "runs"
    (root / "spec").mkdir(parents=True)
    assert check_within(root / "spec" / "a", root) == root / "spec" / "a"
    assert check_within(root / "not-yet", str(root)) == root / "not-yet"
    for escape in (root, root / "spec" / ".." / "..", root / ".." / "other"):
        message = error_of(check_within, escape, root)
        assert message.startswith(f"{escape}: resolves to ") and f"outside the output folder {root};" in message


def test_check_within_follows_links_out_of_the_root(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    (root / "leak").symlink_to(tmp_path)
    assert error_of(check_within, root / "leak" / "x", root) == (
        f"{root / 'leak' / 'x'}: resolves to {tmp_path / 'x'}, outside the output folder {root}; rename what names "
        "it, or remove the link that leads there")


def test_check_replaceable_accepts_a_writable_file(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("a: 1\n")
    assert check_replaceable(spec) == spec and spec.read_text() == "a: 1\n"


def test_check_replaceable_refuses_a_read_only_mode_even_for_root(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("a: 1\n")
    spec.chmod(0o444)
    assert error_of(check_replaceable, spec) == (
        f"{spec}: is marked read-only (mode 444); make it writable (chmod u+w) or work on a copy")


def test_check_replaceable_refuses_what_it_cannot_open_or_replace(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    assert "is a FIFO, not a regular file" in error_of(check_replaceable, tmp_path / "pipe")  # never opened: it would block
    assert error_of(check_replaceable, tmp_path) == f"{tmp_path}: is a folder; give a file path for the output"
    assert error_of(check_replaceable, tmp_path / "gone.yaml") == (
        f"{tmp_path / 'gone.yaml'}: cannot be rewritten (No such file or directory); make it writable or work on a copy")
