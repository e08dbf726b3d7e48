"""One pass over a vector folder: the fingerprint and statistics of separate reads, recorded and reused only while
the files are unchanged, and a record that is not vtrepro's own for these very files ignored."""
import json
import os
import shutil

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.encode import scan as scan_module
from vtrepro.encode.fingerprint import fingerprint_folder
from vtrepro.encode.reader import full_reads, read_vectors, vector_files
from vtrepro.encode.scan import SCAN_FORMAT, scan_folder
from vtrepro.encode.statistics import sparsity

DOCUMENTS = {"d1": {"paris": 30, "france": 20, "york": 5}, "d2": {"paris": 10, "texas": 40},
             "d3": {"france": 15, "paris": 10}, "d4": {"a": 1}}
PINNED = "4863a0d6d13e3d4e81c6d7099b1dc09754f981ea05657dc5114fe569e3b61778"
"""The fingerprint of :data:`DOCUMENTS` by ``fingerprint_folder`` before the pass existed: it may not move."""
AN_HOUR_NS = 3600 * 10**9


def write_folder(folder, documents=DOCUMENTS, age_ns=AN_HOUR_NS):
    """Two shards of ``documents``, their times set ``age_ns`` back (settled: no wait before a pass)."""
    folder.mkdir(parents=True)
    items = list(documents.items())
    for number, part in enumerate((items[:2], items[2:])):
        path = folder / f"part-{number:05d}.jsonl"
        path.write_text("".join(json.dumps({"id": i, "contents": "", "vector": v}) + "\n" for i, v in part))
        os.utime(path, ns=(os.stat(path).st_atime_ns - age_ns, os.stat(path).st_mtime_ns - age_ns))
    return folder


def forget():
    scan_module._remembered.clear()  # as a new process would start


def reads(folder):
    return full_reads(vector_files(folder))


def test_one_pass_gives_the_fingerprint_and_statistics_of_separate_reads(tmp_path):
    folder = write_folder(tmp_path / "vectors")
    before = reads(folder)
    scan = scan_folder(folder)
    assert reads(folder) == before + 1
    assert scan.fingerprint == fingerprint_folder(folder) and scan.fingerprint.sha256 == PINNED
    assert scan.sparsity == sparsity(vector for *_, vector in read_vectors(vector_files(folder)))


def test_a_recorded_scan_is_reused_until_a_file_changes(tmp_path):
    folder, record = write_folder(tmp_path / "vectors"), tmp_path / "out" / "scan.json"
    first = scan_folder(folder, record)
    assert json.loads(record.read_text())["format"] == SCAN_FORMAT
    before = reads(folder)
    assert scan_folder(folder, record) == first  # remembered by this process
    forget()
    assert scan_folder(folder, record) == first and reads(folder) == before  # read back from the record
    shard = folder / "part-00001.jsonl"
    times = os.stat(shard)
    shard.write_text(shard.read_text().replace('"a": 1', '"a": 2'))  # same size, and its times set back:
    os.utime(shard, ns=(times.st_atime_ns, times.st_mtime_ns))  # the change time still moved
    changed = scan_folder(folder, record)
    assert reads(folder) == before + 1
    assert changed.fingerprint.total_impact == first.fingerprint.total_impact + 1
    assert changed.fingerprint == fingerprint_folder(folder)


def test_a_file_written_just_now_is_waited_out_then_recorded(tmp_path):
    folder, record = write_folder(tmp_path / "vectors", age_ns=0), tmp_path / "scan.json"
    scan_folder(folder, record)
    assert record.is_file()


def record_of(folder, tmp_path):
    record = tmp_path / "record" / "scan.json"
    scan_folder(folder, record)
    forget()
    return record


@pytest.mark.parametrize("damage", ["not json", "other format", "negative count", "short percentiles",
                                    "bad sha256", "term count above the documents"])
def test_a_damaged_record_is_ignored_and_the_files_read_again(tmp_path, damage):
    folder = write_folder(tmp_path / "vectors")
    record = record_of(folder, tmp_path)
    data = json.loads(record.read_text())
    if damage == "other format":
        data["format"] = "vtrepro.vector-scan/0"
    elif damage == "negative count":
        data["fingerprint"]["total_impact"] = -1
    elif damage == "short percentiles":
        data["sparsity"]["percentile_terms"].pop()
    elif damage == "bad sha256":
        data["fingerprint"]["sha256"] = "0" * 63 + "g"
    elif damage == "term count above the documents":
        data["sparsity"]["term_vectors"]["paris"] = 5
    record.write_text("{" if damage == "not json" else json.dumps(data))
    before = reads(folder)
    assert scan_folder(folder, record).fingerprint.sha256 == PINNED
    assert reads(folder) == before + 1
    assert scan_folder(folder, record).fingerprint.sha256 == PINNED  # rewritten: no third read
    forget()
    scan_folder(folder, record)
    assert reads(folder) == before + 1


def test_a_record_sent_with_a_folder_never_stands_in_for_reading_it(tmp_path):
    """A copied folder (new inodes and change times), its record claiming other vectors, is read and checked."""
    folder = write_folder(tmp_path / "vectors")
    record = record_of(folder, tmp_path)
    data = json.loads(record.read_text())
    data["fingerprint"]["sha256"] = "0" * 64
    record.write_text(json.dumps(data))
    sent = tmp_path / "sent"
    shutil.copytree(folder, sent)
    shutil.copy(record, sent / "scan.json")
    with open(sent / "part-00000.jsonl", "a") as handle:
        handle.write(json.dumps({"id": "d5", "vector": {"paris": 1.5}}) + "\n")
    with pytest.raises(VtreproError, match="part-00000.jsonl:3: impact 1.5"):
        scan_folder(sent, sent / "scan.json")


def test_a_record_is_not_a_file_of_the_collection(tmp_path):
    folder = write_folder(tmp_path / "vectors")
    scan_folder(folder, folder / "scan.json")
    assert [path.name for path in vector_files(folder)] == ["part-00000.jsonl", "part-00001.jsonl"]
