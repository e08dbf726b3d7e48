"""Seismic and BMP beside the exact engines on the same vectors: real tiny indexes built with the real libraries,
their runs measured against the exact run, their knobs bounded, and an index from elsewhere opened only once its
manifest, sizes and checksums hold."""
import importlib.util
import json
import os
import random

import pytest

from helpers import assert_one_error_line, run_command, write_vectors
from vtrepro.evaluate.against_exact import agreement, agreement_path, recall_against_exact
from vtrepro.index.approximate import (
    BMP_SCORE_LIMIT,
    META_NAME,
    TERMS_NAME,
    BmpIndexOptions,
    BmpSearchOptions,
    SeismicIndexOptions,
    SeismicSearchOptions,
)
from vtrepro.index.command import main as index_main
from vtrepro.index.pisa import build_pisa_index
from vtrepro.search.command import main as search_main
from vtrepro.search.pisa import search_pisa

bmp = pytest.importorskip("bmp", reason="bmp is not installed (pip install 'vtrepro[approximate]')")
HAS_SEISMIC = importlib.util.find_spec("seismic") is not None
needs_seismic = pytest.mark.skipif(not HAS_SEISMIC, reason="pyseismic-lsr is not installed (no wheel for this Python: "
                                                            "pip install 'vtrepro[approximate]' builds it with Rust)")
ENGINES = [pytest.param("seismic", marks=needs_seismic), "bmp"]

from vtrepro.index.build_approximate import _build_seismic, build_approximate_index, read_collection  # noqa: E402
from vtrepro.search.approximate import bmp_query, search_approximate  # noqa: E402

TERMS = [f"t{number}" for number in range(30)] + ["Paris", "paris", "caf\u00e9"]
GENEROUS = {"seismic": SeismicSearchOptions(query_cut=1000, heap_factor=0.01), "bmp": BmpSearchOptions(alpha=1.0)}
"""Search settings that read every candidate: Seismic then returns the exact run."""


