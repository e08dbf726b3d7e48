"""Index builds split over spawned processes (vtrepro.index.parts): parts (files, and ranges of one file at line
boundaries), results, failures, progress, memory."""
import gzip
import json
import os
import random
import shutil
import stat

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.encode.reader import read_vectors
from vtrepro.index.lucene import _add_indexes, _part_memory_buffer_mb
from vtrepro.index.lucene_checks import check_index_folder, index_stats
from vtrepro.index.parts import in_processes, piece_inputs, read_piece_vectors, split_files, split_pieces, whole_pieces


def test_the_files_split_into_contiguous_parts_of_about_equal_bytes(tmp_path):
    sizes = [10, 10, 40, 10, 10, 10, 10]
    files = []
    for number, size in enumerate(sizes):
        (tmp_path / f"part-{number}").write_bytes(b"x" * size)
        files.append(tmp_path / f"part-{number}")
    parts = split_files(files, 2)
    assert [path for part in parts for path in part] == files  # every file once, in order
    assert [sum(path.stat().st_size for path in part) for part in parts] == [60, 40]
    assert len(split_files(files, 20)) == len(files)  # never more parts than files, none empty
    assert split_files(files, 1) == [files]


def test_results_come_back_in_the_order_of_the_calls_and_progress_is_polled():
    polled = []
    calls = [(f"/a/b/{name}",) for name in ("one", "two", "three")]
    assert in_processes(os.path.basename, calls, poll=lambda: polled.append(1)) == ["one", "two", "three"]
    assert polled


def test_a_part_that_fails_fails_the_whole_with_its_own_one_line_error(tmp_path):
    """A part's bad input reaches the caller as the VtreproError the part raised (exit 2, its one line)."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(VtreproError, match="is an empty folder, not a Lucene index"):
        in_processes(check_index_folder, [(tmp_path / "empty",), (tmp_path / "empty",)])


def test_the_parts_buffers_together_stay_within_a_quarter_of_the_memory():
    physical_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    for parts in (2, 4, 16, 64):
        buffer_mb = _part_memory_buffer_mb(parts)
        assert 256 <= buffer_mb <= 4096
        assert buffer_mb * parts <= max(physical_mb // 4, 256 * parts)


def test_a_small_collection_takes_fewer_parts_than_threads(tmp_path):
    files = []
    for number in range(4):
        (tmp_path / f"part-{number}").write_bytes(b"x" * 100)
        files.append(tmp_path / f"part-{number}")
    assert split_files(files, 4, min_part_bytes=1000) == [files]  # 400 bytes: one process
    assert len(split_files(files, 4, min_part_bytes=200)) == 2
    assert len(split_files(files, 4)) == 4


def test_joining_many_parts_keeps_every_segment_and_merges_none(impact_index, tmp_path):
    """Twelve parts (Lucene's default merge policy would merge ten or more segments after addIndexes) give one
    index of twelve segments holding every part's documents, and its statistics count the terms of them all."""
    index, stats = impact_index
    parts = [shutil.copytree(index, tmp_path / f"part-{number}") for number in range(12)]
    _add_indexes(parts, tmp_path / "joined")
    assert len(list((tmp_path / "joined").glob("*.si"))) == 12
    joined = index_stats(tmp_path / "joined")
    assert joined["documents"] == 12 * stats["documents"]
    assert joined["unique_terms"] == stats["unique_terms"] > 0  # counted over the segments (Anserini says -1)


def _records(count, prefix, seed):
    rng = random.Random(seed)
    return "".join(json.dumps({"id": f"{prefix}{number}", "contents": "",
                               "vector": {"a": rng.randint(1, 9), "b" * rng.randint(1, 60): 1}}) + "\n"
                   for number in range(count))


def test_one_large_file_is_divided_at_line_boundaries_and_read_by_offset(tmp_path):
    """Every record once, in collection order, whatever the parts; a gzipped file is never divided (it cannot be
    read from an offset); every range starts and ends at a line start."""
    (tmp_path / "a.jsonl").write_text(_records(100, "a", 1))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(_records(50, "b", 2).encode()))
    (tmp_path / "c.jsonl").write_text(_records(300, "c", 3))
    (tmp_path / "d.jsonl").write_text("")
    files = sorted(tmp_path.iterdir())
    expected = [doc_id for _, _, doc_id, _ in read_vectors(files)]
    for parts in (1, 2, 3, 8, 1000):
        runs = split_pieces(files, parts)
        assert [doc_id for run in runs for _, _, doc_id, _ in read_piece_vectors(run)] == expected, parts
        pieces = [piece for run in runs for piece in run]
        assert all(piece.whole for piece in pieces if piece.path.name.endswith(".gz"))
        for piece in pieces:
            data = piece.path.read_bytes() if not piece.whole else b""
            assert piece.whole or ((piece.start == 0 or data[piece.start - 1:piece.start] == b"\n")
                                   and data[piece.stop - 1:piece.stop] == b"\n")
    assert len(split_pieces(files, 2)) == 2 and not split_pieces(files, 2)[1][0].whole  # c.jsonl divided
    assert len(split_pieces(files, 1000)) > len(files)  # more parts than files
    assert split_pieces(files, 4, min_part_bytes=10**9) == [whole_pieces(files)]


