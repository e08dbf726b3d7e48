"""PISA search beside Lucene on the same vectors: identical runs (top k, integer scores, ties by doc id)."""
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import vtrepro
from helpers import HAND_MADE_DOCS, assert_one_error_line, write_vectors
from vtrepro.bench.command import main as bench_main
from vtrepro.core.errors import VtreproError
from vtrepro.encode.reader import read_query_vectors
from vtrepro.encode.vectors import escape_term
from vtrepro.index.command import main as index_main
from vtrepro.index.lucene import build_impact_index
from vtrepro.index.pisa import build_pisa_index, ensure_pisa_index, pisa_context, pisa_term, read_pisa_meta
from vtrepro.search.command import main as search_main
from vtrepro.search.lucene import search_impact
from vtrepro.search.pisa import _retrieve, search_pisa
from vtrepro.search.runs import write_trec_run

# HAND_MADE_DOCS, then four documents tied on "tie" written out of id order, and cased terms.
DOCS = {**HAND_MADE_DOCS, **{doc: {"tie": 5, "Paris": 2} for doc in ("z", "m", "b", "a")}, "c": {"tie": 5, "paris": 1}}
QUERIES = {
    "q1": {"paris": 3, "france": 2, escape_term("new york"): 1},  # its own id is a document
    "tied": {"tie": 1},
    "cased": {"Paris": 2},
    "mixed": {"Paris": 1, "paris": 2, "tie": 1, "texas": 3},
    "nothing": {"absent": 4},
    "empty": {},
}


@pytest.fixture(scope="module")
def both_indexes(tmp_path_factory):
    """(vectors folder, Lucene index, PISA index) of ``DOCS``."""
    root = tmp_path_factory.mktemp("engines")
    vectors = write_vectors(root / "vectors", DOCS)
    build_impact_index(vectors, root / "lucene")
    build_pisa_index(vectors, root / "pisa")
    return vectors, root / "lucene", root / "pisa"


def dot(query, doc):
    return sum(weight * DOCS[doc].get(term, 0) for term, weight in query.items())


@pytest.mark.parametrize("k", [1, 2, 3, 10])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("remove_query_id", [True, False])
def test_pisa_run_is_lucenes_run(both_indexes, k, threads, remove_query_id):
    _, lucene, pisa = both_indexes
    expected = search_impact(lucene, QUERIES, k, 1, remove_query_id)
    run = search_pisa(pisa, QUERIES, k, threads, remove_query_id)
    assert list(run) == list(expected)
    assert {qid: list(hits.items()) for qid, hits in run.items()} == {qid: list(hits.items()) for qid, hits in expected.items()}


def test_scores_are_exact_integer_dot_products_with_cased_terms_kept(both_indexes):
    _, _, pisa = both_indexes
    run = search_pisa(pisa, QUERIES, k=20)
    for qid, hits in run.items():
        assert hits == {doc: float(dot(QUERIES[qid], doc)) for doc in hits}
    assert "q1" not in run["q1"] and list(run["q1"]) == ["d1", "d3", "d2", "c"]
    assert run["cased"] == {doc: 4.0 for doc in ("a", "b", "m", "z")}  # PISA alone would lowercase 'Paris'
    doubled = search_pisa(pisa, {"q": {term: 2 * weight for term, weight in QUERIES["mixed"].items()}}, k=20)
    assert doubled["q"] == {doc: 2 * score for doc, score in run["mixed"].items()}
    assert run["nothing"] == run["empty"] == {}


def test_a_tie_that_pisa_cuts_at_the_boundary_is_completed_by_document_id(both_indexes):
    _, _, pisa = both_indexes
    own_top_two = _retrieve(pisa_context(pisa), [{pisa_term("tie"): 1.0}], 2, 1)[0]
    assert len(own_top_two) == 2 and ("a", 5.0) not in own_top_two  # PISA keeps the first tied documents it meets
    assert search_pisa(pisa, {"tied": {"tie": 1}}, k=1) == {"tied": {"a": 5.0}}
    assert list(search_pisa(pisa, {"tied": {"tie": 1}}, k=3)["tied"]) == ["a", "b", "c"]


