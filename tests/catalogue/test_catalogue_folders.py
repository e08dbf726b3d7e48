"""Folders someone else could send (issue 44): every JSON file vtrepro reads in a vector folder or an index
folder goes through the one bounded reader (``core.io.read_json_file``), so a FIFO, a link to ``/dev/zero``,
10^6-deep JSON or invalid UTF-8 in any of them is one ``error:`` line naming the file, within seconds and
bounded memory; and ``regress --record`` into a spec reached through a symbolic link keeps the link.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Callable, Iterator

import pytest

from helpers import assert_one_error_line, run_command, write_jsonl, write_mini_beir
from vtrepro.index.command import main as index_main
from vtrepro.index.pisa import META_NAME
from vtrepro.regress.command import main as regress_main
from vtrepro.search.command import main as search_main

SECONDS = 5
"""Each refusal must come within this (issue 44), whatever the file is."""
MEMORY = 500 * 2**20
"""And with at most this much memory traced."""
HANG_GUARD_S = 10
"""A reader blocked on a FIFO is let go after this (its other end is opened), so a regression fails, not hangs."""
DEEP = b"[" * 10**6


@contextlib.contextmanager
def hang_guard(fifo: Path) -> Iterator[None]:
    """Opens ``fifo``'s writing end after :data:`HANG_GUARD_S` when a reader blocks on it (that open
    succeeds only while one waits), so the test ends with a failure instead of hanging."""
    done = threading.Event()

    def release() -> None:
        while not done.wait(HANG_GUARD_S):
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def refused(command: Callable, argv: list, capsys, *fragments: str) -> None:
    """``command`` ends in exit 2 with one line holding ``fragments``, within :data:`SECONDS` and :data:`MEMORY`."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        code, _, err = run_command(command, argv, capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - start
    assert_one_error_line(code, err, *fragments)
    assert elapsed < SECONDS and peak < MEMORY, f"{elapsed:.1f} s, {peak:,} bytes traced"


def vector_folder(root: Path) -> Path:
    write_jsonl(root / "vectors" / "part-00000.jsonl", [{"id": "d1", "contents": "", "vector": {"heart": 3}}])
    return root


def poison(path: Path, kind: str) -> None:
    """Make ``path`` a FIFO, a link to /dev/zero, 10^6-deep JSON or invalid UTF-8."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_bytes(DEEP if kind == "deep" else b'{"format": "\xff\xfe"}')


KINDS = ["fifo", "dev-zero", "deep", "utf-8"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_vector_manifest_from_elsewhere_is_one_line(kind, tmp_path, capsys):
    """Before: a FIFO manifest hung ``index`` (killed at 60 s); 10^6 brackets were exit 3 (RecursionError)."""
    folder = vector_folder(tmp_path / "vectors-in")
    poison(folder / "manifest.json", kind)
    with hang_guard(folder / "manifest.json"):
        refused(index_main, ["--vectors", folder, "--output", tmp_path / "out"], capsys, str(folder / "manifest.json"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_pisa_index_header_from_elsewhere_is_one_line(kind, tmp_path, capsys):
    """Before: 10^6 brackets in ``vtrepro-pisa.json`` were exit 3 (RecursionError); a FIFO and /dev/zero one line."""
    index = tmp_path / "pisa"
    index.mkdir()
    poison(index / META_NAME, kind)
    write_jsonl(tmp_path / "queries.jsonl", [{"id": "q1", "vector": {"heart": 2}}])
    with hang_guard(index / META_NAME):
        refused(search_main, ["--engine", "pisa", "--index", index, "--queries", tmp_path / "queries.jsonl",
                              "--output", tmp_path / "run.trec"], capsys, str(index / META_NAME))
    assert not (tmp_path / "run.trec").exists()


BM25_SPEC = """defaults: {metrics: [ndcg@10]}
conditions:
  bm25:
    retrieval: bm25
    datasets:
      mini:
        scores: {ndcg@10: null}
"""


@pytest.mark.slow  # a real regress run (about 8 s)
def test_record_into_a_linked_spec_writes_its_target_and_keeps_the_link(tmp_path, capsys):
    """Before: ``--record`` replaced the link with a regular file and left the spec it led to as it was."""
    data = write_mini_beir(tmp_path / "data")
    target = tmp_path / "specs" / "bm.yaml"
    target.parent.mkdir()
    target.write_text(BM25_SPEC)
    link = tmp_path / "specs" / "linked.yaml"
    link.symlink_to("bm.yaml")
    code, _, err = run_command(regress_main, ["--spec", link, "--data-dir", data, "--runs", tmp_path / "runs",
                                              "--record"], capsys)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "bm.yaml"
    assert "ndcg@10: null" not in target.read_text() and "ndcg@10:" in target.read_text()


def test_record_into_a_spec_linked_from_another_folder_is_refused_in_one_line(tmp_path, capsys):
    """A link whose spec lies outside the link's own folder: the write could land anywhere the link leads,
    so it is refused before any run, link and spec unchanged."""
    data = write_mini_beir(tmp_path / "data")
    target = tmp_path / "elsewhere" / "bm.yaml"
    target.parent.mkdir()
    target.write_text(BM25_SPEC)
    link = tmp_path / "specs" / "linked.yaml"
    link.parent.mkdir()
    link.symlink_to(target)
    code, _, err = run_command(regress_main, ["--spec", link, "--data-dir", data, "--runs", tmp_path / "runs",
                                              "--record"], capsys)
    assert_one_error_line(code, err, str(link), "symbolic link", "give the file itself")
    assert link.is_symlink() and target.read_text() == BM25_SPEC and not (tmp_path / "runs").exists()
