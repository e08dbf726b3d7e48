"""The bad-input catalogue (docs/input-validation.md): inputs that could change a number or lose work.

Each class of the catalogue is one parametrized test over real inputs (crafted vector collections,
TREC runs, BEIR folders, a real Lucene index and, where the machine allows, real full or read-only
file systems). Every case asserts the exit status, exactly one ``error:`` line naming the file (and
line), no traceback, and that what existed before (an index, a run, a report) is unchanged.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_one_error_line, run_command, run_module, write_vectors
from vtrepro.core.cli import cli_entry
from vtrepro.core.errors import VtreproError
from vtrepro.evaluate.command import main as evaluate_main
from vtrepro.index.command import main as index_main
from vtrepro.search.command import main as search_main

GOOD = [{"id": f"d{i}", "contents": "", "vector": {"paris": i + 1, "france": 2}} for i in range(3)]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file's SHA-256 under ``folder``: equal snapshots mean nothing there was touched."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def good_index(tmp_path_factory) -> Path:
    """A real impact index of three documents, built once."""
    root = tmp_path_factory.mktemp("catalogue")
    assert cli_entry(index_main)(["--vectors", str(write_vectors(root / "vectors", GOOD)),
                                  "--output", str(root / "index")]) == 0
    return root / "index"


@pytest.fixture
def previous_index(good_index: Path, tmp_path: Path) -> Path:
    """A copy of the good index at the path a failing rebuild targets."""
    import shutil

    return Path(shutil.copytree(good_index, tmp_path / "index"))


# -- Class 1: values Anserini or pytrec_eval would silently change -----------------------------------

SILENT_VECTOR_CHANGES = {
    "nan weight": ('{"id": "x", "contents": "", "vector": {"paris": NaN}}', ":4: holds NaN, which is not a number"),
    "negative weight": ('{"id": "x", "contents": "", "vector": {"paris": -3}}', "impact -3"),
    "float weight 2.7": ('{"id": "x", "contents": "", "vector": {"paris": 2.7}}', "impact 2.7"),
    "float weight 0.4": ('{"id": "x", "contents": "", "vector": {"paris": 0.4}}', "impact 0.4"),
    "weight 1e12": ('{"id": "x", "contents": "", "vector": {"paris": 1000000000000}}', "impact 1000000000000"),
    "string weight": ('{"id": "x", "contents": "", "vector": {"paris": "7"}}', "impact '7'"),
    "boolean weight": ('{"id": "x", "contents": "", "vector": {"paris": true}}', "impact True"),
    "term with a space": ('{"id": "x", "contents": "", "vector": {"new york": 3}}', "term 'new york'"),
    "term with a control character": ('{"id": "x", "contents": "", "vector": {"a\\u0007b": 3}}', "control"),
    "empty term": ('{"id": "x", "contents": "", "vector": {"": 3}}', "term ''"),
    "empty vector": ('{"id": "x", "contents": "", "vector": {}}', "non-empty object"),
    "missing id": ('{"contents": "", "vector": {"paris": 1}}', "'id'"),
    "empty id": ('{"id": "", "contents": "", "vector": {"paris": 1}}', "'id'"),
    "numeric id": ('{"id": 7, "contents": "", "vector": {"paris": 1}}', "'id'"),
    "id with a space": ('{"id": "doc 1", "contents": "", "vector": {"paris": 1}}', "'doc 1'"),
    "id with a tab": ('{"id": "doc\\t1", "contents": "", "vector": {"paris": 1}}', "'doc\\t1'"),
    "duplicate id": ('{"id": "d1", "contents": "", "vector": {"paris": 1}}', "duplicate id 'd1'"),
    "contents not a string": ('{"id": "x", "contents": 5, "vector": {"paris": 1}}', "'contents'"),
    "not JSON": ('{"id": "x", "vector": {"paris": 1}', "not valid JSON"),
    "invalid UTF-8": (b'{"id": "x\xff", "contents": "", "vector": {"paris": 1}}\n', "not valid UTF-8"),
}


@pytest.mark.parametrize("case", SILENT_VECTOR_CHANGES, ids=list(SILENT_VECTOR_CHANGES))
def test_index_refuses_silently_changed_values(case, previous_index, tmp_path, capsys):
    line, fragment = SILENT_VECTOR_CHANGES[case]
    vectors = write_vectors(tmp_path / "vectors", GOOD, line)
    before = snapshot(previous_index)
    code, _, stderr = run_command(index_main, ["--vectors", vectors, "--output", previous_index], capsys)
    assert_one_error_line(code, stderr, "part-00000.jsonl:4", fragment)
    assert snapshot(previous_index) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index", "vectors"]  # no staging left behind


BAD_RUN_LINES = {
    "doc id with a space": ("q1 Q0 doc 1 1 3.0 tag", "expected 6 fields"),
    "missing field": ("q1 Q0 d1 1 3.0", "expected 6 fields"),
    "nan score": ("q1 Q0 d1 1 nan tag", "not finite"),
    "infinite score": ("q1 Q0 d1 1 inf tag", "not finite"),
    "non-numeric score": ("q1 Q0 d1 1 high tag", "score a number"),
    "non-integer rank": ("q1 Q0 d1 first 3.0 tag", "rank must be an integer"),
    "same document twice": ("q1 Q0 d0 2 1.0 tag", "appears twice"),
    "invalid UTF-8": (b"q1 Q0 d\xfe 1 1.0 tag", "not valid UTF-8"),
}


@pytest.mark.parametrize("case", BAD_RUN_LINES, ids=list(BAD_RUN_LINES))
def test_evaluate_refuses_what_trec_eval_would_misread(case, tmp_path, capsys):
    line, fragment = BAD_RUN_LINES[case]
    run = tmp_path / "run.trec"
    run.write_bytes(b"q1 Q0 d0 1 5.0 tag\n" + (line if isinstance(line, bytes) else line.encode()) + b"\n")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    code, _, stderr = run_command(evaluate_main, ["--run", run, "--qrels", qrels], capsys)
    assert_one_error_line(code, stderr, "run.trec:2", fragment)


def _mini_beir(root: Path, corpus: bytes, queries: bytes, qrels: str) -> Path:
    folder = root / "beir" / "mini"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_bytes(corpus)
    (folder / "queries.jsonl").write_bytes(queries)
    (folder / "qrels" / "test.tsv").write_text(qrels)
    return root


GOOD_CORPUS = b'{"_id": "d1", "text": "paris is the capital of france"}\n{"_id": "d2", "text": "texas"}\n'
GOOD_QUERIES = b'{"_id": "q1", "text": "capital of france"}\n'
GOOD_QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\n"
BAD_SOURCES = {
    "corpus id with a space": ("corpus.jsonl:2", GOOD_CORPUS.replace(b'"d2"', b'"d 2"'), GOOD_QUERIES, GOOD_QRELS),
    "corpus id with a tab": ("corpus.jsonl:2", GOOD_CORPUS.replace(b'"d2"', b'"d\\t2"'), GOOD_QUERIES, GOOD_QRELS),
    "corpus id with a control character": ("corpus.jsonl:2", GOOD_CORPUS.replace(b'"d2"', b'"d\\u00012"'),
                                           GOOD_QUERIES, GOOD_QRELS),
    "corpus not UTF-8": ("corpus.jsonl:2", GOOD_CORPUS.replace(b"texas", b"tex\xe9s"), GOOD_QUERIES, GOOD_QRELS),
    "query id with a space": ("queries.jsonl:1", GOOD_CORPUS, GOOD_QUERIES.replace(b'"q1"', b'"q 1"'), GOOD_QRELS),
    "qrels id with a space": ("test.tsv:2", GOOD_CORPUS, GOOD_QUERIES, GOOD_QRELS.replace("d1", "d 1")),
}


@pytest.mark.parametrize("case", BAD_SOURCES, ids=list(BAD_SOURCES))
def test_ids_anserini_cannot_carry_are_refused_at_the_source(case, tmp_path, capsys):
    where, corpus, queries, qrels = BAD_SOURCES[case]
    data = _mini_beir(tmp_path / "data", corpus, queries, qrels)
    spec = tmp_path / "spec.yaml"
    spec.write_text("conditions:\n  bm25:\n    retrieval: bm25\n    datasets:\n      mini:\n")
    code, _, stderr = run_module("vtrepro", "regress", "--spec", spec, "--data-dir", data, "--runs", tmp_path / "runs",
                                 capsys=capsys)
    assert_one_error_line(code, stderr, where)


# -- Class 2: nothing already written is lost --------------------------------------------------------

def test_hidden_temporary_files_are_never_indexed(tmp_path, capsys):
    vectors = write_vectors(tmp_path / "vectors", GOOD)
    (vectors / ".part-00001.jsonl.k3j2.tmp").write_text(json.dumps({"id": "half", "vector": {"x": 1}}) + "\n")
    code, stdout, _ = run_command(index_main, ["--vectors", vectors, "--output", tmp_path / "index"], capsys)
    assert code == 0
    assert json.loads(stdout)["documents"] == len(GOOD)


def test_a_rebuild_replaces_the_index_only_when_complete(previous_index, tmp_path, capsys):
    from vtrepro.encode.fingerprint import VectorSetSummary
    from vtrepro.index.lucene import build_impact_index
    from vtrepro.index.lucene_checks import index_stats

    vectors = write_vectors(tmp_path / "vectors", [*GOOD, {"id": "d9", "vector": {"lyon": 4}}])
    before = snapshot(previous_index)
    wrong = VectorSetSummary("0" * 64, count=5, total_impact=25)  # the check after Anserini ran must fail
    with pytest.raises(VtreproError, match="Anserini indexed .* the previous index at .* is kept"):
        build_impact_index(vectors, previous_index, expected=wrong)
    assert snapshot(previous_index) == before
    build_impact_index(vectors, previous_index)
    assert index_stats(previous_index)["documents"] == 4
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index", "vectors"]


def test_an_index_moved_aside_by_a_killed_rebuild_is_put_back(good_index, tmp_path, caplog):
    import shutil

    from vtrepro.index.lucene import build_impact_index
    from vtrepro.index.lucene_checks import index_stats

    abandoned = tmp_path / ".index.work-999999999"  # no such process
    shutil.copytree(good_index, abandoned / "old")
    (abandoned / "index").mkdir()
    vectors = write_vectors(tmp_path / "vectors", GOOD[:2])
    build_impact_index(vectors, tmp_path / "index")
    assert "put back the index an interrupted rebuild had moved aside" in caplog.text  # logged by the library
    assert index_stats(tmp_path / "index")["documents"] == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index", "vectors"]


def test_bm25_skips_documents_without_text_like_pyserini(tmp_path, caplog):
    from vtrepro.index.lucene import build_bm25_index

    stats = build_bm25_index([("d1", "paris france"), ("d2", "   "), ("d3", "lyon")], tmp_path / "bm25")
    assert stats["documents"] == 2
    assert "1 document(s) without text not indexed" in caplog.text


def test_search_on_a_corrupt_index_is_one_line(tmp_path, capsys):
    index = tmp_path / "index"
    index.mkdir()
    (index / "segments_1").write_bytes(b"not a lucene segments file")
    queries = write_vectors(tmp_path / "q", [{"id": "q1", "vector": {"paris": 1}}]) / "part-00000.jsonl"
    code, _, stderr = run_command(search_main, ["--index", index, "--queries", queries,
                                                "--output", tmp_path / "run.trec"], capsys)
    assert_one_error_line(code, stderr, str(index), "not a readable Lucene index")
    assert not (tmp_path / "run.trec").exists()


def test_index_does_not_replace_a_folder_that_is_not_an_index(tmp_path, capsys):
    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "thesis.tex").write_text("months of work")
    vectors = write_vectors(tmp_path / "vectors", GOOD)
    code, _, stderr = run_command(index_main, ["--vectors", vectors, "--output", keep], capsys)
    assert_one_error_line(code, stderr, "notes", "not a Lucene index")
    assert (keep / "thesis.tex").read_text() == "months of work"


def test_search_refuses_a_folder_as_output_before_searching(good_index, tmp_path, capsys):
    queries = write_vectors(tmp_path / "q", [{"id": "q1", "vector": {"paris": 1}}]) / "part-00000.jsonl"
    code, _, stderr = run_command(search_main, ["--index", good_index, "--queries", queries, "--output", tmp_path], capsys)
    assert_one_error_line(code, stderr, str(tmp_path), "is a folder")


@pytest.mark.parametrize("index", ["missing", "not an index"])
def test_search_on_a_missing_or_wrong_index_keeps_the_previous_run(index, tmp_path, capsys):
    queries = write_vectors(tmp_path / "q", [{"id": "q1", "vector": {"paris": 1}}]) / "part-00000.jsonl"
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d0 1 5.000000 earlier\n")
    folder = tmp_path / ("nope" if index == "missing" else "q")
    code, _, stderr = run_command(search_main, ["--index", folder, "--queries", queries, "--output", run], capsys)
    assert_one_error_line(code, stderr, str(folder), "python -m vtrepro index")
    assert run.read_text() == "q1 Q0 d0 1 5.000000 earlier\n"


def test_regress_keeps_the_results_of_runs_that_finished(tmp_path, capsys):
    data = _mini_beir(tmp_path / "data", GOOD_CORPUS, GOOD_QUERIES, GOOD_QRELS)
    bad = data / "beir" / "broken"
    (bad / "qrels").mkdir(parents=True)
    (bad / "corpus.jsonl").write_bytes(GOOD_CORPUS.replace(b'"d2"', b'"d 2"'))
    (bad / "queries.jsonl").write_bytes(GOOD_QUERIES)
    (bad / "qrels" / "test.tsv").write_text(GOOD_QRELS)
    spec = tmp_path / "spec.yaml"
    spec.write_text("conditions:\n  bm25:\n    retrieval: bm25\n    datasets:\n      mini:\n      broken:\n")
    code, _, stderr = run_module("vtrepro", "regress", "--spec", spec, "--data-dir", data, "--runs", tmp_path / "runs",
                                 capsys=capsys)
    assert_one_error_line(code, stderr, "bm25/broken", "corpus.jsonl:2", "report.md")
    results = json.loads((tmp_path / "runs" / "spec" / "results.json").read_text())
    by_dataset = {(row["dataset"], row["metric"]): row for row in results["rows"]}
    assert by_dataset[("mini", "ndcg@10")]["observed"] == 1.0
    assert by_dataset[("broken", "run")]["status"] == "ERROR"
    assert (tmp_path / "runs" / "spec" / "bm25" / "mini" / "run.trec").is_file()
    assert re.search(r"\| bm25 +\| broken +\| run +\|", (tmp_path / "runs" / "spec" / "report.md").read_text())
    assert "bm25,broken,run,,-,-,ERROR," in (tmp_path / "runs" / "spec" / "results.csv").read_text()


# -- Class 3: one line for failures of the operating system ------------------------------------------

@contextlib.contextmanager
def small_file_system(path: Path, size: str, read_only: bool = False):
    """A real tmpfs of ``size`` at ``path`` (needs mount rights: root in the CI container)."""
    path.mkdir()
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_search_on_a_full_disk_keeps_the_previous_run(good_index, tmp_path, capsys):
    queries = write_vectors(tmp_path / "q", [{"id": f"q{i}", "vector": {"paris": 1}} for i in range(400)])
    with small_file_system(tmp_path / "disk", "64k") as disk:
        run = disk / "run.trec"
        run.write_text("q1 Q0 d0 1 5.000000 earlier\n")
        with open(disk / "filler", "wb") as filler, contextlib.suppress(OSError):
            filler.write(b"\0" * (1 << 20))
        code, _, stderr = run_command(search_main, ["--index", good_index, "--queries", queries / "part-00000.jsonl",
                                                 "--output", run], capsys)
        assert_one_error_line(code, stderr, "No space left on device", "free disk space")
        assert run.read_text() == "q1 Q0 d0 1 5.000000 earlier\n"
        assert sorted(path.name for path in disk.iterdir()) == ["filler", "run.trec"]


def test_read_only_output_folder_fails_before_any_work(good_index, tmp_path, capsys):
    queries = write_vectors(tmp_path / "q", [{"id": "q1", "vector": {"paris": 1}}]) / "part-00000.jsonl"
    with small_file_system(tmp_path / "ro", "64k", read_only=True) as folder:
        code, _, stderr = run_command(search_main, ["--index", good_index, "--queries", queries,
                                                 "--output", folder / "run.trec"], capsys)
        assert_one_error_line(code, stderr, str(folder), "cannot write here")


@pytest.mark.slow  # 1.8 s on the AVX2 EPYC: a process of its own under a file-size limit
def test_file_size_limit_is_one_line(good_index, tmp_path):
    """A write the OS refuses (here: the process's file-size limit) is one line, and the old run stays."""
    queries = write_vectors(tmp_path / "q", [{"id": f"q{i}", "vector": {"paris": 1}} for i in range(400)])
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d0 1 5.000000 earlier\n")
    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))"
    code = (f"{limit}; import sys; from vtrepro.core.cli import cli_entry; from vtrepro.search.command import main; "
            f"sys.exit(cli_entry(main)())")
    result = subprocess.run([sys.executable, "-c", code, "--index", str(good_index), "--queries",
                             str(queries / "part-00000.jsonl"), "--output", str(run)], capture_output=True, text=True)
    assert_one_error_line(result.returncode, result.stderr, "File too large")
    assert run.read_text() == "q1 Q0 d0 1 5.000000 earlier\n"