@pytest.mark.parametrize(("weight", "message"), [(1.5, "integer weights from 1"), (0, "integer weights from 1"),
                                                 (True, "integer weights from 1"), (2**20, "beyond 2\\^24")])
def test_weights_pisa_cannot_score_exactly_are_refused(both_indexes, weight, message):
    _, _, pisa = both_indexes
    with pytest.raises(VtreproError, match=message):
        search_pisa(pisa, {"q": {"paris": weight}})


def test_index_is_kept_for_the_same_vectors_and_rebuilt_for_others(tmp_path):
    vectors = write_vectors(tmp_path / "vectors", HAND_MADE_DOCS)
    meta, seconds = ensure_pisa_index(vectors, tmp_path / "pisa")
    assert seconds is not None and meta["documents"] == len(HAND_MADE_DOCS)
    assert meta["total_terms"] == sum(sum(vector.values()) for vector in HAND_MADE_DOCS.values())
    assert ensure_pisa_index(vectors, tmp_path / "pisa") == (meta, None)
    write_vectors(tmp_path / "other", {"d9": {"paris": 7}})
    other, seconds = ensure_pisa_index(tmp_path / "other", tmp_path / "pisa")
    assert seconds is not None and other["documents"] == 1 and read_pisa_meta(tmp_path / "pisa") == other
    assert search_pisa(tmp_path / "pisa", {"q": {"paris": 1}}) == {"q": {"d9": 7.0}}
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


def test_missing_or_foreign_pisa_index_is_a_clear_error(tmp_path):
    with pytest.raises(VtreproError, match="not a PISA index"):
        search_pisa(tmp_path, {"q": {"paris": 1}})
    (tmp_path / "notes.txt").write_text("mine")
    vectors = write_vectors(tmp_path / "v", HAND_MADE_DOCS)
    with pytest.raises(VtreproError, match="refusing to replace it"):
        build_pisa_index(vectors, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "part-00000.jsonl").write_text("")
    with pytest.raises(VtreproError, match="hold no documents"):
        build_pisa_index(tmp_path / "empty", tmp_path / "pisa")


# A build that stalls in PISA's compression (its collection and lexicons written) until it is killed.
STALLED_BUILD = """
import sys, time
from vtrepro.index import pisa
pisa.pisa_context = lambda folder: time.sleep(600)
pisa.build_pisa_index(sys.argv[1], sys.argv[2])
"""


def hidden(folder):
    return sorted(path.name for path in folder.iterdir() if path.name.startswith("."))


