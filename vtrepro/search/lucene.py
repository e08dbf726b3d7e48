"""Impact and BM25 search with Anserini (Lucene): the reference engine.

:func:`search_impact` scores each document by the exact integer dot product of its and the query's
vector; :func:`search_bm25` ranks by BM25 with Anserini's default analyzer. Anserini lowers tied scores
by a few ulps to encode its docid tie-break, and that adjustment is undone here, since every impact
score is an integer by construction; the order and cut are :func:`vtrepro.search.runs.top_hits`'.
The ``search`` command (:mod:`vtrepro.search.command`) runs either this engine or PISA.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

from vtrepro.core.java import java_class
from vtrepro.core.progress import Progress
from vtrepro.encode.reader import MAX_IMPACT
from vtrepro.index.lucene import index_errors, verified_index
from vtrepro.search.runs import (
    Bm25Options,
    Run,
    SearchOptions,
    SearchTiming,
    check_exact_score,
    check_exact_weights,
    check_query_weights,
    hits_per_query,
    top_hits,
)

SEARCH_BATCH = 256


def _collect(hits_by_qid, qids: list[str], k: int, remove_query_id: bool, integer_scores: bool) -> Run:
    """Each query's Anserini hits as a run, impact scores rounded back to the integers they are."""
    score_of = (lambda hit: float(round(hit.score))) if integer_scores else (lambda hit: float(hit.score))
    if integer_scores:  # the top hit scores highest: below 2^24 it and every hit after it are exact
        for qid in qids:
            for hit in (hits_by_qid.get(qid) or [])[:1]:
                check_exact_score(qid, hit.score)
    return {qid: top_hits(qid, ((hit.docid, score_of(hit)) for hit in hits_by_qid.get(qid) or []), k, remove_query_id)
            for qid in qids}


def _java_list(items) -> object:
    array_list = java_class("java.util.ArrayList")()
    for item in items:
        array_list.add(item)
    return array_list


def search_impact(index_dir: str | Path, queries: Mapping[str, Mapping[str, int]], k: int = SearchOptions.k, threads: int = 1,
                  remove_query_id: bool = True, timing: SearchTiming | None = None) -> Run:
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
    threads: int = 1,
    k1: float = Bm25Options.k1,
    b: float = Bm25Options.b,
    remove_query_id: bool = True,
    timing: SearchTiming | None = None,
) -> Run:
    """BM25 search with Anserini's default analyzer (``timing`` as for :func:`search_impact`)."""
    qids = list(queries)
    with index_errors(index_dir):
        searcher = java_class("io.anserini.search.SimpleSearcher")(verified_index(index_dir))
    try:
        searcher.set_bm25(float(k1), float(b))
        return _search_all(searcher, [queries[qid] for qid in qids], qids, k, threads, remove_query_id, False, timing)
    finally:
        searcher.close()


def _search_all(searcher, queries: list, qids: list[str], k: int, threads: int, remove_query_id: bool,
                integer_scores: bool, timing: SearchTiming | None) -> Run:
    """Every query's hits: one query per call with one thread (each call timed), else ``SEARCH_BATCH``
    queries per call across the threads. A query's hits depend on neither (Anserini's batch search
    runs the same single-query search)."""
    timing = timing if timing is not None else SearchTiming()
    timing.threads, timing.queries, timing.latencies = threads, len(qids), []
    run: Run = {}
    k = hits_per_query(k, searcher.get_total_num_docs(), len(qids))
    hits_wanted = k + int(remove_query_id)
    started = time.perf_counter()
    with Progress(len(qids), "search", "query") as progress:
        if threads == 1:
            for qid, query in zip(qids, queries):
                began = time.perf_counter()
                hits = searcher.search(query, hits_wanted)
                timing.latencies.append(time.perf_counter() - began)
                run.update(_collect({qid: hits}, [qid], k, remove_query_id, integer_scores))
                progress.update()
        else:
            for start in range(0, len(qids), SEARCH_BATCH):
                batch_ids = qids[start : start + SEARCH_BATCH]
                batch = searcher.batch_search(_java_list(queries[start : start + SEARCH_BATCH]), _java_list(batch_ids),
                                              hits_wanted, threads)
                run.update(_collect(batch, batch_ids, k, remove_query_id, integer_scores))
                progress.update(len(batch_ids))
    timing.seconds = time.perf_counter() - started
    return run
