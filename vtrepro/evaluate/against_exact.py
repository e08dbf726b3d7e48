"""How far an approximate run is from the exact run on the same vectors: recall against exact, and nDCG@10.

``recall@d against exact`` is, over the exact run's queries that have hits, the mean share of the exact top
``d`` (by score, ties by document id: :func:`vtrepro.search.runs.top_hits`) that the approximate top ``d``
holds; a query the approximate run lacks counts 0. It is None where either run holds fewer than ``d`` hits per
query by its ``k`` (the figure would say nothing). With judgments, the nDCG@10 of both runs and their difference
(approximate - exact). :func:`write_agreement` puts it beside the run as ``<run>.agreement.json``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from vtrepro.core.io import write_json
from vtrepro.evaluate.trec import per_query_scores
from vtrepro.search.runs import Run

DEPTHS = (10, 1000)
"""The depths recall against exact is measured at: the paper's two cutoffs."""
SUFFIX = ".agreement.json"


def recall_against_exact(run: Run, exact: Run, depth: int) -> float:
    """Mean share of each exact top ``depth`` found in ``run``'s top ``depth`` (queries with exact hits)."""
    shares = []
    for qid, hits in exact.items():
        wanted = list(hits)[:depth]
        if wanted:
            found = set(list(run.get(qid, {}))[:depth])
            shares.append(sum(doc in found for doc in wanted) / len(wanted))
    return sum(shares) / len(shares) if shares else 1.0


def agreement(run: Run, exact: Run, k: int, exact_k: int, qrels: dict[str, dict[str, int]] | None = None) -> dict:
    """The approximate ``run`` (searched to ``k``) against the ``exact`` run (to ``exact_k``): recall at each of
    :data:`DEPTHS` both reach, and with ``qrels`` the nDCG@10 of each and the difference."""
    figures: dict[str, Any] = {"queries": len(exact), "k": k}
    for depth in DEPTHS:
        figures[f"recall@{depth}_vs_exact"] = recall_against_exact(run, exact, depth) if min(k, exact_k) >= depth else None
    if qrels is not None:
        ours, theirs = (_mean_ndcg10(hits, qrels) for hits in (run, exact))
        figures.update({"ndcg@10": round(ours, 4), "ndcg@10_exact": round(theirs, 4),
                        "ndcg@10_difference": round(ours - theirs, 4)})
    return figures


def _mean_ndcg10(run: Run, qrels: dict[str, dict[str, int]]) -> float:
    """nDCG@10 over every judged query (no results = 0), not rounded: the difference is rounded once."""
    scores = per_query_scores(run, qrels, "ndcg@10")
    return sum(scores.values()) / len(scores) if scores else 0.0


def agreement_path(run_path: str | Path) -> Path:
    """Where the agreement of the run at ``run_path`` is written: beside it, ``<run file name>.agreement.json``."""
    run_path = Path(run_path)
    return run_path.with_name(run_path.name + SUFFIX)


def write_agreement(run_path: str | Path, figures: dict) -> Path:
    """Write ``figures`` beside the run at ``run_path`` (atomically); returns the path."""
    path = agreement_path(run_path)
    write_json(path, figures)
    return path
