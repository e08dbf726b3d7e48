"""Batch search with Anserini and TREC run files.

``python -m vtrepro.search --index INDEX --queries queries.jsonl --output run.trec`` runs impact
search with the integer query vectors of an encoded ``queries.jsonl`` (``{"id", "vector"}``).
Hits are ordered by score, ties by document id; a query's own id is removed from its hits
(the BEIR convention); the top ``k`` (default 1000, at most :data:`MAX_K`) are kept. Impact scores are exact integer dot
products: Anserini lowers tied scores by a few ulps to encode its docid tie-break, and that
adjustment is undone here, since every impact score is an integer by construction.

``--engine pisa`` gives the same run with PISA (:mod:`vtrepro.search.pisa`) from a PISA index
folder, built there from ``--vectors`` when given (kept when it already holds those vectors).
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from vtrepro.core.cli import add_threads, cli_entry, command_parser, number_in
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, check_output, read_lines
from vtrepro.core.java import java_class
from vtrepro.core.progress import Progress
from vtrepro.encode.fingerprint import MAX_IMPACT, load_vectors
from vtrepro.encode.writer import vectors_folder
from vtrepro.index.lucene import check_index_folder, index_errors, verified_index

Run = dict[str, dict[str, float]]
"""qid -> {docid: score}, the shape pytrec_eval takes."""
SEARCH_BATCH = 256
MAX_K = 10_000
"""Most hits per query: ten times the deepest cutoff evaluated here (recall@1000, the paper's k). The
engines set aside room for k hits per query before they search."""
MAX_RUN_HITS = 20_000_000
"""Most hits one search may return (queries x hits per query, once k is cut to the documents): a run is
held in memory, about 150 bytes a hit (3 GB); the largest BEIR query set at k=1000 (quora, 10,000
queries) returns 10 million."""


@dataclass
class SearchTiming:
    """Wall time of a search. With one thread each query is searched and timed on its own (latency);
    with more, queries run in batches across the threads and only the total is known (throughput)."""

    threads: int = 1
    queries: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds per query, one-thread searches only

    def figures(self) -> dict[str, float | int | None]:
        """Threads, queries per second, and latency in milliseconds (None unless timed per query)."""
        latency: dict[str, float | None] = dict.fromkeys(("latency_mean_ms", "latency_p50_ms", "latency_p99_ms"))
        if self.latencies:
            milliseconds = np.asarray(self.latencies) * 1000.0
            latency = {"latency_mean_ms": float(milliseconds.mean()),
                       "latency_p50_ms": float(np.percentile(milliseconds, 50)),
                       "latency_p99_ms": float(np.percentile(milliseconds, 99))}
        rate = self.queries / self.seconds if self.seconds > 0 else None
        return {"search_threads": self.threads, "search_queries_per_s": rate, **latency}


def add_k(parser: argparse._ActionsContainer) -> None:
    """``--k``: hits per query, 1 to :data:`MAX_K` (default 1000)."""
    parser.add_argument("--k", type=number_in(int, minimum=1, maximum=MAX_K), default=1000,
                        help=f"hits per query, 1 to {MAX_K} (default 1000, the paper's); a k above the documents "
                             f"in the index is cut to them before searching (the same run), and queries x hits "
                             f"must stay within {MAX_RUN_HITS:,} (a run is held in memory)")


def hits_per_query(k: int, documents: int, queries: int) -> int:
    """``k`` cut to the index's ``documents`` (no engine returns more hits than documents, so the run is the
    same), refused when ``queries`` searches of that depth would return more than :data:`MAX_RUN_HITS`."""
    k = max(1, min(k, documents))
    if k * queries > MAX_RUN_HITS:
        raise VtreproError(f"{queries} queries x {k} hits per query would return {k * queries:,} hits, more than "
                           f"the {MAX_RUN_HITS:,} a run may hold in memory; lower k or search the queries in parts")
    return k


def _collect(hits_by_qid, qids: list[str], k: int, remove_query_id: bool, integer_scores: bool) -> Run:
    run: Run = {}
    for qid in qids:
        hits = hits_by_qid.get(qid) or []
        score_of = (lambda hit: float(round(hit.score))) if integer_scores else (lambda hit: float(hit.score))
        scored = [(hit.docid, score_of(hit)) for hit in hits if not (remove_query_id and hit.docid == qid)]
        scored.sort(key=lambda item: (-item[1], item[0]))
        run[qid] = dict(scored[:k])
    return run


def _java_list(items) -> object:
    array_list = java_class("java.util.ArrayList")()
    for item in items:
        array_list.add(item)
    return array_list


def search_impact(
    index_dir: str | Path,
    queries: Mapping[str, Mapping[str, int]],
    k: int = 1000,
    threads: int = 1,
    remove_query_id: bool = True,
    timing: SearchTiming | None = None,
) -> Run:
    """Impact search: each document scores the integer dot product of its and the query's vector;
    ``timing``, when given, receives the search's wall time (per query with one thread)."""
    integer = java_class("java.lang.Integer")
    hash_map = java_class("java.util.HashMap")
    qids = list(queries)
    java_queries = []
    for qid in qids:
        query = hash_map()
        for term, weight in queries[qid].items():
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= MAX_IMPACT:
                raise VtreproError(f"query '{qid}' has weight {weight!r} for '{term}': weights must be integers in "
                                   f"0..{MAX_IMPACT} (quantize query vectors)")
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
    k: int = 1000,
    threads: int = 1,
    k1: float = 0.9,
    b: float = 0.4,
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


