"""Real Anserini BM25 over pretokenized terms: a hand-made index searched, its scores against Lucene's BM25 by hand.

Lucene 9's and 10's BM25Similarity: idf = ln(1 + (N - n + 0.5) / (n + 0.5)), each distinct query term scoring
boost x idf x f / (f + k1 (1 - b + b dl / avgdl)), where a term the query repeats is boosted by its count
(Anserini's bag of words). Lucene keeps document lengths in one byte, exact below 40 terms: every length here is
5 or less. Anserini rounds each score to four decimals (its ScoreTiesAdjusterReranker), so a score is the hand
value within 5e-5 (plus float32's error)."""
import math

import pytest

from vtrepro.core.errors import VtreproError
from vtrepro.index.lucene import build_pretokenized_bm25_index
from vtrepro.search.lucene import search_pretokenized_bm25
from vtrepro.search.runs import Bm25Options

DOCS = {
    "d1": ["t1", "t2", "t2"],
    "d2": ["t2", "t3"],
    "d3": ["t1", "t1", "t1", "t3", "t4"],
    "d4": ["Apple", "running"],
    "d5": ["apple", "runs", "t4"],
    "d6": [],  # no terms: not indexed, as a document without text is not
}
QUERIES = {
    "one": ["t1"],
    "two": ["t2", "t3"],
    "repeated": ["t2", "t2", "t4"],
    "Apple": ["Apple"],
    "apple": ["apple"],
    "running": ["running"],
    "run": ["run"],  # no stemming: 'running' and 'runs' do not match
    "nothing": [],
}
ANSERINI_ROUNDING = 5e-5 + 1e-6


def hand_bm25(query, k1=Bm25Options.k1, b=Bm25Options.b):
    """Each indexed document's BM25 for ``query`` by Lucene's formula, in doubles."""
    indexed = {doc: terms for doc, terms in DOCS.items() if terms}
    average = sum(map(len, indexed.values())) / len(indexed)
    scores = {}
    for doc, terms in indexed.items():
        score = 0.0
        for term in set(query):
            frequency, holding = terms.count(term), sum(term in other for other in indexed.values())
            if frequency:
                idf = math.log(1 + (len(indexed) - holding + 0.5) / (holding + 0.5))
                score += query.count(term) * idf * frequency / (frequency + k1 * (1 - b + b * len(terms) / average))
        if score:
            scores[doc] = score
    return scores


@pytest.fixture(scope="module")
def pretokenized_index(tmp_path_factory):
    """The hand-made collection indexed once (two Anserini threads): (folder, stats)."""
    index = tmp_path_factory.mktemp("pretokenized") / "index"
    return index, build_pretokenized_bm25_index(DOCS.items(), index, threads=2)


def test_index_holds_every_term_as_given_and_skips_a_document_without_terms(pretokenized_index):
    _, stats = pretokenized_index
    indexed = [terms for terms in DOCS.values() if terms]
    assert stats["documents"] == len(indexed) == 5
    assert stats["total_terms"] == sum(map(len, indexed))
    assert stats["unique_terms"] == len({term for terms in indexed for term in terms})  # Apple, apple: two


def test_scores_and_ranking_are_lucene_bm25_by_hand(pretokenized_index):
    index, _ = pretokenized_index
    run = search_pretokenized_bm25(index, QUERIES, k=10, threads=1)
    for qid, query in QUERIES.items():
        expected = hand_bm25(query)
        assert list(run[qid]) == sorted(expected, key=lambda doc: -expected[doc]), qid
        assert run[qid] == pytest.approx(expected, abs=ANSERINI_ROUNDING), qid
    assert list(run["two"]) == ["d2", "d1", "d3"]
    assert run["repeated"]["d1"] == pytest.approx(2 * hand_bm25(["t2"])["d1"], abs=ANSERINI_ROUNDING)
    assert search_pretokenized_bm25(index, QUERIES, k=10, threads=2) == run


def test_case_is_kept_and_nothing_is_stemmed(pretokenized_index):
    index, _ = pretokenized_index
    run = search_pretokenized_bm25(index, QUERIES, k=10, threads=1)
    assert list(run["Apple"]) == ["d4"] and list(run["apple"]) == ["d5"]
    assert list(run["running"]) == ["d4"]
    assert run["run"] == {} and run["nothing"] == {}


@pytest.mark.parametrize("terms, problem", [(["t1", "t2 t3"], "holds whitespace"), (["t1\tt2"], "holds whitespace"),
                                            (["t1", ""], "is empty"), ("t1 t2", "not one str")])
def test_a_term_lucene_would_split_or_drop_is_refused_in_one_line(tmp_path, pretokenized_index, terms, problem):
    with pytest.raises(VtreproError, match=f"document 'bad'.*{problem}") as error:
        build_pretokenized_bm25_index([("d1", ["t1"]), ("bad", terms)], tmp_path / "index")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "index").exists()
    with pytest.raises(VtreproError, match=f"query 'bad'.*{problem}") as error:
        search_pretokenized_bm25(pretokenized_index[0], {"ok": ["t1"], "bad": terms})
    assert "\n" not in str(error.value)