BROKEN_COMMAND = "import sys; from vtrepro.core.cli import cli_entry\ndef main(argv): return 1 / 0\nsys.exit(cli_entry(main)())"


def test_unexpected_internal_error_is_one_line_with_a_debug_hint():
    result = subprocess.run([sys.executable, "-c", BROKEN_COMMAND], capture_output=True, text=True)
    assert_one_error_line(result.returncode, result.stderr, "internal error", "ZeroDivisionError", "--debug", status=3)
    debug = subprocess.run([sys.executable, "-c", BROKEN_COMMAND, "--debug"], capture_output=True, text=True)
    assert "Traceback" in debug.stderr and debug.returncode == 1


@pytest.mark.parametrize(("argv", "expected"), [(["--threads", "0"], "expected an integer >= 1"),
                                              (["--k", "-3"], "expected an integer in [1, 10000]"),
                                              (["--k", "ten"], "expected an integer in [1, 10000]")])
def test_search_numeric_options_are_range_checked(argv, expected, good_index, tmp_path, capsys):
    code, _, stderr = run_module("vtrepro", "search", "--index", good_index, "--queries", "q", "--output", tmp_path / "run",
                                 *argv, capsys=capsys)
    assert code == 2 and "Traceback" not in stderr
    assert expected in stderr.splitlines()[-1]
    assert not (tmp_path / "run").exists()


def test_evaluate_refuses_a_zero_cutoff_before_reading_anything(tmp_path, capsys):
    code, _, stderr = run_command(evaluate_main, ["--run", tmp_path / "none", "--qrels", tmp_path / "none",
                                               "--metrics", "ndcg@10,ndcg@0"], capsys)
    assert_one_error_line(code, stderr, "ndcg@0", "cutoff must be >= 1")
