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


class SparsityCounter:
    """Terms per vector counted one vector at a time (a streaming pass adds each vector as it reads it)."""

    def __init__(self) -> None:
        self.lengths: list[int] = []
        self.holding: Counter[str] = Counter()

    def add(self, vector: Vector) -> None:
        """Count one vector; the placeholder that keeps an empty document indexed is not a term."""
        terms = [term for term in vector if term != EMPTY_DOCUMENT_TERM]
        self.lengths.append(len(terms))
        self.holding.update(terms)

    def result(self) -> Sparsity:
        import numpy as np

        counts = np.asarray(self.lengths or [0], dtype=np.float64)
        return Sparsity(len(self.lengths), float(counts.mean()), float(np.median(counts)),
                        tuple(float(value) for value in np.percentile(counts, PERCENTILES)), self.holding)


def sparsity(vectors: Iterable[Vector]) -> Sparsity:
    """Statistics of ``vectors``; the placeholder that keeps an empty document indexed is not a term."""
    counter = SparsityCounter()
    for vector in vectors:
        counter.add(vector)
    return counter.result()


def expected_flops(documents: Sparsity, queries: Sparsity) -> float:
    """SPLADE's FLOPS: the expected number of terms a query and a document share, sum of p_d(t) * p_q(t)."""
    shared = sorted(set(documents.term_vectors) & set(queries.term_vectors))  # sorted: a fixed summation order
    return float(sum(documents.rate(term) * queries.rate(term) for term in shared))
