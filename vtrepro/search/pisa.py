"""Exact impact search with PISA (through pyterrier-pisa's bindings): the same runs as Lucene, faster.

:func:`vtrepro.index.pisa.build_pisa_index` indexes the JsonVectorCollection folder Lucene indexes; :func:`search_pisa`
returns what :func:`vtrepro.search.lucene.search_impact` returns for the same vectors: the same top
``k``, the same integer scores, ties by document id, a query's own id removed
(:func:`vtrepro.search.runs.top_hits`). How PISA is set up so:

- impacts are posted as term frequencies, as they are (scale 1), and scored with PISA's
  ``quantized`` scorer (query weight x frequency): no stemmer, no stopwords;
- terms are posted as the hex of their UTF-8 bytes: PISA lowercases query terms, which would
  send ``Paris`` to ``paris``;
- an integer query weight is exact: the bindings repeat a term ``weight`` times and PISA's weighted
  query counts the repeats; a weight of 0 is refused (Lucene would list documents scoring 0 for it);
- scores are float32 sums, exact integers while the highest score a query could reach (its summed
  weights x the collection's largest impact) stays below 2^24: a query that could go beyond is refused;
- term-at-a-time over an accumulator per document (PISA's ``ranked_or_taat``, exhaustive, so exact at any
  k) with one thread: SPLADE queries are long (52 terms on scifact) and weight frequent terms, so dynamic
  pruning saves little and costs its bookkeeping. The bindings alone, one thread, ms per query: scifact 0.46
  at k=10 and 0.77 at k=1000 against MaxScore's 0.81 and 1.52; a 100,000-document synthetic collection
  fitted to it 5.9 and 6.3 against 19.3 and 24.9 (docs/performance.md). With several threads MaxScore
  (:data:`THREADED_ALGORITHM`).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Mapping

import numpy as np

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_folder_files
from vtrepro.core.progress import Progress
from vtrepro.index.pisa import META_FIX, META_NAME, pisa_bindings, pisa_context, pisa_term, read_pisa_meta
from vtrepro.search.runs import (
    Run,
    SearchOptions,
    SearchTiming,
    check_exact_weights,
    check_query_weights,
    hits_per_query,
    search_until_complete,
    top_hits,
)

logger = logging.getLogger(__name__)

# pyterrier_pisa is imported where it is used, on purpose: it imports pyterrier, pandas and ir_datasets
# (over a second), which `search --help` and Lucene searches do not need.

ALGORITHM = "ranked_or_taat"
"""PISA's query algorithm with one thread (the module's last point); its lazy variant would drop the query weights."""
THREADED_ALGORITHM = "maxscore"
"""PISA's query algorithm with several threads: the bindings share one ``ranked_or_taat`` accumulator among
their threads, which then add into each other's scores (measured: 287 of 300 scifact runs wrong at k=1000)."""


def _checked_pisa_index(index_dir: str | Path) -> dict:
    """The index's metadata, once every file of the folder is a regular file inside it (PISA would block on a
    FIFO or read a device without end)."""
    meta = read_pisa_meta(index_dir)
    if meta is None:
        raise VtreproError(f"{index_dir}: not a PISA index (no {META_NAME}); build it with 'python -m vtrepro index "
                           "--engine pisa --vectors FOLDER --output DIR'")
    check_folder_files(Path(index_dir), META_FIX)
    return meta


def _pisa_queries(queries: Mapping[str, Mapping[str, int]], max_impact: int) -> list[dict[str, float]]:
    """Each query as PISA's bindings take it ({hex term: weight as a float}: they read it as a C double
    without converting), refused where PISA would not be exact."""
    converted = []
    for qid, vector in queries.items():
        check_query_weights(qid, vector, 1, "the PISA engine takes integer weights from 1 (quantize query vectors; "
                                            "drop zero weights)")
        check_exact_weights(qid, vector, max_impact)
        converted.append({pisa_term(term): float(weight) for term, weight in vector.items()})
    return converted


def _call(context, queries: list[dict[str, float]], depth: int, threads: int) -> tuple[int, np.ndarray, np.ndarray,
                                                                                   np.ndarray]:
    """One call of the bindings: (hits found, each hit's query index, document id, score), the arrays set
    aside for ``depth`` hits per query."""
    size = len(queries) * depth
    qidxs, docnos = np.empty(size, dtype=np.int32), np.empty(size, dtype=object)
    ranks, scores = np.empty(size, dtype=np.int32), np.empty(size, dtype=np.float32)
    algorithm = ALGORITHM if threads == 1 else THREADED_ALGORITHM
    found = pisa_bindings().retrieve(context, algorithm, list(enumerate(queries)), k=depth, threads=threads,
                                 query_weighted=1, pretokenised=True, result_qidxs=qidxs, result_docnos=docnos,
                                 result_ranks=ranks, result_scores=scores)
    return found, qidxs, docnos, scores


