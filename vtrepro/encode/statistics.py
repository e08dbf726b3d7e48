"""What a set of sparse vectors costs to search: terms per vector and SPLADE's FLOPS figure.

FLOPS (Paria et al., 2020; used by SPLADE) is the expected number of multiplications a query-document
score needs: sum over terms t of p_d(t) * p_q(t), where p_d(t) is the fraction of documents and
p_q(t) the fraction of queries whose vector holds t. Lower is cheaper to search.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from vtrepro.encode.reader import Vector
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM

# numpy is imported where statistics are computed, on purpose: every command's `--help` stays fast.

PERCENTILES = tuple(range(0, 101, 5))
"""Percentiles of terms per vector kept for a distribution plot (0, 5, ..., 100)."""


@dataclass(frozen=True)
class Sparsity:
    """Terms per vector of a set of vectors and how often each term occurs."""

    count: int
    mean_terms: float
    median_terms: float
    percentile_terms: tuple[float, ...]  # at PERCENTILES
    term_vectors: Counter[str]  # term -> number of vectors holding it

    def rate(self, term: str) -> float:
        """The fraction of vectors holding ``term``."""
        return self.term_vectors[term] / self.count if self.count else 0.0


def sparsity(vectors: Iterable[Vector]) -> Sparsity:
    """Statistics of ``vectors``; the placeholder that keeps an empty document indexed is not a term."""
    import numpy as np

    lengths, holding = [], Counter[str]()
    for vector in vectors:
        terms = [term for term in vector if term != EMPTY_DOCUMENT_TERM]
        lengths.append(len(terms))
        holding.update(terms)
    counts = np.asarray(lengths or [0], dtype=np.float64)
    return Sparsity(len(lengths), float(counts.mean()), float(np.median(counts)),
                    tuple(float(value) for value in np.percentile(counts, PERCENTILES)), holding)


def expected_flops(documents: Sparsity, queries: Sparsity) -> float:
    """SPLADE's FLOPS: the expected number of terms a query and a document share, sum of p_d(t) * p_q(t)."""
    shared = sorted(set(documents.term_vectors) & set(queries.term_vectors))  # sorted: a fixed summation order
    return float(sum(documents.rate(term) * queries.rate(term) for term in shared))
