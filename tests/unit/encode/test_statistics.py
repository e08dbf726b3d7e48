"""Sparsity and SPLADE's FLOPS, checked against brute force over every query-document pair."""
import itertools
import random

import pytest

from vtrepro.encode.statistics import expected_flops, sparsity
from vtrepro.encode.vectors import EMPTY_DOCUMENT_TERM


def _random_vectors(rng: random.Random, count: int, vocabulary: list[str]) -> list[dict[str, int]]:
    return [{term: rng.randint(1, 300) for term in rng.sample(vocabulary, rng.randint(0, 12))} for _ in range(count)]


def test_flops_is_the_mean_number_of_shared_terms():
    rng = random.Random(7)
    vocabulary = [f"t{index}" for index in range(40)]
    documents, queries = _random_vectors(rng, 60, vocabulary), _random_vectors(rng, 25, vocabulary)
    brute = sum(len(set(query) & set(document)) for query, document in itertools.product(queries, documents))
    assert expected_flops(sparsity(documents), sparsity(queries)) == pytest.approx(brute / (60 * 25), rel=1e-12)


def test_the_empty_document_placeholder_is_not_a_term():
    documents = sparsity([{EMPTY_DOCUMENT_TERM: 1}, {"a": 3, "b": 1}, {"a": 1, "b": 2, "c": 5}])
    assert (documents.count, documents.mean_terms, documents.median_terms) == (3, 5 / 3, 2.0)
    assert documents.percentile_terms[0] == 0 and documents.percentile_terms[-1] == 3
    assert expected_flops(documents, sparsity([{EMPTY_DOCUMENT_TERM: 1}])) == 0.0