def _collection(documents=300, seed=5):
    rng = random.Random(seed)
    docs = {f"d{number:03d}": {term: rng.randint(1, 60) for term in rng.sample(TERMS, rng.randint(1, 8))}
            for number in range(documents)}
    docs["d007"] = {"paris": 9, "t1": 9}  # three copies: ties, by document id
    docs["d100"] = dict(docs["d007"])
    docs["d200"] = dict(docs["d007"])
    queries = {f"q{number}": {term: rng.randint(1, 5) for term in rng.sample(TERMS, rng.randint(1, 4))}
               for number in range(25)}
    queries["tied"] = {"paris": 1, "t1": 1}
    queries["unknown"] = {"absent": 3}
    queries["d050"] = {"t3": 2}  # its own id is a document: removed from its hits
    return docs, queries


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(root, vectors, queries, {engine: index}) with the exact PISA index beside them."""
    root = tmp_path_factory.mktemp("approximate")
    docs, queries = _collection()
    vectors = write_vectors(root / "vectors", docs)
    (root / "queries.jsonl").write_text("".join(json.dumps({"id": qid, "vector": vector}) + "\n"
                                                for qid, vector in queries.items()))
    build_pisa_index(vectors, root / "pisa", threads=1)
    indexes = {"seismic": root / "seismic", "bmp": root / "bmp"}
    if HAS_SEISMIC:
        build_approximate_index("seismic", vectors, indexes["seismic"],
                                SeismicIndexOptions(n_postings=10_000, summary_energy=1.0), threads=1)
    build_approximate_index("bmp", vectors, indexes["bmp"], BmpIndexOptions(block_size=8, max_impact=255), threads=1)
    return root, vectors, queries, indexes


@needs_seismic
def test_seismic_reading_every_candidate_gives_the_exact_run_and_its_scores(built):
    """Seismic scores a candidate against its forward vector: with every block read, the run is PISA's byte for
    byte in documents, scores and order (ties by document id, the query's own id removed)."""
    root, _, queries, indexes = built
    for k in (3, 10, 1000):
        exact = search_pisa(root / "pisa", queries, k, 1)
        run = search_approximate("seismic", indexes["seismic"], queries, k, GENEROUS["seismic"])
        assert {qid: list(hits.items()) for qid, hits in run.items()} == \
               {qid: list(hits.items()) for qid, hits in exact.items()}
    assert run["unknown"] == {} and "d050" not in run["d050"]


def test_bmp_scores_are_its_own_and_its_run_is_measured_not_assumed(built):
    """BMP rescales each query to at most 32 and sums those: on impacts within its byte the order of BMP's scores
    is the dot product's, so recall against exact is high but measured, never taken for 1."""
    root, _, queries, indexes = built
    exact = search_pisa(root / "pisa", queries, 10, 1)
    run = search_approximate("bmp", indexes["bmp"], queries, 10, GENEROUS["bmp"])
    weights = bmp_query({"paris": 1, "t1": 4})
    assert weights == {"paris": 8, "t1": 32}
    assert recall_against_exact(run, exact, 10) > 0.8
    assert run["unknown"] == {}


def test_the_agreement_counts_the_exact_top_found_and_the_ndcg_difference():
    exact = {"a": {"x": 3.0, "y": 2.0, "z": 1.0}, "b": {"x": 1.0}, "c": {}}
    run = {"a": {"x": 3.0, "z": 1.0, "w": 0.5}}
    assert recall_against_exact(run, exact, 2) == pytest.approx((1 / 2 + 0) / 2)
    figures = agreement(run, exact, 10, 10, {"a": {"y": 1}, "b": {"x": 1}})
    assert figures["recall@10_vs_exact"] == pytest.approx((2 / 3 + 0) / 2) and figures["recall@1000_vs_exact"] is None
    assert figures["ndcg@10_difference"] == pytest.approx(figures["ndcg@10"] - figures["ndcg@10_exact"], abs=1e-4)
    assert figures["ndcg@10_difference"] < 0


@pytest.mark.parametrize("engine", ENGINES)
def test_search_writes_the_agreement_beside_the_run_and_prints_recall(built, tmp_path, capsys, engine):
    root, _, _, indexes = built
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td001\t1\nq2\td002\t1\ntied\td100\t1\n")
    output = tmp_path / f"run.{engine}.trec"
    code, out, err = run_command(search_main, ["--engine", engine, "--index", indexes[engine], "--queries",
                                               root / "queries.jsonl", "--output", output, "--exact-index",
                                               root / "pisa", "--qrels", qrels, "--k", "100"], capsys)
    assert code == 0, err
    figures = json.loads(agreement_path(output).read_text())
    assert f"{engine} against exact (pisa): recall@10 " in out and str(agreement_path(output)) in out
    assert figures["engine"] == engine and figures["exact"]["engine"] == "pisa" and figures["k"] == 100
    assert 0 <= figures["recall@10_vs_exact"] <= 1 and figures["recall@1000_vs_exact"] is None
    assert {"ndcg@10_difference", "latency_p99_ms", "search_queries_per_s"} <= set(figures)


def test_the_index_command_builds_either_engine_and_reports_its_manifest(built, tmp_path, capsys):
    _, vectors, _, _ = built
    code, out, err = run_command(index_main, ["--engine", "bmp", "--vectors", vectors, "--output", tmp_path / "b",
                                              "--block-size", "16", "--max-impact", "40"], capsys)
    assert code == 0, err
    meta = json.loads(out)
    assert meta["options"] == {"block_size": 16, "max_impact": 40} and meta["held_max_impact"] == 40
    assert meta["max_impact"] == 60 and meta["documents"] == 300


@pytest.mark.parametrize("argv, fragments", [
    (["index", "--engine", "seismic", "--n-postings", "0"], ["--n-postings", "[1, 100000000]"]),
    (["index", "--engine", "seismic", "--centroid-fraction", "1.5"], ["--centroid-fraction", "(0, 1]"]),
    (["index", "--engine", "bmp", "--block-size", "257"], ["--block-size", "[1, 256]"]),
    (["index", "--engine", "bmp", "--max-impact", "256"], ["--max-impact", "[1, 255]"]),
    (["search", "--engine", "seismic", "--heap-factor", "0"], ["--heap-factor", "(0, 1]"]),
    (["search", "--engine", "seismic", "--query-cut", "-1"], ["--query-cut", "[1, 1000000]"]),
    (["search", "--engine", "bmp", "--alpha", "1.5"], ["--alpha", "(0, 1]"]),
    (["search", "--engine", "bmp", "--beta", "nan"], ["--beta"]),
])
def test_a_knob_out_of_its_range_is_one_line_naming_the_flag_and_range(built, tmp_path, capsys, argv, fragments):
    root, vectors, _, indexes = built
    command, rest = argv[0], argv[1:]
    if command == "index":
        main, base = index_main, ["--vectors", vectors, "--output", tmp_path / "x"]
    else:
        main, base = search_main, ["--index", indexes[rest[1]], "--queries", root / "queries.jsonl", "--output",
                                   tmp_path / "run", "--exact-index", root / "pisa"]
    code, _, err = run_command(main, [*base, *rest], capsys)
    assert_one_error_line(code, err, *fragments)
    assert not (tmp_path / "x").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, fragment", [
    (["--engine", "pisa", "--alpha", "0.5"], "--alpha is a bmp option"),
    (["--engine", "seismic", "--alpha", "0.5"], "--alpha is a bmp option"),
    (["--engine", "seismic"], "give one of --exact-index"),
    (["--engine", "lucene", "--exact-index", "x"], "--exact-index measures an approximate run"),
])
def test_knobs_and_references_given_to_the_wrong_engine_are_one_line(built, tmp_path, capsys, argv, fragment):
    root, _, _, indexes = built
    code, _, err = run_command(search_main, ["--index", indexes["seismic"], "--queries", root / "queries.jsonl",
                                             "--output", tmp_path / "run", *argv], capsys)
    assert_one_error_line(code, err, fragment)