def write_trec_run(run: Run, path: str | Path, tag: str = "vtrepro") -> None:
    """Write a TREC run file (``qid Q0 docid rank score tag``), atomically, in run order."""
    with atomic_write(path) as handle:
        for qid, hits in run.items():
            for rank, (docid, score) in enumerate(hits.items(), start=1):
                handle.write(f"{qid} Q0 {docid} {rank} {score:.6f} {tag}\n")


def read_trec_run(path: str | Path) -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``, six fields separated by whitespace).

    What trec_eval would read differently is refused, naming file and line: a line with another
    number of fields (an id holding a space), a rank or score that is not a number, a non-finite
    score, the same document twice for a query.
    """
    path = Path(path)
    run: Run = {}
    for line_number, line in read_lines(path):
        fields = line.split()
        if not fields:
            continue
        where = f"{path}:{line_number}"
        if len(fields) != 6:
            raise VtreproError(f"{where}: expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)} in "
                               f"{line.strip()[:80]!r}; ids must not hold whitespace")
        qid, _, docid, rank, score_text, _ = fields
        try:
            int(rank)
            score = float(score_text)
        except ValueError:
            raise VtreproError(f"{where}: rank must be an integer and score a number, got {rank!r} and "
                               f"{score_text!r}") from None
        if not math.isfinite(score):
            raise VtreproError(f"{where}: score {score_text} is not finite; fix the run that wrote it")
        hits = run.setdefault(qid, {})
        if docid in hits:
            raise VtreproError(f"{where}: document '{docid}' appears twice for query '{qid}'; keep one line")
        hits[docid] = score
    return run


def read_query_vectors(path: str | Path) -> dict[str, dict[str, int]]:
    """Encoded queries (``{"id", "vector"}`` per line) as qid -> {term: integer weight}, every line checked
    like a document vector (:mod:`vtrepro.encode.fingerprint`); a query may have an empty vector."""
    return load_vectors(Path(path), allow_empty=True)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = command_parser("search", __doc__)
    parser.add_argument("--index", required=True, type=Path, help="Lucene impact index (PISA index with --engine pisa)")
    parser.add_argument("--engine", choices=("lucene", "pisa"), default="lucene",
                        help="lucene (default) or pisa: the same run, PISA's MaxScore is faster")
    parser.add_argument("--vectors", type=Path,
                        help="with --engine pisa: build the PISA index at --index from this JsonVectorCollection folder "
                             "(kept when it already holds these vectors)")
    parser.add_argument("--queries", required=True, type=Path, help="encoded queries.jsonl ({id, vector})")
    parser.add_argument("--output", required=True, type=Path, help="TREC run file to write (replaced when complete)")
    add_k(parser)
    add_threads(parser, "search threads (results do not depend on it)")
    parser.add_argument("--keep-query-id", action="store_true", help="keep hits whose docid equals the query id")
    args = parser.parse_args(argv)
    if args.vectors is not None and args.engine != "pisa":
        raise VtreproError("--vectors builds a PISA index: use it with --engine pisa (build Lucene indexes with "
                           "'python -m vtrepro index')")
    vectors = None if args.vectors is None else vectors_folder(args.vectors)
    check_output(args.output, [args.queries, args.index, vectors])
    if vectors is not None:  # the PISA index built from them is an output too
        check_output(args.index, [vectors, args.queries], kind="folder")
    queries = read_query_vectors(args.queries)
    if args.engine == "pisa":
        from vtrepro.search.pisa import ensure_pisa_index, search_pisa  # pyterrier_pisa: only for this engine

        if vectors is not None:
            ensure_pisa_index(vectors, args.index)
        run = search_pisa(args.index, queries, args.k, args.threads, not args.keep_query_id)
    else:
        run = search_impact(check_index_folder(args.index), queries, args.k, args.threads, not args.keep_query_id)
    write_trec_run(run, args.output)
    print(f"{sum(map(len, run.values()))} hits for {len(run)} queries -> {args.output}")
    return 0
