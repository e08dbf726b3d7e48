"""Score TREC runs with pytrec_eval: nDCG@10, R@100, R@1000, MRR@10, rounded to 4 decimals.

``python -m vtrepro.evaluate --run run.trec --qrels qrels.tsv`` (or ``--dataset``) prints the scores.
Means are over every judged query, a query without results scoring 0: ``trec_eval -c``, which is
how Pyserini's published BEIR figures are computed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytrec_eval

from vtrepro.errors import VtreproError, cli_entry
from vtrepro.search import Run, read_trec_run

DEFAULT_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "recall@1000", "mrr@10")
_TREC_MEASURES = {"ndcg": "ndcg_cut", "recall": "recall", "precision": "P", "map": "map_cut"}


def _parse_metric(metric: str) -> tuple[str, int]:
    name, _, cutoff = metric.partition("@")
    if name not in (*_TREC_MEASURES, "mrr") or not cutoff.isdigit():
        raise VtreproError(
            f"unknown metric '{metric}': use name@k with name one of ndcg, recall, precision, map, mrr"
        )
    return name, int(cutoff)


def _top_k(run: Run, k: int) -> Run:
    """Keep each query's k best hits in trec_eval's own order (score, then docid, descending)."""
    return {
        qid: dict(sorted(hits.items(), key=lambda item: (item[1], item[0]), reverse=True)[:k])
        for qid, hits in run.items()
    }


def evaluate_run(
    run: Run, qrels: dict[str, dict[str, int]], metrics: tuple[str, ...] = DEFAULT_METRICS
) -> dict[str, float]:
    """Mean of each metric over all judged queries (no results = 0), rounded to 4 decimals."""
    judged_run = {qid: hits for qid, hits in run.items() if qid in qrels and hits}
    if not judged_run:
        raise VtreproError("the run has no results for any judged query: check that query ids match the qrels")
    scores: dict[str, float] = {}
    for metric in metrics:
        name, cutoff = _parse_metric(metric)
        if name == "mrr":
            evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
            per_query = evaluator.evaluate(_top_k(judged_run, cutoff))
            values = [result["recip_rank"] for result in per_query.values()]
        else:
            measure = _TREC_MEASURES[name]
            evaluator = pytrec_eval.RelevanceEvaluator(qrels, {f"{measure}.{cutoff}"})
            per_query = evaluator.evaluate(judged_run)
            values = [result[f"{measure}_{cutoff}"] for result in per_query.values()]
        scores[metric] = round(sum(values) / len(qrels), 4)
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vtrepro.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="TREC run file")
    judgements = parser.add_mutually_exclusive_group(required=True)
    judgements.add_argument("--qrels", type=Path, help="qrels file (BEIR TSV with header, or TREC 4-column)")
    judgements.add_argument("--dataset", help="BEIR dataset name or folder; uses its qrels/<split>.tsv")
    parser.add_argument("--split", default="test")
    parser.add_argument("--data-dir", help="data root holding beir/<dataset> (default: $VTREPRO_DATA)")
    parser.add_argument("--metrics", default=",".join(DEFAULT_METRICS), help="comma-separated, e.g. ndcg@10,recall@100")
    args = parser.parse_args(argv)

    if args.qrels:
        from vtrepro.datasets import read_qrels

        qrels = read_qrels(args.qrels)
    else:
        from vtrepro.datasets import load_dataset

        qrels = load_dataset(args.dataset, args.data_dir).qrels(args.split)
    scores = evaluate_run(read_trec_run(args.run), qrels, tuple(args.metrics.split(",")))
    json.dump(scores, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(cli_entry(main)())
