"""Real Anserini search on small hand-made collections: exact integer scores, ties, run files."""
import json

import pytest

from helpers import HAND_MADE_DOCS
from vtrepro.core.errors import VtreproError
from vtrepro.encode.vectors import escape_term
from vtrepro.evaluate.trec import evaluate_run
from vtrepro.index.lucene import build_bm25_index, build_impact_index
from vtrepro.index.lucene_checks import index_stats
from vtrepro.search.lucene import search_bm25, search_impact
from vtrepro.search.runs import read_trec_run, write_trec_run


def dot(query, doc):
    return sum(weight * HAND_MADE_DOCS[doc].get(term, 0) for term, weight in query.items())


def test_scores_are_integer_dot_products_and_query_id_is_removed(impact_index):
    index, _ = impact_index
    queries = {"q1": {"paris": 3, "france": 2, escape_term("new york"): 1}, "q2": {"texas": 1}}
    run = search_impact(index, queries, k=10)
    assert "q1" not in run["q1"]  # its own id is dropped
    for qid, hits in run.items():
        assert hits == {doc: float(dot(queries[qid], doc)) for doc in hits}
    assert list(run["q1"]) == ["d1", "d3", "d2"]
    assert search_impact(index, {"q1": {"paris": 1}}, k=10, remove_query_id=False)["q1"].get("q1") == 50.0


def test_ties_are_broken_by_document_id(impact_index):
    index, _ = impact_index
    run = search_impact(index, {"x": {"paris": 1, "texas": 0}}, k=2, remove_query_id=False)
    assert list(run["x"].items()) == [("q1", 50.0), ("d1", 30.0)]
    tied = search_impact(index, {"x": {"paris": 1}}, k=10)
    assert [doc for doc, score in tied["x"].items() if score == 10.0] == ["d2", "d3"]


def test_non_integer_query_weight_is_rejected(impact_index):
    index, _ = impact_index
    with pytest.raises(VtreproError, match="must be integers"):
        search_impact(index, {"q": {"paris": 1.5}})


def test_bm25_index_search_and_run_file_round_trip(tmp_path):
    docs = [("a", "the cat sat on the mat"), ("b", "dogs chase cats"), ("c", "quantum chromodynamics")]
    stats = build_bm25_index(docs, tmp_path / "bm25")
    assert stats["documents"] == 3
    run = search_bm25(tmp_path / "bm25", {"q": "cat", "c": "quantum"}, k=10)
    assert set(run["q"]) == {"a", "b"}  # the default analyzer stems 'cats'
    assert run["c"] == {}  # only matching document is the query's own id
    write_trec_run(run, tmp_path / "run.trec")
    assert read_trec_run(tmp_path / "run.trec") == {"q": {doc: round(score, 6) for doc, score in run["q"].items()}}
    scores = evaluate_run(run, {"q": {"a": 1}, "c": {"c": 1}})
    assert scores["ndcg@10"] == 0.5  # "c" has no results and counts as 0
    assert index_stats(tmp_path / "bm25")["documents"] == 3


def test_dense_queries_beyond_lucene_clause_limit(tmp_path):
    terms = [f"t{index}" for index in range(3000)]
    folder = tmp_path / "vectors"
    folder.mkdir()
    with open(folder / "part-00000.jsonl", "w") as handle:
        handle.write(json.dumps({"id": "dense", "contents": "", "vector": {term: 1 for term in terms}}) + "\n")
        handle.write(json.dumps({"id": "sparse", "contents": "", "vector": {"t7": 5}}) + "\n")
    build_impact_index(folder, tmp_path / "index")
    run = search_impact(tmp_path / "index", {"q": {term: 2 for term in terms}}, k=10)
    assert run["q"] == {"dense": 6000.0, "sparse": 10.0}