def stalled_staging(folder, build, seconds=60.0):
    """The temporary folder of the running ``build`` (a STALLED_BUILD) once it holds PISA's lexicons."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and build.poll() is None:
        if lexicons := list(folder.glob(".pisa.*.tmp/fwd.doclex")):
            return lexicons[0].parent
        time.sleep(0.01)
    pytest.fail(f"the build never stalled (exit status {build.poll()}): {hidden(folder)}")


@pytest.mark.slow  # 2.6 s on the AVX2 EPYC: a PISA build started and killed mid-way
def test_a_killed_builds_temporary_folder_is_removed_by_the_next_build(both_indexes, tmp_path):
    vectors, _, clean = both_indexes
    with subprocess.Popen([sys.executable, "-c", STALLED_BUILD, str(vectors), str(tmp_path / "pisa")],
                          cwd=Path(vtrepro.__file__).parents[1]) as build:  # the vtrepro under test
        try:
            staging = stalled_staging(tmp_path, build)
        finally:
            build.kill()
            build.wait()  # reaped: a zombie's pid still runs
    assert build.returncode == -9 and hidden(tmp_path) == [staging.name] and (staging / "inv.docs").is_file()
    assert build_pisa_index(vectors, tmp_path / "pisa") == read_pisa_meta(clean)
    assert [path.name for path in tmp_path.iterdir()] == ["pisa"]
    for k in (1, 3, 10):
        run, expected = search_pisa(tmp_path / "pisa", QUERIES, k), search_pisa(clean, QUERIES, k)
        assert [(qid, list(hits.items())) for qid, hits in run.items()] == [
            (qid, list(hits.items())) for qid, hits in expected.items()]


def test_a_build_removes_only_what_dead_builds_of_its_own_index_left(both_indexes, tmp_path):
    vectors, _, _ = both_indexes
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    dead = [f".pisa.{ended.pid}.k3x9q1zz.tmp", f".pisa.{ended.pid}.k3x9q1zz.old"]
    kept = [f".pisa.{os.getpid()}.a1b2c3d4.tmp",  # a live build's
            f".other.{ended.pid}.k3x9q1zz.tmp", f".pisa.x.{ended.pid}.k3x9q1zz.tmp",  # other indexes'
            f".pisa.{ended.pid}.notes", ".pisa.k3x9q1zz.tmp"]  # not named as a build names them
    for name in dead + kept:
        (tmp_path / name).mkdir()
    build_pisa_index(vectors, tmp_path / "pisa")
    assert hidden(tmp_path) == sorted(kept)


@pytest.mark.slow  # 1.5 s on the AVX2 EPYC: a PISA build killed between its renames
def test_an_index_a_killed_build_had_set_aside_is_put_back(both_indexes, tmp_path, monkeypatch):
    """Killed between moving the old index aside and the new one in: the next build puts the old one back
    first, so it survives even when that build fails too."""
    vectors, _, _ = both_indexes
    meta = build_pisa_index(vectors, tmp_path / "built")
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    (tmp_path / "built").rename(tmp_path / f".pisa.{ended.pid}.k3x9q1zz.old")

    def interrupted(folder):
        raise KeyboardInterrupt

    monkeypatch.setattr("vtrepro.index.pisa.pisa_context", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_pisa_index(vectors, tmp_path / "pisa")
    assert read_pisa_meta(tmp_path / "pisa") == meta and hidden(tmp_path) == []


def test_a_rebuild_failing_between_its_two_renames_keeps_the_old_index(both_indexes, tmp_path, monkeypatch):
    vectors, _, _ = both_indexes
    meta = build_pisa_index(vectors, tmp_path / "pisa")
    write_vectors(tmp_path / "other", {"d9": {"paris": 7}})
    rename = Path.rename

    def failing_move_in(self, target):
        if self.name.endswith(".tmp"):
            raise OSError(28, "No space left on device")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_move_in)
    with pytest.raises(OSError):
        build_pisa_index(tmp_path / "other", tmp_path / "pisa")
    monkeypatch.undo()
    assert read_pisa_meta(tmp_path / "pisa") == meta and hidden(tmp_path) == []


def test_a_failed_rebuild_leaves_no_temporary_folder_and_the_index_as_it_was(both_indexes, tmp_path, monkeypatch):
    vectors, _, _ = both_indexes
    meta = build_pisa_index(vectors, tmp_path / "pisa")
    write_vectors(tmp_path / "other", {"d9": {"paris": 7}})

    def interrupted(folder):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr("vtrepro.index.pisa.pisa_context", interrupted)
        with pytest.raises(KeyboardInterrupt):
            build_pisa_index(tmp_path / "other", tmp_path / "pisa")
    assert read_pisa_meta(tmp_path / "pisa") == meta and hidden(tmp_path) == []
    assert search_pisa(tmp_path / "pisa", {"q": {"texas": 1}}) == {"q": {"d2": 40.0}}


def test_search_command_writes_the_same_run_file_with_either_engine(both_indexes, tmp_path, capsys):
    vectors, lucene, _ = both_indexes
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"id": qid, "vector": vector}) + "\n"
                               for qid, vector in QUERIES.items() if vector))
    common = ["--queries", str(queries), "--k", "3"]
    assert search_main(["--index", str(lucene), "--output", str(tmp_path / "lucene.trec"), *common]) == 0
    assert index_main(["--engine", "pisa", "--vectors", str(vectors), "--output", str(tmp_path / "pisa")]) == 0
    assert search_main(["--engine", "pisa", "--index", str(tmp_path / "pisa"),
                        "--output", str(tmp_path / "pisa.trec"), "--threads", "2", *common]) == 0
    assert (tmp_path / "pisa.trec").read_bytes() == (tmp_path / "lucene.trec").read_bytes()
    capsys.readouterr()
    code = search_main(["--index", str(lucene), "--vectors", str(vectors), "--output", str(tmp_path / "x"), *common])
    assert_one_error_line(code, capsys.readouterr().err, "--vectors builds a PISA index")
    code = search_main(["--engine", "pisa", "--index", str(lucene), "--output", str(tmp_path / "x"), *common])
    assert_one_error_line(code, capsys.readouterr().err, "not a PISA index")


def test_bench_search_reports_the_ratio_and_identical_runs(both_indexes, tmp_path, capsys):
    vectors, _, _ = both_indexes
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"id": qid, "vector": vector}) + "\n" for qid, vector in QUERIES.items()))
    argv = ["search", "--vectors", str(vectors), "--queries", str(queries), "--k", "2", "--threads", "2",
            "--index-dir", str(tmp_path / "indexes")]
    assert bench_main(argv) == 0
    out = capsys.readouterr().out
    assert "PISA/Lucene queries/s: " in out and "x with 1 thread, " in out and "x with 2 threads" in out
    assert f"runs: identical (4 runs x {len(QUERIES)} queries, top 2" in out
    assert bench_main(argv) == 0  # both indexes kept
    assert capsys.readouterr().out.count("kept") == 2


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["scifact", "nfcorpus"])
def test_pisa_writes_the_regression_run_file_byte_for_byte(splade_tiny_run, dataset, tmp_path):
    """Every test query of scifact and nfcorpus, top 1000: PISA's run file is the Lucene run the regression wrote,
    with one thread (term-at-a-time) and with two (MaxScore: the bindings' threads would share one term-at-a-time
    accumulator, which gave wrong scores for 287 of 300 scifact queries)."""
    _, out_dir, _ = splade_tiny_run
    folder = out_dir / "splade-tiny" / dataset
    build_pisa_index(folder / "vectors", tmp_path / "pisa")
    queries = read_query_vectors(folder / "queries.jsonl")
    for threads in (1, 2):
        write_trec_run(search_pisa(tmp_path / "pisa", queries, k=1000, threads=threads), tmp_path / "run.trec",
                       tag="vtrepro-splade-tiny")
        assert (tmp_path / "run.trec").read_bytes() == (folder / "run.trec").read_bytes(), f"{threads} threads"


@pytest.mark.slow  # 4.5 s (five files) and more (one file) on the AVX2 EPYC: builds at 1, 2, 3 and 8 processes
@pytest.mark.parametrize("layout", ["five files", "one file"])
def test_the_pisa_index_is_byte_identical_whatever_the_processes(tmp_path, layout):
    """Several processes each read a contiguous part of the vectors (whole files, or one file divided at line
    boundaries and read by offset); the index they write together is the one-process index byte for byte
    (postings in collection order, one document lexicon)."""
    from vtrepro.bench.scale import same_files
    from vtrepro.index.parts import split_files, split_pieces

    rng = random.Random(7)
    terms = [f"t{number}" for number in range(40)] + ["Paris", "paris"]
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    for part in range(5):  # five files of unequal size, tied and repeated vectors among them
        records = [{"id": f"d{part}-{doc}", "contents": "",
                    "vector": {term: rng.randint(1, 9) for term in rng.sample(terms, rng.randint(1, 12))}}
                   for doc in range(rng.randint(3, 30))]
        records += [{"id": f"d{part}-copy", "contents": "", "vector": {"paris": 4, "t1": 2}}]
        (vectors / f"part-{part:05d}.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    if layout == "one file":
        with open(vectors / "all.jsonl", "wb") as joined:
            for path in sorted(vectors.glob("part-*.jsonl")):
                joined.write(path.read_bytes())
                path.unlink()
        assert len(split_pieces([vectors / "all.jsonl"], 3)) == 3
    else:
        assert [len(part) for part in split_files(sorted(vectors.iterdir()), 3)] != [5]
    indexes = {threads: tmp_path / f"pisa-{threads}" for threads in (1, 2, 3, 8)}
    for threads, index in indexes.items():
        build_pisa_index(vectors, index, threads=threads)
    assert all(same_files(index, indexes[1]) for index in indexes.values())
    assert read_pisa_meta(indexes[1])["documents"] == sum(1 for path in vectors.iterdir() for _ in path.open())
