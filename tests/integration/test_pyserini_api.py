"""Pyserini's own LuceneImpactSearcher on vtrepro's indexes through vtrepro.search.pyserini: started on
vtrepro's JVM without an OpenAI key, fed vtrepro's exact query vectors, it returns vtrepro's run. Pyserini 2.4
reads its prebuilt-index catalogue from GitHub when pyserini.search is imported: offline, those tests skip.
Pyserini's LuceneSearcher with a whitespace analyzer searches a pretokenized BM25 index as vtrepro does."""
import json
import os

import pytest

from helpers import assert_one_error_line, run_command
from vtrepro.core.anserini import installed_release
from vtrepro.core.errors import VtreproError
from vtrepro.encode.reader import read_query_vectors
from vtrepro.encode.vectors import escape_term
from vtrepro.index.lucene import build_impact_index, build_pretokenized_bm25_index
from vtrepro.search.command import pyserini_main
from vtrepro.search.lucene import search_impact, search_pretokenized_bm25
from vtrepro.search.pyserini import (
    OPENAI_KEY_VARIABLE,
    EncodedQueries,
    QueryVectors,
    hits_to_run,
    impact_searcher,
    placeholder_openai_key,
    start_pyserini,
)
from vtrepro.search.runs import read_trec_run

K = 1000  # the regression's k


def _write_queries(path, queries):
    path.write_text("".join(json.dumps({"id": qid, "contents": text, "vector": vector}) + "\n"
                            for qid, (text, vector) in queries.items()))
    return path


@pytest.fixture
def pyserini_search():
    """Pyserini's ``pyserini.search`` imported on vtrepro's JVM, or the test skipped where the installed Pyserini
    cannot import it offline (one error line from start_pyserini, shown as the reason)."""
    try:
        start_pyserini()
    except VtreproError as error:
        if not installed_release().online_registry:
            raise
        pytest.skip(str(error))


def test_the_placeholder_key_lives_only_during_the_import_and_never_replaces_the_users(monkeypatch):
    monkeypatch.delenv(OPENAI_KEY_VARIABLE, raising=False)
    with placeholder_openai_key():
        assert os.environ[OPENAI_KEY_VARIABLE]
    assert OPENAI_KEY_VARIABLE not in os.environ
    monkeypatch.setenv(OPENAI_KEY_VARIABLE, "the-users-key")
    with placeholder_openai_key():
        assert os.environ[OPENAI_KEY_VARIABLE] == "the-users-key"
    assert os.environ[OPENAI_KEY_VARIABLE] == "the-users-key"


@pytest.mark.slow  # starts the JVM and imports Pyserini (about 15 s alone)
def test_pyserini_searches_escaped_terms_terms_every_document_holds_and_long_queries(tmp_path, monkeypatch,
                                                                                    pyserini_search):
    """A term in every document has idf 0, which Pyserini's default min_idf drops; '%'-escaped terms match;
    a query of more terms than Lucene's 1024 clauses is searched."""
    monkeypatch.delenv(OPENAI_KEY_VARIABLE, raising=False)
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    york, percent = escape_term("new york"), escape_term("100%")
    many = {f"t{number}": 1 for number in range(1100)}
    docs = {"d1": {"shared": 3, york: 7}, "d2": {"shared": 5, "texas": 2}, "d3": {"shared": 1, percent: 4},
            "d4": {"shared": 1, **many}}
    (vectors / "part-00000.jsonl").write_text(
        "".join(json.dumps({"id": doc_id, "contents": "", "vector": vector}) + "\n" for doc_id, vector in docs.items()))
    build_impact_index(vectors, tmp_path / "index")
    queries = {"q1": ("shared", {"shared": 2}), "q2": ("new york", {york: 3, "shared": 1}),
               "q3": ("100% texas", {percent: 2, "texas": 1}), "q4": ("many", many)}
    encoder = EncodedQueries(_write_queries(tmp_path / "queries.jsonl", queries))
    searcher = impact_searcher(tmp_path / "index", encoder)
    try:
        hits = searcher.batch_search([text for text, _ in queries.values()], list(queries), k=5)
    finally:
        searcher.close()
    assert OPENAI_KEY_VARIABLE not in os.environ
    assert hits_to_run(hits, 4) == {"q1": {"d2": 10.0, "d1": 6.0, "d3": 2.0, "d4": 2.0},
                                    "q2": {"d1": 24.0, "d2": 5.0, "d3": 1.0, "d4": 1.0},
                                    "q3": {"d3": 8.0, "d2": 2.0}, "q4": {"d4": 1100.0}}
    assert hits_to_run(hits, 4) == search_impact(tmp_path / "index", {qid: vector for qid, (_, vector) in
                                                                      queries.items()}, k=4)



