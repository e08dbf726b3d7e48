"""Index builds split over spawned processes (vtrepro.index.parts): parts, results, failures, progress, memory."""
import os
import shutil

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.index.lucene import _add_indexes, _part_memory_buffer_mb, check_index_folder, index_stats
from vtrepro.index.parts import in_processes, split_files


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