def test_an_exact_index_of_other_vectors_is_refused(built, tmp_path, capsys):
    root, _, _, indexes = built
    other = write_vectors(tmp_path / "other", {"a": {"paris": 1}})
    build_pisa_index(other, tmp_path / "pisa", threads=1)
    code, _, err = run_command(search_main, ["--engine", "bmp", "--index", indexes["bmp"], "--queries",
                                             root / "queries.jsonl", "--output", tmp_path / "run", "--exact-index",
                                             tmp_path / "pisa"], capsys)
    assert_one_error_line(code, err, "a PISA index of other vectors")


def _copy(index, tmp_path):
    import shutil

    return shutil.copytree(index, tmp_path / index.name)


@pytest.mark.parametrize("damage, fragment", [
    ("flip a byte of the engine's file", "SHA-256 is not the one"),
    ("grow the engine's file", "bytes, but vtrepro-approximate.json says"),
    ("manifest claims a huge file", "more than the"),
    ("manifest of another engine", "a 'seismic' index, not a bmp one"),
    ("manifest names another file", "names the file"),
    ("no manifest", "not an approximate index"),
    ("a FIFO in the folder", "not a regular file"),
    ("terms file rewritten with its checksum", "not 'term<TAB>largest impact'"),
])
def test_an_approximate_index_from_elsewhere_is_opened_only_when_its_manifest_holds(built, tmp_path, capsys, damage,
                                                                                     fragment):
    """Nothing reaches the engine's loader (bincode, no pickle) until the manifest's types, the engine, each
    file's size (within a bound the manifest's postings give, and half the memory) and its SHA-256 hold."""
    from vtrepro.core.io import sha256_file

    root, _, _, indexes = built
    index = _copy(indexes["bmp"], tmp_path)
    meta_path = index / META_NAME
    meta = json.loads(meta_path.read_text())
    engine_file = index / meta["index_file"]
    if damage == "flip a byte of the engine's file":
        data = bytearray(engine_file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        engine_file.write_bytes(bytes(data))
    elif damage == "grow the engine's file":
        engine_file.write_bytes(engine_file.read_bytes() + b"\0")
    elif damage == "manifest claims a huge file":  # one posting's bound is about 16 MiB: a sparse 17 MiB file
        os.truncate(engine_file, 17 * 2**20)
        meta.update(index_bytes=17 * 2**20, postings=1, documents=1)
    elif damage == "manifest of another engine":
        meta["engine"] = "seismic"
    elif damage == "manifest names another file":
        meta["index_file"] = "../elsewhere.bmp"
    elif damage == "no manifest":
        meta_path.unlink()
    elif damage == "a FIFO in the folder":
        os.mkfifo(index / "fifo")
    elif damage == "terms file rewritten with its checksum":
        (index / TERMS_NAME).write_text("paris\tmany\n")
        meta.update(terms_bytes=(index / TERMS_NAME).stat().st_size, terms_sha256=sha256_file(index / TERMS_NAME))
    if meta_path.exists():
        meta_path.write_text(json.dumps(meta))
    code, _, err = run_command(search_main, ["--engine", "bmp", "--index", index, "--queries", root / "queries.jsonl",
                                             "--output", tmp_path / "run", "--exact-index", root / "pisa"], capsys)
    assert_one_error_line(code, err, fragment)
    assert not (tmp_path / "run").exists()


def test_a_bmp_query_whose_16_bit_sum_could_wrap_is_refused(built, tmp_path):
    """BMP's 16-bit score wraps past 65,535 (the best documents would sink): a query whose rescaled weights x its
    terms' largest held impacts could reach it is refused, naming the fix."""
    from vtrepro.core.errors import VtreproError

    root, vectors, _, _ = built
    wide = write_vectors(tmp_path / "wide", {f"d{number}": {f"w{term}": 255 for term in range(10)} for number in range(100)})
    build_approximate_index("bmp", wide, tmp_path / "bmp", BmpIndexOptions(max_impact=255), threads=1)
    query = {f"w{term}": 7 for term in range(10)}  # 10 x 32 x 255 = 81,600
    assert BMP_SCORE_LIMIT <= 10 * 32 * 255
    with pytest.raises(VtreproError, match="rebuild the BMP index with a lower --max-impact"):
        search_approximate("bmp", tmp_path / "bmp", {"q": query}, 10)
    assert search_approximate("bmp", tmp_path / "bmp", {"q": dict(list(query.items())[:8])}, 10)["q"]  # 65,280


@needs_seismic
def test_seismic_built_document_by_document_searches_as_by_number(built, tmp_path):
    """pyseismic-lsr before 0.5.4 (the newest wheel for Python 3.12) lacks add_documents_by_id: the terms then go
    in one document at a time as their numbers' text, and the index answers the same."""
    import numpy as np
    import seismic

    from vtrepro.encode.reader import vector_files

    _, vectors, queries, _ = built
    collection = read_collection(vector_files(vectors), 300)
    found = {}
    for by_number in (True, False):
        folder = tmp_path / f"by-{by_number}"
        folder.mkdir()
        _build_seismic(collection, folder, SeismicIndexOptions(n_postings=10_000, summary_energy=1.0), 1, by_number)
        index = seismic.SeismicIndex.load(str(folder / "index.seismic"))
        numbers = {term: str(number) for number, term in enumerate(collection.terms)}
        found[by_number] = {}
        for qid, vector in queries.items():
            known = [(numbers[term], weight) for term, weight in vector.items() if term in numbers]
            components = np.asarray([name for name, _ in known], dtype=seismic.get_seismic_string())
            values = np.asarray([weight for _, weight in known], dtype=np.float32)
            hits = index.search(qid, components, values, k=20, query_cut=1000, heap_factor=0.01) if known else []
            found[by_number][qid] = sorted((doc, score) for _, score, doc in hits)
    assert found[True] == found[False] and any(found[True].values())


@pytest.mark.slow
def test_bench_search_measures_the_approximate_engines_against_lucene(built, tmp_path, capsys):
    from vtrepro.bench.command import main as bench_main

    root, vectors, _, _ = built
    engines = "lucene,pisa,seismic,bmp" if HAS_SEISMIC else "lucene,pisa,bmp"
    argv = ["search", "--vectors", vectors, "--queries", root / "queries.jsonl", "--k", "100", "--threads", "1",
            "--index-dir", tmp_path / "indexes", "--engines", engines]
    code, out, err = run_command(bench_main, argv, capsys)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["seismic"], ["bmp"])}
    assert set(rows) == set(engines.split(",")[2:])
    assert all(0 <= float(row[-2]) <= 1 and row[-1] == "-" for row in rows.values())  # R@10; R@1000 past k=100
    assert "runs: identical (2 runs" in out  # the exact engines' runs alone are compared
    code, out, _ = run_command(bench_main, argv, capsys)
    assert code == 0 and out.count("kept") == len(engines.split(","))  # every index kept the second time
