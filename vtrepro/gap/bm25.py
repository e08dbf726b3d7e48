"""Model-free retrieval cost of the vocabulary gap (docs/vocabulary-gap.md, "BM25 over tokens"): BM25 through
Lucene (Anserini, ``-pretokenized``) over a tokenizer's tokens, on the raw ids and with each normalization
(:data:`vtrepro.gap.units.NORMALIZATIONS`), each compared with the raw tokens by a paired t-test and a paired
randomization test (:func:`vtrepro.evaluate.trec.compare_runs`).

A token becomes the index term ``t<id>``, where ``<id>`` is the smallest vocabulary id the normalization merges it
with: terms carry no text, so no analyzer, stemmer or query syntax touches them.
"""
from __future__ import annotations

import logging
from pathlib import Path

from vtrepro.core.cli import DEFAULT_THREADS
from vtrepro.evaluate.trec import compare_runs, evaluate_run
from vtrepro.gap.corpus import TokenizedDataset
from vtrepro.gap.units import NORMALIZATIONS
from vtrepro.index.lucene import build_pretokenized_bm25_index
from vtrepro.search.lucene import search_pretokenized_bm25
from vtrepro.search.runs import Bm25Options, Run, write_trec_run

logger = logging.getLogger(__name__)

METRICS = ("ndcg@10", "recall@100")
DEPTH = 100
"""Hits per query: the deepest cutoff of :data:`METRICS`."""


def terms(tokenized: TokenizedDataset, normalization: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Documents' and queries' index terms under ``normalization`` (specials left out)."""
    keys = tokenized.keys(normalization)
    specials = tokenized.vocabulary.specials

    def spelled(ids: list[int]) -> list[str]:
        return [f"t{keys[index]}" for index in ids if index not in specials]

    return ({doc_id: spelled(ids) for doc_id, ids in tokenized.documents.items()},
            {qid: spelled(ids) for qid, ids in tokenized.queries.items()})


def bm25_run(tokenized: TokenizedDataset, normalization: str, folder: Path, threads: int = DEFAULT_THREADS,
             bm25: Bm25Options | None = None, k: int = DEPTH) -> tuple[Run, dict[str, int]]:
    """Index ``tokenized``'s documents under ``normalization`` into ``folder/index``, search its queries, write
    ``folder/run.trec``; the run and the index's statistics."""
    bm25 = bm25 or Bm25Options()
    documents, queries = terms(tokenized, normalization)
    stats = build_pretokenized_bm25_index(list(documents.items()), folder / "index", threads=threads)
    run = search_pretokenized_bm25(folder / "index", queries, k, threads, k1=bm25.k1, b=bm25.b)
    write_trec_run(run, folder / "run.trec")
    return run, stats


def bm25_figures(tokenized: TokenizedDataset, output: Path, threads: int = DEFAULT_THREADS,
                 normalizations: tuple[str, ...] = NORMALIZATIONS, bm25: Bm25Options | None = None) -> list[dict]:
    """BM25 under each normalization (raw first, the baseline of the paired tests), as written into ``bm25.json``;
    each run's index and run file under ``output/<normalization>/``."""
    qrels = tokenized_qrels(tokenized)
    rows: list[dict] = []
    raw: Run = {}
    for normalization in ("raw", *[name for name in normalizations if name != "raw"]):
        run, stats = bm25_run(tokenized, normalization, output / normalization, threads, bm25)
        raw = run if normalization == "raw" else raw
        comparison = {} if normalization == "raw" else compare_runs(run, raw, qrels, METRICS)
        rows.append({"tokenizer": tokenized.vocabulary.name, "dataset": tokenized.dataset,
                     "normalization": normalization,
                     "index": {"documents": stats["documents"], "total_terms": stats["total_terms"]},
                     "scores": evaluate_run(run, qrels, METRICS), "against_raw": comparison})
        logger.info(f"[{tokenized.vocabulary.name} / {tokenized.dataset}] BM25 {normalization}: "
                    + ", ".join(f"{metric} {value:.4f}" for metric, value in rows[-1]["scores"].items()))
    return rows


def tokenized_qrels(tokenized: TokenizedDataset) -> dict[str, dict[str, int]]:
    """The split's qrels of the tokenized queries (every judgement, as pytrec_eval scores them)."""
    return {qid: judged for qid, judged in tokenized.qrels.items() if qid in tokenized.queries}
