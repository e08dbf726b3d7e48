"""Issue 20 catalogue, devices, the JVM and index messages: each refused before any work, in one accurate line.

Every case runs the real command (in-process through ``cli_entry``, or as a subprocess where the case needs
a locale, the environment or dropped privileges) on real inputs: splade-tiny, real Lucene indexes built by
Anserini and then damaged, real tmpfs file systems. Each asserts the exit status, the one ``error:`` line
and that the inputs, the previous index and the previous run are unchanged, with nothing else written.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from test_catalogue import run_command, small_file_system, snapshot, write_vectors

from helpers import assert_one_error_line
from vtrepro.bench.command import main as bench_main
from vtrepro.core.anserini import installed_release
from vtrepro.core.cli import cli_entry
from vtrepro.encode.command import encode_main
from vtrepro.index.command import main as index_main
from vtrepro.index.lucene import build_impact_index
from vtrepro.index.lucene_checks import index_stats
from vtrepro.search.command import main as search_main

pytestmark = pytest.mark.slow  # the hostile-input catalogue (docs/security.md): the full suite runs it

THREE = [{"id": f"d{i}", "contents": "", "vector": {"paris": i + 1, "france": 2}} for i in range(3)]
FOUR_HUNDRED = [{"id": f"d{i}", "contents": "", "vector": {f"t{(i * 7 + j) % 997}": j + 1 for j in range(20)}}
                for i in range(400)]
"""Large enough that its index does not fit beside the three-document index on a 96 KiB tmpfs."""
PREVIOUS_RUN = "q1 Q0 d0 1 5.000000 earlier\n"
INDEX_FIX = "python -m vtrepro index"


@pytest.fixture(scope="module")
def small_index(tmp_path_factory) -> Path:
    """A real three-document impact index, built once; tests damage copies of it."""
    root = tmp_path_factory.mktemp("devices")
    build_impact_index(write_vectors(root / "vectors", THREE), root / "index")
    return root / "index"


@pytest.fixture
def queries(tmp_path: Path) -> Path:
    return write_vectors(tmp_path / "q", [{"id": "q1", "vector": {"paris": 1}}]) / "part-00000.jsonl"


@pytest.fixture
def previous_run(tmp_path: Path) -> Path:
    run = tmp_path / "run.trec"
    run.write_text(PREVIOUS_RUN)
    return run


def unreadable_corpus(root: Path) -> Path:
    """A BEIR data root whose corpus fails on its second line: a refusal that names the device, not the
    corpus, proves the device was checked before the corpus was read."""
    folder = root / "beir" / "broken"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "heart"}) + "\n{not json\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "heart"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


# -- Devices: one check before any work, for every command that takes a device ----------------------

ABSENT_DEVICES = {
    "cuda": "this machine has no cuda device",
    "cuda:1": "this machine has no cuda device",
    "mps": "this machine has no mps device",
    "xpu:0": "this machine has no xpu device",
    "tpu:0": "not a device; use cpu, cuda, cuda:N, mps, xpu or xpu:N",
    "CUDA": "not a device; use cpu, cuda",
    "cuda:-1": "not a device; use cpu, cuda",
    "meta": "vtrepro does not encode on meta devices; use cpu, cuda",
    "cpu:3": "this machine has 1 cpu device(s), cpu:0 to cpu:0",
}


@pytest.mark.parametrize("device", ABSENT_DEVICES)
def test_encode_refuses_a_device_it_cannot_use_before_reading_anything(device, splade_tiny, tmp_path, capsys):
    import torch

    if torch.cuda.is_available() and device.startswith("cuda") and device != "cuda:-1":
        pytest.skip("this machine has a GPU")
    data = unreadable_corpus(tmp_path / "data")
    before = snapshot(data)
    code, _, stderr = run_command(encode_main, ["--model", splade_tiny, "--dataset", "broken", "--data-dir", data,
                                                "--output", tmp_path / "encoded", "--device", device], capsys)
    line = assert_one_error_line(code, stderr, f"--device {device!r}", ABSENT_DEVICES[device])
    assert "--device cpu" in line or "use cpu, cuda" in line
    assert not (tmp_path / "encoded").exists() and snapshot(data) == before


@pytest.mark.parametrize("device", ["cuda", "tpu:0"])
def test_bench_encode_refuses_a_device_it_cannot_use_before_loading(device, splade_tiny, tmp_path, capsys):
    import torch

    if torch.cuda.is_available() and device == "cuda":
        pytest.skip("this machine has a GPU")
    data = unreadable_corpus(tmp_path / "data")
    code, stdout, stderr = run_command(bench_main, ["encode", "--model", splade_tiny, "--dataset", "broken",
                                                    "--data-dir", data, "--device", device], capsys)
    assert_one_error_line(code, stderr, f"--device {device!r}", ABSENT_DEVICES[device])
    assert stdout == ""  # nothing measured


def test_the_cpu_is_always_accepted():
    from vtrepro.model.splade import check_device

    assert str(check_device("cpu")) == "cpu" and str(check_device("cpu:0")) == "cpu:0"
    assert check_device(None).type in {"cpu", "cuda"}


# -- The JVM: file names in any locale, its options from the environment ----------------------------

BUILD_AND_SEARCH = """
import sys
from vtrepro.core.anserini import installed_release
from vtrepro.core.cli import cli_entry
from vtrepro.index.command import main as index
from vtrepro.search.command import main as search
vectors, folder, queries = sys.argv[1:]
code = cli_entry(index)(["--vectors", vectors, "--output", folder + "/index"])
sys.exit(code or cli_entry(search)(["--index", folder + "/index", "--queries", queries, "--output", folder + "/run.trec"]))
"""


SEARCH = ("import sys; from vtrepro.core.cli import cli_entry; from vtrepro.search.command import main; "
          "sys.exit(cli_entry(main)())")


def run_python(code: str, *args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.mark.slow  # one JVM start, a build and a search in a subprocess: 4.5 s of CPU
def test_a_non_ascii_index_path_works_under_the_c_locale(tmp_path, queries):
    """LC_ALL=C: Python names files in UTF-8, Java (before) in ASCII: 'not a readable Lucene index'."""
    vectors = write_vectors(tmp_path / "vectors", THREE)
    folder = tmp_path / "índice-é"
    result = run_python(BUILD_AND_SEARCH, vectors, folder, queries, env={"LC_ALL": "C"})
    assert result.returncode == 0, result.stderr
    assert (folder / "run.trec").read_text().startswith("q1 Q0 d2 1 3.000000")
    assert sorted(path.name for path in folder.iterdir()) == ["index", "run.trec"]


def test_a_path_java_cannot_name_is_refused_in_one_line(tmp_path, queries):
    """A UTF-8 locale that is not installed: the JVM falls back to ASCII; refused before anything is written."""
    vectors = write_vectors(tmp_path / "vectors", THREE)
    folder = tmp_path / "índice-é"
    result = run_python(BUILD_AND_SEARCH, vectors, folder, queries, env={"LC_ALL": "xx_XX.UTF-8"})
    assert_one_error_line(result.returncode, result.stderr, "índice-é/index", "Java names files in ANSI_X3.4-1968",
                          "set LC_ALL=C.UTF-8")
    assert not folder.exists()


def test_a_path_that_is_not_utf8_is_refused_in_one_line(small_index, tmp_path, queries, previous_run, capsys):
    """A folder name in another encoding (bytes 0xff): before, an internal error (exit 3) after creating folders."""
    vectors = write_vectors(tmp_path / "vectors", THREE)
    foreign = Path(os.fsdecode(bytes(tmp_path) + b"/latin-\xff"))
    code, _, stderr = run_command(index_main, ["--vectors", vectors, "--output", foreign / "index"], capsys)
    assert_one_error_line(code, stderr, "not valid UTF-8", "rename it")
    assert not foreign.exists()
    shutil.copytree(small_index, foreign / "index")
    code, _, stderr = run_command(search_main, ["--index", foreign / "index", "--queries", queries,
                                                "--output", previous_run], capsys)
    assert_one_error_line(code, stderr, "not valid UTF-8")
    assert previous_run.read_text() == PREVIOUS_RUN


@pytest.mark.parametrize("name, value", [("_JAVA_OPTIONS", "-Xss100k"), ("JAVA_TOOL_OPTIONS", "-Xmx1m")])
def test_a_jvm_that_cannot_start_names_the_environment_options(name, value, small_index, queries, previous_run):
    """Options from the user's environment (honoured, not scrubbed): before, exit 3 'JVM failed to start'
    (-Xss100k), or exit 1 and no line at all (-Xmx1m: the JVM ended the process in its own start-up); now
    ``java -version`` is tried with them first."""
    result = run_python(SEARCH, "--index", small_index, "--queries", queries, "--output", previous_run,
                        env={name: value})
    assert_one_error_line(result.returncode, result.stderr, "did not start", f"{name}='{value}'",
                          "fix or unset those options")
    assert previous_run.read_text() == PREVIOUS_RUN


# -- Index messages: each damaged or foreign index is one accurate line ------------------------------

def flip_a_bit(index: Path) -> str:
    """Flip one bit in the middle of the postings: Lucene verifies their checksum only when it merges, so
    (before) the index was searched silently."""
    postings = next(index.glob("*.doc"))
    data = bytearray(postings.read_bytes())
    data[-20] ^= 0x01  # a postings byte: the file ends with a 16-byte footer (magic, algorithm, checksum)
    postings.write_bytes(bytes(data))
    return "checksum failed"


def truncate_a_file(index: Path) -> str:
    terms = next(index.glob("*.tim"))
    terms.write_bytes(terms.read_bytes()[:-20])
    return "not a readable Lucene index: corrupt ("


def remove_segment_info(index: Path) -> str:
    next(index.glob("*.si")).unlink()
    return "incomplete,"


def written_by_the_next_lucene(index: Path) -> str:
    """Rewrite ``segments_1`` as a commit of the next Lucene major (its version and created-version fields),
    checksum recomputed: what Lucene 9 meets opening an index Anserini 2 built (and Lucene 10 an 11's)."""
    segments = index / "segments_1"
    data = bytearray(segments.read_bytes())
    at = 4 + 1 + len(b"segments") + 4 + 16  # magic, codec name, format, index id
    at += 1 + data[at]  # the generation suffix
    major = installed_release().lucene_major
    assert data[at] == data[at + 3] == major, f"not a Lucene {major} commit"
    data[at] = data[at + 3] = major + 1  # Lucene version major, index created major
    body = bytes(data[:-8])
    segments.write_bytes(body + zlib.crc32(body).to_bytes(8, "big"))
    return f"written by a newer Lucene than this Anserini's {major}."


def empty_the_folder(index: Path) -> str:
    shutil.rmtree(index)
    index.mkdir()
    return "is an empty folder, not a Lucene index"


DAMAGES = {"a flipped bit": flip_a_bit, "a truncated file": truncate_a_file, "a missing file": remove_segment_info,
           "an index from the next Lucene": written_by_the_next_lucene, "an empty folder": empty_the_folder}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_or_foreign_index_is_one_accurate_line(damage, small_index, tmp_path, queries, previous_run, capsys):
    index = Path(shutil.copytree(small_index, tmp_path / "index"))
    expected = DAMAGES[damage](index)
    before = snapshot(index)
    code, _, stderr = run_command(search_main, ["--index", index, "--queries", queries, "--output", previous_run], capsys)
    assert_one_error_line(code, stderr, str(index), expected, INDEX_FIX)
    assert previous_run.read_text() == PREVIOUS_RUN and snapshot(index) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index", "q", "run.trec"]


PERMISSION_CASES = {"folder": ("permission denied listing the folder", "ls -ld"),
                    "segments_1": ("permission denied reading", "ls -l")}


@pytest.mark.parametrize("denied", PERMISSION_CASES)
def test_an_index_this_user_cannot_read_says_so(denied, small_index, tmp_path, queries, previous_run):
    """Before: 'not a Lucene index (no segments_N file); build it' for the folder, a Java trace and 'rebuild it'
    for a file. Root reads anything, so as root the command runs without the capabilities that allow it."""
    drop = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: permissions cannot be denied")
    index = Path(shutil.copytree(small_index, tmp_path / "index"))
    target = index if denied == "folder" else index / denied
    target.chmod(0)
    command = [sys.executable, "-c", SEARCH, "--index", str(index), "--queries", str(queries), "--output", str(previous_run)]
    try:
        result = subprocess.run((drop if os.geteuid() == 0 else []) + command, capture_output=True, text=True,
                                timeout=120)
    finally:
        target.chmod(0o755 if denied == "folder" else 0o644)
    assert_one_error_line(result.returncode, result.stderr, str(index), *PERMISSION_CASES[denied])
    assert previous_run.read_text() == PREVIOUS_RUN


def test_an_index_target_that_is_not_a_folder_is_never_replaced(tmp_path, capsys):
    """Before, ``index --output /dev/null`` moved the device aside, deleted it and put a folder in its place
    (found reproducing this issue). A FIFO stands in for the device here: the test must not risk /dev/null."""
    from vtrepro.core.errors import VtreproError

    vectors = write_vectors(tmp_path / "vectors", THREE)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, stderr = run_command(index_main, ["--vectors", vectors, "--output", fifo], capsys)
    assert_one_error_line(code, stderr, str(fifo), "not a folder")
    with pytest.raises(VtreproError, match="not a folder"):  # the library path regress builds through
        build_impact_index(vectors, fifo)
    assert fifo.is_fifo() and sorted(path.name for path in tmp_path.iterdir()) == ["fifo", "vectors"]


# -- A full disk during a rebuild says so, and keeps the old index -----------------------------------

def test_a_rebuild_on_a_full_disk_says_so_and_keeps_the_old_index(tmp_path, capsys):
    """Before: 'not a Lucene index; build it' about the hidden work folder (the old index was kept)."""
    small, large = write_vectors(tmp_path / "small", THREE), write_vectors(tmp_path / "large", FOUR_HUNDRED)
    with small_file_system(tmp_path / "disk", "96k") as disk:
        assert cli_entry(index_main)(["--vectors", str(small), "--output", str(disk / "index")]) == 0
        capsys.readouterr()
        before = snapshot(disk / "index")
        code, _, stderr = run_command(index_main, ["--vectors", large, "--output", disk / "index"], capsys)
        assert_one_error_line(code, stderr, "disk/index: the disk holding", "is full (No space left on device)",
                              "the previous index at", "is kept", "free disk space")
        assert snapshot(disk / "index") == before and index_stats(disk / "index")["documents"] == 3
        assert sorted(path.name for path in disk.iterdir()) == ["index"]


def test_a_bm25_build_on_a_full_disk_says_so(tmp_path, capsys):
    """The BM25 build (regress) writes its input beside the index first: Python's ENOSPC, not Java's."""
    from vtrepro.index.lucene import build_bm25_index

    documents = [(f"d{i}", "paris france lyon " * 40) for i in range(300)]
    with small_file_system(tmp_path / "disk", "64k") as disk:
        def build(argv: list[str] | None) -> int:
            build_bm25_index(documents, disk / "bm25")
            return 0

        code = cli_entry(build)([])
        assert_one_error_line(code, capsys.readouterr().err, "disk/bm25: the disk holding", "No space left on device",
                              "no index was written")
        assert list(disk.iterdir()) == []