def test_pyserini_searches_a_pretokenized_bm25_index_as_vtrepro_does(tmp_path, pyserini_search):
    """Pyserini's own LuceneSearcher, given Lucene's whitespace analyzer and BM25, returns vtrepro's hits and
    scores on a pretokenized index: case kept, a repeated query term counted, two tied documents in the same
    order with Anserini's same tie nudge."""
    from pyserini.analysis import JWhiteSpaceAnalyzer
    from pyserini.search.lucene import LuceneSearcher

    docs = {"d1": ["t1", "t2", "t2"], "d2": ["t2", "t3"], "d3": ["t1", "t1", "t1", "t3", "t4"],
            "d4": ["Apple", "t4"], "d5": ["apple", "t4", "t4"], "d6": ["t3", "t5"], "d7": ["t3", "t5"]}
    queries = {"q1": ["t1", "t4"], "q2": ["t2", "t2", "t3"], "q3": ["Apple", "t4"], "q4": ["apple"], "q5": ["t5"]}
    build_pretokenized_bm25_index(docs.items(), tmp_path / "index")
    run = search_pretokenized_bm25(tmp_path / "index", queries, k=len(docs), k1=1.2, b=0.75, remove_query_id=False)
    searcher = LuceneSearcher(str(tmp_path / "index"))
    try:
        searcher.set_analyzer(JWhiteSpaceAnalyzer())
        searcher.set_bm25(1.2, 0.75)
        found = {qid: [(hit.docid, hit.score) for hit in searcher.search(" ".join(terms), k=len(docs))]
                 for qid, terms in queries.items()}
    finally:
        searcher.close()
    assert found == {qid: list(hits.items()) for qid, hits in run.items()}
    assert found["q3"][0][0] == "d4" and [doc for doc, _ in found["q4"]] == ["d5"]  # 'Apple' only in d4
    assert [doc for doc, _ in found["q5"]] == ["d6", "d7"]

def test_encoded_queries_look_up_by_text_or_id_and_refuse_what_they_do_not_hold(tmp_path):
    path = _write_queries(tmp_path / "queries.jsonl", {"q1": ("paris ", {"paris": 2}), "q2": ("texas", {"texas": 1})})
    assert EncodedQueries(path).encode(" paris") == {"paris": 2}
    assert EncodedQueries(path, by="id").encode("q2") == {"texas": 1}
    with pytest.raises(VtreproError, match="no query with text 'rome'"):
        EncodedQueries(path).encode("rome")
    clash = _write_queries(tmp_path / "clash.jsonl", {"q1": ("paris", {"paris": 2}), "q2": ("paris", {"paris": 3})})
    with pytest.raises(VtreproError, match="repeats another query's text"):
        EncodedQueries(clash)
    assert EncodedQueries(clash, by="id").encode("q2") == {"paris": 3}
    with pytest.raises(VtreproError, match="by must be"):
        EncodedQueries(path, by="qid")


def _assert_pyserini_gives_the_run(folder, encoder, texts, qids):
    """Pyserini's hits as it returns them (its order, Anserini's scores) are the run file's top 1000, and so
    is the cut vtrepro makes of them."""
    searcher = impact_searcher(folder / "index", encoder)
    try:
        hits = searcher.batch_search(texts, qids, k=K + 1, threads=2)  # + 1: the query's own id is removed
    finally:
        searcher.close()
    expected = read_trec_run(folder / "run.trec")
    assert set(hits) == set(expected) == set(qids)
    for qid in qids:
        kept = [hit for hit in hits[qid] if hit.docid != qid][:K]
        assert [hit.docid for hit in kept] == list(expected[qid]), qid  # same documents, same ranks
        assert [round(hit.score) for hit in kept] == list(expected[qid].values()), qid  # same scores
        assert all(abs(hit.score - round(hit.score)) < 1e-3 for hit in kept)  # Anserini's tie-break nudge only
    assert hits_to_run(hits, K) == expected


@pytest.mark.slow
def test_pyserini_reproduces_the_regression_run_from_its_queries_jsonl(splade_tiny_run, pyserini_search):
    folder = splade_tiny_run[1] / "splade-tiny" / "scifact"
    encoder = EncodedQueries(folder / "queries.jsonl")
    _assert_pyserini_gives_the_run(folder, encoder, list(encoder.texts.values()), list(encoder.texts))


@pytest.mark.slow
def test_pyserini_reproduces_the_regression_run_encoding_the_query_texts(splade_tiny_run, splade_tiny, pyserini_search):
    from vtrepro.model.encoder_options import EncoderOptions

    folder = splade_tiny_run[1] / "splade-tiny" / "scifact"
    recorded = read_query_vectors(folder / "queries.jsonl")
    texts = EncodedQueries(folder / "queries.jsonl").texts
    # the spec's encoder options (regressions/beir_splade_tiny.yaml); x100 half-even is the default quantization
    encoder = QueryVectors.from_model(splade_tiny, EncoderOptions(max_length_doc=512, max_length_query=64,
                                                                  batch_size=32))
    encoder.prepare(list(texts.values()))
    assert {qid: encoder.encode(text) for qid, text in texts.items()} == recorded
    first = next(iter(texts))
    assert QueryVectors(encoder.encoder).encode(texts[first]) == recorded[first]  # one query alone, unprepared
    _assert_pyserini_gives_the_run(folder, encoder, list(texts.values()), list(texts))


@pytest.mark.parametrize("module", ["search.no_such_module", "no_such_package.lucene", "../search"])
def test_the_pyserini_command_refuses_a_module_pyserini_lacks_in_one_line(module, capsys, pyserini_search):
    code, _, stderr = run_command(pyserini_main, [module, "--help"], capsys)
    assert_one_error_line(code, stderr, f"'{module}' is not a module of the installed Pyserini")


def test_the_pyserini_command_on_topics_pyserini_cannot_read_is_one_line(tmp_path, capsys, pyserini_search,
                                                                          impact_index):
    """Hostile review (issue 44): Pyserini's own AttributeError on a JSONL topics file without its fields used to
    be exit 3, an internal error of vtrepro's; it is Pyserini's failure on that input, one line."""
    topics = tmp_path / "topics.jsonl"
    topics.write_text(json.dumps({"id": "q1", "vector": {"paris": 1}}) + "\n")
    code, _, stderr = run_command(pyserini_main, ["search.lucene", "--index", impact_index[0], "--topics", topics,
                                                  "--output", tmp_path / "run.trec", "--impact"], capsys)
    assert_one_error_line(code, stderr, "pyserini.search.lucene failed (AttributeError", "check its arguments")
