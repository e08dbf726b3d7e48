"""Impact and BM25 search with Anserini (Lucene): the reference engine.

:func:`search_impact` scores each document by the exact integer dot product of its and the query's
vector; :func:`search_bm25` ranks by BM25 with Anserini's default analyzer, and
:func:`search_pretokenized_bm25` by BM25 over terms taken as they are (an index of
:func:`vtrepro.index.lucene.build_pretokenized_bm25_index`). Anserini lowers tied scores by a few ulps to
encode its docid tie-break, and that adjustment is undone here, since every impact score is an integer by
construction; the order and cut are :func:`vtrepro.search.runs.top_hits`'.

Runs do not depend on how the index was built (threads, segments, merged or not). Anserini (1.6, 1.7) sorts
a Lucene 9 index's hits by score then the ``id`` field, so its top ``depth`` is already the top by score then
document id; the search also goes deeper while the last hit ties the cut
(:func:`vtrepro.search.runs.search_until_complete`), which makes impact runs exact whatever the engine's
tie-break (Anserini breaks ties by Lucene's internal order on Lucene 8 indexes, where it also leaves BM25
scores unadjusted, so the same completion makes those runs exact too).
The ``search`` command (:mod:`vtrepro.search.command`) runs either this engine or PISA.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.core.errors import VtreproError
from vtrepro.core.java import java_class
from vtrepro.core.progress import Progress
from vtrepro.encode.reader import MAX_IMPACT
from vtrepro.index.lucene import check_terms
from vtrepro.index.lucene_checks import index_errors, verified_index
from vtrepro.search.runs import (
    Bm25Options,
    Hits,
    Run,
    SearchOptions,
    SearchTiming,
    check_exact_score,
    check_exact_weights,
    check_query_weights,
    hits_per_query,
    rank_hits,
    search_until_complete,
    top_hits,
)

SEARCH_BATCH = 256
TIE_ADJUSTMENT_LIMIT = 500_000
"""Anserini lowers the i-th hit of a run of tied scores by i x 1e-6 (its tie-break, for trec_eval); an impact
score rounds back to its integer while that is below 0.5, so an impact search returning more hits is refused."""


def _ranked(hits, qid: str, integer_scores: bool) -> Hits:
    """One query's Anserini hits by score then document id, impact scores rounded back to the integers they are."""
    hits = list(hits or [])
    if not integer_scores:
        return rank_hits((hit.docid, float(hit.score)) for hit in hits)
    if hits:  # the top hit scores highest: below 2^24 it and every hit after it are exact
        check_exact_score(qid, hits[0].score)
    if len(hits) >= TIE_ADJUSTMENT_LIMIT:
        raise VtreproError(f"query '{qid}': {len(hits):,} hits tie at the cut, more than Lucene's scores can tell "
                           f"apart ({TIE_ADJUSTMENT_LIMIT:,}); search this index with --engine pisa")
    return rank_hits((hit.docid, float(round(hit.score))) for hit in hits)


def _java_list(items) -> object:
    array_list = java_class("java.util.ArrayList")()
    for item in items:
        array_list.add(item)
    return array_list


def search_impact(index_dir: str | Path, queries: Mapping[str, Mapping[str, int]], k: int = SearchOptions.k,
                  threads: int = DEFAULT_THREADS, remove_query_id: bool = True, timing: SearchTiming | None = None) -> Run:
    """Impact search: each document scores the integer dot product of its and the query's vector;
    ``timing``, when given, receives the search's wall time (per query with one thread)."""
    integer = java_class("java.lang.Integer")
    hash_map = java_class("java.util.HashMap")
    qids = list(queries)
    java_queries = []
    for qid in qids:
        check_query_weights(qid, queries[qid], 0, f"weights must be integers in 0..{MAX_IMPACT} (quantize query vectors)")
        check_exact_weights(qid, queries[qid])
        query = hash_map()
        for term, weight in queries[qid].items():
            query.put(term, integer(weight))
        java_queries.append(query)
    longest = max((len(vector) for vector in queries.values()), default=0)
    index_searcher = java_class("org.apache.lucene.search.IndexSearcher")
    if longest > index_searcher.getMaxClauseCount():  # dense queries (an untrained model) have thousands of terms
        index_searcher.setMaxClauseCount(longest)
    with index_errors(index_dir):
        searcher = java_class("io.anserini.search.SimpleImpactSearcher")(verified_index(index_dir))
    try:
        return _search_all(searcher, java_queries, qids, k, threads, remove_query_id, True, timing)
    finally:
        searcher.close()


def search_bm25(
    index_dir: str | Path,
    queries: Mapping[str, str],
    k: int = SearchOptions.k,
    threads: int = DEFAULT_THREADS,
    k1: float = Bm25Options.k1,
    b: float = Bm25Options.b,
    remove_query_id: bool = True,
    timing: SearchTiming | None = None,
) -> Run:
    """BM25 search with Anserini's default analyzer (``timing`` as for :func:`search_impact`)."""
    qids = list(queries)
    with _bm25_searcher(index_dir, k1, b) as searcher:
        return _search_all(searcher, [queries[qid] for qid in qids], qids, k, threads, remove_query_id, False, timing)


