"""Score TREC runs with pytrec_eval: nDCG@10, R@100, R@1000, MRR@10, rounded to 4 decimals.

``python -m vtrepro evaluate --run run.trec --qrels qrels.tsv`` (or ``--dataset``) prints the scores;
``--baseline-run other.trec`` compares the two runs query by query with paired significance tests.
Means are over every judged query, a query without results scoring 0: ``trec_eval -c``, which is
how Pyserini's published BEIR figures are computed.
"""
from __future__ import annotations

import re

from vtrepro.core.errors import VtreproError
from vtrepro.search.runs import Run

# scipy is imported only for significance tests, on purpose: scoring a run does not need it. pytrec_eval (which
# imports numpy) and numpy are imported where runs are scored and compared: every command's `--help` stays fast.

DEFAULT_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "recall@1000", "mrr@10")
_TREC_MEASURES = {"ndcg": "ndcg_cut", "recall": "recall", "precision": "P", "map": "map_cut"}
RANDOMIZATION_SAMPLES = 10_000
RANDOMIZATION_SEED = 0
"""Seed of the randomization test's sign flips: every comparison of the same runs gives the same p-value."""
MAX_CUTOFF = 100_000
"""The deepest metric cutoff: far beyond any run's depth that means something (BEIR's deepest is 1000), and
small enough for trec_eval, which misreads cutoffs beyond its C ``long`` (an internal error before)."""


def parse_metric(metric: str) -> tuple[str, int]:
    """``("ndcg", 10)`` for ``"ndcg@10"``; an unknown name, or a cutoff that is not a plain decimal integer in
    1..:data:`MAX_CUTOFF` written without leading zeros, is a one-line error."""
    name, _, cutoff = metric.partition("@")
    if name not in (*_TREC_MEASURES, "mrr") or not re.fullmatch(r"-?[0-9]+", cutoff):
        raise VtreproError(
            f"unknown metric {metric!r:.60}: use name@k with name one of ndcg, recall, precision, map, mrr"
        )
    if len(cutoff.lstrip("-0")) > len(str(MAX_CUTOFF)) or int(cutoff) > MAX_CUTOFF:
        raise VtreproError(f"metric {metric!r:.60} has a cutoff above {MAX_CUTOFF}; the cutoff must be in "
                           f"1..{MAX_CUTOFF}, e.g. {name}@1000")
    if int(cutoff) < 1:
        raise VtreproError(f"metric '{metric}' has cutoff {cutoff}; the cutoff must be >= 1, e.g. {name}@10")
    if cutoff != str(int(cutoff)):
        raise VtreproError(f"metric '{metric}': write the cutoff without leading zeros: {name}@{int(cutoff)}")
    return name, int(cutoff)


def _top_k(run: Run, k: int) -> Run:
    """Keep each query's k best hits in trec_eval's own order (score, then docid, descending)."""
    return {
        qid: dict(sorted(hits.items(), key=lambda item: (item[1], item[0]), reverse=True)[:k])
        for qid, hits in run.items()
    }


def per_query_scores(run: Run, qrels: dict[str, dict[str, int]], metric: str) -> dict[str, float]:
    """``metric`` of every judged query (sorted ids); a query without results scores 0."""
    import pytrec_eval

    name, cutoff = parse_metric(metric)
    judged_run = {qid: hits for qid, hits in run.items() if qid in qrels and hits}
    if name == "mrr":
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
        results = {qid: result["recip_rank"] for qid, result in evaluator.evaluate(_top_k(judged_run, cutoff)).items()}
    else:
        measure = _TREC_MEASURES[name]
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {f"{measure}.{cutoff}"})
        results = {qid: result[f"{measure}_{cutoff}"] for qid, result in evaluator.evaluate(judged_run).items()}
    return {qid: results.get(qid, 0.0) for qid in sorted(qrels)}


def _check_judged(run: Run, qrels: dict[str, dict[str, int]]) -> None:
    if not any(hits for qid, hits in run.items() if qid in qrels):
        raise VtreproError("the run has no results for any judged query: check that query ids match the qrels")


def evaluate_per_query(
    run: Run, qrels: dict[str, dict[str, int]], metrics: tuple[str, ...] = DEFAULT_METRICS
) -> dict[str, dict[str, float]]:
    """Each metric of every judged query (sorted ids; no results = 0)."""
    _check_judged(run, qrels)
    return {metric: per_query_scores(run, qrels, metric) for metric in metrics}


def mean_scores(per_query: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the judged queries, rounded to 4 decimals as trec_eval prints it."""
    return {metric: round(sum(scores.values()) / len(scores), 4) for metric, scores in per_query.items()}


def evaluate_run(
    run: Run, qrels: dict[str, dict[str, int]], metrics: tuple[str, ...] = DEFAULT_METRICS
) -> dict[str, float]:
    """Mean of each metric over all judged queries (no results = 0), rounded to 4 decimals."""
    return mean_scores(evaluate_per_query(run, qrels, metrics))


def compare_runs(
    run: Run,
    baseline: Run,
    qrels: dict[str, dict[str, int]],
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    samples: int = RANDOMIZATION_SAMPLES,
    seed: int = RANDOMIZATION_SEED,
) -> dict[str, dict[str, float | int]]:
    """Per metric, :func:`paired_comparison` of ``run`` with ``baseline`` over all judged queries."""
    ours, theirs = evaluate_per_query(run, qrels, metrics), evaluate_per_query(baseline, qrels, metrics)
    return {metric: paired_comparison(ours[metric], theirs[metric], samples, seed) for metric in metrics}


def paired_comparison(ours: dict[str, float], theirs: dict[str, float], samples: int = RANDOMIZATION_SAMPLES,
                      seed: int = RANDOMIZATION_SEED) -> dict[str, float | int]:
    """Both means over the same queries, their difference, queries won/lost/tied, and two-sided p-values
    of a paired t-test and of a paired randomization test (``samples`` seeded sign flips)."""
    import numpy as np
    from scipy.stats import ttest_rel

    if set(ours) != set(theirs):
        raise VtreproError(f"the two runs were scored on different queries ({len(ours)} and {len(theirs)}); "
                           "compare runs of the same dataset and split")
    first = np.array([ours[qid] for qid in sorted(ours)])
    second = np.array([theirs[qid] for qid in sorted(ours)])
    difference = first - second
    observed = abs(difference.mean())
    if np.all(difference == 0):
        p_t, p_randomization = 1.0, 1.0
    else:
        p_t = float(ttest_rel(first, second).pvalue)
        signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(samples, len(difference)))
        flipped = np.abs((signs * difference).mean(axis=1))
        p_randomization = float((np.sum(flipped >= observed - 1e-12) + 1) / (samples + 1))
    return {
        "run": round(float(first.mean()), 4), "baseline": round(float(second.mean()), 4),
        "difference": round(float(difference.mean()), 4),
        "wins": int(np.sum(difference > 0)), "losses": int(np.sum(difference < 0)), "ties": int(np.sum(difference == 0)),
        "p_t_test": round(p_t, 4), "p_randomization": round(p_randomization, 4),
    }
