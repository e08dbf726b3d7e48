"""Batch search with Anserini and TREC run files.

``python -m vtrepro.search --index INDEX --queries queries.jsonl --output run.trec`` runs impact
search with the integer query vectors of an encoded ``queries.jsonl`` (``{"id", "vector"}``).
Hits are ordered by score, ties by document id; a query's own id is removed from its hits
(the BEIR convention); the top ``k`` (default 1000) are kept. Impact scores are exact integer dot
products: Anserini lowers tied scores by a few ulps to encode its docid tie-break, and that
adjustment is undone here, since every impact score is an integer by construction.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping

from vtrepro.cli import cli_entry
from vtrepro.errors import VtreproError
from vtrepro.io import atomic_write, read_jsonl
from vtrepro.java import java_class

Run = dict[str, dict[str, float]]
"""qid -> {docid: score}, the shape pytrec_eval takes."""


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
) -> Run:
    """Impact search: each document scores the integer dot product of its and the query's vector."""
    integer = java_class("java.lang.Integer")
    hash_map = java_class("java.util.HashMap")
    qids = list(queries)
    java_queries = []
    for qid in qids:
        query = hash_map()
        for term, weight in queries[qid].items():
            if not isinstance(weight, int):
                raise VtreproError(f"query '{qid}' has a non-integer weight for '{term}': quantize query vectors")
            query.put(term, integer(weight))
        java_queries.append(query)
    longest = max((len(vector) for vector in queries.values()), default=0)
    index_searcher = java_class("org.apache.lucene.search.IndexSearcher")
    if longest > index_searcher.getMaxClauseCount():  # dense queries (an untrained model) have thousands of terms
        index_searcher.setMaxClauseCount(longest)
    searcher = java_class("io.anserini.search.SimpleImpactSearcher")(str(index_dir))
    try:
        hits = searcher.batch_search(_java_list(java_queries), _java_list(qids), k + int(remove_query_id), threads)
        return _collect(hits, qids, k, remove_query_id, integer_scores=True)
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
) -> Run:
    """BM25 search with Anserini's default analyzer."""
    qids = list(queries)
    searcher = java_class("io.anserini.search.SimpleSearcher")(str(index_dir))
    try:
        searcher.set_bm25(float(k1), float(b))
        texts = _java_list(queries[qid] for qid in qids)
        hits = searcher.batch_search(texts, _java_list(qids), k + int(remove_query_id), threads)
        return _collect(hits, qids, k, remove_query_id, integer_scores=False)
    finally:
        searcher.close()


def write_trec_run(run: Run, path: str | Path, tag: str = "vtrepro") -> None:
    """Write a TREC run file (``qid Q0 docid rank score tag``), atomically, in run order."""
    with atomic_write(path) as handle:
        for qid, hits in run.items():
            for rank, (docid, score) in enumerate(hits.items(), start=1):
                handle.write(f"{qid} Q0 {docid} {rank} {score:.6f} {tag}\n")


def read_trec_run(path: str | Path) -> Run:
    """Read a TREC run file; a malformed line is a one-line error naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise VtreproError(f"{path}: run file not found")
    run: Run = {}
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            try:
                qid, _, docid, _, score = fields[:5]
                run.setdefault(qid, {})[docid] = float(score)
            except ValueError:
                raise VtreproError(
                    f"{path}:{line_number}: expected 'qid Q0 docid rank score tag', got {line.strip()[:80]!r}"
                ) from None
    return run


def read_query_vectors(path: str | Path) -> dict[str, dict[str, int]]:
    """Encoded queries (``{"id", "vector"}`` per line) as qid -> {term: integer weight}."""
    queries: dict[str, dict[str, int]] = {}
    for line_number, record in read_jsonl(path):
        if "id" not in record or not isinstance(record.get("vector"), dict):
            raise VtreproError(f"{path}:{line_number}: expected {{\"id\": ..., \"vector\": {{term: int}}}}")
        vector = record["vector"]
        if not all(isinstance(weight, int) for weight in vector.values()):
            raise VtreproError(f"{path}:{line_number}: query vector weights must be integers (quantize them)")
        queries[str(record["id"])] = vector
    return queries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vtrepro.search", description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, type=Path, help="Lucene impact index")
    parser.add_argument("--queries", required=True, type=Path, help="encoded queries.jsonl ({id, vector})")
    parser.add_argument("--output", required=True, type=Path, help="TREC run file to write")
    parser.add_argument("--k", type=int, default=1000, help="hits per query (default 1000)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--keep-query-id", action="store_true", help="keep hits whose docid equals the query id")
    args = parser.parse_args(argv)
    run = search_impact(args.index, read_query_vectors(args.queries), args.k, args.threads, not args.keep_query_id)
    write_trec_run(run, args.output)
    print(f"{sum(map(len, run.values()))} hits for {len(run)} queries -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_entry(main)())