WHITESPACE_ANALYZER = "org.apache.lucene.analysis.core.WhitespaceAnalyzer"
"""The analyzer Anserini's ``-pretokenized`` indexes with (Lucene 9 and 10 alike): terms split on whitespace, kept
as they are."""


def search_pretokenized_bm25(
    index_dir: str | Path,
    queries: Mapping[str, Sequence[str]],
    k: int = SearchOptions.k,
    threads: int = DEFAULT_THREADS,
    k1: float = Bm25Options.k1,
    b: float = Bm25Options.b,
    remove_query_id: bool = True,
    timing: SearchTiming | None = None,
) -> Run:
    """BM25 search of a :func:`vtrepro.index.lucene.build_pretokenized_bm25_index` index with each query's terms
    taken as they are (``timing`` as for :func:`search_impact`).

    Anserini's ``SimpleSearcher`` searches with Lucene's ``WhitespaceAnalyzer`` (the one ``-pretokenized``
    indexed with) and its bag-of-words query: one clause per distinct term, boosted by how often the query
    holds it, so a term given twice scores twice (BM25's query-term frequency, as Anserini counts a repeated word
    of a text query). The terms are checked as the index's are (:func:`vtrepro.index.lucene.check_terms`: one line
    naming the query); a query of no terms, or of terms no document holds, has no hits. A query of more distinct
    terms than Lucene's clause limit (1024) raises that limit, as :func:`search_impact` does. Scores are Anserini's
    as :func:`search_bm25` returns them (and Pyserini's ``LuceneSearcher`` with that analyzer): Lucene's BM25
    rounded to four decimals, documents tied there lowered by 1e-6 each in document id order. Runs are by score,
    ties by document id, whatever the threads or the index's segments (:func:`_search_all`)."""
    texts = {qid: " ".join(check_terms(f"query '{qid}'", terms)) for qid, terms in queries.items()}
    longest = max((len(set(terms)) for terms in queries.values()), default=0)
    index_searcher = java_class("org.apache.lucene.search.IndexSearcher")
    if longest > index_searcher.getMaxClauseCount():
        index_searcher.setMaxClauseCount(longest)
    qids = list(texts)
    with _bm25_searcher(index_dir, k1, b, java_class(WHITESPACE_ANALYZER)()) as searcher:
        return _search_all(searcher, [texts[qid] for qid in qids], qids, k, threads, remove_query_id, False, timing)


@contextlib.contextmanager
def _bm25_searcher(index_dir: str | Path, k1: float, b: float, analyzer: Any = None) -> Iterator[Any]:
    """Anserini's ``SimpleSearcher`` on the verified index, scoring BM25 with ``k1`` and ``b``, analyzing queries
    with its default analyzer or ``analyzer``; closed after the block."""
    with index_errors(index_dir):
        searcher = java_class("io.anserini.search.SimpleSearcher")(verified_index(index_dir))
    try:
        if analyzer is not None:
            searcher.set_analyzer(analyzer)
        searcher.set_bm25(float(k1), float(b))
        yield searcher
    finally:
        searcher.close()


def _search_all(searcher, queries: list, qids: list[str], k: int, threads: int, remove_query_id: bool,
                integer_scores: bool, timing: SearchTiming | None) -> Run:
    """Every query's hits: one query per call with one thread (each query timed), else ``SEARCH_BATCH``
    queries per call across the threads. A query's hits depend on neither (Anserini's batch search
    runs the same single-query search), nor on the index's internal order (:func:`search_until_complete`)."""
    timing = timing if timing is not None else SearchTiming()
    timing.threads, timing.queries, timing.latencies = threads, len(qids), []
    run: Run = {}
    documents = searcher.get_total_num_docs()
    k = hits_per_query(k, documents, len(qids))
    wanted = k + int(remove_query_id)

    def search(positions: list[int], depth: int) -> list[Hits]:
        if threads == 1:
            return [_ranked(searcher.search(queries[position], depth), qids[position], integer_scores)
                    for position in positions]
        ids = [qids[position] for position in positions]
        found = searcher.batch_search(_java_list([queries[position] for position in positions]), _java_list(ids),
                                      depth, threads)
        return [_ranked(found.get(qid), qid, integer_scores) for qid in ids]

    started = time.perf_counter()
    with Progress(len(qids), "search", "query") as progress:
        step = 1 if threads == 1 else SEARCH_BATCH
        for start in range(0, len(qids), step):
            began = time.perf_counter()
            batch = list(range(start, min(start + step, len(qids))))
            found = search_until_complete(search, batch, wanted, documents, progress.update)
            if threads == 1:
                timing.latencies.append(time.perf_counter() - began)
            run.update((qids[position], top_hits(qids[position], hits, k, remove_query_id, ranked=True))
                       for position, hits in zip(batch, found))
    timing.seconds = time.perf_counter() - started
    return run