def _retrieve(context, queries: list[dict[str, float]], depth: int, threads: int) -> list[list[tuple[str, float]]]:
    """PISA's top ``depth`` of each query, by score, ties by document id. The bindings write each query's hits
    as one run of positions, ordered by score (then PISA's internal order), so the arrays are cut where the
    query index changes and only the runs of tied scores are reordered."""
    found, qidxs, docnos, scores = _call(context, queries, depth, threads)
    hits: list[list[tuple[str, float]]] = [[] for _ in queries]
    query_of, documents, values = qidxs[:found], docnos[:found], scores[:found]
    starts = [0, *(np.flatnonzero(query_of[1:] != query_of[:-1]) + 1).tolist()]
    for start, stop in zip(starts, [*starts[1:], found]):
        if stop > start:
            hits[query_of[start]] = _by_score_then_id(documents[start:stop].tolist(), values[start:stop])
    return hits


def _by_score_then_id(documents: list[str], scores: np.ndarray) -> list[tuple[str, float]]:
    """One query's hits as PISA ranked them (``scores`` not increasing), each run of equal scores ordered by
    document id: the order of :func:`vtrepro.search.runs.top_hits`, found without sorting every hit."""
    if len(scores) > 1 and np.any(scores[1:] > scores[:-1]):
        raise RuntimeError("PISA returned hits out of score order")
    edges = np.flatnonzero(scores[1:] != scores[:-1]) + 1
    for start, stop in zip([0, *edges.tolist()], [*edges.tolist(), len(documents)]):
        if stop - start > 1:
            documents[start:stop] = sorted(documents[start:stop])
    return list(zip(documents, scores.tolist()))


def _search_setup(index_dir: str | Path, queries: Mapping[str, Mapping[str, int]],
                  k: int) -> tuple[object, list[dict[str, float]], int, int]:
    """What every search of ``index_dir`` starts from: PISA's retrieval context, the queries as the bindings
    take them (checked), ``k`` cut to the index's documents, and their number."""
    meta = _checked_pisa_index(index_dir)
    k = hits_per_query(k, meta["documents"], len(queries))
    converted = _pisa_queries(queries, meta["max_impact"])
    return pisa_context(Path(index_dir)), converted, k, meta["documents"]


def bindings_seconds_per_query(index_dir: str | Path, queries: Mapping[str, Mapping[str, int]], k: int) -> float:
    """PISA's own time per query, the limit of :func:`search_pisa` with one thread: the bindings' one call for
    every query at the first depth :func:`search_pisa` asks for (one thread, best of two), without any Python
    per query. Includes what the bindings do in C++: reading each query's terms, the search, PISA's sort of
    its hits and their document ids as Python strings."""
    context, converted, k, _ = _search_setup(index_dir, queries, k)
    depth = k + 2
    best = float("inf")
    for _ in range(2):
        began = time.perf_counter()
        _call(context, converted, depth, 1)
        best = min(best, time.perf_counter() - began)
    return best / max(len(converted), 1)


def search_pisa(index_dir: str | Path, queries: Mapping[str, Mapping[str, int]], k: int = SearchOptions.k,
                threads: int = DEFAULT_THREADS, remove_query_id: bool = True, timing: SearchTiming | None = None) -> Run:
    """Impact search with PISA: the run :func:`vtrepro.search.lucene.search_impact` gives for the same
    vectors; ``timing`` as there (per query with one thread; all queries in one call with more)."""
    qids = list(queries)
    context, converted, k, documents = _search_setup(index_dir, queries, k)
    wanted = k + int(remove_query_id)
    timing = timing if timing is not None else SearchTiming()
    timing.threads, timing.queries, timing.latencies = threads, len(qids), []
    run: Run = {}

    def search(positions: list[int], depth: int) -> list[list[tuple[str, float]]]:
        return _retrieve(context, [converted[position] for position in positions], depth, threads)

    started = time.perf_counter()
    with Progress(len(qids), "search (PISA)", "query") as progress:
        if threads == 1:  # each query timed to its run, as Lucene's
            for position, qid in enumerate(qids):
                began = time.perf_counter()
                hits = search_until_complete(search, [position], wanted, documents)[0]
                run[qid] = top_hits(qid, hits, k, remove_query_id, ranked=True)
                timing.latencies.append(time.perf_counter() - began)
                progress.update()
        else:
            found = search_until_complete(search, list(range(len(qids))), wanted, documents, progress.update)
            run.update((qid, top_hits(qid, hits, k, remove_query_id, ranked=True)) for qid, hits in zip(qids, found))
    timing.seconds = time.perf_counter() - started
    return run