def test_a_bad_record_in_a_range_is_named_by_its_line_in_the_file(tmp_path):
    lines = _records(40, "a", 4).splitlines(keepends=True)
    lines[30] = '{"id": "bad", "contents": "", "vector": {"x": 1.5}}\n'
    (tmp_path / "a.jsonl").write_text("".join(lines))
    runs = split_pieces([tmp_path / "a.jsonl"], 2)
    assert runs[1][0].start > 0
    with pytest.raises(VtreproError, match=r"a\.jsonl:31: "):
        list(read_piece_vectors(runs[1]))


def test_a_range_reaches_a_folder_reader_through_a_pipe_without_a_copy(tmp_path):
    """What Anserini is given for a range: a named pipe (no bytes on disk) filled with exactly the range."""
    (tmp_path / "a.jsonl").write_text(_records(200, "a", 5))
    _, second = split_pieces([tmp_path / "a.jsonl"], 2)
    with piece_inputs(second, tmp_path / "input") as folder:
        (pipe,) = folder.iterdir()
        assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
        assert pipe.read_bytes() == (tmp_path / "a.jsonl").read_bytes()[second[0].start:second[0].stop]
    with piece_inputs(second, tmp_path / "unread") as folder:  # a reader that never opens the pipe: no hang
        pass


@pytest.mark.slow
def test_one_file_built_by_two_processes_holds_what_one_process_builds(tmp_path):
    """Lucene: one vector file divided at a line boundary into two parts, two JVMs, two segments, the same
    documents and impact total (the runs: tests/integration/test_ties.py)."""
    from vtrepro.index.lucene import build_impact_index

    vectors = tmp_path / "vectors"
    vectors.mkdir()
    (vectors / "part-0.jsonl").write_text(_records(500, "d", 6))
    one = build_impact_index(vectors, tmp_path / "one", threads=1)
    two = build_impact_index(vectors, tmp_path / "two", threads=2, min_part_bytes=1)
    assert one == two and len(list((tmp_path / "two").glob("*.si"))) == 2
    assert not list(tmp_path.glob(".two*"))  # the work folder, its pipes included, is gone


@pytest.mark.slow
def test_the_fingerprint_read_in_parts_is_the_one_process_fingerprint(tmp_path, monkeypatch):
    """The check before a build reads the parts in processes of their own: the record digests merged give the
    one-process fingerprint, and an id in two parts is still found and named."""
    from vtrepro.encode.fingerprint import fingerprint_files
    from vtrepro.index import parts

    monkeypatch.setattr(parts, "FINGERPRINT_PART_BYTES", 1)  # split even these few kilobytes
    (tmp_path / "a.jsonl").write_text(_records(300, "a", 7))
    files = [tmp_path / "a.jsonl"]
    assert parts.fingerprint_in_parts(files, 3) == fingerprint_files(files)
    with open(tmp_path / "a.jsonl", "a") as handle:
        handle.write(json.dumps({"id": "a3", "contents": "", "vector": {"x": 1}}) + "\n")
    with pytest.raises(VtreproError, match=r"a\.jsonl:301: duplicate id 'a3' \(first at .*a\.jsonl:4\)"):
        parts.fingerprint_in_parts(files, 3)
